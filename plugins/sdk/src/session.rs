//! The plugin traits and the `session` resources that adapt them to the contract.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::rc::Rc;

use crate::bindings_0_2::exports::weir::transform0_2_0::transform as v2;
use crate::output::Declared;
use crate::{
    Config, Description, Error, GuestSession, Input, Kind, Op, Output, PartitionInfo, PushOutput,
    Reject, Row, Schema, StagedRow,
};

/// Output rows per part of a contract-0.2 result (`more`): a partition plugin's
/// output is handed in parts of at most this many rows.
pub const PART_ROWS: usize = 4096;

/// A row-wise plugin: the output of a row depends only on that row (and the config).
///
/// Exported with [`export_row_plugin!`](crate::export_row_plugin). The SDK calls
/// [`RowPlugin::open`] once per partition job and [`RowPlugin::transform`] once per
/// pushed row, skipping rows whose op is `delete` (a deleted row has no output;
/// the host never pushes one in the `replace` write mode).
pub trait RowPlugin: Sized + 'static {
    /// The plugin's description. Its `kind` is set to [`Kind::Row`] by the SDK.
    fn describe() -> Description;

    /// Starts a partition job: parse the config here, once. An error is returned by
    /// the session's first call (the contract's constructor cannot fail).
    fn open(partition: &PartitionInfo, config: &Config) -> Result<Self, Error>;

    /// Transforms one row: `Some(row)` to output it, `None` to drop it, `Err` to reject
    /// it with a reason.
    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject>;
}

/// A partition-wide plugin (aggregates): sees every row of the partition, then
/// emits in [`PartitionPlugin::finish`].
///
/// Exported with [`export_partition_plugin!`](crate::export_partition_plugin).
pub trait PartitionPlugin: Sized + 'static {
    /// The plugin's description. Its `kind` is set to [`Kind::Partition`] by the SDK.
    fn describe() -> Description;

    /// Starts a partition job (see [`RowPlugin::open`]).
    fn open(partition: &PartitionInfo, config: &Config) -> Result<Self, Error>;

    /// Takes a chunk of the partition's rows; may emit rows and rejections into `out`
    /// now or hold state until `finish`.
    fn push(&mut self, rows: Vec<Input>, out: &mut Output) -> Result<(), Error>;

    /// Ends the job: emit what is held.
    fn finish(&mut self, out: &mut Output) -> Result<(), Error>;
}

/// The `session` resource of a [`RowPlugin`].
#[derive(Debug)]
pub struct RowSession<P: RowPlugin> {
    plugin: Result<P, Error>,
    columns: Declared,
    /// The input schema (contract 0.2; empty on 0.1).
    schema: Rc<Schema>,
}

impl<P: RowPlugin> RowSession<P> {
    /// `P`'s description with `kind` = `row`.
    pub fn description() -> Description {
        Description {
            kind: Kind::Row,
            ..P::describe()
        }
    }
}

fn column_names(description: &Description) -> Declared {
    Declared::new(description.columns.iter().map(|c| c.name.clone()).collect())
}

impl<P: RowPlugin> RowSession<P> {
    /// Transforms rows one by one, skipping deletes.
    fn transform(&self, rows: impl ExactSizeIterator<Item = Input>) -> Result<PushOutput, Error> {
        let plugin = self.plugin.as_ref().map_err(Clone::clone)?;
        let mut out = PushOutput {
            rows: Vec::with_capacity(rows.len()),
            rejections: Vec::new(),
        };
        for input in rows {
            if input.op() == Op::Delete {
                continue;
            }
            match plugin.transform(&input) {
                Ok(Some(row)) => out.rows.push(self.columns.values(row)?),
                Ok(None) => {}
                Err(Reject(reason)) => out.rejections.push(crate::Rejection {
                    key: input.key().to_vec(),
                    reason,
                }),
            }
        }
        Ok(out)
    }
}

impl<P: RowPlugin> v2::GuestSession for RowSession<P> {
    fn new(
        partition: v2::PartitionInfo,
        schema: v2::InputSchema,
        config: Vec<(String, String)>,
    ) -> Self {
        RowSession {
            plugin: P::open(&partition.into(), &Config::new(config)),
            columns: column_names(&P::describe()),
            schema: Rc::new(schema.into()),
        }
    }

    fn push(&self, rows: Vec<v2::StagedRow>) -> Result<v2::PushOutput, Error> {
        let schema = &self.schema;
        let out = self.transform(rows.into_iter().map(|r| input_0_2(schema, r)))?;
        Ok(part(out, false))
    }

    fn next(&self) -> Result<v2::PushOutput, Error> {
        Err(Error::Other("`next` called with no output pending".into()))
    }

