//! A partition's write transaction, fed in chunks: opened (lock, lineage check,
//! DELETE), then rows COPYed and rejections recorded as they arrive, then lineage and
//! commit. A job streams its output through it, so no write holds a whole partition;
//! dropping an unfinished writer aborts the COPY and rolls back.

use std::pin::Pin;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::{try_join, try_join4};
use futures_util::{SinkExt, TryFutureExt};
use postgres_types::{ToSql, Type};
use tokio_postgres::{CopyInSink, Statement, Transaction};

use super::write::{Begun, PartitionMeta, RejectedRow, WriteSummary, lock_statements};
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
    /// The statements prepared with the opening (see [`open_replace`]): the COPY into
    /// the target, and the DELETE of the partition (a replace) or of a chunk of keys
    /// given as arrays (a merge).
    copy_statement: Statement,
    delete_statement: Statement,
    /// Merge: the key columns (indexes into the target's), the first chunk of keys and
    /// its rejection keys (held until a second one, or the delete), and whether the
    /// temporary table of keys holds them instead.
    key_columns: Vec<usize>,
    keys: Option<(Vec<Vec<Value>>, Vec<String>)>,
    keys_table: bool,
    buf: BytesMut,
    value_bytes: Vec<u8>,
    insert_rejection: Option<Statement>,
    copied: u64,
    /// The rows the target kept of those copied, as its COPYs' answers counted them.
    kept: u64,
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
    fn new(opening: Opening<'c, 'a>, mode: WriteMode) -> PartitionWriter<'c, 'a> {
        let Opening {
            tx,
            table,
            meta,
            pred,
            key_columns,
            copy_statement,
            delete_statement,
        } = opening;
        PartitionWriter {
            tx,
            table,
            partition_name: meta.partition.name().into_owned(),
            meta,
            mode,
            pred,
            sink: None,
            copy_statement,
            delete_statement,
            key_columns,
            keys: None,
            keys_table: false,
            buf: BytesMut::new(),
            value_bytes: Vec::new(),
            insert_rejection: None,
            copied: 0,
            kept: 0,
            deleted: 0,
            rejected: 0,
            previous_rows: 0,
        }
    }

    /// The partition's condition ([`condition`]) and its parameters.
    fn condition(&self, params: &mut Vec<Box<dyn ToSql + Sync + Send>>) -> String {
        condition(self.table, &self.pred, params)
    }

    /// Runs a DELETE of the target with its parameters; the rows it deleted.
    async fn delete(
        &self,
        sql: &str,
        params: &[Box<dyn ToSql + Sync + Send>],
        what: &str,
    ) -> Result<u64, TargetError> {
        self.tx
            .execute(sql, &param_refs(params))
            .await
            .map_err(self.delete_err(what))
    }

    fn delete_err(&self, what: &str) -> impl FnOnce(tokio_postgres::Error) -> TargetError {
        query_err(format!(
            "delete {what} of partition {} of {}",
            self.partition_name, self.table.name
        ))
    }

    /// Replace: deletes the partition's rows and its rejections, and starts the COPY of
    /// its new rows, in one round trip.
    async fn delete_partition(&mut self) -> Result<(), TargetError> {
        let mut params = Vec::new();
        self.condition(&mut params);
        let refs = param_refs(&params);
        let target_name = self.table.name.to_string();
        // The partition's rejections are part of its output: replaced with it. The COPY
        // starts once both are answered: a COPY sent behind a DELETE that fails (a lock
        // timeout) gets no Sync from the client, and the connection is left out of
        // step with the server ("unexpected message from server").
        let (deleted, _) = try_join(
            self.tx
                .execute(&self.delete_statement, &refs)
                .map_err(self.delete_err("the rows")),
            self.tx
                .execute_typed(
                    "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2",
                    &[
                        (&target_name as &(dyn ToSql + Sync), Type::TEXT),
                        (&self.partition_name, Type::TEXT),
                    ],
                )
                .map_err(query_err("clear the partition's rejections")),
        )
        .await?;
        let sink = self.start_copy().await?;
        self.deleted = deleted;
        crate::failpoint!("target-after-delete");
        self.opened_copy(CopyInto::Target, sink);
        Ok(())
    }

    /// Merge: takes a chunk of changed keys (values in the order of the key columns
    /// given to [`open_merge`]) and the same as rejection keys (`[42]`). Their target
    /// rows and rejections are deleted by [`Self::delete_keys`], once every key is in:
    /// one chunk by a `DELETE` with the keys as arrays, more through a temporary table
    /// of keys, COPYed in as they come, in one `DELETE … USING` (a hash join, however
    /// many keys and whatever the target's indexes).
    pub async fn add_keys(
        &mut self,
        keys: Vec<Vec<Value>>,
        rejection_keys: Vec<String>,
    ) -> Result<(), TargetError> {
        if keys.is_empty() {
            return Ok(());
        }
        match self.keys.take() {
            None if !self.keys_table => self.keys = Some((keys, rejection_keys)),
            held => {
                self.end_copy().await?;
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
                            "CREATE TEMPORARY TABLE pg_temp.weir_merge_keys ({defs}) ON COMMIT DROP"
                        ))
                        .await
                        .map_err(query_err("create the merge's table of keys"))?;
                    self.keys_table = true;
                }
                for (chunk, rejection_keys) in held.into_iter().chain([(keys, rejection_keys)]) {
                    // No statement can go while a COPY is open on the connection.
                    self.end_copy().await?;
                    self.delete_rejections(&rejection_keys).await?;
                    self.copy_into(CopyInto::Keys, &chunk).await?;
                }
            }
        }
        Ok(())
    }

    /// Merge: deletes the rejections of a chunk of changed keys.
    async fn delete_rejections(&self, rejection_keys: &[String]) -> Result<(), TargetError> {
        let target_name = self.table.name.to_string();
        self.tx
            .execute_typed(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 AND partition = $2 \
                 AND row_key = ANY($3::text[]::jsonb[])",
                &[
                    (&target_name as &(dyn ToSql + Sync), Type::TEXT),
                    (&self.partition_name, Type::TEXT),
                    (&rejection_keys, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(query_err("clear the changed keys' rejections"))?;
        Ok(())
    }

    /// The (name, type) of the merge's key columns.
    fn key_types(&self) -> Vec<(String, postgres_types::Type)> {
        key_types(self.table, &self.key_columns)
    }

    /// Merge: deletes the target rows and rejections of every key added (see
    /// [`Self::add_keys`]) and starts the COPY of their new rows: one round trip when
    /// the keys came in one chunk.
    pub async fn delete_keys(&mut self) -> Result<(), TargetError> {
        self.end_copy().await?;
        let (deleted, sink) = if self.keys_table {
            let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
            let condition = self.condition(&mut params);
            let join = self
                .key_types()
                .iter()
                .enumerate()
                .map(|(i, (n, _))| format!("t.{} = k.k{i}", quote_ident(n)))
                .collect::<Vec<_>>()
                .join(" AND ");
            let delete = format!(
                "DELETE FROM {} AS t USING pg_temp.weir_merge_keys AS k WHERE {condition} AND {join}",
                self.table.name.quoted()
            );
            self.tx
                .batch_execute("ANALYZE pg_temp.weir_merge_keys")
                .await
                .map_err(query_err("analyze the merge's table of keys"))?;
            // Not sent together: a DELETE by SQL text is prepared first, and a COPY
            // started meanwhile would hold the connection before its execution.
            let deleted = self.delete(&delete, &params, "the changed keys").await?;
            (deleted, self.start_copy().await?)
        } else if let Some((keys, rejection_keys)) = self.keys.take() {
            let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
            self.condition(&mut params);
            for i in 0..self.key_columns.len() {
                params.push(Box::new(
                    keys.iter()
                        .map(|k| k.get(i).cloned().unwrap_or(Value::Null))
                        .collect::<Vec<Value>>(),
                ));
            }
            let refs = param_refs(&params);
            // The COPY starts once the deletes are answered: see `delete_partition`.
            let (deleted, _) = try_join(
                self.tx
                    .execute(&self.delete_statement, &refs)
                    .map_err(self.delete_err("the changed keys")),
                self.delete_rejections(&rejection_keys),
            )
            .await?;
            (deleted, self.start_copy().await?)
        } else {
            return Ok(());
        };
        self.deleted += deleted;
        crate::failpoint!("target-after-delete");
        self.opened_copy(CopyInto::Target, sink);
        Ok(())
    }

    /// Starts the COPY into the target (its statement prepared with the opening).
    fn start_copy(
        &self,
    ) -> impl std::future::Future<Output = Result<CopyInSink<Bytes>, TargetError>> + '_ {
        self.tx
            .copy_in(&self.copy_statement)
            .map_err(query_err(format!("start COPY into {}", self.table.name)))
    }

    /// Takes a started COPY: its header goes first in the buffer.
    fn opened_copy(&mut self, into: CopyInto, sink: CopyInSink<Bytes>) {
        self.sink = Some((into, Box::pin(sink)));
        copy_header(&mut self.buf);
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
        let (columns, scales) = match into {
            CopyInto::Target => (self.table.columns.clone(), &self.table.numeric_scales[..]),
            CopyInto::Keys => (self.key_types(), &[][..]),
        };
        if self.sink.is_none() {
            let sink = match into {
                CopyInto::Target => self.start_copy().await?,
                CopyInto::Keys => self
                    .tx
                    .copy_in("COPY pg_temp.weir_merge_keys FROM STDIN (FORMAT binary)")
                    .await
                    .map_err(query_err("start COPY into the merge's table of keys"))?,
            };
            self.opened_copy(into, sink);
        }
        let Some((_, sink)) = self.sink.as_mut() else {
            return Ok(());
        };
        let mut copy = CopyOut {
            sink,
            buf: &mut self.buf,
            value_bytes: &mut self.value_bytes,
        };
        copy.rows(self.table, &self.partition_name, &columns, scales, rows)
            .await
    }

    /// Ends the COPY in progress, if any.
    async fn end_copy(&mut self) -> Result<(), TargetError> {
        if let Some(end) = self.copy_trailer().await? {
            self.kept += end.await?;
        }
        Ok(())
    }

    /// Sends the rest of the COPY in progress, if any, with its trailer; the returned
    /// future ends it (the server's answer), so that a next statement can go with it.
    async fn copy_trailer(
        &mut self,
    ) -> Result<
        Option<impl std::future::Future<Output = Result<u64, TargetError>> + use<>>,
        TargetError,
    > {
        let Some((into, sink)) = self.sink.take() else {
            return Ok(None);
        };
        let end = copy_trailer(sink, &mut self.buf, self.table).await?;
        Ok(Some(async move {
            let kept = end.await?;
            if into == CopyInto::Target {
                crate::failpoint!("target-after-copy");
                return Ok(kept);
            }
            Ok(0)
        }))
    }

    /// Records input rows the plugin rejected in `weir.dead_letter`.
    pub async fn reject(&mut self, rejections: &[RejectedRow]) -> Result<(), TargetError> {
        if rejections.is_empty() {
            return Ok(());
        }
        self.end_copy().await?;
        record_rejections(
            &self.tx,
            &mut self.insert_rejection,
            self.table,
            &self.meta,
            rejections,
        )
        .await?;
        self.rejected += rejections.len() as u64;
        Ok(())
    }

    /// Ends the COPY, records lineage and commits. `checksum`: of every row the
    /// partition holds after a replace (empty for a merge, which has none).
    pub async fn commit(mut self, checksum: String) -> Result<WriteSummary, TargetError> {
        let copy_end = self.copy_trailer().await?;
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
        // The COPY's end and lineage in one round trip: the server runs them in order.
        let record = lineage::record(&self.tx, self.table, &self.meta, &summary, self.mode);
        match copy_end {
            Some(copy_end) => self.kept += try_join(copy_end, record).await?.0,
            None => record.await?,
        }
        check_kept(self.table, self.copied, self.kept)?;
        self.tx.commit().await.map_err(query_err(format!(
            "commit partition {} of {}",
            self.partition_name, self.table.name
        )))?;
        tracing::debug!(table = %self.table.name, partition = %self.partition_name, mode = self.mode.as_str(), deleted = self.deleted, copied = summary.copied, rows = summary.rows, "partition written");
        Ok(summary)
    }
}

/// A partition write's transaction once opened, before its writer is made.
struct Opening<'c, 'a> {
    tx: Transaction<'c>,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
    pred: PartitionPredicate,
    key_columns: Vec<usize>,
    copy_statement: Statement,
    delete_statement: Statement,
}

/// Begins a partition's write (see [`begin_partition_write`]) and sends, in one round
/// trip after `BEGIN`, its lock, the lineage read `lineage` (run under the lock) and
/// the preparation of the write's COPY and of `delete` (its parameters: the
/// partition's condition's, then the merge's arrays of keys).
async fn open<'c, 'a>(
    begun: Begun<'c>,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
    key_columns: &[usize],
    lineage: &str,
    delete: impl FnOnce(&str, usize) -> String,
) -> Result<(Opening<'c, 'a>, Option<tokio_postgres::Row>), TargetError> {
    let Begun { tx, pred } = begun;
    let mut condition_params = Vec::new();
    let condition = condition(table, &pred, &mut condition_params);
    let delete = delete(&condition, condition_params.len());
    let copy = copy_sql(table);
    let target_name = table.name.to_string();
    let partition_name = meta.partition.name();
    let ((_, row, delete_statement, copy_statement), ((), ())) = try_join(
        try_join4(
            tx.batch_execute(&lock_statements(table, meta.partition))
                .map_err(query_err("take the partition lock")),
            tx.query_typed_opt(
                lineage,
                &[
                    (&target_name as &(dyn ToSql + Sync), Type::TEXT),
                    (&partition_name, Type::TEXT),
                ],
            )
            .map_err(|source| match source.code() {
                Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => {
                    TargetError::MissingWeirSchema
                }
                _ => TargetError::Query {
                    what: "read the partition's lineage".into(),
                    source: PgError(source),
                },
            }),
            tx.prepare(&delete)
                .map_err(query_err(format!("prepare the delete of {}", table.name))),
            tx.prepare(&copy)
                .map_err(query_err(format!("prepare the COPY into {}", table.name))),
        ),
        try_join(
            super::schema::check_columns(&tx, table),
            super::claims::check_claim(&tx, &table.name, meta.source_id, meta.stage_id),
        ),
    )
    .await?;
    let opening = Opening {
        tx,
        table,
        meta,
        pred,
        key_columns: key_columns.to_vec(),
        copy_statement,
        delete_statement,
    };
    Ok((opening, row))
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
    begun: Begun<'c>,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
) -> Result<Opened<'c, 'a>, TargetError> {
    // The last column: the stage that wrote it reads another source than this one
    // (`weir.stages`; unknown for stages not registered, as older builds').
    let ours = crate::config::quote_literal(meta.stage_id).unwrap_or_else(|| "''".into());
    let (opening, lineage) = open(
        begun,
        table,
        meta,
        &[],
        &format!(
            "SELECT stage_generation, stage_id, source_table, source_position, \
                    coalesce((SELECT a.source <> b.source FROM weir.stages a, weir.stages b \
                              WHERE a.stage_id = p.stage_id AND b.stage_id = {ours}), false) \
             FROM weir.partitions p WHERE target_table = $1 AND partition = $2"
        ),
        |condition, _| format!("DELETE FROM {} WHERE {condition}", table.name.quoted()),
    )
    .await?;
    // Written by another pipeline (another stage, from another source table or another
    // source): two pipelines writing one target table would replace each other's
    // partitions.
    if let Some(r) = &lineage {
        let stage_id: Option<String> = r.get(1);
        let source_table: String = r.get(2);
        let other_source: bool = r.get(4);
        if stage_id.is_some_and(|id| !id.is_empty() && id != meta.stage_id)
            && (source_table != meta.source_table || other_source)
        {
            opening.tx.rollback().await.map_err(query_err("rollback"))?;
            return Err(TargetError::ForeignPartition {
                table: table.name.clone(),
                partition: meta.partition.name().into_owned(),
                source_table: if other_source {
                    format!("{source_table} of another source")
                } else {
                    source_table
                },
            });
        }
    }
    // A backfill from another stage of the same feed that has not read as far as the
    // write lineage records (a checkpoint of an earlier state imported, a new stage
    // still catching up) would put the partition back to an older state: left as it
    // is. Positions of one feed compare across its stages; generations do not.
    if meta.skip_if_newer
        && let Some(r) = &lineage
        && r.get::<_, Option<String>>(1)
            .is_some_and(|id| !id.is_empty() && id != meta.stage_id)
        && u64::try_from(r.get::<_, i64>(3)).is_ok_and(|p| p > meta.source_position)
    {
        let generation = u64::try_from(r.get::<_, i64>(0)).unwrap_or(0);
        opening.tx.rollback().await.map_err(query_err("rollback"))?;
        return Ok(Opened::Superseded(generation));
    }
    // Generations count in one stage: one written from another stage (a stage made
    // anew, or another folder) says nothing of this stage's.
    let newer = lineage
        .filter(|r| {
            r.get::<_, Option<String>>(1)
                .is_none_or(|id| id.is_empty() || id == meta.stage_id)
        })
        .map(|r| r.get::<_, i64>(0))
        .and_then(|g| u64::try_from(g).ok());
    if meta.skip_if_newer
        && let Some(newer) = newer
        && newer > meta.generation
    {
        opening.tx.rollback().await.map_err(query_err("rollback"))?;
        return Ok(Opened::Superseded(newer));
    }
    let mut writer = PartitionWriter::new(opening, WriteMode::Replace);
    writer.delete_partition().await?;
    Ok(Opened::Writer(Box::new(writer)))
}

/// Opens the merge of one partition whose key is `key_columns` (indexes into the
/// target's columns): its lock, then lineage, which must name the same transform,
/// plugin and config (else [`Opened::Refused`], nothing changed: the caller replaces
/// the partition). The changed keys are then added chunk by chunk
/// ([`PartitionWriter::add_keys`]) and their rows deleted at once
/// ([`PartitionWriter::delete_keys`]), before the output is copied.
pub async fn open_merge<'c, 'a>(
    begun: Begun<'c>,
    table: &'a TargetTable,
    meta: PartitionMeta<'a>,
    key_columns: &[usize],
) -> Result<Opened<'c, 'a>, TargetError> {
    let keys = key_types(table, key_columns);
    let (opening, lineage) = open(
        begun,
        table,
        meta,
        key_columns,
        "SELECT row_count, transform, plugin_sha256, config_hash, stage_id, stage_generation FROM weir.partitions \
         WHERE target_table = $1 AND partition = $2",
        |condition, first| delete_keys_sql(table, &keys, condition, first),
    )
    .await?;
    let Some(previous_rows) = lineage.and_then(|row| merge_base(&row, 0, &meta)) else {
        opening.tx.rollback().await.map_err(query_err("rollback"))?;
        return Ok(Opened::Refused);
    };
    let mut writer = PartitionWriter::new(opening, WriteMode::Merge);
    writer.previous_rows = previous_rows;
    Ok(Opened::Writer(Box::new(writer)))
}

/// The partition as a SQL condition on the partition column; its parameters are pushed
/// onto `params`, numbered from 1.
pub(super) fn condition(
    table: &TargetTable,
    pred: &PartitionPredicate,
    params: &mut Vec<Box<dyn ToSql + Sync + Send>>,
) -> String {
    let column = quote_ident(&table.partition_column);
    match pred {
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

pub(super) fn param_refs(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The (name, type) of a merge's key columns (indexes into the target's).
pub(super) fn key_types(table: &TargetTable, key_columns: &[usize]) -> Vec<(String, Type)> {
    key_columns
        .iter()
        .filter_map(|&c| table.columns.get(c).cloned())
        .collect()
}

/// A COPY in progress, for [`CopyOut::rows`].
pub(super) struct CopyOut<'s> {
    pub sink: &'s mut Pin<Box<CopyInSink<Bytes>>>,
    pub buf: &'s mut BytesMut,
    pub value_bytes: &'s mut Vec<u8>,
}

impl CopyOut<'_> {
    /// Encodes rows (values of `columns`) into PostgreSQL's binary COPY format and sends
    /// them in chunks of [`COPY_CHUNK_BYTES`]. A value that does not fit its column
    /// fails the write with the column (and the rows' partition) named, and so does a
    /// decimal with more places than its column's scale (`scales`, by column; empty:
    /// none), which PostgreSQL would round.
    pub async fn rows(
        &mut self,
        table: &TargetTable,
        partition: &str,
        columns: &[(String, Type)],
        scales: &[Option<i16>],
        rows: &[Vec<Value>],
    ) -> Result<(), TargetError> {
        let fields = i16::try_from(columns.len()).unwrap_or(i16::MAX);
        for row in rows {
            self.buf.put_i16(fields);
            for (i, ((name, ty), value)) in columns.iter().zip(row).enumerate() {
                if value.is_null() {
                    self.buf.put_i32(-1);
                    continue;
                }
                if let (Value::Decimal(d), Some(Some(scale))) = (value, scales.get(i))
                    && let Some(digits) = places_past(d, *scale)
                {
                    return Err(TargetError::WouldRound {
                        table: table.name.clone(),
                        partition: partition.to_owned(),
                        column: name.clone(),
                        digits,
                        scale: *scale,
                    });
                }
                self.value_bytes.clear();
                value
                    .encode_binary(ty, self.value_bytes)
                    .map_err(|source| TargetError::Encode {
                        table: table.name.clone(),
                        partition: partition.to_owned(),
                        column: name.clone(),
                        source: Box::new(source),
                    })?;
                self.buf
                    .put_i32(i32::try_from(self.value_bytes.len()).unwrap_or(i32::MAX));
                self.buf.extend_from_slice(self.value_bytes);
            }
            if self.buf.len() >= COPY_CHUNK_BYTES {
                self.sink
                    .as_mut()
                    .send(self.buf.split().freeze())
                    .await
                    .map_err(query_err(format!("COPY into {}", table.name)))?;
            }
        }
        Ok(())
    }
}

/// Records input rows the plugin rejected in `weir.dead_letter`, as rejections of
/// `meta`'s partition (the insert prepared once into `insert`).
pub(super) async fn record_rejections(
    tx: &Transaction<'_>,
    insert: &mut Option<Statement>,
    table: &TargetTable,
    meta: &PartitionMeta<'_>,
    rejections: &[RejectedRow],
) -> Result<(), TargetError> {
    let statement = match insert {
        Some(s) => s.clone(),
        None => {
            let s = tx
                .prepare(
                    "INSERT INTO weir.dead_letter (kind, source, source_position, source_table, target_table, partition, row_key, reason, input, plugin_sha256) \
                     VALUES ('rejected', $1, $2, $3, $4, $5, $6::text::jsonb, $7, $8, $9)",
                )
                .await
                .map_err(query_err("prepare the rejection insert"))?;
            *insert = Some(s.clone());
            s
        }
    };
    let target_name = table.name.to_string();
    let partition_name = meta.partition.name();
    for r in rejections {
        tx.execute(
            &statement,
            &[
                &meta.source_id,
                &i64::try_from(r.source_position).unwrap_or(i64::MAX),
                &meta.source_table,
                &target_name,
                &partition_name,
                &r.key,
                &r.reason,
                &r.input,
                &meta.plugin_sha256,
            ],
        )
        .await
        .map_err(query_err("record rejected rows"))?;
    }
    Ok(())
}

/// The DELETE of a merge's changed keys in one partition, the keys given as one array
/// per key column (`keys`, parameters numbered after the `first` of `condition`):
/// `… WHERE <partition> AND (k1, k2) IN (SELECT * FROM unnest($3::t1[], $4::t2[]))`.
pub(super) fn delete_keys_sql(
    table: &TargetTable,
    keys: &[(String, Type)],
    condition: &str,
    first: usize,
) -> String {
    if keys.is_empty() {
        // No key, no key to delete (a caller merges by a key).
        return format!("DELETE FROM {} WHERE false", table.name.quoted());
    }
    let arrays: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| format!("${}::{}[]", first + i + 1, quote_ident(ty.name())))
        .collect();
    let names: Vec<String> = keys.iter().map(|(name, _)| quote_ident(name)).collect();
    format!(
        "DELETE FROM {} WHERE {condition} AND ({}) IN (SELECT * FROM unnest({}))",
        table.name.quoted(),
        names.join(", "),
        arrays.join(", ")
    )
}

