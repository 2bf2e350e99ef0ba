//! [`Trigger::compile`]: the `trigger:` block of a task, compiled or refused.

use super::*;

fn created() -> DateTime<Utc> {
    utc("2026-05-01T10:00:00.250Z")
}

fn compile(spec: TriggerSpec) -> Result<Trigger> {
    Trigger::compile(Some(&spec), created())
}

#[test]
fn no_trigger_or_an_empty_one_is_manual() {
    let t = Trigger::compile(None, created()).expect("manual");
    assert_eq!(t, Trigger::Manual);
    assert_eq!(compile(TriggerSpec::default()), Ok(Trigger::Manual));
    assert_eq!(t.kind(), TriggerKind::Manual);
    assert_eq!(t.next_after(created()), None);
    assert_eq!(t.first_fire(created()), None);
}

#[test]
fn more_than_one_kind_is_rejected() {
    let spec = TriggerSpec {
        cron: Some("0 0 0 * * ?".into()),
        every: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let e = compile(spec).expect_err("two kinds");
    assert_eq!(
        e,
        Error::MultipleKinds {
            kinds: "`cron`, `every`".into()
        }
    );
    let spec = TriggerSpec {
        at: Some("2026-12-01T23:00:00+08:00".into()),
        after: vec!["a".into()],
        ..Default::default()
    };
    assert!(
        compile(spec)
            .expect_err("two kinds")
            .to_string()
            .contains("`at`, `after`")
    );
}

#[test]
fn timezone_without_cron_is_rejected() {
    let spec = TriggerSpec {
        timezone: Some("Asia/Shanghai".into()),
        every: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    assert_eq!(compile(spec), Err(Error::TimezoneWithoutCron));
}

#[test]
fn on_without_after_is_rejected() {
    let spec = TriggerSpec {
        on: Some(AfterOn::Failure),
        ..Default::default()
    };
    assert_eq!(compile(spec), Err(Error::OnWithoutAfter));
}

#[test]
fn cron_trigger_compiles_with_its_zone_and_rejects_bad_zones_and_expressions() {
    let spec = TriggerSpec {
        cron: Some("0 30 1 * * ?".into()),
        timezone: Some("Asia/Shanghai".into()),
        ..Default::default()
    };
    let t = compile(spec.clone()).expect("cron");
    assert_eq!(t.kind(), TriggerKind::Cron);
    assert_eq!(t.timezone(), chrono_tz::Asia::Shanghai);
    // 2026-05-01 10:00Z = 18:00 Shanghai → next 01:30 local is 05-01 17:30Z.
    assert_eq!(t.first_fire(created()), Some(utc("2026-05-01T17:30:00Z")));
    assert_eq!(
        t.next_after(utc("2026-05-01T17:30:00Z")),
        Some(utc("2026-05-02T17:30:00Z"))
    );

    let bad_zone = TriggerSpec {
        timezone: Some("Nowhere/City".into()),
        ..spec.clone()
    };
    assert!(matches!(
        compile(bad_zone),
        Err(Error::UnknownTimezone { .. })
    ));
    let bad_cron = TriggerSpec {
        cron: Some("0 2 * * *".into()),
        ..spec
    };
    assert!(matches!(
        compile(bad_cron),
        Err(Error::FiveFieldCron { .. })
    ));
}

#[test]
fn at_needs_rfc3339_with_an_offset() {
    let at = |text: &str| {
        compile(TriggerSpec {
            at: Some(text.into()),
            ..Default::default()
        })
    };
    let t = at("2026-12-01T23:00:00+08:00").expect("at");
    assert_eq!(t, Trigger::At(utc("2026-12-01T15:00:00Z")));
    assert_eq!(t.kind(), TriggerKind::At);
    assert_eq!(
        at("2026-12-01T15:00:00Z"),
        Ok(Trigger::At(utc("2026-12-01T15:00:00Z")))
    );
    for bad in ["2026-12-01T23:00:00", "2026-12-01 23:00", "tomorrow", ""] {
        let e = at(bad).expect_err(bad);
        assert!(matches!(e, Error::InvalidAt { .. }), "{bad}: {e:?}");
        assert!(e.to_string().contains("RFC 3339"), "{e}");
    }
}

#[test]
fn a_past_one_shot_still_has_its_first_fire() {
    let t = Trigger::At(utc("2026-01-01T00:00:00Z"));
    assert_eq!(t.first_fire(created()), Some(utc("2026-01-01T00:00:00Z")));
    assert_eq!(t.next_after(created()), None);
    assert_eq!(
        t.next_after(utc("2025-12-31T23:59:59Z")),
        Some(utc("2026-01-01T00:00:00Z"))
    );
}

#[test]
fn delay_counts_from_creation_and_zero_is_rejected() {
    let delay = |d: u64| {
        compile(TriggerSpec {
            delay: Some(Duration::from_secs(d)),
            ..Default::default()
        })
    };
    let t = delay(30 * 60).expect("delay");
    assert_eq!(t, Trigger::Delay(utc("2026-05-01T10:30:00.250Z")));
    assert_eq!(t.kind(), TriggerKind::Delay);
    assert_eq!(
        t.first_fire(utc("2026-06-01T00:00:00Z")),
        Some(utc("2026-05-01T10:30:00.250Z"))
    );
    assert_eq!(delay(0), Err(Error::ZeroDelay));
    let huge = compile(TriggerSpec {
        delay: Some(Duration::from_secs(u64::MAX)),
        ..Default::default()
    });
    assert!(matches!(
        huge,
        Err(Error::OutOfRange { field: "delay", .. })
    ));
}

#[test]
fn every_is_anchored_at_creation_and_at_least_a_second() {
    let every = |d: Duration| {
        compile(TriggerSpec {
            every: Some(d),
            ..Default::default()
        })
    };
    let t = every(Duration::from_secs(300)).expect("every");
    assert_eq!(
        t,
        Trigger::Every {
            anchor: created(),
            period: Duration::from_secs(300)
        }
    );
    assert_eq!(t.kind(), TriggerKind::Every);
    assert_eq!(t.timezone(), Tz::UTC);
    assert_eq!(
        t.first_fire(created()),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T09:00:00Z")),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T10:05:00.250Z")),
        Some(utc("2026-05-01T10:10:00.250Z"))
    );
    assert_eq!(
        t.next_after(utc("2026-05-01T10:07:00Z")),
        Some(utc("2026-05-01T10:10:00.250Z"))
    );
    let e = every(Duration::from_millis(500)).expect_err("too short");
    assert_eq!(e.to_string(), "`every` must be at least 1s (got 500ms)");
    assert!(every(Duration::ZERO).is_err());
    assert!(every(Duration::from_secs(1)).is_ok());
}

