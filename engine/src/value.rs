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
    /// `numeric` / `numeric(p,s)`: exact decimal text.
    Numeric,
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
                None => Ok(Self::Numeric),
                Some(a) if a.split(',').all(|p| p.trim().parse::<u32>().is_ok()) => {
                    Ok(Self::Numeric)
                }
                Some(_) => Err(UnknownType(s.to_owned())),
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
    /// Converts a JSON value from a change feed into a value of column type `ty`.
    ///
    /// Accepted forms follow Debezium's defaults: integers as JSON numbers; numeric as
    /// a JSON number or decimal string (kept exact); dates as `YYYY-MM-DD` or days since
    /// the epoch; timestamps as ISO-8601 text or microseconds since the epoch; bytea as
    /// base64 text; json/jsonb as any JSON value (a string holding JSON is parsed).
    pub fn from_json(ty: ColumnType, v: &serde_json::Value) -> Result<Value, ConvertError> {
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
            ColumnType::Numeric => {
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
            ColumnType::Varchar(max) => match v {
                J::String(s) => {
                    if let Some(max) = max {
                        let chars = s.chars().count();
                        if chars > max as usize {
                            return Err(ConvertError::TooLong { chars, max });
                        }
                    }
                    Ok(Value::Text(s.clone()))
                }
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
                J::Number(n) => n
                    .as_i64()
                    .and_then(|d| i32::try_from(d).ok())
                    .map(Value::Date)
                    .ok_or_else(|| ConvertError::OutOfRange(n.to_string())),
                _ => Err(wrong("a date string or days since 1970-01-01")),
            },
            ColumnType::Timestamp | ColumnType::TimestampTz => match v {
                J::String(s) => parse_timestamp(s, ty == ColumnType::TimestampTz)
                    .map(Value::Timestamp)
                    .ok_or_else(|| ConvertError::Invalid {
                        text: s.clone(),
                        expected: "timestamp (ISO 8601)",
                    }),
                J::Number(n) => n
                    .as_i64()
                    .map(Value::Timestamp)
                    .ok_or_else(|| ConvertError::OutOfRange(n.to_string())),
                _ => Err(wrong("a timestamp string or microseconds since 1970-01-01")),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_parse_with_aliases() {
        for (text, ty) in [
            ("bigint", ColumnType::BigInt),
            ("INT8", ColumnType::BigInt),
            ("numeric(12,2)", ColumnType::Numeric),
            ("double  precision", ColumnType::Double),
            ("varchar(10)", ColumnType::Varchar(Some(10))),
            ("timestamp with time zone", ColumnType::TimestampTz),
        ] {
            assert_eq!(text.parse::<ColumnType>(), Ok(ty), "{text}");
        }
        assert!("numeric(a)".parse::<ColumnType>().is_err());
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
            Value::from_json(ColumnType::Date, &json!(20513)),
            Ok(Value::Date(20513))
        );
        assert_eq!(
            Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01T01:00:00+01:00")),
            Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01 00:00:00Z"))
        );
        assert_eq!(
            Value::from_json(ColumnType::Numeric, &json!("19.90")),
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
