//! # ax plugin SDK
//!
//! Write an [ax](https://example.invalid/ax) task plugin in a few lines of Rust.
//! A plugin is a function from a typed input to a typed output; this crate
//! turns it into a WebAssembly component exporting the ax world
//! (`ax:plugin/task@0.1.0`, from the repository's `wit/` folder).
//!
//! ```no_run
//! use ax_plugin_sdk::{export_plugin, log, Context, Result};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize)]
//! struct Input { name: String }
//!
//! #[derive(Serialize)]
//! struct Output { greeting: String }
//!
//! fn run(ctx: Context, input: Input) -> Result<Output> {
//!     log::info(&format!("attempt {} of run {}", ctx.attempt, ctx.run_id));
//!     Ok(Output { greeting: format!("hello, {}", input.name) })
//! }
//!
//! export_plugin!(run);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2` (crate type
//! `cdylib`) and run it with `ax exec target/wasm32-wasip2/release/NAME.wasm`.
//!
//! Errors say whether another attempt can help: [`Error::retryable`] for a
//! transient failure, [`Error::fatal`] for bad input. Input that does not
//! deserialize into your type is a fatal error, reported with serde's message.
//!
//! What a plugin may do is deliberately small: compute on its input, log, report
//! progress. It has no files, no environment variables and no network —
//! unless its step grants a capability (docs/CAPABILITIES.md), deny by default:
//!
//! - [`http`]: a client over `wasi:http` for destinations in `allow_http`
//!   (redirects followed, each hop checked by the host);
//! - [`kv`]: a key-value store scoped to the tenant or the task (`kv:`), with
//!   typed JSON values and TTLs;
//! - [`config`]: the task's and step's `config:` values;
//! - [`secrets`]: the tenant's secrets the step lists (`secrets:`), redacted
//!   from everything the host records.
//!
//! ```no_run
//! use ax_plugin_sdk::{config, export_plugin, http, kv, secrets, Context, Result};
//! use serde_json::{json, Value};
//!
//! fn run(_ctx: Context, _input: Value) -> Result<Value> {
//!     let since: u64 = kv::get("cursor")?.unwrap_or(0);
//!     let url = config::get("endpoint").unwrap_or_default();
//!     let token = secrets::require("api_token")?;
//!     let page: Value = http::Request::get(&format!("{url}?since={since}"))
//!         .header("authorization", &format!("Bearer {token}"))
//!         .send()?
//!         .error_for_status()?
//!         .json()?;
//!     kv::set("cursor", &(since + 1))?;
//!     Ok(json!({ "page": page }))
//! }
//! export_plugin!(run);
//! # fn main() {}
//! ```

/// The bindings generated from the ax WIT world. Plugin code rarely needs them
/// directly; they are public so the export macro can reach them.
#[doc(hidden)]
#[allow(unsafe_code, missing_docs, unreachable_pub, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "ax:plugin/task",
        pub_export_macro: true,
        default_bindings_module: "ax_plugin_sdk::bindings",
        export_macro_name: "__export_task",
    });
}

mod caps;
pub mod http;

pub use caps::{config, kv, secrets};

use bindings::ax::plugin::types as wit;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What started the run this attempt belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The API, the CLI, or `ax exec`.
    Manual,
    /// A cron expression.
    Cron,
    /// A one-shot instant.
    At,
    /// A delay after the task's creation.
    Delay,
    /// A fixed interval.
    Every,
    /// Another task's run finished.
    After,
}

/// Facts about the attempt a plugin runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    /// The run's id (the same for every attempt of the run).
    pub run_id: String,
    /// The tenant that owns the task.
    pub tenant: String,
    /// The task's name.
    pub task: String,
    /// The step's name.
    pub step: String,
    /// The attempt number, from 1: use it to make retries idempotent.
    pub attempt: u32,
    /// The instant the run was scheduled for, RFC 3339 in UTC.
    pub scheduled_for: String,
    /// What started the run.
    pub trigger: Trigger,
}

impl From<wit::Context> for Context {
    fn from(c: wit::Context) -> Self {
        Self {
            run_id: c.run_id,
            tenant: c.tenant,
            task: c.task,
            step: c.step,
            attempt: c.attempt,
            scheduled_for: c.scheduled_for,
            trigger: match c.trigger {
                wit::TriggerKind::Manual => Trigger::Manual,
                wit::TriggerKind::Cron => Trigger::Cron,
                wit::TriggerKind::At => Trigger::At,
                wit::TriggerKind::Delay => Trigger::Delay,
                wit::TriggerKind::Every => Trigger::Every,
                wit::TriggerKind::After => Trigger::After,
            },
        }
    }
}

/// Whether another attempt can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Transient: the host retries per the step's policy.
    Retryable,
    /// Permanent: the host does not retry.
    Fatal,
}

