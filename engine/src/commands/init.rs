//! `weir init`: validates the config and creates the stage, the target's weir schema
//! and the target tables.

use std::io::Write as _;
use std::path::Path;

use weir::config::Config;
use weir::pipeline;

/// Runs `weir init`; `config_path` is named in the closing hint.
pub(crate) async fn run(config_path: &Path, options: pipeline::InitOptions) -> anyhow::Result<()> {
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
