//! Reading a source table's current rows, as `weir verify --against-source` compares
//! them with the target: the rows a condition selects, through a cursor in one
//! read-only REPEATABLE READ transaction, decoded from the text output exactly as the
//! watermark snapshot decodes them.

use tokio::sync::mpsc;

use super::error::PgSourceError;
use super::setup::connect;
use super::snapshot::column_types;
use crate::config::{Dsn, TableConfig, quote_ident};
use crate::pg::pgtypes;
use crate::source::Row;
use crate::value::Value;

/// Sends the rows of `table` that `condition` selects to `rows`, `chunk_rows` at a
/// time; a failure is sent too, and ends the read. Stops when `rows` is dropped.
pub async fn read_rows(
    dsn: &Dsn,
    table: &TableConfig,
    condition: &str,
    chunk_rows: usize,
    rows: mpsc::Sender<Result<Vec<Row>, PgSourceError>>,
) {
    if let Err(error) = read(dsn, table, condition, chunk_rows, &rows).await {
        let _ = rows.send(Err(error)).await;
    }
}

async fn read(
    dsn: &Dsn,
    table: &TableConfig,
    condition: &str,
    chunk_rows: usize,
    rows: &mpsc::Sender<Result<Vec<Row>, PgSourceError>>,
) -> Result<(), PgSourceError> {
    let query = |what: &'static str| move |source| PgSourceError::Query { what, source };
    let mut client = connect(dsn).await?;
    let types = column_types(&client, &table.source).await?;
    let name = table.source.to_string();
    let columns: Vec<String> = table.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let tx = client
        .transaction()
        .await
        .map_err(query("begin a read of the source"))?;
    // The text forms the stream and the snapshot read, so all decode alike.
    tx.batch_execute(&format!(
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
         SET LOCAL DateStyle = ISO; SET LOCAL IntervalStyle = postgres; SET LOCAL TimeZone = 'UTC'; SET LOCAL extra_float_digits = 3; \
         DECLARE weir_source NO SCROLL CURSOR FOR SELECT {} FROM {} WHERE {condition}",
        columns.join(", "),
        table.source.quoted()
    ))
    .await
    .map_err(query("read the source table's rows"))?;
    let fetch = format!("FETCH {} FROM weir_source", chunk_rows.max(1));
    loop {
        let messages = tx
            .simple_query(&fetch)
            .await
            .map_err(query("read the source table's rows"))?;
        let mut chunk = Vec::with_capacity(chunk_rows);
        for message in messages {
            let tokio_postgres::SimpleQueryMessage::Row(r) = message else {
                continue;
            };
            let mut row = Vec::with_capacity(table.columns.len());
            for (i, column) in table.columns.iter().enumerate() {
                let (oid, modifier) = types.get(&column.name).copied().unwrap_or((25, -1));
                let value = match r.get(i) {
                    None => Value::Null,
                    Some(t) => pgtypes::decode_text(&column.name, oid, modifier, t.as_bytes())
                        .map_err(|source| PgSourceError::Value {
                            table: name.clone(),
                            column: column.name.clone(),
                            source,
                        })?,
                };
                row.push((column.name.clone(), value));
            }
            chunk.push(row);
        }
        if chunk.is_empty() {
            break;
        }
        if rows.send(Ok(chunk)).await.is_err() {
            return Ok(());
        }
    }
    tx.commit()
        .await
        .map_err(query("end the read of the source"))
}

/// The distinct values of `expr` (SQL over `table`'s columns, as text) among the rows
/// `condition` selects: the partitions a window of the source holds, for `verify
/// --against-source`.
pub async fn distinct_values(
    dsn: &Dsn,
    table: &crate::config::TableName,
    expr: &str,
    condition: &str,
) -> Result<Vec<Option<String>>, PgSourceError> {
    let client = connect(dsn).await?;
    let messages = client
        .simple_query(&format!(
            "SET TimeZone = 'UTC'; SELECT DISTINCT ({expr})::text FROM {} WHERE {condition}",
            table.quoted()
        ))
        .await
        .map_err(|source| PgSourceError::Query {
            what: "list the partitions the source table holds",
            source,
        })?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_owned)),
            _ => None,
        })
        .collect())
}
