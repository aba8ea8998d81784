//! The exact text of values: decimals (canonical, and fitted to `numeric(p,s)`), dates,
//! timestamps and uuids read from text, and a value printed as PostgreSQL prints it.

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, NaiveDate, NaiveDateTime};

use super::{ColumnType, ConvertError, NumericTypmod, Value};

impl Value {
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
                Some(date) => {
                    write_pg_date(f, date)?;
                    f.write_str(era(date))
                }
                None => write!(f, "date({d})"),
            },
            Value::Timestamp(i64::MAX) => f.write_str("infinity"),
            Value::Timestamp(i64::MIN) => f.write_str("-infinity"),
            Value::Timestamp(us) => match DateTime::from_timestamp_micros(*us) {
                Some(ts) => {
                    let ts = ts.naive_utc();
                    write_pg_date(f, ts.date())?;
                    write!(f, " {}", ts.format("%H:%M:%S%.f"))?;
                    f.write_str(era(ts.date()))
                }
                None => write!(f, "timestamp({us})"),
            },
            Value::Unsupported { text, .. } => f.write_str(text),
        }
    }
}

/// A date as PostgreSQL writes it: a year past 9999 without chrono's `+`, a year
/// before 1 as its year BC (`0044-03-15` of [`era`]'s ` BC`), not astronomical
/// (`-0043`), which PostgreSQL cannot read back.
fn write_pg_date(f: &mut fmt::Formatter<'_>, date: NaiveDate) -> fmt::Result {
    use chrono::Datelike as _;
    let year = if date.year() <= 0 {
        1 - date.year()
    } else {
        date.year()
    };
    write!(f, "{year:04}-{:02}-{:02}", date.month(), date.day())
}

/// ` BC` after a date before year 1, as PostgreSQL writes it.
fn era(date: NaiveDate) -> &'static str {
    use chrono::Datelike as _;
    if date.year() <= 0 { " BC" } else { "" }
}

pub(super) fn parse_special_float(s: &str) -> Option<f64> {
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
    ParsedDecimal::parse(text).map(|parsed| parsed.canonical())
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
    // (Counted without building it: fraction digits past the text's own are zeros.)
    let kept_int = &int[..int.len().saturating_sub(dropped_int)];
    let given = kept_int.iter().chain(frac.iter().take(kept_frac));
    let leading_zeros = given.clone().take_while(|d| **d == b'0').count();
    let significant = if leading_zeros == given.count() {
        0
    } else {
        kept_int.len() + kept_frac - leading_zeros
    };
    if significant > usize::from(typmod.precision) {
        return Err(ConvertError::Precision { typmod });
    }
    let zero = significant == 0;
    let mut out = String::with_capacity(int.len() + kept_frac + 2);
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
pub(super) struct ParsedDecimal<'a> {
    pub(super) negative: bool,
    /// Integer digits without leading zeros (empty for zero).
    pub(super) int_digits: Cow<'a, str>,
    /// Fraction digits, trailing zeros kept.
    pub(super) frac_digits: Cow<'a, str>,
}

impl ParsedDecimal<'_> {
    /// The decimal as PostgreSQL's `numeric` writes it: no `+`, no leading zeros, no
    /// sign on zero, the scale kept.
    pub(super) fn canonical(&self) -> String {
        let mut out = String::with_capacity(self.int_digits.len() + self.frac_digits.len() + 2);
        if self.negative
            && self
                .int_digits
                .bytes()
                .chain(self.frac_digits.bytes())
                .any(|d| d != b'0')
        {
            out.push('-');
        }
        out.push_str(if self.int_digits.is_empty() {
            "0"
        } else {
            &self.int_digits
        });
        if !self.frac_digits.is_empty() {
            out.push('.');
            out.push_str(&self.frac_digits);
        }
        out
    }

    /// Reads decimal text; the digits are borrowed from it unless an exponent moves
    /// the point. An exponent past ±1000 is refused (`numeric(p,s)` holds at most 1000
    /// digits).
    pub(super) fn parse(text: &str) -> Option<ParsedDecimal<'_>> {
        ParsedDecimal::parse_within(text, 1000)
    }

    /// [`Self::parse`] with exponents up to `exponent_max` either way.
    pub(super) fn parse_within(text: &str, exponent_max: u32) -> Option<ParsedDecimal<'_>> {
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
        if exponent == 0 {
            return Some(ParsedDecimal {
                negative,
                int_digits: Cow::Borrowed(int_part.trim_start_matches('0')),
                frac_digits: Cow::Borrowed(frac_part),
            });
        }
        if exponent.unsigned_abs() > exponent_max {
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
            int_digits: Cow::Owned(int_digits.trim_start_matches('0').to_owned()),
            frac_digits: Cow::Owned(frac_digits.to_owned()),
        })
    }
}

