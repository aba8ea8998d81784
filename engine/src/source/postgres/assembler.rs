//! The assembler: decoded pgoutput messages in, whole committed transactions out.
//!
//! A transaction arrives either whole at its commit (Begin … Commit), or, when the
//! server streams it while in progress (protocol version 2 and later, `streaming`),
//! in blocks (Stream Start … Stream Stop) between which other transactions commit.
//! A streamed transaction's changes are held until they fill a chunk, then go to the
//! stage's area for it ([`SourceEvent::StreamChunk`]); they become visible only at its
//! Stream Commit (one that never filled a chunk commits from memory, as a transaction
//! received whole). Its Stream Abort drops them, and a subtransaction's abort drops
//! that subtransaction's.
//! Until it commits, a streamed transaction is judged by nothing it sent: its relations
//! are its own, and an error in one of its changes is raised at its commit (not at all
//! if the change's subtransaction aborts), as a transaction received whole would be.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::PgSourceError;
use crate::config::{OnTruncate, TableConfig, TableName};
use crate::feed::{StageChange, StagedRow, with_unchanged};
use crate::limits::TRANSACTION_CHUNK_BYTES;
use crate::pg::pgoutput::{OldTuple, PgOutputMessage, Relation, ReplicaIdentity};
use crate::pg::pgtypes;
use crate::source::{Op, Row, SourceEvent, StreamCommitted, Transaction, keyed_changes};
use crate::value::{ColumnType, Value};

pub(super) use super::tuples::key_of;
use super::tuples::{key_image, row, take_unchanged, tuple_values};

/// A relation the stream described, mapped to a configured table (or not).
#[derive(Debug, Clone)]
struct RelationInfo {
    /// Index into the configured tables; `None`: not configured, passed over.
    table: Option<usize>,
    relation: Arc<Relation>,
}

/// A transaction being received.
#[derive(Debug, Default)]
struct InProgress {
    /// LSN of the transaction's commit record, known from Begin: the rows' position.
    commit_lsn: u64,
    commit_time_us: i64,
    changes: Vec<StageChange>,
    /// About the bytes `changes` holds (see `StageChange::approx_bytes`).
    bytes: usize,
    /// A streamed transaction's xid (its changes' position and time are known at its
    /// commit only, and set then), and the (sub)transaction of each of `changes`.
    stream: Option<Stream>,
}

/// What a streamed transaction's [`InProgress`] holds besides its changes.
#[derive(Debug, Default)]
struct Stream {
    xid: u32,
    /// The (sub)transaction of the message being handled.
    subxid: u32,
    /// The (sub)transaction of each change held.
    subxids: Vec<u32>,
    /// Subtransactions aborted so far: their changes are left out at commit.
    aborted: Vec<u32>,
    /// Relations as this transaction described them (its own DDL, not yet committed).
    relations: HashMap<u32, RelationInfo>,
    /// The first error in each subtransaction's changes: raised at commit unless that
    /// subtransaction aborted.
    failures: Vec<(u32, PgSourceError)>,
    /// Some of its changes went to the stage's area for it: it commits from there.
    /// Until then they are held here, and it commits as a transaction received whole.
    spilled: bool,
}

impl InProgress {
    fn streamed(xid: u32) -> InProgress {
        InProgress {
            stream: Some(Stream {
                xid,
                subxid: xid,
                ..Stream::default()
            }),
            ..InProgress::default()
        }
    }

    fn extend(&mut self, changes: impl IntoIterator<Item = StageChange>) {
        for c in changes {
            self.bytes = self.bytes.saturating_add(c.approx_bytes());
            self.changes.push(c);
            if let Some(stream) = self.stream.as_mut() {
                stream.subxids.push(stream.subxid);
            }
        }
    }

    /// A large transaction's changes handed out now, to the stage's pending area, once
    /// they reach `chunk_changes_max` changes or [`TRANSACTION_CHUNK_BYTES`].
    fn chunk_if_full(&mut self, chunk_changes_max: usize) -> Vec<SourceEvent> {
        if self.changes.len() < chunk_changes_max && self.bytes < TRANSACTION_CHUNK_BYTES {
            return Vec::new();
        }
        self.take_chunk()
    }

