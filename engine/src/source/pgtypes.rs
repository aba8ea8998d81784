//! PostgreSQL text-format column values, turned into [`Value`]s by type OID.
//!
//! pgoutput sends each column of a row as the text its type's output function prints
//! ([`TupleValue::Text`]), in the decoding session's settings, with the column's type OID
//! and modifier in the preceding Relation message. [`decode_text`] turns that text into a
//! [`Value`] without losing anything; [`column_type`] and [`type_name`] describe the
//! column itself (the Weir [`ColumnType`], and the type as PostgreSQL's `format_type`
//! prints it, so that a target table can be created from a source relation).
//!
//! | PostgreSQL type (OID) | `Value` |
//! |---|---|
//! | `smallint` (21), `integer` (23), `bigint` (20) | `Int`, range-checked per type |
//! | `numeric` (1700) | `Decimal`, the text verbatim (`NaN`, `Infinity`, `-Infinity` too) |
//! | `real` (700), `double precision` (701) | `Float`; `real` is parsed as `f32` and widened |
//! | `text` (25), `character varying` (1043), `character` (1042), `name` (19) | `Text`, verbatim (a `character(n)` keeps its padding) |
//! | `boolean` (16) | `Bool` |
//! | `date` (1082) | `Date`; `infinity` / `-infinity` are `i32::MAX` / `i32::MIN` |
//! | `timestamp` (1114), `timestamp with time zone` (1184) | `Timestamp` (µs; `infinity` / `-infinity` are `i64::MAX` / `i64::MIN`) |
//! | `uuid` (2950) | `Text`, lower case |
//! | `json` (114), `jsonb` (3802) | `Json`, the text verbatim |
//! | `bytea` (17) | `Bytes`, from the hex (`\x…`) or the escape format |
//! | anything else (arrays, enums, domains, `interval`, …) | `Unsupported { type_name, text }`, the text verbatim |
//!
//! Decisions:
//! * **Infinite dates** are `Value::Date(i32::MAX)` (`infinity`) and `Value::Date(i32::MIN)`
//!   (`-infinity`), as PostgreSQL itself stores them (`DATEVAL_NOEND` / `DATEVAL_NOBEGIN`)
//!   and as `Value::Timestamp` does with `i64`. No finite PostgreSQL date collides with
//!   them: the last one, 5874897-12-31, is day 2,145,042,905 after 1970-01-01.
//! * **BC** dates and timestamps (`0044-03-15 BC`) are the proleptic Gregorian calendar
//!   PostgreSQL uses, with no year 0: 1 BC is astronomical year 0, 44 BC year −43.
//! * **`timestamp`** (without time zone) is its wall time read as if it were UTC;
//!   **`timestamp with time zone`** is the instant, whatever offset it is printed with
//!   (`+00`, `+05:30`, `-08`, or a local mean time such as `+00:19:32`).
//! * **The top of PostgreSQL's timestamp range does not fit** `Value::Timestamp`:
//!   microseconds since 1970 in an `i64` end at 294247-01-10 04:00:54.775807 (and that
//!   last one is `infinity`), while PostgreSQL (microseconds since 2000) goes on to
//!   294276-12-31 23:59:59.999999. Such a value is an [`Problem::OutOfRange`] error, never
//!   a clamped one.
//! * **Text is never normalised**: `numeric` keeps its scale (`1.50`), `character(n)` its
//!   padding, `json` its spacing and key order, `jsonb` PostgreSQL's rendering of it.
//!   JSON is not re-parsed: PostgreSQL validated it on input, and a parser here would
//!   impose a nesting limit PostgreSQL does not have.
//!
//! The decoding session must print values the way this module reads them:
//! `DateStyle` ISO (the default `ISO, MDY` is fine: only the first part matters), any
//! `TimeZone` (offsets are parsed), `extra_float_digits` at least 1 (the default; 0 or
//! less prints rounded floats, which no parser can undo), any `bytea_output`, and UTF-8
//! as the client encoding. Binary mode (the `binary` option of pgoutput) is not used.
//!
//! Errors ([`TypeError`]) name the column, its type and what was expected, never the
//! value: values are row data, and errors are logged.

// Mechanical enforcement: this parses external input and must never panic.
#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]

use crate::source::pgoutput::{RelationColumn, TupleValue};
use crate::value::{ColumnType, NumericTypmod, Value};

// Type OIDs of PostgreSQL's catalog (`pg_type.dat`); stable across versions.
const BOOL: u32 = 16;
const BYTEA: u32 = 17;
const CHAR: u32 = 18;
const NAME: u32 = 19;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const JSON: u32 = 114;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;
const DATE: u32 = 1082;
const TIME: u32 = 1083;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const INTERVAL: u32 = 1186;
const TIMETZ: u32 = 1266;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;
const NUMERIC: u32 = 1700;
const UUID: u32 = 2950;
const JSONB: u32 = 3802;

/// Types without a modifier of their own, named as `format_type` names them.
const PLAIN_TYPES: &[(u32, &str)] = &[
    (BOOL, "boolean"),
    (BYTEA, "bytea"),
    (CHAR, "\"char\""),
    (NAME, "name"),
    (INT8, "bigint"),
    (INT2, "smallint"),
    (INT4, "integer"),
    (TEXT, "text"),
    (JSON, "json"),
    (FLOAT4, "real"),
    (FLOAT8, "double precision"),
    (DATE, "date"),
    (UUID, "uuid"),
    (JSONB, "jsonb"),
    // Well-known types Weir carries as `Unsupported`.
    (24, "regproc"),
    (26, "oid"),
    (27, "tid"),
    (28, "xid"),
    (29, "cid"),
    (142, "xml"),
    (600, "point"),
    (601, "lseg"),
    (602, "path"),
    (603, "box"),
    (604, "polygon"),
    (628, "line"),
    (650, "cidr"),
    (718, "circle"),
    (774, "macaddr8"),
    (790, "money"),
    (829, "macaddr"),
    (869, "inet"),
    (2205, "regclass"),
    (2206, "regtype"),
    (2970, "txid_snapshot"),
    (3220, "pg_lsn"),
    (3614, "tsvector"),
    (3615, "tsquery"),
    (3734, "regconfig"),
    (3904, "int4range"),
    (3906, "numrange"),
    (3908, "tsrange"),
    (3910, "tstzrange"),
    (3912, "daterange"),
    (3926, "int8range"),
    (4072, "jsonpath"),
    (4451, "int4multirange"),
    (4532, "nummultirange"),
    (4533, "tsmultirange"),
    (4534, "tstzmultirange"),
    (4535, "datemultirange"),
    (4536, "int8multirange"),
    (5038, "pg_snapshot"),
    (5069, "xid8"),
];

/// Array types and their element types.
const ARRAY_TYPES: &[(u32, u32)] = &[
    (199, JSON),
    (651, 650),
    (1000, BOOL),
    (1001, BYTEA),
    (1002, CHAR),
    (1003, NAME),
    (1005, INT2),
    (1007, INT4),
    (1009, TEXT),
    (1014, BPCHAR),
    (1015, VARCHAR),
    (1016, INT8),
    (1021, FLOAT4),
    (1022, FLOAT8),
    (1028, 26),
    (1041, 869),
    (1115, TIMESTAMP),
    (1182, DATE),
    (1183, TIME),
    (1185, TIMESTAMPTZ),
    (1187, INTERVAL),
    (1231, NUMERIC),
    (1270, TIMETZ),
    (1561, BIT),
    (1563, VARBIT),
    (2951, UUID),
    (3807, JSONB),
];

/// Length overhead PostgreSQL adds to character and numeric type modifiers (`VARHDRSZ`).
const VARHDRSZ: i32 = 4;
const MICROS_PER_SECOND: i128 = 1_000_000;
const SECONDS_PER_DAY: i128 = 86_400;

/// A column value that cannot be decoded. Names the column and its type, never the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column `{column}` of type {type_name}: {problem}")]
pub struct TypeError {
    /// The column's name (from the Relation message).
    pub column: String,
    /// The column's type, as [`type_name`] prints it.
    pub type_name: String,
    /// What is wrong with the value.
    pub problem: Problem,
}

/// What is wrong with a column value (never the value itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The text is not UTF-8: the decoding session's client encoding is not UTF8.
    #[error(
        "the value is not valid UTF-8 (the replication connection must use client_encoding UTF8)"
    )]
    InvalidUtf8,
    /// The text is not in the type's output format; the format expected is given.
    #[error("cannot parse the value: expected {0}")]
    Invalid(&'static str),
    /// The value is well formed but outside what the type or `Value` can hold.
    #[error("the value is out of range: {0}")]
    OutOfRange(&'static str),
    /// The value came in binary format.
    #[error(
        "the value is in binary format, which Weir does not use: start replication without pgoutput's `binary` option"
    )]
    Binary,
}

/// Turns the text of one column value, as PostgreSQL's output function printed it, into a
/// [`Value`] according to the column's type OID and modifier.
///
/// A type Weir does not model becomes [`Value::Unsupported`] with the text verbatim; an
/// invalid value of a type it does model is an error naming the column and its type.
pub fn decode_text(
    column: &str,
    type_oid: u32,
    type_modifier: i32,
    bytes: &[u8],
) -> Result<Value, TypeError> {
    decode(type_oid, type_modifier, bytes).map_err(|problem| TypeError {
        column: column.to_owned(),
        type_name: type_name(type_oid, type_modifier),
        problem,
    })
}

/// Decodes one column of a pgoutput tuple.
///
/// `Ok(None)` is an unchanged TOASTed value that was not sent ([`TupleValue::UnchangedToast`]):
/// the caller takes it from the row image it already has. SQL NULL is `Value::Null`.
/// A binary-format value is an error ([`Problem::Binary`]): Weir asks for text.
pub fn decode_tuple_value(
    column: &str,
    type_oid: u32,
    type_modifier: i32,
    value: &TupleValue,
) -> Result<Option<Value>, TypeError> {
    match value {
        TupleValue::Null => Ok(Some(Value::Null)),
        TupleValue::UnchangedToast => Ok(None),
        TupleValue::Text(bytes) => decode_text(column, type_oid, type_modifier, bytes).map(Some),
        TupleValue::Binary(_) => Err(TypeError {
            column: column.to_owned(),
            type_name: type_name(type_oid, type_modifier),
            problem: Problem::Binary,
        }),
    }
}

/// [`decode_tuple_value`] for a column of a Relation message.
pub fn decode_column(
    column: &RelationColumn,
    value: &TupleValue,
) -> Result<Option<Value>, TypeError> {
    decode_tuple_value(&column.name, column.type_oid, column.type_modifier, value)
}

