//! The faults: one at a time, each held for a while and healed, with a pause between them;
//! beside them, at most one node an administrator cordoned before its request. Each kind is
//! one the chaos tests inject; the soak draws them at random for as long as it runs.

use crate::load::Load;
use e2e::observer::Observer;
use nodesim::sandbox::Sandbox;
use rand::{rngs::StdRng, seq::IndexedRandom};
use serde::Serialize;
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};
use testenv::toxiproxy::{Proxy, Stream, Toxic};

/// The leader Lease's duration in the soak (`--leader-election-lease-duration`).
const LEASE: Duration = Duration::from_secs(4);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The leader killed (SIGKILL) and started again.
    LeaderKilled,
    /// The leader stopped (SIGSTOP) for twice its lease, then continued: it wakes believing
    /// it leads.
    LeaderFrozen,
    /// A node's agent killed (and started again, as its DaemonSet would).
    AgentKilled,
    /// The API server restarted, then the controller-manager (see
    /// `ControlPlane::restart_controller_manager` for why both).
    ApiServerRestarted,
    /// An administrator cordons an idle node, then requests its reboot: the cordon must
    /// outlive the reboot.
    AdminCordon,
    /// The leader cut off from the API server (through its fault proxy: nothing reaches the
    /// API server, no answer comes back) for three times its renew deadline.
    LeaderPartitioned,
    /// Every answer to every controller 1-5 s late, for half a minute.
    ControllersSlowed,
    /// Every answer to every agent 1-5 s late, for half a minute.
    AgentsSlowed,
    /// A second of connection resets for every controller and agent.
    ResetBurst,
    /// The agent of a node in the middle of its reboot cut off for 20 s (its connections
    /// closed, new ones refused).
    AgentCut,
}

impl Kind {
    const ALL: [Kind; 10] = [
        Kind::LeaderKilled,
        Kind::LeaderFrozen,
        Kind::AgentKilled,
        Kind::ApiServerRestarted,
        Kind::AdminCordon,
        Kind::LeaderPartitioned,
        Kind::ControllersSlowed,
        Kind::AgentsSlowed,
        Kind::ResetBurst,
        Kind::AgentCut,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Kind::LeaderKilled => "leader killed and restarted",
            Kind::LeaderFrozen => "leader frozen for twice its lease",
            Kind::AgentKilled => "agent killed",
            Kind::ApiServerRestarted => "API server and controller-manager restarted",
            Kind::AdminCordon => "node cordoned by an administrator, then requested",
            Kind::LeaderPartitioned => "leader cut off from the API server for 3 renew deadlines",
            Kind::ControllersSlowed => "every controller's API answers 1-5 s late for 30 s",
            Kind::AgentsSlowed => "every agent's API answers 1-5 s late for 30 s",
            Kind::ResetBurst => "a second of connection resets for every program",
            Kind::AgentCut => "the agent of a rebooting node cut off for 20 s",
        }
    }
}

/// A fault being held until `heal_at`.
#[derive(Debug)]
struct Held {
    kind: Kind,
    heal_at: Instant,
    /// The frozen controller.
    controller: usize,
    /// The fault proxies whose toxics go at the heal, and the one disabled.
    proxies: Vec<String>,
}

/// The leader's renew deadline in the soak (`--leader-election-renew-deadline`).
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
/// How long the slow-answer faults last.
const SLOW_FOR: Duration = Duration::from_secs(30);

/// A fault healed, waiting for the operator to finish a reboot again.
#[derive(Debug)]
struct Recovering {
    kind: Kind,
    healed: Instant,
    reboots: u32,
}

#[derive(Debug)]
pub struct Faults {
    started: Instant,
    every: Duration,
    next_at: Instant,
    held: Option<Held>,
    /// The node an administrator cordoned and requested, until its reboot is done.
    admin: Option<String>,
    /// Its reboot is done and its cordon was checked; the administrator uncordons it next.
    admin_verified: bool,
    /// Administrators' cordons that outlived their node's reboot, as they must.
    pub cordons_kept: u32,
    /// Nodes whose administrator's cordon was lost.
    pub cordons_lost: Vec<String>,
    recovering: Vec<Recovering>,
    pub injected: BTreeMap<Kind, u32>,
    /// The longest time from a fault healed to the next reboot finished.
    pub slowest_recovery: Option<(Kind, Duration)>,
}

impl Faults {
    pub fn new(every: Duration) -> Self {
        Self {
            started: Instant::now(),
            every,
            next_at: Instant::now() + every,
            held: None,
            admin: None,
            admin_verified: false,
            cordons_kept: 0,
            cordons_lost: Vec::new(),
            recovering: Vec::new(),
            injected: BTreeMap::new(),
            slowest_recovery: None,
        }
    }

