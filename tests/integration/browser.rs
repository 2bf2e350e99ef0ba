//! The dashboard end to end in headless Chromium: a real `ax serve`, the test
//! fixture (three plugins, a three-step task, a failing task, a tenant and
//! its token) applied
//! over the API, then in the browser: sign in, click "Run now", watch the run
//! reach `succeeded`, open the run page and see its logs; then the other
//! pages, the "Run now" form of a task with params, the admin's tenant pages, and a tenant token's narrower view.
//! Screenshots of the main pages go to `target/tmp/ax-browser-screenshots/`
//! (`CARGO_TARGET_TMPDIR`).
//!
//! The browser is driven over WebDriver by `fantoccini` talking to Debian's
//! `chromedriver` (packages `chromium` and `chromium-driver`; `scripts/test`
//! installs them). Without chromedriver this test fails and says how to
//! install it: a browser test that silently passes would prove nothing.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::common::plugin_bytes;
use crate::crash::{AxProcess, TOKEN, call, new_agent};

const INSTALL: &str =
    "apt-get install -y chromium chromium-driver (or run scripts/test, which does it)";

/// `AX_CHROMEDRIVER` / `AX_CHROMIUM` override Debian's paths.
fn tool(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// Where the screenshots go.
fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("ax-browser-screenshots")
}

/// A chromedriver child on a free loopback port, killed on drop.
struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    fn start() -> Self {
        let path = tool("AX_CHROMEDRIVER", "/usr/bin/chromedriver");
        assert!(
            path.exists(),
            "the browser test needs chromedriver at {} and chromium; install them with: {INSTALL}",
            path.display()
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // A zone with an offset, so the pages' zone labels are seen to say it.
        let child = Command::new(&path)
            .arg(format!("--port={port}"))
            .env("TZ", "Asia/Shanghai")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting {}: {e}; install with: {INSTALL}", path.display())
            });
        let url = format!("http://127.0.0.1:{port}");
        // chromedriver answers /status once it listens.
        let agent = new_agent();
        let started = Instant::now();
        while agent.get(&format!("{url}/status")).call().is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not start listening on {url}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, url }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Headless Chromium with its networking extras off: on a closed network
