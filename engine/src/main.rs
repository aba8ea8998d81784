//! The `weir` command line. Exit codes: 0 success, 1 runtime failure, 2 usage or
//! configuration error.

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use weir::backfill;
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

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Validate the config; create the stage, the target's weir schema and the target tables.
    Init {
        /// Add the declared nullable columns an existing target table lacks (e.g. a
        /// plugin's new output column) instead of refusing the table.
        #[arg(long)]
        allow_add_columns: bool,
    },
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
        #[arg(long, requires = "to", conflicts_with = "stale")]
        from: Option<String>,
        /// End of the window, exclusive.
        #[arg(long, requires = "from", conflicts_with = "stale")]
        to: Option<String>,
        /// The partitions whose lineage names another plugin or config than the config's.
        #[arg(long, required_unless_present = "from")]
        stale: bool,
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
        #[arg(long)]
        from: String,
        /// End of the window, exclusive.
        #[arg(long)]
        to: String,
        /// Partitions checked at once.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
        parallel: u16,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
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
        command: PluginCommand,
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
        #[arg(long, default_value_t = weir::demo::WORKLOAD_SECONDS_DEFAULT,
              value_parser = clap::value_parser!(u64).range(weir::demo::WORKLOAD_SECONDS_MIN..=weir::demo::WORKLOAD_SECONDS_MAX))]
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

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Run a plugin on sample rows in the sandbox; print its output rows and rejections
    /// as JSON lines (`{"row": {...}}`, `{"rejection": {...}}`), values in the tagged
    /// form of plugins/examples/orders-cases.jsonl.
    Test {
        /// The plugin component (.wasm).
        wasm: PathBuf,
        /// JSON lines, one row each: a staged row (`{"key": [...], "op": "insert",
        /// "columns": {...}}`) or just its columns; `-` reads stdin.
        #[arg(long)]
        input: PathBuf,
        /// The partition the rows belong to (e.g. 2026-03-01, or __null__).
        #[arg(long)]
        partition: String,
        /// How the partition column is partitioned.
        #[arg(long, default_value = "day")]
        grain: String,
        /// The table name the plugin is told (it seeds the sandbox's random bytes).
        #[arg(long, default_value = "public.test")]
        table: String,
        /// A plugin config setting; repeat for more.
        #[arg(long = "config-value", short = 'C', value_name = "KEY=VALUE")]
        config_values: Vec<String>,
        /// Key columns of rows that give no `key`.
        #[arg(long, value_delimiter = ',', default_value = "id")]
        key: Vec<String>,
        /// Run the job this many times in this process, each in a fresh instance as the
        /// engine does; fail if any run's output or error differs from the first. The
        /// closing log line reports the resident memory after the first run and at the
        /// end, and the slowest run.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Print a plugin's name, version, kind, output schema, sha256 and imports.
    Inspect {
        /// The plugin component (.wasm).
        wasm: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Sandbox limits, as in a table's config (defaults: the engine's).
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Memory cap per instance, MiB (16 to 4096, as `plugin_memory_mb`).
    #[arg(long, value_parser = in_range(weir::plugin::MEMORY_MB_RANGE))]
    memory_mb: Option<u64>,
    /// CPU budget per call, in fuel units (at least 1,000,000, as `plugin_fuel_per_call`).
    #[arg(long, value_parser = in_range(weir::plugin::FUEL_PER_CALL_RANGE))]
    fuel_per_call: Option<u64>,
    /// Wall-clock backstop per call, ms (10 to 3,600,000, as `plugin_timeout_ms`).
    #[arg(long, value_parser = in_range(weir::plugin::TIMEOUT_MS_RANGE))]
    timeout_ms: Option<u64>,
    /// Maximum wasm stack, KiB (64 to 65,536, as `plugin_max_stack_kb`).
    #[arg(long, value_parser = in_range(weir::plugin::MAX_STACK_KB_RANGE))]
    max_stack_kb: Option<u64>,
}

/// A parser of a `plugin test` limit flag: the same range as the config key, so a
/// value that would wrap (`--memory-mb 18014398509481984` shifted to bytes) or starve
/// the sandbox is refused with the range instead.
fn in_range(range: std::ops::RangeInclusive<u64>) -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(range)
}

