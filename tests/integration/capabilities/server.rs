//! Capabilities on a real `ax serve`: KV isolated per tenant and kept across
//! a restart, the KV quota of the server config or the tenant, grants
//! validated on save, and a secret that never appears in an answer, a log
//! line or an event.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::plugin_bytes;

const TOKEN: &str = "caps-test-token";

/// A child `ax serve` with its stderr (the server's log) kept in a file.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(data_dir: &Path, config: Option<&Path>, log: &Path) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .env("AX_ADMIN_TOKEN", TOKEN)
            // Everything ax logs, to check no secret is among it.
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap());
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        let mut child = cmd.spawn().expect("starting ax serve");
        let url =
            crate::crash::listening_url(&mut child).expect("ax serve exited before listening");
        Self { child, url }
    }

    /// `kill -9`: whatever was acknowledged must be on disk already.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait: the graceful shutdown path.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// One API call as the admin acting on `tenant`; (status, body text).
    fn call(&self, method: &str, path: &str, tenant: &str, body: Option<&[u8]>) -> (u16, String) {
        self.call_as(method, path, tenant, body, "application/json")
    }

    fn call_as(
        &self,
        method: &str,
        path: &str,
        tenant: &str,
        body: Option<&[u8]>,
        content_type: &str,
    ) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let auth = format!("Bearer {TOKEN}");
        let response = match (method, body) {
            ("GET", _) => agent
                .get(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .call(),
            ("DELETE", _) => agent
                .delete(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .call(),
            ("PUT", Some(b)) => agent
                .put(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .send(b),
            (_, Some(b)) => agent
                .post(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .header("Content-Type", content_type)
                .send(b),
            (_, None) => agent
                .post(&url)
                .header("Authorization", &auth)
                .header("X-Ax-Tenant", tenant)
                .send_empty(),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        (
            status,
            response.body_mut().read_to_string().unwrap_or_default(),
        )
    }

    /// Creates `tenant` (as the admin) with an HTTP ceiling.
    fn tenant(&self, tenant: &str, allow_http: &[&str]) {
        let body = json!({ "name": tenant, "allow_http": allow_http }).to_string();
        let (status, body) = self.call("POST", "/v1/tenants", "default", Some(body.as_bytes()));
        assert_eq!(status, 201, "{body}");
    }

    fn upload(&self, tenant: &str, plugin: &str) {
        let (status, body) = self.call_as(
            "POST",
            &format!("/v1/plugins?name={plugin}&version=1.0.0"),
            tenant,
            Some(&plugin_bytes(plugin)),
            "application/wasm",
        );
        assert!(status == 201 || status == 200, "{status} {body}");
    }

    fn put_task(&self, tenant: &str, name: &str, yaml: &str) -> (u16, String) {
        self.call(
            "PUT",
            &format!("/v1/tasks/{name}"),
            tenant,
            Some(yaml.as_bytes()),
        )
    }

    /// Triggers `task` and waits for its run to end; returns the run.
    fn run(&self, tenant: &str, task: &str, input: Value) -> Value {
        let (status, body) = self.call(
            "POST",
            &format!("/v1/tasks/{task}/runs"),
            tenant,
            Some(json!({ "input": input }).to_string().as_bytes()),
        );
        assert_eq!(status, 201, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, body) = self.call("GET", &format!("/v1/runs/{id}"), tenant, None);
            let run: Value = serde_json::from_str(&body).unwrap();
            if ["succeeded", "failed", "cancelled"].contains(&run["status"].as_str().unwrap_or(""))
            {
                return run;
            }
            assert!(Instant::now() < deadline, "run {id} did not finish: {run}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn output(run: &Value) -> &Value {
    &run["steps"][0]["output"]
}

#[test]
fn kv_is_isolated_across_tenants_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ax.log");
    let data = dir.path().join("data");
    let task = "name: cursor\nplugin: cursor@1.0.0\nkv: tenant\ninput: { batch: 10 }\n";
    let server = Server::start(&data, None, &log);
    for tenant in ["a", "b"] {
        server.tenant(tenant, &[]);
        server.upload(tenant, "cursor");
        let (status, body) = server.put_task(tenant, "cursor", task);
        assert_eq!(status, 201, "{body}");
    }
    // Tenant a runs twice, b once: each sees only its own cursor.
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 0, "to": 10, "runs": 1})
    );
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 10, "to": 20, "runs": 2})
    );
    assert_eq!(
        output(&server.run("b", "cursor", json!({}))),
        &json!({"from": 0, "to": 10, "runs": 1})
    );
    // A graceful restart. (After `kill -9` a run whose end was not yet on
    // disk runs again — at-least-once — and moves its cursor twice.)
    server.stop();

    let server = Server::start(&data, None, &log);
    assert_eq!(
        output(&server.run("a", "cursor", json!({}))),
        &json!({"from": 20, "to": 30, "runs": 3})
    );
    let run = server.run("b", "cursor", json!({}));
    assert_eq!(
        output(&run),
        &json!({"from": 10, "to": 20, "runs": 2}),
        "{run}"
    );
    // Task scope: a second task of tenant a with `kv: task` starts afresh.
    server.upload("a", "cursor");
    let (status, body) = server.put_task(
        "a",
        "cursor2",
        "name: cursor2\nplugin: cursor@1.0.0\nkv: task\ninput: { batch: 5 }\n",
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        output(&server.run("a", "cursor2", json!({}))),
        &json!({"from": 0, "to": 5, "runs": 1})
    );
    server.kill();
}

