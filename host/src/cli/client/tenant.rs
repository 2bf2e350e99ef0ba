//! `ax tenant …`: the admin's tenant commands over `/v1/tenants` (SPEC §6, §8).
//!
//! `ax tenant quota NAME --flag …` changes only the limits it names (the
//! current quota is read and the flags merged in); `--unset FIELD` removes a
//! limit. A token is printed once, when created.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::http::{Body, Client, enc, query};
use super::output::{cell, items, print_json, table};
use super::{Conn, Failure, Outcome, done};

#[derive(Debug, Args)]
pub(in crate::cli) struct TenantArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: TenantCommand,
}

#[derive(Debug, Subcommand)]
enum TenantCommand {
    /// Create a tenant (optionally with its quota).
    Create {
        /// Tenant name.
        name: String,
        /// A note for people.
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        quota: QuotaFlags,
    },
    /// List tenants.
    List,
    /// Show a tenant, its quota and whether its runs are held.
    Show {
        /// Tenant name.
        name: String,
    },
    /// Change a tenant's quota: only the limits named change.
    Quota {
        /// Tenant name.
        name: String,
        #[command(flatten)]
        quota: QuotaFlags,
        /// Remove a limit (e.g. `--unset fuel_per_window`); repeatable.
        #[arg(long)]
        unset: Vec<String>,
    },
    /// Disable a tenant: its tokens are refused, triggers refused, fires skipped.
    Disable {
        /// Tenant name.
        name: String,
    },
    /// Enable a disabled tenant.
    Enable {
        /// Tenant name.
        name: String,
    },
    /// Create, list and revoke a tenant's tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Fuel, attempts, wall time and outcomes, per task and per day.
    Usage {
        /// Tenant name.
        name: String,
        /// From (RFC 3339 or YYYY-MM-DD; default: the current fuel window).
        #[arg(long)]
        from: Option<String>,
        /// To, exclusive (RFC 3339 or YYYY-MM-DD).
        #[arg(long)]
        to: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create a token; it is printed this once.
    Create {
        /// Tenant name.
        tenant: String,
        /// A note for people ("ci", "alice's laptop").
        #[arg(long)]
        label: Option<String>,
    },
    /// List a tenant's tokens (ids and labels; never secrets).
    List {
        /// Tenant name.
        tenant: String,
    },
    /// Revoke a token.
    Revoke {
        /// Tenant name.
        tenant: String,
        /// Token id.
        id: String,
    },
}

/// Quota limits as flags (names as in the API's quota object).
#[derive(Debug, Default, Args)]
struct QuotaFlags {
    /// Fuel all attempts together may use per window.
    #[arg(long)]
    fuel_per_window: Option<u64>,
    /// The fuel window: whole hours (`1h`, `1d`), aligned to UTC.
    #[arg(long)]
    window: Option<String>,
    /// Wall-clock ms all attempts together may take per window (blocked time included).
    #[arg(long)]
    wall_ms_per_window: Option<u64>,
    /// Most fuel one attempt may get.
    #[arg(long)]
    max_fuel_per_attempt: Option<u64>,
    /// Most memory one attempt may get (MiB).
    #[arg(long)]
    max_memory_mb: Option<u64>,
    /// Longest timeout of one attempt (`30s`, `5m`).
    #[arg(long)]
    max_timeout: Option<String>,
    /// Attempts running at once (default: half the host's slots).
    #[arg(long)]
    max_concurrent_attempts: Option<u32>,
    /// Highest priority its runs may have, 0-9 (default: 6, below the reserved share).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=9))]
    max_priority: Option<u8>,
    /// Runs waiting to start.
    #[arg(long)]
    max_queued_runs: Option<u32>,
    /// Manual triggers per second.
    #[arg(long)]
    trigger_rate_per_sec: Option<f64>,
    /// What happens once the window's fuel is used: hold or refuse.
    #[arg(long, value_parser = ["hold", "refuse"])]
    out_of_fuel: Option<String>,
    /// Share of the host under contention (1-100).
    #[arg(long)]
    weight: Option<u32>,
    /// Bytes of key-value data.
    #[arg(long)]
    kv_bytes: Option<u64>,

    // Plugin storage.
    /// Plugin versions the tenant may keep (host default 100).
    #[arg(long)]
    max_plugins: Option<u32>,
    /// Bytes of plugin versions the tenant may keep (host default 512 MiB).
    #[arg(long)]
    plugin_bytes: Option<u64>,

