//! Unit tests of the stage; the model-based test is in [`model`].

mod model;

use std::collections::HashMap;

use super::layout::*;
use super::*;
use crate::feed::{Op, Transaction};
use crate::value::Value;

fn row(id: i64, day: &str, pos: u64) -> StagedRow {
    StagedRow {
        commit_position: pos,
        commit_time_us: None,
        op: Op::Insert,
        values: vec![
            ("id".into(), Value::Int(id)),
            ("day".into(), Value::Text(day.into())),
        ],
    }
}

fn upsert(id: i64, day: &str, pos: u64) -> StageChange {
    StageChange::Upsert {
        table: "public.t".into(),
        key: encode_key(&[&Value::Int(id)]).expect("key"),
        partition: Partition::Key(day.into()),
        row: row(id, day, pos),
    }
}

fn txn(end: u64, changes: Vec<StageChange>) -> Transaction {
    Transaction {
        end,
        cursor: end,
        changes,
        bad_records: vec![],
    }
}

fn p(s: &str) -> Partition {
    Partition::Key(s.into())
}

/// Row `id` with a `note`: the column an `UpsertUnchanged` leaves out.
fn noted(id: i64, day: &str, pos: u64, note: &str) -> StageChange {
    let mut r = row(id, day, pos);
    r.values.push(("note".into(), Value::Text(note.into())));
    StageChange::Upsert {
        table: "public.t".into(),
        key: encode_key(&[&Value::Int(id)]).expect("key"),
        partition: p(day),
        row: r,
    }
}

/// Row `id` in `day`, its `note` unchanged.
fn note_unchanged(id: i64, day: &str, pos: u64, skip_if_absent: bool) -> StageChange {
    let key = encode_key(&[&Value::Int(id)]).expect("key");
    StageChange::UpsertUnchanged {
        table: "public.t".into(),
        key: key.clone(),
        partition: p(day),
        row: row(id, day, pos),
        unchanged: vec!["note".into()],
        previous_key: key,
        skip_if_absent,
    }
}

/// Each dirty partition with its generation, in partition order.
fn dirty_generations(stage: &Stage) -> Vec<(String, u64)> {
    let mut dirty: Vec<(String, u64)> = stage
        .dirty_partitions()
        .expect("dirty")
        .iter()
        .map(|d| (d.partition.to_string(), d.generation))
        .collect();
    dirty.sort();
    dirty
}

/// How many rows partition `day` of `public.t` holds.
fn rows_in(stage: &Stage, day: &str) -> usize {
    stage
        .read_partition("public.t", &p(day))
        .expect("rows")
        .rows
        .len()
}

fn note_of(stage: &Stage, id: i64) -> Option<(String, Value)> {
    let row = stage
        .get_row("public.t", &encode_key(&[&Value::Int(id)]).expect("key"))
        .expect("read")?;
    let day = row.values.iter().find(|(c, _)| c == "day")?.1.to_string();
    let note = row.values.iter().find(|(c, _)| c == "note")?.1.clone();
    Some((day, note))
}

/// An unchanged value is the row's previous version's, wherever that version is:
/// earlier in the same transaction, in an earlier transaction of the same group
/// commit, staged before, or in an earlier chunk of a large transaction.
#[test]
fn unchanged_values_come_from_the_previous_version_of_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let text = |s: &str| Value::Text(s.into());
    stage
        .apply(&[
            // The same transaction: inserted, then updated (and moved).
            txn(
                10,
                vec![
                    noted(1, "d1", 10, "one"),
                    note_unchanged(1, "d2", 10, false),
                ],
            ),
            // Staged before in the stage, changed in one transaction of a group
            // commit, then updated again in the next: the new note, not the staged one.
            txn(20, vec![noted(2, "d1", 20, "two")]),
        ])
        .expect("apply");
    stage
        .apply(&[
            txn(30, vec![noted(2, "d1", 30, "two, corrected")]),
            txn(40, vec![note_unchanged(2, "d3", 40, false)]),
            // A row never staged: skipped (a snapshot will read it), or an error.
            txn(50, vec![note_unchanged(3, "d1", 50, true)]),
        ])
        .expect("apply");
    assert_eq!(note_of(&stage, 1), Some(("d2".into(), text("one"))));
    assert_eq!(
        note_of(&stage, 2),
        Some(("d3".into(), text("two, corrected")))
    );
    assert_eq!(note_of(&stage, 3), None, "skipped");
    let err = stage
        .apply(&[txn(60, vec![note_unchanged(4, "d1", 60, false)])])
        .expect_err("no previous version");
    assert!(
        matches!(&err, StageError::UnchangedWithoutRow { column, .. } if column == "note"),
        "{err}"
    );
    // A large transaction: the new note in one chunk, the unchanged one in the next.
    stage
        .append_pending(&[noted(5, "d1", 70, "five")])
        .expect("chunk");
    stage
        .append_pending(&[noted(1, "d2", 70, "one, again")])
        .expect("chunk");
    stage
        .apply(&[txn(
            70,
            vec![
                note_unchanged(5, "d4", 70, false),
                note_unchanged(1, "d1", 70, false),
            ],
        )])
        .expect("commit the large transaction");
    assert_eq!(note_of(&stage, 5), Some(("d4".into(), text("five"))));
    assert_eq!(note_of(&stage, 1), Some(("d1".into(), text("one, again"))));
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(70)
    );
}

fn contract(source: &str, oid: u32) -> TableContract {
    TableContract {
        source: source.into(),
        source_oid: Some(oid),
        target: "analytics.t".into(),
        key: vec!["id".into()],
        partition_by: "day".into(),
        grain: "value".into(),
        transform: "identity".into(),
        out_of_config: false,
    }
}

