//! Fairness on a real server: the fuel of cancelled and timed-out
//! attempts charged (and counted), the wall-time budget cutting blocked
//! attempts, and the priority ceiling.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;
use crate::live::{Live, Reply};

/// Fuel a guest spinning for half a second surely burns (~2e9 units/s on
/// one free core; a tenth of a core suffices).
const MIN_SPIN_FUEL: u64 = 100_000_000;

/// Creates tenant `name` with `quota` (admin).
async fn tenant(live: &Live, name: &str, quota: Value) {
    let body = json!({ "name": name, "quota": quota }).to_string();
    live.send("POST", "/v1/tenants", "application/json", &body)
        .await;
}

/// A call as the admin acting on `tenant`.
async fn call(live: &Live, tenant: &str, method: &str, path: &str, body: &str) -> Reply {
    let ct = if body.starts_with('{') {
        "application/json"
    } else {
        "application/yaml"
    };
    let body = (!body.is_empty()).then(|| (ct, body.as_bytes().to_vec()));
    live.call(method, path, &[("x-ax-tenant", tenant)], body)
        .await
}

async fn ok(live: &Live, tenant: &str, method: &str, path: &str, body: &str) -> Value {
    let r = call(live, tenant, method, path, body).await;
    assert!(
        (200..300).contains(&r.status),
        "{method} {path}: {} {}",
        r.status,
        r.text
    );
    r.json()
}

/// Uploads plugin file `file` as `name@1.0.0` for `tenant`, then saves
/// task `name` running it with `limits`.
async fn task(live: &Live, tenant: &str, file: &str, name: &str, limits: &str) {
    let r = live
        .call(
            "POST",
            &format!("/v1/plugins?name={name}&version=1.0.0"),
            &[("x-ax-tenant", tenant)],
            Some(("application/wasm", plugin_bytes(file))),
        )
        .await;
    assert!(matches!(r.status, 200 | 201), "{} {}", r.status, r.text);
    // Uploads compile in the background: a run started before the compile
    // ends waits for it in `running`, which a test timing its attempt
    // (cancel after it has burned fuel) must not mistake for execution.
    until("the plugin compiles", || async {
        let v = ok(
            live,
            tenant,
            "GET",
            &format!("/v1/plugins/{name}/1.0.0"),
            "",
        )
        .await;
        (v["status"] != "compiling").then_some(())
    })
    .await;
    let def = format!("name: {name}\nplugin: {name}@1.0.0\nlimits: {limits}\n");
    ok(live, tenant, "PUT", &format!("/v1/tasks/{name}"), &def).await;
}

async fn trigger(live: &Live, tenant: &str, task: &str) -> String {
    let run = ok(
        live,
        tenant,
        "POST",
        &format!("/v1/tasks/{task}/runs"),
        "{}",
    )
    .await;
    run["id"].as_str().expect("run id").to_string()
}

async fn run(live: &Live, tenant: &str, id: &str) -> Value {
    ok(live, tenant, "GET", &format!("/v1/runs/{id}"), "").await
}

/// Polls `f` until it answers `Some` (60 s at most).
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn terminal(run: &Value) -> bool {
    matches!(
        run["status"].as_str(),
        Some("succeeded" | "failed" | "cancelled")
    )
}

