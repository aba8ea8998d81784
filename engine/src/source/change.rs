//! A decoded row change ([`Op`], [`Row`]) and how it becomes stage input
//! ([`keyed_changes`]). Shared by every source; kept apart from the sources' I/O (and
//! re-exported by `super`) so that the feed decoders build on their own (the fuzz
//! crate compiles them without the engine).

use serde::{Deserialize, Serialize};

use crate::config::{OnNullPartition, TableConfig};
use crate::partition::{Partition, partition_of};
use crate::stage::{StageChange, StagedRow, encode_key};
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
    let source = table.source.to_string();
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
    let upsert = |row: Row, key: Vec<u8>| -> Result<StageChange, String> {
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
            table: source.clone(),
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
            out.push(upsert(after, key)?);
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
