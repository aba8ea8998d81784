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
//!
//! The module's parts: the value and column types here; the exact text of values
//! (decimals, dates, timestamps, uuids, and how a value prints) in `text.rs`; converting
//! change-feed JSON into a value and checking it against its column in `convert.rs`;
//! Debezium's logical types in `debezium.rs`; PostgreSQL's binary format, for COPY and
//! statement parameters, in `binary.rs`; their tests in `tests.rs`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod binary;
mod convert;
mod debezium;
mod text;

pub use binary::{EncodeError, encode_numeric};
pub use convert::{ConvertError, json_has_nul};
pub use debezium::Logical;
pub use text::{
    canonical_decimal, date_from_days, days_from_date, fit_decimal, has_sub_micros, parse_date,
    parse_timestamp,
};

/// Days between 1970-01-01 (our epoch) and 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_DAYS: i32 = 10_957;
/// Microseconds between 1970-01-01 and 2000-01-01.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
const MICROS_PER_DAY: i64 = 86_400_000_000;
/// PostgreSQL's first date, 4714-11-24 BC, in days since 1970-01-01.
const PG_DATE_MIN_DAYS: i32 = -2_440_588;
/// PostgreSQL's last date, 5874897-12-31, in days since 1970-01-01.
const PG_DATE_MAX_DAYS: i32 = 2_145_042_905;
/// PostgreSQL's first timestamp, 4714-11-24 00:00:00 BC, in µs since 1970-01-01. Its
/// last one lies past `i64`'s range in µs since 1970 (see `pgtypes`).
pub(crate) const PG_TIMESTAMP_MIN_MICROS: i64 = -210_866_803_200_000_000;

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

impl Value {
    /// The heap bytes the value holds beside its own size.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Text(s) | Value::Decimal(s) | Value::Json(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::Unsupported { type_name, text } => type_name.len() + text.len(),
            _ => 0,
        }
    }
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

impl ColumnType {
    /// Whether every value of this type is a value of type `to`, written the same way
    /// (or as PostgreSQL writes it into `to`: a decimal given more scale): integers into
    /// wider integers, decimals into decimals with as many digits before and after the
    /// point or unconstrained, text into longer or unbounded text.
    pub fn widens_to(self, to: ColumnType) -> bool {
        use ColumnType::{BigInt, Integer, Numeric, SmallInt, Text, Varchar};
        match (self, to) {
            (SmallInt, Integer | BigInt) | (Integer, BigInt) => true,
            (Numeric(_), Numeric(None)) => true,
            (Numeric(Some(a)), Numeric(Some(b))) => {
                // Digits before the point: precision less scale.
                let before =
                    |t: NumericTypmod| i32::from(t.precision).saturating_sub(i32::from(t.scale));
                b.scale >= a.scale && before(b) >= before(a)
            }
            (Varchar(Some(a)), Varchar(Some(b))) => b >= a,
            (Varchar(_), Varchar(None) | Text) | (Text, Varchar(None)) => true,
            _ => false,
        }
    }
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

/// How a `bytea` value is written as a JSON string: Debezium's `binary.handling.mode`
/// (`bytes`, its default, and `base64` are both standard base64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryEncoding {
    Base64,
    Base64UrlSafe,
    Hex,
}

impl FromStr for BinaryEncoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "base64" => BinaryEncoding::Base64,
            "base64-url-safe" => BinaryEncoding::Base64UrlSafe,
            "hex" => BinaryEncoding::Hex,
            other => {
                return Err(format!(
                    "unknown encoding `{other}`: use \"base64\", \"base64-url-safe\" or \"hex\" (Debezium's binary.handling.mode; its default, bytes, is base64)"
                ));
            }
        })
    }
}

impl BinaryEncoding {
    /// The bytes of `text` in this encoding.
    pub fn decode(self, text: &str) -> Result<Vec<u8>, ConvertError> {
        use base64::Engine as _;
        let invalid = |expected| ConvertError::Invalid {
            text: text.to_owned(),
            expected,
        };
        match self {
            BinaryEncoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| invalid("base64 bytes")),
            BinaryEncoding::Base64UrlSafe => {
                let engine = base64::engine::GeneralPurpose::new(
                    &base64::alphabet::URL_SAFE,
                    base64::engine::GeneralPurposeConfig::new()
                        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
                );
                engine
                    .decode(text)
                    .map_err(|_| invalid("URL-safe base64 bytes"))
            }
            BinaryEncoding::Hex => hex::decode(text).map_err(|_| invalid("hex bytes")),
        }
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

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

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
}

#[cfg(test)]
mod tests;
