//! `weir checkpoint export`: a stage's state, from one snapshot, to a checkpoint file.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use super::CheckpointError;
use super::format::{Counts, FrameWriteError, Record, RecordWriter};
use super::reader::Reader;
use crate::feed::{BadRecord, Position};
use crate::stage::layout::{
    CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_META, CF_ROWS, META_APPLYING,
    META_CONTRACT_PREFIX, META_FORMAT_VERSION, META_SOURCE_ID, META_SOURCE_STATE, be_u32, be_u64,
    split_partition_key, split_row_key,
};
use crate::stage::{Stage, StagedRow};

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub file: PathBuf,
    pub checkpoint: Option<Position>,
    pub counts: Counts,
    pub bytes: u64,
    pub sha256: String,
}

/// `FILE.tmp`, beside `FILE`.
fn tmp_path(file: &Path) -> Result<PathBuf, CheckpointError> {
    let name = file.file_name().ok_or_else(|| CheckpointError::BadPath {
        path: file.to_owned(),
    })?;
    let mut tmp = OsString::from(name);
    tmp.push(".tmp");
    Ok(file.with_file_name(tmp))
}

/// Writes the stage's position and staged state, from one snapshot, to `file`
/// (atomically: through `FILE.tmp`, synced, renamed). Memory stays bounded: rows are
/// streamed.
pub fn export(stage: &Stage, file: &Path) -> Result<ExportReport, CheckpointError> {
    let started = Instant::now();
    let tmp = tmp_path(file)?;
    let result = export_to(stage, file, &tmp);
    if result.is_err() {
        // Best effort: the error that matters is the export's.
        let _ = std::fs::remove_file(&tmp);
    }
    let report = result?;
    tracing::info!(
        rows = report.counts.rows,
        dirty = report.counts.dirty,
        bytes = report.bytes,
        position = report.checkpoint.map(|c| c.position),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "checkpoint exported"
    );
    Ok(report)
}

fn export_to(stage: &Stage, file: &Path, tmp: &Path) -> Result<ExportReport, CheckpointError> {
    let snap = stage.db.snapshot();
    let r = Reader { stage, snap: &snap };
    if r.meta(META_APPLYING)?.is_some() {
        return Err(CheckpointError::Applying {
            path: stage.path().to_owned(),
        });
    }
    let stage_format_version = r
        .meta(META_FORMAT_VERSION)?
        .as_deref()
        .and_then(be_u32)
        .ok_or_else(|| r.record("format version"))?;
    let source_id = r
        .meta(META_SOURCE_ID)?
        .ok_or_else(|| r.record("no source id"))
        .and_then(|b| String::from_utf8(b).map_err(|_| r.record("source id")))?;
    let checkpoint = r.checkpoint()?;
    let generation = r.generation()?;

    let write_err = |source| CheckpointError::WriteFile {
        path: tmp.to_owned(),
        source,
    };
    // Private (`0600`): an export holds every staged row.
    let out = crate::private::create_file(tmp).map_err(write_err)?;
    let mut w = RecordWriter::new(BufWriter::with_capacity(1 << 20, out)).map_err(write_err)?;
    let put = |w: &mut RecordWriter<BufWriter<File>>, record: &Record| {
        w.record(record).map_err(|e| match e {
            FrameWriteError::Io(source) => CheckpointError::WriteFile {
                path: tmp.to_owned(),
                source,
            },
            FrameWriteError::Encode(source) => CheckpointError::Encode {
                what: "record",
                source,
            },
            FrameWriteError::TooLarge => r.record("a record larger than 64 MiB"),
        })
    };
    put(
        &mut w,
        &Record::Header {
            stage_format_version,
            source_id,
            checkpoint,
            generation,
        },
    )?;
    if let Some(state) = r.meta(META_SOURCE_STATE)? {
        put(&mut w, &Record::SourceState(state))?;
    }
    let mut contracts = Vec::new();
    r.scan(CF_META, |k, v| {
        if k.starts_with(META_CONTRACT_PREFIX) {
            contracts.push(v.to_vec());
        }
        Ok(())
    })?;
    for contract in contracts {
        put(&mut w, &Record::Contract(contract))?;
    }
    let mut counts = Counts::default();
    r.scan(CF_ROWS, |k, v| {
        let (table, partition, key) = split_row_key(k).ok_or_else(|| r.record("row key"))?;
        let row: StagedRow = postcard::from_bytes(v)
            .map_err(|_| r.record(format!("row in {table} partition {partition}")))?;
        counts.rows += 1;
        put(
            &mut w,
            &Record::Row {
                table,
                partition,
                key: key.to_vec(),
                row,
            },
        )
    })?;
    r.scan(CF_GENERATIONS, |k, v| {
        let (table, partition) =
            split_partition_key(k).ok_or_else(|| r.record("generations key"))?;
        let generation = be_u64(v).ok_or_else(|| r.record("generation"))?;
        counts.generations += 1;
        put(
            &mut w,
            &Record::Generation {
                table,
                partition,
                generation,
            },
        )
    })?;
    r.scan(CF_DIRTY, |k, v| {
        let (table, partition) = split_partition_key(k).ok_or_else(|| r.record("dirty key"))?;
        let generation = be_u64(v).ok_or_else(|| r.record("dirty generation"))?;
        counts.dirty += 1;
        put(
            &mut w,
            &Record::Dirty {
                table,
                partition,
                generation,
            },
        )
    })?;
    r.scan(CF_DEAD_LETTER, |_, v| {
        let record: BadRecord =
            postcard::from_bytes(v).map_err(|_| r.record("dead-letter record"))?;
        counts.dead_letters += 1;
        put(&mut w, &Record::DeadLetter(record))
    })?;
    put(
        &mut w,
        &Record::End {
            rows: counts.rows,
            dirty: counts.dirty,
            generations: counts.generations,
            dead_letters: counts.dead_letters,
        },
    )?;
    let (out, digest, bytes) = w.finish().map_err(write_err)?;
    let out = out.into_inner().map_err(|e| write_err(e.into_error()))?;
    out.sync_all().map_err(write_err)?;
    drop(out);
    std::fs::rename(tmp, file).map_err(|source| CheckpointError::WriteFile {
        path: file.to_owned(),
        source,
    })?;
    sync_parent(file).map_err(|source| CheckpointError::WriteFile {
        path: file.to_owned(),
        source,
    })?;
    Ok(ExportReport {
        file: file.to_owned(),
        checkpoint,
        counts,
        bytes,
        sha256: hex::encode(digest),
    })
}

/// Makes a rename in the folder of `path` durable.
pub(super) fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}
