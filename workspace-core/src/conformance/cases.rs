//! The cases: each tries to break one promise and says what it saw.

use std::path::Path;

use super::Verdict;
use super::fixture::{Fixture, PINNED_FILE, git};
use crate::boundary::{CommandSpec, ProcessCapabilities, PromotionCapabilities, SourceRecord};
use crate::contract::{IsolationLevel, PromotionTarget};
use crate::runner::{CommandIo, CommandOutcome, CreateOptions, RunReport, Workspace};

/// Runs case `name` on `fixture`.
pub(super) async fn run(name: &str, fixture: &Fixture) -> Verdict {
    let result = match name {
        "snapshot" => snapshot(fixture).await,
        "path-scope" => path_scope(fixture).await,
        "concurrency" => concurrency(fixture).await,
        "resume" => resume(fixture).await,
        "credential" => credential(fixture).await,
        "promotion" => promotion(fixture).await,
        "escape-signal" => escape_signal(fixture).await,
        "escape-symlink" => escape_symlink(fixture).await,
        "escape-proc-root" => escape_proc_root(fixture).await,
        "escape-hardlink" => escape_hardlink(fixture).await,
        other => Err(format!("no case is named {other:?}")),
    };
    result.unwrap_or_else(|observed| Verdict::Failed { observed })
}

/// `sh -c SCRIPT`.
fn shell(script: &str) -> CommandSpec {
    CommandSpec::new(vec!["/bin/sh".into(), "-c".into(), script.into()])
}

/// What a command wrote on its stdout, from the run's evidence.
fn stdout_of(report: &RunReport, command: &CommandOutcome) -> String {
    let path = report
        .evidence
        .join(crate::evidence::COMMANDS_DIR)
        .join(format!("{:04}", command.seq))
        .join("stdout");
    std::fs::read_to_string(path).unwrap_or_default()
}

fn failed(observed: impl Into<String>) -> Result<Verdict, String> {
    Ok(Verdict::Failed {
        observed: observed.into(),
    })
}

/// Whether the stack declares any isolation at all: the cases about what a run
/// cannot reach apply only then.
fn isolation_declared(fixture: &Fixture) -> Option<Verdict> {
    without_isolation(&fixture.runner.stack().process.capabilities())
}

/// `Unsupported` for a process boundary that declares no task isolation.
fn without_isolation(capabilities: &ProcessCapabilities) -> Option<Verdict> {
    (!capabilities.isolation.contains(&IsolationLevel::Task)).then(|| Verdict::Unsupported {
        reason: "the process boundary declares no task isolation".into(),
    })
}

/// `Unsupported` for a promotion boundary that cannot promote a patch.
fn without_patch_promotion(capabilities: &PromotionCapabilities) -> Option<Verdict> {
    (!capabilities.targets.contains(&PromotionTarget::Patch)).then(|| Verdict::Unsupported {
        reason: "the promotion boundary cannot promote a patch".into(),
    })
}

/// A workspace of `contract`, sealed.
async fn create(
    fixture: &Fixture,
    contract: crate::contract::Contract,
) -> Result<Workspace, String> {
    fixture
        .runner
        .create(contract, CreateOptions::default())
        .await
        .map_err(|e| format!("create: {}", crate::error_chain(&e)))
}

/// `script` in `workspace`, its output captured.
async fn exec(workspace: &mut Workspace, script: &str) -> Result<CommandOutcome, String> {
    workspace
        .exec(&shell(script), CommandIo::captured())
        .await
        .map_err(|e| format!("exec: {}", crate::error_chain(&e)))
}

/// `workspace` finished: its report.
async fn finish(workspace: Workspace) -> Result<RunReport, String> {
    workspace
        .finish()
        .await
        .map_err(|e| format!("finish: {}", crate::error_chain(&e)))
}

/// One run of `script` on the fixture's `HEAD`: its report and its command.
async fn one_run(fixture: &Fixture, script: &str) -> Result<(RunReport, CommandOutcome), String> {
    one_run_under(fixture, fixture.contract("HEAD"), script).await
}