    /// The changes held, handed out as a chunk (none if there are none).
    fn take_chunk(&mut self) -> Vec<SourceEvent> {
        self.bytes = 0;
        let changes = std::mem::take(&mut self.changes);
        match self.stream.as_mut() {
            _ if changes.is_empty() => Vec::new(),
            None => vec![SourceEvent::Chunk(changes)],
            Some(stream) => {
                stream.spilled = true;
                vec![SourceEvent::StreamChunk {
                    xid: stream.xid,
                    changes: std::mem::take(&mut stream.subxids)
                        .into_iter()
                        .zip(changes)
                        .collect(),
                }]
            }
        }
    }
}

/// Turns pgoutput messages into stage input. See the module docs.
#[derive(Debug)]
pub struct Assembler {
    pub(super) tables: Vec<TableConfig>,
    /// Each configured table's relation OID, resolved at start (`None`: matched by
    /// name). A relation is a configured table by its OID, whatever its name now.
    oids: Vec<Option<u32>>,
    relations: HashMap<u32, RelationInfo>,
    current: Option<InProgress>,
    /// Transactions streamed in progress, by xid, and the one whose block is open.
    streams: HashMap<u32, InProgress>,
    in_stream: Option<u32>,
    chunk_changes_max: usize,
    /// See [`Assembler::with_catalog_lsn`].
    catalog_lsn: u64,
}

/// The transaction a change belongs to: the streamed one whose block is open, or the
/// one between Begin and Commit. (A function of the fields, so that the configured
/// tables can be borrowed beside it.)
fn open_transaction<'a>(
    current: &'a mut Option<InProgress>,
    streams: &'a mut HashMap<u32, InProgress>,
    in_stream: Option<u32>,
    what: &'static str,
) -> Result<&'a mut InProgress, PgSourceError> {
    match in_stream {
        Some(xid) => streams.get_mut(&xid).ok_or(PgSourceError::UnknownStream {
            what: "continued",
            xid,
        }),
        None => current
            .as_mut()
            .ok_or(PgSourceError::OutsideTransaction { what }),
    }
}

impl Assembler {
    /// The row image the open transaction's held changes last gave `key` of `table`
    /// (an earlier change of the same transaction not yet handed out); `None` when it
    /// holds none, or its last is a delete.
    fn held_image(&self, table: &str, key: &[u8]) -> Option<StagedRow> {
        let txn = match self.in_stream {
            Some(xid) => self.streams.get(&xid),
            None => self.current.as_ref(),
        }?;
        txn.changes
            .iter()
            .rev()
            .find_map(|change| match change {
                StageChange::Upsert {
                    table: t,
                    key: k,
                    row,
                    ..
                }
                | StageChange::UpsertUnchanged {
                    table: t,
                    key: k,
                    row,
                    ..
                } if t == table && k == key => Some(Some(row)),
                StageChange::Delete { table: t, key: k } if t == table && k == key => Some(None),
                _ => None,
            })
            .flatten()
            .cloned()
    }

    /// An assembler that knows no relation OID: relations are matched to tables by name.
    pub fn new(tables: Vec<TableConfig>, chunk_changes_max: usize) -> Assembler {
        let oids = vec![None; tables.len()];
        Assembler::with_oids(tables, oids, chunk_changes_max)
    }

    /// An assembler that knows each table's relation OID (`oids[i]` of `tables[i]`).
    pub fn with_oids(
        tables: Vec<TableConfig>,
        oids: Vec<Option<u32>>,
        chunk_changes_max: usize,
    ) -> Assembler {
        Assembler {
            tables,
            oids,
            relations: HashMap::new(),
            current: None,
            streams: HashMap::new(),
            in_stream: None,
            chunk_changes_max: chunk_changes_max.max(1),
            catalog_lsn: 0,
        }
    }

    /// The source's WAL position just before the tables' columns were read from its
    /// catalog. A transaction that committed before it was decoded with the table as it
    /// was then: a configured column it lacks was added since (or renamed onto its
    /// name), so its rows are staged without it (NULL when written), not refused: a
    /// restart after `ADD COLUMN` at the source and the target, with changes from
    /// before it still in the slot, goes on. A later transaction lacking one stops the
    /// table (dropped or renamed while streaming).
    pub fn with_catalog_lsn(mut self, lsn: u64) -> Assembler {
        self.catalog_lsn = lsn;
        self
    }

