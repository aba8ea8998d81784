//! The `weir` command line. Exit codes: 0 success, 1 runtime failure, 2 usage or
//! configuration error.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use weir::config::{Config, ConfigError};
use weir::pipeline::{self, Pipeline};
use weir::stage::Stage;
use weir::stage::checkpoint::{self, CheckpointError};

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "Change-feed ingestion: durable stage, idempotent partition replace into PostgreSQL"
)]
struct Cli {
    /// The config file (TOML).
    #[arg(long, short, global = true, default_value = "weir.toml")]
    config: PathBuf,
    /// Log format on stderr; levels come from RUST_LOG (default: info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the config; create the stage, the target's weir schema and the target tables.
    Init,
    /// Tail the feed, stage it, and write dirty partitions.
    Run {
        /// Drain what is available now, write every dirty partition, and exit.
        #[arg(long)]
        once: bool,
    },
    /// Show the stage position, dirty partitions and the last writes.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Inspect, export, import and check the stage (the only durable copy of the feed).
    Checkpoint {
        #[command(subcommand)]
        command: CheckpointCommand,
    },
    /// Run a self-contained demo on a throwaway local PostgreSQL.
    Demo {
        /// Keep the cluster and files until Ctrl-C, to query the result.
        #[arg(long)]
        keep: bool,
    },
}

#[derive(Debug, Subcommand)]
enum CheckpointCommand {
    /// Show the stage: position, rows per table, dirty partitions, pending work, size.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write the position and the staged state to FILE (versioned, checksummed), to
    /// move the stage to another machine. Works while `weir run` runs.
    Export {
        /// The checkpoint file to write (replaced atomically if it exists).
        file: PathBuf,
    },
    /// Fill the config's stage path (absent, or an empty stage) from FILE, verified first.
    Import {
        /// A file written by `weir checkpoint export` from a stage of the same feed.
        file: PathBuf,
    },
    /// Verify every record of the stage; exit 1 and list the problems if it is damaged or
    /// inconsistent.
    Check,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            if is_usage_error(&error) {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Configuration errors are the user's to fix before anything runs: exit code 2.
fn is_usage_error(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<ConfigError>().is_some())
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo { keep } => weir::demo::run(&mut std::io::stdout(), keep)
            .await
            .context("the demo failed"),
        Command::Init => {
            let config = Config::load(&cli.config)?;
            let report = pipeline::init(&config, &config.target_dsn()?).await?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "stage: {}", report.stage)?;
            for line in report.source {
                writeln!(out, "source: {line}")?;
            }
            for table in report.tables {
                writeln!(out, "table: {table}")?;
            }
            writeln!(
                out,
                "ready: run `weir --config {} run`",
                cli.config.display()
            )?;
            Ok(())
        }
        Command::Run { once } => {
            let config = Config::load(&cli.config)?;
            let dsn = config.target_dsn()?;
            let pipeline = Pipeline::open(config, dsn).await?;
            let report = pipeline.run(once, shutdown_signal()).await?;
            writeln!(
                std::io::stdout().lock(),
                "staged {} transactions ({} changes, {} already staged); wrote {} partitions ({} rows); {} dead letters",
                report.transactions,
                report.changes,
                report.skipped_transactions,
                report.partitions_written,
                report.rows_written,
                report.dead_letters
            )?;
            Ok(())
        }
        Command::Checkpoint { command } => {
            let config = Config::load(&cli.config)?;
            checkpoint_command(&config, command).await
        }
        Command::Status { json } => {
            let config = Config::load(&cli.config)?;
            let status = pipeline::status(&config, &config.target_dsn()?, 20).await?;
            let mut out = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &status)?;
                writeln!(out)?;
            } else {
                print_status(&mut out, &status)?;
            }
            Ok(())
        }
    }
}

/// Runs blocking stage work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CheckpointError> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(f)
        .await
        .context("a stage task stopped unexpectedly")??)
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
        CheckpointCommand::Export { file } => {
            let report =
                blocking(move || checkpoint::export(&Stage::open_read_only(&path)?, &file)).await?;
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

fn position_text(checkpoint: Option<weir::source::Checkpoint>) -> String {
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
    writeln!(out, "size on disk:   {} bytes", s.size_bytes)?;
    Ok(())
}

fn print_status(out: &mut impl std::io::Write, s: &pipeline::Status) -> std::io::Result<()> {
    writeln!(out, "stage:      {}", s.stage)?;
    writeln!(
        out,
        "source:     {}",
        s.source.as_deref().unwrap_or("(none yet)")
    )?;
    match s.position {
        Some(p) => writeln!(out, "position:   {p}")?,
        None => writeln!(out, "position:   (nothing staged yet)")?,
    }
    writeln!(
        out,
        "stage size: {:.1} MiB",
        s.stage_size_bytes as f64 / 1_048_576.0
    )?;
    for (table, rows) in &s.staged_rows {
        writeln!(out, "staged:     {table}: {rows} rows")?;
    }
    if let (Some(wal_status), Some(lag)) = (&s.slot_wal_status, s.slot_lag_bytes) {
        writeln!(out, "slot:       wal_status {wal_status}, lag {lag} bytes")?;
    }
    if let Some(e) = &s.source_error {
        writeln!(out, "source:     unavailable: {e}")?;
    }
    writeln!(out, "dirty:      {} partitions", s.dirty_partitions.len())?;
    for d in s.dirty_partitions.iter().take(50) {
        writeln!(
            out,
            "  {} {} (generation {})",
            d.table, d.partition, d.generation
        )?;
    }
    if s.pending_dead_letters > 0 {
        writeln!(
            out,
            "dead letters waiting to be written: {}",
            s.pending_dead_letters
        )?;
    }
    if let Some(e) = &s.target_error {
        writeln!(out, "target:     unavailable: {e}")?;
    }
    writeln!(out, "last writes:")?;
    for w in &s.last_writes {
        writeln!(
            out,
            "  {} {:<14} rows={:<7} generation={:<6} position={:<10} checksum={} at {}",
            w.target_table,
            w.partition,
            w.row_count,
            w.stage_generation,
            w.source_position,
            w.checksum,
            w.written_at
        )?;
    }
    Ok(())
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
