//! `weir resync`: asks the run streaming the source to read one table (or the rows a
//! condition selects) again, and says what happens next.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use weir::config::{Config, SourceConfig};
use weir::source::postgres;

/// Runs `weir resync --table T [--where CONDITION]`.
pub(crate) async fn run(
    config_path: &Path,
    table: &str,
    filter: Option<&str>,
) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    if !matches!(config.source, SourceConfig::Postgres { .. }) {
        anyhow::bail!(
            "resync reads a table again from a PostgreSQL source; this config's source is JSON lines, which cannot be asked for a table's rows: feed the file again instead"
        );
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
        .with_context(|| {
            format!(
                "no [[table]] of {} reads or writes `{table}`: name a configured table by its source or target name",
                config_path.display()
            )
        })?;
    let dsn = config
        .source_write_dsn()?
        .context("the source's DSN is not set")?;
    let lsn = postgres::request_resync(&dsn, &t.source, filter).await?;
    let mut out = std::io::stdout().lock();
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
    Ok(())
}
