//! TLS to PostgreSQL through the `weir` binary, on both DSNs, against the harness's TLS
//! cluster (`ssl = on`, a CA and certificates made by the test, pg_hba.conf letting
//! the test roles in only over `hostssl`): `require`, `verify-ca` and `verify-full`
//! work for `init`, `run --once` (replication over TLS) and `backfill`; a client
//! certificate works; `channel_binding=require` works with SCRAM over TLS; a wrong CA,
//! a wrong host name, `sslmode=disable` against a TLS-only role and missing files fail
//! with errors that name the host and the reason; no output holds the password.

use std::path::Path;
use std::process::Output;

use tokio_postgres::Client;
use weir::localpg::TlsFiles;
use weir_core::fixtures::{OrdersTable, postgres_config};

use crate::harness::{CERT_USER, TLS_PASSWORD, TLS_USER, TestDb, text, tls_cluster};

/// The `[[table]]` body of every feed here: the orders table into `analytics.fact_orders`.
fn table() -> String {
    OrdersTable::postgres("analytics.fact_orders").body()
}

const DDL: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, order_date date NOT NULL, amount numeric(12,2), note text);
INSERT INTO orders SELECT g, date '2026-03-01' + (g % 5), g * 1.25, 'before init ' || g FROM generate_series(1, 50) g;";

/// A feed whose source and target databases live on the TLS cluster.
pub(crate) struct TlsFeed {
    pub db: TestDb,
    pub source: Client,
    pub target: Client,
    source_db: String,
    target_db: String,
    port: u16,
    socket_dir: std::path::PathBuf,
    pub files: TlsFiles,
}

async fn plain_client(dsn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect as postgres (plain, trust) to the TLS cluster");
    tokio::spawn(connection);
    client
}

/// Creates `{name}_source` (with `ddl`) and `{name}_target` on the TLS cluster and a
/// config for them, `extra_source` added to `[source]`, `table` as the `[[table]]`.
pub(crate) async fn tls_feed(name: &str, ddl: &str, extra_source: &str, table: &str) -> TlsFeed {
    let pg = tokio::task::spawn_blocking(tls_cluster)
        .await
        .expect("cluster thread");
    let files = pg.tls_files().expect("the TLS cluster has certificates");
    let (source_db, target_db) = (format!("{name}_source"), format!("{name}_target"));
    let source = plain_client(&pg.create_database(&source_db).await.expect("source db")).await;
    let target = plain_client(&pg.create_database(&target_db).await.expect("target db")).await;
    source.batch_execute(ddl).await.expect("source ddl");
    let dir = tempfile::Builder::new()
        .prefix(&format!("weir-test-{name}-"))
        .tempdir()
        .expect("tempdir");
    let db = TestDb {
        name: name.to_owned(),
        dsn: String::new(),
        dir,
    };
    std::fs::write(
        db.config_path(),
        postgres_config(name, extra_source, &format!("[[table]]\n{table}\n")),
    )
    .expect("config");
    TlsFeed {
        db,
        source,
        target,
        source_db,
        target_db,
        port: pg.port(),
        socket_dir: pg.socket_dir().to_owned(),
        files,
    }
}

impl TlsFeed {
    /// A URL DSN for the source or target database as [`TLS_USER`] (with its password)
    /// at `host`, with the query parameters `params`.
    pub fn dsn(&self, target: bool, host: &str, params: &str) -> String {
        let db = if target {
            &self.target_db
        } else {
            &self.source_db
        };
        format!(
            "postgres://{TLS_USER}:{TLS_PASSWORD}@{host}:{}/{db}?{params}",
            self.port
        )
    }

    /// A URL DSN as [`CERT_USER`] (no password) with the query parameters `params`.
    fn cert_dsn(&self, target: bool, params: &str) -> String {
        let db = if target {
            &self.target_db
        } else {
            &self.source_db
        };
        format!(
            "postgres://{CERT_USER}@127.0.0.1:{}/{db}?{params}",
            self.port
        )
    }

