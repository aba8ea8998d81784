//! Transactions streamed while in progress (pgoutput protocol version 2 and later,
//! `[source] streaming`, on by default): a transaction larger than the server's
//! `logical_decoding_work_mem` arrives in blocks before its commit, with other
//! transactions committing in between. Weir keeps its changes out of sight until its
//! commit, stages it whole then, drops it at its abort (and a rolled-back savepoint's
//! changes at their rollback), is not stopped by DDL it then rolls back, loses
//! nothing when killed while one streams, and keeps a resync's chunks exact when one
//! commits or aborts while they are read.

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use weir_core::fixtures::OrdersTable;

use crate::harness::{TestDb, text};
use crate::postgres_source::{assert_same_rows, source_fixture, weir_pg};

const DDL: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date NOT NULL, amount numeric(12,2), status text)";

/// A source database whose walsenders stream any transaction past 64 kB, and Weir's
/// slot on it, its initial snapshot (of nothing) taken: runs from here on stream.
/// `extra` goes into the config after `[source]`'s keys.
async fn streaming_source(db: &TestDb, name: &str, extra: &str) -> (String, Client) {
    let (dsn, source) = source_fixture(
        db,
        name,
        DDL,
        extra,
        &OrdersTable::postgres("analytics.orders").body(),
    )
    .await;
    source
        .batch_execute(&format!(
            "ALTER DATABASE {name}_source SET logical_decoding_work_mem = '64kB'"
        ))
        .await
        .expect("logical_decoding_work_mem");
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir_pg(db, &dsn, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    (dsn, source)
}

async fn session(dsn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls)
        .await
        .expect("a session");
    tokio::spawn(connection);
    client
}

