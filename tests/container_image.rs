//! Pinned OCI images on the container backend, with runc: a run's base system
//! is the image's (its layers verified and applied, whiteouts included, unpacked
//! once per host), never the host's; an image whose layer is not what its digest
//! says fails before anything runs, naming the layer, and leaves nothing.
//!
//! Needs root, user namespaces, cgroups, runc (Debian package runc) and a static
//! busybox for the image's userland (Debian package busybox-static).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use support::container::{self, runner};
use support::oci_image::{IMAGE_WORKING_DIR, OciImage, RELEASE};
use support::{Fixture, HELLO, command};
use workspace_core::contract::Contract;
use workspace_core::runner::{CommandIo, CreateOptions, Workspace};

fn on_image(fixture: &Fixture, image: &OciImage) -> Contract {
    let mut contract = fixture.contract();
    contract.environment.runtime.image = Some(image.reference());
    contract
        .environment
        .env
        .insert("SHARED".into(), "from the contract".into());
    contract
}

/// Runs `script` with `sh -c`; its exit code and standard output.
async fn sh(fixture: &Fixture, workspace: &mut Workspace, script: &str) -> (i32, String) {
    let (ended, out) = container::sh(fixture, workspace, script).await;
    (ended.shell_status(), out)
}

/// The image cache the fixture's runner uses.
fn image_store(fixture: &Fixture) -> backend_container::image::ImageStore {
    backend_container::image::ImageStore::new(fixture.base.path().join("images"))
}

