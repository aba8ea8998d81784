//! Weir's consumers of one round of the replication section: slot → stage in this
//! process, draining the slot the way the pipeline stages, and `run --once` into a
//! target database (its config and database; `child.rs` runs it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::config::{Config, Dsn, SourceConfig, TableConfig};
use weir::source::postgres::{PostgresSource, PostgresSourceOptions, source_columns};
use weir::source::{ChangeSource, SourceEvent, Transaction};
use weir::stage::{ApplyOutcome, Stage};
use weir_core::fixtures::{OrdersTable, postgres_config_with};

use super::REPL_PUBLICATION;
use crate::cluster::{SOURCE_DSN_ENV, TARGET_DSN_ENV, connect};

/// The Weir config of one consumer of the workload.
pub(crate) fn replication_config(slot: &str) -> String {
    postgres_config_with(
        SOURCE_DSN_ENV,
        TARGET_DSN_ENV,
        slot,
        REPL_PUBLICATION,
        "",
        &OrdersTable::postgres("analytics.fact_orders").to_string(),
    )
}

/// What draining a slot into a stage did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Drained {
    pub(crate) outcome: ApplyOutcome,
    /// Synced group commits, and the time spent in them (the source is not read meanwhile).
    pub(crate) writes: u32,
    pub(crate) write_time: Duration,
}

/// Applies a group of whole transactions in one synced write, then acknowledges the
/// source (the pipeline's `stage_batch`).
async fn stage_group(
    source: &mut PostgresSource,
    stage: &Arc<Stage>,
    batch: &mut Vec<Transaction>,
    total: &mut Drained,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let txns = std::mem::take(batch);
    let s = Arc::clone(stage);
    let started = Instant::now();
    let outcome = tokio::task::spawn_blocking(move || s.apply(&txns)).await??;
    total.write_time += started.elapsed();
    total.writes += 1;
    total.outcome.transactions += outcome.transactions;
    total.outcome.changes += outcome.changes;
    total.outcome.skipped += outcome.skipped;
    if let Some(checkpoint) = stage.checkpoint()? {
        source.acknowledge(checkpoint).await?;
    }
    Ok(())
}

/// Drains a slot (`once`) into `stage` the way the pipeline stages: chunks of a large
/// transaction to the pending area after the whole transactions before them, whole
/// transactions in synced groups of up to `batch_max`, each group acknowledged after
/// its write; also on `Idle` and at the end. Includes opening the source (connect,
/// slot check, drain mark, `START_REPLICATION`).
async fn drain_slot_into_stage(
    dsn: &Dsn,
    options: &PostgresSourceOptions,
    tables: Vec<TableConfig>,
    stage: &Arc<Stage>,
    batch_max: usize,
) -> anyhow::Result<Drained> {
    let checkpoint = stage.checkpoint()?;
    let mut source = PostgresSource::open(dsn, options, tables, Arc::clone(stage), checkpoint)
        .await
        .context("open the PostgreSQL source")?;
    let mut total = Drained::default();
    let mut batch: Vec<Transaction> = Vec::new();
    let mut chunked = false;
    loop {
        match source.next().await? {
            SourceEvent::Chunk(changes) => {
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.append_pending(&changes)).await??;
                chunked = true;
            }
            SourceEvent::Abort => {
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.discard_pending()).await??;
                chunked = false;
            }
            SourceEvent::StreamChunk { xid, changes } => {
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.append_stream(xid, &changes)).await??;
            }
            SourceEvent::StreamDiscard { xid } => {
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.discard_stream(xid)).await??;
            }
            SourceEvent::StreamCommit(commit) => {
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
                let s = Arc::clone(stage);
                let (xid, aborted) = (commit.xid, commit.aborted.clone());
                let (position, time) = (commit.commit_position, commit.commit_time_us);
                tokio::task::spawn_blocking(move || s.stage_stream(xid, &aborted, position, time))
                    .await??;
                batch.push(commit.transaction());
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
            }
            SourceEvent::Transaction(txn) => {
                batch.push(txn);
                if std::mem::take(&mut chunked) || batch.len() >= batch_max {
                    stage_group(&mut source, stage, &mut batch, &mut total).await?;
                }
            }
            SourceEvent::Idle => stage_group(&mut source, stage, &mut batch, &mut total).await?,
            SourceEvent::End => {
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
                return Ok(total);
            }
        }
    }
}

/// Weir's slot → stage consumer of one round.
pub(crate) struct StageConsumer {
    _dir: tempfile::TempDir,
    pub(crate) stage: Arc<Stage>,
    pub(crate) options: PostgresSourceOptions,
    tables: Vec<TableConfig>,
    pub(crate) batch_max: usize,
}

impl StageConsumer {
    /// Creates the slot and a new stage, and drains the slot once while the table is
    /// still empty: the stage then holds the (empty) initial snapshot's completion, as
    /// a Weir that has been running before the backlog built up would.
    pub(crate) async fn new(source_dsn: &Dsn, slot: &str) -> anyhow::Result<StageConsumer> {
        let dir = tempfile::tempdir()?;
        let config_path = dir.path().join("weir.toml");
        std::fs::write(&config_path, replication_config(slot))?;
        let config = Config::load(&config_path)?;
        let client = connect(source_dsn.expose()).await?;
        client
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .context("create a slot")?;
        let mut tables = Vec::with_capacity(config.tables.len());
        for table in &config.tables {
            let columns = source_columns(&client, &table.source).await?;
            tables.push(
                table
                    .with_columns(columns)
                    .map_err(|(field, message)| anyhow::anyhow!("{field}: {message}"))?,
            );
        }
        let SourceConfig::Postgres {
            snapshot_chunk_rows,
            heartbeat_interval_ms,
            ..
        } = &config.source
        else {
            anyhow::bail!("the replication config is not a PostgreSQL source");
        };
        let options = PostgresSourceOptions {
            slot: slot.to_owned(),
            publication: REPL_PUBLICATION.to_owned(),
            once: true,
            chunk_changes_max: config.engine.transaction_chunk_changes,
            snapshot_chunk_rows: *snapshot_chunk_rows,
            snapshot_parallelism: 2,
            snapshot_method: weir::config::SnapshotMethod::Export,
            load_watch: None,
            heartbeat_interval_ms: *heartbeat_interval_ms,
            primary: None,
            streaming: true,
            binary: true,
            catalog_lsn: 0,
        };
        let stage = Arc::new(Stage::open(&config.stage_path, &config.source_id())?);
        let consumer = StageConsumer {
            _dir: dir,
            stage,
            options,
            tables,
            batch_max: config.engine.batch_transactions_max,
        };
        let before = consumer.drain(source_dsn).await?;
        anyhow::ensure!(
            before.outcome.changes <= 1,
            "the first drain of an empty table staged {} changes",
            before.outcome.changes
        );
        Ok(consumer)
    }

    pub(crate) async fn drain(&self, source_dsn: &Dsn) -> anyhow::Result<Drained> {
        drain_slot_into_stage(
            source_dsn,
            &self.options,
            self.tables.clone(),
            &self.stage,
            self.batch_max,
        )
        .await
    }
}

/// Weir's `run --once` consumer of one round: its config and target database.
pub(crate) struct PipelineConsumer {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) target_db: String,
}
