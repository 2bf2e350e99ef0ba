//! [`due`]: what fires after a wait or a downtime, under each catch-up
//! policy.

use super::*;

fn hourly() -> Trigger {
    Trigger::Cron(cron("0 0 * * * ?", ""))
}

#[test]
fn due_on_time_fires_the_instant_under_every_policy() {
    for policy in [CatchUp::Latest, CatchUp::None, CatchUp::All] {
        let d = due(
            &hourly(),
            utc("2026-01-01T01:00:00Z"),
            utc("2026-01-01T01:00:00.250Z"),
            policy,
        );
        assert_eq!(
            d,
            Due {
                fire: vec![utc("2026-01-01T01:00:00Z")],
                skipped: 0,
                next: Some(utc("2026-01-01T02:00:00Z"))
            },
            "{policy:?}"
        );
    }
}

#[test]
fn due_within_the_grace_is_on_time_and_after_it_is_missed() {
    let fire = utc("2026-01-01T01:00:00Z");
    let at_grace = due(&hourly(), fire, fire + MISFIRE_GRACE, CatchUp::None);
    assert_eq!(at_grace.fire, [fire]);
    let past_grace = due(
        &hourly(),
        fire,
        fire + MISFIRE_GRACE + Duration::from_secs(1),
        CatchUp::None,
    );
    assert_eq!((past_grace.fire.len(), past_grace.skipped), (0, 1));
    assert_eq!(past_grace.next, Some(utc("2026-01-01T02:00:00Z")));
}