    /// Whether a transaction is open (received Begin, not yet Commit) or a streamed
    /// block is (Stream Start, not yet Stream Stop). Streamed transactions between
    /// their blocks do not count: other transactions commit meanwhile.
    pub fn in_transaction(&self) -> bool {
        self.current.is_some() || self.in_stream.is_some()
    }

    /// Holds an error found in a message of the open streamed block (`subxid`'s) until
    /// its transaction commits, instead of now: see the module docs. Outside a
    /// streamed block, the error is given back, to be raised now.
    pub fn defer_error(&mut self, subxid: u32, error: PgSourceError) -> Option<PgSourceError> {
        let Some(stream) = self
            .in_stream
            .and_then(|xid| self.streams.get_mut(&xid))
            .and_then(|t| t.stream.as_mut())
        else {
            return Some(error);
        };
        if !stream.failures.iter().any(|(s, _)| *s == subxid) {
            stream.failures.push((subxid, error));
        }
        None
    }

    /// Handles one message. `staged` looks up the staged row of (table, key), for
    /// unchanged TOAST values.
    ///
    /// An update's unchanged TOAST values are the row's previous version's: taken from
    /// the old tuple when it is whole (REPLICA IDENTITY FULL), or from the snapshot
    /// chunk in flight when it read the row and the stream has not changed it since
    /// (`unstaged`), or else left for the stage to fill when it applies the change
    /// ([`StageChange::UpsertUnchanged`]), from the row's image at that point, which
    /// includes every earlier change (of the same transaction, of transactions not yet
    /// staged, of earlier chunks of a large transaction). Never from a lookup at
    /// decoding time, which would see an older version or none.
    pub fn handle(
        &mut self,
        message: PgOutputMessage,
        staged: &dyn Fn(&str, &[u8]) -> Option<StagedRow>,
        unstaged: &dyn Fn(usize, &str, &[u8]) -> Unstaged,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        let subxid = self.in_stream.and(message.stream_xid());
        if let Some(subxid) = subxid
            && let Some(stream) = self
                .in_stream
                .and_then(|xid| self.streams.get_mut(&xid))
                .and_then(|t| t.stream.as_mut())
        {
            stream.subxid = subxid;
        }
        match (self.handle_message(message, staged, unstaged), subxid) {
            (Err(error), Some(subxid)) => self.defer_error(subxid, error).map_or(Ok(vec![]), Err),
            (result, _) => result,
        }
    }

