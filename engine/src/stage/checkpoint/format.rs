//! The checkpoint file: its records, their framing, and the verification of a whole
//! file.
//!
//! # The checkpoint file (file format version 1)
//!
//! ```text
//! "WEIRCKPT"                      8 bytes, magic
//! file format version             u32, big-endian (3; versions 1 and 2 are read too)
//! record*                         u32 big-endian length (at most 64 MiB), then that
//!                                 many bytes: one postcard-encoded `Record`
//! SHA-256                         32 bytes, of every byte before it
//! ```
//!
//! Records come in this order: one [`Record::Header`] (stage format version, source id,
//! position, generation counter), the [`Record::SourceState`] staged with that position
//! when the source keeps one (a JSON-lines feed's fingerprint, a first load's progress;
//! version 2 on), every [`Record::Contract`] (version 3 on), every [`Record::Row`] in stage key order (table,
//! partition, raw key bytes, row image), every [`Record::Generation`], every
//! [`Record::Dirty`], every [`Record::DeadLetter`], and one [`Record::End`] with the
//! count of each kind. The checksum follows `End` and ends the file.
//!
//! Everything comes from one RocksDB snapshot, so the rows, the dirty marks and the
//! position in a file always agree. The `keys` index is not exported (an import rebuilds
//! it from the rows), nor is the pending area (chunks of a transaction that has not
//! committed are not staged state), nor the `changed` keys: an imported dirty
//! partition is replaced whole on its next write, even under `merge`. An export is
//! refused while a large transaction is being applied. The file is written to `FILE.tmp`, synced, and renamed to `FILE`, so
//! a killed export never leaves a truncated `FILE`.
//!
//! Postcard encodes an enum variant by its index: the variants of [`Record`] are
//! never reordered or changed; a new variant or field means a new file format version.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::CheckpointError;
use crate::feed::{BadRecord, Position};
use crate::partition::Partition;
use crate::stage::StagedRow;

/// The first bytes of a checkpoint file.
pub const FILE_MAGIC: &[u8; 8] = b"WEIRCKPT";
/// The checkpoint file format this build writes (and every earlier one it reads: 1,
/// which has no [`Record::SourceState`]).
pub const FILE_VERSION: u32 = 3;
/// The largest record a reader accepts; a longer length prefix is damage.
pub const MAX_RECORD_BYTES: u32 = 64 << 20;
pub(super) const DIGEST_BYTES: usize = 32;
/// Magic and version.
pub(super) const PREAMBLE_BYTES: u64 = 12;

/// One record of a checkpoint file. Never reorder or change the variants: postcard
/// encodes the variant index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Header {
        stage_format_version: u32,
        source_id: String,
        /// `None`: nothing was staged yet.
        checkpoint: Option<Position>,
        /// The stage's generation counter.
        generation: u64,
    },
    Row {
        table: String,
        partition: Partition,
        /// The encoded key ([`crate::stage::encode_key`]).
        key: Vec<u8>,
        row: StagedRow,
    },
    Generation {
        table: String,
        partition: Partition,
        generation: u64,
    },
    Dirty {
        table: String,
        partition: Partition,
        generation: u64,
    },
    DeadLetter(BadRecord),
    End {
        rows: u64,
        dirty: u64,
        generations: u64,
        dead_letters: u64,
    },
    /// The source's state staged with the header's position (version 2 on): what
    /// `Stage::source_state` gives, so a restored stage checks its feed as the
    /// original did (a rotated JSON-lines file is refused, not resumed at its offset).
    SourceState(Vec<u8>),
    /// One table's contract as the stage records it (JSON, [`crate::stage::TableContract`];
    /// version 3 on): an imported stage keeps what its rows were staged under, so a
    /// config with another key, partition column, grain or target is refused by
    /// `run` and `init` as for the original stage.
    Contract(Vec<u8>),
}

// ---- record framing -----------------------------------------------------------------

/// Writes the framing: magic and version, length-prefixed records, the checksum.
pub(super) struct RecordWriter<W: Write> {
    out: W,
    hasher: Sha256,
    bytes: u64,
    body: Vec<u8>,
}

impl<W: Write> RecordWriter<W> {
    pub(super) fn new(out: W) -> io::Result<RecordWriter<W>> {
        let mut writer = RecordWriter {
            out,
            hasher: Sha256::new(),
            bytes: 0,
            body: Vec::new(),
        };
        writer.raw(FILE_MAGIC)?;
        writer.raw(&FILE_VERSION.to_be_bytes())?;
        Ok(writer)
    }

