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
//!   [`Sequence`](weir::demo::Sequence)'s seed (only how many of its transactions run
//!   depends on time);
//! * nothing secret is printed: the local cluster has no password.
//!
//! The steps are in [`phases`]; the estate they set up (the cluster's config, the
//! plugin, the database connections) in [`estate`]; the `weir` processes they drive in
//! [`engine`]; the orders workload in [`workload`]; the checks in [`checks`]; the
//! progress lines and headings in [`output`]. The seeded sequence behind the workload
//! (shared with the benchmarks) is the library's `weir::demo`.

mod checks;
mod engine;
mod estate;
mod output;
mod phases;
mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitStatus;

use weir::localpg::{LocalPg, LocalPgError};

use self::engine::LiveRun;

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
    /// The orders plugin component; `None`: looked up (see [`estate::find_plugin`]).
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

/// Runs the demo, narrating to `out`. Whatever happens, the live engine, the cluster
/// and the temporary folder are gone when it returns.
pub async fn run(out: &mut impl Write, options: &DemoOptions) -> Result<(), DemoError> {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered before anything starts, so a signal in any phase lands here.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let plugin = estate::find_plugin(options.plugin.as_deref())?;
    let outcome = tokio::select! {
        result = phases::phases(out, options, &plugin) => result,
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
