use super::*;
use crate::config::Config;
use serde_json::json;

const CONFIG: &str = r#"
[source]
kind = "jsonl"
path = "feed.jsonl"
[stage]
path = "stage"
[target]
kind = "postgres"
dsn_env = "X"
[[table]]
source = "public.orders"
target = "public.t"
key = ["id"]
partition_by = "at"
grain = "day"
columns = { id = "bigint", at = "timestamp", day = "date", amount = "numeric(12,2)", note = "text", at_ms = { type = "timestamptz", epoch = "ms" } }
"#;

fn tables() -> Vec<TableConfig> {
    Config::parse(CONFIG, std::path::Path::new("weir.toml"))
        .expect("config")
        .tables
}

/// The staged values of the one upsert a line decodes to.
fn values(line: &serde_json::Value) -> Result<Row, String> {
    let decoded = decode_line(&tables(), line.to_string().as_bytes(), 1)
        .map_err(|bad| bad.reason)?
        .expect("a change");
    match decoded.changes.as_slice() {
        [StageChange::Upsert { row, .. }] => Ok(row.values.clone()),
        other => panic!("one upsert, got {other:?}"),
    }
}

fn value(row: &Row, column: &str) -> Value {
    row.iter()
        .find(|(c, _)| c == column)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no column {column}"))
}

const MARCH_1_US: i64 = 1_772_323_200_000_000;

fn field(name: &str, ty: &str, logical: Option<&str>) -> serde_json::Value {
    match logical {
        Some(l) => json!({"field": name, "type": ty, "optional": true, "name": l}),
        None => json!({"field": name, "type": ty, "optional": true}),
    }
}

/// An envelope with Debezium's schema: the image's fields as given.
fn schemad(fields: Vec<serde_json::Value>, after: serde_json::Value) -> serde_json::Value {
    let image = |which: &str| json!({"type": "struct", "optional": true, "name": "dbserver.public.orders.Value", "field": which, "fields": fields.clone()});
    json!({
        "schema": {"type": "struct", "name": "dbserver.public.orders.Envelope", "fields": [
            image("before"),
            image("after"),
            {"type": "struct", "field": "source", "fields": []},
            {"type": "string", "field": "op"}
        ]},
        "payload": {"op": "c", "before": null, "after": after, "source": {"schema": "public", "table": "orders"}}
    })
}

