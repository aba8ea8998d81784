//! The initial snapshot: tables copied in chunks between watermarks while changes stream.

use crate::pgerror::PgError;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::assembler::{Unstaged, key_of};
use super::error::PgSourceError;
use super::load::TID_RANGE_SCAN_VERSION;
use super::progress::SnapshotProgress;
use super::replication::ReplicationError;
use super::setup::{connect, refuse_shared_keys};
use super::stage_port::StagePort;
use super::types::column_types;
use crate::config::{Dsn, TableConfig, quote_ident};
use crate::feed::StageChange;
use crate::pg::pgtypes;
use crate::source::{Row, SourceEvent};
use crate::value::Value;

mod reads;
mod visibility;
use reads::{key_literals, page_spans};
use visibility::{XidSnapshot, snapshot_function};

/// Which transaction stream events belong to, for [`Snapshot::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// A transaction sent after its commit, by its xid.
    Xid(u32),
    /// A transaction whose xid is not known (counted as unseen by the chunk's read).
    Unknown,
    /// A block of a transaction streamed while in progress (its top-level xid): it may
    /// still abort, so its changes count only at its commit.
    Block(u32),
    /// The commit of a transaction streamed in blocks.
    StreamCommit(u32),
    /// The abort of a streamed transaction (`xid`), or of one of its subtransactions.
    StreamAbort { xid: u32, subxact: u32 },
}

