//! One line of a Debezium-envelope JSON-lines feed (read by the engine's
//! `source::jsonl`) decoded into stage changes.
//!
//! A pure function of the line's bytes and the configured tables, apart from the
//! feed's I/O and transaction grouping, so that it is fuzzed on its own
//! (`fuzz/fuzz_targets/jsonl_envelope.rs`). A line that cannot be decoded is a
//! [`BadLine`] saying why, with the transaction and table when they could be read.
//! Decoding never panics, whatever the bytes.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value as Json;
use serde_json::value::RawValue;

use crate::config::{OnTruncate, TableConfig, TableName};
use crate::feed::{Op, Row, StageChange, keyed_changes, with_unchanged};
use crate::value::{BinaryEncoding, ColumnType, ConvertError, Logical, Value};

/// A transaction's identity in the feed (`source.txId`).
pub type TxId = Option<String>;

/// Decodes the line `body` (without its line break) of a transaction that ends at
/// source position `end`, against the configured `tables`.
///
/// `Ok(None)`: a record that carries no change and is passed over like a blank line: a
/// Kafka tombstone (`null`, which Debezium sends after each delete for log
/// compaction), or a transaction metadata record (`{"status": "BEGIN" | "END", "id":
/// …}`, with `provide.transaction.metadata`).
pub fn decode_line<'a>(
    tables: &[TableConfig],
    body: &'a [u8],
    end: u64,
) -> Result<Option<DecodedLine>, BadLine> {
    let text = std::str::from_utf8(body).map_err(|e| {
        BadLine::unknown(format!(
            "line is not valid UTF-8 (invalid byte at column {})",
            e.valid_up_to() + 1
        ))
    })?;
    let malformed = |e: serde_json::Error| BadLine::unknown(format!("malformed JSON ({e})"));
    if text.trim_matches([' ', '\t', '\r', '\n']) == "null" {
        return Ok(None);
    }
    if !is_object(text) {
        return Err(match serde_json::from_str::<IgnoredAny>(text) {
            Err(e) => malformed(e),
            Ok(_) => BadLine::unknown("a line must be a JSON object (a Debezium envelope)".into()),
        });
    }
    let line: Envelope = serde_json::from_str(text).map_err(malformed)?;
    // A tombstone (the record Debezium sends after a delete, for Kafka's compaction) as
    // the JSON converter with schemas on writes it: no change, as a `null` line.
    if line.payload.is_some_and(|p| p.get().trim() == "null")
        && line.op.is_none()
        && line.source.is_none()
    {
        return Ok(None);
    }
    // With Debezium's schemas on, the envelope is the `payload` beside its `schema`.
    let (envelope, schema) = match (line.schema, line.payload) {
        (Some(schema), Some(payload)) if is_object(payload.get()) => (
            serde_json::from_str::<Envelope>(payload.get()).map_err(malformed)?,
            Some(parsed(schema)),
        ),
        _ => (line, None),
    };
    if envelope.op.is_none()
        && envelope.source.is_none()
        && envelope
            .status
            .and_then(string_of)
            .is_some_and(|s| s == "BEGIN" || s == "END")
    {
        return Ok(None);
    }
    // A heartbeat (only `ts_ms`) and a schema change event (`ddl`, `tableChanges`, no
    // `op`) are no row's change either.
    if envelope.op.is_none()
        && envelope.before.is_none()
        && envelope.after.is_none()
        && (envelope.ddl.is_some()
            || envelope.table_changes.is_some()
            || (envelope.source.is_none() && envelope.ts_ms.is_some()))
    {
        return Ok(None);
    }
    // A logical decoding message (`pg_logical_emit_message`, op `m`) is no row's change.
    if envelope.op.and_then(string_of).is_some_and(|op| op == "m") {
        return Ok(None);
    }
    let source: Source = match envelope.source {
        Some(raw) if is_object(raw.get()) => serde_json::from_str(raw.get()).map_err(malformed)?,
        _ => {
            return Err(BadLine::unknown(
                "missing `source` object (with `schema` and `table`)".into(),
            ));
        }
    };
    // A number is kept as written (serde_json's arbitrary precision prints it so).
    let tx_id = match source.tx_id {
        None => None,
        Some(raw) => match raw.get().as_bytes().first() {
            Some(b'n') => None,
            Some(b'-' | b'0'..=b'9') => Some(raw.get().to_owned()),
            _ => Some(string_of(raw).map(Cow::into_owned).ok_or_else(|| {
                BadLine::unknown("`source.txId` must be a number or a string".into())
            })?),
        },
    };
    let field = |raw: Option<&'a RawValue>, name: &str| match raw.and_then(string_of) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(BadLine::bad(
            tx_id.clone(),
            None,
            format!("missing `source.{name}`"),
        )),
    };
    // Debezium's MySQL (and MariaDB) connector names the database `source.db` and has
    // no `source.schema`: the database is the table's schema there.
    let (schema_name, table_name) = (
        match source.schema {
            None if source.db.is_some() => field(source.db, "db")?,
            schema => field(schema, "schema")?,
        },
        field(source.table, "table")?,
    );
    let qualified = || {
        TableName {
            schema: schema_name.to_string(),
            name: table_name.to_string(),
        }
        .to_string()
    };
    let bad = |reason: String| BadLine::bad(tx_id.clone(), Some(qualified()), reason);
    let op = match envelope.op {
        Some(raw) => match string_of(raw).as_deref() {
            Some("c") => Op::Insert,
            Some("u") => Op::Update,
            Some("d") => Op::Delete,
            Some("r") => Op::Read,
            Some("t") => return truncate(tables, &qualified(), tx_id.clone()).map(Some),
            Some(other) => {
                return Err(bad(format!(
                    "unknown op `{}`: expected c, u, d, r or t",
                    shown(other)
                )));
            }
            None => return Err(bad("`op` must be a string".into())),
        },
        None => return Err(bad("missing field `op`".into())),
    };
    let table = tables
        .iter()
        .find(|t| t.source.schema == *schema_name && t.source.name == *table_name)
        .ok_or_else(|| {
            let qualified = shown(&qualified());
            bad(format!("table `{qualified}` is not configured: add a [[table]] with source = \"{qualified}\""))
        })?;
    // A whole number (as serde_json reads one as an `i64`: its text, kept as written).
    let ts_ms = [source.ts_ms, envelope.ts_ms]
        .into_iter()
        .flatten()
        .find_map(|raw| raw.get().parse::<i64>().ok());
    let logical = |which: &str| image_schema(schema.as_ref(), which).map_err(&bad);
    let (before, _) = image(table, envelope.before, "before", &logical("before")?).map_err(&bad)?;
    let (after, unavailable) =
        image(table, envelope.after, "after", &logical("after")?).map_err(&bad)?;
    let changes = keyed_changes(
        table,
        op,
        before,
        after,
        end,
        ts_ms.and_then(|ms| ms.checked_mul(1000)),
    )
    .map_err(&bad)?;
    // Values Debezium did not have (unchanged TOAST values) keep the staged row's.
    let changes = with_unchanged(changes, unavailable, false).map_err(&bad)?;
    Ok(Some(DecodedLine { tx_id, changes }))
}

