//! Other grains, other feeds, and refused target tables.

use std::io::Write as _;
use std::process::Stdio;

use serde_json::json;

use crate::harness::{Order, TestDb, assert_target_matches, envelope, orders_workload, text};

fn event_line(
    op: &str,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> String {
    let line = json!({"op": op, "before": before, "after": after, "source": {"schema": "app", "table": "events"}});
    format!("{line}\n")
}

/// Hour partitions over a timestamptz column (with offsets in the feed), and a row
/// moved across an hour and a day boundary.
#[tokio::test(flavor = "multi_thread")]
async fn hour_partitions_over_timestamptz_rewrite_both_hours() {
    let db = TestDb::new("grain_hour").await;
    std::fs::write(
        db.config_path(),
        r#"[source]
kind = "jsonl"
path = "feed.jsonl"
[stage]
path = "stage"
[target]
kind = "postgres"
dsn_env = "WEIR_TARGET_DSN"
[[table]]
source = "app.events"
target = "public.events_by_hour"
key = ["tenant", "seq"]
partition_by = "at"
grain = "hour"
columns = { tenant = "text", seq = "integer", at = "timestamptz", payload = "jsonb", weight = "double precision", ok = "boolean", blob = "bytea" }
"#,
    )
    .expect("config");
    let ev = |seq: i64, at: &str| json!({"tenant": "t1", "seq": seq, "at": at, "payload": {"k": [1, 2]}, "weight": 0.5, "ok": true, "blob": "AAEC"});
    let lines = [
        event_line("c", None, Some(ev(1, "2026-03-01T23:30:00+00:00"))),
        event_line("c", None, Some(ev(2, "2026-03-02T00:10:00+01:00"))), // 2026-03-01T23:10Z
        event_line("c", None, Some(ev(3, "2026-03-02T00:00:00Z"))),
        event_line(
            "u",
            Some(json!({"tenant": "t1", "seq": 1})),
            Some(ev(1, "2026-03-02T00:59:59.999999Z")),
        ),
    ];
    std::fs::write(db.path("feed.jsonl"), lines.concat()).expect("feed");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let rows: Vec<(i32, String, String, String)> = client
        .query(
            "SELECT seq, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), payload::text, encode(blob, 'hex') FROM events_by_hour ORDER BY seq",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        rows,
        [
            (
                1,
                "2026-03-02T00:59:59.999999".to_owned(),
                "{\"k\": [1, 2]}".to_owned(),
                "000102".to_owned()
            ),
            (
                2,
                "2026-03-01T23:10:00.000000".to_owned(),
                "{\"k\": [1, 2]}".to_owned(),
                "000102".to_owned()
            ),
            (
                3,
                "2026-03-02T00:00:00.000000".to_owned(),
                "{\"k\": [1, 2]}".to_owned(),
                "000102".to_owned()
            ),
        ]
    );
    let partitions: Vec<(String, i64)> = client
        .query(
            "SELECT partition, row_count FROM weir.partitions ORDER BY 1",
            &[],
        )
        .await
        .expect("lineage")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        partitions,
        [
            ("2026-03-01T23".to_owned(), 1),
            ("2026-03-02T00".to_owned(), 2)
        ]
    );
}

/// Month and value grains through the same orders workload.
#[tokio::test(flavor = "multi_thread")]
async fn month_and_value_grains_land_exactly() {
    for (name, extra) in [
        ("grain_month", "grain = \"month\""),
        ("grain_value", "grain = \"value\"\n"),
    ] {
        let db = TestDb::new(name).await;
        db.write_config("", "", "");
        let config = std::fs::read_to_string(db.config_path())
            .expect("config")
            .replace("grain = \"day\"", extra);
        let config = if name == "grain_value" {
            config.replace(
                "partition_by = \"order_date\"",
                "partition_by = \"customer\"",
            )
        } else {
            config
        };
        std::fs::write(db.config_path(), config).expect("config");
        let (lines, model) = orders_workload(5, 2_000, 70);
        db.write_feed(&lines);
        db.weir_ok(&["init"]);
        db.weir_ok(&["run", "--once"]);
        let client = db.client().await;
        assert_target_matches(&client, "analytics.fact_orders", &model).await;
        let partitions: i64 = client
            .query_one("SELECT count(*) FROM weir.partitions", &[])
            .await
            .expect("q")
            .get(0);
        if name == "grain_month" {
            assert_eq!(
                partitions, 3,
                "70 days from March 1st span March, April, May"
            );
        } else {
            assert!(
                partitions > 100,
                "one partition per customer, got {partitions}"
            );
        }
    }
}

