//! Prometheus metrics: what a running `weir run` (or `weir backfill`) is doing, served
//! in the Prometheus text format at `--metrics-addr` (`GET /metrics`).
//!
//! The engine records through the `metrics` facade, which is a no-op until [`serve`]
//! installs the exporter, so a run without `--metrics-addr` pays nothing but a relaxed
//! atomic load per call. Everything is recorded per staged batch, per partition job or
//! per gauge refresh, never per row (the facade's cost is then invisible next to a
//! synced RocksDB write or a COPY).
//!
//! Labels are bounded: `table` is a configured source table name, `operation` one of
//! [`Retry`]'s names. No label or value carries a row value, a partition key or a
//! secret (partitions are unbounded in number, so they are not labels either).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Transactions staged (synced in the stage and then acknowledged to the source).
pub const SOURCE_TRANSACTIONS: &str = "weir_source_transactions_total";
/// Row changes staged, by table.
pub const SOURCE_CHANGES: &str = "weir_source_changes_total";
/// The stage's position: a PostgreSQL LSN as a number, or a file's byte offset.
pub const SOURCE_POSITION: &str = "weir_source_position";
/// The replication slot's lag: the server's WAL end minus the slot's confirmed flush
/// position (PostgreSQL source only).
pub const SLOT_LAG: &str = "weir_slot_lag_bytes";
/// Rows copied into the target, by table (a merge counts only the rows it rewrote).
pub const TARGET_ROWS: &str = "weir_target_rows_written_total";
/// Partition writes committed, by table.
pub const PARTITIONS_WRITTEN: &str = "weir_partitions_written_total";
/// Partition jobs that failed, by table (they stay dirty).
pub const PARTITION_FAILURES: &str = "weir_partition_failures_total";
/// Seconds of one partition job: stage read, transform, and the target transaction.
pub const PARTITION_JOB_SECONDS: &str = "weir_partition_job_seconds";
/// Input rows a plugin rejected into `weir.dead_letter`, by table.
pub const ROWS_REJECTED: &str = "weir_rows_rejected_total";
/// Bad source records written to `weir.dead_letter`.
pub const DEAD_LETTERS: &str = "weir_dead_letters_total";
/// Fuel a table's plugin burnt, summed over its jobs.
pub const PLUGIN_FUEL: &str = "weir_plugin_fuel_total";
/// The largest linear memory an instance of the table's plugin grew to, in its last job.
pub const PLUGIN_MEMORY: &str = "weir_plugin_memory_peak_bytes";
/// Bytes of the stage's folder on disk.
pub const STAGE_SIZE: &str = "weir_stage_size_bytes";
/// Bytes staged but not yet written to the target (`[stage] max_unwritten_mb` bounds it).
pub const STAGE_UNWRITTEN: &str = "weir_stage_unwritten_bytes";
/// Dirty partitions waiting to be written, by table.
pub const DIRTY_PARTITIONS: &str = "weir_dirty_partitions";
/// 1 while intake is paused at `[stage] max_unwritten_mb`, else 0.
pub const INTAKE_PAUSED: &str = "weir_intake_paused";
/// Retries of an operation that failed for a reason a retry may cure.
pub const RETRIES: &str = "weir_retries_total";

/// Bucket bounds of [`PARTITION_JOB_SECONDS`], in seconds: a small partition's job
/// takes milliseconds, a large one's or a slow plugin's up to minutes.
const JOB_SECONDS_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// How often [`gauges`](crate::pipeline) of state (stage size, dirty partitions, slot
/// lag) are read again: often enough for a 15 s scrape, rarely enough that walking the
/// stage's folder and asking the source costs nothing measurable.
pub const GAUGE_REFRESH: Duration = Duration::from_secs(2);

static ENABLED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "--metrics-addr {addr}: cannot serve metrics there (is the port taken, or the address not this machine's?)"
    )]
    Serve {
        addr: SocketAddr,
        #[source]
        source: metrics_exporter_prometheus::BuildError,
    },
}

/// Serves the metrics at `addr` for the rest of the process, from the current tokio
/// runtime. The address is bound before this returns, so a taken port is an error here.
pub fn serve(addr: SocketAddr) -> Result<(), MetricsError> {
    let error = |source| MetricsError::Serve { addr, source };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Full(PARTITION_JOB_SECONDS.to_owned()),
            &JOB_SECONDS_BUCKETS,
        )
        .map_err(error)?
        .install()
        .map_err(error)?;
    describe();
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(%addr, "serving Prometheus metrics at /metrics");
    Ok(())
}

