//! PostgreSQL logical replication as a change source: committed transactions of
//! pgoutput messages become stage input.
//!
//! [`Assembler`] is the transport-free half: it receives decoded pgoutput messages of
//! protocol version 1 (whole committed transactions, in commit order) and turns them
//! into [`SourceEvent`]s. It keeps the relations it has seen, maps tuple values to
//! typed [`Value`]s by their column types, fills unchanged TOAST values from the row
//! image already staged for the key, and detects schema changes.
//!
//! Guarantees:
//! * a transaction's changes come out whole at its Commit, with the Commit's end LSN as
//!   the position; a transaction with more than `chunk_changes_max` changes comes out
//!   as chunks first (the stage's pending area), so no transaction is held whole;
//! * an unchanged TOAST value (`u`) is never turned into NULL: it is taken from the
//!   staged image, and a row missing there is an error naming table and column;
//! * a relation whose columns differ from the configured table's (a dropped column, a
//!   changed type) stops the source with an error naming both; an added column is
//!   staged (it reaches the target once the target has it);
//! * relations are matched to configured tables by OID (resolved at start), not by
//!   name: a renamed table (`RENAME`, `SET SCHEMA`), a table dropped and created again,
//!   or a partition of a configured table sent under its own name stops the source
//!   with an error naming it and the fix, before any of its changes is taken
//!   ([`PostgresSource`]'s `check_relation`); nothing past it is acknowledged;
//! * before streaming, [`check_estate`] refuses a publication or a key that would hide
//!   changes (operations not published, a partitioned table not published through its
//!   root, a row filter, a column list, a key that is not the replica identity);
//! * a change of any other table is passed over (the publication may hold more tables
//!   than Weir writes); a TRUNCATE of a configured table is an error
//!   (`on_truncate = "fail"`, the default) or removes all its staged rows (`"apply"`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pgoutput::{
    DecodeError, Decoder, OldTuple, PgOutputMessage, Relation, RelationColumn, TupleValue,
};
use super::pgtypes;
use super::replication::{
    ReplicationClient, ReplicationError, ReplicationEvent, ReplicationStream, format_lsn,
};
use super::{
    ChangeSource, Checkpoint, Op, Row, SourceError, SourceEvent, Transaction, keyed_changes,
};
use crate::config::{Dsn, OnTruncate, TableConfig, TableName, quote_ident};
use crate::stage::{Stage, StageChange, StageError, StagedRow};
use crate::value::Value;

/// How long the source waits for the server before it reports `Idle`, so the engine
/// can stage and write what it has.
const IDLE_AFTER_MS: u64 = 200;
/// Standby status updates go out at least this often, so the server's view of the
/// acknowledged position (and so the WAL it keeps) stays current on an idle stream.
const STATUS_INTERVAL_MS: u64 = 10_000;
/// The prefix of the heartbeat messages of an idle stream.
const HEARTBEAT_PREFIX: &str = "weir.heartbeat";
/// The prefix of the logical message `run --once` emits to find the end of what is
/// available now.
const DRAIN_PREFIX: &str = "weir.drain";

/// Errors of the PostgreSQL source.
#[derive(Debug, thiserror::Error)]
pub enum PgSourceError {
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error(
        "{table}: the source table changed: {change}. Nothing past this transaction was acknowledged; alter the target to match and restart, or take a new snapshot"
    )]
    SchemaChanged { table: String, change: String },
    #[error("{table}: {reason}")]
    BadChange { table: String, reason: String },
    #[error("{table}: column `{column}`")]
    Value {
        table: String,
        column: String,
        #[source]
        source: pgtypes::TypeError,
    },
    #[error(
        "{table}: unchanged TOAST value of column `{column}` for a row that is not staged; set REPLICA IDENTITY FULL on the table or take a new snapshot"
    )]
    ToastWithoutRow { table: String, column: String },
    #[error(
        "TRUNCATE of {tables}: on_truncate = \"fail\" for it, so the source stops and nothing past the TRUNCATE is acknowledged; set on_truncate = \"apply\" on the table to remove its rows from the stage and the target"
    )]
    Truncate { tables: String },
    #[error(
        "a change arrived outside a transaction ({what}): the replication stream is out of order"
    )]
    OutsideTransaction { what: &'static str },
    #[error("change for relation {oid}, which no Relation message described")]
    UnknownRelation { oid: u32 },
    #[error("streamed in-progress transactions (protocol version 2) are not requested by Weir")]
    Streaming,
    #[error(
        "replication slot `{slot}` does not exist: run `weir init`, which creates it and takes a fresh snapshot; Weir never re-creates a slot silently, since changes made meanwhile are lost"
    )]
    SlotMissing { slot: String },
    #[error(
        "replication slot `{slot}` was invalidated by the server (wal_status = lost: it fell behind max_slot_wal_keep_size); changes are lost: drop the slot and run `weir init` for a fresh snapshot"
    )]
    SlotInvalidated { slot: String },
    #[error(
        "replication slot `{slot}` has confirmed the feed up to {confirmed}, past this stage's position {position}: the changes in between were acknowledged by some other stage (an older checkpoint imported with `weir checkpoint import`, the slot dropped and created again, or another engine using this slot) and the slot cannot send them again; import a checkpoint of this feed at or past {confirmed}, or take a fresh snapshot: point `[stage] path` at a new folder and run `weir init` and `weir run`"
    )]
    SlotAhead {
        slot: String,
        confirmed: String,
        position: String,
    },
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error("a stage task failed")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("undecodable pgoutput message")]
    Decode(#[from] DecodeError),
    #[error("source table {table} {problem}")]
    SourceTable { table: String, problem: String },
    /// The source estate (publication, replica identity, key) would hide changes from
    /// Weir: refused before anything is streamed, with the statements that fix it.
    #[error("{subject}: {problems}")]
    Estate { subject: String, problems: String },
    #[error(
        "source table {configured} (relation OID {oid}) is now {now} (ALTER TABLE … RENAME or SET SCHEMA): nothing past this change was acknowledged; set `source = \"{now}\"` for this table in the config (the stage carries its staged rows over to the new name) and run again"
    )]
    Renamed {
        configured: String,
        oid: u32,
        now: String,
    },
    #[error(
        "source table {table} is now relation OID {oid}, not OID {expected} which this feed streams: it was dropped and created again, and its changes in between are lost to this stage. Nothing past this change was acknowledged. Take a new snapshot: point `[stage] path` at a new folder, then run `weir init` and `weir run`"
    )]
    Recreated {
        table: String,
        oid: u32,
        expected: u32,
    },
    #[error(
        "{partition} (relation OID {oid}) is a partition of the configured table {root}, and publication `{publication}` sends its changes under the partition's own name: nothing past this change was acknowledged; run `ALTER PUBLICATION {quoted} SET (publish_via_partition_root = true);` on the source and run again"
    )]
    LeafPartition {
        partition: String,
        oid: u32,
        root: String,
        publication: String,
        quoted: String,
    },
    #[error("source query failed: {what}")]
    Query {
        what: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("cannot connect to the source PostgreSQL")]
    Connect(#[source] crate::pgconn::ConnectError),
}

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
}

/// Turns pgoutput messages into stage input. See the module docs.
#[derive(Debug)]
pub struct Assembler {
    tables: Vec<TableConfig>,
    /// Each configured table's relation OID, resolved at start (`None`: matched by
    /// name). A relation is a configured table by its OID, whatever its name now.
    oids: Vec<Option<u32>>,
    relations: HashMap<u32, RelationInfo>,
    current: Option<InProgress>,
    chunk_changes_max: usize,
}

