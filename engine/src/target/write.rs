//! Partition writes: the atomic replace and the merge (the partition's advisory lock,
//! DELETE, binary COPY, rejections and lineage in one transaction; fed in chunks by
//! [`super::writer`]), lock waits explained, and dead letters.

use sha2::{Digest, Sha256};
use tokio_postgres::{Client, Transaction};

use super::schema::{ensure_child, native_child};
use super::writer::{Opened, open_merge, open_replace};
use super::{LockWait, TargetError, TargetTable, query_err};
use crate::config::{TableName, TargetPartitioning};
use crate::feed::BadRecord;
use crate::partition::{Partition, PartitionPredicate};
use crate::value::Value;

/// What a partition write records besides its rows.
#[derive(Debug, Clone, Copy)]
pub struct PartitionMeta<'a> {
    /// The feed's identity (`Config::source_id`), recorded with rejections.
    pub source_id: &'a str,
    /// The identity of the stage the rows were read from (`Stage::stage_id`), recorded
    /// in lineage: generations of two stages are not compared, and a merge is only made
    /// on top of what this stage wrote.
    pub stage_id: &'a str,
    pub source_table: &'a str,
    pub partition: &'a Partition,
    /// The stage generation the rows were read at.
    pub generation: u64,
    /// The stage's source position when the rows were read.
    pub source_position: u64,
    /// Identifies the transform (`identity`, or a plugin's hash).
    pub transform: &'a str,
    /// The plugin's sha256 and config hash (both `None` for the identity transform).
    pub plugin_sha256: Option<&'a str>,
    pub config_hash: Option<&'a str>,
    /// A backfill reads a stage that a live engine may be writing past: it does not
    /// replace a partition that lineage says was written from a newer generation.
    pub skip_if_newer: bool,
    /// The generation this stage last wrote the partition at, to any target
    /// (`Stage::last_written`): a merge needs lineage at it or later, since the changed
    /// keys that write covered are no longer recorded.
    pub merge_floor: Option<u64>,
}

/// One partition write with its rows in memory (tools and benchmarks; the engine
/// streams through [`super::writer::PartitionWriter`]).
#[derive(Debug, Clone)]
pub struct PartitionWrite<'a> {
    pub meta: PartitionMeta<'a>,
    /// Output rows in target column order, in the order to COPY them.
    pub rows: &'a [Vec<Value>],
    /// Input rows the plugin rejected: they replace the partition's earlier rejections.
    pub rejections: &'a [RejectedRow],
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
    let mut sum = Checksum::default();
    sum.add(rows);
    sum.finish()
}

/// [`checksum`] taken chunk by chunk: the same text whatever the chunks.
#[derive(Debug, Clone, Default)]
pub struct Checksum {
    sum: u128,
    encoded: Vec<u8>,
}

impl Checksum {
    pub fn add(&mut self, rows: &[Vec<Value>]) {
        for row in rows {
            self.add_row(row);
        }
    }

    pub fn add_row(&mut self, row: &[Value]) {
        // postcard of a Value is a canonical, self-delimiting encoding.
        let mut encoded = std::mem::take(&mut self.encoded);
        encoded.clear();
        for value in row {
            encoded = postcard::to_extend(value, encoded).unwrap_or_default();
        }
        let digest = Sha256::digest(&encoded);
        self.encoded = encoded;
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        self.sum = self.sum.wrapping_add(u128::from_be_bytes(first));
    }

    pub fn finish(&self) -> String {
        format!("{:032x}", self.sum)
    }
}

/// The advisory-lock key of a target partition: two writers of one partition, in any
/// process, take the same key.
pub(super) fn lock_key(table: &TableName, partition: &Partition) -> i64 {
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

/// Creates a native partition's child if missing (in a transaction of its own), then
/// begins the partition's write transaction. Its lock comes next
/// ([`lock_statements`]), sent with the write's first statements.
pub async fn begin_partition_write<'c>(
    client: &'c mut Client,
    table: &TargetTable,
    partition: &Partition,
) -> Result<Begun<'c>, TargetError> {
    let pred = table.predicate(partition)?;
    if table.partitioning == TargetPartitioning::Native {
        let child = native_child(table, partition, &pred)?;
        ensure_child(client, table, partition, &child).await?;
    }
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    Ok(Begun { tx, pred })
}

