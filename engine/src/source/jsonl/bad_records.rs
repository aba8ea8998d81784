//! How bad records sent to the dead-letter table are logged: the first few one by one,
//! then a count now and then (each is in `weir.dead_letter` with its line and reason).

use super::JsonlSource;

/// Bad records logged one by one per run; past them, a count every
/// [`BAD_RECORDS_COUNTED`] (each is in the dead-letter table with its line).
const BAD_RECORDS_LOGGED: u64 = 10;
const BAD_RECORDS_COUNTED: u64 = 10_000;

impl JsonlSource {
    /// Logs a bad record sent to the dead-letter table: the first few one by one, then
    /// a count now and then, so that a feed of a table nobody configured does not log a
    /// line per record.
    pub(super) fn log_bad_record(&mut self, line: u64, reason: &str) {
        self.bad_records += 1;
        let n = self.bad_records;
        if n <= BAD_RECORDS_LOGGED {
            tracing::warn!(feed = %self.feed, line, reason, "bad record sent to the dead-letter table");
            if n == BAD_RECORDS_LOGGED {
                tracing::warn!(feed = %self.feed, "further bad records are counted, not logged one by one: each is in weir.dead_letter with its line and reason");
            }
        } else {
            tracing::debug!(feed = %self.feed, line, reason, "bad record sent to the dead-letter table");
            if n.is_multiple_of(BAD_RECORDS_COUNTED) {
                tracing::warn!(feed = %self.feed, bad_records = n, line, "bad records sent to the dead-letter table so far");
            }
        }
    }
}