    /// `sslmode=verify-full` with the test CA: the DSN that works.
    pub fn good(&self, target: bool) -> String {
        self.dsn(
            target,
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={}", path(&self.files.ca)),
        )
    }

    /// Runs `weir ARGS` with these DSNs, at debug level, with a HOME of its own (no
    /// `~/.postgresql` files), and checks that no output holds the password.
    fn weir(&self, args: &[&str], source_dsn: &str, target_dsn: &str) -> Output {
        let out = self
            .db
            .weir_command(args)
            .env("WEIR_SOURCE_DSN", source_dsn)
            .env("WEIR_TARGET_DSN", target_dsn)
            .env("HOME", self.db.dir.path())
            .env("RUST_LOG", "debug")
            .output()
            .expect("run weir");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(
            !all.contains(TLS_PASSWORD),
            "weir {args:?} printed the password:\n{all}"
        );
        out
    }

    fn weir_ok(&self, args: &[&str], source_dsn: &str, target_dsn: &str) {
        let out = self.weir(args, source_dsn, target_dsn);
        assert!(
            out.status.success(),
            "weir {args:?} failed: {}\n{}",
            out.status,
            tail(&text(&out.stderr))
        );
    }

    /// Runs `weir ARGS`, expects it to fail with `code`, and returns its stderr.
    fn weir_fails(&self, args: &[&str], source_dsn: &str, target_dsn: &str, code: i32) -> String {
        let out = self.weir(args, source_dsn, target_dsn);
        let stderr = text(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(code),
            "weir {args:?} should fail with {code}:\n{}",
            tail(&stderr)
        );
        for line in stderr.lines().filter(|l| l.contains("error")) {
            eprintln!("weir {args:?}: {line}");
        }
        stderr
    }

    /// The target holds exactly the source's rows.
    async fn assert_target_equals_source(&self) {
        let want = rows(&self.source, "public.orders").await;
        let got = rows(&self.target, "analytics.fact_orders").await;
        assert!(!want.is_empty());
        assert_eq!(got, want, "the target differs from the source");
    }
}

type Row = (i64, String, Option<String>, Option<String>);

