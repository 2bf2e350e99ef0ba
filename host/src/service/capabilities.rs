//! Capability operations of the facade ([`Ax`]): tenants' secrets (set,
//! list names only, delete) and the tenant ceiling on outbound HTTP (steps'
//! `allow_http` and the task's alert webhook), checked when a task is saved.
//!
//! The secret paths sit in one place so they are easy to audit: no value is
//! ever returned, logged or put in an event. Values reach plugins only
//! through the runner, for steps listing them.

use crate::capability::{self, MAX_SECRET_BYTES};
use crate::service::{Ax, Error, Result};
use crate::store::secrets::SecretInfo;
use crate::task::TaskSpec;

impl Ax {
    /// A task may only narrow its tenant's HTTP allow-list: every step's
    /// `allow_http` must be covered by the tenant's (`allow_http` of the
    /// tenant record, set by the admin; empty means no outbound HTTP). The
    /// error names the step, the pattern and what the tenant allows.
    pub(crate) fn check_http_ceiling(&self, tenant: &str, spec: &TaskSpec) -> Result<()> {
        if spec.steps.iter().all(|s| s.allow_http.is_empty()) {
            return Ok(());
        }
        let ceiling = self.http_ceiling(tenant)?;
        for (i, step) in spec.steps.iter().enumerate() {
            capability::http::within_ceiling(&ceiling, &step.allow_http).map_err(|message| {
                Error::Invalid {
                    path: Some(format!("steps[{i}].allow_http")),
                    message,
                }
            })?;
        }
        Ok(())
    }

    /// A task's alert webhook is outbound HTTP on the tenant's behalf: it
    /// must be allowed by the same ceiling, and not point at an address the
    /// rules refuse ([`crate::scheduler::alerts::check_webhook`]).
    pub(crate) async fn check_alert_webhook(&self, tenant: &str, spec: &TaskSpec) -> Result<()> {
        let Some(alerts) = &spec.alerts else {
            return Ok(());
        };
        let ceiling = self.http_ceiling(tenant)?;
        crate::scheduler::alerts::check_webhook(alerts, Some(&ceiling))
            .await
            .map_err(|message| Error::Invalid {
                path: Some("alerts.webhook".into()),
                message,
            })
    }

    /// The tenant's `allow_http`, parsed.
    fn http_ceiling(&self, tenant: &str) -> Result<Vec<capability::HttpPattern>> {
        let listed = self
            .tenants
            .tenant(tenant)
            .map(|t| t.allow_http)
            .unwrap_or_default();
        capability::http::parse_list(&listed).map_err(|(i, e)| {
            Error::Internal(format!(
                "tenant `{tenant}` allow_http[{i}] is unreadable: {e}"
            ))
        })
    }

    /// Sets a secret of `tenant`; says whether it was created. The value is
    /// durable when this returns.
    pub async fn put_secret(&self, tenant: &str, name: &str, value: &str) -> Result<bool> {
        check_name(name)?;
        if value.len() > MAX_SECRET_BYTES {
            return Err(Error::TooLarge(format!(
                "a secret value is at most {MAX_SECRET_BYTES} bytes"
            )));
        }
        if value.is_empty() {
            return Err(Error::BadRequest(
                "the request body is empty: send the secret's value (delete it with DELETE)".into(),
            ));
        }
        let now = self.clock.now().timestamp_millis();
        let created = self.store.secrets().put_secret(tenant, name, value, now)?;
        self.store.sync_ticket().wait().await?;
        Ok(created)
    }

    /// The tenant's secrets: names and update instants, never values.
    pub fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretInfo>> {
        Ok(self.store.secrets().list_secrets(tenant)?)
    }

    /// Deletes a secret of `tenant`.
    pub async fn delete_secret(&self, tenant: &str, name: &str) -> Result<()> {
        check_name(name)?;
        if !self.store.secrets().delete_secret(tenant, name)? {
            return Err(Error::NotFound(format!("secret `{name}`")));
        }
        self.store.sync_ticket().wait().await?;
        Ok(())
    }
}

fn check_name(name: &str) -> Result<()> {
    if capability::valid_name(name) {
        Ok(())
    } else {
        Err(Error::Invalid {
            path: None,
            message: format!(
                "`{}` is not a valid secret name: use letters, digits, `_`, `.` and `-`, start with a letter or digit, at most 64 characters",
                crate::template::shorten(name)
            ),
        })
    }
}
