//! The safety invariants, checked against the model server's truth: at every node write, at
//! every ledger write and after every step.

use super::{
    NODES, POOL,
    server::{Server, Workload, annotation, facts, index, keys},
};
use common::{Phase, Readiness};
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn needed(o: &Value) -> bool {
    annotation(o, "reboot-needed").as_deref() == Some("true")
}

fn now_set(o: &Value) -> bool {
    annotation(o, "reboot-now").as_deref() == Some("true")
}

/// The write gave the node `reboot-now`: the delays are checked on it.
pub fn promoted(before: &Value, after: &Value) -> bool {
    now_set(after) && !now_set(before)
}

/// The node's label opts it out: any value but `false`, typed in any case.
pub fn opted_out(o: &Value) -> bool {
    keys().opt_out(Some(&facts(o).labels)).opts_out()
}

/// The administrator gives the node up: `reboot-abandon` with any value but one that reads as
/// no (`false`, `no`, `0`).
fn given_up(o: &Value) -> bool {
    facts(o).protocol(&keys()).abandon.is_some()
}

/// Unavailable, as invariant 1 counts it: Ready is not True, or cordoned, or in the protocol.
fn unavailable(o: &Value) -> bool {
    let f = facts(o);
    let state = f.protocol(&super::server::keys());
    f.readiness != Readiness::Ready
        || f.unschedulable
        || state.grant.is_some()
        || state.phase != Phase::Idle
        || state.cordoned_by_operator
}

/// The nodes the operator holds: a slot in the ledger, one of its grants, a reboot under way,
/// or its cordon.
pub fn held_by_operator(s: &Server) -> BTreeSet<String> {
    // A deleted node is no longer unavailable, whatever slot it left behind; nor is a node
    // whose slot was released and came back in a ledger recreated from an older copy, while
    // it carries no grant (what the node carries is counted below).
    let mut held: BTreeSet<String> = s
        .slots()
        .into_iter()
        .filter(|(n, slot)| {
            s.node(index(n)).is_some_and(|node| {
                !s.released.contains(&slot.grant)
                    || facts(node).protocol(&super::server::keys()).grant.is_some()
            })
        })
        .map(|(n, _)| n)
        .collect();
    for node in s.nodes.iter().flatten() {
        let f = facts(node);
        let state = f.protocol(&super::server::keys());
        if state.grant.is_some() || state.reboot_under_way() || state.cordoned_by_operator {
            held.insert(f.name);
        }
    }
    held
}

