//! The consistency check of `weir checkpoint check`.
//!
//! Reads every column family completely from one snapshot with checksum verification
//! and reports *problems* (the stage is damaged or inconsistent) and *warnings* (legal
//! states worth knowing). Problems: a RocksDB read error (for example a checksum
//! mismatch in an SST file) named by family; a record that does not decode; a row
//! without its `keys` entry or whose `keys` entry names another partition; a `keys`
//! entry without its row; a partition holding rows without a generation; a dirty mark
//! without a generation or with a newer generation than its `generations` entry; a
//! generation above the stage's generation counter; rows but no position; a row or a
//! dead letter newer than the position (outside a large commit); a missing or unknown
//! format version or source id; a large-transaction marker without pending chunks.
//! Warnings: pending chunks without a marker (a transaction being received by a live
//! `weir run`, or left over by a dead one: they are removed when the stage is next
//! opened for writing), a large transaction being applied (a live `weir run`
//! finishes it within seconds; after a crash, the next `weir run` does), and a first
//! load's part being ingested (the same; its keys without rows, rows without
//! generations and rows past the position are then not problems). Repeated
//! problems of one kind are listed ten times, then counted.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use rocksdb::{IteratorMode, Snapshot};
use serde::Serialize;

use super::checkpoint::CheckpointError;
use super::checkpoint::reader::{read_opts, scan_opts};
use super::layout::{
    CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META, CF_PENDING, CF_POSITION, CF_ROWS,
    FORMAT_VERSION, META_APPLYING, META_FORMAT_VERSION, META_GENERATION, META_LOADING,
    META_SOURCE_ID, POSITION_KEY, be_u32, be_u64, partition_key, row_key, split_partition_key,
    split_row_key, split_table, table_key,
};
use super::pending::ApplyingMarker;
use super::{Stage, StageChange, StagedRow};
use crate::feed::{BadRecord, Position};
use crate::partition::Partition;

/// Problems of one kind listed before the rest are only counted.
const PROBLEMS_PER_KIND: u64 = 10;

/// One thing wrong (or worth knowing) about a stage, by column family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub family: &'static str,
    pub description: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.family, self.description)
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    pub rows: u64,
    pub checkpoint: Option<Position>,
    /// The stage is damaged or inconsistent.
    pub problems: Vec<Problem>,
    /// Legal states worth knowing (see the module documentation).
    pub warnings: Vec<Problem>,
}

impl CheckReport {
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Problems, at most [`PROBLEMS_PER_KIND`] different ones of each kind, the rest
/// (and repeats, such as one damaged block met by many lookups) counted.
#[derive(Default)]
struct Findings {
    report: CheckReport,
    /// Per (family, kind): problems found, problems listed.
    per_kind: BTreeMap<(&'static str, &'static str), (u64, u64)>,
}

impl Findings {
    fn problem(&mut self, family: &'static str, kind: &'static str, description: String) {
        let (found, listed) = self.per_kind.entry((family, kind)).or_insert((0, 0));
        *found += 1;
        let repeat = self
            .report
            .problems
            .iter()
            .any(|p| p.family == family && p.description == description);
        if *listed < PROBLEMS_PER_KIND && !repeat {
            *listed += 1;
            self.report.problems.push(Problem {
                family,
                description,
            });
        }
    }

    fn warning(&mut self, family: &'static str, description: String) {
        self.report.warnings.push(Problem {
            family,
            description,
        });
    }

    fn finish(mut self) -> CheckReport {
        for ((family, kind), (found, listed)) in self.per_kind {
            if found > listed {
                self.report.problems.push(Problem {
                    family,
                    description: format!("{} more problems of this kind: {kind}", found - listed),
                });
            }
        }
        self.report
    }
}

/// Reads every column family of the stage completely, from one snapshot, verifying
/// block checksums, and reports what is wrong. A read error is a problem, not an
/// error: the report names the family.
pub fn check(stage: &Stage) -> Result<CheckReport, CheckpointError> {
    let started = Instant::now();
    let snap = stage.db.snapshot();
    let mut c = Checker {
        stage,
        snap: &snap,
        f: Findings::default(),
    };
    c.run();
    let report = c.f.finish();
    tracing::info!(
        rows = report.rows,
        problems = report.problems.len(),
        warnings = report.warnings.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "stage checked"
    );
    Ok(report)
}

struct Checker<'a> {
    stage: &'a Stage,
    snap: &'a Snapshot<'a>,
    f: Findings,
}

/// A point read of [`Checker`].
enum Lookup {
    Found(Vec<u8>),
    Absent,
    /// The read failed (already reported as a problem).
    Failed,
}

