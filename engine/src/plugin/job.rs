//! One partition job: its input and output types, the job itself (a fresh instance,
//! a session, the rows pushed in chunks, the output checked), and the threads jobs and
//! loads run on.

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::sandbox::{JobSeed, JobState};
use super::{
    CHUNK_ROWS, Description, Plugin, PluginError, SandboxLimits, from_wit, json, schema, to_wit,
    wit, wty,
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

impl Plugin {
    /// Runs one partition job over `input` in a fresh instance: construct a session,
    /// push the rows in chunks of [`CHUNK_ROWS`], finish, then check the output.
    pub fn run_job(
        &self,
        limits: &SandboxLimits,
        spec: &JobSpec<'_>,
        input: &[InputRow],
    ) -> Result<JobOutput, PluginError> {
        let description = self.description();
        let job = format!(
            "plugin `{}` ({}…), table {}, partition {}",
            description.name,
            &self.sha256_hex()[..12],
            spec.table,
            spec.partition
        );
        let clock_micros = input
            .iter()
            .filter_map(|r| r.commit_time)
            .max()
            .unwrap_or(0);
        let partition_name = spec.partition.name().to_owned();
        let seed = JobSeed {
            plugin_sha256: &self.sha256,
            table: spec.table,
            partition: &partition_name,
            clock_micros,
        };
        let mut store = self.new_store(&seed, limits);
        let fail =
            |store: &Store<JobState>, e: wasmtime::Error| Self::call_error(store, limits, &job, &e);
        Self::arm(&mut store, limits, 0);
        let world = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| fail(&store, e))?;
        let session_api = world.weir_transform_transform().session();
        let info = wit::PartitionInfo {
            table: spec.table.to_owned(),
            name: partition_name.clone(),
        };
        let mut fuel = 0u64;
        Self::arm(&mut store, limits, 0);
        let session: ResourceAny = session_api
            .call_constructor(&mut store, &info, spec.config)
            .map_err(|e| fail(&store, e))?;
        fuel += Self::fuel_used(&store);

        // Keys pushed so far, to check rejections against: made on the first rejection
        // (most jobs have none), from the rows pushed until then.
        // It covers the first `.1` rows of the input and grows as rejections need it.
        let mut pushed: (HashMap<Vec<u8>, usize>, usize) = (HashMap::new(), 0);
        let mut output = JobOutput::default();
        let collect = |result: Result<wit::PushOutput, wty::Error>,
                       pushed: &mut (HashMap<Vec<u8>, usize>, usize),
                       pushed_rows: &[InputRow],
                       output: &mut JobOutput|
         -> Result<(), PluginError> {
            let out = result.map_err(|e| {
                let (kind, message) = match e {
                    wty::Error::InvalidConfig(m) => ("invalid config", m),
                    wty::Error::InvalidInput(m) => ("invalid input", m),
                    wty::Error::Other(m) => ("error", m),
                };
                PluginError::Guest {
                    job: job.clone(),
                    kind,
                    message,
                }
            })?;
            for row in out.rows {
                output.rows.push(row.into_iter().map(from_wit).collect());
            }
            for r in out.rejections {
                let key: Vec<Value> = r.key.into_iter().map(from_wit).collect();
                let bytes = schema::key_bytes(&key.iter().collect::<Vec<_>>());
                let (index_of, covered) = pushed;
                for (i, r) in pushed_rows.iter().enumerate().skip(*covered) {
                    index_of.insert(schema::key_bytes(&r.key.iter().collect::<Vec<_>>()), i);
                }
                *covered = pushed_rows.len();
                let Some(&index) = index_of.get(&bytes) else {
                    return Err(PluginError::Output {
                        job: job.clone(),
                        message: format!(
                            "a rejection names key {}, which was not pushed",
                            json::key_text(&key)
                        ),
                    });
                };
                output.rejections.push(Rejection {
                    key,
                    reason: r.reason,
                    input: index,
                });
            }
            Ok(())
        };
        let mut offset = 0;
        for chunk in input.chunks(CHUNK_ROWS) {
            let rows: Vec<wit::StagedRow> = chunk.iter().map(to_wit_row).collect();
            offset += chunk.len();
            Self::arm(&mut store, limits, chunk.len() as u64);
            crate::failpoint!("plugin-call");
            let result = session_api
                .call_push(&mut store, session, &rows)
                .map_err(|e| fail(&store, e))?;
            fuel += Self::fuel_used(&store);
            collect(result, &mut pushed, &input[..offset], &mut output)?;
        }
        // A partition plugin's `finish` works over every row pushed.
        Self::arm(&mut store, limits, input.len() as u64);
        let result = session_api
            .call_finish(&mut store, session)
            .map_err(|e| fail(&store, e))?;
        fuel += Self::fuel_used(&store);
        collect(result, &mut pushed, input, &mut output)?;
        // The store (and with it the instance and every resource) is dropped here.
        output.fuel = fuel;
        output.peak_memory_bytes = store.data().memory.peak;
        drop(store);
        self.check_output(&job, spec, &output)?;
        self.normalise_output(&mut output);
        Ok(output)
    }

    /// Pads the checked output's decimals to their `numeric(p,s)` column's scale (`7.5`
    /// → `7.50`), as PostgreSQL stores them, so that the lineage checksum of the rows
    /// written is the checksum of the rows `weir verify` reads back.
    fn normalise_output(&self, output: &mut JobOutput) {
        let d = self.description();
        let typmods: Vec<(usize, crate::value::NumericTypmod)> = d
            .columns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c.ty.engine_type() {
                crate::value::ColumnType::Numeric(Some(m)) => Some((i, m)),
                _ => None,
            })
            .collect();
        if typmods.is_empty() {
            return;
        }
        for row in &mut output.rows {
            for &(i, typmod) in &typmods {
                if let Some(Value::Decimal(text)) = row.get_mut(i)
                    && let Ok(fitted) = crate::value::fit_decimal(text, typmod)
                {
                    *text = fitted;
                }
            }
        }
    }

    /// Checks types, partition and grain uniqueness of a job's output.
    fn check_output(
        &self,
        job: &str,
        spec: &JobSpec<'_>,
        output: &JobOutput,
    ) -> Result<(), PluginError> {
        let d = self.description();
        let mut grains = std::collections::HashSet::with_capacity(output.rows.len());
        // The job's partition as a predicate on the value, computed once: most rows are
        // checked by a comparison; `partition_of` names the partition of one that fails.
        let column_type = d.columns[d.partition_index].ty.engine_type();
        let bounds = predicate(column_type, spec.grain, spec.partition);
        for row in &output.rows {
            d.check_row(row).map_err(|message| PluginError::Output {
                job: job.to_owned(),
                message,
            })?;
            let grain: Vec<&Value> = d.grain_indexes.iter().map(|&i| &row[i]).collect();
            let value = &row[d.partition_index];
            let inside = match &bounds {
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
            let found = if inside {
                spec.partition.clone()
            } else {
                partition_of(&d.partition_column, spec.grain, value).map_err(|e| {
                    PluginError::Output {
                        job: job.to_owned(),
                        message: e.to_string(),
                    }
                })?
            };
            if &found != spec.partition {
                return Err(PluginError::WrongPartition {
                    job: job.to_owned(),
                    partition: spec.partition.name().to_owned(),
                    found: found.name().to_owned(),
                    key: grain_text(d, &grain),
                });
            }
            if !d.grain_indexes.is_empty() && !grains.insert(schema::key_bytes(&grain)) {
                return Err(PluginError::DuplicateGrain {
                    job: job.to_owned(),
                    columns: d.grain_key.join(", "),
                    key: grain_text(d, &grain),
                });
            }
        }
        Ok(())
    }
}

