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
//!
//! A full run puts a summary of the headline figures and ratios at the top of the
//! report, then the command, the machine, PostgreSQL's settings and the run's wall time.
//! `--only SECTION` runs one section and replaces it in the existing report, which
//! keeps the rest.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

mod backfill;
mod plugins;
mod streaming;
mod writers;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use weir::config::{Config, Dsn, OnBadRecord, SourceConfig, TableConfig};
use weir::demo::{DEMO_CONFIG, Sequence, order_line};
use weir::localpg::{LocalPg, LocalPgOptions};
use weir::pipeline::{self, Pipeline};
use weir::source::jsonl::JsonlSource;
use weir::source::postgres::{PostgresSource, PostgresSourceOptions, source_columns};
use weir::source::{ChangeSource, SourceEvent, Transaction, keyed_changes};
use weir::stage::{ApplyOutcome, Stage};
use weir::value::Value;

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
    /// Streaming: `[engine] flush_interval_ms` of the live `weir run`s.
    #[arg(long, default_value_t = 200)]
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

/// Peak RSS of this process since the last reset, in KiB (Linux `VmHWM`).
fn peak_rss_kib() -> u64 {
    weir::procmem::peak_rss_kib(weir::procmem::Process::This)
}

/// Resets the peak RSS to the current RSS.
fn reset_peak_rss() {
    weir::procmem::reset_peak();
}

/// Durations as seconds with two decimals, comma-separated (every run of a figure).
fn seconds_list(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn day(d: u64) -> String {
    let date = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap_or_default()
        + chrono::Duration::days(d as i64);
    date.format("%Y-%m-%d").to_string()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
        (
            Section::EndToEnd
            | Section::Replication
            | Section::Backfill
            | Section::Writers
            | Section::Streaming,
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
        "--stream-rate {} --stream-seconds {} --stream-flush-ms {} --stream-backlog {} --recovery-kills {} \
         --recovery-period-s {} --recovery-down-ms {}",
        args.stream_rate,
        args.stream_seconds,
        args.stream_flush_ms,
        args.stream_backlog,
        args.recovery_kills,
        args.recovery_period_s,
        args.recovery_down_ms
    );
    match args.only {
        None => format!(
            "scripts/bench {end_to_end} {staging} {large} --pg-changes {} {plugins} {backfill} {writers} {streaming}",
            args.pg_changes
        ),
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

/// `doc` with the section of the same `## ` heading as `section` replaced by it, or
/// with `section` appended. Sections start with an empty line and their heading; one
/// ends where the next `## ` heading begins.
fn splice_section(doc: &str, section: &str) -> String {
    let heading = section
        .lines()
        .find(|l| l.starts_with("## "))
        .unwrap_or_default();
    let mut out = String::with_capacity(doc.len() + section.len());
    match doc.find(&format!("\n{heading}\n")) {
        Some(start) if !heading.is_empty() => {
            let end = doc[start + 1..]
                .find("\n## ")
                .map_or(doc.len(), |i| start + 1 + i);
            out.push_str(&doc[..start]);
            out.push_str(section);
            out.push_str(&doc[end..]);
        }
        _ => {
            out.push_str(doc);
            if !doc.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(section);
        }
    }
    out
}

/// The headline figures of a full run, for the summary at the top.
#[derive(Debug, Default)]
struct Headlines {
    /// Rows/s: Weir end to end, raw COPY.
    end_to_end: (f64, f64),
    /// Changes/s: `run --once`, pg_recvlogical, the subscription.
    replication: (f64, f64, f64),
    /// The Rust component's time per row over native.
    plugin_ratio: Option<f64>,
    /// The fastest parallelism, its rows/s, the COPY's rows/s.
    backfill: (usize, f64, f64),
    streaming: streaming::Figures,
}

/// The summary table: headline figures and ratios of this run, each from its section.
fn summary_table(out: &mut String, h: &Headlines) -> anyhow::Result<()> {
    let s = &h.streaming;
    let r = |weir: f64, other: f64| format!("{:.2}", weir / other);
    writeln!(
        out,
        "\n## Summary\n\n\
         Headline figures of the sections below, all from this run. *Limit*: what this machine's PostgreSQL does \
         for the same rows without Weir (pg_recvlogical's decoding of the same slot, or one raw binary COPY of the \
         same final rows); *peer*: native logical replication (`CREATE SUBSCRIPTION`) of the same workload. Ratios \
         are Weir over the other: above 1 is faster for rates, slower for latencies and times.\n\n\
         | figure | Weir | limit | peer | Weir / limit | Weir / peer |\n\
         |---|---:|---:|---:|---:|---:|"
    )?;
    let (wl, pl) = (&s.weir_latency, &s.peer_latency);
    writeln!(
        out,
        "| streaming latency p50, commit → visible, {:.0} changes/s offered, Rust plugin, flush every {} ms (ms) | \
         {:.1} | — | {:.1} | — | {} |",
        s.offered_changes_per_s,
        s.flush_ms,
        wl.p50,
        pl.p50,
        r(wl.p50, pl.p50)
    )?;
    writeln!(
        out,
        "| streaming latency p99, the same (ms) | {:.1} | — | {:.1} | — | {} |",
        wl.p99,
        pl.p99,
        r(wl.p99, pl.p99)
    )?;
    writeln!(
        out,
        "| sustained rate: a backlog of {} changes caught up by live `weir run` + Rust plugin, against \
         pg_recvlogical (changes/s) | {:.0} | {:.0} | {:.0} | {} | {} |",
        s.backlog_changes,
        s.rate(s.weir_plugin),
        s.rate(s.recvlogical),
        s.rate(s.peer),
        r(s.rate(s.weir_plugin), s.rate(s.recvlogical)),
        r(s.rate(s.weir_plugin), s.rate(s.peer))
    )?;
    let rows = s.backlog_rows as f64;
    writeln!(
        out,
        "| the same backlog's {} final rows in the target, against one raw binary COPY of them (rows/s) | \
         {:.0} | {:.0} | {:.0} | {} | {} |",
        s.backlog_rows,
        rows / s.weir_plugin.as_secs_f64(),
        rows / s.copy.as_secs_f64(),
        rows / s.peer.as_secs_f64(),
        r(s.copy.as_secs_f64(), s.weir_plugin.as_secs_f64()),
        r(s.peer.as_secs_f64(), s.weir_plugin.as_secs_f64())
    )?;
    writeln!(
        out,
        "| recovery after SIGKILL, restart → first new row visible, median of {} (s) | {:.2} | — | — | — | — |",
        s.kills,
        s.first_visible.as_secs_f64()
    )?;
    writeln!(
        out,
        "| recovery after SIGKILL, restart → every row committed before it visible (s) | {:.2} | — | — | — | — |",
        s.caught_up.as_secs_f64()
    )?;
    writeln!(
        out,
        "| plugin overhead: backlog time with the Rust plugin / with the identity transform | {:.2} | — | — | — | — |",
        s.weir_plugin.as_secs_f64() / s.weir_identity.as_secs_f64()
    )?;
    writeln!(
        out,
        "| plugin overhead: `orders-rust.wasm` time per row / the same Rust native | {} | — | — | — | — |",
        h.plugin_ratio
            .map_or_else(|| "not run".to_owned(), |p| format!("{p:.2}"))
    )?;
    let (parallel, backfill, copy) = h.backfill;
    writeln!(
        out,
        "| backfill of a window, {parallel} partition jobs at once, against raw COPY (rows/s) | {backfill:.0} | \
         {copy:.0} | — | {} | — |",
        r(backfill, copy)
    )?;
    let (weir, copy) = h.end_to_end;
    writeln!(
        out,
        "| JSON lines → stage → partitions, `run --once`, against raw COPY (rows/s) | {weir:.0} | {copy:.0} | — | \
         {} | — |",
        r(weir, copy)
    )?;
    let (run, recv, sub) = h.replication;
    writeln!(
        out,
        "| PostgreSQL slot → stage → partitions, `run --once` on a backlog, identity (changes/s) | {run:.0} | \
         {recv:.0} | {sub:.0} | {} | {} |",
        r(run, recv),
        r(run, sub)
    )?;
    Ok(())
}

/// How long each section of a full run took, in order (also printed as each ends).
struct SectionTimes {
    last: Instant,
    times: Vec<(&'static str, Duration)>,
}

impl Default for SectionTimes {
    fn default() -> SectionTimes {
        SectionTimes {
            last: Instant::now(),
            times: Vec::new(),
        }
    }
}

impl SectionTimes {
    fn done(&mut self, section: &'static str) {
        let took = self.last.elapsed();
        self.last = Instant::now();
        eprintln!("weir-bench: {section} took {:.1} s", took.as_secs_f64());
        self.times.push((section, took));
    }
}

/// The run's wall time, by section, and how busy the machine was when it began.
fn wall_time(
    out: &mut String,
    elapsed: Duration,
    load: &str,
    sections: &SectionTimes,
) -> anyhow::Result<()> {
    // `scripts/bench` passes its start (seconds since the epoch), before its builds.
    let script = std::env::var("WEIR_BENCH_STARTED")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|t| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            Some(now - t)
        });
    let total = script.map_or_else(String::new, |t| {
        format!(
            "`scripts/bench` took {t:.0} s ({:.0} s for `scripts/install-deps`, `scripts/build-plugins` and \
             `cargo build`, all already up to date or not, then ",
            t - elapsed.as_secs_f64()
        )
    });
    let close = if script.is_some() { ")" } else { "" };
    writeln!(
        out,
        "\nWall time: {total}{:.0} s for the benchmarks themselves, until this report was written{close}. The \
         1-minute load average when the run began was {load} (other processes share the machine; each section \
         gives it at its own start too).",
        elapsed.as_secs_f64()
    )?;
    let by_section = sections
        .times
        .iter()
        .map(|(name, took)| format!("{name} {:.0} s", took.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    writeln!(out, "By section, in the order run: {by_section}.")?;
    Ok(())
}

fn header(out: &mut String, command: &str) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| Some(l.split(':').nth(1)?.trim().to_owned()))
        })
        .unwrap_or_default();
    writeln!(
        out,
        "\nEvery figure in this file comes from one run of:\n\n```\n{command}\n```\n\n\
         (`scripts/bench` with no arguments runs these defaults.) A section run alone (`scripts/bench --only \
         SECTION`) replaces its text here and ends with the command and date that produced it instead; the summary \
         above is rewritten by a full run only.\n"
    )?;
    // Set for the build (`scripts/bench` builds in the same environment): RocksDB's C++
    // came prebuilt rather than from this build's own `librocksdb-sys` compile.
    let rocksdb = std::env::var("ROCKSDB_LIB_DIR").map_or_else(
        |_| String::new(),
        |dir| {
            format!(
                " RocksDB's C++ library was linked prebuilt from `ROCKSDB_LIB_DIR={dir}` (static) rather than \
                 compiled by this build."
            )
        },
    );
    writeln!(
        out,
        "Machine: {cores} cores ({cpu}), {:.1} GiB memory. Release build.{rocksdb}",
        mem_kib as f64 / 1_048_576.0
    )?;
    Ok(())
}

