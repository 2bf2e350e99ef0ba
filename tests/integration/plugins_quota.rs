//! Plugin memory, compilation and storage bounds on a real server (sled on
//! disk, wasmtime, plugins from plugins/, real sockets): the per-tenant
//! `max_plugins` and `plugin_bytes` quotas, the compile line, and the byte
//! budget of loaded plugins (read from `/metrics`, which counts the entries
//! resident now).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;
use crate::live::{Live, Reply, TOKEN};

/// `bytes` with a custom section naming `copy` appended: another digest, so
/// another compilation, artifact and loaded entry, with the same behaviour.
fn distinct(bytes: &[u8], copy: usize) -> Vec<u8> {
    let name = b"ax-test-copy";
    let mut content = vec![name.len() as u8];
    content.extend_from_slice(name);
    content.extend_from_slice(&(copy as u64).to_le_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(content.len() as u8); // its length, one LEB128 byte (< 128)
    out.extend_from_slice(&content);
    out
}

async fn upload(live: &Live, name: &str, bytes: Vec<u8>) -> Reply {
    live.call(
        "POST",
        &format!("/v1/plugins?name={name}&version=1.0.0"),
        &[],
        Some(("application/wasm", bytes)),
    )
    .await
}

fn code(r: &Reply) -> String {
    r.json()["error"]["code"].as_str().unwrap_or("").to_string()
}

async fn plugin_names(live: &Live) -> Vec<String> {
    let list = live.get("/v1/plugins").await;
    let mut names: Vec<String> = list["plugins"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| p["name"].as_str().expect("a name").to_string())
        .collect();
    names.sort();
    names
}

async fn set_quota(live: &Live, quota: Value) {
    live.send(
        "PUT",
        "/v1/tenants/default/quota",
        "application/json",
        &quota.to_string(),
    )
    .await;
}

async fn metrics(live: &Live) -> BTreeMap<String, f64> {
    let r = live.call("GET", "/metrics", &[], None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn metric(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| panic!("no sample {key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_count_quota_answers_429_and_stores_nothing() {
    // The host default applies to a tenant whose quota does not say.
    let live = Live::start(|c| c.plugin_quota_count = 2).await;
    for name in ["echo", "hello"] {
        let r = upload(&live, name, plugin_bytes(name)).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let refused = upload(&live, "fail", plugin_bytes("fail")).await;
    assert_eq!(
        (refused.status, code(&refused).as_str()),
        (429, "plugin_count_quota"),
        "{}",
        refused.text
    );
    assert!(refused.text.contains("max_plugins"), "{}", refused.text);
    assert!(
        refused.headers.get("retry-after").is_none(),
        "waiting frees nothing"
    );
    assert_eq!(plugin_names(&live).await, ["echo", "hello"]);
    // The same bytes again change nothing, so they are not refused.
    let again = upload(&live, "echo", plugin_bytes("echo")).await;
    assert_eq!(again.status, 200, "{}", again.text);

    // The tenant's own quota replaces the host default: raised, it fits.
    set_quota(&live, json!({ "max_plugins": 3 })).await;
    let r = upload(&live, "fail", plugin_bytes("fail")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = upload(&live, "notify", plugin_bytes("notify")).await;
    assert_eq!(code(&r), "plugin_count_quota", "{}", r.text);
    // Deleting a version makes room.
    let deleted = live
        .call("DELETE", "/v1/plugins/fail/1.0.0", &[], None)
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    let r = upload(&live, "notify", plugin_bytes("notify")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_bytes_quota_answers_413_and_stores_nothing() {
    let live = Live::start(|_| {}).await;
    let (echo, hello) = (plugin_bytes("echo"), plugin_bytes("hello"));
    let room = echo.len() + hello.len() - 1;
    set_quota(&live, json!({ "plugin_bytes": room })).await;
    assert_eq!(upload(&live, "echo", echo).await.status, 201);
    let refused = upload(&live, "hello", hello.clone()).await;
    assert_eq!(
        (refused.status, code(&refused).as_str()),
        (413, "plugin_bytes_quota"),
        "{}",
        refused.text
    );
    assert!(refused.text.contains("plugin_bytes"), "{}", refused.text);
    assert_eq!(plugin_names(&live).await, ["echo"]);
    let shown = live.get("/v1/tenants/default").await;
    assert_eq!(shown["quota"]["plugin_bytes"], room);

    // One byte more and it fits.
    set_quota(&live, json!({ "plugin_bytes": room + 1 })).await;
    assert_eq!(upload(&live, "hello", hello).await.status, 201);
    // The upload body limit (413 `payload_too_large`, before any quota) is
    // checked by api::refusals::bad_requests_get_a_clear_4xx_and_change_nothing: over a
    // real socket the server answers and closes while a client may still be
    // writing, which a client sees as a broken pipe rather than the answer.
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_cannot_both_pass_a_quota_only_one_fits() {
    // Room for one. All four are checked before any has compiled, so only
    // the check made with the write can keep the others out.
    let live = Live::start(|c| {
        c.plugin_quota_count = 1;
        c.compile_queue = 8;
    })
    .await;
    let (a, b, c, d) = tokio::join!(
        upload(&live, "echo", plugin_bytes("echo")),
        upload(&live, "hello", plugin_bytes("hello")),
        upload(&live, "fail", plugin_bytes("fail")),
        upload(&live, "notify", plugin_bytes("notify")),
    );
    let replies = [a, b, c, d];
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        3,
        "{statuses:?}"
    );
    assert_eq!(plugin_names(&live).await.len(), 1);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_compile_line_refuses_uploads_with_429_until_it_frees() {
    // One upload in progress at most: one compiling, none waiting.
    let live = Live::start(|c| {
        c.max_compiles = Some(1);
        c.compile_queue = 0;
    })
    .await;
    let echo = plugin_bytes("echo");
    // An upload whose body is half sent holds its place in line.
    let addr = live.base.trim_start_matches("http://").to_string();
    let mut slow = TcpStream::connect(&addr).expect("connect");
    let head = format!(
        "POST /v1/plugins?name=echo&version=1.0.0 HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        echo.len()
    );
    let half = echo.len() / 2;
    slow.write_all(head.as_bytes()).expect("head");
    slow.write_all(&echo[..half]).expect("half the body");
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&metrics(&live).await, "ax_plugin_uploads_in_progress") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the slow upload was never admitted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let refused = upload(&live, "hello", plugin_bytes("hello")).await;
    assert_eq!(
        (refused.status, code(&refused).as_str()),
        (429, "compile_queue_full"),
        "{}",
        refused.text
    );
    assert_eq!(refused.headers["retry-after"], "5");
    assert_eq!(refused.json()["error"]["details"]["retry_after"], 5);
    assert_eq!(
        metric(&metrics(&live).await, "ax_plugin_uploads_refused_total"),
        1.0
    );

    // The rest of the body: the held upload completes, and the place is free.
    let answer = tokio::task::spawn_blocking(move || {
        slow.write_all(&echo[half..]).expect("the rest");
        let mut text = String::new();
        slow.read_to_string(&mut text).expect("the answer");
        text
    })
    .await
    .expect("the slow client");
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(plugin_names(&live).await, ["echo"]);
    let r = upload(&live, "hello", plugin_bytes("hello")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // Compiled in the background: the gauges fall to zero once it is ready.
    live.wait_plugin("hello", "1.0.0").await;
    let m = metrics(&live).await;
    assert_eq!(metric(&m, "ax_plugin_uploads_in_progress"), 0.0);
    assert_eq!(metric(&m, "ax_plugin_compiles_running"), 0.0);
    assert_eq!(metric(&m, "ax_plugin_tier_ups_pending"), 0.0);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loaded_plugins_stay_within_their_byte_budget_and_evicted_ones_run_again() {
    // hostile_bulky carries 4 MiB of data: each copy is charged ~9 MiB.
    let budget_mb = 24;
    let live = Live::start(|c| c.loaded_plugins_mb = budget_mb).await;
    let bulky = plugin_bytes("hostile_bulky");
    let copies = 6;
    for i in 0..copies {
        let r = upload(&live, &format!("bulky-{i}"), distinct(&bulky, i)).await;
        assert_eq!(r.status, 201, "{}", r.text);
        live.apply(
            &format!("bulky-{i}"),
            &format!("name: bulky-{i}\nplugin: bulky-{i}@1.0.0\n"),
        )
        .await;
    }
    let mut sums = Vec::new();
    for i in 0..copies {
        let id = live.trigger(&format!("bulky-{i}")).await;
        let run = live.wait_run(&id).await;
        assert_eq!(run["status"], "succeeded", "{run:#}");
        sums.push(run["steps"][0]["output"]["sum"].clone());
        let m = metrics(&live).await;
        let bytes = metric(&m, "ax_plugins_loaded_bytes");
        assert!(
            bytes <= (budget_mb << 20) as f64,
            "{bytes} bytes loaded after run {i}"
        );
    }
    let m = metrics(&live).await;
    let loaded = metric(&m, "ax_plugins_loaded");
    assert!(
        (1.0..=2.0).contains(&loaded),
        "{loaded} copies of ~9 MiB loaded within 24 MiB"
    );
    assert!(metric(&m, "ax_plugin_evictions_total") >= 4.0, "{m:?}");
    assert_eq!(
        metric(&m, "ax_plugins_loaded_budget_bytes"),
        (budget_mb << 20) as f64
    );
    // The first copies were evicted long ago: they load from their artifact.
    let id = live.trigger("bulky-0").await;
    let run = live.wait_run(&id).await;
    assert_eq!(run["status"], "succeeded", "{run:#}");
    assert_eq!(run["steps"][0]["output"]["sum"], sums[0]);
    assert!(
        sums.iter().all(|s| *s == sums[0]),
        "same data in every copy"
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ax_tenant_quota_sets_and_unsets_the_plugin_quotas() {
    let live = Live::start(|_| {}).await;
    let base = live.base.clone();
    let ax = move |args: &'static [&'static str]| {
        let base = base.clone();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_ax"))
                .args(args)
                .env("AX_URL", &base)
                .env("AX_TOKEN", TOKEN)
                .env_remove("AX_TENANT")
                .output()
                .expect("running ax");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    };
    let out = ax(&[
        "tenant",
        "quota",
        "default",
        "--max-plugins",
        "1",
        "--plugin-bytes",
        "1000000",
    ])
    .await
    .expect("the CLI");
    assert!(
        out.contains("max_plugins") && out.contains("plugin_bytes"),
        "{out}"
    );
    let quota = live.get("/v1/tenants/default").await["quota"].clone();
    assert_eq!(
        (quota["max_plugins"].clone(), quota["plugin_bytes"].clone()),
        (json!(1), json!(1_000_000))
    );
    assert_eq!(
        upload(&live, "echo", plugin_bytes("echo")).await.status,
        201
    );
    let r = upload(&live, "hello", plugin_bytes("hello")).await;
    assert_eq!(code(&r), "plugin_count_quota", "{}", r.text);

    ax(&["tenant", "quota", "default", "--unset", "max_plugins"])
        .await
        .expect("the CLI");
    let quota = live.get("/v1/tenants/default").await["quota"].clone();
    assert!(quota["max_plugins"].is_null(), "{quota}");
    assert_eq!(
        upload(&live, "hello", plugin_bytes("hello")).await.status,
        201
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_version_keeps_bytes_another_tenant_still_uses() {
    let live = Live::start(|_| {}).await;
    live.send(
        "POST",
        "/v1/tenants",
        "application/json",
        r#"{"name": "other"}"#,
    )
    .await;
    let other = [("x-ax-tenant", "other")];
    let mine = upload(&live, "echo", plugin_bytes("echo")).await;
    assert_eq!(mine.status, 201, "{}", mine.text);
    let digest = mine.json()["digest"]
        .as_str()
        .expect("a digest")
        .to_string();
    let theirs = live
        .call(
            "POST",
            "/v1/plugins?name=echo&version=1.0.0",
            &other,
            Some(("application/wasm", plugin_bytes("echo"))),
        )
        .await;
    assert_eq!(theirs.status, 201, "{}", theirs.text);
    let blob = |live: &Live| {
        live.server
            .as_ref()
            .expect("running")
            .ax
            .store
            .get_blob(&digest)
            .expect("the store answers")
    };

    let r = live
        .call("DELETE", "/v1/plugins/echo/1.0.0", &[], None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(
        blob(&live).is_some(),
        "the other tenant's version still needs the bytes"
    );
    let r = live
        .call("DELETE", "/v1/plugins/echo/1.0.0", &other, None)
        .await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(blob(&live).is_none(), "no version names the bytes any more");
    live.stop().await;
}
