//! The pipeline: tail the source, stage each committed transaction (synced), then
//! acknowledge the source; write dirty partitions to the target; clear a dirty mark
//! only when the generation written is still the newest.
//!
//! **Architecture Invariant**: [`ChangeSource::acknowledge`] is called only after
//! [`Stage::apply`] returned, i.e. after the staged batch is synced.
//!
//! **Architecture Invariant**: no partition set here is derived from the clock: live
//! mode writes the stage's dirty set; [`Pipeline::rewrite_partitions`] takes the
//! partitions as a parameter.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::Mutex;
use tokio_postgres::Client;

use crate::config::{
    Column, Config, Dsn, OnReject, PluginConfig, SourceConfig, TableConfig, WriteMode,
};
use crate::metrics::{self, Retry};
use crate::partition::Partition;
use crate::plugin::{self, InputRow, Kind, OwnedJob, Plugin, PluginError, PluginHost};
use crate::source::jsonl::JsonlSource;
use crate::source::postgres::{self, PgSourceError};
use crate::source::{ChangeSource, SourceError, SourceEvent, Transaction};
use crate::stage::{
    ApplyOutcome, DirtyPartition, Stage, StageChange, StageError, StagedRow, TableContract,
    encode_key,
};
use crate::target::{self, MergeKeys, PartitionWrite, TargetError, TargetTable, WriteSummary};
use crate::value::Value;

/// Bounds of the wait added to the flush interval after a round whose writes failed in
/// a way a retry may cure (doubling from the first to the second).
const WRITE_BACKOFF_MIN: Duration = Duration::from_millis(500);
const WRITE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Dead letters moved from the stage to the target per round trip.
const DEAD_LETTERS_PER_WRITE: usize = 1000;

/// The transform of a table without a plugin.
pub const IDENTITY_TRANSFORM: &str = "identity";

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Boxed: the target's errors are large and rare.
    #[error(transparent)]
    Target(Box<TargetError>),
    #[error("partition {partition} of {table} failed")]
    Partition {
        table: String,
        partition: String,
        #[source]
        source: Box<PipelineError>,
    },
    #[error("table `{0}` is not in the config")]
    UnknownTable(String),
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    PgSource(#[from] PgSourceError),
    #[error("{}: table {table}: {field}: {message}", config.display())]
    Table {
        config: std::path::PathBuf,
        table: String,
        field: &'static str,
        message: String,
    },
    #[error("a stage task stopped unexpectedly")]
    Task(#[source] tokio::task::JoinError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(
        "{}: the stage at {} holds {tables} under another contract: {differences}. A stage's rows are keyed, partitioned and sent to their target by the contract they were staged under, so it is not changed under them: to change a key, partition column, grain or target, use a new stage (point `[stage] path` at a new folder, then run `weir init` and `weir run`, which read the source again), or put the config back",
        config.display(),
        stage.display()
    )]
    Contract {
        config: std::path::PathBuf,
        stage: std::path::PathBuf,
        tables: String,
        differences: String,
    },
    #[error(
        "{table}, partition {partition}: write = \"merge\": the plugin output a row with grain key {key}, which is not the key of a changed input row; merge needs each output row's grain key to be its input row's key (use write = \"replace\")"
    )]
    MergeKey {
        table: String,
        partition: String,
        key: String,
    },
    #[error(
        "{table}, partition {partition}: the plugin rejected the row with key {key}: {reason} (on_reject = \"fail\"; set on_reject = \"dead-letter\" to record rejected rows and write the rest)"
    )]
    Rejected {
        table: String,
        partition: String,
        key: String,
        reason: String,
    },
}

impl From<TargetError> for PipelineError {
    fn from(e: TargetError) -> Self {
        PipelineError::Target(Box::new(e))
    }
}

impl PipelineError {
    /// Whether the user must change the config or the source estate before anything
    /// can run (exit code 2): a stage contract the config breaks, a publication, key or
    /// replica identity that would hide changes.
    pub fn is_usage(&self) -> bool {
        match self {
            PipelineError::Contract { .. } => true,
            PipelineError::PgSource(e) => e.is_usage(),
            _ => false,
        }
    }

    /// Whether this is a source that went away (see [`SourceError::is_transient`]).
    pub fn is_transient_source(&self) -> bool {
        match self {
            PipelineError::Source(e) => e.is_transient(),
            PipelineError::PgSource(e) => e.is_transient(),
            _ => false,
        }
    }

    /// Whether retrying the same partition at the same generation fails the same way
    /// (a plugin's verdict is a function of its input), so that it waits for new
    /// changes rather than being retried every round.
    fn is_deterministic(&self) -> bool {
        match self {
            PipelineError::Partition { source, .. } => source.is_deterministic(),
            PipelineError::Rejected { .. } | PipelineError::MergeKey { .. } => true,
            // A wall-clock timeout is not strictly a function of the input, but retrying
            // a job that ran out of time every round would keep a worker busy forever:
            // like the others, it waits for the partition to change (or a restart).
            PipelineError::Plugin(e) => !matches!(e, PluginError::Thread(_) | PluginError::Lost),
            _ => false,
        }
    }
}

/// A table's transform, ready to run.
#[derive(Clone)]
pub enum Transform {
    Identity,
    Plugin {
        plugin: Arc<Plugin>,
        settings: PluginConfig,
        config_hash: String,
    },
}

impl std::fmt::Debug for Transform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transform::Identity => f.write_str("Identity"),
            Transform::Plugin { plugin, .. } => f.debug_tuple("Plugin").field(plugin).finish(),
        }
    }
}

