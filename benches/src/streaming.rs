//! Section 8: streaming. PostgreSQL → a live `weir run` (the `weir` binary, the Rust
//! `orders` plugin) → PostgreSQL, against a native subscription (the peer) and the
//! limits of this machine:
//!
//! * latency: a writer commits the replication section's workload at a steady rate
//!   (`--stream-rate` transactions/s of 10 changes, for `--stream-seconds`); every row's
//!   time from its transaction's COMMIT returning to the row first visible in the target,
//!   recorded by a trigger on the target table; p50 and p99, for Weir and the peer;
//! * sustained rate: a backlog of `--stream-backlog` changes caught up by a live
//!   `weir run` with the plugin, by one without (identity: the plugin's overhead) and by
//!   the peer, each from its own slot made before the backlog; against `pg_recvlogical`
//!   on the same backlog (the decode limit) and one binary COPY of its final rows;
//! * recovery: `weir run` SIGKILLed `--recovery-kills` times while the steady workload
//!   runs, restarted after `--recovery-down-ms`; the time from the restart to the first
//!   new row visible and to every row committed before the restart visible.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use weir::demo::Sequence;
use weir::localpg::LocalPg;
use weir::value::Value;

use crate::Args;
use crate::cluster::{SOURCE_DSN_ENV, TARGET_DSN_ENV, connect, recvlogical, slot_released};
use crate::measure::{cluster_cpu, load_average, median, seconds_list};
use crate::orders::{
    CHANGES_PER_TRANSACTION, REPL_DIGEST, REPL_TABLE_DDL, copy_orders, digest,
    workload_transaction, write_orders_workload,
};

/// The publication of every streaming source database.
const PUBLICATION: &str = "stream_pub";
/// The plugin's config: the exchange rate of `amount_eur`.
const RATE: &str = "1.0825";
/// Weir's target table.
const TARGET: &str = "analytics.fact_orders";
/// The digest of the plugin's output, in the columns it shares with the source (the
/// plugin upper-cases `status`); `amount_eur` is the plugin's own. Amounts are compared
/// at the source's scale.
const PLUGIN_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
     order_date, amount::numeric(12,2), status), ',' ORDER BY id), '')) FROM analytics.fact_orders";
const SOURCE_PLUGIN_DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, \
     customer, order_date, amount::numeric(12,2), upper(status)), ',' ORDER BY id), '')) FROM orders";
/// The visibility recorder: a table of the first time each id was seen, in microseconds
/// since the epoch of the server's clock (`clock_timestamp()`, the machine's clock).
const SEEN_DDL: &str =
    "CREATE TABLE public.bench_seen (id bigint PRIMARY KEY, seen_us bigint NOT NULL)";
/// Weir's target: a statement-level trigger over the COPY's transition table.
const SEEN_STATEMENT_TRIGGER: &str = "CREATE FUNCTION public.bench_seen_rows() RETURNS trigger \
     LANGUAGE plpgsql AS $$ BEGIN \
       INSERT INTO public.bench_seen SELECT id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
       FROM new_rows ON CONFLICT (id) DO NOTHING; RETURN NULL; END $$; \
     CREATE TRIGGER bench_seen AFTER INSERT ON analytics.fact_orders REFERENCING NEW TABLE AS new_rows \
       FOR EACH STATEMENT EXECUTE FUNCTION public.bench_seen_rows()";
/// The subscriber: a row trigger (the apply worker fires row triggers only, and only
/// those enabled ALWAYS or REPLICA).
const SEEN_ROW_TRIGGER: &str = "CREATE FUNCTION public.bench_seen_row() RETURNS trigger \
     LANGUAGE plpgsql AS $$ BEGIN \
       INSERT INTO public.bench_seen VALUES (NEW.id, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) \
       ON CONFLICT (id) DO NOTHING; RETURN NULL; END $$; \
     CREATE TRIGGER bench_seen AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION public.bench_seen_row(); \
     ALTER TABLE orders ENABLE ALWAYS TRIGGER bench_seen";
/// How often a catching-up consumer is polled for the backlog's last row.
const POLL: Duration = Duration::from_millis(50);
/// Every wait of this section is bounded by this.
const WAIT_MAX: Duration = Duration::from_secs(300);

/// Microseconds since the epoch, of this machine's clock.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// p50, p99 and the maximum of a set of latencies, in ms.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub rows: usize,
}

impl Latency {
    fn of(us: &mut [i64]) -> Latency {
        us.sort_unstable();
        let at = |q: f64| {
            let i = ((us.len() as f64 * q).ceil() as usize).clamp(1, us.len().max(1)) - 1;
            us.get(i).copied().unwrap_or_default() as f64 / 1000.0
        };
        Latency {
            p50: at(0.50),
            p99: at(0.99),
            max: at(1.0),
            rows: us.len(),
        }
    }
}

