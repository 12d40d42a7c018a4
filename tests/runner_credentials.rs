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
use workspace_core::contract::{Contract, Credential, DurationSpec, PromotionTarget};
use workspace_core::digest::sha256_hex;
use workspace_core::evidence::{ExitStatusRecord, FingerprintKey};
use workspace_core::runner::{
    CommandIo, CreateOptions, CredentialForm, FinishOptions, PromotionOutcome,
};

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
    let (runner, contract) = runner_with_token(&f, &token);

    let ws = runner
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
    let bare = sha256_hex(token.as_bytes());
    assert!(
        digest.unwrap().starts_with(&bare),
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
    // A keyed fingerprint is recorded, so a reviewer can tell which credential
    // was used; not the bare digest, which would let anyone test a guess.
    let observed = std::fs::read_to_string(report.evidence.join("observed.json")).unwrap();
    let key = FingerprintKey::load_or_create(&f.runtime).unwrap();
    assert!(
        observed.contains(&key.fingerprint(token.as_bytes())),
        "{observed}"
    );
    assert!(!observed.contains(&bare), "{observed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_split_between_a_command_and_its_late_output_is_still_redacted() {
    let f = Fixture::new("credentials-late");
    let token = format!("tok-{}-s3cr3t-value", std::process::id());
    let (runner, contract) = runner_with_token(&f, &token);
    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    // The command prints the first half of the value and ends; what it left
    // in the background prints the rest once the next command asks it to.
    // (`${REVIEW_TOKEN#????????????}` drops the first 12 characters.)
    let half = 12;
    let first = shell(
        &format!(
            "( while [ ! -e /tmp/go ]; do sleep 0.02; done; \
               printf %s \"${{REVIEW_TOKEN#????????????}}\"; : > /tmp/done ) & \
             printf 'before %s' \"$(printf %s \"$REVIEW_TOKEN\" | cut -c1-{half})\""
        ),
        "credentials-late",
    );
    ws.exec(&first, CommandIo::captured()).await.unwrap();
    let second = shell(
        ": > /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.02; done",
        "credentials-late",
    );
    ws.exec(&second, CommandIo::captured()).await.unwrap();
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let read = |name: &str| {
        std::fs::read_to_string(report.evidence.join("commands/0001").join(name))
            .unwrap_or_default()
    };
    let (stdout, late) = (read("stdout"), read("late.stdout"));
    assert_eq!(stdout, "before ", "{stdout:?} {late:?}");
    assert_eq!(late, "[redacted:REVIEW_TOKEN]", "{stdout:?} {late:?}");
    assert!(!format!("{stdout}{late}").contains(&token[half..]));
}

/// What comes back to the caller (and what its sink is passed) is redacted as
/// the evidence is: a value in the kept head, in the kept tail and on stderr.
#[tokio::test(flavor = "multi_thread")]
async fn the_output_returned_to_the_caller_is_redacted_in_its_head_and_tail() {
    let f = Fixture::new("credentials-returned");
    let token = format!("tok-{}-s3cr3t-value", std::process::id());
    let (runner, contract) = runner_with_token(&f, &token);
    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    // The value, 200 KiB, the value again: past a 64 KiB cap, one in each half.
    let script = "printf 'first %s\\n' \"$REVIEW_TOKEN\"; head -c 204800 /dev/zero; \
                  printf 'last %s' \"$REVIEW_TOKEN\"; printf 'err %s' \"$REVIEW_TOKEN\" >&2";
    let mut passed = Vec::new();
    let io = CommandIo {
        capture: true,
        ..CommandIo::passing_to(&mut passed, tokio::io::sink()).with_output_limit(64 << 10)
    };
    let ran = ws
        .exec(&shell(script, "credentials-returned"), io)
        .await
        .unwrap();
    assert!(ran.succeeded(), "{ran:?}");
    let output = ran.output.clone().unwrap();
    assert!(output.stdout.truncated.is_some(), "{output:?}");
    assert!(
        output
            .stdout
            .head()
            .starts_with(b"first [redacted:REVIEW_TOKEN]\n\0")
    );
    assert!(
        output
            .stdout
            .tail()
            .ends_with(b"\0last [redacted:REVIEW_TOKEN]")
    );
    assert_eq!(output.stderr.bytes, b"err [redacted:REVIEW_TOKEN]");
    let holds = |bytes: &[u8]| bytes.windows(token.len()).any(|w| w == token.as_bytes());
    assert!(!holds(&output.stdout.bytes) && !holds(&passed));
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    for (path, bytes) in files(&report.evidence) {
        assert!(!holds(&bytes), "{} holds the value", path.display());
    }
}

/// A runner whose one credential, `REVIEW_TOKEN`, is `token`.
fn runner_with_token(f: &Fixture, token: &str) -> (workspace_core::runner::Runner, Contract) {
    let mut stack = f.stack();
    stack.identity = Arc::new(NamespaceIdentity::with_credential_source(Arc::new(
        TestIssuer {
            token: token.to_owned(),
        },
    )));
    let mut contract = f.contract();
    contract.identity.credentials = vec![Credential {
        name: "REVIEW_TOKEN".into(),
        source: "test-issuer".into(),
        ttl: DurationSpec::from_secs(600),
        scope: vec!["repo:read".into()],
    }];
    contract.promotion.target = PromotionTarget::Patch;
    (f.runner_with(stack), contract)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_written_into_the_workspace_in_any_encoding_is_withheld_and_never_promoted() {
    let f = Fixture::new("credential-leak");
    let token = format!("tok-{}-s3cr3t-value", std::process::id());
    let (runner, contract) = runner_with_token(&f, &token);
    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    // One file as it is, one base64 inside a longer text, one in a binary file;
    // one file that is fine.
    let script = "printf 'token = %s\\n' \"$REVIEW_TOKEN\" > config.toml; \
         printf 'Authorization: Bearer %s' \"$REVIEW_TOKEN\" | base64 -w0 > auth.b64; \
         { printf '\\000\\001'; printf %s \"$REVIEW_TOKEN\"; } > blob.bin; \
         echo fine > fine.txt";
    let outcome = ws
        .exec(&shell(script, "credential-leak"), CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(outcome.exit.status, ExitStatusRecord::Code(0));
    let report = ws
        .finish_with(FinishOptions {
            promote: Some(Vec::new()),
        })
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);

    let mut found: Vec<(String, CredentialForm)> = report
        .outcome
        .credential_leaks
        .iter()
        .map(|leak| {
            assert_eq!(leak.credential, "REVIEW_TOKEN");
            (leak.path.clone(), leak.form)
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("auth.b64".to_owned(), CredentialForm::Base64),
            ("blob.bin".to_owned(), CredentialForm::Plain),
            ("config.toml".to_owned(), CredentialForm::Plain),
        ]
    );
    match &report.promotion {
        Some(PromotionOutcome::CredentialInPatch { leaks }) => assert_eq!(leaks.len(), 3),
        other => panic!("promoted or refused for another reason: {other:?}"),
    }
    // The evidence keeps the file that is fine and withholds the others.
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+fine"), "{patch}");
    assert_eq!(patch.matches("# withheld: ").count(), 3, "{patch}");
    for (path, bytes) in files(&report.evidence) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "{} holds the credential's value",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_in_a_name_is_withheld_whole_and_never_promoted() {
    let f = Fixture::new("credential-name");
    let token = format!("tok-{}-s3cr3t-name", std::process::id());
    let (runner, contract) = runner_with_token(&f, &token);
    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let script = "echo fine > fine.txt; echo x > \"f-$REVIEW_TOKEN\"";
    let outcome = ws
        .exec(&shell(script, "credential-name"), CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(outcome.exit.status, ExitStatusRecord::Code(0));
    let report = ws
        .finish_with(FinishOptions {
            promote: Some(Vec::new()),
        })
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    match &report.promotion {
        Some(PromotionOutcome::CredentialInPatch { leaks }) => {
            assert_eq!(leaks.len(), 1, "{leaks:?}");
            assert_eq!(leaks[0].path, "f-[redacted:REVIEW_TOKEN]");
        }
        other => panic!("promoted or refused for another reason: {other:?}"),
    }
    let withheld: Vec<&str> = report
        .outcome
        .not_in_patch
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(withheld, ["f-[redacted:REVIEW_TOKEN]"]);
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+fine") && !patch.contains("f-"), "{patch}");
    for (path, bytes) in files(&report.evidence) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "{} holds the credential's value",
            path.display()
        );
    }
}
