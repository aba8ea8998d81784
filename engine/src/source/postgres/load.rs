//! The first load: the tables that already hold rows, read in parallel from one
//! exported snapshot with binary `COPY`, over ranges of pages.
//!
//! A temporary slot is created with `EXPORT_SNAPSHOT` on a replication connection that
//! then stays idle (the snapshot lives as long as it does). Its snapshot holds exactly
//! the transactions that committed before the slot's consistent point, and a logical
//! slot started at that point streams exactly the ones that commit after it (the same
//! rule PostgreSQL's own table synchronisation relies on). So the rows read from the
//! snapshot are staged at that point, and Weir's slot streams from there: no watermark
//! is needed, and a change is neither lost nor applied twice.
//!
//! `[source] snapshot_parallelism` workers each import the snapshot
//! (`SET TRANSACTION SNAPSHOT`) and take ranges of pages from a shared queue, table by
//! table, with `COPY (SELECT ... WHERE ctid >= ... AND ctid < ...) TO STDOUT (FORMAT
//! binary)`: a TID range scan (PostgreSQL 14 and later) reads only those pages. Each
//! range's rows go to the stage whole with the load's progress (as sorted table files
//! ingested under a marker when the source enforces the key unique: the stage's
//! `bulk.rs`); a table is marked done in the snapshot progress with its last range. A partitioned table
//! is read through its root, so its partitions are the ones of the snapshot.
//!
//! What is not loaded here is left to the watermark snapshot ([`super::snapshot`]),
//! which runs beside the stream from the consistent point:
//! * a table with a column Weir does not read in binary (an enum, an array, a domain);
//! * after a crash, or a lost connection, the ranges of pages of a table that were not
//!   all staged (the exported snapshot died with its connection): the progress staged
//!   with each part names them ([`PagesLeft`]), and they are read in chunks of pages
//!   between watermarks; the rows of the ranges staged are not read again. A table
//!   whose files were rewritten since (`VACUUM FULL`, `CLUSTER`, ...), or on a server
//!   older than 14 (one range per table), is read again whole, in key order; rows
//!   staged already are overwritten by their current version.
//!
//! The load runs only when nothing was staged yet and the source is a primary (a
//! standby decodes with the watermark snapshot).

use crate::pgerror::PgError;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, pin_mut};
use tokio_postgres::binary_copy::BinaryCopyOutStream;
use tokio_postgres::types::{FromSql, Type};

use super::error::PgSourceError;
use super::progress::{PagesLeft, SnapshotProgress};
use super::replication::ReplicationClient;
use super::setup::{connect, refuse_shared_keys};
use super::stage_port::{PreparedPart, StagePort};
use super::types::column_types;
use crate::config::{Dsn, TableConfig, TableName, quote_ident};
use crate::feed::{Op, StageChange, keyed_changes};
use crate::pg::pgtypes;
use crate::value::Value;

/// Without a terminal, load progress is logged this often.
const LOG_INTERVAL: Duration = Duration::from_secs(5);
/// Rows per page assumed for a table the planner has no statistics of.
const ROWS_PER_PAGE_UNKNOWN: f64 = 60.0;
/// PostgreSQL 14: TID range scans (`ctid >= ... AND ctid < ...` reads only those
/// pages). Before it, each table is one range.
pub(super) const TID_RANGE_SCAN_VERSION: i32 = 140_000;
/// The usual page size: what a range's pages hold at most, for its memory.
const PAGE_BYTES: u64 = 8192;
/// PostgreSQL 12: `pg_partition_tree`, used to size a partitioned table.
const LOAD_MIN_VERSION: i32 = 120_000;

/// What a running first load tells the engine: the tables it is still loading, whose
/// partitions wait (each is then written once, not again after every range), a
/// wake-up when a table is done, so a live writer writes its partitions while the
/// load goes on with the others, and each staged part's rows (for the metrics).
pub struct LoadWatch {
    loading: Mutex<std::collections::HashSet<String>>,
    wake: Arc<tokio::sync::Notify>,
    /// Called with a table, the rows just staged for it, and the position.
    on_staged: Option<Box<StagedReport>>,
}

/// What [`LoadWatch::on_staged`] calls: a table, the rows just staged, the position.
type StagedReport = dyn Fn(&str, u64, u64) + Send + Sync;

impl std::fmt::Debug for LoadWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadWatch")
            .field("loading", &self.loading)
            .finish_non_exhaustive()
    }
}

