//! Task graphs over the API: the SPEC §4 DAG drawn as text, dot, mermaid
//! and JSON, with and without a run's states; and `ax graph` printing the
//! server's drawing.

use axum::body::Body;
use axum::http::{StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use super::{Host, TOKEN, ax_cli, host, request};

/// The SPEC §4 shape on the example plugins: extract → full | incremental → push.
const REPORT_TASK: &str = r#"name: report
steps:
  - name: extract
    plugin: extract-orders@1.0.0
    input: { date: "2026-11-30", rows: 900000 }
  - name: full
    needs: [extract]
    when: "steps.extract.output.rows > 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: full }
  - name: incremental
    needs: [extract]
    when: "steps.extract.output.rows <= 800000"
    plugin: pack@1.0.0
    input: { rows: "${steps.extract.output.rows}", mode: incremental }
  - name: push
    needs: [full, incremental]
    trigger_rule: one_success
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

impl Host {
    /// A GET whose answer may not be JSON: `(status, content type, body text)`.
    async fn get_text(&self, path: &str) -> (StatusCode, String, String) {
        let response = self
            .app
            .clone()
            .oneshot(request("GET", path, None).body(Body::empty()).unwrap())
            .await
            .expect("the router never fails");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).expect("UTF-8"),
        )
    }

    /// Uploads the three plugins of [`REPORT_TASK`] and applies it. While the
    /// host refuses `when` (conditions not supported yet), applies the same
    /// DAG without its conditions instead; answers whether `when` was kept.
    async fn apply_report(&self) -> bool {
        for (file, name) in [
            ("extract_orders", "extract-orders"),
            ("pack", "pack"),
            ("notify", "notify"),
        ] {
            let up = self.upload(file, name).await;
            assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
        }
        let task = self.apply("report", REPORT_TASK).await;
        if task.status == StatusCode::UNPROCESSABLE_ENTITY
            && task.body["error"]["details"]["path"] == "steps[1].when"
        {
            let plain: String = REPORT_TASK
                .lines()
                .filter(|l| !l.trim_start().starts_with("when:"))
                .map(|l| format!("{l}\n"))
                .collect();
            let task = self.apply("report", &plain).await;
            assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
            return false;
        }
        assert_eq!(task.status, StatusCode::CREATED, "{}", task.body);
        true
    }
}