async fn pg_settings(out: &mut String, pg: &LocalPg) -> anyhow::Result<()> {
    let (client, connection) =
        tokio_postgres::connect(&pg.dsn("postgres"), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let mut settings = Vec::new();
    for name in [
        "shared_buffers",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
    ] {
        let v: String = client.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        settings.push(format!("{name}={v}"));
    }
    writeln!(
        out,
        "PostgreSQL {version}, a throwaway local cluster ({}).",
        settings.join(", ")
    )?;
    Ok(())
}

/// The end-to-end feed of `rows` orders (one insert each, transactions of 8 lines) over
/// `days` days from 2026-03-01, as Debezium JSON lines, and its final rows in the
/// columns of `analytics.fact_orders` (id, customer, order_date, amount, status).
fn orders_feed(rows: u64, days: u64) -> anyhow::Result<(String, Vec<Vec<Value>>)> {
    let mut seq = Sequence::new(11);
    let mut feed = String::with_capacity(rows as usize * 220);
    let mut out: Vec<Vec<Value>> = Vec::with_capacity(rows as usize);
    for id in 1..=rows {
        let d = day(seq.below(days));
        let cents = seq.below(1_000_000);
        feed.push_str(&order_line('c', Some(id / 8), id, &d, cents, "new"));
        out.push(vec![
            Value::Int(id as i64),
            Value::Text(format!("c{}", id % 97)),
            Value::Date(weir::value::parse_date(&d).context("date")?),
            Value::Decimal(format!("{}.{:02}", cents / 100, cents % 100)),
            Value::Text("new".into()),
        ]);
    }
    Ok((feed, out))
}

/// The raw binary COPY baseline: `rows` (of [`orders_feed`]) into `table`, a table of
/// the shape of `analytics.fact_orders`, in one COPY (one transaction); its time, from
/// starting the COPY until the server confirmed it.
async fn copy_orders(
    client: &tokio_postgres::Client,
    table: &str,
    rows: &[Vec<Value>],
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let sink = client
        .copy_in(&format!(
            "COPY {table} (id, customer, order_date, amount, status) FROM STDIN (FORMAT binary)"
        ))
        .await?;
    let writer = BinaryCopyInWriter::new(
        sink,
        &[
            Type::INT8,
            Type::TEXT,
            Type::DATE,
            Type::NUMERIC,
            Type::TEXT,
        ],
    );
    pin_mut!(writer);
    for row in rows {
        let refs: Vec<&(dyn ToSql + Sync)> = row.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        writer.as_mut().write(&refs).await?;
    }
    let copied = writer.finish().await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        copied == rows.len() as u64,
        "COPY wrote {copied} rows, expected {}",
        rows.len()
    );
    Ok(elapsed)
}

