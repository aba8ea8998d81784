//! The demo's seven steps, narrated to `out`: the cluster, `weir init`, a live
//! `weir run` under the workload (SIGKILLed and restarted), the catch-up check, a
//! restatement, `weir verify`, and what to look at.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir::localpg::{LocalPg, LocalPgOptions};

use super::checks::{catch_up, check_target, restatement, wait_slot_released};
use super::engine::Weir;
use super::estate::{Db, pg_config};
use super::output::{Progress, heading, indent};
use super::workload::{AbortOnDrop, OrdersWorkload, write_orders};
use super::{
    DemoError, DemoOptions, PROGRESS_INTERVAL_MS, SEED_ORDERS, SOURCE_DB, Session, TARGET_DB,
    TARGET_TABLE, TRANSACTION_INTERVAL_MS, WINDOW,
};

/// Runs the steps; what stays up for `--keep` is returned.
pub(super) async fn phases(
    out: &mut impl Write,
    options: &DemoOptions,
    plugin: &Path,
) -> Result<Session, DemoError> {
    let started = Instant::now();
    heading(out, 1, "A throwaway PostgreSQL")?;
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
    writeln!(
        out,
        "  PostgreSQL listening on {}:{}, wal_level=logical, data in a temporary folder",
        pg.host(),
        pg.port()
    )?;
    let source_dsn = pg.create_database(SOURCE_DB).await?;
    let target_dsn = pg.create_database(TARGET_DB).await?;
    let mut workload = OrdersWorkload::new(7);
    pg.execute(
        SOURCE_DB,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, \
         amount numeric(12,2), status text)",
    )
    .await?;
    pg.execute(SOURCE_DB, &workload.seed_sql(SEED_ORDERS))
        .await?;
    writeln!(
        out,
        "  source database {SOURCE_DB}: table orders (id bigint primary key, customer, order_date date, amount numeric(12,2), status)"
    )?;
    writeln!(
        out,
        "                               {SEED_ORDERS} orders and one refund with a negative amount"
    )?;
    writeln!(out, "  target database {TARGET_DB}: empty")?;

    heading(out, 2, "Config and `weir init`")?;
    let dir = tempfile::Builder::new().prefix("weir-demo-").tempdir()?;
    let plugin_toml = toml::Value::String(plugin.display().to_string()).to_string();
    let config_text = pg_config(&plugin_toml);
    std::fs::write(dir.path().join("weir.toml"), &config_text)?;
    writeln!(out, "  folder {}", dir.path().display())?;
    writeln!(out, "  plugin {}", plugin.display())?;
    writeln!(out, "  weir.toml:")?;
    write!(out, "{}", indent(&config_text, 4))?;
    let weir = Weir {
        exe: std::env::current_exe()?,
        dir: dir.path().to_owned(),
        source_dsn: source_dsn.clone(),
        target_dsn: target_dsn.clone(),
    };
    let init = weir.output(&["init"]).await?;
    writeln!(out, "  $ weir --config weir.toml init")?;
    write!(out, "{}", indent(&init, 4))?;

    let source = Db::connect(&source_dsn, SOURCE_DB).await?;
    let target = Db::connect(&target_dsn, TARGET_DB).await?;
    // The catch-up mark must reach the stream at once, not when the WAL writer wakes.
    source.batch("SET synchronous_commit = on").await?;

    heading(
        out,
        3,
        "A live `weir run` while the workload writes; SIGKILLed and restarted part way",
    )?;
    let mut live = weir.spawn_live()?;
    writeln!(
        out,
        "  $ weir --config weir.toml run    # weir run is live (pid {})",
        live.pid()
    )?;
    writeln!(
        out,
        "  workload: a transaction of 1-4 changes every {TRANSACTION_INTERVAL_MS} ms for {} s \
         (inserts, updates, date corrections, deletes)",
        options.workload_seconds
    )?;
    let workload_for = Duration::from_secs(options.workload_seconds);
    let changes = Arc::new(AtomicU64::new(0));
    let writer = AbortOnDrop::new(tokio::spawn(write_orders(
        source_dsn.clone(),
        workload,
        workload_for,
        Arc::clone(&changes),
    )));
    let kill_at = workload_for * 2 / 5;
    let restart_at = workload_for * 3 / 5;
    let live_started = Instant::now();
    let mut killed = false;
    let mut down = false;
    writeln!(out, "{}", Progress::header())?;
    let mut tick = tokio::time::interval(Duration::from_millis(PROGRESS_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    while !writer.is_finished() {
        tick.tick().await;
        let elapsed = live_started.elapsed();
        if !down {
            live.check_alive()?;
        }
        let progress = Progress::read(&weir, &source, &target, &changes, elapsed).await?;
        writeln!(out, "{}", progress.line(down))?;
        if !killed && elapsed >= kill_at {
            live.kill();
            writeln!(
                out,
                "  >> SIGKILL weir run (pid {}) while the workload writes: no shutdown, no flush",
                live.pid()
            )?;
            killed = true;
            down = true;
        } else if down && elapsed >= restart_at {
            wait_slot_released(&source).await?;
            live = weir.spawn_live()?;
            writeln!(
                out,
                "  >> restarted: $ weir --config weir.toml run    # weir run is live (pid {})",
                live.pid()
            )?;
            down = false;
        }
    }
    let writer = writer.join().await??;
    if down {
        // A workload shorter than the progress interval can end before the restart.
        wait_slot_released(&source).await?;
        live = weir.spawn_live()?;
        writeln!(out, "  >> restarted (pid {})", live.pid())?;
    }
    let written = changes.load(Ordering::Relaxed);
    writeln!(
        out,
        "  the workload stopped after {written} changes in {} transactions",
        writer.transactions
    )?;

    heading(
        out,
        4,
        "Caught up after the kill: nothing lost, nothing duplicated",
    )?;
    let waited = catch_up(&weir, &source, &mut live).await?;
    writeln!(
        out,
        "  weir run has staged past the source's last commit and written every dirty partition ({:.1} s)",
        waited.as_secs_f64()
    )?;
    check_target(out, &source, &target).await?;

    heading(
        out,
        5,
        "A restatement: an order's date is corrected at the source",
    )?;
    restatement(out, &weir, &source, &target, &mut live).await?;

    heading(
        out,
        6,
        "weir verify: every partition computed twice and compared with the target",
    )?;
    let args = [
        "verify",
        "--table",
        "public.orders",
        "--from",
        WINDOW.0,
        "--to",
        WINDOW.1,
    ];
    let verify = weir.output(&args).await?;
    writeln!(out, "  $ weir --config weir.toml {}", args.join(" "))?;
    write!(out, "{}", indent(&verify, 4))?;
    if !verify.contains("verify passed") {
        return Err(DemoError::Check(format!(
            "weir verify did not report a pass:\n{verify}"
        )));
    }
    live.check_alive()?;

    heading(out, 7, "What to look at")?;
    let dead = target
        .client
        .query(
            "SELECT partition, row_key::text, reason FROM weir.dead_letter ORDER BY id",
            &[],
        )
        .await
        .map_err(target.err())?;
    writeln!(
        out,
        "  weir.dead_letter holds {} rejected row(s):",
        dead.len()
    )?;
    for r in &dead {
        let (partition, key, reason): (Option<String>, Option<String>, String) =
            (r.get(0), r.get(1), r.get(2));
        writeln!(
            out,
            "    partition {}, key {}: {reason}",
            partition.unwrap_or_default(),
            key.unwrap_or_default()
        )?;
    }
    writeln!(
        out,
        "  In a shell (with --keep, while the demo runs; the local cluster has no password):\n\
         \x20   cd {dir}\n\
         \x20   export WEIR_SOURCE_DSN={source_dsn} WEIR_TARGET_DSN={target_dsn}\n\
         \x20   weir --config weir.toml status        # position, slot lag, dirty partitions, last writes\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT partition, stage_generation, source_position, row_count, checksum FROM weir.partitions ORDER BY 1'\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT partition, reason, input FROM weir.dead_letter'\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT order_date, count(*), sum(amount_eur) FROM {TARGET_TABLE} GROUP BY 1 ORDER BY 1'\n\
         \x20   psql \"$WEIR_SOURCE_DSN\" -c \"INSERT INTO orders VALUES (100000, 'c1', '2026-03-07', 9.99, 'new')\"   # then watch the target",
        dir = dir.path().display()
    )?;
    if !options.keep {
        writeln!(
            out,
            "  (`weir demo --keep` keeps the cluster and the live `weir run` up until Ctrl-C)"
        )?;
    }
    writeln!(
        out,
        "\nAll checks passed in {:.1} s.",
        started.elapsed().as_secs_f64()
    )?;
    Ok(Session {
        _live: live,
        _dir: dir,
        _pg: pg,
    })
}