/// they would only flood it with refused connections.
fn capabilities(profile: &Path) -> serde_json::Map<String, Value> {
    let chromium = tool("AX_CHROMIUM", "/usr/bin/chromium");
    assert!(
        chromium.exists(),
        "the browser test needs chromium at {}; install it with: {INSTALL}",
        chromium.display()
    );
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.display()),
            ],
        },
    });
    match caps {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

/// The test fixture, applied over the API: plugins `hello`, `echo` and
/// `fail`, a task `flaky` that fails three times, and a
/// manual task `greet` (hello, then echo of hello's greeting, and a
/// conditional step that is skipped), a manual task `report` with four
/// params (one required) for the "Run now" form, a manual task `export`
/// with one param (a second dialog, never run), and a task `patient` that
/// fails and then waits ten minutes to retry (to be cancelled). The input
/// carries markup: the pages must show it as text. Plus a tenant `acme` with
/// a fuel budget, and a token of it (returned).
fn apply_fixture(url: &str) -> String {
    let agent = new_agent();
    for name in ["hello", "echo", "fail"] {
        let (status, body) = call(
            &agent,
            "POST",
            &format!("{url}/v1/plugins?name={name}&version=1.0.0"),
            Some(&plugin_bytes(name)),
            "application/wasm",
        )
        .unwrap();
        assert_eq!(status, 201, "{body}");
    }
    let task = r#"name: greet
description: the browser test's fixture
steps:
  - name: hello
    plugin: hello@1.0.0
    input: { name: "<b>browser</b>" }
  - name: shout
    needs: [hello]
    plugin: echo@1.0.0
    input: { said: "${steps.hello.output.greeting}" }
  - name: whisper
    needs: [hello]
    when: "steps.hello.output.greeting == 'nobody'"
    plugin: echo@1.0.0
"#;
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/greet"),
        Some(task.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let report = "name: report\ndescription: a task with params\nparams:\n  - { name: day, type: string, description: the day to process }\n  - { name: limit, type: integer, default: 10 }\n  - { name: mode, type: enum, values: [full, incremental], default: full }\n  - { name: dry_run, type: boolean, default: false }\nplugin: echo@1.0.0\ninput: \"${input}\"\n";
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/report"),
        Some(report.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    // A second task with params: its "Run now" dialog must never stand in for report's.
    let export = "name: export\nparams:\n  - { name: day, type: string, default: today }\nplugin: echo@1.0.0\ninput: \"${input}\"\n";
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/export"),
        Some(export.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    // Fails, then waits ten minutes to retry: long enough to be cancelled in its backoff.
    let patient = "name: patient\nplugin: fail@1.0.0\ninput: { message: \"try later\" }\nretry: { max_attempts: 2, backoff: [10m] }\n";
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/patient"),
        Some(patient.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let flaky = "name: flaky\nplugin: fail@1.0.0\ninput: { message: \"upstream <i>down</i>\" }\nretry: { max_attempts: 3, backoff: [100ms] }\n";
    let (status, body) = call(
        &agent,
        "PUT",
        &format!("{url}/v1/tasks/flaky"),
        Some(flaky.as_bytes()),
        "application/yaml",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let tenant =
        json!({"name": "acme", "quota": {"fuel_per_window": 1_000_000_000u64, "window": "1d"}});
    let (status, body) = call(
        &agent,
        "POST",
        &format!("{url}/v1/tenants"),
        Some(tenant.to_string().as_bytes()),
        "application/json",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(
        &agent,
        "POST",
        &format!("{url}/v1/tenants/acme/tokens"),
        Some(br#"{"label": "browser"}"#),
        "application/json",
    )
    .unwrap();
    assert_eq!(status, 201, "{body}");
    body["token"].as_str().expect("a token").to_string()
}

/// The browser session and where its screenshots go.
struct Browser {
    client: Client,
    shots: PathBuf,
}

impl Browser {
    /// Polls a JavaScript expression until it is truthy; on timeout saves a
    /// screenshot and fails naming what it waited for.
    async fn wait_for(&self, what: &str, expr: &str, timeout: Duration) -> Value {
        let started = Instant::now();
        loop {
            let value = self
                .client
                .execute(&format!("return ({expr});"), vec![])
                .await
                .unwrap_or(Value::Null);
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") {
                return value;
            }
            if started.elapsed() > timeout {
                self.shot("failure").await;
                let text = self
                    .client
                    .execute("return document.body.innerText;", vec![])
                    .await
                    .unwrap_or_default();
                panic!(
                    "waited {timeout:?} for {what} (`{expr}`); the page says:\n{}",
                    text.as_str().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    async fn click(&self, css: &str) {
        // Pages that follow live state redraw every few seconds: an element
        // found just before a redraw is stale by the click. Find it again.
        for tries_left in (0..3).rev() {
            let element = self
                .client
                .wait()
                .at_most(Duration::from_secs(10))
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no element `{css}`: {e}"));
            match element.click().await {
                Ok(()) => return,
                Err(e) if tries_left > 0 && e.is_stale_element_reference() => {}
                Err(e) => panic!("clicking `{css}`: {e}"),
            }
        }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigation");
    }

    /// Opens `page` (a URL), waits for `ready`, and checks that the page does
    /// not scroll sideways at the window's width (wide content scrolls in its
    /// own box).
    async fn fits_width(&self, page: &str, ready: &str) {
        self.goto(page).await;
        self.wait_for(
            page,
            &format!("!document.querySelector('main').hasAttribute('aria-busy') && ({ready})"),
            Duration::from_secs(60),
        )
        .await;
        let widths = self
            .client
            .execute(
                "return [document.documentElement.scrollWidth, window.innerWidth];",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            widths[0].as_i64() <= widths[1].as_i64(),
            "{page} scrolls sideways: [scrollWidth, innerWidth] = {widths}"
        );
    }

    /// Whether the element `css` (scrolled to) lies wholly inside the viewport.
    async fn in_viewport(&self, css: &str) -> bool {
        let script = format!(
            "const e = document.querySelector({css:?}); e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); \
             return r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= window.innerWidth && r.bottom <= window.innerHeight;"
        );
        self.client.execute(&script, vec![]).await.unwrap() == json!(true)
    }
}

#[test]
fn dashboard_signs_in_runs_a_task_and_shows_its_logs() {
    let driver = Chromedriver::start();
    let data = tempfile::tempdir().unwrap();
    let profile = tempfile::tempdir().unwrap();
    let ax = AxProcess::start(data.path());
    let acme_token = apply_fixture(&ax.url);
    let shots = screenshot_dir();
    std::fs::create_dir_all(&shots).unwrap();

    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(capabilities(profile.path()))
                .connect(&driver.url)
                .await
                .expect("a WebDriver session with headless chromium");
            let session = client.clone();
            let url = ax.url.clone();
            // The steps run as a task of their own, so that when one fails the
            // browser is still closed: a panicking test must not leave Chromium running.
            let steps = tokio::spawn(async move {
                let b = Browser { client, shots };
                let long = Duration::from_secs(60);

                // Sign in.
                b.goto(&format!("{}/", url)).await;
                b.wait_for("the sign-in form", "document.querySelector('#signin')", long).await;
                b.shot("01-sign-in").await;
                // The stylesheet loaded under the CSP (the module script evidently did).
                let header = b
                    .client
                    .execute(
                        "return getComputedStyle(document.querySelector('.top')).backgroundColor;",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(header, json!("rgb(31, 78, 121)"));
                b.client.find(Locator::Css("#token")).await.unwrap().send_keys(TOKEN).await.unwrap();
                b.click("#signin button[type=submit]").await;
                b.wait_for(
                    "the task list with greet",
                    "document.querySelector('button[data-action=run][data-task=greet]')",
                    long,
                )
                .await;

                // Run now, then watch the task's last run turn `succeeded`.
                b.click("button[data-action=run][data-task=greet]").await;
                b.wait_for(
                    "greet's last run to succeed",
                    "[...document.querySelectorAll('.last[data-task=greet] .badge')].some(e => e.textContent === 'succeeded')",
                    long,
                )
                .await;
                b.shot("02-tasks").await;

                // Open the run page from the task list and read the logs.
                b.click(".last[data-task=greet] a").await;
                b.wait_for(
                    "the run page of a succeeded run",
                    "document.querySelector('#run-status .badge')?.textContent === 'succeeded'",
                    long,
                )
                .await;
                let logs = b
                    .wait_for(
                        "hello's log line on the run page",
                        "document.querySelector('#logs')?.textContent.includes('greeting <b>browser</b> (attempt 1)') && document.querySelector('#logs').textContent",
                        long,
                    )
                    .await;
                assert!(logs.as_str().unwrap().contains("hello · attempt 1"), "{logs}");
                // Untrusted text stays text: the `<b>` from the input is not an element anywhere.
                let injected = b
                    .client
                    .execute("return document.querySelectorAll('main b, main i').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(injected, json!(0), "plugin output became markup");
                let dag_states = b
                    .client
                    .execute(
                        "return [...document.querySelectorAll('svg.dag g.node')].map(g => g.dataset.step + '=' + g.getAttribute('class'));",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    dag_states,
                    json!([
                        "hello=node st-succeeded",
                        "shout=node st-succeeded",
                        "whisper=node st-skipped"
                    ])
                );
                // State colours go on a node's shape, never on its text (a
                // stroke on text smears it); every label is shown whole.
                let nodes = b
                    .client
                    .execute(
                        "return [...document.querySelectorAll('svg.dag g.node')].map(g => [getComputedStyle(g.querySelector('rect')).stroke, [...g.querySelectorAll('text')].map(t => getComputedStyle(t).stroke + (t.dataset.full === undefined || t.firstChild.textContent === t.dataset.full ? '' : ' cut'))]);",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(nodes[0][0], json!("rgb(19, 115, 51)"), "hello's box is green: {nodes}");
                for node in nodes.as_array().unwrap() {
                    for text in node[1].as_array().unwrap() {
                        assert_eq!(text, &json!("none"), "a DAG label is stroked or cut: {nodes}");
                    }
                }
                // The conditional step: a dashed edge explained by a legend,
                // its condition on the node's mark and in its tooltips.
                let cond = b
                    .client
                    .execute(
                        "const g = document.querySelector('svg.dag g.node[data-step=whisper]'); return [document.querySelector('.dag-box .legend')?.textContent ?? null, g.querySelector('.mark')?.firstChild.textContent ?? null, g.querySelector('.mark title')?.textContent ?? null, document.querySelectorAll('svg.dag path.edge.conditional').length, document.querySelector('svg.dag path.edge.conditional title')?.textContent ?? null];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert!(cond[0].as_str().is_some_and(|t| t.contains("conditional step")), "{cond}");
                assert_eq!(cond[1], json!("if"), "{cond}");
                assert_eq!(cond[2], json!("when: steps.hello.output.greeting == 'nobody'"), "{cond}");
                assert_eq!(cond[3], json!(1), "{cond}");
                assert_eq!(cond[4], json!("hello → whisper (only when steps.hello.output.greeting == 'nobody')"), "{cond}");
                // Long names: a node grows to show them whole (inside its box);
                // past its widest, a label ends in "…" with the full text as its tooltip.
                let labels = b
                    .client
                    .execute_async(
                        "const done = arguments[arguments.length - 1]; import('/ui/charts.js').then(m => { \
                         const el = m.dag({task: 't', edges: [], nodes: [ \
                           {name: 'load_customer_orders_warehouse', plugin: 'warehouse-loader@12.3.4', layer: 0, state: 'succeeded'}, \
                           {name: 'b', plugin: 'a-plugin-name-far-too-long-to-fit-in-any-node-at-all@1.0.0', layer: 1, state: 'failed'}]}); \
                         document.body.append(el); \
                         const r = [...el.querySelectorAll('g.node text')].map(t => [t.firstChild.textContent, t.querySelector('title')?.textContent ?? null, t.getComputedTextLength() + 10 <= t.parentNode.querySelector('rect').width.baseVal.value]); \
                         el.remove(); done(r); });",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(labels[0], json!(["load_customer_orders_warehouse", null, true]), "{labels}");
                assert_eq!(labels[1], json!(["succeeded · warehouse-loader@12.3.4", null, true]), "{labels}");
                assert_eq!(labels[2], json!(["b", null, true]), "{labels}");
                let cut = &labels[3];
                assert!(cut[0].as_str().is_some_and(|t| t.ends_with('…')), "{labels}");
                assert_eq!(cut[1], json!("failed · a-plugin-name-far-too-long-to-fit-in-any-node-at-all@1.0.0"), "{labels}");
                assert_eq!(cut[2], json!(true), "{labels}");
                // The skipped step says why, muted: no error styling.
                let whisper = b
                    .client
                    .execute(
                        "const r = [...document.querySelectorAll('#steps tbody tr')].find(r => r.cells[0].textContent === 'whisper'); return [r.querySelectorAll('.error-text').length, r.querySelector('.skip-reason')?.textContent ?? null];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(whisper[0], json!(0), "{whisper}");
                assert!(
                    whisper[1]
                        .as_str()
                        .is_some_and(|t| t.starts_with("skipped: condition is false")),
                    "{whisper}"
                );
                // The zone (the browser's, Asia/Shanghai here) is said once, in
                // the header, not in every time; attempts' times have
                // milliseconds, each on one line, their day in a caption.
                let zone = b
                    .client
                    .execute("return document.querySelector('#zone').textContent;", vec![])
                    .await
                    .unwrap();
                assert_eq!(zone, json!("times in UTC+08:00"));
                let times = b
                    .client
                    .execute("return [...document.querySelectorAll('main time:not(#attempts time)')].map(t => t.textContent);", vec![])
                    .await
                    .unwrap();
                let times = times.as_array().unwrap();
                assert!(!times.is_empty());
                for t in times {
                    let t = t.as_str().unwrap();
                    assert!(!t.contains("UTC"), "a time repeats the zone: {t}");
                    assert_eq!(t.len(), "2026-12-05 20:24:17".len(), "{t}");
                }
                let attempt_times = b
                    .client
                    .execute(
                        "return [...document.querySelectorAll('#attempts time')].map(t => [t.textContent, t.getClientRects().length]);",
                        vec![],
                    )
                    .await
                    .unwrap();
                let attempt_times = attempt_times.as_array().unwrap();
                assert!(attempt_times.len() >= 4, "{attempt_times:?}");
                for t in attempt_times {
                    let text = t[0].as_str().unwrap();
                    let shape: String = text.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
                    assert_eq!(shape, "99:99:99.999", "an attempt time: {text}");
                    assert_eq!(t[1], json!(1), "{text} wraps");
                }
                let caption = b
                    .client
                    .execute("return document.querySelector('#attempts-caption').textContent;", vec![])
                    .await
                    .unwrap();
                assert!(caption.as_str().unwrap().contains("times of day on 20"), "{caption}");
                // The attempts chart's legend lists only what the chart draws:
                // no retry here, so no backoff.
                let legend = b
                    .client
                    .execute(
                        "return [[...document.querySelectorAll('#attempts-legend [data-item]')].map(e => e.dataset.item), ['queued', 'attempt', 'backoff'].filter(k => document.querySelector({queued: 'svg.timeline rect.wait', attempt: 'svg.timeline rect[class^=st-]', backoff: 'svg.timeline rect.backoff'}[k]))];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(legend[0], legend[1], "[legend items, drawn items]");
                assert!(!legend[0].as_array().unwrap().contains(&json!("backoff")), "{legend}");
                let attempts = b
                    .client
                    .execute("return document.querySelectorAll('#attempts tbody tr').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(attempts, json!(2));
                // The run page is long: a tall window shows all of it.
                b.client.set_window_size(1280, 2400).await.unwrap();
                b.shot("04-run").await;
                b.client.set_window_size(1280, 1000).await.unwrap();

                // The other main pages.
                b.goto(&format!("{}/#/runs", url)).await;
                b.wait_for("the run list", "document.querySelectorAll('table.runs tbody tr a').length > 0", long)
                    .await;
                b.shot("03-runs").await;
                // Filters go into the URL and the listing.
                b.goto(&format!("{}/#/runs?task=greet&status=failed", url)).await;
                b.wait_for(
                    "an empty list of greet's failed runs",
                    "document.querySelector('table.runs td.empty') && document.querySelector('select[name=status]').value === 'failed'",
                    long,
                )
                .await;
                b.goto(&format!("{}/#/plugins", url)).await;
                b.wait_for(
                    "the plugin list",
                    "document.querySelector('#plugins')?.textContent.includes('echo')",
                    long,
                )
                .await;
                b.shot("05-plugins").await;
                // Each plugin says which tasks use it, each a link.
                let users = b
                    .client
                    .execute(
                        "return ['hello', 'echo', 'fail'].map(p => [...document.querySelectorAll(`.used-by[data-plugin=${p}] a`)].map(a => a.textContent + '=' + a.getAttribute('href')).join());",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    users,
                    json!([
                        "greet=#/tasks/greet",
                        "export=#/tasks/export,greet=#/tasks/greet,report=#/tasks/report",
                        "flaky=#/tasks/flaky,patient=#/tasks/patient"
                    ])
                );
                // The success rate's colour says its threshold.
                b.goto(&format!("{}/#/tasks", url)).await;
                let success = b
                    .wait_for(
                        "the success rate",
                        "[...document.querySelectorAll('.stat')].map(e => [e.querySelector('.label').textContent, e.title]).find(([l]) => l.startsWith('success'))",
                        long,
                    )
                    .await;
                assert!(
                    success[0].as_str().unwrap().contains("red under 95%") && success[1].as_str().unwrap().contains("red under it"),
                    "{success}"
                );
                // Pause and resume from the task list.
                b.goto(&format!("{}/#/tasks", url)).await;
                b.click("button[data-action=pause][data-task=greet]").await;
                b.wait_for(
                    "greet paused",
                    "document.querySelector('button[data-action=resume][data-task=greet]')",
                    long,
                )
                .await;
                b.click("button[data-action=resume][data-task=greet]").await;
                b.wait_for(
                    "greet resumed",
                    "document.querySelector('button[data-action=pause][data-task=greet]')",
                    long,
                )
                .await;

                // A run that fails three times: its page, then its dead letter.
                b.click("button[data-action=run][data-task=flaky]").await;
                b.wait_for(
                    "flaky's last run to fail",
                    "[...document.querySelectorAll('.last[data-task=flaky] .badge')].some(e => e.textContent === 'failed')",
                    long,
                )
                .await;
                b.click(".last[data-task=flaky] a").await;
                b.wait_for(
                    "the failed run's three attempts",
                    "document.querySelector('#run-status .badge')?.textContent === 'failed' && document.querySelectorAll('#attempts tbody tr').length === 3",
                    long,
                )
                .await;
                let page = b
                    .client
                    .execute("return document.querySelector('main').textContent;", vec![])
                    .await
                    .unwrap();
                let page = page.as_str().unwrap();
                assert!(page.contains("Retry failed steps"), "{page}");
                assert!(page.contains("step `flaky` dead after 3 attempts"), "{page}");
                assert!(page.contains("upstream <i>down</i>"), "{page}");
                let injected = b
                    .client
                    .execute("return document.querySelectorAll('main i').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(injected, json!(0), "an error message became markup");
                // Its retries waited: the legend lists the backoff it draws.
                let legend = b
                    .client
                    .execute(
                        "return [[...document.querySelectorAll('#attempts-legend [data-item]')].map(e => e.dataset.item), document.querySelectorAll('svg.timeline rect.backoff').length];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert!(legend[0].as_array().unwrap().contains(&json!("backoff")) && legend[1].as_i64() >= Some(2), "{legend}");
                // The failing step's error and its class are in the header.
                let header = b
                    .client
                    .execute(
                        "const e = document.querySelector('#run-error'); return e && [e.querySelector('code').textContent, e.querySelector('.error-class').textContent, e.querySelector('.error-text').textContent];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    header,
                    json!(["flaky", "retryable", "upstream <i>down</i>"]),
                    "[step, class, error] in the run header"
                );
                let failed_run = b
                    .client
                    .execute("return location.hash.split('/').pop();", vec![])
                    .await
                    .unwrap();
                let failed_run = failed_run.as_str().unwrap().to_owned();
                // The dead letter in the timeline is a link to it.
                let dead_link = b
                    .client
                    .execute(
                        "const a = document.querySelector('#timeline a code.dead-letter'); return a && a.textContent;",
                        vec![],
                    )
                    .await
                    .unwrap();
                let dead_id = dead_link.as_str().expect("a dead letter link in the timeline").to_owned();
                b.click("#timeline a code.dead-letter").await;
                b.wait_for(
                    "the linked dead letter, marked",
                    &format!("document.querySelector('#dead-letters tr.focus [data-dead-letter={dead_id:?}]') && document.querySelector('#dead-letters tr.focus').textContent.includes('flaky')"),
                    long,
                )
                .await;
                // The Runs list says why flaky's run failed.
                b.goto(&format!("{}/#/runs?task=flaky", url)).await;
                let listed = b
                    .wait_for(
                        "flaky's run's error in the Runs list",
                        "document.querySelector('table.runs .run-error')?.textContent",
                        long,
                    )
                    .await;
                assert_eq!(listed, json!("retryable flaky: upstream <i>down</i>"));
                b.goto(&format!("{}/#/runs/{failed_run}", url)).await;
                b.wait_for(
                    "the failed run again",
                    "document.querySelector('button[data-action=rerun][data-step=flaky]')",
                    long,
                )
                .await;
                // A warning is amber, not red like an error.
                let warn = b
                    .client
                    .execute(
                        "const l = document.querySelector('#timeline li.lvl-warn .level'); return l && [l.textContent, getComputedStyle(l).color];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(warn, json!(["warn", "rgb(161, 92, 0)"]), "the fail plugin's WARN line");
                // Durations under a millisecond are not "0ms".
                let durations = b
                    .client
                    .execute_async(
                        "const done = arguments[arguments.length - 1]; import('/ui/dom.js').then(m => done([0, 0.04, 0.4, 3.25, 340, 1250].map(m.human)));",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(durations, json!(["0ms", "<0.1ms", "0.4ms", "3.3ms", "340ms", "1.25s"]));
                b.client.set_window_size(1280, 2400).await.unwrap();
                b.shot("09-failed-run").await;
                b.client.set_window_size(1280, 1000).await.unwrap();
                b.goto(&format!("{}/#/dead-letters", url)).await;
                b.wait_for(
                    "flaky's dead letter",
                    "document.querySelector('main table')?.textContent.includes('flaky') && [...document.querySelectorAll('main button')].some(x => x.textContent === 'Requeue')",
                    long,
                )
                .await;
                b.shot("10-dead-letters").await;

                // Rerun from the failed step: a confirmation naming the run and
                // the step first; Cancel does nothing, the button reruns.
                b.goto(&format!("{}/#/runs/{failed_run}", url)).await;
                b.click("button[data-action=rerun][data-step=flaky]").await;
                let asked = b
                    .wait_for("the rerun confirmation", "document.querySelector('dialog[open] #confirm-form')?.textContent", long)
                    .await;
                let asked = asked.as_str().unwrap();
                assert!(asked.contains(&failed_run) && asked.contains("Run step flaky of run"), "{asked}");
                b.click("dialog[open] #confirm-form button[type=button]").await;
                b.wait_for("the dialog closed", "!document.querySelector('dialog')", long).await;
                b.click("button[data-action=rerun][data-step=flaky]").await;
                b.click("dialog[open] #confirm-form button[data-action=confirm]").await;
                b.wait_for(
                    "the rerun requested, then failed again",
                    "!document.querySelector('dialog') && document.querySelector('#timeline')?.textContent.includes('rerun of step `flaky` requested') && document.querySelector('#run-status .badge')?.textContent === 'failed'",
                    long,
                )
                .await;

                // Cursor paging, one run a page: greet's run is older than flaky's.
                b.goto(&format!("{}/#/runs?limit=1", url)).await;
                b.wait_for(
                    "the newest run, flaky's",
                    "document.querySelectorAll('table.runs tbody tr').length === 1 && document.querySelector('table.runs').textContent.includes('flaky')",
                    long,
                )
                .await;
                b.click(".pager a").await;
                b.wait_for(
                    "the next page, greet's run",
                    "location.hash.includes('cursor=') && document.querySelectorAll('table.runs tbody tr').length === 1 && document.querySelector('table.runs').textContent.includes('greet')",
                    long,
                )
                .await;

                // Failures across tasks: each task's strip of recent outcomes,
                // from one list call (no per-task call for a task in it).
                b.client
                    .execute("performance.setResourceTimingBufferSize(100000); performance.clearResourceTimings();", vec![])
                    .await
                    .unwrap();
                b.goto(&format!("{}/#/tasks", url)).await;
                let strip = b
                    .wait_for(
                        "flaky's strip of recent outcomes",
                        "document.querySelector('.recent[data-task=flaky] a') && [...document.querySelectorAll('.recent[data-task=flaky] a')].map(a => a.getAttribute('href') + ' ' + a.querySelector('rect').getAttribute('class'))",
                        long,
                    )
                    .await;
                assert_eq!(strip, json!([format!("#/runs/{failed_run} st-failed")]));
                // The task list again, now with a failure among its strips.
                b.shot("02-tasks").await;
                let per_task = b
                    .client
                    .execute(
                        "return performance.getEntriesByType('resource').map(e => e.name).filter(n => /\\/v1\\/runs\\?task=(greet|flaky)&limit=1$/.test(n));",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(per_task, json!([]), "a task with recent runs was asked for on its own");
                // The search box filters the tasks by name, and says when none matches.
                b.client.find(Locator::Css("#task-search")).await.unwrap().send_keys("FLA").await.unwrap();
                b.wait_for(
                    "only flaky listed",
                    "location.hash === '#/tasks?q=FLA' && [...document.querySelectorAll('#tasks tbody tr')].filter(r => !r.hidden).map(r => r.cells[0].textContent).join() === 'flaky' && document.querySelector('#no-match').hidden",
                    long,
                )
                .await;
                b.client.find(Locator::Css("#task-search")).await.unwrap().send_keys("zzz").await.unwrap();
                b.wait_for(
                    "no task listed, and why",
                    "[...document.querySelectorAll('#tasks tbody tr')].every(r => r.hidden) && !document.querySelector('#no-match').hidden",
                    long,
                )
                .await;

                // Runs: failed in the last 24 h (a quick link), and a run opened by its id.
                b.goto(&format!("{}/#/runs", url)).await;
                b.click(".quick a").await;
                let failed = b
                    .wait_for(
                        "the failed runs of the last 24 h",
                        "location.hash === '#/runs?status=failed&since=24h' && document.querySelector('select[name=since]')?.value === '24h' && document.querySelector('select[name=status]').value === 'failed' && [...document.querySelectorAll('table.runs tbody tr')].map(r => r.cells[0].textContent + ' ' + r.cells[2].querySelector('.badge').textContent)",
                        long,
                    )
                    .await;
                assert_eq!(failed, json!([format!("{failed_run} failed")]));
                b.client.find(Locator::Css("#run-search")).await.unwrap().send_keys("r-no-such-run").await.unwrap();
                b.click("#run-open button[type=submit]").await;
                b.wait_for(
                    "an unknown run id refused in place",
                    "document.querySelector('#run-open [role=alert]')?.textContent === 'no run r-no-such-run' && location.hash.startsWith('#/runs?')",
                    long,
                )
                .await;
                let search = b.client.find(Locator::Css("#run-search")).await.unwrap();
                search.clear().await.unwrap();
                search.send_keys(&failed_run).await.unwrap();
                b.click("#run-open button[type=submit]").await;
                b.wait_for(
                    "the run opened by its id",
                    &format!("location.hash === '#/runs/{failed_run}' && document.querySelector('#run-status .badge')"),
                    long,
                )
                .await;

                // The Runs page's time range is the server's `since=`, pinned
                // across pages.
                let agent = new_agent();
                let brittle = "name: brittle\nplugin: fail@1.0.0\ninput: { message: \"broke\" }\nretry: { max_attempts: 1 }\n";
                let (status, body) = call(&agent, "PUT", &format!("{url}/v1/tasks/brittle"), Some(brittle.as_bytes()), "application/yaml").unwrap();
                assert_eq!(status, 201, "{body}");
                let mut brittle_runs = Vec::new();
                for _ in 0..2 {
                    let (status, body) = call(&agent, "POST", &format!("{url}/v1/tasks/brittle/runs"), Some(b"{}"), "application/json").unwrap();
                    assert_eq!(status, 201, "{body}");
                    brittle_runs.push(body["id"].as_str().unwrap().to_owned());
                }
                // (status, attempts) of a run, from the API.
                let attempts_of = |id: &str| {
                    let (_, run) = call(&agent, "GET", &format!("{url}/v1/runs/{id}"), None, "").unwrap();
                    let n = run["steps"][0]["attempts"].as_array().map_or(0, Vec::len);
                    (run["status"].as_str().unwrap_or_default().to_owned(), n)
                };
                let settled = |want: usize| {
                    let started = Instant::now();
                    loop {
                        let now: Vec<_> = brittle_runs.iter().map(|id| attempts_of(id)).collect();
                        if now.iter().all(|(st, n)| st == "failed" && *n == want) {
                            return;
                        }
                        assert!(started.elapsed() < long, "brittle's runs never failed with {want} attempts: {now:?}");
                        std::thread::sleep(Duration::from_millis(50));
                    }
                };
                settled(1);
                let flaky_before = attempts_of(&failed_run);
                b.client.execute("performance.clearResourceTimings();", vec![]).await.unwrap();
                b.goto(&format!("{}/#/runs?task=brittle&status=failed&since=1h&limit=1", url)).await;
                let first = b
                    .wait_for(
                        "the newest of brittle's failures in the last hour, one a page",
                        "document.querySelector('.pager a[href*=cursor]') && [...document.querySelectorAll('table.runs tbody tr')].map(r => r.cells[0].textContent)",
                        long,
                    )
                    .await;
                assert_eq!(first, json!([brittle_runs[1]]));
                // The page asked the server for the range, as unix ms about an hour ago.
                let asked = b
                    .client
                    .execute(
                        "return [Date.now(), performance.getEntriesByType('resource').map(e => new URL(e.name)).filter(u => u.pathname === '/v1/runs' && u.searchParams.get('task') === 'brittle').map(u => Number(u.searchParams.get('since')))];",
                        vec![],
                    )
                    .await
                    .unwrap();
                let now = asked[0].as_f64().unwrap();
                let since = asked[1][0].as_f64().unwrap();
                assert!((now - 3_600_000.0 - since).abs() < 60_000.0, "since={since} at {now}: {asked}");
                // The first page redraws every 3 s (a new instant each time);
                // the pager link carries the instant of the page it is on.
                b.click(".pager a[href*=cursor]").await;
                let second = b
                    .wait_for(
                        "the older of brittle's failures, on the next page",
                        // The first page stays on screen a moment after the click: wait for the one without `older →`.
                        "location.hash.includes('cursor=') && !document.querySelector('main').hasAttribute('aria-busy') && !document.querySelector('.pager a[href*=cursor]') && document.querySelector('.pager a') && [...document.querySelectorAll('table.runs tbody tr')].map(r => r.cells[0].textContent)",
                        long,
                    )
                    .await;
                assert_eq!(second, json!([brittle_runs[0]]));
                let pinned = b
                    .client
                    .execute(
                        "return [document.querySelectorAll('.pager a[href*=cursor]').length, Number(new URLSearchParams(location.hash.split('?')[1]).get('from')), performance.getEntriesByType('resource').map(e => new URL(e.name)).filter(u => u.pathname === '/v1/runs' && u.searchParams.get('task') === 'brittle' && u.searchParams.get('cursor')).map(u => Number(u.searchParams.get('since')))];",
                        vec![],
                    )
                    .await
                    .unwrap();
                let from = pinned[1].as_f64().unwrap();
                assert!((from - since).abs() < 60_000.0, "from={from}, first page's since={since}");
                assert_eq!(pinned, json!([0, from as i64, [from as i64]]), "the next page keeps the range's instant and ends it");

                // Bulk retry: the failed runs shown (not flaky's, filtered out),
                // named before anything runs.
                b.goto(&format!("{}/#/runs?task=brittle&status=failed", url)).await;
                b.wait_for("a bulk retry of two runs", "document.querySelector('#bulk-retry')?.dataset.count === '2'", long).await;
                b.click("#bulk-retry").await;
                let asked = b
                    .wait_for(
                        "the bulk retry's confirmation",
                        "document.querySelector('dialog[open] #confirm-form') && [document.querySelector('#confirm-form').textContent, [...document.querySelectorAll('#bulk-runs li')].map(li => li.dataset.run)]",
                        long,
                    )
                    .await;
                let text = asked[0].as_str().unwrap();
                assert!(text.contains("Retry 2 failed runs of task brittle (the runs shown: task brittle, status failed)"), "{text}");
                let mut named: Vec<String> = serde_json::from_value(asked[1].clone()).unwrap();
                named.sort();
                let mut want = brittle_runs.clone();
                want.sort();
                assert_eq!(named, want);
                b.shot("14-bulk-retry").await;
                // Cancel does nothing.
                b.click("#confirm-form .actions button:not([data-action])").await;
                b.wait_for("the dialog gone", "!document.querySelector('dialog')", long).await;
                let posted = b
                    .client
                    .execute("return performance.getEntriesByType('resource').filter(e => e.name.includes('/retry')).length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(posted, json!(0), "Cancel retried something");
                settled(1);
                b.click("#bulk-retry").await;
                b.click("dialog[open] button[data-action=confirm]").await;
                b.wait_for("the dialog closed after the retries", "!document.querySelector('dialog')", long).await;
                settled(2);
                assert_eq!(attempts_of(&failed_run), flaky_before, "a run outside the filter was retried");

                // The same on a phone: the page fits, the dialog and its buttons are on screen.
                b.client.set_window_size(390, 844).await.unwrap();
                b.fits_width(&format!("{}/#/runs?task=brittle&status=failed", url), "document.querySelector('#bulk-retry')?.dataset.count === '2'").await;
                assert!(b.in_viewport("#bulk-retry").await, "bulk retry is off screen on a phone");
                b.click("#bulk-retry").await;
                b.wait_for("the confirmation on a phone", "document.querySelectorAll('dialog[open] #bulk-runs li').length === 2", long).await;
                let fits = b
                    .client
                    .execute(
                        "const d = document.querySelector('dialog[open]').getBoundingClientRect(); return [d.left >= 0, d.right <= window.innerWidth, document.documentElement.scrollWidth <= window.innerWidth];",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(fits, json!([true, true, true]), "the bulk retry dialog does not fit a phone");
                assert!(b.in_viewport("dialog[open] button[data-action=confirm]").await, "the dialog's confirm is off screen on a phone");
                b.shot("15-phone-bulk-retry").await;
                b.click("dialog[open] button[data-action=confirm]").await;
                b.wait_for("the dialog closed on a phone", "!document.querySelector('dialog')", long).await;
                settled(3);
                b.client.set_window_size(1280, 1000).await.unwrap();

                b.goto(&format!("{}/#/tasks/greet", url)).await;
                b.wait_for("the task page's chart", "document.querySelector('svg.chart')", long).await;
                b.shot("06-task").await;

                // "Run now" on a task with params: a form from them, the
                // defaults filled in, the required one empty.
                b.goto(&format!("{}/#/tasks", url)).await;
                b.click("button[data-action=run][data-task=report]").await;
                let form = b
                    .wait_for(
                        "report's params form",
                        "document.querySelector('dialog[open] #params-form[data-task=report]') && [...document.querySelectorAll('#params-form [name]')].map(e => e.name + '=' + (e.type === 'checkbox' ? e.checked : e.value) + (e.required ? '!' : ''))",
                        long,
                    )
                    .await;
                assert_eq!(
                    form,
                    json!(["day=!", "limit=10", "mode=full", "dry_run=false"]),
                    "one field per param, in declared order, with its default"
                );
                let labels = b
                    .client
                    .execute("return document.querySelector('#params-form').textContent;", vec![])
                    .await
                    .unwrap();
                assert!(labels.as_str().unwrap().contains("the day to process"), "{labels}");
                b.shot("11-params-form").await;
                // Fill it in, then run.
                b.client.find(Locator::Css("#param-day")).await.unwrap().send_keys("2026-12-24").await.unwrap();
                let limit = b.client.find(Locator::Css("#param-limit")).await.unwrap();
                limit.clear().await.unwrap();
                limit.send_keys("42").await.unwrap();
                b.client
                    .execute("document.querySelector('#param-mode').value = 'incremental';", vec![])
                    .await
                    .unwrap();
                b.click("#param-dry_run").await;
                b.click("#params-form button[type=submit]").await;
                b.wait_for(
                    "report's run to succeed",
                    "!document.querySelector('dialog[open]') && [...document.querySelectorAll('.last[data-task=report] .badge')].some(e => e.textContent === 'succeeded')",
                    long,
                )
                .await;
                let runs_url = format!("{}/v1/runs?task=report", url);
                let (status, runs) = tokio::task::spawn_blocking(move || {
                    call(&new_agent(), "GET", &runs_url, None, "").unwrap()
                })
                .await
                .unwrap();
                assert_eq!(status, 200, "{runs}");
                assert_eq!(
                    runs["runs"][0]["input"],
                    json!({"day": "2026-12-24", "limit": 42, "mode": "incremental", "dry_run": true}),
                    "the form's values, typed"
                );

                // A dialog belongs to the page it was opened from: leaving the
                // page (a new URL, Back) closes it, and the next page's dialog
                // names the next page's task.
                b.goto(&format!("{}/#/tasks/export", url)).await;
                b.click("button[data-action=run][data-task=export]").await;
                b.wait_for(
                    "export's params form",
                    "document.querySelector('dialog[open] #params-form[data-task=export]')",
                    long,
                )
                .await;
                b.client
                    .execute("location.hash = '#/tasks/report';", vec![])
                    .await
                    .unwrap();
                b.wait_for(
                    "report's task page",
                    "document.querySelector('button[data-action=run][data-task=report]')",
                    long,
                )
                .await;
                let dialogs = b
                    .client
                    .execute("return document.querySelectorAll('dialog').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(dialogs, json!(0), "export's dialog outlived its page");
                b.click("button[data-action=run][data-task=report]").await;
                let title = b
                    .wait_for(
                        "report's params form",
                        "document.querySelector('dialog[open] #params-form[data-task=report]') && document.querySelector('dialog[open] h2').textContent",
                        long,
                    )
                    .await;
                assert_eq!(title, json!("Run report"));
                b.client.back().await.unwrap();
                b.wait_for(
                    "export's task page again",
                    "location.hash === '#/tasks/export' && document.querySelector('button[data-action=run][data-task=export]')",
                    long,
                )
                .await;
                let dialogs = b
                    .client
                    .execute("return document.querySelectorAll('dialog').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(dialogs, json!(0), "report's dialog outlived Back");

                // A task that never ran says so, on its page and in the list.
                b.goto(&format!("{}/#/tasks/export", url)).await;
                b.wait_for(
                    "export's empty runs table",
                    "document.querySelector('table.runs td.empty')?.textContent === 'no runs yet'",
                    long,
                )
                .await;
                b.goto(&format!("{}/#/tasks", url)).await;
                b.wait_for(
                    "export's row saying it never ran",
                    "[...document.querySelectorAll('#tasks tbody tr')].find(r => r.cells[0].textContent === 'export')?.querySelector('.no-runs')?.textContent === 'no runs yet'",
                    long,
                )
                .await;

                // A step cancelled in its retry backoff: amber in the steps
                // table as in the DAG, never error red.
                b.click("button[data-action=run][data-task=patient]").await;
                b.click(".last[data-task=patient] a").await;
                b.wait_for(
                    "patient's step waiting to retry",
                    "document.querySelector('#steps')?.textContent.includes('retry_wait') && [...document.querySelectorAll('main button')].find(x => x.textContent === 'Cancel')",
                    long,
                )
                .await;
                b.client
                    .execute("[...document.querySelectorAll('main button')].find(x => x.textContent === 'Cancel').click();", vec![])
                    .await
                    .unwrap();
                let colours = b
                    .wait_for(
                        "the cancelled run",
                        "document.querySelector('#run-status .badge')?.textContent === 'cancelled' && document.querySelector('svg.dag g.node.st-cancelled') && (() => { const row = document.querySelector('#steps tbody tr'); return [row.cells[2].textContent, getComputedStyle(row.querySelector('.badge')).color, row.querySelectorAll('.error-text').length, getComputedStyle(row.cells[4].firstChild).color, getComputedStyle(document.querySelector('svg.dag g.node.st-cancelled rect')).stroke]; })()",
                        long,
                    )
                    .await;
                let amber = json!("rgb(161, 92, 0)");
                assert_eq!(
                    colours,
                    json!(["cancelled", amber, 0, amber, amber]),
                    "[status, badge colour, red errors, reason colour, DAG box colour]"
                );

                // A phone (390×844): no page scrolls sideways, the header
                // wraps, and Run now and Pause are on screen.
                b.client.set_window_size(390, 844).await.unwrap();
                let inner = b.client.execute("return window.innerWidth;", vec![]).await.unwrap();
                assert!(inner.as_i64().is_some_and(|w| w <= 400), "not a phone's width: {inner}");
                b.fits_width(&format!("{}/#/tasks", url), "document.querySelector('button[data-action=run][data-task=greet]')").await;
                for css in ["button[data-action=run][data-task=greet]", "button[data-action=pause][data-task=greet]"] {
                    assert!(b.in_viewport(css).await, "{css} is off screen on a phone's task list");
                }
                let who = b
                    .client
                    .execute("const r = document.querySelector('#signout').getBoundingClientRect(); return r.right <= window.innerWidth && r.bottom <= document.querySelector('.top').getBoundingClientRect().bottom;", vec![])
                    .await
                    .unwrap();
                assert_eq!(who, json!(true), "the header's sign-out runs off the bar");
                b.shot("12-phone-tasks").await;
                b.fits_width(&format!("{}/#/tasks/greet", url), "document.querySelector('svg.chart')").await;
                assert!(
                    b.in_viewport("button[data-action=run][data-task=greet]").await,
                    "Run now is off screen on a phone's task page"
                );
                b.fits_width(&format!("{}/#/runs", url), "document.querySelector('table.runs tbody a')").await;
                b.fits_width(&format!("{}/#/runs?task=flaky", url), "document.querySelector('table.runs tbody a')").await;
                b.click("table.runs tbody a").await;
                b.wait_for(
                    "flaky's run page on a phone",
                    "document.querySelector('#run-status .badge')?.textContent === 'failed' && document.querySelector('#timeline')",
                    long,
                )
                .await;
                let widths = b
                    .client
                    .execute("return [document.documentElement.scrollWidth, window.innerWidth, Math.min(...[...document.querySelectorAll('#steps td pre')].map(e => e.getBoundingClientRect().width))];", vec![])
                    .await
                    .unwrap();
                assert!(widths[0].as_i64() <= widths[1].as_i64(), "the run page scrolls sideways: {widths}");
                assert!(widths[2].as_f64().is_some_and(|w| w >= 100.0), "the steps' error column is squeezed: {widths}");
                b.shot("13-phone-run").await;
                b.fits_width(&format!("{}/#/runs?status=failed&since=24h", url), "document.querySelector('#run-search') && document.querySelector('table.runs tbody a')").await;
                b.fits_width(&format!("{}/#/tasks?q=fla", url), "document.querySelector('.recent[data-task=flaky] a')").await;
                b.fits_width(&format!("{}/#/plugins", url), "document.querySelector('#plugins tbody td')").await;
                b.fits_width(&format!("{}/#/dead-letters", url), "document.querySelector('main table tbody td')").await;
                b.fits_width(&format!("{}/#/alerts", url), "document.querySelector('main table')").await;
                b.fits_width(&format!("{}/#/tenants", url), "document.querySelector('#tenants tbody td')").await;
                b.fits_width(&format!("{}/#/tenants/default", url), "document.querySelector('#usage-by-task tbody td')").await;
                b.fits_width(&format!("{}/#/signin", url), "document.querySelector('#signin')").await;
                b.client.set_window_size(1280, 1000).await.unwrap();

                // The admin's tenant pages; acting as another tenant.
                b.goto(&format!("{}/#/tenants/default", url)).await;
                b.wait_for("default's usage", "document.querySelector('#usage-by-task')?.textContent.includes('greet')", long)
                    .await;
                b.shot("08-tenant-usage").await;
                // A usage row links to its task.
                b.click("#usage-by-task a[href='#/tasks/greet']").await;
                b.wait_for(
                    "greet's task page from its usage row",
                    "location.hash === '#/tasks/greet' && document.querySelector('button[data-action=run][data-task=greet]')",
                    long,
                )
                .await;
                // The quota reads as a table of limits, not as JSON.
                b.goto(&format!("{}/#/tenants/acme", url)).await;
                let quota = b
                    .wait_for(
                        "acme's quota table",
                        "document.querySelector('#quota tbody') && [...document.querySelectorAll('#quota tbody tr')].map(r => [...r.cells].map(c => c.textContent).join(' | '))",
                        long,
                    )
                    .await;
                assert!(
                    quota.as_array().unwrap().iter().any(|r| r == &json!("fuel per window | 1.0G | fuel_per_window")),
                    "{quota}"
                );
                let raw = b
                    .client
                    .execute("return document.querySelectorAll('main pre.json').length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(raw, json!(0), "the quota is shown as raw JSON");
                b.goto(&format!("{}/#/tenants", url)).await;
                b.wait_for(
                    "the tenant list",
                    "document.querySelector('button[data-tenant=acme]') && document.querySelector('#tenants').textContent.includes('default')",
                    long,
                )
                .await;
                b.shot("07-tenants").await;
                b.click("button[data-tenant=acme]").await;
                b.wait_for(
                    "acme's (empty) task list",
                    "document.querySelector('#tasks td.empty') && document.querySelector('#who').textContent.includes('tenant acme')",
                    long,
                )
                .await;

                // Signing out forgets the token.
                b.click("#signout").await;
                b.wait_for("the sign-in form again", "document.querySelector('#signin')", long).await;
                let stored = b
                    .client
                    .execute("return sessionStorage.length;", vec![])
                    .await
                    .unwrap();
                assert_eq!(stored, json!(0));

                // A tenant token sees its own tenant and no admin pages.
                b.client.find(Locator::Css("#token")).await.unwrap().send_keys(&acme_token).await.unwrap();
                b.click("#signin button[type=submit]").await;
                b.wait_for(
                    "the tenant's task list",
                    "document.querySelector('#tasks') && document.querySelector('#who').textContent.includes('tenant token')",
                    long,
                )
                .await;
                let admin_link = b
                    .client
                    .execute("return document.querySelector('#nav-tenants').hidden;", vec![])
                    .await
                    .unwrap();
                assert_eq!(admin_link, json!(true), "a tenant token sees no Tenants page");
            })
            .await;
            let _ = session.close().await;
            if let Err(failed) = steps {
                std::panic::resume_unwind(failed.into_panic());
            }
        });
}
