//! The report, BENCHMARKS.md, around the sections' own text: the summary table of a
//! full run's headline figures, the header (command, machine, PostgreSQL's settings),
//! the wall time by section, and one section run alone spliced into an existing report.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use weir::localpg::LocalPg;

use crate::streaming;

/// `doc` with the section of the same `## ` heading as `section` replaced by it, or
/// with `section` appended. Sections start with an empty line and their heading; one
/// ends where the next `## ` heading begins.
pub(crate) fn splice_section(doc: &str, section: &str) -> String {
    let heading = section
        .lines()
        .find(|l| l.starts_with("## "))
        .unwrap_or_default();
    let mut out = String::with_capacity(doc.len() + section.len());
    match doc.find(&format!("\n{heading}\n")) {
        Some(start) if !heading.is_empty() => {
            let end = doc[start + 1..]
                .find("\n## ")
                .map_or(doc.len(), |i| start + 1 + i);
            out.push_str(&doc[..start]);
            out.push_str(section);
            out.push_str(&doc[end..]);
        }
        _ => {
            out.push_str(doc);
            if !doc.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(section);
        }
    }
    out
}

/// The headline figures of a full run, for the summary at the top.
#[derive(Debug, Default)]
pub(crate) struct Headlines {
    /// Rows/s: Weir end to end, raw COPY.
    pub(crate) end_to_end: (f64, f64),
    /// Changes/s: `run --once`, pg_recvlogical, the subscription.
    pub(crate) replication: (f64, f64, f64),
    /// The Rust component's time per row over native.
    pub(crate) plugin_ratio: Option<f64>,
    /// The fastest parallelism, its rows/s, the COPY's rows/s.
    pub(crate) backfill: (usize, f64, f64),
    pub(crate) streaming: streaming::Figures,
    /// Rows/s of the initial load: Weir (export), the COPY pipe, the subscription.
    pub(crate) initial_load: (f64, f64, f64),
}

/// The summary table: headline figures and ratios of this run, each from its section.
pub(crate) fn summary_table(out: &mut String, h: &Headlines) -> anyhow::Result<()> {
    let s = &h.streaming;
    let r = |weir: f64, other: f64| format!("{:.2}", weir / other);
    writeln!(
        out,
        "\n## Summary\n\n\
         Headline figures of the sections below, all from this run. *Limit*: what this machine's PostgreSQL does \
         for the same rows without Weir (pg_recvlogical's decoding of the same slot, or one raw binary COPY of the \
         same final rows); *peer*: native logical replication (`CREATE SUBSCRIPTION`) of the same workload. Ratios \
         are Weir over the other: above 1 is faster for rates, slower for latencies and times.\n\n\
         | figure | Weir | limit | peer | Weir / limit | Weir / peer |\n\
         |---|---:|---:|---:|---:|---:|"
    )?;
    for run in &s.latency {
        let (wl, pl) = (&run.weir, &run.peer);
        writeln!(
            out,
            "| streaming latency p50, commit → visible, {:.0} changes/s offered, Rust plugin, flush interval {} ms \
             (ms) | {:.1} | — | {:.1} | — | {} |",
            run.offered_changes_per_s,
            s.flush_ms,
            wl.p50,
            pl.p50,
            r(wl.p50, pl.p50)
        )?;
        writeln!(
            out,
            "| streaming latency p99, the same (ms) | {:.1} | — | {:.1} | — | {} |",
            wl.p99,
            pl.p99,
            r(wl.p99, pl.p99)
        )?;
    }
    writeln!(
        out,
        "| sustained rate: a backlog of {} changes caught up by live `weir run` + Rust plugin, against \
         pg_recvlogical (changes/s) | {:.0} | {:.0} | {:.0} | {} | {} |",
        s.backlog_changes,
        s.rate(s.weir_plugin),
        s.rate(s.recvlogical),
        s.rate(s.peer),
        r(s.rate(s.weir_plugin), s.rate(s.recvlogical)),
        r(s.rate(s.weir_plugin), s.rate(s.peer))
    )?;
    let rows = s.backlog_rows as f64;
    writeln!(
        out,
        "| the same backlog's {} final rows in the target, against one raw binary COPY of them (rows/s) | \
         {:.0} | {:.0} | {:.0} | {} | {} |",
        s.backlog_rows,
        rows / s.weir_plugin.as_secs_f64(),
        rows / s.copy.as_secs_f64(),
        rows / s.peer.as_secs_f64(),
        r(s.copy.as_secs_f64(), s.weir_plugin.as_secs_f64()),
        r(s.peer.as_secs_f64(), s.weir_plugin.as_secs_f64())
    )?;
    writeln!(
        out,
        "| recovery after SIGKILL, restart → first new row visible, median of {} (s) | {:.2} | — | — | — | — |",
        s.kills,
        s.first_visible.as_secs_f64()
    )?;
    writeln!(
        out,
        "| recovery after SIGKILL, restart → every row committed before it visible (s) | {:.2} | — | — | — | — |",
        s.caught_up.as_secs_f64()
    )?;
    writeln!(
        out,
        "| plugin overhead: backlog time with the Rust plugin / with the identity transform | {:.2} | — | — | — | — |",
        s.weir_plugin.as_secs_f64() / s.weir_identity.as_secs_f64()
    )?;
    writeln!(
        out,
        "| plugin overhead: `orders-rust.wasm` time per row / the same Rust native | {} | — | — | — | — |",
        h.plugin_ratio
            .map_or_else(|| "not run".to_owned(), |p| format!("{p:.2}"))
    )?;
    let (parallel, backfill, copy) = h.backfill;
    writeln!(
        out,
        "| backfill of a window, {parallel} partition jobs at once, against raw COPY (rows/s) | {backfill:.0} | \
         {copy:.0} | — | {} | — |",
        r(backfill, copy)
    )?;
    let (weir, copy, sub) = h.initial_load;
    writeln!(
        out,
        "| initial load of a populated table into day partitions, `run --once`, against a binary COPY pipe and a \
         subscription's table sync (rows/s) | {weir:.0} | {copy:.0} | {sub:.0} | {} | {} |",
        r(weir, copy),
        r(weir, sub)
    )?;
    let (weir, copy) = h.end_to_end;
    writeln!(
        out,
        "| JSON lines → stage → partitions, `run --once`, against raw COPY (rows/s) | {weir:.0} | {copy:.0} | — | \
         {} | — |",
        r(weir, copy)
    )?;
    let (run, recv, sub) = h.replication;
    writeln!(
        out,
        "| PostgreSQL slot → stage → partitions, `run --once` on a backlog, identity (changes/s) | {run:.0} | \
         {recv:.0} | {sub:.0} | {} | {} |",
        r(run, recv),
        r(run, sub)
    )?;
    Ok(())
}

