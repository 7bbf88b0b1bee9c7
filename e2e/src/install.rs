//! Installing the operator on the local control plane, and the security checks that every way
//! of installing it must pass (docs/src/install.md): `manifests/` with kubectl
//! (`e2e/tests/security.rs`) and the Helm chart with helm (`e2e/tests/helm.rs`).

use crate::{kubectl, kubectl_stdin, node, wait_until};
use k8s_openapi::api::{
    admissionregistration::v1::ValidatingAdmissionPolicy,
    apps::v1::{DaemonSet, Deployment},
    coordination::v1::Lease,
    core::v1::{Node, Pod, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams},
};
use nodesim::identities;
use serde_json::json;
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};
use testenv::{ControlPlane, Options};

/// The operator's namespace.
pub const NS: &str = "node-reboot-operator";

/// The arguments the installed Deployment gives the controller's container.
pub fn controller_args(cp: &ControlPlane) -> Vec<String> {
    let json = kubectl(
        cp,
        &[
            "get",
            "deployment",
            "reboot-controller",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ],
    );
    serde_json::from_str(&json).expect("the args are a JSON list")
}

/// The installed operator's programs as processes under its own ServiceAccounts: simulated
/// nodes `names` whose agents use tokens bound to the agent DaemonSet's pods (created here),
/// and the kubeconfig of the controller's ServiceAccount. The nodes are created first: a token
/// bound to a pod names the pod's node only if the Node exists.
pub async fn fleet_under_service_accounts(
    cp: &ControlPlane,
    admin: &Client,
    names: &[String],
    reboot_duration: Duration,
) -> (nodesim::Fleet, PathBuf) {
    for name in names {
        identities::ensure_node(admin, name).await.expect("node");
    }
    let daemonset = Api::<DaemonSet>::namespaced(admin.clone(), NS)
        .get("reboot-agent")
        .await
        .expect("the agent's DaemonSet");
    let dir = cp.dir().join("identities");
    let agent_kubeconfig = identities::agent_kubeconfigs(cp, admin, &daemonset, names, &dir)
        .await
        .expect("agent identities");
    let controller_kubeconfig = identities::service_account_kubeconfig(
        cp,
        admin,
        NS,
        "reboot-controller",
        &dir.join("controller.kubeconfig"),
    )
    .await
    .expect("controller identity");
    let mut config = nodesim::FleetConfig::new(
        names.len(),
        nodesim::workspace_binary("reboot-agent").expect("agent built"),
        cp.dir().join("nodes"),
        cp.kubeconfig_path().to_path_buf(),
    );
    config.reboot_duration = reboot_duration;
    config.agent_kubeconfig = Some(agent_kubeconfig);
    let fleet = nodesim::Fleet::start(admin.clone(), config)
        .await
        .expect("fleet");
    (fleet, controller_kubeconfig)
}

/// Without a controller-manager unless asked: its DaemonSet controller would replace the agent
/// pods these tests create by hand (they stand for the DaemonSet's pods on simulated nodes).
pub async fn control_plane(controller_manager: bool) -> ControlPlane {
    let cp = ControlPlane::start(Options {
        controller_manager,
        scheduler: false,
        ..Options::default()
    })
    .await
    .expect("control plane starts");
    if !controller_manager {
        // What the controller-manager would create, and workload pods need.
        let client = cp.client().await.expect("admin client");
        let account = object(json!({"metadata": {"name": "default"}}));
        Api::<ServiceAccount>::default_namespaced(client)
            .create(&PostParams::default(), &account)
            .await
            .expect("ServiceAccount default/default");
    }
    cp
}

pub fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

pub fn apply_manifests(cp: &ControlPlane) -> String {
    let dir = manifests_dir().display().to_string();
    kubectl(cp, &["apply", "-k", &dir, "--server-side"])
}

/// `charts/node-reboot-operator`.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/node-reboot-operator")
}

pub fn object<T: k8s_openapi::serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("a valid object")
}

/// A pod with the pod template of a workload of the manifests, in `namespace`.
pub fn pod_from_template(
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    name: &str,
    namespace: &str,
) -> String {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": template.metadata.as_ref().and_then(|m| m.labels.clone())},
        "spec": template.spec,
    })
    .to_string()
}

