//! Service templates (`environment.services[].template`): a prepared state a
//! service starts from (a database cluster, say), made once per host and
//! shared, read-only, by every run that declares the same template.
//!
//! The host's templates live in `<runtime dir>/templates/<key>`, where the key
//! is the SHA-256 of what makes the template (see [`ServiceTemplate`]). At seal
//! a run finds its template there, or, when it is not there yet, gets an empty
//! directory instead and makes the template itself: its service's template
//! command runs in the sealed sandbox before the service starts, and what it
//! left in the run's layer is copied into the store and renamed into place (a
//! concurrent run that published first wins; the other copy is dropped). Either
//! way the run sees the template at its `path` through a copy-on-write layer of
//! its own (`<run dir>/templates/NAME/upper`, applied by the process boundary
//! as a [`TemplateLayer`]), so nothing the run changes there reaches the
//! template or another run.
//!
//! The layers chosen at seal are kept in the run directory: a run attached
//! again, or sealed again after its sandbox was lost, keeps the same ones.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::error::RunErrorKind;
use super::state_files::{read_state, remove_if_present, write_state};
use super::template_store::{self, TemplateError};
use crate::boundary::{
    CommandOutput, CommandSpec, IdentityPlan, ProcessBoundary, RunContext, SourceRecord,
    TemplateLayer,
};
use crate::contract::{Contract, Service, ServiceTemplate};
use crate::digest::sha256_hex;
use crate::evidence::ExitStatusRecord;
use crate::step::StepErrors;

/// The file in the run directory that records the run's template layers.
pub const TEMPLATES_STATE_FILE: &str = "templates.json";
/// The directory of the runtime directory that holds the host's templates, and
/// of a run directory that holds the run's layers.
const TEMPLATES_DIR: &str = "templates";

/// What `services.json` records of a service's template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRecord {
    /// The template's key.
    pub key: String,
    /// Whether this run made it (`false`: it was there, made by an earlier run).
    pub made: bool,
    /// How long making it took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_ms: Option<u64>,
}

/// The run's template layers: the ones recorded in its run directory when it
/// was sealed before, else one per service with a template, found in the
/// host's store or empty for the run to fill, recorded.
pub(super) fn layers(
    run: &RunContext,
    checkout: &SourceRecord,
    identity: &IdentityPlan,
) -> Result<Vec<TemplateLayer>, RunErrorKind> {
    let state = run.run_dir.join(TEMPLATES_STATE_FILE);
    if let Some(layers) = read_state(&state)? {
        return Ok(layers);
    }
    let mut layers = Vec::new();
    for service in &run.contract.environment.services {
        let Some(template) = &service.template else {
            continue;
        };
        layers.push(layer(run, service, template, (checkout, identity))?);
    }
    if !layers.is_empty() {
        write_state(&state, &layers)?;
    }
    Ok(layers)
}

fn layer(
    run: &RunContext,
    service: &Service,
    template: &ServiceTemplate,
    (checkout, identity): (&SourceRecord, &IdentityPlan),
) -> Result<TemplateLayer, RunErrorKind> {
    let key = key(template, &run.contract, checkout, identity)?;
    let stored = run.runtime_dir.join(TEMPLATES_DIR).join(&key);
    // On the run's disk, when it has one: what the service writes is the run's.
    let dir = run.layer_dir().join(TEMPLATES_DIR).join(&service.name);
    let (upper, work, empty) = (dir.join("upper"), dir.join("work"), dir.join("empty"));
    let prepared = stored.is_dir();
    if prepared {
        // Its last use, for pruning (see `prune_templates`).
        let _ = std::fs::File::open(&stored)
            .and_then(|dir| dir.set_modified(std::time::SystemTime::now()));
    }
    let lower = if prepared { stored } else { empty };
    for made in [&upper, &work, &lower] {
        std::fs::create_dir_all(made).map_err(|source| io_error(made, source))?;
    }
    // The root of the view is the upper directory: it gets the template root's
    // mode (a database refuses a data directory others may read).
    let mode = std::fs::metadata(&lower)
        .map_err(|source| io_error(&lower, source))?
        .permissions()
        .mode();
    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(mode))
        .map_err(|source| io_error(&upper, source))?;
    Ok(TemplateLayer {
        service: service.name.clone(),
        target: template.path.clone(),
        key,
        lower,
        upper,
        work,
        prepared,
    })
}

