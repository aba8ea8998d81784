//! Data-driven test cases shared by the plugins of every language (feature `cases`).
//!
//! A case file is JSON lines; each line is one case:
//!
//! ```json
//! {"case": "a name",
//!  "partition": {"table": "public.orders", "name": "2026-03-01"},
//!  "config": {"rate": "1.0825"},
//!  "chunks": [[STAGED_ROW, ...], ...],
//!  "expect": {"rows": [{"COLUMN": VALUE, ...}, ...],
//!             "rejections": [{"key": [VALUE, ...], "reason": "..."}]}}
//! ```
//!
//! or `"expect": {"error": {"invalid-config": "..."}}` (also `invalid-input`, `other`)
//! when the session must fail. The session is run as the host runs it, once on each
//! contract: constructed with the partition and config (on 0.2 also the input schema:
//! every column name of the case's rows in order of first appearance), one `push` per
//! chunk (on 0.2 each row's values by position, absent columns `none`), then `finish`;
//! the rows and rejections of every call are concatenated, in order, and both runs
//! must give the expected output. Expected rows are objects in
//! the declared column order (compared by column name).
//!
//! A `STAGED_ROW` is `{"key": [VALUE, ...], "op": "insert" | "update" | "delete" |
//! "read", "commit_position": N, "commit_time": N | null, "columns": {"NAME": VALUE,
//! ...}}` (columns in source order). A `VALUE` is the WIT `value` as JSON: `null`,
//! `{"boolean": true}`, `{"integer": 1}`, `{"float": 1.5}` (or `"NaN"`, `"Infinity"`,
//! `"-Infinity"`), `{"text": "…"}`, `{"bytes": "hex"}`, `{"decimal": "1.50"}`,
//! `{"date": DAYS}`, `{"timestamp": MICROS}`, `{"json": "…"}`, `{"unsupported":
//! {"type-name": "…", "text": "…"}}`. Integers must stay within ±2^53 so that a
//! JavaScript reader can take them as numbers (or be given as decimal strings).

use serde_json::{Map, Value as J, json};

use crate::bindings_0_2::exports::weir::transform0_2_0::transform as v2;
use crate::{
    ColumnValue, Description, Error, GuestSession, Op, PartitionInfo, PushOutput, StagedRow,
    UnsupportedValue, Value, run_session, run_session_0_2,
};

/// Runs every case of a JSON-lines text against session type `S` (whose description
/// is `description`) on both contracts, and returns one message per failed case
/// (empty: all passed).
pub fn run_cases<S: GuestSession + v2::GuestSession>(
    jsonl: &str,
    description: &Description,
) -> Vec<String> {
    let mut failures = Vec::new();
    let mut count = 0usize;
    for (n, line) in jsonl.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        count += 1;
        if let Err(msg) = run_case::<S>(line, description) {
            failures.push(format!("line {}: {msg}", n + 1));
        }
    }
    if count == 0 {
        failures.push("no cases".into());
    }
    failures
}

