//! Section 4: PostgreSQL logical replication. One workload of `--pg-changes` row
//! changes read from identical pgoutput slots by Weir (slot → stage, and `run --once`
//! into a target), by `pg_recvlogical` (the decode limit) and by a native subscription
//! (the peer), one after the other, each from the same backlog.
//!
//! `consumers.rs` holds Weir's two consumers of a round (slot → stage in this process,
//! `run --once` in a child process); `child.rs` runs and reads that child.

mod child;
mod consumers;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use weir::config::Dsn;
use weir::localpg::LocalPg;

pub(crate) use self::child::child_pipeline;
use self::child::run_pipeline_child;
use self::consumers::{PipelineConsumer, StageConsumer, replication_config};
use crate::Args;
use crate::cluster::{connect, recvlogical, slot_released};
use crate::measure::{children_cpu, cluster_cpu, load_average, median_f64, own_cpu, summary};
use crate::orders::{CHANGES_PER_TRANSACTION, REPL_TABLE_DDL, digest, write_orders_workload};

/// The source database of the replication workload.
const REPL_SOURCE_DB: &str = "repl_source";
/// The publication every consumer reads.
const REPL_PUBLICATION: &str = "bench_pub";
/// How often the subscriber is polled for the workload's last row.
const SUBSCRIBER_POLL: Duration = Duration::from_millis(50);
/// Consumers per round, each with its own slot (the cluster has 20).
const SLOTS_PER_ROUND: usize = 4;

/// Times and CPU seconds of one path, one entry per run.
#[derive(Debug, Default)]
struct Measured {
    times: Vec<Duration>,
    /// CPU of every process of the cluster during the run.
    server_cpu: Vec<f64>,
    /// CPU of the consumer's own process (none: it is a server process).
    client_cpu: Vec<f64>,
}

/// Section 4: Weir against pg_recvlogical and a native subscription, on one workload.
/// Returns the changes/s of `run --once`, pg_recvlogical and the subscription.
pub(crate) async fn replication(
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