/// A controller's write of node `i`, from `before` to `after`, by replica `k`.
pub fn node_write(s: &Server, k: usize, i: usize, before: &Value, after: &Value) {
    // Only an administrator who gives the node up ends its request without a reboot.
    let given_up = given_up(before);
    if needed(before) && !needed(after) && !given_up {
        assert!(now_set(after), "lost request on n{i}");
    }
    if now_set(after) && !now_set(before) && s.drain_enabled {
        // A pod stuck terminating on a NotReady node counts as gone (`kubectl drain
        // --skip-wait-for-delete-timeout`): its kubelet will never confirm it.
        let left = match s.pods[i] {
            Workload::None => false,
            Workload::Running => true,
            Workload::Terminating => s.ready(i),
        };
        assert!(
            !left,
            "reboot-now on n{i} while a workload pod is bound to it"
        );
    }
    let was_done = annotation(before, "reboot-done").is_some();
    if was_done && annotation(after, "reboot-done").is_none() && !given_up {
        assert!(
            facts(before).kubelet_reports_boot(annotation(before, "reboot-boot-id").as_deref())
                && back_in_this_boot(s, i, after),
            "n{i} completed before the kubelet reported the proven boot, Ready"
        );
    }
    let in_progress = annotation(before, "reboot-in-progress").is_some();
    if in_progress && annotation(after, "reboot-in-progress").is_none() && !given_up {
        assert!(
            rebooted_since_recorded(s, i, before) && back_in_this_boot(s, i, after),
            "n{i} completed from reboot-in-progress before the kubelet reported a new boot, Ready"
        );
    }
    let claimed =
        annotation(before, "reboot-grant").is_none() && annotation(after, "reboot-grant").is_some();
    let recordoned = facts(after).unschedulable && !facts(before).unschedulable;
    let promoted = promoted(before, after);
    drain_failures_counted(s, i, before, after);
    protected_from_scale_down(i, before, after);
    if claimed {
        assert!(!opted_out(before), "n{i} claimed a grant while opted out");
        assert!(!given_up, "n{i} claimed a grant while being given up");
        assert!(
            s.zone_budget.is_none() || s.zone(i).is_some(),
            "n{i} claimed a grant without a zone label while zone budgets are on"
        );
    }
    if promoted {
        delays_kept(s, i, after);
    }
    admins_labels_kept(s, i, before, after);
    if !s.pools.is_empty() {
        pool_node_write(s, k, i, before, after, claimed || recordoned || promoted);
    }
    if claimed || recordoned || promoted {
        let what = format!(
            "n{i} moved further (claimed {claimed}, cordoned {recordoned}, reboot-now {promoted})"
        );
        // A claim needs the window open; once claimed, `--finish-after-window` decides (set
        // for a pool whose windows cannot be read, which finishes what it claimed).
        let finish = s.finish_after_window || runs_invalid(s, k, after);
        let window_open = s.window_open() || (!claimed && finish);
        assert!(window_open, "{what} outside the windows");
        assert!(!s.unhealthy, "{what} while a health gate was closed");
        assert!(
            !s.blocked.contains(&format!("n{i}")),
            "{what} while a blocking pod runs on it"
        );
        assert!(
            !(s.paused() && s.pause_known_to(k)),
            "{what} while paused (a pause replica {k} had seen)"
        );
    }
    budget_held(s);
}

/// From its claim until it is back or given back, a node carries the autoscalers' annotations
/// against scale-down, and none is left once its grant is gone.
fn protected_from_scale_down(i: usize, before: &Value, after: &Value) {
    let record = common::keys::REBOOT_PROTECTED;
    if annotation(after, "reboot-grant").is_some() || now_set(after) {
        for (key, value) in common::marks::SCALE_DOWN_PROTECTION {
            assert_eq!(
                annotation(after, key).as_deref(),
                Some(value),
                "n{i} in its reboot without {key}"
            );
        }
    }
    let gave_back = annotation(before, "reboot-grant").is_some()
        && annotation(after, "reboot-grant").is_none()
        && !now_set(after)
        && annotation(after, "reboot-in-progress").is_none()
        && annotation(after, "reboot-done").is_none();
    if gave_back {
        for key in common::marks::SCALE_DOWN_PROTECTION
            .map(|(k, _)| k)
            .iter()
            .chain([&record])
        {
            assert!(
                annotation(after, key).is_none(),
                "n{i} given back or done with {key} left on it"
            );
        }
    }
}

/// A failed drain is counted once, as its grant is given back; a node set aside
/// (`--drain-attempts`) is never claimed again until its count is removed.
fn drain_failures_counted(s: &Server, i: usize, before: &Value, after: &Value) {
    use common::drain_failures::DrainFailures;
    let key = common::keys::REBOOT_DRAIN_FAILURES;
    let (was, is) = (annotation(before, key), annotation(after, key));
    let count = |v: &Option<String>| v.as_deref().and_then(DrainFailures::read).map(|f| f.count);
    if is != was && is.is_some() {
        assert_eq!(
            count(&is),
            Some(count(&was).unwrap_or(0) + 1),
            "n{i}: {key} went from {was:?} to {is:?}, not one more failed drain"
        );
        assert!(
            annotation(before, "reboot-grant").is_some()
                && annotation(after, "reboot-grant").is_none(),
            "n{i}: a failed drain counted without its grant given back in the same write"
        );
    }
    cordon_of_set_aside_kept(s, i, before, after);
    let claimed =
        annotation(before, "reboot-grant").is_none() && annotation(after, "reboot-grant").is_some();
    assert!(
        !(claimed && DrainFailures::sets_aside(was.as_deref(), s.set_aside.attempts)),
        "n{i} claimed a grant while set aside ({key}={was:?}, --drain-attempts {:?})",
        s.set_aside.attempts
    );
}