/// Host stack beyond the wasm stack on a job's thread: the host's own frames (wasmtime,
/// WASI, the value conversions) below and between wasm frames.
const JOB_THREAD_STACK_MARGIN: usize = 4 << 20;

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
}

/// Runs [`Plugin::run_job`] on a thread of its own whose stack holds the wasm stack
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
    let spawned = std::thread::Builder::new()
        .name("weir-plugin-job".into())
        .stack_size(limits.max_stack_bytes + JOB_THREAD_STACK_MARGIN)
        .spawn(move || {
            let spec = JobSpec {
                table: &job.table,
                partition: &job.partition,
                grain: job.grain,
                config: &job.config,
            };
            let result = plugin.run_job(&limits, &spec, &input);
            let _ = tx.send((input, result));
        });
    if let Err(e) = spawned {
        return (Vec::new(), Err(PluginError::Thread(e)));
    }
    rx.await
        .unwrap_or_else(|_| (Vec::new(), Err(PluginError::Lost)))
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

fn to_wit_row(r: &InputRow) -> wit::StagedRow {
    wit::StagedRow {
        key: r.key.iter().map(to_wit).collect(),
        op: match r.op {
            Op::Insert => wit::Op::Insert,
            Op::Update => wit::Op::Update,
            Op::Delete => wit::Op::Delete,
            Op::Read => wit::Op::Read,
        },
        commit_position: r.commit_position,
        commit_time: r.commit_time,
        columns: r
            .columns
            .iter()
            .map(|(name, value)| wty::ColumnValue {
                name: name.clone(),
                value: to_wit(value),
            })
            .collect(),
    }
}