/// The figures of this section, for the summary at the top of the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Figures {
    pub flush_ms: u64,
    pub offered_changes_per_s: f64,
    pub weir_latency: Latency,
    pub peer_latency: Latency,
    pub backlog_changes: u64,
    pub backlog_rows: i64,
    pub weir_plugin: Duration,
    pub weir_identity: Duration,
    pub peer: Duration,
    pub recvlogical: Duration,
    pub copy: Duration,
    /// Median of the restarts: to the first new row visible, to caught up.
    pub first_visible: Duration,
    pub caught_up: Duration,
    pub kills: usize,
}

impl Figures {
    pub fn rate(&self, d: Duration) -> f64 {
        self.backlog_changes as f64 / d.as_secs_f64()
    }
}

/// A Weir of this section: its folder (config, stage, logs) and databases.
struct WeirConsumer {
    dir: tempfile::TempDir,
    source_dsn: String,
    target_dsn: String,
    slot: String,
    runs: usize,
}

impl WeirConsumer {
    /// Writes the config (`plugin`: the Rust orders plugin; else the identity) and runs
    /// `weir init` (slot, stage, target table), then `run --once` on the still empty
    /// table (its empty initial snapshot), untimed.
    async fn new(
        weir: &Path,
        pg: &LocalPg,
        source_db: &str,
        target_db: &str,
        plugin: Option<&Path>,
        flush_ms: u64,
    ) -> anyhow::Result<WeirConsumer> {
        let dir = tempfile::tempdir()?;
        let slot = format!("{target_db}_slot");
        let plugin = plugin.map_or_else(String::new, |p| {
            format!(
                "plugin = \"{}\"\n\n[table.plugin_config]\nrate = \"{RATE}\"\n",
                p.display()
            )
        });
        std::fs::write(
            dir.path().join("weir.toml"),
            format!(
                r#"[source]
kind = "postgres"
dsn_env = "{SOURCE_DSN_ENV}"
slot = "{slot}"
publication = "{PUBLICATION}"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "{TARGET_DSN_ENV}"

[engine]
flush_interval_ms = {flush_ms}

[[table]]
source = "public.orders"
target = "{TARGET}"
key = ["id"]
partition_by = "order_date"
grain = "day"
{plugin}"#
            ),
        )?;
        let consumer = WeirConsumer {
            dir,
            source_dsn: pg.dsn(source_db),
            target_dsn: pg.create_database(target_db).await?,
            slot,
            runs: 0,
        };
        for args in [&["init"][..], &["run", "--once"]] {
            let out = consumer.command(weir, args)?.output().await?;
            anyhow::ensure!(
                out.status.success(),
                "weir {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(consumer)
    }

    fn command(&self, weir: &Path, args: &[&str]) -> anyhow::Result<tokio::process::Command> {
        let mut cmd = tokio::process::Command::new(weir);
        cmd.arg("--config")
            .arg(self.dir.path().join("weir.toml"))
            .args(["--log-format", "json"])
            .args(args)
            .current_dir(self.dir.path())
            .env(SOURCE_DSN_ENV, &self.source_dsn)
            .env(TARGET_DSN_ENV, &self.target_dsn)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        Ok(cmd)
    }

    /// Spawns `weir run` (live), its log (JSON on stderr) in `run-N.log`.
    fn spawn(&mut self, weir: &Path) -> anyhow::Result<tokio::process::Child> {
        self.runs += 1;
        let log = std::fs::File::create(self.log(self.runs))?;
        let mut cmd = self.command(weir, &["run"])?;
        cmd.stderr(log);
        cmd.spawn().context("spawn weir run")
    }

    fn log(&self, run: usize) -> PathBuf {
        self.dir.path().join(format!("run-{run}.log"))
    }

    /// The last lines of the latest run's log, for an error.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log(self.runs)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// SIGTERM, and wait (bounded) for a clean exit.
    async fn stop(&self, child: &mut tokio::process::Child) -> anyhow::Result<()> {
        let pid = child.id().context("weir run already reaped")?;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill -TERM {pid} failed");
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .context("weir run did not stop within 60 s of SIGTERM")??;
        anyhow::ensure!(
            status.success(),
            "weir run exited with {status}: {}",
            self.log_tail()
        );
        Ok(())
    }
}

/// Waits (bounded) until a walsender serves `slot`: its consumer is streaming.
/// A source database `name` and a live `weir run` of it through the plugin into
/// `{name}_target`, whose table records when each id is first seen; returned once the
/// slot is active and the engine has had two flush intervals to settle.
async fn live_consumer(
    weir: &Path,
    pg: &LocalPg,
    name: &str,
    plugin: &Path,
    flush_ms: u64,
) -> anyhow::Result<(
    tokio_postgres::Client,
    WeirConsumer,
    tokio_postgres::Client,
    tokio::process::Child,
)> {
    let source = source_database(pg, name).await?;
    let target_db = format!("{name}_target");
    let mut consumer =
        WeirConsumer::new(weir, pg, name, &target_db, Some(plugin), flush_ms).await?;
    let target = connect(&consumer.target_dsn).await?;
    target.batch_execute(SEEN_DDL).await?;
    target.batch_execute(SEEN_STATEMENT_TRIGGER).await?;
    let child = consumer.spawn(weir)?;
    slot_active(&source, &consumer.slot).await?;
    tokio::time::sleep(Duration::from_millis(2 * flush_ms + 500)).await;
    Ok((source, consumer, target, child))
}

async fn slot_active(source: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let active: Option<bool> = source
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await?
            .map(|r| r.get(0));
        if active == Some(true) {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < WAIT_MAX,
            "slot {slot} did not become active"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Drops `slot` once no walsender serves it.
async fn drop_slot(source: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    slot_released(source, slot).await?;
    source
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// A source database: the orders table and its publication.
async fn source_database(pg: &LocalPg, db: &str) -> anyhow::Result<tokio_postgres::Client> {
    let client = connect(&pg.create_database(db).await?).await?;
    client
        .batch_execute(&format!(
            "{REPL_TABLE_DDL}; CREATE PUBLICATION {PUBLICATION} FOR TABLE orders"
        ))
        .await?;
    Ok(client)
}

/// A subscriber database: the same table, a disabled subscription to `source_db` on a
/// slot made beforehand (`sub` names both), and the visibility recorder if `seen`.
async fn subscriber(
    pg: &LocalPg,
    source: &tokio_postgres::Client,
    source_db: &str,
    sub: &str,
    seen: bool,
) -> anyhow::Result<tokio_postgres::Client> {
    source
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&sub],
        )
        .await?;
    let client = connect(&pg.create_database(sub).await?).await?;
    client.batch_execute(REPL_TABLE_DDL).await?;
    if seen {
        client.batch_execute(SEEN_DDL).await?;
        client.batch_execute(SEEN_ROW_TRIGGER).await?;
    }
    let conninfo = format!(
        "host={} port={} user=postgres dbname={source_db}",
        pg.host(),
        pg.port()
    );
    client
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION {sub} CONNECTION '{conninfo}' PUBLICATION {PUBLICATION} \
             WITH (create_slot = false, slot_name = '{sub}', copy_data = false, enabled = false)"
        ))
        .await?;
    Ok(client)
}

/// Disables and drops subscription `sub` and its slot.
async fn drop_subscription(
    subscriber: &tokio_postgres::Client,
    source: &tokio_postgres::Client,
    sub: &str,
) -> anyhow::Result<()> {
    // One statement per query: DROP SUBSCRIPTION may not run in a transaction block.
    for sql in [
        format!("ALTER SUBSCRIPTION {sub} DISABLE"),
        format!("ALTER SUBSCRIPTION {sub} SET (slot_name = NONE)"),
        format!("DROP SUBSCRIPTION {sub}"),
    ] {
        subscriber.batch_execute(&sql).await?;
    }
    drop_slot(source, sub).await
}

/// The launcher starts apply workers at most once per `wal_retrieve_retry_interval`:
/// a subscription is enabled at least that long (and 0.5 s) after the previous one
/// (the replication section enables its own before this section runs).
async fn enable_subscription(
    subscriber: &tokio_postgres::Client,
    sub: &str,
) -> anyhow::Result<Instant> {
    let retry_ms: i32 = subscriber
        .query_one(
            "SELECT setting::int FROM pg_settings WHERE name = 'wal_retrieve_retry_interval'",
            &[],
        )
        .await?
        .get(0);
    tokio::time::sleep(
        Duration::from_millis(u64::try_from(retry_ms)?) + Duration::from_millis(500),
    )
    .await;
    let started = Instant::now();
    subscriber
        .batch_execute(&format!("ALTER SUBSCRIPTION {sub} ENABLE"))
        .await?;
    Ok(started)
}

/// Polls (every [`POLL`]) until `id` is in `table` and `(rows, digest)` of the
/// consumer's table (`digest_sql`) equals `expected`; the time from `started`.
async fn caught_up(
    client: &tokio_postgres::Client,
    table: &str,
    id: i64,
    digest_sql: &str,
    expected: &(i64, String),
    started: Instant,
) -> anyhow::Result<Duration> {
    let probe = client
        .prepare(&format!(
            "SELECT EXISTS (SELECT 1 FROM {table} WHERE id = $1)"
        ))
        .await?;
    loop {
        let at = started.elapsed();
        if client.query_one(&probe, &[&id]).await?.get::<_, bool>(0) {
            let row = client.query_one(digest_sql, &[]).await?;
            if (row.get::<_, i64>(0), row.get::<_, String>(1)) == *expected {
                return Ok(at);
            }
        }
        anyhow::ensure!(
            at < WAIT_MAX,
            "{table} did not catch up within {WAIT_MAX:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// What the steady writer did: each transaction's COMMIT time (µs since the epoch, when
/// COMMIT returned) by transaction number; the ids it deleted.
#[derive(Debug, Default)]
struct Written {
    commit_us: Vec<i64>,
    deleted: Vec<i64>,
    elapsed: Duration,
}

impl Written {
    /// The ids still in the source, each with its transaction's commit time.
    fn surviving(&self) -> Vec<(i64, i64)> {
        let deleted: std::collections::HashSet<i64> = self.deleted.iter().copied().collect();
        (0..self.commit_us.len())
            .flat_map(|t| (1..=8).map(move |k| (8 * t as i64 + k, t)))
            .filter(|(id, _)| !deleted.contains(id))
            .map(|(id, t)| (id, self.commit_us[t]))
            .collect()
    }
}

/// Commits the workload's transactions (`write_orders_workload`'s, one per round trip)
/// at `rate` a second for `seconds`, paced by a tokio interval.
async fn steady_writer(source_dsn: String, rate: u64, seconds: u64) -> anyhow::Result<Written> {
    let client = connect(&source_dsn).await?;
    let mut seq = Sequence::new(23);
    let mut written = Written::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let mut sql = String::with_capacity(1024);
    let started = Instant::now();
    for t in 0..rate * seconds {
        tick.tick().await;
        sql.clear();
        let deleted = workload_transaction(&mut sql, &mut seq, t)?;
        client.batch_execute(&sql).await?;
        written.commit_us.push(now_us());
        written.deleted.extend(deleted.map(|id| id as i64));
    }
    written.elapsed = started.elapsed();
    Ok(written)
}

/// Waits (bounded) until every surviving id is in `bench_seen`; then reads it.
async fn seen_all(
    target: &tokio_postgres::Client,
    surviving: &[(i64, i64)],
) -> anyhow::Result<HashMap<i64, i64>> {
    let started = Instant::now();
    loop {
        let rows = target
            .query("SELECT id, seen_us FROM public.bench_seen", &[])
            .await?;
        let seen: HashMap<i64, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        if surviving.iter().all(|(id, _)| seen.contains_key(id)) {
            return Ok(seen);
        }
        anyhow::ensure!(
            started.elapsed() < WAIT_MAX,
            "not every committed row became visible within {WAIT_MAX:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Latencies (µs) from commit to first visible of the surviving rows.
fn latencies(surviving: &[(i64, i64)], seen: &HashMap<i64, i64>) -> Vec<i64> {
    surviving
        .iter()
        .filter_map(|(id, commit)| seen.get(id).map(|s| s - commit))
        .collect()
}

/// Digest check of a Weir target against its source.
async fn check_weir_target(
    source: &tokio_postgres::Client,
    target: &tokio_postgres::Client,
    plugin: bool,
) -> anyhow::Result<(i64, String)> {
    let (source_sql, target_sql) = if plugin {
        (SOURCE_PLUGIN_DIGEST.to_owned(), PLUGIN_DIGEST.to_owned())
    } else {
        (
            format!("{REPL_DIGEST}orders"),
            format!("{REPL_DIGEST}{TARGET}"),
        )
    };
    let s = source.query_one(&source_sql, &[]).await?;
    let t = target.query_one(&target_sql, &[]).await?;
    let (s, t): ((i64, String), (i64, String)) = ((s.get(0), s.get(1)), (t.get(0), t.get(1)));
    anyhow::ensure!(
        s == t,
        "the Weir target differs from its source: {t:?} against {s:?}"
    );
    Ok(s)
}

/// Section 8.
pub(crate) async fn streaming(
    out: &mut String,
    args: &Args,
    pg: &LocalPg,
) -> anyhow::Result<Figures> {
    anyhow::ensure!(args.stream_rate > 0, "--stream-rate must be at least 1");
    let load = load_average();
    let weir = std::env::current_exe()?.with_file_name("weir");
    anyhow::ensure!(
        weir.exists(),
        "{} is missing: build it with `cargo build --release -p weir --bin weir` (scripts/bench does)",
        weir.display()
    );
    let plugins_dir = args
        .plugins_dir
        .clone()
        .unwrap_or_else(crate::plugins::default_plugins_dir);
    // Absolute: the config's paths are relative to its own folder.
    let plugin =
        std::fs::canonicalize(plugins_dir.join("orders-rust.wasm")).with_context(|| {
            format!(
                "{}/orders-rust.wasm is missing: scripts/build-plugins builds it",
                plugins_dir.display()
            )
        })?;
    let flush_ms = args.stream_flush_ms;
    let mut figures = Figures {
        flush_ms,
        kills: args.recovery_kills,
        ..Figures::default()
    };

    // -- Latency at a steady rate: Weir with the plugin, then the peer. --------------
    let (source, consumer, target, mut child) =
        live_consumer(&weir, pg, "stream_latency_weir", &plugin, flush_ms).await?;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(
        consumer.source_dsn.clone(),
        args.stream_rate,
        args.stream_seconds,
    )
    .await?;
    let surviving = written.surviving();
    let seen = seen_all(&target, &surviving).await?;
    let weir_server_cpu = cluster_cpu(pg)? - server;
    consumer.stop(&mut child).await?;
    let final_rows = check_weir_target(&source, &target, true).await?.0;
    drop_slot(&source, &consumer.slot).await?;
    figures.weir_latency = Latency::of(&mut latencies(&surviving, &seen));
    let txns = written.commit_us.len() as u64;
    figures.offered_changes_per_s =
        (txns * CHANGES_PER_TRANSACTION) as f64 / written.elapsed.as_secs_f64();
    let weir_writer = written.elapsed;
    println!(
        "streaming latency, Weir: {:?} over {} rows",
        figures.weir_latency, figures.weir_latency.rows
    );

    let source = source_database(pg, "stream_latency_peer").await?;
    let sub = subscriber(
        pg,
        &source,
        "stream_latency_peer",
        "stream_sub_latency",
        true,
    )
    .await?;
    enable_subscription(&sub, "stream_sub_latency").await?;
    slot_active(&source, "stream_sub_latency").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = cluster_cpu(pg)?;
    let written = steady_writer(
        pg.dsn("stream_latency_peer"),
        args.stream_rate,
        args.stream_seconds,
    )
    .await?;
    let surviving_peer = written.surviving();
    let seen = seen_all(&sub, &surviving_peer).await?;
    let peer_server_cpu = cluster_cpu(pg)? - server;
    anyhow::ensure!(
        digest(&sub, "orders").await? == digest(&source, "orders").await?,
        "the subscriber's table differs from the source's"
    );
    drop_subscription(&sub, &source, "stream_sub_latency").await?;
    figures.peer_latency = Latency::of(&mut latencies(&surviving_peer, &seen));
    println!("streaming latency, peer: {:?}", figures.peer_latency);

    // -- Recovery: SIGKILL and restart while the steady workload runs. ----------------
    let (source, mut consumer, target, mut child) =
        live_consumer(&weir, pg, "stream_recovery", &plugin, flush_ms).await?;
    let period = Duration::from_secs(args.recovery_period_s);
    let down = Duration::from_millis(args.recovery_down_ms);
    // The writer runs through every kill and a period after the last restart.
    let writer_seconds = args.recovery_period_s * (args.recovery_kills as u64 + 1);
    let writer = tokio::spawn(steady_writer(
        consumer.source_dsn.clone(),
        args.stream_rate,
        writer_seconds,
    ));
    // (kill, restart) times, µs since the epoch; the slot's release waits.
    let mut restarts: Vec<(i64, i64)> = Vec::new();
    let mut release_waits = Vec::new();
    for _ in 0..args.recovery_kills {
        tokio::time::sleep(period).await;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "weir run exited by itself ({status}): {}",
                consumer.log_tail()
            );
        }
        child.start_kill()?;
        child.wait().await?;
        let killed = now_us();
        tokio::time::sleep(down).await;
        let waited = Instant::now();
        slot_released(&source, &consumer.slot).await?;
        release_waits.push(waited.elapsed());
        let restarted = now_us();
        child = consumer.spawn(&weir)?;
        restarts.push((killed, restarted));
    }
    let written = writer.await??;
    if let Some(status) = child.try_wait()? {
        anyhow::bail!(
            "weir run exited by itself ({status}): {}",
            consumer.log_tail()
        );
    }
    let surviving_rec = written.surviving();
    let seen = seen_all(&target, &surviving_rec).await?;
    consumer.stop(&mut child).await?;
    check_weir_target(&source, &target, true).await?;
    drop_slot(&source, &consumer.slot).await?;
    let mut first_visible = Vec::new();
    let mut caught = Vec::new();
    for (i, &(_, restarted)) in restarts.iter().enumerate() {
        let first = seen
            .values()
            .filter(|&&s| s >= restarted)
            .min()
            .context("no row became visible after a restart")?;
        let last = surviving_rec
            .iter()
            .filter(|(_, commit)| *commit <= restarted)
            .filter_map(|(id, _)| seen.get(id))
            .max()
            .context("no row committed before a restart")?;
        if let Some(&(next_kill, _)) = restarts.get(i + 1) {
            anyhow::ensure!(
                *last < next_kill,
                "restart {} had not caught up when the next kill came; raise --recovery-period-s",
                i + 1
            );
        }
        first_visible.push(Duration::from_micros(u64::try_from(first - restarted)?));
        caught.push(Duration::from_micros(u64::try_from(
            (last - restarted).max(0),
        )?));
    }
    figures.first_visible = median(&first_visible);
    figures.caught_up = median(&caught);
    println!(
        "streaming recovery: first visible {first_visible:?}, caught up {caught:?}, slot release waits {release_waits:?}"
    );

    // -- Sustained rate: a backlog caught up. -----------------------------------------
    let source = source_database(pg, "stream_backlog").await?;
    let mut with_plugin = WeirConsumer::new(
        &weir,
        pg,
        "stream_backlog",
        "stream_backlog_plugin",
        Some(&plugin),
        flush_ms,
    )
    .await?;
    let mut identity = WeirConsumer::new(
        &weir,
        pg,
        "stream_backlog",
        "stream_backlog_identity",
        None,
        flush_ms,
    )
    .await?;
    let sub = subscriber(pg, &source, "stream_backlog", "stream_sub_backlog", false).await?;
    source
        .query_one(
            "SELECT lsn::text FROM pg_create_logical_replication_slot('stream_recv', 'pgoutput')",
            &[],
        )
        .await?;
    let backlog_txns = (args.stream_backlog / CHANGES_PER_TRANSACTION).max(2);
    figures.backlog_changes = backlog_txns * CHANGES_PER_TRANSACTION;
    write_orders_workload(&source, backlog_txns).await?;
    let end_lsn: String = source
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .await?
        .get(0);
    while !source
        .query_one(
            "SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn",
            &[&end_lsn],
        )
        .await?
        .get::<_, bool>(0)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    source.batch_execute("VACUUM ANALYZE orders").await?;
    source.batch_execute("CHECKPOINT").await?;
    let last_id = (8 * backlog_txns) as i64;
    let plugin_expected = {
        let r = source.query_one(SOURCE_PLUGIN_DIGEST, &[]).await?;
        (r.get::<_, i64>(0), r.get::<_, String>(1))
    };
    let expected = digest(&source, "orders").await?;
    figures.backlog_rows = expected.0;

    let mut backlog_cpu = Vec::new();
    for (consumer, plugin, digest_sql, expected) in [
        (
            &mut with_plugin,
            true,
            PLUGIN_DIGEST.to_owned(),
            &plugin_expected,
        ),
        (
            &mut identity,
            false,
            format!("{REPL_DIGEST}{TARGET}"),
            &expected,
        ),
    ] {
        let target = connect(&consumer.target_dsn).await?;
        let server = cluster_cpu(pg)?;
        let started = Instant::now();
        let mut child = consumer.spawn(&weir)?;
        let time = caught_up(&target, TARGET, last_id, &digest_sql, expected, started).await?;
        backlog_cpu.push(cluster_cpu(pg)? - server);
        consumer.stop(&mut child).await?;
        check_weir_target(&source, &target, plugin).await?;
        drop_slot(&source, &consumer.slot).await?;
        target
            .batch_execute(&format!("VACUUM ANALYZE {TARGET}"))
            .await?;
        if plugin {
            figures.weir_plugin = time;
        } else {
            figures.weir_identity = time;
        }
    }
    let started = enable_subscription(&sub, "stream_sub_backlog").await?;
    figures.peer = caught_up(
        &sub,
        "orders",
        last_id,
        &format!("{REPL_DIGEST}orders"),
        &expected,
        started,
    )
    .await?;
    drop_subscription(&sub, &source, "stream_sub_backlog").await?;
    figures.recvlogical = recvlogical(
        pg,
        &source,
        "stream_backlog",
        "stream_recv",
        PUBLICATION,
        &end_lsn,
    )
    .await?;
    source
        .execute("SELECT pg_drop_replication_slot('stream_recv')", &[])
        .await?;
    // The limit of writing the final rows: one binary COPY into an empty table of the
    // identity target's shape (its indexes too), in that target's database.
    let rows: Vec<Vec<Value>> = source
        .query(
            "SELECT id, customer, order_date::text, amount::text, status FROM orders ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| {
            let date: String = r.get(2);
            Ok(vec![
                Value::Int(r.get(0)),
                Value::Text(r.get(1)),
                Value::Date(weir::value::parse_date(&date).context("a date")?),
                Value::Decimal(r.get(3)),
                Value::Text(r.get(4)),
            ])
        })
        .collect::<anyhow::Result<_>>()?;
    let copy_target = connect(&identity.target_dsn).await?;
    copy_target
        .batch_execute(&format!(
            "CREATE TABLE public.stream_copy (LIKE {TARGET} INCLUDING ALL)"
        ))
        .await?;
    let mut copies = Vec::new();
    for _ in 0..args.repeat.max(1) {
        copy_target
            .batch_execute("TRUNCATE public.stream_copy; CHECKPOINT")
            .await?;
        copies.push(copy_orders(&copy_target, "public.stream_copy", &rows).await?);
    }
    figures.copy = median(&copies);
    println!(
        "streaming backlog: weir+plugin {:?}, weir identity {:?}, subscription {:?}, pg_recvlogical {:?}, copy {:?}",
        figures.weir_plugin, figures.weir_identity, figures.peer, figures.recvlogical, figures.copy
    );

    // -- The report. -----------------------------------------------------------------
    let f = &figures;
    writeln!(
        out,
        "\n## Streaming: PostgreSQL → live `weir run` with the Rust plugin → PostgreSQL, against a subscription\n"
    )?;
    writeln!(
        out,
        "The real `weir` binary of this build, `weir run` (live, not `--once`) with `--log-format json`, on the \
         replication section's table (`orders`, default replica identity) and workload (transactions of 8 inserts, 1 \
         update, and alternately 1 update moving a row to the next day or 1 delete; 30 days), in source databases of \
         the same cluster. Config: `public.orders` → `{TARGET}` by day, `write = \"replace\"` (the default), \
         `plugin = \"orders-rust.wasm\"` with `rate = \"{RATE}\"` (its output: id, customer, order_date, amount, \
         amount_eur, status; the target table made by `weir init` from the plugin's describe), \
         `[engine] flush_interval_ms = {flush_ms}`, parallelism 2 (the default). `weir init` and a first \
         `run --once` on the empty table ran before each measurement. The peer is a native subscription \
         (`CREATE SUBSCRIPTION … WITH (copy_data = false)`, its slot made beforehand) into a second database holding \
         the same table. The 1-minute load average when this section began was {load}.\n"
    )?;
    writeln!(
        out,
        "### Latency from source commit to visible in the target, at a steady rate\n\n\
         A writer (one connection) commits one workload transaction per tick of a tokio interval, {} transactions/s \
         ({:.0} changes/s offered; {:.0} measured) for {} s: {txns} transactions. For every row still in the \
         source at the end (deleted rows are left out: Weir stages the latest state, so a row deleted within a flush \
         interval of its insert is never written), the latency is the time from its transaction's `COMMIT` \
         returning to the writer (this machine's clock, read right after `batch_execute` returned) to the row \
         first visible in the target, recorded by the target itself with the same clock: on Weir's table a \
         statement-level `AFTER INSERT` trigger with a transition table (COPY fires it) runs `INSERT INTO \
         bench_seen SELECT id, clock_timestamp() FROM new_rows ON CONFLICT DO NOTHING`, at the end of the \
         partition's COPY, inside the write's transaction, just before its lineage upsert and commit (so a \
         figure is early by that commit, and a rolled-back write records nothing); the subscriber's table has the \
         same as a row trigger, `ENABLE ALWAYS` (an apply worker fires only row triggers, and only those enabled \
         `REPLICA` or `ALWAYS`). Each run waited until every such row was recorded; Checked: the target equals the \
         source (Weir: row count and md5 of id, customer, order_date, amount and status, the source's status \
         upper-cased as the plugin does; the peer: all columns).\n",
        args.stream_rate,
        args.stream_rate * CHANGES_PER_TRANSACTION,
        f.offered_changes_per_s,
        args.stream_seconds,
    )?;
    writeln!(
        out,
        "| path | rows measured | p50 (ms) | p99 (ms) | max (ms) | server CPU (s) |\n|---|---:|---:|---:|---:|---:|"
    )?;
    writeln!(
        out,
        "| Weir `run` + `orders-rust.wasm`, flush every {flush_ms} ms | {} | {:.1} | {:.1} | {:.1} | {weir_server_cpu:.2} |",
        f.weir_latency.rows, f.weir_latency.p50, f.weir_latency.p99, f.weir_latency.max
    )?;
    writeln!(
        out,
        "| native subscription (peer) | {} | {:.1} | {:.1} | {:.1} | {peer_server_cpu:.2} |",
        f.peer_latency.rows, f.peer_latency.p50, f.peer_latency.p99, f.peer_latency.max
    )?;
    writeln!(
        out,
        "\nWeir / peer: p50 {:.1}×, p99 {:.1}× the subscription's latency. Weir's latency is dominated by the flush \
         interval: a transaction waits in the engine's batch until the next flush (on average half an interval), \
         then is staged (one synced RocksDB write), and every dirty partition is rewritten whole (replace: DELETE, \
         the plugin over all its staged rows, binary COPY, lineage), so a round's cost grows with the partitions' \
         size: at the end of this run each round rewrote up to all {final_rows} rows of the 30 partitions. The \
         writer's {txns} transactions took {:.2} s. *Server CPU* is every process of the cluster from the writer's \
         start until the last row was recorded (the writer's backends, decoding, the target's writes and the \
         recorder's triggers; for the peer also its apply worker).\n",
        f.weir_latency.p50 / f.peer_latency.p50,
        f.weir_latency.p99 / f.peer_latency.p99,
        weir_writer.as_secs_f64(),
    )?;
    writeln!(
        out,
        "### Recovery after SIGKILL\n\n\
         The same steady writer for {writer_seconds} s while a third `weir run` (same config, its own source, target \
         and slot, the same recorder) tails it; every {} s it was killed with SIGKILL and, {} ms later and once the \
         server had released its slot (waits: {} s), started again. From each restart (the spawn of the new `weir \
         run`): **to streaming again**, the first row recorded in the target after it; **to caught up**, the last \
         of the rows committed at the source before it recorded (every one of them visible). Checked: each restart \
         caught up before the next kill; at the end every surviving row was recorded and the target equals the \
         source (row count and md5, as above): nothing lost, nothing duplicated. Median of {} restarts.\n",
        args.recovery_period_s,
        args.recovery_down_ms,
        seconds_list(&release_waits),
        args.recovery_kills
    )?;
    writeln!(
        out,
        "| from restart to | median (s) | each restart (s) |\n|---|---:|---|\n\
         | first new row visible (streaming again) | {:.2} | {} |\n\
         | every row committed before the restart visible (caught up) | {:.2} | {} |\n",
        f.first_visible.as_secs_f64(),
        seconds_list(&first_visible),
        f.caught_up.as_secs_f64(),
        seconds_list(&caught)
    )?;
    writeln!(
        out,
        "A restart pays the process start, the plugin's load (from the compiled-component cache), opening the \
         stage, connecting and `START_REPLICATION` at the stage's position, then the first flush interval; the rows \
         it catches up are those committed while it was down ({} ms) and those staged or batched but not written \
         at the kill (re-delivered by the slot, or found in the stage dirty).\n",
        args.recovery_down_ms
    )?;
    writeln!(
        out,
        "### Sustained rate: a backlog caught up\n\n\
         A backlog of {} changes ({backlog_txns} transactions of the same workload, {} rows at the end) written while \
         every consumer was stopped, each consumer with its own slot made before it (Weir's by `weir init`); WAL \
         flushed, the source vacuumed and a `CHECKPOINT` taken before the clocks. The consumers ran one at a time. \
         Weir: from spawning `weir run` (live; process start, plugin load, connect) until the target equals the \
         source, polled every {} ms (the backlog's last inserted id present, then the digest equal), so up to {} ms \
         late; then stopped with SIGTERM. Peer: from `ALTER SUBSCRIPTION … ENABLE` until the same. Limits: \
         `pg_recvlogical` on its own slot of the same backlog, to /dev/null (as in the replication section), and \
         one binary COPY of the backlog's final rows into an empty table of the identity target's shape (`LIKE … \
         INCLUDING ALL`), median of {} COPYs.\n",
        f.backlog_changes,
        f.backlog_rows,
        POLL.as_millis(),
        POLL.as_millis(),
        args.repeat.max(1)
    )?;
    writeln!(
        out,
        "| path | time (s) | changes/s | server CPU (s) |\n|---|---:|---:|---:|"
    )?;
    let cpu = |i: usize| {
        backlog_cpu
            .get(i)
            .map_or_else(|| "—".into(), |c| format!("{c:.2}"))
    };
    writeln!(
        out,
        "| Weir `run` + `orders-rust.wasm` | {:.2} | {:.0} | {} |",
        f.weir_plugin.as_secs_f64(),
        f.rate(f.weir_plugin),
        cpu(0)
    )?;
    writeln!(
        out,
        "| Weir `run`, identity transform | {:.2} | {:.0} | {} |",
        f.weir_identity.as_secs_f64(),
        f.rate(f.weir_identity),
        cpu(1)
    )?;
    writeln!(
        out,
        "| native subscription (peer) | {:.2} | {:.0} | — |",
        f.peer.as_secs_f64(),
        f.rate(f.peer)
    )?;
    writeln!(
        out,
        "| `pg_recvlogical` → /dev/null (decode limit) | {:.2} | {:.0} | — |",
        f.recvlogical.as_secs_f64(),
        f.rate(f.recvlogical)
    )?;
    writeln!(
        out,
        "| raw binary COPY of the {} final rows (write limit) | {:.2} | {:.0} rows/s | — |",
        f.backlog_rows,
        f.copy.as_secs_f64(),
        f.backlog_rows as f64 / f.copy.as_secs_f64()
    )?;
    writeln!(
        out,
        "\nWeir with the plugin / decode limit: {:.2} of pg_recvlogical's rate; / peer: {:.2} of the subscription's; \
         its time / the COPY's: {:.1}×. Plugin overhead on this backlog: Weir with the plugin took {:.2}× the time of \
         Weir with the identity transform. All COPYs (s): {}. Weir writes its rounds while it reads: with flush \
         every {flush_ms} ms each round rewrites every dirty partition whole, so catching up rewrites the table \
         several times; the peer applies each change once.",
        f.rate(f.weir_plugin) / f.rate(f.recvlogical),
        f.rate(f.weir_plugin) / f.rate(f.peer),
        f.weir_plugin.as_secs_f64() / f.copy.as_secs_f64(),
        f.weir_plugin.as_secs_f64() / f.weir_identity.as_secs_f64(),
        seconds_list(&copies),
    )?;
    Ok(figures)
}
