//! Recording and replaying what crosses the sandbox boundary
//! ([`crate::model::record`] holds the data).
//!
//! A [`Tape`] is shared by everything of one attempt that hands the guest a
//! value from outside: the WASI wall and monotonic clocks and the secure and
//! insecure random sources (installed on the `WasiCtxBuilder`), the `kv`
//! imports ([`super::host`]) and outbound HTTP ([`super::http`]). It is in
//! one of two modes:
//! - **recording**: each value is taken from the real source and appended,
//!   until the record reaches its byte cap; then the record is marked
//!   truncated and nothing more is kept (the attempt is unaffected);
//! - **replaying**: each value is served from a record, in order (clocks and
//!   random as streams, KV calls and HTTP exchanges as one ordered list that
//!   must match call by call). The first request the record cannot answer
//!   is the *divergence*; the guest is then given a neutral answer (a
//!   repeated clock, zero bytes, a KV or HTTP error) and stopped at the next
//!   epoch tick.
//!
//! Config and secrets need no tape: a replay is granted the recorded config
//! and the recorded secret names (with a marker or a value given on the
//! command line; values are never recorded).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use wasmtime_wasi::clocks::{MonotonicClock, WallClock};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, Rng, WasiCtxBuilder};
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

use tokio_util::sync::CancellationToken;

use super::bindings::ax::plugin::kv::KvError;
use super::{Plugin, Result as RuntimeResult, Runtime};
use crate::capability::{Grants, REDACTED};
use crate::model::record::{AttemptRecord, Call, HttpResult, KvOp, KvResult, MAX_RECORD_BYTES};
use crate::model::{AttemptContext, AttemptReport, Limits};

/// What re-executing a recorded attempt gave ([`Runtime::replay`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    /// The attempt as it ran this time.
    pub report: AttemptReport,
    /// The first request the record could not answer (`call 3: http GET
    /// https://x was not recorded (…)`); the plugin was stopped there.
    pub divergence: Option<String>,
    /// Recorded KV and HTTP calls the replay did not make.
    pub calls_left: usize,
    /// The replay ended as the attempt did (outcome, output and error).
    pub matches: bool,
    /// The record was truncated at its size cap.
    pub truncated: bool,
}

impl Runtime {
    /// Runs one attempt like [`Runtime::run_with`] and records what crossed
    /// the boundary (at most [`MAX_RECORD_BYTES`]); `digest` names the
    /// component in the record. The attempt runs the same whether or not the
    /// record fills up.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_recorded(
        &self,
        plugin: &Plugin,
        digest: &str,
        ctx: &AttemptContext,
        input: &str,
        limits: &Limits,
        grants: &Grants,
        cancel: Option<&CancellationToken>,
    ) -> RuntimeResult<(AttemptReport, AttemptRecord)> {
        let tape = Tape::recording(MAX_RECORD_BYTES, &grants.secret_values());
        let report = self
            .run_taped(
                plugin,
                ctx,
                input,
                limits,
                grants,
                cancel,
                Some(tape.clone()),
            )
            .await?;
        let got = tape.take_recorded();
        let record = AttemptRecord {
            context: ctx.clone(),
            digest: digest.to_owned(),
            input: input.to_owned(),
            limits: limits.clone(),
            config: grants.config.clone(),
            secrets: grants
                .secrets
                .iter()
                .map(|(name, value)| (name.clone(), value.is_some()))
                .collect(),
            insecure_seed: got.insecure_seed,
            wall_clock: got.wall_clock,
            monotonic_clock: got.monotonic_clock,
            secure_random: hex::encode(got.secure_random),
            insecure_random: hex::encode(got.insecure_random),
            calls: got.calls,
            truncated: got.truncated,
            bytes: got.bytes,
            outcome: report.outcome,
            output: report.output.clone(),
            error: report.error.clone(),
        };
        Ok((report, record))
    }

    /// Re-executes a recorded attempt: clocks, random, KV and HTTP answers
    /// come from `record`, config from it too; each secret it lists reads as
    /// its value in `secrets` or else as [`REDACTED`] (a secret the tenant
    /// had not set reads as absent). Nothing leaves the process.
    pub async fn replay(
        &self,
        plugin: &Plugin,
        record: &AttemptRecord,
        secrets: &BTreeMap<String, String>,
    ) -> RuntimeResult<ReplayReport> {
        let granted: BTreeMap<String, Option<String>> = record
            .secrets
            .iter()
            .map(|(name, set)| {
                let value = set.then(|| {
                    secrets
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| REDACTED.into())
                });
                (name.clone(), value)
            })
            .collect();
        let grants = Grants {
            config: record.config.clone(),
            secrets: granted,
            ..Grants::default()
        };
        let tape = Tape::replaying(record.clone(), &grants.secret_values());
        let mut report = self
            .run_taped(
                plugin,
                &record.context,
                &record.input,
                &record.limits,
                &grants,
                None,
                Some(tape.clone()),
            )
            .await?;
        let divergence = tape.divergence();
        if let Some(why) = &divergence {
            report.error = Some(format!("stopped by the replay: {why}"));
        }
        let matches = divergence.is_none()
            && report.outcome == record.outcome
            && report.output == record.output
            && report.error == record.error;
        Ok(ReplayReport {
            report,
            divergence,
            calls_left: tape.calls_left(),
            matches,
            truncated: record.truncated,
        })
    }
}

