//! DAG workflows over HTTP against a real `ax serve`, with real plugins:
//! the seed articles' pipeline taking either branch on the row count, trigger
//! rules with failed upstreams, outputs flowing downstream, conditions that
//! cannot be evaluated, and cycles refused with their path.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;
use crate::crash::{AxProcess, call, new_agent};

/// The seed articles' case: extract orders, pack full or incremental by row
/// count, notify once either pack succeeded.
const PIPELINE: &str = r#"
name: order_report
steps:
  - name: extract
    plugin: extract-orders@1.0.0
    input: { date: "2026-11-30", rows: "${input.rows}" }
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
  - name: notify
    needs: [full, incremental]
    trigger_rule: one_success
    plugin: notify@1.0.0
    input: { text: "report ready: ${steps.extract.output.rows} rows" }
"#;

struct Ax {
    server: AxProcess,
    agent: ureq::Agent,
}

impl Ax {
    fn start(dir: &std::path::Path) -> Self {
        let ax = Ax {
            server: AxProcess::start(dir),
            agent: new_agent(),
        };
        for (name, file) in [
            ("extract-orders", "extract_orders"),
            ("pack", "pack"),
            ("notify", "notify"),
            ("fail", "fail"),
            ("echo", "echo"),
        ] {
            let url = format!("/v1/plugins?name={name}&version=1.0.0");
            let (status, body) =
                ax.req("POST", &url, Some(&plugin_bytes(file)), "application/wasm");
            assert_eq!(status, 201, "{body}");
        }
        ax
    }

    fn req(&self, method: &str, path: &str, body: Option<&[u8]>, ct: &str) -> (u16, Value) {
        call(
            &self.agent,
            method,
            &format!("{}{path}", self.server.url),
            body,
            ct,
        )
        .unwrap()
    }

    fn apply(&self, yaml: &str) -> (u16, Value) {
        let name = yaml.lines().find_map(|l| l.strip_prefix("name: ")).unwrap();
        self.req(
            "PUT",
            &format!("/v1/tasks/{name}"),
            Some(yaml.as_bytes()),
            "application/yaml",
        )
    }

