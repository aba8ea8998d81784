//! One partition as of one RocksDB snapshot, read in bounded chunks: what a streamed
//! partition job reads (its rows, or the keys changed since its last write), and the
//! point reads it makes in the same snapshot (a rejected row's image, whether a key
//! changed), so no job holds a whole partition.

use rocksdb::{DB, DBRawIteratorWithThreadMode, ReadOptions};
use serde::de::DeserializeSeed;

use super::error::{StageError, corrupt, db_err};
use super::layout::{CF_CHANGED, CF_META, CF_ROWS, META_SOURCE_STATE, partition_key, row_key};
use super::{Stage, StagedRow};
use crate::feed::{Position, ValuesInOrder};
use crate::partition::Partition;
use crate::value::Value;

/// A chunk ends at this many rows or [`CHUNK_BYTES`], whichever comes first.
pub const CHUNK_ROWS: usize = crate::limits::JOB_CHUNK_ROWS;
/// A chunk ends once its rows hold about this many bytes in memory (by
/// [`StagedRow::approx_bytes`]). A single row larger than this is a chunk of its own.
pub const CHUNK_BYTES: usize = crate::limits::JOB_CHUNK_BYTES;

/// A partition as of one snapshot.
pub struct PartitionSnapshot<'s> {
    stage: &'s Stage,
    snapshot: rocksdb::Snapshot<'s>,
    table: String,
    partition: Partition,
    prefix: Vec<u8>,
    /// The generation of the partition's last change (0: never changed).
    pub generation: u64,
    /// The dirty generation (`None`: not dirty).
    pub dirty: Option<u64>,
    /// The stage's position.
    pub checkpoint: Position,
}

/// A chunk of changed keys: each key (encoded) with its row if it is in the partition
/// now (`None`: deleted or moved out), in key order.
pub type ChangedChunk = Vec<(Vec<u8>, Option<StagedRow>)>;

impl Stage {
    /// Takes a snapshot of one partition; fails while a large transaction is being
    /// applied (as [`Stage::read_partition`] does).
    pub fn snapshot_partition(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<PartitionSnapshot<'_>, StageError> {
        let prefix = partition_key(table, partition);
        self.note_read(&prefix);
        let snapshot = self.db.snapshot();
        let (generation, dirty, checkpoint) = self.partition_state(&snapshot, table, partition)?;
        Ok(PartitionSnapshot {
            stage: self,
            snapshot,
            table: table.to_owned(),
            partition: partition.clone(),
            prefix,
            generation,
            dirty,
            checkpoint,
        })
    }
}

impl Stage {
    /// Notes that a partition (`partition_key`) is read (see `Stage::read_partitions`).
    fn note_read(&self, partition_key: &[u8]) {
        let mut read = self
            .read_partitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(keys) = read.as_mut()
            && !keys.contains(partition_key)
        {
            if keys.len() >= super::READ_PARTITIONS_MAX {
                *read = None;
            } else {
                keys.insert(partition_key.to_vec());
            }
        }
    }

    /// Whether a partition (`partition_key`) may have been read since the stage opened.
    pub(super) fn was_read(&self, partition_key: &[u8]) -> bool {
        self.read_partitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_none_or(|keys| keys.contains(partition_key))
    }
}

impl<'s> PartitionSnapshot<'s> {
    /// The source's state (its snapshot progress, for a PostgreSQL source) as of this
    /// snapshot: whether the partition may be written at all is read with its rows.
    pub fn source_state(&self) -> Result<Option<Vec<u8>>, StageError> {
        self.snapshot
            .get_cf(self.stage.cf(CF_META), META_SOURCE_STATE)
            .map_err(db_err("read the source state"))
    }

    /// An iterator over the partition's keys in `cf`. A scan of a partition reads
    /// each block once: it does not fill the block cache, whose size would otherwise
    /// follow the largest partition read (and evict the blocks intake's lookups use).
    fn iter(&self, cf: &'static str) -> DBRawIteratorWithThreadMode<'_, DB> {
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&self.snapshot);
        opts.fill_cache(false);
        opts.set_iterate_range(rocksdb::PrefixRange(self.prefix.as_slice()));
        let mut it = self.stage.db.raw_iterator_cf_opt(self.stage.cf(cf), opts);
        it.seek(&self.prefix);
        it
    }

    fn decode(&self, bytes: &[u8]) -> Result<StagedRow, StageError> {
        postcard::from_bytes(bytes).map_err(|_| {
            corrupt(format!(
                "row in {} partition {}",
                self.table, self.partition
            ))
        })
    }

