//! Builds the example and test plugins in `plugins/` to `wasm32-wasip2`, so
//! `cargo build` and `cargo test` on a fresh clone have real components to run.
//! The plugins live in their own workspace and are built into
//! `<target-dir>/plugins`; their folder is exported as `AX_PLUGIN_DIR`.
//!
//! When rustup is there and the toolchain in use lacks the `wasm32-wasip2`
//! target, this adds it first (`rustup target add`, see `build/wasm_target.rs`).
//!
//! Set `AX_SKIP_PLUGIN_BUILD=1` to skip this (the tests that need plugins then fail).
//! Set `AX_PLUGIN_TARGET_DIR` to build the plugins elsewhere, e.g. when several
//! checkouts share one `CARGO_TARGET_DIR` but carry different plugins.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/wasm_target.rs"]
mod wasm_target;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest_dir
        .parent()
        .expect("host/ sits in the workspace root");
    let plugins = root.join("plugins");
    for watched in ["plugins", "plugin-sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    println!("cargo:rerun-if-env-changed=AX_SKIP_PLUGIN_BUILD");
    println!("cargo:rerun-if-env-changed=AX_PLUGIN_TARGET_DIR");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("set by cargo"));
    let target_dir = match env::var_os("AX_PLUGIN_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => cargo_target_dir(&out_dir).join("plugins"),
    };
    let wasm_dir = target_dir.join("wasm32-wasip2").join("release");
    println!("cargo:rustc-env=AX_PLUGIN_DIR={}", wasm_dir.display());
    if env::var_os("AX_SKIP_PLUGIN_BUILD").is_some() {
        return;
    }

    println!("cargo:rerun-if-changed=build/wasm_target.rs");
    // The toolchain in use, as rustup's proxies tell cargo and its children.
    let toolchain = env::var("RUSTUP_TOOLCHAIN").ok();
    let added = wasm_target::ensure(toolchain.as_deref());
    match &added {
        Ok(Some(args)) => println!(
            "cargo:warning=the {} target was missing; added it with `rustup {}`",
            wasm_target::WASM_TARGET,
            args.join(" ")
        ),
        Ok(None) => {}
        Err(e) => println!("cargo:warning={e}"),
    }

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&plugins)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags and wrappers are for the host target (and, under
    // clippy, would run clippy on the plugins); the plugins get a plain build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("running cargo to build the plugins");
    if !status.success() {
        let why = match added {
            Err(e) => format!("; adding the wasm32-wasip2 target failed: {e}"),
            Ok(_) => String::new(),
        };
        panic!(
            "building the plugins in {} failed ({status}){why}; is the wasm32-wasip2 target installed? \
             (`rustup target add wasm32-wasip2`; rust-toolchain.toml asks rustup for it)",
            plugins.display()
        );
    }
}

/// The outer target directory: the ancestor of OUT_DIR holding `CACHEDIR.TAG`.
fn cargo_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("ax-target"))
}
