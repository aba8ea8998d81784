//! A client of PostgreSQL's streaming replication protocol, for logical replication.
//!
//! tokio-postgres has no CopyBoth mode, so this is a small client of its own: the
//! message codec of `postgres-protocol` over a tokio TCP or Unix socket, framed in a
//! `BytesMut`. A [`ReplicationClient`] is a `replication=database` connection: it runs
//! replication commands and SQL with [`ReplicationClient::simple_query`], and
//! [`ReplicationClient::start_logical`] turns it into a [`ReplicationStream`] of
//! [`ReplicationEvent`]s (the formats are those of PostgreSQL's "Streaming Replication
//! Protocol", protocol-replication). The payload of an `XLogData` event is one message
//! of the output plugin, for `pgoutput` decoded by [`crate::source::pgoutput`].
//!
//! Guarantees:
//! * **No secrets in errors or logs.** The DSN and the password never appear in a
//!   [`ReplicationError`], a `Debug` output or a log line. A DSN that does not parse is
//!   reported without the parser's message (which may quote it); settings problems are
//!   constant texts. A server message may name the user, the database or other
//!   identifiers, never the password, which only ever leaves this module inside an
//!   authentication message to the server (cleartext, md5 hash or SCRAM proof).
//! * **Never panics on what the server sends.** Every frame is length-checked before
//!   it is parsed: a message announcing more than [`MAX_MESSAGE_BYTES`] (1 GiB, the
//!   largest PostgreSQL itself allocates) is refused. CopyData payloads are parsed by
//!   the pure, checked [`parse_copy_data`]; the rest by `postgres-protocol`'s parser
//!   on whole frames only. Anything unexpected is a [`ReplicationError::Protocol`]
//!   naming the message type, never its contents (no row data).
//! * **Bounded memory.** The read buffer grows with the bytes actually received, at
//!   most doubling, never with an announced length alone, and is released after a
//!   large message; a result of `simple_query` is limited to [`MAX_RESULT_BYTES`].
//! * **Acknowledgement only when asked, never backwards.** The slot's confirmed flush
//!   position moves only through [`ReplicationStream::send_status`], to the `flushed`
//!   value given, and never back (a smaller value is sent as the highest one sent
//!   before). Nothing is acknowledged on its own: not on a keepalive, not at
//!   [`ReplicationStream::stop`], not when a stream is dropped. So every transaction not
//!   acknowledged is delivered again by the next `start_logical` (at-least-once).
//! * **Cancellation.** [`ReplicationStream::next`] is cancel-safe (bytes read stay
//!   buffered), so it can be raced in `tokio::select!` against a status timer. Every
//!   other async method is not: dropped part way, it leaves the connection mid-exchange,
//!   and later calls return [`ReplicationError::Unusable`] instead of misreading replies.
//! * **After an error a stream is done.** Once `next` or `send_status` fails, later
//!   calls return [`ReplicationError::Unusable`]: drop the stream and reconnect from the
//!   last acknowledged position.
//!
//! * **TLS as libpq does it.** The DSN is read by [`crate::pgconn`]: `sslmode` (TLS
//!   after an SSLRequest over TCP, never over a Unix socket), `sslrootcert`,
//!   `sslcert`/`sslkey`, with the same rustls configuration as the SQL connections.
//!   SCRAM uses SCRAM-SHA-256-PLUS (`tls-server-end-point` channel binding) when TLS is
//!   up and the server offers it, unless `channel_binding=disable`;
//!   `channel_binding=require` refuses any other authentication.
//!
//! Out of scope: `sslnegotiation=direct`, GSSAPI, SSPI and Kerberos
//! authentication, physical replication, `target_session_attrs` and TCP keepalive
//! settings (ignored). A host is required (no default Unix socket directory), and so
//! is a user.

// Mechanical enforcement of the guarantees (and of documentation) outside the tests.
#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, SCRAM_SHA_256, SCRAM_SHA_256_PLUS, ScramSha256,
};
use postgres_protocol::message::{backend, frontend};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_postgres::config::Host;
use tokio_postgres::fallible_iterator::FallibleIterator;

use crate::config::{Dsn, quote_ident};
use crate::pgconn::{
    ChannelBindingMode, DsnError, PgSettings, SslMode, TlsError, TlsSetup, TlsSetupError,
};

/// The largest server message accepted, length field included: 1 GiB. PostgreSQL
/// allocates no more for one message (`MaxAllocSize`), so a larger length is a broken
/// or hostile peer, refused before anything is allocated for it.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The largest result [`ReplicationClient::simple_query`] keeps: 16 MiB of values (each
/// counted with the size of its `Option<String>`). It is meant for replication commands
/// and small queries, not for bulk reads.
pub const MAX_RESULT_BYTES: usize = 16 << 20;

/// A backend message header: type byte and 4-byte length (which counts itself).
const HEADER_BYTES: usize = 5;
/// Bytes asked of the socket per read, at least.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// After a message larger than this, the read buffer's allocation is let go.
const KEEP_CAPACITY_BYTES: usize = 4 << 20;
/// What a value of a `simple_query` result costs beyond its bytes (its `Option<String>`).
const VALUE_OVERHEAD_BYTES: usize = std::mem::size_of::<Option<String>>();
/// Longest server text (error message) kept in an error, in characters.
const MAX_SERVER_TEXT_CHARS: usize = 2000;
/// Microseconds from 1970-01-01 (Unix epoch) to 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;
/// `'w'`, WAL start, WAL end, send time.
const XLOG_DATA_HEADER_BYTES: usize = 1 + 8 + 8 + 8;
/// `'k'`, WAL end, send time, reply requested.
const KEEPALIVE_BYTES: usize = 1 + 8 + 8 + 1;
/// `'r'`, written, flushed, applied, client time, reply requested.
const STATUS_UPDATE_BYTES: usize = 1 + 8 + 8 + 8 + 8 + 1;
const DEFAULT_PORT: u16 = 5432;
/// `application_name` when the DSN sets none: how the slot's user shows in
/// `pg_stat_replication`.
const DEFAULT_APPLICATION_NAME: &str = "weir";

/// Errors of the replication client. None holds the DSN or a password.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The DSN or one of its settings cannot be used (a constant reason: never DSN text).
    #[error("invalid replication connection settings: {what}")]
    Config {
        /// What is wrong.
        what: &'static str,
    },
    /// The DSN cannot be used: a syntax error (nothing of it shown) or a TLS parameter
    /// (named, its value not shown).
    #[error("invalid replication connection settings: {0}")]
    Settings(#[from] DsnError),
    /// A TLS file of the DSN cannot be used (`sslrootcert`, `sslcert`, `sslkey`).
    #[error(transparent)]
    TlsSetup(#[from] TlsSetupError),
    /// TLS failed: the host and the reason (certificate not trusted, name mismatch,
    /// expired, the server without TLS).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An argument of a call cannot be sent (an empty name, a NUL byte).
    #[error("invalid replication request: {what}")]
    InvalidArgument {
        /// What is wrong.
        what: &'static str,
    },
    /// No connection could be opened (the error of the last host tried), or the
    /// `connect_timeout` of the DSN passed.
    #[error("cannot connect to the PostgreSQL server for replication")]
    Connect {
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// Reading or writing an open connection failed.
    #[error("the replication connection failed")]
    Io {
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// Authentication failed or is not possible: the server's message, or why the
    /// client cannot answer (a method not supported, no password, a bad server proof).
    #[error("PostgreSQL authentication failed: {message}{}", code_suffix(code.as_deref()))]
    Auth {
        /// The SQLSTATE, when the server reported the failure.
        code: Option<String>,
        /// The server's message (it may name the user, never the password), or ours.
        message: String,
    },
    /// The server reported an error (an `ErrorResponse`): its SQLSTATE and primary
    /// message, which may hold identifiers (slot, user, database names) or literals of
    /// the statement, never the password. DETAIL is left out: it can hold row values.
    #[error("PostgreSQL error {code}: {message}")]
    Server {
        /// The SQLSTATE, e.g. `42704`.
        code: String,
        /// The primary message, at most 2,000 characters.
        message: String,
    },
    /// The result of a `simple_query` is above [`MAX_RESULT_BYTES`]. The connection
    /// stays usable: the rest of the result was read and dropped.
    #[error(
        "the query result is larger than {limit} bytes: simple_query is meant for replication commands and small queries"
    )]
    ResultTooLarge {
        /// The limit, in bytes of values.
        limit: usize,
    },
    /// The server sent something this client does not expect or cannot parse. Names the
    /// message type and the problem, never the contents.
    #[error("replication protocol error: {what}")]
    Protocol {
        /// What was wrong.
        what: String,
    },
    /// The server closed the connection, or ended the replication stream before
    /// [`ReplicationStream::send_status`] was called.
    #[error("the PostgreSQL server closed the replication connection")]
    Closed,
    /// An earlier call failed or was cancelled part way through an exchange with the
    /// server, so what comes next cannot be read reliably.
    #[error(
        "the replication connection is unusable after an earlier failed or cancelled call: reconnect"
    )]
    Unusable,
}

impl ReplicationError {
    /// The SQLSTATE of a server or authentication error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ReplicationError::Server { code, .. } => Some(code),
            ReplicationError::Auth { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether the connection is still usable after this error of a
    /// [`ReplicationClient`] call: the exchange was completed or never started.
    fn leaves_client_usable(&self) -> bool {
        matches!(
            self,
            ReplicationError::Server { .. }
                | ReplicationError::InvalidArgument { .. }
                | ReplicationError::ResultTooLarge { .. }
        )
    }
}

fn code_suffix(code: Option<&str>) -> String {
    code.map(|c| format!(" (SQLSTATE {c})")).unwrap_or_default()
}

fn protocol(what: impl Into<String>) -> ReplicationError {
    ReplicationError::Protocol { what: what.into() }
}

/// What `IDENTIFY_SYSTEM` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemInfo {
    /// The cluster's unique system identifier.
    pub system_id: u64,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position (an LSN).
    pub xlogpos: u64,
    /// The database connected to (`None` for a physical replication connection).
    pub dbname: Option<String>,
}

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
        /// The payload: for `pgoutput`, one message for [`crate::source::pgoutput`]. It
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

/// Formats an LSN as PostgreSQL does: `16/B374D848`.
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Parses an LSN as PostgreSQL's `pg_lsn` input does: two groups of 1 to 8 hex digits
/// (either case) around a `/`, nothing else.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let part = |p: &str| {
        let hex = !p.is_empty() && p.len() <= 8 && p.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| u32::from_str_radix(p, 16).ok()).flatten()
    };
    Some((u64::from(part(high)?) << 32) | u64::from(part(low)?))
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
fn encode_status_update(
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
fn now_pg_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_micros()).ok())
        .and_then(|us| us.checked_sub(PG_EPOCH_OFFSET_US))
        .unwrap_or(0)
}

/// A message type byte for an error: the character if printable, else hex.
fn show_tag(tag: u8) -> String {
    if tag.is_ascii_graphic() {
        format!("'{}'", char::from(tag))
    } else {
        format!("0x{tag:02X}")
    }
}

/// The name of a backend message, for errors.
fn message_name(message: &backend::Message) -> &'static str {
    use backend::Message as M;
    match message {
        M::AuthenticationCleartextPassword
        | M::AuthenticationGss
        | M::AuthenticationKerberosV5
        | M::AuthenticationMd5Password(_)
        | M::AuthenticationOk
        | M::AuthenticationScmCredential
        | M::AuthenticationSspi
        | M::AuthenticationGssContinue(_)
        | M::AuthenticationSasl(_)
        | M::AuthenticationSaslContinue(_)
        | M::AuthenticationSaslFinal(_) => "Authentication",
        M::BackendKeyData(_) => "BackendKeyData",
        M::BindComplete => "BindComplete",
        M::CloseComplete => "CloseComplete",
        M::CommandComplete(_) => "CommandComplete",
        M::CopyData(_) => "CopyData",
        M::CopyDone => "CopyDone",
        M::CopyInResponse(_) => "CopyInResponse",
        M::CopyOutResponse(_) => "CopyOutResponse",
        M::DataRow(_) => "DataRow",
        M::EmptyQueryResponse => "EmptyQueryResponse",
        M::ErrorResponse(_) => "ErrorResponse",
        M::NoData => "NoData",
        M::NoticeResponse(_) => "NoticeResponse",
        M::NotificationResponse(_) => "NotificationResponse",
        M::ParameterDescription(_) => "ParameterDescription",
        M::ParameterStatus(_) => "ParameterStatus",
        M::ParseComplete => "ParseComplete",
        M::PortalSuspended => "PortalSuspended",
        M::ReadyForQuery(_) => "ReadyForQuery",
        M::RowDescription(_) => "RowDescription",
        _ => "unknown",
    }
}

