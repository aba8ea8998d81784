//! Intake: the loop that reads the source, stages each committed transaction (synced)
//! and only then acknowledges it, wakes the writer, reconnects a source that went
//! away, and pauses reading while too much is staged but not yet written
//! (backpressure). `run` runs it beside the writer (`writer`).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::init::{postgres_dsn, primary_dsn};
use super::schedule::{WRITE_BACKOFF_MAX, WRITE_BACKOFF_MIN};
use super::{Pipeline, PipelineError, RunReport, blocking};
use crate::config::SourceConfig;
use crate::errors::error_chain;
use crate::limits::INTAKE_BATCH_BYTES;
use crate::metrics::{self, Retry};
use crate::source::jsonl::JsonlSource;
use crate::source::postgres;
use crate::source::{ChangeSource, SourceError, SourceEvent, Transaction};
use crate::stage::{ApplyOutcome, StageChange, StageError};

impl Pipeline {
    /// Tails the source, stages and writes, until the feed ends (`once`: everything
    /// available now), or `shutdown` completes (then what is staged stays staged).
    ///
    /// Live, intake and the writer run at the same time (see `writer`): intake stages
    /// and acknowledges, and wakes the writer; the writer writes whatever is dirty. With
    /// `once`, intake reads what is available, then every dirty partition is written.
    pub async fn run(
        &self,
        once: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<RunReport, PipelineError> {
        let _gauges = self.spawn_gauges();
        if once {
            return self.intake(true, shutdown).await;
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let intake = async {
            let report = self.intake(false, shutdown).await;
            let _ = stop.send(true);
            report
        };
        let writer = self.write_loop(stopped);
        tokio::pin!(intake, writer);
        // The writer failing stops intake (what is staged stays staged); intake ending,
        // in error or not, lets the writer end its round.
        let (staged, written) = tokio::select! {
            staged = &mut intake => (staged, writer.await),
            written = &mut writer => match written {
                Err(error) => return Err(error),
                Ok(written) => (intake.await, Ok(written)),
            },
        };
        let written = written?;
        let mut report = match staged {
            Ok(report) => report,
            Err(error @ (PipelineError::Source(_) | PipelineError::PgSource(_))) => {
                // The feed stopped in error (a rotated file, a bad record, a slot
                // gone): what was staged before it is written before the run stops,
                // as a run that ends does; the error is the run's either way.
                let mut last = written;
                if let Err(e) = self.write_round(&mut last).await {
                    tracing::warn!(error = %error_chain(&e), "what was staged before the source's error is not all written: the next run writes it");
                }
                if let Err(e) = self.flush_stage().await {
                    tracing::warn!(error = %error_chain(&e), "flushing the stage after the source's error");
                }
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        report.add_writes(&written);
        if report.fed_to_end {
            // A live feed that ended (stdin closed): what it staged is written now,
            // as `--once` would, after the writer's last round.
            self.write_round(&mut report).await?;
        }
        // The writer's last dirty marks go to the table files too.
        self.flush_stage().await?;
        Ok(report)
    }

    /// The intake loop (see [`Pipeline::run`]).
    async fn intake(
        &self,
        once: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<RunReport, PipelineError> {
        // `None` only while intake is paused with the stream closed (see pause_intake).
        let mut slot = match self.open_source(once).await {
            Ok(source) => Some(source),
            // A live run whose first load lost the source (a restart) waits for it, as
            // it does for a stream cut later; what the load staged stays.
            Err(error) if !once && error.is_interrupted_load() => {
                tracing::warn!(error = %error_chain(&error), "source lost during the first load; reconnecting");
                None
            }
            Err(error) => return Err(error),
        };
        let mut report = RunReport::default();
        let mut batch: Vec<Transaction> = Vec::new();
        // About the bytes of changes `batch` holds: staged at INTAKE_BATCH_BYTES.
        let mut batch_bytes = 0usize;
        // When `batch`'s first transaction was read: live, a batch is staged at
        // INTAKE_BATCH_AGE_MAX, for a source that never pauses long enough to say
        // `Idle` (a steady stdin producer).
        let mut batch_since = std::time::Instant::now();
        // Whether the stage's pending area holds chunks of the transaction being read.
        let mut chunked = false;
        // The group commit being written while the next one is read (see `stage_behind`).
        let mut in_flight: Option<Staging> = None;
        tokio::pin!(shutdown);
        loop {
            let staged_before = report.transactions;
            let Some(source) = slot.as_mut() else {
                match self.reconnect_source(once, &mut shutdown).await? {
                    Some(source) => slot = Some(source),
                    None => {
                        self.flush_stage().await?;
                        return Ok(report);
                    }
                }
                continue;
            };
            // A group commit written while this was read is settled first (`settle`):
            // never by racing the source's read, which is not safe to cancel mid-way.
            if in_flight.as_ref().is_some_and(|s| s.apply.is_finished()) {
                self.settle(source, &mut in_flight, &mut report).await?;
            }
            let event = tokio::select! {
                event = source.next() => event,
                () = &mut shutdown => {
                    tracing::info!("shutting down: staging what was read");
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report).await?;
                    self.flush_stage().await?;
                    return Ok(report);
                }
            };
            self.live.source_behind_us.store(
                source.behind().as_micros() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            match event {
                Ok(SourceEvent::Chunk(changes)) => {
                    // The pending area belongs to the next transaction to commit: stage
                    // the whole ones read before it first.
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?;
                    if metrics::enabled() {
                        // A large transaction's changes count as its chunks arrive.
                        let counts = changes_by_table(&changes);
                        metrics::staged(0, counts.iter().map(|(t, n)| (t.as_str(), *n)), None);
                    }
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.append_pending(&changes)).await?;
                    chunked = true;
                }
                Ok(SourceEvent::Abort) => {
                    self.settle(source, &mut in_flight, &mut report).await?;
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.discard_pending()).await?;
                    chunked = false;
                }
                Ok(SourceEvent::StreamChunk { xid, changes }) => {
                    // Visible to nothing until its commit; other transactions go on.
                    self.settle(source, &mut in_flight, &mut report).await?;
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.append_stream(xid, &changes)).await?;
                }
                Ok(SourceEvent::StreamDiscard { xid }) => {
                    self.settle(source, &mut in_flight, &mut report).await?;
                    let stage = Arc::clone(&self.stage);
                    blocking(move || stage.discard_stream(xid)).await?;
                }
                Ok(SourceEvent::StreamCommit(commit)) => {
                    // The whole transactions read before its commit are staged first;
                    // then its area becomes the pending area, committed with its end.
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?;
                    let stage = Arc::clone(&self.stage);
                    let (xid, aborted) = (commit.xid, commit.aborted.clone());
                    let (position, time) = (commit.commit_position, commit.commit_time_us);
                    let moved =
                        blocking(move || stage.stage_stream(xid, &aborted, position, time)).await?;
                    tracing::debug!(
                        xid,
                        changes = moved,
                        aborted_subtransactions = commit.aborted.len(),
                        "streamed transaction committed"
                    );
                    batch.push(commit.transaction());
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?;
                }
                Ok(SourceEvent::Transaction(txn)) => {
                    if batch.is_empty() {
                        batch_bytes = 0;
                        batch_since = std::time::Instant::now();
                    }
                    batch_bytes += txn
                        .changes
                        .iter()
                        .map(StageChange::approx_bytes)
                        .sum::<usize>();
                    batch.push(txn);
                    if std::mem::take(&mut chunked)
                        || batch.len() >= self.config.engine.batch_transactions_max
                        || batch_bytes >= INTAKE_BATCH_BYTES
                        || (!once && batch_since.elapsed() >= INTAKE_BATCH_AGE_MAX)
                    {
                        self.stage_behind(source, &mut in_flight, &mut batch, &mut report)
                            .await?;
                    }
                }
                Ok(SourceEvent::Idle) => {
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?
                }
                Ok(SourceEvent::End) => {
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?;
                    // The feed is whole: write everything before the run ends. Live, the
                    // writer is stopped first (one round at a time), see `run`.
                    report.fed_to_end = true;
                    if once {
                        // What was staged goes to the table files while the partitions
                        // are written (RocksDB flushes on its own thread); the flush
                        // below then holds only the round's own marks.
                        let flushing = self.flush_stage();
                        let (flushed, written) =
                            tokio::join!(flushing, self.write_round(&mut report));
                        written?;
                        flushed?;
                    }
                    self.flush_stage().await?;
                    return Ok(report);
                }
                Err(e) => {
                    // What came before the error is whole and good: keep it.
                    self.stage_batch(source, &mut in_flight, &mut batch, &mut report)
                        .await?;
                    if std::mem::take(&mut chunked) {
                        // The transaction whose chunks the pending area holds was cut
                        // off: the source opened again sends it again, whole or
                        // streamed (a stream's commit found these chunks and stopped
                        // the run as if the stage were corrupt).
                        self.settle(source, &mut in_flight, &mut report).await?;
                        let stage = Arc::clone(&self.stage);
                        blocking(move || stage.discard_pending()).await?;
                    }
                    if e.needs_reopen() {
                        // A resync was asked for: its signal is staged above, and the
                        // source opened again reads the table.
                        tracing::info!(reason = %error_chain(&e), "reopening the source stream");
                        slot = None;
                        continue;
                    }
                    if e.needs_text() {
                        // From here on the stream is read in text, `--once` too: the
                        // same WAL would stop every run that asked for binary.
                        self.source_text_only
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(error = %error_chain(&e), "reopening the source stream in text format");
                        report.source_reconnects += 1;
                        slot = None;
                        continue;
                    }
                    if once || !e.is_transient() {
                        return Err(e.into());
                    }
                    // The source went away (a restart, a cut connection): reconnect at
                    // the stage's position; the slot kept everything not acknowledged.
                    tracing::warn!(error = %error_chain(&e), "source connection lost; reconnecting");
                    report.source_reconnects += 1;
                    slot = None;
                    continue;
                }
            }
            // After each staged batch: at `[stage] max_unwritten_mb`, wait for the writer
            // before reading on (the overshoot is two batches at most: the one written
            // while the next was read).
            if !once
                && report.transactions != staged_before
                && self.config.stage_max_unwritten_bytes.is_some()
            {
                if let Some(source) = slot.as_mut() {
                    self.settle(source, &mut in_flight, &mut report).await?;
                }
                if !self
                    .pause_intake(&mut slot, &mut report, &mut shutdown)
                    .await?
                {
                    self.flush_stage().await?;
                    return Ok(report);
                }
            }
        }
    }

    /// With metrics served: a task that reads the state gauges again every
    /// [`metrics::GAUGE_REFRESH`] (stage size, unwritten bytes, dirty partitions by
    /// table, and a PostgreSQL slot's lag, asked of the source as `weir status` does),
    /// until the returned guard is dropped. Reads only: it never touches the run.
    fn spawn_gauges(&self) -> Option<AbortOnDrop> {
        let watched = self.live.watched.load(std::sync::atomic::Ordering::Relaxed);
        if !metrics::enabled() && !watched {
            return None;
        }
        let stage = Arc::clone(&self.stage);
        let stage_path = self.config.stage_path.clone();
        let tables: Vec<String> = self.tables.keys().cloned().collect();
        let slot = match &self.config.source {
            SourceConfig::Postgres { slot, .. } => postgres_dsn(&self.config)
                .ok()
                .map(|dsn| (dsn, slot.clone())),
            SourceConfig::Jsonl { .. } => None,
        };
        let live = Arc::clone(&self.live);
        let task = tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            let mut source: Option<Client> = None;
            let mut tick = tokio::time::interval(metrics::GAUGE_REFRESH);
            loop {
                tick.tick().await;
                let (stage, path, tables) =
                    (Arc::clone(&stage), stage_path.clone(), tables.clone());
                let read = tokio::task::spawn_blocking(move || {
                    let dirty = stage.dirty_partitions()?;
                    let unwritten = stage.unwritten_bytes()?;
                    let size = crate::stage::checkpoint::dir_size(&path).unwrap_or(0);
                    let by_table: Vec<(String, usize)> = tables
                        .into_iter()
                        .map(|t| {
                            let n = dirty.iter().filter(|d| d.table == t).count();
                            (t, n)
                        })
                        .collect();
                    Ok::<_, StageError>((size, unwritten, by_table, dirty.len()))
                })
                .await;
                if let Ok(Ok((size, unwritten, by_table, dirty))) = read {
                    live.dirty.store(dirty as u64, Relaxed);
                    metrics::stage_state(
                        size,
                        unwritten,
                        by_table.iter().map(|(t, n)| (t.as_str(), *n)),
                    );
                }
                let Some((dsn, slot)) = &slot else { continue };
                if source.as_ref().is_none_or(Client::is_closed) {
                    source = postgres::connect(dsn).await.ok();
                }
                if let Some(client) = &source {
                    match postgres::slot_status(client, slot).await {
                        Ok(Some(status)) => {
                            metrics::slot_lag(status.lag_bytes);
                            live.slot_lag.store(status.lag_bytes, Relaxed);
                        }
                        Ok(None) => {}
                        Err(error) => {
                            tracing::debug!(error = %error_chain(&error), "slot lag not read; tried again later");
                            source = None;
                        }
                    }
                }
            }
        });
        Some(AbortOnDrop(task.abort_handle()))
    }

