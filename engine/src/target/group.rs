//! Small merges of many partitions of one table in one transaction (a *group*): the
//! partitions' locks (taken in the order of their lock keys), their lineage read
//! under them, the DELETE of each partition's changed keys, one COPY of all their new
//! rows, each partition's rejections and lineage, one commit. A round of small
//! changes spread over many partitions pays one transaction's round trips instead of
//! one transaction per partition; what each partition gets is what its own merge
//! would write ([`super::writer`]), and like any write it is all or nothing: a group
//! that fails leaves every partition of it as it was.

use std::collections::HashMap;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::TryFutureExt;
use futures_util::future::{try_join, try_join_all};
use postgres_types::{ToSql, Type};
use tokio_postgres::{Client, CopyInSink, Statement, Transaction};

use super::write::{PartitionMeta, RejectedRow, WriteSummary, lock_key};
use super::writer::{
    CopyOut, condition, copy_header, copy_sql, copy_trailer, delete_keys_sql, key_types,
    merge_base, param_refs, record_rejections,
};
use super::{TargetError, TargetTable, lineage, query_err};
use crate::partition::PartitionPredicate;
use crate::pgerror::PgError;
use crate::value::Value;

/// One partition of a group.
struct Member<'a> {
    meta: PartitionMeta<'a>,
    pred: PartitionPredicate,
    /// The SQL of its DELETE of changed keys (a key of [`GroupWriter::deletes`]).
    delete_sql: String,
    /// Lineage lets it merge: the rows it holds before this write. `None`: left out.
    previous_rows: Option<u64>,
    deleted: u64,
    copied: u64,
    rejected: u64,
}

/// A group's transaction in progress (see the module); dropping it unfinished rolls
/// it back.
pub struct GroupWriter<'c, 'a> {
    tx: Transaction<'c>,
    table: &'a TargetTable,
    key_types: Vec<(String, Type)>,
    members: Vec<Member<'a>>,
    copy_statement: Statement,
    /// The DELETE of changed keys, by its SQL (one per shape of partition condition).
    deletes: HashMap<String, Statement>,
    sink: Option<Pin<Box<CopyInSink<Bytes>>>>,
    buf: BytesMut,
    value_bytes: Vec<u8>,
    insert_rejection: Option<Statement>,
    /// The rows the target kept of those copied, as its COPYs' answers counted them.
    kept: u64,
}

impl std::fmt::Debug for GroupWriter<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWriter")
            .field("table", &self.table.name)
            .field("partitions", &self.members.len())
            .finish_non_exhaustive()
    }
}

/// The changed keys of one member of a group: their values (in the order of the key
/// columns given to [`open_group`]) and the same as rejection keys (`[42]`).
#[derive(Debug, Default)]
pub struct MemberKeys {
    pub keys: Vec<Vec<Value>>,
    pub rejection_keys: Vec<String>,
}

