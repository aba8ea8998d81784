//! `init` setup and checks: the slot, the publication, and each table's estate.

use super::error::PgSourceError;
use crate::config::{Dsn, TableConfig, TableName, quote_ident};
use crate::pg::pgtypes;
use crate::pgerror::PgError;

/// Connects to the source as an ordinary client, for catalog queries and setup.
pub async fn connect(dsn: &Dsn) -> Result<tokio_postgres::Client, PgSourceError> {
    let (client, connection) = crate::pgconn::connect(dsn)
        .await
        .map_err(PgSourceError::Connect)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "source connection closed");
        }
    });
    Ok(client)
}

/// The columns of a source table, in order, as Weir columns; a column of a type Weir
/// cannot write is refused, every such column named.
pub async fn source_columns(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<Vec<crate::config::Column>, PgSourceError> {
    let (columns, unsupported) = source_columns_and_unsupported(client, table).await?;
    if unsupported.is_empty() {
        Ok(columns)
    } else {
        Err(unsupported_columns(table, &unsupported))
    }
}

/// The error for `unsupported` columns (name, declared type) of `table`.
pub fn unsupported_columns(table: &TableName, unsupported: &[(String, String)]) -> PgSourceError {
    let list: Vec<String> = unsupported
        .iter()
        .map(|(name, declared)| format!("`{name}` has type {declared}"))
        .collect();
    PgSourceError::SourceTable {
        table: table.to_string(),
        problem: format!(
            "column {}, which Weir cannot write yet (it writes smallint, integer, bigint, numeric, real, double precision, text, varchar, boolean, date, timestamp, timestamptz, uuid, json, jsonb and bytea, domains over these, and enums, as text): change the column to one of these at the source, or leave the table out of this pipeline",
            list.join(", column ")
        ),
    }
}

/// Refuses a config naming source tables that do not exist, all of them in one error
/// (a schema renamed leaves every table of it missing: one at a time, that was one
/// edit and one run for each).
pub async fn refuse_missing_tables(
    client: &tokio_postgres::Client,
    tables: &[crate::config::TableConfig],
) -> Result<(), PgSourceError> {
    let quoted: Vec<String> = tables.iter().map(|t| t.source.quoted()).collect();
    let rows = client
        .query(
            "SELECT i::int FROM unnest($1::text[]) WITH ORDINALITY AS n(name, i) WHERE to_regclass(name) IS NULL ORDER BY i",
            &[&quoted],
        )
        .await
        .map_err(super::error::query_failed("look the source tables up"))?;
    let missing: Vec<String> = rows
        .iter()
        .filter_map(|r| usize::try_from(r.get::<_, i32>(0)).ok())
        .filter_map(|i| tables.get(i.checked_sub(1)?))
        .map(|t| t.source.to_string())
        .collect();
    let Some((first, rest)) = missing.split_first() else {
        return Ok(());
    };
    let others = if !rest.is_empty() {
        format!(
            " (nor do {}: {} tables in all)",
            rest.join(", "),
            missing.len()
        )
    } else {
        String::new()
    };
    Err(PgSourceError::SourceTable {
        table: first.clone(),
        problem: format!(
            "does not exist{others}: create it, or, if it was renamed (ALTER TABLE … RENAME or SET SCHEMA, or its schema renamed), set `source` to its new name in the config"
        ),
    })
}

/// [`source_columns`], with the columns of types Weir cannot write set apart (name,
/// declared type) rather than refused.
pub async fn source_columns_and_unsupported(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<(Vec<crate::config::Column>, Vec<(String, String)>), PgSourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.atttypid, a.atttypmod, a.attgenerated <> '' \
             FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[&table.quoted()],
        )
        .await
        .map_err(super::error::query_failed("read a source table's columns"))?;
    if rows.is_empty() {
        return Err(PgSourceError::SourceTable {
            table: table.to_string(),
            problem: "does not exist (or has no columns): create it, or, if it was renamed (ALTER TABLE … RENAME or SET SCHEMA), set `source` to its new name in the config".into(),
        });
    }
    let mut types = super::types::UserTypes::default();
    types.learn(client, rows.iter().map(|r| r.get(2))).await?;
    let mut unsupported = Vec::new();
    let columns = rows
        .iter()
        .filter(|r| {
            // A generated column is not in the stream (pgoutput leaves it out), so it
            // is not replicated at all: the first load would disagree with every change.
            let generated: bool = r.get(4);
            if generated {
                tracing::info!(table = %table, column = %r.get::<_, String>(0), "a generated column is not replicated (logical replication does not send it): compute it in the target or a plugin");
            }
            !generated
        })
        .filter_map(|r| {
            let (name, mut declared, oid, modifier): (String, String, u32, i32) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            let (base, base_modifier) = types.resolve(oid, modifier);
            if types.is_domain_over_enum(oid) {
                unsupported.push((name, format!("{declared} (a domain over an enum)")));
                return None;
            }
            let Some(ty) = pgtypes::column_type(base, base_modifier) else {
                unsupported.push((name, declared));
                return None;
            };
            if (base, base_modifier) != (oid, modifier) {
                // A domain or an enum: what it holds is what Weir writes (a target
                // table `init` makes declares it so).
                tracing::debug!(table = %table, column = %name, declared = %declared, written_as = %pgtypes::type_name(base, base_modifier), "a domain or enum column is read as the type it holds");
                declared = pgtypes::type_name(base, base_modifier);
            }
            Some(crate::config::Column {
                name,
                declared,
                ty,
                epoch: None,
                encoding: None,
            })
        })
        .collect();
    Ok((columns, unsupported))
}