/// Debezium's placeholder for a value it did not have: an unchanged TOAST value of an
/// update under REPLICA IDENTITY DEFAULT (`unavailable.value.placeholder`, default).
pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";

/// The same placeholder for a `bytea` column: its bytes, in base64.
const UNAVAILABLE_BYTES_BASE64: &str = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==";

/// A name or word the feed gave, as a reason quotes it: as it is when short and
/// printable; else its first characters with control characters escaped, and its
/// length (a reason is logged: a feed's text must not forge log lines or fill them).
fn shown(text: &str) -> String {
    const SHOWN_CHARS: usize = 64;
    if text.len() <= SHOWN_CHARS && !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let head: String = text
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    format!("{head}… ({} bytes)", text.len())
}

/// A TRUNCATE (`op` `t`) of `table`, as the table's `on_truncate` says.
fn truncate(tables: &[TableConfig], table: &str, tx_id: TxId) -> Result<DecodedLine, BadLine> {
    let config = tables.iter().find(|t| t.source.to_string() == table);
    match config.map(|t| t.on_truncate) {
        Some(OnTruncate::Apply) => Ok(DecodedLine {
            tx_id,
            changes: vec![StageChange::Truncate {
                table: table.to_owned(),
            }],
        }),
        Some(OnTruncate::Fail) => Err(BadLine::bad(
            tx_id,
            Some(table.to_owned()),
            format!(
                "a TRUNCATE of `{table}`, and its on_truncate is \"fail\"; set on_truncate = \"apply\" on the table to remove its rows from the stage and the target"
            ),
        )),
        None => Err(BadLine::bad(
            tx_id,
            Some(table.to_owned()),
            format!(
                "table `{}` is not configured: add a [[table]] with source = \"{}\"",
                shown(table),
                shown(table)
            ),
        )),
    }
}

