//! Section 7: partition writers. (1) The cost of rewriting one partition of
//! `--writer-rows` rows, in rows/s: replace on a plain table (DELETE), replace on
//! native partitions (TRUNCATE of the child), merge of every key and of 1% of the keys,
//! each against one raw binary COPY of the same rows into an empty table, in the same
//! run. (2) Write amplification (rows written per changed row) of a hot partition of
//! `--hot-rows` rows under `--hot-rate` updates/s for `--hot-seconds`, with a live
//! `run` at flush intervals of 200 ms and 2 s, in replace and in merge mode.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use weir::config::{Config, Dsn, TableConfig};
use weir::demo::{Sequence, order_line};
use weir::localpg::LocalPg;
use weir::partition::Partition;
use weir::pipeline::{self, Pipeline};
use weir::target::{self, MergeKeys, PartitionMeta, PartitionWrite, Prepare, TargetTable};
use weir::value::Value;
use weir_core::fixtures::{OrdersTable, jsonl_config};

use crate::Args;
use crate::measure::{load_average, median, seconds_list};
use crate::orders::{copy_orders, day, orders_feed};

/// Flush intervals of the hot-partition runs: the engine's default, and two longer.
const FLUSH_MS: [u64; 3] = [weir::config::limits::FLUSH_INTERVAL_MS_DEFAULT, 200, 2000];

/// The demo's table with another target, layout and write mode.
fn table(dir: &Path, target: &str, extra: &str) -> anyhow::Result<TableConfig> {
    let text = jsonl_config("", "", &OrdersTable::jsonl(target).extra(extra).to_string());
    let config = Config::parse(&text, &dir.join("weir.toml"))?;
    config
        .tables
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the demo config has a table"))
}

fn write<'a>(
    partition: &'a Partition,
    rows: &'a [Vec<Value>],
    generation: u64,
) -> PartitionWrite<'a> {
    PartitionWrite {
        meta: PartitionMeta {
            source_id: "bench",
            stage_id: "bench",
            source_table: "public.orders",
            partition,
            generation,
            source_position: generation,
            transform: pipeline::IDENTITY_TRANSFORM,
            plugin_sha256: None,
            config_hash: None,
            skip_if_newer: false,
            merge_floor: None,
        },
        rows,
        rejections: &[],
    }
}

fn merge_keys(rows: &[Vec<Value>]) -> MergeKeys {
    let keys: Vec<Vec<Value>> = rows.iter().map(|r| vec![r[0].clone()]).collect();
    MergeKeys {
        columns: vec![0],
        rejection_keys: keys
            .iter()
            .map(|k| weir::plugin::json::key_text(k))
            .collect(),
        keys,
    }
}

