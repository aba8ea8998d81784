//! Lineage: `weir.partitions`, one row per written partition, upserted in the
//! partition's write transaction; the checks that compare it with the config (which
//! partitions a plugin or config change left stale); and `weir.backfills`, the record
//! of each backfill window (an unfinished one is resumed).

use std::collections::BTreeMap;

use postgres_types::{ToSql, Type};
use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Row, Transaction};

use super::{PartitionMeta, TargetError, TargetTable, WriteSummary, query_err};
use crate::config::{TableConfig, TableName, WriteMode};
use crate::pgerror::PgError;

/// The columns of a lineage row, in the order [`PartitionLineage::from_row`] reads.
const LINEAGE_COLUMNS: &str = "target_table, partition, stage_generation, source_position, transform, row_count, checksum, \
     plugin_sha256, config_hash, to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
     (extract(epoch FROM written_at) * 1000000)::bigint, write_mode, stage_id";

/// What lineage says of one written partition: its row in `weir.partitions` (shown by
/// `status`, compared with the config by `backfill`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionLineage {
    pub target_table: String,
    pub partition: String,
    pub stage_generation: i64,
    pub source_position: i64,
    pub transform: String,
    pub row_count: i64,
    pub checksum: String,
    pub plugin_sha256: Option<String>,
    pub config_hash: Option<String>,
    /// When, by the target's clock, as ISO 8601 UTC text.
    pub written_at: String,
    /// When, in microseconds since the epoch, by the target's clock.
    #[serde(skip)]
    pub written_at_us: i64,
    /// `replace` or `merge` (a merged partition has no checksum).
    pub write_mode: String,
    /// The stage that wrote it (`None`: a build before stages had an identity).
    pub stage_id: Option<String>,
}

impl PartitionLineage {
    /// A row selected with [`LINEAGE_COLUMNS`].
    fn from_row(r: &Row) -> PartitionLineage {
        PartitionLineage {
            target_table: r.get(0),
            partition: r.get(1),
            stage_generation: r.get(2),
            source_position: r.get(3),
            transform: r.get(4),
            row_count: r.get(5),
            checksum: r.get(6),
            plugin_sha256: r.get(7),
            config_hash: r.get(8),
            written_at: r.get(9),
            written_at_us: r.get(10),
            write_mode: r.get(11),
            stage_id: r.get(12),
        }
    }
}

/// A table's plugin could not be read to compare it with lineage.
#[derive(Debug, thiserror::Error)]
#[error("cannot read plugin {path} to compare it with lineage")]
pub struct ReadPluginError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The plugin sha256 and config hash the config asks for (none: identity), as lineage
/// records them.
pub fn expected_transform(
    table: &TableConfig,
) -> Result<(Option<String>, Option<String>), ReadPluginError> {
    let Some(plugin) = &table.plugin else {
        return Ok((None, None));
    };
    let bytes = std::fs::read(&plugin.path).map_err(|source| ReadPluginError {
        path: plugin.path.clone(),
        source,
    })?;
    Ok((
        Some(hex::encode(Sha256::digest(&bytes))),
        Some(crate::plugin::config_hash(&plugin.config)),
    ))
}

/// Whether lineage was written by another plugin or config than `expected`.
pub fn is_stale(lineage: &PartitionLineage, expected: &(Option<String>, Option<String>)) -> bool {
    lineage.plugin_sha256 != expected.0 || lineage.config_hash != expected.1
}