#[test]
fn a_renamed_table_carries_its_rows_dirty_marks_and_contract_to_the_new_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .put_contract(&contract("public.t", 7))
        .expect("contract");
    // Another table whose name starts alike stays where it is.
    stage
        .put_contract(&contract("public.t2", 8))
        .expect("contract");
    let mut other = upsert(9, "d1", 10);
    if let StageChange::Upsert { table, .. } = &mut other {
        *table = "public.t2".into();
    }
    stage
        .apply(&[txn(
            10,
            vec![upsert(1, "d1", 10), upsert(2, "d2", 10), other],
        )])
        .expect("apply");
    let moved = stage
        .rename_table("public.t", &contract("public.t_v2", 7))
        .expect("rename");
    assert!(moved >= 4, "rows and keys at least: {moved}");
    assert!(stage.table_rows("public.t").expect("rows").is_empty());
    assert_eq!(stage.table_rows("public.t_v2").expect("rows").len(), 2);
    assert_eq!(stage.table_rows("public.t2").expect("rows").len(), 1);
    let key = encode_key(&[&Value::Int(2)]).expect("key");
    assert_eq!(
        stage.get_row("public.t_v2", &key).expect("get"),
        Some(row(2, "d2", 10))
    );
    let mut dirty: Vec<_> = stage
        .dirty_partitions()
        .expect("dirty")
        .into_iter()
        .map(|d| (d.table, d.partition))
        .collect();
    dirty.sort();
    assert_eq!(
        dirty,
        vec![
            ("public.t2".to_owned(), p("d1")),
            ("public.t_v2".to_owned(), p("d1")),
            ("public.t_v2".to_owned(), p("d2")),
        ]
    );
    let contracts = stage.contracts().expect("contracts");
    assert_eq!(
        contracts,
        vec![contract("public.t2", 8), contract("public.t_v2", 7)]
    );
    // Again (a crash after the moves, before the contract): nothing left to move.
    assert_eq!(
        stage
            .rename_table("public.t", &contract("public.t_v2", 7))
            .expect("rename"),
        0
    );
    assert_eq!(stage.table_rows("public.t_v2").expect("rows").len(), 2);
}

#[test]
fn a_partition_move_dirties_both_partitions_and_moves_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
        .expect("apply");
    let gen1 = stage
        .read_partition("public.t", &p("d1"))
        .expect("read")
        .dirty
        .expect("dirty");
    assert!(
        stage
            .clear_dirty("public.t", &p("d1"), gen1)
            .expect("clear")
    );
    stage
        .apply(&[txn(20, vec![upsert(1, "d2", 20)])])
        .expect("apply");
    let dirty: Vec<_> = stage
        .dirty_partitions()
        .expect("dirty")
        .into_iter()
        .map(|d| d.partition)
        .collect();
    assert_eq!(dirty, [p("d1"), p("d2")]);
    assert!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows
            .is_empty()
    );
    assert_eq!(
        stage
            .read_partition("public.t", &p("d2"))
            .expect("read")
            .rows,
        [row(1, "d2", 20)]
    );
}

#[test]
fn advancing_the_position_keeps_the_cursor_never_goes_back_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    assert!(stage.position_covers_acknowledgements().expect("marker"));
    // Nothing staged yet: the position starts there.
    assert!(stage.advance_position(5).expect("advance"));
    assert_eq!(
        stage.checkpoint().expect("position"),
        Some(Position {
            position: 5,
            cursor: 0
        })
    );
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
        .expect("apply");
    assert!(stage.advance_position(30).expect("advance"));
    assert!(!stage.advance_position(30).expect("same"));
    assert!(!stage.advance_position(20).expect("behind"));
    assert_eq!(
        stage.checkpoint().expect("position"),
        Some(Position {
            position: 30,
            cursor: 10
        })
    );
    // A transaction at or below the advanced position is skipped, one past it staged.
    let outcome = stage
        .apply(&[
            txn(25, vec![upsert(2, "d1", 25)]),
            txn(40, vec![upsert(3, "d1", 40)]),
        ])
        .expect("apply");
    assert_eq!((outcome.skipped, outcome.transactions), (1, 1));
    assert!(
        stage
            .get_row("public.t", &encode_key(&[&Value::Int(2)]).expect("key"))
            .expect("get")
            .is_none()
    );
    drop(stage);
    let stage = Stage::open(dir.path(), "test").expect("reopen");
    assert_eq!(
        stage.checkpoint().expect("position"),
        Some(Position {
            position: 40,
            cursor: 40
        })
    );
    assert!(stage.position_covers_acknowledgements().expect("marker"));
    assert!(
        checkpoint::check(&stage)
            .expect("check")
            .problems
            .is_empty()
    );
}

#[test]
fn a_stage_of_an_older_build_covers_acknowledgements_once_advanced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
        .expect("apply");
    // What a stage made before the marker existed looks like.
    stage
        .db
        .delete_cf(stage.cf(CF_META), META_POSITION_COVERS_ACKS)
        .expect("delete");
    assert!(!stage.position_covers_acknowledgements().expect("marker"));
    // Advancing to where it already is still records that it now covers them.
    assert!(!stage.advance_position(10).expect("advance"));
    assert!(stage.position_covers_acknowledgements().expect("marker"));
}

/// Makes the partitions `days` known to the stage and written, and empty: a row staged
/// in each, written, then deleted and written again. A partition new to the stage is
/// changed whole (see `a_partition_new_to_the_stage_is_changed_whole_without_a_record_per_key`);
/// these record their changed keys one by one.
fn written_empty(stage: &Stage, days: &[&str]) {
    let seed = |i: usize| 1_000_000 + i64::try_from(i).expect("fits");
    let upserts = days.iter().enumerate().map(|(i, d)| upsert(seed(i), d, 1));
    stage
        .apply(&[txn(1, upserts.collect())])
        .expect("apply seeds");
    let clear = |stage: &Stage| {
        for day in days {
            let read = stage.read_changes("public.t", &p(day)).expect("read");
            assert!(
                stage
                    .clear_dirty("public.t", &p(day), read.dirty.expect("dirty"))
                    .expect("clear")
            );
        }
    };
    clear(stage);
    let deletes = (0..days.len()).map(|i| StageChange::Delete {
        table: "public.t".into(),
        key: encode_key(&[&Value::Int(seed(i))]).expect("key"),
    });
    stage
        .apply(&[txn(2, deletes.collect())])
        .expect("apply deletes");
    clear(stage);
}

fn changed_ids(stage: &Stage, day: &str) -> (bool, Vec<(i64, bool)>) {
    let changes = stage.read_changes("public.t", &p(day)).expect("changes");
    let keys = changes
        .keys
        .iter()
        .map(|(k, row)| match decode_key(k).expect("key").as_slice() {
            [Value::Int(id)] => (*id, row.is_some()),
            other => panic!("unexpected key {other:?}"),
        })
        .collect();
    (changes.whole, keys)
}

