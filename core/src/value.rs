//! Typed column values and column types.
//!
//! A [`Value`] is what the stage holds for one column of one row, and what the writer
//! encodes into PostgreSQL's binary COPY format. The set of variants mirrors the plugin
//! contract (`wit/`): lossless for PostgreSQL's common types, with `Decimal` kept as
//! exact decimal text (never an `f64`) and an explicit `Unsupported` case instead of a
//! silent coercion.
//!
//! **Architecture Invariant**: converting a value never loses information. A value that
//! cannot be represented exactly in the declared column type is an error naming the
//! column, never a rounded or truncated value.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use postgres_types::{IsNull, ToSql, Type, to_sql_checked};
use serde::{Deserialize, Serialize};

/// Days between 1970-01-01 (our epoch) and 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds between 1970-01-01 and 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
const MICROS_PER_DAY: i64 = 86_400_000_000;

/// One column value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
    /// Exact decimal text (`-12.340`, `NaN`, `Infinity`, `-Infinity`), as PostgreSQL prints it.
    Decimal(String),
    /// Days since 1970-01-01. `i32::MAX` / `i32::MIN` are `infinity` / `-infinity`.
    Date(i32),
    /// Microseconds since 1970-01-01T00:00:00 UTC (or local wall time for `timestamp`).
    /// `i64::MAX` / `i64::MIN` are `infinity` / `-infinity`.
    Timestamp(i64),
    /// JSON document text.
    Json(String),
    /// A value of a type Weir does not model, carried as PostgreSQL's text form.
    Unsupported {
        type_name: String,
        text: String,
    },
}

/// The column types Weir understands, parsed from a PostgreSQL type name such as
/// `bigint`, `numeric(12,2)` or `timestamp with time zone`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
    /// `numeric` / `numeric(p,s)`: exact decimal text; with a modifier, values are
    /// checked against it and normalised to its scale ([`Value::conform`]).
    Numeric(Option<NumericTypmod>),
    Text,
    /// `varchar(n)`: text of at most n characters (`None`: unbounded).
    Varchar(Option<u32>),
    Bool,
    Date,
    Timestamp,
    TimestampTz,
    Uuid,
    Json,
    Jsonb,
    Bytea,
}

/// The precision and scale of `numeric(p,s)` (PostgreSQL 15: precision 1 to 1000, scale
/// -1000 to 1000, so `numeric(5,-2)` and `numeric(3,5)` exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumericTypmod {
    pub precision: u16,
    pub scale: i16,
}

impl NumericTypmod {
    /// `numeric(p,s)`, if PostgreSQL accepts it.
    pub fn new(precision: i64, scale: i64) -> Option<NumericTypmod> {
        if !(1..=1000).contains(&precision) || !(-1000..=1000).contains(&scale) {
            return None;
        }
        Some(NumericTypmod {
            precision: u16::try_from(precision).ok()?,
            scale: i16::try_from(scale).ok()?,
        })
    }
}

impl fmt::Display for NumericTypmod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "numeric({},{})", self.precision, self.scale)
    }
}

/// The unit of a number given for a date or time column: days, or seconds, milliseconds,
/// microseconds or nanoseconds since 1970-01-01 (Debezium's `io.debezium.time.*` types,
/// or a column's `epoch` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochUnit {
    Days,
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl EpochUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            EpochUnit::Days => "days",
            EpochUnit::Seconds => "s",
            EpochUnit::Millis => "ms",
            EpochUnit::Micros => "us",
            EpochUnit::Nanos => "ns",
        }
    }

    /// Microseconds of a count of this unit; `None` when it overflows or, for
    /// nanoseconds, is not a whole number of microseconds (PostgreSQL keeps µs, and
    /// Weir does not round).
    pub fn to_micros(self, n: i64) -> Option<i64> {
        match self {
            EpochUnit::Days => n.checked_mul(MICROS_PER_DAY),
            EpochUnit::Seconds => n.checked_mul(1_000_000),
            EpochUnit::Millis => n.checked_mul(1_000),
            EpochUnit::Micros => Some(n),
            EpochUnit::Nanos => (n % 1_000 == 0).then_some(n / 1_000),
        }
    }
}

impl FromStr for EpochUnit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "days" => EpochUnit::Days,
            "s" => EpochUnit::Seconds,
            "ms" => EpochUnit::Millis,
            "us" => EpochUnit::Micros,
            "ns" => EpochUnit::Nanos,
            other => {
                return Err(format!(
                    "unknown epoch unit `{other}`: use \"days\", \"s\", \"ms\", \"us\" or \"ns\""
                ));
            }
        })
    }
}

/// A column type name that Weir does not understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown column type `{0}`: use one of smallint, integer, bigint, real, double precision, numeric, text, varchar(n), boolean, date, timestamp, timestamptz, uuid, json, jsonb, bytea"
)]
pub struct UnknownType(pub String);

impl FromStr for ColumnType {
    type Err = UnknownType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase();
        let norm = norm.split_whitespace().collect::<Vec<_>>().join(" ");
        let (base, args) = match norm.find('(') {
            Some(i) if norm.ends_with(')') => {
                (norm[..i].trim(), Some(&norm[i + 1..norm.len() - 1]))
            }
            Some(_) => return Err(UnknownType(s.to_owned())),
            None => (norm.as_str(), None),
        };
        let no_args = |t: ColumnType| {
            if args.is_none() {
                Ok(t)
            } else {
                Err(UnknownType(s.to_owned()))
            }
        };
        match base {
            "smallint" | "int2" => no_args(Self::SmallInt),
            "integer" | "int" | "int4" => no_args(Self::Integer),
            "bigint" | "int8" => no_args(Self::BigInt),
            "real" | "float4" => no_args(Self::Real),
            "double precision" | "float8" => no_args(Self::Double),
            "numeric" | "decimal" => match args {
                None => Ok(Self::Numeric(None)),
                Some(a) => {
                    let parts: Vec<Option<i64>> =
                        a.split(',').map(|p| p.trim().parse::<i64>().ok()).collect();
                    let typmod = match parts.as_slice() {
                        [Some(p)] => NumericTypmod::new(*p, 0),
                        [Some(p), Some(s)] => NumericTypmod::new(*p, *s),
                        _ => None,
                    };
                    typmod
                        .map(|m| Self::Numeric(Some(m)))
                        .ok_or_else(|| UnknownType(s.to_owned()))
                }
            },
            "text" => no_args(Self::Text),
            "varchar" | "character varying" => match args {
                None => Ok(Self::Varchar(None)),
                Some(a) => a
                    .trim()
                    .parse()
                    .map(|n| Self::Varchar(Some(n)))
                    .map_err(|_| UnknownType(s.to_owned())),
            },
            "boolean" | "bool" => no_args(Self::Bool),
            "date" => no_args(Self::Date),
            "timestamp" | "timestamp without time zone" => no_args(Self::Timestamp),
            "timestamptz" | "timestamp with time zone" => no_args(Self::TimestampTz),
            "uuid" => no_args(Self::Uuid),
            "json" => no_args(Self::Json),
            "jsonb" => no_args(Self::Jsonb),
            "bytea" => no_args(Self::Bytea),
            _ => Err(UnknownType(s.to_owned())),
        }
    }
}

impl ColumnType {
    /// Whether partitions by time grain (`hour`, `day`, `month`) can be computed from it.
    pub fn is_temporal(self) -> bool {
        matches!(self, Self::Date | Self::Timestamp | Self::TimestampTz)
    }

    /// Whether a `value`-grain partition key can be of this type (its text form must
    /// round-trip exactly).
    pub fn is_value_partitionable(self) -> bool {
        matches!(
            self,
            Self::SmallInt
                | Self::Integer
                | Self::BigInt
                | Self::Text
                | Self::Varchar(_)
                | Self::Bool
                | Self::Date
                | Self::Uuid
        )
    }
}