/// Counted per clock read (a u64 and its separator in the JSON).
const CLOCK_BYTES: usize = 12;
/// Counted per call beside its key, URL, values and body.
const CALL_BYTES: usize = 48;

/// The boundary values of one attempt, recorded or replayed. Clones share it.
#[derive(Clone)]
pub(crate) struct Tape(Arc<Mutex<Mode>>);

enum Mode {
    Recording(Recorder),
    // Boxed: it holds the whole record.
    Replaying(Box<Replayer>),
}

/// What a recording attempt collected (the rest of the record is known to
/// the caller: context, input, limits, outcome).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Recorded {
    pub(crate) insecure_seed: u128,
    pub(crate) wall_clock: Vec<u64>,
    pub(crate) monotonic_clock: Vec<u64>,
    pub(crate) secure_random: Vec<u8>,
    pub(crate) insecure_random: Vec<u8>,
    pub(crate) calls: Vec<Call>,
    pub(crate) truncated: bool,
    pub(crate) bytes: u64,
}

struct Recorder {
    cap: usize,
    /// Secret values the attempt could read, longest first: redacted from
    /// recorded URLs.
    secrets: Vec<String>,
    out: Recorded,
}

impl Recorder {
    /// Counts `n` more bytes; false (and truncated from now on) past the cap.
    fn charge(&mut self, n: usize) -> bool {
        if self.out.truncated {
            return false;
        }
        if self.out.bytes as usize + n > self.cap {
            self.out.truncated = true;
            return false;
        }
        self.out.bytes += n as u64;
        true
    }
}

struct Replayer {
    record: AttemptRecord,
    secure: Vec<u8>,
    insecure: Vec<u8>,
    secure_at: usize,
    insecure_at: usize,
    wall_at: usize,
    mono_at: usize,
    call_at: usize,
    /// Secret values given for the replay, longest first (for URL matching).
    secrets: Vec<String>,
    divergence: Option<String>,
}

impl Replayer {
    fn diverge(&mut self, what: impl FnOnce() -> String) {
        if self.divergence.is_none() {
            self.divergence = Some(what());
        }
    }

    /// Why the record has nothing more: it ended, or it was cut.
    fn end_note(&self) -> &'static str {
        if self.record.truncated {
            "the record was truncated at its size cap before it"
        } else {
            "the attempt did not read it"
        }
    }

    /// The next recorded call, which must be `wanted` (same op and key, or
    /// same method and URL).
    fn next_call(&mut self, wanted: &Call) -> Option<Call> {
        let n = self.call_at + 1;
        let Some(next) = self.record.calls.get(self.call_at).cloned() else {
            let note = if self.record.truncated {
                "the record was truncated at its size cap"
            } else {
                "the record has no more calls"
            };
            self.diverge(|| format!("call {n}: {} was not recorded ({note})", wanted.describe()));
            return None;
        };
        let same = match (&next, wanted) {
            (Call::Kv { op, key, .. }, Call::Kv { op: o, key: k, .. }) => op == o && key == k,
            (
                Call::Http { method, url, .. },
                Call::Http {
                    method: m, url: u, ..
                },
            ) => method == m && url == u,
            _ => false,
        };
        if !same {
            self.diverge(|| {
                format!(
                    "call {n}: {} was not recorded (the record has {} there)",
                    wanted.describe(),
                    next.describe()
                )
            });
            return None;
        }
        self.call_at += 1;
        Some(next)
    }
}

fn lock(m: &Mutex<Mode>) -> MutexGuard<'_, Mode> {
    // A poisoned lock only means a panic mid-update of plain vectors; what
    // was recorded before it is intact.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which random source.
#[derive(Clone, Copy)]
enum Source {
    Secure,
    Insecure,
}