/// The template's key: the SHA-256 of its command, path, the run's identity,
/// the contract's variables and runtime, the checkout's initial state
/// ([`checkout_state`]) and a listing of its inputs.
///
/// The command runs with the whole checkout visible at the workspace root and
/// may read any file of it (`cat seed.txt > $P/seed`): a template made from
/// one revision must never be handed to a run of another, or one run would set
/// another's starting state. So the key covers everything the checkout starts
/// with, not only the `inputs` the contract names.
fn key(
    template: &ServiceTemplate,
    contract: &Contract,
    checkout: &SourceRecord,
    identity: &IdentityPlan,
) -> Result<String, RunErrorKind> {
    let mut inputs = Vec::new();
    for input in &template.inputs {
        let path = Path::new(input);
        let mut listing = Vec::new();
        list(path, path, &mut listing).map_err(|source| io_error(path, source))?;
        inputs.push((input, listing));
    }
    let what = serde_json::json!({
        "command": template.command,
        "path": template.path,
        "uid": identity.uid,
        "gid": identity.gid,
        "env": contract.environment.env,
        "runtime": contract.environment.runtime,
        "checkout": checkout_state(checkout),
        "inputs": inputs,
    });
    Ok(sha256_hex(what.to_string().as_bytes()))
}

/// What a run's checkout holds before any command ran, as far as a template
/// command can read it: the commit's tree (the content of every tracked file,
/// whatever commit it came from), where the checkout came from and what it
/// changed on the tree (a resumed or restored checkout's initial diff), the
/// untracked inputs copied in (where they went and their digests, not the host
/// path they came from) and which submodules were initialised.
fn checkout_state(checkout: &SourceRecord) -> serde_json::Value {
    let inputs: Vec<_> = checkout
        .inputs
        .iter()
        .map(|input| (&input.to, &input.sha256))
        .collect();
    serde_json::json!({
        "tree": checkout.tree,
        "origin": checkout.origin,
        "initial_diff": sha256_hex(checkout.initial_diff.as_bytes()),
        "inputs": inputs,
        "submodules": checkout.submodules,
    })
}

/// One line per file under `path` (itself included, links not followed):
/// relative name, type and mode, size, modification time; sorted.
fn list(root: &Path, path: &Path, out: &mut Vec<String>) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let name = path.strip_prefix(root).unwrap_or(path).display();
    out.push(format!(
        "{name} {:o} {} {}.{}",
        meta.mode(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    ));
    if meta.is_dir() {
        let mut entries = std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<io::Result<Vec<PathBuf>>>()?;
        entries.sort();
        for entry in entries {
            list(root, &entry, out)?;
        }
    }
    Ok(())
}

/// Runs the template command of `service` in the sealed sandbox (its output
/// appended to the service's logs), then keeps what it made as the template.
/// A command that fails is the service's failure, named by the caller.
pub(super) async fn make(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    (template, layer): (&ServiceTemplate, &TemplateLayer),
    logs: &CommandOutput,
    cancel: &CancellationToken,
) -> Result<Result<TemplateRecord, String>, RunErrorKind> {
    let started = Instant::now();
    let mut spec = CommandSpec::new(template.command.clone());
    spec.output = Some(logs.clone());
    let mut execution = match process.spawn(run, &spec).await {
        Ok(execution) => execution,
        Err(e) => {
            return Ok(Err(format!(
                "its template command did not start: {}",
                crate::error_chain(&e)
            )));
        }
    };
    drop((execution.take_stdout(), execution.take_stderr()));
    let exit = tokio::select! {
        exit = execution.wait() => exit?,
        () = cancel.cancelled() => {
            let _ = execution.kill(crate::boundary::KillCause::Cancelled).await;
            return Ok(Err("cancelled while its template was made".into()));
        }
    };
    if exit.status != ExitStatusRecord::Code(0) {
        return Ok(Err(format!(
            "its template command failed ({})",
            exit.status
        )));
    }
    let store = run.runtime_dir.join(TEMPLATES_DIR);
    match template_store::publish(&store, layer, &run.run_id) {
        Ok(()) => {}
        // What the command made cannot be a template: the service's failure.
        Err(refused @ TemplateError::Unsupported { .. }) => {
            return Ok(Err(format!("its template was not kept: {refused}")));
        }
        Err(error) => return Err(RunErrorKind::Template(error)),
    }
    let took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::info!(run_id = %run.run_id, service = %layer.service, key = %layer.key, took_ms,
        "service template made");
    Ok(Ok(TemplateRecord {
        key: layer.key.clone(),
        made: true,
        took_ms: Some(took_ms),
    }))
}

