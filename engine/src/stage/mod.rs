//! The stage: the durable, embedded copy of a feed that cannot be rewound.
//!
//! RocksDB column families (brief §2):
//!
//! | family        | key                                   | value                          |
//! |---------------|---------------------------------------|--------------------------------|
//! | `rows`        | table, partition, key                 | current row image + metadata   |
//! | `keys`        | table, key                            | partition the key is in        |
//! | `generations` | table, partition                      | generation of its last change  |
//! | `dirty`       | table, partition                      | generation not yet written     |
//! | `changed`     | table, partition, key (empty: all)    | generation of the key's change |
//! | `backlog`     | table, partition                      | bytes staged since last write  |
//! | `position`    | `checkpoint`                          | source position and cursor     |
//! | `dead_letter` | source position of the record         | the bad record, until written  |
//! | `meta`        | `format_version`, `source_id`, `generation`, `position_covers_acks`, … | stage metadata |
//!
//! **Architecture Invariant**: a batch of transactions is applied in one synced
//! `WriteBatch` together with the new position, so the rows, the dirty marks and the
//! position never disagree, and a transaction is visible all or nothing. A transaction
//! at or below the stored position is skipped whole; the position never moves back.
//! (A first load's part, ingested as table files, is made whole the same way by a
//! marker that the next writable open rolls forward: `bulk.rs`.)
//!
//! **Architecture Invariant**: a source is never told to acknowledge past the stored
//! position. A source that is caught up and would confirm further (past WAL holding
//! nothing of this feed) first moves the position there ([`Stage::advance_position`]),
//! so a source that has acknowledged more than the stage holds (an older checkpoint
//! imported, another engine on the same slot) is detected at start, not silently
//! skipped.
//!
//! **Architecture Invariant**: generations come from one counter that only grows, so a
//! dirty mark cleared and set again never repeats a generation, and compare-and-clear
//! ([`Stage::clear_dirty`]) cannot clear a mark set after the job read its rows.
//!
//! The stage knows nothing about PostgreSQL or plugins: rows are opaque images.
//!
//! # Files
//!
//! - `layout.rs`: the column families, the `meta` keys and how RocksDB keys are made
//!   (a row's own key encoding, `encode_key` and `decode_key`, is in the core's
//!   `feed.rs`, which sources build without RocksDB).
//! - `open.rs`: RocksDB options, opening and the format check, flushing.
//! - `meta.rs`: the feed id, position, generation counter, table contracts, failures.
//! - `apply.rs`: applying transactions through one write batch per call.
//! - `bulk.rs`: a first load's parts ingested as sorted table files, under a marker.
//! - `pending.rs`: large transactions, staged in chunks and committed under a marker.
//! - `read.rs`: what the writer reads, and compare-and-clear of dirty marks.
//! - `checkpoint/`: `weir checkpoint show | export | import`; `check.rs`: the
//!   consistency check of `weir checkpoint check`.
//! - `tests/`: unit tests and the model-based test.

mod apply;
mod bulk;
mod check;
pub mod checkpoint;
mod error;
mod layout;
mod meta;
mod open;
mod pending;
mod read;
mod snapshot;
mod source_port;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Mutex;

use rocksdb::DB;
use serde::{Deserialize, Serialize};

use crate::feed::Position;
use crate::partition::Partition;

pub use bulk::PreparedLoad;
pub use error::{StageError, stage_exists};
pub use layout::FORMAT_VERSION;
pub use open::MEMORY_BUDGET_BYTES;
pub use snapshot::{CHUNK_BYTES, CHUNK_ROWS, ChangedChunk, PartitionSnapshot, Survey};
pub use weir_core::feed::{StageChange, StagedRow, UnkeyableValue, decode_key, encode_key};

/// A partition whose last write failed in a way a retry would repeat (a plugin's
/// verdict), recorded for `weir status` until the partition is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionFailure {
    pub table: String,
    pub partition: Partition,
    /// The stage generation that failed; a change to the partition retries it.
    pub generation: u64,
    pub error: String,
}

