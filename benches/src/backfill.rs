//! Section 6: a window of partitions rebuilt by `weir::backfill`, with 1, 2 and 4
//! partition jobs at once, against one raw binary COPY of the same final rows.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use weir::backfill::{self, Scope};
use weir::config::{Config, Dsn};
use weir::localpg::LocalPg;
use weir::pipeline::{self, Pipeline};
use weir_core::fixtures::{OrdersTable, jsonl_config};

use crate::Args;
use crate::cluster::connect;
use crate::measure::{load_average, median, seconds_list};
use crate::orders::{copy_orders, day, orders_feed};

/// Partition jobs at once, one backfill each per repetition.
const PARALLEL: [usize; 3] = [1, 2, 4];
/// The source table backfilled.
const TABLE: &str = "public.orders";
/// Its target, written by the pipeline.
const TARGET: &str = "analytics.fact_orders";
/// The COPY baseline's table: empty, of the target's shape, in the same database.
const COPY_TABLE: &str = "analytics.fact_orders_copy";

/// One timed backfill.
#[derive(Debug, Clone, Copy)]
struct Run {
    time: Duration,
    rows: u64,
    partitions: usize,
}

/// Rows of `table`.
async fn count(client: &tokio_postgres::Client, table: &str) -> anyhow::Result<u64> {
    let n: i64 = client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await?
        .get(0);
    Ok(n as u64)
}

