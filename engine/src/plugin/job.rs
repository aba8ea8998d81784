//! One partition job: its input and output types, the job itself (a fresh instance,
//! a session, the rows pushed in chunks, the output checked), and the threads jobs and
//! loads run on.

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::contract::{InputColumns, Part, World};
use super::sandbox::{JobClock, JobSeed, JobState};
use super::{
    CHUNK_ROWS, Description, Plugin, PluginError, SandboxLimits, from_wit, json, schema, wty,
};
use crate::feed::Op;
use crate::partition::{Grain, Partition, PartitionPredicate, partition_of, predicate};
use crate::value::Value;

/// One input row of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRow {
    pub key: Vec<Value>,
    pub op: Op,
    pub commit_position: u64,
    pub commit_time: Option<i64>,
    pub columns: Vec<(String, Value)>,
}

/// What a job is.
#[derive(Debug, Clone)]
pub struct JobSpec<'a> {
    pub table: &'a str,
    pub partition: &'a Partition,
    /// The grain the partition column's values are partitioned by.
    pub grain: Grain,
    /// The plugin config: key/value text pairs (sorted and unique by the host).
    pub config: &'a [(String, String)],
    /// The input columns (a contract-0.2 session's schema, and its rows' order).
    pub input: &'a InputColumns,
}

/// A rejected input row.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub key: Vec<Value>,
    pub reason: String,
    /// Index of the rejected row in the job's input.
    pub input: usize,
}

/// The checked output of a job.
#[derive(Debug, Clone, Default)]
pub struct JobOutput {
    pub rows: Vec<Vec<Value>>,
    pub rejections: Vec<Rejection>,
    /// Fuel used by all calls of the job.
    pub fuel: u64,
    /// The most the instance held in linear memories and tables together, in bytes.
    pub peak_memory_bytes: usize,
}

/// What one call handed back: output rows (not yet checked, see [`OutputCheck`]) and
/// rejections (the key the plugin named, and its reason), and whether more of the
/// output of the same `push` or `finish` follows ([`JobSession::next_part`]).
#[derive(Debug, Default)]
pub struct CallOutput {
    pub rows: Vec<Vec<Value>>,
    pub rejections: Vec<(Vec<Value>, String)>,
    pub more: bool,
}

/// What a finished job used.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobStats {
    /// Fuel used by all calls of the job.
    pub fuel: u64,
    /// The most the instance held in linear memories and tables together, in bytes.
    pub peak_memory_bytes: usize,
}

/// One partition job in progress: a fresh store and instance, and the plugin's
/// session, fed in chunks. Dropping it drops the instance and every resource.
pub struct JobSession<'p> {
    plugin: &'p Plugin,
    limits: SandboxLimits,
    job: String,
    store: Store<JobState>,
    world: World,
    session: ResourceAny,
    input: InputColumns,
    fuel: u64,
    pushed: u64,
}

