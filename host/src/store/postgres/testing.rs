//! A scratch database per test, on the server `AX_TEST_POSTGRES` names
//! (`scripts/test` starts one on a free loopback port: `scripts/postgres`).
//!
//! Without that variable a test that needs PostgreSQL is skipped with a
//! line on stderr, except under `AX_CI=1`, where it fails: CI installs and
//! starts the server, so a missing one is a broken CI, not a skip.

use super::pool::{Pool, block, error};

/// The variable naming the test server: a URL whose user may create
/// databases.
pub const SERVER_VAR: &str = "AX_TEST_POSTGRES";

/// A database created for one test and dropped when this is.
pub struct TestDatabase {
    server: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database, or `None` (after saying why) when no test
    /// server is configured outside CI.
    pub fn create() -> Option<TestDatabase> {
        let Ok(server) = std::env::var(SERVER_VAR) else {
            assert!(
                std::env::var("AX_CI").as_deref() != Ok("1"),
                "{SERVER_VAR} is not set: scripts/test starts a PostgreSQL server and sets it"
            );
            eprintln!("skipped: {SERVER_VAR} is not set (scripts/test sets it)");
            return None;
        };
        Some(Self::on(&server).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Creates an empty database on `server` (a URL whose user may create
    /// databases): a test's, or a benchmark's (`ax bench … --store`).
    pub fn on(server: &str) -> crate::store::Result<TestDatabase> {
        let name = format!("ax_test_{:016x}", rand::random::<u64>());
        try_admin(server, &format!("CREATE DATABASE {name}"))?;
        let url = with_database(server, &name);
        Ok(TestDatabase {
            server: server.to_string(),
            name,
            url,
        })
    }

    /// The scratch database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        admin(
            &self.server,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// A [`PgStore`](super::PgStore) on a scratch database, for the store
/// conformance suite (`store_conformance_suite!`): its tests need the test
/// server, and fail without one ("set AX_TEST_POSTGRES": `scripts/test`
/// starts one).
#[cfg(any(test, feature = "conformance"))]
pub fn fixture(scan_limit: usize) -> crate::store::conformance::Fixture<super::PgStore> {
    let scratch = std::env::var(SERVER_VAR)
        .ok()
        .and_then(|_| TestDatabase::create())
        .unwrap_or_else(|| {
            panic!("{SERVER_VAR} is not set: run the tests with scripts/test, which starts a PostgreSQL server")
        });
    let store = super::PgStore::open(scratch.url(), 4)
        .expect("the scratch database opens")
        .with_scan_limit(scan_limit);
    (store, Box::new(scratch))
}

/// Runs one statement on the server's own database.
fn admin(server: &str, sql: &str) {
    try_admin(server, sql).unwrap_or_else(|e| panic!("{e}"));
}

/// [`admin`], failing with what went wrong.
fn try_admin(server: &str, sql: &str) -> crate::store::Result<()> {
    let pool = Pool::connect(server, 1)?;
    let conn = pool.get()?;
    block(conn.batch_execute(sql))
        .map_err(|e| error(pool.shown(), &e))
        .map_err(|e| crate::store::Error::Backend(format!("{sql}: {e}")))
}

/// `server` (a URL) with its database replaced by `name`.
pub fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (server, String::new()),
    };
    let rest = base.split_once("://").map_or(base, |(_, r)| r);
    let host_end = rest
        .find('/')
        .map_or(base.len(), |i| base.len() - rest.len() + i);
    format!("{}/{name}{query}", &base[..host_end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_of_a_url_is_replaced() {
        assert_eq!(
            with_database("postgres://ax@127.0.0.1:5433/postgres", "t1"),
            "postgres://ax@127.0.0.1:5433/t1"
        );
        assert_eq!(
            with_database("postgres://ax@127.0.0.1:5433", "t1"),
            "postgres://ax@127.0.0.1:5433/t1"
        );
        assert_eq!(
            with_database("postgres://ax@h/postgres?sslmode=disable", "t1"),
            "postgres://ax@h/t1?sslmode=disable"
        );
    }
}
