//! Section 3: a transaction larger than memory. One transaction of `--large-rows` rows
//! staged through the pending area; peak RSS against the stated bound.

use std::fmt::Write as _;
use std::time::Instant;

use weir::config::OnBadRecord;
use weir::demo::{Sequence, order_line};
use weir::source::jsonl::JsonlSource;
use weir::source::{ChangeSource, SourceEvent};
use weir::stage::Stage;

use crate::Args;
use crate::measure::{peak_rss_kib, reset_peak_rss};
use crate::orders::{day, demo_config};

/// Section 3: one transaction of `large_rows` rows through the pending area.
pub(crate) async fn large_transaction(out: &mut String, args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = demo_config(dir.path())?;
    let feed_path = dir.path().join("feed.jsonl");
    {
        let mut seq = Sequence::new(5);
        let mut feed = std::io::BufWriter::new(std::fs::File::create(&feed_path)?);
        for id in 1..=args.large_rows {
            let line = order_line(
                'c',
                Some(1),
                id,
                &day(seq.below(30)),
                seq.below(1_000_000),
                "new",
            );
            std::io::Write::write_all(&mut feed, line.as_bytes())?;
        }
        std::io::Write::flush(&mut feed)?;
    }
    let feed_bytes = std::fs::metadata(&feed_path)?.len();
    reset_peak_rss();
    let base_kib = peak_rss_kib();
    let stage = Stage::open(&dir.path().join("stage"), &config.source_id())?;
    let chunk = config.engine.transaction_chunk_changes;
    let mut source = JsonlSource::open(
        Some(feed_path),
        false,
        config.tables.clone(),
        OnBadRecord::Fail,
        None,
        None,
        chunk,
    )
    .await?;
    let started = Instant::now();
    let mut chunks = 0u64;
    loop {
        match source.next().await? {
            SourceEvent::Chunk(changes) => {
                stage.append_pending(&changes)?;
                chunks += 1;
            }
            SourceEvent::Transaction(txn) => {
                stage.apply(&[txn])?;
            }
            SourceEvent::Abort => stage.discard_pending()?,
            SourceEvent::Idle | SourceEvent::End => break,
            SourceEvent::StreamChunk { .. }
            | SourceEvent::StreamDiscard { .. }
            | SourceEvent::StreamCommit(_) => {
                anyhow::bail!("a JSON-lines feed streams no transaction in progress")
            }
        }
    }
    let elapsed = started.elapsed();
    let peak_kib = peak_rss_kib();
    let staged: u64 = stage.row_counts()?.values().sum();
    anyhow::ensure!(
        staged == args.large_rows,
        "staged {staged} rows, expected {}",
        args.large_rows
    );
    // The stated bound: RocksDB's memtable budget and block cache, one chunk of changes
    // held twice (decoded and encoded), and the process's baseline.
    let bound_kib = base_kib + (weir::stage::MEMORY_BUDGET_BYTES as u64 >> 10) + 64 * 1024;
    println!(
        "large transaction: {} rows in {:?}, peak RSS {} MiB (bound {} MiB)",
        args.large_rows,
        elapsed,
        peak_kib >> 10,
        bound_kib >> 10
    );
    writeln!(out, "\n## One transaction larger than memory\n")?;
    writeln!(
        out,
        "One transaction of {} rows ({:.0} MB of JSON lines, one `txId`) staged from the JSON-lines source through the \
         pending area in chunks of {} changes, then committed atomically. Peak RSS is the process's `VmHWM`, reset before \
         staging began.\n",
        args.large_rows,
        feed_bytes as f64 / 1e6,
        chunk
    )?;
    writeln!(
        out,
        "| rows | time (s) | rows/s | peak RSS (MiB) | stated bound (MiB) |\n|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| {} | {:.1} | {:.0} | {} | {} |",
        args.large_rows,
        elapsed.as_secs_f64(),
        args.large_rows as f64 / elapsed.as_secs_f64(),
        peak_kib >> 10,
        bound_kib >> 10
    )?;
    writeln!(
        out,
        "\nThe bound is the baseline RSS before staging ({} MiB) + RocksDB's memtable budget and block cache \
         (`stage::MEMORY_BUDGET_BYTES`, {} MiB) + 64 MiB for one chunk in flight. It does not grow with the transaction: \
         {} chunks went through the pending area.",
        base_kib >> 10,
        weir::stage::MEMORY_BUDGET_BYTES >> 20,
        chunks
    )?;
    anyhow::ensure!(
        peak_kib < bound_kib,
        "peak RSS {peak_kib} KiB is above the stated bound {bound_kib} KiB"
    );
    Ok(())
}
