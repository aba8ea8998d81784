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

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use futures_util::{SinkExt, pin_mut};
use postgres_types::{IsNull, ToSql, Type, to_sql_checked};
use sha2::{Digest, Sha256};
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::config::{
    Column, Dsn, TableConfig, TableName, TargetPartitioning, WriteMode, quote_ident, quote_literal,
};
use crate::partition::{Grain, Partition, PartitionPredicate, predicate};
use crate::pgerror::PgError;
use crate::source::BadRecord;
use crate::value::{ColumnType, EncodeError, Value};

/// COPY data sent to the server at a time: bounds the writer's buffer.
const COPY_CHUNK_BYTES: usize = 1 << 20;
/// The signature that starts PostgreSQL's binary COPY format.
const COPY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// DDL of the `weir` schema. Idempotent.
const WEIR_SCHEMA_SQL: &str = r#"
CREATE SCHEMA IF NOT EXISTS weir;
CREATE TABLE IF NOT EXISTS weir.partitions (
    target_table     text        NOT NULL,
    partition        text        NOT NULL,
    source_table     text        NOT NULL,
    stage_generation bigint      NOT NULL,
    source_position  bigint      NOT NULL,
    transform        text        NOT NULL,
    row_count        bigint      NOT NULL,
    checksum         text        NOT NULL,
    written_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (target_table, partition)
);
COMMENT ON TABLE weir.partitions IS 'Lineage: one row per written partition, updated in the same transaction as the partition.';
CREATE TABLE IF NOT EXISTS weir.dead_letter (
    id              bigserial   PRIMARY KEY,
    kind            text        NOT NULL,
    source          text        NOT NULL,
    source_position bigint      NOT NULL,
    line            bigint,
    source_table    text,
    reason          text        NOT NULL,
    raw             bytea       NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS dead_letter_bad_record ON weir.dead_letter (source, source_position) WHERE kind = 'bad-record';
-- Plugins (added after the first release of this schema; idempotent on either).
ALTER TABLE weir.partitions ADD COLUMN IF NOT EXISTS plugin_sha256 text;
ALTER TABLE weir.partitions ADD COLUMN IF NOT EXISTS config_hash text;
COMMENT ON COLUMN weir.partitions.plugin_sha256 IS 'sha256 of the plugin component that wrote the partition (NULL: identity transform).';
COMMENT ON COLUMN weir.partitions.config_hash IS 'sha256 of the plugin config the partition was written with (NULL: identity transform).';
ALTER TABLE weir.dead_letter ALTER COLUMN raw DROP NOT NULL;
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS target_table text;
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS partition text;
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS row_key jsonb;
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS input jsonb;
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS plugin_sha256 text;
ALTER TABLE weir.partitions ADD COLUMN IF NOT EXISTS write_mode text NOT NULL DEFAULT 'replace';
COMMENT ON COLUMN weir.partitions.write_mode IS 'replace: the partition was rewritten whole (checksum covers it); merge: only its changed keys were (checksum is empty).';
CREATE INDEX IF NOT EXISTS dead_letter_rejected ON weir.dead_letter (target_table, partition) WHERE kind = 'rejected';
CREATE TABLE IF NOT EXISTS weir.backfills (
    target_table text        NOT NULL,
    window_from  text        NOT NULL,
    window_to    text        NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    PRIMARY KEY (target_table, window_from, window_to)
);
COMMENT ON TABLE weir.backfills IS 'Backfills by window: an unfinished one is resumed (partitions written since it started are done).';
COMMENT ON COLUMN weir.dead_letter.kind IS 'bad-record: the source could not read it (raw holds it); rejected: the table''s plugin rejected the row (input holds it; replaced with its partition).';
COMMENT ON TABLE weir.dead_letter IS 'Records weir could not process, with the reason and the raw record.';
"#;

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
    #[error("target table {table} does not exist: run `weir init` to create it")]
    MissingTable { table: TableName },
    #[error("target table {table} does not match the configured columns:\n  {}\nalter the table, or point `target` at a new table and run `weir init`", differences.join("\n  "))]
    SchemaMismatch {
        table: TableName,
        differences: Vec<String>,
    },
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
    "partition {partition} of {table}: {what} waited longer than lock_timeout_ms = {timeout_ms} for a lock held by {}; it is retried (end the blocking session, or raise [target] lock_timeout_ms)",
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
    move |source| TargetError::Query {
        what,
        source: PgError(source),
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

/// Creates the `weir` schema and its tables if missing.
pub async fn ensure_weir_schema(client: &Client) -> Result<(), TargetError> {
    client
        .batch_execute(WEIR_SCHEMA_SQL)
        .await
        .map_err(query_err("create the weir schema"))
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
}

/// Where a native partition's rows live.
enum NativeChild {
    /// A child table of its own (`FOR VALUES FROM … TO …` or `IN (…)`), made on demand.
    Own { name: TableName, bound: String },
    /// The RANGE table's DEFAULT child, shared by the NULL and infinity partitions.
    Default,
}

/// A name Weir derives from `base` for a table it creates: `base` and `suffix`, or, when
/// that would pass PostgreSQL's 63 bytes, `base` cut and a hash of the whole of it.
fn derived_name(base: &str, suffix: &str) -> String {
    let whole = format!("{base}{suffix}");
    if whole.len() <= crate::config::limits::IDENTIFIER_BYTES_MAX {
        return whole;
    }
    let digest = hex::encode(&Sha256::digest(whole.as_bytes())[..4]);
    let mut cut = whole;
    cut.truncate(crate::config::limits::IDENTIFIER_BYTES_MAX - 9);
    while !cut.is_char_boundary(cut.len()) {
        cut.pop();
    }
    format!("{cut}_{digest}")
}

/// The child table of a native partition: `<table>_p_<readable>_<hash>`, where
/// `<readable>` is the partition name in lower-case letters, digits and `_` (cut to fit
/// PostgreSQL's 63 bytes) and `<hash>` 8 hex digits of a hash of the table and the exact
/// partition key. Two partitions never share a child name on readability alone: `EU`
/// and `eu`, NULL and the text `__null__`, `a-b` and `a_b` differ in the hash.
///
/// Children made by builds before this scheme have other names; they still serve:
/// writes go through the parent (PostgreSQL routes them), and a child is only made when
/// no child holds the partition's bound yet (see [`ensure_child`]).
fn child_table_name(table: &TableName, partition: &Partition) -> TableName {
    let readable: String = partition
        .name()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    let mut hasher = Sha256::new();
    hasher.update(table.to_string().as_bytes());
    hasher.update(b"\0");
    hasher.update(partition.to_bytes());
    let digest = hex::encode(&hasher.finalize()[..4]);
    let mut name = format!("{}_p_{readable}", table.name);
    name.truncate(crate::config::limits::IDENTIFIER_BYTES_MAX - 9);
    while !name.is_char_boundary(name.len()) {
        name.pop();
    }
    TableName {
        schema: table.schema.clone(),
        name: format!("{name}_{digest}"),
    }
}

/// The RANGE table's DEFAULT child.
fn default_child_name(table: &TableName) -> TableName {
    TableName {
        schema: table.schema.clone(),
        name: derived_name(&table.name, "_p_default"),
    }
}

/// A partition bound value as SQL (bounds in DDL take no bind parameters): quoted by
/// [`quote_literal`], timestamps with an explicit UTC offset (ignored by `timestamp`,
/// required by `timestamptz`). `None` for a value no SQL string can hold (NUL).
fn bound_literal(v: &Value) -> Option<String> {
    match v {
        Value::Null => Some("NULL".into()),
        Value::Int(i) => Some(i.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Timestamp(us) if *us != i64::MAX && *us != i64::MIN => {
            quote_literal(&format!("{v} +00"))
        }
        other => quote_literal(&other.to_string()),
    }
}

fn native_child(
    table: &TargetTable,
    partition: &Partition,
    pred: &PartitionPredicate,
) -> Result<NativeChild, TargetError> {
    let name = child_table_name(&table.name, partition);
    let literal = |v: &Value| {
        bound_literal(v).ok_or_else(|| TargetError::BadPartition {
            table: table.name.clone(),
            partition: partition.name().to_owned(),
            grain: table.grain,
        })
    };
    Ok(match (table.grain, pred) {
        (Grain::Value, PartitionPredicate::IsNull) => NativeChild::Own {
            name,
            bound: "FOR VALUES IN (NULL)".into(),
        },
        (Grain::Value, PartitionPredicate::Equals(v)) => NativeChild::Own {
            name,
            bound: format!("FOR VALUES IN ({})", literal(v)?),
        },
        (_, PartitionPredicate::Range { lower, upper }) => NativeChild::Own {
            name,
            bound: format!(
                "FOR VALUES FROM ({}) TO ({})",
                literal(lower)?,
                literal(upper)?
            ),
        },
        _ => NativeChild::Default,
    })
}

/// Creates a native partition's child table if no child holds its bound yet, in a
/// transaction of its own (before the partition's write, so that the write holds no
/// lock on the parent) under the write's `lock_timeout`. A child that an older build
/// made under another name for the same bound makes PostgreSQL refuse the new one as
/// overlapping (SQLSTATE 42P17): that child holds the partition, and serves.
async fn ensure_child(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
    child: &NativeChild,
) -> Result<(), TargetError> {
    let NativeChild::Own { name, bound } = child else {
        return Ok(());
    };
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&name.quoted()])
        .await
        .map_err(query_err(format!("look up {name}")))?
        .get(0);
    if exists.is_some() {
        return Ok(());
    }
    let result = client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL lock_timeout = '{}ms'; CREATE TABLE IF NOT EXISTS {} PARTITION OF {} {bound}; COMMIT",
            table.lock_timeout_ms,
            name.quoted(),
            table.name.quoted()
        ))
        .await;
    // A failed batch leaves its transaction open: end it before the connection is reused.
    if result.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INVALID_OBJECT_DEFINITION) => {
            tracing::debug!(table = %table.name, partition = %partition, "an existing child holds the partition's bound");
            Ok(())
        }
        Err(e) => Err(TargetError::Query {
            what: format!("create partition {name} of {}", table.name),
            source: PgError(e),
        }),
    }
}