/// Opens a group of merges of `table`, by the key `key_columns` (indexes into the
/// target's columns), one member per partition of `metas` (all of one source table,
/// transform, plugin and config): `BEGIN`, then in one round trip the partitions'
/// advisory locks in the order of their keys (so two groups never wait on each other
/// in a cycle) and `lock_timeout`, their lineage, and the preparation of the
/// statements. Returns the writer and, per member, whether lineage lets it merge;
/// the others are left out (nothing is written to them: the caller writes them
/// alone, as a replace).
pub async fn open_group<'c, 'a>(
    client: &'c mut Client,
    table: &'a TargetTable,
    key_columns: &[usize],
    metas: Vec<PartitionMeta<'a>>,
) -> Result<(GroupWriter<'c, 'a>, Vec<bool>), TargetError> {
    let key_types = key_types(table, key_columns);
    let mut members = Vec::with_capacity(metas.len());
    for meta in metas {
        let pred = table.predicate(meta.partition)?;
        let mut params = Vec::new();
        let condition = condition(table, &pred, &mut params);
        members.push(Member {
            meta,
            pred,
            delete_sql: delete_keys_sql(table, &key_types, &condition, params.len()),
            previous_rows: None,
            deleted: 0,
            copied: 0,
            rejected: 0,
        });
    }
    let mut shapes: Vec<String> = members.iter().map(|m| m.delete_sql.clone()).collect();
    shapes.sort();
    shapes.dedup();
    let mut keys: Vec<i64> = members
        .iter()
        .map(|m| lock_key(&table.name, m.meta.partition))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let lock = super::write::advisory_lock_statements(table, &keys);
    let copy = copy_sql(table);
    let target_name = table.name.to_string();
    let names: Vec<String> = members
        .iter()
        .map(|m| m.meta.partition.name().into_owned())
        .collect();
    let tx = client.transaction().await.map_err(query_err("begin"))?;
    let ((lineage, copy_statement), statements) = {
        let lock = tx
            .batch_execute(&lock)
            .map_err(query_err("take the partitions' locks"));
        let lineage = async {
            tx.query_typed(
                "SELECT partition, row_count, transform, plugin_sha256, config_hash, stage_id, stage_generation FROM weir.partitions \
                 WHERE target_table = $1 AND partition = ANY($2)",
                &[
                    (&target_name as &(dyn ToSql + Sync), Type::TEXT),
                    (&names, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|source| match source.code() {
                Some(code) if code == &tokio_postgres::error::SqlState::UNDEFINED_TABLE => {
                    TargetError::MissingWeirSchema
                }
                _ => TargetError::Query {
                    what: "read the partitions' lineage".into(),
                    source: PgError(source),
                },
            })
        };
        let copy = tx
            .prepare(&copy)
            .map_err(query_err(format!("prepare the COPY into {}", table.name)));
        let prepares = try_join_all(shapes.iter().map(|sql| {
            tx.prepare(sql)
                .map_err(query_err(format!("prepare the delete of {}", table.name)))
        }));
        let columns = super::schema::check_columns(&tx, table);
        // Every member is of one stage and feed: the first's say whose claim it needs.
        let claimed = async {
            match members.first() {
                Some(m) => {
                    super::claims::check_claim(&tx, &table.name, m.meta.source_id, m.meta.stage_id)
                        .await
                }
                None => Ok(()),
            }
        };
        // In this order on the connection: the locks first, all the rest under them.
        let (((((), lineage), copy), statements), ((), ())) = try_join(
            try_join(try_join(try_join(lock, lineage), copy), prepares),
            try_join(columns, claimed),
        )
        .await?;
        ((lineage, copy), statements)
    };
    let deletes: HashMap<String, Statement> = shapes.into_iter().zip(statements).collect();
    for row in &lineage {
        let name: String = row.get(0);
        for member in members
            .iter_mut()
            .filter(|m| m.meta.partition.name() == name)
        {
            member.previous_rows = merge_base(row, 1, &member.meta);
        }
    }
    let mergeable = members.iter().map(|m| m.previous_rows.is_some()).collect();
    let writer = GroupWriter {
        tx,
        table,
        key_types,
        members,
        copy_statement,
        deletes,
        sink: None,
        buf: BytesMut::new(),
        value_bytes: Vec::new(),
        insert_rejection: None,
        kept: 0,
    };
    Ok((writer, mergeable))
}

impl GroupWriter<'_, '_> {
    /// Deletes the target rows and rejections of each member's changed keys (`keys`,
    /// by member; members left out have none) and starts the COPY of their new rows:
    /// one round trip for the whole group.
    pub async fn delete_keys(&mut self, keys: Vec<MemberKeys>) -> Result<(), TargetError> {
        let target_name = self.table.name.to_string();
        let mut work = Vec::new();
        for (member, keys) in self.members.iter().zip(&keys) {
            if member.previous_rows.is_none() || keys.keys.is_empty() {
                continue;
            }
            let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
            condition(self.table, &member.pred, &mut params);
            for i in 0..self.key_types.len() {
                params.push(Box::new(
                    keys.keys
                        .iter()
                        .map(|k| k.get(i).cloned().unwrap_or(Value::Null))
                        .collect::<Vec<Value>>(),
                ));
            }
            work.push((member, params, &keys.rejection_keys));
        }
        // Every changed key's rejections, of every member, in one statement.
        let (partitions, rejection_keys): (Vec<std::borrow::Cow<'_, str>>, Vec<&str>) = work
            .iter()
            .flat_map(|(member, _, keys)| {
                keys.iter()
                    .map(|k| (member.meta.partition.name(), k.as_str()))
            })
            .unzip();
        let tx = &self.tx;
        let table = &self.table.name;
        let deletes = in_order(
            work.iter()
                .map(|(member, params, _)| {
                    let statement = &self.deletes[&member.delete_sql];
                    let partition = member.meta.partition.name();
                    async move {
                        tx.execute(statement, &param_refs(params))
                            .await
                            .map_err(query_err(format!(
                                "delete the changed keys of partition {partition} of {table}"
                            )))
                    }
                })
                .collect(),
        );
        let rejections = async {
            tx.execute_typed(
                "DELETE FROM weir.dead_letter WHERE kind = 'rejected' AND target_table = $1 \
                 AND (partition, row_key) IN (SELECT p, k::jsonb FROM unnest($2::text[], $3::text[]) AS u(p, k))",
                &[
                    (&target_name as &(dyn ToSql + Sync), Type::TEXT),
                    (&partitions, Type::TEXT_ARRAY),
                    (&rejection_keys, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(query_err("clear the changed keys' rejections"))
        };
        // The COPY starts once every DELETE is answered: a COPY sent behind a DELETE
        // that fails (a lock timeout) gets no Sync from the client, and the connection
        // is left out of step with the server ("unexpected message from server").
        let (deleted, _) = try_join(deletes, rejections).await?;
        let sink = tx
            .copy_in(&self.copy_statement)
            .await
            .map_err(query_err(format!("start COPY into {table}")))?;
        let counts = deleted;
        let indexes: Vec<usize> = self
            .members
            .iter()
            .zip(&keys)
            .enumerate()
            .filter(|(_, (m, k))| m.previous_rows.is_some() && !k.keys.is_empty())
            .map(|(i, _)| i)
            .collect();
        for (i, count) in indexes.into_iter().zip(counts) {
            self.members[i].deleted = count;
        }
        crate::failpoint!("target-after-delete");
        self.sink = Some(Box::pin(sink));
        copy_header(&mut self.buf);
        Ok(())
    }

    /// Copies output rows (in target column order) of member `member`.
    pub async fn copy(&mut self, member: usize, rows: &[Vec<Value>]) -> Result<(), TargetError> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.sink.is_none() {
            let sink = self
                .tx
                .copy_in(&self.copy_statement)
                .await
                .map_err(query_err(format!("start COPY into {}", self.table.name)))?;
            self.sink = Some(Box::pin(sink));
            copy_header(&mut self.buf);
        }
        let Some(sink) = self.sink.as_mut() else {
            return Ok(());
        };
        let m = &mut self.members[member];
        let mut out = CopyOut {
            sink,
            buf: &mut self.buf,
            value_bytes: &mut self.value_bytes,
        };
        out.rows(
            self.table,
            &m.meta.partition.name(),
            &self.table.columns,
            &self.table.numeric_scales,
            rows,
        )
        .await?;
        m.copied += rows.len() as u64;
        Ok(())
    }

    /// Records input rows the plugin rejected in member `member`'s partition.
    pub async fn reject(
        &mut self,
        member: usize,
        rejections: &[RejectedRow],
    ) -> Result<(), TargetError> {
        if rejections.is_empty() {
            return Ok(());
        }
        if let Some(end) = self.copy_trailer().await? {
            self.kept += end.await?;
        }
        let m = &mut self.members[member];
        record_rejections(
            &self.tx,
            &mut self.insert_rejection,
            self.table,
            &m.meta,
            rejections,
        )
        .await?;
        m.rejected += rejections.len() as u64;
        Ok(())
    }

    /// Sends the rest of the COPY in progress with its trailer; the returned future
    /// ends it.
    async fn copy_trailer(
        &mut self,
    ) -> Result<
        Option<impl std::future::Future<Output = Result<u64, TargetError>> + use<>>,
        TargetError,
    > {
        let Some(sink) = self.sink.take() else {
            return Ok(None);
        };
        let end = copy_trailer(sink, &mut self.buf, self.table).await?;
        Ok(Some(async move {
            let kept = end.await?;
            crate::failpoint!("target-after-copy");
            Ok(kept)
        }))
    }

    /// Ends the COPY, records each member's lineage (with the COPY's end, in one round
    /// trip) and commits. Returns each member's summary (`None` for one left out).
    pub async fn commit(mut self) -> Result<Vec<Option<WriteSummary>>, TargetError> {
        let copy_end = self.copy_trailer().await?;
        let summaries: Vec<Option<WriteSummary>> = self
            .members
            .iter()
            .map(|m| {
                m.previous_rows.map(|previous| WriteSummary {
                    rows: previous.saturating_sub(m.deleted).saturating_add(m.copied),
                    copied: m.copied,
                    checksum: String::new(),
                    rejected: m.rejected,
                    superseded_by: None,
                })
            })
            .collect();
        let written: Vec<(PartitionMeta<'_>, &WriteSummary)> = self
            .members
            .iter()
            .zip(&summaries)
            .filter_map(|(m, summary)| summary.as_ref().map(|s| (m.meta, s)))
            .collect();
        let records = lineage::record_merges(&self.tx, self.table, &written);
        match copy_end {
            Some(copy_end) => self.kept += try_join(copy_end, records).await?.0,
            None => records.await?,
        }
        let sent = self.members.iter().map(|m| m.copied).sum();
        super::writer::check_kept(self.table, sent, self.kept)?;
        self.tx.commit().await.map_err(query_err(format!(
            "commit a group of {} partitions of {}",
            self.members.len(),
            self.table.name
        )))?;
        tracing::debug!(table = %self.table.name, partitions = self.members.len(), "group of partitions written");
        Ok(summaries)
    }
}

/// Runs `futures` at once, each first polled in the order given, so that the requests
/// they send on their first poll (as tokio-postgres's do) go in that order; their
/// outputs in order. The first error ends it.
async fn in_order<T, F>(futures: Vec<F>) -> Result<Vec<T>, TargetError>
where
    F: std::future::Future<Output = Result<T, TargetError>>,
{
    use std::task::Poll;
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                Poll::Ready(Ok(value)) => *slot = Some(value),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(Ok(out.iter_mut().filter_map(Option::take).collect()))
        }
    })
    .await
}