    /// Opens the configured source at the stage's position.
    async fn open_source(&self, once: bool) -> Result<AnySource, PipelineError> {
        let checkpoint = self.stage.checkpoint()?;
        let chunk = self.config.engine.transaction_chunk_changes;
        let tables = self
            .tables
            .values()
            .map(|(t, _, _)| t.clone())
            .collect::<Vec<_>>();
        Ok(match &self.config.source {
            SourceConfig::Jsonl {
                path,
                on_bad_record,
            } => AnySource::Jsonl(Box::new(
                JsonlSource::open(
                    path.clone(),
                    !once,
                    tables,
                    *on_bad_record,
                    checkpoint,
                    self.stage.source_state()?.as_deref(),
                    chunk,
                )
                .await?,
            )),
            SourceConfig::Postgres {
                slot,
                publication,
                snapshot_chunk_rows,
                snapshot_parallelism,
                snapshot_method,
                heartbeat_interval_ms,
                streaming,
                ..
            } => {
                let source_dsn = postgres_dsn(&self.config)?;
                let stage = Arc::clone(&self.stage);
                blocking(move || stage.discard_streams()).await?;
                let options = postgres::PostgresSourceOptions {
                    slot: slot.clone(),
                    publication: publication.clone(),
                    once,
                    chunk_changes_max: chunk,
                    snapshot_chunk_rows: *snapshot_chunk_rows,
                    snapshot_parallelism: *snapshot_parallelism,
                    snapshot_method: *snapshot_method,
                    load_watch: Some(Arc::clone(&self.load_watch)),
                    heartbeat_interval_ms: *heartbeat_interval_ms,
                    streaming: *streaming,
                    primary: primary_dsn(&self.config)?,
                    binary: !self
                        .source_text_only
                        .load(std::sync::atomic::Ordering::Relaxed),
                    catalog_lsn: self.catalog_lsn,
                };
                AnySource::Postgres(Box::new(
                    postgres::PostgresSource::open(
                        &source_dsn,
                        &options,
                        tables,
                        Arc::clone(&self.stage),
                        checkpoint,
                    )
                    .await?,
                ))
            }
        })
    }

