//! What a publication is, as far as it decides which changes of the configured tables
//! the slot sends ([`PublicationMark`]): recorded by `init`, checked at every start and
//! while streaming.

use super::error::PgSourceError;
use crate::config::TableConfig;
use crate::pgerror::PgError;
use std::collections::HashMap;

/// What a publication is, as far as it decides which changes of the configured tables
/// the slot sends: the row versions (`xmin`) of its `pg_publication` row (its
/// operations, `FOR ALL TABLES`, `publish_via_partition_root`) and, per configured
/// table, of the `pg_publication_rel` row that lists it (with its row filter and column
/// list) or the `pg_publication_namespace` row of its schema. Any `ALTER PUBLICATION`
/// that could hide a change writes a new version of one of them, even one undone later;
/// adding another table writes none of them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublicationMark {
    publication: String,
    tables: std::collections::BTreeMap<String, String>,
}

impl PublicationMark {
    /// Reads the mark of `publication` for `tables` (relation OIDs in `oids`).
    pub async fn read(
        client: &tokio_postgres::Client,
        publication: &str,
        tables: &[TableConfig],
        oids: &[u32],
    ) -> Result<PublicationMark, PgSourceError> {
        let query = |source| PgSourceError::Query {
            what: "read the publication's row versions",
            source: PgError(source),
        };
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .map_err(query)?
            .get(0);
        let publication_xmin: Option<String> = client
            .query_opt(
                "SELECT xmin::text FROM pg_publication WHERE pubname = $1",
                &[&publication],
            )
            .await
            .map_err(query)?
            .map(|r| r.get(0));
        let mut marks = std::collections::BTreeMap::new();
        for (table, oid) in tables.iter().zip(oids) {
            let rel: Option<String> = client
                .query_opt(
                    "SELECT r.xmin::text FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid \
                     WHERE p.pubname = $1 AND r.prrelid = $2",
                    &[&publication, oid],
                )
                .await
                .map_err(query)?
                .map(|r| r.get(0));
            // `FOR TABLES IN SCHEMA`: PostgreSQL 15 and later.
            let schema: Option<String> = if rel.is_none() && version >= 150_000 {
                client
                    .query_opt(
                        "SELECT n.xmin::text FROM pg_publication_namespace n JOIN pg_publication p ON p.oid = n.pnpubid \
                         WHERE p.pubname = $1 AND n.pnnspid = (SELECT relnamespace FROM pg_class WHERE oid = $2)",
                        &[&publication, oid],
                    )
                    .await
                    .map_err(query)?
                    .map(|r| r.get(0))
            } else {
                None
            };
            let mark = match (rel, schema) {
                (Some(x), _) => format!("table {x}"),
                (None, Some(x)) => format!("schema {x}"),
                (None, None) => String::new(),
            };
            marks.insert(table.source.to_string(), mark);
        }
        Ok(PublicationMark {
            publication: publication_xmin.unwrap_or_default(),
            tables: marks,
        })
    }

    /// The mark as stored in the stage.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored mark (`None`: not one).
    pub fn decode(text: &str) -> Option<PublicationMark> {
        serde_json::from_str(text).ok()
    }

    /// What changed from `earlier` to this mark, in words (`None`: nothing that could
    /// hide a change): the publication's own row, or the rows of tables both know.
    pub fn changed_since(&self, earlier: &PublicationMark) -> Option<String> {
        let mut what = Vec::new();
        if self.publication != earlier.publication {
            what.push("its operations or options".to_owned());
        }
        let tables: Vec<&str> = self
            .tables
            .iter()
            .filter(|(t, m)| earlier.tables.get(*t).is_some_and(|e| e != *m))
            .map(|(t, _)| t.as_str())
            .collect();
        if !tables.is_empty() {
            what.push(format!("how it publishes {}", tables.join(", ")));
        }
        (!what.is_empty()).then(|| what.join(", and "))
    }

    /// The error for a publication changed since the stage recorded it.
    pub fn changed_error(publication: &str, what: &str) -> PgSourceError {
        PgSourceError::Estate {
            subject: format!("publication `{publication}`"),
            problems: format!(
                "was altered since this stage last read it ({what}: ALTER PUBLICATION). While it was, the slot did not send the changes it left out (an operation not published, a table dropped and added back, a row filter or column list), and no later read of the slot brings them back. Nothing past this point was acknowledged. Once it is as Weir needs it, run `weir init --accept-publication`, then, with `weir run` running, `weir resync --table T` for each configured table whose changes it may have hidden (this re-reads the table from the source and rewrites what differs); if the change could hide nothing (an owner or a rename), `weir init --accept-publication` alone. If the config's `publication` names another publication than before, put the old name back instead: the slot can stream only a publication that existed when its changes were written"
            ),
        }
    }
}

