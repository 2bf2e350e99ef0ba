//! `GET /v1/openapi.json` is generated from the code and stays in sync with
//! the router: the document's paths are exactly the router's route table,
//! and for every path the methods the real router takes (probed over HTTP)
//! are exactly the documented ones.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::live::Live;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// A concrete path for a template: every `{param}` becomes `x`.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|seg| if seg.starts_with('{') { "x" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

/// The methods the router takes on `path`: without a token, a routed method
/// answers 401 (or runs, for the open routes), an unrouted one 405.
async fn routed_methods(live: &Live, path: &str) -> BTreeSet<String> {
    let mut routed = BTreeSet::new();
    for method in METHODS {
        let url = format!("{}{}", live.base, concrete(path));
        let m = method.to_uppercase();
        let status = tokio::task::spawn_blocking(move || {
            let agent = ureq::Agent::new_with_config(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build(),
            );
            let req = ureq::http::Request::builder()
                .method(m.as_str())
                .uri(&url)
                .body(Vec::new())
                .unwrap();
            agent.run(req).expect("answer").status().as_u16()
        })
        .await
        .unwrap();
        assert_ne!(
            status, 404,
            "{method} {path}: the router does not know the path"
        );
        if status != 405 {
            routed.insert(method.to_string());
        }
    }
    routed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_matches_the_router() {
    let live = Live::start(|_| {}).await;
    let r = ureq::get(format!("{}/v1/openapi.json", live.base))
        .call()
        .expect("the document needs no token");
    let doc: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );

    let paths = doc["paths"].as_object().expect("paths");
    let documented: BTreeMap<String, BTreeSet<String>> = paths
        .iter()
        .map(|(p, item)| {
            let methods = METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| m.to_string())
                .collect();
            (p.clone(), methods)
        })
        .collect();
    let table: BTreeSet<String> = ax::api::route_paths()
        .into_iter()
        .map(str::to_string)
        .collect();
    let doc_paths: BTreeSet<String> = documented.keys().cloned().collect();
    assert_eq!(
        table,
        doc_paths,
        "routes without documentation: {:?}; documented routes that do not exist: {:?}",
        table.difference(&doc_paths).collect::<Vec<_>>(),
        doc_paths.difference(&table).collect::<Vec<_>>()
    );
    for (path, methods) in &documented {
        assert_eq!(
            &routed_methods(&live, path).await,
            methods,
            "{path}: routed methods vs documented ones"
        );
    }

    // Every /v1 operation (but the document itself) needs the bearer token,
    // documents its 401 with the error body and takes the tenant header.
    for (path, item) in paths {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            // `/metrics` needs the admin or the metrics token, no tenant
            // (docs/OPERATIONS.md).
            if path == "/metrics" {
                assert_eq!(op["security"], serde_json::json!([{"bearer": []}]));
                assert!(op["responses"]["401"].is_object(), "{method} {path}");
                continue;
            }
            let open = !path.starts_with("/v1/") || path == "/v1/openapi.json";
            if open {
                assert_eq!(
                    op["security"],
                    serde_json::json!([{}]),
                    "{method} {path} is open"
                );
                continue;
            }
            assert_eq!(
                op["responses"]["401"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{method} {path}"
            );
            assert!(
                item["parameters"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == "x-ax-tenant")),
                "{path}: no tenant header"
            );
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // Request and error bodies are there with their fields.
    let schemas = &doc["components"]["schemas"];
    for name in [
        "ErrorBody",
        "ErrorDetail",
        "RunView",
        "TaskView",
        "TriggerBody",
        "ResolveBody",
        "Outcome",
    ] {
        assert!(schemas.get(name).is_some(), "schema {name} missing");
    }
    let code = &schemas["ErrorDetail"]["properties"]["code"];
    assert_eq!(code["type"], "string", "{code}");
    let outcomes = schemas["Outcome"]["enum"].as_array().expect("an enum");
    assert_eq!(outcomes.len(), ax::model::Outcome::ALL.len());
    let trigger_body =
        &paths["/v1/tasks/{name}/runs"]["post"]["requestBody"]["content"]["application/json"];
    assert!(
        trigger_body.to_string().contains("TriggerBody"),
        "{trigger_body}"
    );
    live.stop().await;
}
