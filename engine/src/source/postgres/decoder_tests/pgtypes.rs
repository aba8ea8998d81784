//! Against a real PostgreSQL: every supported type round-trips under several session
//! settings.

use crate::pg::pgtypes::expected::*;
use crate::pg::pgtypes::*;
use crate::value::Value;

// ---- Real PostgreSQL ------------------------------------------------------------

/// One column of the round-trip table and its cases: an SQL literal (quoted by the
/// test) and the Value it must decode to.
struct Col {
    name: &'static str,
    sql_type: &'static str,
    cases: Vec<(&'static str, Value)>,
}

fn supported_columns() -> Vec<Col> {
    let text = |s: &str| Value::Text(s.into());
    let dec = |s: &str| Value::Decimal(s.into());
    let json = |s: &str| Value::Json(s.into());
    let big: &'static str =
        Box::leak(format!("{HUNDRED_DIGITS}.{HUNDRED_DIGITS}").into_boxed_str());
    vec![
        Col {
            name: "c_int2",
            sql_type: "smallint",
            cases: vec![
                ("-32768", Value::Int(-32768)),
                ("32767", Value::Int(32767)),
                ("0", Value::Int(0)),
            ],
        },
        Col {
            name: "c_int4",
            sql_type: "integer",
            cases: vec![
                ("-2147483648", Value::Int(i64::from(i32::MIN))),
                ("2147483647", Value::Int(i64::from(i32::MAX))),
            ],
        },
        Col {
            name: "c_int8",
            sql_type: "bigint",
            cases: vec![
                ("-9223372036854775808", Value::Int(i64::MIN)),
                ("9223372036854775807", Value::Int(i64::MAX)),
            ],
        },
        Col {
            name: "c_numeric",
            sql_type: "numeric",
            cases: vec![
                ("NaN", dec("NaN")),
                ("Infinity", dec("Infinity")),
                ("-Infinity", dec("-Infinity")),
                ("0.000001", dec("0.000001")),
                (HUNDRED_DIGITS, dec(HUNDRED_DIGITS)),
                (big, dec(big)),
                (BIG_DECIMAL, dec(BIG_DECIMAL)),
                ("-0.00", dec("0.00")),
                ("1.50", dec("1.50")),
                ("1e-20", dec("0.00000000000000000001")),
            ],
        },
        Col {
            name: "c_numeric_ps",
            sql_type: "numeric(12,2)",
            cases: vec![
                ("1.5", dec("1.50")),
                ("-9999999999.99", dec("-9999999999.99")),
                ("0", dec("0.00")),
            ],
        },
        Col {
            name: "c_real",
            sql_type: "real",
            cases: vec![
                ("NaN", Value::Float(f64::NAN)),
                ("Infinity", Value::Float(f64::INFINITY)),
                ("-Infinity", Value::Float(f64::NEG_INFINITY)),
                ("-0", Value::Float(-0.0)),
                ("0.1", f4(0.1)),
                ("1e-45", f4(f32::from_bits(1))),
                ("1.1754942e-38", f4(f32::from_bits(0x007f_ffff))),
                ("3.4028235e38", f4(f32::MAX)),
                ("16777217", f4(16_777_216.0)),
                ("1.1754944e-38", f4(f32::MIN_POSITIVE)),
            ],
        },
        Col {
            name: "c_double",
            sql_type: "double precision",
            cases: vec![
                ("NaN", Value::Float(f64::NAN)),
                ("Infinity", Value::Float(f64::INFINITY)),
                ("-Infinity", Value::Float(f64::NEG_INFINITY)),
                ("-0", Value::Float(-0.0)),
                ("0.1", Value::Float(0.1)),
                ("5e-324", Value::Float(f64::from_bits(1))),
                ("1e308", Value::Float(1e308)),
                ("1.7976931348623157e308", Value::Float(f64::MAX)),
                (
                    "2.225073858507201e-308",
                    Value::Float(f64::from_bits(0x000f_ffff_ffff_ffff)),
                ),
                ("1.0000000000000002", Value::Float(1.0 + f64::EPSILON)),
                (
                    "-123456789012345680",
                    Value::Float(-123_456_789_012_345_680.0),
                ),
            ],
        },
        Col {
            name: "c_text",
            sql_type: "text",
            cases: vec![
                ("", text("")),
                ("héllo wörld 🌍 中文", text("héllo wörld 🌍 中文")),
                (
                    "tab\tnew\nline \\ 'quote' \"dq\"",
                    text("tab\tnew\nline \\ 'quote' \"dq\""),
                ),
                ("  padded  ", text("  padded  ")),
                ("\\x00", text("\\x00")),
            ],
        },
        Col {
            name: "c_varchar",
            sql_type: "varchar(20)",
            cases: vec![
                ("abc", text("abc")),
                ("", text("")),
                ("ünïcödé", text("ünïcödé")),
            ],
        },
        Col {
            name: "c_bpchar",
            sql_type: "char(5)",
            cases: vec![
                ("ab", text("ab   ")),
                ("", text("     ")),
                ("é", text("é    ")),
                ("abcde", text("abcde")),
            ],
        },
        Col {
            name: "c_bpchar_free",
            sql_type: "bpchar",
            cases: vec![("x  ", text("x  ")), ("", text(""))],
        },
        Col {
            name: "c_name",
            sql_type: "name",
            cases: vec![("pg_catalog", text("pg_catalog")), ("ünï", text("ünï"))],
        },
        Col {
            name: "c_bool",
            sql_type: "boolean",
            cases: vec![("true", Value::Bool(true)), ("false", Value::Bool(false))],
        },
        Col {
            name: "c_date",
            sql_type: "date",
            cases: vec![
                ("infinity", Value::Date(i32::MAX)),
                ("-infinity", Value::Date(i32::MIN)),
                ("0044-03-15 BC", date(-43, 3, 15)),
                ("4713-11-24 BC", date(-4712, 11, 24)),
                ("4713-01-01 BC", date(-4712, 1, 1)),
                ("5874897-12-31", Value::Date(LAST_DATE_DAYS)),
                ("1970-01-01", Value::Date(0)),
                ("2000-02-29", date(2000, 2, 29)),
                ("0001-01-01", date(1, 1, 1)),
                ("0001-12-31 BC", date(0, 12, 31)),
            ],
        },
        Col {
            name: "c_ts",
            sql_type: "timestamp",
            cases: vec![
                ("infinity", Value::Timestamp(i64::MAX)),
                ("-infinity", Value::Timestamp(i64::MIN)),
                ("1970-01-01 00:00:00", Value::Timestamp(0)),
                ("2000-01-01 00:00:00", Value::Timestamp(946_684_800_000_000)),
                ("4713-01-01 00:00:00 BC", ts(-4712, 1, 1, 0, 0, 0, 0)),
                (
                    "2024-02-29 12:34:56.5",
                    ts(2024, 2, 29, 12, 34, 56, 500_000),
                ),
                ("2000-01-01 00:00:00.000001", ts(2000, 1, 1, 0, 0, 0, 1)),
                ("1969-12-31 23:59:59.999999", Value::Timestamp(-1)),
                (
                    "294247-01-10 04:00:54.775806",
                    Value::Timestamp(LAST_TIMESTAMP_US),
                ),
                (
                    "0044-03-15 12:30:00.25 BC",
                    ts(-43, 3, 15, 12, 30, 0, 250_000),
                ),
                ("4713-11-24 00:00:00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
            ],
        },
        Col {
            name: "c_tstz",
            sql_type: "timestamptz",
            cases: vec![
                ("infinity", Value::Timestamp(i64::MAX)),
                ("-infinity", Value::Timestamp(i64::MIN)),
                ("1970-01-01 00:00:00+00", Value::Timestamp(0)),
                ("2024-05-01 12:00:00+05:30", ts(2024, 5, 1, 6, 30, 0, 0)),
                ("2024-05-01 12:00:00-08", ts(2024, 5, 1, 20, 0, 0, 0)),
                ("1900-01-01 00:00:00+00", ts(1900, 1, 1, 0, 0, 0, 0)),
                ("4713-11-24 00:00:00+00 BC", ts(-4712, 11, 24, 0, 0, 0, 0)),
                ("1970-01-01 00:00:00.5+00", Value::Timestamp(500_000)),
                (
                    "294247-01-10 04:00:54.775806+00",
                    Value::Timestamp(LAST_TIMESTAMP_US),
                ),
                ("0044-03-15 12:00:00+01 BC", ts(-43, 3, 15, 11, 0, 0, 0)),
                (
                    "2038-01-19 03:14:08.000001+00",
                    ts(2038, 1, 19, 3, 14, 8, 1),
                ),
            ],
        },
        Col {
            name: "c_uuid",
            sql_type: "uuid",
            cases: vec![
                (
                    "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
                    text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
                ),
                (
                    "00000000-0000-0000-0000-000000000000",
                    text("00000000-0000-0000-0000-000000000000"),
                ),
            ],
        },
        Col {
            name: "c_json",
            sql_type: "json",
            cases: vec![
                (
                    "  {\"b\": [1, 2.50, {\"c\": null}], \"a\" : \"é\\u0000\", \"a\": 1e400}  ",
                    json(
                        "  {\"b\": [1, 2.50, {\"c\": null}], \"a\" : \"é\\u0000\", \"a\": 1e400}  ",
                    ),
                ),
                ("[]", json("[]")),
                ("\"just text\"", json("\"just text\"")),
            ],
        },
        Col {
            name: "c_jsonb",
            sql_type: "jsonb",
            cases: vec![
                (
                    "{\"b\": [1, 2.50, {\"c\": null}], \"aa\": 1e2, \"a\": {\"nested\": {\"deep\": [true, false, \"é\"]}}}",
                    json(
                        "{\"a\": {\"nested\": {\"deep\": [true, false, \"é\"]}}, \"b\": [1, 2.50, {\"c\": null}], \"aa\": 100}",
                    ),
                ),
                ("{}", json("{}")),
                ("null", json("null")),
                ("[1,[2,[3,[4]]]]", json("[1, [2, [3, [4]]]]")),
            ],
        },
        Col {
            name: "c_bytea",
            sql_type: "bytea",
            cases: vec![
                ("\\x", Value::Bytes(vec![])),
                ("\\x00ff00", Value::Bytes(vec![0, 255, 0])),
                ("\\x5c7800", Value::Bytes(b"\\x\0".to_vec())),
                ("\\xdeadbeef", Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])),
            ],
        },
    ]
}