impl LimitArgs {
    fn limits(&self) -> weir::plugin::SandboxLimits {
        let mut l = weir::plugin::SandboxLimits::default();
        if let Some(mb) = self.memory_mb {
            l.memory_bytes = mb << 20;
        }
        if let Some(f) = self.fuel_per_call {
            l.fuel_per_call = f;
        }
        if let Some(ms) = self.timeout_ms {
            l.timeout_per_call = std::time::Duration::from_millis(ms);
        }
        if let Some(kb) = self.max_stack_kb {
            // In range (at most 65,536 KiB): the shift cannot overflow.
            l.max_stack_bytes = (kb << 10) as usize;
        }
        l
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
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
    error.chain().any(|cause| {
        cause.downcast_ref::<ConfigError>().is_some()
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
                .downcast_ref::<weir::plugin::CacheError>()
                .is_some_and(|e| matches!(e, weir::plugin::CacheError::Unsafe { .. }))
    })
}

/// Whether an event may be logged whatever `RUST_LOG` says: tokio-postgres logs a
/// statement's parameters and a simple query's text at debug, and both can hold row
/// values (a dead letter's input, a snapshot chunk's key bounds). Weir logs no row
/// values, so its client library's debug and trace lines stay off. A filter of its
/// own, not a `tokio_postgres=info` directive: a directive would also *raise*
/// tokio-postgres to info under `RUST_LOG=warn`.
fn never_row_values(metadata: &tracing::Metadata<'_>) -> bool {
    !(metadata.target().starts_with("tokio_postgres") && *metadata.level() > tracing::Level::INFO)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let cap = tracing_subscriber::filter::filter_fn(never_row_values);
    // Colours only for a person at a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry();
    match format {
        LogFormat::Text => registry
            .with(layer.with_filter(filter).with_filter(cap))
            .init(),
        LogFormat::Json => registry
            .with(layer.json().with_filter(filter).with_filter(cap))
            .init(),
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Plugin { command } => plugin_command(command).await,
        Command::Backfill {
            table,
            from,
            to,
            stale: _,
            parallel,
            dry_run,
            allow_empty,
            metrics_addr,
        } => {
            let config = Config::load(&cli.config)?;
            if let Some(addr) = metrics_addr {
                weir::metrics::serve(addr)?;
            }
            let dsn = config.target_dsn()?;
            let pipeline = Pipeline::open_read_only(config, dsn).await?;
            let scope = match (from, to) {
                (Some(from), Some(to)) => backfill::Scope::Window { from, to },
                _ => backfill::Scope::Stale,
            };
            backfill_command(
                &pipeline,
                table.as_deref(),
                &scope,
                parallel.into(),
                dry_run,
                allow_empty,
            )
            .await
        }
        Command::Verify {
            table,
            from,
            to,
            parallel,
            json,
        } => {
            let config = Config::load(&cli.config)?;
            let dsn = config.target_dsn()?;
            let pipeline = Pipeline::open_read_only(config, dsn).await?;
            let table = backfill::find_table(&pipeline, &table)?.to_owned();
            let scope = backfill::Scope::Window { from, to };
            let entries = backfill::plan(&pipeline, &table, &scope, true).await?;
            let reporter = Reporter::new("verify", entries.len());
            let rows =
                backfill::verify(&pipeline, entries, parallel.into(), &|p| reporter.update(p))
                    .await?;
            reporter.finish();
            let mut out = std::io::stdout().lock();
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
            if !json {
                writeln!(out, "verify passed: {} partitions", rows.len())?;
            }
            Ok(())
        }
        Command::Demo {
            keep,
            plugin,
            seconds,
        } => {
            let options = weir::demo::DemoOptions {
                plugin,
                keep,
                workload_seconds: seconds,
            };
            weir::demo::run(&mut std::io::stdout(), &options)
                .await
                .context("the demo failed")
        }
        Command::Init { allow_add_columns } => {
            let config = Config::load(&cli.config)?;
            let report =
                pipeline::init_with(&config, &config.target_dsn()?, allow_add_columns).await?;
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
        Command::Run { once, metrics_addr } => {
            let config = Config::load(&cli.config)?;
            let dsn = config.target_dsn()?;
            if let Some(addr) = metrics_addr {
                weir::metrics::serve(addr)?;
            }
            let pipeline = Pipeline::open(config, dsn).await?;
            let report = pipeline.run(once, shutdown_signal()).await?;
            writeln!(
                std::io::stdout().lock(),
                "staged {} transactions ({} changes, {} already staged); wrote {} partitions ({} rows); {} dead letters; {} rows rejected by plugins",
                report.transactions,
                report.changes,
                report.skipped_transactions,
                report.partitions_written,
                report.rows_written,
                report.dead_letters,
                report.rows_rejected
            )?;
            if report.source_reconnects > 0 {
                writeln!(
                    std::io::stdout().lock(),
                    "reconnected to the source {} times",
                    report.source_reconnects
                )?;
            }
            if report.intake_pauses > 0 {
                writeln!(
                    std::io::stdout().lock(),
                    "intake paused {} times at [stage] max_unwritten_mb",
                    report.intake_pauses
                )?;
            }
            if report.changes > 0 && report.rows_written > 0 {
                // Rows the target rewrote per change staged: the price of whole-partition
                // replace; a longer flush interval coalesces more changes per rewrite.
                writeln!(
                    std::io::stdout().lock(),
                    "write amplification: {:.1} rows written per changed row",
                    report.rows_written as f64 / report.changes as f64
                )?;
            }
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

async fn plugin_command(command: PluginCommand) -> anyhow::Result<()> {
    use weir::plugin::{self, PluginHost, json};
    let host = PluginHost::new(PluginHost::default_cache_dir());
    match command {
        PluginCommand::Inspect {
            wasm,
            json: as_json,
        } => {
            let limits = plugin::SandboxLimits::default();
            let loaded = tokio::task::spawn_blocking(move || {
                let p = host.load(&wasm, &limits);
                (host, p)
            })
            .await
            .context("the plugin task stopped unexpectedly")?;
            let p = loaded.1?;
            let d = p.description();
            let mut out = std::io::stdout().lock();
            if as_json {
                let j = serde_json::json!({
                    "path": p.path().display().to_string(),
                    "name": d.name, "version": d.version, "kind": d.kind,
                    "columns": d.columns, "grain_key": d.grain_key,
                    "partition_column": d.partition_column,
                    "sha256": p.sha256_hex(), "size_bytes": p.size_bytes(),
                    "imports": p.imports(), "wasmtime": plugin::WASMTIME_VERSION,
                    "compile": p.compile_info(),
                });
                serde_json::to_writer_pretty(&mut out, &j)?;
                writeln!(out)?;
                return Ok(());
            }
            writeln!(out, "plugin:           {} {}", d.name, d.version)?;
            writeln!(
                out,
                "kind:             {}",
                serde_json::to_value(d.kind)?.as_str().unwrap_or("?")
            )?;
            writeln!(out, "sha256:           {}", p.sha256_hex())?;
            writeln!(out, "size:             {} bytes", p.size_bytes())?;
            writeln!(out, "partition column: {}", d.partition_column)?;
            writeln!(
                out,
                "grain key:        {}",
                if d.grain_key.is_empty() {
                    "(none)".to_owned()
                } else {
                    d.grain_key.join(", ")
                }
            )?;
            writeln!(out, "columns:")?;
            for c in &d.columns {
                writeln!(
                    out,
                    "  {:<20} {}{}",
                    c.name,
                    c.ty.ddl(),
                    if c.nullable { "" } else { " not null" }
                )?;
            }
            writeln!(out, "imports:")?;
            for i in p.imports() {
                writeln!(out, "  {i}")?;
            }
            let c = p.compile_info();
            writeln!(
                out,
                "compiled:         {} ms ({}, wasmtime {})",
                c.millis,
                if c.cache_hit { "cache hit" } else { "compiled" },
                plugin::WASMTIME_VERSION
            )?;
            Ok(())
        }
        PluginCommand::Test {
            wasm,
            input,
            partition,
            grain,
            table,
            config_values,
            key,
            repeat,
            limits,
        } => {
            let grain: weir::partition::Grain =
                serde_json::from_value(serde_json::Value::String(grain.clone())).map_err(|_| {
                    anyhow::anyhow!("--grain `{grain}`: use hour, day, month or value")
                })?;
            let mut config = Vec::with_capacity(config_values.len());
            for kv in &config_values {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("--config-value `{kv}`: write KEY=VALUE"))?;
                config.push((k.to_owned(), v.to_owned()));
            }
            let config = plugin::normalize_config(&config);
            let text = if input.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin()).context("read rows from stdin")?
            } else {
                std::fs::read_to_string(&input)
                    .with_context(|| format!("read rows from {}", input.display()))?
            };
            let rows = json::read_input_rows(&text, &input.display().to_string(), &key)?;
            let partition = if partition == weir::partition::Partition::NULL_NAME {
                weir::partition::Partition::Null
            } else {
                weir::partition::Partition::Key(partition)
            };
            let limits = limits.limits();
            let job = plugin::OwnedJob {
                table,
                partition,
                grain,
                config,
            };
            let loaded = {
                let limits = limits.clone();
                tokio::task::spawn_blocking(move || host.load(&wasm, &limits).map(|p| (host, p)))
                    .await
                    .context("the plugin task stopped unexpectedly")??
            };
            let plugin = std::sync::Arc::new(loaded.1);
            let (mut first, mut rss_after_first_kib, mut slowest_ms) = (None, 0, 0u64);
            let mut rows = rows;
            for run in 1..=repeat {
                let started = std::time::Instant::now();
                let (input, result) = plugin::run_job_on_thread(
                    std::sync::Arc::clone(&plugin),
                    limits.clone(),
                    job.clone(),
                    rows,
                )
                .await;
                rows = input;
                slowest_ms = slowest_ms.max(started.elapsed().as_millis() as u64);
                let outcome = result.map_err(|e| e.to_string());
                let fingerprint = outcome
                    .as_ref()
                    .map(|o| render_output(plugin.description(), o))
                    .map_err(Clone::clone);
                match &first {
                    None => {
                        rss_after_first_kib = weir::procmem::rss_kib(weir::procmem::Process::This);
                        first = Some((fingerprint, outcome));
                    }
                    Some((f, _)) if *f != fingerprint => anyhow::bail!(
                        "run {run} of {repeat} gave a different result than run 1: the plugin is not deterministic"
                    ),
                    Some(_) => {}
                }
            }
            tracing::info!(
                runs = repeat,
                slowest_ms,
                rss_after_first_kib,
                rss_kib = weir::procmem::rss_kib(weir::procmem::Process::This),
                peak_rss_kib = weir::procmem::peak_rss_kib(weir::procmem::Process::This),
                "plugin test runs done"
            );
            let Some((_, outcome)) = first else {
                anyhow::bail!("no run");
            };
            let output = outcome.map_err(|e| anyhow::anyhow!(e))?;
            let d = plugin.description();
            std::io::stdout()
                .lock()
                .write_all(render_output(d, &output).as_bytes())?;
            tracing::info!(
                plugin = %d.name,
                sha256 = %plugin.sha256_hex(),
                rows = output.rows.len(),
                rejections = output.rejections.len(),
                fuel = output.fuel,
                peak_memory_bytes = output.peak_memory_bytes,
                compile_ms = plugin.compile_info().millis,
                cache_hit = plugin.compile_info().cache_hit,
                "plugin test done"
            );
            Ok(())
        }
    }
}

/// Progress of a long command: a bar on a terminal, a log line every few seconds
/// otherwise.
struct Reporter {
    bar: Option<indicatif::ProgressBar>,
    what: &'static str,
    last: std::sync::Mutex<std::time::Instant>,
    started: std::time::Instant,
}

impl Reporter {
    /// Seconds between progress log lines when stderr is not a terminal.
    const LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    fn new(what: &'static str, total: usize) -> Reporter {
        use std::io::IsTerminal as _;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{msg} {bar:30} {pos}/{len} partitions, {per_sec}, ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(what);
            bar
        });
        Reporter {
            bar,
            what,
            last: std::sync::Mutex::new(std::time::Instant::now()),
            started: std::time::Instant::now(),
        }
    }

