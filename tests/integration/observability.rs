//! Metrics and logs of a live engine: the Prometheus endpoint is scraped during a run
//! and its values must move with the work; the logs of every command, at the most
//! verbose level and in both formats, never hold a DSN password or a row value.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use weir_core::fixtures::OrdersTable;

use crate::harness::{ORDERS_DDL, Reaped, SECRET_PASSWORD, SECRET_USER, TestDb, cluster, text};
use crate::plugins::plugin;
use crate::postgres_source::{source_fixture, weir_pg};

/// The orders source table's `[[table]]` through the Rust orders plugin.
fn plugin_table(target: &str) -> String {
    OrdersTable::postgres(target)
        .extra(&format!(
            "plugin = \"{}\"\non_reject = \"dead-letter\"\n[table.plugin_config]\nrate = \"1.0825\"",
            plugin("orders-rust").display()
        ))
        .body()
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET /metrics`: the body, or `None` while nothing answers.
fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// The value of one sample, named with its labels exactly as exposed
/// (`weir_source_changes_total{table="public.orders"}`).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Scrapes until `ready` holds for the body, or fails after `secs` showing the last one.
async fn scrape_until(port: u16, secs: u64, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last = None;
    loop {
        if let Some(body) = scrape(port) {
            if ready(&body) {
                return body;
            }
            last = Some(body);
        }
        assert!(
            Instant::now() < deadline,
            "metrics never showed {what} within {secs} s; last scrape:\n{}",
            last.unwrap_or_else(|| "(no answer)".into())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn spawn_run(db: &TestDb, source_dsn: &str, args: &[&str], log: &Path) -> Reaped {
    db.spawn_live_with(args, &[("WEIR_SOURCE_DSN", source_dsn)], log)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_endpoint_moves_with_a_live_run() {
    let db = TestDb::new("metrics_live").await;
    let target = "analytics.orders_eur";
    let (source_dsn, source) = source_fixture(
        &db,
        "metrics_live",
        ORDERS_DDL,
        "[engine]\nflush_interval_ms = 100",
        &plugin_table(target),
    )
    .await;
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let log = db.path("run.log");
    let _run = spawn_run(&db, &source_dsn, &["--metrics-addr", &addr], &log);
    let changes = r#"weir_source_changes_total{table="public.orders"}"#;
    let written = r#"weir_target_rows_written_total{table="public.orders"}"#;
    let before = scrape_until(port, 60, "the stage's gauges", |b| {
        sample(b, "weir_stage_size_bytes").is_some_and(|v| v > 0.0)
            && sample(b, r#"weir_dirty_partitions{table="public.orders"}"#).is_some()
    })
    .await;
    for line in [
        "# TYPE weir_stage_size_bytes gauge",
        "# HELP weir_stage_size_bytes",
    ] {
        assert!(before.contains(line), "missing `{line}`:\n{before}");
    }
    // The workload below is for the stream: written once the first load (of the empty
    // table) is over, or its transactions could land in the load's snapshot instead.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("streaming from the replication slot")
    {
        assert!(
            Instant::now() < deadline,
            "the run never started streaming:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = scrape(port).unwrap_or(before);
    let changes_before = sample(&before, changes).unwrap_or(0.0);
    let position_before = sample(&before, "weir_source_position").unwrap_or(0.0);

    // 40 transactions of 5 inserts; every tenth order has a negative amount, which the
    // plugin rejects into weir.dead_letter.
    for t in 0..40i64 {
        let mut sql = String::from("BEGIN;");
        for i in 0..5 {
            let id = t * 5 + i + 1;
            let amount = if id % 10 == 0 { "-1.00" } else { "12.50" };
            sql.push_str(&format!(
                "INSERT INTO orders VALUES ({id}, 'c{id}', DATE '2026-03-01' + {}, {amount}, 'new');",
                id % 4
            ));
        }
        sql.push_str("COMMIT;");
        source.batch_execute(&sql).await.expect("workload");
    }
    // Rows written count each write, so 180 can be reached by rewrites before every
    // order has been through the plugin: wait for the rejections too.
    let rejected = r#"weir_rows_rejected_total{table="public.orders"}"#;
    let after = scrape_until(
        port,
        60,
        "200 changes staged, 180 rows written, 20 rejected",
        |b| {
            sample(b, changes).is_some_and(|v| v - changes_before >= 200.0)
                && sample(b, written).is_some_and(|v| v >= 180.0)
                && sample(b, rejected).is_some_and(|v| v >= 20.0)
        },
    )
    .await;
    let value = |series: &str| {
        sample(&after, series).unwrap_or_else(|| panic!("no sample {series}:\n{after}"))
    };
    assert!(value("weir_source_transactions_total") >= 40.0, "{after}");
    assert!(value("weir_source_position") > position_before, "{after}");
    assert!(
        value(r#"weir_partitions_written_total{table="public.orders"}"#) >= 4.0,
        "{after}"
    );
    // Every tenth order is rejected by each write of its partition (a replace runs
    // the plugin over the whole partition again).
    assert!(value(rejected) >= 20.0, "{after}");
    assert!(
        value(r#"weir_plugin_fuel_total{table="public.orders"}"#) > 0.0,
        "{after}"
    );
    assert!(
        value(r#"weir_plugin_memory_peak_bytes{table="public.orders"}"#) >= 65536.0,
        "a wasm instance has at least one page: {after}"
    );
    assert!(
        value(r#"weir_partition_job_seconds_count{table="public.orders"}"#) >= 4.0,
        "{after}"
    );
    assert!(
        after.contains("# TYPE weir_partition_job_seconds histogram")
            && after
                .contains(r#"weir_partition_job_seconds_bucket{table="public.orders",le="+Inf"}"#),
        "the job latency is a histogram: {after}"
    );

    // The slot's lag is read from the source; more WAL than the engine confirmed shows.
    scrape_until(port, 30, "the slot's lag", |b| {
        sample(b, "weir_slot_lag_bytes").is_some()
    })
    .await;

    // The walsender is cut: the engine reconnects, and says so in its retries.
    source
        .batch_execute(
            "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'metrics_live' AND active_pid IS NOT NULL",
        )
        .await
        .expect("terminate the walsender");
    source
        .batch_execute("INSERT INTO orders VALUES (1000, 'late', DATE '2026-03-02', 1.00, 'new')")
        .await
        .expect("one more order");
    let last = scrape_until(port, 60, "a source reconnect and the late order", |b| {
        sample(b, r#"weir_retries_total{operation="source_connect"}"#).is_some_and(|v| v >= 1.0)
            && sample(b, changes).is_some_and(|v| v - changes_before >= 201.0)
    })
    .await;
    assert!(
        sample(&last, written).unwrap_or(0.0) >= 180.0,
        "counters never go back: {last}"
    );
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        stderr.contains("serving Prometheus metrics at /metrics"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_taken_metrics_port_is_a_usage_error() {
    let db = TestDb::new("metrics_taken").await;
    db.write_config("", "", "");
    db.write_feed(&[]);
    assert!(db.weir(&["init"]).status.success());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = db.weir(&["run", "--once", "--metrics-addr", &addr]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--metrics-addr {addr}: cannot serve metrics there"
        )),
        "{stderr}"
    );
}

/// Every command a user runs, with `RUST_LOG=trace` (every dependency's logs too) in
/// both formats, against a source and a target that need the password: neither the
/// password nor any row value (a canary customer, a rejected row's input) is logged.
#[tokio::test(flavor = "multi_thread")]
async fn no_password_and_no_row_value_is_ever_logged() {
    let db = TestDb::new("logs_clean").await;
    let target = "analytics.orders_eur";
    let (_, source) = source_fixture(
        &db,
        "logs_clean",
        ORDERS_DDL,
        "[engine]\nflush_interval_ms = 100",
        &plugin_table(target),
    )
    .await;
    let pg = cluster();
    let with_password = |database: &str| {
        format!(
            "postgres://{SECRET_USER}:{SECRET_PASSWORD}@127.0.0.1:{}/{database}",
            pg.port()
        )
    };
    let source_dsn = with_password("logs_clean_source");
    let target_dsn = with_password(&db.name);
    const CANARY: &str = "row-value-canary-7f3a";
    const REJECTED: &str = "rejected-row-canary-91c2";
    // Rows of every round: one written, one the plugin rejects.
    let insert = |round: i64| {
        format!(
            "INSERT INTO orders VALUES ({}, '{CANARY}', DATE '2026-03-01', 19.90, 'new'), \
             ({}, '{REJECTED}', DATE '2026-03-01', -5.00, 'new')",
            2 * round + 1,
            2 * round + 2
        )
    };
    source.batch_execute(&insert(0)).await.expect("rows");
    let run = |args: &[&str], format: &str| {
        let mut all = vec!["--log-format", format];
        all.extend_from_slice(args);
        let out = db
            .weir_command(&all)
            .env("WEIR_SOURCE_DSN", &source_dsn)
            .env("WEIR_TARGET_DSN", &target_dsn)
            .env("RUST_LOG", "trace")
            .output()
            .expect("run weir");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        for (what, secret) in [
            ("the password", SECRET_PASSWORD),
            ("a row value", CANARY),
            ("a rejected row's value", REJECTED),
        ] {
            assert!(!stderr.contains(secret), "{args:?} logged {what}: {stderr}");
        }
        assert!(
            !stderr.contains('\u{1b}'),
            "{args:?}: colour codes in a log that is not a terminal: {stderr}"
        );
        if format == "json" {
            for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
                let parsed: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|_| panic!("{args:?}: a log line that is not JSON: {line}"));
                assert!(
                    parsed["fields"]["message"].is_string() && parsed["level"].is_string(),
                    "{args:?}: a JSON log line without level and message: {line}"
                );
            }
        }
        (stdout, stderr)
    };
    for (round, format) in ["text", "json"].into_iter().enumerate() {
        run(&["init"], format);
        if round > 0 {
            source
                .batch_execute(&insert(round as i64))
                .await
                .expect("rows");
        }
        let (_, stderr) = run(&["run", "--once"], format);
        assert!(
            stderr.contains("partitions written"),
            "the trace has the engine's own lines: {stderr}"
        );
        run(&["status", "--json"], format);
        run(
            &[
                "backfill",
                "--table",
                "public.orders",
                "--from",
                "2026-03-01",
                "--to",
                "2026-03-02",
            ],
            format,
        );
        run(
            &[
                "verify",
                "--table",
                "public.orders",
                "--from",
                "2026-03-01",
                "--to",
                "2026-03-02",
            ],
            format,
        );
        run(&["checkpoint", "show"], format);
    }
    let client = db.client().await;
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {target}"), &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        rows, 2,
        "the canary rows were written, the negative ones rejected"
    );
    // The values really went through the logged code paths: the rejected row's input is
    // in the dead-letter table, just never in a log.
    let dead: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM weir.dead_letter WHERE kind = 'rejected' AND input::text LIKE '%{REJECTED}%'"),
            &[],
        )
        .await
        .expect("dead letters")
        .get(0);
    assert!(dead >= 1, "the rejected row is kept in weir.dead_letter");
}
