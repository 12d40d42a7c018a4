//! Malformed contracts: each yields an error that names the field path.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

use workspace_core::contract::{Contract, ContractError};

const BASE: &str = r#"
objective = "fix the rounding of refunds"
shape = "narrow-fix"

[source]
repo = "../payments-api"
revision = "8f3c2d1"

[filesystem]
writable = ["."]
"#;

/// Replaces the `[filesystem]` table of BASE, or appends `extra` to it.
fn with(extra: &str) -> String {
    format!("{BASE}{extra}")
}

fn with_fs(fs: &str) -> String {
    BASE.replace("[filesystem]\nwritable = [\".\"]\n", fs)
}

/// The one problem (or parse error) a contract text yields, as `path: message`.
fn problems_of(text: &str) -> Vec<String> {
    match Contract::from_toml(text) {
        Ok(_) => Vec::new(),
        Err(ContractError::Invalid { problems }) => {
            problems.iter().map(|p| p.to_string()).collect()
        }
        Err(e @ ContractError::Parse { .. }) => vec![e.to_string()],
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[test]
fn the_base_contract_is_valid() {
    assert_eq!(problems_of(BASE), Vec::<String>::new());
}

#[test]
fn each_malformed_contract_names_its_field_path() {
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "unknown field",
            with("colour = \"red\"\n"),
            "filesystem.colour",
            "unknown field `colour`",
        ),
        (
            "wrong type",
            with_fs("[filesystem]\nwritable = \".\"\n"),
            "filesystem.writable",
            "expected a sequence",
        ),
        (
            "path outside root",
            with_fs("[filesystem]\nwritable = [\"src\", \"../x\"]\n"),
            "filesystem.writable[1]",
            "\"../x\" leads outside the workspace root",
        ),
        (
            "absolute path",
            with_fs("[filesystem]\nwritable = [\"/etc\"]\n"),
            "filesystem.writable[0]",
            "is absolute",
        ),
        (
            "writable and excluded",
            with_fs("[filesystem]\nwritable = [\".\", \"secrets\"]\nexcluded = [\"secrets\"]\n"),
            "filesystem.writable[1]",
            "both writable and excluded",
        ),
        (
            "read-only also writable",
            with("read_only = [\".\"]\n"),
            "filesystem.read_only[0]",
            "also listed in filesystem.writable[0]",
        ),
        (
            "output not writable",
            with_fs("[filesystem]\nwritable = [\"src\"]\noutputs = [\"docs\"]\n"),
            "filesystem.outputs[0]",
            "not under any writable path",
        ),
        (
            "invalid glob",
            with("excluded = [\"a/[b\"]\n"),
            "filesystem.excluded[0]",
            "not a valid glob",
        ),
        (
            "host mount under /proc",
            with("host_mounts = [{ host = \"/proc/1/root\", target = \"/host\" }]\n"),
            "filesystem.host_mounts[0].host",
            "under /proc",
        ),
        (
            "host mount shadows root",
            with("host_mounts = [{ host = \"/srv/x\", target = \"/workspace\" }]\n"),
            "filesystem.host_mounts[0].target",
            "would shadow the workspace root",
        ),
        (
            "host mount above root",
            with("host_mounts = [{ host = \"/srv/x\", target = \"/\" }]\n"),
            "filesystem.host_mounts[0].target",
            "is the whole file system",
        ),
        (
            "port 0",
            with("[process]\nports = [0]\n"),
            "process.ports[0]",
            "port 0 is not a port",
        ),
        (
            "port over 65535",
            with("[process]\nports = [70000]\n"),
            "process.ports[0]",
            "70000",
        ),
        (
            "duplicate port",
            with("[process]\nports = [8080, 8080]\n"),
            "process.ports[1]",
            "listed twice",
        ),
        (
            "bad cache prefix",
            with("[process]\ncache_prefix = \"run 742\"\n"),
            "process.cache_prefix",
            "not a lease name",
        ),
        (
            "bad schema",
            with("[process]\ndatabase_schema = \"Agent-742\"\n"),
            "process.database_schema",
            "not a schema name",
        ),
        (
            "empty revision",
            BASE.replace("revision = \"8f3c2d1\"", "revision = \"\""),
            "source.revision",
            "is empty",
        ),
        (
            "revision as option",
            BASE.replace("revision = \"8f3c2d1\"", "revision = \"--upload-pack=x\""),
            "source.revision",
            "read as an option",
        ),
        (
            "missing objective",
            BASE.replace("objective = \"fix the rounding of refunds\"\n", ""),
            "contract",
            "missing field `objective`",
        ),
        (
            "credentials in URL",
            BASE.replace("../payments-api", "https://bot:hunter2@git.example/p.git"),
            "source.repo",
            "carries credentials",
        ),
        (
            "empty objective",
            BASE.replace("fix the rounding of refunds", " "),
            "objective",
            "is empty",
        ),
        (
            "unknown shape",
            BASE.replace("narrow-fix", "yolo"),
            "shape",
            "unknown variant `yolo`",
        ),
        (
            "duplicate services",
            with(
                "[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { command = [\"pg_isready\"] }\n[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { command = [\"pg_isready\"] }\n",
            ),
            "environment.services[1].name",
            "duplicate service name \"db\"",
        ),
        (
            "two readiness checks",
            with(
                "[[environment.services]]\nname = \"web\"\ncommand = [\"srv\"]\nhealth = { tcp = 8000, log = \"up\" }\n",
            ),
            "environment.services[0].health",
            "declares tcp and log; declare exactly one of command, tcp, http or log",
        ),
        (
            "no readiness check",
            with("[[environment.services]]\nname = \"web\"\ncommand = [\"srv\"]\nhealth = {}\n"),
            "environment.services[0].health",
            "declares no check; declare exactly one of command, tcp, http or log",
        ),
        (
            "allowlisted loopback",
            with("[environment.network]\nmode = \"allowlist\"\nallow = [\"127.0.0.1:5432\"]\n"),
            "environment.network.allow[0]",
            "is a loopback address: inside a workspace it is the workspace's own",
        ),
        (
            "template inside the workspace",
            with(
                "[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { tcp = 5432 }\n[environment.services.template]\npath = \"/workspace/pgdata\"\ncommand = [\"initdb\"]\n",
            ),
            "environment.services[0].template.path",
            "overlaps the workspace root \"/workspace\"; a template lives outside the checkout",
        ),
        (
            "template path relative",
            with(
                "[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { tcp = 5432 }\n[environment.services.template]\npath = \"pgdata\"\ncommand = [\"initdb\"]\n",
            ),
            "environment.services[0].template.path",
            "is not absolute",
        ),
        (
            "template without a command",
            with(
                "[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { tcp = 5432 }\n[environment.services.template]\npath = \"/tmp/pgdata\"\ncommand = []\n",
            ),
            "environment.services[0].template.command",
            "command is empty",
        ),
        (
            "template input relative",
            with(
                "[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { tcp = 5432 }\n[environment.services.template]\npath = \"/tmp/pgdata\"\ncommand = [\"initdb\"]\ninputs = [\"usr/lib\"]\n",
            ),
            "environment.services[0].template.inputs[0]",
            "is not absolute",
        ),
        (
            "dependency declared later",
            with(
                "[[environment.services]]\nname = \"app\"\ndepends_on = [\"db\"]\ncommand = [\"app\"]\nhealth = { tcp = 8000 }\n[[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\nhealth = { tcp = 5432 }\n",
            ),
            "environment.services[0].depends_on[0]",
            "\"db\" is not a service declared before this one",
        ),
        (
            "service name with a slash",
            with(
                "[[environment.services]]\nname = \"a/b\"\ncommand = [\"srv\"]\nhealth = { tcp = 1 }\n",
            ),
            "environment.services[0].name",
            "may only hold letters, digits",
        ),
        (
            "http path without slash",
            with(
                "[[environment.services]]\nname = \"web\"\ncommand = [\"srv\"]\nhealth = { http = { port = 80, path = \"health\" } }\n",
            ),
            "environment.services[0].health.http.path",
            "does not start with '/'",
        ),
        (
            "preview check on an unpublished port",
            with("[process]\nports = [8000]\npreview_check = { port = 3000 }\n"),
            "process.preview_check.port",
            "port 3000 is not published",
        ),
        (
            "empty network allowlist",
            with("[environment.network]\nmode = \"allowlist\"\nallow = []\n"),
            "environment.network.allow",
            "an empty allowlist allows nothing",
        ),
        (
            "allow without allowlist mode",
            with("[environment.network]\nmode = \"deny\"\nallow = [\"pypi.org:443\"]\n"),
            "environment.network.allow",
            "only read with mode = \"allowlist\"",
        ),
        (
            "bad env name",
            with("[environment]\nenv_allow = [\"1PATH\"]\n"),
            "environment.env_allow[0]",
            "not an environment variable name",
        ),
        (
            "secret in env",
            with("[environment]\nenv = { API_TOKEN = \"abc\" }\n"),
            "environment.env.API_TOKEN",
            "looks like a credential",
        ),
        (
            "zero cpus",
            with("[environment.limits]\ncpus = 0.0\n"),
            "environment.limits.cpus",
            "not a CPU share",
        ),
        (
            "zero memory",
            with("[environment.limits]\nmemory = \"0GiB\"\n"),
            "environment.limits.memory",
            "is zero",
        ),
        (
            "disk below the smallest",
            with("[environment.limits]\ndisk = \"1KiB\"\n"),
            "environment.limits.disk",
            "less than the smallest disk, 1 MiB",
        ),
        (
            "bad size unit",
            with("[environment.limits]\nmemory = \"4XB\"\n"),
            "environment.limits.memory",
            "unknown size unit",
        ),
        (
            "long-lived credential",
            with("[[identity.credentials]]\nname = \"TOKEN\"\nsource = \"vault\"\nttl = \"48h\"\n"),
            "identity.credentials[0].ttl",
            "not short-lived",
        ),
        (
            "merge authority",
            with("[identity.authority]\nmerge = true\n"),
            "identity.authority.merge",
            "cannot be granted",
        ),
        (
            "duplicate check",
            with(
                "[[promotion.required_checks]]\nname = \"t\"\ncommand = [\"make\"]\n[[promotion.required_checks]]\nname = \"t\"\ncommand = [\"make\", \"lint\"]\n",
            ),
            "promotion.required_checks[1].name",
            "duplicate check name",
        ),
        (
            "empty check command",
            with("[[promotion.required_checks]]\nname = \"t\"\ncommand = []\n"),
            "promotion.required_checks[0].command",
            "command is empty",
        ),
        (
            "read-only shape writes",
            BASE.replace("narrow-fix", "read-only-orientation"),
            "filesystem.writable",
            "writes nothing",
        ),
        (
            "high consequence without checks",
            BASE.replace("narrow-fix", "high-consequence-change"),
            "promotion.required_checks",
            "at least one required check",
        ),
        (
            "credential also in env_allow",
            with(
                "[environment]\nenv_allow = [\"DEPLOY_KEY\"]\n[[identity.credentials]]\nname = \"DEPLOY_KEY\"\nsource = \"vault\"\nttl = \"1h\"\n",
            ),
            "identity.credentials[0].name",
            "a credential has one source",
        ),
        (
            "snapshot origin without a digest",
            BASE.replace(
                "revision = \"8f3c2d1\"",
                "revision = \"8f3c2d1\"\norigin = \"snapshot\"",
            ),
            "source.snapshot",
            "needs the sha256 of the snapshot",
        ),
        (
            "snapshot digest with a fresh origin",
            BASE.replace(
                "revision = \"8f3c2d1\"",
                "revision = \"8f3c2d1\"\nsnapshot = \"abc\"",
            ),
            "source.snapshot",
            "only read with origin = \"snapshot\"",
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, text, path, fragment) in &cases {
        let problems = problems_of(text);
        assert_eq!(
            problems.len(),
            1,
            "{name}: expected exactly one problem, got {problems:#?}"
        );
        // `path: message`, or `path (TOML line N): message` for a parse error.
        let names_path = problems[0].starts_with(&format!("{path}:"))
            || problems[0].starts_with(&format!("{path} ("));
        assert!(
            names_path && problems[0].contains(fragment),
            "{name}: got {:?}, want path {path:?} and {fragment:?}",
            problems[0]
        );
    }
}

/// The field path a problem line names (`path (line N): ...` or `path: ...`).
fn field_of(problem: &str) -> &str {
    problem
        .split(" (line ")
        .next()
        .and_then(|p| p.split(':').next())
        .unwrap_or_default()
}

#[test]
fn read_errors_name_the_path_and_line() {
    let text = with_fs("[filesystem]\nwritable = \".\"\n");
    let err = Contract::from_toml(&text).expect_err("wrong type");
    let problems = err.problems().expect("a list of problems");
    assert_eq!(problems.len(), 1, "{problems}");
    let problem = problems.iter().next().unwrap();
    assert_eq!(problem.path, "filesystem.writable");
    assert_eq!(problem.line, Some(10));
    assert!(problem.message.contains("expected a sequence"), "{problem}");
    let json =
        r#"{"objective": "x", "shape": "narrow-fix", "source": {"repo": "r", "revision": 7}}"#;
    let err = Contract::from_json(json).expect_err("wrong type");
    let problems = err.problems().expect("a list of problems");
    assert!(
        problems.to_string().starts_with("source.revision: "),
        "{problems}"
    );
    // A syntax error stops the reading: past it nothing can be read.
    let err = Contract::from_toml("objective = \n").expect_err("bad syntax");
    assert!(
        matches!(&err, ContractError::Parse { location, .. } if location.contains("line 1")),
        "{err}"
    );
}

#[test]
fn an_unknown_field_a_wrong_type_and_a_broken_rule_are_one_report_in_line_order() {
    let text = with_fs(
        "[filesystem]\nwritable = [\"../a\"]\ncolour = \"red\"\n[process]\nports = \"8000\"\n",
    );
    let err = Contract::from_toml(&text).expect_err("three mistakes");
    let problems: Vec<String> = err
        .problems()
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        problems.iter().map(|p| field_of(p)).collect::<Vec<_>>(),
        [
            "filesystem.writable[0]",
            "filesystem.colour",
            "process.ports"
        ],
        "{problems:#?}"
    );
    assert!(
        problems[0].starts_with("filesystem.writable[0] (line 10): "),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("(line 11): unknown field `colour`"),
        "{problems:#?}"
    );
    assert!(
        problems[2].contains("(line 13): invalid type"),
        "{problems:#?}"
    );
    // Without validating, only what cannot be read.
    let err = Contract::parse_toml(&text).expect_err("two unreadable fields");
    assert_eq!(err.problems().unwrap().len(), 2, "{err}");
}

