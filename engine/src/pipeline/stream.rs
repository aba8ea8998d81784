//! A partition job as a stream: on a thread of its own, one stage snapshot of the
//! partition is read in chunks ([`crate::stage::CHUNK_ROWS`] rows, about
//! [`crate::stage::CHUNK_BYTES`]), each chunk transformed (the identity, or pushed to
//! the plugin's session) and its output checked, then handed through a channel of
//! [`CHANNEL_CHUNKS`] to the writer, which COPYs it inside the partition's one
//! transaction. No job holds a whole partition: its memory is bounded by
//! [`crate::limits::job_bound_bytes`] whatever the partition's size.
//!
//! **Architecture Invariant**: a job's output is a function of the rows of one
//! snapshot (its generation is the one lineage records and the dirty mark is compared
//! with); any failure, in the job or the write, ends the stream and the transaction
//! rolls back, so nothing of the partition is written.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;

use super::{PipelineError, Transform};
use crate::config::{OnReject, TableConfig};
use crate::feed::encode_key;
use crate::partition::Partition;
use crate::plugin::{self, InputRow, JobClock, JobSession, JobSpec, KeyIndex, OutputCheck};
use crate::stage::{PartitionSnapshot, Stage, StageError, StagedRow, Survey, decode_key};
use crate::target::{Checksum, RejectedRow};
use crate::value::Value;

/// Output chunks in flight between a job and its writer.
pub const CHANNEL_CHUNKS: usize = crate::limits::JOB_CHANNEL_CHUNKS;

/// What a job hands its writer, in order: one [`Piece::Head`]; for a merge, chunks of
/// changed keys then [`Piece::KeysDone`]; chunks of output; one [`Piece::End`].
#[derive(Debug)]
pub(super) enum Piece {
    Head(Head),
    Chunk(OutChunk),
    /// A merge's changed keys are all sent: their target rows are deleted now.
    KeysDone,
    End(End),
}

/// What the job's snapshot says of the partition.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head {
    pub generation: u64,
    pub dirty: Option<u64>,
    pub source_position: u64,
    /// The job merges the changed keys (else it replaces the partition).
    pub merge: bool,
    /// A whole-table resync of the table was under way in the snapshot: the stage does
    /// not hold all its rows, and the job stops after this head.
    pub held: bool,
}

/// A chunk of checked output.
#[derive(Debug, Default)]
pub(super) struct OutChunk {
    pub rows: Vec<Vec<Value>>,
    pub rejections: Vec<RejectedRow>,
    /// Merge: the changed keys whose target rows this chunk replaces (values in the
    /// table's key order), and the same as rejection keys (`[42]`).
    pub keys: Vec<Vec<Value>>,
    pub rejection_keys: Vec<String>,
}

/// The end of a job.
#[derive(Debug, Clone)]
pub(super) struct End {
    pub staged_rows: u64,
    /// The lineage checksum of every output row (a replace).
    pub checksum: String,
}

/// The stream of a job (see the module).
pub(super) type Pieces = mpsc::Receiver<Result<Piece, PipelineError>>;

/// A job to stream.
pub(super) struct StreamJob {
    pub stage: Arc<Stage>,
    pub table: TableConfig,
    pub target_name: String,
    pub transform: Transform,
    pub partition: Partition,
    /// Merge the changed keys if the partition allows it (dirty, not changed whole).
    pub merge: bool,
    /// `write = "auto"`: merge only if fewer than half the partition's rows changed.
    pub merge_if_cheaper: bool,
    /// Stop after the head if the partition is not dirty.
    pub only_if_dirty: bool,
    /// Merge: the target columns of the table's key (the plugin's grain key).
    pub key_columns: Vec<usize>,
    /// Rows to transform instead of the partition's staged rows (`verify
    /// --against-source`: the source table's rows now), in chunks. The partition's
    /// snapshot still gives the job its clock. Read once: the output's grain-key
    /// check, which reruns the job, is the caller's.
    pub input: Option<std::sync::Mutex<Input>>,
    /// The source's state may hold resyncs (a PostgreSQL source): see [`Head::held`].
    pub resyncs: bool,
    /// A job of a group (see `group`): it stops after its head unless it merges, and
    /// after its changed keys waits for the group's word to go on (the writer's lineage
    /// check), then for a permit, so that a group of many partitions runs no transform
    /// it will not write and runs them `[engine] parallelism` at a time.
    pub group: Option<GroupTicket>,
}