/// What `prepare_table` may change in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepare {
    /// Check only (`run`, `backfill`, `verify`).
    Check,
    /// Create the table if it is missing (`init`).
    Create,
    /// Also add declared nullable columns the table lacks (`init --allow-add-columns`).
    CreateOrAddColumns,
}

/// Checks the target table of `table` against its declared columns; creates it when
/// missing (unless `Prepare::Check`), otherwise refuses. A table whose columns differ
/// is refused with every difference listed, except that declared nullable columns it
/// lacks are added with `Prepare::CreateOrAddColumns`.
pub async fn prepare_table(
    client: &mut Client,
    table: &TableConfig,
    prepare: Prepare,
) -> Result<TargetTable, TargetError> {
    let create = prepare != Prepare::Check;
    let name = &table.target;
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&name.quoted()])
        .await
        .map_err(query_err(format!("look up {name}")))?
        .get(0);
    if exists.is_none() {
        if !create {
            return Err(TargetError::MissingTable {
                table: name.clone(),
            });
        }
        let ddl = match table.target_partitioning {
            TargetPartitioning::Plain => format!(
                "CREATE SCHEMA IF NOT EXISTS {schema};\nCREATE TABLE {table} ({cols});\nCREATE INDEX ON {table} ({part});",
                schema = quote_ident(&name.schema),
                table = name.quoted(),
                cols = column_ddl(&table.columns),
                part = quote_ident(&table.partition_by),
            ),
            // Children are made on demand; a RANGE table's DEFAULT child takes the NULL
            // and infinity partitions.
            TargetPartitioning::Native => format!(
                "CREATE SCHEMA IF NOT EXISTS {schema};\nCREATE TABLE {table} ({cols}) PARTITION BY {method} ({part});{default}",
                schema = quote_ident(&name.schema),
                table = name.quoted(),
                cols = column_ddl(&table.columns),
                method = if table.grain == Grain::Value {
                    "LIST"
                } else {
                    "RANGE"
                },
                part = quote_ident(&table.partition_by),
                default = if table.grain == Grain::Value {
                    String::new()
                } else {
                    let default = default_child_name(name);
                    format!(
                        "\nCREATE TABLE {} PARTITION OF {} DEFAULT;",
                        default.quoted(),
                        name.quoted()
                    )
                },
            ),
        };
        client
            .batch_execute(&ddl)
            .await
            .map_err(query_err(format!("create {name}")))?;
        tracing::info!(table = %name, "created target table");
    }
    let partitioned: bool = client
        .query_one(
            "SELECT relkind = 'p' FROM pg_class WHERE oid = $1::text::regclass",
            &[&name.quoted()],
        )
        .await
        .map_err(query_err(format!("look up {name}")))?
        .get(0);
    let wanted = table.target_partitioning == TargetPartitioning::Native;
    if partitioned != wanted {
        return Err(TargetError::SchemaMismatch {
            table: name.clone(),
            differences: vec![if wanted {
                "it is a plain table; the config says target_partitioning = \"native\"".into()
            } else {
                "it is a partitioned table; the config says target_partitioning = \"plain\"".into()
            }],
        });
    }
    let mut actual = table_columns(client, &name.quoted()).await?;
    let expected = expected_columns(client, &table.columns).await?;
    // Declared nullable columns the table lacks: added on request, else a difference
    // whose message says how to add them.
    let addable: Vec<&Column> = table
        .columns
        .iter()
        .filter(|c| {
            !actual.iter().any(|(a, _, _)| *a == c.name)
                && !c.declared.to_ascii_uppercase().contains("NOT NULL")
        })
        .collect();
    if prepare == Prepare::CreateOrAddColumns && !addable.is_empty() {
        let adds = addable
            .iter()
            .map(|c| format!("ADD COLUMN {} {}", quote_ident(&c.name), c.declared))
            .collect::<Vec<_>>()
            .join(", ");
        client
            .batch_execute(&format!("ALTER TABLE {} {adds}", name.quoted()))
            .await
            .map_err(query_err(format!("add columns to {name}")))?;
        tracing::info!(table = %name, columns = %addable.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "), "added nullable columns to the target table");
        actual = table_columns(client, &name.quoted()).await?;
    }
    let mut differences = Vec::new();
    for (col, ty, _) in &expected {
        match actual.iter().find(|(c, _, _)| c == col) {
            None if addable.iter().any(|c| c.name == *col) => differences.push(format!(
                "column `{col}` ({ty}, nullable) is missing: `weir init --allow-add-columns` adds it"
            )),
            None => differences.push(format!("column `{col}` ({ty}) is missing")),
            Some((_, actual_ty, _)) if actual_ty != ty => differences.push(format!(
                "column `{col}` is {actual_ty}, config declares {ty}"
            )),
            Some(_) => {}
        }
    }
    for (col, ty, _) in &actual {
        if !expected.iter().any(|(c, _, _)| c == col) {
            differences.push(format!("column `{col}` ({ty}) is not in the config"));
        }
    }
    if !differences.is_empty() {
        return Err(TargetError::SchemaMismatch {
            table: name.clone(),
            differences,
        });
    }
    let columns = expected.into_iter().map(|(c, _, ty)| (c, ty)).collect();
    Ok(TargetTable {
        name: name.clone(),
        columns,
        partition_column: table.partition_by.clone(),
        partition_type: table.partition_column().ty,
        grain: table.grain,
        partitioning: table.target_partitioning,
        lock_timeout_ms: crate::config::limits::LOCK_TIMEOUT_MS_DEFAULT,
    })
}