    pub(super) fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// Appends one record; the error says whether encoding or writing failed.
    pub(super) fn record(&mut self, record: &Record) -> Result<(), FrameWriteError> {
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        let body = postcard::to_extend(record, body).map_err(FrameWriteError::Encode)?;
        let len = u32::try_from(body.len())
            .ok()
            .filter(|len| *len <= MAX_RECORD_BYTES)
            .ok_or(FrameWriteError::TooLarge)?;
        self.raw(&len.to_be_bytes()).map_err(FrameWriteError::Io)?;
        self.raw(&body).map_err(FrameWriteError::Io)?;
        self.body = body;
        Ok(())
    }

    /// Appends the checksum; returns the output, the checksum and the file length.
    pub(super) fn finish(mut self) -> io::Result<(W, [u8; DIGEST_BYTES], u64)> {
        let digest: [u8; DIGEST_BYTES] = self.hasher.finalize_reset().into();
        self.out.write_all(&digest)?;
        Ok((self.out, digest, self.bytes + DIGEST_BYTES as u64))
    }
}

#[derive(Debug)]
pub(super) enum FrameWriteError {
    Encode(postcard::Error),
    TooLarge,
    Io(io::Error),
}

/// Reads the framing, hashing every byte it reads. Never panics on any input.
pub(super) struct RecordReader<R: Read> {
    input: R,
    hasher: Sha256,
    offset: u64,
    path: PathBuf,
    body: Vec<u8>,
}

/// A structural failure of the record stream (to be told apart from damage by the
/// whole-file checksum).
#[derive(Debug)]
pub(super) struct Structural {
    offset: u64,
    what: String,
}

pub(super) enum ReadFailure {
    /// The input could not be read.
    Io(CheckpointError),
    Structural(Structural),
}

impl From<Structural> for ReadFailure {
    fn from(s: Structural) -> ReadFailure {
        ReadFailure::Structural(s)
    }
}

impl<R: Read> RecordReader<R> {
    /// Reads and checks the magic and the version.
    pub(super) fn open(input: R, path: &Path) -> Result<RecordReader<R>, CheckpointError> {
        let mut reader = RecordReader {
            input,
            hasher: Sha256::new(),
            offset: 0,
            path: path.to_owned(),
            body: Vec::new(),
        };
        let mut magic = [0u8; 8];
        match reader.exact(&mut magic) {
            Ok(()) if &magic == FILE_MAGIC => {}
            Ok(()) | Err(ReadFailure::Structural(_)) => {
                return Err(CheckpointError::NotCheckpoint {
                    path: path.to_owned(),
                });
            }
            Err(ReadFailure::Io(e)) => return Err(e),
        }
        let mut version = [0u8; 4];
        match reader.exact(&mut version) {
            Ok(()) => {}
            Err(ReadFailure::Structural(_)) => {
                return Err(CheckpointError::Checksum {
                    path: path.to_owned(),
                    detail: "the file ends inside its version number".into(),
                });
            }
            Err(ReadFailure::Io(e)) => return Err(e),
        }
        match u32::from_be_bytes(version) {
            1 | 2 | FILE_VERSION => Ok(reader),
            found if found > FILE_VERSION => Err(CheckpointError::NewerFileVersion {
                path: path.to_owned(),
                found,
            }),
            found => Err(CheckpointError::UnknownFileVersion {
                path: path.to_owned(),
                found,
            }),
        }
    }

