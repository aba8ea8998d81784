//! Reading a source table's current rows, as `weir verify --against-source` compares
//! them with the target: the rows a condition selects, through a cursor in one
//! read-only REPEATABLE READ transaction, decoded from the text output exactly as the
//! watermark snapshot decodes them.

use crate::pgerror::PgError;
use tokio::sync::mpsc;

use super::error::PgSourceError;
use super::setup::connect;
use super::snapshot::decode_row;
use super::types::column_types;
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
    let query = |what: &'static str| {
        move |source| PgSourceError::Query {
            what,
            source: PgError(source),
        }
    };
    let mut client = connect(dsn).await?;
    let types = column_types(&client, &table.source).await?;
    let columns: Vec<String> = table.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let tx = client
        .transaction()
        .await
        .map_err(query("begin a read of the source"))?;
    // The text forms the stream and the snapshot read, so all decode alike.
    let declared = tx
        .batch_execute(&format!(
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; \
             SET LOCAL DateStyle = ISO; SET LOCAL IntervalStyle = postgres; SET LOCAL TimeZone = 'UTC'; SET LOCAL extra_float_digits = 3; \
             DECLARE weir_source NO SCROLL CURSOR FOR SELECT {} FROM {} WHERE {condition}",
            columns.join(", "),
            table.source.quoted()
        ))
        .await;
    match declared {
        // The partition's value is no value of the column's type at the source now (an
        // enum's label renamed, or dropped with its rows): no row can be in it.
        Err(e)
            if e.code() == Some(&tokio_postgres::error::SqlState::INVALID_TEXT_REPRESENTATION) =>
        {
            tracing::debug!(table = %table.source, "a partition's value is not a value of its column's type at the source: it holds no rows there");
            return Ok(());
        }
        declared => declared.map_err(query("read the source table's rows"))?,
    }
    let fetch = format!("FETCH {} FROM weir_source", chunk_rows.max(1));
    loop {
        let messages = tx
            .simple_query(&fetch)
            .await
            .map_err(query("read the source table's rows"))?;
        let mut chunk = Vec::with_capacity(chunk_rows);
        for message in messages {
            if let tokio_postgres::SimpleQueryMessage::Row(r) = message {
                chunk.push(decode_row(table, &types, &r)?);
            }
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

/// The distinct values of `expr` (SQL over `table`'s columns) among the rows
/// `condition` selects, decoded as the stream decodes them: as a `timestamp`
/// (`as_timestamp`), or as the partition column's own type. The partitions a source
/// table holds, for `verify --against-source`.
pub async fn distinct_values(
    dsn: &Dsn,
    table: &TableConfig,
    expr: &str,
    condition: &str,
    as_timestamp: bool,
) -> Result<Vec<Value>, PgSourceError> {
    /// `timestamp without time zone` in `pg_type.dat`.
    const TIMESTAMP: u32 = 1114;
    let client = connect(dsn).await?;
    let (oid, modifier) = if as_timestamp {
        (TIMESTAMP, -1)
    } else {
        column_types(&client, &table.source)
            .await?
            .get(&table.partition_by)
            .copied()
            .unwrap_or((25, -1))
    };
    let messages = client
        .simple_query(&format!(
            "SET DateStyle = ISO; SET TimeZone = 'UTC'; SET extra_float_digits = 3; \
             SELECT DISTINCT {expr} FROM {} WHERE {condition}",
            table.source.quoted()
        ))
        .await
        .map_err(|source| PgSourceError::Query {
            what: "list the partitions the source table holds",
            source: PgError(source),
        })?;
    let mut out = Vec::new();
    for message in messages {
        let tokio_postgres::SimpleQueryMessage::Row(r) = message else {
            continue;
        };
        out.push(match r.get(0) {
            None => Value::Null,
            Some(text) => pgtypes::decode_text(&table.partition_by, oid, modifier, text.as_bytes())
                .map_err(|source| PgSourceError::Value {
                    table: table.source.to_string(),
                    column: table.partition_by.clone(),
                    source,
                })?,
        });
    }
    Ok(out)
}
