//! The write scheduler: each round writes the staged dead letters, then every dirty
//! partition, `[engine] parallelism` at once, oldest change first; a failure a retry
//! may cure backs the next round off, a plugin's verdict waits for new changes.

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::{Pipeline, PipelineError, RunReport};
use crate::errors::error_chain;
use crate::metrics::{self, Retry};
use crate::stage::DirtyPartition;
use crate::target;

/// Bounds of the wait added to the flush interval after a round whose writes failed in
/// a way a retry may cure (doubling from the first to the second).
pub(super) const WRITE_BACKOFF_MIN: Duration = Duration::from_millis(500);
pub(super) const WRITE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The write backoff: the wait added to the flush interval after rounds whose writes
/// failed in a way a retry may cure (the target down). Twice the last wait after each
/// such round, within [`WRITE_BACKOFF_MIN`] and [`WRITE_BACKOFF_MAX`]; the first good
/// round resets it to none.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct WriteBackoff(Duration);

impl WriteBackoff {
    /// Counts a round's `transient` failures (the retry metric) and returns the wait
    /// before the next round.
    pub(super) fn after_round(&mut self, transient: usize) -> Duration {
        metrics::retried(Retry::TargetWrite, transient);
        self.0 = if transient > 0 {
            (self.0 * 2).clamp(WRITE_BACKOFF_MIN, WRITE_BACKOFF_MAX)
        } else {
            Duration::ZERO
        };
        self.0
    }
}

/// What a write round did.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Round {
    /// Dirty partitions it tried to write.
    pub tried: usize,
    /// Of those, failures a retry may cure.
    pub transient: usize,
    /// Of those, partitions left for a later round because a large transaction was
    /// being applied to the stage (normal operation, not a failure).
    pub deferred: usize,
}

/// Dead letters moved from the stage to the target per round trip.
const DEAD_LETTERS_PER_WRITE: usize = 1000;

impl Pipeline {
    /// Writes staged dead letters, then every dirty partition. A partition that fails
    /// does not stop the others: with `keep_going` (live mode) its error is logged and
    /// it stays dirty (a plugin's failure waits for the partition to change; any other
    /// is retried next round); otherwise the first error is returned after the round.
    pub async fn write_round(&self, report: &mut RunReport) -> Result<(), PipelineError> {
        self.write_round_inner(report, false).await.map(drop)
    }

    /// One round; returns the partitions it tried and the failures among them that a
    /// retry may cure (the target unreachable, a connection lost), which the live
    /// writer backs off on.
    pub(super) async fn write_round_inner(
        &self,
        report: &mut RunReport,
        keep_going: bool,
    ) -> Result<Round, PipelineError> {
        match self.flush_dead_letters().await {
            Ok(n) => {
                report.dead_letters += n;
                metrics::dead_letters(n);
            }
            // The target is down: dead letters stay staged, and partitions are tried
            // (and fail the same way, counted) so the round's outcome says so.
            Err(error @ PipelineError::Target(_)) if keep_going => {
                tracing::warn!(error = %error_chain(&error), "dead letters not written; they stay staged and are retried");
            }
            Err(error) => return Err(error),
        }
        let mut dirty = self.stage.dirty_partitions()?;
        if keep_going && let Ok(failed) = self.failed.lock() {
            dirty.retain(|d| {
                failed.get(&(d.table.clone(), d.partition.clone())) != Some(&d.generation)
            });
        }
        // A table a first load is still reading gets more rows with every range, and
        // one a whole-table resync reads again lacks the rows not read yet: their
        // partitions are written once that is done.
        let held = self.resync_holds()?;
        // A table taken out of the config keeps its target partitions as they are: its
        // dirty marks wait (for the table to come back), the other tables are written.
        dirty.retain(|d| {
            !self.load_watch.is_loading(&d.table)
                && !held.contains(&d.table)
                && self.tables.contains_key(&d.table)
        });
        if dirty.is_empty() {
            return Ok(Round::default());
        }
        let tried = dirty.len();
        tracing::info!(partitions = tried, "write round starts");
        // Oldest change first: a partition waits at most one round behind newer ones.
        // Among changes of one age, the largest partition first, so that the longest
        // jobs do not start last and hold the round open on one worker.
        let bytes = self.stage.approximate_bytes(&dirty);
        let mut order: Vec<(DirtyPartition, u64)> = dirty.into_iter().zip(bytes).collect();
        order.sort_by_key(|(d, bytes)| (d.generation, std::cmp::Reverse(*bytes)));
        let dirty: Vec<DirtyPartition> = order.into_iter().map(|(d, _)| d).collect();
        let started = Instant::now();
        let mut transient = 0;
        let mut deferred = 0;
        // Small merges of many partitions of a table go in groups, one transaction each;
        // the rest, and what a group leaves, are written one partition each.
        let (dirty, grouped) = self.write_groups(dirty).await?;
        report.rows_rejected += grouped.rejected;
        // A table one of whose writes ran out of `lock_timeout_ms` (a session holds a
        // lock on it) is not written again in this round: each of its partitions would
        // wait as long, and the other tables' writes behind them. Its partitions stay
        // dirty for the next round.
        let locked: std::sync::Mutex<std::collections::HashSet<String>> = Default::default();
        let locked = &locked;
        let results: Vec<_> = futures_util::stream::iter(dirty)
            .map(|d: DirtyPartition| async move {
                let started = Instant::now();
                if locked.lock().is_ok_and(|l| l.contains(&d.table)) {
                    return (d, Ok(None));
                }
                let outcome = watched(
                    self.write_partition(&d.table, &d.partition, true),
                    &d.table,
                    &d.partition,
                )
                .await;
                if outcome.as_ref().is_err_and(is_lock_timeout)
                    && let Ok(mut l) = locked.lock()
                {
                    l.insert(d.table.clone());
                }
                let failed = outcome.as_ref().is_err_and(|e| !e.is_deferred());
                metrics::partition_job(&d.table, started.elapsed(), failed);
                (d, outcome)
            })
            .buffer_unordered(self.config.engine.parallelism)
            .collect()
            .await;
        let mut first_error = None;
        let mut failures = 0usize;
        let (mut partitions, mut rows) = (0usize, 0u64);
        for (d, outcome) in results {
            match outcome {
                Ok(Some(summary)) => {
                    partitions += 1;
                    rows += summary.copied;
                    report.rows_rejected += summary.rejected;
                }
                Ok(None) => {}
                Err(error) if error.is_deferred() => {
                    tracing::debug!(table = %d.table, partition = %d.partition, "partition write deferred: a large transaction is being applied to the stage");
                    deferred += 1;
                }
                Err(error) => {
                    tracing::error!(table = %d.table, partition = %d.partition, error = %error_chain(&error), "partition write failed; the other partitions go on");
                    report.partitions_failed += 1;
                    if !error.is_deterministic() {
                        transient += 1;
                    } else {
                        if let Ok(mut failed) = self.failed.lock() {
                            failed.insert((d.table.clone(), d.partition.clone()), d.generation);
                        }
                        // For `weir status`, until the partition is written.
                        let failure = crate::stage::PartitionFailure {
                            table: d.table.clone(),
                            partition: d.partition.clone(),
                            generation: d.generation,
                            error: error_chain(&error),
                        };
                        if let Err(e) = self.stage.record_failure(&failure) {
                            tracing::warn!(error = %error_chain(&e), "partition failure not recorded");
                        }
                    }
                    failures += 1;
                    first_error.get_or_insert(PipelineError::Partition {
                        table: d.table.clone(),
                        partition: d.partition.to_string(),
                        others: 0,
                        source: Box::new(error),
                    });
                }
            }
        }
        let (partitions, rows) = (partitions + grouped.partitions, rows + grouped.rows);
        report.partitions_written += partitions;
        report.rows_written += rows;
        tracing::info!(
            partitions,
            rows,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "partitions written"
        );
        if let Some(PipelineError::Partition { others, .. }) = first_error.as_mut() {
            *others = failures.saturating_sub(1);
        }
        match first_error {
            Some(e) if !keep_going => Err(e),
            _ => Ok(Round {
                tried,
                transient,
                deferred,
            }),
        }
    }

