//! The change vocabulary every part of the engine speaks: a decoded row change ([`Op`],
//! [`Row`]), a committed [`Transaction`] and the feed position it ends at
//! ([`Position`]), a [`BadRecord`] kept instead of a change, and what the stage is
//! given ([`StageChange`], the staged row image [`StagedRow`], and the key's byte
//! encoding [`encode_key`]). Sources build these, the stage stores them, the pipeline
//! and the plugin host read them; none of them depends on another's internals.
//!
//! [`keyed_changes`] turns a decoded row change into stage input: the key is encoded,
//! the partition computed, and a change of primary key becomes a delete of the old key
//! plus an upsert of the new one. Errors there are errors of the record, so each source
//! reports them with the record's own location.

use std::borrow::Cow;

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::config::{OnNullPartition, TableConfig};
use crate::partition::{Partition, partition_of};
use crate::value::Value;

/// A row image: column name and value, in the table's declared column order.
pub type Row = Vec<(String, Value)>;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Insert,
    Update,
    Delete,
    /// A row read by a snapshot rather than captured as a change.
    Read,
}

impl Op {
    pub fn code(self) -> &'static str {
        match self {
            Op::Insert => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
        }
    }
}

/// Turns one decoded change of `table` into stage changes.
///
/// `before` is required for deletes (its key columns at least), `after` for inserts,
/// updates and reads. A change of key is a delete of the old key and an upsert of the
/// new. Returns the reason a record is bad as text, for the source to locate.
pub fn keyed_changes(
    table: &TableConfig,
    op: Op,
    before: Option<Row>,
    after: Option<Row>,
    commit_position: u64,
    commit_time_us: Option<i64>,
) -> Result<Vec<StageChange>, String> {
    // `schema.name`, built without the formatting machinery: this runs for every change.
    let mut source = String::with_capacity(table.source.schema.len() + 1 + table.source.name.len());
    source.push_str(&table.source.schema);
    source.push('.');
    source.push_str(&table.source.name);
    let key_of = |row: &Row, image: &str| -> Result<Vec<u8>, String> {
        let mut values = Vec::with_capacity(table.key.len());
        for k in &table.key {
            match row.iter().find(|(c, _)| c == k) {
                Some((_, v)) if !v.is_null() => values.push(v),
                Some(_) => return Err(format!("key column `{k}` is NULL in the {image} image")),
                None => return Err(format!("missing key column `{k}` in the {image} image")),
            }
        }
        encode_key(&values).map_err(|e| e.to_string())
    };
    let upsert = |row: Row, key: Vec<u8>, source: String| -> Result<StageChange, String> {
        let column = &table.partition_by;
        let value = row
            .iter()
            .find(|(c, _)| c == column)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("missing partition column `{column}` in the after image"))?;
        let partition = partition_of(column, table.grain, value).map_err(|e| e.to_string())?;
        if partition == Partition::Null && table.on_null_partition == OnNullPartition::Reject {
            return Err(format!(
                "partition column `{column}` is NULL and on_null_partition = \"reject\" for {source}"
            ));
        }
        Ok(StageChange::Upsert {
            table: source,
            key,
            partition,
            row: StagedRow {
                commit_position,
                commit_time_us,
                op,
                values: row,
            },
        })
    };
    match op {
        Op::Insert | Op::Read | Op::Update => {
            let after =
                after.ok_or_else(|| format!("op `{}` needs an `after` image", op.code()))?;
            let key = key_of(&after, "after")?;
            let mut out = Vec::with_capacity(2);
            // A before image may be partial (REPLICA IDENTITY DEFAULT: the key only) or
            // absent; when it holds the key and the key changed, the old key goes.
            if let Some(old_key) = before
                .filter(|_| op == Op::Update)
                .and_then(|b| key_of(&b, "before").ok())
                .filter(|old_key| *old_key != key)
            {
                out.push(StageChange::Delete {
                    table: source.clone(),
                    key: old_key,
                });
            }
            out.push(upsert(after, key, source)?);
            Ok(out)
        }
        Op::Delete => {
            let before = before
                .ok_or_else(|| "op `d` needs a `before` image with the key columns".to_owned())?;
            let key = key_of(&before, "before")?;
            Ok(vec![StageChange::Delete { table: source, key }])
        }
    }
}

