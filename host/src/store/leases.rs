//! [`Leases`]: who does a piece of work that only one process may do at a
//! time — the retention sweep, the alert deliveries, and (the cluster's
//! executors) a queued run — and until when.
//!
//! A lease is taken for a while and renewed by taking it again before it
//! lapses; a holder that stops renewing (a crashed or cut-off process)
//! loses it when it lapses, and the next taker gets it with a new fencing
//! token, so work it hands on can be told apart from a late write of the
//! old holder. On one host every lease is this process's at once; with
//! several hosts on one database the same calls decide between them.

use serde::{Deserialize, Serialize};

use super::Result;
use crate::model::Millis;

/// A lease as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// What it is for (`retention`, `alerts`, `run/{id}`…).
    pub name: String,
    /// Who holds it ([`super::rules::holder`] of its process).
    pub holder: String,
    /// When it lapses unless renewed (ms); at or before now: free.
    pub until: Millis,
    /// Fencing token: one more each time the lease passes to a holder that
    /// did not hold it live (renewals keep it).
    pub token: u64,
}

impl Lease {
    /// Whether `holder` holds it at `now`.
    pub fn held_by(&self, holder: &str, now: Millis) -> bool {
        self.holder == holder && self.until > now
    }
}

/// Named leases.
pub trait Leases {
    /// Takes lease `name` for `holder` until `until`, or renews it: it is
    /// given when nobody holds it, when its holder let it lapse (`until` at
    /// or before `now`), or when `holder` holds it already. Returns the lease
    /// as stored after the call — `holder`'s, or the other holder's live
    /// lease, unchanged ([`Lease::held_by`] tells which). The decision is
    /// [`super::rules::take_lease`], made under the store's write lock (or
    /// in one transaction), so two takers never both get a live lease.
    fn take_lease(&self, name: &str, holder: &str, now: Millis, until: Millis) -> Result<Lease>;
    /// Lets `holder`'s lease `name` lapse now (shutdown); whether `holder`
    /// held it. The token stays, so the next taker gets a new one.
    fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<bool>;
}
