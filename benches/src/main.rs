//! `weir-bench`: measures Weir against its limits on this machine, in one run, and
//! writes BENCHMARKS.md.
//!
//! End to end: a Debezium JSON-lines feed of orders → `run --once` (decode, stage with
//! synced group commits, partition replace by binary COPY) → committed partitions.
//! Baseline, same run, same server, same rows: one binary COPY of the final rows into
//! the same target table. The ratio says what the staging and partitioning cost over
//! the cheapest possible load.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use weir::config::{Config, Dsn};
use weir::demo::{DEMO_CONFIG, Sequence, order_line};
use weir::localpg::{LocalPg, LocalPgOptions};
use weir::pipeline::{self, Pipeline};
use weir::value::Value;

#[derive(Debug, Parser)]
#[command(
    about = "Benchmarks Weir against raw binary COPY on a throwaway PostgreSQL; writes BENCHMARKS.md"
)]
struct Args {
    /// Orders in the feed (one insert each).
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Days the orders spread over (one partition each).
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Where to write the report.
    #[arg(long, default_value = "BENCHMARKS.md")]
    out: PathBuf,
}

#[derive(Debug)]
struct Measured {
    weir: Vec<Duration>,
    copy: Vec<Duration>,
    feed_bytes: u64,
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
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
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
    let mut measured = Measured {
        weir: Vec::new(),
        copy: Vec::new(),
        feed_bytes: feed.len() as u64,
    };
    for i in 0..args.repeat {
        let dsn = pg.create_database(&format!("bench_{i}")).await?;
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("feed.jsonl"), &feed)?;
        let config_path = dir.path().join("weir.toml");
        std::fs::write(
            &config_path,
            DEMO_CONFIG.replace("on_bad_record = \"dead-letter\"", ""),
        )?;
        let config = Config::load(&config_path)?;
        let dsn = Dsn::new(dsn);
        pipeline::init(&config, &dsn).await?;
        let pipeline = Pipeline::open(config, dsn.clone()).await?;
        let started = Instant::now();
        let report = pipeline.run(true, std::future::pending()).await?;
        measured.weir.push(started.elapsed());
        anyhow::ensure!(
            report.rows_written == args.rows,
            "weir wrote {} rows, expected {}",
            report.rows_written,
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
        let sink = client.copy_in("COPY analytics.fact_orders (id, customer, order_date, amount, status) FROM STDIN (FORMAT binary)").await?;
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
        measured.copy.push(started.elapsed());
        println!(
            "run {}: weir {:?}, copy {:?}",
            i + 1,
            measured.weir[i],
            measured.copy[i]
        );
    }
    let report = render(&args, &measured, &pg).await?;
    std::fs::write(&args.out, &report)?;
    println!("{report}");
    Ok(())
}

async fn render(args: &Args, m: &Measured, pg: &LocalPg) -> anyhow::Result<String> {
    let weir = median(&m.weir);
    let copy = median(&m.copy);
    let rate = |d: Duration| args.rows as f64 / d.as_secs_f64();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let (client, connection) =
        tokio_postgres::connect(&pg.dsn("postgres"), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let mut settings = String::new();
    for name in [
        "shared_buffers",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
    ] {
        let v: String = client.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        let _ = write!(settings, "{name}={v} ");
    }
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Produced by one run of:\n\n```\nscripts/bench --rows {} --days {} --repeat {}\n```\n",
        args.rows, args.days, args.repeat
    );
    let _ = writeln!(
        out,
        "Machine: {cores} cores ({cpu}), {:.1} GiB memory. PostgreSQL {version} (throwaway local cluster: {}).",
        mem as f64 / 1048576.0,
        settings.trim()
    );
    let _ = writeln!(
        out,
        "Release build. Each figure is the median of {} repetitions in the same run.\n",
        args.repeat
    );
    let _ = writeln!(
        out,
        "## JSON lines → stage → partitions, against raw binary COPY\n"
    );
    let _ = writeln!(
        out,
        "Feed: {} orders (one insert each, transactions of 8 lines), {} days, {:.1} MB of Debezium JSON lines. \
         Weir: `run --once` from an empty stage: decode, stage in synced group commits, then replace {} day partitions with binary COPY and lineage. \
         Baseline: one binary COPY of the same {} final rows into the same (truncated) target table.\n",
        args.rows,
        args.days,
        m.feed_bytes as f64 / 1e6,
        args.days,
        args.rows
    );
    let _ = writeln!(out, "| path | time (s) | rows/s |\n|---|---:|---:|");
    let _ = writeln!(
        out,
        "| Weir end to end | {:.2} | {:.0} |",
        weir.as_secs_f64(),
        rate(weir)
    );
    let _ = writeln!(
        out,
        "| raw binary COPY (limit) | {:.2} | {:.0} |",
        copy.as_secs_f64(),
        rate(copy)
    );
    let _ = writeln!(
        out,
        "\nWeir / limit: {:.2} of the raw COPY rate.",
        rate(weir) / rate(copy)
    );
    let all = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        out,
        "\nAll repetitions (s): Weir {}; COPY {}.",
        all(&m.weir),
        all(&m.copy)
    );
    Ok(out)
}
