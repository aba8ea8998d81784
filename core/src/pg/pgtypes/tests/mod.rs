//! Tests of the type decoders: edge values, errors, properties (a real PostgreSQL is
//! the engine's test, `source::postgres::decoder_tests`).

use super::expected::*;
use super::*;
use chrono::NaiveDate;
use proptest::prelude::*;

use crate::value::canonical_decimal;

fn unsupported(type_name: &str, text: &str) -> Value {
    Value::Unsupported {
        type_name: type_name.into(),
        text: text.into(),
    }
}

/// `numeric(p,s)`'s modifier.
fn numeric_typmod(p: i32, s: i32) -> i32 {
    ((p << 16) | (s & 0x7ff)) + 4
}

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
    // Binary format: read for the types Weir models, refused for the others.
    assert_eq!(
        decode_tuple_value("c", INT4, -1, &TupleValue::Binary(vec![0, 0, 0, 42])),
        Ok(Some(Value::Int(42)))
    );
    let e = decode_tuple_value("c", INTERVAL, -1, &TupleValue::Binary(vec![0; 16]))
        .expect_err("binary interval is refused");
    assert_eq!(e.problem, Problem::Binary);
    assert!(e.to_string().contains("binary"), "{e}");
    assert_eq!(
        decode_tuple_value("c", INT4, -1, &TupleValue::Binary(vec![0, 42])),
        Err(TypeError {
            column: "c".into(),
            type_name: "integer".into(),
            problem: Problem::Invalid("4 bytes"),
        })
    );
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

    /// What the writer's COPY sends for a decimal is what PostgreSQL's binary numeric
    /// decodes back to: the decimal's canonical text, sign, digits and scale.
    #[test]
    fn decimals_round_trip_through_binary_numeric(
        text in "-?0{0,2}[0-9]{0,30}(\\.[0-9]{0,30})?",
    ) {
        let Some(canonical) = canonical_decimal(&text) else {
            return Ok(());
        };
        let mut bytes = Vec::new();
        crate::value::encode_numeric(&text, &mut bytes).expect("a valid decimal");
        prop_assert_eq!(
            super::binary::decode_binary(NUMERIC, &bytes),
            Ok(Value::Decimal(canonical))
        );
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
