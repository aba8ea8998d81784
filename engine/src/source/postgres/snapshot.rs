//! The initial snapshot: tables copied in chunks between watermarks while changes stream.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::assembler::{Unstaged, key_of};
use super::error::PgSourceError;
use super::replication::ReplicationError;
use super::setup::connect;
use super::stage_port::StagePort;
use crate::config::{Dsn, TableConfig, TableName, quote_ident};
use crate::feed::StageChange;
use crate::pg::pgtypes;
use crate::source::{Row, SourceEvent};
use crate::value::Value;

/// Without a terminal, snapshot progress is logged this often.
const SNAPSHOT_LOG_INTERVAL_S: u64 = 5;
/// The prefix of the watermark messages around each snapshot chunk.
pub(super) const WATERMARK_PREFIX: &str = "weir.watermark";
/// The prefix of the message `weir resync` writes into the source's WAL: the run that
/// streams it reads the table again ([`ResyncSignal`]).
pub const RESYNC_PREFIX: &str = "weir.resync";

/// What `weir resync` asks, as the JSON content of its message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResyncSignal {
    /// The source table, `schema.name` as the config names it.
    pub table: String,
    /// `--where`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// How far the snapshot got; staged with each chunk (`StageChange::SourceState`).
/// The first load ([`super::load`]) stages it too, with the tables it loaded done, and
/// a `weir resync` signal with its table taken out of `done`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct SnapshotProgress {
    /// Tables whose snapshot is complete.
    pub(super) done: Vec<String>,
    /// The table being read and the text of the last key read in it.
    pub(super) current: Option<(String, Vec<Option<String>>)>,
    /// Every table is done.
    pub(super) complete: bool,
    /// Tables being read again for `weir resync`, until done.
    pub(super) resync: Vec<Resync>,
}

/// The progress as staged before `resync` was added: a stage written by an older build
/// decodes as one.
#[derive(serde::Deserialize)]
struct ProgressBeforeResync {
    done: Vec<String>,
    current: Option<(String, Vec<Option<String>>)>,
    complete: bool,
}

/// A table read again because `weir resync` asked for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Resync {
    /// `schema.name`.
    pub(super) table: String,
    /// `--where`: only the rows it selects are read again (upserted). `None`: the whole
    /// table, whose staged rows were dropped when the resync began; its partitions are
    /// not written until it is read whole (see [`resync_holds`]).
    pub(super) filter: Option<String>,
}

impl SnapshotProgress {
    /// The progress staged as `bytes`, in this build's form or the older one.
    pub(super) fn decode(bytes: &[u8]) -> Option<SnapshotProgress> {
        postcard::from_bytes::<SnapshotProgress>(bytes)
            .ok()
            .or_else(|| {
                postcard::from_bytes::<ProgressBeforeResync>(bytes)
                    .ok()
                    .map(|old| SnapshotProgress {
                        done: old.done,
                        current: old.current,
                        complete: old.complete,
                        resync: Vec::new(),
                    })
            })
    }

    pub(super) fn encode(&self, table: &str) -> Result<Vec<u8>, PgSourceError> {
        postcard::to_allocvec(self).map_err(|_| PgSourceError::BadChange {
            table: table.to_owned(),
            reason: "cannot encode the snapshot progress".into(),
        })
    }

    /// The progress once a resync of `table` (with `filter`) begins: the table is read
    /// again from its first key. `None`: a resync with a filter of a table not read whole
    /// yet (its snapshot, or a whole resync, is under way and reads every row anyway).
    pub(super) fn with_resync(&self, table: &str, filter: Option<String>) -> Option<Self> {
        let whole = filter.is_none();
        if !whole && !self.complete && !self.done.iter().any(|t| t == table) {
            return None;
        }
        let mut next = self.clone();
        next.done.retain(|t| t != table);
        next.complete = false;
        if next.current.as_ref().is_some_and(|(t, _)| t == table) {
            next.current = None;
        }
        next.resync.retain(|r| r.table != table);
        next.resync.push(Resync {
            table: table.to_owned(),
            filter,
        });
        Some(next)
    }
}

/// The tables a whole-table resync is reading again: their staged rows were dropped
/// when it began, so their partitions are not written until it is done (the target
/// keeps its rows meanwhile). From the progress the stage holds.
pub fn resync_holds(state: Option<&[u8]>) -> Vec<String> {
    state
        .and_then(SnapshotProgress::decode)
        .map(|p| {
            p.resync
                .into_iter()
                .filter(|r| r.filter.is_none())
                .map(|r| r.table)
                .collect()
        })
        .unwrap_or_default()
}

