//! The replication stream: CopyData events in, standby status updates out.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use postgres_protocol::message::{backend, frontend};

use super::error::{ReplicationError, protocol};
use super::wire::{Backend, Connection, log_notice, server_error, show_tag, unexpected};
use crate::pg::lsn::format_lsn;

/// Microseconds from 1970-01-01 (Unix epoch) to 2000-01-01 (PostgreSQL's epoch).
pub(super) const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
/// `'w'`, WAL start, WAL end, send time.
const XLOG_DATA_HEADER_BYTES: usize = 1 + 8 + 8 + 8;
/// `'k'`, WAL end, send time, reply requested.
const KEEPALIVE_BYTES: usize = 1 + 8 + 8 + 1;
/// `'r'`, written, flushed, applied, client time, reply requested.
pub(super) const STATUS_UPDATE_BYTES: usize = 1 + 8 + 8 + 8 + 8 + 1;

/// One message of a replication stream.
#[derive(Clone, PartialEq, Eq)]
pub enum ReplicationEvent {
    /// `XLogData` (`'w'`): for logical replication, one message of the output plugin.
    XLogData {
        /// Where the data starts in the WAL, as the server reports it.
        wal_start: u64,
        /// The current end of WAL on the server.
        wal_end: u64,
        /// When the server sent it, in microseconds since the Unix epoch.
        server_time_us: i64,
        /// The payload: for `pgoutput`, one message for [`crate::pg::pgoutput`]. It
        /// shares the memory the message was read into: decode it, or copy it to keep it
        /// long.
        data: Bytes,
    },
    /// Primary keepalive (`'k'`).
    Keepalive {
        /// The current end of WAL on the server.
        wal_end: u64,
        /// When the server sent it, in microseconds since the Unix epoch.
        server_time_us: i64,
        /// The server asks for a [`ReplicationStream::send_status`] soon, or it will
        /// close the connection once `wal_sender_timeout` passes.
        reply_requested: bool,
    },
}

impl fmt::Debug for ReplicationEvent {
    /// Shows the length of `data`, not its bytes: they may be row values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicationEvent::XLogData {
                wal_start,
                wal_end,
                server_time_us,
                data,
            } => f
                .debug_struct("XLogData")
                .field("wal_start", &format_lsn(*wal_start))
                .field("wal_end", &format_lsn(*wal_end))
                .field("server_time_us", server_time_us)
                .field("data_len", &data.len())
                .finish(),
            ReplicationEvent::Keepalive {
                wal_end,
                server_time_us,
                reply_requested,
            } => f
                .debug_struct("Keepalive")
                .field("wal_end", &format_lsn(*wal_end))
                .field("server_time_us", server_time_us)
                .field("reply_requested", reply_requested)
                .finish(),
        }
    }
}

/// Parses the payload of a CopyData message of a replication stream: `XLogData` (`'w'`)
/// or a primary keepalive (`'k'`). Pure and checked: never panics, whatever the bytes.
/// The `data` of `XLogData` shares `payload`'s memory. A server time outside the range
/// of Unix-epoch microseconds is an error, and so is a keepalive of the wrong length or
/// with a reply flag other than 0 or 1.
pub fn parse_copy_data(payload: Bytes) -> Result<ReplicationEvent, ReplicationError> {
    let Some(&tag) = payload.first() else {
        return Err(protocol("an empty CopyData message"));
    };
    match tag {
        b'w' => {
            let (Some(wal_start), Some(wal_end), Some(time)) = (
                be_u64(&payload, 1),
                be_u64(&payload, 9),
                be_u64(&payload, 17),
            ) else {
                return Err(protocol(format!(
                    "an XLogData message of {} bytes, shorter than its {XLOG_DATA_HEADER_BYTES}-byte header",
                    payload.len()
                )));
            };
            let server_time_us = server_time(time, "XLogData")?;
            let data = payload.slice(XLOG_DATA_HEADER_BYTES..);
            Ok(ReplicationEvent::XLogData {
                wal_start,
                wal_end,
                server_time_us,
                data,
            })
        }
        b'k' => {
            let (Some(wal_end), Some(time), Some(&reply), KEEPALIVE_BYTES) = (
                be_u64(&payload, 1),
                be_u64(&payload, 9),
                payload.get(17),
                payload.len(),
            ) else {
                return Err(protocol(format!(
                    "a keepalive message of {} bytes, not {KEEPALIVE_BYTES}",
                    payload.len()
                )));
            };
            let reply_requested = match reply {
                0 => false,
                1 => true,
                other => {
                    return Err(protocol(format!(
                        "a keepalive whose reply flag is {other}, not 0 or 1"
                    )));
                }
            };
            Ok(ReplicationEvent::Keepalive {
                wal_end,
                server_time_us: server_time(time, "keepalive")?,
                reply_requested,
            })
        }
        other => Err(protocol(format!(
            "a CopyData message of unknown type {}",
            show_tag(other)
        ))),
    }
}