impl Assembler {
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
            chunk_changes_max: chunk_changes_max.max(1),
        }
    }

    /// Whether a transaction is open (received Begin, not yet Commit).
    pub fn in_transaction(&self) -> bool {
        self.current.is_some()
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
        match message {
            PgOutputMessage::Begin(begin) => {
                self.current = Some(InProgress {
                    commit_lsn: begin.final_lsn,
                    commit_time_us: begin.commit_time_us,
                    changes: Vec::new(),
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
                self.relation(relation)?;
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
                if unchanged
                    .iter()
                    .any(|c| table.key.contains(c) || *c == table.partition_by)
                {
                    // A key or the partition column held out of line: they are needed
                    // now, to key and place the change; only the staged image has them.
                    let lookup = |key: &[u8]| staged(&source, key);
                    let after = row(table, &relation.columns, &update.new, Some(&lookup))?;
                    return self.push(t, Op::Update, before, Some(after));
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
                let txn = self
                    .current
                    .as_mut()
                    .ok_or(PgSourceError::OutsideTransaction { what: "a TRUNCATE" })?;
                for table in applied {
                    tracing::warn!(table = %table, "source table truncated: every staged row of it is removed");
                    txn.changes.push(StageChange::Truncate { table });
                }
                Ok(vec![])
            }
            PgOutputMessage::StreamStart(_)
            | PgOutputMessage::StreamStop
            | PgOutputMessage::StreamCommit(_)
            | PgOutputMessage::StreamAbort(_) => Err(PgSourceError::Streaming),
            // Origins, types and logical messages carry no row changes.
            PgOutputMessage::Origin(_) | PgOutputMessage::Type(_) | PgOutputMessage::Message(_) => {
                Ok(vec![])
            }
        }
    }

    /// Records a relation; checks it against its configured table.
    fn relation(&mut self, relation: Relation) -> Result<(), PgSourceError> {
        let name = TableName {
            schema: relation.namespace.clone(),
            name: relation.name.clone(),
        };
        // By OID when known: a renamed table keeps its OID, a re-created one does not.
        // (Names are checked against the catalog by `PostgresSource::check_relation`.)
        let table = self
            .oids
            .iter()
            .position(|o| *o == Some(relation.oid))
            .or_else(|| {
                self.tables
                    .iter()
                    .zip(&self.oids)
                    .position(|(t, o)| o.is_none() && t.source == name)
            });
        if let Some(t) = table.map(|i| &self.tables[i]) {
            let name = &t.source;
            for column in &t.columns {
                match relation.columns.iter().find(|c| c.name == column.name) {
                    None => {
                        return Err(PgSourceError::SchemaChanged {
                            table: name.to_string(),
                            change: format!("column `{}` was dropped or renamed", column.name),
                        });
                    }
                    Some(c) => {
                        let now = pgtypes::column_type(c.type_oid, c.type_modifier);
                        if now != Some(column.ty) {
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
            if let Some(previous) = self.relations.get(&relation.oid) {
                let added: Vec<&str> = relation
                    .columns
                    .iter()
                    .filter(|c| !previous.relation.columns.iter().any(|p| p.name == c.name))
                    .map(|c| c.name.as_str())
                    .collect();
                if !added.is_empty() {
                    tracing::warn!(table = %name, columns = %added.join(", "), "source table gained columns; they are staged, and written once the target has them");
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
        let info = self
            .relations
            .get(&oid)
            .ok_or(PgSourceError::UnknownRelation { oid })?;
        Ok(info.table.map(|i| (i, Arc::clone(&info.relation))))
    }

    /// Adds rows read by a snapshot chunk to the open transaction (the one of the high
    /// watermark), as reads, and the source state to stage with them.
    fn push_snapshot(
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
        let txn = self
            .current
            .as_mut()
            .ok_or(PgSourceError::OutsideTransaction {
                what: "a row change",
            })?;
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
        let mut previous_key = None;
        let mut upsert = None;
        for change in changes {
            match change {
                StageChange::Delete { key, .. } => previous_key = Some(key),
                StageChange::Upsert {
                    table,
                    key,
                    partition,
                    row,
                } => upsert = Some((table, key, partition, row)),
                _ => {}
            }
        }
        let (name, key, partition, row) = upsert.ok_or_else(|| PgSourceError::BadChange {
            table: table.source.to_string(),
            reason: "an update without its new row".into(),
        })?;
        // The new key's row first: a changed key's unchanged values are the old key's,
        // whose row the delete after it removes.
        txn.changes.push(StageChange::UpsertUnchanged {
            table: name.clone(),
            previous_key: previous_key.clone().unwrap_or_else(|| key.clone()),
            key,
            partition,
            row,
            unchanged,
            // A changed key may be one the snapshot has passed: skipping could lose the
            // row, so an unknown value stops the source instead.
            skip_if_absent: skip_if_absent && previous_key.is_none(),
        });
        if let Some(key) = previous_key {
            txn.changes.push(StageChange::Delete { table: name, key });
        }
        if txn.changes.len() >= self.chunk_changes_max {
            return Ok(vec![SourceEvent::Chunk(std::mem::take(&mut txn.changes))]);
        }
        Ok(vec![])
    }

    fn push(
        &mut self,
        table: usize,
        op: Op,
        before: Option<Row>,
        after: Option<Row>,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        let table = &self.tables[table];
        let txn = self
            .current
            .as_mut()
            .ok_or(PgSourceError::OutsideTransaction {
                what: "a row change",
            })?;
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
        txn.changes.extend(changes);
        if txn.changes.len() >= self.chunk_changes_max {
            return Ok(vec![SourceEvent::Chunk(std::mem::take(&mut txn.changes))]);
        }
        Ok(vec![])
    }
}

/// Looks up the staged row of a key of the table at hand.
type KeyLookup<'a> = &'a dyn Fn(&[u8]) -> Option<StagedRow>;

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

/// The values of a tuple, and the columns whose values are unchanged TOAST values
/// (left out of the row).
fn tuple_values(
    table: &TableConfig,
    columns: &[RelationColumn],
    tuple: &[TupleValue],
) -> Result<(Row, Vec<String>), PgSourceError> {
    if columns.len() != tuple.len() {
        return Err(PgSourceError::BadChange {
            table: table.source.to_string(),
            reason: format!(
                "a tuple of {} columns for a relation of {}",
                tuple.len(),
                columns.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(columns.len());
    let mut unchanged = Vec::new();
    for (column, value) in columns.iter().zip(tuple) {
        match pgtypes::decode_tuple_value(
            &column.name,
            column.type_oid,
            column.type_modifier,
            value,
        ) {
            Ok(Some(v)) => out.push((column.name.clone(), v)),
            Ok(None) => unchanged.push(column.name.clone()),
            Err(source) => {
                return Err(PgSourceError::Value {
                    table: table.source.to_string(),
                    column: column.name.clone(),
                    source,
                });
            }
        }
    }
    Ok((out, unchanged))
}

/// Moves the `unchanged` columns that `image` has into `row`.
fn take_unchanged(row: &mut Row, unchanged: &mut Vec<String>, image: &[(String, Value)]) {
    unchanged.retain(|column| match image.iter().find(|(c, _)| c == column) {
        Some((_, value)) => {
            row.push((column.clone(), value.clone()));
            false
        }
        None => true,
    });
}

/// The encoded key of a row of `table`.
fn key_of(table: &TableConfig, row: &Row) -> Result<Vec<u8>, PgSourceError> {
    let values = table
        .key
        .iter()
        .map(|k| row.iter().find(|(c, _)| c == k).map(|(_, v)| v))
        .collect::<Option<Vec<&Value>>>()
        .ok_or_else(|| PgSourceError::BadChange {
            table: table.source.to_string(),
            reason: "a row without its key".into(),
        })?;
    crate::stage::encode_key(&values).map_err(|e| PgSourceError::BadChange {
        table: table.source.to_string(),
        reason: e.to_string(),
    })
}

/// The values of a tuple as a row. Unchanged TOAST values come from the staged image
/// of the row's key (`staged`), which only updates have.
fn row(
    table: &TableConfig,
    columns: &[RelationColumn],
    tuple: &[TupleValue],
    staged: Option<KeyLookup<'_>>,
) -> Result<Row, PgSourceError> {
    let (mut out, unchanged) = tuple_values(table, columns, tuple)?;
    if unchanged.is_empty() {
        return Ok(out);
    }
    let key = crate::stage::encode_key(
        &table
            .key
            .iter()
            .map(|k| out.iter().find(|(c, _)| c == k).map(|(_, v)| v))
            .collect::<Option<Vec<&Value>>>()
            .ok_or_else(|| PgSourceError::BadChange {
                table: table.source.to_string(),
                reason: "a key column is an unchanged TOAST value".into(),
            })?,
    )
    .map_err(|e| PgSourceError::BadChange {
        table: table.source.to_string(),
        reason: e.to_string(),
    })?;
    let image = staged.and_then(|lookup| lookup(&key));
    for column in unchanged {
        let value = image
            .as_ref()
            .and_then(|r| r.values.iter().find(|(c, _)| *c == column))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| PgSourceError::ToastWithoutRow {
                table: table.source.to_string(),
                column: column.clone(),
            })?;
        out.push((column, value));
    }
    Ok(out)
}

/// The key columns of an old tuple (`K`: only they are set; `O`: the whole row).
fn key_image(
    table: &TableConfig,
    columns: &[RelationColumn],
    old: &OldTuple,
) -> Result<Row, PgSourceError> {
    let tuple = match old {
        OldTuple::Key(t) | OldTuple::Full(t) => t,
    };
    let full = row(table, columns, tuple, None);
    // An old tuple may hold unchanged TOAST values outside the key; only the key matters.
    let mut out = Vec::with_capacity(table.key.len());
    match full {
        Ok(r) => {
            for (c, v) in r {
                if table.key.contains(&c) {
                    out.push((c, v));
                }
            }
            Ok(out)
        }
        Err(PgSourceError::ToastWithoutRow { .. }) => Ok(out),
        Err(e) => Err(e),
    }
}

/// What [`PostgresSource::open`] needs besides the connection.
#[derive(Debug, Clone)]
pub struct PostgresSourceOptions {
    pub slot: String,
    pub publication: String,
    /// Drain what is committed now, then end (`run --once`).
    pub once: bool,
    pub chunk_changes_max: usize,
    /// Rows per snapshot chunk (each read between a low and a high watermark).
    pub snapshot_chunk_rows: usize,
    /// After this long without a change, a heartbeat goes into the source's WAL.
    pub heartbeat_interval_ms: u64,
}

/// A PostgreSQL logical replication slot as a [`ChangeSource`]. The flush position it
/// reports to the server is the last position the engine acknowledged, i.e. the
/// stage's synced position: the slot keeps every change not yet staged. Only when the
/// stream is caught up (every transaction handed out is acknowledged, none is being
/// assembled or waiting, no snapshot runs) does it report the position the server says
/// it has sent: the WAL up to there holds nothing more for Weir, and a server shutting
/// down waits for exactly that confirmation.
pub struct PostgresSource {
    slot: String,
    stream: ReplicationStream,
    decoder: Decoder,
    assembler: Assembler,
    stage: Arc<Stage>,
    ready: VecDeque<SourceEvent>,
    /// The last position acknowledged (synced in the stage).
    acknowledged: u64,
    /// The end of the last transaction handed to the engine.
    emitted: u64,
    /// The furthest WAL position the server reported.
    received: u64,
    /// `once`: the LSN of the drain message; a commit past it ends the feed.
    drain_after: Option<u64>,
    drained: bool,
    last_status: Instant,
    /// The initial snapshot, while it runs.
    snapshot: Option<Snapshot>,
    dsn: Dsn,
    heartbeat_interval: Duration,
    /// When the stream last carried data (or a heartbeat was written).
    last_activity: Instant,
    /// A connection for heartbeats, opened when the first one is due.
    heartbeat_client: Option<tokio_postgres::Client>,
    /// Each configured table's relation OID (as the assembler's tables).
    oids: Vec<u32>,
    publication: String,
    /// A connection for catalog look-ups of the relations the stream describes.
    catalog: tokio_postgres::Client,
    /// Partitions of configured tables the stream described (OID: name and the
    /// table's index): a change under one of them is refused.
    leaves: HashMap<u32, (String, usize)>,
}

impl std::fmt::Debug for PostgresSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSource")
            .field("slot", &self.slot)
            .field("acknowledged", &self.acknowledged)
            .finish_non_exhaustive()
    }
}

impl PostgresSource {
    /// Connects, checks the slot, and starts streaming after `checkpoint`.
    pub async fn open(
        dsn: &Dsn,
        options: &PostgresSourceOptions,
        tables: Vec<TableConfig>,
        stage: Arc<Stage>,
        checkpoint: Option<Checkpoint>,
    ) -> Result<PostgresSource, PgSourceError> {
        let mut client = ReplicationClient::connect(dsn).await?;
        // E'…' with quotes and backslashes doubled: right whatever
        // `standard_conforming_strings` is (the name is validated at config load too).
        let slot_literal = crate::config::quote_literal(&options.slot).ok_or_else(|| {
            PgSourceError::SourceTable {
                table: options.slot.clone(),
                problem: "the slot name holds a NUL character".into(),
            }
        })?;
        let rows = client
            .simple_query(&format!("SELECT coalesce(wal_status, 'unknown') FROM pg_replication_slots WHERE slot_name = {slot_literal}"))
            .await?;
        match rows
            .first()
            .and_then(|r| r.first())
            .cloned()
            .flatten()
            .as_deref()
        {
            None => {
                return Err(PgSourceError::SlotMissing {
                    slot: options.slot.clone(),
                });
            }
            Some("lost") => {
                return Err(PgSourceError::SlotInvalidated {
                    slot: options.slot.clone(),
                });
            }
            Some(_) => {}
        }
        // The estate, before anything is streamed: a publication or a key that would
        // hide changes is refused; each table's relation OID is what the stream is
        // matched by.
        let catalog = connect(dsn).await?;
        let estate = check_estate(&catalog, &options.publication, &tables).await?;
        let snapshot = Snapshot::resume(dsn, &tables, &stage, options.snapshot_chunk_rows).await?;
        let drain_after = if options.once {
            Some(emit_drain_message(dsn).await?)
        } else {
            None
        };
        let start = checkpoint.map_or(0, |c| c.position);
        // Values are quoted as literals by `start_logical`; the publication list is
        // parsed by pgoutput as identifiers.
        let publication = quote_ident(&options.publication);
        let stream = client
            .start_logical(
                &options.slot,
                start,
                &[
                    ("proto_version", "1"),
                    ("publication_names", publication.as_str()),
                    ("messages", "true"),
                ],
            )
            .await?;
        let start = hold_slot_to_stage(dsn, &options.slot, &stage, checkpoint).await?;
        tracing::info!(slot = %options.slot, start = %format_lsn(start), "streaming from the replication slot");
        Ok(PostgresSource {
            slot: options.slot.clone(),
            stream,
            decoder: Decoder::new(),
            assembler: Assembler::with_oids(
                tables,
                estate.oids.iter().copied().map(Some).collect(),
                options.chunk_changes_max,
            ),
            oids: estate.oids,
            publication: options.publication.clone(),
            catalog,
            leaves: HashMap::new(),
            stage,
            ready: VecDeque::new(),
            acknowledged: start,
            emitted: start,
            received: start,
            drain_after,
            drained: false,
            last_status: Instant::now(),
            snapshot,
            dsn: dsn.clone(),
            heartbeat_interval: Duration::from_millis(options.heartbeat_interval_ms),
            last_activity: Instant::now(),
            heartbeat_client: None,
        })
    }

    async fn send_status(&mut self) -> Result<(), PgSourceError> {
        let written = self.received.max(self.acknowledged);
        let caught_up = self.ready.is_empty()
            && !self.assembler.in_transaction()
            && self.snapshot.is_none()
            && self.emitted <= self.acknowledged;
        if caught_up && written > self.acknowledged {
            // Everything received is staged, and the WAL up to `written` holds nothing
            // more of this feed: confirm it, so the slot does not hold back WAL other
            // databases write. The stage's position moves there first (synced): the
            // slot never confirms past the stage, which `open` relies on.
            let stage = Arc::clone(&self.stage);
            tokio::task::spawn_blocking(move || stage.advance_position(written)).await??;
            tracing::debug!(slot = %self.slot, position = %format_lsn(written), "position advanced past WAL without changes of this feed");
            self.acknowledged = written;
        }
        let flushed = self.acknowledged;
        self.stream
            .send_status(written, flushed, flushed, false)
            .await?;
        self.last_status = Instant::now();
        Ok(())
    }

    /// Writes a heartbeat into the source's WAL: a transactional logical message of our
    /// database, which the stream then carries. Staging it moves the position, so the
    /// slot stops holding back WAL that other databases wrote meanwhile.
    async fn heartbeat(&mut self) -> Result<(), PgSourceError> {
        self.last_activity = Instant::now();
        if self.heartbeat_client.as_ref().is_none_or(|c| c.is_closed()) {
            let client = connect(&self.dsn).await?;
            client
                .batch_execute("SET synchronous_commit = on")
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "prepare heartbeats",
                    source,
                })?;
            self.heartbeat_client = Some(client);
        }
        if let Some(client) = &self.heartbeat_client {
            client
                .execute(
                    "SELECT pg_logical_emit_message(true, $1, '')",
                    &[&HEARTBEAT_PREFIX],
                )
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "write a heartbeat",
                    source,
                })?;
            tracing::debug!(slot = %self.slot, "heartbeat written");
        }
        Ok(())
    }

    /// Checks a relation the stream describes against the configured tables, by OID
    /// and the catalog, before any of its changes is taken: no change is acknowledged
    /// that no configured table took.
    /// * a configured table's OID under another name: renamed (or moved to another
    ///   schema). If the catalog's name now is the configured one, the stream is
    ///   replaying changes from before a rename the config already follows: taken.
    ///   Otherwise the config names the table by its old name: stopped;
    /// * another OID under a configured table's name: dropped and created again;
    ///   stopped (the changes in between are lost to this stage);
    /// * a partition of a configured table: noted; a change under its OID (the
    ///   publication does not publish it through the root) stops ([`Self::check_change`]);
    /// * any other relation: a table the publication holds and Weir does not write;
    ///   passed over.
    async fn check_relation(&mut self, relation: &Relation) -> Result<(), PgSourceError> {
        let name = TableName {
            schema: relation.namespace.clone(),
            name: relation.name.clone(),
        };
        let query = |what: &'static str| move |source| PgSourceError::Query { what, source };
        let tables = &self.assembler.tables;
        if let Some(t) = self.oids.iter().position(|o| *o == relation.oid) {
            if tables[t].source == name {
                return Ok(());
            }
            let now: Option<String> = self
                .catalog
                .query_opt(
                    "SELECT n.nspname::text || '.' || c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1",
                    &[&relation.oid],
                )
                .await
                .map_err(query("look up a renamed relation"))?
                .map(|r| r.get(0));
            if now.as_deref() == Some(tables[t].source.to_string().as_str()) {
                tracing::info!(table = %tables[t].source, former = %name, oid = relation.oid, "changes from before the table's rename");
                return Ok(());
            }
            return Err(PgSourceError::Renamed {
                configured: tables[t].source.to_string(),
                oid: relation.oid,
                now: now.unwrap_or_else(|| name.to_string()),
            });
        }
        if let Some(t) = tables.iter().position(|t| t.source == name) {
            return Err(PgSourceError::Recreated {
                table: name.to_string(),
                oid: relation.oid,
                expected: self.oids[t],
            });
        }
        let root: Option<u32> = self
            .catalog
            .query_opt(
                "SELECT pg_partition_root(c.oid)::oid FROM pg_class c WHERE c.oid = $1",
                &[&relation.oid],
            )
            .await
            .map_err(query("look up a partition's root"))?
            .and_then(|r| r.get(0));
        if let Some(t) = root.and_then(|root| self.oids.iter().position(|o| *o == root)) {
            // pgoutput describes the partition too when it publishes through the root
            // (the root's Relation message comes first): only a change under the
            // partition's own OID means the publication does not map it to its root.
            self.leaves.insert(relation.oid, (name.to_string(), t));
        }
        Ok(())
    }

    /// Stops at a change that arrives under a partition of a configured table rather
    /// than the table (the publication does not publish it through its root).
    fn check_change(&self, message: &PgOutputMessage) -> Result<(), PgSourceError> {
        let oids: &[u32] = match message {
            PgOutputMessage::Insert(m) => std::slice::from_ref(&m.relation_oid),
            PgOutputMessage::Update(m) => std::slice::from_ref(&m.relation_oid),
            PgOutputMessage::Delete(m) => std::slice::from_ref(&m.relation_oid),
            PgOutputMessage::Truncate(m) => &m.relation_oids,
            _ => &[],
        };
        for oid in oids {
            if let Some((partition, t)) = self.leaves.get(oid) {
                return Err(PgSourceError::LeafPartition {
                    partition: partition.clone(),
                    oid: *oid,
                    root: self.assembler.tables[*t].source.to_string(),
                    publication: self.publication.clone(),
                    quoted: quote_ident(&self.publication),
                });
            }
        }
        Ok(())
    }

    async fn receive(&mut self) -> Result<Option<SourceEvent>, PgSourceError> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                if let SourceEvent::Transaction(txn) = &event {
                    self.emitted = self.emitted.max(txn.end);
                }
                return Ok(Some(event));
            }
            if self.drained && self.snapshot.is_none() && !self.assembler.in_transaction() {
                return Ok(Some(SourceEvent::End));
            }
            if let Some(snapshot) = self.snapshot.as_mut()
                && snapshot.in_flight.is_none()
            {
                if !snapshot.start_chunk(&self.assembler.tables).await? {
                    tracing::info!(slot = %self.slot, rows = snapshot.rows_done, "initial snapshot complete");
                    self.snapshot = None;
                }
                continue;
            }
            if self.last_status.elapsed() >= Duration::from_millis(STATUS_INTERVAL_MS) {
                self.send_status().await?;
            }
            let next =
                tokio::time::timeout(Duration::from_millis(IDLE_AFTER_MS), self.stream.next())
                    .await;
            let Ok(next) = next else {
                if !self.assembler.in_transaction()
                    && self.last_activity.elapsed() >= self.heartbeat_interval
                {
                    self.heartbeat().await?;
                }
                return Ok(Some(SourceEvent::Idle));
            };
            match next? {
                None => return Err(PgSourceError::Replication(ReplicationError::Closed)),
                Some(ReplicationEvent::Keepalive {
                    wal_end,
                    reply_requested,
                    ..
                }) => {
                    self.received = self.received.max(wal_end);
                    if reply_requested {
                        self.send_status().await?;
                    }
                    // A keepalive says the server has nothing more right now: the engine
                    // stages (and acknowledges) what it holds. Without this, keepalives
                    // coming faster than the idle timeout (a server shutting down asks
                    // for a reply again each time it gets one) would starve the engine
                    // of the Idle that makes it acknowledge, and the shutdown would wait.
                    return Ok(Some(SourceEvent::Idle));
                }
                Some(ReplicationEvent::XLogData {
                    wal_start, data, ..
                }) => {
                    self.received = self.received.max(wal_start);
                    self.last_activity = Instant::now();
                    let message = self.decoder.decode(&data)?;
                    if let (PgOutputMessage::Commit(commit), Some(mark)) =
                        (&message, self.drain_after)
                        && commit.end_lsn > mark
                    {
                        self.drained = true;
                    }
                    if let PgOutputMessage::Relation(relation) = &message {
                        self.check_relation(relation).await?;
                    }
                    self.check_change(&message)?;
                    let watermark = match (&message, self.snapshot.as_mut()) {
                        (PgOutputMessage::Message(m), Some(snapshot))
                            if m.prefix == WATERMARK_PREFIX =>
                        {
                            snapshot.watermark(m.lsn)
                        }
                        _ => Watermark::None,
                    };
                    let stage = Arc::clone(&self.stage);
                    let lookup =
                        move |table: &str, key: &[u8]| stage.get_row(table, key).ok().flatten();
                    let snapshot = &self.snapshot;
                    let unstaged = |table: usize, name: &str, key: &[u8]| match snapshot {
                        None => Unstaged::Staged,
                        Some(snapshot) => snapshot.unstaged(table, name, key),
                    };
                    let events = self.assembler.handle(message, &lookup, &unstaged)?;
                    if let Some(snapshot) = self.snapshot.as_mut() {
                        snapshot.observe(&events);
                    }
                    self.ready.extend(events);
                    if let (Watermark::High, Some(snapshot)) = (watermark, self.snapshot.as_mut()) {
                        let (table, rows, state) = snapshot.finish_chunk(&self.assembler.tables)?;
                        crate::failpoint!("snapshot-chunk");
                        let events = self.assembler.push_snapshot(table, rows, state)?;
                        self.ready.extend(events);
                    }
                }
            }
        }
    }
}

/// Run once `START_REPLICATION` has succeeded: this connection now holds the slot, so
/// its `confirmed_flush_lsn` is where the stream really starts (the server resumes at
/// the later of that and the position asked for) and nobody else can move it. (Read
/// before the start, it could still move: a dying walsender of a killed engine applies
/// the last acknowledgement it received.) Returns the position the stream starts after.
///
/// A stage with a position holds the slot to it: this stage never lets the slot confirm
/// past its position (`send_status`), so a slot that is ahead was moved by something
/// else and what lies between is lost to this stage; refuse rather than skip it. A
/// stage with nothing staged starts where the slot is (its snapshot covers what came
/// before), recorded first, so the check has a position from the first
/// acknowledgement on.
async fn hold_slot_to_stage(
    dsn: &Dsn,
    slot: &str,
    stage: &Arc<Stage>,
    checkpoint: Option<Checkpoint>,
) -> Result<u64, PgSourceError> {
    let client = connect(dsn).await?;
    let confirmed: Option<String> = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the slot's confirmed position",
            source,
        })?
        .and_then(|row| row.get(0));
    let Some(confirmed) = confirmed.as_deref().and_then(super::replication::parse_lsn) else {
        return Ok(checkpoint.map_or(0, |c| c.position));
    };
    match checkpoint {
        None => {
            let stage = Arc::clone(stage);
            tokio::task::spawn_blocking(move || stage.advance_position(confirmed)).await??;
            Ok(confirmed)
        }
        Some(checkpoint) if confirmed > checkpoint.position => {
            if stage.position_covers_acknowledgements()? {
                return Err(PgSourceError::SlotAhead {
                    slot: slot.to_owned(),
                    confirmed: format_lsn(confirmed),
                    position: format_lsn(checkpoint.position),
                });
            }
            tracing::info!(
                slot,
                confirmed = %format_lsn(confirmed),
                position = %format_lsn(checkpoint.position),
                "the slot is past the stage's position, which a stage of an older build allows; not checked this once"
            );
            Ok(confirmed)
        }
        Some(checkpoint) => Ok(checkpoint.position),
    }
}

/// Writes a transactional logical message into the source's WAL and returns its LSN:
/// everything committed before it is "available now" for `run --once`.
async fn emit_drain_message(dsn: &Dsn) -> Result<u64, PgSourceError> {
    let (client, connection) = crate::pgconn::connect(dsn)
        .await
        .map_err(PgSourceError::Connect)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "source connection closed");
        }
    });
    // Flushed at once, so the walsender sends it without waiting for the WAL writer.
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(|source| PgSourceError::Query {
            what: "prepare the drain mark",
            source,
        })?;
    let row = client
        .query_one(
            "SELECT (pg_logical_emit_message(true, $1, '')::text)",
            &[&DRAIN_PREFIX],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "emit the drain mark",
            source,
        })?;
    let lsn: String = row.get(0);
    super::replication::parse_lsn(&lsn).ok_or(PgSourceError::Replication(ReplicationError::Closed))
}