/// What a job of a group waits on ([`StreamJob::group`]).
#[derive(Debug)]
pub(super) struct GroupTicket {
    pub permits: Arc<Permits>,
    /// A message: go on; the sender dropped: stop.
    pub go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

/// A counting semaphore for job threads ([`GroupTicket::permits`]).
#[derive(Debug)]
pub(super) struct Permits {
    free: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
}

/// A permit of [`Permits`], given back when dropped.
#[derive(Debug)]
pub(super) struct Permit<'p>(&'p Permits);

impl Permits {
    pub(super) fn new(count: usize) -> Permits {
        Permits {
            free: std::sync::Mutex::new(count.max(1)),
            freed: std::sync::Condvar::new(),
        }
    }

    /// Waits for a permit.
    pub(super) fn acquire(&self) -> Permit<'_> {
        let free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let mut free = self
            .freed
            .wait_while(free, |n| *n == 0)
            .unwrap_or_else(|p| p.into_inner());
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

/// Chunks of rows a job transforms in place of the stage's ([`StreamJob::input`]).
pub(super) type Input = mpsc::Receiver<Result<Vec<StagedRow>, PipelineError>>;

/// Partition-job threads not finished yet. A job whose writer went away (a write left
/// to a newer one, a failure on the writer's side) runs on until its next piece, with
/// the stage open (a snapshot, and perhaps the last handle): a process must not exit
/// under it, or RocksDB's static destructors run while the thread still uses the
/// database (seen as `pthread lock: Invalid argument` and an abort after a backfill
/// had ended). `weir` waits for them before it exits ([`wait_for_partition_jobs`]).
pub(super) static JOB_THREADS: Running = Running::new();

/// A count of running things, and a wait until there are none.
#[derive(Debug)]
pub(super) struct Running {
    count: std::sync::Mutex<usize>,
    none: std::sync::Condvar,
}

/// One running thing of a [`Running`]: counted until dropped.
#[derive(Debug)]
pub(super) struct RunningGuard(&'static Running);

impl Running {
    pub(super) const fn new() -> Running {
        Running {
            count: std::sync::Mutex::new(0),
            none: std::sync::Condvar::new(),
        }
    }

    pub(super) fn start(&'static self) -> RunningGuard {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        RunningGuard(self)
    }

    /// Waits until none runs, at most `timeout`; whether none runs.
    pub(super) fn wait_none(&self, timeout: std::time::Duration) -> bool {
        let count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let (count, _) = self
            .none
            .wait_timeout_while(count, timeout, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
        *count == 0
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count = count.saturating_sub(1);
        if *count == 0 {
            self.0.none.notify_all();
        }
    }
}

/// Waits, at most `timeout`, until every partition job's thread has ended (and so
/// released the stage); whether they all did. For a process about to exit.
pub fn wait_for_partition_jobs(timeout: std::time::Duration) -> bool {
    JOB_THREADS.wait_none(timeout)
}

/// Starts a job on a thread of its own (sized for the plugin's wasm stack, and kept
/// for a next job: [`crate::job_threads`]); its pieces arrive on the returned channel. Dropping the channel stops the job.
pub(super) fn spawn(job: StreamJob) -> Result<Pieces, PipelineError> {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    let stack = match &job.transform {
        Transform::Plugin { settings, .. } => plugin::job_thread_stack(&settings.limits),
        Transform::Identity => 8 << 20,
    };
    // Counted from before the spawn (a failed spawn drops it with the closure) until
    // the job, its stage handle and its channel are dropped.
    let running = JOB_THREADS.start();
    crate::job_threads::spawn("weir-partition-job", stack, move || {
        if let Err(e) = produce(&job, &tx) {
            let _ = tx.blocking_send(Err(e));
        }
        drop(job);
        drop(tx);
        drop(running);
    })
    .map_err(|e| PipelineError::Plugin(plugin::PluginError::Thread(e)))?;
    Ok(rx)
}

/// The writer went away (a failure on its side, which it reports, or it chose not to
/// write): the job stops without a word.
struct Stopped;

fn send(tx: &mpsc::Sender<Result<Piece, PipelineError>>, piece: Piece) -> Result<(), Stopped> {
    tx.blocking_send(Ok(piece)).map_err(|_| Stopped)
}

fn produce(
    job: &StreamJob,
    tx: &mpsc::Sender<Result<Piece, PipelineError>>,
) -> Result<(), PipelineError> {
    let snap = job
        .stage
        .snapshot_partition(&job.table.source.to_string(), &job.partition)?;
    let merge = job.merge
        && snap.dirty.is_some()
        && !snap.whole_changed()?
        && (!job.merge_if_cheaper || snap.changed_minority()?);
    let table = job.table.source.to_string();
    let held = job.resyncs
        && job.input.is_none()
        && crate::source::postgres::resync_holds(snap.source_state()?.as_deref()).contains(&table);
    let head = Head {
        generation: snap.generation,
        dirty: snap.dirty,
        source_position: snap.checkpoint.position,
        merge,
        held,
    };
    if send(tx, Piece::Head(head)).is_err()
        || held
        || (job.only_if_dirty && snap.dirty.is_none())
        || (job.group.is_some() && !merge)
    {
        return Ok(());
    }
    if merge {
        match send_changed_keys(&snap, tx) {
            Err(RunError::Stopped) => return Ok(()),
            Err(RunError::Failed(e)) => return Err(e),
            Ok(()) => {}
        }
    }
    let _permit = match &job.group {
        Some(ticket) => {
            let go = ticket.go.lock().unwrap_or_else(|p| p.into_inner()).recv();
            if go.is_err() {
                return Ok(());
            }
            Some(ticket.permits.acquire())
        }
        None => None,
    };
    // A plugin's clocks read the partition's latest commit time: a pass over all its
    // rows' headers, made (beside the job, in its snapshot) only if the plugin reads a
    // clock. A plugin that imports none is given none; one whose runtime imports a
    // clock but never reads it (componentize-py's) never pays for the pass: a merge
    // costs what changed, not the partition.
    let clocked =
        matches!(&job.transform, Transform::Plugin { plugin, .. } if plugin.reads_clock());
    std::thread::scope(|scope| {
        let clock = if clocked {
            ClockSurvey::on_first_read(scope, job, &snap)?
        } else {
            ClockSurvey::none()
        };
        let ended = run_to_end(job, &snap, merge, &clock.clock, tx);
        // A merge's output must be what a replace gives those rows: a plugin that read
        // a clock (the partition's newest commit time, which the changed rows may have
        // moved) or drew random bytes (the job's sequence, whose place depends on the
        // rows pushed before) made rows that depend on the job. Never ended: the writer
        // rolls it back and replaces the partition.
        let impure = merge && clock.clock.used();
        match (ended, clock.end()) {
            // Output made on a clock that could not be read never ends: the writer
            // rolls it back.
            (_, Some(e)) => Err(e.into()),
            (Err(RunError::Failed(e)), None) => Err(e),
            (Err(RunError::Stopped), None) => Ok(()),
            (Ok(_), None) if impure => Err(PipelineError::MergeImpure {
                table: job.table.source.to_string(),
                partition: job.partition.name().into_owned(),
            }),
            (Ok(end), None) => {
                // A writer gone by now has its own error to report.
                let _ = send(tx, Piece::End(end));
                Ok(())
            }
        }
    })
}

/// The job's whole output, checked, then what its end reports.
fn run_to_end(
    job: &StreamJob,
    snap: &PartitionSnapshot<'_>,
    merge: bool,
    clock: &JobClock,
    tx: &mpsc::Sender<Result<Piece, PipelineError>>,
) -> Result<End, RunError> {
    let mut run = Run::start(job, snap, merge, clock)?;
    run.all(tx)?;
    let (staged_rows, checksum) = (run.staged_rows, run.checksum.finish());
    if let Some(check) = run.check.take() {
        // Two output rows' grain-key hashes are equal: the job runs again (it is
        // deterministic) and those keys are compared exactly.
        check.finish(|visit| {
            let mut again = Run::start(job, snap, merge, clock)?;
            again.check = None;
            again.visit = Some(visit);
            match again.all(tx) {
                Err(RunError::Failed(e)) => Err(e),
                _ => Ok(()),
            }
        })?;
    }
    Ok(End {
        staged_rows,
        checksum,
    })
}

/// A job's clock, and the thread that surveys its partition for it if it is read.
struct ClockSurvey<'scope> {
    clock: JobClock,
    /// Where a failed survey leaves its error, for the job to fail with.
    failed: Arc<Mutex<Option<StageError>>>,
    surveyor: Option<std::thread::ScopedJoinHandle<'scope, ()>>,
}

impl<'scope> ClockSurvey<'scope> {
    /// The clock of a plugin that imports none (or of the identity): 0, unseen.
    fn none() -> ClockSurvey<'scope> {
        ClockSurvey {
            clock: JobClock::at(0),
            failed: Arc::default(),
            surveyor: None,
        }
    }

    /// A clock that, on the plugin's first read, has a thread of `scope` survey the
    /// partition in the job's snapshot (the job's own thread is then inside the
    /// plugin); a failed survey reads as 0 and fails the job ([`Self::end`]). If no
    /// thread can be started, the survey is made now.
    fn on_first_read(
        scope: &'scope std::thread::Scope<'scope, '_>,
        job: &'scope StreamJob,
        snap: &'scope PartitionSnapshot<'_>,
    ) -> Result<ClockSurvey<'scope>, StageError> {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let Ok(surveyor) = std::thread::Builder::new()
            .name("weir-clock-survey".into())
            .spawn_scoped(scope, move || {
                if asked.recv().is_ok() {
                    let _ = answer.send(survey(job, snap));
                }
            })
        else {
            let newest = survey(job, snap)?.max_commit_time.unwrap_or(0);
            return Ok(ClockSurvey {
                clock: JobClock::at(newest),
                ..ClockSurvey::none()
            });
        };
        let failed: Arc<Mutex<Option<StageError>>> = Arc::default();
        let slot = Arc::clone(&failed);
        let clock = JobClock::on_first_read(move || {
            match ask.send(()).ok().and_then(|()| answered.recv().ok()) {
                Some(Ok(survey)) => survey.max_commit_time.unwrap_or(0),
                Some(Err(e)) => {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    0
                }
                // The surveyor panicked: `end` raises its panic before the job ends.
                None => 0,
            }
        });
        Ok(ClockSurvey {
            clock,
            failed,
            surveyor: Some(surveyor),
        })
    }