pub fn parse_date(s: &str) -> Option<i32> {
    let s = s.trim();
    match s {
        "infinity" => return Some(i32::MAX),
        "-infinity" => return Some(i32::MIN),
        _ => {}
    }
    let date = iso_date(s).or_else(|| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())?;
    days_from_date(date)
}

/// A date written `YYYY-MM-DD` (a four-digit year, two-digit month and day), the form
/// nearly every date arrives in, read without chrono parsing a format string for each
/// value; `None` for any other text, which `%Y-%m-%d` then reads (or refuses).
fn iso_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let number = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let year = i32::try_from(number(&b[0..4])?).ok()?;
    NaiveDate::from_ymd_opt(year, number(&b[5..7])?, number(&b[8..10])?)
}

pub fn days_from_date(date: NaiveDate) -> Option<i32> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    i32::try_from(date.signed_duration_since(epoch).num_days()).ok()
}

pub fn date_from_days(days: i32) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(1970, 1, 1)?.checked_add_signed(chrono::Duration::days(i64::from(days)))
}

/// Parses ISO-8601 / PostgreSQL timestamp text into microseconds since the epoch, as
/// PostgreSQL reads it: for `timestamptz` (`with_zone`) an offset gives the instant,
/// normalised to UTC; for `timestamp` an offset is ignored and the wall time kept
/// (`'2026-03-01T10:15:30+02:00'::timestamp` is 10:15:30). `infinity` / `-infinity`
/// are kept. Text with a non-zero fraction finer than microseconds is refused (`None`;
/// see [`has_sub_micros`]): PostgreSQL would round it, Weir does not guess.
pub fn parse_timestamp(s: &str, with_zone: bool) -> Option<i64> {
    let s = s.trim();
    match s {
        "infinity" => return Some(i64::MAX),
        "-infinity" => return Some(i64::MIN),
        _ => {}
    }
    if has_sub_micros(s) {
        return None;
    }
    let zoned = DateTime::parse_from_rfc3339(s).ok().or_else(|| {
        ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"]
            .into_iter()
            .find_map(|fmt| DateTime::parse_from_str(s, fmt).ok())
    });
    if let Some(ts) = zoned {
        return Some(if with_zone {
            ts.timestamp_micros()
        } else {
            ts.naive_local().and_utc().timestamp_micros()
        });
    }
    // Without an offset the text is wall time; for timestamptz it is read as UTC, the
    // stage's zone.
    let naive = s.strip_suffix('Z').unwrap_or(s);
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(ts) = NaiveDateTime::parse_from_str(naive, fmt) {
            return Some(ts.and_utc().timestamp_micros());
        }
    }
    None
}

/// Whether timestamp text has a fraction of a second finer than microseconds that is
/// not zero (`…:30.1234567`): PostgreSQL would round it to a microsecond, so the value
/// stored would not be the one sent.
pub fn has_sub_micros(s: &str) -> bool {
    let Some(colon) = s.find(':') else {
        return false;
    };
    let Some(dot) = s[colon..].find('.') else {
        return false;
    };
    s[colon + dot + 1..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .skip(6)
        .any(|b| b != b'0')
}

pub(super) fn parse_uuid(s: &str) -> Option<[u8; 16]> {
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
