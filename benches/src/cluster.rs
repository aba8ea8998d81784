//! The throwaway PostgreSQL cluster's clients and slots: a client of a database, the
//! environment variables of the DSNs of Weir's configs, waiting for a slot's walsender
//! to end, and the decode limit (`pg_recvlogical` on a slot).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::localpg::LocalPg;

/// The environment variables of the pipeline child's DSNs (and of the streaming
/// section's `weir run`s).
pub(crate) const SOURCE_DSN_ENV: &str = "WEIR_BENCH_SOURCE_DSN";
pub(crate) const TARGET_DSN_ENV: &str = "WEIR_BENCH_TARGET_DSN";

/// A client of `dsn`, its connection driven by a task.
pub(crate) async fn connect(dsn: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .context("connect to the local PostgreSQL")?;
    tokio::spawn(connection);
    Ok(client)
}

/// Waits until no walsender serves `slot` any more and its process has had time to
/// end, so its CPU time is counted with the postmaster's ended children.
pub(crate) async fn slot_released(
    client: &tokio_postgres::Client,
    slot: &str,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let active: bool = client
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .get(0);
        if !active {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "slot {slot} stayed active"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// The decode limit: `pg_recvlogical` reads `slot` of `db` (pgoutput, `publication`)
/// to /dev/null up to `end_lsn`; its time from spawning it to its exit. Checked: it
/// succeeded and the slot's confirmed position reached `end_lsn`; returns once no
/// walsender serves the slot any more. `source` is a client of `db`.
pub(crate) async fn recvlogical(
    pg: &LocalPg,
    source: &tokio_postgres::Client,
    db: &str,
    slot: &str,
    publication: &str,
    end_lsn: &str,
) -> anyhow::Result<Duration> {
    let port = pg.port().to_string();
    let started = Instant::now();
    let output = tokio::process::Command::new(pg.bin_dir().join("pg_recvlogical"))
        .args(["-h", pg.host(), "-p", &port, "-U", "postgres"])
        .args(["-d", db, "-S", slot, "--start", "--no-loop"])
        .args([
            "-f",
            "/dev/null",
            "--plugin=pgoutput",
            "-o",
            "proto_version=1",
        ])
        .args(["-o", &format!("publication_names={publication}")])
        .arg(format!("--endpos={end_lsn}"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .context("run pg_recvlogical")?;
    let elapsed = started.elapsed();
    anyhow::ensure!(
        output.status.success(),
        "pg_recvlogical failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    slot_released(source, slot).await?;
    let reached: bool = source
        .query_one(
            "SELECT confirmed_flush_lsn >= $1::text::pg_lsn FROM pg_replication_slots WHERE slot_name = $2",
            &[&end_lsn, &slot],
        )
        .await?
        .get(0);
    anyhow::ensure!(reached, "pg_recvlogical stopped before the workload's end");
    Ok(elapsed)
}

/// The release `weir` binary beside this one, which the sections that run the engine
/// as a process use.
pub(crate) fn weir_binary() -> anyhow::Result<std::path::PathBuf> {
    let weir = std::env::current_exe()?.with_file_name("weir");
    anyhow::ensure!(
        weir.exists(),
        "{} is missing: build it with `cargo build --release -p weir --bin weir` (scripts/bench does)",
        weir.display()
    );
    Ok(weir)
}
