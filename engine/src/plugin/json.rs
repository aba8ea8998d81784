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

use crate::value::{ColumnType, ConvertError, EpochUnit, Logical, Value};

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

/// How `weir plugin test` reads its input: the key columns of rows that give no `key`,
/// and the types of columns given as plain JSON.
#[derive(Debug, Clone, Default)]
pub struct InputSchema {
    /// The key of a row that gives no `key` is the values of these columns.
    pub key_columns: Vec<String>,
    /// Columns whose plain JSON values are read as the JSON-lines feed reads them for
    /// a column of that type (`"2026-03-01"` for a date, `19.9` or `"19.90"` for a
    /// numeric, ISO-8601 text for a timestamp), checked and normalised to what
    /// PostgreSQL stores.
    pub types: Vec<(String, ColumnType)>,
    /// The unit of a number given for a date or timestamp column, as a column's
    /// `epoch` in the config.
    pub epochs: Vec<(String, EpochUnit)>,
}

impl InputSchema {
    fn type_of(&self, column: &str) -> Option<ColumnType> {
        self.types
            .iter()
            .find(|(name, _)| name == column)
            .map(|(_, ty)| *ty)
    }
}

/// Whether a value of this case can be stored in a column of type `ty`.
fn fits_type(ty: ColumnType, v: &Value) -> bool {
    use ColumnType as T;
    matches!(
        (ty, v),
        (_, Value::Null)
            | (T::SmallInt | T::Integer | T::BigInt, Value::Int(_))
            | (T::Real | T::Double, Value::Float(_))
            | (T::Numeric(_), Value::Decimal(_))
            | (T::Text | T::Varchar(_) | T::Uuid, Value::Text(_))
            | (T::Bool, Value::Bool(_))
            | (T::Date, Value::Date(_))
            | (T::Timestamp | T::TimestampTz, Value::Timestamp(_))
            | (T::Json | T::Jsonb, Value::Json(_))
            | (T::Bytea, Value::Bytes(_))
    )
}

/// A column's value from input JSON: tagged values are taken as they are (checked
/// against the column's type if it has one); plain values are read by the column's
/// type, by the envelope schema's logical type, or, untyped, by their JSON shape, where
/// a number with a fraction or exponent is refused (a decimal and a float read alike).
fn input_value(
    schema: &InputSchema,
    logical: &[(String, Logical)],
    column: &str,
    j: &J,
) -> Result<Value, String> {
    let tagged = match j {
        J::Object(map) if map.len() == 1 => match map.iter().next() {
            Some((case, inner)) => from_tagged(case, inner)?,
            None => None,
        },
        _ => None,
    };
    let ty = schema.type_of(column);
    // A json column's document may itself be a one-key object named like a case.
    let tagged = match ty {
        Some(t @ (ColumnType::Json | ColumnType::Jsonb)) => tagged.filter(|v| fits_type(t, v)),
        _ => tagged,
    };
    match (tagged, ty) {
        (Some(v), None) => Ok(v),
        (Some(v), Some(ty)) if fits_type(ty, &v) => v.conform(ty).map_err(|e| e.to_string()),
        (Some(v), Some(_)) => Err(format!(
            "a tagged {} value, which a column of the type --column gives cannot take",
            v.kind()
        )),
        (None, Some(ty)) => match logical.iter().find(|(c, _)| c == column) {
            Some((_, l)) => Value::from_debezium(ty, *l, j),
            None => {
                let epoch = schema
                    .epochs
                    .iter()
                    .find(|(c, _)| c == column)
                    .map(|(_, unit)| *unit);
                Value::from_json_unit(ty, epoch, j)
            }
        }
        .map_err(|e| match e {
            ConvertError::NoEpochUnit { column_type } => format!(
                "a number for a {column_type} column without a unit: give it with the type, \
                 --column {column}={column_type}:UNIT (UNIT days, s, ms, us or ns), as a \
                 column's epoch in the config"
            ),
            e => e.to_string(),
        }),
        (None, None) => match j {
            J::Number(n) if n.as_i64().is_none() => Err(format!(
                "{n} is a number with a fraction or exponent, which could be a decimal or a \
                 float: give the column's type (--column {column}=numeric(12,2), or \
                 double precision), or tag it ({{\"decimal\": \"{n}\"}})"
            )),
            _ => from_json(j),
        },
    }
}

