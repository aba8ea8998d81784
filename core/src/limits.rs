//! The sandbox limits of a plugin and the normalized form of its config: what the
//! config file sets and checks. Kept apart from the wasmtime host (the engine's
//! `plugin`, which re-exports them), so that the config parser builds without wasmtime.

use std::time::Duration;

/// Default memory cap per instance: all its linear memories and tables together.
/// Threat: a plugin that allocates without bound takes the memory of the engine and of
/// every other job.
pub const DEFAULT_MEMORY_BYTES: u64 = 256 << 20;
/// Core instances one plugin instance may create. Threat: a component of thousands of
/// small instances, each with its own host-side state. A Rust component has a few, a
/// Python or JavaScript one a few dozen.
pub const MAX_INSTANCES: usize = 256;
/// Linear memories one plugin instance may create. Threat: a component of many memories,
/// each reserving gigabytes of address space. Every one counts against the memory cap.
pub const MAX_MEMORIES: usize = 16;
/// Tables one plugin instance may create; every element counts against the memory cap
/// at [`TABLE_ELEMENT_BYTES`].
pub const MAX_TABLES: usize = 256;
/// What one table element costs the host (a function reference), counted against the
/// memory cap.
pub const TABLE_ELEMENT_BYTES: usize = 8;
/// Default cap on what one call may return to the host, in bytes as the host holds it
/// (every string and list lifted, each element at its host size). Threat: output rows
/// that all reference one large buffer in the plugin's memory are copied once each on
/// the host, so a plugin within its memory cap could make the host allocate without
/// bound.
pub const DEFAULT_OUTPUT_BYTES_PER_CALL: usize = 128 << 20;
/// Default CPU budget per call, in fuel units (about one per wasm instruction).
/// Threat: a call that never ends holds a worker forever. Fuel is deterministic: the
/// same call runs out at the same instruction on any machine, so a retry cannot pass
/// where the first run failed. About 10 s of a tight loop here.
pub const DEFAULT_FUEL_PER_CALL: u64 = 20_000_000_000;
/// Default CPU budget per row a call handles, in fuel units, added to the call's own
/// ([`DEFAULT_FUEL_PER_CALL`]): `push` gets it for each row pushed, a partition
/// plugin's `finish` for each row of the job. Threat: the same as the per-call budget;
/// the per-row part makes a plugin's pass or fail independent of the chunk size. About
/// 5 ms of work per row here (a JavaScript SHA-256 of a short value takes about 5·10⁶).
pub const DEFAULT_FUEL_PER_ROW: u64 = 10_000_000;
/// Default wall-clock backstop per call. Threat: a call slow per unit of fuel (a host
/// call that blocks, a pathological memory pattern) that fuel alone does not bound.
pub const DEFAULT_TIMEOUT_PER_CALL: Duration = Duration::from_secs(60);
/// Default maximum wasm stack. Threat: unbounded recursion overflowing the host
/// thread's stack (which would abort the process rather than trap).
pub const DEFAULT_MAX_STACK_BYTES: usize = 1 << 20;
/// Default log messages (including stdout and stderr lines) per call. Threat: a plugin
/// that floods the engine's log, hiding everything else and filling disks.
pub const DEFAULT_LOG_MESSAGES_PER_CALL: u32 = 100;
/// Default cut of one log message, in bytes. Threat: row data smuggled into logs in
/// bulk, and unbounded log lines.
pub const DEFAULT_LOG_MESSAGE_BYTES: usize = 2048;
/// The largest thread stack the host gives a job; the wasm stack must fit in it with
/// room for the host's own frames.
pub const MAX_STACK_BYTES_LIMIT: usize = 64 << 20;

/// The accepted range of `plugin_memory_mb` (and `plugin test --memory-mb`), MiB.
pub const MEMORY_MB_RANGE: std::ops::RangeInclusive<u64> = 16..=4096;
/// The accepted range of `plugin_output_mb` (and `plugin test --output-mb`), MiB.
pub const OUTPUT_MB_RANGE: std::ops::RangeInclusive<u64> = 1..=4096;
/// The accepted range of `plugin_fuel_per_call` (and `--fuel-per-call`).
pub const FUEL_PER_CALL_RANGE: std::ops::RangeInclusive<u64> = 1_000_000..=u64::MAX / 2;
/// The accepted range of `plugin_fuel_per_row` (and `--fuel-per-row`).
pub const FUEL_PER_ROW_RANGE: std::ops::RangeInclusive<u64> = 0..=1_000_000_000_000;
/// The accepted range of `plugin_timeout_ms` (and `--timeout-ms`).
pub const TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 10..=3_600_000;
/// The accepted range of `plugin_max_stack_kb` (and `--max-stack-kb`), KiB.
pub const MAX_STACK_KB_RANGE: std::ops::RangeInclusive<u64> =
    64..=(MAX_STACK_BYTES_LIMIT >> 10) as u64;

