//! `weir checkpoint import`: a verified checkpoint file into a new stage, built beside
//! the stage path and renamed into place when complete and checked.
//!
//! An import verifies the whole file first (magic, version, framing, the counts in
//! `End`, the checksum) and changes nothing on disk if any of it fails. When a
//! structural check fails, the whole-file checksum is computed too: a file damaged
//! after export is reported as damaged, whatever byte was hit. The import then builds
//! the stage in a sibling folder `<stage>.importing` (rows, rebuilt `keys` index,
//! generations, dirty marks, dead letters, generation counter, and last the position,
//! in bounded batches, the last one synced), flushes it, checks it with [`check`], and
//! only then renames it to the stage path. A killed import leaves the stage path as it
//! was.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rocksdb::{WriteBatch, WriteOptions};
use serde::Serialize;

use super::export::sync_parent;
use super::format::{Counts, FileSummary, Record, RecordReader, WalkFailure, verify_file, walk};
use super::reader::Reader;
use super::{CheckpointError, check};
use crate::feed::Position;
use crate::stage::layout::{
    CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META, CF_PENDING, CF_POSITION, CF_ROWS,
    META_CONTRACT_PREFIX, META_GENERATION, META_POSITION_COVERS_ACKS, META_SOURCE_STATE,
    POSITION_KEY, partition_key, row_key, table_key,
};
use crate::stage::{FORMAT_VERSION, Stage};

/// Bytes of writes an import gathers before it writes them to the stage.
const IMPORT_BATCH_BYTES: usize = 8 << 20;

/// What an import did.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub stage: PathBuf,
    pub checkpoint: Option<Position>,
    pub counts: Counts,
}

/// `<stage>.<suffix>`, beside the stage folder.
fn sibling(stage_path: &Path, suffix: &str) -> Result<PathBuf, CheckpointError> {
    let name = stage_path
        .file_name()
        .ok_or_else(|| CheckpointError::BadPath {
            path: stage_path.to_owned(),
        })?;
    let mut s = OsString::from(name);
    s.push(suffix);
    Ok(stage_path.with_file_name(s))
}

/// Fills the stage at `stage_path` (which must not exist, or hold an empty stage) for
/// the feed `source_id` from a checkpoint file. The file is verified whole first; the
/// stage is built beside the stage path and renamed into place when complete.
pub fn import(
    file: &Path,
    stage_path: &Path,
    source_id: &str,
) -> Result<ImportReport, CheckpointError> {
    let started = Instant::now();
    // 1. The whole file, before anything on disk changes.
    let verified = verify_file(file)?;
    // Version 1 differs from 2 by nothing but the records 2 may hold.
    if !(1..=FORMAT_VERSION).contains(&verified.stage_format_version) {
        return Err(CheckpointError::StageFormat {
            path: file.to_owned(),
            found: verified.stage_format_version,
        });
    }
    if !crate::config::same_feed(&verified.source_id, source_id) {
        return Err(CheckpointError::SourceMismatch {
            path: file.to_owned(),
            in_file: verified.source_id,
            configured: source_id.to_owned(),
        });
    }
    // 2. The destination: absent, an empty folder, or an empty stage (held open, so
    //    no `weir run` starts on it meanwhile).
    let existing = open_empty_destination(stage_path, source_id)?;
    let tmp = sibling(stage_path, ".importing")?;
    if tmp.exists() {
        return Err(CheckpointError::ImportInProgress {
            path: stage_path.to_owned(),
            tmp,
        });
    }
    if let Some(parent) = stage_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::private::create_dir(parent).map_err(|source| CheckpointError::Install {
            path: stage_path.to_owned(),
            source,
        })?;
    }
    // 3. Build the stage beside it; 4. put it in place.
    let built = build(file, &tmp, source_id, &verified);
    if let Err(e) = built {
        // We created the folder: remove it, so a retry is not refused.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    install(&tmp, stage_path, existing)?;
    tracing::info!(
        rows = verified.counts.rows,
        dirty = verified.counts.dirty,
        position = verified.checkpoint.map(|c| c.position),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "checkpoint imported"
    );
    Ok(ImportReport {
        stage: stage_path.to_owned(),
        checkpoint: verified.checkpoint,
        counts: verified.counts,
    })
}