    async fn flush_dead_letters(&self) -> Result<usize, PipelineError> {
        let mut total = 0;
        loop {
            let records = self.stage.dead_letters(DEAD_LETTERS_PER_WRITE)?;
            if records.is_empty() {
                return Ok(total);
            }
            let stage_id = self.stage.stage_id()?;
            let mut client = self.client().await?;
            let result = target::write_dead_letters(
                &mut client,
                &stage_id,
                &self.config.source_id(),
                &records,
            )
            .await;
            self.clients.lock().await.push(client);
            result?;
            let positions: Vec<u64> = records.iter().map(|r| r.position).collect();
            self.stage.remove_dead_letters(&positions)?;
            total += records.len();
        }
    }
}

/// Whether `error` is a write that ran out of `lock_timeout_ms`.
fn is_lock_timeout(error: &PipelineError) -> bool {
    matches!(error, PipelineError::Target(e) if matches!(**e, target::TargetError::LockTimeout(_)))
}

/// How often a partition write that has not finished is reported.
const WRITE_WATCH: std::time::Duration = std::time::Duration::from_secs(60);

/// `write`, with a warning every [`WRITE_WATCH`] it goes on: a target that accepts
/// connections but does not answer (frozen, a network black hole) would otherwise hold
/// the round without a word for as long as TCP keeps the connection.
async fn watched<T>(
    write: impl std::future::Future<Output = T>,
    table: &str,
    partition: &crate::partition::Partition,
) -> T {
    let mut write = std::pin::pin!(write);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match tokio::time::timeout(WRITE_WATCH, &mut write).await {
            Ok(out) => return out,
            Err(_) => {
                waited += WRITE_WATCH;
                tracing::warn!(table, partition = %partition, waited_s = waited.as_secs(), "a partition write is still running: a large partition, a slow target, or a hung one (frozen, out of resources, a network that drops its packets); the rest of the round waits for it");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_backoff_doubles_within_its_bounds_and_resets_on_a_good_round() {
        let mut backoff = WriteBackoff::default();
        assert_eq!(backoff.after_round(0), Duration::ZERO);
        assert_eq!(backoff.after_round(3), WRITE_BACKOFF_MIN);
        assert_eq!(backoff.after_round(1), WRITE_BACKOFF_MIN * 2);
        for _ in 0..10 {
            backoff.after_round(1);
        }
        assert_eq!(backoff.after_round(1), WRITE_BACKOFF_MAX);
        assert_eq!(backoff.after_round(0), Duration::ZERO);
    }
}
