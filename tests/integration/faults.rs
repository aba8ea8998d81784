//! Failpoints (the test build has the engine's `failpoints` feature; see
//! engine/src/faults.rs): each step of the write path is made to fail by a panic, by an
//! error and by a process abort. The failing `run` must stop (its exit shows the fault
//! fired), and the next `run`, with more changes, must end with an exact target:
//! nothing missing, nothing extra. Each test appends its counts to the crash suite's log
//! (`WEIR_CRASH_SUITE_LOG`).
//!
//! The last test runs the deliberately broken build (`ack-before-stage`: the source is
//! acknowledged before the batch is staged) under kill -9 against a PostgreSQL source,
//! and requires the oracle to find rows missing: the suite catches what it claims to.

use std::collections::BTreeMap;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio_postgres::Client;
use weir_core::fixtures::OrdersTable;

use crate::harness::{Model, Rng, TestDb, Workload, orders_table, text};
use crate::plugins::plugin;
use crate::postgres_source::{dump, source_fixture, weir_pg};

/// (name, FAILPOINTS action): a panic, an error three times, a process abort.
const ACTIONS: [(&str, &str); 3] = [
    ("panic", "panic"),
    ("error", "3*return"),
    ("abort", "return(abort)"),
];

/// Appends one record to the crash suite's log, if the test command set one.
pub fn record(
    test: &str,
    kills: usize,
    failpoints: usize,
    outages: usize,
    missing: usize,
    extra: usize,
) {
    let Some(path) = std::env::var_os("WEIR_CRASH_SUITE_LOG") else {
        return;
    };
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open the crash suite log");
    writeln!(
        f,
        "kills={kills} failpoints={failpoints} outages={outages} missing={missing} extra={extra} test={test}"
    )
    .expect("write the crash suite log");
}

/// An order's values but its id: customer, order date, amount, status (lower case).
type Image = (String, Option<String>, String, String);

/// Rows missing from and extra in `table` against the model, counted (a stale version
/// counts as one of each). With a plugin, the target's status is the upper-cased one.
async fn diff(client: &Client, table: &str, model: &Model) -> (usize, usize) {
    let rows = client
        .query(
            &format!(
                "SELECT id, customer, order_date::text, amount::text, lower(status) FROM {table}"
            ),
            &[],
        )
        .await
        .expect("read the target");
    let mut got: BTreeMap<i64, Vec<Image>> = BTreeMap::new();
    for r in &rows {
        got.entry(r.get(0))
            .or_default()
            .push((r.get(1), r.get(2), r.get(3), r.get(4)));
    }
    let (mut missing, mut extra) = (0, 0);
    for (id, want) in &model.rows {
        let want = (
            want.customer.clone(),
            want.order_date.clone(),
            want.amount.clone(),
            want.status.clone(),
        );
        match got.get(id).map(Vec::as_slice) {
            Some([one]) if *one == want => {}
            Some(many) => {
                missing += usize::from(!many.contains(&want));
                extra += many.len() - usize::from(many.contains(&want));
            }
            None => missing += 1,
        }
    }
    extra += got
        .iter()
        .filter(|(id, _)| !model.rows.contains_key(id))
        .map(|(_, v)| v.len())
        .sum::<usize>();
    (missing, extra)
}

fn assert_failed_by_fault(out: &Output, context: &str) {
    use std::os::unix::process::ExitStatusExt as _;
    let stderr = text(&out.stderr);
    let aborted = out.status.signal() == Some(6);
    assert!(
        !out.status.success()
            && (aborted || stderr.contains("injected fault") || stderr.contains("failpoint")),
        "{context}: the run must fail by the injected fault ({}):\n{stderr}",
        out.status
    );
}

