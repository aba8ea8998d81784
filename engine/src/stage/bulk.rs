//! Bulk staging of a first load: a part's rows and keys-index entries are sorted,
//! written as table files and ingested into `rows` and `keys`, rather than written
//! through the write-ahead log and the memtables, flushed, then compacted.
//!
//! A key the source enforces unique, read once from one snapshot, is new to the stage
//! ([`super::Stage::apply_load`]'s `new_keys`), so each part is a set of new entries:
//! exactly what RocksDB can take as a table file. A file whose keys no other file
//! covers (ranges of pages of a table laid out in key or partition order) goes to the
//! bottom of the tree and is never rewritten. Preparing a part (encoding, sorting,
//! writing its files: [`Stage::prepare_load`]) takes no lock, so the load's workers do
//! it on their own threads while another part is staged.
//!
//! Two ingestions and the part's own batch (its dirty marks, generations, backlog,
//! position and progress) are three steps, so a part commits under a marker: `meta`'s
//! `loading` record holds the files' names and the batch, synced before the first
//! ingestion, and the batch deletes it. Keys are ingested before rows, so a crash
//! between them leaves no row the keys index does not name. A stage opened for
//! writing that finds the marker, and every staging write after an error left one
//! (before its own generation and position), rolls the part forward: it ingests the files still
//! in `load/` (an ingestion moves its file in; one still there was not ingested, or
//! was just before a crash, and ingesting it again writes the same entries again),
//! then writes the batch. `weir checkpoint check` reports the marker as a part being
//! ingested and does not count its half-written state as damage.

use std::path::{Path, PathBuf};

use rocksdb::{IngestExternalFileOptions, Options, SstFileWriter, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};

use std::collections::HashMap;

use super::error::{StageError, corrupt, db_err};
use super::layout::{CF_KEYS, CF_META, CF_ROWS, META_LOADING, push_row_key, push_table};
use super::{Stage, StageChange};
use crate::partition::Partition;

/// The folder of the stage the table files of a part are written into before they are
/// ingested; emptied when the stage opens for writing.
const LOAD_DIR: &str = "load";

/// Entries to write as one sorted table file: keys and values in one buffer.
#[derive(Debug, Default)]
pub(super) struct Run {
    bytes: Vec<u8>,
    /// Each entry's start in `bytes`, key length and value length.
    entries: Vec<(usize, u32, u32)>,
}

impl Run {
    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        // A stage key or value is far below 4 GiB (a row is bounded by the source's
        // field limits); saturating keeps the arithmetic total.
        let len = |b: &[u8]| u32::try_from(b.len()).unwrap_or(u32::MAX);
        self.entries.push((start, len(key), len(value)));
    }

    fn key(bytes: &[u8], (start, key, _): (usize, u32, u32)) -> &[u8] {
        &bytes[start..start + key as usize]
    }

    fn value(bytes: &[u8], (start, key, value): (usize, u32, u32)) -> &[u8] {
        let from = start + key as usize;
        &bytes[from..from + value as usize]
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the entries in key order to a table file at `path`; of entries with one
    /// key, the last pushed (as a write batch would leave it).
    fn write(&mut self, path: &Path, opts: &Options) -> Result<(), StageError> {
        let bytes = &self.bytes;
        // Stable: entries with one key stay in the order they were pushed.
        self.entries
            .sort_by(|a, b| Self::key(bytes, *a).cmp(Self::key(bytes, *b)));
        let mut writer = SstFileWriter::create(opts);
        writer
            .open(path)
            .map_err(db_err("create a first-load table file"))?;
        let mut entries = self.entries.iter().peekable();
        while let Some(&entry) = entries.next() {
            let key = Self::key(bytes, entry);
            if entries
                .peek()
                .is_some_and(|next| Self::key(bytes, **next) == key)
            {
                continue;
            }
            writer
                .put(key, Self::value(bytes, entry))
                .map_err(db_err("write a first-load table file"))?;
        }
        writer
            .finish()
            .map_err(db_err("finish a first-load table file"))
    }
}

/// A first-load part made ready off the stage's write path ([`Stage::prepare_load`]):
/// its table files written, and the bytes it stages into each partition.
#[derive(Debug)]
pub struct PreparedLoad {
    keys: String,
    rows: String,
    /// Bytes staged into each partition, by table.
    partitions: Vec<(String, Partition, u64)>,
}

impl PreparedLoad {
    /// The partitions the part stages into, with its bytes in each.
    pub(super) fn partitions(&self) -> &[(String, Partition, u64)] {
        &self.partitions
    }
}

/// Where a test stops a part, as a crash would (`Whole`: it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(super) enum Cut {
    Whole,
    /// The table files are written; the marker is not.
    BeforeMarker,
    /// The marker is written; nothing is ingested.
    BeforeIngestion,
    /// The keys are ingested; the rows are not.
    BetweenIngestions,
}

/// The marker a part commits under: its table files (names in [`LOAD_DIR`]) and its
/// batch, as [`WriteBatch::data`].
#[derive(Debug, Serialize, Deserialize)]
struct LoadMarker {
    keys: Option<String>,
    rows: Option<String>,
    batch: Vec<u8>,
}

impl Stage {
    fn load_dir(&self) -> PathBuf {
        self.path.join(LOAD_DIR)
    }

    /// Prepares upserts of a first load whose keys are new to the stage (see
    /// [`Stage::apply_load`]'s `new_keys`) for [`Stage::apply_prepared_load`]: encodes
    /// them, sorts them and writes them as table files in `load/`. It takes no lock and
    /// reads nothing of the stage, so the load's workers prepare their parts while
    /// another part is staged. `None` if `changes` holds anything but upserts, or
    /// nothing.
    pub fn prepare_load(
        &self,
        changes: &[StageChange],
    ) -> Result<Option<PreparedLoad>, StageError> {
        self.prepare_upserts(changes.iter())
    }

