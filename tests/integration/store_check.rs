//! `ax store check` on a real data directory: the format and every entry
//! read; a directory in use, of a newer format or not a store is refused
//! with exit 1 and a message that says why.

use std::process::Command;

use ax::store::sled::STORE_FORMAT;

use crate::crash::AxProcess;

fn check(dir: &std::path::Path, json: bool) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.args(["store", "check", "--data-dir"]).arg(dir);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn store_check_reports_the_format_and_refuses_what_it_cannot_check() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ax = AxProcess::start(&data);
    // In use by the server: refused, and nothing changes for it.
    let (ok, out) = check(&data, false);
    assert!(!ok && out.contains("in use"), "{out}");
    ax.kill();

    let (ok, out) = check(&data, false);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("store format {STORE_FORMAT}")) && out.contains("no damage"),
        "{out}"
    );
    let (ok, out) = check(&data, true);
    assert!(ok, "{out}");
    let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (json["format"].as_u64(), json["current"].as_u64()),
        (Some(STORE_FORMAT.into()), Some(STORE_FORMAT.into()))
    );
    assert!(json["entries"].as_u64().unwrap() > 0, "{json}");
    // The entries by kind add up to all of them, each kind with its bytes.
    let kinds = json["kinds"].as_object().expect("kinds");
    let total: u64 = kinds.values().map(|k| k["entries"].as_u64().unwrap()).sum();
    assert_eq!(Some(total), json["entries"].as_u64(), "{json}");
    assert!(
        kinds.values().all(|k| k["bytes"].as_u64().unwrap() > 0),
        "{json}"
    );
    let (_, out) = check(&data, false);
    assert!(out.contains("kind") && out.contains("per run"), "{out}");

    // An older format is reported, not opened (opening upgrades it).
    std::fs::write(data.join("store-format"), "3\n").unwrap();
    let (ok, out) = check(&data, false);
    assert!(ok && out.contains("next `ax serve` upgrades it"), "{out}");
    // A newer one is refused.
    std::fs::write(data.join("store-format"), "99\n").unwrap();
    let (ok, out) = check(&data, false);
    assert!(!ok && out.contains("newer"), "{out}");
    // Not a data directory.
    let (ok, out) = check(dir.path(), false);
    assert!(!ok && out.contains("not an ax data directory"), "{out}");
}
