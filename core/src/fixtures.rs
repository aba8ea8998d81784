//! The orders test config, written once: the `[[table]]` of the orders feed and the
//! whole `weir.toml` around it, for the tests, the fuzz targets and the benchmarks.
//!
//! Test-only (`cfg(test)` or the `test-support` feature): `weir demo` and the engine
//! never read it. Every table here is `public.orders`-shaped (id, customer,
//! order_date, amount, status), keyed by `id` and partitioned by `order_date`; a
//! caller states only what differs (the target, a plugin, the key, the grain).
//!
//! The spelling is stable on purpose: some tests patch a written config by replacing
//! `path = "feed.jsonl"`, `path = "stage"`, `key = ["id"]`, `grain = "day"`,
//! `partition_by = "order_date"` or `dsn_env = "WEIR_TARGET_DSN"`.

use std::fmt;

/// The orders table's columns, as the entries of a `columns = { … }` inline table
/// (without the braces, so that a caller can add more).
pub const ORDERS_COLUMNS: &str = r#"id = "bigint", customer = "text", order_date = "date", amount = "numeric(12,2)", status = "text""#;

/// The same columns as (name, declared type) pairs, in the table's order: a plugin
/// job's input columns (`InputColumns::new`) in tests and benchmarks.
pub const ORDERS_COLUMN_TYPES: [(&str, &str); 5] = [
    ("id", "bigint"),
    ("customer", "text"),
    ("order_date", "date"),
    ("amount", "numeric(12,2)"),
    ("status", "text"),
];

/// The environment variable of the target's DSN in the configs here.
pub const TARGET_DSN_ENV: &str = "WEIR_TARGET_DSN";

/// The environment variable of a PostgreSQL source's DSN in the configs here.
pub const SOURCE_DSN_ENV: &str = "WEIR_SOURCE_DSN";

/// A `[[table]]` of the orders feed: `public.orders` to a target, keyed by `id`,
/// partitioned by day on `order_date`, with the [`ORDERS_COLUMNS`] (a JSON-lines feed)
/// or none (a PostgreSQL source, whose catalog has them).
///
/// [`OrdersTable::body`] is the section without its header; `Display` writes the whole
/// section, `[[table]]` included.
#[derive(Debug, Clone)]
pub struct OrdersTable {
    source: String,
    target: String,
    key: Vec<String>,
    grain: String,
    columns: Option<String>,
    extra: String,
}

impl OrdersTable {
    /// The orders table of a JSON-lines feed into `target`, with the [`ORDERS_COLUMNS`].
    pub fn jsonl(target: &str) -> OrdersTable {
        OrdersTable {
            source: "public.orders".to_owned(),
            target: target.to_owned(),
            key: vec!["id".to_owned()],
            grain: "day".to_owned(),
            columns: Some(ORDERS_COLUMNS.to_owned()),
            extra: String::new(),
        }
    }

    /// The orders table of a PostgreSQL source into `target`: no columns.
    pub fn postgres(target: &str) -> OrdersTable {
        OrdersTable {
            columns: None,
            ..OrdersTable::jsonl(target)
        }
    }

    /// Reads `source` (`schema.table`) instead of `public.orders`.
    pub fn source(mut self, source: &str) -> OrdersTable {
        self.source = source.to_owned();
        self
    }

    /// Keys the table by `key` instead of `id`.
    pub fn key(mut self, key: &[&str]) -> OrdersTable {
        self.key = key.iter().map(|k| (*k).to_owned()).collect();
        self
    }

    /// Partitions by `grain` (`hour`, `month`, `value`, …) instead of `day`.
    pub fn grain(mut self, grain: &str) -> OrdersTable {
        self.grain = grain.to_owned();
        self
    }

    /// Adds `entries` (e.g. `note = "text"`) to the columns.
    pub fn more_columns(mut self, entries: &str) -> OrdersTable {
        let columns = self.columns.get_or_insert_with(String::new);
        if !columns.is_empty() {
            columns.push_str(", ");
        }
        columns.push_str(entries);
        self
    }

