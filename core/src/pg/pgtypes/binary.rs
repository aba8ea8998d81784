//! PostgreSQL binary-format column values (each type's `send` function, what pgoutput
//! sends with its `binary` option), turned into the same [`Value`]s as their text
//! ([`super::decode_text`]) for every type Weir models: a value decodes to the same
//! `Value` whichever format it came in. Types Weir does not model (arrays, enums,
//! domains, `interval`, …) have no binary decoding here: their text is kept verbatim,
//! so a stream whose tables hold any of them is read as text ([`reads_binary`]).

use super::{
    BOOL, BPCHAR, BYTEA, DATE, FLOAT4, FLOAT8, INT2, INT4, INT8, JSON, JSONB, NAME, NUMERIC,
    Problem, TEXT, TIMESTAMP, TIMESTAMPTZ, UUID, VARCHAR,
};
use crate::value::Value;

/// The types whose binary format [`decode_binary`] reads.
pub const BINARY_TYPES: [u32; 18] = [
    BOOL,
    INT2,
    INT4,
    INT8,
    NUMERIC,
    FLOAT4,
    FLOAT8,
    TEXT,
    VARCHAR,
    BPCHAR,
    NAME,
    DATE,
    TIMESTAMP,
    TIMESTAMPTZ,
    UUID,
    JSON,
    JSONB,
    BYTEA,
];

/// Whether values of type `type_oid` can be read in binary format.
pub fn reads_binary(type_oid: u32) -> bool {
    BINARY_TYPES.contains(&type_oid)
}

/// Days from 2000-01-01 (PostgreSQL's epoch) back to 1970-01-01.
const EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 2000-01-01 back to 1970-01-01.
const EPOCH_MICROS: i64 = 946_684_800_000_000;

/// Decodes a binary-format value of one of the [`BINARY_TYPES`].
pub(super) fn decode_binary(type_oid: u32, bytes: &[u8]) -> Result<Value, Problem> {
    let text = |bytes: &[u8]| {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| Problem::InvalidUtf8)
    };
    Ok(match type_oid {
        BOOL => match bytes {
            [0] => Value::Bool(false),
            [1] => Value::Bool(true),
            _ => return Err(Problem::Invalid("a binary boolean: one byte, 0 or 1")),
        },
        INT2 => Value::Int(i64::from(i16::from_be_bytes(fixed(bytes, "2 bytes")?))),
        INT4 => Value::Int(i64::from(i32::from_be_bytes(fixed(bytes, "4 bytes")?))),
        INT8 => Value::Int(i64::from_be_bytes(fixed(bytes, "8 bytes")?)),
        FLOAT4 => Value::Float(f64::from(f32::from_be_bytes(fixed(bytes, "4 bytes")?))),
        FLOAT8 => Value::Float(f64::from_be_bytes(fixed(bytes, "8 bytes")?)),
        NUMERIC => Value::Decimal(numeric_text(bytes)?),
        TEXT | VARCHAR | BPCHAR | NAME => Value::Text(text(bytes)?),
        JSON => Value::Json(text(bytes)?),
        JSONB => match bytes.split_first() {
            Some((1, rest)) => Value::Json(text(rest)?),
            _ => return Err(Problem::Invalid("binary jsonb: version 1, then its text")),
        },
        BYTEA => Value::Bytes(bytes.to_vec()),
        UUID => {
            let b: [u8; 16] = fixed(bytes, "16 bytes")?;
            let hex = hex::encode(b);
            let part = |from: usize, to: usize| hex.get(from..to).unwrap_or_default();
            Value::Text(format!(
                "{}-{}-{}-{}-{}",
                part(0, 8),
                part(8, 12),
                part(12, 16),
                part(16, 20),
                part(20, 32)
            ))
        }
        DATE => Value::Date(match i32::from_be_bytes(fixed(bytes, "4 bytes")?) {
            // `infinity` and `-infinity`, as the text form maps them.
            d @ (i32::MAX | i32::MIN) => d,
            d => d
                .checked_add(EPOCH_DAYS)
                .filter(|d| *d != i32::MAX && *d != i32::MIN)
                .ok_or(Problem::OutOfRange("a date beyond what Weir's dates hold"))?,
        }),
        TIMESTAMP | TIMESTAMPTZ => {
            Value::Timestamp(match i64::from_be_bytes(fixed(bytes, "8 bytes")?) {
                t @ (i64::MAX | i64::MIN) => t,
                t => t
                    .checked_add(EPOCH_MICROS)
                    .filter(|t| *t != i64::MAX && *t != i64::MIN)
                    .ok_or(Problem::OutOfRange(
                        "a timestamp past 294247-01-10 04:00:54.775806 UTC, beyond microseconds since 1970 in 64 bits",
                    ))?,
            })
        }
        _ => return Err(Problem::Binary),
    })
}

/// Exactly `N` bytes.
fn fixed<const N: usize>(bytes: &[u8], expected: &'static str) -> Result<[u8; N], Problem> {
    bytes.try_into().map_err(|_| Problem::Invalid(expected))
}

/// `numeric_send`'s format printed as `numeric_out` prints it: digit count, weight (of
/// the first base-10000 digit), sign, display scale, then the base-10000 digits.
fn numeric_text(bytes: &[u8]) -> Result<String, Problem> {
    const BAD: Problem =
        Problem::Invalid("binary numeric: a header of four 16-bit fields and its digits");
    let field = |i: usize| -> Result<u16, Problem> {
        let at = i.checked_mul(2).ok_or(BAD)?;
        let b = bytes.get(at..at.checked_add(2).ok_or(BAD)?).ok_or(BAD)?;
        Ok(u16::from_be_bytes(b.try_into().map_err(|_| BAD)?))
    };
    let ndigits = usize::from(field(0)?);
    let weight = i32::from(i16::from_be_bytes(field(1)?.to_be_bytes()));
    let sign = field(2)?;
    let dscale = usize::from(field(3)?);
    if bytes.len()
        != ndigits
            .checked_add(4)
            .and_then(|n| n.checked_mul(2))
            .ok_or(BAD)?
    {
        return Err(BAD);
    }
    let digit = |i: i32| -> Result<u16, Problem> {
        match usize::try_from(i) {
            Ok(i) if i < ndigits => {
                let d = field(i.checked_add(4).ok_or(BAD)?)?;
                if d < 10_000 { Ok(d) } else { Err(BAD) }
            }
            _ => Ok(0),
        }
    };
    let mut out = String::new();
    match sign {
        0x0000 => {}
        0x4000 => out.push('-'),
        0xC000 => return Ok("NaN".to_owned()),
        0xD000 => return Ok("Infinity".to_owned()),
        0xF000 => return Ok("-Infinity".to_owned()),
        _ => return Err(BAD),
    }
    if weight < 0 {
        out.push('0');
    } else {
        for i in 0..=weight {
            let d = digit(i)?;
            if i == 0 {
                out.push_str(&d.to_string());
            } else {
                out.push_str(&format!("{d:04}"));
            }
        }
    }
    if dscale > 0 {
        out.push('.');
        let mut fraction = String::with_capacity(dscale.saturating_add(4));
        let mut i = weight.checked_add(1).ok_or(BAD)?;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit(i)?));
            i = i.checked_add(1).ok_or(BAD)?;
        }
        fraction.truncate(dscale);
        out.push_str(&fraction);
    }
    Ok(out)
}
