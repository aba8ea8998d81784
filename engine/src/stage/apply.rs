//! Applying transactions: each batch of transactions in one synced write batch with
//! the new position, built by a [`StageBatch`] that sees its own earlier changes.

use std::collections::HashMap;

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch, WriteOptions};

use super::bulk::{Cut, PreparedLoad};
use super::error::{StageError, corrupt, db_err};
use super::layout::{
    CF_BACKLOG, CF_CHANGED, CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META,
    CF_POSITION, CF_ROWS, META_GENERATION, META_SOURCE_STATE, POSITION_KEY, decode_generation,
    partition_key, prefix_end, push_row_key, push_table, row_key, split_partition, split_table,
    table_key,
};
use super::{ApplyOutcome, Stage, StageChange, StagedRow};
use crate::feed::{BadRecord, Op, Position, Transaction};
use crate::partition::Partition;

impl Stage {
    /// Applies transactions in order, in one synced write with the position of the last
    /// one. Transactions at or below the stored position are skipped whole.
    ///
    /// If the pending area holds chunks ([`Stage::append_pending`]), they are the
    /// beginning of `transactions[0]`, which is then committed as a large transaction:
    /// see [`Stage::append_pending`].
    pub fn apply(&self, transactions: &[Transaction]) -> Result<ApplyOutcome, StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.roll_forward_load()?;
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
        batch.keep_images_for(rest);
        let mut last: Option<Position> = None;
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
            last = Some(Position {
                position: txn.end,
                cursor: txn.cursor,
            });
        }
        let Some(last) = last else { return Ok(outcome) };
        batch.finish(self, Some(last), true)?;
        Ok(outcome)
    }

    /// Stages changes read by a source's first load, in one synced write that also
    /// sets the position to `position` (every row of the load is at the snapshot's
    /// one point, so a second range at the same point is not skipped as `apply`
    /// would). The keys index, the dirty marks and the backlog are kept as by `apply`.
    ///
    /// `new_keys`: the caller knows that no key of these upserts is staged or repeated
    /// (a fresh stage, a key the source enforces unique): the keys index is written
    /// without being read, each partition is marked changed whole, and the rows and
    /// keys are ingested as sorted table files rather than written through the
    /// write-ahead log and the memtables (see `bulk.rs`).
    ///
    /// `sync`: the write is synced (else only written to the WAL, which a later synced
    /// write makes durable with it: the WAL is recovered as a prefix, so a part lost in
    /// a power cut goes with the progress it carried, never without it). Ingested
    /// files are durable once in.
    pub fn apply_load(
        &self,
        changes: &[StageChange],
        position: u64,
        new_keys: bool,
        sync: bool,
    ) -> Result<(), StageError> {
        self.apply_load_cut(changes, position, new_keys, sync, Cut::Whole)
    }

    /// [`Self::apply_load`], stopped where `cut` says (tests stop it as a crash would).
    pub(super) fn apply_load_cut(
        &self,
        changes: &[StageChange],
        position: u64,
        new_keys: bool,
        sync: bool,
        cut: Cut,
    ) -> Result<(), StageError> {
        if new_keys {
            // The upserts as table files, the rest (the load's progress) in the batch.
            let upsert = |c: &&StageChange| matches!(c, StageChange::Upsert { .. });
            let rest: Vec<StageChange> = changes.iter().filter(|c| !upsert(c)).cloned().collect();
            if rest
                .iter()
                .all(|c| matches!(c, StageChange::SourceState(_)))
                && let Some(part) = self.prepare_upserts(changes.iter().filter(upsert))?
            {
                return self.apply_prepared_cut(part, &rest, position, sync, cut);
            }
        }
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = self.load_batch(new_keys)?;
        batch.changes(self, changes)?;
        batch.finish(
            self,
            Some(Position {
                position,
                cursor: 0,
            }),
            sync,
        )
    }

    /// Stages a part of a first load prepared by [`Stage::prepare_load`], with
    /// `changes` (its progress) in its batch, as [`Stage::apply_load`] does with
    /// `new_keys`: its rows and keys ingested as table files (see `bulk.rs`).
    pub fn apply_prepared_load(
        &self,
        part: PreparedLoad,
        changes: &[StageChange],
        position: u64,
        sync: bool,
    ) -> Result<(), StageError> {
        self.apply_prepared_cut(part, changes, position, sync, Cut::Whole)
    }

    /// [`Self::apply_prepared_load`], stopped where `cut` says.
    fn apply_prepared_cut(
        &self,
        part: PreparedLoad,
        changes: &[StageChange],
        position: u64,
        sync: bool,
        cut: Cut,
    ) -> Result<(), StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = self.load_batch(true)?;
        for (table, partition, bytes) in part.partitions() {
            batch.partition(table, partition).bytes += bytes;
            batch.mark_dirty(table, partition);
        }
        batch.changes(self, changes)?;
        let write = batch.into_write_batch(
            self,
            Some(Position {
                position,
                cursor: 0,
            }),
        )?;
        self.ingest_load(part, write, sync, cut)
    }

    /// The batch of a first load's part, at the next generation; called under the write
    /// lock. A part an earlier error in this process left marked goes first: this
    /// part's generation follows its.
    fn load_batch(&self, new_keys: bool) -> Result<StageBatch, StageError> {
        self.roll_forward_load()?;
        let mut batch = StageBatch::new(self.generation()?);
        batch.images_wanted = Some(std::collections::HashSet::default());
        batch.new_keys = new_keys;
        batch.generation += 1;
        Ok(batch)
    }

    /// The partition of a key (`table_key`) in the keys index.
    fn current_partition(&self, table_key: &[u8]) -> Result<Option<Partition>, StageError> {
        let bytes = self
            .db
            .get_pinned_cf(self.cf(CF_KEYS), table_key)
            .map_err(db_err("read keys index"))?;
        bytes
            .map(|b| Partition::from_bytes(&b).ok_or_else(|| corrupt("keys index entry")))
            .transpose()
    }
}