    fn handle_message(
        &mut self,
        message: PgOutputMessage,
        staged: &dyn Fn(&str, &[u8]) -> Option<StagedRow>,
        unstaged: &dyn Fn(usize, &str, &[u8]) -> Unstaged,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        match message {
            PgOutputMessage::Begin(begin) => {
                self.current = Some(InProgress {
                    commit_lsn: begin.final_lsn,
                    commit_time_us: begin.commit_time_us,
                    ..InProgress::default()
                });
                Ok(vec![])
            }
            PgOutputMessage::Commit(commit) => {
                let txn = self
                    .current
                    .take()
                    .ok_or(PgSourceError::OutsideTransaction { what: "Commit" })?;
                Ok(vec![SourceEvent::Transaction(Transaction {
                    end: commit.end_lsn,
                    cursor: commit.commit_lsn,
                    changes: txn.changes,
                    bad_records: vec![],
                })])
            }
            PgOutputMessage::Relation(relation) => {
                let table = self.table_index(&relation);
                match self.open_stream() {
                    // A streamed transaction's relations are its own until it commits
                    // (they may carry its DDL); they are checked then.
                    Some(stream) => {
                        stream.relations.insert(
                            relation.oid,
                            RelationInfo {
                                table,
                                relation: Arc::new(relation),
                            },
                        );
                    }
                    None => self.relation(relation)?,
                }
                Ok(vec![])
            }
            PgOutputMessage::Insert(insert) => {
                let Some((t, relation)) = self.table_of(insert.relation_oid)? else {
                    return Ok(vec![]);
                };
                let after = row(&self.tables[t], &relation.columns, &insert.new, None)?;
                self.push(t, Op::Insert, None, Some(after))
            }
            PgOutputMessage::Update(update) => {
                let Some((t, relation)) = self.table_of(update.relation_oid)? else {
                    return Ok(vec![]);
                };
                let table = &self.tables[t];
                let before = update
                    .old
                    .as_ref()
                    .map(|old| key_image(table, &relation.columns, old))
                    .transpose()?;
                let source = table.source.to_string();
                let (mut after, mut unchanged) =
                    tuple_values(table, &relation.columns, &update.new)?;
                if !unchanged.is_empty()
                    && let Some(OldTuple::Full(old)) = &update.old
                {
                    // REPLICA IDENTITY FULL: PostgreSQL logs the old row whole, with
                    // its TOAST values inline.
                    let (old_row, _) = tuple_values(table, &relation.columns, old)?;
                    take_unchanged(&mut after, &mut unchanged, &old_row);
                }
                if let Some(before) = &before
                    && unchanged.iter().any(|c| table.key.contains(c))
                {
                    // A key held out of line, unchanged: PostgreSQL logs the old key
                    // whole (its TOAST values inline) when it has one, and it is the
                    // new row's key.
                    let keys: Vec<(String, Value)> = before
                        .iter()
                        .filter(|(c, v)| table.key.contains(c) && !v.is_null())
                        .cloned()
                        .collect();
                    take_unchanged(&mut after, &mut unchanged, &keys);
                }
                if unchanged
                    .iter()
                    .any(|c| table.key.contains(c) || *c == table.partition_by)
                {
                    // A key or the partition column held out of line: they are needed
                    // now, to key and place the change; only the staged image has them.
                    // That image is the committed stage's, which may not hold this
                    // row's latest yet (an earlier change of this transaction, or of
                    // the transactions staged with it): the stage fills the columns
                    // again from the row as it applies the update, and takes that row's
                    // partition if the partition column's value was not the same.
                    if let Some(column) = unchanged.iter().find(|c| table.key.contains(c)) {
                        return Err(PgSourceError::BadChange {
                            table: source,
                            reason: format!(
                                "key column `{column}` is an unchanged TOAST value the server sent no old key for; set REPLICA IDENTITY FULL on the table for later changes, and take a new snapshot (new `slot` and `[stage] path`, then `weir init --take-over`)"
                            ),
                        });
                    }
                    let key = key_of(table, &after)?;
                    // The transaction's own earlier change of the row first (an INSERT
                    // then an UPDATE in one transaction), then the committed stage.
                    let image = self
                        .held_image(&source, &key)
                        .or_else(|| staged(&source, &key));
                    let mut missing = unchanged.clone();
                    if let Some(image) = &image {
                        take_unchanged(&mut after, &mut missing, &image.values);
                    }
                    if let Some(column) = missing.into_iter().next() {
                        return Err(PgSourceError::ToastWithoutRow {
                            table: source,
                            column,
                        });
                    }
                    return self.push_update(t, before, after, unchanged, false);
                }
                let mut skip_if_absent = false;
                if !unchanged.is_empty() {
                    let key = key_of(table, &after)?;
                    match unstaged(t, &source, &key) {
                        Unstaged::ChunkRow(image) => {
                            take_unchanged(&mut after, &mut unchanged, &image);
                            if let Some(column) = unchanged.first() {
                                return Err(PgSourceError::ToastWithoutRow {
                                    table: source,
                                    column: column.clone(),
                                });
                            }
                        }
                        Unstaged::NotRead => skip_if_absent = true,
                        Unstaged::Staged => {}
                    }
                }
                self.push_update(t, before, after, unchanged, skip_if_absent)
            }
            PgOutputMessage::Delete(delete) => {
                let Some((t, relation)) = self.table_of(delete.relation_oid)? else {
                    return Ok(vec![]);
                };
                let before = key_image(&self.tables[t], &relation.columns, &delete.old)?;
                self.push(t, Op::Delete, Some(before), None)
            }
            PgOutputMessage::Truncate(truncate) => {
                let mut refused = Vec::new();
                let mut applied = Vec::new();
                for oid in &truncate.relation_oids {
                    if let Some((t, _)) = self.table_of(*oid)? {
                        let table = &self.tables[t];
                        match table.on_truncate {
                            OnTruncate::Fail => refused.push(table.source.to_string()),
                            OnTruncate::Apply => applied.push(table.source.to_string()),
                        }
                    }
                }
                if !refused.is_empty() {
                    return Err(PgSourceError::Truncate {
                        tables: refused.join(", "),
                    });
                }
                let txn = open_transaction(
                    &mut self.current,
                    &mut self.streams,
                    self.in_stream,
                    "a TRUNCATE",
                )?;
                for table in applied {
                    tracing::warn!(table = %table, "source table truncated: every staged row of it is removed");
                    txn.extend([StageChange::Truncate { table }]);
                }
                Ok(vec![])
            }
            PgOutputMessage::StreamStart(start) => {
                if self.in_stream.is_some() {
                    return Err(PgSourceError::OutsideTransaction {
                        what: "a Stream Start inside a streamed block",
                    });
                }
                self.in_stream = Some(start.xid);
                if start.first_segment {
                    // Its first block on this connection (what an earlier one left in
                    // the stage was dropped when this one connected).
                    self.streams
                        .insert(start.xid, InProgress::streamed(start.xid));
                    return Ok(vec![]);
                }
                if !self.streams.contains_key(&start.xid) {
                    return Err(PgSourceError::UnknownStream {
                        what: "continued",
                        xid: start.xid,
                    });
                }
                Ok(vec![])
            }
            PgOutputMessage::StreamStop => {
                let xid = self
                    .in_stream
                    .take()
                    .ok_or(PgSourceError::OutsideTransaction {
                        what: "a Stream Stop",
                    })?;
                // Changes are held until they fill a chunk (`chunk_if_full`); when all
                // streams hold a chunk's bytes, the block's changes go to the stage now,
                // so memory holds about one chunk however many transactions stream.
                let held: usize = self.streams.values().map(|t| t.bytes).sum();
                if held < TRANSACTION_CHUNK_BYTES {
                    return Ok(vec![]);
                }
                Ok(self
                    .streams
                    .get_mut(&xid)
                    .map(InProgress::take_chunk)
                    .unwrap_or_default())
            }
            PgOutputMessage::StreamAbort(abort) => {
                if abort.xid == abort.subxact_xid {
                    let spilled = self
                        .streams
                        .remove(&abort.xid)
                        .and_then(|t| t.stream)
                        .is_some_and(|s| s.spilled);
                    return Ok(if spilled {
                        vec![SourceEvent::StreamDiscard { xid: abort.xid }]
                    } else {
                        vec![]
                    });
                }
                if let Some(txn) = self.streams.get_mut(&abort.xid)
                    && let Some(stream) = txn.stream.as_mut()
                {
                    let sub = abort.subxact_xid;
                    stream.aborted.push(sub);
                    stream.failures.retain(|(s, _)| *s != sub);
                    // What this block still holds of it is dropped now; what went to
                    // the stage is left out at commit.
                    let mut subxids = std::mem::take(&mut stream.subxids).into_iter();
                    let mut kept = Vec::with_capacity(txn.changes.len());
                    for change in std::mem::take(&mut txn.changes) {
                        if let Some(s) = subxids.next().filter(|s| *s != sub) {
                            stream.subxids.push(s);
                            kept.push(change);
                        }
                    }
                    txn.changes = kept;
                }
                Ok(vec![])
            }
            PgOutputMessage::StreamCommit(commit) => {
                let mut txn =
                    self.streams
                        .remove(&commit.xid)
                        .ok_or(PgSourceError::UnknownStream {
                            what: "committed",
                            xid: commit.xid,
                        })?;
                let spilled = txn.stream.as_ref().is_some_and(|s| s.spilled);
                let mut events = if spilled {
                    txn.take_chunk()
                } else {
                    Vec::new()
                };
                let stream = txn.stream.take().unwrap_or_default();
                if let Some((_, error)) = stream.failures.into_iter().next() {
                    return Err(error);
                }
                // Its relations are committed now: checked, and the stream's from here.
                for info in stream.relations.into_values() {
                    self.relation(Arc::unwrap_or_clone(info.relation))?;
                }
                if !spilled {
                    // All of it is still here: staged like a transaction received whole.
                    let mut changes = txn.changes;
                    for change in &mut changes {
                        change.set_commit(commit.commit_lsn, commit.commit_time_us);
                    }
                    return Ok(vec![SourceEvent::Transaction(Transaction {
                        end: commit.end_lsn,
                        cursor: commit.commit_lsn,
                        changes,
                        bad_records: vec![],
                    })]);
                }
                events.push(SourceEvent::StreamCommit(StreamCommitted {
                    xid: commit.xid,
                    aborted: stream.aborted,
                    commit_position: commit.commit_lsn,
                    commit_time_us: commit.commit_time_us,
                    end: commit.end_lsn,
                    cursor: commit.commit_lsn,
                }));
                Ok(events)
            }
            // Origins, types and logical messages carry no row changes.
            PgOutputMessage::Origin(_) | PgOutputMessage::Type(_) | PgOutputMessage::Message(_) => {
                Ok(vec![])
            }
        }
    }

