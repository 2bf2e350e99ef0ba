//! Who gets a place under the connection cap: per client, not first come.
//!
//! A global cap alone let one address hold every place with silent sockets
//! (no token needed), so every other client — probes of `/healthz`
//! included — got `503` for as long as it cared to renew them (issue 31).
//! The places are now shared out by who holds them:
//!
//! - a connection is **anonymous** from accept until a request on it
//!   carries a valid token (admin or tenant, as `auth::Caller` checks it);
//!   anonymous connections count under their client address (an IPv6
//!   address by its /64, what one host is usually given), at most
//!   `max_anonymous_per_address` each;
//! - the first request with a valid token **promotes** its connection: it
//!   counts under that token (its sha256, what ax keeps of tokens) instead,
//!   at most `max_per_token`; a promotion past that is refused (`429
//!   too_many_token_connections`, and the connection is closed). A promoted
//!   connection is never evicted: a token holder is known and bounded;
//! - when a new connection would take its address past its limit, or the
//!   server past `max_connections`, the **oldest anonymous connection with
//!   no request under way** is evicted to make room — of that address, or
//!   for the cap of any — instead of refusing the newcomer. Only when none
//!   can be evicted is the newcomer refused (the `503` of `connections`).
//!
//! Evicting rather than refusing is what keeps a flood from locking others
//! out: a client that speaks at once — a probe sending its `GET /healthz`,
//! a client with a token — takes a silent socket's place and has its
//! request under way (so cannot be evicted) long before the flood's next
//! connections reach it, even from the flood's own address (on loopback
//! they share one). A flood only evicts itself and its own kind; refusing
//! newcomers, as before, handed the server to whoever came first.
//! "Oldest" is by accept; a connection found busy while looking for one to
//! evict is moved to the back of the line, as recently active.
//!
//! An evicted connection leaves the counts at once (its newcomer takes the
//! place) and is told through its [`ConnSlot`]; its own task closes it, or,
//! when a request started meanwhile, closes it after that request's answer.
//! So for a moment the open sockets may exceed the cap by the evicted
//! connections still closing, each at most one request.
//!
//! Bookkeeping is one mutex over plain maps, held for O(1) work on the
//! common paths: per address and overall, ids queue in accept order
//! (`VecDeque`). Promotions and closes leave stale ids in the queues rather
//! than search them out; a search for a connection to evict drops the stale
//! ids it meets, and a queue grown past twice its live ids (plus a little)
//! is compacted, so memory stays proportional to the connections open and
//! every operation is amortised O(1) — a search walks past busy
//! connections, at worst all of them. A connection's share of it is some
//! 150 bytes (its entry, two queue slots, the shared [`Signals`]), next to
//! the ~1.5 KiB of a silent socket's task. A connection leaves the counts when
//! its last [`ConnSlot`] handle is dropped (its task and any request of it
//! still running), so a panic cannot leak a place.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::config::ConnectionsConfig;

/// The sha256 of a token: what a promoted connection counts under.
pub(in crate::api) type TokenKey = [u8; 32];

/// Stale ids a queue may hold beyond twice its live ones before it is
/// compacted: a few, so a queue of one or two live ids is not rebuilt at
/// every close.
const QUEUE_SLACK: usize = 16;

/// The limits, from [`ConnectionsConfig`].
#[derive(Clone, Copy, Debug)]
struct Limits {
    total: usize,
    anonymous_per_address: usize,
    per_token: usize,
}

/// The places of one server's connections.
pub(in crate::api) struct Admission {
    limits: Limits,
    /// Short sections only (maps and counters, no I/O, no await): one lock
    /// for all keeps the counts consistent with each other.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Every counted connection.
    conns: HashMap<u64, Entry>,
    /// Anonymous connections by address.
    addresses: HashMap<IpAddr, Queue>,
    /// Every anonymous connection, for the cap.
    anonymous: Queue,
    /// Promoted connections by token.
    tokens: HashMap<TokenKey, usize>,
}

/// Connections in accept order, with stale ids ([`State::is_anonymous`]
/// tells) and the count of live ones.
#[derive(Default)]
struct Queue {
    ids: VecDeque<u64>,
    live: usize,
}

struct Entry {
    address: IpAddr,
    token: Option<TokenKey>,
    signals: Arc<Signals>,
}