/// Why a JSON value does not fit its declared column type. Messages never include the
/// value itself: errors are logged, and row values are never logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    #[error("expected {expected}, found {found}")]
    WrongKind {
        expected: &'static str,
        found: &'static str,
    },
    /// The value is kept for callers but never displayed: it is a row value.
    #[error("the value is out of range for the column type")]
    OutOfRange(String),
    /// `text` is kept for callers but never displayed: it is a row value.
    #[error("the value is not a valid {expected}")]
    Invalid {
        text: String,
        expected: &'static str,
    },
    #[error("text of {chars} characters is longer than varchar({max})")]
    TooLong { chars: usize, max: u32 },
    #[error(
        "the value holds a NUL character (U+0000), which PostgreSQL cannot store in {column_type}"
    )]
    Nul { column_type: &'static str },
    #[error(
        "the value has {digits} digits after the decimal point; {typmod} keeps {} (Weir does not round)",
        .typmod.scale.max(0)
    )]
    Scale {
        digits: usize,
        typmod: NumericTypmod,
    },
    #[error(
        "the value has too many digits for {typmod} (at most {} before the decimal point)",
        (i32::from(.typmod.precision) - i32::from(.typmod.scale)).max(0)
    )]
    Precision { typmod: NumericTypmod },
    #[error("{typmod} cannot hold an infinite value")]
    Infinite { typmod: NumericTypmod },
    #[error("the value is outside PostgreSQL's range for {0}")]
    DateRange(&'static str),
    #[error(
        "a number for a {column_type} column without a unit: declare the column's epoch unit in the config (e.g. `{{ type = \"{column_type}\", epoch = \"ms\" }}`) or send the envelope's schema"
    )]
    NoEpochUnit { column_type: &'static str },
    #[error(
        "the value has nanoseconds that are not whole microseconds (PostgreSQL keeps microseconds; Weir does not round)"
    )]
    SubMicros,
    #[error("the value is not midnight, so it is not a date")]
    NotMidnight,
    /// Debezium's schema names a type this column cannot take.
    #[error("{0}")]
    Schema(String),
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl Value {
    /// Converts a JSON value from a change feed into a value of column type `ty`, with
    /// no epoch unit known (a number for a date or time column is refused).
    pub fn from_json(ty: ColumnType, v: &serde_json::Value) -> Result<Value, ConvertError> {
        Value::from_json_unit(ty, None, v)
    }

    /// Converts a JSON value from a change feed into a value of column type `ty`,
    /// checked against the column and normalised to what PostgreSQL stores
    /// ([`Value::conform`]).
    ///
    /// Accepted forms follow Debezium's defaults: integers as JSON numbers; numeric as
    /// a JSON number or decimal string (kept exact); dates as `YYYY-MM-DD`; timestamps as
    /// ISO-8601 text; a number for a date or timestamp column only with its `epoch` unit
    /// known (days, s, ms, us or ns since 1970-01-01); bytea as base64 text; json/jsonb as
    /// any JSON value (a string holding JSON is parsed).
    pub fn from_json_unit(
        ty: ColumnType,
        epoch: Option<EpochUnit>,
        v: &serde_json::Value,
    ) -> Result<Value, ConvertError> {
        Value::convert_json(ty, epoch, v)?.conform(ty)
    }

    fn convert_json(
        ty: ColumnType,
        epoch: Option<EpochUnit>,
        v: &serde_json::Value,
    ) -> Result<Value, ConvertError> {
        use serde_json::Value as J;
        if v.is_null() {
            return Ok(Value::Null);
        }
        let wrong = |expected| ConvertError::WrongKind {
            expected,
            found: json_kind(v),
        };
        match ty {
            ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => {
                let J::Number(n) = v else {
                    return Err(wrong("an integer"));
                };
                let i = n.as_i64().ok_or_else(|| ConvertError::Invalid {
                    text: n.to_string(),
                    expected: "integer",
                })?;
                let (lo, hi) = match ty {
                    ColumnType::SmallInt => (i64::from(i16::MIN), i64::from(i16::MAX)),
                    ColumnType::Integer => (i64::from(i32::MIN), i64::from(i32::MAX)),
                    _ => (i64::MIN, i64::MAX),
                };
                if i < lo || i > hi {
                    return Err(ConvertError::OutOfRange(i.to_string()));
                }
                Ok(Value::Int(i))
            }
            ColumnType::Real | ColumnType::Double => {
                match v {
                    J::Number(n) => {
                        let text = n.to_string();
                        text.parse::<f64>()
                            .map(Value::Float)
                            .map_err(|_| ConvertError::Invalid {
                                text,
                                expected: "number",
                            })
                    }
                    J::String(s) => parse_special_float(s).map(Value::Float).ok_or_else(|| {
                        ConvertError::Invalid {
                            text: s.clone(),
                            expected: "number (or NaN, Infinity, -Infinity)",
                        }
                    }),
                    _ => Err(wrong("a number")),
                }
            }
            ColumnType::Numeric(_) => {
                let text = match v {
                    J::Number(n) => n.to_string(),
                    J::String(s) => s.trim().to_owned(),
                    _ => return Err(wrong("a decimal number or decimal string")),
                };
                canonical_decimal(&text)
                    .map(Value::Decimal)
                    .ok_or(ConvertError::Invalid {
                        text,
                        expected: "decimal",
                    })
            }
            ColumnType::Text => match v {
                J::String(s) => Ok(Value::Text(s.clone())),
                _ => Err(wrong("a string")),
            },
            ColumnType::Varchar(_) => match v {
                J::String(s) => Ok(Value::Text(s.clone())),
                _ => Err(wrong("a string")),
            },
            ColumnType::Bool => match v {
                J::Bool(b) => Ok(Value::Bool(*b)),
                _ => Err(wrong("a boolean")),
            },
            ColumnType::Date => match v {
                J::String(s) => {
                    parse_date(s)
                        .map(Value::Date)
                        .ok_or_else(|| ConvertError::Invalid {
                            text: s.clone(),
                            expected: "date (YYYY-MM-DD)",
                        })
                }
                J::Number(n) => {
                    let unit = epoch.ok_or(ConvertError::NoEpochUnit {
                        column_type: "date",
                    })?;
                    let n = n.as_i64().ok_or_else(|| ConvertError::Invalid {
                        text: n.to_string(),
                        expected: "whole number",
                    })?;
                    date_of_epoch(n, unit)
                }
                _ => Err(wrong("a date string (YYYY-MM-DD)")),
            },
            ColumnType::Timestamp | ColumnType::TimestampTz => match v {
                J::String(s) => parse_timestamp(s, ty == ColumnType::TimestampTz)
                    .map(Value::Timestamp)
                    .ok_or_else(|| ConvertError::Invalid {
                        text: s.clone(),
                        expected: "timestamp (ISO 8601)",
                    }),
                J::Number(n) => {
                    let unit = epoch.ok_or(ConvertError::NoEpochUnit {
                        column_type: if ty == ColumnType::Timestamp {
                            "timestamp"
                        } else {
                            "timestamptz"
                        },
                    })?;
                    let n = n.as_i64().ok_or_else(|| ConvertError::Invalid {
                        text: n.to_string(),
                        expected: "whole number",
                    })?;
                    timestamp_of_epoch(n, unit).map(Value::Timestamp)
                }
                _ => Err(wrong("a timestamp string (ISO 8601)")),
            },
            ColumnType::Uuid => match v {
                J::String(s) if parse_uuid(s).is_some() => Ok(Value::Text(s.to_ascii_lowercase())),
                J::String(s) => Err(ConvertError::Invalid {
                    text: s.clone(),
                    expected: "uuid",
                }),
                _ => Err(wrong("a uuid string")),
            },
            ColumnType::Json | ColumnType::Jsonb => match v {
                J::String(s) => match serde_json::from_str::<serde_json::Value>(s) {
                    Ok(doc) => Ok(Value::Json(doc.to_string())),
                    Err(_) => Ok(Value::Json(v.to_string())),
                },
                other => Ok(Value::Json(other.to_string())),
            },
            ColumnType::Bytea => match v {
                J::String(s) => {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .map(Value::Bytes)
                        .map_err(|_| ConvertError::Invalid {
                            text: s.clone(),
                            expected: "base64 bytes",
                        })
                }
                _ => Err(wrong("a base64 string")),
            },
        }
    }

    /// Checks a value against its column type and normalises it to what PostgreSQL
    /// stores there, so that the staged row, a plugin's input, lineage checksums and
    /// `weir verify` all see the value the target holds: a decimal for `numeric(p,s)` is
    /// padded to its scale (`7` → `7.00`), or refused when it would be rounded or does not
    /// fit; integers are range-checked; text and JSON holding a NUL character, text longer
    /// than `varchar(n)`, dates and timestamps outside PostgreSQL's ranges are refused.
    /// A value of another kind than the column's is left as it is (the writer refuses it).
    /// Errors never carry the value in their message.
    pub fn conform(self, ty: ColumnType) -> Result<Value, ConvertError> {
        match (ty, self) {
            (_, Value::Null) => Ok(Value::Null),
            (ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt, Value::Int(i)) => {
                let (lo, hi) = match ty {
                    ColumnType::SmallInt => (i64::from(i16::MIN), i64::from(i16::MAX)),
                    ColumnType::Integer => (i64::from(i32::MIN), i64::from(i32::MAX)),
                    _ => (i64::MIN, i64::MAX),
                };
                if i < lo || i > hi {
                    return Err(ConvertError::OutOfRange(i.to_string()));
                }
                Ok(Value::Int(i))
            }
            (ColumnType::Numeric(Some(typmod)), Value::Decimal(d)) => {
                fit_decimal(&d, typmod).map(Value::Decimal)
            }
            (ColumnType::Numeric(Some(typmod)), Value::Int(i)) => {
                fit_decimal(&i.to_string(), typmod).map(Value::Decimal)
            }
            (ColumnType::Text, Value::Text(s)) => {
                if s.contains('\0') {
                    return Err(ConvertError::Nul {
                        column_type: "text",
                    });
                }
                Ok(Value::Text(s))
            }
            (ColumnType::Varchar(max), Value::Text(s)) => {
                if s.contains('\0') {
                    return Err(ConvertError::Nul {
                        column_type: "varchar",
                    });
                }
                if let Some(max) = max {
                    let chars = s.chars().count();
                    if chars > max as usize {
                        return Err(ConvertError::TooLong { chars, max });
                    }
                }
                Ok(Value::Text(s))
            }
            (ColumnType::Json | ColumnType::Jsonb, Value::Json(s)) => {
                if json_has_nul(&s) {
                    return Err(ConvertError::Nul {
                        column_type: if ty == ColumnType::Json {
                            "json"
                        } else {
                            "jsonb"
                        },
                    });
                }
                Ok(Value::Json(s))
            }
            (ColumnType::Date, Value::Date(d)) => {
                if d != i32::MAX
                    && d != i32::MIN
                    && !(PG_DATE_MIN_DAYS..=PG_DATE_MAX_DAYS).contains(&d)
                {
                    return Err(ConvertError::DateRange("date"));
                }
                Ok(Value::Date(d))
            }
            (ColumnType::Timestamp | ColumnType::TimestampTz, Value::Timestamp(us)) => {
                if us != i64::MIN && us < PG_TIMESTAMP_MIN_MICROS {
                    return Err(ConvertError::DateRange("timestamp"));
                }
                Ok(Value::Timestamp(us))
            }
            (_, v) => Ok(v),
        }
    }

    /// Parses PostgreSQL-style text (as found in a partition name) back into a value.
    pub fn from_text(ty: ColumnType, s: &str) -> Result<Value, ConvertError> {
        match ty {
            ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => s
                .parse::<i64>()
                .map(Value::Int)
                .map_err(|_| ConvertError::Invalid {
                    text: s.to_owned(),
                    expected: "integer",
                }),
            ColumnType::Bool => match s {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(ConvertError::Invalid {
                    text: s.to_owned(),
                    expected: "boolean",
                }),
            },
            ColumnType::Date => {
                parse_date(s)
                    .map(Value::Date)
                    .ok_or_else(|| ConvertError::Invalid {
                        text: s.to_owned(),
                        expected: "date",
                    })
            }
            _ => Value::from_json(ty, &serde_json::Value::String(s.to_owned())),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// PostgreSQL-style text of a value, as a user would see it in `psql`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) if x.is_nan() => f.write_str("NaN"),
            Value::Float(x) if x.is_infinite() => {
                f.write_str(if *x > 0.0 { "Infinity" } else { "-Infinity" })
            }
            Value::Float(x) => write!(f, "{x}"),
            Value::Text(s) | Value::Decimal(s) | Value::Json(s) => f.write_str(s),
            Value::Bytes(b) => write!(f, "\\x{}", hex::encode(b)),
            Value::Date(i32::MAX) => f.write_str("infinity"),
            Value::Date(i32::MIN) => f.write_str("-infinity"),
            Value::Date(d) => match date_from_days(*d) {
                Some(date) => write!(f, "{}", date.format("%Y-%m-%d")),
                None => write!(f, "date({d})"),
            },
            Value::Timestamp(i64::MAX) => f.write_str("infinity"),
            Value::Timestamp(i64::MIN) => f.write_str("-infinity"),
            Value::Timestamp(us) => match DateTime::from_timestamp_micros(*us) {
                Some(ts) => write!(f, "{}", ts.naive_utc().format("%Y-%m-%d %H:%M:%S%.f")),
                None => write!(f, "timestamp({us})"),
            },
            Value::Unsupported { text, .. } => f.write_str(text),
        }
    }
}

