//! Decoding one message, and the streamed-block state across messages.

use super::cursor::Cursor;
use super::message::{
    Begin, Commit, Delete, Insert, LogicalMessage, MessageType, OldTuple, Origin, PgOutputMessage,
    PgType, Placement, Relation, RelationColumn, ReplicaIdentity, StreamAbort, StreamCommit,
    StreamStart, Truncate, Update,
};

/// Wire size of the smallest Relation column: flags, empty name, type OID, modifier.
const MIN_RELATION_COLUMN_BYTES: usize = 1 + 1 + 4 + 4;
/// Wire size of one relation OID of a Truncate message.
const TRUNCATE_OID_BYTES: usize = 4;

/// Why bytes are not a valid pgoutput message. Never holds payload bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("empty pgoutput message: there is no message type byte")]
    Empty,
    /// The first byte is not the tag of a protocol version 1 or 2 message.
    #[error("unknown pgoutput message type {} (Weir decodes protocol versions 1 and 2)", show_byte(*.0))]
    UnknownMessage(u8),
    /// The message cannot appear inside (or outside) a streamed block.
    #[error(
        "unexpected {message} message {}",
        if *.in_stream { "inside a streamed block (between Stream Start and Stream Stop)" } else { "outside a streamed block" }
    )]
    OutOfPlace {
        /// The message's type.
        message: MessageType,
        /// Whether the decoder was inside a streamed block.
        in_stream: bool,
    },
    /// The input ends inside a fixed-size field.
    #[error(
        "{message} message: {field} at byte {offset} is cut short: it needs {needed} bytes, {remaining} remain"
    )]
    Truncated {
        /// The message's type.
        message: MessageType,
        /// The field being read.
        field: &'static str,
        /// Offset of the field.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that remain.
        remaining: usize,
    },
    /// A string has no terminating NUL byte before the end of the input.
    #[error("{message} message: {field} at byte {offset} has no terminating NUL byte")]
    Unterminated {
        /// The message's type.
        message: MessageType,
        /// The string field.
        field: &'static str,
        /// Offset of the string's first byte.
        offset: usize,
    },
    /// A declared length or count needs more bytes than remain.
    #[error(
        "{message} message: {field} at byte {offset} declares {len}, more than the {remaining} remaining bytes can hold"
    )]
    TooLarge {
        /// The message's type.
        message: MessageType,
        /// The length or count field.
        field: &'static str,
        /// Offset of the length or count field.
        offset: usize,
        /// The declared length (bytes) or count (entries).
        len: u64,
        /// Bytes that remain after the length or count field.
        remaining: usize,
    },
    /// A length or count is negative.
    #[error("{message} message: {field} at byte {offset} is negative ({value})")]
    Negative {
        /// The message's type.
        message: MessageType,
        /// The length or count field.
        field: &'static str,
        /// Offset of the field.
        offset: usize,
        /// The declared value.
        value: i64,
    },
    /// A tuple column kind is not `n`, `u`, `t` or `b`.
    #[error(
        "{message} message: unknown tuple column kind {} at byte {offset} (expected 'n', 'u', 't' or 'b')",
        show_byte(*.kind)
    )]
    UnknownTupleKind {
        /// The message's type.
        message: MessageType,
        /// The kind byte.
        kind: u8,
        /// Offset of the kind byte.
        offset: usize,
    },
    /// A marker, code or flags byte has a value the protocol does not define.
    #[error("{message} message: {field} at byte {offset} is {}, expected {expected}", show_byte(*.found))]
    InvalidByte {
        /// The message's type.
        message: MessageType,
        /// The field.
        field: &'static str,
        /// Offset of the byte.
        offset: usize,
        /// The byte found.
        found: u8,
        /// What the protocol allows there.
        expected: &'static str,
    },
    /// A name (string field) is not UTF-8.
    #[error("{message} message: {field} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// The message's type.
        message: MessageType,
        /// The string field.
        field: &'static str,
        /// Offset of the string's first byte.
        offset: usize,
    },
    /// A timestamp does not fit an `i64` of microseconds since 1970.
    #[error(
        "{message} message: {field} at byte {offset} is out of range once moved to the Unix epoch"
    )]
    TimestampOutOfRange {
        /// The message's type.
        message: MessageType,
        /// The timestamp field.
        field: &'static str,
        /// Offset of the field.
        offset: usize,
    },
    /// Bytes remain after the message's last field.
    #[error("{message} message: {extra} unexpected bytes after the last field, from byte {offset}")]
    TrailingBytes {
        /// The message's type.
        message: MessageType,
        /// Offset of the first extra byte.
        offset: usize,
        /// How many bytes are extra.
        extra: usize,
    },
}

