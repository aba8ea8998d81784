//! The streaming source: the replication stream, assembled, as a `ChangeSource`.

use crate::pgerror::PgError;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::assembler::{Assembler, Unstaged};
use super::error::PgSourceError;
use super::load::{LoadOptions, LoadWatch, first_load};
use super::progress::SnapshotProgress;
use super::publication::{LeafSets, PublicationMark, check_relations};
use super::replication::{
    ReplicationClient, ReplicationError, ReplicationEvent, ReplicationStream,
};
use super::resync::{emit_drain_message, write_server};
use super::setup::{check_estate, connect};
use super::snapshot::{RESYNC_PREFIX, ResyncSignal, Seen, Snapshot, WATERMARK_PREFIX, Watermark};
use super::stage_port::StagePort;
use crate::config::{Dsn, TableConfig, TableName, quote_ident};
use crate::feed::StageChange;
use crate::pg::lsn::format_lsn;
use crate::pg::pgoutput::{Decoder, PgOutputMessage, Relation};
use crate::source::{ChangeSource, Position, SourceError, SourceEvent};

/// How long the source waits for the server before it reports `Idle`, so the engine
/// can stage and write what it has.
const IDLE_AFTER_MS: u64 = 200;
/// Standby status updates go out at least this often, so the server's view of the
/// acknowledged position (and so the WAL it keeps) stays current on an idle stream.
const STATUS_INTERVAL_MS: u64 = 10_000;
/// The prefix of the heartbeat messages of an idle stream.
const HEARTBEAT_PREFIX: &str = "weir.heartbeat";
/// How often a run reads the publication's mark again (see [`PublicationMark`]): an
/// `ALTER PUBLICATION` while Weir streams stops the run within about this long.
const PUBLICATION_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What [`PostgresSource::open`] needs besides the connection.
#[derive(Debug, Clone)]
pub struct PostgresSourceOptions {
    /// The logical replication slot streamed from.
    pub slot: String,
    /// The publication the slot decodes with.
    pub publication: String,
    /// Drain what is committed now, then end (`run --once`).
    pub once: bool,
    /// Changes of one transaction held before they go to the stage as a chunk.
    pub chunk_changes_max: usize,
    /// Rows per snapshot chunk (each read between a low and a high watermark), and
    /// about the rows of one range of the first load.
    pub snapshot_chunk_rows: usize,
    /// Connections the first load reads with (`[source] snapshot_parallelism`).
    pub snapshot_parallelism: usize,
    /// `Export`: a first load reads from an exported snapshot ([`super::load`]);
    /// `Watermarks`: every table is read between watermarks.
    pub snapshot_method: crate::config::SnapshotMethod,
    /// Told which tables a first load is still reading ([`LoadWatch`]).
    pub load_watch: Option<Arc<LoadWatch>>,
    /// After this long without a change, a heartbeat goes into the source's WAL.
    pub heartbeat_interval_ms: u64,
    /// The primary's DSN when the source DSN is a hot standby that decodes: snapshot
    /// chunks, watermarks, heartbeats and drain messages go there (a standby cannot
    /// write; the WAL carries them to it). Unused while the source is not in recovery.
    pub primary: Option<Dsn>,
    /// Ask the server to stream transactions in progress (`[source] streaming`).
    pub streaming: bool,
    /// Values may come in binary format (see `Protocol::of`); `false` after the stream
    /// met a column it cannot read in it.
    pub binary: bool,
    /// The source's WAL position just before the tables' columns were read from its
    /// catalog (0: not known): a transaction committed before it may lack a column
    /// added since ([`Assembler::with_catalog_lsn`]).
    pub catalog_lsn: u64,
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
    stage: Arc<dyn StagePort>,
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
    /// The initial snapshot, or a resync, while it runs.
    snapshot: Option<Snapshot>,
    /// The snapshot progress when no snapshot runs (as staged, or as the last one left
    /// it): what a resync signal starts from.
    progress: SnapshotProgress,
    /// A resync signal was read (the table): once its transaction is handed out, the
    /// stream is reopened, without in-progress streaming, to read the table.
    reopen_for: Option<String>,
    /// A resync signal read in a transaction streamed in progress (its xid, the table):
    /// the reopen waits for its commit, and an abort voids it.
    resync_streamed: Option<(u32, String)>,
    /// Where heartbeats go: the source, or the primary of a standby that decodes.
    write_dsn: Dsn,
    heartbeat_interval: Duration,
    /// When the stream last carried data (or a heartbeat was written).
    last_activity: Instant,
    /// How far the stream runs behind the source's commits (see [`Self::behind`]).
    behind: Duration,
    /// A connection for heartbeats, opened when the first one is due.
    heartbeat_client: Option<tokio_postgres::Client>,
    /// The transaction of the stream's current changes (a `Begin`'s), for the
    /// snapshot's visibility checks.
    xid: Option<u32>,
    /// The top-level transaction of the streamed block being decoded (a Stream
    /// Start's), likewise.
    stream_block: Option<u32>,
    /// The publication as the stage recorded it, and when it was last read again.
    publication_mark: PublicationMark,
    mark_checked: Instant,
    /// Each configured table's relation OID (as the assembler's tables).
    oids: Vec<u32>,
    publication: String,
    /// A connection for catalog look-ups of the relations the stream describes, made
    /// again from `catalog_dsn` when it is found closed ([`Self::ensure_catalog`]).
    catalog: tokio_postgres::Client,
    catalog_dsn: Dsn,
    /// The domains and enums the stream's relations hold, read from the catalog.
    types: super::types::UserTypes,
    /// Partitions of configured tables the stream described (OID: name and the
    /// table's index): a change under one of them is refused.
    leaves: HashMap<u32, (String, usize)>,
    /// Each configured table's leaves (by the table's OID) when last read, by
    /// [`Self::check_relations`].
    leaf_sets: Option<LeafSets>,
    /// Values come in binary format ([`Protocol`]).
    binary: bool,
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
        stage: Arc<impl StagePort + 'static>,
        checkpoint: Option<Position>,
    ) -> Result<PostgresSource, PgSourceError> {
        // The source lost after a first load staged the tables (its walsender ended):
        // an interrupted load, which a live run waits out, keeping what was staged.
        let mut loaded = false;
        Self::open_loading(dsn, options, tables, stage, checkpoint, &mut loaded)
            .await
            .map_err(|e| match e {
                e if loaded
                    && e.is_transient()
                    && !matches!(e, PgSourceError::LoadInterrupted(_)) =>
                {
                    PgSourceError::LoadInterrupted(Box::new(e))
                }
                e => e,
            })
    }

    async fn open_loading(
        dsn: &Dsn,
        options: &PostgresSourceOptions,
        tables: Vec<TableConfig>,
        stage: Arc<impl StagePort + 'static>,
        checkpoint: Option<Position>,
        loaded: &mut bool,
    ) -> Result<PostgresSource, PgSourceError> {
        let stage: Arc<dyn StagePort> = stage;
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
        // A publication altered since the stage last read it may have hidden changes
        // that no read of the slot brings back: stopped, not taken.
        let publication_mark =
            PublicationMark::read(&catalog, &options.publication, &tables, &estate.oids).await?;
        if let Some(earlier) = stage
            .publication_mark()?
            .as_deref()
            .and_then(PublicationMark::decode)
            && let Some(what) = publication_mark.changed_since(&earlier)
        {
            return Err(PublicationMark::changed_error(&options.publication, &what));
        }
        stage.set_publication_mark(&publication_mark.encode())?;
        let primary = write_server(&catalog, options.primary.as_ref()).await?;
        let mut checkpoint = checkpoint;
        if checkpoint.is_none()
            && primary.is_none()
            && options.snapshot_method == crate::config::SnapshotMethod::Export
            && stage.source_state()?.is_none()
        {
            // Nothing staged yet: the tables are loaded from an exported snapshot, and
            // the stream starts at its point.
            let load = LoadOptions {
                slot: options.slot.clone(),
                parallelism: options.snapshot_parallelism,
                range_rows: options.snapshot_chunk_rows,
                watch: options.load_watch.clone(),
            };
            let loaded_at = first_load(dsn, &load, &tables, &stage).await.map_err(|e| {
                if e.is_transient() {
                    PgSourceError::LoadInterrupted(Box::new(e))
                } else {
                    e
                }
            })?;
            if let Some(position) = loaded_at {
                *loaded = true;
                checkpoint = Some(Position {
                    position,
                    cursor: 0,
                });
            }
        }
        let writes = primary.unwrap_or_else(|| dsn.clone());
        let snapshot = Snapshot::resume(
            &writes,
            &tables,
            stage.as_ref(),
            options.snapshot_chunk_rows,
            options.snapshot_parallelism,
            &estate.unenforced_keys,
        )
        .await?;
        let progress = if snapshot.is_none() {
            stage
                .source_state()?
                .and_then(|bytes| SnapshotProgress::decode(&bytes))
                .unwrap_or_default()
        } else {
            SnapshotProgress::default()
        };
        // The key guard: a table whose key nothing enforces, always; one whose key
        // may stop being enforced, once it is loaded (while its rows are still read,
        // a row the stream inserts may be staged already by a read of the pages left,
        // the same row twice).
        stage.set_guarded_keys(
            estate
                .guarded_keys
                .iter()
                .filter(|t| {
                    estate.unenforced_keys.contains(t)
                        || snapshot
                            .as_ref()
                            .is_none_or(|s| s.progress().complete || s.progress().done.contains(t))
                })
                .cloned()
                .collect(),
        );
        let drain_after = if options.once {
            Some(emit_drain_message(&writes).await?)
        } else {
            None
        };
        let start = checkpoint.map_or(0, |c| c.position);
        let protocol = Protocol::of(
            &catalog,
            options.streaming && snapshot.is_none(),
            options.binary.then_some(estate.oids.as_slice()),
        )
        .await?;
        // Values are quoted as literals by `start_logical`; the publication list is
        // parsed by pgoutput as identifiers.
        let publication = quote_ident(&options.publication);
        let version = protocol.version.to_string();
        let mut start_options = vec![
            ("proto_version", version.as_str()),
            ("publication_names", publication.as_str()),
            ("messages", "true"),
        ];
        if protocol.streaming {
            start_options.push(("streaming", "on"));
        }
        if protocol.binary {
            start_options.push(("binary", "true"));
        }
        let stream = client
            .start_logical(&options.slot, start, &start_options)
            .await?;
        let start =
            super::slots::hold_slot_to_stage(dsn, &options.slot, &stage, checkpoint).await?;
        tracing::info!(slot = %options.slot, start = %format_lsn(start), proto_version = protocol.version, in_progress = protocol.streaming, binary = protocol.binary, "streaming from the replication slot");
        Ok(PostgresSource {
            slot: options.slot.clone(),
            stream,
            decoder: Decoder::new(),
            assembler: Assembler::with_oids(
                tables,
                estate.oids.iter().copied().map(Some).collect(),
                options.chunk_changes_max,
            )
            .with_catalog_lsn(options.catalog_lsn),
            oids: estate.oids,
            publication: options.publication.clone(),
            catalog,
            catalog_dsn: dsn.clone(),
            types: super::types::UserTypes::default(),
            leaves: HashMap::new(),
            leaf_sets: None,
            binary: protocol.binary,
            stage,
            ready: VecDeque::new(),
            acknowledged: start,
            emitted: start,
            received: start,
            drain_after,
            drained: false,
            last_status: Instant::now(),
            snapshot,
            progress,
            reopen_for: None,
            resync_streamed: None,
            write_dsn: writes,
            heartbeat_interval: Duration::from_millis(options.heartbeat_interval_ms),
            last_activity: Instant::now(),
            behind: Duration::ZERO,
            heartbeat_client: None,
            publication_mark,
            mark_checked: Instant::now(),
            xid: None,
            stream_block: None,
        })
    }

    /// How far the stream runs behind the source's commits: from the last transaction's
    /// commit to the server sending its end (both read on the server's clock), or zero
    /// once the server said it has nothing more to send (a keepalive, or nothing within
    /// the idle wait). A backlog being caught up reads as seconds; a stream that keeps
    /// pace, as milliseconds.
    pub fn behind(&self) -> Duration {
        self.behind
    }

    /// A `weir resync` signal: the table's snapshot progress starts again (a whole
    /// table's staged rows dropped first), staged in the signal's own transaction, and
    /// the stream is reopened after it (see `reopen_for`). A signal Weir cannot act on
    /// is logged and passed over: it changes nothing staged.
    fn resync_signal(
        &mut self,
        m: &crate::pg::pgoutput::LogicalMessage,
    ) -> Result<Vec<SourceEvent>, PgSourceError> {
        if !m.transactional {
            tracing::warn!(position = %format_lsn(m.lsn), "a weir.resync message outside a transaction; passed over (run `weir resync` again)");
            return Ok(Vec::new());
        }
        let Ok(signal) = serde_json::from_slice::<ResyncSignal>(&m.content) else {
            tracing::warn!(position = %format_lsn(m.lsn), "a weir.resync message that is not a resync signal; passed over");
            return Ok(Vec::new());
        };
        if signal.slot.as_ref().is_some_and(|slot| *slot != self.slot) {
            tracing::debug!(table = %signal.table, "a resync signal of another pipeline (another slot); passed over");
            return Ok(Vec::new());
        }
        if !self
            .assembler
            .tables
            .iter()
            .any(|t| t.source.to_string() == signal.table)
        {
            tracing::warn!(table = %signal.table, "a resync signal for a table this config does not read; passed over");
            return Ok(Vec::new());
        }
        let progress = self
            .snapshot
            .as_ref()
            .map_or(&self.progress, |s| s.progress());
        let Some(next) = progress.with_resync(&signal.table, signal.filter.clone()) else {
            tracing::warn!(table = %signal.table, "a resync with --where of a table still being read whole; passed over (the read under way reads every row)");
            return Ok(Vec::new());
        };
        let mut changes = Vec::with_capacity(2);
        if signal.filter.is_none() {
            changes.push(StageChange::Truncate {
                table: signal.table.clone(),
            });
        }
        changes.push(StageChange::SourceState(next.encode(&signal.table)?));
        // Staged with the signal's transaction, or with nothing if it aborts. The source
        // reopens after its commit and reads the progress it staged.
        let events = self
            .assembler
            .push_changes(changes, m.xid, "a resync signal")?;
        tracing::info!(table = %signal.table, filter = signal.filter.is_some(), position = %format_lsn(m.lsn), "resync signal read; the table is read again");
        match self.assembler.streamed_xid() {
            Some(xid) => self.resync_streamed = Some((xid, signal.table)),
            None => self.reopen_for = Some(signal.table),
        }
        Ok(events)
    }

    /// Reads the publication's mark again: an `ALTER PUBLICATION` since the run began
    /// stops it (see [`PublicationMark`]), and the next start refuses the stage too.
    /// Connects the catalog connection again if the server closed it (a session
    /// terminated, an idle connection dropped by a firewall or a pooler): the stream
    /// goes on on its own connection, so nothing else would notice, and every
    /// acknowledgement, which first reads the publication, would fail from then on.
    async fn ensure_catalog(&mut self) -> Result<(), PgSourceError> {
        if self.catalog.is_closed() {
            tracing::warn!("the source's catalog connection was closed; connecting again");
            self.catalog = connect(&self.catalog_dsn).await?;
        }
        Ok(())
    }

    async fn check_publication(&mut self) -> Result<(), PgSourceError> {
        self.ensure_catalog().await?;
        let now = PublicationMark::read(
            &self.catalog,
            &self.publication,
            &self.assembler.tables,
            &self.oids,
        )
        .await?;
        if let Some(what) = now.changed_since(&self.publication_mark) {
            tracing::error!(publication = %self.publication, changed = %what, "the publication was altered while Weir streamed; stopping");
            return Err(PublicationMark::changed_error(&self.publication, &what));
        }
        check_relations(
            &self.catalog,
            &self.assembler.tables,
            &self.oids,
            &mut self.leaf_sets,
        )
        .await?;
        self.mark_checked = Instant::now();
        Ok(())
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
            let client = connect(&self.write_dsn).await?;
            client
                .batch_execute("SET synchronous_commit = on")
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "prepare heartbeats",
                    source: PgError(source),
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
                    source: PgError(source),
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
        let query = |what: &'static str| {
            move |source| PgSourceError::Query {
                what,
                source: PgError(source),
            }
        };
        self.ensure_catalog().await?;
        let tables = &self.assembler.tables;
        if self.binary
            && self.oids.contains(&relation.oid)
            && let Some(column) = relation
                .columns
                .iter()
                .find(|c| !crate::pg::pgtypes::reads_binary(c.type_oid))
        {
            return Err(PgSourceError::BinaryUnreadable {
                table: name.to_string(),
                column: column.name.clone(),
            });
        }
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

    /// The checks of [`Self::check_relation`] and [`Self::check_change`].
    /// A Relation message's domain and enum columns are first given the types they hold
    /// ([`super::types`]).
    async fn check_message(&mut self, message: &mut PgOutputMessage) -> Result<(), PgSourceError> {
        if let PgOutputMessage::Relation(relation) = message {
            self.ensure_catalog().await?;
            self.types.resolve_relation(&self.catalog, relation).await?;
            self.check_relation(relation).await?;
        }
        self.check_change(message)
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
                match &event {
                    SourceEvent::Transaction(txn) => self.emitted = self.emitted.max(txn.end),
                    SourceEvent::StreamCommit(commit) => {
                        self.emitted = self.emitted.max(commit.end);
                    }
                    _ => {}
                }
                return Ok(Some(event));
            }
            if !self.assembler.in_transaction()
                && let Some(table) = self.reopen_for.take()
            {
                // The signal's transaction is handed out (and staged before the source
                // opens again): the stream opens again, and its snapshot reads the table.
                return Err(PgSourceError::ReopenForResync { table });
            }
            if self.drained && self.snapshot.is_none() && !self.assembler.in_transaction() {
                return Ok(Some(SourceEvent::End));
            }
            if let Some(snapshot) = self.snapshot.as_mut()
                && snapshot.in_flight.is_none()
            {
                if !snapshot.start_chunk(&self.assembler.tables).await? {
                    tracing::info!(slot = %self.slot, rows = snapshot.rows_done, "initial snapshot complete");
                    self.progress = snapshot.progress().clone();
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
                self.behind = Duration::ZERO;
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
                    // The server is waiting for WAL: the stream has caught up.
                    self.behind = Duration::ZERO;
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
                    wal_start,
                    server_time_us,
                    data,
                    ..
                }) => {
                    self.received = self.received.max(wal_start);
                    self.last_activity = Instant::now();
                    let mut message = self.decoder.decode(&data)?;
                    let (commit_end, commit_time_us) = match &message {
                        PgOutputMessage::Commit(c) => (Some(c.end_lsn), c.commit_time_us),
                        PgOutputMessage::StreamCommit(c) => (Some(c.end_lsn), c.commit_time_us),
                        _ => (None, 0),
                    };
                    if commit_end.is_some() {
                        // Both times are the server's clock: no skew with this host's.
                        let lag_us = server_time_us.saturating_sub(commit_time_us);
                        self.behind = Duration::from_micros(u64::try_from(lag_us).unwrap_or(0));
                    }
                    if let (Some(end), Some(mark)) = (commit_end, self.drain_after)
                        && end > mark
                    {
                        self.drained = true;
                    }
                    if let Err(error) = self.check_message(&mut message).await {
                        // In a streamed block, judged at its transaction's commit.
                        match message.stream_xid() {
                            Some(subxid) => {
                                if let Some(error) = self.assembler.defer_error(subxid, error) {
                                    return Err(error);
                                }
                                continue;
                            }
                            None => return Err(error),
                        }
                    }
                    if let PgOutputMessage::Message(m) = &message
                        && m.prefix == RESYNC_PREFIX
                    {
                        let events = self.resync_signal(m)?;
                        self.ready.extend(events);
                    }
                    match &message {
                        PgOutputMessage::StreamCommit(c)
                            if self
                                .resync_streamed
                                .as_ref()
                                .is_some_and(|(x, _)| *x == c.xid) =>
                        {
                            self.reopen_for = self.resync_streamed.take().map(|(_, t)| t);
                        }
                        PgOutputMessage::StreamAbort(a)
                            if a.xid == a.subxact_xid
                                && self
                                    .resync_streamed
                                    .as_ref()
                                    .is_some_and(|(x, _)| *x == a.xid) =>
                        {
                            self.resync_streamed = None;
                        }
                        _ => {}
                    }
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
                        Some(snapshot) => {
                            let staged = || lookup(name, key).is_some();
                            snapshot.unstaged(table, name, key, &staged)
                        }
                    };
                    // A transaction sent whole after its commit is judged by the chunk's
                    // snapshots; an in-progress one streamed in blocks (which may still
                    // abort) at its commit, by the tables its blocks changed.
                    let xid = match &message {
                        PgOutputMessage::Begin(b) => {
                            self.xid = Some(b.xid);
                            Seen::Xid(b.xid)
                        }
                        PgOutputMessage::StreamStart(s) => {
                            self.stream_block = Some(s.xid);
                            Seen::Block(s.xid)
                        }
                        PgOutputMessage::StreamStop => {
                            Seen::Block(self.stream_block.take().unwrap_or_default())
                        }
                        PgOutputMessage::StreamCommit(c) => Seen::StreamCommit(c.xid),
                        PgOutputMessage::StreamAbort(a) => Seen::StreamAbort {
                            xid: a.xid,
                            subxact: a.subxact_xid,
                        },
                        m if m.stream_xid().is_some() => {
                            Seen::Block(self.stream_block.unwrap_or_default())
                        }
                        _ => self.xid.map_or(Seen::Unknown, Seen::Xid),
                    };
                    let events = self.assembler.handle(message, &lookup, &unstaged)?;
                    if let Some(snapshot) = self.snapshot.as_mut() {
                        snapshot.observe(&events, xid);
                        // A table no longer read by pages: staged with the transaction
                        // of the update that decided it, so a crash cannot forget it.
                        if self.assembler.in_transaction()
                            && let Some(state) = snapshot.take_key_order("the snapshot")?
                        {
                            self.assembler.push_state(state)?;
                        }
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

/// The pgoutput protocol a stream asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Protocol {
    version: u32,
    /// Transactions streamed while in progress.
    streaming: bool,
    /// Column values in binary format (`binary 'true'`, version 2 and later).
    binary: bool,
}

