//! The stage behind the PostgreSQL source's narrow view of it
//! ([`StagePort`](crate::source::postgres::StagePort)): each call is the stage's own.

use super::error::corrupt;
use super::{PreparedLoad, Stage, StageChange, StagedRow};
use crate::source::postgres::{PortError, PreparedPart, StagePort};

impl StagePort for Stage {
    fn source_state(&self) -> Result<Option<Vec<u8>>, PortError> {
        Stage::source_state(self).map_err(PortError::new)
    }

    fn get_row(&self, table: &str, key: &[u8]) -> Result<Option<StagedRow>, PortError> {
        Stage::get_row(self, table, key).map_err(PortError::new)
    }

    fn set_guarded_keys(&self, tables: Vec<String>) {
        Stage::set_guarded_keys(self, tables);
    }

    fn publication_mark(&self) -> Result<Option<String>, PortError> {
        Stage::publication_mark(self).map_err(PortError::new)
    }

    fn set_publication_mark(&self, mark: &str) -> Result<(), PortError> {
        Stage::set_publication_mark(self, mark).map_err(PortError::new)
    }

    fn advance_position(&self, position: u64) -> Result<bool, PortError> {
        Stage::advance_position(self, position).map_err(PortError::new)
    }

    fn stage_load(
        &self,
        changes: &[StageChange],
        position: u64,
        new_keys: bool,
        sync: bool,
    ) -> Result<(), PortError> {
        Stage::apply_load(self, changes, position, new_keys, sync).map_err(PortError::new)
    }

    fn prepare_load(&self, changes: &[StageChange]) -> Result<Option<PreparedPart>, PortError> {
        Stage::prepare_load(self, changes)
            .map(|part| part.map(PreparedPart::new))
            .map_err(PortError::new)
    }

    fn stage_prepared(
        &self,
        part: PreparedPart,
        changes: &[StageChange],
        position: u64,
        sync: bool,
    ) -> Result<(), PortError> {
        let part = part
            .into_inner::<PreparedLoad>()
            .ok_or_else(|| PortError::new(corrupt("a prepared part made by another build")))?;
        Stage::apply_prepared_load(self, part, changes, position, sync).map_err(PortError::new)
    }

    fn position_covers_acknowledgements(&self) -> Result<bool, PortError> {
        Stage::position_covers_acknowledgements(self).map_err(PortError::new)
    }
}
