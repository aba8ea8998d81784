use super::*;

#[test]
fn column_types_parse_with_aliases() {
    for (text, ty) in [
        ("bigint", ColumnType::BigInt),
        ("INT8", ColumnType::BigInt),
        (
            "numeric(12,2)",
            ColumnType::Numeric(NumericTypmod::new(12, 2)),
        ),
        ("numeric(5)", ColumnType::Numeric(NumericTypmod::new(5, 0))),
        (
            "decimal(5, -2)",
            ColumnType::Numeric(NumericTypmod::new(5, -2)),
        ),
        ("numeric", ColumnType::Numeric(None)),
        ("double  precision", ColumnType::Double),
        ("varchar(10)", ColumnType::Varchar(Some(10))),
        ("timestamp with time zone", ColumnType::TimestampTz),
    ] {
        assert_eq!(text.parse::<ColumnType>(), Ok(ty), "{text}");
    }
    assert!("numeric(a)".parse::<ColumnType>().is_err());
    assert!("numeric(0,2)".parse::<ColumnType>().is_err());
    assert!("numeric(1001)".parse::<ColumnType>().is_err());
    assert!("numeric(12,2,1)".parse::<ColumnType>().is_err());
    assert!("point".parse::<ColumnType>().is_err());
    assert!("bigint(3)".parse::<ColumnType>().is_err());
}

#[test]
fn decimals_are_canonical_and_exact() {
    for (input, want) in [
        ("12.340", Some("12.340")),
        ("+0012.5", Some("12.5")),
        ("-0.00", Some("0.00")),
        ("1e3", Some("1000")),
        ("1.5E-3", Some("0.0015")),
        (
            "123456789012345678901234567890.123456789",
            Some("123456789012345678901234567890.123456789"),
        ),
        ("NaN", Some("NaN")),
        ("1.2.3", None),
        ("", None),
        ("-", None),
        ("1e99999", None),
    ] {
        assert_eq!(canonical_decimal(input).as_deref(), want, "{input}");
    }
}

fn numeric_bytes(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_numeric(text, &mut out).expect("valid decimal");
    out
}

#[test]
fn numeric_binary_matches_postgres_layout() {
    // ndigits, weight, sign, dscale, digits... (values taken from PostgreSQL's numeric_send)
    let words = |w: &[u16]| w.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    assert_eq!(numeric_bytes("0"), words(&[0, 0, 0, 0]));
    assert_eq!(numeric_bytes("0.00"), words(&[0, 0, 0, 2]));
    assert_eq!(numeric_bytes("12.34"), words(&[2, 0, 0, 2, 12, 3400]));
    assert_eq!(
        numeric_bytes("-12345.6"),
        words(&[3, 1, 0x4000, 1, 1, 2345, 6000])
    );
    assert_eq!(numeric_bytes("0.0001"), words(&[1, 0xFFFF, 0, 4, 1]));
    assert_eq!(numeric_bytes("10000"), words(&[1, 1, 0, 0, 1]));
    assert_eq!(numeric_bytes("NaN"), words(&[0, 0, 0xC000, 0]));
}

#[test]
fn json_values_convert_by_declared_type() {
    use serde_json::json;
    assert_eq!(
        Value::from_json(ColumnType::Integer, &json!(7)),
        Ok(Value::Int(7))
    );
    assert!(matches!(
        Value::from_json(ColumnType::SmallInt, &json!(70000)),
        Err(ConvertError::OutOfRange(_))
    ));
    assert!(matches!(
        Value::from_json(ColumnType::BigInt, &json!("7")),
        Err(ConvertError::WrongKind { .. })
    ));
    assert_eq!(
        Value::from_json(ColumnType::Date, &json!("2026-03-01")),
        Ok(Value::Date(20513))
    );
    assert_eq!(
        Value::from_json_unit(ColumnType::Date, Some(EpochUnit::Days), &json!(20513)),
        Ok(Value::Date(20513))
    );
    assert_eq!(
        Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01T01:00:00+01:00")),
        Value::from_json(ColumnType::TimestampTz, &json!("2026-03-01 00:00:00Z"))
    );
    assert_eq!(
        Value::from_json(ColumnType::Numeric(None), &json!("19.90")),
        Ok(Value::Decimal("19.90".into()))
    );
    assert!(matches!(
        Value::from_json(ColumnType::Varchar(Some(2)), &json!("abc")),
        Err(ConvertError::TooLong { .. })
    ));
    assert_eq!(
        Value::from_json(ColumnType::Bytea, &json!("AAE=")),
        Ok(Value::Bytes(vec![0, 1]))
    );
    assert_eq!(
        Value::from_json(ColumnType::Jsonb, &json!("{\"a\":1}")),
        Ok(Value::Json("{\"a\":1}".into()))
    );
    assert_eq!(
        Value::from_json(ColumnType::Text, &json!(null)),
        Ok(Value::Null)
    );
}

fn numeric(p: i64, s: i64) -> ColumnType {
    ColumnType::Numeric(NumericTypmod::new(p, s))
}

