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

#[cfg(test)]
mod model_tests;

mod change;
pub mod checkpoint;
mod source_port;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, Direction, IteratorMode, Options,
    ReadOptions, WriteBatch, WriteOptions,
};
use serde::{Deserialize, Serialize};

use crate::partition::Partition;
use crate::source::{BadRecord, Checkpoint, Transaction};
use crate::value::Value;

pub use change::{StageChange, StagedRow, UnkeyableValue, encode_key};

/// The stage format this build writes. Bump it, with an upgrade step in
/// [`Stage::open`], whenever a key or value layout changes.
pub const FORMAT_VERSION: u32 = 1;

const CF_ROWS: &str = "rows";
const CF_KEYS: &str = "keys";
const CF_GENERATIONS: &str = "generations";
const CF_DIRTY: &str = "dirty";
const CF_POSITION: &str = "position";
const CF_DEAD_LETTER: &str = "dead_letter";
const CF_META: &str = "meta";
const CF_PENDING: &str = "pending";
/// The keys changed in each partition since it was last written: what `merge` deletes
/// and rewrites. An empty key stands for every key (a TRUNCATE): such a partition is
/// replaced. Cleared with the dirty mark, for every write mode, so switching a table
/// to `merge` never finds a partial record.
const CF_CHANGED: &str = "changed";
/// Bytes of changes staged into each dirty partition since its last write: the
/// backlog that `[stage] max_unwritten_mb` bounds. Cleared with the dirty mark.
const CF_BACKLOG: &str = "backlog";
const COLUMN_FAMILIES: [&str; 10] = [
    CF_CHANGED,
    CF_BACKLOG,
    CF_PENDING,
    CF_ROWS,
    CF_KEYS,
    CF_GENERATIONS,
    CF_DIRTY,
    CF_POSITION,
    CF_DEAD_LETTER,
    CF_META,
];

const META_FORMAT_VERSION: &[u8] = b"format_version";
const META_SOURCE_ID: &[u8] = b"source_id";
const META_GENERATION: &[u8] = b"generation";
const META_APPLYING: &[u8] = b"applying";
const META_SOURCE_STATE: &[u8] = b"source_state";
/// Present when the position is at or past everything this stage ever let its source
/// acknowledge (a stage made by a build that advances the position before a caught-up
/// source confirms the server's position: [`Stage::advance_position`]). Without it (a
/// stage of an older build) a source acknowledged ahead of the position may be legal.
const META_POSITION_COVERS_ACKS: &[u8] = b"position_covers_acks";
/// Prefix of the records of partitions whose last write failed for good (until they
/// change): `failed\0` + the partition key.
const META_FAILED_PREFIX: &[u8] = b"failed\0";

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
const POSITION_KEY: &[u8] = b"checkpoint";
/// Prefix of each table's contract: `contract\0` + the table's stage name (its
/// configured source name). JSON, so that fields can be added.
pub(crate) const META_CONTRACT_PREFIX: &[u8] = b"contract\0";
/// Keys moved per batch when a table's stage entries are renamed.
const RENAME_BATCH_KEYS: usize = 10_000;

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
    pub checkpoint: Checkpoint,
    /// Rows in key order (deterministic).
    pub rows: Vec<StagedRow>,
}

/// The keys of a partition changed since it was last written, as of one snapshot.
#[derive(Debug, Clone)]
pub struct PartitionChanges {
    /// As in [`PartitionRows`].
    pub generation: u64,
    pub dirty: Option<u64>,
    pub checkpoint: Checkpoint,
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

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("cannot create the stage folder {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the stage at {}: {hint}", path.display())]
    Open {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error(
        "the stage is damaged (RocksDB found corruption while trying to {what}): restore it with `weir checkpoint import` from an export into a new stage path, or rebuild it from the feed into a new stage path"
    )]
    Damaged {
        what: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("stage operation failed ({what})")]
    Db {
        what: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("the stage at {} has format version {found}, newer than this build's {FORMAT_VERSION}: run a newer weir", path.display())]
    NewerFormat { path: PathBuf, found: u32 },
    #[error("the stage at {} was filled from `{staged}`, but the config reads `{configured}`: a stage belongs to one feed; use a new stage path for a new feed", path.display())]
    SourceMismatch {
        path: PathBuf,
        staged: String,
        configured: String,
    },
    #[error("the stage at {} does not exist: run `weir init` first", path.display())]
    Missing { path: PathBuf },
    #[error(
        "the stage at {} was written by an older weir and lacks its `{family}` records: run `weir init` once (it adds them), then retry",
        path.display()
    )]
    NeedsUpgrade { path: PathBuf, family: &'static str },
    #[error(
        "stage record is corrupt ({what}): run `weir checkpoint check`; restore the stage from an export or rebuild it from the feed"
    )]
    Corrupt { what: String },
    #[error(
        "a large transaction is being applied to the stage; its partitions become readable when it commits"
    )]
    Applying,
    #[error(
        "{table}: a change leaves column `{column}` unchanged (an unchanged TOAST value) for a row that is not staged, so its value is unknown; set REPLICA IDENTITY FULL on the source table, or take a new snapshot"
    )]
    UnchangedWithoutRow { table: String, column: String },
}

fn db_err(what: &'static str) -> impl FnOnce(rocksdb::Error) -> StageError {
    move |source| {
        if source.kind() == rocksdb::ErrorKind::Corruption {
            StageError::Damaged { what, source }
        } else {
            StageError::Db { what, source }
        }
    }
}

fn corrupt(what: impl Into<String>) -> StageError {
    StageError::Corrupt { what: what.into() }
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
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stage")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Memory budget of all memtables together. With the block cache this bounds what
/// RocksDB holds in memory, whatever the size of a transaction or of the stage.
const MEMTABLES_BYTES_MAX: usize = 128 << 20;
/// One column family's memtable before it is flushed to an SST file.
const MEMTABLE_BYTES: usize = 32 << 20;
/// Block cache shared by all column families (data, index and filter blocks).
const BLOCK_CACHE_BYTES: usize = 64 << 20;
/// What RocksDB may hold in memory for one open stage: memtables plus block cache.
pub const MEMORY_BUDGET_BYTES: usize = MEMTABLES_BYTES_MAX + BLOCK_CACHE_BYTES;

/// Options of the database and of every column family. The workload is point reads
/// and writes on `keys` (bloom filters), prefix scans of one partition on `rows`, and
/// synced group commits; level compaction with dynamic level sizes keeps space
/// amplification low for a table that is mostly updated in place.
fn db_options(cache: &Cache) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_paranoid_checks(true);
    // Every write the source is acknowledged for is synced first, so only the tail
    // record of an unacknowledged write can be torn by a crash: tolerate exactly that,
    // and fail loudly on corruption anywhere else.
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    opts.set_db_write_buffer_size(MEMTABLES_BYTES_MAX);
    opts.set_write_buffer_size(MEMTABLE_BYTES);
    opts.set_max_background_jobs(2);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_bytes_per_sync(1 << 20);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    opts.set_block_based_table_factory(&table);
    opts
}

fn cf_descriptors(cache: &Cache) -> Vec<ColumnFamilyDescriptor> {
    COLUMN_FAMILIES
        .iter()
        .map(|name| ColumnFamilyDescriptor::new(*name, db_options(cache)))
        .collect()
}

impl Stage {
    /// Opens (creating if missing) the stage for the feed `source_id`.
    pub fn open(path: &Path, source_id: &str) -> Result<Stage, StageError> {
        // A new stage folder is private (`0700`): it holds row data.
        if !path.exists() {
            crate::private::create_dir(path).map_err(|source| StageError::Create {
                path: path.to_owned(),
                source,
            })?;
        }
        let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
        let db = DB::open_cf_descriptors(&db_options(&cache), path, cf_descriptors(&cache))
            .map_err(|source| StageError::Open {
                path: path.to_owned(),
                hint: checkpoint::open_hint(
                    &source,
                    "is another `weir run` using it? Only one process may write a stage",
                ),
                source,
            })?;
        let stage = Stage::from_db(db, path);
        stage.check_format(true)?;
        match stage.meta(META_SOURCE_ID)? {
            None => stage.put_meta(META_SOURCE_ID, source_id.as_bytes())?,
            Some(staged) if staged == source_id.as_bytes() => {}
            Some(staged)
                if crate::config::same_feed(&String::from_utf8_lossy(&staged), source_id) =>
            {
                // The same file under an older spelling of its path: named canonically
                // from now on.
                tracing::info!(stage = %path.display(), "the stage's feed id is now the file's canonical path");
                stage.put_meta(META_SOURCE_ID, source_id.as_bytes())?;
            }
            Some(staged) => {
                return Err(StageError::SourceMismatch {
                    path: path.to_owned(),
                    staged: String::from_utf8_lossy(&staged).into_owned(),
                    configured: source_id.to_owned(),
                });
            }
        }
        stage.recover_pending()?;
        Ok(stage)
    }

