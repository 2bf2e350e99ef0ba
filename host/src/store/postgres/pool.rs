//! Connections to PostgreSQL behind a synchronous seam.
//!
//! The [`Store`](crate::store::Store) seam is synchronous and is called
//! from async tasks (as sled is: a call takes microseconds). A PostgreSQL
//! call waits for a round trip, so it needs a bridge, and two common ones
//! do not work here:
//! - the `postgres` crate blocks on a runtime of its own inside every call,
//!   which panics on a thread that drives tokio tasks ("Cannot start a
//!   runtime from within a runtime");
//! - `tokio::runtime::Handle::block_on` from such a thread panics the same
//!   way, and `block_in_place` exists only on the multi-threaded runtime.
//!
//! What does: each connection's I/O (its `Connection` future) runs on a
//! small runtime owned by the [`Pool`], and a call awaits its `Client`
//! future with `futures_executor::block_on` on the caller's thread. A
//! client's futures only pass messages to its connection over channels, so
//! they need no reactor; the caller's thread is blocked for the round trip,
//! as a sled call blocks it for a page read. Connecting needs the reactor,
//! so it is spawned on the pool's runtime and its handle awaited.
//!
//! The pool is a few connections (`size`, default [`DEFAULT_SIZE`]): a
//! caller takes one ([`Pool::get`]), uses it, and gives it back when the
//! [`Conn`] drops. A connection whose server went away is dropped and a
//! new one opened by the next taker; while none can be opened, every call
//! fails with [`Error::Unavailable`] (the API's 503 `store_unavailable`).
//!
//! The pool counts what `/metrics` and `/readyz` show of it
//! ([`Pool::health`]): connections open and taken, connections that could
//! not be opened or were found broken, and how long each call held (or
//! waited for) a connection.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::statements::Statements;
use super::tls::Tls;

use crate::metrics::{Histogram, STORE_CALL_BUCKETS};
use crate::store::{Error, PoolHealth, Result};

/// Connections a pool opens at most, unless told otherwise.
pub const DEFAULT_SIZE: usize = 8;

/// How long a caller waits for a free connection before the call fails as
/// unavailable.
const CHECKOUT_WAIT: Duration = Duration::from_secs(30);

/// How long opening one connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A few connections to one database.
pub struct Pool {
    /// Drives the connections' I/O; `None` once dropped (see `Drop`).
    runtime: Option<tokio::runtime::Runtime>,
    config: Config,
    /// TLS as the URL's `sslmode` asks (`tls.rs`).
    tls: MakeRustlsConnect,
    /// The URL as shown in messages: without its password.
    shown: String,
    size: usize,
    state: Mutex<Slots>,
    freed: Condvar,
    /// Connections that could not be opened or were found closed.
    connection_errors: AtomicU64,
    /// Statements the store's calls ran ([`Statements::ran`]).
    statements_run: Arc<AtomicU64>,
    /// Each checkout, from asking to giving back (shared with the health
    /// reports, which are read at scrape time).
    calls: Arc<Histogram>,
}

struct Slots {
    idle: Vec<(Client, Arc<Statements>)>,
    /// Connections taken or idle.
    open: usize,
}

/// A connection taken from a [`Pool`]; given back when dropped.
pub struct Conn<'a> {
    pool: &'a Pool,
    client: Option<Client>,
    /// The statements prepared on this connection.
    statements: Arc<Statements>,
    /// When the caller asked for it (the wait for a free one is part of
    /// the call's latency).
    asked: Instant,
    /// A call on it failed as the connection ending ([`ends_connection`]):
    /// dropped rather than given back, whether or not the client has
    /// noticed yet that its connection task ended.
    broken: bool,
}

impl Conn<'_> {
    /// The statements prepared on this connection, kept with it.
    pub fn statements(&self) -> Arc<Statements> {
        self.statements.clone()
    }

    /// Marks the connection broken when `e` says it ended (see
    /// [`ends_connection`]), so it is not given back to the pool.
    pub fn note(&mut self, e: &tokio_postgres::Error) {
        self.broken |= ends_connection(e);
    }
}