#[test]
fn clearing_more_changed_keys_than_point_deletes_clears_only_that_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let many = i64::try_from(super::read::CLEAR_POINT_DELETES_MAX).expect("fits") + 5;
    written_empty(&stage, &["d0", "d1", "d2"]);
    // The neighbouring partitions d0 and d2 keep theirs.
    let mut changes: Vec<StageChange> = (1..=many).map(|id| upsert(id, "d1", 10)).collect();
    changes.push(upsert(many + 1, "d0", 10));
    changes.push(upsert(many + 2, "d2", 10));
    stage.apply(&[txn(10, changes)]).expect("apply");
    let read = stage.read_changes("public.t", &p("d1")).expect("read");
    assert_eq!(read.keys.len(), usize::try_from(many).expect("fits"));
    assert!(
        stage
            .clear_dirty("public.t", &p("d1"), read.dirty.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(changed_ids(&stage, "d1"), (false, vec![]));
    assert_eq!(changed_ids(&stage, "d0"), (false, vec![(many + 1, true)]));
    assert_eq!(changed_ids(&stage, "d2"), (false, vec![(many + 2, true)]));
    // A key changed after the range tombstone is recorded again.
    stage
        .apply(&[txn(20, vec![upsert(7, "d1", 20)])])
        .expect("apply");
    assert_eq!(changed_ids(&stage, "d1"), (false, vec![(7, true)]));
    // The staged rows themselves are untouched.
    let rows = stage.read_partition("public.t", &p("d1")).expect("rows");
    assert_eq!(rows.rows.len(), usize::try_from(many).expect("fits"));
}

#[test]
fn changed_keys_name_both_partitions_of_a_move_and_clear_with_the_mark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    written_empty(&stage, &["d1", "d2"]);
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10), upsert(2, "d1", 10)])])
        .expect("apply");
    assert_eq!(
        changed_ids(&stage, "d1"),
        (false, vec![(1, true), (2, true)])
    );
    let gen1 = stage
        .read_changes("public.t", &p("d1"))
        .expect("read")
        .dirty;
    assert!(
        stage
            .clear_dirty("public.t", &p("d1"), gen1.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(changed_ids(&stage, "d1"), (false, vec![]));
    // Key 1 moves to d2 and key 2 is deleted: d1 names both (neither is there now),
    // d2 names key 1 with its row.
    stage
        .apply(&[txn(
            20,
            vec![
                upsert(1, "d2", 20),
                StageChange::Delete {
                    table: "public.t".into(),
                    key: encode_key(&[&Value::Int(2)]).expect("key"),
                },
            ],
        )])
        .expect("apply");
    assert_eq!(
        changed_ids(&stage, "d1"),
        (false, vec![(1, false), (2, false)])
    );
    assert_eq!(changed_ids(&stage, "d2"), (false, vec![(1, true)]));
    // A mark set after the read is not cleared, nor the key changed since; the key
    // the write read is.
    let read = stage.read_changes("public.t", &p("d2")).expect("read");
    stage
        .apply(&[txn(30, vec![upsert(3, "d2", 30)])])
        .expect("apply");
    assert!(
        !stage
            .clear_dirty("public.t", &p("d2"), read.dirty.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(changed_ids(&stage, "d2"), (false, vec![(3, true)]));
    // A TRUNCATE changes every key: the partitions are replaced whole.
    stage
        .apply(&[txn(
            40,
            vec![StageChange::Truncate {
                table: "public.t".into(),
            }],
        )])
        .expect("apply");
    assert!(changed_ids(&stage, "d1").0);
    assert!(changed_ids(&stage, "d2").0);
}

/// The names of the table files of `family`, sorted.
fn files_of(stage: &Stage, family: &str) -> Vec<String> {
    let mut names: Vec<String> = stage
        .db
        .live_files()
        .expect("live files")
        .into_iter()
        .filter(|f| f.column_family_name == family)
        .map(|f| f.name)
        .collect();
    names.sort();
    names
}

#[test]
fn a_flushed_file_of_new_rows_and_keys_is_not_rewritten_at_once() {
    // RocksDB rewrites a table file at the bottom whose sequence numbers are not zero
    // as soon as no snapshot needs them (it looks when a snapshot is released, as a
    // partition job's is): the stage delays that for `rows` and `keys`.
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let changes: Vec<StageChange> = (0..2000).map(|i| upsert(i, "d", 10)).collect();
    stage.apply(&[txn(10, changes)]).expect("apply");
    stage.flush().expect("flush");
    let (rows, keys) = (files_of(&stage, CF_ROWS), files_of(&stage, CF_KEYS));
    let generations = files_of(&stage, CF_GENERATIONS);
    assert!(!rows.is_empty() && !keys.is_empty() && !generations.is_empty());
    drop(stage.db.snapshot());
    // `generations` is not delayed: once its file was rewritten, RocksDB has looked at
    // the bottom of every family since the flush.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while files_of(&stage, CF_GENERATIONS) == generations {
        assert!(
            std::time::Instant::now() < deadline,
            "RocksDB never rewrote the generations file: the test shows nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        files_of(&stage, CF_ROWS),
        rows,
        "the rows file was rewritten"
    );
    assert_eq!(
        files_of(&stage, CF_KEYS),
        keys,
        "the keys file was rewritten"
    );
}

#[test]
fn a_larger_partition_reports_more_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let mut changes: Vec<StageChange> = (0..2000).map(|i| upsert(i, "big", 10)).collect();
    changes.extend((5000..5010).map(|i| upsert(i, "small", 10)));
    stage.apply(&[txn(10, changes)]).expect("apply");
    stage.flush().expect("flush");
    let dirty = stage.dirty_partitions().expect("dirty");
    let bytes = stage.approximate_bytes(&dirty);
    let by_name: HashMap<String, u64> = dirty
        .iter()
        .map(|d| d.partition.to_string())
        .zip(bytes)
        .collect();
    assert!(by_name["big"] > by_name["small"], "{by_name:?}");
}

#[test]
fn the_backlog_grows_with_staged_changes_and_clears_with_the_mark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    assert_eq!(stage.unwritten_bytes().expect("backlog"), 0);
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10), upsert(2, "d2", 10)])])
        .expect("apply");
    let first = stage.unwritten_bytes().expect("backlog");
    assert!(first > 0);
    stage
        .apply(&[txn(20, vec![upsert(1, "d1", 20)])])
        .expect("apply");
    assert!(stage.unwritten_bytes().expect("backlog") > first);
    // Applying the same transaction again is skipped: nothing added.
    let before = stage.unwritten_bytes().expect("backlog");
    stage
        .apply(&[txn(20, vec![upsert(1, "d1", 20)])])
        .expect("apply");
    assert_eq!(stage.unwritten_bytes().expect("backlog"), before);
    for d in stage.dirty_partitions().expect("dirty") {
        assert!(
            stage
                .clear_dirty(&d.table, &d.partition, d.generation)
                .expect("clear")
        );
    }
    assert_eq!(stage.unwritten_bytes().expect("backlog"), 0);
}