impl Transform {
    /// Loads a table's plugin (compiling it or loading the cached compilation).
    pub async fn load(
        host: &Arc<PluginHost>,
        table: &TableConfig,
    ) -> Result<Transform, PipelineError> {
        let Some(settings) = table.plugin.clone() else {
            return Ok(Transform::Identity);
        };
        let host = Arc::clone(host);
        let (path, limits) = (settings.path.clone(), settings.limits.clone());
        let plugin = tokio::task::spawn_blocking(move || host.load(&path, &limits))
            .await
            .map_err(PipelineError::Task)??;
        let d = plugin.description();
        tracing::info!(
            table = %table.source,
            plugin = %d.name,
            version = %d.version,
            sha256 = %plugin.sha256_hex(),
            compile_ms = plugin.compile_info().millis,
            cache_hit = plugin.compile_info().cache_hit,
            "plugin loaded"
        );
        let config_hash = plugin::config_hash(&settings.config);
        Ok(Transform::Plugin {
            plugin: Arc::new(plugin),
            settings,
            config_hash,
        })
    }

    /// The table as the target sees it: with a plugin, its declared output columns and
    /// partition column; without one, the source's columns.
    pub fn target_view(&self, table: &TableConfig) -> TableConfig {
        let Transform::Plugin { plugin, .. } = self else {
            return table.clone();
        };
        let d = plugin.description();
        TableConfig {
            columns: d
                .columns
                .iter()
                .map(|c| Column {
                    name: c.name.clone(),
                    declared: if c.nullable {
                        c.ty.ddl()
                    } else {
                        format!("{} NOT NULL", c.ty.ddl())
                    },
                    ty: c.ty.engine_type(),
                    epoch: None,
                })
                .collect(),
            partition_by: d.partition_column.clone(),
            ..table.clone()
        }
    }

    /// Whether the table's write mode suits this transform: `merge` needs the identity
    /// or a `row`-kind plugin whose grain key is the table's key, so that the target
    /// rows of a changed key are exactly those with that grain key.
    pub fn check_write_mode(&self, table: &TableConfig) -> Result<(), String> {
        let Transform::Plugin { plugin, .. } = self else {
            return Ok(());
        };
        if table.write != WriteMode::Merge {
            return Ok(());
        }
        let d = plugin.description();
        if d.kind != Kind::Row {
            return Err(format!(
                "plugin {} is a `partition`-kind plugin (its output may aggregate rows), so its partitions cannot be merged: use write = \"replace\"",
                d.name
            ));
        }
        if d.grain_key != table.key {
            return Err(format!(
                "merge needs the plugin's grain key ({}) to be the table's key ({}): a changed key must name the target rows it produced; use write = \"replace\"",
                d.grain_key.join(", "),
                table.key.join(", ")
            ));
        }
        Ok(())
    }

    /// What lineage's `transform` column says: `identity` or `name@version`.
    pub fn label(&self) -> String {
        match self {
            Transform::Identity => IDENTITY_TRANSFORM.to_owned(),
            Transform::Plugin { plugin, .. } => {
                let d = plugin.description();
                format!("{}@{}", d.name, d.version)
            }
        }
    }
}

impl Transform {
    /// The transform's identity in a table's contract: `identity`, or the plugin's
    /// bytes and config (as lineage records them).
    pub fn contract_id(&self) -> String {
        match self {
            Transform::Identity => IDENTITY_TRANSFORM.to_owned(),
            Transform::Plugin {
                plugin,
                config_hash,
                ..
            } => format!("sha256:{} config:{config_hash}", plugin.sha256_hex()),
        }
    }
}

/// A table's contract as the config states it.
fn contract_of(table: &TableConfig, transform: &Transform, oid: Option<u32>) -> TableContract {
    TableContract {
        source: table.source.to_string(),
        source_oid: oid,
        target: table.target.to_string(),
        key: table.key.clone(),
        partition_by: table.partition_by.clone(),
        grain: table.grain.to_string(),
        transform: transform.contract_id(),
    }
}

/// What reconciling the config with the stage's contracts does to the stage.
enum ContractStep {
    /// A table new to the stage, or a contract recorded anew (a plugin changed, the
    /// source's OID learnt).
    Put(TableContract),
    /// The same source table under a new name: move its entries.
    Rename { from: String, to: TableContract },
}

