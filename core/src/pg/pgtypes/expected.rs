//! Expected values for the type decoders' tests, computed with chrono (independent of
//! the parser), and PostgreSQL's edge values: shared by the core's tests and the
//! engine's test against a real server (`test-support` feature).

use chrono::NaiveDate;

use super::*;
use crate::value::{Value, days_from_date};

/// `Value::Date` of a proleptic Gregorian date, astronomical year (44 BC is -43).
pub fn date(y: i32, m: u32, d: u32) -> Value {
    let day = NaiveDate::from_ymd_opt(y, m, d).expect("a valid date");
    Value::Date(days_from_date(day).expect("within i32 days"))
}

/// `Value::Timestamp` of a UTC (or wall) time, astronomical year.
pub fn ts(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32, us: u32) -> Value {
    let t = NaiveDate::from_ymd_opt(y, mo, d)
        .and_then(|d| d.and_hms_micro_opt(h, mi, s, us))
        .expect("a valid timestamp");
    Value::Timestamp(t.and_utc().timestamp_micros())
}

/// `Value::Float` of a `real`.
pub fn f4(x: f32) -> Value {
    Value::Float(f64::from(x))
}

/// Equality that tells -0.0 from 0.0 and compares NaNs by their bits.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// A hundred-digit integer (numeric's text past any float).
pub const HUNDRED_DIGITS: &str = "1234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890";
/// A decimal with more digits than any float on both sides of the point.
pub const BIG_DECIMAL: &str = "-98765432109876543210987654321098765432109876543210987654321098765432109876543210987654321098765432.109876543210987654321098765432100";
/// i64::MAX µs after 1970 is 294247-01-10 04:00:54.775807 (and means `infinity`).
pub const LAST_TIMESTAMP_US: i64 = i64::MAX - 1;
/// PostgreSQL's last date, 5874897-12-31: DATE_END_JULIAN (2147483494) - UNIX_EPOCH_JDATE
/// (2440588) - 1. Beyond chrono's range, so written out.
pub const LAST_DATE_DAYS: i32 = 2_145_042_905;

/// Every type OID the decoder knows, for properties over them.
pub fn known_oids() -> Vec<u32> {
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
