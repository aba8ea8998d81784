//! `weir verify`: each partition's output computed twice from the stage (two fresh
//! instances) and compared with each other and with what the target holds, and the
//! grain key checked for uniqueness in both. Every side is streamed: a partition is
//! digested chunk by chunk (row count, an order-independent checksum, 8 bytes per row
//! of grain-key hashes), and only a failed check reads it again, as often as its
//! bounded diagnosis needs (which keys are duplicated, which differ).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};

use std::time::Duration;

use futures_util::StreamExt;

use super::{BackfillError, PlanEntry, Progress};
use crate::config::{Dsn, TableConfig};
use crate::pipeline::{Pipeline, Transform};
use crate::target::{self, Checksum, TargetTable};
use crate::value::Value;

/// The verdict on one partition.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VerifyRow {
    pub table: String,
    pub partition: String,
    pub rows: u64,
    pub checksum: String,
    pub second_checksum: String,
    pub target_rows: u64,
    pub target_checksum: String,
    pub target_matches: bool,
    pub ok: bool,
    /// Why not, when not.
    pub reason: Option<String>,
    /// When the target differs: the first keys that differ (up to
    /// [`DIFFERENCES_SHOWN`]), each with the columns that differ. Keys only, never the
    /// values: shown in the report (and `--json`), never logged.
    pub differences: Vec<KeyDifference>,
    /// How many keys differ in all.
    pub keys_differing: u64,
}

/// Keys named per failing partition by `verify`.
pub const DIFFERENCES_SHOWN: usize = 5;

/// The memory the comparison of a differing partition may hold for its per-key
/// digests (about 48 bytes a key): a larger partition is compared in several passes,
/// each over a share of the keys.
const DIFF_MAP_BYTES: u64 = 64 << 20;
const DIFF_BYTES_PER_KEY: u64 = 48;

/// One key whose rows differ between the target and the recomputed output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyDifference {
    /// The grain key, `col = value, …`.
    pub key: String,
    /// `differs` (same key, other values: `columns` names them), `missing` (computed,
    /// not in the target) or `extra` (in the target, not computed).
    pub kind: &'static str,
    pub columns: Vec<String>,
}

/// Rows that can be read again, chunk by chunk, each as [`canonical`] makes it: the
/// recomputed output (the job runs again) or the target partition (read again).
pub(super) trait Rows {
    async fn each(&mut self, f: &mut (dyn FnMut(&[Vec<Value>]) + Send)) -> Result<(), String>;
}

/// A partition's recomputed output: from its staged rows, or (`source`) from the rows
/// the source table holds now.
struct Output<'p> {
    p: &'p Pipeline,
    entry: &'p PlanEntry,
    source: Option<&'p Dsn>,
    /// Which target columns are `jsonb` (see [`canonical`]).
    jsonb: Vec<bool>,
}

impl Rows for Output<'_> {
    async fn each(&mut self, f: &mut (dyn FnMut(&[Vec<Value>]) + Send)) -> Result<(), String> {
        let (table, partition) = (&self.entry.table, &self.entry.partition_value);
        let jsonb = &self.jsonb;
        let mut each = |rows| f(&canonical_rows(rows, jsonb));
        match self.source {
            None => self.p.for_each_output(table, partition, &mut each).await,
            Some(dsn) => {
                self.p
                    .for_each_source_output(table, partition, dsn, &mut each)
                    .await
            }
        }
        .map(drop)
        .map_err(|e| format!("the transform fails: {}", crate::errors::error_chain(&e)))
    }
}

/// How often, and after how long, `--against-source` compares a differing partition
/// again before it reports it: a partition changed at the source a moment ago differs
/// until the running `weir run` has written it.
const SOURCE_RECHECKS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// A target partition, read through its own connection.
struct TargetRows<'p> {
    client: tokio_postgres::Client,
    table: &'p TargetTable,
    entry: &'p PlanEntry,
}

impl Rows for TargetRows<'_> {
    async fn each(&mut self, f: &mut (dyn FnMut(&[Vec<Value>]) + Send)) -> Result<(), String> {
        target::read::for_each_chunk(
            &mut self.client,
            self.table,
            &self.entry.partition_value,
            |rows| f(&canonical_rows(rows, &jsonb_columns(self.table))),
        )
        .await
        .map_err(|e| format!("cannot read the target: {}", crate::errors::error_chain(&e)))
    }
}