impl LoadWatch {
    /// A watch that wakes `wake` when a table is done.
    pub fn new(wake: Arc<tokio::sync::Notify>) -> LoadWatch {
        LoadWatch {
            loading: Mutex::new(std::collections::HashSet::new()),
            wake,
            on_staged: None,
        }
    }

    /// Calls `report(table, rows, position)` after each part of the load is staged.
    #[must_use]
    pub fn on_staged(mut self, report: impl Fn(&str, u64, u64) + Send + Sync + 'static) -> Self {
        self.on_staged = Some(Box::new(report));
        self
    }

    /// Whether the load is still reading `table` (`schema.name`).
    pub fn is_loading(&self, table: &str) -> bool {
        self.set().contains(table)
    }

    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.loading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn finish(&self, table: &str) {
        self.set().remove(table);
        self.wake.notify_one();
    }
}

/// Marks tables loading for its life: whatever ends the load (done, an error, a
/// cancelled task), none is left waiting.
struct Loading<'a>(Option<&'a LoadWatch>);

impl Loading<'_> {
    fn finish(&self, table: &str) {
        if let Some(watch) = self.0 {
            watch.finish(table);
        }
    }

    fn staged(&self, table: &str, rows: u64, position: u64) {
        if let Some(report) = self.0.and_then(|w| w.on_staged.as_ref()) {
            report(table, rows, position);
        }
    }
}

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        if let Some(watch) = self.0 {
            watch.set().clear();
            watch.wake.notify_one();
        }
    }
}

/// What the load needs besides the connection.
#[derive(Debug, Clone)]
pub(super) struct LoadOptions {
    /// Weir's slot, whose confirmed position must not be past the snapshot's.
    pub slot: String,
    /// Worker connections.
    pub parallelism: usize,
    /// About the rows of one range (one staged write).
    pub range_rows: usize,
    /// Where the tables being loaded are published, if anyone listens.
    pub watch: Option<Arc<LoadWatch>>,
}

/// One range of pages of one table: `from` inclusive, `to` exclusive (`None`: to the
/// end, so pages added after the table was sized are read too).
#[derive(Debug, Clone, Copy)]
struct PageRange {
    table: usize,
    from: u64,
    to: Option<u64>,
    /// Read again after a lost connection: some of its rows may be staged already.
    again: bool,
}

/// A table to load: how to read it and how far it got.
#[derive(Debug)]
struct Planned {
    /// The `COPY` query without its range condition.
    select: String,
    /// Each configured column's type OID and modifier, in `select`'s order.
    types: Vec<(u32, i32)>,
    ranges_left: usize,
    rows: u64,
    rows_estimate: u64,
    bar: Option<indicatif::ProgressBar>,
    /// A valid unique index of the source has only key columns: in one snapshot no key
    /// repeats, so its rows are staged without looking their keys up.
    unique_key: bool,
    /// Which files held the table before the load read it ([`relation_files`]): the
    /// load holds a lock that keeps them from its first range to its end, so pages
    /// left by a load that stopped are the same pages while these are the same files.
    files: String,
}

/// Whether table `index` is loaded with a key the source enforces unique.
fn loaded_unique(planned: &[Option<Planned>], index: usize) -> bool {
    planned
        .get(index)
        .and_then(Option::as_ref)
        .is_some_and(|p| p.unique_key)
}

/// How a table is read: its `COPY` query without the range condition, and each
/// column's type OID and modifier.
type Reader = (String, Vec<(u32, i32)>);

/// Rows read from a range, as stage changes: a range is sent in parts of at most
/// `range_rows` rows (one range can be a whole table: before PostgreSQL 14, or sized
/// by stale statistics), its last part saying so.
#[derive(Debug)]
struct RangeRead {
    table: usize,
    /// The range is read again (see [`PageRange::again`]).
    again: bool,
    /// The range's pages, `from` and `to`.
    range: (u64, Option<u64>),
    /// The part's changes, unless the stage prepared them (`prepared`).
    changes: Vec<StageChange>,
    /// The part made ready by the stage on the worker's thread (see
    /// [`StagePort::prepare_load`]).
    prepared: Option<PreparedPart>,
    /// Rows read in the part.
    rows: u64,
    last: bool,
}

