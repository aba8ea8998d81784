//! Section 8: streaming. PostgreSQL → a live `weir run` (the `weir` binary, the Rust
//! `orders` plugin) → PostgreSQL, against a native subscription (the peer) and the
//! limits of this machine:
//!
//! * latency: a writer commits the replication section's workload at a steady rate
//!   (`--stream-rate` transactions/s of 10 changes, for `--stream-seconds`); every row's
//!   time from its transaction's COMMIT returning to the row first visible in the target,
//!   recorded by a trigger on the target table; p50 and p99, for Weir and the peer;
//! * sustained rate: a backlog of `--stream-backlog` changes caught up by a live
//!   `weir run` with the plugin, by one without (identity: the plugin's overhead) and by
//!   the peer, each from its own slot made before the backlog; against `pg_recvlogical`
//!   on the same backlog (the decode limit) and one binary COPY of its final rows;
//! * recovery: `weir run` SIGKILLed `--recovery-kills` times while the steady workload
//!   runs, restarted after `--recovery-down-ms`; the time from the restart to the first
//!   new row visible and to every row committed before the restart visible.
//!
//! `consumers.rs` sets up what is measured (a Weir's config and `weir run`, the source
//! databases, the peer's subscription) and checks what it wrote; `latency.rs` holds the
//! steady writer and the latencies read from the targets' recorders. This file runs the
//! measurements and writes the section's report.

mod consumers;
mod latency;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::localpg::LocalPg;
use weir::value::Value;

use self::consumers::{
    WeirConsumer, caught_up, check_weir_target, drop_slot, drop_subscription, enable_subscription,
    live_consumer, slot_active, source_database, subscriber,
};
use self::latency::{Latency, latencies, now_us, seen_all, steady_writer};
use crate::Args;
use crate::cluster::{connect, recvlogical, slot_released};
use crate::measure::{cluster_cpu, load_average, median, seconds_list};
use crate::orders::{
    CHANGES_PER_TRANSACTION, REPL_DIGEST, copy_orders, digest, write_orders_workload,
};

/// The publication of every streaming source database.
const PUBLICATION: &str = "stream_pub";
/// The plugin's config: the exchange rate of `amount_eur`.
const RATE: &str = "1.0825";
/// Weir's target table.
const TARGET: &str = "analytics.fact_orders";
/// The digest of the plugin's output, in the columns it shares with the source (the
/// plugin upper-cases `status`); `amount_eur` is the plugin's own. Amounts are compared
/// at the source's scale.
const PLUGIN_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
     order_date, amount::numeric(12,2), status), ',' ORDER BY id), '')) FROM analytics.fact_orders";
const SOURCE_PLUGIN_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, \
     customer, order_date, amount::numeric(12,2), upper(status)), ',' ORDER BY id), '')) FROM orders";
/// How often a catching-up consumer is polled for the backlog's last row.
const POLL: Duration = Duration::from_millis(50);
/// Every wait of this section is bounded by this.
const WAIT_MAX: Duration = Duration::from_secs(300);

/// The figures of this section, for the summary at the top of the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    pub flush_ms: u64,
    pub offered_changes_per_s: f64,
    pub weir_latency: Latency,
    pub peer_latency: Latency,
    pub backlog_changes: u64,
    pub backlog_rows: i64,
    pub weir_plugin: Duration,
    pub weir_identity: Duration,
    pub peer: Duration,
    pub recvlogical: Duration,
    pub copy: Duration,
    /// Median of the restarts: to the first new row visible, to caught up.
    pub first_visible: Duration,
    pub caught_up: Duration,
    pub kills: usize,
}

impl Figures {
    pub fn rate(&self, d: Duration) -> f64 {
        self.backlog_changes as f64 / d.as_secs_f64()
    }
}

