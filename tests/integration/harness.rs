//! The integration harness: one throwaway PostgreSQL cluster per test process (stopped
//! and removed at exit, also when a test panics or the process is killed: see
//! `weir::localpg`), one database per test, the `weir` binary, and an oracle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::json;
use tokio_postgres::Client;
use weir::localpg::{LocalPg, LocalPgOptions};
use weir_core::fixtures::{OrdersTable, jsonl_config};

/// The role whose password the secret-handling tests use. Its password is only ever
/// passed through a DSN environment variable.
/// The orders table of a PostgreSQL source, as most source tests create it.
pub const ORDERS_DDL: &str = "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, amount numeric(12,2), status text)";

pub const SECRET_USER: &str = "weir_secret_user";
pub const SECRET_PASSWORD: &str = "S3cret-Pa55word-never-logged";

static CLUSTER: OnceLock<LocalPg> = OnceLock::new();

/// The roles of the TLS cluster ([`tls_cluster`]): one let in only over TLS with its
/// password (scram-sha-256), one only over TLS with a client certificate.
pub const TLS_USER: &str = "weir_tls_user";
pub const TLS_PASSWORD: &str = "Tls-Pa55word-never-logged";
pub const CERT_USER: &str = "weir_cert_user";

static TLS_CLUSTER: OnceLock<LocalPg> = OnceLock::new();

/// A second cluster, started on first use by the tests that need TLS: `ssl = on`, a
/// test CA and a server certificate for 127.0.0.1 (see `LocalPg::tls_files`),
/// [`TLS_USER`] and [`CERT_USER`] refused without TLS. `postgres` connects as in
/// [`cluster`] (trust, plain), for the tests' own checks.
pub fn tls_cluster() -> &'static LocalPg {
    TLS_CLUSTER.get_or_init(|| {
        let options = LocalPgOptions {
            tls: Some(weir::localpg::LocalPgTls {
                tls_user: (TLS_USER.into(), TLS_PASSWORD.into()),
                cert_user: CERT_USER.into(),
            }),
            ..LocalPgOptions::default()
        };
        LocalPg::start(&options).expect("start the TLS test PostgreSQL cluster")
    })
}

/// The process's cluster, started on first use.
pub fn cluster() -> &'static LocalPg {
    CLUSTER.get_or_init(|| {
        // WEIR_PG_STREAM_IMMEDIATE (PostgreSQL 16 and later): every transaction is
        // streamed in progress, change by change, so the source tests run through
        // the streamed path as well as the whole-transaction one.
        let extra_settings = if std::env::var_os("WEIR_PG_STREAM_IMMEDIATE").is_some() {
            vec![(
                "debug_logical_replication_streaming".to_owned(),
                "immediate".to_owned(),
            )]
        } else {
            Vec::new()
        };
        let options = LocalPgOptions {
            password_user: Some((SECRET_USER.into(), SECRET_PASSWORD.into())),
            extra_settings,
            ..LocalPgOptions::default()
        };
        LocalPg::start(&options).expect("start the test PostgreSQL cluster")
    })
}

/// A test's own database, work folder and config.
pub struct TestDb {
    pub name: String,
    pub dsn: String,
    pub dir: tempfile::TempDir,
}

impl TestDb {
    /// Creates database `name` (unique per test) in the shared cluster.
    pub async fn new(name: &str) -> TestDb {
        let pg = tokio::task::spawn_blocking(cluster)
            .await
            .expect("cluster thread");
        let dsn = pg
            .create_database(name)
            .await
            .expect("create test database");
        let dir = tempfile::Builder::new()
            .prefix(&format!("weir-test-{name}-"))
            .tempdir()
            .expect("tempdir");
        TestDb {
            name: name.to_owned(),
            dsn,
            dir,
        }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn config_path(&self) -> PathBuf {
        self.path("weir.toml")
    }

    /// Writes `weir.toml` for the orders feed `feed.jsonl`; `source_extra` and
    /// `table_extra` are added to the `[source]` and `[[table]]` sections.
    pub fn write_config(&self, source_extra: &str, table_extra: &str, engine: &str) {
        self.write_feed_config(
            source_extra,
            engine,
            &orders_table("public.orders", "analytics.fact_orders", table_extra),
        );
    }

    /// Writes `weir.toml` for the JSON-lines feed `feed.jsonl` with the given `[engine]`
    /// settings and `[[table]]` sections.
    pub fn write_feed_config(&self, source_extra: &str, engine: &str, tables: &str) {
        let text = jsonl_config(source_extra, engine, tables);
        std::fs::write(self.config_path(), text).expect("write config");
    }

    /// The one `bigint` a query returns (`SELECT count(*) …`).
    pub async fn count(&self, sql: &str) -> i64 {
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    pub fn write_feed(&self, lines: &[String]) {
        std::fs::write(self.path("feed.jsonl"), lines.concat()).expect("write feed");
    }

    pub fn append_feed(&self, lines: &[String]) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.path("feed.jsonl"))
            .expect("open feed");
        f.write_all(lines.concat().as_bytes()).expect("append feed");
    }