fn column_ddl(columns: &[Column]) -> String {
    columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.declared))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The column names of a target table, or `None` if it does not exist.
pub async fn column_names(
    client: &Client,
    table: &TableName,
) -> Result<Option<Vec<String>>, TargetError> {
    let exists: Option<String> = client
        .query_one("SELECT to_regclass($1)::text", &[&table.quoted()])
        .await
        .map_err(query_err(format!("look up {table}")))?
        .get(0);
    if exists.is_none() {
        return Ok(None);
    }
    Ok(Some(
        table_columns(client, &table.quoted())
            .await?
            .into_iter()
            .map(|(name, _, _)| name)
            .collect(),
    ))
}

/// Column name, formatted type and type of a relation, in column order.
async fn table_columns(
    client: &impl GenericClient,
    relation: &str,
) -> Result<Vec<(String, String, Type)>, TargetError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid \
             FROM pg_attribute a WHERE a.attrelid = $1::text::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&relation],
        )
        .await
        .map_err(query_err(format!("read the columns of {relation}")))?;
    Ok(rows
        .iter()
        .map(|r| {
            let oid: u32 = r.get(2);
            (
                r.get(0),
                r.get(1),
                Type::from_oid(oid).unwrap_or(Type::UNKNOWN),
            )
        })
        .collect())
}

/// The columns PostgreSQL itself makes of the declared types: a temporary table is
/// created in a rolled-back transaction, so type aliases and modifiers compare exactly
/// as PostgreSQL sees them.
async fn expected_columns(
    client: &mut Client,
    columns: &[Column],
) -> Result<Vec<(String, String, Type)>, TargetError> {
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    tx.batch_execute(&format!(
        "CREATE TEMP TABLE weir_expected ({})",
        column_ddl(columns)
    ))
    .await
    .map_err(query_err("check the declared column types"))?;
    let out = table_columns(&tx, "pg_temp.weir_expected").await?;
    tx.rollback().await.map_err(query_err("rollback"))?;
    Ok(out)
}

