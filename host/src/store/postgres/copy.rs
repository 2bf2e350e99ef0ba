//! Rows for a binary `COPY … FROM STDIN`, encoded into one buffer as the
//! server reads them ([`CopyRows`]) and sent in large messages.
//!
//! tokio-postgres's `BinaryCopyInWriter` encodes a row per call through
//! `ToSql` and hands the connection's thread a message every 4 KiB: for an
//! import's ~1 KiB rows, a wake-up of that thread every few rows, about a
//! fifth of ax's CPU in an import (docs/PERFORMANCE.md, *Import: rows
//! encoded straight into the COPY*). The format (PostgreSQL's *COPY*,
//! binary format): a signature, flags and an extension length, then per
//! row its field count and each field as a length and its bytes (text as
//! UTF-8, `bigint` as 8 bytes big-endian, `bytea` as is), then -1.

use std::pin::pin;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::SinkExt;

use super::{PgResult, Tx};

/// The binary format's header: signature, flags (none), extension (none).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// Bytes per message sent to the server.
const MESSAGE: usize = 1 << 20;

/// Rows of one `COPY`, encoded.
pub(super) struct CopyRows {
    buf: BytesMut,
    rows: usize,
}

impl Default for CopyRows {
    fn default() -> Self {
        let mut buf = BytesMut::with_capacity(1 << 16);
        buf.put_slice(HEADER);
        CopyRows { buf, rows: 0 }
    }
}

impl CopyRows {
    /// Starts a row of `fields` fields, which the caller then adds.
    pub(super) fn row(&mut self, fields: i16) -> &mut Self {
        self.rows += 1;
        self.buf.put_i16(fields);
        self
    }

    /// A `text` field.
    pub(super) fn text(&mut self, value: &str) -> &mut Self {
        self.bytea(value.as_bytes())
    }

    /// A `bytea` field.
    pub(super) fn bytea(&mut self, value: &[u8]) -> &mut Self {
        // A field over 2 GiB cannot be a row of PostgreSQL's (its limit
        // is 1 GiB), and the server refuses the length.
        self.buf
            .put_i32(i32::try_from(value.len()).unwrap_or(i32::MAX));
        self.buf.put_slice(value);
        self
    }

    /// A `bigint` field.
    pub(super) fn int8(&mut self, value: i64) -> &mut Self {
        self.buf.put_i32(8);
        self.buf.put_i64(value);
        self
    }

    /// Copies the rows in by `sql` (`COPY … FROM STDIN (FORMAT binary)`);
    /// nothing when there are none.
    pub(super) async fn send(self, tx: &Tx<'_>, sql: &str) -> PgResult<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut buf = self.buf;
        buf.put_i16(-1);
        let mut sink = pin!(tx.copy_in_raw(sql).await?);
        let mut all: Bytes = buf.freeze();
        while !all.is_empty() {
            let part = all.split_to(all.len().min(MESSAGE));
            sink.feed(part).await?;
        }
        sink.as_mut().finish().await?;
        Ok(())
    }
}
