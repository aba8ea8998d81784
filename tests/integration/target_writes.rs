//! Target writes on real estates: values in SQL whatever `standard_conforming_strings`,
//! native child names that cannot collide, readers that never see a partition empty or
//! half-written, a `lock_timeout` that names the blocker and retries, no row value from
//! a PostgreSQL error's DETAIL in any output, names over 63 bytes refused, a verify
//! that names the keys and columns that differ, and time limits set on the target's
//! database that do not fail Weir's writes.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{TestDb, text};

/// A `[[table]]` of `public.people` (value grain on `region`) into `analytics.people`.
fn people_table(native: bool, extra: &str) -> String {
    format!(
        r#"
[[table]]
source = "public.people"
target = "analytics.people"
key = ["id"]
partition_by = "region"
grain = "value"
columns = {{ id = "bigint", region = "text", status = "text" }}
{}
{extra}
"#,
        if native {
            "target_partitioning = \"native\""
        } else {
            ""
        }
    )
}

/// One change of `public.people`; `region` `None` is SQL NULL.
fn person(op: &str, id: i64, region: Option<&str>, status: &str) -> String {
    let image = json!({"id": id, "region": region, "status": status});
    let (before, after) = match op {
        "d" => (Some(json!({"id": id})), None),
        "u" => (Some(json!({"id": id})), Some(image)),
        _ => (None, Some(image)),
    };
    let line = json!({"op": op, "before": before, "after": after, "source": {"schema": "public", "table": "people"}});
    format!("{line}\n")
}

/// The target's rows as `(id, region, status)`, by id.
async fn people(db: &TestDb) -> Vec<(i64, Option<String>, String)> {
    db.client()
        .await
        .query(
            "SELECT id, region, status FROM analytics.people ORDER BY id",
            &[],
        )
        .await
        .expect("read the target")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn verify_people(db: &TestDb) -> std::process::Output {
    db.weir(&[
        "verify",
        "--table",
        "analytics.people",
        "--from",
        " ",
        "--to",
        "~",
        "--json",
    ])
}

/// With `standard_conforming_strings = off` on the target, a value partition whose
/// value holds a quote and a backslash is written, rewritten and verified exactly, in
/// plain and native targets, and a value shaped as an injection stays a value.
#[tokio::test(flavor = "multi_thread")]
async fn values_with_quotes_and_backslashes_are_exact_without_standard_conforming_strings() {
    for native in [false, true] {
        let name = if native {
            "tw_scs_native"
        } else {
            "tw_scs_plain"
        };
        let db = TestDb::new(name).await;
        db.client()
            .await
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET standard_conforming_strings = off; \
                 CREATE TABLE public.canary (x int); INSERT INTO public.canary VALUES (1);"
            ))
            .await
            .expect("settings");
        db.write_feed_config("", "", &people_table(native, ""));
        let odd = "O'Brien\\";
        let injection = "x\\'); DROP TABLE public.canary; --";
        db.write_feed(&[
            person("c", 1, Some(odd), "new"),
            person("c", 2, Some(odd), "new"),
            person("c", 3, Some(injection), "new"),
            person("c", 4, Some("plain"), "new"),
        ]);
        db.weir_ok(&["init"]);
        db.weir_ok(&["run", "--once"]);
        // Rewritten: the partition is deleted and copied again under the same quoting.
        db.append_feed(&[
            person("u", 1, Some(odd), "shipped"),
            person("d", 2, None, ""),
            person("u", 3, Some(injection), "shipped"),
        ]);
        db.weir_ok(&["run", "--once"]);
        assert_eq!(
            people(&db).await,
            [
                (1, Some(odd.to_owned()), "shipped".to_owned()),
                (3, Some(injection.to_owned()), "shipped".to_owned()),
                (4, Some("plain".to_owned()), "new".to_owned()),
            ],
            "native = {native}"
        );
        assert_eq!(db.count("SELECT count(*) FROM public.canary").await, 1);
        let verify = verify_people(&db);
        assert!(
            verify.status.success(),
            "native = {native}: {}\n{}",
            text(&verify.stdout),
            text(&verify.stderr)
        );
        let rows: serde_json::Value = serde_json::from_slice(&verify.stdout).expect("json");
        let partitions: Vec<&str> = rows
            .as_array()
            .expect("rows")
            .iter()
            .filter_map(|r| r["partition"].as_str())
            .collect();
        assert!(
            partitions.contains(&odd) && partitions.contains(&injection),
            "{partitions:?}"
        );
    }
}

