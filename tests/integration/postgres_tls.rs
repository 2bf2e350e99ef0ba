//! ax on a PostgreSQL server that accepts TLS connections only (its own
//! cluster, `AX_POSTGRES_SSL=on scripts/postgres start`): the URL's
//! `sslmode` and `sslrootcert` (libpq's words) decide, through the real
//! `ax` binary (`ax store migrate --dry-run`, which opens the store's pool
//! as `ax serve` does). A plain connection is refused by the server, so
//! every success here went over TLS; a certificate that does not chain to
//! the trusted CA is one clear error line; a role the server admits by
//! client certificate only connects with `sslcert` and `sslkey`.

use std::process::Command;

use crate::postgres_restart::Cluster;

/// `ax store migrate --dry-run --store URL`: whether it succeeded, and what
/// it printed.
fn open(url: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(["store", "migrate", "--dry-run", "--store", url])
        .output()
        .expect("ax runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn sslmode_sslrootcert_and_a_client_certificate_decide_how_ax_connects() {
    if !crate::common::postgres_server_named() {
        return;
    }
    let cluster = Cluster::start_tls();
    let url = &cluster.url;
    let ca = cluster.tls_file("ca.pem");
    let other = cluster.tls_file("other-ca.pem");
    let (ca, other) = (ca.display(), other.display());

    // The server refuses plain connections.
    let (ok, out) = open(&format!("{url}?sslmode=disable"));
    assert!(!ok && out.contains("no encryption"), "{out}");

    // prefer (the default), require, verify-full with the CA, and require
    // with the CA (verify-ca): all over TLS.
    for query in [
        String::new(),
        "?sslmode=prefer".to_string(),
        "?sslmode=require".to_string(),
        format!("?sslmode=verify-full&sslrootcert={ca}"),
        format!("?sslmode=verify-ca&sslrootcert={ca}"),
        format!("?sslmode=require&sslrootcert={ca}"),
    ] {
        let (ok, out) = open(&format!("{url}{query}"));
        assert!(ok, "{query}: {out}");
        assert!(out.contains("migration(s) would run"), "{query}: {out}");
    }

    // A certificate that does not chain to what is trusted: one line that
    // says so, exit 1.
    for query in [
        format!("?sslmode=verify-full&sslrootcert={other}"),
        // Without sslrootcert: the public CAs, which did not sign it.
        "?sslmode=verify-full".to_string(),
    ] {
        let (ok, out) = open(&format!("{url}{query}"));
        assert!(!ok, "{query}: {out}");
        assert!(out.contains("UnknownIssuer"), "{query}: {out}");
        assert_eq!(out.trim().lines().count(), 1, "{query}: {out}");
    }

    // The role `certuser` gets in by a client certificate of the test CA
    // alone (`cert` in pg_hba.conf): with sslcert and sslkey it connects,
    // without them the server refuses it, in one line.
    let as_certuser = url.replacen("ax@", "certuser@", 1);
    let (cert, key) = (
        cluster.tls_file("client.pem"),
        cluster.tls_file("client.key"),
    );
    let (cert, key) = (cert.display(), key.display());
    let (ok, out) = open(&format!(
        "{as_certuser}?sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"
    ));
    assert!(ok && out.contains("migration(s) would run"), "{out}");
    let (ok, out) = open(&format!(
        "{as_certuser}?sslmode=verify-full&sslrootcert={ca}"
    ));
    assert!(!ok && out.contains("certificate"), "{out}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    let (ok, out) = open(&format!("{as_certuser}?sslcert={cert}"));
    assert!(
        !ok && out.contains("sslcert and sslkey go together"),
        "{out}"
    );

    // Words libpq has that ax refuses, and a root file that is not there.
    let (ok, out) = open(&format!("{url}?sslmode=allow"));
    assert!(
        !ok && out.contains("sslmode=allow is not supported"),
        "{out}"
    );
    let (ok, out) = open(&format!(
        "{url}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"
    ));
    assert!(!ok && out.contains("/nonexistent/ca.pem"), "{out}");
}
