//! Serving the router on a TCP listener with bounded connections: what a
//! client may hold open, and for how long, without a token.
//!
//! `axum::serve` has no timeouts and no cap, so a few thousand idle or
//! slowly-writing sockets exhaust the file descriptors. This loop drives
//! hyper's HTTP/1 connections itself and bounds each (config
//! `connections:`, [`ConnectionsConfig`]; user docs in docs/OPERATIONS.md):
//!
//! - **cap**: at most `max_connections` are served at once, shared out per
//!   client: `max_anonymous_per_address` for connections that have not yet
//!   shown a valid token, `max_per_token` for those that have. Past a limit
//!   the oldest idle connection without a token makes room; when none can,
//!   the newcomer is accepted, answered `503` with `Retry-After: 1` and
//!   `Connection: close`, and closed, by a small task of its own
//!   ([`MAX_REFUSING`] at once; past that the socket is just closed) — the
//!   accept loop never waits on a client. Who is evicted and why: the
//!   [`admission`] module;
//! - **idle** (`idle_timeout`): with no request under way, a connection
//!   that neither sends nor receives a byte for this long is closed — a
//!   socket opened and left silent, an idle keep-alive, a client that stops
//!   reading its answer;
//! - **head** (`header_read_timeout`): a request head must be complete this
//!   long after its first byte arrived (slowloris);
//! - **body** (`body_timeout`): a request body must be complete this long
//!   after its head; past it the read fails, the answer is `408
//!   body_timeout` and the connection is closed (hyper never keeps alive a
//!   connection whose request body was not read to its end).
//!
//! Idle and head are watched per connection by one task ([`watch`]) over
//! counters the socket wrapper ([`Watched`]) and the service update; the
//! body deadline lives in the body wrapper ([`TimedBody`]).
//!
//! Memory: one router is shared by every connection (`axum::serve` copied
//! its route table per connection, ~50 KiB each), and hyper is set up only
//! when a connection's first byte arrives, so a silent socket costs ~1.5 KiB
//! and an idle keep-alive ~13 KiB (measured, docs/OPERATIONS.md).
//!
//! Shutdown: when the token fires, the listener is dropped (new connections
//! are refused by the kernel), every connection is told to finish the
//! request under way and close, and `serve` returns once all are gone (the
//! idle and body limits still bound them). An evicted connection is closed
//! the same way: at once when idle, after its answer when a request had
//! just started.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use crate::config::ConnectionsConfig;

mod admission;

use admission::Admission;
pub(super) use admission::{ConnSlot, TokenKey};

/// Refusals (the `503` past the cap) being written at once; past this a
/// connection over the cap is closed without an answer, so a flood cannot
/// turn refusals into the next unbounded resource.
pub(super) const MAX_REFUSING: usize = 64;
/// How long a refusal may take to write its answer and see the client's
/// request bytes out (reading them first keeps the kernel from answering
/// the close with a reset that would discard the `503`).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// Bytes of the client's request a refusal reads and drops before closing.
const REFUSAL_DRAIN_BYTES: usize = 16 << 10;
/// How long a connection hyper has finished with may take to see the
/// client's last bytes out ([`close_lingering`]), and how many it reads.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 << 10;
/// A client that sends nothing for this long after the end of the answer
/// has nothing more in flight: the socket is closed (a client keeping its
/// connection open would otherwise hold it for all of [`LINGER`]).
const LINGER_QUIET: Duration = Duration::from_millis(250);
/// Pause after an accept error that is not about one connection (out of
/// file descriptors): retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The answer past the cap.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 111\r\n\
\r\n\
{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the server is at its connection limit; retry in a moment\"}}\n";

/// Serves `app` on `listener` within `limits` until `shutdown` fires, then
/// lets the requests under way finish (module docs).
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionsConfig,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let limits = Arc::new(limits);
    let admission = Admission::new(&limits);
    // Every connection's task holds a sender: the channel closes when the
    // last is gone (evicted ones included, which no longer count).
    let (alive, mut all_gone) = mpsc::channel::<()>(1);
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let mut http = hyper::server::conn::http1::Builder::new();
    // The head deadline is ours ([`watch`]): hyper's starts when the
    // connection goes idle, which would make it an idle timeout too.
    http.header_read_timeout(None);
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_per_connection(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed; pausing");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        match admission.admit(peer.ip()) {
            Some(slot) => {
                tokio::spawn(connection(
                    stream,
                    slot,
                    alive.clone(),
                    app.clone(),
                    http.clone(),
                    limits.clone(),
                    shutdown.clone(),
                ));
            }
            None => refuse(stream, &refusing),
        }
    }
    drop(listener);
    drop(alive);
    // `None` once every connection's sender is dropped: all closed.
    let _ = all_gone.recv().await;
    Ok(())
}

/// Errors about one connection (it went away before it was accepted):
/// nothing to wait for.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Answers `503` and closes, off the accept loop.
fn refuse(mut stream: TcpStream, refusing: &Arc<Semaphore>) {
    let Ok(permit) = refusing.clone().try_acquire_owned() else {
        // Too many refusals under way: close without an answer.
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let wrote = tokio::time::timeout(REFUSAL_LINGER, stream.write_all(REFUSAL)).await;
        if matches!(wrote, Ok(Ok(()))) {
            close_lingering(stream, REFUSAL_LINGER, REFUSAL_DRAIN_BYTES).await;
        }
    });
}

