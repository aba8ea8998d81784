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
//! steady writer and the latencies read from the targets' recorders; `report.rs` writes
//! the section's text. This file runs the measurements.

mod consumers;
mod latency;
mod report;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::localpg::LocalPg;
use weir::value::Value;

use self::consumers::{
    WeirConsumer, caught_up, check_weir_target, drop_slot, drop_subscription, enable_subscription,
    live_consumer, slot_active, source_database, subscriber,
};
use self::latency::{Latency, latencies, now_us, seen_all, steady_writer};
use self::report::{Details, report};
use crate::Args;
use crate::cluster::{connect, recvlogical, slot_released};
use crate::measure::{cluster_cpu, load_average, median};
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
    /// The latency runs, one per steady rate (`--stream-rate`, `--stream-high-rate`).
    pub latency: Vec<LatencyRun>,
    pub backlog_changes: u64,
    pub backlog_rows: i64,
    pub weir_plugin: Duration,
    pub weir_identity: Duration,
    /// Each Weir run's write rounds on the backlog, and the rows they wrote.
    pub plugin_rounds: (usize, u64),
    pub identity_rounds: (usize, u64),
    pub peer: Duration,
    pub recvlogical: Duration,
    pub copy: Duration,
    /// Median of the restarts: to the first new row visible, to caught up.
    pub first_visible: Duration,
    pub caught_up: Duration,
    pub kills: usize,
}

/// One steady rate's latency runs, Weir's and the peer's.
#[derive(Debug, Clone, Default)]
pub(crate) struct LatencyRun {
    /// Transactions a second the writer was asked for.
    pub rate: u64,
    /// Changes a second the Weir run's writer committed.
    pub offered_changes_per_s: f64,
    pub weir: Latency,
    pub peer: Latency,
    /// Transactions the Weir run's writer committed, and how long it took.
    pub txns: u64,
    pub weir_writer: Duration,
    /// Server CPU seconds of the Weir run, and of the peer's.
    pub weir_server_cpu: f64,
    pub peer_server_cpu: f64,
    /// Rows of the Weir run's target at its end.
    pub final_rows: i64,
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
    let weir = crate::cluster::weir_binary()?;
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

    // -- Latency at steady rates: Weir with the plugin, then the peer. ---------------
    for (i, rate) in [args.stream_rate, args.stream_high_rate]
        .into_iter()
        .filter(|&r| r > 0)
        .enumerate()
    {
        let run = latency_run(pg, &weir, &plugin, flush_ms, rate, args.stream_seconds, i).await?;
        figures.latency.push(run);
    }

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
        let rounds = consumer.rounds();
        check_weir_target(&source, &target, plugin).await?;
        drop_slot(&source, &consumer.slot).await?;
        target
            .batch_execute(&format!("VACUUM ANALYZE {TARGET}"))
            .await?;
        if plugin {
            (figures.weir_plugin, figures.plugin_rounds) = (time, rounds);
        } else {
            (figures.weir_identity, figures.identity_rounds) = (time, rounds);
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
    report(
        out,
        args,
        &figures,
        Details {
            load,
            writer_seconds,
            release_waits,
            first_visible,
            caught,
            backlog_txns,
            backlog_cpu,
            copies,
        },
    )?;
    Ok(figures)
}

/// Latency at one steady rate (`rate` transactions/s for `seconds`): Weir with the
/// plugin, then the peer, each on source databases of its own (suffixed by `n`).
async fn latency_run(
    pg: &LocalPg,
    weir: &std::path::Path,
    plugin: &std::path::Path,
    flush_ms: u64,
    rate: u64,
    seconds: u64,
    n: usize,
) -> anyhow::Result<LatencyRun> {
    let name = format!("stream_latency_weir_{n}");
    let (source, consumer, target, mut child) =
        live_consumer(weir, pg, &name, plugin, flush_ms).await?;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(consumer.source_dsn.clone(), rate, seconds).await?;
    let surviving = written.surviving();
    let seen = seen_all(&target, &surviving).await?;
    let weir_server_cpu = cluster_cpu(pg)? - server;
    consumer.stop(&mut child).await?;
    let final_rows = check_weir_target(&source, &target, true).await?.0;
    drop_slot(&source, &consumer.slot).await?;
    let weir_latency = Latency::of(&mut latencies(&surviving, &seen));
    let txns = written.commit_us.len() as u64;
    let offered_changes_per_s =
        (txns * CHANGES_PER_TRANSACTION) as f64 / written.elapsed.as_secs_f64();
    let weir_writer = written.elapsed;
    println!(
        "streaming latency at {rate} transactions/s, Weir: {weir_latency:?} over {} rows",
        weir_latency.rows
    );

    let peer_name = format!("stream_latency_peer_{n}");
    let sub_name = format!("stream_sub_latency_{n}");
    let source = source_database(pg, &peer_name).await?;
    let sub = subscriber(pg, &source, &peer_name, &sub_name, true).await?;
    enable_subscription(&sub, &sub_name).await?;
    slot_active(&source, &sub_name).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(pg.dsn(&peer_name), rate, seconds).await?;
    let surviving_peer = written.surviving();
    let seen = seen_all(&sub, &surviving_peer).await?;
    let peer_server_cpu = cluster_cpu(pg)? - server;
    anyhow::ensure!(
        digest(&sub, "orders").await? == digest(&source, "orders").await?,
        "the subscriber's table differs from the source's"
    );
    drop_subscription(&sub, &source, &sub_name).await?;
    let peer = Latency::of(&mut latencies(&surviving_peer, &seen));
    println!("streaming latency at {rate} transactions/s, peer: {peer:?}");
    Ok(LatencyRun {
        rate,
        offered_changes_per_s,
        weir: weir_latency,
        peer,
        txns,
        weir_writer,
        weir_server_cpu,
        peer_server_cpu,
        final_rows,
    })
}
