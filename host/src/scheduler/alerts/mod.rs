//! Webhook alerts: a JSON POST when a run fails, a step is dead-lettered, or
//! a timed run starts later than a threshold — what the seed articles page
//! their team chat robot with.
//!
//! # Who is alerted
//!
//! A task says where its alerts go:
//!
//! ```yaml
//! alerts:
//!   webhook: https://chat.example.com/hooks/abc
//!   on: [failed, dead_letter, late]   # default: all three
//!   late_after: 5s                    # default: 5s (the seeds' threshold)
//! ```
//!
//! A tenant can have the same setting — on its record (`alerts` in
//! `POST /v1/tenants`, `PUT /v1/tenants/{t}`) or in the server config
//! (`alerts.tenants`) — covering every task of the tenant; a task with its
//! own `alerts` is sent there *as well* (the team's channel and the task
//! owner's are both told).
//!
//! # Where a webhook may point
//!
//! An alert is an outbound HTTP request made by the host on a tenant's
//! behalf, so it obeys the rules plugins do (docs/CAPABILITIES.md) — the
//! same code decides ([`crate::capability::http`]):
//! - a **task's** webhook (written by whoever may save the tenant's tasks)
//!   must be allowed by the tenant's `allow_http` ceiling, the list the admin
//!   sets for the tenant's plugins: no separate alert list, so one list says
//!   where a tenant's work may reach. It is checked when the task is saved
//!   ([`check_webhook`], `422` naming `alerts.webhook`) and again at every
//!   delivery, against the ceiling of that moment (an admin may narrow it);
//! - a webhook the **admin** set (on a tenant record, or in the server
//!   config) grants itself: its exact destination is the pattern;
//! - then the address rules: the name is resolved once, each address checked
//!   like a `wasi:http` request's ([`crate::capability::http::pick_address`]:
//!   no loopback, link-local/metadata or other special address through a
//!   name; private ones only through an exact name), and the POST goes to
//!   the checked address (a resolver handing ureq only that address, no
//!   proxy), so DNS cannot rebind between check and use. Loopback is reached
//!   only through a literal address granted as such (`http://127.0.0.1:9093`);
//! - redirects are **not followed**: a 3xx is a failed delivery, not retried
//!   (a redirect could point anywhere; the receiver's URL should be fixed).
//!
//! A refusal at delivery is logged (`warn`, with the reason), counted in
//! `ax_alerts_denied_total`, and not retried. The delivery counters are
//! behind `GET /metrics`, which needs a token (docs/OPERATIONS.md), so a
//! tenant cannot read another tenant's delivery results there.
//!
//! # Never blocking the scheduler
//!
//! The scheduler actor only calls [`Alerter`] methods, which decide from the
//! run's own definition whether anything is due and, if so, push one small
//! record onto a bounded in-memory queue (a mutex held for a push). A worker
//! task delivers them one at a time, on a blocking thread (ureq), with a
//! timeout. A delivery that fails with a connection error, a timeout, 408,
//! 429 or 5xx is retried with exponential backoff (`initial_backoff`,
//! doubling, capped at `max_backoff`, `max_attempts` in all); other 4xx are
//! the receiver refusing the payload, not retried. When the queue is full the
//! **oldest** alert is dropped and counted (`ax_alerts_dropped_total`): the
//! newest news is the most useful, and memory stays bounded. Alerts are not
//! persisted: a restart loses those not yet delivered (the run states they
//! report are in the store and the metrics).
//!
//! # Payload
//!
//! ```json
//! {"kind": "run_failed", "tenant": "default", "task": "order_report",
//!  "run_id": "r…", "step": null, "status": "failed", "reason": "…",
//!  "scheduled_for": "…", "late_by_ms": null, "dead_letter_id": null,
//!  "at": "…", "text": "ax: run r… of order_report failed: …"}
//! ```
//! `kind` is `run_failed`, `dead_letter` or `late`; `text` is one line for
//! chat robots that show a text field.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::capability::http::{self as allow, Destination, HttpPattern};
use crate::model::time::rfc3339;
use crate::model::{DeadLetter, Millis, RunRecord, RunStatus};
use crate::task::TaskSpec;
pub use crate::task::alerts::{AlertOn, AlertSpec, DEFAULT_LATE_AFTER, all_events};
use crate::tenant::Registry;

