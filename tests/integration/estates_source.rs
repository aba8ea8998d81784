//! PostgreSQL source estates as DBAs make them (issue 15, items 2 to 6), through the
//! binary: a partitioned source table under a live workload with partitions attached
//! and created mid-run; a publication that hides changes (operations not published, a
//! row filter, a column list, a partitioned table not published through its root) is
//! refused with the statement that fixes it; a rename and a `SET SCHEMA` during `run`
//! stop the table without acknowledging past them, and the run resumes exactly once
//! the config follows; a key that is not the replica identity is refused; a grain
//! changed against an existing stage is refused, and `checkpoint show` prints the
//! stage's contracts.

use std::path::Path;
use std::time::{Duration, Instant};

use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{Reaped, Rng, TestDb, text};
use crate::postgres_source::{dump, weir_pg};

/// Writes the config of a PostgreSQL source with slot and publication `name` and the
/// given `[[table]]` body.
fn write_config(db: &TestDb, name: &str, table: &str) {
    std::fs::write(
        db.config_path(),
        postgres_config(
            name,
            "[engine]\nflush_interval_ms = 100",
            &format!("[[table]]\n{table}\n"),
        ),
    )
    .expect("config");
}

/// A `[[table]]` body for an orders table into `analytics.fact_orders`.
fn orders(source: &str, key: &[&str], grain: &str) -> String {
    OrdersTable::postgres("analytics.fact_orders")
        .source(source)
        .key(key)
        .grain(grain)
        .body()
}

/// Starts a live `weir run` on the PostgreSQL source, logging to `log`.
fn spawn_run(db: &TestDb, source_dsn: &str, log: &Path) -> Reaped {
    db.spawn_live(&[("WEIR_SOURCE_DSN", source_dsn)], log)
}

