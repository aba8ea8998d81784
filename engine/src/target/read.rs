//! Reading a target partition back, as `verify` compares it with the stage: in
//! chunks, through a cursor.

use tokio_postgres::Client;

use super::schema::bound_literal;
use super::{TargetError, TargetTable, query_err};
use crate::config::quote_ident;
use crate::partition::{Partition, PartitionPredicate};
use crate::value::Value;

/// Rows fetched from the target at a time by [`for_each_chunk`].
pub const FETCH_ROWS: usize = 4096;

/// The rows a target partition holds now, decoded from PostgreSQL's text output as the
/// replication source decodes it (UTC, ISO dates, shortest exact floats). Holds the
/// whole partition: for tests and tools; `verify` reads by [`for_each_chunk`].
pub async fn read_partition(
    client: &mut Client,
    table: &TargetTable,
    partition: &Partition,
) -> Result<Vec<Vec<Value>>, TargetError> {
    let mut out = Vec::new();
    for_each_chunk(client, table, partition, |mut rows| out.append(&mut rows)).await?;
    Ok(out)
}

/// The rows of one partition as an SQL condition on `column` (a target's or a source
/// table's partition column). The simple protocol (for PostgreSQL's text output) takes
/// no bind parameters: the bounds are quoted by `quote_literal`, correct whatever
/// `standard_conforming_strings` is. `None` for a bound no SQL string can hold.
pub fn partition_condition(column: &str, pred: &PartitionPredicate) -> Option<String> {
    let column = quote_ident(column);
    Some(match pred {
        PartitionPredicate::IsNull => format!("{column} IS NULL"),
        PartitionPredicate::Equals(v) => format!("{column} = {}", bound_literal(v)?),
        PartitionPredicate::Range { lower, upper } => format!(
            "{column} >= {} AND {column} < {}",
            bound_literal(lower)?,
            bound_literal(upper)?
        ),
    })
}

/// Hands the rows a target partition holds now to `f` in chunks of [`FETCH_ROWS`],
/// read through a cursor in one read-only REPEATABLE READ transaction (one consistent
/// view, whatever its size). Decoded as [`read_partition`] says.
pub async fn for_each_chunk(
    client: &mut Client,
    table: &TargetTable,
    partition: &Partition,
    mut f: impl FnMut(Vec<Vec<Value>>),
) -> Result<(), TargetError> {
    let pred = table.predicate(partition)?;
    let condition = partition_condition(&table.partition_column, &pred)
        .ok_or_else(|| table.bad_partition(partition))?;
    let cols = table
        .columns
        .iter()
        .map(|(c, _)| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    let what = || format!("read partition {partition} of {}", table.name);
    let tx = client.transaction().await.map_err(query_err(what()))?;
    tx.batch_execute(&format!(
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
         SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL extra_float_digits = 1; SET LOCAL bytea_output = 'hex'; \
         DECLARE weir_read NO SCROLL CURSOR FOR SELECT {cols} FROM {} WHERE {condition}",
        table.name.quoted()
    ))
    .await
    .map_err(query_err(what()))?;
    let fetch = format!("FETCH {FETCH_ROWS} FROM weir_read");
    loop {
        let messages = tx.simple_query(&fetch).await.map_err(query_err(what()))?;
        let mut rows = Vec::with_capacity(FETCH_ROWS);
        for m in messages {
            let tokio_postgres::SimpleQueryMessage::Row(row) = m else {
                continue;
            };
            let mut values = Vec::with_capacity(table.columns.len());
            for (i, (name, ty)) in table.columns.iter().enumerate() {
                let value = match row.get(i) {
                    None => Value::Null,
                    Some(text) => {
                        crate::pg::pgtypes::decode_text(name, ty.oid(), -1, text.as_bytes())
                            .map_err(|e| TargetError::Decode {
                                table: table.name.clone(),
                                message: e.to_string(),
                            })?
                    }
                };
                values.push(value);
            }
            rows.push(values);
        }
        if rows.is_empty() {
            break;
        }
        f(rows);
    }
    tx.commit().await.map_err(query_err(what()))
}
