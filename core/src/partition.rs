//! Partitions: which slice of a target table a row belongs to.
//!
//! A partition is computed from the row's `partition_by` column and the table's grain,
//! in UTC. It is a pure function of the row: nothing here reads the clock, so a
//! partition set is always a parameter, never derived from "now" (brief invariant 3).
//!
//! Partition names are the stage's and the lineage's: `2026-03-01` (day), `2026-03`
//! (month), `2026-03-01T13` (hour), the value's text (value), and `__null__` for a NULL
//! key.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDate, Timelike};
use serde::Deserialize;

use crate::value::{ColumnType, Value, date_from_days, days_from_date};

const MICROS_PER_HOUR: i64 = 3_600_000_000;
const MICROS_PER_DAY: i64 = 24 * MICROS_PER_HOUR;

/// How rows are grouped into partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Grain {
    Hour,
    Day,
    Month,
    /// One partition per distinct value of the column.
    Value,
}

impl fmt::Display for Grain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Grain::Hour => "hour",
            Grain::Day => "day",
            Grain::Month => "month",
            Grain::Value => "value",
        })
    }
}

/// A partition of one table.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Partition {
    /// Rows whose partition column is NULL.
    Null,
    Key(String),
}

impl Partition {
    pub const NULL_NAME: &'static str = "__null__";

