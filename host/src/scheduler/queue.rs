//! The dispatch queue: which ready step starts next, given priorities, aging,
//! a global concurrency limit with a share reserved for high priority,
//! per-tenant caps and named pools (slots and an optional start rate).
//!
//! Pure bookkeeping, no I/O and no clock of its own (callers pass `now`), so
//! it is tested exhaustively.
//!
//! Ordering: an entry's key is `enqueued_at - priority * AGING_STEP`. A run of
//! priority 9 therefore goes before lower ones enqueued up to 9 aging steps
//! earlier, and a waiting low-priority run rises past newer high-priority
//! ones as it ages — priority with aging as one static key.
//!
//! Queues are kept per (tenant, pool), so a full pool or a tenant at its cap
//! never blocks the others (no head-of-line blocking); the dispatcher looks at
//! the head of each queue, which is cheap since there are few of them.
//!
//! # Fair sharing across tenants
//! Tenants are served by weighted fair queuing on *starts*: each tenant has a
//! virtual time that grows by `1 / weight` per attempt started, and the next
//! start goes to the startable tenant with the smallest virtual time; the
//! priority/aging key only orders a tenant's own steps (and breaks ties).
//! A tenant that had nothing queued or running joins at the smallest virtual
//! time among the busy tenants, so idleness earns no credit and a newcomer
//! does not wait behind anyone's backlog: with one busy tenant, a second
//! tenant's step is the first or second start after it becomes ready, however
//! many steps the first has queued. The reserved high-priority share still
//! applies across all tenants.
//!
//! A tenant can be *held* (fuel or wall time used up, disabled, waiting for
//! a reservation to settle): its steps stay queued and are skipped.
//!
//! # Limits one tenant cannot lift itself
//! - A **running cap** per tenant (`set_tenant`): the scheduler passes the
//!   tenant's `max_concurrent_attempts`, or half the slots by default
//!   ([`crate::tenant::default_max_running`]), so however long its attempts
//!   block, one tenant never holds the whole host.
//! - A **priority ceiling** per tenant (`set_ceiling`): an entry above its
//!   tenant's ceiling is queued at the ceiling. The API refuses a priority
//!   above the ceiling where one is asked for (task save, trigger override);
//!   this catches what was saved before the ceiling was lowered, for every
//!   way an entry comes in (fires, triggers, retries, recovery). The default
//!   ceiling is below [`HIGH_PRIORITY`], so the reserved share is only for
//!   tenants the admin lets in.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use crate::model::Millis;

pub use crate::model::priority::AGING_STEP_MS;
pub use crate::model::priority::HIGH_PRIORITY;
/// Pool of steps that name none.
pub const DEFAULT_POOL: &str = "default";

/// A ready step waiting for a slot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Run id.
    pub run_id: String,
    /// Step index in the run.
    pub step: usize,
    /// Owning tenant.
    pub tenant: String,
    /// Pool the step runs in.
    pub pool: String,
    /// 0..=9.
    pub priority: u8,
    /// When it became ready (ms).
    pub enqueued_at: Millis,
}

impl Entry {
    fn key(&self) -> (Millis, Millis) {
        (
            crate::model::priority::queue_order(self.enqueued_at, self.priority),
            self.enqueued_at,
        )
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Queued {
    key: (Millis, Millis),
    seq: u64,
    entry: Entry,
}

impl Ord for Queued {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.key, self.seq).cmp(&(other.key, other.seq))
    }
}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A named pool's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    /// Steps of this pool running at once.
    pub slots: usize,
    /// Starts per second at most (`None`: unlimited).
    pub rate_per_sec: Option<f64>,
}

#[derive(Debug)]
struct PoolState {
    config: PoolConfig,
    running: usize,
    /// Token bucket for the start rate: tokens available and when last refilled.
    tokens: f64,
    refilled_at: Millis,
}

impl PoolState {
    fn new(config: PoolConfig, now: Millis) -> Self {
        let tokens = config.rate_per_sec.map(|r| r.max(1.0)).unwrap_or(0.0);
        Self {
            config,
            running: 0,
            tokens,
            refilled_at: now,
        }
    }

