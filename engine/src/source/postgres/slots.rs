//! Replication slots beyond `init`: their status for `weir status` (on each host of a
//! DSN that lists several), and what a slot's creation waits for.

use std::sync::Arc;

use super::error::PgSourceError;
use super::setup::connect;
use super::stage_port::StagePort;
use crate::config::Dsn;
use crate::feed::Position;
use crate::pg::lsn::format_lsn;
use crate::pgerror::PgError;

/// A slot as `weir status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotStatus {
    /// `pg_replication_slots.wal_status`.
    pub wal_status: String,
    /// The WAL it holds back, in bytes (on a standby: up to what it has replayed).
    pub lag_bytes: i64,
    /// Its `failover` flag (`None`: a server without failover slots).
    pub failover: Option<bool>,
    /// The server's `synchronized_standby_slots` (empty: none; `None`: before 17).
    pub synchronized_standby_slots: Option<String>,
}

/// A slot's `wal_status`, how many bytes of WAL it holds back, and whether it is a
/// failover slot (`None`: no such slot).
pub async fn slot_status(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<SlotStatus>, PgSourceError> {
    // One query on every version: `failover` (a column since 17) through the row's JSON,
    // and the setting with missing_ok (NULL before 17).
    let row = client
        .query_opt(
            "SELECT coalesce(s.wal_status, 'unknown'), \
             coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
             ELSE pg_current_wal_lsn() END, s.confirmed_flush_lsn), 0)::bigint, \
             (to_jsonb(s) ->> 'failover')::bool, \
             current_setting('synchronized_standby_slots', true) \
             FROM pg_replication_slots s WHERE s.slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the slot's status",
            source: PgError(source),
        })?;
    Ok(row.map(|row| SlotStatus {
        wal_status: row.get(0),
        lag_bytes: row.get(1),
        failover: row.get(2),
        synchronized_standby_slots: row.get(3),
    }))
}

/// What one host of a source DSN listing several holds of the slot (`weir status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostSlot {
    /// The host, as `name:port`.
    pub host: String,
    /// In words: a primary or a standby, and its copy of the slot (for a standby:
    /// synchronized and usable after a promotion, still being synchronized, or none),
    /// or why it could not be read.
    pub state: String,
}

/// How long `weir status` waits for each host it probes.
const HOST_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// For a source DSN that lists several hosts (a primary and its standbys, for
/// failover): what each holds of `slot`. Empty for a DSN of one host.
pub async fn slot_on_each_host(dsn: &Dsn, slot: &str) -> Vec<HostSlot> {
    let Ok(settings) = crate::pgconn::PgSettings::from_dsn(dsn) else {
        return Vec::new();
    };
    let hosts = settings.each_host();
    if hosts.len() <= 1 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(hosts.len());
    for (host, one) in hosts {
        let state = match host_slot(&one, slot).await {
            Ok(state) => state,
            Err(reason) => format!("not read: {reason}"),
        };
        out.push(HostSlot { host, state });
    }
    out
}

/// [`slot_on_each_host`] for one host.
async fn host_slot(settings: &crate::pgconn::PgSettings, slot: &str) -> Result<String, String> {
    let connect = crate::pgconn::connect_with(settings);
    let (client, connection) = tokio::time::timeout(HOST_PROBE_TIMEOUT, connect)
        .await
        .map_err(|_| format!("no answer within {} s", HOST_PROBE_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    // The row as JSON: `synced` is a column from PostgreSQL 17 only.
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), \
             (SELECT to_jsonb(s) FROM pg_replication_slots s WHERE s.slot_name = $1)::text",
            &[&slot],
        )
        .await
        .map_err(|e| e.to_string());
    drop(client);
    driver.abort();
    let row = row?;
    let standby: bool = row.get(0);
    let image: Option<String> = row.get(1);
    let image: Option<serde_json::Value> = image.and_then(|t| serde_json::from_str(&t).ok());
    let role = if standby { "standby" } else { "primary" };
    let Some(image) = image else {
        return Ok(format!("{role}: no copy of the slot"));
    };
    let field = |name: &str| image.get(name).cloned().unwrap_or_default();
    let confirmed = field("confirmed_flush_lsn");
    let confirmed = confirmed.as_str().unwrap_or("none");
    let state = match (
        standby,
        field("synced").as_bool(),
        field("temporary").as_bool(),
    ) {
        (false, _, _) => format!("primary: holds the slot, confirmed up to {confirmed}"),
        (true, Some(true), Some(false)) => format!(
            "standby: a synchronized copy, usable after a promotion, confirmed up to {confirmed}"
        ),
        (true, Some(true), _) => {
            "standby: a copy still being synchronized (temporary: not usable yet)".to_owned()
        }
        (true, _, _) => {
            format!("standby: a slot of its own, not synchronized, confirmed up to {confirmed}")
        }
    };
    Ok(state)
}