impl std::fmt::Debug for JobSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSession")
            .field("job", &self.job)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The name of a job in errors: plugin, hash, table, partition.
    pub fn job_label(&self, spec: &JobSpec<'_>) -> String {
        format!(
            "plugin `{}` ({}…), table {}, partition {}",
            self.description().name,
            &self.sha256_hex()[..12],
            spec.table,
            spec.partition
        )
    }

    /// Starts a partition job in a fresh instance: instantiate, construct the session.
    /// `clock` is what the plugin's clocks read (the partition's latest commit time, so
    /// a job's output depends only on its rows).
    pub fn start_job(
        &self,
        limits: &SandboxLimits,
        spec: &JobSpec<'_>,
        clock: JobClock,
    ) -> Result<JobSession<'_>, PluginError> {
        let job = self.job_label(spec);
        let partition_name = spec.partition.name().into_owned();
        let seed = JobSeed {
            plugin_sha256: &self.sha256,
            table: spec.table,
            partition: &partition_name,
            clock,
        };
        let mut store = self.new_store(&seed, limits);
        Self::arm(&mut store, limits, 0);
        let world = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| Self::call_error(&store, limits, &job, &e))?;
        Self::arm(&mut store, limits, 0);
        let session = world
            .construct(
                &mut store,
                spec.table,
                &partition_name,
                spec.input,
                spec.config,
            )
            .map_err(|e| Self::call_error(&store, limits, &job, &e))?;
        let fuel = Self::fuel_used(&store);
        Ok(JobSession {
            plugin: self,
            limits: limits.clone(),
            job,
            store,
            world,
            session,
            input: spec.input.clone(),
            fuel,
            pushed: 0,
        })
    }

    /// Runs one partition job over `input` held in memory (`weir plugin test`, tests):
    /// the rows pushed in chunks of [`CHUNK_ROWS`], finish, every output row checked.
    /// The engine's writes stream instead (see the pipeline's `stream`).
    pub fn run_job(
        &self,
        limits: &SandboxLimits,
        spec: &JobSpec<'_>,
        input: &[InputRow],
    ) -> Result<JobOutput, PluginError> {
        let mut session = self.start_job(limits, spec, clock_of(input))?;
        let mut check = OutputCheck::new(self, session.job(), spec);
        let mut output = JobOutput::default();
        let mut keys = KeyIndex::default();
        let mut take = |out: CallOutput, pushed: &[InputRow], output: &mut JobOutput| {
            let mut rows = out.rows;
            check.check(&mut rows)?;
            output.rows.append(&mut rows);
            for (key, reason) in out.rejections {
                let Some(input) = keys.find(&key, pushed) else {
                    return Err(check.not_pushed(&key));
                };
                output.rejections.push(Rejection { key, reason, input });
            }
            Ok(())
        };
        let mut offset = 0;
        // The output is held whole here anyway: each call's parts are gathered.
        for chunk in input.chunks(CHUNK_ROWS) {
            let out = session.push_whole(chunk)?;
            offset += chunk.len();
            take(out, &input[..offset], &mut output)?;
        }
        let out = session.finish_whole()?;
        take(out, input, &mut output)?;
        let stats = session.end();
        check.finish(|visit| visit(&output.rows))?;
        output.fuel = stats.fuel;
        output.peak_memory_bytes = stats.peak_memory_bytes;
        Ok(output)
    }
}

/// What a job's clock reads: the newest commit time of its rows (0 if none has one), so
/// a job's output depends only on its rows.
pub fn clock_of<'a>(rows: impl IntoIterator<Item = &'a InputRow>) -> JobClock {
    JobClock::at(
        rows.into_iter()
            .filter_map(|r| r.commit_time)
            .max()
            .unwrap_or(0),
    )
}

/// A job run one input row per call (`weir plugin test`'s view of a row plugin): what
/// each input row became, in input order, and what `finish` returned.
#[derive(Debug, Default)]
pub struct RowFates {
    /// Per input row: its output rows (checked as the engine checks them) and its
    /// rejection reason, if the plugin rejected it.
    pub per_input: Vec<(Vec<Vec<Value>>, Option<String>)>,
    /// Output rows `finish` returned (a row plugin usually returns none).
    pub finish: Vec<Vec<Value>>,
}

impl Plugin {
    /// Runs a job pushing one row per call, last row first, so that what a call
    /// returns is that row's fate (`per_input` in the input's order). Each call is
    /// budgeted for its one row, as the engine budgets a chunk for its rows; output
    /// rows get the checks and padding of [`Plugin::run_job`].
    pub fn run_row_by_row(
        &self,
        limits: &SandboxLimits,
        spec: &JobSpec<'_>,
        input: &[InputRow],
    ) -> Result<RowFates, PluginError> {
        let mut session = self.start_job(limits, spec, clock_of(input))?;
        let mut check = OutputCheck::new(self, session.job(), spec);
        let mut fates = RowFates::default();
        // Last row first: a plugin that keeps state from row to row (a counter, the
        // previous row) gives other output than in order, which the caller compares
        // with a chunked run: the engine's merges push only the rows that changed.
        for row in input.iter().rev() {
            let out = session.push_whole(std::slice::from_ref(row))?;
            let mut rows = out.rows;
            check.check(&mut rows)?;
            let mut rejection = None;
            for (key, reason) in out.rejections {
                if key != row.key || rejection.is_some() {
                    return Err(check.not_pushed(&key));
                }
                rejection = Some(reason);
            }
            fates.per_input.push((rows, rejection));
        }
        fates.per_input.reverse();
        let out = session.finish_whole()?;
        if let Some((key, _)) = out.rejections.first() {
            return Err(check.not_pushed(key));
        }
        fates.finish = out.rows;
        check.check(&mut fates.finish)?;
        Ok(fates)
    }
}