#[test]
fn the_kv_quota_of_the_server_config_or_the_tenant_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ax.yaml");
    std::fs::write(&config, "kv_quota_kb: 8\n").unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        Some(&config),
        &dir.path().join("ax.log"),
    );
    server.tenant("a", &[]);
    server.upload("a", "probe");
    let task = json!({
        "name": "fill", "plugin": "probe@1.0.0", "kv": "tenant",
        "input": { "ops": [
            { "kv_set_bytes": { "key": "one", "bytes": 5000 } },
            { "kv_set_bytes": { "key": "two", "bytes": 5000 } },
        ]},
    });
    let (status, body) = server.put_task("a", "fill", &task.to_string());
    assert_eq!(status, 201, "{body}");
    let run = server.run("a", "fill", json!({}));
    let r = &output(&run)["results"];
    assert_eq!(r[0]["ok"], Value::Null, "{run}");
    assert!(
        r[1]["err"]
            .as_str()
            .unwrap()
            .contains("quota of 8192 bytes would be exceeded"),
        "{run}"
    );
    // A tenant's own `kv_bytes` quota overrides the server's default.
    let body = json!({ "name": "big", "quota": { "kv_bytes": 20_000 } }).to_string();
    let (status, body) = server.call("POST", "/v1/tenants", "default", Some(body.as_bytes()));
    assert_eq!(status, 201, "{body}");
    server.upload("big", "probe");
    let (status, body) = server.put_task("big", "fill", &task.to_string());
    assert_eq!(status, 201, "{body}");
    let run = server.run("big", "fill", json!({}));
    let r = &output(&run)["results"];
    assert_eq!(
        (&r[0]["ok"], &r[1]["ok"]),
        (&Value::Null, &Value::Null),
        "{run}"
    );
    server.kill();
}

#[test]
fn steps_must_declare_capabilities_valid_on_save() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None, &dir.path().join("ax.log"));
    server.tenant("a", &["https://*.example.com", "http://127.0.0.1:*"]);
    server.upload("a", "probe");
    for (yaml, path, message) in [
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.example.com/path\"]\n",
            "allow_http[0]",
            "remove `/path`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nkv: forever\n",
            "kv",
            "expected `tenant` or `task`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.example.com\", \"https://example.com\"]\n",
            "steps[0].allow_http",
            "`https://example.com` is outside the tenant's allow-list: the tenant allows only `https://*.example.com`, `http://127.0.0.1:*`",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://127.0.0.1:8080\"]\n",
            "steps[0].allow_http",
            "`https://127.0.0.1:8080` is outside",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nsecrets: [\"a b\"]\n",
            "secrets[0]",
            "not a valid secret name",
        ),
        (
            "name: t\nplugin: probe@1.0.0\nconfig: { a: [1] }\n",
            "config.a",
            "text, a number or a boolean",
        ),
    ] {
        let (status, body) = server.put_task("a", "t", yaml);
        assert_eq!(status, 422, "{yaml}: {body}");
        assert!(
            body.contains(path) && body.contains(message),
            "{yaml}: {body}"
        );
    }
    // Narrower than the ceiling: accepted.
    let (status, body) = server.put_task(
        "a",
        "t",
        "name: t\nplugin: probe@1.0.0\nallow_http: [\"https://api.eu.example.com\", \"http://127.0.0.1:8080\"]\n",
    );
    assert_eq!(status, 201, "{body}");
    // The admin's patterns follow the same grammar.
    let bad =
        json!({ "name": "c", "allow_http": ["https://ok.example.com", "ftp://x"] }).to_string();
    let (status, body) = server.call("POST", "/v1/tenants", "default", Some(bad.as_bytes()));
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("allow_http[1]") && body.contains("`http` or `https`"),
        "{body}"
    );
    server.kill();
}