/// Loads every table whose columns Weir reads in binary from one exported snapshot,
/// stages the rows at the snapshot's consistent point with the snapshot progress
/// (those tables done), and returns that point: the slot streams from there. `None`
/// when the load cannot run here (no table it can read, a server older than 12, no
/// free replication slot for the export): the watermark snapshot takes every table.
pub(super) async fn first_load(
    dsn: &Dsn,
    options: &LoadOptions,
    tables: &[TableConfig],
    stage: &Arc<dyn StagePort>,
) -> Result<Option<u64>, PgSourceError> {
    let query = |what: &'static str| {
        move |source| PgSourceError::Query {
            what,
            source: PgError(source),
        }
    };
    let catalog = connect(dsn).await?;
    let version: i32 = catalog
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(query("read the server's version"))?
        .get(0);
    if version < LOAD_MIN_VERSION {
        tracing::info!(
            version,
            "the first load reads with watermarks: parallel loading needs PostgreSQL 12 or later"
        );
        return Ok(None);
    }
    let mut planned: Vec<Option<Planned>> = Vec::with_capacity(tables.len());
    for table in tables {
        planned.push(plan(&catalog, table).await?);
    }
    if planned.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut exporter = match ReplicationClient::connect(dsn).await {
        Ok(client) => client,
        // 53300: every walsender is in use (`max_wal_senders`); Weir's stream holds one.
        Err(error) if error.code() == Some("53300") => {
            tracing::warn!(
                "no free walsender for the first load's exported snapshot (raise max_wal_senders by one); reading with watermarks instead"
            );
            return Ok(None);
        }
        Err(error) => return Err(error.into()),
    };
    let name = format!(
        "weir_load_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let waits = super::slots::report_slot_waits(dsn);
    let created = exporter
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT {name} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
        ))
        .await;
    waits.abort();
    let created = match created {
        Ok(rows) => rows,
        // 53400: every replication slot is in use.
        Err(error) if error.code() == Some("53400") => {
            tracing::warn!(
                "no free replication slot for the first load's exported snapshot (raise max_replication_slots by one); reading with watermarks instead"
            );
            exporter.close().await;
            return Ok(None);
        }
        Err(error) => return Err(error.into()),
    };
    let row = created.first();
    let field = |i: usize| row.and_then(|r| r.get(i)).cloned().flatten();
    let (Some(point), Some(snapshot)) = (
        field(1).as_deref().and_then(crate::pg::lsn::parse_lsn),
        field(2),
    ) else {
        return Err(PgSourceError::BadChange {
            table: name,
            reason: "CREATE_REPLICATION_SLOT returned no consistent point or snapshot name".into(),
        });
    };
    let confirmed: Option<String> = catalog
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&options.slot],
        )
        .await
        .map_err(query("read the slot's confirmed position"))?
        .and_then(|r| r.get(0));
    if confirmed
        .as_deref()
        .and_then(crate::pg::lsn::parse_lsn)
        .is_some_and(|c| c > point)
    {
        // Another consumer moved the slot on: the stream cannot start at the snapshot.
        tracing::warn!(slot = %options.slot, "the slot's confirmed position is past the exported snapshot; reading with watermarks instead");
        exporter.close().await;
        return Ok(None);
    }
    let tid_ranges = version >= TID_RANGE_SCAN_VERSION;
    let mut queue = VecDeque::new();
    // Staged with each part: the tables done, and the pages of the others not staged
    // yet (what a run after a crash reads of them, with watermarks).
    let mut progress = SnapshotProgress::default();
    for (i, p) in planned.iter_mut().enumerate() {
        let Some(p) = p else { continue };
        let ranges = ranges_of(i, p, tables, &catalog, tid_ranges, options).await?;
        p.ranges_left = ranges.len();
        if tid_ranges && let Some(table) = tables.get(i) {
            progress.pages.push(PagesLeft {
                table: table.source.to_string(),
                files: std::mem::take(&mut p.files),
                ranges: ranges.iter().map(|r| (r.from, r.to)).collect(),
                begun: false,
            });
        }
        queue.extend(ranges);
    }
    let loading = Loading(options.watch.as_deref());
    if let Some(watch) = loading.0 {
        let mut set = watch.set();
        for (p, table) in planned.iter().zip(tables) {
            if p.is_some() {
                set.insert(table.source.to_string());
            }
        }
    }
    let bars = progress_bars(&mut planned, tables);
    let started = Instant::now();
    tracing::info!(
        snapshot_at = %crate::pg::lsn::format_lsn(point),
        tables = planned.iter().flatten().count(),
        ranges = queue.len(),
        workers = options.parallelism,
        "first load starts from an exported snapshot"
    );
    let ranges = queue.len();
    let queue = Arc::new(Mutex::new(queue));
    let (sender, mut received) = tokio::sync::mpsc::channel::<RangeRead>(1);
    let mut workers = tokio::task::JoinSet::new();
    let readers: Vec<Reader> = planned
        .iter()
        .map(|p| {
            p.as_ref()
                .map(|p| (p.select.clone(), p.types.clone()))
                .unwrap_or_default()
        })
        .collect();
    let readers = Arc::new(readers);
    // Which tables' parts the workers prepare for the stage (keys new to it).
    let prepare: Arc<Vec<bool>> = Arc::new(
        (0..planned.len())
            .map(|i| loaded_unique(&planned, i))
            .collect(),
    );
    let literal =
        crate::config::quote_literal(&snapshot).ok_or_else(|| PgSourceError::BadChange {
            table: name.clone(),
            reason: "the exported snapshot's name holds a NUL".into(),
        })?;
    // Rows that share a key no index enforces would be one row in the stage: refused
    // before anything is staged, as the snapshot holds them.
    if planned.iter().flatten().any(|p| !p.unique_key) {
        let check = import_snapshot(dsn, &literal).await?;
        for (p, table) in planned.iter().zip(tables) {
            if p.as_ref().is_some_and(|p| !p.unique_key) {
                refuse_shared_keys(&check, table).await?;
            }
        }
    }
    for _ in 0..options.parallelism.min(ranges).max(1) {
        let worker = Worker {
            client: import_snapshot(dsn, &literal).await?,
            dsn: dsn.clone(),
            snapshot: literal.clone(),
            queue: Arc::clone(&queue),
            readers: Arc::clone(&readers),
            tables: tables.to_vec(),
            position: point,
            sender: sender.clone(),
            stage: Arc::clone(stage),
            prepare: Arc::clone(&prepare),
            tid_ranges,
            part_rows: options.range_rows.max(1),
            part_bytes: crate::limits::INTAKE_BATCH_BYTES
                / options.parallelism.saturating_add(2).max(1),
        };
        workers.spawn(worker.run());
    }
    drop(sender);
    // Every worker imported the snapshot: it no longer needs the exporting connection,
    // but the slot goes with it, so it stays open to the end.
    let mut last_log = Instant::now();
    // Time in the stage's synced writes: the rest is waiting for the readers.
    let mut staging_time = Duration::ZERO;
    while let Some(read) = received.recv().await {
        // A worker that failed stops the load now, not after the others finish.
        while let Some(result) = workers.try_join_next() {
            result??;
        }
        let Some(Some(p)) = planned.get_mut(read.table) else {
            continue;
        };
        let rows = read.rows;
        p.rows += rows;
        let name = tables
            .get(read.table)
            .map(|t| t.source.to_string())
            .unwrap_or_default();
        if read.last {
            p.ranges_left = p.ranges_left.saturating_sub(1);
            progress.pages_staged(&name, read.range.0, read.range.1);
        }
        if read.last && p.ranges_left == 0 {
            progress.done.push(name.clone());
            progress.complete = tables
                .iter()
                .all(|t| progress.done.contains(&t.source.to_string()));
        }
        let mut changes = read.changes;
        changes.push(StageChange::SourceState(encode(&progress, &name)?));
        crate::failpoint!("load-range");
        let stage = Arc::clone(stage);
        let staging = Instant::now();
        // A range read again may hold keys staged by its first read.
        let new_keys = loaded_unique(&planned, read.table) && !read.again;
        // Synced when it finishes a table (whose partitions may then be written) and at
        // the end; a part between is made durable by the next sync (see `apply_load`).
        let sync = read.last
            && planned
                .get(read.table)
                .is_some_and(|p| p.as_ref().is_some_and(|p| p.ranges_left == 0));
        let prepared = read.prepared;
        tokio::task::spawn_blocking(move || match prepared {
            Some(part) => stage.stage_prepared(part, &changes, point, sync),
            None => stage.stage_load(&changes, point, new_keys, sync),
        })
        .await??;
        staging_time += staging.elapsed();
        tracing::debug!(table = %name, rows, last = read.last, "first load part staged");
        loading.staged(&name, rows, point);
        // Reported once staged: a table logged done is done in the stage.
        let Some(Some(loaded)) = planned.get(read.table) else {
            continue;
        };
        if read.last && loaded.ranges_left == 0 {
            loading.finish(&name);
        }
        if let Some(bar) = &loaded.bar {
            bar.set_position(loaded.rows);
            if loaded.ranges_left == 0 {
                bar.finish();
            }
        } else if read.last && loaded.ranges_left == 0 {
            // Its last line, once.
            if let Some(table) = tables.get(read.table) {
                log_table(loaded, table, started);
            }
        } else if last_log.elapsed() >= LOG_INTERVAL {
            log_progress(&planned, tables, started);
            last_log = Instant::now();
        }
    }
    while let Some(result) = workers.join_next().await {
        result??;
    }
    // The position is the snapshot's even if no table held a row.
    let state = encode(&progress, "the first load")?;
    let stage_for_end = Arc::clone(stage);
    tokio::task::spawn_blocking(move || {
        stage_for_end.stage_load(&[StageChange::SourceState(state)], point, false, true)
    })
    .await??;
    exporter.close().await;
    drop(bars);
    let rows: u64 = planned.iter().flatten().map(|p| p.rows).sum();
    let seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        rows,
        elapsed_ms = started.elapsed().as_millis() as u64,
        rows_per_s = (rows as f64 / seconds.max(0.001)) as u64,
        staging_ms = staging_time.as_millis() as u64,
        tables_left = tables.len().saturating_sub(progress.done.len()),
        "first load staged"
    );
    if progress.complete {
        tracing::info!(rows, "initial snapshot complete");
    }
    Ok(Some(point))
}