/// A write batch being built, with what later changes in it must see.
pub(super) struct StageBatch {
    pub(super) batch: WriteBatch,
    pub(super) generation: u64,
    /// Keys touched earlier in this batch (`None`: deleted), by `table_key`.
    keys: BatchMap<Option<Partition>>,
    /// Tables truncated earlier in this batch: their keys are gone unless set again.
    truncated: std::collections::HashSet<String>,
    /// The partitions this batch changes, in the order first changed: the generation
    /// of their last change and the bytes staged into them.
    stats: Vec<(String, Partition, PartitionStat)>,
    /// Where each partition is in `stats`, by table. Looked up by `&str` and
    /// `&Partition`, so a change to a partition already seen allocates nothing.
    stat_index: HashMap<
        String,
        HashMap<Partition, usize, foldhash::fast::RandomState>,
        foldhash::fast::RandomState,
    >,
    /// The entry of `stats` used last: one change uses its partition's several times.
    last_stat: usize,
    /// Row images set earlier in this batch, encoded (`None`: deleted), for the
    /// unchanged values of a later `UpsertUnchanged`: the batch is not readable
    /// before it is written. By `table_key`.
    images: BatchMap<Option<Vec<u8>>>,
    /// Which images to keep (`table_key`s a later `UpsertUnchanged` of the batch reads);
    /// `None`: all of them.
    images_wanted: Option<std::collections::HashSet<Vec<u8>, foldhash::fast::RandomState>>,
    /// Every upsert's key is new to the stage and to the batch (a first load of a table
    /// whose key the source enforces unique): no lookup of an old partition, and each
    /// partition is marked changed whole rather than key by key.
    new_keys: bool,
    /// Reused for each change's stage keys, its encoded row and its keys-index entry:
    /// allocating them for every change was a visible share of staging's CPU.
    scratch: Scratch,
}

/// Buffers a batch reuses from one change to the next (their bytes are copied into
/// the write batch).
#[derive(Default)]
struct Scratch {
    key: Vec<u8>,
    table_key: Vec<u8>,
    row: Vec<u8>,
    partition: Vec<u8>,
}