/// Partitions `EU` and `eu`, NULL and the text `__null__`, `a-b` and `a_b`, in a native
/// target: each in a child of its own, and the target equals the source.
#[tokio::test(flavor = "multi_thread")]
async fn native_children_of_similar_partitions_do_not_collide() {
    let db = TestDb::new("tw_children").await;
    db.write_feed_config("", "", &people_table(true, ""));
    let regions = [
        Some("EU"),
        Some("eu"),
        None,
        Some("__null__"),
        Some("a-b"),
        Some("a_b"),
    ];
    let lines: Vec<String> = regions
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let id = i as i64 * 10;
            [person("c", id, *r, "a"), person("c", id + 1, *r, "b")]
        })
        .collect();
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // Rewritten once more, so that a shared child would be emptied by its neighbour.
    db.append_feed(&[person("u", 0, Some("EU"), "c"), person("u", 20, None, "c")]);
    db.weir_ok(&["run", "--once"]);
    let expected: Vec<(i64, Option<String>, String)> = regions
        .iter()
        .enumerate()
        .flat_map(|(i, r)| {
            let id = i as i64 * 10;
            let first = if id == 0 || id == 20 { "c" } else { "a" };
            [
                (id, r.map(str::to_owned), first.to_owned()),
                (id + 1, r.map(str::to_owned), "b".to_owned()),
            ]
        })
        .collect();
    assert_eq!(people(&db).await, expected);
    let children = db
        .count("SELECT count(*) FROM pg_inherits WHERE inhparent = 'analytics.people'::regclass")
        .await;
    assert_eq!(children, regions.len() as i64);
    // Each child holds exactly one partition's rows.
    let mixed = db
        .count(
            "SELECT count(*) FROM (SELECT tableoid FROM analytics.people GROUP BY tableoid \
             HAVING count(DISTINCT coalesce(region, '<null>')) > 1 OR count(*) <> 2) x",
        )
        .await;
    assert_eq!(mixed, 0);
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
    // Lineage has a row for each partition too: the text `__null__` is named `\__null__`.
    let client = db.client().await;
    let names: Vec<String> = client
        .query(
            "SELECT partition FROM weir.partitions WHERE target_table = 'analytics.people' ORDER BY partition COLLATE \"C\"",
            &[],
        )
        .await
        .expect("lineage")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        names,
        ["EU", "\\__null__", "__null__", "a-b", "a_b", "eu"],
        "one lineage row per partition"
    );
    // A backfill of a window holding the text `__null__` repairs it, though the NULL
    // partition was written later.
    client
        .batch_execute("UPDATE analytics.people SET status = 'damaged' WHERE region = '__null__'")
        .await
        .expect("damage");
    let out = db.weir(&[
        "backfill",
        "--table",
        "analytics.people",
        "--from",
        "_",
        "--to",
        "a",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(people(&db).await, expected);
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
    // Its report piped into a reader that has gone (`weir verify … | head -0`): the
    // process ends as `cat` would, without a panic.
    let mut child = db
        .weir_command(&[
            "verify",
            "--table",
            "analytics.people",
            "--from",
            " ",
            "--to",
            "~",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn verify");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("verify");
    assert!(
        out.status.code() != Some(101) && !text(&out.stderr).contains("panicked"),
        "{}: {}",
        out.status,
        text(&out.stderr)
    );
}

/// Readers in READ COMMITTED and REPEATABLE READ read a partition in a loop while weir
/// rewrites it many times (plain and native): each read sees all the rows of one
/// version, never none and never a mix.
#[tokio::test(flavor = "multi_thread")]
async fn readers_never_see_a_partition_empty_or_half_written() {
    const ROWS: i64 = 40;
    const REWRITES: usize = 8;
    for native in [false, true] {
        let name = if native {
            "tw_mvcc_native"
        } else {
            "tw_mvcc_plain"
        };
        let db = TestDb::new(name).await;
        db.write_feed_config("", "", &people_table(native, ""));
        let version = |v: usize, op: &str| -> Vec<String> {
            (0..ROWS)
                .map(|id| person(op, id, Some("EU"), &format!("v{v}")))
                .collect()
        };
        db.write_feed(&version(0, "c"));
        db.weir_ok(&["init"]);
        db.weir_ok(&["run", "--once"]);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut readers = Vec::new();
        for isolation in ["READ COMMITTED", "REPEATABLE READ"] {
            let client = db.client().await;
            let stop = stop.clone();
            readers.push(tokio::spawn(async move {
                let (mut reads, mut bad) = (0u64, Vec::new());
                let mut pause = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // The snapshot is taken first (REPEATABLE READ: at the first
                    // statement), the partition read a moment later, while a rewrite may
                    // commit in between.
                    client
                        .batch_execute(&format!(
                            "BEGIN ISOLATION LEVEL {isolation}; SELECT 1"
                        ))
                        .await
                        .expect("begin");
                    pause = (pause + 7) % 40;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    let row = client
                        .query_one(
                            "SELECT count(*), count(DISTINCT status) FROM analytics.people WHERE region = 'EU'",
                            &[],
                        )
                        .await
                        .expect("read");
                    client.batch_execute("COMMIT").await.expect("commit");
                    let (n, versions): (i64, i64) = (row.get(0), row.get(1));
                    reads += 1;
                    if n != ROWS || versions != 1 {
                        bad.push((n, versions));
                    }
                }
                (isolation, reads, bad)
            }));
        }
        for v in 1..=REWRITES {
            db.append_feed(&version(v, "u"));
            db.weir_ok(&["run", "--once"]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for reader in readers {
            let (isolation, reads, bad) = reader.await.expect("reader");
            assert!(reads > 0, "{isolation}: no reads");
            assert!(
                bad.is_empty(),
                "native = {native}, {isolation}: {} of {reads} reads saw (rows, versions) {:?}",
                bad.len(),
                &bad[..bad.len().min(5)]
            );
        }
        assert_eq!(
            db.count(&format!(
                "SELECT count(*) FROM analytics.people WHERE status = 'v{REWRITES}'"
            ))
            .await,
            ROWS
        );
    }
}

/// A live `weir run` of the people feed (one row, EU) with `lock_timeout_ms = 200`,
/// caught up; its log.
async fn live_with_short_lock_timeout(db: &TestDb) -> (std::path::PathBuf, crate::harness::Reaped) {
    std::fs::write(
        db.config_path(),
        std::fs::read_to_string(db.config_path())
            .expect("config")
            .replace(
                "dsn_env = \"WEIR_TARGET_DSN\"",
                "dsn_env = \"WEIR_TARGET_DSN\"\nlock_timeout_ms = 200",
            ),
    )
    .expect("config");
    db.write_feed(&[person("c", 1, Some("EU"), "new")]);
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let run = db.spawn_live(&[], &log);
    db.wait_caught_up(60).await;
    (log, run)
}

/// Waits until `log` holds `warning` naming session `pid` as the blocker.
async fn wait_logged(log: &std::path::Path, warning: &str, pid: i32) {
    let needle = format!("blocker_pids=[{pid}]");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logged = std::fs::read_to_string(log).unwrap_or_default();
        if logged.contains(warning) && logged.contains(&needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no `{warning}` naming session {pid}:\n{logged}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session holding an ACCESS EXCLUSIVE lock on the target table: the write waits
/// `lock_timeout_ms`, gives up, logs the blocker's pid, is retried, and succeeds once the
/// blocker ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_table_times_out_names_the_blocker_and_is_retried() {
    let db = TestDb::new("tw_lock_timeout").await;
    db.write_feed_config("", "flush_interval_ms = 100", &people_table(false, ""));
    let (log, _run) = live_with_short_lock_timeout(&db).await;

    let blocker = db.client().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE analytics.people IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    db.append_feed(&[person("u", 1, Some("EU"), "shipped")]);
    wait_logged(&log, "timed out waiting for a lock", pid).await;
    // Still waiting: nothing was written past the lock.
    blocker.batch_execute("COMMIT").await.expect("unlock");
    db.wait_caught_up(60).await;
    assert_eq!(
        people(&db).await,
        [(1, Some("EU".to_owned()), "shipped".to_owned())]
    );

    // Another Weir writer of the partition that hangs holding its lock (a backfill
    // paused in its write): the live run's wait for it is bounded too (twelve times
    // `lock_timeout_ms`), and names it.
    let mut backfill = db
        .weir_command(&["backfill", "--table", "public.people", "--partition", "EU"])
        .env("FAILPOINTS", "target-after-delete=sleep(60000)")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn backfill");
    let deadline = Instant::now() + Duration::from_secs(60);
    let holder: i32 = loop {
        let row = blocker
            .query_opt(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid <> pg_backend_pid() \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1",
                &[],
            )
            .await
            .expect("locks");
        if let Some(row) = row {
            break row.get(0);
        }
        assert!(Instant::now() < deadline, "the backfill took no lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    db.append_feed(&[person("u", 1, Some("EU"), "delivered")]);
    wait_logged(&log, "timed out waiting for a lock", holder).await;
    backfill.kill().expect("stop the backfill");
    backfill.wait().expect("reap");
    db.wait_caught_up(60).await;
    assert_eq!(
        people(&db).await,
        [(1, Some("EU".to_owned()), "delivered".to_owned())]
    );
}

/// A session holding rows of the partition `FOR UPDATE`: the write's DELETE waits
/// `lock_timeout_ms` (sent with the COPY's start in one round trip), gives up, names
/// the blocker, and its connection stays usable (before: the COPY start dropped
/// unanswered put the connection out of step, "unexpected message from server", and
/// the blocker went unnamed). Both the replace and the merge write.
#[tokio::test(flavor = "multi_thread")]
async fn rows_held_for_update_time_out_name_the_blocker_and_keep_the_connection() {
    for mode in ["replace", "merge"] {
        let db = TestDb::new(&format!("tw_row_lock_{mode}")).await;
        db.write_feed_config(
            "",
            "flush_interval_ms = 100",
            &people_table(false, &format!("write = \"{mode}\"")),
        );
        let (log, _run) = live_with_short_lock_timeout(&db).await;
        let blocker = db.client().await;
        blocker
            .batch_execute("BEGIN; SELECT * FROM analytics.people WHERE region = 'EU' FOR UPDATE")
            .await
            .expect("hold the rows");
        let pid: i32 = blocker
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("pid")
            .get(0);
        db.append_feed(&[person("u", 1, Some("EU"), "shipped")]);
        wait_logged(&log, "timed out waiting for a lock", pid).await;
        blocker.batch_execute("COMMIT").await.expect("unlock");
        db.wait_caught_up(60).await;
        assert_eq!(
            people(&db).await,
            [(1, Some("EU".to_owned()), "shipped".to_owned())]
        );
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !logged.contains("unexpected message from server"),
            "{mode}: {logged}"
        );
    }
}

/// A lock held on one target table holds up one of its writes per round, not every
/// one of its partitions in turn with the other tables' writes behind them: the other
/// table is written while the lock is held, before the locked table's twenty
/// partitions could each have waited `lock_timeout_ms`.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_on_one_table_does_not_hold_up_the_others() {
    let db = TestDb::new("tw_lock_one_table").await;
    let staff = people_table(false, "")
        .replace("public.people", "public.staff")
        .replace("analytics.people", "analytics.staff");
    db.write_feed_config(
        "",
        "flush_interval_ms = 100",
        &format!("{}{staff}", people_table(false, "")),
    );
    let (log, _run) = live_with_short_lock_timeout(&db).await;
    let blocker = db.client().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE analytics.people IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    // Twenty partitions of the locked table first (older), then one of the other.
    let regions: Vec<String> = (0..20)
        .map(|i| person("c", 100 + i, Some(&format!("r{i:02}")), "new"))
        .collect();
    db.append_feed(&regions);
    db.append_feed(&[person("c", 7, Some("EU"), "staff")
        .replace("\"table\": \"people\"", "\"table\": \"staff\"")
        .replace("\"table\":\"people\"", "\"table\":\"staff\"")]);
    let client = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let written: i64 = client
            .query_one("SELECT count(*) FROM analytics.staff", &[])
            .await
            .expect("staff")
            .get(0);
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        let timeouts = logged.matches("timed out waiting for a lock").count();
        if written == 1 {
            assert!(
                timeouts < 20,
                "the other table waited for {timeouts} lock timeouts:\n{logged}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other table was not written:\n{logged}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    blocker.batch_execute("COMMIT").await.expect("unlock");
    db.wait_caught_up(60).await;
    assert_eq!(people(&db).await.len(), 21);
}

/// Time limits a DBA set on the target's database (or Weir's role) do not fail Weir's
/// writes and reads: a partition whose COPY takes longer than `statement_timeout` (a
/// statement trigger that sleeps) is written, and verified, where it used to fail at
/// every retry.
#[tokio::test(flavor = "multi_thread")]
async fn time_limits_of_the_target_database_do_not_fail_writes() {
    let db = TestDb::new("tw_session_limits").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "new"),
        person("c", 2, Some("US"), "new"),
    ]);
    db.weir_ok(&["init"]);
    db.client()
        .await
        .batch_execute(&format!(
            "CREATE FUNCTION public.slow() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$; \
             CREATE TRIGGER slow AFTER INSERT ON analytics.people \
               FOR EACH STATEMENT EXECUTE FUNCTION public.slow(); \
             ALTER DATABASE {0} SET statement_timeout = '100ms'; \
             ALTER DATABASE {0} SET lock_timeout = '100ms'; \
             ALTER DATABASE {0} SET idle_in_transaction_session_timeout = '100ms'",
            db.name
        ))
        .await
        .expect("limits");
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        people(&db).await,
        [
            (1, Some("EU".to_owned()), "new".to_owned()),
            (2, Some("US".to_owned()), "new".to_owned())
        ]
    );
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stderr));
}

/// A row the target refuses (a check constraint): PostgreSQL's DETAIL holds the whole
/// row, and none of it reaches weir's output; the constraint is named.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_row_is_never_printed() {
    let db = TestDb::new("tw_detail").await;
    db.client()
        .await
        .batch_execute(
            "CREATE SCHEMA analytics; CREATE TABLE analytics.people (id bigint, region text, \
             status text CONSTRAINT status_is_short CHECK (length(status) < 8))",
        )
        .await
        .expect("target table");
    db.write_feed_config("", "", &people_table(false, ""));
    // The canary is in a column that is neither the key nor the partition column (which
    // weir names): only DETAIL would print it.
    let canary = "Canary-4f1b9e";
    db.write_feed(&[
        person("c", 1, Some("EU"), "ok"),
        person("c", 2, Some("EU"), canary),
    ]);
    db.weir_ok(&["init"]);
    let run = db.weir(&["run", "--once"]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    let status = db.weir(&["status"]);
    for (what, out) in [
        ("run stdout", text(&run.stdout)),
        ("run stderr", text(&run.stderr)),
        ("status", text(&status.stdout) + &text(&status.stderr)),
    ] {
        assert!(!out.contains(canary), "{what}: {out}");
        assert!(!out.contains("Failing row"), "{what}: {out}");
    }
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("status_is_short") && stderr.contains("23514"),
        "{stderr}"
    );
}