    /// Nodes the load must leave alone.
    pub fn reserved(&self) -> BTreeSet<String> {
        self.admin.iter().cloned().collect()
    }

    /// The node an administrator cordoned and has not uncordoned yet.
    pub fn admin_cordoned(&self) -> Vec<&str> {
        self.admin.iter().map(String::as_str).collect()
    }

    pub async fn tick(
        &mut self,
        sb: &mut Sandbox,
        observer: &Observer,
        rng: &mut StdRng,
        load: &mut Load,
    ) -> anyhow::Result<()> {
        self.recoveries(observer);
        self.look_after_the_admin_cordon(sb, load);
        if let Some(held) = &self.held
            && Instant::now() >= held.heal_at
        {
            let held = self.held.take().expect("held");
            heal(sb, &held).await?;
            self.healed(held.kind, observer);
        }
        if self.held.is_none() && Instant::now() >= self.next_at {
            let kind = *Kind::ALL.choose(rng).expect("kinds");
            if let Some(target) = self.inject(kind, sb, observer, rng, load).await? {
                eprintln!(
                    "soak: {:>5}s fault: {} ({target})",
                    self.started.elapsed().as_secs(),
                    kind.describe()
                );
                *self.injected.entry(kind).or_default() += 1;
            }
            self.next_at = Instant::now() + self.every;
        }
        Ok(())
    }

    /// Injects `kind`; what it acted on, or `None` when there was nothing to act on (no
    /// leader at that moment, no idle node).
    async fn inject(
        &mut self,
        kind: Kind,
        sb: &mut Sandbox,
        observer: &Observer,
        rng: &mut StdRng,
        load: &mut Load,
    ) -> anyhow::Result<Option<String>> {
        let target = match kind {
            Kind::LeaderKilled => {
                let Some(leader) = e2e::leading_controller(sb).await else {
                    return Ok(None);
                };
                sb.controllers[leader].kill().await;
                sb.controllers[leader].restart().await?;
                self.healed(kind, observer);
                format!("controller-{}", leader + 1)
            }
            Kind::LeaderFrozen => {
                let Some(leader) = e2e::leading_controller(sb).await else {
                    return Ok(None);
                };
                sb.controllers[leader].freeze();
                self.held = Some(Held {
                    kind,
                    heal_at: Instant::now() + 2 * LEASE,
                    controller: leader,
                    proxies: Vec::new(),
                });
                format!("controller-{}", leader + 1)
            }
            Kind::LeaderPartitioned => {
                let Some(leader) = e2e::leading_controller(sb).await else {
                    return Ok(None);
                };
                let name = format!("controller-{}", leader + 1);
                let cut = [
                    Toxic::timeout("cut-answers", Stream::Downstream, 0),
                    Toxic::timeout("cut-requests", Stream::Upstream, 0),
                ];
                self.hold(sb, kind, vec![name.clone()], &cut, 3 * RENEW_DEADLINE)
                    .await?;
                name
            }
            Kind::ControllersSlowed | Kind::AgentsSlowed => {
                let names = if kind == Kind::ControllersSlowed {
                    (1..=sb.controllers.len())
                        .map(|i| format!("controller-{i}"))
                        .collect()
                } else {
                    sb.fleet.names()
                };
                let slow = [Toxic::latency("slow", Stream::Downstream, 3000, 2000)];
                self.hold(sb, kind, names, &slow, SLOW_FOR).await?;
                "all".to_owned()
            }
            Kind::ResetBurst => {
                let names = (1..=sb.controllers.len())
                    .map(|i| format!("controller-{i}"))
                    .chain(sb.fleet.names())
                    .collect();
                let resets = [Toxic::reset_peer("resets", Stream::Downstream, 0)];
                self.hold(sb, kind, names, &resets, Duration::from_secs(1))
                    .await?;
                "all".to_owned()
            }
            Kind::AgentCut => {
                let busy: Vec<String> = sb
                    .fleet
                    .names()
                    .into_iter()
                    .filter(|n| load.is_pending(n))
                    .collect();
                let Some(node) = busy.choose(rng).cloned() else {
                    return Ok(None);
                };
                proxy(sb, &node)?.set_enabled(false).await?;
                self.held = Some(Held {
                    kind,
                    heal_at: Instant::now() + Duration::from_secs(20),
                    controller: 0,
                    proxies: vec![node.clone()],
                });
                node
            }
            Kind::AgentKilled => {
                // A node in the middle of its reboot when there is one.
                let names = sb.fleet.names();
                let busy: Vec<&String> = names.iter().filter(|n| load.is_pending(n)).collect();
                let node = busy
                    .choose(rng)
                    .copied()
                    .or_else(|| names.choose(rng))
                    .expect("nodes");
                sb.fleet.kill_agent(node).await;
                self.healed(kind, observer);
                node.clone()
            }
            Kind::ApiServerRestarted => {
                sb.control_plane.restart_apiserver().await?;
                sb.control_plane.restart_controller_manager()?;
                self.healed(kind, observer);
                "kube-apiserver, kube-controller-manager".to_owned()
            }
            Kind::AdminCordon => {
                if self.admin.is_some() {
                    return Ok(None);
                }
                let reserved = self.reserved();
                let names = sb.fleet.names();
                let idle: Vec<&String> = names
                    .iter()
                    .filter(|n| !load.is_pending(n) && !reserved.contains(*n) && observer.back(n))
                    .collect();
                let Some(node) = idle.choose(rng).map(|n| (*n).clone()) else {
                    return Ok(None);
                };
                if !kubectl(sb, &["cordon", &node]) {
                    return Ok(None);
                }
                self.admin = Some(node.clone());
                while !load.request(sb, observer, &node) {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                node
            }
        };
        Ok(Some(target))
    }

    /// Once the administrator's node is rebooted and out of the protocol, its cordon must
    /// still be there; then the administrator uncordons it (a cordoned node counts against
    /// the budget, so cordons that stayed would stop the rollout).
    pub fn look_after_the_admin_cordon(&mut self, sb: &Sandbox, load: &Load) {
        let Some(node) = self.admin.clone() else {
            return;
        };
        if load.is_pending(&node) {
            return;
        }
        if !self.admin_verified {
            // Without an answer (the API server restarting), look again at the next tick.
            let Some(cordoned) = crate::kubectl(
                sb,
                &["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"],
            ) else {
                return;
            };
            if cordoned.trim() == "true" {
                self.cordons_kept += 1;
            } else {
                self.cordons_lost.push(node.clone());
            }
            self.admin_verified = true;
        }
        if kubectl(sb, &["uncordon", &node]) {
            self.admin = None;
            self.admin_verified = false;
        }
    }

    fn healed(&mut self, kind: Kind, observer: &Observer) {
        self.recovering.push(Recovering {
            kind,
            healed: Instant::now(),
            reboots: observer.report().total().reboots,
        });
    }

    /// Ends the recoveries that saw a reboot finish since their fault was healed.
    pub fn recoveries(&mut self, observer: &Observer) {
        let reboots = observer.report().total().reboots;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.recovering)
            .into_iter()
            .partition(|r| reboots > r.reboots);
        self.recovering = waiting;
        for r in done {
            let took = r.healed.elapsed();
            if self
                .slowest_recovery
                .is_none_or(|(_, slowest)| took > slowest)
            {
                self.slowest_recovery = Some((r.kind, took));
            }
        }
    }