/// A protocol byte for an error message: `'N' (0x4e)`, or `0x00` when not printable.
fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}' (0x{b:02x})", char::from(b))
    } else {
        format!("0x{b:02x}")
    }
}

/// Decodes one pgoutput message.
///
/// `in_stream` says whether the message comes between a Stream Start and its Stream
/// Stop (protocol version 2), where several messages carry an xid first; [`Decoder`]
/// keeps track of it. Never panics; see the module documentation for the guarantees.
pub fn decode(bytes: &[u8], in_stream: bool) -> Result<PgOutputMessage, DecodeError> {
    let Some(&tag) = bytes.first() else {
        return Err(DecodeError::Empty);
    };
    let message = MessageType::from_tag(tag).ok_or(DecodeError::UnknownMessage(tag))?;
    let misplaced = match message.placement() {
        Placement::OutsideStream => in_stream,
        Placement::InsideStream => !in_stream,
        Placement::Anywhere => false,
    };
    if misplaced {
        return Err(DecodeError::OutOfPlace { message, in_stream });
    }
    let mut c = Cursor {
        buf: bytes,
        pos: 1,
        message,
    };
    let xid = if in_stream && message.has_stream_xid() {
        Some(c.get_u32("xid")?)
    } else {
        None
    };
    let decoded = match message {
        MessageType::Begin => {
            let final_lsn = c.get_u64("final LSN")?;
            let commit_time_us = c.get_timestamp("commit timestamp")?;
            let xid = c.get_u32("xid")?;
            PgOutputMessage::Begin(Begin {
                final_lsn,
                commit_time_us,
                xid,
            })
        }
        MessageType::Commit => {
            c.get_flags("flags", 0, "0 (no flags are defined)")?;
            let commit_lsn = c.get_u64("commit LSN")?;
            let end_lsn = c.get_u64("end LSN")?;
            let commit_time_us = c.get_timestamp("commit timestamp")?;
            PgOutputMessage::Commit(Commit {
                commit_lsn,
                end_lsn,
                commit_time_us,
            })
        }
        MessageType::Origin => {
            let commit_lsn = c.get_u64("origin commit LSN")?;
            let name = c.get_cstr("origin name")?;
            PgOutputMessage::Origin(Origin { commit_lsn, name })
        }
        MessageType::Relation => PgOutputMessage::Relation(relation(&mut c, xid)?),
        MessageType::Type => {
            let oid = c.get_u32("type OID")?;
            let namespace = c.get_cstr("type namespace")?;
            let name = c.get_cstr("type name")?;
            PgOutputMessage::Type(PgType {
                xid,
                oid,
                namespace,
                name,
            })
        }
        MessageType::Insert => {
            let relation_oid = c.get_u32("relation OID")?;
            c.expect_byte("new tuple marker", b'N', "'N'")?;
            let new = c.get_tuple()?;
            PgOutputMessage::Insert(Insert {
                xid,
                relation_oid,
                new,
            })
        }
        MessageType::Update => {
            let relation_oid = c.get_u32("relation OID")?;
            let offset = c.pos;
            let old = match c.get_u8("tuple marker")? {
                b'K' => Some(OldTuple::Key(c.get_tuple()?)),
                b'O' => Some(OldTuple::Full(c.get_tuple()?)),
                b'N' => None,
                found => return Err(c.invalid("tuple marker", offset, found, "'K', 'O' or 'N'")),
            };
            if old.is_some() {
                c.expect_byte("new tuple marker", b'N', "'N'")?;
            }
            let new = c.get_tuple()?;
            PgOutputMessage::Update(Update {
                xid,
                relation_oid,
                old,
                new,
            })
        }
        MessageType::Delete => {
            let relation_oid = c.get_u32("relation OID")?;
            let offset = c.pos;
            let old = match c.get_u8("old tuple marker")? {
                b'K' => OldTuple::Key(c.get_tuple()?),
                b'O' => OldTuple::Full(c.get_tuple()?),
                found => return Err(c.invalid("old tuple marker", offset, found, "'K' or 'O'")),
            };
            PgOutputMessage::Delete(Delete {
                xid,
                relation_oid,
                old,
            })
        }
        MessageType::Truncate => {
            let count_offset = c.pos;
            let count = c.get_i32("relation count")?;
            let options = c.get_flags(
                "options",
                0b11,
                "option bits 1 (CASCADE) and 2 (RESTART IDENTITY) only",
            )?;
            let count = c.check_count(
                "relation count",
                count_offset,
                i64::from(count),
                TRUNCATE_OID_BYTES,
            )?;
            let mut relation_oids = Vec::with_capacity(count);
            for _ in 0..count {
                relation_oids.push(c.get_u32("relation OID")?);
            }
            PgOutputMessage::Truncate(Truncate {
                xid,
                cascade: options & 1 != 0,
                restart_identity: options & 2 != 0,
                relation_oids,
            })
        }
        MessageType::Message => {
            let flags = c.get_flags("flags", 1, "0, or 1 (transactional)")?;
            let lsn = c.get_u64("message LSN")?;
            let prefix = c.get_cstr("prefix")?;
            let content = c.get_counted("content length", "content")?.to_vec();
            PgOutputMessage::Message(LogicalMessage {
                xid,
                transactional: flags & 1 != 0,
                lsn,
                prefix,
                content,
            })
        }
        MessageType::StreamStart => {
            let xid = c.get_u32("xid")?;
            let first = c.get_flags("first segment flag", 1, "0 or 1")?;
            PgOutputMessage::StreamStart(StreamStart {
                xid,
                first_segment: first == 1,
            })
        }
        MessageType::StreamStop => PgOutputMessage::StreamStop,
        MessageType::StreamCommit => {
            let xid = c.get_u32("xid")?;
            c.get_flags("flags", 0, "0 (no flags are defined)")?;
            let commit_lsn = c.get_u64("commit LSN")?;
            let end_lsn = c.get_u64("end LSN")?;
            let commit_time_us = c.get_timestamp("commit timestamp")?;
            PgOutputMessage::StreamCommit(StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_time_us,
            })
        }
        MessageType::StreamAbort => {
            let xid = c.get_u32("xid")?;
            let subxact_xid = c.get_u32("subtransaction xid")?;
            PgOutputMessage::StreamAbort(StreamAbort { xid, subxact_xid })
        }
    };
    c.finish()?;
    Ok(decoded)
}

