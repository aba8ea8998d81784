//! WebAssembly transform plugins (`weir:transform@0.1.0`, `wit/transform-0.1.0/`):
//! loading and caching components, the sandbox, and partition jobs.
//!
//! A [`PluginHost`] owns the wasmtime engines and the epoch ticker; a [`Plugin`] is
//! one loaded component (bytes, sha256, checked description); [`Plugin::run_job`]
//! (`job`) runs one partition job in a fresh store and instance, so no state is shared
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
pub mod cases;
mod contract;
mod job;
pub mod json;
mod sandbox;
pub mod schema;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store, Trap};

use crate::value::Value;

pub use cache::{CacheError, WASMTIME_VERSION};
pub use contract::InputColumns;
use job::run_on_stack;
pub use job::{
    CallOutput, InputRow, JobOutput, JobSession, JobSpec, JobStats, KeyIndex, OutputCheck,
    OwnedJob, Rejection, RowFates, job_thread_stack, run_job_on_thread, run_row_by_row_on_thread,
};
pub use sandbox::JobClock;
use sandbox::{JobSeed, JobState};
pub use schema::{Description, Kind, OutputColumn, OutputType};
pub use weir_core::limits::{
    DEFAULT_FUEL_PER_CALL, DEFAULT_FUEL_PER_ROW, DEFAULT_LOG_MESSAGE_BYTES,
    DEFAULT_LOG_MESSAGES_PER_CALL, DEFAULT_MAX_STACK_BYTES, DEFAULT_MEMORY_BYTES,
    DEFAULT_OUTPUT_BYTES_PER_CALL, DEFAULT_TIMEOUT_PER_CALL, FUEL_PER_CALL_RANGE,
    FUEL_PER_ROW_RANGE, MAX_INSTANCES, MAX_MEMORIES, MAX_STACK_BYTES_LIMIT, MAX_STACK_KB_RANGE,
    MAX_TABLES, MEMORY_MB_RANGE, OUTPUT_MB_RANGE, SandboxLimits, TIMEOUT_MS_RANGE,
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
/// Set (to anything), plugins' compiled functions are named for `perf`: profiling a
/// plugin job shows which of its functions the time goes to.
pub const PERFMAP_ENV: &str = "WEIR_WASM_PERFMAP";

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
    #[error("{path} is not a usable weir:transform component: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot load plugin {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: cache::CacheError,
    },
    #[error(
        "{job}: CPU budget exceeded: the call used its {fuel} units of fuel ({per_call} for the call and {per_row} for each of its {rows} rows; if the work is legitimate, raise `plugin_fuel_per_row` for each row's, `plugin_fuel_per_call` for the call's own)"
    )]
    Fuel {
        job: String,
        fuel: u64,
        per_call: u64,
        per_row: u64,
        rows: u64,
    },
    #[error("{job}: CPU budget exceeded: the call ran past its wall-clock limit of {} ms (raise `plugin_timeout_ms` if the work is legitimate)", .limit.as_millis())]
    Timeout { job: String, limit: Duration },
    #[error(
        "{job}: memory cap exceeded: the plugin's memories and tables would hold {desired} bytes, the cap is {cap} bytes (`plugin_memory_mb`)"
    )]
    Memory {
        job: String,
        desired: usize,
        cap: usize,
    },
    #[error(
        "{job}: instance limit exceeded: {message} (a plugin instance may create at most {MAX_INSTANCES} core instances, {MAX_MEMORIES} memories and {MAX_TABLES} tables)"
    )]
    Structure { job: String, message: String },
    #[error(
        "{job}: output cap exceeded: one call handed the engine more than {limit} bytes (`plugin_output_mb`); nothing of the partition is written"
    )]
    OutputCap { job: String, limit: usize },
    #[error("{job}: wasm stack overflow (the limit is {limit} bytes, `plugin_max_stack_kb`)")]
    StackOverflow { job: String, limit: usize },
    #[error("{job}: the plugin trapped: {message}")]
    Trap { job: String, message: String },
    #[error(
        "{job}: this process could not get memory for the plugin's sandbox ({message}): an address-space limit (`ulimit -v`, `prlimit --as`, a container's) below what wasmtime reserves? Each plugin instance reserves several GiB of virtual address space (guard regions, not memory in use): lift the address-space limit and bound memory by resident size instead (a cgroup's memory.max). Retried; not the plugin's fault"
    )]
    HostMemory { job: String, message: String },
    #[error("{job}: the plugin returned an error{}: {message}", if kind.is_empty() { String::new() } else { format!(" ({kind})") })]
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

/// How an engine allocates the instances of its jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Allocation {
    /// From a pool of slots made once ([`pool_config`]): a job's instance reuses a
    /// slot's memory mappings, its memory is reset in place when the job ends, and
    /// the component's initial memory image stays mapped in the slot. A partition job
    /// makes a fresh instance, so with mappings made and unmapped per job, page faults,
    /// copy-on-write faults and the TLB shootdowns of `munmap` were about 40% of the
    /// partition threads' time in a live run of small rounds.
    Pooled,
    /// Mapped for each instance and unmapped after it: for a component that does not
    /// fit the pool's slots (see [`PluginHost::load_bytes`]), or a host where the
    /// pool's address space cannot be reserved.
    OnDemand,
}

