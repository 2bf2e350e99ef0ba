//! [`Outbox`]: alerts to webhooks, written with the run change that raised
//! them ([`super::Runs::write_runs_with_alerts`], one atomic write) and read
//! back by the delivery worker in next-try order ([`Outbox::due_alerts`]);
//! see `scheduler/alerts`.

use serde::{Deserialize, Serialize};

use super::Result;
use crate::model::Millis;

/// Where an outbox alert is (see [`OutboxAlert`]).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertStatus {
    /// Waiting for its next try (`next_try`).
    Pending,
    /// Delivered (a 2xx answer); kept for a while to be seen, then aged out.
    Delivered,
    /// Given up: attempts exhausted, refused by the receiver (4xx, 3xx) or
    /// by the rules; kept until retried or aged out.
    Dead,
}

impl AlertStatus {
    /// Every status, in the order listings show them.
    pub const ALL: [AlertStatus; 3] = [Self::Pending, Self::Delivered, Self::Dead];

    /// The status as written in the API and in keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    /// Parses [`AlertStatus::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// One alert to one webhook, in the store's outbox: written with the run
/// change that raised it, read back by the delivery worker, which records
/// every try on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutboxAlert {
    /// `a…` ([`super::rules::new_id`]): sorts by creation. Also the payload's `id`, which
    /// receivers dedupe on (a crash may deliver an alert twice).
    pub id: String,
    /// The tenant whose run raised it.
    pub tenant: String,
    /// Where it is POSTed.
    pub url: String,
    /// Whether the admin set the webhook (it grants itself) rather than a
    /// task (it needs the tenant's `allow_http` at every delivery).
    pub admin: bool,
    /// The JSON body POSTed, exactly as stored.
    pub body: serde_json::Value,
    /// Where it is.
    pub status: AlertStatus,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// When it is tried next (`pending`), or when it left that state.
    pub next_try: Millis,
    /// When it was raised.
    pub created_at: Millis,
    /// What the last failed try said.
    pub last_error: Option<String>,
}

/// Which outbox alerts to list, newest first.
#[derive(Clone, Debug, Default)]
pub struct AlertQuery {
    /// Only this tenant's.
    pub tenant: String,
    /// Only those in this state.
    pub status: Option<AlertStatus>,
    /// At most this many (at least 1).
    pub limit: usize,
    /// Continue after this id (the `next` of the previous page).
    pub cursor: Option<String>,
}

/// The alert outbox.
pub trait Outbox {
    /// Creates or replaces outbox alerts (by id), with their indexes, in one
    /// atomic write.
    fn put_alerts(&self, alerts: &[OutboxAlert]) -> Result<()>;
    /// One outbox alert.
    fn get_alert(&self, id: &str) -> Result<Option<OutboxAlert>>;
    /// Pending alerts whose `next_try` is at or before `until`, earliest
    /// first (ties by id), at most `limit`: what the worker delivers next.
    fn due_alerts(&self, until: Millis, limit: usize) -> Result<Vec<OutboxAlert>>;
    /// A tenant's alerts, newest first, with a cursor (the last id).
    fn list_alerts(&self, query: &AlertQuery) -> Result<(Vec<OutboxAlert>, Option<String>)>;
    /// Deletes all but the newest `keep` of a tenant's alerts in `status`;
    /// returns how many were deleted.
    fn trim_alerts(&self, tenant: &str, status: AlertStatus, keep: usize) -> Result<usize>;
    /// Outbox alerts counted per (tenant, status), from the index alone.
    fn alert_counts(&self) -> Result<Vec<(String, AlertStatus, usize)>>;
}
