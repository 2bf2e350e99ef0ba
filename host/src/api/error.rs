//! The one place where failures become HTTP answers: every error the API can
//! give, its status and its stable machine-readable `code`, and the mapping
//! from [`service::Error`], from the runtime's upload errors and from axum's
//! own extractor rejections. Bodies always have the shape
//! `{"error": {"code": "...", "message": "...", "details": ...}}`.
//!
//! Client errors pass their message through; internal ones are logged here
//! and answered with a generic message, so a store path or a panic text never
//! reaches a client.
//!
//! [`codes`] lists every stable code once, with its status and when it is
//! answered: the OpenAPI document's per-route error responses are built
//! from it (`openapi::ROUTES` names the codes each route can answer), and
//! tests hold [`ApiError::status_and_code`] and docs/API.md's error table
//! equal to it.

use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::runtime;
use crate::service;

/// Seconds an upload refused with `compile_queue_full` is told to wait
/// (`Retry-After`): about one compilation of a large component.
pub const COMPILE_QUEUE_RETRY_AFTER_SECS: u64 = 5;

/// Seconds a write refused with `store_unavailable` is told to wait
/// (`Retry-After`): the scheduler probes the store every second, and a
/// reopened store is tried at most every second.
pub const STORE_RETRY_AFTER_SECS: u64 = 2;
/// `Retry-After` of `too_many_token_connections`: the token's other
/// connections close at their idle timeout or sooner, so a second.
pub const TOKEN_CONNECTIONS_RETRY_AFTER_SECS: u64 = 1;

/// The body of every error answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error inside [`ErrorBody`].
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code (`not_found`, `invalid`, `queue_full`, …; docs/API.md).
    #[schema(example = "invalid")]
    pub code: String,
    /// For people: what is wrong, naming the field or object.
    pub message: String,
    /// More, by code: `{"path": "steps[0].limits.fuel"}` for `invalid`,
    /// `{"retry_after": 5}` for `queue_full`; else `null`.
    #[schema(value_type = Object, nullable)]
    pub details: Value,
    /// The request's id (also in the `x-request-id` header and the host log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// A stable error code: the status it is answered with and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code {
    /// The HTTP status.
    pub status: u16,
    /// The `error.code` of the body.
    pub code: &'static str,
    /// When it is answered (for the OpenAPI document; docs/API.md says more).
    pub when: &'static str,
}

/// Every stable error code of the API. A new code is added here (and to
/// [`codes::ALL`], docs/API.md's table and the `openapi::ROUTES` entries of
/// the routes that can answer it); the tests say what is missing.
pub mod codes {
    use super::Code;

    macro_rules! codes {
        ($($name:ident = $status:literal $code:literal $when:literal;)*) => {
            $(
                #[doc = concat!("`", $status, " ", $code, "`: ", $when)]
                pub const $name: Code = Code { status: $status, code: $code, when: $when };
            )*
            /// Every code, by status.
            pub const ALL: &[Code] = &[$($name),*];
        };
    }