/// `kubectl create --dry-run=server <extra> -f -` of `objects`, whatever it answers (it goes
/// on past each object it refuses, and names it).
pub fn create_dry_run(cp: &ControlPlane, extra: &[&str], objects: &str) -> std::process::Output {
    let mut child = cp
        .kubectl()
        .args(["create", "--dry-run=server"])
        .args(extra)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(objects.as_bytes())
        .expect("kubectl reads stdin");
    child.wait_with_output().expect("kubectl finishes")
}

/// `helm template` of the chart's templates/pools.yaml alone, with the values file `values`.
pub fn template_pools(home: &std::path::Path, values: &std::path::Path) -> std::process::Output {
    helm(home)
        .args(["template", "node-reboot-operator"])
        .arg(chart_dir())
        .args([
            "--namespace",
            NS,
            "--show-only",
            "templates/pools.yaml",
            "-f",
        ])
        .arg(values)
        .output()
        .expect("helm runs")
}

/// `kubectl create --dry-run=server -f -` of `pod`: whether the API server admitted it, and
/// what it said.
pub fn server_dry_run(cp: &ControlPlane, pod: &str) -> (bool, String) {
    let out = create_dry_run(cp, &[], pod);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// Waits until the API server has type-checked the agent's admission policy (its CEL against
/// the Node schema; the controller-manager does it), and fails on any warning.
pub async fn wait_until_the_policy_is_type_checked(client: &Client) {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    wait_until(
        "the policy is type-checked",
        Duration::from_secs(30),
        None,
        || async {
            let policy = policies
                .get("node-reboot-operator-agent")
                .await
                .expect("policy");
            policy.status.and_then(|s| s.observed_generation) == policy.metadata.generation
        },
    )
    .await;
    let status = policies
        .get("node-reboot-operator-agent")
        .await
        .expect("policy")
        .status
        .expect("status");
    let warnings = status
        .type_checking
        .and_then(|t| t.expression_warnings)
        .unwrap_or_default();
    assert!(warnings.is_empty(), "CEL type warnings: {warnings:?}");
}

/// The controller's pod template, as installed, is admitted by a server dry run in a namespace
/// that enforces Pod Security "restricted"; the agent's (hostPID, capabilities, root) is not.
pub async fn check_the_controller_pod_meets_restricted_pod_security(
    cp: &ControlPlane,
    client: &Client,
) {
    // A namespace that enforces "restricted", with the controller's ServiceAccount in it.
    let restricted = "restricted-check";
    kubectl_stdin(
        cp,
        &["apply", "-f", "-"],
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": restricted,
            "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                       "pod-security.kubernetes.io/enforce-version": "latest"}}})
        .to_string(),
    );
    kubectl(
        cp,
        &[
            "create",
            "serviceaccount",
            "reboot-controller",
            "-n",
            restricted,
        ],
    );
    kubectl(
        cp,
        &["create", "serviceaccount", "reboot-agent", "-n", restricted],
    );

    let deployment = Api::<Deployment>::namespaced(client.clone(), NS)
        .get("reboot-controller")
        .await
        .expect("the controller's Deployment");
    let template = deployment.spec.expect("spec").template;
    let (admitted, said) =
        server_dry_run(cp, &pod_from_template(&template, "controller", restricted));
    assert!(
        admitted,
        "the controller's pod is refused under restricted: {said}"
    );
    assert!(said.contains("server dry run"), "{said}");

    // The check has teeth: the agent's pod (hostPID, capabilities, root) is refused there.
    let daemonset = Api::<DaemonSet>::namespaced(client.clone(), NS)
        .get("reboot-agent")
        .await
        .expect("the agent's DaemonSet");
    let template = daemonset.spec.expect("spec").template;
    let (admitted, said) = server_dry_run(cp, &pod_from_template(&template, "agent", restricted));
    assert!(
        !admitted,
        "the agent's pod was admitted under restricted: {said}"
    );
    assert!(
        said.contains("violates PodSecurity \"restricted:latest\""),
        "{said}"
    );
}

/// The refusal of a request: its HTTP status and a part of its message.
pub fn refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, kube::Error>,
    code: u16,
    says: &str,
) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, code, "{what}: {status:?}");
            assert!(status.message.contains(says), "{what}: {}", status.message);
        }
        other => panic!("{what}: expected {code} saying {says:?}, got {other:?}"),
    }
}

