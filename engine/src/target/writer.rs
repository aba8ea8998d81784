//! A partition's write transaction, fed in chunks: opened (lock, lineage check,
//! DELETE), then rows COPYed and rejections recorded as they arrive, then lineage and
//! commit. A job streams its output through it, so no write holds a whole partition;
//! dropping an unfinished writer aborts the COPY and rolls back.

use std::pin::Pin;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::SinkExt;
use postgres_types::ToSql;
use tokio_postgres::{Client, CopyInSink, Statement, Transaction};

use super::write::{PartitionMeta, RejectedRow, WriteSummary, begin_partition_write};
use super::{TargetError, TargetTable, lineage, query_err};
use crate::config::{WriteMode, quote_ident};
use crate::partition::PartitionPredicate;
use crate::pgerror::PgError;
use crate::value::Value;

/// COPY data sent to the server at a time: bounds the writer's buffer.
pub const COPY_CHUNK_BYTES: usize = crate::limits::COPY_BUFFER_BYTES;
/// The signature that starts PostgreSQL's binary COPY format.
const COPY_SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// A partition write in progress (see the module).
pub struct PartitionWriter<'c, 'a> {
    tx: Transaction<'c>,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
    mode: WriteMode,
    pred: PartitionPredicate,
    partition_name: String,
    /// The COPY in progress, and what it copies into.
    sink: Option<(CopyInto, Pin<Box<CopyInSink<Bytes>>>)>,
    /// Merge: the key columns (indexes into the target's), the first chunk of keys
    /// (held until a second one, or the delete), and whether the temporary table of
    /// keys holds them instead.
    key_columns: Vec<usize>,
    keys: Option<Vec<Vec<Value>>>,
    keys_table: bool,
    buf: BytesMut,
    value_bytes: Vec<u8>,
    insert_rejection: Option<Statement>,
    copied: u64,
    deleted: u64,
    rejected: u64,
    /// Merge: the partition's rows before this write, as lineage says.
    previous_rows: u64,
}

impl std::fmt::Debug for PartitionWriter<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionWriter")
            .field("table", &self.table.name)
            .field("partition", &self.partition_name)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// What a COPY copies into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyInto {
    /// The target table.
    Target,
    /// A merge's temporary table of changed keys.
    Keys,
}

/// What opening a partition write came to.
#[derive(Debug)]
pub enum Opened<'c, 'a> {
    Writer(Box<PartitionWriter<'c, 'a>>),
    /// `skip_if_newer`: lineage holds this newer generation; nothing was written.
    Superseded(u64),
    /// A merge on top of another transform's output (or of nothing): nothing changed,
    /// replace the partition instead.
    Refused,
}

impl<'c, 'a> PartitionWriter<'c, 'a> {
    fn new(
        tx: Transaction<'c>,
        table: &'a TargetTable,
        meta: PartitionMeta<'a>,
        mode: WriteMode,
        pred: PartitionPredicate,
    ) -> PartitionWriter<'c, 'a> {
        PartitionWriter {
            tx,
            table,
            partition_name: meta.partition.name().to_owned(),
            meta,
            mode,
            pred,
            sink: None,
            key_columns: Vec::new(),
            keys: None,
            keys_table: false,
            buf: BytesMut::new(),
            value_bytes: Vec::new(),
            insert_rejection: None,
            copied: 0,
            deleted: 0,
            rejected: 0,
            previous_rows: 0,
        }
    }

    /// The partition as a SQL condition on the partition column, its parameters first.
    fn condition(&self, params: &mut Vec<Box<dyn ToSql + Sync + Send>>) -> String {
        let column = quote_ident(&self.table.partition_column);
        match &self.pred {
            PartitionPredicate::IsNull => format!("{column} IS NULL"),
            PartitionPredicate::Equals(v) => {
                params.push(Box::new(v.clone()));
                format!("{column} = ${}", params.len())
            }
            PartitionPredicate::Range { lower, upper } => {
                params.push(Box::new(lower.clone()));
                params.push(Box::new(upper.clone()));
                format!(
                    "{column} >= ${} AND {column} < ${}",
                    params.len() - 1,
                    params.len()
                )
            }
        }
    }

    /// Runs a DELETE of the target with its parameters; the rows it deleted.
    async fn delete(
        &self,
        sql: &str,
        params: &[Box<dyn ToSql + Sync + Send>],
        what: &str,
    ) -> Result<u64, TargetError> {
        let refs: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect();
        self.tx.execute(sql, &refs).await.map_err(query_err(format!(
            "delete {what} of partition {} of {}",
            self.partition_name, self.table.name
        )))
    }

