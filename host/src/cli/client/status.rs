//! `ax status`: the health of a server at a glance, from existing routes —
//! the signals the seed articles run a scheduler by: is it up and ready,
//! which store it runs on (with the pool's use on PostgreSQL, from `/readyz`),
//! the backlog (queued runs), what is running, the recent success rate,
//! start lateness of scheduled runs, open dead letters, the tenant's fuel
//! window (with the admin token; a tenant token may not read it), and what
//! fires next.
//!
//! Counts of queued and running runs stop at [`COUNT_CAP`] (one page of the
//! run listing); beyond that `ax status` says `1000+`. The success rate and
//! lateness are over the newest [`RECENT`] runs: a glance, not a report
//! (`/metrics` has the exact counters).
//!
//! Exit codes: 0 when the server is healthy and ready, 1 when it answers but
//! is not ready, 2 when it cannot be reached or refuses the token.

use std::process::ExitCode;

use chrono::Utc;
use serde_json::{Value, json};

use super::http::{Client, all_pages, enc};
use super::output::{cell, human_ms, instant, items, print_json, table};
use super::{Conn, Failure, Outcome};

/// Largest count asked for in one listing.
const COUNT_CAP: usize = 1000;
/// Runs the success rate and lateness are computed over.
const RECENT: usize = 200;
/// Next fire instants shown.
const NEXT_FIRES: usize = 5;

#[derive(Debug, clap::Args)]
pub(in crate::cli) struct StatusArgs {
    #[command(flatten)]
    conn: Conn,
}

/// `(count, more)`: how many runs in `status`, and whether there are more than the cap.
fn count(client: &Client, status: &str) -> Result<(usize, bool), Failure> {
    let v = client.get(&format!("/v1/runs?status={status}&limit={COUNT_CAP}"))?;
    Ok((items(&v["runs"]).count(), !v["next_cursor"].is_null()))
}

/// The p-quantile of sorted values.
fn quantile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len() - 1);
    Some(sorted[i])
}

/// What `ax status` knows, as the JSON it prints with `--json`.
fn gather(client: &Client) -> Result<Value, Failure> {
    let health = client.get("/healthz")?;
    // 503 is an answer here, not an error.
    let (ready, store) = match client.get("/readyz") {
        Ok(body) => (true, body["store"].clone()),
        Err(f) if f.code == "unavailable" => (false, Value::Null),
        Err(f) => return Err(f),
    };
    let (queued, queued_more) = count(client, "queued")?;
    let (running, running_more) = count(client, "running")?;
    let recent = client.get(&format!("/v1/runs?limit={RECENT}"))?;
    let runs: Vec<&Value> = items(&recent["runs"]).collect();
    let finished = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
    let (succeeded, failed) = (finished("succeeded"), finished("failed"));
    let rate = (succeeded + failed > 0).then(|| succeeded as f64 / (succeeded + failed) as f64);
    let mut lateness: Vec<i64> = runs
        .iter()
        .filter(|r| r["trigger"] != "manual")
        .filter_map(|r| {
            Some((instant(&r["started_at"])? - instant(&r["scheduled_for"])?).num_milliseconds())
        })
        .collect();
    lateness.sort_unstable();
    // The tenant's fuel window, where the token may read it (the admin's).
    let tenant = client.tenant.as_deref().unwrap_or("default");
    let window = match client.get(&format!("/v1/tenants/{}/usage", enc(tenant))) {
        Ok(usage) => json!({
            "tenant": tenant,
            "fuel_used": usage["window"]["fuel_used"],
            "fuel_budget": usage["window"]["fuel_budget"],
            "end": usage["window"]["end"],
            "held": usage["window"]["held"],
        }),
        Err(f) if f.code == "forbidden" => Value::Null,
        Err(f) => return Err(f),
    };
    let dead = client.get("/v1/dead-letters")?;
    let tasks = all_pages(client, "/v1/tasks", "tasks")?;
    let mut next: Vec<(String, String)> = tasks
        .iter()
        .filter_map(|t| Some((t["next_fire"].as_str()?.to_string(), cell(&t["name"]))))
        .collect();
    next.sort();
    next.truncate(NEXT_FIRES);
    Ok(json!({
        "healthy": health["status"] == "ok",
        "ready": ready,
        "store": store,
        "queued": queued,
        "queued_more": queued_more,
        "running": running,
        "running_more": running_more,
        "recent": {
            "runs": runs.len(),
            "succeeded": succeeded,
            "failed": failed,
            "success_rate": rate,
            "lateness_p50_ms": quantile(&lateness, 0.5),
            "lateness_p95_ms": quantile(&lateness, 0.95),
        },
        "dead_letters_open": items(&dead["dead_letters"]).count(),
        "fuel_window": window,
        "tasks": tasks.len(),
        "next_fires": next.iter().map(|(at, task)| json!({"task": task, "at": at})).collect::<Vec<_>>(),
    }))
}

