//! Backfill and verify (`verify`): rebuild, or check, any window of partitions from
//! the stage.
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
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;

mod verify;
pub use verify::{DIFFERENCES_SHOWN, KeyDifference, VerifyRow, verify};

use crate::config::TableConfig;
use crate::partition::{Grain, Partition};
use crate::pipeline::{Pipeline, PipelineError};
use crate::stage::Stage;
use crate::target::{self, PartitionLineage, expected_transform, is_stale};
use crate::value::ColumnType;

#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    #[error("{what} `{value}` is not a partition of {table} by {grain}: {hint}")]
    BadWindow {
        what: &'static str,
        value: String,
        grain: Grain,
        table: String,
        hint: &'static str,
    },
    #[error(
        "--partition `{value}` of {table} is written `{canonical}`: name partitions as `weir status` and weir.partitions print them"
    )]
    NotCanonical {
        value: String,
        canonical: String,
        table: String,
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
    #[error(
        "no partition of {table} in [{from}, {to}) is staged or written{known}: check the window's bounds, or pass --allow-empty where an empty window is expected"
    )]
    EmptyWindow {
        table: String,
        from: String,
        to: String,
        /// The partitions there are, first and last, as a hint.
        known: String,
    },
    #[error(
        "partition {partition} of {table} holds no staged rows: a backfill would empty it in the target; pass --allow-empty to do that (check the name: as `weir status` and weir.partitions print it)"
    )]
    NothingStagedIn { table: String, partition: String },
    #[error("table `{0}` is not in the config (give its source or target name)")]
    UnknownTable(String),
    #[error("table `{name}` names several tables ({tables}): give the schema too (`schema.table`)")]
    AmbiguousTable { name: String, tables: String },
    #[error(
        "{0} is being read again by `weir resync` and the stage does not hold all its rows yet: run this again once `weir status` shows it done"
    )]
    Resyncing(String),
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
                | BackfillError::NotCanonical { .. }
                | BackfillError::EmptyRange { .. }
                | BackfillError::NothingStaged { .. }
                | BackfillError::EmptyWindow { .. }
                | BackfillError::NothingStagedIn { .. }
                | BackfillError::AmbiguousTable { .. }
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
    /// Partitions named exactly as `weir status` and lineage print them, including
    /// those no window reaches (`__null__`, `infinity`, BC days).
    Partitions(Vec<String>),
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

impl PlanEntry {
    /// A partition this stage holds no rows of: written empty.
    fn empty(
        table: &str,
        target: &crate::config::TableName,
        partition: Partition,
        lineage: Option<PartitionLineage>,
        change: String,
    ) -> PlanEntry {
        PlanEntry {
            table: table.to_owned(),
            target: target.to_string(),
            partition: partition.name().into_owned(),
            partition_value: partition,
            staged_rows: 0,
            generation: 0,
            lineage,
            change,
        }
    }
}

/// Checks a window bound against the grain's partition names.
fn check_bound(
    what: &'static str,
    value: &str,
    table: &TableConfig,
    ty: ColumnType,
) -> Result<(), BackfillError> {
    // A calendar bound is a partition name of the grain, as the partitions are named
    // (zero-padded; a year before 1 or past 9999 with its sign).
    let calendar =
        || match crate::partition::predicate(ty, table.grain, &Partition::Key(value.to_owned())) {
            Some(crate::partition::PartitionPredicate::Range { lower, .. }) => {
                crate::partition::partition_of("", table.grain, &lower)
                    .is_ok_and(|p| p.name() == value)
            }
            _ => false,
        };
    let ok = match table.grain {
        Grain::Day | Grain::Month | Grain::Hour => calendar(),
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
            Grain::Day => {
                "write YYYY-MM-DD (a year before 1 or past 9999 with its sign: +10000-01-01)"
            }
            Grain::Month => "write YYYY-MM (a year before 1 or past 9999 with its sign: +10000-01)",
            Grain::Hour => "write YYYY-MM-DDTHH (a year before 1 or past 9999 with its sign)",
            Grain::Value => "write an integer",
        },
    })
}