    fn refill(&mut self, now: Millis) {
        if let Some(rate) = self.config.rate_per_sec {
            let elapsed = (now - self.refilled_at).max(0) as f64 / 1000.0;
            // A burst of at most one second's worth (at least one start).
            self.tokens = (self.tokens + elapsed * rate).min(rate.max(1.0));
            self.refilled_at = now;
        }
    }

    fn can_start(&self) -> bool {
        self.running < self.config.slots
            && (self.config.rate_per_sec.is_none() || self.tokens >= 1.0)
    }

    /// When a start token will be available again (ms), if rate-limited.
    fn next_token_at(&self) -> Option<Millis> {
        let rate = self.config.rate_per_sec?;
        if self.tokens >= 1.0 {
            return None;
        }
        Some(self.refilled_at + ((1.0 - self.tokens) / rate * 1000.0).ceil() as Millis)
    }
}

/// Limits the dispatcher enforces.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Attempts running at once, all tenants together.
    pub global_limit: usize,
    /// Of `global_limit`, slots only high-priority steps may use.
    pub reserved_high: usize,
    /// Attempts running at once per tenant (`None`: only the global limit).
    pub tenant_limit: Option<usize>,
    /// Named pools; steps naming an unknown pool use the default pool.
    pub pools: BTreeMap<String, PoolConfig>,
}

impl QueueConfig {
    /// Defaults for `cores` CPU cores: that many attempts at once, a quarter
    /// (at least one when there are two or more) reserved for high priority,
    /// and a default pool as wide as the global limit.
    pub fn for_cores(cores: usize) -> Self {
        let global_limit = cores.max(1);
        Self {
            global_limit,
            reserved_high: if global_limit >= 2 {
                (global_limit / 4).max(1)
            } else {
                0
            },
            tenant_limit: None,
            pools: BTreeMap::new(),
        }
    }
}

/// The dispatch queue and the running-slot accounting.
#[derive(Debug)]
pub struct DispatchQueue {
    config: QueueConfig,
    queues: HashMap<(String, String), BinaryHeap<Reverse<Queued>>>,
    pools: HashMap<String, PoolState>,
    running_total: usize,
    running_by_tenant: HashMap<String, usize>,
    queued_by_tenant: HashMap<String, usize>,
    queued_total: usize,
    seq: u64,
    /// Per-tenant running caps overriding `config.tenant_limit`.
    tenant_limits: HashMap<String, usize>,
    /// Tenant weights (default 1).
    weights: HashMap<String, u32>,
    /// Virtual time of each tenant seen (fair sharing).
    vtime: HashMap<String, f64>,
    /// Tenants whose steps must not start now.
    held: HashSet<String>,
    /// Priority ceilings by tenant (none: 9).
    ceilings: HashMap<String, u8>,
}

impl DispatchQueue {
    /// An empty queue.
    pub fn new(config: QueueConfig, now: Millis) -> Self {
        let mut pools: HashMap<String, PoolState> = config
            .pools
            .iter()
            .map(|(name, c)| (name.clone(), PoolState::new(c.clone(), now)))
            .collect();
        pools.entry(DEFAULT_POOL.to_string()).or_insert_with(|| {
            PoolState::new(
                PoolConfig {
                    slots: config.global_limit,
                    rate_per_sec: None,
                },
                now,
            )
        });
        Self {
            config,
            queues: HashMap::new(),
            pools,
            running_total: 0,
            running_by_tenant: HashMap::new(),
            queued_by_tenant: HashMap::new(),
            queued_total: 0,
            seq: 0,
            tenant_limits: HashMap::new(),
            weights: HashMap::new(),
            vtime: HashMap::new(),
            held: HashSet::new(),
            ceilings: HashMap::new(),
        }
    }

    /// Sets the highest priority `tenant`'s entries are queued at from now on.
    pub fn set_ceiling(&mut self, tenant: &str, ceiling: u8) {
        self.ceilings.insert(tenant.to_string(), ceiling);
    }

    /// Sets a tenant's running cap (`None`: the configured default) and
    /// weight under contention.
    pub fn set_tenant(&mut self, tenant: &str, limit: Option<usize>, weight: u32) {
        match limit {
            Some(n) => self.tenant_limits.insert(tenant.to_string(), n),
            None => self.tenant_limits.remove(tenant),
        };
        self.weights.insert(tenant.to_string(), weight.max(1));
    }

