//! A `Stack`: one implementation per boundary, checked against a contract as a whole.

use std::sync::Arc;

use super::{
    EnvironmentBoundary, FilesystemBoundary, IdentityBoundary, ProcessBoundary, PromotionBoundary,
    SourceBoundary,
};
use crate::contract::{Contract, Problems};

/// One implementation of each boundary, composed by the host application.
///
/// A backend crate may implement several boundaries with one type; the stack then
/// holds the same `Arc` in several fields.
#[derive(Clone, Debug)]
pub struct Stack {
    /// Source: checkouts.
    pub source: Arc<dyn SourceBoundary>,
    /// Filesystem: path grants.
    pub filesystem: Arc<dyn FilesystemBoundary>,
    /// Process: isolation and execution.
    pub process: Arc<dyn ProcessBoundary>,
    /// Environment: variables, network, limits.
    pub environment: Arc<dyn EnvironmentBoundary>,
    /// Identity: user and credentials.
    pub identity: Arc<dyn IdentityBoundary>,
    /// Promotion: patch and review.
    pub promotion: Arc<dyn PromotionBoundary>,
}

impl Stack {
    /// Every setting of `contract` some boundary of this stack cannot enforce
    /// (what each declares it supports, then what the process boundary
    /// refuses on this host, [`ProcessBoundary::refusals`]), each named by its
    /// field path; `Ok` when the stack can keep the whole contract.
    pub fn check(&self, contract: &Contract) -> Result<(), Problems> {
        let mut problems = Problems::new();
        let source = self.source.capabilities();
        source.check(self.source.name(), &contract.source, &mut problems);
        source.check_pinned(self.source.name(), &contract.environment, &mut problems);
        self.filesystem.capabilities().check(
            self.filesystem.name(),
            &contract.filesystem,
            &mut problems,
        );
        let process = self.process.capabilities();
        process.check(self.process.name(), &contract.process, &mut problems);
        process.check_environment(self.process.name(), &contract.environment, &mut problems);
        self.process.refusals(contract, &mut problems);
        self.environment.capabilities().check(
            self.environment.name(),
            &contract.environment,
            &mut problems,
        );
        self.identity
            .capabilities()
            .check(self.identity.name(), &contract.identity, &mut problems);
        self.promotion.capabilities().check(
            self.promotion.name(),
            &contract.promotion,
            &mut problems,
        );
        problems.into_result()
    }
}
