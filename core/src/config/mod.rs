//! The TOML configuration file.
//!
//! Loading is two steps, as in Vector's sinks: [`Config::load`] parses and validates
//! without any I/O beyond reading the file itself (no network, no environment), and
//! [`Config::target_dsn`] resolves secrets from the environment when the runtime needs
//! them. Every error names the file and the field.
//!
//! **Architecture Invariant**: a DSN is held only as a [`Dsn`], whose `Debug` and
//! `Display` redact it, and no error carries a DSN or the cause of a DSN parse failure.
//!
//! The module's parts: the config and its loading, the DSN and the walk over the file
//! here; the file's shape as TOML reads it, before any check, in `raw.rs`; the
//! engine-wide sections (`[source]`, `[target]`, `[engine]`) in `sections.rs`; a
//! `[[table]]`, its names and columns in `table.rs`; a table's plugin and its sandbox
//! limits in `plugin.rs`; their tests in `tests.rs`.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

mod budget;
mod plugin;
mod raw;
mod sections;
mod table;

pub use budget::{MemoryBudget, mib};
pub use plugin::{OnReject, PluginConfig};
pub use sections::{EngineConfig, OnBadRecord, SnapshotMethod, SourceConfig, TargetConfig};
pub use table::{
    Column, OnNullPartition, OnTruncate, TableConfig, TableName, TargetPartitioning, WriteMode,
    quote_ident, quote_literal,
};

use raw::RawConfig;

/// Bounds on engine settings. Each bounds a resource a typo could exhaust.
pub mod limits {
    /// Partition jobs at once: each holds a target connection and one partition in memory.
    pub const PARALLELISM_MAX: usize = 64;
    /// Transactions staged in one synced batch (group commit): bounds batch memory.
    pub const BATCH_TRANSACTIONS_MAX: usize = 100_000;
    /// The default least time between the starts of two write rounds: a change is
    /// written about as soon as it is staged, and rounds coalesce under load.
    pub const FLUSH_INTERVAL_MS_DEFAULT: u64 = 10;
    /// Longest flush interval: one hour. Longer would let dirty partitions age unnoticed.
    pub const FLUSH_INTERVAL_MS_MAX: u64 = 3_600_000;
    /// Changes of one transaction held in memory before they go to the stage's pending
    /// area: bounds the memory a transaction of any size takes.
    pub const TRANSACTION_CHUNK_CHANGES_MAX: usize = 1_000_000;
    /// Longest heartbeat interval: an hour. An idle slot holds WAL back that long.
    pub const HEARTBEAT_INTERVAL_MS_MAX: u64 = 3_600_000;
    /// Rows of one snapshot chunk, held in memory between its two watermarks.
    pub const SNAPSHOT_CHUNK_ROWS_MAX: usize = 1_000_000;
    /// `[stage] max_unwritten_mb` at most: 1 PiB, so the bytes fit a `u64` with room.
    pub const MAX_UNWRITTEN_MB_MAX: u64 = 1 << 30;
    /// `[target] lock_timeout_ms` when not set: a partition write waits 5 s for a lock.
    pub const LOCK_TIMEOUT_MS_DEFAULT: u64 = 5_000;
    /// Longest lock wait: ten minutes (a write that waits longer holds its connection).
    pub const LOCK_TIMEOUT_MS_MAX: u64 = 600_000;
    /// `[engine] memory_limit_mb` at most: 1 TiB.
    pub const MEMORY_LIMIT_MB_MAX: u64 = 1 << 20;
    /// PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer name is cut silently.
    pub const IDENTIFIER_BYTES_MAX: usize = 63;
}