/// Upserts the partition's lineage row.
pub(super) async fn record(
    tx: &Transaction<'_>,
    table: &TargetTable,
    write: &PartitionMeta<'_>,
    summary: &WriteSummary,
    mode: WriteMode,
) -> Result<(), TargetError> {
    let text = Type::TEXT;
    let target_table = table.name.to_string();
    let generation = i64::try_from(write.generation).unwrap_or(i64::MAX);
    let position = i64::try_from(write.source_position).unwrap_or(i64::MAX);
    let rows = i64::try_from(summary.rows).unwrap_or(i64::MAX);
    tx.execute_typed(
        "INSERT INTO weir.partitions AS p (target_table, partition, source_table, stage_generation, source_position, transform, row_count, checksum, plugin_sha256, config_hash, write_mode, stage_id, partition_by, written_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now()) \
         ON CONFLICT (target_table, partition) DO UPDATE SET source_table = EXCLUDED.source_table, stage_id = EXCLUDED.stage_id, partition_by = EXCLUDED.partition_by, \
           stage_generation = EXCLUDED.stage_generation, source_position = EXCLUDED.source_position, \
           transform = EXCLUDED.transform, row_count = EXCLUDED.row_count, checksum = EXCLUDED.checksum, \
           plugin_sha256 = EXCLUDED.plugin_sha256, config_hash = EXCLUDED.config_hash, \
           write_mode = EXCLUDED.write_mode, written_at = EXCLUDED.written_at",
        &[
            (&target_table as &(dyn ToSql + Sync), text.clone()),
            (&write.partition.name(), text.clone()),
            (&write.source_table, text.clone()),
            (&generation, Type::INT8),
            (&position, Type::INT8),
            (&write.transform, text.clone()),
            (&rows, Type::INT8),
            (&summary.checksum, text.clone()),
            (&write.plugin_sha256, text.clone()),
            (&write.config_hash, text.clone()),
            (&mode.as_str(), text.clone()),
            (&write.stage_id, text.clone()),
            (&table.partition_column, text),
        ],
    )
    .await
    .map_err(|source| match source.code() {
        Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => TargetError::MissingWeirSchema,
        _ => TargetError::Query { what: "record lineage".into(), source: PgError(source) },
    })?;
    Ok(())
}