/// Columns of types Weir carries as Unsupported: (name, SQL type, literal, text).
const OTHER_COLUMNS: &[(&str, &str, &str, &str)] = &[
    ("iv", "interval", "1 day 02:03:04.5", "1 day 02:03:04.5"),
    ("ints", "integer[]", "{1,2,NULL}", "{1,2,NULL}"),
    ("nums", "numeric(5,2)[]", "{1.5,NULL}", "{1.50,NULL}"),
    ("t3", "time(3)", "12:34:56.789", "12:34:56.789"),
    ("tz", "timetz", "12:00+05:30", "12:00:00+05:30"),
    ("addr", "inet", "10.0.0.1/8", "10.0.0.1/8"),
    ("feeling", "mood", "happy", "happy"),
    ("pos", "posint", "7", "7"),
    ("ch", "\"char\"", "x", "x"),
    ("b3", "bit(3)", "101", "101"),
    ("r", "int4range", "[1,5)", "[1,5)"),
    ("vcs", "varchar(10)[]", "{a,\"b c\"}", "{a,\"b c\"}"),
];

/// Extra columns whose type names must match `format_type`.
const TYPMOD_COLUMNS: &[&str] = &[
    "numeric(5,-2)",
    "numeric(3,5)",
    "numeric(1000,0)",
    "varchar(1)",
    "varchar",
    "char",
    "char(10)",
    "bpchar",
    "timestamp(0)",
    "timestamptz(3)",
    "time(0)",
    "timetz(6)",
    "interval year to month",
    "interval(2)",
    "interval day to second(4)",
    "interval minute",
    "interval hour to minute",
    "bit",
    "bit varying",
    "bit varying(7)",
    "char(3)[]",
    "timestamp(3)[]",
    "numeric[]",
    "\"char\"[]",
    "bit(2)[]",
    "interval second(1)[]",
];

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