    /// Opens an existing stage read-only; works while another process writes it (it
    /// sees the state as of opening).
    pub fn open_read_only(path: &Path) -> Result<Stage, StageError> {
        if !path.join("CURRENT").exists() {
            return Err(StageError::Missing {
                path: path.to_owned(),
            });
        }
        // A read-only open cannot add the families a newer build added; a writable
        // open (`init`, `run`) does.
        let existing =
            DB::list_cf(&Options::default(), path).map_err(|source| StageError::Open {
                path: path.to_owned(),
                hint: checkpoint::open_hint(&source, "is it a weir stage?"),
                source,
            })?;
        if let Some(family) = COLUMN_FAMILIES
            .iter()
            .find(|f| !existing.iter().any(|e| e == *f))
        {
            return Err(StageError::NeedsUpgrade {
                path: path.to_owned(),
                family,
            });
        }
        // A read-only open replays the write-ahead logs that a live `weir run` may be
        // flushing and deleting at that moment; it then sees a torn state (no format
        // record, say) or fails. That is transient: open again. (A RocksDB secondary
        // instance would not race, but it cannot take the snapshots consistent reads
        // need.) A stage that is really damaged fails every attempt.
        let mut attempt = 0u64;
        loop {
            let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
            let opened = DB::open_cf_descriptors_read_only(
                &db_options(&cache),
                path,
                cf_descriptors(&cache),
                false,
            )
            .map_err(|source| StageError::Open {
                path: path.to_owned(),
                hint: checkpoint::open_hint(&source, "is it a weir stage?"),
                source,
            })
            .and_then(|db| {
                let stage = Stage::from_db(db, path);
                stage.check_format(false).map(|()| stage)
            });
            match opened {
                Err(StageError::Open { .. } | StageError::Corrupt { .. }) if attempt < 3 => {
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50 * attempt));
                }
                other => return other,
            }
        }
    }

    fn from_db(db: DB, path: &Path) -> Stage {
        Stage {
            db,
            path: path.to_owned(),
            write_lock: Mutex::new(()),
            pending_seq: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn check_format(&self, writable: bool) -> Result<(), StageError> {
        match self.meta(META_FORMAT_VERSION)? {
            None if writable => {
                // A new stage: it has acknowledged nothing, so its position covers that.
                self.put_meta(META_POSITION_COVERS_ACKS, &[])?;
                self.put_meta(META_FORMAT_VERSION, &FORMAT_VERSION.to_be_bytes())
            }
            None => Err(corrupt("no format version record")),
            Some(bytes) => {
                let found = u32::from_be_bytes(
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| corrupt("format version record"))?,
                );
                if found > FORMAT_VERSION {
                    return Err(StageError::NewerFormat {
                        path: self.path.clone(),
                        found,
                    });
                }
                Ok(())
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn cf(&self, name: &'static str) -> &rocksdb::ColumnFamily {
        // Every family in COLUMN_FAMILIES is created at open.
        #[allow(clippy::expect_used)]
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StageError> {
        self.db
            .get_cf(self.cf(CF_META), key)
            .map_err(db_err("read meta"))
    }

    fn put_meta(&self, key: &[u8], value: &[u8]) -> Result<(), StageError> {
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .put_cf_opt(self.cf(CF_META), key, value, &opts)
            .map_err(db_err("write meta"))
    }

    /// Records a partition's failure (replacing an earlier one of the partition).
    pub fn record_failure(&self, failure: &PartitionFailure) -> Result<(), StageError> {
        let mut key = META_FAILED_PREFIX.to_vec();
        key.extend_from_slice(&partition_key(&failure.table, &failure.partition));
        let value = postcard::to_stdvec(failure).map_err(|_| corrupt("failure record"))?;
        self.db
            .put_cf(self.cf(CF_META), key, value)
            .map_err(db_err("record a partition failure"))
    }

    /// Forgets a partition's failure (it was written).
    pub fn clear_failure(&self, table: &str, partition: &Partition) -> Result<(), StageError> {
        let mut key = META_FAILED_PREFIX.to_vec();
        key.extend_from_slice(&partition_key(table, partition));
        self.db
            .delete_cf(self.cf(CF_META), key)
            .map_err(db_err("clear a partition failure"))
    }

    /// Partitions whose last write failed for good, in (table, partition) order.
    pub fn failures(&self) -> Result<Vec<PartitionFailure>, StageError> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_range(rocksdb::PrefixRange(META_FAILED_PREFIX));
        let mode = IteratorMode::From(META_FAILED_PREFIX, Direction::Forward);
        let mut out = Vec::new();
        for item in self.db.iterator_cf_opt(self.cf(CF_META), opts, mode) {
            let (_, v) = item.map_err(db_err("read partition failures"))?;
            out.push(postcard::from_bytes(&v).map_err(|_| corrupt("failure record"))?);
        }
        Ok(out)
    }

    /// Every table's contract, by stage name.
    pub fn contracts(&self) -> Result<Vec<TableContract>, StageError> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_range(rocksdb::PrefixRange(META_CONTRACT_PREFIX));
        let mode = IteratorMode::From(META_CONTRACT_PREFIX, Direction::Forward);
        let mut out = Vec::new();
        for item in self.db.iterator_cf_opt(self.cf(CF_META), opts, mode) {
            let (_, v) = item.map_err(db_err("read table contracts"))?;
            out.push(serde_json::from_slice(&v).map_err(|_| corrupt("table contract"))?);
        }
        Ok(out)
    }

    /// Records a table's contract (synced), replacing the one of the same name.
    pub fn put_contract(&self, contract: &TableContract) -> Result<(), StageError> {
        let mut key = META_CONTRACT_PREFIX.to_vec();
        key.extend_from_slice(contract.source.as_bytes());
        let value = serde_json::to_vec(contract).map_err(|_| corrupt("table contract"))?;
        self.put_meta(&key, &value)
    }

    /// Moves every staged entry of table `from` to the name of `contract` (the same
    /// source table under its new name: a rename or `SET SCHEMA`), then replaces the
    /// contract of `from` with `contract`. In bounded batches; a crash part way leaves
    /// the old contract in place, and running it again moves what is left (each entry
    /// is moved, never copied). Partition failures of `from` are forgotten (they are
    /// recorded again if the partition fails again).
    pub fn rename_table(&self, from: &str, contract: &TableContract) -> Result<u64, StageError> {
        let to = contract.source.as_str();
        let mut prefix = Vec::new();
        push_table(&mut prefix, from);
        let mut moved = 0u64;
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        for family in [
            CF_ROWS,
            CF_KEYS,
            CF_GENERATIONS,
            CF_DIRTY,
            CF_CHANGED,
            CF_BACKLOG,
        ] {
            loop {
                let mut read = ReadOptions::default();
                read.set_iterate_range(rocksdb::PrefixRange(prefix.as_slice()));
                let mode = IteratorMode::From(&prefix, Direction::Forward);
                let mut batch = WriteBatch::default();
                let mut n = 0usize;
                for item in self.db.iterator_cf_opt(self.cf(family), read, mode) {
                    let (k, v) = item.map_err(db_err("read entries to rename"))?;
                    let rest = &k[prefix.len()..];
                    batch.put_cf(self.cf(family), table_key(to, rest), v);
                    batch.delete_cf(self.cf(family), k);
                    n += 1;
                    if n >= RENAME_BATCH_KEYS {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
                self.db
                    .write_opt(batch, &opts)
                    .map_err(db_err("rename a table's entries"))?;
                moved += n as u64;
            }
        }
        let mut failed = META_FAILED_PREFIX.to_vec();
        failed.extend_from_slice(&prefix);
        let mut batch = WriteBatch::default();
        let failed_end = prefix_end(&failed);
        batch.delete_range_cf(self.cf(CF_META), failed.as_slice(), failed_end.as_slice());
        let mut old = META_CONTRACT_PREFIX.to_vec();
        old.extend_from_slice(from.as_bytes());
        batch.delete_cf(self.cf(CF_META), old);
        let mut key = META_CONTRACT_PREFIX.to_vec();
        key.extend_from_slice(to.as_bytes());
        let value = serde_json::to_vec(contract).map_err(|_| corrupt("table contract"))?;
        batch.put_cf(self.cf(CF_META), key, value);
        self.db
            .write_opt(batch, &opts)
            .map_err(db_err("rename a table's contract"))?;
        Ok(moved)
    }

    /// The feed this stage was filled from.
    pub fn source_id(&self) -> Result<Option<String>, StageError> {
        Ok(self
            .meta(META_SOURCE_ID)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// The source's resume state staged with its last [`StageChange::SourceState`].
    pub fn source_state(&self) -> Result<Option<Vec<u8>>, StageError> {
        self.meta(META_SOURCE_STATE)
    }

    /// The position of the last staged transaction (`None`: nothing staged yet).
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, StageError> {
        let bytes = self
            .db
            .get_cf(self.cf(CF_POSITION), POSITION_KEY)
            .map_err(db_err("read position"))?;
        bytes
            .map(|b| postcard::from_bytes(&b).map_err(|_| corrupt("position record")))
            .transpose()
    }

    /// Moves the position to `position` (keeping the cursor) in one synced write, unless
    /// it is there already; returns whether it moved. For a source that has delivered
    /// every change it holds and is about to acknowledge a position past the last staged
    /// transaction (a caught-up replication stream confirms the server's position, so
    /// the slot does not hold back WAL written by other databases): afterwards the
    /// stage's position is never behind what its source acknowledged, which is what
    /// lets [`Stage::position_covers_acknowledgements`] be checked against the source.
    pub fn advance_position(&self, position: u64) -> Result<bool, StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.checkpoint()?;
        let covered = self.meta(META_POSITION_COVERS_ACKS)?.is_some();
        if covered && current.is_some_and(|c| c.position >= position) {
            return Ok(false);
        }
        let next = Checkpoint {
            position: current.map_or(position, |c| c.position.max(position)),
            cursor: current.map_or(0, |c| c.cursor),
        };
        let encoded = postcard::to_allocvec(&next)
            .map_err(|e| corrupt(format!("cannot encode position: {e}")))?;
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_POSITION), POSITION_KEY, encoded);
        batch.put_cf(self.cf(CF_META), META_POSITION_COVERS_ACKS, []);
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .write_opt(batch, &opts)
            .map_err(db_err("advance the position"))?;
        Ok(current.is_none_or(|c| c.position < position))
    }

    /// Whether the position is at or past everything this stage let its source
    /// acknowledge: true for every stage this build made or advanced
    /// ([`Stage::advance_position`]), false for a stage of an older build that has not
    /// been advanced since (its source may legally have acknowledged past it).
    pub fn position_covers_acknowledgements(&self) -> Result<bool, StageError> {
        Ok(self.meta(META_POSITION_COVERS_ACKS)?.is_some())
    }

    fn generation(&self) -> Result<u64, StageError> {
        match self.meta(META_GENERATION)? {
            None => Ok(0),
            Some(b) => Ok(u64::from_be_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("generation record"))?,
            )),
        }
    }

    /// Applies transactions in order, in one synced write with the position of the last
    /// one. Transactions at or below the stored position are skipped whole.
    ///
    /// If the pending area holds chunks ([`Stage::append_pending`]), they are the
    /// beginning of `transactions[0]`, which is then committed as a large transaction:
    /// see [`Stage::append_pending`].
    pub fn apply(&self, transactions: &[Transaction]) -> Result<ApplyOutcome, StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut outcome = ApplyOutcome::default();
        let mut rest = transactions;
        if self.has_pending()? {
            let Some((large, tail)) = transactions.split_first() else {
                return Ok(outcome);
            };
            if self.checkpoint()?.is_some_and(|c| large.end <= c.position) {
                self.clear_pending()?;
                outcome.skipped += 1;
            } else {
                outcome.changes += self.commit_large(large)?;
                outcome.transactions += 1;
            }
            rest = tail;
        }
        let position = self.checkpoint()?;
        let mut batch = StageBatch::new(self.generation()?);
        let mut last: Option<Checkpoint> = None;
        for txn in rest {
            let floor = last.or(position).map(|c| c.position);
            if floor.is_some_and(|p| txn.end <= p) {
                outcome.skipped += 1;
                continue;
            }
            batch.generation += 1;
            outcome.changes += batch.changes(self, &txn.changes)?;
            batch.bad_records(self, &txn.bad_records)?;
            outcome.transactions += 1;
            last = Some(Checkpoint {
                position: txn.end,
                cursor: txn.cursor,
            });
        }
        let Some(last) = last else { return Ok(outcome) };
        batch.finish(self, Some(last), true)?;
        Ok(outcome)
    }

    /// Adds a chunk of changes of the transaction being received to the pending area.
    ///
    /// A transaction too large to hold in memory arrives as chunks followed by its
    /// last part in [`Stage::apply`]. The chunks are written unsynced; the commit then
    /// (1) syncs a marker naming the transaction's position and generation, (2) applies
    /// the chunks in order, each in its own batch, and (3) in one synced batch sets the
    /// position and removes the chunks and the marker. Readers see no partition while
    /// the marker exists ([`StageError::Applying`]), so the transaction is visible all
    /// or nothing; after a crash in (2), opening the stage finishes the commit (replaying
    /// a chunk is idempotent: it sets rows and keys to the same end state). Chunks with no
    /// marker belong to a transaction that never committed and are removed at open.
    pub fn append_pending(&self, changes: &[StageChange]) -> Result<(), StageError> {
        let seq = self
            .pending_seq
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let value = postcard::to_allocvec(changes)
            .map_err(|e| corrupt(format!("cannot encode chunk: {e}")))?;
        self.db
            .put_cf(self.cf(CF_PENDING), seq.to_be_bytes(), value)
            .map_err(db_err("stage a chunk"))
    }

    /// Forgets the pending area: the transaction it belonged to was aborted.
    pub fn discard_pending(&self) -> Result<(), StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.clear_pending()
    }

    fn has_pending(&self) -> Result<bool, StageError> {
        match self
            .db
            .iterator_cf(self.cf(CF_PENDING), IteratorMode::Start)
            .next()
        {
            None => Ok(false),
            Some(item) => item.map(|_| true).map_err(db_err("read the pending area")),
        }
    }

    fn clear_pending(&self) -> Result<(), StageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            self.cf(CF_PENDING),
            0u64.to_be_bytes(),
            u64::MAX.to_be_bytes(),
        );
        batch.delete_cf(self.cf(CF_PENDING), u64::MAX.to_be_bytes());
        self.db
            .write(batch)
            .map_err(db_err("clear the pending area"))?;
        self.pending_seq
            .store(0, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Commits the pending chunks plus `txn` as one transaction (see `append_pending`).
    fn commit_large(&self, txn: &Transaction) -> Result<usize, StageError> {
        let marker = self.mark_large(txn)?;
        self.finish_large(marker)
    }

    /// Step (1) of a large commit: the tail chunk and the marker, synced.
    fn mark_large(&self, txn: &Transaction) -> Result<ApplyingMarker, StageError> {
        let generation = self.generation()? + 1;
        let marker = ApplyingMarker {
            checkpoint: Checkpoint {
                position: txn.end,
                cursor: txn.cursor,
            },
            generation,
        };
        let mut batch = WriteBatch::default();
        let seq = self
            .pending_seq
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let tail = postcard::to_allocvec(&txn.changes)
            .map_err(|e| corrupt(format!("cannot encode chunk: {e}")))?;
        batch.put_cf(self.cf(CF_PENDING), seq.to_be_bytes(), tail);
        for record in &txn.bad_records {
            let value = postcard::to_allocvec(record)
                .map_err(|e| corrupt(format!("cannot encode record: {e}")))?;
            batch.put_cf(
                self.cf(CF_DEAD_LETTER),
                record.position.to_be_bytes(),
                value,
            );
        }
        let encoded = postcard::to_allocvec(&marker)
            .map_err(|e| corrupt(format!("cannot encode marker: {e}")))?;
        batch.put_cf(self.cf(CF_META), META_APPLYING, encoded);
        batch.put_cf(self.cf(CF_META), META_GENERATION, generation.to_be_bytes());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .write_opt(batch, &opts)
            .map_err(db_err("mark a large transaction"))?;
        Ok(marker)
    }

    /// Steps (2) and (3) of a large commit; also the recovery after a crash in them.
    fn finish_large(&self, marker: ApplyingMarker) -> Result<usize, StageError> {
        let mut changes = 0;
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_PENDING));
        iter.seek_to_first();
        while iter.valid() {
            let chunk: Vec<StageChange> = iter
                .value()
                .and_then(|v| postcard::from_bytes(v).ok())
                .ok_or_else(|| corrupt("pending chunk"))?;
            let mut batch = StageBatch::new(marker.generation);
            changes += batch.changes(self, &chunk)?;
            batch.finish(self, None, false)?;
            iter.next();
        }
        iter.status().map_err(db_err("read the pending area"))?;
        drop(iter);
        let mut batch = StageBatch::new(marker.generation);
        batch.batch.delete_range_cf(
            self.cf(CF_PENDING),
            0u64.to_be_bytes(),
            u64::MAX.to_be_bytes(),
        );
        batch
            .batch
            .delete_cf(self.cf(CF_PENDING), u64::MAX.to_be_bytes());
        batch.batch.delete_cf(self.cf(CF_META), META_APPLYING);
        batch.finish(self, Some(marker.checkpoint), true)?;
        self.pending_seq
            .store(0, std::sync::atomic::Ordering::SeqCst);
        Ok(changes)
    }

    /// At open: finish a large commit a crash interrupted, or forget the chunks of a
    /// transaction that never committed.
    fn recover_pending(&self) -> Result<(), StageError> {
        match self.meta(META_APPLYING)? {
            Some(bytes) => {
                let marker: ApplyingMarker = postcard::from_bytes(&bytes)
                    .map_err(|_| corrupt("large-transaction marker"))?;
                tracing::info!(
                    position = marker.checkpoint.position,
                    "finishing a large transaction interrupted by a crash"
                );
                self.finish_large(marker).map(drop)
            }
            None => self.clear_pending(),
        }
    }

    fn current_partition(
        &self,
        overlay: &HashMap<(String, Vec<u8>), Option<Partition>>,
        table: &str,
        key: &[u8],
    ) -> Result<Option<Partition>, StageError> {
        if let Some(p) = overlay.get(&(table.to_owned(), key.to_vec())) {
            return Ok(p.clone());
        }
        let bytes = self
            .db
            .get_cf(self.cf(CF_KEYS), table_key(table, key))
            .map_err(db_err("read keys index"))?;
        bytes
            .map(|b| Partition::from_bytes(&b).ok_or_else(|| corrupt("keys index entry")))
            .transpose()
    }

    /// Every dirty partition, in (table, partition) order.
    pub fn dirty_partitions(&self) -> Result<Vec<DirtyPartition>, StageError> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_DIRTY), IteratorMode::Start) {
            let (k, v) = item.map_err(db_err("read dirty set"))?;
            let (table, rest) = split_table(&k).ok_or_else(|| corrupt("dirty key"))?;
            let partition = split_partition(rest)
                .filter(|(_, tail)| tail.is_empty())
                .map(|(p, _)| p)
                .ok_or_else(|| corrupt("dirty key partition"))?;
            let generation = u64::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| corrupt("dirty generation"))?,
            );
            out.push(DirtyPartition {
                table,
                partition,
                generation,
            });
        }
        Ok(out)
    }

    /// A partition's generation (0: never changed), its dirty mark and the stage's
    /// position, as of `snapshot`; fails while a large transaction is being applied.
    fn partition_state(
        &self,
        snapshot: &rocksdb::Snapshot<'_>,
        table: &str,
        partition: &Partition,
    ) -> Result<(u64, Option<u64>, Checkpoint), StageError> {
        if snapshot
            .get_cf(self.cf(CF_META), META_APPLYING)
            .map_err(db_err("read meta"))?
            .is_some()
        {
            return Err(StageError::Applying);
        }
        let key = partition_key(table, partition);
        let read_generation = |cf: &'static str| -> Result<Option<u64>, StageError> {
            snapshot
                .get_cf(self.cf(cf), &key)
                .map_err(db_err("read generation"))?
                .map(|v| decode_generation(&v))
                .transpose()
        };
        let generation = read_generation(CF_GENERATIONS)?.unwrap_or(0);
        let dirty = read_generation(CF_DIRTY)?;
        let checkpoint = snapshot
            .get_cf(self.cf(CF_POSITION), POSITION_KEY)
            .map_err(db_err("read position"))?
            .map(|b| postcard::from_bytes(&b).map_err(|_| corrupt("position record")))
            .transpose()?
            .unwrap_or_default();
        Ok((generation, dirty, checkpoint))
    }

    /// Reads one partition's rows, its dirty generation and the position from one
    /// snapshot, so staging that continues meanwhile cannot tear the read.
    pub fn read_partition(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<PartitionRows, StageError> {
        let snapshot = self.db.snapshot();
        let (generation, dirty, checkpoint) = self.partition_state(&snapshot, table, partition)?;
        let prefix = partition_key(table, partition);
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&snapshot);
        opts.set_iterate_range(rocksdb::PrefixRange(prefix.as_slice()));
        let mut rows = Vec::new();
        for item in self.db.iterator_cf_opt(
            self.cf(CF_ROWS),
            opts,
            IteratorMode::From(&prefix, Direction::Forward),
        ) {
            let (_, v) = item.map_err(db_err("read rows"))?;
            rows.push(
                postcard::from_bytes(&v)
                    .map_err(|_| corrupt(format!("row in {table} partition {partition}")))?,
            );
        }
        Ok(PartitionRows {
            generation,
            dirty,
            checkpoint,
            rows,
        })
    }

    /// The keys of one partition changed since its last write, each with its row if
    /// it is still in the partition, from one snapshot (like [`Stage::read_partition`]).
    pub fn read_changes(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<PartitionChanges, StageError> {
        let snapshot = self.db.snapshot();
        let (generation, dirty, checkpoint) = self.partition_state(&snapshot, table, partition)?;
        let prefix = partition_key(table, partition);
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&snapshot);
        opts.set_iterate_range(rocksdb::PrefixRange(prefix.as_slice()));
        let mut whole = false;
        let mut keys = Vec::new();
        for item in self.db.iterator_cf_opt(
            self.cf(CF_CHANGED),
            opts,
            IteratorMode::From(&prefix, Direction::Forward),
        ) {
            let (k, _) = item.map_err(db_err("read changed keys"))?;
            let key = &k[prefix.len()..];
            if key.is_empty() {
                whole = true;
                continue;
            }
            let row = snapshot
                .get_cf(self.cf(CF_ROWS), row_key(table, partition, key))
                .map_err(db_err("read a row"))?
                .map(|v| {
                    postcard::from_bytes(&v)
                        .map_err(|_| corrupt(format!("row in {table} partition {partition}")))
                })
                .transpose()?;
            keys.push((key.to_vec(), row));
        }
        // Dirty with nothing recorded: marked by a stage from before this record.
        whole |= dirty.is_some() && keys.is_empty();
        Ok(PartitionChanges {
            generation,
            dirty,
            checkpoint,
            whole,
            keys,
        })
    }

    /// The staged row of `key` in `table`, wherever its partition (the `keys` index
    /// says where). For unchanged TOAST values, which the source leaves out.
    pub fn get_row(&self, table: &str, key: &[u8]) -> Result<Option<StagedRow>, StageError> {
        let snapshot = self.db.snapshot();
        let Some(partition) = snapshot
            .get_cf(self.cf(CF_KEYS), table_key(table, key))
            .map_err(db_err("read keys index"))?
        else {
            return Ok(None);
        };
        let partition =
            Partition::from_bytes(&partition).ok_or_else(|| corrupt("keys index entry"))?;
        let row = snapshot
            .get_cf(self.cf(CF_ROWS), row_key(table, &partition, key))
            .map_err(db_err("read a row"))?;
        row.map(|v| {
            postcard::from_bytes(&v)
                .map_err(|_| corrupt(format!("row in {table} partition {partition}")))
        })
        .transpose()
    }

    /// Every staged row of `table` with its partition, in (partition, key) order, from
    /// one snapshot. For checks and tests: it holds the whole table in memory.
    pub fn table_rows(&self, table: &str) -> Result<Vec<(Partition, StagedRow)>, StageError> {
        let mut prefix = Vec::new();
        push_table(&mut prefix, table);
        let snapshot = self.db.snapshot();
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&snapshot);
        opts.set_iterate_range(rocksdb::PrefixRange(prefix.as_slice()));
        let mut out = Vec::new();
        let mode = IteratorMode::From(&prefix, Direction::Forward);
        for item in self.db.iterator_cf_opt(self.cf(CF_ROWS), opts, mode) {
            let (k, v) = item.map_err(db_err("read rows"))?;
            let (_, rest) = split_table(&k).ok_or_else(|| corrupt("row key"))?;
            let (partition, _) =
                split_partition(rest).ok_or_else(|| corrupt("row key partition"))?;
            let row = postcard::from_bytes(&v)
                .map_err(|_| corrupt(format!("row in {table} partition {partition}")))?;
            out.push((partition, row));
        }
        Ok(out)
    }

    /// Every partition of `table` the stage knows (any that ever held a row), with its
    /// generation and its number of staged rows now (0: emptied), from one snapshot.
    /// Reads keys only as far as RocksDB allows: values are not decoded.
    pub fn partitions(&self, table: &str) -> Result<BTreeMap<Partition, (u64, u64)>, StageError> {
        let mut prefix = Vec::new();
        push_table(&mut prefix, table);
        let snapshot = self.db.snapshot();
        let mut out: BTreeMap<Partition, (u64, u64)> = BTreeMap::new();
        for (cf, what) in [(CF_GENERATIONS, "generation"), (CF_ROWS, "row")] {
            let mut opts = ReadOptions::default();
            opts.set_snapshot(&snapshot);
            opts.set_iterate_range(rocksdb::PrefixRange(prefix.as_slice()));
            let mode = IteratorMode::From(&prefix, Direction::Forward);
            for item in self.db.iterator_cf_opt(self.cf(cf), opts, mode) {
                let (k, v) = item.map_err(db_err("read partitions"))?;
                let (_, rest) = split_table(&k).ok_or_else(|| corrupt("partition key"))?;
                let (partition, _) = split_partition(rest)
                    .ok_or_else(|| corrupt(format!("{what} key partition")))?;
                let entry = out.entry(partition).or_insert((0, 0));
                if cf == CF_GENERATIONS {
                    entry.0 = v
                        .as_ref()
                        .try_into()
                        .map(u64::from_be_bytes)
                        .map_err(|_| corrupt("generation record"))?;
                } else {
                    entry.1 += 1;
                }
            }
        }
        Ok(out)
    }

    /// Bytes of changes staged but not yet written to the target: the sum of every
    /// dirty partition's backlog. Read in full (one entry per dirty partition).
    pub fn unwritten_bytes(&self) -> Result<u64, StageError> {
        let mut total = 0u64;
        for item in self
            .db
            .iterator_cf(self.cf(CF_BACKLOG), IteratorMode::Start)
        {
            let (_, v) = item.map_err(db_err("read the backlog"))?;
            total = total.saturating_add(decode_generation(&v)?);
        }
        Ok(total)
    }

    /// The approximate staged bytes of each partition, from RocksDB's table-file
    /// index (rows still only in the memtable are not counted): for ordering jobs,
    /// never for correctness.
    pub fn approximate_bytes(&self, partitions: &[DirtyPartition]) -> Vec<u64> {
        let bounds: Vec<(Vec<u8>, Vec<u8>)> = partitions
            .iter()
            .map(|d| {
                let start = partition_key(&d.table, &d.partition);
                let end = prefix_end(&start);
                (start, end)
            })
            .collect();
        let ranges: Vec<rocksdb::Range<'_>> = bounds
            .iter()
            .map(|(start, end)| rocksdb::Range::new(start, end))
            .collect();
        self.db.get_approximate_sizes_cf(self.cf(CF_ROWS), &ranges)
    }

    /// Clears the dirty mark of a partition only if it still holds `generation`, the
    /// one the job read. Returns whether it cleared.
    pub fn clear_dirty(
        &self,
        table: &str,
        partition: &Partition,
        generation: u64,
    ) -> Result<bool, StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let key = partition_key(table, partition);
        let current = self
            .db
            .get_cf(self.cf(CF_DIRTY), &key)
            .map_err(db_err("read dirty mark"))?;
        if current.as_deref() != Some(generation.to_be_bytes().as_slice()) {
            return Ok(false);
        }
        // The mark still holds the generation read, so no key changed since: every
        // changed-key record of the partition was in the job's read.
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(CF_DIRTY), &key);
        batch.delete_cf(self.cf(CF_BACKLOG), &key);
        let mut opts = ReadOptions::default();
        opts.set_iterate_range(rocksdb::PrefixRange(key.as_slice()));
        for item in self.db.iterator_cf_opt(
            self.cf(CF_CHANGED),
            opts,
            IteratorMode::From(&key, Direction::Forward),
        ) {
            let (k, _) = item.map_err(db_err("read changed keys"))?;
            batch.delete_cf(self.cf(CF_CHANGED), k);
        }
        self.db.write(batch).map_err(db_err("clear dirty mark"))?;
        Ok(true)
    }

    /// Bad records staged for the dead-letter table, oldest first, at most `limit`.
    pub fn dead_letters(&self, limit: usize) -> Result<Vec<BadRecord>, StageError> {
        let mut out = Vec::new();
        for item in self
            .db
            .iterator_cf(self.cf(CF_DEAD_LETTER), IteratorMode::Start)
            .take(limit)
        {
            let (_, v) = item.map_err(db_err("read dead letters"))?;
            out.push(postcard::from_bytes(&v).map_err(|_| corrupt("dead-letter record"))?);
        }
        Ok(out)
    }

    /// Forgets dead letters once they are committed in the target.
    pub fn remove_dead_letters(&self, positions: &[u64]) -> Result<(), StageError> {
        let mut batch = WriteBatch::default();
        for p in positions {
            batch.delete_cf(self.cf(CF_DEAD_LETTER), p.to_be_bytes());
        }
        self.db.write(batch).map_err(db_err("remove dead letters"))
    }

    /// Staged rows per table.
    pub fn row_counts(&self) -> Result<BTreeMap<String, u64>, StageError> {
        let mut out = BTreeMap::new();
        for item in self.db.iterator_cf(self.cf(CF_KEYS), IteratorMode::Start) {
            let (k, _) = item.map_err(db_err("read keys index"))?;
            let (table, _) = split_table(&k).ok_or_else(|| corrupt("keys index key"))?;
            *out.entry(table).or_insert(0) += 1;
        }
        Ok(out)
    }
}

