//! The load: random reboot requests and cancels, with `kubectl annotate` as an administrator
//! types them, and the bookkeeping of every request until its node is back.

use crate::Args;
use e2e::observer::Observer;
use nodesim::sandbox::Sandbox;
use rand::{RngExt, rngs::StdRng, seq::IndexedRandom};
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

/// One in this many ticks cancels a request that has no go-ahead yet.
const CANCEL_ONE_IN: u32 = 20;

/// A request made and not finished yet.
#[derive(Debug, Clone, Copy)]
struct Pending {
    since: Instant,
    /// The node's go-aheads and cancels, as the observer counted them, before the request.
    settled_before: u32,
    go_aheads_before: u32,
    cancelled: bool,
}

#[derive(Debug)]
pub struct Load {
    names: Vec<String>,
    /// Requests in flight: at most this many at once (twice the budget keeps a queue).
    in_flight: usize,
    pending: BTreeMap<String, Pending>,
    pub requests: u32,
    pub cancels: u32,
    /// From a request to its node back (rebooted, uncordoned, out of the protocol).
    pub request_to_back: Vec<Duration>,
    /// Requests that never finished, by node.
    pub lost: Vec<String>,
    /// kubectl calls that failed (an API server restarting, say) and were tried again later.
    pub kubectl_failures: u32,
}

impl Load {
    pub fn new(args: &Args, names: Vec<String>) -> Self {
        Self {
            names,
            in_flight: 2 * args.max_unavailable,
            pending: BTreeMap::new(),
            requests: 0,
            cancels: 0,
            request_to_back: Vec::new(),
            lost: Vec::new(),
            kubectl_failures: 0,
        }
    }

    /// Settles what finished, requests more when fewer than `in_flight` are pending, and now
    /// and then cancels one. `reserved` nodes are left to the faults.
    pub fn tick(
        &mut self,
        sb: &Sandbox,
        observer: &Observer,
        rng: &mut StdRng,
        reserved: &BTreeSet<String>,
    ) {
        self.settle(observer);
        if self.pending.len() < self.in_flight {
            let idle: Vec<&String> = self
                .names
                .iter()
                .filter(|n| !self.pending.contains_key(*n) && !reserved.contains(*n))
                .filter(|n| observer.back(n))
                .collect();
            let wanted = rng
                .random_range(1..=3usize)
                .min(self.in_flight - self.pending.len());
            let chosen: Vec<String> = idle.sample(rng, wanted).map(|n| (*n).clone()).collect();
            for node in chosen {
                self.request(sb, observer, &node);
            }
        }
        if rng.random_range(0..CANCEL_ONE_IN) == 0 {
            let cancellable: Vec<String> = self
                .pending
                .iter()
                .filter(|(n, p)| !p.cancelled && observer.tally(n).go_aheads == p.go_aheads_before)
                .map(|(n, _)| n.clone())
                .collect();
            if let Some(node) = cancellable.choose(rng) {
                self.cancel(sb, node);
            }
        }
    }

    /// `kubectl annotate node <node> reboot-needed=true`; counted once the API server took it.
    pub fn request(&mut self, sb: &Sandbox, observer: &Observer, node: &str) -> bool {
        let tally = observer.tally(node);
        if !self.kubectl(
            sb,
            &[
                "annotate",
                "node",
                node,
                "reboot-needed=true",
                "--overwrite",
            ],
        ) {
            return false;
        }
        self.requests += 1;
        self.pending.insert(
            node.to_owned(),
            Pending {
                since: Instant::now(),
                settled_before: tally.go_aheads + tally.cancels,
                go_aheads_before: tally.go_aheads,
                cancelled: false,
            },
        );
        true
    }

    fn cancel(&mut self, sb: &Sandbox, node: &str) {
        if self.kubectl(sb, &["annotate", "node", node, "reboot-needed-"])
            && let Some(pending) = self.pending.get_mut(node)
        {
            pending.cancelled = true;
            self.cancels += 1;
        }
    }

    fn kubectl(&mut self, sb: &Sandbox, args: &[&str]) -> bool {
        let ok = crate::kubectl(sb, args).is_some();
        if !ok {
            self.kubectl_failures += 1;
        }
        ok
    }

    /// A request is finished when the observer counted its go-ahead or its cancel and the
    /// node is out of the protocol again.
    fn settle(&mut self, observer: &Observer) {
        let finished: Vec<(String, Pending)> = self
            .pending
            .iter()
            .filter(|(node, p)| {
                let t = observer.tally(node);
                t.go_aheads + t.cancels > p.settled_before && observer.out_of_protocol(node)
            })
            .map(|(n, p)| (n.clone(), *p))
            .collect();
        for (node, p) in finished {
            self.pending.remove(&node);
            if observer.tally(&node).go_aheads > p.go_aheads_before {
                self.request_to_back.push(p.since.elapsed());
            }
        }
    }

    pub fn is_pending(&self, node: &str) -> bool {
        self.pending.contains_key(node)
    }

    /// Waits up to `timeout` for every request to finish; those left are lost.
    pub async fn finish(&mut self, observer: &Observer, timeout: Duration) {
        let start = Instant::now();
        while !self.pending.is_empty() && start.elapsed() < timeout {
            self.settle(observer);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.lost = self.pending.keys().cloned().collect();
    }

    pub fn progress(&self, observer: &Observer) -> String {
        let total = observer.report().total();
        format!(
            "{} requests, {} reboots, {} cancels, {} pending",
            self.requests,
            total.reboots,
            total.cancels,
            self.pending.len()
        )
    }
}
