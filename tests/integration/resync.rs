//! `weir resync` and `weir verify --against-source` against a live `weir run`: drift
//! the test puts into the target is named by the verify, and repaired by a resync of
//! the rows a condition selects and by one of the whole table, while a workload
//! changes the source; the target keeps its rows while the table is read again.

use std::time::{Duration, Instant};

use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::first_load::{kill_at_random, wait_log};
use crate::harness::{Rng, TestDb, text};
use crate::postgres_source::{assert_same_rows, weir_pg};

const ROWS: u64 = 30_000;
/// Days 0 to 29 of March 2026, in id order; the workload keeps to the days from
/// [`WORKLOAD_DAY`] on, so the partitions the test damages change only by its hand.
const WORKLOAD_DAY: u64 = 20;

fn ddl() -> String {
    format!(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || (g % 300), DATE '2026-03-01' + ((g - 1) * 30 / {ROWS})::int, (g % 100000) / 100.0, 'new' FROM generate_series(1, {ROWS}) g;"
    )
}

/// A source `<name>_source` with [`ddl`], a target database, and a config of the
/// orders table read in snapshot chunks of `chunk_rows`, initialised.
async fn setup(name: &str, chunk_rows: u64) -> (TestDb, String, tokio_postgres::Client) {
    let db = TestDb::new(&format!("{name}_target")).await;
    let (source_dsn, source) = crate::harness::source_db(name, &ddl()).await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            name,
            &format!("snapshot_chunk_rows = {chunk_rows}\n[engine]\nflush_interval_ms = 100"),
            &OrdersTable::postgres("analytics.fact_orders").to_string(),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    (db, source_dsn, source)
}