    /// A `weir` command with this test's config and target DSN.
    pub fn weir_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("--config")
            .arg(self.config_path())
            .args(args)
            .env("WEIR_TARGET_DSN", &self.dsn)
            .env(
                "RUST_LOG",
                std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "info".into()),
            );
        cmd
    }

    /// Runs `weir` to completion.
    pub fn weir(&self, args: &[&str]) -> Output {
        self.weir_command(args).output().expect("run weir")
    }

    /// Runs `weir` and fails the test, with its output, unless it succeeds.
    pub fn weir_ok(&self, args: &[&str]) -> String {
        let out = self.weir(args);
        assert!(
            out.status.success(),
            "weir {args:?} failed: {}\nstdout: {}\nstderr: {}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    pub async fn client(&self) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.dsn, tokio_postgres::NoTls)
            .await
            .expect("connect to test db");
        tokio::spawn(connection);
        client
    }
}

/// A `[[table]]` of the orders feed (`public.orders`-shaped rows) partitioned by day on
/// `order_date`, with `extra` lines added (a plugin, its config, …): the shared
/// [`OrdersTable`] fixture.
pub fn orders_table(source: &str, target: &str, extra: &str) -> String {
    OrdersTable::jsonl(target)
        .source(source)
        .extra(extra)
        .to_string()
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One order as the oracle holds it; all values as PostgreSQL prints them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Order {
    pub id: i64,
    pub customer: String,
    pub order_date: Option<String>,
    pub amount: String,
    pub status: String,
}

impl Order {
    pub fn image(&self) -> serde_json::Value {
        json!({"id": self.id, "customer": self.customer, "order_date": self.order_date, "amount": self.amount, "status": self.status})
    }
}

/// A Debezium envelope line.
pub fn envelope(
    op: &str,
    tx: Option<u64>,
    before: Option<&Order>,
    after: Option<&Order>,
) -> String {
    let mut source = json!({"schema": "public", "table": "orders", "ts_ms": 1_772_323_200_000u64});
    if let Some(tx) = tx {
        source["txId"] = json!(tx);
    }
    let line = json!({
        "op": op,
        "before": before.map(Order::image),
        "after": after.map(Order::image),
        "source": source,
        "ts_ms": 1_772_323_200_000u64,
    });
    format!("{line}\n")
}

/// The oracle: the expected final state, computed from the generated changes alone.
#[derive(Debug, Default, Clone)]
pub struct Model {
    pub rows: BTreeMap<i64, Order>,
}

/// A deterministic pseudo-random sequence for workloads (no clock, no entropy).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
            | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Generates `changes` changes over `days` days starting 2026-03-01: inserts, updates
/// (some moving the order to another day), deletes, grouped in transactions of one to
/// five lines. Returns the feed lines and the model of the final state.
pub fn orders_workload(seed: u64, changes: usize, days: u32) -> (Vec<String>, Model) {
    let mut workload = Workload::new(seed, days);
    let lines = workload.lines(changes, 5);
    (lines, workload.model)
}

/// An orders workload that can go on: every call continues the same history.
pub struct Workload {
    rng: Rng,
    pub model: Model,
    next_id: i64,
    tx: u64,
    days: u32,
}

impl Workload {
    pub fn new(seed: u64, days: u32) -> Workload {
        Workload {
            rng: Rng::new(seed),
            model: Model::default(),
            next_id: 1,
            tx: 0,
            days,
        }
    }

    fn day(&mut self) -> String {
        let d = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).expect("date")
            + chrono::Duration::days(self.rng.below(u64::from(self.days)) as i64);
        d.format("%Y-%m-%d").to_string()
    }

    /// `changes` more changes in transactions of one to `tx_lines_max` lines.
    pub fn lines(&mut self, changes: usize, tx_lines_max: u64) -> Vec<String> {
        let mut lines = Vec::with_capacity(changes);
        while lines.len() < changes {
            self.tx += 1;
            let size = 1 + self.rng.below(tx_lines_max) as usize;
            for _ in 0..size.min(changes - lines.len()) {
                lines.push(self.change());
            }
        }
        lines
    }

    /// One transaction of exactly `changes` lines.
    pub fn large_transaction(&mut self, changes: usize) -> Vec<String> {
        self.tx += 1;
        (0..changes).map(|_| self.change()).collect()
    }

    /// One random change in the current transaction, applied to the model.
    fn change(&mut self) -> String {
        let tx = self.tx;
        let roll = self.rng.below(10);
        let existing: Option<i64> = if self.model.rows.is_empty() {
            None
        } else {
            let probe = 1 + self.rng.below(self.next_id as u64) as i64;
            let rows = &self.model.rows;
            rows.range(probe..)
                .next()
                .or_else(|| rows.iter().next())
                .map(|(k, _)| *k)
        };
        match (roll, existing) {
            (0..=5, _) | (_, None) => {
                let order = Order {
                    id: self.next_id,
                    customer: format!("customer-{}", self.rng.below(500)),
                    order_date: Some(self.day()),
                    amount: format!("{}.{:02}", self.rng.below(100_000), self.rng.below(100)),
                    status: "new".into(),
                };
                self.next_id += 1;
                let line = envelope("c", Some(tx), None, Some(&order));
                self.model.rows.insert(order.id, order);
                line
            }
            (6..=8, Some(id)) => {
                let before = self.model.rows[&id].clone();
                let mut after = before.clone();
                after.status = ["paid", "shipped", "returned"][self.rng.below(3) as usize].into();
                after.amount = format!("{}.{:02}", self.rng.below(100_000), self.rng.below(100));
                if roll == 8 {
                    after.order_date = Some(self.day()); // a restatement: may move partitions
                }
                let line = envelope("u", Some(tx), Some(&before), Some(&after));
                self.model.rows.insert(id, after);
                line
            }
            (_, Some(id)) => {
                let before = self.model.rows.remove(&id).expect("existing row");
                envelope("d", Some(tx), Some(&before), None)
            }
        }
    }
}