#[test]
fn after_compiles_with_its_result_filter() {
    let spec = TriggerSpec {
        after: vec!["extract".into()],
        on: Some(AfterOn::Done),
        ..Default::default()
    };
    let t = compile(spec).expect("after");
    assert_eq!(
        t,
        Trigger::After {
            tasks: vec!["extract".into()],
            on: AfterOn::Done
        }
    );
    assert_eq!(t.kind(), TriggerKind::After);
    assert_eq!(t.next_after(created()), None);
    let default_on = compile(TriggerSpec {
        after: vec!["a".into()],
        ..Default::default()
    });
    assert_eq!(
        default_on,
        Ok(Trigger::After {
            tasks: vec!["a".into()],
            on: AfterOn::Success
        })
    );
    let blank = compile(TriggerSpec {
        after: vec![" ".into()],
        ..Default::default()
    });
    assert_eq!(blank, Err(Error::EmptyAfterTask));
}

#[test]
fn trigger_spec_from_json_compiles() {
    let spec: TriggerSpec =
        serde_json::from_str(r#"{"cron": "0 30 1 * * ?", "timezone": "Asia/Shanghai"}"#)
            .expect("json");
    assert!(matches!(compile(spec), Ok(Trigger::Cron(_))));
    let spec: TriggerSpec = serde_json::from_str(r#"{"every": "5m"}"#).expect("json");
    assert_eq!(
        compile(spec).ok().and_then(|t| t.first_fire(created())),
        Some(utc("2026-05-01T10:05:00.250Z"))
    );
}
