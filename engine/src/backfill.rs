//! Backfill and verify: rebuild, or check, any window of partitions from the stage.
//!
//! Both open the stage read-only (`Pipeline::open_read_only`), so they run beside a
//! live `weir run` on the same stage and target: the partition's advisory lock keeps
//! two writers of one partition apart, and a backfill never replaces a partition that
//! lineage says was written from a newer stage generation (the live engine got there
//! first with newer rows). Dirty marks are the live engine's: a backfill leaves them.
//!
//! **Architecture Invariant**: the partition set is a parameter (a window `[from, to)`
//! or lineage's stale list); nothing here reads the clock. The only time involved is
//! the target's own `now()` in lineage, which a resumed backfill compares with the
//! target's `now()` when it started.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;

use crate::config::TableConfig;
use crate::partition::{Grain, Partition};
use crate::pipeline::{PartitionOutput, Pipeline, PipelineError, Transform};
use crate::stage::Stage;
use crate::target::{self, PartitionLineage, TargetTable, expected_transform, is_stale};
use crate::value::{ColumnType, Value};

#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    #[error("{what} `{value}` is not a {grain} partition of {table}: {hint}")]
    BadWindow {
        what: &'static str,
        value: String,
        grain: Grain,
        table: String,
        hint: &'static str,
    },
    #[error("the window [{from}, {to}) is empty: `from` must come before `to`")]
    EmptyRange { from: String, to: String },
    #[error(
        "no staged rows in [{from}, {to}) of {table}: a backfill would empty {partitions} target partitions; pass --allow-empty to do that"
    )]
    NothingStaged {
        table: String,
        from: String,
        to: String,
        partitions: usize,
    },
    #[error("table `{0}` is not in the config (give its source or target name)")]
    UnknownTable(String),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    ReadPlugin(#[from] target::lineage::ReadPluginError),
}

impl From<target::TargetError> for BackfillError {
    fn from(e: target::TargetError) -> Self {
        BackfillError::Pipeline(e.into())
    }
}

impl BackfillError {
    /// Errors of the command line's parameters (exit code 2), not of the work.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BackfillError::BadWindow { .. }
                | BackfillError::EmptyRange { .. }
                | BackfillError::NothingStaged { .. }
                | BackfillError::UnknownTable(_)
        )
    }
}

/// Which partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The half-open window `[from, to)` of partition names (for `value` partitions of an
    /// integer column, compared as integers).
    Window { from: String, to: String },
    /// Partitions whose lineage names another plugin or config than the config's.
    Stale,
}

/// One partition a backfill or verify will visit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanEntry {
    /// Source table name (the stage's and the config's key).
    pub table: String,
    pub target: String,
    pub partition: String,
    #[serde(skip)]
    pub partition_value: Partition,
    pub staged_rows: u64,
    pub generation: u64,
    pub lineage: Option<PartitionLineage>,
    /// What the write would change in lineage, for `--dry-run`.
    pub change: String,
}

/// Checks a window bound against the grain's partition names.
fn check_bound(
    what: &'static str,
    value: &str,
    table: &TableConfig,
    ty: ColumnType,
) -> Result<(), BackfillError> {
    let ok = match table.grain {
        Grain::Day => {
            chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d").is_ok() && value.len() == 10
        }
        Grain::Month => {
            value.len() == 7
                && chrono::NaiveDate::parse_from_str(&format!("{value}-01"), "%Y-%m-%d").is_ok()
        }
        Grain::Hour => {
            value.len() == 13
                && chrono::NaiveDateTime::parse_from_str(&format!("{value}:00"), "%Y-%m-%dT%H:%M")
                    .is_ok()
        }
        Grain::Value => {
            !matches!(
                ty,
                ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt
            ) || value.parse::<i64>().is_ok()
        }
    };
    if ok {
        return Ok(());
    }
    Err(BackfillError::BadWindow {
        what,
        value: value.to_owned(),
        grain: table.grain,
        table: table.source.to_string(),
        hint: match table.grain {
            Grain::Day => "write YYYY-MM-DD",
            Grain::Month => "write YYYY-MM",
            Grain::Hour => "write YYYY-MM-DDTHH",
            Grain::Value => "write an integer",
        },
    })
}

