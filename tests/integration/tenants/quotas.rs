//! Tenant quotas in-process with real fuel: a tenant out of fuel is held
//! while others run and a raise releases it, usage equals the attempts'
//! fuel; the trigger rate, the queue cap and the caps on task definitions.

use axum::http::{StatusCode, header};
use serde_json::{Value, json};

use super::{As, call, echo_task, fuel_of, run_to_end, tenant, trigger, wait};
use crate::api::host;

#[tokio::test]
async fn a_tenant_out_of_fuel_is_held_others_run_and_a_raise_releases_it() {
    let h = host().await;
    let other = tenant(&h, "other", json!({})).await;
    echo_task(&h, &other, "").await;
    // What one echo attempt costs, measured on the unlimited tenant.
    let f = fuel_of(&run_to_end(&h, &other).await);
    assert!(f > 0);

    let budget = 2 * f + f / 2;
    let burner = tenant(
        &h,
        "burner",
        json!({ "fuel_per_window": budget, "window": "1d" }),
    )
    .await;
    echo_task(&h, &burner, "").await;
    let r1 = run_to_end(&h, &burner).await;
    let r2 = run_to_end(&h, &burner).await;
    let r3 = run_to_end(&h, &burner).await;
    assert_eq!(
        (r1["status"].as_str(), r2["status"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    // The third attempt got only what was left, and ran out of it.
    assert_eq!(r3["status"], "failed", "{r3:#}");
    assert_eq!(r3["steps"][0]["attempts"][0]["outcome"], "fuel_exhausted");
    let burned = fuel_of(&r1) + fuel_of(&r2) + fuel_of(&r3);
    assert_eq!(burned, budget, "never more than the budget");

    // Now held: the run waits in `queued` with the reason visible.
    let held = trigger(&h, &burner).await;
    assert_eq!(held.status, StatusCode::CREATED);
    let held_id = held.body["id"].as_str().unwrap().to_string();
    let seen = wait(&h, &burner, &held_id, |r| r["held"].is_string()).await;
    assert_eq!(seen["status"], "queued");
    assert!(
        seen["held"].as_str().unwrap().contains("fuel budget"),
        "{seen}"
    );
    // Another tenant is unaffected.
    assert_eq!(run_to_end(&h, &other).await["status"], "succeeded");
    assert_eq!(
        call(
            &h,
            As::Token(&burner),
            "GET",
            &format!("/v1/runs/{held_id}"),
            ""
        )
        .await
        .body["status"],
        "queued"
    );

    // Usage equals the sum of the attempts' fuel (written behind: poll briefly).
    let mut usage = Value::Null;
    for _ in 0..200 {
        usage = call(&h, As::Admin(None), "GET", "/v1/tenants/burner/usage", "")
            .await
            .body;
        if usage["total"]["attempts"] == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(usage["total"]["fuel"], burned, "{usage:#}");
    assert_eq!(usage["total"]["attempts"], 3);
    assert_eq!(usage["by_task"]["work"]["fuel"], burned);
    assert_eq!(usage["total"]["outcomes"]["fuel_exhausted"], 1);
    assert_eq!(usage["window"]["fuel_used"], burned);
    assert_eq!(usage["window"]["fuel_budget"], budget);
    let day = call(
        &h,
        As::Admin(None),
        "GET",
        "/v1/tenants/burner/usage?from=2000-01-01&to=2000-01-02",
        "",
    )
    .await;
    assert_eq!(day.body["total"]["fuel"], 0, "another range, nothing used");

    // Refuse mode: a trigger now answers 429 with Retry-After.
    let refuse = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/burner/quota",
        &json!({ "fuel_per_window": budget, "out_of_fuel": "refuse" }).to_string(),
    )
    .await;
    assert_eq!(refuse.status, StatusCode::OK, "{}", refuse.body);
    let r = trigger(&h, &burner).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
    );
    assert!(r.headers.contains_key(header::RETRY_AFTER));

    // A raise releases the held run, without a restart.
    let raise = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/burner/quota",
        &json!({ "fuel_per_window": budget * 10 }).to_string(),
    )
    .await;
    assert_eq!(raise.status, StatusCode::OK);
    let done = wait(&h, &burner, &held_id, |r| r["status"] == "succeeded").await;
    assert!(done.get("held").is_none(), "{done}");
}

#[tokio::test]
async fn trigger_rate_queue_cap_and_attempt_caps_are_enforced() {
    let h = host().await;
    let t = tenant(
        &h,
        "capped",
        json!({ "trigger_rate_per_sec": 1, "max_fuel_per_attempt": 5000000, "max_timeout": "10s" }),
    )
    .await;
    echo_task(&h, &t, "").await;
    let first = trigger(&h, &t).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let first = first.body["id"].as_str().unwrap().to_string();
    let r = trigger(&h, &t).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
    );
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    wait(&h, &t, &first, |r| r["status"] == "succeeded").await;
    // Definitions above the tenant's caps are refused with the cap named.
    let over = call(
        &h,
        As::Token(&t),
        "PUT",
        "/v1/tasks/big",
        "name: big\nplugin: echo@1.0.0\nlimits: { fuel: 6000000 }\n",
    )
    .await;
    assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        over.body.to_string().contains("cap of 5000000"),
        "{}",
        over.body
    );
    let slow = call(
        &h,
        As::Token(&t),
        "PUT",
        "/v1/tasks/slow",
        "name: slow\nplugin: echo@1.0.0\nlimits: { timeout: 1m }\n",
    )
    .await;
    assert_eq!(
        slow.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        slow.body
    );
    // A queued-run cap: hold the tenant (budget used up), then fill its queue.
    let q = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"fuel_per_window": 1, "max_queued_runs": 1}"#,
    )
    .await;
    assert_eq!(q.status, StatusCode::OK, "{}", q.body);
    // The run before used more than 1 fuel in this window: the next is held.
    let held = trigger(&h, &t).await;
    assert_eq!(held.status, StatusCode::CREATED, "held, queued");
    let held = held.body["id"].as_str().unwrap().to_string();
    wait(&h, &t, &held, |r| r["held"].is_string()).await;
    let r = trigger(&h, &t).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "queue_full")
    );
    // Bad quotas are refused with the field named, and change nothing.
    let bad = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"window": "90m"}"#,
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.to_string().contains("window"), "{}", bad.body);
    let unknown = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"fuel": 1}"#,
    )
    .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    let shown = call(&h, As::Admin(None), "GET", "/v1/tenants/capped", "").await;
    assert_eq!(shown.body["quota"]["fuel_per_window"], 1);
    assert_eq!(shown.body["quota"]["max_queued_runs"], 1);
}