/// Beside a slot's creation, which waits for every transaction running when it began
/// to end: after a few seconds, logs which still run (a prepared transaction never ends
/// by itself), again every half minute, until the returned task is aborted. Names
/// transactions by gid or session, never by what they changed.
pub fn report_slot_waits(dsn: &Dsn) -> tokio::task::JoinHandle<()> {
    let dsn = dsn.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let Ok(client) = connect(&dsn).await else {
            return;
        };
        loop {
            let Ok(rows) = client
                .query(
                    "SELECT format('prepared transaction %L (database %s, since %s)', gid, database, date_trunc('second', prepared)) FROM pg_prepared_xacts \
                     UNION ALL \
                     SELECT format('session %s (database %s, %s, its transaction open for %s)', pid, datname, state, date_trunc('second', now() - xact_start)) \
                     FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
                    &[],
                )
                .await
            else {
                return;
            };
            let waiting: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            if !waiting.is_empty() {
                tracing::warn!(
                    waiting_for = %waiting.join("; "),
                    "creating the replication slot waits for the transactions that were running when it began to end: commit or roll them back (COMMIT PREPARED or ROLLBACK PREPARED for a prepared one, which never ends by itself)"
                );
            }
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        }
    })
}

/// Run once `START_REPLICATION` has succeeded: this connection now holds the slot, so
/// its `confirmed_flush_lsn` is where the stream really starts (the server resumes at
/// the later of that and the position asked for) and nobody else can move it. (Read
/// before the start, it could still move: a dying walsender of a killed engine applies
/// the last acknowledgement it received.) Returns the position the stream starts after.
///
/// A stage with a position holds the slot to it: this stage never lets the slot confirm
/// past its position (`send_status`), so a slot that is ahead was moved by something
/// else and what lies between is lost to this stage; refuse rather than skip it. A
/// stage with nothing staged starts where the slot is (its snapshot covers what came
/// before), recorded first, so the check has a position from the first
/// acknowledgement on.
/// Refuses a primary whose WAL ends before the stage's `position`: a walsender sends
/// only WAL its server has flushed, which a crash keeps, so such a server went back in
/// time (restored from a backup, recovered to an earlier point, or a standby promoted
/// before it received what the stage holds). The stage then holds changes the server
/// no longer has, and the server's new commits below `position` would be passed over
/// as staged. (A standby is not checked: its replay position is behind for a while
/// after each restart.)
async fn refuse_source_behind_stage(
    client: &tokio_postgres::Client,
    position: u64,
) -> Result<(), PgSourceError> {
    let end: Option<String> = client
        .query_one(
            "SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END",
            &[],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the source's WAL position",
            source: PgError(source),
        })?
        .get(0);
    match end.as_deref().and_then(crate::pg::lsn::parse_lsn) {
        Some(end) if end < position => Err(PgSourceError::SourceWentBack {
            end: format_lsn(end),
            position: format_lsn(position),
        }),
        _ => Ok(()),
    }
}

pub(super) async fn hold_slot_to_stage(
    dsn: &Dsn,
    slot: &str,
    stage: &Arc<dyn StagePort>,
    checkpoint: Option<Position>,
) -> Result<u64, PgSourceError> {
    let client = connect(dsn).await?;
    let confirmed: Option<String> = client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the slot's confirmed position",
            source: PgError(source),
        })?
        .and_then(|row| row.get(0));
    if let Some(checkpoint) = checkpoint {
        refuse_source_behind_stage(&client, checkpoint.position).await?;
    }
    let Some(confirmed) = confirmed.as_deref().and_then(crate::pg::lsn::parse_lsn) else {
        return Ok(checkpoint.map_or(0, |c| c.position));
    };
    match checkpoint {
        None => {
            let stage = Arc::clone(stage);
            tokio::task::spawn_blocking(move || stage.advance_position(confirmed)).await??;
            Ok(confirmed)
        }
        Some(checkpoint) if confirmed > checkpoint.position => {
            if stage.position_covers_acknowledgements()? {
                return Err(PgSourceError::SlotAhead {
                    slot: slot.to_owned(),
                    confirmed: format_lsn(confirmed),
                    position: format_lsn(checkpoint.position),
                });
            }
            tracing::info!(
                slot,
                confirmed = %format_lsn(confirmed),
                position = %format_lsn(checkpoint.position),
                "the slot is past the stage's position, which a stage of an older build allows; not checked this once"
            );
            Ok(confirmed)
        }
        Some(checkpoint) => Ok(checkpoint.position),
    }
}