/// Names over PostgreSQL's 63 bytes are refused at load, named with the limit.
#[tokio::test(flavor = "multi_thread")]
async fn names_over_63_bytes_are_refused_at_load() {
    let db = TestDb::new("tw_long_names").await;
    let long = "t".repeat(64);
    for (field, table) in [
        (
            "table[0].target",
            people_table(false, "").replace("analytics.people", &format!("analytics.{long}")),
        ),
        (
            "table[0].columns",
            people_table(false, "").replace(
                "status = \"text\" }",
                &format!("status = \"text\", {long} = \"text\" }}"),
            ),
        ),
    ] {
        db.write_feed_config("", "", &table);
        db.write_feed(&[person("c", 1, Some("EU"), "new")]);
        let out = db.weir(&["init"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(field)
                && stderr.contains(&long)
                && stderr.contains("64 bytes")
                && stderr.contains("at most 63 bytes"),
            "{stderr}"
        );
    }
    let tables = db
        .count("SELECT count(*) FROM pg_class WHERE relname LIKE 'tttttttttt%'")
        .await;
    assert_eq!(tables, 0);
}

/// A target row edited by hand: verify names the partition, the key and the column
/// (in the report and in --json), and logs no value.
#[tokio::test(flavor = "multi_thread")]
async fn verify_names_the_keys_and_columns_that_differ() {
    let db = TestDb::new("tw_verify_keys").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "new"),
        person("c", 2, Some("EU"), "new"),
        person("c", 3, Some("US"), "new"),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute(
            "UPDATE analytics.people SET status = 'tampered' WHERE id = 2; \
             INSERT INTO analytics.people VALUES (9, 'EU', 'stray')",
        )
        .await
        .expect("damage");
    let out = verify_people(&db);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !text(&out.stderr).contains("tampered"),
        "{}",
        text(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let bad: Vec<&serde_json::Value> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["ok"] == false)
        .collect();
    assert_eq!(bad.len(), 1, "{rows}");
    assert_eq!(bad[0]["partition"], "EU");
    assert_eq!(bad[0]["keys_differing"], 2);
    assert_eq!(
        bad[0]["differences"],
        json!([
            {"key": "id = 2", "kind": "differs", "columns": ["status"]},
            {"key": "id = 9", "kind": "extra", "columns": []},
        ])
    );
    let report = db.weir(&[
        "verify",
        "--table",
        "analytics.people",
        "--from",
        " ",
        "--to",
        "~",
    ]);
    let stdout = text(&report.stdout);
    assert!(
        stdout.contains("id = 2: column status differs")
            && stdout.contains("id = 9: in the target, not in the output"),
        "{stdout}"
    );
}

