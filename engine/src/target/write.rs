//! Partition writes: the atomic replace and the merge (the partition's advisory lock,
//! DELETE, binary COPY, rejections and lineage in one transaction), and dead letters.

use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use futures_util::{SinkExt, pin_mut};
use postgres_types::ToSql;
use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Transaction};

use super::schema::{ensure_child, native_child};
use super::{LockWait, TargetError, TargetTable, lineage, query_err};
use crate::config::{TableName, TargetPartitioning, WriteMode, quote_ident};
use crate::feed::BadRecord;
use crate::partition::{Partition, PartitionPredicate};
use crate::pgerror::PgError;
use crate::value::Value;

/// COPY data sent to the server at a time: bounds the writer's buffer.
const COPY_CHUNK_BYTES: usize = 1 << 20;
/// The signature that starts PostgreSQL's binary COPY format.
const COPY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

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
    let pred = table.predicate(partition)?;
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
    lineage::record(&tx, table, write, &summary, WriteMode::Replace).await?;
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
    lineage::record(&tx, table, write, &summary, WriteMode::Merge).await?;
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
    fn lock_keys_differ_by_table_and_partition() {
        let t = TableName::parse("a.b").expect("name");
        let u = TableName::parse("a.c").expect("name");
        let p = Partition::Key("2026-03-01".into());
        assert_eq!(lock_key(&t, &p), lock_key(&t, &p.clone()));
        assert_ne!(lock_key(&t, &p), lock_key(&u, &p));
        assert_ne!(lock_key(&t, &p), lock_key(&t, &Partition::Null));
    }
}
