//! The sandbox of one partition job: a virtual, deterministic WASI 0.2 and the limits
//! of one store (memory, log volume). CPU limits (fuel, epoch deadline) are set per
//! call by the job itself (`super::job`).
//!
//! **Architecture Invariant**: nothing a plugin can read depends on anything but the
//! job: (plugin sha256, table, partition, the partition's newest commit time). There
//! are no preopened directories, no environment variables or arguments, no sockets or
//! name lookups, an empty stdin; both clocks return one fixed instant; both random
//! generators are SHA-256 in counter mode over a seed of the job.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

use super::SandboxLimits;
use super::bindings::weir::transform::log;
use weir_core::limits::{MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES, TABLE_ELEMENT_BYTES};

/// Identifies a job for the sandbox's deterministic inputs.
#[derive(Debug, Clone)]
pub struct JobSeed<'a> {
    pub plugin_sha256: &'a [u8; 32],
    pub table: &'a str,
    pub partition: &'a str,
    /// The instant both clocks read.
    pub clock: JobClock,
}

/// The instant both clocks of a job read, microseconds since the Unix epoch: the
/// newest commit time among the partition's rows (0 when none is known). Either given
/// (the rows are at hand) or computed when the plugin first reads a clock, once, and
/// then the same for every read: a plugin whose runtime imports a clock but never reads
/// it (componentize-py's) does not pay for a pass over its partition.
///
/// It also records whether the plugin read either clock or drew random bytes
/// ([`JobClock::used`]): a job that did gave each row an output that depends on the
/// job, not only on the row (the partition's newest commit time, the job's place in
/// its random sequence), which a merge of some rows cannot reproduce.
#[derive(Clone)]
pub struct JobClock {
    instant: Arc<LazyLock<i64, Box<dyn FnOnce() -> i64 + Send>>>,
    used: Arc<AtomicBool>,
}

impl JobClock {
    /// A clock at `micros`.
    pub fn at(micros: i64) -> JobClock {
        JobClock::on_first_read(move || micros)
    }

    /// A clock whose instant `read` computes, on the first read of either clock.
    pub fn on_first_read(read: impl FnOnce() -> i64 + Send + 'static) -> JobClock {
        JobClock {
            instant: Arc::new(LazyLock::new(Box::new(read))),
            used: Arc::default(),
        }
    }

    /// The instant (computing it if no read did yet).
    pub fn micros(&self) -> i64 {
        **self.instant
    }

    /// Whether the plugin read a clock or drew random bytes in this job.
    pub fn used(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }

    fn mark_used(&self) {
        self.used.store(true, Ordering::Relaxed);
    }
}

impl fmt::Debug for JobClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobClock")
    }
}

/// The store data of one job.
pub struct JobState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(super) memory: MemoryCap,
    pub(super) log: Arc<Mutex<LogSink>>,
    /// The budget of the call in progress (set when it is armed).
    pub(super) call: CallBudget,
}

/// The fuel a call was given, and the rows it was given it for.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallBudget {
    pub fuel: u64,
    pub rows: u64,
}

impl JobState {
    pub fn new(seed: &JobSeed<'_>, limits: &SandboxLimits, plugin_name: &str) -> JobState {
        let log = Arc::new(Mutex::new(LogSink::new(
            plugin_name,
            seed.table,
            seed.partition,
            limits,
        )));
        let mut wasi = WasiCtx::builder();
        // Explicit, although most are the builder's defaults: the sandbox must not
        // depend on a default changing in a wasmtime upgrade.
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .allow_blocking_current_thread(true)
            .stdout(LogStream {
                sink: Arc::clone(&log),
                stream: "stdout",
            })
            .stderr(LogStream {
                sink: Arc::clone(&log),
                stream: "stderr",
            })
            .wall_clock(FixedClock::new(seed.clock.clone()))
            .monotonic_clock(FixedClock::new(seed.clock.clone()))
            .secure_random(JobRng::new(seed, b"secure"))
            .insecure_random(JobRng::new(seed, b"insecure"))
            .insecure_random_seed(u128::from_be_bytes(
                job_seed(seed, b"insecure-seed")[..16]
                    .try_into()
                    .unwrap_or([0; 16]),
            ));
        JobState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            memory: MemoryCap::new(limits.memory_bytes),
            log,
            call: CallBudget::default(),
        }
    }
}

