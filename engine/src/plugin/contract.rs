//! The two plugin contracts the host runs side by side, behind one interface:
//! `weir:transform@0.1.0` (each staged row carries its columns by name) and
//! `weir:transform@0.2.0` (the input schema once per session, rows by position, output
//! in parts). Both share 0.1's `types` and `log` interfaces, so values, output columns,
//! errors and the log are the same types on both.
//!
//! A component is run on 0.2 if it exports `weir:transform/transform@0.2.0`, else on
//! 0.1; one that exports neither fails to load, naming both.

use wasmtime::Store;
use wasmtime::component::{InstancePre, ResourceAny};

use super::job::InputRow;
use super::sandbox::JobState;
use super::{bindings, to_wit, wit, wty};
use crate::feed::Op;
use crate::value::Value;

mod bindings_0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/transform-0.2.0",
        world: "weir:transform/transformer@0.2.0",
        with: {
            "weir:transform/types@0.1.0": super::super::bindings::weir::transform::types,
            "weir:transform/log@0.1.0": super::super::bindings::weir::transform::log,
        },
    });
}

use bindings_0_2::exports::weir::transform0_2_0::transform as v2;

/// The input columns of a job: what a 0.2 session is constructed with, and the order
/// of every row's values (0.1 sessions get each row's columns by name instead).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InputColumns {
    /// Column names, in row order.
    pub names: Vec<String>,
    /// Each column's declared PostgreSQL type (`numeric(12,2)`), empty if unknown.
    pub types: Vec<String>,
    /// Positions in `names` of the table's key columns, in key order.
    pub key: Vec<u32>,
}

impl InputColumns {
    /// Columns of these names and types; the key is the columns named in `key` (a
    /// name not among them is left out).
    pub fn new(columns: Vec<(String, String)>, key: &[String]) -> InputColumns {
        let (names, types): (Vec<String>, Vec<String>) = columns.into_iter().unzip();
        let key = key
            .iter()
            .filter_map(|k| names.iter().position(|n| n == k))
            .map(|p| p as u32)
            .collect();
        InputColumns { names, types, key }
    }

    /// The columns of rows held in memory (`weir plugin test`, tests): every column
    /// name in order of first appearance, typed by `type_of` (empty: unknown); the key
    /// columns are those whose value in the first row is its key's.
    pub fn of_rows(rows: &[InputRow], type_of: impl Fn(&str) -> String) -> InputColumns {
        let mut names: Vec<String> = Vec::new();
        for row in rows {
            for (name, _) in &row.columns {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        let key: Vec<String> = rows
            .first()
            .map(|first| {
                first
                    .key
                    .iter()
                    .filter_map(|k| first.columns.iter().find(|(_, v)| v == k))
                    .map(|(n, _)| n.clone())
                    .collect()
            })
            .unwrap_or_default();
        let columns = names
            .into_iter()
            .map(|n| {
                let t = type_of(&n);
                (n, t)
            })
            .collect();
        InputColumns::new(columns, &key)
    }
}

/// A component linked and checked against one of the contracts, ready to instantiate.
pub enum Pre {
    V0_1(bindings::PluginPre<JobState>),
    V0_2(bindings_0_2::TransformerPre<JobState>),
}

/// An instance of a component.
pub enum World {
    V0_1(bindings::Plugin),
    V0_2(bindings_0_2::Transformer),
}

/// What one call of a session returned: output rows and rejections (the key the
/// plugin named, and why), and whether more of it follows (0.2's `more`).
pub struct Part {
    pub rows: Vec<Vec<wty::Value>>,
    pub rejections: Vec<(Vec<wty::Value>, String)>,
    pub more: bool,
}

type Called = wasmtime::Result<Result<Part, wty::Error>>;

impl Pre {
    /// The component's contract, by what it exports.
    pub fn new(pre: InstancePre<JobState>) -> Result<Pre, String> {
        let v2_error = match bindings_0_2::TransformerPre::new(pre.clone()) {
            Ok(p) => return Ok(Pre::V0_2(p)),
            Err(e) => e,
        };
        bindings::PluginPre::new(pre).map(Pre::V0_1).map_err(|e| {
            format!(
                "it exports neither weir:transform/transform@0.2.0 ({v2_error:#}) nor weir:transform/transform@0.1.0 ({e:#})"
            )
        })
    }

    /// The contract version, as `0.2.0`.
    pub fn contract(&self) -> &'static str {
        match self {
            Pre::V0_1(_) => "0.1.0",
            Pre::V0_2(_) => "0.2.0",
        }
    }

    pub fn instantiate(&self, store: &mut Store<JobState>) -> wasmtime::Result<World> {
        Ok(match self {
            Pre::V0_1(p) => World::V0_1(p.instantiate(store)?),
            Pre::V0_2(p) => World::V0_2(p.instantiate(store)?),
        })
    }
}

impl World {
    /// The plugin's description (as 0.1's record: 0.2's has the same fields).
    pub fn describe(&self, store: &mut Store<JobState>) -> wasmtime::Result<wit::Description> {
        match self {
            World::V0_1(w) => w.weir_transform_transform().call_describe(store),
            World::V0_2(w) => {
                let d = w.weir_transform0_2_0_transform().call_describe(store)?;
                Ok(wit::Description {
                    name: d.name,
                    version: d.version,
                    kind: match d.kind {
                        v2::Kind::Row => wit::Kind::Row,
                        v2::Kind::Partition => wit::Kind::Partition,
                    },
                    columns: d.columns,
                    grain_key: d.grain_key,
                    partition_column: d.partition_column,
                })
            }
        }
    }