fn unexpected(message: &Backend, during: &str) -> ReplicationError {
    let name = match message {
        Backend::Message(m) => message_name(m),
        Backend::CopyBothResponse => "CopyBothResponse",
    };
    protocol(format!("unexpected {name} message {during}"))
}

// ---- framing ------------------------------------------------------------------------

/// A backend message: one `postgres-protocol` knows, or CopyBothResponse, which it does
/// not (tokio-postgres has no replication mode).
enum Backend {
    Message(backend::Message),
    /// `'W'`: the server entered CopyBoth mode (checked, contents unused).
    CopyBothResponse,
}

/// The whole length (type byte included) of the frame at the front of `buf`, once its
/// header is in; an error if the length is impossible or above [`MAX_MESSAGE_BYTES`].
fn frame_len(buf: &[u8]) -> Result<Option<usize>, ReplicationError> {
    let Some(&[tag, a, b, c, d]) = buf.first_chunk::<HEADER_BYTES>() else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([a, b, c, d]);
    if len < 4 {
        return Err(protocol(format!(
            "a {} message whose length {len} is below 4",
            show_tag(tag)
        )));
    }
    match usize::try_from(len) {
        Ok(len) if len <= MAX_MESSAGE_BYTES => Ok(len.checked_add(1)),
        _ => Err(protocol(format!(
            "a {} message of {len} bytes, above the {MAX_MESSAGE_BYTES}-byte limit",
            show_tag(tag)
        ))),
    }
}

/// Takes the first message off `buf` if it is there whole; leaves `buf` as it is if not.
fn take_message(buf: &mut BytesMut) -> Result<Option<Backend>, ReplicationError> {
    let Some(total) = frame_len(buf)? else {
        return Ok(None);
    };
    if buf.len() < total {
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    let tag = frame.first().copied().unwrap_or_default();
    if tag == b'W' {
        let body = frame.get(HEADER_BYTES..).unwrap_or_default();
        return parse_copy_both_response(body).map(|()| Some(Backend::CopyBothResponse));
    }
    match backend::Message::parse(&mut frame) {
        Ok(Some(message)) if frame.is_empty() => Ok(Some(Backend::Message(message))),
        Ok(_) => Err(protocol(format!(
            "a {} message that does not fill its frame",
            show_tag(tag)
        ))),
        Err(_) => Err(protocol(format!(
            "a malformed or unknown {} message",
            show_tag(tag)
        ))),
    }
}

/// Checks a CopyBothResponse body: overall format, column count, one format per column.
fn parse_copy_both_response(body: &[u8]) -> Result<(), ReplicationError> {
    let bad = || protocol("a malformed CopyBothResponse message");
    let (&format, rest) = body.split_first().ok_or_else(bad)?;
    let (count, formats) = rest.split_first_chunk::<2>().ok_or_else(bad)?;
    let count = usize::try_from(i16::from_be_bytes(*count)).map_err(|_| bad())?;
    let valid = |f: &[u8]| matches!(f, [0, 0] | [0, 1]);
    if format > 1 || Some(formats.len()) != count.checked_mul(2) || !formats.chunks(2).all(valid) {
        return Err(bad());
    }
    Ok(())
}

/// The SQLSTATE and message of an ErrorResponse, as a server error.
fn server_error(body: &backend::ErrorResponseBody) -> ReplicationError {
    match error_fields(&mut body.fields()) {
        Ok((code, message)) => ReplicationError::Server { code, message },
        Err(e) => e,
    }
}

/// An ErrorResponse during startup: SQLSTATE class 28 (invalid authorization, such as a
/// wrong password or no pg_hba.conf entry) is an authentication error.
fn startup_error(body: &backend::ErrorResponseBody) -> ReplicationError {
    match server_error(body) {
        ReplicationError::Server { code, message } if code.starts_with("28") => {
            ReplicationError::Auth {
                code: Some(code),
                message,
            }
        }
        other => other,
    }
}

/// `(SQLSTATE, message)` of error or notice fields; both are required.
fn error_fields(
    fields: &mut backend::ErrorFields<'_>,
) -> Result<(String, String), ReplicationError> {
    let (mut code, mut message) = (None, None);
    loop {
        match fields.next() {
            Ok(Some(field)) => match field.type_() {
                b'C' => code = Some(server_text(field.value_bytes())),
                b'M' => message = Some(server_text(field.value_bytes())),
                _ => {}
            },
            Ok(None) => break,
            Err(_) => return Err(protocol("malformed fields in an ErrorResponse")),
        }
    }
    match (code, message) {
        (Some(code), Some(message)) => Ok((code, message)),
        _ => Err(protocol("an ErrorResponse without its SQLSTATE or message")),
    }
}

/// Server text as a bounded `String` (lossy: before startup ends its encoding is unknown).
fn server_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_SERVER_TEXT_CHARS)
        .collect()
}

/// Logs a notice by severity and SQLSTATE only: its text may hold values.
fn log_notice(body: &backend::NoticeResponseBody) {
    let (mut severity, mut code) = (String::new(), String::new());
    let mut fields = body.fields();
    while let Ok(Some(field)) = fields.next() {
        match field.type_() {
            b'V' => severity = server_text(field.value_bytes()),
            b'C' => code = server_text(field.value_bytes()),
            _ => {}
        }
    }
    if severity == "WARNING" {
        tracing::warn!(%severity, %code, "PostgreSQL warning on the replication connection");
    } else {
        tracing::debug!(%severity, %code, "PostgreSQL notice on the replication connection");
    }
}

/// The values of a DataRow as UTF-8 text, and the memory they take (bytes plus
/// [`VALUE_OVERHEAD_BYTES`] each).
fn data_row(
    body: &backend::DataRowBody,
    columns: usize,
) -> Result<(Vec<Option<String>>, usize), ReplicationError> {
    let bad = || protocol("a malformed DataRow message");
    let buffer = body.buffer();
    let mut ranges = body.ranges();
    let mut row = Vec::with_capacity(columns);
    let mut size = 0usize;
    while let Some(range) = ranges.next().map_err(|_| bad())? {
        if row.len() >= columns {
            return Err(protocol(
                "a DataRow with more values than its RowDescription",
            ));
        }
        let value = match range {
            None => None,
            Some(range) => {
                let bytes = buffer.get(range).ok_or_else(bad)?;
                size = size.saturating_add(bytes.len());
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| protocol("a DataRow value that is not UTF-8"))?;
                Some(text.to_owned())
            }
        };
        size = size.saturating_add(VALUE_OVERHEAD_BYTES);
        row.push(value);
    }
    if row.len() != columns {
        return Err(protocol(
            "a DataRow with fewer values than its RowDescription",
        ));
    }
    Ok((row, size))
}

/// The number of columns of a RowDescription (every field is checked).
fn row_columns(body: &backend::RowDescriptionBody) -> Result<usize, ReplicationError> {
    body.fields()
        .count()
        .map_err(|_| protocol("a malformed RowDescription message"))
}

// ---- the connection -----------------------------------------------------------------

/// The byte stream to the server: TCP, a Unix socket, or (in tests) anything else.
trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// A connection after startup: the socket and its buffers.
struct Connection {
    socket: Box<dyn Socket>,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Set while an exchange with the server is under way; still set when a call
    /// starts, it means an earlier call stopped part way through one.
    busy: bool,
    server_version: Option<String>,
}

impl Connection {
    fn new(socket: Box<dyn Socket>) -> Connection {
        Connection {
            socket,
            read_buf: BytesMut::new(),
            write_buf: BytesMut::new(),
            busy: false,
            server_version: None,
        }
    }

    /// Marks the start of an exchange; refuses if an earlier one was left unfinished.
    fn begin(&mut self) -> Result<(), ReplicationError> {
        if self.busy {
            return Err(ReplicationError::Unusable);
        }
        self.busy = true;
        Ok(())
    }

    /// Sends what is in the write buffer.
    async fn send(&mut self) -> Result<(), ReplicationError> {
        let io = |source| ReplicationError::Io { source };
        self.socket.write_all(&self.write_buf).await.map_err(io)?;
        self.socket.flush().await.map_err(io)?;
        self.write_buf.clear();
        Ok(())
    }

    /// The next message from the server. Cancel-safe: bytes read stay in the buffer.
    async fn read_message(&mut self) -> Result<Backend, ReplicationError> {
        loop {
            let before = self.read_buf.len();
            if let Some(message) = take_message(&mut self.read_buf)? {
                // After a large message, let go of its allocation (which the message, or
                // the data taken from it, keeps as long as it needs): keep a copy of the
                // few bytes read past it only.
                if before.saturating_sub(self.read_buf.len()) > KEEP_CAPACITY_BYTES {
                    self.read_buf = BytesMut::from(&self.read_buf[..]);
                }
                return Ok(message);
            }
            let wanted = frame_len(&self.read_buf)?.unwrap_or(HEADER_BYTES);
            let missing = wanted.saturating_sub(self.read_buf.len());
            // Grow with what was received (at most doubling), never by an announced
            // length alone: a peer announcing 1 GiB must send it to make us hold it.
            let step = missing
                .min(self.read_buf.len().max(READ_CHUNK_BYTES))
                .max(READ_CHUNK_BYTES);
            self.read_buf.reserve(step);
            let read = self.socket.read_buf(&mut self.read_buf).await;
            if read.map_err(|source| ReplicationError::Io { source })? == 0 {
                return Err(ReplicationError::Closed);
            }
        }
    }

    /// Reads to ReadyForQuery after a command; the first ErrorResponse is returned.
    async fn drain_to_ready(&mut self, during: &str) -> Result<(), ReplicationError> {
        let mut error = None;
        loop {
            match self.read_message().await? {
                Backend::Message(backend::Message::ReadyForQuery(_)) => break,
                Backend::Message(backend::Message::ErrorResponse(body)) => {
                    error.get_or_insert(server_error(&body));
                }
                Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(
                    backend::Message::CommandComplete(_)
                    | backend::Message::ParameterStatus(_)
                    | backend::Message::NotificationResponse(_),
                ) => {}
                other => return Err(unexpected(&other, during)),
            }
        }
        error.map_or(Ok(()), Err)
    }

    /// Sends Terminate and shuts the socket down (best effort: the server may be gone).
    async fn terminate(mut self) {
        self.write_buf.clear();
        frontend::terminate(&mut self.write_buf);
        if self.send().await.is_ok() {
            let _ = self.socket.shutdown().await;
        }
    }

