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

/// A source `<name>_source` with [`ddl`] of `rows` rows, a target database, and a
/// config of the three tables with the lines `extra` after the `[source]` section's,
/// initialised.
async fn loaded_estate(
    name: &str,
    rows: u64,
    extra: &str,
) -> (TestDb, String, tokio_postgres::Client) {
    let db = TestDb::new(&format!("{name}_target")).await;
    let (source_dsn, source) = crate::harness::source_db(name, &ddl(rows)).await;
    std::fs::write(db.config_path(), postgres_config(name, extra, &tables())).expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    (db, source_dsn, source)
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
    let (db, source_dsn, source) = loaded_estate(
        "first_load",
        rows,
        "snapshot_chunk_rows = 2000\nsnapshot_parallelism = 2\n[engine]\nflush_interval_ms = 200",
    )
    .await;
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

/// Time limits a DBA set on the source's and the target's databases (a
/// `statement_timeout` of 1 ms, which every range's `COPY` passes; a
/// `idle_in_transaction_session_timeout` of 1 ms, which the walsender holding the
/// exported snapshot and the workers between ranges pass) do not fail or degrade the
/// first load: it is read from the exported snapshot and exact.
#[tokio::test(flavor = "multi_thread")]
async fn time_limits_of_the_databases_do_not_fail_the_first_load() {
    let (db, source_dsn, source) = loaded_estate("load_limits", 20_000, "").await;
    for database in ["load_limits_source", "load_limits_target"] {
        source
            .batch_execute(&format!(
                "ALTER DATABASE {database} SET statement_timeout = '1ms'; \
                 ALTER DATABASE {database} SET lock_timeout = '1ms'; \
                 ALTER DATABASE {database} SET idle_in_transaction_session_timeout = '1ms'"
            ))
            .await
            .expect("limits");
    }
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let log = text(&out.stderr);
    assert!(out.status.success(), "run: {log}");
    assert!(
        log.contains("first load starts from an exported snapshot")
            && !log.contains("initial snapshot starts"),
        "the load read the exported snapshot, not watermarks:\n{log}"
    );
    source
        .batch_execute("ALTER DATABASE load_limits_target RESET ALL")
        .await
        .expect("reset");
    assert_all_same(&source, &db.client().await).await;
}

/// What a run logs of the rows it reads, with `weir::source::postgres=debug`.
const READ_LOG: &str = "info,weir::source::postgres=debug";

/// The value of `field=` in a log line, if it is a number.
fn log_number(line: &str, field: &str) -> Option<u64> {
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Rows of `table` read from the source in `log`: the first load's staged parts and the
/// watermark snapshot's chunks (a killed run's last line may be cut: not counted).
fn rows_read(log: &str, table: &str) -> (u64, u64) {
    let of_table = |l: &&str| l.contains(&format!(" table={table} "));
    let load = log
        .lines()
        .filter(|l| l.contains("first load part staged"))
        .filter(of_table)
        .filter_map(|l| log_number(l, "rows"))
        .sum();
    let chunks = log
        .lines()
        .filter(|l| l.contains("snapshot chunk read"))
        .filter(of_table)
        .filter_map(|l| log_number(l, "read"))
        .sum();
    (load, chunks)
}

/// Starts a live `weir run` whose first load waits 20 ms before staging each part, so a
/// load takes seconds on any machine, logging what it reads to `log`; returns once it
/// has staged `parts` parts of `table`.
async fn spawn_slow_load(
    db: &TestDb,
    source_dsn: &str,
    log: &Path,
    table: &str,
    parts: usize,
) -> crate::harness::Reaped {
    let env = [
        ("WEIR_SOURCE_DSN", source_dsn),
        ("FAILPOINTS", "load-range=sleep(20)"),
        ("RUST_LOG", READ_LOG),
    ];
    let run = db.spawn_live(&env, log);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let body = std::fs::read_to_string(log).unwrap_or_default();
        let staged = body
            .lines()
            .filter(|l| {
                l.contains("first load part staged") && l.contains(&format!(" table={table} "))
            })
            .count();
        if staged >= parts {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "the load staged {staged} parts of {table}:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A first load SIGKILLed at a random point inside its largest table, while writers
/// change the tables, and four runs after it killed at random too: the exported
/// snapshot died with the first run, so the ranges of pages it had not staged are read
/// with watermarks, and only those: the rows of the ranges it staged are not read again
/// (counted from each run's log). Then a drain, and the target is exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_load_killed_at_random_points_resumes_exact() {
    let rows = load_rows();
    let chunk_rows = (rows / 100).max(100);
    let extra = format!(
        "snapshot_chunk_rows = {chunk_rows}\nsnapshot_parallelism = 2\n[engine]\nflush_interval_ms = 200"
    );
    let (db, source_dsn, source) = loaded_estate("first_load_kill", rows, &extra).await;
    let statements = 1200;
    let writers = spawn_writers(source_dsn.clone(), rows, statements);
    let mut rng = Rng::new(77);
    let mut logs = String::new();
    let kills = 5;
    for attempt in 0..kills {
        let log = db.path(&format!("run-{attempt}.log"));
        if attempt == 0 {
            // `orders` is the largest, in about 100 ranges: the kill lands after a fifth
            // of its parts, and at most 20 parts later.
            let mut run = spawn_slow_load(&db, &source_dsn, &log, "public.orders", 20).await;
            tokio::time::sleep(Duration::from_millis(rng.below(400))).await;
            let _ = run.0.kill();
            let _ = run.wait();
            let states = snapshot_states(&db, &source_dsn);
            let body = std::fs::read_to_string(&log).unwrap_or_default();
            // The other two are done or not begun, as the load's order put them.
            assert!(
                states
                    .iter()
                    .all(|(table, state)| if table == "public.orders" {
                        state == "reading"
                    } else {
                        state == "done" || state == "waiting"
                    }),
                "killed inside orders: {states:?}\n{body}"
            );
        } else {
            let env = [
                ("WEIR_SOURCE_DSN", source_dsn.as_str()),
                ("RUST_LOG", READ_LOG),
            ];
            kill_after(
                &db,
                &env,
                &log,
                "streaming from the replication slot",
                1500,
                &mut rng,
            )
            .await;
        }
        let body = std::fs::read_to_string(&log).unwrap_or_default();
        if attempt == 1 {
            // The next run reads the pages the load left, with watermarks: the load's
            // snapshot is gone.
            assert!(
                body.lines().any(|l| l
                    .contains("the snapshot reads this table by the ranges of pages left")
                    && l.contains("table=public.orders")),
                "the resumed snapshot reads the pages the first load left of orders:\n{body}"
            );
            assert!(
                !body.contains("first load starts"),
                "a load that staged rows is not started again:\n{body}"
            );
        }
        logs.push_str(&body);
    }
    writers.await.expect("writers");
    let out = db
        .weir_command(&["run", "--once"])
        .env("WEIR_SOURCE_DSN", &source_dsn)
        .env("RUST_LOG", READ_LOG)
        .output()
        .expect("run weir");
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    logs.push_str(&text(&out.stderr));
    assert_all_same(&source, &db.client().await).await;
    // Each row of orders is read once, but for what a kill cut short (a chunk in flight
    // per kill, a part of a range per worker of the load) and rows the writers inserted
    // or moved to a page not read yet.
    // Each range and chunk holds about `chunk_rows` rows (by the planner's rows per
    // page); half as many again for its estimate.
    let (by_load, by_chunks) = rows_read(&logs, "public.orders");
    let slack = statements / 3 + (kills - 1) * chunk_rows * 3 / 2 + 3 * chunk_rows;
    eprintln!(
        "orders: {rows} rows, {by_load} read by the killed load, {by_chunks} by the snapshot after it (slack {slack})"
    );
    assert!(
        by_load > slack,
        "the killed load staged {by_load} rows of orders: too few to tell whether they are read again"
    );
    assert!(
        by_load + by_chunks <= rows + slack,
        "orders ({rows} rows) read {by_load} rows in the load and {by_chunks} in the snapshot after it: the rows staged were read again"
    );
}

/// A worker connection of a first load ended by the server (`pg_terminate_backend`)
/// while writers change the tables: the worker opens a new connection in the same
/// exported snapshot (its exporting connection lives on) and reads its range again, so
/// the load ends in the same run, with no watermark snapshot after it; exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_load_connection_reads_its_range_again_in_the_same_snapshot() {
    let rows = load_rows();
    let (db, source_dsn, source) = loaded_estate(
        "first_load_lost",
        rows,
        &format!(
            "snapshot_chunk_rows = {}\nsnapshot_parallelism = 2",
            (rows / 100).max(100)
        ),
    )
    .await;
    let writers = spawn_writers(source_dsn.clone(), rows, 600);
    let log = db.path("run.log");
    let mut run = spawn_slow_load(&db, &source_dsn, &log, "public.orders", 10).await;
    // One of the workers: in the load's snapshot, its last statement a range's COPY.
    let ended: i64 = source
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND query LIKE 'COPY (SELECT%' LIMIT 1) w",
            &[],
        )
        .await
        .expect("end a worker's connection")
        .get(0);
    assert_eq!(ended, 1, "a worker's connection to end");
    wait_log(&log, "first load staged", 120).await;
    let _ = run.0.kill();
    let _ = run.wait();
    let body = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        body.contains("a first load connection was lost"),
        "the worker says it read its range again:\n{body}"
    );
    assert!(
        !body.contains("initial snapshot starts"),
        "the load ended in its own snapshot, with nothing left for watermarks:\n{body}"
    );
    writers.await.expect("writers");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_all_same(&source, &db.client().await).await;
}

