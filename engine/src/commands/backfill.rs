//! `weir backfill`: rebuilds the partitions of a window (or the stale ones) through the
//! current transform; `--dry-run` lists them with what would change.

use std::io::Write as _;
use std::path::Path;

use weir::backfill;
use weir::config::Config;
use weir::pipeline::Pipeline;

use super::progress::Reporter;

/// Runs `weir backfill` on `table` (every table if `None`) over `scope`.
/// How `weir backfill` runs (its flags besides the scope).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Partition jobs at once.
    pub parallel: usize,
    /// List the plan, write nothing.
    pub dry_run: bool,
    /// A window without staged rows empties its target partitions.
    pub allow_empty: bool,
    /// Rewrite every partition, not resuming an interrupted run of the window.
    pub restart: bool,
}

pub(crate) async fn run(
    config_path: &Path,
    table: Option<&str>,
    scope: &backfill::Scope,
    options: Options,
    metrics_addr: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    if let Some(addr) = metrics_addr {
        weir::metrics::serve(addr)?;
    }
    let dsn = config.target_dsn()?;
    let pipeline = Pipeline::open_read_only(config, dsn).await?;
    let result = backfill_tables(&pipeline, table, scope, options).await;
    super::log_peak_memory("backfill ended");
    result
}

async fn backfill_tables(
    pipeline: &Pipeline,
    table: Option<&str>,
    scope: &backfill::Scope,
    options: Options,
) -> anyhow::Result<()> {
    let Options {
        parallel,
        dry_run,
        allow_empty,
        restart,
    } = options;
    let tables: Vec<String> = match table {
        Some(t) => vec![backfill::find_table(pipeline, t)?.to_owned()],
        None => {
            let mut all: Vec<String> = pipeline.tables().map(|(s, _)| s.clone()).collect();
            all.sort();
            all
        }
    };
    let mut out = std::io::stdout();
    let mut failures = Vec::new();
    for table in tables {
        let mut entries = backfill::plan(pipeline, &table, scope, allow_empty).await?;
        if allow_empty {
            // Partitions only the target holds rows of are emptied too.
            backfill::add_target_partitions(pipeline, &table, scope, &mut entries).await?;
        }
        if dry_run {
            writeln!(out, "{table}: {} partitions", entries.len())?;
            for e in &entries {
                writeln!(
                    out,
                    "  {:<14} {:>9} staged rows  {}",
                    e.partition, e.staged_rows, e.change
                )?;
            }
            continue;
        }
        if entries.is_empty() {
            writeln!(out, "{table}: nothing to backfill")?;
            continue;
        }
        let reporter = Reporter::new("backfill", entries.len());
        let report = backfill::backfill(
            pipeline,
            scope,
            entries,
            parallel,
            !restart,
            &|p| reporter.update(p),
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
        reporter.finish();
        writeln!(
            out,
            "{table}: wrote {} partitions ({} rows){}{}",
            report.written.len(),
            report.rows,
            if report.already_done > 0 {
                format!(
                    "; {} already done by an interrupted run of this window, passed over (`--restart` rewrites them too)",
                    report.already_done
                )
            } else {
                String::new()
            },
            if report.superseded.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} left as they are, written from newer changes than this stage holds ({}): by the live engine (a write it merged holds only the keys changed since, so to repair rows damaged by hand in them, run this backfill again once they are quiet), or by another stage further along the feed (a restored checkpoint: let `weir run` catch up first)",
                    report.superseded.len(),
                    report.superseded.join(", ")
                )
            }
        )?;
        for (p, why) in &report.failed {
            writeln!(out, "  failed: {p}: {why}")?;
            failures.push(format!("{table} {p}"));
        }
        if report.interrupted {
            writeln!(
                out,
                "interrupted: {} partitions written stay committed; {} not written (in-flight ones rolled back): {}",
                report.written.len(),
                report.not_written.len(),
                report.not_written.join(", ")
            )?;
            anyhow::bail!(
                "backfill interrupted: run the same command again to finish it (it resumes)"
            );
        }
    }
    if !failures.is_empty() {
        anyhow::bail!(
            "backfill failed for {} partitions: {}",
            failures.len(),
            failures.join(", ")
        );
    }
    Ok(())
}
