//! Building output: rows by column name, and the rows and rejections of one call.

use std::cell::RefCell;

use crate::{Error, Input, PushOutput, Rejection, Value};

/// An output row built by column name. The SDK puts its values in the order
/// `describe` declared the columns; a declared column that is not set, or a column
/// that is not declared, fails the call with [`Error::Other`] (a plugin bug, not a
/// property of the input row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    cells: Vec<(&'static str, Value)>,
}

impl Row {
    /// An empty row.
    pub fn new() -> Row {
        // Room for the columns of most outputs, so that setting them does not grow it.
        Row {
            cells: Vec::with_capacity(8),
        }
    }

    /// Sets a column (anything convertible into a [`Value`]: `i64`, `&str`, `String`,
    /// `bool`, `f64`, [`Decimal`](crate::Decimal), `Option` of those for `null`, or a
    /// `Value`). Setting a column twice keeps the last value.
    pub fn set(mut self, column: &'static str, value: impl Into<Value>) -> Row {
        self.put(column, value.into());
        self
    }

    /// Sets a column in place.
    pub fn put(&mut self, column: &'static str, value: Value) {
        match self.cells.iter_mut().find(|(c, _)| *c == column) {
            Some(cell) => cell.1 = value,
            None => self.cells.push((column, value)),
        }
    }

    /// The value of a column, if set.
    pub fn get(&self, column: &str) -> Option<&Value> {
        self.cells
            .iter()
            .find(|(c, _)| *c == column)
            .map(|(_, v)| v)
    }

    /// The values in the order of `columns` (the declared output columns).
    pub fn into_values(self, columns: &[String]) -> Result<Vec<Value>, Error> {
        // Fast path: set in declared order, as plugins usually do.
        if self.cells.len() == columns.len()
            && self
                .cells
                .iter()
                .zip(columns)
                .all(|((c, _), d)| *c == d.as_str())
        {
            return Ok(self.cells.into_iter().map(|(_, v)| v).collect());
        }
        if let Some((extra, _)) = self
            .cells
            .iter()
            .find(|(c, _)| !columns.iter().any(|d| d.as_str() == *c))
        {
            return Err(Error::Other(format!(
                "output row sets column `{extra}`, which describe does not declare"
            )));
        }
        let mut cells: Vec<(&'static str, Option<Value>)> =
            self.cells.into_iter().map(|(c, v)| (c, Some(v))).collect();
        columns
            .iter()
            .map(|d| {
                cells
                    .iter_mut()
                    .find(|(c, _)| *c == d.as_str())
                    .and_then(|(_, v)| v.take())
                    .ok_or_else(|| {
                        Error::Other(format!("output row does not set declared column `{d}`"))
                    })
            })
            .collect()
    }
}

/// A plugin's declared output columns, and the column names of the last row found in
/// their order: most plugins set every row's columns with the same string literals in
/// the same order, and a row whose names are those very literals (compared by address)
/// needs no comparison of names.
#[derive(Debug, Default)]
pub(crate) struct Declared {
    names: Vec<String>,
    in_order: RefCell<Vec<&'static str>>,
}

impl Declared {
    pub(crate) fn new(names: Vec<String>) -> Declared {
        Declared {
            names,
            in_order: RefCell::default(),
        }
    }

    /// [`Row::into_values`] for these columns.
    pub(crate) fn values(&self, row: Row) -> Result<Vec<Value>, Error> {
        if let Ok(mut known) = self.in_order.try_borrow_mut() {
            if row.cells.len() == known.len()
                && row
                    .cells
                    .iter()
                    .zip(known.iter())
                    .all(|((c, _), k)| std::ptr::eq(*c, *k))
            {
                return Ok(row.cells.into_iter().map(|(_, v)| v).collect());
            }
            if row.cells.len() == self.names.len()
                && row
                    .cells
                    .iter()
                    .zip(&self.names)
                    .all(|((c, _), d)| *c == d.as_str())
            {
                known.clear();
                known.extend(row.cells.iter().map(|(c, _)| *c));
            }
        }
        row.into_values(&self.names)
    }
}

/// The rows and rejections of one `push` or `finish` of a [`PartitionPlugin`](crate::PartitionPlugin).
#[derive(Debug, Default)]
pub struct Output {
    pub(crate) rows: Vec<Row>,
    pub(crate) rejections: Vec<Rejection>,
}

impl Output {
    /// Emits an output row.
    pub fn row(&mut self, row: Row) {
        self.rows.push(row);
    }

    /// Rejects an input row with a reason.
    pub fn reject(&mut self, input: &Input, reason: impl Into<String>) {
        self.rejections.push(Rejection {
            key: input.key().to_vec(),
            reason: reason.into(),
        });
    }

    /// The WIT `push-output`, rows in the order of `columns`.
    pub(crate) fn into_push_output(self, columns: &Declared) -> Result<PushOutput, Error> {
        Ok(PushOutput {
            rows: self
                .rows
                .into_iter()
                .map(|r| columns.values(r))
                .collect::<Result<_, _>>()?,
            rejections: self.rejections,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn rows_named_by_the_same_literals_as_the_last_in_order_skip_the_check_and_others_do_not() {
        let declared = Declared::new(names(&["a", "b"]));
        let in_order = || Row::new().set("a", 1).set("b", 2);
        let want = Ok(vec![Value::Integer(1), Value::Integer(2)]);
        assert_eq!(declared.values(in_order()), want);
        assert_eq!(declared.values(in_order()), want);
        // The same names from other strings, in another order, or one missing: checked
        // and put in order as before.
        let a: &'static str = String::from("a").leak();
        assert_eq!(declared.values(Row::new().set("b", 2).set(a, 1)), want);
        assert_eq!(
            declared.values(Row::new().set("a", 1)),
            Err(Error::Other(
                "output row does not set declared column `b`".into()
            ))
        );
        assert_eq!(declared.values(in_order()), want);
    }

    #[test]
    fn rows_are_put_in_declared_order_and_checked_against_it() {
        let columns = names(&["a", "b", "c"]);
        let row = Row::new().set("c", 3).set("a", 1).set("b", "x");
        assert_eq!(
            row.into_values(&columns),
            Ok(vec![
                Value::Integer(1),
                Value::Text("x".into()),
                Value::Integer(3)
            ])
        );
        let in_order = Row::new().set("a", 1).set("b", None::<i64>).set("c", true);
        assert_eq!(
            in_order.into_values(&columns),
            Ok(vec![Value::Integer(1), Value::Null, Value::Boolean(true)])
        );
        assert_eq!(
            Row::new().set("a", 1).set("b", 2).into_values(&columns),
            Err(Error::Other(
                "output row does not set declared column `c`".into()
            ))
        );
        assert_eq!(
            Row::new().set("a", 1).set("z", 2).into_values(&columns),
            Err(Error::Other(
                "output row sets column `z`, which describe does not declare".into()
            ))
        );
    }
}