/// The destination's state: `None` if there is nothing there, else the open (locked)
/// empty stage to replace.
fn open_empty_destination(
    stage_path: &Path,
    source_id: &str,
) -> Result<Option<Stage>, CheckpointError> {
    let not_empty = |what: String| CheckpointError::NotEmpty {
        path: stage_path.to_owned(),
        what,
    };
    let meta = match std::fs::metadata(stage_path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CheckpointError::Install {
                path: stage_path.to_owned(),
                source,
            });
        }
    };
    if !meta.is_dir() {
        return Err(not_empty("it is a file, not a folder".into()));
    }
    if !stage_path.join("CURRENT").exists() {
        let mut entries =
            std::fs::read_dir(stage_path).map_err(|source| CheckpointError::Install {
                path: stage_path.to_owned(),
                source,
            })?;
        return match entries.next() {
            None => Ok(None),
            Some(_) => Err(not_empty("it holds files that are not a weir stage".into())),
        };
    }
    let stage = Stage::open(stage_path, source_id)?;
    {
        let snap = stage.db.snapshot();
        let r = Reader {
            stage: &stage,
            snap: &snap,
        };
        if let Some(c) = r.checkpoint()? {
            return Err(not_empty(format!("it holds position {}", c.position)));
        }
        for (family, what) in [
            (CF_ROWS, "rows"),
            (CF_KEYS, "keys"),
            (CF_GENERATIONS, "partition generations"),
            (CF_DIRTY, "dirty partitions"),
            (CF_DEAD_LETTER, "dead letters"),
            (CF_PENDING, "pending chunks"),
        ] {
            let n = r.count(family)?;
            if n > 0 {
                return Err(not_empty(format!("it holds {n} {what}")));
            }
        }
    }
    Ok(Some(stage))
}

/// Second pass: writes the verified file into a new stage at `tmp`, flushes and checks it.
fn build(
    file: &Path,
    tmp: &Path,
    source_id: &str,
    verified: &FileSummary,
) -> Result<(), CheckpointError> {
    let stage = Stage::open(tmp, source_id)?;
    let input = File::open(file).map_err(|source| CheckpointError::ReadFile {
        path: file.to_owned(),
        source,
    })?;
    let reader = RecordReader::open(BufReader::with_capacity(1 << 20, input), file)?;
    let mut writer = ImportWriter {
        stage: &stage,
        batch: WriteBatch::default(),
    };
    let walked = walk(reader, |record| {
        writer.record(record).map_err(WalkFailure::Io)
    });
    let summary = match walked {
        Ok(summary) => summary,
        Err(WalkFailure::Io(e)) => return Err(e),
        Err(WalkFailure::Structural(_)) => {
            return Err(CheckpointError::FileChanged {
                path: file.to_owned(),
            });
        }
    };
    if summary != *verified {
        return Err(CheckpointError::FileChanged {
            path: file.to_owned(),
        });
    }
    // Last: the generation counter and the position, synced. The imported stage has
    // let its source acknowledge nothing past the file's position: if the source has
    // acknowledged more (an older export restored), `weir run` refuses to start.
    let mut batch = std::mem::take(&mut writer.batch);
    batch.put_cf(stage.cf(CF_META), META_POSITION_COVERS_ACKS, []);
    batch.put_cf(
        stage.cf(CF_META),
        META_GENERATION,
        verified.generation.to_be_bytes(),
    );
    if let Some(checkpoint) = verified.checkpoint {
        let encoded =
            postcard::to_allocvec(&checkpoint).map_err(|source| CheckpointError::Encode {
                what: "position",
                source,
            })?;
        batch.put_cf(stage.cf(CF_POSITION), POSITION_KEY, encoded);
    }
    writer.write(batch, true)?;
    stage.flush()?;
    let report = check(&stage)?;
    if let Some(first) = report.problems.first() {
        return Err(CheckpointError::ImportedInconsistent {
            file: file.to_owned(),
            count: report.problems.len(),
            first: first.to_string(),
        });
    }
    Ok(())
}

