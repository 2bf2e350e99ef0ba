//! Tenant administration (SPEC §6): create, change quotas, disable, tokens,
//! usage reports. The store is written first, then the in-memory registry
//! the API authenticates against, then the scheduler (so a quota change
//! applies to the next attempts without a restart).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Ax, Error, Result};
use crate::model::Millis;
use crate::store::Store;
use crate::task::Caps;
use crate::tenant::{
    DEFAULT_TENANT, HOUR_MS, MAX_TOKENS_PER_TENANT, MAX_USAGE_HOURS, Quota, Registry, TenantRecord,
    TokenRecord, UsageBucket, new_token,
};

/// Longest tenant description accepted.
const MAX_DESCRIPTION: usize = 1024;
/// Longest token label accepted.
const MAX_LABEL: usize = 128;

/// Loads the registry, creating the `default` tenant on first start.
pub fn load_registry(store: &dyn Store, now: Millis) -> Result<Registry> {
    let mut tenants = store.list_tenants()?;
    if !tenants.iter().any(|t| t.name == DEFAULT_TENANT) {
        let default = TenantRecord::new(DEFAULT_TENANT, Quota::default(), now);
        store.put_tenant(&default)?;
        tenants.push(default);
    }
    Ok(Registry::new(tenants, store.list_tokens()?))
}

/// Usage counters summed over some buckets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct UsageTotals {
    /// Fuel consumed.
    pub fuel: u64,
    /// Attempts finished.
    pub attempts: u64,
    /// Their wall time (ms).
    pub wall_ms: f64,
    /// Attempts by outcome.
    pub outcomes: BTreeMap<String, u64>,
}

impl UsageTotals {
    fn add(&mut self, b: &UsageBucket) {
        self.fuel = self.fuel.saturating_add(b.fuel);
        self.attempts += b.attempts;
        self.wall_ms += b.wall_ms;
        for (k, v) in &b.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
    }
}

/// A usage report over `[from, to)`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct UsageReport {
    /// Tenant.
    pub tenant: String,
    /// Start (inclusive, rounded down to the hour).
    pub from: DateTime<Utc>,
    /// End (exclusive, rounded up to the hour).
    pub to: DateTime<Utc>,
    /// Everything in the range.
    pub total: UsageTotals,
    /// Per task, by name.
    pub by_task: BTreeMap<String, UsageTotals>,
    /// Per UTC day (`YYYY-MM-DD`).
    pub by_day: BTreeMap<String, UsageTotals>,
    /// The current fuel window: its start, end, the budget and what is used.
    pub window: WindowUsage,
    /// What the tenant keeps now, against its storage quotas.
    pub storage: StorageUsage,
}

/// What a tenant keeps now (not over the report's range) against its
/// storage quotas: run data, plugins, key-value data (docs/TENANTS.md,
/// *Storage*).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct StorageUsage {
    /// Bytes of run data kept: records, events, logs and attempt records of
    /// queued, running and kept runs (counted as they are written and
    /// deleted by retention).
    pub run_bytes: u64,
    /// The `run_bytes` quota in force.
    pub run_bytes_quota: u64,
    /// The largest input of one run (`max_input_bytes` in force).
    pub max_input_bytes: u64,
    /// Plugin versions kept.
    pub plugins: u64,
    /// The `max_plugins` quota in force.
    pub max_plugins: u32,
    /// Bytes of plugin versions kept.
    pub plugin_bytes: u64,
    /// The `plugin_bytes` quota in force.
    pub plugin_bytes_quota: u64,
    /// Bytes of key-value data kept by the tenant's plugins.
    pub kv_bytes: u64,
    /// The tenant's `kv_bytes` quota (`None`: the host's `kv_quota_kb`).
    pub kv_bytes_quota: Option<u64>,
}

/// Fuel and wall time in the current window.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct WindowUsage {
    /// Window start.
    pub start: DateTime<Utc>,
    /// Window end.
    pub end: DateTime<Utc>,
    /// The budget (`None`: no limit).
    pub fuel_budget: Option<u64>,
    /// Fuel consumed by attempts finished in the window (written behind,
    /// so up to a fraction of a second late).
    pub fuel_used: u64,
    /// The wall-time budget, ms (`None`: no limit).
    pub wall_ms_budget: Option<u64>,
    /// Wall time of the attempts finished in the window, ms (written behind).
    pub wall_ms_used: f64,
    /// Why the tenant's runs are held now, if they are.
    pub held: Option<String>,
}

