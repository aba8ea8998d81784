//! `weir resync`: asks the run streaming the source to read one table (or the rows a
//! condition selects) again, and says what happens next.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::config::{Config, SourceConfig};
use weir::pipeline;
use weir::source::postgres;

/// How often `--wait` reads the stage, and after how long without the stage's position
/// moving it says why it may be waiting.
const WAIT_POLL: Duration = Duration::from_secs(1);
const WAIT_HINT_AFTER: Duration = Duration::from_secs(30);

/// Runs `weir resync --table T [--where CONDITION] [--wait]`.
pub(crate) async fn run(
    config_path: &Path,
    table: &str,
    filter: Option<&str>,
    wait: bool,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let SourceConfig::Postgres { slot, .. } = &config.source else {
        return Err(super::usage(
            "resync reads a table again from a PostgreSQL source; this config's source is JSON lines, which cannot be asked for a table's rows: feed the file again instead".into(),
        ));
    };
    if !weir::stage::stage_exists(&config.stage_path)? {
        return Err(super::usage(format!(
            "there is no stage at {}: run `weir init` first (a resync is read by this config's `weir run`, through its slot)",
            config.stage_path.display()
        )));
    }
    let t = config
        .tables
        .iter()
        .find(|t| {
            t.source.to_string() == table
                || t.source.name == table
                || t.target.to_string() == table
                || t.target.name == table
        })
        .ok_or_else(|| {
            super::usage(format!(
                "no [[table]] of {} reads or writes `{table}`: name a configured table by its source or target name",
                config_path.display()
            ))
        })?;
    let dsn = config
        .source_write_dsn()?
        .context("the source's DSN is not set")?;
    let lsn = postgres::request_resync(&dsn, slot, &t.source, filter).await?;
    let mut out = std::io::stdout();
    writeln!(
        out,
        "resync of {} asked for: signal at {} in the source's WAL",
        t.source,
        postgres::format_lsn(lsn)
    )?;
    writeln!(
        out,
        "the running `weir run` reads the table again when its stream reaches the signal (if none runs, the next one does); `weir status` shows it as resyncing until then"
    )?;
    match filter {
        None => writeln!(
            out,
            "the whole table is read again: its staged rows are replaced, and its target partitions keep their rows until it is read whole, then are rewritten"
        )?,
        Some(_) => writeln!(
            out,
            "the rows the condition selects are read again and their partitions rewritten; a row deleted at the source but still staged goes only with a resync of the whole table"
        )?,
    }
    if wait {
        wait_done(&config, &t.source.to_string(), &t.target, lsn).await?;
    }
    Ok(())
}

/// Waits until the stage is past the signal, the table's snapshot is done again and
/// every partition of it that was dirty then is written since (read from the stage,
/// read-only, beside the run, and from lineage): under a steady workload some of its
/// partitions are always dirty, with changes newer than the resync.
async fn wait_done(
    config: &Config,
    table: &str,
    target: &weir::config::TableName,
    signal: u64,
) -> anyhow::Result<()> {
    let dsn = config.target_dsn()?;
    let mut moved = Instant::now();
    let mut last_position = None;
    let mut hinted = false;
    // Once read again: the partitions dirty then, with their generation.
    let mut left: Option<Vec<(String, u64)>> = None;
    let mut failed_reads = 0;
    loop {
        // Each read opens the stage read-only beside the live run, which may delete an
        // SST file that open was about to read (a compaction): read again.
        let status = match pipeline::status(config, &dsn, 0).await {
            Ok(status) => {
                failed_reads = 0;
                status
            }
            Err(error) if failed_reads < 5 => {
                failed_reads += 1;
                tracing::debug!(error = %error, "reading the stage beside the run failed; reading again");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        let past = status.position.is_some_and(|p| p >= signal);
        let state = status
            .snapshot
            .iter()
            .find(|t| t.table == table)
            .map_or("done", |t| t.state);
        let dirty = status
            .dirty_partitions
            .iter()
            .filter(|d| d.table == table)
            .count();
        if past && state == "done" {
            let dirty_now: Vec<(String, u64)> = status
                .dirty_partitions
                .iter()
                .filter(|d| d.table == table)
                .map(|d| (d.partition.clone(), d.generation))
                .collect();
            let left = left.get_or_insert_with(|| dirty_now.clone());
            if !left.is_empty() {
                // Written since: no longer dirty, or lineage at the generation it had.
                let client = weir::target::connect(&dsn).await?;
                let lineage = weir::target::table_lineage(&client, target).await?;
                left.retain(|(partition, generation)| {
                    dirty_now.iter().any(|(p, _)| p == partition)
                        && lineage
                            .get(partition)
                            .is_none_or(|l| (l.stage_generation as u64) < *generation)
                });
            }
            if left.is_empty() {
                println!(
                    "resync of {table} done: the table is read again and its partitions are written"
                );
                return Ok(());
            }
        }
        if status.position != last_position {
            last_position = status.position;
            moved = Instant::now();
        } else if !hinted && moved.elapsed() >= WAIT_HINT_AFTER {
            hinted = true;
            eprintln!(
                "the stage's position has not moved for {} s: is `weir run` running? (the resync waits in the slot until one does; Ctrl-C stops waiting, not the resync)",
                WAIT_HINT_AFTER.as_secs()
            );
        }
        tracing::debug!(
            table,
            state = if past { state } else { "signal not read yet" },
            dirty_partitions = dirty,
            "waiting for the resync"
        );
        tokio::time::sleep(WAIT_POLL).await;
    }
}