#[test]
fn a_source_left_out_is_the_current_directory_at_head_and_a_misspelt_key_is_named() {
    let without = BASE.replace(
        "[source]\nrepo = \"../payments-api\"\nrevision = \"8f3c2d1\"\n",
        "",
    );
    let contract = Contract::from_toml(&without).expect("a contract without [source]");
    assert_eq!(
        (
            contract.source.repo.as_str(),
            contract.source.revision.as_str()
        ),
        (".", "HEAD")
    );
    let text = BASE.replace("revision = ", "revisionx = ");
    let err = Contract::from_toml(&text).expect_err("a misspelt key");
    let problems: Vec<String> = err
        .problems()
        .unwrap()
        .iter()
        .map(|p| p.to_string())
        .collect();
    // Only the misspelt key: the revision it meant defaults, and the table is
    // not reported again as missing.
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("source.revisionx (line 7): unknown field"),
        "{problems:#?}"
    );
}

#[test]
fn all_problems_are_reported_at_once() {
    let text = with_fs(
        "[filesystem]\nwritable = [\"../a\", \"/b\"]\n[process]\nports = [0]\n[identity.authority]\ndeploy = true\n",
    );
    let problems = problems_of(&text);
    let paths: Vec<&str> = problems.iter().map(|p| field_of(p)).collect();
    assert_eq!(
        paths,
        [
            "filesystem.writable[0]",
            "filesystem.writable[1]",
            "process.ports[0]",
            "identity.authority.deploy"
        ]
    );
}