/// A target table dropped and made again by `weir init` (its lineage describing rows it
/// no longer holds) gets every staged partition back at the next run, not only the
/// partition that changed, and a merge never lands on the empty table as if it held
/// them.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_table_made_anew_gets_every_staged_partition_back() {
    let db = TestDb::new("tw_made_anew").await;
    db.write_feed_config("", "", &people_table(false, ""));
    let lines: Vec<String> = (0..40)
        .map(|id| person("c", id, Some(["EU", "US", "APAC"][id as usize % 3]), "a"))
        .collect();
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute("DROP TABLE analytics.people")
        .await
        .expect("drop the target table");
    db.weir_ok(&["init"]);
    db.append_feed(&[person("u", 5, Some("APAC"), "b")]);
    db.weir_ok(&["run", "--once"]);
    let expected: Vec<(i64, Option<String>, String)> = (0..40)
        .map(|id| {
            (
                id,
                Some(["EU", "US", "APAC"][id as usize % 3].to_owned()),
                if id == 5 { "b" } else { "a" }.to_owned(),
            )
        })
        .collect();
    assert_eq!(people(&db).await, expected);
    let counted = db
        .count("SELECT sum(row_count)::bigint FROM weir.partitions WHERE target_table = 'analytics.people'")
        .await;
    assert_eq!(counted, 40, "lineage counts the rows the table holds");
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