/// `ax_attempts_total` of `tenant` and `outcome` in a scrape.
fn attempts_metric(scrape: &str, tenant: &str, outcome: &str) -> f64 {
    scrape
        .lines()
        .find(|l| {
            l.starts_with("ax_attempts_total{")
                && l.contains(&format!("tenant=\"{tenant}\""))
                && l.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A cancelled attempt ends `cancelled`, with its end and the fuel it
/// burned, and moves `ax_attempts_total{outcome="cancelled"}`. (Probe:
/// outcome and finished_at stayed null, fuel 0, the metric did not move.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_attempt_ends_cancelled_with_its_fuel_and_is_counted() {
    let live = Live::start(|_| {}).await;
    tenant(&live, "acme", json!({})).await;
    task(
        &live,
        "acme",
        "hostile_spin",
        "spin",
        "{ fuel: 100000000000, timeout: 60s }",
    )
    .await;
    let id = trigger(&live, "acme", "spin").await;
    until("the attempt runs", || async {
        (run(&live, "acme", &id).await["steps"][0]["status"] == "running").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cancelled = ok(&live, "acme", "POST", &format!("/v1/runs/{id}/cancel"), "").await;
    assert_eq!(cancelled["status"], "cancelled");
    let attempt = until("the attempt is recorded", || async {
        let r = run(&live, "acme", &id).await;
        let a = r["steps"][0]["attempts"][0].clone();
        (!a["outcome"].is_null()).then_some(a)
    })
    .await;
    assert_eq!(attempt["outcome"], "cancelled", "{attempt}");
    assert!(attempt["finished_at"].is_string(), "{attempt}");
    let fuel = attempt["fuel_consumed"].as_u64().unwrap();
    assert!(fuel >= MIN_SPIN_FUEL, "{attempt}");
    let scrape = live.call("GET", "/metrics", &[], None).await.text;
    assert_eq!(attempts_metric(&scrape, "acme", "cancelled"), 1.0);
    // And it is in the usage report.
    let usage = until("usage is written", || async {
        let u = ok(&live, "acme", "GET", "/v1/tenants/acme/usage", "").await;
        (u["total"]["attempts"] == 1).then_some(u)
    })
    .await;
    assert_eq!(usage["total"]["fuel"], fuel);
    assert_eq!(usage["total"]["outcomes"]["cancelled"], 1);
    live.stop().await;
}

/// Spins that each time out: charged what they burned, they use up a
/// fuel budget of 2.5e9 and the tenant is held. (Probe: charged 2,190
/// each, 43,800 for 20, never held.) Each may burn 2.5e9 (the whole
/// budget) but is stopped after 25 ms: 100 ms of spinning burned 1.7e9 to
/// 1.9e9 here, so 25 ms burns about a fifth of the budget, and a machine
/// up to five times faster still times out rather than runs out of fuel
/// (at 100 ms a faster CI machine ran the first spin out of fuel). 40 of
/// them use the budget up while a spin gets a sixth of a core or more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_spins_use_up_the_fuel_budget_and_the_tenant_is_held() {
    const BUDGET: u64 = 2_500_000_000;
    let live = Live::start(|_| {}).await;
    tenant(
        &live,
        "burner",
        json!({ "fuel_per_window": BUDGET, "window": "1h" }),
    )
    .await;
    task(
        &live,
        "burner",
        "hostile_spin",
        "spin",
        "{ fuel: 2500000000, timeout: 25ms }",
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        ids.push(trigger(&live, "burner", "spin").await);
    }
    let held = until("the tenant is held, or every run ended", || async {
        let t = ok(&live, "burner", "GET", "/v1/tenants/burner", "").await;
        if let Some(h) = t["held"].as_str()
            && h.contains("used its fuel budget")
        {
            return Some(Some(h.to_string()));
        }
        let last = run(&live, "burner", ids.last().unwrap()).await;
        terminal(&last).then_some(None)
    })
    .await;
    let held = held.unwrap_or_else(|| panic!("40 timed-out spins did not use up {BUDGET} fuel"));
    assert!(held.contains(&format!("of {BUDGET}")), "{held}");
    let (mut charged, mut queued, mut timed_out) = (0, 0, 0);
    let mut seen = Vec::new();
    for id in &ids {
        let r = run(&live, "burner", id).await;
        if r["status"] == "queued" {
            queued += 1;
        }
        for a in r["steps"][0]["attempts"].as_array().unwrap() {
            let fuel = a["fuel_consumed"].as_u64().unwrap();
            seen.push(format!("{} {fuel} {}ms", a["outcome"], a["duration_ms"]));
            if a["outcome"] == "timed_out" {
                timed_out += 1;
                assert!(fuel >= 5_000_000, "a timed-out spin charged {fuel}");
            }
            charged += fuel;
        }
    }
    assert!(timed_out > 0, "the spins timed out: {seen:?}");
    assert!(queued > 0, "runs wait for the next window");
    assert!(charged <= BUDGET, "never more than the budget: {charged}");
    live.stop().await;
}

/// Attempts blocked in a host call (a WASI sleep) burn almost no fuel:
/// the wall-time budget charges their duration, cuts the deadline of the
/// one that would pass it, and holds the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_attempts_use_up_the_wall_budget_and_the_last_is_cut() {
    const BUDGET_MS: f64 = 1_000.0;
    let live = Live::start(|_| {}).await;
    tenant(
        &live,
        "sleeper",
        json!({ "wall_ms_per_window": BUDGET_MS as u64, "window": "1h" }),
    )
    .await;
    task(
        &live,
        "sleeper",
        "hostile_sleep",
        "sleep",
        "{ timeout: 400ms }",
    )
    .await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(trigger(&live, "sleeper", "sleep").await);
    }
    let held = until("the tenant is held for wall time", || async {
        let t = ok(&live, "sleeper", "GET", "/v1/tenants/sleeper", "").await;
        t["held"]
            .as_str()
            .filter(|h| h.contains("used its wall-time budget"))
            .map(str::to_string)
    })
    .await;
    assert!(held.contains("of 1000 ms"), "{held}");
    let (mut wall, mut attempts, mut cut, mut queued) = (0.0, 0, 0, 0);
    for id in &ids {
        let r = run(&live, "sleeper", id).await;
        queued += usize::from(r["status"] == "queued");
        for a in r["steps"][0]["attempts"].as_array().unwrap() {
            assert_eq!(a["outcome"], "timed_out", "{a}");
            wall += a["duration_ms"].as_f64().unwrap();
            attempts += 1;
            let e = a["error"].as_str().unwrap_or("");
            cut += usize::from(e.contains("wall-time budget"));
        }
    }
    assert!(queued > 0, "runs wait for the next window");
    assert!(cut >= 1, "the last deadline was cut to what was left");
    // Each attempt overshoots its deadline by at most a tick and a poll.
    assert!(
        wall <= BUDGET_MS + 50.0 * attempts as f64,
        "{wall} ms in {attempts} attempts"
    );
    let usage = ok(&live, "sleeper", "GET", "/v1/tenants/sleeper/usage", "").await;
    assert_eq!(usage["window"]["wall_ms_budget"], 1000);
    live.stop().await;
}

/// The priority ceiling, refused where a priority is asked for: a task
/// above it and a trigger's override above it are `422` at `priority`,
/// and nothing changes; the admin raises it per tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priorities_above_the_ceiling_are_refused_until_the_admin_raises_it() {
    let live = Live::start(|_| {}).await;
    tenant(&live, "team", json!({})).await;
    task(&live, "team", "echo", "echo", "{ timeout: 5s }").await;
    let shown = ok(&live, "team", "GET", "/v1/tenants/team", "").await;
    assert_eq!(shown["effective"]["max_priority"], 6, "{shown}");
    let slots = std::thread::available_parallelism().map_or(2, |n| n.get());
    assert_eq!(
        shown["effective"]["max_concurrent_attempts"],
        (slots / 2).max(1),
        "half the slots"
    );
    let urgent = "name: urgent\nplugin: echo@1.0.0\npriority: 9\n";
    let r = call(&live, "team", "PUT", "/v1/tasks/urgent", urgent).await;
    assert_eq!(r.status, 422, "{}", r.text);
    let body = r.json();
    assert_eq!(body["error"]["code"], "invalid");
    assert_eq!(body["error"]["details"]["path"], "priority");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("priority ceiling of tenant `team` (6;"),
        "{body}"
    );
    let gone = call(&live, "team", "GET", "/v1/tasks/urgent", "").await;
    assert_eq!(gone.status, 404, "nothing was saved");
    let r = call(
        &live,
        "team",
        "POST",
        "/v1/tasks/echo/runs",
        r#"{"priority": 7}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.json()["error"]["details"]["path"], "priority");
    let at_ceiling = ok(
        &live,
        "team",
        "POST",
        "/v1/tasks/echo/runs",
        r#"{"priority": 6}"#,
    )
    .await;
    assert_eq!(at_ceiling["priority"], 6);
    // A bad ceiling is refused; a good one lets the task in.
    let r = live
        .call(
            "PUT",
            "/v1/tenants/team/quota",
            &[],
            Some(("application/json", br#"{"max_priority": 10}"#.to_vec())),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    live.send(
        "PUT",
        "/v1/tenants/team/quota",
        "application/json",
        r#"{"max_priority": 9}"#,
    )
    .await;
    ok(&live, "team", "PUT", "/v1/tasks/urgent", urgent).await;
    // `default`, the owner's tenant, has every priority without a quota.
    let default = live.get("/v1/tenants/default").await;
    assert_eq!(default["effective"]["max_priority"], 9);
    assert!(default["effective"]["max_concurrent_attempts"].is_null());
    live.stop().await;
}