    fn update(&self, p: weir::backfill::Progress) {
        if let Some(bar) = &self.bar {
            bar.set_position(p.done as u64);
            return;
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.elapsed() >= Self::LOG_EVERY || p.done == p.total {
            *last = std::time::Instant::now();
            let secs = self.started.elapsed().as_secs_f64().max(0.001);
            tracing::info!(
                command = self.what,
                done = p.done,
                total = p.total,
                rows = p.rows,
                rows_per_s = (p.rows as f64 / secs) as u64,
                eta_s = ((p.total - p.done) as f64 * secs / p.done.max(1) as f64) as u64,
                "progress"
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

async fn backfill_command(
    pipeline: &Pipeline,
    table: Option<&str>,
    scope: &backfill::Scope,
    parallel: usize,
    dry_run: bool,
    allow_empty: bool,
) -> anyhow::Result<()> {
    let tables: Vec<String> = match table {
        Some(t) => vec![backfill::find_table(pipeline, t)?.to_owned()],
        None => {
            let mut all: Vec<String> = pipeline.tables().map(|(s, _)| s.clone()).collect();
            all.sort();
            all
        }
    };
    let mut out = std::io::stdout().lock();
    let mut failures = Vec::new();
    for table in tables {
        let entries = backfill::plan(pipeline, &table, scope, allow_empty).await?;
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
                    "; {} already done by the interrupted run",
                    report.already_done
                )
            } else {
                String::new()
            },
            if report.superseded.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} left to the live engine's newer writes ({})",
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

/// A job's output as `weir plugin test` prints it: one JSON line per output row, then
/// one per rejection.
fn render_output(d: &weir::plugin::Description, output: &weir::plugin::JobOutput) -> String {
    use weir::plugin::json;
    let mut out = String::new();
    for row in &output.rows {
        out.push_str(&serde_json::json!({ "row": json::tagged_row(&d.columns, row) }).to_string());
        out.push('\n');
    }
    for r in &output.rejections {
        let key: Vec<_> = r.key.iter().map(json::tagged).collect();
        out.push_str(
            &serde_json::json!({ "rejection": { "key": key, "reason": r.reason } }).to_string(),
        );
        out.push('\n');
    }
    out
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
    let mib = |b: u64| b as f64 / 1_048_576.0;
    match s.max_unwritten_bytes {
        Some(limit) => writeln!(
            out,
            "unwritten:  {:.1} MiB of {:.1} MiB (max_unwritten_mb){}",
            mib(s.unwritten_bytes),
            mib(limit),
            if s.intake_paused {
                ": intake paused until the target catches up"
            } else {
                ""
            }
        )?,
        None => writeln!(out, "unwritten:  {:.1} MiB", mib(s.unwritten_bytes))?,
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
    if !s.failed_partitions.is_empty() {
        writeln!(
            out,
            "failed:     {} partitions (retried when they change)",
            s.failed_partitions.len()
        )?;
        for f in s.failed_partitions.iter().take(50) {
            writeln!(out, "  {} {}: {}", f.table, f.partition, f.error)?;
        }
    }
    if !s.stale_partitions.is_empty() {
        writeln!(
            out,
            "stale:      {} partitions written by another plugin or config (weir backfill --stale rebuilds them)",
            s.stale_partitions.len()
        )?;
        for p in s.stale_partitions.iter().take(50) {
            writeln!(out, "  {} {}", p.table, p.partition)?;
        }
    }
    if let Some(e) = &s.target_error {
        writeln!(out, "target:     unavailable: {e}")?;
    }
    writeln!(out, "last writes:")?;
    for w in &s.last_writes {
        writeln!(
            out,
            "  {} {:<14} rows={:<7} generation={:<6} position={:<10} {} at {}",
            w.target_table,
            w.partition,
            w.row_count,
            w.stage_generation,
            w.source_position,
            if w.write_mode == "merge" {
                "merged (no checksum)".to_owned()
            } else {
                format!("checksum={}", w.checksum)
            },
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
