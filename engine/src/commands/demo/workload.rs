//! The demo's workload on the source's `orders`, and the task that writes it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir::demo::Sequence;

use super::estate::Db;
use super::{DAYS, DemoError, SOURCE_DB, TRANSACTION_INTERVAL_MS};

/// The demo's workload on the source's `orders`: small transactions of inserts,
/// updates (some of them correcting an order's date) and deletes, a function of the
/// seed alone.
#[derive(Debug, Clone)]
pub(super) struct OrdersWorkload {
    seq: Sequence,
    next_id: i64,
    /// Orders the workload may still change, in a deterministic order.
    alive: Vec<i64>,
}

impl OrdersWorkload {
    pub(super) fn new(seed: u64) -> OrdersWorkload {
        OrdersWorkload {
            seq: Sequence::new(seed),
            next_id: 1,
            alive: Vec::new(),
        }
    }

    fn values(&mut self, id: i64) -> String {
        let day = DAYS[self.seq.below(DAYS.len() as u64) as usize];
        let cents = 500 + self.seq.below(20_000);
        format!(
            "({id}, 'c{}', DATE '{day}', {}.{:02}, 'new')",
            self.seq.below(50),
            cents / 100,
            cents % 100
        )
    }

    /// One INSERT of `orders` new orders and one refund with a negative amount, which
    /// the plugin rejects (it goes to `weir.dead_letter`); the workload never touches it.
    pub(super) fn seed_sql(&mut self, orders: u64) -> String {
        let mut rows = Vec::new();
        for _ in 0..orders {
            let id = self.next_id;
            self.next_id += 1;
            self.alive.push(id);
            rows.push(self.values(id));
        }
        let refund = self.next_id;
        self.next_id += 1;
        rows.push(format!(
            "({refund}, 'c7', DATE '{}', -12.50, 'refund')",
            DAYS[2]
        ));
        format!("INSERT INTO orders VALUES {}", rows.join(", "))
    }

    /// The next transaction (one to four changes) as one simple-query text, and its
    /// number of changes.
    pub(super) fn next_transaction(&mut self) -> (String, u64) {
        let changes = 1 + self.seq.below(4);
        let mut sql = String::from("BEGIN;");
        for _ in 0..changes {
            let roll = self.seq.below(100);
            if roll < 60 || self.alive.len() < 50 {
                let id = self.next_id;
                self.next_id += 1;
                self.alive.push(id);
                let values = self.values(id);
                let _ = write!(sql, " INSERT INTO orders VALUES {values};");
            } else if roll < 90 {
                let id = self.alive[self.seq.below(self.alive.len() as u64) as usize];
                let cents = 500 + self.seq.below(20_000);
                let _ = write!(
                    sql,
                    " UPDATE orders SET status = 'shipped', amount = {}.{:02} WHERE id = {id};",
                    cents / 100,
                    cents % 100
                );
            } else if roll < 95 {
                // A date correction: the order moves to another partition.
                let id = self.alive[self.seq.below(self.alive.len() as u64) as usize];
                let day = DAYS[self.seq.below(DAYS.len() as u64) as usize];
                let _ = write!(
                    sql,
                    " UPDATE orders SET order_date = DATE '{day}' WHERE id = {id};"
                );
            } else {
                let i = self.seq.below(self.alive.len() as u64) as usize;
                let id = self.alive.swap_remove(i);
                let _ = write!(sql, " DELETE FROM orders WHERE id = {id};");
            }
        }
        sql.push_str(" COMMIT;");
        (sql, changes)
    }
}

/// What the workload task did.
#[derive(Debug)]
pub(super) struct Written {
    pub(super) transactions: u64,
}

/// Writes the workload's transactions for `duration`, one per interval, counting the
/// changes committed.
pub(super) async fn write_orders(
    dsn: String,
    mut workload: OrdersWorkload,
    duration: Duration,
    changes: Arc<AtomicU64>,
) -> Result<Written, DemoError> {
    let db = Db::connect(&dsn, SOURCE_DB).await?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(TRANSACTION_INTERVAL_MS));
    let mut transactions = 0;
    while started.elapsed() < duration {
        tick.tick().await;
        let (sql, n) = workload.next_transaction();
        db.batch(&sql).await?;
        transactions += 1;
        changes.fetch_add(n, Ordering::Relaxed);
    }
    Ok(Written { transactions })
}

/// A spawned task aborted when dropped (an interrupted demo stops writing).
#[derive(Debug)]
pub(super) struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    pub(super) fn new(handle: tokio::task::JoinHandle<T>) -> AbortOnDrop<T> {
        AbortOnDrop(Some(handle))
    }

    pub(super) fn is_finished(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Waits for the task's result.
    pub(super) async fn join(mut self) -> Result<T, DemoError> {
        match self.0.take() {
            Some(handle) => Ok(handle.await?),
            None => Err(DemoError::Check(
                "the workload task was already joined".into(),
            )),
        }
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_a_function_of_its_seed() {
        let run = |seed| {
            let mut w = OrdersWorkload::new(seed);
            let mut sql = w.seed_sql(10);
            for _ in 0..200 {
                sql.push_str(&w.next_transaction().0);
            }
            sql
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let text = run(7);
        for change in [
            "INSERT",
            "UPDATE orders SET status",
            "UPDATE orders SET order_date",
            "DELETE",
        ] {
            assert!(text.contains(change), "{change}");
        }
    }
}