/// What a table's staged rows mean: recorded when the table is first staged, and
/// compared with the config at every start, so that a config that keys, partitions or
/// targets the table differently is never applied to rows staged under another
/// contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableContract {
    /// The source table's name (the stage's name for the table).
    pub source: String,
    /// The source's identity of the table (PostgreSQL: the relation OID), if it has one.
    #[serde(default)]
    pub source_oid: Option<u32>,
    pub target: String,
    pub key: Vec<String>,
    pub partition_by: String,
    pub grain: String,
    /// `identity`, or the plugin's `sha256:…` and `config:…` hash.
    pub transform: String,
    /// The table was taken out of the config at a start since it was staged: its
    /// changes were passed over from then, so a config that puts it back reads it
    /// whole again (see `pipeline::init::reconcile_contracts`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub out_of_config: bool,
}

/// A partition with unwritten changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyPartition {
    pub table: String,
    pub partition: Partition,
    pub generation: u64,
}

/// A partition's rows as of one consistent snapshot.
#[derive(Debug, Clone)]
pub struct PartitionRows {
    /// The generation of the partition's last change (0: never changed).
    pub generation: u64,
    /// The dirty generation seen in the same snapshot (`None`: not dirty).
    pub dirty: Option<u64>,
    /// The stage position in the same snapshot.
    pub checkpoint: Position,
    /// Rows in key order (deterministic).
    pub rows: Vec<StagedRow>,
}

/// The keys of a partition changed since it was last written, as of one snapshot.
#[derive(Debug, Clone)]
pub struct PartitionChanges {
    /// As in [`PartitionRows`].
    pub generation: u64,
    pub dirty: Option<u64>,
    pub checkpoint: Position,
    /// Every key changed: the partition must be replaced, not merged (a TRUNCATE, or
    /// a partition dirty from before the stage recorded changed keys).
    pub whole: bool,
    /// Each changed key (encoded, see [`encode_key`]) with its row if the key is in the
    /// partition now (`None`: deleted or moved out), in key order.
    pub keys: Vec<(Vec<u8>, Option<StagedRow>)>,
}

/// What [`Stage::apply`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub transactions: usize,
    pub changes: usize,
    /// Transactions at or below the stored position, skipped whole.
    pub skipped: usize,
}

/// The staged copy of a feed. One process opens it read-write (RocksDB's lock file
/// enforces that); any number may open it read-only.
pub struct Stage {
    db: DB,
    path: PathBuf,
    /// Serializes writers within the process so compare-and-clear is atomic with
    /// respect to staging.
    write_lock: Mutex<()>,
    /// Sequence number of the next pending chunk.
    pending_seq: std::sync::atomic::AtomicU64,
    /// The next sequence number of a streamed transaction's chunk (never reset while
    /// open: a transaction's chunks sort by it).
    stream_seq: std::sync::atomic::AtomicU64,
    /// Changed-key records cleared one by one, counted for compacting `changed` (see
    /// `Stage::compact_cleared`).
    cleared_changed: Mutex<Cleared>,
    /// The partitions read through a snapshot since the stage opened (by `partition_key`;
    /// `None` past [`READ_PARTITIONS_MAX`]: then every partition counts as read). A
    /// partition changed whole gets its changed keys recorded one by one once a writer
    /// may have read it (see `StageBatch::lookup`).
    read_partitions: Mutex<Option<std::collections::HashSet<Vec<u8>>>>,
    /// Numbers the table files of first-load parts prepared since the stage opened
    /// (`bulk.rs`; the folder is emptied at open).
    load_files: std::sync::atomic::AtomicU64,
    /// Tables whose key the source may not keep unique (a PostgreSQL table with
    /// `REPLICA IDENTITY FULL`: no unique index on its key, or one that may be dropped
    /// while the stream runs): an INSERT of a key they hold already is refused
    /// ([`StageError::InsertOfStagedKey`]).
    guarded_keys: std::sync::RwLock<Vec<String>>,
}

/// Partitions [`Stage`] remembers as read, at most: past it, all count as read, which
/// only costs a record per changed key, as for any partition once written.
const READ_PARTITIONS_MAX: usize = 65_536;

/// Tombstones left in the `changed` family by clearing dirty marks one key at a time.
#[derive(Debug, Default)]
struct Cleared {
    /// The partitions cleared since the stage opened (at most `CLEARED_PARTITIONS_MAX`).
    seen: std::collections::HashSet<Vec<u8>>,
    /// Records cleared from partitions cleared before, since the last compaction.
    records: u64,
    /// The range of `changed` they span: the smallest partition key, the largest end.
    range: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