impl JobSession<'_> {
    /// The job's name in errors.
    pub fn job(&self) -> &str {
        &self.job
    }

    fn output(&self, result: Result<Part, wty::Error>) -> Result<CallOutput, PluginError> {
        let out = result.map_err(|e| {
            let (kind, message) = match e {
                wty::Error::InvalidConfig(m) => ("invalid config", m),
                wty::Error::InvalidInput(m) => ("invalid input", m),
                wty::Error::Other(m) => ("", m),
            };
            PluginError::Guest {
                job: self.job.clone(),
                kind,
                message,
            }
        })?;
        Ok(CallOutput {
            rows: out
                .rows
                .into_iter()
                .map(|row| row.into_iter().map(from_wit).collect())
                .collect(),
            rejections: out
                .rejections
                .into_iter()
                .map(|(key, reason)| (key.into_iter().map(from_wit).collect(), reason))
                .collect(),
            more: out.more,
        })
    }

    /// Pushes one chunk of rows; the (first part of the) output the plugin gives for
    /// it: while it says `more`, [`JobSession::next_part`] gives the next part.
    pub fn push(&mut self, rows: &[InputRow]) -> Result<CallOutput, PluginError> {
        Plugin::arm(&mut self.store, &self.limits, rows.len() as u64);
        crate::failpoint!("plugin-call");
        let result = self
            .world
            .push(&mut self.store, self.session, rows, &self.input)
            .map_err(|e| Plugin::call_error(&self.store, &self.limits, &self.job, &e))?;
        self.fuel += Plugin::fuel_used(&self.store);
        self.pushed += rows.len() as u64;
        self.output(result)
    }

    /// The next part of the last `push`'s or `finish`'s output (after a part that said
    /// `more`), within that call's budget: every part of one call's output shares its
    /// fuel and its time, so a plugin that says `more` for ever runs out of them, as
    /// one that loops does.
    pub fn next_part(&mut self) -> Result<CallOutput, PluginError> {
        let before = Plugin::fuel_used(&self.store);
        let result = self
            .world
            .next(&mut self.store, self.session)
            .map_err(|e| Plugin::call_error(&self.store, &self.limits, &self.job, &e))?;
        self.fuel += Plugin::fuel_used(&self.store).saturating_sub(before);
        self.output(result)
    }

    /// Ends the session after the last push: the (first part of the) plugin's last
    /// output. A partition plugin's `finish` works over every row pushed, and is
    /// budgeted for them.
    pub fn finish(&mut self) -> Result<CallOutput, PluginError> {
        Plugin::arm(&mut self.store, &self.limits, self.pushed);
        let result = self
            .world
            .finish(&mut self.store, self.session)
            .map_err(|e| Plugin::call_error(&self.store, &self.limits, &self.job, &e))?;
        self.fuel += Plugin::fuel_used(&self.store);
        self.output(result)
    }

    /// [`JobSession::push`] with every part of the output gathered.
    pub fn push_whole(&mut self, rows: &[InputRow]) -> Result<CallOutput, PluginError> {
        let first = self.push(rows)?;
        self.gather(first)
    }

    /// [`JobSession::finish`] with every part of the output gathered.
    pub fn finish_whole(&mut self) -> Result<CallOutput, PluginError> {
        let first = self.finish()?;
        self.gather(first)
    }

    fn gather(&mut self, mut all: CallOutput) -> Result<CallOutput, PluginError> {
        while all.more {
            let mut part = self.next_part()?;
            all.rows.append(&mut part.rows);
            all.rejections.append(&mut part.rejections);
            all.more = part.more;
        }
        Ok(all)
    }

    /// What the job used; the store (and with it the instance and every resource) is
    /// dropped.
    pub fn end(self) -> JobStats {
        JobStats {
            fuel: self.fuel,
            peak_memory_bytes: self.store.data().memory.peak,
        }
    }

    /// The plugin this job runs.
    pub fn plugin(&self) -> &Plugin {
        self.plugin
    }
}