    /// Opens the source again after it went away, waiting 0.5 s, then twice as long
    /// each time up to 30 s, while the writer goes on writing dirty partitions. `None`
    /// if `shutdown` came first; a permanent error (say, the slot was dropped) ends it.
    async fn reconnect_source(
        &self,
        once: bool,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<AnySource>, PipelineError> {
        let mut wait = WRITE_BACKOFF_MIN;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shutdown.as_mut() => return Ok(None),
            }
            metrics::retried(Retry::SourceConnect, 1);
            match self.open_source(once).await {
                Ok(source) => {
                    tracing::info!("source reconnected");
                    return Ok(Some(source));
                }
                Err(error) if error.is_transient_source() => {
                    wait = (wait * 2).min(WRITE_BACKOFF_MAX);
                    tracing::warn!(error = %error_chain(&error), retry_in_ms = wait.as_millis() as u64, "source unavailable; retrying");
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// While the changes staged but not written reach `[stage] max_unwritten_mb` (checked
    /// after each staged batch), stops reading the source while the writer writes,
    /// until the backlog is below half the limit (or nothing is dirty). A PostgreSQL source's stream is closed meanwhile and reopened at the
    /// stage's position after: an unread stream would miss the server's keepalives and
    /// be cut; the slot keeps the WAL. A JSON-lines source is simply not read.
    /// Returns `false` if `shutdown` came while paused.
    async fn pause_intake(
        &self,
        source: &mut Option<AnySource>,
        report: &mut RunReport,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<bool, PipelineError> {
        let Some(limit) = self.config.stage_max_unwritten_bytes else {
            return Ok(true);
        };
        let unwritten = self.stage.unwritten_bytes()?;
        if unwritten < limit {
            return Ok(true);
        }
        let started = Instant::now();
        report.intake_pauses += 1;
        metrics::intake_paused(true);
        tracing::warn!(
            unwritten_bytes = unwritten,
            limit_bytes = limit,
            "intake paused: staged changes not yet written reached [stage] max_unwritten_mb; the source is not read until the target catches up"
        );
        if matches!(source, Some(AnySource::Postgres(_))) {
            *source = None;
        }
        // The writer must not wait for a catch-up that waits for it.
        self.live
            .source_behind_us
            .store(0, std::sync::atomic::Ordering::Relaxed);
        loop {
            let unwritten = self.stage.unwritten_bytes()?;
            // Partitions held back (a table loading or resyncing) are not written until
            // more is read: waiting on them would wait for ever.
            let held = self.resync_holds()?;
            let writable = self.stage.dirty_partitions()?.into_iter().any(|d| {
                !self.load_watch.is_loading(&d.table)
                    && !held.contains(&d.table)
                    && self.tables.contains_key(&d.table)
            });
            if unwritten < limit / 2 || !writable {
                tracing::info!(
                    unwritten_bytes = unwritten,
                    paused_ms = started.elapsed().as_millis() as u64,
                    "intake resumed"
                );
                metrics::intake_paused(false);
                break;
            }
            self.write_wake.notify_one();
            tokio::select! {
                () = tokio::time::sleep(PAUSE_CHECK) => {}
                () = shutdown.as_mut() => return Ok(false),
            }
        }
        if source.is_none() {
            *source = Some(self.open_source(false).await?);
        }
        Ok(true)
    }

    /// On a clean stop: the stage's state goes to its table files, so the next start
    /// has no write-ahead log to replay.
    async fn flush_stage(&self) -> Result<(), PipelineError> {
        let stage = Arc::clone(&self.stage);
        blocking(move || stage.flush()).await
    }

    /// Stages the batch in one synced write, then acknowledges the source: after the
    /// group commit in flight, and with nothing read meanwhile.
    async fn stage_batch(
        &self,
        source: &mut AnySource,
        in_flight: &mut Option<Staging>,
        batch: &mut Vec<Transaction>,
        report: &mut RunReport,
    ) -> Result<(), PipelineError> {
        self.stage_behind(source, in_flight, batch, report).await?;
        self.settle(source, in_flight, report).await
    }

    /// Starts staging the batch and returns without waiting: the source is read on
    /// while the synced write runs, and is acknowledged when it is settled. The
    /// group commit before it is settled first, so writes stay in order and intake
    /// holds two batches at most.
    async fn stage_behind(
        &self,
        source: &mut AnySource,
        in_flight: &mut Option<Staging>,
        batch: &mut Vec<Transaction>,
        report: &mut RunReport,
    ) -> Result<(), PipelineError> {
        self.settle(source, in_flight, report).await?;
        *in_flight = self.start_staging(source, batch).await?;
        Ok(())
    }

    /// Spawns the synced write of the batch (`None`: nothing to stage).
    async fn start_staging(
        &self,
        source: &mut AnySource,
        batch: &mut Vec<Transaction>,
    ) -> Result<Option<Staging>, PipelineError> {
        if batch.is_empty() {
            return Ok(None);
        }
        let txns = std::mem::take(batch);
        let stage = Arc::clone(&self.stage);
        let started = Instant::now();
        if crate::faults::ack_before_stage()
            && let Some(last) = txns.last()
        {
            // The broken build (test-only): the source hears "durable" before it is.
            source
                .acknowledge(crate::feed::Position {
                    position: last.end,
                    cursor: last.cursor,
                })
                .await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Changes by table of the transactions past the position (the rest are
        // skipped), counted only for the metrics.
        let changes_by_table = if metrics::enabled() {
            let position = self.stage.checkpoint()?.map_or(0, |c| c.position);
            changes_by_table(
                txns.iter()
                    .filter(|t| t.end > position)
                    .flat_map(|t| &t.changes),
            )
        } else {
            Vec::new()
        };
        let wake = Arc::clone(&self.write_wake);
        let apply = tokio::task::spawn_blocking(move || {
            let outcome = stage.apply(&txns)?;
            if outcome.transactions > 0 {
                // Something may be dirty: the writer starts a round if it is idle, as
                // soon as the write is synced (intake settles it when it next looks).
                wake.notify_one();
            }
            // The batch is freed by intake once the source is acknowledged, not here:
            // the staging thread is intake's busiest, and freeing every row's values
            // took a twentieth of its time.
            Ok((outcome, txns))
        });
        Ok(Some(Staging {
            apply,
            started,
            changes_by_table,
        }))
    }

    /// Waits for the group commit in flight, if any, then acknowledges the source up
    /// to the stage's position: never before the write is synced.
    async fn settle(
        &self,
        source: &mut AnySource,
        in_flight: &mut Option<Staging>,
        report: &mut RunReport,
    ) -> Result<(), PipelineError> {
        let Some(staging) = in_flight.take() else {
            return Ok(());
        };
        let (outcome, staged) = staging.apply.await.map_err(PipelineError::Task)??;
        crate::failpoint!("stage-before-ack");
        report.transactions += outcome.transactions;
        report.changes += outcome.changes;
        self.live
            .changes_staged
            .fetch_add(outcome.changes as u64, std::sync::atomic::Ordering::Relaxed);
        report.skipped_transactions += outcome.skipped;
        let checkpoint = self.stage.checkpoint()?;
        if let Some(checkpoint) = checkpoint
            && let Err(error) = source.acknowledge(checkpoint).await
        {
            // The batch is synced: a source that went away re-sends it after the
            // reconnect (and the stage skips it). Its next read fails the same way.
            if !error.is_transient() {
                return Err(error.into());
            }
            tracing::warn!(error = %error_chain(&error), "acknowledgement not sent; sent with the next batch, or after the source is reconnected");
        }
        crate::failpoint!("stage-after-ack");
        metrics::staged(
            outcome.transactions,
            staging
                .changes_by_table
                .iter()
                .map(|(t, n)| (t.as_str(), *n)),
            checkpoint.map(|c| c.position),
        );
        tracing::info!(
            transactions = outcome.transactions,
            changes = outcome.changes,
            skipped = outcome.skipped,
            position = checkpoint.map(|c| c.position),
            elapsed_ms = staging.started.elapsed().as_millis() as u64,
            "staged"
        );
        drop(staged);
        Ok(())
    }
}

/// A group commit being written to the stage while intake reads on.
struct Staging {
    /// `Stage::apply` of the batch, on a blocking thread.
    /// It gives the batch back, to be freed here.
    apply: tokio::task::JoinHandle<Result<(ApplyOutcome, Vec<Transaction>), StageError>>,
    started: Instant,
    /// For the metrics, counted before the batch moved into the write.
    changes_by_table: Vec<(String, u64)>,
}

/// How long a live run holds transactions read before it stages them (and so before
/// the writer may write them), when the source does not pause.
const INTAKE_BATCH_AGE_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// How often paused intake looks at the backlog again while the writer drains it.
const PAUSE_CHECK: Duration = Duration::from_millis(100);

/// Aborts a spawned task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The configured source.
#[derive(Debug)]
enum AnySource {
    Jsonl(Box<JsonlSource>),
    Postgres(Box<postgres::PostgresSource>),
}

impl AnySource {
    /// How far the stream runs behind the source's commits, where the source says.
    fn behind(&self) -> Duration {
        match self {
            AnySource::Jsonl(_) => Duration::ZERO,
            AnySource::Postgres(s) => s.behind(),
        }
    }
}

impl ChangeSource for AnySource {
    async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        match self {
            AnySource::Jsonl(s) => s.next().await,
            AnySource::Postgres(s) => s.next().await,
        }
    }

    async fn acknowledge(&mut self, checkpoint: crate::feed::Position) -> Result<(), SourceError> {
        match self {
            AnySource::Jsonl(s) => s.acknowledge(checkpoint).await,
            AnySource::Postgres(s) => s.acknowledge(checkpoint).await,
        }
    }
}

/// Row changes by table (a few tables: a list beats a map).
fn changes_by_table<'a>(changes: impl IntoIterator<Item = &'a StageChange>) -> Vec<(String, u64)> {
    let mut counts: Vec<(String, u64)> = Vec::new();
    for change in changes {
        let table = match change {
            StageChange::Upsert { table, .. }
            | StageChange::UpsertUnchanged { table, .. }
            | StageChange::Delete { table, .. }
            | StageChange::Truncate { table } => table,
            StageChange::SourceState(_) => continue,
        };
        match counts.iter_mut().find(|(t, _)| t == table) {
            Some((_, n)) => *n += 1,
            None => counts.push((table.clone(), 1)),
        }
    }
    counts
}