/// What a batch did to one partition.
#[derive(Debug, Clone, Copy, Default)]
struct PartitionStat {
    /// The generation of its last change in the batch.
    generation: u64,
    /// Bytes staged into it (rows and changed keys).
    bytes: u64,
    /// How its changed keys are recorded (see [`StageBatch::lookup`]); `None`: not
    /// looked up yet.
    records: Option<Records>,
}

/// How a batch records the changed keys of one partition.
#[derive(Debug, Clone, Copy)]
struct Records {
    /// A record per changed key.
    per_key: bool,
    /// The every-key record, at the partition's last change in the batch.
    every_key: bool,
}

/// A map by `table_key` (the table and the encoded key in one buffer: one allocation
/// per change, and none per lookup beyond building it), hashed with foldhash: these
/// maps see every change staged, where SipHash was a visible share of intake's CPU.
type BatchMap<V> = HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

impl StageBatch {
    /// The partition `key` is in, as of the changes added so far.
    fn current(
        &self,
        stage: &Stage,
        table: &str,
        key: &[u8],
    ) -> Result<Option<Partition>, StageError> {
        self.current_of(stage, table, &table_key(table, key))
    }

    /// [`Self::current`] of a key given as its `table_key`.
    fn current_of(
        &self,
        stage: &Stage,
        table: &str,
        table_key: &[u8],
    ) -> Result<Option<Partition>, StageError> {
        if let Some(p) = self.keys.get(table_key) {
            return Ok(p.clone());
        }
        if self.truncated.contains(table) {
            return Ok(None);
        }
        stage.current_partition(table_key)
    }

    pub(super) fn new(generation: u64) -> StageBatch {
        StageBatch {
            batch: WriteBatch::default(),
            generation,
            keys: BatchMap::default(),
            truncated: std::collections::HashSet::new(),
            stats: Vec::new(),
            stat_index: HashMap::default(),
            last_stat: 0,
            images: BatchMap::default(),
            images_wanted: None,
            new_keys: false,
            scratch: Scratch::default(),
        }
    }

    /// Keeps row images only for the keys a later `UpsertUnchanged` of `transactions`
    /// reads (PostgreSQL's unchanged TOAST values): most batches have none, and copying
    /// every row into the map was a visible share of intake's work.
    pub(super) fn keep_images_for(&mut self, transactions: &[Transaction]) {
        let wanted = transactions
            .iter()
            .flat_map(|t| &t.changes)
            .filter_map(|change| match change {
                StageChange::UpsertUnchanged {
                    table,
                    previous_key,
                    ..
                } => Some(table_key(table, previous_key)),
                _ => None,
            })
            .collect();
        self.images_wanted = Some(wanted);
    }

    /// Records a row image of `tk` (see [`Self::images`]) if a later change reads it.
    fn keep_image(&mut self, tk: &[u8], image: Option<&[u8]>) {
        if self
            .images_wanted
            .as_ref()
            .is_none_or(|wanted| !wanted.is_empty() && wanted.contains(tk))
        {
            self.images.insert(tk.to_vec(), image.map(<[u8]>::to_vec));
        }
    }

    /// The stats of a partition this batch changes, made on first use.
    fn partition(&mut self, table: &str, partition: &Partition) -> &mut PartitionStat {
        let last = self
            .stats
            .get(self.last_stat)
            .is_some_and(|(t, p, _)| t == table && p == partition);
        if !last {
            self.last_stat = self.stat_position(table, partition);
        }
        &mut self.stats[self.last_stat].2
    }

    /// The index in `stats` of a partition, added if new.
    fn stat_position(&mut self, table: &str, partition: &Partition) -> usize {
        if let Some(&i) = self.stat_index.get(table).and_then(|p| p.get(partition)) {
            return i;
        }
        let i = self.stats.len();
        self.stats.push((
            table.to_owned(),
            partition.clone(),
            PartitionStat::default(),
        ));
        self.stat_index
            .entry(table.to_owned())
            .or_default()
            .insert(partition.clone(), i);
        i
    }

    /// Marks a partition dirty at the batch's current generation.
    fn mark_dirty(&mut self, table: &str, partition: &Partition) {
        let generation = self.generation;
        self.partition(table, partition).generation = generation;
    }