    /// The partition's rows in key order, in chunks of at most [`CHUNK_ROWS`] rows and
    /// about [`CHUNK_BYTES`].
    pub fn rows(&self) -> impl Iterator<Item = Result<Vec<StagedRow>, StageError>> + '_ {
        Chunks::new(self.iter(CF_ROWS), "read rows", |_, v| {
            let row = self.decode(v)?;
            let bytes = row.approx_bytes();
            Ok(Some((row, bytes)))
        })
    }

    /// The partition's rows in key order like [`Self::rows`], each read as its values
    /// only, in the order of `columns` (see [`ValuesInOrder`]): what the identity
    /// transform writes, without allocating a column name per row.
    pub fn values_in_order<'c>(
        &'c self,
        columns: &'c [String],
    ) -> impl Iterator<Item = Result<Vec<Vec<Value>>, StageError>> + 'c {
        Chunks::new(self.iter(CF_ROWS), "read rows", move |_, v| {
            self.decode_in_order(v, columns).map(Some)
        })
    }

    /// [`Self::values_in_order`] of the rows of the keys changed since the partition's
    /// last write that are in it now (a merge's rows).
    pub fn changed_values_in_order<'c>(
        &'c self,
        columns: &'c [String],
    ) -> impl Iterator<Item = Result<Vec<Vec<Value>>, StageError>> + 'c {
        Chunks::new(self.iter(CF_CHANGED), "read changed keys", move |k, _| {
            let key = &k[self.prefix.len()..];
            if key.is_empty() {
                return Ok(None); // the every-key record: see `whole_changed`
            }
            self.snapshot
                .get_pinned_cf(
                    self.stage.cf(CF_ROWS),
                    row_key(&self.table, &self.partition, key),
                )
                .map_err(db_err("read a row"))?
                .map(|v| self.decode_in_order(&v, columns))
                .transpose()
        })
    }

    /// A row's values in the order of `columns`, with the bytes they hold in memory.
    fn decode_in_order(
        &self,
        bytes: &[u8],
        columns: &[String],
    ) -> Result<(Vec<Value>, usize), StageError> {
        let mut de = postcard::Deserializer::from_bytes(bytes);
        let values = ValuesInOrder { columns }
            .deserialize(&mut de)
            .map_err(|_| {
                corrupt(format!(
                    "row in {} partition {}",
                    self.table, self.partition
                ))
            })?;
        let size = std::mem::size_of::<Vec<Value>>()
            + values
                .iter()
                .map(|v| std::mem::size_of::<Value>() + v.heap_bytes())
                .sum::<usize>();
        Ok((values, size))
    }

    /// The partition's rows counted, and their latest commit time, in one pass that
    /// reads each row's header only, not its values: a plugin's clock is that time
    /// (see the plugin sandbox), computed when the plugin first reads it.
    pub fn survey(&self) -> Result<Survey, StageError> {
        let mut it = self.iter(CF_ROWS);
        let mut survey = Survey::default();
        while let Some(v) = it.value() {
            // A staged row's image begins with its position and commit time.
            let ((_, time), _): ((u64, Option<i64>), _) =
                postcard::take_from_bytes(v).map_err(|_| {
                    corrupt(format!(
                        "row in {} partition {}",
                        self.table, self.partition
                    ))
                })?;
            survey.rows += 1;
            survey.max_commit_time = survey.max_commit_time.max(time);
            it.next();
        }
        it.status().map_err(db_err("read rows"))?;
        Ok(survey)
    }

    /// Whether fewer than half the partition's rows changed since its last write: then
    /// merging the changed keys is cheaper than replacing the partition. Reads the
    /// changed keys and the rows side by side and stops as soon as the answer is known,
    /// so deciding costs at most what changed, and a partition whose keys all changed
    /// (a first write) costs its rows and half its changed keys, not all of both.
    pub fn changed_minority(&self) -> Result<bool, StageError> {
        let mut changed = self.iter(CF_CHANGED);
        let mut rows = self.iter(CF_ROWS);
        let prefix = self.prefix.len();
        let minority = more_than_twice(
            std::iter::from_fn(|| {
                loop {
                    let real = changed.key()?.len() > prefix;
                    changed.next();
                    // The every-key record (an empty key) is not a changed key.
                    if real {
                        return Some(());
                    }
                }
            }),
            std::iter::from_fn(|| {
                let valid = rows.valid();
                rows.next();
                valid.then_some(())
            }),
        );
        changed.status().map_err(db_err("read changed keys"))?;
        rows.status().map_err(db_err("read rows"))?;
        Ok(minority)
    }

    /// Whether every key changed (the partition must be replaced, not merged): a
    /// TRUNCATE, or a dirty partition with no changed key recorded (marked by a stage
    /// from before the stage recorded them).
    pub fn whole_changed(&self) -> Result<bool, StageError> {
        let it = self.iter(CF_CHANGED);
        let first = it.key().map(|k| k.len() == self.prefix.len());
        it.status().map_err(db_err("read changed keys"))?;
        Ok(match first {
            Some(empty_key) => empty_key,
            None => self.dirty.is_some(),
        })
    }

    /// The keys changed since the partition's last write, in chunks like [`Self::rows`],
    /// each with its row if it is in the partition now (`None`: deleted or moved out).
    pub fn changed(&self) -> impl Iterator<Item = Result<ChangedChunk, StageError>> + '_ {
        Chunks::new(self.iter(CF_CHANGED), "read changed keys", |k, _| {
            let key = &k[self.prefix.len()..];
            if key.is_empty() {
                return Ok(None); // the every-key record: see `whole_changed`
            }
            let row = self.row(key)?;
            let bytes = key.len() + row.as_ref().map_or(0, StagedRow::approx_bytes);
            Ok(Some(((key.to_vec(), row), bytes)))
        })
    }

    /// The keys changed since the partition's last write (encoded), without their rows,
    /// in chunks of at most [`CHUNK_ROWS`].
    pub fn changed_keys(&self) -> impl Iterator<Item = Result<Vec<Vec<u8>>, StageError>> + '_ {
        Chunks::new(self.iter(CF_CHANGED), "read changed keys", |k, _| {
            let key = &k[self.prefix.len()..];
            Ok((!key.is_empty()).then(|| (key.to_vec(), key.len())))
        })
    }

    /// The row of `key` (encoded) in this partition, if there is one.
    pub fn row(&self, key: &[u8]) -> Result<Option<StagedRow>, StageError> {
        self.snapshot
            .get_cf(
                self.stage.cf(CF_ROWS),
                row_key(&self.table, &self.partition, key),
            )
            .map_err(db_err("read a row"))?
            .map(|v| self.decode(&v))
            .transpose()
    }

    /// Whether `key` (encoded) changed since the partition's last write.
    pub fn is_changed(&self, key: &[u8]) -> Result<bool, StageError> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(key);
        Ok(self
            .snapshot
            .get_cf(self.stage.cf(CF_CHANGED), k)
            .map_err(db_err("read changed keys"))?
            .is_some())
    }
}