/// A node set aside by the release of its failed drain keeps the operator's cordon exactly
/// when `--keep-set-aside-cordoned` is on; then no write of the operator's removes it while the
/// node stays set aside with its request standing (only an administrator's uncordon, retry,
/// withdrawal or give-up ends it).
fn cordon_of_set_aside_kept(s: &Server, i: usize, before: &Value, after: &Value) {
    use common::drain_failures::DrainFailures;
    let keep = s.set_aside.keep_cordoned;
    let ours =
        |o: &Value| facts(o).unschedulable && facts(o).protocol(&keys()).cordoned_by_operator;
    let set_aside = |o: &Value| {
        let state = facts(o).protocol(&keys());
        state.request == common::Request::Needed
            && state.abandon.is_none()
            && DrainFailures::sets_aside(state.drain_failures.as_deref(), s.set_aside.attempts)
    };
    let counted = annotation(before, common::keys::REBOOT_DRAIN_FAILURES)
        != annotation(after, common::keys::REBOOT_DRAIN_FAILURES)
        && annotation(after, common::keys::REBOOT_DRAIN_FAILURES).is_some();
    if counted && set_aside(after) && ours(before) {
        assert_eq!(
            ours(after),
            keep,
            "n{i} set aside: the operator's cordon kept is {}, with --keep-set-aside-cordoned {keep}",
            ours(after)
        );
    }
    if keep && set_aside(before) && ours(before) && annotation(before, "reboot-grant").is_none() {
        assert!(
            ours(after),
            "n{i} set aside and kept cordoned, uncordoned by the operator: {after:#}"
        );
    }
}

/// `reboot-now` comes no sooner after the claim (the cordon) than the delays: with the drain,
/// `--drain-delay` before it starts and `--reboot-delay` after it ends; without, the reboot
/// delay. Whichever replica claimed, and whenever the one that writes saw the grant first.
fn delays_kept(s: &Server, i: usize, after: &Value) {
    let delays = if s.drain_enabled {
        s.drain_delay_ms + s.reboot_delay_ms
    } else {
        s.reboot_delay_ms
    };
    let grant = annotation(after, "reboot-grant").unwrap_or_default();
    let claimed_for = s.claimed_for(&grant);
    assert!(
        claimed_for.is_some_and(|ms| ms >= delays),
        "reboot-now on n{i} {claimed_for:?} ms after its claim, within the delays of {delays} ms"
    );
}

/// A label an administrator set is never changed or removed by the operator.
fn admins_labels_kept(s: &Server, i: usize, before: &Value, after: &Value) {
    for ((node, key), value) in &s.admin_labels {
        let label = |o: &Value| o["metadata"]["labels"][key].as_str().map(str::to_owned);
        if *node == i && label(before).as_ref() == Some(value) {
            assert_eq!(
                label(after).as_ref(),
                Some(value),
                "the administrator's label {key}={value} on n{i} changed by the operator"
            );
        }
    }
}

/// The operator holds no more nodes than the budget, unless the pool shrank since its last
/// grant (then the budget it granted under is what it answers for).
pub fn budget_held(s: &Server) {
    if !s.pools.is_empty() {
        return pools_budget_held(s);
    }
    let held = held_by_operator(s);
    let budget = s
        .max_unavailable
        .resolve(s.pool_size())
        .max(s.budget_at_grant);
    assert!(
        held.len() <= budget,
        "the operator holds {held:?} with a budget of {budget}"
    );
}

