//! The API's contract where the handlers' `#[utoipa::path]` annotations
//! cannot state it, applied to the generated OpenAPI document in one place
//! ([`apply`]).
//!
//! - **Error statuses.** [`ROUTES`] names, per operation, the error codes
//!   its handler can answer; [`shared_codes`] adds those every operation of
//!   its kind can (the bearer check and the tenant header on `/v1`, an
//!   undecodable path segment or query string, a body over the limit, a
//!   host fault). Each status's response is built from
//!   [`super::error::codes`] (status, meaning, headers), so a status is
//!   declared once per route, never in an annotation. Tests fail when an
//!   operation has no entry, when an entry names no operation, or when an
//!   annotation declares an error status the table does not produce; the
//!   schemathesis run (`scripts/api-check`) fails on any status the server
//!   answers that the document lacks.
//! - **Parameters and bodies.** Patterns, ranges, enums and required fields,
//!   taken from the constants and validators that enforce them
//!   ([`NAME_PATTERN`] is `task::is_valid_name`, `extract::PAGE_LIMITS`,
//!   `task::MAX_STEPS`…), so the document and validation agree; a test
//!   checks each pattern against its validator.
//!
//! Where to add a status: a new code goes to [`super::error::codes`] (and
//! docs/API.md's table); a route that can answer it gets it in its
//! [`ROUTES`] entry; a code every route of a kind can answer (a connection
//! cap's 503, say) goes to [`shared_codes`].

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::error::Code;
use super::error::codes::*;
use super::extract::{PAGE_LIMITS, PREVIEW_COUNTS};

/// A task, step, plugin, secret or tenant name (`task::is_valid_name`,
/// tenant names and `capability::valid_name` use it).
pub const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$";

/// A param's name: [`NAME_PATTERN`] without `.` (docs/TASKS.md, "Params").
pub const PARAM_NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$";

/// A semver 2.0 version as `task::is_valid_version` reads it (at most 64
/// characters besides, stated as `maxLength`).
pub const VERSION_PATTERN: &str = "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\
(-(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(\\.(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?\
(\\+[0-9A-Za-z-]+(\\.[0-9A-Za-z-]+)*)?$";

/// A duration as `humantime` reads and writes it (`30s`, `1h30m`, `1day 2h`):
/// whole numbers of at most nine digits (so none overflows) with its units,
/// parts one space apart or none.
pub const DURATION_PATTERN: &str = "^[0-9]{1,9}(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)( ?[0-9]{1,9}(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y))*$";

/// One operation and the error codes its handler can answer (besides the
/// [`shared_codes`] of its kind).
#[derive(Debug)]
pub struct Route {
    /// Lower-case HTTP method, as in the document.
    pub method: &'static str,
    /// The path template.
    pub path: &'static str,
    /// The codes of this handler (its service calls included).
    pub codes: &'static [Code],
}

const fn route(method: &'static str, path: &'static str, codes: &'static [Code]) -> Route {
    Route {
        method,
        path,
        codes,
    }
}