/// An error returned by a plugin.
///
/// ```
/// use ax_plugin_sdk::{Error, ErrorKind};
///
/// let e = Error::retryable("warehouse busy");
/// assert_eq!(e.kind, ErrorKind::Retryable);
/// assert_eq!(e.to_string(), "warehouse busy");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Whether a retry can help.
    pub kind: ErrorKind,
    /// What went wrong, for people.
    pub message: String,
}

impl Error {
    /// A transient failure worth retrying.
    ///
    /// ```
    /// let e = ax_plugin_sdk::Error::retryable("timeout talking to the warehouse");
    /// assert_eq!(e.kind, ax_plugin_sdk::ErrorKind::Retryable);
    /// ```
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Retryable,
            message: message.into(),
        }
    }

    /// A permanent failure: retrying will not help.
    ///
    /// ```
    /// let e = ax_plugin_sdk::Error::fatal("date must be yyyy-MM-dd");
    /// assert_eq!(e.kind, ax_plugin_sdk::ErrorKind::Fatal);
    /// ```
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::Fatal,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// Bad JSON is the caller's mistake: fatal.
///
/// ```
/// let bad: Result<u32, _> = serde_json::from_str("\"x\"");
/// let e: ax_plugin_sdk::Error = bad.unwrap_err().into();
/// assert_eq!(e.kind, ax_plugin_sdk::ErrorKind::Fatal);
/// ```
impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::fatal(format!("invalid JSON: {e}"))
    }
}

/// The result type of a plugin function.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Structured logging into the attempt's captured log (bounded by the host).
///
/// ```no_run
/// use ax_plugin_sdk::log;
///
/// log::info("extracting orders");
/// log::with_fields(log::Level::Warn, "slow page", &[("page", "7"), ("ms", "950")]);
/// ```
pub mod log {
    pub use crate::bindings::ax::plugin::log::Level;
    use crate::bindings::ax::plugin::log::log;

    /// Logs `message` at `level` with key/value fields.
    pub fn with_fields(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        log(level, message, &fields);
    }

    /// Logs at trace level.
    pub fn trace(message: &str) {
        with_fields(Level::Trace, message, &[]);
    }

    /// Logs at debug level.
    pub fn debug(message: &str) {
        with_fields(Level::Debug, message, &[]);
    }

    /// Logs at info level.
    pub fn info(message: &str) {
        with_fields(Level::Info, message, &[]);
    }

    /// Logs at warn level.
    pub fn warn(message: &str) {
        with_fields(Level::Warn, message, &[]);
    }

    /// Logs at error level.
    pub fn error(message: &str) {
        with_fields(Level::Error, message, &[]);
    }
}

/// Reports progress (0 to 100 percent) and a short note; also a heartbeat.
///
/// ```no_run
/// ax_plugin_sdk::progress(50, "half the pages fetched");
/// ```
pub fn progress(percent: u8, note: &str) {
    bindings::ax::plugin::progress::report(percent, note);
}

/// Glue used by [`export_plugin!`]: decodes the input, calls the plugin
/// function, encodes its output. Not part of the stable API.
#[doc(hidden)]
pub fn __run<I, O, F>(ctx: wit::Context, input: String, f: F) -> Result<String, wit::TaskError>
where
    I: DeserializeOwned,
    O: Serialize,
    F: FnOnce(Context, I) -> Result<O>,
{
    let to_wit = |e: Error| wit::TaskError {
        kind: match e.kind {
            ErrorKind::Retryable => wit::ErrorKind::Retryable,
            ErrorKind::Fatal => wit::ErrorKind::Fatal,
        },
        message: e.message,
    };
    let input: I = serde_json::from_str(&input)
        .map_err(|e| to_wit(Error::fatal(format!("invalid input: {e}"))))?;
    let output = f(ctx.into(), input).map_err(to_wit)?;
    serde_json::to_string(&output)
        .map_err(|e| to_wit(Error::fatal(format!("output is not serializable: {e}"))))
}

/// Exports a function `fn(Context, I) -> Result<O>` as the plugin's `run`,
/// where `I: Deserialize` and `O: Serialize`. Use it once per plugin crate.
///
/// ```no_run
/// fn run(_ctx: ax_plugin_sdk::Context, input: serde_json::Value)
///     -> ax_plugin_sdk::Result<serde_json::Value> {
///     Ok(input)
/// }
/// ax_plugin_sdk::export_plugin!(run);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($handler:path) => {
        struct __AxPlugin;

        impl $crate::bindings::Guest for __AxPlugin {
            fn run(
                ctx: $crate::bindings::ax::plugin::types::Context,
                input: ::std::string::String,
            ) -> ::std::result::Result<
                ::std::string::String,
                $crate::bindings::ax::plugin::types::TaskError,
            > {
                $crate::__run(ctx, input, $handler)
            }
        }

        $crate::bindings::__export_task!(__AxPlugin with_types_in $crate::bindings);
    };
}
