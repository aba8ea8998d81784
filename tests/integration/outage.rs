//! The target PostgreSQL goes away while changes flow: the live engine keeps staging,
//! retries its partition writes with a growing wait, catches up when the target is
//! back, and loses nothing.

use std::time::{Duration, Instant};

use weir::localpg::{LocalPg, LocalPgOptions};
use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{TestDb, Workload, assert_target_matches, file_len};

/// A target cluster of the test's own (the shared one serves every other test, and
/// this one is stopped), with database `name` in it.
async fn own_cluster(name: &str) -> (LocalPg, TestDb) {
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("cluster thread")
        .expect("start the target cluster");
    let dsn = pg.create_database(name).await.expect("database");
    let db = TestDb {
        name: name.into(),
        dsn,
        dir: tempfile::Builder::new()
            .prefix(&format!("weir-test-{name}-"))
            .tempdir()
            .expect("tempdir"),
    };
    (pg, db)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_target_down_for_thirty_seconds_while_changes_flow_loses_nothing() {
    let outage: u64 = std::env::var("WEIR_OUTAGE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let (pg, db) = own_cluster("outage").await;
    let mut workload = Workload::new(31, 10);
    db.write_feed(&workload.lines(2_000, 4));
    db.write_config("", "", "flush_interval_ms = 200\nparallelism = 2");
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let mut live = db.spawn_live(&[], &log);
    let client = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while client
        .query_one("SELECT count(*) FROM weir.partitions", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline, "the first writes never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);

    let pg = std::sync::Arc::new(pg);
    let stopper = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || stopper.stop())
        .await
        .expect("stop thread")
        .expect("stop the target");
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(outage) {
        db.append_feed(&workload.lines(200, 4));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let starter = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || starter.restart())
        .await
        .expect("restart thread")
        .expect("restart the target");
    db.append_feed(&workload.lines(500, 4));

    // The engine stayed up, staged everything meanwhile, and catches up.
    assert!(
        live.try_wait().expect("poll").is_none(),
        "weir run stopped during the outage:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    db.wait_caught_up(120).await;
    assert_bounded_memory(live.id());
    live.kill().expect("stop");
    live.wait().expect("reap");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("partition writes failed; staging goes on"),
        "the outage was seen and retried:\n{text}"
    );
    assert_target_matches(&db.client().await, "analytics.fact_orders", &workload.model).await;
    crate::faults::record("target down", 0, 0, 1, 0, 0);
}

/// With `[stage] max_unwritten_mb`, a target outage stops intake at the limit (the
/// position stands still, `status` says so, the log says why) instead of growing the
/// stage without bound; when the target is back the engine writes, resumes reading,
/// and ends exact.
#[tokio::test(flavor = "multi_thread")]
async fn the_unwritten_limit_pauses_intake_during_an_outage_and_loses_nothing() {
    let (pg, db) = own_cluster("limit").await;
    let mut workload = Workload::new(53, 10);
    db.write_feed(&workload.lines(500, 4));
    db.write_config("", "", "flush_interval_ms = 100\nparallelism = 2");
    let config = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        config.replace("path = \"stage\"", "path = \"stage\"\nmax_unwritten_mb = 1"),
    )
    .expect("config");
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let mut live = db.spawn_live(&[], &log);
    let status = || -> serde_json::Value {
        serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status")
    };
    let feed_len = || file_len(&db.path("feed.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status()["dirty_partitions"]
        .as_array()
        .is_none_or(|d| !d.is_empty())
        || status()["position"].as_u64() != Some(feed_len())
    {
        assert!(Instant::now() < deadline, "the first writes never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pg = std::sync::Arc::new(pg);
    let stopper = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || stopper.stop())
        .await
        .expect("stop thread")
        .expect("stop the target");
    // Changes against a 1 MB limit, until intake pauses, then 1 MB more.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("intake paused")
    {
        assert!(Instant::now() < deadline, "intake never paused");
        db.append_feed(&workload.lines(1_000, 4));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..10 {
        db.append_feed(&workload.lines(1_000, 4));
    }
    let paused = status();
    assert_eq!(paused["intake_paused"], true, "{paused}");
    let position = paused["position"].as_u64().expect("position");
    assert!(
        position < feed_len(),
        "intake stopped before the feed's end"
    );
    let limit = paused["max_unwritten_bytes"].as_u64().expect("limit");
    let unwritten = paused["unwritten_bytes"].as_u64().expect("unwritten");
    // Checked after each staged batch: the overshoot is one batch at most.
    assert!(unwritten >= limit && unwritten < 4 * limit, "{paused}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        status()["position"].as_u64(),
        Some(position),
        "nothing is read while paused"
    );

    let starter = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || starter.restart())
        .await
        .expect("restart thread")
        .expect("restart the target");
    db.wait_caught_up(120).await;
    live.kill().expect("stop");
    live.wait().expect("reap");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("intake resumed"), "{text}");
    assert_target_matches(&db.client().await, "analytics.fact_orders", &workload.model).await;
}

/// A writer of the source table that survives the source going away: each insert or
/// update that commits is known (the table itself is the oracle at the end).
fn source_writer(
    dsn: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut committed = 0u64;
        let mut id = 0i64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Ok((client, connection)) =
                tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await
            else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            tokio::spawn(connection);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                id += 1;
                let sql = "INSERT INTO orders VALUES ($1::bigint, 'w', DATE '2026-03-01' + ($1::bigint % 7)::int, $1::bigint % 1000, 'new') \
                           ON CONFLICT (id) DO NOTHING; \
                           ";
                let moved = "UPDATE orders SET order_date = order_date + 1, status = 'paid' WHERE id = $1::bigint - 50";
                let ok = client.execute(sql, &[&id]).await.is_ok()
                    && client.execute(moved, &[&id]).await.is_ok();
                if !ok {
                    break;
                }
                committed += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        committed
    })
}

/// Polls until the target holds exactly the source's rows, or fails after `secs`.
async fn wait_exact(
    source: &tokio_postgres::Client,
    db: &TestDb,
    secs: u64,
    log: &std::path::Path,
) {
    let target = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let want = crate::postgres_source::dump(source, "orders").await;
        let got = crate::postgres_source::dump(&target, "analytics.fact_orders").await;
        if want == got {
            return;
        }
        let missing = want
            .iter()
            .filter(|r| got.binary_search(r).is_err())
            .count();
        assert!(
            Instant::now() < deadline,
            "the target did not reach the source's rows: {missing} missing, {} rows against {}\n{}",
            got.len(),
            want.len(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The engine's peak memory stays within the stage's budget plus a margin.
fn assert_bounded_memory(pid: u32) {
    let peak_mib = weir::procmem::peak_rss_kib(weir::procmem::Process::Pid(pid)) / 1024;
    assert!(peak_mib > 0, "no memory reading for pid {pid}");
    assert!(
        peak_mib < 512,
        "weir run peaked at {peak_mib} MiB (stage budget {} MiB)",
        weir::stage::MEMORY_BUDGET_BYTES >> 20
    );
}

/// The source PostgreSQL restarts twice while changes flow: the live engine reconnects
/// at its position (the slot survives), writes meanwhile, and ends exact.
#[tokio::test(flavor = "multi_thread")]
async fn the_source_restarting_while_changes_flow_loses_nothing() {
    let source_pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("cluster thread")
        .expect("start the source cluster");
    let source_dsn = source_pg
        .create_database("restart_source")
        .await
        .expect("database");
    let (source, connection) = tokio_postgres::connect(&source_dsn, tokio_postgres::NoTls)
        .await
        .expect("source");
    tokio::spawn(connection);
    source
        .batch_execute(crate::harness::ORDERS_DDL)
        .await
        .expect("ddl");
    drop(source);
    let db = TestDb::new("source_restart").await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "restart",
            "[engine]\nflush_interval_ms = 200",
            &OrdersTable::postgres("analytics.fact_orders").to_string(),
        ),
    )
    .expect("config");
    let out = crate::postgres_source::weir_pg(&db, &source_dsn, &["init"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let log = db.path("run.log");
    let mut live = db.spawn_live(&[("WEIR_SOURCE_DSN", &source_dsn)], &log);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = source_writer(source_dsn.clone(), std::sync::Arc::clone(&stop));
    let source_pg = std::sync::Arc::new(source_pg);
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pg = std::sync::Arc::clone(&source_pg);
        tokio::task::spawn_blocking(move || {
            pg.stop()?;
            std::thread::sleep(Duration::from_secs(2));
            pg.restart()
        })
        .await
        .expect("restart thread")
        .unwrap_or_else(|e| {
            panic!(
                "restart the source: {e}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let committed = writer.await.expect("writer");
    assert!(
        committed > 100,
        "the writer committed only {committed} changes"
    );
    let (source, connection) = tokio_postgres::connect(&source_dsn, tokio_postgres::NoTls)
        .await
        .expect("source");
    tokio::spawn(connection);
    wait_exact(&source, &db, 90, &log).await;
    assert!(
        live.try_wait().expect("poll").is_none(),
        "weir run exited:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_bounded_memory(live.id());
    live.kill().expect("stop");
    live.wait().expect("reap");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("source reconnected"), "{text}");
    crate::faults::record("source restarted twice", 0, 0, 2, 0, 0);
}

/// Every connection of the engine, replication and target alike, is cut with
/// `pg_terminate_backend` ten times while changes flow: it reconnects and ends exact.
#[tokio::test(flavor = "multi_thread")]
async fn connections_terminated_repeatedly_lose_nothing() {
    let db = TestDb::new("terminate_target").await;
    let (source_dsn, source) = crate::postgres_source::source_fixture(
        &db,
        "weir_terminate",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);",
        "[engine]\nflush_interval_ms = 200",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let out = crate::postgres_source::weir_pg(&db, &source_dsn, &["init"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let log = db.path("run.log");
    let mut live = db.spawn_live(&[("WEIR_SOURCE_DSN", &source_dsn)], &log);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = source_writer(source_dsn.clone(), std::sync::Arc::clone(&stop));
    let mut terminated = 0i64;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        // The engine's walsender, and its sessions in the target database.
        let n: i64 = source
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE pid <> pg_backend_pid() AND (datname = $1 AND backend_type = 'client backend' AND application_name <> 'weir-test' \
                        OR pid IN (SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'weir_terminate'))",
                &[&db.name],
            )
            .await
            .expect("terminate")
            .get(0);
        terminated += n;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.expect("writer");
    assert!(
        terminated >= 10,
        "only {terminated} connections were terminated:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    wait_exact(&source, &db, 90, &log).await;
    assert!(
        live.try_wait().expect("poll").is_none(),
        "weir run exited:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_bounded_memory(live.id());
    live.kill().expect("stop");
    live.wait().expect("reap");
    crate::faults::record("pg_terminate_backend x10", 0, 0, 1, 0, 0);
}

/// The source's catalog connection alone ended by the server (a session reaper, a
/// firewall dropping an idle connection) while the stream goes on: the connection is
/// made again, and the slot keeps being confirmed; it used to be confirmed no more
/// for the rest of the run, holding WAL without bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_catalog_connection_ended_alone_is_made_again_and_the_slot_confirmed() {
    let db = TestDb::new("catalog_cut_target").await;
    let (source_dsn, source) = crate::postgres_source::source_fixture(
        &db,
        "weir_catalog_cut",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);",
        "[engine]\nflush_interval_ms = 100",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let out = crate::postgres_source::weir_pg(&db, &source_dsn, &["init"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let log = db.path("run.log");
    let mut live = db.spawn_live(&[("WEIR_SOURCE_DSN", &source_dsn)], &log);
    let insert =
        |id: i64| format!("INSERT INTO orders VALUES ({id}, 'c', '2026-03-01', 1.00, 'new')");
    source.batch_execute(&insert(1)).await.expect("insert");
    let deadline = Instant::now() + Duration::from_secs(60);
    while db.count("SELECT count(*) FROM analytics.fact_orders").await < 1 {
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Weir's sessions in the source database but its walsender.
    let cut: i64 = source
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND datname = 'weir_catalog_cut_source' AND backend_type = 'client backend'",
            &[],
        )
        .await
        .expect("terminate")
        .get(0);
    assert!(cut >= 1, "no catalog connection to end");
    for id in 2..=6 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        source.batch_execute(&insert(id)).await.expect("insert");
    }
    let wanted: i64 = source
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .expect("lsn")
        .get(0);
    let confirmed = || async {
        source
            .query_one(
                "SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'weir_catalog_cut'",
                &[],
            )
            .await
            .expect("slot")
            .get::<_, i64>(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while confirmed().await < wanted {
        assert!(
            Instant::now() < deadline,
            "the slot is not confirmed past the inserts:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        6
    );
    assert!(live.try_wait().expect("poll").is_none(), "weir run exited");
    live.kill().expect("stop");
    live.wait().expect("reap");
}