/// How to read `table` in the load, or `None` if a configured column has a type Weir
/// does not read in binary (the watermark snapshot reads it, in text).
async fn plan(
    catalog: &tokio_postgres::Client,
    table: &TableConfig,
) -> Result<Option<Planned>, PgSourceError> {
    let types = column_types(catalog, &table.source).await?;
    let mut columns = Vec::with_capacity(table.columns.len());
    for column in &table.columns {
        match types.get(&column.name) {
            Some(&(oid, modifier)) if pgtypes::reads_binary(oid) => columns.push((oid, modifier)),
            _ => {
                tracing::info!(table = %table.source, column = %column.name, "read with watermarks, in text: a column Weir does not read in binary");
                return Ok(None);
            }
        }
    }
    let names: Vec<String> = table.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let files = relation_files(catalog, &table.source).await?;
    // A unique index (not partial, no expression, valid) whose columns are all key
    // columns makes the key unique in any snapshot (a key column is never NULL).
    let unique_key: bool = catalog
        .query_one(
            "SELECT coalesce(bool_or(i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL \
                 AND (SELECT array_agg(a.attname::text) FROM pg_attribute a \
                      WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) <@ $2::text[]), false) \
             FROM pg_index i WHERE i.indrelid = to_regclass($1)",
            &[&table.source.quoted(), &table.key],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read a source table's unique indexes",
            source: PgError(source),
        })?
        .get(0);
    Ok(Some(Planned {
        select: format!("SELECT {} FROM {}", names.join(", "), table.source.quoted()),
        types: columns,
        ranges_left: 0,
        rows: 0,
        rows_estimate: 0,
        bar: None,
        unique_key,
        files,
    }))
}

