//! Bad records: each is stopped on with a clear message, or kept in the dead-letter
//! table, never skipped silently.

use crate::harness::{Order, TestDb, envelope, text};

fn order(id: i64, day: Option<&str>) -> Order {
    Order {
        id,
        customer: "c".into(),
        order_date: day.map(str::to_owned),
        amount: "1.00".into(),
        status: "new".into(),
    }
}

/// (name, bad line, expected message)
fn cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    vec![
        (
            "malformed",
            b"{\"op\": \"c\", \"after\": {\n".to_vec(),
            "malformed JSON",
        ),
        (
            "unknown_op",
            envelope("x", None, None, Some(&order(50, Some("2026-03-01")))).into_bytes(),
            "unknown op `x`",
        ),
        (
            "missing_key",
            envelope("c", None, None, Some(&order(51, Some("2026-03-01"))))
                .replace("\"id\":51,", "")
                .into_bytes(),
            "missing key column `id`",
        ),
        (
            "invalid_utf8",
            b"{\"op\":\"c\",\"after\":{\"id\":52,\"customer\":\"\xff\xfe\"}}\n".to_vec(),
            "not valid UTF-8",
        ),
    ]
}

/// A feed of a good line, the bad line, and a good line; then `weir init`.
fn write_feed_around(db: &TestDb, bad: &[u8]) {
    let mut feed = envelope("c", None, None, Some(&order(1, Some("2026-03-01")))).into_bytes();
    feed.extend_from_slice(bad);
    feed.extend_from_slice(
        envelope("c", None, None, Some(&order(2, Some("2026-03-02")))).as_bytes(),
    );
    std::fs::write(db.path("feed.jsonl"), &feed).expect("feed");
    db.weir_ok(&["init"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_records_stop_the_run_and_name_the_line() {
    for (name, bad, want) in cases() {
        let db = TestDb::new(&format!("bad_fail_{name}")).await;
        db.write_config("", "", "");
        write_feed_around(&db, &bad);
        let out = db.weir(&["run", "--once"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("feed.jsonl:2: ") && stderr.contains(want),
            "{name}: want `{want}` at line 2 in: {stderr}"
        );
        assert!(
            stderr.contains("on_bad_record = \"dead-letter\""),
            "{name}: the message says what to do: {stderr}"
        );
        // Nothing after the bad line was staged: the position stops before it.
        let status: serde_json::Value =
            serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
        let first_line_len =
            envelope("c", None, None, Some(&order(1, Some("2026-03-01")))).len() as u64;
        assert_eq!(status["position"].as_u64(), Some(first_line_len), "{name}");
        // Running again stops at the same line: it is not skipped.
        assert_eq!(db.weir(&["run", "--once"]).status.code(), Some(1), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_records_go_to_the_dead_letter_table_and_the_rest_flows() {
    for (name, bad, want) in cases() {
        let db = TestDb::new(&format!("bad_dlq_{name}")).await;
        db.write_config("on_bad_record = \"dead-letter\"", "", "");
        write_feed_around(&db, &bad);
        db.weir_ok(&["run", "--once"]);
        db.weir_ok(&["run", "--once"]);
        let client = db.client().await;
        let ids: Vec<i64> = client
            .query("SELECT id FROM analytics.fact_orders ORDER BY id", &[])
            .await
            .expect("ids")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(ids, [1, 2], "{name}");
        let dead = client
            .query("SELECT line, reason, raw FROM weir.dead_letter", &[])
            .await
            .expect("dead letters");
        assert_eq!(
            dead.len(),
            1,
            "{name}: exactly one dead letter, even after two runs"
        );
        let (line, reason, raw): (Option<i64>, String, Vec<u8>) =
            (dead[0].get(0), dead[0].get(1), dead[0].get(2));
        assert_eq!(line, Some(2), "{name}");
        assert!(reason.contains(want), "{name}: {reason}");
        assert_eq!(raw, bad, "{name}: the raw line is kept exactly");
        if name != "malformed" {
            continue;
        }
        // A new stage of the same feed (same source name) has a bad record at the same
        // position: it is its own, not passed over as the first stage's.
        let config = std::fs::read_to_string(db.config_path()).expect("read config");
        let patched = config.replace("path = \"stage\"", "path = \"stage2\"");
        assert_ne!(config, patched);
        std::fs::write(db.config_path(), patched).expect("write config");
        db.weir_ok(&["init", "--take-over"]);
        db.weir_ok(&["run", "--once"]);
        let stages: i64 = client
            .query_one(
                "SELECT count(DISTINCT stage_id) FROM weir.dead_letter WHERE kind = 'bad-record'",
                &[],
            )
            .await
            .expect("dead letters")
            .get(0);
        assert_eq!(stages, 2, "{name}: each stage's dead letter is kept");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_null_partition_key_goes_to_the_null_partition_or_is_rejected() {
    let db = TestDb::new("null_partition").await;
    db.write_config("", "", "");
    db.write_feed(&[
        envelope("c", None, None, Some(&order(1, None))),
        envelope("c", None, None, Some(&order(2, Some("2026-03-01")))),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let null_rows: i64 = client
        .query_one(
            "SELECT count(*) FROM analytics.fact_orders WHERE order_date IS NULL",
            &[],
        )
        .await
        .expect("q")
        .get(0);
    assert_eq!(null_rows, 1);
    let partitions: Vec<String> = client
        .query("SELECT partition FROM weir.partitions ORDER BY 1", &[])
        .await
        .expect("q")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(partitions, ["2026-03-01", "__null__"]);
    // No window reaches the NULL partition; `verify --partition` names it.
    client
        .batch_execute(
            "UPDATE analytics.fact_orders SET status = 'damaged' WHERE order_date IS NULL",
        )
        .await
        .expect("damage");
    db.weir_ok(&[
        "verify",
        "--table",
        "public.orders",
        "--from",
        "2026-01-01",
        "--to",
        "2027-01-01",
    ]);
    let out = db.weir(&[
        "verify",
        "--table",
        "public.orders",
        "--partition",
        "__null__",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("__null__"), "{stdout}");
    assert!(stdout.contains("column status differs"), "{stdout}");
    let out = db.weir(&[
        "verify",
        "--table",
        "public.orders",
        "--partition",
        "2026-13-01",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // `backfill --partition` rebuilds it; a name starting with `-` is a value.
    let out = db.weir_ok(&[
        "backfill",
        "--table",
        "public.orders",
        "--partition",
        "__null__",
    ]);
    assert!(out.contains("wrote 1 partitions"), "{out}");
    db.weir_ok(&[
        "verify",
        "--table",
        "public.orders",
        "--partition",
        "__null__",
        "--partition",
        "-infinity",
    ]);
    // A named partition without staged rows would be emptied: refused without
    // --allow-empty.
    let out = db.weir(&[
        "backfill",
        "--table",
        "public.orders",
        "--partition",
        "-infinity",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    // A window holding no partition is not a pass.
    let out = db.weir(&[
        "verify",
        "--table",
        "public.orders",
        "--from",
        "2030-01-01",
        "--to",
        "2030-02-01",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("nothing was verified"),
        "{}",
        text(&out.stderr)
    );

    let db = TestDb::new("null_partition_reject").await;
    db.write_config("", "on_null_partition = \"reject\"", "");
    db.write_feed(&[
        envelope("c", None, None, Some(&order(2, Some("2026-03-01")))),
        envelope("c", None, None, Some(&order(1, None))),
    ]);
    db.weir_ok(&["init"]);
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("feed.jsonl:2: partition column `order_date` is NULL"),
        "{stderr}"
    );
}

/// A row put into a native target through its parent by hand, for a day no child holds
/// yet, lands in the DEFAULT child and blocks that day's child: the write fails naming
/// the DEFAULT child and the way out, and goes on once the row is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_row_in_the_default_child_is_named_as_what_blocks_a_partition() {
    let db = TestDb::new("native_default_block").await;
    db.write_config("", "target_partitioning = \"native\"", "");
    db.write_feed(&[envelope(
        "c",
        None,
        None,
        Some(&order(1, Some("2026-03-01"))),
    )]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    client
        .batch_execute(
            "INSERT INTO analytics.fact_orders (id, customer, order_date, amount, status)
             VALUES (900, 'by hand', '2026-03-05', 1.00, 'new')",
        )
        .await
        .expect("a row by hand");
    db.append_feed(&[envelope(
        "c",
        None,
        None,
        Some(&order(2, Some("2026-03-05"))),
    )]);
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "the DEFAULT child analytics.fact_orders_p_default holds rows of partition 2026-03-05"
        ),
        "{stderr}"
    );
    client
        .batch_execute(
            "DELETE FROM analytics.fact_orders_p_default WHERE order_date = '2026-03-05'",
        )
        .await
        .expect("the way out");
    db.weir_ok(&["run", "--once"]);
    let ids: Vec<i64> = client
        .query("SELECT id FROM analytics.fact_orders ORDER BY id", &[])
        .await
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 2]);
}