fn parse_special_float(s: &str) -> Option<f64> {
    match s.trim() {
        "NaN" => Some(f64::NAN),
        "Infinity" | "+Infinity" | "inf" => Some(f64::INFINITY),
        "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
        other => other.parse().ok(),
    }
}

/// Validates decimal text and returns it in canonical form (no leading `+`, no
/// redundant leading zeros); the scale (trailing zeros) is kept, as PostgreSQL keeps it.
pub fn canonical_decimal(text: &str) -> Option<String> {
    match text {
        "NaN" | "nan" => return Some("NaN".into()),
        "Infinity" | "+Infinity" | "inf" => return Some("Infinity".into()),
        "-Infinity" | "-inf" => return Some("-Infinity".into()),
        _ => {}
    }
    let parsed = ParsedDecimal::parse(text)?;
    let mut out = String::with_capacity(text.len());
    if parsed.negative
        && parsed
            .int_digits
            .bytes()
            .chain(parsed.frac_digits.bytes())
            .any(|d| d != b'0')
    {
        out.push('-');
    }
    out.push_str(if parsed.int_digits.is_empty() {
        "0"
    } else {
        &parsed.int_digits
    });
    if !parsed.frac_digits.is_empty() {
        out.push('.');
        out.push_str(&parsed.frac_digits);
    }
    Some(out)
}

/// A Debezium logical type: the `name` of a field in the schema of an envelope written
/// by Debezium's JSON converter with schemas on. It decides what a value means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logical {
    /// `io.debezium.time.Date`: days since 1970-01-01.
    Date,
    /// `io.debezium.time.Time` (ms), `MicroTime` (µs), `NanoTime` (ns): time of day.
    Time(EpochUnit),
    /// `io.debezium.time.Timestamp` (ms), `MicroTimestamp` (µs), `NanoTimestamp` (ns)
    /// since 1970-01-01.
    Timestamp(EpochUnit),
    /// `io.debezium.time.ZonedTimestamp`: ISO-8601 text with an offset.
    ZonedTimestamp,
    /// `io.debezium.time.ZonedTime`: ISO-8601 time text with an offset.
    ZonedTime,
    /// `org.apache.kafka.connect.data.Decimal`: base64 of the big-endian two's
    /// complement unscaled value; the scale is the schema's `parameters.scale`.
    Decimal { scale: i32 },
    /// `io.debezium.data.VariableScaleDecimal`: `{"scale": s, "value": base64}`.
    VariableScaleDecimal,
}

/// Longest unscaled decimal accepted, in bytes (PostgreSQL's widest `numeric(1000)`
/// needs 416).
const DECIMAL_BYTES_MAX: usize = 1024;

