//! What the demo prints besides the commands' own output: step headings, indented
//! blocks, and the progress lines while the workload writes.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use weir::pg::lsn::format_lsn;

use super::engine::Weir;
use super::estate::Db;
use super::{DemoError, TARGET_TABLE};

/// Prints a step's heading.
pub(super) fn heading(out: &mut impl Write, step: u32, title: &str) -> Result<(), DemoError> {
    writeln!(out, "\n{step}. {title}")?;
    Ok(())
}

pub(super) fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines().fold(String::new(), |mut acc, l| {
        let _ = writeln!(acc, "{pad}{l}");
        acc
    })
}

#[derive(Debug)]
pub(super) struct Progress {
    elapsed: Duration,
    changes: u64,
    source_orders: i64,
    staged: Option<u64>,
    slot_lag_bytes: Option<i64>,
    dirty: usize,
    target_rows: i64,
    partitions: i64,
    written: Option<i64>,
}

impl Progress {
    pub(super) fn header() -> String {
        format!(
            "  {:>6} {:>8} {:>8} {:>12} {:>10} {:>6} {:>8} {:>11} {:>12}",
            "time",
            "changes",
            "orders",
            "staged",
            "slot lag",
            "dirty",
            "target",
            "partitions",
            "written"
        )
    }

    pub(super) async fn read(
        weir: &Weir,
        source: &Db,
        target: &Db,
        changes: &AtomicU64,
        elapsed: Duration,
    ) -> Result<Progress, DemoError> {
        let changes = changes.load(Ordering::Relaxed);
        let status = weir.status().await?;
        let source_orders = source.count("SELECT count(*) FROM orders").await?;
        let target_rows = target
            .count(&format!("SELECT count(*) FROM {TARGET_TABLE}"))
            .await?;
        let row = target
            .client
            .query_one(
                "SELECT count(*), max(source_position) FROM weir.partitions WHERE target_table = $1",
                &[&TARGET_TABLE],
            )
            .await
            .map_err(target.err())?;
        Ok(Progress {
            elapsed,
            changes,
            source_orders,
            staged: status["position"].as_u64(),
            slot_lag_bytes: status["slot_lag_bytes"].as_i64(),
            dirty: status["dirty_partitions"].as_array().map_or(0, Vec::len),
            target_rows,
            partitions: row.get(0),
            written: row.get(1),
        })
    }

    pub(super) fn line(&self, down: bool) -> String {
        let lsn = |p: Option<u64>| p.map_or_else(|| "-".to_owned(), format_lsn);
        format!(
            "  {:>5.1}s {:>8} {:>8} {:>12} {:>10} {:>6} {:>8} {:>11} {:>12}{}",
            self.elapsed.as_secs_f64(),
            self.changes,
            self.source_orders,
            lsn(self.staged),
            self.slot_lag_bytes
                .map_or_else(|| "-".to_owned(), |b| bytes(b.max(0) as u64)),
            self.dirty,
            self.target_rows,
            self.partitions,
            lsn(self.written.and_then(|w| u64::try_from(w).ok())),
            if down { "  (weir run is down)" } else { "" }
        )
    }
}

fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / 1_048_576.0)
    }
}