/// A write batch being built, with what later changes in it must see.
struct StageBatch {
    batch: WriteBatch,
    generation: u64,
    /// Keys touched earlier in this batch (`None`: deleted).
    keys: HashMap<(String, Vec<u8>), Option<Partition>>,
    /// Tables truncated earlier in this batch: their keys are gone unless set again.
    truncated: std::collections::HashSet<String>,
    dirty: BTreeMap<(String, Partition), u64>,
    /// Bytes staged into each partition by this batch.
    bytes: BTreeMap<(String, Partition), u64>,
    /// Row images set earlier in this batch, encoded (`None`: deleted), for the
    /// unchanged values of a later `UpsertUnchanged`: the batch is not readable
    /// before it is written.
    images: HashMap<(String, Vec<u8>), Option<Vec<u8>>>,
}

impl StageBatch {
    /// The partition `key` is in, as of the changes added so far.
    fn current(
        &self,
        stage: &Stage,
        table: &str,
        key: &[u8],
    ) -> Result<Option<Partition>, StageError> {
        if let Some(p) = self.keys.get(&(table.to_owned(), key.to_vec())) {
            return Ok(p.clone());
        }
        if self.truncated.contains(table) {
            return Ok(None);
        }
        stage.current_partition(&self.keys, table, key)
    }