/// Compares each configured table's contract with the stage's; refuses a config that
/// changes a table's key, partition column, grain or target, or whose source table is
/// another relation than the one staged (dropped and created again). Records the
/// contracts of tables new to the stage (a stage of an older build adopts the
/// config's), a changed transform (partitions written by the old one are listed as
/// stale by lineage; `weir backfill --stale` rewrites them: a plugin upgrade is a
/// normal operation, not a new feed), and carries a renamed table's staged entries
/// to its new name (same relation OID). `writable`: `false` only checks.
fn reconcile_contracts(
    config: &Config,
    stage: &Stage,
    wanted: &[TableContract],
    writable: bool,
) -> Result<(), PipelineError> {
    let existing = stage.contracts()?;
    let mut steps = Vec::new();
    let mut differences = Vec::new();
    let mut tables = Vec::new();
    let compare = |have: &TableContract, want: &TableContract, out: &mut Vec<String>| {
        let mut d = Vec::new();
        if have.target != want.target {
            d.push(format!("target {} → {}", have.target, want.target));
        }
        if have.key != want.key {
            d.push(format!(
                "key ({}) → ({})",
                have.key.join(", "),
                want.key.join(", ")
            ));
        }
        if have.partition_by != want.partition_by {
            d.push(format!(
                "partition_by {} → {}",
                have.partition_by, want.partition_by
            ));
        }
        if have.grain != want.grain {
            d.push(format!("grain {} → {}", have.grain, want.grain));
        }
        if !d.is_empty() {
            out.push(format!("{}: {}", want.source, d.join(", ")));
        }
    };
    for want in wanted {
        let before = differences.len();
        if let Some(have) = existing.iter().find(|c| c.source == want.source) {
            if let (Some(had), Some(now)) = (have.source_oid, want.source_oid)
                && had != now
            {
                return Err(PgSourceError::Recreated {
                    table: want.source.clone(),
                    oid: now,
                    expected: had,
                }
                .into());
            }
            compare(have, want, &mut differences);
            if have.transform != want.transform {
                tracing::info!(table = %want.source, "the table's transform changed (plugin or its config): partitions written by the previous one are stale in lineage; `weir backfill --stale` rewrites them");
            }
            if have != want {
                steps.push(ContractStep::Put(TableContract {
                    source_oid: want.source_oid.or(have.source_oid),
                    ..want.clone()
                }));
            }
        } else if let Some(have) = want.source_oid.and_then(|oid| {
            existing
                .iter()
                .find(|c| c.source_oid == Some(oid) && !wanted.iter().any(|w| w.source == c.source))
        }) {
            compare(have, want, &mut differences);
            if !writable {
                differences.push(format!(
                    "{} was staged as {} (renamed since): run `weir run` once, which carries its staged rows over to the new name",
                    want.source, have.source
                ));
            }
            steps.push(ContractStep::Rename {
                from: have.source.clone(),
                to: want.clone(),
            });
        } else {
            steps.push(ContractStep::Put(want.clone()));
        }
        if differences.len() > before {
            tables.push(want.source.clone());
        }
    }
    if !differences.is_empty() {
        return Err(PipelineError::Contract {
            config: config.path.clone(),
            stage: stage.path().to_owned(),
            tables: tables.join(", "),
            differences: differences.join("; "),
        });
    }
    if !writable {
        return Ok(());
    }
    for step in steps {
        match step {
            ContractStep::Put(contract) => stage.put_contract(&contract)?,
            ContractStep::Rename { from, to } => {
                let moved = stage.rename_table(&from, &to)?;
                tracing::warn!(from = %from, to = %to.source, entries = moved, "source table renamed: its staged rows now go by its new name");
            }
        }
    }
    Ok(())
}

/// Each configured table's relation OID in a PostgreSQL source (`None` for other
/// sources).
async fn source_oids(
    config: &Config,
    tables: &[TableConfig],
) -> Result<Vec<Option<u32>>, PipelineError> {
    let SourceConfig::Postgres { .. } = &config.source else {
        return Ok(vec![None; tables.len()]);
    };
    let client = postgres::connect(&postgres_dsn(config)?).await?;
    let mut out = Vec::with_capacity(tables.len());
    for table in tables {
        out.push(postgres::table_oid(&client, &table.source).await?);
    }
    Ok(out)
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

/// What `init` found and did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    pub stage: String,
    /// What was set up in the source (publication, slot, replica identities).
    pub source: Vec<String>,
    pub tables: Vec<String>,
}

/// Validates connectivity and creates what is missing: the stage, the target's `weir`
/// schema, and each target table (or refuses one that does not match). Safe to re-run.
pub async fn init(config: &Config, dsn: &Dsn) -> Result<InitReport, PipelineError> {
    init_with(config, dsn, false).await
}

/// [`init`], adding declared nullable columns an existing target table lacks when
/// `allow_add_columns` (`weir init --allow-add-columns`).
pub async fn init_with(
    config: &Config,
    dsn: &Dsn,
    allow_add_columns: bool,
) -> Result<InitReport, PipelineError> {
    let mut source_lines = Vec::new();
    let resolved = resolve_tables(config, None).await?;
    let mut oids = vec![None; resolved.len()];
    if let SourceConfig::Postgres {
        slot, publication, ..
    } = &config.source
    {
        let source_dsn = postgres_dsn(config)?;
        let client = postgres::connect(&source_dsn).await?;
        let report = postgres::setup(&client, slot, publication, &resolved).await?;
        source_lines.push(format!(
            "publication {publication} ({}), slot {slot} ({})",
            if report.created_publication {
                "created"
            } else {
                "exists"
            },
            if report.created_slot {
                "created"
            } else {
                "exists"
            }
        ));
        oids = report.oids.iter().copied().map(Some).collect();
        for (table, identity) in report.identities {
            source_lines.push(format!("replica identity of {table}: {identity}"));
        }
    }
    let mut client = target::connect(dsn).await?;
    target::ensure_weir_schema(&client).await?;
    let host = plugin_host();
    let mut tables = Vec::new();
    let mut contracts = Vec::with_capacity(resolved.len());
    for (table, oid) in resolved.iter().zip(&oids) {
        let transform = Transform::load(&host, table).await?;
        check_write_mode(config, table, &transform)?;
        contracts.push(contract_of(table, &transform, *oid));
        let view = transform.target_view(table);
        let prepared = target::prepare_table(
            &mut client,
            &view,
            if allow_add_columns {
                target::Prepare::CreateOrAddColumns
            } else {
                target::Prepare::Create
            },
        )
        .await?;
        tables.push(format!(
            "{} -> {} ({} columns, partition by {} {}; transform {})",
            table.source,
            prepared.name,
            prepared.columns.len(),
            view.partition_by,
            table.grain,
            transform.label()
        ));
    }
    let path = config.stage_path.clone();
    let source_id = config.source_id();
    let stage = blocking(move || Stage::open(&path, &source_id)).await?;
    reconcile_contracts(config, &stage, &contracts, true)?;
    Ok(InitReport {
        stage: config.stage_path.display().to_string(),
        source: source_lines,
        tables,
    })
}

fn check_write_mode(
    config: &Config,
    table: &TableConfig,
    transform: &Transform,
) -> Result<(), PipelineError> {
    transform
        .check_write_mode(table)
        .map_err(|message| PipelineError::Table {
            config: config.path.clone(),
            table: table.source.to_string(),
            field: "write",
            message,
        })
}

/// The source DSN of a PostgreSQL source.
fn postgres_dsn(config: &Config) -> Result<Dsn, crate::config::ConfigError> {
    config
        .source_dsn()?
        .ok_or_else(|| crate::config::ConfigError::Invalid {
            path: config.path.clone(),
            field: "source.dsn_env".into(),
            message: "required for kind = \"postgres\"".into(),
        })
}

