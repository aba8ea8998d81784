//! Reads of one stage snapshot, verifying block checksums, with errors naming the
//! column family.

use rocksdb::{IteratorMode, ReadOptions, Snapshot};

use super::CheckpointError;
use crate::feed::Position;
use crate::stage::Stage;
use crate::stage::layout::{CF_META, CF_POSITION, META_GENERATION, POSITION_KEY, be_u64};

/// Reads of one snapshot, with errors naming the family.
pub(super) struct Reader<'a> {
    pub(super) stage: &'a Stage,
    pub(super) snap: &'a Snapshot<'a>,
}

pub(in crate::stage) fn read_opts() -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_verify_checksums(true);
    opts
}

pub(in crate::stage) fn scan_opts() -> ReadOptions {
    let mut opts = read_opts();
    opts.fill_cache(false);
    opts
}

impl Reader<'_> {
    pub(super) fn read_err(
        &self,
        family: &'static str,
    ) -> impl FnOnce(rocksdb::Error) -> CheckpointError {
        let path = self.stage.path().to_owned();
        move |source| CheckpointError::Read {
            path,
            family,
            source,
        }
    }

    pub(super) fn record(&self, what: impl Into<String>) -> CheckpointError {
        CheckpointError::StageRecord {
            path: self.stage.path().to_owned(),
            what: what.into(),
        }
    }

    pub(super) fn get(
        &self,
        family: &'static str,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.snap
            .get_cf_opt(self.stage.cf(family), key, read_opts())
            .map_err(self.read_err(family))
    }

    pub(super) fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.get(CF_META, key)
    }

    pub(super) fn generation(&self) -> Result<u64, CheckpointError> {
        match self.meta(META_GENERATION)? {
            None => Ok(0),
            Some(b) => be_u64(&b).ok_or_else(|| self.record("generation counter")),
        }
    }

    pub(super) fn checkpoint(&self) -> Result<Option<Position>, CheckpointError> {
        self.get(CF_POSITION, POSITION_KEY)?
            .map(|b| postcard::from_bytes(&b).map_err(|_| self.record("position")))
            .transpose()
    }

    /// Calls `f` with every entry of `family`, in key order.
    pub(super) fn scan(
        &self,
        family: &'static str,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        for item in
            self.snap
                .iterator_cf_opt(self.stage.cf(family), scan_opts(), IteratorMode::Start)
        {
            let (k, v) = item.map_err(self.read_err(family))?;
            f(&k, &v)?;
        }
        Ok(())
    }

    pub(super) fn count(&self, family: &'static str) -> Result<u64, CheckpointError> {
        let mut n = 0;
        self.scan(family, |_, _| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }
}
