//! An HTTP client over `wasi:http/outgoing-handler`, for steps granted
//! outbound HTTP (`allow_http:` in the task definition).
//!
//! The host checks every request against the step's allow-list before it
//! connects; a refused request comes back as [`HttpError::Denied`] (and the
//! attempt's log says why). Redirects are followed here, up to
//! [`Request::max_redirects`] hops (5 by default); each hop is a new request
//! the host checks again, so a redirect cannot lead outside the allow-list.
//! A `303`, or a `301`/`302` answering a `POST`, continues as a `GET` without
//! the body, as browsers do.
//!
//! ```no_run
//! use ax_plugin_sdk::http;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize)]
//! struct Message<'a> { text: &'a str }
//! #[derive(Deserialize)]
//! struct Reply { ok: bool }
//!
//! // GET, with a status check and JSON decoding.
//! let rates: serde_json::Value = http::get("https://api.example.com/rates")?
//!     .error_for_status()?
//!     .json()?;
//!
//! // POST JSON, with a header and a shorter timeout.
//! let reply: Reply = http::Request::post("https://hooks.example.com/notify")
//!     .header("authorization", "Bearer ...")
//!     .json(&Message { text: "report ready" })?
//!     .timeout(std::time::Duration::from_secs(5))
//!     .send()?
//!     .error_for_status()?
//!     .json()?;
//! # Ok::<(), ax_plugin_sdk::Error>(())
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasip2::io::streams::StreamError;

/// Redirect hops followed by default.
pub const DEFAULT_MAX_REDIRECTS: u32 = 5;
/// Largest chunk written to the request body stream at once (the WASI limit).
const WRITE_CHUNK: usize = 4096;
/// Bytes asked for per read of the response body.
const READ_CHUNK: u64 = 64 << 10;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused the destination (not in `allow_http`, a private
    /// address behind a name, the request cap reached). The attempt's log says why.
    Denied,
    /// The request or its response took longer than allowed.
    Timeout,
    /// The response body is larger than the step's cap.
    TooLarge,
    /// More redirects than allowed.
    TooManyRedirects(u32),
    /// The URL cannot be used (scheme, syntax).
    BadUrl(String),
    /// Any other failure (DNS, connection, protocol), with the WASI error code.
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => write!(
                f,
                "the host denied the request (not allowed by the step's allow_http, or over the request cap; see the attempt log)"
            ),
            HttpError::Timeout => write!(f, "the request timed out"),
            HttpError::TooLarge => write!(f, "the response is larger than the step allows"),
            HttpError::TooManyRedirects(n) => write!(f, "more than {n} redirects"),
            HttpError::BadUrl(why) => write!(f, "bad URL: {why}"),
            HttpError::Failed(why) => write!(f, "the request failed: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// Denials, bad URLs and oversized responses will not change on a retry;
/// timeouts and connection failures may.
impl From<HttpError> for crate::Error {
    fn from(e: HttpError) -> Self {
        let message = format!("http: {e}");
        match e {
            HttpError::Timeout | HttpError::Failed(_) => crate::Error::retryable(message),
            _ => crate::Error::fatal(message),
        }
    }
}

fn from_code(code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied,
        ErrorCode::HttpResponseTimeout
        | ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::DnsTimeout => HttpError::Timeout,
        ErrorCode::HttpResponseBodySize(_) => HttpError::TooLarge,
        other => HttpError::Failed(format!("{other:?}")),
    }
}

/// A URL split into what wasi:http needs.
///
/// ```
/// use ax_plugin_sdk::http::Url;
///
/// let url = Url::parse("https://api.example.com:8443/v1/items?page=2").unwrap();
/// assert_eq!(url.authority, "api.example.com:8443");
/// assert_eq!(url.path_and_query, "/v1/items?page=2");
/// assert_eq!(url.join("/other").unwrap().to_string(), "https://api.example.com:8443/other");
/// assert_eq!(url.join("next").unwrap().path_and_query, "/v1/next");
/// assert!(Url::parse("ftp://example.com").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `true` for `https`.
    pub https: bool,
    /// `host[:port]`.
    pub authority: String,
    /// `/path?query` (at least `/`); any `#fragment` is dropped.
    pub path_and_query: String,
}

