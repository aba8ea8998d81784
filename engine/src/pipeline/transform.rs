//! A table's transform: the identity, or a plugin (loaded and described; its jobs run
//! in `stream`).

use std::sync::Arc;

use super::PipelineError;
use crate::config::{Column, PluginConfig, TableConfig, WriteMode};
use crate::plugin::{self, Kind, Plugin, PluginHost};

/// The transform of a table without a plugin.
pub const IDENTITY_TRANSFORM: &str = "identity";

/// A table's transform, ready to run.
#[derive(Clone)]
pub enum Transform {
    Identity,
    Plugin {
        plugin: Arc<Plugin>,
        settings: PluginConfig,
        config_hash: String,
    },
}

impl std::fmt::Debug for Transform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transform::Identity => f.write_str("Identity"),
            Transform::Plugin { plugin, .. } => f.debug_tuple("Plugin").field(plugin).finish(),
        }
    }
}

impl Transform {
    /// Loads a table's plugin (compiling it or loading the cached compilation).
    pub async fn load(
        host: &Arc<PluginHost>,
        table: &TableConfig,
    ) -> Result<Transform, PipelineError> {
        let Some(settings) = table.plugin.clone() else {
            return Ok(Transform::Identity);
        };
        let host = Arc::clone(host);
        let (path, limits) = (settings.path.clone(), settings.limits.clone());
        let plugin = tokio::task::spawn_blocking(move || host.load(&path, &limits))
            .await
            .map_err(PipelineError::Task)??;
        let d = plugin.description();
        tracing::info!(
            table = %table.source,
            plugin = %d.name,
            version = %d.version,
            sha256 = %plugin.sha256_hex(),
            compile_ms = plugin.compile_info().millis,
            cache_hit = plugin.compile_info().cache_hit,
            "plugin loaded"
        );
        let config_hash = plugin::config_hash(&settings.config);
        Ok(Transform::Plugin {
            plugin: Arc::new(plugin),
            settings,
            config_hash,
        })
    }

    /// The table as the target sees it: with a plugin, its declared output columns and
    /// partition column; without one, the source's columns.
    pub fn target_view(&self, table: &TableConfig) -> TableConfig {
        let Transform::Plugin { plugin, .. } = self else {
            return table.clone();
        };
        let d = plugin.description();
        TableConfig {
            columns: d
                .columns
                .iter()
                .map(|c| Column {
                    name: c.name.clone(),
                    declared: if c.nullable {
                        c.ty.ddl()
                    } else {
                        format!("{} NOT NULL", c.ty.ddl())
                    },
                    ty: c.ty.engine_type(),
                    epoch: None,
                    encoding: None,
                })
                .collect(),
            partition_by: d.partition_column.clone(),
            ..table.clone()
        }
    }

    /// Whether the table's write mode suits this transform: `merge` needs what
    /// [`Self::merge_refusal`] checks; `auto` merges only where it applies.
    pub fn check_write_mode(&self, table: &TableConfig) -> Result<(), String> {
        match (table.write, self.merge_refusal(table)) {
            (WriteMode::Merge, Some(why)) => Err(format!("{why}; use write = \"replace\"")),
            _ => Ok(()),
        }
    }

    /// Whether a dirty partition's write may merge its changed keys (`write` is
    /// `merge`, or `auto` and merging applies); else it replaces the partition.
    pub fn merges(&self, table: &TableConfig) -> bool {
        match table.write {
            WriteMode::Replace => false,
            WriteMode::Merge => true,
            WriteMode::Auto => self.merge_refusal(table).is_none(),
        }
    }

    /// Why this transform's partitions cannot be merged, if they cannot: merging needs
    /// the identity or a `row`-kind plugin whose grain key is the table's key, so that
    /// the target rows of a changed key are exactly those with that grain key.
    fn merge_refusal(&self, table: &TableConfig) -> Option<String> {
        let Transform::Plugin { plugin, .. } = self else {
            return None;
        };
        let d = plugin.description();
        if d.kind != Kind::Row {
            return Some(format!(
                "plugin {} is a `partition`-kind plugin (its output may aggregate rows), so its partitions cannot be merged",
                d.name
            ));
        }
        if d.grain_key != table.key {
            return Some(format!(
                "merge needs the plugin's grain key ({}) to be the table's key ({}): a changed key must name the target rows it produced",
                d.grain_key.join(", "),
                table.key.join(", ")
            ));
        }
        None
    }

    /// What lineage records of the plugin: its sha256 (hex) and its config's hash
    /// (both `None` for the identity).
    pub fn lineage_ids(&self) -> (Option<String>, Option<&str>) {
        match self {
            Transform::Identity => (None, None),
            Transform::Plugin {
                plugin,
                config_hash,
                ..
            } => (Some(plugin.sha256_hex()), Some(config_hash.as_str())),
        }
    }

    /// What lineage's `transform` column says: `identity` or `name@version`.
    pub fn label(&self) -> String {
        match self {
            Transform::Identity => IDENTITY_TRANSFORM.to_owned(),
            Transform::Plugin { plugin, .. } => {
                let d = plugin.description();
                format!("{}@{}", d.name, d.version)
            }
        }
    }
}

impl Transform {
    /// The transform's identity in a table's contract: `identity`, or the plugin's
    /// bytes and config (as lineage records them).
    pub fn contract_id(&self) -> String {
        match self {
            Transform::Identity => IDENTITY_TRANSFORM.to_owned(),
            Transform::Plugin {
                plugin,
                config_hash,
                ..
            } => format!("sha256:{} config:{config_hash}", plugin.sha256_hex()),
        }
    }
}
