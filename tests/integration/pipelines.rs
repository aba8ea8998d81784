//! Several pipelines on one estate: one target table is written by one pipeline (a
//! source and its slot), whatever the source table's name; `weir init --take-over`
//! moves a table to another pipeline, whose writes the first then cannot make; two
//! pipelines started at once for one table cannot both claim it; a second pipeline
//! on another's slot, or writing a child partition of another's target, is refused.

use std::path::PathBuf;
use std::process::{Command, Output};

use weir_core::fixtures::{OrdersTable, jsonl_config, postgres_config};

use crate::harness::{TestDb, text};

/// A pipeline's config in its own folder of the test's (its stage beside it).
fn pipeline(db: &TestDb, name: &str, config: &str) -> PathBuf {
    let dir = db.path(name);
    std::fs::create_dir_all(&dir).expect("pipeline folder");
    let path = dir.join("weir.toml");
    std::fs::write(&path, config).expect("config");
    path
}

fn weir(db: &TestDb, config: &PathBuf, source_dsn: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .env("WEIR_TARGET_DSN", &db.dsn)
        .env("WEIR_SOURCE_DSN", source_dsn)
        .env("RUST_LOG", "warn");
    cmd
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

fn refused(out: &Output, says: &str) {
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "not refused: {stderr}");
    assert!(stderr.contains(says), "{stderr}");
}

const ORDERS: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
     INSERT INTO orders SELECT g, 'c' || g, date '2026-03-01' + g % 4, g, 'new' FROM generate_series(1, 40) g;";