/// Nodes `node-a` and `node-b` with the operator installed, the agent's pod on each, and
/// clients: the agent of node-a, an agent token bound to no pod, the controller.
pub struct Identities {
    /// Kept alive for the clients.
    pub control_plane: ControlPlane,
    pub admin: Client,
    pub agent_a: Client,
    pub agent_unbound: Client,
    pub controller: Client,
}

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identities")
            .field("control_plane", &self.control_plane.dir())
            .finish_non_exhaustive()
    }
}

impl Identities {
    /// Starts a control plane and installs the operator into [`NS`] with `install`
    /// (`manifests/` with kubectl, or the chart with helm).
    pub async fn start(install: impl FnOnce(&ControlPlane)) -> Identities {
        let cp = control_plane(false).await;
        let admin = cp.client().await.expect("admin client");
        install(&cp);
        let daemonset = Api::<DaemonSet>::namespaced(admin.clone(), NS)
            .get("reboot-agent")
            .await
            .expect("the agent's DaemonSet");
        let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
        let mut agent_pods = Vec::new();
        for name in ["node-a", "node-b"] {
            identities::ensure_node(&admin, name).await.expect("node");
            let pod = identities::daemonset_pod(&daemonset, name).expect("pod");
            agent_pods.push(
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("agent pod"),
            );
        }
        let token = |pod: Option<&Pod>, sa: &'static str| {
            let admin = admin.clone();
            let pod = pod.cloned();
            async move {
                identities::request_token(&admin, NS, sa, pod.as_ref())
                    .await
                    .expect("token")
            }
        };
        let agent_a = cp
            .client_for_token(&token(Some(&agent_pods[0]), "reboot-agent").await)
            .await
            .expect("client");
        let agent_unbound = cp
            .client_for_token(&token(None, "reboot-agent").await)
            .await
            .expect("client");
        let controller = cp
            .client_for_token(&token(None, "reboot-controller").await)
            .await
            .expect("client");
        // The API server enforces a new policy once its informer has seen it: wait for that.
        let unbound: Api<Node> = Api::all(agent_unbound.clone());
        let probe = merge(json!({"metadata": {"annotations": {"reboot-needed": "true"}}}));
        wait_until(
            "the admission policy is enforced",
            Duration::from_secs(30),
            None,
            || async {
                let dry_run = PatchParams::default().dry_run();
                unbound.patch("node-a", &dry_run, &probe).await.is_err()
            },
        )
        .await;
        Identities {
            control_plane: cp,
            admin,
            agent_a,
            agent_unbound,
            controller,
        }
    }
}

fn merge(patch: serde_json::Value) -> Patch<serde_json::Value> {
    Patch::Merge(patch)
}

/// The patches of `common::Transition` as `kube` takes them.
mod json_patch_of {
    use kube::api::Patch;

    pub struct Step(pub Patch<()>);

    pub fn step<T: k8s_openapi::serde::Serialize>(patch: T) -> Step {
        let value = serde_json::to_value(patch).expect("a patch serializes");
        Step(Patch::Json(
            serde_json::from_value(value).expect("a JSON patch"),
        ))
    }
}