/// `WEIR_TARGET_DSN` pointed at another database for a while, then back: the first
/// database gets the partitions the stage wrote to the other one since (an update
/// moving a row, a delete), not only those that change next; and one that changes
/// again meanwhile is replaced, not merged onto what the first database holds (the
/// changed keys the other write covered are no longer recorded).
#[tokio::test(flavor = "multi_thread")]
async fn a_target_left_behind_while_the_stage_wrote_another_is_brought_up_to_date() {
    let db = TestDb::new("tw_behind").await;
    let other = TestDb::new("tw_behind_other").await;
    db.write_feed_config("", "", &people_table(false, ""));
    let region = |id: i64| ["EU", "US", "APAC"][id as usize % 3];
    let lines: Vec<String> = (0..12)
        .map(|id| person("c", id, Some(region(id)), "a"))
        .collect();
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let elsewhere = |args: &[&str]| {
        let out = db
            .weir_command(args)
            .env("WEIR_TARGET_DSN", &other.dsn)
            .output()
            .expect("run weir");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    };
    elsewhere(&["init"]);
    elsewhere(&["run", "--once"]);
    // Row 1 moves from US to EU, row 3 (EU) is deleted: written to the other target.
    db.append_feed(&[person("u", 1, Some("EU"), "b"), person("d", 3, None, "")]);
    elsewhere(&["run", "--once"]);
    // EU changes again, staged by a run on the other database that writes nothing (a
    // flush interval of an hour) and is stopped: dirty when the first database is
    // written again.
    db.append_feed(&[person("u", 6, Some("EU"), "c")]);
    db.write_feed_config("", "flush_interval_ms = 3600000", &people_table(false, ""));
    let mut live = db
        .weir_command(&["run"])
        .env("WEIR_TARGET_DSN", &other.dsn)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn weir run");
    let feed_len = crate::harness::file_len(&db.path("feed.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let shown: serde_json::Value =
            serde_json::from_str(&db.weir_ok(&["checkpoint", "show", "--json"])).expect("json");
        if shown["checkpoint"]["position"].as_u64() == Some(feed_len) {
            break;
        }
        assert!(Instant::now() < deadline, "not staged: {shown}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    live.kill().expect("stop");
    live.wait().expect("reap");
    db.write_feed_config("", "", &people_table(false, ""));
    let out = db.weir_ok(&["run", "--once"]);
    assert!(out.contains("also wrote again 1 partitions"), "{out}");
    let expected: Vec<(i64, Option<String>, String)> = (0..12)
        .filter(|&id| id != 3)
        .map(|id| {
            let (r, s) = match id {
                1 => ("EU", "b"),
                6 => ("EU", "c"),
                _ => (region(id), "a"),
            };
            (id, Some(r.to_owned()), s.to_owned())
        })
        .collect();
    assert_eq!(people(&db).await, expected);
    let mode: String = db
        .client()
        .await
        .query_one(
            "SELECT write_mode FROM weir.partitions WHERE target_table = 'analytics.people' AND partition = 'EU'",
            &[],
        )
        .await
        .expect("lineage")
        .get(0);
    assert_eq!(mode, "replace");
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
    // Up to date now: nothing more to write.
    let out = db.weir_ok(&["run", "--once"]);
    assert!(!out.contains("also wrote again"), "{out}");
}

/// Native children of the last day PostgreSQL's `date` commonly holds (`9999-12-31`,
/// whose upper bound is in year 10000) are made with bounds PostgreSQL reads: they were
/// written `+10000-01-01`, refused, and the partition failed for good.
#[tokio::test(flavor = "multi_thread")]
async fn native_children_of_the_last_days_are_made() {
    let db = TestDb::new("tw_native_far").await;
    db.write_feed_config(
        "",
        "",
        &weir_core::fixtures::OrdersTable::jsonl("analytics.fact_orders")
            .extra("target_partitioning = \"native\"")
            .to_string(),
    );
    let line = |id: i64, day: &str| {
        let after = json!({"id": id, "customer": "c", "order_date": day, "amount": "1.00", "status": "new"});
        format!(
            "{}\n",
            json!({"op": "c", "before": null, "after": after, "source": {"schema": "public", "table": "orders"}})
        )
    };
    db.write_feed(&[line(1, "9999-12-31"), line(2, "2026-03-01")]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders WHERE order_date = '9999-12-31'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        2
    );
}

/// A trigger on the target that drops rows (BEFORE INSERT returning NULL) fails the
/// write, rolled back and named, where lineage used to count rows the table did not
/// hold; once it is gone the partition is written whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_trigger_that_drops_rows_fails_the_write() {
    let db = TestDb::new("tw_dropping_trigger").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "new"),
        person("c", 2, Some("EU"), "skip"),
    ]);
    db.weir_ok(&["init"]);
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE FUNCTION public.skip() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN IF NEW.status = 'skip' THEN RETURN NULL; END IF; RETURN NEW; END $$; \
             CREATE TRIGGER skip BEFORE INSERT ON analytics.people \
               FOR EACH ROW EXECUTE FUNCTION public.skip();",
        )
        .await
        .expect("trigger");
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("kept 1 of the 2 rows Weir copied into it"),
        "{stderr}"
    );
    assert!(people(&db).await.is_empty(), "rolled back");
    client
        .batch_execute("DROP TRIGGER skip ON analytics.people")
        .await
        .expect("drop trigger");
    db.weir_ok(&["run", "--once"]);
    assert_eq!(people(&db).await.len(), 2);
}

/// A target column retyped by a DBA while `weir run` streams stops that table's writes,
/// named, rather than let the binary COPY's values be read as the new type (an `int8`'s
/// bytes as a `float8`, a decimal rounded to a narrower scale).
#[tokio::test(flavor = "multi_thread")]
async fn a_target_column_retyped_while_running_stops_its_writes() {
    let db = TestDb::new("tw_retyped_live").await;
    db.write_feed_config("", "flush_interval_ms = 50", &people_table(false, ""));
    db.write_feed(&[person("c", 1, Some("EU"), "new")]);
    db.weir_ok(&["init"]);
    let log = db.path("run.log");
    let _run = db.spawn_live(&[], &log);
    db.wait_caught_up(60).await;
    db.client()
        .await
        .batch_execute("ALTER TABLE analytics.people ALTER COLUMN status TYPE varchar(40)")
        .await
        .expect("retype");
    db.append_feed(&[person("u", 1, Some("EU"), "shipped")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if logged.contains("the columns of the target table analytics.people changed") {
            break;
        }
        assert!(Instant::now() < deadline, "no stop was logged:\n{logged}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        people(&db).await,
        [(1, Some("EU".to_owned()), "new".to_owned())]
    );
}

/// A target table truncated by hand is written whole again at the next run, the
/// partitions with changes since included: merges trusted lineage's rows and wrote
/// only the changed keys, for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_target_table_is_written_whole_again() {
    let db = TestDb::new("tw_truncated").await;
    db.write_feed_config("", "", &people_table(false, "write = \"merge\""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "new"),
        person("c", 2, Some("US"), "new"),
        person("c", 3, Some("EU"), "new"),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute("TRUNCATE analytics.people")
        .await
        .expect("truncate");
    db.append_feed(&[person("u", 1, Some("EU"), "shipped")]);
    let out = db.weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("holds no rows while its lineage recorded rows"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        people(&db).await,
        [
            (1, Some("EU".to_owned()), "shipped".to_owned()),
            (2, Some("US".to_owned()), "new".to_owned()),
            (3, Some("EU".to_owned()), "new".to_owned())
        ]
    );
}

/// A second pipeline (another source table, another stage) configured into a target
/// table another one writes is refused at `init` (and at every start), naming the other
/// source, before it makes anything: its writes replaced the first one's partitions,
/// silently.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_pipeline_into_the_same_target_table_is_refused() {
    let db = TestDb::new("tw_two_pipelines").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[person("c", 1, Some("EU"), "new")]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // The other pipeline: its own folder, feed and stage, `public.customers` into the
    // same `analytics.people`.
    let other = db.path("other");
    std::fs::create_dir(&other).expect("dir");
    let config = std::fs::read_to_string(db.config_path())
        .expect("config")
        .replace(
            "source = \"public.people\"",
            "source = \"public.customers\"",
        );
    std::fs::write(other.join("weir.toml"), config).expect("config");
    std::fs::write(
        other.join("feed.jsonl"),
        person("c", 2, Some("EU"), "other").replace("\"people\"", "\"customers\""),
    )
    .expect("feed");
    let weir_other = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("--config")
            .arg(other.join("weir.toml"))
            .args(args)
            .env("WEIR_TARGET_DSN", &db.dsn)
            .output()
            .expect("weir")
    };
    let out = weir_other(&["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds 1 partitions another pipeline wrote, from public.people"),
        "{stderr}"
    );
    // Refused before it made anything (its stage, a slot of a PostgreSQL source).
    assert!(!other.join("stage").exists());
    assert_eq!(
        people(&db).await,
        [(1, Some("EU".to_owned()), "new".to_owned())]
    );
}

