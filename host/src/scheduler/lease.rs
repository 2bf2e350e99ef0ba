//! The work only one process may do at a time — the retention sweep, the
//! alert deliveries — is done under a lease of the store
//! ([`crate::store::Leases`]), taken before each round and renewed by the
//! next: on one host it is always this process's; with several hosts on one
//! database, one of them sweeps and delivers, and another takes over once
//! its lease lapses (a crash) or is released (a stop).
//!
//! A process of this same host that is gone (killed, its id no longer
//! running) holds nothing: its lease is taken over at once instead of when
//! it lapses, so a restart after SIGKILL does not wait out the dead
//! process's lease (the alert lease lasts minutes). Read from `/proc` on
//! Linux; elsewhere only lapse frees a lease.

use std::time::Duration;

use crate::model::Millis;
use crate::store::{Store, rules};

/// Whether this process holds lease `name` from `now` for `hold`, taking or
/// renewing it. Another process's live lease: false, and who holds it is
/// logged at debug level.
pub(crate) fn hold(
    store: &dyn Store,
    name: &str,
    now: Millis,
    hold: Duration,
) -> crate::store::Result<bool> {
    let me = rules::holder();
    let until = now.saturating_add(i64::try_from(hold.as_millis()).unwrap_or(i64::MAX));
    let mut lease = store.take_lease(name, &me, now, until)?;
    if !lease.held_by(&me, now) && abandoned(&lease.holder) {
        tracing::info!(lease = name, holder = %lease.holder, "taking over the lease of a process of this host that is gone");
        // Taken as if it had lapsed: the store still lets only one taker
        // have it (a second one sees the first's lease, live).
        let lapsed = lease.until.max(now);
        lease = store.take_lease(name, &me, lapsed, until)?;
    }
    let mine = lease.held_by(&me, now);
    if !mine {
        tracing::debug!(lease = name, holder = %lease.holder, until = lease.until, "another process holds the lease");
    }
    Ok(mine)
}

/// Whether `holder` ([`rules::holder`]: `host/pid/tag`) names a process of
/// this host that is not running any more: its pid runs nothing, or runs
/// this process, which is not it (a restart given the same pid, as pid 1 in
/// a container). Hosts are told apart by host name: containers that share
/// one host name but not their process ids must not share a store.
fn abandoned(holder: &str) -> bool {
    let mine = rules::holder();
    let (Some((host, pid)), Some((my_host, my_pid))) = (host_and_pid(holder), host_and_pid(&mine))
    else {
        return false;
    };
    if holder == mine || host != my_host || !cfg!(target_os = "linux") {
        return false;
    }
    pid == my_pid || !running(pid)
}

/// Whether process `pid` runs (exists and has not exited: a zombie waiting
/// for its parent holds nothing).
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (name) S …`: the state follows the last `)`.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// The host and process id of a [`rules::holder`] name.
fn host_and_pid(holder: &str) -> Option<(&str, u32)> {
    let mut parts = holder.rsplitn(3, '/');
    let _tag = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    Some((parts.next()?, pid))
}

/// Lets this process's lease `name` lapse now (a clean stop), so another
/// process takes the work over at once rather than when it would lapse.
pub(crate) fn release(store: &dyn Store, name: &str, now: Millis) {
    if let Err(e) = store.release_lease(name, &rules::holder(), now) {
        tracing::warn!(lease = name, error = %e, "cannot release the lease; it lapses by itself");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::prelude::*;

    /// A lease of a process of this host that is gone is taken over at
    /// once; a live one's (this test's own pid under another tag) is not.
    #[test]
    fn a_gone_process_of_this_host_holds_nothing() {
        let store = MemoryStore::new();
        let (host, _) = host_and_pid(&rules::holder())
            .map(|(h, p)| (h.to_owned(), p))
            .unwrap();
        // Pids are below 2^22 on Linux: this one runs nowhere.
        let gone = format!("{host}/4194999/0000beef");
        store.take_lease("work", &gone, 1_000, 600_000).unwrap();
        assert!(hold(&store, "work", 2_000, Duration::from_secs(10)).unwrap());
        let taken = store.take_lease("work", "probe", 2_000, 2_001).unwrap();
        assert_eq!((taken.holder, taken.token), (rules::holder(), 2));

        // This test's parent (cargo, a shell) runs.
        let alive = format!("{host}/{}/0000beef", std::os::unix::process::parent_id());
        let other = MemoryStore::new();
        other.take_lease("work", &alive, 1_000, 600_000).unwrap();
        assert!(!hold(&other, "work", 2_000, Duration::from_secs(10)).unwrap());
        // A restart that got this process's pid: the holder is not us.
        let restarted = MemoryStore::new();
        let me = format!("{host}/{}/0000beef", std::process::id());
        restarted.take_lease("work", &me, 1_000, 600_000).unwrap();
        assert!(hold(&restarted, "work", 2_000, Duration::from_secs(10)).unwrap());
        let remote = MemoryStore::new();
        remote
            .take_lease("work", "elsewhere/1/0000beef", 1_000, 600_000)
            .unwrap();
        assert!(!hold(&remote, "work", 2_000, Duration::from_secs(10)).unwrap());
    }
}
