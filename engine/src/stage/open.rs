//! Opening the stage: RocksDB's options and memory budget, the format check, and the
//! raw access to column families and `meta` records the other parts share.

use std::path::Path;
use std::sync::Mutex;

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, Options, WriteOptions};

use super::Stage;
use super::error::{StageError, corrupt, db_err, open_hint};
use super::layout::{
    CF_KEYS, CF_META, CF_ROWS, COLUMN_FAMILIES, FORMAT_VERSION, META_FORMAT_VERSION,
    META_POSITION_COVERS_ACKS, META_SOURCE_ID, META_STAGE_ID,
};

/// Memory budget of all memtables together. With the block cache this bounds what
/// RocksDB holds in memory, whatever the size of a transaction or of the stage.
const MEMTABLES_BYTES_MAX: usize = 128 << 20;
/// One column family's memtable before it is flushed to an SST file.
const MEMTABLE_BYTES: usize = 32 << 20;
/// At most this much of the write-ahead log is kept (see `db_options`).
const WAL_BYTES_MAX: u64 = 128 << 20;
/// How old a table file at the bottom of its family must be before RocksDB rewrites
/// it only to clear its sequence numbers and the versions that released snapshots kept
/// (RocksDB's "BottommostFiles" compactions). Without a delay, every file a flush writes
/// into a key range nothing older covers (all of a new stage's, most of a first load's)
/// is written twice at once: the rewrite of the rows and keys of a `run --once`'s
/// 200,000 orders (24 MB) competed with its partition writes for the CPU. Waiting costs only the space those versions
/// hold meanwhile, and a file merged by an ordinary compaction first is never rewritten
/// alone.
const BOTTOMMOST_REWRITE_DELAY_S: u32 = 3600;
/// The share of the `keys` family's memtable given to its bloom filter (of whole keys).
const MEMTABLE_BLOOM_RATIO: f64 = 0.02;
/// Block cache shared by all column families (data, index and filter blocks).
const BLOCK_CACHE_BYTES: usize = 64 << 20;
/// A write at least this large is flushed out of the memtables at once (see
/// [`Stage::after_write_of`]).
const LARGE_WRITE_BYTES: usize = MEMTABLES_BYTES_MAX / 4;
/// What RocksDB may hold in memory for one open stage: memtables plus block cache.
pub const MEMORY_BUDGET_BYTES: usize = MEMTABLES_BYTES_MAX + BLOCK_CACHE_BYTES;
// The memory budget (`Config::memory_budget`) counts the stage at this figure.
const _: () = assert!(MEMORY_BUDGET_BYTES == crate::limits::STAGE_MEMORY_BYTES);

/// The stage's table files RocksDB keeps open at once.
const STAGE_OPEN_FILES_MAX: i32 = 512;

/// Options of the database and of every column family. The workload is point reads
/// and writes on `keys` (bloom filters), prefix scans of one partition on `rows`, and
/// synced group commits; level compaction with dynamic level sizes keeps space
/// amplification low for a table that is mostly updated in place.
fn db_options(cache: &Cache, memtables: &rocksdb::WriteBufferManager) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    opts.set_paranoid_checks(true);
    // Every write the source is acknowledged for is synced first, so only the tail
    // record of an unacknowledged write can be torn by a crash: tolerate exactly that,
    // and fail loudly on corruption anywhere else.
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
    // LZ4 below level 0 only: a flush writes a memtable out as it is (level 0 lives
    // until the next compaction, which compresses it), so neither the flushes of a long
    // intake nor a clean stop's flush spend CPU compressing what is rewritten soon.
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    opts.set_compression_per_level(&[
        rocksdb::DBCompressionType::None,
        rocksdb::DBCompressionType::Lz4,
        rocksdb::DBCompressionType::Lz4,
        rocksdb::DBCompressionType::Lz4,
        rocksdb::DBCompressionType::Lz4,
        rocksdb::DBCompressionType::Lz4,
        rocksdb::DBCompressionType::Lz4,
    ]);
    // One manager for every family, which stalls writes while the memtables (active
    // and waiting to be flushed) hold more than the budget: without the stall, a fast
    // intake piled up flushing memtables far past it.
    opts.set_write_buffer_manager(memtables);
    opts.set_write_buffer_size(MEMTABLE_BYTES);
    // The log files are kept until every family holding writes in them is flushed: a
    // family written rarely (the position's, the dead letters') held them all, and a
    // live run's stage grew by its whole write volume until a restart. Past this size
    // RocksDB flushes the families holding the oldest log.
    opts.set_max_total_wal_size(WAL_BYTES_MAX);
    opts.set_max_background_jobs(2);
    // RocksDB's own log (`LOG`, flush and compaction notes) is rolled at 4 MiB and a
    // few old ones kept: by default it grew for as long as a run ran, and each start
    // left another, a thousand kept.
    opts.set_max_log_file_size(4 << 20);
    opts.set_keep_log_file_num(4);
    // Table files kept open at most (the least used closed past it): a first load
    // ingests files per table and range, so a stage of many small tables held two
    // files a table open, past a common open-files limit of 1,024.
    opts.set_max_open_files(STAGE_OPEN_FILES_MAX);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_bytes_per_sync(1 << 20);
    let mut table = table_format();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    // The top levels of the index and filter stay in the cache, and the partitions of
    // both go to its high-priority pool, ahead of data blocks.
    table.set_pin_top_level_index_and_filter(true);
    table.set_cache_index_and_filter_blocks_with_high_priority(true);
    opts.set_block_based_table_factory(&table);
    opts
}

