//! Large transactions: chunks staged in the pending area, then committed under a
//! marker that makes the transaction visible all or nothing (see
//! [`Stage::append_pending`]).

use rocksdb::{IteratorMode, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};

use super::apply::StageBatch;
use super::error::{StageError, corrupt, db_err};
use super::layout::{
    CF_DEAD_LETTER, CF_META, CF_PENDING, CF_STREAMS, META_APPLYING, META_GENERATION,
};
use super::{Stage, StageChange};
use crate::feed::{Position, Transaction};

impl Stage {
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
        let bytes = value.len();
        self.db
            .put_cf(self.cf(CF_PENDING), seq.to_be_bytes(), value)
            .map_err(db_err("stage a chunk"))?;
        self.after_write_of(bytes)
    }

    /// Forgets the pending area: the transaction it belonged to was aborted.
    pub fn discard_pending(&self) -> Result<(), StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.clear_pending()
    }

    pub(super) fn has_pending(&self) -> Result<bool, StageError> {
        match self
            .db
            .iterator_cf(self.cf(CF_PENDING), IteratorMode::Start)
            .next()
        {
            None => Ok(false),
            Some(item) => item.map(|_| true).map_err(db_err("read the pending area")),
        }
    }

    pub(super) fn clear_pending(&self) -> Result<(), StageError> {
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
    pub(super) fn commit_large(&self, txn: &Transaction) -> Result<usize, StageError> {
        let marker = self.mark_large(txn)?;
        self.finish_large(marker)
    }

    /// Step (1) of a large commit: the tail chunk and the marker, synced.
    pub(super) fn mark_large(&self, txn: &Transaction) -> Result<ApplyingMarker, StageError> {
        let generation = self.generation()? + 1;
        let marker = ApplyingMarker {
            checkpoint: Position {
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

    /// Adds a chunk of a transaction streamed in progress (PostgreSQL) to its area:
    /// each change with the xid of its (sub)transaction. Unsynced, and read by nothing
    /// before [`Stage::stage_stream`]: a crash loses areas, and the source sends their
    /// transactions again (none of them committed as far as the stage knows).
    pub fn append_stream(
        &self,
        xid: u32,
        changes: &[(u32, StageChange)],
    ) -> Result<(), StageError> {
        let seq = self
            .stream_seq
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let value = postcard::to_allocvec(changes)
            .map_err(|e| corrupt(format!("cannot encode chunk: {e}")))?;
        let bytes = value.len();
        self.db
            .put_cf(self.cf(CF_STREAMS), stream_key(xid, seq), value)
            .map_err(db_err("stage a streamed chunk"))?;
        self.after_write_of(bytes)
    }

    /// Forgets the area of streamed transaction `xid`.
    pub fn discard_stream(&self, xid: u32) -> Result<(), StageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            self.cf(CF_STREAMS),
            &stream_key(xid, 0)[..],
            &stream_key_end(xid)[..],
        );
        self.db
            .write(batch)
            .map_err(db_err("discard a streamed transaction"))
    }

    /// The commit of streamed transaction `xid`, step one: its area's changes, less
    /// those of the `aborted` subtransactions, each row with the commit's position and
    /// time, become the pending area's chunks (in order), and its area is emptied. The
    /// caller then stages the transaction (`Stage::apply` with its end position and no
    /// more changes), which commits the pending area as a large transaction does. A
    /// crash in between leaves chunks without a marker, removed at open with the
    /// areas: the source sends the transaction again. Returns the changes moved.
    pub fn stage_stream(
        &self,
        xid: u32,
        aborted: &[u32],
        commit_position: u64,
        commit_time_us: i64,
    ) -> Result<usize, StageError> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.has_pending()? {
            // Whole transactions are staged before a stream commits (see intake).
            return Err(corrupt(
                "the pending area holds another transaction's chunks",
            ));
        }
        let mut moved = 0;
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_STREAMS));
        iter.seek(stream_key(xid, 0));
        let end = stream_key_end(xid);
        while let Some((_, value)) = iter.item().filter(|(k, _)| *k < end.as_slice()) {
            let chunk: Vec<(u32, StageChange)> =
                postcard::from_bytes(value).map_err(|_| corrupt("streamed chunk"))?;
            let changes: Vec<StageChange> = chunk
                .into_iter()
                .filter(|(subxid, _)| !aborted.contains(subxid))
                .map(|(_, mut change)| {
                    change.set_commit(commit_position, commit_time_us);
                    change
                })
                .collect();
            if !changes.is_empty() {
                moved += changes.len();
                self.append_pending(&changes)?;
            }
            iter.next();
        }
        iter.status()
            .map_err(db_err("read a streamed transaction"))?;
        drop(iter);
        self.discard_stream(xid)?;
        Ok(moved)
    }

    /// Forgets every streamed transaction's area: done whenever a source connects
    /// (a new connection sends every transaction that did not commit again, and one
    /// that committed meanwhile may come whole, leaving its area behind).
    pub fn discard_streams(&self) -> Result<(), StageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(
            self.cf(CF_STREAMS),
            &stream_key(0, 0)[..],
            &stream_key_end(u32::MAX)[..],
        );
        self.db
            .write(batch)
            .map_err(db_err("clear the streamed transactions"))
    }

    /// At open: finish a large commit a crash interrupted, or forget the chunks of a
    /// transaction that never committed; and forget every streamed transaction's area.
    pub(super) fn recover_pending(&self) -> Result<(), StageError> {
        self.discard_streams()?;
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
}

/// The key of chunk `seq` of streamed transaction `xid`.
fn stream_key(xid: u32, seq: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(&xid.to_be_bytes());
    key[4..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// Past every key of streamed transaction `xid`.
fn stream_key_end(xid: u32) -> Vec<u8> {
    let mut end = xid.to_be_bytes().to_vec();
    end.extend_from_slice(&[0xff; 9]);
    end
}

/// Names a large transaction whose chunks are being applied.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct ApplyingMarker {
    pub(super) checkpoint: Position,
    pub(super) generation: u64,
}