/// The sandbox limits of a table's plugin (`[[table]]` keys `plugin_memory_mb`,
/// `plugin_fuel_per_call`, `plugin_fuel_per_row`, `plugin_timeout_ms`, `plugin_max_stack_kb`,
/// `plugin_log_messages_per_call`, `plugin_log_message_bytes`, `plugin_output_mb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// All linear memories and tables of an instance together.
    pub memory_bytes: u64,
    /// What one call may return to the host (and what one call into the host may pass).
    pub output_bytes_per_call: usize,
    pub fuel_per_call: u64,
    /// Added to `fuel_per_call` for each row a call handles.
    pub fuel_per_row: u64,
    pub timeout_per_call: Duration,
    pub max_stack_bytes: usize,
    pub log_messages_per_call: u32,
    pub log_message_bytes: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            output_bytes_per_call: DEFAULT_OUTPUT_BYTES_PER_CALL,
            fuel_per_call: DEFAULT_FUEL_PER_CALL,
            fuel_per_row: DEFAULT_FUEL_PER_ROW,
            timeout_per_call: DEFAULT_TIMEOUT_PER_CALL,
            max_stack_bytes: DEFAULT_MAX_STACK_BYTES,
            log_messages_per_call: DEFAULT_LOG_MESSAGES_PER_CALL,
            log_message_bytes: DEFAULT_LOG_MESSAGE_BYTES,
        }
    }
}

/// The config as the plugin sees it: sorted by key, keys unique.
pub fn normalize_config(config: &[(String, String)]) -> Vec<(String, String)> {
    let map: std::collections::BTreeMap<&str, &str> = config
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    map.into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A transaction a source is reading is handed to the stage's pending area in chunks
/// once it holds this many bytes of changes in memory (or `transaction_chunk_changes`
/// changes, whichever comes first). Threat: a transaction of a few huge rows held
/// whole.
pub const TRANSACTION_CHUNK_BYTES: usize = 16 << 20;
/// Intake stages the transactions read so far in one synced write once they hold this
/// many bytes of changes (or `batch_transactions_max` transactions). Threat: a batch of
/// many large transactions held whole before it is staged.
pub const INTAKE_BATCH_BYTES: usize = 32 << 20;

/// What RocksDB may hold in memory for one open stage: its memtables (128 MiB in all)
/// and its block cache (64 MiB).
pub const STAGE_MEMORY_BYTES: usize = 192 << 20;
/// A partition job reads its staged rows in chunks of at most this many rows ...
pub const JOB_CHUNK_ROWS: usize = 4096;
/// ... and about this many bytes in memory (a single larger row is a chunk of its own).
pub const JOB_CHUNK_BYTES: usize = 8 << 20;
/// Output chunks in flight between a partition job and its target writer.
pub const JOB_CHANNEL_CHUNKS: usize = 1;
/// COPY data a writer buffers before sending it to the target.
pub const COPY_BUFFER_BYTES: usize = 1 << 20;
/// The process itself in the memory budget: code, runtimes, connections, the
/// sandbox's engines.
pub const PROCESS_BASE_BYTES: u64 = 96 << 20;
/// A loaded plugin's compiled code in the memory budget, per distinct plugin.
pub const PLUGIN_CODE_BYTES: u64 = 64 << 20;

/// The memory one partition job may hold: its input chunk three times (the staged
/// rows, the plugin's input rows, their lowered form), one call's output three times
/// (being made, in the channel to the writer, being encoded: a plugin's is capped by
/// `plugin_output_mb`, the identity's is its input), the COPY buffer, and the plugin
/// instance's memories and tables (`plugin_memory_mb`). Whatever the partition's size,
/// but for 8 bytes per output row of a plugin with a grain key (its uniqueness check).
pub fn job_bound_bytes(plugin: Option<&SandboxLimits>) -> u64 {
    let input = 3 * JOB_CHUNK_BYTES as u64;
    let output = plugin.map_or(JOB_CHUNK_BYTES as u64, |l| l.output_bytes_per_call as u64);
    let instance = plugin.map_or(0, |l| l.memory_bytes);
    input + (2 + JOB_CHANNEL_CHUNKS as u64) * output + COPY_BUFFER_BYTES as u64 * 5 / 4 + instance
}
