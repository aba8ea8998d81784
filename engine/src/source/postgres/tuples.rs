//! The values of pgoutput tuples as rows of a configured table: unchanged TOAST
//! values left out (or filled from an image), keys, and old-key images.

use super::error::PgSourceError;
use crate::config::TableConfig;
use crate::feed::StagedRow;
use crate::pg::pgoutput::{OldTuple, RelationColumn, TupleValue};
use crate::pg::pgtypes;
use crate::source::Row;
use crate::value::Value;

/// Looks up the staged row of a key of the table at hand.
pub(super) type KeyLookup<'a> = &'a dyn Fn(&[u8]) -> Option<StagedRow>;

/// The values of a tuple, and the columns whose values are unchanged TOAST values
/// (left out of the row).
pub(super) fn tuple_values(
    table: &TableConfig,
    columns: &[RelationColumn],
    tuple: &[TupleValue],
) -> Result<(Row, Vec<String>), PgSourceError> {
    if columns.len() != tuple.len() {
        return Err(PgSourceError::BadChange {
            table: table.source.to_string(),
            reason: format!(
                "a tuple of {} columns for a relation of {}",
                tuple.len(),
                columns.len()
            ),
        });
    }
    let mut out = Vec::with_capacity(columns.len());
    let mut unchanged = Vec::new();
    for (column, value) in columns.iter().zip(tuple) {
        match pgtypes::decode_tuple_value(
            &column.name,
            column.type_oid,
            column.type_modifier,
            value,
        ) {
            Ok(Some(v)) => out.push((column.name.clone(), v)),
            Ok(None) => unchanged.push(column.name.clone()),
            Err(source) => {
                return Err(PgSourceError::Value {
                    table: table.source.to_string(),
                    column: column.name.clone(),
                    source,
                });
            }
        }
    }
    Ok((out, unchanged))
}

/// Moves the `unchanged` columns that `image` has into `row`.
pub(super) fn take_unchanged(
    row: &mut Row,
    unchanged: &mut Vec<String>,
    image: &[(String, Value)],
) {
    unchanged.retain(|column| match image.iter().find(|(c, _)| c == column) {
        Some((_, value)) => {
            row.push((column.clone(), value.clone()));
            false
        }
        None => true,
    });
}

/// The encoded key of a row of `table`.
pub(super) fn key_of(table: &TableConfig, row: &Row) -> Result<Vec<u8>, PgSourceError> {
    let values = table
        .key
        .iter()
        .map(|k| row.iter().find(|(c, _)| c == k).map(|(_, v)| v))
        .collect::<Option<Vec<&Value>>>()
        .ok_or_else(|| PgSourceError::BadChange {
            table: table.source.to_string(),
            reason: "a row without its key".into(),
        })?;
    crate::feed::encode_key(&values).map_err(|e| PgSourceError::BadChange {
        table: table.source.to_string(),
        reason: e.to_string(),
    })
}

/// The values of a tuple as a row. Unchanged TOAST values come from the staged image
/// of the row's key (`staged`), which only updates have.
pub(super) fn row(
    table: &TableConfig,
    columns: &[RelationColumn],
    tuple: &[TupleValue],
    staged: Option<KeyLookup<'_>>,
) -> Result<Row, PgSourceError> {
    let (mut out, unchanged) = tuple_values(table, columns, tuple)?;
    if unchanged.is_empty() {
        return Ok(out);
    }
    let key = crate::feed::encode_key(
        &table
            .key
            .iter()
            .map(|k| out.iter().find(|(c, _)| c == k).map(|(_, v)| v))
            .collect::<Option<Vec<&Value>>>()
            .ok_or_else(|| PgSourceError::BadChange {
                table: table.source.to_string(),
                reason: "a key column is an unchanged TOAST value".into(),
            })?,
    )
    .map_err(|e| PgSourceError::BadChange {
        table: table.source.to_string(),
        reason: e.to_string(),
    })?;
    let image = staged.and_then(|lookup| lookup(&key));
    for column in unchanged {
        let value = image
            .as_ref()
            .and_then(|r| r.values.iter().find(|(c, _)| *c == column))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| PgSourceError::ToastWithoutRow {
                table: table.source.to_string(),
                column: column.clone(),
            })?;
        out.push((column, value));
    }
    Ok(out)
}

/// The key columns of an old tuple (`K`: only they are set; `O`: the whole row).
pub(super) fn key_image(
    table: &TableConfig,
    columns: &[RelationColumn],
    old: &OldTuple,
) -> Result<Row, PgSourceError> {
    let tuple = match old {
        OldTuple::Key(t) | OldTuple::Full(t) => t,
    };
    let full = row(table, columns, tuple, None);
    // An old tuple may hold unchanged TOAST values outside the key; only the key matters.
    let mut out = Vec::with_capacity(table.key.len());
    match full {
        Ok(r) => {
            for (c, v) in r {
                if table.key.contains(&c) {
                    out.push((c, v));
                }
            }
            Ok(out)
        }
        Err(PgSourceError::ToastWithoutRow { .. }) => Ok(out),
        Err(e) => Err(e),
    }
}
