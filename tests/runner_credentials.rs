//! Injected credentials reach the command and never the evidence: the values are
//! redacted from the recorded (and passed-on) output, and the bundle holds only
//! their names and digests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::sync::Arc;

use agent_workspace::namespace::identity::NamespaceIdentity;
use async_trait::async_trait;
use support::{Fixture, assert_intact, shell};
use workspace_core::boundary::{BoundaryError, CredentialSource, IssuedCredential, RunContext};
use workspace_core::contract::{Credential, DurationSpec};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::runner::{CommandIo, CreateOptions};

/// Issues one fixed, test-made token per run.
#[derive(Debug)]
struct TestIssuer {
    token: String,
}

#[async_trait]
impl CredentialSource for TestIssuer {
    async fn issue(
        &self,
        _run: &RunContext,
        credential: &Credential,
    ) -> Result<IssuedCredential, BoundaryError> {
        Ok(IssuedCredential::new(
            credential.name.clone(),
            self.token.clone(),
            u64::MAX,
        ))
    }
}

/// Every file under `dir`, with its bytes.
fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_reaches_the_command_and_its_value_never_the_evidence() {
    let f = Fixture::new("credentials");
    let token = format!("tok-{}-s3cr3t-value", std::process::id());
    let mut stack = f.stack();
    stack.identity = Arc::new(NamespaceIdentity::with_credential_source(Arc::new(
        TestIssuer {
            token: token.clone(),
        },
    )));
    let runner = f.runner_with(stack);
    let mut contract = f.contract();
    contract.identity.credentials = vec![Credential {
        name: "REVIEW_TOKEN".into(),
        source: "test-issuer".into(),
        ttl: DurationSpec::from_secs(600),
        scope: vec!["repo:read".into()],
    }];

    let mut ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    // The command has the value (its digest proves it) and prints it three ways.
    let passed_on = f.base.path().join("passed-on.txt");
    let sink = tokio::fs::File::create(&passed_on).await.unwrap();
    let io = CommandIo::passing_to(sink, tokio::io::sink());
    let outcome = ws
        .exec(
            &shell(
                "printf %s \"$REVIEW_TOKEN\" | sha256sum > digest.txt; \
                 echo \"token: $REVIEW_TOKEN\"; env | grep REVIEW_TOKEN; \
                 echo \"$REVIEW_TOKEN\" >&2",
                "credentials",
            ),
            io,
        )
        .await
        .unwrap();
    assert_eq!(outcome.exit.status, ExitStatusRecord::Code(0));
    let digest = std::fs::read_to_string(ws.source().unwrap().workspace.join("digest.txt"));
    let issued = IssuedCredential::new("REVIEW_TOKEN", token.clone(), 0);
    assert!(
        digest.unwrap().starts_with(&issued.sha256),
        "the command did not get the value"
    );
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);

    let stdout = std::fs::read_to_string(report.evidence.join("commands/0001/stdout")).unwrap();
    assert!(
        stdout.contains("token: [redacted:REVIEW_TOKEN]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("REVIEW_TOKEN=[redacted:REVIEW_TOKEN]"),
        "{stdout}"
    );
    let passed = std::fs::read_to_string(&passed_on).unwrap();
    assert_eq!(passed, stdout, "the caller gets the same redacted output");
    for (path, bytes) in files(&report.evidence) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "{} holds the credential's value",
            path.display()
        );
    }
    // The digest is recorded, so a reviewer can tell which credential was used.
    let observed = std::fs::read_to_string(report.evidence.join("observed.json")).unwrap();
    assert!(observed.contains(&issued.sha256), "{observed}");
}
