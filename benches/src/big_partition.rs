//! Section 9: one partition of `--big-rows` rows (grain `month`, about 200 bytes of row
//! data each), written by the `weir` binary through the identity and through the Rust
//! orders plugin: `run --once` (stage and replace), `backfill` (replace alone),
//! `verify`, a merge of every key (`run --once` after an update of each row), and a
//! merge of a few keys (`run --once` after an update of `SMALL_MERGE_ROWS` rows). Each
//! command's peak RSS (its own `… ended` log line) against the config's memory budget
//! (`weir status --json`), and rows/s against one raw binary COPY of the same final
//! rows into an empty table of the same shape.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::{SinkExt, StreamExt, pin_mut};
use weir::localpg::LocalPg;
use weir_core::fixtures::{OrdersTable, jsonl_config};

use crate::Args;
use crate::cluster::connect;
use crate::measure::load_average;

/// The month all rows are in.
const MONTH: &str = "2026-03";
/// The rows the small merge updates.
const SMALL_MERGE_ROWS: u64 = 100;

/// One timed command: wall time and the peak RSS it logged.
#[derive(Debug, Clone)]
struct Timed {
    what: String,
    time: Duration,
    peak_kib: u64,
    /// The rows the command wrote (its rows/s).
    rows: u64,
}

