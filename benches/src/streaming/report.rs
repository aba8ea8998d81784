//! The streaming section's text of the report: what was run and how, the latency, recovery
//! and sustained-rate tables, and the ratios, from the section's [`Figures`] and
//! [`Details`].

use std::fmt::Write as _;
use std::time::Duration;

use super::{Figures, POLL, RATE, TARGET};
use crate::Args;
use crate::measure::seconds_list;
use crate::orders::CHANGES_PER_TRANSACTION;

/// What the section measured besides its [`Figures`], for its own text only.
#[derive(Debug)]
pub(super) struct Details {
    /// The 1-minute load average when the section began.
    pub(super) load: String,
    /// Seconds of the recovery run's writer.
    pub(super) writer_seconds: u64,
    /// Each wait for the slot's release after a kill.
    pub(super) release_waits: Vec<Duration>,
    /// Each restart's time to the first new row visible, and to caught up.
    pub(super) first_visible: Vec<Duration>,
    pub(super) caught: Vec<Duration>,
    /// Transactions of the backlog.
    pub(super) backlog_txns: u64,
    /// Server CPU seconds of each `weir run` catching up the backlog (plugin, identity).
    pub(super) backlog_cpu: Vec<f64>,
    /// Each binary COPY of the backlog's final rows.
    pub(super) copies: Vec<Duration>,
}

