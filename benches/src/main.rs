//! `weir-bench`: measures Weir against the limits of this machine, in one run, and
//! writes BENCHMARKS.md. Sections:
//!
//! 1. End to end: a Debezium JSON-lines feed of orders → `run --once` (decode, stage
//!    with synced group commits, partition replace by binary COPY) → committed
//!    partitions; against one binary COPY of the same final rows into the same table.
//! 2. Staging: staged changes/s with sync on, one transaction per synced batch and group
//!    commits of several, with the time each synced batch takes.
//! 3. A transaction larger than memory: one transaction of `--large-rows` rows staged
//!    through the pending area; peak RSS against the stated bound.
//! 4. PostgreSQL logical replication: one workload of `--pg-changes` row changes read
//!    from identical pgoutput slots by Weir (slot → stage, and `run --once` into a
//!    target), by `pg_recvlogical` (the decode limit) and by a native subscription (the
//!    peer), one after the other, each from the same backlog.
//! 5. WASM transform plugins: the `orders` plugin as Rust, Python and JavaScript
//!    components through Weir's plugin host (partition jobs of `--plugin-rows` rows,
//!    rows/s; cold and warm start; component size) against the same Rust logic compiled
//!    natively (the baseline). Components are read from `$WEIR_PLUGINS_DIR` (default
//!    `$CARGO_TARGET_DIR/plugins`), where `scripts/bench` builds them.
//! 6. Backfill: a window of `--backfill-days` day partitions (`--backfill-rows` orders
//!    staged and written once beforehand) rebuilt by `weir::backfill` with 1, 2 and 4
//!    partition jobs at once, rows/s and partitions/s; against one binary COPY of the
//!    same final rows into an empty table of the same shape.
//!
//! 7. Partition writers: one partition rewritten by replace (plain table: DELETE; native
//!    partitions: TRUNCATE of the child) and by merge (every key; 1% of the keys), rows/s
//!    against raw binary COPY; and the write amplification of a hot partition under
//!    continuous updates at two flush intervals, in replace and merge mode.
//! 8. Streaming: the `weir` binary's live `run` with the Rust orders plugin, PostgreSQL
//!    to PostgreSQL, against a native subscription: commit-to-visible latency (p50, p99)
//!    at a steady offered rate, recorded by triggers on the targets; the rate of catching
//!    up a backlog (with the plugin, with the identity, the peer, pg_recvlogical, raw
//!    COPY); recovery after SIGKILL (restart → streaming again, → caught up).
//! 9. One big partition: `--big-rows` rows in one month partition through the `weir`
//!    binary (identity and the Rust orders plugin; run, backfill, verify, merge), each
//!    command's peak RSS against the config's stated memory budget, and rows/s against
//!    one raw binary COPY of the same final rows.
//!
//! 10. Initial load: a populated table of `--load-rows` orders loaded by `weir run
//!     --once` (the exported snapshot's parallel load, and the watermark snapshot)
//!     into day partitions, against a binary COPY pipe between two databases and a
//!     subscription's table sync; peak RSS and the stage's size.
//!
//! A full run puts a summary of the headline figures and ratios at the top of the
//! report, then the command, the machine, PostgreSQL's settings and the run's wall time.
//! `--only SECTION` runs one section and replaces it in the existing report, which
//! keeps the rest.
//!
//! Each section is a module of its own (`end_to_end`, `staging`, `large_transaction`,
//! `replication`, `plugins`, `backfill`, `writers`, `streaming`) that measures and writes
//! its text of the report; `report` writes the rest of it (summary, header, wall time)
//! and splices a section run alone. What the sections share: `orders` (the feeds, the
//! workload and the COPY baseline), `cluster` (clients and slots of the throwaway
//! PostgreSQL, `pg_recvlogical`) and `measure` (medians, CPU, memory, load). This file
//! holds the command line and runs the sections.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

mod backfill;
mod big_partition;
mod cluster;
mod end_to_end;
mod initial_load;
mod large_transaction;
mod measure;
mod orders;
mod plugins;
mod replication;
mod report;
mod staging;
mod streaming;
mod writers;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use weir::localpg::{LocalPg, LocalPgOptions};

use crate::end_to_end::end_to_end;
use crate::large_transaction::large_transaction;
use crate::measure::load_average;
use crate::replication::{child_pipeline, replication};
use crate::report::{
    Headlines, SectionTimes, header, pg_settings, splice_section, summary_table, wall_time,
};
use crate::staging::staging;