/// The rows a partition holds as lineage says, if a merge may go on top of it: its
/// lineage `row` (`row_count, transform, plugin_sha256, config_hash, stage_id,
/// stage_generation` from column `at`) names the transform, plugin and config of
/// `meta`, and a generation no older than the stage's last write of it (a target the
/// stage did not write last, `WEIR_TARGET_DSN` pointed elsewhere meanwhile, lacks
/// changes no longer recorded as changed keys).
pub(super) fn merge_base(
    row: &tokio_postgres::Row,
    at: usize,
    meta: &PartitionMeta<'_>,
) -> Option<u64> {
    // A merge is made only on what the same transform wrote from this stage: a stage
    // made anew may lack rows the target still holds (deleted while none ran).
    let same = row.get::<_, String>(at + 1) == meta.transform
        && row.get::<_, Option<String>>(at + 2).as_deref() == meta.plugin_sha256
        && row.get::<_, Option<String>>(at + 3).as_deref() == meta.config_hash
        && row
            .get::<_, Option<String>>(at + 4)
            .is_none_or(|id| id == meta.stage_id)
        && meta.merge_floor.is_none_or(|floor| {
            u64::try_from(row.get::<_, i64>(at + 5)).is_ok_and(|written| written >= floor)
        });
    same.then(|| u64::try_from(row.get::<_, i64>(at)).unwrap_or(0))
}

