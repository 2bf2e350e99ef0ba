//! Integration tests of the ax host, one binary with a module per area (the
//! wasmtime layout). They use real plugins built from `plugins/` by
//! host/build.rs, the real wasmtime runtime and the real `ax` binary.

mod alerts;
mod api;
mod browser;
mod build_script;
mod bulk;
mod capabilities;
mod cli;
mod cli_polish;
mod common;
mod compile;
mod connections;
mod contract;
mod crash;
mod dag;
mod deploy;
mod dev;
mod dump;
mod durable_alerts;
mod first_hour;
mod full_disk;
mod layers;
mod live;
mod local_run;
mod logs;
mod metrics;
mod openapi;
mod params;
mod plugin_tags;
mod plugins_quota;
mod polyglot;
mod postgres;
mod postgres_restart;
mod postgres_tls;
mod replay;
mod retention;
mod sandbox;
mod scaffold;
mod scale;
mod serve_cli;
mod storage_quota;
mod store_check;
mod tenants;
mod terminal;
mod validation;