    /// Constructs a session.
    pub fn construct(
        &self,
        store: &mut Store<JobState>,
        table: &str,
        partition: &str,
        input: &InputColumns,
        config: &[(String, String)],
    ) -> wasmtime::Result<ResourceAny> {
        match self {
            World::V0_1(w) => {
                let info = wit::PartitionInfo {
                    table: table.to_owned(),
                    name: partition.to_owned(),
                };
                w.weir_transform_transform()
                    .session()
                    .call_constructor(store, &info, config)
            }
            World::V0_2(w) => {
                let info = v2::PartitionInfo {
                    table: table.to_owned(),
                    name: partition.to_owned(),
                };
                let schema = v2::InputSchema {
                    columns: input
                        .names
                        .iter()
                        .zip(&input.types)
                        .map(|(name, type_name)| v2::InputColumn {
                            name: name.clone(),
                            type_name: type_name.clone(),
                        })
                        .collect(),
                    key: input.key.clone(),
                };
                w.weir_transform0_2_0_transform()
                    .session()
                    .call_constructor(store, &info, &schema, config)
            }
        }
    }

    /// Pushes rows to a session.
    pub fn push(
        &self,
        store: &mut Store<JobState>,
        session: ResourceAny,
        rows: &[InputRow],
        input: &InputColumns,
    ) -> Called {
        match self {
            World::V0_1(w) => {
                let rows: Vec<wit::StagedRow> =
                    rows.iter().map(|r| staged_row_0_1(r, input)).collect();
                let out = w
                    .weir_transform_transform()
                    .session()
                    .call_push(store, session, &rows)?;
                Ok(out.map(part_0_1))
            }
            World::V0_2(w) => {
                let rows: Vec<v2::StagedRow> =
                    rows.iter().map(|r| staged_row_0_2(r, input)).collect();
                let out = w
                    .weir_transform0_2_0_transform()
                    .session()
                    .call_push(store, session, &rows)?;
                Ok(out.map(part_0_2))
            }
        }
    }

    /// The next part of a call's output (only after a part that said `more`).
    pub fn next(&self, store: &mut Store<JobState>, session: ResourceAny) -> Called {
        match self {
            // 0.1 never says `more`.
            World::V0_1(_) => Ok(Ok(Part {
                rows: Vec::new(),
                rejections: Vec::new(),
                more: false,
            })),
            World::V0_2(w) => {
                let out = w
                    .weir_transform0_2_0_transform()
                    .session()
                    .call_next(store, session)?;
                Ok(out.map(part_0_2))
            }
        }
    }

