//! Whether the Eviction API (policy/v1) would refuse to evict a pod now, by the rules the API
//! server applies to an eviction, in their order:
//!
//! 1. A pod that is Pending, Succeeded or Failed, or already being deleted, is deleted without
//!    a look at any budget.
//! 2. A pod that no PodDisruptionBudget of its namespace selects is deleted; one that more than
//!    one selects is refused (the API supports one budget a pod).
//! 3. A pod that is not Ready is deleted when its budget's `unhealthyPodEvictionPolicy` is
//!    `AlwaysAllow`, or (`IfHealthyBudget`, the default) when the budget has the healthy pods
//!    it needs (`currentHealthy >= desiredHealthy > 0`).
//! 4. Otherwise the budget decides: refused while its status is older than its spec, while it
//!    allows a negative number of disruptions or has over 2,000 evictions its controller has
//!    not confirmed, and while it allows no disruption; deleted otherwise.
//!
//! A budget selects a pod of its namespace when its selector matches the pod's labels; an
//! empty selector selects every pod, a missing or unreadable one none.

use crate::drain::budgets::RefusedAt;
use k8s_openapi::api::{core::v1::Pod, policy::v1::PodDisruptionBudget};
use kube::{
    ResourceExt as _,
    core::{Selector, SelectorExt as _},
};
use std::fmt;

/// The API server refuses an eviction while a budget has more evictions than this that its
/// controller has not confirmed (`status.disruptedPods`).
const MAX_DISRUPTED_PODS: usize = 2000;

/// Why the Eviction API would refuse to evict a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// More than one budget selects the pod (`namespace/name` of each).
    SeveralBudgets(Vec<String>),
    /// The budget's status is older than its spec: its controller has not processed it yet.
    NotObserved(String),
    /// The budget allows a negative number of disruptions.
    Negative(String),
    /// The budget has more evictions its controller has not confirmed than the API allows.
    Unconfirmed(String),
    /// The budget allows no disruption: it needs `desired` healthy pods and has `current`.
    NoDisruption {
        budget: String,
        desired: i32,
        current: i32,
    },
}

impl Refusal {
    /// The budgets the refusal names.
    pub fn budgets(&self) -> Vec<&str> {
        match self {
            Self::SeveralBudgets(names) => names.iter().map(String::as_str).collect(),
            Self::NotObserved(name) | Self::Negative(name) | Self::Unconfirmed(name) => {
                vec![name]
            }
            Self::NoDisruption { budget, .. } => vec![budget],
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SeveralBudgets(names) => write!(
                f,
                "more than one PodDisruptionBudget selects it ({}), which the Eviction API does \
                 not support",
                names.join(", ")
            ),
            Self::NotObserved(name) => write!(
                f,
                "the PodDisruptionBudget {name} is still being processed (its status is older \
                 than its spec)"
            ),
            Self::Negative(name) => write!(
                f,
                "the PodDisruptionBudget {name} allows a negative number of disruptions"
            ),
            Self::Unconfirmed(name) => write!(
                f,
                "the PodDisruptionBudget {name} has more than {MAX_DISRUPTED_PODS} evictions \
                 its controller has not confirmed"
            ),
            Self::NoDisruption {
                budget,
                desired,
                current,
            } => write!(
                f,
                "the PodDisruptionBudget {budget} allows no disruption (it needs {desired} \
                 healthy pods and has {current})"
            ),
        }
    }
}

/// A pod the Eviction API would refuse to evict, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `namespace/name`.
    pub pod: String,
    pub refusal: Refusal,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the pod {}: {}", self.pod, self.refusal)
    }
}

