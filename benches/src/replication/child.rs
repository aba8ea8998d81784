//! The pipeline child: `weir run --once` (the library `Pipeline`) for one config in a
//! child process of this binary, since a PostgreSQL source's DSN reaches the library
//! through the environment only; it prints its time as JSON.

use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use weir::config::Config;
use weir::pipeline::{self, Pipeline};

use crate::cluster::{SOURCE_DSN_ENV, TARGET_DSN_ENV};
use crate::measure::own_cpu;

/// What a `--child-pipeline` run reports on its last stdout line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PipelineRun {
    pub(crate) seconds: f64,
    /// CPU seconds of the child process while timed.
    pub(crate) cpu: f64,
    pub(crate) changes: u64,
    pub(crate) partitions: u64,
}

/// The child side: `weir init` (with `init`), then `weir run --once` timed, as JSON.
pub(crate) async fn child_pipeline(path: &Path, init: bool) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let dsn = config.target_dsn()?;
    if init {
        pipeline::init(&config, &dsn).await?;
    }
    let pipeline = Pipeline::open(config, dsn).await?;
    let cpu = own_cpu();
    let started = Instant::now();
    let run = pipeline.run(true, std::future::pending()).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = own_cpu() - cpu;
    println!(
        "{}",
        serde_json::json!({
            "seconds": seconds,
            "cpu": cpu,
            "changes": run.changes,
            "partitions": run.partitions_written,
        })
    );
    Ok(())
}

/// Runs `weir run --once` for `config` in a child process of this binary (the source
/// DSN reaches the library through the environment only).
pub(crate) async fn run_pipeline_child(
    config: &Path,
    init: bool,
    source_dsn: &str,
    target_dsn: &str,
) -> anyhow::Result<PipelineRun> {
    let mut cmd = tokio::process::Command::new(std::env::current_exe()?);
    cmd.arg("--child-pipeline").arg(config);
    if init {
        cmd.arg("--child-init");
    }
    let out = cmd
        .env(SOURCE_DSN_ENV, source_dsn)
        .env(TARGET_DSN_ENV, target_dsn)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("run the pipeline child")?;
    anyhow::ensure!(
        out.status.success(),
        "weir run --once (child) failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(line).context("read the pipeline child's report")?;
    let number = |field: &str| {
        report
            .get(field)
            .and_then(|v| v.as_f64())
            .with_context(|| format!("the pipeline child's report lacks `{field}`"))
    };
    Ok(PipelineRun {
        seconds: number("seconds")?,
        cpu: number("cpu")?,
        changes: number("changes")? as u64,
        partitions: number("partitions")? as u64,
    })
}