/// The changes of an update ([`keyed_changes`]) whose `unchanged` columns are not in
/// its new row: its upsert becomes a [`StageChange::UpsertUnchanged`] that the stage
/// fills from the row's previous image (the old key's, if the key changed: that row's
/// delete then follows it). `skip_if_absent` only for an unchanged key.
pub fn with_unchanged(
    changes: Vec<StageChange>,
    unchanged: Vec<String>,
    skip_if_absent: bool,
) -> Result<Vec<StageChange>, String> {
    if unchanged.is_empty() {
        return Ok(changes);
    }
    let mut previous_key = None;
    let mut upsert = None;
    for change in changes {
        match change {
            StageChange::Delete { key, .. } => previous_key = Some(key),
            StageChange::Upsert {
                table,
                key,
                partition,
                row,
            } => upsert = Some((table, key, partition, row)),
            _ => {}
        }
    }
    let (table, key, partition, row) =
        upsert.ok_or_else(|| "an update without its new row".to_owned())?;
    // The new key's row first: a changed key's unchanged values are the old key's,
    // whose row the delete after it removes.
    let mut out = vec![StageChange::UpsertUnchanged {
        table: table.clone(),
        previous_key: previous_key.clone().unwrap_or_else(|| key.clone()),
        key,
        partition,
        row,
        unchanged,
        skip_if_absent: skip_if_absent && previous_key.is_none(),
    }];
    if let Some(key) = previous_key {
        out.push(StageChange::Delete { table, key });
    }
    Ok(out)
}

/// A record the source could not turn into a change; kept, never skipped silently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRecord {
    /// Source position of the record's start (byte offset of a JSON line).
    pub position: u64,
    /// 1-based line number, where the feed has lines.
    pub line: Option<u64>,
    /// `schema.table`, when it could be read.
    pub table: Option<String>,
    pub reason: String,
    /// The record exactly as received.
    pub raw: Vec<u8>,
}

/// A committed source transaction, ready to stage.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    /// The source position just past this transaction. Staging it moves the stage's
    /// position here; a transaction whose `end` is at or below the stage's position has
    /// been staged already and is skipped whole.
    pub end: u64,
    /// Source-specific resume data kept with the position (JSON lines: the line count).
    pub cursor: u64,
    pub changes: Vec<StageChange>,
    /// Records of this transaction that went to the dead-letter table instead.
    pub bad_records: Vec<BadRecord>,
}

/// A position in the feed, stored with the stage: where the feed resumes. (Its field
/// names are kept from when this type was called `Checkpoint`; they are part of the
/// JSON that `weir checkpoint show --json` prints.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Position {
    /// The source's position just past the last staged transaction (a byte offset of
    /// a JSON-lines feed, an LSN of a PostgreSQL slot).
    pub position: u64,
    /// Source-specific resume data (JSON lines: the line count).
    pub cursor: u64,
}

/// One staged row: the current image of a key, with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagedRow {
    /// Source position of the transaction that wrote this image.
    pub commit_position: u64,
    /// Commit time of that transaction, microseconds since the epoch, if the feed said.
    pub commit_time_us: Option<i64>,
    pub op: Op,
    pub values: Row,
}

impl StagedRow {
    /// About the bytes the row holds in memory: its own size, and each column's name
    /// and value with their heap parts. What memory bounds count rows by.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<StagedRow>()
            + self
                .values
                .iter()
                .map(|(name, value)| {
                    std::mem::size_of::<(String, Value)>() + name.len() + value.heap_bytes()
                })
                .sum::<usize>()
    }
}