/// The COPY of a target table's columns, in binary.
pub(super) fn copy_sql(table: &TargetTable) -> String {
    format!(
        "COPY {} ({}) FROM STDIN (FORMAT binary)",
        table.name.quoted(),
        table
            .columns
            .iter()
            .map(|(name, _)| quote_ident(name))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Starts a binary COPY's data in `buf`: its signature, flags and header extension.
pub(super) fn copy_header(buf: &mut BytesMut) {
    buf.reserve(COPY_CHUNK_BYTES + COPY_CHUNK_BYTES / 4);
    buf.extend_from_slice(COPY_SIGNATURE);
    buf.put_i32(0); // flags
    buf.put_i32(0); // header extension length
}

/// Sends the rest of a COPY (`buf`) with its trailer; the returned future ends it (the
/// server's answer: the rows it kept), so that a next statement can go with it.
pub(super) async fn copy_trailer(
    mut sink: Pin<Box<CopyInSink<Bytes>>>,
    buf: &mut BytesMut,
    table: &TargetTable,
) -> Result<impl std::future::Future<Output = Result<u64, TargetError>> + use<>, TargetError> {
    buf.put_i16(-1); // trailer
    let what = format!("COPY into {}", table.name);
    sink.as_mut()
        .send(std::mem::take(buf).freeze())
        .await
        .map_err(query_err(what.clone()))?;
    Ok(async move {
        sink.as_mut()
            .finish()
            .await
            .map_err(query_err(format!("finish {what}")))
    })
}

/// The rows a partition's COPYs sent (`sent`) against those the target kept (`kept`, as
/// the server counted them): a trigger or rule on the target that drops rows (a
/// `BEFORE INSERT` trigger returning NULL) would otherwise leave lineage counting rows
/// the table does not hold.
pub(super) fn check_kept(table: &TargetTable, sent: u64, kept: u64) -> Result<(), TargetError> {
    if sent == kept {
        return Ok(());
    }
    Err(TargetError::RowsNotKept {
        table: table.name.clone(),
        sent,
        kept,
    })
}

/// The decimal places of `d` (a decimal's text) past `scale` that are not zeros, as
/// the count of places it has (`None`: it fits, as PostgreSQL would store it unrounded).
fn places_past(d: &str, scale: i16) -> Option<usize> {
    // `NaN` (and the infinities, which PostgreSQL refuses in a column with a scale by
    // itself) has no places to round.
    if !d.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let (int, frac) = d.split_once('.').unwrap_or((d, ""));
    let kept = usize::try_from(scale.max(0)).unwrap_or(0);
    let digits = frac.trim_end_matches('0').len();
    if digits > kept {
        return Some(digits);
    }
    // A negative scale rounds integer digits: the last -scale must be zeros.
    let dropped = usize::try_from(-i32::from(scale)).unwrap_or(0);
    let int = int.trim_start_matches(['-', '+']);
    (dropped > 0 && digits == 0 && int.bytes().rev().take(dropped).any(|b| b != b'0')).then_some(0)
}

#[cfg(test)]
mod tests {
    use super::places_past;

    #[test]
    fn places_past_the_scale_are_the_ones_postgresql_would_round() {
        assert_eq!(places_past("2.25", 1), Some(2));
        assert_eq!(places_past("2.50", 1), None);
        assert_eq!(places_past("-7", 2), None);
        assert_eq!(places_past("7.000", 0), None);
        assert_eq!(places_past("0.001", 2), Some(3));
        assert_eq!(places_past("12300", -2), None);
        assert_eq!(places_past("12345", -2), Some(0));
        assert_eq!(places_past("NaN", 2), None);
        assert_eq!(places_past("NaN", -2), None);
        assert_eq!(places_past("-NaN", -3), None);
    }
}
