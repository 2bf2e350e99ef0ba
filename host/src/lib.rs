//! # ax — a task execution host for sandboxed WebAssembly plugins
//!
//! ax keeps task definitions, fires them on time and runs every step of a task
//! as a WebAssembly component under fuel, memory and wall-clock limits. This
//! crate is the host: the `ax` binary and the library it is built from.
//!
//! # Layout
//! - [`model`]: plain data shared by every layer (limits, outcomes, contexts, reports).
//! - [`runtime`]: the sandbox — the only module that names wasmtime: engine,
//!   validation, artifact cache, per-attempt execution and capture.
//! - [`cli`]: the `ax` command line (`ax exec`, `ax bench`).
//! - [`bench`]: the measurement loops behind `ax bench` and `cargo bench`.
//!
//! Dependency direction: `cli` → `runtime` → `model`. Nothing depends on `cli`.

pub mod bench;
pub mod cli;
pub mod model;
pub mod runtime;
