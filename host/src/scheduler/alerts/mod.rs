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
//! `ax_alerts_denied_total`, and not retried: the alert is `dead` with the
//! reason (a retry once the ceiling allows it delivers it). The delivery
//! counters are behind `GET /metrics`, which needs a token
//! (docs/OPERATIONS.md), so a tenant cannot read another tenant's delivery
//! results there; `GET /v1/alerts` shows a tenant only its own alerts, and
//! the URL of a webhook the admin set only to the admin.
//!
//! # Never blocking the scheduler
//!
//! The scheduler actor only calls [`Alerter`] methods, which decide from the
//! run's own definition whether anything is due and, if so, return one
//! small [`OutboxAlert`] record per webhook. The actor adds them to its next
//! run write, so an alert is stored **with the change that raised it** (the
//! run write that makes the run failed, dead-letters the step, or starts it
//! late), in the same atomic store write, or not at all
//! ([`crate::store::Runs::write_runs_with_alerts`]); a crash before that
//! write loses the change and its alert together, a crash after it loses
//! neither.
//!
//! # The outbox and its worker
//!
//! The store is the source of truth; nothing of an alert is held only in
//! memory. A worker task reads the pending alerts due now from the store
//! ([`crate::store::Outbox::due_alerts`], by next-try time), delivers them one
//! at a time on a blocking thread (ureq) with a timeout, and writes the
//! result back on the record:
//! - a 2xx: `delivered` (kept, newest [`KEEP_DELIVERED`] per tenant, so the
//!   API and dashboard can show them; older ones are deleted);
//! - a connection error, a timeout, 408, 429 or 5xx: the attempt is counted
//!   and the next try is set after an exponential backoff
//!   (`initial_backoff`, doubling, capped at `max_backoff`); after
//!   `max_attempts` attempts in all the alert is `dead`;
//! - other 4xx (the receiver refusing the payload), a 3xx, or a refusal by
//!   the rules above: `dead` at once, with the reason.
//!
//! Dead alerts stay in the store, newest [`KEEP_DEAD`] per tenant, until
//! retried (`POST /v1/alerts/{id}/retry` puts one back to `pending` with its
//! attempts reset) or aged out by newer ones. Pending alerts are capped at
//! `queue` per tenant: past it the **oldest** are deleted and counted
//! (`ax_alerts_dropped_total`): the newest news is the most useful, and what
//! a tenant can make the host keep stays bounded. The cap is applied by the
//! worker as it wakes for new alerts, so a burst may exceed it for a moment.
//!
//! On start the worker reads on from whatever the store holds: alerts still
//! pending when the host stopped (or was killed) are delivered then. This is
//! **at-least-once**: an alert delivered but not yet marked (a crash between
//! the receiver's 2xx and the store write) is delivered again. Receivers
//! dedupe on the payload's `id`, which is the outbox record's and never
//! changes.
//!
//! # Payload
//!
//! ```json
//! {"id": "a…", "kind": "run_failed", "tenant": "default", "task": "order_report",
//!  "run_id": "r…", "step": null, "status": "failed", "reason": "…",
//!  "scheduled_for": "…", "late_by_ms": null, "dead_letter_id": null,
//!  "at": "…", "text": "ax: run r… of order_report failed: …"}
//! ```
//! `id` names the alert (one per webhook) and is the same at every try;
//! `kind` is `run_failed`, `dead_letter` or `late`; `text` is one line for
//! chat robots that show a text field. The body is stored as it is first
//! built and POSTed exactly as stored at every try.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::capability::http::{self as allow, Destination, HttpPattern};
use crate::model::time::rfc3339;
use crate::model::{DeadLetter, Millis, RunRecord, RunStatus};
use crate::scheduler::Clock;
use crate::store::{AlertQuery, AlertStatus, OutboxAlert, Store, new_id};
use crate::task::TaskSpec;
pub use crate::task::alerts::{AlertOn, AlertSpec, DEFAULT_LATE_AFTER, all_events};
use crate::tenant::Registry;