#[test]
fn a_secret_never_appears_in_an_answer_a_log_line_or_an_event() {
    const SECRET: &str = "s3cr3t-ZX81-c0ffee";
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ax.log");
    let server = Server::start(&dir.path().join("data"), None, &log);
    server.tenant("a", &[]);
    server.tenant("b", &[]);
    server.upload("a", "probe");

    let (status, body) = server.call("PUT", "/v1/secrets/api_token", "a", Some(SECRET.as_bytes()));
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.call("PUT", "/v1/secrets/api_token", "a", Some(SECRET.as_bytes()));
    assert_eq!(status, 200, "{body}");
    let (_, listed) = server.call("GET", "/v1/secrets", "a", None);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed["secrets"][0]["name"], "api_token", "{listed}");
    for (path, body, status) in [
        ("/v1/secrets/bad%20name", "x", 422),
        ("/v1/secrets/empty", "", 400),
    ] {
        let (got, answer) = server.call("PUT", path, "a", Some(body.as_bytes()));
        assert_eq!(got, status, "{path}: {answer}");
    }
    let (_, other) = server.call("GET", "/v1/secrets", "b", None);
    assert_eq!(other, r#"{"secrets":[]}"#, "tenant b sees no secret of a");

    let leak = |fail: bool| {
        format!(
            "name: leak-{fail}\nplugin: probe@1.0.0\nsecrets: [api_token]\nretry: {{ max_attempts: 1 }}\ninput: {{ ops: [{{ leak: {{ name: api_token, fail: {fail} }} }}] }}\n"
        )
    };
    let mut seen = Vec::new();
    for fail in [false, true] {
        let (status, body) = server.put_task("a", &format!("leak-{fail}"), &leak(fail));
        assert_eq!(status, 201, "{body}");
        let run = server.run("a", &format!("leak-{fail}"), json!({}));
        let id = run["id"].as_str().unwrap().to_string();
        assert_eq!(
            run["status"],
            if fail { "failed" } else { "succeeded" },
            "{run}"
        );
        for path in [
            format!("/v1/runs/{id}"),
            format!("/v1/runs/{id}/logs"),
            format!("/v1/runs/{id}/events"),
        ] {
            seen.push(server.call("GET", &path, "a", None).1);
        }
    }
    for path in ["/v1/runs", "/v1/tasks", "/v1/secrets", "/v1/dead-letters"] {
        seen.push(server.call("GET", path, "a", None).1);
    }
    let all = seen.join("\n");
    assert!(!all.contains(SECRET), "the secret leaked into an answer");
    // The plugin did print it: every place shows the redaction instead.
    for place in [
        "stdout: the secret is [redacted]",
        "stderr: the secret is [redacted]",
        "log: [redacted]",
        "progress [redacted]",
        "failing with [redacted]",
    ] {
        assert!(all.contains(place), "`{place}` missing from the answers");
    }
    assert!(all.contains(r#""value":"[redacted]""#), "output redacted");

    // Deleting it: gone from the list, and a step listing it reads nothing.
    let (status, _) = server.call("DELETE", "/v1/secrets/api_token", "a", None);
    assert_eq!(status, 204);
    let (status, _) = server.call("DELETE", "/v1/secrets/api_token", "a", None);
    assert_eq!(status, 404);
    server.kill();
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains("secret set"),
        "the server log was captured"
    );
    assert!(
        !log_text.contains(SECRET),
        "the secret leaked into the server log"
    );
}