/// The page ranges of one table, about `range_rows` rows each (from the planner's
/// rows per page), at least two per worker when the table is large enough, and small
/// enough that the ranges in flight hold about `INTAKE_BATCH_BYTES`. The
/// largest relation of a partitioned table sets its number of pages: each range reads
/// those pages of every partition.
async fn ranges_of(
    index: usize,
    planned: &mut Planned,
    tables: &[TableConfig],
    catalog: &tokio_postgres::Client,
    tid_ranges: bool,
    options: &LoadOptions,
) -> Result<Vec<PageRange>, PgSourceError> {
    let Some(table) = tables.get(index) else {
        return Ok(Vec::new());
    };
    let size = table_size(catalog, &table.source).await?;
    let pages = size.pages;
    planned.rows_estimate = size.tuples as u64;
    if !tid_ranges || pages == 0 {
        return Ok(vec![PageRange {
            table: index,
            from: 0,
            to: None,
            again: false,
        }]);
    }
    let by_rows = size.pages_for_rows(options.range_rows);
    let by_workers = pages
        .div_ceil(options.parallelism.saturating_mul(2).max(1) as u64)
        .max(1);
    // Memory: each worker holds one range and one waits to be staged, so the ranges in
    // flight, (2 × workers + 1), hold about INTAKE_BATCH_BYTES of table data at most.
    let in_flight = options.parallelism.saturating_mul(2).saturating_add(1) as u64;
    let by_memory = (crate::limits::INTAKE_BATCH_BYTES as u64 / PAGE_BYTES / in_flight).max(1);
    let step = by_rows.min(by_workers).min(by_memory);
    let mut ranges = Vec::new();
    let mut from = 0;
    while from < pages {
        let to = from.saturating_add(step);
        ranges.push(PageRange {
            table: index,
            from,
            to: (to < pages).then_some(to),
            again: false,
        });
        from = to;
    }
    Ok(ranges)
}

