//! The PostgreSQL logical replication source, driven through the library against a
//! real slot: committed transactions reach the stage exactly, unchanged TOAST values
//! are filled from the staged image, a key-only old tuple moves a row across
//! partitions, a transaction larger than the chunk size streams through the pending
//! area, and the slot's confirmed position is the stage's, never beyond.

use std::sync::Arc;

use weir::config::{Config, Dsn};
use weir::source::postgres::{PostgresSource, PostgresSourceOptions};
use weir::source::{ChangeSource, SourceEvent};
use weir::stage::Stage;
use weir::value::Value;
use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::TestDb;

const CONFIG: &str = r#"
[source]
kind = "jsonl"
path = "unused.jsonl"
[stage]
path = "stage"
[target]
kind = "postgres"
dsn_env = "UNUSED"
[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
columns = { id = "bigint", order_date = "date", amount = "numeric(12,2)", note = "text" }
"#;

/// Drains the source into the stage the way the pipeline does: chunks to the pending
/// area, a transaction staged and then acknowledged.
async fn drain(source: &mut PostgresSource, stage: &Stage) -> (usize, usize) {
    let (mut transactions, mut chunks) = (0, 0);
    loop {
        match source.next().await.expect("source event") {
            SourceEvent::Chunk(changes) => {
                stage.append_pending(&changes).expect("append chunk");
                chunks += 1;
            }
            SourceEvent::Abort => stage.discard_pending().expect("discard"),
            SourceEvent::Transaction(txn) => {
                stage.apply(&[txn]).expect("stage");
                transactions += 1;
                let checkpoint = stage.checkpoint().expect("position").expect("a position");
                source.acknowledge(checkpoint).await.expect("acknowledge");
            }
            SourceEvent::StreamChunk { xid, changes } => {
                stage
                    .append_stream(xid, &changes)
                    .expect("append streamed chunk");
                chunks += 1;
            }
            SourceEvent::StreamDiscard { xid } => stage.discard_stream(xid).expect("discard"),
            SourceEvent::StreamCommit(c) => {
                stage
                    .stage_stream(c.xid, &c.aborted, c.commit_position, c.commit_time_us)
                    .expect("stage streamed");
                stage.apply(&[c.transaction()]).expect("stage");
                transactions += 1;
                let checkpoint = stage.checkpoint().expect("position").expect("a position");
                source.acknowledge(checkpoint).await.expect("acknowledge");
            }
            SourceEvent::Idle => {}
            SourceEvent::End => return (transactions, chunks),
        }
    }
}

/// The staged rows as (id, order_date, amount, note length), ordered by id.
fn staged(stage: &Stage) -> Vec<(i64, String, String, usize)> {
    let mut rows: Vec<_> = stage
        .table_rows("public.orders")
        .expect("rows")
        .into_iter()
        .map(|(partition, row)| {
            let get = |c: &str| {
                row.values
                    .iter()
                    .find(|(n, _)| n == c)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Value::Null)
            };
            let Value::Int(id) = get("id") else {
                panic!("id")
            };
            let note = match get("note") {
                Value::Text(t) => t.len(),
                _ => 0,
            };
            assert_eq!(
                partition.name(),
                get("order_date").to_string(),
                "row {id} in its partition"
            );
            (
                id,
                get("order_date").to_string(),
                get("amount").to_string(),
                note,
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The test command runs this file against each PostgreSQL of its version matrix
/// (`scripts/test`: the distribution's, then `scripts/install-postgres 18` with
/// `WEIR_PG_MAJOR=18`): the cluster the tests start is the version asked for, so a
/// matrix entry that silently fell back to another server fails here.
#[tokio::test(flavor = "multi_thread")]
async fn the_source_server_is_the_version_the_matrix_asks_for() {
    let db = TestDb::new("pg_version").await;
    let num: i32 = db
        .client()
        .await
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("server_version_num")
        .get(0);
    let major = num / 10_000;
    match std::env::var("WEIR_PG_MAJOR") {
        Ok(wanted) => assert_eq!(
            major.to_string(),
            wanted.trim(),
            "WEIR_PG_MAJOR={wanted} but the test cluster is PostgreSQL {num}"
        ),
        Err(_) => assert!(
            major >= 15,
            "the test cluster is PostgreSQL {num}; Weir is tested on 15 and later"
        ),
    }
}

/// `weir init` makes the slot a failover slot where the server has them (17 and later),
/// and says so; on an older server it says that a promoted standby will not have the
/// slot. `weir status` shows the same. An existing slot made without failover on 17+ is
/// named with the command that changes it.
#[tokio::test(flavor = "multi_thread")]
async fn init_makes_a_failover_slot_where_the_server_has_them_and_says_so() {
    let db = TestDb::new("pg_failover_slot_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_failover_slot",
        "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date, amount numeric(12,2), note text)",
        "",
        &OrdersTable::postgres("analytics.orders").body(),
    )
    .await;
    let num: i32 = source
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("version")
        .get(0);
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let init = crate::harness::text(&out.stdout);
    assert!(
        out.status.success(),
        "{init}{}",
        crate::harness::text(&out.stderr)
    );
    let status = weir_pg(&db, &source_dsn, &["status"]);
    let status = crate::harness::text(&status.stdout);
    if num >= 170_000 {
        let failover: bool = source
            .query_one(
                "SELECT failover FROM pg_replication_slots WHERE slot_name = 'pg_failover_slot'",
                &[],
            )
            .await
            .expect("slot")
            .get(0);
        assert!(failover, "the slot is not a failover slot:\n{init}");
        assert!(
            init.contains("slot pg_failover_slot: a failover slot"),
            "{init}"
        );
        assert!(
            status.contains("failover:   a failover slot; synchronized_standby_slots is empty"),
            "{status}"
        );
        // A slot made by hand without failover: named, with the command that fixes it.
        drop_and_recreate_slot_without_failover(&source, "pg_failover_slot").await;
        let again = weir_pg(&db, &source_dsn, &["init"]);
        let again = crate::harness::text(&again.stdout);
        assert!(
            again.contains("not a failover slot")
                && again.contains("ALTER_REPLICATION_SLOT \"pg_failover_slot\" (FAILOVER true)"),
            "{again}"
        );
    } else {
        assert!(
            init.contains("slot pg_failover_slot: not a failover slot: PostgreSQL ")
                && init.contains("17 and later"),
            "{init}"
        );
        assert!(
            status.contains("failover:   none (failover slots need PostgreSQL 17 or later)"),
            "{status}"
        );
    }
}

async fn drop_and_recreate_slot_without_failover(source: &tokio_postgres::Client, slot: &str) {
    source
        .query_one("SELECT pg_drop_replication_slot($1)::text", &[&slot])
        .await
        .expect("drop slot");
    source
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .expect("create slot");
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_changes_reach_the_stage_exactly_and_the_slot_follows_it() {
    let db = TestDb::new("pg_source").await;
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date, amount numeric(12,2), note text);
             CREATE PUBLICATION weir_pub FOR TABLE orders;",
        )
        .await
        .expect("source setup");
    // A slot cannot be created in a transaction that wrote: its own statement.
    client
        .batch_execute("SELECT pg_create_logical_replication_slot('weir_slot', 'pgoutput')")
        .await
        .expect("create slot");
    let config = Config::parse(CONFIG, &db.path("weir.toml")).expect("config");
    let stage = Arc::new(Stage::open(&db.path("stage"), "postgres:weir_slot").expect("stage"));
    // A 6,000-character note that PostgreSQL stores out of line (TOAST): random text
    // does not compress.
    let toasted: String = (0..6000u32)
        .map(|i| char::from(b'a' + ((i.wrapping_mul(2654435761) >> 7) % 26) as u8))
        .collect();
    client
        .batch_execute(&format!(
            "INSERT INTO orders VALUES (1, '2026-03-01', 10.50, '{toasted}'), (2, '2026-03-01', 20.00, 'short'), (3, '2026-03-02', 30.00, NULL);
             BEGIN; UPDATE orders SET amount = 11.00 WHERE id = 1; UPDATE orders SET order_date = '2026-03-03' WHERE id = 2; DELETE FROM orders WHERE id = 3; COMMIT;
             INSERT INTO orders SELECT g, DATE '2026-03-01' + (g % 5), g, 'bulk' FROM generate_series(100, 1099) g;"
        ))
        .await
        .expect("workload");
    let options = PostgresSourceOptions {
        slot: "weir_slot".into(),
        publication: "weir_pub".into(),
        once: true,
        chunk_changes_max: 300,
        snapshot_chunk_rows: 10_000,
        snapshot_parallelism: 2,
        snapshot_method: weir::config::SnapshotMethod::Watermarks,
        load_watch: None,
        heartbeat_interval_ms: 10_000,
        primary: None,
        streaming: true,
        binary: true,
        catalog_lsn: 0,
    };
    let dsn = Dsn::new(db.dsn.clone());
    let mut source = PostgresSource::open(
        &dsn,
        &options,
        config.tables.clone(),
        Arc::clone(&stage),
        None,
    )
    .await
    .expect("open source");
    let (transactions, chunks) = drain(&mut source, &stage).await;
    assert!(
        transactions >= 3,
        "three source transactions (and the drain mark), got {transactions}"
    );
    assert!(
        chunks >= 3,
        "the 1,000-row insert streamed through the pending area in chunks, got {chunks}"
    );

    let expected: Vec<(i64, String, String, usize)> = client
        .query("SELECT id, order_date::text, amount::text, coalesce(length(note), 0)::bigint FROM orders ORDER BY id", &[])
        .await
        .expect("source rows")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), usize::try_from(r.get::<_, i64>(3)).expect("length")))
        .collect();
    let got = staged(&stage);
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected, "the stage equals the source table");
    assert_eq!(
        got[0],
        (1, "2026-03-01".to_owned(), "11.00".to_owned(), 6000),
        "the unchanged TOAST value survived the update"
    );

    // The slot's confirmed position is the stage's position.
    drop(source);
    let position = stage
        .checkpoint()
        .expect("position")
        .expect("staged")
        .position;
    let confirmed: String = client
        .query_one("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'weir_slot'", &[])
        .await
        .expect("slot")
        .get(0);
    assert_eq!(
        weir::pg::lsn::parse_lsn(&confirmed),
        Some(position),
        "confirmed {confirmed}"
    );

    // A restart re-delivers nothing that was acknowledged, and picks up what is new.
    client
        .batch_execute("UPDATE orders SET amount = 99.99 WHERE id = 100")
        .await
        .expect("update");
    let mut source = PostgresSource::open(
        &dsn,
        &options,
        config.tables.clone(),
        Arc::clone(&stage),
        stage.checkpoint().expect("position"),
    )
    .await
    .expect("reopen");
    let (transactions, _) = drain(&mut source, &stage).await;
    assert!(
        transactions <= 2,
        "only the new update (and the drain mark) arrive, got {transactions}"
    );
    assert!(staged(&stage).contains(&(100, "2026-03-01".to_owned(), "99.99".to_owned(), 4)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_slot_is_a_loud_error_that_names_the_recovery() {
    let db = TestDb::new("pg_source_noslot").await;
    let config = Config::parse(CONFIG, &db.path("weir.toml")).expect("config");
    let stage = Arc::new(Stage::open(&db.path("stage"), "postgres:none").expect("stage"));
    let options = PostgresSourceOptions {
        slot: "no_such_slot".into(),
        publication: "p".into(),
        once: true,
        chunk_changes_max: 100,
        snapshot_chunk_rows: 10_000,
        snapshot_parallelism: 2,
        snapshot_method: weir::config::SnapshotMethod::Watermarks,
        load_watch: None,
        heartbeat_interval_ms: 10_000,
        primary: None,
        streaming: true,
        binary: true,
        catalog_lsn: 0,
    };
    let err = PostgresSource::open(
        &Dsn::new(db.dsn.clone()),
        &options,
        config.tables,
        stage,
        None,
    )
    .await
    .expect_err("no slot");
    let message = err.to_string();
    assert!(
        message.contains("`no_such_slot` does not exist")
            && message.contains("never re-creates a slot silently"),
        "{message}"
    );
}

/// The rows of an orders table as text, ordered by id.
pub(crate) async fn dump(
    client: &tokio_postgres::Client,
    table: &str,
) -> Vec<(i64, String, Option<String>, String, String)> {
    client
        .query(&format!("SELECT id, customer, order_date::text, amount::text, status FROM {table} ORDER BY id"), &[])
        .await
        .expect("dump")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// The target table holds exactly the source table's rows: none missing, none extra.
pub(crate) async fn assert_same_rows(
    source: &tokio_postgres::Client,
    source_table: &str,
    target: &tokio_postgres::Client,
    target_table: &str,
) {
    let (want, got) = (
        dump(source, source_table).await,
        dump(target, target_table).await,
    );
    let missing: Vec<_> = want
        .iter()
        .filter(|r| got.binary_search(r).is_err())
        .collect();
    let extra: Vec<_> = got
        .iter()
        .filter(|r| want.binary_search(r).is_err())
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && want.len() == got.len(),
        "{target_table}: {} rows missing, {} extra ({} in the source, {} in the target); \
         the first missing: {:?}; the first extra: {:?}",
        missing.len(),
        extra.len(),
        want.len(),
        got.len(),
        &missing[..missing.len().min(5)],
        &extra[..extra.len().min(5)],
    );
}

/// A workload in SQL: transactions of inserts, updates (some moving the order to another
/// day), and deletes.
fn sql_workload(rng: &mut crate::harness::Rng, first_id: i64, transactions: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = first_id;
    for _ in 0..transactions {
        let mut txn = String::from("BEGIN;");
        for _ in 0..1 + rng.below(6) {
            let day = format!("2026-03-{:02}", 1 + rng.below(20));
            let target = first_id.max(next - 1 - rng.below(50) as i64);
            match rng.below(10) {
                0..=5 => {
                    txn.push_str(&format!(
                        "INSERT INTO orders VALUES ({next}, 'c{}', '{day}', {}.{:02}, 'new');",
                        rng.below(300),
                        rng.below(10_000),
                        rng.below(100)
                    ));
                    next += 1;
                }
                6 | 7 => txn.push_str(&format!(
                    "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {target};"
                )),
                8 => txn.push_str(&format!(
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

#[tokio::test(flavor = "multi_thread")]
async fn weir_run_replicates_a_postgres_table_into_partitions_through_kills() {
    let db = TestDb::new("pg_e2e_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "weir_e2e",
        crate::harness::ORDERS_DDL,
        "[engine]\nflush_interval_ms = 100\nbatch_transactions_max = 8\ntransaction_chunk_changes = 50",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    let out = weir(&["init"]);
    let stdout = crate::harness::text(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        crate::harness::text(&out.stderr)
    );
    assert!(
        stdout.contains("slot weir_e2e (created)")
            && stdout.contains("replica identity of public.orders: default"),
        "{stdout}"
    );
    assert!(weir(&["init"]).status.success(), "init runs again safely");

    let mut rng = crate::harness::Rng::new(77);
    for statement in sql_workload(&mut rng, 1, 150) {
        source.batch_execute(&statement).await.expect("workload");
    }
    // One transaction larger than the chunk size.
    source
        .batch_execute("INSERT INTO orders SELECT g, 'bulk', DATE '2026-03-01' + (g % 7), g, 'new' FROM generate_series(100000, 100499) g")
        .await
        .expect("bulk insert");
    let out = weir(&["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    assert_eq!(
        dump(&target, "analytics.fact_orders").await,
        dump(&source, "orders").await,
        "target equals source after run --once"
    );

    // Changes keep coming while `weir run` is SIGKILLed at random moments.
    for round in 0..6u64 {
        let mut child = spawn_weir_pg(&db, &source_dsn);
        for statement in sql_workload(&mut rng, 1000 + round as i64 * 1000, 40) {
            source.batch_execute(&statement).await.expect("workload");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100 + rng.below(400))).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }
    let out = weir(&["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    assert_same_rows(&source, "orders", &target, "analytics.fact_orders").await;

    let status = weir(&["status"]);
    let status = crate::harness::text(&status.stdout);
    // `extended` is healthy too: the slot holds more than max_wal_size, which other
    // tests' writes on the shared cluster can cause.
    assert!(
        status.contains("slot:       wal_status reserved, lag")
            || status.contains("slot:       wal_status extended, lag"),
        "{status}"
    );
}

/// A backlog (transactions committed while no `weir run` was up) is read first and
/// written after, in one round, not in a round per batch staged; then a change committed
/// while the engine keeps pace is written at once, without waiting.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_reads_a_backlog_before_it_writes_and_then_writes_at_once() {
    let db = TestDb::new("pg_catch_up_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "weir_catch_up",
        crate::harness::ORDERS_DDL,
        // Small batches and a short flush interval: without the wait, the writer starts
        // a round at the first batch staged.
        "[engine]\nflush_interval_ms = 10\nbatch_transactions_max = 8",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir(args);
        assert!(
            out.status.success(),
            "{}",
            crate::harness::text(&out.stderr)
        );
    }
    let mut rng = crate::harness::Rng::new(91);
    let backlog = 400;
    for statement in sql_workload(&mut rng, 1, backlog) {
        source.batch_execute(&statement).await.expect("workload");
    }
    // Every transaction of the backlog is older than the catch-up threshold (1 s) when
    // the server sends it.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let log = db.path("live.log");
    let mut child = db
        .weir_command(&["--log-format", "json", "run"])
        .env("WEIR_SOURCE_DSN", &source_dsn)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn weir run");
    let target = db.client().await;
    let caught_up = |want: i64| {
        let target = &target;
        async move {
            for _ in 0..1200 {
                let got: i64 = target
                    .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
                    .await
                    .map_or(-1, |r| r.get(0));
                if got == want {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the target never held {want} rows");
        }
    };
    let rows: i64 = source
        .query_one("SELECT count(*) FROM orders", &[])
        .await
        .expect("count")
        .get(0);
    caught_up(rows).await;
    assert_same_rows(&source, "orders", &target, "analytics.fact_orders").await;
    // Keeping pace now: a new change is written without a wait for a catch-up.
    source
        .batch_execute("INSERT INTO orders VALUES (900001, 'late', DATE '2026-03-02', 1.5, 'new')")
        .await
        .expect("insert");
    caught_up(rows + 1).await;
    child.kill().expect("kill");
    child.wait().expect("reap");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("write round deferred: the source is catching up a backlog"),
        "{text}"
    );
    // The transactions staged before the first round: (nearly) the whole backlog, where
    // without the wait they would be the first batch of 8. A stall of the server's
    // stream longer than the idle wait reads as caught up, hence the margin.
    let mut staged = 0u64;
    for line in text.lines() {
        let event: serde_json::Value = match serde_json::from_str(line) {
            Ok(event) => event,
            Err(_) => continue,
        };
        match event["fields"]["message"].as_str() {
            Some("staged") => staged += event["fields"]["transactions"].as_u64().unwrap_or(0),
            Some("write round starts") => break,
            _ => {}
        }
    }
    assert!(
        staged >= backlog as u64 / 2,
        "{staged} of {backlog} transactions staged before the first round: {text}"
    );
    // The last round (the change after the catch-up) did not wait.
    let last_round = text.rfind("write round starts").expect("a round");
    let before = text[..last_round]
        .rfind("partitions written")
        .expect("the backlog's round");
    assert!(
        !text[before..last_round].contains("catching up a backlog"),
        "the change after the catch-up waited: {text}"
    );
}

/// A table that already holds rows is snapshotted in chunks between watermarks while
/// writers keep changing it, and `weir run` is SIGKILLed during the snapshot: the target
/// ends equal to the source, nothing missing, nothing duplicated.
#[tokio::test(flavor = "multi_thread")]
async fn a_populated_table_is_snapshotted_while_it_changes_and_survives_kills() {
    snapshot_while_it_changes("pg_snapshot_target", "weir_snap", "").await;
}

/// The same with the watermark snapshot alone, each chunk read in three ranges of keys
/// at once on three connections.
#[tokio::test(flavor = "multi_thread")]
async fn a_watermark_snapshot_in_ranges_of_keys_is_exact_while_the_table_changes_and_survives_kills()
 {
    snapshot_while_it_changes(
        "pg_snapshot_ranges_target",
        "weir_snap_ranges",
        "snapshot_method = \"watermarks\"\nsnapshot_parallelism = 3\n",
    )
    .await;
}

async fn snapshot_while_it_changes(target: &str, source_name: &str, source_extra: &str) {
    let db = TestDb::new(target).await;
    let (source_dsn, source) = source_fixture(
        &db,
        source_name,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || (g % 300), DATE '2026-03-01' + (g % 20), g % 10000, 'new' FROM generate_series(1, 30000) g;",
        &format!("{source_extra}snapshot_chunk_rows = 200\n[engine]\nflush_interval_ms = 200"),
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    let out = weir(&["init"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );

    // Writers change rows the snapshot has read, has not read yet, and is reading.
    let writer = {
        let dsn = source_dsn.clone();
        tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                .await
                .expect("writer");
            tokio::spawn(connection);
            let mut rng = crate::harness::Rng::new(9);
            for i in 0..400i64 {
                let id = 1 + rng.below(30_000) as i64;
                let sql = match i % 4 {
                    0 => format!(
                        "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {id}"
                    ),
                    1 => format!(
                        "UPDATE orders SET order_date = DATE '2026-03-01' + {} WHERE id = {id}",
                        rng.below(20)
                    ),
                    2 => format!("DELETE FROM orders WHERE id = {id}"),
                    _ => format!(
                        "INSERT INTO orders VALUES ({}, 'late', '2026-03-05', 1, 'new')",
                        100_000 + i
                    ),
                };
                client.batch_execute(&sql).await.expect("writer statement");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
    };
    let mut rng = crate::harness::Rng::new(5);
    let kills: u64 = std::env::var("WEIR_SNAPSHOT_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for _ in 0..kills {
        let mut child = spawn_weir_pg(&db, &source_dsn);
        tokio::time::sleep(std::time::Duration::from_millis(300 + rng.below(500))).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }
    writer.await.expect("writer");
    let out = weir(&["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    assert_same_rows(&source, "orders", &target, "analytics.fact_orders").await;
}

/// Runs `weir` with this test's config, target and source.
pub(crate) fn weir_pg(db: &TestDb, source_dsn: &str, args: &[&str]) -> std::process::Output {
    db.weir_command(args)
        .env("WEIR_SOURCE_DSN", source_dsn)
        .output()
        .expect("run weir")
}

/// Starts a quiet live `weir run`, to be killed.
pub(crate) fn spawn_weir_pg(db: &TestDb, source_dsn: &str) -> std::process::Child {
    db.weir_command(&["run"])
        .env("WEIR_SOURCE_DSN", source_dsn)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn weir run")
}

/// A source database for one test, with its own table and a config for it; `extra`
/// goes into `[source]` and may open further sections (e.g. `[engine]`).
pub(crate) async fn source_fixture(
    db: &TestDb,
    name: &str,
    ddl: &str,
    extra_source: &str,
    table: &str,
) -> (String, tokio_postgres::Client) {
    let (source_dsn, source) = crate::harness::source_db(name, ddl).await;
    std::fs::write(
        db.config_path(),
        postgres_config(name, extra_source, &format!("[[table]]\n{table}\n")),
    )
    .expect("config");
    (source_dsn, source)
}

/// Every supported type, with its edge values, arrives in the target exactly.
#[tokio::test(flavor = "multi_thread")]
async fn every_type_and_its_edge_values_round_trip_into_the_target() {
    let db = TestDb::new("pg_types_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_types",
        "CREATE TABLE kinds (id integer PRIMARY KEY, day date, s smallint, b bigint, n numeric, n2 numeric(12,2), r real, d double precision,
                             t text, v varchar(20), ok boolean, ts timestamp, tz timestamptz, u uuid, j json, jb jsonb, by bytea)",
        "",
        "source = \"public.kinds\"\ntarget = \"public.kinds_copy\"\nkey = [\"id\"]\npartition_by = \"day\"\ngrain = \"month\"",
    )
    .await;
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    // The (empty) initial snapshot first: the rows then come from the stream alone, in
    // binary format (every column's type is one Weir reads in binary).
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir(args);
        assert!(
            out.status.success(),
            "{}",
            crate::harness::text(&out.stderr)
        );
    }
    source
        .batch_execute(
            "INSERT INTO kinds VALUES
              (1, '2026-03-01', -32768, -9223372036854775808, 'NaN', -0.01, 'NaN', 'Infinity', '', '', true,
               '-infinity', 'infinity', '00000000-0000-0000-0000-000000000000', '{\"a\": [1, 2.50]}', '{\"b\": {\"c\": null}}', '\\x00ff'),
              (2, '2026-03-02', 32767, 9223372036854775807, 'Infinity', 9999999999.99, '-Infinity', '-0', 'ünïcødé ✓ \"quoted\"', 'twenty chars exactly', false,
               '1999-12-31 23:59:59.999999', '2026-03-01 12:00:00.5+05:30', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '[]', '[]', ''),
              (3, '2026-04-01', 0, 0, '-Infinity', 0, 1.17549435e-38, 1e308, repeat('x', 5000), NULL, NULL,
               '0044-03-15 12:00:00 BC', '1970-01-01 00:00:00+00', NULL, 'null', '0', NULL),
              (4, NULL, 1, 1, '123456789012345678901234567890.123456789012345678901234567890', 1.5, 3.14, 2.718281828459045, 'x', 'y', true,
               '2026-03-01 00:00:00', '2026-03-01 00:00:00-08', NULL, '1', '\"s\"', '\\x')",
        )
        .await
        .expect("insert edge values");
    let out = weir(&["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    let columns = "id, day::text, s::text, b::text, n::text, n2::text, r::text, d::text, t, v, ok::text, ts::text, tz::text, u::text, j::text, jb::text, encode(by, 'hex')";
    let want = read_kinds(&source, columns, "kinds").await;
    let got = read_kinds(&target, columns, "kinds_copy").await;
    assert_eq!(want.len(), 4);
    assert_eq!(got, want, "every value arrives exactly");
}

/// Every column of the type test's table as text.
async fn read_kinds(
    client: &tokio_postgres::Client,
    columns: &str,
    table: &str,
) -> Vec<Vec<Option<String>>> {
    client
        .query(&format!("SELECT {columns} FROM {table} ORDER BY id"), &[])
        .await
        .expect("read")
        .iter()
        .map(|r| {
            (0..17)
                .map(|i| {
                    if i == 0 {
                        Some(r.get::<_, i32>(0).to_string())
                    } else {
                        r.get::<_, Option<String>>(i)
                    }
                })
                .collect()
        })
        .collect()
}

/// TRUNCATE stops the source by default, naming the table; with on_truncate = "apply"
/// the table's rows leave the stage and the target.
#[tokio::test(flavor = "multi_thread")]
async fn truncate_fails_by_default_and_applies_when_configured() {
    for (name, on_truncate) in [
        ("pg_trunc_fail", ""),
        ("pg_trunc_apply", "on_truncate = \"apply\""),
    ] {
        let db = TestDb::new(&format!("{name}_target")).await;
        let (source_dsn, source) = source_fixture(
            &db,
            name,
            "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date)",
            "",
            &OrdersTable::postgres("public.orders_copy")
                .extra(on_truncate)
                .body(),
        )
        .await;
        let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
        assert!(weir(&["init"]).status.success());
        source
            .batch_execute("INSERT INTO orders VALUES (1, '2026-03-01'), (2, '2026-03-02')")
            .await
            .expect("insert");
        assert!(weir(&["run", "--once"]).status.success());
        source
            .batch_execute("TRUNCATE orders; INSERT INTO orders VALUES (3, '2026-03-03')")
            .await
            .expect("truncate");
        let out = weir(&["run", "--once"]);
        let target = db.client().await;
        let ids: Vec<i64> = target
            .query("SELECT id FROM orders_copy ORDER BY id", &[])
            .await
            .expect("ids")
            .iter()
            .map(|r| r.get(0))
            .collect();
        if on_truncate.is_empty() {
            let stderr = crate::harness::text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
            assert!(
                stderr.contains("TRUNCATE of public.orders")
                    && stderr.contains("on_truncate = \"apply\""),
                "{stderr}"
            );
            assert_eq!(ids, [1, 2], "nothing past the TRUNCATE was applied");
        } else {
            assert!(
                out.status.success(),
                "{}",
                crate::harness::text(&out.stderr)
            );
            assert_eq!(
                ids,
                [3],
                "the truncated rows left the target; the later insert is there"
            );
        }
    }
}

/// An idle stream writes heartbeats, so the slot does not hold back the WAL another
/// database writes.
#[tokio::test(flavor = "multi_thread")]
async fn heartbeats_keep_an_idle_slot_from_holding_wal() {
    let db = TestDb::new("pg_heartbeat_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_heartbeat",
        "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date)",
        "heartbeat_interval_ms = 300",
        &OrdersTable::postgres("public.orders_copy").body(),
    )
    .await;
    assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
    let mut child = spawn_weir_pg(&db, &source_dsn);
    // Another database writes about 30 MB of WAL; the slot's database stays idle.
    let pg = tokio::task::spawn_blocking(crate::harness::cluster)
        .await
        .expect("cluster");
    pg.execute(
        &db.name,
        "CREATE TABLE noise AS SELECT g, repeat('n', 200) AS pad FROM generate_series(1, 120000) g",
    )
    .await
    .expect("noise");
    // The WAL the noise wrote must be released: the slot's confirmed position passes
    // the end of the noise. (Measured against that point, not against the current WAL
    // end, which other tests sharing the cluster keep moving.)
    let lsn = |sql: &'static str| {
        let source = &source;
        async move {
            source
                .query_one(sql, &[])
                .await
                .expect("lsn")
                .get::<_, i64>(0)
        }
    };
    let noise_end = lsn("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").await;
    let mut confirmed = 0;
    for _ in 0..80 {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        confirmed = lsn("SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = 'pg_heartbeat'").await;
        if confirmed >= noise_end {
            break;
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    assert!(
        confirmed >= noise_end,
        "the slot still holds {} bytes of the other database's WAL after heartbeats",
        noise_end - confirmed
    );
}

/// An added nullable column flows through; a dropped column stops the table with an
/// error that names it, and nothing past it is acknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn schema_changes_flow_through_or_stop_loudly() {
    let db = TestDb::new("pg_schema_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_schema",
        "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date, status text)",
        "",
        &OrdersTable::postgres("public.orders_copy").body(),
    )
    .await;
    let weir = |args: &[&str]| weir_pg(&db, &source_dsn, args);
    assert!(weir(&["init"]).status.success());
    source
        .batch_execute("INSERT INTO orders VALUES (1, '2026-03-01', 'new'); ALTER TABLE orders ADD COLUMN note text; INSERT INTO orders VALUES (2, '2026-03-01', 'new', 'added')")
        .await
        .expect("add a column");
    let out = weir(&["run", "--once"]);
    assert!(
        out.status.success(),
        "an added nullable column flows through: {}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    let count: i64 = target
        .query_one("SELECT count(*) FROM orders_copy", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(count, 2);

    let position = |out: &std::process::Output| crate::harness::text(&out.stdout);
    let before = position(&weir(&["status", "--json"]));
    source.batch_execute("ALTER TABLE orders DROP COLUMN status; INSERT INTO orders VALUES (3, '2026-03-02', 'x')").await.expect("drop a column");
    let out = weir(&["run", "--once"]);
    let stderr = crate::harness::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("public.orders: the source table changed: column `status`")
            && stderr.contains("dropped or renamed"),
        "{stderr}"
    );
    let after = position(&weir(&["status", "--json"]));
    let pos = |s: &str| {
        serde_json::from_str::<serde_json::Value>(s).expect("status json")["position"].as_u64()
    };
    assert_eq!(
        pos(&after),
        pos(&before),
        "nothing past the change was staged or acknowledged"
    );
}

/// Writers run inserts, updates, deletes and partition-moving updates on three tables
/// for `WEIR_PG_WRITERS_SECONDS` (default 60) while `weir run` streams them; then
/// Weir drains, and every target equals its source table.
#[tokio::test(flavor = "multi_thread")]
async fn three_tables_under_concurrent_writers_end_exact() {
    let seconds: u64 = std::env::var("WEIR_PG_WRITERS_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let db = TestDb::new("pg_writers_target").await;
    let tables = ["orders_a", "orders_b", "orders_c"];
    let ddl: String = tables
        .iter()
        .map(|t| format!("CREATE TABLE {t} (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);"))
        .collect();
    // orders_c goes through the Rust orders plugin (rate 1: amount_eur = amount,
    // status upper-cased); the others through the identity.
    let orders_plugin = crate::plugins::plugin("orders-rust");
    let config_tables = tables
        .iter()
        .map(|t| {
            let table =
                OrdersTable::postgres(&format!("analytics.{t}")).source(&format!("public.{t}"));
            if *t == "orders_c" {
                table
                    .extra(&format!(
                        "plugin = \"{}\"\n[table.plugin_config]\nrate = \"1\"",
                        orders_plugin.display()
                    ))
                    .body()
            } else {
                table.body()
            }
        })
        .collect::<Vec<_>>()
        .join("\n[[table]]\n");
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_writers",
        &ddl,
        "[engine]\nflush_interval_ms = 500\nparallelism = 3",
        &config_tables,
    )
    .await;
    assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
    let mut child = db
        .weir_command(&["run"])
        .env("WEIR_SOURCE_DSN", &source_dsn)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(db.path("run.log")).expect("log file"))
        .spawn()
        .expect("spawn weir run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let mut writers = Vec::new();
    for (w, table) in tables.iter().enumerate() {
        let dsn = source_dsn.clone();
        let table = table.to_string();
        writers.push(tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                .await
                .expect("writer");
            tokio::spawn(connection);
            let mut rng = crate::harness::Rng::new(100 + w as u64);
            let mut statements = 0u64;
            let mut next_id = 1i64;
            while std::time::Instant::now() < deadline {
                // A transaction of one to four changes on random existing or new rows.
                let mut txn = String::from("BEGIN;");
                for _ in 0..1 + rng.below(4) {
                    let id = 1 + rng.below(next_id as u64) as i64;
                    let day = format!("2026-03-{:02}", 1 + rng.below(20));
                    match rng.below(10) {
                        0..=4 => {
                            txn.push_str(&format!("INSERT INTO {table} VALUES ({next_id}, 'c{w}', '{day}', {}.{:02}, 'new');", rng.below(10_000), rng.below(100)));
                            next_id += 1;
                        }
                        5 | 6 => txn.push_str(&format!("UPDATE {table} SET status = 'paid', amount = amount + 1 WHERE id = {id};")),
                        7 | 8 => txn.push_str(&format!("UPDATE {table} SET order_date = '{day}' WHERE id = {id};")),
                        _ => txn.push_str(&format!("DELETE FROM {table} WHERE id = {id};")),
                    }
                }
                txn.push_str("COMMIT;");
                client.batch_execute(&txn).await.expect("writer transaction");
                statements += 1;
            }
            statements
        }));
    }
    let mut total = 0;
    for writer in writers {
        total += writer.await.expect("writer");
    }
    assert!(
        child.try_wait().expect("poll").is_none(),
        "weir run stayed up under the writers; its log:\n{}",
        std::fs::read_to_string(db.path("run.log")).unwrap_or_default()
    );
    child.kill().expect("stop");
    child.wait().expect("reap");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    for table in ["orders_a", "orders_b"] {
        assert_same_rows(&source, table, &target, &format!("analytics.{table}")).await;
    }
    // Through the plugin: the source's rows with the status upper-cased, and amount_eur
    // equal to amount.
    let want: Vec<String> = source
        .query("SELECT format('%s|%s|%s|%s|%s', id, customer, order_date, amount, upper(status)) FROM orders_c ORDER BY id", &[])
        .await
        .expect("source rows")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let got: Vec<String> = target
        .query("SELECT format('%s|%s|%s|%s|%s', id, customer, order_date, amount, status) FROM analytics.orders_c WHERE amount_eur = amount ORDER BY id", &[])
        .await
        .expect("target rows")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        want == got,
        "analytics.orders_c (through the orders plugin) differs from the source: {} rows in the source, {} in the target",
        want.len(),
        got.len()
    );
    assert!(want.len() > 50, "the writers left rows in orders_c");
    assert!(total > 100, "the writers wrote ({total} transactions)");
}

/// A table of `WEIR_PG_SNAPSHOT_ROWS` rows (default 1,000,000) is snapshotted while
/// writers keep changing it; the target equals the source's final state.
#[tokio::test(flavor = "multi_thread")]
async fn a_million_row_table_is_snapshotted_while_writers_change_it() {
    let rows: u64 = std::env::var("WEIR_PG_SNAPSHOT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let db = TestDb::new("pg_big_snapshot_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_big_snapshot",
        &format!(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
             INSERT INTO orders SELECT g, 'c' || (g % 300), DATE '2026-03-01' + (g % 30), g % 10000, 'new' FROM generate_series(1, {rows}) g;"
        ),
        "snapshot_chunk_rows = 20000\n[engine]\nflush_interval_ms = 2000",
        &OrdersTable::postgres("analytics.fact_orders").body(),
    )
    .await;
    assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
    let writer = {
        let dsn = source_dsn.clone();
        tokio::spawn(async move {
            let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                .await
                .expect("writer");
            tokio::spawn(connection);
            let mut rng = crate::harness::Rng::new(21);
            for i in 0..600u64 {
                let id = 1 + rng.below(rows);
                let sql = match i % 3 {
                    0 => format!(
                        "UPDATE orders SET status = 'paid', order_date = DATE '2026-03-01' + {} WHERE id = {id}",
                        rng.below(30)
                    ),
                    1 => format!("DELETE FROM orders WHERE id = {id}"),
                    _ => format!(
                        "INSERT INTO orders VALUES ({}, 'late', '2026-03-07', 1, 'new') ON CONFLICT DO NOTHING",
                        rows + 1 + i
                    ),
                };
                client.batch_execute(&sql).await.expect("writer statement");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
    };
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    writer.await.expect("writer");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let target = db.client().await;
    assert_same_rows(&source, "orders", &target, "analytics.fact_orders").await;
}

/// The slot's `confirmed_flush_lsn`, as a number.
async fn slot_confirmed(source: &tokio_postgres::Client, slot: &str) -> u64 {
    let confirmed: i64 = source
        .query_one(
            "SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("confirmed_flush_lsn")
        .get(0);
    u64::try_from(confirmed).expect("an LSN")
}

/// The stage's position, from `weir checkpoint show --json`.
fn stage_position(db: &TestDb, source_dsn: &str) -> u64 {
    let out = weir_pg(db, source_dsn, &["checkpoint", "show", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    let shown: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("checkpoint show --json");
    shown["checkpoint"]["position"]
        .as_u64()
        .unwrap_or_else(|| panic!("no position: {shown}"))
}

/// A slot cannot go back. Restoring an export older than what the slot confirmed
/// would silently skip the changes in between; `weir run` refuses instead, names both
/// positions and the ways out, and writes nothing. The newer stage put back goes on.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_checkpoint_than_the_slot_confirmed_is_refused_not_skipped() {
    let db = TestDb::new("pg_slot_ahead_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_slot_ahead",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, date '2026-03-01' + (g % 5), g, 'new' FROM generate_series(1, 100) g",
        "",
        &OrdersTable::postgres("public.orders_copy").body(),
    )
    .await;
    let ok = |args: &[&str]| {
        let out = weir_pg(&db, &source_dsn, args);
        assert!(
            out.status.success(),
            "weir {args:?}: {}",
            crate::harness::text(&out.stderr)
        );
    };
    ok(&["init"]);
    ok(&["run", "--once"]);
    let old = db.path("old.ckpt");
    ok(&["checkpoint", "export", old.to_str().expect("utf-8 path")]);
    let old_position = stage_position(&db, &source_dsn);

    // The feed goes on and the stage acknowledges it: the slot moves past the export.
    source
        .batch_execute(
            "INSERT INTO orders SELECT g, 'c' || g, date '2026-03-10', g, 'new' FROM generate_series(101, 150) g;
             UPDATE orders SET order_date = date '2026-03-11' WHERE id <= 10",
        )
        .await
        .expect("more changes");
    ok(&["run", "--once"]);
    let confirmed = slot_confirmed(&source, "pg_slot_ahead").await;
    assert!(confirmed > old_position);
    let target = db.client().await;
    assert_same_rows(&source, "orders", &target, "public.orders_copy").await;
    let lineage_before = crate::harness::lineage(&target).await;

    // The old export restored in place of the stage.
    std::fs::rename(db.path("stage"), db.path("stage.newer")).expect("move the stage aside");
    ok(&["checkpoint", "import", old.to_str().expect("utf-8 path")]);
    source
        .batch_execute("INSERT INTO orders VALUES (151, 'c151', date '2026-03-12', 1, 'new')")
        .await
        .expect("a change after the restore");
    for args in [&["run", "--once"][..], &["run"][..]] {
        let out = weir_pg(&db, &source_dsn, args);
        let stderr = crate::harness::text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "weir {args:?}: {stderr}");
        assert!(
            stderr.contains("replication slot `pg_slot_ahead` has confirmed the feed up to")
                && stderr.contains(&format!(
                    "past this stage's position {}",
                    weir::pg::lsn::format_lsn(old_position)
                ))
                && stderr.contains("import a checkpoint of this feed at or past")
                && stderr.contains("point `[stage] path` at a new folder"),
            "weir {args:?}: {stderr}"
        );
    }
    assert_eq!(stage_position(&db, &source_dsn), old_position);
    assert_eq!(crate::harness::lineage(&target).await, lineage_before);
    assert_eq!(
        slot_confirmed(&source, "pg_slot_ahead").await,
        confirmed,
        "the refused runs moved the slot"
    );

    // The newer stage back in place: the restored stage's start took the target's
    // claim (a stage imported is another stage of the feed), so the newer one is told
    // so, and `init` gives it back; then it goes on from where the slot is.
    std::fs::remove_dir_all(db.path("stage")).expect("drop the restored stage");
    std::fs::rename(db.path("stage.newer"), db.path("stage")).expect("put the newer stage back");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(
        !out.status.success()
            && crate::harness::text(&out.stderr).contains("is written by another stage"),
        "{}",
        crate::harness::text(&out.stderr)
    );
    ok(&["init"]);
    ok(&["run", "--once"]);
    assert_same_rows(&source, "orders", &target, "public.orders_copy").await;
}

/// A caught-up stream confirms past WAL that holds nothing of its feed (another
/// database's writes), with heartbeats off. The stage's position moves there first, so
/// a restart after a SIGKILL is not mistaken for a slot that is ahead of its stage.
#[tokio::test(flavor = "multi_thread")]
async fn a_caught_up_stream_confirms_past_idle_wal_and_restarts_cleanly() {
    let db = TestDb::new("pg_idle_confirm_target").await;
    let (source_dsn, source) = source_fixture(
        &db,
        "pg_idle_confirm",
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text);
         INSERT INTO orders SELECT g, 'c' || g, date '2026-03-01' + (g % 3), g, 'new' FROM generate_series(1, 20) g",
        "heartbeat_interval_ms = 3600000",
        &OrdersTable::postgres("public.orders_copy").body(),
    )
    .await;
    assert!(weir_pg(&db, &source_dsn, &["init"]).status.success());
    let mut child = spawn_weir_pg(&db, &source_dsn);
    let target = db.client().await;
    // The snapshot staged and written, then another database's WAL only.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while db.count("SELECT count(*) FROM public.orders_copy").await < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the snapshot was not written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    target
        .batch_execute("CREATE TABLE noise AS SELECT g, repeat('n', 100) AS pad FROM generate_series(1, 20000) g")
        .await
        .expect("noise");
    let noise_end: i64 = source
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
            &[],
        )
        .await
        .expect("lsn")
        .get(0);
    let noise_end = u64::try_from(noise_end).expect("an LSN");
    // Status goes out every 10 s: within two of them the slot passes the noise.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while slot_confirmed(&source, "pg_idle_confirm").await < noise_end {
        assert!(
            std::time::Instant::now() < deadline,
            "the caught-up stream never confirmed past the other database's WAL"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let confirmed = slot_confirmed(&source, "pg_idle_confirm").await;
    assert!(
        stage_position(&db, &source_dsn) >= confirmed,
        "the slot confirmed past the stage's position"
    );
    source
        .batch_execute("INSERT INTO orders VALUES (21, 'c21', date '2026-03-05', 1, 'new')")
        .await
        .expect("a change after the restart");
    let out = weir_pg(&db, &source_dsn, &["run", "--once"]);
    assert!(
        out.status.success(),
        "{}",
        crate::harness::text(&out.stderr)
    );
    assert_same_rows(&source, "orders", &target, "public.orders_copy").await;
}
