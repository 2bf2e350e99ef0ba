//! The `wasm32-wasip2` target for the toolchain building ax, used by
//! `host/build.rs` (and tested by the integration tests, which include this
//! file). rust-toolchain.toml asks rustup for the target only when rustup
//! installs the toolchain; a machine that already has that toolchain without
//! the target (e.g. linked from `stable`) stops at the plugins. The build
//! script then adds it: `rustup target add wasm32-wasip2 --toolchain T`.

use std::process::Command;

/// The target the plugins are built for.
pub(crate) const WASM_TARGET: &str = "wasm32-wasip2";

/// The `rustup` arguments that add the target to `toolchain` (the one in
/// use: `RUSTUP_TOOLCHAIN`, set by rustup's proxies), or `None` when
/// `installed` (what `rustup target list --installed` printed) has it.
pub(crate) fn add_target_args(installed: &str, toolchain: Option<&str>) -> Option<Vec<String>> {
    if installed.lines().any(|l| l.trim() == WASM_TARGET) {
        return None;
    }
    let mut args: Vec<String> = ["target", "add", WASM_TARGET].map(String::from).to_vec();
    if let Some(t) = toolchain {
        args.extend(["--toolchain".to_string(), t.to_string()]);
    }
    Some(args)
}

/// The targets rustup has for `toolchain`, or `None` without rustup (or
/// when it cannot say: then the build goes on and reports what it finds).
pub(crate) fn installed_targets(toolchain: Option<&str>) -> Option<String> {
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "list", "--installed"]);
    if let Some(t) = toolchain {
        cmd.args(["--toolchain", t]);
    }
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Adds the target when rustup is there and the toolchain lacks it.
/// `Ok(Some(args))`: it was added with these arguments; `Ok(None)`: nothing
/// to do (or no rustup); `Err`: `rustup target add` failed, with why.
pub(crate) fn ensure(toolchain: Option<&str>) -> Result<Option<Vec<String>>, String> {
    let Some(installed) = installed_targets(toolchain) else {
        return Ok(None);
    };
    let Some(args) = add_target_args(&installed, toolchain) else {
        return Ok(None);
    };
    match Command::new("rustup").args(&args).status() {
        Ok(s) if s.success() => Ok(Some(args)),
        Ok(s) => Err(format!("`rustup {}` failed ({s})", args.join(" "))),
        Err(e) => Err(format!("`rustup {}` did not start: {e}", args.join(" "))),
    }
}
