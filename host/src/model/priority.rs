//! Priorities, 0 (lowest) to 9: the one place their bounds are written. A
//! task sets one, a trigger may override it, a tenant's quota caps it, and the
//! dispatch queue ages it and keeps a share of slots for the urgent ones.

/// How much one priority level is worth in queueing time (ms): a step of
/// priority 9 goes before lower ones queued up to 90 s earlier.
pub const AGING_STEP_MS: crate::model::Millis = 10_000;

/// The dispatch order of work queued at `queued_at` with `priority`
/// (smaller goes first): priority counts as queueing time. The dispatch
/// queue orders ready steps by it, and the store its queued runs.
pub fn queue_order(queued_at: crate::model::Millis, priority: u8) -> crate::model::Millis {
    queued_at.saturating_sub(crate::model::Millis::from(priority) * AGING_STEP_MS)
}

/// Highest priority (0 is lowest).
pub const MAX_PRIORITY: u8 = 9;
/// Priority when none is given.
pub const DEFAULT_PRIORITY: u8 = 5;
/// Priorities at or above this may use the share of slots reserved for
/// urgent work.
pub const HIGH_PRIORITY: u8 = 7;
/// The priority ceiling of a tenant whose quota sets none: one below
/// [`HIGH_PRIORITY`], so the reserved share is the admin's to hand out, not
/// any tenant's to take by asking for priority 9.
pub const DEFAULT_MAX_PRIORITY: u8 = HIGH_PRIORITY - 1;
