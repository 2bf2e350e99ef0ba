//! The authorization matrix: every route answers each kind of caller (no
//! token, a tenant's token, a revoked one, the admin with and without a
//! tenant) right, and leaks nothing of another tenant.

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::json;

use super::{As, call, echo_task, req, run_to_end, tenant};
use crate::api::host;

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
        ("POST", "/v1/alerts/a0/retry".into(), ""),
    ];
    let list_routes = [
        "/v1/plugins",
        "/v1/tasks",
        "/v1/runs",
        "/v1/dead-letters",
        "/v1/alerts",
    ];
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