/// What the admission and the connection's task share: whether a request
/// is under way, and the eviction notice.
#[derive(Default)]
struct Signals {
    busy: AtomicUsize,
    evicted: AtomicBool,
    notify: Notify,
}

/// A connection's place: its task holds it, and every request of it (in
/// the request's extensions, for `auth::Caller` to promote). The place is
/// given back when the last handle is dropped.
pub(in crate::api) struct ConnSlot {
    id: u64,
    admission: Arc<Admission>,
    signals: Arc<Signals>,
}

/// A promotion past `max_per_token`.
#[derive(Debug, thiserror::Error)]
#[error(
    "this token already holds {0} connections (connections.max_per_token); reuse one, or retry when one closes"
)]
pub(in crate::api) struct TokenFull(pub(in crate::api) usize);

/// The address a client counts under: an IPv4 address (also when written
/// IPv4-mapped), an IPv6 address's /64.
pub(in crate::api) fn client_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

impl Admission {
    pub(in crate::api) fn new(limits: &ConnectionsConfig) -> Arc<Self> {
        Arc::new(Self {
            limits: Limits {
                total: limits.max_connections.max(1),
                anonymous_per_address: limits.max_anonymous_per_address.max(1),
                per_token: limits.max_per_token.max(1),
            },
            state: Mutex::new(State::default()),
        })
    }

