//! The streaming section's steady writer and its latencies: the replication workload
//! committed at a steady rate, each transaction's commit time, and every surviving row's
//! time from commit to first recorded visible in a target.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use weir::demo::Sequence;

use super::WAIT_MAX;
use crate::cluster::connect;
use crate::orders::workload_transaction;

/// Microseconds since the epoch, of this machine's clock.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// p50, p99 and the maximum of a set of latencies, in ms.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub rows: usize,
}

impl Latency {
    pub(crate) fn of(us: &mut [i64]) -> Latency {
        us.sort_unstable();
        let at = |q: f64| {
            let i = ((us.len() as f64 * q).ceil() as usize).clamp(1, us.len().max(1)) - 1;
            us.get(i).copied().unwrap_or_default() as f64 / 1000.0
        };
        Latency {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
            rows: us.len(),
        }
    }
}

/// What the steady writer did: each transaction's COMMIT time (µs since the epoch, when
/// COMMIT returned) by transaction number; the ids it deleted.
#[derive(Debug, Default)]
pub(crate) struct Written {
    pub(crate) commit_us: Vec<i64>,
    deleted: Vec<i64>,
    pub(crate) elapsed: Duration,
}

impl Written {
    /// The ids still in the source, each with its transaction's commit time.
    pub(crate) fn surviving(&self) -> Vec<(i64, i64)> {
        let deleted: std::collections::HashSet<i64> = self.deleted.iter().copied().collect();
        (0..self.commit_us.len())
            .flat_map(|t| (1..=8).map(move |k| (8 * t as i64 + k, t)))
            .filter(|(id, _)| !deleted.contains(id))
            .map(|(id, t)| (id, self.commit_us[t]))
            .collect()
    }
}

/// Commits the workload's transactions (`write_orders_workload`'s, one per round trip)
/// at `rate` a second for `seconds`, paced by a tokio interval.
pub(crate) async fn steady_writer(
    source_dsn: String,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<Written> {
    let client = connect(&source_dsn).await?;
    let mut seq = Sequence::new(23);
    let mut written = Written::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut sql = String::with_capacity(1024);
    let started = Instant::now();
    for t in 0..rate * seconds {
        tick.tick().await;
        sql.clear();
        let deleted = workload_transaction(&mut sql, &mut seq, t)?;
        client.batch_execute(&sql).await?;
        written.commit_us.push(now_us());
        written.deleted.extend(deleted.map(|id| id as i64));
    }
    written.elapsed = started.elapsed();
    Ok(written)
}

/// Waits (bounded) until every surviving id is in `bench_seen`; then reads it.
pub(crate) async fn seen_all(
    target: &tokio_postgres::Client,
    surviving: &[(i64, i64)],
) -> anyhow::Result<HashMap<i64, i64>> {
    let started = Instant::now();
    loop {
        let rows = target
            .query("SELECT id, seen_us FROM public.bench_seen", &[])
            .await?;
        let seen: HashMap<i64, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if surviving.iter().all(|(id, _)| seen.contains_key(id)) {
            return Ok(seen);
        }
        anyhow::ensure!(
            started.elapsed() < WAIT_MAX,
            "not every committed row became visible within {WAIT_MAX:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Latencies (µs) from commit to first visible of the surviving rows.
pub(crate) fn latencies(surviving: &[(i64, i64)], seen: &HashMap<i64, i64>) -> Vec<i64> {
    surviving
        .iter()
        .filter_map(|(id, commit)| seen.get(id).map(|s| s - commit))
        .collect()
}