/// Reads `weir plugin test` input, JSON lines of one of three forms:
///
/// * a Debezium envelope, as a JSON-lines feed holds it (`{"op": "c", "before": …,
///   "after": {…}, "source": {…}, "ts_ms": …}`, or wrapped as `{"schema": …,
///   "payload": …}`): the row is `after` (`before` for a delete), the op `c`/`u`/`d`/`r`,
///   the commit time `ts_ms`;
/// * a staged row `{"key": [V…], "op": "insert", "commit_position": N, "commit_time": N,
///   "columns": {"name": V, …}}` (only `columns` is required);
/// * just the columns object.
///
/// Values are tagged or plain (see [`InputSchema`] and the module docs). Without `key`,
/// the key is the values of the schema's key columns; without `op`, `insert`; without
/// `commit_position`, the line number. Each row comes with its line number.
pub fn read_input_rows(
    text: &str,
    path: &str,
    schema: &InputSchema,
) -> Result<Vec<(usize, super::InputRow)>, InputError> {
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
        let row = input_row(j, line_no, schema).map_err(err)?;
        rows.push((line_no, row));
    }
    Ok(rows)
}

/// One line of `weir plugin test` input (see [`read_input_rows`]).
fn input_row(j: J, line_no: usize, schema: &InputSchema) -> Result<super::InputRow, String> {
    let J::Object(mut obj) = j else {
        return Err("expected a JSON object (an envelope, a staged row or its columns)".into());
    };
    let mut envelope_schema = None;
    if obj.contains_key("schema")
        && matches!(obj.get("payload"), Some(J::Object(_)))
        && let Some(J::Object(payload)) = obj.remove("payload")
    {
        envelope_schema = obj.remove("schema");
        obj = payload;
    }
    let is_envelope = obj.get("op").and_then(J::as_str).is_some()
        && (obj.contains_key("after") || obj.contains_key("before"))
        && !obj.contains_key("columns");
    if is_envelope {
        return envelope_row(&obj, envelope_schema.as_ref(), line_no, schema);
    }
    let staged = obj.contains_key("columns");
    let columns_obj = match obj.get("columns") {
        Some(J::Object(c)) => c,
        Some(_) => return Err("`columns` must be an object of column: value".into()),
        None => &obj,
    };
    let columns = input_columns(columns_obj, &[], schema)?;
    let field = |name: &str| obj.get(name).filter(|_| staged);
    let key = match field("key") {
        Some(J::Array(items)) => items
            .iter()
            .map(from_json)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| format!("key: {m}"))?,
        Some(_) => return Err("`key` must be an array of values".into()),
        None => key_of(&columns, schema)?,
    };
    let op = match field("op").map(|o| o.as_str()) {
        None => crate::feed::Op::Insert,
        Some(Some("insert")) => crate::feed::Op::Insert,
        Some(Some("update")) => crate::feed::Op::Update,
        Some(Some("delete")) => crate::feed::Op::Delete,
        Some(Some("read")) => crate::feed::Op::Read,
        Some(_) => {
            return Err("`op` must be \"insert\", \"update\", \"delete\" or \"read\"".into());
        }
    };
    let commit_position = match field("commit_position") {
        None => line_no as u64,
        Some(v) => v
            .as_u64()
            .ok_or("`commit_position` must be a non-negative integer")?,
    };
    let commit_time = match field("commit_time") {
        None | Some(J::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or("`commit_time` must be microseconds (an integer)")?,
        ),
    };
    Ok(super::InputRow {
        key,
        op,
        commit_position,
        commit_time,
        columns,
    })
}

/// A Debezium envelope's row: its image, op and commit time.
fn envelope_row(
    obj: &Map<String, J>,
    envelope_schema: Option<&J>,
    line_no: usize,
    schema: &InputSchema,
) -> Result<super::InputRow, String> {
    let (op, which) = match obj.get("op").and_then(J::as_str) {
        Some("c") => (crate::feed::Op::Insert, "after"),
        Some("u") => (crate::feed::Op::Update, "after"),
        Some("d") => (crate::feed::Op::Delete, "before"),
        Some("r") => (crate::feed::Op::Read, "after"),
        Some(other) => return Err(format!("unknown op `{other}`: expected c, u, d or r")),
        None => return Err("`op` must be a string".into()),
    };
    let image = match obj.get(which) {
        Some(J::Object(image)) => image,
        _ => {
            return Err(format!(
                "an envelope with op `{}` needs its `{which}` image (an object)",
                op_letter(op)
            ));
        }
    };
    let logical = weir_core::envelope::image_schema(envelope_schema, which)?;
    let columns = input_columns(image, &logical, schema)?;
    let key = key_of(&columns, schema)?;
    let ts_ms = [
        obj.get("source").and_then(|s| s.get("ts_ms")),
        obj.get("ts_ms"),
    ]
    .into_iter()
    .flatten()
    .find_map(J::as_i64);
    Ok(super::InputRow {
        key,
        op,
        commit_position: line_no as u64,
        commit_time: ts_ms.and_then(|ms| ms.checked_mul(1000)),
        columns,
    })
}

