//! Tenants end to end, in-process over the real router, scheduler, runtime
//! and plugins: the authorization matrix over every route, quotas with real
//! fuel (held, refused, released by a raise), usage equal to the attempts'
//! fuel, trigger-rate and queue caps, and caps on task definitions; and on a
//! real server (`fairness`), the fuel of timed-out and cancelled attempts,
//! the wall-time budget and the priority ceiling.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};

use crate::api::{Answer, Host, TOKEN, host};
use crate::common::plugin_bytes;

/// Who a request is sent as.
#[derive(Clone, Copy, Debug)]
enum As<'a> {
    Nobody,
    Token(&'a str),
    Admin(Option<&'a str>),
}

fn req(who: As<'_>, method: &str, path: &str, body: Body) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(path);
    match who {
        As::Nobody => {}
        As::Token(t) => b = b.header(header::AUTHORIZATION, format!("Bearer {t}")),
        As::Admin(tenant) => {
            b = b.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
            if let Some(t) = tenant {
                b = b.header("x-ax-tenant", t);
            }
        }
    }
    b.body(body).expect("request")
}

async fn call(h: &Host, who: As<'_>, method: &str, path: &str, body: &str) -> Answer {
    h.send(req(who, method, path, Body::from(body.to_string())))
        .await
}

/// Creates a tenant with `quota` and returns a token for it.
async fn tenant(h: &Host, name: &str, quota: Value) -> String {
    let a = call(
        h,
        As::Admin(None),
        "POST",
        "/v1/tenants",
        &json!({ "name": name, "quota": quota }).to_string(),
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let a = call(
        h,
        As::Admin(None),
        "POST",
        &format!("/v1/tenants/{name}/tokens"),
        r#"{"label": "test"}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    a.body["token"]
        .as_str()
        .expect("token shown once")
        .to_string()
}

/// Uploads echo and applies task `work` as `token`'s tenant.
async fn echo_task(h: &Host, token: &str, extra: &str) {
    let up = h
        .send(
            Request::builder()
                .method("POST")
                .uri("/v1/plugins?name=echo&version=1.0.0")
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .header(header::CONTENT_TYPE, "application/wasm")
                .body(Body::from(plugin_bytes("echo")))
                .unwrap(),
        )
        .await;
    assert_eq!(up.status, StatusCode::CREATED, "{}", up.body);
    let def = format!("name: work\nplugin: echo@1.0.0\ninput: {{ n: 1 }}\n{extra}");
    let a = call(h, As::Token(token), "PUT", "/v1/tasks/work", &def).await;
    assert!(a.status.is_success(), "{}", a.body);
}

async fn trigger(h: &Host, token: &str) -> Answer {
    call(h, As::Token(token), "POST", "/v1/tasks/work/runs", "{}").await
}

async fn run_to_end(h: &Host, token: &str) -> Value {
    let a = trigger(h, token).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    wait(h, token, a.body["id"].as_str().unwrap(), |r| {
        matches!(
            r["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        )
    })
    .await
}

async fn wait(h: &Host, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..2000 {
        let a = call(h, As::Token(token), "GET", &format!("/v1/runs/{id}"), "").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        if done(&a.body) {
            return a.body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("run {id} never got there");
}

fn fuel_of(run: &Value) -> u64 {
    run["steps"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["fuel_consumed"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn every_route_answers_each_kind_of_caller_right_and_leaks_nothing() {
    let h = host().await;
    let a = tenant(&h, "team-a", json!({})).await;
    let b = tenant(&h, "team-b", json!({})).await;
    echo_task(&h, &b, "").await;
    let run = run_to_end(&h, &b).await;
    let id = run["id"].as_str().unwrap().to_string();
    // A dead letter of B's, to probe the dead-letter routes with.
    let revoked = {
        let t = call(&h, As::Admin(None), "POST", "/v1/tenants/team-a/tokens", "").await;
        let token = t.body["token"].as_str().unwrap().to_string();
        let tid = t.body["id"].as_str().unwrap();
        let del = call(
            &h,
            As::Admin(None),
            "DELETE",
            &format!("/v1/tenants/team-a/tokens/{tid}"),
            "",
        )
        .await;
        assert_eq!(del.status, StatusCode::NO_CONTENT);
        token
    };
    let forged = format!("axt_{}_{}", "0".repeat(12), "1".repeat(64));

    // Routes on B's objects: (method, path, body).
    let object_routes: Vec<(&str, String, &str)> = vec![
        ("GET", "/v1/plugins/echo".into(), ""),
        ("GET", "/v1/plugins/echo/1.0.0".into(), ""),
        ("DELETE", "/v1/plugins/echo/1.0.0".into(), ""),
        ("GET", "/v1/tasks/work".into(), ""),
        ("DELETE", "/v1/tasks/work".into(), ""),
        ("POST", "/v1/tasks/work/pause".into(), ""),
        ("POST", "/v1/tasks/work/resume".into(), ""),
        ("GET", "/v1/tasks/work/next".into(), ""),
        ("GET", "/v1/tasks/work/graph".into(), ""),
        ("POST", "/v1/tasks/work/runs".into(), "{}"),
        ("GET", format!("/v1/runs/{id}"), ""),
        ("GET", format!("/v1/runs/{id}/logs"), ""),
        ("GET", format!("/v1/runs/{id}/events"), ""),
        ("POST", format!("/v1/runs/{id}/cancel"), ""),
        ("POST", format!("/v1/runs/{id}/retry"), ""),
        ("POST", format!("/v1/runs/{id}/steps/work/rerun"), ""),
        (
            "POST",
            "/v1/dead-letters/d0/resolve".into(),
            r#"{"resolution":"x"}"#,
        ),
        ("POST", "/v1/dead-letters/d0/requeue".into(), ""),
    ];
    let list_routes = ["/v1/plugins", "/v1/tasks", "/v1/runs", "/v1/dead-letters"];
    let admin_routes: Vec<(&str, &str, &str)> = vec![
        ("GET", "/v1/tenants", ""),
        ("POST", "/v1/tenants", r#"{"name":"evil"}"#),
        ("GET", "/v1/tenants/team-a", ""),
        ("PUT", "/v1/tenants/team-a", r#"{"description":"x"}"#),
        (
            "PUT",
            "/v1/tenants/team-a/quota",
            r#"{"fuel_per_window": 1}"#,
        ),
        ("POST", "/v1/tenants/team-a/disable", ""),
        ("POST", "/v1/tenants/team-a/enable", ""),
        ("GET", "/v1/tenants/team-a/tokens", ""),
        ("POST", "/v1/tenants/team-a/tokens", ""),
        ("DELETE", "/v1/tenants/team-a/tokens/000000000000", ""),
        ("GET", "/v1/tenants/team-a/usage", ""),
    ];
    let every: Vec<(&str, String, &str)> = object_routes
        .iter()
        .cloned()
        .chain(list_routes.iter().map(|p| ("GET", p.to_string(), "")))
        .chain(admin_routes.iter().map(|(m, p, b)| (*m, p.to_string(), *b)))
        .chain([("POST", "/v1/plugins?name=x&version=1.0.0".to_string(), "")])
        .chain([(
            "PUT",
            "/v1/tasks/x".to_string(),
            "name: x\nplugin: echo@1.0.0\n",
        )])
        .chain([("GET", "/v1/cron/next?expr=0+0+*+*+*+?".to_string(), "")])
        .collect();

    for (method, path, body) in &every {
        for who in [
            As::Nobody,
            As::Token("nonsense"),
            As::Token(&forged),
            As::Token(&revoked),
        ] {
            let r = call(&h, who, method, path, body).await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::UNAUTHORIZED, "unauthorized"),
                "{method} {path} as {who:?}"
            );
            assert!(!r.body.to_string().contains(&id), "{method} {path} leaked");
        }
        // A tenant token naming another tenant in the header is refused outright.
        let mut r = req(As::Token(&a), method, path, Body::from(body.to_string()));
        r.headers_mut()
            .insert("x-ax-tenant", "team-b".parse().unwrap());
        assert_eq!(
            h.send(r).await.status,
            StatusCode::FORBIDDEN,
            "{method} {path}"
        );
    }
    for (method, path, body) in &object_routes {
        let r = call(&h, As::Token(&a), method, path, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "A on B's {method} {path}: {}",
            r.body
        );
        // The answer is the one for an object that does not exist: nothing
        // of B's (its tenant, the run's state or output) shows through.
        let text = r.body.to_string();
        assert!(
            !text.contains("team-b") && !text.contains("succeeded") && !text.contains("\"echo\":"),
            "{method} {path} leaked: {text}"
        );
    }
    for path in list_routes {
        let r = call(&h, As::Token(&a), "GET", path, "").await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        let text = r.body.to_string();
        assert!(
            !text.contains(&id) && !text.contains("work"),
            "{path}: {text}"
        );
    }
    for (method, path, body) in &admin_routes {
        let r = call(&h, As::Token(&a), method, path, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "forbidden"),
            "tenant on {method} {path}"
        );
    }
    // An admin naming an unknown tenant: 404; B's own token still sees B's run.
    let r = call(&h, As::Admin(Some("nobody")), "GET", "/v1/runs", "").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = call(&h, As::Token(&b), "GET", &format!("/v1/runs/{id}"), "").await;
    assert_eq!(r.status, StatusCode::OK);
    // Nothing of B changed through all that (the B-object calls were refused).
    assert_eq!(r.body["status"], "succeeded");
    let tasks = call(&h, As::Token(&b), "GET", "/v1/tasks", "").await;
    assert_eq!(tasks.body["tasks"][0]["name"], "work");
    // A disabled tenant's token is 403; enabling it restores access.
    call(
        &h,
        As::Admin(None),
        "POST",
        "/v1/tenants/team-b/disable",
        "",
    )
    .await;
    let r = call(&h, As::Token(&b), "GET", "/v1/tasks", "").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = call(
        &h,
        As::Admin(Some("team-b")),
        "POST",
        "/v1/tasks/work/runs",
        "{}",
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "no triggers while disabled"
    );
    call(&h, As::Admin(None), "POST", "/v1/tenants/team-b/enable", "").await;
    let r = call(&h, As::Token(&b), "GET", "/v1/tasks", "").await;
    assert_eq!(r.status, StatusCode::OK);
    // Token listings never carry the secret.
    let r = call(&h, As::Admin(None), "GET", "/v1/tenants/team-b/tokens", "").await;
    assert!(!r.body.to_string().contains(&b[17..]), "{}", r.body);
}

#[tokio::test]
async fn a_tenant_out_of_fuel_is_held_others_run_and_a_raise_releases_it() {
    let h = host().await;
    let other = tenant(&h, "other", json!({})).await;
    echo_task(&h, &other, "").await;
    // What one echo attempt costs, measured on the unlimited tenant.
    let f = fuel_of(&run_to_end(&h, &other).await);
    assert!(f > 0);

    let budget = 2 * f + f / 2;
    let burner = tenant(
        &h,
        "burner",
        json!({ "fuel_per_window": budget, "window": "1d" }),
    )
    .await;
    echo_task(&h, &burner, "").await;
    let r1 = run_to_end(&h, &burner).await;
    let r2 = run_to_end(&h, &burner).await;
    let r3 = run_to_end(&h, &burner).await;
    assert_eq!(
        (r1["status"].as_str(), r2["status"].as_str()),
        (Some("succeeded"), Some("succeeded"))
    );
    // The third attempt got only what was left, and ran out of it.
    assert_eq!(r3["status"], "failed", "{r3:#}");
    assert_eq!(r3["steps"][0]["attempts"][0]["outcome"], "fuel_exhausted");
    let burned = fuel_of(&r1) + fuel_of(&r2) + fuel_of(&r3);
    assert_eq!(burned, budget, "never more than the budget");

    // Now held: the run waits in `queued` with the reason visible.
    let held = trigger(&h, &burner).await;
    assert_eq!(held.status, StatusCode::CREATED);
    let held_id = held.body["id"].as_str().unwrap().to_string();
    let seen = wait(&h, &burner, &held_id, |r| r["held"].is_string()).await;
    assert_eq!(seen["status"], "queued");
    assert!(
        seen["held"].as_str().unwrap().contains("fuel budget"),
        "{seen}"
    );
    // Another tenant is unaffected.
    assert_eq!(run_to_end(&h, &other).await["status"], "succeeded");
    assert_eq!(
        call(
            &h,
            As::Token(&burner),
            "GET",
            &format!("/v1/runs/{held_id}"),
            ""
        )
        .await
        .body["status"],
        "queued"
    );

    // Usage equals the sum of the attempts' fuel (written behind: poll briefly).
    let mut usage = Value::Null;
    for _ in 0..200 {
        usage = call(&h, As::Admin(None), "GET", "/v1/tenants/burner/usage", "")
            .await
            .body;
        if usage["total"]["attempts"] == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(usage["total"]["fuel"], burned, "{usage:#}");
    assert_eq!(usage["total"]["attempts"], 3);
    assert_eq!(usage["by_task"]["work"]["fuel"], burned);
    assert_eq!(usage["total"]["outcomes"]["fuel_exhausted"], 1);
    assert_eq!(usage["window"]["fuel_used"], burned);
    assert_eq!(usage["window"]["fuel_budget"], budget);
    let day = call(
        &h,
        As::Admin(None),
        "GET",
        "/v1/tenants/burner/usage?from=2000-01-01&to=2000-01-02",
        "",
    )
    .await;
    assert_eq!(day.body["total"]["fuel"], 0, "another range, nothing used");

    // Refuse mode: a trigger now answers 429 with Retry-After.
    let refuse = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/burner/quota",
        &json!({ "fuel_per_window": budget, "out_of_fuel": "refuse" }).to_string(),
    )
    .await;
    assert_eq!(refuse.status, StatusCode::OK, "{}", refuse.body);
    let r = trigger(&h, &burner).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
    );
    assert!(r.headers.contains_key(header::RETRY_AFTER));

    // A raise releases the held run, without a restart.
    let raise = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/burner/quota",
        &json!({ "fuel_per_window": budget * 10 }).to_string(),
    )
    .await;
    assert_eq!(raise.status, StatusCode::OK);
    let done = wait(&h, &burner, &held_id, |r| r["status"] == "succeeded").await;
    assert!(done.get("held").is_none(), "{done}");
}

#[tokio::test]
async fn trigger_rate_queue_cap_and_attempt_caps_are_enforced() {
    let h = host().await;
    let t = tenant(
        &h,
        "capped",
        json!({ "trigger_rate_per_sec": 1, "max_fuel_per_attempt": 5000000, "max_timeout": "10s" }),
    )
    .await;
    echo_task(&h, &t, "").await;
    let first = trigger(&h, &t).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let first = first.body["id"].as_str().unwrap().to_string();
    let r = trigger(&h, &t).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
    );
    assert_eq!(r.headers[header::RETRY_AFTER], "1");
    wait(&h, &t, &first, |r| r["status"] == "succeeded").await;
    // Definitions above the tenant's caps are refused with the cap named.
    let over = call(
        &h,
        As::Token(&t),
        "PUT",
        "/v1/tasks/big",
        "name: big\nplugin: echo@1.0.0\nlimits: { fuel: 6000000 }\n",
    )
    .await;
    assert_eq!(over.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        over.body.to_string().contains("cap of 5000000"),
        "{}",
        over.body
    );
    let slow = call(
        &h,
        As::Token(&t),
        "PUT",
        "/v1/tasks/slow",
        "name: slow\nplugin: echo@1.0.0\nlimits: { timeout: 1m }\n",
    )
    .await;
    assert_eq!(
        slow.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        slow.body
    );
    // A queued-run cap: hold the tenant (budget used up), then fill its queue.
    let q = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"fuel_per_window": 1, "max_queued_runs": 1}"#,
    )
    .await;
    assert_eq!(q.status, StatusCode::OK, "{}", q.body);
    // The run before used more than 1 fuel in this window: the next is held.
    let held = trigger(&h, &t).await;
    assert_eq!(held.status, StatusCode::CREATED, "held, queued");
    let held = held.body["id"].as_str().unwrap().to_string();
    wait(&h, &t, &held, |r| r["held"].is_string()).await;
    let r = trigger(&h, &t).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "queue_full")
    );
    // Bad quotas are refused with the field named, and change nothing.
    let bad = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"window": "90m"}"#,
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.body.to_string().contains("window"), "{}", bad.body);
    let unknown = call(
        &h,
        As::Admin(None),
        "PUT",
        "/v1/tenants/capped/quota",
        r#"{"fuel": 1}"#,
    )
    .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    let shown = call(&h, As::Admin(None), "GET", "/v1/tenants/capped", "").await;
    assert_eq!(shown.body["quota"]["fuel_per_window"], 1);
    assert_eq!(shown.body["quota"]["max_queued_runs"], 1);
}