/// `namespace/name` of an object.
pub fn key(object: &impl kube::Resource) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// Why the Eviction API would refuse to evict `pod` now, given every budget (of any
/// namespace); `None` if it would evict it.
pub fn refusal<'a>(
    pod: &Pod,
    budgets: impl IntoIterator<Item = &'a PodDisruptionBudget>,
) -> Option<Refusal> {
    if ignores_budgets(pod) {
        return None;
    }
    let mut selecting: Vec<&PodDisruptionBudget> = budgets
        .into_iter()
        .filter(|pdb| selects(pdb, pod))
        .collect();
    let budget = match selecting.len() {
        0 => return None,
        1 => selecting.remove(0),
        _ => {
            let mut names: Vec<String> = selecting.iter().map(|p| key(*p)).collect();
            names.sort();
            return Some(Refusal::SeveralBudgets(names));
        }
    };
    let status = budget.status.clone().unwrap_or_default();
    // Numbers the API server leaves out are 0, as it reads them.
    let current = status.current_healthy.unwrap_or(0);
    let desired = status.desired_healthy.unwrap_or(0);
    let allowed = status.disruptions_allowed.unwrap_or(0);
    if !is_ready(pod) {
        let always = budget
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
            == Some("AlwaysAllow");
        if always || (current >= desired && desired > 0) {
            return None;
        }
    }
    let name = key(budget);
    let observed = status.observed_generation.unwrap_or(0);
    let generation = budget.metadata.generation.unwrap_or(0);
    let unconfirmed = status.disrupted_pods.as_ref().map_or(0, |p| p.len());
    if observed < generation {
        Some(Refusal::NotObserved(name))
    } else if allowed < 0 {
        Some(Refusal::Negative(name))
    } else if unconfirmed > MAX_DISRUPTED_PODS {
        Some(Refusal::Unconfirmed(name))
    } else if allowed == 0 {
        Some(Refusal::NoDisruption {
            budget: name,
            desired,
            current,
        })
    } else {
        None
    }
}

/// Whether the API could refuse the eviction of some pod `budget` selects: the budget's pods
/// are worth reading. A budget that allows disruptions refuses only a pod another budget
/// selects too, and that one is found through the other budget when it could refuse.
pub fn could_refuse(budget: &PodDisruptionBudget) -> bool {
    let status = budget.status.clone().unwrap_or_default();
    status.observed_generation.unwrap_or(0) < budget.metadata.generation.unwrap_or(0)
        || status.disruptions_allowed.unwrap_or(0) <= 0
        || status.disrupted_pods.as_ref().map_or(0, |p| p.len()) > MAX_DISRUPTED_PODS
}

/// The versions of the budgets that select `pod` now: what a refusal of its eviction was made
/// against.
pub fn refused_at<'a>(
    pod: &Pod,
    budgets: impl IntoIterator<Item = &'a PodDisruptionBudget>,
) -> RefusedAt {
    RefusedAt(
        budgets
            .into_iter()
            .filter(|budget| selects(budget, pod))
            .map(|budget| {
                let version = budget.metadata.resource_version.clone();
                (key(budget), version.unwrap_or_default())
            })
            .collect(),
    )
}

/// Whether the budgets of `pod` changed since its eviction was refused `at` them, and the
/// Eviction API would now evict it. Only a change of the pod's own budgets counts, so that a
/// store that already showed the budget free when the API server refused (a stale one) never
/// makes a loop of evictions, nor do other budgets' changes.
pub fn frees<'a>(
    pod: &Pod,
    at: &RefusedAt,
    budgets: impl IntoIterator<Item = &'a PodDisruptionBudget> + Clone,
) -> bool {
    refused_at(pod, budgets.clone()) != *at && refusal(pod, budgets).is_none()
}

/// A pod the API deletes without a look at its budgets: not started (Pending), finished, or
/// already being deleted.
fn ignores_budgets(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Pending" | "Succeeded" | "Failed"))
        || pod.metadata.deletion_timestamp.is_some()
}

