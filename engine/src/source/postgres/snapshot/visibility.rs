//! Which transactions a chunk's read saw. The watermarks order the stream by commit
//! records, but a transaction becomes visible to new snapshots a moment after its
//! commit record is written (PostgreSQL flushes the record, then leaves the
//! `ProcArray`): one whose commit precedes the low watermark can still be unseen by the
//! chunk's read that follows it. Each chunk read records its snapshot, and the stream's
//! transactions are judged by it: a change of the chunk's table by a transaction the
//! read did not see is the row's newer version, whatever side of the low watermark its
//! commit fell on (see [`super::Snapshot::observe`]).

/// What a transaction snapshot says of transaction ids, as `pg_current_snapshot()`
/// gives it (`xmin:xmax:xip,…`, 64-bit), kept as the 32-bit ids pgoutput sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::source::postgres) struct XidSnapshot {
    xmax: u32,
    in_progress: Vec<u32>,
}

impl XidSnapshot {
    /// Parses the text of `pg_current_snapshot()` (or `txid_current_snapshot()`).
    pub(in crate::source::postgres) fn parse(text: &str) -> Option<XidSnapshot> {
        let mut parts = text.trim().split(':');
        let _xmin = parts.next()?.parse::<u64>().ok()?;
        let xmax = parts.next()?.parse::<u64>().ok()?;
        let xip = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let in_progress = xip
            .split(',')
            .filter(|x| !x.is_empty())
            .map(|x| x.parse::<u64>().ok().map(low_bits))
            .collect::<Option<Vec<u32>>>()?;
        Some(XidSnapshot {
            xmax: low_bits(xmax),
            in_progress,
        })
    }

    /// Whether the snapshot sees the work of `xid`, a transaction the stream shows
    /// committed: it had finished when the snapshot was taken (neither in progress then
    /// nor begun after).
    pub(in crate::source::postgres) fn sees(&self, xid: u32) -> bool {
        // 32-bit ids compare modulo 2^32, as PostgreSQL's `TransactionIdFollowsOrEquals`.
        let at_or_after_xmax = (xid.wrapping_sub(self.xmax) as i32) >= 0;
        !at_or_after_xmax && !self.in_progress.contains(&xid)
    }
}

/// The 32-bit transaction id of a 64-bit one (its epoch dropped).
fn low_bits(xid: u64) -> u32 {
    (xid & u64::from(u32::MAX)) as u32
}

/// The SQL function that gives the current snapshot on a server of `version_num`.
pub(in crate::source::postgres) fn snapshot_function(version_num: i32) -> &'static str {
    if version_num >= 130_000 {
        "pg_current_snapshot"
    } else {
        "txid_current_snapshot"
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_sees_what_finished_before_it() {
        let s = XidSnapshot::parse("100:110:102,105").expect("snapshot");
        assert!(s.sees(99) && s.sees(101) && s.sees(109));
        assert!(!s.sees(102) && !s.sees(105), "in progress");
        assert!(!s.sees(110) && !s.sees(200), "begun after");
        let none = XidSnapshot::parse("7:7:").expect("no transaction in progress");
        assert!(none.sees(6) && !none.sees(7));
    }

    /// 64-bit ids past an epoch boundary are compared by their 32-bit ids, modulo 2^32.
    #[test]
    fn ids_wrap_around_as_postgresql_compares_them() {
        let epoch = 1u64 << 32;
        let s = XidSnapshot::parse(&format!("{}:{}:{}", epoch - 5, epoch + 3, epoch + 1))
            .expect("snapshot");
        assert!(s.sees(u32::MAX - 4) && s.sees(0) && s.sees(2));
        assert!(!s.sees(1) && !s.sees(3) && !s.sees(10));
    }

    #[test]
    fn malformed_snapshots_are_refused() {
        for text in ["", "1:2", "1:2:x", "a:2:", "1:2:3:4"] {
            assert_eq!(XidSnapshot::parse(text), None, "{text}");
        }
    }
}
