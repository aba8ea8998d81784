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
pub mod pgoutput;
pub mod pgtypes;
pub mod postgres;
pub mod replication;

use serde::{Deserialize, Serialize};

use crate::config::{OnNullPartition, TableConfig};
use crate::partition::{Partition, partition_of};
use crate::stage::{StageChange, StagedRow, encode_key};
use crate::value::Value;

/// A row image: column name and value, in the table's declared column order.
pub type Row = Vec<(String, Value)>;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Insert,
    Update,
    Delete,
    /// A row read by a snapshot rather than captured as a change.
    Read,
}

impl Op {
    pub fn code(self) -> &'static str {
        match self {
            Op::Insert => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
        }
    }
}

/// A record the source could not turn into a change; kept, never skipped silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRecord {
    /// Source position of the record's start (byte offset of a JSON line).
    pub position: u64,
    /// 1-based line number, where the feed has lines.
    pub line: Option<u64>,
    /// `schema.table`, when it could be read.
    pub table: Option<String>,
    pub reason: String,
    /// The record exactly as received.
    pub raw: Vec<u8>,
}

/// A committed source transaction, ready to stage.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    /// The source position just past this transaction. Staging it moves the stage's
    /// position here; a transaction whose `end` is at or below the stage's position has
    /// been staged already and is skipped whole.
    pub end: u64,
    /// Source-specific resume data kept with the position (JSON lines: the line count).
    pub cursor: u64,
    pub changes: Vec<StageChange>,
    /// Records of this transaction that went to the dead-letter table instead.
    pub bad_records: Vec<BadRecord>,
}

/// The position stored with the stage: where the feed resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    pub position: u64,
    pub cursor: u64,
}

/// What a source has to say next.
#[derive(Debug)]
pub enum SourceEvent {
    /// The next changes of a transaction too large to hold in memory; its last part
    /// follows as a `Transaction` (or an `Abort`). Nothing else comes in between.
    Chunk(Vec<StageChange>),
    /// The transaction whose chunks were handed out will never commit.
    Abort,
    Transaction(Transaction),
    /// Nothing more is available right now; more may come later (a tailed file).
    Idle,
    /// The feed ended (stdin closed, or a file drained with `run --once`).
    End,
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
        "{feed}:{line}: {reason}; nothing from this line on was acknowledged. Fix or remove the line, or set source.on_bad_record = \"dead-letter\" to keep it in weir.dead_letter and go on"
    )]
    BadRecord {
        feed: String,
        line: u64,
        reason: String,
    },
    #[error(
        "the change feed {feed} is {len} bytes long, shorter than the staged position {position}: it was truncated or replaced. Point source.path at the original feed, or start a new stage"
    )]
    Truncated {
        feed: String,
        len: u64,
        position: u64,
    },
    #[error("PostgreSQL source")]
    Postgres(#[source] Box<postgres::PgSourceError>),
}

/// A feed of committed transactions.
///
/// Guarantees a source must give:
/// * transactions come whole and in commit order, each with a strictly greater `end`;
/// * after a restart from a [`Checkpoint`], every transaction past it is delivered
///   again (at-least-once; the stage drops what it already has).
///
/// What it may assume: `acknowledge(c)` is only called once every transaction up to
/// `c` is synced in the stage, so it may then forget them.
#[allow(async_fn_in_trait)]
pub trait ChangeSource {
    /// The next event of the feed.
    async fn next(&mut self) -> Result<SourceEvent, SourceError>;

    /// Everything up to `checkpoint` is durable in the stage.
    async fn acknowledge(&mut self, checkpoint: Checkpoint) -> Result<(), SourceError>;
}

/// Turns one decoded change of `table` into stage changes.
///
/// `before` is required for deletes (its key columns at least), `after` for inserts,
/// updates and reads. A change of key is a delete of the old key and an upsert of the
/// new. Returns the reason a record is bad as text, for the source to locate.
pub fn keyed_changes(
    table: &TableConfig,
    op: Op,
    before: Option<Row>,
    after: Option<Row>,
    commit_position: u64,
    commit_time_us: Option<i64>,
) -> Result<Vec<StageChange>, String> {
    let source = table.source.to_string();
    let key_of = |row: &Row, image: &str| -> Result<Vec<u8>, String> {
        let mut values = Vec::with_capacity(table.key.len());
        for k in &table.key {
            match row.iter().find(|(c, _)| c == k) {
                Some((_, v)) if !v.is_null() => values.push(v),
                Some(_) => return Err(format!("key column `{k}` is NULL in the {image} image")),
                None => return Err(format!("missing key column `{k}` in the {image} image")),
            }
        }
        encode_key(&values).map_err(|e| e.to_string())
    };
    let upsert = |row: Row, key: Vec<u8>| -> Result<StageChange, String> {
        let column = &table.partition_by;
        let value = row
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("missing partition column `{column}` in the after image"))?;
        let partition = partition_of(column, table.grain, value).map_err(|e| e.to_string())?;
        if partition == Partition::Null && table.on_null_partition == OnNullPartition::Reject {
            return Err(format!(
                "partition column `{column}` is NULL and on_null_partition = \"reject\" for {source}"
            ));
        }
        Ok(StageChange::Upsert {
            table: source.clone(),
            key,
            partition,
            row: StagedRow {
                commit_position,
                commit_time_us,
                op,
                values: row,
            },
        })
    };
    match op {
        Op::Insert | Op::Read | Op::Update => {
            let after =
                after.ok_or_else(|| format!("op `{}` needs an `after` image", op.code()))?;
            let key = key_of(&after, "after")?;
            let mut out = Vec::with_capacity(2);
            // A before image may be partial (REPLICA IDENTITY DEFAULT: the key only) or
            // absent; when it holds the key and the key changed, the old key goes.
            if let Some(old_key) = before
                .filter(|_| op == Op::Update)
                .and_then(|b| key_of(&b, "before").ok())
                .filter(|old_key| *old_key != key)
            {
                out.push(StageChange::Delete {
                    table: source.clone(),
                    key: old_key,
                });
            }
            out.push(upsert(after, key)?);
            Ok(out)
        }
        Op::Delete => {
            let before = before
                .ok_or_else(|| "op `d` needs a `before` image with the key columns".to_owned())?;
            let key = key_of(&before, "before")?;
            Ok(vec![StageChange::Delete { table: source, key }])
        }
    }
}