/// How long saving a task waits for its webhook's name to resolve; past it
/// the save goes on and delivery checks (a name may not resolve yet where
/// the task is written).
pub const SAVE_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Delivery settings (`alerts:` in the server config).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Alerts waiting (fresh and retrying) before the oldest is dropped.
    pub queue: usize,
    /// Delivery attempts per alert, the first included.
    pub max_attempts: u32,
    /// Wait before the first retry; doubles each time.
    #[serde(with = "humantime_text")]
    pub initial_backoff: Duration,
    /// Longest wait between retries.
    #[serde(with = "humantime_text")]
    pub max_backoff: Duration,
    /// Timeout of one POST.
    #[serde(with = "humantime_text")]
    pub timeout: Duration,
    /// Per-tenant alerts, by tenant name.
    pub tenants: BTreeMap<String, AlertSpec>,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            queue: 1000,
            max_attempts: 6,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            tenants: BTreeMap::new(),
        }
    }
}

/// Durations in config files as people write them (`10s`, `500ms`).
pub(crate) mod humantime_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            serde::de::Error::custom(format!("`{text}` is not a duration ({e}); try 1s, 500ms"))
        })
    }
}

/// The JSON body POSTed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    /// `run_failed`, `dead_letter` or `late`.
    pub kind: String,
    /// Tenant.
    pub tenant: String,
    /// Task.
    pub task: String,
    /// The run.
    pub run_id: String,
    /// The step (dead letters).
    pub step: Option<String>,
    /// The run's status when the alert was raised.
    pub status: String,
    /// Why (the run's reason, the step's last error).
    pub reason: Option<String>,
    /// The instant the run was for.
    pub scheduled_for: String,
    /// How late the first attempt started (`late`).
    pub late_by_ms: Option<i64>,
    /// The dead letter (`dead_letter`).
    pub dead_letter_id: Option<String>,
    /// When the alert was raised.
    pub at: String,
    /// One line for chat robots.
    pub text: String,
}

/// Counters of the delivery worker (for `GET /metrics`).
#[derive(Debug, Default)]
pub struct AlertStats {
    /// Alerts delivered (2xx).
    pub sent: AtomicU64,
    /// Alerts given up (a non-retryable answer, or attempts exhausted).
    pub failed: AtomicU64,
    /// Retries scheduled.
    pub retries: AtomicU64,
    /// Alerts dropped because the queue was full (oldest first).
    pub dropped: AtomicU64,
    /// Alerts refused at delivery: the webhook is outside the tenant's
    /// ceiling, or its name resolves to an address it may not reach.
    pub denied: AtomicU64,
}

/// Who set a webhook, which decides what grants it (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetBy {
    /// On the tenant record or in the server config: grants itself.
    Admin,
    /// In a task definition: needs the tenant's `allow_http`.
    Task,
}

/// One alert on its way to one webhook.
#[derive(Debug)]
struct Pending {
    url: String,
    set_by: SetBy,
    body: Arc<Alert>,
    attempts: u32,
}

#[derive(Debug, Default)]
struct Queue {
    fresh: VecDeque<Pending>,
    /// Waiting to be retried, by due instant (and a sequence for uniqueness).
    retry: BTreeMap<(Instant, u64), Pending>,
    seq: u64,
}

impl Queue {
    fn len(&self) -> usize {
        self.fresh.len() + self.retry.len()
    }