/// The `weir` binary's allocator (engine/src/main.rs): the sections that run the
/// engine in this process, or in a child of it, measure what a user runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    about = "Benchmarks Weir against its limits on a throwaway PostgreSQL; writes BENCHMARKS.md"
)]
struct Args {
    /// Orders in the end-to-end feed (one insert each).
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Days the orders spread over (one partition each).
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Repetitions of each end-to-end, replication and backfill measurement; the median
    /// is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Single-row transactions staged per group-commit size.
    #[arg(long, default_value_t = 20_000)]
    stage_transactions: usize,
    /// Rows of the one large transaction.
    #[arg(long, default_value_t = 1_000_000)]
    large_rows: u64,
    /// Row changes of the PostgreSQL replication workload, in transactions of 10 (8
    /// inserts, 1 update, then alternately 1 update or 1 delete).
    #[arg(long, default_value_t = 100_000)]
    pg_changes: u64,
    /// Rows of one plugin partition job (pushed in chunks of 4096).
    #[arg(long, default_value_t = 40_960)]
    plugin_rows: usize,
    /// Plugin jobs (and native ones) are timed until at least this many seconds have
    /// passed, at least one job each.
    #[arg(long, default_value_t = 1.0)]
    plugin_seconds: f64,
    /// Loads of each plugin for its cold and for its warm start; the median is reported.
    #[arg(long, default_value_t = 3)]
    plugin_starts: usize,
    /// Orders staged and written once, then backfilled (one insert each).
    #[arg(long, default_value_t = 300_000)]
    backfill_rows: u64,
    /// Days the backfilled orders spread over: the window's day partitions.
    #[arg(long, default_value_t = 90)]
    backfill_days: u64,
    /// Rows of the partition the writers section rewrites.
    #[arg(long, default_value_t = 200_000)]
    writer_rows: u64,
    /// Rows of the hot partition, updated at `--hot-rate` updates/s for `--hot-seconds`.
    #[arg(long, default_value_t = 20_000)]
    hot_rows: u64,
    #[arg(long, default_value_t = 2_000)]
    hot_rate: u64,
    #[arg(long, default_value_t = 5)]
    hot_seconds: u64,
    /// Streaming: transactions a second (10 changes each) the steady writer commits.
    #[arg(long, default_value_t = 100)]
    stream_rate: u64,
    /// Streaming: seconds of each latency run's steady writer.
    #[arg(long, default_value_t = 10)]
    stream_seconds: u64,
    /// Streaming: a second latency run's rate, transactions a second (0: none).
    #[arg(long, default_value_t = 1_000)]
    stream_high_rate: u64,
    /// Streaming: `[engine] flush_interval_ms` of the live `weir run`s (the engine's
    /// default).
    #[arg(long, default_value_t = weir::config::limits::FLUSH_INTERVAL_MS_DEFAULT)]
    stream_flush_ms: u64,
    /// Streaming: row changes of the backlog caught up by each consumer.
    #[arg(long, default_value_t = 100_000)]
    stream_backlog: u64,
    /// Streaming: SIGKILLs of `weir run` under the steady writer.
    #[arg(long, default_value_t = 3)]
    recovery_kills: usize,
    /// Streaming: seconds between a restart and the next kill.
    #[arg(long, default_value_t = 4)]
    recovery_period_s: u64,
    /// Streaming: milliseconds between a kill and the restart.
    #[arg(long, default_value_t = 1000)]
    recovery_down_ms: u64,
    /// Rows of the one big partition (section 9).
    #[arg(long, default_value_t = 5_000_000)]
    big_rows: u64,
    /// Rows of the populated table of the initial load (section 10).
    #[arg(long, default_value_t = 10_000_000)]
    load_rows: u64,
    /// Days the initial load's rows spread over: its day partitions.
    #[arg(long, default_value_t = 90)]
    load_days: u64,
    /// The folder of the plugin components (`orders-rust.wasm`, `orders-python.wasm`,
    /// `orders-js.wasm`); default `$CARGO_TARGET_DIR/plugins`, the target folder
    /// defaulting to `$HOME/.cache/weir-target`.
    #[arg(long, env = "WEIR_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Run only this section and replace it in the existing report (`--out`), keeping
    /// the rest; by default every section runs and the report is written anew.
    #[arg(long, value_enum)]
    only: Option<Section>,
    /// Where to write the report.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
    /// Internal: run `weir run --once` (the library `Pipeline`) for this config in this
    /// process and print its time as JSON. The section runs it as a child process, since
    /// a PostgreSQL source's DSN comes from the environment only.
    #[arg(long, hide = true)]
    child_pipeline: Option<PathBuf>,
    /// Internal, with `--child-pipeline`: run `weir init` first.
    #[arg(long, hide = true, requires = "child_pipeline")]
    child_init: bool,
}

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // On a worker thread, as the `weir` binary runs its command (engine/src/main.rs), so
    // that the engine in this process is timed as it runs there.
    runtime.block_on(async {
        match tokio::spawn(bench()).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(e.into()),
        }
    })
}