/// The agent of node-a may make the protocol's writes to node-a, and nothing else: not to
/// node-b, not its labels, spec or other annotations, not the controller's grant keys; a
/// token bound to no pod changes nothing.
pub async fn check_an_agent_may_change_only_the_protocol_annotations_of_its_own_node(
    ids: &Identities,
) {
    let nodes: Api<Node> = Api::all(ids.agent_a.clone());
    let params = PatchParams::default();
    let before = node(&ids.admin, "node-a").await;
    let policy = "ValidatingAdmissionPolicy 'node-reboot-operator-agent'";

    // Allowed: each of the agent's protocol steps, as the real agent writes it
    // (`common::Transition`, a JSON patch that tests what it depends on), from the state the
    // controller or an administrator leaves. The controller's part is played by the admin.
    let keys = common::AnnotationKeys::default();
    let transition = common::Transition::new(&keys);
    let facts = || async { common::NodeFacts::from_node(&node(&ids.admin, "node-a").await) };
    let admin_nodes: Api<Node> = Api::all(ids.admin.clone());
    let as_admin = |annotations: serde_json::Value| {
        let patch = merge(json!({"metadata": {"annotations": annotations}}));
        let admin_nodes = admin_nodes.clone();
        async move {
            admin_nodes
                .patch("node-a", &PatchParams::default(), &patch)
                .await
                .expect("the admin's patch");
        }
    };
    let agent_step = |what: &'static str, patch: json_patch_of::Step| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch("node-a", &PatchParams::default(), &patch.0)
                .await
                .unwrap_or_else(|e| panic!("the agent's step {what} on its own node: {e}"));
        }
    };
    // A merge patch of node-a's annotations by the agent, as a stolen token could send it.
    let agent_annotates = |annotations: serde_json::Value| {
        let nodes = nodes.clone();
        async move {
            let patch = merge(json!({"metadata": {"annotations": annotations}}));
            nodes.patch("node-a", &PatchParams::default(), &patch).await
        }
    };
    // The node's kubelet reports boot-1 (the admin plays it, through the status).
    let status = merge(json!({"status": {"nodeInfo": {"bootID": "boot-1"}}}));
    admin_nodes
        .patch_status("node-a", &PatchParams::default(), &status)
        .await
        .expect("the kubelet's status");
    // The controller's go-ahead. A stolen token cannot take it with a boot id of its choosing
    // (the controller would take the kubelet's report of the running boot for the reboot);
    // the agent takes it with the boot the kubelet reports.
    as_admin(json!({"reboot-now": "true"})).await;
    refused(
        "take the go-ahead with another boot id than the kubelet reports",
        agent_annotates(json!({"reboot-now": null, "reboot-in-progress": "true",
            "reboot-boot-id": "boot-forged"}))
        .await,
        403,
        "with the boot id the kubelet reports (boot-1)",
    );
    agent_step(
        "begin the reboot",
        json_patch_of::step(transition.begin_reboot(&facts().await, "boot-1")),
    )
    .await;
    // A stolen token cannot forge a proven reboot: the boot id is recorded once per attempt,
    // and reboot-done carries a boot id other than the recorded one.
    let forged = [
        (
            "change the boot id recorded for this attempt",
            json!({"reboot-boot-id": "boot-forged"}),
        ),
        (
            "report the reboot done in the recorded boot",
            json!({"reboot-in-progress": null, "reboot-done": "true", "reboot-boot-id": "boot-1"}),
        ),
    ];
    for (what, annotations) in forged {
        refused(
            what,
            agent_annotates(annotations).await,
            403,
            "only as its protocol steps do",
        );
    }
    // A hand edit drops the recorded boot id: nothing can prove this reboot now, so nothing
    // may report it done; the agent records the current boot id (the kubelet's, no other)
    // and reboots.
    as_admin(json!({"reboot-boot-id": null})).await;
    refused(
        "record another boot id than the kubelet reports",
        agent_annotates(json!({"reboot-boot-id": "boot-forged"})).await,
        403,
        "only as its protocol steps do",
    );
    refused(
        "report the reboot done without a recorded boot id",
        agent_annotates(json!({"reboot-in-progress": null,
                    "reboot-done": "true", "reboot-boot-id": "boot-2"}))
        .await,
        403,
        "only as its protocol steps do",
    );
    agent_step(
        "record the boot id",
        json_patch_of::step(transition.record_boot_id(&facts().await, "boot-1")),
    )
    .await;
    // Back from the reboot: reboot-done carries the boot the kubelet reports now, no other
    // (a stolen token cannot prove a made-up boot and stall the pool on it).
    let status = merge(json!({"status": {"nodeInfo": {"bootID": "boot-2"}}}));
    admin_nodes
        .patch_status("node-a", &PatchParams::default(), &status)
        .await
        .expect("the kubelet's status");
    refused(
        "report the reboot done with a boot id the kubelet does not report",
        agent_annotates(json!({"reboot-in-progress": null,
                    "reboot-done": "true", "reboot-boot-id": "boot-made-up"}))
        .await,
        403,
        "only as its protocol steps do",
    );
    agent_step(
        "prove the reboot",
        json_patch_of::step(transition.finish_reboot(&facts().await, Some("boot-1"), "boot-2")),
    )
    .await;
    // The controller completes: the agent's keys are cleared, its history stays.
    as_admin(json!({"reboot-done": null, "reboot-boot-id": null,
        "reboot-last-completed": "2026-01-01T00:00:00Z"}))
    .await;
    // An automatic request (the sentinel), then the sentinel is gone.
    let record = "boot-2 file 1.0 0 0";
    agent_step(
        "request a reboot",
        json_patch_of::step(transition.request(
            &facts().await,
            "agent: /var/run/reboot-required",
            record,
        )),
    )
    .await;
    agent_step(
        "forget the sentinel",
        json_patch_of::step(transition.forget_sentinel(&facts().await, record)),
    )
    .await;

    // Forbidden: the controller's keys, and transitions that are none of the agent's steps.
    // An administrator's cordon: the agent may not mark it as the operator's (the controller
    // would remove it at completion), nor unmark the operator's.
    let steps = "only as its protocol steps do";
    let own = "own protocol steps";
    for (what, annotations, says) in [
        (
            "mark a cordon as the operator's",
            json!({"reboot-cordoned": "true"}),
            own,
        ),
        (
            "backdate the last completion",
            json!({"reboot-last-completed": "2020-01-01T00:00:00Z"}),
            own,
        ),
        (
            "drop the completion time",
            json!({"reboot-last-completed": null}),
            own,
        ),
        (
            "give itself the go-ahead",
            json!({"reboot-now": "true"}),
            steps,
        ),
        (
            "claim a reboot in progress without the go-ahead",
            json!({"reboot-in-progress": "true", "reboot-boot-id": "boot-x"}),
            steps,
        ),
        (
            "report a reboot done that was never in progress",
            json!({"reboot-done": "true", "reboot-boot-id": "boot-x"}),
            steps,
        ),
        ("drop the request", json!({"reboot-needed": null}), steps),
        (
            "change who asked, alone",
            json!({"reboot-requested-by": "agent: forged"}),
            steps,
        ),
        (
            "drop who asked",
            json!({"reboot-requested-by": null}),
            steps,
        ),
        (
            "record a boot id outside a reboot",
            json!({"reboot-boot-id": "boot-x"}),
            steps,
        ),
    ] {
        refused(what, agent_annotates(annotations).await, 403, says);
    }
    as_admin(json!({"reboot-cordoned": "true"})).await;
    refused(
        "unmark the operator's cordon",
        agent_annotates(json!({"reboot-cordoned": null})).await,
        403,
        own,
    );
    as_admin(json!({"reboot-cordoned": null})).await;
    // The go-ahead may only become a reboot in progress, in the same write.
    as_admin(json!({"reboot-now": "true"})).await;
    refused(
        "drop the go-ahead without starting the reboot",
        agent_annotates(json!({"reboot-now": null})).await,
        403,
        steps,
    );
    refused(
        "start the reboot and keep the go-ahead",
        agent_annotates(json!({"reboot-in-progress": "true", "reboot-boot-id": "boot-2"})).await,
        403,
        steps,
    );
    as_admin(json!({"reboot-now": null, "reboot-needed": null})).await;

    let protocol = merge(json!({"metadata": {"annotations": {"reboot-in-progress": "true"}}}));
    let result = nodes.patch("node-b", &params, &protocol).await;
    refused(
        "patching another node",
        result,
        403,
        "the reboot agent of node node-a may not change node node-b",
    );
    let labels = merge(json!({"metadata": {"labels": {"example.com/evil": "true"}}}));
    refused(
        "labels",
        nodes.patch("node-a", &params, &labels).await,
        403,
        "labels",
    );
    let remove_label = merge(json!({"metadata": {"labels": {"kubernetes.io/os": null}}}));
    refused(
        "removing a label",
        nodes.patch("node-a", &params, &remove_label).await,
        403,
        "labels",
    );
    let taints = merge(json!({"spec": {"taints": [{"key": "evil", "effect": "NoSchedule"}]}}));
    refused(
        "taints",
        nodes.patch("node-a", &params, &taints).await,
        403,
        "spec",
    );
    let cordon = merge(json!({"spec": {"unschedulable": true}}));
    refused(
        "spec.unschedulable",
        nodes.patch("node-a", &params, &cordon).await,
        403,
        "spec",
    );
    refused(
        "another annotation",
        agent_annotates(json!({"example.com/other": "x"})).await,
        403,
        "own protocol steps",
    );
    // The grant keys and the cordon marker are the controller's: an agent cannot forge a slot
    // for its node or claim a cordon; nor give its node up (the administrator's).
    for key in common::keys::CONTROLLER_ONLY
        .iter()
        .chain(&common::keys::ADMINISTRATOR_ONLY)
        .copied()
    {
        refused(
            key,
            agent_annotates(json!({key: "forged"})).await,
            403,
            &format!("may not change {key}"),
        );
    }
    for (what, result) in [
        (
            "patching another node",
            nodes.patch("node-b", &params, &protocol).await,
        ),
        ("labels", nodes.patch("node-a", &params, &labels).await),
    ] {
        let message = result.expect_err(what).to_string();
        assert!(
            message.contains(policy),
            "{what} refused by the policy: {message}"
        );
    }

    // Fail closed: an agent token bound to no pod names no node and changes none.
    let unbound: Api<Node> = Api::all(ids.agent_unbound.clone());
    refused(
        "a token without the node-name claim",
        unbound.patch("node-a", &params, &protocol).await,
        403,
        "no authentication.kubernetes.io/node-name claim",
    );

    // What the admin sees: only the protocol changed on node-a, nothing on node-b.
    let a = node(&ids.admin, "node-a").await;
    let annotations = a.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("reboot-requested-by").map(String::as_str),
        Some("agent: /var/run/reboot-required"),
        "the agent's request stays as history"
    );
    for key in [
        "reboot-cordoned",
        "reboot-now",
        "reboot-in-progress",
        "reboot-sentinel",
        "example.com/other",
    ] {
        assert!(!annotations.contains_key(key), "{key}: {annotations:?}");
    }
    assert_eq!(a.spec, before.spec, "taints and unschedulable unchanged");
    assert_eq!(a.metadata.labels, before.metadata.labels);
    let b = node(&ids.admin, "node-b").await;
    assert!(b.metadata.annotations.unwrap_or_default().is_empty());
}