    /// After the job's last call into the plugin: the survey's failure, if it failed.
    /// The clock goes first (its surveyor ends, unasked if it was never read); a
    /// surveyor's panic is raised here, before the job could send its end.
    fn end(self) -> Option<StageError> {
        drop(self.clock);
        if let Some(Err(panic)) = self.surveyor.map(std::thread::ScopedJoinHandle::join) {
            std::panic::resume_unwind(panic);
        }
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The partition's survey (see [`PartitionSnapshot::survey`]), logged.
fn survey(job: &StreamJob, snap: &PartitionSnapshot<'_>) -> Result<Survey, StageError> {
    let started = Instant::now();
    let survey = snap.survey()?;
    tracing::debug!(
        table = %job.table.source,
        partition = %job.partition,
        rows = survey.rows,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "partition surveyed for the plugin's clock"
    );
    Ok(survey)
}

/// A merge's changed keys, all before any output, so that their target rows are
/// deleted before any output is copied; sent before the plugin's session starts, so
/// that the writer deletes them while it does.
fn send_changed_keys(
    snap: &PartitionSnapshot<'_>,
    tx: &mpsc::Sender<Result<Piece, PipelineError>>,
) -> Result<(), RunError> {
    for chunk in snap.changed_keys() {
        let mut out = OutChunk::default();
        for key in chunk? {
            let values = decode_key(&key).map_err(crate::stage::StageError::from)?;
            out.rejection_keys.push(plugin::json::key_text(&values));
            out.keys.push(values);
        }
        send(tx, Piece::Chunk(out))?;
    }
    send(tx, Piece::KeysDone)?;
    Ok(())
}

enum RunError {
    Stopped,
    Failed(PipelineError),
}

impl<E: Into<PipelineError>> From<E> for RunError {
    fn from(e: E) -> Self {
        RunError::Failed(e.into())
    }
}

impl From<Stopped> for RunError {
    fn from(_: Stopped) -> Self {
        RunError::Stopped
    }
}

type Visit<'v> = &'v mut dyn FnMut(&[Vec<Value>]) -> Result<(), plugin::PluginError>;

/// One pass of a job over its snapshot.
struct Run<'j, 's, 'v> {
    job: &'j StreamJob,
    snap: &'j PartitionSnapshot<'s>,
    merge: bool,
    session: Option<JobSession<'j>>,
    check: Option<OutputCheck<'j>>,
    /// A rerun: output rows go to this, not to the writer.
    visit: Option<Visit<'v>>,
    checksum: Checksum,
    staged_rows: u64,
}

impl<'j, 's, 'v> Run<'j, 's, 'v> {
    /// `clock`: what the plugin reads as the time, the partition's latest commit time
    /// ([`PartitionSnapshot::survey`]), or 0 for a plugin that imports no clock
    /// ([`plugin::Plugin::reads_clock`]), unseen.
    fn start(
        job: &'j StreamJob,
        snap: &'j PartitionSnapshot<'s>,
        merge: bool,
        clock: &JobClock,
    ) -> Result<Run<'j, 's, 'v>, PipelineError> {
        let (session, check) = match &job.transform {
            Transform::Identity => (None, None),
            Transform::Plugin {
                plugin, settings, ..
            } => {
                let input = input_columns(&job.table);
                let spec = JobSpec {
                    table: &job.target_name,
                    partition: &job.partition,
                    grain: job.table.grain,
                    config: &settings.config,
                    input: &input,
                };
                let session = plugin.start_job(&settings.limits, &spec, clock.clone())?;
                let check = job
                    .input
                    .is_none()
                    .then(|| OutputCheck::new(plugin, session.job(), &spec));
                (Some(session), check)
            }
        };
        Ok(Run {
            job,
            snap,
            merge,
            session,
            check,
            visit: None,
            checksum: Checksum::default(),
            staged_rows: 0,
        })
    }

