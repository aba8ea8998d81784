//! Values as JSON, in two forms:
//!
//! * **tagged**, lossless, the form of `plugins/examples/orders-cases.jsonl` and of
//!   `weir plugin test`'s input and output: `null`, `{"boolean": true}`,
//!   `{"integer": 1}`, `{"float": 1.5}` (or `"NaN"`, `"Infinity"`, `"-Infinity"`),
//!   `{"text": "…"}`, `{"bytes": "hex"}`, `{"decimal": "1.50"}`, `{"date": DAYS}`,
//!   `{"timestamp": MICROS}`, `{"json": "…"}`, `{"unsupported": {"type-name": "…",
//!   "text": "…"}}`;
//! * **plain**, for people and `jsonb` columns (the input row of a dead letter):
//!   numbers, strings, `"2026-03-01"`, `"\\x…"` for bytes; decimals are JSON numbers
//!   with their exact digits (or strings for `NaN` and the infinities).

use serde_json::{Map, Number, Value as J, json};

use crate::value::Value;

/// The tagged JSON of a value.
pub fn tagged(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => json!({ "boolean": b }),
        Value::Int(i) => json!({ "integer": i }),
        Value::Float(f) => match Number::from_f64(*f) {
            Some(n) => json!({ "float": n }),
            None => json!({ "float": v.to_string() }),
        },
        Value::Text(s) => json!({ "text": s }),
        Value::Bytes(b) => json!({ "bytes": hex::encode(b) }),
        Value::Decimal(s) => json!({ "decimal": s }),
        Value::Date(d) => json!({ "date": d }),
        Value::Timestamp(t) => json!({ "timestamp": t }),
        Value::Json(s) => json!({ "json": s }),
        Value::Unsupported { type_name, text } => {
            json!({ "unsupported": { "type-name": type_name, "text": text } })
        }
    }
}

/// A value from JSON: tagged (an object with exactly one key that is a case name) or
/// plain (`null`, a boolean, an integer, a decimal number kept as exact text, a string
/// as text; an array or other object as a JSON document).
pub fn from_json(j: &J) -> Result<Value, String> {
    if let J::Object(map) = j
        && map.len() == 1
        && let Some((case, inner)) = map.iter().next()
        && let Some(v) = from_tagged(case, inner)?
    {
        return Ok(v);
    }
    Ok(match j {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Decimal(
                crate::value::canonical_decimal(&n.to_string())
                    .ok_or_else(|| format!("{n} is not a decimal number"))?,
            ),
        },
        J::String(s) => Value::Text(s.clone()),
        other => Value::Json(other.to_string()),
    })
}

fn from_tagged(case: &str, inner: &J) -> Result<Option<Value>, String> {
    let bad = |what: &str| format!("`{case}` takes {what}, not {inner}");
    let int = || inner.as_i64().ok_or_else(|| bad("an integer"));
    let text = || {
        inner
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| bad("a string"))
    };
    Ok(Some(match case {
        "boolean" => Value::Bool(inner.as_bool().ok_or_else(|| bad("true or false"))?),
        "integer" => Value::Int(match inner {
            J::String(s) => s.parse().map_err(|_| bad("an integer"))?,
            _ => int()?,
        }),
        "float" => Value::Float(match inner {
            J::String(s) => match s.as_str() {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                _ => return Err(bad("a number, \"NaN\", \"Infinity\" or \"-Infinity\"")),
            },
            _ => inner.as_f64().ok_or_else(|| bad("a number"))?,
        }),
        "text" => Value::Text(text()?),
        "bytes" => Value::Bytes(hex::decode(text()?).map_err(|_| bad("hex text"))?),
        "decimal" => {
            let t = text()?;
            Value::Decimal(crate::value::canonical_decimal(&t).ok_or_else(|| bad("decimal text"))?)
        }
        "date" => Value::Date(i32::try_from(int()?).map_err(|_| bad("a 32-bit integer"))?),
        "timestamp" => Value::Timestamp(match inner {
            J::String(s) => s.parse().map_err(|_| bad("an integer"))?,
            _ => int()?,
        }),
        "json" => Value::Json(text()?),
        "unsupported" => {
            let field = |name: &str| {
                inner
                    .get(name)
                    .and_then(J::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| bad("{\"type-name\": \"…\", \"text\": \"…\"}"))
            };
            Value::Unsupported {
                type_name: field("type-name")?,
                text: field("text")?,
            }
        }
        _ => return Ok(None),
    }))
}

/// The plain JSON of a value.
pub fn plain(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) => json!(i),
        Value::Float(f) => Number::from_f64(*f).map_or_else(|| J::String(v.to_string()), J::Number),
        Value::Decimal(s) => {
            serde_json::from_str::<Number>(s).map_or_else(|_| J::String(s.clone()), J::Number)
        }
        Value::Json(s) => serde_json::from_str(s).unwrap_or_else(|_| J::String(s.clone())),
        Value::Text(s) => J::String(s.clone()),
        other => J::String(other.to_string()),
    }
}

/// A row's columns as a plain JSON object.
pub fn plain_row(columns: &[(String, Value)]) -> J {
    J::Object(
        columns
            .iter()
            .map(|(k, v)| (k.clone(), plain(v)))
            .collect::<Map<_, _>>(),
    )
}

/// A key as compact plain JSON text (`[42]`), for messages and the dead-letter table.
pub fn key_text(key: &[Value]) -> String {
    J::Array(key.iter().map(plain).collect()).to_string()
}