/// The configured tables with their columns: declared (JSON lines) or read from the
/// source's catalog (PostgreSQL), checked either way.
async fn resolve_tables(
    config: &Config,
    target: Option<&Client>,
) -> Result<Vec<TableConfig>, PipelineError> {
    let SourceConfig::Postgres { .. } = &config.source else {
        return Ok(config.tables.clone());
    };
    let source_dsn = postgres_dsn(config)?;
    let client = postgres::connect(&source_dsn).await?;
    let mut out = Vec::with_capacity(config.tables.len());
    for table in &config.tables {
        let mut columns = postgres::source_columns(&client, &table.source).await?;
        // Running against an existing target: its columns are the ones written. A source
        // column the target lacks (added since `init`) is staged, not written; a target
        // column the source lost stops the table. With a plugin the target holds the
        // plugin's declared output instead, and the plugin sees every source column.
        if let Some(target) = target
            && table.plugin.is_none()
            && let Some(existing) = target::column_names(target, &table.target).await?
        {
            if let Some(lost) = existing
                .iter()
                .find(|c| !columns.iter().any(|s| &s.name == *c))
            {
                return Err(PgSourceError::SchemaChanged {
                    table: table.source.to_string(),
                    change: format!(
                        "column `{lost}` was dropped or renamed (the target still has it)"
                    ),
                }
                .into());
            }
            let added: Vec<String> = columns
                .iter()
                .filter(|c| !existing.contains(&c.name))
                .map(|c| c.name.clone())
                .collect();
            if !added.is_empty() {
                tracing::warn!(table = %table.source, columns = %added.join(", "), "source columns not in the target are staged but not written; add them to the target table to write them");
            }
            columns.retain(|c| existing.contains(&c.name));
        }
        out.push(
            table
                .with_columns(columns)
                .map_err(|(field, message)| PipelineError::Table {
                    config: config.path.clone(),
                    table: table.source.to_string(),
                    field,
                    message,
                })?,
        );
    }
    Ok(out)
}

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
    /// Whether the stage is open for writing (`run`), or read-only beside a live engine
    /// (`backfill`, `verify`): then dirty marks are left to the engine, and a write
    /// never replaces a partition lineage says is newer.
    writable: bool,
}

/// A partition's output, computed from the stage and not yet written.
#[derive(Debug, Clone)]
pub struct PartitionOutput {
    pub rows: Vec<Vec<Value>>,
    pub rejections: Vec<target::RejectedRow>,
    /// The stage generation and source position the rows were read at.
    pub generation: u64,
    pub source_position: u64,
    /// The dirty mark seen with the read.
    pub dirty: Option<u64>,
    /// Staged rows read.
    pub staged_rows: u64,
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
        config.tables = resolve_tables(&config, clients.first()).await?;
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
        if writable && let Some(client) = clients.first() {
            // The weir schema as this build writes it (idempotent), once the tables
            // passed their checks: a target `init` prepared with an older build gains
            // the lineage columns added since.
            target::ensure_weir_schema(client).await?;
        }
        let path = config.stage_path.clone();
        if !path.join("CURRENT").exists() {
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
        reconcile_contracts(&config, &stage, &contracts, writable)?;
        Ok(Pipeline {
            config,
            stage,
            tables,
            dsn,
            clients: Mutex::new(clients),
            failed: std::sync::Mutex::default(),
            writable,
        })
    }

    pub fn stage(&self) -> &Stage {
        &self.stage
    }