    /// Makes room for one more by dropping the oldest (fresh first: a retry
    /// has been tried, a fresh one never, but the oldest news matters least).
    fn drop_oldest(&mut self) -> bool {
        if self.fresh.pop_front().is_some() {
            return true;
        }
        let first = self.retry.keys().next().copied();
        first.and_then(|k| self.retry.remove(&k)).is_some()
    }
}

struct Inner {
    config: AlertsConfig,
    /// The live tenant records: a task webhook's ceiling is read from here
    /// at every delivery.
    registry: Registry,
    /// Alerts set on tenant records (API), by tenant; read only when
    /// `any_tenant` says there is one, so runs of a host without tenant
    /// alerts never take the lock.
    tenants: RwLock<std::collections::HashMap<String, AlertSpec>>,
    any_tenant: AtomicBool,
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    stats: AlertStats,
}

/// The handle the scheduler raises alerts through. Cheap to clone.
#[derive(Clone)]
pub struct Alerter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Alerter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerter")
            .field("queued", &self.queued())
            .finish()
    }
}

impl Alerter {
    /// Starts the delivery worker; it stops when `shutdown` fires. Task
    /// webhooks are checked against the ceilings in `registry`.
    pub fn start(config: AlertsConfig, registry: Registry, shutdown: CancellationToken) -> Self {
        let alerter = Self {
            inner: Arc::new(Inner {
                config,
                registry,
                tenants: RwLock::default(),
                any_tenant: AtomicBool::new(false),
                queue: Mutex::new(Queue::default()),
                wake: tokio::sync::Notify::new(),
                stats: AlertStats::default(),
            }),
        };
        tokio::spawn(worker(alerter.inner.clone(), shutdown));
        alerter
    }

    /// Delivery counters.
    pub fn stats(&self) -> &AlertStats {
        &self.inner.stats
    }