/// What each program's ServiceAccount must not do (the agent: pods, evictions, Secrets, the
/// ledger; the controller: Secrets, Leases outside its namespace, deleting pods) is refused,
/// and what the controller needs (list pods, evict, cordon, a pool's ledger) works.
pub async fn check_what_the_programs_must_not_do_is_refused(ids: &Identities) {
    let admin_pods: Api<Pod> = Api::default_namespaced(ids.admin.clone());
    let pod: Pod = object(json!({
        "metadata": {"name": "work"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "work", "image": "registry.example/work:1"}]},
    }));
    admin_pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("workload pod");
    let secret: Secret =
        object(json!({"metadata": {"name": "credentials"}, "stringData": {"password": "hunter2"}}));
    Api::<Secret>::namespaced(ids.admin.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let lease: Lease = object(json!({"metadata": {"name": "someone-else"}}));
    for namespace in [NS, "default"] {
        Api::<Lease>::namespaced(ids.admin.clone(), namespace)
            .create(&PostParams::default(), &lease)
            .await
            .expect("lease");
    }

    // The agent: no pods, no evictions, no secrets.
    let agent = ids.agent_a.clone();
    let pods: Api<Pod> = Api::default_namespaced(agent.clone());
    let evict = pods.evict("work", &EvictParams::default()).await;
    refused("the agent evicting a pod", evict, 403, "forbidden");
    let all_pods = Api::<Pod>::all(agent.clone())
        .list(&ListParams::default())
        .await;
    refused("the agent listing pods", all_pods, 403, "forbidden");
    let own_pods = Api::<Pod>::namespaced(agent.clone(), NS)
        .list(&ListParams::default())
        .await;
    refused(
        "the agent listing its namespace's pods",
        own_pods,
        403,
        "forbidden",
    );
    let secrets: Api<Secret> = Api::namespaced(agent.clone(), NS);
    refused(
        "the agent reading a Secret",
        secrets.get("credentials").await,
        403,
        "forbidden",
    );
    let leases: Api<Lease> = Api::namespaced(agent, NS);
    refused(
        "the agent reading the ledger",
        leases.get("someone-else").await,
        403,
        "forbidden",
    );

    // The controller: drains through evictions only, reads no secrets, only the Leases of its
    // own namespace (each RebootPool's ledger is one, named after the pool).
    let controller = ids.controller.clone();
    let secrets: Api<Secret> = Api::namespaced(controller.clone(), NS);
    refused(
        "the controller reading a Secret",
        secrets.get("credentials").await,
        403,
        "forbidden",
    );
    let all_secrets = Api::<Secret>::all(controller.clone())
        .list(&ListParams::default())
        .await;
    refused(
        "the controller listing Secrets",
        all_secrets,
        403,
        "forbidden",
    );
    let elsewhere: Api<Lease> = Api::namespaced(controller.clone(), "default");
    refused(
        "the controller reading a Lease outside its namespace",
        elsewhere.get("someone-else").await,
        403,
        "forbidden",
    );
    let ledger: Lease = object(json!({"metadata": {"name": common::pool::ledger_name("gpu")}}));
    Api::<Lease>::namespaced(controller.clone(), NS)
        .create(&PostParams::default(), &ledger)
        .await
        .expect("the controller creates a pool's ledger in its namespace");
    Api::<Lease>::namespaced(controller.clone(), NS)
        .delete(&common::pool::ledger_name("gpu"), &DeleteParams::default())
        .await
        .expect("the controller deletes a deleted pool's ledger in its namespace");
    refused(
        "the controller deleting a Lease outside its namespace",
        elsewhere
            .delete("someone-else", &DeleteParams::default())
            .await,
        403,
        "forbidden",
    );
    let pods: Api<Pod> = Api::default_namespaced(controller.clone());
    let delete = pods.delete("work", &DeleteParams::default()).await;
    refused("the controller deleting a pod", delete, 403, "forbidden");
    // What it needs does work: list the node's pods and evict them.
    let on_node = Api::<Pod>::all(controller.clone())
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .expect("the controller lists pods");
    assert!(
        on_node
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("work"))
    );
    pods.evict("work", &EvictParams::default())
        .await
        .expect("the controller evicts a pod");
    let node_patch = merge(json!({"spec": {"unschedulable": true}}));
    Api::<Node>::all(controller)
        .patch("node-b", &PatchParams::default(), &node_patch)
        .await
        .expect("the controller cordons a node");
}

