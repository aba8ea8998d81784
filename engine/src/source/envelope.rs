//! One line of a Debezium-envelope JSON-lines feed ([`super::jsonl`]) decoded into
//! stage changes.
//!
//! A pure function of the line's bytes and the configured tables, apart from the
//! feed's I/O and transaction grouping, so that it is fuzzed on its own
//! (`fuzz/fuzz_targets/jsonl_envelope.rs`). A line that cannot be decoded is a
//! [`BadLine`] saying why, with the transaction and table when they could be read.
//! Decoding never panics, whatever the bytes.

use serde_json::{Map, Value as Json};

use super::{Op, Row, keyed_changes};
use crate::config::{TableConfig, TableName};
use crate::stage::StageChange;
use crate::value::Value;

/// A transaction's identity in the feed (`source.txId`).
pub type TxId = Option<String>;

/// Decodes the line `body` (without its line break) of a transaction that ends at
/// source position `end`, against the configured `tables`.
pub fn decode_line(tables: &[TableConfig], body: &[u8], end: u64) -> Result<DecodedLine, BadLine> {
    let text = std::str::from_utf8(body).map_err(|e| {
        BadLine::unknown(format!(
            "line is not valid UTF-8 (invalid byte at column {})",
            e.valid_up_to() + 1
        ))
    })?;
    let json: Json = serde_json::from_str(text)
        .map_err(|e| BadLine::unknown(format!("malformed JSON ({e})")))?;
    let Json::Object(mut envelope) = json else {
        return Err(BadLine::unknown(
            "a line must be a JSON object (a Debezium envelope)".into(),
        ));
    };
    if envelope.contains_key("schema")
        && let Some(Json::Object(payload)) = envelope.remove("payload")
    {
        envelope = payload;
    }
    let source = match envelope.get("source") {
        Some(Json::Object(s)) => s,
        _ => {
            return Err(BadLine::unknown(
                "missing `source` object (with `schema` and `table`)".into(),
            ));
        }
    };
    let tx_id = match source.get("txId") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Number(n)) => Some(n.to_string()),
        Some(_) => {
            return Err(BadLine::unknown(
                "`source.txId` must be a number or a string".into(),
            ));
        }
    };
    let field = |name: &str| match source.get(name) {
        Some(Json::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(BadLine::bad(
            tx_id.clone(),
            None,
            format!("missing `source.{name}`"),
        )),
    };
    let table_name = TableName {
        schema: field("schema")?,
        name: field("table")?,
    };
    let qualified = table_name.to_string();
    let bad = |reason: String| BadLine::bad(tx_id.clone(), Some(qualified.clone()), reason);
    let op = match envelope.get("op") {
        Some(Json::String(op)) => match op.as_str() {
            "c" => Op::Insert,
            "u" => Op::Update,
            "d" => Op::Delete,
            "r" => Op::Read,
            other => return Err(bad(format!("unknown op `{other}`: expected c, u, d or r"))),
        },
        Some(_) => return Err(bad("`op` must be a string".into())),
        None => return Err(bad("missing field `op`".into())),
    };
    let table = tables.iter().find(|t| t.source == table_name).ok_or_else(|| {
        bad(format!("table `{qualified}` is not configured: add a [[table]] with source = \"{qualified}\""))
    })?;
    let ts_ms = [source.get("ts_ms"), envelope.get("ts_ms")]
        .into_iter()
        .flatten()
        .find_map(Json::as_i64);
    let before = image(table, envelope.get("before"), "before").map_err(&bad)?;
    let after = image(table, envelope.get("after"), "after").map_err(&bad)?;
    let changes = keyed_changes(
        table,
        op,
        before,
        after,
        end,
        ts_ms.and_then(|ms| ms.checked_mul(1000)),
    )
    .map_err(&bad)?;
    Ok(DecodedLine { tx_id, changes })
}

/// The changes of one good line, and the transaction they belong to.
#[derive(Debug)]
pub struct DecodedLine {
    /// `source.txId`; `None`: the line is a transaction of its own.
    pub tx_id: TxId,
    pub changes: Vec<StageChange>,
}

/// Why a line is bad, with what could be read of it.
#[derive(Debug)]
pub struct BadLine {
    /// Whether the line's transaction could be read (`tx_id` is meaningful).
    pub tx_known: bool,
    pub tx_id: TxId,
    /// `schema.table`, when it could be read.
    pub table: Option<String>,
    pub reason: String,
}

impl BadLine {
    /// A line whose transaction is known.
    pub fn bad(tx_id: TxId, table: Option<String>, reason: String) -> BadLine {
        BadLine {
            tx_known: true,
            tx_id,
            table,
            reason,
        }
    }

    /// A line too broken to say which transaction it belongs to.
    pub fn unknown(reason: String) -> BadLine {
        BadLine {
            tx_known: false,
            tx_id: None,
            table: None,
            reason,
        }
    }
}

/// Converts a before/after object into a row of the table's declared columns.
fn image(table: &TableConfig, json: Option<&Json>, which: &str) -> Result<Option<Row>, String> {
    let object: &Map<String, Json> = match json {
        None | Some(Json::Null) => return Ok(None),
        Some(Json::Object(o)) => o,
        Some(_) => return Err(format!("`{which}` must be an object or null")),
    };
    if let Some(unknown) = object.keys().find(|k| table.column(k).is_none()) {
        return Err(format!(
            "column `{unknown}` in `{which}` is not declared in the columns of {}",
            table.source
        ));
    }
    let mut row = Vec::with_capacity(table.columns.len());
    for column in &table.columns {
        // An absent column stays absent (the key and partition checks name it); the
        // transform reads it as NULL.
        let Some(json) = object.get(&column.name) else {
            continue;
        };
        let value = Value::from_json(column.ty, json).map_err(|e| {
            format!(
                "column `{}` ({}) in `{which}`: {e}",
                column.name, column.declared
            )
        })?;
        row.push((column.name.clone(), value));
    }
    Ok(Some(row))
}
