//! The end-to-end scenarios: one test binary whose modules are the files beside this one, a
//! subject each (one link instead of one a file). Run one subject with
//! `cargo test -p e2e --test scenarios -- <file name>::`; `make test` runs each module in a
//! process of its own (hack/test-binaries.sh).
// helm.rs: the sample values of every flag are one json! literal, deeper than the default limit.
#![recursion_limit = "256"]

mod agent_watch;
mod autoscalers;
mod bad_input;
mod blackouts;
mod chaos;
mod chart_package;
mod clock_skew;
mod delays;
mod detection;
mod docs;
mod drain;
mod dry_run;
mod dry_run_plan;
mod failure_modes;
mod fences;
mod format;
mod gates;
mod helm;
mod helm_upgrade;
mod kubectl_plan;
mod kubectl_plugin;
mod kubectl_pools;
mod linux_only;
mod liveness;
mod marks;
mod migrate_from_kured;
mod monitoring;
mod network_faults;
mod notify;
mod notify_services;
mod operability;
mod opt_out;
mod pool_agreement;
mod pools_crd;
mod preflight;
mod protocol;
mod protocol_steps;
mod publish;
mod quickstart;
mod reboot_pools;
mod relabel;
mod rollout_rules;
mod schedule;
mod schema_agreement;
mod security;
mod set_aside;
mod static_build;

/// `make test` runs each module apart (hack/test-binaries.sh): this check is one too.
mod layout {
    /// Cargo no longer finds the tests (`autotests = false`): a file here that is not a module
    /// above would never be compiled nor run.
    #[test]
    fn every_file_beside_this_one_is_a_module_of_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let this = std::fs::read_to_string(dir.join("scenarios.rs")).expect("read scenarios.rs");
        let entries = std::fs::read_dir(&dir).expect("list e2e/tests");
        let mut missing = Vec::new();
        for entry in entries {
            let name = entry.expect("an entry of e2e/tests").file_name();
            let name = name.to_string_lossy();
            if let Some(module) = name.strip_suffix(".rs")
                && module != "scenarios"
                && !this.lines().any(|l| l == format!("mod {module};"))
            {
                missing.push(name.into_owned());
            }
        }
        assert!(
            missing.is_empty(),
            "never compiled, in e2e/tests: {missing:?}; add `mod <name>;` for each to scenarios.rs"
        );
    }
}