    async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        self.write_buf.clear();
        frontend::query(sql, &mut self.write_buf).map_err(|_| {
            ReplicationError::InvalidArgument {
                what: "the SQL holds a NUL byte or is too long",
            }
        })?;
        self.send().await?;
        let (mut rows, mut columns, mut size) = (Vec::new(), None, 0usize);
        let (mut error, mut too_large) = (None, false);
        loop {
            let message = match self.read_message().await? {
                Backend::Message(message) => message,
                other @ Backend::CopyBothResponse => {
                    return Err(unexpected(&other, "in a simple query (use start_logical)"));
                }
            };
            match message {
                backend::Message::RowDescription(body) => columns = Some(row_columns(&body)?),
                backend::Message::DataRow(body) => {
                    let Some(columns) = columns else {
                        return Err(protocol("a DataRow before its RowDescription"));
                    };
                    let (row, row_size) = data_row(&body, columns)?;
                    size = size.saturating_add(row_size);
                    if size > MAX_RESULT_BYTES {
                        too_large = true;
                        rows = Vec::new();
                    } else {
                        rows.push(row);
                    }
                }
                backend::Message::CommandComplete(_) | backend::Message::EmptyQueryResponse => {
                    columns = None;
                }
                backend::Message::ErrorResponse(body) => {
                    error.get_or_insert(server_error(&body));
                }
                backend::Message::ReadyForQuery(_) => break,
                backend::Message::NoticeResponse(body) => log_notice(&body),
                backend::Message::ParameterStatus(_)
                | backend::Message::NotificationResponse(_) => {}
                other => {
                    return Err(unexpected(
                        &Backend::Message(other),
                        "in a simple query (COPY is not supported)",
                    ));
                }
            }
        }
        match (error, too_large) {
            (Some(error), _) => Err(error),
            (None, true) => Err(ReplicationError::ResultTooLarge {
                limit: MAX_RESULT_BYTES,
            }),
            (None, false) => Ok(rows),
        }
    }
}

// ---- connecting ---------------------------------------------------------------------

/// Where to connect: one host of the DSN. TCP targets carry the name the server's
/// certificate is checked against (the host, else the address).
#[derive(Debug)]
enum Target {
    Tcp(String, u16),
    Addr(SocketAddr, String),
    Unix(PathBuf),
}

/// The TLS state of a connection after the SSLRequest, for authentication.
#[derive(Debug, Default)]
struct Binding {
    /// TLS is up.
    tls: bool,
    /// The `tls-server-end-point` data, when the server's certificate has one.
    end_point: Option<Vec<u8>>,
}

/// What the startup packet and authentication need. Not `Debug`: it holds the password.
struct Startup<'a> {
    user: &'a str,
    password: Option<&'a [u8]>,
    database: Option<&'a str>,
    application_name: &'a str,
    options: Option<&'a str>,
    channel_binding: ChannelBindingMode,
}

/// The hosts of a DSN in order, each with its port (and `hostaddr` when given).
fn targets(config: &tokio_postgres::Config) -> Result<Vec<Target>, ReplicationError> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let count = hosts.len().max(addrs.len());
    if count == 0 {
        return Err(ReplicationError::Config {
            what: "no host: set host (a name, an address or a Unix socket directory)",
        });
    }
    if !addrs.is_empty() && !hosts.is_empty() && addrs.len() != hosts.len() {
        return Err(ReplicationError::Config {
            what: "hostaddr must list as many addresses as host lists hosts",
        });
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(ReplicationError::Config {
            what: "port must be one port, or as many ports as hosts",
        });
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let port = match ports {
            [] => DEFAULT_PORT,
            [port] => *port,
            ports => ports.get(i).copied().unwrap_or(DEFAULT_PORT),
        };
        let target = match (addrs.get(i), hosts.get(i)) {
            (Some(addr), Some(Host::Tcp(host))) => {
                Target::Addr(SocketAddr::new(*addr, port), host.clone())
            }
            (Some(addr), _) => Target::Addr(SocketAddr::new(*addr, port), addr.to_string()),
            (None, Some(Host::Tcp(host))) => match host.parse::<IpAddr>() {
                Ok(ip) => Target::Addr(SocketAddr::new(ip, port), host.clone()),
                Err(_) => Target::Tcp(host.clone(), port),
            },
            (None, Some(Host::Unix(dir))) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            (None, None) => continue,
        };
        out.push(target);
    }
    Ok(out)
}

async fn open(target: &Target) -> io::Result<Box<dyn Socket>> {
    Ok(match target {
        Target::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
        Target::Addr(addr, _) => {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
        Target::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
    })
}

/// Startup packet, authentication, and the parameters up to ReadyForQuery.
async fn start_up(
    socket: Box<dyn Socket>,
    startup: &Startup<'_>,
    binding: &Binding,
) -> Result<Connection, ReplicationError> {
    let mut conn = Connection::new(socket);
    // Output plugins print values with the walsender's settings: pin the ones the
    // value decoder relies on (UTF-8, ISO dates, UTC, floats that round-trip).
    let mut parameters = vec![
        ("user", startup.user),
        ("replication", "database"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "UTC"),
        ("extra_float_digits", "3"),
        ("application_name", startup.application_name),
    ];
    if let Some(database) = startup.database {
        parameters.push(("database", database));
    }
    if let Some(options) = startup.options {
        parameters.push(("options", options));
    }
    frontend::startup_message(parameters, &mut conn.write_buf).map_err(|_| {
        ReplicationError::Config {
            what: "a connection setting holds a NUL byte",
        }
    })?;
    conn.send().await?;
    authenticate(&mut conn, startup, binding).await?;
    loop {
        match conn.read_message().await? {
            Backend::Message(backend::Message::ReadyForQuery(_)) => break,
            Backend::Message(backend::Message::ParameterStatus(body)) => {
                if body.name().is_ok_and(|name| name == "server_version") {
                    conn.server_version = body.value().ok().map(|v| server_text(v.as_bytes()));
                }
            }
            Backend::Message(backend::Message::BackendKeyData(_)) => {}
            Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
            Backend::Message(backend::Message::ErrorResponse(body)) => {
                return Err(startup_error(&body));
            }
            other => return Err(unexpected(&other, "during startup")),
        }
    }
    Ok(conn)
}

/// Answers the server's authentication request: trust, cleartext, md5 or SCRAM-SHA-256.
/// One request is answered; after it only AuthenticationOk (or an error) is accepted, and
/// a SCRAM exchange must end with a server signature that verifies.
async fn authenticate(
    conn: &mut Connection,
    startup: &Startup<'_>,
    binding: &Binding,
) -> Result<(), ReplicationError> {
    let auth = |message: &str| ReplicationError::Auth {
        code: None,
        message: message.to_owned(),
    };
    let binding_required = startup.channel_binding == ChannelBindingMode::Require;
    let without_binding = || {
        auth(
            "channel_binding=require, but the server did not authenticate with SCRAM-SHA-256-PLUS (trust, a password, md5 or a certificate): use SCRAM with TLS, or remove channel_binding=require",
        )
    };
    let password = || {
        startup.password.ok_or_else(|| {
            auth("the server asks for a password and the connection settings hold none")
        })
    };
    let bad_password = || ReplicationError::Config {
        what: "the password holds a NUL byte or is too long",
    };
    let method = match next_auth_message(conn).await? {
        backend::Message::AuthenticationOk if binding_required => return Err(without_binding()),
        backend::Message::AuthenticationOk => return Ok(()),
        backend::Message::AuthenticationCleartextPassword
        | backend::Message::AuthenticationMd5Password(_)
            if binding_required =>
        {
            return Err(without_binding());
        }
        backend::Message::AuthenticationCleartextPassword => {
            frontend::password_message(password()?, &mut conn.write_buf)
                .map_err(|_| bad_password())?;
            conn.send().await?;
            "cleartext"
        }
        backend::Message::AuthenticationMd5Password(body) => {
            let hash = md5_hash(startup.user.as_bytes(), password()?, body.salt());
            frontend::password_message(hash.as_bytes(), &mut conn.write_buf)
                .map_err(|_| bad_password())?;
            conn.send().await?;
            "md5"
        }
        backend::Message::AuthenticationSasl(body) => {
            let mut mechanisms = body.mechanisms();
            let (mut scram_offered, mut plus_offered) = (false, false);
            while let Some(mechanism) = mechanisms
                .next()
                .map_err(|_| protocol("a malformed AuthenticationSASL message"))?
            {
                scram_offered |= mechanism == SCRAM_SHA_256;
                plus_offered |= mechanism == SCRAM_SHA_256_PLUS;
            }
            let end_point = binding
                .end_point
                .as_ref()
                .filter(|_| startup.channel_binding != ChannelBindingMode::Disable);
            let (mechanism, channel_binding) = match end_point {
                Some(data) if plus_offered => (
                    SCRAM_SHA_256_PLUS,
                    ChannelBinding::tls_server_end_point(data.clone()),
                ),
                _ if binding_required && !binding.tls => {
                    return Err(auth(
                        "channel_binding=require needs TLS, and this connection has none: set sslmode=require or stronger (a Unix socket never has TLS)",
                    ));
                }
                _ if binding_required => {
                    return Err(auth(
                        "channel_binding=require, but the server does not offer SCRAM-SHA-256-PLUS over this TLS connection (or its certificate's signature algorithm has no channel binding)",
                    ));
                }
                // TLS with binding data, the server not offering PLUS: say so ("y").
                Some(_) => (SCRAM_SHA_256, ChannelBinding::unrequested()),
                None => (SCRAM_SHA_256, ChannelBinding::unsupported()),
            };
            if mechanism == SCRAM_SHA_256 && !scram_offered {
                return Err(auth(
                    "the server offers no SASL mechanism but SCRAM-SHA-256-PLUS, which needs TLS: set sslmode=require or stronger",
                ));
            }
            scram(conn, password()?, mechanism, channel_binding).await?;
            if mechanism == SCRAM_SHA_256_PLUS {
                "scram-sha-256-plus"
            } else {
                "scram-sha-256"
            }
        }
        backend::Message::AuthenticationKerberosV5
        | backend::Message::AuthenticationGss
        | backend::Message::AuthenticationSspi
        | backend::Message::AuthenticationScmCredential => {
            return Err(auth(
                "the server asks for GSSAPI, SSPI, Kerberos or SCM authentication, which this client does not support",
            ));
        }
        other => {
            return Err(unexpected(
                &Backend::Message(other),
                "during authentication",
            ));
        }
    };
    match next_auth_message(conn).await? {
        backend::Message::AuthenticationOk => {
            tracing::debug!(method, "authenticated on the replication connection");
            Ok(())
        }
        other => Err(unexpected(
            &Backend::Message(other),
            "after the password was sent",
        )),
    }
}

/// The next message of authentication: an ErrorResponse becomes the error, notices are logged.
async fn next_auth_message(conn: &mut Connection) -> Result<backend::Message, ReplicationError> {
    loop {
        match conn.read_message().await? {
            Backend::Message(backend::Message::ErrorResponse(body)) => {
                return Err(startup_error(&body));
            }
            Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
            Backend::Message(message) => return Ok(message),
            other @ Backend::CopyBothResponse => {
                return Err(unexpected(&other, "during authentication"));
            }
        }
    }
}

/// SCRAM-SHA-256 (with `tls-server-end-point` channel binding for
/// SCRAM-SHA-256-PLUS): client-first, server-first, client-final, server-final, whose
/// signature proves the server knows the password (and, with PLUS, that the TLS
/// connection ends at the server that holds the certificate).
async fn scram(
    conn: &mut Connection,
    password: &[u8],
    mechanism: &str,
    channel_binding: ChannelBinding,
) -> Result<(), ReplicationError> {
    let auth = |message: &str| ReplicationError::Auth {
        code: None,
        message: message.to_owned(),
    };
    let mut scram = ScramSha256::new(password, channel_binding);
    frontend::sasl_initial_response(mechanism, scram.message(), &mut conn.write_buf)
        .map_err(|_| protocol("cannot encode the SCRAM client-first message"))?;
    conn.send().await?;
    let backend::Message::AuthenticationSaslContinue(body) = next_auth_message(conn).await? else {
        return Err(protocol("expected the SCRAM server-first message"));
    };
    scram
        .update(body.data())
        .map_err(|_| auth("the server's SCRAM-SHA-256 challenge is malformed"))?;
    frontend::sasl_response(scram.message(), &mut conn.write_buf)
        .map_err(|_| protocol("cannot encode the SCRAM client-final message"))?;
    conn.send().await?;
    let backend::Message::AuthenticationSaslFinal(body) = next_auth_message(conn).await? else {
        return Err(protocol("expected the SCRAM server-final message"));
    };
    scram.finish(body.data()).map_err(|_| {
        auth("the server's SCRAM-SHA-256 signature does not verify: it does not know the password")
    })
}

// ---- the client -----------------------------------------------------------------------

/// A `replication=database` connection to PostgreSQL, before streaming.
///
/// It runs replication commands (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`, ...) and
/// SQL through [`ReplicationClient::simple_query`], then becomes a
/// [`ReplicationStream`] with [`ReplicationClient::start_logical`]. Dropping it closes
/// the connection.
pub struct ReplicationClient {
    conn: Connection,
}

impl fmt::Debug for ReplicationClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationClient")
            .field("server_version", &self.conn.server_version)
            .field("usable", &!self.conn.busy)
            .finish()
    }
}

