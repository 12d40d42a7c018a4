//! Property: every valid contract survives TOML and JSON unchanged.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

use std::collections::BTreeMap;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use workspace_core::contract::*;

fn rel_path() -> impl Strategy<Value = String> {
    "[a-z]{1,6}(/[a-z0-9_]{1,6}){0,2}"
}

fn limits() -> impl Strategy<Value = Limits> {
    (
        proptest::option::of(1u32..=64_000),
        proptest::option::of(1u64..=(1 << 40)),
        proptest::option::of(1u32..=100_000),
        proptest::option::of(1u64..=(1 << 42)),
        proptest::option::of(1u64..=1_000_000),
        proptest::option::of(1u32..=1 << 20),
    )
        .prop_map(
            |(cpu_millis, memory, pids, disk, wall_ms, open_files)| Limits {
                cpus: cpu_millis.map(|m| f64::from(m) / 1000.0),
                memory: memory.map(ByteSize),
                pids,
                disk: disk.map(ByteSize),
                tmp: memory.map(|m| ByteSize(m / 2 + 1)),
                wall_time: wall_ms.map(DurationSpec::from_millis),
                open_files,
                output: disk.map(|d| ByteSize(d / 3 + 1)),
                output_overflow: open_files.map(|n| {
                    if n % 2 == 0 {
                        OutputOverflow::Kill
                    } else {
                        OutputOverflow::Truncate
                    }
                }),
            },
        )
}

fn network() -> impl Strategy<Value = Network> {
    prop_oneof![
        Just(Network::default()),
        Just(Network {
            mode: NetworkMode::Loopback,
            ..Network::default()
        }),
        (
            vec(("[a-z]{1,10}\\.(org|com)", 1u16..=65535), 1..4),
            vec(("[a-z]{1,10}\\.(org|com)", 1u16..=65535), 0..2),
        )
            .prop_map(|(allow, deny)| Network {
                mode: NetworkMode::Allowlist,
                allow: allow.into_iter().map(|(h, p)| format!("{h}:{p}")).collect(),
                deny: deny
                    .into_iter()
                    .map(|(h, p)| format!("*.{h}:{p}"))
                    .collect(),
            }),
    ]
}

fn credentials() -> impl Strategy<Value = Vec<Credential>> {
    btree_set("CRED_[A-Z]{1,8}", 0..3)
        .prop_flat_map(|names| {
            let n = names.len();
            (
                Just(names),
                vec(1u64..=24 * 3600, n),
                vec(vec("[a-z]{1,6}:[a-z]{1,6}", 0..3), n),
            )
        })
        .prop_map(|(names, ttls, scopes)| {
            names
                .into_iter()
                .zip(ttls)
                .zip(scopes)
                .map(|((name, ttl), scope)| Credential {
                    name,
                    source: "vault:test".into(),
                    ttl: DurationSpec::from_secs(ttl),
                    scope,
                })
                .collect()
        })
}

prop_compose! {
    fn valid_contract()(
        shape in prop::sample::select(TaskShape::ALL.to_vec()),
        objective in "[A-Za-z][A-Za-z ,.]{0,60}",
        revision in "[0-9a-f]{7,40}",
        writable in btree_set(rel_path(), 1..4),
        excluded in vec("secret_[a-z]{1,5}/\\*\\*", 0..3),
        ports in btree_set(1u16..=65535, 0..4),
        cache_prefix in proptest::option::of("[a-z0-9-]{1,20}"),
        schema in proptest::option::of("[a-z_][a-z0-9_]{0,20}"),
        env_allow in btree_set("[A-Z][A-Z0-9_]{0,10}", 0..4),
        env in proptest::collection::btree_map("X_[A-Z]{1,8}", "[ -~]{0,20}", 0..4),
        network in network(),
        limits in limits(),
        credentials in credentials(),
        checks in btree_set("[a-z]{1,10}", 1..3),
        origin in prop::sample::select(vec![CheckoutOrigin::Fresh, CheckoutOrigin::Resumed, CheckoutOrigin::Snapshot]),
    ) -> Contract {
        let mut contract = Contract::preset(shape, objective, SourceSection::new("../repo", revision));
        contract.source.origin = origin;
        if origin == CheckoutOrigin::Snapshot {
            contract.source.snapshot = Some(workspace_core::digest::sha256_hex(contract.objective.as_bytes()));
        }
        if shape != TaskShape::ReadOnlyOrientation {
            contract.filesystem.writable = writable.iter().cloned().collect();
            contract.filesystem.outputs = writable.into_iter().take(1).collect();
        }
        contract.filesystem.excluded = excluded;
        contract.process.ports = ports.into_iter().collect();
        contract.process.cache_prefix = cache_prefix;
        contract.process.database_schema = schema;
        // Credentials and plain variables never share a name (a validated rule).
        contract.environment.env_allow = env_allow.into_iter().collect();
        contract.environment.env = env.into_iter().collect::<BTreeMap<_, _>>();
        if shape != TaskShape::HighConsequenceChange {
            contract.environment.network = network;
        }
        contract.environment.limits = limits;
        contract.identity.credentials = credentials;
        contract.promotion.required_checks = checks
            .into_iter()
            .map(|name| RequiredCheck { command: vec!["make".into(), name.clone()], name, timeout: None })
            .collect();
        contract
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Failures are reported with their minimal input; nothing is written to the tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_contracts_round_trip_through_toml_and_json(contract in valid_contract()) {
        prop_assert_eq!(contract.validate(), Ok(()), "the generator made an invalid contract");

        let toml = contract.to_toml().expect("to toml");
        let from_toml = Contract::from_toml(&toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
        prop_assert_eq!(&from_toml, &contract);

        let json = contract.to_json().expect("to json");
        let from_json = Contract::from_json(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
        prop_assert_eq!(&from_json, &contract);
    }
}