/// Two pipelines into one target table, the second made while the first had written
/// nothing: the target is the first's from its `init` (its claim), so the second's
/// `init` is refused before either wrote a row. Taken over while the first runs live,
/// the first's next write is refused under the partition's lock (its claim read in the
/// write's transaction), and nothing of it replaces the second's rows.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_another_pipeline_wrote_is_not_replaced() {
    let db = TestDb::new("tw_two_live").await;
    db.write_feed_config("", "flush_interval_ms = 10", &people_table(false, ""));
    db.write_feed(&[]);
    let other = db.path("other");
    std::fs::create_dir(&other).expect("dir");
    let config = std::fs::read_to_string(db.config_path())
        .expect("config")
        .replace(
            "source = \"public.people\"",
            "source = \"public.customers\"",
        );
    std::fs::write(other.join("weir.toml"), config).expect("config");
    std::fs::write(other.join("feed.jsonl"), "").expect("feed");
    let weir_other = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("--config")
            .arg(other.join("weir.toml"))
            .args(args)
            .env("WEIR_TARGET_DSN", &db.dsn);
        cmd
    };
    db.weir_ok(&["init"]);
    let out = weir_other(&["init"]).output().expect("init");
    assert!(
        !out.status.success()
            && text(&out.stderr).contains("is written by another pipeline: jsonl:"),
        "{}",
        text(&out.stderr)
    );
    // The first runs live (its start claimed the table again), having written nothing.
    let log = db.path("live.log");
    let _first = db.spawn_live(&[], &log);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("memory budget")
    {
        assert!(Instant::now() < deadline, "the first did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Taken over while the first runs; the second writes its row.
    let out = weir_other(&["init", "--take-over"]).output().expect("init");
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(
        other.join("feed.jsonl"),
        person("c", 2, Some("US"), "second").replace("\"people\"", "\"customers\""),
    )
    .expect("feed");
    let out = weir_other(&["run", "--once"]).output().expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The first's next write is refused, at the write.
    db.append_feed(&[person("c", 3, Some("US"), "first")]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        if logged.contains("is written by another pipeline: jsonl:") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no refusal was logged:\n{logged}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        people(&db)
            .await
            .contains(&(2, Some("US".to_owned()), "second".to_owned())),
        "{:?}",
        people(&db).await
    );
    assert!(
        !people(&db).await.iter().any(|(id, _, _)| *id == 3),
        "{:?}",
        people(&db).await
    );
}

/// A feed's table renamed in the config (`source = "public.persons"` where it was
/// `public.people`), the same stage and target: refused, since the new table's writes
/// would replace some of the old one's partitions and leave the rest; the way out the
/// error gives works.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_renamed_in_the_config_onto_its_old_target_is_refused_until_emptied() {
    let db = TestDb::new("tw_renamed_source").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "a"),
        person("c", 2, Some("US"), "a"),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.write_feed_config(
        "",
        "",
        &people_table(false, "").replace("public.people", "public.persons"),
    );
    db.append_feed(&[person("c", 3, Some("EU"), "b").replace("\"people\"", "\"persons\"")]);
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("another pipeline wrote, from public.people, a table of this stage no longer in the config")
            && stderr.contains("TRUNCATE"),
        "{stderr}"
    );
    assert_eq!(people(&db).await.len(), 2, "nothing written");
    db.client()
        .await
        .batch_execute(
            "TRUNCATE analytics.people; DELETE FROM weir.partitions WHERE target_table = 'analytics.people' AND source_table = 'public.people'",
        )
        .await
        .expect("the way out");
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        people(&db).await,
        [(3, Some("EU".to_owned()), "b".to_owned())]
    );
}

/// A `numeric` column narrowed after rows were staged (the config and the target
/// altered as the mismatch error says): a staged value with more places than the new
/// scale fails its partition, named, instead of being rounded by the target; the
/// partitions whose values fit are written.
#[tokio::test(flavor = "multi_thread")]
async fn a_staged_decimal_a_narrowed_column_would_round_fails_its_partition() {
    let db = TestDb::new("tw_narrowed").await;
    let table = |ty: &str| {
        format!(
            "[[table]]\nsource = \"public.x\"\ntarget = \"analytics.x\"\nkey = [\"id\"]\npartition_by = \"d\"\ngrain = \"day\"\ncolumns = {{ id = \"bigint\", d = \"date\", amount = \"{ty}\" }}\n"
        )
    };
    let line = |id: i64, d: &str, amount: &str| {
        format!(
            "{}\n",
            json!({"op": "c", "before": null, "after": {"id": id, "d": d, "amount": amount}, "source": {"schema": "public", "table": "x"}})
        )
    };
    db.write_feed_config("", "", &table("numeric(12,2)"));
    db.write_feed(&[line(1, "2026-03-01", "1.50"), line(2, "2026-03-02", "2.25")]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.write_feed_config("", "", &table("numeric(12,1)"));
    db.client()
        .await
        .batch_execute("ALTER TABLE analytics.x ALTER COLUMN amount TYPE numeric(12,1) USING amount::numeric(12,2)")
        .await
        .expect("alter");
    db.append_feed(&[line(3, "2026-03-02", "3.3"), line(4, "2026-03-01", "4.5")]);
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("partition 2026-03-02 of analytics.x: a value of column `amount` has 2 decimal places, and the column keeps 1"),
        "{stderr}"
    );
    // The altered target rounded 2.25 itself; Weir did not write the partition again.
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.x WHERE d = '2026-03-02'")
            .await,
        1
    );
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.x WHERE d = '2026-03-01'")
            .await,
        2
    );
}