/// The big-endian u64 at `at`, if the bytes are there.
fn be_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let end = at.checked_add(8)?;
    let array: [u8; 8] = bytes.get(at..end)?.try_into().ok()?;
    Some(u64::from_be_bytes(array))
}

/// A server timestamp (microseconds since 2000-01-01, as sent) in Unix-epoch microseconds.
fn server_time(raw: u64, message: &str) -> Result<i64, ReplicationError> {
    i64::from_be_bytes(raw.to_be_bytes())
        .checked_add(PG_EPOCH_OFFSET_US)
        .ok_or_else(|| protocol(format!("a {message} whose send time is out of range")))
}

/// The payload of a standby status update (`'r'`).
pub(super) fn encode_status_update(
    written: u64,
    flushed: u64,
    applied: u64,
    client_time_pg_us: i64,
    reply_requested: bool,
) -> [u8; STATUS_UPDATE_BYTES] {
    let mut out = [0; STATUS_UPDATE_BYTES];
    let fields = [
        &[b'r'][..],
        &written.to_be_bytes(),
        &flushed.to_be_bytes(),
        &applied.to_be_bytes(),
        &client_time_pg_us.to_be_bytes(),
        &[u8::from(reply_requested)],
    ];
    for (slot, byte) in out.iter_mut().zip(fields.into_iter().flatten()) {
        *slot = *byte;
    }
    out
}

/// Now, in PostgreSQL's microseconds since 2000-01-01 (0 if the clock is unusable: the
/// server only uses it for its lag statistics).
pub(super) fn now_pg_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_micros()).ok())
        .and_then(|us| us.checked_sub(PG_EPOCH_OFFSET_US))
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamState {
    Streaming,
    /// The server ended the copy; its end was read to ReadyForQuery.
    Ended,
    /// A call failed: nothing more is read or sent.
    Failed,
}

/// A logical replication stream (CopyBoth mode), from
/// [`ReplicationClient::start_logical`].
///
/// Read it with [`ReplicationStream::next`]; acknowledge what is durable with
/// [`ReplicationStream::send_status`], and answer keepalives that request a reply
/// within the server's `wal_sender_timeout` (60 s by default), or the server closes the
/// connection. `next` waits as long as the server sends nothing; wrap it in a timeout
/// (the server sends a keepalive at least every half `wal_sender_timeout`).
pub struct ReplicationStream {
    pub(super) conn: Connection,
    pub(super) state: StreamState,
    /// The highest flush position sent (or the start position): never sent lower.
    pub(super) flushed_floor: u64,
}

impl fmt::Debug for ReplicationStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationStream")
            .field("state", &self.state)
            .field("usable", &!self.conn.busy)
            .field("flushed", &format_lsn(self.flushed_floor))
            .finish()
    }
}

impl ReplicationStream {
    /// The next event, or `None` once the server has ended the stream (it sent
    /// CopyDone; the end is answered and read to ReadyForQuery here).
    ///
    /// Cancel-safe: dropping the future loses nothing, so it can be raced against a
    /// timer in `tokio::select!`. After an error, later calls return
    /// [`ReplicationError::Unusable`].
    pub async fn next(&mut self) -> Result<Option<ReplicationEvent>, ReplicationError> {
        match self.state {
            StreamState::Streaming => {}
            StreamState::Ended => return Ok(None),
            StreamState::Failed => return Err(ReplicationError::Unusable),
        }
        if self.conn.busy {
            self.state = StreamState::Failed;
            return Err(ReplicationError::Unusable);
        }
        let result = self.read_event().await;
        if result.is_err() {
            self.state = StreamState::Failed;
        }
        result
    }

    async fn read_event(&mut self) -> Result<Option<ReplicationEvent>, ReplicationError> {
        loop {
            let message = match self.conn.read_message().await? {
                Backend::Message(message) => message,
                other @ Backend::CopyBothResponse => {
                    return Err(unexpected(&other, "in the replication stream"));
                }
            };
            match message {
                backend::Message::CopyData(body) => {
                    return parse_copy_data(body.into_bytes()).map(Some);
                }
                backend::Message::CopyDone => {
                    // Not cancel-safe from here: an interrupted end leaves `busy` set.
                    self.conn.busy = true;
                    self.conn.write_buf.clear();
                    frontend::copy_done(&mut self.conn.write_buf);
                    self.conn.send().await?;
                    self.conn
                        .drain_to_ready("after the server ended the replication stream")
                        .await?;
                    self.conn.busy = false;
                    self.state = StreamState::Ended;
                    tracing::info!("the server ended the replication stream");
                    return Ok(None);
                }
                backend::Message::CommandComplete(_) => {
                    // A walsender that shuts down (the server stopping) ends the stream
                    // with CommandComplete alone, once it has sent everything and we
                    // confirmed it, and exits: no CopyDone, no ReadyForQuery follows.
                    self.conn.busy = true;
                    self.state = StreamState::Ended;
                    tracing::info!("the server ended the replication stream (it is shutting down)");
                    return Ok(None);
                }
                backend::Message::ErrorResponse(body) => return Err(server_error(&body)),
                backend::Message::NoticeResponse(body) => log_notice(&body),
                backend::Message::ParameterStatus(_)
                | backend::Message::NotificationResponse(_) => {}
                other => {
                    return Err(unexpected(
                        &Backend::Message(other),
                        "in the replication stream",
                    ));
                }
            }
        }
    }