/// Section 8.
pub(crate) async fn streaming(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<Figures> {
    anyhow::ensure!(args.stream_rate > 0, "--stream-rate must be at least 1");
    let load = load_average();
    let weir = std::env::current_exe()?.with_file_name("weir");
    anyhow::ensure!(
        weir.exists(),
        "{} is missing: build it with `cargo build --release -p weir --bin weir` (scripts/bench does)",
        weir.display()
    );
    let plugins_dir = args
        .plugins_dir
        .clone()
        .unwrap_or_else(crate::plugins::default_plugins_dir);
    // Absolute: the config's paths are relative to its own folder.
    let plugin =
        std::fs::canonicalize(plugins_dir.join("orders-rust.wasm")).with_context(|| {
            format!(
                "{}/orders-rust.wasm is missing: scripts/build-plugins builds it",
                plugins_dir.display()
            )
        })?;
    let flush_ms = args.stream_flush_ms;
    let mut figures = Figures {
        flush_ms,
        kills: args.recovery_kills,
        ..Figures::default()
    };

    // -- Latency at a steady rate: Weir with the plugin, then the peer. --------------
    let (source, consumer, target, mut child) =
        live_consumer(&weir, pg, "stream_latency_weir", &plugin, flush_ms).await?;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(
        consumer.source_dsn.clone(),
        args.stream_rate,
        args.stream_seconds,
    )
    .await?;
    let surviving = written.surviving();
    let seen = seen_all(&target, &surviving).await?;
    let weir_server_cpu = cluster_cpu(pg)? - server;
    consumer.stop(&mut child).await?;
    let final_rows = check_weir_target(&source, &target, true).await?.0;
    drop_slot(&source, &consumer.slot).await?;
    figures.weir_latency = Latency::of(&mut latencies(&surviving, &seen));
    let txns = written.commit_us.len() as u64;
    figures.offered_changes_per_s =
        (txns * CHANGES_PER_TRANSACTION) as f64 / written.elapsed.as_secs_f64();
    let weir_writer = written.elapsed;
    println!(
        "streaming latency, Weir: {:?} over {} rows",
        figures.weir_latency, figures.weir_latency.rows
    );

    let source = source_database(pg, "stream_latency_peer").await?;
    let sub = subscriber(
        pg,
        &source,
        "stream_latency_peer",
        "stream_sub_latency",
        true,
    )
    .await?;
    enable_subscription(&sub, "stream_sub_latency").await?;
    slot_active(&source, "stream_sub_latency").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(
        pg.dsn("stream_latency_peer"),
        args.stream_rate,
        args.stream_seconds,
    )
    .await?;
    let surviving_peer = written.surviving();
    let seen = seen_all(&sub, &surviving_peer).await?;
    let peer_server_cpu = cluster_cpu(pg)? - server;
    anyhow::ensure!(
        digest(&sub, "orders").await? == digest(&source, "orders").await?,
        "the subscriber's table differs from the source's"
    );
    drop_subscription(&sub, &source, "stream_sub_latency").await?;
    figures.peer_latency = Latency::of(&mut latencies(&surviving_peer, &seen));
    println!("streaming latency, peer: {:?}", figures.peer_latency);

    // -- Recovery: SIGKILL and restart while the steady workload runs. ----------------
    let (source, mut consumer, target, mut child) =
        live_consumer(&weir, pg, "stream_recovery", &plugin, flush_ms).await?;
    let period = Duration::from_secs(args.recovery_period_s);
    let down = Duration::from_millis(args.recovery_down_ms);
    // The writer runs through every kill and a period after the last restart.
    let writer_seconds = args.recovery_period_s * (args.recovery_kills as u64 + 1);
    let writer = tokio::spawn(steady_writer(
        consumer.source_dsn.clone(),
        args.stream_rate,
        writer_seconds,
    ));
    // (kill, restart) times, µs since the epoch; the slot's release waits.
    let mut restarts: Vec<(i64, i64)> = Vec::new();
    let mut release_waits = Vec::new();
    for _ in 0..args.recovery_kills {
        tokio::time::sleep(period).await;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "weir run exited by itself ({status}): {}",
                consumer.log_tail()
            );
        }
        child.start_kill()?;
        child.wait().await?;
        let killed = now_us();
        tokio::time::sleep(down).await;
        let waited = Instant::now();
        slot_released(&source, &consumer.slot).await?;
        release_waits.push(waited.elapsed());
        let restarted = now_us();
        child = consumer.spawn(&weir)?;
        restarts.push((killed, restarted));
    }
    let written = writer.await??;
    if let Some(status) = child.try_wait()? {
        anyhow::bail!(
            "weir run exited by itself ({status}): {}",
            consumer.log_tail()
        );
    }
    let surviving_rec = written.surviving();
    let seen = seen_all(&target, &surviving_rec).await?;
    consumer.stop(&mut child).await?;
    check_weir_target(&source, &target, true).await?;
    drop_slot(&source, &consumer.slot).await?;
    let mut first_visible = Vec::new();
    let mut caught = Vec::new();
    for (i, &(_, restarted)) in restarts.iter().enumerate() {
        let first = seen
            .values()
            .filter(|&&s| s >= restarted)
            .min()
            .context("no row became visible after a restart")?;
        let last = surviving_rec
            .iter()
            .filter(|(_, commit)| *commit <= restarted)
            .filter_map(|(id, _)| seen.get(id))
            .max()
            .context("no row committed before a restart")?;
        if let Some(&(next_kill, _)) = restarts.get(i + 1) {
            anyhow::ensure!(
                *last < next_kill,
                "restart {} had not caught up when the next kill came; raise --recovery-period-s",
                i + 1
            );
        }
        first_visible.push(Duration::from_micros(u64::try_from(first - restarted)?));
        caught.push(Duration::from_micros(u64::try_from(
            (last - restarted).max(0),
        )?));
    }
    figures.first_visible = median(&first_visible);
    figures.caught_up = median(&caught);
    println!(
        "streaming recovery: first visible {first_visible:?}, caught up {caught:?}, slot release waits {release_waits:?}"
    );

    // -- Sustained rate: a backlog caught up. -----------------------------------------
    let source = source_database(pg, "stream_backlog").await?;
    let mut with_plugin = WeirConsumer::new(
        &weir,
        pg,
        "stream_backlog",
        "stream_backlog_plugin",
        Some(&plugin),
        flush_ms,
    )
    .await?;
    let mut identity = WeirConsumer::new(
        &weir,
        pg,
        "stream_backlog",
        "stream_backlog_identity",
        None,
        flush_ms,
    )
    .await?;
    let sub = subscriber(pg, &source, "stream_backlog", "stream_sub_backlog", false).await?;
    source
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot('stream_recv', 'pgoutput')",
            &[],
        )
        .await?;
    let backlog_txns = (args.stream_backlog / CHANGES_PER_TRANSACTION).max(2);
    figures.backlog_changes = backlog_txns * CHANGES_PER_TRANSACTION;
    write_orders_workload(&source, backlog_txns).await?;
    let end_lsn: String = source
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0);
    while !source
        .query_one(
            "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
            &[&end_lsn],
        )
        .await?
        .get::<_, bool>(0)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    source.batch_execute("VACUUM ANALYZE orders").await?;
    source.batch_execute("CHECKPOINT").await?;
    let last_id = (8 * backlog_txns) as i64;
    let plugin_expected = {
        let r = source.query_one(SOURCE_PLUGIN_DIGEST, &[]).await?;
        (r.get::<_, i64>(0), r.get::<_, String>(1))
    };
    let expected = digest(&source, "orders").await?;
    figures.backlog_rows = expected.0;

    let mut backlog_cpu = Vec::new();
    for (consumer, plugin, digest_sql, expected) in [
        (
            &mut with_plugin,
            true,
            PLUGIN_DIGEST.to_owned(),
            &plugin_expected,
        ),
        (
            &mut identity,
            false,
            format!("{REPL_DIGEST}{TARGET}"),
            &expected,
        ),
    ] {
        let target = connect(&consumer.target_dsn).await?;
        let server = cluster_cpu(pg)?;
        let started = Instant::now();
        let mut child = consumer.spawn(&weir)?;
        let time = caught_up(&target, TARGET, last_id, &digest_sql, expected, started).await?;
        backlog_cpu.push(cluster_cpu(pg)? - server);
        consumer.stop(&mut child).await?;
        check_weir_target(&source, &target, plugin).await?;
        drop_slot(&source, &consumer.slot).await?;
        target
            .batch_execute(&format!("VACUUM ANALYZE {TARGET}"))
            .await?;
        if plugin {
            figures.weir_plugin = time;
        } else {
            figures.weir_identity = time;
        }
    }
    let started = enable_subscription(&sub, "stream_sub_backlog").await?;
    figures.peer = caught_up(
        &sub,
        "orders",
        last_id,
        &format!("{REPL_DIGEST}orders"),
        &expected,
        started,
    )
    .await?;
    drop_subscription(&sub, &source, "stream_sub_backlog").await?;
    figures.recvlogical = recvlogical(
        pg,
        &source,
        "stream_backlog",
        "stream_recv",
        PUBLICATION,
        &end_lsn,
    )
    .await?;
    source
        .execute("SELECT pg_drop_replication_slot('stream_recv')", &[])
        .await?;
    // The limit of writing the final rows: one binary COPY into an empty table of the
    // identity target's shape (its indexes too), in that target's database.
    let rows: Vec<Vec<Value>> = source
        .query(
            "SELECT id, customer, order_date::text, amount::text, status FROM orders ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            let date: String = r.get(2);
            Ok(vec![
                Value::Int(r.get(0)),
                Value::Text(r.get(1)),
                Value::Date(weir::value::parse_date(&date).context("a date")?),
                Value::Decimal(r.get(3)),
                Value::Text(r.get(4)),
            ])
        })
        .collect::<anyhow::Result<_>>()?;
    let copy_target = connect(&identity.target_dsn).await?;
    copy_target
        .batch_execute(&format!(
            "CREATE TABLE public.stream_copy (LIKE {TARGET} INCLUDING ALL)"
        ))
        .await?;
    let mut copies = Vec::new();
    for _ in 0..args.repeat.max(1) {
        copy_target
            .batch_execute("TRUNCATE public.stream_copy; CHECKPOINT")
            .await?;
        copies.push(copy_orders(&copy_target, "public.stream_copy", &rows).await?);
    }
    figures.copy = median(&copies);
    println!(
        "streaming backlog: weir+plugin {:?}, weir identity {:?}, subscription {:?}, pg_recvlogical {:?}, copy {:?}",
        figures.weir_plugin, figures.weir_identity, figures.peer, figures.recvlogical, figures.copy
    );

    // -- The report. -----------------------------------------------------------------
    let f = &figures;
    writeln!(
        out,
        "\n## Streaming: PostgreSQL → live `weir run` with the Rust plugin → PostgreSQL, against a subscription\n"
    )?;
    writeln!(
        out,
        "The real `weir` binary of this build, `weir run` (live, not `--once`) with `--log-format json`, on the \
         replication section's table (`orders`, default replica identity) and workload (transactions of 8 inserts, 1 \
         update, and alternately 1 update moving a row to the next day or 1 delete; 30 days), in source databases of \
         the same cluster. Config: `public.orders` → `{TARGET}` by day, `write = \"replace\"` (the default), \
         `plugin = \"orders-rust.wasm\"` with `rate = \"{RATE}\"` (its output: id, customer, order_date, amount, \
         amount_eur, status; the target table made by `weir init` from the plugin's describe), \
         `[engine] flush_interval_ms = {flush_ms}`, parallelism 2 (the default). `weir init` and a first \
         `run --once` on the empty table ran before each measurement. The peer is a native subscription \
         (`CREATE SUBSCRIPTION … WITH (copy_data = false)`, its slot made beforehand) into a second database holding \
         the same table. The 1-minute load average when this section began was {load}.\n"
    )?;
    writeln!(
        out,
        "### Latency from source commit to visible in the target, at a steady rate\n\n\
         A writer (one connection) commits one workload transaction per tick of a tokio interval, {} transactions/s \
         ({:.0} changes/s offered; {:.0} measured) for {} s: {txns} transactions. For every row still in the \
         source at the end (deleted rows are left out: Weir stages the latest state, so a row deleted within a flush \
         interval of its insert is never written), the latency is the time from its transaction's `COMMIT` \
         returning to the writer (this machine's clock, read right after `batch_execute` returned) to the row \
         first visible in the target, recorded by the target itself with the same clock: on Weir's table a \
         statement-level `AFTER INSERT` trigger with a transition table (COPY fires it) runs `INSERT INTO \
         bench_seen SELECT id, clock_timestamp() FROM new_rows ON CONFLICT DO NOTHING`, at the end of the \
         partition's COPY, inside the write's transaction, just before its lineage upsert and commit (so a \
         figure is early by that commit, and a rolled-back write records nothing); the subscriber's table has the \
         same as a row trigger, `ENABLE ALWAYS` (an apply worker fires only row triggers, and only those enabled \
         `REPLICA` or `ALWAYS`). Each run waited until every such row was recorded; Checked: the target equals the \
         source (Weir: row count and md5 of id, customer, order_date, amount and status, the source's status \
         upper-cased as the plugin does; the peer: all columns).\n",
        args.stream_rate,
        args.stream_rate * CHANGES_PER_TRANSACTION,
        f.offered_changes_per_s,
        args.stream_seconds,
    )?;
    writeln!(
        out,
        "| path | rows measured | p50 (ms) | p99 (ms) | max (ms) | server CPU (s) |\n|---|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| Weir `run` + `orders-rust.wasm`, flush every {flush_ms} ms | {} | {:.1} | {:.1} | {:.1} | {weir_server_cpu:.2} |",
        f.weir_latency.rows, f.weir_latency.p50, f.weir_latency.p99, f.weir_latency.max
    )?;
    writeln!(
        out,
        "| native subscription (peer) | {} | {:.1} | {:.1} | {:.1} | {peer_server_cpu:.2} |",
        f.peer_latency.rows, f.peer_latency.p50, f.peer_latency.p99, f.peer_latency.max
    )?;
    writeln!(
        out,
        "\nWeir / peer: p50 {:.1}×, p99 {:.1}× the subscription's latency. Weir's latency is dominated by the flush \
         interval: a transaction waits in the engine's batch until the next flush (on average half an interval), \
         then is staged (one synced RocksDB write), and every dirty partition is rewritten whole (replace: DELETE, \
         the plugin over all its staged rows, binary COPY, lineage), so a round's cost grows with the partitions' \
         size: at the end of this run each round rewrote up to all {final_rows} rows of the 30 partitions. The \
         writer's {txns} transactions took {:.2} s. *Server CPU* is every process of the cluster from the writer's \
         start until the last row was recorded (the writer's backends, decoding, the target's writes and the \
         recorder's triggers; for the peer also its apply worker).\n",
        f.weir_latency.p50 / f.peer_latency.p50,
        f.weir_latency.p99 / f.peer_latency.p99,
        weir_writer.as_secs_f64(),
    )?;
    writeln!(
        out,
        "### Recovery after SIGKILL\n\n\
         The same steady writer for {writer_seconds} s while a third `weir run` (same config, its own source, target \
         and slot, the same recorder) tails it; every {} s it was killed with SIGKILL and, {} ms later and once the \
         server had released its slot (waits: {} s), started again. From each restart (the spawn of the new `weir \
         run`): **to streaming again**, the first row recorded in the target after it; **to caught up**, the last \
         of the rows committed at the source before it recorded (every one of them visible). Checked: each restart \
         caught up before the next kill; at the end every surviving row was recorded and the target equals the \
         source (row count and md5, as above): nothing lost, nothing duplicated. Median of {} restarts.\n",
        args.recovery_period_s,
        args.recovery_down_ms,
        seconds_list(&release_waits),
        args.recovery_kills
    )?;
    writeln!(
        out,
        "| from restart to | median (s) | each restart (s) |\n|---|---:|---|\n\
         | first new row visible (streaming again) | {:.2} | {} |\n\
         | every row committed before the restart visible (caught up) | {:.2} | {} |\n",
        f.first_visible.as_secs_f64(),
        seconds_list(&first_visible),
        f.caught_up.as_secs_f64(),
        seconds_list(&caught)
    )?;
    writeln!(
        out,
        "A restart pays the process start, the plugin's load (from the compiled-component cache), opening the \
         stage, connecting and `START_REPLICATION` at the stage's position, then the first flush interval; the rows \
         it catches up are those committed while it was down ({} ms) and those staged or batched but not written \
         at the kill (re-delivered by the slot, or found in the stage dirty).\n",
        args.recovery_down_ms
    )?;
    writeln!(
        out,
        "### Sustained rate: a backlog caught up\n\n\
         A backlog of {} changes ({backlog_txns} transactions of the same workload, {} rows at the end) written while \
         every consumer was stopped, each consumer with its own slot made before it (Weir's by `weir init`); WAL \
         flushed, the source vacuumed and a `CHECKPOINT` taken before the clocks. The consumers ran one at a time. \
         Weir: from spawning `weir run` (live; process start, plugin load, connect) until the target equals the \
         source, polled every {} ms (the backlog's last inserted id present, then the digest equal), so up to {} ms \
         late; then stopped with SIGTERM. Peer: from `ALTER SUBSCRIPTION … ENABLE` until the same. Limits: \
         `pg_recvlogical` on its own slot of the same backlog, to /dev/null (as in the replication section), and \
         one binary COPY of the backlog's final rows into an empty table of the identity target's shape (`LIKE … \
         INCLUDING ALL`), median of {} COPYs.\n",
        f.backlog_changes,
        f.backlog_rows,
        POLL.as_millis(),
        POLL.as_millis(),
        args.repeat.max(1)
    )?;
    writeln!(
        out,
        "| path | time (s) | changes/s | server CPU (s) |\n|---|---:|---:|---:|"
    )?;
    let cpu = |i: usize| {
        backlog_cpu
            .get(i)
            .map_or_else(|| "—".into(), |c| format!("{c:.2}"))
    };
    writeln!(
        out,
        "| Weir `run` + `orders-rust.wasm` | {:.2} | {:.0} | {} |",
        f.weir_plugin.as_secs_f64(),
        f.rate(f.weir_plugin),
        cpu(0)
    )?;
    writeln!(
        out,
        "| Weir `run`, identity transform | {:.2} | {:.0} | {} |",
        f.weir_identity.as_secs_f64(),
        f.rate(f.weir_identity),
        cpu(1)
    )?;
    writeln!(
        out,
        "| native subscription (peer) | {:.2} | {:.0} | — |",
        f.peer.as_secs_f64(),
        f.rate(f.peer)
    )?;
    writeln!(
        out,
        "| `pg_recvlogical` → /dev/null (decode limit) | {:.2} | {:.0} | — |",
        f.recvlogical.as_secs_f64(),
        f.rate(f.recvlogical)
    )?;
    writeln!(
        out,
        "| raw binary COPY of the {} final rows (write limit) | {:.2} | {:.0} rows/s | — |",
        f.backlog_rows,
        f.copy.as_secs_f64(),
        f.backlog_rows as f64 / f.copy.as_secs_f64()
    )?;
    writeln!(
        out,
        "\nWeir with the plugin / decode limit: {:.2} of pg_recvlogical's rate; / peer: {:.2} of the subscription's; \
         its time / the COPY's: {:.1}×. Plugin overhead on this backlog: Weir with the plugin took {:.2}× the time of \
         Weir with the identity transform. All COPYs (s): {}. Weir writes its rounds while it reads: with flush \
         every {flush_ms} ms each round rewrites every dirty partition whole, so catching up rewrites the table \
         several times; the peer applies each change once.",
        f.rate(f.weir_plugin) / f.rate(f.recvlogical),
        f.rate(f.weir_plugin) / f.rate(f.peer),
        f.weir_plugin.as_secs_f64() / f.copy.as_secs_f64(),
        f.weir_plugin.as_secs_f64() / f.weir_identity.as_secs_f64(),
        seconds_list(&copies),
    )?;
    Ok(figures)
}