    fn finish(&self) -> Result<v2::PushOutput, Error> {
        self.plugin.as_ref().map_err(Clone::clone)?;
        Ok(part(empty(), false))
    }
}

impl<P: RowPlugin> GuestSession for RowSession<P> {
    fn new(partition: PartitionInfo, config: Vec<(String, String)>) -> Self {
        RowSession {
            plugin: P::open(&partition, &Config::new(config)),
            columns: column_names(&P::describe()),
            schema: Rc::default(),
        }
    }

    fn push(&self, rows: Vec<StagedRow>) -> Result<PushOutput, Error> {
        self.transform(rows.into_iter().map(Input::from))
    }

    fn finish(&self) -> Result<PushOutput, Error> {
        self.plugin.as_ref().map_err(Clone::clone)?;
        Ok(PushOutput {
            rows: Vec::new(),
            rejections: Vec::new(),
        })
    }
}

/// The `session` resource of a [`PartitionPlugin`].
#[derive(Debug)]
pub struct PartitionSession<P: PartitionPlugin> {
    state: RefCell<State<P>>,
    columns: Declared,
    /// The input schema (contract 0.2; empty on 0.1).
    schema: Rc<Schema>,
    /// Output not yet handed over (contract 0.2 hands it in parts).
    pending: RefCell<VecDeque<PushOutput>>,
    _plugin: PhantomData<P>,
}

#[derive(Debug)]
enum State<P> {
    Open(P),
    Failed(Error),
    Finished,
}

impl<P: PartitionPlugin> PartitionSession<P> {
    /// `P`'s description with `kind` = `partition`.
    pub fn description() -> Description {
        Description {
            kind: Kind::Partition,
            ..P::describe()
        }
    }

    fn with_plugin(
        &self,
        call: impl FnOnce(&mut P, &mut Output) -> Result<(), Error>,
        finishing: bool,
    ) -> Result<PushOutput, Error> {
        let mut state = self
            .state
            .try_borrow_mut()
            .map_err(|_| Error::Other("session called re-entrantly".into()))?;
        let plugin = match &mut *state {
            State::Open(plugin) => plugin,
            State::Failed(e) => return Err(e.clone()),
            State::Finished => return Err(Error::Other("session called after finish".into())),
        };
        let mut out = Output::default();
        let result = call(plugin, &mut out).and_then(|()| out.into_push_output(&self.columns));
        match &result {
            Err(e) => *state = State::Failed(e.clone()),
            Ok(_) if finishing => *state = State::Finished,
            Ok(_) => {}
        }
        result
    }
}

impl<P: PartitionPlugin> PartitionSession<P> {
    fn open(partition: &PartitionInfo, config: Vec<(String, String)>, schema: Schema) -> Self {
        let state = match P::open(partition, &Config::new(config)) {
            Ok(p) => State::Open(p),
            Err(e) => State::Failed(e),
        };
        PartitionSession {
            state: RefCell::new(state),
            columns: column_names(&P::describe()),
            schema: Rc::new(schema),
            pending: RefCell::default(),
            _plugin: PhantomData,
        }
    }

    /// The first part of a call's output; the rest waits for `next`.
    fn first_part(&self, out: PushOutput) -> v2::PushOutput {
        let mut pending = self.pending.borrow_mut();
        pending.clear();
        let mut out = out;
        while out.rows.len() > PART_ROWS {
            let rest = out.rows.split_off(PART_ROWS);
            pending.push_back(std::mem::replace(
                &mut out,
                PushOutput {
                    rows: rest,
                    rejections: Vec::new(),
                },
            ));
        }
        pending.push_back(out);
        let first = pending.pop_front().unwrap_or_else(empty);
        part(first, !pending.is_empty())
    }
}

impl<P: PartitionPlugin> v2::GuestSession for PartitionSession<P> {
    fn new(
        partition: v2::PartitionInfo,
        schema: v2::InputSchema,
        config: Vec<(String, String)>,
    ) -> Self {
        Self::open(&partition.into(), config, schema.into())
    }

    fn push(&self, rows: Vec<v2::StagedRow>) -> Result<v2::PushOutput, Error> {
        let schema = &self.schema;
        let rows = rows.into_iter().map(|r| input_0_2(schema, r)).collect();
        let out = self.with_plugin(|p, out| p.push(rows, out), false)?;
        Ok(self.first_part(out))
    }

    fn next(&self) -> Result<v2::PushOutput, Error> {
        let mut pending = self.pending.borrow_mut();
        let out = pending
            .pop_front()
            .ok_or_else(|| Error::Other("`next` called with no output pending".into()))?;
        Ok(part(out, !pending.is_empty()))
    }