    /// Holds (or releases) a tenant's queued steps.
    pub fn set_held(&mut self, tenant: &str, held: bool) {
        if held {
            self.held.insert(tenant.to_string());
        } else {
            self.held.remove(tenant);
        }
    }

    /// Whether a tenant's steps are held.
    pub fn is_held(&self, tenant: &str) -> bool {
        self.held.contains(tenant)
    }

    /// Attempts of `tenant` running.
    pub fn running_for(&self, tenant: &str) -> usize {
        self.running_by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// A tenant becoming busy joins at the smallest virtual time among the
    /// busy tenants (no credit for having been idle).
    fn join(&mut self, tenant: &str) {
        let floor = self
            .queued_by_tenant
            .keys()
            .chain(self.running_by_tenant.keys())
            .filter(|t| t.as_str() != tenant)
            .filter_map(|t| self.vtime.get(t))
            .copied()
            .fold(f64::INFINITY, f64::min);
        let vt = self.vtime.entry(tenant.to_string()).or_insert(0.0);
        if floor.is_finite() && *vt < floor {
            *vt = floor;
        }
    }

    /// The pool a step naming `pool` runs in.
    pub fn pool_for(&self, pool: Option<&str>) -> String {
        match pool {
            Some(p) if self.pools.contains_key(p) => p.to_string(),
            _ => DEFAULT_POOL.to_string(),
        }
    }

    /// Whether `pool` is configured.
    pub fn has_pool(&self, pool: &str) -> bool {
        self.pools.contains_key(pool)
    }

    /// Adds a ready step, at most at its tenant's priority ceiling.
    pub fn push(&mut self, mut entry: Entry) {
        if let Some(ceiling) = self.ceilings.get(&entry.tenant) {
            entry.priority = entry.priority.min(*ceiling);
        }
        if self.queued_for(&entry.tenant) == 0 && self.running_for(&entry.tenant) == 0 {
            self.join(&entry.tenant);
        }
        self.seq += 1;
        *self
            .queued_by_tenant
            .entry(entry.tenant.clone())
            .or_default() += 1;
        self.queued_total += 1;
        let queued = Queued {
            key: entry.key(),
            seq: self.seq,
            entry,
        };
        self.queues
            .entry((queued.entry.tenant.clone(), queued.entry.pool.clone()))
            .or_default()
            .push(Reverse(queued));
    }

    /// Steps waiting, all tenants.
    pub fn queued(&self) -> usize {
        self.queued_total
    }

    /// Steps waiting for `tenant`.
    pub fn queued_for(&self, tenant: &str) -> usize {
        self.queued_by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Attempts running.
    pub fn running(&self) -> usize {
        self.running_total
    }

    /// Queued steps per tenant (for metrics).
    pub fn queued_by_tenant(&self) -> impl Iterator<Item = (&str, usize)> {
        self.queued_by_tenant.iter().map(|(t, n)| (t.as_str(), *n))
    }

    /// Removes every queued entry of `run_id` (the run was cancelled).
    pub fn remove_run(&mut self, run_id: &str) {
        for heap in self.queues.values_mut() {
            let before = heap.len();
            heap.retain(|Reverse(q)| q.entry.run_id != run_id);
            self.queued_total -= before - heap.len();
        }
        self.queues.retain(|_, heap| !heap.is_empty());
        self.recount_tenants();
    }

    fn recount_tenants(&mut self) {
        self.queued_by_tenant.clear();
        for ((tenant, _), heap) in &self.queues {
            if !heap.is_empty() {
                *self.queued_by_tenant.entry(tenant.clone()).or_default() += heap.len();
            }
        }
    }

    /// Takes the next step allowed to start now, and counts it as running.
    pub fn pop(&mut self, now: Millis) -> Option<Entry> {
        if self.running_total >= self.config.global_limit {
            return None;
        }
        let low_may_start = self.running_total
            < self
                .config
                .global_limit
                .saturating_sub(self.config.reserved_high);
        for pool in self.pools.values_mut() {
            pool.refill(now);
        }
        // (tenant virtual time, order key, tie-break sequence, queue) of the
        // best startable head.
        type Best = (f64, (Millis, Millis), u64, (String, String));
        let mut best: Option<Best> = None;
        for (qkey, heap) in &self.queues {
            let Some(Reverse(head)) = heap.peek() else {
                continue;
            };
            let entry = &head.entry;
            if !low_may_start && entry.priority < HIGH_PRIORITY {
                continue;
            }
            if self.held.contains(&entry.tenant) {
                continue;
            }
            let limit = self
                .tenant_limits
                .get(&entry.tenant)
                .copied()
                .or(self.config.tenant_limit);
            if let Some(limit) = limit
                && self
                    .running_by_tenant
                    .get(&entry.tenant)
                    .copied()
                    .unwrap_or(0)
                    >= limit
            {
                continue;
            }
            if !self
                .pools
                .get(&entry.pool)
                .is_some_and(PoolState::can_start)
            {
                continue;
            }
            let vt = self.vtime.get(&entry.tenant).copied().unwrap_or(0.0);
            if best.as_ref().is_none_or(|(bv, k, s, _)| {
                vt < *bv || (vt == *bv && (head.key, head.seq) < (*k, *s))
            }) {
                best = Some((vt, head.key, head.seq, qkey.clone()));
            }
        }
        let (_, _, _, qkey) = best?;
        let heap = self.queues.get_mut(&qkey)?;
        let Reverse(queued) = heap.pop()?;
        if heap.is_empty() {
            self.queues.remove(&qkey);
        }
        let entry = queued.entry;
        self.queued_total -= 1;
        if let Some(n) = self.queued_by_tenant.get_mut(&entry.tenant) {
            *n -= 1;
            if *n == 0 {
                self.queued_by_tenant.remove(&entry.tenant);
            }
        }
        self.running_total += 1;
        let weight = self.weights.get(&entry.tenant).copied().unwrap_or(1);
        *self.vtime.entry(entry.tenant.clone()).or_insert(0.0) += 1.0 / f64::from(weight);
        *self
            .running_by_tenant
            .entry(entry.tenant.clone())
            .or_default() += 1;
        if let Some(pool) = self.pools.get_mut(&entry.pool) {
            pool.running += 1;
            if pool.config.rate_per_sec.is_some() {
                pool.tokens -= 1.0;
            }
        }
        Some(entry)
    }

    /// Releases the slot of a finished attempt.
    pub fn finish(&mut self, tenant: &str, pool: &str) {
        self.running_total = self.running_total.saturating_sub(1);
        if let Some(n) = self.running_by_tenant.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running_by_tenant.remove(tenant);
            }
        }
        if let Some(p) = self.pools.get_mut(pool) {
            p.running = p.running.saturating_sub(1);
        }
    }