fn op_letter(op: crate::feed::Op) -> &'static str {
    match op {
        crate::feed::Op::Insert => "c",
        crate::feed::Op::Update => "u",
        crate::feed::Op::Delete => "d",
        crate::feed::Op::Read => "r",
    }
}

fn input_columns(
    object: &Map<String, J>,
    logical: &[(String, Logical)],
    schema: &InputSchema,
) -> Result<Vec<(String, Value)>, String> {
    object
        .iter()
        .map(|(name, v)| {
            input_value(schema, logical, name, v)
                .map(|value| (name.clone(), value))
                .map_err(|m| format!("column `{name}`: {m}"))
        })
        .collect()
}

/// The key of a row that gives none: the values of the key columns.
fn key_of(columns: &[(String, Value)], schema: &InputSchema) -> Result<Vec<Value>, String> {
    schema
        .key_columns
        .iter()
        .map(|k| {
            columns
                .iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    format!("no `key` and no key column `{k}`: give \"key\": [...] or --key COLUMN")
                })
        })
        .collect()
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

    fn schema(types: &[(&str, &str)]) -> InputSchema {
        InputSchema {
            key_columns: vec!["id".into()],
            types: types
                .iter()
                .map(|(c, t)| ((*c).to_owned(), t.parse().expect("type")))
                .collect(),
            epochs: Vec::new(),
        }
    }

    #[test]
    fn input_lines_are_read_as_the_feed_writes_them() {
        let s = schema(&[
            ("day", "date"),
            ("amount", "numeric(12,2)"),
            ("doc", "jsonb"),
        ]);
        let text = [
            // A Debezium envelope with schemas on: `day` is days since the epoch by its
            // logical type; a delete's row is `before`.
            r#"{"schema":{"type":"struct","fields":[{"field":"after","fields":[{"field":"day","type":"int32","name":"io.debezium.time.Date"}]}]},"payload":{"op":"u","before":null,"after":{"id":1,"day":20513,"amount":"7"},"source":{"ts_ms":2000},"ts_ms":1000}}"#,
            r#"{"op":"d","before":{"id":2,"day":"2026-03-01","amount":19.9},"after":null,"source":{}}"#,
            // Bare columns; a json column's one-key object is a document, not a tag.
            r#"{"id":3,"day":{"date":1},"amount":{"decimal":"1.5"},"doc":{"text":"x"}}"#,
        ]
        .join("\n");
        let rows = read_input_rows(&text, "in", &s).expect("rows");
        let (lines, rows): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
        assert_eq!(lines, [1, 2, 3]);
        assert_eq!(rows[0].op, crate::feed::Op::Update);
        assert_eq!(rows[0].commit_time, Some(2_000_000));
        assert_eq!(rows[0].columns[1], ("day".into(), Value::Date(20513)));
        assert_eq!(
            rows[0].columns[2],
            ("amount".into(), Value::Decimal("7.00".into()))
        );
        assert_eq!(rows[1].op, crate::feed::Op::Delete);
        assert_eq!(rows[1].key, [Value::Int(2)]);
        assert_eq!(
            rows[1].columns[2],
            ("amount".into(), Value::Decimal("19.90".into()))
        );
        assert_eq!(rows[2].columns[1], ("day".into(), Value::Date(1)));
        assert_eq!(
            rows[2].columns[2],
            ("amount".into(), Value::Decimal("1.50".into()))
        );
        assert_eq!(
            rows[2].columns[3],
            ("doc".into(), Value::Json(r#"{"text":"x"}"#.into()))
        );
    }

    #[test]
    fn input_that_would_be_guessed_is_refused_with_the_fix() {
        let untyped = schema(&[]);
        let err = read_input_rows(r#"{"id":1,"amount":1.5}"#, "in", &untyped).expect_err("guess");
        assert_eq!(err.line, 1);
        assert!(
            err.message
                .contains("column `amount`: 1.5 is a number with a fraction"),
            "{err}"
        );
        let typed = schema(&[("amount", "numeric(3,1)")]);
        for (line, what) in [
            (r#"{"id":1,"amount":{"text":"1"}}"#, "a tagged text value"),
            (
                r#"{"id":1,"amount":"12.345"}"#,
                "digits after the decimal point",
            ),
            (r#"{"amount":"1"}"#, "no key column `id`"),
            (r#"{"op":"c","after":null}"#, "needs its `after` image"),
            (r#"{"op":"x","after":{}}"#, "unknown op `x`"),
        ] {
            let err = read_input_rows(line, "in", &typed).expect_err(line);
            assert!(err.to_string().contains(what), "{line}: {err}");
        }
    }

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