impl Logical {
    /// The logical type of a schema field named `name` (`None`: a name that does not
    /// change how the value is read, or none). The error says what is wrong.
    pub fn from_schema(
        name: &str,
        parameters: Option<&serde_json::Value>,
    ) -> Result<Option<Logical>, String> {
        Ok(Some(match name {
            "io.debezium.time.Date" => Logical::Date,
            "io.debezium.time.Time" => Logical::Time(EpochUnit::Millis),
            "io.debezium.time.MicroTime" => Logical::Time(EpochUnit::Micros),
            "io.debezium.time.NanoTime" => Logical::Time(EpochUnit::Nanos),
            "io.debezium.time.Timestamp" => Logical::Timestamp(EpochUnit::Millis),
            "io.debezium.time.MicroTimestamp" => Logical::Timestamp(EpochUnit::Micros),
            "io.debezium.time.NanoTimestamp" => Logical::Timestamp(EpochUnit::Nanos),
            "io.debezium.time.ZonedTimestamp" => Logical::ZonedTimestamp,
            "io.debezium.time.ZonedTime" => Logical::ZonedTime,
            "io.debezium.data.VariableScaleDecimal" => Logical::VariableScaleDecimal,
            "org.apache.kafka.connect.data.Decimal" => {
                let scale = parameters
                    .and_then(|p| p.get("scale"))
                    .and_then(json_int)
                    .and_then(|s| i32::try_from(s).ok())
                    .filter(|s| s.unsigned_abs() <= 1000)
                    .ok_or_else(|| {
                        format!("schema field of type {name} has no valid `parameters.scale`")
                    })?;
                Logical::Decimal { scale }
            }
            _ => return Ok(None),
        }))
    }

    /// The name Debezium gives it, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Logical::Date => "io.debezium.time.Date",
            Logical::Time(EpochUnit::Millis) => "io.debezium.time.Time",
            Logical::Time(EpochUnit::Nanos) => "io.debezium.time.NanoTime",
            Logical::Time(_) => "io.debezium.time.MicroTime",
            Logical::Timestamp(EpochUnit::Millis) => "io.debezium.time.Timestamp",
            Logical::Timestamp(EpochUnit::Nanos) => "io.debezium.time.NanoTimestamp",
            Logical::Timestamp(_) => "io.debezium.time.MicroTimestamp",
            Logical::ZonedTimestamp => "io.debezium.time.ZonedTimestamp",
            Logical::ZonedTime => "io.debezium.time.ZonedTime",
            Logical::Decimal { .. } => "org.apache.kafka.connect.data.Decimal",
            Logical::VariableScaleDecimal => "io.debezium.data.VariableScaleDecimal",
        }
    }
}

/// An integer given as a JSON number or as decimal text (Debezium writes schema
/// parameters as strings).
fn json_int(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl Value {
    /// Converts a JSON value whose schema field has the Debezium logical type `logical`
    /// into a value of column type `ty`, exactly (then as [`Value::from_json_unit`]).
    pub fn from_debezium(
        ty: ColumnType,
        logical: Logical,
        v: &serde_json::Value,
    ) -> Result<Value, ConvertError> {
        use serde_json::Value as J;
        if v.is_null() {
            return Ok(Value::Null);
        }
        let unsuited = |what: &str| {
            ConvertError::Schema(format!(
                "the envelope's schema says {} ({what}), which this column's type cannot take",
                logical.name()
            ))
        };
        match logical {
            Logical::Date => {
                if !matches!(v, J::Number(_)) {
                    return Err(ConvertError::Schema(
                        "io.debezium.time.Date must be a number of days".into(),
                    ));
                }
                Value::from_json_unit(ty, Some(EpochUnit::Days), v)
            }
            Logical::Timestamp(unit) => {
                if !matches!(v, J::Number(_)) {
                    return Err(ConvertError::Schema(format!(
                        "{} must be a number",
                        logical.name()
                    )));
                }
                if !ty.is_temporal() {
                    return Err(unsuited("a timestamp"));
                }
                Value::from_json_unit(ty, Some(unit), v)
            }
            Logical::ZonedTimestamp => {
                if !ty.is_temporal() {
                    return Err(unsuited("a timestamp"));
                }
                Value::from_json_unit(ty, None, v)
            }
            Logical::Time(unit) => {
                if !matches!(ty, ColumnType::Text | ColumnType::Varchar(_)) {
                    return Err(unsuited("a time of day; declare the column as text"));
                }
                let n = v.as_i64().ok_or_else(|| {
                    ConvertError::Schema(format!("{} must be a whole number", logical.name()))
                })?;
                if unit == EpochUnit::Nanos && n % 1_000 != 0 {
                    return Err(ConvertError::SubMicros);
                }
                let us = unit
                    .to_micros(n)
                    .filter(|us| (0..=MICROS_PER_DAY).contains(us))
                    .ok_or(ConvertError::DateRange("time"))?;
                let (secs, micros) = (us / 1_000_000, us % 1_000_000);
                let mut text = format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60);
                if micros != 0 {
                    let frac = format!("{micros:06}");
                    text.push('.');
                    text.push_str(frac.trim_end_matches('0'));
                }
                Value::Text(text).conform(ty)
            }
            Logical::ZonedTime => {
                if !matches!(ty, ColumnType::Text | ColumnType::Varchar(_)) {
                    return Err(unsuited("a time of day; declare the column as text"));
                }
                Value::from_json_unit(ty, None, v)
            }
            Logical::Decimal { scale } => {
                let J::String(b64) = v else {
                    return Err(ConvertError::Schema(
                        "org.apache.kafka.connect.data.Decimal must be base64 text".into(),
                    ));
                };
                let text = decimal_of_bytes(b64, scale)?;
                Value::from_json_unit(ty, None, &J::String(text))
            }
            Logical::VariableScaleDecimal => {
                let (Some(scale), Some(J::String(b64))) =
                    (v.get("scale").and_then(json_int), v.get("value"))
                else {
                    return Err(ConvertError::Schema(
                        "io.debezium.data.VariableScaleDecimal must be {\"scale\": n, \"value\": base64}".into(),
                    ));
                };
                let scale = i32::try_from(scale)
                    .ok()
                    .filter(|s| s.unsigned_abs() <= 1000)
                    .ok_or_else(|| {
                        ConvertError::Schema(
                            "io.debezium.data.VariableScaleDecimal has a scale out of range".into(),
                        )
                    })?;
                let text = decimal_of_bytes(b64, scale)?;
                Value::from_json_unit(ty, None, &J::String(text))
            }
        }
    }
}