impl std::fmt::Debug for PartitionSnapshot<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionSnapshot")
            .field("table", &self.table)
            .field("partition", &self.partition)
            .field("generation", &self.generation)
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

/// Chunks of what a snapshot iterator yields, each entry made by `make` (which may
/// skip one: `None`), cut at [`CHUNK_ROWS`] entries or about [`CHUNK_BYTES`] (the
/// sizes `make` gives); the first error ends it.
struct Chunks<'a, T, F> {
    it: DBRawIteratorWithThreadMode<'a, DB>,
    what: &'static str,
    make: F,
    done: bool,
    _entry: std::marker::PhantomData<T>,
}

impl<'a, T, F> Chunks<'a, T, F>
where
    F: FnMut(&[u8], &[u8]) -> Result<Option<(T, usize)>, StageError>,
{
    fn new(it: DBRawIteratorWithThreadMode<'a, DB>, what: &'static str, make: F) -> Self {
        Chunks {
            it,
            what,
            make,
            done: false,
            _entry: std::marker::PhantomData,
        }
    }
}

impl<T, F> Iterator for Chunks<'_, T, F>
where
    F: FnMut(&[u8], &[u8]) -> Result<Option<(T, usize)>, StageError>,
{
    type Item = Result<Vec<T>, StageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        // Begun at a size that spares most of the copies of growing it, without a
        // whole chunk's worth for a partition of a few rows.
        let mut chunk = Vec::with_capacity(CHUNK_ROWS.min(256));
        let mut bytes = 0;
        while chunk.len() < CHUNK_ROWS && bytes < CHUNK_BYTES {
            let Some((k, v)) = self.it.item() else { break };
            match (self.make)(k, v) {
                Ok(Some((entry, size))) => {
                    bytes += size;
                    chunk.push(entry);
                }
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
            self.it.next();
        }
        if let Err(e) = self.it.status() {
            self.done = true;
            return Some(Err(db_err(self.what)(e)));
        }
        if chunk.is_empty() {
            self.done = true;
            return None;
        }
        Some(Ok(chunk))
    }
}

/// A partition's rows counted in one pass ([`PartitionSnapshot::survey`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Survey {
    pub rows: u64,
    /// The latest commit time of its rows (`None`: no row has one).
    pub max_commit_time: Option<i64>,
}

/// Whether `rows` yields more than twice as many items as `changed`, reading each only
/// as far as that takes: after the `c`-th changed key, the `2c + 1`-th row.
fn more_than_twice(mut changed: impl Iterator, mut rows: impl Iterator) -> bool {
    let mut need = 1usize;
    let mut read = 0usize;
    loop {
        while read < need {
            if rows.next().is_none() {
                return false;
            }
            read += 1;
        }
        if changed.next().is_none() {
            return true;
        }
        need = need.saturating_add(2);
    }
}

#[cfg(test)]
mod tests {
    use super::more_than_twice;

    #[test]
    fn more_than_twice_reads_only_what_it_needs() {
        for c in 0..12usize {
            for r in 0..30usize {
                let (mut read_c, mut read_r) = (0, 0);
                let got = more_than_twice(
                    (0..c).inspect(|_| read_c += 1),
                    (0..r).inspect(|_| read_r += 1),
                );
                assert_eq!(got, r > 2 * c, "{c} changed, {r} rows");
                assert!(
                    read_r <= r.min(2 * c + 1),
                    "{c} changed, {r} rows: read {read_r} rows"
                );
                assert!(
                    read_c <= c.min(r.div_ceil(2)),
                    "{c} changed, {r} rows: read {read_c} changed"
                );
            }
        }
    }
}
