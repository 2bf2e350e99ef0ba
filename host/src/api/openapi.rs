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
//! - What annotations cannot state — every error status each route can
//!   answer, the patterns, ranges and required fields the server enforces —
//!   is applied last by [`super::contract`], from one table and from the
//!   constants validation uses ([`document`] is the result).
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

use super::{alerts, metrics, ops, plugins, records, runs, secrets, tasks, tenants};

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
        plugins::put_tag,
        plugins::delete_tag,
        tasks::put,
        tasks::apply,
        tasks::list,
        tasks::show,
        tasks::delete,
        tasks::pause,
        tasks::resume,
        tasks::next,
        tasks::graph,
        runs::trigger,
        runs::trigger_batch,
        runs::list,
        runs::show,
        runs::logs,
        runs::events,
        runs::cancel,
        runs::retry,
        runs::rerun_step,
        records::record,
        records::component,
        runs::dead_letters,
        runs::resolve,
        runs::requeue,
        alerts::list,
        alerts::retry,
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
        serve_document,
    ),
    modifiers(&Shared),
    security(("bearer" = [])),
    tags(
        (name = "plugins", description = "WebAssembly components, `name@version`, immutable; tags, movable names for versions"),
        (name = "tasks", description = "Task definitions and their triggers"),
        (name = "runs", description = "Runs: trigger, inspect, control"),
        (name = "dead letters", description = "Steps that exhausted their retries"),
        (name = "alerts", description = "The webhook alert outbox: pending, delivered and dead alerts; retry a dead one"),
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

/// The whole document: utoipa's, with the contract applied.
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(
        |e| serde_json::json!({"error": format!("cannot render the document: {e}")}),
    );
    super::contract::apply(&mut doc);
    doc
}

/// The document as JSON text (built on first use).
pub fn json() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        serde_json::to_string_pretty(&document())
            .unwrap_or_else(|e| format!("{{\"error\": \"cannot render the document: {e}\"}}"))
    });
    &TEXT
}

/// `GET /v1/openapi.json`.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operations", security(()),
    responses((status = 200, description = "This document", content_type = "application/json", body = Object)))]
pub(super) async fn serve_document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::contract::{self, ROUTES};

    const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

    /// `(method, path, operation)` of every operation of `doc`.
    fn operations(doc: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for m in METHODS {
                if let Some(op) = item.get(m) {
                    out.push((m.to_string(), path.clone(), op.clone()));
                }
            }
        }
        out
    }

    #[test]
    fn every_operation_has_a_contract_entry_and_every_entry_an_operation() {
        let doc = document();
        let ops: std::collections::BTreeSet<(String, String)> = operations(&doc)
            .into_iter()
            .map(|(m, p, _)| (m, p))
            .collect();
        let table: std::collections::BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        assert_eq!(
            ops.difference(&table).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "operations without an entry in contract::ROUTES"
        );
        assert_eq!(
            table.difference(&ops).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "contract::ROUTES entries without an operation"
        );
    }

    #[test]
    fn error_statuses_in_annotations_are_in_the_contract_too() {
        let raw = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let done = document();
        for (method, path, op) in operations(&raw) {
            for status in op["responses"].as_object().unwrap().keys() {
                if status.as_str() < "400" {
                    continue;
                }
                assert!(
                    done["paths"][&path][&method]["responses"]
                        .get(status)
                        .is_some(),
                    "{method} {path}: `#[utoipa::path]` says it answers {status}, but \
                     contract::ROUTES (or contract::shared_codes) does not; declare the \
                     code there"
                );
            }
        }
    }

    #[test]
    fn each_error_status_lists_its_codes_and_the_error_body() {
        let doc = document();
        let trigger = &doc["paths"]["/v1/tasks/{name}/runs"]["post"]["responses"];
        let too_many = &trigger["429"];
        assert!(
            too_many["description"]
                .as_str()
                .unwrap()
                .contains("`queue_full`"),
            "{too_many}"
        );
        assert_eq!(too_many["headers"]["retry-after"]["required"], true);
        assert_eq!(
            trigger["400"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorBody"
        );
        let bad = trigger["400"]["description"].as_str().unwrap();
        for code in ["invalid_tenant", "invalid_json", "bad_request"] {
            assert!(bad.contains(&format!("`{code}`")), "{bad}");
        }
        // The open routes have no token to refuse.
        let health = &doc["paths"]["/healthz"]["get"]["responses"];
        assert!(health.get("401").is_none(), "{health}");
        assert!(health.get("500").is_some(), "{health}");
        let statuses = |path: &str, m: &str| -> Vec<String> {
            doc["paths"][path][m]["responses"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(
            statuses("/v1/tenants/{tenant}/disable", "post"),
            // 429: a token at `connections.max_per_token`, on any `/v1` route.
            [
                "200", "400", "401", "403", "404", "409", "429", "500", "503"
            ]
        );
        let _ = contract::route_of("get", "/v1/runs").expect("an entry");
    }

    #[test]
    fn parameters_state_what_the_server_checks() {
        let doc = document();
        let param = |path: &str, m: &str, name: &str| -> serde_json::Value {
            let op = &doc["paths"][path][m];
            let from_item = doc["paths"][path]["parameters"].as_array().cloned();
            op["parameters"]
                .as_array()
                .cloned()
                .into_iter()
                .chain(from_item)
                .flatten()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{m} {path}: no parameter {name}"))
        };
        let limit = param("/v1/runs", "get", "limit");
        assert_eq!(limit["schema"]["minimum"], 1);
        assert_eq!(limit["schema"]["maximum"], 1000);
        assert_eq!(
            param("/v1/tasks", "get", "limit")["schema"],
            limit["schema"]
        );
        assert_eq!(
            param("/v1/tasks/{name}/next", "get", "count")["schema"]["maximum"],
            crate::service::MAX_PREVIEW
        );
        assert_eq!(
            param("/v1/tasks/{name}", "put", "name")["schema"]["pattern"],
            contract::NAME_PATTERN
        );
        for bound in ["since", "until"] {
            let p = param("/v1/runs", "get", bound);
            assert_eq!(p["in"], "query", "{bound}");
            let text = p["description"].as_str().unwrap_or_default();
            assert!(
                text.contains("RFC 3339") && text.contains("unix milliseconds")
                    || text.contains("as `since`"),
                "{bound}: {text}"
            );
        }
        let tenant = param("/v1/runs", "get", "x-ax-tenant");
        assert_eq!(tenant["schema"]["pattern"], contract::NAME_PATTERN);
        let version = param("/v1/plugins", "post", "version");
        assert_eq!(version["required"], true);
        assert_eq!(version["schema"]["pattern"], contract::VERSION_PATTERN);
        let quota = &doc["components"]["schemas"]["Quota"]["properties"]["weight"];
        assert_eq!(
            (&quota["minimum"], &quota["maximum"]),
            (&1.into(), &100.into())
        );
        let steps = &doc["components"]["schemas"]["TaskDefinition"]["properties"]["steps"];
        assert_eq!(steps["maxItems"], crate::task::MAX_STEPS);
    }
}