    fn new(generation: u64) -> StageBatch {
        StageBatch {
            batch: WriteBatch::default(),
            generation,
            keys: HashMap::new(),
            truncated: std::collections::HashSet::new(),
            dirty: BTreeMap::new(),
            bytes: BTreeMap::new(),
            images: HashMap::new(),
        }
    }

    /// The current image of `key`, as of the changes added so far.
    fn current_row(
        &self,
        stage: &Stage,
        table: &str,
        key: &[u8],
    ) -> Result<Option<StagedRow>, StageError> {
        if let Some(image) = self.images.get(&(table.to_owned(), key.to_vec())) {
            return image
                .as_ref()
                .map(|bytes| {
                    postcard::from_bytes(bytes)
                        .map_err(|_| corrupt(format!("row of {table} in a batch")))
                })
                .transpose();
        }
        if self.truncated.contains(table) {
            return Ok(None);
        }
        stage.get_row(table, key)
    }

    /// The row of an `UpsertUnchanged` with its unchanged values filled from the
    /// current image of `previous_key`; `None`: skip it (no image, `skip_if_absent`).
    fn resolve_unchanged(
        &self,
        stage: &Stage,
        table: &str,
        previous_key: &[u8],
        row: &StagedRow,
        unchanged: &[String],
        skip_if_absent: bool,
    ) -> Result<Option<StagedRow>, StageError> {
        let image = self.current_row(stage, table, previous_key)?;
        let Some(image) = image else {
            if skip_if_absent {
                return Ok(None);
            }
            return Err(StageError::UnchangedWithoutRow {
                table: table.to_owned(),
                column: unchanged.first().cloned().unwrap_or_default(),
            });
        };
        let mut row = row.clone();
        for column in unchanged {
            let value = image
                .values
                .iter()
                .find(|(c, _)| c == column)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| StageError::UnchangedWithoutRow {
                    table: table.to_owned(),
                    column: column.clone(),
                })?;
            row.values.push((column.clone(), value));
        }
        Ok(Some(row))
    }

    /// Sets the row of `key` (moving it out of its old partition if it was elsewhere).
    fn upsert(
        &mut self,
        stage: &Stage,
        table: &str,
        key: &[u8],
        partition: &Partition,
        row: &StagedRow,
    ) -> Result<(), StageError> {
        let old = self.current(stage, table, key)?;
        if let Some(old) = old.filter(|old| old != partition) {
            self.batch
                .delete_cf(stage.cf(CF_ROWS), row_key(table, &old, key));
            self.changed(stage, table, &old, key);
            self.dirty.insert((table.to_owned(), old), self.generation);
        }
        self.changed(stage, table, partition, key);
        let value =
            postcard::to_allocvec(row).map_err(|e| corrupt(format!("cannot encode row: {e}")))?;
        *self
            .bytes
            .entry((table.to_owned(), partition.clone()))
            .or_insert(0) += value.len() as u64;
        self.batch
            .put_cf(stage.cf(CF_ROWS), row_key(table, partition, key), &value);
        self.batch.put_cf(
            stage.cf(CF_KEYS),
            table_key(table, key),
            partition.to_bytes(),
        );
        self.keys
            .insert((table.to_owned(), key.to_vec()), Some(partition.clone()));
        self.dirty
            .insert((table.to_owned(), partition.clone()), self.generation);
        self.images
            .insert((table.to_owned(), key.to_vec()), Some(value));
        Ok(())
    }

    /// Adds changes at the current generation; returns how many.
    fn changes(&mut self, stage: &Stage, changes: &[StageChange]) -> Result<usize, StageError> {
        for change in changes {
            match change {
                StageChange::Upsert {
                    table,
                    key,
                    partition,
                    row,
                } => self.upsert(stage, table, key, partition, row)?,
                StageChange::UpsertUnchanged {
                    table,
                    key,
                    partition,
                    row,
                    unchanged,
                    previous_key,
                    skip_if_absent,
                } => {
                    if let Some(row) = self.resolve_unchanged(
                        stage,
                        table,
                        previous_key,
                        row,
                        unchanged,
                        *skip_if_absent,
                    )? {
                        self.upsert(stage, table, key, partition, &row)?;
                    }
                }
                StageChange::SourceState(state) => {
                    self.batch
                        .put_cf(stage.cf(CF_META), META_SOURCE_STATE, state);
                }
                StageChange::Truncate { table } => {
                    let mut prefix = Vec::new();
                    push_table(&mut prefix, table);
                    let end = prefix_end(&prefix);
                    self.batch.delete_range_cf(stage.cf(CF_ROWS), &prefix, &end);
                    self.batch.delete_range_cf(stage.cf(CF_KEYS), &prefix, &end);
                    self.keys.retain(|(t, _), _| t != table);
                    self.images.retain(|(t, _), _| t != table);
                    self.truncated.insert(table.clone());
                    let mode = IteratorMode::From(&prefix, Direction::Forward);
                    for item in stage.db.iterator_cf(stage.cf(CF_GENERATIONS), mode) {
                        let (k, _) = item.map_err(db_err("read generations"))?;
                        if !k.starts_with(&prefix) {
                            break;
                        }
                        let (_, rest) =
                            split_table(&k).ok_or_else(|| corrupt("generations key"))?;
                        let (partition, _) = split_partition(rest)
                            .ok_or_else(|| corrupt("generations key partition"))?;
                        self.dirty
                            .insert((table.clone(), partition), self.generation);
                    }
                    // Partitions filled earlier in this batch are in `dirty` already.
                    // Every key of every partition changed: each is replaced whole.
                    let partitions: Vec<Partition> = self
                        .dirty
                        .keys()
                        .filter(|(t, _)| t == table)
                        .map(|(_, p)| p.clone())
                        .collect();
                    for p in partitions {
                        self.changed(stage, table, &p, &[]);
                    }
                }
                StageChange::Delete { table, key } => {
                    if let Some(old) = self.current(stage, table, key)? {
                        self.batch
                            .delete_cf(stage.cf(CF_ROWS), row_key(table, &old, key));
                        self.changed(stage, table, &old, key);
                        self.batch
                            .delete_cf(stage.cf(CF_KEYS), table_key(table, key));
                        self.keys.insert((table.clone(), key.clone()), None);
                        self.dirty.insert((table.clone(), old), self.generation);
                    }
                    self.images.insert((table.clone(), key.clone()), None);
                }
            }
        }
        Ok(changes.len())
    }

    /// Records that `key` (empty: every key) of a partition changed.
    fn changed(&mut self, stage: &Stage, table: &str, partition: &Partition, key: &[u8]) {
        *self
            .bytes
            .entry((table.to_owned(), partition.clone()))
            .or_insert(0) += key.len() as u64;
        self.batch.put_cf(
            stage.cf(CF_CHANGED),
            row_key(table, partition, key),
            self.generation.to_be_bytes(),
        );
    }

    fn bad_records(&mut self, stage: &Stage, records: &[BadRecord]) -> Result<(), StageError> {
        for record in records {
            let value = postcard::to_allocvec(record)
                .map_err(|e| corrupt(format!("cannot encode record: {e}")))?;
            self.batch.put_cf(
                stage.cf(CF_DEAD_LETTER),
                record.position.to_be_bytes(),
                value,
            );
        }
        Ok(())
    }

    /// Writes the batch with the dirty marks and generation (and the position, if
    /// given), synced if `sync`.
    fn finish(
        mut self,
        stage: &Stage,
        position: Option<Checkpoint>,
        sync: bool,
    ) -> Result<(), StageError> {
        for ((table, partition), added) in std::mem::take(&mut self.bytes) {
            let key = partition_key(&table, &partition);
            let before = stage
                .db
                .get_cf(stage.cf(CF_BACKLOG), &key)
                .map_err(db_err("read the backlog"))?
                .map(|v| decode_generation(&v))
                .transpose()?
                .unwrap_or(0);
            self.batch.put_cf(
                stage.cf(CF_BACKLOG),
                key,
                before.saturating_add(added).to_be_bytes(),
            );
        }
        for ((table, partition), generation) in std::mem::take(&mut self.dirty) {
            let key = partition_key(&table, &partition);
            self.batch
                .put_cf(stage.cf(CF_GENERATIONS), &key, generation.to_be_bytes());
            self.batch
                .put_cf(stage.cf(CF_DIRTY), key, generation.to_be_bytes());
        }
        self.batch.put_cf(
            stage.cf(CF_META),
            META_GENERATION,
            self.generation.to_be_bytes(),
        );
        if let Some(position) = position {
            let encoded = postcard::to_allocvec(&position)
                .map_err(|e| corrupt(format!("cannot encode position: {e}")))?;
            self.batch
                .put_cf(stage.cf(CF_POSITION), POSITION_KEY, encoded);
        }
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        stage
            .db
            .write_opt(self.batch, &opts)
            .map_err(db_err("stage transactions"))
    }
}

