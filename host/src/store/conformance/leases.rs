//! Leases: held until they lapse, renewed by their holder, passed on with a
//! new fencing token, never held by two takers at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use super::{Make, SCAN};
use crate::store::prelude::*;

pub fn leases_are_held_until_they_lapse_and_renewed_by_their_holder<S: Leases + Sync>(
    make: Make<S>,
) {
    let (store, _dir) = make(SCAN);
    let a = store.take_lease("sweep", "a", 1_000, 2_000).unwrap();
    assert!(a.held_by("a", 1_000), "{a:?}");
    assert_eq!((a.until, a.token), (2_000, 1));

    // Another taker gets the live lease back, unchanged.
    let seen = store.take_lease("sweep", "b", 1_500, 9_000).unwrap();
    assert_eq!(seen, a);
    assert!(!seen.held_by("b", 1_500));

    // Renewed by its holder: the same token, a later end.
    let renewed = store.take_lease("sweep", "a", 1_900, 3_000).unwrap();
    assert_eq!(
        (renewed.holder.as_str(), renewed.until, renewed.token),
        ("a", 3_000, 1)
    );

    // Lapsed: the next taker holds it, with a new token.
    let b = store.take_lease("sweep", "b", 3_000, 4_000).unwrap();
    assert!(b.held_by("b", 3_000), "{b:?}");
    assert_eq!(b.token, 2);
    assert!(!a.held_by("a", 3_000));

    // Only the holder releases it; released, it is free at once.
    assert!(!store.release_lease("sweep", "a", 3_500).unwrap());
    assert!(store.release_lease("sweep", "b", 3_500).unwrap());
    assert!(!store.release_lease("sweep", "b", 3_500).unwrap());
    let again = store.take_lease("sweep", "a", 3_500, 5_000).unwrap();
    assert!(again.held_by("a", 3_500), "{again:?}");
    assert_eq!(again.token, 3);

    // Leases are independent by name.
    let run = store.take_lease("run/r1", "b", 3_500, 5_000).unwrap();
    assert!(run.held_by("b", 3_500));
    assert_eq!(run.token, 1);
    assert!(
        store
            .take_lease("sweep", "a", 3_600, 5_000)
            .unwrap()
            .held_by("a", 3_600)
    );
}

/// Two takers on one store, on one clock, each taking a short lease as
/// fast as it can: every token the store hands out goes to one holder
/// only, so no two takers ever hold a lease under the same token.
pub fn two_takers_never_hold_a_lease_under_one_token<S: Leases + Sync>(make: Make<S>) {
    const TRIES: usize = 400;
    let (store, _dir) = make(SCAN);
    let clock = AtomicI64::new(1);
    let grants: Vec<(u64, String, i64)> = std::thread::scope(|scope| {
        let takers: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|holder| {
                let (store, clock) = (&store, &clock);
                scope.spawn(move || {
                    let mut held = Vec::new();
                    for _ in 0..TRIES {
                        let now = clock.fetch_add(1, Ordering::SeqCst);
                        let lease = store.take_lease("x", holder, now, now + 3).unwrap();
                        if lease.held_by(holder, now) {
                            held.push((lease.token, holder.to_owned(), now));
                        }
                    }
                    held
                })
            })
            .collect();
        takers
            .into_iter()
            .flat_map(|t| t.join().expect("a taker"))
            .collect()
    });
    let mut owner: HashMap<u64, &str> = HashMap::new();
    for (token, holder, now) in &grants {
        let first = *owner.entry(*token).or_insert(holder);
        assert_eq!(
            first, holder,
            "token {token} given to two holders (at {now})"
        );
    }
    assert!(!grants.is_empty());
}
