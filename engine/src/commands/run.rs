//! `weir run`: tails the feed, stages it and writes dirty partitions until a signal
//! (or, with `--once`, until what is available now is written), then prints a summary.

use std::io::Write as _;
use std::path::Path;

use weir::config::Config;
use weir::pipeline::Pipeline;

/// Runs `weir run`.
pub(crate) async fn run(
    config_path: &Path,
    once: bool,
    metrics_addr: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let dsn = config.target_dsn()?;
    if let Some(addr) = metrics_addr {
        weir::metrics::serve(addr)?;
    }
    let budget = config.memory_budget();
    tracing::info!(
        memory_budget_mib = budget.total >> 20,
        budget = %budget.explain(),
        "memory budget"
    );
    let pipeline = Pipeline::open(config, dsn).await?;
    // A target table made anew (or a new target database) gets the partitions the
    // stage wrote to it before, not only those that change from now on.
    let rewritten = weir::backfill::rewrite_unrecorded(&pipeline).await?;
    if rewritten > 0 {
        tracing::info!(
            partitions = rewritten,
            "partitions missing from the target's lineage written again"
        );
    }
    // On a terminal, a status line under the logs (quiet otherwise).
    let mut status = super::progress::StatusLine::new();
    if status.is_some() {
        pipeline.watch();
    }
    // Tables still in their first load: which partitions another stage left is known
    // once it is done, so it is asked again then.
    let loading = weir::backfill::still_loading(&pipeline)?;
    let mut cleaning = !loading.is_empty();
    let cleanup =
        weir::backfill::rewrite_once_loaded(&pipeline, loading, std::time::Duration::from_secs(1));
    tokio::pin!(cleanup);
    let run = pipeline.run(once, shutdown_signal());
    tokio::pin!(run);
    let mut tick = tokio::time::interval(super::progress::StatusLine::EVERY);
    let mut rewritten = rewritten;
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            done = &mut cleanup, if cleaning => {
                cleaning = false;
                match done {
                    Ok(n) => rewritten += n,
                    Err(error) => tracing::warn!(%error, "the partitions another stage left were not looked for after the first load; the next start does it"),
                }
            }
            _ = tick.tick(), if status.is_some() => {
                if let Some(line) = status.as_mut() {
                    line.update(pipeline.live());
                }
            }
        }
    };
    drop(status);
    // The process's peak memory over the whole run, for operators and the hostile
    // plugin campaign (`tests/integration/hostile_campaign.rs`).
    super::log_peak_memory("run ended");
    let report = match result {
        Ok(report) => report,
        Err(error) => {
            // What the run did before it stopped: what is staged stays staged (and
            // acknowledged), and the partitions written stay written.
            let done = pipeline.live();
            writeln!(
                std::io::stdout().lock(),
                "stopped by an error after staging {} changes and writing {} rows; what is staged stays staged, a new run goes on from there",
                done.changes_staged,
                done.rows_written
            )?;
            return Err(error.into());
        }
    };
    // `--once` ends before the check beside it could see the last first load done.
    if cleaning && once {
        rewritten += weir::backfill::rewrite_unrecorded(&pipeline).await?;
    }
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
    if rewritten > 0 {
        writeln!(
            std::io::stdout().lock(),
            "also wrote again {rewritten} partitions the target's lineage did not list, listed at an older state of this stage (written since to another target), or that another stage wrote and this one holds no rows of"
        )?;
    }
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
