//! The first load of a PostgreSQL source: tables read in parallel from one exported
//! snapshot (binary `COPY` over ranges of pages) while writers change them, through
//! kills, for every kind of table a source estate has.

use std::path::Path;
use std::time::{Duration, Instant};

use weir::localpg::{LocalPg, LocalPgOptions};
use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{Rng, TestDb, text};
use crate::postgres_source::{assert_same_rows, weir_pg};

/// Rows of the largest table: `WEIR_PG_LOAD_ROWS` (default 100,000).
fn load_rows() -> u64 {
    std::env::var("WEIR_PG_LOAD_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

/// The source tables, all of the orders shape so one dump compares them: a table with
/// a primary key, one without a key but REPLICA IDENTITY FULL, a partitioned table
/// (published through its root). Only `orders` has planner statistics: the others are
/// split into ranges by an assumed rows per page.
fn ddl(rows: u64) -> String {
    let small = (rows / 5).max(100);
    format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || (g % 300), DATE '2026-03-01' + (g * 30 / {rows}), (g % 100000) / 100.0, 'new' FROM generate_series(1, {rows}) g;
         CREATE TABLE ledger (id bigint NOT NULL, customer text, order_date date, amount numeric(12,2), status text);
         ALTER TABLE ledger REPLICA IDENTITY FULL;
         INSERT INTO ledger SELECT g, 'l' || (g % 50), DATE '2026-03-01' + (g % 30), g % 1000, 'new' FROM generate_series(1, {small}) g;
         CREATE TABLE events (id bigint, customer text, order_date date, amount numeric(12,2), status text, PRIMARY KEY (id, order_date)) PARTITION BY RANGE (order_date);
         CREATE TABLE events_a PARTITION OF events FOR VALUES FROM ('2026-03-01') TO ('2026-03-11');
         CREATE TABLE events_b PARTITION OF events FOR VALUES FROM ('2026-03-11') TO ('2026-03-21');
         CREATE TABLE events_c PARTITION OF events FOR VALUES FROM ('2026-03-21') TO ('2026-04-01');
         INSERT INTO events SELECT g, 'e' || (g % 70), DATE '2026-03-01' + (g % 30), g % 500, 'new' FROM generate_series(1, {small}) g;
         ANALYZE orders;"
    )
}

/// The four `[[table]]` sections, into `analytics.fact_<table>`.
fn tables() -> String {
    [
        ("orders", &["id"][..]),
        ("ledger", &["id"][..]),
        ("events", &["id", "order_date"][..]),
    ]
    .iter()
    .map(|(name, key)| {
        OrdersTable::postgres(&format!("analytics.fact_{name}"))
            .source(&format!("public.{name}"))
            .key(key)
            .to_string()
    })
    .collect()
}

/// Changes every table while the load runs: updates (some moving a row to another
/// day, and so another page, partition and target partition), deletes and inserts.
fn spawn_writers(dsn: String, rows: u64, statements: u64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .expect("writer");
        tokio::spawn(connection);
        let mut rng = Rng::new(31);
        let small = (rows / 5).max(100);
        for i in 0..statements {
            let (table, n) = match i % 3 {
                0 => ("orders", rows),
                1 => ("ledger", small),
                _ => ("events", small),
            };
            let id = 1 + rng.below(n);
            let sql = match (i / 3) % 4 {
                0 => format!(
                    "UPDATE {table} SET status = 'paid', amount = amount + 1 WHERE id = {id}"
                ),
                1 => format!(
                    "UPDATE {table} SET order_date = DATE '2026-03-01' + {} WHERE id = {id}",
                    rng.below(30)
                ),
                2 => format!("DELETE FROM {table} WHERE id = {id}"),
                _ => format!(
                    "INSERT INTO {table} (id, customer, order_date, amount, status) VALUES ({}, 'late', '2026-03-07', 1, 'new')",
                    n + 1 + i
                ),
            };
            client.batch_execute(&sql).await.expect("writer statement");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Waits until `log` holds `line`; fails after `secs` with the log.
pub(crate) async fn wait_log(log: &Path, line: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let body = std::fs::read_to_string(log).unwrap_or_default();
        if body.contains(line) {
            return;
        }
        assert!(Instant::now() < deadline, "no `{line}` in the log:\n{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a live `weir run` logging to `log`, waits until it logs `started`, and
/// SIGKILLs it up to 1.5 s after.
pub(crate) async fn kill_at_random(
    db: &TestDb,
    source_dsn: &str,
    log: &Path,
    started: &str,
    rng: &mut Rng,
) {
    kill_after(
        db,
        &[("WEIR_SOURCE_DSN", source_dsn)],
        log,
        started,
        1500,
        rng,
    )
    .await;
}

/// Starts a live `weir run` with `env`, logging to `log`; waits until it logs `line`,
/// and SIGKILLs it up to `max_ms` after.
async fn kill_after(
    db: &TestDb,
    env: &[(&str, &str)],
    log: &Path,
    line: &str,
    max_ms: u64,
    rng: &mut Rng,
) {
    let mut run = db.spawn_live(env, log);
    wait_log(log, line, 120).await;
    tokio::time::sleep(Duration::from_millis(rng.below(max_ms))).await;
    let _ = run.0.kill();
    let _ = run.wait();
}

/// Each table's snapshot state as `weir status --json` shows it.
fn snapshot_states(db: &TestDb, source_dsn: &str) -> Vec<(String, String)> {
    let out = weir_pg(db, source_dsn, &["status", "--json"]);
    assert!(out.status.success(), "status: {}", text(&out.stderr));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    status["snapshot"]
        .as_array()
        .expect("a snapshot list")
        .iter()
        .map(|t| {
            (
                t["table"].as_str().unwrap_or_default().to_owned(),
                t["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn assert_all_same(source: &tokio_postgres::Client, target: &tokio_postgres::Client) {
    for table in ["orders", "ledger", "events"] {
        assert_same_rows(source, table, target, &format!("analytics.fact_{table}")).await;
    }
}

/// A live `weir run` loads a table with a key, one with REPLICA IDENTITY FULL and no
/// key, and a partitioned one from one exported snapshot, in parallel, while writers
/// change every table. After the writers stop, the target equals the source, table by
/// table.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_load_reads_every_kind_of_table_while_writers_change_them() {
    let rows = load_rows();
    let db = TestDb::new("first_load_target").await;
    let (source_dsn, source) = crate::harness::source_db("first_load", &ddl(rows)).await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "first_load",
            "snapshot_chunk_rows = 2000\nsnapshot_parallelism = 2\n[engine]\nflush_interval_ms = 200",
            &tables(),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let log = db.path("run.log");
    let mut run = db.spawn_live(&[("WEIR_SOURCE_DSN", &source_dsn)], &log);
    let writers = spawn_writers(source_dsn.clone(), rows, 800);
    wait_log(&log, "first load starts from an exported snapshot", 60).await;
    writers.await.expect("writers");
    wait_log(&log, "initial snapshot complete", 300).await;
    // The live writer writes a loaded table's partitions without waiting for the feed.
    let target = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while db.count("SELECT count(*) FROM analytics.fact_orders").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the loaded partitions were not written by the live run:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = run.0.kill();
    let _ = run.wait();
    let states = snapshot_states(&db, &source_dsn);
    assert!(
        states.len() == 3 && states.iter().all(|(_, s)| s == "done"),
        "status shows every table loaded: {states:?}"
    );
    let body = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        body.contains("tables=3") && !body.contains("initial snapshot starts"),
        "the three tables loaded from the exported snapshot, none with watermarks:\n{body}"
    );
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_all_same(&source, &target).await;
}

/// A first load SIGKILLed at a random point after its first table is done and before
/// its last, while writers change the tables, and the runs after it killed too: the exported snapshot died with the first run, so the
/// tables it had not finished are read again with watermarks, and only those (the
/// finished ones are not read again). Then a drain, and the target is exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_load_killed_at_random_points_resumes_exact() {
    let rows = load_rows();
    let db = TestDb::new("first_load_kill_target").await;
    let (source_dsn, source) = crate::harness::source_db("first_load_kill", &ddl(rows)).await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "first_load_kill",
            "snapshot_chunk_rows = 1000\nsnapshot_parallelism = 2\n[engine]\nflush_interval_ms = 200",
            &tables(),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let writers = spawn_writers(source_dsn.clone(), rows, 1200);
    let mut rng = Rng::new(77);
    let mut loaded_by_first = None;
    for attempt in 0..5 {
        let log = db.path(&format!("run-{attempt}.log"));
        if attempt == 0 {
            // Each part the load stages waits 20 ms, so the load takes seconds on any
            // machine: the kill lands after its first table is done (the largest,
            // queued first) and before its last.
            let env = [
                ("WEIR_SOURCE_DSN", source_dsn.as_str()),
                ("FAILPOINTS", "load-range=sleep(20)"),
            ];
            kill_after(&db, &env, &log, "done=true", 600, &mut rng).await;
        } else {
            let started = "streaming from the replication slot";
            kill_at_random(&db, &source_dsn, &log, started, &mut rng).await;
        }
        let body = std::fs::read_to_string(&log).unwrap_or_default();
        if attempt == 0 {
            // The tables whose every range the killed load staged, as `weir status`
            // reads the stage; each table the log reported done is among them (a kill
            // may land between a table's last write and its log line).
            let done_in_status = snapshot_states(&db, &source_dsn)
                .iter()
                .filter(|(_, s)| s == "done")
                .count();
            let done_in_log = ["public.orders", "public.ledger", "public.events"]
                .iter()
                .filter(|t| {
                    body.lines().any(|l| {
                        l.contains("first load progress")
                            && l.contains(&format!("table={t}"))
                            && l.contains("done=true")
                    })
                })
                .count();
            assert!(
                done_in_log <= done_in_status,
                "{done_in_log} tables logged done, {done_in_status} done in the stage:\n{body}"
            );
            assert!(
                (1..3).contains(&done_in_status),
                "the load was killed after its first table and before its last: {done_in_status} of 3 done:\n{body}"
            );
            loaded_by_first = Some(done_in_status);
        } else if attempt == 1 {
            // The next run reads only the tables not finished, with watermarks: the
            // load's snapshot is gone.
            let done = loaded_by_first.unwrap_or(0);
            assert!(
                body.lines().any(|l| l.contains("initial snapshot starts")
                    && l.contains(&format!(" done={done} "))),
                "the resumed snapshot starts with the {done} tables the first load finished:\n{body}"
            );
            assert!(
                !body.contains("first load starts"),
                "a load that staged rows is not started again:\n{body}"
            );
        }
    }
    writers.await.expect("writers");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_all_same(&source, &db.client().await).await;
}

/// Without a free replication slot, or a free walsender, for the temporary slot of the
/// exported snapshot, `run` names the setting to raise and reads with watermarks; the
/// target is exact either way.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_free_slot_or_walsender_the_first_load_reads_with_watermarks() {
    for (setting, says) in [
        (
            "max_replication_slots",
            "raise max_replication_slots by one",
        ),
        ("max_wal_senders", "raise max_wal_senders by one"),
    ] {
        let options = LocalPgOptions {
            extra_settings: vec![(setting.into(), "1".into())],
            ..LocalPgOptions::default()
        };
        let pg = tokio::task::spawn_blocking(move || LocalPg::start(&options))
            .await
            .expect("join")
            .expect("start a cluster");
        let source_dsn = pg.create_database("shop").await.expect("database");
        let (source, connection) = tokio_postgres::connect(&source_dsn, tokio_postgres::NoTls)
            .await
            .expect("source");
        tokio::spawn(connection);
        source
            .batch_execute(
                "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
                 INSERT INTO orders SELECT g, 'c' || g, DATE '2026-03-01' + (g % 5), g, 'new' FROM generate_series(1, 2000) g;",
            )
            .await
            .expect("source table");
        let db = TestDb::new(&format!("first_load_{setting}")).await;
        std::fs::write(
            db.config_path(),
            postgres_config(
                "first_load_limits",
                "",
                &OrdersTable::postgres("analytics.fact_orders").to_string(),
            ),
        )
        .expect("config");
        let out = weir_pg(&db, &source_dsn, &["init"]);
        assert!(
            out.status.success(),
            "{setting}: init: {}",
            text(&out.stderr)
        );
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{setting}: run: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("initial snapshot starts"),
            "{setting}: the load names the setting and reads with watermarks:\n{stderr}"
        );
        assert_same_rows(
            &source,
            "orders",
            &db.client().await,
            "analytics.fact_orders",
        )
        .await;
    }
}
