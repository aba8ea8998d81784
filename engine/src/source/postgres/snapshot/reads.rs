//! How a snapshot chunk is read on several connections at once: by spans of pages (a
//! first load's pages left, a whole-table resync) or by ranges of keys (a chunk in key
//! order), each span or range on its own connection between the chunk's one pair of
//! watermarks.

use super::visibility::XidSnapshot;
use super::{PgSourceError, Snapshot, reader};
use crate::config::TableConfig;
use crate::pgerror::PgError;

impl Snapshot {
    /// The ranges of keys the next chunk in key order is read in, one per connection
    /// (`None`: one read, as on one connection): the keys after `after` (a literal
    /// tuple from [`key_literals`]; `None`: from the first) split every `chunk_rows`
    /// keys, found by one read of the keys alone. Each range is a condition on the
    /// key tuple; the last is open-ended. A boundary holding a NULL (a table keyed by
    /// its replica identity's columns) cannot be compared: one range then.
    pub(super) async fn key_ranges(
        &self,
        table: &TableConfig,
        key_types: &[String],
        from: &str,
        keys: &str,
        after: Option<&str>,
    ) -> Result<Option<Vec<KeyRange>>, PgSourceError> {
        let chunk = self.chunk_rows;
        let past = after.map_or(String::new(), |after| {
            format!(" WHERE ({keys}) > ({after})")
        });
        // The limit right on the ordered read of the keys (an index-only scan that
        // stops there), whatever the plan of the window above it.
        let sql = format!(
            "SELECT {keys} FROM (SELECT {keys}, row_number() OVER (ORDER BY {keys}) AS weir_n \
             FROM (SELECT {keys} FROM {from}{past} ORDER BY {keys} LIMIT {}) AS weir_next) \
             AS weir_bounds WHERE weir_n % {chunk} = 0 ORDER BY weir_n",
            chunk.saturating_mul(self.parallelism - 1)
        );
        let bounds =
            self.client
                .simple_query(&sql)
                .await
                .map_err(|source| PgSourceError::Query {
                    what: "split a snapshot chunk into ranges of keys",
                    source: PgError(source),
                })?;
        let mut literals = Vec::new();
        for row in rows_of(bounds) {
            let key: Vec<Option<String>> = (0..table.key.len())
                .map(|i| row.get(i).map(str::to_owned))
                .collect();
            if key.iter().any(Option::is_none) {
                return Ok(None);
            }
            literals.push(key_literals(table, key_types, &key)?);
        }
        if literals.is_empty() {
            return Ok(None);
        }
        let mut ranges = Vec::with_capacity(literals.len() + 1);
        let mut low = after.map(str::to_owned);
        for high in literals {
            ranges.push(KeyRange {
                after: low.replace(high.clone()),
                through: Some(high),
            });
        }
        ranges.push(KeyRange {
            after: low,
            through: None,
        });
        Ok(Some(ranges))
    }