    /// When a rate-limited pool with waiting work gets its next start token,
    /// so the dispatcher can wake then (ms).
    pub fn next_rate_wakeup(&self) -> Option<Millis> {
        self.queues
            .keys()
            .filter_map(|(_, pool)| self.pools.get(pool))
            .filter(|p| p.running < p.config.slots)
            .filter_map(PoolState::next_token_at)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(run: &str, tenant: &str, pool: &str, priority: u8, at: Millis) -> Entry {
        Entry {
            run_id: run.into(),
            step: 0,
            tenant: tenant.into(),
            pool: pool.into(),
            priority,
            enqueued_at: at,
        }
    }

    fn config(global: usize, reserved: usize) -> QueueConfig {
        QueueConfig {
            global_limit: global,
            reserved_high: reserved,
            tenant_limit: None,
            pools: BTreeMap::new(),
        }
    }

    #[test]
    fn higher_priority_goes_first_and_fifo_within_a_priority() {
        let mut q = DispatchQueue::new(config(10, 0), 0);
        q.push(entry("a", "t", DEFAULT_POOL, 5, 100));
        q.push(entry("b", "t", DEFAULT_POOL, 5, 200));
        q.push(entry("c", "t", DEFAULT_POOL, 9, 300));
        let order: Vec<_> = std::iter::from_fn(|| q.pop(400))
            .map(|e| e.run_id)
            .collect();
        assert_eq!(order, ["c", "a", "b"]);
    }

    #[test]
    fn a_waiting_low_priority_run_ages_past_newer_high_priority_ones() {
        let mut q = DispatchQueue::new(config(10, 0), 0);
        q.push(entry("old-low", "t", DEFAULT_POOL, 0, 0));
        // Priority 5 is worth 50 s of waiting; this one came 60 s later.
        q.push(entry("new-high", "t", DEFAULT_POOL, 5, 60_000));
        assert_eq!(q.pop(60_000).unwrap().run_id, "old-low");
    }

    #[test]
    fn global_limit_holds_and_finish_frees_a_slot() {
        let mut q = DispatchQueue::new(config(2, 0), 0);
        for i in 0..3 {
            q.push(entry(&format!("r{i}"), "t", DEFAULT_POOL, 5, i));
        }
        assert!(q.pop(0).is_some());
        assert!(q.pop(0).is_some());
        assert!(q.pop(0).is_none());
        assert_eq!(q.running(), 2);
        q.finish("t", DEFAULT_POOL);
        assert_eq!(q.pop(0).unwrap().run_id, "r2");
    }

    #[test]
    fn reserved_slots_are_only_for_high_priority() {
        let mut q = DispatchQueue::new(config(4, 1), 0);
        for i in 0..5 {
            q.push(entry(&format!("low{i}"), "t", DEFAULT_POOL, 1, i));
        }
        assert_eq!((0..5).filter_map(|_| q.pop(0)).count(), 3);
        q.push(entry("high", "t", DEFAULT_POOL, HIGH_PRIORITY, 10));
        assert_eq!(q.pop(0).unwrap().run_id, "high");
    }

    #[test]
    fn a_full_pool_does_not_block_other_pools() {
        let mut cfg = config(10, 0);
        cfg.pools.insert(
            "warehouse".into(),
            PoolConfig {
                slots: 1,
                rate_per_sec: None,
            },
        );
        let mut q = DispatchQueue::new(cfg, 0);
        q.push(entry("w1", "t", "warehouse", 9, 0));
        q.push(entry("w2", "t", "warehouse", 9, 1));
        q.push(entry("d1", "t", DEFAULT_POOL, 0, 2));
        assert_eq!(q.pop(0).unwrap().run_id, "w1");
        assert_eq!(q.pop(0).unwrap().run_id, "d1");
        assert!(q.pop(0).is_none());
        q.finish("t", "warehouse");
        assert_eq!(q.pop(0).unwrap().run_id, "w2");
    }

    #[test]
    fn pool_start_rate_is_enforced_with_a_wakeup_time() {
        let mut cfg = config(100, 0);
        cfg.pools.insert(
            "api".into(),
            PoolConfig {
                slots: 100,
                rate_per_sec: Some(2.0),
            },
        );
        let mut q = DispatchQueue::new(cfg, 0);
        for i in 0..5 {
            q.push(entry(&format!("r{i}"), "t", "api", 5, i));
        }
        // A burst of one second's worth, then one start per 500 ms.
        assert_eq!((0..5).filter_map(|_| q.pop(0)).count(), 2);
        assert_eq!(q.next_rate_wakeup(), Some(500));
        assert!(q.pop(499).is_none());
        assert!(q.pop(500).is_some());
        assert!(q.pop(500).is_none());
        assert!(q.pop(1000).is_some());
    }

    #[test]
    fn tenant_limit_lets_other_tenants_through() {
        let mut cfg = config(10, 0);
        cfg.tenant_limit = Some(1);
        let mut q = DispatchQueue::new(cfg, 0);
        q.push(entry("a1", "a", DEFAULT_POOL, 5, 0));
        q.push(entry("a2", "a", DEFAULT_POOL, 5, 1));
        q.push(entry("b1", "b", DEFAULT_POOL, 5, 2));
        assert_eq!(q.pop(0).unwrap().run_id, "a1");
        assert_eq!(q.pop(0).unwrap().run_id, "b1");
        assert!(q.pop(0).is_none());
        assert_eq!(q.queued_for("a"), 1);
    }

    #[test]
    fn a_newcomer_tenant_starts_next_however_long_the_backlog() {
        let mut q = DispatchQueue::new(config(1, 0), 0);
        for i in 0..10_000 {
            q.push(entry(&format!("a{i}"), "a", DEFAULT_POOL, 5, i));
        }
        for _ in 0..5 {
            let e = q.pop(0).unwrap();
            q.finish(&e.tenant, &e.pool);
        }
        q.push(entry("b0", "b", DEFAULT_POOL, 0, 20_000));
        let mut a_before_b = 0;
        loop {
            let e = q.pop(0).unwrap();
            q.finish(&e.tenant, &e.pool);
            if e.tenant == "b" {
                break;
            }
            a_before_b += 1;
        }
        assert!(a_before_b <= 1, "{a_before_b} of a's steps went first");
    }

    #[test]
    fn weights_share_starts_in_proportion() {
        let mut q = DispatchQueue::new(config(1, 0), 0);
        q.set_tenant("a", None, 3);
        for i in 0..400 {
            q.push(entry(&format!("a{i}"), "a", DEFAULT_POOL, 5, i));
            q.push(entry(&format!("b{i}"), "b", DEFAULT_POOL, 5, i));
        }
        let mut a = 0;
        for _ in 0..400 {
            let e = q.pop(0).unwrap();
            q.finish(&e.tenant, &e.pool);
            a += usize::from(e.tenant == "a");
        }
        assert!((295..=305).contains(&a), "a got {a} of 400 starts");
    }

    #[test]
    fn held_tenants_and_per_tenant_limits_are_skipped() {
        let mut q = DispatchQueue::new(config(10, 0), 0);
        q.set_tenant("a", Some(1), 1);
        q.push(entry("a1", "a", DEFAULT_POOL, 5, 0));
        q.push(entry("a2", "a", DEFAULT_POOL, 5, 1));
        q.push(entry("b1", "b", DEFAULT_POOL, 5, 2));
        q.set_held("b", true);
        assert_eq!(q.pop(0).unwrap().run_id, "a1");
        assert!(q.pop(0).is_none(), "a at its cap, b held");
        q.set_held("b", false);
        assert_eq!(q.pop(0).unwrap().run_id, "b1");
        q.finish("a", DEFAULT_POOL);
        assert_eq!(q.pop(0).unwrap().run_id, "a2");
    }

    /// Tenant `a` asks for priority 9 (a task saved before its ceiling was
    /// lowered to 6): its entries queue at 6, so they fill the normal slots
    /// but not the reserved one, which `b`'s priority 9 then gets.
    #[test]
    fn entries_above_the_ceiling_queue_at_it_and_leave_the_reserved_share() {
        let mut q = DispatchQueue::new(QueueConfig::for_cores(4), 0);
        assert_eq!(q.config.reserved_high, 1);
        q.set_ceiling("a", crate::tenant::DEFAULT_MAX_PRIORITY);
        for i in 0..4 {
            q.push(entry(&format!("a{i}"), "a", DEFAULT_POOL, 9, i));
        }
        let started: Vec<_> = std::iter::from_fn(|| q.pop(10)).collect();
        assert_eq!(started.len(), 3, "the normal slots only: {started:?}");
        assert!(started.iter().all(|e| e.priority == 6), "{started:?}");
        q.push(entry("b-high", "b", DEFAULT_POOL, 9, 20));
        assert_eq!(q.pop(20).unwrap().run_id, "b-high", "the reserved slot");
    }

    /// With the default running cap (half the slots), `a`'s long attempts
    /// leave a normal slot for `b`'s low-priority step.
    #[test]
    fn a_tenant_at_the_default_cap_leaves_a_normal_slot_for_others() {
        let mut q = DispatchQueue::new(QueueConfig::for_cores(4), 0);
        let cap = crate::tenant::default_max_running(4);
        q.set_tenant("a", Some(cap), 1);
        for i in 0..4 {
            q.push(entry(&format!("a{i}"), "a", DEFAULT_POOL, 6, i));
        }
        assert_eq!(std::iter::from_fn(|| q.pop(10)).count(), 2);
        q.push(entry("b-low", "b", DEFAULT_POOL, 5, 20));
        assert_eq!(q.pop(20).unwrap().run_id, "b-low");
    }

    #[test]
    fn removing_a_run_drops_its_entries_and_counts() {
        let mut q = DispatchQueue::new(config(10, 0), 0);
        q.push(entry("x", "t", DEFAULT_POOL, 5, 0));
        q.push(entry("y", "t", DEFAULT_POOL, 5, 1));
        q.remove_run("x");
        assert_eq!(q.queued(), 1);
        assert_eq!(q.queued_for("t"), 1);
        assert_eq!(q.pop(0).unwrap().run_id, "y");
    }
}
