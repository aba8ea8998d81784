//! The pipeline: tail the source, stage each committed transaction (synced), then
//! acknowledge the source; write dirty partitions to the target; clear a dirty mark
//! only when the generation written is still the newest.
//!
//! **Architecture Invariant**: [`ChangeSource::acknowledge`](crate::source::ChangeSource::acknowledge)
//! is called only after [`Stage::apply`] returned, i.e. after the staged batch is synced.
//!
//! **Architecture Invariant**: no partition set here is derived from the clock: live
//! mode writes the stage's dirty set; [`Pipeline::rewrite_partitions`] takes the
//! partitions as a parameter.
//!
//! The rooms, along the data:
//! - `init`: set up the source, the target tables and the stage; the table checks and
//!   the contracts that every open repeats.
//! - `intake`: the run loop, source → stage, with its backpressure (`[stage]
//!   max_unwritten_mb`) and source reconnects; live, it runs beside the `writer`, which
//!   starts a write round whenever it is free and something is dirty.
//! - the writer: `schedule` (write rounds, their backoff, dead letters), `stream` (one
//!   partition job: the stage read in chunks, transformed, checked), `write` (its
//!   stream into the partition's one transaction: a replace, or a merge of the
//!   changed keys), and `transform` (the identity, or the table's plugin).
//! - `status`: what `weir status` reads, beside a running engine.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::Mutex;
use tokio_postgres::Client;

use self::init::{
    check_write_mode, contract_of, read_again_whole, reconcile_contracts, refuse_foreign_lineage,
    resolve_tables, source_oids,
};
use crate::config::{Config, Dsn, SourceConfig, TableConfig};
use crate::partition::Partition;
use crate::plugin::PluginHost;
use crate::stage::{Stage, StageError};
use crate::target::{self, TargetTable};

mod error;
mod group;
mod init;
mod intake;
mod live;
mod schedule;
mod status;
mod stream;
mod transform;
mod write;
mod writer;

pub use crate::target::claims::ClaimStatus;
pub use error::PipelineError;
pub use init::{InitOptions, InitReport, init, init_with};
pub use live::LiveState;
pub use status::{DirtyStatus, FailedStatus, StaleStatus, Status, status};
pub use stream::{CHANNEL_CHUNKS, wait_for_partition_jobs};
pub use transform::{IDENTITY_TRANSFORM, Transform};

/// Counts of one `run`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RunReport {
    pub transactions: usize,
    pub changes: usize,
    pub skipped_transactions: usize,
    pub partitions_written: usize,
    pub rows_written: u64,
    pub dead_letters: usize,
    /// Partition writes that failed (they stay dirty).
    pub partitions_failed: usize,
    /// Rows the plugins rejected into `weir.dead_letter`.
    pub rows_rejected: u64,
    /// Times intake paused at `[stage] max_unwritten_mb`.
    pub intake_pauses: usize,
    /// Times the source connection was lost and opened again.
    pub source_reconnects: usize,
    /// The feed ended (a file read with `--once`, stdin closed).
    #[serde(skip)]
    pub fed_to_end: bool,
}

impl RunReport {
    /// Adds what the live writer did to intake's report.
    fn add_writes(&mut self, w: &RunReport) {
        self.partitions_written += w.partitions_written;
        self.rows_written += w.rows_written;
        self.dead_letters += w.dead_letters;
        self.partitions_failed += w.partitions_failed;
        self.rows_rejected += w.rows_rejected;
    }
}

/// A stage and a target, wired for one config.
pub struct Pipeline {
    config: Config,
    stage: Arc<Stage>,
    /// Target tables and transforms by source table name.
    tables: HashMap<String, (TableConfig, TargetTable, Transform)>,
    dsn: Dsn,
    clients: Mutex<Vec<Client>>,
    /// Partitions whose last write failed deterministically (a plugin's verdict), with
    /// the generation that failed: not retried until the partition changes.
    failed: std::sync::Mutex<HashMap<(String, Partition), u64>>,
    /// A PostgreSQL source's WAL position just before its catalog was read for
    /// `tables` (0 otherwise): see `Assembler::with_catalog_lsn`.
    catalog_lsn: u64,
    /// The source's identity (`init::Resolved::source`), registered in the target's
    /// `weir.stages` beside the stage id.
    source_identity: String,
    /// Tables whose plugin read a clock or drew random bytes in a merge: replaced
    /// whole from then on, in this process (see `PipelineError::MergeImpure`).
    replace_only: std::sync::Mutex<HashSet<String>>,
    /// Whether the stage is open for writing (`run`), or read-only beside a live engine
    /// (`backfill`, `verify`): then dirty marks are left to the engine, and a write
    /// never replaces a partition lineage says is newer.
    writable: bool,
    /// Intake's signal to the live writer that it staged something (see `writer`).
    write_wake: Arc<tokio::sync::Notify>,
    /// The tables a PostgreSQL first load is still reading: their partitions wait.
    load_watch: Arc<crate::source::postgres::LoadWatch>,
    /// What the run is doing now, for the operator (see `live`).
    live: Arc<live::LiveCounters>,
    /// The source stream met a column it cannot read in binary format: it is opened
    /// in text from then on.
    source_text_only: std::sync::atomic::AtomicBool,
    /// A target connection was found closed (pooled, or by the write that held it): a
    /// restart, a failover, a restore from a backup. `run` checks the target's lineage
    /// again, as at its start (see [`Pipeline::take_target_reconnected`]).
    target_reconnected: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("stage", &self.stage)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Opens the stage (which `init` created) and checks every target table.
    pub async fn open(config: Config, dsn: Dsn) -> Result<Pipeline, PipelineError> {
        Self::open_with(config, dsn, true).await
    }

