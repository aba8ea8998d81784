//! Section 1: end to end. A Debezium JSON-lines feed of orders → `run --once` (decode,
//! stage with synced group commits, partition replace by binary COPY) → committed
//! partitions; against one binary COPY of the same final rows into the same table.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use weir::config::{Config, Dsn};
use weir::localpg::LocalPg;
use weir::pipeline::{self, Pipeline};
use weir_core::fixtures::{OrdersTable, jsonl_config};

use crate::Args;
use crate::cluster::connect;
use crate::measure::{median, seconds_list};
use crate::orders::{copy_orders, orders_feed};

/// Section 1: JSON lines → committed partitions, against raw binary COPY.
/// Returns Weir's and the COPY's rows/s.
pub(crate) async fn end_to_end(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<(f64, f64)> {
    let (feed, rows) = orders_feed(args.rows, args.days)?;
    let (mut weir_times, mut copy_times) = (Vec::new(), Vec::new());
    for i in 0..args.repeat {
        let dsn = Dsn::new(pg.create_database(&format!("bench_{i}")).await?);
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("feed.jsonl"), &feed)?;
        let config_path = dir.path().join("weir.toml");
        std::fs::write(
            &config_path,
            jsonl_config(
                "",
                "",
                &OrdersTable::jsonl("analytics.fact_orders").to_string(),
            ),
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
