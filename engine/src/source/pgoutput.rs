//! Decoder of PostgreSQL's `pgoutput` logical replication messages, protocol versions 1
//! and 2.
//!
//! [`decode`] takes the bytes of one pgoutput message: the payload of a replication
//! `XLogData` (`'w'`) message after its 24-byte header, or one `data` value returned by
//! `pg_logical_slot_peek_binary_changes`. The formats are those of PostgreSQL's
//! "Logical Replication Message Formats" (protocol-logicalrep-message-formats).
//!
//! Guarantees:
//! * **Never panics**, on any byte sequence. Every read goes through a cursor with
//!   checked reads; there is no slicing that can panic, no unchecked arithmetic on
//!   lengths, no `unwrap` (enforced by the lints at the top of this file). A declared
//!   count or length is checked against the bytes that remain *before* anything is
//!   allocated, so memory use is bounded by the input's length (a few tens of bytes
//!   per input byte at most), however large the declared counts.
//! * **Errors locate the problem**: a [`DecodeError`] names the message type, the field
//!   and the byte offset (from the message's first byte, the type tag, at offset 0).
//! * **Errors hold no payload bytes**: neither row values nor message contents, which
//!   may be personal data. At most they show one protocol byte (a message tag, a tuple
//!   column kind, a marker) and declared lengths. The `Debug` forms of [`TupleValue`]
//!   and [`LogicalMessage`] show lengths, not contents, for the same reason.
//! * **Strict**: a message decodes whole or not at all. Bytes after the last field are
//!   an error ([`DecodeError::TrailingBytes`]), and so is a flag bit the protocol does
//!   not define: both mean the stream is not what we think it is (another protocol
//!   version, or a framing bug), and guessing would silently lose meaning. Hence
//!   decoding is injective: re-encoding a decoded message gives back the input bytes.
//!
//! Protocol version 2 streams large in-progress transactions in blocks between Stream
//! Start and Stream Stop; inside such a block Relation, Type, Insert, Update, Delete,
//! Truncate and Message carry an xid first. Which layout applies depends on the
//! position in the stream, so [`decode`] is told `in_stream`, and [`Decoder`] tracks it
//! from the messages it decodes. A message that cannot appear where it is (a Begin
//! inside a block, a Stream Stop outside one) is [`DecodeError::OutOfPlace`].
//!
//! Out of scope: the two-phase messages of version 3 (`b`, `P`, `K`, `r`, `p`) are
//! unknown messages, and version 4's Stream Abort (with abort LSN and timestamp) has
//! trailing bytes. Weir asks for `proto_version` 1 or 2 and never receives them.

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

/// Microseconds from 1970-01-01 (Unix epoch) to 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Wire size of the smallest Relation column: flags, empty name, type OID, modifier.
const MIN_RELATION_COLUMN_BYTES: usize = 1 + 1 + 4 + 4;
/// Wire size of the smallest tuple column: its kind byte (`n` or `u`).
const MIN_TUPLE_COLUMN_BYTES: usize = 1;
/// Wire size of one relation OID of a Truncate message.
const TRUNCATE_OID_BYTES: usize = 4;

/// The type of a pgoutput message, named as in PostgreSQL's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// `B`
    Begin,
    /// `C`
    Commit,
    /// `O`
    Origin,
    /// `R`
    Relation,
    /// `Y`
    Type,
    /// `I`
    Insert,
    /// `U`
    Update,
    /// `D`
    Delete,
    /// `T`
    Truncate,
    /// `M`: a logical decoding message (`pg_logical_emit_message`).
    Message,
    /// `S` (protocol version 2)
    StreamStart,
    /// `E` (protocol version 2)
    StreamStop,
    /// `c` (protocol version 2)
    StreamCommit,
    /// `A` (protocol version 2)
    StreamAbort,
}

/// Where a message may appear relative to a streamed block (Stream Start..Stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    OutsideStream,
    InsideStream,
    Anywhere,
}

impl MessageType {
    /// Every message type, in the order of PostgreSQL's documentation.
    pub const ALL: [MessageType; 14] = [
        Self::Begin,
        Self::Commit,
        Self::Origin,
        Self::Relation,
        Self::Type,
        Self::Insert,
        Self::Update,
        Self::Delete,
        Self::Truncate,
        Self::Message,
        Self::StreamStart,
        Self::StreamStop,
        Self::StreamCommit,
        Self::StreamAbort,
    ];

    /// The message type of a tag byte, if it is one of protocol versions 1 and 2.
    pub fn from_tag(tag: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.tag() == tag)
    }

    /// The tag byte that starts a message of this type.
    pub fn tag(self) -> u8 {
        match self {
            Self::Begin => b'B',
            Self::Commit => b'C',
            Self::Origin => b'O',
            Self::Relation => b'R',
            Self::Type => b'Y',
            Self::Insert => b'I',
            Self::Update => b'U',
            Self::Delete => b'D',
            Self::Truncate => b'T',
            Self::Message => b'M',
            Self::StreamStart => b'S',
            Self::StreamStop => b'E',
            Self::StreamCommit => b'c',
            Self::StreamAbort => b'A',
        }
    }

    /// The name PostgreSQL's documentation gives the message.
    pub fn name(self) -> &'static str {
        match self {
            Self::Begin => "Begin",
            Self::Commit => "Commit",
            Self::Origin => "Origin",
            Self::Relation => "Relation",
            Self::Type => "Type",
            Self::Insert => "Insert",
            Self::Update => "Update",
            Self::Delete => "Delete",
            Self::Truncate => "Truncate",
            Self::Message => "Message",
            Self::StreamStart => "Stream Start",
            Self::StreamStop => "Stream Stop",
            Self::StreamCommit => "Stream Commit",
            Self::StreamAbort => "Stream Abort",
        }
    }

    /// Whether the message carries an xid first when inside a streamed block.
    fn has_stream_xid(self) -> bool {
        matches!(
            self,
            Self::Relation
                | Self::Type
                | Self::Insert
                | Self::Update
                | Self::Delete
                | Self::Truncate
                | Self::Message
        )
    }

    fn placement(self) -> Placement {
        match self {
            Self::Begin
            | Self::Commit
            | Self::StreamStart
            | Self::StreamCommit
            | Self::StreamAbort => Placement::OutsideStream,
            Self::StreamStop => Placement::InsideStream,
            // Origin follows Stream Start when the streamed transaction has an origin.
            Self::Origin
            | Self::Relation
            | Self::Type
            | Self::Insert
            | Self::Update
            | Self::Delete
            | Self::Truncate
            | Self::Message => Placement::Anywhere,
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgOutputMessage {
    /// Start of a (non-streamed) transaction.
    Begin(Begin),
    /// End of a (non-streamed) transaction.
    Commit(Commit),
    /// The transaction was replicated from another node (may appear several times).
    Origin(Origin),
    /// Describes a relation; sent before its first change (and again after DDL).
    Relation(Relation),
    /// Describes a non-built-in data type used by a relation that follows.
    Type(PgType),
    /// A row was inserted.
    Insert(Insert),
    /// A row was updated.
    Update(Update),
    /// A row was deleted.
    Delete(Delete),
    /// Relations were truncated.
    Truncate(Truncate),
    /// A logical decoding message (`pg_logical_emit_message`).
    Message(LogicalMessage),
    /// Start of a block of changes of an in-progress transaction (v2).
    StreamStart(StreamStart),
    /// End of the current block of streamed changes (v2).
    StreamStop,
    /// A streamed transaction committed (v2).
    StreamCommit(StreamCommit),
    /// A streamed transaction or subtransaction aborted (v2).
    StreamAbort(StreamAbort),
}

impl PgOutputMessage {
    /// The type of this message.
    pub fn message_type(&self) -> MessageType {
        match self {
            Self::Begin(_) => MessageType::Begin,
            Self::Commit(_) => MessageType::Commit,
            Self::Origin(_) => MessageType::Origin,
            Self::Relation(_) => MessageType::Relation,
            Self::Type(_) => MessageType::Type,
            Self::Insert(_) => MessageType::Insert,
            Self::Update(_) => MessageType::Update,
            Self::Delete(_) => MessageType::Delete,
            Self::Truncate(_) => MessageType::Truncate,
            Self::Message(_) => MessageType::Message,
            Self::StreamStart(_) => MessageType::StreamStart,
            Self::StreamStop => MessageType::StreamStop,
            Self::StreamCommit(_) => MessageType::StreamCommit,
            Self::StreamAbort(_) => MessageType::StreamAbort,
        }
    }
}

/// Begin (`B`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// The LSN of the transaction's commit record.
    pub final_lsn: u64,
    /// Commit time, microseconds since 1970-01-01 UTC (converted from PostgreSQL's
    /// microseconds since 2000-01-01).
    pub commit_time_us: i64,
    /// The transaction's xid.
    pub xid: u32,
}

/// Commit (`C`). Its flags byte is defined as 0; any other value is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The LSN of the commit record.
    pub commit_lsn: u64,
    /// The LSN just past the commit record: where to resume after this transaction.
    pub end_lsn: u64,
    /// Commit time, microseconds since 1970-01-01 UTC.
    pub commit_time_us: i64,
}

/// Origin (`O`): the transaction was replicated from another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The LSN of the commit on the origin server (0 when unknown).
    pub commit_lsn: u64,
    /// The origin's name.
    pub name: String,
}

/// `relreplident` of a relation: which old values updates and deletes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaIdentity {
    /// `d`: the primary key, if any.
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: all columns.
    Full,
    /// `i`: the columns of a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    /// The `relreplident` byte.
    pub fn code(self) -> u8 {
        match self {
            Self::Default => b'd',
            Self::Nothing => b'n',
            Self::Full => b'f',
            Self::Index => b'i',
        }
    }

    /// The replica identity of a `relreplident` byte.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            b'd' => Some(Self::Default),
            b'n' => Some(Self::Nothing),
            b'f' => Some(Self::Full),
            b'i' => Some(Self::Index),
            _ => None,
        }
    }
}