/// The 1-minute load average now, from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

/// Section 1: JSON lines → committed partitions, against raw binary COPY.
/// Returns Weir's and the COPY's rows/s.
async fn end_to_end(out: &mut String, args: &Args, pg: &LocalPg) -> anyhow::Result<(f64, f64)> {
    let (feed, rows) = orders_feed(args.rows, args.days)?;
    let (mut weir_times, mut copy_times) = (Vec::new(), Vec::new());
    for i in 0..args.repeat {
        let dsn = Dsn::new(pg.create_database(&format!("bench_{i}")).await?);
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("feed.jsonl"), &feed)?;
        let config_path = dir.path().join("weir.toml");
        std::fs::write(
            &config_path,
            DEMO_CONFIG.replace("on_bad_record = \"dead-letter\"", ""),
        )?;
        let config = Config::load(&config_path)?;
        pipeline::init(&config, &dsn).await?;
        let pipeline = Pipeline::open(config, dsn.clone()).await?;
        let started = Instant::now();
        let run = pipeline.run(true, std::future::pending()).await?;
        weir_times.push(started.elapsed());
        anyhow::ensure!(
            run.rows_written == args.rows,
            "weir wrote {} rows, expected {}",
            run.rows_written,
            args.rows
        );
        drop(pipeline);

        let client = connect(dsn.expose()).await?;
        client
            .batch_execute("TRUNCATE analytics.fact_orders")
            .await?;
        copy_times.push(copy_orders(&client, "analytics.fact_orders", &rows).await?);
        println!(
            "end to end, run {}: weir {:?}, copy {:?}",
            i + 1,
            weir_times[i],
            copy_times[i]
        );
    }
    let (weir, copy) = (median(&weir_times), median(&copy_times));
    let rate = |d: Duration| args.rows as f64 / d.as_secs_f64();
    writeln!(
        out,
        "\n## JSON lines → stage → partitions, against raw binary COPY\n"
    )?;
    writeln!(
        out,
        "Feed: {} orders (one insert each, transactions of 8 lines) over {} days, {:.1} MB of Debezium JSON lines. \
         Weir: `run --once` from an empty stage (decode, stage in synced group commits of up to 1024 transactions, \
         then replace {} day partitions with binary COPY and lineage, 2 partition jobs at once). \
         Limit: one binary COPY of the same {} final rows into the same (truncated) table. Median of {} runs.\n",
        args.rows,
        args.days,
        feed.len() as f64 / 1e6,
        args.days,
        args.rows,
        args.repeat
    )?;
    writeln!(out, "| path | time (s) | rows/s |\n|---|---:|---:|")?;
    writeln!(
        out,
        "| Weir end to end | {:.2} | {:.0} |",
        weir.as_secs_f64(),
        rate(weir)
    )?;
    writeln!(
        out,
        "| raw binary COPY (limit) | {:.2} | {:.0} |",
        copy.as_secs_f64(),
        rate(copy)
    )?;
    writeln!(
        out,
        "\nWeir / limit: {:.2} of the raw COPY rate. All runs (s): Weir {}; COPY {}.",
        rate(weir) / rate(copy),
        seconds_list(&weir_times),
        seconds_list(&copy_times)
    )?;
    Ok((rate(weir), rate(copy)))
}

/// Single-row transactions of `public.orders`, positions 1, 2, ...
fn orders_transactions(
    config: &Config,
    count: usize,
    offset: u64,
) -> anyhow::Result<Vec<Transaction>> {
    let table = &config.tables[0];
    let mut seq = Sequence::new(offset + 3);
    (0..count as u64)
        .map(|i| {
            let id = offset + i;
            let row = vec![
                ("id".to_owned(), Value::Int(id as i64)),
                ("customer".to_owned(), Value::Text(format!("c{}", id % 97))),
                (
                    "order_date".to_owned(),
                    Value::Date(20_513 + (seq.below(30) as i32)),
                ),
                (
                    "amount".to_owned(),
                    Value::Decimal(format!("{}.{:02}", seq.below(10_000), seq.below(100))),
                ),
                ("status".to_owned(), Value::Text("new".into())),
            ];
            let changes = keyed_changes(
                table,
                weir::source::Op::Insert,
                None,
                Some(row),
                offset + i + 1,
                None,
            )
            .map_err(anyhow::Error::msg)?;
            Ok(Transaction {
                end: offset + i + 1,
                cursor: offset + i + 1,
                changes,
                bad_records: vec![],
            })
        })
        .collect()
}

/// Section 2: synced staging throughput by group-commit size.
fn staging(out: &mut String, args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = demo_config(dir.path())?;
    writeln!(out, "\n## Staging with sync on, by group-commit size\n")?;
    writeln!(
        out,
        "{} single-row transactions (about 200-byte rows) applied to a fresh stage; each synced RocksDB write \
         carries `batch` transactions and the new position. \"Sync latency\" is the mean time of one synced \
         write: what a transaction waits for before it may be acknowledged.\n",
        args.stage_transactions
    )?;
    writeln!(
        out,
        "| batch (transactions per sync) | changes/s | sync latency (ms) |\n|---:|---:|---:|"
    )?;
    for batch in [1usize, 8, 64, 512] {
        let stage = Stage::open(&dir.path().join(format!("stage-{batch}")), "bench")?;
        let txns = orders_transactions(&config, args.stage_transactions, 0)?;
        let started = Instant::now();
        let mut writes = 0u32;
        for group in txns.chunks(batch) {
            stage.apply(group)?;
            writes += 1;
        }
        let elapsed = started.elapsed();
        let rate = args.stage_transactions as f64 / elapsed.as_secs_f64();
        let latency_ms = elapsed.as_secs_f64() * 1000.0 / f64::from(writes);
        println!("staging batch {batch}: {rate:.0} changes/s, {latency_ms:.2} ms per synced write");
        writeln!(out, "| {batch} | {rate:.0} | {latency_ms:.2} |")?;
    }
    Ok(())
}

fn demo_config(dir: &Path) -> anyhow::Result<Config> {
    let path = dir.join("weir.toml");
    std::fs::write(&path, DEMO_CONFIG)?;
    Ok(Config::load(&path)?)
}