    /// Tails the source, stages and writes, until the feed ends (`once`: everything
    /// available now), or `shutdown` completes (then what is staged stays staged).
    pub async fn run(
        &self,
        once: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<RunReport, PipelineError> {
        // `None` only while intake is paused with the stream closed (see pause_intake).
        let mut slot = Some(self.open_source(once).await?);
        let _gauges = self.spawn_gauges();
        let mut report = RunReport::default();
        let flush_interval = Duration::from_millis(self.config.engine.flush_interval_ms);
        let mut last_flush = Instant::now();
        let mut backoff = Duration::ZERO;
        let mut batch: Vec<Transaction> = Vec::new();
        // Whether the stage's pending area holds chunks of the transaction being read.
        let mut chunked = false;
        tokio::pin!(shutdown);
        loop {
            let staged_before = report.transactions;
            let Some(source) = slot.as_mut() else {
                match self
                    .reconnect_source(once, &mut report, &mut shutdown)
                    .await?
                {
                    Some(source) => slot = Some(source),
                    None => {
                        self.flush_stage().await?;
                        return Ok(report);
                    }
                }
                continue;
            };
            let event = tokio::select! {
                event = source.next() => event,
                () = &mut shutdown => {
                    tracing::info!("shutting down: staging what was read");
                    self.stage_batch(source, &mut batch, &mut report).await?;
                    self.flush_stage().await?;
                    return Ok(report);
                }
            };
            match event {
                Ok(SourceEvent::Chunk(changes)) => {
                    // The pending area belongs to the next transaction to commit: stage
                    // the whole ones read before it first.
                    self.stage_batch(source, &mut batch, &mut report).await?;
                    if metrics::enabled() {
                        // A large transaction's changes count as its chunks arrive.
                        let counts = changes_by_table(&changes);
                        metrics::staged(0, counts.iter().map(|(t, n)| (t.as_str(), *n)), None);
                    }
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.append_pending(&changes)).await?;
                    chunked = true;
                }
                Ok(SourceEvent::Abort) => {
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.discard_pending()).await?;
                    chunked = false;
                }
                Ok(SourceEvent::Transaction(txn)) => {
                    batch.push(txn);
                    if std::mem::take(&mut chunked)
                        || batch.len() >= self.config.engine.batch_transactions_max
                    {
                        self.stage_batch(source, &mut batch, &mut report).await?;
                    }
                }
                Ok(SourceEvent::Idle) => self.stage_batch(source, &mut batch, &mut report).await?,
                Ok(SourceEvent::End) => {
                    self.stage_batch(source, &mut batch, &mut report).await?;
                    self.write_round(&mut report).await?;
                    self.flush_stage().await?;
                    return Ok(report);
                }
                Err(e) => {
                    // What came before the error is whole and good: keep it.
                    self.stage_batch(source, &mut batch, &mut report).await?;
                    if once || !e.is_transient() {
                        return Err(e.into());
                    }
                    // The source went away (a restart, a cut connection): reconnect at
                    // the stage's position; the slot kept everything not acknowledged.
                    tracing::warn!(error = %error_chain(&e), "source connection lost; reconnecting");
                    report.source_reconnects += 1;
                    slot = None;
                    continue;
                }
            }
            if !once && last_flush.elapsed() >= flush_interval + backoff {
                self.stage_batch(source, &mut batch, &mut report).await?;
                let transient = self.write_round_inner(&mut report, true).await?;
                // Failures a retry may cure (the target down): wait longer each time,
                // up to a bound, while staging goes on; the first good round resets it.
                metrics::retried(Retry::TargetWrite, transient);
                backoff = if transient > 0 {
                    let next = (backoff * 2).clamp(WRITE_BACKOFF_MIN, WRITE_BACKOFF_MAX);
                    tracing::warn!(
                        failed = transient,
                        retry_in_ms = next.as_millis() as u64,
                        "partition writes failed; staging goes on, writes are retried"
                    );
                    next
                } else {
                    Duration::ZERO
                };
                last_flush = Instant::now();
            }
            // After each staged batch: at `[stage] max_unwritten_mb`, write before
            // reading on (the overshoot is one batch at most).
            if !once
                && report.transactions != staged_before
                && !self
                    .pause_intake(&mut slot, &mut report, &mut shutdown)
                    .await?
            {
                self.flush_stage().await?;
                return Ok(report);
            }
        }
    }

    /// With metrics served: a task that reads the state gauges again every
    /// [`metrics::GAUGE_REFRESH`] (stage size, unwritten bytes, dirty partitions by
    /// table, and a PostgreSQL slot's lag, asked of the source as `weir status` does),
    /// until the returned guard is dropped. Reads only: it never touches the run.
    fn spawn_gauges(&self) -> Option<AbortOnDrop> {
        if !metrics::enabled() {
            return None;
        }
        let stage = Arc::clone(&self.stage);
        let stage_path = self.config.stage_path.clone();
        let tables: Vec<String> = self.tables.keys().cloned().collect();
        let slot = match &self.config.source {
            SourceConfig::Postgres { slot, .. } => postgres_dsn(&self.config)
                .ok()
                .map(|dsn| (dsn, slot.clone())),
            SourceConfig::Jsonl { .. } => None,
        };
        let task = tokio::spawn(async move {
            let mut source: Option<Client> = None;
            let mut tick = tokio::time::interval(metrics::GAUGE_REFRESH);
            loop {
                tick.tick().await;
                let (stage, path, tables) =
                    (Arc::clone(&stage), stage_path.clone(), tables.clone());
                let read = tokio::task::spawn_blocking(move || {
                    let dirty = stage.dirty_partitions()?;
                    let unwritten = stage.unwritten_bytes()?;
                    let size = crate::stage::checkpoint::dir_size(&path).unwrap_or(0);
                    let by_table: Vec<(String, usize)> = tables
                        .into_iter()
                        .map(|t| {
                            let n = dirty.iter().filter(|d| d.table == t).count();
                            (t, n)
                        })
                        .collect();
                    Ok::<_, StageError>((size, unwritten, by_table))
                })
                .await;
                if let Ok(Ok((size, unwritten, by_table))) = read {
                    metrics::stage_state(
                        size,
                        unwritten,
                        by_table.iter().map(|(t, n)| (t.as_str(), *n)),
                    );
                }
                let Some((dsn, slot)) = &slot else { continue };
                if source.as_ref().is_none_or(Client::is_closed) {
                    source = postgres::connect(dsn).await.ok();
                }
                if let Some(client) = &source {
                    match postgres::slot_status(client, slot).await {
                        Ok(Some((_, lag))) => metrics::slot_lag(lag),
                        Ok(None) => {}
                        Err(error) => {
                            tracing::debug!(error = %error_chain(&error), "slot lag not read; tried again later");
                            source = None;
                        }
                    }
                }
            }
        });
        Some(AbortOnDrop(task.abort_handle()))
    }

    /// Opens the configured source at the stage's position.
    async fn open_source(&self, once: bool) -> Result<AnySource, PipelineError> {
        let checkpoint = self.stage.checkpoint()?;
        let chunk = self.config.engine.transaction_chunk_changes;
        let tables = self
            .tables
            .values()
            .map(|(t, _, _)| t.clone())
            .collect::<Vec<_>>();
        Ok(match &self.config.source {
            SourceConfig::Jsonl {
                path,
                on_bad_record,
            } => AnySource::Jsonl(Box::new(
                JsonlSource::open(
                    path.clone(),
                    !once,
                    tables,
                    *on_bad_record,
                    checkpoint,
                    chunk,
                )
                .await?,
            )),
            SourceConfig::Postgres {
                slot,
                publication,
                snapshot_chunk_rows,
                heartbeat_interval_ms,
                ..
            } => {
                let source_dsn = postgres_dsn(&self.config)?;
                let options = postgres::PostgresSourceOptions {
                    slot: slot.clone(),
                    publication: publication.clone(),
                    once,
                    chunk_changes_max: chunk,
                    snapshot_chunk_rows: *snapshot_chunk_rows,
                    heartbeat_interval_ms: *heartbeat_interval_ms,
                };
                AnySource::Postgres(Box::new(
                    postgres::PostgresSource::open(
                        &source_dsn,
                        &options,
                        tables,
                        Arc::clone(&self.stage),
                        checkpoint,
                    )
                    .await?,
                ))
            }
        })
    }

    /// Opens the source again after it went away, waiting 0.5 s, then twice as long
    /// each time up to 30 s, while dirty partitions are written meanwhile. `None` if
    /// `shutdown` came first; a permanent error (say, the slot was dropped) ends it.
    async fn reconnect_source(
        &self,
        once: bool,
        report: &mut RunReport,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<AnySource>, PipelineError> {
        let mut wait = WRITE_BACKOFF_MIN;
        loop {
            if let Err(error) = self.write_round_inner(report, true).await {
                tracing::warn!(error = %error_chain(&error), "partition writes failed while the source is away");
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.as_mut() => return Ok(None),
            }
            metrics::retried(Retry::SourceConnect, 1);
            match self.open_source(once).await {
                Ok(source) => {
                    tracing::info!("source reconnected");
                    return Ok(Some(source));
                }
                Err(error) if error.is_transient_source() => {
                    wait = (wait * 2).min(WRITE_BACKOFF_MAX);
                    tracing::warn!(error = %error_chain(&error), retry_in_ms = wait.as_millis() as u64, "source unavailable; retrying");
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// While the changes staged but not written reach `[stage] max_unwritten_mb` (checked
    /// after each staged batch), stops
    /// reading the source and only writes, until the backlog is below half the limit
    /// (or empty). A PostgreSQL source's stream is closed meanwhile and reopened at the
    /// stage's position after: an unread stream would miss the server's keepalives and
    /// be cut; the slot keeps the WAL. A JSON-lines source is simply not read.
    /// Returns `false` if `shutdown` came while paused.
    async fn pause_intake(
        &self,
        source: &mut Option<AnySource>,
        report: &mut RunReport,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<bool, PipelineError> {
        let Some(limit) = self.config.stage_max_unwritten_bytes else {
            return Ok(true);
        };
        let unwritten = self.stage.unwritten_bytes()?;
        if unwritten < limit {
            return Ok(true);
        }
        let started = Instant::now();
        report.intake_pauses += 1;
        metrics::intake_paused(true);
        tracing::warn!(
            unwritten_bytes = unwritten,
            limit_bytes = limit,
            "intake paused: staged changes not yet written reached [stage] max_unwritten_mb; the source is not read until the target catches up"
        );
        if matches!(source, Some(AnySource::Postgres(_))) {
            *source = None;
        }
        let flush_interval = Duration::from_millis(self.config.engine.flush_interval_ms);
        let mut backoff = Duration::ZERO;
        loop {
            let transient = self.write_round_inner(report, true).await?;
            metrics::retried(Retry::TargetWrite, transient);
            backoff = if transient > 0 {
                (backoff * 2).clamp(WRITE_BACKOFF_MIN, WRITE_BACKOFF_MAX)
            } else {
                Duration::ZERO
            };
            let unwritten = self.stage.unwritten_bytes()?;
            if unwritten < limit / 2 || self.stage.dirty_partitions()?.is_empty() {
                tracing::info!(
                    unwritten_bytes = unwritten,
                    paused_ms = started.elapsed().as_millis() as u64,
                    "intake resumed"
                );
                metrics::intake_paused(false);
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(flush_interval.max(WRITE_BACKOFF_MIN / 5) + backoff) => {}
                () = shutdown.as_mut() => return Ok(false),
            }
        }
        if source.is_none() {
            *source = Some(self.open_source(false).await?);
        }
        Ok(true)
    }

    /// On a clean stop: the stage's state goes to its table files, so the next start
    /// has no write-ahead log to replay.
    async fn flush_stage(&self) -> Result<(), PipelineError> {
        let stage = Arc::clone(&self.stage);
        blocking(move || stage.flush()).await
    }

    /// Stages the batch in one synced write, then acknowledges the source.
    async fn stage_batch(
        &self,
        source: &mut AnySource,
        batch: &mut Vec<Transaction>,
        report: &mut RunReport,
    ) -> Result<(), PipelineError> {
        if batch.is_empty() {
            return Ok(());
        }
        let txns = std::mem::take(batch);
        let stage = Arc::clone(&self.stage);
        let started = Instant::now();
        if crate::faults::ack_before_stage()
            && let Some(last) = txns.last()
        {
            // The broken build (test-only): the source hears "durable" before it is.
            source
                .acknowledge(crate::source::Checkpoint {
                    position: last.end,
                    cursor: last.cursor,
                })
                .await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Changes by table of the transactions past the position (the rest are
        // skipped), counted only for the metrics.
        let changes_by_table = if metrics::enabled() {
            let position = self.stage.checkpoint()?.map_or(0, |c| c.position);
            changes_by_table(
                txns.iter()
                    .filter(|t| t.end > position)
                    .flat_map(|t| &t.changes),
            )
        } else {
            Vec::new()
        };
        let outcome: ApplyOutcome = blocking(move || stage.apply(&txns)).await?;
        crate::failpoint!("stage-before-ack");
        report.transactions += outcome.transactions;
        report.changes += outcome.changes;
        report.skipped_transactions += outcome.skipped;
        let checkpoint = self.stage.checkpoint()?;
        if let Some(checkpoint) = checkpoint
            && let Err(error) = source.acknowledge(checkpoint).await
        {
            // The batch is synced: a source that went away re-sends it after the
            // reconnect (and the stage skips it). Its next read fails the same way.
            if !error.is_transient() {
                return Err(error.into());
            }
            tracing::warn!(error = %error_chain(&error), "acknowledgement not sent; the source is reconnected");
        }
        crate::failpoint!("stage-after-ack");
        metrics::staged(
            outcome.transactions,
            changes_by_table.iter().map(|(t, n)| (t.as_str(), *n)),
            checkpoint.map(|c| c.position),
        );
        tracing::info!(
            transactions = outcome.transactions,
            changes = outcome.changes,
            skipped = outcome.skipped,
            position = checkpoint.map(|c| c.position),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "staged"
        );
        Ok(())
    }

    /// Writes staged dead letters, then every dirty partition. A partition that fails
    /// does not stop the others: with `keep_going` (live mode) its error is logged and
    /// it stays dirty (a plugin's failure waits for the partition to change; any other
    /// is retried next round); otherwise the first error is returned after the round.
    pub async fn write_round(&self, report: &mut RunReport) -> Result<(), PipelineError> {
        self.write_round_inner(report, false).await.map(drop)
    }

    /// One round; returns the number of failures that a retry may cure (the target
    /// unreachable, a connection lost), which the live loop backs off on.
    async fn write_round_inner(
        &self,
        report: &mut RunReport,
        keep_going: bool,
    ) -> Result<usize, PipelineError> {
        match self.flush_dead_letters().await {
            Ok(n) => {
                report.dead_letters += n;
                metrics::dead_letters(n);
            }
            // The target is down: dead letters stay staged, and partitions are tried
            // (and fail the same way, counted) so the round's outcome says so.
            Err(error @ PipelineError::Target(_)) if keep_going => {
                tracing::warn!(error = %error_chain(&error), "dead letters not written; they stay staged and are retried");
            }
            Err(error) => return Err(error),
        }
        let mut dirty = self.stage.dirty_partitions()?;
        if keep_going && let Ok(failed) = self.failed.lock() {
            dirty.retain(|d| {
                failed.get(&(d.table.clone(), d.partition.clone())) != Some(&d.generation)
            });
        }
        if dirty.is_empty() {
            return Ok(0);
        }
        // Oldest change first: a partition waits at most one round behind newer ones.
        // Among changes of one age, the largest partition first, so that the longest
        // jobs do not start last and hold the round open on one worker.
        let bytes = self.stage.approximate_bytes(&dirty);
        let mut order: Vec<(DirtyPartition, u64)> = dirty.into_iter().zip(bytes).collect();
        order.sort_by_key(|(d, bytes)| (d.generation, std::cmp::Reverse(*bytes)));
        let dirty: Vec<DirtyPartition> = order.into_iter().map(|(d, _)| d).collect();
        let started = Instant::now();
        let mut transient = 0;
        let results: Vec<_> = futures_util::stream::iter(dirty)
            .map(|d: DirtyPartition| async move {
                let started = Instant::now();
                let outcome = self.write_partition(&d.table, &d.partition, true).await;
                metrics::partition_job(&d.table, started.elapsed(), outcome.is_err());
                (d, outcome)
            })
            .buffer_unordered(self.config.engine.parallelism)
            .collect()
            .await;
        let mut first_error = None;
        let (mut partitions, mut rows) = (0usize, 0u64);
        for (d, outcome) in results {
            match outcome {
                Ok(Some(summary)) => {
                    partitions += 1;
                    rows += summary.copied;
                    report.rows_rejected += summary.rejected;
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::error!(table = %d.table, partition = %d.partition, error = %error_chain(&error), "partition write failed; the other partitions go on");
                    report.partitions_failed += 1;
                    if !error.is_deterministic() {
                        transient += 1;
                    } else {
                        if let Ok(mut failed) = self.failed.lock() {
                            failed.insert((d.table.clone(), d.partition.clone()), d.generation);
                        }
                        // For `weir status`, until the partition is written.
                        let failure = crate::stage::PartitionFailure {
                            table: d.table.clone(),
                            partition: d.partition.clone(),
                            generation: d.generation,
                            error: error_chain(&error),
                        };
                        if let Err(e) = self.stage.record_failure(&failure) {
                            tracing::warn!(error = %error_chain(&e), "partition failure not recorded");
                        }
                    }
                    first_error.get_or_insert(PipelineError::Partition {
                        table: d.table.clone(),
                        partition: d.partition.to_string(),
                        source: Box::new(error),
                    });
                }
            }
        }
        report.partitions_written += partitions;
        report.rows_written += rows;
        tracing::info!(
            partitions,
            rows,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "partitions written"
        );
        match first_error {
            Some(e) if !keep_going => Err(e),
            _ => Ok(transient),
        }
    }

    async fn flush_dead_letters(&self) -> Result<usize, PipelineError> {
        let mut total = 0;
        loop {
            let records = self.stage.dead_letters(DEAD_LETTERS_PER_WRITE)?;
            if records.is_empty() {
                return Ok(total);
            }
            let mut client = self.client().await?;
            let result =
                target::write_dead_letters(&mut client, &self.config.source_id(), &records).await;
            self.clients.lock().await.push(client);
            result?;
            let positions: Vec<u64> = records.iter().map(|r| r.position).collect();
            self.stage.remove_dead_letters(&positions)?;
            total += records.len();
        }
    }

    async fn client(&self) -> Result<Client, PipelineError> {
        let pooled = self.clients.lock().await.pop();
        match pooled {
            Some(c) if !c.is_closed() => Ok(c),
            _ => Ok(target::connect(&self.dsn).await?),
        }
    }

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

    /// Merges a dirty partition: the transform runs over the rows of the keys changed
    /// since its last write, and the target replaces those keys' rows only.
    async fn merge_partition(
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
            keys.push(crate::stage::decode_key(&key)?);
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

    pub fn dsn(&self) -> &Dsn {
        &self.dsn
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

    /// Runs the table's transform (a fresh plugin instance each time) over staged rows
    /// of one partition: the output rows and the rejected input rows.
    async fn transform(
        &self,
        table: &str,
        partition: &Partition,
        rows: Vec<StagedRow>,
    ) -> Result<(Vec<Vec<Value>>, Vec<target::RejectedRow>), PipelineError> {
        let (table_config, target_table, transform) = self.table(table)?;
        match transform {
            Transform::Identity => Ok((identity(table_config, rows), Vec::new())),
            Transform::Plugin {
                plugin, settings, ..
            } => {
                run_plugin(
                    table_config,
                    target_table,
                    plugin,
                    settings,
                    partition,
                    rows,
                )
                .await
            }
        }
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
    async fn write_computed(
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
}

/// Aborts a spawned task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a merge of a dirty partition came to.
#[derive(Debug)]
enum Merge {
    /// Not dirty (another job wrote it).
    Clean,
    Merged(WriteSummary),
    /// Replace it instead: every key changed, or lineage names another transform.
    Replace,
}

/// The configured source.
#[derive(Debug)]
enum AnySource {
    Jsonl(Box<JsonlSource>),
    Postgres(Box<postgres::PostgresSource>),
}

impl ChangeSource for AnySource {
    async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        match self {
            AnySource::Jsonl(s) => s.next().await,
            AnySource::Postgres(s) => s.next().await,
        }
    }

    async fn acknowledge(
        &mut self,
        checkpoint: crate::source::Checkpoint,
    ) -> Result<(), SourceError> {
        match self {
            AnySource::Jsonl(s) => s.acknowledge(checkpoint).await,
            AnySource::Postgres(s) => s.acknowledge(checkpoint).await,
        }
    }
}

/// Runs a table's plugin over a partition's staged rows; returns the output rows and
/// the rejections (or fails on one, with `on_reject = "fail"`).
async fn run_plugin(
    table: &TableConfig,
    target: &TargetTable,
    plugin: &Arc<Plugin>,
    settings: &PluginConfig,
    partition: &Partition,
    rows: Vec<StagedRow>,
) -> Result<(Vec<Vec<Value>>, Vec<target::RejectedRow>), PipelineError> {
    let input: Vec<InputRow> = rows
        .into_iter()
        .map(|r| InputRow {
            key: table
                .key
                .iter()
                .map(|k| {
                    r.values
                        .iter()
                        .find(|(name, _)| name == k)
                        .map_or(Value::Null, |(_, v)| v.clone())
                })
                .collect(),
            op: r.op,
            commit_position: r.commit_position,
            commit_time: r.commit_time_us,
            columns: r.values,
        })
        .collect();
    let job = OwnedJob {
        table: target.name.to_string(),
        partition: partition.clone(),
        grain: table.grain,
        config: settings.config.clone(),
    };
    let (input, output) =
        plugin::run_job_on_thread(Arc::clone(plugin), settings.limits.clone(), job, input).await;
    let output = output?;
    metrics::plugin_job(
        &table.source.to_string(),
        output.fuel,
        output.peak_memory_bytes,
    );
    let mut rejections = Vec::with_capacity(output.rejections.len());
    for r in &output.rejections {
        let key = plugin::json::key_text(&r.key);
        if settings.on_reject == OnReject::Fail {
            return Err(PipelineError::Rejected {
                table: table.source.to_string(),
                partition: partition.to_string(),
                key,
                reason: r.reason.clone(),
            });
        }
        let row = &input[r.input];
        rejections.push(target::RejectedRow {
            key,
            reason: r.reason.clone(),
            input: plugin::json::plain_row(&row.columns),
            source_position: row.commit_position,
        });
    }
    Ok((output.rows, rejections))
}

/// Row changes by table (a few tables: a list beats a map).
fn changes_by_table<'a>(changes: impl IntoIterator<Item = &'a StageChange>) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = Vec::new();
    for change in changes {
        let table = match change {
            StageChange::Upsert { table, .. }
            | StageChange::UpsertUnchanged { table, .. }
            | StageChange::Delete { table, .. }
            | StageChange::Truncate { table } => table,
            StageChange::SourceState(_) => continue,
        };
        match counts.iter_mut().find(|(t, _)| t == table) {
            Some((_, n)) => *n += 1,
            None => counts.push((table.clone(), 1)),
        }
    }
    counts
}

/// The identity transform: each staged row's values in the table's column order
/// (absent columns are NULL). Values are moved, not copied.
fn identity(table: &TableConfig, rows: Vec<StagedRow>) -> Vec<Vec<Value>> {
    rows.into_iter()
        .map(|mut row| {
            table
                .columns
                .iter()
                .map(|c| {
                    row.values
                        .iter_mut()
                        .find(|(name, _)| name == &c.name)
                        .map_or(Value::Null, |(_, v)| std::mem::replace(v, Value::Null))
                })
                .collect()
        })
        .collect()
}

/// What `status` shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    pub stage: String,
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
    /// Why the slot could not be read, if it could not.
    pub source_error: Option<String>,
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
        target_error: None,
        slot_wal_status: None,
        slot_lag_bytes: None,
        source_error: None,
    };
    if let SourceConfig::Postgres { slot, .. } = &config.source {
        let slot_status = async {
            let client = postgres::connect(&postgres_dsn(config)?).await?;
            Ok::<_, PipelineError>(postgres::slot_status(&client, slot).await?)
        };
        match slot_status.await {
            Ok(Some((wal_status, lag))) => {
                status.slot_wal_status = Some(wal_status);
                status.slot_lag_bytes = Some(lag);
            }
            Ok(None) => {
                status.source_error = Some(format!("replication slot `{slot}` does not exist"))
            }
            Err(e) => status.source_error = Some(error_chain(&e)),
        }
    }
    match target::connect(dsn).await {
        Ok(client) => {
            match target::recent_writes(&client, last_writes).await {
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
                            .filter(|(_, l)| target::is_stale(l, &expected))
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
    Ok(status)
}

/// Moved to [`crate::errors`]; the old path, kept while other modules still use it.
pub use crate::errors::error_chain;