    // Run data.
    /// Bytes of run data (records, events, logs) the tenant may keep (default 1 GiB).
    #[arg(long)]
    run_bytes: Option<u64>,
    /// Largest input of one run, bytes of JSON (default 64 KiB).
    #[arg(long)]
    max_input_bytes: Option<u64>,
}

impl QuotaFlags {
    /// The flags given, as quota fields.
    fn fields(&self) -> Map<String, Value> {
        let pairs = [
            ("fuel_per_window", self.fuel_per_window.map(Value::from)),
            ("window", self.window.clone().map(Value::from)),
            (
                "wall_ms_per_window",
                self.wall_ms_per_window.map(Value::from),
            ),
            (
                "max_fuel_per_attempt",
                self.max_fuel_per_attempt.map(Value::from),
            ),
            ("max_memory_mb", self.max_memory_mb.map(Value::from)),
            ("max_timeout", self.max_timeout.clone().map(Value::from)),
            (
                "max_concurrent_attempts",
                self.max_concurrent_attempts.map(Value::from),
            ),
            ("max_priority", self.max_priority.map(Value::from)),
            ("max_queued_runs", self.max_queued_runs.map(Value::from)),
            (
                "trigger_rate_per_sec",
                self.trigger_rate_per_sec.map(Value::from),
            ),
            ("out_of_fuel", self.out_of_fuel.clone().map(Value::from)),
            ("weight", self.weight.map(Value::from)),
            ("kv_bytes", self.kv_bytes.map(Value::from)),
            // Plugin storage.
            ("max_plugins", self.max_plugins.map(Value::from)),
            ("plugin_bytes", self.plugin_bytes.map(Value::from)),
            // Run data.
            ("run_bytes", self.run_bytes.map(Value::from)),
            ("max_input_bytes", self.max_input_bytes.map(Value::from)),
        ];
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect()
    }
}

fn limit(v: &Value) -> String {
    if v.is_null() { "-".into() } else { cell(v) }
}

fn print_tenant(t: &Value) {
    println!("tenant:      {}", cell(&t["name"]));
    if !t["description"].is_null() {
        println!("description: {}", cell(&t["description"]));
    }
    let state = if t["disabled"] == true {
        "disabled"
    } else {
        "enabled"
    };
    println!("state:       {state}");
    if t["held"].is_string() {
        println!("held:        {}", cell(&t["held"]));
    }
    println!("quota:");
    if let Some(q) = t["quota"].as_object() {
        for (k, v) in q {
            println!("  {k:<24} {}", limit(v));
        }
    }
    let http: Vec<String> = items(&t["allow_http"]).map(cell).collect();
    if !http.is_empty() {
        println!("allow_http:  {}", http.join(", "));
    }
    if t["storage"].is_object() {
        print_storage(&t["storage"]);
    }
}

/// What a tenant keeps against its storage quotas (`storage` of a tenant
/// or of its usage report).
fn print_storage(s: &Value) {
    let bytes = |v: &Value| {
        v.as_u64()
            .map_or_else(|| "-".into(), crate::model::show_bytes)
    };
    println!("storage:");
    println!(
        "  {:<24} {} of {}",
        "run data",
        bytes(&s["run_bytes"]),
        bytes(&s["run_bytes_quota"])
    );
    println!(
        "  {:<24} {}",
        "largest run input",
        bytes(&s["max_input_bytes"])
    );
    println!(
        "  {:<24} {} versions of {}, {} of {}",
        "plugins",
        cell(&s["plugins"]),
        cell(&s["max_plugins"]),
        bytes(&s["plugin_bytes"]),
        bytes(&s["plugin_bytes_quota"])
    );
    let kv_quota = if s["kv_bytes_quota"].is_null() {
        "the host's kv_quota_kb".to_string()
    } else {
        bytes(&s["kv_bytes_quota"])
    };
    println!(
        "  {:<24} {} of {kv_quota}",
        "key-value data",
        bytes(&s["kv_bytes"])
    );
}

pub(in crate::cli) fn tenant(args: TenantArgs) -> Outcome {
    let client = Client::new(&args.conn);
    let json = args.conn.json;
    let show = |v: &Value| {
        if json { print_json(v) } else { print_tenant(v) }
    };
    match args.command {
        TenantCommand::Create {
            name,
            description,
            quota,
        } => {
            let mut body = json!({ "name": name });
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            let fields = quota.fields();
            if !fields.is_empty() {
                body["quota"] = Value::Object(fields);
            }
            let (_, v) = client.post("/v1/tenants", Body::Json(body))?;
            show(&v);
        }
        TenantCommand::List => {
            let v = client.get("/v1/tenants")?;
            if json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["tenants"])
                    .map(|t| {
                        let q = &t["quota"];
                        vec![
                            cell(&t["name"]),
                            if t["disabled"] == true {
                                "disabled"
                            } else {
                                "enabled"
                            }
                            .into(),
                            limit(&q["fuel_per_window"]),
                            cell(&q["window"]),
                            limit(&q["max_concurrent_attempts"]),
                            cell(&q["weight"]),
                            t["held"].as_str().unwrap_or("-").to_string(),
                        ]
                    })
                    .collect();
                print!(
                    "{}",
                    table(
                        &[
                            "TENANT",
                            "STATE",
                            "FUEL/WINDOW",
                            "WINDOW",
                            "CONCURRENT",
                            "WEIGHT",
                            "HELD"
                        ],
                        &rows
                    )
                );
            }
        }
        TenantCommand::Show { name } => show(&client.get(&format!("/v1/tenants/{}", enc(&name)))?),
        TenantCommand::Quota { name, quota, unset } => {
            let current = client.get(&format!("/v1/tenants/{}", enc(&name)))?;
            let mut q = current["quota"].as_object().cloned().unwrap_or_default();
            for field in &unset {
                if q.remove(field).is_none() {
                    return Err(Failure::new(
                        "bad_request",
                        format!("`{field}` is not a quota field; see `ax tenant show {name}`"),
                    ));
                }
            }
            q.extend(quota.fields());
            let (_, v) = client.call(
                "PUT",
                &format!("/v1/tenants/{}/quota", enc(&name)),
                Body::Json(Value::Object(q)),
            )?;
            show(&v);
        }
        TenantCommand::Disable { name } => {
            let (_, v) = client.post(&format!("/v1/tenants/{}/disable", enc(&name)), Body::None)?;
            show(&v);
        }
        TenantCommand::Enable { name } => {
            let (_, v) = client.post(&format!("/v1/tenants/{}/enable", enc(&name)), Body::None)?;
            show(&v);
        }
        TenantCommand::Token(command) => return token(&client, json, command),
        TenantCommand::Usage { name, from, to } => {
            let v = client.get(&format!(
                "/v1/tenants/{}/usage{}",
                enc(&name),
                query(&[("from", from), ("to", to)])
            ))?;
            if json {
                print_json(&v);
            } else {
                print_usage(&v);
            }
        }
    }
    done()
}