/// Upserts the lineage rows of merges written in one transaction (a group: one source
/// table, transform, plugin and config), in one statement.
pub(super) async fn record_merges(
    tx: &Transaction<'_>,
    table: &TargetTable,
    written: &[(PartitionMeta<'_>, &WriteSummary)],
) -> Result<(), TargetError> {
    let Some((first, _)) = written.first() else {
        return Ok(());
    };
    let partitions: Vec<std::borrow::Cow<'_, str>> =
        written.iter().map(|(m, _)| m.partition.name()).collect();
    let generations: Vec<i64> = written
        .iter()
        .map(|(m, _)| i64::try_from(m.generation).unwrap_or(i64::MAX))
        .collect();
    let positions: Vec<i64> = written
        .iter()
        .map(|(m, _)| i64::try_from(m.source_position).unwrap_or(i64::MAX))
        .collect();
    let rows: Vec<i64> = written
        .iter()
        .map(|(_, s)| i64::try_from(s.rows).unwrap_or(i64::MAX))
        .collect();
    let text = Type::TEXT;
    let target_table = table.name.to_string();
    tx.execute_typed(
        "INSERT INTO weir.partitions AS p (target_table, partition, source_table, stage_generation, source_position, transform, row_count, checksum, plugin_sha256, config_hash, write_mode, stage_id, partition_by, written_at) \
         SELECT $1, u.partition, $2, u.generation, u.position, $3, u.row_count, '', $4, $5, $6, $11, $12, now() \
         FROM unnest($7::text[], $8::bigint[], $9::bigint[], $10::bigint[]) AS u(partition, generation, position, row_count) \
         ON CONFLICT (target_table, partition) DO UPDATE SET source_table = EXCLUDED.source_table, stage_id = EXCLUDED.stage_id, partition_by = EXCLUDED.partition_by, \
           stage_generation = EXCLUDED.stage_generation, source_position = EXCLUDED.source_position, \
           transform = EXCLUDED.transform, row_count = EXCLUDED.row_count, checksum = EXCLUDED.checksum, \
           plugin_sha256 = EXCLUDED.plugin_sha256, config_hash = EXCLUDED.config_hash, \
           write_mode = EXCLUDED.write_mode, written_at = EXCLUDED.written_at",
        &[
            (&target_table as &(dyn ToSql + Sync), text.clone()),
            (&first.source_table, text.clone()),
            (&first.transform, text.clone()),
            (&first.plugin_sha256, text.clone()),
            (&first.config_hash, text.clone()),
            (&WriteMode::Merge.as_str(), text),
            (&partitions, Type::TEXT_ARRAY),
            (&generations, Type::INT8_ARRAY),
            (&positions, Type::INT8_ARRAY),
            (&rows, Type::INT8_ARRAY),
            (&first.stage_id, Type::TEXT),
            (&table.partition_column, Type::TEXT),
        ],
    )
    .await
    .map_err(|source| match source.code() {
        Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => TargetError::MissingWeirSchema,
        _ => TargetError::Query { what: "record lineage".into(), source: PgError(source) },
    })?;
    Ok(())
}

/// The lineage of every partition of a target table, by partition name.
pub async fn table_lineage(
    client: &Client,
    table: &TableName,
) -> Result<BTreeMap<String, PartitionLineage>, TargetError> {
    let rows = client
        .query(
            &format!("SELECT {LINEAGE_COLUMNS} FROM weir.partitions WHERE target_table = $1"),
            &[&table.to_string()],
        )
        .await
        .map_err(query_err(format!("read the lineage of {table}")))?;
    Ok(rows
        .iter()
        .map(PartitionLineage::from_row)
        .map(|l| (l.partition.clone(), l))
        .collect())
}

/// The most recent partition writes into `tables` (target names).
pub async fn recent_writes(
    client: &Client,
    tables: &[String],
    limit: i64,
) -> Result<Vec<PartitionLineage>, TargetError> {
    let rows = client
        .query(
            &format!(
                "SELECT {LINEAGE_COLUMNS} FROM weir.partitions WHERE target_table = ANY($2) \
                 ORDER BY written_at DESC, target_table, partition LIMIT $1"
            ),
            &[&limit, &tables],
        )
        .await
        .map_err(|source| match source.code() {
            Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => {
                TargetError::MissingWeirSchema
            }
            _ => TargetError::Query {
                what: "read lineage".into(),
                source: PgError(source),
            },
        })?;
    Ok(rows.iter().map(PartitionLineage::from_row).collect())
}

/// Starts (or, with `resume`, resumes) the backfill of a window: returns when it
/// started, in microseconds by the target's clock (an unfinished earlier run's start:
/// resumed), and whether it resumed one.
pub async fn begin_backfill(
    client: &Client,
    table: &TableName,
    from: &str,
    to: &str,
    resume: bool,
) -> Result<(i64, bool), TargetError> {
    let row = client
        .query_one(
            "INSERT INTO weir.backfills (target_table, window_from, window_to, started_at) VALUES ($1, $2, $3, now()) \
             ON CONFLICT (target_table, window_from, window_to) DO UPDATE SET \
               started_at = CASE WHEN weir.backfills.finished_at IS NULL AND $4 THEN weir.backfills.started_at ELSE now() END, \
               finished_at = NULL \
             RETURNING (extract(epoch FROM started_at) * 1000000)::bigint, started_at < now()",
            &[&table.to_string(), &from, &to, &resume],
        )
        .await
        .map_err(query_err("record the backfill"))?;
    Ok((row.get(0), row.get(1)))
}

/// Marks the backfill of a window finished.
pub async fn finish_backfill(
    client: &Client,
    table: &TableName,
    from: &str,
    to: &str,
) -> Result<(), TargetError> {
    client
        .execute(
            "UPDATE weir.backfills SET finished_at = now() WHERE target_table = $1 AND window_from = $2 AND window_to = $3",
            &[&table.to_string(), &from, &to],
        )
        .await
        .map_err(query_err("record the end of the backfill"))?;
    Ok(())
}

/// Records which source the stage `stage_id` reads (`weir.stages`), for the guard
/// against two pipelines writing one target table.
pub async fn register_stage(
    client: &Client,
    stage_id: &str,
    source: &str,
) -> Result<(), TargetError> {
    client
        .execute(
            "INSERT INTO weir.stages (stage_id, source) VALUES ($1, $2) \
             ON CONFLICT (stage_id) DO UPDATE SET source = EXCLUDED.source \
             WHERE weir.stages.source IS DISTINCT FROM EXCLUDED.source",
            &[&stage_id, &source],
        )
        .await
        .map_err(query_err("record the stage's source"))?;
    Ok(())
}

/// The source each registered stage reads, by stage id.
pub async fn stage_sources(
    client: &Client,
) -> Result<std::collections::HashMap<String, String>, TargetError> {
    Ok(client
        .query("SELECT stage_id, source FROM weir.stages", &[])
        .await
        .map_err(query_err("read the stages' sources"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}