    /// Alerts waiting (fresh and retrying).
    pub fn queued(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets (or clears) the alerts of a tenant record.
    pub fn set_tenant(&self, tenant: &str, alerts: Option<AlertSpec>) {
        let mut map = self
            .inner
            .tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match alerts {
            Some(a) => map.insert(tenant.to_string(), a),
            None => map.remove(tenant),
        };
        self.inner
            .any_tenant
            .store(!map.is_empty(), Ordering::Relaxed);
    }

    /// The settings an event of `tenant` / `spec` goes to: the tenant's
    /// (record, then config file; set by the admin) and the task's.
    fn targets(&self, tenant: &str, spec: &TaskSpec, event: AlertOn) -> Vec<(AlertSpec, SetBy)> {
        let mut out = Vec::new();
        if self.inner.any_tenant.load(Ordering::Relaxed) {
            let map = self
                .inner
                .tenants
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            out.extend(map.get(tenant).cloned().map(|a| (a, SetBy::Admin)));
        }
        out.extend(
            self.inner
                .config
                .tenants
                .get(tenant)
                .cloned()
                .map(|a| (a, SetBy::Admin)),
        );
        out.extend(spec.alerts.clone().map(|a| (a, SetBy::Task)));
        out.retain(|(a, _)| a.wants(event));
        out
    }

    /// Queues `alert` for every target; never blocks beyond a mutex push.
    fn send(&self, targets: Vec<(AlertSpec, SetBy)>, alert: Alert) {
        if targets.is_empty() {
            return;
        }
        let body = Arc::new(alert);
        let mut queue = self.lock();
        for (t, set_by) in targets {
            while queue.len() >= self.inner.config.queue.max(1) && queue.drop_oldest() {
                self.inner.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            queue.fresh.push_back(Pending {
                url: t.webhook.clone(),
                set_by,
                body: body.clone(),
                attempts: 0,
            });
        }
        drop(queue);
        self.inner.wake.notify_one();
    }

    /// A run ended: alerts `failed` for a failed run.
    pub fn run_ended(&self, run: &RunRecord, spec: &TaskSpec, now: Millis) {
        if run.status != RunStatus::Failed {
            return;
        }
        let targets = self.targets(&run.tenant, spec, AlertOn::Failed);
        if targets.is_empty() {
            return;
        }
        let reason = run.reason.clone();
        let text = format!(
            "ax: run {} of {}/{} failed{}",
            run.id,
            run.tenant,
            run.task,
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
        self.send(targets, alert("run_failed", run, now, reason, text));
    }

    /// A step was dead-lettered.
    pub fn dead_letter(&self, run: &RunRecord, spec: &TaskSpec, dead: &DeadLetter) {
        let targets = self.targets(&run.tenant, spec, AlertOn::DeadLetter);
        if targets.is_empty() {
            return;
        }
        let text = format!(
            "ax: step {} of run {} ({}/{}) is dead after {} attempts: {}",
            dead.step,
            run.id,
            run.tenant,
            run.task,
            dead.attempts,
            dead.error.as_deref().unwrap_or("no error text")
        );
        let mut a = alert(
            "dead_letter",
            run,
            dead.created_at,
            dead.error.clone(),
            text,
        );
        a.step = Some(dead.step.clone());
        a.dead_letter_id = Some(dead.id.clone());
        self.send(targets, a);
    }

    /// A timed run's first attempt started `late_ms` after its instant.
    pub fn started_late(&self, run: &RunRecord, spec: &TaskSpec, late_ms: i64, now: Millis) {
        let mut targets = self.targets(&run.tenant, spec, AlertOn::Late);
        targets.retain(|(a, _)| late_ms > a.late_after().as_millis() as i64);
        if targets.is_empty() {
            return;
        }
        let text = format!(
            "ax: run {} of {}/{} started {:.1} s after its scheduled time {}",
            run.id,
            run.tenant,
            run.task,
            late_ms as f64 / 1e3,
            rfc3339(run.scheduled_for)
        );
        let mut a = alert("late", run, now, None, text);
        a.late_by_ms = Some(late_ms);
        self.send(targets, a);
    }
}

fn alert(kind: &str, run: &RunRecord, at: Millis, reason: Option<String>, text: String) -> Alert {
    Alert {
        kind: kind.into(),
        tenant: run.tenant.clone(),
        task: run.task.clone(),
        run_id: run.id.clone(),
        step: None,
        status: run.status.as_str().into(),
        reason,
        scheduled_for: rfc3339(run.scheduled_for),
        late_by_ms: None,
        dead_letter_id: None,
        at: rfc3339(at),
        text,
    }
}

/// Where a webhook may connect: its destination and the pattern granting
/// it. `ceiling` is the tenant's `allow_http` for a task's webhook, `None`
/// for one the admin set (its exact destination grants it). The one rule,
/// used on save ([`check_webhook`]) and at every delivery.
fn grant(url: &str, ceiling: Option<&[HttpPattern]>) -> Result<(Destination, HttpPattern), String> {
    let dest = Destination::from_url(url)?;
    let pattern = match ceiling {
        None => HttpPattern::exact(&dest),
        Some(ceiling) => allow::granting(ceiling, &dest)?.clone(),
    };
    Ok((dest, pattern))
}

/// Whether a webhook may be saved: allowed by `ceiling` (the tenant's
/// `allow_http`, for a task's webhook; `None` for one the admin sets), and
/// not pointing at an address the rules refuse — an address literal is
/// judged as written; a name is resolved (at most [`SAVE_RESOLVE_TIMEOUT`])
/// and refused when it resolves only to refused addresses (`localhost`). A
/// name that does not resolve now is accepted: delivery checks again.
pub async fn check_webhook(
    spec: &AlertSpec,
    ceiling: Option<&[HttpPattern]>,
) -> Result<(), String> {
    let (dest, pattern) = grant(&spec.webhook, ceiling)?;
    let addrs: Vec<std::net::SocketAddr> = match dest.ip() {
        Some(ip) => vec![std::net::SocketAddr::new(ip, dest.port)],
        None => {
            let lookup = tokio::net::lookup_host((dest.host.as_str(), dest.port));
            match tokio::time::timeout(SAVE_RESOLVE_TIMEOUT, lookup).await {
                Ok(Ok(addrs)) => addrs.collect(),
                Ok(Err(_)) | Err(_) => return Ok(()),
            }
        }
    };
    if addrs.is_empty() {
        return Ok(());
    }
    allow::pick_address(&pattern, &dest.host, &addrs).map(drop)
}

/// How one delivery went.
enum Delivery {
    Sent,
    Retry(String),
    GiveUp(String),
    /// The ceiling or the address rules refuse the webhook.
    Denied(String),
}

/// A resolver handing ureq only the address the rules allow: the URL's name
/// is resolved once (ureq's own resolver, within the request's timeout),
/// [`allow::pick_address`] picks, and the connection goes there. A refusal
/// is kept in `denied` so the worker can tell it from a network error.
#[derive(Debug)]
struct CheckedResolver {
    dest: Destination,
    pattern: HttpPattern,
    denied: Arc<Mutex<Option<String>>>,
}

impl CheckedResolver {
    fn deny(&self, why: String) -> ureq::Error {
        let error = ureq::Error::Io(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why.clone(),
        ));
        *self.denied.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
        error
    }
}

impl ureq::unversioned::resolver::Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        // Only the checked destination: no redirect is followed and no proxy
        // is used, so anything else is a bug to refuse, not to connect to.
        let asked = Destination::parse(
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map_or("", |a| a.as_str()),
        );
        if asked.as_ref() != Ok(&self.dest) {
            return Err(self.deny(format!("{uri} is not the checked destination")));
        }
        let addrs = ureq::unversioned::resolver::DefaultResolver::default()
            .resolve(uri, config, timeout)?;
        match allow::pick_address(&self.pattern, &self.dest.host, &addrs) {
            Ok(addr) => {
                let mut one = self.empty();
                one.push(addr);
                Ok(one)
            }
            Err(why) => Err(self.deny(why)),
        }
    }
}

