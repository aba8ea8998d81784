//! The engine-wide sections of the file: the types of `[source]`, `[target]` and
//! `[engine]`, and the checks of `[source]` and `[engine]` (`[stage]` and `[target]` are
//! checked in the walk over the whole file, `Validator::validate` in `mod.rs`).

use std::path::PathBuf;

use serde::Deserialize;

use super::raw::{RawEngine, RawSource};
use super::{ConfigError, Validator, check_env_name, limits};

/// What to do with a source record that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBadRecord {
    /// Stop; nothing after the record is acknowledged.
    Fail,
    /// Keep the record in the target's `weir.dead_letter` with the reason, and go on.
    DeadLetter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceConfig {
    /// Debezium-envelope JSON lines from a file, or stdin when `path` is `None`.
    Jsonl {
        path: Option<PathBuf>,
        on_bad_record: OnBadRecord,
    },
    /// PostgreSQL logical replication (pgoutput) from a slot.
    Postgres {
        dsn_env: String,
        /// When `dsn_env` names a hot standby that decodes (PostgreSQL 16 and later):
        /// the environment variable of the primary's DSN, where what Weir writes goes
        /// (snapshot reads between watermarks, watermarks, heartbeats, drain messages,
        /// the publication). `None`: the source is the primary.
        primary_dsn_env: Option<String>,
        slot: String,
        publication: String,
        /// Rows per chunk of the initial snapshot.
        snapshot_chunk_rows: usize,
        /// Connections the first load reads with, each from the same exported snapshot.
        snapshot_parallelism: usize,
        /// How the tables' rows are read when nothing is staged yet.
        snapshot_method: SnapshotMethod,
        /// An idle stream writes a heartbeat this often, so the slot's position keeps
        /// up with WAL that other databases write (and the server can recycle it).
        heartbeat_interval_ms: u64,
        /// Ask the server to stream transactions larger than its
        /// `logical_decoding_work_mem` while they are in progress (pgoutput protocol
        /// version 2 and later), rather than decode them whole after their commit.
        /// They are staged at their commit as before: nothing of one is visible or
        /// acknowledged until then.
        streaming: bool,
    },
}

/// How a PostgreSQL source reads the rows its tables hold when nothing is staged yet
/// (`[source] snapshot_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMethod {
    /// A temporary slot exports a snapshot; `snapshot_parallelism` connections read
    /// the tables from it in parallel (binary `COPY` over ranges of pages), and the
    /// stream starts at its point. Holds that snapshot (and so the server's vacuum
    /// horizon) for the load's length.
    Export,
    /// Chunks in key order, each read between two watermarks while the stream runs:
    /// one connection, no long-lived snapshot.
    Watermarks,
}

#[derive(Debug, Clone)]
pub struct TargetConfig {
    pub dsn_env: String,
    /// How long a partition write waits for a table lock before it gives up, logs the
    /// sessions holding the lock and is retried (`[target] lock_timeout_ms`).
    pub lock_timeout_ms: u64,
}

#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub parallelism: usize,
    pub flush_interval_ms: u64,
    pub batch_transactions_max: usize,
    pub transaction_chunk_changes: usize,
    /// `[engine] memory_limit_mb`: a config whose memory budget is larger is refused.
    pub memory_limit_bytes: Option<u64>,
}