impl Checker<'_> {
    fn get(&mut self, family: &'static str, key: &[u8]) -> Lookup {
        let (stage, snap) = (self.stage, self.snap);
        match snap.get_cf_opt(stage.cf(family), key, read_opts()) {
            Ok(Some(v)) => Lookup::Found(v),
            Ok(None) => Lookup::Absent,
            Err(e) => {
                self.f
                    .problem(family, "read error", format!("read failed: {e}"));
                Lookup::Failed
            }
        }
    }

    /// Every entry of `family`; a read error ends the scan and is a problem.
    fn scan(&mut self, family: &'static str, mut each: impl FnMut(&mut Self, &[u8], &[u8])) {
        let (stage, snap) = (self.stage, self.snap);
        let mut n = 0u64;
        for item in snap.iterator_cf_opt(stage.cf(family), scan_opts(), IteratorMode::Start) {
            match item {
                Ok((k, v)) => {
                    n += 1;
                    each(self, &k, &v);
                }
                Err(e) => {
                    self.f.problem(
                        family,
                        "read error",
                        format!("reading the family failed after {n} entries: {e}"),
                    );
                }
            }
        }
    }

    /// `decoded`, or `None` with a problem of `family` and `kind` reported: the one
    /// shape of every "this record does not decode" finding.
    fn decoded<T>(
        &mut self,
        family: &'static str,
        kind: &'static str,
        decoded: Option<T>,
        description: impl FnOnce() -> String,
    ) -> Option<T> {
        if decoded.is_none() {
            self.f.problem(family, kind, description());
        }
        decoded
    }

    /// Every family in turn; each later check uses what the earlier ones read.
    fn run(&mut self) {
        let meta = self.meta();
        let checkpoint = self.position();
        self.f.report.checkpoint = checkpoint;
        // A large transaction being applied writes rows and dead letters past the
        // position until it commits; so does a first-load part being ingested.
        let limit = if meta.applying.is_some() || meta.loading {
            None
        } else {
            checkpoint.map(|c| c.position)
        };
        self.pending(&meta);
        if meta.loading {
            self.f.warning(
                CF_META,
                "a part of a first load is being ingested: a running `weir run` finishes it at once; otherwise the next `weir run` or `weir init` does".into(),
            );
        }
        let rows = self.rows(limit, meta.loading);
        self.f.report.rows = rows;
        if rows > 0 && checkpoint.is_none() && meta.applying.is_none() && !meta.loading {
            self.f.problem(
                CF_POSITION,
                "missing",
                format!("the stage holds {rows} rows but no position"),
            );
        }
        self.keys(meta.loading);
        self.generations(meta.generation);
        self.dirty(meta.generation);
        self.dead_letters(limit);
    }

    /// `meta`: the format version and source id are there and decode, as do the
    /// generation counter and the large-transaction marker.
    fn meta(&mut self) -> Meta {
        let mut meta: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        self.scan(CF_META, |_, k, v| {
            meta.insert(k.to_vec(), v.to_vec());
        });
        match meta.get(META_FORMAT_VERSION) {
            None => self
                .f
                .problem(CF_META, "format version", "no format version record".into()),
            Some(v) => {
                let version = self.decoded(CF_META, "format version", be_u32(v), || {
                    "the format version record does not decode".into()
                });
                if let Some(v) = version.filter(|v| *v != FORMAT_VERSION) {
                    self.f.problem(
                        CF_META,
                        "format version",
                        format!("format version {v}, but this build reads {FORMAT_VERSION}"),
                    );
                }
            }
        }
        match meta.get(META_SOURCE_ID) {
            None => self
                .f
                .problem(CF_META, "source id", "no source id record".into()),
            Some(v) => {
                self.decoded(CF_META, "source id", std::str::from_utf8(v).ok(), || {
                    "the source id is not UTF-8".into()
                });
            }
        }
        let generation = match meta.get(META_GENERATION) {
            None => 0,
            Some(v) => self
                .decoded(CF_META, "generation", be_u64(v), || {
                    "the generation counter does not decode".into()
                })
                .unwrap_or(u64::MAX),
        };
        let applying = meta.get(META_APPLYING).and_then(|v| {
            self.decoded(
                CF_META,
                "marker",
                postcard::from_bytes::<ApplyingMarker>(v).ok(),
                || "the large-transaction marker does not decode".into(),
            )
        });
        Meta {
            generation,
            applying,
            loading: meta.contains_key(META_LOADING),
        }
    }

    /// `position`: one record, under its key, that decodes.
    fn position(&mut self) -> Option<Position> {
        let mut checkpoint: Option<Position> = None;
        self.scan(CF_POSITION, |c, k, v| {
            if k != POSITION_KEY {
                c.f.problem(
                    CF_POSITION,
                    "unknown key",
                    format!("unexpected key {}", hex::encode(k)),
                );
                return;
            }
            let decoded = postcard::from_bytes::<Position>(v).ok();
            if let Some(p) = c.decoded(CF_POSITION, "decode", decoded, || {
                "the position does not decode".into()
            }) {
                checkpoint = Some(p);
            }
        });
        checkpoint
    }

    /// `pending`: chunks decode, and there are chunks exactly when a marker says a
    /// large transaction is being applied (chunks alone are a warning).
    fn pending(&mut self, meta: &Meta) {
        let mut chunks = 0u64;
        self.scan(CF_PENDING, |c, k, v| {
            chunks += 1;
            let decodes = k.len() == 8 && postcard::from_bytes::<Vec<StageChange>>(v).is_ok();
            c.decoded(CF_PENDING, "decode", decodes.then_some(()), || {
                format!("pending chunk {} does not decode", hex::encode(k))
            });
        });
        match (meta.applying, chunks) {
            (None, 0) => {}
            (None, n) => self.f.warning(
                CF_PENDING,
                format!(
                    "leftover pending chunks: {n} (they are removed when the stage is next opened for writing; a running `weir run` may be receiving a large transaction)"
                ),
            ),
            (Some(m), 0) => self.f.problem(
                CF_META,
                "marker",
                format!(
                    "a large transaction (position {}) is marked as being applied, but the pending area is empty",
                    m.checkpoint.position
                ),
            ),
            (Some(m), n) => self.f.warning(
                CF_META,
                format!(
                    "a large transaction (position {}, {n} chunks) is being applied: a running `weir run` finishes it within seconds; otherwise the next `weir run` does",
                    m.checkpoint.position
                ),
            ),
        }
        if let Some(m) = meta.applying.filter(|m| m.generation > meta.generation) {
            self.f.problem(
                CF_META,
                "generation",
                format!(
                    "the large transaction's generation {} is above the counter {}",
                    m.generation, meta.generation
                ),
            );
        }
    }

    /// `rows`: each decodes, is not past the position `limit`, has its `keys` entry,
    /// and its partition a generation. Returns how many rows there are.
    fn rows(&mut self, limit: Option<u64>, loading: bool) -> u64 {
        let mut rows = 0u64;
        let mut last_partition: Option<Vec<u8>> = None;
        self.scan(CF_ROWS, |c, k, v| {
            rows += 1;
            let Some((table, partition, key)) =
                c.decoded(CF_ROWS, "key", split_row_key(k), || {
                    format!("a row key does not decode: {}", hex::encode(k))
                })
            else {
                return;
            };
            let row = postcard::from_bytes::<StagedRow>(v).ok();
            let row = c.decoded(CF_ROWS, "decode", row, || {
                format!("a row of {table} partition {partition} does not decode")
            });
            if let Some(row) = row
                && let Some(p) = limit.filter(|p| row.commit_position > *p)
            {
                c.f.problem(
                    CF_ROWS,
                    "position",
                    format!(
                        "a row of {table} partition {partition} was written at position {}, after the stage position {p}",
                        row.commit_position
                    ),
                );
            }
            match c.get(CF_KEYS, &table_key(&table, key)) {
                Lookup::Absent => c.f.problem(
                    CF_KEYS,
                    "missing",
                    format!(
                        "no keys entry for a row of {table} partition {partition} (key {})",
                        hex::encode(key)
                    ),
                ),
                Lookup::Found(p) if p != partition.to_bytes() => c.f.problem(
                    CF_KEYS,
                    "partition",
                    format!(
                        "the keys entry of a row of {table} partition {partition} (key {}) names partition {}",
                        hex::encode(key),
                        Partition::from_bytes(&p).map_or_else(|| "(undecodable)".to_owned(), |p| p.to_string())
                    ),
                ),
                Lookup::Found(_) | Lookup::Failed => {}
            }
            let pk = partition_key(&table, &partition);
            if last_partition.as_deref() != Some(pk.as_slice()) {
                if !loading && matches!(c.get(CF_GENERATIONS, &pk), Lookup::Absent) {
                    c.f.problem(
                        CF_GENERATIONS,
                        "missing",
                        format!("partition {partition} of {table} holds rows but has no generation"),
                    );
                }
                last_partition = Some(pk);
            }
        });
        rows
    }

    /// `keys`: each names a partition holding its row (unless a first-load part is
    /// being ingested).
    fn keys(&mut self, loading: bool) {
        self.scan(CF_KEYS, |c, k, v| {
            let Some((table, key)) = c.decoded(CF_KEYS, "key", split_table(k), || {
                format!("a keys entry does not decode: {}", hex::encode(k))
            }) else {
                return;
            };
            let Some(partition) = c.decoded(CF_KEYS, "decode", Partition::from_bytes(v), || {
                format!(
                    "the keys entry of {table} key {} names no partition",
                    hex::encode(key)
                )
            }) else {
                return;
            };
            if !loading && matches!(c.get(CF_ROWS, &row_key(&table, &partition, key)), Lookup::Absent) {
                c.f.problem(
                    CF_ROWS,
                    "missing",
                    format!(
                        "the keys entry of {table} key {} names partition {partition}, which has no such row",
                        hex::encode(key)
                    ),
                );
            }
        });
    }

    /// `generations`: decode, and not above the counter.
    fn generations(&mut self, counter: u64) {
        self.scan(CF_GENERATIONS, |c, k, v| {
            let Some((table, partition)) =
                c.decoded(CF_GENERATIONS, "key", split_partition_key(k), || {
                    format!("a generations key does not decode: {}", hex::encode(k))
                })
            else {
                return;
            };
            let Some(g) = c.decoded(CF_GENERATIONS, "decode", be_u64(v), || {
                format!("the generation of {table} partition {partition} does not decode")
            }) else {
                return;
            };
            if g > counter {
                c.f.problem(
                    CF_GENERATIONS,
                    "counter",
                    format!(
                        "{table} partition {partition} has generation {g}, above the counter {counter}"
                    ),
                );
            }
        });
    }

    /// `dirty`: decode, a generation at least as new, not above the counter.
    fn dirty(&mut self, counter: u64) {
        self.scan(CF_DIRTY, |c, k, v| {
            let Some((table, partition)) = c.decoded(CF_DIRTY, "key", split_partition_key(k), || {
                format!("a dirty key does not decode: {}", hex::encode(k))
            }) else {
                return;
            };
            let Some(d) = c.decoded(CF_DIRTY, "decode", be_u64(v), || {
                format!("the dirty mark of {table} partition {partition} does not decode")
            }) else {
                return;
            };
            if d > counter {
                c.f.problem(
                    CF_DIRTY,
                    "counter",
                    format!(
                        "{table} partition {partition} is dirty at generation {d}, above the counter {counter}"
                    ),
                );
            }
            match c.get(CF_GENERATIONS, k) {
                Lookup::Absent => c.f.problem(
                    CF_GENERATIONS,
                    "missing",
                    format!("{table} partition {partition} is dirty but has no generation"),
                ),
                Lookup::Found(g) if be_u64(&g).is_some_and(|g| g < d) => c.f.problem(
                    CF_GENERATIONS,
                    "older",
                    format!(
                        "{table} partition {partition} is dirty at generation {d}, newer than its generation {}",
                        be_u64(&g).unwrap_or_default()
                    ),
                ),
                // An undecodable generation is reported by the generations scan.
                Lookup::Found(_) | Lookup::Failed => {}
            }
        });
    }

    /// `dead_letter`: decode, keyed by their position, not past the position `limit`.
    fn dead_letters(&mut self, limit: Option<u64>) {
        self.scan(CF_DEAD_LETTER, |c, k, v| {
            let decoded = be_u64(k).zip(postcard::from_bytes::<BadRecord>(v).ok());
            let Some((p, record)) = c.decoded(CF_DEAD_LETTER, "decode", decoded, || {
                format!("a dead letter does not decode (key {})", hex::encode(k))
            }) else {
                return;
            };
            if p != record.position {
                c.f.problem(
                    CF_DEAD_LETTER,
                    "key",
                    format!("a dead letter keyed {p} holds position {}", record.position),
                );
            } else if let Some(limit) = limit.filter(|l| p >= *l) {
                c.f.problem(
                    CF_DEAD_LETTER,
                    "position",
                    format!(
                        "a dead letter at position {p}, at or after the stage position {limit}"
                    ),
                );
            }
        });
    }
}

/// What the `meta` check read that later checks need.
struct Meta {
    /// The generation counter (`u64::MAX` if it does not decode, so that no
    /// generation is reported as above it).
    generation: u64,
    /// The large-transaction marker, if there is one and it decodes.
    applying: Option<ApplyingMarker>,
    /// A first-load part is marked as being ingested (`bulk.rs`): until it is rolled
    /// forward, its keys may be in without its rows, and its rows without their
    /// partitions' generations.
    loading: bool,
}