/// Reads a stored [`StagedRow`] as its values only, in the order of `columns`: a
/// column the row lacks is NULL, one `columns` lacks is left out (the first of a name
/// given twice is kept), and no column name is allocated. Any serde format that writes
/// a struct as its fields in order (the stage's postcard) decodes with it; the
/// identity transform reads a partition so.
#[derive(Debug, Clone, Copy)]
pub struct ValuesInOrder<'c> {
    pub columns: &'c [String],
}

const STAGED_ROW_FIELDS: &[&str] = &["commit_position", "commit_time_us", "op", "values"];

impl<'de> DeserializeSeed<'de> for ValuesInOrder<'_> {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        deserializer.deserialize_struct("StagedRow", STAGED_ROW_FIELDS, self)
    }
}

impl<'de> Visitor<'de> for ValuesInOrder<'_> {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a staged row")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
        let missing = |i| serde::de::Error::invalid_length(i, &"a staged row's 4 fields");
        seq.next_element::<u64>()?.ok_or_else(|| missing(0))?;
        seq.next_element::<Option<i64>>()?
            .ok_or_else(|| missing(1))?;
        seq.next_element::<Op>()?.ok_or_else(|| missing(2))?;
        seq.next_element_seed(InOrder(self.columns))?
            .ok_or_else(|| missing(3))
    }
}

/// The `values` field of [`ValuesInOrder`].
struct InOrder<'c>(&'c [String]);

impl<'de> DeserializeSeed<'de> for InOrder<'_> {
    type Value = Vec<Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Value>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for InOrder<'_> {
    type Value = Vec<Value>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a staged row's columns")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Value>, A::Error> {
        let columns = self.0;
        let mut out: Vec<Option<Value>> = vec![None; columns.len()];
        // Rows are staged in the table's column order: the next column is tried first.
        let mut next = 0;
        while let Some((name, value)) = seq.next_element::<(Name<'de>, Value)>()? {
            let at = if columns.get(next).is_some_and(|c| *c == *name.0) {
                Some(next)
            } else {
                columns.iter().position(|c| *c == *name.0)
            };
            if let Some(at) = at {
                next = at + 1;
                if out[at].is_none() {
                    out[at] = Some(value);
                }
            }
        }
        Ok(out.into_iter().map(|v| v.unwrap_or(Value::Null)).collect())
    }
}

/// A column name, borrowed from the input where the format allows it.
struct Name<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Name<'de>, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a column name")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

impl StageChange {
    /// Gives the change's row the position and time of the commit that wrote it (a
    /// change streamed before its commit was made without them).
    pub fn set_commit(&mut self, position: u64, time_us: i64) {
        if let StageChange::Upsert { row, .. } | StageChange::UpsertUnchanged { row, .. } = self {
            row.commit_position = position;
            row.commit_time_us = Some(time_us);
        }
    }

    /// About the bytes the change holds in memory (see [`StagedRow::approx_bytes`]).
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<StageChange>()
            + match self {
                StageChange::Upsert {
                    table, key, row, ..
                } => table.len() + key.len() + row.approx_bytes(),
                StageChange::UpsertUnchanged {
                    table,
                    key,
                    row,
                    unchanged,
                    previous_key,
                    ..
                } => {
                    table.len()
                        + key.len()
                        + row.approx_bytes()
                        + unchanged.iter().map(String::len).sum::<usize>()
                        + previous_key.len()
                }
                StageChange::Delete { table, key } => table.len() + key.len(),
                StageChange::SourceState(state) => state.len(),
                StageChange::Truncate { table } => table.len(),
            }
    }
}

