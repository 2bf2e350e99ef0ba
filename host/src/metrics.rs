//! Metric primitives and the Prometheus text encoder behind `GET /metrics`.
//!
//! What it owns: counters, histograms and per-tenant families kept as plain
//! atomics, and the text exposition format (version 0.0.4). What it does not
//! own: *which* numbers exist and where they are counted (the scheduler's
//! [`crate::scheduler::Stats`], the API's request counter) or the route
//! (`api/metrics.rs`). Every metric is listed in docs/OPERATIONS.md.
//!
//! # Why hand-rolled atomics rather than a metrics crate
//!
//! The hot paths are the scheduler actor finishing an attempt and starting a
//! run — tens of thousands per second on two cores. `prometheus-client` (the
//! official crate) keeps labelled families behind an `RwLock`ed map looked up
//! by label set on every increment, and `metrics` hashes the key into a
//! global registry on every call. Here the actor keeps its own map from
//! tenant to an `Arc<TenantMetrics>` ([`TenantCache`], no lock: the actor is
//! single-threaded), so counting an attempt is a hash lookup in the actor's
//! own memory plus a few relaxed atomic adds. The shared registry's mutex is
//! taken only the first time the actor sees a tenant and once per scrape.
//! The exposition format is small and stable; encoding it is ~150 lines,
//! which is cheaper than a dependency whose types would leak into the
//! scheduler. Histograms use fixed buckets (cumulative counts computed at
//! scrape), sums are kept in integer microseconds so no CAS loop on floats
//! is needed.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::model::{Outcome, RunStatus};

/// Bucket bounds (seconds) of the fire lateness histogram: from "on time" to
/// the seeds' 5 s alert threshold and well past it.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Bucket bounds (seconds) of the attempt duration histogram: a trivial
/// plugin takes tens of µs, a report extraction minutes.
pub const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Bucket bounds (seconds) of the store call histogram (PostgreSQL): a
/// call on a local server takes a few hundred µs, one that waits for a free
/// connection or a slow disk up to the 30 s checkout limit.
pub const STORE_CALL_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// A histogram with fixed bucket bounds, updated with relaxed atomics.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), the last one is `+Inf`.
    buckets: Box<[AtomicU64]>,
    /// Sum of observations, µs (integer, so an add is one atomic op).
    sum_us: AtomicU64,
}