impl Protocol {
    /// The newest protocol version the server offers (4 from PostgreSQL 16, 3 on 15, 2
    /// on 14, else 1), with in-progress streaming when `streaming` is asked for and
    /// the server has it (version 2 and later). Weir asks for `streaming 'on'`: the
    /// `parallel` mode of version 4 is for parallel apply workers, and carries nothing
    /// more Weir uses; two-phase commits (version 3) are not asked for, so prepared
    /// transactions arrive at their COMMIT PREPARED like any other.
    ///
    /// `streaming` is off while an initial snapshot runs: its watermarks order chunks
    /// against commits, and a change streamed before its commit would be ordered by its
    /// arrival instead.
    ///
    /// Values come in binary format when every column of the configured tables'
    /// relations (`oids`) has a type Weir reads in binary (`pgtypes::reads_binary`):
    /// the server's send functions cost it less than its output functions (numeric,
    /// timestamps), and the values decode to the same `Value`s (a domain or an enum as
    /// the type it holds: [`super::types`]). A column of another type (an array, a
    /// range, `interval`) keeps the whole stream in text, and one added
    /// while streaming in binary reopens the stream in text for the rest of the run
    /// ([`PgSourceError::needs_text`]). `oids`: `None` asks for text.
    async fn of(
        catalog: &tokio_postgres::Client,
        streaming: bool,
        oids: Option<&[u32]>,
    ) -> Result<Protocol, PgSourceError> {
        let query = |what: &'static str| {
            move |source| PgSourceError::Query {
                what,
                source: PgError(source),
            }
        };
        let version_num: i32 = catalog
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .map_err(query("read the server's version"))?
            .get(0);
        let readable = match oids {
            None => false,
            Some(oids) => super::types::all_read_in_binary(catalog, oids).await?,
        };
        let mut protocol = Protocol::for_server(version_num, streaming);
        protocol.binary = readable && protocol.version >= 2;
        Ok(protocol)
    }

    fn for_server(version_num: i32, streaming: bool) -> Protocol {
        let version = match version_num {
            160_000.. => 4,
            150_000.. => 3,
            140_000.. => 2,
            _ => 1,
        };
        Protocol {
            version,
            streaming: streaming && version >= 2,
            binary: false,
        }
    }
}

impl ChangeSource for PostgresSource {
    async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        match self.receive().await {
            // Idle (nothing within the idle timeout, or a keepalive): the publication
            // is read again here too, so that one narrowed while nothing it still
            // publishes arrives is seen within a second, not at the next change.
            Ok(Some(SourceEvent::Idle)) | Ok(None) => {
                if self.mark_checked.elapsed() >= PUBLICATION_CHECK_INTERVAL {
                    self.check_publication()
                        .await
                        .map_err(|e| SourceError::Postgres(Box::new(e)))?;
                }
                Ok(SourceEvent::Idle)
            }
            Ok(Some(event)) => Ok(event),
            Err(e) => Err(SourceError::Postgres(Box::new(e))),
        }
    }

    async fn acknowledge(&mut self, checkpoint: Position) -> Result<(), SourceError> {
        if self.mark_checked.elapsed() >= PUBLICATION_CHECK_INTERVAL {
            self.check_publication()
                .await
                .map_err(|e| SourceError::Postgres(Box::new(e)))?;
        }
        if checkpoint.position > self.acknowledged {
            self.acknowledged = checkpoint.position;
            self.send_status()
                .await
                .map_err(|e| SourceError::Postgres(Box::new(e)))?;
        }
        Ok(())
    }
}