/// Every operation of the API with the error codes its handler can answer.
/// Add a status here, not in `#[utoipa::path]`.
pub const ROUTES: &[Route] = &[
    route(
        "post",
        "/v1/plugins",
        &[
            BAD_REQUEST,
            INVALID_WASM,
            CONFLICT,
            UNSUPPORTED_MEDIA_TYPE,
            INVALID_COMPONENT,
            WRONG_WORLD,
            UNSUPPORTED_IMPORT,
            PLUGIN_BYTES_QUOTA,
            PLUGIN_COUNT_QUOTA,
            COMPILE_QUEUE_FULL,
        ],
    ),
    route("get", "/v1/plugins", &[]),
    route("get", "/v1/plugins/{name}", &[NOT_FOUND]),
    route("get", "/v1/plugins/{name}/{version}", &[NOT_FOUND]),
    route(
        "delete",
        "/v1/plugins/{name}/{version}",
        &[NOT_FOUND, CONFLICT],
    ),
    // A bad tag or version is `invalid`; an unknown version `not_found`;
    // the tag bounds `conflict`.
    route(
        "put",
        "/v1/plugins/{name}/tags/{tag}",
        &[INVALID, NOT_FOUND, CONFLICT],
    ),
    route(
        "delete",
        "/v1/plugins/{name}/tags/{tag}",
        &[NOT_FOUND, CONFLICT],
    ),
    route(
        "put",
        "/v1/tasks/{name}",
        &[
            INVALID_JSON,
            INVALID_YAML,
            BAD_REQUEST,
            INVALID,
            INVALID_PLUGIN,
        ],
    ),
    // A bad item refuses the whole batch with `invalid` (its own error,
    // whatever its code, in `details.items`), as do 0 or over 1000 items.
    route("post", "/v1/tasks:apply", &[INVALID]),
    route("get", "/v1/tasks", &[]),
    route("get", "/v1/tasks/{name}", &[NOT_FOUND]),
    route("delete", "/v1/tasks/{name}", &[NOT_FOUND]),
    route("post", "/v1/tasks/{name}/pause", &[NOT_FOUND]),
    route("post", "/v1/tasks/{name}/resume", &[NOT_FOUND]),
    route("get", "/v1/tasks/{name}/next", &[NOT_FOUND]),
    route("get", "/v1/tasks/{name}/graph", &[NOT_FOUND]),
    route(
        "post",
        "/v1/tasks/{name}/runs",
        &[
            BAD_REQUEST,
            NOT_FOUND,
            INVALID,
            RUN_DELETED,
            QUEUE_FULL,
            QUOTA_EXCEEDED,
        ],
    ),
    // The queue bound and quotas refuse single runs of a batch inside its
    // `200` answer, never the request.
    route("post", "/v1/tasks/{name}/runs:batch", &[INVALID]),
    // `since` after `until`: both well formed, the range empty.
    route("get", "/v1/runs", &[INVALID]),
    route("get", "/v1/runs/{id}", &[NOT_FOUND]),
    route("get", "/v1/runs/{id}/logs", &[NOT_FOUND]),
    route("get", "/v1/runs/{id}/events", &[NOT_FOUND]),
    route("post", "/v1/runs/{id}/cancel", &[NOT_FOUND, CONFLICT]),
    route(
        "post",
        "/v1/runs/{id}/retry",
        &[NOT_FOUND, CONFLICT, QUEUE_FULL],
    ),
    route(
        "post",
        "/v1/runs/{id}/steps/{step}/rerun",
        &[NOT_FOUND, CONFLICT, QUEUE_FULL],
    ),
    route(
        "get",
        "/v1/runs/{id}/steps/{step}/attempts/{n}/record",
        &[BAD_REQUEST, NOT_FOUND],
    ),
    route(
        "get",
        "/v1/runs/{id}/steps/{step}/attempts/{n}/component",
        &[BAD_REQUEST, NOT_FOUND],
    ),
    route("get", "/v1/dead-letters", &[]),
    route(
        "post",
        "/v1/dead-letters/{id}/resolve",
        &[BAD_REQUEST, NOT_FOUND, CONFLICT],
    ),
    route(
        "post",
        "/v1/dead-letters/{id}/requeue",
        &[NOT_FOUND, CONFLICT, QUEUE_FULL],
    ),
    route("get", "/v1/alerts", &[BAD_REQUEST]),
    route("post", "/v1/alerts/{id}/retry", &[NOT_FOUND, CONFLICT]),
    route("get", "/v1/cron/next", &[INVALID]),
    route("put", "/v1/secrets/{name}", &[BAD_REQUEST, INVALID]),
    route("get", "/v1/secrets", &[]),
    route("delete", "/v1/secrets/{name}", &[NOT_FOUND, INVALID]),
    route("post", "/v1/tenants", &[INVALID, CONFLICT]),
    route("get", "/v1/tenants", &[]),
    route("get", "/v1/tenants/{tenant}", &[NOT_FOUND]),
    route(
        "put",
        "/v1/tenants/{tenant}",
        &[BAD_REQUEST, NOT_FOUND, INVALID],
    ),
    route("put", "/v1/tenants/{tenant}/quota", &[NOT_FOUND, INVALID]),
    route(
        "post",
        "/v1/tenants/{tenant}/disable",
        &[NOT_FOUND, CONFLICT],
    ),
    route(
        "post",
        "/v1/tenants/{tenant}/enable",
        &[NOT_FOUND, CONFLICT],
    ),
    route(
        "post",
        "/v1/tenants/{tenant}/tokens",
        &[NOT_FOUND, INVALID, CONFLICT],
    ),
    route("get", "/v1/tenants/{tenant}/tokens", &[NOT_FOUND]),
    route("delete", "/v1/tenants/{tenant}/tokens/{id}", &[NOT_FOUND]),
    route(
        "get",
        "/v1/tenants/{tenant}/usage",
        &[BAD_REQUEST, NOT_FOUND, INVALID],
    ),
    route("get", "/healthz", &[]),
    route("get", "/readyz", &[UNAVAILABLE, STORE_UNAVAILABLE]),
    route("get", "/metrics", &[UNAUTHORIZED, FORBIDDEN, UNAVAILABLE]),
    route("get", super::openapi::OPENAPI_PATH, &[]),
];