/// Waits for a live run to exit by itself; fails after `secs` with its log.
fn wait_exit(run: &mut Reaped, log: &Path, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = run.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "weir run did not stop: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `sql` (a count) on `client` reaches `want`; fails with the live run's
/// log.
async fn wait_count(client: &tokio_postgres::Client, sql: &str, want: i64, secs: u64, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let got: i64 = match client.query_one(sql, &[]).await {
            Ok(row) => row.get(0),
            Err(_) => -1,
        };
        if got >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sql}: {got}, want {want}; log: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The target holds exactly the source table's rows.
async fn assert_same(
    source: &tokio_postgres::Client,
    source_table: &str,
    target: &tokio_postgres::Client,
) {
    let (want, got) = (
        dump(source, source_table).await,
        dump(target, "analytics.fact_orders").await,
    );
    let missing = want.iter().filter(|r| !got.contains(r)).count();
    let extra = got.iter().filter(|r| !want.contains(r)).count();
    assert!(
        missing == 0 && extra == 0,
        "{missing} rows missing, {extra} extra ({} in the source {source_table}, {} in the target)",
        want.len(),
        got.len()
    );
}

/// The slot's `confirmed_flush_lsn` and an LSN, as numbers.
async fn lsn(source: &tokio_postgres::Client, sql: &str) -> i64 {
    source
        .query_one(
            &format!("SELECT pg_wal_lsn_diff(({sql}), '0/0')::bigint"),
            &[],
        )
        .await
        .expect("lsn")
        .get(0)
}

/// Transactions of inserts, updates, deletes and date-moving updates over `months`
/// (`2026-MM`), ids from `first_id`.
fn workload(rng: &mut Rng, first_id: i64, transactions: usize, months: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = first_id;
    for _ in 0..transactions {
        let mut txn = String::from("BEGIN;");
        for _ in 0..1 + rng.below(5) {
            let month = months[rng.below(months.len() as u64) as usize];
            let day = format!("2026-{month:02}-{:02}", 1 + rng.below(28));
            let target = first_id.max(next - 1 - rng.below(40) as i64);
            match rng.below(10) {
                0..=5 => {
                    txn.push_str(&format!(
                        "INSERT INTO orders VALUES ({next}, 'c{}', '{day}', {}.{:02}, 'new');",
                        rng.below(100),
                        rng.below(10_000),
                        rng.below(100)
                    ));
                    next += 1;
                }
                6 => txn.push_str(&format!(
                    "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {target};"
                )),
                // Moves the row to another day, often another month: another partition.
                7 | 8 => txn.push_str(&format!(
                    "UPDATE orders SET order_date = '{day}' WHERE id = {target};"
                )),
                _ => txn.push_str(&format!("DELETE FROM orders WHERE id = {target};")),
            }
        }
        txn.push_str("COMMIT;");
        out.push(txn);
    }
    out
}

/// A table partitioned by month, under a live workload that also moves rows between
/// partitions, with a partition attached and one created mid-run: the target ends equal
/// to the source. (Before publications were made with `publish_via_partition_root`,
/// every streamed change came under a partition's name and was dropped, while the slot
/// confirmed past it.)
#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_table_flows_under_a_live_workload_with_partitions_added_mid_run() {
    let db = TestDb::new("est_part_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_part",
        "CREATE TABLE orders (id bigint, customer text, order_date date, amount numeric(12,2), status text, PRIMARY KEY (id, order_date)) PARTITION BY RANGE (order_date);
         CREATE TABLE orders_2026_01 PARTITION OF orders FOR VALUES FROM ('2026-01-01') TO ('2026-02-01');
         CREATE TABLE orders_2026_02 PARTITION OF orders FOR VALUES FROM ('2026-02-01') TO ('2026-03-01');
         CREATE TABLE orders_2026_03 PARTITION OF orders FOR VALUES FROM ('2026-03-01') TO ('2026-04-01');
         INSERT INTO orders SELECT g, 'c' || g, DATE '2026-01-01' + (g % 85), g, 'old' FROM generate_series(1, 300) g;",
    )
    .await;
    write_config(
        &db,
        "est_part",
        &orders("public.orders", &["id", "order_date"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let log = db.path("run.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    // The snapshot went through the root: every partition's rows.
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders",
        300,
        120,
        &log,
    )
    .await;

    let mut rng = Rng::new(15);
    for txn in workload(&mut rng, 1000, 60, &[1, 2, 3]) {
        source.batch_execute(&txn).await.expect("workload");
    }
    // A table made apart and attached, and one created as a partition, mid-run.
    source
        .batch_execute(
            "CREATE TABLE orders_2026_04 (LIKE orders INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
             ALTER TABLE orders_2026_04 ADD PRIMARY KEY (id, order_date);
             ALTER TABLE orders ATTACH PARTITION orders_2026_04 FOR VALUES FROM ('2026-04-01') TO ('2026-05-01');
             CREATE TABLE orders_2026_05 PARTITION OF orders FOR VALUES FROM ('2026-05-01') TO ('2026-06-01');",
        )
        .await
        .expect("add partitions");
    for txn in workload(&mut rng, 5000, 80, &[1, 3, 4, 5]) {
        source.batch_execute(&txn).await.expect("workload");
    }
    // The live engine keeps up: rows of the new partitions arrive.
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders WHERE order_date >= '2026-04-01'",
        1,
        60,
        &log,
    )
    .await;
    let _ = run.0.kill();
    let _ = run.wait();
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "drain: {}", text(&out.stderr));
    assert_same(&source, "orders", &target).await;
    let moved: i64 = target
        .query_one(
            "SELECT count(*) FROM analytics.fact_orders WHERE order_date >= '2026-04-01'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert!(moved > 0, "rows in the partitions added mid-run");
}

/// A publication a DBA made that hides changes is refused at `init` and `run`, with
/// the statement that fixes it; once fixed, it is used as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_publication_that_hides_changes_is_refused_with_its_fix() {
    let db = TestDb::new("est_pub_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_pub",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         CREATE PUBLICATION est_pub FOR TABLE orders WITH (publish = 'insert');
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new');",
    )
    .await;
    write_config(&db, "est_pub", &orders("public.orders", &["id"], "day"));
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    let refused = |out: &std::process::Output, needle: &str| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "wanted {needle:?} in: {stderr}");
    };
    refused(
        &weir(&["init"]),
        "ALTER PUBLICATION \"est_pub\" SET (publish = 'insert, update, delete, truncate');",
    );
    let slots: i64 = source
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'est_pub'",
            &[],
        )
        .await
        .expect("slots")
        .get(0);
    assert_eq!(slots, 0, "a refused init creates no slot");

    source
        .batch_execute(
            "ALTER PUBLICATION est_pub SET (publish = 'insert, update, delete, truncate')",
        )
        .await
        .expect("fix");
    let out = weir(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Changed back under a stage that exists: `run` refuses too.
    source
        .batch_execute("ALTER PUBLICATION est_pub SET (publish = 'insert')")
        .await
        .expect("unfix");
    refused(
        &weir(&["run", "--once"]),
        "ALTER PUBLICATION \"est_pub\" SET (publish = 'insert, update, delete, truncate');",
    );
    source
        .batch_execute(
            "ALTER PUBLICATION est_pub SET (publish = 'insert, update, delete, truncate')",
        )
        .await
        .expect("fix");
    let fix = "ALTER PUBLICATION \"est_pub\" DROP TABLE \"public\".\"orders\"; ALTER PUBLICATION \"est_pub\" ADD TABLE \"public\".\"orders\";";
    source
        .batch_execute("ALTER PUBLICATION est_pub SET TABLE orders WHERE (amount > 0)")
        .await
        .expect("row filter");
    refused(&weir(&["run", "--once"]), "row filter");
    refused(&weir(&["run", "--once"]), fix);
    source
        .batch_execute("ALTER PUBLICATION est_pub SET TABLE orders (id, order_date, amount)")
        .await
        .expect("column list");
    let out = weir(&["run", "--once"]);
    refused(&out, "column list");
    refused(&out, "leaves out customer, status");
    source
        .batch_execute("ALTER PUBLICATION est_pub SET TABLE orders")
        .await
        .expect("whole table");
    // Put back, it is still a publication altered since the stage read it: the run
    // waits for the user to accept it (nothing changed meanwhile here).
    refused(
        &weir(&["run", "--once"]),
        "was altered since this stage last read it",
    );
    let out = weir(&["init", "--accept-publication"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let target = db.client().await;
    assert_same(&source, "orders", &target).await;

    // A partitioned table in a publication that sends its partitions' names.
    let db = TestDb::new("est_pubroot_target").await;
    let (source_dsn, _source) = crate::harness::source_db(
        "est_pubroot",
        "CREATE TABLE orders (id bigint, customer text, order_date date, amount numeric(12,2), status text, PRIMARY KEY (id, order_date)) PARTITION BY RANGE (order_date);
         CREATE TABLE orders_2026_03 PARTITION OF orders FOR VALUES FROM ('2026-03-01') TO ('2026-04-01');
         CREATE PUBLICATION est_pubroot FOR TABLE orders;",
    )
    .await;
    write_config(
        &db,
        "est_pubroot",
        &orders("public.orders", &["id", "order_date"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("ALTER PUBLICATION \"est_pubroot\" SET (publish_via_partition_root = true);"),
        "{stderr}"
    );
}

/// `ALTER TABLE … RENAME` and then `SET SCHEMA` while `weir run` streams: the run stops
/// (exit 1) naming the table, its new name and the fix; the slot is not confirmed past
/// the change; once the config names the table as it is now, `run --once` resumes and
/// the target equals the source, changes made after the rename included.
#[tokio::test(flavor = "multi_thread")]
async fn a_rename_and_a_set_schema_during_run_stop_the_table_until_the_config_follows() {
    let db = TestDb::new("est_rename_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_rename",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, DATE '2026-03-01' + (g % 10), g, 'old' FROM generate_series(1, 50) g;
         CREATE SCHEMA archive;",
    )
    .await;
    write_config(&db, "est_rename", &orders("public.orders", &["id"], "day"));
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let target = db.client().await;

    for (step, (old, new, ddl)) in [
        (
            "public.orders",
            "public.orders_v2",
            "ALTER TABLE orders RENAME TO orders_v2",
        ),
        (
            "public.orders_v2",
            "archive.orders_v2",
            "ALTER TABLE orders_v2 SET SCHEMA archive",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let log = db.path(&format!("run{step}.log"));
        let mut run = spawn_run(&db, &source_dsn, &log);
        let first = 1000 * (step as i64 + 1);
        source
            .batch_execute(&format!(
                "INSERT INTO {old} VALUES ({first}, 'before', '2026-03-05', 1.00, 'new')"
            ))
            .await
            .expect("insert before");
        wait_count(
            &target,
            &format!("SELECT count(*) FROM analytics.fact_orders WHERE id = {first}"),
            1,
            60,
            &log,
        )
        .await;
        let at_change: String = source
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .expect("the WAL's end")
            .get(0);
        source
            .batch_execute(&format!(
                "BEGIN; {ddl}; INSERT INTO {new} VALUES ({}, 'after', '2026-03-06', 2.00, 'new'); COMMIT;
                 UPDATE {new} SET status = 'paid' WHERE id <= 5; DELETE FROM {new} WHERE id = 7;",
                first + 1
            ))
            .await
            .expect("rename and change");
        let status = wait_exit(&mut run, &log, 60);
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("source table {old} (relation OID"))
                && stderr.contains(&format!("is now {new}"))
                && stderr.contains(&format!("set `source = \"{new}\"`")),
            "{stderr}"
        );
        // The rename's transaction is still the slot's to send: its insert of `first +
        // 1` is the only insert after `at_change`. The slot may be confirmed past
        // `at_change` itself: other databases of the cluster write WAL, and a run with
        // nothing to do confirms the server's end. What it must not pass is the
        // rename's commit.
        let pending_inserts: i64 = source
            .query_one(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('est_rename', NULL, NULL, \
                 'proto_version', '1', 'publication_names', 'est_rename') \
                 WHERE get_byte(data, 0) = 73 AND lsn > $1::text::pg_lsn",
                &[&at_change],
            )
            .await
            .expect("peek the slot")
            .get(0);
        let confirmed = lsn(
            &source,
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'est_rename'",
        )
        .await;
        assert_eq!(
            pending_inserts, 1,
            "the slot (confirmed at {confirmed}) still holds the rename's transaction"
        );
        // The config still names the old table: refused again, nothing taken.
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        let stderr = text(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains(old), "{stderr}");
        // The config follows: the same relation, carried on from where it stopped.
        write_config(&db, "est_rename", &orders(new, &["id"], "day"));
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        assert!(out.status.success(), "resume: {}", text(&out.stderr));
        assert_same(&source, new, &target).await;
    }
    let shown = text(&weir_pg(&db, &source_dsn, &["checkpoint", "show"]).stdout);
    assert!(
        shown.contains("table:          archive.orders_v2 (relation OID")
            && !shown.contains("public.orders"),
        "{shown}"
    );
}

/// A key that is neither the primary key nor the replica identity index is refused at
/// `init`, naming both; `REPLICA IDENTITY FULL` makes it usable.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_that_is_not_the_replica_identity_is_refused() {
    let db = TestDb::new("est_key_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_key",
        "CREATE TABLE orders (id bigint PRIMARY KEY, order_no bigint NOT NULL UNIQUE, customer text, order_date date, amount numeric(12,2), status text);",
    )
    .await;
    write_config(
        &db,
        "est_key",
        &orders("public.orders", &["order_no"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("the configured key (order_no) of public.orders is not the primary key (id)"),
        "{stderr}"
    );
    assert!(stderr.contains("REPLICA IDENTITY FULL"), "{stderr}");
    source
        .batch_execute("ALTER TABLE orders REPLICA IDENTITY FULL")
        .await
        .expect("identity full");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Tables whose changes the stream cannot carry whole are refused at `init` with the
/// fix: a parent with inheritance children (its children's changes come under their
/// own names), an UNLOGGED table (no WAL), REPLICA IDENTITY NOTHING on a table with a
/// primary key; and one made UNLOGGED while `weir run` streams stops it.
#[tokio::test(flavor = "multi_thread")]
async fn tables_the_stream_cannot_follow_whole_are_refused_with_their_fix() {
    let db = TestDb::new("est_whole_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_whole",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         CREATE TABLE orders_2025 () INHERITS (orders);
         CREATE PUBLICATION est_whole FOR ALL TABLES;
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new');",
    )
    .await;
    write_config(&db, "est_whole", &orders("public.orders", &["id"], "day"));
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    let refused = |out: &std::process::Output, needle: &str| {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "wanted {needle:?} in: {stderr}");
        stderr
    };
    refused(
        &weir(&["init"]),
        "public.orders has inheritance children (orders_2025)",
    );
    source
        .batch_execute("DROP TABLE orders_2025; ALTER TABLE orders SET UNLOGGED;")
        .await
        .expect("unlogged");
    let stderr = refused(&weir(&["init"]), "orders is UNLOGGED");
    assert!(stderr.contains("SET LOGGED"), "{stderr}");
    assert!(!stderr.contains("is not in publication"), "{stderr}");
    source
        .batch_execute(
            "ALTER TABLE orders SET LOGGED; ALTER TABLE orders REPLICA IDENTITY NOTHING;",
        )
        .await
        .expect("identity nothing");
    refused(
        &weir(&["init"]),
        "REPLICA IDENTITY DEFAULT;` (its primary key (id)",
    );
    source
        .batch_execute("ALTER TABLE orders REPLICA IDENTITY DEFAULT;")
        .await
        .expect("identity default");
    let out = weir(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = db.path("unlogged.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders",
        1,
        60,
        &log,
    )
    .await;
    source
        .batch_execute("ALTER TABLE orders SET UNLOGGED; INSERT INTO orders VALUES (2, 'b', '2026-03-01', 2.00, 'new');")
        .await
        .expect("unlogged while streaming");
    let status = wait_exit(&mut run, &log, 60);
    assert!(!status.success());
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains("became UNLOGGED while Weir streamed"),
        "{logged}"
    );
}

/// A source table with row-level security that applies to Weir's role: a first load
/// would read only the rows its policies show (the stream sends every row). Refused
/// with the fix; with BYPASSRLS every row is loaded.
#[tokio::test(flavor = "multi_thread")]
async fn row_level_security_that_applies_to_the_role_is_refused() {
    let db = TestDb::new("est_rls_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_rls",
        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'est_rls_reader') THEN CREATE ROLE est_rls_reader LOGIN REPLICATION; END IF; END $$;
         CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g, CASE WHEN g % 2 = 0 THEN 'open' ELSE 'hidden' END FROM generate_series(1, 20) g;
         ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
         CREATE POLICY open_only ON orders FOR SELECT USING (status = 'open');
         GRANT SELECT ON orders TO est_rls_reader;
         CREATE PUBLICATION est_rls FOR TABLE orders;",
    )
    .await;
    let reader_dsn = source_dsn.replacen("postgres://postgres@", "postgres://est_rls_reader@", 1);
    assert_ne!(reader_dsn, source_dsn, "{source_dsn}");
    write_config(&db, "est_rls", &orders("public.orders", &["id"], "day"));
    let out = weir_pg(&db, &reader_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("has row-level security that applies to this role")
            && stderr.contains("BYPASSRLS"),
        "{stderr}"
    );
    source
        .batch_execute("ALTER ROLE est_rls_reader BYPASSRLS")
        .await
        .expect("bypass");
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &reader_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        20
    );
}

/// The stage records each table's contract; a config that changes a table's grain
/// against it is refused (exit 2) with the difference and the way out, and
/// `checkpoint show` prints the contract.
#[tokio::test(flavor = "multi_thread")]
async fn a_grain_changed_against_an_existing_stage_is_refused() {
    let db = TestDb::new("est_grain_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_grain",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, DATE '2026-03-01' + (g % 40), g, 'old' FROM generate_series(1, 100) g;",
    )
    .await;
    write_config(&db, "est_grain", &orders("public.orders", &["id"], "day"));
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    assert!(weir(&["init"]).status.success());
    let out = weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&weir(&["checkpoint", "show"]).stdout);
    assert!(
        shown.contains("table:          public.orders (relation OID")
            && shown.contains("-> analytics.fact_orders, key (id), partition by order_date day, transform identity"),
        "{shown}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&weir(&["checkpoint", "show", "--json"]).stdout).expect("json");
    assert_eq!(json["contracts"][0]["grain"], "day", "{json}");

    write_config(&db, "est_grain", &orders("public.orders", &["id"], "month"));
    for verb in [&["run", "--once"][..], &["init"][..]] {
        let out = weir(verb);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb:?}: {stderr}");
        assert!(
            stderr.contains("public.orders: grain day → month") && stderr.contains("new stage"),
            "{stderr}"
        );
    }
    // Nothing was written under the refused config.
    source
        .batch_execute("INSERT INTO orders VALUES (500, 'x', '2026-03-02', 1, 'new')")
        .await
        .expect("insert");
    let target = db.client().await;
    let count: i64 = target
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 100);
    write_config(&db, "est_grain", &orders("public.orders", &["id"], "day"));
    let out = weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_same(&source, "orders", &target).await;
}

