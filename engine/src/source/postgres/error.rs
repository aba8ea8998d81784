//! The PostgreSQL source's errors, and which of them a reconnect may cure.

use super::replication::ReplicationError;
use super::stage_port::PortError;
use crate::pg::pgoutput::DecodeError;
use crate::pg::pgtypes;

/// Errors of the PostgreSQL source.
#[derive(Debug, thiserror::Error)]
pub enum PgSourceError {
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error(
        "{table}: the source table changed: {change}. Nothing past this transaction was acknowledged; alter the target to match and restart, then run `weir resync --table {table}`: rows staged before the change still hold the old column (a renamed column's values would be written as NULL, a retyped one's in the old form), or take a new snapshot"
    )]
    SchemaChanged { table: String, change: String },
    #[error(
        "{table}: the source table's key changed while streaming: the columns the server now identifies its rows by are ({now}), the configured key is ({key}). Nothing past this transaction was acknowledged: rows that share the configured key would have been merged into one. Put the key back at the source, or follow the new key: `key = [...]` with its columns in the config, a new `[stage] path` and `weir init` (the table is read again whole)"
    )]
    KeyChanged {
        table: String,
        now: String,
        key: String,
    },
    #[error("{table}: {reason}")]
    BadChange { table: String, reason: String },
    #[error("{table}: column `{column}`")]
    Value {
        table: String,
        column: String,
        #[source]
        source: pgtypes::TypeError,
    },
    #[error(
        "{table}: unchanged TOAST value of column `{column}` for a row that is not staged, so its value is unknown; nothing past this transaction was acknowledged. Set REPLICA IDENTITY FULL on the table (later changes then carry whole rows); to get past the changes already in the WAL, take the table out of the config (keep another table of the publication in it if it was the only one) and run `weir init` and `weir run --once` (its changes are passed over), then put it back and run `weir init`: the next `weir run` reads it whole again"
    )]
    ToastWithoutRow { table: String, column: String },
    #[error(
        "TRUNCATE of {tables}: on_truncate = \"fail\" for it, so the source stops and nothing past the TRUNCATE is acknowledged; set on_truncate = \"apply\" on the table to remove its rows from the stage and the target"
    )]
    Truncate { tables: String },
    /// The source went away during the first load (a restart, a cut connection):
    /// what it staged stays, and a new run (or a live run's reconnect) goes on with the
    /// ranges left.
    #[error("the first load was interrupted (it goes on with what it has not staged)")]
    LoadInterrupted(#[source] Box<PgSourceError>),
    #[error(
        "a change arrived outside a transaction ({what}): the replication stream is out of order"
    )]
    OutsideTransaction { what: &'static str },
    #[error("change for relation {oid}, which no Relation message described")]
    UnknownRelation { oid: u32 },
    #[error(
        "{table}: column `{column}` has a type Weir does not read in binary format; the stream is opened again in text"
    )]
    BinaryUnreadable { table: String, column: String },
    #[error(
        "the replication stream {what} streamed transaction {xid}, which it never started on this connection: the stream is out of order; nothing of it was acknowledged, and the next run receives it again"
    )]
    UnknownStream { what: &'static str, xid: u32 },
    #[error(
        "replication slot `{slot}` does not exist, and the changes made since it went are lost to this stage (Weir never re-creates a slot silently): point `[stage] path` at a new folder, then run `weir init --take-over` (it creates the slot; the new stage takes the target tables over) and `weir run`, which loads the tables afresh; `weir backfill --allow-empty` then empties target partitions the new stage has no rows for"
    )]
    SlotMissing { slot: String },
    #[error(
        "replication slot `{slot}` was invalidated by the server (wal_status = lost: it fell behind max_slot_wal_keep_size); the changes it held are lost: drop it (`SELECT pg_drop_replication_slot('{slot}');`), point `[stage] path` at a new folder, then run `weir init --take-over` and `weir run`, which load the tables afresh; `weir backfill --allow-empty` then empties target partitions the new stage has no rows for"
    )]
    SlotInvalidated { slot: String },
    #[error(
        "the source server is a standby in recovery, which Weir cannot write its snapshot watermarks and heartbeats to: set `[source] primary_dsn_env` to a variable holding the primary's DSN (decoding on a standby needs PostgreSQL 16 or later and hot_standby_feedback = on), or point `dsn_env` at the primary"
    )]
    StandbyWithoutPrimary,
    #[error(
        "the source server is a standby of PostgreSQL {version}, which cannot decode (logical decoding on a standby needs 16 or later): point `[source] dsn_env` at the primary"
    )]
    StandbyTooOld { version: String },
    #[error(
        "replication slot `{slot}` has confirmed the feed up to {confirmed}, past this stage's position {position}: the changes in between were acknowledged by some other stage (an older checkpoint imported with `weir checkpoint import`, the slot dropped and created again, or another engine using this slot) and the slot cannot send them again; import a checkpoint of this feed at or past {confirmed}, or take a fresh snapshot: point `[stage] path` at a new folder and run `weir init --take-over` and `weir run`"
    )]
    SlotAhead {
        slot: String,
        confirmed: String,
        position: String,
    },
    #[error(
        "the source server's WAL ends at {end}, before this stage's position {position}: the server went back in time (restored from a backup, recovered to an earlier point in time, or a standby promoted before it received all the stage holds). The stage holds changes the server no longer has, and the server's commits since, below {position}, would be passed over as staged; Weir stops rather than mix two histories. Take a fresh snapshot of the server as it is: point `[stage] path` at a new folder and `slot` at a new slot name, run `weir init --take-over` and `weir run` (its first load rewrites the target's partitions from the server's rows, and empties those it holds none of), then drop the old slot (`SELECT pg_drop_replication_slot('…')`)"
    )]
    SourceWentBack { end: String, position: String },
    #[error(transparent)]
    Stage(#[from] PortError),
    #[error("a stage task failed")]
    Task(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    #[error("undecodable pgoutput message")]
    Decode(#[from] DecodeError),
    #[error("source table {table} {problem}")]
    SourceTable { table: String, problem: String },
    /// The source estate (publication, replica identity, key) would hide changes from
    /// Weir: refused before anything is streamed, with the statements that fix it.
    #[error("{subject}: {problems}")]
    Estate { subject: String, problems: String },
    #[error(
        "source table {configured} (relation OID {oid}) is now {now} (ALTER TABLE … RENAME or SET SCHEMA): nothing past this change was acknowledged; set `source = \"{now}\"` for this table in the config (the stage carries its staged rows over to the new name) and run again"
    )]
    Renamed {
        configured: String,
        oid: u32,
        now: String,
    },
    #[error(
        "source table {table} is now relation OID {oid}, not OID {expected} which this feed streams: it was dropped and created again, and its changes in between are lost to this stage. Nothing past this change was acknowledged. Take a new snapshot: point `[stage] path` at a new folder, then run `weir init --take-over` and `weir run`"
    )]
    Recreated {
        table: String,
        oid: u32,
        expected: u32,
    },
    #[error(
        "{partition} (relation OID {oid}) is a partition of the configured table {root}, and publication `{publication}` sends its changes under the partition's own name: nothing past this change was acknowledged. Run `ALTER PUBLICATION {quoted} SET (publish_via_partition_root = true);` on the source; the changes already in the slot stay as they were decoded (PostgreSQL reads a publication as it was at each change), so then start a new slot and stage (new `slot` and `[stage] path`, `weir init --take-over`: a fresh snapshot)"
    )]
    LeafPartition {
        partition: String,
        oid: u32,
        root: String,
        publication: String,
        quoted: String,
    },
    #[error(
        "the `--where` of the resync of {table} is not usable: {problem}; give a condition on the table's columns, as in `SELECT ... FROM {table} WHERE <condition>`"
    )]
    ResyncFilter {
        table: String,
        problem: String,
        /// Shown without DETAIL or context (a failure on the rows quotes their values).
        #[source]
        source: Option<crate::pgerror::PgError>,
    },
    #[error("the stream is reopened to read {table} again, as `weir resync` asked (not a failure)")]
    ReopenForResync { table: String },
    #[error("source query failed: {what}")]
    Query {
        what: &'static str,
        /// Shown without DETAIL or context, which may hold row values.
        #[source]
        source: crate::pgerror::PgError,
    },
    #[error("cannot connect to the source PostgreSQL")]
    Connect(#[source] crate::pgconn::ConnectError),
}

