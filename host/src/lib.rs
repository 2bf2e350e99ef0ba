//! # ax — a task execution host for sandboxed WebAssembly plugins
//!
//! ax keeps task definitions in an embedded store, fires them on time and
//! runs every step of a task as a WebAssembly component under fuel, memory and
//! wall-clock limits. This crate is the host: the `ax` binary and the library
//! it is built from.
//!
//! # Layout
//!
//! Layers, lowest first; a module names only modules of a lower layer
//! (`scripts/layers` holds the table and checks it, and an integration test
//! runs it; docs/ARCHITECTURE.md draws it and follows a run through it).
//!
//! 0. [`model`]: plain data every layer shares — ids, names and versions,
//!    priorities, time formatting, limits and caps, run and attempt records.
//! 1. Pure building blocks: [`schedule`] (triggers and cron → fire instants,
//!    zones, DST), [`cond`] (`when` conditions in CEL, bounded and metered),
//!    [`template`] (`${...}` variables), [`dag`] (structure, cycles),
//!    [`metrics`] (counters, histograms, the Prometheus text encoder).
//! 2. [`capability`]: what a step may be granted (HTTP allow-lists and the
//!    address rules, KV with its `KvStore` trait, config, secrets), in ax
//!    terms.
//! 3. [`task`]: task definitions — types, the located reader, conversion,
//!    validation, retry policy, trigger rules, `alerts:` and `retention:`.
//! 4. [`graph`] (a DAG drawn as text, DOT, Mermaid, JSON) and [`tenant`]
//!    (tenant, token and usage records, quotas, the registry). Layers 0–4
//!    are pure: no tokio, no store, no sandbox.
//! 5. [`store`] (the `Store` trait; sled and memory; the only place naming
//!    sled) and [`runtime`] (the sandbox; the only place naming wasmtime).
//! 6. [`scheduler`]: when things run. `core` decides (pure functions from a
//!    run's state and an event to its new state and effects), the actor
//!    applies; the dispatch queue, quotas, the clock, condition threads, the
//!    alert worker and the retention sweeper live beside them. It reaches the
//!    sandbox only through its `Runner` trait.
//! 7. [`service`]: the operations of ax as one facade, each rule checked once.
//! 8. [`config`]: `ax serve` settings.
//! 9. [`api`]: the HTTP API — the only place naming axum.
//! 10. [`server`]: the wiring, and the `Runner` over the runtime.
//! 11. [`bench`](mod@bench): measurement loops. 12. [`cli`]: the `ax` command line.

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
