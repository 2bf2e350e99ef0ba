//! Outbound HTTP for plugins (`wasi:http/outgoing-handler`), checked by the
//! host before any connection is made.
//!
//! wasmtime-wasi-http turns the guest's request into an `http::Request` and
//! hands it to [`WasiHttpHooks::send_request`]; [`HttpHooks`] is ax's
//! implementation. For every request, in order:
//! 1. the per-attempt request cap;
//! 2. scheme, host and port against the step's allow-list
//!    ([`crate::capability::http`]) — nothing listed means nothing allowed;
//! 3. the name is resolved once, here; each address is checked
//!    ([`allow::pick_address`]) and the connection goes to a checked
//!    address (no second lookup, so no DNS rebinding between check and use);
//! 4. TLS for `https` (webpki roots, the name verified), HTTP/1.1;
//! 5. the per-request timeout covers connecting, the response head and the
//!    whole body; the body is cut at the response cap.
//!
//! A refusal is an HTTP error to the guest (`HttpRequestDenied`, a timeout or
//! body-size code), never a trap, and a `warn` record in the attempt's log
//! saying why. Redirects are not followed here (wasi:http returns them to the
//! guest); the SDK follows them, and each hop is a new request checked anew.
//! Everything runs inside the attempt's futures: when the attempt ends
//! (timeout, cancel) they are dropped, so no request outlives its attempt.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode as P2ErrorCode;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::capture::LogSink;
use super::record::{HttpTurn, Tape};
use crate::capability::HttpLimits;
use crate::capability::http::{self as allow, Destination, HttpPattern};
use crate::model::{LogLevel, LogRecord};

/// The attempt's log, shared with request futures that outlive a host call.
pub(crate) type SharedLogs = Arc<Mutex<LogSink>>;

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>;

/// ax's `wasi:http` hooks for one attempt.
pub(crate) struct HttpHooks {
    allow: Arc<[HttpPattern]>,
    limits: HttpLimits,
    sent: u32,
    logs: SharedLogs,
    started: Instant,
    /// Records each exchange, or answers it from a record ([`super::record`]).
    tape: Option<Tape>,
}

impl HttpHooks {
    pub(crate) fn new(
        allow: &[HttpPattern],
        limits: HttpLimits,
        logs: SharedLogs,
        started: Instant,
    ) -> Self {
        Self {
            allow: allow.into(),
            limits,
            sent: 0,
            logs,
            started,
            tape: None,
        }
    }

    /// Puts the attempt's exchanges on `tape`.
    pub(crate) fn with_tape(mut self, tape: Option<Tape>) -> Self {
        self.tape = tape;
        self
    }

    /// The first check: cap, then the allow-list. Returns the matching pattern.
    fn admit(&mut self, dest: &Destination) -> Result<HttpPattern, String> {
        if self.sent >= self.limits.max_requests {
            return Err(format!(
                "the attempt has used its {} requests (limits.http_requests)",
                self.limits.max_requests
            ));
        }
        if self.allow.is_empty() {
            return Err(
                "this step allows no outbound HTTP (list destinations in `allow_http`)".into(),
            );
        }
        let pattern = allow::find_match(&self.allow, dest)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{dest} is not in the step's allow_http ({})",
                    self.allow
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        self.sent += 1;
        Ok(pattern)
    }
}

fn note(logs: &SharedLogs, started: Instant, level: LogLevel, message: String, url: &str) {
    let record = LogRecord {
        at_ms: started.elapsed().as_millis() as u64,
        level,
        message,
        fields: vec![("url".into(), url.into())],
    };
    // A poisoned lock only means a logging call panicked; the sink is intact.
    logs.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(record);
}

/// The URL as shown in the log: scheme, authority and path, no query (queries
/// often carry tokens; secrets are redacted anyway, other tokens are not).
fn shown_url(request: &http::Request<WasiBody>) -> String {
    let uri = request.uri();
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("?"),
        uri.authority().map(|a| a.as_str()).unwrap_or(""),
        uri.path()
    )
}

impl WasiHttpHooks for HttpHooks {
    // The default hooks also log these at `warn` in the host's log; a
    // plugin's failed connection is the plugin's business, recorded in the
    // attempt's log (see `send_request`), not the operator's.
    fn p2_error_from_connect(&mut self, err: &std::io::Error) -> P2ErrorCode {
        if err.kind() == std::io::ErrorKind::TimedOut {
            P2ErrorCode::ConnectionTimeout
        } else {
            P2ErrorCode::ConnectionRefused
        }
    }

