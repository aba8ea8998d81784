//! The `weir` command line. Exit codes: 0 success, 1 runtime failure, 2 usage or
//! configuration error.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use weir::backfill;
use weir::config::ConfigError;

mod commands;

/// jemalloc: glibc's per-thread arenas kept what staging threads freed (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "Change-feed ingestion: durable stage, idempotent partition replace into PostgreSQL"
)]
struct Cli {
    /// The config file (TOML) [default: weir.toml].
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
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

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the config; create the stage, the target's weir schema and the target tables.
    Init(commands::init::InitArgs),
    /// Tail the feed, stage it, and write dirty partitions.
    Run {
        /// Drain what is available now, write every dirty partition, and exit.
        #[arg(long)]
        once: bool,
        /// Serve Prometheus metrics at http://ADDR/metrics while running (e.g.
        /// 127.0.0.1:9187).
        #[arg(long, value_name = "IP:PORT")]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// Rebuild the partitions of a window (or the stale ones) from the stage through
    /// the current transform, with replace semantics; safe beside a live `weir run`.
    Backfill {
        /// The table (source or target name); optional with --stale (all tables).
        #[arg(long, required_unless_present = "stale")]
        table: Option<String>,
        /// First partition of the window (e.g. 2026-01-01 for grain day).
        #[arg(
            long,
            requires = "to",
            conflicts_with = "stale",
            allow_hyphen_values = true
        )]
        from: Option<String>,
        /// End of the window, exclusive.
        #[arg(
            long,
            requires = "from",
            conflicts_with = "stale",
            allow_hyphen_values = true
        )]
        to: Option<String>,
        /// A partition by its name (repeatable), instead of a window: reaches those no
        /// window does (`__null__`, `infinity`, BC days such as `-0043-03-15`).
        #[arg(long, value_name = "NAME", allow_hyphen_values = true, conflicts_with_all = ["from", "to", "stale"])]
        partition: Vec<String>,
        /// The partitions whose lineage names another plugin or config than the config's.
        #[arg(long, required_unless_present_any = ["from", "partition"])]
        stale: bool,
        /// Rewrite every partition of the window, also those an interrupted backfill of
        /// the same window replaced already (which a run resumes past by default).
        #[arg(long)]
        restart: bool,
        /// Partition jobs at once.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        /// List the partitions with their staged rows and what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Allow a window without staged rows (it empties those target partitions).
        #[arg(long)]
        allow_empty: bool,
        /// Serve Prometheus metrics at http://ADDR/metrics while running.
        #[arg(long, value_name = "IP:PORT")]
        metrics_addr: Option<std::net::SocketAddr>,
    },
    /// The double-run test: compute each partition of the window twice from the stage and
    /// compare the runs with each other and with the target; exit 1 naming any failure.
    Verify {
        /// The table (source or target name).
        #[arg(long)]
        table: String,
        /// First partition of the window.
        #[arg(
            long,
            requires = "to",
            required_unless_present = "partition",
            allow_hyphen_values = true
        )]
        from: Option<String>,
        /// End of the window, exclusive.
        #[arg(long, requires = "from", allow_hyphen_values = true)]
        to: Option<String>,
        /// A partition by its name (repeatable), instead of a window: reaches those no
        /// window does (`__null__`, `infinity`, BC days such as `-0043-03-15`).
        #[arg(long, value_name = "NAME", allow_hyphen_values = true, conflicts_with_all = ["from", "to"])]
        partition: Vec<String>,
        /// Partitions checked at once.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        /// Compare the target with the source table's rows now (through the
        /// transform), not with the stage: finds drift for `weir resync` to repair.
        #[arg(long)]
        against_source: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read one table of a PostgreSQL source again (or the rows a condition selects),
    /// while the stream runs, and rewrite its partitions: for drift found by
    /// `weir verify --against-source`.
    Resync {
        /// The table (source or target name).
        #[arg(long)]
        table: String,
        /// Only the rows this SQL condition on the source table selects (e.g.
        /// "order_date >= '2026-03-01'").
        #[arg(long = "where", value_name = "CONDITION")]
        filter: Option<String>,
        /// Wait until the table is read again and its partitions are written (needs a
        /// running `weir run`); Ctrl-C stops waiting, not the resync.
        #[arg(long)]
        wait: bool,
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
    /// Run or inspect a WebAssembly transform plugin, without a pipeline.
    Plugin {
        #[command(subcommand)]
        command: commands::plugin::PluginCommand,
    },
    /// Run a self-contained demo on a throwaway local PostgreSQL.
    Demo {
        /// Keep the cluster and the live `weir run` up until Ctrl-C, to query them.
        #[arg(long)]
        keep: bool,
        /// The orders plugin component (default: $WEIR_PLUGINS_DIR/orders-rust.wasm, else
        /// the usual build folders; `scripts/demo` builds it).
        #[arg(long)]
        plugin: Option<PathBuf>,
        /// How long the workload writes, in seconds.
        #[arg(long, default_value_t = commands::demo::WORKLOAD_SECONDS_DEFAULT,
              value_parser = clap::value_parser!(u64).range(commands::demo::WORKLOAD_SECONDS_MIN..=commands::demo::WORKLOAD_SECONDS_MAX))]
        seconds: u64,
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
        /// While a large transaction is being applied to the stage, wait up to this
        /// many seconds for it to commit before giving up (0: give up at once).
        #[arg(long, value_name = "SECONDS", default_value_t = 120)]
        wait: u64,
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
    if cli.config.is_some() && matches!(cli.command, Command::Plugin { .. }) {
        // `-c salt=s1` would otherwise be taken as a config file and ignored.
        <Cli as clap::CommandFactory>::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "`--config` names Weir's config file, which `weir plugin` does not read: give the plugin's settings with `-C KEY=VALUE`, once per setting",
            )
            .exit();
    }
    if !matches!(cli.command, Command::Run { .. } | Command::Demo { .. }) {
        weir::errors::end_quietly_on_closed_stdout();
    }
    let json_logs = matches!(cli.log_format, LogFormat::Json);
    commands::logging::init(cli.log_format);
    // Test builds only: arm the failpoints named in FAILPOINTS (engine/src/faults.rs).
    #[cfg(feature = "failpoints")]
    let _failpoints = weir::faults::setup();
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
    // On a worker thread, not this one: the source's socket, read by intake, is then
    // polled where its readiness is seen, without waking this thread for each read.
    let result = runtime.block_on(async {
        match tokio::spawn(dispatch(cli)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(anyhow::anyhow!("the command's task ended: {e}")),
        }
    });
    // The runtime's tasks go first, and with them the channels of partition jobs left
    // behind (a write superseded); those jobs then stop, and may still hold the stage.
    drop(runtime);
    if !weir::pipeline::wait_for_partition_jobs(std::time::Duration::from_secs(60)) {
        tracing::warn!("partition jobs still running at exit");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            commands::logging::print_fatal(&error, json_logs);
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
    error.chain().any(|cause| {
        cause.downcast_ref::<ConfigError>().is_some()
            || cause.downcast_ref::<commands::Usage>().is_some()
            || cause
                .downcast_ref::<weir::metrics::MetricsError>()
                .is_some()
            || cause
                .downcast_ref::<weir::pipeline::PipelineError>()
                .is_some_and(weir::pipeline::PipelineError::is_usage)
            || cause
                .downcast_ref::<weir::source::postgres::PgSourceError>()
                .is_some_and(weir::source::postgres::PgSourceError::is_usage)
            || cause
                .downcast_ref::<weir::backfill::BackfillError>()
                .is_some_and(weir::backfill::BackfillError::is_usage)
            || cause
                .downcast_ref::<weir::source::SourceError>()
                .is_some_and(|e| matches!(e, weir::source::SourceError::NotAFile { .. }))
            || cause
                .downcast_ref::<weir::plugin::PluginError>()
                .is_some_and(|e| {
                    matches!(
                        e,
                        weir::plugin::PluginError::Read { .. }
                            | weir::plugin::PluginError::Load { .. }
                    )
                })
            || cause
                .downcast_ref::<weir::plugin::CacheError>()
                .is_some_and(|e| matches!(e, weir::plugin::CacheError::Unsafe { .. }))
    })
}

