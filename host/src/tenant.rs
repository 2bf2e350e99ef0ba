//! Tenants (SPEC §6): who owns what, what each may spend, and who may act for
//! it. Plain data plus the pure rules around it — token format, quota
//! validation, fuel windows, usage buckets. The live registry that the API
//! authenticates against is [`Registry`]; the scheduler enforces quotas.
//!
//! Its layer sits just above `task` (`scripts/layers`): a tenant record holds
//! an `alerts:` spec, which is a task spec, so these records cannot live in
//! `model` below it. The store, the scheduler and the API name them from here.
//!
//! # Decisions
//! - **Tokens** are `axt_<id>_<secret>`: a 12-hex-digit id and 256 random bits
//!   of secret. The host keeps `sha256(secret)` only. A request's token is
//!   found by its id in memory, then its digest compared in constant time: a
//!   fast hash is right for a high-entropy secret (a slow password hash on
//!   every request would only cost CPU), and the id lookup never depends on
//!   the secret.
//! - **Fuel windows** are whole hours, aligned to the Unix epoch (UTC): `1d`
//!   resets at 00:00 UTC, `1h` on the hour. Usage is kept in hourly buckets
//!   per (tenant, task), so the fuel used in the current window is exactly
//!   recomputable after a restart, and any date range can be reported.
//! - **`default`** always exists (created at first start, no limits), so a
//!   single-team ax needs no tenant set-up. Any other tenant must be created
//!   by the admin before it can be acted on: an admin header naming an
//!   unknown tenant answers 404 rather than growing orphan objects.
//! - Every quota field is optional; absent means "no tenant limit" (the host
//!   caps still apply), except two fairness defaults for every tenant but
//!   `default`: a priority ceiling below the reserved high-priority share
//!   ([`DEFAULT_MAX_PRIORITY`]) and a running cap of half the slots
//!   ([`default_max_running`]). Without them one tenant could take every
//!   slot, the reserved ones included, by asking for priority 9.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::model::{Caps, Millis, Outcome};

/// The tenant that always exists.
pub const DEFAULT_TENANT: &str = "default";
/// One hour, the unit of fuel windows and usage buckets (ms).
pub const HOUR_MS: Millis = 3_600_000;
/// Default fuel window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Longest fuel window accepted.
pub const MAX_WINDOW: Duration = Duration::from_secs(31 * 24 * 3600);
/// Most tokens one tenant may hold (revoked ones included).
pub const MAX_TOKENS_PER_TENANT: usize = 100;
/// Run data a tenant may keep when its quota says nothing (`run_bytes`):
/// 1 GiB, some hundreds of thousands of ordinary runs. Every tenant has
/// it, `default` included: the disk is shared (docs/TENANTS.md, *Storage*).
pub const DEFAULT_RUN_BYTES: u64 = 1 << 30;
/// The largest run input when the quota says nothing (`max_input_bytes`):
/// 64 KiB of JSON, as GitHub caps a workflow dispatch's inputs. A run's
/// input is parameters, not a payload: larger data belongs in the plugin's
/// own storage, named by the input.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 << 10;
/// Longest usage report, in hourly buckets (a bit over a year).
pub const MAX_USAGE_HOURS: i64 = 400 * 24;
pub use crate::model::priority::{DEFAULT_MAX_PRIORITY, MAX_PRIORITY};

/// Compares two digests in time independent of where they differ, so the
/// answer time says nothing about how close a guess was.
pub fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// What happens to a run of a tenant whose fuel for the window is used up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutOfFuel {
    /// Accept it, keep it `queued` (reason visible) until the window resets.
    #[default]
    Hold,
    /// Refuse triggers with 429 until the window resets; fires are recorded
    /// as cancelled with the reason.
    Refuse,
}

