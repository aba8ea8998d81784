//! `weir checkpoint show | export | import | check` through the real binary: a stage
//! moved to another machine goes on exactly where it was; damaged files and damaged
//! stages are refused loudly; a killed export never leaves a truncated file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use weir::config::Config;
use weir::partition::Partition;
use weir::source::{Op, Transaction};
use weir::stage::{Stage, StageChange, StagedRow, encode_key};
use weir::value::Value;

use crate::harness::{
    TestDb, Workload, assert_target_matches, file_len, lineage, orders_workload, text,
};

/// Stdout and stderr of a command, for messages.
fn output_text(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// Runs `weir` and requires exit code 1 (a runtime failure); returns its output.
fn weir_fails(db: &TestDb, args: &[&str]) -> String {
    let out = db.weir(args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "weir {args:?} should fail with exit code 1: {}",
        output_text(&out)
    );
    output_text(&out)
}

fn show_json(db: &TestDb) -> serde_json::Value {
    serde_json::from_str(&db.weir_ok(&["checkpoint", "show", "--json"])).expect("show json")
}

/// Points `db`'s config at another feed file (absolute), so two stages of one feed
/// share its source id.
fn read_feed_of(db: &TestDb, feed: &Path) {
    let config = std::fs::read_to_string(db.config_path()).expect("read config");
    let patched = config.replace(
        "path = \"feed.jsonl\"",
        &format!("path = \"{}\"", feed.display()),
    );
    assert_ne!(config, patched);
    std::fs::write(db.config_path(), patched).expect("write config");
}

/// A `weir` command with the config `config` (as spelled) and `db`'s target.
fn weir_command_with(db: &TestDb, config: &std::ffi::OsStr, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env("WEIR_TARGET_DSN", &db.dsn)
        .env("RUST_LOG", "info");
    command
}

/// `weir` with another config file in `db`'s folder.
fn weir_with(db: &TestDb, config: &Path, args: &[&str]) -> Output {
    weir_command_with(db, config.as_os_str(), args)
        .output()
        .expect("run weir")
}

/// A copy of `db`'s config whose stage is `stage` (relative to the config).
fn config_with_stage(db: &TestDb, name: &str, stage: &str) -> PathBuf {
    let config = std::fs::read_to_string(db.config_path()).expect("read config");
    let patched = config.replace("path = \"stage\"", &format!("path = \"{stage}\""));
    assert_ne!(config, patched);
    let path = db.path(name);
    std::fs::write(&path, patched).expect("write config");
    path
}

/// The transaction id of a feed line.
fn tx_of(line: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(line).expect("the test's feed is JSON");
    v["source"]["txId"].as_u64()
}

/// Splits feed lines at the transaction boundary nearest the middle.
fn split_at_transaction(lines: &[String]) -> (&[String], &[String]) {
    let mut at = lines.len() / 2;
    while at < lines.len() && tx_of(&lines[at]) == tx_of(&lines[at - 1]) {
        at += 1;
    }
    lines.split_at(at)
}

fn transactions(lines: &[String]) -> usize {
    let mut n = 0;
    let mut last = None;
    for line in lines {
        let tx = tx_of(line);
        if tx.is_none() || tx != last {
            n += 1;
        }
        last = tx;
    }
    n
}

fn sst_files(stage: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(stage)
        .expect("list the stage")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    files.sort_by_key(|p| std::cmp::Reverse(file_len(p)));
    files
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_imported_stage_goes_on_with_the_position_and_dirty_partitions_it_carried() {
    let a = TestDb::new("ckpt_carry_a").await;
    let (lines, model) = orders_workload(41, 3000, 20);
    let (first, second) = split_at_transaction(&lines);
    a.write_feed(first);
    // A live run with a flush interval of an hour stages the feed and writes nothing:
    // the stage holds the first half, every partition of it dirty.
    a.write_config("", "", "flush_interval_ms = 3600000");
    a.weir_ok(&["init"]);
    stage_without_writing(&a).await;
    let feed_len = file_len(&a.path("feed.jsonl"));
    let shown = show_json(&a);
    let dirty = shown["dirty"].as_array().map_or(0, Vec::len);
    assert!(
        dirty > 10,
        "the first half is staged but unwritten: {shown}"
    );
    let client_a = a.client().await;
    let written: i64 = client_a
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(written, 0, "nothing was written before the export");

    let file = a.path("stage.ckpt");
    let out = a.weir_ok(&["checkpoint", "export", file.to_str().expect("utf-8 path")]);
    assert!(
        out.contains(&format!("at position {feed_len}"))
            && out.contains(&format!("{dirty} dirty partitions")),
        "{out}"
    );
    assert!(!a.path("stage.ckpt.tmp").exists());

    // Another machine: its own database and stage, the same feed.
    let b = TestDb::new("ckpt_carry_b").await;
    b.write_config("", "", "");
    read_feed_of(&b, &a.path("feed.jsonl"));
    b.weir_ok(&["init"]);
    let out = b.weir_ok(&["checkpoint", "import", file.to_str().expect("utf-8 path")]);
    assert!(out.contains(&format!("at position {feed_len}")), "{out}");
    let shown_b = show_json(&b);
    assert_eq!(shown_b["checkpoint"], shown["checkpoint"]);
    assert_eq!(shown_b["rows"], shown["rows"]);
    assert_eq!(shown_b["dirty"], shown["dirty"]);
    assert_eq!(shown_b["generation"], shown["generation"]);
    assert_eq!(shown_b["contracts"], shown["contracts"]);
    assert!(
        shown_b["contracts"]
            .as_array()
            .is_some_and(|c| !c.is_empty()),
        "{shown_b}"
    );
    let out = b.weir_ok(&["checkpoint", "check"]);
    assert!(out.contains("stage is consistent"), "{out}");

    // The feed goes on; the imported stage reads only what is new, and writes the
    // partitions dirty from before the export as well as the new ones.
    a.append_feed(second);
    let out = b.weir_ok(&["run", "--once"]);
    assert!(
        out.contains(&format!("staged {} transactions", transactions(second)))
            && out.contains("0 already staged"),
        "{out}"
    );
    let client_b = b.client().await;
    assert_target_matches(&client_b, "analytics.fact_orders", &model).await;

    // The original, run the same way, writes the same partitions from the same
    // generations: identical lineage.
    a.weir_ok(&["run", "--once"]);
    assert_target_matches(&client_a, "analytics.fact_orders", &model).await;
    let lineage_a = lineage(&client_a).await;
    assert!(!lineage_a.is_empty());
    assert_eq!(lineage_a, lineage(&client_b).await);

    // The imported stage checks its feed as the original does: a file replaced by
    // another of the same length is refused, not resumed at the old offset.
    let reordered: Vec<String> = second.iter().chain(first).cloned().collect();
    a.write_feed(&reordered);
    let out = weir_fails(&b, &["run", "--once"]);
    assert!(
        out.contains("is not the feed the stage was filled from"),
        "{out}"
    );

    // And it keeps the contract its rows were staged under: a config with another
    // grain is refused against it, as against the original.
    let config = std::fs::read_to_string(b.config_path()).expect("config");
    assert!(config.contains("grain = \"day\""), "{config}");
    std::fs::write(
        b.config_path(),
        config.replace("grain = \"day\"", "grain = \"month\""),
    )
    .expect("config");
    let out = b.weir(&["run", "--once"]);
    assert_eq!(out.status.code(), Some(2));
    let out = crate::harness::text(&out.stderr);
    assert!(
        out.contains("under another contract") && out.contains("grain day → month"),
        "{out}"
    );
}

/// Runs a live `weir run` (its config's flush interval an hour, so it writes nothing)
/// until the stage holds the whole feed, then kills it.
async fn stage_without_writing(db: &TestDb) {
    let mut live = db
        .weir_command(&["run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn weir run");
    let feed_len = file_len(&db.path("feed.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // `show` opens the stage read-only: it works beside a running `weir run`.
        let shown = show_json(db);
        if shown["checkpoint"]["position"].as_u64() == Some(feed_len) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the feed was not staged: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    live.kill().expect("stop weir run");
    live.wait().expect("wait");
}

/// A stage restored from a checkpoint file onto the target its lost original wrote to:
/// the file carries dirty marks but not the keys that changed, so a partition dirty at
/// the export is replaced at its next write, even when new changes reach it first (a
/// merge of just those would leave out what was dirty before the export).
#[tokio::test(flavor = "multi_thread")]
async fn a_stage_restored_onto_its_target_writes_what_was_dirty_at_the_export() {
    let db = TestDb::new("ckpt_restore").await;
    let mut workload = Workload::new(43, 10);
    // Written: every partition of the first part has its lineage.
    db.write_feed(&workload.lines(2000, 5));
    db.write_config("", "", "flush_interval_ms = 3600000");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // Staged, not written, then exported.
    db.append_feed(&workload.lines(1000, 5));
    stage_without_writing(&db).await;
    let dirty = show_json(&db)["dirty"].as_array().map_or(0, Vec::len);
    assert!(dirty >= 5, "the second part is staged but unwritten");
    let file = db.path("stage.ckpt");
    db.weir_ok(&["checkpoint", "export", file.to_str().expect("utf-8 path")]);
    // The machine is lost: a new stage, imported from the file, on the same target. (A
    // JSON-lines feed's new stage takes the target over: Weir cannot tell it from
    // another producer's feed of the same name.)
    let restored = config_with_stage(&db, "restored.toml", "restored");
    for args in [
        &["init", "--take-over"][..],
        &["checkpoint", "import", file.to_str().expect("utf-8 path")],
    ] {
        let out = weir_with(&db, &restored, args);
        assert!(out.status.success(), "{args:?}: {}", output_text(&out));
    }
    // The feed goes on, and its changes reach the partitions dirty at the export
    // before they are written; a few keys each, so `auto` would merge them.
    db.append_feed(&workload.lines(300, 5));
    let out = weir_with(&db, &restored, &["run", "--once"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let client = db.client().await;
    assert_target_matches(&client, "analytics.fact_orders", &workload.model).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn import_refuses_damaged_newer_and_truncated_files_and_changes_nothing() {
    let a = TestDb::new("ckpt_refuse_a").await;
    let (lines, _) = orders_workload(42, 800, 10);
    a.write_feed(&lines);
    a.write_config("", "", "");
    a.weir_ok(&["init"]);
    a.weir_ok(&["run", "--once"]);
    let file = a.path("stage.ckpt");
    a.weir_ok(&["checkpoint", "export", file.to_str().expect("utf-8 path")]);
    let good = std::fs::read(&file).expect("read export");

    let b = TestDb::new("ckpt_refuse_b").await;
    b.write_config("", "", "");
    read_feed_of(&b, &a.path("feed.jsonl"));
    let stage_b = b.path("stage");
    let import = |bytes: &[u8], name: &str| -> String {
        let path = b.path(name);
        std::fs::write(&path, bytes).expect("write");
        weir_fails(&b, &["checkpoint", "import", path.to_str().expect("utf-8")])
    };

    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let out = import(&flipped, "flipped.ckpt");
    assert!(
        out.contains("flipped.ckpt is damaged") && out.contains("SHA-256"),
        "{out}"
    );
    assert!(!stage_b.exists(), "a refused import created the stage");

    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&4u32.to_be_bytes());
    let out = import(&newer, "newer.ckpt");
    assert!(
        out.contains("format version 4") && out.contains("version 3 that this build reads"),
        "{out}"
    );
    assert!(!stage_b.exists());

    let out = import(&good[..good.len() - 1000], "truncated.ckpt");
    assert!(out.contains("truncated.ckpt is damaged"), "{out}");
    assert!(!stage_b.exists());

    // Into an empty stage (as `init` leaves it): refused the same, and it stays empty.
    b.weir_ok(&["init"]);
    let out = import(&flipped, "flipped.ckpt");
    assert!(out.contains("is damaged"), "{out}");
    let shown = show_json(&b);
    assert!(shown["checkpoint"].is_null(), "{shown}");
    assert_eq!(shown["rows"], serde_json::json!({}));

    // The good file imports; a second import into the now full stage is refused.
    let good_path = b.path("good.ckpt");
    std::fs::write(&good_path, &good).expect("write");
    b.weir_ok(&["checkpoint", "import", good_path.to_str().expect("utf-8")]);
    assert_eq!(show_json(&b)["checkpoint"], show_json(&a)["checkpoint"]);
    let out = weir_fails(
        &b,
        &["checkpoint", "import", good_path.to_str().expect("utf-8")],
    );
    assert!(
        out.contains(&format!("the stage at {} is not empty", stage_b.display())),
        "{out}"
    );

    // A config that reads another feed is refused, naming both.
    let other = b.path("other.toml");
    let config = std::fs::read_to_string(b.config_path()).expect("config");
    let feed_a = a.path("feed.jsonl");
    std::fs::write(
        &other,
        config
            .replace(&feed_a.display().to_string(), "other.jsonl")
            .replace("path = \"stage\"", "path = \"other-stage\""),
    )
    .expect("write config");
    let out = weir_with(
        &b,
        &other,
        &["checkpoint", "import", good_path.to_str().expect("utf-8")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let out = output_text(&out);
    assert!(
        out.contains(&format!("`jsonl:{}`", feed_a.display()))
            && out.contains(&format!("`jsonl:{}`", b.path("other.jsonl").display())),
        "{out}"
    );
    assert!(!b.path("other-stage").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_stage_file_fails_check_and_run_loudly() {
    let db = TestDb::new("ckpt_damage").await;
    let (lines, _) = orders_workload(43, 3000, 10);
    db.write_feed(&lines);
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    // Opening the stage for writing replays the write-ahead log into table files.
    db.weir_ok(&["run", "--once"]);
    let stage = db.path("stage");
    let ssts = sst_files(&stage);
    assert!(
        !ssts.is_empty(),
        "no SST files after two runs: {:?}",
        std::fs::read_dir(&stage)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect::<Vec<_>>()
    );
    let out = db.weir_ok(&["checkpoint", "check"]);
    assert!(out.contains("stage is consistent"), "{out}");
    let pristine = db.path("stage.pristine");
    copy_dir(&stage, &pristine);

    // (a) 64 bytes overwritten in the middle of the largest table file: the block
    // checksum catches it when `check` reads every block.
    let largest = &ssts[0];
    let mut bytes = std::fs::read(largest).expect("read sst");
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 64] {
        *b ^= 0xA5;
    }
    std::fs::write(largest, &bytes).expect("write sst");
    let out = weir_fails(&db, &["checkpoint", "check"]);
    assert!(
        out.contains("problem: `")
            && (out.contains("Corruption") || out.contains("checksum mismatch"))
            && out.contains("is damaged or inconsistent"),
        "{out}"
    );

    // (b) The last 100 bytes (the footer) cut off a table file: the stage does not
    // open, and both commands say it is damaged and what to do.
    std::fs::remove_dir_all(&stage).expect("rm");
    copy_dir(&pristine, &stage);
    let largest = &sst_files(&stage)[0];
    let len = file_len(largest);
    std::fs::OpenOptions::new()
        .write(true)
        .open(largest)
        .expect("open sst")
        .set_len(len - 100)
        .expect("truncate sst");
    for args in [&["checkpoint", "check"][..], &["run", "--once"][..]] {
        let out = db.weir(args);
        assert!(!out.status.success(), "weir {args:?} should fail");
        let out = output_text(&out);
        assert!(
            out.contains("the stage is damaged") && out.contains("weir checkpoint import"),
            "weir {args:?}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn show_reports_a_drained_stage() {
    let db = TestDb::new("ckpt_show").await;
    let (lines, model) = orders_workload(44, 2000, 10);
    db.write_feed(&lines);
    db.write_config("", "", "");
    db.weir_ok(&["init"]);
    db.weir_ok(&["run", "--once"]);
    let shown = show_json(&db);
    let feed_len = file_len(&db.path("feed.jsonl"));
    assert_eq!(
        shown["checkpoint"]["position"].as_u64(),
        Some(feed_len),
        "{shown}"
    );
    assert_eq!(
        shown["rows"]["public.orders"].as_u64(),
        Some(model.rows.len() as u64),
        "{shown}"
    );
    assert!(
        shown["size_bytes"].as_u64().is_some_and(|s| s > 0),
        "{shown}"
    );
    assert_eq!(shown["dirty"], serde_json::json!([]), "{shown}");
    assert_eq!(shown["pending_chunks"].as_u64(), Some(0));
    assert_eq!(shown["applying"].as_bool(), Some(false));
    assert_eq!(shown["format_version"].as_u64(), Some(2));
    let text = db.weir_ok(&["checkpoint", "show"]);
    assert!(
        text.contains(&format!("position:       {feed_len}")),
        "{text}"
    );
    let out = db.weir_ok(&["checkpoint", "check"]);
    assert!(
        out.contains(&format!(
            "stage is consistent: {} rows, position {feed_len}",
            model.rows.len()
        )),
        "{out}"
    );
}

/// Fills the stage of `db`'s config with `rows` rows directly through the library
/// (faster than a feed and a target, and the export does not need them).
fn fill_stage(db: &TestDb, rows: i64) {
    let config = Config::load(&db.config_path()).expect("config");
    let stage = Stage::open(&config.stage_path, &config.source_id()).expect("open the stage");
    let note = "x".repeat(120);
    let mut end = 0u64;
    let mut batch = Vec::new();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(500) {
        end += 1000;
        let changes = chunk
            .iter()
            .map(|id| {
                let day = format!("2026-03-{:02}", 1 + id % 28);
                StageChange::Upsert {
                    table: "public.orders".into(),
                    key: encode_key(&[&Value::Int(*id)]).expect("key"),
                    partition: Partition::Key(day.clone()),
                    row: StagedRow {
                        commit_position: end,
                        commit_time_us: None,
                        op: Op::Insert,
                        values: vec![
                            ("id".into(), Value::Int(*id)),
                            (
                                "customer".into(),
                                Value::Text(format!("customer-{id}-{note}")),
                            ),
                            ("order_date".into(), Value::Text(day)),
                            ("amount".into(), Value::Decimal("12.50".into())),
                            ("status".into(), Value::Text("new".into())),
                        ],
                    },
                }
            })
            .collect();
        batch.push(Transaction {
            end,
            cursor: end,
            changes,
            bad_records: vec![],
        });
    }
    for txns in batch.chunks(10) {
        stage.apply(txns).expect("stage");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_export_leaves_no_file_or_a_whole_one() {
    let db = TestDb::new("ckpt_kill").await;
    db.write_feed(&[]);
    db.write_config("", "", "");
    fill_stage(&db, 50_000);
    let file = db.path("stage.ckpt");
    let tmp = db.path("stage.ckpt.tmp");
    let file_arg = file.to_str().expect("utf-8 path").to_owned();

    let started = Instant::now();
    db.weir_ok(&["checkpoint", "export", &file_arg]);
    let full = started.elapsed();
    std::fs::remove_file(&file).expect("rm");

    let mut mid_export = 0;
    let delays = [
        Duration::from_millis(3),
        Duration::from_millis(10),
        full / 5,
        full * 2 / 5,
        full / 2,
        full * 3 / 5,
        full * 4 / 5,
        full * 9 / 10,
    ];
    for (i, delay) in delays.into_iter().enumerate() {
        let _ = std::fs::remove_file(&file);
        let _ = std::fs::remove_file(&tmp);
        let mut child = db
            .weir_command(&["checkpoint", "export", &file_arg])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn export");
        tokio::time::sleep(delay).await;
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        if !file.exists() {
            if tmp.exists() {
                mid_export += 1;
            }
            continue;
        }
        // The export finished before the kill: the file is whole and imports.
        let config = config_with_stage(&db, &format!("import-{i}.toml"), &format!("import-{i}"));
        let out = weir_with(&db, &config, &["checkpoint", "import", &file_arg]);
        assert!(
            out.status.success(),
            "a file left by a killed export (after {delay:?}) does not import: {}",
            output_text(&out)
        );
        assert!(
            text(&out.stdout).contains("imported 50000 rows"),
            "{}",
            output_text(&out)
        );
    }
    assert!(
        mid_export >= 1,
        "no kill landed while the export was writing (a full export took {full:?})"
    );
}

/// `weir` run from `db`'s folder, with the config spelled as given.
fn weir_in_folder(db: &TestDb, config: &str, args: &[&str]) -> Output {
    weir_command_with(db, config.as_ref(), args)
        .current_dir(db.path(""))
        .output()
        .expect("run weir")
}

/// A stage belongs to one feed, and a file feed is that file however the config is
/// spelled: `weir.toml`, `./weir.toml` and an absolute path all resume one stage. A
/// stage named by an older build's spelling of the path is adopted (and named
/// canonically from then on); a stage of another file is refused, naming both.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_feed_is_one_feed_however_the_config_is_spelled() {
    let db = TestDb::new("feed_identity").await;
    let (lines, model) = orders_workload(57, 600, 5);
    let (first, second) = split_at_transaction(&lines);
    db.write_feed(first);
    db.write_config("", "", "");
    let absolute = db.config_path();
    let absolute = absolute.to_str().expect("a UTF-8 path");
    let ok = |config: &str, args: &[&str]| {
        let out = weir_in_folder(&db, config, args);
        assert!(
            out.status.success(),
            "weir --config {config} {args:?}: {}",
            output_text(&out)
        );
        output_text(&out)
    };
    ok("weir.toml", &["init"]);
    ok("./weir.toml", &["run", "--once"]);
    let canonical = show_json(&db)["source_id"].clone();
    let feed = std::fs::canonicalize(db.path("feed.jsonl")).expect("canonical feed path");
    assert_eq!(
        canonical.as_str(),
        Some(format!("jsonl:{}", feed.display()).as_str())
    );
    db.append_feed(second);
    let out = ok(absolute, &["run", "--once"]);
    assert!(
        out.contains(&format!("staged {} transactions", transactions(second))),
        "{out}"
    );
    assert_target_matches(&db.client().await, "analytics.fact_orders", &model).await;

    // A stage of another file is refused, and names both feeds.
    let other = db.path("other.toml");
    std::fs::write(
        &other,
        std::fs::read_to_string(db.config_path())
            .expect("read config")
            .replace("path = \"feed.jsonl\"", "path = \"other.jsonl\""),
    )
    .expect("write config");
    std::fs::write(db.path("other.jsonl"), "").expect("other feed");
    let out = weir_in_folder(&db, "other.toml", &["run", "--once"]);
    let message = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{message}");
    assert!(
        message.contains("was filled from `jsonl:")
            && message.contains("feed.jsonl`, but the config reads `jsonl:")
            && message.contains("other.jsonl`"),
        "{message}"
    );

    // A stage an older build made names the file as the config's location spelled it.
    let legacy = db.path("legacy-stage");
    drop(Stage::open(&legacy, "jsonl:./feed.jsonl").expect("a stage with the old id"));
    let legacy_config = config_with_stage(&db, "legacy.toml", "legacy-stage");
    let out = ok(
        legacy_config.to_str().expect("a UTF-8 path"),
        &["run", "--once"],
    );
    assert!(out.contains("staged"), "{out}");
    let stage = Stage::open_read_only(&legacy).expect("open the adopted stage");
    assert_eq!(
        stage.source_id().expect("source id").as_deref(),
        canonical.as_str()
    );
}
