//! One conformance suite for every [`Store`]: each behaviour is a generic
//! function over a [`Make`], and [`store_conformance_suite!`] turns them all
//! into `#[test]`s for one backend. The last one applies seeded random
//! operation sequences to a store and to a deliberately naive model and
//! compares every observable result (no property-testing crate: a seeded
//! `StdRng`).
//!
//! A backend — in this crate or outside it, with the `conformance` feature —
//! writes one fixture function and one line:
//!
//! ```ignore
//! fn my_store(scan_limit: usize) -> ax::store::conformance::Fixture<MyStore> {
//!     let db = TestDatabase::create();                 // dropped after the test
//!     (MyStore::connect(db.url()).with_scan_limit(scan_limit), Box::new(db))
//! }
//! ax::store_conformance_suite!(my_store_conformance, super::my_store, seeds = 60);
//! ```
//!
//! It runs here for the memory store, sled, and a store behind
//! [`Layered`](super::guard::Layered) (the fault guard's forwarding).
//!
//! This file holds the driver (the fixtures and the macro) and the record
//! builders; the behaviours live by area: `catalog` (metadata, blobs,
//! plugins, tasks, schedules), `tags` (plugin tags), `runs` (writing runs),
//! `listing` (reading them back), `outputs` (logs, dead letters), `tenants`
//! (tenants, tokens, usage), `outbox` (the alert outbox), `leases`, `dump`
//! (the whole-store dump) and `model` (the random operations).

pub mod catalog;
pub mod dump;
pub mod leases;
pub mod listing;
pub mod model;
pub mod outbox;
pub mod outputs;
pub mod runs;
pub mod tags;
pub mod tenants;

use serde_json::json;

use super::{AttemptLogs, Insert, RunPage, RunQuery, Store};
use crate::model::{
    AttemptRecord, DeadLetter, Event, LogLevel, LogRecord, Millis, Outcome, PluginRecord, Progress,
    RECORD_FORMAT, RunRecord, RunStatus, ScheduleState, StepRunRecord, StepStatus, TaskRecord,
    TriggerKind,
};

/// A store under test, with what must live as long as it (a temporary
/// directory, a scratch database; `()` for none), dropped after it.
pub type Fixture<S> = (S, Box<dyn std::any::Any>);
/// Makes an empty store whose `list_runs` examines at most the given number
/// of index entries per call ([`super::rules::MAX_SCAN`] in production).
pub type Make<S> = fn(usize) -> Fixture<S>;

/// The production scan bound, for tests that do not probe it.
const SCAN: usize = super::rules::MAX_SCAN;

