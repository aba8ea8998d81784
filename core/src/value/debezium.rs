//! Debezium's logical types: what a schema field's `name` says a value means (days,
//! epoch units, zoned text, base64 decimals), and the exact conversion it calls for.

use super::text::{has_sub_micros, parse_timestamp};
use super::{ColumnType, ConvertError, EpochUnit, MICROS_PER_DAY, Value};

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
    /// `io.debezium.data.Json`: a `json` or `jsonb` value as its JSON text.
    Json,
    /// A field of type `string` without a logical name: it decides only how a `bytea`
    /// column's value is read (Debezium's `binary.handling.mode` base64, base64-url-safe
    /// or hex, which cannot be told apart); any other column reads it by its own type.
    PlainString,
    /// A field of type `bytes` without a logical name: the JSON converter writes bytes
    /// as base64, whatever a `bytea` column's declared encoding says.
    PlainBytes,
}

/// What Debezium's PostgreSQL connector sends for a timestamp of `infinity` and
/// `-infinity`, in every unit (its documentation's values).
pub(super) const DEBEZIUM_INFINITY: i64 = 9_223_372_036_825_200_000;
pub(super) const DEBEZIUM_MINUS_INFINITY: i64 = -9_223_372_036_832_400_000;

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
            // Kafka Connect's own logical types (Debezium's `time.precision.mode =
            // connect`): days, ms since midnight, ms since 1970-01-01.
            "io.debezium.time.Date" | "org.apache.kafka.connect.data.Date" => Logical::Date,
            "org.apache.kafka.connect.data.Time" => Logical::Time(EpochUnit::Millis),
            "org.apache.kafka.connect.data.Timestamp" => Logical::Timestamp(EpochUnit::Millis),
            "io.debezium.time.Time" => Logical::Time(EpochUnit::Millis),
            "io.debezium.time.MicroTime" => Logical::Time(EpochUnit::Micros),
            "io.debezium.time.NanoTime" => Logical::Time(EpochUnit::Nanos),
            "io.debezium.time.Timestamp" => Logical::Timestamp(EpochUnit::Millis),
            "io.debezium.time.MicroTimestamp" => Logical::Timestamp(EpochUnit::Micros),
            "io.debezium.time.NanoTimestamp" => Logical::Timestamp(EpochUnit::Nanos),
            "io.debezium.time.ZonedTimestamp" => Logical::ZonedTimestamp,
            "io.debezium.time.ZonedTime" => Logical::ZonedTime,
            "io.debezium.data.VariableScaleDecimal" => Logical::VariableScaleDecimal,
            "io.debezium.data.Json" => Logical::Json,
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
            Logical::Json => "io.debezium.data.Json",
            Logical::PlainString => "string",
            Logical::PlainBytes => "bytes",
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
                // Debezium's `infinity` and `-infinity`, not a time in year 294247.
                let positive = match v.as_i64() {
                    Some(DEBEZIUM_INFINITY) => Some(true),
                    Some(DEBEZIUM_MINUS_INFINITY) => Some(false),
                    _ => None,
                };
                match (positive, ty) {
                    (Some(p), ColumnType::Date) => {
                        Ok(Value::Date(if p { i32::MAX } else { i32::MIN }))
                    }
                    (Some(p), _) => Ok(Value::Timestamp(if p { i64::MAX } else { i64::MIN })),
                    (None, _) => Value::from_json_unit(ty, Some(unit), v),
                }
            }
            Logical::PlainString | Logical::PlainBytes => Value::from_json_unit(ty, None, v),
            Logical::Json => {
                if !matches!(ty, ColumnType::Json | ColumnType::Jsonb) {
                    return Value::from_json_unit(ty, None, v);
                }
                match v {
                    J::String(text) => Value::json_document(ty, text)?
                        .ok_or_else(|| ConvertError::Invalid {
                            text: text.clone(),
                            expected: "JSON text (the schema says io.debezium.data.Json)",
                        })?
                        .conform(ty),
                    _ => Err(ConvertError::Schema(
                        "io.debezium.data.Json must be JSON text in a string".into(),
                    )),
                }
            }
            Logical::ZonedTimestamp => {
                if !ty.is_temporal() {
                    return Err(unsuited("a timestamp"));
                }
                // An instant (Debezium's text of a timestamptz): into a `timestamp`
                // column it is the UTC wall time, the stage's zone, whatever the offset.
                match v {
                    J::String(s) if ty == ColumnType::Timestamp && !has_sub_micros(s) => {
                        match parse_timestamp(s, true) {
                            Some(us) => Value::Timestamp(us).conform(ty),
                            None => Value::from_json_unit(ty, None, v),
                        }
                    }
                    _ => Value::from_json_unit(ty, None, v),
                }
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
