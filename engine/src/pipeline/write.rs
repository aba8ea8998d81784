//! One partition's write: its job streamed from the stage (see [`super::stream`])
//! into the partition's one target transaction (a replace, or a merge of the changed
//! keys), then its dirty mark cleared if still current.

use tokio_postgres::Client;

use super::stream::{self, End, OutChunk, Piece, Pieces, StreamJob};
use super::{Pipeline, PipelineError};
use crate::config::{Dsn, WriteMode};
use crate::metrics;
use crate::partition::Partition;
use crate::stage::StagedRow;
use crate::target::{self, Opened, PartitionMeta, WriteSummary};
use crate::value::Value;

/// How a write went.
enum Written {
    Done(WriteSummary),
    /// Lineage refused a merge: replace instead.
    Refused,
    /// Nothing to write: the partition is not dirty any more, or a resync holds it.
    Skipped,
}

impl Pipeline {
    /// Writes one partition from the stage. With `only_if_dirty`, a partition whose
    /// mark another job already cleared is left alone (`Ok(None)`); such a write of a
    /// `merge` table merges the changed keys when lineage allows it.
    pub async fn write_partition(
        &self,
        table: &str,
        partition: &Partition,
        only_if_dirty: bool,
    ) -> Result<Option<WriteSummary>, PipelineError> {
        let (table_config, _, transform) = self.table(table)?;
        let mut merge = only_if_dirty
            && self.writable
            && transform.merges(table_config)
            && !self.replaces_only(table);
        let key_columns = if merge {
            match self.key_columns(table) {
                Ok(columns) => columns,
                // `auto` replaces what it cannot merge.
                Err(_) if table_config.write == WriteMode::Auto => {
                    merge = false;
                    Vec::new()
                }
                Err(e) => return Err(e),
            }
        } else {
            Vec::new()
        };
        loop {
            let columns = if merge {
                key_columns.clone()
            } else {
                Vec::new()
            };
            let pieces = self.stream(table, partition, columns, only_if_dirty, None)?;
            match self
                .write_stream(table, partition, &key_columns, only_if_dirty, pieces)
                .await
            {
                Ok(Written::Done(summary)) => return Ok(Some(summary)),
                Ok(Written::Skipped) => return Ok(None),
                Ok(Written::Refused) => merge = false,
                // `auto` chose a merge the plugin's output cannot take (a row keyed
                // otherwise than its input): the write was rolled back; replace.
                Err(error @ PipelineError::MergeKey { .. })
                    if merge && table_config.write == WriteMode::Auto =>
                {
                    tracing::debug!(table, partition = %partition, error = %crate::errors::error_chain(&error), "write = \"auto\" replaces a partition it could not merge");
                    merge = false;
                }
                // The plugin read a clock or drew random bytes: what it made for the
                // changed rows alone is not what a replace gives them. Rolled back;
                // replaced, and so from now on.
                Err(error @ PipelineError::MergeImpure { .. }) if merge => {
                    tracing::info!(table, partition = %partition, error = %crate::errors::error_chain(&error), "the table's partitions are replaced, not merged");
                    self.replace_only(table);
                    merge = false;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Starts a partition's job (see [`super::stream`]); it merges the changed keys
    /// (when the partition allows it) if given the key's target columns.
    pub(super) fn stream(
        &self,
        table: &str,
        partition: &Partition,
        key_columns: Vec<usize>,
        only_if_dirty: bool,
        group: Option<stream::GroupTicket>,
    ) -> Result<Pieces, PipelineError> {
        let (table_config, target_table, transform) = self.table(table)?;
        stream::spawn(StreamJob {
            stage: self.stage_arc(),
            table: table_config.clone(),
            target_name: target_table.name.to_string(),
            transform: transform.clone(),
            partition: partition.clone(),
            merge: !key_columns.is_empty(),
            merge_if_cheaper: table_config.write == WriteMode::Auto,
            only_if_dirty,
            key_columns,
            input: None,
            resyncs: self.resyncs(),
            group,
        })
    }

    /// The target columns of the table's key, which `check_write_mode` made the grain
    /// key of a merged table.
    pub(super) fn key_columns(&self, table: &str) -> Result<Vec<usize>, PipelineError> {
        let (table_config, target_table, _) = self.table(table)?;
        table_config
            .key
            .iter()
            .map(|k| target_table.columns.iter().position(|(name, _)| name == k))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| PipelineError::Table {
                config: self.config.path.clone(),
                table: table.to_owned(),
                field: "write",
                message: "merge needs every key column in the target table".into(),
            })
    }

    /// Writes a job's stream in one transaction (begun while the job reads its
    /// snapshot, and merging by `key_columns` if the job's head says it merges); then
    /// the bookkeeping of a write.
    async fn write_stream(
        &self,
        table: &str,
        partition: &Partition,
        key_columns: &[usize],
        only_if_dirty: bool,
        mut pieces: Pieces,
    ) -> Result<Written, PipelineError> {
        let (_, target_table, _) = self.table(table)?;
        let started = std::time::Instant::now();
        let mut client = self.client().await?;
        let result = self
            .write_pieces(
                &mut client,
                table,
                partition,
                key_columns,
                only_if_dirty,
                &mut pieces,
            )
            .await;
        let result = match result {
            Err(PipelineError::Target(e)) => {
                Err(
                    target::explain_lock_error(&client, target_table, partition, *e)
                        .await
                        .into(),
                )
            }
            other => other,
        };
        // A failed write's connection may be mid-COPY: it is dropped, not pooled. (A
        // write left alone rolls back its transaction as it drops it.)
        if result.is_ok() {
            self.clients.lock().await.push(client);
        } else if client.is_closed() || result.as_ref().is_err_and(connection_lost) {
            // Lost with the write (a restart under load): never pooled to be found so.
            self.lost_target();
        }
        let (summary, dirty) = match result? {
            Some(Ok(written)) => written,
            Some(Err(written)) => return Ok(written),
            None => return Ok(Written::Refused),
        };
        crate::failpoint!("target-after-commit");
        self.live.last_write_us.store(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.after_write(table, partition, &summary, dirty)?;
        if self.stage.compaction_due() {
            let stage = self.stage_arc();
            super::blocking(move || {
                stage.compact_cleared();
                Ok(())
            })
            .await?;
        }
        Ok(Written::Done(summary))
    }

    /// Feeds a job's chunks into the partition's transaction and commits at its end:
    /// the summary and the dirty mark written; `Some(Err(Skipped))` if the job's head
    /// says there is nothing to write; `None` if lineage refused the merge.
    async fn write_pieces(
        &self,
        client: &mut Client,
        table: &str,
        partition: &Partition,
        key_columns: &[usize],
        only_if_dirty: bool,
        pieces: &mut Pieces,
    ) -> Result<Option<Result<(WriteSummary, Option<u64>), Written>>, PipelineError> {
        let (_, target_table, transform) = self.table(table)?;
        // The transaction begins while the job opens its snapshot.
        let (head, begun) = tokio::join!(
            pieces.recv(),
            target::begin_partition_write(client, target_table, partition)
        );
        let head = match head {
            Some(Ok(Piece::Head(head))) => head,
            Some(Err(e)) => return Err(e),
            _ => return Err(crate::plugin::PluginError::Lost.into()),
        };
        if head.held && !only_if_dirty {
            return Err(PipelineError::Resyncing {
                table: table.to_owned(),
            });
        }
        if head.held || (only_if_dirty && head.dirty.is_none()) {
            return Ok(Some(Err(Written::Skipped)));
        }
        let begun = begun?;
        let (plugin_sha256, config_hash) = transform.lineage_ids();
        let label = transform.label();
        let source_id = self.config.source_id();
        let stage_id = self.stage.stage_id()?;
        let meta = PartitionMeta {
            source_id: &source_id,
            stage_id: &stage_id,
            source_table: table,
            partition,
            generation: head.generation,
            source_position: head.source_position,
            transform: &label,
            plugin_sha256: plugin_sha256.as_deref(),
            config_hash,
            skip_if_newer: !self.writable,
            merge_floor: if head.merge {
                self.stage.last_written(table, partition)?
            } else {
                None
            },
        };
        // A merge deletes the rows of the changed keys by the key's target columns.
        let key_columns = if head.merge { key_columns } else { &[] };
        let merge = !key_columns.is_empty();
        let opened = if merge {
            target::open_merge(begun, target_table, meta, key_columns).await?
        } else {
            target::open_replace(begun, target_table, meta).await?
        };
        let mut writer = match opened {
            Opened::Writer(writer) => writer,
            Opened::Refused => return Ok(None),
            Opened::Superseded(newer) => {
                let summary = WriteSummary {
                    rows: 0,
                    copied: 0,
                    checksum: String::new(),
                    rejected: 0,
                    superseded_by: Some(newer),
                };
                return Ok(Some(Ok((summary, head.dirty))));
            }
        };
        while let Some(piece) = pieces.recv().await {
            match piece? {
                Piece::Head(_) => break,
                Piece::Chunk(OutChunk {
                    rows,
                    rejections,
                    keys,
                    rejection_keys,
                }) => {
                    if merge {
                        writer.add_keys(keys, rejection_keys).await?;
                    }
                    writer.copy(&rows).await?;
                    writer.reject(&rejections).await?;
                }
                Piece::KeysDone => writer.delete_keys().await?,
                Piece::End(End { checksum, .. }) => {
                    let checksum = if merge { String::new() } else { checksum };
                    let summary = writer.commit(checksum).await?;
                    return Ok(Some(Ok((summary, head.dirty))));
                }
            }
        }
        // The job ended without its end: it failed (its error came first) or was lost.
        Err(crate::plugin::PluginError::Lost.into())
    }

    /// The bookkeeping after a committed write: metrics, the failure record, the
    /// dirty mark cleared if the stage still holds the generation written.
    pub(super) fn after_write(
        &self,
        table: &str,
        partition: &Partition,
        summary: &WriteSummary,
        dirty: Option<u64>,
    ) -> Result<(), PipelineError> {
        if summary.superseded_by.is_none() {
            metrics::partition_written(table, summary.copied, summary.rejected);
            self.live
                .rows_written
                .fetch_add(summary.copied, std::sync::atomic::Ordering::Relaxed);
        }
        if let Ok(mut failed) = self.failed.lock() {
            failed.remove(&(table.to_owned(), partition.clone()));
        }
        if self.writable && summary.superseded_by.is_none() {
            self.stage.clear_failure(table, partition)?;
        }
        if summary.rejected > 0 {
            tracing::warn!(table, partition = %partition, rejected = summary.rejected, "rows rejected by the plugin were written to weir.dead_letter");
        }
        if let Some(dirty) = dirty
            && self.writable
        {
            let cleared = self.stage.clear_dirty(table, partition, dirty)?;
            if !cleared {
                tracing::debug!(table, partition = %partition, "partition changed while written; it stays dirty");
            }
        }
        Ok(())
    }

    /// Hands a partition's output to `f` chunk by chunk, as a write would compute it,
    /// without writing it (for `verify`); returns the staged rows read.
    pub async fn for_each_output(
        &self,
        table: &str,
        partition: &Partition,
        mut f: impl FnMut(Vec<Vec<Value>>) + Send,
    ) -> Result<u64, PipelineError> {
        let mut pieces = self.stream(table, partition, Vec::new(), false, None)?;
        while let Some(piece) = pieces.recv().await {
            match piece? {
                Piece::Head(_) | Piece::KeysDone => {}
                Piece::Chunk(chunk) => f(chunk.rows),
                Piece::End(End { staged_rows, .. }) => return Ok(staged_rows),
            }
        }
        Err(crate::plugin::PluginError::Lost.into())
    }

    /// Like [`Self::for_each_output`], for the rows the source table holds now in
    /// `partition` (read from `source_dsn`) instead of the staged rows; the job's clock
    /// is still the staged partition's.
    pub async fn for_each_source_output(
        &self,
        table: &str,
        partition: &Partition,
        source_dsn: &Dsn,
        mut f: impl FnMut(Vec<Vec<Value>>) + Send,
    ) -> Result<u64, PipelineError> {
        let (table_config, target_table, transform) = self.table(table)?;
        let pred = crate::partition::predicate(
            table_config.partition_column().ty,
            table_config.grain,
            partition,
        )
        .and_then(|p| crate::target::read::partition_condition(&table_config.partition_by, &p))
        .ok_or_else(|| PipelineError::Table {
            config: self.config.path.clone(),
            table: table.to_owned(),
            field: "partition_by",
            message: format!("partition {partition} has no bounds SQL can state"),
        })?;
        let (rows_tx, mut rows_rx) = tokio::sync::mpsc::channel(2);
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let reader_table = table_config.clone();
        let dsn = source_dsn.clone();
        let reader = tokio::spawn(async move {
            crate::source::postgres::read_rows(
                &dsn,
                &reader_table,
                &pred,
                crate::target::read::FETCH_ROWS,
                rows_tx,
            )
            .await;
        });
        // Source rows as staged reads, for the job.
        let convert = tokio::spawn(async move {
            while let Some(chunk) = rows_rx.recv().await {
                let chunk = chunk
                    .map(|rows| {
                        rows.into_iter()
                            .map(|values| StagedRow {
                                commit_position: 0,
                                commit_time_us: None,
                                op: crate::feed::Op::Read,
                                values,
                            })
                            .collect()
                    })
                    .map_err(PipelineError::from);
                if tx.send(chunk).await.is_err() {
                    break;
                }
            }
        });
        let mut pieces = stream::spawn(StreamJob {
            stage: self.stage_arc(),
            table: table_config.clone(),
            target_name: target_table.name.to_string(),
            transform: transform.clone(),
            partition: partition.clone(),
            merge: false,
            merge_if_cheaper: false,
            only_if_dirty: false,
            key_columns: Vec::new(),
            input: Some(std::sync::Mutex::new(rx)),
            resyncs: false,
            group: None,
        })?;
        let mut result = Err(crate::plugin::PluginError::Lost.into());
        while let Some(piece) = pieces.recv().await {
            match piece {
                Err(e) => {
                    result = Err(e);
                    break;
                }
                Ok(Piece::Head(_) | Piece::KeysDone) => {}
                Ok(Piece::Chunk(chunk)) => f(chunk.rows),
                Ok(Piece::End(End { staged_rows, .. })) => {
                    result = Ok(staged_rows);
                    break;
                }
            }
        }
        reader.abort();
        convert.abort();
        result
    }

    /// The partitions the source table holds now (read from `source_dsn`), named as
    /// staging names them: the distinct partition-column values (for a time grain,
    /// truncated to it in SQL, over `[from, to)` only), decoded as the stream decodes
    /// them and put through `partition_of`. The caller keeps those in its window.
    pub async fn source_partitions(
        &self,
        table: &str,
        from: &str,
        to: &str,
        source_dsn: &Dsn,
    ) -> Result<Vec<Partition>, PipelineError> {
        let (config, _, _) = self.table(table)?;
        self.partitions_in(table, config, from, to, source_dsn)
            .await
    }

    /// The partitions the target table of `table` holds rows of in `[from, to)`, as
    /// [`Self::source_partitions`] finds the source's, by the target's partition
    /// column (a plugin's may have another name than the source's).
    pub async fn target_partitions(
        &self,
        table: &str,
        from: &str,
        to: &str,
    ) -> Result<Vec<Partition>, PipelineError> {
        let (config, target, _) = self.table(table)?;
        let mut view = config.clone();
        view.source = target.name.clone();
        if target.partition_column != config.partition_by {
            let mut column = config.partition_column().clone();
            column.name = target.partition_column.clone();
            column.ty = target.partition_type;
            view.partition_by = column.name.clone();
            view.columns = vec![column];
        }
        self.partitions_in(table, &view, from, to, &self.dsn)
            .await
            .map_err(|e| match e {
                // Read from the target, whatever the shared reader calls it.
                PipelineError::PgSource(crate::source::postgres::PgSourceError::Query {
                    source,
                    ..
                }) => target::TargetError::Query {
                    what: format!("list the partitions {} holds", target.name),
                    source,
                }
                .into(),
                e => e,
            })
    }

    /// The distinct partitions of the table `config.source` names, at `dsn`.
    async fn partitions_in(
        &self,
        table: &str,
        config: &crate::config::TableConfig,
        from: &str,
        to: &str,
        dsn: &Dsn,
    ) -> Result<Vec<Partition>, PipelineError> {
        use crate::partition::{Grain, PartitionPredicate, partition_of, predicate};
        let column = crate::config::quote_ident(&config.partition_by);
        let ty = config.partition_column().ty;
        let bad_window = || PipelineError::Table {
            config: self.config.path.clone(),
            table: table.to_owned(),
            field: "partition_by",
            message: format!("the window [{from}, {to}) has no bounds SQL can state"),
        };
        let (expr, as_timestamp, condition) = match config.grain {
            Grain::Value => (column.clone(), false, "true".to_owned()),
            grain => {
                let unit = match grain {
                    Grain::Hour => "hour",
                    Grain::Day => "day",
                    _ => "month",
                };
                let lower = |name: &str| match predicate(ty, grain, &Partition::Key(name.into())) {
                    Some(PartitionPredicate::Range { lower, .. }) => Some(lower),
                    _ => None,
                };
                let range = PartitionPredicate::Range {
                    lower: lower(from).ok_or_else(bad_window)?,
                    upper: lower(to).ok_or_else(bad_window)?,
                };
                let condition =
                    crate::target::read::partition_condition(&config.partition_by, &range)
                        .ok_or_else(bad_window)?;
                // Truncated as a `timestamp` (a timestamptz in the session's UTC): the
                // name `partition_of` gives it is the partition's.
                (
                    format!("date_trunc('{unit}', {column}::timestamp)"),
                    true,
                    condition,
                )
            }
        };
        let values =
            crate::source::postgres::distinct_values(dsn, config, &expr, &condition, as_timestamp)
                .await?;
        let out = values
            .iter()
            .filter_map(|v| partition_of(&config.partition_by, config.grain, v).ok())
            .collect();
        Ok(out)
    }

    /// Rewrites the given partitions of `table` from the stage, dirty or not. The
    /// partition set is the caller's parameter.
    pub async fn rewrite_partitions(
        &self,
        table: &str,
        partitions: &[Partition],
    ) -> Result<Vec<WriteSummary>, PipelineError> {
        let mut out = Vec::with_capacity(partitions.len());
        for p in partitions {
            if let Some(summary) = self.write_partition(table, p, false).await? {
                out.push(summary);
            }
        }
        Ok(out)
    }

    pub(super) async fn client(&self) -> Result<Client, PipelineError> {
        let pooled = self.clients.lock().await.pop();
        match pooled {
            Some(c) if !c.is_closed() => Ok(c),
            Some(_) => {
                let client = target::connect(&self.dsn).await?;
                self.lost_target();
                Ok(client)
            }
            None => Ok(target::connect(&self.dsn).await?),
        }
    }

    /// Notes a target connection found closed: the target may have been restored from
    /// a backup before it came back, which its lineage tells (checked by `run`).
    pub(super) fn lost_target(&self) {
        self.target_reconnected
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether `error` says the target connection it was made on is gone: closed, or ended
/// by the server (SQLSTATE class 57, operator intervention: a shutdown, a terminated
/// backend; or class 08, connection exception).
pub(super) fn connection_lost(error: &PipelineError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        let pg = e
            .downcast_ref::<crate::pgerror::PgError>()
            .map(|p| &p.0)
            .or_else(|| e.downcast_ref::<tokio_postgres::Error>());
        if let Some(pg) = pg
            && (pg.is_closed()
                || pg
                    .code()
                    .is_some_and(|c| c.code().starts_with("57") || c.code().starts_with("08")))
        {
            return true;
        }
        next = e.source();
    }
    false
}
