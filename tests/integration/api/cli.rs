//! The `ax` client commands driving the router served on a real socket.

use std::process::Output;

use serde_json::Value;

use super::{HELLO_TASK, TOKEN, ax_cli, host};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_client_drives_a_real_server() {
    let h = host().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ax::api::serve(
        listener,
        h.state.clone(),
        ax::config::ConnectionsConfig::default(),
        h.shutdown.clone(),
    ));
    let dir = tempfile::tempdir().unwrap();
    let task_file = dir.path().join("hello.yaml");
    std::fs::write(&task_file, HELLO_TASK).unwrap();
    let plugin = crate::common::plugin_path("hello").display().to_string();
    let task_file = task_file.display().to_string();

    let out = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| ax_cli(&url, Some(TOKEN), args);
        let text = |o: &Output| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };

        let push = run(&["plugin", "push", &plugin, "--version", "1.0.0"]);
        assert!(push.status.success(), "{}", text(&push));
        assert!(
            text(&push).contains("uploaded: hello@1.0.0"),
            "{}",
            text(&push)
        );
        let list = run(&["plugin", "list"]);
        assert!(
            String::from_utf8_lossy(&list.stdout).starts_with("NAME   VERSION"),
            "{}",
            text(&list)
        );

        let apply = run(&["task", "apply", "-f", &task_file]);
        assert!(apply.status.success(), "{}", text(&apply));
        assert!(
            text(&apply).contains("task hello created"),
            "{}",
            text(&apply)
        );

        let trigger = run(&[
            "trigger",
            "hello",
            "--input",
            r#"{"name":"cli"}"#,
            "--wait",
            "--timeout",
            "20s",
            "--json",
        ]);
        assert!(trigger.status.success(), "{}", text(&trigger));
        let finished: Value = serde_json::from_slice(&trigger.stdout).unwrap();
        assert_eq!(finished["status"], "succeeded");
        assert_eq!(finished["steps"][0]["output"]["greeting"], "hello, cli");
        let id = finished["id"].as_str().unwrap().to_string();

        let show = run(&["run", "show", &id]);
        assert!(
            text(&show).contains("succeeded") && text(&show).contains("hello, cli"),
            "{}",
            text(&show)
        );
        let runs = run(&["runs", "--task", "hello"]);
        assert!(text(&runs).contains(&id), "{}", text(&runs));
        let logs = run(&["logs", &id]);
        assert!(text(&logs).contains("greeting cli"), "{}", text(&logs));
        let events = run(&["events", &id, "--json"]);
        let events: Value = serde_json::from_slice(&events.stdout).unwrap();
        assert!(!events["events"].as_array().unwrap().is_empty());

        let unknown = run(&["run", "show", "r-nope"]);
        assert_eq!(unknown.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&unknown.stderr).starts_with("error: not_found: "),
            "{}",
            text(&unknown)
        );
        let anonymous = ax_cli(&url, None, &["runs"]);
        assert_eq!(anonymous.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&anonymous.stderr).starts_with("error: unauthorized: "),
            "{}",
            text(&anonymous)
        );
        "ok"
    })
    .await
    .unwrap();
    assert_eq!(out, "ok");
}