/// How many transactions the slot has streamed in progress (the server's statistics,
/// reported when a walsender ends a transaction or exits).
async fn streamed(source: &Client, slot: &str) -> i64 {
    source
        .query_opt(
            "SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("slot statistics")
        .map_or(0, |r| r.get(0))
}

/// Waits (10 s at most) until the slot has streamed more than `before` transactions.
async fn wait_streamed(source: &Client, slot: &str, before: i64) {
    for _ in 0..100 {
        if streamed(source, slot).await > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("slot {slot} streamed no transaction in progress past {before}");
}

fn run_once(db: &TestDb, dsn: &str) {
    let out = weir_pg(db, dsn, &["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect("count").get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_transaction_is_staged_whole_at_its_commit_and_not_at_all_at_its_abort() {
    let db = TestDb::new("pg_stream_target").await;
    let (dsn, source) = streaming_source(&db, "pg_stream", "").await;
    let target = db.client().await;

    // A large transaction, still open, with a savepoint rolled back in it, while a
    // small one commits.
    let big = session(&dsn).await;
    big.batch_execute(
        "BEGIN;
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 30, g, repeat('x', 100) FROM generate_series(1000, 20999) g;
         SAVEPOINT s;
         INSERT INTO orders SELECT g, 'c', '2026-03-05', 0, 'rolled back' FROM generate_series(50000, 54999) g;
         ROLLBACK TO SAVEPOINT s;
         UPDATE orders SET status = 'updated' WHERE id BETWEEN 1000 AND 1999;
         DELETE FROM orders WHERE id BETWEEN 2000 AND 2499;",
    )
    .await
    .expect("a large transaction");
    source
        .batch_execute("INSERT INTO orders VALUES (1, 'c', '2026-03-01', 1, 'small')")
        .await
        .expect("a small transaction");
    let streamed_before = streamed(&source, "pg_stream").await;
    run_once(&db, &dsn);
    assert_eq!(
        count(&target, "SELECT count(*) FROM analytics.orders").await,
        1,
        "only the committed small transaction is written; nothing of the open one"
    );
    // The open transaction was streamed in progress.
    wait_streamed(&source, "pg_stream", streamed_before).await;

    // It commits: staged whole, without the savepoint's rows.
    big.batch_execute("COMMIT").await.expect("commit");
    run_once(&db, &dsn);
    assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    assert_eq!(
        count(&target, "SELECT count(*) FROM analytics.orders").await,
        1 + 20_000 - 500
    );

    // Another streams, with DDL that drops a configured column, and aborts: nothing
    // of it is staged, and its DDL stops nothing.
    big.batch_execute(
        "BEGIN;
         INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 30, g, repeat('y', 100) FROM generate_series(100000, 119999) g;
         UPDATE orders SET amount = 0 WHERE id < 5000;
         DELETE FROM orders WHERE id BETWEEN 5000 AND 5999;",
    )
    .await
    .expect("a second large transaction");
    source
        .batch_execute("INSERT INTO orders VALUES (2, 'c', '2026-03-02', 2, 'small')")
        .await
        .expect("a small transaction");
    // Weir reads its blocks live while it is open, the DDL's lock held (a Weir
    // starting now would wait for that lock to read its publication), and must not
    // stop at the dropped column.
    let streamed_before = streamed(&source, "pg_stream").await;
    let log = std::fs::File::create(db.path("run.log")).expect("log");
    let mut live = db
        .weir_command(&["run"])
        .env("WEIR_SOURCE_DSN", &dsn)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn weir run");
    tokio::time::sleep(Duration::from_secs(2)).await;
    big.batch_execute(
        "ALTER TABLE orders DROP COLUMN status;
         INSERT INTO orders SELECT g, 'c', '2026-03-09', g FROM generate_series(200000, 209999) g;",
    )
    .await
    .expect("DDL in the streamed transaction");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run_log = || std::fs::read_to_string(db.path("run.log")).unwrap_or_default();
    assert!(
        live.try_wait().expect("weir run").is_none(),
        "weir run stopped at DDL of a transaction still open:\n{}",
        run_log()
    );
    big.batch_execute("ROLLBACK").await.expect("rollback");
    tokio::time::sleep(Duration::from_secs(1)).await;
    live.kill().expect("kill");
    live.wait().expect("wait");
    wait_streamed(&source, "pg_stream", streamed_before).await;
    run_once(&db, &dsn);
    assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    assert_eq!(
        count(&target, "SELECT count(*) FROM analytics.orders").await,
        2 + 20_000 - 500
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_while_a_transaction_streams_loses_nothing() {
    let db = TestDb::new("pg_stream_kill_target").await;
    // Chunks of 500 changes: a rolled-back savepoint's changes reach the stage's area
    // before its rollback, and are left out at the commit (smaller ones are dropped
    // from memory at the rollback, as in the test above).
    let (dsn, source) = streaming_source(
        &db,
        "pg_stream_kill",
        "[engine]\ntransaction_chunk_changes = 500",
    )
    .await;
    let big = session(&dsn).await;
    big.batch_execute("BEGIN").await.expect("begin");
    let mut weir = crate::postgres_source::spawn_weir_pg(&db, &dsn);
    for round in 0..6i64 {
        // Each round streams a block of the open transaction; small ones commit
        // between; Weir is killed in the middle of it all, twice.
        let from = 10_000 + round * 5_000;
        big.batch_execute(&format!(
            "INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 30, g, repeat('z', 100) FROM generate_series({from}, {}) g;
             SAVEPOINT r{round};
             UPDATE orders SET status = 'round {round}' WHERE id BETWEEN {from} AND {from} + 999;
             {}",
            from + 4_999,
            if round % 2 == 1 { format!("ROLLBACK TO SAVEPOINT r{round};") } else { String::new() }
        ))
        .await
        .expect("a block");
        source
            .batch_execute(&format!(
                "INSERT INTO orders VALUES ({round}, 'c', '2026-03-0{}', {round}, 'small')",
                round + 1
            ))
            .await
            .expect("a small transaction");
        tokio::time::sleep(Duration::from_millis(700)).await;
        if round == 2 || round == 4 {
            weir.kill().expect("kill");
            weir.wait().expect("wait");
            weir = crate::postgres_source::spawn_weir_pg(&db, &dsn);
        }
    }
    big.batch_execute("UPDATE orders SET amount = amount + 1 WHERE id % 7 = 0; COMMIT")
        .await
        .expect("commit");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    weir.kill().expect("kill");
    weir.wait().expect("wait");
    run_once(&db, &dsn);
    let target = db.client().await;
    assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    assert_eq!(
        count(&target, "SELECT count(*) FROM analytics.orders").await,
        6 + 6 * 5_000
    );
    wait_streamed(&source, "pg_stream_kill", 0).await;
}

/// A resync's chunk read while large transactions end around it: one that streamed
/// blocks before the resync commits while the read (which cannot see it) sleeps, and
/// another writes between the watermarks and rolls back. (A snapshot reads with the
/// stream opened again without in-progress streaming, so both come whole after their
/// end; `Snapshot::observe` would read the chunk again if a streamed one committed
/// while it was in flight.) The target ends equal to the source.
#[tokio::test(flavor = "multi_thread")]
async fn a_resync_chunk_is_exact_around_large_transactions_that_commit_or_abort() {
    let db = TestDb::new("pg_stream_resync_target").await;
    let (dsn, source) =
        streaming_source(&db, "pg_stream_resync", "snapshot_chunk_rows = 100000").await;
    source
        .batch_execute(
            "INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 30, g, repeat('s', 100) FROM generate_series(1, 3000) g",
        )
        .await
        .expect("rows");
    run_once(&db, &dsn);
    // Streamed before the resync's watermarks: still open.
    let before = session(&dsn).await;
    before
        .batch_execute("BEGIN; UPDATE orders SET status = 'committed in the read' WHERE id <= 1500")
        .await
        .expect("a large transaction");
    run_once(&db, &dsn);
    wait_streamed(&source, "pg_stream_resync", 0).await;
    let out = weir_pg(
        &db,
        &dsn,
        &[
            "resync",
            "--table",
            "public.orders",
            "--where",
            "id <> 1 OR pg_sleep(3) IS NOT NULL",
        ],
    );
    assert!(out.status.success(), "resync: {}", text(&out.stderr));
    let run = db
        .weir_command(&["run", "--once"])
        .env("WEIR_SOURCE_DSN", &dsn)
        .env("RUST_LOG", "info,weir::source::postgres=debug")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run --once");
    // The chunk's read has begun (its snapshot taken) and sleeps on its first row.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    before.batch_execute("COMMIT").await.expect("commit");
    let between = session(&dsn).await;
    between
        .batch_execute(
            "BEGIN; UPDATE orders SET status = 'rolled back' WHERE id > 1500; \
             INSERT INTO orders SELECT g, 'c', '2026-03-02', g, repeat('r', 100) FROM generate_series(10001, 12000) g",
        )
        .await
        .expect("a second large transaction");
    tokio::time::sleep(Duration::from_millis(500)).await;
    between.batch_execute("ROLLBACK").await.expect("rollback");
    let out = run.wait_with_output().expect("run --once");
    let log = text(&out.stderr);
    assert!(out.status.success(), "run: {log}");
    run_once(&db, &dsn);
    let target = db.client().await;
    assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    assert_eq!(
        count(
            &target,
            "SELECT count(*) FROM analytics.orders WHERE status = 'committed in the read'"
        )
        .await,
        1500
    );
}

/// Values arrive in binary format when every column of the configured tables has a
/// type Weir reads in binary; a column of another type (an array) added while a live
/// `weir run` streams in binary reopens the stream in text, and nothing is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_column_weir_cannot_read_in_binary_reopens_the_stream_in_text() {
    let db = TestDb::new("pg_binary_target").await;
    let (dsn, source) = streaming_source(&db, "pg_binary", "").await;
    let log = std::fs::File::create(db.path("run.log")).expect("log");
    let mut live = db
        .weir_command(&["--log-format", "json", "run"])
        .env("WEIR_SOURCE_DSN", &dsn)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn weir run");
    let run_log = || std::fs::read_to_string(db.path("run.log")).unwrap_or_default();
    source
        .batch_execute(
            "INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g / 3.0, 'new' FROM generate_series(1, 100) g",
        )
        .await
        .expect("rows");
    tokio::time::sleep(Duration::from_secs(2)).await;
    // After a resync the stream is open without in-progress streaming; the large
    // transaction below is read whole into the pending area until its array column has
    // the stream opened again, in text and streaming: its chunks read so far must go
    // (they stopped the run as a corrupt stage at the stream's commit).
    let out = weir_pg(&db, &dsn, &["resync", "--table", "public.orders", "--wait"]);
    assert!(out.status.success(), "resync: {}", text(&out.stderr));
    source
        .batch_execute(
            "BEGIN;
             INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g, repeat('x', 100) FROM generate_series(1001, 6000) g;
             ALTER TABLE orders ADD COLUMN tags text[];
             INSERT INTO orders SELECT g, 'c', DATE '2026-03-01' + g % 3, g / 7.0, 'later', '{ok}' FROM generate_series(101, 200) g;
             UPDATE orders SET amount = amount + 1 WHERE id % 10 = 0;
             COMMIT;",
        )
        .await
        .expect("an array column and more rows");
    let target = db.client().await;
    for _ in 0..300 {
        if count(&target, "SELECT count(*) FROM analytics.orders").await == 5200 {
            break;
        }
        assert!(
            live.try_wait().expect("weir run").is_none(),
            "weir run ended:\n{}",
            run_log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    live.kill().expect("kill");
    live.wait().expect("wait");
    let log = run_log();
    let opened: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("streaming from the replication slot"))
        .collect();
    assert!(
        opened
            .first()
            .is_some_and(|l| l.contains("\"binary\":true"))
            && opened
                .last()
                .is_some_and(|l| l.contains("\"binary\":false")),
        "first opened in binary, then in text:\n{log}"
    );
    assert!(
        log.contains("a type Weir does not read in binary format"),
        "{log}"
    );
    // The target has the configured columns; the array column waits for the target.
    let want = source
        .query("SELECT id, amount::text FROM orders ORDER BY id", &[])
        .await
        .expect("source");
    let got = target
        .query(
            "SELECT id, amount::text FROM analytics.orders ORDER BY id",
            &[],
        )
        .await
        .expect("target");
    let rows = |r: &[tokio_postgres::Row]| -> Vec<(i64, String)> {
        r.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    assert_eq!(rows(&got), rows(&want));
}