/// Every behaviour of the suite as a `#[test]` in a module `$module`, for
/// the stores `$make` makes (a path resolved inside that module: `super::f`
/// for a function beside the invocation); `seeds` random operation
/// sequences are compared with the model.
#[macro_export]
macro_rules! store_conformance_suite {
    ($module:ident, $make:path, seeds = $seeds:expr) => {
        mod $module {
            $crate::store_conformance_suite!(@tests $make;
                catalog::meta_values_round_trip,
                catalog::blobs_are_content_addressed,
                catalog::plugins_are_listed_by_name_then_version,
                tags::plugin_tags_are_keyed_by_tenant_name_and_tag,
                tags::moving_a_tag_replaces_it_and_deleting_it_removes_only_it,
                catalog::tasks_are_stored_with_their_schedule,
                catalog::task_pages_are_ranges_by_name,
                catalog::put_tasks_stores_many_with_their_schedules_in_one_write,
                catalog::a_batch_naming_a_task_twice_keeps_the_last,
                catalog::schedules_round_trip,
                catalog::the_next_fire_index_follows_every_schedule_write,
                catalog::downstream_tasks_follow_the_after_triggers,
                runs::inserted_run_is_readable_with_its_events,
                runs::known_idempotency_key_returns_the_run_and_writes_nothing,
                runs::unique_fire_allows_one_run_per_task_and_instant,
                runs::insert_runs_checks_each_run_against_the_store_and_the_batch,
                runs::reinserting_an_id_returns_the_stored_run,
                runs::update_replaces_the_run_and_appends_events,
                runs::update_of_an_unknown_run_fails,
                runs::a_write_over_a_stale_revision_is_refused_and_changes_nothing,
                runs::two_writers_on_one_store_never_undo_each_other,
                runs::a_run_of_many_steps_written_by_its_changed_steps_reads_back_whole,
                runs::a_run_with_a_large_input_keeps_it_through_writes_and_reads,
                runs::write_runs_writes_many_runs_and_usage_at_once,
                runs::delete_run_refuses_an_active_run,
                runs::delete_run_removes_everything_and_frees_its_fire,
                runs::idempotency_keys_expire_in_order,
                runs::forgotten_keys_page_and_restore,
                runs::records_are_kept_per_attempt_and_go_with_their_run,
                runs::run_bytes_follow_what_runs_keep_and_go_with_them,
                runs::sync_ticket_resolves_after_writes,
                listing::active_runs_are_the_non_terminal_ones,
                listing::queued_runs_come_in_dispatch_order_per_tenant,
                listing::list_runs_filters_newest_first,
                listing::list_runs_pages_with_a_cursor,
                listing::list_runs_bounds_by_creation_time,
                listing::status_filter_scan_is_bounded_and_resumable,
                listing::run_summaries_list_every_run_from_the_indexes,
                listing::run_summaries_come_in_pages_newest_first_per_task,
                listing::names_with_separator_bytes_do_not_collide,
                outputs::logs_are_listed_by_step_then_attempt,
                outputs::batches_of_logs_and_records_store_what_one_call_each_would,
                outputs::whole_runs_are_each_run_with_what_it_keeps,
                outputs::dead_letters_are_newest_first_and_filter_open_ones,
                tenants::tenants_and_tokens_round_trip,
                tenants::usage_adds_up_per_hour_and_task,
                tenants::usage_of_known_and_new_buckets_in_one_write_adds_up,
                outbox::alerts_are_written_with_their_run,
                outbox::due_alerts_come_in_next_try_order_and_follow_every_change,
                outbox::alerts_are_listed_per_tenant_newest_first_with_a_cursor,
                outbox::trimming_keeps_the_newest_of_one_state_and_counts_follow,
                leases::leases_are_held_until_they_lapse_and_renewed_by_their_holder,
                leases::two_takers_never_hold_a_lease_under_one_token,
                dump::a_dump_carries_every_kind_into_an_empty_store,
                dump::restore_runs_stores_what_inserts_would_and_names_a_run_held_twice,
                dump::batches_in_flight_store_what_one_batch_at_a_time_would,
                dump::a_dump_with_a_bad_blob_or_kv_line_is_refused_before_anything_is_written,
            );

            #[test]
            fn random_operations_match_the_model() {
                $crate::store::conformance::model::random_operations_match_the_model(
                    $make, $seeds,
                );
            }
        }
    };
    (@tests $make:path; $($area:ident :: $test:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                $crate::store::conformance::$area::$test($make);
            }
        )*
    };
}

// --- builders -------------------------------------------------------------

/// A run of one step, as the suite writes them.
pub(crate) fn run(id: &str, tenant: &str, task: &str, status: RunStatus) -> RunRecord {
    RunRecord {
        format: RECORD_FORMAT,
        revision: 1,
        id: id.to_owned().into(),
        tenant: tenant.to_owned().into(),
        task: task.to_owned().into(),
        spec: json!({"steps": [{"name": "s1", "plugin": "echo@1.0.0"}]}).into(),
        status,
        reason: None,
        priority: 5,
        trigger: TriggerKind::Manual,
        scheduled_for: 1_000,
        created_at: 1_000,
        started_at: None,
        finished_at: None,
        input: json!({"n": 1}),
        idempotency_key: None,
        upstream_run: None,
        steps: vec![StepRunRecord {
            name: "s1".to_owned(),
            status: StepStatus::Pending,
            input: None,
            output: None,
            error: None,
            attempts: vec![AttemptRecord {
                number: 1,
                outcome: Some(Outcome::Succeeded),
                started_at: 1_000,
                finished_at: Some(1_002),
                fuel_consumed: 4_800,
                memory_peak_bytes: 1 << 16,
                // A dyadic fraction: serde_json's default float parser is
                // exact for these (see the report on `float_roundtrip`).
                duration_ms: 1.5,
                error: None,
                error_kind: None,
                plugin_version: Some("1.2.0".to_owned()),
                plugin_digest: Some("ab".repeat(32)),
            }],
            next_attempt_at: None,
            lost_attempts: 0,
            round_start: 0,
        }],
    }
}

pub(crate) fn event(run_id: &str, to: &str, at: Millis) -> Event {
    Event {
        run_id: run_id.to_owned(),
        step: None,
        attempt: None,
        from: None,
        to: to.to_owned(),
        at,
        reason: "test".to_owned(),
        actor: "scheduler".to_owned(),
    }
}