fn orders_config(slot: &str) -> String {
    postgres_config(
        slot,
        "",
        &OrdersTable::postgres("analytics.fact_orders").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_slot_on_the_same_table_is_another_pipeline_until_it_takes_over() {
    let db = TestDb::new("pipes_second_slot_target").await;
    let (source_dsn, source) = crate::harness::source_db("pipes_second_slot", ORDERS).await;
    let first = pipeline(&db, "first", &orders_config("pipes_first"));
    let second = pipeline(&db, "second", &orders_config("pipes_second"));
    ok(&weir(&db, &first, &source_dsn, &["init"])
        .output()
        .expect("init"));
    ok(&weir(&db, &first, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    // The same source table, through another slot (a copied config), is refused.
    refused(
        &weir(&db, &second, &source_dsn, &["init"])
            .output()
            .expect("init"),
        "is written by another pipeline: postgres:slot=pipes_first of postgres:",
    );
    // Taken over: the second writes, the first's next start and writes are refused.
    ok(&weir(&db, &second, &source_dsn, &["init", "--take-over"])
        .output()
        .expect("take over"));
    source
        .batch_execute("UPDATE orders SET status = 'second' WHERE id = 1")
        .await
        .expect("change");
    ok(&weir(&db, &second, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    refused(
        &weir(&db, &first, &source_dsn, &["run", "--once"])
            .output()
            .expect("run"),
        "is written by another pipeline: postgres:slot=pipes_second",
    );
    let status = weir(&db, &first, &source_dsn, &["status"])
        .output()
        .expect("status");
    assert!(
        text(&status.stdout).contains("taken over: analytics.fact_orders is written by stage"),
        "{}",
        text(&status.stdout)
    );
    let target = db.client().await;
    let status: String = target
        .query_one("SELECT status FROM analytics.fact_orders WHERE id = 1", &[])
        .await
        .expect("row")
        .get(0);
    assert_eq!(status, "second");
    // A slot is one pipeline's feed: a third config on the second's slot, writing
    // another table, is refused.
    let third = pipeline(
        &db,
        "third",
        &postgres_config(
            "pipes_second",
            "",
            &OrdersTable::postgres("analytics.other_orders").to_string(),
        ),
    );
    refused(
        &weir(&db, &third, &source_dsn, &["init"])
            .output()
            .expect("init"),
        "postgres:slot=pipes_second is already the feed of another pipeline",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pipelines_started_at_once_for_one_table_cannot_both_claim_it() {
    let db = TestDb::new("pipes_race_target").await;
    let (one_dsn, _one) = crate::harness::source_db("pipes_race_one", ORDERS).await;
    let (two_dsn, _two) = crate::harness::source_db("pipes_race_two", ORDERS).await;
    let one = pipeline(&db, "one", &orders_config("pipes_race_one"));
    let two = pipeline(&db, "two", &orders_config("pipes_race_two"));
    let spawn = |config: &PathBuf, dsn: &str| {
        weir(&db, config, dsn, &["init"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("init")
    };
    let (a, b) = (spawn(&one, &one_dsn), spawn(&two, &two_dsn));
    let (a, b) = (
        a.wait_with_output().expect("one"),
        b.wait_with_output().expect("two"),
    );
    assert!(
        a.status.success() != b.status.success(),
        "exactly one claims the table:\n{}\n{}",
        text(&a.stderr),
        text(&b.stderr)
    );
    let loser = if a.status.success() { &b } else { &a };
    refused(loser, "is written by another pipeline");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_partition_of_another_pipelines_native_target_is_refused() {
    let db = TestDb::new("pipes_child_target").await;
    let (source_dsn, _source) = crate::harness::source_db("pipes_child", ORDERS).await;
    let owner = pipeline(
        &db,
        "owner",
        &postgres_config(
            "pipes_child",
            "",
            &OrdersTable::postgres("analytics.fact_orders")
                .extra("target_partitioning = \"native\"")
                .to_string(),
        ),
    );
    ok(&weir(&db, &owner, &source_dsn, &["init"])
        .output()
        .expect("init"));
    ok(&weir(&db, &owner, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    let target = db.client().await;
    let child: String = target
        .query_one(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = 'analytics.fact_orders'::regclass ORDER BY 1 LIMIT 1",
            &[],
        )
        .await
        .expect("a child")
        .get(0);
    let other = pipeline(
        &db,
        "other",
        &jsonl_config(
            "",
            "",
            &OrdersTable::jsonl(&format!("analytics.{child}")).to_string(),
        ),
    );
    std::fs::write(db.path("other/feed.jsonl"), "").expect("feed");
    refused(
        &weir(&db, &other, &source_dsn, &["init"])
            .output()
            .expect("init"),
        "(through analytics.fact_orders, in the same partition tree) is written by another pipeline",
    );
}

/// A stage made anew under another partition column (or a table moved to a pipeline
/// that partitions it otherwise) cannot find the rows of the old partitions: rows
/// deleted in between would stay for good. Refused until the target is emptied.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_stage_under_another_partition_column_is_refused_until_the_target_is_emptied() {
    let db = TestDb::new("pipes_repartition_target").await;
    let (source_dsn, source) = crate::harness::source_db("pipes_repartition", ORDERS).await;
    let by_day = pipeline(&db, "by_day", &orders_config("pipes_by_day"));
    ok(&weir(&db, &by_day, &source_dsn, &["init"])
        .output()
        .expect("init"));
    ok(&weir(&db, &by_day, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    source
        .batch_execute("DELETE FROM orders WHERE id <= 5")
        .await
        .expect("delete");
    let by_status = pipeline(
        &db,
        "by_status",
        &postgres_config(
            "pipes_by_status",
            "",
            "[[table]]\nsource = \"public.orders\"\ntarget = \"analytics.fact_orders\"\nkey = [\"id\"]\npartition_by = \"status\"\ngrain = \"value\"\n",
        ),
    );
    let out = weir(&db, &by_status, &source_dsn, &["init", "--take-over"])
        .output()
        .expect("init");
    refused(
        &out,
        "holds partitions another stage of this source wrote under another partitioning (2026-03-01, 2026-03-02, 2026-03-03, 2026-03-04: not partitions of `status` by value)",
    );
    let target = db.client().await;
    target
        .batch_execute(
            "TRUNCATE analytics.fact_orders; DELETE FROM weir.partitions WHERE target_table = 'analytics.fact_orders';",
        )
        .await
        .expect("empty the target as the error says");
    ok(
        &weir(&db, &by_status, &source_dsn, &["init", "--take-over"])
            .output()
            .expect("init"),
    );
    ok(&weir(&db, &by_status, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    let count: i64 = target
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 35);
}

/// A slot made anew under a claimed feed's name (a clone of the source server has no
/// slots; a lost slot made again) is not taken for the stage that claimed the table:
/// `init` needs `--take-over`, after which the old stage's start is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_slot_made_anew_under_a_claimed_name_takes_over_only_when_told() {
    let db = TestDb::new("pipes_slot_anew_target").await;
    let (source_dsn, source) = crate::harness::source_db("pipes_slot_anew", ORDERS).await;
    let first = pipeline(&db, "first", &orders_config("pipes_anew"));
    ok(&weir(&db, &first, &source_dsn, &["init"])
        .output()
        .expect("init"));
    ok(&weir(&db, &first, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    source
        .batch_execute("SELECT pg_drop_replication_slot('pipes_anew')")
        .await
        .expect("drop the slot");
    let second = pipeline(&db, "second", &orders_config("pipes_anew"));
    refused(
        &weir(&db, &second, &source_dsn, &["init"])
            .output()
            .expect("init"),
        "this init starts its feed anew",
    );
    ok(&weir(&db, &second, &source_dsn, &["init", "--take-over"])
        .output()
        .expect("take over"));
    ok(&weir(&db, &second, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    refused(
        &weir(&db, &first, &source_dsn, &["run", "--once"])
            .output()
            .expect("run"),
        "is written by another stage",
    );
}

/// Taken over while the old pipeline runs live, writing many small partitions (merged
/// in groups, one transaction for several): none of its writes lands after the
/// take-over.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_refuses_the_live_pipelines_grouped_writes() {
    let db = TestDb::new("pipes_take_live_target").await;
    let (source_dsn, source) = crate::harness::source_db("pipes_take_live", ORDERS).await;
    let first = pipeline(&db, "first", &orders_config("pipes_live_a"));
    ok(&weir(&db, &first, &source_dsn, &["init"])
        .output()
        .expect("init"));
    let log = db.path("first/run.log");
    let mut live = crate::harness::Reaped(
        weir(&db, &first, &source_dsn, &["run"])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("run"),
    );
    let target = db.client().await;
    let stage_of_first: String = loop {
        let row = target
            .query_opt(
                "SELECT stage_id FROM weir.claims WHERE target_table = 'analytics.fact_orders' AND stage_id <> ''",
                &[],
            )
            .await
            .expect("claim");
        if let Some(row) = row {
            break row.get(0);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // Changes to every day, a few at a time: small merges, grouped.
    let touch = "UPDATE orders SET amount = amount + 1 WHERE id % 4 = 0";
    source.batch_execute(touch).await.expect("changes");
    let second = pipeline(&db, "second", &orders_config("pipes_live_b"));
    ok(&weir(&db, &second, &source_dsn, &["init", "--take-over"])
        .output()
        .expect("take over"));
    for _ in 0..5 {
        source.batch_execute(touch).await.expect("changes");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("is written by another pipeline")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the first was not refused: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = live.0.kill();
    let late: i64 = target
        .query_one(
            "SELECT count(*) FROM weir.partitions p, weir.claims c \
             WHERE p.target_table = c.target_table AND p.stage_id = $1 AND p.written_at > c.claimed_at",
            &[&stage_of_first],
        )
        .await
        .expect("lineage")
        .get(0);
    assert_eq!(late, 0, "the first wrote after the take-over");
    ok(&weir(&db, &second, &source_dsn, &["run", "--once"])
        .output()
        .expect("run"));
    crate::postgres_source::assert_same_rows(&source, "orders", &target, "analytics.fact_orders")
        .await;
}
