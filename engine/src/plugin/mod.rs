//! WebAssembly transform plugins (`weir:transform@0.1.0`, `wit/transform-0.1.0/`):
//! loading and caching components, the sandbox, and partition jobs.
//!
//! A [`PluginHost`] owns the wasmtime engines and the epoch ticker; a [`Plugin`] is
//! one loaded component (bytes, sha256, checked description); [`Plugin::run_job`]
//! runs one partition job in a fresh store and instance, so no state is shared
//! between jobs, and checks its output before returning it.
//!
//! **Architecture Invariant**: a job's output is a function of (the plugin's bytes,
//! its config, the table, the partition, the pushed rows): the sandbox gives the
//! plugin nothing else (see `sandbox`), and every limit that can end a call is either
//! deterministic (fuel, memory, stack) or reported as an error, never as output.
//!
//! **Architecture Invariant**: no output leaves `run_job` unchecked: every row matches
//! the declared columns and types, belongs to the job's partition, and the grain key
//! is unique; every rejection names a key that was pushed.

mod cache;
pub mod json;
mod sandbox;
pub mod schema;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceAny};
use wasmtime::{Engine, Store, Trap};

use crate::feed::Op;
use crate::partition::{Grain, Partition, PartitionPredicate, partition_of, predicate};
use crate::value::Value;

pub use cache::{CacheError, WASMTIME_VERSION};
use sandbox::{JobSeed, JobState};
pub use schema::{Description, Kind, OutputColumn, OutputType};
pub use weir_core::limits::{
    DEFAULT_FUEL_PER_CALL, DEFAULT_LOG_MESSAGE_BYTES, DEFAULT_LOG_MESSAGES_PER_CALL,
    DEFAULT_MAX_STACK_BYTES, DEFAULT_MEMORY_BYTES, DEFAULT_TIMEOUT_PER_CALL, FUEL_PER_CALL_RANGE,
    MAX_STACK_BYTES_LIMIT, MAX_STACK_KB_RANGE, MEMORY_MB_RANGE, SandboxLimits, TIMEOUT_MS_RANGE,
    normalize_config,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit/transform-0.1.0",
        world: "plugin",
    });
}

use bindings::exports::weir::transform::transform as wit;
use bindings::weir::transform::types as wty;

/// Rows pushed per `push` call.
pub const CHUNK_ROWS: usize = 4096;
/// How often the epoch ticks: the granularity of the wall-clock backstop.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Why a plugin could not be loaded, or a job failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error("cannot read plugin {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a usable weir:transform@0.1.0 component: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot load plugin {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: cache::CacheError,
    },
    #[error(
        "{job}: CPU budget exceeded: the call used its {fuel} units of fuel (raise `plugin_fuel_per_call` if the work is legitimate)"
    )]
    Fuel { job: String, fuel: u64 },
    #[error("{job}: CPU budget exceeded: the call ran past its wall-clock limit of {} ms (raise `plugin_timeout_ms` if the work is legitimate)", .limit.as_millis())]
    Timeout { job: String, limit: Duration },
    #[error(
        "{job}: memory cap exceeded: the plugin asked for {desired} bytes, the cap is {cap} bytes (`plugin_memory_mb`)"
    )]
    Memory {
        job: String,
        desired: usize,
        cap: usize,
    },
    #[error("{job}: wasm stack overflow (the limit is {limit} bytes, `plugin_max_stack_kb`)")]
    StackOverflow { job: String, limit: usize },
    #[error("{job}: the plugin trapped: {message}")]
    Trap { job: String, message: String },
    #[error("{job}: the plugin returned an error: {kind}: {message}")]
    Guest {
        job: String,
        kind: &'static str,
        message: String,
    },
    #[error("{job}: invalid output: {message}; nothing of the partition is written")]
    Output { job: String, message: String },
    #[error(
        "{job}: an output row belongs to partition `{found}`, not `{partition}` (row {key}); nothing of the partition is written"
    )]
    WrongPartition {
        job: String,
        partition: String,
        found: String,
        key: String,
    },
    #[error(
        "{job}: the grain key ({columns}) is not unique: {key} appears more than once; nothing of the partition is written"
    )]
    DuplicateGrain {
        job: String,
        columns: String,
        key: String,
    },
    #[error("cannot start a plugin job thread")]
    Thread(#[source] std::io::Error),
    #[error("a plugin job thread stopped without an answer")]
    Lost,
}