    /// The type of each key column of `table` as the source declares it (a domain's
    /// or an enum's own name: a key compares in its own type's order and operators,
    /// which its text's may not have).
    pub(super) async fn key_types(
        &self,
        table: &TableConfig,
    ) -> Result<Vec<String>, PgSourceError> {
        let rows = self
            .client
            .query(
                "SELECT format_type(a.atttypid, a.atttypmod) FROM unnest($2::text[]) WITH ORDINALITY AS k(name, i) \
                 JOIN pg_attribute a ON a.attrelid = to_regclass($1) AND a.attname = k.name AND NOT a.attisdropped ORDER BY k.i",
                &[&table.source.quoted(), &table.key],
            )
            .await
            .map_err(|source| PgSourceError::Query {
                what: "read the types of a source table's key columns",
                source: PgError(source),
            })?;
        if rows.len() != table.key.len() {
            return Err(PgSourceError::SourceTable {
                table: table.source.to_string(),
                problem: "lacks a configured key column: dropped or renamed".into(),
            });
        }
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The rows of `ranges` of keys (from [`Self::key_ranges`]), each read by `select`
    /// in key order on its own connection, all at once, and whether the table has rows
    /// past them. A bounded range reads at most twice `chunk_rows` rows (the split
    /// counted about `chunk_rows`; rows inserted since may add some); one that reads
    /// that many was cut short, so the chunk ends with it and the ranges after it are
    /// dropped, to be read again from its last key. The open-ended last range reads
    /// `chunk_rows` rows at most, like a chunk on one connection.
    pub(super) async fn read_key_ranges(
        &mut self,
        select: &str,
        keys: &str,
        ranges: &[KeyRange],
    ) -> Result<(Vec<tokio_postgres::SimpleQueryRow>, bool), PgSourceError> {
        let chunk = self.chunk_rows;
        let queries = ranges
            .iter()
            .map(|range| {
                let mut conditions = Vec::new();
                if let Some(after) = &range.after {
                    conditions.push(format!("({keys}) > ({after})"));
                }
                if let Some(through) = &range.through {
                    conditions.push(format!("({keys}) <= ({through})"));
                }
                let mut sql = select.to_owned();
                if !conditions.is_empty() {
                    sql.push_str(" WHERE ");
                    sql.push_str(&conditions.join(" AND "));
                }
                sql.push_str(&format!(" ORDER BY {keys} LIMIT {}", range.limit(chunk)));
                sql
            })
            .collect();
        let read = self
            .read_at_once(queries, "read a snapshot chunk of keys")
            .await?;
        Ok(join_ranges(
            ranges.iter().map(|range| range.limit(chunk)).zip(read),
        ))
    }

    /// The rows of `spans` of pages (`from` inclusive, `to` exclusive; `None`: to the
    /// end), each read by `select` with its TID range, on as many connections at once.
    /// All are read between the same two watermarks: a row read at any moment between
    /// them is right unless the stream changes it there, as for one read.
    pub(super) async fn read_spans(
        &mut self,
        select: &str,
        spans: &[(u64, Option<u64>)],
    ) -> Result<Vec<tokio_postgres::SimpleQueryRow>, PgSourceError> {
        // A TID range scan reads only these pages; every row in them is read, in no
        // order.
        let queries = spans
            .iter()
            .map(|&(from, to)| {
                let mut sql = format!("{select} WHERE ctid >= '({from},0)'::tid");
                if let Some(to) = to {
                    sql.push_str(&format!(" AND ctid < '({to},0)'::tid"));
                }
                sql
            })
            .collect();
        let read = self
            .read_at_once(queries, "read a snapshot chunk of pages")
            .await?;
        Ok(read.into_iter().flatten().collect())
    }

    /// Runs each of `queries` on a connection of its own (`client`, then `readers`,
    /// opened as needed), all at once, each in a transaction whose snapshot is recorded
    /// in `read_snapshots` (see `visibility`); the rows of each, in order. `what` names
    /// the read in an error.
    pub(super) async fn read_at_once(
        &mut self,
        queries: Vec<String>,
        what: &'static str,
    ) -> Result<Vec<Vec<tokio_postgres::SimpleQueryRow>>, PgSourceError> {
        while self.readers.len() + 1 < queries.len() {
            self.readers.push(reader(&self.dsn).await?);
        }
        let function = self.snapshot_function;
        let wrapped: Vec<String> = queries
            .iter()
            .map(|sql| {
                format!(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT {function}()::text; {sql}; COMMIT"
                )
            })
            .collect();
        let clients: Vec<&tokio_postgres::Client> = std::iter::once(&self.client)
            .chain(self.readers.iter())
            .take(wrapped.len())
            .collect();
        let reads = wrapped
            .iter()
            .zip(&clients)
            .map(|(sql, client)| client.simple_query(sql));
        let results = futures_util::future::join_all(reads).await;
        if results.iter().any(Result::is_err) {
            // A failed read leaves its transaction open and aborted.
            for client in &clients {
                let _ = client.batch_execute("ROLLBACK").await;
            }
        }
        let mut out = Vec::with_capacity(results.len());
        for result in results {
            let messages = result.map_err(|source| PgSourceError::Query {
                what,
                source: PgError(source),
            })?;
            let mut rows = rows_of(messages).into_iter();
            let snapshot = rows
                .next()
                .and_then(|r| r.get(0).and_then(XidSnapshot::parse))
                .ok_or_else(|| PgSourceError::BadChange {
                    table: what.to_owned(),
                    reason: "the read's snapshot could not be read".into(),
                })?;
            self.read_snapshots.push(snapshot);
            out.push(rows.collect());
        }
        Ok(out)
    }
}

/// The rows of a simple query's messages.
pub(super) fn rows_of(
    messages: Vec<tokio_postgres::SimpleQueryMessage>,
) -> Vec<tokio_postgres::SimpleQueryRow> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

/// One range of keys of a chunk read on several connections: after `after`
/// (exclusive), through `through` (inclusive); each a literal key tuple, `None`: from
/// the first key, or to the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyRange {
    after: Option<String>,
    through: Option<String>,
}

impl KeyRange {
    /// The most rows one read of the range takes: see [`Snapshot::read_key_ranges`].
    fn limit(&self, chunk_rows: usize) -> usize {
        if self.through.is_some() {
            chunk_rows.saturating_mul(2)
        } else {
            chunk_rows
        }
    }
}

/// The rows read by consecutive ranges of keys, each with the limit its read had, joined
/// in order up to and including the first range that read its limit (it may have been
/// cut short, so no later range's rows can follow it), and whether the table may have
/// rows past them: a range read its limit, or none did and nothing is past the last.
fn join_ranges<T>(reads: impl IntoIterator<Item = (usize, Vec<T>)>) -> (Vec<T>, bool) {
    let mut joined = Vec::new();
    for (limit, rows) in reads {
        let full = rows.len() >= limit;
        joined.extend(rows);
        if full {
            return (joined, true);
        }
    }
    (joined, false)
}