/// The `ax tenant` commands against a real `ax serve`; tenants, tokens and
/// quotas survive a restart.
#[test]
fn the_tenant_commands_work_and_tenants_survive_a_restart() {
    use std::process::Command;

    use crate::crash::AxProcess;

    let ax = |server: &AxProcess, token: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ax"))
            .args(args)
            .env("AX_URL", &server.url)
            .env("AX_TOKEN", token)
            .env_remove("AX_TENANT")
            .output()
            .expect("running ax");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let admin = crate::crash::TOKEN;
    let dir = tempfile::tempdir().unwrap();
    let server = AxProcess::start(dir.path());
    let (code, out, err) = ax(
        &server,
        admin,
        &[
            "tenant",
            "create",
            "acme",
            "--fuel-per-window",
            "1000000000",
            "--window",
            "1d",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("fuel_per_window") && out.contains("1000000000"),
        "{out}"
    );
    let (code, out, err) = ax(
        &server,
        admin,
        &[
            "tenant",
            "quota",
            "acme",
            "--weight",
            "3",
            "--unset",
            "fuel_per_window",
            "--max-priority",
            "8",
            "--wall-ms-per-window",
            "600000",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("weight") && out.contains(" 3"), "{out}");
    assert!(out.contains("max_priority") && out.contains(" 8"), "{out}");
    assert!(out.contains("600000"), "{out}");
    let (code, _, err) = ax(
        &server,
        admin,
        &["tenant", "quota", "acme", "--max-priority", "10"],
    );
    assert_eq!(
        code,
        Some(2),
        "a ceiling above 9 is refused by the flag: {err}"
    );
    let (_, out, _) = ax(&server, admin, &["tenant", "list"]);
    assert!(out.contains("acme") && out.contains("default"), "{out}");
    let (code, out, err) = ax(
        &server,
        admin,
        &[
            "tenant", "token", "create", "acme", "--label", "ci", "--json",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let created: Value = serde_json::from_str(&out).expect("json");
    let token = created["token"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    // The tenant token works for the tenant's own routes, not for admin ones.
    let (code, _, err) = ax(&server, &token, &["task", "list"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = ax(&server, &token, &["tenant", "list"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("forbidden"), "{err}");
    let (code, out, err) = ax(&server, admin, &["tenant", "usage", "acme"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("total"), "{out}");

    server.kill();
    let server = AxProcess::start(dir.path());
    let (code, out, err) = ax(&server, admin, &["tenant", "show", "acme", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["quota"]["weight"], 3);
    assert_eq!(shown["quota"]["max_priority"], 8);
    assert_eq!(shown["quota"]["wall_ms_per_window"], 600000);
    assert!(shown["quota"]["fuel_per_window"].is_null());
    let (code, _, err) = ax(&server, &token, &["task", "list"]);
    assert_eq!(code, Some(0), "the token survives a restart: {err}");
    let (code, _, err) = ax(&server, admin, &["tenant", "token", "revoke", "acme", &id]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = ax(&server, &token, &["task", "list"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unauthorized"), "{err}");
    server.kill();
}

// --- fairness on a real server: fuel and wall time charged, caps ------------

mod fairness {
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use crate::common::plugin_bytes;
    use crate::live::{Live, Reply};

    /// Fuel a guest spinning for half a second surely burns (~2e9 units/s on
    /// one free core; a tenth of a core suffices).
    const MIN_SPIN_FUEL: u64 = 100_000_000;

    /// Creates tenant `name` with `quota` (admin).
    async fn tenant(live: &Live, name: &str, quota: Value) {
        let body = json!({ "name": name, "quota": quota }).to_string();
        live.send("POST", "/v1/tenants", "application/json", &body)
            .await;
    }

    /// A call as the admin acting on `tenant`.
    async fn call(live: &Live, tenant: &str, method: &str, path: &str, body: &str) -> Reply {
        let ct = if body.starts_with('{') {
            "application/json"
        } else {
            "application/yaml"
        };
        let body = (!body.is_empty()).then(|| (ct, body.as_bytes().to_vec()));
        live.call(method, path, &[("x-ax-tenant", tenant)], body)
            .await
    }

    async fn ok(live: &Live, tenant: &str, method: &str, path: &str, body: &str) -> Value {
        let r = call(live, tenant, method, path, body).await;
        assert!(
            (200..300).contains(&r.status),
            "{method} {path}: {} {}",
            r.status,
            r.text
        );
        r.json()
    }

    /// Uploads plugin file `file` as `name@1.0.0` for `tenant`, then saves
    /// task `name` running it with `limits`.
    async fn task(live: &Live, tenant: &str, file: &str, name: &str, limits: &str) {
        let r = live
            .call(
                "POST",
                &format!("/v1/plugins?name={name}&version=1.0.0"),
                &[("x-ax-tenant", tenant)],
                Some(("application/wasm", plugin_bytes(file))),
            )
            .await;
        assert!(matches!(r.status, 200 | 201), "{} {}", r.status, r.text);
        let def = format!("name: {name}\nplugin: {name}@1.0.0\nlimits: {limits}\n");
        ok(live, tenant, "PUT", &format!("/v1/tasks/{name}"), &def).await;
    }

    async fn trigger(live: &Live, tenant: &str, task: &str) -> String {
        let run = ok(
            live,
            tenant,
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            "{}",
        )
        .await;
        run["id"].as_str().expect("run id").to_string()
    }

    async fn run(live: &Live, tenant: &str, id: &str) -> Value {
        ok(live, tenant, "GET", &format!("/v1/runs/{id}"), "").await
    }

    /// Polls `f` until it answers `Some` (60 s at most).
    async fn until<T, F: std::future::Future<Output = Option<T>>>(
        what: &str,
        mut f: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(v) = f().await {
                return v;
            }
            assert!(Instant::now() < deadline, "never happened: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn terminal(run: &Value) -> bool {
        matches!(
            run["status"].as_str(),
            Some("succeeded" | "failed" | "cancelled")
        )
    }

    /// `ax_attempts_total` of `tenant` and `outcome` in a scrape.
    fn attempts_metric(scrape: &str, tenant: &str, outcome: &str) -> f64 {
        scrape
            .lines()
            .find(|l| {
                l.starts_with("ax_attempts_total{")
                    && l.contains(&format!("tenant=\"{tenant}\""))
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    /// A cancelled attempt ends `cancelled`, with its end and the fuel it
    /// burned, and moves `ax_attempts_total{outcome="cancelled"}`. (Probe:
    /// outcome and finished_at stayed null, fuel 0, the metric did not move.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_attempt_ends_cancelled_with_its_fuel_and_is_counted() {
        let live = Live::start(|_| {}).await;
        tenant(&live, "acme", json!({})).await;
        task(
            &live,
            "acme",
            "hostile_spin",
            "spin",
            "{ fuel: 100000000000, timeout: 60s }",
        )
        .await;
        let id = trigger(&live, "acme", "spin").await;
        until("the attempt runs", || async {
            (run(&live, "acme", &id).await["steps"][0]["status"] == "running").then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cancelled = ok(&live, "acme", "POST", &format!("/v1/runs/{id}/cancel"), "").await;
        assert_eq!(cancelled["status"], "cancelled");
        let attempt = until("the attempt is recorded", || async {
            let r = run(&live, "acme", &id).await;
            let a = r["steps"][0]["attempts"][0].clone();
            (!a["outcome"].is_null()).then_some(a)
        })
        .await;
        assert_eq!(attempt["outcome"], "cancelled", "{attempt}");
        assert!(attempt["finished_at"].is_string(), "{attempt}");
        let fuel = attempt["fuel_consumed"].as_u64().unwrap();
        assert!(fuel >= MIN_SPIN_FUEL, "{attempt}");
        let scrape = live.call("GET", "/metrics", &[], None).await.text;
        assert_eq!(attempts_metric(&scrape, "acme", "cancelled"), 1.0);
        // And it is in the usage report.
        let usage = until("usage is written", || async {
            let u = ok(&live, "acme", "GET", "/v1/tenants/acme/usage", "").await;
            (u["total"]["attempts"] == 1).then_some(u)
        })
        .await;
        assert_eq!(usage["total"]["fuel"], fuel);
        assert_eq!(usage["total"]["outcomes"]["cancelled"], 1);
        live.stop().await;
    }

    /// 20 spins that each time out: charged what they burned, they use up a
    /// fuel budget of 2.5e9 and the tenant is held. (Probe: charged 2,190
    /// each, 43,800 for 20, never held.) Each may burn 2.5e9 (the whole
    /// budget), twice what 100 ms of spinning burns on a free core here
    /// (~1.2e9), so they time out rather than run out of fuel; 20 of them use
    /// the budget up while a spin gets a tenth of a core or more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timed_out_spins_use_up_the_fuel_budget_and_the_tenant_is_held() {
        const BUDGET: u64 = 2_500_000_000;
        let live = Live::start(|_| {}).await;
        tenant(
            &live,
            "burner",
            json!({ "fuel_per_window": BUDGET, "window": "1h" }),
        )
        .await;
        task(
            &live,
            "burner",
            "hostile_spin",
            "spin",
            "{ fuel: 2500000000, timeout: 100ms }",
        )
        .await;
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.push(trigger(&live, "burner", "spin").await);
        }
        let held = until("the tenant is held, or every run ended", || async {
            let t = ok(&live, "burner", "GET", "/v1/tenants/burner", "").await;
            if let Some(h) = t["held"].as_str()
                && h.contains("used its fuel budget")
            {
                return Some(Some(h.to_string()));
            }
            let last = run(&live, "burner", ids.last().unwrap()).await;
            terminal(&last).then_some(None)
        })
        .await;
        let held =
            held.unwrap_or_else(|| panic!("20 timed-out spins did not use up {BUDGET} fuel"));
        assert!(held.contains(&format!("of {BUDGET}")), "{held}");
        let (mut charged, mut queued, mut timed_out) = (0, 0, 0);
        for id in &ids {
            let r = run(&live, "burner", id).await;
            if r["status"] == "queued" {
                queued += 1;
            }
            for a in r["steps"][0]["attempts"].as_array().unwrap() {
                let fuel = a["fuel_consumed"].as_u64().unwrap();
                if a["outcome"] == "timed_out" {
                    timed_out += 1;
                    assert!(fuel >= 5_000_000, "a timed-out spin charged {fuel}");
                }
                charged += fuel;
            }
        }
        assert!(timed_out > 0, "the spins timed out");
        assert!(queued > 0, "runs wait for the next window");
        assert!(charged <= BUDGET, "never more than the budget: {charged}");
        live.stop().await;
    }

    /// Attempts blocked in a host call (a WASI sleep) burn almost no fuel:
    /// the wall-time budget charges their duration, cuts the deadline of the
    /// one that would pass it, and holds the tenant.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn blocked_attempts_use_up_the_wall_budget_and_the_last_is_cut() {
        const BUDGET_MS: f64 = 1_000.0;
        let live = Live::start(|_| {}).await;
        tenant(
            &live,
            "sleeper",
            json!({ "wall_ms_per_window": BUDGET_MS as u64, "window": "1h" }),
        )
        .await;
        task(
            &live,
            "sleeper",
            "hostile_sleep",
            "sleep",
            "{ timeout: 400ms }",
        )
        .await;
        let mut ids = Vec::new();
        for _ in 0..6 {
            ids.push(trigger(&live, "sleeper", "sleep").await);
        }
        let held = until("the tenant is held for wall time", || async {
            let t = ok(&live, "sleeper", "GET", "/v1/tenants/sleeper", "").await;
            t["held"]
                .as_str()
                .filter(|h| h.contains("used its wall-time budget"))
                .map(str::to_string)
        })
        .await;
        assert!(held.contains("of 1000 ms"), "{held}");
        let (mut wall, mut attempts, mut cut, mut queued) = (0.0, 0, 0, 0);
        for id in &ids {
            let r = run(&live, "sleeper", id).await;
            queued += usize::from(r["status"] == "queued");
            for a in r["steps"][0]["attempts"].as_array().unwrap() {
                assert_eq!(a["outcome"], "timed_out", "{a}");
                wall += a["duration_ms"].as_f64().unwrap();
                attempts += 1;
                let e = a["error"].as_str().unwrap_or("");
                cut += usize::from(e.contains("wall-time budget"));
            }
        }
        assert!(queued > 0, "runs wait for the next window");
        assert!(cut >= 1, "the last deadline was cut to what was left");
        // Each attempt overshoots its deadline by at most a tick and a poll.
        assert!(
            wall <= BUDGET_MS + 50.0 * attempts as f64,
            "{wall} ms in {attempts} attempts"
        );
        let usage = ok(&live, "sleeper", "GET", "/v1/tenants/sleeper/usage", "").await;
        assert_eq!(usage["window"]["wall_ms_budget"], 1000);
        live.stop().await;
    }

    /// The priority ceiling, refused where a priority is asked for: a task
    /// above it and a trigger's override above it are `422` at `priority`,
    /// and nothing changes; the admin raises it per tenant.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn priorities_above_the_ceiling_are_refused_until_the_admin_raises_it() {
        let live = Live::start(|_| {}).await;
        tenant(&live, "team", json!({})).await;
        task(&live, "team", "echo", "echo", "{ timeout: 5s }").await;
        let shown = ok(&live, "team", "GET", "/v1/tenants/team", "").await;
        assert_eq!(shown["effective"]["max_priority"], 6, "{shown}");
        let slots = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(
            shown["effective"]["max_concurrent_attempts"],
            (slots / 2).max(1),
            "half the slots"
        );
        let urgent = "name: urgent\nplugin: echo@1.0.0\npriority: 9\n";
        let r = call(&live, "team", "PUT", "/v1/tasks/urgent", urgent).await;
        assert_eq!(r.status, 422, "{}", r.text);
        let body = r.json();
        assert_eq!(body["error"]["code"], "invalid");
        assert_eq!(body["error"]["details"]["path"], "priority");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("priority ceiling of tenant `team` (6;"),
            "{body}"
        );
        let gone = call(&live, "team", "GET", "/v1/tasks/urgent", "").await;
        assert_eq!(gone.status, 404, "nothing was saved");
        let r = call(
            &live,
            "team",
            "POST",
            "/v1/tasks/echo/runs",
            r#"{"priority": 7}"#,
        )
        .await;
        assert_eq!(r.status, 422, "{}", r.text);
        assert_eq!(r.json()["error"]["details"]["path"], "priority");
        let at_ceiling = ok(
            &live,
            "team",
            "POST",
            "/v1/tasks/echo/runs",
            r#"{"priority": 6}"#,
        )
        .await;
        assert_eq!(at_ceiling["priority"], 6);
        // A bad ceiling is refused; a good one lets the task in.
        let r = live
            .call(
                "PUT",
                "/v1/tenants/team/quota",
                &[],
                Some(("application/json", br#"{"max_priority": 10}"#.to_vec())),
            )
            .await;
        assert_eq!(r.status, 422, "{}", r.text);
        live.send(
            "PUT",
            "/v1/tenants/team/quota",
            "application/json",
            r#"{"max_priority": 9}"#,
        )
        .await;
        ok(&live, "team", "PUT", "/v1/tasks/urgent", urgent).await;
        // `default`, the owner's tenant, has every priority without a quota.
        let default = live.get("/v1/tenants/default").await;
        assert_eq!(default["effective"]["max_priority"], 9);
        assert!(default["effective"]["max_concurrent_attempts"].is_null());
        live.stop().await;
    }
}
