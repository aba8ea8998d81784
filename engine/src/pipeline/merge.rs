//! The merge of a dirty partition (`write = "merge"`): the transform runs over the
//! rows of the keys changed since the last write, and the target replaces those keys'
//! rows only.

use std::sync::Arc;

use super::{PartitionOutput, Pipeline, PipelineError, blocking};
use crate::feed::encode_key;
use crate::partition::Partition;
use crate::plugin;
use crate::target::{MergeKeys, WriteSummary};
use crate::value::Value;

/// What a merge of a dirty partition came to.
#[derive(Debug)]
pub(super) enum Merge {
    /// Not dirty (another job wrote it).
    Clean,
    Merged(WriteSummary),
    /// Replace it instead: every key changed, or lineage names another transform.
    Replace,
}

impl Pipeline {
    /// Merges a dirty partition: the transform runs over the rows of the keys changed
    /// since its last write, and the target replaces those keys' rows only.
    pub(super) async fn merge_partition(
        &self,
        table: &str,
        partition: &Partition,
    ) -> Result<Merge, PipelineError> {
        let (table_config, target_table, _) = self.table(table)?;
        let stage = Arc::clone(&self.stage);
        let (t, p) = (table.to_owned(), partition.clone());
        let changes = blocking(move || stage.read_changes(&t, &p)).await?;
        if changes.dirty.is_none() {
            return Ok(Merge::Clean);
        }
        if changes.whole {
            return Ok(Merge::Replace);
        }
        let mut keys = Vec::with_capacity(changes.keys.len());
        let mut rows = Vec::new();
        let mut changed = std::collections::HashSet::with_capacity(changes.keys.len());
        for (key, row) in changes.keys {
            keys.push(crate::stage::decode_key(&key).map_err(crate::stage::StageError::from)?);
            rows.extend(row);
            changed.insert(key);
        }
        let staged_rows = rows.len() as u64;
        let (rows, rejections) = self.transform(table, partition, rows).await?;
        // The target columns of the key, which `check_write_mode` made the grain key.
        let columns = table_config
            .key
            .iter()
            .map(|k| target_table.columns.iter().position(|(name, _)| name == k))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| PipelineError::Table {
                config: self.config.path.clone(),
                table: table.to_owned(),
                field: "write",
                message: "merge needs every key column in the target table".into(),
            })?;
        for row in &rows {
            let grain: Vec<&Value> = columns.iter().map(|&c| &row[c]).collect();
            let known = encode_key(&grain)
                .map(|k| changed.contains(&k))
                .unwrap_or(false);
            if !known {
                return Err(PipelineError::MergeKey {
                    table: table.to_owned(),
                    partition: partition.to_string(),
                    key: plugin::json::key_text(&grain.into_iter().cloned().collect::<Vec<_>>()),
                });
            }
        }
        let merge = MergeKeys {
            columns,
            rejection_keys: keys.iter().map(|k| plugin::json::key_text(k)).collect(),
            keys,
        };
        let output = PartitionOutput {
            rows,
            rejections,
            generation: changes.generation,
            source_position: changes.checkpoint.position,
            dirty: changes.dirty,
            staged_rows,
        };
        Ok(
            match self
                .write_computed(table, partition, output, Some(&merge))
                .await?
            {
                Some(summary) => Merge::Merged(summary),
                None => Merge::Replace,
            },
        )
    }
}
