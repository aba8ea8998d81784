//! Reading a target partition back, as `verify` compares it with the stage.

use tokio_postgres::Client;

use super::schema::bound_literal;
use super::{TargetError, TargetTable, query_err};
use crate::config::quote_ident;
use crate::partition::{Partition, PartitionPredicate};
use crate::value::Value;

/// The rows a target partition holds now, decoded from PostgreSQL's text output as the
/// replication source decodes it (UTC, ISO dates, shortest exact floats).
pub async fn read_partition(
    client: &Client,
    table: &TargetTable,
    partition: &Partition,
) -> Result<Vec<Vec<Value>>, TargetError> {
    let pred = table.predicate(partition)?;
    let column = quote_ident(&table.partition_column);
    // The simple protocol (for PostgreSQL's text output) takes no bind parameters: the
    // bounds are quoted by `quote_literal`, correct whatever standard_conforming_strings.
    let literal = |v: &Value| bound_literal(v).ok_or_else(|| table.bad_partition(partition));
    let condition = match &pred {
        PartitionPredicate::IsNull => format!("{column} IS NULL"),
        PartitionPredicate::Equals(v) => format!("{column} = {}", literal(v)?),
        PartitionPredicate::Range { lower, upper } => format!(
            "{column} >= {} AND {column} < {}",
            literal(lower)?,
            literal(upper)?
        ),
    };
    let cols = table
        .columns
        .iter()
        .map(|(c, _)| quote_ident(c))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 1; SET bytea_output = 'hex'; \
         SELECT {cols} FROM {} WHERE {condition}",
        table.name.quoted()
    );
    let messages = client.simple_query(&sql).await.map_err(query_err(format!(
        "read partition {partition} of {}",
        table.name
    )))?;
    let mut out = Vec::new();
    for m in messages {
        let tokio_postgres::SimpleQueryMessage::Row(row) = m else {
            continue;
        };
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, (name, ty)) in table.columns.iter().enumerate() {
            let value = match row.get(i) {
                None => Value::Null,
                Some(text) => crate::pg::pgtypes::decode_text(name, ty.oid(), -1, text.as_bytes())
                    .map_err(|e| TargetError::Decode {
                        table: table.name.clone(),
                        message: e.to_string(),
                    })?,
            };
            values.push(value);
        }
        out.push(values);
    }
    Ok(out)
}
