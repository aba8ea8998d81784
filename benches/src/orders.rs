//! The orders the sections measure: the end-to-end feed of Debezium JSON lines and its
//! final rows, the raw binary COPY baseline, the demo config, and the replication
//! workload on a source database's `orders` (its table, its transactions, its digest).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use weir::config::Config;
use weir::demo::{Sequence, order_line};
use weir::value::Value;
use weir_core::fixtures::{OrdersTable, jsonl_config};

pub(crate) fn day(d: u64) -> String {
    let date = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap_or_default()
        + chrono::Duration::days(d as i64);
    date.format("%Y-%m-%d").to_string()
}

/// The end-to-end feed of `rows` orders (one insert each, transactions of 8 lines) over
/// `days` days from 2026-03-01, as Debezium JSON lines, and its final rows in the
/// columns of `analytics.fact_orders` (id, customer, order_date, amount, status).
pub(crate) fn orders_feed(rows: u64, days: u64) -> anyhow::Result<(String, Vec<Vec<Value>>)> {
    let mut seq = Sequence::new(11);
    let mut feed = String::with_capacity(rows as usize * 220);
    let mut out: Vec<Vec<Value>> = Vec::with_capacity(rows as usize);
    for id in 1..=rows {
        let d = day(seq.below(days));
        let cents = seq.below(1_000_000);
        feed.push_str(&order_line('c', Some(id / 8), id, &d, cents, "new"));
        out.push(vec![
            Value::Int(id as i64),
            Value::Text(format!("c{}", id % 97)),
            Value::Date(weir::value::parse_date(&d).context("date")?),
            Value::Decimal(format!("{}.{:02}", cents / 100, cents % 100)),
            Value::Text("new".into()),
        ]);
    }
    Ok((feed, out))
}

/// The raw binary COPY baseline: `rows` (of [`orders_feed`]) into `table`, a table of
/// the shape of `analytics.fact_orders`, in one COPY (one transaction); its time, from
/// starting the COPY until the server confirmed it.
pub(crate) async fn copy_orders(
    client: &tokio_postgres::Client,
    table: &str,
    rows: &[Vec<Value>],
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let sink = client
        .copy_in(&format!(
            "COPY {table} (id, customer, order_date, amount, status) FROM STDIN (FORMAT binary)"
        ))
        .await?;
    let writer = BinaryCopyInWriter::new(
        sink,
        &[
            Type::INT8,
            Type::TEXT,
            Type::DATE,
            Type::NUMERIC,
            Type::TEXT,
        ],
    );
    pin_mut!(writer);
    for row in rows {
        let refs: Vec<&(dyn ToSql + Sync)> = row.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        writer.as_mut().write(&refs).await?;
    }
    let copied = writer.finish().await?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        copied == rows.len() as u64,
        "COPY wrote {copied} rows, expected {}",
        rows.len()
    );
    Ok(elapsed)
}

/// The demo's orders config (JSON lines, `public.orders` → `analytics.fact_orders` by
/// day, bad lines to the dead-letter table), written into `dir` and loaded.
pub(crate) fn demo_config(dir: &Path) -> anyhow::Result<Config> {
    let path = dir.join("weir.toml");
    std::fs::write(
        &path,
        jsonl_config(
            "on_bad_record = \"dead-letter\"",
            "",
            &OrdersTable::jsonl("analytics.fact_orders").to_string(),
        ),
    )?;
    Ok(Config::load(&path)?)
}

/// The source table, and the same table in each subscriber database.
pub(crate) const REPL_TABLE_DDL: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, \
     order_date date, amount numeric(12,2), status text)";
/// Row count and an md5 of all rows in id order, of a table of orders.
pub(crate) const REPL_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
     order_date, amount, status), ',' ORDER BY id), '')) FROM ";
/// Changes per workload transaction: 8 inserts, 1 update, 1 update or delete.
pub(crate) const CHANGES_PER_TRANSACTION: u64 = 10;

/// `(rows, digest)` of a table of orders.
pub(crate) async fn digest(
    client: &tokio_postgres::Client,
    table: &str,
) -> anyhow::Result<(i64, String)> {
    let row = client
        .query_one(&format!("{REPL_DIGEST}{table}"), &[])
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// The workload: `txns` transactions of 10 changes on `orders`. Transaction `t` inserts
/// ids `8t+1..=8t+8` over 30 days, sets a row of the previous transaction paid, and
/// either ships another (moving it to the next day: a partition move) or deletes a third.
/// Every statement changes exactly one row per id. Written 500 transactions per round
/// trip.
pub(crate) async fn write_orders_workload(
    client: &tokio_postgres::Client,
    txns: u64,
) -> anyhow::Result<()> {
    let mut seq = Sequence::new(23);
    let mut sql = String::with_capacity(500 * 700);
    for t in 0..txns {
        workload_transaction(&mut sql, &mut seq, t)?;
        if (t + 1) % 500 == 0 || t + 1 == txns {
            client.batch_execute(&sql).await?;
            sql.clear();
        }
    }
    Ok(())
}

/// Appends transaction `t` of the workload of [`write_orders_workload`] to `sql`
/// (`BEGIN; … COMMIT;`, `seq` seeded 23 for the same rows); returns the id it deletes,
/// if any.
pub(crate) fn workload_transaction(
    sql: &mut String,
    seq: &mut Sequence,
    t: u64,
) -> anyhow::Result<Option<u64>> {
    sql.push_str("BEGIN; INSERT INTO orders VALUES ");
    for k in 1..=8 {
        let id = 8 * t + k;
        let cents = seq.below(1_000_000);
        write!(
            sql,
            "{}({id}, 'c{}', '{}', {}.{:02}, 'new')",
            if k == 1 { "" } else { ", " },
            id % 97,
            day(seq.below(30)),
            cents / 100,
            cents % 100
        )?;
    }
    let previous = 8 * t.saturating_sub(1);
    write!(
        sql,
        "; UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = {};",
        previous + 2
    )?;
    let deleted = if t.is_multiple_of(2) {
        write!(
            sql,
            " UPDATE orders SET status = 'shipped', order_date = order_date + 1 WHERE id = {};",
            previous + 3
        )?;
        None
    } else {
        write!(sql, " DELETE FROM orders WHERE id = {};", previous + 4)?;
        Some(previous + 4)
    };
    sql.push_str(" COMMIT;\n");
    Ok(deleted)
}
