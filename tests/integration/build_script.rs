//! host/build.rs's `wasm32-wasip2` step: the decision on real `rustup`
//! answers of this machine, and the toolchain in use has the target after
//! the build (the README's first command needs nothing else).

#[path = "../../host/build/wasm_target.rs"]
#[allow(dead_code)]
mod wasm_target;

use wasm_target::{WASM_TARGET, add_target_args, installed_targets};

#[test]
fn a_missing_target_is_added_for_the_toolchain_in_use_and_a_present_one_is_left() {
    let without = "x86_64-unknown-linux-gnu\n";
    assert_eq!(
        add_target_args(without, Some("1.95.0-x86_64-unknown-linux-gnu")).unwrap(),
        [
            "target",
            "add",
            WASM_TARGET,
            "--toolchain",
            "1.95.0-x86_64-unknown-linux-gnu"
        ]
    );
    assert_eq!(
        add_target_args(without, None).unwrap(),
        ["target", "add", WASM_TARGET]
    );
    let with = "wasm32-wasip2\nx86_64-unknown-linux-gnu\n";
    assert_eq!(add_target_args(with, Some("stable")), None);
    // A target whose name only starts the same is another target.
    assert!(add_target_args("wasm32-wasip2-threads\n", None).is_some());
}

#[test]
fn after_the_build_the_toolchain_in_use_has_the_wasm_target() {
    // Set by rustup's proxies for cargo and passed on to the tests.
    let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") else {
        // Built without rustup: the toolchain came with its targets, and
        // the plugins the build made are the proof.
        assert!(
            std::path::Path::new(env!("AX_PLUGIN_DIR"))
                .join("hello.wasm")
                .exists()
        );
        return;
    };
    let installed = installed_targets(Some(&toolchain)).unwrap_or_else(|| {
        panic!("`rustup target list --installed --toolchain {toolchain}` failed")
    });
    assert_eq!(
        add_target_args(&installed, Some(&toolchain)),
        None,
        "{toolchain} lacks {WASM_TARGET}:\n{installed}"
    );
}
