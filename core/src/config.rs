//! The TOML configuration file.
//!
//! Loading is two steps, as in Vector's sinks: [`Config::load`] parses and validates
//! without any I/O beyond reading the file itself (no network, no environment), and
//! [`Config::target_dsn`] resolves secrets from the environment when the runtime needs
//! them. Every error names the file and the field.
//!
//! **Architecture Invariant**: a DSN is held only as a [`Dsn`], whose `Debug` and
//! `Display` redact it, and no error carries a DSN or the cause of a DSN parse failure.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Deserialize;

use crate::partition::Grain;
use crate::value::{ColumnType, EpochUnit};

/// Bounds on engine settings. Each bounds a resource a typo could exhaust.
pub mod limits {
    /// Partition jobs at once: each holds a target connection and one partition in memory.
    pub const PARALLELISM_MAX: usize = 64;
    /// Transactions staged in one synced batch (group commit): bounds batch memory.
    pub const BATCH_TRANSACTIONS_MAX: usize = 100_000;
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
    #[error("{}: invalid TOML", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{}: {field}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{}: {field}: environment variable {var} is not set: export it with the connection string (postgres://user:password@host:port/db)", path.display())]
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

/// What to do with a source record that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnBadRecord {
    /// Stop; nothing after the record is acknowledged.
    Fail,
    /// Keep the record in the target's `weir.dead_letter` with the reason, and go on.
    DeadLetter,
}

/// What to do with a row whose partition column is NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnNullPartition {
    /// Put it in the partition named `__null__`.
    NullPartition,
    /// Treat the record as bad (see `on_bad_record`).
    Reject,
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
        slot: String,
        publication: String,
        /// Rows per chunk of the initial snapshot.
        snapshot_chunk_rows: usize,
        /// An idle stream writes a heartbeat this often, so the slot's position keeps
        /// up with WAL that other databases write (and the server can recycle it).
        heartbeat_interval_ms: u64,
    },
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
}

/// `schema.name` of a table; both parts are quoted when used in SQL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    pub schema: String,
    pub name: String,
}

impl TableName {
    /// Parses `schema.name`; a bare `name` is in `public`.
    pub fn parse(text: &str) -> Option<TableName> {
        let (schema, name) = text.split_once('.').unwrap_or(("public", text));
        let ok = |s: &str| !s.is_empty() && !s.contains('.') && !s.contains('\0');
        (ok(schema) && ok(name)).then(|| TableName {
            schema: schema.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The name quoted for SQL: `"schema"."name"`.
    pub fn quoted(&self) -> String {
        format!("{}.{}", quote_ident(&self.schema), quote_ident(&self.name))
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

/// Quotes an SQL identifier.
pub fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Quotes a text as an SQL string literal, correct whatever the server's
/// `standard_conforming_strings` is: an escape string, `E'…'`, with `\` and `'`
/// doubled. `None` for a text holding NUL, which no PostgreSQL string can hold. The one
/// way Weir puts a value in SQL text where a bind parameter cannot go (partition
/// bounds in DDL, the simple-protocol read of `verify`).
pub fn quote_literal(text: &str) -> Option<String> {
    if text.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str("E'");
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("''"),
            c => out.push(c),
        }
    }
    out.push('\'');
    Some(out)
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// The type as the user declared it (e.g. `numeric(12,2)`), used verbatim in DDL.
    pub declared: String,
    pub ty: ColumnType,
    /// The unit of a number sent for this date or timestamp column when the feed does
    /// not say (`columns = { at = { type = "timestamp", epoch = "ms" } }`); `None`: a
    /// number is a bad record.
    pub epoch: Option<EpochUnit>,
}

#[derive(Debug, Clone)]
pub struct TableConfig {
    pub source: TableName,
    pub target: TableName,
    pub key: Vec<String>,
    pub partition_by: String,
    pub grain: Grain,
    pub on_null_partition: OnNullPartition,
    pub on_truncate: OnTruncate,
    pub columns: Vec<Column>,
    /// The table's transform plugin; `None`: the identity transform.
    pub plugin: Option<PluginConfig>,
    /// How the target table is laid out.
    pub target_partitioning: TargetPartitioning,
    /// How a dirty partition is written.
    pub write: WriteMode,
}

/// How a dirty partition reaches the target (`write = "replace" | "merge"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Delete the partition and COPY the output of all its staged rows.
    #[default]
    Replace,
    /// Delete the target rows of the keys changed since the partition's last write and
    /// COPY their new output. For the identity and `row`-kind plugins whose grain key
    /// is the table's key; a partition never written, or written by another plugin or
    /// config, is replaced instead.
    Merge,
}

impl WriteMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteMode::Replace => "replace",
            WriteMode::Merge => "merge",
        }
    }
}