impl WasiView for JobState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// `types` declares no functions; the bindings still ask for its (empty) host trait.
impl super::bindings::weir::transform::types::Host for JobState {}

impl log::Host for JobState {
    fn log(&mut self, level: log::Level, message: String) {
        if let Ok(mut sink) = self.log.lock() {
            sink.message(LogLevel::from(level), "log", message.as_bytes());
        }
    }
}

/// SHA-256 of (domain, plugin sha256, table, partition), with lengths so that no two
/// jobs share a seed.
fn job_seed(seed: &JobSeed<'_>, domain: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [
        b"weir-plugin-seed-v1".as_slice(),
        domain,
        seed.plugin_sha256.as_slice(),
        seed.table.as_bytes(),
        seed.partition.as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().into()
}

/// Deterministic random bytes: block `i` is SHA-256(seed ‖ i). A documented function
/// of the job (not a library's generator whose algorithm may change in an upgrade), so
/// a partition rewritten by a later Weir reads the same bytes.
pub struct JobRng {
    seed: [u8; 32],
    counter: u64,
    block: [u8; 32],
    used: usize,
    /// The job's clock, told of each draw (see [`JobClock::used`]).
    clock: JobClock,
}

impl JobRng {
    pub fn new(seed: &JobSeed<'_>, domain: &[u8]) -> JobRng {
        JobRng {
            seed: job_seed(seed, domain),
            counter: 0,
            block: [0; 32],
            used: 32,
            clock: seed.clock.clone(),
        }
    }

    fn fill(&mut self, out: &mut [u8]) {
        self.clock.mark_used();
        for byte in out {
            if self.used == self.block.len() {
                let mut h = Sha256::new();
                h.update(self.seed);
                h.update(self.counter.to_be_bytes());
                self.block = h.finalize().into();
                self.counter += 1;
                self.used = 0;
            }
            *byte = self.block[self.used];
            self.used += 1;
        }
    }
}

impl rand_core::TryRng for JobRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.fill(&mut b);
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.fill(&mut b);
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.fill(dst);
        Ok(())
    }
}

/// A subscription that is ready at once: in the sandbox time does not pass, so a
/// guest's sleep or timeout on the monotonic clock returns immediately instead of
/// blocking the host thread (where neither fuel nor the epoch deadline could end it).
/// A guest that waits for the clock to advance spins, and its CPU budget ends it.
struct Elapsed;

#[wasmtime_wasi::async_trait]
impl Pollable for Elapsed {
    async fn ready(&mut self) {}
}

/// The WASI package whose monotonic clock the host links (wasmtime-wasi's own; a
/// component importing an older 0.2 version is matched to it).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces the monotonic clock's `subscribe-duration` and `subscribe-instant` (which
/// sleep in real time) with subscriptions that are ready at once (see [`Elapsed`]).
pub fn link_stopped_time(
    linker: &mut wasmtime::component::Linker<JobState>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    for name in ["subscribe-duration", "subscribe-instant"] {
        clock.func_wrap(
            name,
            |mut store: wasmtime::StoreContextMut<'_, JobState>, (_,): (u64,)| {
                let table = &mut store.data_mut().table;
                let elapsed = table.push(Elapsed)?;
                Ok((wasmtime_wasi::p2::subscribe(table, elapsed)?,))
            },
        )?;
    }
    linker.allow_shadowing(false);
    Ok(())
}

