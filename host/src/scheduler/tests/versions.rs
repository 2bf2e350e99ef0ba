//! Plugin versions resolved when each attempt starts: a range takes the
//! version uploaded between two attempts of one step, a tag its new target
//! once moved, each attempt records the version it ran, and a reference
//! that selects nothing fails its step with the reason.

use super::*;
use crate::model::PluginTag;

/// Version `version` of plugin `mv`, played by the fake runner as `digest`.
fn version(version: &str, digest: &str) -> PluginRecord {
    PluginRecord {
        tenant: "t".into(),
        name: "mv".into(),
        version: version.into(),
        digest: digest.into(),
        size: 1,
        created_at: 0,
        status: Default::default(),
        error: None,
    }
}

fn ran(run: &RunRecord) -> Vec<(Option<String>, Option<Outcome>)> {
    run.steps[0]
        .attempts
        .iter()
        .map(|a| (a.plugin_version.clone(), a.outcome))
        .collect()
}

const RETRY: &str = "retry: { max_attempts: 2, backoff: [1s] }\n";

#[tokio::test(start_paused = true)]
async fn a_range_is_resolved_at_each_attempt_and_each_records_its_version() {
    let h = Harness::start().await;
    h.store.put_plugin(&version("1.0.0", "fail")).unwrap();
    h.store.put_plugin(&version("2.0.0", "fail")).unwrap();
    h.put_task(&format!("name: r\nplugin: mv@^1\n{RETRY}"))
        .await;
    let run = h.trigger("r", serde_json::json!({})).await;
    h.poll(&run.id, Patience::Paused, |r| {
        r.steps[0].status == StepStatus::RetryWait
    })
    .await;
    // Uploaded after the run was fired and its first attempt ran.
    h.store.put_plugin(&version("1.1.0", "ok")).unwrap();
    h.store.put_plugin(&version("1.2.0-rc.1", "fail")).unwrap();
    let done = h.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        ran(&done),
        [
            (Some("1.0.0".into()), Some(Outcome::Failed)),
            (Some("1.1.0".into()), Some(Outcome::Succeeded)),
        ],
        "not 2.0.0 (out of range), not 1.2.0-rc.1 (a pre-release)"
    );
    assert_eq!(
        done.steps[0].attempts[1].plugin_digest.as_deref(),
        Some("ok")
    );
    let started: Vec<String> = h
        .store
        .events(&run.id)
        .unwrap()
        .into_iter()
        .filter(|e| e.reason.contains(" started ("))
        .map(|e| e.reason)
        .collect();
    assert_eq!(
        started,
        [
            "attempt 1 started (mv@1.0.0)",
            "attempt 2 started (mv@1.1.0)"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_moved_tag_is_taken_by_the_next_attempt() {
    let h = Harness::start().await;
    h.store.put_plugin(&version("1.0.0", "fail")).unwrap();
    h.store.put_plugin(&version("1.1.0", "ok")).unwrap();
    let tag = |v: &str| PluginTag {
        tenant: "t".into(),
        name: "mv".into(),
        tag: "stable".into(),
        version: v.into(),
        updated_at: 0,
    };
    h.store.put_plugin_tag(&tag("1.0.0")).unwrap();
    h.put_task(&format!("name: g\nplugin: mv@stable\n{RETRY}"))
        .await;
    let run = h.trigger("g", serde_json::json!({})).await;
    h.poll(&run.id, Patience::Paused, |r| {
        r.steps[0].status == StepStatus::RetryWait
    })
    .await;
    h.store.put_plugin_tag(&tag("1.1.0")).unwrap();
    let done = h.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        ran(&done),
        [
            (Some("1.0.0".into()), Some(Outcome::Failed)),
            (Some("1.1.0".into()), Some(Outcome::Succeeded)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_reference_that_selects_nothing_fails_its_step_with_the_reason() {
    let h = Harness::start().await;
    h.store.put_plugin(&version("1.0.0", "ok")).unwrap();
    // Stored through the scheduler, past the service's save-time check (as
    // after the last version of a range is deleted).
    h.put_task("name: n\nplugin: mv@^2\n").await;
    h.put_task("name: u\nplugin: mv@canary\n").await;
    let run = h.trigger("n", serde_json::json!({})).await;
    let done = h.wait_terminal(&run.id).await;
    assert_eq!(done.status, RunStatus::Failed);
    assert!(done.steps[0].attempts.is_empty(), "it never started");
    let error = done.steps[0].error.as_deref().unwrap();
    assert!(
        error.contains("no uploaded version of `mv` is in the range `^2`")
            && error.contains("uploaded: 1.0.0"),
        "{error}"
    );
    let run = h.trigger("u", serde_json::json!({})).await;
    let done = h.wait_terminal(&run.id).await;
    let error = done.steps[0].error.as_deref().unwrap();
    assert!(error.contains("`mv` has no tag `canary`"), "{error}");
    // The host goes on: a pinned task still runs.
    h.put_task("name: p\nplugin: mv@1.0.0\n").await;
    let run = h.trigger("p", serde_json::json!({})).await;
    assert_eq!(h.wait_terminal(&run.id).await.status, RunStatus::Succeeded);
}