/// The fields of an envelope Weir reads, each kept as the line's raw JSON until it is
/// used: parsing a line whole into maps (a Debezium `source` holds a dozen fields, a
/// `schema` hundreds) was most of decoding's CPU. `Some` for a field present, `null`
/// included; any other field is skipped unread (but checked to be JSON). A field given
/// twice makes the line malformed.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    schema: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    source: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    op: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    before: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    after: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    ts_ms: Option<&'a RawValue>,
    /// A transaction metadata record's `BEGIN` or `END`.
    #[serde(borrow, default, deserialize_with = "present")]
    status: Option<&'a RawValue>,
    /// A schema change event's statement (MySQL, SQL Server, Oracle connectors).
    #[serde(borrow, default, deserialize_with = "present")]
    ddl: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present", rename = "tableChanges")]
    table_changes: Option<&'a RawValue>,
}

/// The fields of `source` Weir reads, as [`Envelope`]'s.
#[derive(Deserialize)]
struct Source<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    schema: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    table: Option<&'a RawValue>,
    /// The database, in the MySQL connector's envelopes (which have no `schema`).
    #[serde(borrow, default, deserialize_with = "present")]
    db: Option<&'a RawValue>,
    #[serde(rename = "txId", borrow, default, deserialize_with = "present")]
    tx_id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    ts_ms: Option<&'a RawValue>,
}

/// A field that is present, `null` too (absent ones are `None` by `default`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A raw value as JSON: it was read as JSON already, so this cannot fail (`null` if it
/// somehow did).
fn parsed(raw: &RawValue) -> Json {
    serde_json::from_str(raw.get()).unwrap_or(Json::Null)
}

/// A raw value's text if it is a JSON string, borrowed from the line when it holds no
/// escape.
fn string_of(raw: &RawValue) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Key>(raw.get()).ok().map(|Key(s)| s)
}

/// Whether JSON text is an object (its first character past JSON's whitespace).
fn is_object(text: &str) -> bool {
    text.trim_start_matches([' ', '\t', '\r', '\n'])
        .starts_with('{')
}

/// An image's fields in the order given, keys borrowed from the line where they hold
/// no escape, values as their JSON text. A key given twice is kept twice; the last one
/// counts, as in a JSON map.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Key(key)) = map.next_key()? {
                    out.push((key, map.next_value()?));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(Entries)
    }
}

/// An object's key, borrowed when the line holds it as is.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(Text)
    }
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

/// A `bytea` column's value in the encoding its column declares (`None`: base64).
fn binary(encoding: Option<BinaryEncoding>, v: &Json) -> Result<Value, ConvertError> {
    match v {
        Json::Null => Ok(Value::Null),
        Json::String(s) => encoding
            .unwrap_or(BinaryEncoding::Base64)
            .decode(s)
            .map(Value::Bytes),
        _ => Err(ConvertError::Schema(
            "a bytea value must be a string of its encoded bytes".into(),
        )),
    }
}