impl ReplicationClient {
    /// Connects and authenticates.
    ///
    /// The DSN is parsed by `tokio_postgres::Config` (URL or key=value form); used are
    /// `host` (names, addresses or Unix socket directories, tried in order), `hostaddr`,
    /// `port`, `user`, `password`, `dbname`, `application_name` (default `weir`),
    /// `options` and `connect_timeout` (for each host: socket, authentication and
    /// startup). The next host is tried only when a host cannot be reached; an
    /// authentication or server error is returned at once. The startup packet asks for
    /// `replication=database` and `client_encoding=UTF8`, so text (including pgoutput's
    /// text values) arrives in UTF-8. Authentication: trust, cleartext password, md5,
    /// and SCRAM-SHA-256 (SCRAM-SHA-256-PLUS over TLS). TLS follows the DSN's `sslmode`
    /// and its files (see [`crate::pgconn`]), with the same rustls configuration as the
    /// SQL connections.
    pub async fn connect(dsn: &Dsn) -> Result<ReplicationClient, ReplicationError> {
        let settings = PgSettings::from_dsn(dsn)?;
        let tls = TlsSetup::new(&settings.ssl)?;
        let config = settings.config();
        let user = config.get_user().ok_or(ReplicationError::Config {
            what: "no user: set user in the DSN",
        })?;
        let startup = Startup {
            user,
            password: config.get_password(),
            database: config.get_dbname(),
            application_name: config
                .get_application_name()
                .unwrap_or(DEFAULT_APPLICATION_NAME),
            options: config.get_options(),
            channel_binding: settings.ssl.channel_binding,
        };
        let timeout = config.get_connect_timeout().copied();
        let targets = targets(config)?;
        let mut last_error = None;
        let mode = settings.ssl.mode;
        for (attempt, target) in targets.iter().enumerate() {
            let mut result = connect_to(target, &startup, timeout, mode, tls.as_ref(), false).await;
            // sslmode=allow: refused in clear (pg_hba.conf), try again with TLS as libpq does.
            if mode == SslMode::Allow
                && !matches!(target, Target::Unix(_))
                && matches!(&result, Err(ReplicationError::Auth { code: Some(c), .. }) if c.starts_with("28"))
            {
                tracing::debug!(
                    "the server refused a replication connection without TLS; trying TLS (sslmode=allow)"
                );
                result = connect_to(target, &startup, timeout, mode, tls.as_ref(), true).await;
            }
            match result {
                Ok((conn, tls)) => {
                    let tcp = !matches!(target, Target::Unix(_));
                    tracing::debug!(
                        tcp,
                        tls,
                        server_version = conn.server_version.as_deref().unwrap_or(""),
                        "replication connection ready"
                    );
                    return Ok(ReplicationClient { conn });
                }
                Err(error @ ReplicationError::Connect { .. }) => {
                    tracing::debug!(attempt, %error, "replication connection attempt failed");
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or(ReplicationError::Config {
            what: "no host to connect to",
        }))
    }

    /// The server's `server_version`, as reported at startup.
    pub fn server_version(&self) -> Option<&str> {
        self.conn.server_version.as_deref()
    }

    /// Runs SQL or a replication command with the simple query protocol and returns the
    /// rows of every statement, concatenated, as text (`None` for NULL).
    ///
    /// A server error is [`ReplicationError::Server`] (SQLSTATE and message) after the
    /// whole reply was read: the connection stays usable, as it does after
    /// [`ReplicationError::ResultTooLarge`]. COPY and `START_REPLICATION` are not
    /// supported here. Not cancel-safe (see the module documentation).
    pub async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        self.conn.begin()?;
        let result = self.conn.simple_query(sql).await;
        if result
            .as_ref()
            .err()
            .is_none_or(|e| e.leaves_client_usable())
        {
            self.conn.busy = false;
        }
        result
    }

    /// `IDENTIFY_SYSTEM`: system identifier, timeline, current WAL position, database.
    pub async fn identify_system(&mut self) -> Result<SystemInfo, ReplicationError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let bad = |field: &str| protocol(format!("IDENTIFY_SYSTEM returned no valid {field}"));
        let [row] = rows.as_slice() else {
            return Err(bad("row"));
        };
        let [system_id, timeline, xlogpos, dbname] = row.as_slice() else {
            return Err(bad("row of four columns"));
        };
        Ok(SystemInfo {
            system_id: system_id
                .as_deref()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("systemid"))?,
            timeline: timeline
                .as_deref()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("timeline"))?,
            xlogpos: xlogpos
                .as_deref()
                .and_then(parse_lsn)
                .ok_or_else(|| bad("xlogpos"))?,
            dbname: dbname.clone(),
        })
    }

    /// `START_REPLICATION SLOT "slot" LOGICAL X/Y ("name" 'value', ...)`: streams the
    /// logical slot `slot`, with the output plugin's options (for pgoutput:
    /// `proto_version`, `publication_names`, `messages`, ...). The slot name and option
    /// names are quoted as identifiers, the values as literals; a value is passed to the
    /// plugin as is (`publication_names` is itself a list of identifiers: quote them,
    /// e.g. `"\"pub\""`).
    ///
    /// The server sends the transactions that commit after the slot's confirmed flush
    /// position or after `start_lsn`, whichever is later (`0` means "from the slot's
    /// position"): start from the last position acknowledged. On error the connection
    /// is closed (the client is consumed): reconnect. A slot still held by a previous
    /// connection that the server has not noticed gone yet is a
    /// [`ReplicationError::Server`] with SQLSTATE `55006` (retry shortly).
    pub async fn start_logical(
        mut self,
        slot: &str,
        start_lsn: u64,
        options: &[(&str, &str)],
    ) -> Result<ReplicationStream, ReplicationError> {
        let command = start_logical_command(slot, start_lsn, options)?;
        self.conn.begin()?;
        self.conn.write_buf.clear();
        frontend::query(&command, &mut self.conn.write_buf).map_err(|_| {
            ReplicationError::InvalidArgument {
                what: "the START_REPLICATION command is too long",
            }
        })?;
        self.conn.send().await?;
        loop {
            match self.conn.read_message().await? {
                Backend::CopyBothResponse => break,
                Backend::Message(backend::Message::ErrorResponse(body)) => {
                    let error = server_error(&body);
                    // Read to ReadyForQuery, so the server is not cut off mid-reply.
                    let _ = self
                        .conn
                        .drain_to_ready("after a failed START_REPLICATION")
                        .await;
                    self.conn.busy = false;
                    self.conn.terminate().await;
                    return Err(error);
                }
                Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(backend::Message::ParameterStatus(_)) => {}
                other => return Err(unexpected(&other, "in reply to START_REPLICATION")),
            }
        }
        self.conn.busy = false;
        tracing::info!(
            slot,
            start_lsn = %format_lsn(start_lsn),
            "logical replication started"
        );
        Ok(ReplicationStream {
            conn: self.conn,
            state: StreamState::Streaming,
            flushed_floor: start_lsn,
        })
    }

    /// Closes the connection politely (Terminate). Dropping the client also closes it.
    pub async fn close(self) {
        self.conn.terminate().await;
    }
}

/// Opens one target, negotiates TLS per `mode` (for `allow`, `allow_tls` says whether
/// this is the attempt with TLS) and starts up: the connection, and whether TLS is up.
async fn connect_to(
    target: &Target,
    startup: &Startup<'_>,
    timeout: Option<Duration>,
    mode: SslMode,
    tls: Option<&TlsSetup>,
    allow_tls: bool,
) -> Result<(Connection, bool), ReplicationError> {
    let attempt = async {
        let mut socket = open(target)
            .await
            .map_err(|source| ReplicationError::Connect { source })?;
        let host = match target {
            Target::Tcp(host, _) | Target::Addr(_, host) => host.as_str(),
            // libpq: TLS is never used over a Unix socket, whatever the sslmode.
            Target::Unix(_) => "",
        };
        let wants_tls = match mode {
            _ if host.is_empty() => false,
            SslMode::Disable => false,
            SslMode::Allow => allow_tls,
            SslMode::Prefer | SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => true,
        };
        let mut binding = Binding::default();
        if let (true, Some(tls)) = (wants_tls, tls) {
            let offered = crate::pgconn::negotiate(&mut socket)
                .await
                .map_err(|source| ReplicationError::Connect { source })?;
            if offered {
                let (stream, end_point) = tls.handshake(host, socket).await?;
                socket = Box::new(stream);
                binding = Binding {
                    tls: true,
                    end_point,
                };
            } else if mode.requires_tls() || mode == SslMode::Allow {
                return Err(ReplicationError::from(TlsError::not_offered(host, mode)));
            }
        }
        let tls_up = binding.tls;
        match start_up(socket, startup, &binding).await {
            Ok(conn) => Ok((conn, tls_up)),
            // Refused in clear by pg_hba.conf: say which setting lets it in.
            Err(ReplicationError::Auth {
                code: Some(code),
                message,
            }) if code == "28000"
                && !tls_up
                && !host.is_empty()
                && (message.contains("no encryption") || mode == SslMode::Disable) =>
            {
                Err(ReplicationError::Auth {
                    message: format!(
                        "{message}: the server refuses connections without TLS for this user and database: set sslmode=require, or verify-full with sslrootcert, in the DSN"
                    ),
                    code: Some(code),
                })
            }
            Err(error) => Err(error),
        }
    };
    match timeout {
        None => attempt.await,
        Some(timeout) => tokio::time::timeout(timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(ReplicationError::Connect {
                    source: io::Error::new(io::ErrorKind::TimedOut, "connect_timeout passed"),
                })
            }),
    }
}

/// The START_REPLICATION command for a logical slot, every name and value quoted.
fn start_logical_command(
    slot: &str,
    start_lsn: u64,
    options: &[(&str, &str)],
) -> Result<String, ReplicationError> {
    let names_ok = !slot.is_empty()
        && options.iter().all(|(name, _)| !name.is_empty())
        && !slot.contains('\0')
        && options
            .iter()
            .all(|(name, value)| !name.contains('\0') && !value.contains('\0'));
    if !names_ok {
        return Err(ReplicationError::InvalidArgument {
            what: "the slot name or an option name is empty, or a name or value holds a NUL byte",
        });
    }
    let mut command = format!(
        "START_REPLICATION SLOT {} LOGICAL {}",
        quote_ident(slot),
        format_lsn(start_lsn)
    );
    let options: Vec<String> = options
        .iter()
        .map(|(name, value)| format!("{} {}", quote_ident(name), quote_literal(value)))
        .collect();
    if !options.is_empty() {
        command.push_str(" (");
        command.push_str(&options.join(", "));
        command.push(')');
    }
    Ok(command)
}

/// Quotes a string literal of a replication command (no backslash escapes there).
fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

