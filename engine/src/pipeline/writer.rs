//! The live writer: beside intake (see `intake`), it starts a write round as soon as it
//! is free and something is dirty, so rounds coalesce under load and a change is
//! written at once when the engine is idle. `[engine] flush_interval_ms` is the least
//! time between the starts of two rounds; a round whose writes failed in a way a retry
//! may cure adds the write backoff (`schedule::WriteBackoff`).
//!
//! While the source catches up a backlog (its stream [`CATCH_UP_BEHIND`] or more
//! behind the commits it sends), a round waits until it has caught up, for at most
//! [`CATCH_UP_DEFER_MAX`]: on two cores a round beside intake halves both, and each
//! early round rewrites what a later one writes again, so a backlog is read at the
//! source's pace and written in few large rounds. A stream that keeps pace never waits.
//!
//! **Architecture Invariant**: one round at a time, and a (table, partition) at most
//! once in a round, so the process never runs two jobs on one partition; intake goes
//! on staging meanwhile, and a partition that changed while it was written keeps its
//! dirty mark (compare-and-clear), so it is written again.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::schedule::WriteBackoff;
use super::{Pipeline, PipelineError, RunReport};

/// How long a round waits after partitions were put off because a large transaction
/// was being applied to the stage.
const DEFERRED_RETRY: Duration = Duration::from_millis(100);

/// A stream this far behind the source's commits is catching up a backlog.
pub(super) const CATCH_UP_BEHIND: Duration = Duration::from_secs(1);
/// The longest a round waits for a catch-up: the target is never staler than this
/// (plus the round) because a backlog is being read.
pub(super) const CATCH_UP_DEFER_MAX: Duration = Duration::from_secs(5);
/// How often a deferred round looks again.
const CATCH_UP_CHECK: Duration = Duration::from_millis(10);

impl Pipeline {
    /// Writes dirty partitions until `stop` turns true (intake has ended); a round in
    /// progress then finishes first. Returns what it wrote.
    pub(super) async fn write_loop(
        &self,
        mut stop: watch::Receiver<bool>,
    ) -> Result<RunReport, PipelineError> {
        let spacing = Duration::from_millis(self.config.engine.flush_interval_ms);
        let mut report = RunReport::default();
        let mut backoff = WriteBackoff::default();
        loop {
            if self.defer_for_catch_up(&mut stop).await {
                return Ok(report);
            }
            let started = Instant::now();
            let round = self.write_round_inner(&mut report, true).await?;
            // Failures a retry may cure (the target down): wait longer each time, up
            // to a bound, while staging goes on; the first good round resets it.
            let wait = backoff.after_round(round.transient);
            if round.transient > 0 {
                tracing::warn!(
                    failed = round.transient,
                    retry_in_ms = wait.as_millis() as u64,
                    "partition writes failed; staging goes on, writes are retried"
                );
            }
            if *stop.borrow() {
                return Ok(report);
            }
            // Partitions put off while a large transaction is applied: tried again
            // shortly, not at once (each try is a few reads of the stage).
            let wait = if round.deferred > 0 {
                wait.max(DEFERRED_RETRY)
            } else {
                wait
            };
            let next = tokio::time::Instant::from_std(started + spacing + wait);
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = stop.changed() => return Ok(report),
            }
            if round.tried == 0 {
                // Nothing was dirty (or only partitions waiting for a change): wait
                // until intake stages something.
                tokio::select! {
                    () = self.write_wake.notified() => {}
                    _ = stop.changed() => return Ok(report),
                }
            }
        }
    }

    /// Waits while the source catches up a backlog (see the module's doc), for at most
    /// [`CATCH_UP_DEFER_MAX`]; true if `stop` came meanwhile.
    async fn defer_for_catch_up(&self, stop: &mut watch::Receiver<bool>) -> bool {
        let since = Instant::now();
        let mut told = false;
        loop {
            let behind = Duration::from_micros(self.live.source_behind_us.load(Ordering::Relaxed));
            if !catching_up(behind, since.elapsed()) {
                if told {
                    tracing::debug!(
                        deferred_ms = since.elapsed().as_millis() as u64,
                        "write round resumes"
                    );
                }
                return false;
            }
            if !told {
                told = true;
                tracing::info!(
                    behind_ms = behind.as_millis() as u64,
                    "write round deferred: the source is catching up a backlog"
                );
            }
            tokio::select! {
                () = tokio::time::sleep(CATCH_UP_CHECK) => {}
                _ = stop.changed() => return true,
            }
        }
    }
}

/// Whether a round that has waited `waited` still waits for a stream `behind` its
/// source's commits.
fn catching_up(behind: Duration, waited: Duration) -> bool {
    behind >= CATCH_UP_BEHIND && waited < CATCH_UP_DEFER_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_waits_only_for_a_backlog_and_not_for_ever() {
        let ms = Duration::from_millis;
        assert!(!catching_up(ms(0), ms(0)), "a stream that keeps pace");
        assert!(!catching_up(ms(300), ms(0)), "a stream a little behind");
        assert!(catching_up(CATCH_UP_BEHIND, ms(0)), "a backlog");
        assert!(catching_up(ms(60_000), CATCH_UP_DEFER_MAX - ms(1)));
        assert!(
            !catching_up(ms(60_000), CATCH_UP_DEFER_MAX),
            "waited long enough"
        );
    }
}