    /// The current image of `key`, as of the changes added so far.
    fn current_row(
        &self,
        stage: &Stage,
        table: &str,
        key: &[u8],
    ) -> Result<Option<StagedRow>, StageError> {
        if let Some(image) = self.images.get(&table_key(table, key)) {
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
    /// current image of `previous_key` (replacing a value the source filled already
    /// from the committed stage), and whether such a value differed: the source read
    /// an older image than this batch holds; `None`: skip it (no image,
    /// `skip_if_absent`).
    fn resolve_unchanged(
        &self,
        stage: &Stage,
        table: &str,
        previous_key: &[u8],
        row: &StagedRow,
        unchanged: &[String],
        skip_if_absent: bool,
    ) -> Result<Option<(StagedRow, bool)>, StageError> {
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
        let mut stale = false;
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
            match row.values.iter_mut().find(|(c, _)| c == column) {
                Some((_, filled)) => {
                    stale |= *filled != value;
                    *filled = value;
                }
                None => row.values.push((column.clone(), value)),
            }
        }
        Ok(Some((row, stale)))
    }

    /// Sets the row of `key` (moving it out of its old partition if it was elsewhere).
    fn upsert(
        &mut self,
        stage: &Stage,
        table: &str,
        key: &[u8],
        partition: &Partition,
        row: &StagedRow,
        key_changed: bool,
    ) -> Result<(), StageError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.upsert_with(stage, table, key, partition, row, key_changed, &mut scratch);
        self.scratch = scratch;
        result
    }

    /// [`Self::upsert`] with the batch's buffers lent out: they are a field of `self`,
    /// which the write batch and the maps borrow too.
    #[allow(clippy::too_many_arguments)]
    fn upsert_with(
        &mut self,
        stage: &Stage,
        table: &str,
        key: &[u8],
        partition: &Partition,
        row: &StagedRow,
        key_changed: bool,
        scratch: &mut Scratch,
    ) -> Result<(), StageError> {
        let tk = &mut scratch.table_key;
        tk.clear();
        push_table(tk, table);
        tk.extend_from_slice(key);
        // A key new to the stage (`new_keys`) has no old partition to leave, and its
        // partition is marked changed whole at `finish`.
        if !self.new_keys {
            let old = self.current_of(stage, table, tk)?;
            // An insert, or an update that moved a row to another key, onto a key the
            // stage holds: two source rows share the key.
            if old.is_some() && (row.op == Op::Insert || key_changed) && stage.key_guarded(table) {
                return Err(StageError::InsertOfStagedKey {
                    table: table.to_owned(),
                });
            }
            if let Some(old) = old.filter(|old| old != partition) {
                self.batch
                    .delete_cf(stage.cf(CF_ROWS), row_key(table, &old, key));
                self.changed_with(stage, table, &old, key, &mut scratch.key)?;
                self.mark_dirty(table, &old);
            }
            self.changed_with(stage, table, partition, key, &mut scratch.key)?;
        }
        scratch.row.clear();
        let value = postcard::to_extend(row, std::mem::take(&mut scratch.row))
            .map_err(|e| corrupt(format!("cannot encode row: {e}")))?;
        self.partition(table, partition).bytes += value.len() as u64;
        // The row's stage key: the last `changed_with` above left it in `scratch.key`,
        // unless none ran (`new_keys`).
        if self.new_keys {
            push_row_key(&mut scratch.key, table, partition, key);
        }
        self.batch.put_cf(stage.cf(CF_ROWS), &scratch.key, &value);
        scratch.partition.clear();
        partition.push_bytes(&mut scratch.partition);
        self.batch
            .put_cf(stage.cf(CF_KEYS), &scratch.table_key, &scratch.partition);
        self.mark_dirty(table, partition);
        if !self.new_keys {
            self.keep_image(&scratch.table_key, Some(&value));
            self.keys
                .insert(scratch.table_key.clone(), Some(partition.clone()));
        }
        scratch.row = value;
        Ok(())
    }