#[test]
fn transactions_at_or_below_the_position_are_skipped_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .apply(&[
            txn(10, vec![upsert(1, "d1", 10)]),
            txn(20, vec![upsert(2, "d1", 20)]),
        ])
        .expect("apply");
    let again = stage
        .apply(&[
            txn(20, vec![upsert(3, "d1", 20)]),
            txn(30, vec![upsert(4, "d1", 30)]),
        ])
        .expect("apply");
    assert_eq!(
        again,
        ApplyOutcome {
            transactions: 1,
            changes: 1,
            skipped: 1
        }
    );
    let ids: Vec<_> = stage
        .read_partition("public.t", &p("d1"))
        .expect("read")
        .rows
        .iter()
        .map(|r| r.values[0].1.clone())
        .collect();
    assert_eq!(ids, [Value::Int(1), Value::Int(2), Value::Int(4)]);
    assert_eq!(
        stage.checkpoint().expect("position"),
        Some(Position {
            position: 30,
            cursor: 30
        })
    );
}

#[test]
fn a_dirty_mark_set_after_the_read_survives_compare_and_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
        .expect("apply");
    let read = stage.read_partition("public.t", &p("d1")).expect("read");
    stage
        .apply(&[txn(20, vec![upsert(2, "d1", 20)])])
        .expect("apply");
    assert!(
        !stage
            .clear_dirty("public.t", &p("d1"), read.dirty.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(stage.dirty_partitions().expect("dirty").len(), 1);
}

#[test]
fn a_stage_refuses_another_feed_and_a_newer_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(Stage::open(dir.path(), "feed-a").expect("open"));
    let err = Stage::open(dir.path(), "feed-b").expect_err("other feed");
    assert!(
        err.to_string().contains("was filled from `feed-a`"),
        "{err}"
    );
    let stage = Stage::open(dir.path(), "feed-a").expect("open");
    stage
        .put_meta(META_FORMAT_VERSION, &(FORMAT_VERSION + 1).to_be_bytes())
        .expect("write");
    drop(stage);
    let err = Stage::open(dir.path(), "feed-a").expect_err("newer format");
    assert!(matches!(err, StageError::NewerFormat { .. }), "{err}");
}

/// A stage of format 1 (an older build's) is read as it is, and marked this build's
/// format once opened for writing: older builds then refuse it.
#[test]
fn a_stage_of_format_one_is_marked_this_builds_when_opened_for_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "feed-a").expect("open");
    stage
        .put_meta(META_FORMAT_VERSION, &1u32.to_be_bytes())
        .expect("write");
    drop(stage);
    let version = |stage: &Stage| {
        let bytes = stage.meta(META_FORMAT_VERSION).expect("read").expect("set");
        u32::from_be_bytes(bytes.as_slice().try_into().expect("4 bytes"))
    };
    let read_only = Stage::open_read_only(dir.path()).expect("read-only");
    assert_eq!(version(&read_only), 1);
    drop(read_only);
    let stage = Stage::open(dir.path(), "feed-a").expect("open");
    assert_eq!(version(&stage), FORMAT_VERSION);
    const { assert!(FORMAT_VERSION >= 2) };
}

#[test]
fn a_large_transaction_is_visible_only_when_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10)])])
        .expect("apply");
    stage
        .append_pending(&[upsert(2, "d1", 20), upsert(1, "d2", 20)])
        .expect("chunk");
    stage.append_pending(&[upsert(3, "d2", 20)]).expect("chunk");
    // Not committed: nothing of it is visible.
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows,
        [row(1, "d1", 10)]
    );
    assert!(
        stage
            .read_partition("public.t", &p("d2"))
            .expect("read")
            .rows
            .is_empty()
    );
    let outcome = stage
        .apply(&[
            txn(
                20,
                vec![StageChange::Delete {
                    table: "public.t".into(),
                    key: encode_key(&[&Value::Int(2)]).expect("key"),
                }],
            ),
            txn(30, vec![upsert(4, "d1", 30)]),
        ])
        .expect("commit");
    assert_eq!(
        outcome,
        ApplyOutcome {
            transactions: 2,
            changes: 5,
            skipped: 0
        }
    );
    let ids = |part: &str| -> Vec<Value> {
        stage
            .read_partition("public.t", &p(part))
            .expect("read")
            .rows
            .iter()
            .map(|r| r.values[0].1.clone())
            .collect()
    };
    assert_eq!(ids("d1"), [Value::Int(4)]);
    assert_eq!(ids("d2"), [Value::Int(1), Value::Int(3)]);
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(30)
    );
    assert!(!stage.has_pending().expect("pending"));
}

#[test]
fn an_uncommitted_large_transaction_leaves_nothing_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage.append_pending(&[upsert(1, "d1", 10)]).expect("chunk");
    drop(stage);
    let stage = Stage::open(dir.path(), "test").expect("reopen");
    assert!(!stage.has_pending().expect("pending"));
    assert!(stage.dirty_partitions().expect("dirty").is_empty());
    assert_eq!(stage.checkpoint().expect("position"), None);
    // The aborted chunks are not mistaken for the next transaction's.
    stage
        .apply(&[txn(20, vec![upsert(2, "d1", 20)])])
        .expect("apply");
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows,
        [row(2, "d1", 20)]
    );
}