/// Whether a partition name lies in `[from, to)`.
/// Whether a table's partitions are integer values (grain `value` of an integer
/// column), whose window compares as numbers.
/// How a table's partition names (and window bounds) are ordered.
#[derive(Debug, Clone, Copy)]
enum Order {
    /// As text (values of a text column).
    Text,
    /// As integers (values of an integer column).
    Integer,
    /// In time (calendar partitions, or values of a date or timestamp column): years
    /// before 1 or past 9999 are written with a sign, so their names' text order is not
    /// time order.
    Time(ColumnType, Grain),
}

fn order_of(config: &TableConfig) -> Order {
    let ty = config.partition_column().ty;
    match (config.grain, ty) {
        (Grain::Value, ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt) => {
            Order::Integer
        }
        (Grain::Value, ColumnType::Date | ColumnType::Timestamp | ColumnType::TimestampTz)
        | (Grain::Hour | Grain::Day | Grain::Month, _) => Order::Time(ty, config.grain),
        (Grain::Value, _) => Order::Text,
    }
}

/// The name partition `name` of a `ty` column by `grain` is written with (`None`: it
/// names no partition): a partition's rows are looked up in the target by its bounds,
/// and in the stage by its name, so only one spelling may name it.
fn canonical_name(ty: ColumnType, grain: Grain, name: &str) -> Option<String> {
    use crate::partition::PartitionPredicate;
    let value = match crate::partition::predicate(ty, grain, &Partition::from_name(name))? {
        PartitionPredicate::IsNull => return Some(Partition::Null.name().into_owned()),
        PartitionPredicate::Equals(v) => v,
        PartitionPredicate::Range { lower, .. } => lower,
    };
    crate::partition::partition_of("", grain, &value)
        .ok()
        .map(|p| p.name().into_owned())
}

/// Where a name falls in `order` (`None`: no number orders it).
fn position(order: Order, name: &str) -> Option<i64> {
    use crate::partition::PartitionPredicate;
    let instant = |v: crate::value::Value| match v {
        crate::value::Value::Date(d) => Some(i64::from(d)),
        crate::value::Value::Timestamp(us) => Some(us),
        _ => None,
    };
    match order {
        Order::Text => None,
        Order::Integer => name.parse().ok(),
        Order::Time(ty, Grain::Value) => instant(crate::value::Value::from_text(ty, name).ok()?),
        Order::Time(ty, grain) => {
            match crate::partition::predicate(ty, grain, &Partition::Key(name.to_owned()))? {
                PartitionPredicate::Range { lower, .. } => instant(lower),
                _ => None,
            }
        }
    }
}

fn in_window(name: &Partition, from: &str, to: &str, order: Order) -> bool {
    let Partition::Key(k) = name else {
        return false;
    };
    // The `infinity` partitions are in no window (`--partition` names them); a text
    // value that only ends so (`beyond-infinity`) is an ordinary name.
    if k == "infinity" || k == "-infinity" {
        return false;
    }
    match (
        position(order, k),
        position(order, from),
        position(order, to),
    ) {
        (Some(k), Some(f), Some(t)) => f <= k && k < t,
        _ if matches!(order, Order::Integer) => false,
        _ => from <= k.as_str() && k.as_str() < to,
    }
}