impl Url {
    /// Parses an absolute `http://` or `https://` URL.
    pub fn parse(text: &str) -> Result<Url, HttpError> {
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| HttpError::BadUrl(format!("`{text}` is not absolute")))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            other => {
                return Err(HttpError::BadUrl(format!(
                    "scheme `{other}` (http or https only)"
                )));
            }
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() {
            return Err(HttpError::BadUrl(format!("`{text}` has no host")));
        }
        let path_and_query = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Url {
            https,
            authority: authority.to_string(),
            path_and_query,
        })
    }

    /// Resolves a `Location` header against this URL: absolute URLs as they
    /// are, `//host/..` with this scheme, `/path` on this host, `path` next to
    /// this path.
    pub fn join(&self, location: &str) -> Result<Url, HttpError> {
        if location.contains("://") {
            return Url::parse(location);
        }
        let scheme = if self.https { "https" } else { "http" };
        if let Some(rest) = location.strip_prefix("//") {
            return Url::parse(&format!("{scheme}://{rest}"));
        }
        let path = if location.starts_with('/') {
            location.to_string()
        } else {
            let base = self.path_and_query.split('?').next().unwrap_or("/");
            let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        Url::parse(&format!("{scheme}://{}{path}", self.authority))
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.path_and_query)
    }
}

/// A response, its body read in full (the host caps its size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lower-case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Where the response came from, after redirects.
    pub url: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    ///
    /// ```
    /// let r = ax_plugin_sdk::http::Response {
    ///     status: 200,
    ///     headers: vec![("content-type".into(), "application/json".into())],
    ///     body: b"{}".to_vec(),
    ///     url: "http://127.0.0.1/".into(),
    /// };
    /// assert_eq!(r.header("Content-Type"), Some("application/json"));
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Ok(self)` for a 2xx status, else an error with the status and the start
    /// of the body (5xx and 429 are retryable, other statuses fatal).
    ///
    /// ```
    /// let r = ax_plugin_sdk::http::Response {
    ///     status: 503, headers: vec![], body: b"busy".to_vec(), url: "http://x/".into(),
    /// };
    /// let e = r.error_for_status().unwrap_err();
    /// assert_eq!(e.kind, ax_plugin_sdk::ErrorKind::Retryable);
    /// ```
    pub fn error_for_status(self) -> crate::Result<Self> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let mut text = String::from_utf8_lossy(&self.body).into_owned();
        if text.len() > 200 {
            let mut end = 200;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        let message = format!("http: {} answered {}: {text}", self.url, self.status);
        Err(if self.status >= 500 || self.status == 429 {
            crate::Error::retryable(message)
        } else {
            crate::Error::fatal(message)
        })
    }

    /// The body as UTF-8 text (invalid bytes replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body decoded from JSON.
    ///
    /// ```
    /// let r = ax_plugin_sdk::http::Response {
    ///     status: 200, headers: vec![], body: br#"{"rows": 3}"#.to_vec(), url: "http://x/".into(),
    /// };
    /// let v: serde_json::Value = r.json().unwrap();
    /// assert_eq!(v["rows"], 3);
    /// ```
    pub fn json<T: DeserializeOwned>(&self) -> crate::Result<T> {
        serde_json::from_slice(&self.body)
            .map_err(|e| crate::Error::fatal(format!("http: {} sent invalid JSON: {e}", self.url)))
    }
}

/// A request being built; [`Request::send`] sends it.
#[derive(Clone, Debug)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
    max_redirects: u32,
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::get(url).send()
}

/// `POST url` with `value` as a JSON body.
pub fn post_json<T: Serialize + ?Sized>(url: &str, value: &T) -> crate::Result<Response> {
    Ok(Request::post(url).json(value)?.send()?)
}

impl Request {
    /// A request with any method (`GET`, `PUT`, `PATCH`, ...).
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_ascii_uppercase(),
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
            max_redirects: DEFAULT_MAX_REDIRECTS,
        }
    }

    /// A `GET`.
    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    /// A `POST`.
    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> crate::Result<Self> {
        Ok(self
            .header("content-type", "application/json")
            .body(serde_json::to_vec(value)?))
    }

    /// Asks for a shorter per-request timeout than the step's (the host never
    /// allows a longer one).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How many redirects to follow (0: return the 3xx response itself).
    pub fn max_redirects(mut self, hops: u32) -> Self {
        self.max_redirects = hops;
        self
    }

    /// Sends the request, following redirects; the body is read in full.
    pub fn send(self) -> Result<Response, HttpError> {
        let mut url = Url::parse(&self.url)?;
        let mut method = self.method.clone();
        let mut body = self.body.clone();
        let mut hops = 0;
        loop {
            let response = send_once(&method, &url, &self.headers, &body, self.timeout)?;
            let location = response.header("location").map(str::to_string);
            let redirect = matches!(response.status, 301 | 302 | 303 | 307 | 308);
            let (Some(location), true) = (location, redirect) else {
                return Ok(response);
            };
            if self.max_redirects == 0 {
                return Ok(response);
            }
            if hops == self.max_redirects {
                return Err(HttpError::TooManyRedirects(self.max_redirects));
            }
            hops += 1;
            if response.status == 303
                || (response.status != 307 && response.status != 308 && method == "POST")
            {
                method = "GET".into();
                body.clear();
            }
            url = url.join(&location)?;
        }
    }
}

