//! `weir verify`: the double-run test of a window's partitions, printed as a table or
//! JSON; fails naming every partition that did not pass.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use weir::backfill;
use weir::config::{Config, SourceConfig};
use weir::pipeline::Pipeline;

use super::progress::Reporter;

/// Runs `weir verify` on the partitions of `table` in `scope` (a window, or named).
pub(crate) async fn run(
    config_path: &Path,
    table: &str,
    scope: backfill::Scope,
    parallel: usize,
    against_source: bool,
    json: bool,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let source = if against_source {
        if !matches!(config.source, SourceConfig::Postgres { .. }) {
            anyhow::bail!(
                "--against-source compares the target with a PostgreSQL source table; this config's source is JSON lines: run `weir verify` without it"
            );
        }
        Some(
            config
                .source_dsn()?
                .context("the source's DSN is not set")?,
        )
    } else {
        None
    };
    let dsn = config.target_dsn()?;
    let pipeline = Pipeline::open_read_only(config, dsn).await?;
    let table = backfill::find_table(&pipeline, table)?.to_owned();
    let mut entries = backfill::plan(&pipeline, &table, &scope, true).await?;
    backfill::add_target_partitions(&pipeline, &table, &scope, &mut entries).await?;
    if let Some(source) = &source {
        backfill::add_source_partitions(&pipeline, &table, &scope, source, &mut entries).await?;
    }
    let reporter = Reporter::new("verify", entries.len());
    let rows = backfill::verify(&pipeline, entries, parallel, source.as_ref(), &|p| {
        reporter.update(p)
    })
    .await;
    super::log_peak_memory("verify ended");
    let rows = rows?;
    reporter.finish();
    let mut out = std::io::stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{:<14} {:>9} {:<34} {:>9} {:<7} verdict",
            "partition", "rows", "checksum", "target", "matches"
        )?;
        for r in &rows {
            writeln!(
                out,
                "{:<14} {:>9} {:<34} {:>9} {:<7} {}",
                r.partition,
                r.rows,
                r.checksum,
                r.target_rows,
                if r.target_matches { "yes" } else { "NO" },
                r.reason
                    .as_deref()
                    .map_or_else(|| "ok".to_owned(), |why| format!("FAIL: {why}"))
            )?;
        }
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.ok)
        .map(|r| r.partition.as_str())
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "verify failed for {} of {} partitions: {}",
            failed.len(),
            rows.len(),
            failed.join(", ")
        );
    }
    if rows.is_empty() {
        // Nothing to compare is not a pass: most often a mistyped bound.
        return Err(super::usage(format!(
            "no partition of {table} in this scope is staged or written (nor in the source, with --against-source): nothing was verified; check the window's bounds or the partition's name"
        )));
    }
    if !json {
        writeln!(out, "verify passed: {} partitions", rows.len())?;
    }
    Ok(())
}