    /// The partition name as stored in lineage and shown to users: `__null__` for the
    /// NULL partition, a key as it is, except that a key reading `__null__` or starting
    /// with a backslash is written with one more backslash in front, so that every
    /// partition has a name of its own ([`Self::from_name`] reads it back).
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Partition::Null => Self::NULL_NAME.into(),
            Partition::Key(k) if k == Self::NULL_NAME || k.starts_with('\\') => {
                format!("\\{k}").into()
            }
            Partition::Key(k) => k.as_str().into(),
        }
    }

    /// The partition whose [`Self::name`] is `name`.
    pub fn from_name(name: &str) -> Partition {
        if name == Self::NULL_NAME {
            Partition::Null
        } else {
            Partition::Key(name.strip_prefix('\\').unwrap_or(name).to_owned())
        }
    }

    /// Bytes that identify the partition in stage keys; distinguishes the NULL partition
    /// from a text value that happens to read `__null__`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes_len());
        self.push_bytes(&mut out);
        out
    }

    /// Appends [`Self::to_bytes`] to `out`, without allocating for it.
    pub fn push_bytes(&self, out: &mut Vec<u8>) {
        match self {
            Partition::Null => out.push(0),
            Partition::Key(k) => {
                out.push(1);
                out.extend_from_slice(k.as_bytes());
            }
        }
    }

    /// The length of [`Self::to_bytes`].
    pub fn bytes_len(&self) -> usize {
        match self {
            Partition::Null => 1,
            Partition::Key(k) => 1 + k.len(),
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Option<Partition> {
        match bytes.split_first()? {
            (0, []) => Some(Partition::Null),
            (1, rest) => std::str::from_utf8(rest)
                .ok()
                .map(|s| Partition::Key(s.to_owned())),
            _ => None,
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("partition column `{column}` holds {found}, which grain `{grain}` cannot partition")]
    WrongType {
        column: String,
        grain: Grain,
        found: &'static str,
    },
    #[error("partition column `{column}` holds a timestamp outside the supported range")]
    OutOfRange { column: String },
}

/// Computes the partition of a partition-column value.
pub fn partition_of(
    column: &str,
    grain: Grain,
    value: &Value,
) -> Result<Partition, PartitionError> {
    let wrong = |found| PartitionError::WrongType {
        column: column.to_owned(),
        grain,
        found,
    };
    let range = || PartitionError::OutOfRange {
        column: column.to_owned(),
    };
    match (grain, value) {
        (_, Value::Null) => Ok(Partition::Null),
        (Grain::Value, Value::Int(i)) => Ok(Partition::Key(i.to_string())),
        (Grain::Value, Value::Text(s)) => Ok(Partition::Key(s.clone())),
        (Grain::Value, Value::Bool(b)) => Ok(Partition::Key(b.to_string())),
        // Named as chrono writes a date (a signed year past 9999 or before 1), as stages
        // and lineage have always named them; `predicate` reads that form back.
        (Grain::Value, Value::Date(d @ (i32::MAX | i32::MIN))) => Ok(Partition::Key(
            if *d > 0 { "infinity" } else { "-infinity" }.to_owned(),
        )),
        (Grain::Value, Value::Date(d)) => {
            let date = date_from_days(*d).ok_or_else(range)?;
            Ok(Partition::Key(date.format("%Y-%m-%d").to_string()))
        }
        (Grain::Day | Grain::Month, Value::Date(d @ (i32::MAX | i32::MIN))) => Ok(Partition::Key(
            if *d > 0 { "infinity" } else { "-infinity" }.to_owned(),
        )),
        (Grain::Day | Grain::Month, Value::Date(d)) => {
            let date = date_from_days(*d).ok_or_else(range)?;
            let day = (grain == Grain::Day).then(|| date.day());
            Ok(Partition::Key(calendar_name(
                date.year(),
                date.month(),
                day,
                None,
            )))
        }
        (Grain::Hour | Grain::Day | Grain::Month, Value::Timestamp(us)) => {
            if *us == i64::MAX || *us == i64::MIN {
                return Ok(Partition::Key(
                    if *us > 0 { "infinity" } else { "-infinity" }.to_owned(),
                ));
            }
            let ts = DateTime::from_timestamp_micros(*us)
                .ok_or_else(range)?
                .naive_utc();
            let day = matches!(grain, Grain::Hour | Grain::Day).then(|| ts.day());
            let hour = (grain == Grain::Hour).then(|| ts.hour());
            Ok(Partition::Key(calendar_name(
                ts.year(),
                ts.month(),
                day,
                hour,
            )))
        }
        (Grain::Hour, Value::Date(_)) => Err(wrong("a date")),
        _ => Err(wrong(value.kind())),
    }
}

/// A calendar partition's name, `YYYY-MM`, `YYYY-MM-DD` or `YYYY-MM-DDTHH`, exactly as
/// chrono's `%Y-%m-%dT%H` prints it (a year outside 0..=9999 gets a sign: the same
/// name, so the same partition, as stages and targets already hold), without parsing
/// a format string for every change staged.
fn calendar_name(year: i32, month: u32, day: Option<u32>, hour: Option<u32>) -> String {
    use std::fmt::Write as _;
    // Digits pushed by hand: every staged change of a calendar-partitioned table
    // names its partition, and the formatting machinery was a visible share of a first
    // load's CPU.
    fn two(out: &mut String, n: u32) {
        out.push(char::from(b'0' + (n / 10 % 10) as u8));
        out.push(char::from(b'0' + (n % 10) as u8));
    }
    let mut out = String::with_capacity(13);
    if let Ok(y @ 0..=9999) = u32::try_from(year) {
        two(&mut out, y / 100);
        two(&mut out, y % 100);
    } else {
        let _ = write!(out, "{year:+05}");
    }
    out.push('-');
    two(&mut out, month);
    if let Some(day) = day {
        out.push('-');
        two(&mut out, day);
    }
    if let Some(hour) = hour {
        out.push('T');
        two(&mut out, hour);
    }
    out
}

/// Which target rows belong to a partition, as SQL over the partition column.
#[derive(Debug, Clone, PartialEq)]
pub enum PartitionPredicate {
    /// `column IS NULL`
    IsNull,
    /// `column = value`
    Equals(Value),
    /// `column >= lower AND column < upper` (half-open).
    Range { lower: Value, upper: Value },
}

/// The target rows of partition `p`, for a column of type `ty` partitioned by `grain`.
pub fn predicate(ty: ColumnType, grain: Grain, p: &Partition) -> Option<PartitionPredicate> {
    let key = match p {
        Partition::Null => return Some(PartitionPredicate::IsNull),
        Partition::Key(k) => k,
    };
    if grain == Grain::Value {
        return Value::from_text(ty, key)
            .ok()
            .map(PartitionPredicate::Equals);
    }
    if key == "infinity" || key == "-infinity" {
        let positive = key == "infinity";
        let v = match ty {
            ColumnType::Date => Value::Date(if positive { i32::MAX } else { i32::MIN }),
            _ => Value::Timestamp(if positive { i64::MAX } else { i64::MIN }),
        };
        return Some(PartitionPredicate::Equals(v));
    }
    let (start_us, end_us) = bounds_micros(grain, key)?;
    // The month of PostgreSQL's first day (4714-11 BC) starts before it: bounded at it,
    // as PostgreSQL refuses a bound it cannot hold (and holds nothing before it).
    let start_us = start_us.max(crate::value::PG_TIMESTAMP_MIN_MICROS);
    let (lower, upper) = if ty == ColumnType::Date {
        (
            Value::Date(i32::try_from(start_us / MICROS_PER_DAY).ok()?),
            Value::Date(i32::try_from(end_us / MICROS_PER_DAY).ok()?),
        )
    } else {
        (Value::Timestamp(start_us), Value::Timestamp(end_us))
    };
    Some(PartitionPredicate::Range { lower, upper })
}

/// The partitions of `grain` that hold the span of a calendar partition named under
/// another grain (`YYYY-MM`, `YYYY-MM-DD` or `YYYY-MM-DDTHH`): where the rows of a
/// partition written before the table's grain changed now belong. `None` for a name of
/// `grain` itself or of no calendar grain, for the `value` grain, and past `limit`
/// partitions.
pub fn regrained(ty: ColumnType, grain: Grain, name: &str, limit: usize) -> Option<Vec<Partition>> {
    if grain == Grain::Value || bounds_micros(grain, name).is_some() {
        return None;
    }
    let (start, end) = [Grain::Hour, Grain::Day, Grain::Month]
        .into_iter()
        .find_map(|g| bounds_micros(g, name))?;
    let mut out = Vec::new();
    let mut at = start;
    while at < end {
        let value = if ty == ColumnType::Date {
            Value::Date(i32::try_from(at.div_euclid(MICROS_PER_DAY)).ok()?)
        } else {
            Value::Timestamp(at)
        };
        let partition = partition_of("", grain, &value).ok()?;
        let Partition::Key(key) = &partition else {
            return None;
        };
        let (_, next) = bounds_micros(grain, key)?;
        out.push(partition);
        if out.len() > limit || next <= at {
            return None;
        }
        at = next;
    }
    Some(out)
}

/// The half-open span `[start, end)` of a time partition, in microseconds since the epoch.
fn bounds_micros(grain: Grain, key: &str) -> Option<(i64, i64)> {
    let day_us = |d: NaiveDate| days_from_date(d).map(|days| i64::from(days) * MICROS_PER_DAY);
    match grain {
        Grain::Day => {
            let d = NaiveDate::parse_from_str(key, "%Y-%m-%d").ok()?;
            let start = day_us(d)?;
            Some((start, start + MICROS_PER_DAY))
        }
        Grain::Month => {
            let d = NaiveDate::parse_from_str(&format!("{key}-01"), "%Y-%m-%d").ok()?;
            let next = if d.month() == 12 {
                NaiveDate::from_ymd_opt(d.year() + 1, 1, 1)?
            } else {
                NaiveDate::from_ymd_opt(d.year(), d.month() + 1, 1)?
            };
            Some((day_us(d)?, day_us(next)?))
        }
        Grain::Hour => {
            let (date, hour) = key.split_once('T')?;
            let d = NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
            let h: i64 = hour.parse().ok().filter(|h| (0..24).contains(h))?;
            let start = day_us(d)? + h * MICROS_PER_HOUR;
            Some((start, start + MICROS_PER_HOUR))
        }
        Grain::Value => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::parse_timestamp;

    /// The month of PostgreSQL's first day starts before it: its lower bound is that
    /// day, which PostgreSQL can hold (a write of the month failed for ever).
    #[test]
    fn the_first_month_postgresql_holds_is_bounded_at_its_first_day() {
        let first = crate::value::PG_TIMESTAMP_MIN_MICROS;
        let month = Partition::Key("-4713-11".into());
        let Some(PartitionPredicate::Range { lower, upper }) =
            predicate(ColumnType::Date, Grain::Month, &month)
        else {
            panic!("a range");
        };
        assert_eq!(lower, Value::Date((first / MICROS_PER_DAY) as i32));
        assert_eq!(upper, Value::Date((first / MICROS_PER_DAY) as i32 + 7));
        let Some(PartitionPredicate::Range { lower, .. }) =
            predicate(ColumnType::TimestampTz, Grain::Month, &month)
        else {
            panic!("a range");
        };
        assert_eq!(lower, Value::Timestamp(first));
    }

    #[test]
    fn a_partition_of_another_grain_maps_to_the_partitions_holding_its_span() {
        let names = |v: Option<Vec<Partition>>| {
            v.map(|v| v.iter().map(|p| p.name().into_owned()).collect::<Vec<_>>())
        };
        assert_eq!(
            names(regrained(ColumnType::Date, Grain::Month, "1970-01-01", 100)),
            Some(vec!["1970-01".to_owned()])
        );
        assert_eq!(
            names(regrained(
                ColumnType::Timestamp,
                Grain::Day,
                "2026-03-07T23",
                100
            )),
            Some(vec!["2026-03-07".to_owned()])
        );
        let days = names(regrained(ColumnType::Date, Grain::Day, "2024-02", 100)).expect("days");
        assert_eq!(days.len(), 29);
        assert_eq!(days.first().map(String::as_str), Some("2024-02-01"));
        assert_eq!(days.last().map(String::as_str), Some("2024-02-29"));
        assert_eq!(
            names(regrained(
                ColumnType::Date,
                Grain::Month,
                "-0044-03-15",
                100
            )),
            Some(vec!["-0044-03".to_owned()])
        );
        // Its own grain, no calendar name, the value grain, past the limit: none.
        assert_eq!(
            regrained(ColumnType::Date, Grain::Day, "2026-03-01", 100),
            None
        );
        assert_eq!(regrained(ColumnType::Date, Grain::Day, "north", 100), None);
        assert_eq!(
            regrained(ColumnType::Date, Grain::Value, "2026-03", 100),
            None
        );
        assert_eq!(
            regrained(ColumnType::Timestamp, Grain::Hour, "2026-03", 100),
            None
        );
    }

    /// Partition names are stored in stages and targets: the fast formatting must give
    /// chrono's names for every year it may meet, signed ones included.
    #[test]
    fn calendar_names_are_chrono_s_for_every_year() {
        let years = (-300..=300)
            .chain(9_900..=10_100)
            .chain([-262_000, -10_000, -1_000, 20_000, 262_000]);
        for year in years {
            for (month, day, hour) in [(1, 1, 0), (2, 28, 9), (12, 31, 23)] {
                let Some(date) = NaiveDate::from_ymd_opt(year, month, day) else {
                    continue;
                };
                let ts = date.and_hms_opt(hour, 0, 0).expect("a time");
                assert_eq!(
                    calendar_name(year, month, None, None),
                    date.format("%Y-%m").to_string()
                );
                assert_eq!(
                    calendar_name(year, month, Some(day), None),
                    date.format("%Y-%m-%d").to_string()
                );
                assert_eq!(
                    calendar_name(year, month, Some(day), Some(hour)),
                    ts.format("%Y-%m-%dT%H").to_string()
                );
            }
        }
    }

    fn ts(s: &str) -> Value {
        Value::Timestamp(parse_timestamp(s, true).expect("timestamp"))
    }

    #[test]
    fn partitions_follow_the_grain_in_utc() {
        let cases = [
            (Grain::Day, Value::Date(20513), "2026-03-01"),
            (Grain::Month, Value::Date(20513), "2026-03"),
            (Grain::Day, ts("2026-03-01T23:30:00-01:00"), "2026-03-02"),
            (
                Grain::Hour,
                ts("2026-03-01T13:59:59.999999Z"),
                "2026-03-01T13",
            ),
            (Grain::Month, ts("2026-12-31T23:59:59Z"), "2026-12"),
            (Grain::Value, Value::Int(-7), "-7"),
            (Grain::Value, Value::Text("EU".into()), "EU"),
        ];
        for (grain, value, want) in cases {
            assert_eq!(
                partition_of("c", grain, &value),
                Ok(Partition::Key(want.into())),
                "{grain} {value:?}"
            );
        }
        assert_eq!(
            partition_of("c", Grain::Day, &Value::Null),
            Ok(Partition::Null)
        );
        assert!(partition_of("c", Grain::Hour, &Value::Date(1)).is_err());
        assert!(partition_of("c", Grain::Day, &Value::Int(1)).is_err());
    }

    #[test]
    fn a_row_lies_inside_its_partition_predicate() {
        for (ty, grain, value) in [
            (ColumnType::Date, Grain::Day, Value::Date(20513)),
            (ColumnType::Date, Grain::Month, Value::Date(20513)),
            (
                ColumnType::TimestampTz,
                Grain::Hour,
                ts("2026-03-01T13:15:00Z"),
            ),
            (
                ColumnType::Timestamp,
                Grain::Month,
                ts("2026-12-31T23:59:59Z"),
            ),
        ] {
            let p = partition_of("c", grain, &value).expect("partition");
            let Some(PartitionPredicate::Range { lower, upper }) = predicate(ty, grain, &p) else {
                panic!("range for {p}")
            };
            let key = |v: &Value| match v {
                Value::Date(d) => i64::from(*d) * MICROS_PER_DAY,
                Value::Timestamp(t) => *t,
                _ => panic!("temporal"),
            };
            assert!(
                key(&lower) <= key(&value) && key(&value) < key(&upper),
                "{p}: {lower:?} <= {value:?} < {upper:?}"
            );
        }
    }

    #[test]
    fn partition_bytes_round_trip_and_null_is_distinct() {
        let text_null = Partition::Key("__null__".into());
        assert_ne!(text_null.to_bytes(), Partition::Null.to_bytes());
        for p in [
            Partition::Null,
            text_null,
            Partition::Key("2026-03-01".into()),
        ] {
            assert_eq!(Partition::from_bytes(&p.to_bytes()), Some(p));
        }
        assert_eq!(Partition::from_bytes(&[7]), None);
    }

    /// Lineage and dead letters hold a partition by its name: no two partitions share
    /// one, and each name reads back as its partition.
    #[test]
    fn partition_names_are_distinct_and_round_trip() {
        let partitions = [
            Partition::Null,
            Partition::Key("__null__".into()),
            Partition::Key("\\__null__".into()),
            Partition::Key("\\".into()),
            Partition::Key("\\\\".into()),
            Partition::Key(String::new()),
            Partition::Key("2026-03-01".into()),
            Partition::Key("a\\b".into()),
        ];
        let names: std::collections::HashSet<String> =
            partitions.iter().map(|p| p.name().into_owned()).collect();
        assert_eq!(names.len(), partitions.len(), "{names:?}");
        for p in partitions {
            assert_eq!(Partition::from_name(&p.name()), p);
        }
        assert_eq!(Partition::Key("2026-03-01".into()).name(), "2026-03-01");
        assert_eq!(Partition::Null.name(), "__null__");
    }
}