#[test]
fn a_crash_while_applying_a_large_transaction_is_finished_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    stage
        .append_pending(&[upsert(1, "d1", 10), upsert(2, "d2", 10)])
        .expect("chunk");
    let marker = stage
        .mark_large(&txn(10, vec![upsert(3, "d1", 10)]))
        .expect("mark");
    assert!(matches!(
        stage.read_partition("public.t", &p("d1")),
        Err(StageError::Applying)
    ));
    drop(stage);
    let _ = marker;
    let stage = Stage::open(dir.path(), "test").expect("reopen finishes the commit");
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows
            .len(),
        2
    );
    assert_eq!(
        stage
            .read_partition("public.t", &p("d2"))
            .expect("read")
            .rows
            .len(),
        1
    );
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(10)
    );
    let dirty: Vec<_> = stage
        .dirty_partitions()
        .expect("dirty")
        .into_iter()
        .map(|d| (d.partition, d.generation))
        .collect();
    assert_eq!(
        dirty,
        [(p("d1"), marker.generation), (p("d2"), marker.generation)]
    );
}

#[test]
fn key_encoding_preserves_order_and_is_prefix_free() {
    let ints = [i64::MIN, -5, 0, 7, i64::MAX].map(|i| encode_key(&[&Value::Int(i)]).expect("key"));
    assert!(ints.windows(2).all(|w| w[0] < w[1]));
    let a = encode_key(&[&Value::Text("a".into()), &Value::Text("bc".into())]).expect("key");
    let b = encode_key(&[&Value::Text("ab".into()), &Value::Text("c".into())]).expect("key");
    assert_ne!(a, b);
    let nul = encode_key(&[&Value::Text("a\0".into())]).expect("key");
    let plain = encode_key(&[&Value::Text("a".into())]).expect("key");
    assert!(plain < nul);
    assert!(encode_key(&[&Value::Null]).is_err());
}

/// Streamed transactions: each in its own area, interleaved; a commit stages its area
/// (less its aborted subtransactions, rows at the commit's position and time) as one
/// transaction; an abort or a reopen forgets areas.
#[test]
fn streamed_transactions_are_staged_at_their_commit_without_aborted_subtransactions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    // Transaction 700 (subtransaction 701 aborts) and 800 (aborts whole) interleave.
    stage
        .append_stream(700, &[(700, upsert(1, "d1", 0)), (701, upsert(2, "d1", 0))])
        .expect("chunk");
    stage
        .append_stream(800, &[(800, upsert(9, "d1", 0))])
        .expect("chunk");
    stage
        .apply(&[txn(10, vec![upsert(5, "d2", 10)])])
        .expect("apply");
    stage
        .append_stream(700, &[(700, upsert(3, "d2", 0)), (702, upsert(4, "d2", 0))])
        .expect("chunk");
    stage.discard_stream(800).expect("abort");
    // Nothing streamed is visible before its commit.
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows,
        Vec::<StagedRow>::new()
    );
    let moved = stage.stage_stream(700, &[701], 20, 1_000).expect("stage");
    assert_eq!(moved, 3);
    stage.apply(&[txn(30, vec![])]).expect("commit");
    let at_commit = |id, day| StagedRow {
        commit_time_us: Some(1_000),
        ..row(id, day, 20)
    };
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows,
        [at_commit(1, "d1")]
    );
    assert_eq!(
        stage
            .read_partition("public.t", &p("d2"))
            .expect("read")
            .rows,
        [at_commit(3, "d2"), at_commit(4, "d2"), row(5, "d2", 10)]
    );
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(30)
    );
    // An area left by a run that ended before its commit is gone at the next open.
    stage
        .append_stream(900, &[(900, upsert(7, "d1", 0))])
        .expect("chunk");
    drop(stage);
    let stage = Stage::open(dir.path(), "test").expect("reopen");
    assert_eq!(stage.stage_stream(900, &[], 40, 0).expect("stage"), 0);
    stage.apply(&[txn(40, vec![])]).expect("commit");
    assert_eq!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("read")
            .rows,
        [at_commit(1, "d1")]
    );
}

#[test]
fn a_first_load_stages_at_one_position_and_marks_partitions_changed_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    // Two parts of a load with keys new to the stage: both at the snapshot's position
    // (the second is not skipped as a transaction at the position would be).
    stage
        .apply_load(&[upsert(1, "d1", 50), upsert(2, "d2", 50)], 50, true, true)
        .expect("first part");
    stage
        .apply_load(&[upsert(3, "d1", 50)], 50, true, false)
        .expect("second part");
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(50)
    );
    let rows = stage.read_partition("public.t", &p("d1")).expect("rows");
    assert_eq!(rows.rows.len(), 2);
    assert_eq!(changed_ids(&stage, "d1"), (true, vec![]));
    let dirty: Vec<String> = stage
        .dirty_partitions()
        .expect("dirty")
        .iter()
        .map(|d| d.partition.to_string())
        .collect();
    assert_eq!(dirty.len(), 2, "{dirty:?}");
    // The keys index was written: a later move finds the old partition and empties it.
    stage
        .apply(&[txn(60, vec![upsert(1, "d2", 60)])])
        .expect("move");
    assert_eq!(rows_in(&stage, "d1"), 1);
    // Without `new_keys`, a key loaded twice (a source key not enforced unique) is
    // looked up: it moves rather than staying in both partitions.
    stage
        .apply_load(&[upsert(3, "d2", 70)], 70, false, true)
        .expect("third part");
    assert!(
        stage
            .read_partition("public.t", &p("d1"))
            .expect("rows")
            .rows
            .is_empty()
    );
    assert_eq!(
        stage
            .read_partition("public.t", &p("d2"))
            .expect("rows")
            .rows
            .len(),
        3
    );
}

