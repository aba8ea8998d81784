//! Column types users define, read as the built-in types Weir models.
//!
//! * A **domain** is its base type, through domains of domains, with the domain's
//!   modifier (`CREATE DOMAIN price AS numeric(12,2)` is `numeric(12,2)`): its values
//!   are the base type's, in text and in binary (a domain's output and send functions
//!   are its base type's). Its constraints (`CHECK`, `NOT NULL`) stay the source's.
//! * An **enum** is `text`: its value is its label, which is what its output and send
//!   functions give. The set of labels stays the source's.
//! * Any other type (an array, a range, a composite, an extension's type) is kept as it
//!   is: Weir does not model it.
//!
//! Every place that reads a source column's type goes through here (the catalog read
//! at start, the first load, the watermark snapshot, reads for `verify`, the stream's
//! choice of binary, and each Relation message of the stream), so a value decodes alike
//! wherever it comes from. The catalog is read for what it holds now: a domain's base
//! type never changes (`ALTER DOMAIN` cannot retype it) and an enum is always text, so
//! the present catalog says what a column held in any earlier transaction too; a type
//! dropped since is not found, and stays a type Weir does not model.

use std::collections::HashMap;

use crate::config::TableName;
use crate::pg::pgoutput::Relation;
use crate::pg::pgtypes;

use super::error::PgSourceError;
use crate::pgerror::PgError;

/// `text`'s OID: an enum's values are its labels.
const TEXT: u32 = 25;
/// Domains of domains deeper than this are left as they are (PostgreSQL sets no limit;
/// no schema needs one).
const DEPTH_MAX: usize = 32;

/// What a type is, as far as reading its values goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A domain over `base`, whose own modifier is `modifier` (-1: none).
    Domain { base: u32, modifier: i32 },
    /// An enum: its values are its labels.
    Enum,
    /// A type read as it is (built in, or one Weir does not model), or none (dropped).
    Other,
}

/// The user-defined types met so far, read from the source's catalog as they are met.
#[derive(Debug, Default)]
pub(super) struct UserTypes {
    kinds: HashMap<u32, Kind>,
    /// The type each column of each relation had in its last Relation message (OID
    /// as sent, before resolving).
    sent: HashMap<(u32, String), u32>,
}