    codes! {
        BAD_REQUEST = 400 "bad_request" "a malformed parameter, query string, path, name, version, priority, limit or instant";
        INVALID_JSON = 400 "invalid_json" "a JSON body that does not parse or has unknown fields";
        INVALID_YAML = 400 "invalid_yaml" "a task definition that is not YAML";
        INVALID_WASM = 400 "invalid_wasm" "an upload that is not WebAssembly, or a core module instead of a component";
        INVALID_TENANT = 400 "invalid_tenant" "an `X-Ax-Tenant` header that is not a tenant name";
        UNAUTHORIZED = 401 "unauthorized" "no token, or not a valid one";
        FORBIDDEN = 403 "forbidden" "a tenant token on an admin route or naming another tenant; a disabled tenant";
        NOT_FOUND = 404 "not_found" "no such object for this tenant (or no such tenant for the admin)";
        METHOD_NOT_ALLOWED = 405 "method_not_allowed" "the route exists, not with this method";
        BODY_TIMEOUT = 408 "body_timeout" "the request body did not arrive within `connections.body_timeout`; the connection is closed";
        CONFLICT = 409 "conflict" "conflicts with the current state";
        RUN_DELETED = 410 "run_deleted" "the trigger's idempotency key started a run that retention has since deleted; `details.run_id` names it, and no new run is created while the key is remembered (`idempotency_ttl`)";
        PAYLOAD_TOO_LARGE = 413 "payload_too_large" "the body is over the route's limit";
        UNSUPPORTED_MEDIA_TYPE = 415 "unsupported_media_type" "a body of a type this route does not take";
        INVALID = 422 "invalid" "well-formed but invalid; `details.path` names the field";
        INVALID_PLUGIN = 422 "invalid_plugin" "a task naming a plugin version not uploaded for this tenant";
        INVALID_COMPONENT = 422 "invalid_component" "a component that does not compile";
        WRONG_WORLD = 422 "wrong_world" "a component not targeting the ax world";
        UNSUPPORTED_IMPORT = 422 "unsupported_import" "a component importing what ax does not provide";
        PLUGIN_BYTES_QUOTA = 413 "plugin_bytes_quota" "a plugin upload that would take the tenant's plugins over its `plugin_bytes` quota";
        INPUT_TOO_LARGE = 413 "input_too_large" "a run's input (its JSON, params included) is larger than the tenant's `max_input_bytes` quota";
        RUN_BYTES_QUOTA = 413 "run_bytes_quota" "a new run would take the run data the tenant keeps (records, events, logs) over its `run_bytes` quota; runs deleted by retention free room";
        PLUGIN_COUNT_QUOTA = 429 "plugin_count_quota" "a plugin upload past the tenant's `max_plugins` versions (delete one first)";
        COMPILE_QUEUE_FULL = 429 "compile_queue_full" "as many plugin uploads as the host (or, per tenant, `max_compiling`) allows are compiling or waiting to; `Retry-After` says when to try again";
        QUEUE_FULL = 429 "queue_full" "the tenant's queue is full; `Retry-After` says when to try again";
        QUOTA_EXCEEDED = 429 "quota_exceeded" "a tenant quota refuses it for now; `Retry-After` says when to try again";
        TOO_MANY_TOKEN_CONNECTIONS = 429 "too_many_token_connections" "the token already holds `connections.max_per_token` connections; the connection is closed, `Retry-After` says when to try again";
        INTERNAL = 500 "internal" "a fault of the host; the host log has the details";
        UNAVAILABLE = 503 "unavailable" "the host cannot serve right now";
        STORE_UNAVAILABLE = 503 "store_unavailable" "the store refuses writes for now (full disk, I/O error): nothing was stored; `Retry-After` says when to try again";
        TOO_MANY_CONNECTIONS = 503 "too_many_connections" "the server is at `connections.max_connections`; `Retry-After` says when to try again";
    }

    /// The code named `code`.
    pub fn by_name(code: &str) -> Option<Code> {
        ALL.iter().copied().find(|c| c.code == code)
    }
}

/// Result type of the handlers.
pub type ApiResult<T, E = ApiError> = std::result::Result<T, E>;