    /// A place for a new connection from `ip`, evicting to make room (module
    /// docs); `None` when there is none to be had.
    pub(in crate::api) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ConnSlot> {
        let address = client_address(ip);
        let mut state = self.lock();
        let crowded = state
            .addresses
            .get(&address)
            .is_some_and(|q| q.live >= self.limits.anonymous_per_address);
        if crowded && !state.evict_oldest(Some(address)) {
            return None;
        }
        if state.conns.len() >= self.limits.total && !state.evict_oldest(None) {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        let signals = Arc::new(Signals::default());
        state.conns.insert(
            id,
            Entry {
                address,
                token: None,
                signals: signals.clone(),
            },
        );
        let queue = state.addresses.entry(address).or_default();
        queue.ids.push_back(id);
        queue.live += 1;
        state.anonymous.ids.push_back(id);
        state.anonymous.live += 1;
        drop(state);
        Some(ConnSlot {
            id,
            admission: self.clone(),
            signals,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The sections never panic half-way through an update; a poisoned
        // lock would only mean a panic elsewhere while holding it, and the
        // counts are still whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Connections counted: all, anonymous, and under `token`.
    #[cfg(test)]
    fn counts(&self, token: &TokenKey) -> (usize, usize, usize) {
        let state = self.lock();
        (
            state.conns.len(),
            state.anonymous.live,
            state.tokens.get(token).copied().unwrap_or(0),
        )
    }
}

impl State {
    fn is_anonymous(&self, id: u64) -> bool {
        self.conns.get(&id).is_some_and(|e| e.token.is_none())
    }

    /// Evicts the oldest anonymous connection with no request under way, of
    /// `address` or of any; false when there is none.
    fn evict_oldest(&mut self, address: Option<IpAddr>) -> bool {
        let queue = match address {
            Some(a) => self.addresses.get_mut(&a),
            None => Some(&mut self.anonymous),
        };
        let Some(queue) = queue else { return false };
        // Taken out so the loop may read `self.conns`; put back below.
        let mut ids = std::mem::take(&mut queue.ids);
        let mut victim = None;
        for _ in 0..ids.len() {
            let Some(id) = ids.pop_front() else { break };
            let Some(entry) = self.conns.get(&id).filter(|e| e.token.is_none()) else {
                continue; // stale: closed, evicted or promoted
            };
            if entry.signals.busy.load(Ordering::Acquire) > 0 {
                ids.push_back(id);
                continue;
            }
            victim = Some(id);
            break;
        }
        let queue = match address {
            Some(a) => self.addresses.get_mut(&a).expect("still there"),
            None => &mut self.anonymous,
        };
        queue.ids = ids;
        let Some(id) = victim else { return false };
        let entry = self.forget(id).expect("a live entry");
        entry.signals.evicted.store(true, Ordering::Release);
        entry.signals.notify.notify_waiters();
        tracing::debug!(address = %entry.address, "evicting an idle anonymous connection to make room");
        true
    }

    /// Takes connection `id` out of every count.
    fn forget(&mut self, id: u64) -> Option<Entry> {
        let entry = self.conns.remove(&id)?;
        match &entry.token {
            Some(token) => self.untoken(token),
            None => self.unanonymous(entry.address),
        }
        Some(entry)
    }

    fn untoken(&mut self, token: &TokenKey) {
        if let Some(n) = self.tokens.get_mut(token) {
            *n -= 1;
            if *n == 0 {
                self.tokens.remove(token);
            }
        }
    }

    /// One anonymous connection of `address` fewer (its entry already
    /// changed or gone); compacts the queues grown stale.
    fn unanonymous(&mut self, address: IpAddr) {
        self.anonymous.live -= 1;
        if let Some(queue) = self.addresses.get_mut(&address) {
            queue.live -= 1;
            if queue.live == 0 {
                self.addresses.remove(&address);
            } else if queue.ids.len() > 2 * queue.live + QUEUE_SLACK {
                let mut ids = std::mem::take(&mut queue.ids);
                ids.retain(|id| self.is_anonymous(*id));
                self.addresses.get_mut(&address).expect("still there").ids = ids;
            }
        }
        if self.anonymous.ids.len() > 2 * self.anonymous.live + QUEUE_SLACK {
            let mut ids = std::mem::take(&mut self.anonymous.ids);
            ids.retain(|id| self.is_anonymous(*id));
            self.anonymous.ids = ids;
        }
    }
}

impl ConnSlot {
    /// Counts the connection under `token` from now on (module docs); an
    /// evicted connection has nothing to count.
    pub(in crate::api) fn promote(&self, token: TokenKey) -> Result<(), TokenFull> {
        let limit = self.admission.limits.per_token;
        let mut state = self.admission.lock();
        let Some(entry) = state.conns.get(&self.id) else {
            return Ok(());
        };
        if entry.token == Some(token) {
            return Ok(());
        }
        if state.tokens.get(&token).copied().unwrap_or(0) >= limit {
            return Err(TokenFull(limit));
        }
        let address = entry.address;
        // The entry changes first, so a compaction below sees its id stale.
        let before = state
            .conns
            .get_mut(&self.id)
            .expect("still there")
            .token
            .replace(token);
        match before {
            Some(other) => state.untoken(&other),
            None => state.unanonymous(address),
        }
        *state.tokens.entry(token).or_default() += 1;
        Ok(())
    }

    /// A request's head is in: the connection may not be evicted until
    /// [`ConnSlot::request_ended`].
    pub(in crate::api) fn request_started(&self) {
        self.signals.busy.fetch_add(1, Ordering::AcqRel);
    }

    pub(in crate::api) fn request_ended(&self) {
        self.signals.busy.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether a request is under way.
    pub(in crate::api) fn is_busy(&self) -> bool {
        self.signals.busy.load(Ordering::Acquire) > 0
    }

    /// Resolves once the connection has been evicted.
    pub(in crate::api) async fn evicted(&self) {
        loop {
            let notified = self.signals.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the flag is read, so a notice between the
            // two is not lost.
            notified.as_mut().enable();
            if self.signals.evicted.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        // Not an evicted one's: it left the counts when evicted.
        let forgotten = self.admission.lock().forget(self.id);
        // Dropped outside the lock (it holds nothing that locks, but keep
        // the section to the maps).
        drop(forgotten);
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    const T: TokenKey = [7; 32];
    const U: TokenKey = [8; 32];

    fn admission(total: usize, anonymous: usize, per_token: usize) -> Arc<Admission> {
        Admission::new(&ConnectionsConfig {
            max_connections: total,
            max_anonymous_per_address: anonymous,
            max_per_token: per_token,
            ..ConnectionsConfig::default()
        })
    }

    fn is_evicted(slot: &ConnSlot) -> bool {
        slot.signals.evicted.load(Ordering::Acquire)
    }

    #[test]
    fn an_address_past_its_limit_evicts_its_own_oldest_idle_connection() {
        let adm = admission(100, 3, 10);
        let a: Vec<_> = (0..3).map(|_| adm.admit(A).unwrap()).collect();
        let b = adm.admit(B).unwrap();
        let a4 = adm.admit(A).unwrap();
        assert!(is_evicted(&a[0]), "the oldest of A");
        assert!(!is_evicted(&a[1]) && !is_evicted(&a[2]) && !is_evicted(&b));
        assert_eq!(adm.counts(&T), (4, 4, 0));
        drop(a4);
        drop(a);
        assert_eq!(
            adm.counts(&T),
            (1, 1, 0),
            "the evicted one was not counted twice"
        );
    }

    #[test]
    fn a_connection_with_a_request_under_way_is_not_evicted_and_goes_to_the_back() {
        let adm = admission(100, 2, 10);
        let first = adm.admit(A).unwrap();
        let second = adm.admit(A).unwrap();
        first.request_started();
        let third = adm.admit(A).unwrap();
        assert!(!is_evicted(&first));
        assert!(is_evicted(&second));
        // Both left are busy: a newcomer is refused, nothing is evicted.
        third.request_started();
        assert!(adm.admit(A).is_none());
        assert!(!is_evicted(&first) && !is_evicted(&third));
        // Another address is not affected by A's limit.
        assert!(adm.admit(B).is_some());
        first.request_ended();
        let _fourth = adm.admit(A).unwrap();
        assert!(is_evicted(&first));
    }

    #[test]
    fn the_cap_evicts_the_oldest_anonymous_of_any_address_never_a_promoted_one() {
        let adm = admission(3, 3, 3);
        let promoted = adm.admit(A).unwrap();
        promoted.promote(T).unwrap();
        let b = adm.admit(B).unwrap();
        let a = adm.admit(A).unwrap();
        assert_eq!(adm.counts(&T), (3, 2, 1));
        let _new = adm.admit(A).unwrap();
        assert!(!is_evicted(&promoted));
        assert!(is_evicted(&b), "the oldest anonymous, of another address");
        let _new2 = adm.admit(B).unwrap();
        assert!(is_evicted(&a));
        assert_eq!(adm.counts(&T), (3, 2, 1));
    }

    #[test]
    fn with_every_place_promoted_or_busy_a_newcomer_is_refused() {
        let adm = admission(2, 2, 2);
        let p = adm.admit(A).unwrap();
        p.promote(T).unwrap();
        let busy = adm.admit(B).unwrap();
        busy.request_started();
        assert!(adm.admit(B).is_none());
        assert!(adm.admit(A).is_none());
        drop(p);
        assert!(
            adm.admit(A).is_some(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn a_token_holds_at_most_its_limit_and_frees_places_on_close() {
        let adm = admission(10, 10, 2);
        let c: Vec<_> = (0..3).map(|_| adm.admit(A).unwrap()).collect();
        c[0].promote(T).unwrap();
        c[0].promote(T).unwrap(); // again: already counted
        c[1].promote(T).unwrap();
        assert!(matches!(c[2].promote(T), Err(TokenFull(2))));
        assert_eq!(adm.counts(&T), (3, 1, 2));
        // Another token on the same connection moves it.
        c[1].promote(U).unwrap();
        assert_eq!(adm.counts(&T), (3, 1, 1));
        c[2].promote(T).unwrap();
        assert_eq!(adm.counts(&T), (3, 0, 2));
        drop(c);
        assert_eq!(adm.counts(&T), (0, 0, 0));
        let state = adm.lock();
        assert!(state.tokens.is_empty() && state.addresses.is_empty());
    }

    #[test]
    fn stale_ids_are_compacted_so_memory_follows_the_open_connections() {
        let adm = admission(1000, 1000, 1000);
        let _kept = adm.admit(A).unwrap();
        for i in 0..10_000 {
            let c = adm.admit(A).unwrap();
            if i % 2 == 0 {
                c.promote(T).unwrap();
            }
        }
        let state = adm.lock();
        assert_eq!(state.conns.len(), 1);
        assert!(state.anonymous.ids.len() <= 2 + QUEUE_SLACK + 1);
        assert!(state.addresses[&A].ids.len() <= 2 + QUEUE_SLACK + 1);
    }

    #[test]
    fn an_ipv6_client_counts_by_its_64_and_a_mapped_ipv4_as_ipv4() {
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let two: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_address(one), client_address(two));
        assert_ne!(client_address(one), client_address(other));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client_address(mapped), A);
    }

    #[tokio::test]
    async fn eviction_is_seen_by_a_waiter_and_after_the_fact() {
        let adm = admission(1, 1, 1);
        let old = Arc::new(adm.admit(A).unwrap());
        let waiter = tokio::spawn({
            let old = old.clone();
            async move { old.evicted().await }
        });
        tokio::task::yield_now().await;
        let _new = adm.admit(B).unwrap();
        waiter.await.unwrap();
        // Already evicted: resolves at once.
        old.evicted().await;
    }
}