/// Relation (`R`): the published columns of a table, in the order tuples carry them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// The relation's OID, which changes refer to.
    pub oid: u32,
    /// Schema name; empty for `pg_catalog`.
    pub namespace: String,
    /// Relation name.
    pub name: String,
    /// The relation's replica identity.
    pub replica_identity: ReplicaIdentity,
    /// Published columns (no dropped or generated ones), in tuple order.
    pub columns: Vec<RelationColumn>,
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Part of the replica identity (flag bit 1). Under `REPLICA IDENTITY FULL` every
    /// column is.
    pub is_key: bool,
    /// Column name.
    pub name: String,
    /// OID of the column's data type.
    pub type_oid: u32,
    /// `atttypmod` (-1 when none; `numeric(p,s)` is `((p << 16) | s) + 4`).
    pub type_modifier: i32,
}

/// Type (`Y`): a data type that is not built in, sent before a relation using it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgType {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// The type's OID.
    pub oid: u32,
    /// Schema name; empty for `pg_catalog`.
    pub namespace: String,
    /// Type name.
    pub name: String,
}

/// The value of one column in a tuple.
///
/// Values are kept as bytes, undecoded: `Text` is the type's text output in the
/// connection's client encoding (UTF-8 for Weir), `Binary` the type's binary send
/// format (the `binary` option of PostgreSQL 14+). Interpreting them needs the column
/// type of the [`Relation`]. `Debug` shows lengths only: values may be personal data.
#[derive(Clone, PartialEq, Eq)]
pub enum TupleValue {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value that was not sent; keep the value known for it.
    UnchangedToast,
    /// `t`: text format.
    Text(Vec<u8>),
    /// `b`: binary format.
    Binary(Vec<u8>),
}

impl TupleValue {
    /// The bytes of a text or binary value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Text(b) | Self::Binary(b) => Some(b),
            Self::Null | Self::UnchangedToast => None,
        }
    }
}

impl fmt::Debug for TupleValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("Null"),
            Self::UnchangedToast => f.write_str("UnchangedToast"),
            Self::Text(b) => write!(f, "Text(<{} bytes>)", b.len()),
            Self::Binary(b) => write!(f, "Binary(<{} bytes>)", b.len()),
        }
    }
}

/// The old values an Update or Delete carries, per the relation's replica identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OldTuple {
    /// `K`: the replica identity columns; the other columns are `Null`.
    Key(Vec<TupleValue>),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(Vec<TupleValue>),
}

impl OldTuple {
    /// The values, whichever kind.
    pub fn values(&self) -> &[TupleValue] {
        match self {
            Self::Key(v) | Self::Full(v) => v,
        }
    }
}

/// Insert (`I`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// The OID of the [`Relation`].
    pub relation_oid: u32,
    /// The new row.
    pub new: Vec<TupleValue>,
}

/// Update (`U`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// The OID of the [`Relation`].
    pub relation_oid: u32,
    /// The old key (when the key changed) or the old row (`REPLICA IDENTITY FULL`).
    pub old: Option<OldTuple>,
    /// The new row; unchanged TOASTed values are [`TupleValue::UnchangedToast`].
    pub new: Vec<TupleValue>,
}

/// Delete (`D`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// The OID of the [`Relation`].
    pub relation_oid: u32,
    /// The old key or the old row.
    pub old: OldTuple,
}

/// Truncate (`T`). Option bits other than CASCADE (1) and RESTART IDENTITY (2) are an
/// error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// `TRUNCATE ... CASCADE`.
    pub cascade: bool,
    /// `TRUNCATE ... RESTART IDENTITY`.
    pub restart_identity: bool,
    /// OIDs of the truncated relations.
    pub relation_oids: Vec<u32>,
}

/// Message (`M`): a logical decoding message from `pg_logical_emit_message`. `Debug`
/// shows the content's length only.
#[derive(Clone, PartialEq, Eq)]
pub struct LogicalMessage {
    /// The (sub)transaction's xid, inside a streamed block only.
    pub xid: Option<u32>,
    /// Emitted as transactional (delivered within its transaction, at commit) rather
    /// than at once. Flag bits other than 1 are an error.
    pub transactional: bool,
    /// The LSN of the message.
    pub lsn: u64,
    /// The prefix given by the emitter.
    pub prefix: String,
    /// The content, as emitted.
    pub content: Vec<u8>,
}

impl fmt::Debug for LogicalMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogicalMessage")
            .field("xid", &self.xid)
            .field("transactional", &self.transactional)
            .field("lsn", &self.lsn)
            .field("prefix", &self.prefix)
            .field("content", &format_args!("<{} bytes>", self.content.len()))
            .finish()
    }
}

/// Stream Start (`S`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamStart {
    /// The top-level transaction's xid.
    pub xid: u32,
    /// The first block of this transaction.
    pub first_segment: bool,
}

/// Stream Commit (`c`). Its flags byte is defined as 0; any other value is an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommit {
    /// The top-level transaction's xid.
    pub xid: u32,
    /// The LSN of the commit record.
    pub commit_lsn: u64,
    /// The LSN just past the commit record.
    pub end_lsn: u64,
    /// Commit time, microseconds since 1970-01-01 UTC.
    pub commit_time_us: i64,
}

/// Stream Abort (`A`): discard the streamed changes of `subxact_xid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamAbort {
    /// The top-level transaction's xid.
    pub xid: u32,
    /// The aborted subtransaction's xid; equal to `xid` when the whole transaction
    /// aborted.
    pub subxact_xid: u32,
}

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

