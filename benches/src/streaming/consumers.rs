//! What the streaming section measures, set up and checked: a Weir of the section (its
//! config, `weir init`, live `weir run`s), source databases, the peer's subscription,
//! the slots' states, and the digests of what each consumer wrote.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use weir::localpg::LocalPg;
use weir_core::fixtures::{OrdersTable, postgres_config_with};

use super::{PLUGIN_DIGEST, POLL, PUBLICATION, RATE, SOURCE_PLUGIN_DIGEST, TARGET, WAIT_MAX};
use crate::cluster::{SOURCE_DSN_ENV, TARGET_DSN_ENV, connect, slot_released};
use crate::orders::{REPL_DIGEST, REPL_TABLE_DDL};

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

/// A Weir of this section: its folder (config, stage, logs) and databases.
pub(crate) struct WeirConsumer {
    dir: tempfile::TempDir,
    pub(crate) source_dsn: String,
    pub(crate) target_dsn: String,
    pub(crate) slot: String,
    runs: usize,
}

impl WeirConsumer {
    /// Writes the config (`plugin`: the Rust orders plugin; else the identity) and runs
    /// `weir init` (slot, stage, target table), then `run --once` on the still empty
    /// table (its empty initial snapshot), untimed.
    pub(crate) async fn new(
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
            postgres_config_with(
                SOURCE_DSN_ENV,
                TARGET_DSN_ENV,
                &slot,
                PUBLICATION,
                &format!("[engine]\nflush_interval_ms = {flush_ms}"),
                &OrdersTable::postgres(TARGET).extra(&plugin).to_string(),
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
    pub(crate) fn spawn(&mut self, weir: &Path) -> anyhow::Result<tokio::process::Child> {
        self.runs += 1;
        let log = std::fs::File::create(self.log(self.runs))?;
        let mut cmd = self.command(weir, &["run"])?;
        cmd.stderr(log);
        cmd.spawn().context("spawn weir run")
    }

    fn log(&self, run: usize) -> PathBuf {
        self.dir.path().join(format!("run-{run}.log"))
    }

    /// The latest run's write rounds, from its log: how many began, and the rows their
    /// partitions were written with.
    pub(crate) fn rounds(&self) -> (usize, u64) {
        let text = std::fs::read_to_string(self.log(self.runs)).unwrap_or_default();
        let (mut rounds, mut rows) = (0, 0);
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match event["fields"]["message"].as_str() {
                Some("write round starts") => rounds += 1,
                Some("partitions written") => rows += event["fields"]["rows"].as_u64().unwrap_or(0),
                _ => {}
            }
        }
        (rounds, rows)
    }

    /// The last lines of the latest run's log, for an error.
    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log(self.runs)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// SIGTERM, and wait (bounded) for a clean exit.
    pub(crate) async fn stop(&self, child: &mut tokio::process::Child) -> anyhow::Result<()> {
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

/// A source database `name` and a live `weir run` of it through the plugin into
/// `{name}_target`, whose table records when each id is first seen; returned once the
/// slot is active and the engine has had two flush intervals to settle.
pub(crate) async fn live_consumer(
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

/// Waits (bounded) until a walsender serves `slot`: its consumer is streaming.
pub(crate) async fn slot_active(source: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
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
pub(crate) async fn drop_slot(source: &tokio_postgres::Client, slot: &str) -> anyhow::Result<()> {
    slot_released(source, slot).await?;
    source
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await?;
    Ok(())
}

/// A source database: the orders table and its publication.
pub(crate) async fn source_database(
    pg: &LocalPg,
    db: &str,
) -> anyhow::Result<tokio_postgres::Client> {
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
pub(crate) async fn subscriber(
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
pub(crate) async fn drop_subscription(
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
pub(crate) async fn enable_subscription(
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
pub(crate) async fn caught_up(
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

/// Digest check of a Weir target against its source.
pub(crate) async fn check_weir_target(
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