/// The Debezium logical types of the fields of the `before` or `after` image, from the
/// envelope's `schema` (Debezium's JSON converter with schemas on): the field named
/// `which` of the envelope's struct, whose own `fields` name each column's `field`,
/// `type` and optional `name` (the logical type) and `parameters`. Fields without a
/// logical name Weir knows are left out (their values are read by the column's type).
pub fn image_schema(schema: Option<&Json>, which: &str) -> Result<Vec<(String, Logical)>, String> {
    let Some(fields) = schema
        .and_then(|s| s.get("fields"))
        .and_then(Json::as_array)
        .and_then(|fields| {
            fields
                .iter()
                .find(|f| f.get("field").and_then(Json::as_str) == Some(which))
        })
        .and_then(|image| image.get("fields"))
        .and_then(Json::as_array)
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for field in fields {
        let Some(column) = field.get("field").and_then(Json::as_str) else {
            continue;
        };
        let Some(name) = field.get("name").and_then(Json::as_str) else {
            match field.get("type").and_then(Json::as_str) {
                Some("string") => out.push((column.to_owned(), Logical::PlainString)),
                Some("bytes") => out.push((column.to_owned(), Logical::PlainBytes)),
                _ => {}
            }
            continue;
        };
        let logical = Logical::from_schema(name, field.get("parameters"))
            .map_err(|e| format!("column `{column}` in the schema of `{which}`: {e}"))?;
        if let Some(logical) = logical {
            out.push((column.to_owned(), logical));
        }
    }
    Ok(out)
}

/// Converts a before/after object into a row of the table's declared columns; a column
/// with a logical type in the envelope's schema is read by it, else by its declared
/// type (and epoch unit).
///
/// Also returns the columns whose value is Debezium's placeholder for a value it did
/// not have ([`UNAVAILABLE_VALUE`]): they are left out of the row, to keep the staged
/// row's values.
fn image(
    table: &TableConfig,
    raw: Option<&RawValue>,
    which: &str,
    logical: &[(String, Logical)],
) -> Result<(Option<Row>, Vec<String>), String> {
    let Some(raw) = raw else {
        return Ok((None, Vec::new()));
    };
    if raw.get() == "null" {
        return Ok((None, Vec::new()));
    }
    if !is_object(raw.get()) {
        return Err(format!("`{which}` must be an object or null"));
    }
    let Fields(fields) =
        serde_json::from_str(raw.get()).map_err(|e| format!("`{which}` is not readable ({e})"))?;
    // Each field's column, found once; a column given twice counts as given last.
    let mut given: Vec<Option<&RawValue>> = vec![None; table.columns.len()];
    for (name, json) in &fields {
        let Some(i) = table.columns.iter().position(|c| c.name == *name) else {
            return Err(format!(
                "column `{}` in `{which}` is not declared in the columns of {}",
                shown(name),
                table.source
            ));
        };
        given[i] = Some(json);
    }
    let mut row = Vec::with_capacity(table.columns.len());
    let mut unavailable = Vec::new();
    for (column, json) in table.columns.iter().zip(given) {
        // An absent key or partition column stays absent (their checks name it); any
        // other is NULL, as the target and a transform read it (a transform's `none`
        // is for rows staged before a column existed).
        let Some(json) = json else {
            if !table.key.contains(&column.name) && column.name != table.partition_by {
                row.push((column.name.clone(), Value::Null));
            }
            continue;
        };
        if is_unavailable(column.ty, json.get()) {
            if table.key.contains(&column.name) || column.name == table.partition_by {
                return Err(format!(
                    "column `{}` in `{which}` is Debezium's placeholder for a value it did not have ({UNAVAILABLE_VALUE}), but it is a key or partition column",
                    column.name
                ));
            }
            unavailable.push(column.name.clone());
            continue;
        }
        let converted = match (logical.iter().find(|(c, _)| *c == column.name), column.ty) {
            (Some((_, Logical::PlainString)), ColumnType::Bytea) if column.encoding.is_none() => {
                Err(ConvertError::Schema(format!(
                    "the schema says string for a bytea column: Debezium's binary.handling.mode base64, base64-url-safe or hex, which Weir cannot tell apart; declare it as `{} = {{ type = \"bytea\", encoding = \"hex\" }}` (or \"base64\", \"base64-url-safe\")",
                    column.name
                )))
            }
            (Some((_, Logical::PlainBytes)), ColumnType::Bytea) => {
                binary(Some(BinaryEncoding::Base64), &parsed(json))
            }
            (_, ColumnType::Bytea) if column.encoding.is_some() => {
                binary(column.encoding, &parsed(json))
            }
            (Some((_, Logical::PlainString | Logical::PlainBytes)), _) | (None, _) => {
                Value::from_json_text(column.ty, column.epoch, json.get())
            }
            (Some((_, logical)), _) => Value::from_debezium(column.ty, *logical, &parsed(json)),
        };
        let value = converted.map_err(|e| {
            format!(
                "column `{}` ({}) in `{which}`: {e}",
                column.name, column.declared
            )
        })?;
        row.push((column.name.clone(), value));
    }
    Ok((Some(row), unavailable))
}