impl Rows for Vec<Vec<Value>> {
    async fn each(&mut self, f: &mut (dyn FnMut(&[Vec<Value>]) + Send)) -> Result<(), String> {
        f(&canonical_rows(self.clone(), &[]));
        Ok(())
    }
}

/// What one read of a side gives: its rows, checksum and grain-key hashes.
#[derive(Debug, Default)]
struct Digest {
    rows: u64,
    checksum: String,
    /// Grain-key hashes that occur more than once (duplicates, or a collision).
    repeated: HashSet<u64>,
}

async fn digest(rows: &mut impl Rows, grain: &[(usize, String)]) -> Result<Digest, String> {
    let (mut rows_read, mut checksum, mut hashes) = (0u64, Checksum::default(), Vec::new());
    rows.each(&mut |chunk: &[Vec<Value>]| {
        rows_read += chunk.len() as u64;
        checksum.add(chunk);
        if !grain.is_empty() {
            hashes.extend(chunk.iter().map(|r| key_hash(r, grain)));
        }
    })
    .await?;
    hashes.sort_unstable();
    let repeated = hashes
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    Ok(Digest {
        rows: rows_read,
        checksum: checksum.finish(),
        repeated,
    })
}

/// The double-run test of each planned partition, `parallel` at once; with `source`
/// (`--against-source`), the comparison of each with the source table's rows now
/// instead.
pub async fn verify(
    p: &Pipeline,
    entries: Vec<PlanEntry>,
    parallel: usize,
    source: Option<&Dsn>,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<VerifyRow>, BackfillError> {
    let total = entries.len();
    let rows: Vec<VerifyRow> = futures_util::stream::iter(entries)
        .map(|e| async move { verify_one(p, &e, source).await })
        .buffer_unordered(parallel.max(1))
        .enumerate()
        .map(|(i, row)| {
            progress(Progress {
                done: i + 1,
                total,
                rows: 0,
            });
            row
        })
        .collect()
        .await;
    let mut rows: Vec<VerifyRow> = rows;
    rows.sort_by(|a, b| (&a.table, &a.partition).cmp(&(&b.table, &b.partition)));
    Ok(rows)
}

async fn verify_one(p: &Pipeline, e: &PlanEntry, source: Option<&Dsn>) -> VerifyRow {
    let mut row = VerifyRow {
        table: e.table.clone(),
        partition: e.partition.clone(),
        rows: 0,
        checksum: String::new(),
        second_checksum: String::new(),
        target_rows: 0,
        target_checksum: String::new(),
        target_matches: false,
        ok: false,
        reason: None,
        differences: Vec::new(),
        keys_differing: 0,
    };
    let checked = match source {
        None => check(p, e, &mut row).await,
        Some(dsn) => check_against_source(p, e, dsn, &mut row).await,
    };
    if let Err(reason) = checked {
        row.reason = Some(reason);
    }
    row.ok = row.reason.is_none();
    row
}

async fn check(p: &Pipeline, e: &PlanEntry, row: &mut VerifyRow) -> Result<(), String> {
    let (config, target, transform) = p.table(&e.table).map_err(|e| e.to_string())?;
    let grain = grain_indexes(config, target, transform);
    let mut output = Output {
        p,
        entry: e,
        source: None,
        jsonb: jsonb_columns(target),
    };
    let first = digest(&mut output, &grain).await?;
    let second = digest(&mut output, &[]).await?;
    let mut target_rows = TargetRows::open(p, target, e).await?;
    let target_digest = digest(&mut target_rows, &grain).await?;
    row.record(&first, &target_digest);
    row.second_checksum = second.checksum.clone();
    if first.checksum != second.checksum || first.rows != second.rows {
        return Err("two runs of the transform differ: it is not deterministic".into());
    }
    if let Some(key) = duplicate(&mut output, &grain, &first.repeated).await? {
        return Err(format!("the output's grain key is not unique: {key}"));
    }
    let sides = Sides {
        output: &mut output,
        target_rows: &mut target_rows,
        grain: &grain,
        target,
    };
    sides.judge(&target_digest, row, "the stage's output").await
}

impl VerifyRow {
    /// The digests of the computed output and of the target, and whether they match.
    fn record(&mut self, computed: &Digest, target: &Digest) {
        self.rows = computed.rows;
        self.checksum = computed.checksum.clone();
        self.target_rows = target.rows;
        self.target_checksum = target.checksum.clone();
        self.target_matches =
            self.target_checksum == self.checksum && self.target_rows == self.rows;
    }
}

impl<'p> TargetRows<'p> {
    async fn open(
        p: &Pipeline,
        table: &'p TargetTable,
        entry: &'p PlanEntry,
    ) -> Result<TargetRows<'p>, String> {
        let client = target::connect(p.dsn())
            .await
            .map_err(|e| format!("cannot read the target: {}", crate::errors::error_chain(&e)))?;
        Ok(TargetRows {
            client,
            table,
            entry,
        })
    }
}