fn schedule(tenant: &str, task: &str, next_fire: Option<Millis>) -> ScheduleState {
    ScheduleState {
        tenant: tenant.to_owned(),
        task: task.to_owned(),
        next_fire,
        last_fired: None,
        paused: false,
    }
}

fn task(tenant: &str, name: &str, version: u64) -> TaskRecord {
    TaskRecord {
        format: RECORD_FORMAT,
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        spec: json!({"trigger": {"cron": "0 * * * * *"}}).into(),
        source: "name: x\n".to_owned(),
        created_at: 10,
        updated_at: 10 + version as Millis,
        version,
    }
}

fn plugin(tenant: &str, name: &str, version: &str) -> PluginRecord {
    PluginRecord {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        version: version.to_owned(),
        digest: "ab".repeat(32),
        size: 130_000,
        created_at: 5,
        status: crate::model::PluginStatus::Ready,
        error: None,
    }
}

fn dead(id: &str, tenant: &str, resolution: Option<&str>) -> DeadLetter {
    DeadLetter {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        task: "a".to_owned(),
        run_id: "r1".to_owned(),
        step: "s1".to_owned(),
        input: Some(json!({"x": 1})),
        error: Some("boom".to_owned()),
        outcome: Some(Outcome::Failed),
        attempts: 3,
        created_at: 7,
        resolution: resolution.map(str::to_owned),
        resolved_at: resolution.map(|_| 9),
    }
}

fn attempt_logs(step: &str, attempt: u32, stdout: String) -> AttemptLogs {
    AttemptLogs {
        step: step.to_owned(),
        attempt,
        stdout,
        stderr: "warn\n".to_owned(),
        logs: vec![LogRecord {
            at_ms: 3,
            level: LogLevel::Info,
            message: "hello".to_owned(),
            fields: vec![("k".to_owned(), "v".to_owned())],
        }],
        progress: Some(Progress {
            percent: 50,
            note: "half".to_owned(),
            at_ms: 4,
        }),
    }
}

/// A run id as `new_id` makes them, with a chosen instant and suffix.
fn run_id(ms: i64, suffix: u32) -> String {
    format!("r{ms:012x}{suffix:08x}")
}

fn ids(runs: &[RunRecord]) -> Vec<&str> {
    runs.iter().map(|r| r.id.as_str()).collect()
}

fn created(outcome: Insert) {
    assert_eq!(outcome, Insert::Created);
}

/// Every run `query` selects, following cursors to the end.
fn all_pages<S: Store>(store: &S, query: &RunQuery) -> Vec<RunRecord> {
    let mut query = query.clone();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let RunPage { runs, next } = store.list_runs(&query).expect("list_runs");
        assert!(
            runs.len() <= query.limit.max(1),
            "page longer than the limit"
        );
        out.extend(runs);
        match next {
            Some(next) => query.cursor = Some(next),
            None => return out,
        }
    }
    panic!("list_runs paging did not end");
}

fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

#[cfg(test)]
mod backends {
    use std::sync::Arc;

    use super::Fixture;
    use crate::store::SledStore;
    use crate::store::faults::Faulty;
    use crate::store::memory::MemoryStore;

    fn memory(scan_limit: usize) -> Fixture<MemoryStore> {
        (MemoryStore::new().with_scan_limit(scan_limit), Box::new(()))
    }

    fn sled(scan_limit: usize) -> Fixture<SledStore> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = SledStore::open(dir.path()).expect("open a fresh store");
        (store.with_scan_limit(scan_limit), Box::new(dir))
    }

    fn fjall(scan_limit: usize) -> Fixture<SledStore> {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = SledStore::open_as(dir.path(), crate::store::EngineKind::Fjall)
            .expect("open a fresh store");
        (store.with_scan_limit(scan_limit), Box::new(dir))
    }

    /// The memory store behind the one forwarding layer every wrapper
    /// (the fault guard, the fault switch) is made of.
    fn layered(scan_limit: usize) -> Fixture<Faulty> {
        let inner = Arc::new(MemoryStore::new().with_scan_limit(scan_limit));
        (Faulty::wrap(inner), Box::new(()))
    }

    crate::store_conformance_suite!(memory_store, super::memory, seeds = 300);
    crate::store_conformance_suite!(sled_store, super::sled, seeds = 60);
    crate::store_conformance_suite!(fjall_store, super::fjall, seeds = 60);
    crate::store_conformance_suite!(layered_store, super::layered, seeds = 100);
}