/// The snapshot reads a table in key order, chunk after chunk, resuming after the last
/// key read: that key goes back into SQL as a literal. With
/// `standard_conforming_strings = off` on the source, a key holding `\` and `'` must
/// still be read back exactly (no chunk lost, repeated or injected).
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_resumes_after_keys_with_quotes_and_backslashes_whatever_the_string_settings() {
    let db = TestDb::new("est_quote_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_quote",
        r#"CREATE TABLE orders (id text PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT k, 'c', DATE '2026-03-01' + (n % 3)::int, n, 'old'
           FROM unnest(ARRAY[E'a\\', E'a\\''', E'a''b', E'b\\\\c', E'c''); DROP TABLE orders; --',
                             'd', E'e\\n', 'f''', 'g']) WITH ORDINALITY AS t(k, n);"#,
    )
    .await;
    let database = format!("{}_source", "est_quote");
    source
        .batch_execute(&format!(
            "ALTER DATABASE {database} SET standard_conforming_strings = off"
        ))
        .await
        .expect("standard_conforming_strings off");
    std::fs::write(
        db.config_path(),
        postgres_config(
            "est_quote",
            "snapshot_chunk_rows = 2",
            &OrdersTable::postgres("analytics.fact_orders").to_string(),
        ),
    )
    .expect("config");
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    let out = weir(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let target = db.client().await;
    // Text keys: compared as text, every column.
    let rows = |table: &'static str| {
        format!(
            "SELECT id, customer, order_date::text, amount::text, status FROM {table} ORDER BY id"
        )
    };
    let text_rows = |rows: Vec<tokio_postgres::Row>| -> Vec<Vec<Option<String>>> {
        rows.iter()
            .map(|r| (0..5).map(|i| r.get::<_, Option<String>>(i)).collect())
            .collect()
    };
    let want = text_rows(
        source
            .query(&rows("orders"), &[])
            .await
            .expect("source rows"),
    );
    let got = text_rows(
        target
            .query(&rows("analytics.fact_orders"), &[])
            .await
            .expect("target rows"),
    );
    assert_eq!(got, want, "the target holds exactly the source's rows");
    let count: i64 = target
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 9, "every key once");
}