    /// Opens the stage read-only, beside a `weir run` that may be live on it: for
    /// `backfill` and `verify`. It sees the stage as of opening.
    pub async fn open_read_only(config: Config, dsn: Dsn) -> Result<Pipeline, PipelineError> {
        Self::open_with(config, dsn, false).await
    }

    async fn open_with(
        mut config: Config,
        dsn: Dsn,
        writable: bool,
    ) -> Result<Pipeline, PipelineError> {
        // The target first: a mismatched table is the first thing to know.
        let mut clients = Vec::with_capacity(config.engine.parallelism);
        for _ in 0..config.engine.parallelism {
            clients.push(target::connect(&dsn).await?);
        }
        let init::Resolved {
            tables: tables_resolved,
            catalog_lsn,
            source: source_identity,
        } = resolve_tables(&config, clients.first()).await?;
        config.tables = tables_resolved;
        let host = plugin_host();
        let mut tables = HashMap::new();
        let oids = source_oids(&config, &config.tables).await?;
        let mut contracts = Vec::with_capacity(config.tables.len());
        for (table, oid) in config.tables.iter().zip(oids) {
            let transform = Transform::load(&host, table).await?;
            check_write_mode(&config, table, &transform)?;
            contracts.push(contract_of(table, &transform, oid));
            let mut prepared = target::prepare_table(
                &mut clients[0],
                &transform.target_view(table),
                target::Prepare::Check,
            )
            .await?;
            prepared.lock_timeout_ms = config.target.lock_timeout_ms;
            tables.insert(
                table.source.to_string(),
                (table.clone(), prepared, transform),
            );
        }
        init::refuse_overlapping_targets(&config, &clients[0], &config.tables, &source_identity)
            .await?;
        let path = config.stage_path.clone();
        if !crate::stage::stage_exists(&path)? {
            return Err(StageError::Missing { path }.into());
        }
        let source_id = config.source_id();
        let stage = Arc::new(
            blocking(move || {
                if writable {
                    Stage::open(&path, &source_id)
                } else {
                    Stage::open_read_only(&path)
                }
            })
            .await?,
        );
        let readmitted = reconcile_contracts(&config, &stage, &contracts, writable)?;
        if writable && !readmitted.is_empty() {
            read_again_whole(&config, &stage, &readmitted).await?;
        }
        if writable && let Some(client) = clients.first() {
            // The weir schema as this build writes it, once the tables passed their
            // checks and the stage is this process's (a second `weir run` is refused
            // before it touches the target): a target `init` prepared with an older
            // build gains the lineage columns added since.
            target::ensure_weir_schema(client).await?;
            let stage_id = {
                let stage = Arc::clone(&stage);
                blocking(move || stage.stage_id()).await?
            };
            let staged = {
                let stage = Arc::clone(&stage);
                blocking(move || stage.contracts()).await?
            };
            for (table, target, _) in tables.values() {
                refuse_foreign_lineage(client, table, &stage_id, &source_identity).await?;
                let column = Some(target.partition_column.as_str());
                init::refuse_other_partitioning(client, table, column, &stage_id, &source_identity)
                    .await?;
                init::refuse_own_other_table(client, table, &stage_id, &staged).await?;
            }
            target::register_stage(client, &stage_id, &source_identity).await?;
            let targets: Vec<&crate::config::TableName> =
                tables.values().map(|(t, _, _)| &t.target).collect();
            let feed = config.source_id();
            let pipeline = target::claims::Pipeline {
                stage_id: &stage_id,
                source: &source_identity,
                feed: &feed,
            };
            let first = {
                let stage = Arc::clone(&stage);
                !blocking(move || stage.has_claimed()).await?
            };
            let moment = target::claims::Moment::Start { first };
            target::claims::claim(client, &targets, pipeline, moment).await?;
            {
                let stage = Arc::clone(&stage);
                blocking(move || stage.set_claimed()).await?;
            }
        }
        let write_wake = Arc::new(tokio::sync::Notify::new());
        let live: Arc<live::LiveCounters> = Arc::default();
        let load_watch = {
            let live = Arc::clone(&live);
            crate::source::postgres::LoadWatch::new(Arc::clone(&write_wake)).on_staged(
                move |table, rows, position| {
                    // A first load's rows count as staged changes, as the stream's do.
                    crate::metrics::staged(0, [(table, rows)], Some(position));
                    live.changes_staged
                        .fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
                },
            )
        };
        Ok(Pipeline {
            config,
            stage,
            tables,
            dsn,
            clients: Mutex::new(clients),
            failed: std::sync::Mutex::default(),
            replace_only: std::sync::Mutex::default(),
            catalog_lsn,
            source_identity,
            writable,
            write_wake,
            load_watch: Arc::new(load_watch),
            live,
            source_text_only: std::sync::atomic::AtomicBool::new(false),
            target_reconnected: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether a target connection was made again since this was last asked: the
    /// target may have been restored from a backup meanwhile, which its lineage tells.
    pub fn take_target_reconnected(&self) -> bool {
        self.target_reconnected
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Asks `run` to keep the live state's dirty count and slot lag fresh (for a status
    /// line), as it does when metrics are served.
    pub fn watch(&self) {
        self.live
            .watched
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// What the run is doing now (see [`LiveState`]).
    pub fn live(&self) -> LiveState {
        self.live.read()
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// A table's config, target and transform.
    pub fn table(
        &self,
        table: &str,
    ) -> Result<&(TableConfig, TargetTable, Transform), PipelineError> {
        self.tables
            .get(table)
            .ok_or_else(|| PipelineError::UnknownTable(table.to_owned()))
    }

    /// The tables by source name.
    pub fn tables(
        &self,
    ) -> impl Iterator<Item = (&String, &(TableConfig, TargetTable, Transform))> {
        self.tables.iter()
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn stage_arc(&self) -> Arc<Stage> {
        Arc::clone(&self.stage)
    }

    /// Whether the source can be resynced (a PostgreSQL source), so that the stage's
    /// source state may hold resyncs.
    pub(crate) fn resyncs(&self) -> bool {
        matches!(self.config.source, SourceConfig::Postgres { .. })
    }

    /// The tables a whole-table `weir resync` is reading again, as the stage's
    /// snapshot progress says: their partitions are not written until it is done.
    pub fn resync_holds(&self) -> Result<Vec<String>, PipelineError> {
        if !self.resyncs() {
            return Ok(Vec::new());
        }
        let state = self.stage.source_state()?;
        Ok(crate::source::postgres::resync_holds(state.as_deref()))
    }

    pub fn dsn(&self) -> &Dsn {
        &self.dsn
    }

    /// The source's identity: a PostgreSQL database's (`postgres:<system
    /// identifier>/<database>`), or the JSON-lines feed's.
    pub fn source_identity(&self) -> &str {
        &self.source_identity
    }

    /// Whether the stage holds every row of a PostgreSQL source's `table` (its first
    /// load or snapshot, and any whole resync, done).
    pub fn table_loaded(&self, table: &str) -> Result<bool, PipelineError> {
        let state = self.stage.source_state()?;
        Ok(
            crate::source::postgres::snapshot_tables(state.as_deref(), &[table.to_owned()])
                .first()
                .is_some_and(|t| t.state == "done"),
        )
    }

    /// Whether `table`'s partitions are replaced whole from now on (see
    /// [`PipelineError::MergeImpure`]).
    pub(super) fn replaces_only(&self, table: &str) -> bool {
        self.replace_only
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(table)
    }

    pub(super) fn replace_only(&self, table: &str) {
        self.replace_only
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(table.to_owned());
    }
}

/// The compiled-plugin cache of a config: `[engine] plugin_cache` is not a setting;
/// `$WEIR_PLUGIN_CACHE`, else the user's cache folder (see [`PluginHost`]).
pub fn plugin_host() -> Arc<PluginHost> {
    Arc::new(PluginHost::new(PluginHost::default_cache_dir()))
}

/// Runs blocking stage work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StageError> + Send + 'static,
) -> Result<T, PipelineError> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .map_err(PipelineError::Task)??)
}