/// What one partition write is made of.
#[derive(Debug, Clone)]
pub struct PartitionWrite<'a> {
    /// The feed's identity (`Config::source_id`), recorded with rejections.
    pub source_id: &'a str,
    pub source_table: &'a str,
    pub partition: &'a Partition,
    /// The stage generation the rows were read at.
    pub generation: u64,
    /// The stage's source position when the rows were read.
    pub source_position: u64,
    /// Identifies the transform (`identity`, or a plugin's hash).
    pub transform: &'a str,
    /// Output rows in target column order, in the order to COPY them.
    pub rows: &'a [Vec<Value>],
    /// The plugin's sha256 and config hash (both `None` for the identity transform).
    pub plugin_sha256: Option<&'a str>,
    pub config_hash: Option<&'a str>,
    /// Input rows the plugin rejected: they replace the partition's earlier rejections.
    pub rejections: &'a [RejectedRow],
    /// A backfill reads a stage that a live engine may be writing past: it does not
    /// replace a partition that lineage says was written from a newer generation.
    pub skip_if_newer: bool,
}

/// An input row a plugin rejected, as it is recorded in `weir.dead_letter`.
#[derive(Debug, Clone, PartialEq)]
pub struct RejectedRow {
    /// The row's key, as JSON text (`[42]`).
    pub key: String,
    pub reason: String,
    /// The input row as plain JSON.
    pub input: serde_json::Value,
    /// Source position of the transaction that wrote the row.
    pub source_position: u64,
}

/// The lineage of a written partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteSummary {
    /// Rows the partition holds after the write.
    pub rows: u64,
    /// Rows this write copied (all of them for a replace; the changed keys' for a merge).
    pub copied: u64,
    pub checksum: String,
    /// Input rows the plugin rejected (recorded in `weir.dead_letter`).
    pub rejected: u64,
    /// With `skip_if_newer`: nothing was written, lineage holds this newer generation.
    pub superseded_by: Option<u64>,
}

/// An order-independent checksum of rows: the wrapping sum of each row's 128-bit
/// digest. Unlike XOR, two equal rows do not cancel out.
pub fn checksum(rows: &[Vec<Value>]) -> String {
    let mut sum: u128 = 0;
    let mut encoded = Vec::new();
    for row in rows {
        // postcard of a Value is a canonical, self-delimiting encoding.
        encoded.clear();
        for value in row {
            encoded = postcard::to_extend(value, encoded).unwrap_or_default();
        }
        let digest = Sha256::digest(&encoded);
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        sum = sum.wrapping_add(u128::from_be_bytes(first));
    }
    format!("{sum:032x}")
}

/// The advisory-lock key of a target partition: two writers of one partition, in any
/// process, take the same key.
fn lock_key(table: &TableName, partition: &Partition) -> i64 {
    let mut hasher = Sha256::new();
    hasher.update(b"weir-partition\0");
    hasher.update(table.to_string().as_bytes());
    hasher.update(b"\0");
    hasher.update(partition.to_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A partition's write transaction, begun and holding the partition's lock.
struct PartitionTx<'c> {
    tx: Transaction<'c>,
    pred: PartitionPredicate,
}

/// Creates a native partition's child if missing (in a transaction of its own), then
/// begins the partition's write transaction, takes its advisory lock (waited for
/// without a limit: it serializes Weir's own writers) and sets the `lock_timeout` that
/// bounds the waits for table locks after it.
async fn begin_partition_write<'c>(
    client: &'c mut Client,
    table: &TargetTable,
    partition: &Partition,
) -> Result<PartitionTx<'c>, TargetError> {
    let pred = predicate(table.partition_type, table.grain, partition).ok_or_else(|| {
        TargetError::BadPartition {
            table: table.name.clone(),
            partition: partition.name().to_owned(),
            grain: table.grain,
        }
    })?;
    if table.partitioning == TargetPartitioning::Native {
        let child = native_child(table, partition, &pred)?;
        ensure_child(client, table, partition, &child).await?;
    }
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&lock_key(&table.name, partition)],
    )
    .await
    .map_err(query_err("take the partition lock"))?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        table.lock_timeout_ms
    ))
    .await
    .map_err(query_err("set lock_timeout"))?;
    Ok(PartitionTx { tx, pred })
}

/// A write that ran out of `lock_timeout` becomes [`TargetError::LockTimeout`], named
/// with the sessions that hold a conflicting lock on the table (or its children, or
/// Weir's lineage tables), logged (pids and partition, never a row value). The
/// pipeline retries it with its write backoff.
async fn explain_lock_timeout<T>(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
    result: Result<T, TargetError>,
) -> Result<T, TargetError> {
    match result {
        Err(TargetError::Query { what, source })
            if source.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
        {
            let blockers = match lock_holders(client, &table.name).await {
                Ok(pids) => pids,
                Err(error) => {
                    tracing::warn!(error = %crate::errors::error_chain(&error), "cannot list the sessions holding the lock");
                    Vec::new()
                }
            };
            tracing::warn!(
                table = %table.name,
                partition = %partition,
                blocker_pids = ?blockers,
                lock_timeout_ms = table.lock_timeout_ms,
                waiting_for = %what,
                "partition write timed out waiting for a lock; it is retried"
            );
            Err(TargetError::LockTimeout(Box::new(LockWait {
                table: table.name.clone(),
                partition: partition.name().to_owned(),
                what,
                timeout_ms: table.lock_timeout_ms,
                blockers,
            })))
        }
        other => other,
    }
}

