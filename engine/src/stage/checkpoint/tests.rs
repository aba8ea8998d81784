//! Tests of the checkpoint file format, of export and import, and of the check.

use std::io::Cursor;
use std::path::Path;

use proptest::prelude::*;
use rocksdb::IteratorMode;
use sha2::{Digest, Sha256};

use super::format::*;
use super::*;
use crate::feed::{BadRecord, Op, Position, Transaction};
use crate::partition::Partition;
use crate::stage::layout::*;
use crate::stage::pending::ApplyingMarker;
use crate::stage::{Stage, StageChange, StagedRow, encode_key};
use crate::value::Value;

const TABLE: &str = "public.t";

fn row(id: i64, day: &str, pos: u64) -> StagedRow {
    StagedRow {
        commit_position: pos,
        commit_time_us: Some(1_772_323_200_000_000),
        op: Op::Insert,
        values: vec![
            ("id".into(), Value::Int(id)),
            ("day".into(), Value::Text(day.into())),
            ("note".into(), Value::Json("{\"a\":[1,2]}".into())),
        ],
    }
}

fn key(id: i64) -> Vec<u8> {
    encode_key(&[&Value::Int(id)]).expect("key")
}

fn p(s: &str) -> Partition {
    Partition::Key(s.into())
}

fn sample_records() -> Vec<Record> {
    vec![
        Record::Header {
            stage_format_version: FORMAT_VERSION,
            source_id: "jsonl:/feeds/a.jsonl".into(),
            checkpoint: Some(Position {
                position: 300,
                cursor: 3,
            }),
            generation: 3,
        },
        Record::Row {
            table: TABLE.into(),
            partition: p("d1"),
            key: key(1),
            row: row(1, "d1", 100),
        },
        Record::Row {
            table: TABLE.into(),
            partition: Partition::Null,
            key: key(2),
            row: row(2, "", 200),
        },
        Record::Generation {
            table: TABLE.into(),
            partition: p("d1"),
            generation: 1,
        },
        Record::Generation {
            table: TABLE.into(),
            partition: Partition::Null,
            generation: 3,
        },
        Record::Dirty {
            table: TABLE.into(),
            partition: Partition::Null,
            generation: 3,
        },
        Record::DeadLetter(BadRecord {
            position: 250,
            line: Some(3),
            table: None,
            reason: "not JSON".into(),
            raw: b"{oops".to_vec(),
        }),
        Record::End {
            rows: 2,
            dirty: 1,
            generations: 2,
            dead_letters: 1,
        },
    ]
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut w = RecordWriter::new(Vec::new()).expect("writer");
    for r in records {
        w.record(r).expect("record");
    }
    let (bytes, _, len) = w.finish().expect("finish");
    assert_eq!(len, bytes.len() as u64);
    bytes
}

fn verify_bytes(bytes: &[u8]) -> Result<FileSummary, CheckpointError> {
    verify(Cursor::new(bytes), Path::new("test.ckpt"))
}

/// Re-frames `body` (everything after the preamble, without a checksum) with a
/// correct checksum, as a faulty writer would.
fn with_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
    let digest: [u8; DIGEST_BYTES] = Sha256::digest(&bytes).into();
    bytes.extend_from_slice(&digest);
    bytes
}

fn preamble() -> Vec<u8> {
    let mut out = FILE_MAGIC.to_vec();
    out.extend_from_slice(&FILE_VERSION.to_be_bytes());
    out
}

fn framed(record: &Record) -> Vec<u8> {
    let body = postcard::to_allocvec(record).expect("encode");
    let mut out = u32::try_from(body.len())
        .expect("len")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(&body);
    out
}