    fn all(&mut self, tx: &mpsc::Sender<Result<Piece, PipelineError>>) -> Result<(), RunError> {
        let snap = self.snap;
        // The identity reads each row straight into the table's column order.
        let identity = self.session.is_none() && self.job.input.is_none();
        let columns: Vec<String> = if identity {
            self.job
                .table
                .columns
                .iter()
                .map(|c| c.name.clone())
                .collect()
        } else {
            Vec::new()
        };
        if identity {
            // A merge's changed keys went first ([`send_changed_keys`]); then the rows
            // of those still in the partition.
            let chunks: Box<dyn Iterator<Item = _>> = if self.merge {
                Box::new(snap.changed_values_in_order(&columns))
            } else {
                Box::new(snap.values_in_order(&columns))
            };
            for chunk in chunks {
                let rows = chunk?;
                self.staged_rows += rows.len() as u64;
                self.emit(
                    OutChunk {
                        rows,
                        ..OutChunk::default()
                    },
                    tx,
                )?;
            }
        } else if self.merge {
            // The changed keys went first ([`send_changed_keys`]); now the rows of those
            // still in the partition.
            for chunk in snap.changed() {
                let rows = chunk?.into_iter().filter_map(|(_, row)| row).collect();
                self.chunk(rows, OutChunk::default(), tx)?;
            }
        } else if let Some(input) = &self.job.input {
            let mut input = input
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            while let Some(chunk) = input.blocking_recv() {
                self.chunk(chunk?, OutChunk::default(), tx)?;
            }
        } else {
            for chunk in snap.rows() {
                self.chunk(chunk?, OutChunk::default(), tx)?;
            }
        }
        if let Some(session) = self.session.as_mut() {
            let first = session.finish()?;
            self.parts(first, &[], OutChunk::default(), tx)?;
        }
        if let Some(session) = self.session.take() {
            let stats = session.end();
            if self.visit.is_none() {
                crate::metrics::plugin_job(
                    &self.job.table.source.to_string(),
                    stats.fuel,
                    stats.peak_memory_bytes,
                );
            }
        }
        Ok(())
    }

