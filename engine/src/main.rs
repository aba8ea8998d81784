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
    /// Run a self-contained demo on a throwaway local PostgreSQL.
    Demo {
        /// Keep the cluster and files until Ctrl-C, to query the result.
        #[arg(long)]
        keep: bool,
    },
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
    for (table, rows) in &s.staged_rows {
        writeln!(out, "staged:     {table}: {rows} rows")?;
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