/// Names a large transaction whose chunks are being applied.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct ApplyingMarker {
    checkpoint: Checkpoint,
    generation: u64,
}

// ---- key layout -------------------------------------------------------------------

fn push_table(out: &mut Vec<u8>, table: &str) {
    let len = u16::try_from(table.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&table.as_bytes()[..usize::from(len)]);
}

fn split_table(key: &[u8]) -> Option<(String, &[u8])> {
    let len = usize::from(u16::from_be_bytes(key.get(..2)?.try_into().ok()?));
    let name = std::str::from_utf8(key.get(2..2 + len)?).ok()?;
    Some((name.to_owned(), &key[2 + len..]))
}

/// Splits `len(partition) | partition | rest`.
fn split_partition(bytes: &[u8]) -> Option<(Partition, &[u8])> {
    let len = usize::try_from(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?)).ok()?;
    let partition = Partition::from_bytes(bytes.get(4..4 + len)?)?;
    Some((partition, &bytes[4 + len..]))
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![u8::MAX; prefix.len() + 1]
}

fn table_key(table: &str, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + table.len() + key.len());
    push_table(&mut out, table);
    out.extend_from_slice(key);
    out
}

/// `table | len(partition) | partition`: the dirty key, and the prefix of its rows.
fn partition_key(table: &str, partition: &Partition) -> Vec<u8> {
    let p = partition.to_bytes();
    let mut out = Vec::with_capacity(6 + table.len() + p.len());
    push_table(&mut out, table);
    out.extend_from_slice(&u32::try_from(p.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&p);
    out
}

fn row_key(table: &str, partition: &Partition, key: &[u8]) -> Vec<u8> {
    let mut out = partition_key(table, partition);
    out.extend_from_slice(key);
    out
}

/// The key values [`encode_key`] encoded. Fails on bytes it did not make.
pub fn decode_key(mut bytes: &[u8]) -> Result<Vec<Value>, StageError> {
    let bad = || corrupt("encoded key");
    let mut out = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        let fixed = |n: usize| rest.get(..n).ok_or_else(bad);
        let (value, used) = match tag {
            0x08 => (Value::Bool(fixed(1)?[0] != 0), 1),
            0x10 => {
                let raw = u64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?);
                (Value::Int((raw ^ (1 << 63)) as i64), 8)
            }
            0x11 => {
                let raw = u32::from_be_bytes(fixed(4)?.try_into().map_err(|_| bad())?);
                (Value::Date((raw ^ (1 << 31)) as i32), 4)
            }
            0x12 => {
                let raw = u64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?);
                (Value::Timestamp((raw ^ (1 << 63)) as i64), 8)
            }
            0x20 | 0x21 => {
                let mut text = Vec::new();
                let mut i = 0;
                loop {
                    match (rest.get(i), rest.get(i + 1)) {
                        (Some(0), Some(0)) => break,
                        (Some(0), Some(0xFF)) => {
                            text.push(0);
                            i += 2;
                        }
                        (Some(&b), _) if b != 0 => {
                            text.push(b);
                            i += 1;
                        }
                        _ => return Err(bad()),
                    }
                }
                let text = String::from_utf8(text).map_err(|_| bad())?;
                let value = if tag == 0x20 {
                    Value::Text(text)
                } else {
                    Value::Decimal(text)
                };
                (value, i + 2)
            }
            _ => return Err(bad()),
        };
        out.push(value);
        bytes = &rest[used..];
    }
    Ok(out)
}