/// Delivered alerts kept per tenant (newest first) to be seen in the API
/// and dashboard; older ones are deleted.
pub const KEEP_DELIVERED: usize = 100;
/// Dead alerts kept per tenant (newest first) until retried; older ones are
/// deleted.
pub const KEEP_DEAD: usize = 1_000;
/// Alerts the worker reads from the store at a time.
const BATCH: usize = 32;
/// The longest the worker sleeps without looking at the store (a wake-up
/// lost to a store error is then only late, never lost).
const IDLE_POLL: Duration = Duration::from_secs(30);
/// The wait after the store refused a read or write of the outbox.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// How long saving a task waits for its webhook's name to resolve; past it
/// the save goes on and delivery checks (a name may not resolve yet where
/// the task is written).
pub const SAVE_RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Delivery settings (`alerts:` in the server config).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// Pending alerts (fresh and retrying) per tenant before the oldest are
    /// dropped.
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
    /// The outbox record's id: the same at every try (receivers dedupe on it).
    #[serde(default)]
    pub id: String,
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
    /// Pending alerts dropped because a tenant had `queue` of them (oldest
    /// first).
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

/// Why a retry of an alert was refused.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// No such alert for this tenant.
    #[error("alert `{0}` not found")]
    NotFound(String),
    /// Only a dead alert is retried.
    #[error("alert `{0}` is {1}; only a dead alert can be retried")]
    NotDead(String, &'static str),
    /// The store refused.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
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
    /// The outbox; `None` for the inert handle ([`Alerter::default`]),
    /// which raises nothing.
    store: Option<Arc<dyn Store>>,
    clock: Arc<dyn Clock>,
    /// Tenants that got new pending alerts since the worker last applied
    /// the `queue` cap (at most one entry per tenant).
    touched: Mutex<HashSet<String>>,
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
            .field("outbox", &self.inner.store.is_some())
            .finish()
    }
}

impl Alerter {
    /// Starts the delivery worker over the outbox in `store`; it stops when
    /// `shutdown` fires. Task webhooks are checked against the ceilings in
    /// `registry`.
    pub fn start(
        config: AlertsConfig,
        registry: Registry,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        shutdown: CancellationToken,
    ) -> Self {
        let alerter = Self::new(config, registry, Some(store), clock);
        tokio::spawn(worker(alerter.inner.clone(), shutdown));
        alerter
    }

