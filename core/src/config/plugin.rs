//! A table's WebAssembly transform plugin: its component, its config pairs, what a
//! rejected row does, and its sandbox limits, each checked against its bounds.

use std::path::PathBuf;

use serde::Deserialize;

use super::raw::RawTable;
use super::{ConfigError, Validator};

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

impl Validator<'_> {
    /// The plugin settings of table `i`; every limit is checked against its bounds.
    pub(super) fn plugin(
        &self,
        i: usize,
        raw: &RawTable,
    ) -> Result<Option<PluginConfig>, ConfigError> {
        let field = |name: &str| format!("table[{i}].{name}");
        let Some(path) = &raw.plugin else {
            let stray = [
                ("plugin_config", raw.plugin_config.is_some()),
                ("on_reject", raw.on_reject.is_some()),
                ("plugin_memory_mb", raw.plugin_memory_mb.is_some()),
                ("plugin_output_mb", raw.plugin_output_mb.is_some()),
                ("plugin_fuel_per_call", raw.plugin_fuel_per_call.is_some()),
                ("plugin_fuel_per_row", raw.plugin_fuel_per_row.is_some()),
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
        let output_mb = bounded(
            "plugin_output_mb",
            raw.plugin_output_mb,
            *crate::limits::OUTPUT_MB_RANGE.start(),
            *crate::limits::OUTPUT_MB_RANGE.end(),
            (defaults.output_bytes_per_call >> 20) as u64,
        )?;
        let fuel = bounded(
            "plugin_fuel_per_call",
            raw.plugin_fuel_per_call,
            *crate::limits::FUEL_PER_CALL_RANGE.start(),
            *crate::limits::FUEL_PER_CALL_RANGE.end(),
            defaults.fuel_per_call,
        )?;
        let fuel_per_row = bounded(
            "plugin_fuel_per_row",
            raw.plugin_fuel_per_row,
            *crate::limits::FUEL_PER_ROW_RANGE.start(),
            *crate::limits::FUEL_PER_ROW_RANGE.end(),
            defaults.fuel_per_row,
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
                output_bytes_per_call: (output_mb << 20) as usize,
                fuel_per_call: fuel,
                fuel_per_row,
                timeout_per_call: std::time::Duration::from_millis(timeout_ms),
                max_stack_bytes: (stack_kb << 10) as usize,
                log_messages_per_call: log_messages as u32,
                log_message_bytes: log_bytes as usize,
            },
        }))
    }
}
