//! The stage behind the PostgreSQL source's narrow view of it
//! ([`StagePort`](crate::source::postgres::StagePort)): each call is the stage's own.

use super::{Stage, StageError, StagedRow};
use crate::source::postgres::StagePort;

impl StagePort for Stage {
    fn source_state(&self) -> Result<Option<Vec<u8>>, StageError> {
        Stage::source_state(self)
    }

    fn get_row(&self, table: &str, key: &[u8]) -> Result<Option<StagedRow>, StageError> {
        Stage::get_row(self, table, key)
    }

    fn advance_position(&self, position: u64) -> Result<bool, StageError> {
        Stage::advance_position(self, position)
    }

    fn position_covers_acknowledgements(&self) -> Result<bool, StageError> {
        Stage::position_covers_acknowledgements(self)
    }
}