/// Runs the command: each verb is a file of `commands`.
async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let config = cli.config.as_deref().unwrap_or(Path::new("weir.toml"));
    match cli.command {
        Command::Init(args) => commands::init::run(config, args).await,
        Command::Run { once, metrics_addr } => commands::run::run(config, once, metrics_addr).await,
        Command::Backfill {
            table,
            from,
            to,
            partition,
            stale: _,
            restart,
            parallel,
            dry_run,
            allow_empty,
            metrics_addr,
        } => {
            let scope = match (from, to) {
                (Some(from), Some(to)) => backfill::Scope::Window { from, to },
                _ if !partition.is_empty() => backfill::Scope::Partitions(partition),
                _ => backfill::Scope::Stale,
            };
            commands::backfill::run(
                config,
                table.as_deref(),
                &scope,
                commands::backfill::Options {
                    parallel: parallel.into(),
                    dry_run,
                    allow_empty,
                    restart,
                },
                metrics_addr,
            )
            .await
        }
        Command::Verify {
            table,
            from,
            to,
            partition,
            parallel,
            against_source,
            json,
        } => {
            let scope = match (from, to) {
                (Some(from), Some(to)) => weir::backfill::Scope::Window { from, to },
                _ => weir::backfill::Scope::Partitions(partition),
            };
            commands::verify::run(config, &table, scope, parallel.into(), against_source, json)
                .await
        }
        Command::Resync {
            table,
            filter,
            wait,
        } => commands::resync::run(config, &table, filter.as_deref(), wait).await,
        Command::Status { json } => commands::status::run(config, json).await,
        Command::Checkpoint { command } => commands::checkpoint::run(config, command).await,
        Command::Plugin { command } => commands::plugin::run(command).await,
        Command::Demo {
            keep,
            plugin,
            seconds,
        } => {
            let options = commands::demo::DemoOptions {
                plugin,
                keep,
                workload_seconds: seconds,
            };
            commands::demo::run(&mut std::io::stdout(), &options)
                .await
                .context("the demo failed")
        }
    }
}
