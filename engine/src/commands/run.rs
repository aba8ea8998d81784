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
    // Caught from the start: a stop asked for while the pipeline opens (a large
    // transaction finished after a crash, a first load's setup) is a clean stop too.
    let shutdown = catch_signals();
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
    let run = pipeline.run(once, shutdown);
    tokio::pin!(run);
    let mut tick = tokio::time::interval(super::progress::StatusLine::EVERY);
    let mut rewritten = rewritten;
    // A target connection made again (the target restarted, failed over, or was
    // restored from a backup): its lineage is checked again beside the run, as at the
    // start, so partitions a restore took back are written again now, not at the next
    // start.
    let mut recheck = tokio::time::interval(std::time::Duration::from_secs(5));
    type Repair<'a> = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<usize, weir::backfill::BackfillError>>
                + Send
                + 'a,
        >,
    >;
    let mut repair: Option<Repair<'_>> = None;
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            _ = recheck.tick(), if repair.is_none() && !once => {
                if pipeline.take_target_reconnected() {
                    repair = Some(Box::pin(weir::backfill::rewrite_unrecorded(&pipeline)));
                }
            }
            done = async { repair.as_mut().expect("guarded").await }, if repair.is_some() => {
                repair = None;
                match done {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::warn!(partitions = n, "the target's lineage, read again after its connection was made again, missed writes of this stage (a restore from a backup?): those partitions were written again");
                        rewritten += n;
                    }
                    Err(error) => tracing::warn!(%error, "the target's lineage was not checked again after its connection was made again; the next start does it"),
                }
            }
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
    // A first load's rows count as staged (as the live status line counts them), not
    // as changes of a transaction.
    let loaded = pipeline
        .live()
        .changes_staged
        .saturating_sub(report.changes as u64);
    writeln!(
        std::io::stdout().lock(),
        "staged {} transactions ({} changes, {} already staged){}; wrote {} partitions ({} rows); {} dead letters; {} rows rejected by plugins",
        report.transactions,
        report.changes,
        report.skipped_transactions,
        if loaded > 0 {
            format!(" and {loaded} rows of a first load")
        } else {
            String::new()
        },
        report.partitions_written,
        report.rows_written,
        report.dead_letters,
        report.rows_rejected
    )?;
    if rewritten > 0 {
        writeln!(
            std::io::stdout().lock(),
            "also wrote again {rewritten} partitions the target's lineage did not list, listed at an older state of this stage (written since to another target), or listed as another stage's"
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
    // A first load's rows are written but are no changes: the ratio would say nothing
    // of the steady state.
    if report.changes > 0 && report.rows_written > 0 && loaded == 0 {
        // Rows the target rewrote per change staged: the price of whole-partition
        // replace; a longer flush interval coalesces more changes per rewrite.
        writeln!(
            std::io::stdout().lock(),
            "write amplification: {} rows written per changed row",
            amplification(report.rows_written as f64 / report.changes as f64)
        )?;
    }
    Ok(())
}

/// A ratio with one decimal, or two significant digits below 0.1 (`0.04`, not `0.0`).
fn amplification(ratio: f64) -> String {
    if ratio >= 0.1 || ratio == 0.0 {
        format!("{ratio:.1}")
    } else {
        let decimals = (-ratio.log10()).ceil() as usize + 1;
        format!("{ratio:.decimals$}")
    }
}

/// SIGINT and SIGTERM, caught from now on: the future completes at the first, which
/// asks the run to stop cleanly (what was read is staged, the write round under way
/// finishes, the summary is printed); a second ends the process at once (exit 130), as
/// a crash would: what is staged stays staged, and a partition write in flight is
/// rolled back by the target (a round that waits on a target's commit, say for a
/// synchronous standby that is gone, would otherwise hold the stop for as long).
fn catch_signals() -> impl std::future::Future<Output = ()> + Send + 'static {
    let (asked, mut stop) = tokio::sync::watch::channel(false);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).ok();
        let mut terminate = signal(SignalKind::terminate()).ok();
        tokio::spawn(async move {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            for n in 0..2 {
                tokio::select! {
                    () = next(&mut interrupt) => {}
                    () = next(&mut terminate) => {}
                }
                if n == 0 {
                    tracing::info!(
                        "stopping: what was read is staged and the write under way finishes (a second signal stops at once)"
                    );
                    let _ = asked.send(true);
                } else {
                    tracing::warn!(
                        "second signal: stopping at once; what is staged stays staged, a partition write in flight is rolled back"
                    );
                    std::process::exit(130);
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = asked.send(true);
    });
    async move {
        let _ = stop.wait_for(|asked| *asked).await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_amplifications_keep_two_digits() {
        assert_eq!(super::amplification(36.04), "36.0");
        assert_eq!(super::amplification(1.0), "1.0");
        assert_eq!(super::amplification(0.0424), "0.042");
        assert_eq!(super::amplification(0.004), "0.0040");
    }
}
