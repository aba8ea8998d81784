//! `weir checkpoint show`: a summary of a stage, from one snapshot.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::Serialize;

use super::CheckpointError;
use super::reader::Reader;
use crate::feed::Position;
use crate::stage::layout::{
    CF_DEAD_LETTER, CF_DIRTY, CF_PENDING, CF_ROWS, META_APPLYING, META_FORMAT_VERSION,
    META_SOURCE_ID, be_u32, be_u64, split_partition_key, split_table,
};
use crate::stage::{Stage, TableContract};

/// What `weir checkpoint show` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageSummary {
    pub path: String,
    pub format_version: u32,
    pub source_id: Option<String>,
    /// `None`: nothing staged yet.
    pub checkpoint: Option<Position>,
    /// The generation counter.
    pub generation: u64,
    /// Staged rows per table (tables without rows are absent).
    pub rows: BTreeMap<String, u64>,
    pub dirty: Vec<DirtySummary>,
    /// Chunks of a large transaction in the pending area.
    pub pending_chunks: u64,
    /// Whether a large transaction is being applied (its marker is present).
    pub applying: bool,
    /// Bad records waiting to be written to `weir.dead_letter`.
    pub dead_letters: u64,
    /// Sum of the sizes of the files under the stage folder.
    pub size_bytes: u64,
    /// Each table's contract (what its staged rows mean), by stage name.
    pub contracts: Vec<TableContract>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DirtySummary {
    pub table: String,
    pub partition: String,
    pub generation: u64,
}

/// Reads the summary of a stage from one snapshot.
pub fn summary(stage: &Stage) -> Result<StageSummary, CheckpointError> {
    let snap = stage.db.snapshot();
    let r = Reader { stage, snap: &snap };
    let format_version = r
        .meta(META_FORMAT_VERSION)?
        .as_deref()
        .and_then(be_u32)
        .ok_or_else(|| r.record("format version"))?;
    let source_id = r
        .meta(META_SOURCE_ID)?
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let generation = r.generation()?;
    let checkpoint = r.checkpoint()?;
    let mut rows: BTreeMap<String, u64> = BTreeMap::new();
    r.scan(CF_ROWS, |k, _| {
        let (table, _) = split_table(k).ok_or_else(|| r.record("row key"))?;
        *rows.entry(table).or_insert(0) += 1;
        Ok(())
    })?;
    let mut dirty = Vec::new();
    r.scan(CF_DIRTY, |k, v| {
        let (table, partition) = split_partition_key(k).ok_or_else(|| r.record("dirty key"))?;
        let generation = be_u64(v).ok_or_else(|| r.record("dirty generation"))?;
        dirty.push(DirtySummary {
            table,
            partition: partition.to_string(),
            generation,
        });
        Ok(())
    })?;
    let pending_chunks = r.count(CF_PENDING)?;
    let applying = r.meta(META_APPLYING)?.is_some();
    let dead_letters = r.count(CF_DEAD_LETTER)?;
    let size_bytes = dir_size(stage.path()).map_err(|source| CheckpointError::Size {
        path: stage.path().to_owned(),
        source,
    })?;
    Ok(StageSummary {
        path: stage.path().display().to_string(),
        format_version,
        source_id,
        checkpoint,
        generation,
        rows,
        dirty,
        pending_chunks,
        applying,
        dead_letters,
        size_bytes,
        contracts: stage.contracts()?,
    })
}

/// The disk space the files under `path` take (files that vanish meanwhile, as
/// RocksDB deletes obsolete files, are not counted): their blocks, not their lengths,
/// since RocksDB preallocates its write-ahead log (a 18 MB log took 70 MB).
pub fn dir_size(path: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.is_dir() {
            total += dir_size(&entry.path())?;
        } else {
            #[cfg(unix)]
            {
                use std::os::unix::fs::MetadataExt as _;
                total += meta.blocks() * 512;
            }
            #[cfg(not(unix))]
            {
                total += meta.len();
            }
        }
    }
    Ok(total)
}
