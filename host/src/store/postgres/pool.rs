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

use std::future::Future;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

use crate::store::{Error, Result};

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
    /// The URL as shown in messages: without its password.
    shown: String,
    size: usize,
    state: Mutex<Slots>,
    freed: Condvar,
}

struct Slots {
    idle: Vec<Client>,
    /// Connections taken or idle.
    open: usize,
}

/// A connection taken from a [`Pool`]; given back when dropped.
pub struct Conn<'a> {
    pool: &'a Pool,
    client: Option<Client>,
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
            Some(client) if !client.is_closed() => slots.idle.push(client),
            _ => slots.open -= 1,
        }
        drop(slots);
        self.pool.freed.notify_one();
    }
}

impl Pool {
    /// Connects to `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/DB`, or
    /// key=value pairs) with at most `size` connections, and opens one now:
    /// a wrong URL, host or password is reported here, as one clear error.
    pub fn connect(url: &str, size: usize) -> Result<Pool> {
        let shown = shown(url);
        let mut config: Config = url.parse().map_err(|e| Error::Unusable {
            path: shown.clone(),
            reason: format!("not a PostgreSQL URL: {e}"),
            hint: "write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE".into(),
        })?;
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
            shown,
            size: size.max(1),
            state: Mutex::new(Slots {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        };
        let first = pool.open().map_err(|reason| Error::Unusable {
            path: pool.shown.clone(),
            reason,
            hint: "check the URL, that the server runs and that the user may connect".into(),
        })?;
        let mut slots = pool.lock();
        slots.idle.push(first);
        slots.open = 1;
        drop(slots);
        Ok(pool)
    }

    /// The database's URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Takes a connection: an idle one, else a new one while fewer than
    /// `size` are open, else waits for one to be given back.
    pub fn get(&self) -> Result<Conn<'_>> {
        let deadline = std::time::Instant::now() + CHECKOUT_WAIT;
        let mut slots = self.lock();
        loop {
            if let Some(client) = slots.idle.pop() {
                if client.is_closed() {
                    slots.open -= 1;
                    continue;
                }
                return Ok(Conn {
                    pool: self,
                    client: Some(client),
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
                };
                let client = self.open().map_err(|reason| {
                    Error::Unavailable(format!("PostgreSQL at {}: {reason}", self.shown))
                })?;
                conn.client = Some(client);
                return Ok(conn);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
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
        let shown = self.shown.clone();
        let task = self.runtime().spawn(async move {
            let (client, connection) = config.connect(NoTls).await?;
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
    fn a_malformed_url_is_one_clear_error() {
        let Err(e) = Pool::connect("postgres://ax@db:notaport/ax", 1) else {
            panic!("a bad port was accepted");
        };
        let text = e.to_string();
        assert!(text.contains("not a PostgreSQL URL"), "{text}");
    }
}
