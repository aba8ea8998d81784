//! Reading input: staged rows with typed column getters, the plugin config, and
//! per-row rejections.

use std::fmt;

use std::rc::Rc;

use crate::{ColumnValue, Decimal, DecimalError, Error, Op, StagedRow, Value};

/// Why one input row is refused. It becomes a `rejection` (the row goes to the
/// dead-letter table with this reason, or fails the job, per the table's
/// `on_reject`).
///
/// The reason is part of the plugin's deterministic output: it must depend only on
/// the row and the config, and must not contain secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject(pub String);

impl Reject {
    /// A rejection with this reason.
    pub fn new(reason: impl Into<String>) -> Reject {
        Reject(reason.into())
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One staged row as pushed by the host: key, metadata and columns by name.
///
/// On contract 0.2 a row carries its values by position in the session's input
/// schema; on 0.1 each value carries its column's name. The getters read both alike.
///
/// Typed getters come in two forms: `int("id")` refuses `null`, `int_or_null("id")`
/// returns `None` for it. Both refuse a missing column and a value of another case
/// (no coercion, not even integer to decimal). Their rejection reasons are fixed
/// texts, so that plugins in other languages can give the same ones:
///
/// * ``column `NAME` is missing``
/// * ``column `NAME` is null``
/// * ``column `NAME` is not KIND`` (KIND is the expected case: `a boolean`,
///   `an integer`, `a float`, `text`, `bytes`, `a decimal`, `a date`, `a timestamp`,
///   `json`)
/// * ``column `NAME` is not a finite decimal`` (`NaN`, `Infinity`, `-Infinity`)
/// * ``column `NAME` is not valid decimal text`` / ``… has too many digits``
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    columns: Columns,
    op: Op,
    commit_position: u64,
    commit_time: Option<i64>,
}

/// A row's values: by name (contract 0.1) or by position in the schema (0.2).
#[derive(Debug, Clone, PartialEq)]
enum Columns {
    Named {
        key: Vec<Value>,
        columns: Vec<ColumnValue>,
    },
    Positional {
        key: Vec<Value>,
        schema: Rc<Schema>,
        values: Vec<Option<Value>>,
    },
}

/// The input schema of a contract-0.2 session: column names in row order and the
/// positions of the key columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schema {
    names: Vec<String>,
    key: Vec<usize>,
}

impl Schema {
    /// A schema of these column names whose key is the columns at `key` (positions).
    pub fn new(names: Vec<String>, key: Vec<usize>) -> Schema {
        Schema { names, key }
    }

    /// The column names, in row order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The positions of the table's key columns, in key order.
    pub fn key_positions(&self) -> &[usize] {
        &self.key
    }

    /// The position of a column.
    pub fn position(&self, column: &str) -> Option<usize> {
        self.names.iter().position(|n| n == column)
    }
}

impl From<StagedRow> for Input {
    fn from(row: StagedRow) -> Input {
        Input {
            columns: Columns::Named {
                key: row.key,
                columns: row.columns,
            },
            op: row.op,
            commit_position: row.commit_position,
            commit_time: row.commit_time,
        }
    }
}