impl Validator<'_> {
    pub(super) fn source(&self, raw: RawSource) -> Result<SourceConfig, ConfigError> {
        match raw.kind.as_str() {
            "jsonl" => {
                for (field, set) in [
                    ("dsn_env", raw.dsn_env.is_some()),
                    ("primary_dsn_env", raw.primary_dsn_env.is_some()),
                    ("slot", raw.slot.is_some()),
                    ("publication", raw.publication.is_some()),
                    ("snapshot_chunk_rows", raw.snapshot_chunk_rows.is_some()),
                    ("snapshot_parallelism", raw.snapshot_parallelism.is_some()),
                    ("snapshot_method", raw.snapshot_method.is_some()),
                    ("heartbeat_interval_ms", raw.heartbeat_interval_ms.is_some()),
                    ("streaming", raw.streaming.is_some()),
                ] {
                    if set {
                        return Err(self.invalid(
                            format!("source.{field}"),
                            "only applies to kind = \"postgres\"",
                        ));
                    }
                }
                let path = match raw.path.as_deref() {
                    None | Some("") => return Err(self.invalid(
                        "source.path",
                        "required for kind = \"jsonl\": a file of JSON lines, or \"-\" for stdin",
                    )),
                    Some("-") => None,
                    Some(p) => Some(self.resolve(p)),
                };
                Ok(SourceConfig::Jsonl {
                    path,
                    on_bad_record: raw.on_bad_record.unwrap_or(OnBadRecord::Fail),
                })
            }
            "postgres" => {
                for (field, set) in [
                    ("path", raw.path.is_some()),
                    ("on_bad_record", raw.on_bad_record.is_some()),
                ] {
                    if set {
                        return Err(self.invalid(
                            format!("source.{field}"),
                            "only applies to kind = \"jsonl\"",
                        ));
                    }
                }
                let dsn_env = raw.dsn_env.ok_or_else(|| {
                    self.invalid("source.dsn_env", "required for kind = \"postgres\": the environment variable holding the source DSN")
                })?;
                check_env_name(&dsn_env).map_err(|m| self.invalid("source.dsn_env", m))?;
                let primary_dsn_env = raw.primary_dsn_env;
                if let Some(var) = &primary_dsn_env {
                    check_env_name(var).map_err(|m| self.invalid("source.primary_dsn_env", m))?;
                    if *var == dsn_env {
                        return Err(self.invalid(
                            "source.primary_dsn_env",
                            "names the same variable as dsn_env: it holds the primary's DSN when dsn_env's is a standby; remove it to decode on the primary",
                        ));
                    }
                }
                let slot = raw.slot.ok_or_else(|| {
                    self.invalid(
                        "source.slot",
                        "required for kind = \"postgres\": the replication slot's name",
                    )
                })?;
                let slot_ok = !slot.is_empty()
                    && slot.len() <= 63
                    && slot
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                if !slot_ok {
                    return Err(self.invalid("source.slot", format!("`{slot}` is not a slot name: use 1 to 63 lower-case letters, digits and underscores")));
                }
                let publication = raw
                    .publication
                    .filter(|p| !p.is_empty() && p.len() <= 63 && !p.contains('\0'))
                    .ok_or_else(|| {
                        self.invalid(
                            "source.publication",
                            "required for kind = \"postgres\": a publication name of 1 to 63 bytes",
                        )
                    })?;
                let snapshot_chunk_rows = raw.snapshot_chunk_rows.unwrap_or(10_000);
                if !(1..=limits::SNAPSHOT_CHUNK_ROWS_MAX).contains(&snapshot_chunk_rows) {
                    return Err(self.invalid(
                        "source.snapshot_chunk_rows",
                        format!("must be between 1 and {}", limits::SNAPSHOT_CHUNK_ROWS_MAX),
                    ));
                }
                let snapshot_parallelism = raw.snapshot_parallelism.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
                });
                if !(1..=limits::PARALLELISM_MAX).contains(&snapshot_parallelism) {
                    return Err(self.invalid(
                        "source.snapshot_parallelism",
                        format!("must be between 1 and {}", limits::PARALLELISM_MAX),
                    ));
                }
                let snapshot_method = match raw.snapshot_method.as_deref() {
                    None | Some("export") => SnapshotMethod::Export,
                    Some("watermarks") => SnapshotMethod::Watermarks,
                    Some(other) => {
                        return Err(self.invalid(
                            "source.snapshot_method",
                            format!("unknown method `{other}`: use \"export\" (a parallel load from one exported snapshot) or \"watermarks\" (chunks between watermarks, no long snapshot)"),
                        ));
                    }
                };
                let heartbeat_interval_ms = raw.heartbeat_interval_ms.unwrap_or(10_000);
                if !(100..=limits::HEARTBEAT_INTERVAL_MS_MAX).contains(&heartbeat_interval_ms) {
                    return Err(self.invalid(
                        "source.heartbeat_interval_ms",
                        format!(
                            "must be between 100 and {}",
                            limits::HEARTBEAT_INTERVAL_MS_MAX
                        ),
                    ));
                }
                Ok(SourceConfig::Postgres {
                    dsn_env,
                    primary_dsn_env,
                    slot,
                    publication,
                    snapshot_chunk_rows,
                    snapshot_parallelism,
                    snapshot_method,
                    heartbeat_interval_ms,
                    streaming: raw.streaming.unwrap_or(true),
                })
            }
            other => Err(self.invalid(
                "source.kind",
                format!("unknown kind `{other}`: use \"postgres\" or \"jsonl\""),
            )),
        }
    }

    pub(super) fn engine(&self, raw: RawEngine) -> Result<EngineConfig, ConfigError> {
        let parallelism = raw.parallelism.unwrap_or(2);
        if !(1..=limits::PARALLELISM_MAX).contains(&parallelism) {
            return Err(self.invalid(
                "engine.parallelism",
                format!("must be between 1 and {}", limits::PARALLELISM_MAX),
            ));
        }
        let flush_interval_ms = raw
            .flush_interval_ms
            .unwrap_or(limits::FLUSH_INTERVAL_MS_DEFAULT);
        if flush_interval_ms > limits::FLUSH_INTERVAL_MS_MAX {
            return Err(self.invalid(
                "engine.flush_interval_ms",
                format!("must be at most {}", limits::FLUSH_INTERVAL_MS_MAX),
            ));
        }
        let batch_transactions_max = raw.batch_transactions_max.unwrap_or(1024);
        if !(1..=limits::BATCH_TRANSACTIONS_MAX).contains(&batch_transactions_max) {
            return Err(self.invalid(
                "engine.batch_transactions_max",
                format!("must be between 1 and {}", limits::BATCH_TRANSACTIONS_MAX),
            ));
        }
        let transaction_chunk_changes = raw.transaction_chunk_changes.unwrap_or(10_000);
        if !(1..=limits::TRANSACTION_CHUNK_CHANGES_MAX).contains(&transaction_chunk_changes) {
            return Err(self.invalid(
                "engine.transaction_chunk_changes",
                format!(
                    "must be between 1 and {}",
                    limits::TRANSACTION_CHUNK_CHANGES_MAX
                ),
            ));
        }
        let memory_limit_bytes = match raw.memory_limit_mb {
            None => None,
            Some(mb) if (64..=limits::MEMORY_LIMIT_MB_MAX).contains(&mb) => Some(mb << 20),
            Some(_) => {
                return Err(self.invalid(
                    "engine.memory_limit_mb",
                    format!(
                        "must be between 64 and {} (MiB; leave it out for no limit)",
                        limits::MEMORY_LIMIT_MB_MAX
                    ),
                ));
            }
        };
        Ok(EngineConfig {
            parallelism,
            flush_interval_ms,
            batch_transactions_max,
            transaction_chunk_changes,
            memory_limit_bytes,
        })
    }
}