/// How a component was made ready.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CompileInfo {
    /// Loaded from the disk cache rather than compiled.
    pub cache_hit: bool,
    /// Time to compile or load, in milliseconds.
    pub millis: u64,
}

/// One wasmtime engine and its linker; engines differ only in their stack limit.
struct EngineSet {
    engine: Engine,
    linker: Linker<JobState>,
}

/// Owns the engines and the thread that ticks their epochs.
pub struct PluginHost {
    engines: Mutex<HashMap<usize, Arc<EngineSet>>>,
    ticked: Arc<Mutex<Vec<Engine>>>,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
    cache_dir: Option<PathBuf>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl PluginHost {
    /// A host that caches compiled components in `cache_dir` (none: always compile).
    pub fn new(cache_dir: Option<PathBuf>) -> PluginHost {
        let ticked: Arc<Mutex<Vec<Engine>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (ticked, stop) = (Arc::clone(&ticked), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("weir-plugin-epoch".into())
                .spawn(move || {
                    // Ticks follow the clock, not the count of sleeps: a tick that comes
                    // late (a busy machine) is caught up at once, so a deadline is never
                    // later than its time plus one tick and one scheduling delay.
                    let started = Instant::now();
                    let mut ticks: u128 = 0;
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        let due = started.elapsed().as_millis() / EPOCH_TICK.as_millis();
                        if let Ok(engines) = ticked.lock() {
                            while ticks < due {
                                engines.iter().for_each(Engine::increment_epoch);
                                ticks += 1;
                            }
                        }
                    }
                })
                .ok()
        };
        PluginHost {
            engines: Mutex::default(),
            ticked,
            stop,
            ticker,
            cache_dir,
        }
    }