/// Whether a value's JSON text is Debezium's placeholder for a value it did not have:
/// the text itself, for `bytea` its bytes in base64 or hex, and the forms Debezium's
/// PostgreSQL connector gives an unchanged TOAST value of an array or `hstore` column
/// (which Weir stages as `json`/`jsonb` or text): a list holding the text (`text[]`,
/// `varchar[]`, `json[]` …), a list of the text's bytes as numbers (`int[]`,
/// `bigint[]`, `date[]` …), and a map from the text to itself (`hstore.handling.mode`
/// `map`), or any of these as JSON text in a string (`json` mode). No other value
/// has these forms.
fn is_unavailable(ty: ColumnType, json: &str) -> bool {
    if json.starts_with('[') || json.starts_with('{') {
        return is_unavailable_structure(json);
    }
    let Some(text) = json.strip_prefix('"').and_then(|j| j.strip_suffix('"')) else {
        return false;
    };
    match ty {
        // The placeholder's bytes in any encoding Debezium may give them (it encodes the
        // placeholder as it encodes the column's values): base64, URL-safe base64 with
        // or without padding, or hex. No other value has these texts.
        ColumnType::Bytea => {
            text.trim_end_matches('=') == UNAVAILABLE_BYTES_BASE64.trim_end_matches('=')
                || (text.len() == 2 * UNAVAILABLE_VALUE.len()
                    && hex::decode(text).is_ok_and(|b| b == UNAVAILABLE_VALUE.as_bytes()))
        }
        _ => {
            text == UNAVAILABLE_VALUE
                || (text.contains(UNAVAILABLE_VALUE)
                    && serde_json::from_str::<String>(json)
                        .is_ok_and(|inner| is_unavailable_structure(inner.trim())))
        }
    }
}

/// Whether JSON text is a list or map form of Debezium's placeholder (see
/// [`is_unavailable`]).
fn is_unavailable_structure(json: &str) -> bool {
    use serde_json::Value as J;
    // Cheap refusals first: nearly every array or object value is neither form.
    if !(json.contains(UNAVAILABLE_VALUE) || json.starts_with("[95")) {
        return false;
    }
    match serde_json::from_str::<J>(json) {
        Ok(J::Array(items)) => match items.as_slice() {
            [J::String(text)] => text == UNAVAILABLE_VALUE,
            _ => {
                items.len() == UNAVAILABLE_VALUE.len()
                    && items
                        .iter()
                        .zip(UNAVAILABLE_VALUE.bytes())
                        .all(|(item, byte)| item.as_u64() == Some(u64::from(byte)))
            }
        },
        Ok(J::Object(map)) => {
            map.len() == 1
                && map
                    .get(UNAVAILABLE_VALUE)
                    .is_some_and(|v| v.as_str() == Some(UNAVAILABLE_VALUE))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