macro_rules! getters {
    ($( $(#[$doc:meta])* $name:ident, $or_null:ident, $case:ident, $kind:literal, $t:ty, |$v:ident| $conv:expr; )*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, column: &str) -> Result<$t, Reject> {
                self.$or_null(column)?
                    .ok_or_else(|| Reject(format!("column `{column}` is null")))
            }

            $(#[$doc])*
            /// `None` for `null`.
            pub fn $or_null(&self, column: &str) -> Result<Option<$t>, Reject> {
                match self.value(column)? {
                    Value::Null => Ok(None),
                    Value::$case($v) => Ok(Some($conv)),
                    _ => Err(Reject(format!(concat!("column `{}` is not ", $kind), column))),
                }
            }
        )*
    };
}

impl Input {
    /// A row of a contract-0.2 session: `values` in `schema`'s order (`None`: the row
    /// has no such column).
    pub fn positional(
        key: Vec<Value>,
        schema: Rc<Schema>,
        values: Vec<Option<Value>>,
        op: Op,
        commit_position: u64,
        commit_time: Option<i64>,
    ) -> Input {
        Input {
            columns: Columns::Positional {
                key,
                schema,
                values,
            },
            op,
            commit_position,
            commit_time,
        }
    }

    /// The values of the table's key columns, in key order.
    pub fn key(&self) -> &[Value] {
        match &self.columns {
            Columns::Named { key, .. } | Columns::Positional { key, .. } => key,
        }
    }

    /// What happened to the row last.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The source position of the transaction that wrote this image.
    pub fn commit_position(&self) -> u64 {
        self.commit_position
    }

    /// The commit time of that transaction (microseconds since the epoch, UTC), if
    /// the source gave one.
    pub fn commit_time(&self) -> Option<i64> {
        self.commit_time
    }

    /// The row's columns and their values, in the source's order (a column the row
    /// has no value for is left out).
    pub fn columns(&self) -> Vec<(&str, &Value)> {
        match &self.columns {
            Columns::Named { columns, .. } => columns
                .iter()
                .map(|c| (c.name.as_str(), &c.value))
                .collect(),
            Columns::Positional { schema, values, .. } => schema
                .names
                .iter()
                .zip(values)
                .filter_map(|(n, v)| v.as_ref().map(|v| (n.as_str(), v)))
                .collect(),
        }
    }

    /// The value of a column, `None` if the row has no such column.
    pub fn get(&self, column: &str) -> Option<&Value> {
        match &self.columns {
            Columns::Named { columns, .. } => {
                columns.iter().find(|c| c.name == column).map(|c| &c.value)
            }
            Columns::Positional { schema, values, .. } => {
                values.get(schema.position(column)?)?.as_ref()
            }
        }
    }

    /// The value of a column; a missing column is a rejection.
    pub fn value(&self, column: &str) -> Result<&Value, Reject> {
        self.get(column)
            .ok_or_else(|| Reject(format!("column `{column}` is missing")))
    }

    getters! {
        /// A `boolean` column.
        boolean, boolean_or_null, Boolean, "a boolean", bool, |v| *v;
        /// An `integer` column.
        int, int_or_null, Integer, "an integer", i64, |v| *v;
        /// A `float` column.
        float, float_or_null, Float, "a float", f64, |v| *v;
        /// A `text` column.
        text, text_or_null, Text, "text", &str, |v| v.as_str();
        /// A `bytes` column.
        bytes, bytes_or_null, Bytes, "bytes", &[u8], |v| v.as_slice();
        /// A `decimal` column as its exact text.
        decimal_text, decimal_text_or_null, Decimal, "a decimal", &str, |v| v.as_str();
        /// A `date` column: days since 1970-01-01.
        date, date_or_null, Date, "a date", i32, |v| *v;
        /// A `timestamp` column: microseconds since 1970-01-01T00:00:00.
        timestamp, timestamp_or_null, Timestamp, "a timestamp", i64, |v| *v;
        /// A `json` column as JSON text.
        json, json_or_null, Json, "json", &str, |v| v.as_str();
    }

    /// A `decimal` column parsed into an exact [`Decimal`].
    pub fn decimal(&self, column: &str) -> Result<Decimal, Reject> {
        self.decimal_or_null(column)?
            .ok_or_else(|| Reject(format!("column `{column}` is null")))
    }

    /// A `decimal` column parsed into an exact [`Decimal`]; `None` for `null`.
    pub fn decimal_or_null(&self, column: &str) -> Result<Option<Decimal>, Reject> {
        let Some(text) = self.decimal_text_or_null(column)? else {
            return Ok(None);
        };
        text.parse().map(Some).map_err(|e| {
            Reject(match e {
                DecimalError::NotFinite => format!("column `{column}` is not a finite decimal"),
                DecimalError::TooManyDigits => format!("column `{column}` has too many digits"),
                DecimalError::Invalid | DecimalError::Inexact => {
                    format!("column `{column}` is not valid decimal text")
                }
            })
        })
    }
}

/// The plugin config: the table's plugin settings as key/value text, sorted by key,
/// keys unique (as the host gives them).
///
/// Lookup errors are [`Error::InvalidConfig`] with fixed texts naming the key, never
/// the value (a value may be a secret):
///
/// * ``missing config key `KEY` ``
/// * ``config `KEY` is not valid decimal text`` / ``… is not a finite decimal`` /
///   ``… has too many digits``
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    /// A config from key/value pairs (sorted here, so tests may give any order).
    pub fn new(mut entries: Vec<(String, String)>) -> Config {
        entries.sort();
        Config { entries }
    }

    /// All entries, sorted by key.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .and_then(|i| self.entries.get(i))
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`; a missing key is an error.
    pub fn require(&self, key: &str) -> Result<&str, Error> {
        self.get(key)
            .ok_or_else(|| Error::InvalidConfig(format!("missing config key `{key}`")))
    }

    /// The value of `key` as an exact, finite decimal.
    pub fn decimal(&self, key: &str) -> Result<Decimal, Error> {
        self.require(key)?.parse().map_err(|e| {
            Error::InvalidConfig(match e {
                DecimalError::NotFinite => format!("config `{key}` is not a finite decimal"),
                DecimalError::TooManyDigits => format!("config `{key}` has too many digits"),
                DecimalError::Invalid | DecimalError::Inexact => {
                    format!("config `{key}` is not valid decimal text")
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn input(columns: Vec<(&str, Value)>) -> Input {
        Input::from(StagedRow {
            key: vec![Value::Integer(1)],
            op: Op::Insert,
            commit_position: 7,
            commit_time: Some(1_000),
            columns: columns
                .into_iter()
                .map(|(name, value)| ColumnValue {
                    name: name.to_owned(),
                    value,
                })
                .collect(),
        })
    }

    #[test]
    fn getters_read_typed_values_and_reject_with_fixed_reasons() {
        let row = input(vec![
            ("id", Value::Integer(5)),
            ("name", Value::Text("a".into())),
            ("none", Value::Null),
            ("amount", Value::Decimal("1.50".into())),
            ("nan", Value::Decimal("NaN".into())),
        ]);
        assert_eq!(row.int("id"), Ok(5));
        assert_eq!(row.text("name"), Ok("a"));
        assert_eq!(row.text_or_null("none"), Ok(None));
        assert_eq!(
            row.decimal("amount").map(|d| d.to_string()),
            Ok("1.50".into())
        );
        assert_eq!(row.int("none"), Err(Reject::new("column `none` is null")));
        assert_eq!(
            row.int("nope"),
            Err(Reject::new("column `nope` is missing"))
        );
        assert_eq!(
            row.int("name"),
            Err(Reject::new("column `name` is not an integer"))
        );
        assert_eq!(
            row.decimal("id"),
            Err(Reject::new("column `id` is not a decimal"))
        );
        assert_eq!(
            row.decimal("nan"),
            Err(Reject::new("column `nan` is not a finite decimal"))
        );
        assert_eq!(row.commit_position(), 7);
        assert_eq!(row.key(), &[Value::Integer(1)]);
    }

    #[test]
    fn config_lookups_name_the_key_not_the_value() {
        let config = Config::new(vec![
            ("rate".into(), "1.5".into()),
            ("bad".into(), "secret".into()),
        ]);
        assert_eq!(config.get("rate"), Some("1.5"));
        assert_eq!(
            config.decimal("rate").map(|d| d.to_string()),
            Ok("1.5".into())
        );
        assert_eq!(
            config.decimal("bad"),
            Err(Error::InvalidConfig(
                "config `bad` is not valid decimal text".into()
            ))
        );
        assert_eq!(
            config.require("missing"),
            Err(Error::InvalidConfig("missing config key `missing`".into()))
        );
    }
}
