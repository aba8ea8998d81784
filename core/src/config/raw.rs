//! The file's shape: each section as TOML reads it, before any check. The validator
//! (`Validator`, in `mod.rs` and the section files) turns it into a [`Config`](super::Config)
//! once, naming the field of every error.

use std::fmt;

use indexmap::IndexMap;
use serde::Deserialize;

use super::{OnBadRecord, OnNullPartition, OnReject, OnTruncate, TargetPartitioning};
use crate::partition::Grain;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) source: RawSource,
    pub(super) stage: RawStage,
    pub(super) target: RawTarget,
    #[serde(default)]
    pub(super) engine: RawEngine,
    #[serde(default, rename = "table")]
    pub(super) tables: Vec<RawTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub(super) kind: String,
    pub(super) path: Option<String>,
    pub(super) on_bad_record: Option<OnBadRecord>,
    pub(super) dsn_env: Option<String>,
    pub(super) primary_dsn_env: Option<String>,
    pub(super) slot: Option<String>,
    pub(super) publication: Option<String>,
    pub(super) snapshot_chunk_rows: Option<usize>,
    pub(super) snapshot_parallelism: Option<usize>,
    pub(super) snapshot_method: Option<String>,
    pub(super) heartbeat_interval_ms: Option<u64>,
    pub(super) streaming: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStage {
    pub(super) path: String,
    pub(super) max_unwritten_mb: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) kind: String,
    pub(super) dsn_env: String,
    pub(super) lock_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEngine {
    pub(super) parallelism: Option<usize>,
    pub(super) flush_interval_ms: Option<u64>,
    pub(super) batch_transactions_max: Option<usize>,
    pub(super) transaction_chunk_changes: Option<usize>,
    pub(super) memory_limit_mb: Option<u64>,
}

/// A declared column: `"numeric(12,2)"`, or `{ type = "timestamp", epoch = "ms" }`.
#[derive(Debug)]
pub(super) enum RawColumn {
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
pub(super) struct RawColumnSpec {
    #[serde(rename = "type")]
    pub(super) ty: String,
    pub(super) epoch: Option<String>,
    pub(super) encoding: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTable {
    pub(super) source: String,
    pub(super) target: String,
    pub(super) key: Vec<String>,
    pub(super) partition_by: String,
    pub(super) grain: Grain,
    pub(super) on_null_partition: Option<OnNullPartition>,
    pub(super) on_truncate: Option<OnTruncate>,
    pub(super) target_partitioning: Option<TargetPartitioning>,
    #[serde(default)]
    pub(super) columns: IndexMap<String, RawColumn>,
    pub(super) plugin: Option<String>,
    pub(super) plugin_config: Option<toml::Table>,
    pub(super) on_reject: Option<OnReject>,
    pub(super) plugin_memory_mb: Option<u64>,
    pub(super) plugin_output_mb: Option<u64>,
    pub(super) plugin_fuel_per_call: Option<u64>,
    pub(super) plugin_fuel_per_row: Option<u64>,
    pub(super) plugin_timeout_ms: Option<u64>,
    pub(super) plugin_max_stack_kb: Option<usize>,
    pub(super) plugin_log_messages_per_call: Option<u32>,
    pub(super) plugin_log_message_bytes: Option<usize>,
    pub(super) write: Option<String>,
}