/// The entry of `method path`.
pub fn route_of(method: &str, path: &str) -> Option<&'static Route> {
    ROUTES.iter().find(|r| r.method == method && r.path == path)
}

/// The codes every operation shaped like `op` at `path` can answer,
/// whatever its handler does.
pub fn shared_codes(path: &str, op: &Value) -> Vec<Code> {
    // Any connection may be refused at the cap (`api/connections.rs`).
    let mut codes = vec![INTERNAL, TOO_MANY_CONNECTIONS];
    let authenticated = path.starts_with("/v1/") && path != super::openapi::OPENAPI_PATH;
    if authenticated {
        // `auth::Caller`: a bad `X-Ax-Tenant`, no or a bad token, a tenant
        // token out of its tenant (or disabled), an admin naming an unknown
        // tenant.
        codes.extend([INVALID_TENANT, UNAUTHORIZED, FORBIDDEN, NOT_FOUND]);
        // A valid token whose connections are at `max_per_token`
        // (`api/connections/admission.rs`).
        codes.push(TOO_MANY_TOKEN_CONNECTIONS);
    }
    let has = |location: &str| {
        op["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == location))
    };
    // A path segment that does not decode, a query string that does not
    // parse into the handler's parameters.
    if path.contains('{') || has("query") {
        codes.push(BAD_REQUEST);
    }
    if let Some(content) = op["requestBody"]["content"].as_object() {
        codes.extend([PAYLOAD_TOO_LARGE, BODY_TIMEOUT]);
        if content.contains_key("application/json") {
            codes.push(INVALID_JSON);
        }
    }
    codes
}

/// The document's response for `status`, answering any of `codes`.
fn error_response(status: u16, codes: &[Code]) -> Value {
    let description = codes
        .iter()
        .map(|c| format!("`{}`: {}", c.code, c.when))
        .collect::<Vec<_>>()
        .join("; ");
    let mut response = json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    });
    let header = match status {
        401 => Some((
            "www-authenticate",
            json!({"description": "`Bearer`", "required": true, "schema": {"type": "string"}}),
        )),
        429 => Some((
            "retry-after",
            json!({"description": "Seconds to wait", "required": true,
                "schema": {"type": "integer", "minimum": 0}}),
        )),
        // `too_many_connections` and `store_unavailable` send it,
        // `unavailable` need not.
        503 => Some((
            "retry-after",
            json!({"description": "Seconds to wait (`too_many_connections`, `store_unavailable`)", "required": false,
                "schema": {"type": "integer", "minimum": 0}}),
        )),
        _ => None,
    };
    if let Some((name, header)) = header {
        response["headers"] = json!({ name: header });
    }
    response
}

