//! `weir checkpoint`: shows, exports, imports and checks the stage (the only durable
//! copy of the feed).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::config::Config;
use weir::stage::Stage;
use weir::stage::checkpoint::{self, CheckpointError};

use crate::CheckpointCommand;

/// Runs `weir checkpoint COMMAND`.
pub(crate) async fn run(config_path: &Path, command: CheckpointCommand) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    checkpoint_command(&config, command).await
}

/// Runs blocking stage work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CheckpointError> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .context("a stage task stopped unexpectedly")??)
}

/// Exports the stage; while a large transaction is being applied (a live `weir run`
/// commits it within seconds), opens the stage again every 250 ms, up to `wait`.
async fn export_when_committed(
    path: PathBuf,
    file: PathBuf,
    wait: Duration,
) -> anyhow::Result<checkpoint::ExportReport> {
    let deadline = Instant::now() + wait;
    let mut told = false;
    loop {
        let (path, file) = (path.clone(), file.clone());
        let result = tokio::task::spawn_blocking(move || {
            checkpoint::export(&Stage::open_read_only(&path)?, &file)
        })
        .await
        .context("a stage task stopped unexpectedly")?;
        match result {
            Err(CheckpointError::Applying { .. }) if Instant::now() < deadline => {
                if !told {
                    tracing::info!(
                        wait_s = wait.as_secs(),
                        "a large transaction is being applied to the stage: waiting for it to commit"
                    );
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            result => return Ok(result?),
        }
    }
}

async fn checkpoint_command(config: &Config, command: CheckpointCommand) -> anyhow::Result<()> {
    let path = config.stage_path.clone();
    let stdout = std::io::stdout();
    match command {
        CheckpointCommand::Show { json } => {
            let summary =
                blocking(move || checkpoint::summary(&Stage::open_read_only(&path)?)).await?;
            let mut out = stdout.lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &summary)?;
                writeln!(out)?;
            } else {
                print_summary(&mut out, &summary)?;
            }
        }
        CheckpointCommand::Export { file, wait } => {
            let report = export_when_committed(path, file, Duration::from_secs(wait)).await?;
            writeln!(
                stdout.lock(),
                "exported {} rows, {} partition generations, {} dirty partitions and {} dead letters at position {} to {} ({} bytes, sha256 {})",
                report.counts.rows,
                report.counts.generations,
                report.counts.dirty,
                report.counts.dead_letters,
                position_text(report.checkpoint),
                report.file.display(),
                report.bytes,
                report.sha256
            )?;
        }
        CheckpointCommand::Import { file } => {
            let source_id = config.source_id();
            let report = blocking(move || checkpoint::import(&file, &path, &source_id)).await?;
            writeln!(
                stdout.lock(),
                "imported {} rows, {} partition generations, {} dirty partitions and {} dead letters into {} at position {}: `weir run` continues the feed from there",
                report.counts.rows,
                report.counts.generations,
                report.counts.dirty,
                report.counts.dead_letters,
                report.stage.display(),
                position_text(report.checkpoint),
            )?;
        }
        CheckpointCommand::Check => {
            let report =
                blocking(move || checkpoint::check(&Stage::open_read_only(&path)?)).await?;
            let mut out = stdout.lock();
            for w in &report.warnings {
                writeln!(out, "warning: {w}")?;
            }
            for p in &report.problems {
                writeln!(out, "problem: {p}")?;
            }
            if !report.is_healthy() {
                anyhow::bail!(
                    "the stage at {} is damaged or inconsistent ({} problems above): restore it with `weir checkpoint import` from an export into a new stage path, or rebuild it from the feed into a new stage path",
                    config.stage_path.display(),
                    report.problems.len()
                );
            }
            writeln!(
                out,
                "stage is consistent: {} rows, position {}",
                report.rows,
                position_text(report.checkpoint)
            )?;
        }
    }
    Ok(())
}

fn position_text(checkpoint: Option<weir::feed::Position>) -> String {
    checkpoint.map_or_else(
        || "none (nothing staged yet)".to_owned(),
        |c| c.position.to_string(),
    )
}

fn print_summary(
    out: &mut impl std::io::Write,
    s: &checkpoint::StageSummary,
) -> std::io::Result<()> {
    writeln!(out, "stage:          {}", s.path)?;
    writeln!(out, "format version: {}", s.format_version)?;
    writeln!(
        out,
        "source:         {}",
        s.source_id.as_deref().unwrap_or("(none)")
    )?;
    match s.checkpoint {
        Some(c) => writeln!(out, "position:       {} (cursor {})", c.position, c.cursor)?,
        None => writeln!(out, "position:       none (nothing staged yet)")?,
    }
    writeln!(out, "generation:     {}", s.generation)?;
    if s.rows.is_empty() {
        writeln!(out, "rows:           0")?;
    }
    for (table, rows) in &s.rows {
        writeln!(out, "rows:           {table}: {rows}")?;
    }
    writeln!(out, "dirty:          {} partitions", s.dirty.len())?;
    for d in s.dirty.iter().take(50) {
        writeln!(
            out,
            "  {} {} (generation {})",
            d.table, d.partition, d.generation
        )?;
    }
    if s.dirty.len() > 50 {
        writeln!(
            out,
            "  ... and {} more (--json lists all)",
            s.dirty.len() - 50
        )?;
    }
    writeln!(
        out,
        "pending:        {} chunks{}",
        s.pending_chunks,
        if s.applying {
            "; a large transaction is being applied"
        } else {
            ""
        }
    )?;
    writeln!(out, "dead letters:   {} waiting", s.dead_letters)?;
    for c in &s.contracts {
        writeln!(
            out,
            "table:          {}{} -> {}, key ({}), partition by {} {}, transform {}",
            c.source,
            c.source_oid
                .map(|oid| format!(" (relation OID {oid})"))
                .unwrap_or_default(),
            c.target,
            c.key.join(", "),
            c.partition_by,
            c.grain,
            c.transform
        )?;
    }
    writeln!(out, "size on disk:   {} bytes", s.size_bytes)?;
    Ok(())
}