/// Section 6: backfill rate by parallelism, against raw binary COPY.
/// Returns the fastest parallelism, its rows/s and the COPY's rows/s.
pub(crate) async fn backfill(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<(usize, f64, f64)> {
    anyhow::ensure!(args.backfill_rows > 0, "--backfill-rows must be at least 1");
    anyhow::ensure!(args.backfill_days > 0, "--backfill-days must be at least 1");
    let repeat = args.repeat.max(1);
    // Other processes share this machine: say how busy it was.
    let load = load_average();

    // Setup, untimed: the end-to-end feed, staged and written once by `run --once`.
    let (feed, rows) = orders_feed(args.backfill_rows, args.backfill_days)?;
    let feed_mb = feed.len() as f64 / 1e6;
    let dsn = Dsn::new(pg.create_database("bench_backfill").await?);
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("feed.jsonl"), &feed)?;
    drop(feed);
    let config_path = dir.path().join("weir.toml");
    // The demo's config (JSON lines, `public.orders` → `analytics.fact_orders` by day,
    // identity transform), with as many target connections as the most jobs at once,
    // so that no job connects on the clock.
    let connections = PARALLEL.iter().copied().max().unwrap_or(1);
    std::fs::write(
        &config_path,
        jsonl_config(
            "",
            &format!("parallelism = {connections}"),
            &OrdersTable::jsonl(TARGET).to_string(),
        ),
    )?;
    let config = Config::load(&config_path)?;
    pipeline::init(&config, &dsn).await?;
    let setup_started = Instant::now();
    {
        let pipeline = Pipeline::open(config.clone(), dsn.clone()).await?;
        let run = pipeline.run(true, std::future::pending()).await?;
        anyhow::ensure!(
            run.rows_written == args.backfill_rows,
            "run --once wrote {} rows, expected {}",
            run.rows_written,
            args.backfill_rows
        );
    }
    let setup_time = setup_started.elapsed();
    let target = connect(dsn.expose()).await?;
    target
        .batch_execute(&format!(
            "CREATE TABLE {COPY_TABLE} (LIKE {TARGET} INCLUDING ALL)"
        ))
        .await?;
    println!(
        "backfill setup: {} orders over {} days staged and written in {setup_time:?}",
        args.backfill_rows, args.backfill_days
    );

    let scope = Scope::Window {
        from: day(0),
        to: day(args.backfill_days),
    };
    let mut runs: Vec<Vec<Run>> = vec![Vec::with_capacity(repeat); PARALLEL.len()];
    let mut copy_times = Vec::with_capacity(repeat);
    let mut planned = 0;
    for i in 0..repeat {
        for (p, &parallel) in PARALLEL.iter().enumerate() {
            // The previous run's deleted rows vacuumed away and its writes checkpointed,
            // outside the clock, so every run starts from the same table and neither an
            // autovacuum nor a checkpoint of an earlier run's WAL runs meanwhile.
            // (One statement each: a multi-statement query is one transaction, which
            // VACUUM refuses.)
            target
                .batch_execute(&format!("VACUUM ANALYZE {TARGET}"))
                .await?;
            target.batch_execute("CHECKPOINT").await?;
            let pipeline = Pipeline::open_read_only(config.clone(), dsn.clone()).await?;
            let entries = backfill::plan(&pipeline, TABLE, &scope, false).await?;
            planned = entries.len();
            let staged: u64 = entries.iter().map(|e| e.staged_rows).sum();
            anyhow::ensure!(
                staged == args.backfill_rows,
                "the window holds {staged} staged rows, expected {}",
                args.backfill_rows
            );
            let started = Instant::now();
            let report = backfill::backfill(
                &pipeline,
                &scope,
                entries,
                parallel,
                true,
                &|_| {},
                std::future::pending(),
            )
            .await?;
            let time = started.elapsed();
            drop(pipeline);
            anyhow::ensure!(
                report.failed.is_empty(),
                "backfill (parallel {parallel}) failed partitions: {:?}",
                report.failed
            );
            anyhow::ensure!(
                report.superseded.is_empty(),
                "backfill (parallel {parallel}) left superseded partitions: {:?}",
                report.superseded
            );
            anyhow::ensure!(
                !report.interrupted
                    && report.already_done == 0
                    && report.planned == planned
                    && report.written.len() == planned,
                "backfill (parallel {parallel}) wrote {} of {planned} planned partitions ({} already done)",
                report.written.len(),
                report.already_done
            );
            anyhow::ensure!(
                report.rows == staged,
                "backfill (parallel {parallel}) wrote {} rows, {staged} staged",
                report.rows
            );
            let in_target = count(&target, TARGET).await?;
            anyhow::ensure!(
                in_target == staged,
                "the target holds {in_target} rows after the backfill, {staged} staged"
            );
            println!(
                "backfill, run {}, parallel {parallel}: {} partitions, {} rows in {time:?}",
                i + 1,
                report.written.len(),
                report.rows
            );
            runs[p].push(Run {
                time,
                rows: report.rows,
                partitions: report.written.len(),
            });
        }
        target
            .batch_execute(&format!("TRUNCATE {COPY_TABLE}; CHECKPOINT"))
            .await?;
        let copy = copy_orders(&target, COPY_TABLE, &rows).await?;
        anyhow::ensure!(
            count(&target, COPY_TABLE).await? == args.backfill_rows,
            "the COPY table does not hold the {} rows",
            args.backfill_rows
        );
        println!("backfill, run {}: raw binary COPY {copy:?}", i + 1);
        copy_times.push(copy);
    }

    let copy = median(&copy_times);
    let copy_rate = args.backfill_rows as f64 / copy.as_secs_f64();
    writeln!(
        out,
        "\n## Backfill: rebuilding a window of partitions, by parallelism, against raw binary COPY\n"
    )?;
    writeln!(
        out,
        "Setup (untimed): the end-to-end section's feed, {} orders (one insert each, transactions of 8 lines) over {} days \
         ({feed_mb:.1} MB of Debezium JSON lines), staged and written once by `run --once` (the demo's config: \
         `public.orders` → `analytics.fact_orders` by day, identity transform, `engine.parallelism = {connections}`), \
         {:.1} s. Then the whole window `[{}, {})`, {planned} day partitions, rebuilt with `weir::backfill` as \
         `weir backfill --table public.orders --from {} --to {} --parallel N` does, with 1, 2 and 4 partition jobs at once, one after \
         another, {repeat} times each; then one raw binary COPY of the same {} final rows into an empty table of the \
         same shape (`CREATE TABLE … (LIKE analytics.fact_orders INCLUDING ALL)`: the index on `order_date` too) \
         in the same database, one COPY in one transaction (the end-to-end section's COPY baseline). Median of \
         {repeat} runs; the 1-minute load average when this section began was {load} (other processes share the \
         machine).\n",
        args.backfill_rows,
        args.backfill_days,
        setup_time.as_secs_f64(),
        day(0),
        day(args.backfill_days),
        day(0),
        day(args.backfill_days),
        args.backfill_rows,
    )?;
    writeln!(
        out,
        "| parallel | time (s) | rows/s | partitions/s | rate / COPY |\n|---|---:|---:|---:|---:|"
    )?;
    let mut medians = Vec::with_capacity(PARALLEL.len());
    for (p, &parallel) in PARALLEL.iter().enumerate() {
        let times: Vec<Duration> = runs[p].iter().map(|r| r.time).collect();
        let time = median(&times);
        let run = runs[p]
            .iter()
            .find(|r| r.time == time)
            .copied()
            .unwrap_or(Run {
                time,
                rows: args.backfill_rows,
                partitions: planned,
            });
        let rate = run.rows as f64 / time.as_secs_f64();
        medians.push(rate);
        writeln!(
            out,
            "| {parallel} | {:.2} | {rate:.0} | {:.1} | {:.2} |",
            time.as_secs_f64(),
            run.partitions as f64 / time.as_secs_f64(),
            rate / copy_rate
        )?;
    }
    writeln!(
        out,
        "| raw binary COPY (baseline) | {:.2} | {copy_rate:.0} | — | 1.00 |",
        copy.as_secs_f64()
    )?;
    let speedup = |p: usize| medians.get(p).copied().unwrap_or_default() / medians[0];
    let per_parallel = PARALLEL
        .iter()
        .enumerate()
        .map(|(p, n)| {
            let times: Vec<Duration> = runs[p].iter().map(|r| r.time).collect();
            format!("parallel {n} {}", seconds_list(&times))
        })
        .collect::<Vec<_>>()
        .join("; ");
    writeln!(
        out,
        "\nRate over parallel 1: {:.2} with 2 jobs, {:.2} with 4. All runs (s): {per_parallel}; COPY {}.\n",
        speedup(1),
        speedup(2),
        seconds_list(&copy_times)
    )?;
    writeln!(
        out,
        "What is timed: `weir::backfill::backfill` from its call to its return, in this process, after \
         `Pipeline::open_read_only` (the stage opened read-only, {connections} target connections) and \
         `weir::backfill::plan` (the stage's partition list and the target's lineage), which are not timed. On the \
         clock: recording the window in `weir.backfills` (a new connection, one `INSERT … ON CONFLICT`), then for \
         each partition, N at once: its rows read from the stage (RocksDB), the identity transform, and one target \
         transaction: the partition's advisory lock, the lineage check (a read-only backfill leaves a partition \
         written from a newer stage generation alone), `DELETE` of the partition's rows, binary COPY of its rows, \
         its rejections cleared from `weir.dead_letter`, the lineage upsert in `weir.partitions` (with an \
         order-independent SHA-256 checksum of the rows), commit; last, marking the window finished. A finished \
         window's next backfill starts from scratch, so every run rewrites every partition. Checked after each \
         run: all {planned} planned partitions written (none failed, superseded or already done), as many rows \
         written as staged, and the target holds exactly the staged rows. Before each run, outside the clock, \
         `{TARGET}` was vacuumed (`VACUUM ANALYZE`: the previous run's deleted rows cleared) and a `CHECKPOINT` \
         taken; before each COPY the COPY table was truncated and a `CHECKPOINT` taken. The COPY baseline writes into an empty table and deletes nothing; the \
         backfill first deletes as many rows as it then copies."
    )?;
    let (best, rate) = medians
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or((0, 0.0), |(p, r)| (PARALLEL[p], *r));
    Ok((best, rate, copy_rate))
}