impl ChangeSource for PostgresSource {
    async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        match self.receive().await {
            Ok(Some(event)) => Ok(event),
            Ok(None) => Ok(SourceEvent::Idle),
            Err(e) => Err(SourceError::Postgres(Box::new(e))),
        }
    }

    async fn acknowledge(&mut self, checkpoint: Checkpoint) -> Result<(), SourceError> {
        if checkpoint.position > self.acknowledged {
            self.acknowledged = checkpoint.position;
            self.send_status()
                .await
                .map_err(|e| SourceError::Postgres(Box::new(e)))?;
        }
        Ok(())
    }
}

impl PgSourceError {
    /// Whether the user must change the source estate or the config before anything can
    /// run (exit code 2): a publication, key or replica identity that would hide changes.
    pub fn is_usage(&self) -> bool {
        matches!(self, PgSourceError::Estate { .. })
    }

    /// Whether a reconnect may cure it: the connection failed or was closed, or the
    /// server refused or ended it for a reason of its own (SQLSTATE classes 08
    /// connection exception and 57 operator intervention: a shutdown, a restart,
    /// `pg_terminate_backend`), or the slot is still held by the previous connection's
    /// walsender (55006).
    pub fn is_transient(&self) -> bool {
        let transient_code =
            |code: &str| code.starts_with("08") || code.starts_with("57") || code == "55006";
        match self {
            PgSourceError::Replication(e) => match e {
                ReplicationError::Connect { .. }
                | ReplicationError::Io { .. }
                | ReplicationError::Closed
                | ReplicationError::Unusable => true,
                ReplicationError::Tls(e) => e.transient,
                other => other.code().is_some_and(transient_code),
            },
            PgSourceError::Connect(e) => e.is_transient(),
            PgSourceError::Query { source, .. } => {
                source.is_closed()
                    || source
                        .code()
                        .map_or(source.as_db_error().is_none(), |c| transient_code(c.code()))
            }
            _ => false,
        }
    }
}