/// What a tenant may use. Absent fields: no tenant limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Quota {
    /// Fuel all attempts together may consume per window.
    pub fuel_per_window: Option<u64>,
    /// The fuel window: whole hours, aligned to the Unix epoch.
    #[serde(with = "duration_text")]
    #[schema(value_type = String, example = "24h")]
    pub window: Duration,
    /// Wall-clock time (ms) all attempts together may take per window, time
    /// blocked in host calls included: what an attempt holding a slot costs
    /// the others, whatever fuel it burns.
    pub wall_ms_per_window: Option<u64>,
    /// Most fuel one attempt may get.
    pub max_fuel_per_attempt: Option<u64>,
    /// Most linear memory one attempt may get, in MiB.
    pub max_memory_mb: Option<u64>,
    /// Longest wall-clock timeout of one attempt.
    #[serde(with = "opt_duration_text", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "5m")]
    pub max_timeout: Option<Duration>,
    /// Attempts of this tenant running at once (absent: the host default,
    /// [`TenantRecord::max_running`]).
    pub max_concurrent_attempts: Option<u32>,
    /// Highest priority its runs may have (0-9; absent: [`DEFAULT_MAX_PRIORITY`],
    /// see [`TenantRecord::max_priority`]).
    pub max_priority: Option<u8>,
    /// Runs of this tenant waiting to start.
    pub max_queued_runs: Option<u32>,
    /// Manual triggers per second (token bucket, bursts of one second's worth).
    pub trigger_rate_per_sec: Option<f64>,
    /// Hold or refuse runs once the window's fuel is used.
    pub out_of_fuel: OutOfFuel,
    /// Share of the host under contention, relative to other tenants (1-100).
    pub weight: u32,
    /// Bytes of key-value data the tenant may keep.
    pub kv_bytes: Option<u64>,

    // Plugin storage (absent: the host's `plugin_quota_count` / `plugin_quota_mb`).
    /// Plugin versions the tenant may keep (absent: the host default, 100).
    pub max_plugins: Option<u32>,
    /// Bytes of plugin versions (the sum of their sizes) the tenant may keep
    /// (absent: the host default, 512 MiB).
    pub plugin_bytes: Option<u64>,

    // Run data (absent: [`DEFAULT_RUN_BYTES`], [`DEFAULT_MAX_INPUT_BYTES`]).
    /// Bytes of run data (records, events, logs, attempt records of queued
    /// and kept runs) the tenant may keep (absent: 1 GiB).
    pub run_bytes: Option<u64>,
    /// Largest input of one run, in bytes of JSON, params included (absent:
    /// 64 KiB).
    pub max_input_bytes: Option<u64>,
}

impl Default for Quota {
    fn default() -> Self {
        Self {
            fuel_per_window: None,
            window: DEFAULT_WINDOW,
            wall_ms_per_window: None,
            max_fuel_per_attempt: None,
            max_memory_mb: None,
            max_timeout: None,
            max_concurrent_attempts: None,
            max_priority: None,
            max_queued_runs: None,
            trigger_rate_per_sec: None,
            out_of_fuel: OutOfFuel::Hold,
            weight: 1,
            kv_bytes: None,
            max_plugins: None,
            plugin_bytes: None,
            run_bytes: None,
            max_input_bytes: None,
        }
    }
}

impl Quota {
    /// The host's caps lowered by this quota's per-attempt limits: what a
    /// step of this tenant may ask for on save and gets at most at a start.
    pub fn caps(&self, host: &Caps) -> Caps {
        host.cut(
            self.max_fuel_per_attempt,
            self.max_memory_mb,
            self.max_timeout,
        )
    }

    /// Bytes of run data the tenant may keep: its `run_bytes`, or
    /// [`DEFAULT_RUN_BYTES`].
    pub fn run_bytes_limit(&self) -> u64 {
        self.run_bytes.unwrap_or(DEFAULT_RUN_BYTES)
    }