/// A big-endian `u64` record (a generation, or a backlog's bytes).
fn decode_generation(bytes: &[u8]) -> Result<u64, StageError> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| corrupt("generation record"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Op;

    fn row(id: i64, day: &str, pos: u64) -> StagedRow {
        StagedRow {
            commit_position: pos,
            commit_time_us: None,
            op: Op::Insert,
            values: vec![
                ("id".into(), Value::Int(id)),
                ("day".into(), Value::Text(day.into())),
            ],
        }
    }

    fn upsert(id: i64, day: &str, pos: u64) -> StageChange {
        StageChange::Upsert {
            table: "public.t".into(),
            key: encode_key(&[&Value::Int(id)]).expect("key"),
            partition: Partition::Key(day.into()),
            row: row(id, day, pos),
        }
    }

    fn txn(end: u64, changes: Vec<StageChange>) -> Transaction {
        Transaction {
            end,
            cursor: end,
            changes,
            bad_records: vec![],
        }
    }

    fn p(s: &str) -> Partition {
        Partition::Key(s.into())
    }

    /// Row `id` with a `note`: the column an `UpsertUnchanged` leaves out.
    fn noted(id: i64, day: &str, pos: u64, note: &str) -> StageChange {
        let mut r = row(id, day, pos);
        r.values.push(("note".into(), Value::Text(note.into())));
        StageChange::Upsert {
            table: "public.t".into(),
            key: encode_key(&[&Value::Int(id)]).expect("key"),
            partition: p(day),
            row: r,
        }
    }

    /// Row `id` in `day`, its `note` unchanged.
    fn note_unchanged(id: i64, day: &str, pos: u64, skip_if_absent: bool) -> StageChange {
        let key = encode_key(&[&Value::Int(id)]).expect("key");
        StageChange::UpsertUnchanged {
            table: "public.t".into(),
            key: key.clone(),
            partition: p(day),
            row: row(id, day, pos),
            unchanged: vec!["note".into()],
            previous_key: key,
            skip_if_absent,
        }
    }

    fn note_of(stage: &Stage, id: i64) -> Option<(String, Value)> {
        let row = stage
            .get_row("public.t", &encode_key(&[&Value::Int(id)]).expect("key"))
            .expect("read")?;
        let day = row.values.iter().find(|(c, _)| c == "day")?.1.to_string();
        let note = row.values.iter().find(|(c, _)| c == "note")?.1.clone();
        Some((day, note))
    }

    /// An unchanged value is the row's previous version's, wherever that version is:
    /// earlier in the same transaction, in an earlier transaction of the same group
    /// commit, staged before, or in an earlier chunk of a large transaction.
    #[test]
    fn unchanged_values_come_from_the_previous_version_of_the_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        let text = |s: &str| Value::Text(s.into());
        stage
            .apply(&[
                // The same transaction: inserted, then updated (and moved).
                txn(
                    10,
                    vec![
                        noted(1, "d1", 10, "one"),
                        note_unchanged(1, "d2", 10, false),
                    ],
                ),
                // Staged before in the stage, changed in one transaction of a group
                // commit, then updated again in the next: the new note, not the staged one.
                txn(20, vec![noted(2, "d1", 20, "two")]),
            ])
            .expect("apply");
        stage
            .apply(&[
                txn(30, vec![noted(2, "d1", 30, "two, corrected")]),
                txn(40, vec![note_unchanged(2, "d3", 40, false)]),
                // A row never staged: skipped (a snapshot will read it), or an error.
                txn(50, vec![note_unchanged(3, "d1", 50, true)]),
            ])
            .expect("apply");
        assert_eq!(note_of(&stage, 1), Some(("d2".into(), text("one"))));
        assert_eq!(
            note_of(&stage, 2),
            Some(("d3".into(), text("two, corrected")))
        );
        assert_eq!(note_of(&stage, 3), None, "skipped");
        let err = stage
            .apply(&[txn(60, vec![note_unchanged(4, "d1", 60, false)])])
            .expect_err("no previous version");
        assert!(
            matches!(&err, StageError::UnchangedWithoutRow { column, .. } if column == "note"),
            "{err}"
        );
        // A large transaction: the new note in one chunk, the unchanged one in the next.
        stage
            .append_pending(&[noted(5, "d1", 70, "five")])
            .expect("chunk");
        stage
            .append_pending(&[noted(1, "d2", 70, "one, again")])
            .expect("chunk");
        stage
            .apply(&[txn(
                70,
                vec![
                    note_unchanged(5, "d4", 70, false),
                    note_unchanged(1, "d1", 70, false),
                ],
            )])
            .expect("commit the large transaction");
        assert_eq!(note_of(&stage, 5), Some(("d4".into(), text("five"))));
        assert_eq!(note_of(&stage, 1), Some(("d1".into(), text("one, again"))));
        assert_eq!(
            stage.checkpoint().expect("position").map(|c| c.position),
            Some(70)
        );
    }

    fn contract(source: &str, oid: u32) -> TableContract {
        TableContract {
            source: source.into(),
            source_oid: Some(oid),
            target: "analytics.t".into(),
            key: vec!["id".into()],
            partition_by: "day".into(),
            grain: "value".into(),
            transform: "identity".into(),
        }
    }

    #[test]
    fn a_renamed_table_carries_its_rows_dirty_marks_and_contract_to_the_new_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .put_contract(&contract("public.t", 7))
            .expect("contract");
        // Another table whose name starts alike stays where it is.
        stage
            .put_contract(&contract("public.t2", 8))
            .expect("contract");
        let mut other = upsert(9, "d1", 10);
        if let StageChange::Upsert { table, .. } = &mut other {
            *table = "public.t2".into();
        }
        stage
            .apply(&[txn(
                10,
                vec![upsert(1, "d1", 10), upsert(2, "d2", 10), other],
            )])
            .expect("apply");
        let moved = stage
            .rename_table("public.t", &contract("public.t_v2", 7))
            .expect("rename");
        assert!(moved >= 4, "rows and keys at least: {moved}");
        assert!(stage.table_rows("public.t").expect("rows").is_empty());
        assert_eq!(stage.table_rows("public.t_v2").expect("rows").len(), 2);
        assert_eq!(stage.table_rows("public.t2").expect("rows").len(), 1);
        let key = encode_key(&[&Value::Int(2)]).expect("key");
        assert_eq!(
            stage.get_row("public.t_v2", &key).expect("get"),
            Some(row(2, "d2", 10))
        );
        let mut dirty: Vec<_> = stage
            .dirty_partitions()
            .expect("dirty")
            .into_iter()
            .map(|d| (d.table, d.partition))
            .collect();
        dirty.sort();
        assert_eq!(
            dirty,
            vec![
                ("public.t2".to_owned(), p("d1")),
                ("public.t_v2".to_owned(), p("d1")),
                ("public.t_v2".to_owned(), p("d2")),
            ]
        );
        let contracts = stage.contracts().expect("contracts");
        assert_eq!(
            contracts,
            vec![contract("public.t2", 8), contract("public.t_v2", 7)]
        );
        // Again (a crash after the moves, before the contract): nothing left to move.
        assert_eq!(
            stage
                .rename_table("public.t", &contract("public.t_v2", 7))
                .expect("rename"),
            0
        );
        assert_eq!(stage.table_rows("public.t_v2").expect("rows").len(), 2);
    }

    #[test]
    fn a_partition_move_dirties_both_partitions_and_moves_the_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
            .expect("apply");
        let gen1 = stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .dirty
            .expect("dirty");
        assert!(
            stage
                .clear_dirty("public.t", &p("d1"), gen1)
                .expect("clear")
        );
        stage
            .apply(&[txn(20, vec![upsert(1, "d2", 20)])])
            .expect("apply");
        let dirty: Vec<_> = stage
            .dirty_partitions()
            .expect("dirty")
            .into_iter()
            .map(|d| d.partition)
            .collect();
        assert_eq!(dirty, [p("d1"), p("d2")]);
        assert!(
            stage
                .read_partition("public.t", &p("d1"))
                .expect("read")
                .rows
                .is_empty()
        );
        assert_eq!(
            stage
                .read_partition("public.t", &p("d2"))
                .expect("read")
                .rows,
            [row(1, "d2", 20)]
        );
    }

    #[test]
    fn advancing_the_position_keeps_the_cursor_never_goes_back_and_survives_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        assert!(stage.position_covers_acknowledgements().expect("marker"));
        // Nothing staged yet: the position starts there.
        assert!(stage.advance_position(5).expect("advance"));
        assert_eq!(
            stage.checkpoint().expect("position"),
            Some(Checkpoint {
                position: 5,
                cursor: 0
            })
        );
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
            .expect("apply");
        assert!(stage.advance_position(30).expect("advance"));
        assert!(!stage.advance_position(30).expect("same"));
        assert!(!stage.advance_position(20).expect("behind"));
        assert_eq!(
            stage.checkpoint().expect("position"),
            Some(Checkpoint {
                position: 30,
                cursor: 10
            })
        );
        // A transaction at or below the advanced position is skipped, one past it staged.
        let outcome = stage
            .apply(&[
                txn(25, vec![upsert(2, "d1", 25)]),
                txn(40, vec![upsert(3, "d1", 40)]),
            ])
            .expect("apply");
        assert_eq!((outcome.skipped, outcome.transactions), (1, 1));
        assert!(
            stage
                .get_row("public.t", &encode_key(&[&Value::Int(2)]).expect("key"))
                .expect("get")
                .is_none()
        );
        drop(stage);
        let stage = Stage::open(dir.path(), "test").expect("reopen");
        assert_eq!(
            stage.checkpoint().expect("position"),
            Some(Checkpoint {
                position: 40,
                cursor: 40
            })
        );
        assert!(stage.position_covers_acknowledgements().expect("marker"));
        assert!(
            checkpoint::check(&stage)
                .expect("check")
                .problems
                .is_empty()
        );
    }

    #[test]
    fn a_stage_of_an_older_build_covers_acknowledgements_once_advanced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
            .expect("apply");
        // What a stage made before the marker existed looks like.
        stage
            .db
            .delete_cf(stage.cf(CF_META), META_POSITION_COVERS_ACKS)
            .expect("delete");
        assert!(!stage.position_covers_acknowledgements().expect("marker"));
        // Advancing to where it already is still records that it now covers them.
        assert!(!stage.advance_position(10).expect("advance"));
        assert!(stage.position_covers_acknowledgements().expect("marker"));
    }

    fn changed_ids(stage: &Stage, day: &str) -> (bool, Vec<(i64, bool)>) {
        let changes = stage.read_changes("public.t", &p(day)).expect("changes");
        let keys = changes
            .keys
            .iter()
            .map(|(k, row)| match decode_key(k).expect("key").as_slice() {
                [Value::Int(id)] => (*id, row.is_some()),
                other => panic!("unexpected key {other:?}"),
            })
            .collect();
        (changes.whole, keys)
    }

    #[test]
    fn changed_keys_name_both_partitions_of_a_move_and_clear_with_the_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10), upsert(2, "d1", 10)])])
            .expect("apply");
        assert_eq!(
            changed_ids(&stage, "d1"),
            (false, vec![(1, true), (2, true)])
        );
        let gen1 = stage
            .read_changes("public.t", &p("d1"))
            .expect("read")
            .dirty;
        assert!(
            stage
                .clear_dirty("public.t", &p("d1"), gen1.expect("dirty"))
                .expect("clear")
        );
        assert_eq!(changed_ids(&stage, "d1"), (false, vec![]));
        // Key 1 moves to d2 and key 2 is deleted: d1 names both (neither is there now),
        // d2 names key 1 with its row.
        stage
            .apply(&[txn(
                20,
                vec![
                    upsert(1, "d2", 20),
                    StageChange::Delete {
                        table: "public.t".into(),
                        key: encode_key(&[&Value::Int(2)]).expect("key"),
                    },
                ],
            )])
            .expect("apply");
        assert_eq!(
            changed_ids(&stage, "d1"),
            (false, vec![(1, false), (2, false)])
        );
        assert_eq!(changed_ids(&stage, "d2"), (false, vec![(1, true)]));
        // A mark set after the read is not cleared, and neither are its keys.
        let read = stage.read_changes("public.t", &p("d2")).expect("read");
        stage
            .apply(&[txn(30, vec![upsert(3, "d2", 30)])])
            .expect("apply");
        assert!(
            !stage
                .clear_dirty("public.t", &p("d2"), read.dirty.expect("dirty"))
                .expect("clear")
        );
        assert_eq!(
            changed_ids(&stage, "d2"),
            (false, vec![(1, true), (3, true)])
        );
        // A TRUNCATE changes every key: the partitions are replaced whole.
        stage
            .apply(&[txn(
                40,
                vec![StageChange::Truncate {
                    table: "public.t".into(),
                }],
            )])
            .expect("apply");
        assert!(changed_ids(&stage, "d1").0);
        assert!(changed_ids(&stage, "d2").0);
    }

    #[test]
    fn a_larger_partition_reports_more_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        let mut changes: Vec<StageChange> = (0..2000).map(|i| upsert(i, "big", 10)).collect();
        changes.extend((5000..5010).map(|i| upsert(i, "small", 10)));
        stage.apply(&[txn(10, changes)]).expect("apply");
        stage.flush().expect("flush");
        let dirty = stage.dirty_partitions().expect("dirty");
        let bytes = stage.approximate_bytes(&dirty);
        let by_name: HashMap<String, u64> = dirty
            .iter()
            .map(|d| d.partition.to_string())
            .zip(bytes)
            .collect();
        assert!(by_name["big"] > by_name["small"], "{by_name:?}");
    }

    #[test]
    fn the_backlog_grows_with_staged_changes_and_clears_with_the_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        assert_eq!(stage.unwritten_bytes().expect("backlog"), 0);
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10), upsert(2, "d2", 10)])])
            .expect("apply");
        let first = stage.unwritten_bytes().expect("backlog");
        assert!(first > 0);
        stage
            .apply(&[txn(20, vec![upsert(1, "d1", 20)])])
            .expect("apply");
        assert!(stage.unwritten_bytes().expect("backlog") > first);
        // Applying the same transaction again is skipped: nothing added.
        let before = stage.unwritten_bytes().expect("backlog");
        stage
            .apply(&[txn(20, vec![upsert(1, "d1", 20)])])
            .expect("apply");
        assert_eq!(stage.unwritten_bytes().expect("backlog"), before);
        for d in stage.dirty_partitions().expect("dirty") {
            assert!(
                stage
                    .clear_dirty(&d.table, &d.partition, d.generation)
                    .expect("clear")
            );
        }
        assert_eq!(stage.unwritten_bytes().expect("backlog"), 0);
    }

    #[test]
    fn decode_key_inverts_encode_key() {
        let tuples = [
            vec![Value::Int(i64::MIN), Value::Text("a\0b".into())],
            vec![Value::Date(-3), Value::Timestamp(1_700_000_000_000_000)],
            vec![
                Value::Bool(true),
                Value::Decimal("-12.50".into()),
                Value::Text(String::new()),
            ],
        ];
        for tuple in tuples {
            let refs: Vec<&Value> = tuple.iter().collect();
            let bytes = encode_key(&refs).expect("encode");
            assert_eq!(decode_key(&bytes).expect("decode"), tuple);
        }
        assert!(decode_key(&[0x10, 1, 2]).is_err());
        assert!(decode_key(&[0x20, b'a', 0]).is_err());
        assert!(decode_key(&[0x7F]).is_err());
    }

    #[test]
    fn transactions_at_or_below_the_position_are_skipped_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[
                txn(10, vec![upsert(1, "d1", 10)]),
                txn(20, vec![upsert(2, "d1", 20)]),
            ])
            .expect("apply");
        let again = stage
            .apply(&[
                txn(20, vec![upsert(3, "d1", 20)]),
                txn(30, vec![upsert(4, "d1", 30)]),
            ])
            .expect("apply");
        assert_eq!(
            again,
            ApplyOutcome {
                transactions: 1,
                changes: 1,
                skipped: 1
            }
        );
        let ids: Vec<_> = stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows
            .iter()
            .map(|r| r.values[0].1.clone())
            .collect();
        assert_eq!(ids, [Value::Int(1), Value::Int(2), Value::Int(4)]);
        assert_eq!(
            stage.checkpoint().expect("position"),
            Some(Checkpoint {
                position: 30,
                cursor: 30
            })
        );
    }

    #[test]
    fn a_dirty_mark_set_after_the_read_survives_compare_and_clear() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
            .expect("apply");
        let read = stage.read_partition("public.t", &p("d1")).expect("read");
        stage
            .apply(&[txn(20, vec![upsert(2, "d1", 20)])])
            .expect("apply");
        assert!(
            !stage
                .clear_dirty("public.t", &p("d1"), read.dirty.expect("dirty"))
                .expect("clear")
        );
        assert_eq!(stage.dirty_partitions().expect("dirty").len(), 1);
    }

    #[test]
    fn a_stage_refuses_another_feed_and_a_newer_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(Stage::open(dir.path(), "feed-a").expect("open"));
        let err = Stage::open(dir.path(), "feed-b").expect_err("other feed");
        assert!(
            err.to_string().contains("was filled from `feed-a`"),
            "{err}"
        );
        let stage = Stage::open(dir.path(), "feed-a").expect("open");
        stage
            .put_meta(META_FORMAT_VERSION, &(FORMAT_VERSION + 1).to_be_bytes())
            .expect("write");
        drop(stage);
        let err = Stage::open(dir.path(), "feed-a").expect_err("newer format");
        assert!(matches!(err, StageError::NewerFormat { .. }), "{err}");
    }

    #[test]
    fn a_large_transaction_is_visible_only_when_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
            .expect("apply");
        stage
            .append_pending(&[upsert(2, "d1", 20), upsert(1, "d2", 20)])
            .expect("chunk");
        stage.append_pending(&[upsert(3, "d2", 20)]).expect("chunk");
        // Not committed: nothing of it is visible.
        assert_eq!(
            stage
                .read_partition("public.t", &p("d1"))
                .expect("read")
                .rows,
            [row(1, "d1", 10)]
        );
        assert!(
            stage
                .read_partition("public.t", &p("d2"))
                .expect("read")
                .rows
                .is_empty()
        );
        let outcome = stage
            .apply(&[
                txn(
                    20,
                    vec![StageChange::Delete {
                        table: "public.t".into(),
                        key: encode_key(&[&Value::Int(2)]).expect("key"),
                    }],
                ),
                txn(30, vec![upsert(4, "d1", 30)]),
            ])
            .expect("commit");
        assert_eq!(
            outcome,
            ApplyOutcome {
                transactions: 2,
                changes: 5,
                skipped: 0
            }
        );
        let ids = |part: &str| -> Vec<Value> {
            stage
                .read_partition("public.t", &p(part))
                .expect("read")
                .rows
                .iter()
                .map(|r| r.values[0].1.clone())
                .collect()
        };
        assert_eq!(ids("d1"), [Value::Int(4)]);
        assert_eq!(ids("d2"), [Value::Int(1), Value::Int(3)]);
        assert_eq!(
            stage.checkpoint().expect("position").map(|c| c.position),
            Some(30)
        );
        assert!(!stage.has_pending().expect("pending"));
    }

    #[test]
    fn an_uncommitted_large_transaction_leaves_nothing_after_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage.append_pending(&[upsert(1, "d1", 10)]).expect("chunk");
        drop(stage);
        let stage = Stage::open(dir.path(), "test").expect("reopen");
        assert!(!stage.has_pending().expect("pending"));
        assert!(stage.dirty_partitions().expect("dirty").is_empty());
        assert_eq!(stage.checkpoint().expect("position"), None);
        // The aborted chunks are not mistaken for the next transaction's.
        stage
            .apply(&[txn(20, vec![upsert(2, "d1", 20)])])
            .expect("apply");
        assert_eq!(
            stage
                .read_partition("public.t", &p("d1"))
                .expect("read")
                .rows,
            [row(2, "d1", 20)]
        );
    }

    #[test]
    fn a_crash_while_applying_a_large_transaction_is_finished_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .append_pending(&[upsert(1, "d1", 10), upsert(2, "d2", 10)])
            .expect("chunk");
        let marker = stage
            .mark_large(&txn(10, vec![upsert(3, "d1", 10)]))
            .expect("mark");
        assert!(matches!(
            stage.read_partition("public.t", &p("d1")),
            Err(StageError::Applying)
        ));
        drop(stage);
        let _ = marker;
        let stage = Stage::open(dir.path(), "test").expect("reopen finishes the commit");
        assert_eq!(
            stage
                .read_partition("public.t", &p("d1"))
                .expect("read")
                .rows
                .len(),
            2
        );
        assert_eq!(
            stage
                .read_partition("public.t", &p("d2"))
                .expect("read")
                .rows
                .len(),
            1
        );
        assert_eq!(
            stage.checkpoint().expect("position").map(|c| c.position),
            Some(10)
        );
        let dirty: Vec<_> = stage
            .dirty_partitions()
            .expect("dirty")
            .into_iter()
            .map(|d| (d.partition, d.generation))
            .collect();
        assert_eq!(
            dirty,
            [(p("d1"), marker.generation), (p("d2"), marker.generation)]
        );
    }

    #[test]
    fn key_encoding_preserves_order_and_is_prefix_free() {
        let ints =
            [i64::MIN, -5, 0, 7, i64::MAX].map(|i| encode_key(&[&Value::Int(i)]).expect("key"));
        assert!(ints.windows(2).all(|w| w[0] < w[1]));
        let a = encode_key(&[&Value::Text("a".into()), &Value::Text("bc".into())]).expect("key");
        let b = encode_key(&[&Value::Text("ab".into()), &Value::Text("c".into())]).expect("key");
        assert_ne!(a, b);
        let nul = encode_key(&[&Value::Text("a\0".into())]).expect("key");
        let plain = encode_key(&[&Value::Text("a".into())]).expect("key");
        assert!(plain < nul);
        assert!(encode_key(&[&Value::Null]).is_err());
    }
}