#[test]
fn decimals_are_normalised_to_the_columns_scale_or_refused() {
    use serde_json::json;
    let n12_2 = numeric(12, 2);
    for (input, want) in [
        (json!("7"), "7.00"),
        (json!("12.5"), "12.50"),
        (json!(7.5), "7.50"),
        (json!(7), "7.00"),
        (json!("19.990"), "19.99"),
        (json!("-0.5"), "-0.50"),
        (json!("-0.000"), "0.00"),
        (json!("1e2"), "100.00"),
        (json!("9999999999.99"), "9999999999.99"),
        (json!("NaN"), "NaN"),
    ] {
        assert_eq!(
            Value::from_json(n12_2, &input),
            Ok(Value::Decimal(want.into())),
            "{input}"
        );
    }
    // Rounding is refused, and so are too many integer digits and infinities.
    assert!(matches!(
        Value::from_json(n12_2, &json!("19.999")),
        Err(ConvertError::Scale { digits: 3, .. })
    ));
    assert!(matches!(
        Value::from_json(n12_2, &json!(0.001)),
        Err(ConvertError::Scale { .. })
    ));
    assert!(matches!(
        Value::from_json(n12_2, &json!("10000000000")),
        Err(ConvertError::Precision { .. })
    ));
    assert!(matches!(
        Value::from_json(n12_2, &json!("Infinity")),
        Err(ConvertError::Infinite { .. })
    ));
    // Negative scale and a scale above the precision, as PostgreSQL 15 has them.
    assert_eq!(
        fit_decimal("12300", NumericTypmod::new(5, -2).expect("typmod")).as_deref(),
        Ok("12300")
    );
    assert!(fit_decimal("12340", NumericTypmod::new(5, -2).expect("typmod")).is_err());
    assert!(fit_decimal("1234500", NumericTypmod::new(3, -2).expect("typmod")).is_err());
    assert_eq!(
        fit_decimal("0.00999", NumericTypmod::new(3, 5).expect("typmod")).as_deref(),
        Ok("0.00999")
    );
    assert_eq!(
        fit_decimal("0.001", NumericTypmod::new(3, 5).expect("typmod")).as_deref(),
        Ok("0.00100")
    );
    assert!(fit_decimal("0.01", NumericTypmod::new(3, 5).expect("typmod")).is_err());
    // Unconstrained numeric keeps the scale given.
    assert_eq!(
        Value::from_json(ColumnType::Numeric(None), &json!("7.5")),
        Ok(Value::Decimal("7.5".into()))
    );
    // The message never holds the value.
    let message = Value::from_json(n12_2, &json!("19.999"))
        .expect_err("rounded")
        .to_string();
    assert!(!message.contains("19.999"), "{message}");
    assert!(message.contains("numeric(12,2)"), "{message}");
}

