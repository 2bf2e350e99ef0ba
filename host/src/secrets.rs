//! Tenants' secrets as operations of the facade ([`Ax`]): set, list (names
//! only), delete. Kept out of `service.rs` so the secret paths are easy to
//! audit in one place: no value is ever returned, logged or put in an event.
//! Values reach plugins only through the runner, for steps listing them.

use crate::capability::{self, MAX_SECRET_BYTES};
use crate::service::{Ax, Error, Result};
use crate::store::secrets::SecretInfo;

impl Ax {
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