async fn rows(client: &Client, table: &str) -> Vec<Row> {
    let sql = format!("SELECT id, order_date::text, amount::text, note FROM {table} ORDER BY id");
    client
        .query(&sql, &[])
        .await
        .expect("read rows")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The last lines of a log, for failure messages.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Changes made after `init`, which only replication carries to the target.
const CHANGES: &str = "INSERT INTO orders SELECT g, date '2026-03-01' + (g % 5), g * 0.5, 'after init ' || g FROM generate_series(51, 80) g;
UPDATE orders SET amount = 1.11, note = 'updated' WHERE id % 7 = 0;
DELETE FROM orders WHERE id % 11 = 0;";

/// `require` (no verification), `verify-ca` (to `localhost`, which the certificate does
/// not name: verify-ca checks the chain only) and `verify-full` with
/// `channel_binding=require`, on both DSNs: init, run --once and backfill work, and
/// the changes made after init arrive in the target.
#[tokio::test(flavor = "multi_thread")]
async fn init_run_and_backfill_work_over_tls_in_every_verifying_mode() {
    for (name, host, params) in [
        ("tls_require", "127.0.0.1", "sslmode=require".to_owned()),
        (
            "tls_verify_ca",
            "localhost",
            "sslmode=verify-ca&hostaddr=127.0.0.1&sslrootcert=CA".to_owned(),
        ),
        (
            "tls_verify_full",
            "127.0.0.1",
            "sslmode=verify-full&sslrootcert=CA&channel_binding=require".to_owned(),
        ),
    ] {
        let feed = tls_feed(name, DDL, "", &table()).await;
        let params = params.replace("CA", &path(&feed.files.ca));
        let (source_dsn, target_dsn) = (
            feed.dsn(false, host, &params),
            feed.dsn(true, host, &params),
        );
        feed.weir_ok(&["init"], &source_dsn, &target_dsn);
        feed.source.batch_execute(CHANGES).await.expect("changes");
        feed.weir_ok(&["run", "--once"], &source_dsn, &target_dsn);
        feed.assert_target_equals_source().await;
        // Damage a partition by hand; the backfill rebuilds it from the stage.
        feed.target
            .batch_execute("DELETE FROM analytics.fact_orders WHERE order_date = '2026-03-02'")
            .await
            .expect("damage the target");
        feed.weir_ok(
            &[
                "backfill",
                "--table",
                "public.orders",
                "--from",
                "2026-03-01",
                "--to",
                "2026-03-10",
            ],
            &source_dsn,
            &target_dsn,
        );
        feed.assert_target_equals_source().await;
    }
}

/// Over the server's Unix socket TLS is never used, whatever the sslmode (as in libpq),
/// for the SQL connections and the replication connection alike.
#[tokio::test(flavor = "multi_thread")]
async fn a_unix_socket_is_used_without_tls_whatever_the_sslmode() {
    let feed = tls_feed("tls_socket", DDL, "", &table()).await;
    let socket = |target: bool| {
        format!(
            "host={} port={} user={TLS_USER} password={TLS_PASSWORD} dbname={} sslmode=verify-full sslrootcert={}",
            path(&feed.socket_dir),
            feed.port,
            if target {
                &feed.target_db
            } else {
                &feed.source_db
            },
            path(&feed.files.ca)
        )
    };
    let (source_dsn, target_dsn) = (socket(false), socket(true));
    feed.weir_ok(&["init"], &source_dsn, &target_dsn);
    feed.source.batch_execute(CHANGES).await.expect("changes");
    feed.weir_ok(&["run", "--once"], &source_dsn, &target_dsn);
    feed.assert_target_equals_source().await;
}

/// A role that the server authenticates by its client certificate (`cert`) gets in
/// with `sslcert`/`sslkey`, for init and replication.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_authenticates_init_and_run() {
    let feed = tls_feed("tls_cert", DDL, "", &table()).await;
    let params = format!(
        "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
        path(&feed.files.ca),
        path(&feed.files.client_cert),
        path(&feed.files.client_key)
    );
    let (source_dsn, target_dsn) = (feed.cert_dsn(false, &params), feed.cert_dsn(true, &params));
    feed.weir_ok(&["init"], &source_dsn, &target_dsn);
    feed.source.batch_execute(CHANGES).await.expect("changes");
    feed.weir_ok(&["run", "--once"], &source_dsn, &target_dsn);
    feed.assert_target_equals_source().await;

    // Without the certificate the server refuses, and the error says what to set.
    let without = feed.cert_dsn(
        true,
        &format!("sslmode=verify-full&sslrootcert={}", path(&feed.files.ca)),
    );
    let stderr = feed.weir_fails(&["init"], &source_dsn, &without, 1);
    assert!(stderr.contains("sslcert"), "{}", tail(&stderr));
}