impl Tape {
    /// A recording tape holding at most `cap` bytes; `secrets` are redacted
    /// from recorded URLs.
    pub(crate) fn recording(cap: usize, secrets: &[&str]) -> Self {
        Self(Arc::new(Mutex::new(Mode::Recording(Recorder {
            cap,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
            out: Recorded {
                insecure_seed: rand::random(),
                ..Recorded::default()
            },
        }))))
    }

    /// A tape serving `record`; `secrets` are the values the replay grants.
    pub(crate) fn replaying(record: AttemptRecord, secrets: &[&str]) -> Self {
        let decode = |hex_text: &str| hex::decode(hex_text).unwrap_or_default();
        Self(Arc::new(Mutex::new(Mode::Replaying(Box::new(Replayer {
            secure: decode(&record.secure_random),
            insecure: decode(&record.insecure_random),
            record,
            secure_at: 0,
            insecure_at: 0,
            wall_at: 0,
            mono_at: 0,
            call_at: 0,
            secrets: secrets.iter().map(|s| s.to_string()).collect(),
            divergence: None,
        })))))
    }

    /// Hands the tape's clocks and random sources to a WASI context.
    pub(crate) fn install(&self, builder: &mut WasiCtxBuilder) {
        let seed = match &*lock(&self.0) {
            Mode::Recording(r) => r.out.insecure_seed,
            Mode::Replaying(r) => r.record.insecure_seed,
        };
        builder
            .wall_clock(TapeWall {
                tape: self.clone(),
                real: WallClock::new(),
            })
            .monotonic_clock(TapeMonotonic {
                tape: self.clone(),
                real: MonotonicClock::new(),
            })
            .secure_random(TapeRng {
                tape: self.clone(),
                source: Source::Secure,
                real: wasmtime_wasi::thread_rng(),
            })
            .insecure_random(TapeRng {
                tape: self.clone(),
                source: Source::Insecure,
                real: wasmtime_wasi::thread_rng(),
            })
            .insecure_random_seed(seed);
    }

    /// The first request a replay could not serve.
    pub(crate) fn divergence(&self) -> Option<String> {
        match &*lock(&self.0) {
            Mode::Recording(_) => None,
            Mode::Replaying(r) => r.divergence.clone(),
        }
    }

    /// Whether a replay has met a request its record cannot answer.
    pub(crate) fn diverged(&self) -> bool {
        matches!(&*lock(&self.0), Mode::Replaying(r) if r.divergence.is_some())
    }

    /// Recorded calls a replay has not made (it ended before them).
    pub(crate) fn calls_left(&self) -> usize {
        match &*lock(&self.0) {
            Mode::Recording(_) => 0,
            Mode::Replaying(r) => r.record.calls.len() - r.call_at,
        }
    }

    /// What a recording tape holds (empty for a replaying one).
    pub(crate) fn take_recorded(&self) -> Recorded {
        match &mut *lock(&self.0) {
            Mode::Recording(r) => std::mem::take(&mut r.out),
            Mode::Replaying(_) => Recorded::default(),
        }
    }

    fn clock(&self, wall: bool, real: impl FnOnce() -> u64) -> u64 {
        match &mut *lock(&self.0) {
            Mode::Recording(r) => {
                let now = real();
                if r.charge(CLOCK_BYTES) {
                    if wall {
                        r.out.wall_clock.push(now);
                    } else {
                        r.out.monotonic_clock.push(now);
                    }
                }
                now
            }
            Mode::Replaying(r) => {
                let (stream, at) = if wall {
                    (&r.record.wall_clock, &mut r.wall_at)
                } else {
                    (&r.record.monotonic_clock, &mut r.mono_at)
                };
                if let Some(&v) = stream.get(*at) {
                    *at += 1;
                    return v;
                }
                let (n, last) = (*at + 1, stream.last().copied().unwrap_or(0));
                let note = r.end_note();
                let name = if wall { "wall" } else { "monotonic" };
                r.diverge(|| format!("{name} clock read {n} was not recorded ({note})"));
                last
            }
        }
    }