/// A partition's computed output and its target, compared.
struct Sides<'s, O, T> {
    output: &'s mut O,
    target_rows: &'s mut T,
    grain: &'s [(usize, String)],
    target: &'s TargetTable,
}

impl<O: Rows, T: Rows> Sides<'_, O, T> {
    /// The verdict once the digests are recorded in `row`: the target's grain key
    /// unique, and the target equal to the output (`what`), else the keys that differ.
    async fn judge(
        self,
        target_digest: &Digest,
        row: &mut VerifyRow,
        what: &str,
    ) -> Result<(), String> {
        if let Some(key) = duplicate(self.target_rows, self.grain, &target_digest.repeated).await? {
            return Err(format!("the target's grain key is not unique: {key}"));
        }
        if row.target_matches {
            return Ok(());
        }
        explain_difference(
            self.output,
            self.target_rows,
            self.grain,
            self.target,
            row,
            what,
        )
        .await
    }
}

/// `--against-source`: the partition's output computed from the source table's rows
/// now, compared with the target (and compared again, up to [`SOURCE_RECHECKS`], while
/// they differ).
async fn check_against_source(
    p: &Pipeline,
    e: &PlanEntry,
    dsn: &Dsn,
    row: &mut VerifyRow,
) -> Result<(), String> {
    let (config, target, transform) = p.table(&e.table).map_err(|e| e.to_string())?;
    let grain = grain_indexes(config, target, transform);
    let mut output = Output {
        p,
        entry: e,
        source: Some(dsn),
        jsonb: jsonb_columns(target),
    };
    let mut target_rows = TargetRows::open(p, target, e).await?;
    let mut waits = SOURCE_RECHECKS.iter();
    let target_digest = loop {
        let computed = digest(&mut output, &grain).await?;
        let target_digest = digest(&mut target_rows, &grain).await?;
        row.record(&computed, &target_digest);
        match waits.next() {
            Some(wait) if !row.target_matches => tokio::time::sleep(*wait).await,
            _ => break target_digest,
        }
    };
    let sides = Sides {
        output: &mut output,
        target_rows: &mut target_rows,
        grain: &grain,
        target,
    };
    sides.judge(&target_digest, row, "the source's rows").await
}

/// The reason a partition whose target differs from `computed` (named `what`) fails,
/// with the first keys that differ.
async fn explain_difference(
    output: &mut impl Rows,
    target_rows: &mut impl Rows,
    grain: &[(usize, String)],
    target: &TargetTable,
    row: &mut VerifyRow,
    what: &str,
) -> Result<(), String> {
    let names: Vec<&str> = target.columns.iter().map(|(n, _)| n.as_str()).collect();
    let (differences, total) = differences(output, target_rows, grain, &names, row.rows).await?;
    let mut why = format!(
        "the target differs from {what} ({} rows in the target, {} computed)",
        row.target_rows, row.rows
    );
    if total > 0 {
        let shown: Vec<String> = differences
            .iter()
            .map(|d| match d.kind {
                "differs" => format!("{}: column {} differs", d.key, d.columns.join(", ")),
                "missing" => format!("{}: missing in the target", d.key),
                _ => format!("{}: in the target, not in the output", d.key),
            })
            .collect();
        let _ = write!(
            why,
            "; {total} key(s) differ{}: {}",
            if total > shown.len() as u64 {
                format!(", the first {}", shown.len())
            } else {
                String::new()
            },
            shown.join("; ")
        );
    }
    row.differences = differences;
    row.keys_differing = total;
    Err(why)
}

