//! The controller's watch of PodDisruptionBudgets, as a drain reads it: an eviction that a
//! budget refused (429) is tried again as soon as a budget that selects the pod changes and
//! the Eviction API would now let the pod go by its own rules (a replacement became Ready
//! elsewhere, the budget was relaxed or removed), instead of when the backoff says. The
//! backoff stays for what the watch cannot tell: no budget seen for the pod, or a watch that
//! says nothing new.
//!
//! Only a change of one of the pod's own budgets wakes its eviction, so that a busy cluster's
//! budget updates never add requests: at most one more eviction per change of that budget.

use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use tokio::sync::watch;

/// The budgets the pre-flight check watches, as a drain reads them.
pub trait DisruptionBudgetWatch: Send + Sync + std::fmt::Debug {
    /// A receiver that wakes at the next change of any budget.
    fn changes(&self) -> watch::Receiver<()>;
    /// The budgets that select `pod` now, at their versions.
    fn refused_at(&self, pod: &Pod) -> RefusedAt;
    /// Whether the budgets of `pod` changed since its eviction was refused `at` them, and the
    /// Eviction API would now evict it.
    fn frees(&self, pod: &Pod, at: &RefusedAt) -> bool;
}

/// The budgets that selected a pod when its eviction was refused, by `namespace/name`, each
/// at its `resourceVersion` then.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefusedAt(pub BTreeMap<String, String>);

/// Resolves at the next change of a budget; never without a watch.
pub(crate) async fn next_change(changes: &mut Option<watch::Receiver<()>>) {
    let changed = match changes {
        Some(receiver) => receiver.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        std::future::pending::<()>().await;
    }
}