/// A partition's write transaction, begun ([`begin_partition_write`]) and not opened
/// yet ([`open_replace`], [`open_merge`]); dropped, it rolls back.
pub struct Begun<'c> {
    pub(super) tx: Transaction<'c>,
    pub(super) pred: PartitionPredicate,
}

impl std::fmt::Debug for Begun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Begun")
            .field("pred", &self.pred)
            .finish_non_exhaustive()
    }
}

/// What takes a partition's lock in its write transaction: its advisory lock, which
/// serializes Weir's own writers, waited for at most [`advisory_wait_ms`] (another
/// writer's long partition may take a while; one that hangs, a paused process or a
/// lost network holding its transaction open, must not stop this write for ever), then
/// the `lock_timeout` that bounds the waits for table locks after it. All numbers,
/// written in.
pub(super) fn lock_statements(table: &TargetTable, partition: &Partition) -> String {
    advisory_lock_statements(table, &[lock_key(&table.name, partition)])
}

/// [`lock_statements`] for several partitions' keys (sorted: no two writers wait on
/// each other).
pub(super) fn advisory_lock_statements(table: &TargetTable, keys: &[i64]) -> String {
    let mut out = format!("SET LOCAL lock_timeout = '{}ms'; ", advisory_wait_ms(table));
    for key in keys {
        out.push_str(&format!("SELECT pg_advisory_xact_lock({key}); "));
    }
    out.push_str(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        table.lock_timeout_ms
    ));
    out
}

/// How long a write waits for another Weir writer's hold of its partition: twelve
/// times `lock_timeout_ms` (a minute by default).
pub(super) fn advisory_wait_ms(table: &TargetTable) -> u64 {
    table.lock_timeout_ms.saturating_mul(12)
}

/// A write that ran out of `lock_timeout` becomes [`TargetError::LockTimeout`], named
/// with the sessions that hold a conflicting lock on the table (or its children, or
/// Weir's lineage tables), logged (pids and partition, never a row value). The
/// pipeline retries it with its write backoff.
pub async fn explain_lock_timeout<T>(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
    result: Result<T, TargetError>,
) -> Result<T, TargetError> {
    match result {
        Err(error) => Err(explain_lock_error(client, table, partition, error).await),
        ok => ok,
    }
}

/// See [`explain_lock_timeout`]: any other error is returned as it is.
pub async fn explain_lock_error(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
    error: TargetError,
) -> TargetError {
    let TargetError::Query { what, source } = error else {
        return error;
    };
    if source.code() != Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) {
        return TargetError::Query { what, source };
    }
    let blockers = match lock_holders(client, &table.name, lock_key(&table.name, partition)).await {
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
    TargetError::LockTimeout(Box::new(LockWait {
        table: table.name.clone(),
        partition: partition.name().into_owned(),
        what,
        timeout_ms: table.lock_timeout_ms,
        blockers,
    }))
}