/// A line of a `weir plugin test` input file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct InputError {
    pub path: String,
    pub line: usize,
    pub message: String,
}

/// Reads `weir plugin test` input: JSON lines, each a staged row
/// `{"key": [V…], "op": "insert", "commit_position": N, "commit_time": N, "columns":
/// {"name": V, …}}` (only `columns` is required) or just the columns object. Values are
/// tagged or plain (see the module docs). Without `key`, the key is the values of the
/// `key_columns`; without `op`, `insert`; without `commit_position`, the line number.
pub fn read_input_rows(
    text: &str,
    path: &str,
    key_columns: &[String],
) -> Result<Vec<super::InputRow>, InputError> {
    let mut rows = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| InputError {
            path: path.to_owned(),
            line: line_no,
            message,
        };
        let j: J = serde_json::from_str(line).map_err(|e| err(format!("not JSON: {e}")))?;
        let J::Object(obj) = &j else {
            return Err(err(
                "expected a JSON object (a staged row or its columns)".into()
            ));
        };
        let columns_obj = match obj.get("columns") {
            Some(J::Object(c)) => c,
            Some(_) => return Err(err("`columns` must be an object of column: value".into())),
            None => obj,
        };
        let mut columns = Vec::with_capacity(columns_obj.len());
        for (name, v) in columns_obj {
            let value = from_json(v).map_err(|m| err(format!("column `{name}`: {m}")))?;
            columns.push((name.clone(), value));
        }
        let key = match obj.get("key").filter(|_| obj.contains_key("columns")) {
            Some(J::Array(items)) => items
                .iter()
                .map(from_json)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|m| err(format!("key: {m}")))?,
            Some(_) => return Err(err("`key` must be an array of values".into())),
            None => key_columns
                .iter()
                .map(|k| {
                    columns
                        .iter()
                        .find(|(name, _)| name == k)
                        .map(|(_, v)| v.clone())
                        .ok_or_else(|| {
                            err(format!(
                                "no `key` and no key column `{k}`: give \"key\": [...] or --key COLUMN"
                            ))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let field = |name: &str| obj.get(name).filter(|_| obj.contains_key("columns"));
        let op = match field("op").map(|o| o.as_str()) {
            None => crate::feed::Op::Insert,
            Some(Some("insert")) => crate::feed::Op::Insert,
            Some(Some("update")) => crate::feed::Op::Update,
            Some(Some("delete")) => crate::feed::Op::Delete,
            Some(Some("read")) => crate::feed::Op::Read,
            Some(_) => {
                return Err(err(
                    "`op` must be \"insert\", \"update\", \"delete\" or \"read\"".into(),
                ));
            }
        };
        let commit_position = match field("commit_position") {
            None => line_no as u64,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| err("`commit_position` must be a non-negative integer".into()))?,
        };
        let commit_time = match field("commit_time") {
            None | Some(J::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .ok_or_else(|| err("`commit_time` must be microseconds (an integer)".into()))?,
            ),
        };
        rows.push(super::InputRow {
            key,
            op,
            commit_position,
            commit_time,
            columns,
        });
    }
    Ok(rows)
}

/// An output row as a tagged JSON object in the declared column order.
pub fn tagged_row(columns: &[super::OutputColumn], row: &[Value]) -> J {
    J::Object(
        columns
            .iter()
            .zip(row)
            .map(|(c, v)| (c.name.clone(), tagged(v)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_values_round_trip() {
        let values = [
            Value::Null,
            Value::Bool(true),
            Value::Int(-7),
            Value::Float(1.5),
            Value::Float(f64::NEG_INFINITY),
            Value::Text("straße".into()),
            Value::Bytes(vec![0, 255]),
            Value::Decimal("-12.340".into()),
            Value::Date(i32::MAX),
            Value::Timestamp(i64::MIN),
            Value::Json("{\"a\":[1]}".into()),
            Value::Unsupported {
                type_name: "interval".into(),
                text: "1 day".into(),
            },
        ];
        for v in values {
            assert_eq!(from_json(&tagged(&v)).as_ref(), Ok(&v), "{v:?}");
        }
        let nan = from_json(&tagged(&Value::Float(f64::NAN))).expect("nan");
        assert!(matches!(nan, Value::Float(f) if f.is_nan()));
    }

    #[test]
    fn plain_json_is_read_by_its_shape() {
        let j: J = serde_json::from_str(r#"{"a": 1, "b": 19.90, "c": "x", "d": null, "e": [1]}"#)
            .expect("json");
        let read = |k: &str| from_json(&j[k]).expect("value");
        assert_eq!(read("a"), Value::Int(1));
        assert_eq!(read("b"), Value::Decimal("19.90".into()));
        assert_eq!(read("c"), Value::Text("x".into()));
        assert_eq!(read("d"), Value::Null);
        assert_eq!(read("e"), Value::Json("[1]".into()));
        assert!(from_json(&json!({"date": "2026-03-01"})).is_err());
        assert!(from_json(&json!({"decimal": "1e"})).is_err());
    }

    #[test]
    fn plain_keeps_decimal_digits() {
        assert_eq!(
            plain(&Value::Decimal("100.00".into())).to_string(),
            "100.00"
        );
        assert_eq!(plain(&Value::Decimal("NaN".into())), json!("NaN"));
        assert_eq!(plain(&Value::Date(0)), json!("1970-01-01"));
        assert_eq!(key_text(&[Value::Int(42)]), "[42]");
    }
}