/// What an admin may set when creating or changing a tenant.
#[derive(Clone, Debug, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Name (create only; must match the path on change).
    #[serde(default)]
    pub name: Option<String>,
    /// A note for people.
    #[serde(default)]
    pub description: Option<String>,
    /// Quota (default: no limits).
    #[serde(default)]
    pub quota: Option<Quota>,
    /// Outbound HTTP ceiling.
    #[serde(default)]
    pub allow_http: Option<Vec<String>>,
    /// Webhook alerts for every task of the tenant (docs/TASKS.md, *Alerts*).
    #[serde(default)]
    pub alerts: Option<crate::task::alerts::AlertSpec>,
}

fn ms_to_utc(ms: Millis) -> DateTime<Utc> {
    crate::scheduler::clock::from_ms(ms)
}

impl Ax {
    /// The tenant an admin request acts on must exist.
    pub fn tenant_exists(&self, name: &str) -> bool {
        self.tenants.exists(name)
    }

    /// Per-attempt caps for `tenant`: the host caps cut by the tenant's quota.
    pub fn caps_for(&self, tenant: &str) -> Caps {
        self.tenants
            .tenant(tenant)
            .map_or_else(|| self.caps.clone(), |t| t.quota.caps(&self.caps))
    }

    /// A priority asked for by `tenant` (a task's, a trigger's override)
    /// must be within its ceiling ([`TenantRecord::check_priority`]): `422`
    /// at `priority`, and nothing changes.
    pub fn check_priority(&self, tenant: &str, priority: u8) -> Result<()> {
        match self.tenants.tenant(tenant) {
            Some(record) => record.check_priority(priority).map_err(|m| Error::Invalid {
                path: Some("priority".into()),
                message: m,
            }),
            None => Ok(()),
        }
    }

    async fn check_spec(spec: &TenantSpec) -> Result<()> {
        if let Some(d) = &spec.description
            && d.len() > MAX_DESCRIPTION
        {
            return Err(Error::Invalid {
                path: Some("description".into()),
                message: format!("longer than {MAX_DESCRIPTION} bytes"),
            });
        }
        if let Some(q) = &spec.quota {
            q.validate().map_err(|m| Error::Invalid {
                path: Some("quota".into()),
                message: m,
            })?;
        }
        if let Some(alerts) = &spec.alerts {
            alerts.validate("alerts").map_err(|e| Error::Invalid {
                path: Some(e.path),
                message: e.message,
            })?;
        }
        if let Some(alerts) = &spec.alerts {
            // The admin's own webhook grants itself; the address rules apply.
            crate::scheduler::alerts::check_webhook(alerts, None)
                .await
                .map_err(|message| Error::Invalid {
                    path: Some("alerts.webhook".into()),
                    message,
                })?;
        }
        if let Some(list) = &spec.allow_http {
            // The grammar of docs/CAPABILITIES.md; the error names the pattern.
            crate::capability::http::parse_list(list).map_err(|(i, message)| Error::Invalid {
                path: Some(format!("allow_http[{i}]")),
                message,
            })?;
        }
        Ok(())
    }

    async fn store_tenant(&self, record: TenantRecord) -> Result<TenantRecord> {
        self.store.put_tenant(&record)?;
        self.sync().await?;
        self.tenants.put_tenant(record.clone());
        self.scheduler
            .stats()
            .alerts
            .set_tenant(&record.name, record.alerts.clone());
        self.scheduler.tenant_changed(record.clone()).await?;
        Ok(record)
    }

    fn tenant_record(&self, name: &str) -> Result<TenantRecord> {
        self.tenants
            .tenant(name)
            .ok_or_else(|| Error::NotFound(format!("tenant `{name}`")))
    }