    /// The streamed transaction whose block is open.
    fn open_stream(&mut self) -> Option<&mut Stream> {
        self.in_stream
            .and_then(|xid| self.streams.get_mut(&xid))
            .and_then(|t| t.stream.as_mut())
    }

    /// The configured table a relation is (`None`: not configured). By OID when known:
    /// a renamed table keeps its OID, a re-created one does not. (Names are checked
    /// against the catalog by `PostgresSource::check_relation`.)
    fn table_index(&self, relation: &Relation) -> Option<usize> {
        let name = TableName {
            schema: relation.namespace.clone(),
            name: relation.name.clone(),
        };
        self.oids
            .iter()
            .position(|o| *o == Some(relation.oid))
            .or_else(|| {
                self.tables
                    .iter()
                    .zip(&self.oids)
                    .position(|(t, o)| o.is_none() && t.source == name)
            })
    }

    /// Records a relation; checks it against its configured table.
    fn relation(&mut self, relation: Relation) -> Result<(), PgSourceError> {
        let table = self.table_index(&relation);
        if let Some(t) = table.map(|i| &self.tables[i]) {
            let name = &t.source;
            for column in &t.columns {
                match relation.columns.iter().find(|c| c.name == column.name) {
                    None if self.in_stream.is_none()
                        && self
                            .current
                            .as_ref()
                            .is_some_and(|t| t.commit_lsn < self.catalog_lsn)
                        && !t.key.contains(&column.name)
                        && column.name != t.partition_by =>
                    {
                        tracing::warn!(table = %name, column = %column.name, "a transaction from before the column was added lacks it: its rows are staged without it (NULL when written); `weir resync --table` reads them again");
                    }
                    None => {
                        return Err(PgSourceError::SchemaChanged {
                            table: name.to_string(),
                            change: format!(
                                "column `{}` is not in the stream: dropped or renamed, or left out by a column list the publication was given (`ALTER PUBLICATION … SET TABLE t (columns)`: the slot then never sends it for these changes, so take a new snapshot: a new `slot` and `[stage] path`, `weir init --take-over`)",
                                column.name
                            ),
                        });
                    }
                    Some(c) => {
                        let now = pgtypes::column_type(c.type_oid, c.type_modifier);
                        // A timestamp's precision is not in its column type: compared
                        // by name (`timestamp(3) …` to `timestamp(6) …`), or the target
                        // would round what the source now keeps.
                        let precision_changed =
                            matches!(now, Some(ColumnType::Timestamp | ColumnType::TimestampTz))
                                && pgtypes::type_name(c.type_oid, c.type_modifier)
                                    != column.declared;
                        // A transaction decoded under the column's earlier, narrower
                        // type (written before an `ALTER … TYPE` that widened it, read
                        // after a restart that found the new type): its values are
                        // values of the new type too. Only one from before the catalog
                        // was read: a later one narrowed the column (PostgreSQL
                        // rounded the table's rows, which the stream never carries).
                        let before_catalog = self.in_stream.is_none()
                            && self
                                .current
                                .as_ref()
                                .is_some_and(|t| t.commit_lsn < self.catalog_lsn);
                        if !precision_changed
                            && before_catalog
                            && let Some(old) = now
                            && old != column.ty
                            && old.widens_to(column.ty)
                        {
                            tracing::warn!(
                                table = %name,
                                column = %column.name,
                                was = %pgtypes::type_name(c.type_oid, c.type_modifier),
                                now = %column.declared,
                                "changes written before the column's type was widened are staged as values of its new type"
                            );
                        } else if now != Some(column.ty) || precision_changed {
                            return Err(PgSourceError::SchemaChanged {
                                table: name.to_string(),
                                change: format!(
                                    "column `{}` is now {}, was {}",
                                    column.name,
                                    pgtypes::type_name(c.type_oid, c.type_modifier),
                                    column.declared
                                ),
                            });
                        }
                    }
                }
            }
            // The key the server identifies old rows by (under FULL, every column: the
            // stage's guard for unenforced keys applies): the configured key, as the
            // start's estate check required. A key changed since (`ADD PRIMARY KEY` on
            // other columns) would merge rows that now share the configured key.
            if relation.replica_identity != ReplicaIdentity::Full {
                let mut now: Vec<&str> = relation
                    .columns
                    .iter()
                    .filter(|c| c.is_key)
                    .map(|c| c.name.as_str())
                    .collect();
                let mut key: Vec<&str> = t.key.iter().map(String::as_str).collect();
                now.sort_unstable();
                key.sort_unstable();
                if now != key {
                    return Err(PgSourceError::KeyChanged {
                        table: name.to_string(),
                        now: now.join(", "),
                        key: t.key.join(", "),
                    });
                }
            }
            {
                // Columns neither the relation last seen nor, for the first one of this
                // stream, the catalog read at the start had.
                let known = |name: &str| match self.relations.get(&relation.oid) {
                    Some(previous) => previous.relation.columns.iter().any(|p| p.name == name),
                    None => t.columns.iter().any(|c| c.name == name),
                };
                let added: Vec<&str> = relation
                    .columns
                    .iter()
                    .filter(|c| !known(&c.name))
                    .map(|c| c.name.as_str())
                    .collect();
                if !added.is_empty() {
                    tracing::warn!(table = %name, columns = %added.join(", "), "source table gained columns; they are staged, and written once the target has them. Rows staged before have no value for them (NULL when written, whatever the column's default): `weir resync --table` the table to read them again");
                }
            }
        }
        self.relations.insert(
            relation.oid,
            RelationInfo {
                table,
                relation: Arc::new(relation),
            },
        );
        Ok(())
    }

