//! The pipeline's error, and how the run loop classifies one (usage, transient,
//! deterministic).

use crate::plugin::PluginError;
use crate::source::SourceError;
use crate::source::postgres::PgSourceError;
use crate::stage::StageError;
use crate::target::TargetError;

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Boxed: the target's errors are large and rare.
    #[error(transparent)]
    Target(Box<TargetError>),
    #[error("partition {partition} of {table} failed{}", if *others == 0 { String::new() } else { format!(" (and {others} more, each logged above; `weir status` lists them)") })]
    Partition {
        table: String,
        partition: String,
        /// Other partitions of the same round that failed too.
        others: usize,
        #[source]
        source: Box<PipelineError>,
    },
    #[error("table `{0}` is not in the config")]
    UnknownTable(String),
    #[error(
        "{table} is being read again by `weir resync` and the stage does not hold all its rows yet: its partitions are written once `weir status` shows it done"
    )]
    Resyncing { table: String },
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
        "{}: the stage at {} holds {tables} under another contract: {differences}. A stage's rows are keyed, partitioned and sent to their target by the contract they were staged under, so it is not changed under them: to change a key, partition column, grain or target, use a new stage (point `[stage] path` at a new folder, then run `weir init --take-over` and `weir run`, which read the source again), or put the config back",
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
        "target table {target} holds {partitions} partitions another pipeline wrote, from {from} (another stage): two pipelines writing one target table replace each other's partitions. Give this [[table]] another target; or, if that pipeline is gone for good, remove its lineage: {remove}"
    )]
    ForeignLineage {
        target: String,
        /// The other pipeline's source table, and its source when known.
        from: String,
        partitions: i64,
        /// The statement that removes its lineage.
        remove: String,
    },
    #[error(
        "target table {target} holds partitions another stage of this source wrote under another partitioning ({names}: not partitions of {partitioning}): no write of this table can find their rows, which would stay for good. Empty the table, then `weir run` writes every partition: {remove}"
    )]
    OtherPartitioning {
        target: String,
        names: String,
        /// The table's partitioning now: `` `column` by grain ``.
        partitioning: String,
        /// The statements that empty the table and its lineage.
        remove: String,
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
        "{table}, partition {partition}: the plugin read a clock or drew random bytes, so a row's output depends on the other rows of its job: its partitions are replaced whole, not merged"
    )]
    MergeImpure { table: String, partition: String },
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
    /// can run (exit code 2): a stage contract the config breaks, a table the config
    /// describes wrongly, a plugin file that cannot be read or is not a component, a
    /// publication, key or replica identity that would hide changes.
    pub fn is_usage(&self) -> bool {
        match self {
            PipelineError::Contract { .. }
            | PipelineError::Config(_)
            | PipelineError::Table { .. }
            | PipelineError::Plugin(PluginError::Read { .. } | PluginError::Load { .. })
            | PipelineError::ForeignLineage { .. }
            | PipelineError::OtherPartitioning { .. } => true,
            PipelineError::Target(e) => matches!(
                **e,
                crate::target::TargetError::SchemaMismatch { .. }
                    | crate::target::TargetError::Claimed { .. }
                    | crate::target::TargetError::ClaimedByStage { .. }
                    | crate::target::TargetError::SharedFeed { .. }
                    | crate::target::TargetError::UnsafeTarget { .. }
            ),
            PipelineError::PgSource(e) => e.is_usage(),
            PipelineError::Source(crate::source::SourceError::Postgres(e)) => e.is_usage(),
            _ => false,
        }
    }

    /// Whether a partition's write was put off because a large transaction is being
    /// applied to the stage (its partitions are readable once it commits): normal
    /// operation, retried next round, neither logged nor counted as a failure.
    pub fn is_deferred(&self) -> bool {
        matches!(
            self,
            PipelineError::Stage(crate::stage::StageError::Applying)
        )
    }

    /// Whether the source went away part way through the first load (see
    /// [`crate::source::postgres::PgSourceError::LoadInterrupted`]).
    pub fn is_interrupted_load(&self) -> bool {
        use crate::source::postgres::PgSourceError::LoadInterrupted;
        match self {
            PipelineError::PgSource(e) => matches!(e, LoadInterrupted(_)),
            PipelineError::Source(crate::source::SourceError::Postgres(e)) => {
                matches!(**e, LoadInterrupted(_))
            }
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
    pub(super) fn is_deterministic(&self) -> bool {
        match self {
            PipelineError::Partition { source, .. } => source.is_deterministic(),
            PipelineError::Rejected { .. } | PipelineError::MergeKey { .. } => true,
            // A wall-clock timeout is not strictly a function of the input, but retrying
            // a job that ran out of time every round would keep a worker busy forever:
            // like the others, it waits for the partition to change (or a restart).
            PipelineError::Plugin(e) => !matches!(
                e,
                PluginError::Thread(_) | PluginError::Lost | PluginError::HostMemory { .. }
            ),
            _ => false,
        }
    }
}