/// The grain key's column indexes in target column order (the table's key for the
/// identity, the plugin's grain key otherwise), with their names.
fn grain_indexes(
    config: &TableConfig,
    target: &TargetTable,
    transform: &Transform,
) -> Vec<(usize, String)> {
    let names: Vec<String> = match transform {
        Transform::Identity => config.key.clone(),
        Transform::Plugin { plugin, .. } => plugin.description().grain_key.clone(),
    };
    names
        .into_iter()
        .filter_map(|n| {
            target
                .columns
                .iter()
                .position(|(c, _)| *c == n)
                .map(|i| (i, n))
        })
        .collect()
}

/// A row's grain key as text values: what keys compare and sort by. Text is quoted
/// (with escapes), so that NULL and the text `NULL`, or `1` and `'1'`, are two keys.
fn key_of(row: &[Value], grain: &[(usize, String)]) -> Vec<String> {
    grain
        .iter()
        .map(|(i, _)| match &row[*i] {
            Value::Text(text) => format!("{text:?}"),
            other => other.to_string(),
        })
        .collect()
}

fn key_hash(row: &[Value], grain: &[(usize, String)]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    key_of(row, grain).hash(&mut h);
    h.finish()
}

/// Whether two values are the same as the checksum sees them: a float by its bits
/// (`-0` is not `0`, as PostgreSQL's float8 keeps the sign), NaN equal to itself (as
/// in PostgreSQL's ordering).
fn same_value(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Float(a), Value::Float(b)) => {
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
        }
        _ => x == y,
    }
}

fn row_digest(row: &[Value]) -> u64 {
    let mut c = Checksum::default();
    c.add_row(row);
    let text = c.finish();
    u64::from_str_radix(&text[..16], 16).unwrap_or(0)
}

