//! Section 2: staging. Staged changes/s with sync on, one transaction per synced batch
//! and group commits of several, with the time each synced batch takes.

use std::fmt::Write as _;
use std::time::Instant;

use weir::config::Config;
use weir::demo::Sequence;
use weir::source::{Transaction, keyed_changes};
use weir::stage::Stage;
use weir::value::Value;

use crate::Args;
use crate::orders::demo_config;

/// Single-row transactions of `public.orders`, positions 1, 2, ...
fn orders_transactions(
    config: &Config,
    count: usize,
    offset: u64,
) -> anyhow::Result<Vec<Transaction>> {
    let table = &config.tables[0];
    let mut seq = Sequence::new(offset + 3);
    (0..count as u64)
        .map(|i| {
            let id = offset + i;
            let row = vec![
                ("id".to_owned(), Value::Int(id as i64)),
                ("customer".to_owned(), Value::Text(format!("c{}", id % 97))),
                (
                    "order_date".to_owned(),
                    Value::Date(20_513 + (seq.below(30) as i32)),
                ),
                (
                    "amount".to_owned(),
                    Value::Decimal(format!("{}.{:02}", seq.below(10_000), seq.below(100))),
                ),
                ("status".to_owned(), Value::Text("new".into())),
            ];
            let changes = keyed_changes(
                table,
                weir::source::Op::Insert,
                None,
                Some(row),
                offset + i + 1,
                None,
            )
            .map_err(anyhow::Error::msg)?;
            Ok(Transaction {
                end: offset + i + 1,
                cursor: offset + i + 1,
                changes,
                bad_records: vec![],
            })
        })
        .collect()
}

/// Section 2: synced staging throughput by group-commit size.
pub(crate) fn staging(out: &mut String, args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = demo_config(dir.path())?;
    writeln!(out, "\n## Staging with sync on, by group-commit size\n")?;
    writeln!(
        out,
        "{} single-row transactions (about 200-byte rows) applied to a fresh stage; each synced RocksDB write \
         carries `batch` transactions and the new position. \"Sync latency\" is the mean time of one synced \
         write: what a transaction waits for before it may be acknowledged.\n",
        args.stage_transactions
    )?;
    writeln!(
        out,
        "| batch (transactions per sync) | changes/s | sync latency (ms) |\n|---:|---:|---:|"
    )?;
    for batch in [1usize, 8, 64, 512] {
        let stage = Stage::open(&dir.path().join(format!("stage-{batch}")), "bench")?;
        let txns = orders_transactions(&config, args.stage_transactions, 0)?;
        let started = Instant::now();
        let mut writes = 0u32;
        for group in txns.chunks(batch) {
            stage.apply(group)?;
            writes += 1;
        }
        let elapsed = started.elapsed();
        let rate = args.stage_transactions as f64 / elapsed.as_secs_f64();
        let latency_ms = elapsed.as_secs_f64() * 1000.0 / f64::from(writes);
        println!("staging batch {batch}: {rate:.0} changes/s, {latency_ms:.2} ms per synced write");
        writeln!(out, "| {batch} | {rate:.0} | {latency_ms:.2} |")?;
    }
    Ok(())
}