#[test]
fn a_well_formed_file_verifies_with_its_counts() {
    let bytes = encode(&sample_records());
    let summary = verify_bytes(&bytes).expect("verifies");
    assert_eq!(
        summary.counts,
        Counts {
            rows: 2,
            generations: 2,
            dirty: 1,
            dead_letters: 1
        }
    );
    assert_eq!(summary.source_id, "jsonl:/feeds/a.jsonl");
    assert_eq!(summary.checkpoint.map(|c| c.position), Some(300));
    assert_eq!(summary.generation, 3);
    assert_eq!(&bytes[..8], b"WEIRCKPT");
    assert_eq!(&bytes[8..12], &FILE_VERSION.to_be_bytes());
    let digest: [u8; 32] = Sha256::digest(&bytes[..bytes.len() - 32]).into();
    assert_eq!(summary.sha256, digest);
}

#[test]
fn every_flipped_bit_is_refused_and_named() {
    let bytes = encode(&sample_records());
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[i] ^= bit;
            let err = verify_bytes(&damaged).expect_err("a flipped bit is refused");
            match i {
                0..8 => assert!(
                    matches!(err, CheckpointError::NotCheckpoint { .. }),
                    "byte {i}: {err}"
                ),
                // A flip to an earlier version this build reads fails the checksum.
                8..12 => assert!(
                    matches!(
                        err,
                        CheckpointError::NewerFileVersion { .. }
                            | CheckpointError::UnknownFileVersion { .. }
                            | CheckpointError::Checksum { .. }
                    ),
                    "byte {i}: {err}"
                ),
                _ => {
                    assert!(
                        matches!(err, CheckpointError::Checksum { .. }),
                        "byte {i}: {err}"
                    );
                    assert!(err.to_string().contains("damaged"), "{err}");
                }
            }
        }
    }
}

#[test]
fn every_truncation_is_refused() {
    let bytes = encode(&sample_records());
    for len in 0..bytes.len() {
        let err = verify_bytes(&bytes[..len]).expect_err("a truncated file is refused");
        if len >= 12 {
            assert!(
                matches!(err, CheckpointError::Checksum { .. }),
                "length {len}: {err}"
            );
        } else if len < 8 {
            assert!(
                matches!(err, CheckpointError::NotCheckpoint { .. }),
                "length {len}: {err}"
            );
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        verify_bytes(&longer),
        Err(CheckpointError::Checksum { .. })
    ));
}