/// `col = value, …` for a key.
fn render(key: &[String], grain: &[(usize, String)]) -> String {
    grain
        .iter()
        .zip(key)
        .map(|((_, n), v)| format!("{n} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first grain key (in key order) that occurs twice among the rows whose key hash
/// is `suspects`, checked exactly by reading the rows again.
async fn duplicate(
    rows: &mut impl Rows,
    grain: &[(usize, String)],
    suspects: &HashSet<u64>,
) -> Result<Option<String>, String> {
    if grain.is_empty() || suspects.is_empty() {
        return Ok(None);
    }
    let (mut seen, mut first) = (HashSet::<Vec<String>>::new(), None::<Vec<String>>);
    rows.each(&mut |chunk: &[Vec<Value>]| {
        for r in chunk {
            if !suspects.contains(&key_hash(r, grain)) {
                continue;
            }
            let key = key_of(r, grain);
            if !seen.insert(key.clone()) && first.as_ref().is_none_or(|k| key < *k) {
                first = Some(key);
            }
        }
    })
    .await?;
    Ok(first.map(|k| render(&k, grain)))
}

/// One key found to differ: its kind, and the rows seen of it.
#[derive(Debug, Clone)]
struct Found {
    kind: &'static str,
    hash: u64,
    target: Option<Vec<Value>>,
    computed: Option<Vec<Value>>,
}

/// The keys whose rows differ between the computed output and the target: the first
/// [`DIFFERENCES_SHOWN`] in key order and the count of all. Compared as the checksum
/// compares them (after [`canonical`]). Empty without a grain key. Each pass holds a
/// digest of its share of the keys (see [`DIFF_MAP_BYTES`]), and reads the output, the
/// target, then the output again for the rows it names.
async fn differences(
    computed: &mut impl Rows,
    target: &mut impl Rows,
    grain: &[(usize, String)],
    columns: &[&str],
    rows_hint: u64,
) -> Result<(Vec<KeyDifference>, u64), String> {
    if grain.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let passes = (rows_hint * DIFF_BYTES_PER_KEY)
        .div_ceil(DIFF_MAP_BYTES)
        .max(1);
    let mut shown: BTreeMap<Vec<String>, Found> = BTreeMap::new();
    let mut total = 0u64;
    let offer = |shown: &mut BTreeMap<Vec<String>, Found>, key: Vec<String>, found: Found| {
        if shown.len() < DIFFERENCES_SHOWN
            || shown.last_key_value().is_some_and(|(last, _)| key < *last)
        {
            shown.insert(key, found);
            if shown.len() > DIFFERENCES_SHOWN {
                shown.pop_last();
            }
        }
    };
    for pass in 0..passes {
        let mine = |hash: u64| hash % passes == pass;
        let mut digests = HashMap::<u64, u64>::new();
        computed
            .each(&mut |chunk: &[Vec<Value>]| {
                for r in chunk {
                    let hash = key_hash(r, grain);
                    if mine(hash) {
                        digests.insert(hash, row_digest(r));
                    }
                }
            })
            .await?;
        target
            .each(&mut |chunk: &[Vec<Value>]| {
                for r in chunk {
                    let hash = key_hash(r, grain);
                    if !mine(hash) {
                        continue;
                    }
                    let kind = match digests.remove(&hash) {
                        Some(digest) if digest == row_digest(r) => continue,
                        Some(_) => "differs",
                        None => "extra",
                    };
                    total += 1;
                    let found = Found {
                        kind,
                        hash,
                        target: Some(r.clone()),
                        computed: None,
                    };
                    offer(&mut shown, key_of(r, grain), found);
                }
            })
            .await?;
        // What is left of the output's digests is missing in the target.
        let missing = digests;
        total += missing.len() as u64;
        let wanted: HashSet<u64> = shown
            .values()
            .filter(|f| f.kind == "differs" && mine(f.hash))
            .map(|f| f.hash)
            .collect();
        if missing.is_empty() && wanted.is_empty() {
            continue;
        }
        let mut computed_rows = HashMap::new();
        computed
            .each(&mut |chunk: &[Vec<Value>]| {
                for r in chunk {
                    let hash = key_hash(r, grain);
                    if missing.contains_key(&hash) {
                        let found = Found {
                            kind: "missing",
                            hash,
                            target: None,
                            computed: None,
                        };
                        offer(&mut shown, key_of(r, grain), found);
                    } else if wanted.contains(&hash) {
                        computed_rows.insert(hash, r.clone());
                    }
                }
            })
            .await?;
        for f in shown.values_mut() {
            if let Some(r) = computed_rows.get(&f.hash) {
                f.computed = Some(r.clone());
            }
        }
    }
    let shown = shown
        .into_iter()
        .map(|(key, f)| KeyDifference {
            key: render(&key, grain),
            kind: f.kind,
            columns: match (&f.computed, &f.target) {
                (Some(a), Some(b)) => a
                    .iter()
                    .zip(b)
                    .zip(columns)
                    .filter(|((x, y), _)| !same_value(x, y))
                    .map(|(_, c)| (*c).to_owned())
                    .collect(),
                _ => Vec::new(),
            },
        })
        .collect();
    Ok((shown, total))
}

/// Which of the table's columns are `jsonb`, in column order.
fn jsonb_columns(table: &TargetTable) -> Vec<bool> {
    table
        .columns
        .iter()
        .map(|(_, ty)| *ty == tokio_postgres::types::Type::JSONB)
        .collect()
}

/// Each row as compared: the values of `jsonb` columns (`jsonb[i]`) [`canonical`],
/// every other value as it is (a `json` column keeps its text exactly, so its text is
/// compared exactly). A column past `jsonb`'s end counts as `jsonb`.
fn canonical_rows(rows: Vec<Vec<Value>>, jsonb: &[bool]) -> Vec<Vec<Value>> {
    rows.into_iter()
        .map(|r| {
            r.into_iter()
                .enumerate()
                .map(|(i, v)| match jsonb.get(i) {
                    Some(false) => v,
                    _ => canonical(&v),
                })
                .collect()
        })
        .collect()
}

/// A `jsonb` value as compared between the stage's output and the target: JSON
/// documents with sorted keys and no white space (`jsonb` reorders and respaces what it
/// stores).
fn canonical(v: &Value) -> Value {
    match v {
        Value::Json(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(j) => Value::Json(sorted_json(j).to_string()),
            Err(_) => v.clone(),
        },
        other => other.clone(),
    }
}

fn sorted_json(j: serde_json::Value) -> serde_json::Value {
    match j {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sorted_json(v))).collect();
            serde_json::Value::Object(sorted.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_json).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, a: &str, b: i64) -> Vec<Value> {
        vec![Value::Int(id), Value::Text(a.into()), Value::Int(b)]
    }

    #[test]
    fn a_float_differing_by_the_sign_of_zero_is_named() {
        assert!(!same_value(&Value::Float(-0.0), &Value::Float(0.0)));
        assert!(same_value(&Value::Float(f64::NAN), &Value::Float(f64::NAN)));
        assert!(same_value(&Value::Float(1.5), &Value::Float(1.5)));
        assert_ne!(
            row_digest(&[Value::Float(-0.0)]),
            row_digest(&[Value::Float(0.0)]),
            "the digest tells them apart, so the columns must too"
        );
    }

    #[tokio::test]
    async fn differences_name_the_keys_and_columns() {
        let mut computed = vec![row(1, "x", 1), row(2, "y", 2), row(3, "z", 3)];
        let mut target = vec![row(3, "z", 3), row(2, "y", 9), row(4, "w", 4)];
        let grain = vec![(0, "id".to_owned())];
        let names = ["id", "a", "b"];
        let want = vec![
            KeyDifference {
                key: "id = 1".into(),
                kind: "missing",
                columns: vec![],
            },
            KeyDifference {
                key: "id = 2".into(),
                kind: "differs",
                columns: vec!["b".into()],
            },
            KeyDifference {
                key: "id = 4".into(),
                kind: "extra",
                columns: vec![],
            },
        ];
        let got = differences(&mut computed, &mut target, &grain, &names, 3)
            .await
            .expect("compare");
        assert_eq!(got, (want.clone(), 3));
        // The same verdict however many passes share the keys out.
        let got = differences(&mut computed, &mut target, &grain, &names, 10_000_000)
            .await
            .expect("compare");
        assert_eq!(got, (want, 3));
        let mut same = computed.clone();
        let (none, zero) = differences(&mut computed, &mut same, &grain, &names, 3)
            .await
            .expect("compare");
        assert!(none.is_empty() && zero == 0);
    }

    #[tokio::test]
    async fn many_differences_show_the_first_keys_in_order_and_count_all() {
        let mut computed: Vec<Vec<Value>> = (1..=1000).map(|i| row(i, "x", i)).collect();
        let mut target: Vec<Vec<Value>> = (1..=1000)
            .map(|i| row(i, "x", if i % 3 == 0 { -i } else { i }))
            .collect();
        let grain = vec![(0, "id".to_owned())];
        let (shown, total) =
            differences(&mut computed, &mut target, &grain, &["id", "a", "b"], 1000)
                .await
                .expect("compare");
        assert_eq!(total, 333);
        // Keys compare as text, as they sort in the report.
        let keys: Vec<&str> = shown.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(
            keys,
            ["id = 102", "id = 105", "id = 108", "id = 111", "id = 114"]
        );
        assert!(
            shown
                .iter()
                .all(|d| d.kind == "differs" && d.columns == ["b"])
        );
    }

    #[tokio::test]
    async fn duplicates_are_found_exactly() {
        let grain = vec![(0, "id".to_owned())];
        let mut rows = vec![row(1, "x", 1), row(2, "y", 2), row(1, "z", 3)];
        let d = digest(&mut rows, &grain).await.expect("digest");
        assert_eq!(d.rows, 3);
        let key = duplicate(&mut rows, &grain, &d.repeated)
            .await
            .expect("read");
        assert_eq!(key.as_deref(), Some("id = 1"));
        let mut unique = vec![row(1, "x", 1), row(2, "y", 2)];
        let d = digest(&mut unique, &grain).await.expect("digest");
        assert!(d.repeated.is_empty());
    }

    #[test]
    fn json_compares_without_key_order_or_spaces() {
        let a = Value::Json("{\"b\": [1, {\"y\":1,\"x\":2}], \"a\": null}".into());
        let b = Value::Json("{\"a\":null,\"b\":[1,{\"x\":2,\"y\":1}]}".into());
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(
            target::checksum(&canonical_rows(vec![vec![a.clone()]], &[true])),
            target::checksum(&[vec![Value::Json("{}".into())]])
        );
        // A `json` column keeps its text: its key order and spaces are compared.
        let rows = canonical_rows(vec![vec![a.clone()], vec![b.clone()]], &[false]);
        assert_eq!(rows, vec![vec![a], vec![b]]);
    }
}
