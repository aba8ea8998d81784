//! The target's schema: Weir's own `weir` schema (lineage, dead letters, backfill
//! runs), and the target tables, checked against the config (created by `init`), with
//! the child tables of natively partitioned ones.

use postgres_types::Type;
use sha2::{Digest, Sha256};
use tokio_postgres::{Client, GenericClient};

use super::{TargetError, TargetTable, query_err};
use crate::config::{
    Column, TableConfig, TableName, TargetPartitioning, quote_ident, quote_literal,
};
use crate::partition::{Grain, Partition, PartitionPredicate};
use crate::pgerror::PgError;
use crate::value::Value;

/// DDL of the `weir` schema. Idempotent.
const WEIR_SCHEMA_SQL: &str = r#"
-- One statement list is one transaction: the lock (held to its end) makes two
-- processes that start at once take turns, where their DDL would otherwise deadlock.
-- Two int4 keys: not the key space of the partitions' bigint locks.
SELECT pg_advisory_xact_lock(2003133810, 1);
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
ALTER TABLE weir.partitions ADD COLUMN IF NOT EXISTS stage_id text;
COMMENT ON COLUMN weir.partitions.stage_id IS 'the stage the partition was written from (NULL: by a build before stages had one); stage_generation counts in that stage.';
CREATE TABLE IF NOT EXISTS weir.backfills (
    target_table text        NOT NULL,
    window_from  text        NOT NULL,
    window_to    text        NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    PRIMARY KEY (target_table, window_from, window_to)
);
COMMENT ON TABLE weir.backfills IS 'Backfills by window: an unfinished one is resumed (partitions written since it started are done).';
-- A bad record is one per stage and position: two stages of one source name (two stdin
-- feeds, a new stage for a rotated file) keep theirs apart (before, the second's was
-- passed over as a duplicate of the first's).
ALTER TABLE weir.dead_letter ADD COLUMN IF NOT EXISTS stage_id text;
COMMENT ON COLUMN weir.dead_letter.stage_id IS 'the stage that read the record (NULL: by a build before stages had one).';
DROP INDEX IF EXISTS weir.dead_letter_bad_record;
CREATE UNIQUE INDEX IF NOT EXISTS dead_letter_bad_record_of_stage ON weir.dead_letter (stage_id, source, source_position) WHERE kind = 'bad-record';
COMMENT ON COLUMN weir.dead_letter.kind IS 'bad-record: the source could not read it (raw holds it); rejected: the table''s plugin rejected the row (input holds it; replaced with its partition).';
COMMENT ON TABLE weir.dead_letter IS 'Records weir could not process, with the reason and the raw record.';
-- Which source each stage reads: two stages of one source (a stage made anew) are one
-- pipeline; stages of two sources whose tables have the same name (two shards) are two.
CREATE TABLE IF NOT EXISTS weir.stages (
    stage_id      text        PRIMARY KEY,
    source        text        NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE weir.stages IS 'The source each stage that wrote here reads (postgres:<system identifier>/<database>, or jsonl:<file>).';
ALTER TABLE weir.partitions ADD COLUMN IF NOT EXISTS partition_by text;
COMMENT ON COLUMN weir.partitions.partition_by IS 'the target column the partition is of (NULL: by a build before it was recorded): a stage made anew under another partition column cannot find the rows of this one.';
-- Which pipeline (a source and a feed of it: a slot, a file) writes each target table.
CREATE TABLE IF NOT EXISTS weir.claims (
    target_table text        PRIMARY KEY,
    stage_id     text        NOT NULL,
    source       text        NOT NULL,
    feed         text        NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE weir.claims IS 'The pipeline (source, and feed: postgres:slot=<slot> or jsonl:<file>) that writes each target table; another is refused (weir init --take-over moves it).';
"#;

/// What the `weir` schema's comment says once this build's DDL ran: a digest of the DDL.
fn weir_schema_mark() -> String {
    let digest = Sha256::digest(WEIR_SCHEMA_SQL.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("weir schema {hex}: lineage, dead letters and backfills of Weir")
}

/// Creates the `weir` schema and its tables if missing, and brings them to this build's
/// shape. Where they are already (the schema's comment names this build's DDL and its
/// tables exist), nothing runs: the DDL takes `ACCESS EXCLUSIVE` locks on Weir's tables,
/// which a second process starting beside a live `weir run` would otherwise contend for
/// with its partition writes (each side waiting on a table the other had locked: a
/// deadlock PostgreSQL ends by failing one of them).
pub async fn ensure_weir_schema(client: &Client) -> Result<(), TargetError> {
    let mark = weir_schema_mark();
    let current: bool = client
        .query_one(
            "SELECT coalesce((SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = 'weir') = $1, false) \
             AND to_regclass('weir.partitions') IS NOT NULL \
             AND to_regclass('weir.dead_letter') IS NOT NULL \
             AND to_regclass('weir.backfills') IS NOT NULL \
             AND to_regclass('weir.claims') IS NOT NULL",
            &[&mark],
        )
        .await
        .map_err(query_err("read the weir schema's version"))?
        .get(0);
    if current {
        return Ok(());
    }
    // The mark is hex and plain words: a literal as it is.
    client
        .batch_execute(&format!(
            "{WEIR_SCHEMA_SQL}COMMENT ON SCHEMA weir IS '{mark}';\n"
        ))
        .await
        .map_err(query_err("create the weir schema"))
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
        .query_typed_one(
            "SELECT to_regclass($1)::text",
            &[(
                &name.quoted() as &(dyn postgres_types::ToSql + Sync),
                postgres_types::Type::TEXT,
            )],
        )
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
        // Lineage and rejections of a table of this name that was dropped describe
        // rows the new table does not hold: a merge on top of them would write only
        // the changed keys. Without them, `weir run` writes the staged partitions
        // again (`backfill::rewrite_unrecorded`).
        let target_table = name.to_string();
        let forgotten = client
            .execute(
                "DELETE FROM weir.partitions WHERE target_table = $1",
                &[&target_table],
            )
            .await
            .map_err(query_err(format!(
                "remove the lineage of the dropped {name}"
            )))?;
        client
            .execute(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1",
                &[&target_table],
            )
            .await
            .map_err(query_err(format!(
                "remove the rejections of the dropped {name}"
            )))?;
        if forgotten > 0 {
            tracing::warn!(table = %name, partitions = forgotten, "the target table was made anew: the lineage of the partitions it held before is removed, and `weir run` writes the partitions the stage holds again");
        }
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
    refuse_unsafe_shape(client, table, create).await?;
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
        // Rows staged before the source had the column carry no value for it, and
        // PostgreSQL fills an added column's DEFAULT without writing the rows to the
        // WAL: a rewrite from the stage keeps them NULL. Only reading them again does.
        let columns = addable
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if table.plugin.is_some() {
            tracing::warn!(table = %name, columns = %columns, "added the plugin's new nullable output columns to the target table; the partitions written before hold NULL in them: `weir backfill --stale` rewrites those an older plugin or config wrote");
        } else {
            // The partitions written while the target lacked the columns left out the
            // values the stage holds for them (a live run staged them as the source
            // gained them): each is written again by the next run's start, which
            // rewrites what lineage lists at an older generation than the stage's.
            client
                .execute(
                    "UPDATE weir.partitions SET stage_generation = 0 WHERE target_table = $1",
                    &[&name.to_string()],
                )
                .await
                .map_err(query_err(format!(
                    "mark the partitions of {name} to write again"
                )))?;
            tracing::warn!(table = %name, columns = %columns, "added nullable columns to the target table; the next `weir run` writes every partition again with the values staged for them; rows staged before the source had them hold NULL there (a PostgreSQL DEFAULT fills existing rows without WAL): for a PostgreSQL source, run `weir resync --table SOURCE_TABLE` to read their values, then check with `weir verify --against-source`");
        }
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
            differences.push(format!(
                "column `{col}` ({ty}) is not among the columns Weir writes (the config's, or the plugin's output)"
            ));
        }
    }
    if !differences.is_empty() {
        return Err(TargetError::SchemaMismatch {
            table: name.clone(),
            differences,
        });
    }
    let columns: Vec<(String, Type)> = expected.into_iter().map(|(c, _, ty)| (c, ty)).collect();
    let numeric_scales = columns
        .iter()
        .map(|(c, _)| match table.column(c).map(|c| c.ty) {
            Some(crate::value::ColumnType::Numeric(Some(typmod))) => Some(typmod.scale),
            _ => None,
        })
        .collect();
    let columns_signature = client
        .query_typed_one(
            COLUMNS_SIGNATURE,
            &[(
                &name.quoted() as &(dyn postgres_types::ToSql + Sync),
                postgres_types::Type::TEXT,
            )],
        )
        .await
        .map_err(query_err(format!("read the columns of {name}")))?
        .get(0);
    Ok(TargetTable {
        name: name.clone(),
        columns,
        partition_column: table.partition_by.clone(),
        partition_type: table.partition_column().ty,
        grain: table.grain,
        partitioning: table.target_partitioning,
        lock_timeout_ms: crate::config::limits::LOCK_TIMEOUT_MS_DEFAULT,
        columns_signature,
        numeric_scales,
    })
}

/// Fails a write (its transaction, `tx`, holding the partition's lock) if the target
/// table's columns are no longer those checked at start ([`COLUMNS_SIGNATURE`]).
pub(super) async fn check_columns(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TargetTable,
) -> Result<(), TargetError> {
    let now: String = tx
        .query_typed_one(
            COLUMNS_SIGNATURE,
            &[(
                &table.name.quoted() as &(dyn postgres_types::ToSql + Sync),
                postgres_types::Type::TEXT,
            )],
        )
        .await
        .map_err(query_err(format!("read the columns of {}", table.name)))?
        .get(0);
    if now == table.columns_signature {
        Ok(())
    } else {
        Err(TargetError::ColumnsChanged {
            table: table.name.clone(),
        })
    }
}

/// The target table's columns as the catalog has them (name, type, type modifier, in
/// order), read when the table is checked and again under each write's lock: a column a
/// DBA retyped, added or dropped since would otherwise take the binary COPY's values as
/// its own type says (an `int8`'s bytes read as a `float8`, a decimal rounded to a
/// narrower scale), silently. `$1`: the quoted table name.
pub(super) const COLUMNS_SIGNATURE: &str = "SELECT coalesce(string_agg(attname || ' ' || atttypid || ' ' || atttypmod, ',' ORDER BY attnum), '') \
     FROM pg_attribute WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped";

fn column_ddl(columns: &[Column]) -> String {
    columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.declared))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Removes the lineage of a target table that holds no row at all (truncated or made
/// anew by hand) while its lineage records rows: a merge trusting that lineage would
/// write only the keys changed since, for good. Returns the lineage rows removed.
pub async fn forget_lineage_of_empty(
    client: &Client,
    table: &TableName,
) -> Result<u64, TargetError> {
    client
        .execute(
            &format!(
                "DELETE FROM weir.partitions WHERE target_table = $1 \
                 AND EXISTS (SELECT 1 FROM weir.partitions WHERE target_table = $1 AND row_count > 0) \
                 AND NOT EXISTS (SELECT 1 FROM {})",
                table.quoted()
            ),
            &[&table.to_string()],
        )
        .await
        .map_err(query_err(format!("read whether {table} holds rows")))
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

/// Refuses a target table no partition write can keep right: a view (or anything but
/// a table); one a foreign key references (each replace deletes and inserts its
/// rows: the referencing rows would be deleted with them, or the write refused for
/// good); a key or partition column under a nondeterministic collation (a partition's
/// DELETE, or a merge's, would match values of another partition or key: `eu` and
/// `EU`). Warns of a unique index without the partition column: a row moving to
/// another partition is inserted there before its old partition is written, which
/// such an index refuses.
/// `init` (`at_init`) also refuses a table Weir's role lacks a privilege on that writes
/// need (other commands may run as a role that only reads).
async fn refuse_unsafe_shape(
    client: &Client,
    table: &TableConfig,
    at_init: bool,
) -> Result<(), TargetError> {
    let name = &table.target;
    let unsafe_target = |problem: String| TargetError::UnsafeTarget {
        table: name.clone(),
        problem,
    };
    let row = client
        .query_one(
            "SELECT c.relkind::text, \
                    (SELECT string_agg(format('%s of %s', k.conname, k.conrelid::regclass), ', ') \
                       FROM pg_constraint k WHERE k.contype = 'f' AND k.confrelid = c.oid), \
                    (SELECT string_agg(a.attname::text, ', ') FROM pg_attribute a \
                       JOIN pg_collation l ON l.oid = a.attcollation \
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                        AND NOT l.collisdeterministic AND a.attname = ANY($2::text[])), \
                    (SELECT string_agg(i.indexrelid::regclass::text, ', ') FROM pg_index i \
                      WHERE i.indrelid = c.oid AND i.indisunique \
                        AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid \
                                          AND a.attname = $3 AND a.attnum = ANY(i.indkey))), \
                    concat_ws(', ', CASE WHEN NOT has_table_privilege(c.oid, 'SELECT') THEN 'SELECT' END, \
                              CASE WHEN NOT has_table_privilege(c.oid, 'INSERT') THEN 'INSERT' END, \
                              CASE WHEN NOT has_table_privilege(c.oid, 'DELETE') THEN 'DELETE' END), \
                    (SELECT string_agg(a.attname::text, ', ') FROM pg_partitioned_table pt \
                       JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = ANY(pt.partattrs) \
                      WHERE pt.partrelid = c.oid) \
             FROM pg_class c WHERE c.oid = $1::text::regclass",
            &[
                &name.quoted(),
                &table
                    .key
                    .iter()
                    .chain(std::iter::once(&table.partition_by))
                    .collect::<Vec<_>>(),
                &table.partition_by,
            ],
        )
        .await
        .map_err(query_err(format!("look up {name}")))?;
    let (kind, references, collated, unique): (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    ) = (row.get(0), row.get(1), row.get(2), row.get(3));
    let (missing, partitioned_by): (String, Option<String>) = (row.get(4), row.get(5));
    if kind != "r" && kind != "p" {
        return Err(unsafe_target(format!(
            "it is not a table (pg_class.relkind `{kind}`: a view, a materialized view or another kind of relation), which Weir cannot replace partitions of; point `target` at a table"
        )));
    }
    if at_init && !missing.is_empty() {
        return Err(unsafe_target(format!(
            "Weir's role lacks the {missing} privilege on it, which every partition write needs (SELECT, INSERT and DELETE): `GRANT SELECT, INSERT, DELETE ON {} TO <role>`",
            name.quoted()
        )));
    }
    if let Some(by) = partitioned_by.filter(|by| *by != table.partition_by) {
        return Err(unsafe_target(format!(
            "it is partitioned by {by}, not by the partition column `{}`: a partition's rows would span its children; partition it by `{}`, or write a plain table",
            table.partition_by, table.partition_by
        )));
    }
    if let Some(references) = references {
        return Err(unsafe_target(format!(
            "foreign key {references} references it: every partition write deletes the partition's rows and inserts them again, which would delete the referencing rows (ON DELETE CASCADE) or be refused for good; drop the constraint, or write another table"
        )));
    }
    if let Some(collated) = collated {
        return Err(unsafe_target(format!(
            "column {collated} (its key or partition column) has a nondeterministic collation: a write's DELETE of one partition or key would match values of another (`eu` and `EU`); give the column a deterministic collation (`ALTER TABLE … ALTER COLUMN … TYPE text COLLATE \"C\"`)"
        )));
    }
    if let Some(unique) = unique {
        tracing::warn!(table = %name, indexes = %unique, "a unique index of the target table does not include the partition column: a row moving to another partition is inserted there before its old partition is written, which the index refuses (the write fails and is retried); add the partition column to it");
    }
    Ok(())
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

/// Where a native partition's rows live.
pub(super) enum NativeChild {
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
    let digest = hasher.finalize();
    let mut name = format!("{}_p_{readable}", table.name);
    // Whole, the readable part tells most partitions apart and 32 bits of the hash the
    // rest (`EU`, `eu`). Cut short (a long table name), every child of the table shares
    // the part kept and only the hash tells them apart: 64 bits of it, since 32 collide
    // among tens of thousands of partitions (a child created under another partition's
    // name left this one none). A child an older build named otherwise still holds its
    // bound: creating this one finds it (`ensure_child`).
    let digest_bytes = if name.len() + 9 <= crate::config::limits::IDENTIFIER_BYTES_MAX {
        4
    } else {
        8
    };
    name.truncate(crate::config::limits::IDENTIFIER_BYTES_MAX - 1 - 2 * digest_bytes);
    while !name.is_char_boundary(name.len()) {
        name.pop();
    }
    TableName {
        schema: table.schema.clone(),
        name: format!("{name}_{}", hex::encode(&digest[..digest_bytes])),
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
pub(super) fn bound_literal(v: &Value) -> Option<String> {
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

pub(super) fn native_child(
    table: &TargetTable,
    partition: &Partition,
    pred: &PartitionPredicate,
) -> Result<NativeChild, TargetError> {
    let name = child_table_name(&table.name, partition);
    let literal = |v: &Value| bound_literal(v).ok_or_else(|| table.bad_partition(partition));
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
pub(super) async fn ensure_child(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
    child: &NativeChild,
) -> Result<(), TargetError> {
    let NativeChild::Own { name, bound } = child else {
        return Ok(());
    };
    let exists: Option<String> = client
        .query_typed_one(
            "SELECT to_regclass($1)::text",
            &[(
                &name.quoted() as &(dyn postgres_types::ToSql + Sync),
                postgres_types::Type::TEXT,
            )],
        )
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
        // Rows of this partition's range in the DEFAULT child (put in through the parent
        // by hand, or left by a child detached): PostgreSQL will not attach a child
        // whose rows another child holds. Named, for the user to move or delete.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION) => {
            Err(TargetError::Query {
                what: format!(
                    "create partition {name} of {}: the DEFAULT child {} holds rows of partition {partition} (put in through the parent by hand, or left by a child detached); delete them (`DELETE FROM {} WHERE …` the partition's range of `{}`) and the next write goes on",
                    table.name,
                    default_child_name(&table.name),
                    default_child_name(&table.name).quoted(),
                    table.partition_column
                ),
                source: PgError(e),
            })
        }
        // Creating a child takes ACCESS EXCLUSIVE on the table: any session that
        // holds any lock on it (an open reader) holds it off. Those are named.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
            let blockers: Vec<i32> = client
                .query(
                    "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'relation' AND granted \
                     AND pid <> pg_backend_pid() AND relation = $1::text::regclass ORDER BY 1",
                    &[&table.name.quoted()],
                )
                .await
                .map(|rows| rows.iter().map(|r| r.get(0)).collect())
                .unwrap_or_default();
            tracing::warn!(
                table = %table.name,
                partition = %partition,
                blocker_pids = ?blockers,
                lock_timeout_ms = table.lock_timeout_ms,
                "creating the partition's child waited longer than lock_timeout_ms for the table (it takes ACCESS EXCLUSIVE, which any open reader of the table holds off); it is retried"
            );
            Err(TargetError::LockTimeout(Box::new(super::LockWait {
                table: table.name.clone(),
                partition: partition.name().into_owned(),
                what: format!(
                    "creating its child {name} (ACCESS EXCLUSIVE on the table, which any open reader holds off)"
                ),
                timeout_ms: table.lock_timeout_ms,
                blockers,
            })))
        }
        Err(e) => Err(TargetError::Query {
            what: format!("create partition {name} of {}", table.name),
            source: PgError(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Cut short, a name ends in 64 bits of the hash (the values a QA run found
        // sharing 32 bits of it under a 66-byte table name get children of their own).
        let long = TableName::parse(
            "tg_col.fact_customer_order_lines_enriched_with_region_and_currency_v01",
        )
        .expect("name");
        let a = child_table_name(&long, &Partition::Key("12830".into())).name;
        let b = child_table_name(&long, &Partition::Key("75350".into())).name;
        assert_ne!(a, b);
        assert!(
            a.len() <= 63 && a.rsplit('_').next().is_some_and(|h| h.len() == 16),
            "{a}"
        );
        assert_eq!(
            child_table_name(&t, &Partition::Key("2026-03".into()))
                .name
                .len(),
            "orders_p_2026_03_".len() + 8,
            "a name that fits keeps the form older builds gave it"
        );
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
}
