//! Unit tests of the backfill room's pure parts: windows, names and their order.

use super::*;

#[test]
fn partition_names_have_one_spelling() {
    let t = ColumnType::TimestampTz;
    assert_eq!(
        canonical_name(t, Grain::Hour, "2026-03-01T05").as_deref(),
        Some("2026-03-01T05")
    );
    assert_eq!(
        canonical_name(t, Grain::Hour, "2026-03-01T5").as_deref(),
        Some("2026-03-01T05")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Day, "2026-3-1").as_deref(),
        Some("2026-03-01")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Month, "2026-3").as_deref(),
        Some("2026-03")
    );
    assert_eq!(
        canonical_name(ColumnType::BigInt, Grain::Value, "007").as_deref(),
        Some("7")
    );
    assert_eq!(
        canonical_name(ColumnType::Text, Grain::Value, "EU").as_deref(),
        Some("EU")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Day, "__null__").as_deref(),
        Some("__null__")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Day, "infinity").as_deref(),
        Some("infinity")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Day, "-0043-03-15").as_deref(),
        Some("-0043-03-15")
    );
    assert_eq!(
        canonical_name(ColumnType::Date, Grain::Day, "2026-02-30"),
        None
    );
}

#[test]
fn windows_are_half_open_and_typed() {
    let day = |d: &str| Partition::Key(d.into());
    let days = Order::Time(ColumnType::Date, Grain::Day);
    assert!(in_window(
        &day("2026-03-01"),
        "2026-03-01",
        "2026-03-02",
        days
    ));
    assert!(!in_window(
        &day("2026-03-02"),
        "2026-03-01",
        "2026-03-02",
        days
    ));
    assert!(!in_window(
        &day("infinity"),
        "2026-03-01",
        "9999-12-31",
        days
    ));
    assert!(!in_window(&Partition::Null, "0", "z", Order::Text));
    assert!(in_window(&day("beyond-infinity"), "a", "c", Order::Text));
    assert!(
        in_window(&day("9"), "2", "10", Order::Integer),
        "integers compare as integers"
    );
    assert!(!in_window(&day("10"), "2", "10", Order::Integer));
    // Signed years, in time order whatever their text's.
    assert!(in_window(
        &day("+10000-01-01"),
        "9999-01-01",
        "+10001-01-01",
        days
    ));
    assert!(!in_window(
        &day("+10000-01-01"),
        "2026-01-01",
        "9999-12-31",
        days
    ));
    assert!(in_window(
        &day("-0100-03-01"),
        "-0200-01-01",
        "-0044-01-01",
        days
    ));
    let values = Order::Time(ColumnType::Date, Grain::Value);
    assert!(in_window(
        &day("-0100-03-01"),
        "-0200-01-01",
        "0001-01-01",
        values
    ));
    assert!(!in_window(
        &day("-0300-03-01"),
        "-0200-01-01",
        "0001-01-01",
        values
    ));
}