#[test]
fn bad_magic_and_other_versions_are_refused_naming_both_versions() {
    let mut bytes = encode(&sample_records());
    // Version 1 (no source state) is still read.
    bytes[8..12].copy_from_slice(&1u32.to_be_bytes());
    let bytes_v1 = {
        let mut b = bytes[..bytes.len() - 32].to_vec();
        let digest = <sha2::Sha256 as sha2::Digest>::digest(&b);
        b.extend_from_slice(&digest);
        b
    };
    verify_bytes(&bytes_v1).expect("a version 1 file is read");
    bytes[8..12].copy_from_slice(&4u32.to_be_bytes());
    let err = verify_bytes(&bytes).expect_err("newer");
    assert!(
        matches!(err, CheckpointError::NewerFileVersion { found: 4, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("version 4") && text.contains("version 3"),
        "{text}"
    );
    bytes[8..12].copy_from_slice(&0u32.to_be_bytes());
    assert!(matches!(
        verify_bytes(&bytes),
        Err(CheckpointError::UnknownFileVersion { found: 0, .. })
    ));
    let err = verify_bytes(b"PK\x03\x04 this is a zip").expect_err("not ours");
    assert!(
        matches!(err, CheckpointError::NotCheckpoint { .. }),
        "{err}"
    );
    assert!(matches!(
        verify_bytes(b""),
        Err(CheckpointError::NotCheckpoint { .. })
    ));
}

#[test]
fn an_oversized_length_prefix_is_refused_without_reading_it() {
    let mut bytes = preamble();
    bytes.extend_from_slice(&framed(&sample_records()[0]));
    bytes.extend_from_slice(&(MAX_RECORD_BYTES + 1).to_be_bytes());
    bytes.extend_from_slice(&[0; 16]);
    let err = verify_bytes(&with_checksum(bytes)).expect_err("too long");
    assert!(
        matches!(&err, CheckpointError::Malformed { what, .. } if what.contains("limit")),
        "{err}"
    );
    // A length prefix of almost 64 MiB in a small file reads only what is there.
    let mut bytes = preamble();
    bytes.extend_from_slice(&MAX_RECORD_BYTES.to_be_bytes());
    bytes.extend_from_slice(&[7; 100]);
    assert!(matches!(
        verify_bytes(&bytes),
        Err(CheckpointError::Checksum { .. })
    ));
}

#[test]
fn a_well_checksummed_file_with_wrong_structure_is_malformed() {
    let records = sample_records();
    // End counts that do not match.
    let mut bytes = preamble();
    for r in &records[..records.len() - 1] {
        bytes.extend_from_slice(&framed(r));
    }
    bytes.extend_from_slice(&framed(&Record::End {
        rows: 3,
        dirty: 1,
        generations: 2,
        dead_letters: 1,
    }));
    let err = verify_bytes(&with_checksum(bytes)).expect_err("counts");
    assert!(
        matches!(&err, CheckpointError::Malformed { what, .. } if what.contains("counts")),
        "{err}"
    );
    // No header first.
    let mut bytes = preamble();
    for r in &records[1..] {
        bytes.extend_from_slice(&framed(r));
    }
    let err = verify_bytes(&with_checksum(bytes)).expect_err("header");
    assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
    // A record followed by garbage inside its frame.
    let mut bytes = preamble();
    let mut body = postcard::to_allocvec(&records[0]).expect("encode");
    body.push(0);
    bytes.extend_from_slice(&u32::try_from(body.len()).expect("len").to_be_bytes());
    bytes.extend_from_slice(&body);
    let err = verify_bytes(&with_checksum(bytes)).expect_err("trailing");
    assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
    // A generation above the counter.
    let mut bytes = preamble();
    bytes.extend_from_slice(&framed(&records[0]));
    bytes.extend_from_slice(&framed(&Record::Dirty {
        table: TABLE.into(),
        partition: p("d9"),
        generation: 4,
    }));
    let err = verify_bytes(&with_checksum(bytes)).expect_err("generation");
    assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No bytes make the reader panic or allocate without bound.
    #[test]
    fn arbitrary_bytes_after_the_preamble_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..600),
        checksum in any::<bool>(),
    ) {
        let mut bytes = preamble();
        bytes.extend_from_slice(&tail);
        let bytes = if checksum { with_checksum(bytes) } else { bytes };
        prop_assert!(verify_bytes(&bytes).is_err());
    }

    /// A valid file with any one byte replaced is refused.
    #[test]
    fn any_replaced_byte_is_refused(at in any::<prop::sample::Index>(), value in any::<u8>()) {
        let bytes = encode(&sample_records());
        let i = at.index(bytes.len());
        prop_assume!(bytes[i] != value);
        let mut damaged = bytes;
        damaged[i] = value;
        prop_assert!(verify_bytes(&damaged).is_err());
    }
}

// ---- against a real stage ---------------------------------------------------------

fn upsert(id: i64, day: &str, pos: u64) -> StageChange {
    StageChange::Upsert {
        table: TABLE.into(),
        key: key(id),
        partition: p(day),
        row: row(id, day, pos),
    }
}

fn txn(end: u64, changes: Vec<StageChange>) -> Transaction {
    Transaction {
        end,
        cursor: end / 10,
        changes,
        bad_records: vec![],
    }
}