/// Everything an API call can fail with.
#[derive(Debug)]
pub enum ApiError {
    /// 400: the request is malformed. `code` is `bad_request`, `invalid_json`,
    /// `invalid_yaml`, `invalid_wasm` or `invalid_tenant`.
    BadRequest {
        /// The stable code.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// 401: no token, or not a valid one.
    Unauthorized(String),
    /// 403: the token may not do this.
    Forbidden(String),
    /// 404: no such object for this tenant, or no such route.
    NotFound(String),
    /// 405: the route exists, not with this method.
    MethodNotAllowed,
    /// 408 `body_timeout`: the request body did not arrive in time
    /// (`connections.body_timeout`); the connection is closed after.
    BodyTimeout(String),
    /// 409: conflicts with the current state.
    Conflict(String),
    /// 413: the body is over the limit.
    TooLarge(String),
    /// 415: a body of a type this route does not take.
    UnsupportedMediaType(String),
    /// 422: well-formed but invalid. `code` is `invalid`, `invalid_plugin`,
    /// `invalid_component`, `wrong_world` or `unsupported_import`.
    Invalid {
        /// The stable code.
        code: &'static str,
        /// What is wrong.
        message: String,
        /// Where (e.g. `{"path": "steps[0].limits.fuel"}`).
        details: Option<Value>,
    },
    /// 429: the tenant's queue is full.
    QueueFull {
        /// What happened.
        message: String,
        /// Seconds to wait (sent as `Retry-After`).
        retry_after: u64,
    },
    /// 429: a tenant quota refuses the request for now (trigger rate, fuel
    /// budget set to refuse, queued-run cap).
    QuotaExceeded {
        /// Which limit, and until when.
        message: String,
        /// Seconds to wait (sent as `Retry-After`).
        retry_after: u64,
    },
    /// 410 `run_deleted`: an idempotency key whose run retention deleted.
    RunDeleted {
        /// What happened.
        message: String,
        /// The deleted run's id (`details.run_id`).
        run: String,
    },
    /// 503: the host cannot serve right now.
    Unavailable(String),
    /// 503 `store_unavailable`: the store refuses writes for now (full
    /// disk, I/O error); nothing of the request was stored.
    StoreUnavailable {
        /// What happened (no store path: the cause is logged).
        message: String,
        /// Seconds to wait (sent as `Retry-After`).
        retry_after: u64,
    },
    /// 500: a fault of the host. The text is logged, never sent.
    Internal(String),
    /// 429 `compile_queue_full`: as many plugin uploads as may be are
    /// compiling or waiting to.
    CompileQueueFull {
        /// What happened.
        message: String,
        /// Seconds to wait (sent as `Retry-After`).
        retry_after: u64,
    },
    /// 429 `plugin_count_quota`: the tenant keeps as many plugin versions as
    /// its `max_plugins` quota allows (no `Retry-After`: waiting frees nothing).
    TooManyPlugins(String),
    /// 413 `plugin_bytes_quota`: the upload would take the tenant's plugins
    /// over its `plugin_bytes` quota.
    PluginBytesQuota(String),
    /// 413 `input_too_large`: a run's input over the tenant's `max_input_bytes`.
    InputTooLarge(String),
    /// 413 `run_bytes_quota`: a new run would take the tenant's run data
    /// over its `run_bytes` quota.
    RunBytesQuota(String),
    /// 429 `too_many_token_connections`: the token already holds
    /// `connections.max_per_token` connections; this one is closed after
    /// the answer (`Connection: close`).
    TooManyTokenConnections(String),
}

impl ApiError {
    /// A 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code: "bad_request",
            message: message.into(),
        }
    }

    /// A 503 `store_unavailable` (see [`codes::STORE_UNAVAILABLE`]).
    pub fn store_unavailable() -> Self {
        ApiError::StoreUnavailable {
            message: "the store refuses writes for now (full disk or I/O error); nothing was stored; try again later".into(),
            retry_after: STORE_RETRY_AFTER_SECS,
        }
    }

    /// The status and stable code of this error.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::RunDeleted { .. } => (StatusCode::GONE, "run_deleted"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::Invalid { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::QueueFull { .. } => (StatusCode::TOO_MANY_REQUESTS, "queue_full"),
            ApiError::QuotaExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::StoreUnavailable { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            }
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::CompileQueueFull { .. } => {
                (StatusCode::TOO_MANY_REQUESTS, "compile_queue_full")
            }
            ApiError::TooManyPlugins(_) => (StatusCode::TOO_MANY_REQUESTS, "plugin_count_quota"),
            ApiError::PluginBytesQuota(_) => (StatusCode::PAYLOAD_TOO_LARGE, "plugin_bytes_quota"),
            ApiError::InputTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "input_too_large"),
            ApiError::RunBytesQuota(_) => (StatusCode::PAYLOAD_TOO_LARGE, "run_bytes_quota"),
            ApiError::TooManyTokenConnections(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "too_many_token_connections")
            }
        }
    }

    /// 422 `invalid` for a batch (bulk trigger, bulk apply) refused
    /// whole for its bad items: `details.items` holds each one's index, the
    /// name the client gave it (`file`, or `null`) and its own error
    /// ([`ApiError::item_detail`]), whatever status it would have alone.
    pub fn items(what: &str, total: usize, items: Vec<(usize, Option<String>, ApiError)>) -> Self {
        let first = items.first().map_or_else(String::new, |(index, file, e)| {
            let at = file.clone().unwrap_or_else(|| format!("{what}[{index}]"));
            format!("; first, {at}: {}", e.public_message())
        });
        let message = format!(
            "{} of the {total} {what} are invalid, so none was applied{first}",
            items.len()
        );
        let items: Vec<Value> = items
            .into_iter()
            .map(|(index, file, e)| json!({"index": index, "file": file, "error": e.item_detail()}))
            .collect();
        ApiError::Invalid {
            code: "invalid",
            message,
            details: Some(json!({ "items": items })),
        }
    }

    /// The `details` of the body.
    fn details(&self) -> Value {
        match self {
            ApiError::Invalid { details, .. } => details.clone().unwrap_or(Value::Null),
            ApiError::QueueFull { retry_after, .. }
            | ApiError::QuotaExceeded { retry_after, .. }
            | ApiError::CompileQueueFull { retry_after, .. }
            | ApiError::StoreUnavailable { retry_after, .. } => {
                json!({ "retry_after": retry_after })
            }
            ApiError::RunDeleted { run, .. } => json!({ "run_id": run }),
            ApiError::TooManyTokenConnections(_) => {
                json!({ "retry_after": TOKEN_CONNECTIONS_RETRY_AFTER_SECS })
            }
            _ => Value::Null,
        }
    }

    /// The error of one item of a batch, as the `error` of an error body
    /// (`{"code", "message", "details"}`) without the request id, which the
    /// whole answer carries. An internal fault is logged here, as an
    /// answer's is, and shown with the generic message.
    pub fn item_detail(&self) -> Value {
        let (_, code) = self.status_and_code();
        if let ApiError::Internal(message) = self {
            tracing::error!(error = %message, "internal error on an item of a batch");
        }
        json!({ "code": code, "message": self.public_message(), "details": self.details() })
    }

    /// The message sent to the client.
    fn public_message(&self) -> String {
        match self {
            ApiError::BadRequest { message, .. }
            | ApiError::Unauthorized(message)
            | ApiError::Forbidden(message)
            | ApiError::NotFound(message)
            | ApiError::Conflict(message)
            | ApiError::BodyTimeout(message)
            | ApiError::TooLarge(message)
            | ApiError::UnsupportedMediaType(message)
            | ApiError::Invalid { message, .. }
            | ApiError::RunDeleted { message, .. }
            | ApiError::QueueFull { message, .. }
            | ApiError::QuotaExceeded { message, .. }
            | ApiError::Unavailable(message)
            | ApiError::StoreUnavailable { message, .. }
            | ApiError::CompileQueueFull { message, .. }
            | ApiError::TooManyPlugins(message)
            | ApiError::PluginBytesQuota(message)
            | ApiError::InputTooLarge(message)
            | ApiError::RunBytesQuota(message)
            | ApiError::TooManyTokenConnections(message) => message.clone(),
            ApiError::MethodNotAllowed => "this route does not accept this method".into(),
            ApiError::Internal(_) => "internal error; the host logged the details".into(),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (_, code) = self.status_and_code();
        match self {
            ApiError::Internal(message) => write!(f, "{code}: {message}"),
            other => write!(f, "{code}: {}", other.public_message()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal(message) = &self {
            tracing::error!(error = %message, "internal error answering a request");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_string(),
                message: self.public_message(),
                details: self.details(),
                request_id: super::request_id::current(),
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::QueueFull { retry_after, .. }
            | ApiError::QuotaExceeded { retry_after, .. }
            | ApiError::CompileQueueFull { retry_after, .. }
            | ApiError::StoreUnavailable { retry_after, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            ApiError::TooManyTokenConnections(_) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(TOKEN_CONNECTIONS_RETRY_AFTER_SECS),
                );
                // hyper closes the connection after an answer saying so:
                // its place goes back to the token's others.
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

impl From<service::Error> for ApiError {
    fn from(e: service::Error) -> Self {
        match e {
            service::Error::BadRequest(message) => ApiError::bad_request(message),
            service::Error::Invalid {
                path: None,
                message,
            } if message.starts_with("invalid YAML:") => {
                // `task::parse` reports text that is not YAML/JSON at all with
                // these prefixes and no path; that is a malformed request (400),
                // not an invalid definition (422).
                ApiError::BadRequest {
                    code: "invalid_yaml",
                    message,
                }
            }
            service::Error::Invalid {
                path: None,
                message,
            } if message.starts_with("invalid JSON:") => ApiError::BadRequest {
                code: "invalid_json",
                message,
            },
            service::Error::Invalid { path, message } => {
                // A task naming a plugin that is not uploaded gets its own code:
                // the fix (upload it) differs from fixing the document.
                let code = match path.as_deref() {
                    Some(p) if p.ends_with(".plugin") || p == "plugin" => "invalid_plugin",
                    _ => "invalid",
                };
                let message = match &path {
                    Some(p) => format!("{p}: {message}"),
                    None => message,
                };
                ApiError::Invalid {
                    code,
                    message,
                    details: Some(json!({ "path": path })),
                }
            }
            service::Error::Plugin(e) => e.into(),
            service::Error::NotFound(what) => ApiError::NotFound(format!("{what} not found")),
            service::Error::Conflict(message) => ApiError::Conflict(message),
            service::Error::RunDeleted { message, run } => ApiError::RunDeleted { message, run },
            service::Error::TooLarge(message) => ApiError::TooLarge(message),
            service::Error::Quota {
                message,
                retry_after,
            } => ApiError::QuotaExceeded {
                message,
                retry_after,
            },
            service::Error::Forbidden(message) => ApiError::Forbidden(message),
            service::Error::QueueFull {
                message,
                retry_after,
            } => ApiError::QueueFull {
                message,
                retry_after,
            },
            // A write refused for now: the client may retry; the cause
            // (which may name a path) is logged, not sent.
            service::Error::Store(e) if e.is_unavailable() => {
                tracing::warn!(error = %e, "a write was refused: the store is unavailable");
                ApiError::store_unavailable()
            }
            // Faults of the host: logged with their causes, never sent.
            e @ (service::Error::Store(_)
            | service::Error::Scheduler(_)
            | service::Error::Record { .. }
            | service::Error::Definition { .. }
            | service::Error::Trigger { .. }
            | service::Error::Compile(_)) => ApiError::Internal(causes(&e)),
            service::Error::Internal(message) => ApiError::Internal(message),
            service::Error::TooManyPlugins(message) => ApiError::TooManyPlugins(message),
            service::Error::PluginBytesQuota(message) => ApiError::PluginBytesQuota(message),
            service::Error::InputTooLarge(message) => ApiError::InputTooLarge(message),
            service::Error::RunBytesQuota(message) => ApiError::RunBytesQuota(message),
            service::Error::CompileBusy(message) => ApiError::CompileQueueFull {
                message,
                retry_after: COMPILE_QUEUE_RETRY_AFTER_SECS,
            },
            // One 422 for the batch; each bad item's own error (whatever its
            // status alone would be) in `details.items`, by index.
            service::Error::Items {
                what,
                total,
                errors,
            } => ApiError::items(
                what,
                total,
                errors
                    .into_iter()
                    .map(|item| (item.index, item.file, ApiError::from(*item.error)))
                    .collect(),
            ),
        }
    }
}

impl From<runtime::Error> for ApiError {
    fn from(e: runtime::Error) -> Self {
        let message = e.to_string();
        let invalid = |code| ApiError::Invalid {
            code,
            message: message.clone(),
            details: None,
        };
        match e {
            runtime::Error::Malformed(_) | runtime::Error::CoreModule => ApiError::BadRequest {
                code: "invalid_wasm",
                message,
            },
            runtime::Error::Invalid(_) => invalid("invalid_component"),
            runtime::Error::WrongWorld(_) => invalid("wrong_world"),
            runtime::Error::UnsupportedImport(_) => invalid("unsupported_import"),
            runtime::Error::Limits(_) | runtime::Error::Host(_) => ApiError::Internal(message),
            runtime::Error::CompileQueueFull(_) => ApiError::CompileQueueFull {
                message,
                retry_after: COMPILE_QUEUE_RETRY_AFTER_SECS,
            },
        }
    }
}

/// An internal error's text for the log: its own message without the
/// `internal error: ` its display starts with, then each cause the message
/// does not already show.
fn causes(e: &service::Error) -> String {
    let text = e.to_string();
    let mut out = text
        .strip_prefix("internal error: ")
        .unwrap_or(&text)
        .to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !out.contains(&shown) {
            out.push_str(": ");
            out.push_str(&shown);
        }
        source = cause.source();
    }
    out
}

/// Maps an axum rejection (known by its status and text) into the error shape.
fn rejection(status: StatusCode, text: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!(
            "{text} (the request body is over this route's limit)"
        )),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(text),
        s if s.is_server_error() => ApiError::Internal(text),
        _ => ApiError::bad_request(text),
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        rejection(r.status(), format!("bad query string: {}", r.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        rejection(r.status(), format!("bad path: {}", r.body_text()))
    }
}

impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> Self {
        if let Some(t) = super::connections::body_timed_out(&r) {
            return ApiError::BodyTimeout(t.to_string());
        }
        rejection(r.status(), r.body_text())
    }
}

impl From<MultipartRejection> for ApiError {
    fn from(r: MultipartRejection) -> Self {
        rejection(r.status(), r.body_text())
    }
}

impl From<MultipartError> for ApiError {
    fn from(r: MultipartError) -> Self {
        if let Some(t) = super::connections::body_timed_out(&r) {
            return ApiError::BodyTimeout(t.to_string());
        }
        rejection(r.status(), format!("bad multipart body: {}", r.body_text()))
    }
}

/// Parses a JSON request body into `T`: 400 `invalid_json` when it is not JSON
/// or not the expected shape (unknown fields included).
///
/// A JSON number is a number: `5.0` is read as `5` where a whole number is
/// expected, as JSON Schema's `integer` (what the API document states)
/// admits it. That second reading happens only when the body as written does
/// not fit, so a body that fits keeps every value as sent.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    // Every JSON body of the API is an object (or `null` where the body is
    // optional): serde would also read a struct from an array of its fields.
    let start = body.iter().find(|b| !b.is_ascii_whitespace());
    if !matches!(start, Some(b'{' | b'n')) {
        return Err(ApiError::BadRequest {
            code: "invalid_json",
            message: "the request body must be a JSON object".into(),
        });
    }
    let e = match serde_json::from_slice(body) {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    if e.is_data()
        && let Ok(mut value) = serde_json::from_slice::<Value>(body)
        && whole_floats_to_integers(&mut value)
        && let Ok(parsed) = serde_json::from_value(value)
    {
        return Ok(parsed);
    }
    Err(ApiError::BadRequest {
        code: "invalid_json",
        message: format!("the request body is not valid JSON for this route: {e}"),
    })
}

/// Turns every float with no fractional part that fits an `i64` or `u64`
/// into an integer; says whether it changed anything.
fn whole_floats_to_integers(value: &mut Value) -> bool {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // 2^63 and 2^64 are exact in f64; the casts are in range below them.
            let whole = if f.fract() != 0.0 {
                None
            } else if (-9.223_372_036_854_776e18..0.0).contains(&f) {
                Some(serde_json::Number::from(f as i64))
            } else if (0.0..1.844_674_407_370_955_2e19).contains(&f) {
                Some(serde_json::Number::from(f as u64))
            } else {
                None
            };
            match whole {
                Some(n) => {
                    *value = Value::Number(n);
                    true
                }
                None => false,
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| whole_floats_to_integers(v) | changed),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |changed, v| whole_floats_to_integers(v) | changed),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of every kind the API builds, through the paths handlers use.
    fn every_kind_of_error() -> Vec<ApiError> {
        let invalid = |path: Option<&str>, message: &str| service::Error::Invalid {
            path: path.map(str::to_string),
            message: message.into(),
        };
        vec![
            ApiError::bad_request("x"),
            ApiError::Unauthorized("x".into()),
            ApiError::Forbidden("x".into()),
            ApiError::NotFound("x".into()),
            ApiError::MethodNotAllowed,
            ApiError::Conflict("x".into()),
            ApiError::RunDeleted {
                message: "x".into(),
                run: "r1".into(),
            },
            ApiError::TooLarge("x".into()),
            ApiError::UnsupportedMediaType("x".into()),
            ApiError::QueueFull {
                message: "x".into(),
                retry_after: 1,
            },
            ApiError::QuotaExceeded {
                message: "x".into(),
                retry_after: 1,
            },
            ApiError::Unavailable("x".into()),
            service::Error::Store(crate::store::Error::Unavailable("x".into())).into(),
            ApiError::Internal("x".into()),
            parse_json::<bool>(b"{").unwrap_err(),
            invalid(None, "invalid YAML: x").into(),
            invalid(Some("steps[0].plugin"), "x").into(),
            invalid(Some("trigger"), "x").into(),
            runtime::Error::CoreModule.into(),
            runtime::Error::Invalid("x".into()).into(),
            runtime::Error::WrongWorld("x".into()).into(),
            runtime::Error::UnsupportedImport("x".into()).into(),
            // What `auth` answers for a bad `X-Ax-Tenant` header.
            ApiError::BadRequest {
                code: "invalid_tenant",
                message: "x".into(),
            },
            ApiError::BodyTimeout("x".into()),
            ApiError::CompileQueueFull {
                message: "x".into(),
                retry_after: 5,
            },
            ApiError::TooManyPlugins("x".into()),
            ApiError::PluginBytesQuota("x".into()),
            service::Error::InputTooLarge("x".into()).into(),
            service::Error::from(crate::scheduler::Error::RunBytesQuota("x".into())).into(),
            ApiError::TooManyTokenConnections("x".into()),
        ]
    }

    #[test]
    fn every_error_the_api_builds_has_its_code_in_the_table_and_back() {
        let built: std::collections::BTreeSet<(u16, &str)> = every_kind_of_error()
            .iter()
            .map(|e| {
                let (status, code) = e.status_and_code();
                (status.as_u16(), code)
            })
            .collect();
        // The connection cap answers before any handler, with a fixed
        // response written by `api/connections.rs` (its own unit test checks
        // that answer's code).
        let table: std::collections::BTreeSet<(u16, &str)> = codes::ALL
            .iter()
            .filter(|c| c.code != "too_many_connections")
            .map(|c| (c.status, c.code))
            .collect();
        assert_eq!(
            built, table,
            "codes::ALL and the errors the API builds differ"
        );
    }

    #[test]
    fn the_api_guide_lists_every_code_with_its_status() {
        let guide = include_str!("../../../docs/API.md");
        for c in codes::ALL {
            let row = format!("| {} | `{}` |", c.status, c.code);
            assert!(guide.contains(&row), "docs/API.md has no row `{row}`");
        }
    }

    #[test]
    fn a_whole_float_is_read_where_an_integer_is_expected() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Q {
            n: u32,
            i: Option<i64>,
            input: Value,
        }
        let q: Q = parse_json(br#"{"n": 5.0, "i": -3.0, "input": {"x": 1.5}}"#).unwrap();
        let big: crate::tenant::Quota =
            parse_json(br#"{"weight": 37.0, "kv_bytes": 2158935532043897.0}"#).unwrap();
        assert_eq!(big.kv_bytes, Some(2158935532043897));
        assert_eq!(
            q,
            Q {
                n: 5,
                i: Some(-3),
                input: json!({"x": 1.5})
            }
        );
        // A body that fits as written keeps its values as sent.
        let q: Q = parse_json(br#"{"n": 5, "i": null, "input": {"x": 1.0}}"#).unwrap();
        assert_eq!(q.input, json!({"x": 1.0}));
        for bad in [
            r#"{"n": 5.5, "input": 0}"#,
            r#"{"n": 1e30, "input": 0}"#,
            r#"{"n": -1.0, "input": 0}"#,
            r#"[5, null, 0]"#,
            "",
        ] {
            let e = parse_json::<Q>(bad.as_bytes()).unwrap_err();
            assert_eq!(e.status_and_code().1, "invalid_json", "{bad}");
        }
    }

    #[test]
    fn internal_errors_do_not_leak_their_text() {
        let e = ApiError::Internal("/secret/path: disk on fire".into());
        assert!(!e.public_message().contains("secret"));
        assert_eq!(e.status_and_code().1, "internal");
    }

    #[test]
    fn invalid_task_errors_carry_their_path() {
        let e: ApiError = service::Error::Invalid {
            path: Some("steps[0].limits.fuel".into()),
            message: "too much".into(),
        }
        .into();
        match e {
            ApiError::Invalid {
                code,
                message,
                details,
            } => {
                assert_eq!(code, "invalid");
                assert_eq!(message, "steps[0].limits.fuel: too much");
                assert_eq!(details.unwrap()["path"], "steps[0].limits.fuel");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn queue_full_says_when_to_retry_and_401_names_the_scheme() {
        let full: ApiError = service::Error::QueueFull {
            message: "full".into(),
            retry_after: 3,
        }
        .into();
        let response = full.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let response = ApiError::Unauthorized("no".into()).into_response();
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }

    #[test]
    fn syntax_errors_of_a_definition_are_400_with_their_format() {
        let yaml: ApiError = service::Error::Invalid {
            path: None,
            message: "invalid YAML: bad".into(),
        }
        .into();
        assert_eq!(
            yaml.status_and_code(),
            (StatusCode::BAD_REQUEST, "invalid_yaml")
        );
        let json: ApiError = service::Error::Invalid {
            path: None,
            message: "invalid JSON: bad".into(),
        }
        .into();
        assert_eq!(
            json.status_and_code(),
            (StatusCode::BAD_REQUEST, "invalid_json")
        );
        let plugin: ApiError = service::Error::Invalid {
            path: Some("steps[1].plugin".into()),
            message: "x".into(),
        }
        .into();
        assert_eq!(
            plugin.status_and_code(),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin")
        );
    }

    #[test]
    fn upload_errors_have_their_codes() {
        let code = |e: runtime::Error| ApiError::from(e).status_and_code();
        assert_eq!(
            code(runtime::Error::CoreModule),
            (StatusCode::BAD_REQUEST, "invalid_wasm")
        );
        assert_eq!(
            code(runtime::Error::WrongWorld("x".into())),
            (StatusCode::UNPROCESSABLE_ENTITY, "wrong_world")
        );
        assert_eq!(
            code(runtime::Error::Host("x".into())).0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            code(runtime::Error::CompileQueueFull(5)),
            (StatusCode::TOO_MANY_REQUESTS, "compile_queue_full")
        );
    }

    #[test]
    fn host_faults_are_internal_and_keep_their_causes() {
        let store = || crate::store::Error::Backend("disk on fire".into());
        let faults = [
            service::Error::Store(store()),
            service::Error::from(crate::scheduler::Error::Store(store())),
            service::Error::from(crate::scheduler::Error::Stopped),
        ];
        for fault in faults {
            let kept = std::error::Error::source(&fault).map(ToString::to_string);
            let e = ApiError::from(fault);
            assert_eq!(
                e.status_and_code(),
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            );
            assert!(kept.is_some(), "{e}");
            assert!(e.to_string().contains(&kept.unwrap()), "{e}");
            assert!(!e.public_message().contains("fire"), "{e}");
        }
    }

    #[test]
    fn a_refused_write_is_503_store_unavailable_with_retry_after() {
        let refusals = [
            service::Error::Store(crate::store::Error::Io(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "/data/db: no space left on device",
            ))),
            service::Error::from(crate::scheduler::Error::Store(
                crate::store::Error::Unavailable("/data/db: flush failed".into()),
            )),
        ];
        for refusal in refusals {
            let e = ApiError::from(refusal);
            assert_eq!(
                e.status_and_code(),
                (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable")
            );
            assert!(!e.public_message().contains("/data"), "{e}");
            let response = e.into_response();
            assert_eq!(
                response.headers()[header::RETRY_AFTER],
                STORE_RETRY_AFTER_SECS.to_string().as_str()
            );
        }
    }

    #[test]
    fn plugin_quota_errors_have_their_statuses_and_codes() {
        let code = |e: service::Error| ApiError::from(e).status_and_code();
        assert_eq!(
            code(service::Error::TooManyPlugins("x".into())),
            (StatusCode::TOO_MANY_REQUESTS, "plugin_count_quota")
        );
        assert_eq!(
            code(service::Error::PluginBytesQuota("x".into())),
            (StatusCode::PAYLOAD_TOO_LARGE, "plugin_bytes_quota")
        );
        assert_eq!(
            code(service::Error::InputTooLarge("x".into())),
            (StatusCode::PAYLOAD_TOO_LARGE, "input_too_large")
        );
        assert_eq!(
            code(service::Error::RunBytesQuota("x".into())),
            (StatusCode::PAYLOAD_TOO_LARGE, "run_bytes_quota")
        );
        assert_eq!(
            code(service::Error::CompileBusy("x".into())),
            (StatusCode::TOO_MANY_REQUESTS, "compile_queue_full")
        );
        let full = ApiError::from(runtime::Error::CompileQueueFull(5)).into_response();
        assert_eq!(
            full.headers()[header::RETRY_AFTER],
            COMPILE_QUEUE_RETRY_AFTER_SECS.to_string().as_str()
        );
    }
}