/// A configuration error. Displays as `FILE: FIELD: what is wrong and what to do`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The parser's message without the line it quotes, and with its quoted values
    /// left out: a password written into the config by mistake (`dsn = "postgres://…"`)
    /// must not reach the error.
    #[error("{}: invalid TOML at line {line}, column {column}: {message}{hint}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: &'static str,
    },
    #[error("{}: {field}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{}: {field}: environment variable {var} is not set (or is empty): export it with the connection string (postgres://user:password@host:port/db)", path.display())]
    MissingEnv {
        path: PathBuf,
        field: String,
        var: String,
    },
    #[error("{}: {field}: environment variable {var} does not hold a valid PostgreSQL connection string (URL or key=value form); its value is not shown because it may hold a password", path.display())]
    InvalidDsn {
        path: PathBuf,
        field: String,
        var: String,
    },
    /// A TLS (libpq) parameter of the DSN is invalid: named, its value not shown.
    #[error("{}: {field}: environment variable {var}: {problem}", path.display())]
    InvalidDsnParameter {
        path: PathBuf,
        field: String,
        var: String,
        problem: String,
    },
}

/// A PostgreSQL connection string. Never displayed: it may hold a password.
#[derive(Clone)]
pub struct Dsn(String);

impl Dsn {
    /// Wraps a connection string obtained elsewhere (tests, the demo).
    pub fn new(dsn: impl Into<String>) -> Dsn {
        Dsn(dsn.into())
    }

    /// The connection string itself, for the one place that connects.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dsn(<redacted>)")
    }
}

impl fmt::Display for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this config was read from.
    pub path: PathBuf,
    pub source: SourceConfig,
    pub stage_path: PathBuf,
    /// `[stage] max_unwritten_mb`: the most bytes of staged changes not yet written to
    /// the target; at the limit the live engine stops reading the source until its
    /// writers catch up (`None`: no limit).
    pub stage_max_unwritten_bytes: Option<u64>,
    pub target: TargetConfig,
    pub engine: EngineConfig,
    pub tables: Vec<TableConfig>,
}

impl Config {
    /// Reads and validates a config file. Touches nothing but the file: no network, no
    /// environment variables, no stage.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Validates config text as if read from `path` (relative paths in it are resolved
    /// against `path`'s folder).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|source| parse_error(text, path, &source))?;
        let postgres_source = raw.source.kind == "postgres";
        Validator {
            path,
            postgres_source,
        }
        .validate(raw)
    }

    /// Resolves the source DSN (kind = "postgres") from the environment variable the
    /// config names; `None` for a source without one.
    pub fn source_dsn(&self) -> Result<Option<Dsn>, ConfigError> {
        match &self.source {
            SourceConfig::Postgres { dsn_env, .. } => self
                .dsn_from_env("source.dsn_env", dsn_env, |var| std::env::var(var).ok())
                .map(Some),
            SourceConfig::Jsonl { .. } => Ok(None),
        }
    }

    /// Resolves the DSN of the server Weir writes to in the source (kind = "postgres"):
    /// `primary_dsn_env`'s when set (the source decodes on a standby), else the source
    /// DSN; `None` for a source without one.
    pub fn source_write_dsn(&self) -> Result<Option<Dsn>, ConfigError> {
        match &self.source {
            SourceConfig::Postgres {
                primary_dsn_env: Some(var),
                ..
            } => self
                .dsn_from_env("source.primary_dsn_env", var, |v| std::env::var(v).ok())
                .map(Some),
            _ => self.source_dsn(),
        }
    }

    /// Resolves the target DSN from the environment variable the config names.
    pub fn target_dsn(&self) -> Result<Dsn, ConfigError> {
        self.dsn_from_env("target.dsn_env", &self.target.dsn_env, |var| {
            std::env::var(var).ok()
        })
    }

    fn dsn_from_env(
        &self,
        field: &str,
        var: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Dsn, ConfigError> {
        let value =
            env(var)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| ConfigError::MissingEnv {
                    path: self.path.clone(),
                    field: field.to_owned(),
                    var: var.to_owned(),
                })?;
        match crate::dsn::PgSettings::parse(&value) {
            Ok(_) => Ok(Dsn(value)),
            Err(crate::dsn::DsnError::Syntax) => Err(ConfigError::InvalidDsn {
                path: self.path.clone(),
                field: field.to_owned(),
                var: var.to_owned(),
            }),
            Err(error) => Err(ConfigError::InvalidDsnParameter {
                path: self.path.clone(),
                field: field.to_owned(),
                var: var.to_owned(),
                problem: error.to_string(),
            }),
        }
    }

    pub fn table_by_source(&self, source: &TableName) -> Option<&TableConfig> {
        self.tables.iter().find(|t| &t.source == source)
    }

    pub fn table_by_target(&self, target: &str) -> Option<&TableConfig> {
        let parsed = TableName::parse(target)?;
        self.tables.iter().find(|t| t.target == parsed)
    }

    /// Identifies the feed this config reads, so a stage filled from one feed is never
    /// resumed from another. A file is named by its canonical path, whatever the
    /// config's location or spelling (`weir.toml`, `./weir.toml`, an absolute path).
    pub fn source_id(&self) -> String {
        match &self.source {
            SourceConfig::Jsonl { path: Some(p), .. } => {
                format!("jsonl:{}", canonical_feed_path(p).display())
            }
            SourceConfig::Jsonl { path: None, .. } => "jsonl:stdin".to_owned(),
            SourceConfig::Postgres { slot, .. } => format!("postgres:slot={slot}"),
        }
    }
}