/// One run of `script` under `contract`: its report and its command.
async fn one_run_under(
    fixture: &Fixture,
    contract: crate::contract::Contract,
    script: &str,
) -> Result<(RunReport, CommandOutcome), String> {
    let report = fixture
        .runner
        .run(
            contract,
            &shell(script),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .map_err(|e| format!("the run failed: {}", crate::error_chain(&e)))?;
    let command = report
        .last_command()
        .cloned()
        .ok_or_else(|| "the run ran no command".to_owned())?;
    Ok((report, command))
}

/// The run gets exactly the pinned revision, not the repository's newer HEAD.
async fn snapshot(fixture: &Fixture) -> Result<Verdict, String> {
    let mut workspace = create(fixture, fixture.contract(&fixture.first)).await?;
    let recorded = workspace.source().map(|s| s.commit.clone());
    let outcome = exec(&mut workspace, &format!("cat {PINNED_FILE}")).await?;
    let report = finish(workspace).await?;
    let seen = stdout_of(&report, &outcome);
    if recorded.as_deref() != Some(fixture.first.as_str()) {
        return failed(format!(
            "source.json records commit {recorded:?}, the contract pins {}",
            fixture.first
        ));
    }
    if seen.trim() != "first" {
        return failed(format!(
            "the run saw {PINNED_FILE} = {:?}, the pinned revision has \"first\" (HEAD {} has \"second\")",
            seen.trim(),
            fixture.second
        ));
    }
    Ok(Verdict::Passed)
}

/// A run cannot write the host outside its workspace, nor read a host file
/// outside its grants, by a path, `..` or a symlink.
async fn path_scope(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let outside = fixture.scratch().join("outside");
    std::fs::create_dir_all(&outside).map_err(|e| format!("{}: {e}", outside.display()))?;
    let secret = format!("host-secret-{}", fixture.token);
    std::fs::write(outside.join("secret.txt"), &secret).map_err(|e| e.to_string())?;
    let written = outside.join("written");
    let escape = format!("escape-{}", fixture.token);
    let script = format!(
        "echo breach > '{written}'; cat '{secret_file}'; ln -s '{secret_file}' link && cat link; \
         echo breach > ../{escape}; echo breach > ../../{escape}; exit 0",
        written = written.display(),
        secret_file = outside.join("secret.txt").display(),
    );
    let mut workspace = create(fixture, fixture.contract("HEAD")).await?;
    let checkout = workspace
        .source()
        .map(|s: &SourceRecord| s.workspace.clone())
        .unwrap_or_default();
    let outcome = exec(&mut workspace, &script).await?;
    // Looked at while the run lives: its run directory goes at cleanup.
    let escaped: Vec<String> = checkout
        .ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(&escape))
        .filter(|path| path.exists())
        .map(|path| path.display().to_string())
        .collect();
    let report = finish(workspace).await?;
    if written.exists() {
        return failed(format!("the run wrote {} on the host", written.display()));
    }
    if !escaped.is_empty() {
        return failed(format!("the run wrote {} by `..`", escaped.join(", ")));
    }
    if stdout_of(&report, &outcome).contains(&secret) {
        return failed(format!(
            "the run read {} on the host",
            outside.join("secret.txt").display()
        ));
    }
    Ok(Verdict::Passed)
}

/// Two live runs at once see nothing of each other: not a file in /tmp, not
/// the other's checkout.
async fn concurrency(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let shared = format!("/tmp/aw-conformance-{}", fixture.token);
    let create = || {
        fixture
            .runner
            .create(fixture.contract("HEAD"), CreateOptions::default())
    };
    let (a, b) = tokio::join!(create(), create());
    let a = a.map_err(|e| format!("create A: {}", crate::error_chain(&e)))?;
    let b = b.map_err(|e| format!("create B: {}", crate::error_chain(&e)))?;
    let a_checkout = a.source().map(|s| s.workspace.clone()).unwrap_or_default();
    let wrote = a
        .exec(
            &shell(&format!("echo A > '{shared}'; echo A > mine-a.txt")),
            CommandIo::captured(),
        )
        .await
        .map_err(|e| format!("exec in A: {}", crate::error_chain(&e)))?;
    let looked = b
        .exec(
            &shell(&format!(
                "test -e '{shared}' && echo saw-tmp; test -e mine-a.txt && echo saw-checkout; \
                 test -e '{}/mine-a.txt' && echo saw-path; exit 0",
                a_checkout.display()
            )),
            CommandIo::captured(),
        )
        .await
        .map_err(|e| format!("exec in B: {}", crate::error_chain(&e)))?;
    let a_report = a.finish().await.map_err(|e| crate::error_chain(&e))?;
    let b_report = b.finish().await.map_err(|e| crate::error_chain(&e))?;
    // The host's /tmp is the host's: remove what a breach left there.
    let on_host = Path::new(&shared).exists();
    let _ = std::fs::remove_file(&shared);
    let seen = stdout_of(&b_report, &looked);
    if !wrote.succeeded() {
        return failed(format!(
            "run A could not write its own files: {}",
            stdout_of(&a_report, &wrote)
        ));
    }
    let saw: Vec<&str> = seen.split_whitespace().collect();
    if !saw.is_empty() {
        return failed(format!("run B saw what run A wrote ({})", saw.join(", ")));
    }
    if on_host {
        return failed(format!("run A's /tmp file {shared} is on the host"));
    }
    Ok(Verdict::Passed)
}