/// The feed: `rows` inserts in one month (`status` "new"), or an update of each to
/// `status`; about 200 bytes of values a row (a 150-byte customer text).
fn write_feed(path: &Path, rows: u64, status: &str, append: bool) -> anyhow::Result<u64> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let pad = "x".repeat(140);
    let op = if status == "new" { "c" } else { "u" };
    for id in 1..=rows {
        let day = 1 + id % 28;
        writeln!(
            out,
            "{{\"op\":\"{op}\",\"before\":null,\"after\":{{\"id\":{id},\"customer\":\"c{:06}-{pad}\",\"order_date\":\"{MONTH}-{day:02}\",\"amount\":\"{}.{:02}\",\"status\":\"{status}\"}},\"source\":{{\"schema\":\"public\",\"table\":\"orders\",\"txId\":{}}}}}",
            id % 100_000,
            (id * 7919) % 100_000,
            id % 100,
            id / 1000
        )?;
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Runs `weir --config CONFIG --log-format json ARGS…` to success; its time and the
/// peak RSS its `ended` line reports.
fn weir(
    weir: &Path,
    dir: &Path,
    dsn: &str,
    args: &[&str],
    ended: &str,
    rows: u64,
) -> anyhow::Result<Timed> {
    let started = Instant::now();
    let out = Command::new(weir)
        .arg("--config")
        .arg(dir.join("weir.toml"))
        .args(["--log-format", "json"])
        .args(args)
        .env("WEIR_TARGET_DSN", dsn)
        .env("RUST_LOG", "info")
        .output()?;
    let time = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(
        out.status.success(),
        "weir {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        stderr.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    let peak_kib = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|j| j["fields"]["message"] == ended)
        .and_then(|j| j["fields"]["peak_rss_kib"].as_u64())
        .with_context(|| format!("no `{ended}` line from weir {args:?}"))?;
    Ok(Timed {
        what: args.join(" "),
        time,
        peak_kib,
        rows,
    })
}

/// Section 9. Returns the worst peak RSS / budget, and the identity backfill's rows/s
/// over the COPY's.
pub(crate) async fn big_partition(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<(f64, f64)> {
    anyhow::ensure!(args.big_rows > 0, "--big-rows must be at least 1");
    let load = load_average();
    let weir_bin = crate::cluster::weir_binary()?;
    let plugins_dir = args
        .plugins_dir
        .clone()
        .unwrap_or_else(crate::plugins::default_plugins_dir);
    let plugin = std::fs::canonicalize(plugins_dir.join("orders-rust.wasm"))
        .context("orders-rust.wasm (scripts/build-plugins makes it)")?;
    let dir = tempfile::tempdir()?;
    let rows = args.big_rows;
    let mut feed_bytes = 0;
    // The identity's final rows as binary COPY data, for the baseline.
    let copy_data = dir.path().join("copy.bin");
    let window = [
        "--table",
        "public.orders",
        "--from",
        MONTH,
        "--to",
        "2026-04",
    ];

    let mut lines = Vec::new();
    let mut worst = 0f64;
    let mut budgets = Vec::new();
    let mut identity_backfill = Duration::ZERO;
    for (label, extra) in [
        ("identity", String::new()),
        (
            "Rust orders plugin",
            format!(
                "plugin = \"{}\"\n[table.plugin_config]\nrate = \"1.1\"",
                plugin.display()
            ),
        ),
    ] {
        // A fresh stage and target for each transform, from the same feed.
        let run_dir = dir.path().join(label.replace(' ', "-"));
        std::fs::create_dir_all(&run_dir)?;
        feed_bytes = write_feed(&run_dir.join("feed.jsonl"), rows, "new", false)?;
        let db = format!(
            "bench_big_{}",
            label.split(' ').next().unwrap_or("t").to_lowercase()
        );
        let dsn = pg.create_database(&db).await?;
        let table = OrdersTable::jsonl("analytics.orders")
            .grain("month")
            .extra(&format!("write = \"merge\"\n{extra}"));
        std::fs::write(
            run_dir.join("weir.toml"),
            jsonl_config("", "parallelism = 2", &table.to_string()),
        )?;
        let status = Command::new(&weir_bin)
            .arg("--config")
            .arg(run_dir.join("weir.toml"))
            .arg("init")
            .env("WEIR_TARGET_DSN", &dsn)
            .output()?;
        anyhow::ensure!(
            status.status.success(),
            "weir init: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        let budget_out = Command::new(&weir_bin)
            .arg("--config")
            .arg(run_dir.join("weir.toml"))
            .args(["status", "--json"])
            .env("WEIR_TARGET_DSN", &dsn)
            .output()?;
        let status: serde_json::Value =
            serde_json::from_slice(&budget_out.stdout).context("weir status --json")?;
        let budget_kib = status["memory_budget"]["total"]
            .as_u64()
            .context("budget")?
            >> 10;
        budgets.push((label, budget_kib, status["memory_budget"].clone()));
        let mut timed = vec![weir(
            &weir_bin,
            &run_dir,
            &dsn,
            &["run", "--once"],
            "run ended",
            rows,
        )?];
        let backfill = weir(
            &weir_bin,
            &run_dir,
            &dsn,
            &[&["backfill"][..], &window, &["--parallel", "1"]].concat(),
            "backfill ended",
            rows,
        )?;
        if label == "identity" {
            identity_backfill = backfill.time;
        }
        timed.push(backfill);
        timed.push(weir(
            &weir_bin,
            &run_dir,
            &dsn,
            &[&["verify"][..], &window, &["--parallel", "1"]].concat(),
            "verify ended",
            rows,
        )?);
        write_feed(&run_dir.join("feed.jsonl"), rows, "paid", true)?;
        let once = ["run", "--once"];
        let mut merge = weir(&weir_bin, &run_dir, &dsn, &once, "run ended", rows)?;
        merge.what = "run --once (an update of every row, merged)".into();
        timed.push(merge);
        let client = connect(&dsn).await?;
        let (n, mode) = merged(&client, "paid").await?;
        anyhow::ensure!(n as u64 == rows, "{label}: {n} rows merged, want {rows}");
        anyhow::ensure!(mode == "merge", "{label}: lineage says {mode}, not merge");
        // A few rows changed in the big partition: a merge of those keys alone.
        let few = SMALL_MERGE_ROWS.min(rows);
        write_feed(&run_dir.join("feed.jsonl"), few, "shipped", true)?;
        let mut small = weir(&weir_bin, &run_dir, &dsn, &once, "run ended", few)?;
        small.what = format!("run --once (an update of {few} rows, merged)");
        timed.push(small);
        let (n, mode) = merged(&client, "shipped").await?;
        anyhow::ensure!(n as u64 == few, "{label}: {n} rows shipped, want {few}");
        anyhow::ensure!(mode == "merge", "{label}: lineage says {mode}, not merge");
        for t in &timed {
            worst = worst.max(t.peak_kib as f64 / budget_kib as f64);
            lines.push((label, t.clone(), budget_kib));
        }
        if label == "identity" {
            read_out(&client, &copy_data).await?;
        }
        std::fs::remove_dir_all(&run_dir)?;
    }

    // The baseline: the identity's final rows (read out untimed above), in one COPY
    // into an empty table of the same shape.
    let copy = copy_baseline(pg, &copy_data, rows).await?;
    let copy_rate = rows as f64 / copy.as_secs_f64();
    let backfill_rate = rows as f64 / identity_backfill.as_secs_f64();

    writeln!(out, "\n## One partition of {rows} rows: memory and rate")?;
    writeln!(
        out,
        "\nOne month partition (`grain = \"month\"`) of {rows} orders, about 200 bytes of values each ({:.0} MB of Debezium JSON lines), into a fresh stage and target for each transform, by the release `weir` binary with `parallelism = 2` and `write = \"merge\"`. `run --once` stages the feed and writes the partition (a first write replaces); `backfill` replaces it again from the stage (one job); `verify` computes it twice and reads the target back; the merge is `run --once` after an update of every row (every key changed: the keys are COPYed into a temporary table and their rows deleted by one `DELETE … USING` it, then the new rows copied); the small merge is `run --once` after an update of {SMALL_MERGE_ROWS} rows (their rows/s counts those rows: the time is what a small change to a big partition costs, a process start, opening the stage and the plugin, and the write). Peak RSS is each command's own `VmHWM`, from its `… ended` log line; the budget is what `weir status` states for the config. Baseline: one binary COPY of the same {rows} final rows into an empty table of the same shape. Load average at the start: {load}.",
        feed_bytes as f64 / 1e6
    )?;
    for (label, budget_kib, parts) in &budgets {
        writeln!(
            out,
            "\nBudget with the {label}: {} MiB (stage {} MiB, {} jobs × {} MiB, intake {} MiB, process {} MiB).",
            budget_kib >> 10,
            parts["stage"].as_u64().unwrap_or(0) >> 20,
            parts["parallelism"].as_u64().unwrap_or(0),
            parts["job"].as_u64().unwrap_or(0) >> 20,
            parts["intake"].as_u64().unwrap_or(0) >> 20,
            parts["process"].as_u64().unwrap_or(0) >> 20,
        )?;
    }
    writeln!(
        out,
        "\n| transform | command | time (s) | rows/s | peak RSS (MiB) | budget (MiB) | peak / budget |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|")?;
    for (label, t, budget_kib) in &lines {
        writeln!(
            out,
            "| {label} | `{}` | {:.1} | {:.0} | {} | {} | {:.2} |",
            t.what,
            t.time.as_secs_f64(),
            t.rows as f64 / t.time.as_secs_f64(),
            t.peak_kib >> 10,
            budget_kib >> 10,
            t.peak_kib as f64 / *budget_kib as f64
        )?;
    }
    writeln!(
        out,
        "| raw binary COPY (limit) | one `COPY … FROM STDIN (FORMAT binary)` | {:.1} | {copy_rate:.0} | — | — | — |",
        copy.as_secs_f64()
    )?;
    writeln!(
        out,
        "\nWorst peak / budget: {worst:.2}. Backfill (identity) / raw COPY: {:.2} of the COPY's rate.",
        backfill_rate / copy_rate
    )?;
    Ok((worst, backfill_rate / copy_rate))
}

/// The rows whose status is `status` (as written, or upper-cased by the plugin), and
/// the write mode lineage records for the month.
async fn merged(client: &tokio_postgres::Client, status: &str) -> anyhow::Result<(i64, String)> {
    let r = client
        .query_one(
            "SELECT (SELECT count(*) FROM analytics.orders WHERE status IN ($1, upper($1))), \
             (SELECT write_mode FROM weir.partitions WHERE partition = $2)",
            &[&status, &MONTH],
        )
        .await?;
    Ok((r.get(0), r.get(1)))
}

/// The target's rows as binary COPY data, into `path` (untimed).
async fn read_out(client: &tokio_postgres::Client, path: &Path) -> anyhow::Result<()> {
    let stream = client
        .copy_out(
            "COPY analytics.orders (id, customer, order_date, amount, status) TO STDOUT (FORMAT binary)",
        )
        .await?;
    pin_mut!(stream);
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    while let Some(chunk) = stream.next().await {
        file.write_all(&chunk?)?;
    }
    file.flush()?;
    Ok(())
}

/// Times one COPY of the binary COPY data in `path` into an empty table of the
/// target's shape, in a database of its own.
async fn copy_baseline(pg: &LocalPg, path: &Path, rows: u64) -> anyhow::Result<Duration> {
    let dsn = pg.create_database("bench_big_copy").await?;
    let client = connect(&dsn).await?;
    client
        .batch_execute(
            "CREATE SCHEMA analytics; \
             CREATE TABLE analytics.orders_copy (id bigint, customer text, order_date date, amount numeric(12,2), status text)",
        )
        .await?;
    let started = Instant::now();
    let sink = client
        .copy_in("COPY analytics.orders_copy FROM STDIN (FORMAT binary)")
        .await?;
    pin_mut!(sink);
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)?;
        if n == 0 {
            break;
        }
        sink.send(bytes::Bytes::copy_from_slice(&buf[..n])).await?;
    }
    let copied = sink.finish().await?;
    let time = started.elapsed();
    anyhow::ensure!(copied == rows, "COPY took {copied} rows, want {rows}");
    Ok(time)
}