/// The methods an OpenAPI path item may hold.
const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Applies the contract to the document utoipa generated (see the module
/// docs). Operations without a [`ROUTES`] entry get the shared codes only
/// (a test refuses them).
pub fn apply(doc: &mut Value) {
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            refine_parameters(path, item);
            for method in METHODS {
                let Some(op) = item.get_mut(method) else {
                    continue;
                };
                set_error_responses(path, method, op);
                refine_parameters(path, op);
                refine_body(path, method, op);
            }
        }
    }
    if let Some(schemas) = doc
        .get_mut("components")
        .and_then(|c| c.get_mut("schemas"))
        .and_then(Value::as_object_mut)
    {
        refine_schemas(schemas);
    }
    bound_integers(doc);
}

/// Gives every integer without a `maximum` the range of the Rust type
/// utoipa generated it from (its `format`, and `minimum: 0` for unsigned
/// ones): a larger number is refused by the server (`invalid_json`), so
/// the document must not call it valid.
fn bound_integers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let is_integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if is_integer && !map.contains_key("maximum") {
                let unsigned = map.get("minimum").and_then(Value::as_f64) == Some(0.0);
                let bounds: Option<(Value, Value)> =
                    match (map.get("format").and_then(Value::as_str), unsigned) {
                        (Some("int32"), true) => Some((0.into(), u32::MAX.into())),
                        (Some("int64"), true) => Some((0.into(), u64::MAX.into())),
                        (Some("int32"), false) => Some((i32::MIN.into(), i32::MAX.into())),
                        (Some("int64"), false) => Some((i64::MIN.into(), i64::MAX.into())),
                        _ => None,
                    };
                if let Some((min, max)) = bounds {
                    map.entry("minimum").or_insert(min);
                    map.insert("maximum".into(), max);
                }
            }
            map.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

fn set_error_responses(path: &str, method: &str, op: &mut Value) {
    let mut codes = shared_codes(path, op);
    // Every operation that writes can find the store refusing writes
    // (full disk, I/O error): docs/RELIABILITY.md, "Store faults".
    if method != "get" {
        codes.push(STORE_UNAVAILABLE);
    }
    if let Some(r) = route_of(method, path) {
        codes.extend_from_slice(r.codes);
    }
    let mut by_status: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
    for c in codes {
        let list = by_status.entry(c.status).or_default();
        if !list.contains(&c) {
            list.push(c);
        }
    }
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    // Error statuses come from the table only.
    responses.retain(|status, _| status.parse::<u16>().is_ok_and(|s| s < 400));
    for (status, codes) in by_status {
        responses.insert(status.to_string(), error_response(status, &codes));
    }
}

fn integer(range: &std::ops::RangeInclusive<usize>) -> Value {
    json!({"type": "integer", "minimum": range.start(), "maximum": range.end()})
}

fn name_schema() -> Value {
    json!({"type": "string", "pattern": NAME_PATTERN})
}

fn version_schema() -> Value {
    json!({"type": "string", "pattern": VERSION_PATTERN, "maxLength": crate::task::MAX_NAME_LEN})
}

/// A plugin tag (`task::is_valid_tag`): a name starting with a letter; that
/// it must not read as a version range (`x`) is stated in its description.
pub const TAG_PATTERN: &str = "^[A-Za-z][A-Za-z0-9_.-]{0,63}$";

fn tag_schema() -> Value {
    json!({"type": "string", "pattern": TAG_PATTERN})
}