    /// Fills `buf`, hashing it; the end of the input is a structural failure.
    pub(super) fn exact(&mut self, buf: &mut [u8]) -> Result<(), ReadFailure> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.hasher.update(&*buf);
                self.offset += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Structural {
                offset: self.offset,
                what: "the file ends inside a record".into(),
            }
            .into()),
            Err(source) => Err(ReadFailure::Io(CheckpointError::ReadFile {
                path: self.path.clone(),
                source,
            })),
        }
    }

    pub(super) fn next(&mut self) -> Result<Record, ReadFailure> {
        let at = self.offset;
        let mut len = [0u8; 4];
        self.exact(&mut len)?;
        let len = u32::from_be_bytes(len);
        if len > MAX_RECORD_BYTES {
            return Err(Structural {
                offset: at,
                what: format!(
                    "a record length of {len} bytes, above the limit of {MAX_RECORD_BYTES}"
                ),
            }
            .into());
        }
        // Read through `take` so a length prefix larger than the file allocates only
        // what the file holds.
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        let got = (&mut self.input)
            .take(u64::from(len))
            .read_to_end(&mut body)
            .map_err(|source| {
                ReadFailure::Io(CheckpointError::ReadFile {
                    path: self.path.clone(),
                    source,
                })
            })?;
        self.hasher.update(&body);
        self.offset += got as u64;
        if got as u64 != u64::from(len) {
            return Err(Structural {
                offset: at,
                what: "the file ends inside a record".into(),
            }
            .into());
        }
        let decoded = postcard::take_from_bytes::<Record>(&body);
        let result = match decoded {
            Ok((record, [])) => Ok(record),
            Ok((_, rest)) => Err(Structural {
                offset: at,
                what: format!("{} bytes after the end of a record", rest.len()),
            }),
            Err(e) => Err(Structural {
                offset: at,
                what: format!("a record that does not decode ({e})"),
            }),
        };
        self.body = body;
        Ok(result?)
    }

    /// After `End`: reads and compares the checksum, and requires the end of the input.
    pub(super) fn finish(mut self) -> Result<[u8; DIGEST_BYTES], ReadFailure> {
        let expected: [u8; DIGEST_BYTES] = self.hasher.finalize_reset().into();
        let mut stored = [0u8; DIGEST_BYTES];
        let at = self.offset;
        self.exact(&mut stored).map_err(|e| match e {
            ReadFailure::Structural(_) => ReadFailure::Structural(Structural {
                offset: at,
                what: "the file ends inside its checksum".into(),
            }),
            other => other,
        })?;
        let mut extra = [0u8; 1];
        match self.input.read(&mut extra) {
            Ok(0) => {}
            Ok(_) => {
                return Err(Structural {
                    offset: self.offset,
                    what: "bytes after the checksum".into(),
                }
                .into());
            }
            Err(source) => {
                return Err(ReadFailure::Io(CheckpointError::ReadFile {
                    path: self.path.clone(),
                    source,
                }));
            }
        }
        if stored != expected {
            return Err(Structural {
                offset: at,
                what: "every record reads, but the checksum differs from the contents".into(),
            }
            .into());
        }
        Ok(expected)
    }
}

/// Whether the last 32 bytes of the input are the SHA-256 of the bytes before them.
pub(super) fn whole_file_checksum_matches(input: &mut impl Read) -> io::Result<bool> {
    let mut hasher = Sha256::new();
    // The last DIGEST_BYTES bytes read so far are held back: they may be the checksum.
    let mut window: Vec<u8> = Vec::with_capacity(64 << 10);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        window.extend_from_slice(&buf[..n]);
        if window.len() > DIGEST_BYTES {
            let release = window.len() - DIGEST_BYTES;
            hasher.update(&window[..release]);
            window.drain(..release);
        }
    }
    if total < PREAMBLE_BYTES + DIGEST_BYTES as u64 || window.len() != DIGEST_BYTES {
        return Ok(false);
    }
    let digest: [u8; DIGEST_BYTES] = hasher.finalize().into();
    Ok(digest.as_slice() == window.as_slice())
}

// ---- verification -------------------------------------------------------------------

/// What a verified file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    pub stage_format_version: u32,
    pub source_id: String,
    pub checkpoint: Option<Position>,
    pub generation: u64,
    pub counts: Counts,
    pub sha256: [u8; DIGEST_BYTES],
}

/// Records of each kind in a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub rows: u64,
    pub generations: u64,
    pub dirty: u64,
    pub dead_letters: u64,
}