/// A workspace let go and taken up again (from its journal, as another
/// process would) is the one it was: its files are there.
async fn resume(fixture: &Fixture) -> Result<Verdict, String> {
    let mut workspace = create(fixture, fixture.contract("HEAD")).await?;
    exec(&mut workspace, "echo kept > resumed.txt").await?;
    let detached = workspace
        .detach()
        .await
        .map_err(|e| format!("detach: {}", crate::error_chain(&e)))?;
    let mut workspace = fixture
        .runner
        .resume(&detached.run_id, CreateOptions::default())
        .await
        .map_err(|e| format!("resume: {}", crate::error_chain(&e)))?;
    let read = exec(&mut workspace, "cat resumed.txt").await?;
    let report = finish(workspace).await?;
    let seen = stdout_of(&report, &read);
    if seen.trim() != "kept" {
        return failed(format!(
            "after resume the run read {:?}, it had written \"kept\"",
            seen.trim()
        ));
    }
    Ok(Verdict::Passed)
}

/// No host variable reaches a run unless the contract passes it (what a
/// framework's shell holds: tokens, `SSH_AUTH_SOCK`, cloud keys, `HOME`).
async fn credential(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let contract = fixture.contract("HEAD");
    let passed: Vec<&str> = contract
        .environment
        .env
        .keys()
        .map(String::as_str)
        .chain(contract.environment.env_allow.iter().map(String::as_str))
        .collect();
    let (report, command) = one_run(fixture, "env").await?;
    let inside = stdout_of(&report, &command);
    // Variables every environment has, with values that tell nothing.
    const ORDINARY: [&str; 6] = ["PATH", "TERM", "LANG", "PWD", "SHLVL", "_"];
    let leaked: Vec<String> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, value)| {
            !value.is_empty()
                && !ORDINARY.contains(&name.as_str())
                && !passed.contains(&name.as_str())
                && inside.lines().any(|line| line == format!("{name}={value}"))
        })
        .map(|(name, _)| name)
        .collect();
    if !leaked.is_empty() {
        return failed(format!(
            "host variables reached the run: {}",
            leaked.join(", ")
        ));
    }
    Ok(Verdict::Passed)
}

/// The exported patch applies to the base commit and holds the run's edit; a
/// check that edits what it verifies fails and its edit stays out.
async fn promotion(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) =
        without_patch_promotion(&fixture.runner.stack().promotion.capabilities())
    {
        return Ok(unsupported);
    }
    let mut contract = fixture.contract("HEAD");
    contract.promotion.target = PromotionTarget::Patch;
    contract.promotion.required_checks = vec![crate::contract::RequiredCheck {
        name: "sneaky".into(),
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo sneaky >> pinned.txt".into(),
        ],
        timeout: None,
    }];
    let mut workspace = create(fixture, contract).await?;
    exec(&mut workspace, "echo changed >> pinned.txt").await?;
    let report = finish(workspace).await?;
    let patch_file = report.evidence.join("diff.patch");
    let patch = std::fs::read_to_string(&patch_file).map_err(|e| format!("diff.patch: {e}"))?;
    if !patch.contains("+changed") {
        return failed("diff.patch lacks the run's edit");
    }
    if patch.contains("sneaky") {
        return failed("a required check's own edit is in the patch it verified");
    }
    let digest = crate::digest::sha256_hex(patch.as_bytes());
    if report.outcome.patch_sha256.as_deref() != Some(digest.as_str()) {
        return failed("outcome.json's patch digest is not diff.patch's");
    }
    let clone = fixture.scratch().join("clone");
    git(
        fixture.scratch(),
        &[
            "clone",
            "-q",
            &fixture.repo.to_string_lossy(),
            &clone.to_string_lossy(),
        ],
    )
    .await?;
    if let Err(why) = git(&clone, &["apply", "--check", &patch_file.to_string_lossy()]).await {
        return failed(format!(
            "diff.patch does not apply to the base commit: {why}"
        ));
    }
    Ok(Verdict::Passed)
}

