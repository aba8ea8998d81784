//! One partition's write: read from the stage, transformed, replaced in the target
//! (or merged, see [`super::merge`]), then its dirty mark cleared if still current.

use std::sync::Arc;

use tokio_postgres::Client;

use super::merge::Merge;
use super::{PartitionOutput, Pipeline, PipelineError, Transform, blocking};
use crate::config::WriteMode;
use crate::metrics;
use crate::partition::Partition;
use crate::target::{self, MergeKeys, PartitionWrite, WriteSummary};

impl Pipeline {
    /// Writes one partition from the stage. With `only_if_dirty`, a partition whose
    /// mark another job already cleared is left alone (`Ok(None)`).
    pub async fn write_partition(
        &self,
        table: &str,
        partition: &Partition,
        only_if_dirty: bool,
    ) -> Result<Option<WriteSummary>, PipelineError> {
        let (table_config, _, _) = self.table(table)?;
        if only_if_dirty && self.writable && table_config.write == WriteMode::Merge {
            match self.merge_partition(table, partition).await? {
                Merge::Clean => return Ok(None),
                Merge::Merged(summary) => return Ok(Some(summary)),
                Merge::Replace => {}
            }
        }
        let Some(output) = self
            .compute_partition(table, partition, only_if_dirty)
            .await?
        else {
            return Ok(None);
        };
        self.write_output(table, partition, output).await.map(Some)
    }

    /// Reads a partition from the stage and runs the table's transform over it (a
    /// fresh plugin instance each time). With `only_if_dirty`, `None` for a clean one.
    pub async fn compute_partition(
        &self,
        table: &str,
        partition: &Partition,
        only_if_dirty: bool,
    ) -> Result<Option<PartitionOutput>, PipelineError> {
        self.table(table)?;
        let stage = Arc::clone(&self.stage);
        let (t, p) = (table.to_owned(), partition.clone());
        let read = blocking(move || stage.read_partition(&t, &p)).await?;
        if only_if_dirty && read.dirty.is_none() {
            return Ok(None);
        }
        let staged_rows = read.rows.len() as u64;
        let (rows, rejections) = self.transform(table, partition, read.rows).await?;
        Ok(Some(PartitionOutput {
            rows,
            rejections,
            generation: read.generation,
            source_position: read.checkpoint.position,
            dirty: read.dirty,
            staged_rows,
        }))
    }

    /// Writes a computed partition (see the target's invariant), then clears its dirty
    /// mark if the stage is writable and still holds the generation read.
    pub async fn write_output(
        &self,
        table: &str,
        partition: &Partition,
        output: PartitionOutput,
    ) -> Result<WriteSummary, PipelineError> {
        self.write_computed(table, partition, output, None)
            .await?
            .ok_or_else(|| PipelineError::UnknownTable(table.to_owned()))
    }

    /// Replaces the partition (`merge`: `None`) or merges the given keys; a merge that
    /// lineage refuses (`Ok(None)`) changed nothing.
    pub(super) async fn write_computed(
        &self,
        table: &str,
        partition: &Partition,
        output: PartitionOutput,
        merge: Option<&MergeKeys>,
    ) -> Result<Option<WriteSummary>, PipelineError> {
        let (_, target_table, transform) = self.table(table)?;
        let PartitionOutput {
            rows,
            rejections,
            generation,
            source_position,
            dirty,
            ..
        } = output;
        let (plugin_sha256, config_hash) = match transform {
            Transform::Identity => (None, None),
            Transform::Plugin {
                plugin,
                config_hash,
                ..
            } => (Some(plugin.sha256_hex()), Some(config_hash.as_str())),
        };
        let label = transform.label();
        let source_id = self.config.source_id();
        let write = PartitionWrite {
            source_id: &source_id,
            source_table: table,
            partition,
            generation,
            source_position,
            transform: &label,
            rows: &rows,
            plugin_sha256: plugin_sha256.as_deref(),
            config_hash,
            rejections: &rejections,
            skip_if_newer: !self.writable,
        };
        let mut client = self.client().await?;
        let result = match merge {
            None => target::replace_partition(&mut client, target_table, &write)
                .await
                .map(Some),
            Some(merge) => target::merge_partition(&mut client, target_table, &write, merge).await,
        };
        self.clients.lock().await.push(client);
        let Some(summary) = result? else {
            return Ok(None);
        };
        crate::failpoint!("target-after-commit");
        if summary.superseded_by.is_none() {
            metrics::partition_written(table, summary.copied, summary.rejected);
        }
        if let Ok(mut failed) = self.failed.lock() {
            failed.remove(&(table.to_owned(), partition.clone()));
        }
        if self.writable && summary.superseded_by.is_none() {
            self.stage.clear_failure(table, partition)?;
        }
        if !rejections.is_empty() {
            tracing::warn!(table, partition = %partition, rejected = rejections.len(), "rows rejected by the plugin were written to weir.dead_letter");
        }
        if let Some(dirty) = dirty
            && self.writable
        {
            let cleared = self.stage.clear_dirty(table, partition, dirty)?;
            if !cleared {
                tracing::debug!(table, partition = %partition, "partition changed while written; it stays dirty");
            }
        }
        Ok(Some(summary))
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
            _ => Ok(target::connect(&self.dsn).await?),
        }
    }
}