    /// Heals the fault held now (the administrator's cordon stays: it is the administrator's).
    pub async fn heal_all(&mut self, sb: &mut Sandbox, observer: &Observer) -> anyhow::Result<()> {
        if let Some(held) = self.held.take() {
            heal(sb, &held).await?;
            self.healed(held.kind, observer);
        }
        Ok(())
    }

    /// Puts `toxics` on the proxies of `programs` and holds them for `long`.
    async fn hold(
        &mut self,
        sb: &Sandbox,
        kind: Kind,
        programs: Vec<String>,
        toxics: &[Toxic],
        long: Duration,
    ) -> anyhow::Result<()> {
        for program in &programs {
            for toxic in toxics {
                proxy(sb, program)?.add(toxic).await?;
            }
        }
        self.held = Some(Held {
            kind,
            heal_at: Instant::now() + long,
            controller: 0,
            proxies: programs,
        });
        Ok(())
    }

    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .injected
            .iter()
            .map(|(k, n)| format!("{n} {}", k.describe()))
            .collect();
        if parts.is_empty() {
            "none yet".into()
        } else {
            parts.join(", ")
        }
    }
}

async fn heal(sb: &mut Sandbox, held: &Held) -> anyhow::Result<()> {
    if held.kind == Kind::LeaderFrozen {
        sb.controllers[held.controller].thaw();
    }
    for program in &held.proxies {
        let proxy = proxy(sb, program)?;
        proxy.clear().await?;
        proxy.set_enabled(true).await?;
    }
    Ok(())
}

/// The fault proxy between `program` (`controller-2`, `sim-7`) and the API server.
fn proxy<'a>(sb: &'a Sandbox, program: &str) -> anyhow::Result<&'a Proxy> {
    sb.proxy(program)
        .ok_or_else(|| anyhow::anyhow!("{program} has no fault proxy"))
}

fn kubectl(sb: &Sandbox, args: &[&str]) -> bool {
    crate::kubectl(sb, args).is_some()
}
