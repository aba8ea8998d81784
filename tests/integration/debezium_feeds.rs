//! Debezium feeds as Debezium writes them, and feeds that change under Weir: a rotated
//! file is refused rather than resumed at another file's offset; Debezium's
//! placeholder for an unchanged TOAST value keeps the staged value; tombstones and
//! transaction metadata pass; a TRUNCATE follows `on_truncate`; live stdin is staged
//! while its producer pauses.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{Order, TestDb, envelope, text};

fn order(id: i64, day: &str, customer: &str) -> Order {
    Order {
        id,
        customer: customer.into(),
        order_date: Some(day.into()),
        amount: "1.00".into(),
        status: "new".into(),
    }
}

fn orders(ids: std::ops::RangeInclusive<i64>) -> Vec<String> {
    ids.map(|id| envelope("c", None, None, Some(&order(id, "2026-03-01", "c"))))
        .collect()
}

/// Points the config's feed at stdin (`path = "-"`).
fn read_stdin(db: &TestDb) {
    let config = std::fs::read_to_string(db.config_path()).expect("config");
    std::fs::write(
        db.config_path(),
        config.replace("path = \"feed.jsonl\"", "path = \"-\""),
    )
    .expect("config");
}

fn verify(db: &TestDb) {
    let out = db.weir_ok(&[
        "verify",
        "--table",
        "analytics.fact_orders",
        "--from",
        "2026-03-01",
        "--to",
        "2026-03-03",
    ]);
    assert!(out.contains("verify passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_feed_file_is_refused_not_resumed_at_its_offset() {
    let db = TestDb::new("feed_rotated").await;
    db.write_config("", "", "");
    db.write_feed(&orders(1..=3));
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let count = "SELECT count(*) FROM analytics.fact_orders";
    assert_eq!(db.count(count).await, 3);
    // Rotated: the file now holds other, more records (longer than the position).
    std::fs::rename(db.path("feed.jsonl"), db.path("feed.jsonl.1")).expect("rotate");
    db.write_feed(&orders(4..=9));
    let out = db.weir(&["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not the feed the stage was filled from")
            && stderr.contains("append new records to it"),
        "{stderr}"
    );
    assert_eq!(db.count(count).await, 3);
    // The new records appended to the original file: all of them arrive.
    std::fs::rename(db.path("feed.jsonl.1"), db.path("feed.jsonl")).expect("restore");
    db.append_feed(&orders(4..=9));
    db.weir_ok(&["run", "--once"]);
    assert_eq!(db.count(count).await, 9);
    verify(&db);
}

#[tokio::test(flavor = "multi_thread")]
async fn debeziums_placeholders_tombstones_metadata_and_truncates() {
    let db = TestDb::new("feed_debezium_forms").await;
    db.write_config("", "on_truncate = \"apply\"", "");
    let long = "x".repeat(5000);
    let first = order(1, "2026-03-01", &long);
    let mut unavailable = first.clone();
    unavailable.customer = "__debezium_unavailable_value".into();
    unavailable.status = "paid".into();
    let second = order(2, "2026-03-02", "b");
    db.write_feed(&[
        "{\"status\":\"BEGIN\",\"id\":\"7\",\"event_count\":null,\"ts_ms\":1}\n".to_owned(),
        envelope("c", Some(7), None, Some(&first)),
        envelope("c", Some(7), None, Some(&second)),
        "{\"status\":\"END\",\"id\":\"7\",\"event_count\":2,\"ts_ms\":1}\n".to_owned(),
        envelope("u", Some(8), None, Some(&unavailable)),
        envelope("d", Some(9), Some(&second), None),
        "null\n".to_owned(),
    ]);
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT id, customer, status FROM analytics.fact_orders ORDER BY id",
            &[],
        )
        .await
        .expect("rows");
    let rows: Vec<(i64, String, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(rows, [(1, long, "paid".to_owned())]);
    verify(&db);
    // A TRUNCATE, with the table's on_truncate = "apply": its rows go.
    db.append_feed(&[
        "{\"op\":\"t\",\"before\":null,\"after\":null,\"source\":{\"schema\":\"public\",\"table\":\"orders\",\"txId\":10},\"ts_ms\":1}\n".to_owned(),
    ]);
    db.weir_ok(&["run", "--once"]);
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn live_stdin_is_staged_and_written_while_its_producer_pauses() {
    let db = TestDb::new("feed_stdin_live").await;
    db.write_config("", "", "flush_interval_ms = 10");
    read_stdin(&db);
    db.weir_ok(&["init"]);
    let mut child = db
        .weir_command(&["run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir run");
    let mut stdin = child.stdin.take().expect("stdin");
    let count = "SELECT count(*) FROM analytics.fact_orders";
    for (i, line) in orders(1..=3).into_iter().enumerate() {
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.flush().expect("flush");
        // The producer pauses, stdin open: what it sent is written meanwhile.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut written = 0;
        while Instant::now() < deadline {
            written = db
                .client()
                .await
                .query_one(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'analytics'",
                    &[],
                )
                .await
                .map(|r| r.get::<_, i64>(0))
                .unwrap_or(0);
            if written > 0 {
                written = db.count(count).await;
                if written == i as i64 + 1 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            written,
            i as i64 + 1,
            "line {} not written while stdin pauses",
            i + 1
        );
    }
    drop(stdin);
    let out = child
        .wait_with_output()
        .expect("weir run ends at the end of stdin");
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_stops_when_its_file_is_rotated_away() {
    let db = TestDb::new("feed_rotated_live").await;
    db.write_config("", "", "flush_interval_ms = 10");
    db.write_feed(&orders(1..=3));
    db.weir_ok(&["init"]);
    let mut child = db
        .weir_command(&["run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir run");
    let count = "SELECT count(*) FROM analytics.fact_orders";
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.count(count).await < 3 {
        assert!(
            Instant::now() < deadline,
            "the first lines were not written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Rotated: the path now names no file for a while (rename, then create, as
    // logrotate does), then a new file; the writer appends its last records to the old
    // one meanwhile. The new file's records would never be read by the tail of the old
    // one, so the run stops, having read the old one to its end.
    std::fs::rename(db.path("feed.jsonl"), db.path("feed.jsonl.1")).expect("rotate");
    std::fs::OpenOptions::new()
        .append(true)
        .open(db.path("feed.jsonl.1"))
        .and_then(|mut f| f.write_all(orders(4..=5).concat().as_bytes()))
        .expect("append to the rotated file");
    tokio::time::sleep(Duration::from_millis(700)).await;
    db.write_feed(&orders(6..=9));
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "weir run went on tailing the old file"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = child.wait_with_output().expect("output");
    let stderr = text(&out.stderr);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("was replaced while Weir read it"),
        "{stderr}"
    );
    let status = db.weir(&["status"]);
    assert_eq!(
        db.count(count).await,
        5,
        "the rotated file's records, to its end, and none of the new file's: {stderr} {}",
        text(&status.stdout)
    );
}

/// A followed file cut in place (same inode: `: > feed`, logrotate's copytruncate),
/// then written again, shorter or longer than what was read: the run stops before
/// reading on at its old offset, which skipped the new content's first records.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_stops_when_its_file_is_cut_in_place() {
    for (case, new) in [("shorter", 4..=4), ("longer", 4..=9)] {
        let db = TestDb::new(&format!("feed_cut_{case}")).await;
        db.write_config("", "", "flush_interval_ms = 10");
        db.write_feed(&orders(1..=3));
        db.weir_ok(&["init"]);
        let mut child = db
            .weir_command(&["run"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn weir run");
        let count = "SELECT count(*) FROM analytics.fact_orders";
        let deadline = Instant::now() + Duration::from_secs(30);
        while db.count(count).await < 3 {
            assert!(
                Instant::now() < deadline,
                "the first lines were not written"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Cut and written again at once, as one `>` redirection does.
        let lines: String = orders(new).concat();
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(db.path("feed.jsonl"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, lines.as_bytes()))
            .expect("cut the feed in place");
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{case}: weir run read on at its old offset"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let out = child.wait_with_output().expect("output");
        let stderr = text(&out.stderr);
        assert_eq!(status.code(), Some(1), "{case}: {stderr}");
        assert!(
            stderr.contains("was cut short or rewritten in place"),
            "{case}: {stderr}"
        );
        assert_eq!(
            db.count(count).await,
            3,
            "{case}: nothing of the new content"
        );
    }
}

/// `weir run --once` on stdin, the feed piped in.
fn run_on_stdin(db: &TestDb, feed: &[u8]) -> std::process::Output {
    let mut child = db
        .weir_command(&["run", "--once"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir run");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(feed).expect("write");
    drop(stdin);
    child.wait_with_output().expect("weir run")
}

/// A producer that dies in the middle of a line, under `on_bad_record = "dead-letter"`:
/// the cut line is not a bad record (whose offset would sit inside the line the next
/// pipe gives whole), it and its transaction are not staged, and the feed piped again
/// from its first line stages it whole. Before: the line's two halves were two dead
/// letters and its row never reached the target, `verify` passing. An empty stdin
/// writes what is staged (before: refused as a feed shorter than the stage's position).
#[tokio::test(flavor = "multi_thread")]
async fn stdin_cut_in_the_middle_of_a_line_is_read_whole_when_piped_again() {
    let db = TestDb::new("feed_stdin_cut").await;
    db.write_config("on_bad_record = \"dead-letter\"", "", "");
    read_stdin(&db);
    db.weir_ok(&["init"]);
    let feed = orders(1..=4).concat();
    let cut = orders(1..=2).concat().len() + 40;
    let out = run_on_stdin(&db, &feed.as_bytes()[..cut]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stdin ended in the middle of line 3"),
        "{stderr}"
    );
    // Nothing piped: what is staged is written, without the feed.
    let out = run_on_stdin(&db, b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let count = "SELECT count(*) FROM analytics.fact_orders";
    assert_eq!(db.count(count).await, 2);
    let out = run_on_stdin(&db, feed.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(db.count(count).await, 4);
    assert_eq!(
        db.count("SELECT count(*) FROM weir.dead_letter").await,
        0,
        "no dead letters"
    );
    verify(&db);
}

/// A producer that never pauses for 50 ms: what it sent is staged and written within
/// about 100 ms of being read, while stdin is still open (before: nothing until 1,024
/// transactions had been read).
#[tokio::test(flavor = "multi_thread")]
async fn live_stdin_from_a_steady_producer_is_written_while_it_sends() {
    let db = TestDb::new("feed_stdin_steady").await;
    db.write_config("", "", "flush_interval_ms = 10");
    read_stdin(&db);
    db.weir_ok(&["init"]);
    let mut child = db
        .weir_command(&["run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir run");
    let mut stdin = child.stdin.take().expect("stdin");
    let lines = orders(1..=1000);
    let producer = std::thread::spawn(move || {
        for line in lines {
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
            let _ = stdin.flush();
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let count = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'analytics' AND table_name = 'fact_orders'";
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut written = 0;
    while Instant::now() < deadline && written == 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if db.count(count).await > 0 {
            written = db.count("SELECT count(*) FROM analytics.fact_orders").await;
        }
    }
    assert!(
        written > 0 && !producer.is_finished(),
        "nothing written while the producer sends ({written} rows)"
    );
    producer.join().expect("producer");
    let out = child.wait_with_output().expect("weir run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        db.count("SELECT count(*) FROM analytics.fact_orders").await,
        1000
    );
}

/// SIGTERM while `weir run` starts (before its pipeline is open) is a clean stop: exit
/// 0, a summary, `run ended` (before: the signal's default action killed it, as a
/// supervisor's stop during a slow start looked like a crash).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_the_run_starts_is_a_clean_stop() {
    use std::io::BufRead;
    let db = TestDb::new("feed_sigterm_start").await;
    db.write_config("", "", "");
    db.write_feed(&orders(1..=3));
    db.weir_ok(&["init"]);
    let mut child = db
        .weir_command(&["run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn weir run");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut log = String::new();
    while !log.contains("memory budget") {
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("read the log") == 0 {
            break;
        }
        log.push_str(&line);
    }
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).expect("the log");
    log.push_str(&rest);
    let out = child.wait_with_output().expect("weir run");
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("run ended"), "{log}");
    assert!(
        text(&out.stdout).contains("staged"),
        "{}",
        text(&out.stdout)
    );
}