/// A first load's part with keys new to the stage is ingested as table files under a
/// marker: cut at each step as a crash would, the stage reads as consistent (the check
/// names the part being ingested), and the next writable open, or the next part,
/// finishes it; a part cut before its marker is gone whole.
#[test]
fn a_first_load_part_cut_at_any_step_is_finished_or_gone_whole() {
    use super::bulk::Cut;
    for cut in [
        Cut::BeforeMarker,
        Cut::BeforeIngestion,
        Cut::BetweenIngestions,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "test").expect("open");
        stage
            .apply_load(&[upsert(1, "d1", 50), upsert(2, "d2", 50)], 50, true, true)
            .expect("first part");
        // The second part: into a partition loaded already and a new one.
        let second = [upsert(4, "d3", 50), upsert(3, "d1", 50)];
        stage
            .apply_load_cut(&second, 50, true, false, cut)
            .expect("cut part");
        let report = checkpoint::check(&stage).expect("check");
        assert!(report.problems.is_empty(), "{cut:?}: {:?}", report.problems);
        assert_eq!(
            report.warnings.len(),
            usize::from(cut != Cut::BeforeMarker),
            "{cut:?}: {:?}",
            report.warnings
        );
        drop(stage);
        let stage = Stage::open(dir.path(), "test").expect("reopen");
        assert!(!dir.path().join("load").exists(), "{cut:?}");
        let report = checkpoint::check(&stage).expect("check");
        assert!(
            report.problems.is_empty() && report.warnings.is_empty(),
            "{cut:?}: {report:?}"
        );
        let ids = |day: &str| -> Vec<i64> {
            let rows = stage.read_partition("public.t", &p(day)).expect("rows");
            rows.rows
                .iter()
                .map(|r| match r.values.first() {
                    Some((_, Value::Int(id))) => *id,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let mut dirty: Vec<String> = stage
            .dirty_partitions()
            .expect("dirty")
            .iter()
            .map(|d| d.partition.to_string())
            .collect();
        dirty.sort();
        if cut == Cut::BeforeMarker {
            assert_eq!((ids("d1"), ids("d3")), (vec![1], vec![]), "{cut:?}");
            assert_eq!(dirty, ["d1", "d2"], "{cut:?}");
        } else {
            assert_eq!((ids("d1"), ids("d3")), (vec![1, 3], vec![4]), "{cut:?}");
            assert_eq!(dirty, ["d1", "d2", "d3"], "{cut:?}");
            assert_eq!(changed_ids(&stage, "d3"), (true, vec![]), "{cut:?}");
        }
        // The keys index holds the loaded keys: a move empties the old partition.
        stage
            .apply(&[txn(60, vec![upsert(1, "d2", 60)])])
            .expect("move");
        assert_eq!(ids("d2"), [1, 2], "{cut:?}");
    }
    // A part an error left marked in a running process is finished before the next
    // part, which takes the next generation, and before the next transaction.
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let cut = Cut::BetweenIngestions;
    stage
        .apply_load_cut(&[upsert(1, "d1", 50)], 50, true, false, cut)
        .expect("cut part");
    stage
        .apply_load(&[upsert(2, "d2", 50)], 50, true, true)
        .expect("next part");
    assert_eq!(
        dirty_generations(&stage),
        [("d1".to_owned(), 1), ("d2".to_owned(), 2)]
    );
    let cut = Cut::BeforeIngestion;
    stage
        .apply_load_cut(&[upsert(3, "d1", 50)], 50, true, false, cut)
        .expect("cut part");
    stage
        .apply(&[txn(60, vec![upsert(4, "d3", 60)])])
        .expect("transaction");
    assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        Some(60)
    );
    let report = checkpoint::check(&stage).expect("check");
    assert!(
        report.problems.is_empty() && report.warnings.is_empty(),
        "{report:?}"
    );
    assert_eq!(rows_in(&stage, "d1"), 2);
}

/// Parts are prepared by the load's workers at once, without the stage's lock, and
/// staged in whatever order they come: each is whole, with its own generation.
#[test]
fn first_load_parts_prepared_at_once_are_staged_in_any_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let part = |ids: std::ops::Range<i64>, day: &'static str| -> Vec<StageChange> {
        ids.map(|id| upsert(id, day, 50)).collect()
    };
    let (first, second) = std::thread::scope(|s| {
        let a = s.spawn(|| stage.prepare_load(&part(0..300, "d1")));
        let b = s.spawn(|| stage.prepare_load(&part(300..500, "d2")));
        (a.join().expect("thread"), b.join().expect("thread"))
    });
    let (first, second) = (
        first.expect("prepare").expect("upserts"),
        second.expect("prepare").expect("upserts"),
    );
    // Anything but upserts is staged through the batch.
    assert!(
        stage
            .prepare_load(&[StageChange::SourceState(vec![1])])
            .expect("prepare")
            .is_none()
    );
    stage
        .apply_prepared_load(second, &[StageChange::SourceState(vec![2])], 50, false)
        .expect("second");
    stage
        .apply_prepared_load(first, &[StageChange::SourceState(vec![1])], 50, true)
        .expect("first");
    assert_eq!((rows_in(&stage, "d1"), rows_in(&stage, "d2")), (300, 200));
    assert_eq!(
        dirty_generations(&stage),
        [("d1".to_owned(), 2), ("d2".to_owned(), 1)]
    );
    assert_eq!(stage.source_state().expect("state"), Some(vec![1]));
    let report = checkpoint::check(&stage).expect("check");
    assert!(
        report.problems.is_empty() && report.warnings.is_empty(),
        "{report:?}"
    );
    assert!(
        std::fs::read_dir(dir.path().join("load"))
            .expect("load folder")
            .next()
            .is_none(),
        "every prepared file was ingested"
    );
}

/// A part's entries go to the table file in key order, and of two with one key (a
/// source that repeats a key it says is unique) the last, as a write batch would.
#[test]
fn a_first_load_part_ingests_its_rows_in_key_order_and_keeps_the_last_of_a_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let mut part: Vec<StageChange> = (0..500).rev().map(|id| upsert(id, "d1", 50)).collect();
    part.push(noted(7, "d1", 50, "second"));
    stage.apply_load(&part, 50, true, true).expect("part");
    let rows = stage
        .read_partition("public.t", &p("d1"))
        .expect("rows")
        .rows;
    assert_eq!(rows.len(), 500);
    assert_eq!(
        note_of(&stage, 7).map(|(_, v)| v),
        Some(Value::Text("second".into()))
    );
    assert!(
        checkpoint::check(&stage)
            .expect("check")
            .problems
            .is_empty()
    );
}