    fn random(&self, source: Source, real: &mut dyn Rng, dst: &mut [u8]) {
        match &mut *lock(&self.0) {
            Mode::Recording(r) => {
                real.fill_bytes(dst);
                if r.charge(dst.len() * 2) {
                    match source {
                        Source::Secure => r.out.secure_random.extend_from_slice(dst),
                        Source::Insecure => r.out.insecure_random.extend_from_slice(dst),
                    }
                }
            }
            Mode::Replaying(r) => {
                let (stream, at, name) = match source {
                    Source::Secure => (&r.secure, &mut r.secure_at, "secure"),
                    Source::Insecure => (&r.insecure, &mut r.insecure_at, "insecure"),
                };
                if let Some(bytes) = stream.get(*at..*at + dst.len()) {
                    dst.copy_from_slice(bytes);
                    *at += dst.len();
                    return;
                }
                dst.fill(0);
                let (from, total) = (*at, stream.len());
                let note = r.end_note();
                r.diverge(|| {
                    format!(
                        "{name} random bytes {from}.. were not recorded (the record has {total}; {note})"
                    )
                });
            }
        }
    }

    /// A KV call: live (and recorded) or served from the record.
    pub(crate) fn kv<T: KvAnswer>(
        &self,
        op: KvOp,
        key: &str,
        live: impl FnOnce() -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let recording = matches!(&*lock(&self.0), Mode::Recording(_));
        if recording {
            // The store call runs without the lock: clocks and random stay
            // readable from other futures meanwhile.
            let answer = live();
            let result = T::to_result(&answer);
            if let Mode::Recording(r) = &mut *lock(&self.0) {
                let size = CALL_BYTES + key.len() + kv_size(&result);
                if r.charge(size) {
                    r.out.calls.push(Call::Kv {
                        op,
                        key: key.to_owned(),
                        result,
                    });
                }
            }
            return answer;
        }
        match &mut *lock(&self.0) {
            Mode::Recording(_) => unreachable!("checked above; a tape never changes mode"),
            Mode::Replaying(r) => {
                let wanted = Call::Kv {
                    op,
                    key: key.to_owned(),
                    result: KvResult::Stored,
                };
                let Some(Call::Kv { result, .. }) = r.next_call(&wanted) else {
                    return Err(not_recorded());
                };
                T::from_result(result).unwrap_or_else(|| {
                    let n = r.call_at;
                    r.diverge(|| {
                        format!(
                            "call {n}: the recorded result of {} does not fit the call",
                            wanted.describe()
                        )
                    });
                    Err(not_recorded())
                })
            }
        }
    }

    /// The start of an HTTP request: where its exchange goes in the record,
    /// or its recorded answer.
    pub(crate) fn http_begin(&self, method: &str, url: &str) -> HttpTurn {
        match &mut *lock(&self.0) {
            Mode::Recording(r) => {
                let url = redact(url, &r.secrets);
                if !r.charge(CALL_BYTES + method.len() + url.len()) {
                    return HttpTurn::Record(None);
                }
                r.out.calls.push(Call::Http {
                    method: method.to_owned(),
                    url,
                    // Replaced when the request ends.
                    result: HttpResult::Error("connection".into()),
                });
                HttpTurn::Record(Some(r.out.calls.len() - 1))
            }
            Mode::Replaying(r) => {
                let wanted = Call::Http {
                    method: method.to_owned(),
                    url: redact(url, &r.secrets),
                    result: HttpResult::Error(String::new()),
                };
                let Some(Call::Http { result, .. }) = r.next_call(&wanted) else {
                    return HttpTurn::Replay(Box::new(Err(HttpError::HttpRequestDenied)));
                };
                let cut_by_cap = match &result {
                    HttpResult::Response { cut, .. } => cut.as_deref() == Some(RECORD_CAP),
                    HttpResult::Error(kind) => kind == RECORD_CAP,
                };
                if cut_by_cap {
                    let n = r.call_at;
                    r.diverge(|| {
                        format!(
                            "call {n}: the answer to {} was truncated at the record's size cap",
                            wanted.describe()
                        )
                    });
                }
                HttpTurn::Replay(Box::new(replayed_response(result)))
            }
        }
    }

    /// A recorded request failed: its kind goes into its slot.
    pub(crate) fn http_failed(&self, slot: Option<usize>, err: &HttpError) {
        let kind = http_error_kind(err);
        self.http_settle(slot, kind.len(), HttpResult::Error(kind.into()));
    }

    /// A recorded request got `response`: its head goes into its slot, and
    /// its body is recorded as the guest reads it.
    pub(crate) fn http_response(
        &self,
        slot: Option<usize>,
        response: http::Response<WasiBody>,
    ) -> http::Response<WasiBody> {
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let size = headers.iter().map(|(k, v)| k.len() + v.len() + 6).sum();
        let head = HttpResult::Response {
            status: response.status().as_u16(),
            headers,
            body: String::new(),
            cut: None,
        };
        match slot {
            Some(slot) if self.http_settle(Some(slot), size, head) => response.map(|inner| {
                TeeBody {
                    inner,
                    tape: self.clone(),
                    slot,
                }
                .boxed_unsync()
            }),
            _ => response,
        }
    }