    /// The configured table of a relation (`None`: not configured) and the relation.
    fn table_of(&self, oid: u32) -> Result<Option<(usize, Arc<Relation>)>, PgSourceError> {
        let own = self
            .in_stream
            .and_then(|xid| self.streams.get(&xid))
            .and_then(|t| t.stream.as_ref())
            .and_then(|s| s.relations.get(&oid));
        let info = own
            .or_else(|| self.relations.get(&oid))
            .ok_or(PgSourceError::UnknownRelation { oid })?;
        Ok(info.table.map(|i| (i, Arc::clone(&info.relation))))
    }

    /// Adds `changes` to the open transaction, or to the open streamed block's
    /// transaction as (sub)transaction `subxid`'s, as they are (`what` names them in the
    /// error if none is open). Returns what a full chunk hands out.
    pub(super) fn push_changes(
        &mut self,
        changes: Vec<StageChange>,
        subxid: Option<u32>,
        what: &'static str,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        let txn = open_transaction(&mut self.current, &mut self.streams, self.in_stream, what)?;
        if let (Some(subxid), Some(stream)) = (subxid, txn.stream.as_mut()) {
            stream.subxid = subxid;
        }
        txn.extend(changes);
        Ok(txn.chunk_if_full(self.chunk_changes_max))
    }

