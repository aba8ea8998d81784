//! Model-based test of the stage: random sequences of transactions (inserts, updates,
//! deletes, partition moves, large transactions committed, aborted or interrupted by a
//! crash), restarts, and partition jobs run against the real stage and against a small
//! in-memory model. After every step the visible rows, the dirty set and the position
//! must agree.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::feed::Op;

const TABLE: &str = "public.t";

/// One step of a run.
#[derive(Debug, Clone)]
enum Step {
    /// A transaction of (key, new partition or delete) changes.
    Txn(Vec<(u8, Option<u8>)>),
    /// The same, delivered as chunks of `chunk` changes through the pending area.
    LargeTxn {
        changes: Vec<(u8, Option<u8>)>,
        chunk: usize,
    },
    /// Chunks staged, then the transaction aborts.
    AbortedLarge(Vec<(u8, Option<u8>)>),
    /// Chunks staged, the commit marker written, then the process dies.
    CrashWhileCommitting(Vec<(u8, Option<u8>)>),
    /// Chunks staged, then the process dies before the commit.
    CrashBeforeCommit(Vec<(u8, Option<u8>)>),
    /// Close and reopen the stage.
    Restart,
    /// A partition job: read the partition, then compare-and-clear its dirty mark.
    Job(u8),
    /// A job that reads, then a transaction lands, then it tries to clear.
    RacingJob {
        partition: u8,
        changes: Vec<(u8, Option<u8>)>,
    },
    /// A transaction re-delivered after it was staged: must be skipped whole.
    Redeliver,
}

fn changes() -> impl Strategy<Value = Vec<(u8, Option<u8>)>> {
    prop::collection::vec((0u8..12, prop::option::weighted(0.8, 0u8..4)), 1..8)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => changes().prop_map(Step::Txn),
        2 => (changes(), 1usize..4).prop_map(|(changes, chunk)| Step::LargeTxn { changes, chunk }),
        1 => changes().prop_map(Step::AbortedLarge),
        1 => changes().prop_map(Step::CrashWhileCommitting),
        1 => changes().prop_map(Step::CrashBeforeCommit),
        1 => Just(Step::Restart),
        3 => (0u8..4).prop_map(Step::Job),
        1 => (0u8..4, changes()).prop_map(|(partition, changes)| Step::RacingJob { partition, changes }),
        1 => Just(Step::Redeliver),
    ]
}

fn part(p: u8) -> Partition {
    Partition::Key(format!("p{p}"))
}

fn key(k: u8) -> Vec<u8> {
    encode_key(&[&Value::Int(i64::from(k))]).expect("integer key")
}

/// The model: what the stage must show.
#[derive(Debug, Default)]
struct Model {
    /// key → (partition, position of the transaction that wrote it)
    rows: BTreeMap<u8, (u8, u64)>,
    dirty: BTreeMap<u8, u64>,
    generation: u64,
    position: Option<u64>,
}

impl Model {
    fn apply(&mut self, end: u64, changes: &[(u8, Option<u8>)]) {
        if self.position.is_some_and(|p| end <= p) {
            return;
        }
        self.generation += 1;
        for (k, target) in changes {
            let old = self.rows.get(k).map(|(p, _)| *p);
            match target {
                Some(p) => {
                    if let Some(old) = old.filter(|old| old != p) {
                        self.dirty.insert(old, self.generation);
                    }
                    self.rows.insert(*k, (*p, end));
                    self.dirty.insert(*p, self.generation);
                }
                None => {
                    if let Some(old) = old {
                        self.rows.remove(k);
                        self.dirty.insert(old, self.generation);
                    }
                }
            }
        }
        self.position = Some(end);
    }
}

fn stage_changes(end: u64, changes: &[(u8, Option<u8>)]) -> Vec<StageChange> {
    changes
        .iter()
        .map(|(k, target)| match target {
            Some(p) => StageChange::Upsert {
                table: TABLE.into(),
                key: key(*k),
                partition: part(*p),
                row: StagedRow {
                    commit_position: end,
                    commit_time_us: None,
                    op: Op::Update,
                    values: vec![("k".into(), Value::Int(i64::from(*k)))],
                },
            },
            None => StageChange::Delete {
                table: TABLE.into(),
                key: key(*k),
            },
        })
        .collect()
}

fn txn(end: u64, changes: &[(u8, Option<u8>)]) -> Transaction {
    Transaction {
        end,
        cursor: end,
        changes: stage_changes(end, changes),
        bad_records: vec![],
    }
}

/// Stages `changes` as chunks through the pending area (all but the last change).
fn stage_chunks(
    stage: &Stage,
    end: u64,
    changes: &[(u8, Option<u8>)],
    chunk: usize,
) -> Transaction {
    let (head, tail) = changes.split_at(changes.len() - 1);
    for piece in head.chunks(chunk.max(1)) {
        stage
            .append_pending(&stage_changes(end, piece))
            .expect("append chunk");
    }
    txn(end, tail)
}