/// Removes the run's template layers and their record from the run directory
/// (the host's templates stay). Only once nothing of the run is mounted.
pub(super) fn remove_files(run_dir: &Path, errors: &mut StepErrors) {
    remove_if_present(&run_dir.join(TEMPLATES_DIR), errors);
    remove_if_present(&run_dir.join(TEMPLATES_STATE_FILE), errors);
}

/// Removes the host's templates (`<runtime dir>/templates`) last used more
/// than `unused_for` ago that no run of `runtime_dir` uses; returns how many
/// went. A template is first renamed out of the store (no run starting then
/// finds it), and put back if a run turns out to have chosen it meanwhile.
///
/// # Ambient authority
/// Reads and removes below `runtime_dir`.
pub fn prune_templates(
    runtime_dir: &Path,
    unused_for: std::time::Duration,
) -> Result<usize, RunErrorKind> {
    let store = runtime_dir.join(TEMPLATES_DIR);
    let entries = match std::fs::read_dir(&store) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => return Err(io_error(&store, source)),
    };
    let cutoff = std::time::SystemTime::now()
        .checked_sub(unused_for)
        .unwrap_or(std::time::UNIX_EPOCH);
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|source| io_error(&store, source))?;
        let key = entry.file_name().to_string_lossy().into_owned();
        // Staging copies of a run making a template are its own.
        if key.starts_with('.') || !crate::digest::is_sha256_hex(&key) {
            continue;
        }
        let path = entry.path();
        let last_used = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .map_err(|source| io_error(&path, source))?;
        if last_used > cutoff || in_use(runtime_dir, &key) {
            continue;
        }
        let aside = store.join(format!(".{key}.pruning-{}", std::process::id()));
        std::fs::rename(&path, &aside).map_err(|source| io_error(&path, source))?;
        if in_use(runtime_dir, &key) {
            std::fs::rename(&aside, &path).map_err(|source| io_error(&aside, source))?;
            continue;
        }
        std::fs::remove_dir_all(&aside).map_err(|source| io_error(&aside, source))?;
        removed += 1;
    }
    Ok(removed)
}

/// Whether a run directory of `runtime_dir` has a layer over the template `key`.
fn in_use(runtime_dir: &Path, key: &str) -> bool {
    let Ok(runs) = std::fs::read_dir(runtime_dir.join(super::paths::RUNS_DIR)) else {
        return false;
    };
    runs.flatten().any(|run| {
        read_state::<Vec<TemplateLayer>>(&run.path().join(TEMPLATES_STATE_FILE))
            .ok()
            .flatten()
            .is_some_and(|layers| layers.iter().any(|l| l.key == key))
    })
}

fn io_error(path: &Path, source: io::Error) -> RunErrorKind {
    RunErrorKind::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_changes_with_a_file_under_the_inputs() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("postgres"), b"15.1").unwrap();
        let listed = |out: &mut Vec<String>| list(dir.path(), dir.path(), out).unwrap();
        let (mut before, mut after) = (Vec::new(), Vec::new());
        listed(&mut before);
        std::fs::write(dir.path().join("postgres"), b"15.10").unwrap();
        listed(&mut after);
        assert_ne!(before, after);
        assert_eq!(before.len(), 2, "{before:?}");
    }
}