// ---- the stream -----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamState {
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
    conn: Connection,
    state: StreamState,
    /// The highest flush position sent (or the start position): never sent lower.
    flushed_floor: u64,
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

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests {
    use super::*;
    use crate::localpg::{LocalPg, LocalPgOptions, PasswordAuth};
    use crate::source::pgoutput::{Begin, Decoder, PgOutputMessage as M, TupleValue};
    use proptest::prelude::*;
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Instant;
    use tokio::io::DuplexStream;

    const SCRAM_USER: &str = "weir_repl_scram";
    const SCRAM_PASSWORD: &str = "Scram-Pa55word-never-shown";
    const MD5_USER: &str = "weir_repl_md5";
    const MD5_PASSWORD: &str = "Md5-Pa55word-never-shown";
    const WRONG_PASSWORD: &str = "Wrong-Pa55word-never-shown";
    /// Longest wait for anything the server should do at once.
    const WAIT: Duration = Duration::from_secs(20);
    const PGOUTPUT: [(&str, &str); 3] = [
        ("proto_version", "1"),
        ("publication_names", "\"pub\""),
        ("messages", "true"),
    ];

    // ---- pure parsing ---------------------------------------------------------------

    fn xlog_data(wal_start: u64, wal_end: u64, time: i64, data: &[u8]) -> Vec<u8> {
        let mut out = vec![b'w'];
        out.extend(wal_start.to_be_bytes());
        out.extend(wal_end.to_be_bytes());
        out.extend(time.to_be_bytes());
        out.extend(data);
        out
    }

    fn keepalive(wal_end: u64, time: i64, reply: u8) -> Vec<u8> {
        let mut out = vec![b'k'];
        out.extend(wal_end.to_be_bytes());
        out.extend(time.to_be_bytes());
        out.push(reply);
        out
    }

    /// A backend frame: type byte, length, body.
    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend(u32::try_from(body.len() + 4).unwrap().to_be_bytes());
        out.extend(body);
        out
    }

    fn auth_request(code: u32, extra: &[u8]) -> Vec<u8> {
        frame(b'R', &[&code.to_be_bytes()[..], extra].concat())
    }

    fn error_frame(code: &str, message: &str) -> Vec<u8> {
        frame(
            b'E',
            format!("SERROR\0VERROR\0C{code}\0M{message}\0DKey (id)=(42)\0\0").as_bytes(),
        )
    }

    fn ready() -> Vec<u8> {
        frame(b'Z', b"I")
    }

    #[test]
    fn lsns_format_and_parse_as_postgresql_does() {
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
        assert_eq!(format_lsn(0), "0/0");
        assert_eq!(format_lsn(u64::MAX), "FFFFFFFF/FFFFFFFF");
        assert_eq!(parse_lsn("16/B374D848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("16/b374d848"), Some(0x16_B374_D848));
        assert_eq!(parse_lsn("00000016/0000000A"), Some(0x16_0000_000A));
        for bad in [
            "",
            "/",
            "1/",
            "/1",
            "+1/2",
            "1/+2",
            "-1/2",
            "123456789/0",
            "0/123456789",
            "1/2/3",
            " 1/2",
            "1/2 ",
            "G/0",
            "1_0/0",
            "1.5/0",
        ] {
            assert_eq!(parse_lsn(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn copy_data_is_parsed_and_times_are_moved_to_the_unix_epoch() {
        let payload = Bytes::from(xlog_data(0x10, 0x20, 0, b"hello"));
        let event = parse_copy_data(payload).unwrap();
        assert_eq!(
            event,
            ReplicationEvent::XLogData {
                wal_start: 0x10,
                wal_end: 0x20,
                server_time_us: 946_684_800_000_000,
                data: Bytes::from_static(b"hello"),
            }
        );
        // Debug shows the length of the data, not the data.
        let debug = format!("{event:?}");
        assert!(
            debug.contains("data_len: 5") && !debug.contains("hello"),
            "{debug}"
        );

        let event = parse_copy_data(Bytes::from(keepalive(0x30, -1, 1))).unwrap();
        assert_eq!(
            event,
            ReplicationEvent::Keepalive {
                wal_end: 0x30,
                server_time_us: 946_684_799_999_999,
                reply_requested: true,
            }
        );
        let empty = parse_copy_data(Bytes::from(xlog_data(1, 2, 3, b""))).unwrap();
        assert!(matches!(empty, ReplicationEvent::XLogData { data, .. } if data.is_empty()));
    }

    #[test]
    fn malformed_copy_data_is_a_protocol_error() {
        let full_keepalive = keepalive(1, 2, 0);
        let full_xlog = xlog_data(1, 2, 3, b"");
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![b'w'],
            full_xlog[..24].to_vec(),
            vec![b'k'],
            full_keepalive[..17].to_vec(),
            [&full_keepalive[..], b"x"].concat(),
            keepalive(1, 2, 2),
            xlog_data(1, 2, i64::MAX, b""),
            keepalive(1, i64::MAX - 1, 0),
            b"r0000".to_vec(),
            vec![0],
        ];
        for case in cases {
            let error = parse_copy_data(Bytes::from(case.clone())).unwrap_err();
            assert!(
                matches!(error, ReplicationError::Protocol { .. }),
                "{case:?}: {error}"
            );
        }
    }

    #[test]
    fn frame_lengths_are_bounded() {
        assert_eq!(frame_len(b"").unwrap(), None);
        assert_eq!(frame_len(b"d\0\0\0").unwrap(), None);
        assert_eq!(frame_len(b"d\0\0\0\x04").unwrap(), Some(5));
        assert_eq!(
            frame_len(b"d\x40\0\0\0").unwrap(),
            Some(MAX_MESSAGE_BYTES + 1)
        );
        for bad in [
            &b"d\0\0\0\x03"[..],
            b"d\0\0\0\0",
            b"d\x40\0\0\x01",
            b"d\xff\xff\xff\xff",
        ] {
            let error = frame_len(bad).unwrap_err();
            assert!(
                matches!(error, ReplicationError::Protocol { .. }),
                "{error}"
            );
        }
        // A partial frame stays in the buffer, whole.
        let mut buf = BytesMut::from(&frame(b'Z', b"I")[..5]);
        assert!(take_message(&mut buf).unwrap().is_none());
        assert_eq!(buf.len(), 5);
        buf.extend_from_slice(b"I");
        assert!(matches!(
            take_message(&mut buf).unwrap(),
            Some(Backend::Message(backend::Message::ReadyForQuery(_)))
        ));
        assert!(buf.is_empty());
    }

    #[test]
    fn copy_both_responses_are_checked() {
        assert!(parse_copy_both_response(&[0, 0, 0]).is_ok());
        assert!(parse_copy_both_response(&[0, 0, 2, 0, 0, 0, 1]).is_ok());
        for bad in [
            &[][..],
            &[0],
            &[0, 0],
            &[2, 0, 0],
            &[0, 0, 1],
            &[0, 0, 1, 0, 2],
            &[0, 0, 0, 0],
            &[0, 0xff, 0xff],
        ] {
            assert!(parse_copy_both_response(bad).is_err(), "{bad:?}");
        }
        let mut buf = BytesMut::from(&frame(b'W', &[0, 0, 0])[..]);
        assert!(matches!(
            take_message(&mut buf).unwrap(),
            Some(Backend::CopyBothResponse)
        ));
    }

    #[test]
    fn error_responses_keep_sqlstate_and_message_but_not_detail() {
        let mut buf = BytesMut::from(&error_frame("42704", "slot \"x\" does not exist")[..]);
        let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
            take_message(&mut buf).unwrap()
        else {
            panic!("expected an ErrorResponse");
        };
        let error = server_error(&body);
        assert_eq!(error.code(), Some("42704"));
        let shown = format!("{error} {error:?}");
        assert!(shown.contains("slot \"x\" does not exist"), "{shown}");
        assert!(!shown.contains("42)"), "DETAIL must be left out: {shown}");
        // In startup, class 28 is an authentication error.
        let mut buf = BytesMut::from(&error_frame("28P01", "password authentication failed")[..]);
        let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
            take_message(&mut buf).unwrap()
        else {
            panic!("expected an ErrorResponse");
        };
        assert!(matches!(
            startup_error(&body),
            ReplicationError::Auth { code: Some(c), .. } if c == "28P01"
        ));
        // Missing fields, and a long message is cut.
        let mut buf = BytesMut::from(&frame(b'E', b"SERROR\0Mno code\0\0")[..]);
        let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
            take_message(&mut buf).unwrap()
        else {
            panic!("expected an ErrorResponse");
        };
        assert!(matches!(
            server_error(&body),
            ReplicationError::Protocol { .. }
        ));
        let long = "x".repeat(10_000);
        let mut buf = BytesMut::from(&error_frame("XX000", &long)[..]);
        let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
            take_message(&mut buf).unwrap()
        else {
            panic!("expected an ErrorResponse");
        };
        let ReplicationError::Server { message, .. } = server_error(&body) else {
            panic!("expected a server error");
        };
        assert_eq!(message.chars().count(), MAX_SERVER_TEXT_CHARS);
    }

    #[test]
    fn start_replication_quotes_names_and_values() {
        let command = start_logical_command(
            "my\"slot",
            0x16_B374_D848,
            &[
                ("proto_version", "1"),
                ("publication_names", "\"pub\",\"it's\""),
                ("odd\"name", "it's"),
            ],
        )
        .unwrap();
        assert_eq!(
            command,
            "START_REPLICATION SLOT \"my\"\"slot\" LOGICAL 16/B374D848 (\"proto_version\" '1', \
             \"publication_names\" '\"pub\",\"it''s\"', \"odd\"\"name\" 'it''s')"
        );
        assert_eq!(
            start_logical_command("s", 0, &[]).unwrap(),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
        );
        for (slot, options) in [
            ("", &[][..]),
            ("a\0b", &[]),
            ("s", &[("", "1")]),
            ("s", &[("a", "\0")]),
        ] {
            assert!(matches!(
                start_logical_command(slot, 0, options),
                Err(ReplicationError::InvalidArgument { .. })
            ));
        }
    }

    #[test]
    fn status_updates_have_the_documented_layout() {
        let payload = encode_status_update(1, 2, 3, -4, true);
        let mut expected = vec![b'r'];
        for v in [1u64, 2, 3] {
            expected.extend(v.to_be_bytes());
        }
        expected.extend((-4i64).to_be_bytes());
        expected.push(1);
        assert_eq!(payload.to_vec(), expected);
        assert_eq!(*encode_status_update(0, 0, 0, 0, false).last().unwrap(), 0);
        let now = now_pg_us();
        assert!(now > 700_000_000_000_000, "now is after 2022: {now}");
    }

    /// Every message of `buf`, each exercised the way the client uses it.
    fn exercise(buf: &mut BytesMut, columns: usize) {
        loop {
            match take_message(buf) {
                Ok(Some(Backend::Message(message))) => match message {
                    backend::Message::ErrorResponse(body) => {
                        let _ = server_error(&body);
                        let _ = startup_error(&body);
                    }
                    backend::Message::NoticeResponse(body) => log_notice(&body),
                    backend::Message::DataRow(body) => {
                        let _ = data_row(&body, columns);
                    }
                    backend::Message::RowDescription(body) => {
                        let _ = row_columns(&body);
                    }
                    backend::Message::AuthenticationSasl(body) => {
                        let mut mechanisms = body.mechanisms();
                        while let Ok(Some(_)) = mechanisms.next() {}
                    }
                    backend::Message::ParameterStatus(body) => {
                        let _ = (body.name(), body.value());
                    }
                    backend::Message::CopyData(body) => {
                        let _ = parse_copy_data(body.into_bytes());
                    }
                    backend::Message::CommandComplete(body) => {
                        let _ = body.tag();
                    }
                    _ => {}
                },
                Ok(Some(Backend::CopyBothResponse)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn copy_data_parsing_never_panics(
            tag in prop::sample::select(vec![b'w', b'k', b'r', b'x', 0]),
            rest in prop::collection::vec(any::<u8>(), 0..48),
        ) {
            let mut payload = vec![tag];
            payload.extend(&rest);
            let _ = parse_copy_data(Bytes::from(payload));
            let _ = parse_copy_data(Bytes::from(rest));
        }

        #[test]
        fn xlog_data_round_trips(
            wal_start: u64,
            wal_end: u64,
            time: i64,
            data in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let parsed = parse_copy_data(Bytes::from(xlog_data(wal_start, wal_end, time, &data)));
            match time.checked_add(PG_EPOCH_OFFSET_US) {
                Some(server_time_us) => prop_assert_eq!(
                    parsed.unwrap(),
                    ReplicationEvent::XLogData { wal_start, wal_end, server_time_us, data: Bytes::from(data) }
                ),
                None => prop_assert!(parsed.is_err()),
            }
        }

        #[test]
        fn keepalives_round_trip(wal_end: u64, time: i64, reply: bool) {
            let parsed = parse_copy_data(Bytes::from(keepalive(wal_end, time, u8::from(reply))));
            match time.checked_add(PG_EPOCH_OFFSET_US) {
                Some(server_time_us) => prop_assert_eq!(
                    parsed.unwrap(),
                    ReplicationEvent::Keepalive { wal_end, server_time_us, reply_requested: reply }
                ),
                None => prop_assert!(parsed.is_err()),
            }
        }

        /// Well-framed messages of every type with random bodies, then garbage.
        #[test]
        fn framed_garbage_never_panics(
            frames in prop::collection::vec(
                (
                    prop::sample::select(b"RSKZTDCIEdcNWAHGnst123v\0".to_vec()),
                    prop::collection::vec(any::<u8>(), 0..40),
                ),
                0..8,
            ),
            tail in prop::collection::vec(any::<u8>(), 0..24),
            columns in 0usize..4,
        ) {
            let mut buf = BytesMut::new();
            for (tag, body) in &frames {
                buf.extend_from_slice(&frame(*tag, body));
            }
            buf.extend_from_slice(&tail);
            exercise(&mut buf, columns);
        }

        #[test]
        fn raw_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..96), columns in 0usize..4) {
            exercise(&mut BytesMut::from(&bytes[..]), columns);
        }

        #[test]
        fn lsns_round_trip(lsn: u64) {
            prop_assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
            prop_assert_eq!(parse_lsn(&format_lsn(lsn).to_lowercase()), Some(lsn));
        }

        #[test]
        fn lsn_parsing_never_panics(text in "[0-9a-fA-F/+ xG-]{0,20}") {
            if let Some(lsn) = parse_lsn(&text) {
                prop_assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
            }
        }
    }

    // ---- a fake server over an in-memory pipe ----------------------------------------

    async fn read_exactly(server: &mut DuplexStream, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        server
            .read_exact(&mut out)
            .await
            .expect("read from the client");
        out
    }

    /// A frontend message: type byte and body.
    async fn read_frame(server: &mut DuplexStream) -> (u8, Vec<u8>) {
        let header = read_exactly(server, 5).await;
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        (header[0], read_exactly(server, len - 4).await)
    }

    /// The startup packet's parameters.
    async fn read_startup(server: &mut DuplexStream) -> Vec<(String, String)> {
        let len = u32::from_be_bytes(read_exactly(server, 4).await.try_into().unwrap()) as usize;
        let body = read_exactly(server, len - 4).await;
        assert_eq!(body[..4], [0, 3, 0, 0], "protocol 3.0");
        let strings: Vec<String> = body[4..body.len() - 2]
            .split(|b| *b == 0)
            .map(|s| String::from_utf8(s.to_vec()).unwrap())
            .collect();
        strings
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect()
    }

    fn fake_startup() -> Startup<'static> {
        Startup {
            user: "u",
            password: Some(b"pw"),
            database: Some("d"),
            application_name: "weir",
            options: None,
            channel_binding: ChannelBindingMode::Prefer,
        }
    }

    #[tokio::test]
    async fn answers_a_cleartext_password_request() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let parameters = read_startup(&mut server).await;
            server.write_all(&auth_request(3, &[])).await.unwrap();
            let password = read_frame(&mut server).await;
            let reply = [
                auth_request(0, &[]),
                frame(b'S', b"server_version\x0015.4\0"),
                frame(b'K', &[0; 8]),
                ready(),
            ];
            server.write_all(&reply.concat()).await.unwrap();
            (parameters, password, server)
        });
        let conn = start_up(Box::new(client), &fake_startup(), &Binding::default())
            .await
            .unwrap();
        assert_eq!(conn.server_version.as_deref(), Some("15.4"));
        let (parameters, password, _server) = server.await.unwrap();
        let expected = [
            ("user", "u"),
            ("replication", "database"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("extra_float_digits", "3"),
            ("application_name", "weir"),
            ("database", "d"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(parameters, expected);
        assert_eq!(password, (b'p', b"pw\0".to_vec()));
    }

    #[tokio::test]
    async fn unsupported_or_unexpected_authentication_fails_cleanly() {
        for (request, expect_auth) in [
            (auth_request(7, &[]), true),                        // GSSAPI
            (auth_request(10, b"SCRAM-SHA-256-PLUS\0\0"), true), // needs TLS
            (auth_request(10, b"SCRAM"), false),                 // malformed list
            (auth_request(99, &[]), false),                      // unknown request
            (ready(), false),                                    // no authentication
        ] {
            let (client, mut server) = tokio::io::duplex(1 << 16);
            let server = tokio::spawn(async move {
                read_startup(&mut server).await;
                server.write_all(&request).await.unwrap();
                server
            });
            let error = match start_up(Box::new(client), &fake_startup(), &Binding::default()).await
            {
                Ok(_) => panic!("authentication should fail"),
                Err(error) => error,
            };
            let _server = server.await.unwrap();
            if expect_auth {
                assert!(matches!(error, ReplicationError::Auth { .. }), "{error}");
            } else {
                assert!(
                    matches!(error, ReplicationError::Protocol { .. }),
                    "{error}"
                );
            }
        }
        // A password request without a password.
        let (client, mut server) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            read_startup(&mut server).await;
            server.write_all(&auth_request(5, b"salt")).await.unwrap();
            server
        });
        let startup = Startup {
            password: None,
            ..fake_startup()
        };
        let error = start_up(Box::new(client), &startup, &Binding::default())
            .await
            .err()
            .unwrap();
        assert!(
            matches!(error, ReplicationError::Auth { code: None, .. }),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_oversized_message_is_refused_and_memory_follows_the_bytes_received() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection::new(Box::new(client));
        server.write_all(b"d\x40\0\0\x01").await.unwrap();
        let error = conn.read_message().await.err().unwrap();
        assert!(
            matches!(&error, ReplicationError::Protocol { what } if what.contains("limit")),
            "{error}"
        );

        // 1 GiB announced, 10 kB sent, then the server goes away.
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection::new(Box::new(client));
        server.write_all(b"d\x40\0\0\0").await.unwrap();
        server.write_all(&[7; 10_000]).await.unwrap();
        drop(server);
        let error = conn.read_message().await.err().unwrap();
        assert!(matches!(error, ReplicationError::Closed), "{error}");
        assert!(
            conn.read_buf.capacity() < 1 << 20,
            "{} bytes reserved for 10 kB received",
            conn.read_buf.capacity()
        );

        // A large message arrives whole; the buffer lets go of it afterwards.
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection::new(Box::new(client));
        let large = xlog_data(1, 2, 3, &vec![5; 6 << 20]);
        let bytes = [frame(b'd', &large), frame(b'd', &keepalive(4, 5, 0))].concat();
        let writer = tokio::spawn(async move {
            server.write_all(&bytes).await.unwrap();
            server
        });
        let Backend::Message(backend::Message::CopyData(body)) = conn.read_message().await.unwrap()
        else {
            panic!("expected CopyData");
        };
        let data = body.into_bytes();
        assert_eq!(data, large);
        assert!(
            data.is_unique(),
            "the read buffer still holds the message's memory"
        );
        assert!(
            conn.read_buf.capacity() < 1 << 20,
            "{} bytes kept after a 6 MiB message",
            conn.read_buf.capacity()
        );
        assert!(matches!(
            conn.read_message().await.unwrap(),
            Backend::Message(backend::Message::CopyData(_))
        ));
        let _server = writer.await.unwrap();
    }

    fn fake_stream(client: DuplexStream) -> ReplicationStream {
        ReplicationStream {
            conn: Connection::new(Box::new(client)),
            state: StreamState::Streaming,
            flushed_floor: 0x100,
        }
    }

    #[tokio::test]
    async fn next_is_cancel_safe_while_bytes_trickle_in() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        let payload = xlog_data(5, 6, 7, &[9; 300]);
        let bytes = [frame(b'd', &payload), frame(b'd', &keepalive(8, 9, 1))].concat();
        let writer = tokio::spawn(async move {
            for chunk in bytes.chunks(7) {
                server.write_all(chunk).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            server
        });
        let mut events = vec![];
        let mut timeouts = 0;
        while events.len() < 2 {
            match tokio::time::timeout(Duration::from_micros(300), stream.next()).await {
                Ok(event) => events.push(event.unwrap().unwrap()),
                Err(_) => timeouts += 1,
            }
        }
        assert!(timeouts > 0, "the reads were never cancelled");
        assert_eq!(events[0], parse_copy_data(Bytes::from(payload)).unwrap());
        assert!(matches!(
            events[1],
            ReplicationEvent::Keepalive {
                wal_end: 8,
                reply_requested: true,
                ..
            }
        ));
        let _server = writer.await.unwrap();
    }

    #[tokio::test]
    async fn status_updates_never_move_the_flush_position_back() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        stream
            .send_status(0x300, 0x200, 0x200, false)
            .await
            .unwrap();
        stream.send_status(0x300, 0x150, 0x150, true).await.unwrap();
        stream.send_status(0x50, 0x50, 0x50, false).await.unwrap();
        let mut flushed = vec![];
        for _ in 0..3 {
            let (tag, payload) = read_frame(&mut server).await;
            assert_eq!(
                (tag, payload.len(), payload[0]),
                (b'd', STATUS_UPDATE_BYTES, b'r')
            );
            flushed.push(u64::from_be_bytes(payload[9..17].try_into().unwrap()));
        }
        assert_eq!(flushed, [0x200, 0x200, 0x200]);

        // Below the start position at first.
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        stream.send_status(0, 0, 0, false).await.unwrap();
        let (_, payload) = read_frame(&mut server).await;
        assert_eq!(
            u64::from_be_bytes(payload[9..17].try_into().unwrap()),
            0x100
        );
    }

    #[tokio::test]
    async fn the_server_ending_the_copy_ends_the_stream() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        let server = tokio::spawn(async move {
            server.write_all(&frame(b'c', b"")).await.unwrap();
            let copy_done = read_frame(&mut server).await;
            let reply = [frame(b'C', b"START_REPLICATION\0"), ready()].concat();
            server.write_all(&reply).await.unwrap();
            (copy_done, server)
        });
        assert!(stream.next().await.unwrap().is_none());
        assert!(stream.next().await.unwrap().is_none());
        let (copy_done, _server) = server.await.unwrap();
        assert_eq!(copy_done, (b'c', vec![]));
        assert!(matches!(
            stream.send_status(1, 1, 1, false).await,
            Err(ReplicationError::Closed)
        ));
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_for_good() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        let bytes = error_frame(
            "57P01",
            "terminating connection due to administrator command",
        );
        server.write_all(&bytes).await.unwrap();
        let error = stream.next().await.unwrap_err();
        assert_eq!(error.code(), Some("57P01"));
        assert!(matches!(
            stream.next().await,
            Err(ReplicationError::Unusable)
        ));
        assert!(matches!(
            stream.send_status(1, 1, 1, false).await,
            Err(ReplicationError::Unusable)
        ));
        stream.stop().await.unwrap();

        // Garbage in the stream.
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut stream = fake_stream(client);
        server.write_all(&frame(b'd', b"zzz")).await.unwrap();
        assert!(matches!(
            stream.next().await,
            Err(ReplicationError::Protocol { .. })
        ));
        assert!(matches!(
            stream.next().await,
            Err(ReplicationError::Unusable)
        ));
    }

    // ---- against a real PostgreSQL ---------------------------------------------------

    static CLUSTER: OnceLock<LocalPg> = OnceLock::new();

    /// The cluster shared by these tests: trust for `postgres`, SCRAM for `SCRAM_USER`.
    async fn cluster() -> &'static LocalPg {
        tokio::task::spawn_blocking(|| {
            CLUSTER.get_or_init(|| {
                let options = LocalPgOptions {
                    password_user: Some((SCRAM_USER.into(), SCRAM_PASSWORD.into())),
                    ..LocalPgOptions::default()
                };
                LocalPg::start(&options)
                    .expect("start a throwaway PostgreSQL (these tests need the server binaries)")
            })
        })
        .await
        .expect("the start task panicked")
    }

    async fn sql_client(dsn: &str) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .expect("connect with tokio-postgres");
        tokio::spawn(connection);
        client
    }

    fn password_dsn(pg: &LocalPg, user: &str, password: &str, db: &str) -> String {
        format!(
            "postgres://{user}:{password}@{}:{}/{db}",
            pg.host(),
            pg.port()
        )
    }

    async fn connect(dsn: &str) -> ReplicationClient {
        ReplicationClient::connect(&Dsn::new(dsn))
            .await
            .unwrap_or_else(|e| panic!("connect for replication: {e}"))
    }

    /// Creates a pgoutput slot through the replication connection; its consistent point.
    async fn create_slot(client: &mut ReplicationClient, slot: &str) -> u64 {
        let sql = format!(
            "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
            quote_ident(slot)
        );
        let rows = client.simple_query(&sql).await.expect("create the slot");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][0].as_deref(), Some(slot));
        assert_eq!(rows[0][2], None, "NOEXPORT_SNAPSHOT");
        assert_eq!(rows[0][3].as_deref(), Some("pgoutput"));
        parse_lsn(rows[0][1].as_deref().unwrap()).unwrap()
    }

    /// A database with table `items` in publication `pub`: its superuser DSN.
    async fn publishing_database(pg: &LocalPg, db: &str) -> String {
        let dsn = pg.create_database(db).await.expect("create the database");
        sql_client(&dsn)
            .await
            .batch_execute(
                "CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(10,2)); \
                 CREATE PUBLICATION pub FOR TABLE items",
            )
            .await
            .expect("create the table and the publication");
        dsn
    }

    async fn next_event(stream: &mut ReplicationStream) -> ReplicationEvent {
        tokio::time::timeout(WAIT, stream.next())
            .await
            .expect("an event in time")
            .unwrap_or_else(|e| panic!("next event: {e}"))
            .expect("the stream goes on")
    }

    /// Reads up to a Commit and decodes everything from its Begin; keepalives that ask
    /// for a reply are answered with `ack` (0 acknowledges nothing).
    async fn receive_transaction(
        stream: &mut ReplicationStream,
        decoder: &mut Decoder,
        ack: u64,
    ) -> Vec<M> {
        let mut messages = vec![];
        loop {
            match next_event(stream).await {
                ReplicationEvent::XLogData {
                    data,
                    server_time_us,
                    ..
                } => {
                    let now = unix_now_us();
                    assert!(
                        (now - 60_000_000..=now + 60_000_000).contains(&server_time_us),
                        "send time {server_time_us} is not about now ({now})"
                    );
                    let message = decoder.decode(&data).expect("decode a pgoutput message");
                    let commit = matches!(message, M::Commit(_));
                    messages.push(message);
                    if commit {
                        assert!(matches!(messages[0], M::Begin(_)), "{messages:?}");
                        return messages;
                    }
                }
                ReplicationEvent::Keepalive {
                    reply_requested: true,
                    ..
                } => stream
                    .send_status(ack, ack, ack, false)
                    .await
                    .expect("answer a keepalive"),
                ReplicationEvent::Keepalive { .. } => {}
            }
        }
    }

    fn begin(messages: &[M]) -> &Begin {
        match &messages[0] {
            M::Begin(begin) => begin,
            other => panic!("expected Begin, got {other:?}"),
        }
    }

    fn commit_end(messages: &[M]) -> u64 {
        match messages.last() {
            Some(M::Commit(commit)) => commit.end_lsn,
            other => panic!("expected Commit, got {other:?}"),
        }
    }

    /// The first column of every Insert, as text.
    fn inserted_ids(messages: &[M]) -> Vec<String> {
        messages
            .iter()
            .filter_map(|m| match m {
                M::Insert(insert) => Some(text(&insert.new[0])),
                _ => None,
            })
            .collect()
    }

    fn text(value: &TupleValue) -> String {
        match value {
            TupleValue::Text(bytes) => String::from_utf8(bytes.clone()).unwrap(),
            other => panic!("expected a text value, got {other:?}"),
        }
    }

    fn unix_now_us() -> i64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        i64::try_from(now.as_micros()).unwrap()
    }

    async fn confirmed_flush(sql: &tokio_postgres::Client, slot: &str) -> u64 {
        let row = sql
            .query_one(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .expect("read the slot");
        parse_lsn(row.get::<_, &str>(0)).unwrap()
    }

    async fn wait_for_confirmed_flush(sql: &tokio_postgres::Client, slot: &str, expected: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let confirmed = confirmed_flush(sql, slot).await;
            if confirmed == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "confirmed_flush_lsn is {}, expected {}",
                format_lsn(confirmed),
                format_lsn(expected)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn current_wal_lsn(sql: &tokio_postgres::Client) -> u64 {
        let row = sql
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap();
        parse_lsn(row.get::<_, &str>(0)).unwrap()
    }

    /// Starts streaming `slot`, retrying while the server still holds it for a
    /// connection that was just dropped (SQLSTATE 55006).
    async fn start_with_retry(dsn: &str, slot: &str, start_lsn: u64) -> ReplicationStream {
        let deadline = Instant::now() + WAIT;
        loop {
            let client = connect(dsn).await;
            match client.start_logical(slot, start_lsn, &PGOUTPUT).await {
                Ok(stream) => return stream,
                Err(e) if e.code() == Some("55006") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("start replication: {e}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn connects_with_trust_over_tcp_and_a_unix_socket() {
        let pg = cluster().await;
        let dsn = pg.create_database("repl_trust").await.unwrap();
        let mut client = connect(&dsn).await;
        assert!(
            client
                .server_version()
                .is_some_and(|v| v.starts_with(char::is_numeric))
        );
        let rows = client
            .simple_query("SELECT current_user, current_setting('application_name'), NULL")
            .await
            .unwrap();
        assert_eq!(
            rows,
            [[Some("postgres".to_owned()), Some("weir".to_owned()), None]]
        );
        client.close().await;

        let unix = format!(
            "host={} port={} user=postgres dbname=repl_trust application_name=weir_unix",
            pg.socket_dir().display(),
            pg.port()
        );
        let mut client = connect(&unix).await;
        let info = client.identify_system().await.unwrap();
        assert_eq!(info.dbname.as_deref(), Some("repl_trust"));
        let rows = client
            .simple_query(
                "SELECT current_setting('application_name'); SELECT 1, 2 UNION ALL SELECT 3, 4",
            )
            .await
            .unwrap();
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            rows,
            [
                vec![some("weir_unix")],
                vec![some("1"), some("2")],
                vec![some("3"), some("4")]
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn connects_with_scram_sha_256() {
        let pg = cluster().await;
        let dsn = pg.create_database("repl_scram").await.unwrap();
        let stored = sql_client(&dsn)
            .await
            .query_one(
                "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
                &[&SCRAM_USER],
            )
            .await
            .unwrap()
            .get::<_, String>(0);
        assert!(
            stored.starts_with("SCRAM-SHA-256$"),
            "the default stays SCRAM"
        );
        let mut client = connect(&password_dsn(pg, SCRAM_USER, SCRAM_PASSWORD, "repl_scram")).await;
        let rows = client.simple_query("SELECT current_user").await.unwrap();
        assert_eq!(rows, [[Some(SCRAM_USER.to_owned())]]);
        // The password is really needed.
        let without = format!(
            "postgres://{SCRAM_USER}@{}:{}/repl_scram",
            pg.host(),
            pg.port()
        );
        let error = ReplicationClient::connect(&Dsn::new(without))
            .await
            .unwrap_err();
        assert!(
            matches!(error, ReplicationError::Auth { code: None, .. }),
            "{error}"
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn connects_with_md5_and_refuses_a_wrong_md5_password() {
        let pg = tokio::task::spawn_blocking(|| {
            LocalPg::start(&LocalPgOptions {
                password_user: Some((MD5_USER.into(), MD5_PASSWORD.into())),
                password_auth: PasswordAuth::Md5,
                ..LocalPgOptions::default()
            })
        })
        .await
        .unwrap()
        .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
        let dsn = pg.create_database("repl_md5").await.unwrap();
        let stored = sql_client(&dsn)
            .await
            .query_one(
                "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
                &[&MD5_USER],
            )
            .await
            .unwrap()
            .get::<_, String>(0);
        assert!(stored.starts_with("md5"), "the password is stored as md5");
        let mut client = connect(&password_dsn(&pg, MD5_USER, MD5_PASSWORD, "repl_md5")).await;
        let rows = client.simple_query("SELECT current_user").await.unwrap();
        assert_eq!(rows, [[Some(MD5_USER.to_owned())]]);

        let wrong = password_dsn(&pg, MD5_USER, WRONG_PASSWORD, "repl_md5");
        let error = ReplicationClient::connect(&Dsn::new(wrong.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ReplicationError::Auth { code: Some(c), .. } if c == "28P01"),
            "{error}"
        );
        assert_shows_no_secret(&error, &[MD5_PASSWORD, WRONG_PASSWORD, &wrong]);
    }

    /// Display, Debug and every source of `error` hold none of `secrets`.
    fn assert_shows_no_secret(error: &ReplicationError, secrets: &[&str]) {
        let mut shown = format!("{error}\n{error:?}");
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            shown.push_str(&format!("\n{cause}\n{cause:?}"));
            source = cause.source();
        }
        for secret in secrets {
            assert!(!shown.contains(secret), "a secret is shown: {shown}");
        }
    }

    /// Collects log output.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn no_dsn_or_password_in_errors_or_logs() {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let pg = cluster().await;
        pg.create_database("repl_secrets").await.unwrap();
        let right = password_dsn(pg, SCRAM_USER, SCRAM_PASSWORD, "repl_secrets");
        let wrong = password_dsn(pg, SCRAM_USER, WRONG_PASSWORD, "repl_secrets");
        let secrets = [
            SCRAM_PASSWORD,
            WRONG_PASSWORD,
            right.as_str(),
            wrong.as_str(),
        ];

        let mut client = connect(&right).await;
        let error = client
            .simple_query("SELECT * FROM nowhere")
            .await
            .unwrap_err();
        assert_eq!(error.code(), Some("42P01"));
        assert_shows_no_secret(&error, &secrets);
        let rows = client.simple_query("SELECT 1").await.unwrap();
        assert_eq!(
            rows,
            [[Some("1".to_owned())]],
            "usable after a server error"
        );
        let mut stream = client.start_logical("no_such_slot", 0, &PGOUTPUT).await;
        let error = stream.as_mut().err().unwrap();
        assert_eq!(error.code(), Some("42704"));
        assert_shows_no_secret(error, &secrets);

        let error = ReplicationClient::connect(&Dsn::new(wrong.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ReplicationError::Auth { code: Some(c), .. } if c == "28P01"),
            "{error}"
        );
        assert_shows_no_secret(&error, &secrets);

        let closed_port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let bad_dsns = [
            format!("postgres://{SCRAM_USER}:{SCRAM_PASSWORD}@127.0.0.1:notaport/db"),
            format!("host=127.0.0.1 password={SCRAM_PASSWORD} user=x sslmode=require"),
            format!("host=127.0.0.1 password={SCRAM_PASSWORD} user=x channel_binding=require"),
            format!("password={SCRAM_PASSWORD} user=x"),
            format!("host=127.0.0.1 password={SCRAM_PASSWORD} nonsense={SCRAM_PASSWORD}"),
            format!("postgres://{SCRAM_USER}:{SCRAM_PASSWORD}@127.0.0.1:{closed_port}/db"),
        ];
        for dsn in &bad_dsns {
            let error = ReplicationClient::connect(&Dsn::new(dsn.clone()))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    error,
                    ReplicationError::Config { .. }
                        | ReplicationError::Connect { .. }
                        | ReplicationError::Settings(_)
                        | ReplicationError::Tls(_)
                        | ReplicationError::Auth { .. }
                ),
                "{error}"
            );
            assert_shows_no_secret(&error, &[&secrets[..], &[dsn.as_str()]].concat());
        }

        let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        // Some lines were captured (which ones depends on tracing's per-callsite
        // interest cache, shared with the tests running beside this one).
        assert!(!logs.is_empty(), "no log line was captured");
        for secret in secrets.iter().chain(
            bad_dsns
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .iter(),
        ) {
            assert!(!logs.contains(secret), "a secret is logged: {logs}");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn identify_system_and_slot_commands() {
        let pg = cluster().await;
        let dsn = pg.create_database("repl_identify").await.unwrap();
        let sql = sql_client(&dsn).await;
        let mut client = connect(&dsn).await;
        let info = client.identify_system().await.unwrap();
        assert!(info.system_id > 0);
        assert_eq!(info.timeline, 1);
        assert_eq!(info.dbname.as_deref(), Some("repl_identify"));
        let current = current_wal_lsn(&sql).await;
        assert!(
            0 < info.xlogpos && info.xlogpos <= current,
            "xlogpos {} against the current {}",
            format_lsn(info.xlogpos),
            format_lsn(current)
        );

        let consistent = create_slot(&mut client, "identify_slot").await;
        assert!(consistent >= info.xlogpos);
        let row = sql
            .query_one(
                "SELECT plugin, database, confirmed_flush_lsn::text, active \
                 FROM pg_replication_slots WHERE slot_name = 'identify_slot'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, &str>(0), "pgoutput");
        assert_eq!(row.get::<_, &str>(1), "repl_identify");
        assert_eq!(parse_lsn(row.get::<_, &str>(2)), Some(consistent));
        assert!(!row.get::<_, bool>(3));

        // Errors leave the connection usable.
        let again = client
            .simple_query("CREATE_REPLICATION_SLOT \"identify_slot\" LOGICAL pgoutput")
            .await
            .unwrap_err();
        assert_eq!(again.code(), Some("42710"), "{again}");
        let syntax = client.simple_query("SELEC 1").await.unwrap_err();
        assert_eq!(syntax.code(), Some("42601"), "{syntax}");
        let nul = client.simple_query("SELECT '\0'").await.unwrap_err();
        assert!(matches!(nul, ReplicationError::InvalidArgument { .. }));
        let empty = client.simple_query("").await.unwrap();
        assert!(empty.is_empty());
        let big = client
            .simple_query("SELECT repeat('x', 1000000) FROM generate_series(1, 20)")
            .await
            .unwrap_err();
        assert!(
            matches!(big, ReplicationError::ResultTooLarge { .. }),
            "{big}"
        );
        assert_eq!(client.identify_system().await.unwrap().dbname, info.dbname);
        client
            .simple_query("DROP_REPLICATION_SLOT \"identify_slot\"")
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn streams_a_transaction_and_answers_keepalives() {
        let pg = cluster().await;
        let dsn = publishing_database(pg, "repl_stream").await;
        let mut sql = sql_client(&dsn).await;
        // A 2 s wal_sender_timeout for this connection: keepalives asking for a reply
        // come every second, and no reply within 2 s ends the connection.
        let app = "weir_stream_test";
        let repl_dsn = format!("{dsn}?application_name={app}&options=-c%20wal_sender_timeout%3D2s");
        let mut client = connect(&repl_dsn).await;
        create_slot(&mut client, "stream_slot").await;
        let mut stream = client
            .start_logical("stream_slot", 0, &PGOUTPUT)
            .await
            .unwrap();

        let tx = sql.transaction().await.unwrap();
        tx.batch_execute("INSERT INTO items VALUES (1, 'one', 1.5), (2, 'it''s two', NULL)")
            .await
            .unwrap();
        let txid: i64 = tx
            .query_one("SELECT txid_current()", &[])
            .await
            .unwrap()
            .get(0);
        tx.batch_execute(
            "SELECT pg_logical_emit_message(true, 'weir', 'hello'); \
             INSERT INTO items VALUES (3, 'three', 3)",
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();

        let messages = receive_transaction(&mut stream, &mut Decoder::new(), 0).await;
        let shapes: Vec<&str> = messages
            .iter()
            .map(|m| match m {
                M::Begin(_) => "Begin",
                M::Relation(_) => "Relation",
                M::Insert(_) => "Insert",
                M::Message(_) => "Message",
                M::Commit(_) => "Commit",
                _ => "other",
            })
            .collect();
        assert_eq!(
            shapes,
            [
                "Begin", "Relation", "Insert", "Insert", "Message", "Insert", "Commit"
            ]
        );
        let begin = begin(&messages);
        assert_eq!(i64::from(begin.xid), txid & 0xFFFF_FFFF);
        let M::Relation(relation) = &messages[1] else {
            panic!("expected a Relation")
        };
        assert_eq!(
            (relation.namespace.as_str(), relation.name.as_str()),
            ("public", "items")
        );
        let names: Vec<&str> = relation.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["id", "name", "price"]);
        let rows: Vec<Vec<Option<String>>> = messages
            .iter()
            .filter_map(|m| match m {
                M::Insert(insert) => Some(
                    insert
                        .new
                        .iter()
                        .map(|v| match v {
                            TupleValue::Null => None,
                            v => Some(text(v)),
                        })
                        .collect(),
                ),
                _ => None,
            })
            .collect();
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            rows,
            [
                vec![some("1"), some("one"), some("1.50")],
                vec![some("2"), some("it's two"), None],
                vec![some("3"), some("three"), some("3.00")],
            ]
        );
        let M::Message(message) = &messages[4] else {
            panic!("expected a Message")
        };
        assert!(message.transactional);
        assert_eq!(
            (message.prefix.as_str(), message.content.as_slice()),
            ("weir", &b"hello"[..])
        );
        let M::Commit(commit) = messages.last().unwrap() else {
            panic!("expected a Commit")
        };
        assert_eq!(commit.commit_lsn, begin.final_lsn);
        assert!(commit.end_lsn > commit.commit_lsn);
        assert!(commit.end_lsn <= current_wal_lsn(&sql).await);
        let end = commit.end_lsn;

        // Keepalives asking for a reply come; answered, the connection outlives several
        // wal_sender_timeouts.
        let started = Instant::now();
        let mut answered = 0;
        while started.elapsed() < Duration::from_secs(5) {
            match next_event(&mut stream).await {
                ReplicationEvent::Keepalive {
                    reply_requested: true,
                    wal_end,
                    ..
                } => {
                    assert!(wal_end >= end);
                    stream.send_status(end, end, end, false).await.unwrap();
                    answered += 1;
                }
                ReplicationEvent::Keepalive { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(
            answered >= 2,
            "{answered} keepalives asked for a reply in 5 s"
        );
        let row = sql
            .query_one(
                "SELECT flush_lsn::text, reply_time IS NOT NULL FROM pg_stat_replication \
                 WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap();
        assert_eq!(parse_lsn(row.get::<_, &str>(0)), Some(end));
        assert!(row.get::<_, bool>(1));
        wait_for_confirmed_flush(&sql, "stream_slot", end).await;

        // Asking for a reply gets a keepalive back.
        stream.send_status(end, end, end, true).await.unwrap();
        let reply = next_event(&mut stream).await;
        assert!(
            matches!(reply, ReplicationEvent::Keepalive { .. }),
            "{reply:?}"
        );

        stream.stop().await.unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            let active: bool = sql
                .query_one(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = 'stream_slot'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if !active {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the slot stays active after stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_slot_confirms_exactly_the_flush_position_sent() {
        let pg = cluster().await;
        let dsn = publishing_database(pg, "repl_flush").await;
        let sql = sql_client(&dsn).await;
        let mut client = connect(&dsn).await;
        let consistent = create_slot(&mut client, "flush_slot").await;
        let mut stream = client
            .start_logical("flush_slot", 0, &PGOUTPUT)
            .await
            .unwrap();
        sql.batch_execute("INSERT INTO items VALUES (1, 'one', 1)")
            .await
            .unwrap();
        sql.batch_execute("INSERT INTO items VALUES (2, 'two', 2)")
            .await
            .unwrap();
        let mut decoder = Decoder::new();
        let first = receive_transaction(&mut stream, &mut decoder, 0).await;
        let second = receive_transaction(&mut stream, &mut decoder, 0).await;
        assert_eq!(
            (inserted_ids(&first), inserted_ids(&second)),
            (vec!["1".to_owned()], vec!["2".to_owned()])
        );
        let (end1, end2) = (commit_end(&first), commit_end(&second));
        assert!(consistent < end1 && end1 < end2);
        assert_eq!(
            confirmed_flush(&sql, "flush_slot").await,
            consistent,
            "nothing is acknowledged before send_status"
        );

        // Written up to the second transaction, flushed up to the first only.
        stream.send_status(end2, end1, end1, false).await.unwrap();
        wait_for_confirmed_flush(&sql, "flush_slot", end1).await;
        assert!(end1 < current_wal_lsn(&sql).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            confirmed_flush(&sql, "flush_slot").await,
            end1,
            "never beyond"
        );

        stream.send_status(end2, end2, end2, false).await.unwrap();
        wait_for_confirmed_flush(&sql, "flush_slot", end2).await;
        // A smaller flush position does not move the slot back.
        stream.send_status(end1, end1, end1, true).await.unwrap();
        let _ = next_event(&mut stream).await; // the reply: the update was processed
        assert_eq!(
            confirmed_flush(&sql, "flush_slot").await,
            end2,
            "never back"
        );
        stream.stop().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn unacknowledged_transactions_are_delivered_again() {
        let pg = cluster().await;
        let dsn = publishing_database(pg, "repl_redeliver").await;
        let sql = sql_client(&dsn).await;
        let mut client = connect(&dsn).await;
        create_slot(&mut client, "redeliver_slot").await;
        let mut stream = client
            .start_logical("redeliver_slot", 0, &PGOUTPUT)
            .await
            .unwrap();
        sql.batch_execute("INSERT INTO items VALUES (10, 'ten', 10)")
            .await
            .unwrap();
        sql.batch_execute("INSERT INTO items VALUES (20, 'twenty', 20)")
            .await
            .unwrap();
        let mut decoder = Decoder::new();
        let first = receive_transaction(&mut stream, &mut decoder, 0).await;
        let second = receive_transaction(&mut stream, &mut decoder, 0).await;
        let (end1, end2) = (commit_end(&first), commit_end(&second));
        stream.send_status(end1, end1, end1, false).await.unwrap();
        wait_for_confirmed_flush(&sql, "redeliver_slot", end1).await;
        drop(stream); // the connection closes; the second transaction was not acknowledged

        let mut stream = start_with_retry(&dsn, "redeliver_slot", end1).await;
        let mut decoder = Decoder::new();
        let again = receive_transaction(&mut stream, &mut decoder, end1).await;
        assert_eq!(
            inserted_ids(&again),
            ["20"],
            "the first transaction is not sent again"
        );
        assert_eq!(begin(&again), begin(&second));
        assert_eq!(commit_end(&again), end2);
        stream.send_status(end2, end2, end2, false).await.unwrap();
        wait_for_confirmed_flush(&sql, "redeliver_slot", end2).await;
        stream.stop().await.unwrap();

        // Acknowledged transactions are not sent again, from the slot's own position
        // (start 0/0) either.
        sql.batch_execute("INSERT INTO items VALUES (30, 'thirty', 30)")
            .await
            .unwrap();
        let mut stream = start_with_retry(&dsn, "redeliver_slot", 0).await;
        let third = receive_transaction(&mut stream, &mut Decoder::new(), end2).await;
        assert_eq!(inserted_ids(&third), ["30"]);
        stream.stop().await.unwrap();
    }
}