impl std::ops::Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("held until dropped")
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        let mut slots = self.pool.state.lock().unwrap_or_else(|p| p.into_inner());
        match self.client.take() {
            Some(client) if !self.broken && !client.is_closed() => {
                slots.idle.push((client, self.statements.clone()));
            }
            Some(_) => {
                // The server went away during or before the call.
                slots.open -= 1;
                self.pool.connection_errors.fetch_add(1, Ordering::Relaxed);
            }
            // Opening it failed (counted there).
            None => slots.open -= 1,
        }
        drop(slots);
        self.pool.freed.notify_one();
        self.pool.calls.observe(self.asked.elapsed().as_secs_f64());
    }
}

impl Pool {
    /// Connects to `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, or
    /// key=value pairs) with at most `size` connections, and opens one now:
    /// a wrong URL, host or password is reported here, as one clear error.
    pub fn connect(url: &str, size: usize) -> Result<Pool> {
        let shown = shown(url);
        let not_a_url = |reason: String| Error::Unusable {
            path: shown.clone(),
            reason,
            hint: "write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE[?sslmode=verify-full]"
                .into(),
        };
        let (rest, tls) = Tls::split(url).map_err(&not_a_url)?;
        let mut config: Config = rest
            .parse()
            .map_err(|e| not_a_url(format!("not a PostgreSQL URL: {e}")))?;
        config.ssl_mode(tls.ssl_mode());
        let tls = tls.connector().map_err(&not_a_url)?;
        config.connect_timeout(CONNECT_TIMEOUT);
        config.application_name("ax");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ax-postgres")
            .enable_all()
            .build()?;
        let pool = Pool {
            runtime: Some(runtime),
            config,
            tls,
            shown,
            size: size.max(1),
            state: Mutex::new(Slots {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
            connection_errors: AtomicU64::new(0),
            statements_run: Arc::default(),
            calls: Arc::new(Histogram::new(STORE_CALL_BUCKETS)),
        };
        let first = pool.open().map_err(|reason| Error::Unusable {
            path: pool.shown.clone(),
            reason,
            hint: "check the URL, that the server runs and that the user may connect".into(),
        })?;
        let mut slots = pool.lock();
        slots.idle.push((first, pool.fresh_statements()));
        slots.open = 1;
        drop(slots);
        Ok(pool)
    }

    /// The database's URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The pool's use now and since it was made.
    pub fn health(&self) -> PoolHealth {
        let slots = self.lock();
        PoolHealth {
            open: slots.open,
            in_use: slots.open.saturating_sub(slots.idle.len()),
            max: self.size,
            connection_errors: self.connection_errors.load(Ordering::Relaxed),
            statements: self.statements_run.load(Ordering::Relaxed),
            calls: self.calls.clone(),
        }
    }

    /// Statements the store's calls ran on this pool's connections so far.
    pub fn statements_run(&self) -> u64 {
        self.statements_run.load(Ordering::Relaxed)
    }

    /// What a new connection's prepared statements start from.
    fn fresh_statements(&self) -> Arc<Statements> {
        Arc::new(Statements::counting(self.statements_run.clone()))
    }

    /// Takes a connection: an idle one, else a new one while fewer than
    /// `size` are open, else waits for one to be given back.
    pub fn get(&self) -> Result<Conn<'_>> {
        let asked = Instant::now();
        let deadline = asked + CHECKOUT_WAIT;
        let mut slots = self.lock();
        loop {
            if let Some((client, statements)) = slots.idle.pop() {
                if client.is_closed() {
                    // Its server went away while it was idle.
                    slots.open -= 1;
                    self.connection_errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                return Ok(Conn {
                    pool: self,
                    client: Some(client),
                    statements,
                    asked,
                    broken: false,
                });
            }
            if slots.open < self.size {
                slots.open += 1;
                drop(slots);
                // The slot is counted before the connection exists, so a
                // failure must give it back.
                let mut conn = Conn {
                    pool: self,
                    client: None,
                    statements: self.fresh_statements(),
                    asked,
                    broken: false,
                };
                let client = self.open().map_err(|reason| {
                    self.connection_errors.fetch_add(1, Ordering::Relaxed);
                    Error::Unavailable(format!("PostgreSQL at {}: {reason}", self.shown))
                })?;
                conn.client = Some(client);
                return Ok(conn);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Unavailable(format!(
                    "all {} connections to {} are busy",
                    self.size, self.shown
                )));
            }
            slots = self
                .freed
                .wait_timeout(slots, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Opens one connection, its I/O driven by the pool's runtime; the
    /// error is what went wrong, for a message.
    fn open(&self) -> std::result::Result<Client, String> {
        let config = self.config.clone();
        let tls = self.tls.clone();
        let shown = self.shown.clone();
        let task = self.runtime().spawn(async move {
            let (client, connection) = config.connect(tls).await?;
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(database = %shown, error = %e, "a PostgreSQL connection ended");
                }
            });
            Ok::<_, tokio_postgres::Error>(client)
        });
        match block(task) {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(describe(&e)),
            Err(e) => Err(e.to_string()),
        }
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("present until dropped")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Dropping a runtime waits for its tasks, which is refused on a
        // thread that drives async tasks; the connections end with it.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Awaits `future` on the calling thread (see the module's comment).
pub fn block<F: Future>(future: F) -> F::Output {
    futures_executor::block_on(future)
}

/// A driver error as the store's: a connection that is gone or cannot be
/// opened, a server shutting down or out of connections is
/// [`Error::Unavailable`] (the same call may succeed later); anything else
/// is [`Error::Backend`].
pub fn error(shown: &str, e: &tokio_postgres::Error) -> Error {
    let class = e.code().map(|c| &c.code()[..2]);
    let gone = e.is_closed()
        || matches!(class, Some("08" | "53" | "57"))
        || (e.code().is_none()
            && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()));
    if gone {
        unavailable(shown, e)
    } else {
        Error::Backend(describe(e))
    }
}

/// Whether `e` means the connection it came from is gone: closed, an I/O
/// error, a connection exception (class 08), or the server shutting down
/// or ending it (57P01 admin shutdown — also `pg_terminate_backend` —,
/// 57P02 crash shutdown, 57P03 cannot connect now). A full disk (53100) or
/// a cancelled statement (57014) leaves the connection usable.
pub fn ends_connection(e: &tokio_postgres::Error) -> bool {
    let code = e.code().map(|c| c.code());
    e.is_closed()
        || matches!(code, Some(c) if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03"))
        || (code.is_none()
            && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()))
}

fn unavailable(shown: &str, e: &tokio_postgres::Error) -> Error {
    Error::Unavailable(format!("PostgreSQL at {shown}: {}", describe(e)))
}

/// The server's message when there is one (the driver's own text is often
/// only "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

/// `url` without its password (`postgres://user:***@host/db`).
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // key=value pairs: hide the value of `password`.
        let pairs = url
            .split_whitespace()
            .map(|pair| match pair.split_once('=') {
                Some(("password", _)) => "password=***",
                _ => pair,
            });
        return pairs.collect::<Vec<_>>().join(" ");
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            shown("postgres://ax:s3cret@db:5432/ax"),
            "postgres://ax:***@db:5432/ax"
        );
        assert_eq!(shown("postgres://ax@db/ax"), "postgres://ax@db/ax");
        assert_eq!(shown("host=db user=ax"), "host=db user=ax");
        assert_eq!(
            shown("host=db password=s3cret user=ax"),
            "host=db password=*** user=ax"
        );
    }

    #[test]
    fn the_pool_counts_connections_taken_and_calls() {
        let Some(scratch) = super::super::testing::TestDatabase::create() else {
            return;
        };
        let pool = Pool::connect(scratch.url(), 3).expect("connects");
        let h = pool.health();
        assert_eq!((h.open, h.in_use, h.max, h.connection_errors), (1, 0, 3, 0));
        assert_eq!(h.calls.count(), 0);
        {
            let a = pool.get().expect("taken");
            let b = pool.get().expect("taken");
            block(a.simple_query("SELECT 1")).expect("answered");
            let h = pool.health();
            assert_eq!((h.open, h.in_use), (2, 2));
            drop(b);
            assert_eq!(pool.health().in_use, 1);
        }
        let h = pool.health();
        assert_eq!((h.open, h.in_use, h.connection_errors), (2, 0, 0));
        assert_eq!(h.calls.count(), 2, "one observation per checkout");
        assert!(h.calls.sum() > 0.0);
    }

    #[test]
    fn a_connection_the_server_ends_is_a_connection_error() {
        let Some(scratch) = super::super::testing::TestDatabase::create() else {
            return;
        };
        let db = super::super::Database::connect(scratch.url(), 1).expect("connects");
        let pid: i32 = db
            .with(async |c| Ok(c.query_one("SELECT pg_backend_pid()", &[]).await?.get(0)))
            .expect("answered");
        let other = Pool::connect(scratch.url(), 1).expect("connects");
        {
            let killer = other.get().expect("taken");
            // With a timeout, it returns once the backend has exited (not
            // only been signalled), so the next call cannot slip through.
            let ended: bool =
                block(killer.query_one("SELECT pg_terminate_backend($1, 10000)", &[&pid]))
                    .expect("ended")
                    .get(0);
            assert!(ended);
        }
        // The next call either finds the connection closed in the pool (the
        // client saw it end) and opens another, or fails as unavailable on
        // it and drops it (`Conn::note`): one connection error either way.
        let next = db.with(async |c| Ok(c.simple_query("SELECT 1").await?.len()));
        if let Err(e) = &next {
            assert!(e.is_unavailable(), "{e}");
        }
        assert_eq!(db.pool().health().connection_errors, 1);
        // The pool goes on with a new connection.
        db.with(async |c| Ok(c.simple_query("SELECT 1").await?.len()))
            .expect("answered");
        let h = db.pool().health();
        assert_eq!((h.open, h.in_use, h.connection_errors), (1, 0, 1));
    }

    #[test]
    fn a_call_whose_connection_ends_drops_it_and_a_cancelled_one_keeps_it() {
        let Some(scratch) = super::super::testing::TestDatabase::create() else {
            return;
        };
        let db = super::super::Database::connect(scratch.url(), 1).expect("connects");
        // A statement cancelled by its timeout (57014): the connection is
        // fine and goes back to the pool.
        let cancelled = db.with(async |c| {
            c.batch_execute("SET statement_timeout = 10").await?;
            Ok(c.simple_query("SELECT pg_sleep(5)").await?.len())
        });
        assert!(cancelled.is_err());
        let h = db.pool().health();
        assert_eq!((h.open, h.connection_errors), (1, 0));
        // The backend ends itself during the call (57P01): the connection
        // is dropped, not given back, and counted.
        let ended = db.with(async |c| {
            Ok(
                c.simple_query("SELECT pg_terminate_backend(pg_backend_pid())")
                    .await?
                    .len(),
            )
        });
        assert!(ended.is_err_and(|e| e.is_unavailable()));
        let h = db.pool().health();
        assert_eq!((h.open, h.in_use, h.connection_errors), (0, 0, 1));
    }

    #[test]
    fn a_malformed_url_is_one_clear_error() {
        let Err(e) = Pool::connect("postgres://ax@db:notaport/ax", 1) else {
            panic!("a bad port was accepted");
        };
        let text = e.to_string();
        assert!(text.contains("not a PostgreSQL URL"), "{text}");
    }
}