/// Section 7.
pub(crate) async fn writers(out: &mut String, args: &Args, pg: &LocalPg) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.writer_rows >= 100,
        "--writer-rows must be at least 100"
    );
    let repeat = args.repeat.max(1);
    let load = load_average();
    let dir = tempfile::tempdir()?;
    let dsn = Dsn::new(pg.create_database("bench_writers").await?);
    let mut client = target::connect(&dsn).await?;
    target::ensure_weir_schema(&client).await?;
    let plain: TargetTable = target::prepare_table(
        &mut client,
        &table(dir.path(), "analytics.rewrite_plain", "")?,
        Prepare::Create,
    )
    .await?;
    let native: TargetTable = target::prepare_table(
        &mut client,
        &table(
            dir.path(),
            "analytics.rewrite_native",
            "target_partitioning = \"native\"",
        )?,
        Prepare::Create,
    )
    .await?;
    client
        .batch_execute(
            "CREATE TABLE analytics.rewrite_copy (LIKE analytics.rewrite_plain INCLUDING ALL)",
        )
        .await?;
    // One partition (one day) of `--writer-rows` orders.
    let (_, rows) = orders_feed(args.writer_rows, 1)?;
    let partition = Partition::Key(day(0));
    let hundredth: Vec<Vec<Value>> = rows.iter().step_by(100).cloned().collect();

    let mut copy = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        client
            .batch_execute("TRUNCATE analytics.rewrite_copy")
            .await?;
        copy.push(copy_orders(&client, "analytics.rewrite_copy", &rows).await?);
    }
    let mut replace_plain = Vec::new();
    for i in 0..=repeat as u64 {
        let started = Instant::now();
        target::replace_partition(&mut client, &plain, &write(&partition, &rows, i + 1)).await?;
        if i > 0 {
            replace_plain.push(started.elapsed());
        }
    }
    let mut replace_native = Vec::new();
    for i in 0..=repeat as u64 {
        let started = Instant::now();
        target::replace_partition(&mut client, &native, &write(&partition, &rows, i + 1)).await?;
        if i > 0 {
            replace_native.push(started.elapsed());
        }
    }
    let all = merge_keys(&rows);
    let mut merge_all = Vec::new();
    for i in 1..=repeat as u64 {
        let started = Instant::now();
        let merged = target::merge_partition(
            &mut client,
            &plain,
            &write(&partition, &rows, 100 + i),
            &all,
        )
        .await?;
        anyhow::ensure!(merged.is_some(), "the merge was refused");
        merge_all.push(started.elapsed());
    }
    let some = merge_keys(&hundredth);
    let mut merge_some = Vec::new();
    for i in 1..=repeat as u64 {
        let started = Instant::now();
        let merged = target::merge_partition(
            &mut client,
            &plain,
            &write(&partition, &hundredth, 200 + i),
            &some,
        )
        .await?;
        anyhow::ensure!(merged.is_some(), "the merge was refused");
        merge_some.push(started.elapsed());
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM analytics.rewrite_plain", &[])
        .await?
        .get(0);
    anyhow::ensure!(
        count as u64 == args.writer_rows,
        "the plain table holds {count} rows after the rewrites, expected {}",
        args.writer_rows
    );

    let n = args.writer_rows as f64;
    let base = median(&copy).as_secs_f64();
    writeln!(
        out,
        "\n## Partition writers\n\n\
         One partition of {} orders (one day), rewritten {repeat} times each after one \
         untimed write; the median is reported, every run's seconds are listed. The raw \
         binary COPY writes the same rows into an empty table of the same shape (TRUNCATEd \
         before each run). Merges run on the plain table, on top of the replace's lineage. \
         1-minute load average at the start: {load}.\n\n\
         | write | rows written | median | rows/s | time / raw COPY | runs (s) |\n\
         |---|---:|---:|---:|---:|---|",
        args.writer_rows
    )?;
    let line = |out: &mut String, name: &str, rows: f64, times: &[Duration]| {
        let m = median(times).as_secs_f64();
        writeln!(
            out,
            "| {name} | {rows:.0} | {m:.3} s | {:.0} | {:.2} | {} |",
            rows / m,
            m / base,
            seconds_list(times)
        )
    };
    line(out, "raw binary COPY (baseline)", n, &copy)?;
    line(
        out,
        "replace, plain table (DELETE + COPY)",
        n,
        &replace_plain,
    )?;
    line(
        out,
        "replace, native partitions (DELETE via the parent + COPY)",
        n,
        &replace_native,
    )?;
    line(out, "merge, every key changed", n, &merge_all)?;
    line(
        out,
        "merge, 1% of the keys changed",
        hundredth.len() as f64,
        &merge_some,
    )?;

    // (2) The hot partition.
    writeln!(
        out,
        "\nWrite amplification of a hot partition: {} orders in one day, then {} updates/s \
         to random orders of it for {} s while `run` tails the feed (parallelism 2); rows \
         written per changed row, as `run` reports it.\n\n\
         | write mode | flush interval | changes | partition writes | rows written | rows written per changed row |\n\
         |---|---:|---:|---:|---:|---:|",
        args.hot_rows, args.hot_rate, args.hot_seconds
    )?;
    for mode in ["replace", "merge", "auto"] {
        for flush in FLUSH_MS {
            let report = hot_partition(pg, args, mode, flush).await?;
            writeln!(
                out,
                "| {mode} | {flush} ms | {} | {} | {} | {:.2} |",
                report.changes,
                report.partitions_written,
                report.rows_written,
                report.rows_written as f64 / report.changes.max(1) as f64
            )?;
        }
    }
    Ok(())
}

/// One live run over a hot partition; the report of the updates' period.
async fn hot_partition(
    pg: &LocalPg,
    args: &Args,
    mode: &str,
    flush_ms: u64,
) -> anyhow::Result<pipeline::RunReport> {
    let dir = tempfile::tempdir()?;
    let dsn = Dsn::new(
        pg.create_database(&format!("bench_hot_{mode}_{flush_ms}"))
            .await?,
    );
    let feed_path = dir.path().join("feed.jsonl");
    let config_path = dir.path().join("weir.toml");
    std::fs::write(
        &config_path,
        jsonl_config(
            "",
            &format!("parallelism = 2\nflush_interval_ms = {flush_ms}"),
            &OrdersTable::jsonl("analytics.fact_orders")
                .extra(&format!("write = \"{mode}\""))
                .to_string(),
        ),
    )?;
    let hot_day = day(0);
    let mut feed = String::new();
    for id in 1..=args.hot_rows {
        feed.push_str(&order_line('c', None, id, &hot_day, id % 10_000, "new"));
    }
    std::fs::write(&feed_path, feed)?;
    let config = Config::load(&config_path)?;
    pipeline::init(&config, &dsn).await?;
    Pipeline::open(config.clone(), dsn.clone())
        .await?
        .run(true, std::future::pending())
        .await?;

    // The updates, appended at a steady rate in 20 slices a second.
    let (rate, seconds, rows) = (args.hot_rate, args.hot_seconds, args.hot_rows);
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        let mut file = tokio::fs::OpenOptions::new()
            .append(true)
            .open(&feed_path)
            .await?;
        let mut seq = Sequence::new(29);
        let slices = seconds * 20;
        let started = Instant::now();
        for slice in 0..slices {
            let mut lines = String::new();
            for _ in 0..rate / 20 {
                let id = 1 + seq.below(rows);
                lines.push_str(&order_line(
                    'u',
                    None,
                    id,
                    &hot_day,
                    seq.below(1_000_000),
                    "paid",
                ));
            }
            file.write_all(lines.as_bytes()).await?;
            file.flush().await?;
            let next = Duration::from_millis(50 * (slice + 1));
            tokio::time::sleep(next.saturating_sub(started.elapsed())).await;
        }
        anyhow::Ok(())
    });
    let pipeline = Pipeline::open(config, dsn).await?;
    // Stop one flush interval after the last update, so that the last changes are written.
    let stop =
        tokio::time::sleep(Duration::from_secs(seconds) + Duration::from_millis(flush_ms * 2));
    let report = pipeline.run(false, stop).await?;
    writer.await??;
    Ok(report)
}