    /// Transforms one chunk of staged rows and hands on its checked output.
    fn chunk(
        &mut self,
        rows: Vec<StagedRow>,
        mut out: OutChunk,
        tx: &mpsc::Sender<Result<Piece, PipelineError>>,
    ) -> Result<(), RunError> {
        self.staged_rows += rows.len() as u64;
        match self.session.as_mut() {
            None => out.rows = identity(&self.job.table, rows),
            Some(session) => {
                let input: Vec<InputRow> = rows
                    .into_iter()
                    .map(|r| input_row(&self.job.table, r))
                    .collect();
                let first = session.push(&input)?;
                return self.parts(first, &input, out, tx);
            }
        }
        self.emit(out, tx)
    }

    /// Checks and hands on each part of a call's output: `first`, then while the
    /// plugin says `more`, the next (each its own chunk, so a plugin's output need not
    /// be held whole).
    fn parts(
        &mut self,
        first: plugin::CallOutput,
        pushed: &[InputRow],
        mut out: OutChunk,
        tx: &mpsc::Sender<Result<Piece, PipelineError>>,
    ) -> Result<(), RunError> {
        let mut call = first;
        loop {
            let more = call.more;
            self.take(call, pushed, &mut out)?;
            self.emit(std::mem::take(&mut out), tx)?;
            if !more {
                return Ok(());
            }
            call = match self.session.as_mut() {
                Some(session) => session.next_part()?,
                None => return Ok(()),
            };
        }
    }