impl UserTypes {
    /// Reads from `client`'s catalog what is not yet known of `oids`, and of the types
    /// under the domains among them.
    pub(super) async fn learn(
        &mut self,
        client: &tokio_postgres::Client,
        oids: impl IntoIterator<Item = u32>,
    ) -> Result<(), PgSourceError> {
        let mut unknown: Vec<u32> = oids.into_iter().filter(|oid| self.to_learn(*oid)).collect();
        for _ in 0..DEPTH_MAX {
            unknown.sort_unstable();
            unknown.dedup();
            if unknown.is_empty() {
                break;
            }
            let rows = client
                .query(
                    "SELECT oid, typtype::text, typbasetype, typtypmod FROM pg_type WHERE oid = ANY($1)",
                    &[&unknown],
                )
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "read the source's column types (domains and enums)",
                    source: PgError(source),
                })?;
            for oid in &unknown {
                self.kinds.insert(*oid, Kind::Other);
            }
            let mut next = Vec::new();
            for row in rows {
                let (oid, kind, base, modifier): (u32, String, u32, i32) =
                    (row.get(0), row.get(1), row.get(2), row.get(3));
                let kind = match kind.as_str() {
                    "d" => {
                        if self.to_learn(base) {
                            next.push(base);
                        }
                        Kind::Domain { base, modifier }
                    }
                    "e" => Kind::Enum,
                    _ => Kind::Other,
                };
                self.kinds.insert(oid, kind);
            }
            unknown = next;
        }
        Ok(())
    }

    /// Whether `oid` may be a domain or an enum not looked up yet: a type Weir models
    /// is neither.
    fn to_learn(&self, oid: u32) -> bool {
        pgtypes::column_type(oid, -1).is_none() && !self.kinds.contains_key(&oid)
    }

    /// The type and modifier a column of type `oid` with `modifier` holds values of:
    /// a domain's base type (the column's modifier, else the innermost domain's that
    /// has one), `text` for an enum, else the type itself.
    pub(super) fn resolve(&self, oid: u32, modifier: i32) -> (u32, i32) {
        let (mut oid, mut modifier) = (oid, modifier);
        for _ in 0..DEPTH_MAX {
            match self.kinds.get(&oid) {
                Some(&Kind::Domain {
                    base,
                    modifier: own,
                }) => {
                    if modifier < 0 {
                        modifier = own;
                    }
                    oid = base;
                }
                Some(Kind::Enum) => return (TEXT, -1),
                Some(Kind::Other) | None => break,
            }
        }
        (oid, modifier)
    }

    /// Whether `oid` is a domain over an enum (through domains): PostgreSQL compares
    /// its values by none of the enum's operators (`color_d <= color_d` does not
    /// exist), which key order, partition predicates and resyncs need.
    pub(super) fn is_domain_over_enum(&self, oid: u32) -> bool {
        let mut oid = oid;
        let mut domain = false;
        for _ in 0..DEPTH_MAX {
            match self.kinds.get(&oid) {
                Some(&Kind::Domain { base, .. }) => {
                    domain = true;
                    oid = base;
                }
                Some(Kind::Enum) => return domain,
                Some(Kind::Other) | None => return false,
            }
        }
        false
    }

    /// Gives each column of a Relation message the type its values are read as
    /// ([`Self::resolve`]), reading the types it has not met from `client`'s catalog.
    pub(super) async fn resolve_relation(
        &mut self,
        client: &tokio_postgres::Client,
        relation: &mut Relation,
    ) -> Result<(), PgSourceError> {
        self.learn(client, relation.columns.iter().map(|c| c.type_oid))
            .await?;
        for column in &mut relation.columns {
            let sent = column.type_oid;
            (column.type_oid, column.type_modifier) =
                self.resolve(column.type_oid, column.type_modifier);
            // Retyped between an enum or a domain and what it holds: the same type to
            // Weir, so nothing stops; but an `ALTER … TYPE … USING` rewrote the rows
            // without a change in the WAL.
            let before = self.sent.insert((relation.oid, column.name.clone()), sent);
            if let Some(before) = before
                && before != sent
                && self.resolve(before, -1).0 == column.type_oid
            {
                tracing::warn!(table = %format!("{}.{}", relation.namespace, relation.name), column = %column.name, "a column was retyped between an enum or a domain and the type it holds: an ALTER … TYPE … USING rewrites its rows without a change in the WAL, which Weir cannot see; run `weir resync --table` for it");
            }
        }
        Ok(())
    }
}

/// The type OID and modifier each column of a source table holds values of (domains
/// and enums resolved: [`UserTypes::resolve`]).
pub(super) async fn column_types(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<HashMap<String, (u32, i32)>, PgSourceError> {
    let rows = client
        .query(
            "SELECT a.attname::text, a.atttypid, a.atttypmod FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&table.quoted()],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read a source table's column types",
            source: PgError(source),
        })?;
    let mut types = UserTypes::default();
    types.learn(client, rows.iter().map(|r| r.get(1))).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), types.resolve(r.get(1), r.get(2))))
        .collect())
}