    fn finish(&self) -> Result<v2::PushOutput, Error> {
        let out = self.with_plugin(|p, out| p.finish(out), true)?;
        Ok(self.first_part(out))
    }
}

impl<P: PartitionPlugin> GuestSession for PartitionSession<P> {
    fn new(partition: PartitionInfo, config: Vec<(String, String)>) -> Self {
        Self::open(&partition, config, Schema::default())
    }

    fn push(&self, rows: Vec<StagedRow>) -> Result<PushOutput, Error> {
        let rows = rows.into_iter().map(Input::from).collect();
        self.with_plugin(|p, out| p.push(rows, out), false)
    }

    fn finish(&self) -> Result<PushOutput, Error> {
        self.with_plugin(|p, out| p.finish(out), true)
    }
}

/// Runs a whole session natively, as the host would: construct, push each chunk,
/// finish, and concatenate the outputs. For tests (and native benchmarks) of a
/// plugin's logic; the first error ends the run.
pub fn run_session<S: GuestSession>(
    partition: PartitionInfo,
    config: Vec<(String, String)>,
    chunks: Vec<Vec<StagedRow>>,
) -> Result<PushOutput, Error> {
    let session = S::new(partition, config);
    let mut all = PushOutput {
        rows: Vec::new(),
        rejections: Vec::new(),
    };
    for chunk in chunks {
        let out = session.push(chunk)?;
        all.rows.extend(out.rows);
        all.rejections.extend(out.rejections);
    }
    let out = session.finish()?;
    all.rows.extend(out.rows);
    all.rejections.extend(out.rejections);
    Ok(all)
}

/// A contract-0.2 staged row as an [`Input`].
fn input_0_2(schema: &Rc<Schema>, row: v2::StagedRow) -> Input {
    Input::positional(
        row.key,
        Rc::clone(schema),
        row.values,
        row.op.into(),
        row.commit_position,
        row.commit_time,
    )
}

/// A 0.1 `push-output` as a 0.2 part.
fn part(out: PushOutput, more: bool) -> v2::PushOutput {
    v2::PushOutput {
        rows: out.rows,
        rejections: out
            .rejections
            .into_iter()
            .map(|r| v2::Rejection {
                key: r.key,
                reason: r.reason,
            })
            .collect(),
        more,
    }
}

/// Runs a whole contract-0.2 session natively, as the host would: construct with the
/// schema, push each chunk and finish, draining every call's parts with `next`, and
/// concatenate the outputs (as a 0.1 `push-output`). The first error ends the run.
pub fn run_session_0_2<S: v2::GuestSession>(
    partition: v2::PartitionInfo,
    schema: v2::InputSchema,
    config: Vec<(String, String)>,
    chunks: Vec<Vec<v2::StagedRow>>,
) -> Result<PushOutput, Error> {
    let session = S::new(partition, schema, config);
    let mut all = empty();
    let mut take = |mut out: v2::PushOutput| -> Result<(), Error> {
        loop {
            all.rows.append(&mut out.rows);
            all.rejections
                .extend(out.rejections.into_iter().map(|r| crate::Rejection {
                    key: r.key,
                    reason: r.reason,
                }));
            if !out.more {
                return Ok(());
            }
            out = session.next()?;
        }
    };
    for chunk in chunks {
        take(session.push(chunk)?)?;
    }
    take(session.finish()?)?;
    Ok(all)
}

fn empty() -> PushOutput {
    PushOutput {
        rows: Vec::new(),
        rejections: Vec::new(),
    }
}

impl From<Description> for v2::Description {
    fn from(d: Description) -> v2::Description {
        v2::Description {
            name: d.name,
            version: d.version,
            kind: match d.kind {
                Kind::Row => v2::Kind::Row,
                Kind::Partition => v2::Kind::Partition,
            },
            columns: d.columns,
            grain_key: d.grain_key,
            partition_column: d.partition_column,
        }
    }
}

impl From<v2::PartitionInfo> for PartitionInfo {
    fn from(p: v2::PartitionInfo) -> PartitionInfo {
        PartitionInfo {
            table: p.table,
            name: p.name,
        }
    }
}

impl From<v2::InputSchema> for Schema {
    fn from(s: v2::InputSchema) -> Schema {
        Schema::new(
            s.columns.into_iter().map(|c| c.name).collect(),
            s.key.into_iter().map(|k| k as usize).collect(),
        )
    }
}

impl From<v2::Op> for Op {
    fn from(op: v2::Op) -> Op {
        match op {
            v2::Op::Insert => Op::Insert,
            v2::Op::Update => Op::Update,
            v2::Op::Delete => Op::Delete,
            v2::Op::Read => Op::Read,
        }
    }
}
