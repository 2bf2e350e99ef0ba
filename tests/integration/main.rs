//! Integration tests of the ax host, one binary with a module per area (the
//! wasmtime layout). They use real plugins built from `plugins/` by
//! host/build.rs, the real wasmtime runtime and the real `ax` binary.

mod api;
mod capabilities;
mod cli;
mod common;
mod crash;
mod dag;
mod sandbox;
mod serve_cli;
mod tenants;
mod validation;