/// A table's size: its pages (of its largest leaf, if partitioned) and the planner's
/// rows and pages.
#[derive(Debug, Clone, Copy)]
pub(super) struct TableSize {
    pub(super) pages: u64,
    pub(super) tuples: f64,
    stat_pages: u64,
}

impl TableSize {
    /// Pages holding about `rows` rows, by the planner's rows per page (at least one).
    pub(super) fn pages_for_rows(&self, rows: usize) -> u64 {
        let rows_per_page = if self.tuples > 0.0 && self.stat_pages > 0 {
            self.tuples / self.stat_pages as f64
        } else {
            ROWS_PER_PAGE_UNKNOWN
        };
        ((rows as f64 / rows_per_page.max(1.0)).ceil() as u64).max(1)
    }
}

/// The leaves of a table (a plain table is its own; for it `pg_partition_tree` may have
/// no row), as a `WITH` clause naming them `leaves(relid)`, for the table `$1`.
const LEAVES: &str = "WITH r AS (SELECT to_regclass($1) AS oid), \
     leaves AS (SELECT t.relid FROM r, pg_partition_tree(r.oid) t WHERE t.isleaf \
                UNION SELECT r.oid FROM r)";

/// The size of `table` now.
pub(super) async fn table_size(
    catalog: &tokio_postgres::Client,
    table: &TableName,
) -> Result<TableSize, PgSourceError> {
    let row = catalog
        .query_one(
            &format!(
                "{LEAVES} \
                 SELECT coalesce(max(pg_relation_size(c.oid) / current_setting('block_size')::int8), 0)::int8, \
                        coalesce(sum(greatest(c.reltuples, 0)), 0)::float8, \
                        coalesce(sum(greatest(c.relpages, 0)), 0)::int8 \
                 FROM leaves JOIN pg_class c ON c.oid = leaves.relid WHERE c.relkind <> 'p'"
            ),
            &[&table.quoted()],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "size a source table",
            source: PgError(source),
        })?;
    Ok(TableSize {
        pages: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
        tuples: row.get(1),
        stat_pages: u64::try_from(row.get::<_, i64>(2)).unwrap_or(0),
    })
}

/// Which files hold `table`'s rows now: each leaf relation's `oid:relfilenode`, in oid
/// order. A rewrite that moves rows to other pages (`VACUUM FULL`, `CLUSTER`,
/// `TRUNCATE`, a rewriting `ALTER TABLE`) gives a leaf a new file, and attaching or
/// detaching a partition changes the leaves: either changes this text.
pub(super) async fn relation_files(
    catalog: &tokio_postgres::Client,
    table: &TableName,
) -> Result<String, PgSourceError> {
    let row = catalog
        .query_one(
            &format!(
                "{LEAVES} \
                 SELECT coalesce(string_agg(c.oid::text || ':' || c.relfilenode::text, ',' ORDER BY c.oid), '') \
                 FROM leaves JOIN pg_class c ON c.oid = leaves.relid WHERE c.relkind <> 'p'"
            ),
            &[&table.quoted()],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read which files hold a source table",
            source: PgError(source),
        })?;
    Ok(row.get(0))
}

/// A connection in the exported snapshot (`literal`, quoted).
async fn import_snapshot(
    dsn: &Dsn,
    literal: &str,
) -> Result<tokio_postgres::Client, PgSourceError> {
    let client = connect(dsn).await?;
    client
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT {literal}"
        ))
        .await
        .map_err(|source| PgSourceError::Query {
            what: "import the exported snapshot",
            source: PgError(source),
        })?;
    Ok(client)
}

