//! The pgoutput messages, as decoded: one type per message of the protocol.

use std::fmt;

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
pub(super) enum Placement {
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
    pub(super) fn has_stream_xid(self) -> bool {
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

    pub(super) fn placement(self) -> Placement {
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

    /// The xid of the (sub)transaction a message inside a streamed block belongs to
    /// (`None` outside a block, and for the messages that frame blocks).
    pub fn stream_xid(&self) -> Option<u32> {
        match self {
            Self::Relation(m) => m.xid,
            Self::Type(m) => m.xid,
            Self::Insert(m) => m.xid,
            Self::Update(m) => m.xid,
            Self::Delete(m) => m.xid,
            Self::Truncate(m) => m.xid,
            Self::Message(m) => m.xid,
            _ => None,
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