// ---- catalog and setup -------------------------------------------------------------

/// Connects to the source as an ordinary client, for catalog queries and setup.
pub async fn connect(dsn: &Dsn) -> Result<tokio_postgres::Client, PgSourceError> {
    let (client, connection) = crate::pgconn::connect(dsn)
        .await
        .map_err(PgSourceError::Connect)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "source connection closed");
        }
    });
    Ok(client)
}

/// The columns of a source table, in order, as Weir columns.
pub async fn source_columns(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<Vec<crate::config::Column>, PgSourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid, a.atttypmod \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&table.quoted()],
        )
        .await
        .map_err(|source| PgSourceError::Query { what: "read a source table's columns", source })?;
    if rows.is_empty() {
        return Err(PgSourceError::SourceTable {
            table: table.to_string(),
            problem: "does not exist (or has no columns): create it, or, if it was renamed (ALTER TABLE … RENAME or SET SCHEMA), set `source` to its new name in the config".into(),
        });
    }
    rows.iter()
        .map(|r| {
            let (name, declared, oid, modifier): (String, String, u32, i32) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            let ty =
                pgtypes::column_type(oid, modifier).ok_or_else(|| PgSourceError::SourceTable {
                    table: table.to_string(),
                    problem: format!(
                        "column `{name}` has type {declared}, which Weir cannot write yet"
                    ),
                })?;
            Ok(crate::config::Column {
                name,
                declared,
                ty,
                epoch: None,
            })
        })
        .collect()
}

