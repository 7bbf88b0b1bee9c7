//! The `RebootPool` CRD as a user installs it: the chart's crds/rebootpools.yaml (generated from
//! `common::pool::RebootPool` by `make crd`), applied with the real kubectl to the real API
//! server. A pool with every field set is stored as written and `kubectl get rebootpools`
//! shows its status in columns; a bad pool is refused by the CRD's schema and CEL rules with
//! a message that names the field; the chart's `pools` value renders pools the API server
//! accepts, and a pool without a name is refused by the values' schema.

use e2e::install::{NS, chart_dir, control_plane, helm};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use testenv::ControlPlane;

const CRD: &str = "customresourcedefinition/rebootpools.node-reboot-operator.io";

fn crd_file() -> PathBuf {
    chart_dir().join("crds/rebootpools.yaml")
}

/// A directory of this test's own, for helm's config and values files.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("pools-crd-{test}"));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// kubectl with `input` on its stdin, which must succeed: its output.
fn succeeds(cp: &ControlPlane, args: &[&str], input: &str) -> String {
    cp.kubectl_with_input(args, input)
        .unwrap_or_else(|error| panic!("{error}"))
}

/// A control plane with the CRD applied as the docs say to upgrade it, and served.
async fn with_the_crd() -> ControlPlane {
    let cp = control_plane(false).await;
    let file = crd_file().display().to_string();
    let said = succeeds(&cp, &["apply", "--server-side", "-f", &file], "");
    assert!(said.contains("serverside-applied"), "{said}");
    succeeds(
        &cp,
        &["wait", "--for=condition=Established", "--timeout=60s", CRD],
        "",
    );
    cp
}

