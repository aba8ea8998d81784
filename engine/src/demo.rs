//! `weir demo`: a self-contained run on a throwaway local PostgreSQL, the first thing a
//! new user runs.
//!
//! It starts a [`LocalPg`] with a *source* database (`shop`, table `orders`) and a
//! *target* database (`warehouse`), and drives the real `weir` binary (this
//! executable): `init`, then a live `weir run` (PostgreSQL logical replication → stage
//! → the orders WebAssembly plugin → partitions of `analytics.orders_eur`) while a
//! workload writes orders in small transactions. Part way through it SIGKILLs the
//! engine and restarts it, then checks that the target equals the source, restates
//! one order's date (both partitions are rewritten, the order is there once), and runs
//! `weir verify` on the window. Every check is real: a failed one fails the demo.
//!
//! Guarantees:
//! * everything it made (the live `weir run`, the cluster, the temporary folder) is
//!   removed on exit: on success, on error, and on SIGINT or SIGTERM in any phase (the
//!   phases run in a `select!` against the signals; dropping them kills the child and
//!   stops the cluster); if this process dies without unwinding (SIGKILL) the
//!   cluster's watchdog removes it;
//! * no clock or entropy decides what is written: the workload is a function of
//!   [`Sequence`]'s seed (only how many of its transactions run depends on time);
//! * nothing secret is printed: the local cluster has no password.
//!
//! [`DEMO_CONFIG`] and [`order_line`] (a JSON-lines feed of the same orders) are kept
//! for the benchmarks.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::localpg::{LocalPg, LocalPgError, LocalPgOptions};
use crate::source::replication::{format_lsn, parse_lsn};

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the local PostgreSQL")]
    LocalPg(#[from] LocalPgError),
    #[error("demo I/O failed")]
    Io(#[from] std::io::Error),
    #[error(
        "the orders plugin was not found (looked for {searched}). Build it with `scripts/demo` \
         (which builds it and runs the demo) or `scripts/build-plugins`, or pass \
         `weir demo --plugin PATH/orders-rust.wasm`"
    )]
    PluginNotFound { searched: String },
    #[error("`weir {command}` failed with {status}:\n{stderr}")]
    Step {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
    #[error("the live `weir run` exited with {status}; last lines of its log:\n{log_tail}")]
    LiveRunExited {
        status: ExitStatus,
        log_tail: String,
    },
    #[error("`weir status --json` printed what the demo cannot read")]
    Status(#[source] serde_json::Error),
    #[error("query on the demo's {database} database failed")]
    Query {
        database: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("the demo's check failed: {0}")]
    Check(String),
    #[error("interrupted by {0}; the demo's processes, cluster and files are removed")]
    Interrupted(&'static str),
    #[error("a demo task stopped unexpectedly")]
    Task(#[from] tokio::task::JoinError),
}

/// What `weir demo` was asked for.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The orders plugin component; `None`: looked up (see [`find_plugin`]).
    pub plugin: Option<PathBuf>,
    /// Keep the cluster and the live `weir run` up until Ctrl-C, to query them.
    pub keep: bool,
    /// How long the workload writes, in seconds.
    pub workload_seconds: u64,
}

/// Bounds of [`DemoOptions::workload_seconds`]: long enough for a kill and a restart
/// in the middle of it, short enough to stay a demo.
pub const WORKLOAD_SECONDS_MIN: u64 = 4;
pub const WORKLOAD_SECONDS_MAX: u64 = 600;
pub const WORKLOAD_SECONDS_DEFAULT: u64 = 10;

/// The plugin's file name, as `scripts/build-plugins` names it.
pub const PLUGIN_FILE: &str = "orders-rust.wasm";
/// The plugin's `rate` config: EUR per unit of `amount`, exact text.
const RATE: &str = "0.9175";
const SLOT: &str = "weir_demo";
const SOURCE_DB: &str = "shop";
const TARGET_DB: &str = "warehouse";
const TARGET_TABLE: &str = "analytics.orders_eur";
/// Orders in the source before `weir init` (taken by the initial snapshot).
const SEED_ORDERS: u64 = 300;
/// One workload transaction this often.
const TRANSACTION_INTERVAL_MS: u64 = 100;
/// A progress line this often.
const PROGRESS_INTERVAL_MS: u64 = 1000;
/// How often `weir status` is polled while waiting for the engine.
const POLL_INTERVAL_MS: u64 = 250;
/// Waiting for the engine to catch up fails after this long.
const CATCH_UP_TIMEOUT_S: u64 = 90;
/// Waiting for a killed engine's walsender to let go of the slot gives up after this
/// long (the restarted engine retries a busy slot anyway).
const SLOT_RELEASE_TIMEOUT_S: u64 = 15;
/// Lines of the live run's log shown when it fails.
const LOG_TAIL_LINES: usize = 30;

const DAYS: [&str; 7] = [
    "2026-03-01",
    "2026-03-02",
    "2026-03-03",
    "2026-03-04",
    "2026-03-05",
    "2026-03-06",
    "2026-03-07",
];
/// The window `weir verify` checks: every day above, half-open.
const WINDOW: (&str, &str) = ("2026-03-01", "2026-03-08");

/// A small deterministic pseudo-random sequence (xorshift64*), so the demo's and the
/// benchmarks' feeds are the same on every run without a clock or entropy.
#[derive(Debug, Clone)]
pub struct Sequence(u64);

impl Sequence {
    pub fn new(seed: u64) -> Sequence {
        Sequence(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One Debezium envelope line for `public.orders` (the benchmarks' feed).
pub fn order_line(
    op: char,
    tx: Option<u64>,
    id: u64,
    day: &str,
    amount_cents: u64,
    status: &str,
) -> String {
    let image = format!(
        "{{\"id\":{id},\"customer\":\"c{}\",\"order_date\":\"{day}\",\"amount\":\"{}.{:02}\",\"status\":\"{status}\"}}",
        id % 97,
        amount_cents / 100,
        amount_cents % 100
    );
    let (before, after) = if op == 'd' {
        (image, "null".to_owned())
    } else {
        ("null".to_owned(), image)
    };
    let tx = tx.map(|t| format!(",\"txId\":{t}")).unwrap_or_default();
    format!(
        "{{\"op\":\"{op}\",\"before\":{before},\"after\":{after},\"source\":{{\"schema\":\"public\",\"table\":\"orders\"{tx}}},\"ts_ms\":{}}}\n",
        1_772_323_200_000u64 + id * 1000
    )
}

/// A JSON-lines config of the same orders table (the benchmarks use it).
pub const DEMO_CONFIG: &str = r#"# weir demo: Debezium JSON lines -> stage -> partitions of analytics.fact_orders
[source]
kind = "jsonl"
path = "feed.jsonl"
on_bad_record = "dead-letter"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "WEIR_TARGET_DSN"

[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
columns = { id = "bigint", customer = "text", order_date = "date", amount = "numeric(12,2)", status = "text" }
"#;

/// The demo's config: the source database's `orders` over logical replication, through
/// the orders plugin at `plugin` (a TOML string, quoted).
fn pg_config(plugin_toml: &str) -> String {
    format!(
        r#"# weir demo: PostgreSQL logical replication -> stage -> orders plugin -> partitions
[source]
kind = "postgres"
dsn_env = "WEIR_SOURCE_DSN"      # the DSNs come from the environment, never the file
slot = "{SLOT}"
publication = "{SLOT}"

[stage]
path = "stage"

[target]
kind = "postgres"
dsn_env = "WEIR_TARGET_DSN"

[engine]
flush_interval_ms = 200          # write dirty partitions five times a second
parallelism = 2

[[table]]
source = "public.orders"
target = "{TARGET_TABLE}"
key = ["id"]
partition_by = "order_date"
grain = "day"
plugin = {plugin_toml}
on_reject = "dead-letter"
[table.plugin_config]
rate = "{RATE}"                  # amount_eur = amount x rate, exact decimal
"#
    )
}

/// Where the plugin is looked for, in order: `$WEIR_PLUGINS_DIR` alone if it is set,
/// else `$CARGO_TARGET_DIR/plugins`, `~/.cache/weir-target/plugins` (what
/// `scripts/demo` and `scripts/test` build) and `~/.cache/weir-plugins`
/// (`scripts/build-plugins`' default).
pub fn plugin_candidates(
    plugins_dir: Option<&Path>,
    cargo_target_dir: Option<&Path>,
    home: Option<&Path>,
) -> Vec<PathBuf> {
    if let Some(dir) = plugins_dir {
        return vec![dir.join(PLUGIN_FILE)];
    }
    let mut out = Vec::new();
    if let Some(target) = cargo_target_dir {
        out.push(target.join("plugins").join(PLUGIN_FILE));
    }
    if let Some(home) = home {
        out.push(home.join(".cache/weir-target/plugins").join(PLUGIN_FILE));
        out.push(home.join(".cache/weir-plugins").join(PLUGIN_FILE));
    }
    out.dedup();
    out
}

/// The plugin to use: `explicit` if given (it must exist), else the first of
/// [`plugin_candidates`] from the environment that exists.
pub fn find_plugin(explicit: Option<&Path>) -> Result<PathBuf, DemoError> {
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let candidates = match explicit {
        Some(path) => vec![path.to_owned()],
        None => plugin_candidates(
            env_path("WEIR_PLUGINS_DIR").as_deref(),
            env_path("CARGO_TARGET_DIR").as_deref(),
            env_path("HOME").as_deref(),
        ),
    };
    match candidates.iter().find(|p| p.is_file()) {
        Some(path) => Ok(std::path::absolute(path)?),
        None => Err(DemoError::PluginNotFound {
            searched: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// `amount × rate` rounded once to 2 places, half to even, as the orders plugin
/// computes it (exact: decimal texts, integer arithmetic). `None` if either is not a
/// plain non-negative decimal or the product does not fit.
pub fn amount_eur(amount: &str, rate: &str) -> Option<String> {
    fn parse(text: &str) -> Option<(i128, u32)> {
        let (int, frac) = text.split_once('.').unwrap_or((text, ""));
        if int.is_empty() || !(int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())) {
            return None;
        }
        let scale = u32::try_from(frac.len()).ok()?;
        Some((format!("{int}{frac}").parse().ok()?, scale))
    }
    let (a, a_scale) = parse(amount)?;
    let (r, r_scale) = parse(rate)?;
    let product = a.checked_mul(r)?;
    let scale = a_scale + r_scale;
    let cents = if scale <= 2 {
        product.checked_mul(10i128.checked_pow(2 - scale)?)?
    } else {
        let unit = 10i128.checked_pow(scale - 2)?;
        let (q, rem) = (product / unit, product % unit);
        let half = unit / 2;
        if rem > half || (rem == half && q % 2 == 1) {
            q + 1
        } else {
            q
        }
    };
    Some(format!("{}.{:02}", cents / 100, cents % 100))
}

/// The demo's workload on the source's `orders`: small transactions of inserts,
/// updates (some of them correcting an order's date) and deletes, a function of the
/// seed alone.
#[derive(Debug, Clone)]
pub struct OrdersWorkload {
    seq: Sequence,
    next_id: i64,
    /// Orders the workload may still change, in a deterministic order.
    alive: Vec<i64>,
}

impl OrdersWorkload {
    pub fn new(seed: u64) -> OrdersWorkload {
        OrdersWorkload {
            seq: Sequence::new(seed),
            next_id: 1,
            alive: Vec::new(),
        }
    }

    fn values(&mut self, id: i64) -> String {
        let day = DAYS[self.seq.below(DAYS.len() as u64) as usize];
        let cents = 500 + self.seq.below(20_000);
        format!(
            "({id}, 'c{}', DATE '{day}', {}.{:02}, 'new')",
            self.seq.below(50),
            cents / 100,
            cents % 100
        )
    }

    /// One INSERT of `orders` new orders and one refund with a negative amount, which
    /// the plugin rejects (it goes to `weir.dead_letter`); the workload never touches it.
    pub fn seed_sql(&mut self, orders: u64) -> String {
        let mut rows = Vec::new();
        for _ in 0..orders {
            let id = self.next_id;
            self.next_id += 1;
            self.alive.push(id);
            rows.push(self.values(id));
        }
        let refund = self.next_id;
        self.next_id += 1;
        rows.push(format!(
            "({refund}, 'c7', DATE '{}', -12.50, 'refund')",
            DAYS[2]
        ));
        format!("INSERT INTO orders VALUES {}", rows.join(", "))
    }

    /// The next transaction (one to four changes) as one simple-query text, and its
    /// number of changes.
    pub fn next_transaction(&mut self) -> (String, u64) {
        let changes = 1 + self.seq.below(4);
        let mut sql = String::from("BEGIN;");
        for _ in 0..changes {
            let roll = self.seq.below(100);
            if roll < 60 || self.alive.len() < 50 {
                let id = self.next_id;
                self.next_id += 1;
                self.alive.push(id);
                let values = self.values(id);
                let _ = write!(sql, " INSERT INTO orders VALUES {values};");
            } else if roll < 90 {
                let id = self.alive[self.seq.below(self.alive.len() as u64) as usize];
                let cents = 500 + self.seq.below(20_000);
                let _ = write!(
                    sql,
                    " UPDATE orders SET status = 'shipped', amount = {}.{:02} WHERE id = {id};",
                    cents / 100,
                    cents % 100
                );
            } else if roll < 95 {
                // A date correction: the order moves to another partition.
                let id = self.alive[self.seq.below(self.alive.len() as u64) as usize];
                let day = DAYS[self.seq.below(DAYS.len() as u64) as usize];
                let _ = write!(
                    sql,
                    " UPDATE orders SET order_date = DATE '{day}' WHERE id = {id};"
                );
            } else {
                let i = self.seq.below(self.alive.len() as u64) as usize;
                let id = self.alive.swap_remove(i);
                let _ = write!(sql, " DELETE FROM orders WHERE id = {id};");
            }
        }
        sql.push_str(" COMMIT;");
        (sql, changes)
    }
}

/// Runs the demo, narrating to `out`. Whatever happens, the live engine, the cluster
/// and the temporary folder are gone when it returns.
pub async fn run(out: &mut impl Write, options: &DemoOptions) -> Result<(), DemoError> {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before anything starts, so a signal in any phase lands here.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let plugin = find_plugin(options.plugin.as_deref())?;
    let outcome = tokio::select! {
        result = phases(out, options, &plugin) => result,
        _ = interrupt.recv() => Err(DemoError::Interrupted("SIGINT (Ctrl-C)")),
        _ = terminate.recv() => Err(DemoError::Interrupted("SIGTERM")),
    };
    // `phases` is dropped here whatever happened: its live `weir run` is killed, the
    // temporary folder removed and the cluster stopped (in that order).
    let session = match outcome {
        Ok(session) => session,
        Err(error) => {
            let _ = writeln!(
                out,
                "\nstopped: the demo's processes, cluster and files are removed"
            );
            return Err(error);
        }
    };
    if options.keep {
        writeln!(
            out,
            "\nThe cluster and the live `weir run` stay up until Ctrl-C (the commands above work now)."
        )?;
        out.flush()?;
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
    drop(session);
    writeln!(
        out,
        "\nweir run stopped, the cluster stopped, its files removed. Done."
    )?;
    Ok(())
}

/// What stays up after the phases (for `--keep`). Fields drop in this order: the live
/// engine first, then the folder, then the cluster.
#[derive(Debug)]
struct Session {
    _live: LiveRun,
    _dir: tempfile::TempDir,
    _pg: LocalPg,
}

/// Prints a step's heading.
fn heading(out: &mut impl Write, step: u32, title: &str) -> Result<(), DemoError> {
    writeln!(out, "\n{step}. {title}")?;
    Ok(())
}

async fn phases(
    out: &mut impl Write,
    options: &DemoOptions,
    plugin: &Path,
) -> Result<Session, DemoError> {
    let started = Instant::now();
    heading(out, 1, "A throwaway PostgreSQL")?;
    let pg = tokio::task::spawn_blocking(|| LocalPg::start(&LocalPgOptions::default())).await??;
    writeln!(
        out,
        "  PostgreSQL listening on {}:{}, wal_level=logical, data in a temporary folder",
        pg.host(),
        pg.port()
    )?;
    let source_dsn = pg.create_database(SOURCE_DB).await?;
    let target_dsn = pg.create_database(TARGET_DB).await?;
    let mut workload = OrdersWorkload::new(7);
    pg.execute(
        SOURCE_DB,
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, order_date date, \
         amount numeric(12,2), status text)",
    )
    .await?;
    pg.execute(SOURCE_DB, &workload.seed_sql(SEED_ORDERS))
        .await?;
    writeln!(
        out,
        "  source database {SOURCE_DB}: table orders (id bigint primary key, customer, order_date date, amount numeric(12,2), status)"
    )?;
    writeln!(
        out,
        "                               {SEED_ORDERS} orders and one refund with a negative amount"
    )?;
    writeln!(out, "  target database {TARGET_DB}: empty")?;

    heading(out, 2, "Config and `weir init`")?;
    let dir = tempfile::Builder::new().prefix("weir-demo-").tempdir()?;
    let plugin_toml = toml::Value::String(plugin.display().to_string()).to_string();
    let config_text = pg_config(&plugin_toml);
    std::fs::write(dir.path().join("weir.toml"), &config_text)?;
    writeln!(out, "  folder {}", dir.path().display())?;
    writeln!(out, "  plugin {}", plugin.display())?;
    writeln!(out, "  weir.toml:")?;
    write!(out, "{}", indent(&config_text, 4))?;
    let weir = Weir {
        exe: std::env::current_exe()?,
        dir: dir.path().to_owned(),
        source_dsn: source_dsn.clone(),
        target_dsn: target_dsn.clone(),
    };
    let init = weir.output(&["init"]).await?;
    writeln!(out, "  $ weir --config weir.toml init")?;
    write!(out, "{}", indent(&init, 4))?;

    let source = Db::connect(&source_dsn, SOURCE_DB).await?;
    let target = Db::connect(&target_dsn, TARGET_DB).await?;
    // The catch-up mark must reach the stream at once, not when the WAL writer wakes.
    source.batch("SET synchronous_commit = on").await?;

    heading(
        out,
        3,
        "A live `weir run` while the workload writes; SIGKILLed and restarted part way",
    )?;
    let mut live = weir.spawn_live()?;
    writeln!(
        out,
        "  $ weir --config weir.toml run    # weir run is live (pid {})",
        live.pid()
    )?;
    writeln!(
        out,
        "  workload: a transaction of 1-4 changes every {TRANSACTION_INTERVAL_MS} ms for {} s \
         (inserts, updates, date corrections, deletes)",
        options.workload_seconds
    )?;
    let workload_for = Duration::from_secs(options.workload_seconds);
    let changes = Arc::new(AtomicU64::new(0));
    let writer = AbortOnDrop::new(tokio::spawn(write_orders(
        source_dsn.clone(),
        workload,
        workload_for,
        Arc::clone(&changes),
    )));
    let kill_at = workload_for * 2 / 5;
    let restart_at = workload_for * 3 / 5;
    let live_started = Instant::now();
    let mut killed = false;
    let mut down = false;
    writeln!(out, "{}", Progress::header())?;
    let mut tick = tokio::time::interval(Duration::from_millis(PROGRESS_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    while !writer.is_finished() {
        tick.tick().await;
        let elapsed = live_started.elapsed();
        if !down {
            live.check_alive()?;
        }
        let progress = Progress::read(&weir, &source, &target, &changes, elapsed).await?;
        writeln!(out, "{}", progress.line(down))?;
        if !killed && elapsed >= kill_at {
            live.kill();
            writeln!(
                out,
                "  >> SIGKILL weir run (pid {}) while the workload writes: no shutdown, no flush",
                live.pid()
            )?;
            killed = true;
            down = true;
        } else if down && elapsed >= restart_at {
            wait_slot_released(&source).await?;
            live = weir.spawn_live()?;
            writeln!(
                out,
                "  >> restarted: $ weir --config weir.toml run    # weir run is live (pid {})",
                live.pid()
            )?;
            down = false;
        }
    }
    let writer = writer.join().await??;
    if down {
        // A workload shorter than the progress interval can end before the restart.
        wait_slot_released(&source).await?;
        live = weir.spawn_live()?;
        writeln!(out, "  >> restarted (pid {})", live.pid())?;
    }
    let written = changes.load(Ordering::Relaxed);
    writeln!(
        out,
        "  the workload stopped after {written} changes in {} transactions",
        writer.transactions
    )?;

    heading(
        out,
        4,
        "Caught up after the kill: nothing lost, nothing duplicated",
    )?;
    let waited = catch_up(&weir, &source, &mut live).await?;
    writeln!(
        out,
        "  weir run has staged past the source's last commit and written every dirty partition ({:.1} s)",
        waited.as_secs_f64()
    )?;
    check_target(out, &source, &target).await?;

    heading(
        out,
        5,
        "A restatement: an order's date is corrected at the source",
    )?;
    restatement(out, &weir, &source, &target, &mut live).await?;

    heading(
        out,
        6,
        "weir verify: every partition computed twice and compared with the target",
    )?;
    let args = [
        "verify",
        "--table",
        "public.orders",
        "--from",
        WINDOW.0,
        "--to",
        WINDOW.1,
    ];
    let verify = weir.output(&args).await?;
    writeln!(out, "  $ weir --config weir.toml {}", args.join(" "))?;
    write!(out, "{}", indent(&verify, 4))?;
    if !verify.contains("verify passed") {
        return Err(DemoError::Check(format!(
            "weir verify did not report a pass:\n{verify}"
        )));
    }
    live.check_alive()?;

    heading(out, 7, "What to look at")?;
    let dead = target
        .client
        .query(
            "SELECT partition, row_key::text, reason FROM weir.dead_letter ORDER BY id",
            &[],
        )
        .await
        .map_err(target.err())?;
    writeln!(
        out,
        "  weir.dead_letter holds {} rejected row(s):",
        dead.len()
    )?;
    for r in &dead {
        let (partition, key, reason): (Option<String>, Option<String>, String) =
            (r.get(0), r.get(1), r.get(2));
        writeln!(
            out,
            "    partition {}, key {}: {reason}",
            partition.unwrap_or_default(),
            key.unwrap_or_default()
        )?;
    }
    writeln!(
        out,
        "  In a shell (with --keep, while the demo runs; the local cluster has no password):\n\
         \x20   cd {dir}\n\
         \x20   export WEIR_SOURCE_DSN={source_dsn} WEIR_TARGET_DSN={target_dsn}\n\
         \x20   weir --config weir.toml status        # position, slot lag, dirty partitions, last writes\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT partition, stage_generation, source_position, row_count, checksum FROM weir.partitions ORDER BY 1'\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT partition, reason, input FROM weir.dead_letter'\n\
         \x20   psql \"$WEIR_TARGET_DSN\" -c 'SELECT order_date, count(*), sum(amount_eur) FROM {TARGET_TABLE} GROUP BY 1 ORDER BY 1'\n\
         \x20   psql \"$WEIR_SOURCE_DSN\" -c \"INSERT INTO orders VALUES (100000, 'c1', '2026-03-07', 9.99, 'new')\"   # then watch the target",
        dir = dir.path().display()
    )?;
    if !options.keep {
        writeln!(
            out,
            "  (`weir demo --keep` keeps the cluster and the live `weir run` up until Ctrl-C)"
        )?;
    }
    writeln!(
        out,
        "\nAll checks passed in {:.1} s.",
        started.elapsed().as_secs_f64()
    )?;
    Ok(Session {
        _live: live,
        _dir: dir,
        _pg: pg,
    })
}

/// What the workload task did.
#[derive(Debug)]
struct Written {
    transactions: u64,
}

/// Writes the workload's transactions for `duration`, one per interval, counting the
/// changes committed.
async fn write_orders(
    dsn: String,
    mut workload: OrdersWorkload,
    duration: Duration,
    changes: Arc<AtomicU64>,
) -> Result<Written, DemoError> {
    let db = Db::connect(&dsn, SOURCE_DB).await?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(TRANSACTION_INTERVAL_MS));
    let mut transactions = 0;
    while started.elapsed() < duration {
        tick.tick().await;
        let (sql, n) = workload.next_transaction();
        db.batch(&sql).await?;
        transactions += 1;
        changes.fetch_add(n, Ordering::Relaxed);
    }
    Ok(Written { transactions })
}

/// A spawned task aborted when dropped (an interrupted demo stops writing).
#[derive(Debug)]
struct AbortOnDrop<T>(Option<tokio::task::JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    fn new(handle: tokio::task::JoinHandle<T>) -> AbortOnDrop<T> {
        AbortOnDrop(Some(handle))
    }

    fn is_finished(&self) -> bool {
        self.0
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
    }

    /// Waits for the task's result.
    async fn join(mut self) -> Result<T, DemoError> {
        match self.0.take() {
            Some(handle) => Ok(handle.await?),
            None => Err(DemoError::Check(
                "the workload task was already joined".into(),
            )),
        }
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(handle) = &self.0 {
            handle.abort();
        }
    }
}

/// A connection to one of the demo's databases.
#[derive(Debug)]
struct Db {
    client: tokio_postgres::Client,
    database: &'static str,
}

impl Db {
    async fn connect(dsn: &str, database: &'static str) -> Result<Db, DemoError> {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .map_err(|source| DemoError::Query { database, source })?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "demo connection ended with an error");
            }
        });
        Ok(Db { client, database })
    }

    fn err(&self) -> impl FnOnce(tokio_postgres::Error) -> DemoError + '_ {
        move |source| DemoError::Query {
            database: self.database,
            source,
        }
    }

    async fn batch(&self, sql: &str) -> Result<(), DemoError> {
        self.client.batch_execute(sql).await.map_err(self.err())
    }

    async fn count(&self, sql: &str) -> Result<i64, DemoError> {
        let row = self.client.query_one(sql, &[]).await.map_err(self.err())?;
        Ok(row.get(0))
    }
}

/// Runs the real `weir` binary (this executable) in the demo's folder, with its config
/// and the DSNs in the environment.
#[derive(Debug)]
struct Weir {
    exe: PathBuf,
    dir: PathBuf,
    source_dsn: String,
    target_dsn: String,
}

impl Weir {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.current_dir(&self.dir)
            .args(["--config", "weir.toml"])
            .args(args)
            .env("WEIR_SOURCE_DSN", &self.source_dsn)
            .env("WEIR_TARGET_DSN", &self.target_dsn)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `weir ARGS` to completion; its stdout, or an error with its stderr.
    async fn output(&self, args: &[&str]) -> Result<String, DemoError> {
        let output = self.command(args).output().await?;
        if !output.status.success() {
            return Err(DemoError::Step {
                command: args.join(" "),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// `weir status --json`.
    async fn status(&self) -> Result<Json, DemoError> {
        let text = self.output(&["status", "--json"]).await?;
        serde_json::from_str(&text).map_err(DemoError::Status)
    }

    /// Starts a live `weir run`, its stderr appended to `run.log`.
    fn spawn_live(&self) -> Result<LiveRun, DemoError> {
        let log = self.dir.join("run.log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let child = self
            .command(&["run"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        Ok(LiveRun { child, pid, log })
    }
}

/// A live `weir run`: SIGKILLed and reaped when dropped, so no path leaves it behind.
#[derive(Debug)]
struct LiveRun {
    child: tokio::process::Child,
    pid: u32,
    log: PathBuf,
}

/// How long a drop waits for a SIGKILLed child to be reaped.
const REAP_TIMEOUT_MS: u64 = 5000;

impl LiveRun {
    fn pid(&self) -> u32 {
        self.pid
    }

    /// SIGKILL, then reap (bounded; a SIGKILLed process exits at once).
    fn kill(&mut self) {
        let _ = self.child.start_kill();
        let deadline = Instant::now() + Duration::from_millis(REAP_TIMEOUT_MS);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// An error with the tail of its log if it has exited.
    fn check_alive(&mut self) -> Result<(), DemoError> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                Err(DemoError::LiveRunExited {
                    status,
                    log_tail: lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n"),
                })
            }
        }
    }
}

impl Drop for LiveRun {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One progress line's numbers.
#[derive(Debug)]
struct Progress {
    elapsed: Duration,
    changes: u64,
    source_orders: i64,
    staged: Option<u64>,
    slot_lag_bytes: Option<i64>,
    dirty: usize,
    target_rows: i64,
    partitions: i64,
    written: Option<i64>,
}

impl Progress {
    fn header() -> String {
        format!(
            "  {:>6} {:>8} {:>8} {:>12} {:>10} {:>6} {:>8} {:>11} {:>12}",
            "time",
            "changes",
            "orders",
            "staged",
            "slot lag",
            "dirty",
            "target",
            "partitions",
            "written"
        )
    }

    async fn read(
        weir: &Weir,
        source: &Db,
        target: &Db,
        changes: &AtomicU64,
        elapsed: Duration,
    ) -> Result<Progress, DemoError> {
        let changes = changes.load(Ordering::Relaxed);
        let status = weir.status().await?;
        let source_orders = source.count("SELECT count(*) FROM orders").await?;
        let target_rows = target
            .count(&format!("SELECT count(*) FROM {TARGET_TABLE}"))
            .await?;
        let row = target
            .client
            .query_one(
                "SELECT count(*), max(source_position) FROM weir.partitions WHERE target_table = $1",
                &[&TARGET_TABLE],
            )
            .await
            .map_err(target.err())?;
        Ok(Progress {
            elapsed,
            changes,
            source_orders,
            staged: status["position"].as_u64(),
            slot_lag_bytes: status["slot_lag_bytes"].as_i64(),
            dirty: status["dirty_partitions"].as_array().map_or(0, Vec::len),
            target_rows,
            partitions: row.get(0),
            written: row.get(1),
        })
    }

    fn line(&self, down: bool) -> String {
        let lsn = |p: Option<u64>| p.map_or_else(|| "-".to_owned(), format_lsn);
        format!(
            "  {:>5.1}s {:>8} {:>8} {:>12} {:>10} {:>6} {:>8} {:>11} {:>12}{}",
            self.elapsed.as_secs_f64(),
            self.changes,
            self.source_orders,
            lsn(self.staged),
            self.slot_lag_bytes
                .map_or_else(|| "-".to_owned(), |b| bytes(b.max(0) as u64)),
            self.dirty,
            self.target_rows,
            self.partitions,
            lsn(self.written.and_then(|w| u64::try_from(w).ok())),
            if down { "  (weir run is down)" } else { "" }
        )
    }
}

fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / 1_048_576.0)
    }
}

/// Waits until no walsender holds the slot (a killed engine's is gone), bounded.
async fn wait_slot_released(source: &Db) -> Result<(), DemoError> {
    let deadline = Instant::now() + Duration::from_secs(SLOT_RELEASE_TIMEOUT_S);
    while Instant::now() < deadline {
        let active: Option<bool> = source
            .client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&SLOT],
            )
            .await
            .map_err(source.err())?
            .map(|r| r.get(0));
        if active != Some(true) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Writes a mark into the source's WAL after everything committed so far, and waits
/// until the live engine has staged past it (a commit at or after the mark, and so
/// every commit before it) and written every dirty partition. Returns how long it took.
async fn catch_up(weir: &Weir, source: &Db, live: &mut LiveRun) -> Result<Duration, DemoError> {
    let started = Instant::now();
    let row = source
        .client
        .query_one(
            "SELECT pg_logical_emit_message(true, 'weir.demo.mark', '')::text",
            &[],
        )
        .await
        .map_err(source.err())?;
    let mark_text: String = row.get(0);
    let mark = parse_lsn(&mark_text)
        .ok_or_else(|| DemoError::Check(format!("the source returned LSN {mark_text:?}")))?;
    let deadline = started + Duration::from_secs(CATCH_UP_TIMEOUT_S);
    loop {
        live.check_alive()?;
        let status = weir.status().await?;
        if let Some(failed) = status["failed_partitions"]
            .as_array()
            .filter(|f| !f.is_empty())
        {
            return Err(DemoError::Check(format!(
                "partitions failed: {}",
                Json::Array(failed.clone())
            )));
        }
        let staged = status["position"].as_u64().is_some_and(|p| p >= mark);
        let clean = status["dirty_partitions"]
            .as_array()
            .is_some_and(Vec::is_empty);
        if staged && clean {
            return Ok(started.elapsed());
        }
        if Instant::now() > deadline {
            return Err(DemoError::Check(format!(
                "weir run did not catch up with the source (mark {}) within {CATCH_UP_TIMEOUT_S} s: {status}",
                format_lsn(mark)
            )));
        }
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
    }
}

/// The source's orders (negative amounts apart) and the target's rows, as text, by id.
type SourceRow = (i64, Option<String>, Option<String>, String, Option<String>);
type TargetRow = (
    i64,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
);

/// The check after a kill: the target is exactly the plugin's output for the source's
/// rows: the same ids (none missing, none extra, none twice), each column as the
/// source has it, `amount_eur` = amount × rate, and every rejected row dead-lettered.
async fn check_target(out: &mut impl Write, source: &Db, target: &Db) -> Result<(), DemoError> {
    // A digest of the shared columns, as benches' `digest`; the plugin upper-cases status.
    const DIGEST: &str = "SELECT count(*), md5(coalesce(string_agg(concat_ws('|', id, customer, \
         order_date, amount, {status}), ',' ORDER BY id), '')) FROM {table}";
    let digest =
        |status: &str, table: &str| DIGEST.replace("{status}", status).replace("{table}", table);
    let src = source
        .client
        .query_one(&digest("upper(status)", "orders WHERE amount >= 0"), &[])
        .await
        .map_err(source.err())?;
    let tgt = target
        .client
        .query_one(&digest("status", TARGET_TABLE), &[])
        .await
        .map_err(target.err())?;
    let (src_rows, src_md5): (i64, String) = (src.get(0), src.get(1));
    let (tgt_rows, tgt_md5): (i64, String) = (tgt.get(0), tgt.get(1));
    writeln!(
        out,
        "  source  orders (amount >= 0)   {src_rows:>6} rows  md5 {src_md5}"
    )?;
    writeln!(
        out,
        "  target  {TARGET_TABLE:<22} {tgt_rows:>6} rows  md5 {tgt_md5}"
    )?;

    let source_rows: Vec<SourceRow> = source
        .client
        .query(
            "SELECT id, customer, order_date::text, amount::text, status FROM orders ORDER BY id",
            &[],
        )
        .await
        .map_err(source.err())?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let target_rows: Vec<TargetRow> = target
        .client
        .query(
            &format!(
                "SELECT id, customer, order_date::text, amount::text, amount_eur::text, status \
                 FROM {TARGET_TABLE} ORDER BY id"
            ),
            &[],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect();
    let rejected_keys: Vec<String> = target
        .client
        .query(
            "SELECT row_key::text FROM weir.dead_letter WHERE kind = 'rejected' ORDER BY 1",
            &[],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
        .collect();
    let report = compare(&source_rows, &target_rows, &rejected_keys);
    writeln!(
        out,
        "  amount_eur = amount x {RATE}, rounded half to even: exact on {} of {} rows",
        report.eur_exact,
        target_rows.len()
    )?;
    writeln!(
        out,
        "  missing {}, extra {}, different {}; rejected rows in weir.dead_letter: {} of {}",
        report.missing.len(),
        report.extra.len(),
        report.different.len(),
        report.rejected_found,
        report.rejected_expected
    )?;
    if src_md5 != tgt_md5 || src_rows != tgt_rows || !report.is_exact() {
        return Err(DemoError::Check(format!(
            "the target is not the source's rows after the kill: missing ids {:?}, extra ids {:?}, \
             different ids {:?}, {} of {} rejected rows dead-lettered, digests {src_md5} / {tgt_md5}",
            report.missing,
            report.extra,
            report.different,
            report.rejected_found,
            report.rejected_expected
        )));
    }
    writeln!(
        out,
        "  ok: the target equals the source, nothing lost and nothing duplicated across the SIGKILL"
    )?;
    Ok(())
}

/// The difference between the expected output of the source rows and the target.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    pub missing: Vec<i64>,
    pub extra: Vec<i64>,
    pub different: Vec<i64>,
    pub eur_exact: usize,
    pub rejected_expected: usize,
    pub rejected_found: usize,
}

impl Comparison {
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty()
            && self.extra.is_empty()
            && self.different.is_empty()
            && self.rejected_found == self.rejected_expected
    }
}

/// Compares the source's rows (by id, ascending) through the orders plugin's rules
/// with the target's rows (by id, ascending; a duplicate id counts as extra) and the
/// dead-lettered keys (`[id]` as JSON text).
fn compare(source: &[SourceRow], target: &[TargetRow], rejected_keys: &[String]) -> Comparison {
    let mut report = Comparison::default();
    let mut t = target.iter().peekable();
    for (id, customer, day, amount, status) in source {
        if amount.starts_with('-') {
            report.rejected_expected += 1;
            if rejected_keys.iter().any(|k| k == &format!("[{id}]")) {
                report.rejected_found += 1;
            }
            continue;
        }
        while let Some(row) = t.next_if(|row| row.0 < *id) {
            report.extra.push(row.0);
        }
        let Some(row) = t.next_if(|row| row.0 == *id) else {
            report.missing.push(*id);
            continue;
        };
        let eur = amount_eur(amount, RATE);
        if row.4.is_some() && row.4 == eur {
            report.eur_exact += 1;
        }
        let upper = status.as_deref().map(str::to_ascii_uppercase);
        if (&row.1, &row.2, &row.3, &row.4, &row.5) != (customer, day, amount, &eur, &upper) {
            report.different.push(*id);
        }
        while let Some(dup) = t.next_if(|row| row.0 == *id) {
            report.extra.push(dup.0);
        }
    }
    report.extra.extend(t.map(|row| row.0));
    report
}

/// Lineage of one partition: (stage generation, source position, rows).
async fn lineage(target: &Db, partition: &str) -> Result<Option<(i64, i64, i64)>, DemoError> {
    let row = target
        .client
        .query_opt(
            "SELECT stage_generation, source_position, row_count FROM weir.partitions \
             WHERE target_table = $1 AND partition = $2",
            &[&TARGET_TABLE, &partition],
        )
        .await
        .map_err(target.err())?;
    Ok(row.map(|r| (r.get(0), r.get(1), r.get(2))))
}

/// Moves one order to another day at the source, waits for the engine, and checks
/// that both partitions were rewritten and the order is in the target once, in the
/// new one.
async fn restatement(
    out: &mut impl Write,
    weir: &Weir,
    source: &Db,
    target: &Db,
    live: &mut LiveRun,
) -> Result<(), DemoError> {
    let (old_day, new_day) = (DAYS[1], DAYS[4]);
    let row = source
        .client
        .query_opt(
            "SELECT id FROM orders WHERE order_date = $1::text::date AND amount >= 0 ORDER BY id LIMIT 1",
            &[&old_day],
        )
        .await
        .map_err(source.err())?
        .ok_or_else(|| DemoError::Check(format!("no order on {old_day} to restate")))?;
    let id: i64 = row.get(0);
    let before = (
        lineage(target, old_day).await?,
        lineage(target, new_day).await?,
    );
    let sql = format!("UPDATE orders SET order_date = '{new_day}' WHERE id = {id}");
    writeln!(out, "  source: {sql};")?;
    source.batch(&sql).await?;
    catch_up(weir, source, live).await?;
    let after = (
        lineage(target, old_day).await?,
        lineage(target, new_day).await?,
    );
    writeln!(
        out,
        "  {:<12} {:>28}   {:>28}",
        "partition", "lineage before (gen, pos, rows)", "after"
    )?;
    let show = |l: Option<(i64, i64, i64)>| {
        l.map_or_else(
            || "(not written)".to_owned(),
            |(g, p, n)| {
                format!(
                    "{g}, {}, {n}",
                    u64::try_from(p).map_or_else(|_| p.to_string(), format_lsn)
                )
            },
        )
    };
    for (day, b, a) in [(old_day, before.0, after.0), (new_day, before.1, after.1)] {
        writeln!(out, "  {day:<12} {:>28}   {:>28}", show(b), show(a))?;
    }
    let rewritten = |b: Option<(i64, i64, i64)>, a: Option<(i64, i64, i64)>| match (b, a) {
        (Some(b), Some(a)) => a.0 != b.0 && a.1 > b.1,
        (None, Some(_)) => true,
        _ => false,
    };
    let both = rewritten(before.0, after.0) && rewritten(before.1, after.1);
    let placement: Vec<String> = target
        .client
        .query(
            &format!("SELECT order_date::text FROM {TARGET_TABLE} WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(target.err())?
        .iter()
        .map(|r| r.get(0))
        .collect();
    writeln!(
        out,
        "  order {id} in the target: {} row(s), in {}",
        placement.len(),
        placement.join(", ")
    )?;
    if !both {
        return Err(DemoError::Check(format!(
            "the restatement of order {id} did not rewrite both {old_day} and {new_day}"
        )));
    }
    if placement != [new_day] {
        return Err(DemoError::Check(format!(
            "order {id} should be in the target once, in {new_day}; found {placement:?}"
        )));
    }
    writeln!(
        out,
        "  ok: both partitions rewritten, the order is in the target exactly once, in the new partition"
    )?;
    Ok(())
}

fn indent(text: &str, spaces: usize) -> String {
    let pad = " ".repeat(spaces);
    text.lines().fold(String::new(), |mut acc, l| {
        let _ = writeln!(acc, "{pad}{l}");
        acc
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amount_eur_rounds_once_half_to_even() {
        assert_eq!(amount_eur("0.05", "0.5").as_deref(), Some("0.02"));
        assert_eq!(amount_eur("0.15", "0.5").as_deref(), Some("0.08"));
        assert_eq!(amount_eur("1.50", "0.9175").as_deref(), Some("1.38"));
        assert_eq!(amount_eur("100.00", "0.9175").as_deref(), Some("91.75"));
        assert_eq!(amount_eur("7", "2").as_deref(), Some("14.00"));
        assert_eq!(amount_eur("0.00", "0.9175").as_deref(), Some("0.00"));
        assert_eq!(amount_eur("-1.00", "0.9175"), None);
        assert_eq!(amount_eur("1e3", "1"), None);
    }

    #[test]
    fn the_plugin_is_looked_for_in_weir_plugins_dir_alone_or_the_usual_places() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            plugin_candidates(Some(&p("/x")), Some(&p("/t")), Some(&p("/h"))),
            [p("/x/orders-rust.wasm")]
        );
        assert_eq!(
            plugin_candidates(None, Some(&p("/t")), Some(&p("/h"))),
            [
                p("/t/plugins/orders-rust.wasm"),
                p("/h/.cache/weir-target/plugins/orders-rust.wasm"),
                p("/h/.cache/weir-plugins/orders-rust.wasm"),
            ]
        );
        assert!(plugin_candidates(None, None, None).is_empty());
    }

    #[test]
    fn a_missing_plugin_says_how_to_build_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("orders-rust.wasm");
        let error = find_plugin(Some(&missing)).expect_err("missing");
        let text = error.to_string();
        assert!(text.contains(&missing.display().to_string()), "{text}");
        assert!(text.contains("scripts/build-plugins"), "{text}");
        assert!(text.contains("scripts/demo"), "{text}");
    }

    #[test]
    fn the_workload_is_a_function_of_its_seed() {
        let run = |seed| {
            let mut w = OrdersWorkload::new(seed);
            let mut sql = w.seed_sql(10);
            for _ in 0..200 {
                sql.push_str(&w.next_transaction().0);
            }
            sql
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let text = run(7);
        for change in [
            "INSERT",
            "UPDATE orders SET status",
            "UPDATE orders SET order_date",
            "DELETE",
        ] {
            assert!(text.contains(change), "{change}");
        }
    }

    #[test]
    fn the_comparison_reports_missing_extra_different_and_rejected_separately() {
        let s = |id: i64, amount: &str| -> SourceRow {
            (
                id,
                Some("c1".into()),
                Some("2026-03-01".into()),
                amount.into(),
                Some("new".into()),
            )
        };
        let t = |id: i64, amount: &str, eur: &str| -> TargetRow {
            (
                id,
                Some("c1".into()),
                Some("2026-03-01".into()),
                amount.into(),
                Some(eur.into()),
                Some("NEW".into()),
            )
        };
        let source = [s(1, "10.00"), s(2, "20.00"), s(3, "-1.00"), s(4, "40.00")];
        let exact = [
            t(1, "10.00", "9.18"),
            t(2, "20.00", "18.35"),
            t(4, "40.00", "36.70"),
        ];
        let report = compare(&source, &exact, &["[3]".into()]);
        assert!(report.is_exact(), "{report:?}");
        assert_eq!(report.eur_exact, 3);
        let wrong = [
            t(1, "10.00", "9.17"),
            t(4, "40.00", "36.70"),
            t(4, "40.00", "36.70"),
            t(5, "1.00", "0.92"),
        ];
        let report = compare(&source, &wrong, &[]);
        assert_eq!(report.missing, [2]);
        assert_eq!(report.extra, [4, 5]);
        assert_eq!(report.different, [1]);
        assert_eq!((report.rejected_expected, report.rejected_found), (1, 0));
        assert!(!report.is_exact());
    }
}