type Decoded = Vec<Result<Option<Value>, TypeError>>;

/// Peeks the slot and decodes every inserted and updated row:
/// (table, `I` or `U`, values).
async fn peek_rows(client: &tokio_postgres::Client) -> Vec<(String, char, Decoded)> {
    peek_rows_with(client, "'proto_version', '1', 'publication_names', 'pub'").await
}

/// [`peek_rows`] with pgoutput's `options` (SQL literals, comma-separated).
async fn peek_rows_with(
    client: &tokio_postgres::Client,
    options: &str,
) -> Vec<(String, char, Decoded)> {
    use crate::pg::pgoutput::{Decoder, PgOutputMessage as M, Relation};
    let rows = client
        .query(
            &format!("SELECT data FROM pg_logical_slot_peek_binary_changes('slot', NULL, NULL, {options})"),
            &[],
        )
        .await
        .expect("peek the slot");
    let mut decoder = Decoder::new();
    let mut relations: std::collections::HashMap<u32, Relation> = Default::default();
    let mut out = vec![];
    for row in rows {
        let data: Vec<u8> = row.get(0);
        let message = decoder.decode(&data).expect("a pgoutput message");
        let (kind, relation_oid, new) = match message {
            M::Relation(r) => {
                relations.insert(r.oid, r);
                continue;
            }
            M::Insert(i) => ('I', i.relation_oid, i.new),
            M::Update(u) => ('U', u.relation_oid, u.new),
            _ => continue,
        };
        let relation = &relations[&relation_oid];
        assert_eq!(relation.columns.len(), new.len());
        let values = relation
            .columns
            .iter()
            .zip(&new)
            .map(|(c, v)| decode_column(c, v))
            .collect();
        out.push((relation.name.clone(), kind, values));
    }
    out
}

