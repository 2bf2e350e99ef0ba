//! Background compilation on a real server (sled on disk, wasmtime, plugins
//! from plugins/, real sockets): an upload answers `compiling` and becomes
//! `ready`; one that fails to compile becomes `failed` with the reason; a
//! run that starts while its plugin compiles waits for it; a version left
//! `compiling` by a stop compiles on the next start; a tenant's compilations
//! are bounded.
//!
//! Where a test must be sure a compilation is still running when it looks,
//! it reserves the component's compilation in the server's own runtime
//! first (`Runtime::reserve_compile`, the path every compilation takes):
//! the upload's compilation then waits for that one, and the test ends it by
//! compiling the bytes itself.

use std::time::Duration;

use serde_json::Value;

use crate::common::plugin_bytes;
use crate::live::{Live, Reply};

async fn upload(live: &Live, name: &str, version: &str, bytes: Vec<u8>) -> Reply {
    upload_as(live, &[], name, version, bytes).await
}

async fn upload_as(
    live: &Live,
    headers: &[(&str, &str)],
    name: &str,
    version: &str,
    bytes: Vec<u8>,
) -> Reply {
    live.call(
        "POST",
        &format!("/v1/plugins?name={name}&version={version}"),
        headers,
        Some(("application/wasm", bytes)),
    )
    .await
}

