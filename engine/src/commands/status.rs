//! `weir status`: the stage position, dirty partitions and the last writes, as text
//! or JSON.

use std::io::Write as _;
use std::path::Path;

use weir::config::Config;
use weir::pipeline;

/// Dirty partitions (and, past them, tables) `status` lists one by one.
const DIRTY_LISTED: usize = 50;

/// Runs `weir status`.
pub(crate) async fn run(config_path: &Path, json: bool) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let status = pipeline::status(&config, &config.target_dsn()?, 20).await?;
    let mut out = std::io::stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &status)?;
        writeln!(out)?;
    } else {
        print_status(&mut out, &status)?;
    }
    Ok(())
}

fn print_status(out: &mut impl std::io::Write, s: &pipeline::Status) -> std::io::Result<()> {
    writeln!(out, "stage:      {} (id {})", s.stage, s.stage_id)?;
    writeln!(
        out,
        "source:     {}",
        s.source.as_deref().unwrap_or("(none yet)")
    )?;
    match s.position {
        Some(p) => writeln!(out, "position:   {p}")?,
        None => writeln!(out, "position:   (nothing staged yet)")?,
    }
    writeln!(
        out,
        "stage size: {:.1} MiB",
        s.stage_size_bytes as f64 / 1_048_576.0
    )?;
    for (table, rows) in &s.staged_rows {
        writeln!(out, "staged:     {table}: {rows} rows")?;
    }
    if !s.snapshot.is_empty() && s.snapshot.iter().all(|t| t.state == "done") {
        writeln!(out, "snapshot:   complete")?;
    } else {
        for t in &s.snapshot {
            match &t.filter {
                Some(filter) => {
                    writeln!(out, "snapshot:   {}: {} (where {filter})", t.table, t.state)?
                }
                None => writeln!(out, "snapshot:   {}: {}", t.table, t.state)?,
            }
        }
    }
    let mib = |b: u64| b as f64 / 1_048_576.0;
    writeln!(
        out,
        "memory:     budget {}{}",
        s.memory_budget.explain(),
        s.memory_limit_bytes
            .map(|l| format!(" (memory_limit_mb {})", l >> 20))
            .unwrap_or_default()
    )?;
    match s.max_unwritten_bytes {
        Some(limit) => writeln!(
            out,
            "unwritten:  {:.1} MiB of {:.1} MiB (max_unwritten_mb){}",
            mib(s.unwritten_bytes),
            mib(limit),
            if s.intake_paused {
                ": intake paused until the target catches up"
            } else {
                ""
            }
        )?,
        None => writeln!(out, "unwritten:  {:.1} MiB", mib(s.unwritten_bytes))?,
    }
    if let (Some(wal_status), Some(lag)) = (&s.slot_wal_status, s.slot_lag_bytes) {
        writeln!(out, "slot:       wal_status {wal_status}, lag {lag} bytes")?;
        match (s.slot_failover, s.synchronized_standby_slots.as_deref()) {
            (Some(true), Some("") | None) => writeln!(
                out,
                "failover:   a failover slot; synchronized_standby_slots is empty, so a standby's copy may be behind what Weir was sent"
            )?,
            (Some(true), Some(standbys)) => writeln!(
                out,
                "failover:   a failover slot; decoding waits for the standby slots {standbys}"
            )?,
            (Some(false), _) => writeln!(
                out,
                "failover:   not a failover slot: a promoted standby will not have it (weir init says how to change it)"
            )?,
            (None, _) => writeln!(
                out,
                "failover:   none (failover slots need PostgreSQL 17 or later)"
            )?,
        }
    }
    for (i, h) in s.slot_hosts.iter().enumerate() {
        let label = if i == 0 { "hosts:" } else { "" };
        writeln!(out, "{label:<12}{}  {}", h.host, h.state)?;
    }
    if let Some(e) = &s.source_error {
        writeln!(out, "source:     unavailable: {e}")?;
    }
    writeln!(out, "dirty:      {} partitions", s.dirty_partitions.len())?;
    if s.dirty_partitions.len() > DIRTY_LISTED {
        // Too many to list: how many each table has, most first, then the oldest.
        let mut by_table: std::collections::BTreeMap<&str, usize> = Default::default();
        for d in &s.dirty_partitions {
            *by_table.entry(d.table.as_str()).or_default() += 1;
        }
        let mut by_table: Vec<(&str, usize)> = by_table.into_iter().collect();
        by_table.sort_by_key(|(t, n)| (std::cmp::Reverse(*n), *t));
        for (table, n) in by_table.iter().take(DIRTY_LISTED) {
            writeln!(out, "  {table}: {n} partitions")?;
        }
        if by_table.len() > DIRTY_LISTED {
            writeln!(out, "  … and {} more tables", by_table.len() - DIRTY_LISTED)?;
        }
        writeln!(out, "  oldest:")?;
    }
    let mut oldest: Vec<_> = s.dirty_partitions.iter().collect();
    oldest.sort_by_key(|d| d.generation);
    for d in oldest.into_iter().take(DIRTY_LISTED) {
        writeln!(
            out,
            "  {} {} (generation {})",
            d.table, d.partition, d.generation
        )?;
    }
    if s.pending_dead_letters > 0 {
        writeln!(
            out,
            "dead letters waiting to be written: {}",
            s.pending_dead_letters
        )?;
    }
    if !s.failed_partitions.is_empty() {
        writeln!(
            out,
            "failed:     {} partitions (retried when they change)",
            s.failed_partitions.len()
        )?;
        for f in s.failed_partitions.iter().take(50) {
            writeln!(out, "  {} {}: {}", f.table, f.partition, f.error)?;
        }
    }
    if !s.stale_partitions.is_empty() {
        writeln!(
            out,
            "stale:      {} partitions written by another plugin or config (weir backfill --stale rebuilds them)",
            s.stale_partitions.len()
        )?;
        for p in s.stale_partitions.iter().take(50) {
            writeln!(out, "  {} {}", p.table, p.partition)?;
        }
    }
    if let Some(e) = &s.target_error {
        writeln!(out, "target:     unavailable: {e}")?;
    }
    for c in &s.claimed_by_others {
        writeln!(
            out,
            "taken over: {} is written by stage {} ({} of {}) since {}: this stage writes it no more",
            c.table, c.stage_id, c.feed, c.source, c.claimed_at
        )?;
    }
    writeln!(out, "last writes:")?;
    for w in &s.last_writes {
        writeln!(
            out,
            "  {} {:<14} rows={:<7} generation={:<6} position={:<10} {} at {}",
            w.target_table,
            w.partition,
            w.row_count,
            w.stage_generation,
            w.source_position,
            if w.write_mode == "merge" {
                "merged (no checksum)".to_owned()
            } else {
                format!("checksum={}", w.checksum)
            },
            w.written_at
        )?;
    }
    Ok(())
}
