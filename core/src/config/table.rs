//! A `[[table]]`: the source and target names, the declared columns, how the table is
//! partitioned and written, and the checks of all of them.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;

use super::raw::{RawColumn, RawTable};
use super::{ConfigError, PluginConfig, Validator};
use crate::partition::Grain;
use crate::value::{BinaryEncoding, ColumnType, EpochUnit};

/// What to do with a row whose partition column is NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnNullPartition {
    /// Put it in the partition named `__null__`.
    NullPartition,
    /// Treat the record as bad (see `on_bad_record`).
    Reject,
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
    /// How a `bytea` column's values are written in the feed
    /// (`columns = { b = { type = "bytea", encoding = "hex" } }`); `None`: base64, and a
    /// schema that says `string` is refused as ambiguous.
    pub encoding: Option<BinaryEncoding>,
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

/// How a dirty partition reaches the target (`write = "auto" | "replace" | "merge"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Each write costs what changed: merge the changed keys where `Merge` applies and
    /// fewer than half the partition's rows changed, else replace the partition.
    #[default]
    Auto,
    /// Delete the partition and COPY the output of all its staged rows.
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
            WriteMode::Auto => "auto",
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

impl Validator<'_> {
    pub(super) fn table(&self, i: usize, raw: RawTable) -> Result<TableConfig, ConfigError> {
        let field = |name: &str| format!("table[{i}].{name}");
        let source = TableName::parse(&raw.source).ok_or_else(|| {
            self.invalid(
                field("source"),
                format!("`{}` is not a table name: use schema.table, each part as PostgreSQL stores it (case and all, no quotes; a name holding a dot cannot be configured)", raw.source),
            )
        })?;
        let target = TableName::parse(&raw.target).ok_or_else(|| {
            self.invalid(
                field("target"),
                format!("`{}` is not a table name: use schema.table, each part as PostgreSQL stores it (case and all, no quotes; a name holding a dot cannot be configured)", raw.target),
            )
        })?;
        let plugin = self.plugin(i, &raw)?;
        let write = match raw.write.as_deref() {
            None | Some("auto") => WriteMode::Auto,
            Some("replace") => WriteMode::Replace,
            Some("merge") => WriteMode::Merge,
            Some(other) => {
                return Err(self.invalid(
                    field("write"),
                    format!(
                        "unknown write mode `{other}`: use \"auto\" (the default), \"replace\" or \"merge\""
                    ),
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
            let (declared, epoch, encoding) = match raw_column {
                RawColumn::Type(declared) => (declared, None, None),
                RawColumn::Full(spec) => (spec.ty, spec.epoch, spec.encoding),
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
            let encoding =
                match encoding {
                    None => None,
                    Some(_) if ty != ColumnType::Bytea => {
                        return Err(self.invalid(
                            format!("table[{i}].columns.{name}.encoding"),
                            format!("an encoding is for bytea columns; `{name}` is {declared}"),
                        ));
                    }
                    Some(e) => Some(e.parse::<BinaryEncoding>().map_err(|e| {
                        self.invalid(format!("table[{i}].columns.{name}.encoding"), e)
                    })?),
                };
            if name.is_empty() || name.contains('\0') {
                return Err(self.invalid(field("columns"), "column names must be non-empty"));
            }
            columns.push(Column {
                name,
                declared,
                ty,
                epoch,
                encoding,
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
