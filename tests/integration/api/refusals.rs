//! Bad requests of every kind (wasm, versions, task documents, triggers,
//! tokens, tenants, routes, methods) get a clear 4xx and change nothing.

use ax::service::DEFAULT_MAX_PLUGIN_BYTES;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::json;

use super::{HELLO_TASK, TOKEN, host, request};
use crate::common::plugin_bytes;

#[tokio::test]
async fn bad_requests_get_a_clear_4xx_and_change_nothing() {
    let h = host().await;
    h.upload("hello", "hello").await;
    h.apply("hello", HELLO_TASK).await;
    let before = h.snapshot().await;

    let garbage = h
        .upload_bytes("junk", "1.0.0", b"#!/bin/sh\necho hi\n".to_vec())
        .await;
    assert_eq!(
        (garbage.status, garbage.code()),
        (StatusCode::BAD_REQUEST, "invalid_wasm"),
        "{}",
        garbage.body
    );
    let core = h
        .upload_bytes("core", "1.0.0", b"\0asm\x01\0\0\0".to_vec())
        .await;
    assert_eq!(
        (core.status, core.code()),
        (StatusCode::BAD_REQUEST, "invalid_wasm")
    );
    assert!(
        core.message().contains("not a component"),
        "{}",
        core.message()
    );
    let world = h.upload("invalid-not-ax", "notax").await;
    assert_eq!(
        (world.status, world.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "wrong_world"),
        "{}",
        world.body
    );
    let import = h.upload("invalid_extra_import", "evil").await;
    assert_eq!(
        (import.status, import.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "unsupported_import")
    );
    let echo = plugin_bytes("echo");
    let cut = h
        .upload_bytes("cut", "1.0.0", echo[..echo.len() / 2].to_vec())
        .await;
    assert_eq!(
        (cut.status, cut.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_component")
    );
    // Versions no task could reference (`plugin: name@version` takes strict
    // semver 2.0) are refused at upload too: one rule for both.
    for bad in ["v1", "01.2.3", "1.0.0-", "1.2.3-01", "1.2"] {
        let version = h.upload_bytes("hello2", bad, plugin_bytes("hello")).await;
        assert_eq!(
            (version.status, version.code()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "version {bad}: {}",
            version.body
        );
    }
    let unnamed = h
        .send(
            request("POST", "/v1/plugins", None)
                .body(Body::from(plugin_bytes("hello")))
                .unwrap(),
        )
        .await;
    assert_eq!(unnamed.status, StatusCode::BAD_REQUEST);
    let huge = h
        .upload_bytes(
            "huge",
            "1.0.0",
            vec![0u8; DEFAULT_MAX_PLUGIN_BYTES + (1 << 20)],
        )
        .await;
    assert_eq!(
        (huge.status, huge.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let text = h
        .send(
            request("POST", "/v1/plugins?name=x&version=1.0.0", None)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("x"))
                .unwrap(),
        )
        .await;
    assert_eq!(text.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let yaml = h.apply("hello", "name: hello\nplugin: [unclosed\n").await;
    assert_eq!(
        (yaml.status, yaml.code()),
        (StatusCode::BAD_REQUEST, "invalid_yaml"),
        "{}",
        yaml.body
    );
    let json_text = h.apply("hello", "{\"name\": \"hello\",").await;
    assert_eq!(
        (json_text.status, json_text.code()),
        (StatusCode::BAD_REQUEST, "invalid_json"),
        "{}",
        json_text.body
    );
    let unknown = h
        .apply(
            "hello",
            "name: hello\nplugin: hello@1.0.0\nbogus_field: 1\n",
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        "{}",
        unknown.body
    );
    assert!(
        unknown.message().contains("bogus_field"),
        "{}",
        unknown.body
    );
    let five = h
        .apply(
            "hello",
            "name: hello\ntrigger: { cron: \"0 2 * * *\" }\nplugin: hello@1.0.0\n",
        )
        .await;
    assert_eq!(
        (five.status, five.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(five.message().contains("0 0 2 * * *"), "{}", five.message());
    let zone = h.apply("hello", "name: hello\ntrigger: { cron: \"0 0 2 * * *\", timezone: Mars/Olympus }\nplugin: hello@1.0.0\n").await;
    assert_eq!(
        (zone.status, zone.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid")
    );
    assert!(
        zone.message().contains("Mars/Olympus"),
        "{}",
        zone.message()
    );
    let missing = h.apply("hello", "name: hello\nplugin: ghost@1.0.0\n").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plugin")
    );
    let fuel = h
        .apply(
            "hello",
            "name: hello\nplugin: hello@1.0.0\nlimits: { fuel: 90000000000 }\n",
        )
        .await;
    assert_eq!(fuel.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(fuel.message().contains("10000000000"), "{}", fuel.message());
    let big = h
        .apply(
            "hello",
            &format!(
                "name: hello\nplugin: hello@1.0.0\ndescription: \"{}\"\n",
                "x".repeat(2 << 20)
            ),
        )
        .await;
    assert_eq!(
        (big.status, big.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let binary = h
        .call("PUT", "/v1/tasks/hello", vec![0xffu8, 0xfe, 0x00])
        .await;
    assert_eq!(binary.status, StatusCode::BAD_REQUEST);

    let bad_json = h.call("POST", "/v1/tasks/hello/runs", "{not json").await;
    assert_eq!(
        (bad_json.status, bad_json.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let extra = h.trigger("hello", json!({ "inputs": {} })).await;
    assert_eq!(
        (extra.status, extra.code()),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    let ghost = h.trigger("ghost", json!({})).await;
    assert_eq!(
        (ghost.status, ghost.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let no_token = h
        .send(Request::get("/v1/tasks").body(Body::empty()).unwrap())
        .await;
    assert_eq!(
        (no_token.status, no_token.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    assert_eq!(no_token.headers[header::WWW_AUTHENTICATE], "Bearer");
    let bad_token = h
        .send(
            Request::get("/v1/tasks")
                .header(header::AUTHORIZATION, "Bearer nope")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (bad_token.status, bad_token.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let basic = h
        .send(
            Request::get("/v1/tasks")
                .header(header::AUTHORIZATION, format!("Basic {TOKEN}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
    let unauth_upload = h
        .send(
            Request::post("/v1/plugins?name=x&version=1.0.0")
                .body(Body::from(plugin_bytes("hello")))
                .unwrap(),
        )
        .await;
    assert_eq!(unauth_upload.status, StatusCode::UNAUTHORIZED);
    let tenant = h
        .send(
            request("GET", "/v1/tasks", Some("bad/tenant"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        (tenant.status, tenant.code()),
        (StatusCode::BAD_REQUEST, "invalid_tenant")
    );

    let route = h.get("/v1/nothing-here").await;
    assert_eq!(
        (route.status, route.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let method = h.call("PATCH", "/v1/tasks/hello", Body::empty()).await;
    assert_eq!(
        (method.status, method.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );

    assert_eq!(
        h.snapshot().await,
        before,
        "a refused request changed the store"
    );
    assert_eq!(h.get("/v1/tasks/hello").await.body["version"], 1);
}