async fn bench() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(config) = &args.child_pipeline {
        return child_pipeline(config, args.child_init).await;
    }
    let command = command_line(&args);
    let plugin_args = plugins::PluginBenchArgs {
        rows: args.plugin_rows,
        seconds: args.plugin_seconds,
        starts: args.plugin_starts,
        dir: args
            .plugins_dir
            .clone()
            .unwrap_or_else(plugins::default_plugins_dir),
        command: command.clone(),
    };
    let Some(only) = args.only else {
        let started = Instant::now();
        let load = load_average();
        let pg =
            tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
        let mut body = String::new();
        let mut sections = SectionTimes::default();
        let mut h = Headlines {
            end_to_end: end_to_end(&mut body, &args, &pg).await?,
            ..Headlines::default()
        };
        sections.done("end to end");
        staging(&mut body, &args)?;
        sections.done("staging");
        large_transaction(&mut body, &args).await?;
        sections.done("large transaction");
        h.replication = replication(&mut body, &args, &pg).await?;
        sections.done("replication");
        h.plugin_ratio = plugins::plugins(&mut body, &plugin_args).await?;
        sections.done("plugins");
        h.backfill = backfill::backfill(&mut body, &args, &pg).await?;
        sections.done("backfill");
        writers::writers(&mut body, &args, &pg).await?;
        sections.done("writers");
        h.streaming = streaming::streaming(&mut body, &args, &pg).await?;
        sections.done("streaming");
        big_partition::big_partition(&mut body, &args, &pg).await?;
        sections.done("big partition");
        h.initial_load = initial_load::initial_load(&mut body, &args, &pg).await?;
        sections.done("initial load");
        let mut report = String::from("# Benchmarks\n");
        summary_table(&mut report, &h)?;
        header(&mut report, &command)?;
        pg_settings(&mut report, &pg).await?;
        wall_time(&mut report, started.elapsed(), &load, &sections)?;
        report.push_str(&body);
        std::fs::write(&args.out, &report)?;
        println!("{report}");
        return Ok(());
    };
    // One section: measured alone, then put in place of its old text (or appended).
    let pg = if matches!(
        only,
        Section::EndToEnd
            | Section::Replication
            | Section::Backfill
            | Section::Writers
            | Section::Streaming
            | Section::BigPartition
            | Section::InitialLoad
    ) {
        Some(tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??)
    } else {
        None
    };
    let mut section = String::new();
    match (only, &pg) {
        (Section::EndToEnd, Some(pg)) => {
            end_to_end(&mut section, &args, pg).await?;
        }
        (Section::Staging, _) => staging(&mut section, &args)?,
        (Section::LargeTransaction, _) => large_transaction(&mut section, &args).await?,
        (Section::Replication, Some(pg)) => {
            replication(&mut section, &args, pg).await?;
        }
        (Section::Plugins, _) => {
            plugins::plugins(&mut section, &plugin_args).await?;
        }
        (Section::Backfill, Some(pg)) => {
            backfill::backfill(&mut section, &args, pg).await?;
        }
        (Section::Writers, Some(pg)) => writers::writers(&mut section, &args, pg).await?,
        (Section::Streaming, Some(pg)) => {
            streaming::streaming(&mut section, &args, pg).await?;
        }
        (Section::BigPartition, Some(pg)) => {
            big_partition::big_partition(&mut section, &args, pg).await?;
        }
        (Section::InitialLoad, Some(pg)) => {
            initial_load::initial_load(&mut section, &args, pg).await?;
        }
        (
            Section::EndToEnd
            | Section::Replication
            | Section::Backfill
            | Section::Writers
            | Section::Streaming
            | Section::BigPartition
            | Section::InitialLoad,
            None,
        ) => anyhow::bail!("no PostgreSQL for a section that needs one"),
    }
    if only != Section::Plugins {
        // The plugins section names its command itself.
        writeln!(
            section,
            "\nMeasured on {} by `{command}` (this section alone).",
            chrono::Utc::now().format("%Y-%m-%d")
        )?;
    }
    let report = match std::fs::read_to_string(&args.out) {
        Ok(existing) => splice_section(&existing, &section),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut report = String::from("# Benchmarks\n");
            header(&mut report, &command)?;
            if let Some(pg) = &pg {
                pg_settings(&mut report, pg).await?;
            }
            report.push_str(&section);
            report
        }
        Err(e) => return Err(e).with_context(|| format!("read {}", args.out.display())),
    };
    std::fs::write(&args.out, &report)?;
    println!("{section}");
    Ok(())
}

