//! Fuzzes the decoder of Debezium-envelope JSON lines: any bytes, cut into lines as the
//! JSON-lines source cuts a feed, must decode into changes or into a bad line saying
//! why, never panic. The tables are a fixed config read by the real config parser, with
//! every column type and grain, so that values reach every conversion and partitioning.
#![no_main]

use std::path::Path;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use weir_core::config::{Config, TableConfig};
use weir_core::envelope::decode_line;
use weir_core::feed::StageChange;
use weir_core::fixtures::{OrdersTable, jsonl_config};

/// The other tables, beside the orders table of the shared test config (with two more
/// column types): every column type and grain.
const OTHER_TABLES: &str = r#"
[[table]]
source = "app.events"
target = "public.events_by_hour"
key = ["tenant", "seq"]
partition_by = "at"
grain = "hour"
on_null_partition = "reject"
columns = { tenant = "text", seq = "integer", at = "timestamptz", payload = "jsonb", weight = "double precision", ok = "boolean", blob = "bytea" }

[[table]]
source = "app.accounts"
target = "public.accounts_by_region"
key = ["id"]
partition_by = "region"
grain = "value"
columns = { id = "uuid", region = "varchar(8)", opened = "timestamp", tier = "smallint", score = "real", closed_on = "date" }
"#;

static TABLES: LazyLock<Vec<TableConfig>> = LazyLock::new(|| {
    let orders = OrdersTable::jsonl("analytics.fact_orders")
        .more_columns(r#"created_at = "timestamptz", attrs = "json""#);
    let config = jsonl_config("", "", &format!("{orders}{OTHER_TABLES}"));
    Config::parse(&config, Path::new("weir.toml"))
        .expect("the fuzz target's own config is valid")
        .tables
});

fuzz_target!(|data: &[u8]| {
    let tables = TABLES.as_slice();
    let mut end = 0u64;
    for raw in data.split_inclusive(|b| *b == b'\n') {
        end += raw.len() as u64;
        let body = raw.strip_suffix(b"\n").unwrap_or(raw);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        match decode_line(tables, body, end) {
            Ok(None) => {}
            Ok(Some(line)) => {
                // A good line is at least one change, each to a configured table.
                assert!(!line.changes.is_empty());
                for change in &line.changes {
                    if let StageChange::Upsert { table, .. }
                    | StageChange::UpsertUnchanged { table, .. }
                    | StageChange::Delete { table, .. }
                    | StageChange::Truncate { table } = change
                    {
                        assert!(tables.iter().any(|t| t.source.to_string() == *table));
                    }
                }
            }
            Err(bad) => {
                // A bad line says why; what it could not read, it does not make up.
                assert!(!bad.reason.is_empty());
                assert!(bad.tx_known || (bad.tx_id.is_none() && bad.table.is_none()));
            }
        }
    }
});
