//! Exact values at intake (issue 15): a value that does not fit its column is a bad
//! record (the run stops, or it goes to `weir.dead_letter`), never rounded by the target
//! nor left to poison its partition; a value that fits is normalised to what PostgreSQL
//! stores, so that `weir verify` passes; Debezium's logical types and a column's declared
//! epoch unit decide what a number means, and a bare epoch number is never guessed at.

use serde_json::json;
use weir_core::fixtures::OrdersTable;

use crate::harness::{TestDb, text};
use crate::plugins::plugin;

/// A table of orders with a timestamp partition column; `at` as given (a type, or a
/// `{ type, epoch }` table).
fn table(at: &str, extra: &str) -> String {
    format!(
        r#"
[[table]]
source = "public.orders"
target = "analytics.orders"
key = ["id"]
partition_by = "at"
grain = "day"
columns = {{ id = "bigint", note = "text", at = {at}, amount = "numeric(12,2)" }}
{extra}
"#
    )
}

/// A Debezium envelope line inserting `after` into `public.orders`.
fn insert(after: serde_json::Value) -> String {
    let line = json!({
        "op": "c",
        "before": null,
        "after": after,
        "source": {"schema": "public", "table": "orders"},
    });
    format!("{line}\n")
}

fn good(id: i64) -> String {
    insert(json!({"id": id, "note": "fine", "at": "2026-03-01 10:00:00", "amount": "1.00"}))
}

/// 2026-03-01 00:00:00 UTC in milliseconds since 1970.
const MARCH_1_MS: i64 = 1_772_323_200_000;

/// (name, bad line, the column and reason the error names, a value that must not appear)
fn bad_cases() -> Vec<(&'static str, String, &'static str, &'static str)> {
    vec![
        (
            "rounded_decimal",
            insert(json!({"id": 3, "note": "x", "at": "2026-03-01 11:00:00", "amount": "19.999"})),
            "column `amount` (numeric(12,2)) in `after`: the value has 3 digits after the decimal point; numeric(12,2) keeps 2",
            "19.999",
        ),
        (
            "nul_in_text",
            insert(
                json!({"id": 3, "note": "a\u{0}b", "at": "2026-03-01 11:00:00", "amount": "1.00"}),
            ),
            "column `note` (text) in `after`: the value holds a NUL character",
            "a\\u0000b",
        ),
        (
            "epoch_without_unit",
            insert(json!({"id": 3, "note": "x", "at": MARCH_1_MS, "amount": "1.00"})),
            "column `at` (timestamp) in `after`: a number for a timestamp column without a unit",
            "1772323200000",
        ),
    ]
}

fn write(db: &TestDb, source_extra: &str, tables: &str, lines: &[String]) {
    db.write_feed_config(source_extra, "", tables);
    db.write_feed(lines);
    db.weir_ok(&["init"]);
}