    /// The default cache folder for commands without a stage: `$WEIR_PLUGIN_CACHE`,
    /// else `$XDG_CACHE_HOME/weir/plugins`, else `$HOME/.cache/weir/plugins`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("WEIR_PLUGIN_CACHE") {
            return Some(PathBuf::from(dir));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("weir").join("plugins"))
    }

    fn engine_set(&self, max_stack_bytes: usize) -> Result<Arc<EngineSet>, String> {
        let mut engines = self.engines.lock().map_err(|_| "engine lock poisoned")?;
        if let Some(set) = engines.get(&max_stack_bytes) {
            return Ok(Arc::clone(set));
        }
        let mut config = wasmtime::Config::new();
        config
            .wasm_component_model(true)
            .consume_fuel(true)
            .epoch_interruption(true)
            .max_wasm_stack(max_stack_bytes)
            // Never used (calls are synchronous), but wasmtime requires it to exceed the
            // wasm stack.
            .async_stack_size(max_stack_bytes.max(DEFAULT_MAX_STACK_BYTES) + (1 << 20))
            .cranelift_nan_canonicalization(true)
            .parallel_compilation(true);
        let engine = Engine::new(&config).map_err(|e| format!("{e:#}"))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
        sandbox::link_stopped_time(&mut linker).map_err(|e| format!("{e:#}"))?;
        bindings::Plugin::add_to_linker::<JobState, HasSelf<JobState>>(&mut linker, |s| s)
            .map_err(|e| format!("{e:#}"))?;
        let set = Arc::new(EngineSet {
            engine: engine.clone(),
            linker,
        });
        if let Ok(mut ticked) = self.ticked.lock() {
            ticked.push(engine);
        }
        engines.insert(max_stack_bytes, Arc::clone(&set));
        Ok(set)
    }

    /// Loads a component from a file: compiles it (or loads the cached compilation),
    /// links it against the sandbox, and reads and checks its description.
    pub fn load(&self, path: &Path, limits: &SandboxLimits) -> Result<Plugin, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_owned(),
            source,
        })?;
        self.load_bytes(path, &bytes, limits)
    }

    /// [`PluginHost::load`] of bytes already read (`path` names them in errors).
    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        limits: &SandboxLimits,
    ) -> Result<Plugin, PluginError> {
        let load_err = |message: String| PluginError::Load {
            path: path.to_owned(),
            message,
        };
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        let set = self
            .engine_set(limits.max_stack_bytes)
            .map_err(|m| load_err(format!("cannot configure the engine: {m}")))?;
        let started = Instant::now();
        let cache = self
            .cache_dir
            .as_deref()
            .map(cache::CacheDir::open)
            .transpose()
            .map_err(|source| PluginError::Cache {
                path: path.to_owned(),
                source,
            })?;
        let entry = cache.as_ref().map(|c| c.entry(&set.engine, &sha256));
        let cached = entry.as_ref().and_then(|e| e.load(&set.engine));
        let cache_hit = cached.is_some();
        let component = match cached {
            Some(c) => c,
            None => {
                let component =
                    Component::new(&set.engine, bytes).map_err(|e| load_err(format!("{e:#}")))?;
                if let Some(entry) = &entry {
                    let stored = component
                        .serialize()
                        .map_err(|e| format!("{e:#}"))
                        .and_then(|compiled| {
                            entry
                                .store(&compiled)
                                .map_err(|e| crate::errors::error_chain(&e))
                        });
                    if let Err(error) = stored {
                        tracing::warn!(%error, "compiled plugin not cached; the next start compiles it again");
                    }
                }
                component
            }
        };
        let compile = CompileInfo {
            cache_hit,
            millis: started.elapsed().as_millis() as u64,
        };
        let imports = component
            .component_type()
            .imports(&set.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let instance_pre = set.linker.instantiate_pre(&component).map_err(|e| {
            load_err(format!(
                "{e:#}; the sandbox provides only weir:transform/log and WASI 0.2 without files, network or environment"
            ))
        })?;
        let pre = bindings::PluginPre::new(instance_pre).map_err(|e| load_err(format!("{e:#}")))?;
        let mut plugin = Plugin {
            path: path.to_owned(),
            sha256,
            size_bytes: bytes.len() as u64,
            engine: set,
            pre,
            description: None,
            imports,
            compile,
        };
        let description = plugin.call_describe(limits).map_err(|e| match e {
            PluginError::Load { .. } => e,
            other => load_err(format!("`describe` failed: {other}")),
        })?;
        plugin.description = Some(description);
        Ok(plugin)
    }
}

impl Drop for PluginHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// A loaded plugin.
pub struct Plugin {
    path: PathBuf,
    sha256: [u8; 32],
    size_bytes: u64,
    engine: Arc<EngineSet>,
    pre: bindings::PluginPre<JobState>,
    description: Option<Description>,
    imports: Vec<String>,
    compile: CompileInfo,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("sha256", &self.sha256_hex())
            .finish_non_exhaustive()
    }
}

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
    /// The largest linear memory the instance grew to, in bytes.
    pub peak_memory_bytes: usize,
}

impl Plugin {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn description(&self) -> &Description {
        // Set by `load_bytes` before the plugin is returned.
        self.description
            .as_ref()
            .unwrap_or_else(|| unreachable!("a loaded plugin has a description"))
    }