    /// Triggers `task` with `input` and waits for the run to end.
    fn run(&self, task: &str, input: Value) -> Value {
        let body = json!({ "input": input }).to_string();
        let (status, run) = self.req(
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            Some(body.as_bytes()),
            "application/json",
        );
        assert_eq!(status, 201, "{run}");
        let id = run["id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, run) = self.req("GET", &format!("/v1/runs/{id}"), None, "");
            if matches!(
                run["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            ) {
                return run;
            }
            assert!(Instant::now() < deadline, "run did not finish: {run}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn step<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

#[test]
fn the_pipeline_takes_the_branch_its_row_count_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    let (status, body) = ax.apply(PIPELINE);
    assert_eq!(status, 201, "{body}");

    let big = ax.run("order_report", json!({ "rows": 900000 }));
    assert_eq!(big["status"], "succeeded", "{big}");
    assert_eq!(step(&big, "full")["status"], "succeeded");
    assert_eq!(step(&big, "full")["output"]["mode"], "full");
    assert_eq!(step(&big, "incremental")["status"], "skipped");
    assert!(
        step(&big, "incremental")["error"]
            .as_str()
            .unwrap()
            .contains("condition is false")
    );
    assert_eq!(step(&big, "notify")["status"], "succeeded");
    // Outputs flow downstream: the notify step received the extracted count.
    assert_eq!(
        step(&big, "notify")["input"]["text"],
        "report ready: 900000 rows"
    );
    assert_eq!(step(&big, "full")["input"]["rows"], 900000);

    let small = ax.run("order_report", json!({ "rows": 1000 }));
    assert_eq!(small["status"], "succeeded", "{small}");
    assert_eq!(step(&small, "full")["status"], "skipped");
    assert_eq!(step(&small, "incremental")["status"], "succeeded");
    assert_eq!(step(&small, "incremental")["output"]["files"], 1);
    assert_eq!(
        step(&small, "notify")["output"]["text"],
        "report ready: 1000 rows"
    );

    // The graph of a run shows which branch was taken.
    let id = small["id"].as_str().unwrap();
    let (status, graph) = ax.req(
        "GET",
        &format!("/v1/tasks/order_report/graph?format=json&run={id}"),
        None,
        "",
    );
    assert_eq!(status, 200);
    let states: Vec<(String, String)> = graph["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        states.contains(&("full".into(), "skipped".into())),
        "{states:?}"
    );
}

#[test]
fn trigger_rules_decide_what_runs_after_a_failed_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    let rules = r#"
name: rules
steps:
  - name: primary
    plugin: fail@1.0.0
    input: { kind: fatal, message: "primary warehouse down" }
  - name: backup
    plugin: echo@1.0.0
    input: { from: backup }
  - name: failover
    needs: [primary, backup]
    trigger_rule: one_success
    plugin: echo@1.0.0
  - name: strict
    needs: [primary, backup]
    plugin: echo@1.0.0
  - name: careful
    needs: [primary, backup]
    trigger_rule: none_failed
    plugin: echo@1.0.0
  - name: cleanup
    needs: [primary, backup]
    trigger_rule: all_done
    plugin: echo@1.0.0
"#;
    let (status, body) = ax.apply(rules);
    assert_eq!(status, 201, "{body}");
    let run = ax.run("rules", json!({}));
    assert_eq!(step(&run, "primary")["status"], "failed");
    assert_eq!(
        step(&run, "failover")["status"],
        "succeeded",
        "one_success: the backup suffices"
    );
    assert_eq!(
        step(&run, "strict")["status"],
        "cancelled",
        "all_success: a failed upstream cancels it"
    );
    assert!(
        step(&run, "strict")["attempts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(step(&run, "careful")["status"], "cancelled", "none_failed");
    assert_eq!(
        step(&run, "cleanup")["status"],
        "succeeded",
        "all_done runs regardless"
    );
    // `strict` and `careful` are leaves that did not succeed.
    assert_eq!(run["status"], "failed");
}

#[test]
fn a_condition_that_cannot_be_evaluated_fails_its_step_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    let yaml = r#"
name: typo
steps:
  - name: a
    plugin: echo@1.0.0
  - name: b
    needs: [a]
    when: "steps.a.output.no_such_field > 3"
    plugin: echo@1.0.0
"#;
    assert_eq!(ax.apply(yaml).0, 201);
    let run = ax.run("typo", json!({}));
    assert_eq!(step(&run, "b")["status"], "failed");
    assert!(
        step(&run, "b")["error"]
            .as_str()
            .unwrap()
            .contains("condition could not be evaluated"),
        "{run}"
    );
    assert_eq!(run["status"], "failed");
}

#[test]
fn bad_dags_are_refused_on_save_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    let cycle = "name: loop\nsteps:\n  - name: a\n    needs: [c]\n    plugin: echo@1.0.0\n  - name: b\n    needs: [a]\n    plugin: echo@1.0.0\n  - name: c\n    needs: [b]\n    plugin: echo@1.0.0\n";
    let (status, body) = ax.apply(cycle);
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a -> c -> b -> a") || message.contains("a -> b -> c -> a"),
        "{message}"
    );

    let not_upstream = "name: nu\nsteps:\n  - name: a\n    plugin: echo@1.0.0\n  - name: b\n    plugin: echo@1.0.0\n    input: { x: \"${steps.a.output.n}\" }\n";
    let (status, body) = ax.apply(not_upstream);
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("upstream"),
        "{body}"
    );

    let bad_when = "name: bw\nsteps:\n  - name: a\n    plugin: echo@1.0.0\n  - name: b\n    needs: [a]\n    when: \"steps.a.output.n >\"\n    plugin: echo@1.0.0\n";
    let (status, body) = ax.apply(bad_when);
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"]["path"], "steps[1].when", "{body}");

    let after_cycle_a = "name: ta\ntrigger: { after: [tb] }\nplugin: echo@1.0.0\n";
    let after_cycle_b = "name: tb\ntrigger: { after: [ta] }\nplugin: echo@1.0.0\n";
    assert_eq!(ax.apply("name: tb\nplugin: echo@1.0.0\n").0, 201);
    assert_eq!(ax.apply(after_cycle_a).0, 201);
    let (status, body) = ax.apply(after_cycle_b);
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("cycle"),
        "{body}"
    );

    let (_, tasks) = ax.req("GET", "/v1/tasks", None, "");
    let names: Vec<&str> = tasks["tasks"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        !names.contains(&"loop") && !names.contains(&"nu") && !names.contains(&"bw"),
        "{tasks}"
    );
}