/// One change to apply to the stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StageChange {
    /// Set the row of `key` (moving it out of its old partition if it was elsewhere).
    Upsert {
        table: String,
        key: Vec<u8>,
        partition: Partition,
        row: StagedRow,
    },
    /// Remove the row of `key`, wherever it is.
    Delete { table: String, key: Vec<u8> },
    /// Record the source's own resume state (a snapshot's progress) with the
    /// transaction, so it is durable exactly when the transaction's rows are.
    SourceState(Vec<u8>),
    /// Remove every row of the table (a TRUNCATE); every partition it ever had is
    /// marked dirty, so the target loses the rows too.
    Truncate { table: String },
    /// Set the row of `key` like `Upsert`, except that the columns named in
    /// `unchanged` are not in `row`: they keep their values from the current image of
    /// `previous_key` (the row's key before this change; `key` unless the key changed).
    /// For a source that leaves out values a change did not touch (PostgreSQL's
    /// unchanged TOAST values). Resolved when the change is applied, so the current
    /// image includes every change before it, of the same transaction, of earlier
    /// transactions of the same batch, and of earlier chunks of a large transaction.
    /// Without a current image the change is skipped if `skip_if_absent` (the source
    /// will deliver the whole row later: a snapshot that has not read it yet), and is
    /// an error otherwise. (Appended last: postcard encodes a variant by its index,
    /// and chunks of the pending area are encoded changes.)
    UpsertUnchanged {
        table: String,
        key: Vec<u8>,
        partition: Partition,
        row: StagedRow,
        unchanged: Vec<String>,
        previous_key: Vec<u8>,
        skip_if_absent: bool,
    },
}

/// A value of a kind that cannot be part of a key: its encoding would not compare as
/// the value does (floats, bytes, JSON), or it is NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a key value of this kind cannot be a key: {0}")]
pub struct UnkeyableValue(pub &'static str);

/// Encodes key values as bytes whose order follows the values' order (integers,
/// dates and timestamps numerically, text bytewise), and no encoding is a prefix of
/// another: a tuple of keys encodes unambiguously. The stage reads keys back with
/// [`decode_key`]: change the two together.
pub fn encode_key(values: &[&Value]) -> Result<Vec<u8>, UnkeyableValue> {
    let mut out = Vec::new();
    for v in values {
        match v {
            Value::Bool(b) => out.extend_from_slice(&[0x08, u8::from(*b)]),
            Value::Int(i) => {
                out.push(0x10);
                out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes());
            }
            Value::Date(d) => {
                out.push(0x11);
                out.extend_from_slice(&((*d as u32) ^ (1 << 31)).to_be_bytes());
            }
            Value::Timestamp(t) => {
                out.push(0x12);
                out.extend_from_slice(&((*t as u64) ^ (1 << 63)).to_be_bytes());
            }
            Value::Text(s) => escaped(&mut out, 0x20, s.as_bytes()),
            Value::Decimal(s) => escaped(&mut out, 0x21, s.as_bytes()),
            Value::Null => return Err(UnkeyableValue("null")),
            Value::Float(_) => return Err(UnkeyableValue("float")),
            Value::Bytes(_) => return Err(UnkeyableValue("bytes")),
            Value::Json(_) => return Err(UnkeyableValue("json")),
            Value::Unsupported { .. } => {
                return Err(UnkeyableValue("unsupported type"));
            }
        }
    }
    Ok(out)
}

fn escaped(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Bytes that [`encode_key`] did not make: a damaged stage record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("encoded key")]
pub struct BadKey;

