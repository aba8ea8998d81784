//! End-to-end behaviour of `weir run` on a JSON-lines feed.

use std::time::Duration;

use weir::config::{Config, Dsn};
use weir::partition::Partition;
use weir::pipeline::Pipeline;

use crate::harness::{
    Order, TestDb, assert_target_matches, envelope, file_len, lineage, orders_workload, text,
};

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_changes_over_thirty_days_land_exactly() {
    let db = TestDb::new("e2e_10k").await;
    let (lines, model) = orders_workload(1, 10_000, 30);
    db.write_feed(&lines);
    db.write_config("", "", "parallelism = 4");
    db.weir_ok(&["init"]);
    let out = db.weir_ok(&["run", "--once"]);
    assert!(out.contains("wrote"), "{out}");
    // One pass over the whole feed writes each final row once: fewer rows written than
    // changes staged (updates and deletes coalesce).
    let amplification: f64 = out
        .split("write amplification: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no write amplification in: {out}"));
    assert!(amplification > 0.0 && amplification <= 1.0, "{out}");
    let client = db.client().await;
    assert_target_matches(&client, "analytics.fact_orders", &model).await;

    // Lineage: one row per non-empty partition, with the partition's row count.
    let counts = client
        .query(
            "SELECT order_date::text, count(*) FROM analytics.fact_orders GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .expect("counts");
    let lineage = lineage(&client).await;
    for r in &counts {
        let (day, n): (String, i64) = (r.get(0), r.get(1));
        assert!(
            lineage
                .iter()
                .any(|(p, rows, _, _)| *p == day && *rows == n),
            "lineage of {day} should say {n} rows: {lineage:?}"
        );
    }
    assert!(counts.len() > 25, "the workload spreads over 30 days");

    // Nothing is dirty after a drained run, and a second run writes nothing.
    let status = db.weir_ok(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status).expect("status json");
    assert_eq!(
        status["dirty_partitions"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert_eq!(
        status["position"].as_u64(),
        Some(file_len(&db.path("feed.jsonl")))
    );
    let again = db.weir_ok(&["run", "--once"]);
    assert!(
        again.contains("staged 0 transactions") && again.contains("wrote 0 partitions"),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restated_order_moves_to_its_new_partition_exactly_once() {
    let db = TestDb::new("restatement").await;
    let order = Order {
        id: 7,
        customer: "ada".into(),
        order_date: Some("2026-03-01".into()),
        amount: "10.00".into(),
        status: "new".into(),
    };
    let neighbour = Order {
        id: 8,
        order_date: Some("2026-03-01".into()),
        ..order.clone()
    };
    db.write_feed(&[
        envelope("c", Some(1), None, Some(&order)),
        envelope("c", Some(1), None, Some(&neighbour)),
    ]);
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let before = lineage(&client).await;
    assert_eq!(
        before
            .iter()
            .map(|l| (l.0.as_str(), l.1))
            .collect::<Vec<_>>(),
        [("2026-03-01", 2)]
    );

    let moved = Order {
        order_date: Some("2026-03-02".into()),
        ..order.clone()
    };
    // REPLICA IDENTITY DEFAULT: the before image holds only the key, so the old
    // partition must come from the stage's keys index.
    let key_only = serde_json::json!({"id": 7});
    let line = envelope("u", None, Some(&order), Some(&moved))
        .replace(&order.image().to_string(), &key_only.to_string());
    db.append_feed(&[line]);
    db.weir_ok(&["run", "--once"]);
    let rows = client
        .query(
            "SELECT order_date::text, count(*) FROM analytics.fact_orders WHERE id = 7 GROUP BY 1",
            &[],
        )
        .await
        .expect("query");
    let placement: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(placement, [("2026-03-02".to_owned(), 1)]);
    let after = lineage(&client).await;
    assert_eq!(
        after
            .iter()
            .map(|l| (l.0.as_str(), l.1))
            .collect::<Vec<_>>(),
        [("2026-03-01", 1), ("2026-03-02", 1)]
    );
    assert!(
        after[0].3 > before[0].3,
        "the old partition was rewritten at a newer generation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rewriting_partitions_twice_changes_nothing() {
    let db = TestDb::new("double_run").await;
    let (lines, model) = orders_workload(2, 3_000, 10);
    db.write_feed(&lines);
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let dump = || async {
        client
            .query("SELECT id, customer, order_date::text, amount::text, status FROM analytics.fact_orders ORDER BY id", &[])
            .await
            .expect("dump")
            .iter()
            .map(|r| format!("{:?}", (r.get::<_, i64>(0), r.get::<_, String>(1), r.get::<_, Option<String>>(2), r.get::<_, String>(3), r.get::<_, String>(4))))
            .collect::<Vec<_>>()
    };
    let first_rows = dump().await;
    let first_lineage = lineage(&client).await;

    let config = Config::load(&db.config_path()).expect("config");
    let pipeline = Pipeline::open(config, Dsn::new(db.dsn.clone()))
        .await
        .expect("open pipeline");
    let partitions: Vec<Partition> = first_lineage
        .iter()
        .map(|l| Partition::Key(l.0.clone()))
        .collect();
    let once = pipeline
        .rewrite_partitions("public.orders", &partitions)
        .await
        .expect("rewrite");
    let twice = pipeline
        .rewrite_partitions("public.orders", &partitions)
        .await
        .expect("rewrite again");
    assert_eq!(once, twice, "same rows and checksums from both rewrites");
    assert_eq!(dump().await, first_rows);
    assert_eq!(
        lineage(&client).await,
        first_lineage,
        "identical lineage: counts, checksums, generations"
    );
    let duplicates: i64 = client
        .query_one("SELECT count(*) FROM (SELECT id FROM analytics.fact_orders GROUP BY id HAVING count(*) > 1) d", &[])
        .await
        .expect("dupes")
        .get(0);
    assert_eq!(duplicates, 0);
    assert_target_matches(&client, "analytics.fact_orders", &model).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_part_way_through_a_file_then_rerun_is_exact() {
    let db = TestDb::new("resume").await;
    let (lines, model) = orders_workload(3, 40_000, 30);
    db.write_feed(&lines);
    // Small synced batches and frequent partition writes, so a kill lands mid-work.
    db.write_config(
        "",
        "",
        "batch_transactions_max = 20\nflush_interval_ms = 50",
    );
    db.weir_ok(&["init"]);
    let feed_len = file_len(&db.path("feed.jsonl"));
    let mut kills = 0;
    let mut partial_positions = Vec::new();
    for delay_ms in [400u64, 900, 1500, 2200, 3000] {
        // Live mode (no --once) tails the file; it is killed while staging or writing.
        let mut child = db
            .weir_command(&["run"])
            .stderr(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn weir");
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        if child.try_wait().expect("poll").is_none() {
            child.kill().expect("SIGKILL");
            kills += 1;
        }
        child.wait().expect("reap");
        let status: serde_json::Value =
            serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
        let position = status["position"].as_u64().unwrap_or(0);
        if position < feed_len {
            partial_positions.push(position);
        }
    }
    assert!(
        kills >= 3,
        "weir should have been killed mid-run at least 3 times, was {kills}"
    );
    assert!(
        !partial_positions.is_empty(),
        "at least one kill should land before the feed was fully staged"
    );
    let out = db.weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let client = db.client().await;
    assert_target_matches(&client, "analytics.fact_orders", &model).await;
}
