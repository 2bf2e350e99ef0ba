//! The HTTP API end to end: the router driven in-process with `oneshot`
//! (a real scheduler, the real wasm runtime and real plugins behind it), and
//! once over a real socket with the `ax` client commands.
//!
//! This file holds the in-process [`Host`] and its request helpers (which
//! `tenants` uses too); the tests are in one file per subject:
//! - `bulk`: bulk triggers and bulk apply, per-item errors, all or nothing;
//! - `runs`: upload, apply, trigger and poll; idempotency, timeouts, cancelling, listing;
//! - `dead_letters`: retries, dead letters requeued or resolved, retrying a run;
//! - `schedules`: the cron preview, pausing and resuming a task;
//! - `refusals`: every kind of bad request gets a clear 4xx and changes nothing;
//! - `plugins`: multipart uploads;
//! - `tenancy`: another tenant sees none of the first tenant's objects;
//! - `public`: health, readiness and the dashboard, which need no token;
//! - `cli`: the `ax` client commands against a real socket;
//! - `graph`: task graphs in four formats, with a run's states, and `ax graph`;
//! - `params`: a task's `params:` on save, on manual and bulk triggers, through the service;
//! - `store_faults`: a store refusing writes: 503 `store_unavailable`, nothing stored, readiness.

mod bulk;
mod cli;
mod dead_letters;
mod graph;
mod params;
mod plugins;
mod public;
mod refusals;
mod runs;
mod schedules;
mod store_faults;
mod tenancy;

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ax::api::{ApiState, auth::hash_token, router};
use ax::scheduler::{Scheduler, SchedulerConfig, SystemClock};
use ax::server::WasmRunner;
use ax::service::{Ax, DEFAULT_MAX_PLUGIN_BYTES};
use ax::store::Store;
use ax::store::memory::MemoryStore;
use ax::task::Caps;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::common::{RUNTIME, plugin_bytes};

pub(crate) const TOKEN: &str = "api-test-token";

/// An in-process host: store, scheduler, runtime and the router over them.
pub(crate) struct Host {
    app: Router,
    state: ApiState,
    shutdown: CancellationToken,
    /// The database of a host on PostgreSQL, dropped last.
    _scratch: Option<ax::store::postgres::testing::TestDatabase>,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// What a call answered.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: Value,
}

impl Answer {
    pub(crate) fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

/// A host on the memory store, or under `AX_TEST_STORE=postgres` on a
/// scratch PostgreSQL database.
pub(crate) async fn host() -> Host {
    let Some(scratch) = crate::common::scratch_database() else {
        return host_on(Arc::new(MemoryStore::new())).await;
    };
    let store =
        ax::store::postgres::PgStore::open(scratch.url(), 4).expect("the scratch database opens");
    let mut host = host_on(Arc::new(store)).await;
    host._scratch = Some(scratch);
    host
}

/// A [`host`] on `store`.
pub(crate) async fn host_on(store: Arc<dyn Store>) -> Host {
    // One runtime (engine, pool, compiled plugins) for the whole test binary.
    let runtime = RUNTIME.clone();
    let clock = Arc::new(SystemClock);
    let shutdown = CancellationToken::new();
    let runner = Arc::new(WasmRunner::new(runtime.clone(), store.clone()));
    let (scheduler, _task) = Scheduler::start(
        store.clone(),
        runner,
        clock.clone(),
        SchedulerConfig::default(),
        shutdown.clone(),
    )
    .await
    .expect("scheduler starts");
    let tenants = ax::service::load_registry(store.as_ref(), 0).expect("tenants load");
    let ax = Ax {
        tenants,
        store,
        runtime,
        scheduler,
        clock,
        caps: Caps {
            max_fuel: 10_000_000_000,
            max_memory_mb: 512,
            max_timeout: Duration::from_secs(300),
        },
        max_plugin_bytes: DEFAULT_MAX_PLUGIN_BYTES,
        concurrency: 2,
        plugin_quota: Default::default(),
    };
    let state = ApiState {
        ax,
        admin_token_sha256: hash_token(TOKEN),
        metrics_token_sha256: None,
    };
    Host {
        app: router(state.clone()),
        state,
        shutdown,
        _scratch: None,
    }
}

/// A request with the admin token and, if given, a tenant header.
fn request(method: &str, path: &str, tenant: Option<&str>) -> axum::http::request::Builder {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    if let Some(t) = tenant {
        builder = builder.header("x-ax-tenant", t);
    }
    builder
}

impl Host {
    pub(crate) async fn send(&self, req: Request<Body>) -> Answer {
        let response = self
            .app
            .clone()
            .oneshot(req)
            .await
            .expect("the router never fails");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{status}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn call(&self, method: &str, path: &str, body: impl Into<Body>) -> Answer {
        self.send(request(method, path, None).body(body.into()).unwrap())
            .await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, Body::empty()).await
    }

    async fn post_json(&self, path: &str, body: Value) -> Answer {
        let req = request("POST", path, None)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(req).await
    }

    pub(crate) async fn upload_bytes(&self, name: &str, version: &str, bytes: Vec<u8>) -> Answer {
        let req = request(
            "POST",
            &format!("/v1/plugins?name={name}&version={version}"),
            None,
        )
        .header(header::CONTENT_TYPE, "application/wasm")
        .body(Body::from(bytes))
        .unwrap();
        self.send(req).await
    }

    async fn upload(&self, plugin: &str, name: &str) -> Answer {
        self.upload_bytes(name, "1.0.0", plugin_bytes(plugin)).await
    }

    async fn apply(&self, name: &str, definition: &str) -> Answer {
        let req = request("PUT", &format!("/v1/tasks/{name}"), None)
            .header(header::CONTENT_TYPE, "application/yaml")
            .body(Body::from(definition.to_string()))
            .unwrap();
        self.send(req).await
    }

    async fn trigger(&self, task: &str, body: Value) -> Answer {
        self.post_json(&format!("/v1/tasks/{task}/runs"), body)
            .await
    }

    /// Polls a run until `done` says so (20 s at most).
    pub(crate) async fn wait_until(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answer = self.get(&format!("/v1/runs/{id}")).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            if done(&answer.body) {
                return answer.body;
            }
            assert!(
                Instant::now() < deadline,
                "run never got there: {:#}",
                answer.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_run(&self, id: &str) -> Value {
        self.wait_until(id, |r| {
            matches!(
                r["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            )
        })
        .await
    }

    /// What the list endpoints show (to prove a refused request changed nothing).
    async fn snapshot(&self) -> Vec<Value> {
        // A background compile finishing (`compiling` → `ready`) is not a
        // change a request made: wait for uploads to settle first.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.get("/v1/plugins").await.body["plugins"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["status"] == "compiling"))
        {
            assert!(Instant::now() < deadline, "a plugin stayed compiling");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut out = Vec::new();
        for path in [
            "/v1/plugins",
            "/v1/tasks",
            "/v1/runs",
            "/v1/dead-letters?open=false",
        ] {
            let answer = self.get(path).await;
            assert_eq!(answer.status, StatusCode::OK);
            out.push(answer.body);
        }
        out
    }
}

const HELLO_TASK: &str = "name: hello\nplugin: hello@1.0.0\ninput: { name: \"${input.name}\" }\n";

fn ax_cli(url: &str, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ax"));
    command
        .args(args)
        .env("AX_URL", url)
        .env_remove("AX_TENANT")
        .env_remove("AX_TOKEN");
    if let Some(token) = token {
        command.env("AX_TOKEN", token);
    }
    command.output().expect("running ax")
}
