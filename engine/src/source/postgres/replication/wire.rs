//! Wire framing: length-checked backend messages in a `BytesMut`, over one socket.

use bytes::BytesMut;
use postgres_protocol::message::{backend, frontend};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_postgres::fallible_iterator::FallibleIterator;

use super::error::{ReplicationError, protocol};

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
pub(super) const MAX_SERVER_TEXT_CHARS: usize = 2000;

/// A message type byte for an error: the character if printable, else hex.
pub(super) fn show_tag(tag: u8) -> String {
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

pub(super) fn unexpected(message: &Backend, during: &str) -> ReplicationError {
    let name = match message {
        Backend::Message(m) => message_name(m),
        Backend::CopyBothResponse => "CopyBothResponse",
    };
    protocol(format!("unexpected {name} message {during}"))
}

// ---- framing ------------------------------------------------------------------------

/// A backend message: one `postgres-protocol` knows, or CopyBothResponse, which it does
/// not (tokio-postgres has no replication mode).
pub(super) enum Backend {
    Message(backend::Message),
    /// `'W'`: the server entered CopyBoth mode (checked, contents unused).
    CopyBothResponse,
}

/// The whole length (type byte included) of the frame at the front of `buf`, once its
/// header is in; an error if the length is impossible or above [`MAX_MESSAGE_BYTES`].
pub(super) fn frame_len(buf: &[u8]) -> Result<Option<usize>, ReplicationError> {
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
pub(super) fn take_message(buf: &mut BytesMut) -> Result<Option<Backend>, ReplicationError> {
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
pub(super) fn parse_copy_both_response(body: &[u8]) -> Result<(), ReplicationError> {
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
pub(super) fn server_error(body: &backend::ErrorResponseBody) -> ReplicationError {
    match error_fields(&mut body.fields()) {
        Ok((code, message)) => ReplicationError::Server { code, message },
        Err(e) => e,
    }
}

/// An ErrorResponse during startup: SQLSTATE class 28 (invalid authorization, such as a
/// wrong password or no pg_hba.conf entry) is an authentication error.
pub(super) fn startup_error(body: &backend::ErrorResponseBody) -> ReplicationError {
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
pub(super) fn server_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .take(MAX_SERVER_TEXT_CHARS)
        .collect()
}

/// Logs a notice by severity and SQLSTATE only: its text may hold values.
pub(super) fn log_notice(body: &backend::NoticeResponseBody) {
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
pub(super) fn data_row(
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
pub(super) fn row_columns(body: &backend::RowDescriptionBody) -> Result<usize, ReplicationError> {
    body.fields()
        .count()
        .map_err(|_| protocol("a malformed RowDescription message"))
}

// ---- the connection -----------------------------------------------------------------

/// The byte stream to the server: TCP, a Unix socket, or (in tests) anything else.
pub(super) trait Socket: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Socket for T {}

/// A connection after startup: the socket and its buffers.
pub(super) struct Connection {
    socket: Box<dyn Socket>,
    pub(super) read_buf: BytesMut,
    pub(super) write_buf: BytesMut,
    /// Set while an exchange with the server is under way; still set when a call
    /// starts, it means an earlier call stopped part way through one.
    pub(super) busy: bool,
    pub(super) server_version: Option<String>,
}

impl Connection {
    pub(super) fn new(socket: Box<dyn Socket>) -> Connection {
        Connection {
            socket,
            read_buf: BytesMut::new(),
            write_buf: BytesMut::new(),
            busy: false,
            server_version: None,
        }
    }

    /// Marks the start of an exchange; refuses if an earlier one was left unfinished.
    pub(super) fn begin(&mut self) -> Result<(), ReplicationError> {
        if self.busy {
            return Err(ReplicationError::Unusable);
        }
        self.busy = true;
        Ok(())
    }

    /// Sends what is in the write buffer.
    pub(super) async fn send(&mut self) -> Result<(), ReplicationError> {
        let io = |source| ReplicationError::Io { source };
        self.socket.write_all(&self.write_buf).await.map_err(io)?;
        self.socket.flush().await.map_err(io)?;
        self.write_buf.clear();
        Ok(())
    }

    /// The next message from the server. Cancel-safe: bytes read stay in the buffer.
    pub(super) async fn read_message(&mut self) -> Result<Backend, ReplicationError> {
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
    pub(super) async fn drain_to_ready(&mut self, during: &str) -> Result<(), ReplicationError> {
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
    pub(super) async fn terminate(mut self) {
        self.write_buf.clear();
        frontend::terminate(&mut self.write_buf);
        if self.send().await.is_ok() {
            let _ = self.socket.shutdown().await;
        }
    }

    pub(super) async fn simple_query(
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