fn usage_row(label: &str, u: &Value) -> Vec<String> {
    vec![
        label.to_string(),
        cell(&u["fuel"]),
        cell(&u["attempts"]),
        format!("{:.0}", u["wall_ms"].as_f64().unwrap_or(0.0)),
        u["outcomes"]
            .as_object()
            .map(|o| {
                o.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default(),
    ]
}

fn print_usage(v: &Value) {
    println!(
        "tenant {} from {} to {}",
        cell(&v["tenant"]),
        cell(&v["from"]),
        cell(&v["to"])
    );
    let w = &v["window"];
    let of = |budget: &Value| {
        if budget.is_null() {
            "unlimited".into()
        } else {
            cell(budget)
        }
    };
    println!(
        "window {} .. {}: {} of {} fuel used, {:.0} of {} wall ms",
        cell(&w["start"]),
        cell(&w["end"]),
        cell(&w["fuel_used"]),
        of(&w["fuel_budget"]),
        w["wall_ms_used"].as_f64().unwrap_or(0.0),
        of(&w["wall_ms_budget"]),
    );
    if w["held"].is_string() {
        println!("{}", cell(&w["held"]));
    }
    let headers = ["", "FUEL", "ATTEMPTS", "WALL_MS", "OUTCOMES"];
    let mut rows = vec![usage_row("total", &v["total"])];
    if let Some(tasks) = v["by_task"].as_object() {
        rows.extend(
            tasks
                .iter()
                .map(|(k, u)| usage_row(&format!("task {k}"), u)),
        );
    }
    if let Some(days) = v["by_day"].as_object() {
        rows.extend(days.iter().map(|(k, u)| usage_row(&format!("day {k}"), u)));
    }
    print!("{}", table(&headers, &rows));
    if v["storage"].is_object() {
        print_storage(&v["storage"]);
    }
}

fn token(client: &Client, json: bool, command: TokenCommand) -> Outcome {
    match command {
        TokenCommand::Create { tenant, label } => {
            let body = match label {
                Some(l) => Body::Json(json!({ "label": l })),
                None => Body::None,
            };
            let (_, v) = client.post(&format!("/v1/tenants/{}/tokens", enc(&tenant)), body)?;
            if json {
                print_json(&v);
            } else {
                println!(
                    "token {} for tenant {} (shown only now; keep it safe):",
                    cell(&v["id"]),
                    cell(&v["tenant"])
                );
                println!("{}", cell(&v["token"]));
            }
        }
        TokenCommand::List { tenant } => {
            let v = client.get(&format!("/v1/tenants/{}/tokens", enc(&tenant)))?;
            if json {
                print_json(&v);
            } else {
                let rows: Vec<Vec<String>> = items(&v["tokens"])
                    .map(|t| {
                        vec![
                            cell(&t["id"]),
                            cell(&t["label"]),
                            cell(&t["created_at"]),
                            cell(&t["revoked_at"]),
                        ]
                    })
                    .collect();
                print!("{}", table(&["ID", "LABEL", "CREATED", "REVOKED"], &rows));
            }
        }
        TokenCommand::Revoke { tenant, id } => {
            client.call(
                "DELETE",
                &format!("/v1/tenants/{}/tokens/{}", enc(&tenant), enc(&id)),
                Body::None,
            )?;
            if json {
                print_json(&json!({ "revoked": id }));
            } else {
                println!("token {id} of tenant {tenant} revoked");
            }
        }
    }
    done()
}
