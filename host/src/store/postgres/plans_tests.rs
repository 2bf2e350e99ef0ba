//! The scheduler's two hot reads use their partial indexes: `EXPLAIN` of
//! the exact statements the store runs (the queue head, `runs.rs`; the
//! next-fire window, `catalog.rs`) on a scratch database of 5,000 runs and
//! 5,000 schedules, analysed, names the index and no sequential scan of the
//! table. docs/POSTGRES.md shows these plans.

use super::catalog::DUE_SCHEDULES;
use super::runs::{QUEUED_IDS, QUEUED_RUNS};
use super::testing::TestDatabase;
use super::{Database, pool};
use tokio_postgres::types::ToSql;

/// Rows of each table: enough that a sequential scan costs more than the
/// index, as in any store that has run for a while.
const ROWS: i64 = 5_000;

/// A migrated scratch database with [`ROWS`] runs — tenant `deep` with
/// 2,000 queued, tenants `t0`..`t2` with one in ten of theirs queued, the
/// rest finished — and [`ROWS`] schedules (one fire a second from
/// 1,001,000 ms, one in ten paused), analysed.
fn filled() -> Option<(TestDatabase, Database)> {
    let scratch = TestDatabase::create()?;
    let db = Database::connect(scratch.url(), 1).expect("connects");
    db.migrate().expect("migrated");
    let conn = db.pool().get().expect("a connection");
    pool::block(conn.batch_execute(&format!(
        "INSERT INTO ax_runs (id, tenant, task, status, revision, spec_digest,
                              queue_position, bytes, record)
         SELECT lpad(i::text, 26, '0'),
                CASE WHEN i <= 2000 THEN 'deep' ELSE 't' || (i % 3) END, 'task' || (i % 50),
                CASE WHEN i <= 2000 OR i % 10 = 0 THEN 'queued' ELSE 'succeeded' END,
                1, 'digest', CASE WHEN i <= 2000 OR i % 10 = 0 THEN i END,
                2, '\\x7b7d'::bytea
         FROM generate_series(1, {ROWS}) AS i;
         INSERT INTO ax_schedules (tenant, task, next_fire, record)
         SELECT 't' || (i % 5), 'task' || i,
                CASE WHEN i % 10 = 0 THEN NULL ELSE 1000000 + i * 1000 END,
                '\\x7b7d'::bytea
         FROM generate_series(1, {ROWS}) AS i;
         ANALYZE ax_runs;
         ANALYZE ax_schedules;"
    )))
    .expect("filled");
    drop(conn);
    Some((scratch, db))
}

/// The plan of `sql` with `params`, one line per node.
fn explain(db: &Database, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    let conn = db.pool().get().expect("a connection");
    let text = format!("EXPLAIN {sql}");
    let rows = pool::block(conn.query(text.as_str(), params)).expect("explained");
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How a plan must read its table.
#[derive(Clone, Copy, Debug)]
enum Read {
    /// Walking the index in its order, no sort: the limit is below the rows
    /// that match.
    InOrder,
    /// Through the index, in order or as a bitmap of its matching entries
    /// then sorted: the planner expects to read every match anyway, and a
    /// bitmap reads each heap page once.
    Through,
}

/// `plan` reads `table` through `index` as `read` says, and never scans
/// the whole table.
fn assert_reads(plan: &str, table: &str, index: &str, read: Read) {
    let in_order = [
        format!("Index Scan using {index} on {table}"),
        format!("Index Only Scan using {index} on {table}"),
    ]
    .iter()
    .any(|node| plan.contains(node.as_str()));
    let bitmap = plan.contains(&format!("Bitmap Index Scan on {index}"));
    match read {
        Read::InOrder => {
            assert!(in_order, "{table} not read in {index}'s order:\n{plan}");
            assert!(!plan.contains("Sort"), "sorted after reading:\n{plan}");
        }
        Read::Through => assert!(
            in_order || bitmap,
            "{table} not read through {index}:\n{plan}"
        ),
    }
    assert!(
        !plan.contains(&format!("Seq Scan on {table}")),
        "a sequential scan of {table}:\n{plan}"
    );
}

#[test]
fn the_queue_head_reads_the_partial_queue_index() {
    let Some((_scratch, db)) = filled() else {
        return;
    };
    // `recovery.rs` asks for `queue_head` (1,000) runs, `parked.rs` for ids.
    let cases: [(&str, &str, i64, Read); 5] = [
        (QUEUED_IDS, "deep", 100, Read::InOrder),
        (QUEUED_RUNS, "deep", 100, Read::InOrder),
        (QUEUED_RUNS, "deep", 1000, Read::Through),
        (QUEUED_IDS, "t1", 1000, Read::Through),
        (QUEUED_RUNS, "t1", 10, Read::InOrder),
    ];
    for (sql, tenant, limit, read) in cases {
        let plan = explain(&db, sql, &[&tenant, &limit]);
        eprintln!("{sql}\n-- tenant {tenant}, limit {limit}\n{plan}\n");
        assert_reads(&plan, "ax_runs", "ax_runs_queue", read);
    }
}

#[test]
fn the_next_fire_window_reads_the_partial_next_fire_index() {
    let Some((_scratch, db)) = filled() else {
        return;
    };
    // `fire.rs`: a window (`fire_window_s`, 60 s by default) with room for
    // many fires, and the same-instant follow-up without a limit.
    let at = 1_000_000_i64 + 2_500 * 1000;
    let cases: [(i64, i64, i64, Read); 4] = [
        (at, at + 10_000, 1000, Read::Through),
        (at, at + 60_000, 1000, Read::Through),
        (0, i64::MAX, 100, Read::InOrder),
        (at, at, i64::MAX, Read::InOrder),
    ];
    for (from, until, limit, read) in cases {
        let plan = explain(&db, DUE_SCHEDULES, &[&from, &until, &limit]);
        eprintln!("{DUE_SCHEDULES}\n-- {from}..={until}, limit {limit}\n{plan}\n");
        assert_reads(&plan, "ax_schedules", "ax_schedules_next_fire", read);
    }
}