/// The Weir [`ColumnType`] of a PostgreSQL column, or `None` when Weir has none for it.
///
/// `character varying(n)` is `Varchar(Some(n))` (the modifier is n + 4); `numeric(p,s)` is
/// `Numeric(Some(p,s))`, against which values are checked; a precision such as `timestamp(3)` is not part of the `ColumnType` (see
/// [`type_name`] for the full type). `character(n)` and `name` decode to `Value::Text`
/// but have no `ColumnType` (a `text` column would compare differently: trailing spaces
/// are insignificant in `character(n)`); nor do the types decoded as `Unsupported`
/// (arrays, enums, domains, `interval`, …).
pub fn column_type(type_oid: u32, type_modifier: i32) -> Option<ColumnType> {
    Some(match type_oid {
        INT2 => ColumnType::SmallInt,
        INT4 => ColumnType::Integer,
        INT8 => ColumnType::BigInt,
        FLOAT4 => ColumnType::Real,
        FLOAT8 => ColumnType::Double,
        NUMERIC => ColumnType::Numeric(
            numeric_precision_scale(type_modifier)
                .and_then(|(p, s)| NumericTypmod::new(i64::from(p), i64::from(s))),
        ),
        TEXT => ColumnType::Text,
        VARCHAR => ColumnType::Varchar(char_length(type_modifier)),
        BOOL => ColumnType::Bool,
        DATE => ColumnType::Date,
        TIMESTAMP => ColumnType::Timestamp,
        TIMESTAMPTZ => ColumnType::TimestampTz,
        UUID => ColumnType::Uuid,
        JSON => ColumnType::Json,
        JSONB => ColumnType::Jsonb,
        BYTEA => ColumnType::Bytea,
        _ => return None,
    })
}

/// The name of a column type as PostgreSQL's `format_type(type_oid, type_modifier)` prints
/// it (`numeric(12,2)`, `character varying(20)`, `timestamp(3) with time zone`,
/// `integer[]`), for the built-in types Weir knows; `oid <n>` for any other type (an
/// enum, a domain, an extension's type: the Type message or `pg_type` names those).
pub fn type_name(type_oid: u32, type_modifier: i32) -> String {
    if let Some(&(_, element)) = ARRAY_TYPES.iter().find(|(array, _)| *array == type_oid) {
        // `format_type` prints an array as its element type, with the column's modifier.
        return format!("{}[]", type_name(element, type_modifier));
    }
    // A modifier is "given" (pgoutput always gives one) and applies when it is >= 0.
    let typmod = (type_modifier >= 0).then_some(type_modifier);
    match (type_oid, typmod) {
        (NUMERIC, Some(t)) => match numeric_precision_scale(t) {
            Some((p, s)) => format!("numeric({p},{s})"),
            None => "numeric".to_owned(),
        },
        (NUMERIC, None) => "numeric".to_owned(),
        (VARCHAR, t) => match t.and_then(char_length) {
            Some(n) => format!("character varying({n})"),
            None => "character varying".to_owned(),
        },
        (BPCHAR, Some(t)) => match char_length(t) {
            Some(n) => format!("character({n})"),
            None => "character".to_owned(),
        },
        // `character` means `character(1)`; without a modifier it is `bpchar`.
        (BPCHAR, None) => "bpchar".to_owned(),
        (TIME, t) => time_name("time", t, "without"),
        (TIMETZ, t) => time_name("time", t, "with"),
        (TIMESTAMP, t) => time_name("timestamp", t, "without"),
        (TIMESTAMPTZ, t) => time_name("timestamp", t, "with"),
        (INTERVAL, Some(t)) => format!("interval{}", interval_typmod(t)),
        (INTERVAL, None) => "interval".to_owned(),
        (BIT, Some(t)) => format!("bit({t})"),
        // `bit` means `bit(1)`; without a modifier PostgreSQL quotes the name.
        (BIT, None) => "\"bit\"".to_owned(),
        (VARBIT, Some(t)) => format!("bit varying({t})"),
        (VARBIT, None) => "bit varying".to_owned(),
        (oid, t) => match PLAIN_TYPES.iter().find(|(o, _)| *o == oid) {
            // A modifier on a type without a modifier output function is printed raw.
            Some((_, name)) => match t {
                Some(t) => format!("{name}({t})"),
                None => (*name).to_owned(),
            },
            None => format!("oid {oid}"),
        },
    }
}

/// `time`/`timestamp` with an optional precision and `with`/`without` time zone.
fn time_name(base: &str, precision: Option<i32>, with: &str) -> String {
    match precision {
        Some(p) => format!("{base}({p}) {with} time zone"),
        None => format!("{base} {with} time zone"),
    }
}

/// The n of `character(n)` / `character varying(n)` from the modifier n + 4.
fn char_length(type_modifier: i32) -> Option<u32> {
    if type_modifier > VARHDRSZ {
        u32::try_from(type_modifier.checked_sub(VARHDRSZ)?).ok()
    } else {
        None
    }
}

/// Precision and scale of a `numeric` modifier (PostgreSQL 15: the scale is an 11-bit
/// signed number, so `numeric(5,-2)` and `numeric(3,5)` exist).
fn numeric_precision_scale(type_modifier: i32) -> Option<(i32, i32)> {
    if type_modifier < VARHDRSZ {
        return None;
    }
    let t = type_modifier.checked_sub(VARHDRSZ)?;
    let precision = t.checked_shr(16)? & 0xffff;
    let scale = ((t & 0x7ff) ^ 1024).checked_sub(1024)?;
    Some((precision, scale))
}

/// The suffix `intervaltypmodout` prints for an `interval` modifier.
fn interval_typmod(type_modifier: i32) -> String {
    const MONTH: i32 = 1 << 1;
    const YEAR: i32 = 1 << 2;
    const DAY: i32 = 1 << 3;
    const HOUR: i32 = 1 << 10;
    const MINUTE: i32 = 1 << 11;
    const SECOND: i32 = 1 << 12;
    const FULL_PRECISION: i32 = 0xffff;
    let range = type_modifier.checked_shr(16).unwrap_or(0) & 0x7fff;
    let precision = type_modifier & 0xffff;
    let fields = match range {
        YEAR => " year",
        MONTH => " month",
        DAY => " day",
        HOUR => " hour",
        MINUTE => " minute",
        SECOND => " second",
        r if r == YEAR | MONTH => " year to month",
        r if r == DAY | HOUR => " day to hour",
        r if r == DAY | HOUR | MINUTE => " day to minute",
        r if r == DAY | HOUR | MINUTE | SECOND => " day to second",
        r if r == HOUR | MINUTE => " hour to minute",
        r if r == HOUR | MINUTE | SECOND => " hour to second",
        r if r == MINUTE | SECOND => " minute to second",
        // 0x7fff (all fields), or a modifier PostgreSQL would reject.
        _ => "",
    };
    if precision == FULL_PRECISION {
        fields.to_owned()
    } else {
        format!("{fields}({precision})")
    }
}

fn decode(type_oid: u32, type_modifier: i32, bytes: &[u8]) -> Result<Value, Problem> {
    if type_oid == BYTEA {
        return decode_bytea(bytes)
            .map(Value::Bytes)
            .ok_or(Problem::Invalid(
                "bytea in hex format (\\x followed by pairs of hex digits) or escape format",
            ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Problem::InvalidUtf8)?;
    Ok(match type_oid {
        BOOL => match text {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => return Err(Problem::Invalid("t or f")),
        },
        INT2 => Value::Int(parse_int(text, i64::from(i16::MIN), i64::from(i16::MAX))?),
        INT4 => Value::Int(parse_int(text, i64::from(i32::MIN), i64::from(i32::MAX))?),
        INT8 => Value::Int(parse_int(text, i64::MIN, i64::MAX)?),
        NUMERIC if is_numeric_text(text) => Value::Decimal(text.to_owned()),
        NUMERIC => {
            return Err(Problem::Invalid(
                "decimal digits with an optional - and fraction, NaN, Infinity or -Infinity",
            ));
        }
        FLOAT4 => Value::Float(f64::from(parse_float::<f32>(text)?)),
        FLOAT8 => Value::Float(parse_float::<f64>(text)?),
        TEXT | VARCHAR | BPCHAR | NAME => Value::Text(text.to_owned()),
        DATE => Value::Date(parse_date(text)?),
        TIMESTAMP => Value::Timestamp(parse_timestamp(text, false)?),
        TIMESTAMPTZ => Value::Timestamp(parse_timestamp(text, true)?),
        UUID => Value::Text(parse_uuid(text)?),
        JSON | JSONB => Value::Json(text.to_owned()),
        _ => Value::Unsupported {
            type_name: type_name(type_oid, type_modifier),
            text: text.to_owned(),
        },
    })
}

/// An integer in `[min, max]`, as `int2out`/`int4out`/`int8out` print it.
fn parse_int(text: &str, min: i64, max: i64) -> Result<i64, Problem> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::Invalid(
            "an integer: decimal digits with an optional -",
        ));
    }
    let n: i64 = text
        .parse()
        .map_err(|_| Problem::OutOfRange("beyond the 64-bit integer range"))?;
    if n < min || n > max {
        return Err(Problem::OutOfRange("beyond the integer type's range"));
    }
    Ok(n)
}

/// `numeric_out`'s text: `NaN`, `Infinity`, `-Infinity` or `-?digits(.digits)?`.
fn is_numeric_text(text: &str) -> bool {
    if matches!(text, "NaN" | "Infinity" | "-Infinity") {
        return true;
    }
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match unsigned.split_once('.') {
        Some((int, frac)) => all_digits(int) && all_digits(frac),
        None => all_digits(unsigned),
    }
}

/// A float as `float4out`/`float8out` print it: `NaN`, `Infinity`, `-Infinity`, or a
/// finite number in decimal or exponent notation. Parsing as the column's own width is
/// exact: PostgreSQL 12+ prints the shortest text that reads back as the same value.
fn parse_float<F>(text: &str) -> Result<F, Problem>
where
    F: std::str::FromStr + SpecialFloat,
{
    match text {
        "NaN" => return Ok(F::NAN),
        "Infinity" => return Ok(F::INFINITY),
        "-Infinity" => return Ok(F::NEG_INFINITY),
        _ => {}
    }
    // Rust also reads `inf`, `nan` and `infinity`; PostgreSQL never prints them.
    let number_chars = text
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !number_chars {
        return Err(Problem::Invalid(
            "a decimal number, NaN, Infinity or -Infinity",
        ));
    }
    let x: F = text
        .parse()
        .map_err(|_| Problem::Invalid("a decimal number, NaN, Infinity or -Infinity"))?;
    if x.is_finite_value() {
        Ok(x)
    } else {
        Err(Problem::OutOfRange("beyond the float type's range"))
    }
}

/// The special values of `f32` and `f64`.
trait SpecialFloat: Sized {
    const NAN: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    fn is_finite_value(&self) -> bool;
}

impl SpecialFloat for f32 {
    const NAN: Self = f32::NAN;
    const INFINITY: Self = f32::INFINITY;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    fn is_finite_value(&self) -> bool {
        self.is_finite()
    }
}

impl SpecialFloat for f64 {
    const NAN: Self = f64::NAN;
    const INFINITY: Self = f64::INFINITY;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    fn is_finite_value(&self) -> bool {
        self.is_finite()
    }
}

/// `uuid_out`'s text (8-4-4-4-12 hex digits), in lower case.
fn parse_uuid(text: &str) -> Result<String, Problem> {
    let well_formed = text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    if well_formed {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(Problem::Invalid("a uuid: 8-4-4-4-12 hex digits"))
    }
}