/// The pod's Ready condition is True (what the API server counts as healthy).
pub fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The budget is in the pod's namespace and its selector matches the pod's labels.
fn selects(budget: &PodDisruptionBudget, pod: &Pod) -> bool {
    if budget.namespace() != pod.namespace() {
        return false;
    }
    let Some(selector) = budget.spec.as_ref().and_then(|s| s.selector.clone()) else {
        return false;
    };
    Selector::try_from(selector).is_ok_and(|s| s.matches(pod.labels()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    fn pod(phase: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": []},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    /// A budget on `app=web` in `shop`, observed, with `status` merged over a healthy one that
    /// allows one disruption (2 of 3 needed).
    fn budget(name: &str, spec: Value, status: Value) -> PodDisruptionBudget {
        let mut base_spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        merge(&mut base_spec, spec);
        let mut base_status = json!({"observedGeneration": 1, "disruptionsAllowed": 1,
            "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3});
        merge(&mut base_status, status);
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "generation": 1},
            "spec": base_spec,
            "status": base_status,
        }))
        .unwrap()
    }

    fn merge(base: &mut Value, over: Value) {
        if let (Some(base), Value::Object(over)) = (base.as_object_mut(), over) {
            base.extend(over);
        }
    }

    fn at_zero() -> Value {
        json!({"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2})
    }

    fn no_disruption(current: i32) -> Option<Refusal> {
        Some(Refusal::NoDisruption {
            budget: "shop/web".into(),
            desired: 2,
            current,
        })
    }

    #[test]
    fn a_ready_running_pod_is_refused_only_while_its_budget_allows_no_disruption() {
        let running = pod("Running", true);
        let allows = budget("web", json!({}), json!({}));
        assert_eq!(refusal(&running, [&allows]), None);
        let zero = budget("web", json!({}), at_zero());
        assert_eq!(refusal(&running, [&zero]), no_disruption(2));
        assert_eq!(
            refusal(&running, [&zero]).unwrap().to_string(),
            "the PodDisruptionBudget shop/web allows no disruption (it needs 2 healthy pods and \
             has 2)"
        );
    }

    #[test]
    fn pending_finished_and_terminating_pods_go_whatever_the_budget() {
        let zero = budget("web", json!({}), at_zero());
        for phase in ["Pending", "Succeeded", "Failed"] {
            assert_eq!(refusal(&pod(phase, false), [&zero]), None, "{phase}");
        }
        let mut going = pod("Running", true);
        going.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(refusal(&going, [&zero]), None);
        // No phase at all (not yet reported) is no exemption.
        let mut unknown = pod("Running", true);
        unknown.status.as_mut().unwrap().phase = None;
        assert_eq!(refusal(&unknown, [&zero]), no_disruption(2));
    }

    #[test]
    fn a_not_ready_pod_goes_while_the_budget_has_its_healthy_pods_or_always_allows() {
        let broken = pod("Running", false);
        // minAvailable 2 of 3, one not Ready: 2 healthy of 2 needed, the budget at 0.
        let zero = budget("web", json!({}), at_zero());
        assert_eq!(refusal(&broken, [&zero]), None);
        // Short of healthy pods: refused (IfHealthyBudget, the default, and spelled out).
        let short = json!({"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 2});
        for spec in [
            json!({}),
            json!({"unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        ] {
            let short = budget("web", spec, short.clone());
            assert_eq!(refusal(&broken, [&short]), no_disruption(1));
        }
        // AlwaysAllow: goes even then, and even while the budget is not observed.
        let always = json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"});
        let unobserved = json!({"observedGeneration": 0, "disruptionsAllowed": 0,
            "currentHealthy": 1, "desiredHealthy": 2});
        assert_eq!(refusal(&broken, [&budget("web", always, unobserved)]), None);
        // A budget that needs no healthy pod (desiredHealthy 0) is no exemption.
        let none_needed =
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0});
        assert!(refusal(&broken, [&budget("web", json!({}), none_needed)]).is_some());
        // The policy is about pods that are not Ready only.
        let always = budget(
            "web",
            json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"}),
            at_zero(),
        );
        assert_eq!(refusal(&pod("Running", true), [&always]), no_disruption(2));
    }

    #[test]
    fn a_budget_not_yet_observed_negative_or_flooded_refuses_even_with_room() {
        let running = pod("Running", true);
        let cases = [
            (
                json!({"observedGeneration": 0}),
                Refusal::NotObserved("shop/web".into()),
            ),
            (
                json!({"disruptionsAllowed": -1}),
                Refusal::Negative("shop/web".into()),
            ),
        ];
        for (status, expected) in cases {
            let pdb = budget("web", json!({}), status);
            assert!(could_refuse(&pdb));
            assert_eq!(refusal(&running, [&pdb]), Some(expected));
        }
        // No status at all: never observed.
        let mut fresh = budget("web", json!({}), json!({}));
        fresh.status = None;
        assert_eq!(
            refusal(&running, [&fresh]),
            Some(Refusal::NotObserved("shop/web".into()))
        );
        let pending: serde_json::Map<String, Value> = (0..=MAX_DISRUPTED_PODS)
            .map(|i| (format!("p{i}"), json!("2026-01-01T00:00:00Z")))
            .collect();
        let flooded = budget("web", json!({}), json!({"disruptedPods": pending}));
        assert_eq!(
            refusal(&running, [&flooded]),
            Some(Refusal::Unconfirmed("shop/web".into()))
        );
        assert!(!could_refuse(&budget("web", json!({}), json!({}))));
    }

    #[test]
    fn only_budgets_of_the_pods_namespace_whose_selector_matches_count() {
        let running = pod("Running", true);
        let zero = at_zero();
        let other_app = budget(
            "db",
            json!({"selector": {"matchLabels": {"app": "db"}}}),
            zero.clone(),
        );
        let mut elsewhere = budget("web", json!({}), zero.clone());
        elsewhere.metadata.namespace = Some("other".into());
        let no_selector = budget("all", json!({"selector": null}), zero.clone());
        let bad = budget(
            "bad",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}),
            zero.clone(),
        );
        assert_eq!(
            refusal(&running, [&other_app, &elsewhere, &no_selector, &bad]),
            None
        );
        // An empty selector selects every pod of the namespace; expressions are honoured.
        let every = budget("every", json!({"selector": {}}), zero.clone());
        assert!(refusal(&running, [&every]).is_some());
        let not_db = budget(
            "not-db",
            json!({"selector": {"matchExpressions": [
                {"key": "app", "operator": "NotIn", "values": ["db"]}]}}),
            zero,
        );
        assert!(refusal(&running, [&not_db]).is_some());
    }

    #[test]
    fn a_pod_two_budgets_select_is_refused_even_by_budgets_with_room() {
        let (a, b) = (
            budget("web", json!({}), json!({})),
            budget("also-web", json!({}), json!({})),
        );
        let refused = refusal(&pod("Running", true), [&a, &b]).unwrap();
        assert_eq!(
            refused,
            Refusal::SeveralBudgets(vec!["shop/also-web".into(), "shop/web".into()])
        );
        assert_eq!(refused.budgets(), ["shop/also-web", "shop/web"]);
        // The rule holds for pods that are not Ready too; not for a Pending one.
        assert!(refusal(&pod("Running", false), [&a, &b]).is_some());
        assert_eq!(refusal(&pod("Pending", false), [&a, &b]), None);
    }

    fn labelled_pod(labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": labels},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a pod")
    }

    fn versioned_budget(name: &str, version: &str, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": version,
                         "generation": 1},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                       "currentHealthy": 2 + allowed, "desiredHealthy": 2,
                       "expectedPods": 3},
        }))
        .expect("a budget")
    }

    #[test]
    fn a_refused_pod_is_freed_when_its_budget_changes_to_allow_a_disruption() {
        let web = labelled_pod(json!({"app": "web"}));
        let at = refused_at(&web, [&versioned_budget("web", "10", 0)]);
        assert_eq!(
            at,
            RefusedAt(BTreeMap::from([("shop/web".into(), "10".into())]))
        );
        assert!(frees(&web, &at, [&versioned_budget("web", "11", 1)]));
        assert!(
            !frees(&web, &at, [&versioned_budget("web", "11", 0)]),
            "changed, still at 0"
        );
        // The store already showed it free when the API server refused: not again until it
        // changes, so that a stale store never makes a loop of evictions.
        let stale = refused_at(&web, [&versioned_budget("web", "9", 1)]);
        assert!(!frees(&web, &stale, [&versioned_budget("web", "9", 1)]));
    }

    #[test]
    fn another_budgets_change_does_not_free_the_pod() {
        let web = labelled_pod(json!({"app": "web"}));
        let mine = versioned_budget("web", "10", 0);
        let at = refused_at(&web, [&mine]);
        let mut other = versioned_budget("db", "12", 1);
        other.spec.as_mut().expect("spec").selector =
            serde_json::from_value(json!({"matchLabels": {"app": "db"}})).expect("a selector");
        assert!(!frees(&web, &at, [&mine, &other]));
    }

    #[test]
    fn a_removed_budget_frees_the_pod_and_none_seen_leaves_it_to_the_backoff() {
        let web = labelled_pod(json!({"app": "web"}));
        let at = refused_at(&web, [&versioned_budget("web", "10", 0)]);
        assert!(frees(&web, &at, []), "the budget was deleted");
        let none = refused_at(&web, []);
        assert!(
            !frees(&web, &none, []),
            "no budget known: the backoff decides"
        );
    }
}