/// A compare-and-swap of the ledger by replica `k`, from the slots `before`.
pub fn ledger_write(
    s: &mut Server,
    k: usize,
    before: &std::collections::BTreeMap<String, common::ledger::Slot>,
) {
    let after = s.slots();
    let new: Vec<&String> = after
        .iter()
        .filter(|(node, slot)| before.get(*node).is_none_or(|b| b.grant != slot.grant))
        .map(|(node, _)| node)
        .collect();
    // A slot is re-keyed (to a grant its node carried) only on a fresh read of its node: the
    // grant the replica's own last read (or write) of the node showed, not a copy its watch
    // brought. Re-keyed from stale copies, two replicas flip it back and forth and stop its
    // drain at every flip. (Another replica may change the node between that read and the
    // ledger's write: the slot then holds a grant nobody carries until the next round releases
    // it, as a free slot adopted from a stale copy holds a node too many: safe.)
    let carried = |node: &str| {
        s.reads[k]
            .get(&index(node))
            .and_then(|(_, n)| n.as_ref())
            .and_then(|n| annotation(n, "reboot-grant"))
    };
    for node in &new {
        let grant = &after[*node].grant;
        if before.contains_key(*node) && s.ever_carried.contains(grant) {
            assert_eq!(
                carried(node).as_deref(),
                Some(grant.as_str()),
                "{node} re-keyed from a stale copy by replica {k}: slots {before:?} -> {after:?}"
            );
        }
    }
    // A soak ends on a fresh read of its node: a node that crashed stays Ready in a cache for
    // a while, and another replica's copy may lag. Released, a soaking node is Ready now,
    // unless an administrator gave it up. A canary soaks under `--canary-soak` alone too.
    let canaries = s.rollout_record().map(|r| r.canaries).unwrap_or_default();
    let soaks =
        |node: &str| s.min_ready_ms > 0 || (s.rollout.canary_soak > 0 && canaries.contains(node));
    for (node, slot) in before {
        let soaking = s.node(index(node)).is_some_and(|n| {
            let state = facts(n).protocol(&keys());
            state.last_grant.as_deref() == Some(slot.grant.as_str()) && state.abandon.is_none()
        });
        if soaks(node) && soaking && !after.contains_key(node) {
            assert!(
                s.ready(index(node)),
                "{node} released from its soak while NotReady"
            );
        }
    }
    // A slot whose grant no node ever carried is a new grant (an adoption takes the grant its
    // node carries: a ledger rebuilt from the nodes).
    let granted: Vec<&String> = new
        .into_iter()
        .filter(|n| !s.ever_carried.contains(&after[*n].grant))
        .collect();
    if granted.is_empty() {
        return;
    }
    let (_, fences) = s
        .round
        .clone()
        .expect("every ledger write comes from a round");
    assert!(!s.paused(), "granted {granted:?} while paused");
    assert!(
        fences.window_open,
        "granted {granted:?} outside the windows"
    );
    // `--reboot-estimate`: a reboot granted ends before the window closes, as the round saw
    // the clock (the estimate is the least the controller asks for).
    if let Some(estimate) = s.reboot_estimate_ms
        && let Some(closes) = s.windows.closes_at(fences.wall)
    {
        let left = closes.duration_since(fences.wall).as_millis();
        assert!(
            left >= i128::from(estimate),
            "granted {granted:?} with {left} ms left in the window, under --reboot-estimate \
             {estimate} ms"
        );
    }
    assert!(
        !fences.unhealthy,
        "granted {granted:?} while a health gate was closed"
    );
    for node in &granted {
        assert!(
            !fences.blocked.contains(*node),
            "granted {node}, which a blocking pod runs on"
        );
    }
    // As the replica knows the node: its cache, or its own newer read or write.
    let seen = |i: usize, what: &dyn Fn(&Server, &Value) -> bool| -> bool {
        let cached = s.seen_copy(k, i);
        cached.is_some_and(|c| what(s, &c)) && s.node(i).is_some_and(|n| what(s, n))
    };
    for node in &granted {
        assert!(
            !seen(index(node), &|_, n| opted_out(n)),
            "granted {node}, whose label opts it out as the replica and the truth both show"
        );
    }
    // Invariant 1 in full: the slots, and every node the truth and this replica's cache both
    // show unavailable (a node that went down after the replica last saw it is not a decision
    // it could have taken into account), within the budget of the pool.
    let mut counted: BTreeSet<String> = after
        .keys()
        .filter(|n| s.node(index(n)).is_some())
        .cloned()
        .collect();
    for i in 0..NODES {
        let in_pool = |_: &Server, n: &Value| n["metadata"]["labels"][POOL] == json!("a");
        if seen(i, &in_pool) && seen(i, &|_, n| unavailable(n)) {
            counted.insert(format!("n{i}"));
        }
    }
    let seen_pool = s.views[k]
        .state()
        .iter()
        .filter(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(POOL))
                .map(String::as_str)
                == Some("a")
        })
        .count();
    // Invariant 7: no new grant while a node is past its reboot timeout, or NotReady in its
    // soak, as this replica saw it and as it still is.
    for i in 0..NODES {
        // As the round saw the clock: a window step during it moves the clock by hours.
        let late = |s: &Server, n: &Value| overdue(s, n, fences.wall);
        assert!(
            !seen(i, &late),
            "granted {granted:?} while n{i} is past its reboot timeout"
        );
        let slot = before.get(&format!("n{i}")).map(|slot| slot.grant.clone());
        // Until an administrator gives the node up: its slot goes, and the pool with it.
        let soaking_not_ready = |s: &Server, n: &Value| {
            let f = facts(n);
            let state = f.protocol(&keys());
            s.min_ready_ms > 0
                && slot.is_some()
                && state.last_grant == slot
                && state.abandon.is_none()
                && f.readiness != Readiness::Ready
        };
        assert!(
            !(s.node(i).is_some_and(|n| soaking_not_ready(s, n))
                && s.seen_copy(k, i).is_some_and(|c| soaking_not_ready(s, &c))),
            "granted {granted:?} while n{i} is NotReady in its soak"
        );
    }
    // The budget in force: a scheduled budget under way lowers it (a round reads the clock
    // once, and only a disturbance moves it mid-round, to a window's closing).
    let budget = s.budget_in_force(s.pool_size().max(seen_pool));
    assert!(
        counted.len() <= budget,
        "granted {granted:?}: unavailable {counted:?} with a budget of {budget}"
    );
    // `--concurrency`: no grant takes the ledger's slots past it, whatever else is unavailable.
    if let Some(concurrency) = s.concurrency {
        let most = concurrency.resolve(s.pool_size().max(seen_pool));
        assert!(
            after.len() <= most,
            "granted {granted:?}: {} slots with a concurrency of {most}",
            after.len()
        );
    }
    if let Some(zone_budget) = s.zone_budget {
        for node in &granted {
            let zone = after[*node].zone.clone();
            let in_zone = after
                .iter()
                .filter(|(n, slot)| slot.zone == zone && s.node(index(n)).is_some())
                .count();
            // The zone as the truth has it, or as the replica saw it (a node deleted since).
            let size = (0..NODES)
                .filter(|&i| s.in_pool(i) && s.zone(i) == zone)
                .count();
            let seen_size = s.views[k]
                .state()
                .iter()
                .filter(|n| {
                    let labels = n.metadata.labels.as_ref();
                    let label = |key: &str| labels.and_then(|l| l.get(key)).cloned();
                    label(POOL).as_deref() == Some("a") && label(super::ZONE) == zone
                })
                .count();
            let size = size.max(seen_size);
            let per_zone = zone_budget.resolve(size);
            assert!(
                in_zone <= per_zone,
                "granted {node} in zone {zone:?}: {in_zone} slots with a zone budget of {per_zone}"
            );
        }
    }
    s.budget_at_grant = budget;
}