    /// Checks a call's output and resolves its rejections to their input rows (in
    /// `pushed`, the call's chunk, or else in the snapshot).
    fn take(
        &mut self,
        call: plugin::CallOutput,
        pushed: &[InputRow],
        out: &mut OutChunk,
    ) -> Result<(), RunError> {
        let mut rows = call.rows;
        // A rerun has no check: it only feeds the grain key's (see `produce`).
        if let Some(check) = self.check.as_mut() {
            check.check(&mut rows)?;
        }
        if self.merge && self.session.is_some() {
            self.check_merge_keys(&rows, pushed)?;
        }
        out.rows = rows;
        if call.rejections.is_empty() || self.visit.is_some() {
            return Ok(());
        }
        let Transform::Plugin { settings, .. } = &self.job.transform else {
            return Ok(());
        };
        let mut index = KeyIndex::default();
        for (key, reason) in call.rejections {
            let found = match index.find(&key, pushed) {
                Some(i) => Some((
                    plugin::json::plain_row(&pushed[i].columns),
                    pushed[i].commit_position,
                )),
                None => self
                    .pushed_row(&key)?
                    .map(|r| (plugin::json::plain_row(&r.values), r.commit_position)),
            };
            let Some((input, source_position)) = found else {
                // Only a first pass resolves rejections, and it has its check.
                return Err(match &self.check {
                    Some(check) => check.not_pushed(&key).into(),
                    None => PipelineError::Plugin(plugin::PluginError::Lost),
                }
                .into());
            };
            let key_text = plugin::json::key_text(&key);
            if settings.on_reject == OnReject::Fail {
                return Err(RunError::Failed(PipelineError::Rejected {
                    table: self.job.table.source.to_string(),
                    partition: self.job.partition.to_string(),
                    key: key_text,
                    reason,
                }));
            }
            out.rejections.push(RejectedRow {
                key: key_text,
                reason,
                input,
                source_position,
            });
        }
        Ok(())
    }

