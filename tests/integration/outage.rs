//! The target PostgreSQL goes away while changes flow: the live engine keeps staging,
//! retries its partition writes with a growing wait, catches up when the target is
//! back, and loses nothing.

use std::process::Stdio;
use std::time::{Duration, Instant};

use weir::localpg::{LocalPg, LocalPgOptions};

use crate::harness::{TestDb, Workload, assert_target_matches, file_len};

#[tokio::test(flavor = "multi_thread")]
async fn the_target_down_for_thirty_seconds_while_changes_flow_loses_nothing() {
    let outage: u64 = std::env::var("WEIR_OUTAGE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    // A cluster of its own: the shared one serves every other test.
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("cluster thread")
        .expect("start the target cluster");
    let dsn = pg.create_database("outage").await.expect("database");
    let db = TestDb {
        name: "outage".into(),
        dsn,
        dir: tempfile::Builder::new()
            .prefix("weir-test-outage-")
            .tempdir()
            .expect("tempdir"),
    };
    let mut workload = Workload::new(31, 10);
    db.write_feed(&workload.lines(2_000, 4));
    db.write_config("", "", "flush_interval_ms = 200\nparallelism = 2");
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let mut live = db
        .weir_command(&["run"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start weir run");
    let client = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while client
        .query_one("SELECT count(*) FROM weir.partitions", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
        == 0
    {
        assert!(Instant::now() < deadline, "the first writes never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);

    let pg = std::sync::Arc::new(pg);
    let stopper = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || stopper.stop())
        .await
        .expect("stop thread")
        .expect("stop the target");
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(outage) {
        db.append_feed(&workload.lines(200, 4));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let starter = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || starter.restart())
        .await
        .expect("restart thread")
        .expect("restart the target");
    db.append_feed(&workload.lines(500, 4));

    // The engine stayed up, staged everything meanwhile, and catches up.
    assert!(
        live.try_wait().expect("poll").is_none(),
        "weir run stopped during the outage:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let feed_len = file_len(&db.path("feed.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status: serde_json::Value =
            serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
        if status["position"].as_u64() == Some(feed_len)
            && status["dirty_partitions"]
                .as_array()
                .is_some_and(Vec::is_empty)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the engine did not catch up after the outage: {status}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    live.kill().expect("stop");
    live.wait().expect("reap");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("partition writes failed; staging goes on"),
        "the outage was seen and retried:\n{text}"
    );
    assert_target_matches(&db.client().await, "analytics.fact_orders", &workload.model).await;
}

/// With `[stage] max_unwritten_mb`, a target outage stops intake at the limit (the
/// position stands still, `status` says so, the log says why) instead of growing the
/// stage without bound; when the target is back the engine writes, resumes reading,
/// and ends exact.
#[tokio::test(flavor = "multi_thread")]
async fn the_unwritten_limit_pauses_intake_during_an_outage_and_loses_nothing() {
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("cluster thread")
        .expect("start the target cluster");
    let dsn = pg.create_database("limit").await.expect("database");
    let db = TestDb {
        name: "limit".into(),
        dsn,
        dir: tempfile::Builder::new()
            .prefix("weir-test-limit-")
            .tempdir()
            .expect("tempdir"),
    };
    let mut workload = Workload::new(53, 10);
    db.write_feed(&workload.lines(500, 4));
    db.write_config("", "", "flush_interval_ms = 100\nparallelism = 2");
    let config = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        config.replace("path = \"stage\"", "path = \"stage\"\nmax_unwritten_mb = 1"),
    )
    .expect("config");
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let mut live = db
        .weir_command(&["run"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start weir run");
    let status = || -> serde_json::Value {
        serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status")
    };
    let feed_len = || file_len(&db.path("feed.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status()["dirty_partitions"]
        .as_array()
        .is_none_or(|d| !d.is_empty())
        || status()["position"].as_u64() != Some(feed_len())
    {
        assert!(Instant::now() < deadline, "the first writes never came");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let pg = std::sync::Arc::new(pg);
    let stopper = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || stopper.stop())
        .await
        .expect("stop thread")
        .expect("stop the target");
    // About 3 MB of changes against a 1 MB limit.
    for _ in 0..10 {
        db.append_feed(&workload.lines(3_000, 4));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("intake paused")
    {
        assert!(Instant::now() < deadline, "intake never paused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let paused = status();
    assert_eq!(paused["intake_paused"], true, "{paused}");
    let position = paused["position"].as_u64().expect("position");
    assert!(
        position < feed_len(),
        "intake stopped before the feed's end"
    );
    let limit = paused["max_unwritten_bytes"].as_u64().expect("limit");
    let unwritten = paused["unwritten_bytes"].as_u64().expect("unwritten");
    // Checked once per flush interval: the overshoot is one interval's intake at most.
    assert!(unwritten >= limit && unwritten < 4 * limit, "{paused}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        status()["position"].as_u64(),
        Some(position),
        "nothing is read while paused"
    );

    let starter = std::sync::Arc::clone(&pg);
    tokio::task::spawn_blocking(move || starter.restart())
        .await
        .expect("restart thread")
        .expect("restart the target");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = status();
        if s["position"].as_u64() == Some(feed_len())
            && s["dirty_partitions"].as_array().is_some_and(Vec::is_empty)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the engine did not catch up: {s}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    live.kill().expect("stop");
    live.wait().expect("reap");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("intake resumed"), "{text}");
    assert_target_matches(&db.client().await, "analytics.fact_orders", &workload.model).await;
}
