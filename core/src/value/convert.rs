//! Change-feed JSON into values: each accepted form per column type, and the check of a
//! value against its column ([`Value::conform`]) that refuses what PostgreSQL would not
//! store as given.

use super::text::{
    ParsedDecimal, canonical_decimal, fit_decimal, has_sub_micros, parse_date, parse_special_float,
    parse_timestamp, parse_uuid,
};
use super::{
    ColumnType, EpochUnit, MICROS_PER_DAY, NumericTypmod, PG_DATE_MAX_DAYS, PG_DATE_MIN_DAYS,
    PG_TIMESTAMP_MIN_MICROS, Value,
};

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

    /// [`Value::from_json_unit`] of a JSON value given as its text, already read as JSON
    /// (a field of a line's image). The forms nearly every value arrives in (`null`, an
    /// integer, a boolean, and a string without escapes for a text, decimal, date or
    /// timestamp column) are read straight from the text, without building a JSON value
    /// first; any other text is parsed and read by `from_json_unit`. Both read a value
    /// alike: the short way only takes forms whose reading it shares, and leaves every
    /// refusal to the long way, so the errors are the same too.
    pub fn from_json_text(
        ty: ColumnType,
        epoch: Option<EpochUnit>,
        text: &str,
    ) -> Result<Value, ConvertError> {
        // A `json` column keeps a document given inline exactly as written, as
        // PostgreSQL's `json` keeps its input (spacing, duplicate keys, escapes).
        if ty == ColumnType::Json && !text.starts_with('"') && text != "null" {
            return match serde_json::from_str::<serde::de::IgnoredAny>(text) {
                Ok(_) => Value::Json(text.to_owned()).conform(ty),
                Err(_) => Err(ConvertError::Invalid {
                    text: text.to_owned(),
                    expected: "JSON value",
                }),
            };
        }
        match Value::plain_json(ty, text) {
            Some(value) => value.conform(ty),
            None => {
                let json = serde_json::from_str(text).map_err(|_| ConvertError::Invalid {
                    text: text.to_owned(),
                    expected: "JSON value",
                })?;
                Value::from_json_unit(ty, epoch, &json)
            }
        }
    }

    /// The document of a `json` or `jsonb` column given as JSON text `text` (`None`:
    /// `text` is not JSON). A `json` column keeps the text exactly; `jsonb` is stored
    /// normalised, as PostgreSQL normalises it. JSON text the parser cannot read
    /// (nested 128 levels deep or deeper, a lone surrogate escape) is refused: it cannot be
    /// checked whole (PostgreSQL would refuse the partition's COPY for good if it is
    /// broken further on), and is never taken for a string that is not JSON.
    pub fn json_document(ty: ColumnType, text: &str) -> Result<Option<Value>, ConvertError> {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(_) if ty == ColumnType::Json => Ok(Some(Value::Json(text.to_owned()))),
            Ok(mut doc) => {
                jsonb_numbers(&mut doc)?;
                Ok(Some(Value::Json(doc.to_string())))
            }
            Err(e) => {
                let message = e.to_string();
                let unreadable = message.starts_with("recursion limit exceeded")
                    || message.contains("surrogate")
                    || message.starts_with("unexpected end of hex escape")
                    || message.starts_with("invalid unicode code point");
                if unreadable {
                    Err(ConvertError::Invalid {
                        text: text.to_owned(),
                        expected: "JSON Weir can read (nested fewer than 128 levels deep, no lone surrogate escape)",
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// The value of JSON text in one of the plain forms [`Value::from_json_text`] reads
    /// itself, before [`Value::conform`]; `None` for any other text or a value refused.
    fn plain_json(ty: ColumnType, text: &str) -> Option<Value> {
        if text == "null" {
            return Some(Value::Null);
        }
        // A string without escapes: its text is the bytes between the quotes (JSON
        // holds no raw control characters, which were checked when the line was read).
        let plain_string = || {
            text.strip_prefix('"')?
                .strip_suffix('"')
                .filter(|s| !s.contains('\\'))
        };
        match ty {
            ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => {
                let digits = text.strip_prefix('-').unwrap_or(text);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                text.parse().ok().map(Value::Int)
            }
            ColumnType::Bool => match text {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            ColumnType::Text | ColumnType::Varchar(_) => {
                plain_string().map(|s| Value::Text(s.to_owned()))
            }
            ColumnType::Numeric(_) => {
                // A JSON number is kept as written (serde_json's arbitrary precision).
                let decimal = match text.as_bytes().first()? {
                    b'"' => plain_string()?.trim(),
                    b'-' | b'0'..=b'9' => text,
                    _ => return None,
                };
                canonical_decimal(decimal).map(Value::Decimal)
            }
            ColumnType::Date => plain_string().and_then(parse_date).map(Value::Date),
            ColumnType::Timestamp | ColumnType::TimestampTz => plain_string()
                .and_then(|s| parse_timestamp(s, ty == ColumnType::TimestampTz))
                .map(Value::Timestamp),
            _ => None,
        }
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
                // A `real` is read as a 32-bit float from the text itself, as
                // PostgreSQL's `float4in` reads it (`0.1` is the float4 nearest 0.1,
                // not the float8 nearest it narrowed again); a finite text too large for
                // the type is refused, as PostgreSQL refuses it, never made infinite.
                let read = |text: &str| -> Option<f64> {
                    let x = if ty == ColumnType::Real {
                        text.trim().parse::<f32>().ok().map(f64::from)?
                    } else {
                        text.trim().parse::<f64>().ok()?
                    };
                    // A non-zero number too small for the type reads as zero; PostgreSQL
                    // refuses it as out of range, and so does Weir (an infinity).
                    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
                    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
                    Some(if x == 0.0 && nonzero {
                        f64::INFINITY
                    } else {
                        x
                    })
                };
                let (text, expected) = match v {
                    J::Number(n) => (n.to_string(), "number"),
                    J::String(s) => match parse_special_float(s) {
                        Some(x) if !x.is_finite() => return Ok(Value::Float(x)),
                        _ => (s.clone(), "number (or NaN, Infinity, -Infinity)"),
                    },
                    _ => return Err(wrong("a number")),
                };
                match read(&text) {
                    Some(x) if x.is_finite() => Ok(Value::Float(x)),
                    Some(_) => Err(ConvertError::OutOfRange(text)),
                    None => Err(ConvertError::Invalid { text, expected }),
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
                J::String(s) if has_sub_micros(s) => Err(ConvertError::SubMicros),
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
                // A `json` column keeps its text exactly as PostgreSQL's `json` does
                // (spacing, key order, duplicate keys, number spelling); `jsonb` is
                // stored normalised, as PostgreSQL normalises it.
                // A string holding JSON text is that document (Debezium's form); a
                // string that is not JSON text is itself the value, a JSON string.
                J::String(s) => match Value::json_document(ty, s) {
                    Ok(Some(value)) => Ok(value),
                    Ok(None) => Ok(Value::Json(v.to_string())),
                    Err(e) => Err(e),
                },
                other if ty == ColumnType::Jsonb => {
                    let mut doc = other.clone();
                    jsonb_numbers(&mut doc)?;
                    Ok(Value::Json(doc.to_string()))
                }
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
            (ColumnType::Numeric(None), Value::Decimal(d)) => {
                if !numeric_storable(&d) {
                    return Err(numeric_too_long(d));
                }
                Ok(Value::Decimal(d))
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
                // `json` keeps its text, so the escape `\u0000` is six characters to
                // it; `jsonb` refuses the character however it is written.
                let nul = if ty == ColumnType::Json {
                    s.contains('\0')
                } else {
                    json_has_nul(&s)
                };
                if nul {
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
}

impl Value {
    /// Whether PostgreSQL can store the value in a column of its kind: no NUL in text
    /// or JSON, a date or timestamp within PostgreSQL's range. The checks of
    /// [`Value::conform`] that need no column type, for values made elsewhere (a
    /// plugin's output), which would otherwise fail the partition's COPY.
    pub fn check_storable(&self) -> Result<(), ConvertError> {
        match self {
            Value::Decimal(d) if !numeric_storable(d) => Err(numeric_too_long(d.clone())),
            Value::Text(s) if s.contains('\0') => Err(ConvertError::Nul {
                column_type: "text",
            }),
            Value::Json(s) if s.contains('\0') => Err(ConvertError::Nul {
                column_type: "json or jsonb",
            }),
            Value::Date(d)
                if *d != i32::MAX
                    && *d != i32::MIN
                    && !(PG_DATE_MIN_DAYS..=PG_DATE_MAX_DAYS).contains(d) =>
            {
                Err(ConvertError::DateRange("date"))
            }
            Value::Timestamp(us) if *us != i64::MIN && *us < PG_TIMESTAMP_MIN_MICROS => {
                Err(ConvertError::DateRange("timestamp"))
            }
            _ => Ok(()),
        }
    }
}

/// PostgreSQL's `numeric` limits: digits before the point (leading zeros aside) and
/// after it.
const NUMERIC_INT_DIGITS_MAX: usize = 131_072;
const NUMERIC_FRAC_DIGITS_MAX: usize = 16_383;

/// Whether PostgreSQL's `numeric` can hold a decimal's text (`NaN` and the infinities
/// included): a value past its limits would fail every write of its partition.
fn numeric_storable(d: &str) -> bool {
    let digits = d.trim_start_matches(['-', '+']);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    int.trim_start_matches('0').len() <= NUMERIC_INT_DIGITS_MAX
        && frac.len() <= NUMERIC_FRAC_DIGITS_MAX
}

fn numeric_too_long(d: String) -> ConvertError {
    ConvertError::Invalid {
        text: d,
        expected: "numeric PostgreSQL can hold (at most 131072 digits before the point and 16383 after)",
    }
}

/// A `jsonb` document's numbers as PostgreSQL stores them (its `numeric`: `1e2` is
/// `100`, `-0` is `0`, `100e-2` is `1.00`), so that the stage, lineage checksums and
/// `verify` see what the target holds; an exponent past ±1000 is refused, as
/// PostgreSQL refuses it (the partition's COPY would fail for good).
fn jsonb_numbers(doc: &mut serde_json::Value) -> Result<(), ConvertError> {
    match doc {
        serde_json::Value::Number(n) => {
            let text = n.to_string();
            let canonical = jsonb_number(&text).ok_or_else(|| ConvertError::Invalid {
                text: text.clone(),
                expected: "a number jsonb can hold (PostgreSQL's numeric: at most 131072 digits before the point and 16383 after)",
            })?;
            if canonical != text {
                *n = canonical.parse().map_err(|_| ConvertError::Invalid {
                    text,
                    expected: "a number jsonb can hold",
                })?;
            }
            Ok(())
        }
        serde_json::Value::Array(items) => items.iter_mut().try_for_each(jsonb_numbers),
        serde_json::Value::Object(fields) => fields.values_mut().try_for_each(jsonb_numbers),
        _ => Ok(()),
    }
}

/// A JSON number (as serde_json checked it) as PostgreSQL's `numeric` writes it: the
/// exponent applied, leading zeros dropped, the scale kept (`100e-2` is `1.00`), no
/// sign on zero; `None` past `numeric`'s limits (131072 digits before the point, 16383
/// after), which PostgreSQL refuses.
fn jsonb_number(text: &str) -> Option<String> {
    // No exponent further out can give a number within both limits.
    const EXPONENT_MAX: u32 = (NUMERIC_INT_DIGITS_MAX + NUMERIC_FRAC_DIGITS_MAX) as u32;
    let parsed = ParsedDecimal::parse_within(text, EXPONENT_MAX)?;
    (parsed.int_digits.len() <= NUMERIC_INT_DIGITS_MAX
        && parsed.frac_digits.len() <= NUMERIC_FRAC_DIGITS_MAX)
        .then(|| parsed.canonical())
}

/// A date from a number of `unit`s since 1970-01-01: a whole day, or an error.
fn date_of_epoch(n: i64, unit: EpochUnit) -> Result<Value, ConvertError> {
    let days = if unit == EpochUnit::Days {
        n
    } else {
        let us = timestamp_of_epoch(n, unit)?;
        if us == i64::MAX || us == i64::MIN {
            return Ok(Value::Date(if us == i64::MAX {
                i32::MAX
            } else {
                i32::MIN
            }));
        }
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
    // Debezium's `infinity` and `-infinity` (the same number in every unit), as a
    // schema's logical type reads them.
    match n {
        super::debezium::DEBEZIUM_INFINITY if unit != EpochUnit::Days => return Ok(i64::MAX),
        super::debezium::DEBEZIUM_MINUS_INFINITY if unit != EpochUnit::Days => {
            return Ok(i64::MIN);
        }
        _ => {}
    }
    if unit == EpochUnit::Nanos && n % 1_000 != 0 {
        return Err(ConvertError::SubMicros);
    }
    unit.to_micros(n)
        .filter(|us| *us != i64::MAX && *us != i64::MIN)
        .ok_or(ConvertError::DateRange("timestamp"))
}

/// Whether JSON text holds a NUL character, raw or as the escape `\u0000`, which
/// `jsonb` refuses either way (`json`, which keeps its text, only a raw one).
pub fn json_has_nul(text: &str) -> bool {
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