/// The schema of a parameter the server checks beyond its Rust type, and
/// whether it is required when the code cannot say (`None`: as generated).
fn parameter_schema(path: &str, location: &str, name: &str) -> Option<(Value, Option<bool>)> {
    let schema = match (location, name) {
        ("header", "x-ax-tenant") => name_schema(),
        ("path", "name" | "tenant" | "step") => name_schema(),
        ("path", "version") => version_schema(),
        ("path", "tag") => tag_schema(),
        // An upload names its plugin in the query (the multipart fields are
        // an alternative a JSON schema cannot state, so the query is the
        // documented way).
        ("query", "name") if path == "/v1/plugins" => return Some((name_schema(), Some(true))),
        ("query", "version") if path == "/v1/plugins" => {
            return Some((version_schema(), Some(true)));
        }
        ("query", "limit") => integer(&PAGE_LIMITS),
        ("query", "count") => integer(&PREVIEW_COUNTS),
        ("query", "status") if path == "/v1/alerts" => {
            json!({"$ref": "#/components/schemas/AlertStatus"})
        }
        ("query", "status") => json!({"$ref": "#/components/schemas/RunStatus"}),
        ("query", "format") => json!({"type": "string", "enum": GRAPH_FORMATS}),
        ("query", "open") => json!({"type": "boolean"}),
        ("query", "from") if path == "/v1/cron/next" => {
            json!({"type": "string", "format": "date-time"})
        }
        ("query", "from" | "to") => json!({"anyOf": [
            {"type": "string", "format": "date-time"},
            {"type": "string", "format": "date"},
        ]}),
        ("query", "expr") => json!({"type": "string", "minLength": 1}),
        // A run listing's bounds: an RFC 3339 instant or unix milliseconds;
        // anything else (an empty value too) is `400`.
        ("query", "since" | "until") if path == "/v1/runs" => json!({"oneOf": [
            {"type": "string", "format": "date-time"},
            {"type": "string", "pattern": format!("^[0-9]{{1,{}}}$", super::runs::MAX_MS_DIGITS)},
        ]}),
        _ => return None,
    };
    Some((schema, None))
}

/// `graph::Format`'s names (a test parses each).
const GRAPH_FORMATS: [&str; 4] = ["text", "dot", "mermaid", "json"];

/// Refines the parameters of an operation or a path item (`holder`).
fn refine_parameters(path: &str, holder: &mut Value) {
    // `get_mut`, not indexing: indexing a JSON object inserts `null`.
    let Some(params) = holder.get_mut("parameters").and_then(Value::as_array_mut) else {
        return;
    };
    for p in params {
        let (location, name) = (
            p["in"].as_str().unwrap_or_default().to_string(),
            p["name"].as_str().unwrap_or_default().to_ascii_lowercase(),
        );
        if let Some((schema, required)) = parameter_schema(path, &location, &name) {
            p["schema"] = schema;
            if let Some(required) = required {
                p["required"] = Value::Bool(required);
            }
        }
    }
}

/// A task definition as the server reads it (docs/TASKS.md): the fields a
/// definition may have, with the checks a schema can state; everything
/// else (a plugin that exists, a cron expression that parses, a DAG
/// without cycles) is a `422 invalid` with the field's path.
fn task_definition() -> Value {
    use crate::task::{MAX_ENUM_VALUES, MAX_PARAMS, MAX_PRIORITY, MAX_STEPS, PARAM_TYPES};
    json!({
        "type": "object",
        "description": "A task definition (docs/TASKS.md): a trigger and one or more steps, or the one-step shorthand with `plugin` at the top.",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": NAME_PATTERN, "description": "The name in the path."},
            "description": {"type": "string"},
            "trigger": {"type": "object"},
            "catch_up": {"type": "string", "enum": ["latest", "none", "all"]},
            "overlap": {"type": "string", "enum": ["skip", "queue_one", "allow"]},
            "priority": {"type": "integer", "minimum": 0, "maximum": MAX_PRIORITY},
            "params": {"type": "array", "maxItems": MAX_PARAMS, "items": {
                "type": "object",
                "required": ["name", "type"],
                "properties": {
                    "name": {"type": "string", "pattern": PARAM_NAME_PATTERN},
                    "type": {"type": "string", "enum": PARAM_TYPES},
                    "values": {"type": "array", "minItems": 1, "maxItems": MAX_ENUM_VALUES, "items": {"type": "string", "minLength": 1}},
                    "default": {},
                    "description": {"type": "string"},
                },
                "additionalProperties": false,
            }},
            "steps": {"type": "array", "minItems": 1, "maxItems": MAX_STEPS, "items": {"type": "object"}},
            "plugin": {"type": "string"},
            "input": {},
            "limits": {"type": "object"},
            "retry": {"type": "object"},
            "pool": {"type": "string", "pattern": NAME_PATTERN},
            "config": {"type": "object", "additionalProperties": {"type": "string"}},
            "alerts": {"type": "object"},
            "retention": {"type": "object"},
            "allow_http": {"type": "array", "items": {"type": "string"}},
            "secrets": {"type": "array", "items": {"type": "string"}},
            "kv": {},
            "record": {"type": "string", "enum": ["off", "on_failure", "always"]},
        },
        "additionalProperties": false,
    })
}