/// The pool of a pooled engine: slots for more instances than the jobs that can run
/// at once (`[engine] parallelism` is at most 64), each memory up to 4 GiB (wasm32's
/// whole space; the sandbox's memory cap is enforced by the store's limiter, as with
/// on-demand instances). A module with more than one memory, or more tables or table
/// elements than these, does not fit, and its plugin is run on demand.
fn pool_config() -> wasmtime::PoolingAllocationConfig {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 8)
        .total_memories(POOL_INSTANCES)
        .total_tables(POOL_INSTANCES * 8)
        .max_tables_per_module(4)
        .table_elements(100_000)
        .max_memory_size(1 << 32)
        // Reset the pages a job wrote (found with Linux's `PAGEMAP_SCAN` where the
        // kernel has it, 6.7 and later; else the first pages) with `memset` rather
        // than `madvise`: a row plugin's job touches a few MiB, which are then reset
        // in place and reused with no page fault.
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(POOL_KEEP_RESIDENT)
        .table_keep_resident(64 << 10);
    pool
}

/// Component instances of a pooled engine at once (see [`pool_config`]).
const POOL_INSTANCES: u32 = 128;
/// Bytes of each pooled memory reset in place when its job ends.
const POOL_KEEP_RESIDENT: usize = 8 << 20;

/// Owns the engines and the thread that ticks their epochs.
pub struct PluginHost {
    engines: Mutex<HashMap<(usize, Allocation), Arc<EngineSet>>>,
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