#[tokio::test]
async fn a_task_graph_is_drawn_in_four_formats_and_with_a_runs_states() {
    let h = host().await;
    let conditional = h.apply_report().await;
    const TEXT: &str = "text/plain; charset=utf-8";

    let (status, content_type, text) = h.get_text("/v1/tasks/report/graph").await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, TEXT),
        "{text}"
    );
    assert!(text.starts_with("report: 4 steps in 3 layers\n"), "{text}");
    assert!(
        text.contains("extract      ──▶ full, incremental"),
        "{text}"
    );
    assert_eq!(
        text.contains("[when: steps.extract.output.rows > 800000]"),
        conditional,
        "{text}"
    );
    assert!(text.contains("notify@1.0.0 (one_success)"), "{text}");
    assert!(!text.contains(" · "), "no run, no states: {text}");
    let (_, _, explicit) = h.get_text("/v1/tasks/report/graph?format=text").await;
    assert_eq!(explicit, text);

    let (status, content_type, dot) = h.get_text("/v1/tasks/report/graph?format=dot").await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, TEXT));
    assert!(
        dot.starts_with("digraph \"report\" {\n  rankdir=LR;"),
        "{dot}"
    );
    let edge = if conditional {
        "\"extract\" -> \"full\" [style=dashed, label=\"when\"];"
    } else {
        "\"extract\" -> \"full\";"
    };
    assert!(dot.contains(edge), "{dot}");
    assert!(dot.contains("\"full\" -> \"push\";"), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");

    let (status, content_type, mermaid) = h.get_text("/v1/tasks/report/graph?format=mermaid").await;
    assert_eq!((status, content_type.as_str()), (StatusCode::OK, TEXT));
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    let edge = if conditional {
        "s0_extract -.-> s1_full"
    } else {
        "s0_extract --> s1_full"
    };
    assert!(mermaid.contains(edge), "{mermaid}");
    assert!(mermaid.contains("s2_incremental --> s3_push"), "{mermaid}");
    assert!(!mermaid.contains("classDef"), "{mermaid}");

    let json = h.get("/v1/tasks/report/graph?format=json").await;
    assert_eq!(json.status, StatusCode::OK);
    assert_eq!(
        json.headers[header::CONTENT_TYPE],
        "application/json",
        "an object, not a string"
    );
    assert_eq!(
        json.body["order"],
        json!(["extract", "full", "incremental", "push"])
    );
    assert_eq!(json.body["edges"].as_array().unwrap().len(), 4);
    assert_eq!(json.body["nodes"][0]["plugin"], "extract-orders@1.0.0");
    assert_eq!(json.body["nodes"][3]["trigger_rule"], "one_success");
    assert!(json.body["nodes"][0].get("state").is_none());

    // A run: the graph of what ran, each step with its state.
    let run = h.trigger("report", json!({})).await;
    assert_eq!(run.status, StatusCode::CREATED, "{}", run.body);
    let id = run.body["id"].as_str().unwrap().to_string();
    let done = h.wait_run(&id).await;
    assert_eq!(done["status"], "succeeded", "{done:#}");
    let status_of = |step: &str| {
        done["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == step)
            .map(|s| s["status"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(status_of("extract"), "succeeded");
    assert_eq!(status_of("push"), "succeeded");

    let with_run = h
        .get(&format!("/v1/tasks/report/graph?format=json&run={id}"))
        .await;
    assert_eq!(with_run.status, StatusCode::OK, "{}", with_run.body);
    for node in with_run.body["nodes"].as_array().unwrap() {
        let name = node["name"].as_str().unwrap();
        assert_eq!(node["state"], status_of(name).as_str(), "{name}");
    }
    let (_, _, text) = h
        .get_text(&format!("/v1/tasks/report/graph?run={id}"))
        .await;
    assert!(
        text.lines()
            .any(|l| l.contains("extract-orders@1.0.0") && l.ends_with(" · succeeded")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("(one_success)") && l.ends_with(" · succeeded")),
        "{text}"
    );
    let (_, _, dot) = h
        .get_text(&format!("/v1/tasks/report/graph?format=dot&run={id}"))
        .await;
    assert!(dot.contains("fillcolor=\"#bbf7d0\""), "{dot}");
    let (_, _, mermaid) = h
        .get_text(&format!("/v1/tasks/report/graph?format=mermaid&run={id}"))
        .await;
    assert!(
        mermaid.contains("classDef state_succeeded fill:#bbf7d0"),
        "{mermaid}"
    );

    // Refusals, in the standard error shape.
    let bad = h.get("/v1/tasks/report/graph?format=svg").await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    assert!(
        bad.message().contains("text, dot, mermaid or json"),
        "{}",
        bad.message()
    );
    let missing = h.get("/v1/tasks/nope/graph").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let unknown_run = h.get("/v1/tasks/report/graph?run=r-nope").await;
    assert_eq!(unknown_run.status, StatusCode::NOT_FOUND);
    // A one-step task reads as two lines; a run of another task, or of
    // another tenant, is not found.
    let solo = h
        .apply(
            "solo",
            "name: solo\nplugin: notify@1.0.0\ninput: { text: hi }\n",
        )
        .await;
    assert_eq!(solo.status, StatusCode::CREATED, "{}", solo.body);
    let (_, _, text) = h.get_text("/v1/tasks/solo/graph").await;
    assert_eq!(text, "solo: 1 step\n  solo  notify@1.0.0\n");
    let other_task = h.get(&format!("/v1/tasks/solo/graph?run={id}")).await;
    assert_eq!(
        (other_task.status, other_task.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let other_tenant = h
        .send(
            request(
                "GET",
                &format!("/v1/tasks/report/graph?run={id}"),
                Some("other"),
            )
            .body(Body::empty())
            .unwrap(),
        )
        .await;
    assert_eq!(other_tenant.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_graph_prints_the_servers_drawing() {
    let h = host().await;
    h.apply_report().await;
    let (_, _, expected) = h.get_text("/v1/tasks/report/graph").await;
    let (_, _, mermaid) = h.get_text("/v1/tasks/report/graph?format=mermaid").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ax::api::serve(
        listener,
        h.state.clone(),
        ax::config::ConnectionsConfig::default(),
        h.shutdown.clone(),
    ));
    tokio::task::spawn_blocking(move || {
        let run = |args: &[&str]| ax_cli(&url, Some(TOKEN), args);
        let out = run(&["graph", "report"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
        let out = run(&["graph", "report", "--format", "mermaid"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), mermaid);
        let out = run(&["graph", "report", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["order"][0], "extract");
        let out = run(&["graph", "nope"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("error: not_found: "),
            "{out:?}"
        );
    })
    .await
    .unwrap();
}
