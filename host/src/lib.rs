//! # ax — a task execution host for sandboxed WebAssembly plugins
//!
//! ax keeps task definitions in an embedded store, fires them on time and
//! runs every step of a task as a WebAssembly component under fuel, memory and
//! wall-clock limits. This crate is the host: the `ax` binary and the library
//! it is built from.
//!
//! # Layout
//! - [`model`]: plain data shared by every layer (limits, outcomes, run records).
//! - [`task`], [`template`], [`dag`]: task definitions — parsing, validation,
//!   `${...}` variables, DAG structure. Pure.
//! - [`cond`]: `when` conditions in CEL — bounded parsing, the steps they
//!   read, evaluation against a run's state. No I/O.
//! - [`graph`]: a task's DAG drawn as text, DOT, Mermaid or JSON, with a
//!   run's step states. Pure.
//! - [`schedule`]: triggers and cron → fire instants, time zones, DST. Pure.
//! - [`store`]: the `Store` trait and its sled and in-memory implementations;
//!   the only place naming sled.
//! - [`capability`]: what a step may be granted (HTTP allow-lists, KV,
//!   config, secrets) and secret redaction, in ax terms. Pure.
//! - [`runtime`]: the sandbox — the only place naming wasmtime.
//! - [`scheduler`]: when things run — timers, dispatch queue, retries, recovery.
//! - [`service`]: the operations of ax as one facade over store, runtime, scheduler.
//! - [`api`]: the HTTP API — the only place naming axum.
//! - [`metrics`]: counters, histograms and the Prometheus text encoder
//!   behind `GET /metrics` (hand-rolled atomics; the why is in its docs).
//! - [`tenant`]: tenants, quotas, tokens and usage buckets; the registry
//!   the API authenticates against.
//! - [`retention`]: how much finished history is kept, and the sweeper.
//! - [`alerts`]: webhook alerts on failures, dead letters and late starts,
//!   delivered by a worker off the scheduler's path.
//! - [`config`], [`server`]: `ax serve` settings and wiring.
//! - [`cli`]: the `ax` command line. [`bench`]: measurement loops.
//!
//! Dependency direction: `api`/`cli` → `service` → `scheduler` → (`store`,
//! `runtime` through traits) → `model`. Nothing imports `api`.

pub mod api;
pub mod bench;
pub mod capability;
pub mod cli;
pub mod cond;
pub mod config;
pub mod dag;
pub mod graph;
pub mod metrics;
pub mod model;
pub mod runtime;
pub mod schedule;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod store;
pub mod task;
pub mod template;
pub mod tenant;