/// A tombstone as the JSON converter with schemas on writes it, and a logical
/// decoding message (op `m`), are no change; an object of neither is still refused.
#[test]
fn tombstones_with_schemas_and_messages_are_no_change() {
    for line in [
        r#"{"schema":null,"payload":null}"#,
        r#"{"op":"m","ts_ms":1,"source":{"schema":"","table":""},"message":{"prefix":"p","content":"YQ=="}}"#,
        r#"{"ts_ms":1772323200000}"#,
        r#"{"schema":{"type":"struct","name":"io.debezium.connector.common.Heartbeat","fields":[]},"payload":{"ts_ms":1}}"#,
        r#"{"source":{"db":"inventory","table":"orders"},"databaseName":"inventory","ddl":"ALTER TABLE orders ADD c int","tableChanges":[]}"#,
    ] {
        assert!(
            matches!(decode_line(&tables(), line.as_bytes(), 1), Ok(None)),
            "{line}"
        );
    }
    assert!(decode_line(&tables(), br#"{"payload":1}"#, 1).is_err());
    assert!(decode_line(&tables(), br#"{"foo":1}"#, 1).is_err());
}

/// A `bytea` column's encoding: base64 by default; a schema that says `string`
/// (Debezium's base64, base64-url-safe or hex modes, which cannot be told apart) is
/// refused unless the column declares its encoding, which then decides.
#[test]
fn a_bytea_column_reads_the_encoding_it_declares() {
    let config = |encoding: &str| {
        format!(
            r#"
[source]
kind = "jsonl"
path = "feed.jsonl"
[stage]
path = "s"
[target]
kind = "postgres"
dsn_env = "X"
[[table]]
source = "public.orders"
target = "public.t"
key = ["id"]
partition_by = "id"
grain = "value"
columns = {{ id = "bigint", b = {encoding} }}
"#
        )
    };
    let decode = |encoding: &str, line: &serde_json::Value| -> Result<Value, String> {
        let tables = Config::parse(&config(encoding), std::path::Path::new("weir.toml"))
            .expect("config")
            .tables;
        let decoded = decode_line(&tables, line.to_string().as_bytes(), 1)
            .map_err(|bad| bad.reason)?
            .expect("a change");
        match decoded.changes.as_slice() {
            [StageChange::Upsert { row, .. }] => Ok(value(&row.values, "b")),
            other => panic!("one upsert, got {other:?}"),
        }
    };
    let bare = json!({"op": "c", "after": {"id": 1, "b": "00ff"}, "source": {"schema": "public", "table": "orders"}});
    let hex = r#"{ type = "bytea", encoding = "hex" }"#;
    assert_eq!(decode(hex, &bare), Ok(Value::Bytes(vec![0, 255])));
    assert_eq!(
        decode("\"bytea\"", &bare),
        Ok(Value::Bytes(vec![0xd3, 0x47, 0xdf]))
    );
    let as_string = schemad(
        vec![field("id", "int64", None), field("b", "string", None)],
        json!({"id": 1, "b": "00ff"}),
    );
    let refused = decode("\"bytea\"", &as_string).expect_err("ambiguous");
    assert!(refused.contains("binary.handling.mode"), "{refused}");
    assert_eq!(decode(hex, &as_string), Ok(Value::Bytes(vec![0, 255])));
    // The JSON converter writes a `bytes` field as base64, whatever the column says.
    let as_bytes = schemad(
        vec![field("id", "int64", None), field("b", "bytes", None)],
        json!({"id": 1, "b": "abcd"}),
    );
    assert_eq!(
        decode(hex, &as_bytes),
        Ok(Value::Bytes(vec![0x69, 0xb7, 0x1d]))
    );
    // Debezium's placeholder, in any encoding it gives bytes in.
    for placeholder in [
        "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==",
        "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ",
        "5f5f646562657a69756d5f756e617661696c61626c655f76616c7565",
        "5F5F646562657A69756D5F756E617661696C61626C655F76616C7565",
    ] {
        assert!(
            is_unavailable(ColumnType::Bytea, &format!("\"{placeholder}\"")),
            "{placeholder}"
        );
    }
    assert!(!is_unavailable(ColumnType::Bytea, "\"cafebabe\""));
    // The forms Debezium gives an unchanged TOAST array or hstore value.
    let bytes: Vec<String> = UNAVAILABLE_VALUE.bytes().map(|b| b.to_string()).collect();
    let numbers = format!("[{}]", bytes.join(","));
    for (ty, placeholder) in [
        (ColumnType::Jsonb, r#"["__debezium_unavailable_value"]"#),
        (ColumnType::Jsonb, numbers.as_str()),
        (
            ColumnType::Json,
            r#"{"__debezium_unavailable_value":"__debezium_unavailable_value"}"#,
        ),
        (
            ColumnType::Jsonb,
            r#""{\"__debezium_unavailable_value\": \"__debezium_unavailable_value\"}""#,
        ),
        (ColumnType::Text, r#""[\"__debezium_unavailable_value\"]""#),
    ] {
        assert!(is_unavailable(ty, placeholder), "{placeholder}");
    }
    for value in [
        r#"["__debezium_unavailable_value", "x"]"#,
        "[95,95]",
        r#"{"__debezium_unavailable_value":"x"}"#,
        r#""{\"a\": 1}""#,
        r#"["red"]"#,
    ] {
        assert!(!is_unavailable(ColumnType::Jsonb, value), "{value}");
    }
    let url_safe = r#"{ type = "bytea", encoding = "base64-url-safe" }"#;
    let line = json!({"op": "c", "after": {"id": 1, "b": "_-8"}, "source": {"schema": "public", "table": "orders"}});
    assert_eq!(decode(url_safe, &line), Ok(Value::Bytes(vec![0xff, 0xef])));
}

#[test]
fn a_schema_decides_the_unit_of_each_logical_type() {
    let fields = vec![
        field("id", "int64", None),
        field("at", "int64", Some("io.debezium.time.Timestamp")),
        field("day", "int32", Some("io.debezium.time.Date")),
        json!({"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2", "connect.decimal.precision": "12"}}),
        field("note", "int64", Some("io.debezium.time.MicroTime")),
    ];
    let row = values(&schemad(
        fields,
        json!({"id": 1, "at": MARCH_1_US / 1000, "day": 20513, "amount": "B88=", "note": 3_723_000_005_i64}),
    ))
    .expect("good");
    assert_eq!(value(&row, "at"), Value::Timestamp(MARCH_1_US));
    assert_eq!(value(&row, "day"), Value::Date(20513));
    assert_eq!(value(&row, "amount"), Value::Decimal("19.99".into()));
    assert_eq!(value(&row, "note"), Value::Text("01:02:03.000005".into()));

    for (logical, n) in [
        ("io.debezium.time.MicroTimestamp", MARCH_1_US),
        ("io.debezium.time.NanoTimestamp", MARCH_1_US * 1000),
    ] {
        let row = values(&schemad(
            vec![
                field("id", "int64", None),
                field("at", "int64", Some(logical)),
            ],
            json!({"id": 1, "at": n}),
        ))
        .expect("good");
        assert_eq!(value(&row, "at"), Value::Timestamp(MARCH_1_US), "{logical}");
    }
    let row = values(&schemad(
        vec![
            field("id", "int64", None),
            field("at", "string", Some("io.debezium.time.ZonedTimestamp")),
        ],
        json!({"id": 1, "at": "2026-03-01T00:00:00Z"}),
    ))
    .expect("good");
    assert_eq!(value(&row, "at"), Value::Timestamp(MARCH_1_US));
    let row = values(&schemad(
        vec![
            field("id", "int64", None),
            field("at", "string", Some("io.debezium.time.ZonedTimestamp")),
            field(
                "amount",
                "struct",
                Some("io.debezium.data.VariableScaleDecimal"),
            ),
        ],
        json!({"id": 1, "at": "2026-03-01T00:00:00Z", "amount": {"scale": 1, "value": "fQ=="}}),
    ))
    .expect("good");
    assert_eq!(value(&row, "amount"), Value::Decimal("12.50".into()));
}

/// The line as text, decoded: the reason it is bad, or its one upsert's values.
fn decoded(line: &str) -> Result<Row, String> {
    let decoded = decode_line(&tables(), line.as_bytes(), 1)
        .map_err(|bad| bad.reason)?
        .expect("a change");
    match decoded.changes.as_slice() {
        [StageChange::Upsert { row, .. }] => Ok(row.values.clone()),
        other => panic!("one upsert, got {other:?}"),
    }
}

/// Fields are read from the line's raw JSON only where Weir uses them: the envelope
/// reads as the whole-line parse it replaced did, whatever else a line holds.
#[test]
fn an_envelope_reads_as_a_json_map_would() {
    let source = r#""source": {"version": "2.7", "connector": "postgresql", "lsn": 12, "xmin": null, "sequence": "[\"1\",\"2\"]", "schema": "public", "table": "orders", "txId": 7}"#;
    // Unknown fields of any shape are skipped; an escaped key is the key it spells;
    // a column given twice counts as given last, as in a JSON map.
    let row = decoded(&format!(
        r#"{{"transaction": {{"id": "7:1", "total_order": 1}}, "extra": [1, {{"a": [null]}}], "op": "c", {source}, "after": {{"id": 1, "at": "2026-03-01 00:00:00", "n\u006fte": "escaped", "amount": "1.00", "amount": "2.50"}}}}"#
    ))
    .expect("good");
    assert_eq!(value(&row, "note"), Value::Text("escaped".into()));
    assert_eq!(value(&row, "amount"), Value::Decimal("2.50".into()));
    // `schema` beside an object `payload`: the payload is the envelope, whatever the
    // schema holds (here nothing).
    let row = decoded(&format!(
        r#"{{"schema": null, "payload": {{"op": "r", {source}, "after": {{"id": 2, "at": "2026-03-01 00:00:00"}}}}}}"#
    ))
    .expect("good");
    assert_eq!(value(&row, "id"), Value::Int(2));
    // A column left out of `after` is NULL, for the target and a transform alike.
    assert_eq!(value(&row, "note"), Value::Null);
    assert_eq!(value(&row, "amount"), Value::Null);
    // What is not an object where one is needed is named.
    for (line, reason) in [
        ("[1, 2]", "a line must be a JSON object"),
        ("  {\"op\": ", "malformed JSON"),
        (
            r#"{"op": "c", "op": "d", "source": {}}"#,
            "malformed JSON (duplicate field `op`",
        ),
        (
            r#"{"op": "c", "source": ["public", "orders"]}"#,
            "missing `source` object",
        ),
        (
            r#"{"op": "c", "source": {"schema": "public", "table": ""}}"#,
            "missing `source.table`",
        ),
        (
            r#"{"op": "c", "source": {"schema": "public", "table": "orders", "txId": true}}"#,
            "`source.txId` must be a number or a string",
        ),
        (
            r#"{"op": null, "source": {"schema": "public", "table": "orders"}}"#,
            "`op` must be a string",
        ),
        (
            r#"{"op": "c", "after": [1], "source": {"schema": "public", "table": "orders"}}"#,
            "`after` must be an object or null",
        ),
        (
            r#"{"op": "c", "after": {"id": 1, "nope": 2}, "source": {"schema": "public", "table": "orders"}}"#,
            "column `nope` in `after` is not declared",
        ),
    ] {
        let got = decoded(line).expect_err(line);
        assert!(got.contains(reason), "{line}: {got}");
    }
}

#[test]
fn a_bare_epoch_number_needs_a_unit() {
    // A plain int64 field in the schema says nothing about the unit.
    let reason = values(&schemad(
        vec![field("id", "int64", None), field("at", "int64", None)],
        json!({"id": 1, "at": MARCH_1_US / 1000}),
    ))
    .expect_err("no unit");
    assert!(
        reason.contains(
            "column `at` (timestamp) in `after`: a number for a timestamp column without a unit"
        ),
        "{reason}"
    );
    assert!(
        !reason.contains(&(MARCH_1_US / 1000).to_string()),
        "{reason}"
    );
    let reason = values(&json!({"op": "c", "after": {"id": 1, "at": MARCH_1_US / 1000}, "source": {"schema": "public", "table": "orders"}}))
        .expect_err("no unit");
    assert!(reason.contains("without a unit"), "{reason}");
    // The config's epoch unit for a column.
    let row = values(&json!({"op": "c", "after": {"id": 1, "at": "2026-03-01 00:00:00", "at_ms": MARCH_1_US / 1000}, "source": {"schema": "public", "table": "orders"}}))
        .expect("good");
    assert_eq!(value(&row, "at_ms"), Value::Timestamp(MARCH_1_US));
    // A nanosecond timestamp that is not whole microseconds is refused, not rounded.
    let reason = values(&schemad(
        vec![
            field("id", "int64", None),
            field("at", "int64", Some("io.debezium.time.NanoTimestamp")),
        ],
        json!({"id": 1, "at": MARCH_1_US * 1000 + 1}),
    ))
    .expect_err("sub-µs");
    assert!(reason.contains("not whole microseconds"), "{reason}");
}

#[test]
fn values_that_do_not_fit_are_bad_and_fitting_ones_normalised() {
    let line = |amount: serde_json::Value, note: &str| json!({"op": "c", "after": {"id": 1, "at": "2026-03-01 00:00:00", "amount": amount, "note": note}, "source": {"schema": "public", "table": "orders"}});
    for (amount, want) in [
        (json!("7"), "7.00"),
        (json!("12.5"), "12.50"),
        (json!(7.5), "7.50"),
    ] {
        let row = values(&line(amount, "ok")).expect("good");
        assert_eq!(value(&row, "amount"), Value::Decimal(want.into()));
    }
    let reason = values(&line(json!("19.999"), "ok")).expect_err("rounded");
    assert!(
        reason.contains("column `amount` (numeric(12,2)) in `after`") && !reason.contains("19.999"),
        "{reason}"
    );
    let reason = values(&line(json!("1"), "a\u{0}b")).expect_err("NUL");
    assert!(
        reason.contains("column `note` (text)") && reason.contains("NUL"),
        "{reason}"
    );
    // A bad schema parameter is a bad line, not a panic.
    let reason = values(&schemad(
        vec![field("id", "int64", None), json!({"field": "amount", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "x"}})],
        json!({"id": 1, "amount": "B88="}),
    ))
    .expect_err("bad schema");
    assert!(reason.contains("parameters.scale"), "{reason}");
}

fn decode(line: &serde_json::Value) -> Result<Option<DecodedLine>, String> {
    decode_line(&tables(), line.to_string().as_bytes(), 1).map_err(|bad| bad.reason)
}

#[test]
fn debeziums_unavailable_value_keeps_the_staged_value() {
    let source = json!({"schema": "public", "table": "orders", "txId": 3});
    let update = json!({"op": "u", "before": null, "source": source,
        "after": {"id": 1, "at": "2026-03-01 00:00:00", "note": UNAVAILABLE_VALUE, "amount": "2"}});
    let changes = decode(&update).expect("good").expect("a change").changes;
    let [
        StageChange::UpsertUnchanged {
            row,
            unchanged,
            previous_key,
            key,
            skip_if_absent,
            ..
        },
    ] = changes.as_slice()
    else {
        panic!("one upsert of unchanged values, got {changes:?}")
    };
    assert_eq!(unchanged, &["note".to_owned()]);
    assert_eq!((previous_key, *skip_if_absent), (key, false));
    assert!(row.values.iter().all(|(c, _)| c != "note"));
    // A key or partition column cannot be unknown.
    let bad = json!({"op": "u", "source": source,
        "after": {"id": 1, "at": UNAVAILABLE_VALUE}});
    let reason = decode(&bad).expect_err("bad");
    assert!(reason.contains("key or partition column"), "{reason}");
}

#[test]
fn records_of_no_change_are_passed_over() {
    for line in [
        json!(null),
        json!({"status": "BEGIN", "id": "571:53195829", "event_count": null, "data_collections": null, "ts_ms": 1}),
        json!({"status": "END", "id": "571:53195829", "event_count": 2, "data_collections": [{"data_collection": "public.orders", "event_count": 2}], "ts_ms": 1}),
    ] {
        assert!(decode(&line).expect("good").is_none(), "{line}");
    }
    assert!(decode(&json!([1])).is_err());
    assert!(decode(&json!({"status": "BEGIN"})).is_ok());
    assert!(decode(&json!({"status": "other", "id": 1})).is_err());
}

#[test]
fn a_truncate_follows_the_tables_on_truncate() {
    let line = json!({"op": "t", "before": null, "after": null,
        "source": {"schema": "public", "table": "orders", "txId": 9}});
    let reason = decode(&line).expect_err("on_truncate = fail");
    assert!(reason.contains("on_truncate = \"apply\""), "{reason}");
    let mut applying = tables();
    applying[0].on_truncate = OnTruncate::Apply;
    let decoded = decode_line(&applying, line.to_string().as_bytes(), 1)
        .map_err(|b| b.reason)
        .expect("good")
        .expect("a change");
    assert_eq!(decoded.tx_id.as_deref(), Some("9"));
    assert_eq!(
        decoded.changes,
        [StageChange::Truncate {
            table: "public.orders".into()
        }]
    );
}

#[test]
fn a_mysql_envelope_names_its_database_db() {
    let line = json!({"op": "c", "before": null,
        "after": {"id": 1, "at": "2026-03-01 00:00:00"},
        "source": {"connector": "mysql", "db": "public", "table": "orders", "gtid": null}});
    assert_eq!(value(&values(&line).expect("good"), "id"), Value::Int(1));
    let other = json!({"op": "c", "after": {"id": 1, "at": "2026-03-01 00:00:00"},
        "source": {"db": "inventory", "table": "orders"}});
    let reason = decode(&other).expect_err("not configured");
    assert!(reason.contains("inventory.orders"), "{reason}");
}

#[test]
fn a_connect_timestamp_in_the_schema_wins_over_the_columns_epoch() {
    // `at_ms` is declared with epoch = "ms"; the schema's Connect Timestamp says ms
    // too, and a MicroTimestamp says µs: the schema decides.
    let line = schemad(
        vec![
            field("id", "int64", None),
            field(
                "at",
                "int64",
                Some("org.apache.kafka.connect.data.Timestamp"),
            ),
            field("at_ms", "int64", Some("io.debezium.time.MicroTimestamp")),
        ],
        json!({"id": 1, "at": MARCH_1_US / 1000, "at_ms": MARCH_1_US}),
    );
    let row = values(&line).expect("good");
    assert_eq!(value(&row, "at"), Value::Timestamp(MARCH_1_US));
    assert_eq!(value(&row, "at_ms"), Value::Timestamp(MARCH_1_US));
}

#[test]
fn words_of_the_feed_in_a_reason_are_short_and_cannot_forge_log_lines() {
    assert_eq!(shown("x"), "x");
    let forged = format!(
        "c\n2026-12-07T05:00:00Z  INFO weir: FAKE {}",
        "A".repeat(200_000)
    );
    let s = shown(&forged);
    assert!(!s.contains('\n'), "{s}");
    assert!(s.len() < 200, "{s}");
    assert!(s.ends_with(&format!("({} bytes)", forged.len())), "{s}");
}