fn refine_body(path: &str, method: &str, op: &mut Value) {
    let Some(content) = op.get_mut("requestBody").and_then(|b| b.get_mut("content")) else {
        return;
    };
    match (method, path) {
        ("put", "/v1/tasks/{name}") => {
            for media in ["application/yaml", "application/json"] {
                content[media]["schema"] = json!({"$ref": "#/components/schemas/TaskDefinition"});
            }
        }
        ("put", "/v1/plugins/{name}/tags/{tag}") => {
            content["application/json"]["schema"] = json!({
                "type": "object",
                "required": ["version"],
                "properties": {"version": version_schema()},
                "additionalProperties": false,
            });
        }
        ("put", "/v1/secrets/{name}") => {
            content["text/plain"]["schema"] = json!({"type": "string", "minLength": 1});
        }
        ("post", "/v1/tenants") => {
            // `TenantSpec` serves create and change; a new tenant needs its name.
            content["application/json"]["schema"] = json!({"allOf": [
                {"$ref": "#/components/schemas/TenantSpec"},
                {"type": "object", "required": ["name"], "properties": {"name": name_schema()}},
            ]});
        }
        _ => {}
    }
}

/// Sets `properties.FIELD` of schema `name` to `schema`, keeping its description.
fn set_property(schemas: &mut Map<String, Value>, name: &str, field: &str, schema: Value) {
    let Some(property) = schemas
        .get_mut(name)
        .and_then(|s| s.get_mut("properties"))
        .and_then(|p| p.get_mut(field))
    else {
        return;
    };
    let description = property.get("description").cloned();
    *property = schema;
    if let (Some(d), Some(obj)) = (description, property.as_object_mut()) {
        obj.insert("description".into(), d);
    }
}