    /// The component's imports (interface names, e.g. `wasi:cli/stdout@0.2.3`).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    pub fn compile_info(&self) -> CompileInfo {
        self.compile
    }

    fn new_store(&self, seed: &JobSeed<'_>, limits: &SandboxLimits) -> Store<JobState> {
        let name = self
            .description
            .as_ref()
            .map_or("(loading)", |d| d.name.as_str());
        let mut store = Store::new(&self.engine.engine, JobState::new(seed, limits, name));
        store.limiter(|s| &mut s.memory);
        store.epoch_deadline_trap();
        store
    }

    /// Arms the per-call budgets and the log budget.
    fn arm(store: &mut Store<JobState>, limits: &SandboxLimits) {
        // Fuel is enabled on every engine of the host, so this cannot fail.
        let _ = store.set_fuel(limits.fuel_per_call);
        let ticks = limits.timeout_per_call.as_millis() / EPOCH_TICK.as_millis();
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).max(1));
        if let Ok(mut log) = store.data().log.lock() {
            log.new_call();
        }
    }

    fn fuel_used(store: &Store<JobState>, limits: &SandboxLimits) -> u64 {
        limits
            .fuel_per_call
            .saturating_sub(store.get_fuel().unwrap_or(0))
    }

    /// Turns a failed call into the error that says which limit ended it.
    fn call_error(
        store: &Store<JobState>,
        limits: &SandboxLimits,
        job: &str,
        error: &wasmtime::Error,
    ) -> PluginError {
        let job = job.to_owned();
        if let Some(desired) = store.data().memory.refused {
            return PluginError::Memory {
                job,
                desired,
                cap: store.data().memory.cap,
            };
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PluginError::Fuel {
                job,
                fuel: limits.fuel_per_call,
            },
            Some(Trap::Interrupt) => PluginError::Timeout {
                job,
                limit: limits.timeout_per_call,
            },
            Some(Trap::StackOverflow) => PluginError::StackOverflow {
                job,
                limit: limits.max_stack_bytes,
            },
            _ => PluginError::Trap {
                job,
                message: trap_message(error),
            },
        }
    }

    fn call_describe(&self, limits: &SandboxLimits) -> Result<Description, PluginError> {
        let seed = JobSeed {
            plugin_sha256: &self.sha256,
            table: "",
            partition: "",
            clock_micros: 0,
        };
        let job = format!("plugin {}", self.path.display());
        let mut store = self.new_store(&seed, limits);
        Self::arm(&mut store, limits);
        let world = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| Self::call_error(&store, limits, &job, &e))?;
        Self::arm(&mut store, limits);
        let d = world
            .weir_transform_transform()
            .call_describe(&mut store)
            .map_err(|e| Self::call_error(&store, limits, &job, &e))?;
        let columns = d
            .columns
            .into_iter()
            .map(|c| OutputColumn {
                name: c.name,
                ty: output_type(c.type_),
                nullable: c.nullable,
            })
            .collect();
        let kind = match d.kind {
            wit::Kind::Row => Kind::Row,
            wit::Kind::Partition => Kind::Partition,
        };
        Description::check(
            d.name,
            d.version,
            kind,
            columns,
            d.grain_key,
            d.partition_column,
        )
        .map_err(|message| PluginError::Load {
            path: self.path.clone(),
            message: format!("its description is invalid: {message}"),
        })
    }

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
        Self::arm(&mut store, limits);
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
        Self::arm(&mut store, limits);
        let session: ResourceAny = session_api
            .call_constructor(&mut store, &info, spec.config)
            .map_err(|e| fail(&store, e))?;
        fuel += Self::fuel_used(&store, limits);

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
            Self::arm(&mut store, limits);
            crate::failpoint!("plugin-call");
            let result = session_api
                .call_push(&mut store, session, &rows)
                .map_err(|e| fail(&store, e))?;
            fuel += Self::fuel_used(&store, limits);
            collect(result, &mut pushed, &input[..offset], &mut output)?;
        }
        Self::arm(&mut store, limits);
        let result = session_api
            .call_finish(&mut store, session)
            .map_err(|e| fail(&store, e))?;
        fuel += Self::fuel_used(&store, limits);
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

/// Frames of a wasm backtrace shown in a trap's error.
const BACKTRACE_FRAMES: usize = 6;

/// What trapped (the root cause), then the innermost frames of the wasm backtrace.
fn trap_message(error: &wasmtime::Error) -> String {
    let mut message = match error.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    };
    if let Some(bt) = error.downcast_ref::<wasmtime::WasmBacktrace>() {
        let frames = bt.to_string();
        let mut lines = frames.lines().filter(|l| !l.trim().is_empty());
        let shown: Vec<&str> = lines.by_ref().take(BACKTRACE_FRAMES + 1).collect();
        let more = lines.count();
        message.push('\n');
        message.push_str(&shown.join("\n"));
        if more > 0 {
            message.push_str(&format!("\n    ... {more} more frames"));
        }
    }
    message
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