/// Each failure names the host and what failed, with the exit code the README gives
/// (1 for a connection that fails, 2 for an invalid parameter), and never the password.
#[tokio::test(flavor = "multi_thread")]
async fn tls_failures_are_clear_and_name_the_host() {
    let feed = tls_feed("tls_failures", DDL, "", &table()).await;
    let (good_source, good_target) = (feed.good(false), feed.good(true));
    let ca = path(&feed.files.ca);
    let other_ca = path(&feed.files.other_ca);

    // A CA that did not sign the server's certificate.
    let wrong_ca = feed.dsn(
        false,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other_ca}"),
    );
    let stderr = feed.weir_fails(&["init"], &wrong_ca, &good_target, 1);
    assert!(
        stderr.contains("TLS with 127.0.0.1")
            && stderr.contains("certificate is not trusted")
            && stderr.contains("(unknown CA)"),
        "{}",
        tail(&stderr)
    );

    // verify-full to a name the certificate does not hold (it names 127.0.0.1 only).
    let wrong_name = feed.dsn(
        true,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}&hostaddr=127.0.0.1"),
    );
    let stderr = feed.weir_fails(&["init"], &good_source, &wrong_name, 1);
    assert!(
        stderr.contains("TLS with localhost")
            && stderr.contains("host name mismatch")
            && stderr.contains("(it is for 127.0.0.1)"),
        "{}",
        tail(&stderr)
    );

    // No TLS for a role the server lets in only over TLS.
    let plain = feed.dsn(false, "127.0.0.1", "sslmode=disable");
    let stderr = feed.weir_fails(&["init"], &plain, &good_target, 1);
    assert!(
        stderr.contains("refuses connections without TLS")
            && stderr.contains("set sslmode=require"),
        "{}",
        tail(&stderr)
    );

    // verify-full without a root certificate (HOME has no ~/.postgresql/root.crt).
    let no_roots = feed.dsn(true, "127.0.0.1", "sslmode=verify-full");
    let stderr = feed.weir_fails(&["init"], &good_source, &no_roots, 1);
    assert!(stderr.contains("set sslrootcert"), "{}", tail(&stderr));

    // A root file that does not exist.
    let missing = feed.dsn(
        true,
        "127.0.0.1",
        "sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem",
    );
    let stderr = feed.weir_fails(&["init"], &good_source, &missing, 1);
    assert!(
        stderr.contains("sslrootcert /nonexistent/ca.pem: does not exist"),
        "{}",
        tail(&stderr)
    );

    // An invalid sslmode is a configuration error (2), named without its value.
    let invalid = feed.dsn(true, "127.0.0.1", "sslmode=verify-everything");
    let stderr = feed.weir_fails(&["init"], &good_source, &invalid, 2);
    assert!(
        stderr.contains("WEIR_TARGET_DSN: connection parameter sslmode: must be one of")
            && !stderr.contains("verify-everything"),
        "{}",
        tail(&stderr)
    );

    // Replication over TLS fails as clearly: init with good DSNs, then run --once with
    // the wrong CA on the source.
    feed.weir_ok(&["init"], &good_source, &good_target);
    let stderr = feed.weir_fails(&["run", "--once"], &wrong_ca, &good_target, 1);
    assert!(
        stderr.contains("TLS with 127.0.0.1")
            && stderr.contains("certificate is not trusted")
            && stderr.contains("(unknown CA)"),
        "{}",
        tail(&stderr)
    );
    feed.weir_ok(&["run", "--once"], &good_source, &good_target);
    feed.assert_target_equals_source().await;
}

/// A source database `{name}_source` on the TLS cluster, made with `ddl`: the DSN
/// Weir reads it with ([`TLS_USER`], `verify-full` with the test CA,
/// `channel_binding=require`), a plain DSN as `postgres` (for writers and checks),
/// and a plain client.
pub(crate) async fn tls_source(name: &str, ddl: &str) -> (String, String, Client) {
    let pg = tokio::task::spawn_blocking(tls_cluster)
        .await
        .expect("cluster thread");
    let files = pg.tls_files().expect("the TLS cluster has certificates");
    let db = format!("{name}_source");
    let plain_dsn = pg.create_database(&db).await.expect("source db");
    let client = plain_client(&plain_dsn).await;
    client.batch_execute(ddl).await.expect("source ddl");
    let weir_dsn = format!(
        "postgres://{TLS_USER}:{TLS_PASSWORD}@127.0.0.1:{}/{db}?sslmode=verify-full&sslrootcert={}&channel_binding=require",
        pg.port(),
        path(&files.ca)
    );
    (weir_dsn, plain_dsn, client)
}