    /// Adds changes at the current generation; returns how many changed a row.
    pub(super) fn changes(
        &mut self,
        stage: &Stage,
        changes: &[StageChange],
    ) -> Result<usize, StageError> {
        // The table of the change before, if it was a delete: an update that changes a
        // row's key is its old key's delete, then the new key's upsert.
        let mut deleted_before: Option<&str> = None;
        for change in changes {
            let after_delete = deleted_before.take();
            match change {
                StageChange::Upsert {
                    table,
                    key,
                    partition,
                    row,
                } => {
                    let key_changed = row.op == Op::Update && after_delete == Some(table.as_str());
                    self.upsert(stage, table, key, partition, row, key_changed)?
                }
                StageChange::UpsertUnchanged {
                    table,
                    key,
                    partition,
                    row,
                    unchanged,
                    previous_key,
                    skip_if_absent,
                } => {
                    if let Some((row, stale)) = self.resolve_unchanged(
                        stage,
                        table,
                        previous_key,
                        row,
                        unchanged,
                        *skip_if_absent,
                    )? {
                        // Values the source filled from an older image (its partition
                        // column among them, unchanged by this update): the row stays
                        // in the partition it is in now.
                        let now = if stale {
                            self.current_of(stage, table, &table_key(table, previous_key))?
                        } else {
                            None
                        };
                        let partition = now.as_ref().unwrap_or(partition);
                        self.upsert(stage, table, key, partition, &row, previous_key != key)?;
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
                    self.keys.retain(|k, _| !k.starts_with(&prefix));
                    self.images.retain(|k, _| !k.starts_with(&prefix));
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
                        self.mark_dirty(table, &partition);
                    }
                    // Partitions filled earlier in this batch are marked already.
                    // Every key of every partition changed: each is replaced whole.
                    let partitions: Vec<Partition> = self
                        .stats
                        .iter()
                        .filter(|(t, _, _)| t == table)
                        .map(|(_, p, _)| p.clone())
                        .collect();
                    for p in partitions {
                        self.mark_dirty(table, &p);
                        self.changed(stage, table, &p, &[])?;
                    }
                }
                StageChange::Delete { table, key } => {
                    deleted_before = Some(table);
                    if let Some(old) = self.current(stage, table, key)? {
                        self.batch
                            .delete_cf(stage.cf(CF_ROWS), row_key(table, &old, key));
                        self.changed(stage, table, &old, key)?;
                        self.batch
                            .delete_cf(stage.cf(CF_KEYS), table_key(table, key));
                        self.keys.insert(table_key(table, key), None);
                        self.mark_dirty(table, &old);
                    }
                    self.keep_image(&table_key(table, key), None);
                }
            }
        }
        // A source's own state is not a change of a row.
        Ok(changes
            .iter()
            .filter(|c| !matches!(c, StageChange::SourceState(_)))
            .count())
    }

    /// Records that `key` (empty: every key) of a partition changed.
    fn changed(
        &mut self,
        stage: &Stage,
        table: &str,
        partition: &Partition,
        key: &[u8],
    ) -> Result<(), StageError> {
        let mut buf = std::mem::take(&mut self.scratch.key);
        let result = self.changed_with(stage, table, partition, key, &mut buf);
        self.scratch.key = buf;
        result
    }

    /// [`Self::changed`], building the stage key in `buf` (left there: an upsert's row
    /// key is the same). A partition changed whole that no writer has read gets no
    /// record per key (see [`Self::lookup`]).
    fn changed_with(
        &mut self,
        stage: &Stage,
        table: &str,
        partition: &Partition,
        key: &[u8],
        buf: &mut Vec<u8>,
    ) -> Result<(), StageError> {
        self.partition(table, partition).bytes += key.len() as u64;
        push_row_key(buf, table, partition, key);
        let mut records = self.lookup(stage, table, partition)?;
        if key.is_empty() {
            records.every_key = true;
            self.partition(table, partition).records = Some(records);
        } else if records.per_key {
            self.batch
                .put_cf(stage.cf(CF_CHANGED), &buf, self.generation.to_be_bytes());
        }
        Ok(())
    }

