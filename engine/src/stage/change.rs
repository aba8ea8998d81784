//! What the stage is given: a change to one key, the staged row image, and the key's
//! byte encoding. Sources build these; the stage (`super`, which re-exports them)
//! stores them. Kept apart from the RocksDB code so that the feed decoders build
//! without it (the fuzz crate compiles them on their own).

use serde::{Deserialize, Serialize};

use crate::partition::Partition;
use crate::source::{Op, Row};
use crate::value::Value;

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
/// [`super::decode_key`]: change the two together.
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
