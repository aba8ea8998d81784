//! The PostgreSQL target: its `weir` schema (lineage and dead letters), the target
//! tables, and the atomic partition replace.
//!
//! **Architecture Invariant**: a partition is written in exactly one target
//! transaction: advisory lock on (table, partition), DELETE of the partition, binary
//! COPY of its rows, upsert of its lineage row. Readers see the old partition or the
//! new one, never a mix, and two writers of one partition (threads or processes)
//! serialize on the lock.
//!
//! **API Boundary**: the target sees rows already in target column order; it knows
//! nothing of the stage or of sources.
//!
//! The rooms: [`schema`] (the `weir` schema's DDL and the target tables' checks,
//! which `init` runs), [`write`] (the partition replace and merge: lock, DELETE, COPY),
//! [`lineage`] (the `weir.partitions` row of each write, and whether it is stale) and
//! [`read`] (a partition read back for `verify`).

use postgres_types::Type;
use tokio_postgres::Client;

use crate::config::{Dsn, TableName, TargetPartitioning};
use crate::partition::{Grain, Partition, PartitionPredicate, predicate};
use crate::pgerror::PgError;
use crate::value::{ColumnType, EncodeError};

pub mod claims;
pub mod group;
pub mod lineage;
pub mod read;
pub mod schema;
pub mod write;
pub mod writer;

pub use group::{GroupWriter, MemberKeys, open_group};
pub use lineage::{
    PartitionLineage, begin_backfill, expected_transform, finish_backfill, is_stale, recent_writes,
    register_stage, stage_sources, table_lineage,
};
pub use read::read_partition;
pub use schema::{
    Prepare, column_names, ensure_weir_schema, forget_lineage_of_empty, prepare_table,
};
pub use write::{
    Begun, Checksum, MergeKeys, PartitionMeta, PartitionWrite, RejectedRow, WriteSummary,
    begin_partition_write, checksum, explain_lock_error, explain_lock_timeout, merge_partition,
    replace_partition, write_dead_letters,
};
pub use writer::{Opened, PartitionWriter, open_merge, open_replace};

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error("cannot connect to the target PostgreSQL")]
    Connect(#[source] crate::pgconn::ConnectError),
    #[error("target query failed: {what}")]
    Query {
        what: String,
        #[source]
        source: PgError,
    },
    #[error(
        "partition {partition} of {table}: a value of column `{column}` has {digits} decimal places, and the column keeps {scale}: PostgreSQL would round it, so nothing of the partition was written. It was staged before the column's type was narrowed: put the wider type back (in the config and the target), or read the table again into a new stage (new `[stage] path`, `weir init`)"
    )]
    WouldRound {
        table: TableName,
        partition: String,
        column: String,
        digits: usize,
        scale: i16,
    },
    #[error("target table {table} does not exist: run `weir init` to create it")]
    MissingTable { table: TableName },
    #[error(
        "partition {partition} of the target table {table} was written by another pipeline, from {source_table} (another stage): two pipelines writing one target table replace each other's partitions; nothing was written. Give this [[table]] another target"
    )]
    ForeignPartition {
        table: TableName,
        partition: String,
        source_table: String,
    },
    #[error(
        "target table {table}{through} is written by another pipeline: {by}. Two pipelines writing one target table replace each other's partitions; nothing was written. Give this [[table]] another `target`; or, if that pipeline is retired or this one replaces it (a new slot for a new snapshot), stop it and run `weir init --take-over`, then `weir run`"
    )]
    Claimed {
        table: TableName,
        through: String,
        /// The pipeline that claimed it, and when: `postgres:slot=… of postgres:…
        /// (stage …) claimed it at …`.
        by: String,
    },
    #[error("target table {table} is written by another stage: {by}; {advice}")]
    ClaimedByStage {
        table: TableName,
        by: String,
        advice: String,
    },
    #[error(
        "the claim of the target table {table} kept changing while Weir read it (another pipeline claiming it at once): run again"
    )]
    ClaimRace { table: TableName },
    #[error(
        "{feed} is already the feed of another pipeline (stage {stage}, writing {tables}): two pipelines on one slot acknowledge changes for each other, and each loses what the other read. Give this pipeline its own `slot` (and `publication`)"
    )]
    SharedFeed {
        feed: String,
        stage: String,
        tables: String,
    },
    #[error(
        "the columns of the target table {table} changed since Weir checked them at start (a column retyped, added, dropped or renamed): its writes stop rather than let PostgreSQL read the values as the new types say. Restart `weir run`, which checks the table again and names what differs"
    )]
    ColumnsChanged { table: TableName },
    #[error(
        "the target table {table} kept {kept} of the {sent} rows Weir copied into it: a trigger or rule on it drops rows (a BEFORE INSERT trigger returning NULL). The write was rolled back; drop or change the trigger (filter rows in a plugin instead) and the partition is written again"
    )]
    RowsNotKept {
        table: TableName,
        sent: u64,
        kept: u64,
    },
    #[error("target table {table} does not match the configured columns:\n  {}\nalter the table to match (then `weir backfill --stale` rewrites the partitions an older plugin or config wrote; a `timestamp` made `timestamptz` keeps its instants with `ALTER … TYPE timestamptz USING col AT TIME ZONE 'UTC'`, as Weir writes them, where a plain ALTER reads them in the session's time zone and moves rows to other partitions), or write a new table: point `target` at it with a new `[stage] path`, and run `weir init`", differences.join("\n  "))]
    SchemaMismatch {
        table: TableName,
        differences: Vec<String>,
    },
    #[error("target table {table}: {problem}")]
    UnsafeTarget { table: TableName, problem: String },
    #[error("the weir schema is missing in the target: run `weir init`")]
    MissingWeirSchema,
    #[error("column `{column}` of {table}, partition {partition}")]
    Encode {
        table: TableName,
        partition: String,
        column: String,
        /// Boxed: the rarest error of a write, and otherwise its largest.
        #[source]
        source: Box<EncodeError>,
    },
    #[error("{table}: cannot read back a value: {message}")]
    Decode { table: TableName, message: String },
    #[error(transparent)]
    LockTimeout(Box<LockWait>),
    #[error("partition `{partition}` of {table} has no SQL form for grain {grain}")]
    BadPartition {
        table: TableName,
        partition: String,
        grain: Grain,
    },
}

