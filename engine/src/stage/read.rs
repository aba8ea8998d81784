//! What the writer reads from the stage (dirty partitions, a partition's rows or
//! changed keys from one snapshot, dead letters, sizes), and the compare-and-clear of
//! what it wrote.

use std::collections::BTreeMap;

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch};

use super::error::{StageError, corrupt, db_err};
use super::layout::{
    CF_BACKLOG, CF_CHANGED, CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META,
    CF_POSITION, CF_ROWS, META_APPLYING, META_WRITTEN_PREFIX, POSITION_KEY, decode_generation,
    partition_key, prefix_end, push_table, row_key, split_partition, split_table, table_key,
};
use super::{DirtyPartition, PartitionChanges, PartitionRows, Stage, StagedRow};

/// Past this many changed keys, clearing a partition's dirty mark deletes them with one
/// range tombstone instead of one delete each.
pub(super) const CLEAR_POINT_DELETES_MAX: usize = 4096;
/// Changed-key records cleared one by one (from partitions written again) before
/// `changed` is compacted over their range (see `Stage::compact_cleared`). Each job
/// scans its partition's records several times (deciding merge or replace, then
/// reading them, then clearing them), stepping over every tombstone there: at 4,096,
/// a live run at 1,000 changes/s over 30 partitions spent a fifth of its CPU stepping
/// over them, at 1,024 under a tenth, while the compactions cost under 1%.
pub(super) const COMPACT_CHANGED_AFTER: u64 = 1_024;
/// Partitions remembered as cleared before (see `Stage::note_cleared`).
const CLEARED_PARTITIONS_MAX: usize = 4_096;
use crate::feed::{BadRecord, Position};
use crate::partition::Partition;