/// The layout of a target table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetPartitioning {
    /// One plain table with an index on the partition column; a partition is replaced
    /// with DELETE.
    #[default]
    Plain,
    /// A PostgreSQL partitioned table (RANGE by time grain, LIST by value) with one
    /// child table per partition, created on demand; a partition is replaced with
    /// DELETE through the parent (MVCC-safe, unlike TRUNCATE: readers never see it
    /// empty).
    Native,
}

/// A table's WebAssembly transform plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The component file (relative paths are resolved against the config's folder).
    pub path: PathBuf,
    /// `[table.plugin_config]` as sorted, unique key/value text pairs.
    pub config: Vec<(String, String)>,
    pub on_reject: OnReject,
    pub limits: crate::limits::SandboxLimits,
}

/// What a row the plugin rejects does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnReject {
    /// Written to `weir.dead_letter` (with the reason, the key, the input row and the
    /// plugin's sha256) in the partition's own transaction; the partition is written.
    DeadLetter,
    /// The partition job fails, naming the key and the reason; nothing is written.
    Fail,
}

/// What a TRUNCATE of a source table does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnTruncate {
    /// Stop the source; nothing past the TRUNCATE is acknowledged.
    Fail,
    /// Remove every staged row of the table; every partition of it is rewritten.
    Apply,
}

impl TableConfig {
    /// The same table with its columns known (from the source's catalog), checked as a
    /// declared table is: key and partition column exist and have usable types.
    pub fn with_columns(
        &self,
        columns: Vec<Column>,
    ) -> Result<TableConfig, (&'static str, String)> {
        let table = TableConfig {
            columns,
            ..self.clone()
        };
        table.check_columns()?;
        Ok(table)
    }

    /// Checks key and partition column against the columns; the error names the field
    /// (`key`, `partition_by`, `grain`) and says what is wrong.
    pub fn check_columns(&self) -> Result<(), (&'static str, String)> {
        let find = |name: &str| self.columns.iter().find(|c| c.name == name);
        for k in &self.key {
            let col = find(k).ok_or_else(|| ("key", format!("`{k}` is not a declared column")))?;
            if matches!(
                col.ty,
                ColumnType::Json
                    | ColumnType::Jsonb
                    | ColumnType::Bytea
                    | ColumnType::Real
                    | ColumnType::Double
            ) {
                return Err((
                    "key",
                    format!("`{k}` has type {}, which cannot be a key", col.declared),
                ));
            }
        }
        let part = find(&self.partition_by).ok_or_else(|| {
            (
                "partition_by",
                format!("`{}` is not a declared column", self.partition_by),
            )
        })?;
        match self.grain {
            Grain::Value if !part.ty.is_value_partitionable() => Err((
                "grain",
                format!(
                    "grain \"value\" needs an integer, text, boolean, date or uuid column; `{}` is {}",
                    part.name, part.declared
                ),
            )),
            Grain::Hour if part.ty == ColumnType::Date => Err((
                "grain",
                format!(
                    "grain \"hour\" needs a timestamp column; `{}` is a date",
                    part.name
                ),
            )),
            Grain::Day | Grain::Month | Grain::Hour if !part.ty.is_temporal() => Err((
                "grain",
                format!(
                    "grain \"{}\" needs a date or timestamp column; `{}` is {}",
                    self.grain, part.name, part.declared
                ),
            )),
            _ => Ok(()),
        }
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }

