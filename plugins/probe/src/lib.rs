//! Test plugin: runs a list of capability operations and reports each
//! result, so the host's tests can check what a step is (not) granted.
//! `leak` prints a secret everywhere a plugin can (stdout, stderr, log,
//! progress, output, error) to test redaction. `say` writes a text in all
//! those places (and as a log field's key), and `fail` fails with one, to
//! test how hostile text (terminal escapes, bidi overrides) is shown.
use ax_plugin_sdk::{
    Context, Error, Result, config, export_plugin, http, kv, log, progress, secrets,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Op {
    /// GET a URL (following redirects); the result has status and body length.
    Get(String),
    /// GET without following redirects.
    GetNoRedirect(String),
    /// POST a JSON body.
    Post {
        url: String,
        body: Value,
    },
    KvGet(String),
    KvSet {
        key: String,
        value: Value,
        ttl_ms: Option<u64>,
    },
    KvSetBytes {
        key: String,
        bytes: usize,
    },
    KvDelete(String),
    KvList(String),
    Config(String),
    Secret(String),
    /// Prints the secret's value everywhere; with `fail`, also returns it in an error.
    Leak {
        name: String,
        fail: bool,
    },
    /// Writes the text as a log message, a log field's key and value, to
    /// stdout, stderr and progress; the result holds it too.
    Say(String),
    /// Fails (fatal) with this error message.
    Fail(String),
}

#[derive(Deserialize)]
struct Input {
    ops: Vec<Op>,
}

fn result<T: serde::Serialize>(r: Result<T>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "err": e.message }),
    }
}

fn get(url: &str, redirects: u32) -> Result<Value> {
    let r = http::Request::get(url).max_redirects(redirects).send()?;
    Ok(
        json!({ "status": r.status, "len": r.body.len(), "body": r.text().chars().take(200).collect::<String>(), "url": r.url }),
    )
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    let mut out = Vec::new();
    for op in input.ops {
        out.push(match op {
            Op::Get(url) => result(get(&url, http::DEFAULT_MAX_REDIRECTS)),
            Op::GetNoRedirect(url) => result(get(&url, 0)),
            Op::Post { url, body } => result(
                http::post_json(&url, &body).map(|r| json!({"status": r.status, "body": r.text()})),
            ),
            Op::KvGet(key) => result(kv::get::<Value>(&key)),
            Op::KvSet { key, value, ttl_ms } => result(match ttl_ms {
                Some(ms) => kv::set_with_ttl(&key, &value, std::time::Duration::from_millis(ms)),
                None => kv::set(&key, &value),
            }),
            Op::KvSetBytes { key, bytes } => result(kv::set_bytes(&key, &vec![b'x'; bytes], None)),
            Op::KvDelete(key) => result(kv::delete(&key)),
            Op::KvList(prefix) => result(kv::list(&prefix)),
            Op::Config(key) => json!({ "ok": config::get(&key) }),
            Op::Secret(name) => result(secrets::get(&name).map(|v| v.is_some())),
            Op::Leak { name, fail } => {
                let value = secrets::require(&name)?;
                println!("stdout: the secret is {value}");
                eprintln!("stderr: the secret is {value}");
                log::with_fields(
                    log::Level::Info,
                    &format!("log: {value}"),
                    &[("secret", &value)],
                );
                progress(50, &format!("progress {value}"));
                if fail {
                    return Err(Error::fatal(format!("failing with {value}")));
                }
                json!({ "ok": { "value": value, "nested": [value.clone()] } })
            }
            Op::Say(text) => {
                println!("{text}");
                eprintln!("{text}");
                log::with_fields(log::Level::Warn, &text, &[(&text, &text)]);
                progress(10, &text);
                json!({ "ok": text })
            }
            Op::Fail(text) => return Err(Error::fatal(text)),
        });
    }
    Ok(json!({ "results": out }))
}

export_plugin!(run);