/// The sessions holding a lock that a partition write waits on: a lock stronger than
/// ROW EXCLUSIVE on the table, one of its children, or Weir's lineage tables.
async fn lock_holders(client: &Client, table: &TableName) -> Result<Vec<i32>, TargetError> {
    let rows = client
        .query(
            "SELECT DISTINCT l.pid FROM pg_locks l \
             WHERE l.granted AND l.pid <> pg_backend_pid() AND l.locktype = 'relation' \
               AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock') \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND (l.relation = $1::text::regclass::oid \
                    OR l.relation IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::text::regclass) \
                    OR l.relation = to_regclass('weir.partitions')::oid \
                    OR l.relation = to_regclass('weir.dead_letter')::oid) \
             ORDER BY 1",
            &[&table.quoted()],
        )
        .await
        .map_err(query_err("list the sessions holding a lock"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Replaces one partition of `table` in one transaction. See the module invariant.
///
/// Both target modes DELETE the partition's rows (through the parent in native mode,
/// where PostgreSQL prunes to the child) and COPY the new ones, under ROW EXCLUSIVE
/// locks: a reader under READ COMMITTED or REPEATABLE READ sees the old rows or the new,
/// never none (TRUNCATE, which older builds used on native children, is not MVCC-safe).
pub async fn replace_partition(
    client: &mut Client,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
) -> Result<WriteSummary, TargetError> {
    let result = replace_partition_tx(client, table, write).await;
    explain_lock_timeout(client, table, write.partition, result).await
}

async fn replace_partition_tx(
    client: &mut Client,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
) -> Result<WriteSummary, TargetError> {
    let partition_name = write.partition.name().to_owned();
    let column = quote_ident(&table.partition_column);
    let PartitionTx { tx, pred } = begin_partition_write(client, table, write.partition).await?;
    if write.skip_if_newer {
        let newer: Option<i64> = tx
            .query_opt(
                "SELECT stage_generation FROM weir.partitions WHERE target_table = $1 AND partition = $2",
                &[&table.name.to_string(), &partition_name],
            )
            .await
            .map_err(query_err("read the partition's lineage"))?
            .map(|r| r.get(0));
        if let Some(newer) = newer.and_then(|g| u64::try_from(g).ok())
            && newer > write.generation
        {
            tx.rollback().await.map_err(query_err("rollback"))?;
            return Ok(WriteSummary {
                rows: 0,
                copied: 0,
                checksum: String::new(),
                rejected: 0,
                superseded_by: Some(newer),
            });
        }
    }
    let delete = format!("DELETE FROM {} WHERE ", table.name.quoted());
    let deleted = match &pred {
        PartitionPredicate::IsNull => tx.execute(&format!("{delete}{column} IS NULL"), &[]).await,
        PartitionPredicate::Equals(v) => tx.execute(&format!("{delete}{column} = $1"), &[v]).await,
        PartitionPredicate::Range { lower, upper } => {
            tx.execute(
                &format!("{delete}{column} >= $1 AND {column} < $2"),
                &[lower, upper],
            )
            .await
        }
    }
    .map_err(query_err(format!(
        "delete partition {partition_name} of {}",
        table.name
    )))?;

    crate::failpoint!("target-after-delete");
    let copied = copy_rows(&tx, table, &partition_name, write.rows).await?;
    crate::failpoint!("target-after-copy");
    let summary = WriteSummary {
        rows: copied,
        copied,
        checksum: checksum(write.rows),
        rejected: write.rejections.len() as u64,
        superseded_by: None,
    };
    // The partition's rejections are part of its output: replaced with it.
    replace_rejections(&tx, table, write, None).await?;
    record_lineage(&tx, table, write, &summary, WriteMode::Replace).await?;
    tx.commit().await.map_err(query_err(format!(
        "commit partition {partition_name} of {}",
        table.name
    )))?;
    tracing::debug!(table = %table.name, partition = %partition_name, deleted, rows = summary.rows, "partition replaced");
    Ok(summary)
}

/// Streams `rows` into the table with a binary COPY (a natively partitioned table
/// routes them to the partition's child); returns the rows copied.
async fn copy_rows(
    tx: &Transaction<'_>,
    table: &TargetTable,
    partition_name: &str,
    rows: &[Vec<Value>],
) -> Result<u64, TargetError> {
    let mut cols = String::new();
    for (i, (name, _)) in table.columns.iter().enumerate() {
        if i > 0 {
            cols.push_str(", ");
        }
        let _ = write!(cols, "{}", quote_ident(name));
    }
    let copy_err = || query_err(format!("COPY into {}", table.name));
    let sink = tx
        .copy_in(&format!(
            "COPY {} ({cols}) FROM STDIN (FORMAT binary)",
            table.name.quoted()
        ))
        .await
        .map_err(query_err(format!("start COPY into {}", table.name)))?;
    pin_mut!(sink);
    // The binary COPY stream, encoded once per value and sent in bounded chunks. A value
    // that does not fit its column fails the job with the column named; dropping the
    // unfinished sink aborts the COPY and the transaction rolls back.
    let fields = i16::try_from(table.columns.len()).unwrap_or(i16::MAX);
    let mut buf = BytesMut::with_capacity(COPY_CHUNK_BYTES + COPY_CHUNK_BYTES / 4);
    buf.extend_from_slice(COPY_SIGNATURE);
    buf.put_i32(0); // flags
    buf.put_i32(0); // header extension length
    let mut value_bytes = Vec::new();
    for row in rows {
        buf.put_i16(fields);
        for ((name, ty), value) in table.columns.iter().zip(row) {
            if value.is_null() {
                buf.put_i32(-1);
                continue;
            }
            value_bytes.clear();
            value
                .encode_binary(ty, &mut value_bytes)
                .map_err(|source| TargetError::Encode {
                    table: table.name.clone(),
                    partition: partition_name.to_owned(),
                    column: name.clone(),
                    source: Box::new(source),
                })?;
            buf.put_i32(i32::try_from(value_bytes.len()).unwrap_or(i32::MAX));
            buf.extend_from_slice(&value_bytes);
        }
        if buf.len() >= COPY_CHUNK_BYTES {
            sink.as_mut()
                .send(buf.split().freeze())
                .await
                .map_err(copy_err())?;
        }
    }
    buf.put_i16(-1); // trailer
    sink.as_mut().send(buf.freeze()).await.map_err(copy_err())?;
    sink.as_mut()
        .finish()
        .await
        .map_err(query_err(format!("finish COPY into {}", table.name)))
}

/// Replaces the partition's rejections in `weir.dead_letter` with `write.rejections`:
/// all of them (`keys`: `None`), or only those of the given keys (JSON text, `[42]`).
async fn replace_rejections(
    tx: &Transaction<'_>,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
    keys: Option<&[String]>,
) -> Result<(), TargetError> {
    let target_name = table.name.to_string();
    let partition_name = write.partition.name();
    match keys {
        None => tx
            .execute(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2",
                &[&target_name, &partition_name],
            )
            .await,
        Some(keys) => tx
            .execute(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2 \
                 AND row_key = ANY($3::text[]::jsonb[])",
                &[&target_name, &partition_name, &keys],
            )
            .await,
    }
    .map_err(query_err("clear the partition's rejections"))?;
    if write.rejections.is_empty() {
        return Ok(());
    }
    let insert = tx
        .prepare(
            "INSERT INTO weir.dead_letter (kind, source, source_position, source_table, target_table, partition, row_key, reason, input, plugin_sha256) \
             VALUES ('rejected', $1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9)",
        )
        .await
        .map_err(query_err("prepare the rejection insert"))?;
    for r in write.rejections {
        tx.execute(
            &insert,
            &[
                &write.source_id,
                &i64::try_from(r.source_position).unwrap_or(i64::MAX),
                &write.source_table,
                &target_name,
                &partition_name,
                &r.key,
                &r.reason,
                &r.input,
                &write.plugin_sha256,
            ],
        )
        .await
        .map_err(query_err("record rejected rows"))?;
    }
    Ok(())
}

/// Upserts the partition's lineage row.
async fn record_lineage(
    tx: &Transaction<'_>,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
    summary: &WriteSummary,
    mode: WriteMode,
) -> Result<(), TargetError> {
    tx.execute(
        "INSERT INTO weir.partitions AS p (target_table, partition, source_table, stage_generation, source_position, transform, row_count, checksum, plugin_sha256, config_hash, write_mode, written_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now()) \
         ON CONFLICT (target_table, partition) DO UPDATE SET source_table = EXCLUDED.source_table, \
           stage_generation = EXCLUDED.stage_generation, source_position = EXCLUDED.source_position, \
           transform = EXCLUDED.transform, row_count = EXCLUDED.row_count, checksum = EXCLUDED.checksum, \
           plugin_sha256 = EXCLUDED.plugin_sha256, config_hash = EXCLUDED.config_hash, \
           write_mode = EXCLUDED.write_mode, written_at = EXCLUDED.written_at",
        &[
            &table.name.to_string(),
            &write.partition.name(),
            &write.source_table,
            &i64::try_from(write.generation).unwrap_or(i64::MAX),
            &i64::try_from(write.source_position).unwrap_or(i64::MAX),
            &write.transform,
            &i64::try_from(summary.rows).unwrap_or(i64::MAX),
            &summary.checksum,
            &write.plugin_sha256,
            &write.config_hash,
            &mode.as_str(),
        ],
    )
    .await
    .map_err(|source| match source.code() {
        Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => TargetError::MissingWeirSchema,
        _ => TargetError::Query { what: "record lineage".into(), source: PgError(source) },
    })?;
    Ok(())
}

/// The keys a merge rewrites: each changed key's values, in the order of `columns`
/// (indexes into the target's columns), and the same keys as rejection keys (`[42]`).
#[derive(Debug, Clone, Default)]
pub struct MergeKeys {
    pub columns: Vec<usize>,
    pub keys: Vec<Vec<Value>>,
    pub rejection_keys: Vec<String>,
}

/// Merges one partition in one transaction: under the partition's lock, deletes the
/// target rows of the changed keys in the partition, COPYs their new output, replaces
/// their rejections and updates lineage (row count by the difference; no checksum).
///
/// A merge is only right on top of what the same transform wrote: `Ok(None)`, with
/// nothing changed, when lineage has no row for the partition or names another
/// transform, plugin or config. The caller then replaces the partition.
pub async fn merge_partition(
    client: &mut Client,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
    merge: &MergeKeys,
) -> Result<Option<WriteSummary>, TargetError> {
    let result = merge_partition_tx(client, table, write, merge).await;
    explain_lock_timeout(client, table, write.partition, result).await
}

async fn merge_partition_tx(
    client: &mut Client,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
    merge: &MergeKeys,
) -> Result<Option<WriteSummary>, TargetError> {
    let partition_name = write.partition.name().to_owned();
    let column = quote_ident(&table.partition_column);
    let PartitionTx { tx, pred } = begin_partition_write(client, table, write.partition).await?;
    let target_name = table.name.to_string();
    let lineage = tx
        .query_opt(
            "SELECT row_count, transform, plugin_sha256, config_hash FROM weir.partitions \
             WHERE target_table = $1 AND partition = $2",
            &[&target_name, &partition_name],
        )
        .await
        .map_err(|source| match source.code() {
            Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => {
                TargetError::MissingWeirSchema
            }
            _ => TargetError::Query {
                what: "read the partition's lineage".into(),
                source: PgError(source),
            },
        })?;
    let previous_rows = match lineage {
        Some(row)
            if row.get::<_, String>(1) == write.transform
                && row.get::<_, Option<String>>(2).as_deref() == write.plugin_sha256
                && row.get::<_, Option<String>>(3).as_deref() == write.config_hash =>
        {
            row.get::<_, i64>(0)
        }
        _ => {
            tx.rollback().await.map_err(query_err("rollback"))?;
            return Ok(None);
        }
    };
    // DELETE … WHERE <partition> AND (k1, k2) IN (SELECT * FROM unnest($3::t1[], $4::t2[]))
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    let condition = match &pred {
        PartitionPredicate::IsNull => format!("{column} IS NULL"),
        PartitionPredicate::Equals(v) => {
            params.push(Box::new(v.clone()));
            format!("{column} = $1")
        }
        PartitionPredicate::Range { lower, upper } => {
            params.push(Box::new(lower.clone()));
            params.push(Box::new(upper.clone()));
            format!("{column} >= $1 AND {column} < $2")
        }
    };
    let mut key_cols = Vec::with_capacity(merge.columns.len());
    let mut arrays = Vec::with_capacity(merge.columns.len());
    for (i, &c) in merge.columns.iter().enumerate() {
        let (name, ty) = &table.columns[c];
        key_cols.push(quote_ident(name));
        params.push(Box::new(
            merge
                .keys
                .iter()
                .map(|k| k.get(i).cloned().unwrap_or(Value::Null))
                .collect::<Vec<Value>>(),
        ));
        arrays.push(format!("${}::{}[]", params.len(), quote_ident(ty.name())));
    }
    let delete = format!(
        "DELETE FROM {} WHERE {condition} AND ({}) IN (SELECT * FROM unnest({}))",
        table.name.quoted(),
        key_cols.join(", "),
        arrays.join(", ")
    );
    let refs: Vec<&(dyn ToSql + Sync)> = params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let deleted = tx.execute(&delete, &refs).await.map_err(query_err(format!(
        "delete the changed keys of partition {partition_name} of {}",
        table.name
    )))?;
    crate::failpoint!("target-after-delete");
    let copied = copy_rows(&tx, table, &partition_name, write.rows).await?;
    crate::failpoint!("target-after-copy");
    let rows = u64::try_from(previous_rows)
        .unwrap_or(0)
        .saturating_sub(deleted)
        .saturating_add(copied);
    let summary = WriteSummary {
        rows,
        copied,
        checksum: String::new(),
        rejected: write.rejections.len() as u64,
        superseded_by: None,
    };
    replace_rejections(&tx, table, write, Some(&merge.rejection_keys)).await?;
    record_lineage(&tx, table, write, &summary, WriteMode::Merge).await?;
    tx.commit().await.map_err(query_err(format!(
        "commit partition {partition_name} of {}",
        table.name
    )))?;
    tracing::debug!(table = %table.name, partition = %partition_name, deleted, copied, rows, "partition merged");
    Ok(Some(summary))
}

/// Writes bad records to `weir.dead_letter`; a record already there (same source and
/// position) is not written twice.
pub async fn write_dead_letters(
    client: &mut Client,
    source: &str,
    records: &[BadRecord],
) -> Result<(), TargetError> {
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    let statement = tx
        .prepare(
            "INSERT INTO weir.dead_letter (kind, source, source_position, line, source_table, reason, raw) \
             VALUES ('bad-record', $1, $2, $3, $4, $5, $6) \
             ON CONFLICT (source, source_position) WHERE kind = 'bad-record' DO NOTHING",
        )
        .await
        .map_err(query_err("prepare the dead-letter insert"))?;
    for r in records {
        let position = i64::try_from(r.position).unwrap_or(i64::MAX);
        let line = r.line.and_then(|l| i64::try_from(l).ok());
        tx.execute(
            &statement,
            &[&source, &position, &line, &r.table, &r.reason, &r.raw],
        )
        .await
        .map_err(query_err("write dead letters"))?;
    }
    tx.commit().await.map_err(query_err("commit dead letters"))
}

/// What lineage says of one partition.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartitionLineage {
    pub stage_generation: i64,
    pub transform: String,
    pub row_count: i64,
    pub checksum: String,
    pub plugin_sha256: Option<String>,
    pub config_hash: Option<String>,
    /// Microseconds since the epoch, by the target's clock.
    pub written_at_us: i64,
}

/// The lineage of every partition of a target table, by partition name.
pub async fn table_lineage(
    client: &Client,
    table: &TableName,
) -> Result<std::collections::BTreeMap<String, PartitionLineage>, TargetError> {
    let rows = client
        .query(
            "SELECT partition, stage_generation, transform, row_count, checksum, plugin_sha256, config_hash, \
             (extract(epoch FROM written_at) * 1000000)::bigint FROM weir.partitions WHERE target_table = $1",
            &[&table.to_string()],
        )
        .await
        .map_err(query_err(format!("read the lineage of {table}")))?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                PartitionLineage {
                    stage_generation: r.get(1),
                    transform: r.get(2),
                    row_count: r.get(3),
                    checksum: r.get(4),
                    plugin_sha256: r.get(5),
                    config_hash: r.get(6),
                    written_at_us: r.get(7),
                },
            )
        })
        .collect())
}