/// Target tables no partition write can keep right are refused by `init` (exit 2),
/// named with the reason: a view; a table a foreign key references; a key column under
/// a nondeterministic collation; the DEFAULT child of another configured native
/// target.
#[tokio::test(flavor = "multi_thread")]
async fn targets_a_partition_write_cannot_keep_right_are_refused() {
    let db = TestDb::new("tw_unsafe_targets").await;
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE SCHEMA u;
             CREATE TABLE u.base (id bigint, region text, status text);
             CREATE VIEW u.v AS SELECT * FROM u.base;
             CREATE TABLE u.referenced (id bigint PRIMARY KEY, region text, status text);
             CREATE TABLE u.child_rows (id bigint REFERENCES u.referenced (id) ON DELETE CASCADE);
             CREATE TABLE u.by_status (id bigint, region text, status text) PARTITION BY LIST (status);",
        )
        .await
        .expect("estate");
    let people = |target: &str| people_table(false, "").replace("analytics.people", target);
    let refused = |tables: String, want: &'static str| {
        db.write_feed_config("", "", &tables);
        db.write_feed(&[person("c", 1, Some("EU"), "a")]);
        let out = db.weir(&["init"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert!(stderr.contains(want), "want `{want}` in {stderr}");
    };
    refused(people("u.v"), "u.v: it is not a table");
    refused(
        people_table(true, "").replace("analytics.people", "u.by_status"),
        "u.by_status: it is partitioned by status, not by the partition column `region`",
    );
    refused(
        people("u.referenced"),
        "foreign key child_rows_id_fkey of u.child_rows references it",
    );
    if client
        .batch_execute(
            "CREATE COLLATION u.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
             CREATE TABLE u.ci_people (id bigint, region text COLLATE u.ci, status text);",
        )
        .await
        .is_ok()
    {
        refused(people("u.ci_people"), "has a nondeterministic collation");
    }
    let native = weir_core::fixtures::OrdersTable::jsonl("u.orders")
        .extra("target_partitioning = \"native\"")
        .to_string();
    let child = weir_core::fixtures::OrdersTable::jsonl("u.orders_p_default")
        .source("public.returns")
        .to_string();
    refused(
        format!("{native}\n{child}"),
        "u.orders_p_default is a partition of u.orders, the target of public.orders",
    );
}