/// The format of the stage's table files: blocks with a bloom filter (`keys` is read
/// by point lookups), the filter and the index partitioned in blocks of
/// [`METADATA_BLOCK_BYTES`] under a small top level. A file's whole filter (10 bits a
/// key: 2.5 MB for a 60 MB file of `keys`) would not fit one shard of the block cache,
/// which drops an entry larger than its shard at once: every lookup then read the
/// whole filter from the file again (a 2,000,000-row stage's updates ran at a few
/// thousand a second). A partition of it is read, and kept, as a data block is.
fn table_format() -> BlockBasedOptions {
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_partition_filters(true);
    table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_metadata_block_size(METADATA_BLOCK_BYTES);
    table
}

/// The size of a partition of a table file's filter or index.
const METADATA_BLOCK_BYTES: usize = 4096;

/// The block cache: few shards, so that each holds the largest block of a file
/// written before filters were partitioned (a whole filter of a few MB).
fn block_cache() -> Cache {
    let mut opts = rocksdb::LruCacheOptions::default();
    opts.set_capacity(BLOCK_CACHE_BYTES);
    opts.set_num_shard_bits(BLOCK_CACHE_SHARD_BITS);
    Cache::new_lru_cache_opts(&opts)
}

/// 4 shards of 16 MiB: the stage's reads come from a few threads.
const BLOCK_CACHE_SHARD_BITS: i32 = 2;

/// Options of the table files a first load writes to ingest (`bulk.rs`): the format
/// compactions write, compressed as the levels below the first are (an ingested file
/// usually goes to the bottom level).
pub(super) fn table_file_options() -> Options {
    let mut opts = Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    let mut table = table_format();
    table.disable_cache();
    opts.set_block_based_table_factory(&table);
    opts
}

fn cf_descriptors(
    cache: &Cache,
    memtables: &rocksdb::WriteBufferManager,
) -> Vec<ColumnFamilyDescriptor> {
    COLUMN_FAMILIES
        .iter()
        .map(|name| {
            let mut opts = db_options(cache, memtables);
            if *name == CF_KEYS {
                // Every upsert looks its key up here, and most keys of an insert-heavy
                // feed are new: a bloom filter over the memtable answers those without
                // searching its skip list (that search was most of intake's reads).
                opts.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
                opts.set_memtable_whole_key_filtering(true);
            }
            ColumnFamilyDescriptor::new(*name, opts)
        })
        .collect()
}

/// The memtables' manager of one open stage (see [`MEMTABLES_BYTES_MAX`]).
fn memtables() -> rocksdb::WriteBufferManager {
    rocksdb::WriteBufferManager::new_write_buffer_manager(MEMTABLES_BYTES_MAX, true)
}

/// RocksDB's C++ allocates with glibc's `malloc` (Weir's Rust code uses jemalloc). By
/// default glibc gives each thread that allocates an arena of its own, and serves the
/// memtables' multi-MiB blocks from them once a first block was freed (its mmap
/// threshold rises): what flushes and compactions free stays resident, and a long
/// intake's resident memory grew with the data staged (1,000,000 rows: 404 MiB, against
/// 331 MiB with this; BENCHMARKS.md). One arena, blocks of 256 KiB and more mapped and
/// unmapped, the heap trimmed past 256 KiB free: RocksDB's memory is what it holds.
/// Process-wide, set once, before the first stage opens.
fn tune_glibc_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `mallopt` only sets parameters of glibc's allocator, under its own
            // lock; no memory is touched and every value is in its documented range.
            #[allow(unsafe_code)]
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 1);
                libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 10);
            }
        });
    }
}

/// A new stage's identity: 16 hex digits of a hash of its folder, the time and the
/// process, different for every stage made (one made again in the same folder too).
fn new_stage_id(path: &Path) -> String {
    use sha2::Digest as _;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest = sha2::Sha256::digest(
        format!("{}\0{nanos}\0{}", path.display(), std::process::id()).as_bytes(),
    );
    hex::encode(&digest[..8])
}

impl Stage {
    /// Opens (creating if missing) the stage for the feed `source_id`.
    pub fn open(path: &Path, source_id: &str) -> Result<Stage, StageError> {
        tune_glibc_malloc();
        // A new stage folder is private (`0700`): it holds row data.
        if !path.exists() {
            crate::private::create_dir(path).map_err(|source| StageError::Create {
                path: path.to_owned(),
                source,
            })?;
        }
        let cache = block_cache();
        let memtables = memtables();
        let db = DB::open_cf_descriptors(
            &db_options(&cache, &memtables),
            path,
            cf_descriptors(&cache, &memtables),
        )
        .map_err(|source| StageError::Open {
            path: path.to_owned(),
            hint: open_hint(
                &source,
                "is another `weir run` using it? Only one process may write a stage",
            ),
            source,
        })?;
        let stage = Stage::from_db(db, path);
        stage.delay_bottommost_rewrites()?;
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
        if stage.meta(META_STAGE_ID)?.is_none() {
            stage.put_meta(META_STAGE_ID, new_stage_id(path).as_bytes())?;
        }
        stage.recover_load()?;
        stage.recover_pending()?;
        Ok(stage)
    }