    fn engine_set(
        &self,
        max_stack_bytes: usize,
        allocation: Allocation,
    ) -> Result<Arc<EngineSet>, String> {
        let mut engines = self.engines.lock().map_err(|_| "engine lock poisoned")?;
        if let Some(set) = engines.get(&(max_stack_bytes, allocation)) {
            return Ok(Arc::clone(set));
        }
        let mut config = wasmtime::Config::new();
        if allocation == Allocation::Pooled {
            config
                .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool_config()));
        }
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
        if std::env::var_os(PERFMAP_ENV).is_some() {
            // Plugin functions by name in `perf report` (wasmtime writes
            // /tmp/perf-<pid>.map as it compiles or loads them).
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
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
        engines.insert((max_stack_bytes, allocation), Arc::clone(&set));
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
        if !bytes.starts_with(b"\0asm") {
            return Err(load_err(
                "it is not a WebAssembly file (a component starts with the bytes `\\0asm`): set `plugin` to the .wasm that `weir plugin build` (or the project's build.sh) writes".into(),
            ));
        }
        if bytes.get(4..8) == Some(&[1, 0, 0, 0]) {
            return Err(load_err(
                "it is a core WebAssembly module, not a component: build the plugin for the `wasm32-wasip2` target with its SDK (`weir plugin build`), or wrap the module with `wasm-tools component new`".into(),
            ));
        }
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        // A pooled engine if its pool can be reserved and the component instantiates
        // in it; else, as for any component that does not fit its slots, on demand.
        if let Ok(set) = self.engine_set(limits.max_stack_bytes, Allocation::Pooled) {
            match self.load_in(set, path, bytes, sha256, limits, Allocation::Pooled) {
                Ok(Some(plugin)) => return Ok(plugin),
                Ok(None) => {
                    tracing::debug!(plugin = %path.display(), "plugin does not fit the instance pool; it runs on demand");
                }
                Err(e) => return Err(e),
            }
        }
        let set = self
            .engine_set(limits.max_stack_bytes, Allocation::OnDemand)
            .map_err(|m| load_err(format!("cannot configure the engine: {m}")))?;
        self.load_in(set, path, bytes, sha256, limits, Allocation::OnDemand)
            .map(|plugin| plugin.unwrap_or_else(|| unreachable!("on demand never falls back")))
    }

    /// Loads a component into `set`'s engine. `None`: in a pooled engine, it could not
    /// be compiled, linked or instantiated (its memories or tables do not fit the
    /// pool's slots, the pool is full, or it is not a usable component at all), and it
    /// is for an on-demand engine, which compiles it again and says what is wrong.
    fn load_in(
        &self,
        set: Arc<EngineSet>,
        path: &Path,
        bytes: &[u8],
        sha256: [u8; 32],
        limits: &SandboxLimits,
        allocation: Allocation,
    ) -> Result<Option<Plugin>, PluginError> {
        let load_err = |message: String| PluginError::Load {
            path: path.to_owned(),
            message,
        };
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
        // In a pooled engine, a component that cannot be compiled, linked or
        // instantiated is for the on-demand engine, which says why (a component whose
        // memories or tables do not fit the pool's slots is refused at any of them).
        let pooled = allocation == Allocation::Pooled;
        let component = match cached {
            Some(c) => c,
            None => {
                let component = match Component::new(&set.engine, bytes) {
                    Ok(c) => c,
                    Err(_) if pooled => return Ok(None),
                    Err(e) => return Err(load_err(format!("{e:#}"))),
                };
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
        let instance_pre = match set.linker.instantiate_pre(&component) {
            Ok(pre) => pre,
            Err(_) if pooled => return Ok(None),
            Err(e) => {
                return Err(load_err(format!(
                    "{e:#}; the sandbox provides only weir:transform/log and WASI 0.2 without files, network or environment"
                )));
            }
        };
        let pre = match contract::Pre::new(instance_pre) {
            Ok(pre) => pre,
            Err(_) if pooled => return Ok(None),
            Err(e) => return Err(load_err(e)),
        };
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
        if pooled && !plugin.instantiates(limits) {
            return Ok(None);
        }
        let description = run_on_stack(limits.max_stack_bytes, || plugin.call_describe(limits))
            .and_then(|described| described)
            .map_err(|e| match e {
                PluginError::Load { .. } | PluginError::HostMemory { .. } => e,
                other => load_err(format!("`describe` failed: {other}")),
            })?;
        plugin.description = Some(description);
        Ok(Some(plugin))
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
    pre: contract::Pre,
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

    /// Whether the plugin can read a clock: it imports a `wasi:clocks` interface, the
    /// only way the sandbox lets time be seen (no files, sockets or host calls carry
    /// it). A plugin that cannot is never given its partition's clock, which costs a
    /// pass over every row of the partition to find.
    pub fn reads_clock(&self) -> bool {
        self.imports
            .iter()
            .any(|name| name.starts_with("wasi:clocks/"))
    }

    pub fn compile_info(&self) -> CompileInfo {
        self.compile
    }

    /// The contract version the component implements (`0.1.0`, `0.2.0`).
    pub fn contract(&self) -> &'static str {
        self.pre.contract()
    }

    fn new_store(&self, seed: &JobSeed<'_>, limits: &SandboxLimits) -> Store<JobState> {
        let name = self
            .description
            .as_ref()
            .map_or("(loading)", |d| d.name.as_str());
        let mut store = Store::new(&self.engine.engine, JobState::new(seed, limits, name));
        store.limiter(|s| &mut s.memory);
        // Every string and list lifted out of the guest in one call (its return value,
        // or what it passes to a host function) consumes this at its host size.
        store.set_hostcall_fuel(limits.output_bytes_per_call);
        store.epoch_deadline_trap();
        store
    }

    /// Arms the budgets of a call that handles `rows` rows: fuel of `fuel_per_call`
    /// plus `fuel_per_row` for each row, so that a plugin within its per-row budget
    /// passes whatever the chunk size; the wall-clock backstop; the log budget.
    fn arm(store: &mut Store<JobState>, limits: &SandboxLimits, rows: u64) {
        let fuel = limits
            .fuel_per_call
            .saturating_add(limits.fuel_per_row.saturating_mul(rows));
        // Fuel is enabled on every engine of the host, so this cannot fail.
        let _ = store.set_fuel(fuel);
        store.data_mut().call = sandbox::CallBudget { fuel, rows };
        let ticks = limits.timeout_per_call.as_millis() / EPOCH_TICK.as_millis();
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).max(1));
        if let Ok(mut log) = store.data().log.lock() {
            log.new_call();
        }
    }

    fn fuel_used(store: &Store<JobState>) -> u64 {
        store
            .data()
            .call
            .fuel
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
        // wasmtime's own errors for these two are not public types: known by their text
        // (pinned by the hostile plugin tests).
        let chain = format!("{error:#}");
        if chain.contains("fuel allocated for hostcalls has been exhausted") {
            return PluginError::OutputCap {
                job,
                limit: limits.output_bytes_per_call,
            };
        }
        if let Some(at) = chain.find("resource limit exceeded: ") {
            let message = chain[at + "resource limit exceeded: ".len()..]
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            return PluginError::Structure { job, message };
        }
        if let Some(at) = chain.find("Cannot allocate memory") {
            return PluginError::HostMemory {
                job,
                message: chain[at..].lines().next().unwrap_or_default().to_owned(),
            };
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PluginError::Fuel {
                job,
                fuel: store.data().call.fuel,
                per_call: limits.fuel_per_call,
                per_row: limits.fuel_per_row,
                rows: store.data().call.rows,
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

    /// Whether an instance of the component can be made (and dropped at once).
    fn instantiates(&self, limits: &SandboxLimits) -> bool {
        let seed = JobSeed {
            plugin_sha256: &self.sha256,
            table: "",
            partition: "",
            clock: JobClock::at(0),
        };
        let mut store = self.new_store(&seed, limits);
        Self::arm(&mut store, limits, 0);
        self.pre.instantiate(&mut store).is_ok()
    }

    fn call_describe(&self, limits: &SandboxLimits) -> Result<Description, PluginError> {
        let seed = JobSeed {
            plugin_sha256: &self.sha256,
            table: "",
            partition: "",
            clock: JobClock::at(0),
        };
        let job = format!("plugin {}", self.path.display());
        let mut store = self.new_store(&seed, limits);
        Self::arm(&mut store, limits, 0);
        let world = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| Self::call_error(&store, limits, &job, &e))?;
        Self::arm(&mut store, limits, 0);
        let d = world
            .describe(&mut store)
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
