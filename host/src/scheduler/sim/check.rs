//! The invariants, checked on the store and on what the runner saw (see the
//! list in the module doc of `sim`), and the trace's view of the store.

use std::collections::{BTreeMap, HashMap};

use super::runner::RunnerLog;
use super::scenario::{World, t0};
use super::store::SimStore;
use crate::model::{Millis, Outcome, RunRecord, RunStatus, StepStatus, TriggerKind};
use crate::store::prelude::*;

/// Lost attempts that do not count against a step's retries (the
/// scheduler's default, `SchedulerConfig::max_lost_attempts`).
const MAX_LOST: usize = 3;
const HOUR: Millis = crate::tenant::HOUR_MS;

/// A run's name in the trace: what it is, not its (random) id.
pub(super) fn name(run: &RunRecord) -> String {
    let n = run
        .input
        .get("n")
        .map_or(String::new(), |n| format!("#{n}"));
    format!(
        "{}/{}@{}{n}",
        run.tenant,
        run.task,
        run.scheduled_for - t0().timestamp_millis()
    )
}

fn letter(o: Option<Outcome>) -> char {
    match o {
        None => 'r',
        Some(Outcome::Succeeded) => 'S',
        Some(Outcome::Failed) => 'F',
        Some(Outcome::Trapped) => 'T',
        Some(Outcome::FuelExhausted) => 'E',
        Some(Outcome::MemoryExceeded) => 'M',
        Some(Outcome::TimedOut) => 'O',
        Some(Outcome::OutputTooLarge) => 'L',
        Some(Outcome::Cancelled) => 'C',
        Some(Outcome::Lost) => 'X',
    }
}

/// Every stored run (`runs`, sorted by name), its status and its
/// attempts' outcomes, in one line.
pub(super) fn summary(runs: &[&RunRecord]) -> String {
    let mut s = format!("{} runs:", runs.len());
    for run in runs {
        s += &format!(" {}={}[", name(run), run.status.as_str());
        for (i, step) in run.steps.iter().enumerate() {
            if i > 0 {
                s.push('|');
            }
            s.extend(step.attempts.iter().map(|a| letter(a.outcome)));
        }
        s.push(']');
    }
    s
}

/// The fuel budget in force in `hour`: the largest set during it, or
/// carried over from the last hour that set one (`None`: unlimited).
fn budget_in(world: &World, tenant: &str, hour: Millis) -> Option<u64> {
    let carried = world
        .budgets
        .iter()
        .filter(|((t, h), _)| t == tenant && *h < hour)
        .max_by_key(|((_, h), _)| *h)
        .map(|(_, b)| *b);
    let here = world.budgets.get(&(tenant.to_string(), hour)).copied();
    match (here, carried) {
        (Some(Some(a)), Some(Some(b))) => Some(a.max(b)),
        (Some(Some(a)), None) => Some(a),
        (None, Some(b)) => b,
        _ => None,
    }
}

/// Fuel stored per tenant and hour.
pub(super) type Usage = HashMap<String, BTreeMap<Millis, u64>>;

/// The fuel `store` holds for each of the world's tenants, by hour (read
/// before the runs: [`SimStore::with_runs`] holds the store's lock).
pub(super) fn usage(store: &SimStore, world: &World) -> Usage {
    world
        .tenants
        .keys()
        .map(|tenant| {
            let mut stored: BTreeMap<Millis, u64> = BTreeMap::new();
            for b in store
                .usage(tenant, Millis::MIN, Millis::MAX)
                .unwrap_or_default()
            {
                *stored.entry(b.hour).or_default() += b.fuel;
            }
            (tenant.clone(), stored)
        })
        .collect()
}