/// Section 3: one transaction of `large_rows` rows through the pending area.
async fn large_transaction(out: &mut String, args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = demo_config(dir.path())?;
    let feed_path = dir.path().join("feed.jsonl");
    {
        let mut seq = Sequence::new(5);
        let mut feed = std::io::BufWriter::new(std::fs::File::create(&feed_path)?);
        for id in 1..=args.large_rows {
            let line = order_line(
                'c',
                Some(1),
                id,
                &day(seq.below(30)),
                seq.below(1_000_000),
                "new",
            );
            std::io::Write::write_all(&mut feed, line.as_bytes())?;
        }
        std::io::Write::flush(&mut feed)?;
    }
    let feed_bytes = std::fs::metadata(&feed_path)?.len();
    reset_peak_rss();
    let base_kib = peak_rss_kib();
    let stage = Stage::open(&dir.path().join("stage"), &config.source_id())?;
    let chunk = config.engine.transaction_chunk_changes;
    let mut source = JsonlSource::open(
        Some(feed_path),
        false,
        config.tables.clone(),
        OnBadRecord::Fail,
        None,
        chunk,
    )
    .await?;
    let started = Instant::now();
    let mut chunks = 0u64;
    loop {
        match source.next().await? {
            SourceEvent::Chunk(changes) => {
                stage.append_pending(&changes)?;
                chunks += 1;
            }
            SourceEvent::Transaction(txn) => {
                stage.apply(&[txn])?;
            }
            SourceEvent::Abort => stage.discard_pending()?,
            SourceEvent::Idle | SourceEvent::End => break,
        }
    }
    let elapsed = started.elapsed();
    let peak_kib = peak_rss_kib();
    let staged: u64 = stage.row_counts()?.values().sum();
    anyhow::ensure!(
        staged == args.large_rows,
        "staged {staged} rows, expected {}",
        args.large_rows
    );
    // The stated bound: RocksDB's memtable budget and block cache, one chunk of changes
    // held twice (decoded and encoded), and the process's baseline.
    let bound_kib = base_kib + (weir::stage::MEMORY_BUDGET_BYTES as u64 >> 10) + 64 * 1024;
    println!(
        "large transaction: {} rows in {:?}, peak RSS {} MiB (bound {} MiB)",
        args.large_rows,
        elapsed,
        peak_kib >> 10,
        bound_kib >> 10
    );
    writeln!(out, "\n## One transaction larger than memory\n")?;
    writeln!(
        out,
        "One transaction of {} rows ({:.0} MB of JSON lines, one `txId`) staged from the JSON-lines source through the \
         pending area in chunks of {} changes, then committed atomically. Peak RSS is the process's `VmHWM`, reset before \
         staging began.\n",
        args.large_rows,
        feed_bytes as f64 / 1e6,
        chunk
    )?;
    writeln!(
        out,
        "| rows | time (s) | rows/s | peak RSS (MiB) | stated bound (MiB) |\n|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| {} | {:.1} | {:.0} | {} | {} |",
        args.large_rows,
        elapsed.as_secs_f64(),
        args.large_rows as f64 / elapsed.as_secs_f64(),
        peak_kib >> 10,
        bound_kib >> 10
    )?;
    writeln!(
        out,
        "\nThe bound is the baseline RSS before staging ({} MiB) + RocksDB's memtable budget and block cache \
         (`stage::MEMORY_BUDGET_BYTES`, {} MiB) + 64 MiB for one chunk in flight. It does not grow with the transaction: \
         {} chunks went through the pending area.",
        base_kib >> 10,
        weir::stage::MEMORY_BUDGET_BYTES >> 20,
        chunks
    )?;
    anyhow::ensure!(
        peak_kib < bound_kib,
        "peak RSS {peak_kib} KiB is above the stated bound {bound_kib} KiB"
    );
    Ok(())
}

// ---- Section 4: PostgreSQL logical replication ----------------------------------------

/// The source database of the replication workload.
const REPL_SOURCE_DB: &str = "repl_source";
/// The publication every consumer reads.
const REPL_PUBLICATION: &str = "bench_pub";
/// The source table, and the same table in each subscriber database.
const REPL_TABLE_DDL: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, \
     order_date date, amount numeric(12,2), status text)";
/// Row count and an md5 of all rows in id order, of a table of orders.
const REPL_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
     order_date, amount, status), ',' ORDER BY id), '')) FROM ";
/// The environment variables of the pipeline child's DSNs.
const SOURCE_DSN_ENV: &str = "WEIR_BENCH_SOURCE_DSN";
const TARGET_DSN_ENV: &str = "WEIR_BENCH_TARGET_DSN";
/// Changes per workload transaction: 8 inserts, 1 update, 1 update or delete.
const CHANGES_PER_TRANSACTION: u64 = 10;
/// How often the subscriber is polled for the workload's last row.
const SUBSCRIBER_POLL: Duration = Duration::from_millis(50);
/// Consumers per round, each with its own slot (the cluster has 20).
const SLOTS_PER_ROUND: usize = 4;