/// A wall and monotonic clock stopped at the job's instant.
#[derive(Debug, Clone)]
pub struct FixedClock {
    clock: JobClock,
}

impl FixedClock {
    pub fn new(clock: JobClock) -> FixedClock {
        FixedClock { clock }
    }

    fn nanos(&self) -> u64 {
        self.clock.mark_used();
        u64::try_from(self.clock.micros())
            .unwrap_or(0)
            .saturating_mul(1000)
    }
}

impl HostWallClock for FixedClock {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos())
    }
}

impl HostMonotonicClock for FixedClock {
    fn resolution(&self) -> u64 {
        1000
    }
    fn now(&self) -> u64 {
        self.nanos()
    }
}

/// The memory of one instance: all its linear memories and tables together, under one
/// cap (`plugin_memory_mb`), and the number of instances, memories and tables a
/// component may create (`weir_core::limits`: a component made of many small memories
/// or tables would otherwise pass a per-memory cap many times over). A growth past the
/// cap is refused with a trap (not a failed `memory.grow` the guest could ignore), and
/// remembered so that the job's error can say what was asked for.
#[derive(Debug)]
pub struct MemoryCap {
    pub cap: usize,
    /// Bytes of all linear memories and tables now.
    pub total: usize,
    /// The largest `total` seen.
    pub peak: usize,
    /// The growth that was refused, if any: what the instance would have held.
    pub refused: Option<usize>,
}

/// The error a refused growth traps with.
#[derive(Debug, thiserror::Error)]
#[error("memory growth to {desired} bytes refused: the cap is {cap} bytes")]
pub struct MemoryRefused {
    pub desired: usize,
    pub cap: usize,
}

impl MemoryCap {
    fn new(cap: u64) -> MemoryCap {
        MemoryCap {
            cap: usize::try_from(cap).unwrap_or(usize::MAX),
            total: 0,
            peak: 0,
            refused: None,
        }
    }

    /// Accounts a growth of one memory or table from `current` to `desired` bytes;
    /// refuses it (a trap) if the instance's total would pass the cap.
    fn grow(&mut self, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let total = self.total.saturating_sub(current).saturating_add(desired);
        if total > self.cap {
            self.refused = Some(total);
            return Err(MemoryRefused {
                desired: total,
                cap: self.cap,
            }
            .into());
        }
        self.total = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(current, desired)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// Severity of a plugin's message.
#[derive(Debug, Clone, Copy)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl From<log::Level> for LogLevel {
    fn from(l: log::Level) -> LogLevel {
        match l {
            log::Level::Trace => LogLevel::Trace,
            log::Level::Debug => LogLevel::Debug,
            log::Level::Info => LogLevel::Info,
            log::Level::Warn => LogLevel::Warn,
            log::Level::Error => LogLevel::Error,
        }
    }
}

/// Where a job's `log` calls, stdout and stderr go: `tracing`, with the plugin, table
/// and partition as fields, at most `log_messages_per_call` messages per call (the
/// rest are counted and reported once), each cut at `log_message_bytes`.
pub struct LogSink {
    plugin: String,
    table: String,
    partition: String,
    per_call: u32,
    max_bytes: usize,
    emitted: u32,
    dropped: u64,
    /// Unfinished lines of stdout and stderr.
    partial: [Vec<u8>; 2],
}

impl LogSink {
    fn new(plugin: &str, table: &str, partition: &str, limits: &SandboxLimits) -> LogSink {
        LogSink {
            plugin: plugin.to_owned(),
            table: table.to_owned(),
            partition: partition.to_owned(),
            per_call: limits.log_messages_per_call,
            max_bytes: limits.log_message_bytes,
            emitted: 0,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
        }
    }

    /// Starts a new call's budget; reports what the last call dropped.
    pub fn new_call(&mut self) {
        self.flush_partial();
        if self.dropped > 0 {
            tracing::warn!(plugin = %self.plugin, table = %self.table, partition = %self.partition, dropped = self.dropped, "plugin log messages over the per-call limit were dropped");
        }
        self.emitted = 0;
        self.dropped = 0;
    }

