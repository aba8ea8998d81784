//! Section 10: the initial load of a table that already holds `--load-rows` orders
//! (`--load-days` day partitions), by the release `weir` binary (`weir init`, then
//! `weir run --once`: the first load from an exported snapshot, then the partitions
//! written), against the same rows piped between two databases of the cluster by
//! binary COPY (the limit) and a native subscription's table synchronisation (the
//! peer). The watermark snapshot (`snapshot_method = "watermarks"`, the only method
//! before the exported one) is measured too. Each path runs once, one after the other,
//! on the same source table.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::localpg::LocalPg;
use weir_core::fixtures::{OrdersTable, postgres_config_with};

use crate::Args;
use crate::cluster::{SOURCE_DSN_ENV, TARGET_DSN_ENV, connect};
use crate::measure::load_average;

/// The source table, the same in every database.
const TABLE: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text)";

/// One Weir run: wall time of `run --once`, the first load's part of it, peak RSS and
/// the stage's size after it.
#[derive(Debug)]
struct WeirRun {
    time: Duration,
    /// `weir resync --table public.orders` (a whole table) then `run --once`: its time.
    resync: Duration,
    staged: Option<Duration>,
    peak_kib: u64,
    stage_bytes: u64,
}

/// Section 10. Returns the rows/s of Weir (export), the COPY pipe and the subscription.
pub(crate) async fn initial_load(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<(f64, f64, f64)> {
    let rows = args.load_rows;
    let days = args.load_days.max(1);
    anyhow::ensure!(rows > 0, "--load-rows must be at least 1");
    let load = load_average();
    let source_dsn = pg.create_database("bench_load_source").await?;
    let source = connect(&source_dsn).await?;
    source
        .batch_execute(&format!(
            "{TABLE}; INSERT INTO orders SELECT g, 'customer-' || (g % 99991), DATE '2026-01-01' + (g * {days} / ({rows} + 1)), (g % 1000000) / 100.0, 'new' FROM generate_series(1, {rows}) g"
        ))
        .await
        .context("fill the source table")?;
    // VACUUM and CHECKPOINT cannot run in the implicit transaction of one batch.
    for sql in ["VACUUM ANALYZE orders", "CHECKPOINT"] {
        source
            .batch_execute(sql)
            .await
            .with_context(|| sql.to_owned())?;
    }
    let table_bytes: i64 = source
        .query_one("SELECT pg_table_size('orders')", &[])
        .await?
        .get(0);
    let sum = |client: tokio_postgres::Client, table: &'static str| async move {
        let row = client
            .query_one(
                &format!("SELECT count(*), coalesce(sum(id), 0)::text, coalesce(sum(amount), 0)::text FROM {table}"),
                &[],
            )
            .await?;
        Ok::<_, anyhow::Error>((
            row.get::<_, i64>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2),
        ))
    };
    let want = sum(connect(&source_dsn).await?, "orders").await?;

    // The limit: binary COPY out of the source, piped into an empty table.
    let copy_dsn = pg.create_database("bench_load_copy").await?;
    connect(&copy_dsn)
        .await?
        .batch_execute(TABLE)
        .await
        .context("create the COPY pipe's table")?;
    let psql = pg.bin_dir().join("psql");
    let started = Instant::now();
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{psql}' -X -q -d '{source_dsn}' -c 'COPY orders TO STDOUT (FORMAT binary)' | '{psql}' -X -q -d '{copy_dsn}' -c 'COPY orders FROM STDIN (FORMAT binary)'",
            psql = psql.display()
        ))
        .status()
        .context("run the COPY pipe")?;
    let copy_time = started.elapsed();
    anyhow::ensure!(status.success(), "the COPY pipe failed");
    anyhow::ensure!(
        sum(connect(&copy_dsn).await?, "orders").await? == want,
        "the COPY pipe's table differs from the source"
    );

    // The peer: a subscription's table synchronisation.
    let sub_dsn = pg.create_database("bench_load_sub").await?;
    let sub = connect(&sub_dsn).await?;
    sub.batch_execute(TABLE)
        .await
        .context("create the subscriber's table")?;
    source
        .batch_execute("CREATE PUBLICATION bench_load_sub_pub FOR TABLE orders")
        .await
        .context("create the subscription's publication")?;
    // In one cluster the slot is made apart: a CREATE SUBSCRIPTION making it would wait
    // for its own transaction to end. Timed from the slot's creation.
    let started = Instant::now();
    source
        .batch_execute("SELECT pg_create_logical_replication_slot('bench_load_sub', 'pgoutput')")
        .await
        .context("create the subscription's slot")?;
    sub.batch_execute(&format!(
        "CREATE SUBSCRIPTION bench_load_sub CONNECTION '{source_dsn}' PUBLICATION bench_load_sub_pub WITH (copy_data = true, create_slot = false, slot_name = 'bench_load_sub')"
    ))
    .await
    .context("create the subscription")?;
    loop {
        let pending: i64 = sub
            .query_one(
                "SELECT count(*) FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')",
                &[],
            )
            .await?
            .get(0);
        if pending == 0 {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(3600),
            "the subscription's table sync did not end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sub_time = started.elapsed();
    anyhow::ensure!(
        sum(connect(&sub_dsn).await?, "orders").await? == want,
        "the subscriber's table differs from the source"
    );
    for sql in [
        "ALTER SUBSCRIPTION bench_load_sub DISABLE",
        "ALTER SUBSCRIPTION bench_load_sub SET (slot_name = NONE)",
        "DROP SUBSCRIPTION bench_load_sub",
    ] {
        sub.batch_execute(sql)
            .await
            .with_context(|| sql.to_owned())?;
    }
    source
        .batch_execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'bench_load_sub%'")
        .await?;

    // Weir, by each snapshot method, into a fresh stage and target database.
    let weir_bin = crate::cluster::weir_binary()?;
    let mut runs = Vec::new();
    for (method, parallelism) in [("export", 2usize), ("watermarks", 1)] {
        let target_dsn = pg.create_database(&format!("bench_load_{method}")).await?;
        let dir = tempfile::tempdir()?;
        let table = OrdersTable::postgres("analytics.orders")
            .source("public.orders")
            .to_string();
        std::fs::write(
            dir.path().join("weir.toml"),
            postgres_config_with(
                SOURCE_DSN_ENV,
                TARGET_DSN_ENV,
                &format!("bench_load_{method}"),
                &format!("bench_load_{method}"),
                &format!(
                    "snapshot_method = \"{method}\"\nsnapshot_parallelism = {parallelism}\nsnapshot_chunk_rows = 20000"
                ),
                &table,
            ),
        )?;
        weir(&weir_bin, dir.path(), &source_dsn, &target_dsn, &["init"])?;
        let (time, log) = weir(
            &weir_bin,
            dir.path(),
            &source_dsn,
            &target_dsn,
            &["run", "--once"],
        )?;
        let json: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let field = |message: &str, name: &str| {
            json.iter()
                .find(|j| j["fields"]["message"] == message)
                .and_then(|j| j["fields"][name].as_u64())
        };
        let peak_kib = field("run ended", "peak_rss_kib").context("no `run ended` line")?;
        let staged = field("first load staged", "elapsed_ms").map(Duration::from_millis);
        let stage_bytes = weir::stage::checkpoint::dir_size(&dir.path().join("stage"))?;
        anyhow::ensure!(
            sum(connect(&target_dsn).await?, "analytics.orders").await? == want,
            "Weir's target ({method}) differs from the source"
        );
        // The whole table read again beside the stream, between watermarks, and its
        // partitions rewritten.
        weir(
            &weir_bin,
            dir.path(),
            &source_dsn,
            &target_dsn,
            &["resync", "--table", "public.orders"],
        )?;
        let (resync, _) = weir(
            &weir_bin,
            dir.path(),
            &source_dsn,
            &target_dsn,
            &["run", "--once"],
        )?;
        anyhow::ensure!(
            sum(connect(&target_dsn).await?, "analytics.orders").await? == want,
            "Weir's target ({method}) differs from the source after a resync"
        );
        source
            .batch_execute(&format!(
                "SELECT pg_drop_replication_slot('bench_load_{method}')"
            ))
            .await
            .context("drop Weir's slot")?;
        runs.push((
            method,
            WeirRun {
                time,
                resync,
                staged,
                peak_kib,
                stage_bytes,
            },
        ));
    }

    let rate = |t: Duration| rows as f64 / t.as_secs_f64();
    let (copy_rate, sub_rate) = (rate(copy_time), rate(sub_time));
    let export = &runs.first().context("the export run")?.1;
    writeln!(
        out,
        "\n## Initial load: a populated table into partitions, against a binary COPY pipe and a subscription's table sync\n"
    )?;
    writeln!(
        out,
        "A source table of {rows} orders (id bigint primary key, customer text, order_date date, amount numeric(12,2), status text; {:.0} MB, vacuumed and analyzed) over {days} days. Weir: the release binary, `weir init` (untimed) then `weir run --once`, identity transform, day partitions, 2 partition jobs: with `snapshot_method = \"export\"` (the default) a temporary slot exports a snapshot, `snapshot_parallelism = 2` connections read ranges of pages from it by binary COPY, each part of a range (up to 20000 rows) sorted and ingested into the stage as table files, with the load's progress, then the {days} partitions are replaced; `\"watermarks\"` is the chunked read between watermarks (one connection, `snapshot_chunk_rows = 20000`), the only method before. Limit: `psql -c 'COPY orders TO STDOUT (FORMAT binary)' | psql -c 'COPY orders FROM STDIN (FORMAT binary)'` into an empty table (with its primary key) in another database of the same cluster. Peer: a native subscription into an empty table (with its primary key): its slot made with `pg_create_logical_replication_slot` (in one cluster, `CREATE SUBSCRIPTION` cannot make it), then `CREATE SUBSCRIPTION … WITH (copy_data = true, create_slot = false)`, timed from the slot's creation until the table is synchronised (polled every 50 ms). Then, for each, `weir resync --table public.orders` (the whole table read again between watermarks beside the stream: by ranges of pages on `snapshot_parallelism` connections at once) and `weir run --once` timed, which reads it and rewrites the partitions. Each checked: row count, sum of ids and sum of amounts equal the source's. One run each. Load average at the start: {load}.\n",
        table_bytes as f64 / 1e6
    )?;
    writeln!(
        out,
        "| path | time (s) | rows/s | of which the first load (s) | peak RSS (MiB) | stage (MB) | resync of the table (s) | resync rows/s |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for (method, run) in &runs {
        writeln!(
            out,
            "| Weir `run --once`, `snapshot_method = \"{method}\"` | {:.1} | {:.0} | {} | {} | {:.0} | {:.1} | {:.0} |",
            run.time.as_secs_f64(),
            rate(run.time),
            run.staged
                .map_or("—".to_owned(), |s| format!("{:.1}", s.as_secs_f64())),
            run.peak_kib >> 10,
            run.stage_bytes as f64 / 1e6,
            run.resync.as_secs_f64(),
            rate(run.resync)
        )?;
    }
    writeln!(
        out,
        "| binary COPY pipe (limit) | {:.1} | {copy_rate:.0} | — | — | — | — | — |",
        copy_time.as_secs_f64()
    )?;
    writeln!(
        out,
        "| subscription table sync (peer) | {:.1} | {sub_rate:.0} | — | — | — | — | — |",
        sub_time.as_secs_f64()
    )?;
    let (to_copy, to_sub) = (rate(export.time) / copy_rate, rate(export.time) / sub_rate);
    writeln!(
        out,
        "\nWeir (export) / COPY pipe: {to_copy:.2} of its rate; Weir (export) / subscription: {to_sub:.2}."
    )?;
    Ok((rate(export.time), copy_rate, sub_rate))
}

/// Runs `weir --config DIR/weir.toml --log-format json ARGS…` to success; its time and
/// its log.
fn weir(
    weir: &Path,
    dir: &Path,
    source_dsn: &str,
    target_dsn: &str,
    args: &[&str],
) -> anyhow::Result<(Duration, String)> {
    let started = Instant::now();
    let out = Command::new(weir)
        .arg("--config")
        .arg(dir.join("weir.toml"))
        .args(["--log-format", "json"])
        .args(args)
        .env(SOURCE_DSN_ENV, source_dsn)
        .env(TARGET_DSN_ENV, target_dsn)
        .env("RUST_LOG", "info")
        .output()?;
    let time = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "weir {args:?} failed:\n{}",
        stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    Ok((time, stderr))
}
