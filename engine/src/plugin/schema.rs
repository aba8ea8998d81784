//! A plugin's declared output, checked once when the plugin loads, and the check of
//! every output value against it before anything is written.
//!
//! **Architecture Invariant**: the host never converts a plugin's value to fit a
//! column. A value of the wrong case, out of range, with more digits than its
//! `numeric(p, s)` allows, longer than its `varchar(n)`, or NULL in a non-nullable
//! column fails the partition job, naming the column.

use std::collections::HashSet;

use crate::value::{ColumnType, Value};

/// The declared type of an output column (the WIT `column-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "type")]
pub enum OutputType {
    Smallint,
    Integer,
    Bigint,
    Real,
    DoublePrecision,
    Numeric { precision: Option<u32>, scale: u32 },
    Text,
    Varchar { length: Option<u32> },
    Boolean,
    Date,
    Timestamp,
    Timestamptz,
    Uuid,
    Json,
    Jsonb,
    Bytea,
}

impl OutputType {
    /// The PostgreSQL type, as DDL.
    pub fn ddl(self) -> String {
        match self {
            OutputType::Smallint => "smallint".into(),
            OutputType::Integer => "integer".into(),
            OutputType::Bigint => "bigint".into(),
            OutputType::Real => "real".into(),
            OutputType::DoublePrecision => "double precision".into(),
            OutputType::Numeric {
                precision: Some(p),
                scale,
            } => format!("numeric({p},{scale})"),
            OutputType::Numeric {
                precision: None, ..
            } => "numeric".into(),
            OutputType::Text => "text".into(),
            OutputType::Varchar { length: Some(n) } => format!("varchar({n})"),
            OutputType::Varchar { length: None } => "varchar".into(),
            OutputType::Boolean => "boolean".into(),
            OutputType::Date => "date".into(),
            OutputType::Timestamp => "timestamp".into(),
            OutputType::Timestamptz => "timestamptz".into(),
            OutputType::Uuid => "uuid".into(),
            OutputType::Json => "json".into(),
            OutputType::Jsonb => "jsonb".into(),
            OutputType::Bytea => "bytea".into(),
        }
    }

    /// The engine's type of the column (what the writer encodes for).
    pub fn engine_type(self) -> ColumnType {
        match self {
            OutputType::Smallint => ColumnType::SmallInt,
            OutputType::Integer => ColumnType::Integer,
            OutputType::Bigint => ColumnType::BigInt,
            OutputType::Real => ColumnType::Real,
            OutputType::DoublePrecision => ColumnType::Double,
            OutputType::Numeric { precision, scale } => ColumnType::Numeric(
                precision
                    .and_then(|p| crate::value::NumericTypmod::new(i64::from(p), i64::from(scale))),
            ),
            OutputType::Text => ColumnType::Text,
            OutputType::Varchar { length } => ColumnType::Varchar(length),
            OutputType::Boolean => ColumnType::Bool,
            OutputType::Date => ColumnType::Date,
            OutputType::Timestamp => ColumnType::Timestamp,
            OutputType::Timestamptz => ColumnType::TimestampTz,
            OutputType::Uuid => ColumnType::Uuid,
            OutputType::Json => ColumnType::Json,
            OutputType::Jsonb => ColumnType::Jsonb,
            OutputType::Bytea => ColumnType::Bytea,
        }
    }
}

/// One output column.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutputColumn {
    pub name: String,
    #[serde(flatten)]
    pub ty: OutputType,
    pub nullable: bool,
}

/// What output rows depend on (the WIT `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Row,
    Partition,
}

/// A plugin's description, checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Description {
    pub name: String,
    pub version: String,
    pub kind: Kind,
    pub columns: Vec<OutputColumn>,
    pub grain_key: Vec<String>,
    pub partition_column: String,
    /// Index of the partition column in `columns`.
    #[serde(skip)]
    pub partition_index: usize,
    /// Indexes of the grain key's columns in `columns`.
    #[serde(skip)]
    pub grain_indexes: Vec<usize>,
}