/// Starts (or resumes) the backfill of a window: returns when it started, in
/// microseconds by the target's clock (an unfinished earlier run's start: resumed).
pub async fn begin_backfill(
    client: &Client,
    table: &TableName,
    from: &str,
    to: &str,
) -> Result<(i64, bool), TargetError> {
    let row = client
        .query_one(
            "INSERT INTO weir.backfills (target_table, window_from, window_to, started_at) VALUES ($1, $2, $3, now()) \
             ON CONFLICT (target_table, window_from, window_to) DO UPDATE SET \
               started_at = CASE WHEN weir.backfills.finished_at IS NULL THEN weir.backfills.started_at ELSE now() END, \
               finished_at = NULL \
             RETURNING (extract(epoch FROM started_at) * 1000000)::bigint, started_at < now()",
            &[&table.to_string(), &from, &to],
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

/// The rows a target partition holds now, decoded from PostgreSQL's text output as the
/// replication source decodes it (UTC, ISO dates, shortest exact floats).
pub async fn read_partition(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
) -> Result<Vec<Vec<Value>>, TargetError> {
    let pred = predicate(table.partition_type, table.grain, partition).ok_or_else(|| {
        TargetError::BadPartition {
            table: table.name.clone(),
            partition: partition.name().to_owned(),
            grain: table.grain,
        }
    })?;
    let column = quote_ident(&table.partition_column);
    // The simple protocol (for PostgreSQL's text output) takes no bind parameters: the
    // bounds are quoted by `quote_literal`, correct whatever standard_conforming_strings.
    let literal = |v: &Value| {
        bound_literal(v).ok_or_else(|| TargetError::BadPartition {
            table: table.name.clone(),
            partition: partition.name().to_owned(),
            grain: table.grain,
        })
    };
    let condition = match &pred {
        PartitionPredicate::IsNull => format!("{column} IS NULL"),
        PartitionPredicate::Equals(v) => format!("{column} = {}", literal(v)?),
        PartitionPredicate::Range { lower, upper } => format!(
            "{column} >= {} AND {column} < {}",
            literal(lower)?,
            literal(upper)?
        ),
    };
    let cols = table
        .columns
        .iter()
        .map(|(c, _)| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 1; SET bytea_output = 'hex'; \
         SELECT {cols} FROM {} WHERE {condition}",
        table.name.quoted()
    );
    let messages = client.simple_query(&sql).await.map_err(query_err(format!(
        "read partition {partition} of {}",
        table.name
    )))?;
    let mut out = Vec::new();
    for m in messages {
        let tokio_postgres::SimpleQueryMessage::Row(row) = m else {
            continue;
        };
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, (name, ty)) in table.columns.iter().enumerate() {
            let value = match row.get(i) {
                None => Value::Null,
                Some(text) => {
                    crate::source::pgtypes::decode_text(name, ty.oid(), -1, text.as_bytes())
                        .map_err(|e| TargetError::Decode {
                            table: table.name.clone(),
                            message: e.to_string(),
                        })?
                }
            };
            values.push(value);
        }
        out.push(values);
    }
    Ok(out)
}

/// A lineage row, for `status`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LineageRow {
    pub target_table: String,
    pub partition: String,
    pub stage_generation: i64,
    pub source_position: i64,
    pub transform: String,
    pub row_count: i64,
    pub checksum: String,
    pub plugin_sha256: Option<String>,
    pub config_hash: Option<String>,
    pub written_at: String,
    /// `replace` or `merge` (a merged partition has no checksum).
    pub write_mode: String,
}