/// A REPLICA IDENTITY FULL table's key must be NOT NULL (refused with the statement
/// that fixes it) and a key no unique index enforces is warned about; a generated
/// column, which the stream never carries, is left out; a timestamp's precision changed
/// at the source stops the run rather than let the target round the new values.
#[tokio::test(flavor = "multi_thread")]
async fn full_identity_keys_generated_columns_and_timestamp_precision_are_checked() {
    let db = TestDb::new("est_full_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_full",
        "CREATE TABLE orders (id bigint, customer text, order_date date, amount numeric(12,2), status text,
                              seen timestamp(3), doubled bigint GENERATED ALWAYS AS (id * 2) STORED);
         ALTER TABLE orders REPLICA IDENTITY FULL;
         INSERT INTO orders (id, customer, order_date, amount, status, seen)
           VALUES (1, 'a', '2026-03-01', 1.00, 'new', '2026-03-01 00:00:00.123');",
    )
    .await;
    write_config(&db, "est_full", &orders("public.orders", &["id"], "day"));
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key column id of public.orders may be NULL")
            && stderr.contains("ALTER COLUMN \"id\" SET NOT NULL;"),
        "{stderr}"
    );
    // A refused init leaves the source as it was: the publication it made is gone.
    let publications: i64 = source
        .query_one(
            "SELECT count(*) FROM pg_publication WHERE pubname = 'est_full'",
            &[],
        )
        .await
        .expect("publications")
        .get(0);
    assert_eq!(publications, 0);
    // Unique only by a DEFERRABLE constraint: two rows may hold a key inside a
    // transaction (a swap in one UPDATE lost a row), so it is refused.
    source
        .batch_execute(
            "ALTER TABLE orders ALTER COLUMN id SET NOT NULL;
             ALTER TABLE orders ADD CONSTRAINT orders_id_deferred UNIQUE (id) DEFERRABLE",
        )
        .await
        .expect("not null, deferrable");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is unique only by a DEFERRABLE constraint"),
        "{stderr}"
    );
    source
        .batch_execute("ALTER TABLE orders DROP CONSTRAINT orders_id_deferred")
        .await
        .expect("drop the deferrable constraint");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is not enforced unique by the source")
            && stderr.contains("a generated column is not replicated"),
        "{stderr}"
    );
    source
        .batch_execute(
            "INSERT INTO orders (id, customer, order_date, amount, status, seen)
               VALUES (2, 'b', '2026-03-01', 2.00, 'new', '2026-03-01 00:00:00.456')",
        )
        .await
        .expect("insert");
    // Live: the precision changes while the run streams.
    let log = db.path("run.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    let count = "SELECT count(*) FROM analytics.fact_orders";
    wait_count(&target, count, 2, 60, &log).await;
    assert_eq!(
        db.count(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = 'analytics' AND table_name = 'fact_orders' AND column_name = 'doubled'"
        )
        .await,
        0
    );
    source
        .batch_execute(
            "ALTER TABLE orders ALTER COLUMN seen TYPE timestamp(6);
             INSERT INTO orders (id, customer, order_date, amount, status, seen)
               VALUES (3, 'c', '2026-03-01', 3.00, 'new', '2026-03-01 00:00:00.999999')",
        )
        .await
        .expect("precision");
    let status = wait_exit(&mut run, &log, 60);
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "column `seen` is now timestamp(6) without time zone, was timestamp(3) without time zone"
        ),
        "{stderr}"
    );
    assert_eq!(db.count(count).await, 2);
    // A new start refuses too, before it reads anything: the target still says (3).
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "column `seen` is timestamp(3) without time zone, config declares timestamp(6)"
        ),
        "{stderr}"
    );
    assert_eq!(db.count(count).await, 2);
}

/// A source DSN variable that is unset or invalid is a configuration error (exit 2)
/// naming the variable, as the target's is.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_invalid_source_dsn_is_a_configuration_error() {
    let db = TestDb::new("est_dsn_target").await;
    write_config(&db, "est_dsn", &orders("public.orders", &["id"], "day"));
    for (value, want) in [
        (
            None,
            "source.dsn_env: environment variable WEIR_SOURCE_DSN is not set",
        ),
        (Some("host=localhost sslmode=strict"), "WEIR_SOURCE_DSN"),
    ] {
        let mut command = db.weir_command(&["init"]);
        match value {
            Some(v) => command.env("WEIR_SOURCE_DSN", v),
            None => command.env_remove("WEIR_SOURCE_DSN"),
        };
        let out = command.output().expect("run");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(want), "want `{want}` in {stderr}");
    }
}

/// A `REPLICA IDENTITY FULL` orders table keyed by `id`, which nothing enforces unique,
/// after `weir init`.
async fn unenforced_key_estate(name: &str) -> (TestDb, String, tokio_postgres::Client) {
    let db = TestDb::new(&format!("{name}_target")).await;
    let (source_dsn, source) = crate::harness::source_db(
        name,
        "CREATE TABLE orders (id bigint NOT NULL, customer text, order_date date, amount numeric(12,2), status text);
         ALTER TABLE orders REPLICA IDENTITY FULL;",
    )
    .await;
    write_config(&db, name, &orders("public.orders", &["id"], "day"));
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    (db, source_dsn, source)
}

/// A REPLICA IDENTITY FULL table whose key no unique index enforces: a streamed INSERT
/// of a key the stage holds stops the run, naming the table, instead of merging two
/// source rows into one target row; nothing past it is acknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_insert_of_a_staged_key_stops_a_table_whose_key_is_not_enforced() {
    let (db, source_dsn, source) = unenforced_key_estate("est_dupkey").await;
    source
        .batch_execute("INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-01', 2.00, 'new')")
        .await
        .expect("insert");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let count = "SELECT count(*) FROM analytics.fact_orders";
    assert_eq!(db.count(count).await, 2);
    let position = |out: &std::process::Output| {
        serde_json::from_str::<serde_json::Value>(&text(&out.stdout)).expect("status json")
            ["position"]
            .as_u64()
    };
    let before = position(&weir_pg(&db, &source_dsn, &["status", "--json"]));
    source
        .batch_execute("INSERT INTO orders VALUES (1, 'again', '2026-03-02', 3.00, 'new')")
        .await
        .expect("a second row of key 1");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("public.orders: an INSERT, or an UPDATE that changed a row's key, arrived for a key the stage already holds"),
        "{stderr}"
    );
    assert_eq!(
        position(&weir_pg(&db, &source_dsn, &["status", "--json"])),
        before,
        "nothing past the insert was staged or acknowledged"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders WHERE customer = 'a'")
            .await,
        1
    );
}

/// The same table: an UPDATE that moves a row onto a key the stage holds for another
/// row stops the run too (the two source rows would become one target row).
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_update_onto_a_staged_key_stops_a_table_whose_key_is_not_enforced() {
    let (db, source_dsn, source) = unenforced_key_estate("est_dupupd").await;
    source
        .batch_execute("INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-01', 2.00, 'new'), (3, 'c', '2026-03-01', 3.00, 'new')")
        .await
        .expect("insert");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A key change onto a free key is a move, as before.
    source
        .batch_execute("UPDATE orders SET id = 4 WHERE id = 3")
        .await
        .expect("move");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    crate::postgres_source::assert_same_rows(
        &source,
        "orders",
        &db.client().await,
        "analytics.fact_orders",
    )
    .await;
    source
        .batch_execute("UPDATE orders SET id = 1 WHERE id = 2")
        .await
        .expect("a second row of key 1");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "an UPDATE that changed a row's key, arrived for a key the stage already holds"
        ),
        "{stderr}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        3
    );
}