fn run_case<S: GuestSession + v2::GuestSession>(
    line: &str,
    description: &Description,
) -> Result<(), String> {
    let case: J = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let name = case["case"].as_str().unwrap_or("(unnamed)").to_owned();
    let partition = PartitionInfo {
        table: str_field(&case["partition"], "table")?,
        name: str_field(&case["partition"], "name")?,
    };
    let config = match &case["config"] {
        J::Null => Vec::new(),
        J::Object(m) => m
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|v| (k.clone(), v.to_owned()))
                    .ok_or_else(|| format!("config `{k}` is not a string"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("config is not an object".into()),
    };
    let chunks = case["chunks"]
        .as_array()
        .ok_or("chunks is not an array")?
        .iter()
        .map(|chunk| {
            chunk
                .as_array()
                .ok_or_else(|| "a chunk is not an array".to_owned())?
                .iter()
                .map(staged_row_from_json)
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (schema, chunks_0_2) = positional(&chunks);
    let partition_0_2 = v2::PartitionInfo {
        table: partition.table.clone(),
        name: partition.name.clone(),
    };
    let as_json = |result: Result<PushOutput, Error>| match result {
        Ok(out) => output_to_json(&out, description),
        Err(e) => json!({ "error": error_to_json(&e) }),
    };
    let runs = [
        (
            "0.1",
            as_json(run_session::<S>(partition, config.clone(), chunks)),
        ),
        (
            "0.2",
            as_json(run_session_0_2::<S>(
                partition_0_2,
                schema,
                config,
                chunks_0_2,
            )),
        ),
    ];
    let expected = &case["expect"];
    for (contract, actual) in runs {
        if &actual != expected {
            return Err(format!(
                "case `{name}` on contract {contract}:\n  expected {expected}\n  actual   {actual}"
            ));
        }
    }
    Ok(())
}

/// A case's rows on contract 0.2: the schema (every column name in order of first
/// appearance; key positions where the first row's key values sit among its columns)
/// and each row's values by position.
fn positional(chunks: &[Vec<StagedRow>]) -> (v2::InputSchema, Vec<Vec<v2::StagedRow>>) {
    let mut names: Vec<&str> = Vec::new();
    for row in chunks.iter().flatten() {
        for c in &row.columns {
            if !names.contains(&c.name.as_str()) {
                names.push(&c.name);
            }
        }
    }
    let key = chunks
        .iter()
        .flatten()
        .next()
        .map(|first| {
            first
                .key
                .iter()
                .filter_map(|k| {
                    let name = &first.columns.iter().find(|c| &c.value == k)?.name;
                    names.iter().position(|n| n == name).map(|p| p as u32)
                })
                .collect()
        })
        .unwrap_or_default();
    let rows = chunks
        .iter()
        .map(|chunk| {
            chunk
                .iter()
                .map(|row| v2::StagedRow {
                    key: row.key.clone(),
                    values: names
                        .iter()
                        .map(|n| {
                            let found = row.columns.iter().find(|c| c.name == *n);
                            found.map(|c| c.value.clone())
                        })
                        .collect(),
                    op: match row.op {
                        Op::Insert => v2::Op::Insert,
                        Op::Update => v2::Op::Update,
                        Op::Delete => v2::Op::Delete,
                        Op::Read => v2::Op::Read,
                    },
                    commit_position: row.commit_position,
                    commit_time: row.commit_time,
                })
                .collect()
        })
        .collect();
    let schema = v2::InputSchema {
        columns: names
            .iter()
            .map(|n| v2::InputColumn {
                name: (*n).to_owned(),
                type_name: String::new(),
            })
            .collect(),
        key,
    };
    (schema, rows)
}

fn str_field(v: &J, field: &str) -> Result<String, String> {
    v[field]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("`{field}` is not a string"))
}

/// A staged row from its JSON form (see the module documentation).
pub fn staged_row_from_json(v: &J) -> Result<StagedRow, String> {
    let key = v["key"]
        .as_array()
        .ok_or("key is not an array")?
        .iter()
        .map(value_from_json)
        .collect::<Result<_, _>>()?;
    let op = match v["op"].as_str() {
        Some("insert") => Op::Insert,
        Some("update") => Op::Update,
        Some("delete") => Op::Delete,
        Some("read") => Op::Read,
        _ => return Err("op is not insert, update, delete or read".into()),
    };
    let commit_position = v["commit_position"]
        .as_u64()
        .ok_or("commit_position is not an unsigned integer")?;
    let commit_time = match &v["commit_time"] {
        J::Null => None,
        t => Some(t.as_i64().ok_or("commit_time is not an integer")?),
    };
    let columns = v["columns"]
        .as_object()
        .ok_or("columns is not an object")?
        .iter()
        .map(|(name, value)| {
            Ok(ColumnValue {
                name: name.clone(),
                value: value_from_json(value)?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(StagedRow {
        key,
        op,
        commit_position,
        commit_time,
        columns,
    })
}

/// A value from its JSON form (see the module documentation).
pub fn value_from_json(v: &J) -> Result<Value, String> {
    let J::Object(m) = v else {
        return if v.is_null() {
            Ok(Value::Null)
        } else {
            Err(format!("value {v} is neither null nor an object"))
        };
    };
    let mut entries = m.iter();
    let (Some((case, inner)), None) = (entries.next(), entries.next()) else {
        return Err(format!("value {v} does not have exactly one case"));
    };
    let bad = || format!("value {v} is not a valid {case}");
    let int = |x: &J| {
        x.as_i64()
            .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(bad)
    };
    let text = |x: &J| x.as_str().map(str::to_owned).ok_or_else(bad);
    Ok(match case.as_str() {
        "boolean" => Value::Boolean(inner.as_bool().ok_or_else(bad)?),
        "integer" => Value::Integer(int(inner)?),
        "float" => Value::Float(match inner.as_str() {
            Some("NaN") => f64::NAN,
            Some("Infinity") => f64::INFINITY,
            Some("-Infinity") => f64::NEG_INFINITY,
            _ => inner.as_f64().ok_or_else(bad)?,
        }),
        "text" => Value::Text(text(inner)?),
        "bytes" => Value::Bytes(hex_decode(&text(inner)?).ok_or_else(bad)?),
        "decimal" => Value::Decimal(text(inner)?),
        "date" => Value::Date(i32::try_from(int(inner)?).map_err(|_| bad())?),
        "timestamp" => Value::Timestamp(int(inner)?),
        "json" => Value::Json(text(inner)?),
        "unsupported" => Value::Unsupported(UnsupportedValue {
            type_name: text(&inner["type-name"])?,
            text: text(&inner["text"])?,
        }),
        _ => return Err(format!("value {v} has an unknown case")),
    })
}

/// A value in its JSON form (see the module documentation).
pub fn value_to_json(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Boolean(b) => json!({ "boolean": b }),
        Value::Integer(i) => json!({ "integer": i }),
        Value::Float(f) if f.is_nan() => json!({ "float": "NaN" }),
        Value::Float(f) if f.is_infinite() => {
            json!({ "float": if *f > 0.0 { "Infinity" } else { "-Infinity" } })
        }
        Value::Float(f) => json!({ "float": f }),
        Value::Text(s) => json!({ "text": s }),
        Value::Bytes(b) => json!({ "bytes": hex_encode(b) }),
        Value::Decimal(s) => json!({ "decimal": s }),
        Value::Date(d) => json!({ "date": d }),
        Value::Timestamp(t) => json!({ "timestamp": t }),
        Value::Json(s) => json!({ "json": s }),
        Value::Unsupported(u) => {
            json!({ "unsupported": { "type-name": u.type_name, "text": u.text } })
        }
    }
}

/// A session's output in the `expect` form: rows as objects by declared column name.
pub fn output_to_json(out: &PushOutput, description: &Description) -> J {
    let rows: Vec<J> = out
        .rows
        .iter()
        .map(|row| {
            let mut m = Map::new();
            for (i, v) in row.iter().enumerate() {
                let name = description
                    .columns
                    .get(i)
                    .map_or_else(|| format!("#{i}"), |c| c.name.clone());
                m.insert(name, value_to_json(v));
            }
            J::Object(m)
        })
        .collect();
    let rejections: Vec<J> = out
        .rejections
        .iter()
        .map(|r| {
            json!({
                "key": r.key.iter().map(value_to_json).collect::<Vec<_>>(),
                "reason": r.reason,
            })
        })
        .collect();
    json!({ "rows": rows, "rejections": rejections })
}

/// An error in the `expect` form.
pub fn error_to_json(e: &Error) -> J {
    match e {
        Error::InvalidConfig(s) => json!({ "invalid-config": s }),
        Error::InvalidInput(s) => json!({ "invalid-input": s }),
        Error::Other(s) => json!({ "other": s }),
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}