impl Description {
    /// Checks a description as the plugin gave it; the error says what is wrong.
    pub fn check(
        name: String,
        version: String,
        kind: Kind,
        columns: Vec<OutputColumn>,
        grain_key: Vec<String>,
        partition_column: String,
    ) -> Result<Description, String> {
        if name.trim().is_empty() {
            return Err("the plugin's name is empty".into());
        }
        if columns.is_empty() {
            return Err("no output columns are declared".into());
        }
        let mut seen = HashSet::new();
        for c in &columns {
            if c.name.is_empty() || c.name.len() > 63 || c.name.contains('\0') {
                return Err(format!(
                    "output column `{}` is not a PostgreSQL identifier (1 to 63 bytes, no NUL)",
                    c.name
                ));
            }
            if !seen.insert(c.name.as_str()) {
                return Err(format!("output column `{}` is declared twice", c.name));
            }
            if let OutputType::Numeric {
                precision: Some(p),
                scale,
            } = c.ty
                && (p == 0 || p > 1000 || scale > p)
            {
                return Err(format!(
                    "output column `{}` is numeric({p},{scale}): precision must be 1 to 1000 and scale 0 to precision",
                    c.name
                ));
            }
            if let OutputType::Varchar { length: Some(0) } = c.ty {
                return Err(format!("output column `{}` is varchar(0)", c.name));
            }
        }
        let index = |column: &str, what: &str| {
            columns
                .iter()
                .position(|c| c.name == column)
                .ok_or_else(|| format!("the {what} `{column}` is not an output column"))
        };
        let partition_index = index(&partition_column, "partition column")?;
        let mut grain_indexes = Vec::with_capacity(grain_key.len());
        for k in &grain_key {
            let i = index(k, "grain key column")?;
            if grain_indexes.contains(&i) {
                return Err(format!("grain key column `{k}` is listed twice"));
            }
            grain_indexes.push(i);
        }
        Ok(Description {
            name,
            version,
            kind,
            columns,
            grain_key,
            partition_column,
            partition_index,
            grain_indexes,
        })
    }

    /// Checks one output row against the declared columns.
    pub fn check_row(&self, row: &[Value]) -> Result<(), String> {
        if row.len() != self.columns.len() {
            return Err(format!(
                "an output row has {} values; the plugin declares {} columns",
                row.len(),
                self.columns.len()
            ));
        }
        for (column, value) in self.columns.iter().zip(row) {
            check_value(column, value).map_err(|why| format!("column `{}`: {why}", column.name))?;
        }
        Ok(())
    }
}

