//! Change feeds: where committed transactions of row changes come from.
//!
//! A [`ChangeSource`] yields whole committed transactions in commit order, each with the
//! source position just past it. The engine stages a transaction (synced) before it
//! calls [`ChangeSource::acknowledge`] with that position, so a feed that cannot be
//! rewound never forgets a change that is not durable in the stage.
//!
//! This module also turns a decoded row change into stage input ([`keyed_changes`]):
//! the key is encoded, the partition computed, and a change of primary key becomes a
//! delete of the old key plus an upsert of the new one. Errors there are errors of the
//! record, so each source reports them with the record's own location.

pub mod jsonl;
pub mod postgres;

pub use weir_core::envelope;
pub use weir_core::feed::{BadRecord, Op, Position, Row, Transaction, keyed_changes};

use crate::feed::StageChange;

/// What a source has to say next.
#[derive(Debug)]
pub enum SourceEvent {
    /// The next changes of a transaction too large to hold in memory; its last part
    /// follows as a `Transaction` (or an `Abort`). Nothing else comes in between.
    Chunk(Vec<StageChange>),
    /// The transaction whose chunks were handed out will never commit.
    Abort,
    Transaction(Transaction),
    /// Changes of a transaction streamed while still in progress (PostgreSQL's
    /// protocol version 2 and later), each with the xid of its (sub)transaction. They
    /// wait in the stage's area for `xid`, visible to nothing, until the transaction's
    /// `StreamCommit` or `StreamDiscard`; other transactions may come in between.
    StreamChunk {
        xid: u32,
        changes: Vec<(u32, StageChange)>,
    },
    /// Forget the area of streamed transaction `xid`: it aborted, or it starts over (a
    /// new connection sends it again from its beginning).
    StreamDiscard {
        xid: u32,
    },
    /// A streamed transaction committed: its area's changes, less those of its aborted
    /// subtransactions, are staged as one transaction.
    StreamCommit(StreamCommitted),
    /// Nothing more is available right now; more may come later (a tailed file).
    Idle,
    /// The feed ended (stdin closed, or a file drained with `run --once`).
    End,
}

/// The commit of a transaction streamed in progress ([`SourceEvent::StreamCommit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamCommitted {
    /// The top-level transaction's xid: which area of the stage holds its changes.
    pub xid: u32,
    /// Subtransactions that aborted: their changes are left out.
    pub aborted: Vec<u32>,
    /// Its commit's position and time, which its rows carry (unknown while its
    /// changes streamed).
    pub commit_position: u64,
    pub commit_time_us: i64,
    /// The position past it, as a [`Transaction`]'s `end` and `cursor`.
    pub end: u64,
    pub cursor: u64,
}

impl StreamCommitted {
    /// What is staged once its changes are in the pending area
    /// (`Stage::stage_stream`): its end, and no more changes.
    pub fn transaction(&self) -> Transaction {
        Transaction {
            end: self.end,
            cursor: self.cursor,
            changes: Vec::new(),
            bad_records: Vec::new(),
        }
    }
}

/// Errors of a change source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read the change feed {feed}")]
    Io {
        feed: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{feed}:{line}: {reason}; nothing from this line (or from the start of the transaction it belongs to) on was acknowledged. Fix or remove the line, or set source.on_bad_record = \"dead-letter\" to keep it in weir.dead_letter and go on"
    )]
    BadRecord {
        feed: String,
        line: u64,
        reason: String,
    },
    #[error(
        "the change feed {feed} is {len} bytes long, shorter than the staged position {position}: it was truncated or replaced, so it is not the feed the stage was filled from. Point source.path at the original file, pipe stdin again from the feed's first line, or start a new stage fed from the feed's very first line (every rotated file, in order): a new stage given only the records after a rotation replaces each partition it writes with those records alone, and the rows before are lost from the target"
    )]
    Truncated {
        feed: String,
        len: u64,
        position: u64,
    },
    #[error(
        "the change feed {feed} is not the feed the stage was filled from: {part} from the bytes staged up to byte {position} (a rotated, replaced or rewritten file, or stdin piped without the feed's start). Weir resumes a feed at a byte offset, so nothing was read: point source.path at the original file and append new records to it, pipe stdin again from the feed's first line, or start a new stage fed from the feed's very first line (every rotated file, in order): a new stage given only the records after a rotation replaces each partition it writes with those records alone, and the rows before are lost from the target"
    )]
    NotTheFeed {
        feed: String,
        position: u64,
        part: &'static str,
    },
    #[error(
        "the change feed {feed} was replaced while Weir read it (its path now names another file, or none: rotated, removed or rewritten). Weir read the file it had open to its end and stops here, since it resumes one growing file by byte offset: append new records to the original file rather than rotating it, or start a new stage fed from the feed's very first line (every rotated file, in order, then the new one): a new stage given only the new file replaces each partition it writes with those records alone"
    )]
    Rotated { feed: String },
    #[error(
        "the change feed {feed} was cut short or rewritten in place while Weir followed it: the bytes before offset {position}, where reading had reached, are no longer there (`: > file`, logrotate's copytruncate, or a writer that truncates it). Weir stops before reading on at that offset, which would skip the new content's first records: append new records to the original file rather than truncating it, or start a new stage fed from the feed's very first line: a new stage given only the new content replaces each partition it writes with those records alone"
    )]
    CutWhileFollowed { feed: String, position: u64 },
    #[error(
        "stdin ended in the middle of line {line} (no line break, and not a whole record): its producer stopped while writing it. The line, and the transaction it belongs to, are not staged; what came before is. Pipe the feed again from its first line: the staged part is passed over and the stage goes on at line {line}"
    )]
    StdinCutMidLine { line: u64 },
    #[error(
        "the change feed {feed} is not a regular file (a named pipe, a socket or a device): Weir resumes a file feed at a byte offset, which these cannot seek to. Redirect it to standard input instead: `path = \"-\"` and `weir run < {feed}`"
    )]
    NotAFile { feed: String },
    #[error("PostgreSQL source")]
    Postgres(#[source] Box<postgres::PgSourceError>),
}

impl SourceError {
    /// Whether the error is the source going away (the server restarting, the
    /// connection cut), which a reconnect may cure; the stage's position is untouched.
    /// Every other error (bad data, a schema change, a missing slot) is permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            SourceError::Postgres(e) => e.is_transient(),
            _ => false,
        }
    }

    /// See `PgSourceError::needs_text`.
    pub fn needs_text(&self) -> bool {
        match self {
            SourceError::Postgres(e) => e.needs_text(),
            _ => false,
        }
    }

    /// See [`postgres::PgSourceError::needs_reopen`].
    pub fn needs_reopen(&self) -> bool {
        match self {
            SourceError::Postgres(e) => e.needs_reopen(),
            _ => false,
        }
    }
}

/// A feed of committed transactions.
///
/// Guarantees a source must give:
/// * transactions come whole and in commit order, each with a strictly greater `end`;
/// * after a restart from a [`Position`], every transaction past it is delivered
///   again (at-least-once; the stage drops what it already has).
///
/// What it may assume: `acknowledge(c)` is only called once every transaction up to
/// `c` is synced in the stage, so it may then forget them.
#[allow(async_fn_in_trait)]
pub trait ChangeSource {
    /// The next event of the feed.
    async fn next(&mut self) -> Result<SourceEvent, SourceError>;

    /// Everything up to `checkpoint` is durable in the stage.
    async fn acknowledge(&mut self, checkpoint: Position) -> Result<(), SourceError>;
}