    fn message(&mut self, level: LogLevel, stream: &'static str, text: &[u8]) {
        if self.emitted >= self.per_call {
            self.dropped += 1;
            return;
        }
        self.emitted += 1;
        let cut = text.len() > self.max_bytes;
        let text = String::from_utf8_lossy(&text[..text.len().min(self.max_bytes)]);
        let text = text.trim_end();
        let (plugin, table, partition) = (&self.plugin, &self.table, &self.partition);
        macro_rules! emit {
            ($lvl:ident) => {
                tracing::$lvl!(target: "weir::plugin", plugin = %plugin, table = %table, partition = %partition, stream, cut, "{text}")
            };
        }
        match level {
            LogLevel::Trace => emit!(trace),
            LogLevel::Debug => emit!(debug),
            LogLevel::Info => emit!(info),
            LogLevel::Warn => emit!(warn),
            LogLevel::Error => emit!(error),
        }
    }

    /// Bytes written to stdout (`0`) or stderr (`1`): each whole line is a message.
    fn write(&mut self, which: usize, mut bytes: &[u8]) {
        while let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            let mut line = std::mem::take(&mut self.partial[which]);
            line.extend_from_slice(&bytes[..nl]);
            self.stream_line(which, &line);
            bytes = &bytes[nl + 1..];
        }
        let partial = &mut self.partial[which];
        // A line never ends: keep at most what a message can show.
        let room = self.max_bytes.saturating_sub(partial.len());
        partial.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn stream_line(&mut self, which: usize, line: &[u8]) {
        let (level, stream) = if which == 0 {
            (LogLevel::Info, "stdout")
        } else {
            (LogLevel::Warn, "stderr")
        };
        self.message(level, stream, line);
    }