#[test]
fn an_empty_env_allowlist_passes_nothing() {
    let contract = Contract::from_toml(&with("[environment]\nenv_allow = []\n")).expect("valid");
    for name in ["PATH", "HOME", "AWS_SECRET_ACCESS_KEY", ""] {
        assert!(
            !contract.environment.passes(name),
            "{name} passed an empty allowlist"
        );
    }
    let contract =
        Contract::from_toml(&with("[environment]\nenv_allow = [\"LANG\"]\n")).expect("valid");
    assert!(contract.environment.passes("LANG"));
    assert!(!contract.environment.passes("PATH"));
}

#[test]
fn the_design_example_is_valid_and_three_planted_mistakes_are_listed() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/contracts/payments-api-1842.toml"
    );
    let text = std::fs::read_to_string(path).expect("example contract");
    let contract = Contract::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(contract.source.revision, "8f3c2d1");
    assert_eq!(contract.process.ports, [43117]);

    let planted = text
        .replace("ports = [43117]", "ports = [0]")
        .replace(
            "outputs = [\"src/refunds\", \"tests/refunds\"]",
            "outputs = [\"src/refunds\", \"../tests\"]",
        )
        .replace("merge = false", "merge = true");
    let problems = problems_of(&planted);
    let paths: Vec<&str> = problems.iter().map(|p| field_of(p)).collect();
    assert_eq!(
        paths,
        [
            "filesystem.outputs[1]",
            "process.ports[0]",
            "identity.authority.merge"
        ],
        "{problems:#?}"
    );
}