    pub fn partition_column(&self) -> &Column {
        // Validated at load: partition_by names a declared column.
        self.column(&self.partition_by).unwrap_or(&self.columns[0])
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

// ---- the file's shape -------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    source: RawSource,
    stage: RawStage,
    target: RawTarget,
    #[serde(default)]
    engine: RawEngine,
    #[serde(default, rename = "table")]
    tables: Vec<RawTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    kind: String,
    path: Option<String>,
    on_bad_record: Option<OnBadRecord>,
    dsn_env: Option<String>,
    slot: Option<String>,
    publication: Option<String>,
    snapshot_chunk_rows: Option<usize>,
    heartbeat_interval_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    path: String,
    max_unwritten_mb: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    kind: String,
    dsn_env: String,
    lock_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    parallelism: Option<usize>,
    flush_interval_ms: Option<u64>,
    batch_transactions_max: Option<usize>,
    transaction_chunk_changes: Option<usize>,
}

/// A declared column: `"numeric(12,2)"`, or `{ type = "timestamp", epoch = "ms" }`.
#[derive(Debug)]
enum RawColumn {
    Type(String),
    Full(RawColumnSpec),
}

impl<'de> Deserialize<'de> for RawColumn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = RawColumn;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a column type such as \"bigint\", or { type = \"timestamp\", epoch = \"ms\" }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawColumn, E> {
                Ok(RawColumn::Type(v.to_owned()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RawColumn, A::Error> {
                RawColumnSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawColumn::Full)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawColumnSpec {
    #[serde(rename = "type")]
    ty: String,
    epoch: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    source: String,
    target: String,
    key: Vec<String>,
    partition_by: String,
    grain: Grain,
    on_null_partition: Option<OnNullPartition>,
    on_truncate: Option<OnTruncate>,
    target_partitioning: Option<TargetPartitioning>,
    #[serde(default)]
    columns: IndexMap<String, RawColumn>,
    plugin: Option<String>,
    plugin_config: Option<toml::Table>,
    on_reject: Option<OnReject>,
    plugin_memory_mb: Option<u64>,
    plugin_fuel_per_call: Option<u64>,
    plugin_timeout_ms: Option<u64>,
    plugin_max_stack_kb: Option<usize>,
    plugin_log_messages_per_call: Option<u32>,
    plugin_log_message_bytes: Option<usize>,
    write: Option<String>,
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
        let raw: RawConfig = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
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
        let value = env(var).ok_or_else(|| ConfigError::MissingEnv {
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
        Ok(Config {
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
        })
    }

    fn source(&self, raw: RawSource) -> Result<SourceConfig, ConfigError> {
        match raw.kind.as_str() {
            "jsonl" => {
                for (field, set) in [
                    ("dsn_env", raw.dsn_env.is_some()),
                    ("slot", raw.slot.is_some()),
                    ("publication", raw.publication.is_some()),
                    ("snapshot_chunk_rows", raw.snapshot_chunk_rows.is_some()),
                    ("heartbeat_interval_ms", raw.heartbeat_interval_ms.is_some()),
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
                    slot,
                    publication,
                    snapshot_chunk_rows,
                    heartbeat_interval_ms,
                })
            }
            other => Err(self.invalid(
                "source.kind",
                format!("unknown kind `{other}`: use \"postgres\" or \"jsonl\""),
            )),
        }
    }

    fn engine(&self, raw: RawEngine) -> Result<EngineConfig, ConfigError> {
        let parallelism = raw.parallelism.unwrap_or(2);
        if !(1..=limits::PARALLELISM_MAX).contains(&parallelism) {
            return Err(self.invalid(
                "engine.parallelism",
                format!("must be between 1 and {}", limits::PARALLELISM_MAX),
            ));
        }
        let flush_interval_ms = raw.flush_interval_ms.unwrap_or(1000);
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
        Ok(EngineConfig {
            parallelism,
            flush_interval_ms,
            batch_transactions_max,
            transaction_chunk_changes,
        })
    }

    fn table(&self, i: usize, raw: RawTable) -> Result<TableConfig, ConfigError> {
        let field = |name: &str| format!("table[{i}].{name}");
        let source = TableName::parse(&raw.source).ok_or_else(|| {
            self.invalid(
                field("source"),
                format!("`{}` is not a table name: use schema.table", raw.source),
            )
        })?;
        let target = TableName::parse(&raw.target).ok_or_else(|| {
            self.invalid(
                field("target"),
                format!("`{}` is not a table name: use schema.table", raw.target),
            )
        })?;
        let plugin = self.plugin(i, &raw)?;
        let write = match raw.write.as_deref() {
            None | Some("replace") => WriteMode::Replace,
            Some("merge") => WriteMode::Merge,
            Some(other) => {
                return Err(self.invalid(
                    field("write"),
                    format!("unknown write mode `{other}`: use \"replace\" or \"merge\""),
                ));
            }
        };
        let from_source_catalog = self.postgres_source;
        if raw.columns.is_empty() && !from_source_catalog {
            return Err(self.invalid(
                field("columns"),
                "a JSON-lines feed has no schema: declare the columns, e.g. columns = { id = \"bigint\", order_date = \"date\" }",
            ));
        }
        if !raw.columns.is_empty() && from_source_catalog {
            return Err(self.invalid(
                field("columns"),
                "with source.kind = \"postgres\" the columns come from the source table: remove `columns`",
            ));
        }
        let mut columns = Vec::with_capacity(raw.columns.len());
        for (name, raw_column) in raw.columns {
            let (declared, epoch) = match raw_column {
                RawColumn::Type(declared) => (declared, None),
                RawColumn::Full(spec) => (spec.ty, spec.epoch),
            };
            let ty = declared
                .parse::<ColumnType>()
                .map_err(|e| self.invalid(format!("table[{i}].columns.{name}"), e.to_string()))?;
            let epoch = match epoch {
                None => None,
                Some(_) if !ty.is_temporal() => {
                    return Err(self.invalid(
                        format!("table[{i}].columns.{name}.epoch"),
                        format!(
                            "an epoch unit is for date and timestamp columns; `{name}` is {declared}"
                        ),
                    ));
                }
                Some(unit) => Some(
                    unit.parse::<EpochUnit>()
                        .map_err(|e| self.invalid(format!("table[{i}].columns.{name}.epoch"), e))?,
                ),
            };
            if name.is_empty() || name.contains('\0') {
                return Err(self.invalid(field("columns"), "column names must be non-empty"));
            }
            columns.push(Column {
                name,
                declared,
                ty,
                epoch,
            });
        }
        if raw.key.is_empty() {
            return Err(self.invalid(
                field("key"),
                "must name at least one column (the row's primary key)",
            ));
        }
        if raw.key.iter().collect::<HashSet<_>>().len() != raw.key.len() {
            return Err(self.invalid(field("key"), "names a column twice"));
        }
        for (f, what, name) in [
            ("source", "schema", &source.schema),
            ("source", "table", &source.name),
            ("target", "schema", &target.schema),
            ("target", "table", &target.name),
            ("partition_by", "column", &raw.partition_by),
        ]
        .into_iter()
        .chain(raw.key.iter().map(|k| ("key", "column", k)))
        .chain(columns.iter().map(|c| ("columns", "column", &c.name)))
        {
            self.check_identifier(field(f), what, name)?;
        }
        let table = TableConfig {
            source,
            target,
            key: raw.key,
            partition_by: raw.partition_by,
            grain: raw.grain,
            on_null_partition: raw
                .on_null_partition
                .unwrap_or(OnNullPartition::NullPartition),
            on_truncate: raw.on_truncate.unwrap_or(OnTruncate::Fail),
            columns,
            plugin,
            target_partitioning: raw.target_partitioning.unwrap_or_default(),
            write,
        };
        if !from_source_catalog {
            table
                .check_columns()
                .map_err(|(name, message)| self.invalid(field(name), message))?;
        }
        Ok(table)
    }
}

impl Validator<'_> {
    /// The plugin settings of table `i`; every limit is checked against its bounds.
    fn plugin(&self, i: usize, raw: &RawTable) -> Result<Option<PluginConfig>, ConfigError> {
        let field = |name: &str| format!("table[{i}].{name}");
        let Some(path) = &raw.plugin else {
            let stray = [
                ("plugin_config", raw.plugin_config.is_some()),
                ("on_reject", raw.on_reject.is_some()),
                ("plugin_memory_mb", raw.plugin_memory_mb.is_some()),
                ("plugin_fuel_per_call", raw.plugin_fuel_per_call.is_some()),
                ("plugin_timeout_ms", raw.plugin_timeout_ms.is_some()),
                ("plugin_max_stack_kb", raw.plugin_max_stack_kb.is_some()),
                (
                    "plugin_log_messages_per_call",
                    raw.plugin_log_messages_per_call.is_some(),
                ),
                (
                    "plugin_log_message_bytes",
                    raw.plugin_log_message_bytes.is_some(),
                ),
            ];
            if let Some((name, _)) = stray.iter().find(|(_, set)| *set) {
                return Err(self.invalid(
                    field(name),
                    "only applies to a table with a `plugin`: set `plugin = \"path/to/plugin.wasm\"` or remove it",
                ));
            }
            return Ok(None);
        };
        if path.trim().is_empty() {
            return Err(self.invalid(
                field("plugin"),
                "is empty: give the path of a .wasm component",
            ));
        }
        let mut config = Vec::new();
        for (key, value) in raw.plugin_config.iter().flatten() {
            let text = match value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                // A float's text would not be what the user wrote (`1.10` reads 1.1).
                toml::Value::Float(_) => {
                    return Err(self.invalid(
                        format!("table[{i}].plugin_config.{key}"),
                        "is a float: write it as a string (e.g. \"1.0825\") so its digits reach the plugin exactly",
                    ));
                }
                _ => {
                    return Err(self.invalid(
                        format!("table[{i}].plugin_config.{key}"),
                        "must be a string, integer or boolean (plugins receive text)",
                    ));
                }
            };
            config.push((key.clone(), text));
        }
        let defaults = crate::limits::SandboxLimits::default();
        let bounded = |name: &str, value: Option<u64>, min: u64, max: u64, default: u64| match value
        {
            None => Ok(default),
            Some(v) if (min..=max).contains(&v) => Ok(v),
            Some(v) => Err(self.invalid(field(name), format!("{v} is outside {min} to {max}"))),
        };
        let memory_mb = bounded(
            "plugin_memory_mb",
            raw.plugin_memory_mb,
            *crate::limits::MEMORY_MB_RANGE.start(),
            *crate::limits::MEMORY_MB_RANGE.end(),
            defaults.memory_bytes >> 20,
        )?;
        let fuel = bounded(
            "plugin_fuel_per_call",
            raw.plugin_fuel_per_call,
            *crate::limits::FUEL_PER_CALL_RANGE.start(),
            *crate::limits::FUEL_PER_CALL_RANGE.end(),
            defaults.fuel_per_call,
        )?;
        let timeout_ms = bounded(
            "plugin_timeout_ms",
            raw.plugin_timeout_ms,
            *crate::limits::TIMEOUT_MS_RANGE.start(),
            *crate::limits::TIMEOUT_MS_RANGE.end(),
            defaults.timeout_per_call.as_millis() as u64,
        )?;
        let stack_kb = bounded(
            "plugin_max_stack_kb",
            raw.plugin_max_stack_kb.map(|k| k as u64),
            *crate::limits::MAX_STACK_KB_RANGE.start(),
            *crate::limits::MAX_STACK_KB_RANGE.end(),
            (defaults.max_stack_bytes >> 10) as u64,
        )?;
        let log_messages = bounded(
            "plugin_log_messages_per_call",
            raw.plugin_log_messages_per_call.map(u64::from),
            0,
            100_000,
            u64::from(defaults.log_messages_per_call),
        )?;
        let log_bytes = bounded(
            "plugin_log_message_bytes",
            raw.plugin_log_message_bytes.map(|b| b as u64),
            64,
            1 << 20,
            defaults.log_message_bytes as u64,
        )?;
        Ok(Some(PluginConfig {
            path: self.resolve(path),
            config: crate::limits::normalize_config(&config),
            on_reject: raw.on_reject.unwrap_or(OnReject::DeadLetter),
            limits: crate::limits::SandboxLimits {
                memory_bytes: memory_mb << 20,
                fuel_per_call: fuel,
                timeout_per_call: std::time::Duration::from_millis(timeout_ms),
                max_stack_bytes: (stack_kb << 10) as usize,
                log_messages_per_call: log_messages as u32,
                log_message_bytes: log_bytes as usize,
            },
        }))
    }
}

fn check_env_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else if name.contains("://") || name.contains('=') {
        Err("must name an environment variable holding the DSN, not the DSN itself (secrets stay out of config files)".into())
    } else {
        Err(format!("`{name}` is not an environment variable name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[source]
kind = "jsonl"
path = "feed.jsonl"

[stage]
path = "./weir-data"

[target]
kind = "postgres"
dsn_env = "WEIR_TEST_TARGET_DSN"

[[table]]
source = "public.orders"
target = "analytics.fact_orders"
key = ["id"]
partition_by = "order_date"
grain = "day"
columns = { id = "bigint", order_date = "date", amount = "numeric(12,2)" }
"#;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/weir/weir.toml"))
    }