/// Verifies a whole checkpoint file in one streaming pass: magic, version, framing,
/// record order, the counts in `End`, the checksum.
pub fn verify_file(path: &Path) -> Result<FileSummary, CheckpointError> {
    let file = File::open(path).map_err(|source| CheckpointError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    verify(BufReader::with_capacity(1 << 20, file), path)
}

/// [`verify_file`] of any input. A structural failure is reported as damage when the
/// whole-file checksum does not match either (the usual case: a flipped or missing
/// byte), and as a malformed file when it does.
pub(super) fn verify<R: Read + Seek>(
    mut input: R,
    path: &Path,
) -> Result<FileSummary, CheckpointError> {
    let result = {
        let reader = RecordReader::open(&mut input, path)?;
        walk(reader, |_| Ok(()))
    };
    match result {
        Ok(summary) => Ok(summary),
        Err(WalkFailure::Io(e)) => Err(e),
        Err(WalkFailure::Structural(s)) => Err(diagnose(&mut input, path, s)?),
    }
}

/// Tells damage from a malformed file by the whole-file checksum.
pub(super) fn diagnose<R: Read + Seek>(
    input: &mut R,
    path: &Path,
    s: Structural,
) -> Result<CheckpointError, CheckpointError> {
    let read_err = |source| CheckpointError::ReadFile {
        path: path.to_owned(),
        source,
    };
    input.seek(SeekFrom::Start(0)).map_err(read_err)?;
    let intact = whole_file_checksum_matches(input).map_err(read_err)?;
    Ok(if intact {
        CheckpointError::Malformed {
            path: path.to_owned(),
            offset: s.offset,
            what: s.what,
        }
    } else {
        CheckpointError::Checksum {
            path: path.to_owned(),
            detail: format!("{} at byte {}", s.what, s.offset),
        }
    })
}

pub(super) enum WalkFailure {
    Io(CheckpointError),
    Structural(Structural),
}

impl From<ReadFailure> for WalkFailure {
    fn from(f: ReadFailure) -> WalkFailure {
        match f {
            ReadFailure::Io(e) => WalkFailure::Io(e),
            ReadFailure::Structural(s) => WalkFailure::Structural(s),
        }
    }
}

/// Reads every record after the preamble, checking order and counts, and hands each
/// to `apply` (the header first). Returns the summary once the checksum matched.
pub(super) fn walk<R: Read>(
    mut reader: RecordReader<R>,
    mut apply: impl FnMut(Record) -> Result<(), WalkFailure>,
) -> Result<FileSummary, WalkFailure> {
    let structural =
        |offset: u64, what: String| WalkFailure::Structural(Structural { offset, what });
    let at = reader.offset;
    let header = reader.next()?;
    let Record::Header {
        stage_format_version,
        ref source_id,
        checkpoint,
        generation,
    } = header
    else {
        return Err(structural(at, "the first record is not the header".into()));
    };
    let source_id = source_id.clone();
    apply(header)?;
    let mut counts = Counts::default();
    let too_new = |what: &str, g: u64, at: u64| {
        structural(
            at,
            format!("a {what} generation {g} above the stage's counter {generation}"),
        )
    };
    loop {
        let at = reader.offset;
        let record = reader.next()?;
        if let Record::Row { table, .. }
        | Record::Generation { table, .. }
        | Record::Dirty { table, .. } = &record
            && table.len() > usize::from(u16::MAX)
        {
            return Err(structural(
                at,
                format!(
                    "a table name of {} bytes, above the limit of 65535",
                    table.len()
                ),
            ));
        }
        match &record {
            Record::Header { .. } => {
                return Err(structural(at, "a second header".into()));
            }
            Record::Row { .. } => counts.rows += 1,
            Record::Generation { generation: g, .. } => {
                if *g > generation {
                    return Err(too_new("partition", *g, at));
                }
                counts.generations += 1;
            }
            Record::Dirty { generation: g, .. } => {
                if *g > generation {
                    return Err(too_new("dirty", *g, at));
                }
                counts.dirty += 1;
            }
            Record::DeadLetter(_) => counts.dead_letters += 1,
            Record::SourceState(_) => {}
            Record::Contract(bytes) => {
                if serde_json::from_slice::<crate::stage::TableContract>(bytes).is_err() {
                    return Err(structural(
                        at,
                        "a table contract that does not decode".into(),
                    ));
                }
            }
            Record::End {
                rows,
                dirty,
                generations,
                dead_letters,
            } => {
                let said = Counts {
                    rows: *rows,
                    generations: *generations,
                    dirty: *dirty,
                    dead_letters: *dead_letters,
                };
                if said != counts {
                    return Err(structural(
                        at,
                        format!("the end record counts {said:?}, but the file holds {counts:?}"),
                    ));
                }
                break;
            }
        }
        apply(record)?;
    }
    let sha256 = reader.finish()?;
    Ok(FileSummary {
        stage_format_version,
        source_id,
        checkpoint,
        generation,
        counts,
        sha256,
    })
}