    /// Adds `lines` at the end of the section (a plugin, `write = "merge"`, a
    /// `[table.plugin_config]` table, …); several calls add in order.
    pub fn extra(mut self, lines: &str) -> OrdersTable {
        if !lines.is_empty() {
            self.extra.push('\n');
            self.extra.push_str(lines);
        }
        self
    }

    /// The section's lines without the `[[table]]` header.
    pub fn body(&self) -> String {
        let key = self
            .key
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut body = format!(
            "source = \"{}\"\ntarget = \"{}\"\nkey = [{key}]\npartition_by = \"order_date\"\ngrain = \"{}\"",
            self.source, self.target, self.grain
        );
        if let Some(columns) = &self.columns {
            body.push_str(&format!("\ncolumns = {{ {columns} }}"));
        }
        body.push_str(&self.extra);
        body
    }
}

impl fmt::Display for OrdersTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\n[[table]]\n{}\n", self.body())
    }
}

/// A whole `weir.toml` for the JSON-lines feed `feed.jsonl`, staged in `stage`, into
/// the target of `$WEIR_TARGET_DSN`: `source_extra` is added to `[source]`, `engine`
/// is the `[engine]` section's body, `tables` the `[[table]]` sections (e.g. an
/// [`OrdersTable`], written with `to_string`).
pub fn jsonl_config(source_extra: &str, engine: &str, tables: &str) -> String {
    format!(
        r#"[source]
kind = "jsonl"
path = "feed.jsonl"
{source_extra}

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "{TARGET_DSN_ENV}"

[engine]
{engine}
{tables}"#
    )
}

/// A whole `weir.toml` for a PostgreSQL source of `$WEIR_SOURCE_DSN` with slot and
/// publication `slot`, staged in `stage`, into the target of `$WEIR_TARGET_DSN`:
/// `source_extra` is added to `[source]` and may open further sections (`[engine]`),
/// `tables` are the `[[table]]` sections.
pub fn postgres_config(slot: &str, source_extra: &str, tables: &str) -> String {
    postgres_config_with(
        SOURCE_DSN_ENV,
        TARGET_DSN_ENV,
        slot,
        slot,
        source_extra,
        tables,
    )
}

/// [`postgres_config`] with other DSN variables and a publication of another name than
/// the slot (the benchmarks').
pub fn postgres_config_with(
    source_dsn_env: &str,
    target_dsn_env: &str,
    slot: &str,
    publication: &str,
    source_extra: &str,
    tables: &str,
) -> String {
    format!(
        "[source]\nkind = \"postgres\"\ndsn_env = \"{source_dsn_env}\"\nslot = \"{slot}\"\npublication = \"{publication}\"\n{source_extra}\n\
         [stage]\npath = \"stage\"\n[target]\nkind = \"postgres\"\ndsn_env = \"{target_dsn_env}\"\n{tables}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("/etc/weir/weir.toml"))
            .unwrap_or_else(|e| panic!("{e}:\n{text}"))
    }

    #[test]
    fn the_jsonl_config_reads_the_orders_table_with_its_columns() {
        let config = parse(&jsonl_config(
            "",
            "",
            &OrdersTable::jsonl("analytics.fact_orders").to_string(),
        ));
        let table = &config.tables[0];
        assert_eq!(table.source.to_string(), "public.orders");
        assert_eq!(table.target.to_string(), "analytics.fact_orders");
        assert_eq!(
            table
                .columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["id", "customer", "order_date", "amount", "status"]
        );
    }

    #[test]
    fn the_postgres_config_reads_a_table_without_columns() {
        let table = OrdersTable::postgres("public.orders_copy")
            .key(&["id", "order_date"])
            .grain("month");
        let config = parse(&postgres_config(
            "slot_a",
            "[engine]\nflush_interval_ms = 100",
            &table.to_string(),
        ));
        assert!(config.tables[0].columns.is_empty());
        assert_eq!(
            table.body(),
            "source = \"public.orders\"\ntarget = \"public.orders_copy\"\nkey = [\"id\", \"order_date\"]\n\
             partition_by = \"order_date\"\ngrain = \"month\""
        );
    }
}