/// `byteaout`'s text: hex (`\x` and pairs of hex digits) or, with `bytea_output =
/// escape`, bytes as themselves except `\\` for a backslash and `\ooo` (octal) escapes.
fn decode_bytea(bytes: &[u8]) -> Option<Vec<u8>> {
    if let Some(hex_digits) = bytes.strip_prefix(b"\\x") {
        return hex::decode(hex_digits).ok();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some((&b, tail)) = rest.split_first() {
        rest = match (b, tail) {
            (b'\\', [b'\\', tail @ ..]) => {
                out.push(b'\\');
                tail
            }
            (b'\\', [a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', tail @ ..]) => {
                let octal = [*a, *b, *c];
                let digits = std::str::from_utf8(&octal).ok()?;
                out.push(u8::from_str_radix(digits, 8).ok()?);
                tail
            }
            (b'\\', _) => return None,
            (b, tail) => {
                out.push(b);
                tail
            }
        };
    }
    Some(out)
}

const DATE_FORMAT: &str = "an ISO date: YYYY-MM-DD, optionally followed by BC (DateStyle must be ISO), infinity or -infinity";
const TIMESTAMP_FORMAT: &str = "an ISO timestamp: YYYY-MM-DD HH:MM:SS with up to 6 fraction digits, optionally followed by BC (DateStyle must be ISO), infinity or -infinity";
const TIMESTAMPTZ_FORMAT: &str = "an ISO timestamp with time zone: YYYY-MM-DD HH:MM:SS with up to 6 fraction digits, an offset +HH[:MM[:SS]] or -HH[:MM[:SS]], optionally followed by BC (DateStyle must be ISO), infinity or -infinity";

/// Days since 1970-01-01 of `date_out`'s ISO text; `i32::MAX`/`i32::MIN` for
/// `infinity`/`-infinity`.
fn parse_date(text: &str) -> Result<i32, Problem> {
    match text {
        "infinity" => return Ok(i32::MAX),
        "-infinity" => return Ok(i32::MIN),
        _ => {}
    }
    let (body, bc) = split_era(text);
    let mut cursor = Cursor(body.as_bytes());
    let days = cursor.date(bc).ok_or(Problem::Invalid(DATE_FORMAT))?;
    if !cursor.0.is_empty() {
        return Err(Problem::Invalid(DATE_FORMAT));
    }
    i32::try_from(days)
        .ok()
        .filter(|d| *d != i32::MAX && *d != i32::MIN)
        .ok_or(Problem::OutOfRange(
            "beyond the dates a 32-bit day count since 1970-01-01 holds",
        ))
}

/// Microseconds since 1970-01-01 00:00 UTC of `timestamp_out`/`timestamptz_out`'s ISO
/// text; `i64::MAX`/`i64::MIN` for `infinity`/`-infinity`. With a time zone the offset is
/// required and applied; without, the wall time is read as UTC.
fn parse_timestamp(text: &str, with_zone: bool) -> Result<i64, Problem> {
    match text {
        "infinity" => return Ok(i64::MAX),
        "-infinity" => return Ok(i64::MIN),
        _ => {}
    }
    let format = if with_zone {
        TIMESTAMPTZ_FORMAT
    } else {
        TIMESTAMP_FORMAT
    };
    let (body, bc) = split_era(text);
    let micros = parse_timestamp_body(body, bc, with_zone).ok_or(Problem::Invalid(format))?;
    i64::try_from(micros)
        .ok()
        .filter(|us| *us != i64::MAX && *us != i64::MIN)
        .ok_or(Problem::OutOfRange(
            "microseconds since 1970 in 64 bits end at 294247-01-10 04:00:54.775806 UTC, before PostgreSQL's last timestamp",
        ))
}

/// The instant of an ISO timestamp without its era suffix, in microseconds since
/// 1970-01-01 UTC (wide enough that no valid text overflows).
fn parse_timestamp_body(body: &str, bc: bool, with_zone: bool) -> Option<i128> {
    let mut c = Cursor(body.as_bytes());
    let days = c.date(bc)?;
    c.byte(b' ')?;
    let hour = c.number(2, 2).filter(|h| *h <= 23)?;
    c.byte(b':')?;
    let minute = c.number(2, 2).filter(|m| *m <= 59)?;
    c.byte(b':')?;
    let second = c.number(2, 2).filter(|s| *s <= 59)?;
    let mut fraction_us = 0;
    if c.eat(b'.') {
        let (mut value, digits) = c.number_with_len(1, 6)?;
        for _ in digits..6 {
            value = value.checked_mul(10)?;
        }
        fraction_us = value;
    }
    let mut offset_seconds = 0;
    if with_zone {
        let negative = match c.next()? {
            b'+' => false,
            b'-' => true,
            _ => return None,
        };
        let hours = c.number(2, 2)?;
        let minutes = if c.eat(b':') {
            c.number(2, 2).filter(|m| *m <= 59)?
        } else {
            0
        };
        let seconds = if c.eat(b':') {
            c.number(2, 2).filter(|s| *s <= 59)?
        } else {
            0
        };
        let magnitude = hours
            .checked_mul(3600)?
            .checked_add(minutes.checked_mul(60)?)?
            .checked_add(seconds)?;
        offset_seconds = if negative {
            magnitude.checked_neg()?
        } else {
            magnitude
        };
    }
    if !c.0.is_empty() {
        return None;
    }
    // Local time = UTC + offset, so UTC = local - offset.
    let seconds_of_day = hour
        .checked_mul(3600)?
        .checked_add(minute.checked_mul(60)?)?
        .checked_add(second)?;
    let seconds = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(seconds_of_day)?
        .checked_sub(offset_seconds)?;
    seconds
        .checked_mul(MICROS_PER_SECOND)?
        .checked_add(fraction_us)
}

/// Splits the ` BC` suffix PostgreSQL prints after BC dates and timestamps.
fn split_era(text: &str) -> (&str, bool) {
    match text.strip_suffix(" BC") {
        Some(body) => (body, true),
        None => (text, false),
    }
}

/// Reads ASCII fields from the front of a byte string.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn next(&mut self) -> Option<u8> {
        let (&b, tail) = self.0.split_first()?;
        self.0 = tail;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        self.eat(want).then_some(())
    }

    fn eat(&mut self, want: u8) -> bool {
        match self.0.split_first() {
            Some((&b, tail)) if b == want => {
                self.0 = tail;
                true
            }
            _ => false,
        }
    }

    /// A run of `min..=max` decimal digits (the run must end there).
    fn number(&mut self, min: usize, max: usize) -> Option<i128> {
        self.number_with_len(min, max).map(|(n, _)| n)
    }

    fn number_with_len(&mut self, min: usize, max: usize) -> Option<(i128, usize)> {
        let len = self.0.iter().take_while(|b| b.is_ascii_digit()).count();
        if len < min || len > max {
            return None;
        }
        let (digits, tail) = self.0.split_at_checked(len)?;
        let mut n: i128 = 0;
        for d in digits {
            n = n
                .checked_mul(10)?
                .checked_add(i128::from(d.checked_sub(b'0')?))?;
        }
        self.0 = tail;
        Some((n, len))
    }

    /// `YYYY-MM-DD` (a year of 4 to 9 digits) in the era given, as days since 1970-01-01.
    fn date(&mut self, bc: bool) -> Option<i128> {
        let year = self.number(4, 9).filter(|y| *y >= 1)?;
        self.byte(b'-')?;
        let month = self.number(2, 2)?;
        self.byte(b'-')?;
        let day = self.number(2, 2)?;
        // No year 0: 1 BC is astronomical year 0.
        let year = if bc { 1_i128.checked_sub(year)? } else { year };
        if day < 1 || day > days_in_month(year, month)? {
            return None;
        }
        days_from_civil(year, month, day)
    }
}

fn is_leap_year(year: i128) -> Option<bool> {
    let divisible = |n: i128| year.checked_rem_euclid(n).map(|r| r == 0);
    Some(divisible(4)? && (!divisible(100)? || divisible(400)?))
}

/// Days of a month of the proleptic Gregorian calendar; `None` for no such month.
fn days_in_month(year: i128, month: i128) -> Option<i128> {
    Some(match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year)? => 29,
        2 => 28,
        _ => return None,
    })
}