/// Whether a partition name lies in `[from, to)`.
fn in_window(name: &Partition, from: &str, to: &str, integer_values: bool) -> bool {
    let Partition::Key(k) = name else {
        return false;
    };
    if integer_values {
        return match (k.parse::<i64>(), from.parse::<i64>(), to.parse::<i64>()) {
            (Ok(k), Ok(f), Ok(t)) => f <= k && k < t,
            _ => false,
        };
    }
    // Time partition names of one grain have one fixed-width form: text order is time
    // order. `infinity` partitions are in no window.
    if k.ends_with("infinity") {
        return false;
    }
    from <= k.as_str() && k.as_str() < to
}

/// Finds a configured table by source or target name.
pub fn find_table<'a>(p: &'a Pipeline, name: &str) -> Result<&'a str, BackfillError> {
    p.tables()
        .find(|(source, (t, _, _))| {
            *source == name || t.target.to_string() == name || t.target.name == name
        })
        .map(|(source, _)| source.as_str())
        .ok_or_else(|| BackfillError::UnknownTable(name.to_owned()))
}

/// The partitions of one table in scope, with their staged rows and lineage.
pub async fn plan(
    p: &Pipeline,
    table: &str,
    scope: &Scope,
    allow_empty: bool,
) -> Result<Vec<PlanEntry>, BackfillError> {
    let (config, target, _) = p.table(table)?;
    let integer_values = config.grain == Grain::Value
        && matches!(
            config.partition_column().ty,
            ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt
        );
    if let Scope::Window { from, to } = scope {
        let ty = config.partition_column().ty;
        check_bound("--from", from, config, ty)?;
        check_bound("--to", to, config, ty)?;
        let empty = if integer_values {
            from.parse::<i64>().ok() >= to.parse::<i64>().ok()
        } else {
            from >= to
        };
        if empty {
            return Err(BackfillError::EmptyRange {
                from: from.clone(),
                to: to.clone(),
            });
        }
    }
    let stage: Arc<Stage> = p.stage_arc();
    let t = table.to_owned();
    let staged = tokio::task::spawn_blocking(move || stage.partitions(&t))
        .await
        .map_err(PipelineError::Task)?
        .map_err(PipelineError::from)?;
    let client = target::connect(p.dsn()).await?;
    let lineage = target::table_lineage(&client, &target.name).await?;
    let expected = expected_transform(config)?;
    let mut names: BTreeMap<Partition, ()> = staged.keys().map(|k| (k.clone(), ())).collect();
    for name in lineage.keys() {
        let part = if name == Partition::NULL_NAME {
            Partition::Null
        } else {
            Partition::Key(name.clone())
        };
        names.insert(part, ());
    }
    let mut out = Vec::new();
    for (partition, ()) in names {
        let l = lineage.get(partition.name()).cloned();
        let selected = match scope {
            Scope::Window { from, to } => in_window(&partition, from, to, integer_values),
            Scope::Stale => l.as_ref().is_some_and(|l| is_stale(l, &expected)),
        };
        if !selected {
            continue;
        }
        let (generation, staged_rows) = staged.get(&partition).copied().unwrap_or((0, 0));
        let change = match &l {
            None => "new partition".to_owned(),
            Some(l) if l.plugin_sha256 != expected.0 => format!(
                "plugin {} -> {}",
                short(l.plugin_sha256.as_deref()),
                short(expected.0.as_deref())
            ),
            Some(l) if l.config_hash != expected.1 => format!(
                "config {} -> {}",
                short(l.config_hash.as_deref()),
                short(expected.1.as_deref())
            ),
            Some(l) if l.stage_generation != generation as i64 => {
                format!("generation {} -> {generation}", l.stage_generation)
            }
            Some(_) => "unchanged (rewritten identically)".to_owned(),
        };
        out.push(PlanEntry {
            table: table.to_owned(),
            target: target.name.to_string(),
            partition: partition.name().to_owned(),
            partition_value: partition,
            staged_rows,
            generation,
            lineage: l,
            change,
        });
    }
    if let Scope::Window { from, to } = scope
        && !allow_empty
        && !out.is_empty()
        && out.iter().all(|e| e.staged_rows == 0)
    {
        return Err(BackfillError::NothingStaged {
            table: table.to_owned(),
            from: from.clone(),
            to: to.clone(),
            partitions: out.len(),
        });
    }
    Ok(out)
}