/// Checked reads over one message; `pos` never exceeds `buf.len()`.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    message: MessageType,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn remaining(&self) -> usize {
        self.rest().len()
    }

    /// Moves past `n` bytes already known to be there.
    fn advance(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n).min(self.buf.len());
    }

    fn truncated(&self, field: &'static str, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            message: self.message,
            field,
            offset: self.pos,
            needed,
            remaining: self.remaining(),
        }
    }

    fn invalid(
        &self,
        field: &'static str,
        offset: usize,
        found: u8,
        expected: &'static str,
    ) -> DecodeError {
        DecodeError::InvalidByte {
            message: self.message,
            field,
            offset,
            found,
            expected,
        }
    }

    fn get_bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let bytes = self
            .rest()
            .get(..n)
            .ok_or_else(|| self.truncated(field, n))?;
        self.advance(n);
        Ok(bytes)
    }

    fn get_array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let array = *self
            .rest()
            .first_chunk::<N>()
            .ok_or_else(|| self.truncated(field, N))?;
        self.advance(N);
        Ok(array)
    }

    fn get_u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.get_array(field).map(u8::from_be_bytes)
    }

    fn get_i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        self.get_array(field).map(i16::from_be_bytes)
    }

    fn get_i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        self.get_array(field).map(i32::from_be_bytes)
    }

    fn get_u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        self.get_array(field).map(u32::from_be_bytes)
    }

    fn get_u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        self.get_array(field).map(u64::from_be_bytes)
    }

    fn get_i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        self.get_array(field).map(i64::from_be_bytes)
    }

    /// A PostgreSQL timestamp, moved from the 2000 epoch to the Unix epoch.
    fn get_timestamp(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let offset = self.pos;
        let pg = self.get_i64(field)?;
        pg.checked_add(PG_EPOCH_OFFSET_US)
            .ok_or(DecodeError::TimestampOutOfRange {
                message: self.message,
                field,
                offset,
            })
    }

    /// A flags byte in which only the bits of `allowed` may be set.
    fn get_flags(
        &mut self,
        field: &'static str,
        allowed: u8,
        expected: &'static str,
    ) -> Result<u8, DecodeError> {
        let offset = self.pos;
        let flags = self.get_u8(field)?;
        if flags & !allowed != 0 {
            return Err(self.invalid(field, offset, flags, expected));
        }
        Ok(flags)
    }

    fn expect_byte(
        &mut self,
        field: &'static str,
        want: u8,
        expected: &'static str,
    ) -> Result<(), DecodeError> {
        let offset = self.pos;
        match self.get_u8(field)? {
            b if b == want => Ok(()),
            found => Err(self.invalid(field, offset, found, expected)),
        }
    }

    /// A NUL-terminated UTF-8 string.
    fn get_cstr(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let offset = self.pos;
        let unterminated = DecodeError::Unterminated {
            message: self.message,
            field,
            offset,
        };
        let rest = self.rest();
        let nul = rest.iter().position(|&b| b == 0);
        let (text, _) = nul
            .and_then(|nul| rest.split_at_checked(nul))
            .ok_or(unterminated)?;
        let text = std::str::from_utf8(text).map_err(|_| DecodeError::InvalidUtf8 {
            message: self.message,
            field,
            offset,
        })?;
        self.advance(text.len().saturating_add(1));
        Ok(text.to_owned())
    }

    /// Bytes preceded by their Int32 length.
    fn get_counted(
        &mut self,
        length_field: &'static str,
        field: &'static str,
    ) -> Result<&'a [u8], DecodeError> {
        let offset = self.pos;
        let len = self.get_i32(length_field)?;
        let len = self.check_count(length_field, offset, i64::from(len), 1)?;
        self.get_bytes(len, field)
    }

    /// A declared count (or length) of entries of at least `min_size` bytes each, checked
    /// against the bytes that remain, so that it can be used as an allocation capacity.
    fn check_count(
        &self,
        field: &'static str,
        offset: usize,
        value: i64,
        min_size: usize,
    ) -> Result<usize, DecodeError> {
        let count = usize::try_from(value).map_err(|_| DecodeError::Negative {
            message: self.message,
            field,
            offset,
            value,
        })?;
        let remaining = self.remaining();
        if count
            .checked_mul(min_size)
            .is_none_or(|needed| needed > remaining)
        {
            return Err(DecodeError::TooLarge {
                message: self.message,
                field,
                offset,
                len: u64::try_from(count).unwrap_or(u64::MAX),
                remaining,
            });
        }
        Ok(count)
    }

    /// TupleData: an Int16 column count, then each column's kind and value.
    fn get_tuple(&mut self) -> Result<Vec<TupleValue>, DecodeError> {
        let offset = self.pos;
        let count = self.get_i16("tuple column count")?;
        let count = self.check_count(
            "tuple column count",
            offset,
            i64::from(count),
            MIN_TUPLE_COLUMN_BYTES,
        )?;
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            let offset = self.pos;
            let value = match self.get_u8("tuple column kind")? {
                b'n' => TupleValue::Null,
                b'u' => TupleValue::UnchangedToast,
                b't' => TupleValue::Text(
                    self.get_counted("text value length", "text value")?
                        .to_vec(),
                ),
                b'b' => TupleValue::Binary(
                    self.get_counted("binary value length", "binary value")?
                        .to_vec(),
                ),
                kind => {
                    return Err(DecodeError::UnknownTupleKind {
                        message: self.message,
                        kind,
                        offset,
                    });
                }
            };
            values.push(value);
        }
        Ok(values)
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes {
                message: self.message,
                offset: self.pos,
                extra,
            }),
        }
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
    use proptest::prelude::*;
    use std::sync::LazyLock;

    use PgOutputMessage as M;
    use TupleValue::{Binary, Null, Text, UnchangedToast};

    /// Writes message bytes field by field, as the protocol documentation lists them.
    struct W(Vec<u8>);

    impl W {
        fn new(tag: u8) -> Self {
            W(vec![tag])
        }
        fn u8(mut self, v: u8) -> Self {
            self.0.push(v);
            self
        }
        fn i16(mut self, v: i16) -> Self {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn i32(mut self, v: i32) -> Self {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn u32(mut self, v: u32) -> Self {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn u64(mut self, v: u64) -> Self {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn i64(mut self, v: i64) -> Self {
            self.0.extend(v.to_be_bytes());
            self
        }
        fn raw(mut self, v: &[u8]) -> Self {
            self.0.extend_from_slice(v);
            self
        }
        fn cstr(self, s: &str) -> Self {
            self.raw(s.as_bytes()).u8(0)
        }
        fn counted(self, v: &[u8]) -> Self {
            let len = i32::try_from(v.len()).expect("test values are small");
            self.i32(len).raw(v)
        }
        fn xid(self, xid: Option<u32>) -> Self {
            match xid {
                Some(x) => self.u32(x),
                None => self,
            }
        }
        /// TupleData.
        fn tuple(self, values: &[TupleValue]) -> Self {
            let n = i16::try_from(values.len()).expect("few columns");
            values.iter().fold(self.i16(n), |w, v| match v {
                Null => w.u8(b'n'),
                UnchangedToast => w.u8(b'u'),
                Text(b) => w.u8(b't').counted(b),
                Binary(b) => w.u8(b'b').counted(b),
            })
        }
    }

    /// PostgreSQL's timestamp (microseconds since 2000) of a Unix one.
    fn pg_time(unix_us: i64) -> i64 {
        unix_us
            .checked_sub(PG_EPOCH_OFFSET_US)
            .expect("a decodable time")
    }

    /// The test encoder: the inverse of [`decode`]. The xid is written when present.
    fn encode(message: &PgOutputMessage) -> Vec<u8> {
        let w = W::new(message.message_type().tag());
        let w = match message {
            M::Begin(b) => w.u64(b.final_lsn).i64(pg_time(b.commit_time_us)).u32(b.xid),
            M::Commit(c) => w
                .u8(0)
                .u64(c.commit_lsn)
                .u64(c.end_lsn)
                .i64(pg_time(c.commit_time_us)),
            M::Origin(o) => w.u64(o.commit_lsn).cstr(&o.name),
            M::Relation(r) => {
                let n = i16::try_from(r.columns.len()).expect("few columns");
                let w = w
                    .xid(r.xid)
                    .u32(r.oid)
                    .cstr(&r.namespace)
                    .cstr(&r.name)
                    .u8(r.replica_identity.code())
                    .i16(n);
                r.columns.iter().fold(w, |w, c| {
                    w.u8(u8::from(c.is_key))
                        .cstr(&c.name)
                        .u32(c.type_oid)
                        .i32(c.type_modifier)
                })
            }
            M::Type(t) => w.xid(t.xid).u32(t.oid).cstr(&t.namespace).cstr(&t.name),
            M::Insert(i) => w.xid(i.xid).u32(i.relation_oid).u8(b'N').tuple(&i.new),
            M::Update(u) => {
                let w = w.xid(u.xid).u32(u.relation_oid);
                let w = match &u.old {
                    None => w,
                    Some(OldTuple::Key(t)) => w.u8(b'K').tuple(t),
                    Some(OldTuple::Full(t)) => w.u8(b'O').tuple(t),
                };
                w.u8(b'N').tuple(&u.new)
            }
            M::Delete(d) => {
                let w = w.xid(d.xid).u32(d.relation_oid);
                match &d.old {
                    OldTuple::Key(t) => w.u8(b'K').tuple(t),
                    OldTuple::Full(t) => w.u8(b'O').tuple(t),
                }
            }
            M::Truncate(t) => {
                let n = i32::try_from(t.relation_oids.len()).expect("few relations");
                let options = u8::from(t.cascade) | (u8::from(t.restart_identity) << 1);
                let w = w.xid(t.xid).i32(n).u8(options);
                t.relation_oids.iter().fold(w, |w, &oid| w.u32(oid))
            }
            M::Message(m) => w
                .xid(m.xid)
                .u8(u8::from(m.transactional))
                .u64(m.lsn)
                .cstr(&m.prefix)
                .counted(&m.content),
            M::StreamStart(s) => w.u32(s.xid).u8(u8::from(s.first_segment)),
            M::StreamStop => w,
            M::StreamCommit(c) => w
                .u32(c.xid)
                .u8(0)
                .u64(c.commit_lsn)
                .u64(c.end_lsn)
                .i64(pg_time(c.commit_time_us)),
            M::StreamAbort(a) => w.u32(a.xid).u32(a.subxact_xid),
        };
        w.0
    }

    fn text(s: &str) -> TupleValue {
        Text(s.as_bytes().to_vec())
    }

    fn col(is_key: bool, name: &str, type_oid: u32, type_modifier: i32) -> RelationColumn {
        RelationColumn {
            is_key,
            name: name.to_owned(),
            type_oid,
            type_modifier,
        }
    }

    /// A valid message: its bytes (built field by field from the documentation, not by
    /// [`encode`]), whether it is inside a streamed block, and what it decodes to.
    struct Case {
        name: &'static str,
        in_stream: bool,
        bytes: Vec<u8>,
        expected: PgOutputMessage,
    }

    fn case(name: &'static str, in_stream: bool, w: W, expected: PgOutputMessage) -> Case {
        Case {
            name,
            in_stream,
            bytes: w.0,
            expected,
        }
    }

    /// 2024-05-01T12:00:00Z.
    const MAY_DAY_UNIX_US: i64 = 1_714_564_800_000_000;
    const MAY_DAY_PG_US: i64 = 767_880_000_000_000;

    static CASES: LazyLock<Vec<Case>> = LazyLock::new(cases);

    fn cases() -> Vec<Case> {
        let items_columns = || {
            vec![
                col(true, "id", 20, -1),
                col(false, "name", 25, -1),
                col(false, "price", 1700, (10 << 16 | 2) + 4),
            ]
        };
        let items_w = |w: W| {
            w.u32(16_384)
                .cstr("public")
                .cstr("items")
                .u8(b'd')
                .i16(3)
                .u8(1)
                .cstr("id")
                .u32(20)
                .i32(-1)
                .u8(0)
                .cstr("name")
                .u32(25)
                .i32(-1)
                .u8(0)
                .cstr("price")
                .u32(1700)
                .i32(655_366)
        };
        let row = || {
            vec![
                text("1"),
                Null,
                UnchangedToast,
                Binary(vec![0, 0, 0, 1]),
                text(""),
                Text(vec![0xff, 0xfe]),
            ]
        };
        let row_w = |w: W| {
            w.i16(6)
                .u8(b't')
                .i32(1)
                .raw(b"1")
                .u8(b'n')
                .u8(b'u')
                .u8(b'b')
                .i32(4)
                .raw(&[0, 0, 0, 1])
                .u8(b't')
                .i32(0)
                .u8(b't')
                .i32(2)
                .raw(&[0xff, 0xfe])
        };
        let key_w = |w: W| w.i16(2).u8(b't').i32(1).raw(b"7").u8(b'n');
        let key = || vec![text("7"), Null];
        vec![
            case(
                "begin",
                false,
                W::new(b'B')
                    .u64(0x0000_0001_6B37_4D48)
                    .i64(MAY_DAY_PG_US)
                    .u32(734),
                M::Begin(Begin {
                    final_lsn: 0x0000_0001_6B37_4D48,
                    commit_time_us: MAY_DAY_UNIX_US,
                    xid: 734,
                }),
            ),
            case(
                "begin at PostgreSQL's epoch",
                false,
                W::new(b'B').u64(1).i64(0).u32(u32::MAX),
                M::Begin(Begin {
                    final_lsn: 1,
                    commit_time_us: 946_684_800_000_000,
                    xid: u32::MAX,
                }),
            ),
            case(
                "begin at the Unix epoch (before 2000)",
                false,
                W::new(b'B').u64(u64::MAX).i64(-946_684_800_000_000).u32(0),
                M::Begin(Begin {
                    final_lsn: u64::MAX,
                    commit_time_us: 0,
                    xid: 0,
                }),
            ),
            case(
                "commit",
                false,
                W::new(b'C')
                    .u8(0)
                    .u64(0x16B3_74D48)
                    .u64(0x16B3_74D78)
                    .i64(MAY_DAY_PG_US + 1),
                M::Commit(Commit {
                    commit_lsn: 0x16B3_74D48,
                    end_lsn: 0x16B3_74D78,
                    commit_time_us: MAY_DAY_UNIX_US + 1,
                }),
            ),
            case(
                "origin",
                false,
                W::new(b'O').u64(0xABCDEF).cstr("upstream"),
                M::Origin(Origin {
                    commit_lsn: 0xABCDEF,
                    name: "upstream".to_owned(),
                }),
            ),
            case(
                "origin inside a streamed block (no xid)",
                true,
                W::new(b'O').u64(0).cstr("ünïcode"),
                M::Origin(Origin {
                    commit_lsn: 0,
                    name: "ünïcode".to_owned(),
                }),
            ),
            case(
                "relation",
                false,
                items_w(W::new(b'R')),
                M::Relation(Relation {
                    xid: None,
                    oid: 16_384,
                    namespace: "public".to_owned(),
                    name: "items".to_owned(),
                    replica_identity: ReplicaIdentity::Default,
                    columns: items_columns(),
                }),
            ),
            case(
                "relation in a stream",
                true,
                items_w(W::new(b'R').u32(900)),
                M::Relation(Relation {
                    xid: Some(900),
                    oid: 16_384,
                    namespace: "public".to_owned(),
                    name: "items".to_owned(),
                    replica_identity: ReplicaIdentity::Default,
                    columns: items_columns(),
                }),
            ),
            case(
                "relation of pg_catalog, identity full, no columns",
                false,
                W::new(b'R').u32(1).cstr("").cstr("t").u8(b'f').i16(0),
                M::Relation(Relation {
                    xid: None,
                    oid: 1,
                    namespace: String::new(),
                    name: "t".to_owned(),
                    replica_identity: ReplicaIdentity::Full,
                    columns: vec![],
                }),
            ),
            case(
                "relation, identity nothing",
                false,
                W::new(b'R')
                    .u32(2)
                    .cstr("s")
                    .cstr("t")
                    .u8(b'n')
                    .i16(1)
                    .u8(0)
                    .cstr("")
                    .u32(u32::MAX)
                    .i32(i32::MIN),
                M::Relation(Relation {
                    xid: None,
                    oid: 2,
                    namespace: "s".to_owned(),
                    name: "t".to_owned(),
                    replica_identity: ReplicaIdentity::Nothing,
                    columns: vec![col(false, "", u32::MAX, i32::MIN)],
                }),
            ),
            case(
                "relation, identity index",
                false,
                W::new(b'R')
                    .u32(3)
                    .cstr("s")
                    .cstr("t")
                    .u8(b'i')
                    .i16(1)
                    .u8(1)
                    .cstr("k")
                    .u32(23)
                    .i32(-1),
                M::Relation(Relation {
                    xid: None,
                    oid: 3,
                    namespace: "s".to_owned(),
                    name: "t".to_owned(),
                    replica_identity: ReplicaIdentity::Index,
                    columns: vec![col(true, "k", 23, -1)],
                }),
            ),
            case(
                "type",
                false,
                W::new(b'Y').u32(16_390).cstr("public").cstr("mood"),
                M::Type(PgType {
                    xid: None,
                    oid: 16_390,
                    namespace: "public".to_owned(),
                    name: "mood".to_owned(),
                }),
            ),
            case(
                "type in a stream",
                true,
                W::new(b'Y').u32(901).u32(16_390).cstr("").cstr("mood"),
                M::Type(PgType {
                    xid: Some(901),
                    oid: 16_390,
                    namespace: String::new(),
                    name: "mood".to_owned(),
                }),
            ),
            case(
                "insert with every column kind",
                false,
                row_w(W::new(b'I').u32(16_384).u8(b'N')),
                M::Insert(Insert {
                    xid: None,
                    relation_oid: 16_384,
                    new: row(),
                }),
            ),
            case(
                "insert of no columns",
                false,
                W::new(b'I').u32(5).u8(b'N').i16(0),
                M::Insert(Insert {
                    xid: None,
                    relation_oid: 5,
                    new: vec![],
                }),
            ),
            case(
                "insert in a stream",
                true,
                row_w(W::new(b'I').u32(902).u32(16_384).u8(b'N')),
                M::Insert(Insert {
                    xid: Some(902),
                    relation_oid: 16_384,
                    new: row(),
                }),
            ),
            case(
                "update without an old tuple",
                false,
                row_w(W::new(b'U').u32(16_384).u8(b'N')),
                M::Update(Update {
                    xid: None,
                    relation_oid: 16_384,
                    old: None,
                    new: row(),
                }),
            ),
            case(
                "update with an old key",
                false,
                row_w(key_w(W::new(b'U').u32(16_384).u8(b'K')).u8(b'N')),
                M::Update(Update {
                    xid: None,
                    relation_oid: 16_384,
                    old: Some(OldTuple::Key(key())),
                    new: row(),
                }),
            ),
            case(
                "update with an old row",
                false,
                row_w(row_w(W::new(b'U').u32(16_384).u8(b'O')).u8(b'N')),
                M::Update(Update {
                    xid: None,
                    relation_oid: 16_384,
                    old: Some(OldTuple::Full(row())),
                    new: row(),
                }),
            ),
            case(
                "update in a stream, with an old row",
                true,
                row_w(row_w(W::new(b'U').u32(903).u32(16_384).u8(b'O')).u8(b'N')),
                M::Update(Update {
                    xid: Some(903),
                    relation_oid: 16_384,
                    old: Some(OldTuple::Full(row())),
                    new: row(),
                }),
            ),
            case(
                "delete by key",
                false,
                key_w(W::new(b'D').u32(16_384).u8(b'K')),
                M::Delete(Delete {
                    xid: None,
                    relation_oid: 16_384,
                    old: OldTuple::Key(key()),
                }),
            ),
            case(
                "delete with the old row",
                false,
                row_w(W::new(b'D').u32(16_384).u8(b'O')),
                M::Delete(Delete {
                    xid: None,
                    relation_oid: 16_384,
                    old: OldTuple::Full(row()),
                }),
            ),
            case(
                "delete in a stream",
                true,
                key_w(W::new(b'D').u32(904).u32(16_384).u8(b'K')),
                M::Delete(Delete {
                    xid: Some(904),
                    relation_oid: 16_384,
                    old: OldTuple::Key(key()),
                }),
            ),
            case(
                "truncate of three relations",
                false,
                W::new(b'T').i32(3).u8(0).u32(10).u32(11).u32(12),
                M::Truncate(Truncate {
                    xid: None,
                    cascade: false,
                    restart_identity: false,
                    relation_oids: vec![10, 11, 12],
                }),
            ),
            case(
                "truncate cascade",
                false,
                W::new(b'T').i32(1).u8(1).u32(10),
                M::Truncate(Truncate {
                    xid: None,
                    cascade: true,
                    restart_identity: false,
                    relation_oids: vec![10],
                }),
            ),
            case(
                "truncate restart identity",
                false,
                W::new(b'T').i32(2).u8(2).u32(10).u32(11),
                M::Truncate(Truncate {
                    xid: None,
                    cascade: false,
                    restart_identity: true,
                    relation_oids: vec![10, 11],
                }),
            ),
            case(
                "truncate in a stream, cascade and restart identity",
                true,
                W::new(b'T').u32(905).i32(2).u8(3).u32(10).u32(11),
                M::Truncate(Truncate {
                    xid: Some(905),
                    cascade: true,
                    restart_identity: true,
                    relation_oids: vec![10, 11],
                }),
            ),
            case(
                "transactional message",
                false,
                W::new(b'M')
                    .u8(1)
                    .u64(0x16B3_74D50)
                    .cstr("weir")
                    .i32(5)
                    .raw(b"hello"),
                M::Message(LogicalMessage {
                    xid: None,
                    transactional: true,
                    lsn: 0x16B3_74D50,
                    prefix: "weir".to_owned(),
                    content: b"hello".to_vec(),
                }),
            ),
            case(
                "non-transactional message, empty prefix and content",
                false,
                W::new(b'M').u8(0).u64(7).cstr("").i32(0),
                M::Message(LogicalMessage {
                    xid: None,
                    transactional: false,
                    lsn: 7,
                    prefix: String::new(),
                    content: vec![],
                }),
            ),
            case(
                "message in a stream, binary content",
                true,
                W::new(b'M')
                    .u32(906)
                    .u8(1)
                    .u64(8)
                    .cstr("p")
                    .i32(3)
                    .raw(&[0, 0xff, b'M']),
                M::Message(LogicalMessage {
                    xid: Some(906),
                    transactional: true,
                    lsn: 8,
                    prefix: "p".to_owned(),
                    content: vec![0, 0xff, b'M'],
                }),
            ),
            case(
                "stream start, first segment",
                false,
                W::new(b'S').u32(907).u8(1),
                M::StreamStart(StreamStart {
                    xid: 907,
                    first_segment: true,
                }),
            ),
            case(
                "stream start, later segment",
                false,
                W::new(b'S').u32(907).u8(0),
                M::StreamStart(StreamStart {
                    xid: 907,
                    first_segment: false,
                }),
            ),
            case("stream stop", true, W::new(b'E'), M::StreamStop),
            case(
                "stream commit",
                false,
                W::new(b'c')
                    .u32(907)
                    .u8(0)
                    .u64(0x200)
                    .u64(0x230)
                    .i64(MAY_DAY_PG_US),
                M::StreamCommit(StreamCommit {
                    xid: 907,
                    commit_lsn: 0x200,
                    end_lsn: 0x230,
                    commit_time_us: MAY_DAY_UNIX_US,
                }),
            ),
            case(
                "stream abort of a subtransaction",
                false,
                W::new(b'A').u32(907).u32(908),
                M::StreamAbort(StreamAbort {
                    xid: 907,
                    subxact_xid: 908,
                }),
            ),
            case(
                "stream abort of a whole transaction",
                false,
                W::new(b'A').u32(907).u32(907),
                M::StreamAbort(StreamAbort {
                    xid: 907,
                    subxact_xid: 907,
                }),
            ),
        ]
    }

    #[test]
    fn every_case_decodes_to_its_message_and_encodes_back() {
        for c in CASES.iter() {
            let decoded = decode(&c.bytes, c.in_stream)
                .unwrap_or_else(|e| panic!("{}: does not decode: {e}", c.name));
            assert_eq!(decoded, c.expected, "{}", c.name);
            assert_eq!(encode(&c.expected), c.bytes, "{}: re-encoding", c.name);
        }
        let covered: Vec<MessageType> = CASES.iter().map(|c| c.expected.message_type()).collect();
        for t in MessageType::ALL {
            assert!(covered.contains(&t), "no case for {t}");
        }
    }

    #[test]
    fn literal_bytes_pin_byte_order_and_layout() {
        // Begin: LSN 1/6B374D48, 2024-05-01T12:00:00Z, xid 734, written out by hand.
        let begin = [
            b'B', 0, 0, 0, 1, 0x6B, 0x37, 0x4D, 0x48, 0x00, 0x02, 0xba, 0x61, 0xfe, 0xa1, 0x50,
            0x00, 0x00, 0x00, 0x02, 0xde,
        ];
        assert_eq!(
            decode(&begin, false),
            Ok(M::Begin(Begin {
                final_lsn: 0x1_6B37_4D48,
                commit_time_us: MAY_DAY_UNIX_US,
                xid: 734,
            }))
        );
        // Insert into relation 16384 of ('42', NULL).
        let insert = [
            b'I', 0, 0, 0x40, 0, b'N', 0, 2, b't', 0, 0, 0, 2, b'4', b'2', b'n',
        ];
        assert_eq!(
            decode(&insert, false),
            Ok(M::Insert(Insert {
                xid: None,
                relation_oid: 16_384,
                new: vec![text("42"), Null],
            }))
        );
        assert_eq!(decode(b"E", true), Ok(M::StreamStop));
    }

    #[test]
    fn every_strict_prefix_is_an_error() {
        for c in CASES.iter() {
            for len in 0..c.bytes.len() {
                let result = decode(&c.bytes[..len], c.in_stream);
                assert!(
                    result.is_err(),
                    "{}: the first {len} bytes decode: {result:?}",
                    c.name
                );
            }
        }
        assert_eq!(decode(&[], false), Err(DecodeError::Empty));
    }

    #[test]
    fn a_byte_after_the_last_field_is_trailing_bytes() {
        for c in CASES.iter() {
            for extra in [&[0u8][..], b"N", &[1, 2, 3]] {
                let mut bytes = c.bytes.clone();
                bytes.extend_from_slice(extra);
                assert_eq!(
                    decode(&bytes, c.in_stream),
                    Err(DecodeError::TrailingBytes {
                        message: c.expected.message_type(),
                        offset: c.bytes.len(),
                        extra: extra.len(),
                    }),
                    "{}",
                    c.name
                );
            }
        }
    }

    #[test]
    fn messages_out_of_their_place_in_streamed_blocks_are_errors() {
        for c in CASES.iter() {
            let t = c.expected.message_type();
            let misplaced = decode(&c.bytes, !c.in_stream);
            match t.placement() {
                Placement::Anywhere => {}
                _ => assert_eq!(
                    misplaced,
                    Err(DecodeError::OutOfPlace {
                        message: t,
                        in_stream: !c.in_stream
                    }),
                    "{}",
                    c.name
                ),
            }
        }
        let err = decode(b"E", false).expect_err("Stream Stop outside a block");
        assert_eq!(
            err.to_string(),
            "unexpected Stream Stop message outside a streamed block"
        );
    }

    #[test]
    fn the_decoder_tracks_streamed_blocks() {
        let mut d = Decoder::new();
        let insert = |xid: Option<u32>| {
            encode(&M::Insert(Insert {
                xid,
                relation_oid: 1,
                new: vec![text("a")],
            }))
        };
        assert!(d.decode(&insert(None)).is_ok());
        let start = encode(&M::StreamStart(StreamStart {
            xid: 5,
            first_segment: true,
        }));
        assert!(d.decode(&start).is_ok());
        assert!(d.in_stream());
        // A failed decode leaves the state alone.
        assert!(d.decode(&start).is_err());
        assert!(d.in_stream());
        match d.decode(&insert(Some(6))) {
            Ok(M::Insert(i)) => assert_eq!(i.xid, Some(6)),
            other => panic!("expected an insert, got {other:?}"),
        }
        assert_eq!(d.decode(b"E"), Ok(M::StreamStop));
        assert!(!d.in_stream());
        assert!(d.decode(&insert(None)).is_ok());
    }

    #[test]
    fn unknown_and_invalid_protocol_bytes_are_named() {
        for tag in 0..=u8::MAX {
            if MessageType::from_tag(tag).is_none() {
                assert_eq!(
                    decode(&[tag, 0, 0, 0, 0], false),
                    Err(DecodeError::UnknownMessage(tag))
                );
            }
        }
        assert_eq!(
            decode(b"P", false).map_err(|e| e.to_string()),
            Err(
                "unknown pgoutput message type 'P' (0x50) (Weir decodes protocol versions 1 and 2)"
                    .to_owned()
            )
        );
        let invalid = |bytes: Vec<u8>, in_stream: bool| match decode(&bytes, in_stream) {
            Err(DecodeError::InvalidByte {
                field,
                offset,
                found,
                ..
            }) => (field, offset, found),
            other => panic!("expected an invalid byte, got {other:?}"),
        };
        let insert_k = W::new(b'I').u32(1).u8(b'K').i16(0).0;
        assert_eq!(invalid(insert_k, false), ("new tuple marker", 5, b'K'));
        let update_x = W::new(b'U').u32(1).u8(b'X').i16(0).0;
        assert_eq!(invalid(update_x, false), ("tuple marker", 5, b'X'));
        let update_kk = W::new(b'U').u32(1).u8(b'K').i16(0).u8(b'K').i16(0).0;
        assert_eq!(invalid(update_kk, false), ("new tuple marker", 8, b'K'));
        let delete_n = W::new(b'D').u32(1).u8(b'N').i16(0).0;
        assert_eq!(invalid(delete_n, false), ("old tuple marker", 5, b'N'));
        let identity = W::new(b'R').u32(1).cstr("s").cstr("t").u8(b'x').i16(0).0;
        assert_eq!(invalid(identity, false), ("replica identity", 9, b'x'));
        let column_flags = W::new(b'R')
            .u32(1)
            .cstr("s")
            .cstr("t")
            .u8(b'd')
            .i16(1)
            .u8(2)
            .cstr("c")
            .u32(23)
            .i32(-1)
            .0;
        assert_eq!(invalid(column_flags, false), ("column flags", 12, 2));
        let commit_flags = W::new(b'C').u8(1).u64(0).u64(0).i64(0).0;
        assert_eq!(invalid(commit_flags, false), ("flags", 1, 1));
        let stream_commit_flags = W::new(b'c').u32(1).u8(4).u64(0).u64(0).i64(0).0;
        assert_eq!(invalid(stream_commit_flags, false), ("flags", 5, 4));
        let truncate_options = W::new(b'T').i32(1).u8(4).u32(1).0;
        assert_eq!(invalid(truncate_options, false), ("options", 5, 4));
        let message_flags = W::new(b'M').u8(2).u64(0).cstr("").i32(0).0;
        assert_eq!(invalid(message_flags, false), ("flags", 1, 2));
        let first_segment = W::new(b'S').u32(1).u8(2).0;
        assert_eq!(invalid(first_segment, false), ("first segment flag", 5, 2));
        let kind = W::new(b'I').u32(1).u8(b'N').i16(2).u8(b'n').u8(b'x').0;
        assert_eq!(
            decode(&kind, false),
            Err(DecodeError::UnknownTupleKind {
                message: MessageType::Insert,
                kind: b'x',
                offset: 9,
            })
        );
    }

    #[test]
    fn lengths_and_counts_are_checked_before_allocating() {
        // A tuple declaring 32767 columns with 10 bytes left fails at the count.
        let many = W::new(b'I')
            .u32(1)
            .u8(b'N')
            .i16(i16::MAX)
            .raw(&[b'n'; 10])
            .0;
        assert_eq!(
            decode(&many, false),
            Err(DecodeError::TooLarge {
                message: MessageType::Insert,
                field: "tuple column count",
                offset: 6,
                len: 32_767,
                remaining: 10,
            })
        );
        // The count of 0xFFFF is -1 as PostgreSQL's Int16.
        let negative = W::new(b'R')
            .u32(1)
            .cstr("s")
            .cstr("t")
            .u8(b'd')
            .raw(&[0xff, 0xff])
            .0;
        assert_eq!(
            decode(&negative, false),
            Err(DecodeError::Negative {
                message: MessageType::Relation,
                field: "column count",
                offset: 10,
                value: -1,
            })
        );
        // 100 relation columns need at least 1000 bytes.
        let columns = W::new(b'R')
            .u32(1)
            .cstr("s")
            .cstr("t")
            .u8(b'd')
            .i16(100)
            .raw(&[0; 999])
            .0;
        assert!(matches!(
            decode(&columns, false),
            Err(DecodeError::TooLarge {
                len: 100,
                remaining: 999,
                ..
            })
        ));
        let relations = W::new(b'T').i32(i32::MAX).u8(0).u32(1).0;
        assert!(matches!(
            decode(&relations, false),
            Err(DecodeError::TooLarge {
                field: "relation count",
                offset: 1,
                remaining: 4,
                ..
            })
        ));
        let value = W::new(b'I').u32(1).u8(b'N').i16(1).u8(b't').i32(i32::MAX).0;
        assert!(matches!(
            decode(&value, false),
            Err(DecodeError::TooLarge {
                field: "text value length",
                offset: 9,
                ..
            })
        ));
        let value = W::new(b'I').u32(1).u8(b'N').i16(1).u8(b'b').i32(-1).0;
        assert!(matches!(
            decode(&value, false),
            Err(DecodeError::Negative {
                field: "binary value length",
                value: -1,
                ..
            })
        ));
        let content = W::new(b'M').u8(0).u64(0).cstr("").i32(i32::MIN).0;
        assert!(matches!(
            decode(&content, false),
            Err(DecodeError::Negative {
                field: "content length",
                ..
            })
        ));
    }

    #[test]
    fn strings_must_be_terminated_utf8() {
        let unterminated = W::new(b'O').u64(0).raw(b"upstream").0;
        assert_eq!(
            decode(&unterminated, false),
            Err(DecodeError::Unterminated {
                message: MessageType::Origin,
                field: "origin name",
                offset: 9,
            })
        );
        let latin1 = W::new(b'Y').u32(1).cstr("s").raw(&[0xe9, 0]).0;
        assert_eq!(
            decode(&latin1, false),
            Err(DecodeError::InvalidUtf8 {
                message: MessageType::Type,
                field: "type name",
                offset: 7,
            })
        );
    }

    #[test]
    fn timestamps_that_overflow_the_unix_epoch_are_errors() {
        let late = W::new(b'B').u64(0).i64(i64::MAX).u32(0).0;
        assert_eq!(
            decode(&late, false),
            Err(DecodeError::TimestampOutOfRange {
                message: MessageType::Begin,
                field: "commit timestamp",
                offset: 9,
            })
        );
        let earliest = W::new(b'B').u64(0).i64(i64::MIN).u32(0).0;
        assert!(decode(&earliest, false).is_ok());
    }

    #[test]
    fn errors_and_debug_output_never_show_values() {
        const SECRET: &[u8] = b"SECRET-4111111111111111";
        let secret = std::str::from_utf8(SECRET).expect("ascii");
        let messages = [
            M::Insert(Insert {
                xid: None,
                relation_oid: 1,
                new: vec![Text(SECRET.to_vec()), Binary(SECRET.to_vec())],
            }),
            M::Message(LogicalMessage {
                xid: None,
                transactional: true,
                lsn: 1,
                prefix: "p".to_owned(),
                content: SECRET.to_vec(),
            }),
        ];
        for message in &messages {
            assert!(!format!("{message:?}").contains(secret), "{message:?}");
            let bytes = encode(message);
            let mut errors = vec![];
            for len in 0..bytes.len() {
                errors.extend(decode(&bytes[..len], false).err());
                errors.extend(decode(&bytes[..len], true).err());
            }
            for i in 0..bytes.len() {
                for b in [0u8, b'x', 0xff] {
                    let mut bad = bytes.clone();
                    bad[i] = b;
                    errors.extend(decode(&bad, false).err());
                }
                let mut bad = bytes.clone();
                bad.insert(i, b'S');
                errors.extend(decode(&bad, false).err());
            }
            assert!(errors.len() > bytes.len());
            for e in errors {
                let shown = format!("{e} {e:?}");
                assert!(!shown.contains("SECRET"), "{shown}");
                assert!(!shown.contains("4111"), "{shown}");
            }
        }
    }

    // ---- Property tests -------------------------------------------------------------

    fn arb_name() -> impl Strategy<Value = String> {
        "[^\u{0}]{0,8}"
    }

    fn arb_value() -> impl Strategy<Value = TupleValue> {
        prop_oneof![
            Just(Null),
            Just(UnchangedToast),
            prop::collection::vec(any::<u8>(), 0..12).prop_map(Text),
            prop::collection::vec(any::<u8>(), 0..12).prop_map(Binary),
        ]
    }

    fn arb_tuple() -> impl Strategy<Value = Vec<TupleValue>> {
        prop::collection::vec(arb_value(), 0..6)
    }

    fn arb_old() -> impl Strategy<Value = OldTuple> {
        prop_oneof![
            arb_tuple().prop_map(OldTuple::Key),
            arb_tuple().prop_map(OldTuple::Full)
        ]
    }

    /// Every commit time that has a PostgreSQL timestamp.
    fn arb_time() -> impl Strategy<Value = i64> {
        (i64::MIN + PG_EPOCH_OFFSET_US)..=i64::MAX
    }

    fn arb_identity() -> impl Strategy<Value = ReplicaIdentity> {
        prop::sample::select(vec![
            ReplicaIdentity::Default,
            ReplicaIdentity::Nothing,
            ReplicaIdentity::Full,
            ReplicaIdentity::Index,
        ])
    }

    /// Messages that carry an xid inside a streamed block; `in_stream` = xid present.
    fn arb_stream_xid_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
        let xid = any::<Option<u32>>;
        let column = (any::<bool>(), arb_name(), any::<u32>(), any::<i32>()).prop_map(
            |(is_key, name, type_oid, type_modifier)| RelationColumn {
                is_key,
                name,
                type_oid,
                type_modifier,
            },
        );
        prop_oneof![
            (
                xid(),
                any::<u32>(),
                arb_name(),
                arb_name(),
                arb_identity(),
                prop::collection::vec(column, 0..5)
            )
                .prop_map(|(xid, oid, namespace, name, replica_identity, columns)| {
                    M::Relation(Relation {
                        xid,
                        oid,
                        namespace,
                        name,
                        replica_identity,
                        columns,
                    })
                }),
            (xid(), any::<u32>(), arb_name(), arb_name()).prop_map(
                |(xid, oid, namespace, name)| M::Type(PgType {
                    xid,
                    oid,
                    namespace,
                    name
                })
            ),
            (xid(), any::<u32>(), arb_tuple()).prop_map(|(xid, relation_oid, new)| {
                M::Insert(Insert {
                    xid,
                    relation_oid,
                    new,
                })
            }),
            (
                xid(),
                any::<u32>(),
                prop::option::of(arb_old()),
                arb_tuple()
            )
                .prop_map(|(xid, relation_oid, old, new)| M::Update(Update {
                    xid,
                    relation_oid,
                    old,
                    new
                })),
            (xid(), any::<u32>(), arb_old()).prop_map(|(xid, relation_oid, old)| {
                M::Delete(Delete {
                    xid,
                    relation_oid,
                    old,
                })
            }),
            (
                xid(),
                any::<bool>(),
                any::<bool>(),
                prop::collection::vec(any::<u32>(), 0..5)
            )
                .prop_map(|(xid, cascade, restart_identity, relation_oids)| {
                    M::Truncate(Truncate {
                        xid,
                        cascade,
                        restart_identity,
                        relation_oids,
                    })
                }),
            (
                xid(),
                any::<bool>(),
                any::<u64>(),
                arb_name(),
                prop::collection::vec(any::<u8>(), 0..12)
            )
                .prop_map(|(xid, transactional, lsn, prefix, content)| {
                    M::Message(LogicalMessage {
                        xid,
                        transactional,
                        lsn,
                        prefix,
                        content,
                    })
                }),
        ]
        .prop_map(|m| {
            let in_stream = match &m {
                M::Relation(r) => r.xid.is_some(),
                M::Type(t) => t.xid.is_some(),
                M::Insert(i) => i.xid.is_some(),
                M::Update(u) => u.xid.is_some(),
                M::Delete(d) => d.xid.is_some(),
                M::Truncate(t) => t.xid.is_some(),
                M::Message(m) => m.xid.is_some(),
                _ => false,
            };
            (m, in_stream)
        })
    }

    fn arb_control_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
        prop_oneof![
            (any::<u64>(), arb_time(), any::<u32>()).prop_map(
                |(final_lsn, commit_time_us, xid)| (
                    M::Begin(Begin {
                        final_lsn,
                        commit_time_us,
                        xid
                    }),
                    false
                )
            ),
            (any::<u64>(), any::<u64>(), arb_time()).prop_map(
                |(commit_lsn, end_lsn, commit_time_us)| (
                    M::Commit(Commit {
                        commit_lsn,
                        end_lsn,
                        commit_time_us
                    }),
                    false
                )
            ),
            (any::<u64>(), arb_name(), any::<bool>()).prop_map(|(commit_lsn, name, in_stream)| (
                M::Origin(Origin { commit_lsn, name }),
                in_stream
            )),
            (any::<u32>(), any::<bool>()).prop_map(|(xid, first_segment)| (
                M::StreamStart(StreamStart { xid, first_segment }),
                false
            )),
            Just((M::StreamStop, true)),
            (any::<u32>(), any::<u64>(), any::<u64>(), arb_time()).prop_map(
                |(xid, commit_lsn, end_lsn, commit_time_us)| (
                    M::StreamCommit(StreamCommit {
                        xid,
                        commit_lsn,
                        end_lsn,
                        commit_time_us
                    }),
                    false
                )
            ),
            (any::<u32>(), any::<u32>()).prop_map(|(xid, subxact_xid)| (
                M::StreamAbort(StreamAbort { xid, subxact_xid }),
                false
            )),
        ]
    }

    fn arb_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
        prop_oneof![arb_stream_xid_message(), arb_control_message()]
    }

    /// Decodes; a success must re-encode to the very same bytes (decoding is strict).
    fn decode_never_panics(bytes: &[u8], in_stream: bool) -> Result<(), TestCaseError> {
        if let Ok(message) = decode(bytes, in_stream) {
            prop_assert_eq!(encode(&message), bytes);
        }
        Ok(())
    }

    #[derive(Debug, Clone)]
    enum Mutation {
        Xor(usize, u8),
        Set(usize, u8),
        Insert(usize, u8),
        Remove(usize),
        Cut(usize),
    }

    fn arb_mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), 1..=u8::MAX).prop_map(|(i, x)| Mutation::Xor(i, x)),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
            (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
            any::<usize>().prop_map(Mutation::Remove),
            any::<usize>().prop_map(Mutation::Cut),
        ]
    }

    fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match *m {
            Mutation::Xor(i, x) if !bytes.is_empty() => {
                let i = at(i, bytes.len());
                bytes[i] ^= x;
            }
            Mutation::Set(i, b) if !bytes.is_empty() => {
                let i = at(i, bytes.len());
                bytes[i] = b;
            }
            Mutation::Insert(i, b) => bytes.insert(at(i, bytes.len() + 1), b),
            Mutation::Remove(i) if !bytes.is_empty() => {
                bytes.remove(at(i, bytes.len()));
            }
            Mutation::Cut(i) => bytes.truncate(at(i, bytes.len() + 1)),
            _ => {}
        }
    }

    const TAGS: &[u8] = b"BCORYIUDTMSEcA";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            in_stream in any::<bool>(),
        ) {
            decode_never_panics(&bytes, in_stream)?;
        }

        #[test]
        fn arbitrary_bytes_after_a_valid_tag_never_panic(
            tag in prop::sample::select(TAGS),
            rest in prop::collection::vec(any::<u8>(), 0..128),
            in_stream in any::<bool>(),
        ) {
            let mut bytes = vec![tag];
            bytes.extend(rest);
            decode_never_panics(&bytes, in_stream)?;
        }

        #[test]
        fn mutated_valid_messages_never_panic(
            case in 0..CASES.len(),
            mutations in prop::collection::vec(arb_mutation(), 1..5),
            flip_stream in any::<bool>(),
        ) {
            let c = &CASES[case];
            let mut bytes = c.bytes.clone();
            for m in &mutations {
                mutate(&mut bytes, m);
            }
            decode_never_panics(&bytes, c.in_stream != flip_stream)?;
        }

        #[test]
        fn generated_messages_round_trip((message, in_stream) in arb_message()) {
            let bytes = encode(&message);
            prop_assert_eq!(decode(&bytes, in_stream), Ok(message));
            for len in 0..bytes.len() {
                prop_assert!(decode(&bytes[..len], in_stream).is_err());
            }
        }
    }

    // ---- Real PostgreSQL bytes ------------------------------------------------------

    const SCHEMA: &str = "
        CREATE TYPE mood AS ENUM ('happy', 'sad');
        CREATE TABLE items (
            id bigint PRIMARY KEY, name text, price numeric(10,2), at timestamptz,
            ok boolean, data bytea, feeling mood, note text
        );
        ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL;
        CREATE TABLE audit (id int, what text);
        ALTER TABLE audit REPLICA IDENTITY FULL;
        CREATE TABLE bulk (id int PRIMARY KEY, filler text);
        CREATE PUBLICATION pub FOR TABLE items, audit;
        CREATE PUBLICATION pub_bulk FOR TABLE bulk;
    ";

    /// One statement list per transaction, in order.
    const WORKLOAD: &[&str] = &[
        "INSERT INTO items VALUES (1, 'apple', 1.50, '2024-05-01 12:00:00+00', true,          '\\xdeadbeef', 'happy', repeat('n', 5000))",
        "UPDATE items SET name = 'apricot' WHERE id = 1",
        "UPDATE items SET id = 2 WHERE id = 1",
        "INSERT INTO audit VALUES (1, 'created');          UPDATE audit SET what = 'changed' WHERE id = 1;          DELETE FROM audit WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        "TRUNCATE items, audit RESTART IDENTITY CASCADE",
        "SELECT pg_logical_emit_message(true, 'weir', 'hello')",
        "SELECT pg_logical_emit_message(false, 'weir', 'now')",
        "SELECT pg_replication_origin_create('upstream')",
        "SELECT pg_replication_origin_session_setup('upstream');          BEGIN;          SELECT pg_replication_origin_xact_setup('0/ABCDEF', now());          INSERT INTO items (id, name) VALUES (3, 'cherry');          COMMIT;          SELECT pg_replication_origin_session_reset()",
    ];

    /// Large transactions, streamed with protocol version 2: one commits, one aborts,
    /// one aborts a subtransaction and commits.
    const BULK: &[&str] = &[
        "INSERT INTO bulk SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g",
        "BEGIN;          INSERT INTO bulk SELECT g, repeat('y', 200) FROM generate_series(10001, 13000) g;          ROLLBACK",
        "BEGIN;          INSERT INTO bulk VALUES (20000, 'before');          SAVEPOINT s;          INSERT INTO bulk SELECT g, repeat('z', 200) FROM generate_series(20001, 23000) g;          ROLLBACK TO SAVEPOINT s;          INSERT INTO bulk VALUES (30000, 'after');          COMMIT",
    ];

    /// A short form of a message, to compare sequences.
    fn shape(m: &PgOutputMessage) -> String {
        match m {
            M::Begin(_) => "B".into(),
            M::Commit(_) => "C".into(),
            M::Origin(_) => "O".into(),
            M::Relation(r) => format!("R {}", r.name),
            M::Type(t) => format!("Y {}", t.name),
            M::Insert(_) => "I".into(),
            M::Update(u) => match u.old {
                None => "U".into(),
                Some(OldTuple::Key(_)) => "U K".into(),
                Some(OldTuple::Full(_)) => "U O".into(),
            },
            M::Delete(d) => match d.old {
                OldTuple::Key(_) => "D K".into(),
                OldTuple::Full(_) => "D O".into(),
            },
            M::Truncate(_) => "T".into(),
            M::Message(m) if m.transactional => "M tx".into(),
            M::Message(_) => "M now".into(),
            M::StreamStart(_) => "S".into(),
            M::StreamStop => "E".into(),
            M::StreamCommit(_) => "c".into(),
            M::StreamAbort(_) => "A".into(),
        }
    }

    async fn peek(client: &tokio_postgres::Client, slot: &str, options: &str) -> Vec<Vec<u8>> {
        let sql = format!(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, {options})"
        );
        let rows = client.query(&sql, &[]).await.expect("peek the slot");
        rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect()
    }

    /// Decodes every message in order, and drops transactions with nothing in them
    /// (PostgreSQL before 15 sends them for the DDL and the slot-less statements).
    fn decode_all(rows: &[Vec<u8>]) -> Vec<PgOutputMessage> {
        let mut decoder = Decoder::new();
        let mut out: Vec<PgOutputMessage> = vec![];
        for (i, row) in rows.iter().enumerate() {
            let message = decoder
                .decode(row)
                .unwrap_or_else(|e| panic!("message {i} of {}: {e}", rows.len()));
            if matches!(message, M::Commit(_)) && matches!(out.last(), Some(M::Begin(_))) {
                out.pop();
                continue;
            }
            out.push(message);
        }
        assert!(
            !decoder.in_stream(),
            "the changes end inside a streamed block"
        );
        out
    }

    fn unix_now_us() -> i64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(now.expect("after 1970").as_micros()).expect("before 2262")
    }

    /// Begin and Commit agree, and the commit time is the wall clock's (the epoch shift).
    fn check_transactions(messages: &[PgOutputMessage], started_us: i64, finished_us: i64) {
        let mut begin: Option<&Begin> = None;
        let mut transactions = 0;
        for m in messages {
            match m {
                M::Begin(b) => {
                    assert!(begin.is_none(), "nested Begin");
                    begin = Some(b);
                }
                M::Commit(c) => {
                    let b = begin.take().expect("Commit without Begin");
                    assert_eq!(b.final_lsn, c.commit_lsn);
                    assert_eq!(b.commit_time_us, c.commit_time_us);
                    assert!(c.end_lsn > c.commit_lsn);
                    // A second of slack either way for clock granularity.
                    assert!(
                        (started_us - 1_000_000..=finished_us + 1_000_000)
                            .contains(&c.commit_time_us),
                        "commit time {} not within the test's run {started_us}..{finished_us}",
                        c.commit_time_us
                    );
                    transactions += 1;
                }
                _ => {}
            }
        }
        assert!(begin.is_none(), "Begin without Commit");
        assert!(transactions > 0);
    }

    #[tokio::test]
    async fn decodes_what_postgresql_sends() {
        let pg = tokio::task::spawn_blocking(|| {
            crate::localpg::LocalPg::start(&crate::localpg::LocalPgOptions::default())
        })
        .await
        .expect("the start task panicked")
        .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
        let db = "weir_pgoutput";
        let dsn = pg.create_database(db).await.expect("create the database");
        pg.execute(db, SCHEMA).await.expect("create the schema");
        pg.execute(
            db,
            "SELECT pg_create_logical_replication_slot('slot', 'pgoutput')",
        )
        .await
        .expect("create the slot");
        let started_us = unix_now_us();
        for sql in WORKLOAD {
            pg.execute(db, sql).await.expect(sql);
        }
        pg.execute(
            db,
            "SELECT pg_create_logical_replication_slot('stream_slot', 'pgoutput')",
        )
        .await
        .expect("create the second slot");
        for sql in BULK {
            pg.execute(db, sql).await.expect(sql);
        }
        let finished_us = unix_now_us();

        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let connection = tokio::spawn(connection);
        // Text output of timestamptz follows the decoding session's time zone; a small
        // work memory makes PostgreSQL stream the bulk transactions.
        client
            .batch_execute("SET TimeZone = 'UTC'; SET logical_decoding_work_mem = '64kB'")
            .await
            .expect("set up the session");
        let v1 = "'proto_version', '1', 'publication_names', 'pub', 'messages', 'true'";

        // ---- Protocol version 1, text values.
        let text_rows = peek(&client, "slot", v1).await;
        let messages = decode_all(&text_rows);
        let shapes: Vec<String> = messages.iter().map(shape).collect();
        assert_eq!(
            shapes,
            [
                "B", "Y mood", "R items", "I", "C", // insert
                "B", "U", "C", // update of a non-key column
                "B", "U K", "C", // update of the key
                "B", "R audit", "I", "U O", "D O", "C", // replica identity full
                "B", "D K", "C", // delete
                // A truncate invalidates the relations: they are described again.
                "B", "Y mood", "R items", "R audit", "T", "C", "B", "M tx",
                "C",     // transactional message
                "M now", // non-transactional message
                "B", "O", "Y mood", "R items", "I", "C", // replicated from an origin
            ]
        );
        check_transactions(&messages, started_us, finished_us);

        let M::Type(mood) = &messages[1] else {
            panic!("expected the type")
        };
        assert_eq!(
            (mood.namespace.as_str(), mood.name.as_str()),
            ("public", "mood")
        );
        let M::Relation(items) = &messages[2] else {
            panic!("expected the relation")
        };
        assert_eq!(items.xid, None);
        assert_eq!(items.namespace, "public");
        assert_eq!(items.replica_identity, ReplicaIdentity::Default);
        assert_eq!(
            items.columns,
            [
                col(true, "id", 20, -1),
                col(false, "name", 25, -1),
                col(false, "price", 1700, (10 << 16 | 2) + 4),
                col(false, "at", 1184, -1),
                col(false, "ok", 16, -1),
                col(false, "data", 17, -1),
                col(false, "feeling", mood.oid, -1),
                col(false, "note", 25, -1),
            ]
        );
        let note = || Text(vec![b'n'; 5000]);
        let row = |id: &str, name: &str, note: TupleValue| {
            vec![
                text(id),
                text(name),
                text("1.50"),
                text("2024-05-01 12:00:00+00"),
                text("t"),
                text("\\xdeadbeef"),
                text("happy"),
                note,
            ]
        };
        let key = |id: &str| {
            let mut k = vec![Null; 8];
            k[0] = text(id);
            k
        };
        assert_eq!(
            messages[3],
            M::Insert(Insert {
                xid: None,
                relation_oid: items.oid,
                new: row("1", "apple", note()),
            })
        );
        // The TOASTed note is not sent again when unchanged.
        assert_eq!(
            messages[6],
            M::Update(Update {
                xid: None,
                relation_oid: items.oid,
                old: None,
                new: row("1", "apricot", UnchangedToast),
            })
        );
        assert_eq!(
            messages[9],
            M::Update(Update {
                xid: None,
                relation_oid: items.oid,
                old: Some(OldTuple::Key(key("1"))),
                new: row("2", "apricot", UnchangedToast),
            })
        );
        let M::Relation(audit) = &messages[12] else {
            panic!("expected the relation")
        };
        assert_eq!(audit.replica_identity, ReplicaIdentity::Full);
        // Under REPLICA IDENTITY FULL every column is flagged as part of the key.
        assert_eq!(
            audit.columns,
            [col(true, "id", 23, -1), col(true, "what", 25, -1)]
        );
        let audit_row = |what: &str| vec![text("1"), text(what)];
        assert_eq!(
            &messages[13..16],
            [
                M::Insert(Insert {
                    xid: None,
                    relation_oid: audit.oid,
                    new: audit_row("created"),
                }),
                M::Update(Update {
                    xid: None,
                    relation_oid: audit.oid,
                    old: Some(OldTuple::Full(audit_row("created"))),
                    new: audit_row("changed"),
                }),
                M::Delete(Delete {
                    xid: None,
                    relation_oid: audit.oid,
                    old: OldTuple::Full(audit_row("changed")),
                }),
            ]
        );
        assert_eq!(
            messages[18],
            M::Delete(Delete {
                xid: None,
                relation_oid: items.oid,
                old: OldTuple::Key(key("2")),
            })
        );
        for (i, described) in [(21, &messages[1]), (22, &messages[2]), (23, &messages[12])] {
            assert_eq!(&messages[i], described, "described again at {i}");
        }
        assert_eq!(&messages[32], &messages[1]);
        assert_eq!(&messages[33], &messages[2]);
        let M::Truncate(truncate) = &messages[24] else {
            panic!("expected the truncate")
        };
        assert!(truncate.cascade && truncate.restart_identity);
        let mut truncated = truncate.relation_oids.clone();
        truncated.sort_unstable();
        let mut both = vec![items.oid, audit.oid];
        both.sort_unstable();
        assert_eq!(truncated, both);
        for (i, transactional, content) in [(27, true, "hello"), (29, false, "now")] {
            let M::Message(m) = &messages[i] else {
                panic!("expected a message at {i}")
            };
            assert_eq!(
                (
                    m.xid,
                    m.transactional,
                    m.prefix.as_str(),
                    m.content.as_slice()
                ),
                (None, transactional, "weir", content.as_bytes())
            );
            assert!(m.lsn > 0);
        }
        assert_eq!(
            messages[31],
            M::Origin(Origin {
                commit_lsn: 0xAB_CDEF,
                name: "upstream".to_owned(),
            })
        );
        let M::Insert(cherry) = &messages[34] else {
            panic!("expected the insert")
        };
        assert_eq!(&cherry.new[..2], [text("3"), text("cherry")]);
        assert_eq!(&cherry.new[2..], [Null, Null, Null, Null, Null, Null]);

        // ---- Protocol version 1, binary values: the same messages.
        let binary = peek(&client, "slot", &format!("{v1}, 'binary', 'true'")).await;
        let binary = decode_all(&binary);
        assert_eq!(binary.iter().map(shape).collect::<Vec<_>>(), shapes);
        let M::Insert(insert) = &binary[3] else {
            panic!("expected the insert")
        };
        let numeric_1_50 = vec![0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88];
        assert_eq!(
            insert.new,
            [
                Binary(1i64.to_be_bytes().to_vec()),
                Binary(b"apple".to_vec()),
                Binary(numeric_1_50),
                Binary(MAY_DAY_PG_US.to_be_bytes().to_vec()),
                Binary(vec![1]),
                Binary(vec![0xde, 0xad, 0xbe, 0xef]),
                Binary(b"happy".to_vec()),
                Binary(vec![b'n'; 5000]),
            ]
        );
        let M::Update(update) = &binary[6] else {
            panic!("expected the update")
        };
        assert_eq!(update.new[7], UnchangedToast);

        // ---- Protocol version 2, streamed transactions.
        let streamed = peek(
            &client,
            "stream_slot",
            "'proto_version', '2', 'publication_names', 'pub_bulk', 'streaming', 'on'",
        )
        .await;
        let streamed = decode_all(&streamed);
        check_stream(&streamed);

        drop(client);
        connection
            .await
            .expect("the connection task panicked")
            .expect("the connection");
    }

    /// Applies the streamed messages as a subscriber would: changes are kept per
    /// (sub)transaction xid, a Stream Abort drops the (sub)transaction, a Stream Commit
    /// applies the rest. What is applied must be exactly what committed.
    fn check_stream(messages: &[PgOutputMessage]) {
        let count = |shape_of: &str| messages.iter().filter(|m| shape(m) == shape_of).count();
        assert!(count("S") >= 3, "three transactions streamed at least once");
        assert_eq!(count("S"), count("E"));
        assert_eq!(count("c"), 2, "two streamed transactions commit");
        assert_eq!(
            count("A"),
            2,
            "one transaction and one subtransaction abort"
        );
        let mut pending: Vec<(u32, u32, i64)> = vec![]; // (top xid, xid, id)
        let mut applied: Vec<i64> = vec![];
        let mut top: Option<u32> = None;
        let mut seen_tops: Vec<u32> = vec![];
        let mut subtransaction_aborted = false;
        for m in messages {
            match m {
                M::StreamStart(s) => {
                    assert_eq!(s.first_segment, !seen_tops.contains(&s.xid));
                    seen_tops.push(s.xid);
                    top = Some(s.xid);
                }
                M::StreamStop => top = None,
                M::Relation(r) => {
                    assert!(r.xid.is_some() && top.is_some(), "{m:?}");
                    assert_eq!(r.name, "bulk");
                }
                M::Insert(i) => {
                    let top = top.expect("inserts of streamed transactions are in blocks");
                    let xid = i.xid.expect("a change in a block has its xid");
                    let Some(Text(id)) = i.new.first() else {
                        panic!("expected the id as text")
                    };
                    let id = std::str::from_utf8(id)
                        .expect("utf-8")
                        .parse()
                        .expect("int");
                    pending.push((top, xid, id));
                }
                M::StreamAbort(a) => {
                    subtransaction_aborted |= a.xid != a.subxact_xid;
                    pending.retain(|&(t, x, _)| {
                        t != a.xid || (a.xid != a.subxact_xid && x != a.subxact_xid)
                    });
                }
                M::StreamCommit(c) => {
                    applied.extend(pending.iter().filter(|p| p.0 == c.xid).map(|p| p.2));
                    pending.retain(|p| p.0 != c.xid);
                }
                other => panic!("unexpected {other:?} in the streamed changes"),
            }
        }
        assert!(
            subtransaction_aborted,
            "a Stream Abort names a subtransaction"
        );
        assert!(pending.is_empty(), "every streamed transaction ended");
        let mut expected: Vec<i64> = (1..=3000).collect();
        expected.extend([20_000, 30_000]);
        assert_eq!(applied, expected);
    }
}