/// A stage with rows in three partitions (one moved, one deleted), a NULL
/// partition, a clean and several dirty partitions, and a dead letter.
fn sample_stage(path: &Path) -> Stage {
    let stage = Stage::open(path, "feed-a").expect("open");
    stage
        .apply(&[
            txn(10, vec![upsert(1, "d1", 10), upsert(2, "d1", 10)]),
            txn(20, vec![upsert(3, "d2", 20)]),
        ])
        .expect("apply");
    let d1 = stage.read_partition(TABLE, &p("d1")).expect("read");
    assert!(
        stage
            .clear_dirty(TABLE, &p("d1"), d1.dirty.expect("dirty"))
            .expect("clear")
    );
    let mut with_bad = txn(
        40,
        vec![
            upsert(2, "d3", 40),
            StageChange::Delete {
                table: TABLE.into(),
                key: key(3),
            },
            StageChange::Upsert {
                table: TABLE.into(),
                key: key(4),
                partition: Partition::Null,
                row: row(4, "", 40),
            },
        ],
    );
    with_bad.bad_records.push(BadRecord {
        position: 31,
        line: Some(4),
        table: Some(TABLE.into()),
        reason: "not JSON".into(),
        raw: b"{oops".to_vec(),
    });
    stage.apply(&[with_bad]).expect("apply");
    stage
}

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Every family but `pending`, plus the meta records, as raw bytes.
/// Every family's entries, but the stage's identity: an imported stage is a stage of
/// its own (lineage written before it merges nothing into it; see `Stage::stage_id`).
fn dump(stage: &Stage) -> Vec<(&'static str, Entries)> {
    [
        CF_ROWS,
        CF_KEYS,
        CF_GENERATIONS,
        CF_DIRTY,
        CF_POSITION,
        CF_DEAD_LETTER,
        CF_META,
    ]
    .into_iter()
    .map(|family| {
        let entries = stage
            .db
            .iterator_cf(stage.cf(family), IteratorMode::Start)
            .map(|item| {
                let (k, v) = item.expect("read");
                (k.to_vec(), v.to_vec())
            })
            // Not exported: an imported stage has a stage id of its own, so its
            // partitions' next writes are replaces, whatever was last written; and it
            // has claimed no target table yet.
            .filter(|(k, _)| {
                !(family == CF_META
                    && (k.as_slice() == b"stage_id"
                        || k.as_slice() == b"claimed"
                        || k.starts_with(b"written\0")))
            })
            .collect();
        (family, entries)
    })
    .collect()
}

#[test]
fn export_then_import_reproduces_every_family() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(&dir.path().join("a"));
    assert!(check(&stage).expect("check").is_healthy());
    let file = dir.path().join("a.ckpt");
    let exported = export(&stage, &file).expect("export");
    assert_eq!(
        exported.counts,
        Counts {
            rows: 3,
            generations: 4,
            dirty: 4,
            dead_letters: 1
        }
    );
    assert!(!dir.path().join("a.ckpt.tmp").exists());
    assert_eq!(
        exported.bytes,
        std::fs::metadata(&file).expect("file").len()
    );

    let b = dir.path().join("nested").join("b");
    let imported = import(&file, &b, "feed-a").expect("import");
    assert_eq!(imported.counts, exported.counts);
    assert!(!dir.path().join("nested").join("b.importing").exists());
    let copy = Stage::open(&b, "feed-a").expect("open the import");
    assert_eq!(dump(&copy), dump(&stage));
    let report = check(&copy).expect("check");
    assert!(report.is_healthy(), "{:?}", report.problems);
    assert_eq!(report.rows, 3);

    // The copy goes on where the original was: positions at or below 40 are
    // skipped, the next generation follows the original's.
    let outcome = copy
        .apply(&[
            txn(40, vec![upsert(9, "d9", 40)]),
            txn(50, vec![upsert(5, "d1", 50)]),
        ])
        .expect("apply");
    assert_eq!((outcome.transactions, outcome.skipped), (1, 1));
    stage
        .apply(&[txn(50, vec![upsert(5, "d1", 50)])])
        .expect("apply");
    assert_eq!(dump(&copy), dump(&stage));
}

#[cfg(unix)]
#[test]
fn new_stages_imports_and_exports_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a");
    let stage = sample_stage(&a);
    assert_eq!(mode(&a), 0o700, "a new stage folder");
    let file = dir.path().join("a.ckpt");
    export(&stage, &file).expect("export");
    assert_eq!(mode(&file), 0o600, "an export");
    let b = dir.path().join("nested").join("b");
    import(&file, &b, "feed-a").expect("import");
    assert_eq!(mode(&b), 0o700, "an imported stage");
}