/// Connections a worker opens again after losing one, before the load fails (and the
/// next run reads the pages left with watermarks).
const WORKER_RECONNECTS: usize = 3;

/// Whether a worker's lost connection may be opened again in the same snapshot: the
/// connection closed, or the server ended it (classes 08 and 57, and 25P03, an idle
/// transaction timed out while the worker waited for the stage).
fn reconnectable(error: &PgSourceError) -> bool {
    let timed_out = matches!(error, PgSourceError::Query { source, .. }
        if source.code().is_some_and(|c| c.code() == "25P03"));
    error.is_transient() || timed_out
}

/// One worker: a connection in the imported snapshot, reading ranges until none is
/// left.
struct Worker {
    client: tokio_postgres::Client,
    /// Where to connect again, and the snapshot to import (quoted), after a lost
    /// connection: the exporting connection keeps the snapshot to the load's end.
    dsn: Dsn,
    snapshot: String,
    queue: Arc<Mutex<VecDeque<PageRange>>>,
    /// Each table's query and column types (empty: not loaded).
    readers: Arc<Vec<Reader>>,
    tables: Vec<TableConfig>,
    position: u64,
    sender: tokio::sync::mpsc::Sender<RangeRead>,
    /// Where a part of a table whose key the source enforces unique is prepared (read
    /// for the first time: its keys are new to the stage), on the worker's thread.
    stage: Arc<dyn StagePort>,
    prepare: Arc<Vec<bool>>,
    tid_ranges: bool,
    /// Rows of one part of a range sent to be staged, and about its bytes at most:
    /// the parts in flight (one per worker, one waiting, one being staged) hold about
    /// `INTAKE_BATCH_BYTES` in all.
    part_rows: usize,
    part_bytes: usize,
}

impl Worker {
    async fn run(mut self) -> Result<(), PgSourceError> {
        let mut reconnects = 0;
        loop {
            let next = self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop_front();
            let Some(range) = next else { break };
            match self.read(range).await {
                Ok(true) => {}
                // The load stopped (an error staging): nothing more to read.
                Ok(false) => break,
                Err(error) if reconnects < WORKER_RECONNECTS && reconnectable(&error) => {
                    reconnects += 1;
                    let table = self.tables.get(range.table).map(|t| t.source.to_string());
                    tracing::warn!(
                        table,
                        from_page = range.from,
                        %error,
                        "a first load connection was lost: its range is read again in the same snapshot, on a new connection"
                    );
                    // Fails if the snapshot is gone too; the load then stops, and the
                    // next run reads the pages left with watermarks.
                    self.client = import_snapshot(&self.dsn, &self.snapshot).await?;
                    self.queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push_front(PageRange {
                            again: true,
                            ..range
                        });
                }
                Err(error) => return Err(error),
            }
        }
        // The transaction only read: ending it is all there is to do.
        let _ = self.client.batch_execute("COMMIT").await;
        Ok(())
    }

    /// Reads one range by binary `COPY`, decoded into stage changes and sent in parts
    /// of at most `part_rows` rows. `false`: the receiver is gone.
    async fn read(&self, range: PageRange) -> Result<bool, PgSourceError> {
        let (Some(table), Some((select, types))) =
            (self.tables.get(range.table), self.readers.get(range.table))
        else {
            return Ok(true);
        };
        let name = table.source.to_string();
        let mut sql = select.clone();
        if self.tid_ranges {
            sql.push_str(&format!(" WHERE ctid >= '({},0)'::tid", range.from));
            if let Some(to) = range.to {
                sql.push_str(&format!(" AND ctid < '({to},0)'::tid"));
            }
        }
        let copy = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let query = |source| PgSourceError::Query {
            what: "read a range of the first load",
            source: PgError(source),
        };
        let stream = self.client.copy_out(&copy).await.map_err(query)?;
        // The column types only matter to `FromSql`, which `Raw` accepts whatever
        // they are: the values are decoded by their real types below.
        let wire_types = vec![Type::BYTEA; types.len()];
        let rows = BinaryCopyOutStream::new(stream, &wire_types);
        pin_mut!(rows);
        let mut changes = Vec::with_capacity(self.part_rows);
        let mut bytes = 0usize;
        while let Some(row) = rows.next().await {
            let row = row.map_err(query)?;
            let mut values = Vec::with_capacity(types.len());
            for (i, (column, &(oid, modifier))) in table.columns.iter().zip(types).enumerate() {
                let raw: Raw<'_> = row.try_get(i).map_err(query)?;
                let value = match raw.0 {
                    None => Value::Null,
                    Some(bytes) => pgtypes::decode_binary(&column.name, oid, modifier, bytes)
                        .map_err(|source| PgSourceError::Value {
                            table: name.clone(),
                            column: column.name.clone(),
                            source,
                        })?,
                };
                values.push((column.name.clone(), value));
            }
            let keyed = keyed_changes(table, Op::Read, None, Some(values), self.position, None)
                .map_err(|reason| PgSourceError::BadChange {
                    table: name.clone(),
                    reason,
                })?;
            bytes += keyed.iter().map(StageChange::approx_bytes).sum::<usize>();
            changes.extend(keyed);
            if changes.len() >= self.part_rows || bytes >= self.part_bytes {
                bytes = 0;
                let part = std::mem::replace(&mut changes, Vec::with_capacity(self.part_rows));
                if !self.send(range, part, false).await? {
                    return Ok(false);
                }
            }
        }
        self.send(range, changes, true).await
    }