/// Writes the section to `out`.
pub(super) fn report(
    out: &mut String,
    args: &Args,
    figures: &Figures,
    details: Details,
) -> anyhow::Result<()> {
    let Details {
        load,
        writer_seconds,
        release_waits,
        first_visible,
        caught,
        backlog_txns,
        backlog_cpu,
        copies,
    } = details;
    let flush_ms = args.stream_flush_ms;
    let f = figures;
    writeln!(
        out,
        "\n## Streaming: PostgreSQL → live `weir run` with the Rust plugin → PostgreSQL, against a subscription\n"
    )?;
    writeln!(
        out,
        "The real `weir` binary of this build, `weir run` (live, not `--once`) with `--log-format json`, on the \
         replication section's table (`orders`, default replica identity) and workload (transactions of 8 inserts, 1 \
         update, and alternately 1 update moving a row to the next day or 1 delete; 30 days), in source databases of \
         the same cluster. Config: `public.orders` → `{TARGET}` by day, `write` at its default (`auto`), \
         `plugin = \"orders-rust.wasm\"` with `rate = \"{RATE}\"` (its output: id, customer, order_date, amount, \
         amount_eur, status; the target table made by `weir init` from the plugin's describe), \
         `[engine] flush_interval_ms = {flush_ms}`, parallelism 2 (the default). `weir init` and a first \
         `run --once` on the empty table ran before each measurement. The peer is a native subscription \
         (`CREATE SUBSCRIPTION … WITH (copy_data = false)`, its slot made beforehand) into a second database holding \
         the same table. The 1-minute load average when this section began was {load}.\n"
    )?;
    let rates: Vec<String> = f
        .latency
        .iter()
        .map(|run| {
            format!(
                "{} transactions/s ({} changes/s offered; {:.0} measured: {} transactions in {:.2} s)",
                run.rate,
                run.rate * CHANGES_PER_TRANSACTION,
                run.offered_changes_per_s,
                run.txns,
                run.weir_writer.as_secs_f64()
            )
        })
        .collect();
    writeln!(
        out,
        "### Latency from source commit to visible in the target, at steady rates\n\n\
         A writer (one connection) commits one workload transaction per tick of a tokio interval for {} s, at {}. \
         For every row still in the \
         source at the end (deleted rows are left out: Weir stages the latest state, so a row deleted before its \
         insert is written is never written), the latency is the time from its transaction's `COMMIT` \
         returning to the writer (this machine's clock, read right after `batch_execute` returned) to the row \
         first visible in the target, recorded by the target itself with the same clock: on Weir's table a \
         statement-level `AFTER INSERT` trigger with a transition table (COPY fires it) runs `INSERT INTO \
         bench_seen SELECT id, clock_timestamp() FROM new_rows ON CONFLICT DO NOTHING`, at the end of the \
         partition's COPY, inside the write's transaction, just before its lineage upsert and commit (so a \
         figure is early by that commit, and a rolled-back write records nothing); the subscriber's table has the \
         same as a row trigger, `ENABLE ALWAYS` (an apply worker fires only row triggers, and only those enabled \
         `REPLICA` or `ALWAYS`). Each run waited until every such row was recorded; Checked: the target equals the \
         source (Weir: row count and md5 of id, customer, order_date, amount and status, the source's status \
         upper-cased as the plugin does; the peer: all columns).\n",
        args.stream_seconds,
        rates.join(", then ")
    )?;
    writeln!(
        out,
        "| path | changes/s offered | rows measured | p50 (ms) | p99 (ms) | max (ms) | server CPU (s) |\n|---|---:|---:|---:|---:|---:|---:|"
    )?;
    for run in &f.latency {
        let offered = run.rate * CHANGES_PER_TRANSACTION;
        writeln!(
            out,
            "| Weir `run` + `orders-rust.wasm`, flush interval {flush_ms} ms | {offered} | {} | {:.1} | {:.1} | {:.1} | {:.2} |",
            run.weir.rows, run.weir.p50, run.weir.p99, run.weir.max, run.weir_server_cpu
        )?;
        writeln!(
            out,
            "| native subscription (peer) | {offered} | {} | {:.1} | {:.1} | {:.1} | {:.2} |",
            run.peer.rows, run.peer.p50, run.peer.p99, run.peer.max, run.peer_server_cpu
        )?;
    }
    let ratios: Vec<String> = f
        .latency
        .iter()
        .map(|run| {
            format!(
                "at {} changes/s p50 {:.2}×, p99 {:.2}×, max {:.2}× (the Weir run's target held {} rows at its end)",
                run.rate * CHANGES_PER_TRANSACTION,
                run.weir.p50 / run.peer.p50,
                run.weir.p99 / run.peer.p99,
                run.weir.max / run.peer.max,
                run.final_rows
            )
        })
        .collect();
    writeln!(
        out,
        "\nWeir / peer: {}. Weir's path: intake stages each transaction (one synced RocksDB write per group \
         commit) and wakes the writer, which starts a round as soon as it is free (at most every {flush_ms} ms) \
         and, in the default `auto` mode, merges each dirty partition's changed keys (the plugin over those rows, \
         a DELETE of their keys and a binary COPY, lineage), the small merges of a round together in one \
         transaction (a group). *Server CPU* is every process of \
         the cluster from the writer's start until the last row was recorded (the writer's backends, decoding, \
         the target's writes and the recorder's triggers; for the peer also its apply worker).\n",
        ratios.join("; ")
    )?;
    writeln!(
        out,
        "### Recovery after SIGKILL\n\n\
         The same steady writer for {writer_seconds} s while a third `weir run` (same config, its own source, target \
         and slot, the same recorder) tails it; every {} s it was killed with SIGKILL and, {} ms later and once the \
         server had released its slot (waits: {} s), started again. From each restart (the spawn of the new `weir \
         run`): **to streaming again**, the first row recorded in the target after it; **to caught up**, the last \
         of the rows committed at the source before it recorded (every one of them visible). Checked: each restart \
         caught up before the next kill; at the end every surviving row was recorded and the target equals the \
         source (row count and md5, as above): nothing lost, nothing duplicated. Median of {} restarts.\n",
        args.recovery_period_s,
        args.recovery_down_ms,
        seconds_list(&release_waits),
        args.recovery_kills
    )?;
    writeln!(
        out,
        "| from restart to | median (s) | each restart (s) |\n|---|---:|---|\n\
         | first new row visible (streaming again) | {:.2} | {} |\n\
         | every row committed before the restart visible (caught up) | {:.2} | {} |\n",
        f.first_visible.as_secs_f64(),
        seconds_list(&first_visible),
        f.caught_up.as_secs_f64(),
        seconds_list(&caught)
    )?;
    writeln!(
        out,
        "A restart pays the process start, the plugin's load (from the compiled-component cache), opening the \
         stage, connecting and `START_REPLICATION` at the stage's position, then the first flush interval; the rows \
         it catches up are those committed while it was down ({} ms) and those staged or batched but not written \
         at the kill (re-delivered by the slot, or found in the stage dirty).\n",
        args.recovery_down_ms
    )?;
    writeln!(
        out,
        "### Sustained rate: a backlog caught up\n\n\
         A backlog of {} changes ({backlog_txns} transactions of the same workload, {} rows at the end) written while \
         every consumer was stopped, each consumer with its own slot made before it (Weir's by `weir init`); WAL \
         flushed, the source vacuumed and a `CHECKPOINT` taken before the clocks. The consumers ran one at a time. \
         Weir: from spawning `weir run` (live; process start, plugin load, connect) until the target equals the \
         source, polled every {} ms (the backlog's last inserted id present, then the digest equal), so up to {} ms \
         late; then stopped with SIGTERM. Peer: from `ALTER SUBSCRIPTION … ENABLE` until the same. Limits: \
         `pg_recvlogical` on its own slot of the same backlog, to /dev/null (as in the replication section), and \
         one binary COPY of the backlog's final rows into an empty table of the identity target's shape (`LIKE … \
         INCLUDING ALL`), median of {} COPYs.\n",
        f.backlog_changes,
        f.backlog_rows,
        POLL.as_millis(),
        POLL.as_millis(),
        args.repeat.max(1)
    )?;
    writeln!(
        out,
        "| path | time (s) | changes/s | server CPU (s) |\n|---|---:|---:|---:|"
    )?;
    let cpu = |i: usize| {
        backlog_cpu
            .get(i)
            .map_or_else(|| "—".into(), |c| format!("{c:.2}"))
    };
    writeln!(
        out,
        "| Weir `run` + `orders-rust.wasm` | {:.2} | {:.0} | {} |",
        f.weir_plugin.as_secs_f64(),
        f.rate(f.weir_plugin),
        cpu(0)
    )?;
    writeln!(
        out,
        "| Weir `run`, identity transform | {:.2} | {:.0} | {} |",
        f.weir_identity.as_secs_f64(),
        f.rate(f.weir_identity),
        cpu(1)
    )?;
    writeln!(
        out,
        "| native subscription (peer) | {:.2} | {:.0} | — |",
        f.peer.as_secs_f64(),
        f.rate(f.peer)
    )?;
    writeln!(
        out,
        "| `pg_recvlogical` → /dev/null (decode limit) | {:.2} | {:.0} | — |",
        f.recvlogical.as_secs_f64(),
        f.rate(f.recvlogical)
    )?;
    writeln!(
        out,
        "| raw binary COPY of the {} final rows (write limit) | {:.2} | {:.0} rows/s | — |",
        f.backlog_rows,
        f.copy.as_secs_f64(),
        f.backlog_rows as f64 / f.copy.as_secs_f64()
    )?;
    writeln!(
        out,
        "\nWeir with the plugin / decode limit: {:.2} of pg_recvlogical's rate; / peer: {:.2} of the subscription's; \
         its time / the COPY's: {:.1}×. Plugin overhead on this backlog: Weir with the plugin took {:.2}× the time of \
         Weir with the identity transform. All COPYs (s): {}. While the stream runs 1 s or more behind the \
         commits it reads (a backlog), Weir's writer defers its rounds, up to 5 s each, so the backlog is \
         read first and written in a few large rounds: with the plugin {} rounds wrote {} rows, with the \
         identity {} rounds wrote {} rows, for the backlog's {} final rows (a round's first write of a \
         partition replaces it, a later one merges its changed keys or replaces it, `auto`). The peer \
         applies each change once.",
        f.rate(f.weir_plugin) / f.rate(f.recvlogical),
        f.rate(f.weir_plugin) / f.rate(f.peer),
        f.weir_plugin.as_secs_f64() / f.copy.as_secs_f64(),
        f.weir_plugin.as_secs_f64() / f.weir_identity.as_secs_f64(),
        seconds_list(&copies),
        f.plugin_rounds.0,
        f.plugin_rounds.1,
        f.identity_rounds.0,
        f.identity_rounds.1,
        f.backlog_rows,
    )?;
    Ok(())
}