/// The most recent partition writes.
pub async fn recent_writes(client: &Client, limit: i64) -> Result<Vec<LineageRow>, TargetError> {
    let rows = client
        .query(
            "SELECT target_table, partition, stage_generation, source_position, transform, row_count, checksum, \
             plugin_sha256, config_hash, to_char(written_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), write_mode \
             FROM weir.partitions ORDER BY written_at DESC, target_table, partition LIMIT $1",
            &[&limit],
        )
        .await
        .map_err(|source| match source.code() {
            Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => TargetError::MissingWeirSchema,
            _ => TargetError::Query { what: "read lineage".into(), source: PgError(source) },
        })?;
    Ok(rows
        .iter()
        .map(|r| LineageRow {
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
            write_mode: r.get(10),
        })
        .collect())
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if self.is_null() {
            return Ok(IsNull::Yes);
        }
        let mut buf = Vec::new();
        self.encode_binary(ty, &mut buf)?;
        out.extend_from_slice(&buf);
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`, which names the value and the type on mismatch.
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_ignores_row_order_but_not_duplicates() {
        let a = vec![Value::Int(1), Value::Text("x".into())];
        let b = vec![Value::Int(2), Value::Null];
        assert_eq!(
            checksum(&[a.clone(), b.clone()]),
            checksum(&[b.clone(), a.clone()])
        );
        assert_ne!(checksum(&[a.clone(), a.clone()]), checksum(&[]));
        assert_ne!(
            checksum(&[a.clone(), b.clone()]),
            checksum(&[a, b.clone(), b])
        );
    }

    #[test]
    fn child_names_do_not_collide_and_fit() {
        let t = TableName::parse("a.orders").expect("name");
        let names: Vec<String> = [
            Partition::Key("EU".into()),
            Partition::Key("eu".into()),
            Partition::Null,
            Partition::Key("__null__".into()),
            Partition::Key("a-b".into()),
            Partition::Key("a_b".into()),
            Partition::Key("x".repeat(200)),
            Partition::Key(format!("{}y", "x".repeat(199))),
        ]
        .iter()
        .map(|p| child_table_name(&t, p).name)
        .collect();
        let distinct: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert!(names.iter().all(|n| n.len() <= 63), "{names:?}");
        assert!(names[0].starts_with("orders_p_eu_"), "{}", names[0]);
        // Two long table names that share the part kept in the child name stay distinct.
        let long_a = TableName::parse(&format!("a.{}a", "t".repeat(62))).expect("name");
        let long_b = TableName::parse(&format!("a.{}b", "t".repeat(62))).expect("name");
        let p = Partition::Key("2026-03".into());
        assert_ne!(child_table_name(&long_a, &p), child_table_name(&long_b, &p));
        assert!(default_child_name(&long_a).name.len() <= 63);
        assert_ne!(default_child_name(&long_a), default_child_name(&long_b));
        assert_eq!(default_child_name(&t).name, "orders_p_default");
    }

    #[test]
    fn literals_are_exact_whatever_standard_conforming_strings() {
        assert_eq!(
            quote_literal("O'Brien\\").as_deref(),
            Some("E'O''Brien\\\\'")
        );
        assert_eq!(quote_literal("a\0b"), None);
        assert_eq!(
            bound_literal(&Value::Text("x'); DROP TABLE t; --".into())).as_deref(),
            Some("E'x''); DROP TABLE t; --'")
        );
        assert_eq!(bound_literal(&Value::Int(-7)).as_deref(), Some("-7"));
        assert_eq!(
            bound_literal(&Value::Timestamp(i64::MAX)).as_deref(),
            Some("E'infinity'")
        );
    }

    #[test]
    fn lock_keys_differ_by_table_and_partition() {
        let t = TableName::parse("a.b").expect("name");
        let u = TableName::parse("a.c").expect("name");
        let p = Partition::Key("2026-03-01".into());
        assert_eq!(lock_key(&t, &p), lock_key(&t, &p.clone()));
        assert_ne!(lock_key(&t, &p), lock_key(&u, &p));
        assert_ne!(lock_key(&t, &p), lock_key(&t, &Partition::Null));
    }
}
