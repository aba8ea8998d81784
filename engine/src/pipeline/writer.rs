//! The live writer: beside intake (see `intake`), it starts a write round as soon as it
//! is free and something is dirty, so rounds coalesce under load and a change is
//! written at once when the engine is idle. `[engine] flush_interval_ms` is the least
//! time between the starts of two rounds; a round whose writes failed in a way a retry
//! may cure adds the write backoff (`schedule::WriteBackoff`).
//!
//! **Architecture Invariant**: one round at a time, and a (table, partition) at most
//! once in a round, so the process never runs two jobs on one partition; intake goes
//! on staging meanwhile, and a partition that changed while it was written keeps its
//! dirty mark (compare-and-clear), so it is written again.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::schedule::WriteBackoff;
use super::{Pipeline, PipelineError, RunReport};

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
}