/// A partition write that waited longer than `lock_timeout_ms` for a lock (boxed in
/// [`TargetError::LockTimeout`]: it is the largest error of a write).
#[derive(Debug, thiserror::Error)]
#[error(
    "partition {partition} of {table}: {what} waited longer than lock_timeout_ms = {timeout_ms} for a lock held by {}; a live `weir run` retries it, `run --once` and `backfill` are run again (end the blocking session, or raise [target] lock_timeout_ms)",
    if blockers.is_empty() { "another session".to_owned() } else { format!("the session(s) with pid {}", blockers.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")) }
)]
pub struct LockWait {
    pub table: TableName,
    pub partition: String,
    pub what: String,
    pub timeout_ms: u64,
    pub blockers: Vec<i32>,
}

fn query_err(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> TargetError {
    let what = what.into();
    move |source| {
        // A read-only target fails whatever Weir asked of it: say so, not what failed.
        let code = source.code().map(|c| c.code());
        // A column or table of Weir's own schema missing: an older build made it.
        let older_schema = matches!(code, Some("42703" | "42P01"))
            && source.as_db_error().is_some_and(|e| {
                e.message().contains("weir.") || what.contains("lineage") || what.contains("claim")
            });
        TargetError::Query {
            what: if code == Some("25006") {
                format!(
                    "{what}: the target is read-only (`default_transaction_read_only` is on for it, or it is a standby in recovery): point the target DSN at a writable primary"
                )
            } else if older_schema {
                format!(
                    "{what}: the target's `weir` schema is an older build's (the binary was upgraded): `weir init` or `weir run` of this build upgrades it first"
                )
            } else {
                what
            },
            source: PgError(source),
        }
    }
}

/// Connects to the target (TLS per the DSN's sslmode, see `pgconn`); the connection's
/// driver runs as a background task.
pub async fn connect(dsn: &Dsn) -> Result<Client, TargetError> {
    let (client, connection) = crate::pgconn::connect(dsn)
        .await
        .map_err(TargetError::Connect)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(error = %crate::pgerror::render(&error), "target connection closed");
        }
    });
    Ok(client)
}

/// A target table as the writer needs it: columns with their PostgreSQL types.
#[derive(Debug, Clone)]
pub struct TargetTable {
    pub name: TableName,
    pub columns: Vec<(String, Type)>,
    pub partition_column: String,
    pub partition_type: ColumnType,
    pub grain: Grain,
    pub partitioning: TargetPartitioning,
    /// `[target] lock_timeout_ms`: how long a partition write waits for a lock.
    pub lock_timeout_ms: u64,
    /// The table's columns as checked (`schema::COLUMNS_SIGNATURE`), compared under
    /// each write's lock.
    pub columns_signature: String,
    /// Per column of `columns`: the scale of a `numeric(p,s)` column, whose COPY would
    /// round a value with more places (staged before the config's type was narrowed).
    pub numeric_scales: Vec<Option<i16>>,
}

impl TargetTable {
    /// The partition as a predicate on the partition column.
    pub(super) fn predicate(
        &self,
        partition: &Partition,
    ) -> Result<PartitionPredicate, TargetError> {
        predicate(self.partition_type, self.grain, partition)
            .ok_or_else(|| self.bad_partition(partition))
    }

    /// The error for a partition this table's column type and grain cannot bound.
    pub(super) fn bad_partition(&self, partition: &Partition) -> TargetError {
        TargetError::BadPartition {
            table: self.name.clone(),
            partition: partition.name().into_owned(),
            grain: self.grain,
        }
    }
}
