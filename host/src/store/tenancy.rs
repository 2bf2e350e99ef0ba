//! [`Tenancy`]: tenants, their tokens, and the usage they are charged.

use super::Result;
use crate::model::Millis;
use crate::tenant::{TenantRecord, TokenRecord, UsageBucket};

/// Tenants, tokens and usage buckets.
pub trait Tenancy {
    /// Creates or replaces a tenant.
    fn put_tenant(&self, tenant: &TenantRecord) -> Result<()>;
    /// Every tenant, by name.
    fn list_tenants(&self) -> Result<Vec<TenantRecord>>;
    /// Creates or replaces a tenant token record.
    fn put_token(&self, token: &TokenRecord) -> Result<()>;
    /// Every token record (revoked ones included), by id.
    fn list_tokens(&self) -> Result<Vec<TokenRecord>>;
    /// A tenant's usage buckets with `from <= hour < to`, by hour then task
    /// (written with the runs that used them:
    /// [`super::Runs::write_runs_with_alerts`]).
    fn usage(&self, tenant: &str, from: Millis, to: Millis) -> Result<Vec<UsageBucket>>;
}
