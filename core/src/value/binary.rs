//! PostgreSQL's binary format of values: what the writer's COPY sends, and a value as a
//! statement parameter ([`ToSql`]).

use postgres_types::{IsNull, ToSql, Type, to_sql_checked};

use super::text::{ParsedDecimal, parse_uuid};
use super::{MICROS_PER_DAY, PG_EPOCH_DAYS, PG_EPOCH_MICROS, Value};

/// Encodes decimal text in PostgreSQL's binary `numeric` format.
pub fn encode_numeric(text: &str, out: &mut Vec<u8>) -> Option<()> {
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
    match plain_decimal(text) {
        Some((negative, int, frac)) => write_numeric(negative, int, frac, out),
        None => {
            let p = ParsedDecimal::parse(text)?;
            write_numeric(p.negative, &p.int_digits, &p.frac_digits, out)
        }
    }
}

/// The sign, integer digits (leading zeros trimmed) and fraction digits of a decimal
/// written without an exponent (`-12.340`, `.5`, `7.`): the form every staged decimal
/// has, read without allocating. `None`: another form, for [`ParsedDecimal`].
fn plain_decimal(text: &str) -> Option<(bool, &str, &str)> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    Some((negative, int.trim_start_matches('0'), frac))
}

/// Writes PostgreSQL's binary numeric of `int`.`frac` (ASCII digits): base-10000 digit
/// groups aligned on the decimal point, leading and trailing zero groups left out.
pub(super) fn write_numeric(
    negative: bool,
    int: &str,
    frac: &str,
    out: &mut Vec<u8>,
) -> Option<()> {
    const NUMERIC_POS: u16 = 0x0000;
    const NUMERIC_NEG: u16 = 0x4000;
    let dscale = u16::try_from(frac.len()).ok()?;
    let (int, frac) = (int.as_bytes(), frac.as_bytes());
    // The digits as if the integer part were padded to a multiple of 4 on the left and
    // the fraction on the right.
    let int_pad = (4 - int.len() % 4) % 4;
    let int_end = int_pad + int.len();
    let frac_end = int_end + frac.len();
    let digit = |i: usize| -> u16 {
        let d = if i < int_pad {
            b'0'
        } else if i < int_end {
            int[i - int_pad]
        } else if i < frac_end {
            frac[i - int_end]
        } else {
            b'0'
        };
        u16::from(d - b'0')
    };
    let group = |g: usize| (0..4).fold(0u16, |acc, k| acc * 10 + digit(g * 4 + k));
    let groups = frac_end.div_ceil(4);
    let int_groups = int_end / 4;
    let nonzero = |g: &usize| group(*g) != 0;
    let (first, ndigits) = match (0..groups).find(nonzero) {
        Some(first) => {
            let last = (first..groups).rev().find(nonzero).unwrap_or(first);
            (first, last - first + 1)
        }
        None => (0, 0),
    };
    // Computed wide, narrowed once: the weight of the largest numerics is near i16's end.
    let weight = if ndigits == 0 {
        0
    } else {
        i64::try_from(int_groups).ok()? - 1 - i64::try_from(first).ok()?
    };
    let sign = if ndigits > 0 && negative {
        NUMERIC_NEG
    } else {
        NUMERIC_POS
    };
    out.extend_from_slice(&u16::try_from(ndigits).ok()?.to_be_bytes());
    out.extend_from_slice(&i16::try_from(weight).ok()?.to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&dscale.to_be_bytes());
    for g in first..first + ndigits {
        out.extend_from_slice(&group(g).to_be_bytes());
    }
    Some(())
}

/// Why a value cannot be written into a target column.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {value_kind} into a column of type {pg_type}")]
pub struct EncodeError {
    pub value_kind: &'static str,
    pub pg_type: String,
}

impl Value {
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
