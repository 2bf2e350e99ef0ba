//! The module graph of `host/src` as `scripts/layers` checks it: no circle,
//! no module naming one of the same or a higher layer, the outside crates
//! (sled, wasmtime, axum) each named by its one layer only.

use std::path::Path;
use std::process::Command;

#[test]
fn the_module_graph_has_no_circle_and_no_upward_edge() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join("scripts/layers"))
        .arg(root.join("host/src"))
        .output()
        .expect("python3 runs scripts/layers");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/layers found problems:\n{text}"
    );
    assert!(text.contains("0 problems"), "{text}");
}