#[test]
fn every_preset_validates_once_its_required_parts_are_given() {
    use workspace_core::contract::{RequiredCheck, SourceSection, TaskShape};
    for shape in TaskShape::ALL {
        let mut contract = Contract::preset(shape, "task", SourceSection::new("../repo", "HEAD"));
        if shape == TaskShape::HighConsequenceChange {
            assert!(contract.validate().is_err(), "needs a required check first");
            contract.promotion.required_checks.push(RequiredCheck {
                name: "tests".into(),
                command: vec!["make".into(), "test".into()],
                timeout: None,
            });
        }
        contract
            .validate()
            .unwrap_or_else(|p| panic!("{shape:?}: {p}"));
        assert!(
            contract.environment.env_allow.is_empty(),
            "presets pass no host variables"
        );
        assert!(
            contract.identity.credentials.is_empty(),
            "presets inject no credentials"
        );
        assert!(
            contract.filesystem.host_mounts.is_empty(),
            "presets mount nothing from the host"
        );
    }
}

#[test]
fn the_json_schema_describes_every_section() {
    let schema = Contract::json_schema();
    let properties = schema["properties"].as_object().expect("properties");
    for section in [
        "objective",
        "shape",
        "source",
        "filesystem",
        "process",
        "environment",
        "identity",
        "promotion",
    ] {
        assert!(properties.contains_key(section), "schema lacks {section}");
    }
    assert_eq!(schema["additionalProperties"], serde_json::json!(false));
}

#[test]
fn every_missing_required_field_and_every_other_mistake_are_one_report() {
    // No objective, no shape, a service without its command, and a wrong type
    // elsewhere: all four in one report, not one per attempt.
    let text = "[source]\nrepo = \".\"\nrevision = \"HEAD\"\n\
                [process]\nports = \"8000\"\n\
                [[environment.services]]\nname = \"db\"\nhealth = { tcp = 5432 }\n";
    let all = problems_of(text).join("\n");
    for expected in [
        "missing field `objective`",
        "missing field `shape`",
        "missing field `command`",
        "process.ports",
    ] {
        assert!(all.contains(expected), "{expected} not reported:\n{all}");
    }
    // A stand-in is never a contract: the fields it filled are not checked
    // as if they had been written (no "objective is empty").
    assert!(!all.contains("is empty"), "{all}");
}