/// Whether [`serve`] ran: work done only to feed a gauge (asking the source for the
/// slot's lag) is skipped otherwise.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn describe() {
    describe_counter!(
        SOURCE_TRANSACTIONS,
        "Transactions staged (synced, then acknowledged to the source)"
    );
    describe_counter!(SOURCE_CHANGES, "Row changes staged, by source table");
    describe_gauge!(
        SOURCE_POSITION,
        "The stage's source position (PostgreSQL LSN as a number, or a file's byte offset)"
    );
    describe_gauge!(
        SLOT_LAG,
        Unit::Bytes,
        "The server's WAL end minus the replication slot's confirmed flush position"
    );
    describe_counter!(TARGET_ROWS, "Rows copied into the target, by source table");
    describe_counter!(
        PARTITIONS_WRITTEN,
        "Partition writes committed, by source table"
    );
    describe_counter!(
        PARTITION_FAILURES,
        "Partition jobs that failed and stay dirty, by source table"
    );
    describe_histogram!(
        PARTITION_JOB_SECONDS,
        Unit::Seconds,
        "One partition job: stage read, transform and target transaction"
    );
    describe_counter!(
        ROWS_REJECTED,
        "Input rows the table's plugin rejected into weir.dead_letter"
    );
    describe_counter!(
        DEAD_LETTERS,
        "Bad source records written to weir.dead_letter"
    );
    describe_counter!(
        PLUGIN_FUEL,
        "Fuel the table's plugin burnt, over all its jobs"
    );
    describe_gauge!(
        PLUGIN_MEMORY,
        Unit::Bytes,
        "Peak linear memory of the table's plugin instance in its last job"
    );
    describe_gauge!(
        STAGE_SIZE,
        Unit::Bytes,
        "Size of the stage's folder on disk"
    );
    describe_gauge!(
        STAGE_UNWRITTEN,
        Unit::Bytes,
        "Bytes staged but not yet written to the target"
    );
    describe_gauge!(
        DIRTY_PARTITIONS,
        "Dirty partitions waiting to be written, by source table"
    );
    describe_gauge!(
        INTAKE_PAUSED,
        "1 while intake is paused at [stage] max_unwritten_mb"
    );
    describe_counter!(
        RETRIES,
        "Retries of an operation that failed for a curable reason"
    );
}

/// What is retried after a failure a retry may cure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A partition write that failed with the target unreachable or a connection lost.
    TargetWrite,
    /// Opening the source again after it went away.
    SourceConnect,
}

impl Retry {
    fn name(self) -> &'static str {
        match self {
            Retry::TargetWrite => "target_write",
            Retry::SourceConnect => "source_connect",
        }
    }
}

/// A staged batch: its transactions, its changes by table, and the new position.
pub fn staged<'a>(
    transactions: usize,
    changes: impl IntoIterator<Item = (&'a str, u64)>,
    position: Option<u64>,
) {
    counter!(SOURCE_TRANSACTIONS).increment(transactions as u64);
    for (table, n) in changes {
        counter!(SOURCE_CHANGES, "table" => table.to_owned()).increment(n);
    }
    if let Some(position) = position {
        gauge!(SOURCE_POSITION).set(position as f64);
    }
}

/// A committed partition write of `table`.
pub fn partition_written(table: &str, copied: u64, rejected: u64) {
    let table = table.to_owned();
    counter!(PARTITIONS_WRITTEN, "table" => table.clone()).increment(1);
    counter!(TARGET_ROWS, "table" => table.clone()).increment(copied);
    counter!(ROWS_REJECTED, "table" => table).increment(rejected);
}

/// A partition job of `table` that ended (written, failed, or found clean) after `elapsed`.
pub fn partition_job(table: &str, elapsed: Duration, failed: bool) {
    let table = table.to_owned();
    histogram!(PARTITION_JOB_SECONDS, "table" => table.clone()).record(elapsed.as_secs_f64());
    if failed {
        counter!(PARTITION_FAILURES, "table" => table).increment(1);
    }
}

/// A plugin job of `table`: the fuel it burnt and its instance's peak memory.
pub fn plugin_job(table: &str, fuel: u64, peak_memory_bytes: usize) {
    let table = table.to_owned();
    counter!(PLUGIN_FUEL, "table" => table.clone()).increment(fuel);
    gauge!(PLUGIN_MEMORY, "table" => table).set(peak_memory_bytes as f64);
}

pub fn dead_letters(n: usize) {
    counter!(DEAD_LETTERS).increment(n as u64);
}

pub fn retried(what: Retry, n: usize) {
    counter!(RETRIES, "operation" => what.name()).increment(n as u64);
}

pub fn intake_paused(paused: bool) {
    gauge!(INTAKE_PAUSED).set(if paused { 1.0 } else { 0.0 });
}

/// The stage's state, read again every [`GAUGE_REFRESH`]: its size, the unwritten
/// backlog, and dirty partitions by table (every configured table, so a table that
/// became clean shows 0).
pub fn stage_state<'a>(
    size_bytes: u64,
    unwritten_bytes: u64,
    dirty: impl IntoIterator<Item = (&'a str, usize)>,
) {
    gauge!(STAGE_SIZE).set(size_bytes as f64);
    gauge!(STAGE_UNWRITTEN).set(unwritten_bytes as f64);
    for (table, n) in dirty {
        gauge!(DIRTY_PARTITIONS, "table" => table.to_owned()).set(n as f64);
    }
}

pub fn slot_lag(bytes: i64) {
    gauge!(SLOT_LAG).set(bytes as f64);
}