    /// Sends a standby status update (`'r'`): the positions `written`, `flushed` and
    /// `applied`, and whether the server should reply at once (with a keepalive).
    ///
    /// For a logical slot, `flushed` becomes the slot's `confirmed_flush_lsn`: the
    /// server may then discard every transaction that committed before it, and a new
    /// stream starts after it. Weir passes the stage's synced position: never beyond.
    /// The flush position sent never moves back: a `flushed` below the highest one
    /// sent on this stream, or below the stream's `start_lsn`, is sent as that value
    /// (older PostgreSQL releases set the slot's position to what they receive, even
    /// a smaller one).
    /// `written` and `applied` (informational for a logical slot, shown in
    /// `pg_stat_replication`) are sent as given.
    ///
    /// Not cancel-safe; after an error later calls return [`ReplicationError::Unusable`],
    /// and after the server ended the stream, [`ReplicationError::Closed`].
    pub async fn send_status(
        &mut self,
        written: u64,
        flushed: u64,
        applied: u64,
        reply_requested: bool,
    ) -> Result<(), ReplicationError> {
        match self.state {
            StreamState::Streaming => {}
            StreamState::Ended => return Err(ReplicationError::Closed),
            StreamState::Failed => return Err(ReplicationError::Unusable),
        }
        if let Err(error) = self.conn.begin() {
            self.state = StreamState::Failed;
            return Err(error);
        }
        let flushed = flushed.max(self.flushed_floor);
        let payload = encode_status_update(written, flushed, applied, now_pg_us(), reply_requested);
        self.conn.write_buf.clear();
        frontend::CopyData::new(&payload[..])
            .map_err(|_| protocol("cannot encode a status update"))?
            .write(&mut self.conn.write_buf);
        if let Err(error) = self.conn.send().await {
            self.state = StreamState::Failed;
            return Err(error);
        }
        self.conn.busy = false;
        self.flushed_floor = flushed;
        tracing::trace!(
            flushed = %format_lsn(flushed),
            reply_requested,
            "standby status update sent"
        );
        Ok(())
    }

    /// Ends the stream and closes the connection: sends CopyDone, reads (and drops) what
    /// the server still sends up to ReadyForQuery or the connection's end, then sends
    /// Terminate. Nothing is acknowledged: send the last status first. Data dropped here
    /// was not acknowledged, so it is delivered again by the next stream. A stream that
    /// had failed is just closed. Not cancel-safe (dropping it closes the connection).
    pub async fn stop(mut self) -> Result<(), ReplicationError> {
        match self.state {
            StreamState::Failed => return Ok(()),
            StreamState::Ended => {}
            StreamState::Streaming if self.conn.busy => return Ok(()),
            StreamState::Streaming => {
                self.conn.busy = true;
                self.conn.write_buf.clear();
                frontend::copy_done(&mut self.conn.write_buf);
                self.conn.send().await?;
                let mut dropped = 0u64;
                let mut error = None;
                loop {
                    let message = match self.conn.read_message().await {
                        Ok(Backend::Message(message)) => message,
                        Ok(other) => return Err(unexpected(&other, "while stopping")),
                        Err(ReplicationError::Closed) => break,
                        Err(other) => return Err(other),
                    };
                    match message {
                        backend::Message::ReadyForQuery(_) => break,
                        backend::Message::CopyData(_) => dropped = dropped.saturating_add(1),
                        backend::Message::ErrorResponse(body) => {
                            error.get_or_insert(server_error(&body));
                        }
                        backend::Message::NoticeResponse(body) => log_notice(&body),
                        backend::Message::CopyDone
                        | backend::Message::CommandComplete(_)
                        | backend::Message::ParameterStatus(_)
                        | backend::Message::NotificationResponse(_) => {}
                        other => {
                            return Err(unexpected(&Backend::Message(other), "while stopping"));
                        }
                    }
                }
                tracing::debug!(dropped, "replication stream stopped");
                if let Some(error) = error {
                    return Err(error);
                }
            }
        }
        self.conn.terminate().await;
        Ok(())
    }
}