    /// Puts `result` into `slot`; false when the record is full (the call
    /// stays, marked as cut by the record's cap).
    fn http_settle(&self, slot: Option<usize>, size: usize, result: HttpResult) -> bool {
        let Some(slot) = slot else { return false };
        let Mode::Recording(r) = &mut *lock(&self.0) else {
            return false;
        };
        let fits = r.charge(size);
        if let Some(Call::Http { result: slot, .. }) = r.out.calls.get_mut(slot) {
            *slot = if fits {
                result
            } else {
                HttpResult::Error(RECORD_CAP.into())
            };
        }
        fits
    }

    /// Body bytes of the response in `slot` as the guest reads them.
    fn http_body(&self, slot: usize, data: &[u8]) {
        if let Mode::Recording(r) = &mut *lock(&self.0) {
            let charged = r.charge(data.len() * 2);
            if let Some(Call::Http {
                result: HttpResult::Response { body, cut, .. },
                ..
            }) = r.out.calls.get_mut(slot)
                && cut.is_none()
            {
                if charged {
                    body.push_str(&hex::encode(data));
                } else {
                    *cut = Some(RECORD_CAP.into());
                }
            }
        }
    }

    /// The response body in `slot` ended in an error.
    fn http_cut(&self, slot: usize, err: &HttpError) {
        if let Mode::Recording(r) = &mut *lock(&self.0)
            && let Some(Call::Http {
                result: HttpResult::Response { cut, .. },
                ..
            }) = r.out.calls.get_mut(slot)
            && cut.is_none()
        {
            *cut = Some(http_error_kind(err).into());
        }
    }
}

/// Where `cut` says the record's own cap stopped a body.
const RECORD_CAP: &str = "record_cap";

/// What to do with an HTTP request on a tape.
pub(crate) enum HttpTurn {
    /// Send it; record its exchange in this slot (none: the record is full).
    Record(Option<usize>),
    /// Answer it from the record.
    Replay(Box<Result<http::Response<WasiBody>, HttpError>>),
}

fn redact(text: &str, secrets: &[String]) -> String {
    let mut text = text.to_owned();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        text = text.replace(s.as_str(), crate::capability::REDACTED);
    }
    text
}

fn not_recorded() -> KvError {
    KvError::Unavailable("replay: this call was not recorded".into())
}

fn kv_size(result: &KvResult) -> usize {
    match result {
        KvResult::Value(v) => v.as_ref().map_or(0, String::len),
        KvResult::Stored | KvResult::Deleted(_) => 0,
        KvResult::Keys(keys) => keys.iter().map(|k| k.len() + 3).sum(),
        KvResult::Error { message, .. } => message.len() + 16,
    }
}

/// The short kind of an HTTP failure, kept in the record.
fn http_error_kind(e: &HttpError) -> &'static str {
    match e {
        HttpError::HttpRequestDenied => "denied",
        HttpError::HttpResponseTimeout
        | HttpError::ConnectionTimeout
        | HttpError::ConnectionReadTimeout => "timeout",
        HttpError::HttpResponseBodySize(_) => "body_size",
        _ => "connection",
    }
}

/// The failure a recorded kind stands for.
fn http_error_of(kind: &str) -> HttpError {
    match kind {
        "denied" | RECORD_CAP => HttpError::HttpRequestDenied,
        "timeout" => HttpError::HttpResponseTimeout,
        "body_size" => HttpError::HttpResponseBodySize(None),
        _ => HttpError::ConnectionRefused,
    }
}

fn replayed_response(result: HttpResult) -> Result<http::Response<WasiBody>, HttpError> {
    let (status, headers, body, cut) = match result {
        HttpResult::Error(kind) => return Err(http_error_of(&kind)),
        HttpResult::Response {
            status,
            headers,
            body,
            cut,
        } => (status, headers, body, cut),
    };
    let mut builder = http::Response::builder().status(status);
    for (k, v) in &headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let body = ReplayBody {
        data: Some(Bytes::from(hex::decode(body).unwrap_or_default())),
        cut: cut.as_deref().map(http_error_of),
    };
    builder
        .body(body.boxed_unsync())
        .map_err(|_| HttpError::HttpProtocolError)
}

/// A recorded body: its bytes, then the error it ended in, if any.
struct ReplayBody {
    data: Option<Bytes>,
    cut: Option<HttpError>,
}

impl Body for ReplayBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        if let Some(data) = self.data.take().filter(|d| !d.is_empty()) {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.cut.take().map(Err))
    }
}