    /// The largest input of one run: its `max_input_bytes`, or
    /// [`DEFAULT_MAX_INPUT_BYTES`].
    pub fn input_bytes_limit(&self) -> u64 {
        self.max_input_bytes.unwrap_or(DEFAULT_MAX_INPUT_BYTES)
    }

    /// Checks the values; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let ms = self.window.as_millis();
        if ms == 0 || !ms.is_multiple_of(HOUR_MS as u128) || self.window > MAX_WINDOW {
            return Err(format!(
                "window: `{}` must be a whole number of hours from 1h to 31d",
                humantime::format_duration(self.window)
            ));
        }
        if self.weight == 0 || self.weight > 100 {
            return Err(format!("weight: {} is not in 1..=100", self.weight));
        }
        if let Some(r) = self.trigger_rate_per_sec
            && !(r.is_finite() && r > 0.0)
        {
            return Err(format!(
                "trigger_rate_per_sec: {r} must be a positive number"
            ));
        }
        let zero = [
            ("max_fuel_per_attempt", self.max_fuel_per_attempt),
            ("max_memory_mb", self.max_memory_mb),
            (
                "max_concurrent_attempts",
                self.max_concurrent_attempts.map(u64::from),
            ),
        ];
        if let Some((field, _)) = zero.iter().find(|(_, v)| *v == Some(0)) {
            return Err(format!("{field}: must be at least 1"));
        }
        if self.max_timeout == Some(Duration::ZERO) {
            return Err("max_timeout: must be longer than 0s".into());
        }
        if self.run_bytes == Some(0) {
            return Err("run_bytes: must be at least 1".into());
        }
        if self.max_input_bytes == Some(0) {
            return Err("max_input_bytes: must be at least 1".into());
        }
        if self.wall_ms_per_window == Some(0) {
            return Err("wall_ms_per_window: must be at least 1".into());
        }
        if let Some(p) = self.max_priority
            && p > MAX_PRIORITY
        {
            return Err(format!("max_priority: {p} is not in 0..={MAX_PRIORITY}"));
        }
        Ok(())
    }

    /// The window's length in ms.
    pub fn window_ms(&self) -> Millis {
        self.window.as_millis() as Millis
    }

    /// The start of the window holding `now`.
    pub fn window_start(&self, now: Millis) -> Millis {
        let w = self.window_ms().max(HOUR_MS);
        now.div_euclid(w) * w
    }
}

/// A tenant as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Name (`[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`).
    pub name: String,
    /// A note for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// What it may use.
    pub quota: Quota,
    /// Outbound HTTP destinations its steps may be granted (the ceiling).
    #[serde(default)]
    pub allow_http: Vec<String>,
    /// A disabled tenant's tokens are refused (403), its triggers refused and
    /// its fires skipped; its queued runs wait.
    pub disabled: bool,
    /// Webhook alerts for every task of the tenant (`crate::task::alerts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alerts: Option<crate::task::alerts::AlertSpec>,
    /// When created (ms).
    pub created_at: Millis,
    /// When last changed (ms).
    pub updated_at: Millis,
}

impl TenantRecord {
    /// Whether the host's fairness defaults apply to this tenant: every
    /// tenant but `default`, the host owner's own (the admin token acts on it
    /// without a tenant header, and a one-team ax runs everything there), so
    /// such an install keeps every slot and priority. An explicit quota
    /// field applies to `default` as to any tenant.
    pub fn shares_the_host(&self) -> bool {
        self.name != DEFAULT_TENANT
    }

    /// Highest priority this tenant's runs may have: `quota.max_priority`,
    /// else [`DEFAULT_MAX_PRIORITY`] ([`MAX_PRIORITY`] for `default`).
    pub fn max_priority(&self) -> u8 {
        self.quota
            .max_priority
            .unwrap_or(if self.shares_the_host() {
                DEFAULT_MAX_PRIORITY
            } else {
                MAX_PRIORITY
            })
    }