/// The machine of node `i` runs another boot than the one the agent recorded in `node`'s
/// `reboot-in-progress`: it rebooted since, whoever proves it.
fn rebooted_since_recorded(s: &Server, i: usize, node: &Value) -> bool {
    annotation(node, "reboot-boot-id")
        .is_some_and(|recorded| recorded != format!("n{i}-boot-{}", s.boots[i]))
}

/// The kubelet reports, in `node`, the boot the machine of node `i` runs now, Ready.
fn back_in_this_boot(s: &Server, i: usize, node: &Value) -> bool {
    facts(node).boot_id == Some(format!("n{i}-boot-{}", s.boots[i]))
        && facts(node).readiness == Readiness::Ready
}

/// Told to reboot and not completed (the kubelet reports the proven boot, Ready) within the
/// reboot timeout.
fn overdue(s: &Server, n: &Value, now: k8s_openapi::jiff::Timestamp) -> bool {
    let f = facts(n);
    let state = f.protocol(&keys());
    let completing = match &state.phase {
        Phase::Done { boot_id } => {
            f.kubelet_reports_boot(boot_id.as_deref()) && f.readiness == Readiness::Ready
        }
        // Back in another boot than the agent recorded, as this copy shows it.
        Phase::InProgress {
            boot_id: Some(recorded),
        } => f.readiness == Readiness::Ready && f.boot_id.is_some_and(|now| &now != recorded),
        _ => false,
    };
    let approved: Option<k8s_openapi::jiff::Timestamp> =
        state.approved_at.as_deref().and_then(|t| t.parse().ok());
    let timeout = k8s_openapi::jiff::SignedDuration::from_millis(
        i64::try_from(s.reboot_timeout_ms).unwrap_or(i64::MAX),
    );
    state.reboot_under_way() && !completing && approved.is_some_and(|at| now >= at + timeout)
}