/// The input rows pushed so far by key, to find the row a rejection names: made on the
/// first rejection (most jobs have none), and grown as rejections need it.
#[derive(Debug, Default)]
pub struct KeyIndex {
    index_of: HashMap<Vec<u8>, usize>,
    covered: usize,
}

impl KeyIndex {
    /// The index in `pushed` of the row of `key`.
    pub fn find(&mut self, key: &[Value], pushed: &[InputRow]) -> Option<usize> {
        for (i, r) in pushed.iter().enumerate().skip(self.covered) {
            self.index_of
                .insert(schema::key_bytes(&r.key.iter().collect::<Vec<_>>()), i);
        }
        self.covered = self.covered.max(pushed.len());
        self.index_of
            .get(&schema::key_bytes(&key.iter().collect::<Vec<_>>()))
            .copied()
    }
}

/// The checks of a job's output rows, made chunk by chunk as they arrive: types, the
/// job's partition, decimals padded to their column's scale; and the grain key's
/// uniqueness, from a compact list of 64-bit key hashes whose repeats are checked
/// exactly by [`OutputCheck::finish`].
#[derive(Debug)]
pub struct OutputCheck<'p> {
    d: &'p Description,
    job: String,
    partition: Partition,
    grain: Grain,
    bounds: Option<PartitionPredicate>,
    typmods: Vec<(usize, crate::value::NumericTypmod)>,
    /// The `jsonb` columns: their documents are normalised as PostgreSQL stores them.
    jsonb: Vec<usize>,
    hashes: Vec<u64>,
}