fn short(hash: Option<&str>) -> String {
    hash.map_or_else(|| "identity".to_owned(), |h| h.chars().take(12).collect())
}

/// Progress of a long run, reported after each partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub rows: u64,
}

/// What a backfill did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BackfillReport {
    pub planned: usize,
    /// Done by an earlier, interrupted run of the same window (resumed).
    pub already_done: usize,
    pub written: Vec<String>,
    pub rows: u64,
    /// Left as they were: the target holds a newer generation (the live engine).
    pub superseded: Vec<String>,
    pub failed: Vec<(String, String)>,
    /// Interrupted: these were not written (in flight ones rolled back).
    pub not_written: Vec<String>,
    pub interrupted: bool,
}

/// Rebuilds the planned partitions with replace semantics, `parallel` at once, until
/// done or `interrupt` completes. A window's run is recorded in the target; an
/// unfinished one is resumed (partitions written since it started are skipped).
pub async fn backfill(
    p: &Pipeline,
    scope: &Scope,
    entries: Vec<PlanEntry>,
    parallel: usize,
    progress: &(dyn Fn(Progress) + Sync),
    interrupt: impl Future<Output = ()>,
) -> Result<BackfillReport, BackfillError> {
    let mut report = BackfillReport {
        planned: entries.len(),
        ..BackfillReport::default()
    };
    let mut todo = entries;
    let mut window_run = None;
    if let (Scope::Window { from, to }, Some(first)) = (scope, todo.first()) {
        let (_, target, _) = p.table(&first.table)?;
        let client = target::connect(p.dsn()).await?;
        let (started, resumed) = target::begin_backfill(&client, &target.name, from, to).await?;
        if resumed {
            let before = todo.len();
            todo.retain(|e| e.lineage.as_ref().is_none_or(|l| l.written_at_us < started));
            report.already_done = before - todo.len();
            tracing::info!(
                done = report.already_done,
                left = todo.len(),
                "resuming an unfinished backfill of this window"
            );
        }
        window_run = Some((client, target.name.clone(), from.clone(), to.clone()));
    }
    let total = todo.len();
    let names: Vec<String> = todo.iter().map(|e| e.partition.clone()).collect();
    let mut finished: HashSet<String> = HashSet::new();
    let jobs = futures_util::stream::iter(todo)
        .map(|e| async move {
            let started = std::time::Instant::now();
            let result = async {
                let output = p
                    .compute_partition(&e.table, &e.partition_value, false)
                    .await?
                    .ok_or_else(|| PipelineError::UnknownTable(e.table.clone()))?;
                p.write_output(&e.table, &e.partition_value, output).await
            }
            .await;
            crate::metrics::partition_job(&e.table, started.elapsed(), result.is_err());
            (e, result)
        })
        .buffer_unordered(parallel.max(1));
    tokio::pin!(jobs);
    tokio::pin!(interrupt);
    let mut state = Progress {
        done: 0,
        total,
        rows: 0,
    };
    loop {
        tokio::select! {
            next = jobs.next() => {
                let Some((e, result)) = next else { break };
                finished.insert(e.partition.clone());
                match result {
                    Ok(summary) if summary.superseded_by.is_some() => report.superseded.push(e.partition),
                    Ok(summary) => {
                        report.rows += summary.rows;
                        state.rows += summary.rows;
                        report.written.push(e.partition);
                    }
                    Err(error) => {
                        tracing::error!(table = %e.table, partition = %e.partition, error = %crate::errors::error_chain(&error), "backfill of the partition failed");
                        report.failed.push((e.partition, crate::errors::error_chain(&error)));
                    }
                }
                state.done += 1;
                progress(state);
            }
            () = &mut interrupt => {
                report.interrupted = true;
                break;
            }
        }
    }
    report.not_written = names
        .into_iter()
        .filter(|n| !finished.contains(n))
        .collect();
    if let Some((client, table, from, to)) = window_run
        && !report.interrupted
        && report.failed.is_empty()
    {
        target::finish_backfill(&client, &table, &from, &to).await?;
    }
    Ok(report)
}

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