/// What `weir init` set up in the source.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SetupReport {
    /// Whether the publication was created (rather than found).
    pub created_publication: bool,
    /// Whether the slot was created (rather than found).
    pub created_slot: bool,
    /// Per table: `schema.table` and its replica identity, in words.
    pub identities: Vec<(String, String)>,
    /// Per table: its relation OID.
    pub oids: Vec<u32>,
    /// Whether the slot survives a failover to a standby.
    pub failover: SlotFailover,
}

/// How long `weir init` waits for a standby to replay what it made on the primary.
const STANDBY_REPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

async fn publication_exists(
    client: &tokio_postgres::Client,
    publication: &str,
) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)",
            &[&publication],
        )
        .await?
        .get(0))
}

/// Whether the slot is a failover slot (PostgreSQL 17 and later): one that a standby
/// with `sync_replication_slots = on` keeps a synchronized copy of, so that after a
/// promotion Weir finds its slot on the new primary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotFailover {
    /// `failover = true`.
    Enabled,
    /// The server has failover slots but this one is not (it existed before, made
    /// without): how to make it one.
    Disabled {
        /// What makes it one.
        fix: String,
    },
    /// The slot is on a standby that decodes: a standby's slot cannot be one.
    OnStandby,
    /// The server predates failover slots.
    Unsupported {
        /// The server's `server_version`.
        server_version: String,
    },
}

impl std::fmt::Display for SlotFailover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotFailover::Enabled => write!(
                f,
                "a failover slot: a standby with sync_replication_slots = on keeps a copy"
            ),
            SlotFailover::Disabled { fix } => write!(
                f,
                "not a failover slot, so a promoted standby will not have it: {fix}"
            ),
            SlotFailover::OnStandby => write!(
                f,
                "on the standby that decodes (a standby's slot cannot be a failover slot)"
            ),
            SlotFailover::Unsupported { server_version } => write!(
                f,
                "not a failover slot: PostgreSQL {server_version} has none (17 and later do), so a promoted standby will not have it"
            ),
        }
    }
}

/// The first PostgreSQL with failover slots (`server_version_num`).
const FAILOVER_SLOTS_SINCE: i32 = 170_000;

/// The server's `server_version_num` and `server_version`.
async fn server_version(client: &tokio_postgres::Client) -> Result<(i32, String), PgSourceError> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version_num')::int, current_setting('server_version')",
            &[],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the server's version",
            source: PgError(source),
        })?;
    Ok((row.get(0), row.get(1)))
}

