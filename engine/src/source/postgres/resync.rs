//! `weir resync`: a signal written into the source's WAL, so that the run streaming it
//! reads one table again, in order with the stream (see
//! `PostgresSource::resync_signal`). Nothing else tells a running `weir run` anything:
//! the signal is durable where the feed is, and a run that is not running reads it
//! when it next starts.

use super::error::PgSourceError;
use super::replication::ReplicationError;
use super::setup::connect;
use super::snapshot::{RESYNC_PREFIX, ResyncSignal};
use crate::config::{Dsn, TableName};
use crate::pgerror::PgError;

/// Checks `filter` against `table` on the source (`write_dsn`: where the snapshot
/// reads and the signal is written) and writes the resync signal; returns its LSN.
pub async fn request_resync(
    write_dsn: &Dsn,
    slot: &str,
    table: &TableName,
    filter: Option<&str>,
) -> Result<u64, PgSourceError> {
    let client = connect(write_dsn).await?;
    let found: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table.quoted()])
        .await
        .map_err(|source| PgSourceError::Query {
            what: "look up the table to resync",
            source: PgError(source),
        })?
        .get(0);
    if !found {
        return Err(PgSourceError::SourceTable {
            table: table.to_string(),
            problem: "the source has no such table".into(),
        });
    }
    if let Some(filter) = filter {
        if filter.trim().is_empty() {
            return Err(PgSourceError::ResyncFilter {
                table: table.to_string(),
                problem: "it is empty".into(),
                source: None,
            });
        }
        // Prepared, not run: the clause is parsed and planned as the resync's reads
        // will use it, and a second statement after it is refused.
        client
            .prepare(&format!(
                "SELECT 1 FROM (SELECT * FROM {} WHERE {filter}) AS weir_resync",
                table.quoted()
            ))
            .await
            .map_err(|source| PgSourceError::ResyncFilter {
                table: table.to_string(),
                problem: "PostgreSQL refuses it".into(),
                source: Some(PgError(source)),
            })?;
        // Run once over the rows it selects now: a condition that fails on them (a
        // division by zero) would fail every read of the resync, and so every run.
        client
            .query_one(
                &format!(
                    "SELECT count(*) FROM (SELECT * FROM {} WHERE {filter}) AS weir_resync",
                    table.quoted()
                ),
                &[],
            )
            .await
            .map_err(|source| PgSourceError::ResyncFilter {
                table: table.to_string(),
                problem: "PostgreSQL fails it on the table's rows".into(),
                source: Some(PgError(source)),
            })?;
    }
    let signal = ResyncSignal {
        table: table.to_string(),
        filter: filter.map(str::to_owned),
        slot: Some(slot.to_owned()),
    };
    let content = serde_json::to_string(&signal).map_err(|_| PgSourceError::BadChange {
        table: table.to_string(),
        reason: "cannot encode the resync signal".into(),
    })?;
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(|source| PgSourceError::Query {
            what: "prepare the resync signal",
            source: PgError(source),
        })?;
    let lsn: String = client
        .query_one(
            "SELECT pg_logical_emit_message(true, $1, $2)::text",
            &[&RESYNC_PREFIX, &content],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "write the resync signal",
            source: PgError(source),
        })?
        .get(0);
    crate::pg::lsn::parse_lsn(&lsn).ok_or_else(|| PgSourceError::BadChange {
        table: table.to_string(),
        reason: format!("the server returned `{lsn}` as the signal's position"),
    })
}

/// The prefix of the logical message `run --once` emits to find the end of what is
/// available now.
const DRAIN_PREFIX: &str = "weir.drain";

/// Writes a transactional logical message into the source's WAL and returns its LSN:
/// everything committed before it is "available now" for `run --once`.
pub(super) async fn emit_drain_message(dsn: &Dsn) -> Result<u64, PgSourceError> {
    let client = connect(dsn).await?;
    // Flushed at once, so the walsender sends it without waiting for the WAL writer.
    client
        .batch_execute("SET synchronous_commit = on")
        .await
        .map_err(|source| PgSourceError::Query {
            what: "prepare the drain mark",
            source: PgError(source),
        })?;
    let row = client
        .query_one(
            "SELECT (pg_logical_emit_message(true, $1, '')::text)",
            &[&DRAIN_PREFIX],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "emit the drain mark",
            source: PgError(source),
        })?;
    let lsn: String = row.get(0);
    crate::pg::lsn::parse_lsn(&lsn).ok_or(PgSourceError::Replication(ReplicationError::Closed))
}

/// The server Weir writes to in the source when it is not the source itself (`None`):
/// the primary of a standby in recovery, which decodes (PostgreSQL 16 and later) while
/// the primary takes the writes (`primary`, required then). A standby promoted since
/// is written directly.
pub async fn write_server(
    catalog: &tokio_postgres::Client,
    primary: Option<&Dsn>,
) -> Result<Option<Dsn>, PgSourceError> {
    let row = catalog
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int, current_setting('server_version')",
            &[],
        )
        .await
        .map_err(super::error::query_failed("read whether the source is a standby"))?;
    let (in_recovery, version_num, version): (bool, i32, String) =
        (row.get(0), row.get(1), row.get(2));
    if !in_recovery {
        return Ok(None);
    }
    if version_num < 160_000 {
        return Err(PgSourceError::StandbyTooOld { version });
    }
    primary
        .cloned()
        .map(Some)
        .ok_or(PgSourceError::StandbyWithoutPrimary)
}

/// The source database's identity, the same on its primary and its standbys:
/// `postgres:<system identifier>/<database>`.
pub async fn database_identity(client: &tokio_postgres::Client) -> Result<String, PgSourceError> {
    let row = client
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await
        .map_err(super::error::query_failed(
            "read the source's system identifier",
        ))?;
    Ok(format!(
        "postgres:{}/{}",
        row.get::<_, String>(0),
        row.get::<_, String>(1)
    ))
}

/// The source's WAL position now: its insert position, or on a standby in recovery
/// what it has replayed.
pub async fn wal_position(client: &tokio_postgres::Client) -> Result<u64, PgSourceError> {
    let lsn: String = client
        .query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text",
            &[],
        )
        .await
        .map_err(super::error::query_failed("read the WAL position"))?
        .get(0);
    Ok(crate::pg::lsn::parse_lsn(&lsn).unwrap_or(0))
}