/// How far the initial snapshot got with one table, as `weir status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SnapshotTable {
    /// `schema.name`.
    pub table: String,
    /// `done` (every row staged), `reading` (the watermark snapshot is part way through
    /// it), `resyncing` (read again for `weir resync`), or `waiting` (not read yet, or
    /// read again after a first load that did not finish it).
    pub state: &'static str,
    /// The `--where` of a resync under way, if it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// Each table's snapshot state from the progress the stage holds (`None`: nothing
/// staged yet, so every table waits).
pub fn snapshot_tables(state: Option<&[u8]>, tables: &[String]) -> Vec<SnapshotTable> {
    let progress = state.and_then(SnapshotProgress::decode).unwrap_or_default();
    tables
        .iter()
        .map(|table| {
            let resync = progress.resync.iter().find(|r| &r.table == table);
            SnapshotTable {
                table: table.clone(),
                state: if progress.complete || progress.done.contains(table) {
                    "done"
                } else if resync.is_some() {
                    "resyncing"
                } else if progress.current.as_ref().is_some_and(|(t, _)| t == table) {
                    "reading"
                } else {
                    "waiting"
                },
                filter: resync.and_then(|r| r.filter.clone()),
            }
        })
        .collect()
}

/// A chunk read between its low and high watermark.
#[derive(Debug)]
pub(super) struct ChunkInFlight {
    table: usize,
    /// The table's name (`schema.name`), as stage changes name it.
    name: String,
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

impl ChunkInFlight {
    /// Notes the keys of this chunk's table that `events` change: only its own table's.
    /// Another table's change of an equal key (two tables keyed by `id`) says nothing
    /// of this chunk's row, which must not be dropped for it.
    fn observe(&mut self, events: &[SourceEvent]) {
        for event in events {
            let changes = match event {
                SourceEvent::Transaction(t) => &t.changes,
                SourceEvent::Chunk(c) => c,
                _ => continue,
            };
            for change in changes {
                if let StageChange::Upsert { table, key, .. }
                | StageChange::UpsertUnchanged { table, key, .. }
                | StageChange::Delete { table, key } = change
                    && *table == self.name
                {
                    self.changed.insert(key.clone());
                }
            }
        }
    }
}

/// Which watermark a logical message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Watermark {
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
pub(super) struct Snapshot {
    client: tokio_postgres::Client,
    progress: SnapshotProgress,
    chunk_rows: usize,
    pub(super) in_flight: Option<ChunkInFlight>,
    pub(super) rows_done: u64,
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
    pub(super) async fn resume(
        dsn: &Dsn,
        tables: &[TableConfig],
        stage: &dyn StagePort,
        chunk_rows: usize,
    ) -> Result<Option<Snapshot>, PgSourceError> {
        let progress = stage
            .source_state()
            .ok()
            .flatten()
            .and_then(|bytes| SnapshotProgress::decode(&bytes))
            .unwrap_or_default();
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

    /// How far the snapshot got.
    pub(super) fn progress(&self) -> &SnapshotProgress {
        &self.progress
    }

    /// Reads the next chunk between two watermarks. `false` when every table is done.
    pub(super) async fn start_chunk(
        &mut self,
        tables: &[TableConfig],
    ) -> Result<bool, PgSourceError> {
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
        // A resync's `--where` in a subquery of its own: the clause cannot reach past
        // its parentheses into the key condition and order below.
        let from = match self
            .progress
            .resync
            .iter()
            .find(|r| r.table == name)
            .and_then(|r| r.filter.as_deref())
        {
            Some(filter) => format!(
                "(SELECT * FROM {} WHERE {filter}) AS weir_resync",
                table.source.quoted()
            ),
            None => table.source.quoted(),
        };
        let mut sql = format!("SELECT {} FROM {from}", columns.join(", "));
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
            let row = decode_row(table, &oids, r)?;
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
            crate::pg::lsn::parse_lsn(lsn)
                .ok_or(PgSourceError::Replication(ReplicationError::Closed))
        };
        self.in_flight = Some(ChunkInFlight {
            table: index,
            name: name.clone(),
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
    pub(super) fn unstaged(&self, table: usize, name: &str, key: &[u8]) -> Unstaged {
        // A table read whole, or read again only where a resync's `--where` says: the
        // stage holds its rows.
        if self.progress.done.iter().any(|t| t == name)
            || self
                .progress
                .resync
                .iter()
                .any(|r| r.table == name && r.filter.is_some())
        {
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
    pub(super) fn watermark(&mut self, lsn: u64) -> Watermark {
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
    pub(super) fn observe(&mut self, events: &[SourceEvent]) {
        if let Some(chunk) = self.in_flight.as_mut().filter(|c| c.seen_low) {
            chunk.observe(events);
        }
    }

    /// At the high watermark: the chunk's rows not changed meanwhile, and the progress
    /// to stage with them.
    pub(super) fn finish_chunk(
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
                .and_then(|values| crate::feed::encode_key(&values).ok())
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
                if let Some(i) = self.progress.resync.iter().position(|r| r.table == name) {
                    let resync = self.progress.resync.remove(i);
                    tracing::info!(table = %name, filter = resync.filter.is_some(), rows = self.rows_done, "resync complete");
                }
            }
        }
        if tables
            .iter()
            .all(|t| self.progress.done.contains(&t.source.to_string()))
        {
            self.progress.complete = true;
        }
        self.report_progress(&name);
        let state = self.progress.encode(&name)?;
        Ok((chunk.table, rows, state))
    }
}

/// A row of `table` read in text by the simple query protocol (each value in its
/// output function's text, as pgoutput sends it), decoded as the stream decodes it;
/// `types` from [`column_types`].
pub(super) fn decode_row(
    table: &TableConfig,
    types: &HashMap<String, (u32, i32)>,
    r: &tokio_postgres::SimpleQueryRow,
) -> Result<Row, PgSourceError> {
    let mut row = Vec::with_capacity(table.columns.len());
    for (i, column) in table.columns.iter().enumerate() {
        let (oid, modifier) = types.get(&column.name).copied().unwrap_or((25, -1));
        let value = match r.get(i) {
            None => Value::Null,
            Some(t) => pgtypes::decode_text(&column.name, oid, modifier, t.as_bytes()).map_err(
                |source| PgSourceError::Value {
                    table: table.source.to_string(),
                    column: column.name.clone(),
                    source,
                },
            )?,
        };
        row.push((column.name.clone(), value));
    }
    Ok(row)
}

/// Type OID and modifier of each column of a source table.
pub(super) async fn column_types(
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

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::feed::{Op, StagedRow, Transaction};
    use crate::partition::Partition;

    fn upsert(table: &str, id: i64) -> StageChange {
        StageChange::Upsert {
            table: table.into(),
            key: crate::feed::encode_key(&[&Value::Int(id)]).expect("key"),
            partition: Partition::Key("2026-03-02".into()),
            row: StagedRow {
                commit_position: 1,
                commit_time_us: None,
                op: Op::Update,
                values: vec![("id".into(), Value::Int(id))],
            },
        }
    }

    /// A change between the watermarks drops the chunk's row of its key only when it
    /// is a change of the chunk's table: the ledger's row 6106 changing says nothing of
    /// the orders' row 6106 (dropping it lost that row for good).
    #[test]
    fn only_the_chunks_own_table_drops_its_rows() {
        let mut chunk = ChunkInFlight {
            table: 0,
            name: "public.orders".into(),
            low: 1,
            high: 2,
            seen_low: true,
            rows: Vec::new(),
            changed: std::collections::HashSet::new(),
            last_key: None,
            index: HashMap::new(),
        };
        let txn = |changes| {
            SourceEvent::Transaction(Transaction {
                changes,
                ..Transaction::default()
            })
        };
        chunk.observe(&[
            txn(vec![upsert("public.ledger", 6106)]),
            txn(vec![StageChange::Delete {
                table: "public.events".into(),
                key: crate::feed::encode_key(&[&Value::Int(7)]).expect("key"),
            }]),
        ]);
        assert!(
            chunk.changed.is_empty(),
            "other tables' keys are not the chunk's"
        );
        chunk.observe(&[SourceEvent::Chunk(vec![upsert("public.orders", 6106)])]);
        let key = crate::feed::encode_key(&[&Value::Int(6106)]).expect("key");
        assert_eq!(chunk.changed.len(), 1);
        assert!(chunk.changed.contains(&key));
    }
}
