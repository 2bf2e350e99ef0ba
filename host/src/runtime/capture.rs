//! Bounded capture of a plugin's stdout, stderr and log records.
//!
//! A plugin may print without limit; the host keeps the first `cap` bytes and
//! counts the rest, then appends one marker line so a reader knows output was
//! cut. Writes never fail: a flood costs the plugin fuel and time, never the
//! host memory, and a plugin that prints a lot still finishes its work.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::model::{LogLevel, LogRecord};

/// The permit handed to a guest per write: small enough that a guest cannot make
/// the host allocate much for one `write-zeroes`.
const WRITE_PERMIT: usize = 64 << 10;
/// Longest message kept from a single log call; the rest is cut.
const MAX_LOG_MESSAGE: usize = 4 << 10;

#[derive(Debug, Default)]
struct Buffer {
    kept: Vec<u8>,
    dropped: u64,
}

/// A stdout/stderr sink keeping at most `cap` bytes. Clones share the buffer.
#[derive(Clone, Debug)]
pub(crate) struct CapturePipe {
    cap: usize,
    buffer: Arc<Mutex<Buffer>>,
}

impl CapturePipe {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            buffer: Arc::default(),
        }
    }

    fn append(&self, bytes: &[u8]) {
        // A poisoned lock only means another writer panicked mid-append; the
        // bytes are still a valid prefix, so keep going.
        let mut buf = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let room = self.cap.saturating_sub(buf.kept.len());
        let take = room.min(bytes.len());
        buf.kept.extend_from_slice(&bytes[..take]);
        buf.dropped += (bytes.len() - take) as u64;
    }

    /// The captured text, lossily decoded, with a marker when bytes were dropped.
    pub(crate) fn contents(&self) -> String {
        let buf = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::from_utf8_lossy(&buf.kept).into_owned();
        if buf.dropped > 0 {
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&truncation_marker(buf.dropped));
        }
        text
    }
}

/// The marker line appended to cut output.
pub(crate) fn truncation_marker(dropped_bytes: u64) -> String {
    format!("[ax: output truncated, {dropped_bytes} more bytes dropped]")
}

impl IsTerminal for CapturePipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturePipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturePipe {
    async fn ready(&mut self) {}
}

impl OutputStream for CapturePipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

impl AsyncWrite for CapturePipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Structured log records of one attempt, bounded by total bytes.
#[derive(Debug)]
pub(crate) struct LogSink {
    cap: usize,
    used: usize,
    dropped: u64,
    records: Vec<LogRecord>,
}

impl LogSink {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            used: 0,
            dropped: 0,
            records: Vec::new(),
        }
    }

    /// Keeps the record if it fits in what is left of the budget.
    pub(crate) fn push(&mut self, mut record: LogRecord) {
        truncate_utf8(&mut record.message, MAX_LOG_MESSAGE);
        let size = record.message.len()
            + record
                .fields
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        if self.dropped > 0 || self.used + size > self.cap {
            self.dropped += 1;
            return;
        }
        self.used += size;
        self.records.push(record);
    }

    /// The kept records, plus one marker record when some were dropped.
    pub(crate) fn finish(mut self, at_ms: u64) -> Vec<LogRecord> {
        if self.dropped > 0 {
            self.records.push(LogRecord {
                at_ms,
                level: LogLevel::Warn,
                message: format!("[ax: log truncated, {} more records dropped]", self.dropped),
                fields: Vec::new(),
            });
        }
        self.records
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn truncate_utf8(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let dropped = text.len() - end;
    text.truncate(end);
    text.push_str(&format!(" [ax: {dropped} bytes cut]"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_keeps_a_prefix_and_marks_the_cut() {
        let pipe = CapturePipe::new(8);
        pipe.append(b"hello ");
        pipe.append(b"world, again");
        assert_eq!(
            pipe.contents(),
            format!("hello wo\n{}", truncation_marker(10))
        );
    }

    #[test]
    fn pipe_under_its_cap_has_no_marker() {
        let pipe = CapturePipe::new(64);
        pipe.append(b"line\n");
        assert_eq!(pipe.contents(), "line\n");
    }

    #[test]
    fn log_sink_drops_past_budget_and_says_how_many() {
        let mut sink = LogSink::new(10);
        for i in 0..5 {
            sink.push(LogRecord {
                at_ms: i,
                level: LogLevel::Info,
                message: "abcd".into(),
                fields: vec![],
            });
        }
        let records = sink.finish(9);
        assert_eq!(records.len(), 3);
        assert!(records[2].message.contains("3 more records dropped"));
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        let mut text = "ééé".to_string();
        truncate_utf8(&mut text, 3);
        assert!(text.starts_with('é'));
        assert!(text.contains("bytes cut"));
    }
}
