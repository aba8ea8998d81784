//! `status`: what the stage, the source's slot and the target's lineage say, read
//! beside a running engine.

use super::init::postgres_dsn;
use super::{PipelineError, blocking};
use crate::config::{Config, Dsn, SourceConfig, TableConfig};
use crate::errors::error_chain;
use crate::partition::Grain;
use crate::source::postgres;
use crate::stage::Stage;
use crate::target;
use crate::value::ColumnType;

/// What `status` shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub stage: String,
    /// The stage's id, as claims and lineage name it.
    pub stage_id: String,
    /// Configured target tables another stage or pipeline claims (`weir.claims`):
    /// this one writes them no more.
    pub claimed_by_others: Vec<target::claims::ClaimStatus>,
    pub source: Option<String>,
    pub position: Option<u64>,
    pub staged_rows: std::collections::BTreeMap<String, u64>,
    /// Size of the stage's files on disk, in bytes.
    pub stage_size_bytes: u64,
    /// Bytes of changes staged but not yet written to the target, and the
    /// `[stage] max_unwritten_mb` limit in bytes; at the limit intake pauses.
    pub unwritten_bytes: u64,
    pub max_unwritten_bytes: Option<u64>,
    pub intake_paused: bool,
    pub dirty_partitions: Vec<DirtyStatus>,
    /// Partitions whose last write failed for good (a plugin's verdict): they are
    /// retried when they change.
    pub failed_partitions: Vec<FailedStatus>,
    pub pending_dead_letters: usize,
    pub last_writes: Vec<target::PartitionLineage>,
    /// Partitions written by another plugin or config than the config's now
    /// (`weir backfill --stale` rebuilds them).
    pub stale_partitions: Vec<StaleStatus>,
    /// Why `last_writes` could not be read, if it could not.
    pub target_error: Option<String>,
    /// PostgreSQL source: the slot's `wal_status` and the WAL it holds back, in bytes.
    pub slot_wal_status: Option<String>,
    pub slot_lag_bytes: Option<i64>,
    /// PostgreSQL 17 and later: whether the slot is a failover slot, and the server's
    /// `synchronized_standby_slots` (the standbys logical decoding waits for).
    pub slot_failover: Option<bool>,
    pub synchronized_standby_slots: Option<String>,
    /// A source DSN listing several hosts: what each holds of the slot (a standby's
    /// synchronized copy is what a promotion needs).
    pub slot_hosts: Vec<postgres::HostSlot>,
    /// Why the slot could not be read, if it could not.
    pub source_error: Option<String>,
    /// PostgreSQL source: how far the initial snapshot (first load or watermarks) got
    /// with each table.
    pub snapshot: Vec<postgres::SnapshotTable>,
    /// What a run of this config may hold in memory, by part (bytes).
    pub memory_budget: crate::config::MemoryBudget,
    /// `[engine] memory_limit_mb` in bytes, if set.
    pub memory_limit_bytes: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FailedStatus {
    pub table: String,
    pub partition: String,
    pub generation: u64,
    pub error: String,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct StaleStatus {
    pub table: String,
    pub partition: String,
    /// What lineage says wrote it (`None`: the identity).
    pub plugin_sha256: Option<String>,
    pub config_hash: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DirtyStatus {
    pub table: String,
    pub partition: String,
    pub generation: u64,
}

/// Reads the status from the stage (read-only, so it works beside a running `weir
/// run`) and the target's lineage.
pub async fn status(config: &Config, dsn: &Dsn, last_writes: i64) -> Result<Status, PipelineError> {
    let path = config.stage_path.clone();
    let stage = blocking(move || Stage::open_read_only(&path)).await?;
    let checkpoint = stage.checkpoint()?;
    let dirty = stage.dirty_partitions()?;
    let unwritten_bytes = stage.unwritten_bytes()?;
    let mut status = Status {
        stage: config.stage_path.display().to_string(),
        memory_budget: config.memory_budget(),
        memory_limit_bytes: config.engine.memory_limit_bytes,
        source: stage.source_id()?,
        position: checkpoint.map(|c| c.position),
        staged_rows: stage.row_counts()?,
        stage_size_bytes: crate::stage::checkpoint::dir_size(&config.stage_path).unwrap_or(0),
        unwritten_bytes,
        max_unwritten_bytes: config.stage_max_unwritten_bytes,
        intake_paused: config
            .stage_max_unwritten_bytes
            .is_some_and(|limit| unwritten_bytes >= limit),
        dirty_partitions: dirty
            .into_iter()
            .map(|d| DirtyStatus {
                table: d.table,
                partition: d.partition.to_string(),
                generation: d.generation,
            })
            .collect(),
        failed_partitions: stage
            .failures()?
            .into_iter()
            .map(|f| FailedStatus {
                table: f.table,
                partition: f.partition.to_string(),
                generation: f.generation,
                error: f.error,
            })
            .collect(),
        pending_dead_letters: stage.dead_letters(usize::MAX)?.len(),
        last_writes: Vec::new(),
        stale_partitions: Vec::new(),
        stage_id: stage.stage_id()?,
        claimed_by_others: Vec::new(),
        target_error: None,
        slot_wal_status: None,
        slot_lag_bytes: None,
        slot_failover: None,
        synchronized_standby_slots: None,
        slot_hosts: Vec::new(),
        source_error: None,
        snapshot: Vec::new(),
    };
    if let SourceConfig::Postgres { slot, .. } = &config.source {
        let tables: Vec<String> = config.tables.iter().map(|t| t.source.to_string()).collect();
        status.snapshot = postgres::snapshot_tables(stage.source_state()?.as_deref(), &tables);
        let slot_status = async {
            let client = postgres::connect(&postgres_dsn(config)?).await?;
            Ok::<_, PipelineError>(postgres::slot_status(&client, slot).await?)
        };
        match slot_status.await {
            Ok(Some(found)) => {
                status.slot_wal_status = Some(found.wal_status);
                status.slot_lag_bytes = Some(found.lag_bytes);
                status.slot_failover = found.failover;
                status.synchronized_standby_slots = found.synchronized_standby_slots;
                if let Ok(dsn) = postgres_dsn(config) {
                    status.slot_hosts = postgres::slot_on_each_host(&dsn, slot).await;
                }
            }
            Ok(None) => {
                status.source_error = Some(format!("replication slot `{slot}` does not exist"))
            }
            Err(e) => status.source_error = Some(error_chain(&e)),
        }
    }
    // A target that accepts connections but never answers (frozen, a network black
    // hole) is reported, not waited for.
    let answered = tokio::time::timeout(STATUS_TARGET_WAIT, async {
        match target::connect(dsn).await {
            Ok(client) => {
                // A lineage table locked by someone else (a `VACUUM FULL`, a `LOCK`) is
                // reported, not waited for: status is what one runs to find out why.
                if let Err(e) = client
                    .batch_execute("SET lock_timeout = '3s'; SET statement_timeout = '30s'")
                    .await
                {
                    status.target_error = Some(e.to_string());
                }
                // This config's tables only: other pipelines write the same database.
                let targets: Vec<String> =
                    config.tables.iter().map(|t| t.target.to_string()).collect();
                match target::claims::others(&client, &targets, &status.stage_id).await {
                    Ok(claims) => status.claimed_by_others = claims,
                    Err(e) => status.target_error = Some(error_chain(&e)),
                }
                match target::recent_writes(&client, &targets, last_writes).await {
                    Ok(rows) => status.last_writes = rows,
                    Err(e) => status.target_error = Some(error_chain(&e)),
                }
                for table in &config.tables {
                    let expected = match target::expected_transform(table) {
                        Ok(e) => e,
                        Err(e) => {
                            status.target_error = Some(error_chain(&e));
                            continue;
                        }
                    };
                    match target::table_lineage(&client, &table.target).await {
                        Ok(lineage) => status.stale_partitions.extend(
                            lineage
                                .into_iter()
                                // A partition of another grain (written before the grain
                                // changed, with another stage) is not one a backfill
                                // rebuilds: the run empties its span instead.
                                .filter(|(partition, l)| {
                                    target::is_stale(l, &expected)
                                        && crate::partition::predicate(
                                            naming_type(table),
                                            table.grain,
                                            &crate::partition::Partition::from_name(partition),
                                        )
                                        .is_some()
                                })
                                .map(|(partition, l)| StaleStatus {
                                    table: table.target.to_string(),
                                    partition,
                                    plugin_sha256: l.plugin_sha256,
                                    config_hash: l.config_hash,
                                }),
                        ),
                        Err(e) => status.target_error = Some(error_chain(&e)),
                    }
                }
            }
            Err(e) => status.target_error = Some(error_chain(&e)),
        }
    })
    .await;
    if answered.is_err() {
        status.target_error = Some(format!(
            "no answer in {} s: the server is hung (frozen, out of resources) or the network drops its packets",
            STATUS_TARGET_WAIT.as_secs()
        ));
    }
    Ok(status)
}

/// How long `status` waits for the target to answer everything it asks.
const STATUS_TARGET_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The type partition names of `table` are read as. A PostgreSQL source's columns come
/// from its catalog when a pipeline opens, which `status` does not do: without a
/// declared partition column, a calendar grain's names read the same for a date or a
/// timestamp, and any name is a value of a `value` grain's text.
fn naming_type(table: &TableConfig) -> ColumnType {
    match table.column(&table.partition_by) {
        Some(column) => column.ty,
        None if table.grain == Grain::Value => ColumnType::Text,
        None => ColumnType::Timestamp,
    }
}