/// The key values [`encode_key`] encoded. Fails on bytes it did not make.
pub fn decode_key(mut bytes: &[u8]) -> Result<Vec<Value>, BadKey> {
    let bad = || BadKey;
    let mut out = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        let fixed = |n: usize| rest.get(..n).ok_or_else(bad);
        let (value, used) = match tag {
            0x08 => (Value::Bool(fixed(1)?[0] != 0), 1),
            0x10 => {
                let raw = u64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?);
                (Value::Int((raw ^ (1 << 63)) as i64), 8)
            }
            0x11 => {
                let raw = u32::from_be_bytes(fixed(4)?.try_into().map_err(|_| bad())?);
                (Value::Date((raw ^ (1 << 31)) as i32), 4)
            }
            0x12 => {
                let raw = u64::from_be_bytes(fixed(8)?.try_into().map_err(|_| bad())?);
                (Value::Timestamp((raw ^ (1 << 63)) as i64), 8)
            }
            0x20 | 0x21 => {
                let mut text = Vec::new();
                let mut i = 0;
                loop {
                    match (rest.get(i), rest.get(i + 1)) {
                        (Some(0), Some(0)) => break,
                        (Some(0), Some(0xFF)) => {
                            text.push(0);
                            i += 2;
                        }
                        (Some(&b), _) if b != 0 => {
                            text.push(b);
                            i += 1;
                        }
                        _ => return Err(bad()),
                    }
                }
                let text = String::from_utf8(text).map_err(|_| bad())?;
                let value = if tag == 0x20 {
                    Value::Text(text)
                } else {
                    Value::Decimal(text)
                };
                (value, i + 2)
            }
            _ => return Err(bad()),
        };
        out.push(value);
        bytes = &rest[used..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_key_inverts_encode_key() {
        let tuples = [
            vec![Value::Int(i64::MIN), Value::Text("a\0b".into())],
            vec![Value::Date(-3), Value::Timestamp(1_700_000_000_000_000)],
            vec![
                Value::Bool(true),
                Value::Decimal("-12.50".into()),
                Value::Text(String::new()),
            ],
        ];
        for tuple in tuples {
            let refs: Vec<&Value> = tuple.iter().collect();
            let bytes = encode_key(&refs).expect("encode");
            assert_eq!(decode_key(&bytes).expect("decode"), tuple);
        }
        assert!(decode_key(&[0x10, 1, 2]).is_err());
        assert!(decode_key(&[0x20, b'a', 0]).is_err());
        assert!(decode_key(&[0x7F]).is_err());
    }

    #[test]
    fn values_in_order_reads_a_staged_row_as_its_values_in_the_given_order() {
        let columns: Vec<String> = ["id", "name", "day", "gone"].map(String::from).to_vec();
        let row = |values: &[(&str, Value)]| StagedRow {
            commit_position: 7,
            commit_time_us: Some(-1),
            op: Op::Update,
            values: values
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
        };
        let read = |row: &StagedRow| {
            let bytes = postcard::to_allocvec(row).expect("encode");
            let mut de = postcard::Deserializer::from_bytes(&bytes);
            ValuesInOrder { columns: &columns }
                .deserialize(&mut de)
                .expect("decode")
        };
        let (id, name, day) = (Value::Int(1), Value::Text("a".into()), Value::Date(3));
        // In order, with a column the order lacks (left out) and one the row lacks (NULL).
        assert_eq!(
            read(&row(&[
                ("id", id.clone()),
                ("name", name.clone()),
                ("extra", Value::Bool(true)),
                ("day", day.clone())
            ])),
            vec![id.clone(), name.clone(), day.clone(), Value::Null]
        );
        // Out of order; a name given twice keeps its first value.
        assert_eq!(
            read(&row(&[
                ("day", day.clone()),
                ("id", id.clone()),
                ("day", Value::Date(9)),
                ("name", name.clone())
            ])),
            vec![id.clone(), name.clone(), day.clone(), Value::Null]
        );
        assert_eq!(read(&row(&[])), vec![Value::Null; 4]);
        // A truncated image is an error, not a panic.
        let bytes = postcard::to_allocvec(&row(&[("id", id)])).expect("encode");
        let mut de = postcard::Deserializer::from_bytes(&bytes[..bytes.len() - 1]);
        assert!(
            ValuesInOrder { columns: &columns }
                .deserialize(&mut de)
                .is_err()
        );
    }
}