/// Transactions the stream decoded while no chunk was being read, remembered for the
/// next chunk (see [`Snapshot::await_visible`]), at most this many.
const RECENT_XIDS_MAX: usize = 4096;
/// How long a chunk waits for the transactions the stream decoded to be visible to new
/// snapshots (they are committed: it takes a moment), checking every millisecond.
const VISIBLE_WAIT_TRIES: usize = 5000;

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
    /// The slot of the pipeline that asked: another pipeline reading the same table
    /// through its own slot passes it over (`None`: a signal of an older build, taken
    /// by every pipeline reading the table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
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
    /// Keys of the table changed by transactions committed between the watermarks, or
    /// unseen by the chunk's read: the stream's version of those rows wins over the
    /// chunk's.
    changed: std::collections::HashSet<Vec<u8>>,
    /// A transaction streamed in blocks changed the table and committed where the
    /// read may not have seen it: which of the chunk's rows it changed is not known
    /// (its blocks may have come before the chunk), so none is staged and the same
    /// range is read again.
    read_again: bool,
    /// The snapshots the chunk was read in (see `visibility`).
    snapshots: Vec<XidSnapshot>,
    last_key: Option<Vec<Option<String>>>,
    /// A chunk of the pages the first load left: the pages it read, `from` inclusive,
    /// `to` exclusive (`None`: to the end). `None`: a chunk in key order.
    pages: Option<(u64, Option<u64>)>,
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
/// each chunk of rows, in key order (in ranges of keys read at once on several
/// connections: [`Snapshot::key_ranges`]), is read between a low and a high watermark
/// written into the WAL; rows changed by transactions committed between the two are dropped
/// from the chunk (the stream already carries newer versions), and the rest are staged
/// in the high watermark's transaction, with the snapshot's progress. A crash loses at
/// most the chunk in flight: the next run continues after the last staged key.
///
/// A table the first load began and did not finish is read by the ranges of pages the
/// load left ([`super::progress::PagesLeft`]), in chunks of pages rather than of keys, unless its files
/// were rewritten since, or an update of it left values out that only an unread row
/// holds: then it is read again whole, in key order.
pub(super) struct Snapshot {
    client: tokio_postgres::Client,
    /// Where `readers` connect.
    dsn: Dsn,
    /// Connections besides `client` that read a chunk's spans of pages or ranges of
    /// keys in parallel with it, opened at the first such chunk.
    readers: Vec<tokio_postgres::Client>,
    /// Connections a chunk is read with (`[source] snapshot_parallelism`).
    parallelism: usize,
    progress: SnapshotProgress,
    chunk_rows: usize,
    /// Each table read by pages: its pages per chunk (about `chunk_rows` rows) and its
    /// pages when first asked.
    page_chunks: HashMap<String, (u64, u64)>,
    /// Tables read by pages that must be read again whole, in key order; see
    /// [`Snapshot::unstaged`]. Locked only on an update that leaves values out.
    to_key_order: std::sync::Mutex<Vec<String>>,
    pub(super) in_flight: Option<ChunkInFlight>,
    pub(super) rows_done: u64,
    /// Rows read of each table in this snapshot (for its `resync complete` line).
    rows_by_table: HashMap<String, u64>,
    /// The planner's estimate of the rows to read, for the rate and ETA.
    rows_estimate: u64,
    started: Instant,
    last_log: Instant,
    /// On a terminal, a progress bar.
    bar: Option<indicatif::ProgressBar>,
    /// The SQL function giving the current snapshot on this server.
    snapshot_function: &'static str,
    /// The snapshots of the chunk being read, one per connection that read it.
    read_snapshots: Vec<XidSnapshot>,
    /// Transactions with changes the stream decoded since the last chunk began.
    recent_xids: std::collections::VecDeque<u32>,
    /// The tables each transaction streamed in blocks (by top-level xid) changed so far,
    /// until its commit or abort.
    streamed: HashMap<u32, std::collections::HashSet<String>>,
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
        parallelism: usize,
        unenforced_keys: &[String],
    ) -> Result<Option<Snapshot>, PgSourceError> {
        let mut progress = stage
            .source_state()
            .ok()
            .flatten()
            .and_then(|bytes| SnapshotProgress::decode(&bytes))
            .unwrap_or_default();
        // A table added to the config since the snapshot completed has not been read:
        // it gets its snapshot (by watermarks, the stream going on meanwhile).
        let added: Vec<String> = tables
            .iter()
            .map(|t| t.source.to_string())
            .filter(|name| !progress.done.contains(name))
            .collect();
        if progress.complete && !added.is_empty() {
            tracing::info!(tables = ?added, "tables added to the config since the snapshot completed are read now");
            progress.complete = false;
        }
        if progress.complete || tables.is_empty() {
            return Ok(None);
        }
        let client = reader(dsn).await?;
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .map_err(|source| PgSourceError::Query {
                what: "read the server's version",
                source: PgError(source),
            })?
            .get(0);
        if version < TID_RANGE_SCAN_VERSION && !progress.pages.is_empty() {
            // Without TID range scans each chunk of pages would scan the whole table.
            tracing::info!(
                version,
                "tables are read in key order: reading by pages needs PostgreSQL 14 or later"
            );
            progress.pages.clear();
        }
        for table in tables.iter().filter(|t| {
            let name = t.source.to_string();
            unenforced_keys.contains(&name) && !progress.done.contains(&name)
        }) {
            refuse_shared_keys(&client, table).await?;
        }
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
                    source: PgError(source),
                })?
                .get(0);
            rows_estimate += estimate as u64;
        }
        tracing::info!(
            tables = tables.len(),
            done = progress.done.len(),
            by_pages = progress.pages.len(),
            rows_estimate,
            "initial snapshot starts"
        );
        for left in &progress.pages {
            tracing::info!(
                table = %left.table,
                ranges = left.ranges.len(),
                from_page = left.ranges.first().map_or(0, |r| r.0),
                "the snapshot reads this table by the ranges of pages left"
            );
        }
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
            dsn: dsn.clone(),
            readers: Vec::new(),
            parallelism: parallelism.max(1),
            progress,
            chunk_rows: chunk_rows.max(1),
            page_chunks: HashMap::new(),
            to_key_order: std::sync::Mutex::new(Vec::new()),
            in_flight: None,
            rows_done: 0,
            rows_by_table: HashMap::new(),
            rows_estimate,
            started: Instant::now(),
            last_log: Instant::now(),
            bar,
            snapshot_function: snapshot_function(version),
            read_snapshots: Vec::new(),
            recent_xids: std::collections::VecDeque::new(),
            streamed: HashMap::new(),
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
        match self.start_chunk_of(tables).await {
            Err(error) => {
                // A `--where` PostgreSQL cannot evaluate on a row written since it was
                // checked: every read of it would fail, and every run with it. That
                // resync is given up, loudly; what it read is staged; the rest goes on.
                let Some(table) = self.filter_fails(&error, tables) else {
                    return Err(error);
                };
                self.in_flight = None;
                self.progress.current = None;
                self.progress.resync.retain(|r| r.table != table);
                self.progress.done.push(table.clone());
                tracing::error!(table = %table, error = %crate::errors::error_chain(&error), "the --where of this table's resync fails on the table's rows now: the resync is given up (the rows it read are staged); run `weir resync --table` again, whole or with a condition every row can take");
                Ok(true)
            }
            other => other,
        }
    }

    /// The table being read, if `error` is a data exception (SQLSTATE class 22) in a
    /// read of it and its resync under way has a `--where`.
    fn filter_fails(&self, error: &PgSourceError, tables: &[TableConfig]) -> Option<String> {
        let PgSourceError::Query { source, .. } = error else {
            return None;
        };
        if !source.code().is_some_and(|c| c.code().starts_with("22")) {
            return None;
        }
        let table = tables
            .iter()
            .map(|t| t.source.to_string())
            .find(|t| !self.progress.done.contains(t))?;
        self.progress
            .resync
            .iter()
            .any(|r| r.table == table && r.filter.is_some())
            .then_some(table)
    }

    async fn start_chunk_of(&mut self, tables: &[TableConfig]) -> Result<bool, PgSourceError> {
        let query = |what: &'static str| {
            move |source| PgSourceError::Query {
                what,
                source: PgError(source),
            }
        };
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
        // The next chunk of the pages the first load left, if it left this table part
        // way: the pages of its first range left, about `chunk_rows` rows' worth.
        let by_pages = match self.progress.pages_of(&name) {
            Some(left) => {
                let Some(&(from, to)) = left.ranges.first() else {
                    return Err(PgSourceError::BadChange {
                        table: name,
                        reason: "the snapshot progress holds a table with no pages left".into(),
                    });
                };
                let files = left.files.clone();
                let (span, pages) = match self.page_chunks.get(&name) {
                    Some(&sized) => sized,
                    None => {
                        let size = super::load::table_size(&self.client, &table.source).await?;
                        let sized = (size.pages_for_rows(self.chunk_rows), size.pages);
                        self.page_chunks.insert(name.clone(), sized);
                        sized
                    }
                };
                Some((page_spans(from, to, span, pages, self.parallelism), files))
            }
            None => None,
        };
        // The simple query protocol returns each value in its output function's text,
        // exactly what pgoutput sends (a `::text` cast differs, e.g. for booleans).
        let columns: Vec<String> = table.columns.iter().map(|c| quote_ident(&c.name)).collect();
        let keys: Vec<String> = table.key.iter().map(|k| quote_ident(k)).collect();
        let keys = keys.join(", ");
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
        let select = format!("SELECT {} FROM {from}", columns.join(", "));
        let key_types = self.key_types(table).await?;
        let after = match (&by_pages, &after) {
            (None, Some(after)) => Some(key_literals(table, &key_types, after)?),
            _ => None,
        };
        // In key order on more than one connection: the ranges of keys each reads,
        // found before the watermarks (they only split the work).
        let ranges = if by_pages.is_none() && self.parallelism > 1 {
            self.key_ranges(table, &key_types, &from, &keys, after.as_deref())
                .await?
        } else {
            None
        };
        let emit = "SELECT pg_logical_emit_message(true, $1, $2)::text";
        self.await_visible().await?;
        self.read_snapshots.clear();
        let low: String = self
            .client
            .query_one(emit, &[&WATERMARK_PREFIX, &"low"])
            .await
            .map_err(query("write a low watermark"))?
            .get(0);
        // The rows, and whether the table has rows past them (read by pages: see
        // `pages`, not this).
        let (rows, more) = match (&by_pages, ranges) {
            (None, Some(ranges)) => self.read_key_ranges(&select, &keys, &ranges).await?,
            (None, None) => {
                let mut sql = select;
                if let Some(after) = &after {
                    sql.push_str(&format!(" WHERE ({keys}) > ({after})"));
                }
                sql.push_str(&format!(" ORDER BY {keys} LIMIT {}", self.chunk_rows));
                let rows = self
                    .read_at_once(vec![sql], "read a snapshot chunk")
                    .await?
                    .pop()
                    .unwrap_or_default();
                let more = rows.len() >= self.chunk_rows;
                (rows, more)
            }
            (Some((spans, files)), _) => {
                let rows = self.read_spans(&select, spans).await?;
                // Checked after the read: a rewrite committed before it shows here,
                // and one after it leaves this chunk's rows right (they are current)
                // but moves the rows of the pages left, so the table is then read
                // again in key order. A resync's pages take the files of its first.
                let now = super::load::relation_files(&self.client, &table.source).await?;
                if files.is_empty() {
                    if let Some(left) = self.progress.pages.iter_mut().find(|p| p.table == name) {
                        left.files = now;
                    }
                } else if now != *files {
                    self.key_order(&name, "its files were rewritten since its pages were counted (VACUUM FULL, CLUSTER, TRUNCATE, or a partition attached or detached)");
                }
                (rows, false)
            }
        };
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
        tracing::debug!(table = %name, read = rows.len(), by_pages = by_pages.is_some(), "snapshot chunk read");
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
            read_again: false,
            snapshots: std::mem::take(&mut self.read_snapshots),
            index: keys,
            last_key: if more { last_key } else { None },
            pages: by_pages.and_then(|(spans, _)| {
                let from = spans.first()?.0;
                Some((from, spans.last()?.1))
            }),
        });
        Ok(true)
    }

    /// Where the previous version of a row of table `table` (named `name`) is, for an
    /// update's unchanged values; see [`Unstaged`]. `staged` says whether the stage
    /// holds a version of the row.
    ///
    /// Of a table read by pages, a row neither staged nor in the chunk may be in a page
    /// read already (an update moves a row), where no later chunk reads it: the update
    /// is left to the stage's version, if any, and the table is read again whole, in
    /// key order, from a progress staged with the update's transaction
    /// ([`Snapshot::take_key_order`]).
    pub(super) fn unstaged(
        &self,
        table: usize,
        name: &str,
        key: &[u8],
        staged: &dyn Fn() -> bool,
    ) -> Unstaged {
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
        let in_chunk = match &self.in_flight {
            Some(chunk) if chunk.table == table && !chunk.changed.contains(key) => chunk
                .index
                .get(key)
                .and_then(|i| chunk.rows.get(*i))
                .map(|row| Unstaged::ChunkRow(row.clone())),
            _ => None,
        };
        if let Some(row) = in_chunk {
            return row;
        }
        if self.progress.pages_of(name).is_some() {
            if staged() {
                return Unstaged::Staged;
            }
            self.key_order(
                name,
                "an update left out values (unchanged TOAST values) of a row not read yet",
            );
        }
        Unstaged::NotRead
    }

    /// Marks `table`, read by pages, to be read again whole, in key order, because of
    /// `reason`.
    fn key_order(&self, table: &str, reason: &str) {
        let mut marked = self
            .to_key_order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !marked.iter().any(|t| t == table) {
            tracing::warn!(
                table,
                reason,
                "the table is read again whole, in key order, not by the pages its first load left"
            );
            marked.push(table.to_owned());
        }
    }

    /// The progress to stage now if a table read by pages was marked to be read in key
    /// order since the last call (its pages entry gone: it is read from its first key).
    pub(super) fn take_key_order(&mut self, table: &str) -> Result<Option<Vec<u8>>, PgSourceError> {
        let marked = std::mem::take(
            self.to_key_order
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let before = self.progress.pages.len();
        self.progress.pages.retain(|p| !marked.contains(&p.table));
        if self.progress.pages.len() == before {
            return Ok(None);
        }
        for name in &marked {
            if self
                .progress
                .current
                .as_ref()
                .is_some_and(|(t, _)| t == name)
            {
                self.progress.current = None;
            }
        }
        self.progress.encode(table).map(Some)
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

    /// Notes the keys of the chunk's table that stream events of transaction `xid`
    /// (top-level; `None` if unknown) changed, when the chunk's read cannot have seen
    /// them: events between the watermarks, and those before the low watermark of a
    /// transaction a snapshot of the read did not see (committed just before the low
    /// watermark, visible only after the read began; an unknown one counts as unseen).
    /// Dropping the chunk's row of such a key is safe: the stream staged that change.
    ///
    /// A transaction streamed in blocks counts at its commit alone (an aborted one
    /// changed nothing, and its keys must not be dropped): if it changed the chunk's
    /// table and the read may not have seen it, the chunk is read again.
    pub(super) fn observe(&mut self, events: &[SourceEvent], seen: Seen) {
        let xid = match seen {
            Seen::Xid(xid) => Some(xid),
            Seen::Unknown => None,
            Seen::Block(xid) => {
                self.note_streamed(xid, events);
                return;
            }
            Seen::StreamAbort { xid, subxact } => {
                if xid == subxact {
                    self.streamed.remove(&xid);
                }
                return;
            }
            Seen::StreamCommit(xid) => {
                self.note_streamed(xid, events);
                self.streamed_commit(xid);
                return;
            }
        };
        let changes = events
            .iter()
            .any(|e| matches!(e, SourceEvent::Transaction(_) | SourceEvent::Chunk(_)));
        if !changes {
            return;
        }
        if let Some(xid) = xid
            && self.recent_xids.back() != Some(&xid)
        {
            if self.recent_xids.len() >= RECENT_XIDS_MAX {
                self.recent_xids.pop_front();
            }
            self.recent_xids.push_back(xid);
        }
        if let Some(chunk) = self.in_flight.as_mut() {
            let unseen = xid.is_none_or(|x| chunk.snapshots.iter().any(|s| !s.sees(x)));
            if chunk.seen_low || unseen {
                chunk.observe(events);
            }
        }
    }

    /// Notes the tables that `events` of streamed transaction `xid` change.
    fn note_streamed(&mut self, xid: u32, events: &[SourceEvent]) {
        for event in events {
            let changes = match event {
                SourceEvent::Transaction(t) => &t.changes,
                SourceEvent::Chunk(c) => c,
                _ => continue,
            };
            for change in changes {
                if let StageChange::Upsert { table, .. }
                | StageChange::UpsertUnchanged { table, .. }
                | StageChange::Delete { table, .. }
                | StageChange::Truncate { table } = change
                {
                    let tables = self.streamed.entry(xid).or_default();
                    if !tables.contains(table) {
                        tables.insert(table.clone());
                    }
                }
            }
        }
    }

    /// The commit of streamed transaction `xid`: the chunk in flight is read again if
    /// the transaction changed its table after the watermark or unseen by the read;
    /// the next chunk waits until the transaction is visible.
    fn streamed_commit(&mut self, xid: u32) {
        let Some(tables) = self.streamed.remove(&xid) else {
            return;
        };
        if self.recent_xids.len() >= RECENT_XIDS_MAX {
            self.recent_xids.pop_front();
        }
        self.recent_xids.push_back(xid);
        if let Some(chunk) = self.in_flight.as_mut()
            && tables.contains(&chunk.name)
            && (chunk.seen_low || chunk.snapshots.iter().any(|s| !s.sees(xid)))
        {
            chunk.read_again = true;
        }
    }

    /// Waits until every transaction the stream decoded since the last chunk began is
    /// visible to new snapshots, so that the next chunk's read sees what the stream
    /// staged before it: each is committed (its commit was decoded), and becomes
    /// visible a moment after. Transactions decoded while the chunk is in flight are
    /// judged by its snapshots instead ([`Self::observe`]).
    async fn await_visible(&mut self) -> Result<(), PgSourceError> {
        if self.recent_xids.is_empty() {
            return Ok(());
        }
        let sql = format!("SELECT {}()::text", self.snapshot_function);
        for _ in 0..VISIBLE_WAIT_TRIES {
            let text: String = self
                .client
                .query_one(&sql, &[])
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "read the current snapshot",
                    source: PgError(source),
                })?
                .get(0);
            let snapshot = XidSnapshot::parse(&text).ok_or_else(|| PgSourceError::BadChange {
                table: "the snapshot".into(),
                reason: "the server's current snapshot could not be read".into(),
            })?;
            if self.recent_xids.iter().all(|x| snapshot.sees(*x)) {
                self.recent_xids.clear();
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tracing::warn!(
            transactions = self.recent_xids.len(),
            "committed transactions are still not visible after 5 s; reading the chunk all the same"
        );
        self.recent_xids.clear();
        Ok(())
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
        if chunk.read_again {
            tracing::debug!(table = %name, "snapshot chunk read again: a transaction streamed while in progress changed its table and committed while it was read");
            self.take_key_order(&name)?;
            let state = self.progress.encode(&name)?;
            return Ok((chunk.table, Vec::new(), state));
        }
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
        *self.rows_by_table.entry(name.clone()).or_default() += rows.len() as u64;
        // A table marked for key order since (by this chunk's check of its files): its
        // chunk's rows are current all the same, but its pages are not followed on.
        self.take_key_order(&name)?;
        let done = match (chunk.pages, chunk.last_key) {
            (Some((from, to)), _) => self.progress.pages_staged(&name, from, to),
            (None, Some(key)) => {
                self.progress.current = Some((name.clone(), key));
                false
            }
            (None, None) => true,
        };
        if done {
            self.progress.current = None;
            self.progress.done.push(name.clone());
            if let Some(i) = self.progress.resync.iter().position(|r| r.table == name) {
                let resync = self.progress.resync.remove(i);
                tracing::info!(table = %name, filter = resync.filter.is_some(), rows = self.rows_by_table.get(&name).copied().unwrap_or(0), "resync complete");
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

/// A connection for the snapshot's reads and watermarks, with the text forms the
/// stream uses, so both decode alike.
async fn reader(dsn: &Dsn) -> Result<tokio_postgres::Client, PgSourceError> {
    let client = connect(dsn).await?;
    client
        .batch_execute("SET DateStyle = ISO; SET IntervalStyle = postgres; SET TimeZone = 'UTC'; SET extra_float_digits = 3; SET synchronous_commit = on")
        .await
        .map_err(|source| PgSourceError::Query { what: "prepare the snapshot connection", source: PgError(source), })?;
    Ok(client)
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
            read_again: false,
            snapshots: Vec::new(),
            last_key: None,
            pages: None,
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