fn runtime(live: &Live) -> ax::runtime::Runtime {
    live.server.as_ref().expect("running").ax.runtime.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_answered_compiling_and_becomes_ready() {
    let live = Live::start(|_| {}).await;
    let r = upload(&live, "echo", "1.0.0", plugin_bytes("echo")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["status"], "compiling", "{}", r.text);
    let v = live.wait_plugin("echo", "1.0.0").await;
    assert_eq!(v["status"], "ready", "{v}");
    assert!(v.get("error").is_none(), "{v}");
    let list = live.get("/v1/plugins").await;
    assert_eq!(list["plugins"][0]["status"], "ready", "{list}");
    // The same bytes under another version are loaded already: ready at once.
    let r = upload(&live, "echo", "1.0.1", plugin_bytes("echo")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["status"], "ready", "{}", r.text);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_does_not_compile_becomes_failed_with_its_reason() {
    let live = Live::start(|_| {}).await;
    // Valid wasm with an allowed import list and a `run` export, so the
    // upload's check passes; `run`'s type is not the ax world's, which only
    // the compiled component's types tell.
    let bad = plugin_bytes("invalid_wrong_signature");
    let r = upload(&live, "wrong", "1.0.0", bad).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["status"], "compiling", "{}", r.text);
    let digest = r.json()["digest"].as_str().expect("a digest").to_string();
    let v = live.wait_plugin("wrong", "1.0.0").await;
    assert_eq!(v["status"], "failed", "{v}");
    let error = v["error"].as_str().expect("a reason");
    assert!(error.contains("`run` export does not match"), "{error}");
    // Its bytes go; its record stays, with the reason. The bytes are
    // deleted just after the status is written, so a reader may see
    // `failed` a moment before they are gone.
    let store = live.server.as_ref().expect("running").ax.store.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.get_blob(&digest).expect("the store").is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the bytes of a version that failed to compile are still stored"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A task may not name it.
    let r = live
        .call(
            "PUT",
            "/v1/tasks/uses-wrong",
            &[],
            Some((
                "application/yaml",
                b"name: uses-wrong\nplugin: wrong@1.0.0\n".to_vec(),
            )),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.text.contains("failed to compile"), "{}", r.text);

    // The same name and version uploaded again replaces the failed version.
    let r = upload(&live, "wrong", "1.0.0", plugin_bytes("echo")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let v = live.wait_plugin("wrong", "1.0.0").await;
    assert_eq!(v["status"], "ready", "{v}");
    live.apply("uses-wrong", "name: uses-wrong\nplugin: wrong@1.0.0\n")
        .await;
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_started_while_its_plugin_compiles_waits_for_it_and_succeeds() {
    let live = Live::start(|_| {}).await;
    let echo = plugin_bytes("echo");
    let rt = runtime(&live);
    let slot = rt
        .reserve_compile(&ax::runtime::digest(&echo))
        .expect("nothing compiles yet");
    let r = upload(&live, "echo", "1.0.0", echo.clone()).await;
    assert_eq!(r.json()["status"], "compiling", "{}", r.text);
    // A task may name a version still compiling.
    live.apply(
        "waits",
        "name: waits\nplugin: echo@1.0.0\ninput: {\"x\": 7}\n",
    )
    .await;
    let id = live.trigger("waits").await;
    // The attempt starts and waits for the compilation.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let run = live.get(&format!("/v1/runs/{id}")).await;
        if run["steps"][0]["status"] == "running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{run}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let run = live.get(&format!("/v1/runs/{id}")).await;
    assert_eq!(run["status"], "running", "{run}");
    let v = live.get("/v1/plugins/echo/1.0.0").await;
    assert_eq!(v["status"], "compiling", "{v}");

    tokio::task::spawn_blocking(move || slot.compile(&echo))
        .await
        .expect("the compile thread")
        .expect("echo compiles");
    let run = live.wait_run(&id).await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(run["steps"][0]["output"]["input"]["x"], 7, "{run:#}");
    let v = live.wait_plugin("echo", "1.0.0").await;
    assert_eq!(v["status"], "ready", "{v}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_left_compiling_by_a_stop_compiles_on_the_next_start() {
    // What a stop during a compilation leaves in the sled store: the bytes
    // and a record still `compiling`.
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = plugin_bytes("echo");
    {
        let store = ax::store::SledStore::open(dir.path()).expect("the store opens");
        use ax::store::prelude::*;
        let digest = store.put_blob(&echo).expect("the blob");
        store
            .put_plugin(&ax::model::PluginRecord {
                tenant: "default".into(),
                name: "echo".into(),
                version: "1.0.0".into(),
                digest,
                size: echo.len() as u64,
                created_at: 0,
                status: ax::model::PluginStatus::Compiling,
                error: None,
            })
            .expect("the record");
        store.sync_ticket().wait().await.expect("durable");
    }
    let data_dir = dir.path().to_path_buf();
    let live = Live::start(move |c| c.data_dir = data_dir).await;
    let v = live.wait_plugin("echo", "1.0.0").await;
    assert_eq!(v["status"], "ready", "{v}");
    live.apply("after-restart", "name: after-restart\nplugin: echo@1.0.0\n")
        .await;
    let id = live.trigger("after-restart").await;
    let run = live.wait_run(&id).await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_its_compilations_in_progress_is_refused_more_with_429() {
    let live = Live::start(|c| c.plugin_compiling_per_tenant = 1).await;
    live.send(
        "POST",
        "/v1/tenants",
        "application/json",
        r#"{"name": "other"}"#,
    )
    .await;
    let echo = plugin_bytes("echo");
    let slot = runtime(&live)
        .reserve_compile(&ax::runtime::digest(&echo))
        .expect("nothing compiles yet");
    let r = upload(&live, "echo", "1.0.0", echo.clone()).await;
    assert_eq!(r.json()["status"], "compiling", "{}", r.text);
    let refused = upload(&live, "hello", "1.0.0", plugin_bytes("hello")).await;
    let body: Value = refused.json();
    assert_eq!(
        (refused.status, body["error"]["code"].as_str()),
        (429, Some("compile_queue_full")),
        "{}",
        refused.text
    );
    assert!(
        refused.text.contains("1 plugin versions compiling"),
        "{}",
        refused.text
    );
    assert_eq!(refused.headers["retry-after"], "5");
    let names = live.get("/v1/plugins").await["plugins"]
        .as_array()
        .expect("a list")
        .len();
    assert_eq!(names, 1, "nothing stored for the refused upload");
    // Another tenant is not held back by this one's compilations.
    let theirs = upload_as(
        &live,
        &[("x-ax-tenant", "other")],
        "hello",
        "1.0.0",
        plugin_bytes("hello"),
    )
    .await;
    assert_eq!(theirs.status, 201, "{}", theirs.text);

    tokio::task::spawn_blocking(move || slot.compile(&echo))
        .await
        .expect("the compile thread")
        .expect("echo compiles");
    live.wait_plugin("echo", "1.0.0").await;
    let r = upload(&live, "hello", "1.0.0", plugin_bytes("hello")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    live.stop().await;
}

/// `ax plugin push FILE --version V --wait` against `live`: exit code,
/// stdout, stderr.
async fn push_and_wait(live: &Live, file: &str, name: &str) -> (i32, String, String) {
    let base = live.base.clone();
    let path = crate::common::plugin_path(file);
    let name = name.to_string();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(["plugin", "push"])
            .arg(&path)
            .args(["--name", &name, "--version", "1.0.0", "--wait"])
            .env("AX_URL", &base)
            .env("AX_TOKEN", crate::live::TOKEN)
            .env_remove("AX_TENANT")
            .output()
            .expect("running ax");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("the CLI")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_wait_says_compiling_then_ready_or_failed_with_its_exit_code() {
    let live = Live::start(|_| {}).await;
    let (code, out, err) = push_and_wait(&live, "echo", "echo").await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("uploaded: echo@1.0.0"), "{out}");
    assert!(err.contains("compiling echo@1.0.0"), "{err}");
    assert!(out.contains("ready: echo@1.0.0"), "{out}");

    let (code, out, err) = push_and_wait(&live, "invalid_wrong_signature", "wrong").await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("compile_failed"), "{err}");
    assert!(err.contains("`run` export does not match"), "{err}");
    live.stop().await;
}