fn refine_schemas(schemas: &mut Map<String, Value>) {
    schemas.insert("TaskDefinition".into(), task_definition());
    let duration = |nullable: bool| {
        if nullable {
            json!({"type": ["string", "null"], "pattern": DURATION_PATTERN})
        } else {
            json!({"type": "string", "pattern": DURATION_PATTERN})
        }
    };
    // `tenant::Quota::validate`.
    set_property(
        schemas,
        "Quota",
        "weight",
        json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 1}),
    );
    set_property(
        schemas,
        "Quota",
        "window",
        json!({"type": "string", "pattern": DURATION_PATTERN, "default": "24h",
            "example": "24h"}),
    );
    set_property(schemas, "Quota", "max_timeout", duration(true));
    for (field, max) in [
        ("max_fuel_per_attempt", u64::MAX),
        ("max_memory_mb", u64::MAX),
        ("max_concurrent_attempts", u64::from(u32::MAX)),
        ("wall_ms_per_window", u64::MAX),
    ] {
        set_property(
            schemas,
            "Quota",
            field,
            json!({"type": ["integer", "null"], "minimum": 1, "maximum": max}),
        );
    }
    set_property(
        schemas,
        "Quota",
        "max_priority",
        json!({"type": ["integer", "null"], "minimum": 0,
            "maximum": crate::task::MAX_PRIORITY}),
    );
    set_property(
        schemas,
        "Quota",
        "trigger_rate_per_sec",
        json!({"type": ["number", "null"], "exclusiveMinimum": 0}),
    );
    set_property(schemas, "AlertSpec", "late_after", duration(true));
    set_property(
        schemas,
        "TenantSpec",
        "name",
        json!({"type": ["string", "null"], "pattern": NAME_PATTERN}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings near the edges of the name and version rules.
    fn samples() -> Vec<String> {
        let mut out: Vec<String> = [
            "",
            "a",
            "A0",
            "0",
            "-a",
            ".a",
            "_a",
            "a-b.c_d",
            "a/b",
            "a b",
            "é",
            "a\n",
            "1.2.3",
            "0.0.0",
            "01.2.3",
            "1.2",
            "1.2.3.4",
            "v1.2.3",
            "1.2.3-rc.1",
            "1.2.3-rc.01",
            "1.2.3-0a",
            "1.2.3-",
            "1.2.3+build.5",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.3-x-y+z.-",
            "1.0.0-alpha+001",
            "10.20.30",
            "1.2.3----RC-SNAPSHOT.12.9.1--.12+788",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        out.push("a".repeat(64));
        out.push("a".repeat(65));
        out.push(format!("1.2.3-{}", "a".repeat(58)));
        out.push(format!("1.2.3-{}", "a".repeat(59)));
        out
    }

    #[test]
    fn the_name_pattern_is_the_name_validators() {
        let re = regex::Regex::new(NAME_PATTERN).unwrap();
        for s in samples() {
            let want = crate::task::is_valid_name(&s);
            assert_eq!(re.is_match(&s), want, "{s:?}");
            assert_eq!(crate::capability::valid_name(&s), want, "{s:?}");
        }
    }

    #[test]
    fn the_param_name_pattern_is_the_name_rule_without_dots() {
        let re = regex::Regex::new(PARAM_NAME_PATTERN).unwrap();
        for s in samples() {
            let want = crate::task::is_valid_name(&s) && !s.contains('.');
            assert_eq!(re.is_match(&s), want, "{s:?}");
        }
    }

    #[test]
    fn the_version_pattern_is_the_semver_validator() {
        let re = regex::Regex::new(VERSION_PATTERN).unwrap();
        for s in samples() {
            let matches = re.is_match(&s) && s.len() <= crate::task::MAX_NAME_LEN;
            assert_eq!(matches, crate::task::is_valid_version(&s), "{s:?}");
        }
    }

    #[test]
    fn the_duration_pattern_only_admits_durations() {
        let re = regex::Regex::new(DURATION_PATTERN).unwrap();
        for s in [
            "30s",
            "5m",
            "1h30m",
            "24h",
            "999999999w",
            "2d12h",
            "500ms",
            "1day",
            "2days 3h",
            "1year 2months 3days 4h 5m 6s 7ms 8us 9ns",
            "10µs",
            "3mins",
        ] {
            assert!(re.is_match(s), "{s}");
            assert!(humantime::parse_duration(s).is_ok(), "{s}");
        }
        for s in [
            "",
            "30",
            "h",
            "1x",
            "-1s",
            "1.5h",
            "1h  2m",
            " 1h",
            "1h ",
            "1000000000s",
        ] {
            assert!(!re.is_match(s), "{s}");
        }
        // What the server writes back is what it reads.
        for secs in [1, 59, 3600, 86_400, 90_061, 31 * 86_400, 400 * 86_400] {
            let text = humantime::format_duration(std::time::Duration::from_secs(secs)).to_string();
            assert!(re.is_match(&text), "{text}");
        }
    }

    #[test]
    fn the_graph_formats_are_the_ones_graph_reads() {
        for f in GRAPH_FORMATS {
            assert!(f.parse::<crate::graph::Format>().is_ok(), "{f}");
        }
        assert!("svg".parse::<crate::graph::Format>().is_err());
    }

    #[test]
    fn the_task_definition_schema_has_the_fields_the_parser_reads() {
        let schema = task_definition();
        let fields: std::collections::BTreeSet<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let want: std::collections::BTreeSet<&str> =
            crate::task::TASK_FIELDS.iter().copied().collect();
        assert_eq!(fields, want);
    }

    #[test]
    fn every_route_entry_names_codes_of_the_table() {
        for r in ROUTES {
            for c in r.codes {
                assert_eq!(by_name(c.code), Some(*c), "{} {}", r.method, r.path);
            }
        }
    }
}