#[test]
fn values_that_postgres_cannot_store_are_refused() {
    use serde_json::json;
    for ty in [ColumnType::Text, ColumnType::Varchar(Some(10))] {
        assert!(matches!(
            Value::from_json(ty, &json!("a\u{0}b")),
            Err(ConvertError::Nul { .. })
        ));
    }
    // A NUL in a document is written `\u0000` in its text: `jsonb` refuses it, `json`
    // keeps the escape as six characters of its text, as PostgreSQL does.
    assert!(matches!(
        Value::from_json(ColumnType::Jsonb, &json!({"k": "a\u{0}b"})),
        Err(ConvertError::Nul { .. })
    ));
    assert_eq!(
        Value::from_json(ColumnType::Json, &json!({"k": "a\u{0}b"})),
        Ok(Value::Json(r#"{"k":"a\u0000b"}"#.into()))
    );
    assert!(matches!(
        Value::Json("{\"k\":\"a\u{0}b\"}".into()).check_storable(),
        Err(ConvertError::Nul { .. })
    ));
    for ty in [ColumnType::Json, ColumnType::Jsonb] {
        // An escaped backslash followed by `u0000` is no NUL.
        assert!(Value::from_json(ty, &json!({"k": "a\\u0000b"})).is_ok());
    }
    assert!(matches!(
        Value::from_json(ColumnType::Integer, &json!(2_147_483_648_i64)),
        Err(ConvertError::OutOfRange(_))
    ));
    assert!(matches!(
        Value::from_json(ColumnType::SmallInt, &json!(-32769)),
        Err(ConvertError::OutOfRange(_))
    ));
    assert_eq!(
        Value::from_json(ColumnType::SmallInt, &json!(-32768)),
        Ok(Value::Int(-32768))
    );
    assert!(matches!(
        Value::from_json(ColumnType::Varchar(Some(3)), &json!("äöüß")),
        Err(ConvertError::TooLong { chars: 4, max: 3 })
    ));
    assert!(Value::from_json(ColumnType::Varchar(Some(4)), &json!("äöüß")).is_ok());
    // PostgreSQL's dates start at 4714-11-24 BC.
    assert!(matches!(
        Value::from_json(ColumnType::Date, &json!("-5000-01-01")),
        Err(ConvertError::DateRange(_))
    ));
    assert!(matches!(
        Value::from_json(ColumnType::Timestamp, &json!("-5000-01-01T00:00:00")),
        Err(ConvertError::DateRange(_))
    ));
    assert_eq!(
        Value::Date(PG_DATE_MIN_DAYS).conform(ColumnType::Date),
        Ok(Value::Date(PG_DATE_MIN_DAYS))
    );
    assert!(
        Value::Date(PG_DATE_MIN_DAYS - 1)
            .conform(ColumnType::Date)
            .is_err()
    );
    assert!(
        Value::Date(PG_DATE_MAX_DAYS + 1)
            .conform(ColumnType::Date)
            .is_err()
    );
    assert_eq!(
        Value::Date(i32::MAX).conform(ColumnType::Date),
        Ok(Value::Date(i32::MAX))
    );
    assert!(
        Value::Timestamp(PG_TIMESTAMP_MIN_MICROS - 1)
            .conform(ColumnType::TimestampTz)
            .is_err()
    );
}

#[test]
fn epoch_numbers_need_a_unit_and_are_exact() {
    use serde_json::json;
    // 2026-03-01 00:00:00 UTC.
    let us = 1_772_323_200_000_000_i64;
    for ty in [
        ColumnType::Timestamp,
        ColumnType::TimestampTz,
        ColumnType::Date,
    ] {
        let err = Value::from_json(ty, &json!(1_772_323_200_000_i64)).expect_err("no unit");
        assert!(matches!(err, ConvertError::NoEpochUnit { .. }), "{err}");
        assert!(err.to_string().contains("epoch"), "{err}");
    }
    for (unit, n) in [
        (EpochUnit::Seconds, us / 1_000_000),
        (EpochUnit::Millis, us / 1_000),
        (EpochUnit::Micros, us),
        (EpochUnit::Nanos, us * 1_000),
        (EpochUnit::Days, 20_513),
    ] {
        assert_eq!(
            Value::from_json_unit(ColumnType::Timestamp, Some(unit), &json!(n)),
            Ok(Value::Timestamp(us)),
            "{unit:?}"
        );
        assert_eq!(
            Value::from_json_unit(ColumnType::Date, Some(unit), &json!(n)),
            Ok(Value::Date(20_513)),
            "{unit:?}"
        );
    }
    assert!(matches!(
        Value::from_json_unit(ColumnType::Timestamp, Some(EpochUnit::Nanos), &json!(1_500)),
        Err(ConvertError::SubMicros)
    ));
    assert!(matches!(
        Value::from_json_unit(ColumnType::Date, Some(EpochUnit::Millis), &json!(1_000)),
        Err(ConvertError::NotMidnight)
    ));
    assert!(matches!(
        Value::from_json_unit(
            ColumnType::Timestamp,
            Some(EpochUnit::Seconds),
            &json!(i64::MAX)
        ),
        Err(ConvertError::DateRange(_))
    ));
    assert!(
        Value::from_json_unit(ColumnType::Timestamp, Some(EpochUnit::Millis), &json!(1.5)).is_err()
    );
}

fn logical(name: &str, parameters: serde_json::Value) -> Logical {
    Logical::from_schema(name, Some(&parameters))
        .expect("valid")
        .expect("a logical type")
}

#[test]
fn debezium_logical_types_decide_the_unit() {
    use serde_json::json;
    let us = 1_772_323_200_000_000_i64;
    let none = json!(null);
    let ts = |name: &str, v: serde_json::Value| {
        Value::from_debezium(ColumnType::Timestamp, logical(name, json!(null)), &v)
    };
    assert_eq!(
        ts("io.debezium.time.Timestamp", json!(us / 1_000)),
        Ok(Value::Timestamp(us))
    );
    assert_eq!(
        ts("io.debezium.time.MicroTimestamp", json!(us + 1)),
        Ok(Value::Timestamp(us + 1))
    );
    assert_eq!(
        ts("io.debezium.time.NanoTimestamp", json!(us * 1_000)),
        Ok(Value::Timestamp(us))
    );
    assert_eq!(
        ts("io.debezium.time.NanoTimestamp", json!(us * 1_000 + 1)),
        Err(ConvertError::SubMicros)
    );
    assert_eq!(
        Value::from_debezium(
            ColumnType::TimestampTz,
            logical("io.debezium.time.ZonedTimestamp", none.clone()),
            &json!("2026-03-01T01:00:00+01:00")
        ),
        Ok(Value::Timestamp(us))
    );
    assert_eq!(
        Value::from_debezium(
            ColumnType::Date,
            logical("io.debezium.time.Date", none.clone()),
            &json!(20_513)
        ),
        Ok(Value::Date(20_513))
    );
    // A date as a string is not Debezium's Date.
    assert!(
        Value::from_debezium(
            ColumnType::Date,
            logical("io.debezium.time.Date", none.clone()),
            &json!("2026-03-01")
        )
        .is_err()
    );
    let time = |name: &str, v: i64| {
        Value::from_debezium(ColumnType::Text, logical(name, json!(null)), &json!(v))
    };
    assert_eq!(
        time("io.debezium.time.Time", 3_723_004),
        Ok(Value::Text("01:02:03.004".into()))
    );
    assert_eq!(
        time("io.debezium.time.MicroTime", 3_723_000_005),
        Ok(Value::Text("01:02:03.000005".into()))
    );
    assert_eq!(
        time("io.debezium.time.NanoTime", 3_723_000_000_000),
        Ok(Value::Text("01:02:03".into()))
    );
    assert!(time("io.debezium.time.NanoTime", 1).is_err());
    assert!(time("io.debezium.time.Time", -1).is_err());
    assert_eq!(
        Value::from_debezium(
            ColumnType::Text,
            logical("io.debezium.time.ZonedTime", none.clone()),
            &json!("01:02:03Z")
        ),
        Ok(Value::Text("01:02:03Z".into()))
    );
    // A time of day for a timestamp column is refused, not guessed.
    assert!(
        Value::from_debezium(
            ColumnType::Timestamp,
            logical("io.debezium.time.Time", none.clone()),
            &json!(1)
        )
        .is_err()
    );
}

#[test]
fn debezium_decimals_are_exact() {
    use serde_json::json;
    let n12_2 = numeric(12, 2);
    let decimal = |scale: &str, b64: &str, ty: ColumnType| {
        Value::from_debezium(
            ty,
            logical(
                "org.apache.kafka.connect.data.Decimal",
                json!({"scale": scale}),
            ),
            &json!(b64),
        )
    };
    // 1999 = 0x07CF; scale 2: 19.99.
    assert_eq!(
        decimal("2", "B88=", n12_2),
        Ok(Value::Decimal("19.99".into()))
    );
    // -1999 = 0xF831.
    assert_eq!(
        decimal("2", "+DE=", n12_2),
        Ok(Value::Decimal("-19.99".into()))
    );
    // 19999 (0x4E1F) at scale 3 is 19.999: refused for numeric(12,2), not rounded.
    assert!(matches!(
        decimal("3", "Th8=", n12_2),
        Err(ConvertError::Scale { .. })
    ));
    assert_eq!(
        decimal("3", "Th8=", ColumnType::Numeric(None)),
        Ok(Value::Decimal("19.999".into()))
    );
    // 7 at scale 0, normalised to the column's scale.
    assert_eq!(
        decimal("0", "Bw==", n12_2),
        Ok(Value::Decimal("7.00".into()))
    );
    // 5 at scale 3: 0.005.
    assert_eq!(
        decimal("3", "BQ==", ColumnType::Numeric(None)),
        Ok(Value::Decimal("0.005".into()))
    );
    // 128 needs a leading zero byte (0x0080); 0x80 alone is -128.
    assert_eq!(
        decimal("0", "AIA=", ColumnType::Numeric(None)),
        Ok(Value::Decimal("128".into()))
    );
    assert_eq!(
        decimal("0", "gA==", ColumnType::Numeric(None)),
        Ok(Value::Decimal("-128".into()))
    );
    // A value wider than a u64: 2^80 = 0x01 followed by ten zero bytes.
    assert_eq!(
        decimal("0", "AQAAAAAAAAAAAAA=", ColumnType::Numeric(None)),
        Ok(Value::Decimal("1208925819614629174706176".into()))
    );
    assert!(decimal("2", "not base64!", n12_2).is_err());
    assert!(Logical::from_schema("org.apache.kafka.connect.data.Decimal", None).is_err());
    let variable = |v: serde_json::Value| {
        Value::from_debezium(
            n12_2,
            logical("io.debezium.data.VariableScaleDecimal", json!(null)),
            &v,
        )
    };
    assert_eq!(
        variable(json!({"scale": 1, "value": "fQ=="})),
        Ok(Value::Decimal("12.50".into()))
    );
    assert!(variable(json!({"scale": 3, "value": "Th8="})).is_err());
    assert!(variable(json!({"value": "fQ=="})).is_err());
}

#[test]
fn values_render_as_postgres_text() {
    assert_eq!(Value::Date(20513).to_string(), "2026-03-01");
    assert_eq!(
        Value::Timestamp(1_772_323_200_000_000).to_string(),
        "2026-03-01 00:00:00"
    );
    assert_eq!(Value::Float(f64::NAN).to_string(), "NaN");
    // Years past 9999 and before 1 as PostgreSQL writes (and reads) them.
    let day = |y, m, d| {
        days_from_date(chrono::NaiveDate::from_ymd_opt(y, m, d).expect("date")).expect("days")
    };
    assert_eq!(Value::Date(day(10_000, 1, 1)).to_string(), "10000-01-01");
    assert_eq!(Value::Date(day(-43, 3, 15)).to_string(), "0044-03-15 BC");
    assert_eq!(Value::Date(day(0, 12, 31)).to_string(), "0001-12-31 BC");
    let at = i64::from(day(-43, 3, 15)) * 86_400_000_000 + 43_200_500_000;
    assert_eq!(
        Value::Timestamp(at).to_string(),
        "0044-03-15 12:00:00.500 BC"
    );
}

proptest::proptest! {
    /// A decimal written plainly (the form staged decimals have) is encoded without
    /// `ParsedDecimal`: both readings must give the same bytes, and the same as its
    /// exponent form, which only `ParsedDecimal` reads.
    #[test]
    fn plain_decimals_encode_as_parsed_ones(
        negative in proptest::bool::ANY,
        int in "0{0,3}[0-9]{0,40}",
        frac in proptest::option::of("[0-9]{0,40}"),
    ) {
        let sign = if negative { "-" } else { "" };
        let text = match &frac {
            Some(frac) => format!("{sign}{int}.{frac}"),
            None => format!("{sign}{int}"),
        };
        let parsed = super::text::ParsedDecimal::parse(&text);
        proptest::prop_assume!(parsed.is_some());
        let parsed = parsed.expect("assumed");
        let mut by_parse = Vec::new();
        super::binary::write_numeric(
            parsed.negative, &parsed.int_digits, &parsed.frac_digits, &mut by_parse,
        )
        .expect("encodable");
        proptest::prop_assert_eq!(numeric_bytes(&text), by_parse.clone());
        let exponent = format!("{text}e0");
        let mut by_exponent = Vec::new();
        encode_numeric(&exponent, &mut by_exponent).expect("encodable");
        proptest::prop_assert_eq!(by_exponent, by_parse);
    }

    /// A date is read as chrono's `%Y-%m-%d` reads it, whatever the text: the fast
    /// reading of `YYYY-MM-DD` gives the same days, and refuses what chrono refuses.
    #[test]
    fn dates_read_as_chrono_reads_them(
        text in "[ ]?[0-9+-]{0,2}[0-9]{1,4}-[0-9]{1,2}-[0-9]{1,3}[ ]?",
    ) {
        let chrono = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
            .ok()
            .and_then(days_from_date);
        proptest::prop_assert_eq!(parse_date(&text), chrono, "{:?}", text);
    }

    #[test]
    fn every_calendar_day_reads_as_chrono_reads_it(days in -800_000i32..2_200_000) {
        let date = date_from_days(days).expect("a date");
        let text = date.format("%Y-%m-%d").to_string();
        proptest::prop_assert_eq!(parse_date(&text), Some(days), "{}", text);
    }
}

/// The column types a feed's values are read by, with and without a typmod or unit.
fn feed_column_types() -> Vec<(ColumnType, Option<EpochUnit>)> {
    let mut out = Vec::new();
    for ty in [
        "smallint",
        "integer",
        "bigint",
        "boolean",
        "text",
        "varchar(3)",
        "numeric",
        "numeric(6,2)",
        "numeric(4,-1)",
        "date",
        "timestamp",
        "timestamptz",
        "double precision",
        "uuid",
        "jsonb",
        "bytea",
    ] {
        let ty = ty.parse::<ColumnType>().expect("a column type");
        out.push((ty, None));
        out.push((ty, Some(EpochUnit::Millis)));
    }
    out
}

proptest::proptest! {
    /// A value read from its JSON text (the short way for plain forms) is the value,
    /// or the error, that reading the parsed JSON gives, whatever the text and column.
    #[test]
    fn json_text_reads_as_parsed_json(
        text in proptest::prop_oneof![
            "-?[0-9]{1,20}",
            "-?[0-9]{1,6}(\\.[0-9]{0,4})?([eE][+-]?[0-9]{1,2})?",
            "\"[ ]?-?[0-9]{0,7}(\\.[0-9]{0,4})?[ ]?\"",
            "\"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,7})?(Z|[+-][0-9]{2}:?[0-9]{2})?)?\"",
            "\"[a-z\\\\\"\\u{e9}\\u{feff} ]{0,6}\"",
            "\"(NaN|Infinity|-Infinity|infinity|-infinity|inf|nan)\"",
            "true|false|null|\\[1\\]|\\{\\}",
        ],
    ) {
        let json: Result<serde_json::Value, _> = serde_json::from_str(&text);
        proptest::prop_assume!(json.is_ok());
        let json = json.expect("assumed");
        for (ty, epoch) in feed_column_types() {
            // (Compared as debug text: a NaN is not equal to itself.)
            proptest::prop_assert_eq!(
                format!("{:?}", Value::from_json_text(ty, epoch, &text)),
                format!("{:?}", Value::from_json_unit(ty, epoch, &json)),
                "{} as {:?} ({:?})", text, ty, epoch
            );
        }
    }
}

#[test]
fn json_text_reads_plain_forms_and_refuses_as_parsed_json() {
    let ty = |t: &str| t.parse::<ColumnType>().expect("a column type");
    let read = |t: &str, text: &str| Value::from_json_text(ty(t), None, text);
    assert_eq!(read("bigint", "-42"), Ok(Value::Int(-42)));
    assert_eq!(
        read("text", "\"caf\u{e9}\""),
        Ok(Value::Text("caf\u{e9}".into()))
    );
    assert_eq!(read("text", "\"a\\nb\""), Ok(Value::Text("a\nb".into())));
    assert_eq!(
        read("numeric(12,2)", "7"),
        Ok(Value::Decimal("7.00".into()))
    );
    assert_eq!(
        read("numeric(12,2)", "\" 7.5 \""),
        Ok(Value::Decimal("7.50".into()))
    );
    assert_eq!(read("numeric", "1.50e2"), Ok(Value::Decimal("150".into())));
    assert_eq!(read("date", "\"2026-03-01\""), Ok(Value::Date(20_513)));
    assert_eq!(read("boolean", "null"), Ok(Value::Null));
    assert!(matches!(
        read("smallint", "40000"),
        Err(ConvertError::OutOfRange(_))
    ));
    assert!(matches!(
        read("bigint", "1.0"),
        Err(ConvertError::Invalid { .. })
    ));
    assert!(matches!(
        read("numeric(3,1)", "\"1.25\""),
        Err(ConvertError::Scale { .. })
    ));
    assert!(matches!(
        read("date", "\"2026-02-30\""),
        Err(ConvertError::Invalid { .. })
    ));
    assert!(matches!(
        read("text", "5"),
        Err(ConvertError::WrongKind { .. })
    ));
}

proptest::proptest! {
    /// `fit_decimal` refuses exactly the decimals whose kept digits (the integer ones and
    /// the first `s` fraction ones, padded with zeros) have more significant digits than
    /// the precision, and writes the others with `s` fraction digits.
    #[test]
    fn fitted_decimals_keep_the_precision_of_their_digits(
        negative in proptest::bool::ANY,
        int in "0{0,2}[0-9]{0,7}",
        frac in "[0-9]{0,5}0{0,2}",
        precision in 1i64..10,
        scale in -3i64..6,
    ) {
        proptest::prop_assume!(!(int.is_empty() && frac.is_empty()));
        let text = format!("{}{int}.{frac}", if negative { "-" } else { "" });
        let typmod = NumericTypmod::new(precision, scale).expect("a typmod");
        let int_digits = int.trim_start_matches('0');
        let kept_frac = usize::try_from(scale.max(0)).expect("kept");
        let dropped_int = usize::try_from((-scale).max(0)).expect("dropped");
        let rounds = frac.bytes().skip(kept_frac).any(|d| d != b'0')
            || int_digits.bytes().rev().take(dropped_int).any(|d| d != b'0');
        let mut kept: Vec<u8> =
            int_digits.as_bytes()[..int_digits.len().saturating_sub(dropped_int)].to_vec();
        kept.extend((0..kept_frac).map(|i| frac.as_bytes().get(i).copied().unwrap_or(b'0')));
        let significant = kept.iter().skip_while(|d| **d == b'0').count();
        match fit_decimal(&text, typmod) {
            Err(ConvertError::Scale { .. }) => proptest::prop_assert!(rounds),
            Err(ConvertError::Precision { .. }) => {
                proptest::prop_assert!(!rounds && significant > usize::from(typmod.precision));
            }
            Ok(out) => {
                proptest::prop_assert!(!rounds && significant <= usize::from(typmod.precision));
                let fraction = out.split_once('.').map_or(0, |(_, f)| f.len());
                proptest::prop_assert_eq!(fraction, kept_frac, "{} → {}", text, out);
            }
            Err(other) => proptest::prop_assert!(false, "{}: {:?}", text, other),
        }
    }
}

#[test]
fn timestamps_are_read_as_postgresql_reads_them_or_refused() {
    use serde_json::json;
    let us = 1_772_323_200_000_000_i64; // 2026-03-01 00:00:00 UTC
    let read = |ty, text: &str| Value::from_json(ty, &json!(text));
    // Finer than microseconds: PostgreSQL would round, Weir refuses (zeros are fine).
    for text in [
        "2026-03-01T00:00:00.1234567Z",
        "2026-03-01T00:00:00.9999995Z",
        "2026-03-01 00:00:00.000000001+02:00",
    ] {
        assert_eq!(
            read(ColumnType::TimestampTz, text),
            Err(ConvertError::SubMicros),
            "{text}"
        );
        assert_eq!(
            read(ColumnType::Timestamp, text),
            Err(ConvertError::SubMicros)
        );
    }
    assert_eq!(
        read(ColumnType::TimestampTz, "2026-03-01T00:00:00.123456000Z"),
        Ok(Value::Timestamp(us + 123_456))
    );
    // An offset gives a timestamptz its instant; a timestamp keeps its wall time.
    assert_eq!(
        read(ColumnType::TimestampTz, "2026-03-01T02:00:00+02:00"),
        Ok(Value::Timestamp(us))
    );
    assert_eq!(
        read(ColumnType::Timestamp, "2026-03-01T00:00:00+02:00"),
        Ok(Value::Timestamp(us))
    );
    assert_eq!(
        read(ColumnType::Timestamp, "2026-03-01 00:00:00-05"),
        Ok(Value::Timestamp(us))
    );
}

#[test]
fn a_real_is_read_as_a_float4_and_json_text_is_kept() {
    use serde_json::json;
    let real = |v: serde_json::Value| Value::from_json(ColumnType::Real, &v);
    // Debezium's float32 spelling reads as the float4 PostgreSQL's float4in makes.
    for text in ["0.1", "3.4028235E38", "1.17549435E-38", "16777217", "-2.5"] {
        let want = f64::from(text.parse::<f32>().expect("f32"));
        let number: serde_json::Value = serde_json::from_str(text).expect("number");
        assert_eq!(real(number), Ok(Value::Float(want)), "{text}");
        assert_eq!(real(json!(text)), Ok(Value::Float(want)), "{text}");
    }
    assert!(matches!(
        real(json!(1e39)),
        Err(ConvertError::OutOfRange(_))
    ));
    assert!(matches!(
        Value::from_json(
            ColumnType::Double,
            &serde_json::from_str("1e400").expect("n")
        ),
        Err(ConvertError::OutOfRange(_)) | Err(ConvertError::Invalid { .. })
    ));
    assert!(matches!(real(json!("NaN")), Ok(Value::Float(x)) if x.is_nan()));
    // Too small for the type but not zero: refused as PostgreSQL refuses it.
    for text in ["1e-46", "-2.5e-50"] {
        let number: serde_json::Value = serde_json::from_str(text).expect("number");
        assert!(
            matches!(real(number), Err(ConvertError::OutOfRange(_))),
            "{text}"
        );
    }
    assert_eq!(real(json!(0.0)), Ok(Value::Float(0.0)));
    assert!(matches!(real(json!(1e-40)), Ok(Value::Float(x)) if x > 0.0));
    // `json` keeps its text as PostgreSQL's json does; `jsonb` is normalised.
    let doc = r#"{"z":1,  "a":2, "a":3, "n":1e2}"#;
    assert_eq!(
        Value::from_json(ColumnType::Json, &json!(doc)),
        Ok(Value::Json(doc.to_owned()))
    );
    assert_ne!(
        Value::from_json(ColumnType::Jsonb, &json!(doc)),
        Ok(Value::Json(doc.to_owned()))
    );
    // A document given inline in the line is kept as written too.
    let inline = r#"{ "b" : 1,  "a":2, "a" : [1,  2.50, 1e2], "s":"\u00e9\n\/" }"#;
    assert_eq!(
        Value::from_json_text(ColumnType::Json, None, inline),
        Ok(Value::Json(inline.to_owned()))
    );
    assert!(Value::from_json_text(ColumnType::Json, None, "{oops").is_err());
}

#[test]
fn kafka_connect_logical_types_decide_the_unit() {
    use serde_json::json;
    let us = 1_772_323_200_000_000_i64;
    let connect = |name: &str| logical(name, json!(null));
    assert_eq!(
        Value::from_debezium(
            ColumnType::TimestampTz,
            connect("org.apache.kafka.connect.data.Timestamp"),
            &json!(us / 1_000 + 123)
        ),
        Ok(Value::Timestamp(us + 123_000))
    );
    assert_eq!(
        Value::from_debezium(
            ColumnType::Date,
            connect("org.apache.kafka.connect.data.Date"),
            &json!(20_513)
        ),
        Ok(Value::Date(20_513))
    );
    assert_eq!(
        Value::from_debezium(
            ColumnType::Text,
            connect("org.apache.kafka.connect.data.Time"),
            &json!(3_723_500)
        ),
        Ok(Value::Text("01:02:03.5".into()))
    );
}

/// JSON text in a string that the parser cannot read is never taken for a JSON string:
/// it is refused (it cannot be checked whole); with
/// Debezium's `io.debezium.data.Json` a string that is not JSON text is refused.
#[test]
fn json_text_the_parser_cannot_read_is_not_made_a_string() {
    use serde_json::json;
    let deep = format!("{}1{}", "[".repeat(130), "]".repeat(130));
    let lone = r#"{"a":"\ud83d"}"#;
    for text in [deep.as_str(), lone] {
        for ty in [ColumnType::Json, ColumnType::Jsonb] {
            assert!(
                matches!(
                    Value::from_json(ty, &json!(text)),
                    Err(ConvertError::Invalid { .. })
                ),
                "{text}"
            );
        }
    }
    // Not JSON text: the string itself, as before; with the schema's word, refused.
    assert_eq!(
        Value::from_json(ColumnType::Jsonb, &json!("hello")),
        Ok(Value::Json("\"hello\"".into()))
    );
    let json_logical = logical("io.debezium.data.Json", json!(null));
    assert!(matches!(
        Value::from_debezium(ColumnType::Jsonb, json_logical, &json!("{\"a\":")),
        Err(ConvertError::Invalid { .. })
    ));
    assert_eq!(
        Value::from_debezium(ColumnType::Jsonb, json_logical, &json!("{\"b\": 1}")),
        Ok(Value::Json("{\"b\":1}".into()))
    );
}

/// Debezium's values for `infinity` and `-infinity` timestamps are those, not times in
/// year 294247.
#[test]
fn debeziums_infinite_timestamps_are_infinity() {
    use serde_json::json;
    for name in [
        "io.debezium.time.Timestamp",
        "io.debezium.time.MicroTimestamp",
        "io.debezium.time.NanoTimestamp",
    ] {
        let at = |ty, v: i64| Value::from_debezium(ty, logical(name, json!(null)), &json!(v));
        assert_eq!(
            at(ColumnType::Timestamp, 9_223_372_036_825_200_000),
            Ok(Value::Timestamp(i64::MAX))
        );
        assert_eq!(
            at(ColumnType::TimestampTz, -9_223_372_036_832_400_000),
            Ok(Value::Timestamp(i64::MIN))
        );
        assert_eq!(
            at(ColumnType::Date, 9_223_372_036_825_200_000),
            Ok(Value::Date(i32::MAX))
        );
    }
}

/// `jsonb` numbers are staged as PostgreSQL stores them (its numeric's text), so that
/// `verify` and checksums agree with the target; one PostgreSQL cannot hold is refused.
#[test]
fn jsonb_numbers_are_staged_as_postgresql_stores_them() {
    use serde_json::json;
    let jsonb = |text: &str| Value::from_json(ColumnType::Jsonb, &json!(text));
    for (given, stored) in [
        (r#"{"c":1e2}"#, r#"{"c":100}"#),
        (r#"{"d":-0}"#, r#"{"d":0}"#),
        (
            r#"[1E-3, 1.0e1, -0.0, 1.5e-7, 100e-2]"#,
            r#"[0.001,10,0.0,0.00000015,1.00]"#,
        ),
        (r#"{"n":12.50}"#, r#"{"n":12.50}"#),
    ] {
        assert_eq!(jsonb(given), Ok(Value::Json(stored.into())), "{given}");
    }
    assert!(matches!(
        jsonb("[1e999999]"),
        Err(ConvertError::Invalid { .. })
    ));
    // Exponents past 1000 that PostgreSQL 15's numeric takes.
    let big = jsonb("[1e1001]").expect("taken");
    assert_eq!(big, Value::Json(format!("[1{}]", "0".repeat(1001))));
    let small = jsonb("[0.01e-1002]").expect("taken");
    assert_eq!(small, Value::Json(format!("[0.{}1]", "0".repeat(1003))));
    // `json` keeps its text.
    assert_eq!(
        Value::from_json(ColumnType::Json, &json!(r#"{"c":1e2}"#)),
        Ok(Value::Json(r#"{"c":1e2}"#.into()))
    );
}

#[test]
fn a_decimal_past_numerics_limits_is_refused_at_intake_and_in_output() {
    let int_ok = format!("-{}.5", "9".repeat(131_072));
    let frac_ok = format!("0.{}", "1".repeat(16_383));
    for ok in [
        int_ok.as_str(),
        frac_ok.as_str(),
        "NaN",
        "-Infinity",
        "000123.40",
    ] {
        let v = Value::Decimal(ok.to_owned());
        assert!(
            v.clone().conform(ColumnType::Numeric(None)).is_ok(),
            "{ok:.20}"
        );
        assert!(v.check_storable().is_ok(), "{ok:.20}");
    }
    let int_long = format!("1{}", "0".repeat(131_072));
    let frac_long = format!("0.{}", "1".repeat(16_384));
    for bad in [int_long, frac_long] {
        let v = Value::Decimal(bad);
        assert!(matches!(
            v.clone().conform(ColumnType::Numeric(None)),
            Err(ConvertError::Invalid { .. })
        ));
        assert!(v.check_storable().is_err());
    }
}

#[test]
fn debeziums_infinity_reads_as_infinity_with_an_epoch_unit_too() {
    for unit in [EpochUnit::Millis, EpochUnit::Micros, EpochUnit::Nanos] {
        let plus = serde_json::json!(9_223_372_036_825_200_000_i64);
        let minus = serde_json::json!(-9_223_372_036_832_400_000_i64);
        assert_eq!(
            Value::from_json_unit(ColumnType::TimestampTz, Some(unit), &plus),
            Ok(Value::Timestamp(i64::MAX))
        );
        assert_eq!(
            Value::from_json_unit(ColumnType::Timestamp, Some(unit), &minus),
            Ok(Value::Timestamp(i64::MIN))
        );
        assert_eq!(
            Value::from_json_unit(ColumnType::Date, Some(unit), &plus),
            Ok(Value::Date(i32::MAX))
        );
    }
}

#[test]
fn only_types_whose_values_all_fit_widen() {
    let n = |p, s| ColumnType::Numeric(NumericTypmod::new(p, s));
    assert!(ColumnType::Integer.widens_to(ColumnType::BigInt));
    assert!(n(12, 2).widens_to(n(14, 4)));
    assert!(n(12, 2).widens_to(ColumnType::Numeric(None)));
    assert!(ColumnType::Varchar(Some(5)).widens_to(ColumnType::Text));
    assert!(!ColumnType::BigInt.widens_to(ColumnType::Integer));
    assert!(!n(14, 4).widens_to(n(12, 2)));
    assert!(
        !n(12, 2).widens_to(n(12, 4)),
        "two digits fewer before the point"
    );
    assert!(!ColumnType::Text.widens_to(ColumnType::Varchar(Some(5))));
    assert!(!ColumnType::Integer.widens_to(ColumnType::Text));
}