/// The writer's merge-or-replace test (read side by side, stopping when the answer is
/// known) answers whether fewer than half the rows changed; the survey counts the rows
/// and finds their latest commit time.
#[test]
fn a_survey_counts_rows_and_the_minority_test_agrees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    // Row `id` committed at time 1000 + id.
    let timed = |id: i64, day: &str, pos: u64| {
        let mut change = upsert(id, day, pos);
        if let StageChange::Upsert { row, .. } = &mut change {
            row.commit_time_us = Some(1_000 + id);
        }
        change
    };
    let mut position = 10;
    for rows in 0..9i64 {
        let day = format!("d{rows}");
        if rows > 0 {
            let changes = (1..=rows).map(|id| timed(id, &day, position)).collect();
            stage.apply(&[txn(position, changes)]).expect("apply");
            position += 10;
        }
        let dirty = stage
            .read_changes("public.t", &p(&day))
            .expect("read")
            .dirty;
        if let Some(dirty) = dirty {
            stage
                .clear_dirty("public.t", &p(&day), dirty)
                .expect("clear");
        }
        for changed in 0..=rows {
            if changed > 0 {
                let again = (1..=changed).map(|id| timed(id, &day, position)).collect();
                stage.apply(&[txn(position, again)]).expect("apply");
                position += 10;
            }
            let snap = stage
                .snapshot_partition("public.t", &p(&day))
                .expect("snap");
            let survey = snap.survey().expect("survey");
            assert_eq!(survey.rows, u64::try_from(rows).expect("rows"));
            assert_eq!(survey.max_commit_time, (rows > 0).then_some(1_000 + rows));
            let want = rows > 2 * changed;
            assert_eq!(
                snap.changed_minority().expect("side by side"),
                want,
                "{changed} of {rows}"
            );
        }
    }
}

/// Rounds of a live stream whose changes all land in one partition: each changes
/// `per_round` new keys, then the partition is written and its changed keys cleared.
/// Returns how many deleted or hidden entries a scan of its changed keys then steps over.
fn tombstones_under_a_scan(compact: bool, per_round: i64) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let keys = i64::try_from(3 * super::read::COMPACT_CHANGED_AFTER).expect("fits");
    for round in 0..(keys + per_round - 1) / per_round {
        let pos = u64::try_from(round + 1).expect("fits") * 10;
        let changes = (1..=per_round)
            .map(|i| upsert(round * per_round + i, "d1", pos))
            .collect();
        stage.apply(&[txn(pos, changes)]).expect("apply");
        let dirty = stage
            .read_changes("public.t", &p("d1"))
            .expect("read")
            .dirty;
        assert!(
            stage
                .clear_dirty("public.t", &p("d1"), dirty.expect("dirty"))
                .expect("clear")
        );
        if compact && stage.compaction_due() {
            stage.compact_cleared();
        }
    }
    stage
        .apply(&[txn(1 << 40, vec![upsert(0, "d1", 1 << 40)])])
        .expect("apply");
    rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::EnableCount);
    let mut perf = rocksdb::perf::PerfContext::default();
    perf.reset();
    let snap = stage
        .snapshot_partition("public.t", &p("d1"))
        .expect("snap");
    let changed: usize = snap.changed_keys().map(|c| c.expect("keys").len()).sum();
    assert_eq!(changed, 1);
    perf.metric(rocksdb::perf::PerfMetric::InternalDeleteSkippedCount)
        + perf.metric(rocksdb::perf::PerfMetric::InternalKeySkippedCount)
}

/// The tombstones clearing leaves are compacted away: a scan of a partition's changed
/// keys steps over about one compaction's worth at most (the first clear of a partition
/// is not counted), however long the stream ran (without compacting, over every key
/// ever cleared and the record each one hides). A partition cleared of
/// more than `CLEAR_POINT_DELETES_MAX` keys at once gets one range tombstone, which a
/// scan seeks past: those clears need no compaction (and `--once`, which clears each
/// partition once, whole, compacts nothing).
#[test]
fn cleared_changed_keys_do_not_pile_up_under_a_scan() {
    // Each cleared key leaves a tombstone over the record it deletes: a scan steps
    // over both until a compaction drops them.
    let cleared = 3 * super::read::COMPACT_CHANGED_AFTER;
    let without = tombstones_under_a_scan(false, 100);
    assert!(
        without >= 2 * cleared - 200,
        "the control steps over them all: {without}"
    );
    let with = tombstones_under_a_scan(true, 100);
    assert!(
        with < 2 * (super::read::COMPACT_CHANGED_AFTER + 200),
        "{with} entries stepped over after {cleared} keys cleared"
    );
    let ranged = tombstones_under_a_scan(false, 5_000);
    assert!(
        ranged < 100,
        "{ranged} entries stepped over under range tombstones"
    );
}

/// A write overtaken by new changes to its partition leaves the mark, and the records
/// of the keys changed since; it clears the records of the keys it covered, so the
/// next write merges only what changed after it. A deleted key's record is one of
/// those. The next write, not overtaken, clears the rest and the mark.
#[test]
fn a_write_overtaken_by_changes_clears_only_the_keys_it_covered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let day = p("d1");
    let key = |id: i64| encode_key(&[&Value::Int(id)]).expect("key");
    let changed = |stage: &Stage| {
        let snap = stage.snapshot_partition("public.t", &day).expect("snap");
        let keys: Vec<Vec<u8>> = snap
            .changed_keys()
            .flat_map(|chunk| chunk.expect("keys"))
            .collect();
        (snap.dirty, keys)
    };
    written_empty(&stage, &["d1"]);
    let mut first: Vec<StageChange> = (1..=5).map(|id| upsert(id, "d1", 10)).collect();
    first.push(StageChange::Delete {
        table: "public.t".into(),
        key: key(5),
    });
    stage.apply(&[txn(10, first)]).expect("apply");
    let (written, keys) = changed(&stage);
    let written = written.expect("dirty");
    assert_eq!(keys.len(), 5);
    // Keys 3 and 6 change while the partition is written.
    stage
        .apply(&[txn(20, vec![upsert(3, "d1", 20), upsert(6, "d1", 20)])])
        .expect("apply");
    assert!(!stage.clear_dirty("public.t", &day, written).expect("clear"));
    let (dirty, keys) = changed(&stage);
    let newer = dirty.expect("still dirty");
    assert!(newer > written);
    assert_eq!(keys, [key(3), key(6)]);
    // The backlog is what is left to write: those two rows and their keys.
    let left: u64 = [3, 6]
        .iter()
        .map(|&id| {
            let row = postcard::to_allocvec(&row(id, "d1", 20)).expect("encode");
            (key(id).len() + row.len()) as u64
        })
        .sum();
    assert_eq!(stage.unwritten_bytes().expect("backlog"), left);
    assert!(stage.clear_dirty("public.t", &day, newer).expect("clear"));
    assert_eq!(changed(&stage), (None, vec![]));
}

