//! Plugin capabilities end to end, with real parts: the `probe` test plugin
//! run by the real runtime against an HTTP server on a loopback port started
//! here; KV over the sled store; and a real `ax serve` process for tenant
//! isolation, persistence across a restart, the KV quota and secrets that
//! never leak.
//!
//! This file holds the loopback upstream and the helpers that run `probe`;
//! the tests are in one file per subject:
//! - `http`: outbound HTTP, its allow-list, redirects, timeouts and caps;
//! - `kv_and_secrets`: KV, config and secrets through the runtime;
//! - `server`: the same capabilities on a real `ax serve`;
//! - `exec`: `ax exec` with the grants of a step.

mod exec;
mod http;
mod kv_and_secrets;
mod server;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ax::capability::Grants;
use ax::model::{AttemptReport, Limits, Outcome};
use axum::Router;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::common::{RUNTIME, context, load};

// --- a real upstream on a loopback port --------------------------------------

/// An HTTP server on 127.0.0.1:0 counting the requests it receives.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl Upstream {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn pattern(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A body sent in `n` chunks of 10 KiB, without a content length.
struct Chunks(usize);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if self.0 == 0 {
            return Poll::Ready(None);
        }
        self.0 -= 1;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(vec![
            b'y';
            10 << 10
        ])))))
    }
}

async fn upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new()
        .route("/ok", get(|| async { "hello" }))
        .route("/big", get(|| async { vec![b'x'; 200 << 10] }))
        .route(
            "/stream",
            get(|| async { axum::body::Body::new(Chunks(20)) }),
        )
        .route(
            "/redirect",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                (StatusCode::FOUND, [(header::LOCATION, q["to"].clone())])
            }),
        )
        .route(
            "/hang",
            get(|| async {
                std::future::pending::<()>().await;
                ""
            }),
        )
        .route("/echo", post(|body: String| async move { body }))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            },
        ));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Upstream { addr, hits }
}

// --- running the probe plugin ------------------------------------------------

fn allow(patterns: &[String]) -> Grants {
    Grants {
        allow_http: patterns.iter().map(|p| p.parse().unwrap()).collect(),
        ..Grants::default()
    }
}

fn limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        ..Limits::default()
    }
}

async fn probe(ops: Value, grants: &Grants, limits: &Limits) -> AttemptReport {
    let plugin = load("probe");
    RUNTIME
        .run_with(
            &plugin,
            &context("probe"),
            &json!({ "ops": ops }).to_string(),
            limits,
            grants,
            None,
        )
        .await
        .expect("no host fault")
}

/// The per-operation results of a succeeded probe run.
fn results(report: &AttemptReport) -> Vec<Value> {
    assert_eq!(report.outcome, Outcome::Succeeded, "{report:#?}");
    report.output.as_ref().unwrap()["results"]
        .as_array()
        .unwrap()
        .clone()
}

fn err(result: &Value) -> &str {
    result["err"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {result}"))
}

fn log_text(report: &AttemptReport) -> String {
    report
        .logs
        .iter()
        .map(|l| format!("{} {:?}\n", l.message, l.fields))
        .collect()
}