/// A live response body that copies what the guest reads into the record.
struct TeeBody {
    inner: WasiBody,
    tape: Tape,
    slot: usize,
}

impl Body for TeeBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.tape.http_body(self.slot, data);
                }
            }
            Poll::Ready(Some(Err(e))) => self.tape.http_cut(self.slot, e),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// A KV answer type: how it is kept in a record and read back.
pub(crate) trait KvAnswer: Sized {
    /// The answer as recorded.
    fn to_result(answer: &Result<Self, KvError>) -> KvResult {
        match answer {
            Ok(v) => v.to_value(),
            Err(e) => {
                let (case, message) = match e {
                    KvError::Denied(m) => ("denied", m),
                    KvError::Invalid(m) => ("invalid", m),
                    KvError::QuotaExceeded(m) => ("quota_exceeded", m),
                    KvError::Unavailable(m) => ("unavailable", m),
                };
                KvResult::Error {
                    case: case.into(),
                    message: message.clone(),
                }
            }
        }
    }

    /// The recorded answer, or `None` when it is not of this call's shape.
    fn from_result(result: KvResult) -> Option<Result<Self, KvError>> {
        if let KvResult::Error { case, message } = result {
            return Some(Err(match case.as_str() {
                "denied" => KvError::Denied(message),
                "invalid" => KvError::Invalid(message),
                "quota_exceeded" => KvError::QuotaExceeded(message),
                _ => KvError::Unavailable(message),
            }));
        }
        Self::from_value(result).map(Ok)
    }

    /// A successful answer as recorded.
    fn to_value(&self) -> KvResult;
    /// A successful answer read back.
    fn from_value(result: KvResult) -> Option<Self>;
}

impl KvAnswer for Option<Vec<u8>> {
    fn to_value(&self) -> KvResult {
        KvResult::Value(self.as_ref().map(hex::encode))
    }
    fn from_value(result: KvResult) -> Option<Self> {
        match result {
            KvResult::Value(v) => v
                .map(|h| hex::decode(h).ok())
                .map_or(Some(None), |b| b.map(Some)),
            _ => None,
        }
    }
}

impl KvAnswer for () {
    fn to_value(&self) -> KvResult {
        KvResult::Stored
    }
    fn from_value(result: KvResult) -> Option<Self> {
        matches!(result, KvResult::Stored).then_some(())
    }
}

impl KvAnswer for bool {
    fn to_value(&self) -> KvResult {
        KvResult::Deleted(*self)
    }
    fn from_value(result: KvResult) -> Option<Self> {
        match result {
            KvResult::Deleted(b) => Some(b),
            _ => None,
        }
    }
}

impl KvAnswer for Vec<String> {
    fn to_value(&self) -> KvResult {
        KvResult::Keys(self.clone())
    }
    fn from_value(result: KvResult) -> Option<Self> {
        match result {
            KvResult::Keys(k) => Some(k),
            _ => None,
        }
    }
}

struct TapeWall {
    tape: Tape,
    real: WallClock,
}

impl HostWallClock for TapeWall {
    fn resolution(&self) -> Duration {
        self.real.resolution()
    }

    fn now(&self) -> Duration {
        let ns = self.tape.clock(true, || self.real.now().as_nanos() as u64);
        Duration::from_nanos(ns)
    }
}

struct TapeMonotonic {
    tape: Tape,
    real: MonotonicClock,
}

impl HostMonotonicClock for TapeMonotonic {
    fn resolution(&self) -> u64 {
        self.real.resolution()
    }

    fn now(&self) -> u64 {
        self.tape.clock(false, || self.real.now())
    }
}

/// A WASI random source on a tape. Every draw goes through `fill`, so a
/// replay hands back the same bytes whatever the guest draws them as.
struct TapeRng {
    tape: Tape,
    source: Source,
    real: Box<dyn Rng + Send>,
}

impl TapeRng {
    fn fill(&mut self, dst: &mut [u8]) {
        self.tape.random(self.source, &mut *self.real, dst);
    }
}