impl Histogram {
    /// An empty histogram over `bounds` (seconds, increasing).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Records one observation of `seconds` (negative values count as 0).
    pub fn observe(&self, seconds: f64) {
        let seconds = seconds.max(0.0);
        let i = self.bounds.partition_point(|b| *b < seconds);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6).round() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Sum of observations, seconds.
    pub fn sum(&self) -> f64 {
        self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// Counters of one tenant, updated by the scheduler actor.
#[derive(Debug)]
pub struct TenantMetrics {
    /// Attempts finished, by outcome (index = position in [`Outcome::ALL`]).
    pub attempts: [AtomicU64; Outcome::ALL.len()],
    /// Fuel consumed by finished attempts.
    pub fuel: AtomicU64,
    /// Runs that reached a terminal state: succeeded, failed, cancelled.
    pub runs_finished: [AtomicU64; 3],
    /// Scheduled instant → first attempt start, for timed runs.
    pub lateness: Histogram,
    /// Attempt wall time.
    pub duration: Histogram,
}

/// The terminal run states, in the order of [`TenantMetrics::runs_finished`].
pub const FINISHED: [RunStatus; 3] = [
    RunStatus::Succeeded,
    RunStatus::Failed,
    RunStatus::Cancelled,
];

impl Default for TenantMetrics {
    fn default() -> Self {
        Self {
            attempts: Default::default(),
            fuel: AtomicU64::new(0),
            runs_finished: Default::default(),
            lateness: Histogram::new(LATENESS_BUCKETS),
            duration: Histogram::new(DURATION_BUCKETS),
        }
    }
}

impl TenantMetrics {
    /// Counts a finished attempt: its outcome, fuel and duration.
    pub fn attempt_done(&self, outcome: Outcome, fuel: u64, duration_ms: f64) {
        self.count(outcome);
        self.fuel.fetch_add(fuel, Ordering::Relaxed);
        self.duration.observe(duration_ms / 1e3);
    }

    /// Counts an attempt's outcome only (an attempt lost to a crash has no
    /// fuel or duration).
    pub fn count(&self, outcome: Outcome) {
        if let Some(i) = Outcome::ALL.iter().position(|o| *o == outcome) {
            self.attempts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a run that reached a terminal state (others are ignored).
    pub fn run_finished(&self, status: RunStatus) {
        if let Some(i) = FINISHED.iter().position(|s| *s == status) {
            self.runs_finished[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records how late a timed run's first attempt started, ms.
    pub fn fire_late(&self, ms: f64) {
        self.lateness.observe(ms / 1e3);
    }

    /// Attempts finished with `outcome`.
    pub fn attempts_with(&self, outcome: Outcome) -> u64 {
        Outcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .map_or(0, |i| self.attempts[i].load(Ordering::Relaxed))
    }
}

/// Every tenant's metrics, shared by the scheduler (writes) and the scrape
/// (reads). Tenants are never forgotten: their number is small and counters
/// must not go backwards.
#[derive(Debug, Default)]
pub struct TenantRegistry {
    /// Taken when a tenant is first seen and once per scrape, never per attempt.
    tenants: Mutex<BTreeMap<String, Arc<TenantMetrics>>>,
}

impl TenantRegistry {
    /// The metrics of `tenant`, created on first use.
    pub fn get(&self, tenant: &str) -> Arc<TenantMetrics> {
        let mut map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(tenant.to_string()).or_default().clone()
    }

    /// Every tenant's metrics, by name.
    pub fn all(&self) -> Vec<(String, Arc<TenantMetrics>)> {
        let map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// The scheduler actor's own, lock-free view of the registry.
#[derive(Debug)]
pub struct TenantCache {
    registry: Arc<TenantRegistry>,
    local: HashMap<String, Arc<TenantMetrics>>,
}

impl TenantCache {
    /// A cache over `registry`.
    pub fn new(registry: Arc<TenantRegistry>) -> Self {
        Self {
            registry,
            local: HashMap::new(),
        }
    }

    /// The metrics of `tenant` (the registry is consulted only the first time).
    pub fn of(&mut self, tenant: &str) -> &TenantMetrics {
        if !self.local.contains_key(tenant) {
            let m = self.registry.get(tenant);
            self.local.insert(tenant.to_string(), m);
        }
        &self.local[tenant]
    }
}

/// HTTP requests by (method, route template, status). Requests are not the
/// scheduler's hot path; a read lock and an atomic add per request, the write
/// lock only for a new combination (bounded: routes × methods × statuses).
#[derive(Debug, Default)]
pub struct HttpMetrics {
    requests: RwLock<HashMap<(String, String, u16), AtomicU64>>,
}

impl HttpMetrics {
    /// Counts one answered request. `route` is the matched path template
    /// (`/v1/runs/{id}`), never the raw path, so label values stay bounded.
    pub fn count(&self, method: &str, route: &str, status: u16) {
        let key = (method.to_string(), route.to_string(), status);
        {
            let map = self.requests.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(c) = map.get(&key) {
                c.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut map = self
            .requests
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(key)
            .or_insert_with(|| AtomicU64::new(0))
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Every (method, route, status) with its count, sorted.
    pub fn snapshot(&self) -> Vec<((String, String, u16), u64)> {
        let map = self.requests.read().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<_> = map
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::Relaxed)))
            .collect();
        all.sort();
        all
    }
}

/// Builds a Prometheus text exposition (format 0.0.4).
#[derive(Debug, Default)]
pub struct Encoder {
    out: String,
}

/// One label set: `[("tenant", "a"), ("outcome", "failed")]`.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Encoder {
    /// Starts a metric family: `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.out, "# HELP {name} {}", help.replace('\n', " "));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        self
    }

    /// One sample line.
    pub fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) -> &mut Self {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", number(value));
        self
    }

    /// The `_bucket`, `_sum` and `_count` lines of one histogram.
    pub fn histogram(&mut self, name: &str, labels: Labels<'_>, h: &Histogram) -> &mut Self {
        let mut cumulative = 0;
        for (i, bucket) in h.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = h
                .bounds
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| number(*b));
            let _ = write!(self.out, "{name}_bucket");
            write_labels(&mut self.out, labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        let (sum, count) = (format!("{name}_sum"), format!("{name}_count"));
        self.sample(&sum, labels, h.sum());
        self.sample(&count, labels, cumulative as f64)
    }

    /// The finished text.
    pub fn finish(self) -> String {
        self.out
    }
}

fn write_labels(out: &mut String, labels: Labels<'_>, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    out.push('}');
}

/// Label values escape `\`, `"` and newlines (exposition format rules).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Integers without a fraction, others in Rust's shortest round-trip form.
fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let h = Histogram::new(&[0.1, 1.0]);
        for s in [0.05, 0.1, 0.5, 3.0] {
            h.observe(s);
        }
        let mut e = Encoder::default();
        e.histogram("x_seconds", &[("tenant", "a")], &h);
        let text = e.finish();
        assert_eq!(
            text,
            "x_seconds_bucket{tenant=\"a\",le=\"0.1\"} 2\n\
             x_seconds_bucket{tenant=\"a\",le=\"1\"} 3\n\
             x_seconds_bucket{tenant=\"a\",le=\"+Inf\"} 4\n\
             x_seconds_sum{tenant=\"a\"} 3.65\n\
             x_seconds_count{tenant=\"a\"} 4\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut e = Encoder::default();
        e.family("y_total", "counter", "help")
            .sample("y_total", &[("route", "a\"b\\c\nd")], 3.0);
        assert_eq!(
            e.finish(),
            "# HELP y_total help\n# TYPE y_total counter\ny_total{route=\"a\\\"b\\\\c\\nd\"} 3\n"
        );
    }

    #[test]
    fn the_cache_hands_out_the_registry_s_counters() {
        let registry = Arc::new(TenantRegistry::default());
        let mut cache = TenantCache::new(registry.clone());
        cache.of("t1").attempt_done(Outcome::Failed, 10, 2.0);
        cache.of("t1").attempt_done(Outcome::Failed, 5, 2.0);
        let all = registry.all();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1.attempts_with(Outcome::Failed), 2);
        assert_eq!(all[0].1.fuel.load(Ordering::Relaxed), 15);
        assert_eq!(all[0].1.duration.count(), 2);
    }

    #[test]
    fn http_requests_are_counted_by_route_template() {
        let http = HttpMetrics::default();
        http.count("GET", "/v1/runs/{id}", 200);
        http.count("GET", "/v1/runs/{id}", 200);
        http.count("GET", "/v1/runs/{id}", 404);
        let snap = http.snapshot();
        assert_eq!(
            snap,
            vec![
                (("GET".into(), "/v1/runs/{id}".into(), 200), 2),
                (("GET".into(), "/v1/runs/{id}".into(), 404), 1),
            ]
        );
    }
}
