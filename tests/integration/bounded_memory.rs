//! Bounded memory: a partition job streams (the stage read in chunks, transformed,
//! COPYed as it goes), so its memory does not grow with the partition. Two month
//! partitions, one five times the other's rows (about 1 KiB each), are written,
//! backfilled, merged and verified; each command's peak RSS, from its own log, stays
//! within a stated slack of the small partition's and under the config's budget, and
//! so does the first `run --once` that stages and writes them all.
//! `benches/` measures the same at 5,000,000 rows.

use serde_json::Value as J;
use weir_core::fixtures::OrdersTable;

use crate::harness::{TestDb, text};

/// Rows of the small partition (March); April has five times as many.
fn small_rows() -> i64 {
    std::env::var("WEIR_BOUNDED_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// The status text of each row: about 1 KiB, so a partition's rows are large in memory.
fn padding(id: i64) -> String {
    format!("{id:08}-{}", "x".repeat(1000))
}

fn order(op: &str, id: i64, month: u32, status: &str) -> String {
    let day = 1 + id % 28;
    format!(
        "{{\"op\":\"{op}\",\"before\":null,\"after\":{{\"id\":{id},\"customer\":\"c{}\",\"order_date\":\"2026-{month:02}-{day:02}\",\"amount\":\"{}.{:02}\",\"status\":\"{status}\"}},\"source\":{{\"schema\":\"public\",\"table\":\"orders\"}}}}\n",
        id % 97,
        id % 10_000,
        id % 100
    )
}

/// The peak RSS (KiB) a command logged in its `… ended` line.
fn peak_kib(stderr: &str, message: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<J>(l).ok())
        .find(|j| j["fields"]["message"] == message)
        .and_then(|j| j["fields"]["peak_rss_kib"].as_u64())
        .unwrap_or_else(|| panic!("no `{message}` line:\n{stderr}"))
}

fn weir_json(db: &TestDb, args: &[&str]) -> String {
    let mut all = vec!["--log-format", "json"];
    all.extend_from_slice(args);
    let out = db.weir(&all);
    assert!(
        out.status.success(),
        "weir {args:?}: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_memory_does_not_grow_with_its_partition() {
    let small = small_rows();
    let big = 5 * small;
    let db = TestDb::new("bounded_memory").await;
    let table = OrdersTable::jsonl("analytics.orders")
        .grain("month")
        .extra("write = \"merge\"");
    db.write_feed_config(
        "",
        "flush_interval_ms = 200\nparallelism = 1",
        &table.to_string(),
    );
    let mut feed = String::new();
    for id in 1..=small {
        feed.push_str(&order("c", id, 3, &padding(id)));
    }
    for id in small + 1..=small + big {
        feed.push_str(&order("c", id, 4, &padding(id)));
    }
    std::fs::write(db.path("feed.jsonl"), feed).expect("feed");
    db.weir_ok(&["init"]);
    let first_peak = peak_kib(&weir_json(&db, &["run", "--once"]), "run ended");
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.orders").await,
        small + big
    );
    let status: J = serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status");
    let budget_kib = status["memory_budget"]["total"].as_u64().expect("budget") >> 10;

    // Backfill and verify each partition; the big one may cost a little more (its
    // grain-key hashes, allocator slack), never its rows.
    let mut peaks = Vec::new();
    for (from, to) in [("2026-03", "2026-04"), ("2026-04", "2026-05")] {
        let window = ["--table", "public.orders", "--from", from, "--to", to];
        let backfill = peak_kib(
            &weir_json(&db, &[&["backfill"][..], &window].concat()),
            "backfill ended",
        );
        let verify = peak_kib(
            &weir_json(&db, &[&["verify"][..], &window].concat()),
            "verify ended",
        );
        peaks.push((backfill, verify));
    }
    // A merge of every key of April: the changed keys stream too.
    let mut updates = String::new();
    for id in small + 1..=small + big {
        updates.push_str(&order("u", id, 4, &format!("paid-{}", padding(id))));
    }
    std::fs::OpenOptions::new()
        .append(true)
        .open(db.path("feed.jsonl"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, updates.as_bytes()))
        .expect("append");
    let merged = weir_json(&db, &["run", "--once"]);
    let merge_peak = peak_kib(&merged, "run ended");
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.orders WHERE status LIKE 'paid-%'")
            .await,
        big
    );
    let lineage_mode: String = db
        .client()
        .await
        .query_one(
            "SELECT write_mode FROM weir.partitions WHERE partition = '2026-04'",
            &[],
        )
        .await
        .expect("lineage")
        .get(0);
    assert_eq!(lineage_mode, "merge");

    let ((small_backfill, small_verify), (big_backfill, big_verify)) = (peaks[0], peaks[1]);
    // April's rows hold about 4 × small KiB more than March's: a job that held them
    // would grow by that much, twice over (staged rows and output). What may grow is
    // the 8-byte grain-key hashes and allocator slack: a partition scan does not fill
    // RocksDB's block cache (it did, and the cache then grew with the partition, up to
    // its 64 MiB).
    let grown_kib = (big - small) as u64;
    let slack_kib = 32 * 1024;
    eprintln!(
        "bounded memory: {small} and {big} rows of ~1 KiB; backfill {small_backfill} → {big_backfill} KiB, verify {small_verify} → {big_verify} KiB, first run {first_peak} KiB, merge of {big} keys {merge_peak} KiB; budget {budget_kib} KiB"
    );
    for (what, a, b) in [
        ("backfill", small_backfill, big_backfill),
        ("verify", small_verify, big_verify),
    ] {
        assert!(
            b <= a + slack_kib,
            "{what}'s peak grew from {a} to {b} KiB with a partition {grown_kib} KiB larger"
        );
    }
    for peak in [first_peak, big_backfill, big_verify, merge_peak] {
        assert!(
            peak < budget_kib,
            "peak {peak} KiB over the budget {budget_kib} KiB"
        );
    }
}