    /// Creates a tenant.
    pub async fn create_tenant(&self, spec: TenantSpec) -> Result<TenantRecord> {
        let name = spec.name.clone().ok_or_else(|| Error::Invalid {
            path: Some("name".into()),
            message: "a tenant needs a name".into(),
        })?;
        if !crate::task::is_valid_name(&name) {
            return Err(Error::Invalid {
                path: Some("name".into()),
                message: format!("`{name}` must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}"),
            });
        }
        Self::check_spec(&spec).await?;
        if self.tenants.exists(&name) {
            return Err(Error::Conflict(format!("tenant `{name}` already exists")));
        }
        let mut record =
            TenantRecord::new(&name, spec.quota.unwrap_or_default(), self.clock.now_ms());
        record.description = spec.description;
        record.allow_http = spec.allow_http.unwrap_or_default();
        record.alerts = spec.alerts;
        self.store_tenant(record).await
    }

    /// Every tenant.
    pub fn list_tenants(&self) -> Vec<TenantRecord> {
        self.tenants.tenants()
    }

    /// One tenant.
    pub fn get_tenant(&self, name: &str) -> Result<TenantRecord> {
        self.tenant_record(name)
    }

    /// Changes a tenant's description or HTTP ceiling (fields left out stay).
    pub async fn update_tenant(&self, name: &str, spec: TenantSpec) -> Result<TenantRecord> {
        // Well-formed, but not this tenant: a field at odds with its context
        // is `invalid` with its path (like a task sent to another name).
        if spec.name.as_deref().is_some_and(|n| n != name) {
            return Err(Error::Invalid {
                path: Some("name".into()),
                message: format!("the body names another tenant than `{name}`"),
            });
        }
        Self::check_spec(&spec).await?;
        let mut record = self.tenant_record(name)?;
        if let Some(d) = spec.description {
            record.description = Some(d);
        }
        if let Some(q) = spec.quota {
            record.quota = q;
        }
        if let Some(list) = spec.allow_http {
            record.allow_http = list;
        }
        if let Some(alerts) = spec.alerts {
            record.alerts = Some(alerts);
        }
        record.updated_at = self.clock.now_ms();
        self.store_tenant(record).await
    }

    /// Replaces a tenant's quota; applies to the next attempts and releases
    /// held runs if it allows.
    pub async fn set_quota(&self, name: &str, quota: Quota) -> Result<TenantRecord> {
        quota.validate().map_err(|m| Error::Invalid {
            path: Some("quota".into()),
            message: m,
        })?;
        let mut record = self.tenant_record(name)?;
        record.quota = quota;
        record.updated_at = self.clock.now_ms();
        self.store_tenant(record).await
    }

    /// Disables or enables a tenant.
    pub async fn set_disabled(&self, name: &str, disabled: bool) -> Result<TenantRecord> {
        if name == DEFAULT_TENANT && disabled {
            return Err(Error::Conflict(
                "the `default` tenant cannot be disabled".into(),
            ));
        }
        let mut record = self.tenant_record(name)?;
        record.disabled = disabled;
        record.updated_at = self.clock.now_ms();
        self.store_tenant(record).await
    }

    /// Creates a token: (the token text, shown once; its record).
    pub async fn create_token(
        &self,
        tenant: &str,
        label: Option<String>,
    ) -> Result<(String, TokenRecord)> {
        self.tenant_record(tenant)?;
        if let Some(l) = &label
            && (l.is_empty() || l.len() > MAX_LABEL)
        {
            return Err(Error::Invalid {
                path: Some("label".into()),
                message: format!("a label is 1 to {MAX_LABEL} bytes"),
            });
        }
        if self.tenants.tokens(tenant).len() >= MAX_TOKENS_PER_TENANT {
            return Err(Error::Conflict(format!(
                "tenant `{tenant}` has {MAX_TOKENS_PER_TENANT} tokens; revoked ones count too"
            )));
        }
        let (text, record) = new_token(tenant, label, self.clock.now_ms());
        self.store.put_token(&record)?;
        self.sync().await?;
        self.tenants.put_token(record.clone());
        Ok((text, record))
    }

    /// A tenant's tokens (records only, never secrets).
    pub fn list_tokens(&self, tenant: &str) -> Result<Vec<TokenRecord>> {
        self.tenant_record(tenant)?;
        Ok(self.tenants.tokens(tenant))
    }