    fn flush_partial(&mut self) {
        for which in 0..2 {
            let line = std::mem::take(&mut self.partial[which]);
            if !line.is_empty() {
                self.stream_line(which, &line);
            }
        }
    }
}

impl Drop for LogSink {
    fn drop(&mut self) {
        self.new_call();
    }
}

/// A guest's stdout or stderr, into the job's [`LogSink`]. Always ready, never blocks.
#[derive(Clone)]
struct LogStream {
    sink: Arc<Mutex<LogSink>>,
    stream: &'static str,
}

impl LogStream {
    fn index(&self) -> usize {
        usize::from(self.stream == "stderr")
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

/// Bytes the guest may hand over per `write`: what `check-write` grants.
const LOG_STREAM_PERMIT: usize = 64 * 1024;

#[wasmtime_wasi::async_trait]
impl OutputStream for LogStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        if let Ok(mut sink) = self.sink.lock() {
            sink.write(self.index(), &bytes);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(LOG_STREAM_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if let Ok(mut sink) = self.sink.lock() {
            sink.write(self.index(), buf);
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::TryRng;

    fn seed<'a>(sha: &'a [u8; 32], partition: &'a str) -> JobSeed<'a> {
        JobSeed {
            plugin_sha256: sha,
            table: "public.orders",
            partition,
            clock: JobClock::at(1_772_366_400_000_000),
        }
    }

    #[test]
    fn the_same_job_draws_the_same_bytes_and_another_job_others() {
        let sha = [7u8; 32];
        let draw = |partition: &str, domain: &[u8]| {
            let mut rng = JobRng::new(&seed(&sha, partition), domain);
            let mut out = [0u8; 100];
            rng.try_fill_bytes(&mut out).expect("infallible");
            out
        };
        assert_eq!(draw("2026-03-01", b"secure"), draw("2026-03-01", b"secure"));
        assert_ne!(draw("2026-03-01", b"secure"), draw("2026-03-02", b"secure"));
        assert_ne!(
            draw("2026-03-01", b"secure"),
            draw("2026-03-01", b"insecure")
        );
    }

    #[test]
    fn memories_and_tables_share_one_cap() {
        let mut cap = MemoryCap::new(1 << 20);
        // Two memories of 400 KiB each, created and then grown: their sum counts.
        assert!(cap.memory_growing(0, 400 << 10, None).expect("first"));
        assert!(cap.memory_growing(0, 400 << 10, None).expect("second"));
        assert_eq!(cap.total, 800 << 10);
        // A table of 16,384 elements takes 128 KiB of it.
        assert!(cap.table_growing(0, 16 << 10, None).expect("table"));
        assert_eq!(cap.total, (800 << 10) + (128 << 10));
        // One memory growing by 100 KiB passes the 1 MiB total: refused, remembered.
        let refused = cap.memory_growing(400 << 10, 500 << 10, None);
        assert!(refused.is_err());
        assert_eq!(cap.refused, Some((1028 << 10) as usize));
        assert_eq!(cap.total, 928 << 10, "a refused growth is not counted");
        assert_eq!(cap.peak, 928 << 10);
        assert_eq!(
            (cap.instances(), cap.memories(), cap.tables()),
            (MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES)
        );
    }

    #[test]
    fn the_clocks_are_stopped_at_the_job_instant() {
        let c = FixedClock::new(JobClock::at(1_500_000));
        assert_eq!(HostWallClock::now(&c), Duration::from_millis(1500));
        assert_eq!(HostMonotonicClock::now(&c), 1_500_000_000);
        assert_eq!(FixedClock::new(JobClock::at(-5)).nanos(), 0);
    }

    #[test]
    fn a_clock_computed_on_first_read_is_computed_once_and_only_if_read() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = |micros: i64| {
            let reads = Arc::clone(&reads);
            JobClock::on_first_read(move || {
                reads.fetch_add(1, Ordering::SeqCst);
                micros
            })
        };
        drop(FixedClock::new(counted(1)));
        assert_eq!(
            reads.load(Ordering::SeqCst),
            0,
            "never read, never computed"
        );
        let clock = counted(2_000_000);
        let (wall, monotonic) = (FixedClock::new(clock.clone()), FixedClock::new(clock));
        assert_eq!(HostMonotonicClock::now(&monotonic), 2_000_000_000);
        assert_eq!(HostWallClock::now(&wall), Duration::from_secs(2));
        assert_eq!(HostMonotonicClock::now(&monotonic), 2_000_000_000);
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "both clocks, one computation"
        );
    }

    #[test]
    fn the_log_keeps_to_its_budget_per_call_and_cuts_long_lines() {
        let limits = SandboxLimits {
            log_messages_per_call: 2,
            log_message_bytes: 8,
            ..SandboxLimits::default()
        };
        let mut sink = LogSink::new("p", "t", "x", &limits);
        sink.write(0, b"one\ntwo\nthree\nfour");
        assert_eq!((sink.emitted, sink.dropped), (2, 1));
        assert_eq!(sink.partial[0], b"four");
        sink.write(1, b"0123456789abcdef");
        assert_eq!(
            sink.partial[1].len(),
            8,
            "an endless line is kept to the cut"
        );
        sink.new_call();
        assert_eq!((sink.emitted, sink.dropped), (0, 0));
        assert!(sink.partial.iter().all(Vec::is_empty));
    }

    #[test]
    fn memory_past_the_cap_is_refused_and_remembered() {
        let mut cap = MemoryCap::new(1 << 20);
        assert!(cap.memory_growing(0, 1 << 19, None).expect("under the cap"));
        assert!(cap.memory_growing(1 << 19, (1 << 20) + 1, None).is_err());
        assert_eq!(cap.refused, Some((1 << 20) + 1));
        assert_eq!(cap.peak, 1 << 19);
    }
}