    /// [`Self::prepare_load`] of the changes `changes` yields.
    pub(super) fn prepare_upserts<'a>(
        &self,
        changes: impl Iterator<Item = &'a StageChange>,
    ) -> Result<Option<PreparedLoad>, StageError> {
        let (mut rows, mut keys) = (Run::default(), Run::default());
        let mut partitions: HashMap<(&str, &Partition), u64, foldhash::fast::RandomState> =
            HashMap::default();
        let (mut row_key, mut table_key, mut part) = (Vec::new(), Vec::new(), Vec::new());
        let mut value = Vec::new();
        for change in changes {
            let StageChange::Upsert {
                table,
                key,
                partition,
                row,
            } = change
            else {
                return Ok(None);
            };
            value.clear();
            value = postcard::to_extend(row, value)
                .map_err(|e| corrupt(format!("cannot encode row: {e}")))?;
            push_row_key(&mut row_key, table, partition, key);
            table_key.clear();
            push_table(&mut table_key, table);
            table_key.extend_from_slice(key);
            part.clear();
            partition.push_bytes(&mut part);
            rows.push(&row_key, &value);
            keys.push(&table_key, &part);
            *partitions.entry((table, partition)).or_default() += value.len() as u64;
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let dir = self.load_dir();
        // Workers prepare at once: the folder may appear between the test and the call.
        if !dir.exists() {
            match crate::private::create_dir(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(StageError::LoadFile {
                        path: dir.clone(),
                        source: e,
                    });
                }
                _ => {}
            }
        }
        let opts = super::open::table_file_options();
        let number = self
            .load_files
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = |run: &mut Run, family: &str| -> Result<String, StageError> {
            let name = format!("{family}-{number}.sst");
            run.write(&dir.join(&name), &opts)?;
            Ok(name)
        };
        Ok(Some(PreparedLoad {
            keys: file(&mut keys, CF_KEYS)?,
            rows: file(&mut rows, CF_ROWS)?,
            partitions: partitions
                .into_iter()
                .map(|((table, partition), bytes)| (table.to_owned(), partition.clone(), bytes))
                .collect(),
        }))
    }

    /// Stages a prepared part: its files ingested, then `batch` written (synced if
    /// `sync`; the ingested files are durable in any case), under the marker described
    /// in the module's documentation. Called under the stage's write lock.
    pub(super) fn ingest_load(
        &self,
        part: PreparedLoad,
        batch: WriteBatch,
        sync: bool,
        cut: Cut,
    ) -> Result<(), StageError> {
        let marker = LoadMarker {
            keys: Some(part.keys),
            rows: Some(part.rows),
            batch: batch.data().to_vec(),
        };
        if cut == Cut::BeforeMarker {
            return Ok(());
        }
        let encoded = postcard::to_allocvec(&marker)
            .map_err(|e| corrupt(format!("cannot encode the first-load marker: {e}")))?;
        self.put_meta(META_LOADING, &encoded)?;
        if cut == Cut::BeforeIngestion {
            return Ok(());
        }
        self.ingest_marked(&marker, cut)?;
        if cut == Cut::BetweenIngestions {
            return Ok(());
        }
        self.commit_marked(batch, sync)
    }

    /// Ingests the marked files still in [`LOAD_DIR`]: keys, then rows.
    fn ingest_marked(&self, marker: &LoadMarker, cut: Cut) -> Result<(), StageError> {
        let mut opts = IngestExternalFileOptions::default();
        opts.set_move_files(true);
        for (family, name) in [(CF_KEYS, &marker.keys), (CF_ROWS, &marker.rows)] {
            let Some(name) = name else { continue };
            let path = self.load_dir().join(name);
            if !path.exists() {
                continue;
            }
            self.db
                .ingest_external_file_cf_opts(self.cf(family), &opts, vec![&path])
                .map_err(db_err("ingest a first-load table file"))?;
            // Moved in: RocksDB links the file and removes this name, but a failed
            // removal must not make a later recovery ingest it again.
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(StageError::LoadFile { path, source }),
            }
            if family == CF_KEYS {
                // Between the two ingestions: the part's keys are in, its rows not.
                crate::failpoint!("load-ingest");
                if cut == Cut::BetweenIngestions {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Writes a marked part's batch, which deletes the marker.
    fn commit_marked(&self, mut batch: WriteBatch, sync: bool) -> Result<(), StageError> {
        batch.delete_cf(self.cf(CF_META), META_LOADING);
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db
            .write_opt(batch, &opts)
            .map_err(db_err("stage a first-load part"))
    }

    /// Finishes a part a crash or an error left marked, if there is one. Every
    /// staging write calls it first (under the write lock), so that nothing is staged
    /// after a marked part (its generation and position) before the part itself.
    pub(super) fn roll_forward_load(&self) -> Result<(), StageError> {
        let Some(bytes) = self.meta(META_LOADING)? else {
            return Ok(());
        };
        let marker: LoadMarker =
            postcard::from_bytes(&bytes).map_err(|_| corrupt("first-load marker"))?;
        tracing::info!("finishing a first-load part interrupted by a crash or an error");
        self.ingest_marked(&marker, Cut::Whole)?;
        self.commit_marked(WriteBatch::from_data(&marker.batch), true)
    }

    /// At a writable open: finishes a marked part, then removes what is left in
    /// [`LOAD_DIR`] (files of a part that crashed before its marker was written).
    pub(super) fn recover_load(&self) -> Result<(), StageError> {
        self.roll_forward_load()?;
        let dir = self.load_dir();
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StageError::LoadFile { path: dir, source }),
        }
    }
}
