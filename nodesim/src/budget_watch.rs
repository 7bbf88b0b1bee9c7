//! An independent watcher of the budget invariant (DESIGN.md section 3): it counts
//! unavailable nodes from Node objects alone, without asking the operator, and records the
//! first moment more than the budget were unavailable. Tests fail on it; the demo and the
//! benchmark report the most nodes that were ever down at once.

use common::{AnnotationKeys, NodeFacts};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};
use tokio::task::JoinHandle;

/// Whether a node is unavailable as DESIGN.md invariant 1 counts it, from the Node alone: not
/// Ready, cordoned, or in the reboot protocol.
pub fn unavailable(node: &Node, keys: &AnnotationKeys) -> bool {
    let facts = NodeFacts::from_node(node);
    common::unavailable(&facts, &facts.protocol(keys), false)
}

#[derive(Debug, Default)]
struct Seen {
    unavailable: BTreeMap<String, bool>,
    max: usize,
    violation: Option<String>,
}

/// Watches every Node, independently of the operator, and records the first moment more
/// than `budget` nodes are unavailable.
#[derive(Debug)]
pub struct BudgetWatch {
    seen: Arc<Mutex<Seen>>,
    budget: usize,
    task: JoinHandle<()>,
}

impl BudgetWatch {
    pub async fn start(client: Client, budget: usize) -> BudgetWatch {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let keys = AnnotationKeys::default();
        let stream =
            watcher(Api::<Node>::all(client), watcher::Config::default()).touched_objects();
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(Ok(node)) = stream.next().await {
                let name = node.metadata.name.clone().unwrap_or_default();
                let mut seen = recorded.lock().unwrap_or_else(|e| e.into_inner());
                seen.unavailable.insert(name, unavailable(&node, &keys));
                let down: Vec<&String> = seen
                    .unavailable
                    .iter()
                    .filter(|(_, u)| **u)
                    .map(|(n, _)| n)
                    .collect();
                let count = down.len();
                if count > budget && seen.violation.is_none() {
                    seen.violation = Some(format!(
                        "{count} nodes unavailable at once with a budget of {budget}: {down:?}"
                    ));
                }
                seen.max = seen.max.max(count);
            }
        });
        BudgetWatch { seen, budget, task }
    }

    /// Fails the moment the budget was exceeded.
    pub fn check(&self) -> Result<(), String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match &seen.violation {
            Some(v) => Err(format!("budget invariant broken: {v}")),
            None => Ok(()),
        }
    }

    /// The most nodes that were unavailable at once.
    pub fn max_seen(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).max
    }

    pub fn budget(&self) -> usize {
        self.budget
    }
}

impl Drop for BudgetWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