    /// The snapshot's row of a key pushed in an earlier chunk (a partition plugin
    /// rejects at `finish`), if the job pushed it.
    fn pushed_row(&self, key: &[Value]) -> Result<Option<StagedRow>, PipelineError> {
        let Ok(encoded) = encode_key(&key.iter().collect::<Vec<_>>()) else {
            return Ok(None);
        };
        if self.merge && !self.snap.is_changed(&encoded)? {
            return Ok(None);
        }
        Ok(self.snap.row(&encoded)?)
    }

    /// Merge: every output row's grain key is a changed key, whose target rows were
    /// deleted before any row is copied. Most are the key of a row of the call's chunk
    /// (each pushed row is a changed key's); any other is looked up in the snapshot.
    fn check_merge_keys(
        &self,
        rows: &[Vec<Value>],
        pushed: &[InputRow],
    ) -> Result<(), PipelineError> {
        let chunk_keys: std::collections::HashSet<Vec<u8>> = if rows.is_empty() {
            Default::default()
        } else {
            pushed
                .iter()
                .filter_map(|r| encode_key(&r.key.iter().collect::<Vec<_>>()).ok())
                .collect()
        };
        for row in rows {
            let grain: Vec<&Value> = self.job.key_columns.iter().map(|&c| &row[c]).collect();
            let known = match encode_key(&grain) {
                Ok(k) => chunk_keys.contains(&k) || self.snap.is_changed(&k)?,
                Err(_) => false,
            };
            if !known {
                return Err(PipelineError::MergeKey {
                    table: self.job.table.source.to_string(),
                    partition: self.job.partition.to_string(),
                    key: plugin::json::key_text(&grain.into_iter().cloned().collect::<Vec<_>>()),
                });
            }
        }
        Ok(())
    }

    fn emit(
        &mut self,
        out: OutChunk,
        tx: &mpsc::Sender<Result<Piece, PipelineError>>,
    ) -> Result<(), RunError> {
        if let Some(visit) = self.visit.as_mut() {
            return Ok(visit(&out.rows)?);
        }
        if !self.merge {
            self.checksum.add(&out.rows);
        }
        if out.rows.is_empty() && out.rejections.is_empty() && out.keys.is_empty() {
            return Ok(());
        }
        Ok(send(tx, Piece::Chunk(out))?)
    }
}

/// A table's columns as a plugin job's input columns (names, declared types, key).
fn input_columns(table: &TableConfig) -> plugin::InputColumns {
    plugin::InputColumns::new(
        table
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.declared.to_lowercase()))
            .collect(),
        &table.key,
    )
}

/// A staged row as the plugin's input: the table's key values, and the columns.
fn input_row(table: &TableConfig, r: StagedRow) -> InputRow {
    InputRow {
        key: table
            .key
            .iter()
            .map(|k| {
                r.values
                    .iter()
                    .find(|(name, _)| name == k)
                    .map_or(Value::Null, |(_, v)| v.clone())
            })
            .collect(),
        op: r.op,
        commit_position: r.commit_position,
        commit_time: r.commit_time_us,
        columns: r.values,
    }
}

/// The identity transform: each staged row's values in the table's column order
/// (absent columns are NULL). Values are moved, not copied.
fn identity(table: &TableConfig, rows: Vec<StagedRow>) -> Vec<Vec<Value>> {
    rows.into_iter()
        .map(|mut row| {
            table
                .columns
                .iter()
                .map(|c| {
                    row.values
                        .iter_mut()
                        .find(|(name, _)| name == &c.name)
                        .map_or(Value::Null, |(_, v)| std::mem::replace(v, Value::Null))
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    static COUNTED: Running = Running::new();

    #[test]
    fn running_things_are_waited_for_until_the_last_ends() {
        assert!(COUNTED.wait_none(Duration::ZERO));
        let (a, b) = (COUNTED.start(), COUNTED.start());
        assert!(!COUNTED.wait_none(Duration::from_millis(10)));
        drop(a);
        assert!(!COUNTED.wait_none(Duration::from_millis(10)));
        let ends = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(b);
        });
        assert!(COUNTED.wait_none(Duration::from_secs(10)));
        ends.join().expect("the thread ends");
    }
}