/// The double-run test: each partition's output computed twice from the stage (two
/// fresh instances), compared with each other and with what the target holds now, and
/// the grain key checked for uniqueness in both.
pub async fn verify(
    p: &Pipeline,
    entries: Vec<PlanEntry>,
    parallel: usize,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Vec<VerifyRow>, BackfillError> {
    let total = entries.len();
    let client = Arc::new(target::connect(p.dsn()).await?);
    let rows: Vec<VerifyRow> = futures_util::stream::iter(entries)
        .map(|e| {
            let client = Arc::clone(&client);
            async move { verify_one(p, &client, &e).await }
        })
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

async fn verify_one(p: &Pipeline, client: &tokio_postgres::Client, e: &PlanEntry) -> VerifyRow {
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
    let (config, target, transform) = match p.table(&e.table) {
        Ok(t) => t,
        Err(error) => {
            row.reason = Some(error.to_string());
            return row;
        }
    };
    let grain = grain_indexes(config, target, transform);
    let mut runs: Vec<PartitionOutput> = Vec::with_capacity(2);
    for _ in 0..2 {
        match p
            .compute_partition(&e.table, &e.partition_value, false)
            .await
        {
            Ok(Some(out)) => runs.push(out),
            Ok(None) => {}
            Err(error) => {
                row.reason = Some(format!(
                    "the transform fails: {}",
                    crate::errors::error_chain(&error)
                ));
                return row;
            }
        }
    }
    let [first, second] = [&runs[0], &runs[1]];
    row.rows = first.rows.len() as u64;
    row.checksum = canonical_checksum(&first.rows);
    row.second_checksum = canonical_checksum(&second.rows);
    let target_rows = match target::read_partition(client, target, &e.partition_value).await {
        Ok(r) => r,
        Err(error) => {
            row.reason = Some(format!(
                "cannot read the target: {}",
                crate::errors::error_chain(&error)
            ));
            return row;
        }
    };
    row.target_rows = target_rows.len() as u64;
    row.target_checksum = canonical_checksum(&target_rows);
    row.target_matches = row.target_checksum == row.checksum && row.target_rows == row.rows;
    row.reason = if row.checksum != row.second_checksum || first.rows.len() != second.rows.len() {
        Some("two runs of the transform differ: it is not deterministic".into())
    } else if let Some(key) = duplicate(&first.rows, &grain) {
        Some(format!("the output's grain key is not unique: {key}"))
    } else if let Some(key) = duplicate(&target_rows, &grain) {
        Some(format!("the target's grain key is not unique: {key}"))
    } else if !row.target_matches {
        let names: Vec<&str> = target.columns.iter().map(|(n, _)| n.as_str()).collect();
        let (differences, total) = differences(&first.rows, &target_rows, &grain, &names);
        let mut why = format!(
            "the target differs from the stage's output ({} rows in the target, {} computed)",
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
        Some(why)
    } else {
        None
    };
    row.ok = row.reason.is_none();
    row
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

/// The keys whose rows differ between the computed output and the target, in key
/// order: the first [`DIFFERENCES_SHOWN`] and the count of all. Compared as the checksum
/// compares them (after [`canonical`]). Empty without a grain key.
fn differences(
    computed: &[Vec<Value>],
    target: &[Vec<Value>],
    grain: &[(usize, String)],
    columns: &[&str],
) -> (Vec<KeyDifference>, u64) {
    if grain.is_empty() {
        return (Vec::new(), 0);
    }
    let by_key = |rows: &[Vec<Value>]| -> BTreeMap<Vec<String>, Vec<Value>> {
        rows.iter()
            .map(|r| {
                let row: Vec<Value> = r.iter().map(canonical).collect();
                let key = grain.iter().map(|(i, _)| row[*i].to_string()).collect();
                (key, row)
            })
            .collect()
    };
    let (computed, target) = (by_key(computed), by_key(target));
    let render = |key: &[String]| {
        grain
            .iter()
            .zip(key)
            .map(|((_, n), v)| format!("{n} = {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut keys: Vec<&Vec<String>> = computed.keys().chain(target.keys()).collect();
    keys.sort();
    keys.dedup();
    let (mut shown, mut total) = (Vec::new(), 0u64);
    for key in keys {
        let difference = match (computed.get(key), target.get(key)) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(a), Some(b)) => KeyDifference {
                key: render(key),
                kind: "differs",
                columns: a
                    .iter()
                    .zip(b)
                    .zip(columns)
                    .filter(|((x, y), _)| x != y)
                    .map(|(_, c)| (*c).to_owned())
                    .collect(),
            },
            (Some(_), None) => KeyDifference {
                key: render(key),
                kind: "missing",
                columns: Vec::new(),
            },
            _ => KeyDifference {
                key: render(key),
                kind: "extra",
                columns: Vec::new(),
            },
        };
        total += 1;
        if shown.len() < DIFFERENCES_SHOWN {
            shown.push(difference);
        }
    }
    (shown, total)
}

/// The first grain key that occurs twice, as `col = value, …`.
fn duplicate(rows: &[Vec<Value>], grain: &[(usize, String)]) -> Option<String> {
    if grain.is_empty() {
        return None;
    }
    let mut seen = HashSet::with_capacity(rows.len());
    for r in rows {
        let key: Vec<String> = grain
            .iter()
            .map(|(i, _)| canonical(&r[*i]).to_string())
            .collect();
        if !seen.insert(key.clone()) {
            return Some(
                grain
                    .iter()
                    .zip(key)
                    .map(|((_, n), v)| format!("{n} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
    }
    None
}

/// The value as compared between the stage's output and the target: JSON documents
/// with sorted keys and no white space (`jsonb` reorders and respaces what it stores).
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

/// The lineage checksum of rows after [`canonical`].
fn canonical_checksum(rows: &[Vec<Value>]) -> String {
    let rows: Vec<Vec<Value>> = rows
        .iter()
        .map(|r| r.iter().map(canonical).collect())
        .collect();
    target::checksum(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_half_open_and_typed() {
        let day = |d: &str| Partition::Key(d.into());
        assert!(in_window(
            &day("2026-03-01"),
            "2026-03-01",
            "2026-03-02",
            false
        ));
        assert!(!in_window(
            &day("2026-03-02"),
            "2026-03-01",
            "2026-03-02",
            false
        ));
        assert!(!in_window(
            &day("infinity"),
            "2026-03-01",
            "9999-12-31",
            false
        ));
        assert!(!in_window(&Partition::Null, "0", "z", false));
        assert!(
            in_window(&day("9"), "2", "10", true),
            "integers compare as integers"
        );
        assert!(!in_window(&day("10"), "2", "10", true));
    }

    #[test]
    fn differences_name_the_keys_and_columns() {
        let row =
            |id: i64, a: &str, b: i64| vec![Value::Int(id), Value::Text(a.into()), Value::Int(b)];
        let computed = vec![row(1, "x", 1), row(2, "y", 2), row(3, "z", 3)];
        let target = vec![row(3, "z", 3), row(2, "y", 9), row(4, "w", 4)];
        let grain = vec![(0, "id".to_owned())];
        let (shown, total) = differences(&computed, &target, &grain, &["id", "a", "b"]);
        assert_eq!(total, 3);
        assert_eq!(
            shown,
            vec![
                KeyDifference {
                    key: "id = 1".into(),
                    kind: "missing",
                    columns: vec![]
                },
                KeyDifference {
                    key: "id = 2".into(),
                    kind: "differs",
                    columns: vec!["b".into()]
                },
                KeyDifference {
                    key: "id = 4".into(),
                    kind: "extra",
                    columns: vec![]
                },
            ]
        );
        let (none, zero) = differences(&computed, &computed, &grain, &["id", "a", "b"]);
        assert!(none.is_empty() && zero == 0);
    }

    #[test]
    fn json_compares_without_key_order_or_spaces() {
        let a = Value::Json("{\"b\": [1, {\"y\":1,\"x\":2}], \"a\": null}".into());
        let b = Value::Json("{\"a\":null,\"b\":[1,{\"x\":2,\"y\":1}]}".into());
        assert_eq!(canonical(&a), canonical(&b));
        assert_ne!(
            canonical_checksum(&[vec![a.clone()]]),
            canonical_checksum(&[vec![Value::Json("{}".into())]])
        );
    }
}
