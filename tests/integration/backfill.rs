//! `weir backfill` and `weir verify` through the binary, against real PostgreSQL: a
//! window rebuilt beside the live engine, a second backfill that changes nothing, the
//! double-run test catching a hand edit and a non-unique grain key, SIGINT and resume,
//! stale partitions after a plugin change, and a faked clock.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use weir_core::fixtures::OrdersTable;

use crate::harness::{TestDb, text};
use crate::plugins::plugin;

/// Days of the window.
const DAYS: i64 = 90;

/// One order insert or update line; day `d` counts from 2026-01-01.
fn order(op: &str, id: i64, day: i64, cents: i64, status: &str) -> String {
    let date =
        chrono::NaiveDate::from_ymd_opt(2026, 1, 1).expect("date") + chrono::Duration::days(day);
    let after = json!({"id": id, "customer": format!("customer-{:05}", id % 10_000), "order_date": date.to_string(),
        "amount": format!("{}.{:02}", cents / 100, cents % 100), "status": status});
    let l = json!({"op": op, "before": null, "after": after,
        "source": {"schema": "public", "table": "orders", "ts_ms": 1_772_323_200_000u64}, "ts_ms": 1_772_323_200_000u64});
    format!("{l}\n")
}

/// A delete with a key-only before image.
fn delete(id: i64) -> String {
    let l = json!({"op": "d", "before": {"id": id}, "after": null,
        "source": {"schema": "public", "table": "orders", "ts_ms": 1_772_323_200_000u64}, "ts_ms": 1_772_323_200_000u64});
    format!("{l}\n")
}

fn cents(id: i64) -> i64 {
    (id * 7919) % 100_000 + 1
}

/// Writes the config: orders through the Rust orders plugin at `rate`.
fn write_config(db: &TestDb, rate: &str, extra_tables: &str) {
    let orders = crate::harness::orders_table(
        "public.orders",
        "analytics.orders",
        &format!(
            "plugin = \"{}\"\n[table.plugin_config]\nrate = \"{rate}\"",
            plugin("orders-rust").display()
        ),
    );
    db.write_feed_config(
        "",
        "flush_interval_ms = 200\nparallelism = 2",
        &format!("{orders}{extra_tables}"),
    );
}

/// `rows` orders spread over the 90 days.
fn load(db: &TestDb, rows: i64) {
    let mut feed = String::with_capacity(rows as usize * 260);
    for id in 1..=rows {
        feed.push_str(&order("c", id, id % DAYS, cents(id), "new"));
    }
    std::fs::write(db.path("feed.jsonl"), feed).expect("write feed");
}