    fn p2_error_from_hyper(&mut self, _err: &hyper::Error) -> P2ErrorCode {
        P2ErrorCode::HttpProtocolError
    }

    fn p2_error_from_tls(&mut self, _err: &std::io::Error) -> P2ErrorCode {
        P2ErrorCode::TlsProtocolError
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let Some(tape) = self.tape.clone() else {
            return self.send_live(request, options, fut);
        };
        let turn = tape.http_begin(request.method().as_str(), &request.uri().to_string());
        match turn {
            HttpTurn::Replay(result) => {
                let done: Box<dyn Future<Output = Result<(), HttpError>> + Send> =
                    Box::new(async { Ok(()) });
                Box::new(async move { (*result).map(|r| (r, done)) })
            }
            HttpTurn::Record(slot) => {
                let live = Box::into_pin(self.send_live(request, options, fut));
                Box::new(async move {
                    match live.await {
                        Ok((response, conn)) => Ok((tape.http_response(slot, response), conn)),
                        Err(e) => {
                            tape.http_failed(slot, &e);
                            Err(e)
                        }
                    }
                })
            }
        }
    }
}

impl HttpHooks {
    /// The checks and the request itself (see the module's list).
    fn send_live(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let url = shown_url(&request);
        let dest = Destination::parse(
            request.uri().scheme_str().unwrap_or(""),
            request.uri().authority().map(|a| a.as_str()).unwrap_or(""),
        );
        let admitted = dest.and_then(|dest| self.admit(&dest).map(|p| (dest, p)));
        let (dest, pattern) = match admitted {
            Ok(ok) => ok,
            Err(reason) => {
                note(
                    &self.logs,
                    self.started,
                    LogLevel::Warn,
                    format!("ax: HTTP request denied: {reason}"),
                    &url,
                );
                return Box::new(async { Err(HttpError::HttpRequestDenied) });
            }
        };
        let mut limits = self.limits;
        // The guest may ask for shorter timeouts, never longer ones.
        if let Some(o) = options {
            for t in [o.connect_timeout, o.first_byte_timeout]
                .into_iter()
                .flatten()
            {
                limits.timeout = limits.timeout.min(t);
            }
        }
        let (logs, started) = (self.logs.clone(), self.started);
        Box::new(async move {
            let result = send(request, &dest, &pattern, limits, &logs, started, &url).await;
            if let Err(e) = &result {
                let level = match e {
                    HttpError::HttpRequestDenied => LogLevel::Warn,
                    _ => LogLevel::Info,
                };
                if !matches!(e, HttpError::HttpRequestDenied) {
                    note(
                        &logs,
                        started,
                        level,
                        format!("ax: HTTP request failed: {e}"),
                        &url,
                    );
                }
            }
            result
        })
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// TLS client settings, built once: the webpki roots, no client auth.
static TLS: LazyLock<Arc<rustls::ClientConfig>> = LazyLock::new(|| {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
});

/// Resolves, checks, connects and sends; the response body comes back capped.
async fn send(
    mut request: http::Request<WasiBody>,
    dest: &Destination,
    pattern: &HttpPattern,
    limits: HttpLimits,
    logs: &SharedLogs,
    started: Instant,
    url: &str,
) -> SendResult {
    let deadline = tokio::time::Instant::now() + limits.timeout;
    let head = async {
        let addr = resolve_checked(dest, pattern)
            .await
            .inspect_err(|reason| {
                note(
                    logs,
                    started,
                    LogLevel::Warn,
                    format!("ax: HTTP request denied: {reason}"),
                    url,
                )
            })
            .map_err(|_| HttpError::HttpRequestDenied)?;
        let tcp = TcpStream::connect(addr).await.map_err(HttpError::Connect)?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Stream> = match dest.scheme {
            allow::Scheme::Http => Box::new(tcp),
            allow::Scheme::Https => {
                let name = rustls::pki_types::ServerName::try_from(dest.host.clone())
                    .map_err(|_| HttpError::TlsProtocolError)?;
                let tls = tokio_rustls::TlsConnector::from(TLS.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(HttpError::Tls)?;
                Box::new(tls)
            }
        };
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake::<_, WasiBody>(TokioIo::new(io)).await?;
        // The request line carries only the path; the authority is in `Host`.
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        *request.uri_mut() = http::Uri::builder()
            .path_and_query(path)
            .build()
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        drive(sender.send_request(request), conn).await
    };
    let (response, conn) = match tokio::time::timeout_at(deadline, head).await {
        Ok(result) => result?,
        Err(_) => {
            note(
                logs,
                started,
                LogLevel::Warn,
                format!(
                    "ax: HTTP request timed out after {} (limits.http_timeout)",
                    humantime::format_duration(limits.timeout)
                ),
                url,
            );
            return Err(HttpError::HttpResponseTimeout);
        }
    };
    if let Some(len) = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        && len > limits.max_response_bytes
    {
        note(
            logs,
            started,
            LogLevel::Warn,
            format!(
                "ax: HTTP response of {len} bytes refused: the cap is {} bytes (limits.http_response_kb)",
                limits.max_response_bytes
            ),
            url,
        );
        return Err(HttpError::HttpResponseBodySize(Some(len)));
    }
    let (parts, incoming) = response.into_parts();
    let capped = CappedBody {
        inner: incoming,
        left: limits.max_response_bytes,
        cap: limits.max_response_bytes,
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        logs: logs.clone(),
        started,
        url: url.to_owned(),
        done: false,
    };
    Ok((
        http::Response::from_parts(parts, capped.boxed_unsync()),
        conn,
    ))
}

/// Polls the request while driving the connection (HTTP/1 needs both), then
/// hands back the connection so it keeps running while the body is read.
async fn drive<F, C>(
    send: F,
    conn: C,
) -> Result<
    (
        http::Response<hyper::body::Incoming>,
        Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ),
    HttpError,
>
where
    F: Future<Output = Result<http::Response<hyper::body::Incoming>, hyper::Error>> + Send,
    C: Future<Output = Result<(), hyper::Error>> + Send + Unpin + 'static,
{
    let mut send = std::pin::pin!(send);
    let mut conn = Some(conn);
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = send.as_mut().poll(cx) {
            return Poll::Ready(r.map_err(HttpError::from));
        }
        if let Some(c) = conn.as_mut() {
            let done = ready!(Pin::new(c).poll(cx));
            conn = None;
            if let Err(e) = done {
                return Poll::Ready(Err(HttpError::from(e)));
            }
            return send.as_mut().poll(cx).map_err(HttpError::from);
        }
        Poll::Pending
    })
    .await?;
    let rest: Box<dyn Future<Output = Result<(), HttpError>> + Send> = match conn {
        Some(c) => Box::new(async move { c.await.map_err(HttpError::from) }),
        None => Box::new(async { Ok(()) }),
    };
    Ok((response, rest))
}

/// A response body that ends in an error past `cap` bytes or past the
/// request's deadline.
struct CappedBody {
    inner: hyper::body::Incoming,
    left: u64,
    cap: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    logs: SharedLogs,
    started: Instant,
    url: String,
    done: bool,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(match frame {
                None => None,
                Some(Err(e)) => Some(Err(HttpError::from(e))),
                Some(Ok(frame)) => {
                    let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                    if len > self.left {
                        self.done = true;
                        let message = format!(
                            "ax: HTTP response cut at the cap of {} bytes (limits.http_response_kb)",
                            self.cap
                        );
                        note(&self.logs, self.started, LogLevel::Warn, message, &self.url);
                        Some(Err(HttpError::HttpResponseBodySize(Some(self.cap))))
                    } else {
                        self.left -= len;
                        Some(Ok(frame))
                    }
                }
            });
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.done = true;
            note(
                &self.logs,
                self.started,
                LogLevel::Warn,
                "ax: HTTP response body timed out (limits.http_timeout)".into(),
                &self.url,
            );
            return Poll::Ready(Some(Err(HttpError::HttpResponseTimeout)));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }
}

/// Resolves `dest` once and returns an address the pattern may reach (the
/// decision is [`allow::pick_address`], shared with the alert sender).
async fn resolve_checked(dest: &Destination, pattern: &HttpPattern) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = match dest.ip() {
        Some(ip) => vec![SocketAddr::new(ip, dest.port)],
        None => tokio::net::lookup_host((dest.host.as_str(), dest.port))
            .await
            .map_err(|e| format!("{} does not resolve: {e}", dest.host))?
            .collect(),
    };
    allow::pick_address(pattern, &dest.host, &addrs)
}