#[test]
fn import_into_an_empty_stage_replaces_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(&dir.path().join("a"));
    let file = dir.path().join("a.ckpt");
    export(&stage, &file).expect("export");
    let b = dir.path().join("b");
    drop(Stage::open(&b, "feed-a").expect("an empty stage, as `weir init` leaves it"));
    import(&file, &b, "feed-a").expect("import");
    assert!(!dir.path().join("b.replaced").exists());
    assert_eq!(
        dump(&Stage::open(&b, "feed-a").expect("open")),
        dump(&stage)
    );
    // An empty folder is fine too.
    let c = dir.path().join("c");
    std::fs::create_dir(&c).expect("mkdir");
    import(&file, &c, "feed-a").expect("import into an empty folder");
}

#[test]
fn import_refuses_a_full_stage_another_feed_and_a_damaged_file_changing_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("a");
    let stage = sample_stage(&a);
    let file = dir.path().join("a.ckpt");
    export(&stage, &file).expect("export");
    drop(stage);

    let err = import(&file, &a, "feed-a").expect_err("a full stage");
    assert!(matches!(err, CheckpointError::NotEmpty { .. }), "{err}");
    assert!(err.to_string().contains(&a.display().to_string()), "{err}");
    assert!(err.to_string().contains("position 40"), "{err}");

    let b = dir.path().join("b");
    let err = import(&file, &b, "feed-b").expect_err("another feed");
    assert!(
        err.to_string().contains("`feed-a`") && err.to_string().contains("`feed-b`"),
        "{err}"
    );
    assert!(!b.exists());

    let mut bytes = std::fs::read(&file).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    let damaged = dir.path().join("damaged.ckpt");
    std::fs::write(&damaged, &bytes).expect("write");
    let err = import(&damaged, &b, "feed-a").expect_err("damaged");
    assert!(matches!(err, CheckpointError::Checksum { .. }), "{err}");
    assert!(!b.exists());
    assert!(!dir.path().join("b.importing").exists());

    // A leftover of an interrupted import is in the way until removed.
    std::fs::create_dir(dir.path().join("b.importing")).expect("mkdir");
    let err = import(&file, &b, "feed-a").expect_err("in the way");
    assert!(
        matches!(err, CheckpointError::ImportInProgress { .. }),
        "{err}"
    );
    assert!(!b.exists());
}

#[test]
fn export_is_refused_while_a_large_transaction_is_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(&dir.path().join("a"));
    let marker = ApplyingMarker {
        checkpoint: Position {
            position: 90,
            cursor: 9,
        },
        generation: 4,
    };
    let db = &stage.db;
    db.put_cf(
        stage.cf(CF_PENDING),
        0u64.to_be_bytes(),
        postcard::to_allocvec(&vec![upsert(7, "d7", 90)]).expect("encode"),
    )
    .expect("chunk");
    db.put_cf(
        stage.cf(CF_META),
        META_APPLYING,
        postcard::to_allocvec(&marker).expect("encode"),
    )
    .expect("marker");
    db.put_cf(stage.cf(CF_META), META_GENERATION, 4u64.to_be_bytes())
        .expect("generation");
    let file = dir.path().join("a.ckpt");
    let err = export(&stage, &file).expect_err("applying");
    assert!(matches!(err, CheckpointError::Applying { .. }), "{err}");
    assert!(!file.exists() && !dir.path().join("a.ckpt.tmp").exists());
    let summary = summary(&stage).expect("summary");
    assert!(summary.applying);
    assert_eq!(summary.pending_chunks, 1);
    let report = check(&stage).expect("check");
    assert!(report.is_healthy(), "{:?}", report.problems);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
}