fn deliver(timeout: Duration, dest: Destination, pattern: HttpPattern, p: &Pending) -> Delivery {
    let denied = Arc::new(Mutex::new(None));
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        // A 3xx comes back as it is (module docs: redirects are not followed).
        .max_redirects(0)
        // A proxy would resolve and connect itself, past the address check.
        .proxy(None)
        .build();
    let agent = ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::default(),
        CheckedResolver {
            dest,
            pattern,
            denied: denied.clone(),
        },
    );
    let result = agent
        .post(&p.url)
        .header("content-type", "application/json")
        .header("user-agent", concat!("ax/", env!("CARGO_PKG_VERSION")))
        .send(serde_json::to_vec(&*p.body).unwrap_or_default());
    if let Some(why) = denied.lock().unwrap_or_else(PoisonError::into_inner).take() {
        return Delivery::Denied(why);
    }
    match result {
        Ok(r) if r.status().is_success() => Delivery::Sent,
        Ok(r) if r.status().is_redirection() => Delivery::GiveUp(format!(
            "answered {}; redirects are not followed (point the webhook at the final URL)",
            r.status().as_u16()
        )),
        Ok(r) => {
            let s = r.status().as_u16();
            if s == 408 || s == 429 || s >= 500 {
                Delivery::Retry(format!("answered {s}"))
            } else {
                Delivery::GiveUp(format!("answered {s}"))
            }
        }
        Err(e) => Delivery::Retry(e.to_string()),
    }
}

impl Inner {
    /// The webhook's destination and grant now: a task's against its
    /// tenant's current ceiling (an unknown tenant or unreadable list allows
    /// nothing).
    fn grant(&self, p: &Pending) -> Result<(Destination, HttpPattern), String> {
        match p.set_by {
            SetBy::Admin => grant(&p.url, None),
            SetBy::Task => {
                let listed = self
                    .registry
                    .tenant(&p.body.tenant)
                    .map(|t| t.allow_http)
                    .unwrap_or_default();
                let ceiling = allow::parse_list(&listed).unwrap_or_default();
                grant(&p.url, Some(&ceiling))
            }
        }
    }
}