/// A first load of a `REPLICA IDENTITY FULL` table whose rows share a key no index
/// enforces is refused before a row is staged, by either method (the stage would keep
/// one row per key and the target lose the others); once the source is fixed, the
/// next run loads it whole.
#[tokio::test]
async fn a_first_load_of_rows_sharing_an_unenforced_key_is_refused() {
    for method in ["export", "watermarks"] {
        let db = TestDb::new(&format!("est_dupload_{method}_target")).await;
        let (source_dsn, source) = crate::harness::source_db(
            &format!("est_dupload_{method}"),
            "CREATE TABLE orders (id bigint NOT NULL, customer text, order_date date, amount numeric(12,2), status text);
             ALTER TABLE orders REPLICA IDENTITY FULL;
             INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-01', 2.00, 'new'),
                                       (2, 'twin', '2026-03-02', 2.50, 'new'), (3, 'c', '2026-03-02', 3.00, 'new');",
        )
        .await;
        std::fs::write(
            db.config_path(),
            postgres_config(
                &format!("est_dupload_{method}"),
                &format!("snapshot_method = \"{method}\"\n[engine]\nflush_interval_ms = 100"),
                &format!("[[table]]\n{}\n", orders("public.orders", &["id"], "day")),
            ),
        )
        .expect("config");
        // `init` finds them first; rows sharing a key after it, the load.
        let out = weir_pg(&db, &source_dsn, &["init"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{method}: {stderr}");
        assert!(
            stderr.contains("source table public.orders: 2 rows share 1 value of the key (id)"),
            "{method}: {stderr}"
        );
        source
            .batch_execute("DELETE FROM orders WHERE customer = 'twin'")
            .await
            .expect("fix the source");
        let out = weir_pg(&db, &source_dsn, &["init"]);
        assert!(out.status.success(), "{method}: {}", text(&out.stderr));
        source
            .batch_execute("INSERT INTO orders VALUES (2, 'twin', '2026-03-02', 2.50, 'new')")
            .await
            .expect("a second row of key 2");
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{method}: {stderr}");
        assert!(
            stderr.contains("source table public.orders: 2 rows share 1 value of the key (id)")
                && stderr.contains("CREATE UNIQUE INDEX ON"),
            "{method}: {stderr}"
        );
        assert!(!stderr.contains("twin"), "no row value is logged: {stderr}");
        assert_eq!(
            db.count("SELECT count(*) FROM analytics.fact_orders").await,
            0,
            "{method}: nothing written"
        );
        source
            .batch_execute("DELETE FROM orders WHERE customer = 'twin'")
            .await
            .expect("fix the source");
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        assert!(out.status.success(), "{method}: {}", text(&out.stderr));
        assert_eq!(
            db.count("SELECT count(*) FROM analytics.fact_orders").await,
            3,
            "{method}"
        );
    }
}

/// A publication altered while Weir streams (operations narrowed, changes made) hides
/// changes no read of the slot brings back: the live run stops, though nothing the
/// publication still publishes arrives after it (it is read again when idle too); and
/// `run` and `init` refuse the stage until `init --accept-publication`; a resync then
/// makes the target equal to the source.
#[tokio::test(flavor = "multi_thread")]
async fn a_publication_altered_while_streaming_stops_the_run_until_accepted_and_resynced() {
    let db = TestDb::new("est_pubalter_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_pubalter",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, DATE '2026-03-01' + (g % 3), g, 'new' FROM generate_series(1, 100) g;",
    )
    .await;
    write_config(
        &db,
        "est_pubalter",
        &orders("public.orders", &["id"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = db.path("run.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders",
        100,
        60,
        &log,
    )
    .await;
    source
        .batch_execute(
            "ALTER PUBLICATION est_pubalter SET (publish = 'insert');
             UPDATE orders SET status = 'hidden' WHERE id <= 10;
             DELETE FROM orders WHERE id > 90;",
        )
        .await
        .expect("alter the publication");
    let status = wait_exit(&mut run, &log, 60);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{logged}");
    assert!(
        logged.contains("publication `est_pubalter`: was altered since this stage last read it"),
        "{logged}"
    );
    source
        .batch_execute(
            "ALTER PUBLICATION est_pubalter SET (publish = 'insert, update, delete, truncate');
             INSERT INTO orders VALUES (101, 'late', '2026-03-01', 1, 'new');",
        )
        .await
        .expect("put the publication back");
    for args in [&["run", "--once"][..], &["init"][..]] {
        let out = weir_pg(&db, &source_dsn, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("was altered since this stage last read it")
                && stderr.contains("weir init --accept-publication"),
            "{args:?}: {stderr}"
        );
    }
    let out = weir_pg(&db, &source_dsn, &["init", "--accept-publication"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = db.path("run2.log");
    let _run = spawn_run(&db, &source_dsn, &log);
    let out = weir_pg(
        &db,
        &source_dsn,
        &["resync", "--table", "public.orders", "--wait"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (want, got) = (
            dump(&source, "orders").await,
            dump(&target, "analytics.fact_orders").await,
        );
        if want == got {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the target did not come to equal the source: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A stage made anew for the same source (a fresh snapshot, as the errors that need
/// one advise) counts generations from the start: lineage written from the old stage
/// does not make a backfill of the new one pass its partitions over, so the rows the
/// source deleted while no engine ran can be emptied out of the target.
#[tokio::test(flavor = "multi_thread")]
async fn a_stage_made_anew_can_backfill_partitions_the_old_stage_wrote() {
    let db = TestDb::new("est_newstage_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_newstage",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, DATE '2026-03-01' + (g % 3), g, 'new' FROM generate_series(1, 60) g;
         INSERT INTO orders SELECT g, 'aug' || g, DATE '2026-08-01', g, 'new' FROM generate_series(1001, 1010) g;",
    )
    .await;
    write_config(
        &db,
        "est_newstage",
        &orders("public.orders", &["id"], "day"),
    );
    for _ in 0..2 {
        // Generations well past the new stage's.
        let out = weir_pg(&db, &source_dsn, &["init"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        source
            .batch_execute("UPDATE orders SET amount = amount + 1 WHERE order_date = '2026-08-01'")
            .await
            .expect("update");
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    source
        .batch_execute("DELETE FROM orders WHERE order_date = '2026-08-01'")
        .await
        .expect("delete while no engine runs");
    let config = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        config.replace("path = \"stage\"", "path = \"stage_new\""),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "backfill",
            "--table",
            "public.orders",
            "--from",
            "2026-08-01",
            "--to",
            "2026-08-02",
            "--allow-empty",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("wrote 1 partitions (0 rows)"), "{stdout}");
    let target = db.client().await;
    assert_eq!(
        dump(&source, "orders").await,
        dump(&target, "analytics.fact_orders").await
    );
}

/// A slot someone else made under the configured name is refused at `init` unless Weir
/// can stream from it (logical, `pgoutput`, this database), naming what is wrong, and
/// the refused init leaves no publication behind.
#[tokio::test]
async fn init_refuses_a_slot_weir_cannot_stream_from() {
    let db = TestDb::new("est_badslot_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_badslot",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);",
    )
    .await;
    write_config(&db, "est_badslot", &orders("public.orders", &["id"], "day"));
    for (make, says) in [
        (
            "SELECT pg_create_logical_replication_slot('est_badslot', 'test_decoding')",
            "decodes with the output plugin `test_decoding`",
        ),
        (
            "SELECT pg_create_physical_replication_slot('est_badslot')",
            "is a physical slot",
        ),
    ] {
        source.batch_execute(make).await.expect("make the slot");
        let out = weir_pg(&db, &source_dsn, &["init"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("replication slot `est_badslot`") && stderr.contains(says),
            "{stderr}"
        );
        let publications: i64 = source
            .query_one(
                "SELECT count(*) FROM pg_publication WHERE pubname = 'est_badslot'",
                &[],
            )
            .await
            .expect("publications")
            .get(0);
        assert_eq!(publications, 0, "a refused init makes nothing");
        source
            .batch_execute("SELECT pg_drop_replication_slot('est_badslot')")
            .await
            .expect("drop the slot");
    }
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Once the stage streamed from it, a slot dropped by hand is not made again by
    // `init` (the changes made since are lost to this stage; a new slot would hold WAL
    // for a stage `run` refuses).
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    source
        .batch_execute("SELECT pg_drop_replication_slot('est_badslot')")
        .await
        .expect("drop the slot");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("never re-creates a slot silently"),
        "{stderr}"
    );
    let slots: i64 = source
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'est_badslot'",
            &[],
        )
        .await
        .expect("slots")
        .get(0);
    assert_eq!(slots, 0);
}

/// Columns of types Weir cannot write are all named at `init`; one added at the source
/// after the target was made is left out with a warning, at a restart as by the live
/// run that saw it added, rather than stopping every later run.
#[tokio::test]
async fn unsupported_columns_are_all_named_and_one_added_later_is_left_out() {
    let db = TestDb::new("est_unsupported_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_unsupported",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text,
                              feeling text[], waited interval);
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new', '{ok}', '1 hour');",
    )
    .await;
    write_config(
        &db,
        "est_unsupported",
        &orders("public.orders", &["id"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("column `feeling` has type text[], column `waited` has type interval, which Weir cannot write yet"),
        "{stderr}"
    );
    source
        .batch_execute("ALTER TABLE orders DROP COLUMN feeling, DROP COLUMN waited")
        .await
        .expect("drop them");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    source
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN waited interval;
             INSERT INTO orders VALUES (2, 'b', '2026-03-01', 2.00, 'new', '2 hours');",
        )
        .await
        .expect("add one");
    for _ in 0..2 {
        let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("a source column of a type Weir cannot write, which the target does not have, is left out"),
            "{stderr}"
        );
    }
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        2
    );
}

/// A table added to the config after the first load completed gets its own first load
/// (its rows were never read; only its later changes reached the target, silently).

#[tokio::test(flavor = "multi_thread")]
async fn a_table_taken_out_of_the_config_and_put_back_is_read_again() {
    let db = TestDb::new("est_back_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_back",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         CREATE TABLE refunds (LIKE orders INCLUDING ALL);
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g, 'new' FROM generate_series(1, 20) g;
         INSERT INTO refunds SELECT g, 'r', DATE '2026-03-01' + g % 3, g, 'new' FROM generate_series(1, 30) g;
         CREATE PUBLICATION est_back FOR TABLE orders, refunds;",
    )
    .await;
    let refunds = OrdersTable::postgres("analytics.fact_refunds")
        .source("public.refunds")
        .body();
    let both = postgres_config(
        "est_back",
        "",
        &format!(
            "[[table]]\n{}\n[[table]]\n{refunds}\n",
            orders("public.orders", &["id"], "day")
        ),
    );
    std::fs::write(db.config_path(), &both).expect("config");
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    // Refunds out of the config: a run passes its changes over.
    write_config(&db, "est_back", &orders("public.orders", &["id"], "day"));
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no longer in the config"),
        "{}",
        text(&out.stderr)
    );
    source
        .batch_execute(
            "UPDATE refunds SET status = 'late', order_date = DATE '2026-03-05' WHERE id = 1;
             DELETE FROM refunds WHERE id IN (2, 3);
             INSERT INTO refunds VALUES (31, 'r', DATE '2026-03-02', 31, 'new');
             UPDATE orders SET status = 'paid' WHERE id = 4;",
        )
        .await
        .expect("changes while refunds is out of the config");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Put back: read whole again, this run.
    std::fs::write(db.config_path(), &both).expect("config");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("back in the config"),
        "{}",
        text(&out.stderr)
    );
    let target = db.client().await;
    crate::postgres_source::assert_same_rows(&source, "refunds", &target, "analytics.fact_refunds")
        .await;
    crate::postgres_source::assert_same_rows(&source, "orders", &target, "analytics.fact_orders")
        .await;
    // Asked once: the next run reads it as usual.
    source
        .batch_execute("UPDATE refunds SET status = 'again' WHERE id = 5;")
        .await
        .expect("a later change");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("back in the config"),
        "{}",
        text(&out.stderr)
    );
    crate::postgres_source::assert_same_rows(&source, "refunds", &target, "analytics.fact_refunds")
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_added_to_the_config_later_is_loaded_whole() {
    let db = TestDb::new("est_added_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_added",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         CREATE TABLE refunds (LIKE orders INCLUDING ALL);
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g, 'new' FROM generate_series(1, 20) g;
         INSERT INTO refunds SELECT g, 'r', DATE '2026-03-01' + g % 3, g, 'new' FROM generate_series(1, 30) g;",
    )
    .await;
    write_config(&db, "est_added", &orders("public.orders", &["id"], "day"));
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    source
        .batch_execute(
            "UPDATE refunds SET status = 'late' WHERE id = 1;
             ALTER PUBLICATION est_added ADD TABLE refunds;
             UPDATE refunds SET status = 'later' WHERE id = 2;",
        )
        .await
        .expect("changes before and after the table is published");
    let refunds = OrdersTable::postgres("analytics.fact_refunds")
        .source("public.refunds")
        .body();
    std::fs::write(
        db.config_path(),
        postgres_config(
            "est_added",
            "[engine]\nflush_interval_ms = 100",
            &format!(
                "[[table]]\n{}\n[[table]]\n{refunds}\n",
                orders("public.orders", &["id"], "day")
            ),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Not loaded yet: `status` says so (it said `snapshot: complete`). A partition
    // written by another transform is listed as stale (`status` panicked on a
    // PostgreSQL source's table, whose columns come from the catalog).
    let target = db.client().await;
    target
        .batch_execute(
            "UPDATE weir.partitions SET plugin_sha256 = 'another' WHERE target_table = 'analytics.fact_orders'",
        )
        .await
        .expect("another transform's lineage");
    let out = weir_pg(&db, &source_dsn, &["status"]);
    let status = text(&out.stdout);
    assert!(out.status.success(), "{status}{}", text(&out.stderr));
    assert!(
        status.contains("snapshot:   public.refunds: waiting")
            && status.contains("snapshot:   public.orders: done"),
        "{status}"
    );
    assert!(status.contains("stale:      3 partitions"), "{status}");
    target
        .batch_execute(
            "UPDATE weir.partitions SET plugin_sha256 = NULL WHERE target_table = 'analytics.fact_orders'",
        )
        .await
        .expect("lineage back");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    crate::postgres_source::assert_same_rows(&source, "refunds", &target, "analytics.fact_refunds")
        .await;
    crate::postgres_source::assert_same_rows(&source, "orders", &target, "analytics.fact_orders")
        .await;
    let out = weir_pg(&db, &source_dsn, &["status"]);
    assert!(
        text(&out.stdout).contains("snapshot:   complete"),
        "{}",
        text(&out.stdout)
    );
}

/// The primary key changed while `weir run` streams (`ADD PRIMARY KEY` on more
/// columns), then rows that share the configured key: the run stops at the Relation
/// message that carries the new key, before merging them, and says how to go on.
#[tokio::test]
async fn a_key_changed_while_streaming_stops_the_run_before_rows_merge() {
    let db = TestDb::new("est_keychange_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_keychange",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-02', 2.00, 'new');",
    )
    .await;
    write_config(
        &db,
        "est_keychange",
        &orders("public.orders", &["id"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let log = db.path("run.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    let count = "SELECT count(*) FROM analytics.fact_orders";
    wait_count(&target, count, 2, 120, &log).await;
    source
        .batch_execute(
            "ALTER TABLE orders DROP CONSTRAINT orders_pkey, ADD PRIMARY KEY (id, order_date);
             INSERT INTO orders VALUES (1, 'twin', '2026-03-05', 5.00, 'new');",
        )
        .await
        .expect("key change");
    let status = wait_exit(&mut run, &log, 60);
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the source table's key changed while streaming")
            && stderr.contains("are (id, order_date), the configured key is (id)"),
        "{stderr}"
    );
    // Nothing merged: the target holds the rows before the change.
    let rows: Vec<(i64, String)> = target
        .query(
            "SELECT id, customer FROM analytics.fact_orders ORDER BY id",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(1, "a".to_owned()), (2, "b".to_owned())]);
}

/// The same with `REPLICA IDENTITY FULL`, whose Relation messages name no key: the
/// primary key dropped while `weir run` streams, then a second row of a staged key.
/// The stage's key guard stops the run at that INSERT, before the rows merge.
#[tokio::test]
async fn a_key_dropped_from_a_full_identity_table_while_streaming_stops_the_run() {
    let db = TestDb::new("est_fulldrop_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_fulldrop",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         ALTER TABLE orders REPLICA IDENTITY FULL;
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-02', 2.00, 'new');",
    )
    .await;
    write_config(
        &db,
        "est_fulldrop",
        &orders("public.orders", &["id"], "day"),
    );
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "init: {}", text(&out.stderr));
    let log = db.path("run.log");
    let mut run = spawn_run(&db, &source_dsn, &log);
    let target = db.client().await;
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders",
        2,
        120,
        &log,
    )
    .await;
    source
        .batch_execute(
            "ALTER TABLE orders DROP CONSTRAINT orders_pkey;
             INSERT INTO orders VALUES (1, 'twin', '2026-03-05', 5.00, 'new');",
        )
        .await
        .expect("key dropped");
    let status = wait_exit(&mut run, &log, 60);
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("public.orders: an INSERT, or an UPDATE that changed a row's key, arrived for a key the stage already holds"),
        "{stderr}"
    );
    let rows: Vec<(i64, String)> = target
        .query(
            "SELECT id, customer FROM analytics.fact_orders ORDER BY id",
            &[],
        )
        .await
        .expect("rows")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(1, "a".to_owned()), (2, "b".to_owned())]);
}

/// A new stage of the source (the recovery the errors give after a table was dropped
/// and made again): once its first load is done, the partitions only the old stage
/// wrote, which the source no longer holds, are emptied by the next start, not left
/// in the target.
#[tokio::test]
async fn a_new_stage_empties_the_partitions_only_the_old_stage_wrote() {
    let db = TestDb::new("est_orphan_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_orphan",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-02', 2.00, 'new'),
                                   (3, 'c', '2026-03-03', 3.00, 'new');",
    )
    .await;
    write_config(&db, "est_orphan", &orders("public.orders", &["id"], "day"));
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    // The table dropped and made again, without the day 2026-03-02; a new slot and
    // stage read it.
    source
        .batch_execute(
            "DROP TABLE orders;
             CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
             INSERT INTO orders VALUES (1, 'a2', '2026-03-01', 1.00, 'new'), (3, 'c', '2026-03-03', 3.00, 'new');
             ALTER PUBLICATION est_orphan ADD TABLE orders;",
        )
        .await
        .expect("made again");
    let config = postgres_config(
        "est_orphan2",
        "publication = \"est_orphan\"\n[engine]\nflush_interval_ms = 100",
        &format!("[[table]]\n{}\n", orders("public.orders", &["id"], "day")),
    )
    .replace("publication = \"est_orphan2\"\n", "")
    .replace("path = \"stage\"", "path = \"stage2\"");
    std::fs::write(db.config_path(), config).expect("config");
    // The first run, whose first load ends while it runs, empties it already. (A new
    // slot is another feed: it takes the target over.)
    for args in [&["init", "--take-over"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    crate::postgres_source::assert_same_rows(
        &source,
        "orders",
        &db.client().await,
        "analytics.fact_orders",
    )
    .await;
}

/// The table's grain changed, which takes a new stage (and slot): the partitions the
/// old stage wrote under the old grain, whose span this stage holds no rows of, are
/// emptied by the first run (day to month, then month to day), so rows the source
/// deleted meanwhile do not stay in the target.
#[tokio::test]
async fn a_new_stage_of_another_grain_empties_what_the_old_grain_left() {
    let db = TestDb::new("est_regrain_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_regrain",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new'), (2, 'b', '2026-03-02', 2.00, 'new'),
                                   (3, 'c', '2026-04-15', 3.00, 'new');",
    )
    .await;
    write_config(&db, "est_regrain", &orders("public.orders", &["id"], "day"));
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let target = db.client().await;
    for (step, grain, delete) in [(2, "month", 3), (3, "day", 2)] {
        source
            .batch_execute(&format!("DELETE FROM orders WHERE id = {delete}"))
            .await
            .expect("delete");
        let config = postgres_config(
            &format!("est_regrain{step}"),
            "publication = \"est_regrain\"",
            &format!("[[table]]\n{}\n", orders("public.orders", &["id"], grain)),
        )
        .replace(&format!("publication = \"est_regrain{step}\"\n"), "")
        .replace("path = \"stage\"", &format!("path = \"stage{step}\""));
        std::fs::write(db.config_path(), config).expect("config");
        for args in [&["init", "--take-over"][..], &["run", "--once"]] {
            let out = weir_pg(&db, &source_dsn, args);
            assert!(
                out.status.success(),
                "{grain} {args:?}: {}",
                text(&out.stderr)
            );
        }
        crate::postgres_source::assert_same_rows(
            &source,
            "orders",
            &target,
            "analytics.fact_orders",
        )
        .await;
    }
}

/// Values held out of line (TOAST) in a key column and in the partition column, and
/// updates that leave them out (unchanged): the key comes from the old key PostgreSQL
/// logs whole, and the partition column from the row as the stage holds it when the
/// update is applied, even when an earlier change of the same transaction, or of a
/// transaction staged with it, changed that value: nothing stale, and the stream does
/// not stop.
#[tokio::test]
async fn unchanged_out_of_line_keys_and_partition_values_come_from_the_latest_row() {
    let db = TestDb::new("est_toastkey_target").await;
    let long = |head: &str, salt: &str| {
        format!(
            "'{head}' || (SELECT string_agg(md5(i::text || {salt} || random()::text), '') FROM generate_series(1, 80) i)"
        )
    };
    let (source_dsn, source) = crate::harness::source_db(
        "est_toastkey",
        &format!(
            "CREATE TABLE pv (id bigint PRIMARY KEY, p text NOT NULL, amount int);
             ALTER TABLE pv ALTER COLUMN p SET STORAGE EXTERNAL;
             CREATE TABLE pvk (k text PRIMARY KEY, d date NOT NULL, amount int);
             ALTER TABLE pvk ALTER COLUMN k SET STORAGE EXTERNAL;
             INSERT INTO pv SELECT g, {}, g FROM generate_series(1, 4) g;
             INSERT INTO pvk VALUES ({}, '2026-01-01', 77);",
            long("A", "g::text"),
            long("L", "'k'")
        ),
    )
    .await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "est_toastkey",
            "[engine]\nflush_interval_ms = 100",
            "[[table]]\nsource = \"public.pv\"\ntarget = \"analytics.pv\"\nkey = [\"id\"]\npartition_by = \"p\"\ngrain = \"value\"\n\n\
             [[table]]\nsource = \"public.pvk\"\ntarget = \"analytics.pvk\"\nkey = [\"k\"]\npartition_by = \"d\"\ngrain = \"day\"\n",
        ),
    )
    .expect("config");
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    source
        .batch_execute(&format!(
            "UPDATE pv SET p = {} WHERE id = 3;
             UPDATE pv SET amount = 300 WHERE id = 3;
             BEGIN;
             UPDATE pv SET p = {} WHERE id = 4;
             UPDATE pv SET amount = 400 WHERE id = 4;
             COMMIT;
             BEGIN;
             INSERT INTO pv VALUES (50, {}, 50);
             UPDATE pv SET amount = 51 WHERE id = 50;
             COMMIT;
             UPDATE pvk SET amount = 78;",
            long("E", "'3'"),
            long("F", "'4'"),
            long("G", "'50'")
        ))
        .await
        .expect("updates");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let target = db.client().await;
    for (from, to) in [
        (
            "SELECT id::text || ' ' || md5(p) || ' ' || amount FROM pv ORDER BY id",
            "analytics.pv",
        ),
        (
            "SELECT md5(k) || ' ' || d || ' ' || amount FROM pvk ORDER BY 1",
            "analytics.pvk",
        ),
    ] {
        let want = texts(&source, from).await;
        let got = texts(
            &target,
            &from
                .replace("FROM pv ", "FROM analytics.pv ")
                .replace("FROM pvk ", "FROM analytics.pvk "),
        )
        .await;
        assert_eq!(want, got, "{to}");
        assert!(!want.is_empty());
    }
    // And each row is in the partition its value names.
    let misplaced = db
        .count("SELECT count(*) FROM analytics.pv t JOIN weir.partitions l ON l.target_table = 'analytics.pv' AND l.partition = t.p WHERE l.row_count = 0")
        .await;
    assert_eq!(misplaced, 0);
}

/// The one text column of each row `sql` returns.
async fn texts(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .query(sql, &[])
        .await
        .expect("rows")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

/// Two source databases (two shards) with a table of the same name, each its own
/// stage and slot, into one target table: the second pipeline is refused, naming the
/// first and its source, where it used to replace, then empty, the first's partitions.
#[tokio::test]
async fn a_second_shard_of_the_same_table_name_into_one_target_is_refused() {
    let db = TestDb::new("est_shards_target").await;
    let ddl = |first: i64| {
        format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
             INSERT INTO orders SELECT g, 'c', DATE '2026-04-01' + (g % 5), 1, 'new' FROM generate_series({first}, {first} + 49) g;"
        )
    };
    let (dsn_a, _source_a) = crate::harness::source_db("est_shard_a", &ddl(1)).await;
    let (dsn_b, _source_b) = crate::harness::source_db("est_shard_b", &ddl(1001)).await;
    write_config(&db, "est_shard_a", &orders("public.orders", &["id"], "day"));
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &dsn_a, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let config = postgres_config(
        "est_shard_b",
        "[engine]\nflush_interval_ms = 100",
        &format!("[[table]]\n{}\n", orders("public.orders", &["id"], "day")),
    )
    .replace("path = \"stage\"", "path = \"stage_b\"");
    std::fs::write(db.config_path(), config).expect("config");
    let out = weir_pg(&db, &dsn_b, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("holds 5 partitions another pipeline wrote, from public.orders of postgres:")
            && stderr.contains("/est_shard_a_source"),
        "{stderr}"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        50
    );
}

/// The target the source table itself (one database for both, `target` naming the
/// source table): refused by `init`, where a live run would stream its own writes
/// back for ever.
#[tokio::test]
async fn a_target_that_is_the_source_table_itself_is_refused() {
    let db = TestDb::new("est_self_target").await;
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
             INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new');",
        )
        .await
        .expect("table");
    let table = OrdersTable::postgres("public.orders")
        .source("public.orders")
        .key(&["id"])
        .body();
    write_config(&db, "est_self", &table);
    let out = weir_pg(&db, &db.dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("public.orders is the source table public.orders itself"),
        "{stderr}"
    );
}

/// `weir init` behind a transaction left open: creating the slot waits for it, and
/// says so, naming the session, until it ends.
#[tokio::test]
async fn init_names_the_transaction_its_slot_waits_for() {
    let db = TestDb::new("est_slotwait_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_slotwait",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);",
    )
    .await;
    write_config(
        &db,
        "est_slotwait",
        &orders("public.orders", &["id"], "day"),
    );
    source
        .batch_execute("BEGIN; INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new');")
        .await
        .expect("an open transaction");
    let pid: i32 = source
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let log = db.path("init.log");
    let mut init = db
        .weir_command(&["init"])
        .env("WEIR_SOURCE_DSN", &source_dsn)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn init");
    let want = format!("session {pid} (database est_slotwait_source");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if logged.contains("creating the replication slot waits") && logged.contains(&want) {
            break;
        }
        assert!(Instant::now() < deadline, "{logged}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(init.try_wait().expect("poll").is_none(), "init is waiting");
    source.batch_execute("COMMIT").await.expect("commit");
    let status = init.wait().expect("init");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// Partitions of years past 9999 and before 1 (named with a sign) are in the windows
/// their dates are in, not where their names' text would sort: `verify` of a window
/// checks them, and finds a damaged one.
#[tokio::test]
async fn windows_hold_the_partitions_of_signed_years_in_time_order() {
    let db = TestDb::new("est_signed_years_target").await;
    let (source_dsn, _source) = crate::harness::source_db(
        "est_signed_years",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders VALUES (1, 'a', '10000-01-01', 1.00, 'new'), (2, 'b', '0100-03-01 BC', 2.00, 'new'),
                                   (3, 'c', '2026-03-01', 3.00, 'new');",
    )
    .await;
    write_config(
        &db,
        "est_signed_years",
        &orders("public.orders", &["id"], "day"),
    );
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    db.client()
        .await
        .batch_execute("UPDATE analytics.fact_orders SET amount = 9.00 WHERE id IN (1, 2)")
        .await
        .expect("damage");
    for (from, to, partition) in [
        ("9999-01-01", "+10001-01-01", "+10000-01-01"),
        ("-0200-01-01", "-0044-01-01", "-0099-03-01"),
    ] {
        let out = weir_pg(
            &db,
            &source_dsn,
            &[
                "verify",
                "--table",
                "public.orders",
                "--from",
                from,
                "--to",
                to,
            ],
        );
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{from}..{to}: {stdout}{}",
            text(&out.stderr)
        );
        assert!(stdout.contains(partition), "{from}..{to}: {stdout}");
    }
}

/// A source that went back in time (restored from a backup, recovered to an earlier
/// point): its WAL ends before the stage's position. The stage holds changes the
/// server no longer has, and the server's commits since, below that position, would
/// be passed over as staged (before: silently, exit 0, `verify` passing). The run
/// stops, saying how to go on. Made here by moving the stage's position past the
/// server's WAL, which is what a restore of the server looks like from the stage.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_that_went_back_in_time_is_refused() {
    let db = TestDb::new("est_back_in_time_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "est_back_in_time",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g, 'new' FROM generate_series(1, 20) g;",
    )
    .await;
    write_config(
        &db,
        "est_back_in_time",
        &orders("public.orders", &["id"], "day"),
    );
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let end = lsn(&source, "SELECT pg_current_wal_lsn()").await;
    {
        let config = weir::config::Config::load(&db.config_path()).expect("config");
        let stage = weir::stage::Stage::open(&config.stage_path, &config.source_id())
            .expect("open the stage");
        stage
            .advance_position(end as u64 + (64 << 20))
            .expect("move the position past the server's WAL");
    }
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("went back in time") && stderr.contains("new folder"),
        "{stderr}"
    );
}

/// A column added at the source while `weir run` streams: its values are staged, the
/// partitions written meanwhile lack them (the target does not have the column yet),
/// and `weir init --allow-add-columns` then makes the next run write those partitions
/// again with the values (before: `wrote 0 partitions`, the value NULL for good).
#[tokio::test(flavor = "multi_thread")]
async fn a_column_added_while_streaming_reaches_the_target_once_it_has_it() {
    let (db, source_dsn, source, mut run, log) = streaming(
        "est_added_col",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders VALUES (1, 'c', DATE '2026-03-01', 1, 'new');",
        "public.orders",
    )
    .await;
    let target = db.client().await;
    source
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN note text;
             INSERT INTO orders VALUES (2, 'c', DATE '2026-03-01', 2, 'new', 'hello');",
        )
        .await
        .expect("a column added while streaming");
    wait_count(
        &target,
        "SELECT count(*) FROM analytics.fact_orders",
        2,
        60,
        &log,
    )
    .await;
    let _ = run.0.kill();
    let _ = run.0.wait();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.contains("source table gained columns"), "{logged}");
    for args in [&["init", "--allow-add-columns"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let note: Option<String> = target
        .query_one("SELECT note FROM analytics.fact_orders WHERE id = 2", &[])
        .await
        .expect("the row")
        .get(0);
    assert_eq!(note.as_deref(), Some("hello"));
}

/// A column narrowed while `weir run` streams (PostgreSQL rounds the table's rows,
/// which the stream never carries) stops the run naming it, as any other type change
/// does (before: taken for an old transaction of a widened column, and the target
/// kept `1.2345` where the source now holds `1.2`).
#[tokio::test(flavor = "multi_thread")]
async fn a_column_narrowed_while_streaming_stops_the_run() {
    let (_db, _, source, mut run, log) = streaming(
        "est_narrowed",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(14,4), status text);
         INSERT INTO orders VALUES (1, 'c', DATE '2026-03-01', 1.2345, 'new');",
        "public.orders",
    )
    .await;
    source
        .batch_execute(
            "ALTER TABLE orders ALTER amount TYPE numeric(10,1);
             INSERT INTO orders VALUES (2, 'c', DATE '2026-03-01', 2, 'new');",
        )
        .await
        .expect("a column narrowed while streaming");
    let status = wait_exit(&mut run, &log, 60);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "{logged}");
    assert!(logged.contains("is now numeric(10,1)"), "{logged}");
}

/// Waits until a live run streams (its catalog read, the stream open).
fn wait_streaming(log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains("streaming from the replication slot")
    {
        assert!(
            Instant::now() < deadline,
            "not streaming: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A configured table's schema renamed while `weir run` streams (`ALTER SCHEMA …
/// RENAME`, a blue/green swap): no Relation message tells the stream, so the periodic
/// catalog check finds the table under its new name and stops the run, naming it
/// (before: the run went on staging the table the config no longer names, and warned
/// of detached partitions).
#[tokio::test(flavor = "multi_thread")]
async fn a_schema_renamed_while_streaming_stops_the_run_naming_the_table() {
    let (db, source_dsn, source, mut run, log) = streaming(
        "est_schema_renamed",
        "CREATE SCHEMA blue;
         CREATE TABLE blue.orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO blue.orders VALUES (1, 'c', DATE '2026-03-01', 1, 'new');",
        "blue.orders",
    )
    .await;
    source
        .batch_execute(
            "ALTER SCHEMA blue RENAME TO green;
             INSERT INTO green.orders VALUES (2, 'c', DATE '2026-03-01', 2, 'new');",
        )
        .await
        .expect("a schema renamed while streaming");
    let status = wait_exit(&mut run, &log, 60);
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "{logged}");
    assert!(
        logged.contains("is now green.orders") && !logged.contains("detached or dropped"),
        "{logged}"
    );
    // Every table the config names that is missing is named in one error.
    let refunds = OrdersTable::postgres("analytics.fact_refunds")
        .source("blue.refunds")
        .body();
    std::fs::write(
        db.config_path(),
        postgres_config(
            "est_schema_renamed",
            "",
            &format!(
                "[[table]]\n{}\n[[table]]\n{refunds}\n",
                orders("blue.orders", &["id"], "day")
            ),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("blue.orders does not exist (nor do blue.refunds: 2 tables in all)"),
        "{stderr}"
    );
}

/// A source database `name` made with `ddl`, its table `table` configured (day grain)
/// and loaded, and a live `weir run` streaming it, with its log.
async fn streaming(
    name: &str,
    ddl: &str,
    table: &str,
) -> (
    TestDb,
    String,
    tokio_postgres::Client,
    Reaped,
    std::path::PathBuf,
) {
    let db = TestDb::new(&format!("{name}_target")).await;
    let (source_dsn, source) = crate::harness::source_db(name, ddl).await;
    write_config(&db, name, &orders(table, &["id"], "day"));
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    let log = db.path("live.log");
    let run = spawn_run(&db, &source_dsn, &log);
    wait_streaming(&log);
    (db, source_dsn, source, run, log)
}