#[test]
fn check_names_each_kind_of_inconsistency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(&dir.path().join("a"));
    let db = &stage.db;
    let cf = |name| stage.cf(name);
    // A row whose keys entry is gone, a keys entry without its row, a dirty mark
    // without a generation, a generation above the counter, a row that does not
    // decode, and leftover pending chunks (a warning only).
    db.delete_cf(cf(CF_KEYS), table_key(TABLE, &key(1)))
        .expect("delete");
    db.put_cf(cf(CF_KEYS), table_key(TABLE, &key(8)), p("d1").to_bytes())
        .expect("put");
    db.put_cf(
        cf(CF_DIRTY),
        partition_key(TABLE, &p("d5")),
        1u64.to_be_bytes(),
    )
    .expect("put");
    db.put_cf(
        cf(CF_GENERATIONS),
        partition_key(TABLE, &p("d6")),
        99u64.to_be_bytes(),
    )
    .expect("put");
    db.put_cf(cf(CF_ROWS), row_key(TABLE, &p("d3"), &key(2)), b"\xff\xff")
        .expect("put");
    db.put_cf(cf(CF_PENDING), 0u64.to_be_bytes(), b"\x00")
        .expect("put");
    let report = check(&stage).expect("check");
    let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("no keys entry"), "{text:#?}");
    assert!(has("which has no such row"), "{text:#?}");
    assert!(has("is dirty but has no generation"), "{text:#?}");
    assert!(has("above the counter"), "{text:#?}");
    assert!(has("does not decode"), "{text:#?}");
    assert_eq!(report.problems.len(), 5, "{text:#?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.description.contains("leftover pending chunks")),
        "{:?}",
        report.warnings
    );

    // Rows without a position.
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(dir.path());
    stage
        .db
        .delete_cf(stage.cf(CF_POSITION), POSITION_KEY)
        .expect("delete");
    let report = check(&stage).expect("check");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.family == CF_POSITION && p.description.contains("no position")),
        "{:?}",
        report.problems
    );
}

#[test]
fn many_problems_of_one_kind_are_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = Stage::open(dir.path(), "feed-a").expect("open");
    for id in 0..25 {
        stage
            .db
            .put_cf(
                stage.cf(CF_KEYS),
                table_key(TABLE, &key(id)),
                p("d1").to_bytes(),
            )
            .expect("put");
    }
    let report = check(&stage).expect("check");
    assert_eq!(report.problems.len(), 11, "{:?}", report.problems);
    assert!(
        report.problems[10]
            .description
            .contains("15 more problems of this kind"),
        "{:?}",
        report.problems[10]
    );
}

#[test]
fn summary_counts_what_is_staged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stage = sample_stage(&dir.path().join("a"));
    let s = summary(&stage).expect("summary");
    assert_eq!(s.format_version, FORMAT_VERSION);
    assert_eq!(s.source_id.as_deref(), Some("feed-a"));
    assert_eq!(s.checkpoint.map(|c| c.position), Some(40));
    assert_eq!(s.rows.get(TABLE), Some(&3));
    assert_eq!(
        s.dirty
            .iter()
            .map(|d| d.partition.as_str())
            .collect::<Vec<_>>(),
        ["__null__", "d1", "d2", "d3"]
    );
    assert_eq!(s.dead_letters, 1);
    assert!(!s.applying);
    assert!(s.size_bytes > 0);
}

#[test]
fn a_damaged_table_file_is_a_named_problem_and_a_damaged_open_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a");
    let stage = sample_stage(&path);
    stage.flush().expect("flush");
    drop(stage);
    let largest = std::fs::read_dir(&path)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("an sst file after a flush");
    let mut bytes = std::fs::read(&largest).expect("read");
    let len = bytes.len();
    bytes.truncate(len - 100);
    std::fs::write(&largest, &bytes).expect("write");
    let err = Stage::open_read_only(&path).expect_err("damaged");
    assert!(err.to_string().contains("the stage is damaged"), "{err}");
    let err = Stage::open(&path, "feed-a").expect_err("damaged");
    assert!(err.to_string().contains("the stage is damaged"), "{err}");
}