/// The columns of a table as SQL that tells apart everything a Value holds (float
/// bits and -0, numeric scale, char padding, json text).
fn comparable(columns: &[Col]) -> String {
    let mut out = vec!["id".to_owned()];
    for c in columns {
        let n = c.name;
        out.push(match c.sql_type {
            "real" => format!("float4send({n})"),
            "double precision" => format!("float8send({n})"),
            t if t.starts_with("numeric") || t == "json" => format!("{n}::text"),
            t if t.starts_with("char") || t == "bpchar" => format!("bpcharsend({n})"),
            _ => n.to_owned(),
        });
    }
    out.join(", ")
}

#[tokio::test(flavor = "multi_thread")]
async fn round_trips_through_postgresql() {
    use crate::localpg::{LocalPg, LocalPgOptions};
    use postgres_types::{ToSql, Type};
    use tokio_postgres::binary_copy::BinaryCopyInWriter;

    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default()))
        .await
        .expect("the start task panicked")
        .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
    let db = "weir_pgtypes";
    let dsn = pg.create_database(db).await.expect("create the database");
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let connection = tokio::spawn(connection);
    let exec = |sql: String| {
        let client = &client;
        async move {
            client
                .batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        }
    };

    // ---- Schema.
    let columns = supported_columns();
    let defs: Vec<String> = columns
        .iter()
        .map(|c| format!("{} {}", c.name, c.sql_type))
        .collect();
    let other_defs: Vec<String> = OTHER_COLUMNS
        .iter()
        .map(|(n, t, _, _)| format!("{n} {t}"))
        .collect();
    let typmod_defs: Vec<String> = TYPMOD_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, t)| format!("m{i} {t}"))
        .collect();
    exec(format!(
        "CREATE TYPE mood AS ENUM ('happy', 'sad');
         CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
         CREATE TABLE a (id integer PRIMARY KEY, {});
         CREATE TABLE b (LIKE a);
         CREATE TABLE other ({});
         CREATE TABLE typmods ({});
         CREATE TABLE beyond (ts timestamp, tstz timestamptz);
         CREATE TABLE toasty (id int PRIMARY KEY, big text, n int);
         ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL;
         CREATE PUBLICATION pub FOR TABLE a, other, beyond, toasty;",
        defs.join(", "),
        other_defs.join(", "),
        typmod_defs.join(", "),
    ))
    .await;

    exec("SELECT pg_create_logical_replication_slot('slot', 'pgoutput')".into()).await;
    // The cluster runs with synchronous_commit off; decoding reads flushed WAL only.
    exec("SET synchronous_commit = on".into()).await;

    // ---- Rows: row i holds case i of each column (NULL past its last case), and
    // one more row is all NULL.
    let row_count = columns.iter().map(|c| c.cases.len()).max().unwrap_or(0) + 1;
    let mut expected: Vec<Vec<Value>> = vec![];
    let mut inserts = vec![];
    for i in 0..row_count {
        let mut literals = vec![i.to_string()];
        let mut values = vec![Value::Int(i as i64)];
        for c in &columns {
            match c.cases.get(i) {
                Some((literal, value)) => {
                    literals.push(quote(literal));
                    values.push(value.clone());
                }
                None => {
                    literals.push("NULL".into());
                    values.push(Value::Null);
                }
            }
        }
        inserts.push(format!("({})", literals.join(", ")));
        expected.push(values);
    }
    let other_literals: Vec<String> = OTHER_COLUMNS.iter().map(|(_, _, l, _)| quote(l)).collect();
    exec(format!(
        "INSERT INTO a VALUES {};
         INSERT INTO other VALUES ({});
         INSERT INTO beyond VALUES ('294276-12-31 23:59:59.999999', '294276-12-31 23:59:59.999999+00'),
                                   ('294247-01-10 04:00:54.775807', '294247-01-10 04:00:54.775807+00');
         INSERT INTO toasty VALUES (1, repeat('x', 10000), 1);
         UPDATE toasty SET n = 2 WHERE id = 1;",
        inserts.join(", "),
        other_literals.join(", "),
    ))
    .await;

    let oid_of = |name: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one("SELECT oid FROM pg_type WHERE typname = $1", &[&name])
                .await
                .expect("type oid");
            row.get::<_, u32>(0)
        }
    };
    let (mood, posint) = (oid_of("mood").await, oid_of("posint").await);
    let expected_other: Vec<Value> = OTHER_COLUMNS
        .iter()
        .map(|(name, sql_type, _, text)| {
            let type_name = match *name {
                "feeling" => format!("oid {mood}"),
                "pos" => format!("oid {posint}"),
                "t3" => "time(3) without time zone".into(),
                "tz" => "time with time zone".into(),
                "vcs" => "character varying(10)[]".into(),
                _ => sql_type.to_string(),
            };
            Value::Unsupported {
                type_name,
                text: text.to_string(),
            }
        })
        .collect();

    // ---- Check that the session settings below make PostgreSQL print the forms
    // this test means to cover.
    let printed = |sql: &'static str| {
        let client = &client;
        async move {
            let row = client.query_one(sql, &[]).await.expect(sql);
            row.get::<_, String>(0)
        }
    };
    exec("SET TimeZone = 'Europe/Amsterdam'".into()).await;
    assert_eq!(
        printed("SELECT '1900-01-01 00:00:00+00'::timestamptz::text").await,
        "1900-01-01 00:19:32+00:19:32"
    );
    exec("SET TimeZone = 'UTC'".into()).await;
    assert_eq!(
        printed("SELECT '0044-03-15 12:00:00+01 BC'::timestamptz::text").await,
        "0044-03-15 11:00:00+00 BC"
    );

    // ---- Decode under several session settings: the Values must not change.
    let settings = [
        "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 1; SET bytea_output = 'hex'",
        "SET TimeZone = 'Asia/Kolkata'; SET DateStyle = 'ISO, DMY'; SET extra_float_digits = 3; SET bytea_output = 'escape'",
        "SET TimeZone = 'America/St_Johns'; SET DateStyle = 'ISO, MDY'; SET extra_float_digits = 2",
        "SET TimeZone = 'Europe/Amsterdam'; SET extra_float_digits = 1; SET bytea_output = 'escape'",
    ];
    let mut decoded_a: Vec<Vec<Value>> = vec![];
    for setting in settings {
        exec(setting.into()).await;
        let rows = peek_rows(&client).await;
        let of = |table: &str, kind: char| -> Vec<&Decoded> {
            rows.iter()
                .filter(|(t, k, _)| t == table && *k == kind)
                .map(|(_, _, v)| v)
                .collect()
        };
        // Table a: every value as expected.
        let a_rows = of("a", 'I');
        assert_eq!(a_rows.len(), expected.len(), "{setting}");
        let mut values_a = vec![];
        for (got, want) in a_rows.iter().zip(&expected) {
            let got: Vec<Value> = got
                .iter()
                .map(|v| {
                    v.clone()
                        .unwrap_or_else(|e| panic!("{setting}: {e}"))
                        .expect("no TOAST placeholder in an insert")
                })
                .collect();
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let name = if i == 0 { "id" } else { columns[i - 1].name };
                assert!(same(g, w), "{setting}: {name}: got {g:?}, want {w:?}");
            }
            values_a.push(got);
        }
        if decoded_a.is_empty() {
            decoded_a = values_a;
        }
        // Unsupported types: verbatim text and PostgreSQL's type name.
        let other_rows = of("other", 'I');
        assert_eq!(other_rows.len(), 1);
        let got: Vec<Value> = other_rows[0]
            .iter()
            .map(|v| v.clone().expect("decodes").expect("a value"))
            .collect();
        assert_eq!(got, expected_other, "{setting}");
        // Timestamps past what Value::Timestamp holds: errors naming the column.
        let beyond = of("beyond", 'I');
        assert_eq!(beyond.len(), 2);
        for row in beyond {
            for (v, (column, ty)) in row.iter().zip([
                ("ts", "timestamp without time zone"),
                ("tstz", "timestamp with time zone"),
            ]) {
                let e = v.clone().expect_err("out of range");
                assert_eq!((e.column.as_str(), e.type_name.as_str()), (column, ty));
                assert!(matches!(e.problem, Problem::OutOfRange(_)), "{e}");
                assert!(!e.to_string().contains("294276"), "{e}");
            }
        }
        // An unchanged TOASTed value is not sent: Ok(None).
        assert_eq!(
            of("toasty", 'I'),
            [&vec![
                Ok(Some(Value::Int(1))),
                Ok(Some(Value::Text("x".repeat(10_000)))),
                Ok(Some(Value::Int(1)))
            ]]
        );
        assert_eq!(
            of("toasty", 'U'),
            [&vec![
                Ok(Some(Value::Int(1))),
                Ok(None),
                Ok(Some(Value::Int(2)))
            ]]
        );
    }
    exec("SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET extra_float_digits = 1".into()).await;

    // ---- The binary format (pgoutput's `binary` option): every value of table a, whose
    // types Weir reads in binary, decodes to the Value its text gives; the timestamps
    // beyond Value::Timestamp are the same errors.
    let binary = peek_rows_with(
        &client,
        "'proto_version', '2', 'publication_names', 'pub', 'binary', 'true'",
    )
    .await;
    let a_binary: Vec<&Decoded> = binary
        .iter()
        .filter(|(t, k, _)| t == "a" && *k == 'I')
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(a_binary.len(), decoded_a.len());
    for (got, want) in a_binary.iter().zip(&decoded_a) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let name = if i == 0 { "id" } else { columns[i - 1].name };
            let g = g
                .clone()
                .unwrap_or_else(|e| panic!("binary {name}: {e}"))
                .expect("a value");
            assert!(same(&g, w), "binary {name}: got {g:?}, want {w:?}");
        }
    }
    let beyond: Vec<&Decoded> = binary
        .iter()
        .filter(|(t, k, _)| t == "beyond" && *k == 'I')
        .map(|(_, _, v)| v)
        .collect();
    assert_eq!(beyond.len(), 2);
    for row in beyond {
        for v in row {
            let e = v.clone().expect_err("out of range");
            assert!(matches!(e.problem, Problem::OutOfRange(_)), "{e}");
        }
    }

    // ---- Type names: as format_type prints them, for every column and known OID.
    let attributes = client
        .query(
            "SELECT attname::text, atttypid, atttypmod, format_type(atttypid, atttypmod)
             FROM pg_attribute
             WHERE attrelid IN ('a'::regclass, 'other'::regclass, 'typmods'::regclass, 'beyond'::regclass)
               AND attnum > 0 AND NOT attisdropped",
            &[],
        )
        .await
        .expect("read the columns");
    assert!(attributes.len() > 60);
    for row in &attributes {
        let (name, oid, typmod, pg): (String, u32, i32, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let want = if oid == mood || oid == posint {
            format!("oid {oid}")
        } else {
            pg
        };
        assert_eq!(type_name(oid, typmod), want, "column {name}");
    }
    let oids = known_oids();
    let catalog = client
        .query(
            "SELECT oid, format_type(oid, -1) FROM pg_type WHERE oid = ANY($1::oid[])",
            &[&oids],
        )
        .await
        .expect("read pg_type");
    assert_eq!(
        catalog.len(),
        oids.len(),
        "an OID of the tables is not in pg_type"
    );
    for row in &catalog {
        let (oid, pg): (u32, String) = (row.get(0), row.get(1));
        assert_eq!(type_name(oid, -1), pg, "oid {oid}");
    }

    // ---- Losslessness: write the decoded Values into b with binary COPY, then the
    // tables must be equal, bit for bit where it matters.
    let types: Vec<Type> = std::iter::once(Type::INT4)
        .chain(columns.iter().map(|c| {
            let row = &attributes
                .iter()
                .find(|r| r.get::<_, String>(0) == c.name)
                .expect("the column");
            Type::from_oid(row.get(1)).expect("a built-in type")
        }))
        .collect();
    let names: Vec<&str> = std::iter::once("id")
        .chain(columns.iter().map(|c| c.name))
        .collect();
    let sink = client
        .copy_in(&format!(
            "COPY b ({}) FROM STDIN (FORMAT binary)",
            names.join(", ")
        ))
        .await
        .expect("start COPY");
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for row in &decoded_a {
        let refs: Vec<&(dyn ToSql + Sync)> = row.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
        writer
            .as_mut()
            .write(&refs)
            .await
            .unwrap_or_else(|e| panic!("COPY row {:?}: {e:?}", row[0]));
    }
    let copied = writer.finish().await.expect("finish COPY");
    assert_eq!(copied, expected.len() as u64);
    let cols = comparable(&columns);
    for (x, y) in [("a", "b"), ("b", "a")] {
        let sql = format!(
            "SELECT count(*) FROM (SELECT {cols} FROM {x} EXCEPT ALL SELECT {cols} FROM {y}) d"
        );
        let differing: i64 = client.query_one(&sql, &[]).await.expect(&sql).get(0);
        assert_eq!(differing, 0, "rows of {x} not in {y}");
    }
    // The comparison does see a difference (here: -0 against 0).
    exec("UPDATE b SET c_double = 0 WHERE c_double::text = '-0'".into()).await;
    let sql =
        format!("SELECT count(*) FROM (SELECT {cols} FROM a EXCEPT ALL SELECT {cols} FROM b) d");
    let differing: i64 = client.query_one(&sql, &[]).await.expect(&sql).get(0);
    assert_eq!(differing, 1);

    drop(client);
    connection
        .await
        .expect("the connection task panicked")
        .expect("the connection ended cleanly");
}
