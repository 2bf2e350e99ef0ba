//! Priorities, 0 (lowest) to 9: the one place their bounds are written. A
//! task sets one, a trigger may override it, a tenant's quota caps it, and the
//! dispatch queue ages it and keeps a share of slots for the urgent ones.

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