/// What `weir init` set up in the source.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetupReport {
    pub created_publication: bool,
    pub created_slot: bool,
    /// Per table: `schema.table` and its replica identity, in words.
    pub identities: Vec<(String, String)>,
    /// Per table: its relation OID.
    pub oids: Vec<u32>,
}

/// A table's relation OID (`None`: it does not exist).
pub async fn table_oid(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<Option<u32>, PgSourceError> {
    Ok(client
        .query_one("SELECT to_regclass($1)::oid", &[&table.quoted()])
        .await
        .map_err(|source| PgSourceError::Query {
            what: "look up a source table",
            source,
        })?
        .get(0))
}

/// Creates the publication (with `publish_via_partition_root`, so a partitioned
/// table's changes come under its own name) and the slot when missing, then checks
/// the estate ([`check_estate`]): an existing publication a DBA made is used as it is
/// if it hides nothing, else refused with the statements that fix it. Safe to run
/// again; never re-creates a slot.
pub async fn setup(
    client: &tokio_postgres::Client,
    slot: &str,
    publication: &str,
    tables: &[TableConfig],
) -> Result<SetupReport, PgSourceError> {
    let query = |what: &'static str| move |source| PgSourceError::Query { what, source };
    let exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
            &[&publication],
        )
        .await
        .map_err(query("look up the publication"))?
        .get(0);
    let created_publication = !exists;
    if !exists {
        for table in tables {
            // A missing table is named before the publication is made.
            source_columns(client, &table.source).await?;
        }
        let list: Vec<String> = tables.iter().map(|t| t.source.quoted()).collect();
        client
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true)",
                quote_ident(publication),
                list.join(", ")
            ))
            .await
            .map_err(query("create the publication"))?;
    }
    let estate = check_estate(client, publication, tables).await?;
    let identities = tables
        .iter()
        .map(|t| t.source.to_string())
        .zip(estate.identities.iter().cloned())
        .collect();
    let slot_exists: bool = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
            &[&slot],
        )
        .await
        .map_err(query("look up the slot"))?
        .get(0);
    if !slot_exists {
        // Rows already in the tables reach the stage through the initial snapshot, which
        // `weir run` takes (and resumes) from the stage's progress.
        client
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .map_err(query("create the replication slot"))?;
    }
    Ok(SetupReport {
        created_publication,
        created_slot: !slot_exists,
        identities,
        oids: estate.oids,
    })
}