/// Closes `stream` once its last answer is written: the end of the stream
/// is sent, then what the client still sends is read and dropped (at most
/// `bytes`, within `within`, until it is quiet for [`LINGER_QUIET`] or
/// closes) before the socket is closed. Closing a socket
/// that holds unread bytes makes the kernel answer with a reset, and a
/// reset discards the end of the answer the client has not read yet: a
/// request body the handler did not read (hyper then does not keep the
/// connection alive) cut a large answer short, after its status line
/// (tests/integration/connections.rs).
async fn close_lingering(mut stream: TcpStream, within: Duration, bytes: usize) {
    let _ = tokio::time::timeout(within, async {
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < bytes {
            let read = tokio::io::AsyncReadExt::read(&mut stream, &mut sink);
            match tokio::time::timeout(LINGER_QUIET, read).await {
                Err(_) | Ok(Ok(0)) => break,
                Ok(Ok(n)) => drained += n,
                Ok(Err(e)) => return Err(e),
            }
        }
        io::Result::Ok(())
    })
    .await;
}

/// What a connection's watchdog reads: updated by the socket wrapper and the
/// service, never locked.
struct Activity {
    /// Instants are kept as ms since this one.
    born: Instant,
    /// Last byte read or written.
    last_io_ms: AtomicU64,
    /// First byte of the request head being read; `u64::MAX` when none.
    head_ms: AtomicU64,
    /// Requests whose handler is running.
    busy: AtomicUsize,
    /// Wakes the watchdog when a head starts or a handler ends.
    changed: Notify,
}

const NO_HEAD: u64 = u64::MAX;

impl Activity {
    fn new() -> Self {
        Self {
            born: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            head_ms: AtomicU64::new(NO_HEAD),
            busy: AtomicUsize::new(0),
            changed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    fn read(&self, n: usize) {
        if n == 0 {
            return;
        }
        let now = self.now_ms();
        self.last_io_ms.store(now, Ordering::Relaxed);
        // Bytes arriving while a handler runs are its body (or a pipelined
        // request, timed once the handler is done).
        if self.busy.load(Ordering::Acquire) == 0
            && self
                .head_ms
                .compare_exchange(NO_HEAD, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.changed.notify_one();
        }
    }

    fn wrote(&self, n: usize) {
        if n > 0 {
            self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
        }
    }

    /// A request's head is in: its handler runs.
    fn request_started(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.head_ms.store(NO_HEAD, Ordering::Release);
    }

    fn request_ended(&self) {
        self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
        self.busy.fetch_sub(1, Ordering::AcqRel);
        self.changed.notify_one();
    }
}

/// Counts a request as under way until its handler's future ends (done or
/// dropped): for the watchdog, and so that the connection is not evicted.
struct Busy(Arc<Activity>, Option<Arc<ConnSlot>>);

impl Busy {
    fn start(activity: Arc<Activity>, slot: Option<Arc<ConnSlot>>) -> Self {
        activity.request_started();
        if let Some(slot) = &slot {
            slot.request_started();
        }
        Self(activity, slot)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.request_ended();
        if let Some(slot) = &self.1 {
            slot.request_ended();
        }
    }
}

/// Why the watchdog closed a connection.
#[derive(Debug)]
enum Expired {
    Idle,
    Head,
}

/// Resolves when the connection broke a limit: idle too long with no
/// request under way, or a head not complete in time.
async fn watch(activity: &Activity, limits: &ConnectionsConfig) -> Expired {
    loop {
        let notified = activity.changed.notified();
        if activity.busy.load(Ordering::Acquire) > 0 {
            // A handler runs; its body has its own deadline. Wait for its end.
            notified.await;
            continue;
        }
        let idle_at =
            activity.at(activity.last_io_ms.load(Ordering::Relaxed)) + limits.idle_timeout;
        let head = activity.head_ms.load(Ordering::Acquire);
        let head_at = (head != NO_HEAD).then(|| activity.at(head) + limits.header_read_timeout);
        let (deadline, why) = match head_at {
            Some(h) if h < idle_at => (h, Expired::Head),
            _ => (idle_at, Expired::Idle),
        };
        if Instant::now() >= deadline {
            return why;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = notified => {}
        }
    }
}

/// One connection, holding its place under the cap until it is closed or
/// evicted.
///
/// Until the client's first byte arrives nothing of HTTP exists: a socket
/// opened and left silent (the cheapest flood) costs this small task, not
/// hyper's buffers (8 KiB each way) and state, which are boxed apart
/// ([`http_connection`]) so the task's own allocation stays small.
async fn connection(
    stream: TcpStream,
    slot: ConnSlot,
    _alive: mpsc::Sender<()>,
    app: Router,
    http: hyper::server::conn::http1::Builder,
    limits: Arc<ConnectionsConfig>,
    shutdown: CancellationToken,
) {
    // `peek` waits for a byte (or the end) without taking it; `readable`
    // alone can wake spuriously, and hyper would then be built for nothing.
    let mut first = [0u8; 1];
    tokio::select! {
        seen = stream.peek(&mut first) => {
            if !matches!(seen, Ok(1)) {
                return;
            }
        }
        () = tokio::time::sleep(limits.idle_timeout) => {
            tracing::debug!("closing a connection that never spoke");
            return;
        }
        () = shutdown.cancelled() => return,
        () = slot.evicted() => return,
    }
    Box::pin(http_connection(
        stream,
        Arc::new(slot),
        app,
        http,
        limits,
        shutdown,
    ))
    .await;
}

/// hyper's HTTP/1 over the watched socket, until the connection ends,
/// breaks a limit, or shutdown or eviction has let its request finish.
async fn http_connection(
    stream: TcpStream,
    slot: Arc<ConnSlot>,
    app: Router,
    http: hyper::server::conn::http1::Builder,
    limits: Arc<ConnectionsConfig>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let body_timeout = limits.body_timeout;
    let service_activity = activity.clone();
    let service_slot = slot.clone();
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let busy = Busy::start(service_activity.clone(), Some(service_slot.clone()));
        let mut request = request.map(|body| Body::new(TimedBody::new(body, body_timeout)));
        // For `auth::Caller`, which promotes the connection on a valid token.
        request.extensions_mut().insert(service_slot.clone());
        let answer = app.clone().oneshot(request);
        // Boxed: the connection is polled without its shutdown, which
        // wants the handler's future `Unpin`.
        Box::pin(async move {
            let answer = answer.await;
            drop(busy);
            answer
        })
    });
    let mut conn = http.serve_connection(io, service);
    let watchdog = watch(&activity, &limits);
    let mut watchdog = std::pin::pin!(watchdog);
    let mut stopping = false;
    loop {
        tokio::select! {
            done = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => {
                match done {
                    Ok(()) => {
                        let stream = conn.into_parts().io.into_inner().inner;
                        close_lingering(stream, LINGER, LINGER_BYTES).await;
                    }
                    Err(e) => tracing::debug!(error = %e, "connection ended with an error"),
                }
                return;
            }
            why = watchdog.as_mut() => {
                // Dropping the connection closes the socket.
                tracing::debug!(?why, "closing a connection past its limit");
                return;
            }
            () = shutdown.cancelled(), if !stopping => {
                stopping = true;
                Pin::new(&mut conn).graceful_shutdown();
            }
            () = slot.evicted(), if !stopping => {
                // Idle: close now. A request whose head completed since the
                // eviction was decided is answered first.
                if !slot.is_busy() {
                    tracing::debug!("closing an evicted connection");
                    return;
                }
                stopping = true;
                Pin::new(&mut conn).graceful_shutdown();
            }
        }
    }
}

