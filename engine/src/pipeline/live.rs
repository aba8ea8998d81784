//! What a live run is doing now, for the operator's status line (`weir run` on a
//! terminal): counters that intake and the writer bump, and the state the observer
//! task reads again every [`crate::metrics::GAUGE_REFRESH`] (dirty partitions, the
//! slot's lag). Reads only: nothing here steers the run.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The live counters of a run.
#[derive(Debug)]
pub(super) struct LiveCounters {
    /// Whether an operator watches (the status line is shown): the observer task then
    /// runs even without metrics.
    pub watched: AtomicBool,
    pub changes_staged: AtomicU64,
    pub rows_written: AtomicU64,
    /// The last partition write's time, microseconds (0: none yet).
    pub last_write_us: AtomicU64,
    /// Dirty partitions, as last read.
    pub dirty: AtomicU64,
    /// A PostgreSQL slot's lag in bytes, as last read (`i64::MIN`: not known).
    pub slot_lag: AtomicI64,
    /// How far the source's stream runs behind its commits, microseconds, as intake
    /// last read it (see `PostgresSource::behind`; 0 for a feed that does not say, and
    /// while intake is paused): the writer defers rounds while a backlog is caught up.
    pub source_behind_us: AtomicU64,
}

impl Default for LiveCounters {
    fn default() -> Self {
        LiveCounters {
            watched: AtomicBool::new(false),
            changes_staged: AtomicU64::new(0),
            rows_written: AtomicU64::new(0),
            last_write_us: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            slot_lag: AtomicI64::new(i64::MIN),
            source_behind_us: AtomicU64::new(0),
        }
    }
}

/// A reading of the live counters (see [`super::Pipeline::live`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveState {
    /// Changes staged since the run began.
    pub changes_staged: u64,
    /// Rows written to the target since the run began.
    pub rows_written: u64,
    /// The last partition write's time, if there was one.
    pub last_write_ms: Option<u64>,
    /// Dirty partitions, as last read.
    pub dirty: u64,
    /// A PostgreSQL slot's lag in bytes, if known.
    pub slot_lag_bytes: Option<i64>,
    /// How far the source's stream runs behind its commits, milliseconds, as intake
    /// last read it (0 where the source does not say).
    pub behind_ms: u64,
}

impl LiveCounters {
    pub(super) fn read(&self) -> LiveState {
        let last = self.last_write_us.load(Ordering::Relaxed);
        let lag = self.slot_lag.load(Ordering::Relaxed);
        LiveState {
            behind_ms: self.source_behind_us.load(Ordering::Relaxed) / 1000,
            changes_staged: self.changes_staged.load(Ordering::Relaxed),
            rows_written: self.rows_written.load(Ordering::Relaxed),
            last_write_ms: (last > 0).then_some(last / 1000),
            dirty: self.dirty.load(Ordering::Relaxed),
            slot_lag_bytes: (lag != i64::MIN).then_some(lag),
        }
    }
}

impl LiveState {
    /// The status line: rates over `since` (the reading `seconds` before), then the
    /// state now. `in 1200 changes/s · out 3400 rows/s · dirty 3 · slot lag 1.2 MiB ·
    /// last write 45 ms`, with `catching up, 3.3 s behind` before the last write while
    /// the source's stream is a backlog (see `writer`).
    pub fn line(&self, since: &LiveState, seconds: f64) -> String {
        let rate =
            |now: u64, then: u64| (now.saturating_sub(then) as f64 / seconds.max(0.001)) as u64;
        let mut line = format!(
            "in {} changes/s · out {} rows/s · dirty {} partitions",
            rate(self.changes_staged, since.changes_staged),
            rate(self.rows_written, since.rows_written),
            self.dirty
        );
        if let Some(lag) = self.slot_lag_bytes {
            line.push_str(&format!(" · slot lag {:.1} MiB", lag as f64 / 1_048_576.0));
        }
        if self.behind_ms >= super::writer::CATCH_UP_BEHIND.as_millis() as u64 {
            line.push_str(&format!(
                " · catching up, {:.1} s behind",
                self.behind_ms as f64 / 1000.0
            ));
        }
        if let Some(ms) = self.last_write_ms {
            line.push_str(&format!(" · last write {ms} ms"));
        }
        line.push_str(&format!(
            " · {} changes staged, {} rows written",
            self.changes_staged, self.rows_written
        ));
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_shows_rates_and_state() {
        let then = LiveState::default();
        let now = LiveState {
            changes_staged: 2400,
            rows_written: 600,
            last_write_ms: Some(45),
            dirty: 2,
            slot_lag_bytes: Some(3 << 20),
            behind_ms: 20,
        };
        assert_eq!(
            now.line(&then, 2.0),
            "in 1200 changes/s · out 300 rows/s · dirty 2 partitions · slot lag 3.0 MiB · last write 45 ms · 2400 changes staged, 600 rows written"
        );
        let catching_up = LiveState {
            behind_ms: 3300,
            ..now
        };
        assert!(
            catching_up
                .line(&then, 2.0)
                .contains(" · slot lag 3.0 MiB · catching up, 3.3 s behind · last write 45 ms"),
            "{}",
            catching_up.line(&then, 2.0)
        );
        let quiet = LiveState {
            slot_lag_bytes: None,
            last_write_ms: None,
            ..now
        };
        assert!(
            !quiet.line(&now, 1.0).contains("lag")
                && quiet.line(&now, 1.0).starts_with("in 0 changes/s")
        );
    }
}
