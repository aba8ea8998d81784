//! A round's small merges of one table, written as a group: one target transaction
//! for many partitions ([`crate::target::group`]) instead of one each. Each partition
//! still has its own job (its snapshot, its changed keys, its transform, run
//! `[engine] parallelism` at a time) and its own lineage and dirty mark; the group
//! only shares the transaction. A partition that is not a small merge (a replace,
//! keys beyond one chunk, lineage that refuses a merge) is left to be written alone,
//! and so is every partition of a group that fails: a plugin's failure in one
//! partition is then reported, and recorded, for that partition only.
//!
//! **Architecture Invariant**: a group holds the advisory lock of each of its
//! partitions (taken in the order of their keys) for its whole transaction, and the
//! round gives a partition to at most one group or write, so two writers never write
//! one partition at once; a partition's dirty mark is cleared only after the group
//! committed, and only for the generation its job read.

use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use super::stream::{End, GroupTicket, Head, OutChunk, Permits, Piece, Pieces};
use super::{Pipeline, PipelineError};
use crate::errors::error_chain;
use crate::partition::Partition;
use crate::stage::DirtyPartition;
use crate::target::{self, MemberKeys, PartitionMeta, WriteSummary};

/// At most this many partitions in one group ...
pub(super) const GROUP_PARTITIONS: usize = 64;
/// ... and this many changed keys in all: the group holds them until its DELETEs ...
const GROUP_KEYS: usize = crate::stage::CHUNK_ROWS * 4;
/// ... each member at most this many: a larger merge is written alone, beside others
/// (on `parallelism` connections), where its transaction's round trips are a small
/// part of its time and the server's work is shared among backends.
const MEMBER_KEYS: usize = 1024;

/// What a group did with a partition it was given.
#[derive(Debug)]
pub(super) enum Grouped {
    Written(WriteSummary),
    /// Nothing to write: not dirty any more, or held by a resync.
    Skipped,
    /// To be written alone (see the module).
    Alone,
    /// The group was full: for a next group.
    Later,
}

/// What the groups of a round wrote.
#[derive(Debug, Default)]
pub(super) struct GroupsWritten {
    pub partitions: usize,
    pub rows: u64,
    pub rejected: u64,
}

/// A partition the group writes: its job's stream, head and changed keys.
struct Member {
    at: usize,
    head: Head,
    keys: MemberKeys,
    pieces: Pieces,
    /// The job's word to go on to its transform (dropped: it stops).
    go: Option<std::sync::mpsc::Sender<()>>,
}

impl Pipeline {
    /// Writes the round's dirty partitions (`dirty`, in the round's order) of each
    /// table whose writes may merge, two or more of them, in groups; returns what is
    /// left to write alone, in the same order, and what the groups wrote.
    pub(super) async fn write_groups(
        &self,
        dirty: Vec<DirtyPartition>,
    ) -> Result<(Vec<DirtyPartition>, GroupsWritten), PipelineError> {
        let mut written = GroupsWritten::default();
        if !self.writable {
            return Ok((dirty, written));
        }
        let mut tables: Vec<(String, Vec<DirtyPartition>)> = Vec::new();
        let mut alone = Vec::new();
        for d in dirty {
            let (config, _, transform) = self.table(&d.table)?;
            if !transform.merges(config) {
                alone.push(d);
            } else if let Some((_, parts)) = tables.iter_mut().find(|(t, _)| *t == d.table) {
                parts.push(d);
            } else {
                tables.push((d.table.clone(), vec![d]));
            }
        }
        for (table, mut pending) in tables {
            while pending.len() >= 2 {
                let partitions: Vec<Partition> =
                    pending.iter().map(|d| d.partition.clone()).collect();
                let outcomes = self.write_group(&table, &partitions).await?;
                let mut later = Vec::new();
                for (d, outcome) in pending.into_iter().zip(outcomes) {
                    match outcome {
                        Grouped::Written(summary) => {
                            written.partitions += 1;
                            written.rows += summary.copied;
                            written.rejected += summary.rejected;
                        }
                        Grouped::Skipped => {}
                        Grouped::Alone => alone.push(d),
                        Grouped::Later => later.push(d),
                    }
                }
                if later.len() == partitions.len() {
                    // No group could start (no job thread): each is written alone.
                    pending = Vec::new();
                    alone.extend(later);
                    break;
                }
                pending = later;
            }
            alone.extend(pending);
        }
        Ok((alone, written))
    }