/// Lineage without the write time: (partition, generation, rows, checksum, sha, config).
async fn lineage(db: &TestDb) -> Vec<(String, i64, i64, String, Option<String>, Option<String>)> {
    db.client()
        .await
        .query(
            "SELECT partition, stage_generation, row_count, checksum, plugin_sha256, config_hash FROM weir.partitions \
             WHERE target_table = '\"analytics\".\"orders\"' OR target_table = 'analytics.orders' ORDER BY partition",
            &[],
        )
        .await
        .expect("lineage")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

/// The target as (count, sum of amount in cents, rows whose amount_eur differs, rows
/// whose status is not upper-case).
async fn target_summary(db: &TestDb) -> (i64, i64, i64, i64) {
    let r = db
        .client()
        .await
        .query_one(
            "SELECT count(*), coalesce(sum((amount * 100)::bigint), 0)::bigint, \
             count(*) FILTER (WHERE amount_eur <> amount), count(*) FILTER (WHERE status <> upper(status)) \
             FROM analytics.orders",
            &[],
        )
        .await
        .expect("summary");
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

fn backfill_args(parallel: &str) -> Vec<&str> {
    vec![
        "backfill",
        "--table",
        "public.orders",
        "--from",
        "2026-01-01",
        "--to",
        "2026-04-01",
        "--parallel",
        parallel,
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ninety_day_window_is_rebuilt_beside_the_live_engine_and_again_changes_nothing() {
    let rows: i64 = std::env::var("WEIR_BACKFILL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let db = TestDb::new("backfill_window").await;
    write_config(&db, "1", "");
    load(&db, rows);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);

    // The live engine tails the feed while the window is backfilled with 4 jobs, and
    // the feed keeps updating orders in some of the window's partitions meanwhile.
    let mut live = db
        .weir_command(&["run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weir run");
    let backfill = db
        .weir_command(&backfill_args("4"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start backfill");
    let mut updated = Vec::new();
    for round in 0..20i64 {
        let lines: Vec<String> = (0..10)
            .map(|k| {
                let id = 1 + (round * 7_777 + k * 104_729) % rows;
                updated.push(id);
                order("u", id, id % DAYS, cents(id) + 100, "paid")
            })
            .collect();
        db.append_feed(&lines);
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = backfill.wait_with_output().expect("backfill");
    assert!(
        out.status.success(),
        "backfill failed: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("wrote"), "{}", text(&out.stdout));
    // Let the live engine catch up, then drain what is left.
    std::thread::sleep(Duration::from_millis(1500));
    live.kill().expect("stop live");
    live.wait().expect("reap");
    db.weir_ok(&["run", "--once"]);

    updated.sort_unstable();
    updated.dedup();
    let expected_cents: i64 = (1..=rows).map(cents).sum::<i64>() + 100 * updated.len() as i64;
    assert_eq!(target_summary(&db).await, (rows, expected_cents, 0, 0));
    let paid: i64 = db
        .count("SELECT count(*) FROM analytics.orders WHERE status = 'PAID'")
        .await;
    assert_eq!(paid, updated.len() as i64, "every update is in the target");
    let before = lineage(&db).await;
    assert_eq!(
        before.len(),
        DAYS as usize,
        "lineage has every partition once"
    );
    let lineage_rows: i64 = before.iter().map(|l| l.2).sum();
    assert_eq!(lineage_rows, rows);

    // The same window again: row counts, checksums and generations are unchanged. A
    // partition the live engine last merged (`write = "auto"`) had no checksum; the
    // backfill replaces it and records one.
    let again = db.weir_ok(&backfill_args("4"));
    assert!(
        again.contains(&format!("wrote {DAYS} partitions")),
        "{again}"
    );
    let after = lineage(&db).await;
    assert_eq!(
        after.len(),
        before.len(),
        "lineage has every partition once"
    );
    let after: Vec<_> = after
        .into_iter()
        .zip(&before)
        .map(|(mut a, b)| {
            if b.3.is_empty() {
                a.3.clear();
            }
            a
        })
        .collect();
    assert_eq!(after, before);
    assert_eq!(target_summary(&db).await, (rows, expected_cents, 0, 0));

    // Verify passes on the healthy pipeline…
    let verified = db.weir_ok(&[
        "verify",
        "--table",
        "analytics.orders",
        "--from",
        "2026-01-01",
        "--to",
        "2026-04-01",
        "--parallel",
        "4",
    ]);
    assert!(
        verified.contains(&format!("verify passed: {DAYS} partitions")),
        "{verified}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_names_a_hand_edited_partition_and_a_non_unique_grain_key() {
    let db = TestDb::new("verify_fails").await;
    let dups = OrdersTable::jsonl("analytics.dups")
        .source("public.dups")
        .extra(&format!(
            "plugin = \"{}\"",
            plugin("hostile-duplicate-grain").display()
        ))
        .to_string();
    write_config(&db, "1", &dups);
    load(&db, 900);
    db.append_feed(&[
        order("c", 1, 0, 100, "new").replace("\"orders\"", "\"dups\""),
        order("c", 2, 0, 100, "new").replace("\"orders\"", "\"dups\""),
        order("c", 3, 1, 100, "new").replace("\"orders\"", "\"dups\""),
    ]);
    db.weir_ok(&["init"]);
    let run = db.weir(&["run", "--once"]);
    assert_eq!(
        run.status.code(),
        Some(1),
        "the duplicate grain fails its partition"
    );
    assert!(
        text(&run.stderr).contains("grain key (order_date) is not unique"),
        "{}",
        text(&run.stderr)
    );

    let verify = |table: &str| {
        db.weir(&[
            "verify",
            "--table",
            table,
            "--from",
            "2026-01-01",
            "--to",
            "2026-04-01",
            "--json",
        ])
    };
    let healthy = verify("public.orders");
    assert!(healthy.status.success(), "{}", text(&healthy.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&healthy.stdout).expect("json");
    assert_eq!(rows.as_array().map(Vec::len), Some(DAYS as usize));

    // A row edited by hand in the target: verify fails naming its partition.
    db.client()
        .await
        .execute(
            "UPDATE analytics.orders SET amount_eur = amount_eur + 1 WHERE id = 10",
            &[],
        )
        .await
        .expect("edit");
    let edited = verify("public.orders");
    assert_eq!(edited.status.code(), Some(1));
    let stderr = text(&edited.stderr);
    assert!(
        stderr.contains("verify failed for 1 of 90 partitions: 2026-01-11"),
        "{stderr}"
    );
    let rows: serde_json::Value = serde_json::from_slice(&edited.stdout).expect("json");
    let bad: Vec<&serde_json::Value> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0]["partition"], "2026-01-11");
    assert_eq!(bad[0]["target_matches"], false);

    // The plugin whose grain key is not unique.
    let dup = verify("analytics.dups");
    assert_eq!(dup.status.code(), Some(1));
    let rows: serde_json::Value = serde_json::from_slice(&dup.stdout).expect("json");
    let day0 = rows
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["partition"] == "2026-01-01")
        .expect("2026-01-01");
    assert!(
        day0["reason"]
            .as_str()
            .expect("reason")
            .contains("grain key (order_date) is not unique"),
        "{day0}"
    );
    assert!(text(&dup.stderr).contains("2026-01-01"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_stops_a_backfill_cleanly_and_the_rerun_finishes_only_the_rest() {
    let db = TestDb::new("backfill_sigint").await;
    write_config(&db, "1", "");
    load(&db, 45_000);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let expected = target_summary(&db).await;
    // A new config rate makes every partition's rewrite visible in lineage.
    write_config(&db, "2", "");
    let child = db
        .weir_command(&backfill_args("1"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start backfill");
    // Wait until some partitions are rebuilt, then SIGINT.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done: i64 = db.count("SELECT count(*) FROM analytics.orders WHERE amount_eur = amount * 2 AND amount > 0").await;
        if done > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the backfill made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let out = child.wait_with_output().expect("backfill");
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("interrupted:"), "{stdout}");
    assert!(text(&out.stderr).contains("run the same command again"));
    // Whole partitions only: each is all at the new rate or all at the old.
    let torn: i64 = db
        .count(
            "SELECT count(*) FROM (SELECT order_date FROM analytics.orders GROUP BY order_date \
             HAVING count(DISTINCT amount_eur = amount * 2) > 1) t",
        )
        .await;
    assert_eq!(torn, 0, "no partition is half written");

    let rerun = db.weir_ok(&backfill_args("2"));
    assert!(
        rerun.contains("already done by an interrupted run of this window"),
        "{rerun}"
    );
    let (count, sum, _, upper) = target_summary(&db).await;
    assert_eq!((count, sum, upper), (expected.0, expected.1, 0));
    let at_new_rate: i64 = db
        .count("SELECT count(*) FROM analytics.orders WHERE amount_eur = amount * 2")
        .await;
    assert_eq!(at_new_rate, count, "every partition is rebuilt");
    // Finished: the next backfill of the window starts afresh (rewrites all).
    let fresh = db.weir_ok(&backfill_args("2"));
    assert!(
        fresh.contains(&format!("wrote {DAYS} partitions")),
        "{fresh}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_plugin_change_backfill_stale_rebuilds_exactly_the_stale_partitions() {
    let db = TestDb::new("backfill_stale").await;
    write_config(&db, "1", "");
    load(&db, 900);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let status = |db: &TestDb| -> serde_json::Value {
        serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("status json")
    };
    assert_eq!(
        status(&db)["stale_partitions"].as_array().map(Vec::len),
        Some(0)
    );

    // New config; then new orders in 10 days are written with it.
    write_config(&db, "3", "");
    let lines: Vec<String> = (0..10)
        .map(|d| order("c", 10_000 + d, d, 500, "new"))
        .collect();
    db.append_feed(&lines);
    db.weir_ok(&["run", "--once"]);
    let stale = status(&db)["stale_partitions"]
        .as_array()
        .cloned()
        .expect("stale");
    assert_eq!(
        stale.len(),
        (DAYS - 10) as usize,
        "exactly the partitions written before the change"
    );
    assert!(
        stale
            .iter()
            .all(|s| s["partition"].as_str().expect("p") >= "2026-01-11")
    );

    let dry = db.weir_ok(&["backfill", "--stale", "--dry-run"]);
    assert!(
        dry.contains(&format!("public.orders: {} partitions", DAYS - 10)),
        "{dry}"
    );
    assert!(dry.contains("config "), "{dry}");
    let out = db.weir_ok(&["backfill", "--stale", "--parallel", "3"]);
    assert!(
        out.contains(&format!("wrote {} partitions", DAYS - 10)),
        "{out}"
    );
    assert_eq!(
        status(&db)["stale_partitions"].as_array().map(Vec::len),
        Some(0)
    );
    let wrong: i64 = db
        .count("SELECT count(*) FROM analytics.orders WHERE amount_eur <> amount * 3")
        .await;
    assert_eq!(wrong, 0);

    // A window whose partitions have no staged rows left (every order of 2026-01-21
    // deleted) is refused, exit 2, unless --allow-empty.
    let deletes: Vec<String> = (1..=900).filter(|id| id % DAYS == 20).map(delete).collect();
    db.append_feed(&deletes);
    db.weir_ok(&["run", "--once"]);
    let window = [
        "backfill",
        "--table",
        "public.orders",
        "--from",
        "2026-01-21",
        "--to",
        "2026-01-22",
    ];
    let refused = db.weir(&window);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("no staged rows in [2026-01-21, 2026-01-22)"),
        "{}",
        text(&refused.stderr)
    );
    let mut allowed = window.to_vec();
    allowed.push("--allow-empty");
    let out = db.weir_ok(&allowed);
    assert!(out.contains("wrote 1 partitions (0 rows)"), "{out}");
    // A window no partition is in (a mistyped year) is refused, naming the partitions
    // there are; with --allow-empty it is nothing to do.
    let mut empty = vec![
        "backfill",
        "--table",
        "public.orders",
        "--from",
        "2027-01-01",
        "--to",
        "2027-02-01",
    ];
    let refused = db.weir(&empty);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains(
            "no partition of public.orders in [2027-01-01, 2027-02-01) is staged or written (its 90 partitions run from 2026-01-01 to 2026-03-31)"
        ),
        "{}",
        text(&refused.stderr)
    );
    empty.push("--allow-empty");
    let nothing = db.weir_ok(&empty);
    assert!(nothing.contains("nothing to backfill"), "{nothing}");
    let bad = db.weir(&[
        "backfill",
        "--table",
        "public.orders",
        "--from",
        "2026-01-32",
        "--to",
        "2026-02-01",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("`2026-01-32` is not a partition of"),
        "{}",
        text(&bad.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn backfill_and_verify_give_the_same_results_under_a_clock_years_away() {
    let faketime = Command::new("faketime").arg("--version").output();
    assert!(
        faketime.is_ok(),
        "faketime is missing: scripts/install-deps installs it (apt package faketime)"
    );
    let db = TestDb::new("backfill_faketime").await;
    write_config(&db, "1", "");
    load(&db, 900);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let verify_args = [
        "verify",
        "--table",
        "public.orders",
        "--from",
        "2026-01-01",
        "--to",
        "2026-04-01",
        "--json",
    ];
    let now = db.weir_ok(&verify_args);
    // The same command, 15 years ahead (the monotonic clock is left alone: it only
    // paces timers).
    let faked = |args: &[&str]| {
        let cmd = db.weir_command(args);
        let mut faked = Command::new("faketime");
        faked
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .args(["-f", "+15y"])
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))));
        faked.output().expect("run under faketime")
    };
    let out = faked(&verify_args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), now, "verify is the same 15 years later");
    let before = lineage(&db).await;
    let out = faked(&backfill_args("2"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        lineage(&db).await,
        before,
        "the same partitions, rows and checksums"
    );
}

/// A plugin whose partition column has another name than the source's `partition_by`
/// (fan-out writes `order_date`; the table is partitioned by `day`): `verify` and
/// `backfill --allow-empty` find the target's partitions by the target's column, so a
/// row put by hand in a partition nothing else knows fails verify and is removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_renaming_the_partition_column_still_has_its_target_partitions_checked() {
    let db = TestDb::new("bf_renamed_partition").await;
    let table = format!(
        "[[table]]\nsource = \"public.orders\"\ntarget = \"analytics.fanned\"\nkey = [\"id\"]\npartition_by = \"day\"\ngrain = \"day\"\ncolumns = {{ id = \"bigint\", day = \"date\", order_date = \"date\" }}\nplugin = {:?}\n[table.plugin_config]\ncopies = \"1\"\n",
        plugin("fan-out").display().to_string()
    );
    db.write_feed_config("", "", &table);
    let line = |id: i64, day: &str| {
        let after = json!({"id": id, "day": day, "order_date": day});
        format!(
            "{}\n",
            json!({"op": "c", "before": null, "after": after, "source": {"schema": "public", "table": "orders"}})
        )
    };
    db.write_feed(&[line(1, "2026-03-01"), line(2, "2026-03-02")]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute("INSERT INTO analytics.fanned VALUES (99, '2026-03-04')")
        .await
        .expect("a row by hand");
    let window = [
        "--table",
        "public.orders",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-05",
    ];
    let verify = db.weir(&[&["verify"][..], &window].concat());
    let stdout = text(&verify.stdout);
    assert_eq!(
        verify.status.code(),
        Some(1),
        "{stdout}{}",
        text(&verify.stderr)
    );
    assert!(stdout.contains("2026-03-04"), "{stdout}");
    db.weir_ok(&[&["backfill"][..], &window, &["--allow-empty"]].concat());
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fanned WHERE id = 99")
            .await,
        0
    );
    let verify = db.weir(&[&["verify"][..], &window].concat());
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}