/// The key of a row of `table` (its key columns' texts, in key order) as a list of
/// literals, each cast to its column's type at the source (`types`, from
/// [`Snapshot::key_types`]): `'7'::bigint, 'a''b'::text, 'paid'::order_status`.
pub(super) fn key_literals(
    table: &TableConfig,
    types: &[String],
    key: &[Option<String>],
) -> Result<String, PgSourceError> {
    let name = table.source.to_string();
    let mut literals = Vec::with_capacity(key.len());
    for ((k, value), declared) in table.key.iter().zip(key).zip(types) {
        let value = value.as_deref().ok_or_else(|| PgSourceError::BadChange {
            table: name.clone(),
            reason: "a key column of a snapshot row is NULL".into(),
        })?;
        // One quoting function, right whatever the source's
        // `standard_conforming_strings` is (a key may hold `\` and `'`).
        let literal =
            crate::config::quote_literal(value).ok_or_else(|| PgSourceError::BadChange {
                table: name.clone(),
                reason: format!("key column `{k}` of a snapshot row holds a NUL"),
            })?;
        literals.push(format!("{literal}::{declared}"));
    }
    Ok(literals.join(", "))
}

/// The next chunk of pages of a range `from`..`to` (`None`: to the end of a table of
/// `pages` pages now, however it grows): up to `parallelism` spans of `span` pages,
/// one per connection, in order; the last is open-ended when it reaches the table's
/// end.
pub(super) fn page_spans(
    from: u64,
    to: Option<u64>,
    span: u64,
    pages: u64,
    parallelism: usize,
) -> Vec<(u64, Option<u64>)> {
    let span = span.max(1);
    let mut spans = Vec::with_capacity(parallelism);
    let mut start = from;
    while spans.len() < parallelism.max(1) {
        let end = start.saturating_add(span);
        match to {
            Some(to) => {
                spans.push((start, Some(to.min(end))));
                if end >= to {
                    break;
                }
            }
            None if end >= pages => {
                spans.push((start, None));
                break;
            }
            None => spans.push((start, Some(end))),
        }
        start = end;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranges_join_up_to_the_first_cut_short_and_say_whether_rows_are_left() {
        // Every range read less than its limit: all of them, nothing left.
        assert_eq!(
            join_ranges([(4, vec![1, 2]), (4, vec![3]), (2, vec![4])]),
            (vec![1, 2, 3, 4], false)
        );
        // The open-ended last range read its limit: more rows may follow.
        assert_eq!(
            join_ranges([(4, vec![1, 2]), (2, vec![3, 4])]),
            (vec![1, 2, 3, 4], true)
        );
        // A bounded range cut short: the chunk ends with it, the next range's rows go.
        assert_eq!(
            join_ranges([(2, vec![1, 2]), (4, vec![5])]),
            (vec![1, 2], true)
        );
        // Empty ranges (rows deleted since the split) end nothing.
        assert_eq!(
            join_ranges([(4, vec![]), (2, Vec::<i32>::new())]),
            (vec![], false)
        );
        assert_eq!(
            KeyRange {
                after: None,
                through: Some("1".into())
            }
            .limit(10),
            20,
            "a bounded range takes twice a chunk"
        );
        assert_eq!(
            KeyRange {
                after: Some("1".into()),
                through: None
            }
            .limit(10),
            10
        );
    }

    /// A chunk of pages: spans of `span` pages, one per connection, never past its
    /// range's end; a range to the table's end ends open at the pages it has now.
    #[test]
    fn page_spans_cover_the_range_in_order_and_never_past_it() {
        assert_eq!(
            page_spans(0, Some(10), 3, 100, 2),
            [(0, Some(3)), (3, Some(6))]
        );
        assert_eq!(
            page_spans(0, Some(6), 3, 100, 4),
            [(0, Some(3)), (3, Some(6))]
        );
        assert_eq!(page_spans(9, Some(10), 3, 100, 2), [(9, Some(10))]);
        assert_eq!(page_spans(0, None, 3, 5, 4), [(0, Some(3)), (3, None)]);
        assert_eq!(page_spans(6, None, 3, 5, 4), [(6, None)]);
        assert_eq!(page_spans(0, None, 0, 0, 0), [(0, None)], "an empty table");
        for parallelism in 1..5 {
            for pages in 0..20 {
                let mut from = 0;
                let mut chunks = 0;
                loop {
                    let spans = page_spans(from, None, 2, pages, parallelism);
                    assert!(!spans.is_empty() && spans.len() <= parallelism);
                    assert_eq!(spans[0].0, from);
                    for pair in spans.windows(2) {
                        assert_eq!(pair[0].1, Some(pair[1].0), "contiguous");
                    }
                    chunks += 1;
                    match spans.last().and_then(|s| s.1) {
                        Some(to) => from = to,
                        None => break,
                    }
                }
                assert!(chunks <= (pages as usize / 2 / parallelism) + 2);
            }
        }
    }
}