/// Checks one value against its column.
fn check_value(column: &OutputColumn, value: &Value) -> Result<(), String> {
    let mismatch = || {
        format!(
            "{} in a {} column (the host never converts)",
            value.kind(),
            column.ty.ddl()
        )
    };
    // What PostgreSQL cannot store (a NUL, a date past its range) is named here, with
    // the column, not left to fail the partition's COPY.
    value.check_storable().map_err(|e| e.to_string())?;
    match (column.ty, value) {
        (_, Value::Null) if column.nullable => Ok(()),
        (_, Value::Null) => Err("null in a column declared not nullable".into()),
        (_, Value::Unsupported { type_name, .. }) => Err(format!(
            "an `unsupported` value ({type_name}): no output column takes it"
        )),
        (OutputType::Smallint, Value::Int(i)) => i16::try_from(*i)
            .map(drop)
            .map_err(|_| "the value is out of range for smallint".to_owned()),
        (OutputType::Integer, Value::Int(i)) => i32::try_from(*i)
            .map(drop)
            .map_err(|_| "the value is out of range for integer".to_owned()),
        (OutputType::Bigint, Value::Int(_)) => Ok(()),
        (OutputType::Real, Value::Float(f)) => {
            if f.is_nan() || f.is_infinite() || f64::from(*f as f32) == *f {
                Ok(())
            } else {
                Err("the value is not exactly a real (32-bit) value; declare double precision or round in the plugin".to_owned())
            }
        }
        (OutputType::DoublePrecision, Value::Float(_)) => Ok(()),
        (OutputType::Numeric { precision, scale }, Value::Decimal(text)) => {
            check_decimal(text, precision.map(|p| (p, scale)))
        }
        (OutputType::Text, Value::Text(_)) => Ok(()),
        (OutputType::Varchar { length }, Value::Text(s)) => match length {
            Some(n) if s.chars().count() > n as usize => Err(format!(
                "text of {} characters in varchar({n})",
                s.chars().count()
            )),
            _ => Ok(()),
        },
        (OutputType::Boolean, Value::Bool(_)) => Ok(()),
        (OutputType::Date, Value::Date(_)) => Ok(()),
        (OutputType::Timestamp | OutputType::Timestamptz, Value::Timestamp(_)) => Ok(()),
        (OutputType::Uuid, Value::Text(s)) => {
            if is_uuid(s) {
                Ok(())
            } else {
                Err("the value is not a uuid in lower-case hyphenated form".to_owned())
            }
        }
        (OutputType::Jsonb, Value::Json(text)) if crate::value::json_has_nul(text) => Err(
            "the value holds a NUL character (the escape \\u0000), which PostgreSQL's jsonb cannot store (json can)".to_owned(),
        ),
        (OutputType::Json | OutputType::Jsonb, Value::Json(text)) => {
            serde_json::from_str::<serde::de::IgnoredAny>(text)
                .map(drop)
                .map_err(|e| format!("not a JSON document: {e}"))
        }
        (OutputType::Bytea, Value::Bytes(_)) => Ok(()),
        _ => Err(mismatch()),
    }
}

/// Checks a decimal's form (PostgreSQL's output form, see `types.wit`) and, for
/// `numeric(p, s)`, that it fits without rounding.
fn check_decimal(text: &str, typmod: Option<(u32, u32)>) -> Result<(), String> {
    let special = matches!(text, "NaN" | "Infinity" | "-Infinity");
    let digits = if special {
        Some((0, 0))
    } else {
        canonical_digits(text)
    };
    let Some((int_digits, frac_digits)) = digits else {
        return Err(
            "the value is not a decimal in PostgreSQL's output form (digits, optional `-` and `.`; no exponent, `+` or leading zeros)"
                .to_owned(),
        );
    };
    let Some((p, s)) = typmod else {
        return Ok(());
    };
    if special {
        return if text == "NaN" {
            Ok(())
        } else {
            Err(format!("an infinite value does not fit numeric({p},{s})"))
        };
    }
    let int_digits = int_digits as u32;
    if frac_digits as u32 > s {
        return Err(format!(
            "the value has {frac_digits} fraction digits; numeric({p},{s}) takes {s} (the host rejects rather than rounds)"
        ));
    }
    if int_digits > p - s {
        return Err(format!(
            "the value has {int_digits} integer digits; numeric({p},{s}) takes {}",
            p - s
        ));
    }
    Ok(())
}

