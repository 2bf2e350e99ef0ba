//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the HTTP API,
//! generated from the code with `utoipa` — never written by hand.
//!
//! - Operations come from `#[utoipa::path]` on every handler (the status
//!   codes and error bodies each can answer, its parameters and body).
//! - Shapes come from `#[derive(ToSchema)]` on the response views
//!   (`views.rs`), the request bodies, the error body (`error.rs`) and the
//!   model's enums, so a renamed field changes the document.
//! - Things every `/v1` operation shares (the bearer token, the
//!   `X-Ax-Tenant` header) are added by [`Shared`] rather than repeated.
//!
//! Keeping it in sync with the router: the router is built from one table
//! ([`super::routes`]); the integration test `openapi::…` compares that
//! table's paths with the document's, and probes the real router for the
//! methods each path takes, so a route added without its `#[utoipa::path]`
//! (or documented with the wrong method) fails the build's tests.
//!
//! The document needs no token, like `/healthz`: it describes the API, it
//! holds no data.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::OpenApi;
use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ObjectBuilder, Required, Type};

use super::{metrics, ops, plugins, runs, secrets, tasks, tenants};

/// The document, built once.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ax",
        description = "ax, a task execution host running sandboxed WebAssembly plugins. Guide with examples: docs/API.md.",
        license(name = "Apache-2.0")
    ),
    paths(
        plugins::upload,
        plugins::list,
        plugins::versions,
        plugins::show,
        plugins::delete,
        tasks::put,
        tasks::list,
        tasks::show,
        tasks::delete,
        tasks::pause,
        tasks::resume,
        tasks::next,
        tasks::graph,
        runs::trigger,
        runs::list,
        runs::show,
        runs::logs,
        runs::events,
        runs::cancel,
        runs::retry,
        runs::rerun_step,
        runs::dead_letters,
        runs::resolve,
        runs::requeue,
        ops::cron_next,
        secrets::put,
        secrets::list,
        secrets::delete,
        tenants::create,
        tenants::list,
        tenants::show,
        tenants::update,
        tenants::quota,
        tenants::disable,
        tenants::enable,
        tenants::create_token,
        tenants::list_tokens,
        tenants::revoke_token,
        tenants::usage,
        ops::healthz,
        ops::readyz,
        metrics::scrape,
        document,
    ),
    modifiers(&Shared),
    security(("bearer" = [])),
    tags(
        (name = "plugins", description = "WebAssembly components, `name@version`, immutable"),
        (name = "tasks", description = "Task definitions and their triggers"),
        (name = "runs", description = "Runs: trigger, inspect, control"),
        (name = "dead letters", description = "Steps that exhausted their retries"),
        (name = "secrets", description = "The tenant's write-only secrets, readable by plugins that list them"),
        (name = "tenants", description = "Admin only: tenants, quotas, tokens, usage"),
        (name = "operations", description = "Health, metrics, cron preview, this document"),
    )
)]
pub struct ApiDoc;

/// Adds what every `/v1` operation shares: the bearer scheme and the
/// optional `X-Ax-Tenant` header (admin tokens only).
struct Shared;

impl utoipa::Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The admin token (printed once by `ax serve`, or AX_ADMIN_TOKEN) or a tenant token.",
                    ))
                    .build(),
            ),
        );
        let tenant = ParameterBuilder::new()
            .name(super::auth::TENANT_HEADER)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "The tenant an admin token acts on (`default` when absent); `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.",
            ))
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .build();
        for (path, item) in doc.paths.paths.iter_mut() {
            if path.starts_with("/v1/") && path != OPENAPI_PATH {
                item.parameters
                    .get_or_insert_with(Vec::new)
                    .push(tenant.clone().into());
            }
        }
    }
}

/// Where the document is served.
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// The document as JSON text (built on first use).
pub fn json() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        ApiDoc::openapi()
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the document: {e}\"}}"))
    });
    &TEXT
}

/// `GET /v1/openapi.json`.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operations", security(()),
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
pub(super) async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}