/// A feed on stdin: piping the same feed again stages nothing new; a longer feed
/// stages only what is past the position.
#[tokio::test(flavor = "multi_thread")]
async fn a_stdin_feed_resumes_when_piped_again() {
    let db = TestDb::new("stdin").await;
    db.write_config("", "", "");
    let config = std::fs::read_to_string(db.config_path())
        .expect("config")
        .replace("path = \"feed.jsonl\"", "path = \"-\"");
    std::fs::write(db.config_path(), config).expect("config");
    let (lines, model) = orders_workload(6, 1_500, 10);
    let (first, _) = lines.split_at(700);
    db.weir_ok(&["init"]);
    let pipe = |feed: String| {
        let mut child = db
            .weir_command(&["run", "--once"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(feed.as_bytes())
            .expect("write stdin");
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let out = pipe(first.concat());
    assert!(!out.contains("staged 0 transactions"), "{out}");
    let out = pipe(first.concat());
    assert!(
        out.contains("staged 0 transactions"),
        "the same feed again stages nothing: {out}"
    );
    pipe(lines.concat());
    let client = db.client().await;
    assert_target_matches(&client, "analytics.fact_orders", &model).await;
}

/// `init` refuses an existing target table whose columns differ, listing each difference.
#[tokio::test(flavor = "multi_thread")]
async fn init_refuses_a_mismatched_target_table_listing_the_differences() {
    let db = TestDb::new("mismatch").await;
    db.write_config("", "", "");
    db.write_feed(&[envelope(
        "c",
        None,
        None,
        Some(&Order {
            id: 1,
            customer: "a".into(),
            order_date: Some("2026-03-01".into()),
            amount: "1.00".into(),
            status: "new".into(),
        }),
    )]);
    let client = db.client().await;
    client
        .batch_execute("CREATE SCHEMA analytics; CREATE TABLE analytics.fact_orders (id integer, customer text, order_date date, amount numeric(12,2), note text)")
        .await
        .expect("create");
    let out = db.weir(&["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for want in [
        "does not match the configured columns",
        "column `id` is integer, config declares bigint",
        "column `status` (text, nullable) is missing: `weir init --allow-add-columns` adds it",
        "column `note` (text) is not among the columns Weir writes",
    ] {
        assert!(stderr.contains(want), "want `{want}` in: {stderr}");
    }
    // `run` refuses it too, and writes nothing.
    let out = db.weir(&["run", "--once"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("does not match the configured columns"),
        "{}",
        text(&out.stderr)
    );
    let rows: i64 = client
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("q")
        .get(0);
    assert_eq!(rows, 0);
}

/// `target_partitioning = "native"`: the same workload (inserts, updates, deletes,
/// partition moves, a NULL partition key) lands exactly as in a plain table, by day and
/// month (RANGE, a DEFAULT child for NULL) and by value (LIST), with one child table per
/// partition; running again changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn native_partitions_hold_exactly_what_a_plain_table_holds() {
    let mut workload = crate::harness::Workload::new(17, 40);
    let first = workload.lines(3_000, 5);
    let null_day = crate::harness::Order {
        id: 1_000_000,
        customer: "nobody".into(),
        order_date: None,
        amount: "1.00".into(),
        status: "new".into(),
    };
    let second = workload.lines(1_000, 5);
    let mut model = workload.model.clone();
    model.rows.insert(null_day.id, null_day.clone());
    for (name, grain, partition_by) in [
        ("native_day", "day", "order_date"),
        ("native_month", "month", "order_date"),
        ("native_value", "value", "customer"),
    ] {
        let mut contents = Vec::new();
        for layout in ["plain", "native"] {
            let db = TestDb::new(&format!("{name}_{layout}")).await;
            db.write_config("", &format!("target_partitioning = \"{layout}\""), "");
            let config = std::fs::read_to_string(db.config_path())
                .expect("config")
                .replace("grain = \"day\"", &format!("grain = \"{grain}\""))
                .replace(
                    "partition_by = \"order_date\"",
                    &format!("partition_by = \"{partition_by}\""),
                );
            std::fs::write(db.config_path(), config).expect("config");
            db.write_feed(&first);
            db.append_feed(&[crate::harness::envelope("c", None, None, Some(&null_day))]);
            db.weir_ok(&["init"]);
            db.weir_ok(&["run", "--once"]);
            db.append_feed(&second);
            db.weir_ok(&["run", "--once"]);
            let client = db.client().await;
            assert_target_matches(&client, "analytics.fact_orders", &model).await;
            let children: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_inherits WHERE inhparent = 'analytics.fact_orders'::regclass",
                    &[],
                )
                .await
                .expect("children")
                .get(0);
            if layout == "native" {
                assert!(
                    children > 2,
                    "{name}: one child per partition, got {children}"
                );
            } else {
                assert_eq!(children, 0);
            }
            let rows: Vec<String> = client
                .query(
                    "SELECT t::text FROM analytics.fact_orders t ORDER BY id",
                    &[],
                )
                .await
                .expect("rows")
                .iter()
                .map(|r| r.get(0))
                .collect();
            let again = db.weir_ok(&["run", "--once"]);
            assert!(again.contains("wrote 0 partitions"), "{again}");
            contents.push(rows);
        }
        assert_eq!(contents[0], contents[1], "{name}: plain and native differ");
    }
}

/// The grain changed the way the contract error advises (a new stage path): lineage of
/// the old grain's partitions is passed over by the new grain's backfill and verify,
/// which used to fail on it for good.
#[tokio::test(flavor = "multi_thread")]
async fn lineage_of_an_earlier_grain_does_not_stop_backfill_or_verify() {
    let db = TestDb::new("grain_changed").await;
    db.write_config("", "", "");
    let (lines, model) = orders_workload(5, 500, 70);
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let config = std::fs::read_to_string(db.config_path())
        .expect("config")
        .replace("grain = \"day\"", "grain = \"month\"")
        .replace("path = \"stage\"", "path = \"stage_month\"");
    std::fs::write(db.config_path(), config).expect("config");
    db.weir_ok(&["init", "--take-over"]);
    db.weir_ok(&["run", "--once"]);
    let window = [
        "--table",
        "public.orders",
        "--from",
        "2026-03",
        "--to",
        "2026-06",
    ];
    let out = db.weir(&[&["backfill"][..], &window[..]].concat());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("lineage lists partitions that are not partitions of this grain"),
        "{stderr}"
    );
    let out = db.weir(&[&["verify"][..], &window[..]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_target_matches(&db.client().await, "analytics.fact_orders", &model).await;
}

/// Rows in a target partition that neither the stage nor lineage knows (put there by
/// hand) fail `verify` over its window, and a backfill with `--allow-empty` empties it.
#[tokio::test(flavor = "multi_thread")]
async fn verify_sees_a_target_partition_nothing_else_knows() {
    let db = TestDb::new("grain_ghost").await;
    db.write_config("", "", "");
    let (lines, model) = orders_workload(5, 200, 30);
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute(
            "INSERT INTO analytics.fact_orders (id, customer, order_date, amount, status) \
             VALUES (999999, 'ghost', '2026-10-01', 1, 'new')",
        )
        .await
        .expect("a row by hand");
    let window = [
        "--table",
        "public.orders",
        "--from",
        "2026-09-01",
        "--to",
        "2027-01-01",
    ];
    let out = db.weir(&[&["verify"][..], &window[..]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("2026-10-01"),
        "{}",
        text(&out.stderr)
    );
    let out = db.weir(&[&["backfill"][..], &window[..], &["--allow-empty"][..]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = db.weir(&[&["verify"][..], &window[..]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_target_matches(&db.client().await, "analytics.fact_orders", &model).await;
}