fn counted(n: &Value, more: &Value) -> String {
    if more.as_bool().unwrap_or(false) {
        format!("{}+", cell(n))
    } else {
        cell(n)
    }
}

/// The store's kind and, on PostgreSQL, its pool's use.
fn store_line(store: &Value) -> String {
    let Some(kind) = store["kind"].as_str() else {
        return "- (not ready)".into();
    };
    let p = &store["pool"];
    if p.is_null() {
        return kind.to_string();
    }
    let mean = match p["mean_call_ms"].as_f64() {
        Some(ms) => format!(", mean {ms:.2} ms"),
        None => String::new(),
    };
    format!(
        "{kind}: {} of {} connections in use ({} open), {} connection errors, {} calls{mean}",
        cell(&p["in_use"]),
        cell(&p["max"]),
        cell(&p["open"]),
        cell(&p["connection_errors"]),
        cell(&p["calls"]),
    )
}

fn print_human(url: &str, s: &Value) {
    let up = match (s["healthy"].as_bool(), s["ready"].as_bool()) {
        (Some(true), Some(true)) => "healthy, ready",
        (Some(true), _) => "healthy, NOT READY (the store does not answer)",
        _ => "NOT HEALTHY",
    };
    let r = &s["recent"];
    let rate = match r["success_rate"].as_f64() {
        Some(rate) => format!(
            "{:.1}% of the last {} finished runs ({} failed)",
            rate * 100.0,
            r["succeeded"].as_u64().unwrap_or(0) + r["failed"].as_u64().unwrap_or(0),
            cell(&r["failed"])
        ),
        None => "- (no finished runs yet)".into(),
    };
    let late = match (r["lateness_p50_ms"].as_i64(), r["lateness_p95_ms"].as_i64()) {
        (Some(p50), Some(p95)) => format!(
            "p50 {}, p95 {} (scheduled → started, recent scheduled runs)",
            human_ms(p50.max(0) as f64),
            human_ms(p95.max(0) as f64)
        ),
        _ => "- (no recent scheduled runs)".into(),
    };
    let w = &s["fuel_window"];
    let fuel = if w.is_null() {
        "- (a tenant token cannot read it)".to_string()
    } else {
        let budget = match w["fuel_budget"].as_u64() {
            Some(b) => format!(" of {b}"),
            None => " (no budget)".into(),
        };
        let held = if w["held"].is_string() {
            format!("; HELD: {}", cell(&w["held"]))
        } else {
            String::new()
        };
        format!(
            "{}{budget} used by tenant {} until {}{held}",
            cell(&w["fuel_used"]),
            cell(&w["tenant"]),
            cell(&w["end"])
        )
    };
    let lines = [
        ("server", format!("{url}  {up}")),
        ("store", store_line(&s["store"])),
        ("queued", counted(&s["queued"], &s["queued_more"])),
        ("running", counted(&s["running"], &s["running_more"])),
        ("success", rate),
        ("lateness", late),
        (
            "dead",
            format!("{} open dead letters", cell(&s["dead_letters_open"])),
        ),
        ("fuel", fuel),
        ("tasks", cell(&s["tasks"])),
    ];
    for (k, v) in lines {
        println!("{k:<10}{v}");
    }
    let now = Utc::now();
    let rows: Vec<Vec<String>> = items(&s["next_fires"])
        .map(|f| {
            let inn = instant(&f["at"])
                .map(|at| {
                    let ms = (at - now).num_milliseconds().max(0) as f64;
                    format!("in {}", human_ms(ms))
                })
                .unwrap_or_default();
            vec![cell(&f["task"]), cell(&f["at"]), inn]
        })
        .collect();
    if !rows.is_empty() {
        println!("\nnext fires");
        print!("{}", table(&["TASK", "AT", "IN"], &rows));
    }
}

/// `ax status`.
pub(super) fn status(args: StatusArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let s = gather(&client)?;
    if args.conn.json {
        print_json(&s);
    } else {
        print_human(&client.base, &s);
    }
    Ok(if s["healthy"] == true && s["ready"] == true {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