/// The Weir config of one consumer of the workload.
fn replication_config(slot: &str) -> String {
    format!(
        r#"[source]
kind = "postgres"
dsn_env = "{SOURCE_DSN_ENV}"
slot = "{slot}"
publication = "{REPL_PUBLICATION}"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "{TARGET_DSN_ENV}"

[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
"#
    )
}

/// A client of `dsn`, its connection driven by a task.
async fn connect(dsn: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .context("connect to the local PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// `(rows, digest)` of a table of orders.
async fn digest(client: &tokio_postgres::Client, table: &str) -> anyhow::Result<(i64, String)> {
    let row = client
        .query_one(&format!("{REPL_DIGEST}{table}"), &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// What a `--child-pipeline` run reports on its last stdout line.
#[derive(Debug, Clone, Copy)]
struct PipelineRun {
    seconds: f64,
    /// CPU seconds of the child process while timed.
    cpu: f64,
    changes: u64,
    partitions: u64,
}

/// The child side: `weir init` (with `init`), then `weir run --once` timed, as JSON.
async fn child_pipeline(path: &Path, init: bool) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let dsn = config.target_dsn()?;
    if init {
        pipeline::init(&config, &dsn).await?;
    }
    let pipeline = Pipeline::open(config, dsn).await?;
    let cpu = own_cpu();
    let started = Instant::now();
    let run = pipeline.run(true, std::future::pending()).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = own_cpu() - cpu;
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            "cpu": cpu,
            "changes": run.changes,
            "partitions": run.partitions_written,
        })
    );
    Ok(())
}

/// Runs `weir run --once` for `config` in a child process of this binary (the source
/// DSN reaches the library through the environment only).
async fn run_pipeline_child(
    config: &Path,
    init: bool,
    source_dsn: &str,
    target_dsn: &str,
) -> anyhow::Result<PipelineRun> {
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("--child-pipeline").arg(config);
    if init {
        cmd.arg("--child-init");
    }
    let out = cmd
        .env(SOURCE_DSN_ENV, source_dsn)
        .env(TARGET_DSN_ENV, target_dsn)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("run the pipeline child")?;
    anyhow::ensure!(
        out.status.success(),
        "weir run --once (child) failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(line).context("read the pipeline child's report")?;
    let number = |field: &str| {
        report
            .get(field)
            .and_then(|v| v.as_f64())
            .with_context(|| format!("the pipeline child's report lacks `{field}`"))
    };
    Ok(PipelineRun {
        seconds: number("seconds")?,
        cpu: number("cpu")?,
        changes: number("changes")? as u64,
        partitions: number("partitions")? as u64,
    })
}

/// What draining a slot into a stage did.
#[derive(Debug, Clone, Copy, Default)]
struct Drained {
    outcome: ApplyOutcome,
    /// Synced group commits, and the time spent in them (the source is not read meanwhile).
    writes: u32,
    write_time: Duration,
}

/// Applies a group of whole transactions in one synced write, then acknowledges the
/// source (the pipeline's `stage_batch`).
async fn stage_group(
    source: &mut PostgresSource,
    stage: &Arc<Stage>,
    batch: &mut Vec<Transaction>,
    total: &mut Drained,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let txns = std::mem::take(batch);
    let s = Arc::clone(stage);
    let started = Instant::now();
    let outcome = tokio::task::spawn_blocking(move || s.apply(&txns)).await??;
    total.write_time += started.elapsed();
    total.writes += 1;
    total.outcome.transactions += outcome.transactions;
    total.outcome.changes += outcome.changes;
    total.outcome.skipped += outcome.skipped;
    if let Some(checkpoint) = stage.checkpoint()? {
        source.acknowledge(checkpoint).await?;
    }
    Ok(())
}

/// Drains a slot (`once`) into `stage` the way the pipeline stages: chunks of a large
/// transaction to the pending area after the whole transactions before them, whole
/// transactions in synced groups of up to `batch_max`, each group acknowledged after
/// its write; also on `Idle` and at the end. Includes opening the source (connect,
/// slot check, drain mark, `START_REPLICATION`).
async fn drain_slot_into_stage(
    dsn: &Dsn,
    options: &PostgresSourceOptions,
    tables: Vec<TableConfig>,
    stage: &Arc<Stage>,
    batch_max: usize,
) -> anyhow::Result<Drained> {
    let checkpoint = stage.checkpoint()?;
    let mut source = PostgresSource::open(dsn, options, tables, Arc::clone(stage), checkpoint)
        .await
        .context("open the PostgreSQL source")?;
    let mut total = Drained::default();
    let mut batch: Vec<Transaction> = Vec::new();
    let mut chunked = false;
    loop {
        match source.next().await? {
            SourceEvent::Chunk(changes) => {
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.append_pending(&changes)).await??;
                chunked = true;
            }
            SourceEvent::Abort => {
                let s = Arc::clone(stage);
                tokio::task::spawn_blocking(move || s.discard_pending()).await??;
                chunked = false;
            }
            SourceEvent::Transaction(txn) => {
                batch.push(txn);
                if std::mem::take(&mut chunked) || batch.len() >= batch_max {
                    stage_group(&mut source, stage, &mut batch, &mut total).await?;
                }
            }
            SourceEvent::Idle => stage_group(&mut source, stage, &mut batch, &mut total).await?,
            SourceEvent::End => {
                stage_group(&mut source, stage, &mut batch, &mut total).await?;
                return Ok(total);
            }
        }
    }
}

/// Weir's slot → stage consumer of one round.
struct StageConsumer {
    _dir: tempfile::TempDir,
    stage: Arc<Stage>,
    options: PostgresSourceOptions,
    tables: Vec<TableConfig>,
    batch_max: usize,
}

impl StageConsumer {
    /// Creates the slot and a new stage, and drains the slot once while the table is
    /// still empty: the stage then holds the (empty) initial snapshot's completion, as
    /// a Weir that has been running before the backlog built up would.
    async fn new(source_dsn: &Dsn, slot: &str) -> anyhow::Result<StageConsumer> {
        let dir = tempfile::tempdir()?;
        let config_path = dir.path().join("weir.toml");
        std::fs::write(&config_path, replication_config(slot))?;
        let config = Config::load(&config_path)?;
        let client = connect(source_dsn.expose()).await?;
        client
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&slot],
            )
            .await
            .context("create a slot")?;
        let mut tables = Vec::with_capacity(config.tables.len());
        for table in &config.tables {
            let columns = source_columns(&client, &table.source).await?;
            tables.push(
                table
                    .with_columns(columns)
                    .map_err(|(field, message)| anyhow::anyhow!("{field}: {message}"))?,
            );
        }
        let SourceConfig::Postgres {
            snapshot_chunk_rows,
            heartbeat_interval_ms,
            ..
        } = &config.source
        else {
            anyhow::bail!("the replication config is not a PostgreSQL source");
        };
        let options = PostgresSourceOptions {
            slot: slot.to_owned(),
            publication: REPL_PUBLICATION.to_owned(),
            once: true,
            chunk_changes_max: config.engine.transaction_chunk_changes,
            snapshot_chunk_rows: *snapshot_chunk_rows,
            heartbeat_interval_ms: *heartbeat_interval_ms,
        };
        let stage = Arc::new(Stage::open(&config.stage_path, &config.source_id())?);
        let consumer = StageConsumer {
            _dir: dir,
            stage,
            options,
            tables,
            batch_max: config.engine.batch_transactions_max,
        };
        let before = consumer.drain(source_dsn).await?;
        anyhow::ensure!(
            before.outcome.changes <= 1,
            "the first drain of an empty table staged {} changes",
            before.outcome.changes
        );
        Ok(consumer)
    }

    async fn drain(&self, source_dsn: &Dsn) -> anyhow::Result<Drained> {
        drain_slot_into_stage(
            source_dsn,
            &self.options,
            self.tables.clone(),
            &self.stage,
            self.batch_max,
        )
        .await
    }
}

/// Weir's `run --once` consumer of one round: its config and target database.
struct PipelineConsumer {
    dir: tempfile::TempDir,
    target_db: String,
}

/// The workload: `txns` transactions of 10 changes on `orders`. Transaction `t` inserts
/// ids `8t+1..=8t+8` over 30 days, sets a row of the previous transaction paid, and
/// either ships another (moving it to the next day: a partition move) or deletes a third.
/// Every statement changes exactly one row per id. Written 500 transactions per round
/// trip.
async fn write_orders_workload(client: &tokio_postgres::Client, txns: u64) -> anyhow::Result<()> {
    let mut seq = Sequence::new(23);
    let mut sql = String::with_capacity(500 * 700);
    for t in 0..txns {
        workload_transaction(&mut sql, &mut seq, t)?;
        if (t + 1) % 500 == 0 || t + 1 == txns {
            client.batch_execute(&sql).await?;
            sql.clear();
        }
    }
    Ok(())
}

/// Appends transaction `t` of the workload of [`write_orders_workload`] to `sql`
/// (`BEGIN; … COMMIT;`, `seq` seeded 23 for the same rows); returns the id it deletes,
/// if any.
fn workload_transaction(
    sql: &mut String,
    seq: &mut Sequence,
    t: u64,
) -> anyhow::Result<Option<u64>> {
    sql.push_str("BEGIN; INSERT INTO orders VALUES ");
    for k in 1..=8 {
        let id = 8 * t + k;
        let cents = seq.below(1_000_000);
        write!(
            sql,
            "{}({id}, 'c{}', '{}', {}.{:02}, 'new')",
            if k == 1 { "" } else { ", " },
            id % 97,
            day(seq.below(30)),
            cents / 100,
            cents % 100
        )?;
    }
    let previous = 8 * t.saturating_sub(1);
    write!(
        sql,
        "; UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {};",
        previous + 2
    )?;
    let deleted = if t.is_multiple_of(2) {
        write!(
            sql,
            " UPDATE orders SET status = 'shipped', order_date = order_date + 1 WHERE id = {};",
            previous + 3
        )?;
        None
    } else {
        write!(sql, " DELETE FROM orders WHERE id = {};", previous + 4)?;
        Some(previous + 4)
    };
    sql.push_str(" COMMIT;\n");
    Ok(deleted)
}