/// The real helm of testenv/bin, with its config, cache and data under `home`; fails, naming
/// `make testenv`, when it is not built.
pub fn helm(home: &Path) -> Command {
    let bin = ControlPlane::bin("helm").unwrap_or_else(|e| panic!("{e}"));
    let mut helm = Command::new(bin);
    for (var, dir) in [
        ("HELM_CONFIG_HOME", "config"),
        ("HELM_CACHE_HOME", "cache"),
        ("HELM_DATA_HOME", "data"),
    ] {
        helm.env(var, home.join(dir));
    }
    helm.env_remove("HELM_NAMESPACE").env_remove("KUBECONFIG");
    helm
}

/// A YAML document that is no Kubernetes object (values.yaml, a rules file) as JSON, read by
/// the real kubectl without a server: as the `spec` of an object (`kubectl label --local`).
/// The object's name is `values`: a bare `y` would be YAML's boolean.
pub fn yaml_to_json(yaml: &str) -> serde_json::Value {
    let indented: String = yaml.lines().map(|l| format!("  {l}\n")).collect();
    let wrapped = format!(
        "apiVersion: e2e.example/v1\nkind: Yaml\nmetadata:\n  name: values\nspec:\n{indented}"
    );
    let kubectl = ControlPlane::bin("kubectl").unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(kubectl)
        .args(["label", "--local", "-f", "-", "-o", "json", "e2e-none-"])
        .env("KUBECONFIG", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut stdin = child.stdin.take().expect("stdin");
    // A large document must not wait on kubectl's output that nobody reads yet.
    let writer = std::thread::spawn(move || stdin.write_all(wrapped.as_bytes()));
    let out = child.wait_with_output().expect("kubectl ends");
    writer
        .join()
        .expect("writer")
        .expect("kubectl reads its stdin");
    assert!(
        out.status.success(),
        "kubectl could not read the YAML: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    let object: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    object["spec"].clone()
}

/// helm against the control plane, as its admin.
pub fn helm_on(cp: &ControlPlane) -> Command {
    let mut helm = helm(&cp.dir().join("helm"));
    helm.arg(format!("--kubeconfig={}", cp.kubeconfig_path().display()));
    helm
}
