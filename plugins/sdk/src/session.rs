//! The plugin traits and the `session` resources that adapt them to the contract.

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::{
    Config, Description, Error, GuestSession, Input, Kind, Op, Output, PartitionInfo, PushOutput,
    Reject, Row, StagedRow,
};

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
    columns: Vec<String>,
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

fn column_names(description: &Description) -> Vec<String> {
    description.columns.iter().map(|c| c.name.clone()).collect()
}

impl<P: RowPlugin> GuestSession for RowSession<P> {
    fn new(partition: PartitionInfo, config: Vec<(String, String)>) -> Self {
        RowSession {
            plugin: P::open(&partition, &Config::new(config)),
            columns: column_names(&P::describe()),
        }
    }

    fn push(&self, rows: Vec<StagedRow>) -> Result<PushOutput, Error> {
        let plugin = self.plugin.as_ref().map_err(Clone::clone)?;
        let mut out = PushOutput {
            rows: Vec::with_capacity(rows.len()),
            rejections: Vec::new(),
        };
        for staged in rows {
            if staged.op == Op::Delete {
                continue;
            }
            let input = Input(staged);
            match plugin.transform(&input) {
                Ok(Some(row)) => out.rows.push(row.into_values(&self.columns)?),
                Ok(None) => {}
                Err(Reject(reason)) => out.rejections.push(crate::Rejection {
                    key: input.0.key,
                    reason,
                }),
            }
        }
        Ok(out)
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
    columns: Vec<String>,
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

impl<P: PartitionPlugin> GuestSession for PartitionSession<P> {
    fn new(partition: PartitionInfo, config: Vec<(String, String)>) -> Self {
        let state = match P::open(&partition, &Config::new(config)) {
            Ok(p) => State::Open(p),
            Err(e) => State::Failed(e),
        };
        PartitionSession {
            state: RefCell::new(state),
            columns: column_names(&P::describe()),
            _plugin: PhantomData,
        }
    }

    fn push(&self, rows: Vec<StagedRow>) -> Result<PushOutput, Error> {
        let rows = rows.into_iter().map(Input).collect();
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