fn check(stage: &Stage, model: &Model) -> Result<(), TestCaseError> {
    let rows: BTreeMap<u8, (u8, u64)> = stage
        .table_rows(TABLE)
        .expect("rows")
        .into_iter()
        .map(|(p, row)| {
            let Value::Int(k) = row.values[0].1 else {
                panic!("integer key")
            };
            let Partition::Key(name) = p else {
                panic!("keyed partition")
            };
            (
                k as u8,
                (name[1..].parse::<u8>().expect("p<n>"), row.commit_position),
            )
        })
        .collect();
    prop_assert_eq!(&rows, &model.rows, "visible rows");
    let dirty: BTreeMap<u8, u64> = stage
        .dirty_partitions()
        .expect("dirty")
        .into_iter()
        .map(|d| {
            let Partition::Key(name) = d.partition else {
                panic!("keyed partition")
            };
            (name[1..].parse::<u8>().expect("p<n>"), d.generation)
        })
        .collect();
    prop_assert_eq!(&dirty, &model.dirty, "dirty set");
    prop_assert_eq!(
        stage.checkpoint().expect("position").map(|c| c.position),
        model.position,
        "position"
    );
    for p in 0..4u8 {
        let read = stage
            .read_partition(TABLE, &part(p))
            .expect("read partition");
        let want = model.rows.values().filter(|(rp, _)| *rp == p).count();
        prop_assert_eq!(read.rows.len(), want, "rows of partition p{}", p);
        prop_assert_eq!(
            read.dirty,
            model.dirty.get(&p).copied(),
            "dirty mark of p{}",
            p
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_stage_agrees_with_the_model(steps in prop::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut stage = Stage::open(dir.path(), "model").expect("open");
        let mut model = Model::default();
        let mut end = 0u64;
        let mut last_txn: Option<Transaction> = None;
        for step in steps {
            match step {
                Step::Txn(changes) => {
                    end += 10;
                    let t = txn(end, &changes);
                    stage.apply(std::slice::from_ref(&t)).expect("apply");
                    model.apply(end, &changes);
                    last_txn = Some(t);
                }
                Step::LargeTxn { changes, chunk } => {
                    end += 10;
                    let tail = stage_chunks(&stage, end, &changes, chunk);
                    stage.apply(&[tail]).expect("commit large");
                    model.apply(end, &changes);
                    last_txn = None;
                }
                Step::AbortedLarge(changes) => {
                    stage_chunks(&stage, end + 10, &changes, 1);
                    stage.discard_pending().expect("abort");
                }
                Step::CrashWhileCommitting(changes) => {
                    end += 10;
                    let tail = stage_chunks(&stage, end, &changes, 2);
                    stage.mark_large(&tail).expect("mark");
                    drop(stage);
                    stage = Stage::open(dir.path(), "model").expect("reopen finishes the commit");
                    model.apply(end, &changes);
                    last_txn = None;
                }
                Step::CrashBeforeCommit(changes) => {
                    stage_chunks(&stage, end + 10, &changes, 1);
                    drop(stage);
                    stage = Stage::open(dir.path(), "model").expect("reopen drops the chunks");
                }
                Step::Restart => {
                    drop(stage);
                    stage = Stage::open(dir.path(), "model").expect("reopen");
                }
                Step::Job(p) => {
                    let read = stage.read_partition(TABLE, &part(p)).expect("read");
                    if let Some(generation) = read.dirty {
                        prop_assert!(stage.clear_dirty(TABLE, &part(p), generation).expect("clear"));
                        model.dirty.remove(&p);
                    }
                }
                Step::RacingJob { partition, changes } => {
                    let read = stage.read_partition(TABLE, &part(partition)).expect("read");
                    end += 10;
                    stage.apply(&[txn(end, &changes)]).expect("apply");
                    model.apply(end, &changes);
                    if let Some(generation) = read.dirty {
                        let cleared = stage.clear_dirty(TABLE, &part(partition), generation).expect("clear");
                        // Cleared exactly when the racing transaction left the mark alone.
                        prop_assert_eq!(cleared, model.dirty.get(&partition) == Some(&generation));
                        if cleared {
                            model.dirty.remove(&partition);
                        }
                    }
                    last_txn = None;
                }
                Step::Redeliver => {
                    if let Some(t) = &last_txn {
                        let outcome = stage.apply(std::slice::from_ref(t)).expect("apply");
                        prop_assert_eq!(outcome.skipped, 1);
                    }
                }
            }
            check(&stage, &model)?;
        }
    }
}