    /// The one priority rule, for every place a priority is asked for (a
    /// task saved, a trigger's override): above the ceiling is refused, with
    /// the ceiling and who sets it named. (A task saved before its ceiling
    /// was lowered is queued at the ceiling: `scheduler::queue`.)
    pub fn check_priority(&self, priority: u8) -> Result<(), String> {
        let ceiling = self.max_priority();
        if priority > ceiling {
            return Err(format!(
                "{priority} is above the priority ceiling of tenant `{}` ({ceiling}; the admin sets it as quota `max_priority`)",
                self.name
            ));
        }
        Ok(())
    }

    /// Attempts this tenant may have running at once on a host with
    /// `slots` (`None`: only the host's limits): `quota.max_concurrent_attempts`,
    /// else [`default_max_running`] of the slots (no cap for `default`).
    pub fn max_running(&self, slots: usize) -> Option<usize> {
        match self.quota.max_concurrent_attempts {
            Some(n) => Some(n as usize),
            None if self.shares_the_host() => Some(default_max_running(slots)),
            None => None,
        }
    }

    /// A new tenant with `quota`.
    pub fn new(name: &str, quota: Quota, now: Millis) -> Self {
        Self {
            name: name.to_string(),
            description: None,
            quota,
            allow_http: Vec::new(),
            disabled: false,
            alerts: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// The running cap of a tenant without one of its own: half the host's
/// slots (at least one). However long its attempts block, the other half
/// (the reserved high-priority share and, from three slots up, at least one
/// normal slot) stays free for everyone else. Not "all slots while alone": a
/// tenant that fills an idle host with hour-long sleeps would hold them when
/// the next tenant arrives, which is the attack this cap is for.
pub fn default_max_running(slots: usize) -> usize {
    (slots / 2).max(1)
}

/// A tenant token as stored: never the token itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Public id (the middle part of the token).
    pub id: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// A note for people ("ci", "alice's laptop").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// sha256 of the secret part, hex.
    pub secret_sha256: String,
    /// When created (ms).
    pub created_at: Millis,
    /// When revoked (ms); a revoked token is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Millis>,
}

/// A new token: (the text to show once, the record to keep).
pub fn new_token(tenant: &str, label: Option<String>, now: Millis) -> (String, TokenRecord) {
    let id = hex::encode(rand::random::<[u8; 6]>());
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let text = format!("axt_{id}_{secret}");
    let record = TokenRecord {
        id,
        tenant: tenant.to_string(),
        label,
        secret_sha256: hex::encode(Sha256::digest(secret.as_bytes())),
        created_at: now,
        revoked_at: None,
    };
    (text, record)
}

/// Splits a tenant token into (id, secret); `None` for anything else.
pub fn parse_token(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("axt_")?;
    let (id, secret) = rest.split_once('_')?;
    (id.len() == 12 && secret.len() == 64).then_some((id, secret))
}

/// Usage of one task in one hour.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageBucket {
    /// Tenant.
    pub tenant: String,
    /// Task.
    pub task: String,
    /// Start of the hour (ms).
    pub hour: Millis,
    /// Fuel consumed.
    pub fuel: u64,
    /// Attempts finished.
    pub attempts: u64,
    /// Wall time of those attempts (ms).
    pub wall_ms: f64,
    /// Attempts by outcome.
    pub outcomes: BTreeMap<String, u64>,
}

impl UsageBucket {
    /// Adds `other`'s counts to this bucket.
    pub fn add(&mut self, other: &UsageBucket) {
        self.fuel = self.fuel.saturating_add(other.fuel);
        self.attempts += other.attempts;
        self.wall_ms += other.wall_ms;
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
    }

