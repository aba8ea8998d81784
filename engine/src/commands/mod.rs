//! The `weir` verbs, one file each: a verb loads the config, calls the library and
//! prints what the user reads. `main.rs` holds the argument types and the dispatch to
//! these files; `logging` the logging setup.
//!
//! A module tree of the binary, not of the library: its errors are `anyhow` (the house
//! rule keeps `anyhow` in `main` and typed `thiserror` errors in the library), and the
//! exit code comes from the library errors in the chain (`main.rs`, `is_usage_error`),
//! or a [`Usage`] for a verb's own flags used wrongly.
//! Nothing here is a library API: tests drive these verbs through the `weir` binary.

/// A command's own flags used wrongly (exit 2, as clap's usage errors).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub String);

/// [`Usage`] as a command's error.
pub(crate) fn usage(message: String) -> anyhow::Error {
    Usage(message).into()
}

pub(crate) mod backfill;
pub(crate) mod checkpoint;
pub(crate) mod demo;
pub(crate) mod init;
pub(crate) mod logging;
pub(crate) mod plugin;
pub(crate) mod plugin_new;
pub(crate) mod progress;
pub(crate) mod resync;
pub(crate) mod run;
pub(crate) mod status;
pub(crate) mod verify;

/// Logs the process's peak memory at the end of a command (`peak_rss_kib`), for
/// operators to hold against the memory budget `weir status` shows.
pub(crate) fn log_peak_memory(message: &'static str) {
    tracing::info!(
        peak_rss_kib = weir::procmem::peak_rss_kib(weir::procmem::Process::This),
        "{message}"
    );
}