#[test]
fn due_after_a_day_down_follows_catch_up() {
    // 25 hourly instants in [Jan 1 00:00, Jan 2 00:00]; now is 30 s past the last.
    let (from, now) = (utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:00:30Z"));
    let latest = due(&hourly(), from, now, CatchUp::Latest);
    assert_eq!(latest.fire, [utc("2026-01-02T00:00:00Z")]);
    assert_eq!(latest.skipped, 24);
    assert_eq!(latest.next, Some(utc("2026-01-02T01:00:00Z")));
    let none = due(&hourly(), from, now, CatchUp::None);
    assert_eq!(none.fire, [utc("2026-01-02T00:00:00Z")]);
    assert_eq!(none.skipped, 24);
    let all = due(&hourly(), from, now, CatchUp::All);
    assert_eq!(all.fire.len(), 25);
    assert_eq!((all.fire[0], all.skipped), (from, 0));
}

#[test]
fn due_after_downtime_with_everything_missed() {
    // Now is 5 minutes past the last instant: all 25 are missed.
    let (from, now) = (utc("2026-01-01T00:00:00Z"), utc("2026-01-02T00:05:00Z"));
    let none = due(&hourly(), from, now, CatchUp::None);
    assert_eq!((none.fire.len(), none.skipped), (0, 25));
    let latest = due(&hourly(), from, now, CatchUp::Latest);
    assert_eq!(
        (latest.fire.clone(), latest.skipped),
        (vec![utc("2026-01-02T00:00:00Z")], 24)
    );
}

#[test]
fn due_all_keeps_only_the_most_recent_max_catch_up() {
    // A minutely cron down for a day: 1,441 instants.
    let t = Trigger::Cron(cron("0 * * * * ?", ""));
    let d = due(
        &t,
        utc("2026-01-01T00:00:00Z"),
        utc("2026-01-02T00:00:00Z"),
        CatchUp::All,
    );
    assert_eq!(d.fire.len(), MAX_CATCH_UP);
    assert_eq!(d.skipped, 1_441 - MAX_CATCH_UP);
    assert_eq!(d.fire[0], utc("2026-01-01T22:21:00Z"));
    assert_eq!(d.fire[MAX_CATCH_UP - 1], utc("2026-01-02T00:00:00Z"));
    assert!(d.fire.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn due_for_a_one_second_cron_after_a_year_down_is_quick_and_exact() {
    // Every second of 2025, both ends included: 365 × 86,400 + 1 instants.
    // New York included: both passes of the repeated hour fire and the
    // skipped hour does not exist, so the count is still one per real second.
    let total = 365 * 86_400 + 1;
    for zone in ["", "America/New_York"] {
        let t = Trigger::Cron(cron("* * * * * ?", zone));
        let (from, now) = (utc("2025-01-01T00:00:00Z"), utc("2026-01-01T00:00:00Z"));
        let started = Instant::now();
        let all = due(&t, from, now, CatchUp::All);
        let latest = due(&t, from, now, CatchUp::Latest);
        let none = due(&t, from, now, CatchUp::None);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "{zone}: took {took:?}");
        assert_eq!(all.fire.len(), MAX_CATCH_UP);
        assert_eq!(all.fire.last(), Some(&now));
        assert_eq!(
            all.fire[0],
            now - Duration::from_secs(MAX_CATCH_UP as u64 - 1)
        );
        assert_eq!(all.skipped, total - MAX_CATCH_UP);
        assert_eq!(
            (latest.fire.clone(), latest.skipped),
            (vec![now], total - 1)
        );
        // Within the grace: now − 60 s … now, 61 instants.
        assert_eq!(none.fire.len(), 61);
        assert_eq!(none.fire[0], now - MISFIRE_GRACE);
        assert_eq!(none.skipped, total - 61);
        assert_eq!(all.next, Some(now + Duration::from_secs(1)));
    }
}

#[test]
fn due_tail_agrees_with_enumeration_across_a_fall_back() {
    // Minutely in New York over five days including 2026-11-01: more than the
    // enumeration limit, so the counting path is used.
    let schedule = cron("0 * * * * ?", "America/New_York");
    let (from, now) = (utc("2026-10-30T00:00:00Z"), utc("2026-11-04T00:00:00Z"));
    let listed = enumerate(&schedule, from - chrono::TimeDelta::seconds(1), now);
    let d = due(&Trigger::Cron(schedule), from, now, CatchUp::All);
    assert_eq!(listed.len(), 5 * 1_440 + 1);
    assert_eq!(d.fire, listed[listed.len() - MAX_CATCH_UP..]);
    assert_eq!(d.skipped, listed.len() - MAX_CATCH_UP);
}

#[test]
fn due_for_every_is_computed_not_listed() {
    let t = Trigger::Every {
        anchor: utc("2025-01-01T00:00:00Z"),
        period: Duration::from_secs(1),
    };
    let now = utc("2026-01-01T00:00:00Z");
    let d = due(&t, utc("2025-01-01T00:00:01Z"), now, CatchUp::All);
    assert_eq!(d.fire.len(), MAX_CATCH_UP);
    assert_eq!(d.fire.last(), Some(&now));
    assert_eq!(d.skipped, 365 * 86_400 - MAX_CATCH_UP);
    assert_eq!(d.next, Some(now + Duration::from_secs(1)));
    // Sub-second anchor: instants keep its fraction.
    let t = Trigger::Every {
        anchor: utc("2026-01-01T00:00:00.5Z"),
        period: Duration::from_secs(10),
    };
    let d = due(
        &t,
        utc("2026-01-01T00:00:10.5Z"),
        utc("2026-01-01T00:00:31Z"),
        CatchUp::All,
    );
    assert_eq!(
        d.fire,
        [
            utc("2026-01-01T00:00:10.5Z"),
            utc("2026-01-01T00:00:20.5Z"),
            utc("2026-01-01T00:00:30.5Z")
        ]
    );
    assert_eq!(d.next, Some(utc("2026-01-01T00:00:40.5Z")));
}

#[test]
fn due_for_a_missed_one_shot_follows_catch_up() {
    let at = utc("2026-01-01T00:00:00Z");
    let now = utc("2026-01-02T00:00:00Z");
    for t in [Trigger::At(at), Trigger::Delay(at)] {
        assert_eq!(
            due(&t, at, now, CatchUp::Latest),
            Due {
                fire: vec![at],
                skipped: 0,
                next: None
            }
        );
        assert_eq!(
            due(&t, at, now, CatchUp::All),
            Due {
                fire: vec![at],
                skipped: 0,
                next: None
            }
        );
        assert_eq!(
            due(&t, at, now, CatchUp::None),
            Due {
                fire: vec![],
                skipped: 1,
                next: None
            }
        );
        // Noticed on time, even `none` fires it.
        let soon = at + Duration::from_secs(5);
        assert_eq!(due(&t, at, soon, CatchUp::None).fire, [at]);
    }
}

#[test]
fn due_before_next_fire_or_without_a_schedule_fires_nothing() {
    let d = due(
        &hourly(),
        utc("2026-01-01T02:00:00Z"),
        utc("2026-01-01T01:30:00Z"),
        CatchUp::All,
    );
    assert_eq!(
        d,
        Due {
            fire: vec![],
            skipped: 0,
            next: Some(utc("2026-01-01T02:00:00Z"))
        }
    );
    let now = utc("2026-01-01T01:30:00Z");
    assert_eq!(
        due(&Trigger::Manual, now, now, CatchUp::All),
        Due {
            fire: vec![],
            skipped: 0,
            next: None
        }
    );
}

#[test]
fn due_in_the_repeated_hour_fires_fixed_time_once() {
    // Down across the whole fall-back night: 01:30 fired once (05:30Z).
    let t = Trigger::Cron(cron("0 30 1 * * ?", "America/New_York"));
    let d = due(
        &t,
        utc("2026-11-01T05:30:00Z"),
        utc("2026-11-01T08:00:00Z"),
        CatchUp::All,
    );
    assert_eq!(d.fire, [utc("2026-11-01T05:30:00Z")]);
    assert_eq!(d.next, Some(utc("2026-11-02T06:30:00Z")));
}