    /// Replace: deletes the partition's rows and its rejections.
    async fn delete_partition(&mut self) -> Result<(), TargetError> {
        let mut params = Vec::new();
        let condition = self.condition(&mut params);
        let sql = format!("DELETE FROM {} WHERE {condition}", self.table.name.quoted());
        self.deleted = self.delete(&sql, &params, "the rows").await?;
        crate::failpoint!("target-after-delete");
        // The partition's rejections are part of its output: replaced with it.
        self.tx
            .execute(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2",
                &[&self.table.name.to_string(), &self.partition_name],
            )
            .await
            .map_err(query_err("clear the partition's rejections"))?;
        Ok(())
    }

    /// Merge: takes a chunk of changed keys (values in the order of `columns`,
    /// indexes into the target's columns) and removes their rejections (`[42]`). Their
    /// target rows are deleted by [`Self::delete_keys`], once every key is in: one
    /// chunk by a `DELETE` with the keys as arrays, more through a temporary table of
    /// keys, COPYed in as they come, in one `DELETE … USING` (a hash join, however many
    /// keys and whatever the target's indexes).
    pub async fn add_keys(
        &mut self,
        columns: &[usize],
        keys: Vec<Vec<Value>>,
        rejection_keys: &[String],
    ) -> Result<(), TargetError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.end_copy().await?;
        self.tx
            .execute(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2 \
                 AND row_key = ANY($3::text[]::jsonb[])",
                &[&self.table.name.to_string(), &self.partition_name, &rejection_keys],
            )
            .await
            .map_err(query_err("clear the changed keys' rejections"))?;
        self.key_columns = columns.to_vec();
        match self.keys.take() {
            None if !self.keys_table => self.keys = Some(keys),
            held => {
                if !self.keys_table {
                    let defs = self
                        .key_types()
                        .iter()
                        .enumerate()
                        .map(|(i, (_, ty))| format!("k{i} {}", quote_ident(ty.name())))
                        .collect::<Vec<_>>()
                        .join(", ");
                    self.tx
                        .batch_execute(&format!(
                            "CREATE TEMPORARY TABLE weir_merge_keys ({defs}) ON COMMIT DROP"
                        ))
                        .await
                        .map_err(query_err("create the merge's table of keys"))?;
                    self.keys_table = true;
                }
                for chunk in held.into_iter().chain([keys]) {
                    self.copy_into(CopyInto::Keys, &chunk).await?;
                }
            }
        }
        Ok(())
    }

    /// The (name, type) of the merge's key columns.
    fn key_types(&self) -> Vec<(String, postgres_types::Type)> {
        self.key_columns
            .iter()
            .map(|&c| self.table.columns[c].clone())
            .collect()
    }

    /// Merge: deletes the target rows of every key added (see [`Self::add_keys`]),
    /// before any output row is copied.
    pub async fn delete_keys(&mut self) -> Result<(), TargetError> {
        self.end_copy().await?;
        let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let condition = self.condition(&mut params);
        let names: Vec<String> = self
            .key_types()
            .iter()
            .map(|(name, _)| quote_ident(name))
            .collect();
        let delete = if self.keys_table {
            self.tx
                .batch_execute("ANALYZE weir_merge_keys")
                .await
                .map_err(query_err("analyze the merge's table of keys"))?;
            let join = names
                .iter()
                .enumerate()
                .map(|(i, n)| format!("t.{n} = k.k{i}"))
                .collect::<Vec<_>>()
                .join(" AND ");
            format!(
                "DELETE FROM {} AS t USING weir_merge_keys AS k WHERE {condition} AND {join}",
                self.table.name.quoted()
            )
        } else if let Some(keys) = self.keys.take() {
            // DELETE … WHERE <partition> AND (k1, k2) IN (SELECT * FROM unnest($3::t1[], $4::t2[]))
            let mut arrays = Vec::with_capacity(names.len());
            for (i, (_, ty)) in self.key_types().iter().enumerate() {
                params.push(Box::new(
                    keys.iter()
                        .map(|k| k.get(i).cloned().unwrap_or(Value::Null))
                        .collect::<Vec<Value>>(),
                ));
                arrays.push(format!("${}::{}[]", params.len(), quote_ident(ty.name())));
            }
            format!(
                "DELETE FROM {} WHERE {condition} AND ({}) IN (SELECT * FROM unnest({}))",
                self.table.name.quoted(),
                names.join(", "),
                arrays.join(", ")
            )
        } else {
            return Ok(());
        };
        self.deleted += self.delete(&delete, &params, "the changed keys").await?;
        crate::failpoint!("target-after-delete");
        Ok(())
    }

    /// Copies output rows (in target column order) into the partition.
    pub async fn copy(&mut self, rows: &[Vec<Value>]) -> Result<(), TargetError> {
        self.copy_into(CopyInto::Target, rows).await?;
        self.copied += rows.len() as u64;
        Ok(())
    }

    /// Copies rows into the target table or the merge's table of keys: encoded into
    /// PostgreSQL's binary COPY format and sent in chunks of [`COPY_CHUNK_BYTES`]. A
    /// value that does not fit its column fails the write with the column named.
    async fn copy_into(&mut self, into: CopyInto, rows: &[Vec<Value>]) -> Result<(), TargetError> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.sink.as_ref().is_some_and(|(open, _)| *open != into) {
            self.end_copy().await?;
        }
        let columns = match into {
            CopyInto::Target => self.table.columns.clone(),
            CopyInto::Keys => self.key_types(),
        };
        let copy_err = || query_err(format!("COPY into {}", self.table.name));
        if self.sink.is_none() {
            let sql = match into {
                CopyInto::Target => format!(
                    "COPY {} ({}) FROM STDIN (FORMAT binary)",
                    self.table.name.quoted(),
                    columns
                        .iter()
                        .map(|(name, _)| quote_ident(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                CopyInto::Keys => "COPY weir_merge_keys FROM STDIN (FORMAT binary)".to_owned(),
            };
            let sink = self
                .tx
                .copy_in(&sql)
                .await
                .map_err(query_err(format!("start COPY into {}", self.table.name)))?;
            self.sink = Some((into, Box::pin(sink)));
            self.buf.reserve(COPY_CHUNK_BYTES + COPY_CHUNK_BYTES / 4);
            self.buf.extend_from_slice(COPY_SIGNATURE);
            self.buf.put_i32(0); // flags
            self.buf.put_i32(0); // header extension length
        }
        let fields = i16::try_from(columns.len()).unwrap_or(i16::MAX);
        for row in rows {
            self.buf.put_i16(fields);
            for ((name, ty), value) in columns.iter().zip(row) {
                if value.is_null() {
                    self.buf.put_i32(-1);
                    continue;
                }
                self.value_bytes.clear();
                value
                    .encode_binary(ty, &mut self.value_bytes)
                    .map_err(|source| TargetError::Encode {
                        table: self.table.name.clone(),
                        partition: self.partition_name.clone(),
                        column: name.clone(),
                        source: Box::new(source),
                    })?;
                self.buf
                    .put_i32(i32::try_from(self.value_bytes.len()).unwrap_or(i32::MAX));
                self.buf.extend_from_slice(&self.value_bytes);
            }
            if self.buf.len() >= COPY_CHUNK_BYTES
                && let Some((_, sink)) = self.sink.as_mut()
            {
                sink.as_mut()
                    .send(self.buf.split().freeze())
                    .await
                    .map_err(copy_err())?;
            }
        }
        Ok(())
    }

    /// Ends the COPY in progress, if any.
    async fn end_copy(&mut self) -> Result<(), TargetError> {
        let Some((into, mut sink)) = self.sink.take() else {
            return Ok(());
        };
        self.buf.put_i16(-1); // trailer
        let what = format!("COPY into {}", self.table.name);
        sink.as_mut()
            .send(self.buf.split().freeze())
            .await
            .map_err(query_err(what.clone()))?;
        sink.as_mut()
            .finish()
            .await
            .map_err(query_err(format!("finish {what}")))?;
        self.buf = BytesMut::new();
        if into == CopyInto::Target {
            crate::failpoint!("target-after-copy");
        }
        Ok(())
    }

    /// Records input rows the plugin rejected in `weir.dead_letter`.
    pub async fn reject(&mut self, rejections: &[RejectedRow]) -> Result<(), TargetError> {
        if rejections.is_empty() {
            return Ok(());
        }
        self.end_copy().await?;
        let insert = match &self.insert_rejection {
            Some(s) => s.clone(),
            None => {
                let s = self
                    .tx
                    .prepare(
                        "INSERT INTO weir.dead_letter (kind, source, source_position, source_table, target_table, partition, row_key, reason, input, plugin_sha256) \
                         VALUES ('rejected', $1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9)",
                    )
                    .await
                    .map_err(query_err("prepare the rejection insert"))?;
                self.insert_rejection = Some(s.clone());
                s
            }
        };
        let target_name = self.table.name.to_string();
        for r in rejections {
            self.tx
                .execute(
                    &insert,
                    &[
                        &self.meta.source_id,
                        &i64::try_from(r.source_position).unwrap_or(i64::MAX),
                        &self.meta.source_table,
                        &target_name,
                        &self.partition_name,
                        &r.key,
                        &r.reason,
                        &r.input,
                        &self.meta.plugin_sha256,
                    ],
                )
                .await
                .map_err(query_err("record rejected rows"))?;
        }
        self.rejected += rejections.len() as u64;
        Ok(())
    }

    /// Ends the COPY, records lineage and commits. `checksum`: of every row the
    /// partition holds after a replace (empty for a merge, which has none).
    pub async fn commit(mut self, checksum: String) -> Result<WriteSummary, TargetError> {
        self.end_copy().await?;
        let rows = match self.mode {
            WriteMode::Merge => self
                .previous_rows
                .saturating_sub(self.deleted)
                .saturating_add(self.copied),
            _ => self.copied,
        };
        let summary = WriteSummary {
            rows,
            copied: self.copied,
            checksum,
            rejected: self.rejected,
            superseded_by: None,
        };
        lineage::record(&self.tx, self.table, &self.meta, &summary, self.mode).await?;
        self.tx.commit().await.map_err(query_err(format!(
            "commit partition {} of {}",
            self.partition_name, self.table.name
        )))?;
        tracing::debug!(table = %self.table.name, partition = %self.partition_name, mode = self.mode.as_str(), deleted = self.deleted, copied = summary.copied, rows = summary.rows, "partition written");
        Ok(summary)
    }
}

/// Opens the replace of one partition: its lock, then (with `skip_if_newer`) the
/// check that lineage holds no newer generation, then the DELETE of its rows and
/// rejections. See the target's invariant.
///
/// Both target modes DELETE the partition's rows (through the parent in native mode,
/// where PostgreSQL prunes to the child) and COPY the new ones, under ROW EXCLUSIVE
/// locks: a reader under READ COMMITTED or REPEATABLE READ sees the old rows or the new,
/// never none (TRUNCATE, which older builds used on native children, is not MVCC-safe).
pub async fn open_replace<'c, 'a>(
    client: &'c mut Client,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
) -> Result<Opened<'c, 'a>, TargetError> {
    let (tx, pred) = begin_partition_write(client, table, meta.partition).await?;
    if meta.skip_if_newer {
        let newer: Option<i64> = tx
            .query_opt(
                "SELECT stage_generation FROM weir.partitions WHERE target_table = $1 AND partition = $2",
                &[&table.name.to_string(), &meta.partition.name()],
            )
            .await
            .map_err(query_err("read the partition's lineage"))?
            .map(|r| r.get(0));
        if let Some(newer) = newer.and_then(|g| u64::try_from(g).ok())
            && newer > meta.generation
        {
            tx.rollback().await.map_err(query_err("rollback"))?;
            return Ok(Opened::Superseded(newer));
        }
    }
    let mut writer = PartitionWriter::new(tx, table, meta, WriteMode::Replace, pred);
    writer.delete_partition().await?;
    Ok(Opened::Writer(Box::new(writer)))
}

/// Opens the merge of one partition: its lock, then lineage, which must name the same
/// transform, plugin and config (else [`Opened::Refused`], nothing changed: the caller
/// replaces the partition). The changed keys are then added chunk by chunk
/// ([`PartitionWriter::add_keys`]) and their rows deleted at once
/// ([`PartitionWriter::delete_keys`]), before the output is copied.
pub async fn open_merge<'c, 'a>(
    client: &'c mut Client,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
) -> Result<Opened<'c, 'a>, TargetError> {
    let (tx, pred) = begin_partition_write(client, table, meta.partition).await?;
    let lineage = tx
        .query_opt(
            "SELECT row_count, transform, plugin_sha256, config_hash FROM weir.partitions \
             WHERE target_table = $1 AND partition = $2",
            &[&table.name.to_string(), &meta.partition.name()],
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
            if row.get::<_, String>(1) == meta.transform
                && row.get::<_, Option<String>>(2).as_deref() == meta.plugin_sha256
                && row.get::<_, Option<String>>(3).as_deref() == meta.config_hash =>
        {
            row.get::<_, i64>(0)
        }
        _ => {
            tx.rollback().await.map_err(query_err("rollback"))?;
            return Ok(Opened::Refused);
        }
    };
    let mut writer = PartitionWriter::new(tx, table, meta, WriteMode::Merge, pred);
    writer.previous_rows = u64::try_from(previous_rows).unwrap_or(0);
    Ok(Opened::Writer(Box::new(writer)))
}