/// What [`check_estate`] found: each configured table's relation OID and replica
/// identity, in the order of the tables.
#[derive(Debug, Clone)]
pub struct Estate {
    pub oids: Vec<u32>,
    /// Per table: its replica identity, in words.
    pub identities: Vec<String>,
}

/// One relation of a configured table whose replica identity matters: the table
/// itself, or each leaf partition of a partitioned table.
struct IdentityRow {
    name: String,
    identity: String,
    primary_key: Vec<String>,
    identity_index: Vec<String>,
}

/// Checks that the source hides no change of a configured table from Weir, before
/// anything is streamed (`weir init` after it set up the publication, and every start
/// of `weir run`): each table exists; its key is its primary key, its replica identity
/// index, or it is `REPLICA IDENTITY FULL` (for a partitioned table: each leaf
/// partition's, which is what the server logs); the publication exists, publishes
/// insert, update, delete and truncate, sends a partitioned table's changes under the
/// table's own name (`publish_via_partition_root`), covers every table, with no row
/// filter and no column list that leaves out a column Weir reads. Every problem found
/// is listed, each with the statement that fixes it.
pub async fn check_estate(
    client: &tokio_postgres::Client,
    publication: &str,
    tables: &[TableConfig],
) -> Result<Estate, PgSourceError> {
    let query = |what: &'static str| move |source| PgSourceError::Query { what, source };
    let pub_quoted = quote_ident(publication);
    let mut problems: Vec<String> = Vec::new();
    let mut oids = Vec::with_capacity(tables.len());
    let mut identities = Vec::with_capacity(tables.len());
    let mut partitioned = Vec::with_capacity(tables.len());
    for table in tables {
        let row = client
            .query_opt(
                "SELECT c.oid, c.relkind::text FROM pg_class c WHERE c.oid = to_regclass($1)",
                &[&table.source.quoted()],
            )
            .await
            .map_err(query("look up a source table"))?;
        let Some(row) = row else {
            return Err(PgSourceError::SourceTable {
                table: table.source.to_string(),
                problem: "does not exist: create it, or, if it was renamed (ALTER TABLE … RENAME or SET SCHEMA), set `source` to its new name in the config".into(),
            });
        };
        let (oid, kind): (u32, String) = (row.get(0), row.get(1));
        oids.push(oid);
        partitioned.push(kind == "p");
        // The relations whose replica identity the server uses: a partitioned table's
        // leaves (a table that is not partitioned is its own only leaf).
        let rows = client
            .query(
                "WITH rels AS (SELECT relid FROM pg_partition_tree($1::text::regclass) WHERE isleaf \
                                UNION ALL SELECT $1::text::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree($1::text::regclass) WHERE isleaf)) \
                 SELECT c.oid::regclass::text, c.relreplident::text, \
                   coalesce((SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid AND i.indisprimary), '{}'), \
                   coalesce((SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid AND i.indisreplident), '{}') \
                 FROM rels JOIN pg_class c ON c.oid = rels.relid ORDER BY 1",
                &[&table.source.quoted()],
            )
            .await
            .map_err(query("read a table's replica identity"))?;
        let rows: Vec<IdentityRow> = rows
            .iter()
            .map(|r| IdentityRow {
                name: r.get(0),
                identity: r.get(1),
                primary_key: r.get(2),
                identity_index: r.get(3),
            })
            .collect();
        let mut key: Vec<String> = table.key.clone();
        key.sort();
        let mut words = None;
        for rel in &rows {
            let (what, columns) = match (rel.identity.as_str(), rel.primary_key.is_empty()) {
                ("f", _) => {
                    words.get_or_insert("full: old rows are sent whole");
                    continue;
                }
                ("d", false) => ("primary key", &rel.primary_key),
                ("i", _) => ("replica identity index", &rel.identity_index),
                _ => {
                    problems.push(format!(
                        "{} has no replica identity (REPLICA IDENTITY NOTHING, or DEFAULT without a primary key), so its updates and deletes cannot be replicated: add a primary key on ({}), or run `ALTER TABLE {} REPLICA IDENTITY FULL;`",
                        rel.name,
                        table.key.join(", "),
                        rel.name
                    ));
                    continue;
                }
            };
            if *columns != key {
                problems.push(format!(
                    "the configured key ({}) of {} is not the {what} ({}) of {}, which is what the server sends to identify an updated or deleted row: set `key = [{}]` in the config, or run `ALTER TABLE {} REPLICA IDENTITY FULL;`",
                    table.key.join(", "),
                    table.source,
                    columns.join(", "),
                    rel.name,
                    columns
                        .iter()
                        .map(|c| format!("\"{c}\""))
                        .collect::<Vec<_>>()
                        .join(", "),
                    rel.name
                ));
            } else {
                words.get_or_insert(if what == "primary key" {
                    "default (primary key): deletes and key changes resolved through the stage's keys index"
                } else {
                    "index: old rows carry the index columns"
                });
            }
        }
        identities.push(words.unwrap_or("full: old rows are sent whole").to_owned());
    }

    let publication_row = client
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(query("read the publication"))?;
    let Some(p) = publication_row else {
        return Err(PgSourceError::Estate {
            subject: format!("publication `{publication}`"),
            problems: "does not exist: run `weir init`, which creates it".into(),
        });
    };
    let (insert, update, delete, truncate, via_root): (bool, bool, bool, bool, bool) =
        (p.get(0), p.get(1), p.get(2), p.get(3), p.get(4));
    let missing: Vec<&str> = [
        ("insert", insert),
        ("update", update),
        ("delete", delete),
        ("truncate", truncate),
    ]
    .iter()
    .filter(|(_, on)| !on)
    .map(|(op, _)| *op)
    .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "publication `{publication}` does not publish {}, so those changes would never reach the target: run `ALTER PUBLICATION {pub_quoted} SET (publish = 'insert, update, delete, truncate');`",
            missing.join(", ")
        ));
    }
    let leaves_named: Vec<String> = tables
        .iter()
        .zip(&partitioned)
        .filter(|(_, p)| **p)
        .map(|(t, _)| t.source.to_string())
        .collect();
    if !via_root && !leaves_named.is_empty() {
        problems.push(format!(
            "publication `{publication}` sends the changes of partitioned table {} under each partition's name (publish_via_partition_root is off), not the table's: run `ALTER PUBLICATION {pub_quoted} SET (publish_via_partition_root = true);`",
            leaves_named.join(", ")
        ));
    }
    // Row filters and column lists exist from PostgreSQL 15 on.
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(query("read the server version"))?
        .get(0);
    let published = client
        .query(
            if version >= 150_000 {
                "SELECT schemaname::text, tablename::text, attnames::text[], rowfilter FROM pg_publication_tables WHERE pubname = $1"
            } else {
                "SELECT schemaname::text, tablename::text, NULL::text[], NULL::text FROM pg_publication_tables WHERE pubname = $1"
            },
            &[&publication],
        )
        .await
        .map_err(query("read the publication's tables"))?;
    for (table, is_partitioned) in tables.iter().zip(&partitioned) {
        if *is_partitioned && !via_root {
            continue; // reported above: its partitions are listed, not it
        }
        let entry = published.iter().find(|r| {
            r.get::<_, String>(0) == table.source.schema
                && r.get::<_, String>(1) == table.source.name
        });
        let Some(entry) = entry else {
            problems.push(format!(
                "{} is not in publication `{publication}`: run `ALTER PUBLICATION {pub_quoted} ADD TABLE {};`",
                table.source,
                table.source.quoted()
            ));
            continue;
        };
        let refresh = format!(
            "run `ALTER PUBLICATION {pub_quoted} DROP TABLE {t}; ALTER PUBLICATION {pub_quoted} ADD TABLE {t};`",
            t = table.source.quoted()
        );
        let rowfilter: Option<String> = entry.get(3);
        if rowfilter.is_some() {
            problems.push(format!(
                "publication `{publication}` has a row filter (WHERE …) on {}, so changes of rows outside it would never reach the target: {refresh}",
                table.source
            ));
        }
        let columns: Option<Vec<String>> = entry.get(2);
        if let Some(columns) = columns {
            let hidden: Vec<&str> = table
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .filter(|c| !columns.iter().any(|p| p == c))
                .collect();
            if !hidden.is_empty() {
                problems.push(format!(
                    "publication `{publication}` has a column list on {} that leaves out {}: {refresh}",
                    table.source,
                    hidden.join(", ")
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(PgSourceError::Estate {
            subject: format!(
                "the source would hide changes from Weir ({} problems)",
                problems.len()
            ),
            problems: problems.join("; "),
        });
    }
    Ok(Estate { oids, identities })
}

/// A slot's `wal_status` and how many bytes of WAL it holds back.
pub async fn slot_status(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<(String, i64)>, PgSourceError> {
    let row = client
        .query_opt(
            "SELECT coalesce(wal_status, 'unknown'), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| PgSourceError::Query { what: "read the slot's status", source })?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

// ---- initial snapshot ------------------------------------------------------------------

/// Without a terminal, snapshot progress is logged this often.
const SNAPSHOT_LOG_INTERVAL_S: u64 = 5;
/// The prefix of the watermark messages around each snapshot chunk.
const WATERMARK_PREFIX: &str = "weir.watermark";

/// How far the snapshot got; staged with each chunk (`StageChange::SourceState`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct SnapshotProgress {
    /// Tables whose snapshot is complete.
    done: Vec<String>,
    /// The table being read and the text of the last key read in it.
    current: Option<(String, Vec<Option<String>>)>,
    /// Every table is done.
    complete: bool,
}

/// A chunk read between its low and high watermark.
#[derive(Debug)]
struct ChunkInFlight {
    table: usize,
    low: u64,
    high: u64,
    seen_low: bool,
    rows: Vec<Row>,
    /// Keys of the table changed by transactions committed between the watermarks:
    /// the stream's version of those rows wins over the chunk's.
    changed: std::collections::HashSet<Vec<u8>>,
    last_key: Option<Vec<Option<String>>>,
    /// The encoded key of each row: its index in `rows`.
    index: HashMap<Vec<u8>, usize>,
}

/// Which watermark a logical message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watermark {
    None,
    Low,
    High,
}

/// The initial snapshot, merged with the stream by watermarks (as in Netflix's DBLog):
/// each chunk of rows, in key order, is read between a low and a high watermark written
/// into the WAL; rows changed by transactions committed between the two are dropped
/// from the chunk (the stream already carries newer versions), and the rest are staged
/// in the high watermark's transaction, with the snapshot's progress. A crash loses at
/// most the chunk in flight: the next run continues after the last staged key.
struct Snapshot {
    client: tokio_postgres::Client,
    progress: SnapshotProgress,
    chunk_rows: usize,
    in_flight: Option<ChunkInFlight>,
    rows_done: u64,
    /// The planner's estimate of the rows to read, for the rate and ETA.
    rows_estimate: u64,
    started: Instant,
    last_log: Instant,
    /// On a terminal, a progress bar.
    bar: Option<indicatif::ProgressBar>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("progress", &self.progress)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// A progress bar on a terminal; otherwise a structured log line every few seconds,
    /// with the rate and the estimated time left.
    fn report_progress(&mut self, table: &str) {
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        let rows_per_s = self.rows_done as f64 / elapsed;
        if let Some(bar) = &self.bar {
            bar.set_position(self.rows_done);
        } else if self.last_log.elapsed() >= Duration::from_secs(SNAPSHOT_LOG_INTERVAL_S)
            || self.progress.complete
        {
            let eta_s = (self.rows_estimate.saturating_sub(self.rows_done) as f64
                / rows_per_s.max(1.0)) as u64;
            tracing::info!(
                table,
                rows_done = self.rows_done,
                rows_estimate = self.rows_estimate,
                rows_per_s = rows_per_s as u64,
                eta_s,
                "snapshot progress"
            );
            self.last_log = Instant::now();
        }
        if self.progress.complete
            && let Some(bar) = &self.bar
        {
            bar.finish();
        }
    }

    /// The snapshot to run, from the progress staged so far (`None`: complete).
    async fn resume(
        dsn: &Dsn,
        tables: &[TableConfig],
        stage: &Stage,
        chunk_rows: usize,
    ) -> Result<Option<Snapshot>, PgSourceError> {
        let progress: SnapshotProgress = match stage.source_state().ok().flatten() {
            Some(bytes) => postcard::from_bytes(&bytes).unwrap_or_default(),
            None => SnapshotProgress::default(),
        };
        if progress.complete || tables.is_empty() {
            return Ok(None);
        }
        let client = connect(dsn).await?;
        // The text forms the stream uses, so both decode alike.
        client
            .batch_execute("SET DateStyle = ISO; SET IntervalStyle = postgres; SET TimeZone = 'UTC'; SET extra_float_digits = 3; SET synchronous_commit = on")
            .await
            .map_err(|source| PgSourceError::Query { what: "prepare the snapshot connection", source })?;
        // The planner's row estimates of the tables left: enough for a rate and an ETA.
        let mut rows_estimate = 0u64;
        for table in tables
            .iter()
            .filter(|t| !progress.done.contains(&t.source.to_string()))
        {
            let estimate: f32 = client
                .query_one(
                    "SELECT greatest(reltuples, 0)::real FROM pg_class WHERE oid = to_regclass($1)",
                    &[&table.source.quoted()],
                )
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "estimate a table's rows",
                    source,
                })?
                .get(0);
            rows_estimate += estimate as u64;
        }
        tracing::info!(
            tables = tables.len(),
            done = progress.done.len(),
            rows_estimate,
            "initial snapshot starts"
        );
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let bar = indicatif::ProgressBar::new(rows_estimate.max(1));
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "snapshot {bar:40} {human_pos}/{human_len} rows, {per_sec}, ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Ok(Some(Snapshot {
            client,
            progress,
            chunk_rows: chunk_rows.max(1),
            in_flight: None,
            rows_done: 0,
            rows_estimate,
            started: Instant::now(),
            last_log: Instant::now(),
            bar,
        }))
    }

    /// Reads the next chunk between two watermarks. `false` when every table is done.
    async fn start_chunk(&mut self, tables: &[TableConfig]) -> Result<bool, PgSourceError> {
        let query = |what: &'static str| move |source| PgSourceError::Query { what, source };
        let next = tables
            .iter()
            .position(|t| !self.progress.done.contains(&t.source.to_string()));
        let Some(index) = next else {
            self.progress.complete = true;
            return Ok(false);
        };
        let table = &tables[index];
        let name = table.source.to_string();
        let after = match &self.progress.current {
            Some((t, key)) if *t == name => Some(key.clone()),
            _ => None,
        };
        let emit = "SELECT pg_logical_emit_message(true, $1, $2)::text";
        let low: String = self
            .client
            .query_one(emit, &[&WATERMARK_PREFIX, &"low"])
            .await
            .map_err(query("write a low watermark"))?
            .get(0);
        // The simple query protocol returns each value in its output function's text,
        // exactly what pgoutput sends (a `::text` cast differs, e.g. for booleans).
        let columns: Vec<String> = table.columns.iter().map(|c| quote_ident(&c.name)).collect();
        let keys: Vec<String> = table.key.iter().map(|k| quote_ident(k)).collect();
        let mut sql = format!(
            "SELECT {} FROM {}",
            columns.join(", "),
            table.source.quoted()
        );
        if let Some(after) = &after {
            let mut literals = Vec::with_capacity(after.len());
            for (k, value) in table.key.iter().zip(after) {
                let declared = table.column(k).map_or("text", |c| c.declared.as_str());
                let value = value.as_deref().ok_or_else(|| PgSourceError::BadChange {
                    table: name.clone(),
                    reason: "a key column of a snapshot row is NULL".into(),
                })?;
                // One quoting function, right whatever the source's
                // `standard_conforming_strings` is (a key may hold `\` and `'`).
                let literal = crate::config::quote_literal(value).ok_or_else(|| {
                    PgSourceError::BadChange {
                        table: name.clone(),
                        reason: format!("key column `{k}` of a snapshot row holds a NUL"),
                    }
                })?;
                literals.push(format!("{literal}::{declared}"));
            }
            sql.push_str(&format!(
                " WHERE ({}) > ({})",
                keys.join(", "),
                literals.join(", ")
            ));
        }
        sql.push_str(&format!(
            " ORDER BY {} LIMIT {}",
            keys.join(", "),
            self.chunk_rows
        ));
        let rows: Vec<tokio_postgres::SimpleQueryRow> = self
            .client
            .simple_query(&sql)
            .await
            .map_err(query("read a snapshot chunk"))?
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                _ => None,
            })
            .collect();
        let high: String = self
            .client
            .query_one(emit, &[&WATERMARK_PREFIX, &"high"])
            .await
            .map_err(query("write a high watermark"))?
            .get(0);
        let oids = column_types(&self.client, &table.source).await?;
        let mut decoded = Vec::with_capacity(rows.len());
        let mut last_key = None;
        for r in &rows {
            let mut row = Vec::with_capacity(table.columns.len());
            for (i, column) in table.columns.iter().enumerate() {
                let text: Option<&str> = r.get(i);
                let (oid, modifier) = oids.get(&column.name).copied().unwrap_or((25, -1));
                let value = match text {
                    None => Value::Null,
                    Some(t) => pgtypes::decode_text(&column.name, oid, modifier, t.as_bytes())
                        .map_err(|source| PgSourceError::Value {
                            table: name.clone(),
                            column: column.name.clone(),
                            source,
                        })?,
                };
                row.push((column.name.clone(), value));
            }
            last_key = Some(
                table
                    .key
                    .iter()
                    .map(|k| {
                        table
                            .columns
                            .iter()
                            .position(|c| &c.name == k)
                            .and_then(|i| r.get(i).map(str::to_owned))
                    })
                    .collect(),
            );
            decoded.push(row);
        }
        let mut keys = HashMap::with_capacity(decoded.len());
        for (i, row) in decoded.iter().enumerate() {
            keys.insert(key_of(table, row)?, i);
        }
        tracing::debug!(table = %name, read = rows.len(), "snapshot chunk read");
        let parse = |lsn: &str| {
            super::replication::parse_lsn(lsn)
                .ok_or(PgSourceError::Replication(ReplicationError::Closed))
        };
        self.in_flight = Some(ChunkInFlight {
            table: index,
            low: parse(&low)?,
            high: parse(&high)?,
            seen_low: false,
            rows: decoded,
            changed: std::collections::HashSet::new(),
            index: keys,
            last_key: if rows.len() < self.chunk_rows {
                None
            } else {
                last_key
            },
        });
        Ok(true)
    }

    /// Where the previous version of a row of table `table` (named `name`) is, for an
    /// update's unchanged values; see [`Unstaged`].
    fn unstaged(&self, table: usize, name: &str, key: &[u8]) -> Unstaged {
        if self.progress.done.iter().any(|t| t == name) {
            return Unstaged::Staged;
        }
        match &self.in_flight {
            Some(chunk) if chunk.table == table && !chunk.changed.contains(key) => chunk
                .index
                .get(key)
                .and_then(|i| chunk.rows.get(*i))
                .map_or(Unstaged::NotRead, |row| Unstaged::ChunkRow(row.clone())),
            _ => Unstaged::NotRead,
        }
    }

    /// Whether the logical message at `lsn` is this chunk's low or high watermark.
    fn watermark(&mut self, lsn: u64) -> Watermark {
        match self.in_flight.as_mut() {
            Some(chunk) if lsn == chunk.low => {
                chunk.seen_low = true;
                Watermark::Low
            }
            Some(chunk) if lsn == chunk.high && chunk.seen_low => Watermark::High,
            _ => Watermark::None,
        }
    }

    /// Notes the keys of the chunk's table that stream events between the watermarks
    /// changed.
    fn observe(&mut self, events: &[SourceEvent]) {
        let Some(chunk) = self.in_flight.as_mut().filter(|c| c.seen_low) else {
            return;
        };
        for event in events {
            let changes = match event {
                SourceEvent::Transaction(t) => &t.changes,
                SourceEvent::Chunk(c) => c,
                _ => continue,
            };
            for change in changes {
                if let StageChange::Upsert { key, .. }
                | StageChange::UpsertUnchanged { key, .. }
                | StageChange::Delete { key, .. } = change
                {
                    chunk.changed.insert(key.clone());
                }
            }
        }
    }

    /// At the high watermark: the chunk's rows not changed meanwhile, and the progress
    /// to stage with them.
    fn finish_chunk(
        &mut self,
        tables: &[TableConfig],
    ) -> Result<(usize, Vec<Row>, Vec<u8>), PgSourceError> {
        let chunk = self
            .in_flight
            .take()
            .ok_or(PgSourceError::OutsideTransaction {
                what: "a high watermark",
            })?;
        let table = &tables[chunk.table];
        let name = table.source.to_string();
        let mut rows = Vec::with_capacity(chunk.rows.len());
        for row in chunk.rows {
            let key_values: Option<Vec<&Value>> = table
                .key
                .iter()
                .map(|k| row.iter().find(|(c, _)| c == k).map(|(_, v)| v))
                .collect();
            let key = key_values
                .and_then(|values| crate::stage::encode_key(&values).ok())
                .ok_or_else(|| PgSourceError::BadChange {
                    table: name.clone(),
                    reason: "a snapshot row without its key".into(),
                })?;
            if !chunk.changed.contains(&key) {
                rows.push(row);
            }
        }
        self.rows_done += rows.len() as u64;
        match chunk.last_key {
            Some(key) => self.progress.current = Some((name.clone(), key)),
            None => {
                self.progress.current = None;
                self.progress.done.push(name.clone());
            }
        }
        if tables
            .iter()
            .all(|t| self.progress.done.contains(&t.source.to_string()))
        {
            self.progress.complete = true;
        }
        self.report_progress(&name);
        let state =
            postcard::to_allocvec(&self.progress).map_err(|_| PgSourceError::BadChange {
                table: name,
                reason: "cannot encode the snapshot progress".into(),
            })?;
        Ok((chunk.table, rows, state))
    }
}

/// Type OID and modifier of each column of a source table.
async fn column_types(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<HashMap<String, (u32, i32)>, PgSourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&table.quoted()],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read a source table's column types",
            source,
        })?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}