/// The walsenders of a live run ended by the server while its first load reads (the
/// exporting one and the one that streams next): the workers finish in the snapshot
/// they imported, and the run reconnects to stream instead of exiting; exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_whose_walsenders_end_during_the_first_load_reconnects() {
    let rows = load_rows();
    let (db, source_dsn, source) = loaded_estate(
        "first_load_walsenders",
        rows,
        &format!(
            "snapshot_chunk_rows = {}\nsnapshot_parallelism = 2",
            (rows / 100).max(100)
        ),
    )
    .await;
    let log = db.path("run.log");
    let mut run = spawn_slow_load(&db, &source_dsn, &log, "public.orders", 10).await;
    let ended: i64 = source
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE backend_type = 'walsender' AND datname = current_database()",
            &[],
        )
        .await
        .expect("end the walsenders")
        .get(0);
    assert!(ended >= 1, "walsenders to end");
    wait_log(&log, "source reconnected", 180).await;
    assert!(
        run.try_wait().expect("try_wait").is_none(),
        "the run went on: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let _ = run.0.kill();
    let _ = run.wait();
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_all_same(&source, &db.client().await).await;
}

/// A first load of `orders` (`rows` rows, `customer` held out of line in TOAST),
/// SIGKILLed after 20 of its parts are staged: the stage holds some of its ranges of
/// pages.
async fn a_load_killed_part_way(name: &str, rows: u64) -> (TestDb, String, tokio_postgres::Client) {
    let db = TestDb::new(&format!("{name}_target")).await;
    let ddl = format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         ALTER TABLE orders ALTER COLUMN customer SET STORAGE EXTERNAL;
         INSERT INTO orders SELECT g, (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 80) i),
                DATE '2026-03-01' + (g % 30), g % 1000, 'new' FROM generate_series(1, {rows}) g;
         ANALYZE orders;"
    );
    let (source_dsn, source) = crate::harness::source_db(name, &ddl).await;
    let table = OrdersTable::postgres("analytics.fact_orders")
        .source("public.orders")
        .key(&["id"])
        .to_string();
    std::fs::write(
        db.config_path(),
        postgres_config(
            name,
            &format!(
                "snapshot_chunk_rows = {}\nsnapshot_parallelism = 2",
                rows / 100
            ),
            &table,
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let log = db.path("load.log");
    let mut run = spawn_slow_load(&db, &source_dsn, &log, "public.orders", 20).await;
    let _ = run.0.kill();
    let _ = run.wait();
    assert_eq!(
        snapshot_states(&db, &source_dsn),
        [("public.orders".to_owned(), "reading".to_owned())]
    );
    (db, source_dsn, source)
}

/// The pages a killed load left are only its rows while no row moved but by a change
/// the stream carries. Two ways a row can be elsewhere, and each makes the next run
/// read the table again whole, in key order:
/// * the table's files were rewritten: rows deleted from the first pages (loaded), then
///   `VACUUM FULL` packs the rest towards them;
/// * an update left a value out (unchanged TOAST) of a row not staged: rows deleted
///   from the first pages and vacuumed, then rows of the last pages (not loaded)
///   updated without their `customer`: their new versions go to the first pages' free
///   space, which were read already.
///
/// Read by the pages left, both would lose rows; the target is exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_load_left_part_way_is_read_in_key_order_when_its_rows_may_have_moved() {
    let rows = 20_000u64;
    for (case, statements, reason) in [
        (
            "first_load_rewrite",
            &["DELETE FROM orders WHERE id <= 4000", "VACUUM FULL orders"][..],
            "its files were rewritten",
        ),
        (
            "first_load_toast",
            &[
                "DELETE FROM orders WHERE id <= 4000",
                "VACUUM orders",
                "UPDATE orders SET status = 'moved', amount = amount + 1 WHERE id > 19000",
            ][..],
            "an update left out values",
        ),
    ] {
        let (db, source_dsn, source) = a_load_killed_part_way(case, rows).await;
        // The load's slot stays at the load's snapshot (nothing was acknowledged), so
        // the stream carries these changes.
        for sql in statements {
            source.batch_execute(sql).await.expect("move rows");
        }
        let out = db
            .weir_command(&["run", "--once"])
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .env("RUST_LOG", READ_LOG)
            .output()
            .expect("run weir");
        let log = text(&out.stderr);
        assert!(out.status.success(), "{case}: {log}");
        assert!(
            log.lines()
                .any(|l| l.contains("read again whole, in key order") && l.contains(reason)),
            "{case}: the table is read again in key order because {reason}:\n{log}"
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