/// A feed file's canonical path: symlinks and `.`/`..` resolved. A file that does not
/// exist yet (a feed to be tailed) is named by its canonical folder and its name.
fn canonical_feed_path(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(folder), path.file_name()) {
        (Ok(folder), Some(name)) => folder.join(name),
        _ => std::path::absolute(path).unwrap_or_else(|_| path.to_owned()),
    }
}

/// Whether two source ids ([`Config::source_id`]) name one feed: equal, or JSON-lines
/// files that are one file. Older builds spelled a file as the config's location made
/// it (`jsonl:feed.jsonl`, `jsonl:./feed.jsonl`); such a relative id is read from the
/// current folder.
pub fn same_feed(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (a.strip_prefix("jsonl:"), b.strip_prefix("jsonl:")) {
        (Some(x), Some(y)) if x != "stdin" && y != "stdin" => {
            canonical_feed_path(Path::new(x)) == canonical_feed_path(Path::new(y))
        }
        _ => false,
    }
}

struct Validator<'a> {
    path: &'a Path,
    /// Tables' columns come from the source's catalog (kind = "postgres").
    postgres_source: bool,
}

impl Validator<'_> {
    fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_owned(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// Refuses a PostgreSQL name longer than PostgreSQL keeps (it would cut it and
    /// Weir would then address another object than the config names).
    fn check_identifier(&self, field: String, what: &str, name: &str) -> Result<(), ConfigError> {
        if name.len() > limits::IDENTIFIER_BYTES_MAX {
            return Err(self.invalid(
                field,
                format!(
                    "{what} `{name}` is {} bytes long: PostgreSQL names are at most {} bytes (it would cut a longer one); use a shorter name",
                    name.len(),
                    limits::IDENTIFIER_BYTES_MAX
                ),
            ));
        }
        Ok(())
    }

    fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    fn validate(&self, raw: RawConfig) -> Result<Config, ConfigError> {
        let source = self.source(raw.source)?;
        if raw.stage.path.trim().is_empty() {
            return Err(self.invalid(
                "stage.path",
                "must not be empty: name a folder for the stage, e.g. \"./weir-data\"",
            ));
        }
        if raw.target.kind != "postgres" {
            return Err(self.invalid(
                "target.kind",
                format!(
                    "unknown kind `{}`: the only target is \"postgres\"",
                    raw.target.kind
                ),
            ));
        }
        check_env_name(&raw.target.dsn_env).map_err(|m| self.invalid("target.dsn_env", m))?;
        let lock_timeout_ms = raw
            .target
            .lock_timeout_ms
            .unwrap_or(limits::LOCK_TIMEOUT_MS_DEFAULT);
        if !(1..=limits::LOCK_TIMEOUT_MS_MAX).contains(&lock_timeout_ms) {
            return Err(self.invalid(
                "target.lock_timeout_ms",
                format!(
                    "must be between 1 and {} (milliseconds a partition write waits for a lock)",
                    limits::LOCK_TIMEOUT_MS_MAX
                ),
            ));
        }
        let engine = self.engine(raw.engine)?;
        let stage_max_unwritten_bytes = match raw.stage.max_unwritten_mb {
            None => None,
            Some(mb) if (1..=limits::MAX_UNWRITTEN_MB_MAX).contains(&mb) => Some(mb << 20),
            Some(_) => {
                return Err(self.invalid(
                    "stage.max_unwritten_mb",
                    format!(
                        "must be between 1 and {} (leave it out for no limit)",
                        limits::MAX_UNWRITTEN_MB_MAX
                    ),
                ));
            }
        };
        if raw.tables.is_empty() {
            return Err(self.invalid("table", "no [[table]] is configured: add one with source, target, key, partition_by, grain and columns"));
        }
        let mut tables = Vec::with_capacity(raw.tables.len());
        let (mut sources, mut targets) = (HashSet::new(), HashSet::new());
        for (i, t) in raw.tables.into_iter().enumerate() {
            let table = self.table(i, t)?;
            if !sources.insert(table.source.clone()) {
                return Err(self.invalid(
                    format!("table[{i}].source"),
                    format!("`{}` is configured twice", table.source),
                ));
            }
            if !targets.insert(table.target.clone()) {
                return Err(self.invalid(
                    format!("table[{i}].target"),
                    format!("`{}` is the target of two tables", table.target),
                ));
            }
            tables.push(table);
        }
        let config = Config {
            path: self.path.to_owned(),
            source,
            stage_path: self.resolve(&raw.stage.path),
            stage_max_unwritten_bytes,
            target: TargetConfig {
                dsn_env: raw.target.dsn_env,
                lock_timeout_ms,
            },
            engine,
            tables,
        };
        let budget = config.memory_budget();
        if let Some(limit) = config.engine.memory_limit_bytes
            && budget.total > limit
        {
            return Err(self.invalid(
                "engine.memory_limit_mb",
                format!(
                    "the config's memory budget is {}, more than the limit of {}: lower `parallelism`, or a table's `plugin_memory_mb` or `plugin_output_mb`, or raise the limit",
                    budget.explain(),
                    budget::mib(limit)
                ),
            ));
        }
        Ok(config)
    }
}

