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
//! as the client encoding. Values in binary format (pgoutput's `binary` option) are read
//! for the types above that Weir models (`binary.rs`), into the same `Value`s.
//!
//! Errors ([`TypeError`]) name the column, its type and what was expected, never the
//! value: values are row data, and errors are logged.

mod binary;

pub use binary::{BINARY_TYPES, reads_binary};

use super::pgoutput::{RelationColumn, TupleValue};
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
    /// The value came in binary format, and its type is not one Weir reads in it.
    #[error(
        "the value is in binary format, which Weir reads only for the types it models: the stream asks for text once it sees such a column"
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
/// A binary-format value of a type Weir does not read in binary is an error
/// ([`Problem::Binary`]).
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
        TupleValue::Binary(bytes) => {
            decode_binary(column, type_oid, type_modifier, bytes).map(Some)
        }
    }
}

/// Decodes one value in binary format (a type's send function; pgoutput's `binary`
/// mode, `COPY ... (FORMAT binary)`). A type Weir does not read in binary
/// ([`reads_binary`]) is an error ([`Problem::Binary`]).
pub fn decode_binary(
    column: &str,
    type_oid: u32,
    type_modifier: i32,
    bytes: &[u8],
) -> Result<Value, TypeError> {
    binary::decode_binary(type_oid, bytes).map_err(|problem| TypeError {
        column: column.to_owned(),
        type_name: type_name(type_oid, type_modifier),
        problem,
    })
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

#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::expect_used)]
pub mod expected;

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests;