fn relation(c: &mut Cursor<'_>, xid: Option<u32>) -> Result<Relation, DecodeError> {
    let oid = c.get_u32("relation OID")?;
    let namespace = c.get_cstr("namespace")?;
    let name = c.get_cstr("relation name")?;
    let offset = c.pos;
    let code = c.get_u8("replica identity")?;
    let replica_identity = ReplicaIdentity::from_code(code)
        .ok_or_else(|| c.invalid("replica identity", offset, code, "'d', 'n', 'f' or 'i'"))?;
    let offset = c.pos;
    let count = c.get_i16("column count")?;
    let count = c.check_count(
        "column count",
        offset,
        i64::from(count),
        MIN_RELATION_COLUMN_BYTES,
    )?;
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        let flags = c.get_flags("column flags", 1, "0, or 1 (part of the key)")?;
        let name = c.get_cstr("column name")?;
        let type_oid = c.get_u32("column type OID")?;
        let type_modifier = c.get_i32("column type modifier")?;
        columns.push(RelationColumn {
            is_key: flags == 1,
            name,
            type_oid,
            type_modifier,
        });
    }
    Ok(Relation {
        xid,
        oid,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

/// Keeps track of streamed blocks (protocol version 2) while decoding a stream of
/// messages in order: inside after a Stream Start, outside after a Stream Stop.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    in_stream: bool,
}

impl Decoder {
    /// A decoder outside any streamed block, as a replication stream starts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the next message is inside a streamed block.
    pub fn in_stream(&self) -> bool {
        self.in_stream
    }

    /// Decodes the next message of the stream. On error the state is unchanged.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<PgOutputMessage, DecodeError> {
        let message = decode(bytes, self.in_stream)?;
        match message {
            PgOutputMessage::StreamStart(_) => self.in_stream = true,
            PgOutputMessage::StreamStop => self.in_stream = false,
            _ => {}
        }
        Ok(message)
    }
}
