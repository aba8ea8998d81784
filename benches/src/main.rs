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

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use weir::config::{Config, Dsn, OnBadRecord};
use weir::demo::{DEMO_CONFIG, Sequence, order_line};
use weir::localpg::{LocalPg, LocalPgOptions};
use weir::pipeline::{self, Pipeline};
use weir::source::jsonl::JsonlSource;
use weir::source::{ChangeSource, SourceEvent, Transaction, keyed_changes};
use weir::stage::Stage;
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
    /// Repetitions of each end-to-end measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Single-row transactions staged per group-commit size.
    #[arg(long, default_value_t = 20_000)]
    stage_transactions: usize,
    /// Rows of the one large transaction.
    #[arg(long, default_value_t = 2_000_000)]
    large_rows: u64,
    /// Where to write the report.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
}

/// Peak RSS of this process since the last reset, in KiB (Linux `VmHWM`).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak RSS to the current RSS (Linux `clear_refs` 5).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
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
    let mut report = String::new();
    header(&mut report, &args)?;
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
    pg_settings(&mut report, &pg).await?;
    end_to_end(&mut report, &args, &pg).await?;
    staging(&mut report, &args)?;
    large_transaction(&mut report, &args).await?;
    std::fs::write(&args.out, &report)?;
    println!("{report}");
    Ok(())
}

fn header(out: &mut String, args: &Args) -> anyhow::Result<()> {
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
    writeln!(out, "# Benchmarks\n")?;
    writeln!(
        out,
        "Every figure below comes from one run of:\n\n```\nscripts/bench --rows {} --days {} --repeat {} --stage-transactions {} --large-rows {}\n```\n",
        args.rows, args.days, args.repeat, args.stage_transactions, args.large_rows
    )?;
    writeln!(
        out,
        "Machine: {cores} cores ({cpu}), {:.1} GiB memory. Release build.",
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

/// Section 1: JSON lines → committed partitions, against raw binary COPY.
async fn end_to_end(out: &mut String, args: &Args, pg: &LocalPg) -> anyhow::Result<()> {
    let mut seq = Sequence::new(11);
    let mut feed = String::with_capacity(args.rows as usize * 220);
    let mut rows: Vec<Vec<Value>> = Vec::with_capacity(args.rows as usize);
    for id in 1..=args.rows {
        let d = day(seq.below(args.days));
        let cents = seq.below(1_000_000);
        feed.push_str(&order_line('c', Some(id / 8), id, &d, cents, "new"));
        rows.push(vec![
            Value::Int(id as i64),
            Value::Text(format!("c{}", id % 97)),
            Value::Date(weir::value::parse_date(&d).context("date")?),
            Value::Decimal(format!("{}.{:02}", cents / 100, cents % 100)),
            Value::Text("new".into()),
        ]);
    }
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

        let (client, connection) =
            tokio_postgres::connect(dsn.expose(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client
            .batch_execute("TRUNCATE analytics.fact_orders")
            .await?;
        let started = Instant::now();
        let sink = client
            .copy_in("COPY analytics.fact_orders (id, customer, order_date, amount, status) FROM STDIN (FORMAT binary)")
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
        for row in &rows {
            let refs: Vec<&(dyn ToSql + Sync)> =
                row.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            writer.as_mut().write(&refs).await?;
        }
        writer.finish().await?;
        copy_times.push(started.elapsed());
        println!(
            "end to end, run {}: weir {:?}, copy {:?}",
            i + 1,
            weir_times[i],
            copy_times[i]
        );
    }
    let (weir, copy) = (median(&weir_times), median(&copy_times));
    let rate = |d: Duration| args.rows as f64 / d.as_secs_f64();
    let all = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
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
        all(&weir_times),
        all(&copy_times)
    )?;
    Ok(())
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
