//! `weir init`: validates the config and creates the stage, the target's weir schema
//! and the target tables.

use std::io::Write as _;
use std::path::Path;

use weir::config::Config;
use weir::pipeline;

/// `weir init`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// Add the declared nullable columns an existing target table lacks (e.g. a
    /// plugin's new output column) instead of refusing the table.
    #[arg(long)]
    allow_add_columns: bool,
    /// Accept a PostgreSQL publication altered since the stage last read it (which
    /// `run` and `init` refuse): changes it hid meanwhile stay lost; resync the
    /// tables it may have hidden changes of.
    #[arg(long)]
    accept_publication: bool,
    /// Take the configured target tables over from the pipeline or stage that writes
    /// them (another slot, source or file; a slot made anew): its writes to them are
    /// refused from then on. Only once it is stopped for good, or this one replaces it.
    #[arg(long)]
    take_over: bool,
}

/// Runs `weir init`; `config_path` is named in the closing hint.
pub(crate) async fn run(config_path: &Path, args: InitArgs) -> anyhow::Result<()> {
    let options = pipeline::InitOptions {
        allow_add_columns: args.allow_add_columns,
        accept_publication: args.accept_publication,
        take_over: args.take_over,
    };
    let config = Config::load(config_path)?;
    let report = pipeline::init_with(&config, &config.target_dsn()?, options).await?;
    let mut out = std::io::stdout();
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
        config_path.display()
    )?;
    Ok(())
}