/// The significant integer digits and the fraction digits of a decimal in PostgreSQL's
/// output form, or `None` if it is not in that form (checked without allocating: it
/// runs for every decimal a plugin outputs). The form: an optional `-`, `0` or digits
/// not starting with `0`, optionally `.` and one or more digits; no `-` on zero.
fn canonical_digits(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let (negative, rest) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    let dot = rest.iter().position(|b| *b == b'.');
    let (int, frac) = match dot {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let all_digits = |d: &[u8]| d.iter().all(u8::is_ascii_digit);
    if int.is_empty() || !all_digits(int) || !all_digits(frac) || (dot.is_some() && frac.is_empty())
    {
        return None;
    }
    if int.len() > 1 && int[0] == b'0' {
        return None;
    }
    let zero = int == b"0" && frac.iter().all(|d| *d == b'0');
    if negative && zero {
        return None;
    }
    let significant = if int == b"0" { 0 } else { int.len() };
    Some((significant, frac.len()))
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// Bytes that identify a grain key's values (equal values, equal bytes).
pub fn key_bytes(values: &[&Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values {
        out = postcard::to_extend(v, out).unwrap_or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: OutputType, nullable: bool) -> OutputColumn {
        OutputColumn {
            name: name.into(),
            ty,
            nullable,
        }
    }

    fn numeric(p: u32, s: u32) -> OutputType {
        OutputType::Numeric {
            precision: Some(p),
            scale: s,
        }
    }

    #[test]
    fn decimals_must_be_canonical_and_fit_without_rounding() {
        let c = col("amount", numeric(12, 2), true);
        assert!(check_value(&c, &Value::Decimal("100.00".into())).is_ok());
        assert!(check_value(&c, &Value::Decimal("-0.5".into())).is_ok());
        assert!(check_value(&c, &Value::Decimal("NaN".into())).is_ok());
        for bad in [
            "1e5",
            "+1",
            "01.00",
            "1.",
            ".5",
            "-0",
            "1.005",
            "12345678901.00",
            "Infinity",
            "",
        ] {
            assert!(
                check_value(&c, &Value::Decimal(bad.into())).is_err(),
                "{bad}"
            );
        }
        let unbounded = col(
            "x",
            OutputType::Numeric {
                precision: None,
                scale: 0,
            },
            false,
        );
        assert!(check_value(&unbounded, &Value::Decimal("-Infinity".into())).is_ok());
        assert!(check_value(&unbounded, &Value::Decimal("123456789.123456789".into())).is_ok());
    }

    /// What PostgreSQL cannot store is refused here, naming why, rather than failing
    /// the partition's COPY with neither column nor key.
    #[test]
    fn values_postgresql_cannot_store_are_refused() {
        let cases = [
            (
                col("t", OutputType::Text, true),
                Value::Text("a\0b".into()),
                "NUL",
            ),
            (
                col("j", OutputType::Jsonb, true),
                Value::Json("\"\\u0000\"".into()),
                "NUL",
            ),
            (
                col("d", OutputType::Date, true),
                Value::Date(2_147_483_000),
                "range",
            ),
            (
                col("d", OutputType::Date, true),
                Value::Date(-2_451_546),
                "range",
            ),
            (
                col("ts", OutputType::Timestamp, true),
                Value::Timestamp(-212_760_172_800_000_001),
                "range",
            ),
        ];
        for (column, value, why) in cases {
            let message = check_value(&column, &value).expect_err("refused");
            assert!(message.contains(why), "{message}");
        }
        for fine in [Value::Date(i32::MAX), Value::Date(i32::MIN), Value::Date(0)] {
            assert!(check_value(&col("d", OutputType::Date, true), &fine).is_ok());
        }
    }

    #[test]
    fn output_errors_never_hold_the_value() {
        let cases = [
            (
                col("a", numeric(12, 2), true),
                Value::Decimal("19.999".into()),
                "19.999",
            ),
            (
                col("a", numeric(12, 2), true),
                Value::Decimal("123456789012.5".into()),
                "123456789012.5",
            ),
            (
                col("a", numeric(12, 2), true),
                Value::Decimal("0012.5".into()),
                "0012.5",
            ),
            (
                col("a", OutputType::Smallint, true),
                Value::Int(765_432),
                "765432",
            ),
            (
                col("a", OutputType::Integer, true),
                Value::Int(9_876_543_210),
                "9876543210",
            ),
            (col("a", OutputType::Real, true), Value::Float(0.1), "0.1"),
            (
                col("a", OutputType::Uuid, true),
                Value::Text("secret-not-a-uuid".into()),
                "secret",
            ),
        ];
        for (column, value, text) in cases {
            let message = check_value(&column, &value).expect_err("refused");
            assert!(!message.contains(text), "{message}");
        }
    }

    #[test]
    fn the_canonical_form_agrees_with_the_engine_s() {
        for text in [
            "0", "7", "-7", "0.50", "-12.340", "100.00", "0.000", "-0.001", "10", "01", "-0",
            "-0.00", "1.", ".5", "+1", "1e5", "", "-", "1.2.3", "١", "12a", "00.1",
        ] {
            let canonical = crate::value::canonical_decimal(text).as_deref() == Some(text);
            assert_eq!(canonical_digits(text).is_some(), canonical, "{text:?}");
        }
        assert_eq!(canonical_digits("-12.340"), Some((2, 3)));
        assert_eq!(canonical_digits("0.50"), Some((0, 2)));
    }

    #[test]
    fn cases_are_never_converted() {
        let c = col("id", OutputType::Bigint, false);
        assert!(check_value(&c, &Value::Int(1)).is_ok());
        assert!(check_value(&c, &Value::Text("1".into())).is_err());
        assert!(check_value(&c, &Value::Decimal("1".into())).is_err());
        assert!(check_value(&c, &Value::Null).is_err());
        let small = col("s", OutputType::Smallint, true);
        assert!(check_value(&small, &Value::Int(40_000)).is_err());
        assert!(check_value(&small, &Value::Null).is_ok());
        let real = col("r", OutputType::Real, true);
        assert!(check_value(&real, &Value::Float(0.5)).is_ok());
        assert!(check_value(&real, &Value::Float(0.1)).is_err());
        assert!(check_value(&real, &Value::Float(f64::NAN)).is_ok());
        let v = col("v", OutputType::Varchar { length: Some(3) }, true);
        assert!(check_value(&v, &Value::Text("äöü".into())).is_ok());
        assert!(check_value(&v, &Value::Text("abcd".into())).is_err());
        let u = col("u", OutputType::Uuid, true);
        assert!(
            check_value(
                &u,
                &Value::Text("0b1c2d3e-0000-4000-8000-00000000000a".into())
            )
            .is_ok()
        );
        assert!(
            check_value(
                &u,
                &Value::Text("0B1C2D3E-0000-4000-8000-00000000000A".into())
            )
            .is_err()
        );
        let j = col("j", OutputType::Jsonb, true);
        assert!(check_value(&j, &Value::Json("{\"a\":1}".into())).is_ok());
        assert!(check_value(&j, &Value::Json("{".into())).is_err());
        let any = col("t", OutputType::Text, true);
        let unsupported = Value::Unsupported {
            type_name: "interval".into(),
            text: "1 day".into(),
        };
        assert!(check_value(&any, &unsupported).is_err());
    }

    #[test]
    fn descriptions_name_what_is_wrong() {
        let cols = || {
            vec![
                col("id", OutputType::Bigint, false),
                col("day", OutputType::Date, true),
            ]
        };
        let ok = Description::check(
            "p".into(),
            "1".into(),
            Kind::Row,
            cols(),
            vec!["id".into()],
            "day".into(),
        )
        .expect("valid");
        assert_eq!((ok.partition_index, ok.grain_indexes.clone()), (1, vec![0]));
        let err = |columns, grain: Vec<&str>, part: &str| {
            Description::check(
                "p".into(),
                "1".into(),
                Kind::Row,
                columns,
                grain.into_iter().map(String::from).collect(),
                part.into(),
            )
            .expect_err("invalid")
        };
        assert!(err(cols(), vec!["id"], "nope").contains("partition column `nope`"));
        assert!(err(cols(), vec!["x"], "day").contains("grain key column `x`"));
        let mut twice = cols();
        twice.push(col("id", OutputType::Text, true));
        assert!(err(twice, vec![], "day").contains("declared twice"));
        assert!(err(vec![col("n", numeric(2, 3), true)], vec![], "n").contains("numeric(2,3)"));
        assert!(ok.check_row(&[Value::Int(1)]).is_err());
        assert!(ok.check_row(&[Value::Int(1), Value::Date(3)]).is_ok());
    }
}