/// Updates, deletes and inserts on the days from [`WORKLOAD_DAY`] on.
fn spawn_workload(dsn: String, statements: u64) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .expect("workload");
        tokio::spawn(connection);
        let mut rng = Rng::new(5);
        let first = ROWS * WORKLOAD_DAY / 30 + 2;
        for i in 0..statements {
            let id = first + rng.below(ROWS - first);
            let day = WORKLOAD_DAY + rng.below(30 - WORKLOAD_DAY);
            let sql = match i % 4 {
                0 => format!(
                    "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {id}"
                ),
                1 => format!(
                    "UPDATE orders SET order_date = DATE '2026-03-01' + {day} WHERE id = {id}"
                ),
                2 => format!("DELETE FROM orders WHERE id = {id}"),
                _ => format!(
                    "INSERT INTO orders VALUES ({}, 'late', DATE '2026-03-01' + {day}, 1, 'new')",
                    ROWS + 1 + i
                ),
            };
            client
                .batch_execute(&sql)
                .await
                .expect("workload statement");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// `weir verify --against-source` over March: its exit status and the partitions it
/// failed.
fn verify_against_source(db: &TestDb, source_dsn: &str) -> (bool, Vec<String>) {
    let out = weir_pg(
        db,
        source_dsn,
        &[
            "verify",
            "--table",
            "public.orders",
            "--from",
            "2026-03-01",
            "--to",
            "2026-04-01",
            "--against-source",
            "--json",
        ],
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("verify JSON: {}", text(&out.stderr)));
    let rows = rows.as_array().expect("a list of partitions");
    assert_eq!(rows.len(), 30, "every day of March is checked: {rows:?}");
    let failed = rows
        .iter()
        .filter(|r| r["ok"] != true)
        .map(|r| r["partition"].as_str().unwrap_or_default().to_owned())
        .collect();
    (out.status.success(), failed)
}

async fn count(db: &TestDb) -> i64 {
    db.count("SELECT count(*) FROM analytics.fact_orders").await
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_against_source_names_the_damage_and_resync_repairs_it_under_a_workload() {
    let (db, source_dsn, source) = setup("resync", 5000).await;
    let log = db.path("run.log");
    let mut run = db.spawn_live(&[("WEIR_SOURCE_DSN", &source_dsn)], &log);
    wait_log(&log, "initial snapshot complete", 120).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while count(&db).await != ROWS as i64 {
        assert!(Instant::now() < deadline, "the table was not written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        verify_against_source(&db, &source_dsn),
        (true, vec![]),
        "a target written from the source matches it"
    );

    // Drift in three partitions: rows lost, and values changed.
    let target = db.client().await;
    target
        .batch_execute(
            "DELETE FROM analytics.fact_orders WHERE order_date = '2026-03-04' AND id % 5 = 0;
             DELETE FROM analytics.fact_orders WHERE order_date = '2026-03-06' AND id % 10 = 0;
             UPDATE analytics.fact_orders SET amount = amount + 1 WHERE order_date = '2026-03-11' AND id % 7 = 0;",
        )
        .await
        .expect("damage the target");
    let (ok, failed) = verify_against_source(&db, &source_dsn);
    assert!(!ok, "verify fails on a damaged target");
    assert_eq!(failed, ["2026-03-04", "2026-03-06", "2026-03-11"]);

    // Bad input is refused by name (exit 2, a usage error), and asks for nothing.
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "resync",
            "--table",
            "public.orders",
            "--where",
            "no_such_column = 1",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(
        out.status.code() == Some(2)
            && stderr.contains("`--where`")
            && stderr.contains("no_such_column"),
        "a bad condition is named: {stderr}"
    );
    // A condition PostgreSQL plans but fails on the rows: refused now, not by every
    // read of the resync (and so every run) later.
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "resync",
            "--table",
            "public.orders",
            "--where",
            "1 / (id - 5) = 0",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(
        out.status.code() == Some(2) && stderr.contains("fails it on the table's rows"),
        "a condition failing on the rows is refused: {stderr}"
    );
    let out = weir_pg(&db, &source_dsn, &["resync", "--table", "public.nope"]);
    assert!(
        out.status.code() == Some(2) && text(&out.stderr).contains("public.nope"),
        "an unknown table is named: {}",
        text(&out.stderr)
    );

    let workload = spawn_workload(source_dsn.clone(), 800);
    // The rows one condition selects: that day is read again and rewritten, and
    // `--wait` returns once it is.
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "resync",
            "--table",
            "public.orders",
            "--where",
            "order_date = '2026-03-04'",
            "--wait",
        ],
    );
    assert!(
        out.status.success(),
        "resync --where: {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("resync of public.orders asked for")
            && stdout.contains("resync of public.orders done"),
        "{stdout}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders WHERE order_date = '2026-03-04'")
            .await,
        source_count(&source, "order_date = '2026-03-04'").await,
        "the day read again is rewritten when --wait returns"
    );

    // The whole table, by its target name: the target keeps its rows while it is read.
    let out = weir_pg(
        &db,
        &source_dsn,
        &["resync", "--table", "analytics.fact_orders"],
    );
    assert!(out.status.success(), "resync: {}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let body = std::fs::read_to_string(&log).unwrap_or_default();
        if body.matches("resync complete").count() >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the resync did not end:\n{body}");
        let rows = count(&db).await;
        assert!(
            rows > (ROWS as i64) * 9 / 10,
            "the target kept its rows while the table was read again: {rows}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    workload.await.expect("workload");
    let _ = run.0.kill();
    let _ = run.wait();
    let body = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        body.matches("resync signal read").count() == 2,
        "each signal was read once:\n{body}"
    );
    // The whole table is read by its pages (the workload's updates leave no value out,
    // so nothing sends it back to key order).
    assert!(
        body.lines().any(|l| l
            .contains("the snapshot reads this table by the ranges of pages left")
            && l.contains("table=public.orders"))
            && !body.contains("read again whole, in key order"),
        "the whole-table resync reads by pages:\n{body}"
    );
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_same_rows(&source, "orders", &target, "analytics.fact_orders").await;
    assert_eq!(verify_against_source(&db, &source_dsn), (true, vec![]));
}

async fn source_count(source: &tokio_postgres::Client, condition: &str) -> i64 {
    source
        .query_one(
            &format!("SELECT count(*) FROM orders WHERE {condition}"),
            &[],
        )
        .await
        .expect("count")
        .get(0)
}

/// A whole-table resync asked for while no `weir run` runs, then runs SIGKILLed at
/// random points while they read the table again under a workload: each resumes it
/// from the stage, `weir status` says it is under way, and after a drain the target is
/// exact.
#[tokio::test(flavor = "multi_thread")]
async fn a_resync_killed_at_random_points_resumes_exact() {
    let (db, source_dsn, source) = setup("resync_kill", 1000).await;
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "first run: {}", text(&out.stderr));
    let workload = spawn_workload(source_dsn.clone(), 1000);
    let out = weir_pg(&db, &source_dsn, &["resync", "--table", "public.orders"]);
    assert!(out.status.success(), "resync: {}", text(&out.stderr));
    let mut rng = Rng::new(11);
    let mut seen_resyncing = false;
    for attempt in 0..4 {
        let log = db.path(&format!("run-{attempt}.log"));
        let started = if attempt == 0 {
            "resync signal read"
        } else {
            "streaming from the replication slot"
        };
        kill_at_random(&db, &source_dsn, &log, started, &mut rng).await;
        let out = weir_pg(&db, &source_dsn, &["status", "--json"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        let state = status["snapshot"][0]["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            state == "resyncing" || state == "done",
            "the table is resyncing or done: {status}"
        );
        seen_resyncing |= state == "resyncing";
    }
    assert!(
        seen_resyncing,
        "a kill landed while the table was read again"
    );
    workload.await.expect("workload");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_same_rows(
        &source,
        "orders",
        &db.client().await,
        "analytics.fact_orders",
    )
    .await;
}

/// A `--where` that held on every row when it was asked for, then fails on a row
/// written since (`status::int` on a status that is not a number): the resync is given
/// up with an error in the log, and the stream goes on, rather than every run failing
/// on the same read for good.
#[tokio::test]
async fn a_resync_whose_condition_fails_on_a_later_row_is_given_up_not_wedged() {
    let (db, source_dsn, source) = setup("resync_wedge", 500).await;
    source
        .batch_execute("UPDATE orders SET status = '1'")
        .await
        .expect("numeric statuses");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "resync",
            "--table",
            "public.orders",
            "--where",
            "status::int > 0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    source
        .batch_execute("UPDATE orders SET status = 'LATE' WHERE id = 7")
        .await
        .expect("a row the condition cannot take");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("the resync is given up"), "{stderr}");
    assert!(!stderr.contains("LATE"), "a row value in the log: {stderr}");
    crate::postgres_source::assert_same_rows(
        &source,
        "orders",
        &db.client().await,
        "analytics.fact_orders",
    )
    .await;
}

/// Two pipelines read the same source table, each through its own slot: a resync one
/// of them asks for is read by it alone, the other passes the signal over.
#[tokio::test(flavor = "multi_thread")]
async fn a_resync_is_read_by_the_pipeline_that_asked_for_it_alone() {
    let (db, source_dsn, _source) = setup("resync_own", 1000).await;
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "first run: {}", text(&out.stderr));
    let other = db.path("other.toml");
    std::fs::write(
        &other,
        postgres_config(
            "resync_own_b",
            "[engine]\nflush_interval_ms = 100",
            &OrdersTable::postgres("analytics.fact_orders_b").to_string(),
        )
        .replace("path = \"stage\"", "path = \"stage_b\""),
    )
    .expect("config");
    let weir_b = |args: &[&str]| {
        let mut all = vec!["--config", other.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(&all)
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .env("WEIR_TARGET_DSN", &db.dsn)
            .output()
            .expect("weir");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stderr)
    };
    weir_b(&["init"]);
    weir_b(&["run", "--once"]);
    weir_b(&["resync", "--table", "public.orders"]);
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("resync signal read"), "{stderr}");
    let logged = weir_b(&["run", "--once"]);
    assert!(logged.contains("resync signal read"), "{logged}");
}