impl rand_core::TryRng for TapeRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.fill(&mut b);
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.fill(&mut b);
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.fill(dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Outcome, TriggerKind};

    fn record(calls: Vec<Call>) -> AttemptRecord {
        AttemptRecord {
            context: AttemptContext {
                run_id: "r1".into(),
                tenant: "default".into(),
                task: "t".into(),
                step: "s".into(),
                attempt: 1,
                scheduled_for: "2026-12-01T00:00:00Z".into(),
                trigger: TriggerKind::Manual,
            },
            digest: "d".into(),
            input: "{}".into(),
            limits: Limits::default(),
            config: BTreeMap::new(),
            secrets: BTreeMap::new(),
            insecure_seed: 7,
            wall_clock: vec![10, 20],
            monotonic_clock: vec![5],
            secure_random: "0102030405".into(),
            insecure_random: String::new(),
            calls,
            truncated: false,
            bytes: 0,
            outcome: Outcome::Failed,
            output: None,
            error: Some("boom".into()),
        }
    }

    fn kv_get(key: &str, value: Option<&[u8]>) -> Call {
        Call::Kv {
            op: KvOp::Get,
            key: key.into(),
            result: KvResult::Value(value.map(hex::encode)),
        }
    }

    #[test]
    fn recording_keeps_every_stream_in_order() {
        let tape = Tape::recording(1 << 20, &[]);
        assert_eq!(tape.clock(true, || 3), 3);
        assert_eq!(tape.clock(false, || 9), 9);
        assert_eq!(tape.clock(true, || 4), 4);
        let mut real = wasmtime_wasi::Deterministic::new(vec![7, 8, 9]);
        let mut got = [0u8; 4];
        tape.random(Source::Secure, &mut real, &mut got);
        assert_eq!(got, [7, 8, 9, 7]);
        let v = tape.kv(KvOp::Get, "a", || Ok(Some(b"x".to_vec()))).unwrap();
        assert_eq!(v, Some(b"x".to_vec()));
        tape.kv(KvOp::Set, "a", || Ok(())).unwrap();
        let err = tape
            .kv::<bool>(KvOp::Delete, "b", || Err(KvError::Invalid("no".into())))
            .unwrap_err();
        assert!(matches!(err, KvError::Invalid(_)));
        let out = tape.take_recorded();
        assert_eq!(out.wall_clock, [3, 4]);
        assert_eq!(out.monotonic_clock, [9]);
        assert_eq!(out.secure_random, [7, 8, 9, 7]);
        assert_eq!(
            out.calls,
            [
                kv_get("a", Some(b"x")),
                Call::Kv {
                    op: KvOp::Set,
                    key: "a".into(),
                    result: KvResult::Stored
                },
                Call::Kv {
                    op: KvOp::Delete,
                    key: "b".into(),
                    result: KvResult::Error {
                        case: "invalid".into(),
                        message: "no".into()
                    }
                },
            ]
        );
        assert!(!out.truncated);
    }

    #[test]
    fn recording_stops_at_its_cap_without_changing_what_the_guest_gets() {
        let cap = 10 * CLOCK_BYTES + 5;
        let tape = Tape::recording(cap, &[]);
        for i in 0..50 {
            // The guest always gets the real value.
            assert_eq!(tape.clock(true, || i), i);
        }
        // Nothing is kept after the cut, not even what would still fit.
        let v = tape.kv(KvOp::Get, "k", || Ok(None)).unwrap();
        assert_eq!(v, None);
        let out = tape.take_recorded();
        assert!(out.truncated);
        assert_eq!(out.wall_clock, (0..10).collect::<Vec<u64>>());
        assert!(out.calls.is_empty());
        assert!(out.bytes as usize <= cap);
    }

    #[test]
    fn recorded_urls_have_secret_values_redacted() {
        let tape = Tape::recording(1 << 20, &["hunter2"]);
        let HttpTurn::Record(Some(slot)) = tape.http_begin("GET", "https://x/?key=hunter2") else {
            panic!("a recording tape records");
        };
        tape.http_failed(Some(slot), &HttpError::ConnectionTimeout);
        let out = tape.take_recorded();
        assert_eq!(
            out.calls,
            [Call::Http {
                method: "GET".into(),
                url: "https://x/?key=[redacted]".into(),
                result: HttpResult::Error("timeout".into()),
            }]
        );
    }

    #[test]
    fn replay_serves_streams_and_calls_in_order() {
        let tape = Tape::replaying(
            record(vec![kv_get("a", Some(b"1")), kv_get("b", None)]),
            &[],
        );
        let never = || -> u64 { panic!("a replay reads no real clock") };
        assert_eq!(tape.clock(true, never), 10);
        assert_eq!(tape.clock(false, never), 5);
        assert_eq!(tape.clock(true, never), 20);
        let mut real = wasmtime_wasi::Deterministic::new(vec![0xff]);
        let mut got = [0u8; 2];
        tape.random(Source::Secure, &mut real, &mut got);
        assert_eq!(got, [1, 2]);
        tape.random(Source::Secure, &mut real, &mut got);
        assert_eq!(got, [3, 4]);
        let live = || -> Result<Option<Vec<u8>>, KvError> { panic!("a replay calls no store") };
        assert_eq!(tape.kv(KvOp::Get, "a", live).unwrap(), Some(b"1".to_vec()));
        assert_eq!(tape.calls_left(), 1);
        assert_eq!(tape.kv(KvOp::Get, "b", live).unwrap(), None);
        assert_eq!(tape.divergence(), None);
        assert_eq!(tape.calls_left(), 0);
    }

    #[test]
    fn replay_reports_the_first_call_the_record_does_not_have() {
        let http = Call::Http {
            method: "GET".into(),
            url: "https://x/a".into(),
            result: HttpResult::Response {
                status: 200,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: hex::encode("hi"),
                cut: None,
            },
        };
        let tape = Tape::replaying(record(vec![kv_get("a", None), http]), &[]);
        let live = || -> Result<Option<Vec<u8>>, KvError> { unreachable!() };
        tape.kv(KvOp::Get, "a", live).unwrap();
        let HttpTurn::Replay(answer) = tape.http_begin("POST", "https://x/a") else {
            panic!("a replaying tape answers");
        };
        assert!(matches!(*answer, Err(HttpError::HttpRequestDenied)));
        assert!(tape.diverged());
        assert_eq!(
            tape.divergence().as_deref(),
            Some(
                "call 2: http POST https://x/a was not recorded (the record has http GET https://x/a there)"
            )
        );
        // Later misses do not replace the first.
        assert!(tape.kv(KvOp::Get, "zzz", live).is_err());
        tape.clock(true, || 0);
        tape.clock(true, || 0);
        tape.clock(true, || 0);
        assert!(tape.divergence().unwrap().starts_with("call 2: http POST"));
    }

    #[test]
    fn replay_past_a_stream_or_the_calls_says_so() {
        let tape = Tape::replaying(record(vec![]), &[]);
        let live = || -> Result<(), KvError> { unreachable!() };
        let err = tape.kv(KvOp::Set, "n", live).unwrap_err();
        assert!(matches!(err, KvError::Unavailable(_)));
        assert_eq!(
            tape.divergence().as_deref(),
            Some("call 1: kv set `n` was not recorded (the record has no more calls)")
        );

        let tape = Tape::replaying(record(vec![]), &[]);
        tape.clock(false, || 0);
        // Past the end: the last value again, and the divergence.
        assert_eq!(tape.clock(false, || 0), 5);
        assert_eq!(
            tape.divergence().as_deref(),
            Some("monotonic clock read 2 was not recorded (the attempt did not read it)")
        );

        let mut truncated = record(vec![]);
        truncated.truncated = true;
        let tape = Tape::replaying(truncated, &[]);
        let mut real = wasmtime_wasi::Deterministic::new(vec![0xff]);
        let mut got = [9u8; 8];
        tape.random(Source::Secure, &mut real, &mut got);
        assert_eq!(got, [0; 8]);
        assert_eq!(
            tape.divergence().as_deref(),
            Some(
                "secure random bytes 0.. were not recorded (the record has 5; the record was truncated at its size cap before it)"
            )
        );
    }

    #[test]
    fn replay_of_a_result_of_the_wrong_shape_is_a_divergence() {
        let tape = Tape::replaying(
            record(vec![Call::Kv {
                op: KvOp::Get,
                key: "a".into(),
                result: KvResult::Stored,
            }]),
            &[],
        );
        let live = || -> Result<Option<Vec<u8>>, KvError> { unreachable!() };
        assert!(tape.kv(KvOp::Get, "a", live).is_err());
        assert_eq!(
            tape.divergence().as_deref(),
            Some("call 1: the recorded result of kv get `a` does not fit the call")
        );
    }

    #[tokio::test]
    async fn a_replayed_response_has_the_recorded_head_and_body() {
        let http = Call::Http {
            method: "GET".into(),
            url: "https://x/a".into(),
            result: HttpResult::Response {
                status: 503,
                headers: vec![("retry-after".into(), "5".into())],
                body: hex::encode("busy"),
                cut: Some("timeout".into()),
            },
        };
        let tape = Tape::replaying(record(vec![http]), &[]);
        let HttpTurn::Replay(answer) = tape.http_begin("GET", "https://x/a") else {
            panic!("a replaying tape answers");
        };
        let response = answer.unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "5");
        let mut body = response.into_body();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "busy");
        assert!(matches!(
            body.frame().await,
            Some(Err(HttpError::HttpResponseTimeout))
        ));
        assert_eq!(tape.divergence(), None);
    }
}