/// Finds a configured table by source or target name.
/// A full name (`schema.table`, source or target) wins over a bare target table name;
/// a bare name that several tables have is refused, naming them.
pub fn find_table<'a>(p: &'a Pipeline, name: &str) -> Result<&'a str, BackfillError> {
    if let Some((source, _)) = p
        .tables()
        .find(|(source, (t, _, _))| *source == name || t.target.to_string() == name)
    {
        return Ok(source.as_str());
    }
    // A bare name: the source table `public.NAME` (as the config reads a bare
    // `source`), or a target table of that name in any schema.
    let public = format!("public.{name}");
    let mut bare: Vec<(&'a str, String)> = p
        .tables()
        .filter_map(|(source, (t, _, _))| {
            if *source == public {
                Some((source.as_str(), format!("the source {source}")))
            } else if t.target.name == name {
                Some((
                    source.as_str(),
                    format!("the target {} of {source}", t.target),
                ))
            } else {
                None
            }
        })
        .collect();
    bare.sort_unstable();
    match bare.as_slice() {
        [(one, _)] => Ok(one),
        [] => Err(BackfillError::UnknownTable(name.to_owned())),
        several => Err(BackfillError::AmbiguousTable {
            name: name.to_owned(),
            tables: several
                .iter()
                .map(|(_, what)| what.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The partitions of one table in scope, with their staged rows and lineage.
pub async fn plan(
    p: &Pipeline,
    table: &str,
    scope: &Scope,
    allow_empty: bool,
) -> Result<Vec<PlanEntry>, BackfillError> {
    let (config, target, _) = p.table(table)?;
    if p.resync_holds()?.iter().any(|t| t == table) {
        return Err(BackfillError::Resyncing(table.to_owned()));
    }
    let order = order_of(config);
    if let Scope::Window { from, to } = scope {
        let ty = config.partition_column().ty;
        check_bound("--from", from, config, ty)?;
        check_bound("--to", to, config, ty)?;
        let empty = match (position(order, from), position(order, to)) {
            (Some(f), Some(t)) => f >= t,
            _ if matches!(order, Order::Integer) => true,
            _ => from >= to,
        };
        if empty {
            return Err(BackfillError::EmptyRange {
                from: from.clone(),
                to: to.clone(),
            });
        }
    }
    if let Scope::Partitions(named) = scope {
        let ty = config.partition_column().ty;
        for name in named {
            match canonical_name(ty, config.grain, name) {
                Some(canonical) if canonical == *name => {}
                Some(canonical) => {
                    // Another spelling of a partition (`2026-03-01T5`): its rows in
                    // the target are the partition's, its staged rows none, so a
                    // backfill would empty it and record lineage under a name
                    // nothing else uses.
                    return Err(BackfillError::NotCanonical {
                        value: name.clone(),
                        canonical,
                        table: table.to_owned(),
                    });
                }
                None => {
                    return Err(BackfillError::BadWindow {
                        what: "--partition",
                        value: name.clone(),
                        grain: config.grain,
                        table: table.to_owned(),
                        hint: "name a partition as `weir status` and weir.partitions print it (`__null__`, `infinity`, `-0043-03-15`)",
                    });
                }
            }
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
    let stage_id = p.stage().stage_id().map_err(PipelineError::from)?;
    let mut names: BTreeMap<Partition, ()> = staged.keys().map(|k| (k.clone(), ())).collect();
    // Lineage of partitions of another grain (written from a stage of an earlier
    // contract) names no partition of this one: passed over, and said once.
    let ty = config.partition_column().ty;
    let mut foreign = Vec::new();
    for name in lineage.keys() {
        let partition = Partition::from_name(name);
        if crate::partition::predicate(ty, config.grain, &partition).is_none() {
            foreign.push(name.as_str());
        } else {
            names.insert(partition, ());
        }
    }
    if let Some(first) = foreign.first() {
        tracing::warn!(
            table = %table,
            target = %target.name,
            partitions = foreign.len(),
            first = %first,
            grain = %config.grain,
            "lineage lists partitions that are not partitions of this grain (written under an earlier one); passed over: remove them with `DELETE FROM weir.partitions WHERE target_table = '<target>' AND partition IN (…)` once the target no longer holds their rows"
        );
    }
    if let Scope::Partitions(named) = scope {
        // A named partition nothing knows is checked too: its target rows, if any.
        for name in named {
            names.insert(Partition::from_name(name), ());
        }
    }
    let known = match (names.keys().next(), names.keys().next_back()) {
        (Some(first), Some(last)) => format!(
            " (its {} partitions run from {first} to {last})",
            names.len()
        ),
        _ => " (it has none yet)".to_owned(),
    };
    let mut out = Vec::new();
    for (partition, ()) in names {
        let l = lineage.get(partition.name().as_ref()).cloned();
        let selected = match scope {
            Scope::Window { from, to } => in_window(&partition, from, to, order),
            Scope::Stale => l.as_ref().is_some_and(|l| is_stale(l, &expected)),
            Scope::Partitions(named) => named.iter().any(|n| Partition::from_name(n) == partition),
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
            Some(l)
                if l.stage_id
                    .as_deref()
                    .is_some_and(|id| !id.is_empty() && id != stage_id) =>
            {
                "written from another stage".to_owned()
            }
            Some(l) if l.stage_generation != generation as i64 => {
                format!("generation {} -> {generation}", l.stage_generation)
            }
            Some(_) => "unchanged (rewritten identically)".to_owned(),
        };
        out.push(PlanEntry {
            table: table.to_owned(),
            target: target.name.to_string(),
            partition: partition.name().into_owned(),
            partition_value: partition,
            staged_rows,
            generation,
            lineage: l,
            change,
        });
    }
    if let Scope::Window { from, to } = scope
        && !allow_empty
        && out.is_empty()
    {
        return Err(BackfillError::EmptyWindow {
            table: table.to_owned(),
            from: from.clone(),
            to: to.clone(),
            known,
        });
    }
    if let Scope::Partitions(_) = scope
        && !allow_empty
        && let Some(empty) = out.iter().find(|e| e.staged_rows == 0)
    {
        return Err(BackfillError::NothingStagedIn {
            table: table.to_owned(),
            partition: empty.partition.clone(),
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

/// The partitions of `table` the stage holds rows of and wrote before (no dirty mark,
/// no failure recorded) that the target's lineage does not know: the target table was
/// made anew (dropped and `weir init` run again, or a new target database), or its
/// lineage was removed. What [`rewrite_unrecorded`] writes again.
pub async fn unrecorded(p: &Pipeline, table: &str) -> Result<Vec<PlanEntry>, BackfillError> {
    let (_, target, _) = p.table(table)?;
    let stage: Arc<Stage> = p.stage_arc();
    let t = table.to_owned();
    let (staged, dirty, failed, position) = tokio::task::spawn_blocking(move || {
        Ok::<_, crate::stage::StageError>((
            stage.partitions(&t)?,
            stage.dirty_partitions()?,
            stage.failures()?,
            stage.checkpoint()?.map_or(0, |c| c.position),
        ))
    })
    .await
    .map_err(PipelineError::Task)?
    .map_err(PipelineError::from)?;
    let client = target::connect(p.dsn()).await?;
    // A table truncated or made anew by hand holds none of the rows lineage records:
    // a merge would then write only the keys changed since, for good.
    let forgotten = target::forget_lineage_of_empty(&client, &target.name).await?;
    if forgotten > 0 {
        tracing::warn!(table = %target.name, partitions = forgotten, "the target table holds no rows while its lineage recorded rows (truncated, or made anew): its partitions are written again");
    }
    let lineage = target::table_lineage(&client, &target.name).await?;
    let pending: HashSet<&Partition> = dirty
        .iter()
        .filter(|d| d.table == table)
        .map(|d| &d.partition)
        .chain(
            failed
                .iter()
                .filter(|f| f.table == table)
                .map(|f| &f.partition),
        )
        .collect();
    // Partitions the stage holds rows of that lineage does not list, or lists as
    // another stage's; and those written by this stage at a generation it has changed
    // since, not dirty: the stage wrote the later state to another target
    // (`WEIR_TARGET_DSN` pointed elsewhere, then back, or the target restored from a
    // backup), so this target holds the older one.
    let stage_id = p.stage().stage_id().map_err(PipelineError::from)?;
    let mut entries: Vec<PlanEntry> = staged
        .iter()
        .filter(|(partition, _)| !pending.contains(partition))
        .filter_map(|(partition, &(generation, staged_rows))| {
            let (lineage, change) = match lineage.get(partition.name().as_ref()) {
                None if staged_rows > 0 => (None, "not in the target's lineage".to_owned()),
                // This stage's write, or one of a build that recorded no stage (this
                // stage's before an upgrade, as like as not; a write of the stage's
                // state is right either way).
                Some(l)
                    if l.stage_id
                        .as_deref()
                        .is_none_or(|s| s.is_empty() || s == stage_id)
                        && u64::try_from(l.stage_generation).is_ok_and(|g| g < generation) =>
                {
                    let change = format!(
                        "generation {} -> {generation}, written since to another target",
                        l.stage_generation
                    );
                    (Some(l.clone()), change)
                }
                // Written last by another stage (of this source: another source's is
                // refused at start) from a position this stage is at or past, though
                // this one holds rows of it: the target was restored from a backup
                // taken before this stage wrote it, or this stage's writes went to
                // another target. (A write from past this stage's position is newer
                // than this stage: an older checkpoint imported, which the source then
                // refuses, or catches up.)
                Some(l)
                    if staged_rows > 0
                        && l.stage_id.as_deref().is_some_and(|s| s != stage_id)
                        && u64::try_from(l.source_position).is_ok_and(|at| at <= position) =>
                {
                    (Some(l.clone()), "written last by another stage".to_owned())
                }
                _ => return None,
            };
            Some(PlanEntry {
                table: table.to_owned(),
                target: target.name.to_string(),
                partition: partition.name().into_owned(),
                partition_value: partition.clone(),
                staged_rows,
                generation,
                lineage,
                change,
            })
        })
        .collect();
    let sources = target::stage_sources(&client).await?;
    entries.extend(left_by_another_stage(
        p, table, &staged, &lineage, &sources,
    )?);
    Ok(entries)
}

/// The partitions of `table` that another stage of the same PostgreSQL source wrote
/// (lineage names another stage id) and that this stage, whose first load of the table
/// is done and whose position is past that write, holds no rows of: the source no
/// longer has them (a stage made anew after the table was dropped and made again, or
/// after its rows were deleted while nothing streamed). Written as this stage holds
/// them, empty; left alone otherwise. Not for a JSON-lines feed, whose new stage holds
/// only what its file gave it; nor for a stage registered as reading another source
/// (`sources`: a table of the same name in another database is another pipeline's).
fn left_by_another_stage(
    p: &Pipeline,
    table: &str,
    staged: &BTreeMap<Partition, (u64, u64)>,
    lineage: &BTreeMap<String, PartitionLineage>,
    sources: &std::collections::HashMap<String, String>,
) -> Result<Vec<PlanEntry>, BackfillError> {
    if !p.resyncs() {
        return Ok(Vec::new());
    }
    let (config, target, _) = p.table(table)?;
    let stage = p.stage();
    let stage_id = stage.stage_id().map_err(PipelineError::from)?;
    let position = stage
        .checkpoint()
        .map_err(PipelineError::from)?
        .map_or(0, |c| c.position);
    if !p.table_loaded(table)? || position == 0 {
        return Ok(Vec::new());
    }
    let ty = config.partition_column().ty;
    let held = |partition: &Partition| staged.get(partition).is_some_and(|(_, rows)| *rows > 0);
    let entry = |partition: Partition, l: &PartitionLineage, change: String| {
        PlanEntry::empty(table, &target.name, partition, Some(l.clone()), change)
    };
    let mut out: BTreeMap<Partition, PlanEntry> = BTreeMap::new();
    for (name, l) in lineage {
        let other_stage = l.stage_id.as_deref().is_some_and(|id| {
            !id.is_empty()
                && id != stage_id
                && sources
                    .get(id)
                    .is_none_or(|source| source == p.source_identity())
        });
        if !other_stage
            || l.row_count == 0
            || !u64::try_from(l.source_position).is_ok_and(|at| at <= position)
        {
            continue;
        }
        let partition = Partition::from_name(name);
        if crate::partition::predicate(ty, config.grain, &partition).is_some() {
            if !held(&partition) {
                let change = "written by another stage, not in this one".to_owned();
                out.insert(partition.clone(), entry(partition, l, change));
            }
            continue;
        }
        // Named under another grain (the stage made anew after the table's grain
        // changed): the partitions of this grain that hold its span and that this
        // stage holds no rows of would keep its rows; those it holds are replaced
        // whole when written. One this stage wrote after it is left alone.
        let Some(now) = crate::partition::regrained(ty, config.grain, name, REGRAINED_MAX) else {
            continue;
        };
        for partition in now {
            let written_after = lineage.get(partition.name().as_ref()).is_some_and(|w| {
                w.stage_id.as_deref() == Some(stage_id.as_str())
                    && w.written_at_us >= l.written_at_us
            });
            if !held(&partition) && !written_after {
                let change =
                    format!("holds partition {name} another stage wrote under another grain");
                out.entry(partition.clone())
                    .or_insert_with(|| entry(partition, l, change));
            }
        }
    }
    Ok(out.into_values().collect())
}

/// Partitions of the table's grain one partition of another grain may map to, at most
/// (a month in hours is 744): past it, left to `weir verify` and the user.
const REGRAINED_MAX: usize = 1_000;

/// Writes again, before a run streams, every partition [`unrecorded`] finds in any
/// table (but those a resync is reading again): a target table made anew holds none of
/// the rows the stage wrote to it before, and only partitions that change would be
/// written otherwise. Returns how many were written.
pub async fn rewrite_unrecorded(p: &Pipeline) -> Result<usize, BackfillError> {
    let holds = p.resync_holds()?;
    let mut entries = Vec::new();
    for (table, _) in p.tables() {
        if !holds.contains(table) {
            entries.extend(unrecorded(p, table).await?);
        }
    }
    if entries.is_empty() {
        return Ok(0);
    }
    tracing::warn!(
        partitions = entries.len(),
        "partitions the stage wrote before are not in the target's lineage (a target table made anew, or its lineage removed), or that another stage of the source wrote and this one holds no rows of (the source no longer has them): writing them again"
    );
    let parallel = p.config().engine.parallelism;
    let report = backfill(
        p,
        &Scope::Stale,
        entries,
        parallel,
        true,
        &|_| {},
        std::future::pending(),
    )
    .await?;
    if let Some((partition, error)) = report.failed.first() {
        tracing::warn!(partition = %partition, error = %error, failed = report.failed.len(), "partitions not written again; `weir backfill` writes them");
    }
    Ok(report.written.len())
}

/// The tables of a PostgreSQL source whose first load is not done: what
/// [`rewrite_once_loaded`] waits for.
pub fn still_loading(p: &Pipeline) -> Result<Vec<String>, BackfillError> {
    if !p.resyncs() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (table, _) in p.tables() {
        if !p.table_loaded(table)? {
            out.push(table.to_owned());
        }
    }
    Ok(out)
}

/// Beside a run: as each table of `loading` finishes its first load, runs
/// [`rewrite_unrecorded`] again, which could not tell before which partitions another
/// stage left (a live run would otherwise keep them until it is restarted). Returns
/// how many partitions it wrote, once every table is loaded.
pub async fn rewrite_once_loaded(
    p: &Pipeline,
    mut loading: Vec<String>,
    every: std::time::Duration,
) -> Result<usize, BackfillError> {
    let mut written = 0;
    while !loading.is_empty() {
        tokio::time::sleep(every).await;
        let before = loading.len();
        let mut failed = None;
        loading.retain(|t| match p.table_loaded(t) {
            Ok(done) => !done,
            Err(e) => {
                failed.get_or_insert(e);
                true
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        if loading.len() < before {
            written += rewrite_unrecorded(p).await?;
        }
    }
    Ok(written)
}

/// Adds to `entries` (the plan of a window of `table`) the partitions of the window
/// that only the source table holds (neither staged nor written): what `verify
/// --against-source` must report missing too (see [`Pipeline::source_partitions`]).
pub async fn add_source_partitions(
    p: &Pipeline,
    table: &str,
    scope: &Scope,
    source: &crate::config::Dsn,
    entries: &mut Vec<PlanEntry>,
) -> Result<(), BackfillError> {
    let Scope::Window { from, to } = scope else {
        return Ok(());
    };
    let found = p.source_partitions(table, from, to, source).await?;
    add_partitions(p, table, scope, found, "only in the source", entries)
}

/// Adds to `entries` (the plan of a window of `table`) the partitions of the window
/// the target table holds rows of that neither the stage nor lineage knows (rows put
/// there by hand, or left by an earlier pipeline): what `verify` must report too.
pub async fn add_target_partitions(
    p: &Pipeline,
    table: &str,
    scope: &Scope,
    entries: &mut Vec<PlanEntry>,
) -> Result<(), BackfillError> {
    let Scope::Window { from, to } = scope else {
        return Ok(());
    };
    let found = p.target_partitions(table, from, to).await?;
    add_partitions(p, table, scope, found, "only in the target", entries)
}

/// Adds the partitions `found` of the window that `entries` lacks, as `change`.
fn add_partitions(
    p: &Pipeline,
    table: &str,
    scope: &Scope,
    found: Vec<Partition>,
    change: &str,
    entries: &mut Vec<PlanEntry>,
) -> Result<(), BackfillError> {
    let Scope::Window { from, to } = scope else {
        return Ok(());
    };
    let (config, target, _) = p.table(table)?;
    let order = order_of(config);
    for partition in found {
        if !in_window(&partition, from, to, order)
            || entries.iter().any(|e| e.partition_value == partition)
        {
            continue;
        }
        entries.push(PlanEntry::empty(
            table,
            &target.name,
            partition,
            None,
            change.to_owned(),
        ));
    }
    entries.sort_by(|a, b| a.partition_value.cmp(&b.partition_value));
    Ok(())
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
/// done or `interrupt` completes. A window's run is recorded in the target; with
/// `resume`, an unfinished one is resumed (partitions written since it started are
/// skipped), else the window starts afresh.
#[allow(clippy::too_many_arguments)]
pub async fn backfill(
    p: &Pipeline,
    scope: &Scope,
    entries: Vec<PlanEntry>,
    parallel: usize,
    resume: bool,
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
        let (table_config, target, _) = p.table(&first.table)?;
        let client = target::connect(p.dsn()).await?;
        let (started, resumed) =
            target::begin_backfill(&client, &target.name, from, to, resume).await?;
        if resumed {
            let before = todo.len();
            // Done by the interrupted run: replaced whole since it started, with the
            // transform and config of now. A live engine's merge since (the keys it
            // changed only) or a write under another plugin config is not.
            let expected = target::expected_transform(table_config).ok();
            let done = |l: &target::PartitionLineage| {
                l.written_at_us >= started
                    && l.write_mode == "replace"
                    && expected.as_ref().is_some_and(|e| !target::is_stale(l, e))
            };
            todo.retain(|e| e.lineage.as_ref().is_none_or(|l| !done(l)));
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
            let result = p
                .write_partition(&e.table, &e.partition_value, false)
                .await
                .and_then(|s| s.ok_or_else(|| PipelineError::UnknownTable(e.table.clone())));
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

#[cfg(test)]
mod tests;