/// Compares the target with the model; reports missing and extra rows separately.
pub async fn assert_target_matches(client: &Client, table: &str, model: &Model) {
    let rows = client
        .query(&format!("SELECT id, customer, order_date::text, amount::text, status FROM {table} ORDER BY id"), &[])
        .await
        .expect("read target");
    let mut actual: BTreeMap<i64, Vec<Order>> = BTreeMap::new();
    for r in &rows {
        let o = Order {
            id: r.get(0),
            customer: r.get(1),
            order_date: r.get(2),
            amount: r.get(3),
            status: r.get(4),
        };
        actual.entry(o.id).or_default().push(o);
    }
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    for (id, want) in &model.rows {
        match actual.get(id).map(Vec::as_slice) {
            Some([got]) if got == want => {}
            Some(got) => {
                missing.push(want.clone());
                extra.extend(got.iter().cloned());
            }
            None => missing.push(want.clone()),
        }
    }
    for (id, got) in &actual {
        if !model.rows.contains_key(id) {
            extra.extend(got.iter().cloned());
        }
    }
    assert!(
        missing.is_empty() && extra.is_empty(),
        "target differs from the model: {} missing, {} extra\nmissing (first 5): {:?}\nextra (first 5): {:?}",
        missing.len(),
        extra.len(),
        &missing[..missing.len().min(5)],
        &extra[..extra.len().min(5)]
    );
}

/// Lineage rows: (partition, row_count, checksum, stage_generation).
pub async fn lineage(client: &Client) -> Vec<(String, i64, String, i64)> {
    client
        .query("SELECT partition, row_count, checksum, stage_generation FROM weir.partitions ORDER BY partition", &[])
        .await
        .expect("read lineage")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A child process killed when dropped: a test that fails part way does not leave a
/// `weir run` behind.
#[derive(Debug)]
pub struct Reaped(pub std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl TestDb {
    /// Starts a live `weir run` logging to `log`, with extra environment variables
    /// (a source DSN); killed when dropped.
    pub fn spawn_live(&self, env: &[(&str, &str)], log: &Path) -> Reaped {
        self.spawn_live_with(&[], env, log)
    }

    /// [`TestDb::spawn_live`] with extra arguments to `weir run`.
    pub fn spawn_live_with(&self, args: &[&str], env: &[(&str, &str)], log: &Path) -> Reaped {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let mut cmd = self.weir_command(&all);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Reaped(
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(log).expect("log"))
                .spawn()
                .expect("start weir run"),
        )
    }

    /// Waits until the live engine has staged the whole feed and written every dirty
    /// partition (per `weir status`), or fails after `secs` with the status.
    pub async fn wait_caught_up(&self, secs: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let status: serde_json::Value =
                serde_json::from_str(&self.weir_ok(&["status", "--json"])).expect("status");
            if status["position"].as_u64() == Some(file_len(&self.path("feed.jsonl")))
                && status["dirty_partitions"]
                    .as_array()
                    .is_some_and(Vec::is_empty)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the engine did not catch up: {status}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// A source database `<name>_source` in the shared cluster with `ddl` run in it: its
/// DSN and a client.
pub async fn source_db(name: &str, ddl: &str) -> (String, tokio_postgres::Client) {
    let pg = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let dsn = pg
        .create_database(&format!("{name}_source"))
        .await
        .expect("source database");
    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("source");
    tokio::spawn(connection);
    client.batch_execute(ddl).await.expect("source ddl");
    (dsn, client)
}