async fn worker(inner: Arc<Inner>, shutdown: CancellationToken) {
    loop {
        let (next, wait) = {
            let mut q = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let due = q.retry.keys().next().copied().filter(|(at, _)| *at <= now);
            match due {
                Some(k) => (q.retry.remove(&k), None),
                None => match q.fresh.pop_front() {
                    Some(p) => (Some(p), None),
                    None => (None, q.retry.keys().next().map(|(at, _)| *at)),
                },
            }
        };
        let Some(mut pending) = next else {
            let sleep = async {
                match wait {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = inner.wake.notified() => {}
                _ = sleep => {}
            }
            continue;
        };
        pending.attempts += 1;
        let timeout = inner.config.timeout;
        let granted = inner.grant(&pending);
        let (outcome, pending) = match tokio::task::spawn_blocking(move || {
            let d = match granted {
                Ok((dest, pattern)) => deliver(timeout, dest, pattern, &pending),
                Err(why) => Delivery::Denied(why),
            };
            (d, pending)
        })
        .await
        {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(error = %e, "alert delivery panicked");
                continue;
            }
        };
        let stats = &inner.stats;
        match outcome {
            Delivery::Sent => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
            }
            Delivery::Retry(why) if pending.attempts < inner.config.max_attempts => {
                let backoff = backoff(&inner.config, pending.attempts);
                tracing::info!(url = %pending.url, kind = %pending.body.kind, run = %pending.body.run_id,
                    attempt = pending.attempts, %why, retry_in_ms = backoff.as_millis() as u64, "alert not delivered; retrying");
                stats.retries.fetch_add(1, Ordering::Relaxed);
                let mut q = inner.queue.lock().unwrap_or_else(PoisonError::into_inner);
                q.seq += 1;
                let key = (Instant::now() + backoff, q.seq);
                q.retry.insert(key, pending);
            }
            Delivery::Denied(why) => {
                tracing::warn!(url = %pending.url, tenant = %pending.body.tenant, kind = %pending.body.kind,
                    run = %pending.body.run_id, %why, "alert refused: the webhook may not be reached");
                stats.denied.fetch_add(1, Ordering::Relaxed);
            }
            Delivery::Retry(why) | Delivery::GiveUp(why) => {
                tracing::warn!(url = %pending.url, kind = %pending.body.kind, run = %pending.body.run_id,
                    attempts = pending.attempts, %why, "alert given up");
                stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The wait before retry number `attempts` (1 = after the first failure).
fn backoff(config: &AlertsConfig, attempts: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(20));
    config
        .initial_backoff
        .saturating_mul(factor)
        .min(config.max_backoff)
}

/// Per-tenant settings checked once at start (config file), like a task's
/// and like a tenant record's (set by the admin: [`check_webhook`] without
/// a ceiling).
pub async fn validate_config(config: &AlertsConfig) -> Result<(), String> {
    for (tenant, spec) in &config.tenants {
        let path = format!("alerts.tenants.{tenant}");
        spec.validate(&path)
            .map_err(|e| format!("{}: {}", e.path, e.message))?;
        check_webhook(spec, None)
            .await
            .map_err(|e| format!("{path}.webhook: {e}"))?;
    }
    Ok(())
}

/// Alerts a scheduler without webhooks raises nowhere: a handle whose
/// worker is never started and whose every method returns at once.
impl Default for Alerter {
    fn default() -> Self {
        Self {
            inner: Arc::new(Inner {
                config: AlertsConfig::default(),
                registry: Registry::default(),
                tenants: RwLock::default(),
                any_tenant: AtomicBool::new(false),
                queue: Mutex::new(Queue::default()),
                wake: tokio::sync::Notify::new(),
                stats: AlertStats::default(),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