/// Days from 1970-01-01 to a proleptic Gregorian date (astronomical year numbering),
/// after Howard Hinnant's `days_from_civil`.
fn days_from_civil(year: i128, month: i128, day: i128) -> Option<i128> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year.checked_div_euclid(400)?;
    let year_of_era = year.checked_rem_euclid(400)?;
    let month_from_march = if month > 2 {
        month.checked_sub(3)?
    } else {
        month.checked_add(9)?
    };
    let day_of_year = month_from_march
        .checked_mul(153)?
        .checked_add(2)?
        .checked_div(5)?
        .checked_add(day)?
        .checked_sub(1)?;
    let day_of_era = year_of_era
        .checked_mul(365)?
        .checked_add(year_of_era.checked_div(4)?)?
        .checked_sub(year_of_era.checked_div(100)?)?
        .checked_add(day_of_year)?;
    era.checked_mul(146_097)?
        .checked_add(day_of_era)?
        .checked_sub(719_468)
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests {
    use super::*;
    use chrono::NaiveDate;
    use proptest::prelude::*;

    use crate::value::{canonical_decimal, days_from_date};

    // ---- Expected values, computed with chrono (independent of the parser here) ----

    /// `Value::Date` of a proleptic Gregorian date, astronomical year (44 BC is -43).
    fn date(y: i32, m: u32, d: u32) -> Value {
        let day = NaiveDate::from_ymd_opt(y, m, d).expect("a valid date");
        Value::Date(days_from_date(day).expect("within i32 days"))
    }

    /// `Value::Timestamp` of a UTC (or wall) time, astronomical year.
    fn ts(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> Value {
        let t = NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_micro_opt(h, mi, s, us))
            .expect("a valid timestamp");
        Value::Timestamp(t.and_utc().timestamp_micros())
    }

    fn f4(x: f32) -> Value {
        Value::Float(f64::from(x))
    }

    fn unsupported(type_name: &str, text: &str) -> Value {
        Value::Unsupported {
            type_name: type_name.into(),
            text: text.into(),
        }
    }

    /// Equality that tells -0.0 from 0.0 and compares NaNs by their bits.
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
            _ => a == b,
        }
    }

    /// `numeric(p,s)`'s modifier.
    fn numeric_typmod(p: i32, s: i32) -> i32 {
        ((p << 16) | (s & 0x7ff)) + 4
    }

    const HUNDRED_DIGITS: &str = "1234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890";
    const BIG_DECIMAL: &str = "-98765432109876543210987654321098765432109876543210987654321098765432109876543210987654321098765432.109876543210987654321098765432100";
    /// i64::MAX µs after 1970 is 294247-01-10 04:00:54.775807 (and means `infinity`).
    const LAST_TIMESTAMP_US: i64 = i64::MAX - 1;
    /// PostgreSQL's last date, 5874897-12-31: DATE_END_JULIAN (2147483494) - UNIX_EPOCH_JDATE
    /// (2440588) - 1. Beyond chrono's range, so written out.
    const LAST_DATE_DAYS: i32 = 2_145_042_905;

    #[rustfmt::skip]
    fn valid_cases() -> Vec<(u32, i32, &'static str, Value)> {
        let long_text: &'static str = Box::leak(format!("{HUNDRED_DIGITS}.5").into_boxed_str());
        vec![
            // Integers, at the limits of each type.
            (INT2, -1, "-32768", Value::Int(-32768)),
            (INT2, -1, "32767", Value::Int(32767)),
            (INT2, -1, "0", Value::Int(0)),
            (INT4, -1, "-2147483648", Value::Int(i64::from(i32::MIN))),
            (INT4, -1, "2147483647", Value::Int(i64::from(i32::MAX))),
            (INT4, -1, "-1", Value::Int(-1)),
            (INT8, -1, "-9223372036854775808", Value::Int(i64::MIN)),
            (INT8, -1, "9223372036854775807", Value::Int(i64::MAX)),
            // Numeric: the text exactly, scale and specials included.
            (NUMERIC, -1, "NaN", Value::Decimal("NaN".into())),
            (NUMERIC, -1, "Infinity", Value::Decimal("Infinity".into())),
            (NUMERIC, -1, "-Infinity", Value::Decimal("-Infinity".into())),
            (NUMERIC, -1, "0.000001", Value::Decimal("0.000001".into())),
            (NUMERIC, -1, "0", Value::Decimal("0".into())),
            (NUMERIC, -1, "-0.5", Value::Decimal("-0.5".into())),
            (NUMERIC, numeric_typmod(12, 2), "1.50", Value::Decimal("1.50".into())),
            (NUMERIC, numeric_typmod(5, -2), "12300", Value::Decimal("12300".into())),
            (NUMERIC, -1, HUNDRED_DIGITS, Value::Decimal(HUNDRED_DIGITS.into())),
            (NUMERIC, -1, long_text, Value::Decimal(long_text.into())),
            (NUMERIC, -1, BIG_DECIMAL, Value::Decimal(BIG_DECIMAL.into())),
            // real: parsed as f32, widened.
            (FLOAT4, -1, "NaN", Value::Float(f64::NAN)),
            (FLOAT4, -1, "Infinity", Value::Float(f64::INFINITY)),
            (FLOAT4, -1, "-Infinity", Value::Float(f64::NEG_INFINITY)),
            (FLOAT4, -1, "-0", Value::Float(-0.0)),
            (FLOAT4, -1, "0.1", f4(0.1)),
            (FLOAT4, -1, "0.100000001", f4(0.1)), // extra_float_digits = 3
            (FLOAT4, -1, "1e-45", f4(f32::from_bits(1))),
            (FLOAT4, -1, "1.1754942e-38", f4(f32::from_bits(0x007f_ffff))),
            (FLOAT4, -1, "1.1754944e-38", f4(f32::MIN_POSITIVE)),
            (FLOAT4, -1, "3.4028235e+38", f4(f32::MAX)),
            (FLOAT4, -1, "-3.4028235e+38", f4(f32::MIN)),
            (FLOAT4, -1, "16777217", f4(16_777_216.0)),
            // double precision.
            (FLOAT8, -1, "NaN", Value::Float(f64::NAN)),
            (FLOAT8, -1, "Infinity", Value::Float(f64::INFINITY)),
            (FLOAT8, -1, "-Infinity", Value::Float(f64::NEG_INFINITY)),
            (FLOAT8, -1, "-0", Value::Float(-0.0)),
            (FLOAT8, -1, "0", Value::Float(0.0)),
            (FLOAT8, -1, "0.1", Value::Float(0.1)),
            (FLOAT8, -1, "0.10000000000000001", Value::Float(0.1)),
            (FLOAT8, -1, "1e+308", Value::Float(1e308)),
            (FLOAT8, -1, "1.7976931348623157e+308", Value::Float(f64::MAX)),
            (FLOAT8, -1, "-1.7976931348623157e+308", Value::Float(f64::MIN)),
            (FLOAT8, -1, "5e-324", Value::Float(f64::from_bits(1))),
            (FLOAT8, -1, "2.2250738585072014e-308", Value::Float(f64::MIN_POSITIVE)),
            (FLOAT8, -1, "2.225073858507201e-308", Value::Float(f64::from_bits(0x000f_ffff_ffff_ffff))),
            (FLOAT8, -1, "1.0000000000000002", Value::Float(1.0 + f64::EPSILON)),
            (FLOAT8, -1, "1.2345678901234568e+17", Value::Float(123_456_789_012_345_680.0)),
            // Text types, verbatim.
            (TEXT, -1, "", Value::Text(String::new())),
            (TEXT, -1, "héllo wörld 🌍 中文", Value::Text("héllo wörld 🌍 中文".into())),
            (TEXT, -1, "tab\tnew\nline \\ 'quote'", Value::Text("tab\tnew\nline \\ 'quote'".into())),
            (VARCHAR, 24, "abc", Value::Text("abc".into())),
            (VARCHAR, -1, " x ", Value::Text(" x ".into())),
            (BPCHAR, 9, "ab   ", Value::Text("ab   ".into())),
            (BPCHAR, 9, "     ", Value::Text("     ".into())),
            (BPCHAR, -1, "x  ", Value::Text("x  ".into())),
            (NAME, -1, "pg_catalog", Value::Text("pg_catalog".into())),
            (BOOL, -1, "t", Value::Bool(true)),
            (BOOL, -1, "f", Value::Bool(false)),
            // Dates, BC and infinite included.
            (DATE, -1, "1970-01-01", Value::Date(0)),
            (DATE, -1, "1969-12-31", Value::Date(-1)),
            (DATE, -1, "2000-01-01", Value::Date(10_957)),
            (DATE, -1, "2000-02-29", date(2000, 2, 29)),
            (DATE, -1, "1900-02-28", date(1900, 2, 28)),
            (DATE, -1, "0001-01-01", date(1, 1, 1)),
            (DATE, -1, "0001-12-31 BC", date(0, 12, 31)),
            (DATE, -1, "0001-02-29 BC", date(0, 2, 29)), // 1 BC is a leap year
            (DATE, -1, "0044-03-15 BC", date(-43, 3, 15)),
            (DATE, -1, "4713-01-01 BC", date(-4712, 1, 1)),
            (DATE, -1, "4713-11-24 BC", date(-4712, 11, 24)), // PostgreSQL's first date
            (DATE, -1, "262142-12-31", date(262_142, 12, 31)),
            (DATE, -1, "5874897-12-31", Value::Date(LAST_DATE_DAYS)),
            (DATE, -1, "infinity", Value::Date(i32::MAX)),
            (DATE, -1, "-infinity", Value::Date(i32::MIN)),
            // Timestamps (wall time as UTC).
            (TIMESTAMP, -1, "1970-01-01 00:00:00", Value::Timestamp(0)),
            (TIMESTAMP, -1, "1970-01-01 00:00:00.000001", Value::Timestamp(1)),
            (TIMESTAMP, -1, "1969-12-31 23:59:59.999999", Value::Timestamp(-1)),
            (TIMESTAMP, -1, "2000-01-01 00:00:00", Value::Timestamp(946_684_800_000_000)),
            (TIMESTAMP, -1, "2024-02-29 12:34:56.5", ts(2024, 2, 29, 12, 34, 56, 500_000)),
            (TIMESTAMP, -1, "2024-02-29 12:34:56.05", ts(2024, 2, 29, 12, 34, 56, 50_000)),
            (TIMESTAMP, -1, "1999-12-31 23:59:59.999999", ts(1999, 12, 31, 23, 59, 59, 999_999)),
            (TIMESTAMP, -1, "4713-01-01 00:00:00 BC", ts(-4712, 1, 1, 0, 0, 0, 0)),
            (TIMESTAMP, -1, "4713-11-24 00:00:00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
            (TIMESTAMP, -1, "0044-03-15 12:30:00.25 BC", ts(-43, 3, 15, 12, 30, 0, 250_000)),
            (TIMESTAMP, -1, "262142-12-31 23:59:59.999999", ts(262_142, 12, 31, 23, 59, 59, 999_999)),
            (TIMESTAMP, 3, "294247-01-10 04:00:54.775806", Value::Timestamp(LAST_TIMESTAMP_US)),
            (TIMESTAMP, -1, "infinity", Value::Timestamp(i64::MAX)),
            (TIMESTAMP, -1, "-infinity", Value::Timestamp(i64::MIN)),
            // Timestamps with time zone: the instant, whatever the offset.
            (TIMESTAMPTZ, -1, "1970-01-01 00:00:00+00", Value::Timestamp(0)),
            (TIMESTAMPTZ, -1, "1969-12-31 19:00:00-05", Value::Timestamp(0)),
            (TIMESTAMPTZ, -1, "2024-05-01 12:00:00+05:30", ts(2024, 5, 1, 6, 30, 0, 0)),
            (TIMESTAMPTZ, -1, "2024-05-01 12:00:00-08", ts(2024, 5, 1, 20, 0, 0, 0)),
            (TIMESTAMPTZ, -1, "2000-01-01 00:00:00.5-03:30", ts(2000, 1, 1, 3, 30, 0, 500_000)),
            (TIMESTAMPTZ, -1, "1900-01-01 00:19:32+00:19:32", ts(1900, 1, 1, 0, 0, 0, 0)),
            (TIMESTAMPTZ, -1, "1900-01-01 00:00:00-00:00:01", ts(1900, 1, 1, 0, 0, 1, 0)),
            (TIMESTAMPTZ, -1, "2000-01-01 00:00:00.000001+14", ts(1999, 12, 31, 10, 0, 0, 1)),
            (TIMESTAMPTZ, -1, "4713-11-24 00:00:00+00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
            (TIMESTAMPTZ, -1, "0044-03-15 12:00:00+01 BC", ts(-43, 3, 15, 11, 0, 0, 0)),
            (TIMESTAMPTZ, -1, "294247-01-10 09:30:54.775806+05:30", Value::Timestamp(LAST_TIMESTAMP_US)),
            (TIMESTAMPTZ, -1, "infinity", Value::Timestamp(i64::MAX)),
            (TIMESTAMPTZ, -1, "-infinity", Value::Timestamp(i64::MIN)),
            // uuid in lower case.
            (UUID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", Value::Text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".into())),
            (UUID, -1, "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", Value::Text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11".into())),
            // JSON verbatim.
            (JSON, -1, " {\"b\": [1, 2.50], \"a\" : \"é\\u0000\"} ", Value::Json(" {\"b\": [1, 2.50], \"a\" : \"é\\u0000\"} ".into())),
            (JSONB, -1, "{\"a\": {\"b\": [1, null, true]}}", Value::Json("{\"a\": {\"b\": [1, null, true]}}".into())),
            (JSONB, -1, "null", Value::Json("null".into())),
            // bytea, hex and escape formats.
            (BYTEA, -1, "\\x", Value::Bytes(vec![])),
            (BYTEA, -1, "\\x00ff00", Value::Bytes(vec![0, 255, 0])),
            (BYTEA, -1, "\\xDEADbeef", Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])),
            (BYTEA, -1, "", Value::Bytes(vec![])),
            (BYTEA, -1, "\\000\\377a\\\\b ~", Value::Bytes(vec![0, 255, b'a', b'\\', b'b', b' ', b'~'])),
            // Everything else: Unsupported, verbatim, with PostgreSQL's type name.
            (INTERVAL, -1, "1 day 02:03:04.5", unsupported("interval", "1 day 02:03:04.5")),
            (1007, -1, "{1,2,NULL}", unsupported("integer[]", "{1,2,NULL}")),
            (1231, numeric_typmod(5, 2), "{1.50}", unsupported("numeric(5,2)[]", "{1.50}")),
            (TIME, 3, "12:34:56.789", unsupported("time(3) without time zone", "12:34:56.789")),
            (869, -1, "10.0.0.1/8", unsupported("inet", "10.0.0.1/8")),
            (CHAR, -1, "x", unsupported("\"char\"", "x")),
            (BIT, 3, "101", unsupported("bit(3)", "101")),
            (16_999, -1, "happy", unsupported("oid 16999", "happy")),
            (16_999, 12, "", unsupported("oid 16999", "")),
        ]
    }

    #[test]
    fn decodes_every_supported_type_and_edge_value() {
        for (oid, typmod, text, want) in valid_cases() {
            let got = decode_text("c", oid, typmod, text.as_bytes())
                .unwrap_or_else(|e| panic!("{oid} {text:?}: {e}"));
            assert!(
                same(&got, &want),
                "{oid} {text:?}: got {got:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn numeric_text_is_already_canonical() {
        // PostgreSQL's numeric text is the form `canonical_decimal` produces, so the
        // pgoutput and JSON-lines sources agree on a Decimal's text.
        for (oid, _, text, _) in valid_cases() {
            if oid == NUMERIC {
                assert_eq!(canonical_decimal(text).as_deref(), Some(text), "{text}");
            }
        }
    }

    #[test]
    fn invalid_values_are_errors_naming_column_and_type() {
        use Problem::{Invalid, InvalidUtf8, OutOfRange};
        let invalid = Invalid("");
        let range = OutOfRange("");
        let cases: Vec<(u32, i32, &[u8], Problem)> = vec![
            (INT2, -1, b"32768", range),
            (INT2, -1, b"-32769", range),
            (INT4, -1, b"2147483648", range),
            (INT8, -1, b"9223372036854775808", range),
            (INT8, -1, b"-9223372036854775809", range),
            (INT4, -1, b"", invalid),
            (INT4, -1, b"-", invalid),
            (INT4, -1, b"1.0", invalid),
            (INT4, -1, b" 1", invalid),
            (INT4, -1, b"+1", invalid),
            (BOOL, -1, b"true", invalid),
            (BOOL, -1, b"T", invalid),
            (BOOL, -1, b"", invalid),
            (NUMERIC, -1, b"1e5", invalid),
            (NUMERIC, -1, b"", invalid),
            (NUMERIC, -1, b".5", invalid),
            (NUMERIC, -1, b"1.", invalid),
            (NUMERIC, -1, b"nan", invalid),
            (NUMERIC, -1, b"+1", invalid),
            (NUMERIC, -1, b"--1", invalid),
            (NUMERIC, -1, b"1 000", invalid),
            (FLOAT8, -1, b"inf", invalid),
            (FLOAT8, -1, b"nan", invalid),
            (FLOAT8, -1, b"infinity", invalid),
            (FLOAT8, -1, b"", invalid),
            (FLOAT8, -1, b"Infinity ", invalid),
            (FLOAT8, -1, b"1e309", range),
            (FLOAT4, -1, b"3.5e38", range),
            (DATE, -1, b"2024-02-30", invalid),
            (DATE, -1, b"2023-02-29", invalid),
            (DATE, -1, b"1900-02-29", invalid),
            (DATE, -1, b"0000-01-01", invalid),
            (DATE, -1, b"24-01-01", invalid),
            (DATE, -1, b"2024-1-01", invalid),
            (DATE, -1, b"2024-13-01", invalid),
            (DATE, -1, b"2024-01-01 ", invalid),
            (DATE, -1, b"2024-01-01 AD", invalid),
            (DATE, -1, b"01/02/2024", invalid), // DateStyle SQL
            (DATE, -1, b"Infinity", invalid),
            (DATE, -1, b"9999999-12-31", range),
            (TIMESTAMP, -1, b"2024-01-01 24:00:00", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:60:00", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:00:60", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:00:00.1234567", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:00:00.", invalid),
            (TIMESTAMP, -1, b"2024-01-01T12:00:00", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:00", invalid),
            (TIMESTAMP, -1, b"2024-01-01 12:00:00+00", invalid),
            (TIMESTAMP, -1, b"Mon Jan 01 12:00:00 2024", invalid), // DateStyle Postgres
            (TIMESTAMP, -1, b"294276-12-31 23:59:59.999999", range),
            (TIMESTAMP, -1, b"294247-01-10 04:00:54.775807", range),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00", invalid),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00+5", invalid),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00+05:3", invalid),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00+05:60", invalid),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00Z", invalid),
            (TIMESTAMPTZ, -1, b"2024-01-01 12:00:00 UTC", invalid),
            (TIMESTAMPTZ, -1, b"294276-12-31 23:59:59.999999+00", range),
            (UUID, -1, b"a0eebc999c0b4ef8bb6d6bb9bd380a11", invalid),
            (UUID, -1, b"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", invalid),
            (UUID, -1, b"g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", invalid),
            (BYTEA, -1, b"\\x0", invalid),
            (BYTEA, -1, b"\\xzz", invalid),
            (BYTEA, -1, b"\\", invalid),
            (BYTEA, -1, b"\\400", invalid),
            (BYTEA, -1, b"\\12", invalid),
            (TEXT, -1, b"\xff", InvalidUtf8),
            (JSON, -1, b"\"\xc3\"", InvalidUtf8),
            (16_999, -1, b"\xc3", InvalidUtf8),
        ];
        for (oid, typmod, bytes, kind) in cases {
            let e = decode_text("the_col", oid, typmod, bytes)
                .expect_err(&format!("{oid} {bytes:?} should be an error"));
            assert_eq!(
                std::mem::discriminant(&e.problem),
                std::mem::discriminant(&kind),
                "{oid} {bytes:?}: {e}"
            );
            assert_eq!(e.column, "the_col");
            assert_eq!(e.type_name, type_name(oid, typmod));
            // The message is made of the column, the type and a fixed description only.
            assert_eq!(
                e.to_string(),
                format!("column `the_col` of type {}: {}", e.type_name, e.problem)
            );
        }
    }

    #[test]
    fn error_messages_do_not_contain_the_value() {
        let secret = "2024-01-01 12:00:00 SECRET";
        for (oid, text) in [
            (INT4, secret),
            (NUMERIC, secret),
            (FLOAT8, secret),
            (BOOL, secret),
            (DATE, secret),
            (TIMESTAMP, secret),
            (TIMESTAMPTZ, secret),
            (UUID, secret),
            (BYTEA, "\\x2024SECRET"),
        ] {
            let e = decode_text("c", oid, -1, text.as_bytes()).expect_err("invalid");
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(!shown.contains("SECRET"), "{shown}");
                assert!(!shown.contains("2024"), "{shown}");
            }
        }
    }

    #[test]
    fn tuple_values() {
        let text = TupleValue::Text(b"42".to_vec());
        assert_eq!(
            decode_tuple_value("c", INT4, -1, &text),
            Ok(Some(Value::Int(42)))
        );
        assert_eq!(
            decode_tuple_value("c", INT4, -1, &TupleValue::Null),
            Ok(Some(Value::Null))
        );
        assert_eq!(
            decode_tuple_value("c", TEXT, -1, &TupleValue::UnchangedToast),
            Ok(None)
        );
        let e = decode_tuple_value("c", INT4, -1, &TupleValue::Binary(vec![0, 0, 0, 42]))
            .expect_err("binary is refused");
        assert_eq!(e.problem, Problem::Binary);
        assert!(e.to_string().contains("binary"), "{e}");
        let column = RelationColumn {
            is_key: true,
            name: "id".into(),
            type_oid: INT8,
            type_modifier: -1,
        };
        assert_eq!(decode_column(&column, &text), Ok(Some(Value::Int(42))));
    }

    #[test]
    fn column_types_of_postgresql_columns() {
        for (oid, typmod, want) in [
            (INT2, -1, Some(ColumnType::SmallInt)),
            (INT4, -1, Some(ColumnType::Integer)),
            (INT8, -1, Some(ColumnType::BigInt)),
            (FLOAT4, -1, Some(ColumnType::Real)),
            (FLOAT8, -1, Some(ColumnType::Double)),
            (NUMERIC, -1, Some(ColumnType::Numeric(None))),
            (
                NUMERIC,
                numeric_typmod(12, 2),
                Some(ColumnType::Numeric(NumericTypmod::new(12, 2))),
            ),
            (TEXT, -1, Some(ColumnType::Text)),
            (VARCHAR, 24, Some(ColumnType::Varchar(Some(20)))),
            (VARCHAR, -1, Some(ColumnType::Varchar(None))),
            (BOOL, -1, Some(ColumnType::Bool)),
            (DATE, -1, Some(ColumnType::Date)),
            (TIMESTAMP, 3, Some(ColumnType::Timestamp)),
            (TIMESTAMPTZ, -1, Some(ColumnType::TimestampTz)),
            (UUID, -1, Some(ColumnType::Uuid)),
            (JSON, -1, Some(ColumnType::Json)),
            (JSONB, -1, Some(ColumnType::Jsonb)),
            (BYTEA, -1, Some(ColumnType::Bytea)),
            (BPCHAR, 9, None),
            (NAME, -1, None),
            (1007, -1, None),
            (INTERVAL, -1, None),
            (16_999, -1, None),
        ] {
            assert_eq!(column_type(oid, typmod), want, "{oid} {typmod}");
        }
    }

    #[test]
    fn type_names_as_format_type_prints_them() {
        const DAY_TO_SECOND: i32 = (1 << 3) | (1 << 10) | (1 << 11) | (1 << 12);
        for (oid, typmod, want) in [
            (NUMERIC, -1, "numeric"),
            (NUMERIC, numeric_typmod(12, 2), "numeric(12,2)"),
            (NUMERIC, numeric_typmod(5, -2), "numeric(5,-2)"),
            (NUMERIC, numeric_typmod(3, 5), "numeric(3,5)"),
            (VARCHAR, 24, "character varying(20)"),
            (VARCHAR, -1, "character varying"),
            (BPCHAR, 9, "character(5)"),
            (BPCHAR, -1, "bpchar"),
            (TIMESTAMP, -1, "timestamp without time zone"),
            (TIMESTAMPTZ, -1, "timestamp with time zone"),
            (TIMESTAMP, 3, "timestamp(3) without time zone"),
            (TIMESTAMPTZ, 0, "timestamp(0) with time zone"),
            (TIMETZ, -1, "time with time zone"),
            (FLOAT8, -1, "double precision"),
            (BOOL, -1, "boolean"),
            (1015, 14, "character varying(10)[]"),
            (1231, numeric_typmod(10, 2), "numeric(10,2)[]"),
            (
                INTERVAL,
                (DAY_TO_SECOND << 16) | 3,
                "interval day to second(3)",
            ),
            (INTERVAL, (0x7fff << 16) | 2, "interval(2)"),
            (
                INTERVAL,
                ((1 << 2 | 1 << 1) << 16) | 0xffff,
                "interval year to month",
            ),
            (BIT, -1, "\"bit\""),
            (VARBIT, 7, "bit varying(7)"),
            (JSON, 5, "json(5)"),
            (123_456, -1, "oid 123456"),
        ] {
            assert_eq!(type_name(oid, typmod), want, "{oid} {typmod}");
        }
    }

    // ---- Properties ---------------------------------------------------------------

    fn known_oids() -> Vec<u32> {
        let mut oids: Vec<u32> = PLAIN_TYPES.iter().map(|(o, _)| *o).collect();
        oids.extend(ARRAY_TYPES.iter().map(|(o, _)| *o));
        oids.extend([
            BPCHAR,
            VARCHAR,
            TIME,
            TIMETZ,
            TIMESTAMP,
            TIMESTAMPTZ,
            INTERVAL,
            BIT,
            VARBIT,
            NUMERIC,
        ]);
        oids
    }

    fn arb_oid() -> impl Strategy<Value = u32> {
        prop_oneof![
            3 => prop::sample::select(known_oids()),
            1 => any::<u32>(),
        ]
    }

    fn arb_typmod() -> impl Strategy<Value = i32> {
        prop_oneof![Just(-1), 0..200_i32, any::<i32>()]
    }

    fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..48),
            "[-0-9:. +BCxa-fA-FNnaIiftyT\\\\]{0,40}".prop_map(String::into_bytes),
            (
                "[0-9]{1,10}-[0-9]{1,3}-[0-9]{1,3}",
                "( [0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}(\\.[0-9]{0,8})?([+-][0-9]{1,3}(:[0-9]{1,3}){0,3})?)?( BC)?",
            )
                .prop_map(|(d, t)| format!("{d}{t}").into_bytes()),
        ]
    }

    /// `YYYY-MM-DD[ BC]` as PostgreSQL prints an astronomical-year date.
    fn pg_date_text(d: NaiveDate) -> (String, &'static str) {
        use chrono::Datelike;
        let y = d.year();
        let (year, era) = if y <= 0 { (1 - y, " BC") } else { (y, "") };
        (format!("{year:04}-{:02}-{:02}", d.month(), d.day()), era)
    }

    /// PostgreSQL's ISO text of a timestamp at `local_us` (microseconds of wall time).
    fn pg_timestamp_text(local_us: i64, offset_s: Option<i32>) -> String {
        use chrono::Timelike;
        let t = chrono::DateTime::from_timestamp_micros(local_us)
            .expect("in chrono's range")
            .naive_utc();
        let (date, era) = pg_date_text(t.date());
        let mut s = format!("{date} {:02}:{:02}:{:02}", t.hour(), t.minute(), t.second());
        let micros = t.nanosecond() / 1000;
        if micros != 0 {
            s.push_str(format!(".{micros:06}").trim_end_matches('0'));
        }
        if let Some(off) = offset_s {
            let sign = if off < 0 { '-' } else { '+' };
            let a = off.unsigned_abs();
            let (h, m, sec) = (a / 3600, a / 60 % 60, a % 60);
            s.push_str(&format!("{sign}{h:02}"));
            if m != 0 || sec != 0 {
                s.push_str(&format!(":{m:02}"));
            }
            if sec != 0 {
                s.push_str(&format!(":{sec:02}"));
            }
        }
        s.push_str(era);
        s
    }

    /// PostgreSQL's first timestamp, 4713-11-24 00:00:00 BC, in µs since 1970.
    const FIRST_TIMESTAMP_US: i64 = -210_866_803_200_000_000;
    /// The last timestamp chrono can print (262142-12-31), in µs since 1970.
    const CHRONO_LAST_US: i64 = 8_210_266_876_799_999_999;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn any_bytes_for_any_type_never_panic(
            oid in arb_oid(),
            typmod in arb_typmod(),
            bytes in arb_bytes(),
        ) {
            let _ = decode_text("c", oid, typmod, &bytes);
            let _ = decode_tuple_value("c", oid, typmod, &TupleValue::Text(bytes.clone()));
            let _ = decode_tuple_value("c", oid, typmod, &TupleValue::Binary(bytes));
            let _ = type_name(oid, typmod);
            let _ = column_type(oid, typmod);
        }

        #[test]
        fn errors_never_contain_the_value(
            oid in prop::sample::select(known_oids()),
            typmod in arb_typmod(),
            tail in "[-0-9a-zA-Z:. +]{0,20}",
        ) {
            let text = format!("SECRET{tail}");
            if let Err(e) = decode_text("c", oid, typmod, text.as_bytes()) {
                prop_assert!(!e.to_string().contains("SECRET"));
                let debug = format!("{e:?}");
                prop_assert!(!debug.contains("SECRET"));
            }
        }

        #[test]
        fn integers_round_trip(i in any::<i64>(), j in any::<i32>(), k in any::<i16>()) {
            let dec = |oid, text: String| decode_text("c", oid, -1, text.as_bytes());
            prop_assert_eq!(dec(INT8, i.to_string()), Ok(Value::Int(i)));
            prop_assert_eq!(dec(INT4, j.to_string()), Ok(Value::Int(i64::from(j))));
            prop_assert_eq!(dec(INT2, k.to_string()), Ok(Value::Int(i64::from(k))));
        }

        #[test]
        fn floats_round_trip_bit_for_bit(bits in any::<u64>(), bits4 in any::<u32>()) {
            let x = f64::from_bits(bits);
            let y = f32::from_bits(bits4);
            if x.is_finite() {
                for text in [format!("{x:e}"), format!("{x}")] {
                    let got = decode_text("c", FLOAT8, -1, text.as_bytes());
                    prop_assert!(matches!(got, Ok(Value::Float(g)) if g.to_bits() == bits), "{}", text);
                }
            }
            if y.is_finite() {
                for text in [format!("{y:e}"), format!("{y}")] {
                    let got = decode_text("c", FLOAT4, -1, text.as_bytes());
                    let want = f64::from(y).to_bits();
                    prop_assert!(matches!(got, Ok(Value::Float(g)) if g.to_bits() == want), "{}", text);
                }
            }
        }

        #[test]
        fn dates_round_trip(days in -2_440_588_i32..=93_000_000) {
            let d = crate::value::date_from_days(days).expect("in chrono's range");
            let (text, era) = pg_date_text(d);
            let text = format!("{text}{era}");
            prop_assert_eq!(decode_text("c", DATE, -1, text.as_bytes()), Ok(Value::Date(days)), "{}", text);
        }

        #[test]
        fn timestamps_round_trip(
            us in FIRST_TIMESTAMP_US..=CHRONO_LAST_US - 16 * 3_600_000_000,
            offset in -15 * 3600..=15 * 3600_i32,
            whole_seconds in any::<bool>(),
        ) {
            let us = if whole_seconds { us - us.rem_euclid(1_000_000) } else { us };
            let plain = pg_timestamp_text(us, None);
            prop_assert_eq!(decode_text("c", TIMESTAMP, -1, plain.as_bytes()), Ok(Value::Timestamp(us)), "{}", plain);
            let local = us + i64::from(offset) * 1_000_000;
            let zoned = pg_timestamp_text(local, Some(offset));
            prop_assert_eq!(decode_text("c", TIMESTAMPTZ, -1, zoned.as_bytes()), Ok(Value::Timestamp(us)), "{}", zoned);
        }
    }

    // ---- Real PostgreSQL ------------------------------------------------------------

    /// One column of the round-trip table and its cases: an SQL literal (quoted by the
    /// test) and the Value it must decode to.
    struct Col {
        name: &'static str,
        sql_type: &'static str,
        cases: Vec<(&'static str, Value)>,
    }

    fn supported_columns() -> Vec<Col> {
        let text = |s: &str| Value::Text(s.into());
        let dec = |s: &str| Value::Decimal(s.into());
        let json = |s: &str| Value::Json(s.into());
        let big: &'static str =
            Box::leak(format!("{HUNDRED_DIGITS}.{HUNDRED_DIGITS}").into_boxed_str());
        vec![
            Col {
                name: "c_int2",
                sql_type: "smallint",
                cases: vec![
                    ("-32768", Value::Int(-32768)),
                    ("32767", Value::Int(32767)),
                    ("0", Value::Int(0)),
                ],
            },
            Col {
                name: "c_int4",
                sql_type: "integer",
                cases: vec![
                    ("-2147483648", Value::Int(i64::from(i32::MIN))),
                    ("2147483647", Value::Int(i64::from(i32::MAX))),
                ],
            },
            Col {
                name: "c_int8",
                sql_type: "bigint",
                cases: vec![
                    ("-9223372036854775808", Value::Int(i64::MIN)),
                    ("9223372036854775807", Value::Int(i64::MAX)),
                ],
            },
            Col {
                name: "c_numeric",
                sql_type: "numeric",
                cases: vec![
                    ("NaN", dec("NaN")),
                    ("Infinity", dec("Infinity")),
                    ("-Infinity", dec("-Infinity")),
                    ("0.000001", dec("0.000001")),
                    (HUNDRED_DIGITS, dec(HUNDRED_DIGITS)),
                    (big, dec(big)),
                    (BIG_DECIMAL, dec(BIG_DECIMAL)),
                    ("-0.00", dec("0.00")),
                    ("1.50", dec("1.50")),
                    ("1e-20", dec("0.00000000000000000001")),
                ],
            },
            Col {
                name: "c_numeric_ps",
                sql_type: "numeric(12,2)",
                cases: vec![
                    ("1.5", dec("1.50")),
                    ("-9999999999.99", dec("-9999999999.99")),
                    ("0", dec("0.00")),
                ],
            },
            Col {
                name: "c_real",
                sql_type: "real",
                cases: vec![
                    ("NaN", Value::Float(f64::NAN)),
                    ("Infinity", Value::Float(f64::INFINITY)),
                    ("-Infinity", Value::Float(f64::NEG_INFINITY)),
                    ("-0", Value::Float(-0.0)),
                    ("0.1", f4(0.1)),
                    ("1e-45", f4(f32::from_bits(1))),
                    ("1.1754942e-38", f4(f32::from_bits(0x007f_ffff))),
                    ("3.4028235e38", f4(f32::MAX)),
                    ("16777217", f4(16_777_216.0)),
                    ("1.1754944e-38", f4(f32::MIN_POSITIVE)),
                ],
            },
            Col {
                name: "c_double",
                sql_type: "double precision",
                cases: vec![
                    ("NaN", Value::Float(f64::NAN)),
                    ("Infinity", Value::Float(f64::INFINITY)),
                    ("-Infinity", Value::Float(f64::NEG_INFINITY)),
                    ("-0", Value::Float(-0.0)),
                    ("0.1", Value::Float(0.1)),
                    ("5e-324", Value::Float(f64::from_bits(1))),
                    ("1e308", Value::Float(1e308)),
                    ("1.7976931348623157e308", Value::Float(f64::MAX)),
                    (
                        "2.225073858507201e-308",
                        Value::Float(f64::from_bits(0x000f_ffff_ffff_ffff)),
                    ),
                    ("1.0000000000000002", Value::Float(1.0 + f64::EPSILON)),
                    (
                        "-123456789012345680",
                        Value::Float(-123_456_789_012_345_680.0),
                    ),
                ],
            },
            Col {
                name: "c_text",
                sql_type: "text",
                cases: vec![
                    ("", text("")),
                    ("héllo wörld 🌍 中文", text("héllo wörld 🌍 中文")),
                    (
                        "tab\tnew\nline \\ 'quote' \"dq\"",
                        text("tab\tnew\nline \\ 'quote' \"dq\""),
                    ),
                    ("  padded  ", text("  padded  ")),
                    ("\\x00", text("\\x00")),
                ],
            },
            Col {
                name: "c_varchar",
                sql_type: "varchar(20)",
                cases: vec![
                    ("abc", text("abc")),
                    ("", text("")),
                    ("ünïcödé", text("ünïcödé")),
                ],
            },
            Col {
                name: "c_bpchar",
                sql_type: "char(5)",
                cases: vec![
                    ("ab", text("ab   ")),
                    ("", text("     ")),
                    ("é", text("é    ")),
                    ("abcde", text("abcde")),
                ],
            },
            Col {
                name: "c_bpchar_free",
                sql_type: "bpchar",
                cases: vec![("x  ", text("x  ")), ("", text(""))],
            },
            Col {
                name: "c_name",
                sql_type: "name",
                cases: vec![("pg_catalog", text("pg_catalog")), ("ünï", text("ünï"))],
            },
            Col {
                name: "c_bool",
                sql_type: "boolean",
                cases: vec![("true", Value::Bool(true)), ("false", Value::Bool(false))],
            },
            Col {
                name: "c_date",
                sql_type: "date",
                cases: vec![
                    ("infinity", Value::Date(i32::MAX)),
                    ("-infinity", Value::Date(i32::MIN)),
                    ("0044-03-15 BC", date(-43, 3, 15)),
                    ("4713-11-24 BC", date(-4712, 11, 24)),
                    ("4713-01-01 BC", date(-4712, 1, 1)),
                    ("5874897-12-31", Value::Date(LAST_DATE_DAYS)),
                    ("1970-01-01", Value::Date(0)),
                    ("2000-02-29", date(2000, 2, 29)),
                    ("0001-01-01", date(1, 1, 1)),
                    ("0001-12-31 BC", date(0, 12, 31)),
                ],
            },
            Col {
                name: "c_ts",
                sql_type: "timestamp",
                cases: vec![
                    ("infinity", Value::Timestamp(i64::MAX)),
                    ("-infinity", Value::Timestamp(i64::MIN)),
                    ("1970-01-01 00:00:00", Value::Timestamp(0)),
                    ("2000-01-01 00:00:00", Value::Timestamp(946_684_800_000_000)),
                    ("4713-01-01 00:00:00 BC", ts(-4712, 1, 1, 0, 0, 0, 0)),
                    (
                        "2024-02-29 12:34:56.5",
                        ts(2024, 2, 29, 12, 34, 56, 500_000),
                    ),
                    ("2000-01-01 00:00:00.000001", ts(2000, 1, 1, 0, 0, 0, 1)),
                    ("1969-12-31 23:59:59.999999", Value::Timestamp(-1)),
                    (
                        "294247-01-10 04:00:54.775806",
                        Value::Timestamp(LAST_TIMESTAMP_US),
                    ),
                    (
                        "0044-03-15 12:30:00.25 BC",
                        ts(-43, 3, 15, 12, 30, 0, 250_000),
                    ),
                    ("4713-11-24 00:00:00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
                ],
            },
            Col {
                name: "c_tstz",
                sql_type: "timestamptz",
                cases: vec![
                    ("infinity", Value::Timestamp(i64::MAX)),
                    ("-infinity", Value::Timestamp(i64::MIN)),
                    ("1970-01-01 00:00:00+00", Value::Timestamp(0)),
                    ("2024-05-01 12:00:00+05:30", ts(2024, 5, 1, 6, 30, 0, 0)),
                    ("2024-05-01 12:00:00-08", ts(2024, 5, 1, 20, 0, 0, 0)),
                    ("1900-01-01 00:00:00+00", ts(1900, 1, 1, 0, 0, 0, 0)),
                    ("4713-11-24 00:00:00+00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
                    ("1970-01-01 00:00:00.5+00", Value::Timestamp(500_000)),
                    (
                        "294247-01-10 04:00:54.775806+00",
                        Value::Timestamp(LAST_TIMESTAMP_US),
                    ),
                    ("0044-03-15 12:00:00+01 BC", ts(-43, 3, 15, 11, 0, 0, 0)),
                    (
                        "2038-01-19 03:14:08.000001+00",
                        ts(2038, 1, 19, 3, 14, 8, 1),
                    ),
                ],
            },
            Col {
                name: "c_uuid",
                sql_type: "uuid",
                cases: vec![
                    (
                        "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                        text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                    ),
                    (
                        "00000000-0000-0000-0000-000000000000",
                        text("00000000-0000-0000-0000-000000000000"),
                    ),
                ],
            },
            Col {
                name: "c_json",
                sql_type: "json",
                cases: vec![
                    (
                        "  {\"b\": [1, 2.50, {\"c\": null}], \"a\" : \"é\\u0000\", \"a\": 1e400}  ",
                        json(
                            "  {\"b\": [1, 2.50, {\"c\": null}], \"a\" : \"é\\u0000\", \"a\": 1e400}  ",
                        ),
                    ),
                    ("[]", json("[]")),
                    ("\"just text\"", json("\"just text\"")),
                ],
            },
            Col {
                name: "c_jsonb",
                sql_type: "jsonb",
                cases: vec![
                    (
                        "{\"b\": [1, 2.50, {\"c\": null}], \"aa\": 1e2, \"a\": {\"nested\": {\"deep\": [true, false, \"é\"]}}}",
                        json(
                            "{\"a\": {\"nested\": {\"deep\": [true, false, \"é\"]}}, \"b\": [1, 2.50, {\"c\": null}], \"aa\": 100}",
                        ),
                    ),
                    ("{}", json("{}")),
                    ("null", json("null")),
                    ("[1,[2,[3,[4]]]]", json("[1, [2, [3, [4]]]]")),
                ],
            },
            Col {
                name: "c_bytea",
                sql_type: "bytea",
                cases: vec![
                    ("\\x", Value::Bytes(vec![])),
                    ("\\x00ff00", Value::Bytes(vec![0, 255, 0])),
                    ("\\x5c7800", Value::Bytes(b"\\x\0".to_vec())),
                    ("\\xdeadbeef", Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])),
                ],
            },
        ]
    }

    /// Columns of types Weir carries as Unsupported: (name, SQL type, literal, text).
    const OTHER_COLUMNS: &[(&str, &str, &str, &str)] = &[
        ("iv", "interval", "1 day 02:03:04.5", "1 day 02:03:04.5"),
        ("ints", "integer[]", "{1,2,NULL}", "{1,2,NULL}"),
        ("nums", "numeric(5,2)[]", "{1.5,NULL}", "{1.50,NULL}"),
        ("t3", "time(3)", "12:34:56.789", "12:34:56.789"),
        ("tz", "timetz", "12:00+05:30", "12:00:00+05:30"),
        ("addr", "inet", "10.0.0.1/8", "10.0.0.1/8"),
        ("feeling", "mood", "happy", "happy"),
        ("pos", "posint", "7", "7"),
        ("ch", "\"char\"", "x", "x"),
        ("b3", "bit(3)", "101", "101"),
        ("r", "int4range", "[1,5)", "[1,5)"),
        ("vcs", "varchar(10)[]", "{a,\"b c\"}", "{a,\"b c\"}"),
    ];

    /// Extra columns whose type names must match `format_type`.
    const TYPMOD_COLUMNS: &[&str] = &[
        "numeric(5,-2)",
        "numeric(3,5)",
        "numeric(1000,0)",
        "varchar(1)",
        "varchar",
        "char",
        "char(10)",
        "bpchar",
        "timestamp(0)",
        "timestamptz(3)",
        "time(0)",
        "timetz(6)",
        "interval year to month",
        "interval(2)",
        "interval day to second(4)",
        "interval minute",
        "interval hour to minute",
        "bit",
        "bit varying",
        "bit varying(7)",
        "char(3)[]",
        "timestamp(3)[]",
        "numeric[]",
        "\"char\"[]",
        "bit(2)[]",
        "interval second(1)[]",
    ];

    fn quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "''"))
    }

    type Decoded = Vec<Result<Option<Value>, TypeError>>;

    /// Peeks the slot and decodes every inserted and updated row:
    /// (table, `I` or `U`, values).
    async fn peek_rows(client: &tokio_postgres::Client) -> Vec<(String, char, Decoded)> {
        use crate::source::pgoutput::{Decoder, PgOutputMessage as M, Relation};
        let rows = client
            .query(
                "SELECT data FROM pg_logical_slot_peek_binary_changes('slot', NULL, NULL, 'proto_version', '1', 'publication_names', 'pub')",
                &[],
            )
            .await
            .expect("peek the slot");
        let mut decoder = Decoder::new();
        let mut relations: std::collections::HashMap<u32, Relation> = Default::default();
        let mut out = vec![];
        for row in rows {
            let data: Vec<u8> = row.get(0);
            let message = decoder.decode(&data).expect("a pgoutput message");
            let (kind, relation_oid, new) = match message {
                M::Relation(r) => {
                    relations.insert(r.oid, r);
                    continue;
                }
                M::Insert(i) => ('I', i.relation_oid, i.new),
                M::Update(u) => ('U', u.relation_oid, u.new),
                _ => continue,
            };
            let relation = &relations[&relation_oid];
            assert_eq!(relation.columns.len(), new.len());
            let values = relation
                .columns
                .iter()
                .zip(&new)
                .map(|(c, v)| decode_column(c, v))
                .collect();
            out.push((relation.name.clone(), kind, values));
        }
        out
    }

    /// The columns of a table as SQL that tells apart everything a Value holds (float
    /// bits and -0, numeric scale, char padding, json text).
    fn comparable(columns: &[Col]) -> String {
        let mut out = vec!["id".to_owned()];
        for c in columns {
            let n = c.name;
            out.push(match c.sql_type {
                "real" => format!("float4send({n})"),
                "double precision" => format!("float8send({n})"),
                t if t.starts_with("numeric") || t == "json" => format!("{n}::text"),
                t if t.starts_with("char") || t == "bpchar" => format!("bpcharsend({n})"),
                _ => n.to_owned(),
            });
        }
        out.join(", ")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn round_trips_through_postgresql() {
        use crate::localpg::{LocalPg, LocalPgOptions};
        use postgres_types::{ToSql, Type};
        use tokio_postgres::binary_copy::BinaryCopyInWriter;

        let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
            .await
            .expect("the start task panicked")
            .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
        let db = "weir_pgtypes";
        let dsn = pg.create_database(db).await.expect("create the database");
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
            .await
            .expect("connect");
        let connection = tokio::spawn(connection);
        let exec = |sql: String| {
            let client = &client;
            async move {
                client
                    .batch_execute(&sql)
                    .await
                    .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
            }
        };

        // ---- Schema.
        let columns = supported_columns();
        let defs: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.sql_type))
            .collect();
        let other_defs: Vec<String> = OTHER_COLUMNS
            .iter()
            .map(|(n, t, _, _)| format!("{n} {t}"))
            .collect();
        let typmod_defs: Vec<String> = TYPMOD_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, t)| format!("m{i} {t}"))
            .collect();
        exec(format!(
            "CREATE TYPE mood AS ENUM ('happy', 'sad');
             CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
             CREATE TABLE a (id integer PRIMARY KEY, {});
             CREATE TABLE b (LIKE a);
             CREATE TABLE other ({});
             CREATE TABLE typmods ({});
             CREATE TABLE beyond (ts timestamp, tstz timestamptz);
             CREATE TABLE toasty (id int PRIMARY KEY, big text, n int);
             ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL;
             CREATE PUBLICATION pub FOR TABLE a, other, beyond, toasty;",
            defs.join(", "),
            other_defs.join(", "),
            typmod_defs.join(", "),
        ))
        .await;

        exec("SELECT pg_create_logical_replication_slot('slot', 'pgoutput')".into()).await;
        // The cluster runs with synchronous_commit off; decoding reads flushed WAL only.
        exec("SET synchronous_commit = on".into()).await;

        // ---- Rows: row i holds case i of each column (NULL past its last case), and
        // one more row is all NULL.
        let row_count = columns.iter().map(|c| c.cases.len()).max().unwrap_or(0) + 1;
        let mut expected: Vec<Vec<Value>> = vec![];
        let mut inserts = vec![];
        for i in 0..row_count {
            let mut literals = vec![i.to_string()];
            let mut values = vec![Value::Int(i as i64)];
            for c in &columns {
                match c.cases.get(i) {
                    Some((literal, value)) => {
                        literals.push(quote(literal));
                        values.push(value.clone());
                    }
                    None => {
                        literals.push("NULL".into());
                        values.push(Value::Null);
                    }
                }
            }
            inserts.push(format!("({})", literals.join(", ")));
            expected.push(values);
        }
        let other_literals: Vec<String> =
            OTHER_COLUMNS.iter().map(|(_, _, l, _)| quote(l)).collect();
        exec(format!(
            "INSERT INTO a VALUES {};
             INSERT INTO other VALUES ({});
             INSERT INTO beyond VALUES ('294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00'),
                                       ('294247-01-10 04:00:54.775807', '294247-01-10 04:00:54.775807+00');
             INSERT INTO toasty VALUES (1, repeat('x', 10000), 1);
             UPDATE toasty SET n = 2 WHERE id = 1;",
            inserts.join(", "),
            other_literals.join(", "),
        ))
        .await;

        let oid_of = |name: &'static str| {
            let client = &client;
            async move {
                let row = client
                    .query_one("SELECT oid FROM pg_type WHERE typname = $1", &[&name])
                    .await
                    .expect("type oid");
                row.get::<_, u32>(0)
            }
        };
        let (mood, posint) = (oid_of("mood").await, oid_of("posint").await);
        let expected_other: Vec<Value> = OTHER_COLUMNS
            .iter()
            .map(|(name, sql_type, _, text)| {
                let type_name = match *name {
                    "feeling" => format!("oid {mood}"),
                    "pos" => format!("oid {posint}"),
                    "t3" => "time(3) without time zone".into(),
                    "tz" => "time with time zone".into(),
                    "vcs" => "character varying(10)[]".into(),
                    _ => sql_type.to_string(),
                };
                Value::Unsupported {
                    type_name,
                    text: text.to_string(),
                }
            })
            .collect();

        // ---- Check that the session settings below make PostgreSQL print the forms
        // this test means to cover.
        let printed = |sql: &'static str| {
            let client = &client;
            async move {
                let row = client.query_one(sql, &[]).await.expect(sql);
                row.get::<_, String>(0)
            }
        };
        exec("SET TimeZone = 'Europe/Amsterdam'".into()).await;
        assert_eq!(
            printed("SELECT '1900-01-01 00:00:00+00'::timestamptz::text").await,
            "1900-01-01 00:19:32+00:19:32"
        );
        exec("SET TimeZone = 'UTC'".into()).await;
        assert_eq!(
            printed("SELECT '0044-03-15 12:00:00+01 BC'::timestamptz::text").await,
            "0044-03-15 11:00:00+00 BC"
        );

        // ---- Decode under several session settings: the Values must not change.
        let settings = [
            "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 1; SET bytea_output = 'hex'",
            "SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'ISO, DMY'; SET extra_float_digits = 3; SET bytea_output = 'escape'",
            "SET TimeZone = 'America/St_Johns'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 2",
            "SET TimeZone = 'Europe/Amsterdam'; SET extra_float_digits = 1; SET bytea_output = 'escape'",
        ];
        let mut decoded_a: Vec<Vec<Value>> = vec![];
        for setting in settings {
            exec(setting.into()).await;
            let rows = peek_rows(&client).await;
            let of = |table: &str, kind: char| -> Vec<&Decoded> {
                rows.iter()
                    .filter(|(t, k, _)| t == table && *k == kind)
                    .map(|(_, _, v)| v)
                    .collect()
            };
            // Table a: every value as expected.
            let a_rows = of("a", 'I');
            assert_eq!(a_rows.len(), expected.len(), "{setting}");
            let mut values_a = vec![];
            for (got, want) in a_rows.iter().zip(&expected) {
                let got: Vec<Value> = got
                    .iter()
                    .map(|v| {
                        v.clone()
                            .unwrap_or_else(|e| panic!("{setting}: {e}"))
                            .expect("no TOAST placeholder in an insert")
                    })
                    .collect();
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    let name = if i == 0 { "id" } else { columns[i - 1].name };
                    assert!(same(g, w), "{setting}: {name}: got {g:?}, want {w:?}");
                }
                values_a.push(got);
            }
            if decoded_a.is_empty() {
                decoded_a = values_a;
            }
            // Unsupported types: verbatim text and PostgreSQL's type name.
            let other_rows = of("other", 'I');
            assert_eq!(other_rows.len(), 1);
            let got: Vec<Value> = other_rows[0]
                .iter()
                .map(|v| v.clone().expect("decodes").expect("a value"))
                .collect();
            assert_eq!(got, expected_other, "{setting}");
            // Timestamps past what Value::Timestamp holds: errors naming the column.
            let beyond = of("beyond", 'I');
            assert_eq!(beyond.len(), 2);
            for row in beyond {
                for (v, (column, ty)) in row.iter().zip([
                    ("ts", "timestamp without time zone"),
                    ("tstz", "timestamp with time zone"),
                ]) {
                    let e = v.clone().expect_err("out of range");
                    assert_eq!((e.column.as_str(), e.type_name.as_str()), (column, ty));
                    assert!(matches!(e.problem, Problem::OutOfRange(_)), "{e}");
                    assert!(!e.to_string().contains("294276"), "{e}");
                }
            }
            // An unchanged TOASTed value is not sent: Ok(None).
            assert_eq!(
                of("toasty", 'I'),
                [&vec![
                    Ok(Some(Value::Int(1))),
                    Ok(Some(Value::Text("x".repeat(10_000)))),
                    Ok(Some(Value::Int(1)))
                ]]
            );
            assert_eq!(
                of("toasty", 'U'),
                [&vec![
                    Ok(Some(Value::Int(1))),
                    Ok(None),
                    Ok(Some(Value::Int(2)))
                ]]
            );
        }
        exec("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 1".into())
            .await;

        // ---- Type names: as format_type prints them, for every column and known OID.
        let attributes = client
            .query(
                "SELECT attname::text, atttypid, atttypmod, format_type(atttypid, atttypmod)
                 FROM pg_attribute
                 WHERE attrelid IN ('a'::regclass, 'other'::regclass, 'typmods'::regclass, 'beyond'::regclass)
                   AND attnum > 0 AND NOT attisdropped",
                &[],
            )
            .await
            .expect("read the columns");
        assert!(attributes.len() > 60);
        for row in &attributes {
            let (name, oid, typmod, pg): (String, u32, i32, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            let want = if oid == mood || oid == posint {
                format!("oid {oid}")
            } else {
                pg
            };
            assert_eq!(type_name(oid, typmod), want, "column {name}");
        }
        let oids = known_oids();
        let catalog = client
            .query(
                "SELECT oid, format_type(oid, -1) FROM pg_type WHERE oid = ANY($1::oid[])",
                &[&oids],
            )
            .await
            .expect("read pg_type");
        assert_eq!(
            catalog.len(),
            oids.len(),
            "an OID of the tables is not in pg_type"
        );
        for row in &catalog {
            let (oid, pg): (u32, String) = (row.get(0), row.get(1));
            assert_eq!(type_name(oid, -1), pg, "oid {oid}");
        }

        // ---- Losslessness: write the decoded Values into b with binary COPY, then the
        // tables must be equal, bit for bit where it matters.
        let types: Vec<Type> = std::iter::once(Type::INT4)
            .chain(columns.iter().map(|c| {
                let row = &attributes
                    .iter()
                    .find(|r| r.get::<_, String>(0) == c.name)
                    .expect("the column");
                Type::from_oid(row.get(1)).expect("a built-in type")
            }))
            .collect();
        let names: Vec<&str> = std::iter::once("id")
            .chain(columns.iter().map(|c| c.name))
            .collect();
        let sink = client
            .copy_in(&format!(
                "COPY b ({}) FROM STDIN (FORMAT binary)",
                names.join(", ")
            ))
            .await
            .expect("start COPY");
        let writer = BinaryCopyInWriter::new(sink, &types);
        let mut writer = std::pin::pin!(writer);
        for row in &decoded_a {
            let refs: Vec<&(dyn ToSql + Sync)> =
                row.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            writer
                .as_mut()
                .write(&refs)
                .await
                .unwrap_or_else(|e| panic!("COPY row {:?}: {e:?}", row[0]));
        }
        let copied = writer.finish().await.expect("finish COPY");
        assert_eq!(copied, expected.len() as u64);
        let cols = comparable(&columns);
        for (x, y) in [("a", "b"), ("b", "a")] {
            let sql = format!(
                "SELECT count(*) FROM (SELECT {cols} FROM {x} EXCEPT ALL SELECT {cols} FROM {y}) d"
            );
            let differing: i64 = client.query_one(&sql, &[]).await.expect(&sql).get(0);
            assert_eq!(differing, 0, "rows of {x} not in {y}");
        }
        // The comparison does see a difference (here: -0 against 0).
        exec("UPDATE b SET c_double = 0 WHERE c_double::text = '-0'".into()).await;
        let sql = format!(
            "SELECT count(*) FROM (SELECT {cols} FROM a EXCEPT ALL SELECT {cols} FROM b) d"
        );
        let differing: i64 = client.query_one(&sql, &[]).await.expect(&sql).get(0);
        assert_eq!(differing, 1);

        drop(client);
        connection
            .await
            .expect("the connection task panicked")
            .expect("the connection ended cleanly");
    }
}