    /// One finished attempt's usage.
    pub fn attempt(
        tenant: &str,
        task: &str,
        at: Millis,
        fuel: u64,
        wall_ms: f64,
        outcome: Outcome,
    ) -> Self {
        Self {
            tenant: tenant.to_string(),
            task: task.to_string(),
            hour: at.div_euclid(HOUR_MS) * HOUR_MS,
            fuel,
            attempts: 1,
            wall_ms,
            outcomes: BTreeMap::from([(outcome.to_string(), 1)]),
        }
    }
}

/// The tenants and tokens the API authenticates against, kept in memory
/// (loaded at start, changed only through the service, which writes the
/// store first). Cheap to clone.
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<RwLock<RegistryState>>,
}

#[derive(Default)]
struct RegistryState {
    tenants: HashMap<String, TenantRecord>,
    tokens: HashMap<String, TokenRecord>,
}

/// Who a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// A valid token of this tenant.
    Tenant(String),
    /// A tenant token whose tenant is disabled.
    Disabled(String),
    /// Not a (live) tenant token.
    Invalid,
}

impl Registry {
    /// A registry holding `tenants` and `tokens`.
    pub fn new(tenants: Vec<TenantRecord>, tokens: Vec<TokenRecord>) -> Self {
        let state = RegistryState {
            tenants: tenants.into_iter().map(|t| (t.name.clone(), t)).collect(),
            tokens: tokens.into_iter().map(|t| (t.id.clone(), t)).collect(),
        };
        Self {
            inner: Arc::new(RwLock::new(state)),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RegistryState> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, RegistryState> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks a tenant token (`axt_…`).
    pub fn check_token(&self, id: &str, secret: &str) -> TokenCheck {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let state = self.read();
        let Some(token) = state.tokens.get(id) else {
            return TokenCheck::Invalid;
        };
        let mut stored = [0u8; 32];
        if hex::decode_to_slice(&token.secret_sha256, &mut stored).is_err()
            || !constant_time_eq(&digest, &stored)
            || token.revoked_at.is_some()
        {
            return TokenCheck::Invalid;
        }
        match state.tenants.get(&token.tenant) {
            Some(t) if !t.disabled => TokenCheck::Tenant(t.name.clone()),
            Some(t) => TokenCheck::Disabled(t.name.clone()),
            None => TokenCheck::Invalid,
        }
    }

    /// One tenant.
    pub fn tenant(&self, name: &str) -> Option<TenantRecord> {
        self.read().tenants.get(name).cloned()
    }

    /// Whether a tenant exists.
    pub fn exists(&self, name: &str) -> bool {
        self.read().tenants.contains_key(name)
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> Vec<TenantRecord> {
        let mut all: Vec<_> = self.read().tenants.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// A tenant's tokens, oldest first.
    pub fn tokens(&self, tenant: &str) -> Vec<TokenRecord> {
        let mut all: Vec<_> = self
            .read()
            .tokens
            .values()
            .filter(|t| t.tenant == tenant)
            .cloned()
            .collect();
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        all
    }

    /// Records a stored tenant.
    pub fn put_tenant(&self, tenant: TenantRecord) {
        self.write().tenants.insert(tenant.name.clone(), tenant);
    }

    /// Records a stored token.
    pub fn put_token(&self, token: TokenRecord) {
        self.write().tokens.insert(token.id.clone(), token);
    }
}

/// Durations as humantime text (`1d`, `30s`).
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(text.trim()).map_err(serde::de::Error::custom)
    }
}

mod opt_duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| humantime::parse_duration(t.trim()).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_check() {
        let (text, record) = new_token("acme", None, 1);
        let (id, secret) = parse_token(&text).expect("parses");
        assert_eq!(id, record.id);
        let tenant = TenantRecord::new("acme", Quota::default(), 1);
        let registry = Registry::new(vec![tenant.clone()], vec![record.clone()]);
        assert_eq!(
            registry.check_token(id, secret),
            TokenCheck::Tenant("acme".into())
        );
        let mut wrong = secret.to_string();
        wrong.replace_range(0..1, if secret.starts_with('0') { "1" } else { "0" });
        assert_eq!(registry.check_token(id, &wrong), TokenCheck::Invalid);
        assert_eq!(
            registry.check_token("000000000000", secret),
            TokenCheck::Invalid
        );
        registry.put_tenant(TenantRecord {
            disabled: true,
            ..tenant
        });
        assert_eq!(
            registry.check_token(id, secret),
            TokenCheck::Disabled("acme".into())
        );
        registry.put_token(TokenRecord {
            revoked_at: Some(2),
            ..record
        });
        assert_eq!(registry.check_token(id, secret), TokenCheck::Invalid);
    }

    #[test]
    fn only_well_formed_tenant_tokens_parse() {
        assert!(parse_token("secret").is_none());
        assert!(parse_token("axt_abc_def").is_none());
        assert!(parse_token(&format!("axt_{}_{}", "a".repeat(12), "b".repeat(63))).is_none());
        assert!(parse_token(&format!("axt_{}_{}", "a".repeat(12), "b".repeat(64))).is_some());
    }

    #[test]
    fn quotas_are_validated_with_the_field_named() {
        assert!(Quota::default().validate().is_ok());
        let bad = |q: Quota| q.validate().unwrap_err();
        assert!(
            bad(Quota {
                window: Duration::from_secs(90 * 60),
                ..Quota::default()
            })
            .starts_with("window:")
        );
        assert!(
            bad(Quota {
                weight: 0,
                ..Quota::default()
            })
            .starts_with("weight:")
        );
        assert!(
            bad(Quota {
                trigger_rate_per_sec: Some(f64::NAN),
                ..Quota::default()
            })
            .starts_with("trigger_rate_per_sec:")
        );
        assert!(
            bad(Quota {
                max_concurrent_attempts: Some(0),
                ..Quota::default()
            })
            .starts_with("max_concurrent_attempts:")
        );
        assert!(
            bad(Quota {
                max_priority: Some(10),
                ..Quota::default()
            })
            .starts_with("max_priority:")
        );
        assert!(
            bad(Quota {
                wall_ms_per_window: Some(0),
                ..Quota::default()
            })
            .starts_with("wall_ms_per_window:")
        );
    }

    #[test]
    fn quota_json_uses_duration_text_and_refuses_unknown_fields() {
        let q: Quota =
            serde_json::from_str(r#"{"fuel_per_window": 5, "window": "1h", "max_timeout": "10s"}"#)
                .expect("parses");
        assert_eq!(q.window, Duration::from_secs(3600));
        assert_eq!(q.max_timeout, Some(Duration::from_secs(10)));
        let back = serde_json::to_value(&q).expect("serializes");
        assert_eq!(back["window"], "1h");
        assert!(serde_json::from_str::<Quota>(r#"{"fuel": 5}"#).is_err());
    }

    #[test]
    fn windows_align_to_the_epoch() {
        let day = Quota::default();
        let t = 1_700_000_123_456;
        let start = day.window_start(t);
        assert_eq!(start % (24 * HOUR_MS), 0);
        assert!(start <= t && t < start + 24 * HOUR_MS);
        let hour = Quota {
            window: Duration::from_secs(3600),
            ..Quota::default()
        };
        assert_eq!(hour.window_start(t) % HOUR_MS, 0);
    }

    #[test]
    fn usage_buckets_add_up() {
        let mut a = UsageBucket::attempt("t", "job", 5 * HOUR_MS + 7, 10, 1.5, Outcome::Succeeded);
        assert_eq!(a.hour, 5 * HOUR_MS);
        a.add(&UsageBucket::attempt(
            "t",
            "job",
            5 * HOUR_MS,
            5,
            0.5,
            Outcome::Failed,
        ));
        assert_eq!((a.fuel, a.attempts, a.wall_ms), (15, 2, 2.0));
        assert_eq!(a.outcomes["succeeded"], 1);
        assert_eq!(a.outcomes["failed"], 1);
    }
}