/// The cross-task `after` check is the DAG's linear cycle search: a chain of
/// 30 diamonds (2^30 upstream paths) is checked at once, where a search that
/// walks every path would not finish, and the cycle is named.
#[test]
fn after_cycles_through_diamonds_are_found_at_once_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    assert_eq!(ax.apply("name: d0\nplugin: echo@1.0.0\n").0, 201);
    let mut below = vec!["d0".to_string()];
    for layer in 1..=30 {
        let names = vec![format!("l{layer}x"), format!("l{layer}y")];
        for name in &names {
            let task = format!(
                "name: {name}\ntrigger: {{ after: [{}] }}\nplugin: echo@1.0.0\n",
                below.join(", ")
            );
            let (status, body) = ax.apply(&task);
            assert_eq!(status, 201, "{body}");
        }
        below = names;
    }
    let closing = "name: d0\ntrigger: { after: [l30x] }\nplugin: echo@1.0.0\n";
    let (status, body) = ax.apply(closing);
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`after` triggers would form a cycle: d0 -> l30x -> l29"),
        "{message}"
    );
    assert!(
        message.ends_with("l1x -> d0 (each task runs after the next)")
            || message.ends_with("l1y -> d0 (each task runs after the next)"),
        "{message}"
    );
    assert_eq!(body["error"]["details"]["path"], "trigger.after", "{body}");
}

#[test]
fn a_finished_task_triggers_its_after_task_with_its_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    assert_eq!(
        ax.apply("name: upstream\nplugin: echo@1.0.0\ninput: { rows: 42 }\n")
            .0,
        201
    );
    let down = "name: downstream\ntrigger: { after: [upstream], on: success }\nplugin: echo@1.0.0\ninput: { rows: \"${input.upstream.outputs.upstream.input.rows}\" }\n";
    assert_eq!(ax.apply(down).0, 201);
    let up = ax.run("upstream", json!({}));
    assert_eq!(up["status"], "succeeded");
    let deadline = Instant::now() + Duration::from_secs(20);
    let run = loop {
        let (_, page) = ax.req("GET", "/v1/runs?task=downstream", None, "");
        if let Some(run) = page["runs"]
            .as_array()
            .and_then(|r| r.first())
            .filter(|r| r["status"] == "succeeded")
        {
            break run.clone();
        }
        assert!(Instant::now() < deadline, "downstream never ran: {page}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(run["trigger"], "after");
    assert_eq!(run["steps"][0]["output"]["input"]["rows"], 42);
}

#[test]
fn conditions_over_their_budget_are_refused_on_save_or_stopped_at_run_time() {
    let dir = tempfile::tempdir().unwrap();
    let ax = Ax::start(dir.path());
    // Seven nested `map`s over ten items: refused on save, with the reason.
    let mut nested = "a".to_owned();
    for v in ["g", "f", "e", "d", "c", "b", "a"] {
        nested = format!("[0,1,2,3,4,5,6,7,8,9].map({v},{nested})");
    }
    let yaml = format!(
        "name: maps\nsteps:\n  - name: a\n    plugin: echo@1.0.0\n  - name: b\n    needs: [a]\n    when: \"{nested}.size() > 0\"\n    plugin: echo@1.0.0\n"
    );
    let (status, body) = ax.apply(&yaml);
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["details"]["path"], "steps[1].when", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("would take about 83333331 steps"),
        "{body}"
    );
    // n³ over the trigger input: cannot be known on save; stopped when run.
    let cubic = r#"
name: cubic
steps:
  - name: a
    plugin: echo@1.0.0
  - name: b
    needs: [a]
    when: "input.l.all(x, input.l.all(y, input.l.all(z, x + y + z >= 0)))"
    plugin: echo@1.0.0
"#;
    assert_eq!(ax.apply(cubic).0, 201);
    let started = Instant::now();
    let run = ax.run("cubic", json!({ "l": (0..1000).collect::<Vec<_>>() }));
    let took = started.elapsed();
    assert_eq!(step(&run, "b")["status"], "failed", "{run}");
    assert!(
        step(&run, "b")["error"]
            .as_str()
            .unwrap()
            .starts_with("condition exceeded its budget: "),
        "{run}"
    );
    assert_eq!(run["status"], "failed");
    // Unbounded, this was ~13 minutes of the scheduler's thread.
    assert!(took < Duration::from_secs(10), "{took:?}");
    // Small inputs are evaluated as ever.
    let run = ax.run("cubic", json!({ "l": [1, 2, 3] }));
    assert_eq!(run["status"], "succeeded", "{run}");
}