fn observed_image(fixture: &Fixture, run_id: &workspace_core::RunId) -> serde_json::Value {
    let observed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture.paths(run_id).evidence.join("observed.json")).unwrap(),
    )
    .unwrap();
    observed["probe"]["facts"]["image"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_pinned_image_sees_the_image_and_not_the_hosts_base_system() {
    let fixture = Fixture::new("container-image");
    let image = OciImage::build(fixture.base.path());
    let runner = runner(&fixture);
    let mut workspace = runner
        .create(on_image(&fixture, &image), CreateOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}", workspace_core::error_chain(&e)));
    let run_id = workspace.run_id().clone();

    let (status, out) = sh(&fixture, &mut workspace, "cat /opt/image-release").await;
    assert_eq!((status, out.as_str()), (0, RELEASE));
    // The layers merged: a whiteout and an opaque directory of the upper layer
    // removed what the lower one made; the upper layer's own files are there.
    let (status, out) = sh(
        &fixture,
        &mut workspace,
        "test ! -e /opt/tool/removed.txt && test ! -e /opt/stale/a.txt && cat /opt/stale/b.txt /opt/added.txt",
    )
    .await;
    assert_eq!(
        (status, out.as_str()),
        (0, "from the upper layer\nadded above\n")
    );
    // The host's userland is nowhere: no /usr, no host program.
    let (status, _) = sh(&fixture, &mut workspace, "test -e /usr || test -e /lib").await;
    assert_ne!(status, 0, "the host's /usr or /lib is visible on an image");
    // The checkout is the workspace, the image read-only, setuid bits gone.
    let (status, out) = sh(&fixture, &mut workspace, "cat hello.txt").await;
    assert_eq!((status, out.as_str()), (0, HELLO));
    let (status, _) = sh(&fixture, &mut workspace, "touch /opt/planted").await;
    assert_ne!(status, 0, "the image's root must be read-only");
    let (_, out) = sh(&fixture, &mut workspace, "stat -c %a /bin/suid").await;
    assert_eq!(out.trim(), "755", "the set-user-id bit must be dropped");

    // The image's `Env` is every process's, under the contract's variables
    // (`SHARED` is declared by the contract too); its `WorkingDir` is
    // recorded, but commands start in the checkout.
    let (status, out) = sh(
        &fixture,
        &mut workspace,
        r#"echo "$PATH|$TOOL_HOME|$SHARED|$PWD""#,
    )
    .await;
    assert_eq!(status, 0);
    let workdir = out.trim().rsplit('|').next().unwrap().to_owned();
    assert_eq!(
        out.trim(),
        format!("/opt/tool/bin:/bin|/opt/tool|from the contract|{workdir}")
    );
    assert_ne!(workdir, IMAGE_WORKING_DIR);

    let recorded = observed_image(&fixture, &run_id);
    assert_eq!(recorded["record"]["working_dir"], IMAGE_WORKING_DIR);
    assert_eq!(
        recorded["record"]["manifest"],
        format!("sha256:{}", image.manifest)
    );
    assert_eq!(recorded["record"]["layers"].as_array().unwrap().len(), 2);
    assert_eq!(recorded["record"]["platform"], "linux/amd64");
    assert_eq!(recorded["reused"], false);
    // The unpacked image (set-user-id bits gone, but a host copy all the same)
    // is out of every other host user's reach.
    use std::os::unix::fs::PermissionsExt;
    let cache = image_store(&fixture).entries();
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the image cache is open to others: {mode:o}"
    );
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fixture.assert_nothing_left(&run_id, &[]);

    // A second run reuses the unpacked image.
    let report = runner
        .run(
            on_image(&fixture, &image),
            &command(&["cat", "/opt/added.txt"], None),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(report.outcome.commands[0].shell_status(), 0);
    let reused = observed_image(&fixture, &report.run_id);
    assert_eq!(reused["reused"], true);
    assert_eq!(reused["reference"], image.reference());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_that_is_not_what_its_digest_says_fails_before_anything_runs() {
    let fixture = Fixture::new("container-image-digest");
    let image = OciImage::build(fixture.base.path());
    // The same size, one byte different.
    let tampered = &image.layers[1];
    let mut bytes = std::fs::read(tampered).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(tampered, bytes).unwrap();
    let runner = runner(&fixture);
    let error = runner
        .create(on_image(&fixture, &image), CreateOptions::default())
        .await
        .expect_err("a tampered layer must fail the run");
    let text = workspace_core::error_chain(&error);
    let layer = tampered.file_name().unwrap().to_string_lossy();
    // (A digest already in the cache would run what was verified then; this
    // host's cache is the fixture's own, so the layout is read now.)
    assert!(
        text.contains(&format!("layer 2 (sha256:{layer})")) && text.contains("hashes to"),
        "{text}"
    );
    let evidence = error
        .evidence
        .clone()
        .expect("a failed run still exports its evidence");
    assert!(evidence.join("manifest.json").is_file());
    let outcome = std::fs::read_to_string(evidence.join("outcome.json")).unwrap();
    assert!(outcome.contains("layer 2"), "{outcome}");
    assert!(
        !evidence.join("commands").exists(),
        "nothing may run on an image that failed its digests"
    );
    // Nothing of the image was kept, and no container was made.
    let cache = image_store(&fixture).entries();
    let kept: Vec<_> = std::fs::read_dir(&cache)
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
    let known = container::runc_knows(&container::state(&fixture));
    assert!(known.is_empty(), "{known:?}");
    fixture.assert_nothing_left(&error.run_id, &[]);
}

#[test]
fn a_digest_the_layout_does_not_hold_is_named_and_nothing_is_cached() {
    let fixture = Fixture::new("container-image-missing");
    let image = OciImage::build(fixture.base.path());
    let store = image_store(&fixture);
    let absent = "f".repeat(64);
    let reference = workspace_core::contract::ImageReference::parse(&format!(
        "oci-layout:{}@sha256:{absent}",
        image.dir.display()
    ))
    .unwrap();
    let error = store
        .unpacked(&reference)
        .expect_err("an absent manifest was unpacked");
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "the manifest (sha256:{absent}) is not in the image layout"
        )),
        "{text}"
    );
    let kept: Vec<_> = std::fs::read_dir(store.entries())
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
}