/// `(ppid, [utime, stime, cutime, cstime])` in seconds from `/proc/<pid>/stat` (in
/// ticks of 1/100 s, Linux's USER_HZ).
fn proc_times(pid: &str) -> Option<(String, [f64; 4])> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name: state (0), ppid (1), ..., utime (11), stime (12), cutime
    // (13), cstime (14).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let seconds = |i: usize| Some(fields.get(i)?.parse::<f64>().ok()? / 100.0);
    Some((
        (*fields.get(1)?).to_owned(),
        [seconds(11)?, seconds(12)?, seconds(13)?, seconds(14)?],
    ))
}

/// CPU seconds this process used so far.
fn own_cpu() -> f64 {
    proc_times("self").map_or(0.0, |(_, t)| t[0] + t[1])
}

/// CPU seconds this process's ended and waited-for children used so far.
fn children_cpu() -> f64 {
    proc_times("self").map_or(0.0, |(_, t)| t[2] + t[3])
}

/// CPU seconds the cluster used so far: the postmaster's, its ended children's, and its
/// running children's (backends, walsenders, workers).
fn cluster_cpu(pg: &LocalPg) -> anyhow::Result<f64> {
    let pid_file = std::fs::read_to_string(pg.data_dir().join("postmaster.pid"))?;
    let pid = pid_file
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let (_, own) = proc_times(&pid).context("read the postmaster's CPU times")?;
    let mut total: f64 = own.iter().sum();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some((ppid, t)) = proc_times(&name)
            && ppid == pid
        {
            total += t[0] + t[1];
        }
    }
    Ok(total)
}