/// `weir status` lists the last writes of this config's tables only (another pipeline
/// writes the same database), and `--table` with a bare name that names both a source
/// (`public.NAME`) and another table's target is refused, naming both.
#[tokio::test(flavor = "multi_thread")]
async fn status_lists_its_own_writes_and_a_bare_table_name_is_not_guessed() {
    let db = TestDb::new("tw_own_writes").await;
    let returns = people_table(false, "")
        .replace("public.people", "public.returns")
        .replace("analytics.people", "bare.people");
    db.write_feed_config("", "", &format!("{}\n{returns}", people_table(false, "")));
    db.write_feed(&[person("c", 1, Some("EU"), "a")]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    db.client()
        .await
        .batch_execute(
            "INSERT INTO weir.partitions (target_table, partition, source_table, stage_generation, source_position, transform, row_count, checksum, written_at) \
             VALUES ('other.pipeline', 'p', 'public.other', 1, 1, 'identity', 1, '', now() + interval '1 day')",
        )
        .await
        .expect("another pipeline's lineage");
    let status: serde_json::Value =
        serde_json::from_str(&db.weir_ok(&["status", "--json"])).expect("json");
    let tables: Vec<&str> = status["last_writes"]
        .as_array()
        .expect("last writes")
        .iter()
        .filter_map(|w| w["target_table"].as_str())
        .collect();
    assert_eq!(tables, ["analytics.people"], "{status}");
    let out = db.weir(&["verify", "--table", "people", "--from", " ", "--to", "~"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("table `people` names several tables (the source public.people, the target bare.people of public.returns)"),
        "{stderr}"
    );
    db.weir_ok(&[
        "verify",
        "--table",
        "public.people",
        "--from",
        " ",
        "--to",
        "~",
    ]);
}

/// A native target whose table a reader holds open: creating a new partition's child
/// (ACCESS EXCLUSIVE on the table) gives up after `lock_timeout_ms`, the warning names
/// the reader, and the write goes on once the reader ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_native_child_held_off_by_a_reader_names_it_and_is_retried() {
    let db = TestDb::new("tw_child_reader").await;
    db.write_feed_config("", "flush_interval_ms = 100", &people_table(true, ""));
    let (log, _run) = live_with_short_lock_timeout(&db).await;
    let reader = db.client().await;
    reader
        .batch_execute("BEGIN; SELECT count(*) FROM analytics.people")
        .await
        .expect("a reader");
    let pid: i32 = reader
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    db.append_feed(&[person("c", 2, Some("APAC"), "new")]);
    wait_logged(&log, "creating the partition's child waited longer", pid).await;
    reader
        .batch_execute("COMMIT")
        .await
        .expect("end the reader");
    db.wait_caught_up(60).await;
    assert_eq!(people(&db).await.len(), 2);
}

/// A backup of the people target: its rows and Weir's lineage, as a restore brings
/// them back ([`RESTORE`]).
const BACKUP: &str = "CREATE TABLE public.people_backup AS SELECT * FROM analytics.people;
     CREATE TABLE public.lineage_backup AS SELECT * FROM weir.partitions;";
const RESTORE: &str = "BEGIN;
     DELETE FROM analytics.people; INSERT INTO analytics.people SELECT * FROM public.people_backup;
     DELETE FROM weir.partitions; INSERT INTO weir.partitions SELECT * FROM public.lineage_backup;
     COMMIT;";

/// The target restored from a backup taken before a new stage (of the same feed)
/// wrote it: lineage lists the old stage's writes, the rows are the old stage's. The
/// next run writes again every partition the new stage holds rows of that lineage
/// lists as another stage's (before: none, exit 0, `status` clean, the backup's rows
/// for good).
#[tokio::test(flavor = "multi_thread")]
async fn a_target_restored_to_another_stages_writes_is_written_again() {
    let db = TestDb::new("tw_restored_other_stage").await;
    db.write_feed_config("", "", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "a"),
        person("c", 2, Some("US"), "a"),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // The backup: the target's rows and lineage as stage A left them.
    let client = db.client().await;
    client.batch_execute(BACKUP).await.expect("backup");
    // Later changes, then a new stage of the same feed (the documented rebuild of a
    // damaged stage) writes the later state.
    db.append_feed(&[
        person("u", 1, Some("EU"), "b"),
        person("c", 3, Some("US"), "a"),
    ]);
    let config = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        config.replace("path = \"stage\"", "path = \"stage-b\""),
    )
    .expect("config");
    db.weir_ok(&["init", "--take-over"]);
    db.weir_ok(&["run", "--once"]);
    // The target restored from the backup.
    client.batch_execute(RESTORE).await.expect("restore");
    let out = db.weir_ok(&["run", "--once"]);
    assert!(out.contains("also wrote again 2 partitions"), "{out}");
    assert_eq!(
        people(&db).await,
        vec![
            (1, Some("EU".to_owned()), "b".to_owned()),
            (2, Some("US".to_owned()), "a".to_owned()),
            (3, Some("US".to_owned()), "a".to_owned()),
        ]
    );
    let verify = verify_people(&db);
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

/// `(id, region, status)` of a people row.
fn row(id: i64, region: &str, status: &str) -> (i64, Option<String>, String) {
    (id, Some(region.to_owned()), status.to_owned())
}

/// Waits until the people target holds `want`; fails with the live run's `log`.
async fn wait_people(db: &TestDb, log: &std::path::Path, want: Vec<(i64, Option<String>, String)>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = people(db).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{got:?}, want {want:?}: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A live run of the people feed (EU and US written at `a`, then backed up with
/// [`BACKUP`], then both written at `b`): its log, the run, and a target client.
async fn live_backed_up(
    db: &TestDb,
) -> (
    std::path::PathBuf,
    crate::harness::Reaped,
    tokio_postgres::Client,
) {
    db.write_feed_config("", "flush_interval_ms = 10", &people_table(false, ""));
    db.write_feed(&[
        person("c", 1, Some("EU"), "a"),
        person("c", 2, Some("US"), "a"),
    ]);
    db.weir_ok(&["init"]);
    let log = db.path("live.log");
    let run = db.spawn_live(&[], &log);
    let client = db.client().await;
    wait_people(db, &log, vec![row(1, "EU", "a"), row(2, "US", "a")]).await;
    client.batch_execute(BACKUP).await.expect("backup");
    db.append_feed(&[
        person("u", 1, Some("EU"), "b"),
        person("u", 2, Some("US"), "b"),
    ]);
    wait_people(db, &log, vec![row(1, "EU", "b"), row(2, "US", "b")]).await;
    (log, run, client)
}

/// The target restored from a backup while `weir run` runs: once a write finds its
/// connection gone and makes it again, the run reads the target's lineage again (as at
/// its start) and writes again the partitions the restore took back, not only those
/// that change (before: they kept the backup's rows until a restart, `status` clean).
#[tokio::test(flavor = "multi_thread")]
async fn a_target_restored_under_a_live_run_is_brought_back() {
    let db = TestDb::new("tw_restored_live").await;
    let (log, _run, client) = live_backed_up(&db).await;
    let wait = |want| wait_people(&db, &log, want);
    // Restored, and the run's connections cut, as a restore's restart cuts them.
    client
        .batch_execute(
            &format!(
                "{RESTORE} SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend';"
            ),
        )
        .await
        .expect("restore");
    // A change to EU only: US, which does not change, comes back too.
    db.append_feed(&[person("c", 3, Some("EU"), "a")]);
    wait(vec![
        row(1, "EU", "b"),
        row(2, "US", "b"),
        row(3, "EU", "a"),
    ])
    .await;
}

/// The same, with the restore's restart cutting only the connection of a write in
/// flight (the pooled ones stay open, so no later write finds one closed): the write
/// that lost its connection is what tells the run (before: nothing did, and the
/// partitions the restore took back stayed so, `status` clean).
#[tokio::test(flavor = "multi_thread")]
async fn a_target_restored_under_a_write_in_flight_is_brought_back() {
    let db = TestDb::new("tw_restored_in_flight").await;
    let (log, _run, client) = live_backed_up(&db).await;
    let wait = |want| wait_people(&db, &log, want);
    // A write held on a lock; the restore made under it, then the write's connection cut.
    let mut holder = db.client().await;
    let tx = holder.transaction().await.expect("begin");
    tx.batch_execute("LOCK TABLE analytics.people IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    db.append_feed(&[person("c", 3, Some("EU"), "a")]);
    let waiting = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                   AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()";
    let deadline = Instant::now() + Duration::from_secs(30);
    let pid: i32 = loop {
        if let Some(row) = client.query_opt(waiting, &[]).await.expect("waiting") {
            break row.get(0);
        }
        assert!(Instant::now() < deadline, "no write waited on the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tx.batch_execute(&RESTORE.replace("BEGIN;", "").replace("COMMIT;", ""))
        .await
        .expect("restore");
    tx.query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .expect("cut the write's connection");
    tx.commit().await.expect("commit");
    // EU's write is made again; US, which does not change, comes back too.
    wait(vec![
        row(1, "EU", "b"),
        row(2, "US", "b"),
        row(3, "EU", "a"),
    ])
    .await;
}

/// A table taken out of the config while it has partitions left to write: the other
/// tables are written as before, its marks wait (before: every write round stopped at
/// `table … is not in the config`, for the whole pipeline, at every start).
#[tokio::test(flavor = "multi_thread")]
async fn a_table_taken_out_with_partitions_left_to_write_does_not_stop_the_others() {
    let db = TestDb::new("tw_removed_dirty").await;
    let staff = people_table(false, "")
        .replace("public.people", "public.staff")
        .replace("analytics.people", "analytics.staff");
    db.write_feed_config("", "", &format!("{}{staff}", people_table(false, "")));
    let staff_line = |id: i64| {
        person("c", id, Some("EU"), "s").replace("\"table\":\"people\"", "\"table\":\"staff\"")
    };
    db.write_feed(&[person("c", 1, Some("EU"), "a"), staff_line(7)]);
    db.weir_ok(&["init"]);
    // Staff's partition cannot be written (a constraint its row breaks): left dirty.
    db.client()
        .await
        .batch_execute("ALTER TABLE analytics.staff ADD CONSTRAINT no_s CHECK (status <> 's')")
        .await
        .expect("constraint");
    let out = db.weir(&["run", "--once"]);
    assert!(!out.status.success(), "{}", text(&out.stderr));
    // Staff out of the config; people's changes go on.
    db.write_feed_config("", "", &people_table(false, ""));
    db.append_feed(&[person("c", 2, Some("US"), "a")]);
    let out = db.weir(&["run", "--once"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        people(&db).await,
        vec![
            (1, Some("EU".to_owned()), "a".to_owned()),
            (2, Some("US".to_owned()), "a".to_owned()),
        ]
    );
}

/// `weir status` with more dirty partitions than it lists: the count per table first
/// (which table is behind), then the oldest partitions.
#[tokio::test(flavor = "multi_thread")]
async fn status_counts_dirty_partitions_per_table_past_fifty() {
    let db = TestDb::new("tw_status_many_dirty").await;
    db.write_feed_config("", "", &people_table(false, ""));
    let lines: Vec<String> = (0..60)
        .map(|id| person("c", id, Some(&format!("r{id:02}")), "s"))
        .collect();
    db.write_feed(&lines);
    db.weir_ok(&["init"]);
    // No partition can be written (a constraint every row breaks): all stay dirty.
    db.client()
        .await
        .batch_execute("ALTER TABLE analytics.people ADD CONSTRAINT no_s CHECK (status <> 's')")
        .await
        .expect("constraint");
    let out = db.weir(&["run", "--once"]);
    assert!(!out.status.success(), "{}", text(&out.stderr));
    let status = db.weir_ok(&["status"]);
    assert!(
        status.contains("dirty:      60 partitions")
            && status.contains("  public.people: 60 partitions")
            && status.contains("  oldest:\n  public.people r00 "),
        "{status}"
    );
}
