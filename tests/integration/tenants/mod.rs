//! Tenants end to end, in-process over the real router, scheduler, runtime
//! and plugins: the authorization matrix over every route, quotas with real
//! fuel (held, refused, released by a raise), usage equal to the attempts'
//! fuel, trigger-rate and queue caps, and caps on task definitions; and on a
//! real server (`fairness`), the fuel of timed-out and cancelled attempts,
//! the wall-time budget and the priority ceiling.
//!
//! This file holds the in-process helpers (callers, tenants, runs); the
//! tests are in one file per subject:
//! - `authorization`: every route against each kind of caller;
//! - `quotas`: fuel budgets, usage, trigger-rate, queue and attempt caps;
//! - `cli`: the `ax tenant` commands, and tenants surviving a restart;
//! - `fairness`: fuel and wall time charged on a real server, the priority ceiling.

mod authorization;
mod cli;
mod fairness;
mod quotas;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};

use crate::api::{Answer, Host, TOKEN};
use crate::common::plugin_bytes;

/// Who a request is sent as.
#[derive(Clone, Copy, Debug)]
enum As<'a> {
    Nobody,
    Token(&'a str),
    Admin(Option<&'a str>),
}

fn req(who: As<'_>, method: &str, path: &str, body: Body) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    match who {
        As::Nobody => {}
        As::Token(t) => b = b.header(header::AUTHORIZATION, format!("Bearer {t}")),
        As::Admin(tenant) => {
            b = b.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
            if let Some(t) = tenant {
                b = b.header("x-ax-tenant", t);
            }
        }
    }
    b.body(body).expect("request")
}

async fn call(h: &Host, who: As<'_>, method: &str, path: &str, body: &str) -> Answer {
    h.send(req(who, method, path, Body::from(body.to_string())))
        .await
}

/// Creates a tenant with `quota` and returns a token for it.
async fn tenant(h: &Host, name: &str, quota: Value) -> String {
    let a = call(
        h,
        As::Admin(None),
        "POST",
        "/v1/tenants",
        &json!({ "name": name, "quota": quota }).to_string(),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let a = call(
        h,
        As::Admin(None),
        "POST",
        &format!("/v1/tenants/{name}/tokens"),
        r#"{"label": "test"}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    a.body["token"]
        .as_str()
        .expect("token shown once")
        .to_string()
}

/// Uploads echo and applies task `work` as `token`'s tenant.
async fn echo_task(h: &Host, token: &str, extra: &str) {
    let up = h
        .send(
            Request::builder()
                .method("POST")
                .uri("/v1/plugins?name=echo&version=1.0.0")
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .header(header::CONTENT_TYPE, "application/wasm")
                .body(Body::from(plugin_bytes("echo")))
                .unwrap(),
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let def = format!("name: work\nplugin: echo@1.0.0\ninput: {{ n: 1 }}\n{extra}");
    let a = call(h, As::Token(token), "PUT", "/v1/tasks/work", &def).await;
    assert!(a.status.is_success(), "{}", a.body);
}

async fn trigger(h: &Host, token: &str) -> Answer {
    call(h, As::Token(token), "POST", "/v1/tasks/work/runs", "{}").await
}

async fn run_to_end(h: &Host, token: &str) -> Value {
    let a = trigger(h, token).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    wait(h, token, a.body["id"].as_str().unwrap(), |r| {
        matches!(
            r["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        )
    })
    .await
}

async fn wait(h: &Host, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..2000 {
        let a = call(h, As::Token(token), "GET", &format!("/v1/runs/{id}"), "").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        if done(&a.body) {
            return a.body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("run {id} never got there");
}

fn fuel_of(run: &Value) -> u64 {
    run["steps"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["fuel_consumed"].as_u64().unwrap())
        .sum()
}
