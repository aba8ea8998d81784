//! The stage as the PostgreSQL source sees it: a few calls, not the whole stage. The
//! source defines the port and the engine plugs the stage into it, so the source
//! never depends on the stage (nor the stage on the source).

use crate::feed::{StageChange, StagedRow};

/// An error of the stage behind the port, as the stage reported it: its message and
/// its causes are the stage's own.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PortError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl PortError {
    /// Wraps the stage's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        PortError(Box::new(error))
    }
}

/// A part of a first load the stage made ready off its write path
/// ([`StagePort::prepare_load`]): the stage's own value, opaque here.
pub struct PreparedPart(Box<dyn std::any::Any + Send>);

impl PreparedPart {
    /// Wraps the stage's prepared part.
    pub fn new(part: impl std::any::Any + Send) -> Self {
        PreparedPart(Box::new(part))
    }

    /// The stage's prepared part, if it is a `T`.
    pub fn into_inner<T: 'static>(self) -> Option<T> {
        self.0.downcast().ok().map(|part| *part)
    }
}

impl std::fmt::Debug for PreparedPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedPart")
    }
}

/// The calls the PostgreSQL source makes of the stage, and nothing else: it reads the
/// snapshot's staged progress and the staged image of a row, and moves or checks the
/// position against what the slot confirmed. Staging itself goes through the engine
/// (the source hands it [`SourceEvent`](crate::source::SourceEvent)s).
///
/// What the source relies on: [`advance_position`](StagePort::advance_position) is
/// one synced write and never moves the position back; a row returned by
/// [`get_row`](StagePort::get_row) is the one staged last for its key.
pub trait StagePort: Send + Sync {
    /// The source's resume state staged with its last `StageChange::SourceState`
    /// (the snapshot's progress); `None` if none was staged.
    fn source_state(&self) -> Result<Option<Vec<u8>>, PortError>;

    /// The staged row of `key` in `table`, for the unchanged TOAST values the source
    /// leaves out.
    fn get_row(&self, table: &str, key: &[u8]) -> Result<Option<StagedRow>, PortError>;

    /// The tables whose key the source may not keep unique (`REPLICA IDENTITY FULL`):
    /// an INSERT staged for a key the stage holds stops staging (the key is not unique
    /// after all).
    fn set_guarded_keys(&self, tables: Vec<String>);

    /// The publication's mark as last recorded (`None`: never).
    fn publication_mark(&self) -> Result<Option<String>, PortError>;

    /// Records the publication's mark (synced).
    fn set_publication_mark(&self, mark: &str) -> Result<(), PortError>;

    /// Moves the position to `position` (keeping the cursor) in one synced write,
    /// unless it is there already; returns whether it moved.
    fn advance_position(&self, position: u64) -> Result<bool, PortError>;

    /// Stages rows of the first load (and its progress, a `SourceState`) in one synced
    /// write, with the position set to `position` (the exported snapshot's point),
    /// whatever it was: every row of the load is at that one point. `new_keys`: no key
    /// of these upserts is staged yet or repeated among them (the stage is fresh and
    /// the source enforces the key unique), so the stage need not look them up.
    fn stage_load(
        &self,
        changes: &[StageChange],
        position: u64,
        new_keys: bool,
        sync: bool,
    ) -> Result<(), PortError>;

    /// Prepares upserts of the first load whose keys are new to the stage (as
    /// `stage_load`'s `new_keys`) to be staged by [`StagePort::stage_prepared`]: the
    /// costly work, done by the caller's thread while another part is staged. `None`
    /// if the stage would rather take them through `stage_load`.
    fn prepare_load(&self, changes: &[StageChange]) -> Result<Option<PreparedPart>, PortError>;

    /// Stages a prepared part with `changes` (its progress), as `stage_load` does.
    fn stage_prepared(
        &self,
        part: PreparedPart,
        changes: &[StageChange],
        position: u64,
        sync: bool,
    ) -> Result<(), PortError>;

    /// Whether the position is at or past everything this stage let its source
    /// acknowledge.
    fn position_covers_acknowledgements(&self) -> Result<bool, PortError>;
}