/// Checks every invariant (numbered as in the module doc of `sim`) on the
/// stored `runs` and usage; `last`: the end of the scenario (every run must
/// be terminal).
pub(super) fn all(
    runs: &[&RunRecord],
    usage: &Usage,
    world: &World,
    log: &RunnerLog,
    last: bool,
) -> Vec<String> {
    let mut v: Vec<String> = log.violations.clone();
    let by_id: HashMap<&str, &RunRecord> = runs.iter().map(|r| (r.id.as_str(), *r)).collect();

    // 1. No accepted run lost.
    for a in &world.accepted {
        if !by_id.contains_key(a.id.as_str()) {
            v.push(format!(
                "accepted run lost: {}/{} key {:?} (id {})",
                a.tenant, a.task, a.key, a.id
            ));
        }
    }

    // 2. One run per (task, instant) of a time trigger; one per key.
    let mut fires: BTreeMap<(&str, &str, Millis), usize> = BTreeMap::new();
    let mut keys: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    for run in runs {
        if matches!(
            run.trigger,
            TriggerKind::Cron | TriggerKind::Every | TriggerKind::At | TriggerKind::Delay
        ) {
            *fires
                .entry((&run.tenant, &run.task, run.scheduled_for))
                .or_default() += 1;
        }
        if let Some(key) = &run.idempotency_key {
            *keys.entry((&run.tenant, &run.task, key)).or_default() += 1;
        }
    }
    for ((tenant, task, at), n) in fires {
        if n > 1 {
            let at = at - t0().timestamp_millis();
            v.push(format!("{n} runs of {tenant}/{task} for the instant {at}"));
        }
    }
    for ((tenant, task, key), n) in keys {
        if n > 1 {
            v.push(format!("{n} runs of {tenant}/{task} for the key {key}"));
        }
    }

    for run in runs {
        for (i, step) in run.steps.iter().enumerate() {
            // 3. On the record: nothing after a success in a step's attempts.
            if let Some(s) = step
                .attempts
                .iter()
                .position(|a| a.outcome == Some(Outcome::Succeeded))
                && s + 1 < step.attempts.len()
            {
                v.push(format!(
                    "succeeded step run again: {} step {} has attempts after its success",
                    name(run),
                    step.name
                ));
            }
            if step.status == StepStatus::Succeeded
                && step.attempts.last().and_then(|a| a.outcome) != Some(Outcome::Succeeded)
            {
                v.push(format!(
                    "{} step {} is succeeded without a successful last attempt",
                    name(run),
                    step.name
                ));
            }
            // 4. Attempts in the round ≤ max_attempts + lost (bounded).
            // From the run's snapshot of its task (a stored `TaskSpec`, all
            // fields written), read in place: parsing whole specs after
            // every step was a fifth of the simulation's time.
            let Some(max) = run
                .spec
                .pointer(&format!("/steps/{i}/retry/max_attempts"))
                .and_then(serde_json::Value::as_u64)
            else {
                continue;
            };
            let start = (step.round_start as usize).min(step.attempts.len());
            let round = &step.attempts[start..];
            let lost = round
                .iter()
                .filter(|a| a.outcome == Some(Outcome::Lost))
                .count();
            if round.len() > max as usize + lost.min(MAX_LOST) {
                v.push(format!(
                    "{} step {}: {} attempts in a round, max_attempts {max}, {lost} lost",
                    name(run),
                    step.name,
                    round.len()
                ));
            }
        }
    }

    // 5. Fuel within the budget: as stored, and as burned in quiet hours.
    for tenant in world.tenants.keys() {
        let stored = usage.get(tenant).cloned().unwrap_or_default();
        let mut burned: BTreeMap<Millis, u64> = BTreeMap::new();
        for f in log.finished.iter().filter(|f| f.tenant == *tenant) {
            *burned.entry(f.at.div_euclid(HOUR) * HOUR).or_default() += f.fuel;
        }
        for (what, used) in [("stored", &stored), ("burned", &burned)] {
            for (hour, fuel) in used {
                if what == "burned" && world.disturbed.contains(hour) {
                    continue;
                }
                // Known: a clock set back into an earlier hour and forward
                // again starts the window afresh (its stored use is not read
                // again), so such hours may go over; see docs/RELIABILITY.md.
                if world.rewound.contains(hour) {
                    continue;
                }
                if let Some(budget) = budget_in(world, tenant, *hour)
                    && *fuel > budget
                {
                    let h = (hour - t0().timestamp_millis()) / HOUR;
                    v.push(format!(
                        "tenant {tenant} {what} {fuel} fuel in hour {h}, over its budget {budget}"
                    ));
                }
            }
        }
    }

    // 6. Every run terminal once faults stop.
    if last {
        for run in runs.iter().filter(|r| !r.status.is_terminal()) {
            v.push(format!(
                "{} is still {} two hours after the faults stopped",
                name(run),
                run.status.as_str()
            ));
        }
    }

    // 7. Every stored success of an upstream task started its `after` task
    // (its run names the upstream run in `upstream_run`, and is keyed
    // `after:<run id>`, which makes it once), however faults and crashes fell.
    if last && let Some((tenant, upstream, downstream)) = &world.after {
        let mut started: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for r in runs
            .iter()
            .filter(|r| r.tenant == *tenant && r.task == *downstream)
        {
            let Some(up) = r.upstream_run.as_deref() else {
                v.push(format!("{} has no upstream run", name(r)));
                continue;
            };
            if r.idempotency_key.as_deref() != Some(&format!("after:{up}")) {
                v.push(format!(
                    "{} names upstream run {up} but is keyed {:?}",
                    name(r),
                    r.idempotency_key
                ));
            }
            started.insert(up);
        }
        for run in runs.iter().filter(|r| {
            r.tenant == *tenant && r.task == *upstream && r.status == RunStatus::Succeeded
        }) {
            if !started.contains(run.id.as_str()) {
                v.push(format!(
                    "{} succeeded but started no run of its `after` task {downstream}",
                    name(run)
                ));
            }
        }
    }
    v
}