    fn error_of(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("config should be refused:\n{text}"),
            Err(e) => {
                let mut msg = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    msg.push_str(&format!(": {s}"));
                    src = s.source();
                }
                msg
            }
        }
    }

    #[test]
    fn a_feed_file_has_one_id_however_its_config_is_spelled() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("feed.jsonl"), "").expect("feed");
        let ids: Vec<String> = ["weir.toml", "sub/../weir.toml", "./sub/../weir.toml"]
            .iter()
            .map(|name| {
                Config::parse(GOOD, &dir.path().join(name))
                    .expect("valid")
                    .source_id()
            })
            .collect();
        let canonical = std::fs::canonicalize(dir.path().join("feed.jsonl")).expect("canonical");
        assert_eq!(ids[0], format!("jsonl:{}", canonical.display()));
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        // A feed not created yet: its canonical folder and its name.
        let later = GOOD.replace("feed.jsonl", "sub/../later.jsonl");
        let id = Config::parse(&later, &dir.path().join("weir.toml"))
            .expect("valid")
            .source_id();
        let folder = std::fs::canonicalize(dir.path()).expect("canonical");
        assert_eq!(
            id,
            format!("jsonl:{}", folder.join("later.jsonl").display())
        );
        // Older spellings of one file are one feed; other files, stdin and slots are not.
        let spelled = format!("jsonl:{}/sub/../feed.jsonl", dir.path().display());
        assert!(same_feed(&spelled, &ids[0]));
        assert!(!same_feed(&ids[0], &id));
        assert!(!same_feed("jsonl:stdin", &ids[0]));
        assert!(same_feed("jsonl:stdin", "jsonl:stdin"));
        assert!(!same_feed("postgres:slot=a", "postgres:slot=b"));
    }

    #[test]
    fn a_good_config_validates_and_resolves_paths() {
        let config = parse(GOOD).expect("valid");
        assert_eq!(config.stage_path, Path::new("/etc/weir/./weir-data"));
        assert_eq!(
            config.source,
            SourceConfig::Jsonl {
                path: Some("/etc/weir/feed.jsonl".into()),
                on_bad_record: OnBadRecord::Fail
            }
        );
        let t = &config.tables[0];
        assert_eq!(t.target.quoted(), "\"analytics\".\"fact_orders\"");
        assert_eq!(
            t.columns
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["id", "order_date", "amount"]
        );
    }

    #[test]
    fn a_column_may_declare_its_epoch_unit() {
        let with =
            |spec: &str| GOOD.replace("order_date = \"date\"", &format!("order_date = {spec}"));
        let config = parse(&with("{ type = \"date\", epoch = \"days\" }")).expect("valid");
        let column = config.tables[0].column("order_date").expect("column");
        assert_eq!(
            (column.ty, column.epoch),
            (ColumnType::Date, Some(EpochUnit::Days))
        );
        let config = parse(&with("{ type = \"date\" }")).expect("valid");
        assert_eq!(
            config.tables[0].column("order_date").expect("column").epoch,
            None
        );
        let err = error_of(&with("{ type = \"date\", epoch = \"fortnights\" }"));
        assert!(
            err.contains("table[0].columns.order_date.epoch: unknown epoch unit `fortnights`"),
            "{err}"
        );
        let err = error_of(&GOOD.replace(
            "\"numeric(12,2)\"",
            "{ type = \"numeric(12,2)\", epoch = \"ms\" }",
        ));
        assert!(
            err.contains(
                "table[0].columns.amount.epoch: an epoch unit is for date and timestamp columns"
            ),
            "{err}"
        );
        let err = error_of(&with("{ type = \"date\", unit = \"ms\" }"));
        assert!(err.contains("unknown field `unit`"), "{err}");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let cases = [
            (GOOD.replace("grain = \"day\"", "grain = \"week\""), "grain"),
            (
                GOOD.replace("key = [\"id\"]", "key = [\"nope\"]"),
                "table[0].key: `nope` is not a declared column",
            ),
            (
                GOOD.replace("partition_by = \"order_date\"", "partition_by = \"amount\""),
                "table[0].grain",
            ),
            (
                GOOD.replace("\"numeric(12,2)\"", "\"point\""),
                "table[0].columns.amount: unknown column type `point`",
            ),
            (
                GOOD.replace(
                    "dsn_env = \"WEIR_TEST_TARGET_DSN\"",
                    "dsn_env = \"postgres://u:pw@h/db\"",
                ),
                "target.dsn_env: must name an environment variable",
            ),
            (
                GOOD.replace("kind = \"jsonl\"", "kind = \"kafka\""),
                "source.kind: unknown kind `kafka`",
            ),
            (
                GOOD.replace("[stage]", "[stage]\ncolour = 1"),
                "unknown field `colour`",
            ),
            (
                GOOD.replace("path = \"feed.jsonl\"", ""),
                "source.path: required",
            ),
        ];
        for (text, want) in cases {
            let msg = error_of(&text);
            assert!(msg.starts_with("/etc/weir/weir.toml"), "{msg}");
            assert!(msg.contains(want), "want `{want}` in: {msg}");
        }
    }

    #[test]
    fn a_dsn_never_appears_in_errors_or_debug_output() {
        let secret = "hunter2-very-secret";
        let config = parse(GOOD).expect("valid");
        let bad = format!("postgres://user:{secret}@host:notaport/db");
        let err = config
            .dsn_from_env("target.dsn_env", "V", |_| Some(bad.clone()))
            .expect_err("bad port must be refused");
        assert!(
            err.to_string()
                .contains("target.dsn_env: environment variable V does not hold a valid")
        );
        assert!(!format!("{err} {err:?}").contains(secret));
        let good = format!("postgres://user:{secret}@host:5432/db");
        let dsn = config
            .dsn_from_env("target.dsn_env", "V", |_| Some(good.clone()))
            .expect("valid dsn");
        assert!(!format!("{dsn} {dsn:?} {config:?}").contains(secret));
        assert_eq!(dsn.expose(), good);
        let missing = config
            .dsn_from_env("target.dsn_env", "V", |_| None)
            .expect_err("unset");
        assert!(
            missing
                .to_string()
                .contains("environment variable V is not set")
        );
    }
}
