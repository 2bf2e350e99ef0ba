//! Plugin uploads as a multipart form, which work like raw ones.

use axum::body::Body;
use axum::http::{StatusCode, header};

use super::{host, request};
use crate::common::plugin_bytes;

#[tokio::test]
async fn multipart_uploads_work_like_raw_ones() {
    let h = host().await;
    let boundary = "ax-test-boundary";
    let mut body = Vec::new();
    for (field, value) in [("name", "hello"), ("version", "2.0.0")] {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"\r\n\r\n{value}\r\n").as_bytes());
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"hello.wasm\"\r\nContent-Type: application/wasm\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(&plugin_bytes("hello"));
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let req = request("POST", "/v1/plugins", None)
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .unwrap();
    let answer = h.send(req).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    assert_eq!(
        (
            answer.body["name"].as_str(),
            answer.body["version"].as_str()
        ),
        (Some("hello"), Some("2.0.0"))
    );
    assert_eq!(answer.body["size"], plugin_bytes("hello").len());
}