    /// Sends a part to be staged, prepared first by the stage if its keys are new to
    /// it; `false`: the receiver is gone.
    async fn send(
        &self,
        range: PageRange,
        changes: Vec<StageChange>,
        last: bool,
    ) -> Result<bool, PgSourceError> {
        let rows = changes.len() as u64;
        let (changes, prepared) =
            if !range.again && self.prepare.get(range.table).copied().unwrap_or(false) {
                let stage = Arc::clone(&self.stage);
                // The part's rows are freed here too, off the staging thread.
                tokio::task::spawn_blocking(move || match stage.prepare_load(&changes)? {
                    Some(part) => Ok::<_, PgSourceError>((Vec::new(), Some(part))),
                    None => Ok((changes, None)),
                })
                .await??
            } else {
                (changes, None)
            };
        let read = RangeRead {
            table: range.table,
            again: range.again,
            range: (range.from, range.to),
            changes,
            prepared,
            rows,
            last,
        };
        Ok(self.sender.send(read).await.is_ok())
    }
}

/// A value's bytes as sent, whatever its type (`None`: SQL NULL).
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> FromSql<'a> for Raw<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// On a terminal, a bar per table loaded (rows, rate, time left from the planner's
/// estimate); `None` otherwise (progress is logged).
fn progress_bars(
    planned: &mut [Option<Planned>],
    tables: &[TableConfig],
) -> Option<indicatif::MultiProgress> {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return None;
    }
    let bars = indicatif::MultiProgress::new();
    let style = indicatif::ProgressStyle::with_template(
        "{prefix:>24} {bar:30} {human_pos}/{human_len} rows, {per_sec}, ETA {eta}",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    for (p, table) in planned.iter_mut().zip(tables) {
        let Some(p) = p else { continue };
        let bar = bars.add(indicatif::ProgressBar::new(p.rows_estimate.max(1)));
        bar.set_style(style.clone());
        bar.set_prefix(table.source.to_string());
        p.bar = Some(bar);
    }
    Some(bars)
}

/// Logs the rows, rate and time left of each table still loading (a JSON line with
/// `--log-format json`); a table's last line is logged once, as it is done.
fn log_progress(planned: &[Option<Planned>], tables: &[TableConfig], started: Instant) {
    for (p, table) in planned.iter().zip(tables) {
        if let Some(p) = p.as_ref().filter(|p| p.ranges_left > 0) {
            log_table(p, table, started);
        }
    }
}

/// One table's `first load progress` line. The time left is left out until a row is
/// loaded (no rate to reckon it by).
fn log_table(p: &Planned, table: &TableConfig, started: Instant) {
    let seconds = started.elapsed().as_secs_f64().max(0.001);
    let rows_per_s = p.rows as f64 / seconds;
    let eta_s = match p.ranges_left {
        0 => Some(0),
        _ if p.rows == 0 => None,
        _ => Some((p.rows_estimate.saturating_sub(p.rows) as f64 / rows_per_s.max(1.0)) as u64),
    };
    tracing::info!(
        table = %table.source,
        rows_done = p.rows,
        rows_estimate = p.rows_estimate,
        rows_per_s = rows_per_s as u64,
        eta_s,
        done = p.ranges_left == 0,
        "first load progress"
    );
}

fn encode(progress: &SnapshotProgress, table: &str) -> Result<Vec<u8>, PgSourceError> {
    progress.encode(table)
}