/// What must hold after every step, whoever made it.
pub fn every_step(s: &Server) {
    for &i in &s.admin_cordoned {
        if let Some(node) = s.node(i) {
            assert_eq!(
                node["spec"]["unschedulable"],
                json!(true),
                "stolen cordon on n{i}"
            );
        }
    }
    budget_held(s);
}

/// Whose grant `node` carries: its ledger's name (`ns/<name>` in the grant id).
fn ledger_of(grant: Option<String>) -> Option<String> {
    let grant = grant?;
    let id = common::ledger::ledger_of_grant(&grant)?;
    Some(id.rsplit('/').next().unwrap_or(id).to_owned())
}

fn grant_ledger(node: &Value) -> Option<String> {
    ledger_of(annotation(node, "reboot-grant"))
}

/// Whether replica `k` runs the pool of the grant `node` carries with a spec it cannot read
/// (the model's invalid pools have a window whose time zone is mistyped).
fn runs_invalid(s: &Server, k: usize, node: &Value) -> bool {
    annotation(node, "reboot-grant").is_some_and(|grant| runs_invalid_for(s, k, &grant))
}

/// Whether replica `k` runs the pool of `grant` with a spec it cannot read: such a pool
/// finishes what it claimed whatever its windows.
pub(super) fn runs_invalid_for(s: &Server, k: usize, grant: &str) -> bool {
    ledger_of(Some(grant.to_owned()))
        .is_some_and(|ledger| s.running[k].iter().any(|p| p.ledger == ledger && p.invalid))
}

/// Whether the pool of `grant` has `spec.paused` on the API server.
pub(super) fn pool_paused_for(s: &Server, grant: &str) -> bool {
    ledger_of(Some(grant.to_owned()))
        .is_some_and(|ledger| s.pools.iter().any(|p| p.ledger() == ledger && p.paused))
}