async fn ids(db: &TestDb) -> Vec<i64> {
    db.client()
        .await
        .query("SELECT id FROM analytics.orders ORDER BY id", &[])
        .await
        .expect("ids")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_that_does_not_fit_stops_the_run_and_is_never_written() {
    for (name, bad, want, value) in bad_cases() {
        let db = TestDb::new(&format!("exact_fail_{name}")).await;
        write(
            &db,
            "",
            &table("\"timestamp\"", ""),
            &[good(1), bad, good(2)],
        );
        let out = db.weir(&["run", "--once"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains("feed.jsonl:2: ") && stderr.contains(want),
            "{name}: want `{want}` at line 2 in: {stderr}"
        );
        assert!(
            !stderr.contains(value),
            "{name}: the value is never in the logs: {stderr}"
        );
        // The bad line and everything after it were neither staged nor written (nothing
        // rounded): the stage's position stops before it.
        assert!(
            !ids(&db).await.contains(&3),
            "{name}: the bad value was written"
        );
        let status: serde_json::Value =
            serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
        assert_eq!(
            status["position"].as_u64(),
            Some(good(1).len() as u64),
            "{name}"
        );
        // It stops there again: the line is not skipped.
        assert_eq!(db.weir(&["run", "--once"]).status.code(), Some(1), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_value_that_does_not_fit_goes_to_the_dead_letter_table_and_the_rest_flows() {
    for (name, bad, want, value) in bad_cases() {
        let db = TestDb::new(&format!("exact_dlq_{name}")).await;
        write(
            &db,
            "on_bad_record = \"dead-letter\"",
            &table("\"timestamp\"", ""),
            &[good(1), bad.clone(), good(2)],
        );
        let out = db.weir(&["run", "--once"]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        assert!(
            !stderr.contains(value),
            "{name}: the value is never in the logs: {stderr}"
        );
        assert_eq!(ids(&db).await, [1, 2], "{name}");
        let client = db.client().await;
        let dead = client
            .query("SELECT line, reason, raw FROM weir.dead_letter", &[])
            .await
            .expect("dead letters");
        assert_eq!(dead.len(), 1, "{name}");
        let (line, reason, raw): (Option<i64>, String, Vec<u8>) =
            (dead[0].get(0), dead[0].get(1), dead[0].get(2));
        assert_eq!(line, Some(2), "{name}");
        assert!(reason.contains(want), "{name}: {reason}");
        assert_eq!(raw, bad.as_bytes(), "{name}: the raw line is kept exactly");
        // Every partition written is what the stage computes.
        let verify = db.weir(&[
            "verify",
            "--table",
            "public.orders",
            "--from",
            "2026-03-01",
            "--to",
            "2026-03-02",
        ]);
        assert!(verify.status.success(), "{name}: {}", text(&verify.stderr));
    }
}

/// The `at` column of the target, as PostgreSQL prints it.
async fn at_text(db: &TestDb, id: i64) -> String {
    db.client()
        .await
        .query_one(
            "SELECT at::text FROM analytics.orders WHERE id = $1",
            &[&id],
        )
        .await
        .expect("row")
        .get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_epoch_number_lands_exactly_with_its_declared_unit_or_debezium_schema() {
    // The unit declared in the config.
    let db = TestDb::new("exact_epoch_declared").await;
    write(
        &db,
        "",
        &table("{ type = \"timestamp\", epoch = \"ms\" }", ""),
        &[insert(
            json!({"id": 1, "note": "x", "at": MARCH_1_MS, "amount": "1.00"}),
        )],
    );
    db.weir_ok(&["run", "--once"]);
    assert_eq!(at_text(&db, 1).await, "2026-03-01 00:00:00");

    // No unit in the config: Debezium's schema says which logical type each field is.
    let db = TestDb::new("exact_epoch_schema").await;
    let fields = json!([
        {"field": "id", "type": "int64"},
        {"field": "note", "type": "string", "optional": true},
        {"field": "at", "type": "int64", "name": "io.debezium.time.Timestamp"},
        {"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "12"}}
    ]);
    let schemad = |id: i64, at: serde_json::Value, at_type: &str, amount: &str| {
        let mut fields = fields.clone();
        fields[2]["name"] = json!(at_type);
        let image = |which: &str| json!({"type": "struct", "field": which, "optional": true, "fields": fields});
        let line = json!({
            "schema": {"type": "struct", "name": "dbserver.public.orders.Envelope",
                       "fields": [image("before"), image("after")]},
            "payload": {"op": "c", "before": null,
                        "after": {"id": id, "note": "x", "at": at, "amount": amount},
                        "source": {"schema": "public", "table": "orders"}}
        });
        format!("{line}\n")
    };
    write(
        &db,
        "",
        &table("\"timestamp\"", ""),
        &[
            // 1999 (0x07CF) at scale 2.
            schemad(1, json!(MARCH_1_MS), "io.debezium.time.Timestamp", "B88="),
            schemad(
                2,
                json!(MARCH_1_MS * 1000 + 1),
                "io.debezium.time.MicroTimestamp",
                "B88=",
            ),
            schemad(
                3,
                json!(MARCH_1_MS * 1_000_000 + 2000),
                "io.debezium.time.NanoTimestamp",
                "B88=",
            ),
            schemad(
                4,
                json!("2026-03-01T01:00:00+01:00"),
                "io.debezium.time.ZonedTimestamp",
                "B88=",
            ),
        ],
    );
    db.weir_ok(&["run", "--once"]);
    assert_eq!(at_text(&db, 1).await, "2026-03-01 00:00:00");
    assert_eq!(at_text(&db, 2).await, "2026-03-01 00:00:00.000001");
    assert_eq!(at_text(&db, 3).await, "2026-03-01 00:00:00.000002");
    assert_eq!(at_text(&db, 4).await, "2026-03-01 00:00:00");
    let amounts: Vec<String> = db
        .client()
        .await
        .query("SELECT DISTINCT amount::text FROM analytics.orders", &[])
        .await
        .expect("amounts")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(amounts, ["19.99"]);
}

/// Orders with amounts of fewer places than numeric(12,2)'s scale, as a string, a string
/// with one place, and a JSON number.
fn short_decimals() -> Vec<String> {
    [(1, json!("7")), (2, json!("12.5")), (3, json!(7.5))]
        .into_iter()
        .map(|(id, amount)| {
            let line = json!({
                "op": "c", "before": null,
                "after": {"id": id, "customer": "c", "order_date": "2026-03-01", "amount": amount, "status": "new"},
                "source": {"schema": "public", "table": "orders"},
            });
            format!("{line}\n")
        })
        .collect()
}

async fn amounts(db: &TestDb, table: &str) -> Vec<String> {
    db.client()
        .await
        .query(
            &format!("SELECT amount::text FROM {table} ORDER BY id"),
            &[],
        )
        .await
        .expect("amounts")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn verify_passes(db: &TestDb) {
    let out = db.weir(&[
        "verify",
        "--table",
        "public.orders",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-02",
    ]);
    assert!(
        out.status.success(),
        "verify fails on a healthy partition: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("verify passed: 1 partitions"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn short_decimals_are_written_at_the_columns_scale_and_verify_passes() {
    // The identity transform.
    let db = TestDb::new("exact_short_identity").await;
    db.write_config("", "", "");
    db.write_feed(&short_decimals());
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        amounts(&db, "analytics.fact_orders").await,
        ["7.00", "12.50", "7.50"]
    );
    verify_passes(&db);

    // A plugin that passes the amount through.
    let db = TestDb::new("exact_short_plugin").await;
    db.write_config(
        "",
        &format!(
            "plugin = \"{}\"\n[table.plugin_config]\nrate = \"1\"\n",
            plugin("orders-rust").display()
        ),
        "",
    );
    db.write_feed(&short_decimals());
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        amounts(&db, "analytics.fact_orders").await,
        ["7.00", "12.50", "7.50"]
    );
    verify_passes(&db);
}

/// A PostgreSQL source's `numeric(14,3)` column against a target table the user made
/// with `numeric(12,2)`: PostgreSQL's COPY would round `1.234` to `1.23`. The target's
/// column types must be the source's, so the table is refused, naming the column and
/// both types, before any row is read; nothing is written, nothing rounded.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_source_value_is_never_rounded_into_a_narrower_target_column() {
    use crate::postgres_source::{source_fixture, weir_pg};
    let db = TestDb::new("exact_pg_narrower").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "exact_pg_narrower",
        "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date, amount numeric(14,3));
         INSERT INTO orders VALUES (1, '2026-03-01', 1.234);",
        "",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let target = db.client().await;
    target
        .batch_execute(
            "CREATE SCHEMA analytics;
             CREATE TABLE analytics.fact_orders (id bigint, order_date date, amount numeric(12,2))",
        )
        .await
        .expect("target table");
    for command in [&["init"][..], &["run", "--once"][..]] {
        let out = weir_pg(&db, &source_dsn, command);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains("column `amount` is numeric(12,2), config declares numeric(14,3)"),
            "{command:?}: {stderr}"
        );
        assert!(!stderr.contains("1.234"), "{command:?}: {stderr}");
    }
    let rows: i64 = target
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 0);
    drop(source);
}