    /// Ends a session.
    pub fn finish(&self, store: &mut Store<JobState>, session: ResourceAny) -> Called {
        match self {
            World::V0_1(w) => {
                let out = w
                    .weir_transform_transform()
                    .session()
                    .call_finish(store, session)?;
                Ok(out.map(part_0_1))
            }
            World::V0_2(w) => {
                let out = w
                    .weir_transform0_2_0_transform()
                    .session()
                    .call_finish(store, session)?;
                Ok(out.map(part_0_2))
            }
        }
    }
}

fn part_0_1(out: wit::PushOutput) -> Part {
    Part {
        rows: out.rows,
        rejections: out
            .rejections
            .into_iter()
            .map(|r| (r.key, r.reason))
            .collect(),
        more: false,
    }
}

fn part_0_2(out: v2::PushOutput) -> Part {
    Part {
        rows: out.rows,
        rejections: out
            .rejections
            .into_iter()
            .map(|r| (r.key, r.reason))
            .collect(),
        more: out.more,
    }
}

/// A row's values by name; an input column the row lacks (one added after the row was
/// staged) is sent as `null`, as the identity transform writes it.
fn staged_row_0_1(r: &InputRow, input: &InputColumns) -> wit::StagedRow {
    let lacking = input
        .names
        .iter()
        .filter(|name| !r.columns.iter().any(|(n, _)| n == *name))
        .map(|name| wty::ColumnValue {
            name: name.clone(),
            value: to_wit(&Value::Null),
        });
    wit::StagedRow {
        key: r.key.iter().map(to_wit).collect(),
        op: match r.op {
            Op::Insert => wit::Op::Insert,
            Op::Update => wit::Op::Update,
            Op::Delete => wit::Op::Delete,
            Op::Read => wit::Op::Read,
        },
        commit_position: r.commit_position,
        commit_time: r.commit_time,
        columns: r
            .columns
            .iter()
            .map(|(name, value)| wty::ColumnValue {
                name: name.clone(),
                value: to_wit(value),
            })
            .chain(lacking)
            .collect(),
    }
}

/// A row's values by position in the input columns: its column at the same index if
/// the names agree (rows are staged in the table's column order), else found by name;
/// a column the row lacks (added after the row was staged) is `null`, as the identity
/// transform writes it (the contract's `none` is not sent: a plugin's `…_or_null`
/// getter reads it as SQL null); one the input columns lack is not sent.
fn staged_row_0_2(r: &InputRow, input: &InputColumns) -> v2::StagedRow {
    let values = input
        .names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let value = match r.columns.get(i) {
                Some((n, v)) if n == name => Some(v),
                _ => r.columns.iter().find(|(n, _)| n == name).map(|(_, v)| v),
            };
            Some(value.map_or_else(|| to_wit(&Value::Null), to_wit))
        })
        .collect();
    v2::StagedRow {
        key: r.key.iter().map(to_wit).collect(),
        values,
        op: match r.op {
            Op::Insert => v2::Op::Insert,
            Op::Update => v2::Op::Update,
            Op::Delete => v2::Op::Delete,
            Op::Read => v2::Op::Read,
        },
        commit_position: r.commit_position,
        commit_time: r.commit_time,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn row(columns: &[(&str, Value)]) -> InputRow {
        InputRow {
            key: vec![Value::Int(7)],
            op: Op::Update,
            commit_position: 9,
            commit_time: Some(11),
            columns: columns
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_row_goes_by_position_with_absent_columns_null_and_unknown_ones_left_out() {
        let input = InputColumns::new(
            vec![
                ("id".into(), "bigint".into()),
                ("note".into(), "text".into()),
                ("day".into(), "date".into()),
            ],
            &["id".into()],
        );
        assert_eq!(input.key, vec![0]);
        // In another order than the schema's, without `note` (staged before it was
        // added: null, as the identity writes it), with a column the schema does not
        // have; `day` is SQL null.
        let r = row(&[
            ("day", Value::Null),
            ("extra", Value::Int(1)),
            ("id", Value::Int(7)),
        ]);
        let staged = staged_row_0_2(&r, &input);
        let values: Vec<Option<Value>> = staged
            .values
            .into_iter()
            .map(|v| v.map(super::super::from_wit))
            .collect();
        assert_eq!(
            values,
            vec![Some(Value::Int(7)), Some(Value::Null), Some(Value::Null)]
        );
        let key: Vec<Value> = staged.key.into_iter().map(super::super::from_wit).collect();
        assert_eq!(key, vec![Value::Int(7)]);
        assert!(matches!(staged.op, v2::Op::Update));
        assert_eq!((staged.commit_position, staged.commit_time), (9, Some(11)));
    }

    #[test]
    fn rows_held_in_memory_give_their_columns_in_order_of_first_appearance() {
        let rows = vec![
            row(&[("id", Value::Int(7)), ("a", Value::Int(1))]),
            row(&[("b", Value::Null), ("id", Value::Int(8))]),
        ];
        let input = InputColumns::of_rows(&rows, |n| {
            if n == "a" {
                "integer".into()
            } else {
                String::new()
            }
        });
        assert_eq!(input.names, ["id", "a", "b"]);
        assert_eq!(input.types, ["", "integer", ""]);
        assert_eq!(input.key, vec![0]);
    }
}
