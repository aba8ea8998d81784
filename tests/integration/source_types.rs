//! Columns of types a DBA defines: domains (of domains, with modifiers and constraints,
//! as key and partition column) and enums, through the binary first load, the binary
//! stream, the text stream, and a watermark resync, against real PostgreSQL.

use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{TestDb, text};
use crate::postgres_source::weir_pg;

/// Every column of the orders shape as text, in id order.
const ROWS: &str = "SELECT id::text, customer::text, order_date::text, amount::text, status::text, seen::text \
                    FROM TABLE ORDER BY id";

async fn rows(client: &tokio_postgres::Client, table: &str) -> Vec<Vec<Option<String>>> {
    client
        .query(&ROWS.replace("TABLE", table), &[])
        .await
        .expect("rows")
        .iter()
        .map(|r| (0..6).map(|i| r.get(i)).collect())
        .collect()
}

async fn assert_same(source: &tokio_postgres::Client, target: &tokio_postgres::Client, when: &str) {
    let (want, got) = (
        rows(source, "public.orders").await,
        rows(target, "analytics.fact_orders").await,
    );
    assert_eq!(got, want, "{when}: the target differs from the source");
}

fn run_once(db: &TestDb, source_dsn: &str) -> String {
    let out = weir_pg(db, source_dsn, &["run", "--once"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn domain_and_enum_columns_are_read_as_the_types_they_hold() {
    let db = TestDb::new("src_types_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "src_types",
        "CREATE TYPE order_status AS ENUM ('new', 'paid', 'shipped');
         CREATE DOMAIN order_id AS bigint CHECK (VALUE > 0);
         CREATE DOMAIN price AS numeric(12,2) CHECK (VALUE >= 0);
         CREATE DOMAIN cost AS price;
         CREATE DOMAIN order_day AS date NOT NULL;
         CREATE DOMAIN code AS varchar(8);
         CREATE DOMAIN seen_at AS timestamptz(3);
         CREATE TABLE orders (id order_id PRIMARY KEY, customer code, order_date order_day,
                              amount cost, status order_status, seen seen_at);
         INSERT INTO orders
         SELECT i, 'c' || i, date '2026-03-01' + (i % 5), (i * 1.25)::numeric(12,2),
                (ARRAY['new', 'paid', 'shipped']::order_status[])[1 + i % 3],
                timestamptz '2026-03-01 10:00:00.123+00' + i * interval '1 second'
         FROM generate_series(1, 300) i;",
    )
    .await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "src_types",
            "[engine]\nflush_interval_ms = 100",
            &format!(
                "[[table]]\n{}\n",
                OrdersTable::postgres("analytics.fact_orders").body()
            ),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The target table init made holds what each domain and enum holds.
    let target = db.client().await;
    let declared: Vec<String> = target
        .query(
            "SELECT a.attname::text || ' ' || format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = 'analytics.fact_orders'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            &[],
        )
        .await
        .expect("target columns")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        declared,
        [
            "id bigint",
            "customer character varying(8)",
            "order_date date",
            "amount numeric(12,2)",
            "status text",
            "seen timestamp(3) with time zone",
        ]
    );

    // The first load reads them in binary.
    let stderr = run_once(&db, &source_dsn);
    assert!(!stderr.contains("in text"), "{stderr}");
    assert_same(&source, &target, "after the first load").await;

    // Streamed in binary: a label added to the enum, a row moved to another day, a
    // delete.
    source
        .batch_execute("ALTER TYPE order_status ADD VALUE 'refunded'")
        .await
        .expect("add a label");
    source
        .batch_execute(
            "INSERT INTO orders VALUES (1000, 'late', '2026-03-09', 9.99, 'refunded', '2026-03-09 01:02:03.456+00');
             UPDATE orders SET status = 'refunded', amount = 0.50, order_date = '2026-03-02' WHERE id = 7;
             UPDATE orders SET customer = 'eight ch' WHERE id = 8;
             DELETE FROM orders WHERE id = 9;",
        )
        .await
        .expect("changes");
    let stderr = run_once(&db, &source_dsn);
    assert!(stderr.contains("binary=true"), "{stderr}");
    assert_same(&source, &target, "after the binary stream").await;

    // A column of a type Weir does not model turns the stream to text; the domains
    // and enums read the same from their text.
    source
        .batch_execute(
            "ALTER TABLE orders ADD COLUMN tags text[];
             INSERT INTO orders VALUES (1001, 'text', '2026-03-03', 1234567890.12, 'shipped', '2026-03-03 23:59:59.999+00', '{a}');
             UPDATE orders SET status = 'new', seen = '2026-03-04 00:00:00.001+00' WHERE id = 10;",
        )
        .await
        .expect("text changes");
    let stderr = run_once(&db, &source_dsn);
    assert!(stderr.contains("binary=false"), "{stderr}");
    assert_same(&source, &target, "after the text stream").await;

    // A value a domain's constraint refuses never reaches the stream; a target that
    // `weir verify` checks against the source agrees.
    assert!(
        source
            .batch_execute("UPDATE orders SET amount = -1 WHERE id = 11")
            .await
            .is_err()
    );
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "verify",
            "--table",
            "public.orders",
            "--from",
            "2026-03-01",
            "--to",
            "2026-03-10",
            "--against-source",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// An enum key and partition column, read in chunks between watermarks on two
/// connections: each chunk's bounds compare in the enum's own order (not its labels'
/// alphabetical one), so every row is read once.
#[tokio::test(flavor = "multi_thread")]
async fn an_enum_key_and_partition_column_read_between_watermarks() {
    let db = TestDb::new("src_enum_key_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "src_enum_key",
        "CREATE TYPE ticket_kind AS ENUM ('zeta', 'alpha', 'mid');
         CREATE DOMAIN ticket_id AS integer;
         CREATE TABLE tickets (kind ticket_kind, id ticket_id, note text, PRIMARY KEY (kind, id));
         INSERT INTO tickets
         SELECT (ARRAY['zeta', 'alpha', 'mid']::ticket_kind[])[1 + i % 3], i, 'n' || i
         FROM generate_series(1, 200) i;",
    )
    .await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "src_enum_key",
            "snapshot_method = \"watermarks\"\nsnapshot_chunk_rows = 7\nsnapshot_parallelism = 2\n[engine]\nflush_interval_ms = 100",
            "[[table]]\nsource = \"public.tickets\"\ntarget = \"analytics.tickets\"\nkey = [\"kind\", \"id\"]\npartition_by = \"kind\"\ngrain = \"value\"\n",
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    source
        .batch_execute(
            "INSERT INTO tickets VALUES ('mid', 1000, 'late');
             UPDATE tickets SET kind = 'zeta' WHERE kind = 'alpha' AND id = 4;",
        )
        .await
        .expect("changes");
    run_once(&db, &source_dsn);
    let target = db.client().await;
    let all = "SELECT kind::text || ' ' || id::text || ' ' || note FROM TABLE ORDER BY 1";
    let want = lines(&source, &all.replace("TABLE", "public.tickets")).await;
    assert_eq!(want.len(), 201);
    assert_eq!(
        lines(&target, &all.replace("TABLE", "analytics.tickets")).await,
        want
    );
    let partitions = lines(
        &target,
        "SELECT partition FROM weir.partitions WHERE target_table = 'analytics.tickets' ORDER BY 1",
    )
    .await;
    assert_eq!(partitions, ["alpha", "mid", "zeta"]);

    // A label renamed changes no row in the WAL: the README's resync reads the table
    // again, and `verify --against-source` then passes, the old label's partition (in
    // lineage, no value of the type any more) holding no rows at the source.
    source
        .batch_execute("ALTER TYPE ticket_kind RENAME VALUE 'alpha' TO 'beta'")
        .await
        .expect("rename a label");
    let out = weir_pg(&db, &source_dsn, &["resync", "--table", "public.tickets"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    run_once(&db, &source_dsn);
    let want = lines(&source, &all.replace("TABLE", "public.tickets")).await;
    assert_eq!(
        lines(&target, &all.replace("TABLE", "analytics.tickets")).await,
        want
    );
    let out = weir_pg(
        &db,
        &source_dsn,
        &[
            "verify",
            "--table",
            "public.tickets",
            "--from",
            "a",
            "--to",
            "zz",
            "--against-source",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

async fn lines(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .query(sql, &[])
        .await
        .expect(sql)
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A column retyped from an enum to text with `USING` (a rewrite without WAL) reads
/// as the same type to Weir: a live run that sees it says so, naming the resync.
#[tokio::test(flavor = "multi_thread")]
async fn an_enum_retyped_to_text_under_a_live_run_is_reported() {
    let db = TestDb::new("src_enum_retyped_target").await;
    let (source_dsn, source) = crate::harness::source_db(
        "src_enum_retyped",
        "CREATE TYPE order_status AS ENUM ('new', 'paid');
         CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2),
                              status order_status);
         INSERT INTO orders VALUES (1, 'a', '2026-03-01', 1.00, 'new');",
    )
    .await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "src_enum_retyped",
            "[engine]\nflush_interval_ms = 100",
            &format!(
                "[[table]]\n{}\n",
                OrdersTable::postgres("analytics.fact_orders").body()
            ),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = db.path("live.log");
    let _run = db.spawn_live(&[("WEIR_SOURCE_DSN", source_dsn.as_str())], &log);
    let logged = |what: &'static str| {
        let log = log.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains(what) {
                    return;
                }
                assert!(std::time::Instant::now() < deadline, "no `{what}`:\n{text}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    logged("streaming from the replication slot").await;
    source
        .batch_execute("INSERT INTO orders VALUES (2, 'b', '2026-03-01', 2.00, 'paid')")
        .await
        .expect("a change under the enum");
    let target = db.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while target
        .query_one("SELECT count(*) FROM analytics.fact_orders", &[])
        .await
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0)
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the change was not written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    source
        .batch_execute(
            "ALTER TABLE orders ALTER COLUMN status TYPE text USING upper(status::text);
             INSERT INTO orders VALUES (3, 'c', '2026-03-01', 3.00, 'NEW');",
        )
        .await
        .expect("retyped");
    logged("a column was retyped between an enum or a domain and the type it holds").await;
}

/// A domain over an enum has none of the enum's comparisons in PostgreSQL (key order,
/// partition predicates): refused at `init`, naming the column, as a type Weir does not
/// model.
#[tokio::test(flavor = "multi_thread")]
async fn a_domain_over_an_enum_is_refused_naming_it() {
    let db = TestDb::new("src_domain_enum_target").await;
    let (source_dsn, _source) = crate::harness::source_db(
        "src_domain_enum",
        "CREATE TYPE color AS ENUM ('red', 'green');
         CREATE DOMAIN color_d AS color;
         CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2),
                              status text, shade color_d);",
    )
    .await;
    std::fs::write(
        db.config_path(),
        postgres_config(
            "src_domain_enum",
            "",
            &format!(
                "[[table]]\n{}\n",
                OrdersTable::postgres("analytics.fact_orders").body()
            ),
        ),
    )
    .expect("config");
    let out = weir_pg(&db, &source_dsn, &["init"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("column `shade` has type color_d (a domain over an enum)"),
        "{stderr}"
    );
}