fn pool(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "node-reboot-operator.io/v1alpha1",
        "kind": "RebootPool",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// Every field of the spec, each with a value other than its default.
fn every_field() -> Value {
    json!({
        "nodeSelector": {
            "matchLabels": {"pool": "gpu"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
        },
        "maxUnavailable": "25%",
        "maxUnavailablePerZone": 1,
        "concurrency": 2,
        "zoneLabel": "example.com/zone",
        "windows": ["mon-fri 22:00-06:00 Europe/Berlin", "0 22 * * 1-5 8h Europe/Berlin"],
        "blackouts": ["2026-12-20..2027-01-03 Europe/Berlin"],
        "scheduledBudgets": ["1 Mon-Fri 06:00-22:00 Europe/Berlin"],
        "finishAfterWindow": false,
        "rebootEstimate": "45m",
        "minReadySeconds": 300,
        "rebootTimeout": "45m",
        "giveUpAfter": "2h",
        "drainAttempts": 3,
        "maxBlockedNodes": 1,
        "keepSetAsideCordoned": true,
        "canary": 1,
        "canarySoak": "1h30m",
        "waves": true,
        "maxFailures": "10%",
        "paused": true,
        "resumedAt": "2026-12-03T07:40:00.000Z",
        "drain": {
            "enabled": true, "timeout": "20m", "gracePeriod": "30s",
            "podSelector": "app!=critical", "delay": "1m", "forceReboot": false,
        },
        "gates": {"alertFilter": "^Watchdog$", "blockingPodSelectors": ["app=backup"]},
        "marks": {
            "preRebootNodeLabels": {"lb": "out"},
            "postRebootNodeLabels": {"lb": "in"},
            "preferNoScheduleTaint": "example.com/reboot-pending",
        },
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_with_every_field_is_stored_as_written_and_listed_with_its_status() {
    let cp = with_the_crd().await;
    let spec = every_field();
    // Server-side apply with kubectl's strict field validation: a field the schema lacked
    // would be refused, not silently pruned.
    succeeds(
        &cp,
        &["apply", "--server-side", "-f", "-"],
        &pool("gpu", spec.clone()).to_string(),
    );
    let stored: Value = serde_json::from_str(&succeeds(
        &cp,
        &["get", "rebootpool", "gpu", "-o", "json"],
        "",
    ))
    .expect("JSON");
    assert_eq!(stored["spec"], spec, "the spec as written");
    // The round-trip through the type: what the controller reads is what was written.
    let typed: common::pool::RebootPool = serde_json::from_value(stored).expect("a RebootPool");
    assert_eq!(serde_json::to_value(&typed.spec).expect("JSON"), spec);

    // The status as the controller writes it, shown in the columns.
    succeeds(
        &cp,
        &[
            "patch",
            "rebootpool",
            "gpu",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"nodes": 8, "budget": "2 (25%)", "unavailable": 3,
                "rebooting": 1, "waiting": 4, "held": "outside-window"}}"#,
        ],
        "",
    );
    let listed = succeeds(&cp, &["get", "rebootpools"], "");
    let mut lines = listed.lines();
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "NODES",
            "BUDGET",
            "UNAVAILABLE",
            "REBOOTING",
            "WAITING",
            "HELD",
            "AGE"
        ],
        "{listed}"
    );
    let row: Vec<&str> = lines.next().expect("a row").split_whitespace().collect();
    assert_eq!(
        row[..8],
        ["gpu", "8", "2", "(25%)", "3", "1", "4", "outside-window"],
        "{listed}"
    );
    // The short name.
    let short = succeeds(&cp, &["get", "rpool", "-o", "name"], "");
    assert_eq!(short.trim(), "rebootpool.node-reboot-operator.io/gpu");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_pool_is_refused_with_a_message_naming_the_field() {
    let cp = with_the_crd().await;
    let cases = [
        (
            json!({"maxUnavailable": -1}),
            "spec.maxUnavailable",
            "maxUnavailable must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"maxUnavailable": "25"}),
            "spec.maxUnavailable",
            "maxUnavailable must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"maxUnavailable": "abc"}),
            "spec.maxUnavailable",
            "maxUnavailable must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"maxUnavailablePerZone": "10"}),
            "spec.maxUnavailablePerZone",
            "maxUnavailablePerZone must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"rebootTimeout": "soon"}),
            "spec.rebootTimeout",
            "rebootTimeout must be a positive duration such as \"30m\"",
        ),
        (
            json!({"rebootTimeout": "1.5h"}),
            "spec.rebootTimeout",
            "rebootTimeout must be a positive duration such as \"30m\"",
        ),
        (
            json!({"rebootTimeout": "90"}),
            "spec.rebootTimeout",
            "rebootTimeout must be a positive duration such as \"30m\"",
        ),
        (
            json!({"rebootTimeout": "0s"}),
            "spec.rebootTimeout",
            "rebootTimeout must be a positive duration such as \"30m\"",
        ),
        (
            json!({"rebootEstimate": "soon"}),
            "spec.rebootEstimate",
            "rebootEstimate must be a positive duration such as \"45m\"",
        ),
        (
            json!({"rebootEstimate": "0s"}),
            "spec.rebootEstimate",
            "rebootEstimate must be a positive duration such as \"45m\"",
        ),
        (
            json!({"rebootEstimate": "-5m"}),
            "spec.rebootEstimate",
            "rebootEstimate must be a positive duration such as \"45m\"",
        ),
        (
            json!({"giveUpAfter": "-1h"}),
            "spec.giveUpAfter",
            "giveUpAfter must be a positive duration",
        ),
        (
            json!({"minReadySeconds": -3}),
            "spec.minReadySeconds",
            "minReadySeconds cannot be negative",
        ),
        (
            json!({"concurrency": "150%"}),
            "spec.concurrency",
            "concurrency must be a number of nodes (0 or more) or a percentage up to 100%",
        ),
        (
            json!({"drain": {"timeout": "a while"}}),
            "spec.drain.timeout",
            "drain.timeout must be a positive duration",
        ),
        (
            json!({"drain": {"delay": "-1m"}}),
            "spec.drain.delay",
            "drain.delay must be a duration",
        ),
        (
            json!({"canary": -1}),
            "spec.canary",
            "canary must be a number of nodes from 0 to 4294967295",
        ),
        (
            json!({"canarySoak": "soon"}),
            "spec.canarySoak",
            "canarySoak must be a duration such as \"30m\"",
        ),
        (
            json!({"maxFailures": -1}),
            "spec.maxFailures",
            "maxFailures must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"maxFailures": "x"}),
            "spec.maxFailures",
            "maxFailures must be a number of nodes (0 or more) or a percentage",
        ),
        (
            json!({"maxFailures": "101%"}),
            "spec.maxFailures",
            "a percentage such as \"10%\", at most 100%",
        ),
        (json!({"waves": "yes"}), ".spec.waves", "expected boolean"),
        (json!({"paused": "yes"}), ".spec.paused", "expected boolean"),
        (
            json!({"resumedAt": "yesterday"}),
            "spec.resumedAt",
            "resumedAt must be an RFC 3339 time such as \"2026-12-03T07:40:00Z\"",
        ),
        (
            json!({"keepSetAsideCordoned": "yes"}),
            ".spec.keepSetAsideCordoned",
            "expected boolean",
        ),
    ];
    let mut problems = Vec::new();
    for (n, (spec, field, message)) in cases.iter().enumerate() {
        let manifest = pool(&format!("bad-{n}"), spec.clone()).to_string();
        let Err(refused) = cp.kubectl_with_input(&["apply", "--server-side", "-f", "-"], &manifest)
        else {
            problems.push(format!("{spec}: accepted"));
            continue;
        };
        let said = refused.to_string();
        if !said.contains(field) || !said.contains(message) {
            problems.push(format!("{spec}: not `{field}` and `{message}`: {said}"));
        } else if said.contains("evaluating rule") {
            // A rule that fails to evaluate refuses with CEL's error beside the message.
            problems.push(format!("{spec}: the rule did not evaluate: {said}"));
        }
    }
    let long = pool(&"p".repeat(240), json!({})).to_string();
    let refused = cp
        .kubectl_with_input(&["apply", "--server-side", "-f", "-"], &long)
        .map_or_else(|e| e.to_string(), |out| format!("accepted: {out}"));
    if !refused.contains("at most 236 characters") {
        problems.push(format!("a name too long for its ledger Lease: {refused}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let left = succeeds(&cp, &["get", "rebootpools", "-o", "name"], "");
    assert_eq!(left.trim(), "", "nothing was stored");
}

/// The ```yaml block of docs/src/pools.md ("A full example") that starts with `start`: what
/// a user copies.
fn docs_example(start: &str) -> String {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/pools.md");
    let page = std::fs::read_to_string(&page).expect("docs/src/pools.md");
    let block = page
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.starts_with(start))
        .unwrap_or_else(|| panic!("a ```yaml block that starts with `{start}` in pools.md"));
    block.to_owned()
}

const THREE_POOLS: [&str; 3] = [
    "rebootpool.node-reboot-operator.io/control-plane serverside-applied (server dry run)",
    "rebootpool.node-reboot-operator.io/general serverside-applied (server dry run)",
    "rebootpool.node-reboot-operator.io/gpu serverside-applied (server dry run)",
];

/// The docs' three pools, as objects (manifests/examples/rebootpools.yaml, the same) and as
/// the chart's `pools` value, are what the API server accepts; a pool without a name is
/// refused by the values' schema.
#[tokio::test(flavor = "multi_thread")]
async fn the_example_pools_of_the_docs_manifests_and_chart_are_accepted() {
    let cp = with_the_crd().await;
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples/rebootpools.yaml");
    let example = std::fs::read_to_string(&example).expect("manifests/examples/rebootpools.yaml");
    let objects: String = example
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        objects,
        docs_example("apiVersion:"),
        "manifests/examples/rebootpools.yaml (below its comment) and pools.md's example differ"
    );
    let said = succeeds(
        &cp,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        &example,
    );
    assert_eq!(said.lines().collect::<Vec<_>>(), THREE_POOLS, "{said}");

    let home = scratch("chart");
    let values = home.join("pools.yaml");
    std::fs::write(&values, docs_example("pools:")).expect("values file");
    let out = e2e::install::template_pools(&home, &values);
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8_lossy(&out.stdout).into_owned();
    let said = succeeds(
        &cp,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        &rendered,
    );
    assert_eq!(said.lines().collect::<Vec<_>>(), THREE_POOLS, "{rendered}");

    // A pool without a name: the values' schema says which one.
    let nameless = home.join("nameless.yaml");
    std::fs::write(
        &nameless,
        "pools:\n  - name: general\n  - maxUnavailable: 1\n",
    )
    .expect("values file");
    let mut template = helm(&home);
    template
        .args(["template", "node-reboot-operator"])
        .arg(chart_dir())
        .args(["--namespace", NS, "-f"])
        .arg(&nameless);
    let out = template.output().expect("helm runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a pool without a name rendered");
    assert!(
        said.contains("values don't meet the specifications of the schema")
            && said.contains("at '/pools/1': missing property 'name'"),
        "{said}"
    );
}

/// `make sandbox`, `make demo` and the scenarios start with the chart's CRD installed, so that
/// the controller they run finds RebootPools served.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_serves_rebootpools_from_the_charts_crd_file() {
    let sandbox = nodesim::sandbox::Sandbox::start(
        nodesim::sandbox::SandboxConfig::with_nodes(1).no_controller(),
    )
    .await
    .expect("the sandbox starts");
    let cp = &sandbox.control_plane;
    succeeds(cp, &["get", "rebootpools"], "");
    let file = std::fs::read_to_string(crd_file()).expect("the chart's CRD file");
    assert_eq!(
        nodesim::sandbox::REBOOTPOOL_CRD,
        file,
        "the sandbox's CRD is the chart's file"
    );
    // Applied by the sandbox with server-side apply, so the chart's file applies over it.
    let again = succeeds(cp, &["apply", "--server-side", "-f", "-"], &file);
    assert!(again.contains("serverside-applied"), "{again}");
    sandbox.stop().await;
}