struct ImportWriter<'a> {
    stage: &'a Stage,
    batch: WriteBatch,
}

impl ImportWriter<'_> {
    fn record(&mut self, record: Record) -> Result<(), CheckpointError> {
        let stage = self.stage;
        let cf = |name: &'static str| stage.cf(name);
        match record {
            // Written by `Stage::open` (source id, format version) and at the end.
            Record::Header { .. } | Record::End { .. } => {}
            Record::Row {
                table,
                partition,
                key,
                row,
            } => {
                let value =
                    postcard::to_allocvec(&row).map_err(|source| CheckpointError::Encode {
                        what: "row",
                        source,
                    })?;
                self.batch
                    .put_cf(cf(CF_ROWS), row_key(&table, &partition, &key), value);
                self.batch
                    .put_cf(cf(CF_KEYS), table_key(&table, &key), partition.to_bytes());
            }
            Record::Generation {
                table,
                partition,
                generation,
            } => self.batch.put_cf(
                cf(CF_GENERATIONS),
                partition_key(&table, &partition),
                generation.to_be_bytes(),
            ),
            Record::Dirty {
                table,
                partition,
                generation,
            } => self.batch.put_cf(
                cf(CF_DIRTY),
                partition_key(&table, &partition),
                generation.to_be_bytes(),
            ),
            Record::SourceState(state) => {
                self.batch.put_cf(cf(CF_META), META_SOURCE_STATE, state);
            }
            Record::Contract(bytes) => {
                // Checked to decode when the file was verified.
                let contract: crate::stage::TableContract = serde_json::from_slice(&bytes)
                    .map_err(|e| CheckpointError::StageRecord {
                        path: stage.path().to_owned(),
                        what: format!("table contract: {e}"),
                    })?;
                let mut key = META_CONTRACT_PREFIX.to_vec();
                key.extend_from_slice(contract.source.as_bytes());
                self.batch.put_cf(cf(CF_META), key, bytes);
            }
            Record::DeadLetter(bad) => {
                let value =
                    postcard::to_allocvec(&bad).map_err(|source| CheckpointError::Encode {
                        what: "dead letter",
                        source,
                    })?;
                self.batch
                    .put_cf(cf(CF_DEAD_LETTER), bad.position.to_be_bytes(), value);
            }
        }
        if self.batch.size_in_bytes() >= IMPORT_BATCH_BYTES {
            let batch = std::mem::take(&mut self.batch);
            self.write(batch, false)?;
        }
        Ok(())
    }

    fn write(&self, batch: WriteBatch, sync: bool) -> Result<(), CheckpointError> {
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.stage
            .db
            .write_opt(batch, &opts)
            .map_err(|source| CheckpointError::WriteStage {
                path: self.stage.path().to_owned(),
                what: "import",
                source,
            })
    }
}

/// Renames the built stage to the stage path (replacing the empty stage, if any).
fn install(tmp: &Path, stage_path: &Path, existing: Option<Stage>) -> Result<(), CheckpointError> {
    let install_err = |source| CheckpointError::Install {
        path: stage_path.to_owned(),
        source,
    };
    match existing {
        None => std::fs::rename(tmp, stage_path).map_err(install_err)?,
        Some(stage) => {
            drop(stage);
            // The empty stage goes aside first, so the stage path always holds either
            // it or the complete import (or, for an instant, nothing).
            let aside = sibling(stage_path, ".replaced")?;
            if aside.exists() {
                std::fs::remove_dir_all(&aside).map_err(install_err)?;
            }
            std::fs::rename(stage_path, &aside).map_err(install_err)?;
            std::fs::rename(tmp, stage_path).map_err(install_err)?;
            std::fs::remove_dir_all(&aside).map_err(install_err)?;
        }
    }
    sync_parent(stage_path).map_err(install_err)
}