/// Decimal text of base64 big-endian two's complement unscaled bytes with `scale`.
fn decimal_of_bytes(b64: &str, scale: i32) -> Result<String, ConvertError> {
    use base64::Engine as _;
    let bad = || ConvertError::Invalid {
        text: b64.to_owned(),
        expected: "base64 decimal bytes",
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|_| bad())?;
    if bytes.is_empty() || bytes.len() > DECIMAL_BYTES_MAX {
        return Err(bad());
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let magnitude: Vec<u8> = if negative {
        // Two's complement: invert and add one.
        let mut m: Vec<u8> = bytes.iter().map(|b| !b).collect();
        for b in m.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
        m
    } else {
        bytes
    };
    // Base 10^9 limbs, least significant first.
    let mut limbs: Vec<u64> = vec![0];
    for byte in magnitude {
        let mut carry = u64::from(byte);
        for limb in limbs.iter_mut() {
            let x = *limb * 256 + carry;
            *limb = x % 1_000_000_000;
            carry = x / 1_000_000_000;
        }
        while carry > 0 {
            limbs.push(carry % 1_000_000_000);
            carry /= 1_000_000_000;
        }
    }
    let mut digits = String::new();
    for (i, limb) in limbs.iter().rev().enumerate() {
        if i == 0 {
            digits.push_str(&limb.to_string());
        } else {
            digits.push_str(&format!("{limb:09}"));
        }
    }
    let mut out = String::with_capacity(digits.len() + 3);
    if negative {
        out.push('-');
    }
    let scale_len = usize::try_from(scale.max(0)).unwrap_or(0);
    if scale > 0 {
        if digits.len() <= scale_len {
            digits.insert_str(0, &"0".repeat(scale_len - digits.len() + 1));
        }
        let point = digits.len() - scale_len;
        out.push_str(&digits[..point]);
        out.push('.');
        out.push_str(&digits[point..]);
    } else {
        out.push_str(&digits);
        out.push_str(&"0".repeat(usize::try_from(-scale).unwrap_or(0)));
    }
    Ok(out)
}

/// PostgreSQL's first date, 4714-11-24 BC, in days since 1970-01-01.
const PG_DATE_MIN_DAYS: i32 = -2_440_588;
/// PostgreSQL's last date, 5874897-12-31, in days since 1970-01-01.
const PG_DATE_MAX_DAYS: i32 = 2_145_042_905;
/// PostgreSQL's first timestamp, 4714-11-24 00:00:00 BC, in µs since 1970-01-01. Its
/// last one lies past `i64`'s range in µs since 1970 (see `pgtypes`).
const PG_TIMESTAMP_MIN_MICROS: i64 = -210_866_803_200_000_000;

/// A date from a number of `unit`s since 1970-01-01: a whole day, or an error.
fn date_of_epoch(n: i64, unit: EpochUnit) -> Result<Value, ConvertError> {
    let days = if unit == EpochUnit::Days {
        n
    } else {
        let us = timestamp_of_epoch(n, unit)?;
        if us.rem_euclid(MICROS_PER_DAY) != 0 {
            return Err(ConvertError::NotMidnight);
        }
        us.div_euclid(MICROS_PER_DAY)
    };
    i32::try_from(days)
        .ok()
        .filter(|d| *d != i32::MAX && *d != i32::MIN)
        .map(Value::Date)
        .ok_or(ConvertError::DateRange("date"))
}

/// Microseconds since 1970-01-01 from a number of `unit`s: exact, or an error.
fn timestamp_of_epoch(n: i64, unit: EpochUnit) -> Result<i64, ConvertError> {
    if unit == EpochUnit::Nanos && n % 1_000 != 0 {
        return Err(ConvertError::SubMicros);
    }
    unit.to_micros(n)
        .filter(|us| *us != i64::MAX && *us != i64::MIN)
        .ok_or(ConvertError::DateRange("timestamp"))
}

/// Whether JSON text holds a NUL character, raw or as the escape `\u0000` (which
/// `jsonb` refuses and `json` cannot hand on as text).
fn json_has_nul(text: &str) -> bool {
    if text.contains('\0') {
        return true;
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'\\' {
            if bytes.get(i + 1) == Some(&b'u')
                && bytes.get(i + 2..i + 6).is_some_and(|h| h == b"0000")
            {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// Decimal text (any form [`canonical_decimal`] reads) as `numeric(p,s)` stores it:
/// exactly `s` fraction digits (none for a negative scale), or an error when PostgreSQL
/// would round it or it has too many digits. `NaN` fits every `numeric(p,s)`.
pub fn fit_decimal(text: &str, typmod: NumericTypmod) -> Result<String, ConvertError> {
    match text {
        "NaN" => return Ok("NaN".into()),
        "Infinity" | "-Infinity" => return Err(ConvertError::Infinite { typmod }),
        _ => {}
    }
    let parsed = ParsedDecimal::parse(text).ok_or_else(|| ConvertError::Invalid {
        text: text.to_owned(),
        expected: "decimal",
    })?;
    let scale = i64::from(typmod.scale);
    let frac = parsed.frac_digits.as_bytes();
    let int = parsed.int_digits.as_bytes();
    // Digits past the scale must be zeros: PostgreSQL would round them away.
    let kept_frac = usize::try_from(scale.max(0)).unwrap_or(0);
    if frac.iter().skip(kept_frac).any(|d| *d != b'0') {
        let digits = frac.len() - frac.iter().rev().take_while(|d| **d == b'0').count();
        return Err(ConvertError::Scale { digits, typmod });
    }
    // A negative scale: the last -s integer digits must be zeros.
    let dropped_int = usize::try_from((-scale).max(0)).unwrap_or(0);
    if dropped_int > 0 && int.iter().rev().take(dropped_int).any(|d| *d != b'0') {
        return Err(ConvertError::Scale { digits: 0, typmod });
    }
    // The digits kept, as one integer (int digits and the first `s` fraction digits);
    // its significant digits must fit the precision.
    let mut kept: Vec<u8> = int[..int.len().saturating_sub(dropped_int)].to_vec();
    kept.extend((0..kept_frac).map(|i| frac.get(i).copied().unwrap_or(b'0')));
    let significant = kept.iter().skip_while(|d| **d == b'0').count();
    if significant > usize::from(typmod.precision) {
        return Err(ConvertError::Precision { typmod });
    }
    let zero = significant == 0;
    let mut out = String::with_capacity(kept.len() + 3);
    if parsed.negative && !zero {
        out.push('-');
    }
    if int.is_empty() {
        out.push('0');
    } else {
        out.push_str(&parsed.int_digits);
    }
    if kept_frac > 0 {
        out.push('.');
        out.extend((0..kept_frac).map(|i| char::from(frac.get(i).copied().unwrap_or(b'0'))));
    }
    Ok(out)
}

/// Decimal text split into sign and digits, with exponent notation applied.
#[derive(Debug)]
struct ParsedDecimal {
    negative: bool,
    /// Integer digits without leading zeros (empty for zero).
    int_digits: String,
    /// Fraction digits, trailing zeros kept.
    frac_digits: String,
}

impl ParsedDecimal {
    fn parse(text: &str) -> Option<ParsedDecimal> {
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()?),
            None => (rest, 0),
        };
        let (int_part, frac_part) = match mantissa.find('.') {
            Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
            None => (mantissa, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        if exponent.unsigned_abs() > 1000 {
            return None;
        }
        let mut digits = format!("{int_part}{frac_part}");
        let mut point = int_part.len() as i64 + i64::from(exponent);
        if point < 0 {
            digits.insert_str(0, &"0".repeat(point.unsigned_abs() as usize));
            point = 0;
        }
        let point = point as usize;
        if point > digits.len() {
            digits.push_str(&"0".repeat(point - digits.len()));
        }
        let (int_digits, frac_digits) = digits.split_at(point);
        Some(ParsedDecimal {
            negative,
            int_digits: int_digits.trim_start_matches('0').to_owned(),
            frac_digits: frac_digits.to_owned(),
        })
    }
}

/// Encodes decimal text in PostgreSQL's binary `numeric` format.
pub fn encode_numeric(text: &str, out: &mut Vec<u8>) -> Option<()> {
    const NUMERIC_POS: u16 = 0x0000;
    const NUMERIC_NEG: u16 = 0x4000;
    const NUMERIC_NAN: u16 = 0xC000;
    const NUMERIC_PINF: u16 = 0xD000;
    const NUMERIC_NINF: u16 = 0xF000;
    let special = match text {
        "NaN" => Some(NUMERIC_NAN),
        "Infinity" => Some(NUMERIC_PINF),
        "-Infinity" => Some(NUMERIC_NINF),
        _ => None,
    };
    if let Some(sign) = special {
        for word in [0u16, 0, sign, 0] {
            out.extend_from_slice(&word.to_be_bytes());
        }
        return Some(());
    }
    let p = ParsedDecimal::parse(text)?;
    let dscale = u16::try_from(p.frac_digits.len()).ok()?;
    // Base-10000 digit groups aligned on the decimal point.
    let int_pad = (4 - p.int_digits.len() % 4) % 4;
    let frac_pad = (4 - p.frac_digits.len() % 4) % 4;
    let int_str = format!("{}{}", "0".repeat(int_pad), p.int_digits);
    let frac_str = format!("{}{}", p.frac_digits, "0".repeat(frac_pad));
    let to_groups = |s: &str| -> Vec<u16> {
        s.as_bytes()
            .chunks(4)
            .map(|c| c.iter().fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0')))
            .collect()
    };
    let int_groups = to_groups(&int_str);
    let frac_groups = to_groups(&frac_str);
    // Computed wide, narrowed once: the weight of the largest numerics is near i16's end.
    let mut weight = i64::try_from(int_groups.len()).ok()? - 1;
    let mut groups: Vec<u16> = int_groups.into_iter().chain(frac_groups).collect();
    // Strip leading zero groups (adjusting the weight) and trailing zero groups.
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= i64::try_from(leading).ok()?;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    let sign = if groups.is_empty() {
        weight = 0;
        NUMERIC_POS
    } else if p.negative {
        NUMERIC_NEG
    } else {
        NUMERIC_POS
    };
    out.extend_from_slice(&u16::try_from(groups.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&i16::try_from(weight).ok()?.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Some(())
}

pub fn parse_date(s: &str) -> Option<i32> {
    let date = NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").ok()?;
    days_from_date(date)
}

pub fn days_from_date(date: NaiveDate) -> Option<i32> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from(date.signed_duration_since(epoch).num_days()).ok()
}

pub fn date_from_days(days: i32) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_signed(chrono::Duration::days(i64::from(days)))
}

/// Parses ISO-8601 / PostgreSQL timestamp text into microseconds since the epoch.
/// With an offset, the instant is normalised to UTC. `infinity` / `-infinity` are kept.
pub fn parse_timestamp(s: &str, with_zone: bool) -> Option<i64> {
    let s = s.trim();
    match s {
        "infinity" => return Some(i64::MAX),
        "-infinity" => return Some(i64::MIN),
        _ => {}
    }
    if let Ok(ts) = DateTime::parse_from_rfc3339(s) {
        return Some(ts.timestamp_micros());
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(ts) = DateTime::parse_from_str(s, fmt) {
            return Some(ts.timestamp_micros());
        }
    }
    // Without an offset the text is wall time; for timestamptz it is read as UTC, the
    // stage's zone.
    let _ = with_zone;
    let naive = s.strip_suffix('Z').unwrap_or(s);
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(ts) = NaiveDateTime::parse_from_str(naive, fmt) {
            return Some(ts.and_utc().timestamp_micros());
        }
    }
    None
}

fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex_digits: String = s.chars().filter(|c| *c != '-').collect();
    let dashes: Vec<usize> = s
        .char_indices()
        .filter(|(_, c)| *c == '-')
        .map(|(i, _)| i)
        .collect();
    if hex_digits.len() != 32 || !(dashes.is_empty() || dashes == [8, 13, 18, 23]) {
        return None;
    }
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex_digits, &mut out).ok()?;
    Some(out)
}

/// Why a value cannot be written into a target column.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {value_kind} into a column of type {pg_type}")]
pub struct EncodeError {
    pub value_kind: &'static str,
    pub pg_type: String,
}

impl Value {
    /// What kind of value this is, for error messages (`a boolean`, `text`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytes",
            Value::Decimal(_) => "a decimal",
            Value::Date(_) => "a date",
            Value::Timestamp(_) => "a timestamp",
            Value::Json(_) => "json",
            Value::Unsupported { .. } => "an unsupported value",
        }
    }

    /// Encodes a non-null value in PostgreSQL's binary format for `ty`.
    pub fn encode_binary(
        &self,
        ty: &postgres_types::Type,
        out: &mut Vec<u8>,
    ) -> Result<(), EncodeError> {
        use postgres_types::Type as T;
        let fail = || EncodeError {
            value_kind: self.kind(),
            pg_type: ty.name().to_owned(),
        };
        match (self, ty) {
            (Value::Bool(b), &T::BOOL) => out.push(u8::from(*b)),
            (Value::Int(i), &T::INT2) => {
                out.extend_from_slice(&i16::try_from(*i).map_err(|_| fail())?.to_be_bytes())
            }
            (Value::Int(i), &T::INT4) => {
                out.extend_from_slice(&i32::try_from(*i).map_err(|_| fail())?.to_be_bytes())
            }
            (Value::Int(i), &T::INT8) => out.extend_from_slice(&i.to_be_bytes()),
            (Value::Int(i), &T::NUMERIC) => encode_numeric(&i.to_string(), out).ok_or_else(fail)?,
            (Value::Float(x), &T::FLOAT4) => {
                let narrowed = *x as f32;
                if f64::from(narrowed) != *x && !x.is_nan() {
                    return Err(fail());
                }
                out.extend_from_slice(&narrowed.to_be_bytes())
            }
            (Value::Float(x), &T::FLOAT8) => out.extend_from_slice(&x.to_be_bytes()),
            (Value::Decimal(d), &T::NUMERIC) => encode_numeric(d, out).ok_or_else(fail)?,
            (Value::Text(s), &T::TEXT | &T::VARCHAR | &T::BPCHAR | &T::NAME) => {
                out.extend_from_slice(s.as_bytes())
            }
            (Value::Text(s), &T::UUID) => out.extend_from_slice(&parse_uuid(s).ok_or_else(fail)?),
            (Value::Json(s), &T::JSON) => out.extend_from_slice(s.as_bytes()),
            (Value::Json(s), &T::JSONB) => {
                out.push(1);
                out.extend_from_slice(s.as_bytes());
            }
            (Value::Bytes(b), &T::BYTEA) => out.extend_from_slice(b),
            (Value::Date(d @ (i32::MAX | i32::MIN)), &T::DATE) => {
                out.extend_from_slice(&d.to_be_bytes())
            }
            (Value::Date(d), &T::DATE) => {
                let pg = d.checked_sub(PG_EPOCH_DAYS).ok_or_else(fail)?;
                out.extend_from_slice(&pg.to_be_bytes())
            }
            (Value::Timestamp(us), &T::TIMESTAMP | &T::TIMESTAMPTZ) => {
                let pg = match *us {
                    i64::MAX | i64::MIN => *us,
                    us => us.checked_sub(PG_EPOCH_MICROS).ok_or_else(fail)?,
                };
                out.extend_from_slice(&pg.to_be_bytes())
            }
            (Value::Date(d @ (i32::MAX | i32::MIN)), &T::TIMESTAMP | &T::TIMESTAMPTZ) => {
                let infinity = if *d == i32::MAX { i64::MAX } else { i64::MIN };
                out.extend_from_slice(&infinity.to_be_bytes())
            }
            (Value::Date(d), &T::TIMESTAMP | &T::TIMESTAMPTZ) => {
                let us = i64::from(*d)
                    .checked_mul(MICROS_PER_DAY)
                    .and_then(|us| us.checked_sub(PG_EPOCH_MICROS))
                    .ok_or_else(fail)?;
                out.extend_from_slice(&us.to_be_bytes())
            }
            _ => return Err(fail()),
        }
        Ok(())
    }
}

/// A value as a statement parameter (lineage queries, merge's key lists): its binary
/// encoding for the column's type, checked per value.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        if self.is_null() {
            return Ok(IsNull::Yes);
        }
        let mut buf = Vec::new();
        self.encode_binary(ty, &mut buf)?;
        out.extend_from_slice(&buf);
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`, which names the value and the type on mismatch.
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_parse_with_aliases() {
        for (text, ty) in [
            ("bigint", ColumnType::BigInt),
            ("INT8", ColumnType::BigInt),
            (
                "numeric(12,2)",
                ColumnType::Numeric(NumericTypmod::new(12, 2)),
            ),
            ("numeric(5)", ColumnType::Numeric(NumericTypmod::new(5, 0))),
            (
                "decimal(5, -2)",
                ColumnType::Numeric(NumericTypmod::new(5, -2)),
            ),
            ("numeric", ColumnType::Numeric(None)),
            ("double  precision", ColumnType::Double),
            ("varchar(10)", ColumnType::Varchar(Some(10))),
            ("timestamp with time zone", ColumnType::TimestampTz),
        ] {
            assert_eq!(text.parse::<ColumnType>(), Ok(ty), "{text}");
        }
        assert!("numeric(a)".parse::<ColumnType>().is_err());
        assert!("numeric(0,2)".parse::<ColumnType>().is_err());
        assert!("numeric(1001)".parse::<ColumnType>().is_err());
        assert!("numeric(12,2,1)".parse::<ColumnType>().is_err());
        assert!("point".parse::<ColumnType>().is_err());
        assert!("bigint(3)".parse::<ColumnType>().is_err());
    }

    #[test]
    fn decimals_are_canonical_and_exact() {
        for (input, want) in [
            ("12.340", Some("12.340")),
            ("+0012.5", Some("12.5")),
            ("-0.00", Some("0.00")),
            ("1e3", Some("1000")),
            ("1.5E-3", Some("0.0015")),
            (
                "123456789012345678901234567890.123456789",
                Some("123456789012345678901234567890.123456789"),
            ),
            ("NaN", Some("NaN")),
            ("1.2.3", None),
            ("", None),
            ("-", None),
            ("1e99999", None),
        ] {
            assert_eq!(canonical_decimal(input).as_deref(), want, "{input}");
        }
    }

    fn numeric_bytes(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode_numeric(text, &mut out).expect("valid decimal");
        out
    }

    #[test]
    fn numeric_binary_matches_postgres_layout() {
        // ndigits, weight, sign, dscale, digits... (values taken from PostgreSQL's numeric_send)
        let words = |w: &[u16]| w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        assert_eq!(numeric_bytes("0"), words(&[0, 0, 0, 0]));
        assert_eq!(numeric_bytes("0.00"), words(&[0, 0, 0, 2]));
        assert_eq!(numeric_bytes("12.34"), words(&[2, 0, 0, 2, 12, 3400]));
        assert_eq!(
            numeric_bytes("-12345.6"),
            words(&[3, 1, 0x4000, 1, 1, 2345, 6000])
        );
        assert_eq!(numeric_bytes("0.0001"), words(&[1, 0xFFFF, 0, 4, 1]));
        assert_eq!(numeric_bytes("10000"), words(&[1, 1, 0, 0, 1]));
        assert_eq!(numeric_bytes("NaN"), words(&[0, 0, 0xC000, 0]));
    }

    #[test]
    fn json_values_convert_by_declared_type() {
        use serde_json::json;
        assert_eq!(
            Value::from_json(ColumnType::Integer, &json!(7)),
            Ok(Value::Int(7))
        );
        assert!(matches!(
            Value::from_json(ColumnType::SmallInt, &json!(70000)),
            Err(ConvertError::OutOfRange(_))
        ));
        assert!(matches!(
            Value::from_json(ColumnType::BigInt, &json!("7")),
            Err(ConvertError::WrongKind { .. })
        ));
        assert_eq!(
            Value::from_json(ColumnType::Date, &json!("2026-03-01")),
            Ok(Value::Date(20513))
        );
        assert_eq!(
            Value::from_json_unit(ColumnType::Date, Some(EpochUnit::Days), &json!(20513)),
            Ok(Value::Date(20513))
        );
        assert_eq!(
            Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01T01:00:00+01:00")),
            Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01 00:00:00Z"))
        );
        assert_eq!(
            Value::from_json(ColumnType::Numeric(None), &json!("19.90")),
            Ok(Value::Decimal("19.90".into()))
        );
        assert!(matches!(
            Value::from_json(ColumnType::Varchar(Some(2)), &json!("abc")),
            Err(ConvertError::TooLong { .. })
        ));
        assert_eq!(
            Value::from_json(ColumnType::Bytea, &json!("AAE=")),
            Ok(Value::Bytes(vec![0, 1]))
        );
        assert_eq!(
            Value::from_json(ColumnType::Jsonb, &json!("{\"a\":1}")),
            Ok(Value::Json("{\"a\":1}".into()))
        );
        assert_eq!(
            Value::from_json(ColumnType::Text, &json!(null)),
            Ok(Value::Null)
        );
    }

    fn numeric(p: i64, s: i64) -> ColumnType {
        ColumnType::Numeric(NumericTypmod::new(p, s))
    }

    #[test]
    fn decimals_are_normalised_to_the_columns_scale_or_refused() {
        use serde_json::json;
        let n12_2 = numeric(12, 2);
        for (input, want) in [
            (json!("7"), "7.00"),
            (json!("12.5"), "12.50"),
            (json!(7.5), "7.50"),
            (json!(7), "7.00"),
            (json!("19.990"), "19.99"),
            (json!("-0.5"), "-0.50"),
            (json!("-0.000"), "0.00"),
            (json!("1e2"), "100.00"),
            (json!("9999999999.99"), "9999999999.99"),
            (json!("NaN"), "NaN"),
        ] {
            assert_eq!(
                Value::from_json(n12_2, &input),
                Ok(Value::Decimal(want.into())),
                "{input}"
            );
        }
        // Rounding is refused, and so are too many integer digits and infinities.
        assert!(matches!(
            Value::from_json(n12_2, &json!("19.999")),
            Err(ConvertError::Scale { digits: 3, .. })
        ));
        assert!(matches!(
            Value::from_json(n12_2, &json!(0.001)),
            Err(ConvertError::Scale { .. })
        ));
        assert!(matches!(
            Value::from_json(n12_2, &json!("10000000000")),
            Err(ConvertError::Precision { .. })
        ));
        assert!(matches!(
            Value::from_json(n12_2, &json!("Infinity")),
            Err(ConvertError::Infinite { .. })
        ));
        // Negative scale and a scale above the precision, as PostgreSQL 15 has them.
        assert_eq!(
            fit_decimal("12300", NumericTypmod::new(5, -2).expect("typmod")).as_deref(),
            Ok("12300")
        );
        assert!(fit_decimal("12340", NumericTypmod::new(5, -2).expect("typmod")).is_err());
        assert!(fit_decimal("1234500", NumericTypmod::new(3, -2).expect("typmod")).is_err());
        assert_eq!(
            fit_decimal("0.00999", NumericTypmod::new(3, 5).expect("typmod")).as_deref(),
            Ok("0.00999")
        );
        assert_eq!(
            fit_decimal("0.001", NumericTypmod::new(3, 5).expect("typmod")).as_deref(),
            Ok("0.00100")
        );
        assert!(fit_decimal("0.01", NumericTypmod::new(3, 5).expect("typmod")).is_err());
        // Unconstrained numeric keeps the scale given.
        assert_eq!(
            Value::from_json(ColumnType::Numeric(None), &json!("7.5")),
            Ok(Value::Decimal("7.5".into()))
        );
        // The message never holds the value.
        let message = Value::from_json(n12_2, &json!("19.999"))
            .expect_err("rounded")
            .to_string();
        assert!(!message.contains("19.999"), "{message}");
        assert!(message.contains("numeric(12,2)"), "{message}");
    }

    #[test]
    fn values_that_postgres_cannot_store_are_refused() {
        use serde_json::json;
        for ty in [ColumnType::Text, ColumnType::Varchar(Some(10))] {
            assert!(matches!(
                Value::from_json(ty, &json!("a\u{0}b")),
                Err(ConvertError::Nul { .. })
            ));
        }
        for ty in [ColumnType::Json, ColumnType::Jsonb] {
            assert!(matches!(
                Value::from_json(ty, &json!({"k": "a\u{0}b"})),
                Err(ConvertError::Nul { .. })
            ));
            // An escaped backslash followed by `u0000` is no NUL.
            assert!(Value::from_json(ty, &json!({"k": "a\\u0000b"})).is_ok());
        }
        assert!(matches!(
            Value::from_json(ColumnType::Integer, &json!(2_147_483_648_i64)),
            Err(ConvertError::OutOfRange(_))
        ));
        assert!(matches!(
            Value::from_json(ColumnType::SmallInt, &json!(-32769)),
            Err(ConvertError::OutOfRange(_))
        ));
        assert_eq!(
            Value::from_json(ColumnType::SmallInt, &json!(-32768)),
            Ok(Value::Int(-32768))
        );
        assert!(matches!(
            Value::from_json(ColumnType::Varchar(Some(3)), &json!("äöüß")),
            Err(ConvertError::TooLong { chars: 4, max: 3 })
        ));
        assert!(Value::from_json(ColumnType::Varchar(Some(4)), &json!("äöüß")).is_ok());
        // PostgreSQL's dates start at 4714-11-24 BC.
        assert!(matches!(
            Value::from_json(ColumnType::Date, &json!("-5000-01-01")),
            Err(ConvertError::DateRange(_))
        ));
        assert!(matches!(
            Value::from_json(ColumnType::Timestamp, &json!("-5000-01-01T00:00:00")),
            Err(ConvertError::DateRange(_))
        ));
        assert_eq!(
            Value::Date(PG_DATE_MIN_DAYS).conform(ColumnType::Date),
            Ok(Value::Date(PG_DATE_MIN_DAYS))
        );
        assert!(
            Value::Date(PG_DATE_MIN_DAYS - 1)
                .conform(ColumnType::Date)
                .is_err()
        );
        assert!(
            Value::Date(PG_DATE_MAX_DAYS + 1)
                .conform(ColumnType::Date)
                .is_err()
        );
        assert_eq!(
            Value::Date(i32::MAX).conform(ColumnType::Date),
            Ok(Value::Date(i32::MAX))
        );
        assert!(
            Value::Timestamp(PG_TIMESTAMP_MIN_MICROS - 1)
                .conform(ColumnType::TimestampTz)
                .is_err()
        );
    }

    #[test]
    fn epoch_numbers_need_a_unit_and_are_exact() {
        use serde_json::json;
        // 2026-03-01 00:00:00 UTC.
        let us = 1_772_323_200_000_000_i64;
        for ty in [
            ColumnType::Timestamp,
            ColumnType::TimestampTz,
            ColumnType::Date,
        ] {
            let err = Value::from_json(ty, &json!(1_772_323_200_000_i64)).expect_err("no unit");
            assert!(matches!(err, ConvertError::NoEpochUnit { .. }), "{err}");
            assert!(err.to_string().contains("epoch"), "{err}");
        }
        for (unit, n) in [
            (EpochUnit::Seconds, us / 1_000_000),
            (EpochUnit::Millis, us / 1_000),
            (EpochUnit::Micros, us),
            (EpochUnit::Nanos, us * 1_000),
            (EpochUnit::Days, 20_513),
        ] {
            assert_eq!(
                Value::from_json_unit(ColumnType::Timestamp, Some(unit), &json!(n)),
                Ok(Value::Timestamp(us)),
                "{unit:?}"
            );
            assert_eq!(
                Value::from_json_unit(ColumnType::Date, Some(unit), &json!(n)),
                Ok(Value::Date(20_513)),
                "{unit:?}"
            );
        }
        assert!(matches!(
            Value::from_json_unit(ColumnType::Timestamp, Some(EpochUnit::Nanos), &json!(1_500)),
            Err(ConvertError::SubMicros)
        ));
        assert!(matches!(
            Value::from_json_unit(ColumnType::Date, Some(EpochUnit::Millis), &json!(1_000)),
            Err(ConvertError::NotMidnight)
        ));
        assert!(matches!(
            Value::from_json_unit(
                ColumnType::Timestamp,
                Some(EpochUnit::Seconds),
                &json!(i64::MAX)
            ),
            Err(ConvertError::DateRange(_))
        ));
        assert!(
            Value::from_json_unit(ColumnType::Timestamp, Some(EpochUnit::Millis), &json!(1.5))
                .is_err()
        );
    }

    fn logical(name: &str, parameters: serde_json::Value) -> Logical {
        Logical::from_schema(name, Some(&parameters))
            .expect("valid")
            .expect("a logical type")
    }

    #[test]
    fn debezium_logical_types_decide_the_unit() {
        use serde_json::json;
        let us = 1_772_323_200_000_000_i64;
        let none = json!(null);
        let ts = |name: &str, v: serde_json::Value| {
            Value::from_debezium(ColumnType::Timestamp, logical(name, json!(null)), &v)
        };
        assert_eq!(
            ts("io.debezium.time.Timestamp", json!(us / 1_000)),
            Ok(Value::Timestamp(us))
        );
        assert_eq!(
            ts("io.debezium.time.MicroTimestamp", json!(us + 1)),
            Ok(Value::Timestamp(us + 1))
        );
        assert_eq!(
            ts("io.debezium.time.NanoTimestamp", json!(us * 1_000)),
            Ok(Value::Timestamp(us))
        );
        assert_eq!(
            ts("io.debezium.time.NanoTimestamp", json!(us * 1_000 + 1)),
            Err(ConvertError::SubMicros)
        );
        assert_eq!(
            Value::from_debezium(
                ColumnType::TimestampTz,
                logical("io.debezium.time.ZonedTimestamp", none.clone()),
                &json!("2026-03-01T01:00:00+01:00")
            ),
            Ok(Value::Timestamp(us))
        );
        assert_eq!(
            Value::from_debezium(
                ColumnType::Date,
                logical("io.debezium.time.Date", none.clone()),
                &json!(20_513)
            ),
            Ok(Value::Date(20_513))
        );
        // A date as a string is not Debezium's Date.
        assert!(
            Value::from_debezium(
                ColumnType::Date,
                logical("io.debezium.time.Date", none.clone()),
                &json!("2026-03-01")
            )
            .is_err()
        );
        let time = |name: &str, v: i64| {
            Value::from_debezium(ColumnType::Text, logical(name, json!(null)), &json!(v))
        };
        assert_eq!(
            time("io.debezium.time.Time", 3_723_004),
            Ok(Value::Text("01:02:03.004".into()))
        );
        assert_eq!(
            time("io.debezium.time.MicroTime", 3_723_000_005),
            Ok(Value::Text("01:02:03.000005".into()))
        );
        assert_eq!(
            time("io.debezium.time.NanoTime", 3_723_000_000_000),
            Ok(Value::Text("01:02:03".into()))
        );
        assert!(time("io.debezium.time.NanoTime", 1).is_err());
        assert!(time("io.debezium.time.Time", -1).is_err());
        assert_eq!(
            Value::from_debezium(
                ColumnType::Text,
                logical("io.debezium.time.ZonedTime", none.clone()),
                &json!("01:02:03Z")
            ),
            Ok(Value::Text("01:02:03Z".into()))
        );
        // A time of day for a timestamp column is refused, not guessed.
        assert!(
            Value::from_debezium(
                ColumnType::Timestamp,
                logical("io.debezium.time.Time", none.clone()),
                &json!(1)
            )
            .is_err()
        );
    }

    #[test]
    fn debezium_decimals_are_exact() {
        use serde_json::json;
        let n12_2 = numeric(12, 2);
        let decimal = |scale: &str, b64: &str, ty: ColumnType| {
            Value::from_debezium(
                ty,
                logical(
                    "org.apache.kafka.connect.data.Decimal",
                    json!({"scale": scale}),
                ),
                &json!(b64),
            )
        };
        // 1999 = 0x07CF; scale 2: 19.99.
        assert_eq!(
            decimal("2", "B88=", n12_2),
            Ok(Value::Decimal("19.99".into()))
        );
        // -1999 = 0xF831.
        assert_eq!(
            decimal("2", "+DE=", n12_2),
            Ok(Value::Decimal("-19.99".into()))
        );
        // 19999 (0x4E1F) at scale 3 is 19.999: refused for numeric(12,2), not rounded.
        assert!(matches!(
            decimal("3", "Th8=", n12_2),
            Err(ConvertError::Scale { .. })
        ));
        assert_eq!(
            decimal("3", "Th8=", ColumnType::Numeric(None)),
            Ok(Value::Decimal("19.999".into()))
        );
        // 7 at scale 0, normalised to the column's scale.
        assert_eq!(
            decimal("0", "Bw==", n12_2),
            Ok(Value::Decimal("7.00".into()))
        );
        // 5 at scale 3: 0.005.
        assert_eq!(
            decimal("3", "BQ==", ColumnType::Numeric(None)),
            Ok(Value::Decimal("0.005".into()))
        );
        // 128 needs a leading zero byte (0x0080); 0x80 alone is -128.
        assert_eq!(
            decimal("0", "AIA=", ColumnType::Numeric(None)),
            Ok(Value::Decimal("128".into()))
        );
        assert_eq!(
            decimal("0", "gA==", ColumnType::Numeric(None)),
            Ok(Value::Decimal("-128".into()))
        );
        // A value wider than a u64: 2^80 = 0x01 followed by ten zero bytes.
        assert_eq!(
            decimal("0", "AQAAAAAAAAAAAAA=", ColumnType::Numeric(None)),
            Ok(Value::Decimal("1208925819614629174706176".into()))
        );
        assert!(decimal("2", "not base64!", n12_2).is_err());
        assert!(Logical::from_schema("org.apache.kafka.connect.data.Decimal", None).is_err());
        let variable = |v: serde_json::Value| {
            Value::from_debezium(
                n12_2,
                logical("io.debezium.data.VariableScaleDecimal", json!(null)),
                &v,
            )
        };
        assert_eq!(
            variable(json!({"scale": 1, "value": "fQ=="})),
            Ok(Value::Decimal("12.50".into()))
        );
        assert!(variable(json!({"scale": 3, "value": "Th8="})).is_err());
        assert!(variable(json!({"value": "fQ=="})).is_err());
    }

    #[test]
    fn values_render_as_postgres_text() {
        assert_eq!(Value::Date(20513).to_string(), "2026-03-01");
        assert_eq!(
            Value::Timestamp(1_772_323_200_000_000).to_string(),
            "2026-03-01 00:00:00"
        );
        assert_eq!(Value::Float(f64::NAN).to_string(), "NaN");
    }
}
