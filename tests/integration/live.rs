//! A real `ax` server for tests: `ax::server::start` on `127.0.0.1:0` with a
//! temporary sled data directory, spoken to over a real socket with a plain
//! HTTP client (ureq, on a blocking thread).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::plugin_bytes;

/// The admin token of every live test server.
pub(crate) const TOKEN: &str = "live-test-token";

/// A running server and its data directory (removed on drop).
pub(crate) struct Live {
    pub(crate) server: Option<ax::server::Server>,
    pub(crate) base: String,
    _dir: tempfile::TempDir,
}

/// What a call answered.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: ureq::http::HeaderMap,
    pub(crate) text: String,
}

impl Reply {
    /// The body as JSON (`null` when empty or not JSON).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

impl Live {
    /// Starts a server; `tweak` adjusts the config first.
    pub(crate) async fn start(tweak: impl FnOnce(&mut ax::config::Config)) -> Live {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = ax::config::Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().to_path_buf(),
            admin_token: Some(TOKEN.into()),
            ..ax::config::Config::default()
        };
        tweak(&mut config);
        let server = ax::server::start(config, false)
            .await
            .expect("server starts");
        let base = format!("http://{}", server.addr);
        Live {
            server: Some(server),
            base,
            _dir: dir,
        }
    }

    /// Sends a request with the admin token; any status is returned.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, Vec<u8>)>,
    ) -> Reply {
        let url = format!("{}{path}", self.base);
        let method = method.to_string();
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let body = body.map(|(ct, b)| (ct.to_string(), b));
        tokio::task::spawn_blocking(move || {
            let agent = ureq::Agent::new_with_config(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(120)))
                    .build(),
            );
            let mut builder = ureq::http::Request::builder()
                .method(method.as_str())
                .uri(&url)
                .header("authorization", format!("Bearer {TOKEN}"));
            for (k, v) in &headers {
                builder = builder.header(k, v);
            }
            let bytes = match body {
                Some((ct, b)) => {
                    builder = builder.header("content-type", ct);
                    b
                }
                None => Vec::new(),
            };
            let mut response = agent
                .run(builder.body(bytes).expect("request"))
                .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let text = response.body_mut().read_to_string().expect("a text answer");
            Reply {
                status,
                headers,
                text,
            }
        })
        .await
        .expect("the client thread")
    }

    /// GET with the admin token, expecting 2xx JSON.
    pub(crate) async fn get(&self, path: &str) -> Value {
        let r = self.call("GET", path, &[], None).await;
        assert!(
            (200..300).contains(&r.status),
            "GET {path}: {} {}",
            r.status,
            r.text
        );
        r.json()
    }

    /// Sends JSON (or YAML text) and expects 2xx.
    pub(crate) async fn send(&self, method: &str, path: &str, ct: &str, body: &str) -> Value {
        let r = self
            .call(method, path, &[], Some((ct, body.as_bytes().to_vec())))
            .await;
        assert!(
            (200..300).contains(&r.status),
            "{method} {path}: {} {}",
            r.status,
            r.text
        );
        r.json()
    }

    /// Uploads a plugin built from plugins/ as `name@1.0.0`.
    pub(crate) async fn upload(&self, name: &str) {
        self.upload_as(&name.replace('-', "_"), name).await;
    }

    /// Uploads the plugin built as `file.wasm` as `name@1.0.0`.
    pub(crate) async fn upload_as(&self, file: &str, name: &str) {
        let r = self
            .call(
                "POST",
                &format!("/v1/plugins?name={name}&version=1.0.0"),
                &[],
                Some(("application/wasm", plugin_bytes(file))),
            )
            .await;
        assert!(
            matches!(r.status, 200 | 201),
            "upload {name}: {} {}",
            r.status,
            r.text
        );
        self.wait_plugin(name, "1.0.0").await;
    }

    /// Waits until an uploaded version has compiled (uploads compile in the
    /// background) and returns it; a version that failed is returned too.
    pub(crate) async fn wait_plugin(&self, name: &str, version: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.get(&format!("/v1/plugins/{name}/{version}")).await;
            if v["status"] != "compiling" {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "{name}@{version} did not compile: {v}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Applies a task definition (YAML).
    pub(crate) async fn apply(&self, name: &str, yaml: &str) {
        self.send(
            "PUT",
            &format!("/v1/tasks/{name}"),
            "application/yaml",
            yaml,
        )
        .await;
    }

    /// Triggers a run and returns its id.
    pub(crate) async fn trigger(&self, task: &str) -> String {
        let run = self
            .send(
                "POST",
                &format!("/v1/tasks/{task}/runs"),
                "application/json",
                "{}",
            )
            .await;
        run["id"].as_str().expect("run id").to_string()
    }

    /// Waits until a run is terminal and returns it.
    pub(crate) async fn wait_run(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let run = self.get(&format!("/v1/runs/{id}")).await;
            if matches!(
                run["status"].as_str(),
                Some("succeeded" | "failed" | "cancelled")
            ) {
                return run;
            }
            assert!(Instant::now() < deadline, "run {id} did not finish: {run}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the server and waits for it.
    pub(crate) async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.shutdown.cancel();
            server.join().await.expect("clean stop");
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.shutdown.cancel();
        }
    }
}