fn output_type(t: wty::ColumnType) -> OutputType {
    use wty::ColumnType as C;
    match t {
        C::Smallint => OutputType::Smallint,
        C::Integer => OutputType::Integer,
        C::Bigint => OutputType::Bigint,
        C::Real => OutputType::Real,
        C::DoublePrecision => OutputType::DoublePrecision,
        C::Numeric(n) => OutputType::Numeric {
            precision: n.map(|n| n.precision),
            scale: n.map_or(0, |n| n.scale),
        },
        C::Text => OutputType::Text,
        C::Varchar(length) => OutputType::Varchar { length },
        C::Boolean => OutputType::Boolean,
        C::Date => OutputType::Date,
        C::Timestamp => OutputType::Timestamp,
        C::Timestamptz => OutputType::Timestamptz,
        C::Uuid => OutputType::Uuid,
        C::Json => OutputType::Json,
        C::Jsonb => OutputType::Jsonb,
        C::Bytea => OutputType::Bytea,
    }
}

fn to_wit(v: &Value) -> wty::Value {
    match v {
        Value::Null => wty::Value::Null,
        Value::Bool(b) => wty::Value::Boolean(*b),
        Value::Int(i) => wty::Value::Integer(*i),
        Value::Float(f) => wty::Value::Float(*f),
        Value::Text(s) => wty::Value::Text(s.clone()),
        Value::Bytes(b) => wty::Value::Bytes(b.clone()),
        Value::Decimal(s) => wty::Value::Decimal(s.clone()),
        Value::Date(d) => wty::Value::Date(*d),
        Value::Timestamp(t) => wty::Value::Timestamp(*t),
        Value::Json(s) => wty::Value::Json(s.clone()),
        Value::Unsupported { type_name, text } => wty::Value::Unsupported(wty::UnsupportedValue {
            type_name: type_name.clone(),
            text: text.clone(),
        }),
    }
}

fn from_wit(v: wty::Value) -> Value {
    match v {
        wty::Value::Null => Value::Null,
        wty::Value::Boolean(b) => Value::Bool(b),
        wty::Value::Integer(i) => Value::Int(i),
        wty::Value::Float(f) => Value::Float(f),
        wty::Value::Text(s) => Value::Text(s),
        wty::Value::Bytes(b) => Value::Bytes(b),
        wty::Value::Decimal(s) => Value::Decimal(s),
        wty::Value::Date(d) => Value::Date(d),
        wty::Value::Timestamp(t) => Value::Timestamp(t),
        wty::Value::Json(s) => Value::Json(s),
        wty::Value::Unsupported(u) => Value::Unsupported {
            type_name: u.type_name,
            text: u.text,
        },
    }
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

/// SHA-256 of a normalized config (lengths included, so no two configs collide by
/// concatenation), as recorded in lineage.
pub fn config_hash(config: &[(String, String)]) -> String {
    let mut h = Sha256::new();
    h.update(b"weir-plugin-config-v1");
    for (k, v) in normalize_config(config) {
        h.update((k.len() as u64).to_be_bytes());
        h.update(k.as_bytes());
        h.update((v.len() as u64).to_be_bytes());
        h.update(v.as_bytes());
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_hash_ignores_order_but_not_content() {
        let a = vec![
            ("rate".to_owned(), "1.5".to_owned()),
            ("x".into(), "y".into()),
        ];
        let b = vec![
            ("x".to_owned(), "y".to_owned()),
            ("rate".into(), "1.5".into()),
        ];
        assert_eq!(config_hash(&a), config_hash(&b));
        let c = vec![
            ("rate".to_owned(), "1.50".to_owned()),
            ("x".into(), "y".into()),
        ];
        assert_ne!(config_hash(&a), config_hash(&c));
        let d = vec![
            ("ra".to_owned(), "te1.5".to_owned()),
            ("x".into(), "y".into()),
        ];
        assert_ne!(config_hash(&a), config_hash(&d));
        assert_ne!(config_hash(&a), config_hash(&[]));
    }
}