#[test]
fn a_partition_new_to_the_stage_is_changed_whole_without_a_record_per_key_until_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    written_empty(&stage, &["old"]);
    // The partition's `changed` records, read without a snapshot (which would count as
    // a writer's read): `None` for the every-key record.
    let records = |day: &str| -> Vec<Option<i64>> {
        let prefix = partition_key("public.t", &p(day));
        stage
            .db
            .prefix_iterator_cf(stage.cf(CF_CHANGED), &prefix)
            .map(|item| item.expect("record").0)
            .take_while(|k| k.starts_with(&prefix))
            .map(|k| {
                (k.len() > prefix.len()).then(|| {
                    match decode_key(&k[prefix.len()..]).expect("key").as_slice() {
                        [Value::Int(id)] => *id,
                        other => panic!("unexpected key {other:?}"),
                    }
                })
            })
            .collect()
    };
    stage
        .apply(&[txn(
            10,
            vec![
                upsert(1, "new", 10),
                upsert(2, "new", 10),
                upsert(3, "old", 10),
            ],
        )])
        .expect("apply");
    // The new partition holds the every-key record only; the known one its key.
    assert_eq!(records("new"), [None]);
    assert_eq!(records("old"), [Some(3)]);
    stage
        .apply(&[txn(20, vec![upsert(4, "new", 20)])])
        .expect("apply");
    assert_eq!(records("new"), [None]);
    // A writer reads it, and a change comes while it writes: the change is recorded by
    // key, so that the overtaken write's clear leaves it alone, and the next write
    // merges it rather than replacing the partition again.
    let read = stage.read_changes("public.t", &p("new")).expect("read");
    assert!(read.whole);
    stage
        .apply(&[txn(30, vec![upsert(5, "new", 30)])])
        .expect("apply");
    assert_eq!(records("new"), [None, Some(5)]);
    assert!(
        !stage
            .clear_dirty("public.t", &p("new"), read.dirty.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(changed_ids(&stage, "new"), (false, vec![(5, true)]));
    // The backlog is what is left to write: key 5 here, key 3 in the other partition.
    let bytes = |id: i64, day: &str, pos: u64| {
        let row = postcard::to_allocvec(&row(id, day, pos)).expect("encode");
        let key = encode_key(&[&Value::Int(id)]).expect("key");
        (key.len() + row.len()) as u64
    };
    assert_eq!(
        stage.unwritten_bytes().expect("backlog"),
        bytes(5, "new", 30) + bytes(3, "old", 10)
    );
    let read = stage.read_changes("public.t", &p("new")).expect("read");
    assert!(
        stage
            .clear_dirty("public.t", &p("new"), read.dirty.expect("dirty"))
            .expect("clear")
    );
    assert_eq!(records("new"), []);
    // Keys 1, 2, 4 and 5 are staged in it.
    let rows = stage.read_partition("public.t", &p("new")).expect("rows");
    assert_eq!(rows.rows.len(), 4);
}

#[test]
fn a_dirty_partition_without_changed_keys_stays_changed_whole_when_a_key_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    written_empty(&stage, &["d1"]);
    stage
        .apply(&[txn(10, vec![upsert(1, "d1", 10), upsert(2, "d1", 10)])])
        .expect("apply");
    // What a stage imported from a checkpoint file holds: the mark, no changed keys.
    let prefix = partition_key("public.t", &p("d1"));
    stage
        .db
        .delete_range_cf(stage.cf(CF_CHANGED), &prefix, &prefix_end(&prefix))
        .expect("delete");
    assert_eq!(changed_ids(&stage, "d1"), (true, vec![]));
    // A change to it before it is written: its next write still replaces it (merging
    // key 3 alone would leave keys 1 and 2 out of the target).
    stage
        .apply(&[txn(20, vec![upsert(3, "d1", 20)])])
        .expect("apply");
    assert_eq!(changed_ids(&stage, "d1"), (true, vec![(3, true)]));
}

/// The write-ahead log is bounded: a family written rarely (the position's) kept every
/// log file alive, and a live run's stage grew by all it wrote until a restart. And the
/// table files' filters are partitioned.
#[test]
fn the_write_ahead_log_is_bounded_and_filters_are_partitioned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _stage = Stage::open(dir.path(), "test").expect("open");
    let options = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
        .map(|e| std::fs::read_to_string(e.path()).expect("options"))
        .last()
        .expect("an OPTIONS file");
    assert!(
        options.contains("max_total_wal_size=134217728"),
        "{options}"
    );
    // Filters and indexes in partitions the block cache keeps (a whole filter larger
    // than a cache shard was read from the file again at every lookup).
    for want in [
        "partition_filters=true",
        "index_type=kTwoLevelIndexSearch",
        "metadata_block_size=4096",
        "pin_top_level_index_and_filter=true",
    ] {
        assert!(options.contains(want), "{want}: {options}");
    }
}

/// A chunk larger than the memtables' whole budget (a row of hundreds of MB in a large
/// transaction) does not stall the writes after it for good.
#[test]
fn a_write_larger_than_the_memtables_budget_does_not_stall_the_next_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "test").expect("open");
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let big = StageChange::SourceState(vec![7u8; 140 << 20]);
        let small = StageChange::SourceState(vec![1u8; 16]);
        // A transaction streamed in progress: its chunk goes to its area, then, at
        // its commit, to the pending area (the path of a 200 MB row that hung intake).
        stage
            .append_stream(9, &[(9, big)])
            .expect("large streamed chunk");
        stage.stage_stream(9, &[], 100, 0).expect("streamed commit");
        for _ in 0..3 {
            stage
                .append_pending(std::slice::from_ref(&small))
                .expect("small chunk");
        }
        let _ = done.send(stage.has_pending().expect("pending"));
    });
    assert_eq!(
        wait.recv_timeout(std::time::Duration::from_secs(120)),
        Ok(true),
        "the writes after a large one were stalled"
    );
}