/// The socket, telling [`Activity`] about every byte.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            self.activity.read(buf.filled().len() - before);
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = result {
            self.activity.wrote(n);
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            self.activity.wrote(n);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails once `body_timeout` has passed since its head.
pub(super) struct TimedBody {
    inner: Incoming,
    limit: Duration,
    deadline: Instant,
    /// Armed on the first read that has to wait (most bodies never do).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    expired: bool,
}

impl TimedBody {
    fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            deadline: Instant::now() + limit,
            sleep: None,
            expired: false,
        }
    }
}

/// The error a request body ends with past `body_timeout` (answered `408
/// body_timeout`, see `api/error.rs`).
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {} (connections.body_timeout)",
    humantime::format_duration(*.0)
)]
pub(super) struct BodyTimedOut(pub(super) Duration);

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            self.expired = true;
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.expired || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The [`BodyTimedOut`] somewhere in `error`'s sources, if there is one.
pub(super) fn body_timed_out<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a BodyTimedOut> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<BodyTimedOut>() {
            return Some(t);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_http_answer() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "too_many_connections");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_expires_idle_and_a_slow_head_at_its_deadline() {
        let limits = ConnectionsConfig {
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(5),
            ..ConnectionsConfig::default()
        };
        let silent = Activity::new();
        let started = Instant::now();
        assert!(matches!(watch(&silent, &limits).await, Expired::Idle));
        assert_eq!(started.elapsed(), Duration::from_secs(5));

        // A byte every second keeps it from idling, not past the head deadline.
        let slow = Arc::new(Activity::new());
        let feeder = slow.clone();
        tokio::spawn(async move {
            loop {
                feeder.read(1);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let started = Instant::now();
        assert!(matches!(watch(&slow, &limits).await, Expired::Head));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_handler_is_never_idle() {
        let limits = ConnectionsConfig {
            idle_timeout: Duration::from_secs(1),
            ..ConnectionsConfig::default()
        };
        let a = Arc::new(Activity::new());
        let busy = Busy::start(a.clone(), None);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            drop(busy);
        });
        let started = Instant::now();
        assert!(matches!(watch(&a, &limits).await, Expired::Idle));
        // Ten seconds of handler, then one of silence.
        assert_eq!(started.elapsed(), Duration::from_secs(11));
    }
}