    /// Writes as many of `partitions` (dirty partitions of `table`, whose writes may
    /// merge) as one group takes; says what became of each, in order. An error is
    /// returned only after the group committed (its bookkeeping); before, a failed
    /// group's partitions are [`Grouped::Alone`].
    pub(super) async fn write_group(
        &self,
        table: &str,
        partitions: &[Partition],
    ) -> Result<Vec<Grouped>, PipelineError> {
        let mut outcomes: Vec<Grouped> = partitions.iter().map(|_| Grouped::Alone).collect();
        let Ok(key_columns) = self.key_columns(table) else {
            return Ok(outcomes);
        };
        let started = Instant::now();
        let permits = Arc::new(Permits::new(self.config.engine.parallelism));
        let mut jobs = Vec::new();
        for (at, partition) in partitions.iter().enumerate().take(GROUP_PARTITIONS) {
            let (go, go_rx) = std::sync::mpsc::channel();
            let ticket = GroupTicket {
                permits: permits.clone(),
                go: std::sync::Mutex::new(go_rx),
            };
            match self.stream(table, partition, key_columns.clone(), true, Some(ticket)) {
                Ok(pieces) => jobs.push((at, pieces, go)),
                Err(_) => break,
            }
        }
        for outcome in outcomes.iter_mut().skip(jobs.len()) {
            *outcome = Grouped::Later;
        }
        // Each job's head and changed keys; the jobs go on to their transforms.
        let mut members = Vec::new();
        let mut keys_in_group = 0;
        for (at, mut pieces, go) in jobs {
            match heads_and_keys(&mut pieces).await {
                Ok(Some((head, keys))) => {
                    if head.held || head.dirty.is_none() {
                        outcomes[at] = Grouped::Skipped;
                    } else if !head.merge {
                        outcomes[at] = Grouped::Alone;
                    } else if keys_in_group + keys.keys.len() > GROUP_KEYS && !members.is_empty() {
                        outcomes[at] = Grouped::Later;
                    } else {
                        keys_in_group += keys.keys.len();
                        members.push(Member {
                            at,
                            head,
                            keys,
                            pieces,
                            go: Some(go),
                        });
                    }
                }
                // More keys than a group takes of one partition, or a failure: the
                // partition's own write tells.
                Ok(None) | Err(_) => outcomes[at] = Grouped::Alone,
            }
        }
        if members.is_empty() {
            return Ok(outcomes);
        }
        let mut client = match self.client().await {
            Ok(client) => client,
            Err(_) => return Ok(outcomes),
        };
        let written = match self
            .group_transaction(&mut client, table, partitions, &key_columns, &mut members)
            .await
        {
            Ok(written) => written,
            Err(error) => {
                if client.is_closed() || super::write::connection_lost(&error) {
                    self.lost_target();
                }
                tracing::debug!(table, partitions = members.len(), error = %error_chain(&error), "a group of partition writes failed; its partitions are written alone");
                return Ok(outcomes);
            }
        };
        // A failed write's connection may be mid-COPY: only a good one is pooled.
        self.clients.lock().await.push(client);
        crate::failpoint!("target-after-commit");
        self.live.last_write_us.store(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        for (member, summary) in members.iter().zip(written) {
            let partition = &partitions[member.at];
            match summary {
                Some(summary) => {
                    self.after_write(table, partition, &summary, member.head.dirty)?;
                    crate::metrics::partition_job(table, started.elapsed(), false);
                    outcomes[member.at] = Grouped::Written(summary);
                }
                None => outcomes[member.at] = Grouped::Alone,
            }
        }
        if self.stage.compaction_due() {
            let stage = self.stage_arc();
            super::blocking(move || {
                stage.compact_cleared();
                Ok(())
            })
            .await?;
        }
        Ok(outcomes)
    }

    /// The group's one transaction: opened (locks, lineage), the changed keys'
    /// DELETEs, the output of every member's job COPYed as it comes, lineage, commit.
    /// Each member's summary, `None` for one lineage left out.
    async fn group_transaction(
        &self,
        client: &mut tokio_postgres::Client,
        table: &str,
        partitions: &[Partition],
        key_columns: &[usize],
        members: &mut [Member],
    ) -> Result<Vec<Option<WriteSummary>>, PipelineError> {
        let (_, target_table, transform) = self.table(table)?;
        let (plugin_sha256, config_hash) = transform.lineage_ids();
        let label = transform.label();
        let source_id = self.config.source_id();
        let stage_id = self.stage.stage_id()?;
        let floors = members
            .iter()
            .map(|m| self.stage.last_written(table, &partitions[m.at]))
            .collect::<Result<Vec<_>, _>>()?;
        let metas = members
            .iter()
            .zip(floors)
            .map(|(m, merge_floor)| PartitionMeta {
                source_id: &source_id,
                stage_id: &stage_id,
                source_table: table,
                partition: &partitions[m.at],
                generation: m.head.generation,
                source_position: m.head.source_position,
                transform: &label,
                plugin_sha256: plugin_sha256.as_deref(),
                config_hash,
                skip_if_newer: false,
                merge_floor,
            })
            .collect();
        let (mut writer, mergeable) =
            target::open_group(client, target_table, key_columns, metas).await?;
        // The members merged go on to their transforms; a member left out (written
        // alone) stops its job.
        for (member, &ok) in members.iter_mut().zip(&mergeable) {
            let go = member.go.take();
            if ok && let Some(go) = go {
                let _ = go.send(());
            } else {
                member.pieces.close();
            }
        }
        let keys = members
            .iter_mut()
            .zip(&mergeable)
            .map(|(m, &ok)| {
                if ok {
                    std::mem::take(&mut m.keys)
                } else {
                    MemberKeys::default()
                }
            })
            .collect();
        writer.delete_keys(keys).await?;
        // Every mergeable member's output, from whichever job has some.
        let mut open: Vec<usize> = (0..members.len()).filter(|&i| mergeable[i]).collect();
        while !open.is_empty() {
            let (k, piece) = std::future::poll_fn(|cx| {
                for (k, &i) in open.iter().enumerate() {
                    if let Poll::Ready(piece) = members[i].pieces.poll_recv(cx) {
                        return Poll::Ready((k, piece));
                    }
                }
                Poll::Pending
            })
            .await;
            let i = open[k];
            match piece {
                Some(Ok(Piece::Chunk(OutChunk {
                    rows, rejections, ..
                }))) => {
                    writer.copy(i, &rows).await?;
                    writer.reject(i, &rejections).await?;
                }
                Some(Ok(Piece::End(End { .. }))) => {
                    open.swap_remove(k);
                }
                Some(Err(e)) => return Err(e),
                // A job's end without its `End`: it failed (its error came first) or
                // was lost; no head or keys come after the keys.
                Some(Ok(Piece::Head(_) | Piece::KeysDone)) | None => {
                    return Err(crate::plugin::PluginError::Lost.into());
                }
            }
        }
        Ok(writer.commit().await?)
    }
}

/// A merging job's head and changed keys, up to its `KeysDone`; `None` if they are
/// more than [`MEMBER_KEYS`] (too many for a group). A job
/// that does not merge (or is not dirty) sends its head alone: that is returned with
/// no keys.
async fn heads_and_keys(pieces: &mut Pieces) -> Result<Option<(Head, MemberKeys)>, PipelineError> {
    let head = match pieces.recv().await {
        Some(Ok(Piece::Head(head))) => head,
        Some(Err(e)) => return Err(e),
        _ => return Err(crate::plugin::PluginError::Lost.into()),
    };
    if !head.merge || head.held || head.dirty.is_none() {
        return Ok(Some((head, MemberKeys::default())));
    }
    let mut keys = MemberKeys::default();
    let mut chunks = 0;
    loop {
        match pieces.recv().await {
            Some(Ok(Piece::Chunk(chunk))) => {
                chunks += 1;
                if chunks > 1 || chunk.keys.len() > MEMBER_KEYS {
                    return Ok(None);
                }
                keys.keys = chunk.keys;
                keys.rejection_keys = chunk.rejection_keys;
            }
            Some(Ok(Piece::KeysDone)) => return Ok(Some((head, keys))),
            Some(Err(e)) => return Err(e),
            _ => return Err(crate::plugin::PluginError::Lost.into()),
        }
    }
}