impl PgSourceError {
    /// Whether the user must change the source estate or the config before anything can
    /// run (exit code 2): a publication, key or replica identity that would hide changes,
    /// a standby source without the primary's DSN or too old to decode.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            PgSourceError::Estate { .. }
                | PgSourceError::StandbyWithoutPrimary
                | PgSourceError::StandbyTooOld { .. }
                | PgSourceError::Connect(crate::pgconn::ConnectError::Dsn(_))
                | PgSourceError::SourceTable { .. }
                | PgSourceError::ResyncFilter { .. }
        )
    }

    /// Whether the stream ends only to be opened again at once: a resync was asked
    /// for, and its snapshot reads without in-progress streaming.
    pub fn needs_reopen(&self) -> bool {
        matches!(self, PgSourceError::ReopenForResync { .. })
    }

    /// Whether the stream, opened in binary format, met a column it cannot read in it
    /// (one added since it opened): opened again in text, it goes on.
    pub fn needs_text(&self) -> bool {
        match self {
            PgSourceError::BinaryUnreadable { .. } => true,
            PgSourceError::Value { source, .. } => {
                source.problem == crate::pg::pgtypes::Problem::Binary
            }
            _ => false,
        }
    }

    /// Whether a reconnect may cure it: the connection failed or was closed, or the
    /// server refused or ended it for a reason of its own (SQLSTATE classes 08
    /// connection exception and 57 operator intervention: a shutdown, a restart,
    /// `pg_terminate_backend`), or the slot is still held by the previous connection's
    /// walsender (55006).
    pub fn is_transient(&self) -> bool {
        let transient_code = |code: &str| {
            code.starts_with("08") || code.starts_with("57") || code == "55006" || code == "53300"
        };
        match self {
            PgSourceError::Replication(e) => match e {
                ReplicationError::Connect { .. }
                | ReplicationError::Io { .. }
                | ReplicationError::Closed
                | ReplicationError::Unusable => true,
                ReplicationError::Tls(e) => e.transient,
                other => other.code().is_some_and(transient_code),
            },
            PgSourceError::Connect(e) => e.is_transient(),
            PgSourceError::LoadInterrupted(_) => true,
            PgSourceError::Query { source, .. } => {
                let source = source.inner();
                source.is_closed()
                    || source
                        .code()
                        .map_or(source.as_db_error().is_none(), |c| transient_code(c.code()))
            }
            _ => false,
        }
    }
}

/// A failed source query as [`PgSourceError::Query`], for `map_err`.
pub(super) fn query_failed(what: &'static str) -> impl Fn(tokio_postgres::Error) -> PgSourceError {
    move |source| PgSourceError::Query {
        what,
        source: crate::pgerror::PgError(source),
    }
}