/// How long each section of a full run took, in order (also printed as each ends).
pub(crate) struct SectionTimes {
    last: Instant,
    times: Vec<(&'static str, Duration)>,
}

impl Default for SectionTimes {
    fn default() -> SectionTimes {
        SectionTimes {
            last: Instant::now(),
            times: Vec::new(),
        }
    }
}

impl SectionTimes {
    pub(crate) fn done(&mut self, section: &'static str) {
        let took = self.last.elapsed();
        self.last = Instant::now();
        eprintln!("weir-bench: {section} took {:.1} s", took.as_secs_f64());
        self.times.push((section, took));
    }
}

/// The run's wall time, by section, and how busy the machine was when it began.
pub(crate) fn wall_time(
    out: &mut String,
    elapsed: Duration,
    load: &str,
    sections: &SectionTimes,
) -> anyhow::Result<()> {
    // `scripts/bench` passes its start (seconds since the epoch), before its builds.
    let script = std::env::var("WEIR_BENCH_STARTED")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|t| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            Some(now - t)
        });
    let total = script.map_or_else(String::new, |t| {
        format!(
            "`scripts/bench` took {t:.0} s ({:.0} s for `scripts/install-deps`, `scripts/build-plugins` and \
             `cargo build`, all already up to date or not, then ",
            t - elapsed.as_secs_f64()
        )
    });
    let close = if script.is_some() { ")" } else { "" };
    writeln!(
        out,
        "\nWall time: {total}{:.0} s for the benchmarks themselves, until this report was written{close}. The \
         1-minute load average when the run began was {load} (other processes share the machine; each section \
         gives it at its own start too).",
        elapsed.as_secs_f64()
    )?;
    let by_section = sections
        .times
        .iter()
        .map(|(name, took)| format!("{name} {:.0} s", took.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ");
    writeln!(out, "By section, in the order run: {by_section}.")?;
    Ok(())
}

pub(crate) fn header(out: &mut String, command: &str) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| Some(l.split(':').nth(1)?.trim().to_owned()))
        })
        .unwrap_or_default();
    writeln!(
        out,
        "\nEvery figure in this file comes from one run of:\n\n```\n{command}\n```\n\n\
         (`scripts/bench` with no arguments runs these defaults.) A section run alone (`scripts/bench --only \
         SECTION`) replaces its text here and ends with the command and date that produced it instead; the summary \
         above is rewritten by a full run only.\n"
    )?;
    // Set for the build (`scripts/bench` builds in the same environment): RocksDB's C++
    // came prebuilt rather than from this build's own `librocksdb-sys` compile.
    let rocksdb = std::env::var("ROCKSDB_LIB_DIR").map_or_else(
        |_| String::new(),
        |dir| {
            format!(
                " RocksDB's C++ library was linked prebuilt from `ROCKSDB_LIB_DIR={dir}` (static) rather than \
                 compiled by this build."
            )
        },
    );
    writeln!(
        out,
        "Machine: {cores} cores ({cpu}), {:.1} GiB memory. Release build; Rust allocations through jemalloc, the `weir` binary's allocator, in `weir-bench` too (the sections that run the engine in its process or a child of it).{rocksdb}",
        mem_kib as f64 / 1_048_576.0
    )?;
    Ok(())
}

pub(crate) async fn pg_settings(out: &mut String, pg: &LocalPg) -> anyhow::Result<()> {
    let (client, connection) =
        tokio_postgres::connect(&pg.dsn("postgres"), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let mut settings = Vec::new();
    for name in [
        "shared_buffers",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_level",
    ] {
        let v: String = client.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        settings.push(format!("{name}={v}"));
    }
    writeln!(
        out,
        "PostgreSQL {version}, a throwaway local cluster ({}).",
        settings.join(", ")
    )?;
    Ok(())
}