    /// Lets a table file at the bottom of `rows` or `keys` wait
    /// [`BOTTOMMOST_REWRITE_DELAY_S`] before RocksDB rewrites it only to clear its
    /// sequence numbers and what released snapshots no longer need. (Not `changed`:
    /// the tombstones of cleared records go as soon as they can, see
    /// `Stage::compact_cleared`.)
    fn delay_bottommost_rewrites(&self) -> Result<(), StageError> {
        let delay = BOTTOMMOST_REWRITE_DELAY_S.to_string();
        for name in [CF_ROWS, CF_KEYS] {
            self.db
                .set_options_cf(
                    self.cf(name),
                    &[("bottommost_file_compaction_delay", delay.as_str())],
                )
                .map_err(db_err("set the stage's compaction options"))?;
        }
        Ok(())
    }

    /// Opens an existing stage read-only; works while another process writes it (it
    /// sees the state as of opening).
    pub fn open_read_only(path: &Path) -> Result<Stage, StageError> {
        if !super::error::stage_exists(path)? {
            return Err(StageError::Missing {
                path: path.to_owned(),
            });
        }
        // A read-only open cannot add the families a newer build added; a writable
        // open (`init`, `run`) does.
        let existing =
            DB::list_cf(&Options::default(), path).map_err(|source| StageError::Open {
                path: path.to_owned(),
                hint: open_hint(&source, "is it a weir stage?"),
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
        tune_glibc_malloc();
        let mut attempt = 0u64;
        loop {
            let cache = block_cache();
            let opened = DB::open_cf_descriptors_read_only(
                &db_options(&cache, &memtables()),
                path,
                cf_descriptors(&cache, &memtables()),
                false,
            )
            .map_err(|source| StageError::Open {
                path: path.to_owned(),
                hint: open_hint(&source, "is it a weir stage?"),
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
            stream_seq: std::sync::atomic::AtomicU64::new(0),
            cleared_changed: Mutex::default(),
            read_partitions: Mutex::new(Some(std::collections::HashSet::new())),
            load_files: std::sync::atomic::AtomicU64::new(0),
            guarded_keys: std::sync::RwLock::new(Vec::new()),
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
                if writable && found < FORMAT_VERSION {
                    // 1 → 2: the layout is the same; from now on the stage may hold
                    // what a build of version 1 must not run on.
                    tracing::info!(stage = %self.path.display(), from = found, to = FORMAT_VERSION, "stage format upgraded: builds of an older format refuse it from now on");
                    self.put_meta(META_FORMAT_VERSION, &FORMAT_VERSION.to_be_bytes())?;
                }
                Ok(())
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// After a write of `bytes`: one of at least [`LARGE_WRITE_BYTES`] (a row of
    /// hundreds of MB) has its memtables flushed at once. Left in them, it holds the
    /// memtables over their budget, and the manager stalls the next write until a flush
    /// frees memory, while it flushes only the family with the oldest memtable, which
    /// need not be the one holding the write: intake then waited for good.
    pub(super) fn after_write_of(&self, bytes: usize) -> Result<(), StageError> {
        if bytes < LARGE_WRITE_BYTES {
            return Ok(());
        }
        let families: Vec<&rocksdb::ColumnFamily> =
            COLUMN_FAMILIES.iter().map(|name| self.cf(name)).collect();
        tracing::debug!(bytes, "a large write: the memtables are flushed");
        self.db
            .flush_cfs_opt(&families, &rocksdb::FlushOptions::default())
            .map_err(db_err("flush the memtables after a large write"))
    }

    pub(super) fn cf(&self, name: &'static str) -> &rocksdb::ColumnFamily {
        // Every family in COLUMN_FAMILIES is created at open.
        #[allow(clippy::expect_used)]
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    pub(super) fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StageError> {
        self.db
            .get_cf(self.cf(CF_META), key)
            .map_err(db_err("read meta"))
    }

    pub(super) fn put_meta(&self, key: &[u8], value: &[u8]) -> Result<(), StageError> {
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db
            .put_cf_opt(self.cf(CF_META), key, value, &opts)
            .map_err(db_err("write meta"))
    }

    /// Flushes every column family's memtable to SST files, so the stage's state is
    /// in its table files and the write-ahead log can be dropped.
    /// One request for all of them, so their flushes run at once on RocksDB's flush
    /// threads rather than one after another.
    pub fn flush(&self) -> Result<(), StageError> {
        let families: Vec<_> = COLUMN_FAMILIES.iter().map(|name| self.cf(name)).collect();
        self.db
            .flush_cfs_opt(&families, &rocksdb::FlushOptions::default())
            .map_err(db_err("flush the stage"))
    }
}