fn wasi_method(method: &str) -> Method {
    match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_string()),
    }
}

fn failed(what: &str) -> HttpError {
    HttpError::Failed(what.to_string())
}

/// One request, no redirects.
fn send_once(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Option<Duration>,
) -> Result<Response, HttpError> {
    let mut entries: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.as_bytes().to_vec()))
        .collect();
    if !body.is_empty() {
        entries.push(("content-length".into(), body.len().to_string().into_bytes()));
    }
    let fields =
        Fields::from_list(&entries).map_err(|e| HttpError::BadUrl(format!("header: {e:?}")))?;
    let request = OutgoingRequest::new(fields);
    request
        .set_method(&wasi_method(method))
        .map_err(|()| failed("method refused"))?;
    request
        .set_scheme(Some(if url.https {
            &Scheme::Https
        } else {
            &Scheme::Http
        }))
        .map_err(|()| failed("scheme refused"))?;
    request
        .set_authority(Some(&url.authority))
        .map_err(|()| HttpError::BadUrl(format!("authority `{}`", url.authority)))?;
    request
        .set_path_with_query(Some(&url.path_and_query))
        .map_err(|()| HttpError::BadUrl(format!("path `{}`", url.path_and_query)))?;
    let outgoing = request.body().map_err(|()| failed("no request body"))?;
    let options = timeout.map(|t| {
        let options = RequestOptions::new();
        let ns = t.as_nanos().min(u64::MAX as u128) as u64;
        // A host that does not support an option keeps its own; that is fine.
        let _ = options.set_connect_timeout(Some(ns));
        let _ = options.set_first_byte_timeout(Some(ns));
        let _ = options.set_between_bytes_timeout(Some(ns));
        options
    });
    let future = outgoing_handler::handle(request, options).map_err(from_code)?;
    // The body is written after `handle`: the host streams it as it comes.
    // If the host refused the request, the body stream is closed: the
    // response future then says why, which is the error worth reporting.
    let written = write_body(outgoing, body);
    future.subscribe().block();
    if let Err(write_error) = written {
        return Err(match future.get() {
            Some(Ok(Err(code))) => from_code(code),
            _ => write_error,
        });
    }
    let incoming = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(from_code(code)),
        Some(Err(())) | None => return Err(failed("the response was already taken")),
    };
    let status = incoming.status();
    let headers = incoming
        .headers()
        .entries()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect();
    let body = read_body(
        incoming
            .consume()
            .map_err(|()| failed("no response body"))?,
    )?;
    Ok(Response {
        status,
        headers,
        body,
        url: url.to_string(),
    })
}

fn write_body(outgoing: OutgoingBody, body: &[u8]) -> Result<(), HttpError> {
    if !body.is_empty() {
        let stream = outgoing.write().map_err(|()| failed("no body stream"))?;
        for chunk in body.chunks(WRITE_CHUNK) {
            stream
                .blocking_write_and_flush(chunk)
                .map_err(|e| stream_error(e, "writing the request body"))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(from_code)
}

fn stream_error(e: StreamError, what: &str) -> HttpError {
    match e {
        StreamError::Closed => failed(&format!("{what}: the stream closed")),
        StreamError::LastOperationFailed(err) => {
            match wasip2::http::types::http_error_code(&err) {
                Some(code) => from_code(code),
                None => {
                    // Body errors reach the guest as I/O errors carrying only
                    // the host's text; its size cap is recognised by that text.
                    let text = err.to_debug_string();
                    if text.contains("body size exceeds limit") {
                        HttpError::TooLarge
                    } else if text.contains("timed out") || text.contains("timeout") {
                        HttpError::Timeout
                    } else {
                        failed(&format!("{what}: {text}"))
                    }
                }
            }
        }
    }
}

fn read_body(body: IncomingBody) -> Result<Vec<u8>, HttpError> {
    let mut bytes = Vec::new();
    {
        let stream = body.stream().map_err(|()| failed("no body stream"))?;
        loop {
            match stream.blocking_read(READ_CHUNK) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(e) => return Err(stream_error(e, "reading the response body")),
            }
        }
    }
    let trailers = IncomingBody::finish(body);
    trailers.subscribe().block();
    if let Some(Ok(Err(code))) = trailers.get() {
        return Err(from_code(code));
    }
    Ok(bytes)
}