/// Each configured table's leaves (partitions, or the table itself), by the table's OID.
pub(super) type LeafSets = HashMap<u32, std::collections::BTreeSet<String>>;

/// Reads the configured tables' leaves (a table that is not partitioned is its own
/// leaf): one made UNLOGGED while Weir streams stops the run (its changes are no
/// longer in the WAL); a partition detached or dropped is warned of once (no change
/// is sent for its rows, which stay staged and in the target).
pub(super) async fn check_relations(
    catalog: &tokio_postgres::Client,
    tables: &[TableConfig],
    oids: &[u32],
    leaf_sets: &mut Option<LeafSets>,
) -> Result<(), PgSourceError> {
    let rows = catalog
        .query(
            "SELECT t.oid, c.oid::regclass::text, c.relpersistence = 'u' \
             FROM unnest($1::oid[]) AS t(oid) CROSS JOIN LATERAL ( \
               SELECT relid FROM pg_partition_tree(t.oid::regclass) WHERE isleaf \
               UNION ALL SELECT t.oid::regclass WHERE NOT EXISTS (SELECT 1 FROM pg_partition_tree(t.oid::regclass))) AS p \
             JOIN pg_class c ON c.oid = p.relid",
            &[&oids],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the source tables' partitions",
            source: PgError(source),
        })?;
    let unlogged: Vec<String> = rows
        .iter()
        .filter(|r| r.get::<_, bool>(2))
        .map(|r| r.get(1))
        .collect();
    if !unlogged.is_empty() {
        let named: Vec<String> = tables
            .iter()
            .zip(oids)
            .filter(|(_, oid)| {
                rows.iter()
                    .any(|r| r.get::<_, u32>(0) == **oid && r.get::<_, bool>(2))
            })
            .map(|(t, _)| t.source.to_string())
            .collect();
        tracing::error!(relations = ?unlogged, "a source table was made UNLOGGED while Weir streamed; stopping");
        return Err(PgSourceError::Estate {
            subject: "the source tables".into(),
            problems: format!(
                "{} became UNLOGGED while Weir streamed: PostgreSQL writes no WAL for it, so its changes since are not in the stream. Nothing past this point was acknowledged. Run `ALTER TABLE … SET LOGGED;`, then, with `weir run` running, `weir resync --table T` for {} (changes made while it was unlogged were never in the WAL)",
                unlogged.join(", "),
                named.join(", ")
            ),
        });
    }
    // A configured table under another name: a `RENAME` of the table sends the stream
    // a new Relation message, which stops the run, but an `ALTER SCHEMA … RENAME` sends
    // none, and the stream would go on staging the table a config no longer names.
    let names = catalog
        .query(
            "SELECT c.oid, n.nspname::text, c.relname::text FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY($1::oid[])",
            &[&oids],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the source tables' names",
            source: PgError(source),
        })?;
    for row in &names {
        let (oid, schema, name): (u32, String, String) = (row.get(0), row.get(1), row.get(2));
        if let Some((t, _)) = tables.iter().zip(oids).find(|(_, o)| **o == oid)
            && (t.source.schema != schema || t.source.name != name)
        {
            return Err(PgSourceError::Renamed {
                configured: t.source.to_string(),
                oid,
                now: format!("{schema}.{name}"),
            });
        }
    }
    let mut now: HashMap<u32, std::collections::BTreeSet<String>> = HashMap::new();
    for r in &rows {
        now.entry(r.get(0)).or_default().insert(r.get(1));
    }
    if let Some(before) = &*leaf_sets {
        for (t, oid) in tables.iter().zip(oids) {
            let gone: Vec<&String> = before
                .get(oid)
                .into_iter()
                .flatten()
                .filter(|leaf| !now.get(oid).is_some_and(|n| n.contains(*leaf)))
                .collect();
            if !gone.is_empty() && now.contains_key(oid) {
                tracing::warn!(table = %t.source, partitions = ?gone, "partitions of a source table were detached or dropped: PostgreSQL sends no change for their rows, which stay staged and in the target; `weir resync --table T` makes the target follow the table");
            }
        }
    }
    *leaf_sets = Some(now);
    Ok(())
}
