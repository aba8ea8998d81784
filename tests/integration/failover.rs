//! A source failover without loss (PostgreSQL 17 and later: failover slots). A primary
//! and a streaming standby that synchronizes Weir's failover slot; a live workload and a
//! live `weir run` whose source DSN lists both hosts with
//! `target_session_attrs=primary`; the primary is SIGKILLed and the standby promoted;
//! the workload goes on on the new primary; the same `weir run` reconnects by itself
//! and the target ends equal to the new primary's table: nothing missing, nothing
//! duplicated. The test command runs it in its PostgreSQL 18 pass (`scripts/test`);
//! against an older server it says so and checks nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};
use weir::localpg::{LocalPg, LocalPgOptions};
use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{ORDERS_DDL, TestDb, text};
use crate::postgres_source::{assert_same_rows, dump};

const SLOT: &str = "weir_failover";
/// The standby's physical slot on the primary, which logical decoding waits for.
const STANDBY_SLOT: &str = "standby_1";

async fn connect(dsn: &str) -> Option<Client> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await.ok()?;
    tokio::spawn(connection);
    Some(client)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// One writer's transactions, each an insert, an update of an earlier order (moving
/// some to another day) and now and then a delete, through a DSN of both hosts that
/// connects to whichever is the primary; a transaction cut by the failover is not
/// retried (it committed or not: the new primary's table is the truth).
async fn write(dsn: String, stop: Arc<AtomicBool>, committed: Arc<AtomicI64>) {
    let mut client: Option<Client> = None;
    let mut id: i64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = &client else {
            client = connect(&dsn).await;
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        id += 1;
        let sql = format!(
            "BEGIN;
             INSERT INTO orders VALUES ({id}, 'c{}', DATE '2026-03-01' + {}, {id}.25, 'new');
             UPDATE orders SET amount = amount + 1, status = 'paid', order_date = order_date + (id % 2)::int WHERE id = {};
             DELETE FROM orders WHERE id = {} AND id % 7 = 0;
             COMMIT;",
            id % 13,
            id % 5,
            (id - 3).max(1),
            (id - 11).max(1)
        );
        match c.batch_execute(&sql).await {
            Ok(()) => {
                committed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => client = None,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `check` holds, up to `limit`; `what` names it in the failure.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A primary with database `shop` (the orders table, and `rows` SQL run there first) and
/// a streaming standby through physical slot [`STANDBY_SLOT`], if the server is at least
/// `needs` (`server_version_num`); `None` (said on stderr) on an older one, which the
/// test command's PostgreSQL 18 pass never is (`WEIR_PG_MAJOR`).
async fn primary_and_standby(
    needs: i32,
    what: &str,
    rows: &str,
    standby_options: LocalPgOptions,
) -> Option<(Arc<LocalPg>, LocalPg, String)> {
    let primary = blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("start the primary");
    let primary_dsn = primary.create_database("shop").await.expect("database");
    let admin = connect(&primary_dsn).await.expect("primary");
    let num: i32 = admin
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .expect("version")
        .get(0);
    if num < needs {
        assert!(
            std::env::var("WEIR_PG_MAJOR").is_err(),
            "WEIR_PG_MAJOR is set but the server is {num}, older than {what} needs ({needs})"
        );
        eprintln!(
            "{what}: PostgreSQL {num} is older than {needs}; the test command runs this test against PostgreSQL 18"
        );
        return None;
    }
    admin.batch_execute(ORDERS_DDL).await.expect("ddl");
    if !rows.is_empty() {
        admin.batch_execute(rows).await.expect("rows before");
    }
    admin
        .query_one(
            "SELECT pg_create_physical_replication_slot($1, true)::text",
            &[&STANDBY_SLOT],
        )
        .await
        .expect("standby slot");
    drop(admin);
    let primary = Arc::new(primary);
    let standby = {
        let primary = Arc::clone(&primary);
        blocking(move || primary.start_standby(&standby_options, STANDBY_SLOT))
            .await
            .expect("start the standby")
    };
    Some((primary, standby, primary_dsn))
}

/// Writes `db`'s config (the orders table into `analytics.orders`, `source_extra` in
/// `[source]`) and returns a source DSN listing both hosts that connects to whichever
/// is the primary, as libpq's `target_session_attrs=primary` does.
fn both_hosts(db: &TestDb, primary: &LocalPg, standby: &LocalPg, source_extra: &str) -> String {
    std::fs::write(
        db.config_path(),
        postgres_config(
            SLOT,
            source_extra,
            &format!(
                "[[table]]\n{}\n",
                OrdersTable::postgres("analytics.orders").body()
            ),
        ),
    )
    .expect("config");
    format!(
        "host={h},{h} port={},{} user=postgres dbname=shop target_session_attrs=primary connect_timeout=5",
        primary.port(),
        standby.port(),
        h = primary.host()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_standby_with_the_synchronized_slot_takes_over_without_loss() {
    let Some((primary, standby, primary_dsn)) =
        primary_and_standby(170_000, "failover slots", "", LocalPgOptions::default()).await
    else {
        return;
    };
    // Logical decoding sends nothing the standby has not flushed, so that Weir never
    // holds a change the promoted standby lacks.
    let admin = connect(&primary_dsn).await.expect("primary");
    for sql in [
        format!("ALTER SYSTEM SET synchronized_standby_slots = '{STANDBY_SLOT}'"),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        admin
            .batch_execute(&sql)
            .await
            .expect("synchronized_standby_slots");
    }

    // Weir reads whichever host is the primary; the target is the shared cluster's.
    let db = TestDb::new("failover_target").await;
    let source_dsn = both_hosts(&db, &primary, &standby, "[engine]\nflush_interval_ms = 50");
    let weir = |args: &[&str]| {
        db.weir_command(args)
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .output()
            .expect("run weir")
    };
    let init = weir(&["init"]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    assert!(
        text(&init.stdout).contains("a failover slot"),
        "{}",
        text(&init.stdout)
    );

    // The workload, and the live engine.
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicI64::new(0));
    let writer = tokio::spawn(write(
        format!(
            "host={h},{h} port={},{} user=postgres dbname=shop target_session_attrs=read-write connect_timeout=5",
            primary.port(),
            standby.port(),
            h = primary.host()
        ),
        Arc::clone(&stop),
        Arc::clone(&committed),
    ));
    let log = std::fs::File::create(db.path("run.log")).expect("log");
    let mut run = db
        .weir_command(&["run"])
        .env("WEIR_SOURCE_DSN", &source_dsn)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn weir run");

    // The standby holds a synchronized, usable copy of Weir's slot once Weir confirmed
    // a position past the standby's own.
    let standby_dsn = standby.dsn("shop");
    wait_for(Duration::from_secs(150), "the slot synchronized to the standby", || {
        let dsn = standby_dsn.clone();
        async move {
            let Some(client) = connect(&dsn).await else {
                return false;
            };
            client
                .query_opt(
                    "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND synced AND NOT temporary",
                    &[&SLOT],
                )
                .await
                .ok()
                .flatten()
                .is_some()
        }
    })
    .await;
    // `weir status` probes each host of the DSN: the primary holds the slot, the
    // standby a synchronized copy.
    let status = weir(&["status"]);
    let status = text(&status.stdout);
    let primary_line = format!(
        "{}:{}  primary: holds the slot",
        primary.host(),
        primary.port()
    );
    let standby_line = format!(
        "{}:{}  standby: a synchronized copy, usable after a promotion",
        standby.host(),
        standby.port()
    );
    assert!(
        status.contains(&primary_line) && status.contains(&standby_line),
        "{status}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = committed.load(Ordering::Relaxed);
    assert!(
        before > 0,
        "the workload committed nothing before the failover"
    );

    // The primary dies; the standby is promoted; the workload goes on there.
    {
        let primary = Arc::clone(&primary);
        blocking(move || primary.kill())
            .await
            .expect("kill the primary");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let standby = Arc::new(standby);
    {
        let standby = Arc::clone(&standby);
        blocking(move || standby.promote())
            .await
            .expect("promote the standby");
    }
    wait_for(
        Duration::from_secs(60),
        "the workload committing on the new primary",
        || {
            let committed = Arc::clone(&committed);
            async move { committed.load(Ordering::Relaxed) > before + 50 }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");

    // The same live engine catches up from the new primary.
    let source = connect(&standby.dsn("shop")).await.expect("new primary");
    let target = db.client().await;
    let want = dump(&source, "orders").await;
    let caught_up = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = run.try_wait().expect("weir run") {
            panic!(
                "weir run ended ({status}) instead of reconnecting:\n{}",
                std::fs::read_to_string(db.path("run.log")).unwrap_or_default()
            );
        }
        let got = target
            .query_one(
                "SELECT count(*) FROM analytics.orders WHERE to_regclass('analytics.orders') IS NOT NULL",
                &[],
            )
            .await
            .map(|r| r.get::<_, i64>(0))
            .unwrap_or(0);
        if usize::try_from(got).ok() == Some(want.len())
            && dump(&target, "analytics.orders").await == want
        {
            break;
        }
        assert!(
            Instant::now() < caught_up,
            "the target did not catch up with the new primary ({got} of {} rows):\n{}",
            want.len(),
            std::fs::read_to_string(db.path("run.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = run.kill();
    let _ = run.wait();
    let log = std::fs::read_to_string(db.path("run.log")).unwrap_or_default();
    assert!(
        log.contains("source reconnected"),
        "the live engine did not reconnect:\n{log}"
    );
    // And a restart of the engine from its checkpoint changes nothing.
    let again = weir(&["run", "--once"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    eprintln!(
        "failover: {} transactions committed ({} before the kill), {} rows in the new primary, the target exact; the live engine retried its source {} times",
        committed.load(Ordering::Relaxed),
        before,
        want.len(),
        log.matches("source unavailable; retrying").count()
    );
}

/// Decoding on a hot standby (PostgreSQL 16 and later): `[source]` points at the
/// standby, `primary_dsn_env` at the primary, which takes what Weir writes (the
/// publication, snapshot reads between watermarks, watermarks, drain messages). Rows
/// that were there before, and a workload on the primary, end exact in the target; the
/// slot is on the standby, none on the primary. Without `primary_dsn_env`, init says
/// what to set.
#[tokio::test(flavor = "multi_thread")]
async fn a_hot_standby_decodes_while_the_primary_takes_the_writes() {
    let Some((_primary, standby, primary_dsn)) = primary_and_standby(
        160_000,
        "decoding on a standby",
        "INSERT INTO orders SELECT g, 'c' || (g % 13), DATE '2026-03-01' + (g % 9), g, 'old' FROM generate_series(100001, 103000) g",
        LocalPgOptions::default(),
    )
    .await
    else {
        return;
    };
    let db = TestDb::new("standby_decoding_target").await;
    let config = |primary_line: &str| {
        std::fs::write(
            db.config_path(),
            postgres_config(
                SLOT,
                primary_line,
                &format!(
                    "[[table]]\n{}\n",
                    OrdersTable::postgres("analytics.orders").body()
                ),
            ),
        )
        .expect("config");
    };
    let standby_dsn = standby.dsn("shop");
    let weir = |args: &[&str]| {
        db.weir_command(args)
            .env("WEIR_SOURCE_DSN", &standby_dsn)
            .env("WEIR_PRIMARY_DSN", &primary_dsn)
            .output()
            .expect("run weir")
    };
    // Without the primary's DSN: refused, saying what to set.
    config("");
    let refused = weir(&["init"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("primary_dsn_env"),
        "{}",
        text(&refused.stderr)
    );
    config("primary_dsn_env = \"WEIR_PRIMARY_DSN\"");
    let init = weir(&["init"]);
    assert!(init.status.success(), "{}", text(&init.stderr));
    assert!(
        text(&init.stdout).contains("on the standby that decodes"),
        "{}",
        text(&init.stdout)
    );

    // A workload on the primary while the standby decodes: drained twice.
    let source = connect(&primary_dsn).await.expect("primary");
    let target = db.client().await;
    for round in 0..2 {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicI64::new(0));
        let writer = tokio::spawn(write(
            primary_dsn.clone(),
            Arc::clone(&stop),
            Arc::clone(&committed),
        ));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stop.store(true, Ordering::Relaxed);
        writer.await.expect("writer");
        assert!(
            committed.load(Ordering::Relaxed) > 0,
            "round {round}: no writes"
        );
        let out = weir(&["run", "--once"]);
        assert!(out.status.success(), "round {round}: {}", text(&out.stderr));
        assert_same_rows(&source, "orders", &target, "analytics.orders").await;
    }
    // The slot is the standby's; the primary has only the standby's physical slot.
    let on_primary: i64 = source
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'",
            &[],
        )
        .await
        .expect("slots")
        .get(0);
    assert_eq!(on_primary, 0, "a logical slot on the primary");
    let on_standby: i64 = connect(&standby_dsn)
        .await
        .expect("standby")
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&SLOT],
        )
        .await
        .expect("slots")
        .get(0);
    assert_eq!(on_standby, 1, "the slot is not on the standby");
    let status = weir(&["status"]);
    assert!(
        text(&status.stdout).contains("slot:       wal_status"),
        "{}",
        text(&status.stdout)
    );
}

/// A promotion of a standby that did not synchronize Weir's slot (here
/// `sync_replication_slots` is off on it): the new primary has no slot, and Weir stops
/// with the error that names the recovery (`weir init`: a fresh slot and snapshot)
/// instead of creating a slot that would silently skip what was committed meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_promotion_without_the_synchronized_slot_stops_with_the_recovery() {
    let unsynchronized = LocalPgOptions {
        extra_settings: vec![("sync_replication_slots".into(), "off".into())],
        ..LocalPgOptions::default()
    };
    let Some((primary, standby, primary_dsn)) = primary_and_standby(
        170_000,
        "failover slots",
        "INSERT INTO orders VALUES (1, 'c1', '2026-03-01', 1, 'new')",
        unsynchronized,
    )
    .await
    else {
        return;
    };
    drop(primary_dsn);
    let db = TestDb::new("failover_unsynced_target").await;
    let source_dsn = both_hosts(&db, &primary, &standby, "");
    let weir = |args: &[&str]| {
        db.weir_command(args)
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .output()
            .expect("run weir")
    };
    for args in [&["init"][..], &["run", "--once"]] {
        let out = weir(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    {
        let primary = Arc::clone(&primary);
        blocking(move || primary.kill())
            .await
            .expect("kill the primary");
    }
    let standby = Arc::new(standby);
    {
        let standby = Arc::clone(&standby);
        blocking(move || standby.promote())
            .await
            .expect("promote the standby");
    }
    let out = weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("replication slot `{SLOT}` does not exist"))
            && stderr.contains("run `weir init --take-over`"),
        "{stderr}"
    );
    let target = db.client().await;
    assert_eq!(
        target
            .query_one("SELECT count(*) FROM analytics.orders", &[])
            .await
            .expect("count")
            .get::<_, i64>(0),
        1,
        "what was staged before stays written"
    );
}