/// A run cannot signal a host process (one the case started for it).
async fn escape_signal(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let mut host = tokio::process::Command::new("sleep")
        .arg("300")
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting a host process: {e}"))?;
    let pid = host.id().ok_or("the host process has no pid")?;
    let outcome = one_run(fixture, &format!("kill -KILL {pid}; exit 0")).await;
    let alive = host.try_wait().map_err(|e| e.to_string())?.is_none();
    let _ = host.kill().await;
    outcome?;
    if !alive {
        return failed(format!("the run killed host process {pid}"));
    }
    Ok(Verdict::Passed)
}

/// What a run did to a host file it must not reach: changed it, or showed
/// its content in its output (`how` says by what means).
fn host_file_breach(
    report: &RunReport,
    command: &CommandOutcome,
    (path, content): (&Path, &str),
    how: &str,
) -> Result<Verdict, String> {
    let now = std::fs::read_to_string(path).unwrap_or_default();
    if now != content {
        return failed(format!("the run changed {} {how}", path.display()));
    }
    // Nor its owner or mode (what following a planted link on the host's side,
    // a hand-over of the checkout, say, would change).
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let made = std::fs::symlink_metadata(path.with_extension("made"))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    use std::os::unix::fs::MetadataExt;
    if (meta.uid(), meta.gid(), meta.mode()) != (made.uid(), made.gid(), made.mode()) {
        return failed(format!(
            "the run changed the owner or mode of {} {how}",
            path.display()
        ));
    }
    if stdout_of(report, command).contains(content) {
        return failed(format!("the run read {} {how}", path.display()));
    }
    Ok(Verdict::Passed)
}

/// A symbolic link the repository itself plants, pointing at a host file,
/// leads nowhere from inside: the run neither reads nor changes that file
/// through it.
async fn escape_symlink(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let (target, content) = fixture.host_file("planted-target")?;
    let commit = fixture.commit_symlink("planted", &target).await?;
    let (report, command) = one_run_under(
        fixture,
        fixture.contract(&commit),
        "cat planted; echo breach >> planted; exit 0",
    )
    .await?;
    host_file_breach(
        &report,
        &command,
        (&target, &content),
        "through the repository's symbolic link `planted`",
    )
}

/// The host's files are not reachable through `/proc`: not through pid 1's
/// root, nor through the root of a process of the run's own.
async fn escape_proc_root(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let (target, content) = fixture.host_file("proc-root-target")?;
    let script = format!(
        "for root in /proc/1/root /proc/self/root /proc/$$/root; do \
           cat \"$root{t}\"; echo breach >> \"$root{t}\"; done; exit 0",
        t = target.display()
    );
    let (report, command) = one_run(fixture, &script).await?;
    host_file_breach(
        &report,
        &command,
        (&target, &content),
        "through /proc/*/root",
    )
}

/// A hard link cannot bring a host file into the workspace: not one the run
/// sees through a read-only grant (linked into its writable checkout, then
/// written), nor one it names by its host path.
async fn escape_hardlink(fixture: &Fixture) -> Result<Verdict, String> {
    if let Some(unsupported) = isolation_declared(fixture) {
        return Ok(unsupported);
    }
    let (target, content) = fixture.host_file("hardlink-target")?;
    let granted = "/opt/conformance-granted";
    let mut contract = fixture.contract("HEAD");
    contract
        .filesystem
        .host_mounts
        .push(crate::contract::HostMount {
            host: target
                .parent()
                .map(|dir| dir.to_string_lossy().into_owned())
                .unwrap_or_default(),
            target: granted.into(),
            mode: crate::contract::MountMode::ReadOnly,
        });
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let script = format!(
        "ln '{granted}/{name}' linked || ln '{}' linked; cat linked; echo breach >> linked; exit 0",
        target.display()
    );
    let (report, command) = one_run_under(fixture, contract, &script).await?;
    host_file_breach(
        &report,
        &command,
        (&target, &content),
        "through a hard link",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_capabilities_choose_the_cases_that_apply() {
        let none = ProcessCapabilities::default();
        assert!(matches!(
            without_isolation(&none),
            Some(Verdict::Unsupported { .. })
        ));
        let task = ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            ..ProcessCapabilities::default()
        };
        assert_eq!(without_isolation(&task), None);
        let no_targets = PromotionCapabilities::default();
        match without_patch_promotion(&no_targets) {
            Some(Verdict::Unsupported { reason }) => assert!(reason.contains("patch"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let patch = PromotionCapabilities {
            targets: vec![PromotionTarget::Patch],
        };
        assert_eq!(without_patch_promotion(&patch), None);
    }
}