    /// The top-level xid of the streamed block open now, if one is.
    pub(super) fn streamed_xid(&self) -> Option<u32> {
        self.in_stream
    }

    /// Adds rows read by a snapshot chunk to the open transaction (the one of the high
    /// watermark), as reads, and the source state to stage with them.
    pub(super) fn push_snapshot(
        &mut self,
        table: usize,
        rows: Vec<Row>,
        state: Vec<u8>,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        let mut events = Vec::new();
        for row in rows {
            events.extend(self.push(table, Op::Read, None, Some(row))?);
        }
        let txn = self
            .current
            .as_mut()
            .ok_or(PgSourceError::OutsideTransaction {
                what: "a snapshot chunk",
            })?;
        txn.changes.push(StageChange::SourceState(state));
        Ok(events)
    }

    /// Stages the source's resume state `state` with the transaction being assembled.
    pub(super) fn push_state(&mut self, state: Vec<u8>) -> Result<(), PgSourceError> {
        let txn = self
            .current
            .as_mut()
            .ok_or(PgSourceError::OutsideTransaction {
                what: "the snapshot's progress",
            })?;
        txn.changes.push(StageChange::SourceState(state));
        Ok(())
    }

    /// An update whose `unchanged` columns (not in `after`) the stage fills from the
    /// row's previous image when it applies it; see [`StageChange::UpsertUnchanged`].
    fn push_update(
        &mut self,
        table: usize,
        before: Option<Row>,
        after: Row,
        unchanged: Vec<String>,
        skip_if_absent: bool,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        if unchanged.is_empty() {
            return self.push(table, Op::Update, before, Some(after));
        }
        let table = &self.tables[table];
        // An old image from the replica identity, without a value for a key column:
        // under a replica identity that no longer holds the key.
        if let Some(column) = before.as_ref().and_then(|row| {
            table.key.iter().find(|k| {
                row.iter()
                    .find(|(c, _)| c == *k)
                    .is_none_or(|(_, v)| v.is_null())
            })
        }) {
            return Err(PgSourceError::BadChange {
                table: table.source.to_string(),
                reason: format!(
                    "the old row of an update or delete has no value for key column `{column}`: it holds only the columns of the table's replica identity, which no longer include the configured key (ALTER TABLE … REPLICA IDENTITY since `weir init`). This change cannot be staged, and nothing past it was acknowledged; the changes already in the WAL keep the identity they were written with. Set the replica identity back (or to FULL) for later changes, and start this table on a new stage and slot (new `slot` and `[stage] path`, then `weir init --take-over`: a fresh snapshot)"
                ),
            });
        }
        let txn = open_transaction(
            &mut self.current,
            &mut self.streams,
            self.in_stream,
            "a row change",
        )?;
        let changes = keyed_changes(
            table,
            Op::Update,
            before,
            Some(after),
            txn.commit_lsn,
            Some(txn.commit_time_us),
        )
        .map_err(|reason| PgSourceError::BadChange {
            table: table.source.to_string(),
            reason,
        })?;
        // A changed key may be one the snapshot has passed: skipping could lose the row,
        // so an unknown value stops the source instead (`with_unchanged`).
        let changes = with_unchanged(changes, unchanged, skip_if_absent).map_err(|reason| {
            PgSourceError::BadChange {
                table: table.source.to_string(),
                reason,
            }
        })?;
        txn.extend(changes);
        Ok(txn.chunk_if_full(self.chunk_changes_max))
    }