/// A table's relation OID (`None`: it does not exist).
pub async fn table_oid(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<Option<u32>, PgSourceError> {
    Ok(client
        .query_one("SELECT to_regclass($1)::oid", &[&table.quoted()])
        .await
        .map_err(|source| PgSourceError::Query {
            what: "look up a source table",
            source: PgError(source),
        })?
        .get(0))
}

/// Creates the publication (with `publish_via_partition_root`, so a partitioned
/// table's changes come under its own name) and the slot when missing, then checks
/// the estate ([`check_estate`]): an existing publication a DBA made is used as it is
/// if it hides nothing, else refused with the statements that fix it. Safe to run
/// again; never re-creates a slot.
///
/// `primary`: when `client` is a hot standby that decodes (PostgreSQL 16 and later),
/// the primary's DSN: the publication is made there (the WAL brings it to the standby,
/// which is waited for), and the slot is made on the standby, with the primary asked
/// to log its running transactions (`pg_log_standby_snapshot`) so that the standby's
/// slot creation does not wait for the next one.
pub async fn setup(
    client: &tokio_postgres::Client,
    primary: Option<&Dsn>,
    slot: &str,
    publication: &str,
    tables: &[TableConfig],
) -> Result<SetupReport, PgSourceError> {
    let query = super::error::query_failed;
    let primary_client = match primary {
        Some(dsn) => Some(connect(dsn).await?),
        None => None,
    };
    let writer = primary_client.as_ref().unwrap_or(client);
    // Checked before anything is made, so that a refused init leaves nothing behind.
    let wal_level: String = client
        .query_one("SELECT current_setting('wal_level')", &[])
        .await
        .map_err(query("read wal_level"))?
        .get(0);
    if wal_level != "logical" {
        return Err(PgSourceError::Estate {
            subject: "the source server".into(),
            problems: format!(
                "wal_level is `{wal_level}`, and logical replication needs `logical`: run `ALTER SYSTEM SET wal_level = logical;` and restart the server (on a managed service, its logical replication setting), then `weir init` again"
            ),
        });
    }
    // A slot someone else made must be one Weir can stream from.
    let found: Option<(String, Option<String>, Option<String>, String)> = client
        .query_opt(
            "SELECT slot_type::text, plugin::text, database::text, coalesce(wal_status, '') \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query("look up the slot"))?
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)));
    let slot_exists = found.is_some();
    if let Some((kind, plugin, database, wal_status)) = found {
        let here: String = client
            .query_one("SELECT current_database()::text", &[])
            .await
            .map_err(query("read the database's name"))?
            .get(0);
        let problem = if kind != "logical" {
            Some(format!(
                "is a {kind} slot; Weir streams from a logical slot"
            ))
        } else if plugin.as_deref() != Some("pgoutput") {
            Some(format!(
                "decodes with the output plugin `{}`; Weir reads `pgoutput`",
                plugin.unwrap_or_default()
            ))
        } else if database.as_deref() != Some(here.as_str()) {
            Some(format!(
                "belongs to the database `{}`, not `{here}` that the source DSN names",
                database.unwrap_or_default()
            ))
        } else if wal_status == "lost" {
            Some("was invalidated by the server (its WAL was removed, `max_slot_wal_keep_size`): the changes it held are gone".to_owned())
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(PgSourceError::Estate {
                subject: format!("replication slot `{slot}`"),
                problems: format!(
                    "{problem}. Set another `slot` in the config (`weir init` makes it), or drop this one if nothing else uses it (`SELECT pg_drop_replication_slot('{slot}');`); a new slot streams from now on, so point `[stage] path` at a new folder too for a fresh snapshot"
                ),
            });
        }
    }
    let exists = publication_exists(writer, publication)
        .await
        .map_err(query("look up the publication"))?;
    let created_publication = !exists;
    if !exists {
        for table in tables {
            // A missing table is named before the publication is made, and an
            // unlogged one, which no publication takes.
            source_columns(client, &table.source).await?;
            let unlogged: bool = client
                .query_one(
                    "SELECT relpersistence = 'u' FROM pg_class WHERE oid = $1::text::regclass",
                    &[&table.source.quoted()],
                )
                .await
                .map_err(query("look up a source table"))?
                .get(0);
            if unlogged {
                return Err(PgSourceError::Estate {
                    subject: format!("source table {}", table.source),
                    problems: unlogged_problem(&table.source.to_string(), table),
                });
            }
        }
        let list: Vec<String> = tables.iter().map(|t| t.source.quoted()).collect();
        writer
            .batch_execute(&format!(
                "CREATE PUBLICATION {} FOR TABLE {} WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true)",
                quote_ident(publication),
                list.join(", ")
            ))
            .await
            .map_err(query("create the publication"))?;
    }
    if primary_client.is_some() {
        // The standby sees the publication once it has replayed it.
        let started = std::time::Instant::now();
        while !publication_exists(client, publication)
            .await
            .map_err(query("look up the publication on the standby"))?
        {
            if started.elapsed() > STANDBY_REPLAY_WAIT {
                return Err(PgSourceError::SourceTable {
                    table: publication.to_owned(),
                    problem: format!(
                        "the publication exists on the primary but the standby has not replayed it after {} s: check the standby's replication",
                        STANDBY_REPLAY_WAIT.as_secs()
                    ),
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // And, of a table whose key nothing enforces, rows that share a key now: the
    // first load would refuse it, stopping every table's load.
    let checked = async {
        let estate = check_estate(client, publication, tables).await?;
        for table in tables
            .iter()
            .filter(|t| estate.unenforced_keys.contains(&t.source.to_string()))
        {
            refuse_shared_keys(client, table).await?;
        }
        Ok::<_, PgSourceError>(estate)
    };
    let estate = match checked.await {
        Ok(estate) => estate,
        Err(error) => {
            // A refused init leaves the source as it found it: the publication it
            // just made goes (a failure to drop it is only logged: the refusal is
            // what the user needs to read).
            if created_publication
                && let Err(drop) = writer
                    .batch_execute(&format!("DROP PUBLICATION {}", quote_ident(publication)))
                    .await
            {
                tracing::warn!(publication, error = %drop, "the publication this init made was not dropped");
            }
            return Err(error);
        }
    };
    let identities = tables
        .iter()
        .map(|t| t.source.to_string())
        .zip(estate.identities.iter().cloned())
        .collect();
    let (version_num, version) = server_version(client).await?;
    let has_failover = version_num >= FAILOVER_SLOTS_SINCE;
    let on_standby = primary.is_some();
    if !slot_exists {
        // Rows already in the tables reach the stage through the initial snapshot, which
        // `weir run` takes (and resumes) from the stage's progress. From PostgreSQL 17 the
        // slot is a failover slot (arguments: temporary, two-phase, failover); a
        // standby's slot cannot be one.
        let create = if has_failover && !on_standby {
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)"
        } else {
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')"
        };
        // On a standby the creation waits for the primary to log its running
        // transactions: ask it to, until the slot is made.
        let nudge = primary.cloned().map(|dsn| {
            tokio::spawn(async move {
                let Ok(primary) = connect(&dsn).await else {
                    return;
                };
                loop {
                    if primary
                        .execute("SELECT pg_log_standby_snapshot()", &[])
                        .await
                        .is_err()
                    {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            })
        });
        let created = client.query_one(create, &[&slot]).await;
        if let Some(nudge) = nudge {
            nudge.abort();
        }
        created.map_err(query("create the replication slot"))?;
    }
    let failover = if on_standby {
        SlotFailover::OnStandby
    } else if !has_failover {
        SlotFailover::Unsupported {
            server_version: version,
        }
    } else if super::slots::slot_status(client, slot)
        .await?
        .and_then(|s| s.failover)
        == Some(true)
    {
        SlotFailover::Enabled
    } else {
        SlotFailover::Disabled {
            fix: format!(
                "while no `weir run` uses it, run ALTER_REPLICATION_SLOT {} (FAILOVER true) on a replication connection (psql \"dbname=… replication=database\")",
                quote_ident(slot)
            ),
        }
    };
    Ok(SetupReport {
        created_publication,
        created_slot: !slot_exists,
        identities,
        oids: estate.oids,
        failover,
    })
}

/// What [`check_estate`] found: each configured table's relation OID and replica
/// identity, in the order of the tables.
#[derive(Debug, Clone)]
pub struct Estate {
    /// Per table: its relation OID.
    pub oids: Vec<u32>,
    /// Per table: its replica identity, in words.
    pub identities: Vec<String>,
    /// The tables (`schema.table`) whose key no primary key or unique index enforces
    /// (`REPLICA IDENTITY FULL`): a streamed INSERT of a staged key stops the run.
    pub unenforced_keys: Vec<String>,
    /// The tables with `REPLICA IDENTITY FULL` (a leaf partition's counts), enforced or
    /// not: the stage refuses an INSERT of a key it holds for each, so a key constraint
    /// dropped while the stream runs (the server then sends no key, only whole rows)
    /// stops the run at the first two rows sharing a key instead of merging them.
    pub guarded_keys: Vec<String>,
}

/// One relation of a configured table whose replica identity matters: the table
/// itself, or each leaf partition of a partitioned table.
struct IdentityRow {
    name: String,
    identity: String,
    primary_key: Vec<String>,
    identity_index: Vec<String>,
}

/// The key of a `REPLICA IDENTITY FULL` table, which no primary key backs: a key
/// column that may be NULL is a problem (a row with a NULL key could be neither staged
/// nor deleted); a key no unique index enforces gets a warning, since rows sharing a
/// key are one row to Weir (`weir verify --against-source` finds them; a streamed
/// INSERT of a staged key stops the run). Returns whether a unique index enforces it.
async fn full_identity_key(
    client: &tokio_postgres::Client,
    table: &TableConfig,
    problems: &mut Vec<String>,
) -> Result<bool, PgSourceError> {
    let row = client
        .query_one(
            "SELECT coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a                  WHERE a.attrelid = to_regclass($1) AND a.attname = ANY($2::text[]) AND NOT a.attnotnull), '{}'),                coalesce((SELECT bool_or(i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indimmediate                  AND (SELECT array_agg(a.attname::text) FROM pg_attribute a                       WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) <@ $2::text[])                  FROM pg_index i WHERE i.indrelid = to_regclass($1)), false),                coalesce((SELECT bool_or(i.indisunique AND NOT i.indimmediate                  AND (SELECT array_agg(a.attname::text) FROM pg_attribute a                       WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) <@ $2::text[])                  FROM pg_index i WHERE i.indrelid = to_regclass($1)), false)",
            &[&table.source.quoted(), &table.key],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read a source table's key columns",
            source: PgError(source),
        })?;
    let (nullable, unique, deferrable): (Vec<String>, bool, bool) =
        (row.get(0), row.get(1), row.get(2));
    if deferrable && !unique {
        // Checked at commit, the key may be held by two rows inside a transaction (a
        // swap of keys in one UPDATE): an update moving a row onto a key another row
        // still holds would overwrite that row in the stage, and its own move or
        // delete would then remove the moved one.
        problems.push(format!(
            "the key ({}) of {} is unique only by a DEFERRABLE constraint: rows may share a key inside a transaction, which Weir's stage (one row per key) cannot follow. Make the constraint NOT DEFERRABLE (`ALTER TABLE {} ALTER CONSTRAINT <name> NOT DEFERRABLE;`), or add a unique index that is not deferrable",
            table.key.join(", "),
            table.source,
            table.source.quoted()
        ));
    }
    if !nullable.is_empty() {
        problems.push(format!(
            "key column{} {} of {} may be NULL (REPLICA IDENTITY FULL, no primary key): a row with a NULL key can be neither staged nor deleted; run {}",
            if nullable.len() > 1 { "s" } else { "" },
            nullable.join(", "),
            table.source,
            nullable
                .iter()
                .map(|c| format!("`ALTER TABLE {} ALTER COLUMN {} SET NOT NULL;`", table.source.quoted(), quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    } else if !unique {
        tracing::warn!(
            table = %table.source,
            key = %table.key.join(", "),
            "the key of this REPLICA IDENTITY FULL table is not enforced unique by the source (no primary key or unique index on its columns): rows that share a key are one row in the target, and a streamed INSERT of a key already staged stops the run. If the key is unique, say so with `CREATE UNIQUE INDEX ON {} ({})`; `weir verify --against-source` finds rows that share one",
            table.source.quoted(),
            table.key.iter().map(|c| quote_ident(c)).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(unique)
}

/// Refuses to load `table` when rows of it share a key in what `client` sees (a
/// connection in the load's snapshot, or the source as it is now): the stage keeps one
/// row per key, so the target would silently hold fewer rows than the source. Only
/// asked of tables whose key no unique index enforces (a `REPLICA IDENTITY FULL` table
/// keyed by columns it does not declare unique); it reads the table once.
pub(super) async fn refuse_shared_keys(
    client: &tokio_postgres::Client,
    table: &TableConfig,
) -> Result<(), PgSourceError> {
    let key: Vec<String> = table.key.iter().map(|c| quote_ident(c)).collect();
    let key = key.join(", ");
    let (shared, rows): (i64, i64) = client
        .query_one(
            &format!(
                "SELECT count(*), coalesce(sum(n), 0)::bigint FROM (SELECT count(*) AS n FROM {} GROUP BY {key} HAVING count(*) > 1) AS shared",
                table.source.quoted()
            ),
            &[],
        )
        .await
        .map(|row| (row.get(0), row.get(1)))
        .map_err(|source| PgSourceError::Query {
            what: "look for rows that share a key in a table whose key is not enforced unique",
            source: PgError(source),
        })?;
    if shared == 0 {
        return Ok(());
    }
    Err(PgSourceError::Estate {
        subject: format!("source table {}", table.source),
        problems: format!(
            "{rows} rows share {shared} value{} of the key ({}), which no primary key or unique index enforces: the stage keeps one row per key, so the target would lose rows. Nothing of this table was staged. Find them with `SELECT {key}, count(*) FROM {} GROUP BY {key} HAVING count(*) > 1;`, then either make the key unique (remove the duplicates and `CREATE UNIQUE INDEX ON {} ({key});`) or set this table's `key` in the config to columns that are unique, and run again",
            if shared == 1 { "" } else { "s" },
            table.key.join(", "),
            table.source.quoted(),
            table.source.quoted(),
        ),
    })
}

/// Why an UNLOGGED relation (`name`, of configured `table`) cannot be streamed.
fn unlogged_problem(name: &str, table: &TableConfig) -> String {
    format!(
        "{name} is UNLOGGED: PostgreSQL writes no WAL for it, so none of its changes can be streamed: run `ALTER TABLE {name} SET LOGGED;` (if it was logged before, then, with `weir run` running, `weir resync --table {}`: changes made while it was unlogged were never in the WAL)",
        table.source
    )
}

/// Checks that the source hides no change of a configured table from Weir, before
/// anything is streamed (`weir init` after it set up the publication, and every start
/// of `weir run`): each table exists; its key is its primary key, its replica identity
/// index, or it is `REPLICA IDENTITY FULL` (for a partitioned table: each leaf
/// partition's, which is what the server logs); the publication exists, publishes
/// insert, update, delete and truncate, sends a partitioned table's changes under the
/// table's own name (`publish_via_partition_root`), covers every table, with no row
/// filter and no column list that leaves out a column Weir reads. Every problem found
/// is listed, each with the statement that fixes it. A table is not UNLOGGED (no
/// WAL), has no inheritance children (their changes come under their own names), and
/// no row-level security policy applies to Weir's role (a read would see a subset).
pub async fn check_estate(
    client: &tokio_postgres::Client,
    publication: &str,
    tables: &[TableConfig],
) -> Result<Estate, PgSourceError> {
    let query = super::error::query_failed;
    let pub_quoted = quote_ident(publication);
    let mut problems: Vec<String> = Vec::new();
    let mut oids = Vec::with_capacity(tables.len());
    let mut identities = Vec::with_capacity(tables.len());
    let mut unenforced_keys = Vec::new();
    let mut guarded_keys = Vec::new();
    let mut partitioned = Vec::with_capacity(tables.len());
    // Unlogged relations: reported as such, not as missing from the publication.
    let mut unlogged: Vec<String> = Vec::new();
    for table in tables {
        let row = client
            .query_opt(
                "SELECT c.oid, c.relkind::text, has_table_privilege(c.oid, 'SELECT') FROM pg_class c WHERE c.oid = to_regclass($1)",
                &[&table.source.quoted()],
            )
            .await
            .map_err(query("look up a source table"))?;
        let Some(row) = row else {
            return Err(PgSourceError::SourceTable {
                table: table.source.to_string(),
                problem: "does not exist: create it, or, if it was renamed (ALTER TABLE … RENAME or SET SCHEMA), set `source` to its new name in the config".into(),
            });
        };
        let (oid, kind): (u32, String) = (row.get(0), row.get(1));
        if !row.get::<_, bool>(2) {
            problems.push(format!(
                "the source role may not read {t}, so its first load and resyncs would fail: run `GRANT SELECT ON {t} TO …;` for the role of the source DSN",
                t = table.source.quoted()
            ));
        }
        oids.push(oid);
        partitioned.push(kind == "p");
        // The relations whose replica identity the server uses: a partitioned table's
        // leaves (a table that is not partitioned is its own only leaf).
        let rows = client
            .query(
                "WITH rels AS (SELECT relid FROM pg_partition_tree($1::text::regclass) WHERE isleaf \
                                UNION ALL SELECT $1::text::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree($1::text::regclass) WHERE isleaf)) \
                 SELECT c.oid::regclass::text, c.relreplident::text, c.relpersistence::text, \
                   c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls OR (pg_has_role(c.relowner, 'USAGE') AND NOT c.relforcerowsecurity)), \
                   coalesce((SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid AND i.indisprimary), '{}'), \
                   coalesce((SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) WHERE i.indrelid = c.oid AND i.indisreplident), '{}') \
                 FROM rels JOIN pg_class c ON c.oid = rels.relid, pg_roles r WHERE r.rolname = current_user ORDER BY 1",
                &[&table.source.quoted()],
            )
            .await
            .map_err(query("read a table's replica identity"))?;
        let raw = rows;
        let rows: Vec<IdentityRow> = raw
            .iter()
            .map(|r| IdentityRow {
                name: r.get(0),
                identity: r.get(1),
                primary_key: r.get(4),
                identity_index: r.get(5),
            })
            .collect();
        for r in &raw {
            let (name, persistence, filtered): (String, String, bool) =
                (r.get(0), r.get(2), r.get(3));
            if persistence == "u" {
                problems.push(unlogged_problem(&name, table));
                unlogged.push(name.clone());
            }
            if filtered {
                problems.push(format!(
                    "{name} has row-level security that applies to this role, so a first load or resync would read only the rows its policies show (the stream sends every row): grant the role BYPASSRLS (`ALTER ROLE … BYPASSRLS;`) or connect as the table's owner"
                ));
            }
        }
        if kind != "p" {
            let children: Option<String> = client
                .query_one(
                    "SELECT string_agg(inhrelid::regclass::text, ', ' ORDER BY inhrelid::regclass::text) FROM pg_inherits WHERE inhparent = $1::text::regclass",
                    &[&table.source.quoted()],
                )
                .await
                .map_err(query("read a table's inheritance children"))?
                .get(0);
            if let Some(children) = children {
                problems.push(format!(
                    "{} has inheritance children ({children}): PostgreSQL publishes each child's changes under the child's own name, and a read of the parent includes the children's rows, so the parent cannot be followed as one table: configure each table (the parent and every child) as its own [[table]] with its own target, or make {} a partitioned table (PARTITION BY) with its children attached as partitions",
                    table.source, table.source
                ));
            }
        }
        let mut key: Vec<String> = table.key.clone();
        key.sort();
        let mut words = None;
        for rel in &rows {
            let (what, columns) = match (rel.identity.as_str(), rel.primary_key.is_empty()) {
                ("f", _) => {
                    words.get_or_insert("full: old rows are sent whole");
                    continue;
                }
                ("d", false) => ("primary key", &rel.primary_key),
                ("i", _) => ("replica identity index", &rel.identity_index),
                ("n", false) => {
                    problems.push(format!(
                        "{} has REPLICA IDENTITY NOTHING, so its updates and deletes cannot be replicated: run `ALTER TABLE {} REPLICA IDENTITY DEFAULT;` (its primary key ({}) then identifies rows), or `… REPLICA IDENTITY FULL;`",
                        rel.name,
                        rel.name,
                        rel.primary_key.join(", ")
                    ));
                    continue;
                }
                _ => {
                    problems.push(format!(
                        "{} has no replica identity (REPLICA IDENTITY NOTHING, or DEFAULT without a primary key), so its updates and deletes cannot be replicated: add a primary key on ({}), or run `ALTER TABLE {} REPLICA IDENTITY FULL;`",
                        rel.name,
                        table.key.join(", "),
                        rel.name
                    ));
                    continue;
                }
            };
            if *columns != key {
                problems.push(format!(
                    "the configured key ({}) of {} is not the {what} ({}) of {}, which is what the server sends to identify an updated or deleted row: set `key = [{}]` in the config, or run `ALTER TABLE {} REPLICA IDENTITY FULL;`",
                    table.key.join(", "),
                    table.source,
                    columns.join(", "),
                    rel.name,
                    columns
                        .iter()
                        .map(|c| format!("\"{c}\""))
                        .collect::<Vec<_>>()
                        .join(", "),
                    rel.name
                ));
            } else {
                words.get_or_insert(if what == "primary key" {
                    "default (primary key): deletes and key changes resolved through the stage's keys index"
                } else {
                    "index: old rows carry the index columns"
                });
            }
        }
        identities.push(words.unwrap_or("full: old rows are sent whole").to_owned());
        if rows.iter().any(|r| r.identity == "f") {
            guarded_keys.push(table.source.to_string());
            if !full_identity_key(client, table, &mut problems).await? {
                unenforced_keys.push(table.source.to_string());
            }
        }
    }

    let publication_row = client
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(query("read the publication"))?;
    let Some(p) = publication_row else {
        return Err(PgSourceError::Estate {
            subject: format!("publication `{publication}`"),
            problems: "does not exist: run `weir init`, which creates it. If it was dropped while the slot existed, the slot cannot send the changes made since (PostgreSQL reads a publication as it was at each change, so one made again does not serve them): make it again, then start a new slot and stage (new `slot` and `[stage] path`, `weir init --take-over`: a fresh snapshot)".into(),
        });
    };
    let (insert, update, delete, truncate, via_root): (bool, bool, bool, bool, bool) =
        (p.get(0), p.get(1), p.get(2), p.get(3), p.get(4));
    let missing: Vec<&str> = [
        ("insert", insert),
        ("update", update),
        ("delete", delete),
        ("truncate", truncate),
    ]
    .iter()
    .filter(|(_, on)| !on)
    .map(|(op, _)| *op)
    .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "publication `{publication}` does not publish {}, so those changes would never reach the target: run `ALTER PUBLICATION {pub_quoted} SET (publish = 'insert, update, delete, truncate');`",
            missing.join(", ")
        ));
    }
    let leaves_named: Vec<String> = tables
        .iter()
        .zip(&partitioned)
        .filter(|(_, p)| **p)
        .map(|(t, _)| t.source.to_string())
        .collect();
    if !via_root && !leaves_named.is_empty() {
        problems.push(format!(
            "publication `{publication}` sends the changes of partitioned table {} under each partition's name (publish_via_partition_root is off), not the table's: run `ALTER PUBLICATION {pub_quoted} SET (publish_via_partition_root = true);`",
            leaves_named.join(", ")
        ));
    }
    // Row filters and column lists exist from PostgreSQL 15 on.
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(query("read the server version"))?
        .get(0);
    let published = client
        .query(
            if version >= 150_000 {
                "SELECT schemaname::text, tablename::text, attnames::text[], rowfilter FROM pg_publication_tables WHERE pubname = $1"
            } else {
                "SELECT schemaname::text, tablename::text, NULL::text[], NULL::text FROM pg_publication_tables WHERE pubname = $1"
            },
            &[&publication],
        )
        .await
        .map_err(query("read the publication's tables"))?;
    for (table, is_partitioned) in tables.iter().zip(&partitioned) {
        if *is_partitioned && !via_root {
            continue; // reported above: its partitions are listed, not it
        }
        if unlogged.iter().any(|u| {
            *u == table.source.quoted() || *u == table.source.to_string() || *u == table.source.name
        }) {
            continue; // reported above: an unlogged table is never published
        }
        let entry = published.iter().find(|r| {
            r.get::<_, String>(0) == table.source.schema
                && r.get::<_, String>(1) == table.source.name
        });
        let Some(entry) = entry else {
            let root: Option<String> = client
                .query_one(
                    "SELECT CASE WHEN c.relispartition THEN pg_partition_root(c.oid)::regclass::text END FROM pg_class c WHERE c.oid = $1::text::regclass",
                    &[&table.source.quoted()],
                )
                .await
                .map_err(query("look up a table's partition root"))?
                .get(0);
            if let Some(root) = root.filter(|_| via_root) {
                problems.push(format!(
                    "{} is a partition of {root}, and publication `{publication}` sends its changes under {root}'s name (publish_via_partition_root is on): configure {root} as the source table, or run `ALTER PUBLICATION {pub_quoted} SET (publish_via_partition_root = false);`",
                    table.source
                ));
                continue;
            }
            problems.push(format!(
                "{} is not in publication `{publication}`: run `ALTER PUBLICATION {pub_quoted} ADD TABLE {};`",
                table.source,
                table.source.quoted()
            ));
            continue;
        };
        let refresh = format!(
            "run `ALTER PUBLICATION {pub_quoted} DROP TABLE {t}; ALTER PUBLICATION {pub_quoted} ADD TABLE {t};`",
            t = table.source.quoted()
        );
        let rowfilter: Option<String> = entry.get(3);
        if rowfilter.is_some() {
            problems.push(format!(
                "publication `{publication}` has a row filter (WHERE …) on {}, so changes of rows outside it would never reach the target: {refresh}",
                table.source
            ));
        }
        let columns: Option<Vec<String>> = entry.get(2);
        if let Some(columns) = columns {
            let hidden: Vec<&str> = table
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .filter(|c| !columns.iter().any(|p| p == c))
                .collect();
            if !hidden.is_empty() {
                problems.push(format!(
                    "publication `{publication}` has a column list on {} that leaves out {}: {refresh}",
                    table.source,
                    hidden.join(", ")
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err(PgSourceError::Estate {
            subject: format!(
                "the source would hide changes from Weir ({} problems)",
                problems.len()
            ),
            problems: problems.join("; "),
        });
    }
    Ok(Estate {
        oids,
        identities,
        unenforced_keys,
        guarded_keys,
    })
}