/// Arms `point` with each action in turn on a JSON-lines feed of orders, through the
/// identity or the Rust orders plugin; the next run must be exact.
async fn failpoint_suite(point: &str, with_plugin: bool) {
    let mut total = (0, 0);
    for (i, (name, action)) in ACTIONS.iter().enumerate() {
        let db = TestDb::new(&format!("fp_{}_{name}", point.replace('-', "_"))).await;
        let extra = if with_plugin {
            format!(
                "plugin = {:?}\n[table.plugin_config]\nrate = \"1\"",
                plugin("orders-rust").display().to_string()
            )
        } else {
            String::new()
        };
        db.write_feed_config(
            "",
            "flush_interval_ms = 100\nparallelism = 2",
            &orders_table("public.orders", "analytics.fact_orders", &extra),
        );
        let mut workload = Workload::new(71 + i as u64, 5);
        db.write_feed(&workload.lines(300, 4));
        db.weir_ok(&["init"]);
        let context = format!("failpoint {point}, {name} ({action})");
        let out = db
            .weir_command(&["run", "--once"])
            .env("FAILPOINTS", format!("{point}={action}"))
            .output()
            .expect("run weir");
        assert_failed_by_fault(&out, &context);
        db.append_feed(&workload.lines(100, 4));
        let out = db.weir(&["run", "--once"]);
        assert!(
            out.status.success(),
            "{context}: the next run failed:\n{}",
            text(&out.stderr)
        );
        let (missing, extra) =
            diff(&db.client().await, "analytics.fact_orders", &workload.model).await;
        assert!(
            missing == 0 && extra == 0,
            "{context}: {missing} rows missing, {extra} extra after the restart"
        );
        total.0 += missing;
        total.1 += extra;
    }
    record(
        &format!("failpoint {point}"),
        0,
        ACTIONS.len(),
        0,
        total.0,
        total.1,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_stage_before_ack() {
    failpoint_suite("stage-before-ack", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_stage_after_ack() {
    failpoint_suite("stage-after-ack", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_target_after_delete() {
    failpoint_suite("target-after-delete", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_target_after_copy() {
    failpoint_suite("target-after-copy", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_target_after_commit() {
    failpoint_suite("target-after-commit", false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_plugin_call() {
    failpoint_suite("plugin-call", true).await;
}

/// The watermark snapshot of a populated PostgreSQL table fails at its first chunk; the
/// next run resumes it and the target equals the source.
#[tokio::test(flavor = "multi_thread")]
async fn failpoint_snapshot_chunk() {
    snapshot_failpoint_suite("snapshot-chunk", "watermarks", "snapshot").await;
}

/// The first load of a populated PostgreSQL table (an exported snapshot read in ranges)
/// fails at its first range; the next run reads it again and the target equals the
/// source.
#[tokio::test(flavor = "multi_thread")]
async fn failpoint_load_range() {
    snapshot_failpoint_suite("load-range", "export", "load").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failpoint_load_ingest() {
    snapshot_failpoint_suite("load-ingest", "export", "ingest").await;
}

/// Each action at failpoint `point` during the first `run --once` of a populated table
/// read by `snapshot_method = method`, then changes, then a run that ends exact.
async fn snapshot_failpoint_suite(point: &str, method: &str, prefix: &str) {
    let (mut missing_total, mut extra_total) = (0, 0);
    for (name, action) in ACTIONS {
        let db = TestDb::new(&format!("fp_{prefix}_{name}")).await;
        let (source_dsn, source) = source_fixture(
            &db,
            &format!("fp_{prefix}_src_{name}"),
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
             INSERT INTO orders SELECT g, 'c' || (g % 300), DATE '2026-03-01' + (g % 10), g % 10000, 'new' FROM generate_series(1, 3000) g;",
            &format!("snapshot_chunk_rows = 500\nsnapshot_method = \"{method}\""),
            &OrdersTable::postgres("analytics.fact_orders").body(),
        )
        .await;
        let out = weir_pg(&db, &source_dsn, &["init"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let context = format!("failpoint {point}, {name} ({action})");
        let out = db
            .weir_command(&["run", "--once"])
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .env("FAILPOINTS", format!("{point}={action}"))
            .output()
            .expect("run weir");
        assert_failed_by_fault(&out, &context);
        source
            .batch_execute(
                "UPDATE orders SET status = 'paid', order_date = order_date + 1 WHERE id % 7 = 0;
                 DELETE FROM orders WHERE id % 11 = 0;
                 INSERT INTO orders SELECT g, 'late', DATE '2026-03-04', 1, 'new' FROM generate_series(5001, 5100) g;",
            )
            .await
            .expect("more changes");
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        assert!(
            out.status.success(),
            "{context}: the next run failed:\n{}",
            text(&out.stderr)
        );
        let (want, got) = (
            dump(&source, "orders").await,
            dump(&db.client().await, "analytics.fact_orders").await,
        );
        let missing = want
            .iter()
            .filter(|r| got.binary_search(r).is_err())
            .count();
        let extra = got.len() + missing - want.len();
        assert!(
            missing == 0 && extra == 0,
            "{context}: {missing} rows missing, {extra} extra"
        );
        missing_total += missing;
        extra_total += extra;
    }
    record(
        &format!("failpoint {point}"),
        0,
        ACTIONS.len(),
        0,
        missing_total,
        extra_total,
    );
}

/// The broken build: acknowledging the source before the batch is staged. Under kill -9
/// with inserts flowing, some acknowledged transactions are never staged: the next
/// start refuses (the slot is past its stage's position), and without that check the
/// oracle (the source table itself) finds them missing after a correct build's drain.
/// Fails if neither ever happens.
#[tokio::test(flavor = "multi_thread")]
async fn the_suite_catches_a_build_that_acknowledges_before_staging() {
    let db = TestDb::new("fp_broken_ack").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "fp_broken",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);",
        "[engine]\nflush_interval_ms = 100",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut rng = Rng::new(97);
    let mut kills = 0;
    let (mut missing, mut slot_ahead) = (0, false);
    let mut next_id = 0i64;
    for _round in 0..3 {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (dsn, stop) = (source_dsn.clone(), std::sync::Arc::clone(&stop));
            let mut id = next_id;
            tokio::spawn(async move {
                let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                    .await
                    .expect("writer");
                tokio::spawn(connection);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    id += 1;
                    client
                        .execute(
                            "INSERT INTO orders VALUES ($1::bigint, 'w', DATE '2026-03-01' + ($1::bigint % 5)::int, 1, 'new')",
                            &[&id],
                        )
                        .await
                        .expect("insert");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                id
            })
        };
        for _ in 0..10 {
            let mut child = db
                .weir_command(&["run"])
                .env("WEIR_SOURCE_DSN", &source_dsn)
                .env("FAILPOINTS", "ack-before-stage=return")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn weir run");
            tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
            child.kill().expect("kill -9");
            child.wait().expect("reap");
            kills += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        next_id = writer.await.expect("writer");
        // Drain with a correct build and compare with the source. The correct build may
        // refuse first: the broken one let the slot confirm past its stage, which a
        // correct build detects at start (the changes in between are lost to it).
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        if !out.status.success() {
            let stderr = text(&out.stderr);
            assert!(
                stderr.contains("has confirmed the feed up to")
                    && stderr.contains("past this stage's position"),
                "{stderr}"
            );
            slot_ahead = true;
            break;
        }
        let want = dump(&source, "orders").await;
        let got = dump(&db.client().await, "analytics.fact_orders").await;
        missing = want
            .iter()
            .filter(|r| got.binary_search(r).is_err())
            .count();
        if missing > 0 {
            break;
        }
    }
    assert!(
        missing > 0 || slot_ahead,
        "{kills} kills of a build that acknowledges before staging lost nothing: the suite would not catch it"
    );
    eprintln!(
        "broken build (ack-before-stage): after {kills} kills, slot ahead of the stage: {slot_ahead}, {missing} rows missing"
    );
}