impl<'p> OutputCheck<'p> {
    pub fn new(plugin: &'p Plugin, job: &str, spec: &JobSpec<'_>) -> OutputCheck<'p> {
        Self::of(plugin.description(), job, spec.partition, spec.grain)
    }

    /// The checks of rows described by `d`, for the job of `partition`.
    fn of(d: &'p Description, job: &str, partition: &Partition, grain: Grain) -> OutputCheck<'p> {
        let column_type = d.columns[d.partition_index].ty.engine_type();
        OutputCheck {
            d,
            job: job.to_owned(),
            partition: partition.clone(),
            grain,
            // The job's partition as a predicate on the value, computed once: most rows
            // are checked by a comparison; `partition_of` names the partition of one
            // that fails.
            bounds: predicate(column_type, grain, partition),
            typmods: d
                .columns
                .iter()
                .enumerate()
                .filter_map(|(i, c)| match c.ty.engine_type() {
                    crate::value::ColumnType::Numeric(Some(m)) => Some((i, m)),
                    _ => None,
                })
                .collect(),
            jsonb: d
                .columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.ty.engine_type() == crate::value::ColumnType::Jsonb)
                .map(|(i, _)| i)
                .collect(),
            hashes: Vec::new(),
        }
    }

    fn grain_hash(&self, row: &[Value]) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        schema::key_bytes(
            &self
                .d
                .grain_indexes
                .iter()
                .map(|&i| &row[i])
                .collect::<Vec<_>>(),
        )
        .hash(&mut h);
        h.finish()
    }

    /// The error for a rejection naming a key that was not pushed.
    pub fn not_pushed(&self, key: &[Value]) -> PluginError {
        PluginError::Output {
            job: self.job.clone(),
            message: format!(
                "a rejection names key {}, which was not pushed",
                json::key_text(key)
            ),
        }
    }

    /// Checks a chunk of output rows, then pads their decimals to their `numeric(p,s)`
    /// column's scale (`7.5` → `7.50`) and writes their `jsonb` documents' numbers as
    /// PostgreSQL stores them (`1e2` → `100`), so that the lineage checksum of the rows
    /// written is the checksum of the rows `weir verify` reads.
    pub fn check(&mut self, rows: &mut [Vec<Value>]) -> Result<(), PluginError> {
        for row in rows.iter() {
            self.check_row(row)?;
            if !self.d.grain_indexes.is_empty() {
                let hash = self.grain_hash(row);
                self.hashes.push(hash);
            }
        }
        if !self.jsonb.is_empty() {
            self.normalise_jsonb(rows)?;
        }
        if self.typmods.is_empty() {
            return Ok(());
        }
        for row in rows {
            for &(i, typmod) in &self.typmods {
                if let Some(Value::Decimal(text)) = row.get_mut(i)
                    && !stored_as_is(text, typmod)
                    && let Ok(fitted) = crate::value::fit_decimal(text, typmod)
                {
                    *text = fitted;
                }
            }
        }
        Ok(())
    }

    fn normalise_jsonb(&self, rows: &mut [Vec<Value>]) -> Result<(), PluginError> {
        for row in rows {
            for &i in &self.jsonb {
                let Some(Value::Json(text)) = row.get_mut(i) else {
                    continue;
                };
                match Value::json_document(crate::value::ColumnType::Jsonb, text) {
                    Ok(Some(Value::Json(normal))) => *text = normal,
                    // Checked to be JSON text by `check_row`.
                    Ok(_) => {}
                    Err(e) => {
                        return Err(PluginError::Output {
                            job: self.job.clone(),
                            message: format!("column `{}`: {e}", self.d.columns[i].name),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn check_row(&self, row: &[Value]) -> Result<(), PluginError> {
        let d = self.d;
        d.check_row(row).map_err(|message| PluginError::Output {
            job: self.job.clone(),
            message,
        })?;
        let value = &row[d.partition_index];
        let inside = match &self.bounds {
            Some(PartitionPredicate::IsNull) => value.is_null(),
            Some(PartitionPredicate::Equals(v)) => value == v,
            Some(PartitionPredicate::Range { lower, upper }) => match (value, lower, upper) {
                (Value::Date(x), Value::Date(lo), Value::Date(hi)) => lo <= x && x < hi,
                (Value::Timestamp(x), Value::Timestamp(lo), Value::Timestamp(hi)) => {
                    lo <= x && x < hi
                }
                _ => false,
            },
            None => false,
        };
        if inside {
            return Ok(());
        }
        let found = partition_of(&d.partition_column, self.grain, value).map_err(|e| {
            PluginError::Output {
                job: self.job.clone(),
                message: e.to_string(),
            }
        })?;
        if found != self.partition {
            let grain: Vec<&Value> = d.grain_indexes.iter().map(|&i| &row[i]).collect();
            return Err(PluginError::WrongPartition {
                job: self.job.clone(),
                partition: self.partition.name().into_owned(),
                found: found.name().into_owned(),
                key: grain_text(d, &grain),
            });
        }
        Ok(())
    }

    /// Bytes the grain-key check holds: 8 per output row with a grain key.
    pub fn held_bytes(&self) -> usize {
        self.hashes.capacity() * std::mem::size_of::<u64>()
    }

    /// Ends the grain key's check: if two output rows' key hashes are equal, `rerun`
    /// hands every output row again (the rows held, or the job run again: it is
    /// deterministic) to the visitor it is given, which compares the keys of those
    /// hashes exactly, so a duplicate is named and a hash collision is not one.
    pub fn finish<E: From<PluginError>>(
        mut self,
        rerun: impl FnOnce(&mut dyn FnMut(&[Vec<Value>]) -> Result<(), PluginError>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.hashes.sort_unstable();
        let repeated: std::collections::HashSet<u64> = self
            .hashes
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        self.hashes = Vec::new();
        if repeated.is_empty() {
            return Ok(());
        }
        let mut seen = std::collections::HashSet::new();
        let mut visit = |rows: &[Vec<Value>]| -> Result<(), PluginError> {
            for row in rows {
                if !repeated.contains(&self.grain_hash(row)) {
                    continue;
                }
                let grain: Vec<&Value> = self.d.grain_indexes.iter().map(|&i| &row[i]).collect();
                if !seen.insert(schema::key_bytes(&grain)) {
                    return Err(PluginError::DuplicateGrain {
                        job: self.job.clone(),
                        columns: self.d.grain_key.join(", "),
                        key: grain_text(self.d, &grain),
                    });
                }
            }
            Ok(())
        };
        rerun(&mut visit)
    }
}

/// Host stack beyond the wasm stack on a job's thread: the host's own frames (wasmtime,
/// WASI, the value conversions) below and between wasm frames.
const JOB_THREAD_STACK_MARGIN: usize = 4 << 20;

/// The stack a thread that runs a job's calls needs: the wasm stack limit with room
/// for the host's frames (wasm runs on the calling thread's stack).
pub fn job_thread_stack(limits: &SandboxLimits) -> usize {
    limits.max_stack_bytes + JOB_THREAD_STACK_MARGIN
}

/// Runs `f` on a thread of its own whose stack holds a wasm stack of
/// `max_stack_bytes` with room to spare, and waits for it: `describe` and instantiation
/// run there, like jobs, so deep recursion in them is a wasm stack overflow (an error),
/// never an overflow of a smaller host thread's stack (which aborts the process).
pub(super) fn run_on_stack<T: Send>(
    max_stack_bytes: usize,
    f: impl FnOnce() -> T + Send,
) -> Result<T, PluginError> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("weir-plugin-load".into())
            .stack_size(max_stack_bytes + JOB_THREAD_STACK_MARGIN)
            .spawn_scoped(scope, f)
            .map_err(PluginError::Thread)?
            .join()
            .map_err(|_| PluginError::Lost)
    })
}

/// An owned partition job, for [`run_job_on_thread`].
#[derive(Debug, Clone)]
pub struct OwnedJob {
    pub table: String,
    pub partition: Partition,
    pub grain: Grain,
    pub config: Vec<(String, String)>,
    pub input: InputColumns,
}

impl OwnedJob {
    /// The job as a [`JobSpec`] borrowing it.
    pub fn spec(&self) -> JobSpec<'_> {
        JobSpec {
            table: &self.table,
            partition: &self.partition,
            grain: self.grain,
            config: &self.config,
            input: &self.input,
        }
    }
}

/// Runs [`Plugin::run_job`] on a thread of its own (kept for a next job:
/// [`crate::job_threads`]) whose stack holds the wasm stack
/// limit with room to spare (wasm runs on the calling thread's stack, and a runtime's
/// worker threads are smaller than a plugin may be allowed), and hands back the input
/// with the output.
pub async fn run_job_on_thread(
    plugin: Arc<Plugin>,
    limits: SandboxLimits,
    job: OwnedJob,
    input: Vec<InputRow>,
) -> (Vec<InputRow>, Result<JobOutput, PluginError>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stack = job_thread_stack(&limits);
    let spawned = crate::job_threads::spawn("weir-plugin-job", stack, move || {
        let spec = job.spec();
        let result = plugin.run_job(&limits, &spec, &input);
        let _ = tx.send((input, result));
    });
    if let Err(e) = spawned {
        return (Vec::new(), Err(PluginError::Thread(e)));
    }
    rx.await
        .unwrap_or_else(|_| (Vec::new(), Err(PluginError::Lost)))
}

/// Runs [`Plugin::run_row_by_row`] on a thread of its own, as [`run_job_on_thread`]
/// runs a job.
pub async fn run_row_by_row_on_thread(
    plugin: Arc<Plugin>,
    limits: SandboxLimits,
    job: OwnedJob,
    input: Arc<Vec<InputRow>>,
) -> Result<RowFates, PluginError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let stack = job_thread_stack(&limits);
    crate::job_threads::spawn("weir-plugin-job", stack, move || {
        let spec = job.spec();
        let _ = tx.send(plugin.run_row_by_row(&limits, &spec, &input));
    })
    .map_err(PluginError::Thread)?;
    rx.await.unwrap_or(Err(PluginError::Lost))
}

/// `id = 42, day = 2026-03-01` for a grain key's values.
fn grain_text(d: &Description, values: &[&Value]) -> String {
    if values.is_empty() {
        return "(no grain key)".into();
    }
    d.grain_key
        .iter()
        .zip(values)
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a decimal's text, already checked to be in PostgreSQL's output form and to
/// fit `typmod` (`Description::check_row`), is what `numeric(p,s)` stores: exactly `s`
/// fraction digits, and not a negative zero. Most plugins output decimals so, and
/// [`crate::value::fit_decimal`] would only copy them.
fn stored_as_is(text: &str, typmod: crate::value::NumericTypmod) -> bool {
    let fraction = text.find('.').map_or(0, |dot| text.len() - dot - 1);
    let scale = usize::try_from(typmod.scale).unwrap_or(usize::MAX);
    fraction == scale
        && (!text.starts_with('-') || text.bytes().any(|b| (b'1'..=b'9').contains(&b)))
}

#[cfg(test)]
mod tests {
    use super::{OutputCheck, stored_as_is};
    use crate::partition::{Grain, Partition};
    use crate::plugin::schema::{Description, Kind, OutputColumn, OutputType};
    use crate::value::{NumericTypmod, Value, fit_decimal};

    /// A plugin's `jsonb` output is written as PostgreSQL stores it, so the lineage
    /// checksum is of what `verify` reads back (`1e2` is `100`, `-0` is `0`).
    #[test]
    #[allow(clippy::expect_used)]
    fn jsonb_output_is_normalised_as_postgresql_stores_it() {
        let column = |name: &str, ty| OutputColumn {
            name: name.into(),
            ty,
            nullable: true,
        };
        let d = Description::check(
            "p".into(),
            "1".into(),
            Kind::Row,
            vec![
                column("d", OutputType::Date),
                column("jb", OutputType::Jsonb),
                column("j", OutputType::Json),
            ],
            vec![],
            "d".into(),
        )
        .expect("description");
        let mut check =
            OutputCheck::of(&d, "job", &Partition::Key("1970-01-01".into()), Grain::Day);
        let mut rows = vec![vec![
            Value::Date(0),
            Value::Json(r#"{"b":1.50,"a":[1e2,-0]}"#.into()),
            Value::Json("1e2".into()),
        ]];
        check.check(&mut rows).expect("checked");
        let Value::Json(jsonb) = &rows[0][1] else {
            panic!("jsonb")
        };
        assert_eq!(jsonb, r#"{"b":1.50,"a":[100,0]}"#);
        assert_eq!(
            rows[0][2],
            Value::Json("1e2".into()),
            "a json column keeps its text"
        );
    }

    #[test]
    fn a_decimal_kept_as_is_is_what_fitting_it_gives() {
        let typmods = [(12, 2), (5, 0), (3, 5), (5, -2), (14, 4)];
        let texts = [
            "12345.67",
            "-12345.67",
            "7",
            "7.5",
            "7.50",
            "0.00",
            "0",
            "-0.00",
            "0.00999",
            "12300",
            "NaN",
            "-1",
            "1.2345",
        ];
        for (p, s) in typmods {
            let typmod = NumericTypmod::new(p, s).expect("a typmod");
            for text in texts {
                if stored_as_is(text, typmod) {
                    assert_eq!(
                        fit_decimal(text, typmod).as_deref(),
                        Ok(text),
                        "{text} in numeric({p},{s})"
                    );
                }
            }
        }
        let two = NumericTypmod::new(12, 2).expect("a typmod");
        assert!(stored_as_is("12345.67", two));
        assert!(!stored_as_is("7.5", two), "padded to 7.50");
        assert!(!stored_as_is("-0.00", two), "no negative zero");
        assert!(!stored_as_is(
            "12300",
            NumericTypmod::new(5, -2).expect("a typmod")
        ));
    }
}
