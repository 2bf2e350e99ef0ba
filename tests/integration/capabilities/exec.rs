//! `ax exec` with the grants of a step: a local KV directory, secrets
//! (redacted), config and HTTP allowed to what it is told.

use std::process::Command;

use serde_json::json;

use super::upstream;

fn ax_exec(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("exec")
        .args(args)
        .output()
        .expect("running ax exec");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn ax_exec_takes_the_same_grants_as_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let kv = dir.path().join("kv");
    let kv = kv.to_str().unwrap();
    let cursor = crate::common::plugin_path("cursor");
    let cursor = cursor.to_str().unwrap();
    // A local KV directory persists between invocations.
    for expected in [r#""from":0"#, r#""from":5"#] {
        let (ok, out) = ax_exec(&[cursor, "--kv-dir", kv, "--input", r#"{"batch": 5}"#]);
        assert!(ok && out.contains(expected), "{out}");
    }
    // Without --kv-dir: no KV, and the error says how to get one.
    let (ok, out) = ax_exec(&[cursor, "--input", "{}"]);
    assert!(!ok && out.contains("declare `kv: tenant`"), "{out}");
    // Secrets and config; the secret is redacted from everything printed.
    let probe = crate::common::plugin_path("probe");
    let input =
        json!({ "ops": [{ "leak": { "name": "tok", "fail": false } }, { "config": "mode" }] });
    let (ok, out) = ax_exec(&[
        probe.to_str().unwrap(),
        "--secret",
        "tok=hunter2-zz",
        "--config",
        "mode=fast",
        "--input",
        &input.to_string(),
    ]);
    assert!(ok, "{out}");
    assert!(
        !out.contains("hunter2-zz") && out.contains("[redacted]"),
        "{out}"
    );
    assert!(out.contains(r#"{"ok":"fast"}"#), "{out}");
    // A bad pattern is refused before anything runs.
    let (ok, out) = ax_exec(&[probe.to_str().unwrap(), "--allow-http", "ftp://x"]);
    assert!(
        !ok && out.contains("the scheme must be `http` or `https`"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_exec_allows_http_to_what_it_is_told() {
    let up = upstream().await;
    let probe = crate::common::plugin_path("probe");
    let input = json!({ "ops": [{ "get": up.url("/ok") }] }).to_string();
    let pattern = up.pattern();
    let run = |allow: Option<String>| {
        let (probe, input) = (probe.clone(), input.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec![probe.to_str().unwrap().to_string(), "--input".into(), input];
            if let Some(p) = allow {
                args.extend(["--allow-http".into(), p]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ax_exec(&args)
        })
    };
    let (ok, out) = run(Some(pattern)).await.unwrap();
    assert!(ok && out.contains(r#""status":200"#), "{out}");
    let (ok, out) = run(None).await.unwrap();
    assert!(ok && out.contains("denied"), "{out}");
    assert_eq!(up.hits(), 1);
}