    fn push(
        &mut self,
        table: usize,
        op: Op,
        before: Option<Row>,
        after: Option<Row>,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        let table = &self.tables[table];
        let txn = open_transaction(
            &mut self.current,
            &mut self.streams,
            self.in_stream,
            "a row change",
        )?;
        let changes = keyed_changes(
            table,
            op,
            before,
            after,
            txn.commit_lsn,
            Some(txn.commit_time_us),
        )
        .map_err(|reason| PgSourceError::BadChange {
            table: table.source.to_string(),
            reason,
        })?;
        txn.extend(changes);
        Ok(txn.chunk_if_full(self.chunk_changes_max))
    }
}

/// Where the previous version of an updated row is, besides the stream, for the
/// values an update leaves out (unchanged TOAST values).
#[derive(Debug, Clone, PartialEq)]
pub enum Unstaged {
    /// In the stage (or in changes before this one that the stage will have applied):
    /// no snapshot is running, or the snapshot has read the row's whole table.
    Staged,
    /// The snapshot chunk in flight read the row, and the stream has not changed it
    /// since the chunk's low watermark: this is its version.
    ChunkRow(Row),
    /// The initial snapshot runs and may not have read the row yet: if the stage has
    /// no version of it, the snapshot's later read of the row supersedes this update.
    NotRead,
}
