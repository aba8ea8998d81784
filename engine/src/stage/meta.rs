//! The stage's own records: the feed it belongs to, its position and generation
//! counter, each table's contract (and renaming a table), and partition failures.

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch, WriteOptions};

use super::error::{StageError, corrupt, db_err};
use super::layout::{
    CF_BACKLOG, CF_CHANGED, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META, CF_POSITION, CF_ROWS,
    META_CLAIMED, META_CONTRACT_PREFIX, META_FAILED_PREFIX, META_GENERATION,
    META_POSITION_COVERS_ACKS, META_PUBLICATION_MARK, META_SOURCE_ID, META_SOURCE_STATE,
    META_STAGE_ID, POSITION_KEY, partition_key, prefix_end, push_table, table_key,
};
use super::{PartitionFailure, Stage, TableContract};
use crate::feed::Position;
use crate::partition::Partition;

/// Keys moved per batch when a table's stage entries are renamed.
const RENAME_BATCH_KEYS: usize = 10_000;

impl Stage {
    /// Sets the tables whose key the source may not keep unique (see
    /// [`StageError::InsertOfStagedKey`]).
    pub fn set_guarded_keys(&self, tables: Vec<String>) {
        *self.guarded_keys.write().unwrap_or_else(|p| p.into_inner()) = tables;
    }

    /// Whether `table`'s key is one the source may not keep unique.
    pub(super) fn key_guarded(&self, table: &str) -> bool {
        self.guarded_keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|t| t == table)
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

    pub fn source_id(&self) -> Result<Option<String>, StageError> {
        Ok(self
            .meta(META_SOURCE_ID)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// This stage's identity (empty for a stage no writable open has given one yet):
    /// lineage records it, so that generations are compared only within one stage.
    pub fn stage_id(&self) -> Result<String, StageError> {
        Ok(self
            .meta(META_STAGE_ID)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default())
    }

    /// The PostgreSQL publication's mark as last recorded (`None`: never).
    pub fn publication_mark(&self) -> Result<Option<String>, StageError> {
        Ok(self
            .meta(META_PUBLICATION_MARK)?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Whether this stage claimed its target tables once (`target::claims`).
    pub fn has_claimed(&self) -> Result<bool, StageError> {
        Ok(self.meta(META_CLAIMED)?.is_some())
    }

    /// Records that this stage claimed its target tables (synced).
    pub fn set_claimed(&self) -> Result<(), StageError> {
        self.put_meta(META_CLAIMED, &[])
    }

    /// Records the publication's mark (synced).
    pub fn set_publication_mark(&self, mark: &str) -> Result<(), StageError> {
        self.put_meta(META_PUBLICATION_MARK, mark.as_bytes())
    }

    /// The source's resume state staged with its last [`super::StageChange::SourceState`].
    pub fn source_state(&self) -> Result<Option<Vec<u8>>, StageError> {
        self.meta(META_SOURCE_STATE)
    }

    /// The position of the last staged transaction (`None`: nothing staged yet).
    pub fn checkpoint(&self) -> Result<Option<Position>, StageError> {
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
        // A marked first-load part sets the position: it goes first.
        self.roll_forward_load()?;
        let current = self.checkpoint()?;
        let covered = self.meta(META_POSITION_COVERS_ACKS)?.is_some();
        if covered && current.is_some_and(|c| c.position >= position) {
            return Ok(false);
        }
        let next = Position {
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

    pub(super) fn generation(&self) -> Result<u64, StageError> {
        match self.meta(META_GENERATION)? {
            None => Ok(0),
            Some(b) => Ok(u64::from_be_bytes(
                b.as_slice()
                    .try_into()
                    .map_err(|_| corrupt("generation record"))?,
            )),
        }
    }
}