    fn new(
        config: AlertsConfig,
        registry: Registry,
        store: Option<Arc<dyn Store>>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                registry,
                tenants: RwLock::default(),
                any_tenant: AtomicBool::new(false),
                store,
                clock,
                touched: Mutex::default(),
                wake: tokio::sync::Notify::new(),
                stats: AlertStats::default(),
            }),
        }
    }

    /// Delivery counters.
    pub fn stats(&self) -> &AlertStats {
        &self.inner.stats
    }

    /// Outbox alerts per state, all tenants (0 without an outbox): the
    /// `ax_alerts_queued` and `ax_alerts_dead` gauges.
    pub fn counts(&self) -> BTreeMap<AlertStatus, usize> {
        let mut out = BTreeMap::new();
        let counts = self.inner.store.as_ref().map(|s| s.alert_counts());
        match counts {
            Some(Ok(counts)) => {
                for (_, status, n) in counts {
                    *out.entry(status).or_default() += n;
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "cannot count the alert outbox"),
            None => {}
        }
        out
    }

    /// Alerts waiting (fresh and retrying), all tenants.
    pub fn queued(&self) -> usize {
        self.counts()
            .get(&AlertStatus::Pending)
            .copied()
            .unwrap_or(0)
    }

    /// Tells the worker that new alerts were stored.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// A tenant's outbox alerts, newest first, with a cursor.
    pub fn list(
        &self,
        query: &AlertQuery,
    ) -> crate::store::Result<(Vec<OutboxAlert>, Option<String>)> {
        match &self.inner.store {
            Some(store) => store.list_alerts(query),
            None => Ok((Vec::new(), None)),
        }
    }

    /// Puts a dead alert of `tenant` back to `pending`, due now, with its
    /// attempts reset: `max_attempts` more tries.
    pub fn retry(&self, tenant: &str, id: &str) -> Result<OutboxAlert, RetryError> {
        let not_found = || RetryError::NotFound(id.to_string());
        let store = self.inner.store.as_ref().ok_or_else(not_found)?;
        let mut alert = store
            .get_alert(id)?
            .filter(|a| a.tenant == tenant)
            .ok_or_else(not_found)?;
        if alert.status != AlertStatus::Dead {
            return Err(RetryError::NotDead(id.to_string(), alert.status.as_str()));
        }
        alert.status = AlertStatus::Pending;
        alert.attempts = 0;
        alert.next_try = self.inner.clock.now_ms();
        store.put_alerts(std::slice::from_ref(&alert))?;
        self.inner.touch(tenant);
        self.wake();
        Ok(alert)
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
        if self.inner.store.is_none() {
            return out;
        }
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

    /// The outbox records of `alert` for every target, due at `now`: the
    /// caller stores them with the change that raised them, then
    /// [`Alerter::wake`]s the worker.
    fn send(
        &self,
        targets: Vec<(AlertSpec, SetBy)>,
        alert: Alert,
        now: Millis,
    ) -> Vec<OutboxAlert> {
        if targets.is_empty() || self.inner.store.is_none() {
            return Vec::new();
        }
        self.inner.touch(&alert.tenant);
        targets
            .into_iter()
            .map(|(t, set_by)| {
                let id = new_id("a", now);
                let body = Alert {
                    id: id.clone(),
                    ..alert.clone()
                };
                OutboxAlert {
                    id,
                    tenant: alert.tenant.clone(),
                    url: t.webhook,
                    admin: set_by == SetBy::Admin,
                    // An `Alert` is plain strings and numbers: it always
                    // serialises.
                    body: serde_json::to_value(&body).unwrap_or_default(),
                    status: AlertStatus::Pending,
                    attempts: 0,
                    next_try: now,
                    created_at: now,
                    last_error: None,
                }
            })
            .collect()
    }

    /// A run ended: alerts `failed` for a failed run.
    #[must_use = "the alerts are stored with the change that raised them"]
    pub fn run_ended(&self, run: &RunRecord, spec: &TaskSpec, now: Millis) -> Vec<OutboxAlert> {
        if run.status != RunStatus::Failed {
            return Vec::new();
        }
        let targets = self.targets(&run.tenant, spec, AlertOn::Failed);
        if targets.is_empty() {
            return Vec::new();
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
        self.send(targets, alert("run_failed", run, now, reason, text), now)
    }

    /// A step was dead-lettered.
    #[must_use = "the alerts are stored with the change that raised them"]
    pub fn dead_letter(
        &self,
        run: &RunRecord,
        spec: &TaskSpec,
        dead: &DeadLetter,
    ) -> Vec<OutboxAlert> {
        let targets = self.targets(&run.tenant, spec, AlertOn::DeadLetter);
        if targets.is_empty() {
            return Vec::new();
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
        self.send(targets, a, dead.created_at)
    }

    /// A timed run's first attempt started `late_ms` after its instant.
    #[must_use = "the alerts are stored with the change that raised them"]
    pub fn started_late(
        &self,
        run: &RunRecord,
        spec: &TaskSpec,
        late_ms: i64,
        now: Millis,
    ) -> Vec<OutboxAlert> {
        let mut targets = self.targets(&run.tenant, spec, AlertOn::Late);
        targets.retain(|(a, _)| late_ms > a.late_after().as_millis() as i64);
        if targets.is_empty() {
            return Vec::new();
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
        self.send(targets, a, now)
    }
}

fn alert(kind: &str, run: &RunRecord, at: Millis, reason: Option<String>, text: String) -> Alert {
    Alert {
        id: String::new(),
        kind: kind.into(),
        tenant: run.tenant.clone().into(),
        task: run.task.clone().into(),
        run_id: run.id.clone().into(),
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

fn deliver(
    timeout: Duration,
    dest: Destination,
    pattern: HttpPattern,
    a: &OutboxAlert,
) -> Delivery {
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
        .post(&a.url)
        .header("content-type", "application/json")
        .header("user-agent", concat!("ax/", env!("CARGO_PKG_VERSION")))
        .send(serde_json::to_vec(&a.body).unwrap_or_default());
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
    fn grant(&self, a: &OutboxAlert) -> Result<(Destination, HttpPattern), String> {
        if a.admin {
            return grant(&a.url, None);
        }
        let listed = self
            .registry
            .tenant(&a.tenant)
            .map(|t| t.allow_http)
            .unwrap_or_default();
        let ceiling = allow::parse_list(&listed).unwrap_or_default();
        grant(&a.url, Some(&ceiling))
    }

    fn touch(&self, tenant: &str) {
        let mut touched = self.touched.lock().unwrap_or_else(PoisonError::into_inner);
        if !touched.contains(tenant) {
            touched.insert(tenant.to_string());
        }
    }

    /// Applies the per-tenant `queue` cap to the tenants that got new
    /// pending alerts (oldest dropped, counted).
    fn cap_pending(&self, store: &dyn Store) -> crate::store::Result<()> {
        let touched =
            std::mem::take(&mut *self.touched.lock().unwrap_or_else(PoisonError::into_inner));
        let keep = self.config.queue.max(1);
        for tenant in touched {
            let dropped = store.trim_alerts(&tenant, AlertStatus::Pending, keep)?;
            if dropped > 0 {
                tracing::warn!(%tenant, dropped, keep, "alert outbox full: oldest pending alerts dropped");
                self.stats
                    .dropped
                    .fetch_add(dropped as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// The record of `a` after one try that went `outcome` at `now`.
    fn settle(&self, mut a: OutboxAlert, outcome: Delivery, now: Millis) -> OutboxAlert {
        a.attempts += 1;
        a.next_try = now;
        let stats = &self.stats;
        let kind = a
            .body
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        let run = a
            .body
            .get("run_id")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        match outcome {
            Delivery::Sent => {
                stats.sent.fetch_add(1, Ordering::Relaxed);
                a.status = AlertStatus::Delivered;
                a.last_error = None;
            }
            Delivery::Retry(why) if a.attempts < self.config.max_attempts => {
                let backoff = backoff(&self.config, a.attempts);
                tracing::info!(url = %a.url, alert = %a.id, %kind, %run, attempt = a.attempts, %why,
                    retry_in_ms = backoff.as_millis() as u64, "alert not delivered; retrying");
                stats.retries.fetch_add(1, Ordering::Relaxed);
                a.next_try = now.saturating_add(backoff.as_millis() as Millis);
                a.last_error = Some(why);
            }
            Delivery::Denied(why) => {
                tracing::warn!(url = %a.url, alert = %a.id, tenant = %a.tenant, %kind, %run, %why,
                    "alert refused: the webhook may not be reached");
                stats.denied.fetch_add(1, Ordering::Relaxed);
                a.status = AlertStatus::Dead;
                a.last_error = Some(format!("refused: {why}"));
            }
            Delivery::Retry(why) | Delivery::GiveUp(why) => {
                tracing::warn!(url = %a.url, alert = %a.id, %kind, %run, attempts = a.attempts, %why,
                    "alert given up");
                stats.failed.fetch_add(1, Ordering::Relaxed);
                a.status = AlertStatus::Dead;
                a.last_error = Some(why);
            }
        }
        a
    }

    /// One pass: caps, then delivers the alerts due now, recording each
    /// try. Returns when the next alert is due (`None`: none pending).
    async fn pass(
        &self,
        store: &Arc<dyn Store>,
        shutdown: &CancellationToken,
    ) -> crate::store::Result<Option<Millis>> {
        self.cap_pending(store.as_ref())?;
        loop {
            let now = self.clock.now_ms();
            // Delivered under the outbox's lease, renewed at every batch:
            // one process delivers (docs/ARCHITECTURE.md, *Several writers*).
            let hold = self
                .config
                .timeout
                .saturating_mul(BATCH as u32)
                .saturating_add(Duration::from_secs(60));
            if !super::lease::hold(store.as_ref(), ALERTS_LEASE, now, hold)? {
                return Ok(Some(now.saturating_add(IDLE_POLL.as_millis() as Millis)));
            }
            let due = store.due_alerts(now, BATCH)?;
            if due.is_empty() {
                return Ok(store
                    .due_alerts(Millis::MAX, 1)?
                    .first()
                    .map(|a| a.next_try));
            }
            let mut settled_tenants = HashSet::new();
            for a in due {
                if shutdown.is_cancelled() {
                    return Ok(None);
                }
                let timeout = self.config.timeout;
                let granted = self.grant(&a);
                let done = tokio::task::spawn_blocking(move || {
                    let d = match granted {
                        Ok((dest, pattern)) => deliver(timeout, dest, pattern, &a),
                        Err(why) => Delivery::Denied(why),
                    };
                    (d, a)
                })
                .await;
                let (outcome, a) = match done {
                    Ok(done) => done,
                    Err(e) => {
                        // The alert stays pending and is tried again.
                        tracing::warn!(error = %e, "alert delivery panicked");
                        return Ok(Some(self.clock.now_ms()));
                    }
                };
                let a = self.settle(a, outcome, self.clock.now_ms());
                if a.status != AlertStatus::Pending {
                    settled_tenants.insert((a.tenant.clone(), a.status));
                }
                store.put_alerts(std::slice::from_ref(&a))?;
            }
            for (tenant, status) in settled_tenants {
                let keep = if status == AlertStatus::Dead {
                    KEEP_DEAD
                } else {
                    KEEP_DELIVERED
                };
                store.trim_alerts(&tenant, status, keep)?;
            }
            self.cap_pending(store.as_ref())?;
        }
    }
}

/// The lease the outbox is delivered under ([`super::lease`]), taken for
/// each batch for longer than the batch's deliveries can take (each is
/// bounded by the delivery timeout) and renewed by the next.
pub const ALERTS_LEASE: &str = "alerts";

async fn worker(inner: Arc<Inner>, shutdown: CancellationToken) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    loop {
        let wait = match inner.pass(&store, &shutdown).await {
            Ok(Some(next)) => {
                let ms = next.saturating_sub(inner.clock.now_ms()).max(0) as u64;
                Duration::from_millis(ms).min(IDLE_POLL)
            }
            Ok(None) => IDLE_POLL,
            Err(e) => {
                tracing::error!(error = %e, retry_in = ?STORE_RETRY, "the alert outbox cannot be read or written; retrying");
                STORE_RETRY
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = inner.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    super::lease::release(store.as_ref(), ALERTS_LEASE, inner.clock.now_ms());
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

/// Alerts a scheduler without webhooks raises nowhere: a handle without
/// an outbox, whose worker is never started and whose every method returns
/// at once with nothing.
impl Default for Alerter {
    fn default() -> Self {
        Self::new(
            AlertsConfig::default(),
            Registry::default(),
            None,
            Arc::new(crate::scheduler::SystemClock),
        )
    }
}

#[cfg(test)]
mod tests;