    /// How this batch records a partition's changed keys, found once per batch.
    ///
    /// The partition is changed whole (its next write replaces it) if it holds the
    /// every-key record (a TRUNCATE, a first load, or an earlier batch's finding); if it
    /// is new to the stage (no generation: it holds no row, so replacing it costs the
    /// rows changed since, which merging would cost too); and if it is dirty without
    /// any record (a stage imported from a checkpoint file, which does not carry them):
    /// a record of this batch's keys alone would make its next write merge just those,
    /// and leave out what was dirty before.
    ///
    /// A partition changed whole that no writer has read gets no record per key, only
    /// the every-key record at this batch's generation: a first load or a backlog into
    /// new partitions skips a third of its memtable inserts. Once a writer may have read
    /// it, its keys are recorded one by one (and the every-key record, if there, is left
    /// at its generation): a write overtaken by this batch then clears the every-key
    /// record with what it covered, and the next write merges what came after, where
    /// the every-key record kept newer would have made a partition that never stops
    /// changing be replaced whole at every write.
    fn lookup(
        &mut self,
        stage: &Stage,
        table: &str,
        partition: &Partition,
    ) -> Result<Records, StageError> {
        if let Some(records) = self.partition(table, partition).records {
            return Ok(records);
        }
        let records = if self.new_keys {
            Records {
                per_key: false,
                every_key: true,
            }
        } else {
            const WHAT: &str = "read whether a partition changed whole";
            let key = partition_key(table, partition);
            let mut opts = ReadOptions::default();
            opts.set_iterate_range(rocksdb::PrefixRange(key.as_slice()));
            let mut changed = stage.db.raw_iterator_cf_opt(stage.cf(CF_CHANGED), opts);
            changed.seek(&key);
            let first = changed.key().map(|k| k.len() == key.len());
            changed.status().map_err(db_err(WHAT))?;
            let present = |cf| {
                stage
                    .db
                    .get_pinned_cf(stage.cf(cf), &key)
                    .map(|v| v.is_some())
                    .map_err(db_err(WHAT))
            };
            let has_every_key = first == Some(true);
            let whole = match first {
                Some(every_key) => every_key,
                None => !present(CF_GENERATIONS)? || present(CF_DIRTY)?,
            };
            match (whole, stage.was_read(&key)) {
                (false, _) => Records {
                    per_key: true,
                    every_key: false,
                },
                (true, false) => Records {
                    per_key: false,
                    every_key: true,
                },
                (true, true) => Records {
                    per_key: true,
                    every_key: !has_every_key,
                },
            }
        };
        self.partition(table, partition).records = Some(records);
        Ok(records)
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
    pub(super) fn finish(
        self,
        stage: &Stage,
        position: Option<Position>,
        sync: bool,
    ) -> Result<(), StageError> {
        let batch = self.into_write_batch(stage, position)?;
        let bytes = batch.size_in_bytes();
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        stage
            .db
            .write_opt(batch, &opts)
            .map_err(db_err("stage transactions"))?;
        stage.after_write_of(bytes)
    }

    /// The batch with the dirty marks and generation (and the position, if given),
    /// not written yet.
    fn into_write_batch(
        mut self,
        stage: &Stage,
        position: Option<Position>,
    ) -> Result<WriteBatch, StageError> {
        for (table, partition, stat) in std::mem::take(&mut self.stats) {
            let key = partition_key(&table, &partition);
            if self.new_keys || stat.records.is_some_and(|r| r.every_key) {
                // The every-key record at the partition's last change.
                self.batch
                    .put_cf(stage.cf(CF_CHANGED), &key, stat.generation.to_be_bytes());
            }
            let before = stage
                .db
                .get_cf(stage.cf(CF_BACKLOG), &key)
                .map_err(db_err("read the backlog"))?
                .map(|v| decode_generation(&v))
                .transpose()?
                .unwrap_or(0);
            self.batch.put_cf(
                stage.cf(CF_BACKLOG),
                &key,
                before.saturating_add(stat.bytes).to_be_bytes(),
            );
            self.batch.put_cf(
                stage.cf(CF_GENERATIONS),
                &key,
                stat.generation.to_be_bytes(),
            );
            self.batch
                .put_cf(stage.cf(CF_DIRTY), key, stat.generation.to_be_bytes());
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
        Ok(self.batch)
    }
}