/// With several pools, a node write by replica `k`: a node never goes from one ledger's grant
/// to another's, and a pool that replica runs paused moves none of its nodes further (a
/// deleted one takes them to the end); a node two pools select is never claimed.
fn pool_node_write(s: &Server, k: usize, i: usize, before: &Value, after: &Value, moved: bool) {
    let (was, now) = (grant_ledger(before), grant_ledger(after));
    if let (Some(was), Some(now)) = (&was, &now) {
        assert_eq!(was, now, "n{i} went from a grant of {was} to one of {now}");
    }
    if was.is_none() && now.is_some() {
        assert!(
            s.selecting(before) < 2,
            "n{i} claimed a grant of {now:?} while two pools select it"
        );
        assert!(
            !runs_invalid(s, k, after),
            "n{i} claimed a grant of {now:?} by replica {k}, which runs that pool invalid"
        );
    }
    if moved && let Some(ledger) = &now {
        let paused = s.running[k]
            .iter()
            .find(|p| &p.ledger == ledger)
            .is_none_or(|p| p.paused)
            || s.pools.iter().any(|p| &p.ledger() == ledger && p.paused);
        assert!(
            !paused,
            "n{i} moved further by replica {k} in {ledger}, which is paused (as it runs it or on \
             the API server) or which it does not run"
        );
    }
}

/// The nodes a pool's ledger holds: its slots (of nodes that exist; a slot released and
/// brought back by an older copy only while its node carries a grant), and every node that
/// carries one of its grants.
fn held_by_pool(s: &Server, ledger: &str) -> BTreeSet<String> {
    let mut held: BTreeSet<String> = s
        .slots_of_ledger(ledger)
        .into_iter()
        .filter(|(n, slot)| {
            s.node(index(n)).is_some_and(|node| {
                !s.released.contains(&slot.grant) || annotation(node, "reboot-grant").is_some()
            })
        })
        .map(|(n, _)| n)
        .collect();
    for node in s.nodes.iter().flatten() {
        if grant_ledger(node).as_deref() == Some(ledger) {
            held.insert(facts(node).name);
        }
    }
    held
}

/// With several pools: each holds no more nodes than its budget (or the budget its last grant
/// was made under, when it was lowered since).
pub fn pools_budget_held(s: &Server) {
    for pool in &s.pools {
        let ledger = pool.ledger();
        let held = held_by_pool(s, &ledger);
        let at_grant = s.pool_budget_at_grant.get(&ledger).copied().unwrap_or(0);
        let budget = (pool.budget as usize).max(at_grant);
        assert!(
            held.len() <= budget,
            "pool {} holds {held:?} with a budget of {budget}",
            pool.name
        );
    }
}