/// A section of the report, for `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Section {
    /// 1: JSON lines → stage → partitions, against raw binary COPY.
    EndToEnd,
    /// 2: staging with sync on, by group-commit size.
    Staging,
    /// 3: one transaction larger than memory.
    LargeTransaction,
    /// 4: PostgreSQL logical replication.
    Replication,
    /// 5: WASM transform plugins.
    Plugins,
    /// 6: backfill of a window of partitions, by parallelism, against raw binary COPY.
    Backfill,
    /// 7: partition rewrite cost by write mode; write amplification of a hot partition.
    Writers,
    /// 8: streaming latency, sustained rate and recovery of a live `weir run`.
    Streaming,
    /// 9: one big partition: peak RSS against the memory budget, rate against COPY.
    BigPartition,
    /// 10: the initial load of a populated table, against a COPY pipe and a subscription.
    InitialLoad,
}

/// The `scripts/bench` command line of this run, with the sizes that matter to what
/// it measures.
fn command_line(args: &Args) -> String {
    let end_to_end = format!(
        "--rows {} --days {} --repeat {}",
        args.rows, args.days, args.repeat
    );
    let staging = format!("--stage-transactions {}", args.stage_transactions);
    let large = format!("--large-rows {}", args.large_rows);
    let replication = format!("--pg-changes {} --repeat {}", args.pg_changes, args.repeat);
    let plugins = format!(
        "--plugin-rows {} --plugin-seconds {} --plugin-starts {}",
        args.plugin_rows, args.plugin_seconds, args.plugin_starts
    );
    let backfill = format!(
        "--backfill-rows {} --backfill-days {}",
        args.backfill_rows, args.backfill_days
    );
    let writers = format!(
        "--writer-rows {} --hot-rows {} --hot-rate {} --hot-seconds {}",
        args.writer_rows, args.hot_rows, args.hot_rate, args.hot_seconds
    );
    let streaming = format!(
        "--stream-rate {} --stream-high-rate {} --stream-seconds {} --stream-flush-ms {} --stream-backlog {} \
         --recovery-kills {} --recovery-period-s {} --recovery-down-ms {}",
        args.stream_rate,
        args.stream_high_rate,
        args.stream_seconds,
        args.stream_flush_ms,
        args.stream_backlog,
        args.recovery_kills,
        args.recovery_period_s,
        args.recovery_down_ms
    );
    let big = format!("--big-rows {}", args.big_rows);
    let initial = format!(
        "--load-rows {} --load-days {}",
        args.load_rows, args.load_days
    );
    match args.only {
        None => format!(
            "scripts/bench {end_to_end} {staging} {large} --pg-changes {} {plugins} {backfill} {writers} {streaming} {big} {initial}",
            args.pg_changes
        ),
        Some(Section::BigPartition) => format!("scripts/bench --only big-partition {big}"),
        Some(Section::InitialLoad) => format!("scripts/bench --only initial-load {initial}"),
        Some(Section::Streaming) => format!(
            "scripts/bench --only streaming {streaming} --repeat {}",
            args.repeat
        ),
        Some(Section::Writers) => format!(
            "scripts/bench --only writers {writers} --repeat {}",
            args.repeat
        ),
        Some(Section::EndToEnd) => format!("scripts/bench --only end-to-end {end_to_end}"),
        Some(Section::Staging) => format!("scripts/bench --only staging {staging}"),
        Some(Section::LargeTransaction) => {
            format!("scripts/bench --only large-transaction {large}")
        }
        Some(Section::Replication) => format!("scripts/bench --only replication {replication}"),
        Some(Section::Plugins) => format!("scripts/bench --only plugins {plugins}"),
        Some(Section::Backfill) => format!(
            "scripts/bench --only backfill {backfill} --repeat {}",
            args.repeat
        ),
    }
}
