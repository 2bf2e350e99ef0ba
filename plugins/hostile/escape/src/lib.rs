//! Hostile: tries to leave the sandbox — read `/etc/passwd`, list `/`, read the
//! environment, write a file, open a TCP socket, resolve a name — and reports
//! what each attempt got. Every one must be refused.
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde::Deserialize;
use serde_json::{Value, json};
use wasi::sockets::network::{IpAddress, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress};

#[derive(Deserialize)]
struct Input {
    /// A host path the plugin tries to create.
    #[serde(default = "default_write_path")]
    write_path: String,
}

fn default_write_path() -> String {
    "/tmp/ax-escape-marker".into()
}

fn attempt(result: std::result::Result<String, String>) -> Value {
    match result {
        Ok(detail) => json!({ "ok": true, "detail": detail }),
        Err(detail) => json!({ "ok": false, "detail": detail }),
    }
}

fn tcp_connect() -> std::result::Result<String, String> {
    let network = wasi::sockets::instance_network::instance_network();
    let socket = wasi::sockets::tcp_create_socket::create_tcp_socket(IpAddressFamily::Ipv4)
        .map_err(|e| format!("create: {e:?}"))?;
    let addr = IpSocketAddress::Ipv4(Ipv4SocketAddress {
        port: 22,
        address: (127, 0, 0, 1),
    });
    socket
        .start_connect(&network, addr)
        .map_err(|e| format!("connect: {e:?}"))?;
    socket.subscribe().block();
    socket
        .finish_connect()
        .map(|_| "connected".to_string())
        .map_err(|e| format!("connect: {e:?}"))
}

fn resolve() -> std::result::Result<String, String> {
    let network = wasi::sockets::instance_network::instance_network();
    let stream = wasi::sockets::ip_name_lookup::resolve_addresses(&network, "localhost")
        .map_err(|e| format!("resolve: {e:?}"))?;
    stream.subscribe().block();
    match stream.resolve_next_address() {
        Ok(Some(IpAddress::Ipv4(a))) => Ok(format!("{a:?}")),
        Ok(other) => Ok(format!("{other:?}")),
        Err(e) => Err(format!("resolve: {e:?}")),
    }
}

fn run(_ctx: Context, input: Input) -> Result<Value> {
    let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(json!({
        "read_passwd": attempt(std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())),
        "list_root": attempt(
            std::fs::read_dir("/")
                .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().display().to_string()).collect::<Vec<_>>().join(","))
                .map_err(|e| e.to_string())
        ),
        "write_file": attempt(std::fs::write(&input.write_path, b"escaped").map(|_| "written".into()).map_err(|e| e.to_string())),
        "env": env,
        "args": std::env::args().collect::<Vec<_>>(),
        "tcp_connect": attempt(tcp_connect()),
        "resolve": attempt(resolve()),
    }))
}

export_plugin!(run);