/// A compare-and-swap of a pool's ledger by replica `k`, from the slots `before`: a new grant
/// only in a pool the replica runs unpaused, on a node of that pool that no other pool selects
/// and that carries no other ledger's grant, with the pool's unavailable nodes (as the replica
/// saw them and as they are) below the budget the replica runs it with.
pub fn pool_ledger_write(
    s: &mut Server,
    k: usize,
    ledger: &str,
    before: &std::collections::BTreeMap<String, common::ledger::Slot>,
) {
    let after = s.slots_of_ledger(ledger);
    let granted: Vec<String> = after
        .iter()
        .filter(|(node, slot)| before.get(*node).is_none_or(|b| b.grant != slot.grant))
        .filter(|(_, slot)| !s.ever_carried.contains(&slot.grant))
        .map(|(node, _)| node.clone())
        .collect();
    if granted.is_empty() {
        return;
    }
    let (_, fences) = s
        .round
        .clone()
        .expect("every ledger write comes from a round");
    assert!(
        fences.window_open,
        "granted {granted:?} outside the windows"
    );
    assert!(
        !fences.unhealthy,
        "granted {granted:?} while a health gate was closed"
    );
    let running = s.running[k]
        .iter()
        .find(|p| p.ledger == ledger)
        .cloned()
        .unwrap_or_else(|| {
            panic!("replica {k} granted {granted:?} in {ledger}, not a pool it runs")
        });
    assert!(
        !running.paused && !running.deleted && !running.invalid,
        "replica {k} granted {granted:?} in {ledger}, which it runs paused, deleted or invalid"
    );
    let p = s
        .pools
        .iter()
        .position(|p| p.ledger() == ledger)
        .expect("a pool of the model");
    // As the pool's own shell knows the node: one pool's read is not another's knowledge.
    let seen = |i: usize, what: &dyn Fn(&Value) -> bool| -> bool {
        s.seen_copy_by_pool(k, ledger, i).is_some_and(|c| what(&c)) && s.node(i).is_some_and(what)
    };
    for node in &granted {
        let i = index(node);
        assert!(
            !fences.blocked.contains(node),
            "granted {node}, which a blocking pod runs on"
        );
        assert!(
            !seen(i, &|n| s.selecting(n) > 1),
            "{ledger} granted {node}, which two pools select as the replica and the truth show"
        );
        assert!(
            !seen(i, &|n| s.pool_of_copy(n) != Some(p)),
            "{ledger} granted {node}, outside its pool as the replica and the truth show"
        );
        assert!(
            !seen(i, &|n| grant_ledger(n).is_some_and(|l| l != ledger)),
            "{ledger} granted {node}, which carries another ledger's grant"
        );
        assert!(
            !seen(i, &opted_out),
            "granted {node}, whose label opts it out as the replica and the truth both show"
        );
    }
    let mut counted: BTreeSet<String> = after
        .keys()
        .filter(|n| s.node(index(n)).is_some())
        .cloned()
        .collect();
    // Every node the pool's own selector selects counts while it is unavailable, whether or not
    // another pool selects it too (then it is granted by neither, and counted by both).
    for i in 0..NODES {
        if seen(i, &|n| s.pools[p].selects(n)) && seen(i, &unavailable) {
            counted.insert(format!("n{i}"));
        }
    }
    let budget = running.budget.resolve(NODES);
    assert!(
        counted.len() <= budget,
        "{ledger} granted {granted:?}: unavailable {counted:?} with a budget of {budget} \
         (replica {k})"
    );
    s.pool_budget_at_grant.insert(ledger.to_owned(), budget);
}

/// The rollout's rules hold at every grant, whichever replica writes it: nothing new while the
/// record the grant was decided on says a canary failed, or more nodes failed than
/// `--max-failures` (a count in the model); never more slots than the stage leaves room for by
/// the record written with the grant; every node granted in the canary stage recorded as a
/// canary (so that its soak is held and its failure stalls the pool).
pub fn rollout_rules_kept(
    s: &Server,
    before: &std::collections::BTreeMap<String, common::ledger::Slot>,
    record_before: Option<&common::rollout::RolloutRecord>,
) {
    let rules = s.rollout;
    if !rules.is_on() {
        return;
    }
    let after = s.slots();
    let granted: Vec<&String> = after
        .iter()
        .filter(|(node, slot)| before.get(*node).is_none_or(|b| b.grant != slot.grant))
        .filter(|(_, slot)| !s.ever_carried.contains(&slot.grant))
        .map(|(node, _)| node)
        .collect();
    if granted.is_empty() {
        return;
    }
    let record = s
        .rollout_record()
        .expect("a grant under rollout rules is written with the rollout's record");
    if let Some(before) = record_before {
        assert!(
            rules.canary == 0 || before.failed_canary().is_none(),
            "granted {granted:?} after a canary failed: {before:?}"
        );
        if let Some(common::rollout::MaxFailures::Count(most)) = rules.max_failures {
            let failed = before.counted_failures().count();
            assert!(
                failed <= most as usize,
                "granted {granted:?} with {failed} failures, past --max-failures {most}"
            );
        }
    }
    if let Some((stage, room)) = rules.room(&record) {
        assert!(
            after.len() <= room,
            "granted {granted:?}: {} slots in the {stage:?} with room for {room}: {record:?}",
            after.len()
        );
    }
    if record.canaries_completed < rules.canary {
        for node in &granted {
            assert!(
                record.canaries.contains(*node),
                "{node} granted in the canary stage and not recorded as a canary: {record:?}"
            );
        }
    }
}