    /// Revokes a token; its next request is refused.
    pub async fn revoke_token(&self, tenant: &str, id: &str) -> Result<TokenRecord> {
        let mut record = self
            .tenants
            .tokens(tenant)
            .into_iter()
            .find(|t| t.id == id)
            .ok_or_else(|| Error::NotFound(format!("token `{id}` of tenant `{tenant}`")))?;
        if record.revoked_at.is_none() {
            record.revoked_at = Some(self.clock.now_ms());
            self.store.put_token(&record)?;
            self.sync().await?;
            self.tenants.put_token(record.clone());
        }
        Ok(record)
    }

    /// Usage over `[from, to)` (default: the current window), totals, per
    /// task and per day.
    pub fn usage(
        &self,
        tenant: &str,
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
    ) -> Result<UsageReport> {
        let record = self.tenant_record(tenant)?;
        let now = self.clock.now_ms();
        let window_start = record.quota.window_start(now);
        let window_end = window_start + record.quota.window_ms();
        let from = from.map_or(window_start, |d| d.timestamp_millis());
        let to = to.map_or(window_end, |d| d.timestamp_millis());
        let from = from.div_euclid(HOUR_MS) * HOUR_MS;
        let to = (to + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS;
        // Each instant parsed (the API refused it otherwise); a range that
        // does not make sense together is `invalid`.
        if to <= from {
            return Err(Error::Invalid {
                path: Some("to".into()),
                message: format!(
                    "`to` ({}) must be after `from` ({})",
                    ms_to_utc(to),
                    ms_to_utc(from)
                ),
            });
        }
        if (to - from) / HOUR_MS > MAX_USAGE_HOURS {
            return Err(Error::Invalid {
                path: Some("to".into()),
                message: format!(
                    "a usage report covers at most {} days",
                    MAX_USAGE_HOURS / 24
                ),
            });
        }
        let buckets = self.store.usage(tenant, from, to)?;
        let mut report = UsageReport {
            tenant: tenant.to_string(),
            from: ms_to_utc(from),
            to: ms_to_utc(to),
            total: UsageTotals::default(),
            by_task: BTreeMap::new(),
            by_day: BTreeMap::new(),
            window: WindowUsage {
                start: ms_to_utc(window_start),
                end: ms_to_utc(window_end),
                fuel_budget: record.quota.fuel_per_window,
                fuel_used: 0,
                wall_ms_budget: record.quota.wall_ms_per_window,
                wall_ms_used: 0.0,
                held: self.scheduler.stats().hold_reason(tenant),
            },
            storage: self.storage_of(&record)?,
        };
        for b in &buckets {
            report.total.add(b);
            report.by_task.entry(b.task.clone()).or_default().add(b);
            let day = ms_to_utc(b.hour).format("%Y-%m-%d").to_string();
            report.by_day.entry(day).or_default().add(b);
        }
        let window = if from == window_start && to == window_end {
            report.total.clone()
        } else {
            let mut window = UsageTotals::default();
            for b in &self.store.usage(tenant, window_start, window_end)? {
                window.add(b);
            }
            window
        };
        report.window.fuel_used = window.fuel;
        report.window.wall_ms_used = window.wall_ms;
        Ok(report)
    }

    /// What a tenant keeps now against its storage quotas.
    pub fn storage_usage(&self, tenant: &str) -> Result<StorageUsage> {
        self.storage_of(&self.tenant_record(tenant)?)
    }

    /// What `record`'s tenant keeps now against its storage quotas.
    fn storage_of(&self, record: &TenantRecord) -> Result<StorageUsage> {
        let tenant = record.name.as_str();
        let plugins = self.plugin_usage(tenant, None)?;
        let kv_bytes = self
            .store
            .kv()
            .usage(tenant)
            .map_err(|e| Error::Internal(format!("reading the key-value usage: {e}")))?;
        Ok(StorageUsage {
            run_bytes: self.store.run_bytes(tenant)?,
            run_bytes_quota: record.quota.run_bytes_limit(),
            max_input_bytes: record.quota.input_bytes_limit(),
            plugins: plugins.versions,
            max_plugins: plugins.max_plugins,
            plugin_bytes: plugins.bytes,
            plugin_bytes_quota: plugins.max_bytes,
            kv_bytes,
            kv_bytes_quota: record.quota.kv_bytes,
        })
    }
}