/// The sessions a partition write may wait on: those holding a lock stronger than ROW
/// EXCLUSIVE on the table, one of its children, or Weir's lineage tables; those queued
/// for one (an `ALTER TABLE` waiting behind a long read makes later writers wait
/// behind it); and those holding rows of it for update (`SELECT … FOR UPDATE`, whose
/// row locks a DELETE waits on).
/// And the session holding the partition's advisory lock (`key`: another Weir writer
/// of the partition, perhaps hung with its transaction open).
async fn lock_holders(
    client: &Client,
    table: &TableName,
    key: i64,
) -> Result<Vec<i32>, TargetError> {
    let rows = client
        .query(
            "SELECT DISTINCT l.pid FROM pg_locks l \
             WHERE l.pid <> pg_backend_pid() AND l.locktype = 'advisory' AND l.granted \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND l.classid::text::bigint = ($2::bigint >> 32) & 4294967295 \
               AND l.objid::text::bigint = $2::bigint & 4294967295 AND l.objsubid = 1 \
             UNION \
             SELECT DISTINCT l.pid FROM pg_locks l \
             WHERE l.pid <> pg_backend_pid() AND l.locktype = 'relation' \
               AND (l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock') \
                    OR (l.granted AND l.mode = 'RowShareLock')) \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND (l.relation = $1::text::regclass::oid \
                    OR l.relation IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::text::regclass) \
                    OR l.relation = to_regclass('weir.partitions')::oid \
                    OR l.relation = to_regclass('weir.dead_letter')::oid) \
             ORDER BY 1",
            &[&table.quoted(), &key],
        )
        .await
        .map_err(query_err("list the sessions holding a lock"))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Replaces one partition of `table` in one transaction, its rows in memory (see
/// [`open_replace`], which the engine feeds in chunks).
pub async fn replace_partition(
    client: &mut Client,
    table: &TargetTable,
    write: &PartitionWrite<'_>,
) -> Result<WriteSummary, TargetError> {
    let result = async {
        let begun = begin_partition_write(client, table, write.meta.partition).await?;
        match open_replace(begun, table, write.meta).await? {
            Opened::Superseded(newer) => Ok(WriteSummary {
                rows: 0,
                copied: 0,
                checksum: String::new(),
                rejected: 0,
                superseded_by: Some(newer),
            }),
            Opened::Refused => unreachable!("a replace is never refused"),
            Opened::Writer(mut writer) => {
                writer.copy(write.rows).await?;
                writer.reject(write.rejections).await?;
                writer.commit(checksum(write.rows)).await
            }
        }
    }
    .await;
    explain_lock_timeout(client, table, write.meta.partition, result).await
}

/// The keys a merge rewrites: each changed key's values, in the order of `columns`
/// (indexes into the target's columns), and the same keys as rejection keys (`[42]`).
#[derive(Debug, Clone, Default)]
pub struct MergeKeys {
    pub columns: Vec<usize>,
    pub keys: Vec<Vec<Value>>,
    pub rejection_keys: Vec<String>,
}

/// Merges one partition in one transaction, its rows in memory: under the partition's
/// lock, deletes the target rows of the changed keys in the partition, COPYs their new
/// output, replaces their rejections and updates lineage (row count by the difference;
/// no checksum).
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
    let result = async {
        let begun = begin_partition_write(client, table, write.meta.partition).await?;
        match open_merge(begun, table, write.meta, &merge.columns).await? {
            Opened::Superseded(_) | Opened::Refused => Ok(None),
            Opened::Writer(mut writer) => {
                writer
                    .add_keys(merge.keys.clone(), merge.rejection_keys.clone())
                    .await?;
                writer.delete_keys().await?;
                writer.copy(write.rows).await?;
                writer.reject(write.rejections).await?;
                writer.commit(String::new()).await.map(Some)
            }
        }
    }
    .await;
    explain_lock_timeout(client, table, write.meta.partition, result).await
}

/// Writes bad records to `weir.dead_letter`; a record already there (same stage, source
/// and position: written before a crash, and read again) is not written twice.
pub async fn write_dead_letters(
    client: &mut Client,
    stage_id: &str,
    source: &str,
    records: &[BadRecord],
) -> Result<(), TargetError> {
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    let statement = tx
        .prepare(
            "INSERT INTO weir.dead_letter (kind, source, source_position, line, source_table, reason, raw, stage_id) \
             VALUES ('bad-record', $1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (stage_id, source, source_position) WHERE kind = 'bad-record' DO NOTHING",
        )
        .await
        .map_err(query_err("prepare the dead-letter insert"))?;
    for r in records {
        let position = i64::try_from(r.position).unwrap_or(i64::MAX);
        let line = r.line.and_then(|l| i64::try_from(l).ok());
        tx.execute(
            &statement,
            &[
                &source, &position, &line, &r.table, &r.reason, &r.raw, &stage_id,
            ],
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
