//! `params:` at run creation: a fire takes the defaults, an `after` run the
//! defaults and `upstream`, a manual trigger its overrides; a bad override
//! creates nothing and takes no trigger token.

use serde_json::json;

use super::*;

const PARAMS: &str = "params:\n  - { name: day, type: string, default: '2026-01-01' }\n  - { name: limit, type: integer, default: 10 }\n  - { name: mode, type: enum, values: [full, incremental], default: full }\n";

#[tokio::test(start_paused = true)]
async fn a_fire_takes_the_defaults_and_the_step_sees_them() {
    let h = Harness::start().await;
    h.put_task(&format!(
        "name: tick\ntrigger: {{ every: 10s }}\n{PARAMS}plugin: ok@1.0.0\ninput: {{ d: '${{input.day}}', n: '${{input.limit}}' }}\n"
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    let runs = h.runs("tick");
    assert_eq!(runs.len(), 1);
    let run = h.wait_terminal(&runs[0].id).await;
    assert_eq!(
        run.input,
        json!({"day": "2026-01-01", "limit": 10, "mode": "full"})
    );
    assert_eq!(
        run.steps[0].output,
        Some(json!({"echo": {"d": "2026-01-01", "n": 10}}))
    );
}

#[tokio::test(start_paused = true)]
async fn a_manual_trigger_overrides_params_over_input_over_defaults() {
    let h = Harness::start().await;
    h.put_task(&format!(
        "name: m\n{PARAMS}plugin: ok@1.0.0\ninput: '${{input}}'\n"
    ))
    .await;
    let params = json!({"limit": 99, "mode": "incremental"});
    let (run, created) = h
        .scheduler
        .trigger(TriggerRequest {
            tenant: "t".into(),
            task: "m".into(),
            input: Some(json!({"day": "2026-12-01", "limit": 5})),
            params: params.as_object().cloned(),
            actor: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(created);
    let want = json!({"day": "2026-12-01", "limit": 99, "mode": "incremental"});
    assert_eq!(run.input, want);
    let run = h.wait_terminal(&run.id).await;
    assert_eq!(run.steps[0].output, Some(json!({ "echo": want })));
}

#[tokio::test(start_paused = true)]
async fn a_bad_override_creates_nothing_and_takes_no_trigger_token() {
    let store = Arc::new(MemoryStore::new());
    store
        .put_tenant(&tenant_record(
            "t",
            crate::tenant::Quota {
                trigger_rate_per_sec: Some(1.0),
                ..Default::default()
            },
        ))
        .unwrap();
    let h = Harness::start_with(store, test_config()).await;
    h.put_task(&format!("name: m\n{PARAMS}plugin: ok@1.0.0\n"))
        .await;
    for (params, message) in [
        (
            json!({"limit": "ten"}),
            "params.limit: param `limit` is an integer: expected a whole number, found the text `ten`",
        ),
        (
            json!({"mode": "partial"}),
            "params.mode: param `mode` is an enum of `full`, `incremental`: expected one of `full`, `incremental`, found the text `partial`",
        ),
        (
            json!({"dya": "x"}),
            "params.dya: task `m` has no param `dya`; did you mean `day`?",
        ),
    ] {
        let e = h
            .scheduler
            .trigger(TriggerRequest {
                tenant: "t".into(),
                task: "m".into(),
                params: params.as_object().cloned(),
                actor: "test".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Params(_)), "{e:?}");
        assert_eq!(e.to_string(), message);
    }
    assert!(h.runs("m").is_empty(), "a refused trigger stores no run");
    // The one token of this second was not spent on the refusals.
    let run = h.trigger("m", json!({"limit": 3})).await;
    assert_eq!(run.input["limit"], 3);
}

#[tokio::test(start_paused = true)]
async fn an_after_run_takes_the_defaults_and_upstream() {
    let h = Harness::start().await;
    h.put_task("name: up\nplugin: ok@1.0.0\ninput: { rows: 5 }\n")
        .await;
    h.put_task(&format!(
        "name: down\ntrigger: {{ after: [up] }}\n{PARAMS}plugin: ok@1.0.0\ninput: {{ rows: '${{input.upstream.outputs.up.echo.rows}}', n: '${{input.limit}}' }}\n"
    ))
    .await;
    let up = h.trigger("up", json!({})).await;
    h.wait_terminal(&up.id).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let downs = h.runs("down");
    assert_eq!(downs.len(), 1);
    let down = h.wait_terminal(&downs[0].id).await;
    assert_eq!(down.input["limit"], 10);
    assert_eq!(down.input["day"], "2026-01-01");
    assert_eq!(down.input["upstream"]["run_id"], up.id.as_str());
    assert_eq!(
        down.steps[0].output,
        Some(json!({"echo": {"rows": 5, "n": 10}}))
    );
}
