//! The `ax tenant` commands against a real `ax serve`; tenants, tokens and
//! quotas survive a restart.

use serde_json::Value;

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
    // Under `AX_TEST_STORE=postgres`, one database for both servers.
    let scratch = crate::common::scratch_database();
    let store = scratch
        .as_ref()
        .map(|db| std::ffi::OsString::from(db.url()));
    let args: Vec<&std::ffi::OsStr> = match &store {
        Some(url) => vec![std::ffi::OsStr::new("--store"), url.as_os_str()],
        None => Vec::new(),
    };
    let server = AxProcess::start_with(dir.path(), &args);
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
    let server = AxProcess::start_with(dir.path(), &args);
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