/// Whether every column of the relations `oids` holds values Weir reads in binary
/// format (domains and enums resolved).
pub(super) async fn all_read_in_binary(
    client: &tokio_postgres::Client,
    oids: &[u32],
) -> Result<bool, PgSourceError> {
    let rows = client
        .query(
            "SELECT DISTINCT atttypid FROM pg_attribute \
             WHERE attrelid = ANY($1) AND attnum > 0 AND NOT attisdropped",
            &[&oids],
        )
        .await
        .map_err(|source| PgSourceError::Query {
            what: "read the column types of the source tables",
            source: PgError(source),
        })?;
    let mut types = UserTypes::default();
    types.learn(client, rows.iter().map(|r| r.get(0))).await?;
    Ok(rows
        .iter()
        .all(|r| pgtypes::reads_binary(types.resolve(r.get(0), -1).0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NUMERIC: u32 = 1700;
    const VARCHAR: u32 = 1043;
    const INTERVAL: u32 = 1186;

    fn types(kinds: &[(u32, Kind)]) -> UserTypes {
        UserTypes {
            kinds: kinds.iter().copied().collect(),
            sent: HashMap::new(),
        }
    }

    #[test]
    fn a_domain_is_its_base_type_with_the_innermost_modifier_given() {
        // price AS numeric(12,2); cost AS price; code AS varchar(8); bare AS numeric.
        let price_mod = (12 << 16 | 2) + 4;
        let t = types(&[
            (
                20_000,
                Kind::Domain {
                    base: NUMERIC,
                    modifier: price_mod,
                },
            ),
            (
                20_001,
                Kind::Domain {
                    base: 20_000,
                    modifier: -1,
                },
            ),
            (
                20_002,
                Kind::Domain {
                    base: VARCHAR,
                    modifier: 12,
                },
            ),
            (
                20_003,
                Kind::Domain {
                    base: NUMERIC,
                    modifier: -1,
                },
            ),
        ]);
        assert_eq!(t.resolve(20_000, -1), (NUMERIC, price_mod));
        assert_eq!(t.resolve(20_001, -1), (NUMERIC, price_mod));
        assert_eq!(t.resolve(20_002, -1), (VARCHAR, 12));
        assert_eq!(t.resolve(20_003, -1), (NUMERIC, -1));
        // A column's own modifier wins (pgoutput gives -1 for a domain's column).
        assert_eq!(t.resolve(20_002, 20), (VARCHAR, 20));
    }

    #[test]
    fn an_enum_is_text_and_other_types_stay_as_they_are() {
        let t = types(&[
            (30_000, Kind::Enum),
            (
                30_001,
                Kind::Domain {
                    base: 30_000,
                    modifier: -1,
                },
            ),
            (
                30_002,
                Kind::Domain {
                    base: INTERVAL,
                    modifier: -1,
                },
            ),
            (30_003, Kind::Other),
        ]);
        assert_eq!(t.resolve(30_000, -1), (TEXT, -1));
        assert_eq!(t.resolve(30_001, -1), (TEXT, -1));
        assert_eq!(t.resolve(30_002, -1), (INTERVAL, -1));
        assert_eq!(t.resolve(30_003, 7), (30_003, 7));
        assert_eq!(t.resolve(NUMERIC, 5), (NUMERIC, 5));
        assert_eq!(t.resolve(99_999, -1), (99_999, -1));
    }

    #[test]
    fn a_domain_over_an_enum_is_told_apart() {
        let t = types(&[
            (50_000, Kind::Enum),
            (
                50_001,
                Kind::Domain {
                    base: 50_000,
                    modifier: -1,
                },
            ),
            (
                50_002,
                Kind::Domain {
                    base: 50_001,
                    modifier: -1,
                },
            ),
            (
                50_003,
                Kind::Domain {
                    base: NUMERIC,
                    modifier: -1,
                },
            ),
        ]);
        assert!(!t.is_domain_over_enum(50_000));
        assert!(t.is_domain_over_enum(50_001));
        assert!(t.is_domain_over_enum(50_002));
        assert!(!t.is_domain_over_enum(50_003));
        assert!(!t.is_domain_over_enum(NUMERIC));
    }

    #[test]
    fn a_cycle_of_domains_ends() {
        // Not a schema PostgreSQL allows, but the catalog is external input.
        let t = types(&[
            (
                40_000,
                Kind::Domain {
                    base: 40_001,
                    modifier: -1,
                },
            ),
            (
                40_001,
                Kind::Domain {
                    base: 40_000,
                    modifier: -1,
                },
            ),
        ]);
        let (oid, _) = t.resolve(40_000, -1);
        assert!(oid == 40_000 || oid == 40_001);
    }
}