/// Waits until no walsender serves `slot` any more and its process has had time to
/// end, so its CPU time is counted with the postmaster's ended children.
async fn slot_released(client: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let active: bool = client
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .get(0);
        if !active {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "slot {slot} stayed active"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// The decode limit: `pg_recvlogical` reads `slot` of `db` (pgoutput, `publication`)
/// to /dev/null up to `end_lsn`; its time from spawning it to its exit. Checked: it
/// succeeded and the slot's confirmed position reached `end_lsn`; returns once no
/// walsender serves the slot any more. `source` is a client of `db`.
async fn recvlogical(
    pg: &LocalPg,
    source: &tokio_postgres::Client,
    db: &str,
    slot: &str,
    publication: &str,
    end_lsn: &str,
) -> anyhow::Result<Duration> {
    let port = pg.port().to_string();
    let started = Instant::now();
    let output = tokio::process::Command::new(pg.bin_dir().join("pg_recvlogical"))
        .args(["-h", pg.host(), "-p", &port, "-U", "postgres"])
        .args(["-d", db, "-S", slot, "--start", "--no-loop"])
        .args([
            "-f",
            "/dev/null",
            "--plugin=pgoutput",
            "-o",
            "proto_version=1",
        ])
        .args(["-o", &format!("publication_names={publication}")])
        .arg(format!("--endpos={end_lsn}"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("run pg_recvlogical")?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        output.status.success(),
        "pg_recvlogical failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    slot_released(source, slot).await?;
    let reached: bool = source
        .query_one(
            "SELECT confirmed_flush_lsn >= $1::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
            &[&end_lsn, &slot],
        )
        .await?
        .get(0);
    anyhow::ensure!(reached, "pg_recvlogical stopped before the workload's end");
    Ok(elapsed)
}

/// Times and CPU seconds of one path, one entry per run.
#[derive(Debug, Default)]
struct Measured {
    times: Vec<Duration>,
    /// CPU of every process of the cluster during the run.
    server_cpu: Vec<f64>,
    /// CPU of the consumer's own process (none: it is a server process).
    client_cpu: Vec<f64>,
}

/// The median of `v`, if any.
fn median_f64(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median of `v` and all of `v` as text.
fn summary(v: &[Duration]) -> (Duration, String) {
    let all = v
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    (median(v), all)
}

/// Section 4: Weir against pg_recvlogical and a native subscription, on one workload.
/// Returns the changes/s of `run --once`, pg_recvlogical and the subscription.
async fn replication(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<(f64, f64, f64)> {
    let txns = args.pg_changes / CHANGES_PER_TRANSACTION;
    anyhow::ensure!(txns >= 2, "--pg-changes must be at least 20");
    let changes = txns * CHANGES_PER_TRANSACTION;
    let rounds = args.repeat.max(1);
    anyhow::ensure!(
        rounds * SLOTS_PER_ROUND <= 20,
        "--repeat {rounds} needs {} replication slots; the cluster has 20",
        rounds * SLOTS_PER_ROUND
    );
    // Other processes share this machine: say how busy it was.
    let load = load_average();
    let source_dsn = Dsn::new(pg.create_database(REPL_SOURCE_DB).await?);
    let source = connect(source_dsn.expose()).await?;
    source
        .batch_execute(&format!(
            "{REPL_TABLE_DDL}; CREATE PUBLICATION {REPL_PUBLICATION} FOR TABLE orders"
        ))
        .await?;
    // The launcher starts apply workers at most once per wal_retrieve_retry_interval:
    // each subscription is enabled at least that long after the previous one.
    let retry_ms: i32 = source
        .query_one(
            "SELECT setting::int FROM pg_settings WHERE name = 'wal_retrieve_retry_interval'",
            &[],
        )
        .await?
        .get(0);
    let launcher_gap = Duration::from_millis(u64::try_from(retry_ms)?) + Duration::from_millis(500);
    let mut last_enable: Option<Instant> = None;
    // No password: the local cluster trusts 127.0.0.1.
    let conninfo = format!(
        "host={} port={} user=postgres dbname={REPL_SOURCE_DB}",
        pg.host(),
        pg.port()
    );

    // Every consumer's slot exists before the workload, so all see the same changes.
    let mut stage_consumers = Vec::with_capacity(rounds);
    let mut pipeline_consumers = Vec::with_capacity(rounds);
    for i in 0..rounds {
        stage_consumers.push(StageConsumer::new(&source_dsn, &format!("weir_stage_{i}")).await?);

        let dir = tempfile::tempdir()?;
        std::fs::write(
            dir.path().join("weir.toml"),
            replication_config(&format!("weir_run_{i}")),
        )?;
        let target_db = format!("repl_target_{i}");
        let target_dsn = pg.create_database(&target_db).await?;
        // `weir init` (creates the slot) and a first `run --once` on the empty table.
        run_pipeline_child(
            &dir.path().join("weir.toml"),
            true,
            source_dsn.expose(),
            &target_dsn,
        )
        .await?;
        pipeline_consumers.push(PipelineConsumer { dir, target_db });

        source
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&format!("recv_{i}")],
            )
            .await?;
        // The subscription's slot is made here: CREATE SUBSCRIPTION creating a slot on
        // its own cluster would wait for its own transaction.
        source
            .query_one(
                "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
                &[&format!("sub_{i}")],
            )
            .await?;
        let sub_db = format!("repl_sub_{i}");
        let subscriber = connect(&pg.create_database(&sub_db).await?).await?;
        subscriber.batch_execute(REPL_TABLE_DDL).await?;
        subscriber
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION bench_sub_{i} CONNECTION '{conninfo}' PUBLICATION {REPL_PUBLICATION} \
                 WITH (create_slot = false, slot_name = 'sub_{i}', copy_data = false, enabled = false)"
            ))
            .await?;
    }

    // The workload, then wait until its WAL is flushed (commits are asynchronous here),
    // so every consumer finds the whole backlog readable when its clock starts.
    let lsn = |sql: &'static str| {
        let source = &source;
        async move {
            let row = source.query_one(sql, &[]).await?;
            anyhow::Ok(row.get::<_, String>(0))
        }
    };
    let start_lsn = lsn("SELECT pg_current_wal_insert_lsn()::text").await?;
    let started = Instant::now();
    write_orders_workload(&source, txns).await?;
    let write_time = started.elapsed();
    let end_lsn = lsn("SELECT pg_current_wal_insert_lsn()::text").await?;
    loop {
        let flushed: bool = source
            .query_one(
                "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
                &[&end_lsn],
            )
            .await?
            .get(0);
        if flushed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wal_bytes: i64 = source
        .query_one(
            "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
            &[&end_lsn, &start_lsn],
        )
        .await?
        .get(0);
    // A quiet machine for the clocks: no autovacuum of the fresh table mid-run.
    source.batch_execute("VACUUM ANALYZE orders").await?;
    source.batch_execute("CHECKPOINT").await?;
    let (rows, source_digest) = digest(&source, "orders").await?;
    println!(
        "replication workload: {changes} changes in {txns} transactions written in {write_time:?}, \
         {:.1} MB of WAL, {rows} rows",
        wal_bytes as f64 / 1e6
    );

    let (mut stage, mut run_once, mut recv, mut sub) = (
        Measured::default(),
        Measured::default(),
        Measured::default(),
        Measured::default(),
    );
    let mut partitions = 0;
    let mut stage_writes = Vec::with_capacity(rounds);
    for i in 0..rounds {
        // Weir: slot → stage.
        let consumer = &stage_consumers[i];
        let (server, client) = (cluster_cpu(pg)?, own_cpu());
        let started = Instant::now();
        let staged = consumer.drain(&source_dsn).await?;
        stage.times.push(started.elapsed());
        stage.client_cpu.push(own_cpu() - client);
        slot_released(&source, &consumer.options.slot).await?;
        stage.server_cpu.push(cluster_cpu(pg)? - server);
        anyhow::ensure!(
            staged.outcome.changes as u64 == changes,
            "Weir staged {} changes, expected {changes}",
            staged.outcome.changes
        );
        stage_writes.push((staged.writes, staged.write_time));
        let staged_rows: u64 = consumer.stage.row_counts()?.values().sum();
        anyhow::ensure!(
            staged_rows == rows as u64,
            "the stage holds {staged_rows} rows, the source {rows}"
        );

        // Weir: `run --once` into a target database.
        let consumer = &pipeline_consumers[i];
        let target_dsn = pg.dsn(&consumer.target_db);
        let server = cluster_cpu(pg)?;
        let run = run_pipeline_child(
            &consumer.dir.path().join("weir.toml"),
            false,
            source_dsn.expose(),
            &target_dsn,
        )
        .await?;
        slot_released(&source, &format!("weir_run_{i}")).await?;
        run_once.server_cpu.push(cluster_cpu(pg)? - server);
        run_once.times.push(Duration::from_secs_f64(run.seconds));
        run_once.client_cpu.push(run.cpu);
        partitions = run.partitions;
        anyhow::ensure!(
            run.changes == changes,
            "weir run --once staged {} changes, expected {changes}",
            run.changes
        );
        let target = connect(&target_dsn).await?;
        anyhow::ensure!(
            digest(&target, "analytics.fact_orders").await? == (rows, source_digest.clone()),
            "the Weir target differs from the source table"
        );

        // The decode limit: pg_recvlogical to /dev/null, up to the workload's end.
        let slot = format!("recv_{i}");
        let (server, client) = (cluster_cpu(pg)?, children_cpu());
        recv.times.push(
            recvlogical(
                pg,
                &source,
                REPL_SOURCE_DB,
                &slot,
                REPL_PUBLICATION,
                &end_lsn,
            )
            .await?,
        );
        recv.client_cpu.push(children_cpu() - client);
        recv.server_cpu.push(cluster_cpu(pg)? - server);

        // The peer: a subscription, enabled on the backlog; done when the workload's last
        // row is visible (transactions are applied whole, in commit order).
        let subscriber = connect(&pg.dsn(&format!("repl_sub_{i}"))).await?;
        let probe = subscriber
            .prepare("SELECT EXISTS (SELECT 1 FROM orders WHERE id = $1)")
            .await?;
        let last_id = (8 * txns) as i64;
        if let Some(wait) = last_enable.and_then(|t| launcher_gap.checked_sub(t.elapsed())) {
            tokio::time::sleep(wait).await;
        }
        let server = cluster_cpu(pg)?;
        let started = Instant::now();
        last_enable = Some(started);
        subscriber
            .batch_execute(&format!("ALTER SUBSCRIPTION bench_sub_{i} ENABLE"))
            .await?;
        loop {
            let applied: bool = subscriber.query_one(&probe, &[&last_id]).await?.get(0);
            if applied {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(600),
                "the subscription did not apply the workload within 600 s (see the server log)"
            );
            tokio::time::sleep(SUBSCRIBER_POLL).await;
        }
        sub.times.push(started.elapsed());
        sub.server_cpu.push(cluster_cpu(pg)? - server);
        anyhow::ensure!(
            digest(&subscriber, "orders").await? == (rows, source_digest.clone()),
            "the subscriber's table differs from the source table"
        );
        subscriber
            .batch_execute(&format!("ALTER SUBSCRIPTION bench_sub_{i} DISABLE"))
            .await?;
        // No autovacuum of this round's fresh tables during the next round's clocks.
        subscriber.batch_execute("VACUUM ANALYZE orders").await?;
        target
            .batch_execute("VACUUM ANALYZE analytics.fact_orders")
            .await?;
        println!(
            "replication, run {}: weir stage {:?}, weir run --once {:?}, pg_recvlogical {:?}, subscription {:?}",
            i + 1,
            stage.times[i],
            run_once.times[i],
            recv.times[i],
            sub.times[i]
        );
    }

    let (stage_time, stage_all) = summary(&stage.times);
    let (run_time, run_all) = summary(&run_once.times);
    let (recv_time, recv_all) = summary(&recv.times);
    let (sub_time, sub_all) = summary(&sub.times);
    let rate = |d: Duration| changes as f64 / d.as_secs_f64();
    let writes = stage_writes
        .iter()
        .map(|(n, d)| format!("{:.2} ({n} writes)", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    let batch_max = stage_consumers.first().map_or(0, |c| c.batch_max);
    writeln!(
        out,
        "\n## PostgreSQL logical replication: Weir against pg_recvlogical and a subscription\n"
    )?;
    writeln!(
        out,
        "Workload: {changes} row changes in {txns} transactions on `orders` (id bigint primary key, customer text, \
         order_date date, amount numeric(12,2), status text; default replica identity), each transaction 8 inserts, \
         1 update, and alternately 1 update (moving the row to the next day) or 1 delete: {} inserts, {} updates, \
         {} deletes, {:.1} MB of WAL, {rows} rows at the end. One publication; every consumer has its own pgoutput \
         slot, created before the workload was written, so all read the same backlog. The consumers ran one at a \
         time, in the order of the table, after the workload's WAL was flushed, a `VACUUM ANALYZE` of the source \
         table and a `CHECKPOINT`; the tables a run filled were vacuumed after it, outside the clocks. Median of \
         {rounds} runs, each with its own slots.\n",
        8 * txns,
        txns + txns.div_ceil(2),
        txns / 2,
        wal_bytes as f64 / 1e6,
    )?;
    writeln!(
        out,
        "| path | time (s) | changes/s | server CPU (s) | consumer CPU (s) |\n|---|---:|---:|---:|---:|"
    )?;
    for (name, time, measured) in [
        ("Weir: slot → stage", stage_time, &stage),
        (
            "Weir: `run --once` (slot → stage → target partitions)",
            run_time,
            &run_once,
        ),
        (
            "`pg_recvlogical` → /dev/null (decode limit)",
            recv_time,
            &recv,
        ),
        ("native subscription (peer)", sub_time, &sub),
    ] {
        let client = median_f64(&measured.client_cpu)
            .map_or_else(|| "in server".to_owned(), |c| format!("{c:.2}"));
        writeln!(
            out,
            "| {name} | {:.2} | {:.0} | {:.2} | {client} |",
            time.as_secs_f64(),
            rate(time),
            median_f64(&measured.server_cpu).unwrap_or_default(),
        )?;
    }
    writeln!(
        out,
        "\nWeir slot → stage / limit: {:.2} of pg_recvlogical's rate. Weir slot → stage / peer: {:.2} of the \
         subscription's rate; Weir `run --once` / peer: {:.2}.\n\n\
         All runs (s): slot → stage {stage_all}; `run --once` {run_all}; pg_recvlogical {recv_all}; subscription \
         {sub_all}. Of each slot → stage run, the `Stage::apply` calls (building each group commit's batch, writing \
         and syncing it) took (s): {writes}; the source is not read while one runs, so staging and receiving \
         overlap only as far as the socket buffers the stream. Decoding this backlog cost the server {:.2} \
         CPU-seconds when pg_recvlogical read it; every path pays about that on the server. CPU columns are medians too: *server* is every process of the cluster during the \
         run (the walsender's decoding; for `run --once` also the target's DELETE and COPY; for the subscription \
         also its apply worker), *consumer* the consumer's own process (this benchmark for slot → stage, the child \
         for `run --once`, pg_recvlogical). CPU seconds depend less than wall time on other load: the 1-minute load \
         average when this section began was {load} (other processes share the machine).\n",
        rate(stage_time) / rate(recv_time),
        rate(stage_time) / rate(sub_time),
        rate(run_time) / rate(sub_time),
        median_f64(&recv.server_cpu).unwrap_or_default(),
    )?;
    writeln!(out, "What each time measures:\n")?;
    writeln!(
        out,
        "* **Weir: slot → stage**: in the benchmark's process, from opening `PostgresSource` (`once`: connect, slot \
         check, the drain mark, `START_REPLICATION`) until it reports the end, decoding pgoutput into typed rows and \
         staging them as the pipeline does: chunks of a large transaction to the pending area, whole transactions in \
         synced RocksDB group commits of up to {batch_max} transactions, the slot acknowledged after each; a \
         delete's key-only old tuple is resolved through the stage's keys index. The stage is new except that it \
         drained its slot once while the table was still empty (the empty initial snapshot). Checked: {changes} \
         changes staged; the stage holds as many rows as the source table.\n\
         * **Weir: `run --once`**: the library's `Pipeline::run(once)`, timed after `Pipeline::open` in a child \
         process (a PostgreSQL source's DSN reaches the library only through the environment); `weir init` and a \
         first `run --once` ran before the workload. The same staging, then {partitions} day partitions replaced \
         in a target database of the same cluster (DELETE, binary COPY, lineage; 2 at once). Checked: the target \
         table equals the source table (row count and an md5 of all rows in id order).\n\
         * **`pg_recvlogical`** (the decode limit): `pg_recvlogical --start --no-loop --plugin=pgoutput -o \
         proto_version=1 -o publication_names={REPL_PUBLICATION} -f /dev/null --endpos=<LSN after the workload>`, \
         from spawning it to its exit: the server's logical decoding and pgoutput encoding of the backlog, streamed \
         over TCP and written to /dev/null (two `write` calls per message). Checked: the slot's confirmed position \
         reached the end LSN.\n\
         * **native subscription** (the peer): `CREATE SUBSCRIPTION … PUBLICATION {REPL_PUBLICATION} WITH \
         (create_slot = false, slot_name = …, copy_data = false, enabled = false)` in a second database of the same \
         cluster holding the same table, its slot made beforehand with `pg_create_logical_replication_slot`; timed \
         from `ALTER SUBSCRIPTION … ENABLE` (which includes the apply worker's start) until the workload's last \
         inserted row is visible in the subscriber, polled every {} ms, so up to {} ms late (the apply worker \
         commits transactions whole and in order). Checked: the subscriber's table then equals the source's (row \
         count and md5).\n",
        SUBSCRIBER_POLL.as_millis(),
        SUBSCRIBER_POLL.as_millis(),
    )?;
    writeln!(
        out,
        "Durability is not the same: Weir syncs every stage write (RocksDB's log, on this machine's disk) before it \
         acknowledges the slot, while this cluster, and so the subscriber, runs with fsync and synchronous_commit off \
         (settings above), so the subscription's apply never waits for a flush. On 2 cores the server's walsender \
         (decoding) and the consumer (Weir, pg_recvlogical or the apply worker) run side by side."
    )?;
    Ok((rate(run_time), rate(recv_time), rate(sub_time)))
}