/// [`ConfigError::Parse`] of a TOML error in `text`.
fn parse_error(text: &str, path: &Path, error: &toml::de::Error) -> ConfigError {
    let at = error.span().map_or(0, |s| s.start).min(text.len());
    let before = text.get(..at).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    // Field names are in backticks; values the parser quotes are in double quotes.
    let mut message = String::new();
    for (i, part) in error.message().trim().split('"').enumerate() {
        message.push_str(if i % 2 == 1 { "\"…\"" } else { part });
    }
    // The key of the line (never its value), as the parser's quoted line said it.
    if let Some(key) = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && k.len() <= 64)
    {
        message = format!("`{key}`: {message}");
    }
    let secret_key = ["dsn", "password", "url", "uri", "connection_string"]
        .iter()
        .any(|k| message.contains(&format!("unknown field `{k}`")));
    ConfigError::Parse {
        path: path.to_owned(),
        line,
        column,
        message,
        hint: if secret_key {
            " (a connection string goes in an environment variable that `dsn_env` names: secrets stay out of config files)"
        } else {
            ""
        },
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else if name.contains("://") || name.contains('=') || name.contains('@') || name.contains(':')
    {
        Err("must name an environment variable holding the DSN, not the DSN itself (secrets stay out of config files)".into())
    } else {
        Err(format!("`{name}` is not an environment variable name"))
    }
}

#[cfg(test)]
mod tests;