impl Stage {
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
    pub(super) fn partition_state(
        &self,
        snapshot: &rocksdb::Snapshot<'_>,
        table: &str,
        partition: &Partition,
    ) -> Result<(u64, Option<u64>, Position), StageError> {
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
    /// snapshot, so staging that continues meanwhile cannot tear the read. Holds the
    /// whole partition: for tests and checks; jobs read [`Stage::snapshot_partition`]
    /// in chunks.
    pub fn read_partition(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<PartitionRows, StageError> {
        let snap = self.snapshot_partition(table, partition)?;
        let mut rows = Vec::new();
        for chunk in snap.rows() {
            rows.extend(chunk?);
        }
        Ok(PartitionRows {
            generation: snap.generation,
            dirty: snap.dirty,
            checkpoint: snap.checkpoint,
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
        let snap = self.snapshot_partition(table, partition)?;
        let mut keys = Vec::new();
        for chunk in snap.changed() {
            keys.extend(chunk?);
        }
        Ok(PartitionChanges {
            generation: snap.generation,
            dirty: snap.dirty,
            checkpoint: snap.checkpoint,
            whole: snap.whole_changed()?,
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

    /// The generation a partition was last written at (recorded by
    /// [`Self::clear_dirty`]); `None` for none recorded (a stage of an older build, or
    /// one restored from a checkpoint).
    pub fn last_written(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<Option<u64>, StageError> {
        let mut key = META_WRITTEN_PREFIX.to_vec();
        key.extend_from_slice(&partition_key(table, partition));
        Ok(self
            .db
            .get_cf(self.cf(CF_META), &key)
            .map_err(db_err("read the last written generation"))?
            .as_deref()
            .and_then(|g| decode_generation(g).ok()))
    }

    /// Clears the dirty mark of a partition only if it still holds `generation`, the
    /// one the job read, and records `generation` as the partition's last written one.
    /// Returns whether it cleared.
    ///
    /// A mark that moved on (the partition changed while it was written) stays, and so
    /// do the records of the keys changed since; the records of the keys the write
    /// covered (changed at `generation` or before, and not since) are cleared, so the
    /// next write of a partition that keeps changing merges only what changed after
    /// this one, not everything since its last quiet moment (see
    /// [`Self::clear_written_keys`]).
    pub fn clear_dirty(
        &self,
        table: &str,
        partition: &Partition,
        generation: u64,
    ) -> Result<bool, StageError> {
        let guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let key = partition_key(table, partition);
        let current = self
            .db
            .get_cf(self.cf(CF_DIRTY), &key)
            .map_err(db_err("read dirty mark"))?;
        let mut written_key = META_WRITTEN_PREFIX.to_vec();
        written_key.extend_from_slice(&key);
        let written_before = self
            .db
            .get_cf(self.cf(CF_META), &written_key)
            .map_err(db_err("read the last written generation"))?
            .as_deref()
            .and_then(|g| decode_generation(g).ok());
        let newer = written_before.is_none_or(|w| w < generation);
        if current.as_deref() != Some(generation.to_be_bytes().as_slice()) {
            let moved_on = current
                .as_deref()
                .and_then(|g| decode_generation(g).ok())
                .is_some_and(|g| g > generation);
            if moved_on {
                if newer {
                    self.db
                        .put_cf(self.cf(CF_META), &written_key, generation.to_be_bytes())
                        .map_err(db_err("record the written generation"))?;
                }
                let deleted = self.clear_written_keys(&key, generation)?;
                drop(guard);
                if deleted > 0 {
                    self.note_cleared(key, deleted);
                }
            }
            return Ok(false);
        }
        // The mark still holds the generation read, so no key changed since: every
        // changed-key record of the partition was in the job's read, and the stage's
        // write lock keeps new ones out until this batch is written.
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(CF_DIRTY), &key);
        batch.delete_cf(self.cf(CF_BACKLOG), &key);
        if newer {
            batch.put_cf(self.cf(CF_META), &written_key, generation.to_be_bytes());
        }
        let mut opts = ReadOptions::default();
        opts.set_iterate_range(rocksdb::PrefixRange(key.as_slice()));
        let mut changed = Vec::new();
        let mut many = false;
        for item in self.db.iterator_cf_opt(
            self.cf(CF_CHANGED),
            opts,
            IteratorMode::From(&key, Direction::Forward),
        ) {
            let (k, _) = item.map_err(db_err("read changed keys"))?;
            if changed.len() == CLEAR_POINT_DELETES_MAX {
                many = true;
                break;
            }
            changed.push(k);
        }
        let deleted = if many {
            // Many changed keys: one range tombstone over the partition's,
            // whatever their number. Deleting 5,000,000 keys one by one held them all in
            // one batch and then in the memtable, past the stage's memory budget.
            // A scan meeting it seeks past its end rather than stepping over what it
            // covers, so it does not count towards `compact_cleared`.
            let end = prefix_end(&key);
            batch.delete_range_cf(self.cf(CF_CHANGED), &key, &end);
            0
        } else {
            // A few: point deletes, so that a live stream's frequent small writes do not
            // pile range tombstones into the memtable every read must consult.
            let n = changed.len();
            for k in changed {
                batch.delete_cf(self.cf(CF_CHANGED), k);
            }
            n
        };
        self.db.write(batch).map_err(db_err("clear dirty mark"))?;
        drop(guard);
        if deleted > 0 {
            self.note_cleared(key, deleted);
        }
        Ok(true)
    }

    /// Deletes the changed-key records of a partition (`partition_key`) that hold
    /// `generation` or an older one: keys a write of that generation covered and that
    /// did not change since (a later change rewrites its key's record with its own,
    /// newer generation). Its backlog becomes what the next write has left to write:
    /// the rows of the keys changed since, and their keys (a partition changed whole
    /// since, whose every-key record stays, keeps its backlog). Called under the write
    /// lock, so no record changes between its read and its delete. A partition with
    /// more records than [`CLEAR_POINT_DELETES_MAX`] is left whole (its next write
    /// merges them all again): one delete each would hold them all in one batch.
    /// Returns how many it deleted.
    fn clear_written_keys(
        &self,
        partition_key: &[u8],
        generation: u64,
    ) -> Result<usize, StageError> {
        let mut opts = ReadOptions::default();
        opts.set_iterate_range(rocksdb::PrefixRange(partition_key));
        let mut written = Vec::new();
        let mut left = 0u64;
        // The every-key record kept (changed whole since): the next write replaces
        // the partition, and its backlog stays what it was.
        let mut whole = false;
        for (seen, item) in self
            .db
            .iterator_cf_opt(
                self.cf(CF_CHANGED),
                opts,
                IteratorMode::From(partition_key, Direction::Forward),
            )
            .enumerate()
        {
            if seen == CLEAR_POINT_DELETES_MAX {
                return Ok(0);
            }
            let (k, v) = item.map_err(db_err("read changed keys"))?;
            if decode_generation(&v)? <= generation {
                written.push(k);
            } else if k.len() == partition_key.len() {
                whole = true;
            } else {
                // A changed-key record's key is its row's key in `rows`.
                let row = self
                    .db
                    .get_pinned_cf(self.cf(CF_ROWS), &k)
                    .map_err(db_err("read row"))?;
                let key_len = k.len().saturating_sub(partition_key.len());
                left += (key_len + row.map_or(0, |r| r.len())) as u64;
            }
        }
        if written.is_empty() {
            return Ok(0);
        }
        let mut batch = WriteBatch::default();
        for k in &written {
            batch.delete_cf(self.cf(CF_CHANGED), k);
        }
        if !whole {
            batch.put_cf(self.cf(CF_BACKLOG), partition_key, left.to_be_bytes());
        }
        self.db
            .write(batch)
            .map_err(db_err("clear written changed keys"))?;
        Ok(written.len())
    }

    /// Notes `deleted` changed-key records cleared one by one from a partition
    /// (`partition_key`), for [`Self::compact_cleared`]. A partition's first clear is
    /// not counted: tombstones cost the scans of a partition written again, and a run
    /// that writes each partition once (`--once`) would pay compactions for nothing.
    fn note_cleared(&self, partition_key: Vec<u8>, deleted: usize) {
        let mut cleared = self.cleared();
        if !cleared.seen.contains(&partition_key) {
            if cleared.seen.len() >= CLEARED_PARTITIONS_MAX {
                // Forgetting which partitions were cleared only puts a compaction off.
                cleared.seen.clear();
            }
            cleared.seen.insert(partition_key);
            return;
        }
        cleared.records = cleared.records.saturating_add(deleted as u64);
        let end = prefix_end(&partition_key);
        cleared.range = Some(match cleared.range.take() {
            None => (partition_key, end),
            Some((lo, hi)) => (lo.min(partition_key), hi.max(end)),
        });
    }

    fn cleared(&self) -> std::sync::MutexGuard<'_, super::Cleared> {
        self.cleared_changed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether [`Self::compact_cleared`] has work: more than [`COMPACT_CHANGED_AFTER`]
    /// changed-key records were cleared one by one, from partitions written again,
    /// since the last compaction.
    pub fn compaction_due(&self) -> bool {
        self.cleared().records > COMPACT_CHANGED_AFTER
    }

    /// When due, compacts the range of `changed` that the cleared partitions span. A
    /// record cleared one by one stays as a tombstone (in the memtable, then in table
    /// files) until a compaction reaches the last level, and a scan of a partition's
    /// changed keys steps over every tombstone of its keys: a live stream whose changes
    /// land in one partition (today's) made each write round slower than the last, by
    /// about 0.2 ms per thousand keys written since (60,000 changes one by one: 1.3 ms
    /// a round at first, 12 ms at the end). Compacting the range (the memtable flushed,
    /// then the files over it merged down, dropping the tombstones and what they delete)
    /// keeps a scan at the cost of the keys changed now. The writer runs it on a
    /// blocking thread after the write that made it due.
    pub fn compact_cleared(&self) {
        let range = {
            let mut cleared = self.cleared();
            if cleared.records <= COMPACT_CHANGED_AFTER {
                return;
            }
            cleared.records = 0;
            cleared.range.take()
        };
        let Some((lo, hi)) = range else { return };
        let started = std::time::Instant::now();
        self.db
            .compact_range_cf(self.cf(CF_CHANGED), Some(&lo), Some(&hi));
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "changed-key tombstones compacted away"
        );
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
