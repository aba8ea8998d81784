//! Checkpoint tools: `weir checkpoint show | export | import | check`.
//!
//! The stage is the only durable copy of a feed that cannot be rewound, so it must be
//! inspectable ([`summary`]), verifiable ([`check`]) and movable to another machine
//! ([`export`], [`import`]).
//!
//! # The checkpoint file (file format version 1)
//!
//! ```text
//! "WEIRCKPT"                      8 bytes, magic
//! file format version             u32, big-endian (1)
//! record*                         u32 big-endian length (at most 64 MiB), then that
//!                                 many bytes: one postcard-encoded `Record`
//! SHA-256                         32 bytes, of every byte before it
//! ```
//!
//! Records come in this order: one [`Record::Header`] (stage format version, source id,
//! position, generation counter), every [`Record::Row`] in stage key order (table,
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
//!
//! # `check`
//!
//! Reads every column family completely from one snapshot with checksum verification
//! and reports *problems* (the stage is damaged or inconsistent) and *warnings* (legal
//! states worth knowing). Problems: a RocksDB read error (for example a checksum
//! mismatch in an SST file) named by family; a record that does not decode; a row
//! without its `keys` entry or whose `keys` entry names another partition; a `keys`
//! entry without its row; a partition holding rows without a generation; a dirty mark
//! without a generation or with a newer generation than its `generations` entry; a
//! generation above the stage's generation counter; rows but no position; a row or a
//! dead letter newer than the position (outside a large commit); a missing or unknown
//! format version or source id; a large-transaction marker without pending chunks.
//! Warnings: pending chunks without a marker (a transaction being received by a live
//! `weir run`, or left over by a dead one: they are removed when the stage is next
//! opened for writing), and a large transaction being applied (a live `weir run`
//! finishes it within seconds; after a crash, the next `weir run` does). Repeated
//! problems of one kind are listed ten times, then counted.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use rocksdb::{ErrorKind, IteratorMode, ReadOptions, Snapshot, WriteBatch, WriteOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{
    ApplyingMarker, CF_DEAD_LETTER, CF_DIRTY, CF_GENERATIONS, CF_KEYS, CF_META, CF_PENDING,
    CF_POSITION, CF_ROWS, COLUMN_FAMILIES, FORMAT_VERSION, META_APPLYING, META_FORMAT_VERSION,
    META_GENERATION, META_POSITION_COVERS_ACKS, META_SOURCE_ID, POSITION_KEY, Stage, StageChange,
    StageError, StagedRow, db_err, partition_key, row_key, split_partition, split_table, table_key,
};
use crate::partition::Partition;
use crate::source::{BadRecord, Checkpoint};

/// The first bytes of a checkpoint file.
pub const FILE_MAGIC: &[u8; 8] = b"WEIRCKPT";
/// The checkpoint file format this build writes and reads.
pub const FILE_VERSION: u32 = 1;
/// The largest record a reader accepts; a longer length prefix is damage.
pub const MAX_RECORD_BYTES: u32 = 64 << 20;
/// Bytes of writes an import gathers before it writes them to the stage.
const IMPORT_BATCH_BYTES: usize = 8 << 20;
/// Problems of one kind listed before the rest are only counted.
const PROBLEMS_PER_KIND: u64 = 10;
const DIGEST_BYTES: usize = 32;
/// Magic and version.
const PREAMBLE_BYTES: u64 = 12;

/// The hint of a stage that RocksDB reports as damaged when it opens it.
pub const DAMAGED_HINT: &str = "the stage is damaged (RocksDB reports corruption in its files): restore it with `weir checkpoint import` from an export into a new stage path, or rebuild it from the feed into a new stage path";

/// The hint of [`StageError::Open`]: the damaged-stage advice when RocksDB reports
/// corruption, `otherwise` else.
pub(super) fn open_hint(error: &rocksdb::Error, otherwise: &'static str) -> &'static str {
    if error.kind() == ErrorKind::Corruption {
        DAMAGED_HINT
    } else {
        otherwise
    }
}

fn read_hint(error: &rocksdb::Error) -> &'static str {
    if error.kind() == ErrorKind::Corruption {
        "; the stage is damaged: run `weir checkpoint check`, then restore it from an export or rebuild it from the feed"
    } else {
        ""
    }
}

/// One record of a checkpoint file. Never reorder or change the variants: postcard
/// encodes the variant index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Record {
    Header {
        stage_format_version: u32,
        source_id: String,
        /// `None`: nothing was staged yet.
        checkpoint: Option<Checkpoint>,
        /// The stage's generation counter.
        generation: u64,
    },
    Row {
        table: String,
        partition: Partition,
        /// The encoded key ([`super::encode_key`]).
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
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error("cannot read the `{family}` column family of the stage at {}{}", path.display(), read_hint(source))]
    Read {
        path: PathBuf,
        family: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("cannot write to the stage at {} ({what})", path.display())]
    WriteStage {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("the stage at {} holds a record that does not decode ({what}): run `weir checkpoint check`", path.display())]
    StageRecord { path: PathBuf, what: String },
    #[error(
        "a large transaction is being applied to the stage at {}: export again when it has committed (a running `weir run` commits it within seconds; after a crash, the next `weir run` finishes it)", path.display()
    )]
    Applying { path: PathBuf },
    #[error("{} is not a file name to export to: name a file", path.display())]
    BadPath { path: PathBuf },
    #[error("cannot write the checkpoint file {}", path.display())]
    WriteFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the checkpoint file {}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot encode a checkpoint record ({what})")]
    Encode {
        what: &'static str,
        #[source]
        source: postcard::Error,
    },
    #[error("{} is not a weir checkpoint file (it does not start with `WEIRCKPT`): name a file written by `weir checkpoint export`", path.display())]
    NotCheckpoint { path: PathBuf },
    #[error("{} has checkpoint file format version {found}, newer than version {FILE_VERSION} that this build reads: import it with a newer weir", path.display())]
    NewerFileVersion { path: PathBuf, found: u32 },
    #[error("{} has checkpoint file format version {found}, which no weir writes (this build reads version {FILE_VERSION}): the file is damaged; export the stage again", path.display())]
    UnknownFileVersion { path: PathBuf, found: u32 },
    #[error("{} is damaged: it fails its SHA-256 check ({detail}), so it was changed or truncated after export: export the stage again, or use another copy", path.display())]
    Checksum { path: PathBuf, detail: String },
    #[error("{} is malformed at byte {offset}: {what} (its checksum matches, so it was written wrong): export the stage again with this build", path.display())]
    Malformed {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{} holds a stage of format version {found}; this build imports version {FORMAT_VERSION}: import it with the weir that exported it{}", path.display(), if *found > FORMAT_VERSION { " or a newer one" } else { "" })]
    StageFormat { path: PathBuf, found: u32 },
    #[error("{} was exported from the feed `{in_file}`, but the config reads `{configured}`: a stage belongs to one feed; import with a config whose source is that feed", path.display())]
    SourceMismatch {
        path: PathBuf,
        in_file: String,
        configured: String,
    },
    #[error("{} changed while it was imported (its contents differ from the verified ones): nothing was imported; import again from a file nothing writes to", path.display())]
    FileChanged { path: PathBuf },
    #[error("the stage at {} is not empty ({what}): import only into a stage path that does not exist or holds an empty stage; choose a new stage path, or move this one away first", path.display())]
    NotEmpty { path: PathBuf, what: String },
    #[error("{} is in the way of an import into {}: a previous import was interrupted (or is still running); if no import is running, remove {} and import again", tmp.display(), path.display(), tmp.display())]
    ImportInProgress { path: PathBuf, tmp: PathBuf },
    #[error("the stage imported from {} fails its check ({count} problems; first: {first}): nothing was imported; export the stage again", file.display())]
    ImportedInconsistent {
        file: PathBuf,
        count: usize,
        first: String,
    },
    #[error("cannot put the imported stage in place at {}", path.display())]
    Install {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot measure the size of the stage at {}", path.display())]
    Size {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

// ---- show ---------------------------------------------------------------------------

/// What `weir checkpoint show` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageSummary {
    pub path: String,
    pub format_version: u32,
    pub source_id: Option<String>,
    /// `None`: nothing staged yet.
    pub checkpoint: Option<Checkpoint>,
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
    pub contracts: Vec<super::TableContract>,
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

/// Sum of the sizes of the files under `path` (files that vanish meanwhile, as
/// RocksDB deletes obsolete files, are not counted).
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
            total += meta.len();
        }
    }
    Ok(total)
}

/// Reads of one snapshot, with errors naming the family.
struct Reader<'a> {
    stage: &'a Stage,
    snap: &'a Snapshot<'a>,
}

fn read_opts() -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_verify_checksums(true);
    opts
}

fn scan_opts() -> ReadOptions {
    let mut opts = read_opts();
    opts.fill_cache(false);
    opts
}

impl Reader<'_> {
    fn read_err(&self, family: &'static str) -> impl FnOnce(rocksdb::Error) -> CheckpointError {
        let path = self.stage.path().to_owned();
        move |source| CheckpointError::Read {
            path,
            family,
            source,
        }
    }

    fn record(&self, what: impl Into<String>) -> CheckpointError {
        CheckpointError::StageRecord {
            path: self.stage.path().to_owned(),
            what: what.into(),
        }
    }

    fn get(&self, family: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.snap
            .get_cf_opt(self.stage.cf(family), key, read_opts())
            .map_err(self.read_err(family))
    }

    fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, CheckpointError> {
        self.get(CF_META, key)
    }

    fn generation(&self) -> Result<u64, CheckpointError> {
        match self.meta(META_GENERATION)? {
            None => Ok(0),
            Some(b) => be_u64(&b).ok_or_else(|| self.record("generation counter")),
        }
    }

    fn checkpoint(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        self.get(CF_POSITION, POSITION_KEY)?
            .map(|b| postcard::from_bytes(&b).map_err(|_| self.record("position")))
            .transpose()
    }

    /// Calls `f` with every entry of `family`, in key order.
    fn scan(
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

    fn count(&self, family: &'static str) -> Result<u64, CheckpointError> {
        let mut n = 0;
        self.scan(family, |_, _| {
            n += 1;
            Ok(())
        })?;
        Ok(n)
    }
}

fn be_u32(b: &[u8]) -> Option<u32> {
    b.try_into().ok().map(u32::from_be_bytes)
}

fn be_u64(b: &[u8]) -> Option<u64> {
    b.try_into().ok().map(u64::from_be_bytes)
}

/// Splits a `generations` or `dirty` key: `table | len(partition) | partition`.
fn split_partition_key(key: &[u8]) -> Option<(String, Partition)> {
    let (table, rest) = split_table(key)?;
    let (partition, tail) = split_partition(rest)?;
    tail.is_empty().then_some((table, partition))
}

/// Splits a `rows` key: `table | len(partition) | partition | key`.
fn split_row_key(key: &[u8]) -> Option<(String, Partition, &[u8])> {
    let (table, rest) = split_table(key)?;
    let (partition, key) = split_partition(rest)?;
    Some((table, partition, key))
}

// ---- record framing -----------------------------------------------------------------

/// Writes the framing: magic and version, length-prefixed records, the checksum.
struct RecordWriter<W: Write> {
    out: W,
    hasher: Sha256,
    bytes: u64,
    body: Vec<u8>,
}

impl<W: Write> RecordWriter<W> {
    fn new(out: W) -> io::Result<RecordWriter<W>> {
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

    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// Appends one record; the error says whether encoding or writing failed.
    fn record(&mut self, record: &Record) -> Result<(), FrameWriteError> {
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
    fn finish(mut self) -> io::Result<(W, [u8; DIGEST_BYTES], u64)> {
        let digest: [u8; DIGEST_BYTES] = self.hasher.finalize_reset().into();
        self.out.write_all(&digest)?;
        Ok((self.out, digest, self.bytes + DIGEST_BYTES as u64))
    }
}

#[derive(Debug)]
enum FrameWriteError {
    Encode(postcard::Error),
    TooLarge,
    Io(io::Error),
}

/// Reads the framing, hashing every byte it reads. Never panics on any input.
struct RecordReader<R: Read> {
    input: R,
    hasher: Sha256,
    offset: u64,
    path: PathBuf,
    body: Vec<u8>,
}

/// A structural failure of the record stream (to be told apart from damage by the
/// whole-file checksum).
#[derive(Debug)]
struct Structural {
    offset: u64,
    what: String,
}

enum ReadFailure {
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
    fn open(input: R, path: &Path) -> Result<RecordReader<R>, CheckpointError> {
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
            FILE_VERSION => Ok(reader),
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
    fn exact(&mut self, buf: &mut [u8]) -> Result<(), ReadFailure> {
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

    fn next(&mut self) -> Result<Record, ReadFailure> {
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
    fn finish(mut self) -> Result<[u8; DIGEST_BYTES], ReadFailure> {
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
fn whole_file_checksum_matches(input: &mut impl Read) -> io::Result<bool> {
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
    pub checkpoint: Option<Checkpoint>,
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
fn verify<R: Read + Seek>(mut input: R, path: &Path) -> Result<FileSummary, CheckpointError> {
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
fn diagnose<R: Read + Seek>(
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

enum WalkFailure {
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
fn walk<R: Read>(
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

// ---- export -------------------------------------------------------------------------

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    pub file: PathBuf,
    pub checkpoint: Option<Checkpoint>,
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
fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

// ---- import -------------------------------------------------------------------------

/// What an import did.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub stage: PathBuf,
    pub checkpoint: Option<Checkpoint>,
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
    if verified.stage_format_version != FORMAT_VERSION {
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

// ---- check --------------------------------------------------------------------------

/// One thing wrong (or worth knowing) about a stage, by column family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub family: &'static str,
    pub description: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.family, self.description)
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    pub rows: u64,
    pub checkpoint: Option<Checkpoint>,
    /// The stage is damaged or inconsistent.
    pub problems: Vec<Problem>,
    /// Legal states worth knowing (see the module documentation).
    pub warnings: Vec<Problem>,
}

impl CheckReport {
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Problems, at most [`PROBLEMS_PER_KIND`] different ones of each kind, the rest
/// (and repeats, such as one damaged block met by many lookups) counted.
#[derive(Default)]
struct Findings {
    report: CheckReport,
    /// Per (family, kind): problems found, problems listed.
    per_kind: BTreeMap<(&'static str, &'static str), (u64, u64)>,
}

impl Findings {
    fn problem(&mut self, family: &'static str, kind: &'static str, description: String) {
        let (found, listed) = self.per_kind.entry((family, kind)).or_insert((0, 0));
        *found += 1;
        let repeat = self
            .report
            .problems
            .iter()
            .any(|p| p.family == family && p.description == description);
        if *listed < PROBLEMS_PER_KIND && !repeat {
            *listed += 1;
            self.report.problems.push(Problem {
                family,
                description,
            });
        }
    }

    fn warning(&mut self, family: &'static str, description: String) {
        self.report.warnings.push(Problem {
            family,
            description,
        });
    }

    fn finish(mut self) -> CheckReport {
        for ((family, kind), (found, listed)) in self.per_kind {
            if found > listed {
                self.report.problems.push(Problem {
                    family,
                    description: format!("{} more problems of this kind: {kind}", found - listed),
                });
            }
        }
        self.report
    }
}

/// Reads every column family of the stage completely, from one snapshot, verifying
/// block checksums, and reports what is wrong. A read error is a problem, not an
/// error: the report names the family.
pub fn check(stage: &Stage) -> Result<CheckReport, CheckpointError> {
    let started = Instant::now();
    let snap = stage.db.snapshot();
    let mut c = Checker {
        stage,
        snap: &snap,
        f: Findings::default(),
    };
    c.run();
    let report = c.f.finish();
    tracing::info!(
        rows = report.rows,
        problems = report.problems.len(),
        warnings = report.warnings.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "stage checked"
    );
    Ok(report)
}

struct Checker<'a> {
    stage: &'a Stage,
    snap: &'a Snapshot<'a>,
    f: Findings,
}

/// A point read of [`Checker`].
enum Lookup {
    Found(Vec<u8>),
    Absent,
    /// The read failed (already reported as a problem).
    Failed,
}

impl Checker<'_> {
    fn get(&mut self, family: &'static str, key: &[u8]) -> Lookup {
        let (stage, snap) = (self.stage, self.snap);
        match snap.get_cf_opt(stage.cf(family), key, read_opts()) {
            Ok(Some(v)) => Lookup::Found(v),
            Ok(None) => Lookup::Absent,
            Err(e) => {
                self.f
                    .problem(family, "read error", format!("read failed: {e}"));
                Lookup::Failed
            }
        }
    }

    /// Every entry of `family`; a read error ends the scan and is a problem.
    fn scan(&mut self, family: &'static str, mut each: impl FnMut(&mut Self, &[u8], &[u8])) {
        let (stage, snap) = (self.stage, self.snap);
        let mut n = 0u64;
        for item in snap.iterator_cf_opt(stage.cf(family), scan_opts(), IteratorMode::Start) {
            match item {
                Ok((k, v)) => {
                    n += 1;
                    each(self, &k, &v);
                }
                Err(e) => {
                    self.f.problem(
                        family,
                        "read error",
                        format!("reading the family failed after {n} entries: {e}"),
                    );
                }
            }
        }
    }

    fn run(&mut self) {
        // meta
        let mut meta: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        self.scan(CF_META, |_, k, v| {
            meta.insert(k.to_vec(), v.to_vec());
        });
        match meta.get(META_FORMAT_VERSION).map(|v| be_u32(v)) {
            None => self
                .f
                .problem(CF_META, "format version", "no format version record".into()),
            Some(None) => self.f.problem(
                CF_META,
                "format version",
                "the format version record does not decode".into(),
            ),
            Some(Some(v)) if v != FORMAT_VERSION => self.f.problem(
                CF_META,
                "format version",
                format!("format version {v}, but this build reads {FORMAT_VERSION}"),
            ),
            Some(Some(_)) => {}
        }
        match meta.get(META_SOURCE_ID) {
            None => self
                .f
                .problem(CF_META, "source id", "no source id record".into()),
            Some(v) if std::str::from_utf8(v).is_err() => {
                self.f
                    .problem(CF_META, "source id", "the source id is not UTF-8".into())
            }
            Some(_) => {}
        }
        let generation = match meta.get(META_GENERATION).map(|v| be_u64(v)) {
            None => 0,
            Some(Some(g)) => g,
            Some(None) => {
                self.f.problem(
                    CF_META,
                    "generation",
                    "the generation counter does not decode".into(),
                );
                u64::MAX
            }
        };
        let applying: Option<ApplyingMarker> = match meta.get(META_APPLYING) {
            None => None,
            Some(v) => match postcard::from_bytes::<ApplyingMarker>(v) {
                Ok(m) => Some(m),
                Err(_) => {
                    self.f.problem(
                        CF_META,
                        "marker",
                        "the large-transaction marker does not decode".into(),
                    );
                    None
                }
            },
        };
        drop(meta);

        // position
        let mut checkpoint: Option<Checkpoint> = None;
        self.scan(CF_POSITION, |c, k, v| {
            if k != POSITION_KEY {
                c.f.problem(
                    CF_POSITION,
                    "unknown key",
                    format!("unexpected key {}", hex::encode(k)),
                );
                return;
            }
            match postcard::from_bytes::<Checkpoint>(v) {
                Ok(p) => checkpoint = Some(p),
                Err(_) => {
                    c.f.problem(CF_POSITION, "decode", "the position does not decode".into())
                }
            }
        });
        self.f.report.checkpoint = checkpoint;
        let limit = if applying.is_some() {
            None
        } else {
            checkpoint.map(|c| c.position)
        };

        // pending
        let mut chunks = 0u64;
        self.scan(CF_PENDING, |c, k, v| {
            chunks += 1;
            if k.len() != 8 || postcard::from_bytes::<Vec<StageChange>>(v).is_err() {
                c.f.problem(
                    CF_PENDING,
                    "decode",
                    format!("pending chunk {} does not decode", hex::encode(k)),
                );
            }
        });
        match (applying, chunks) {
            (None, 0) => {}
            (None, n) => self.f.warning(
                CF_PENDING,
                format!(
                    "leftover pending chunks: {n} (they are removed when the stage is next opened for writing; a running `weir run` may be receiving a large transaction)"
                ),
            ),
            (Some(m), 0) => self.f.problem(
                CF_META,
                "marker",
                format!(
                    "a large transaction (position {}) is marked as being applied, but the pending area is empty",
                    m.checkpoint.position
                ),
            ),
            (Some(m), n) => self.f.warning(
                CF_META,
                format!(
                    "a large transaction (position {}, {n} chunks) is being applied: a running `weir run` finishes it within seconds; otherwise the next `weir run` does",
                    m.checkpoint.position
                ),
            ),
        }
        if let Some(m) = applying.filter(|m| m.generation > generation) {
            self.f.problem(
                CF_META,
                "generation",
                format!(
                    "the large transaction's generation {} is above the counter {generation}",
                    m.generation
                ),
            );
        }

        // rows: each decodes, has its keys entry, and its partition a generation.
        let mut rows = 0u64;
        let mut last_partition: Option<Vec<u8>> = None;
        self.scan(CF_ROWS, |c, k, v| {
            rows += 1;
            let Some((table, partition, key)) = split_row_key(k) else {
                c.f.problem(
                    CF_ROWS,
                    "key",
                    format!("a row key does not decode: {}", hex::encode(k)),
                );
                return;
            };
            match postcard::from_bytes::<StagedRow>(v) {
                Ok(row) => {
                    if let Some(p) = limit.filter(|p| row.commit_position > *p) {
                        c.f.problem(
                            CF_ROWS,
                            "position",
                            format!(
                                "a row of {table} partition {partition} was written at position {}, after the stage position {p}",
                                row.commit_position
                            ),
                        );
                    }
                }
                Err(_) => c.f.problem(
                    CF_ROWS,
                    "decode",
                    format!("a row of {table} partition {partition} does not decode"),
                ),
            }
            match c.get(CF_KEYS, &table_key(&table, key)) {
                Lookup::Absent => c.f.problem(
                    CF_KEYS,
                    "missing",
                    format!(
                        "no keys entry for a row of {table} partition {partition} (key {})",
                        hex::encode(key)
                    ),
                ),
                Lookup::Found(p) if p != partition.to_bytes() => c.f.problem(
                    CF_KEYS,
                    "partition",
                    format!(
                        "the keys entry of a row of {table} partition {partition} (key {}) names partition {}",
                        hex::encode(key),
                        Partition::from_bytes(&p).map_or_else(|| "(undecodable)".to_owned(), |p| p.to_string())
                    ),
                ),
                Lookup::Found(_) | Lookup::Failed => {}
            }
            let pk = partition_key(&table, &partition);
            if last_partition.as_deref() != Some(pk.as_slice()) {
                if matches!(c.get(CF_GENERATIONS, &pk), Lookup::Absent) {
                    c.f.problem(
                        CF_GENERATIONS,
                        "missing",
                        format!("partition {partition} of {table} holds rows but has no generation"),
                    );
                }
                last_partition = Some(pk);
            }
        });
        self.f.report.rows = rows;
        if rows > 0 && checkpoint.is_none() && applying.is_none() {
            self.f.problem(
                CF_POSITION,
                "missing",
                format!("the stage holds {rows} rows but no position"),
            );
        }

        // keys: each names a partition holding its row.
        self.scan(CF_KEYS, |c, k, v| {
            let Some((table, key)) = split_table(k) else {
                c.f.problem(
                    CF_KEYS,
                    "key",
                    format!("a keys entry does not decode: {}", hex::encode(k)),
                );
                return;
            };
            let Some(partition) = Partition::from_bytes(v) else {
                c.f.problem(
                    CF_KEYS,
                    "decode",
                    format!("the keys entry of {table} key {} names no partition", hex::encode(key)),
                );
                return;
            };
            if matches!(c.get(CF_ROWS, &row_key(&table, &partition, key)), Lookup::Absent) {
                c.f.problem(
                    CF_ROWS,
                    "missing",
                    format!(
                        "the keys entry of {table} key {} names partition {partition}, which has no such row",
                        hex::encode(key)
                    ),
                );
            }
        });

        // generations: decode, and not above the counter.
        self.scan(CF_GENERATIONS, |c, k, v| {
            let Some((table, partition)) = split_partition_key(k) else {
                c.f.problem(
                    CF_GENERATIONS,
                    "key",
                    format!("a generations key does not decode: {}", hex::encode(k)),
                );
                return;
            };
            match be_u64(v) {
                None => c.f.problem(
                    CF_GENERATIONS,
                    "decode",
                    format!("the generation of {table} partition {partition} does not decode"),
                ),
                Some(g) if g > generation => c.f.problem(
                    CF_GENERATIONS,
                    "counter",
                    format!(
                        "{table} partition {partition} has generation {g}, above the counter {generation}"
                    ),
                ),
                Some(_) => {}
            }
        });

        // dirty: decode, a generation at least as new, not above the counter.
        self.scan(CF_DIRTY, |c, k, v| {
            let Some((table, partition)) = split_partition_key(k) else {
                c.f.problem(
                    CF_DIRTY,
                    "key",
                    format!("a dirty key does not decode: {}", hex::encode(k)),
                );
                return;
            };
            let Some(d) = be_u64(v) else {
                c.f.problem(
                    CF_DIRTY,
                    "decode",
                    format!("the dirty mark of {table} partition {partition} does not decode"),
                );
                return;
            };
            if d > generation {
                c.f.problem(
                    CF_DIRTY,
                    "counter",
                    format!(
                        "{table} partition {partition} is dirty at generation {d}, above the counter {generation}"
                    ),
                );
            }
            match c.get(CF_GENERATIONS, k) {
                Lookup::Absent => c.f.problem(
                    CF_GENERATIONS,
                    "missing",
                    format!("{table} partition {partition} is dirty but has no generation"),
                ),
                Lookup::Found(g) if be_u64(&g).is_some_and(|g| g < d) => c.f.problem(
                    CF_GENERATIONS,
                    "older",
                    format!(
                        "{table} partition {partition} is dirty at generation {d}, newer than its generation {}",
                        be_u64(&g).unwrap_or_default()
                    ),
                ),
                // An undecodable generation is reported by the generations scan.
                Lookup::Found(_) | Lookup::Failed => {}
            }
        });

        // dead letters: decode, keyed by their position.
        self.scan(CF_DEAD_LETTER, |c, k, v| {
            match (be_u64(k), postcard::from_bytes::<BadRecord>(v)) {
                (Some(p), Ok(record)) if p == record.position => {
                    if let Some(limit) = limit.filter(|l| p >= *l) {
                        c.f.problem(
                            CF_DEAD_LETTER,
                            "position",
                            format!("a dead letter at position {p}, at or after the stage position {limit}"),
                        );
                    }
                }
                (Some(p), Ok(record)) => c.f.problem(
                    CF_DEAD_LETTER,
                    "key",
                    format!("a dead letter keyed {p} holds position {}", record.position),
                ),
                _ => c.f.problem(
                    CF_DEAD_LETTER,
                    "decode",
                    format!("a dead letter does not decode (key {})", hex::encode(k)),
                ),
            }
        });
    }
}

// ---- flush --------------------------------------------------------------------------

impl Stage {
    /// Flushes every column family's memtable to SST files, so the stage's state is
    /// in its table files and the write-ahead log can be dropped.
    pub fn flush(&self) -> Result<(), StageError> {
        for name in COLUMN_FAMILIES {
            self.db
                .flush_cf(self.cf(name))
                .map_err(db_err("flush the stage"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use proptest::prelude::*;

    use super::*;
    use crate::source::{Op, Transaction};
    use crate::stage::encode_key;
    use crate::value::Value;

    const TABLE: &str = "public.t";

    fn row(id: i64, day: &str, pos: u64) -> StagedRow {
        StagedRow {
            commit_position: pos,
            commit_time_us: Some(1_772_323_200_000_000),
            op: Op::Insert,
            values: vec![
                ("id".into(), Value::Int(id)),
                ("day".into(), Value::Text(day.into())),
                ("note".into(), Value::Json("{\"a\":[1,2]}".into())),
            ],
        }
    }

    fn key(id: i64) -> Vec<u8> {
        encode_key(&[&Value::Int(id)]).expect("key")
    }

    fn p(s: &str) -> Partition {
        Partition::Key(s.into())
    }

    fn sample_records() -> Vec<Record> {
        vec![
            Record::Header {
                stage_format_version: FORMAT_VERSION,
                source_id: "jsonl:/feeds/a.jsonl".into(),
                checkpoint: Some(Checkpoint {
                    position: 300,
                    cursor: 3,
                }),
                generation: 3,
            },
            Record::Row {
                table: TABLE.into(),
                partition: p("d1"),
                key: key(1),
                row: row(1, "d1", 100),
            },
            Record::Row {
                table: TABLE.into(),
                partition: Partition::Null,
                key: key(2),
                row: row(2, "", 200),
            },
            Record::Generation {
                table: TABLE.into(),
                partition: p("d1"),
                generation: 1,
            },
            Record::Generation {
                table: TABLE.into(),
                partition: Partition::Null,
                generation: 3,
            },
            Record::Dirty {
                table: TABLE.into(),
                partition: Partition::Null,
                generation: 3,
            },
            Record::DeadLetter(BadRecord {
                position: 250,
                line: Some(3),
                table: None,
                reason: "not JSON".into(),
                raw: b"{oops".to_vec(),
            }),
            Record::End {
                rows: 2,
                dirty: 1,
                generations: 2,
                dead_letters: 1,
            },
        ]
    }

    fn encode(records: &[Record]) -> Vec<u8> {
        let mut w = RecordWriter::new(Vec::new()).expect("writer");
        for r in records {
            w.record(r).expect("record");
        }
        let (bytes, _, len) = w.finish().expect("finish");
        assert_eq!(len, bytes.len() as u64);
        bytes
    }

    fn verify_bytes(bytes: &[u8]) -> Result<FileSummary, CheckpointError> {
        verify(Cursor::new(bytes), Path::new("test.ckpt"))
    }

    /// Re-frames `body` (everything after the preamble, without a checksum) with a
    /// correct checksum, as a faulty writer would.
    fn with_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
        let digest: [u8; DIGEST_BYTES] = Sha256::digest(&bytes).into();
        bytes.extend_from_slice(&digest);
        bytes
    }

    fn preamble() -> Vec<u8> {
        let mut out = FILE_MAGIC.to_vec();
        out.extend_from_slice(&FILE_VERSION.to_be_bytes());
        out
    }

    fn framed(record: &Record) -> Vec<u8> {
        let body = postcard::to_allocvec(record).expect("encode");
        let mut out = u32::try_from(body.len())
            .expect("len")
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn a_well_formed_file_verifies_with_its_counts() {
        let bytes = encode(&sample_records());
        let summary = verify_bytes(&bytes).expect("verifies");
        assert_eq!(
            summary.counts,
            Counts {
                rows: 2,
                generations: 2,
                dirty: 1,
                dead_letters: 1
            }
        );
        assert_eq!(summary.source_id, "jsonl:/feeds/a.jsonl");
        assert_eq!(summary.checkpoint.map(|c| c.position), Some(300));
        assert_eq!(summary.generation, 3);
        assert_eq!(&bytes[..8], b"WEIRCKPT");
        assert_eq!(&bytes[8..12], &1u32.to_be_bytes());
        let digest: [u8; 32] = Sha256::digest(&bytes[..bytes.len() - 32]).into();
        assert_eq!(summary.sha256, digest);
    }

    #[test]
    fn every_flipped_bit_is_refused_and_named() {
        let bytes = encode(&sample_records());
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = bytes.clone();
                damaged[i] ^= bit;
                let err = verify_bytes(&damaged).expect_err("a flipped bit is refused");
                match i {
                    0..8 => assert!(
                        matches!(err, CheckpointError::NotCheckpoint { .. }),
                        "byte {i}: {err}"
                    ),
                    8..12 => assert!(
                        matches!(
                            err,
                            CheckpointError::NewerFileVersion { .. }
                                | CheckpointError::UnknownFileVersion { .. }
                        ),
                        "byte {i}: {err}"
                    ),
                    _ => {
                        assert!(
                            matches!(err, CheckpointError::Checksum { .. }),
                            "byte {i}: {err}"
                        );
                        assert!(err.to_string().contains("damaged"), "{err}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = encode(&sample_records());
        for len in 0..bytes.len() {
            let err = verify_bytes(&bytes[..len]).expect_err("a truncated file is refused");
            if len >= 12 {
                assert!(
                    matches!(err, CheckpointError::Checksum { .. }),
                    "length {len}: {err}"
                );
            } else if len < 8 {
                assert!(
                    matches!(err, CheckpointError::NotCheckpoint { .. }),
                    "length {len}: {err}"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            verify_bytes(&longer),
            Err(CheckpointError::Checksum { .. })
        ));
    }

    #[test]
    fn bad_magic_and_other_versions_are_refused_naming_both_versions() {
        let mut bytes = encode(&sample_records());
        bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
        let err = verify_bytes(&bytes).expect_err("newer");
        assert!(
            matches!(err, CheckpointError::NewerFileVersion { found: 2, .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("version 2") && text.contains("version 1"),
            "{text}"
        );
        bytes[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            verify_bytes(&bytes),
            Err(CheckpointError::UnknownFileVersion { found: 0, .. })
        ));
        let err = verify_bytes(b"PK\x03\x04 this is a zip").expect_err("not ours");
        assert!(
            matches!(err, CheckpointError::NotCheckpoint { .. }),
            "{err}"
        );
        assert!(matches!(
            verify_bytes(b""),
            Err(CheckpointError::NotCheckpoint { .. })
        ));
    }

    #[test]
    fn an_oversized_length_prefix_is_refused_without_reading_it() {
        let mut bytes = preamble();
        bytes.extend_from_slice(&framed(&sample_records()[0]));
        bytes.extend_from_slice(&(MAX_RECORD_BYTES + 1).to_be_bytes());
        bytes.extend_from_slice(&[0; 16]);
        let err = verify_bytes(&with_checksum(bytes)).expect_err("too long");
        assert!(
            matches!(&err, CheckpointError::Malformed { what, .. } if what.contains("limit")),
            "{err}"
        );
        // A length prefix of almost 64 MiB in a small file reads only what is there.
        let mut bytes = preamble();
        bytes.extend_from_slice(&MAX_RECORD_BYTES.to_be_bytes());
        bytes.extend_from_slice(&[7; 100]);
        assert!(matches!(
            verify_bytes(&bytes),
            Err(CheckpointError::Checksum { .. })
        ));
    }

    #[test]
    fn a_well_checksummed_file_with_wrong_structure_is_malformed() {
        let records = sample_records();
        // End counts that do not match.
        let mut bytes = preamble();
        for r in &records[..records.len() - 1] {
            bytes.extend_from_slice(&framed(r));
        }
        bytes.extend_from_slice(&framed(&Record::End {
            rows: 3,
            dirty: 1,
            generations: 2,
            dead_letters: 1,
        }));
        let err = verify_bytes(&with_checksum(bytes)).expect_err("counts");
        assert!(
            matches!(&err, CheckpointError::Malformed { what, .. } if what.contains("counts")),
            "{err}"
        );
        // No header first.
        let mut bytes = preamble();
        for r in &records[1..] {
            bytes.extend_from_slice(&framed(r));
        }
        let err = verify_bytes(&with_checksum(bytes)).expect_err("header");
        assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
        // A record followed by garbage inside its frame.
        let mut bytes = preamble();
        let mut body = postcard::to_allocvec(&records[0]).expect("encode");
        body.push(0);
        bytes.extend_from_slice(&u32::try_from(body.len()).expect("len").to_be_bytes());
        bytes.extend_from_slice(&body);
        let err = verify_bytes(&with_checksum(bytes)).expect_err("trailing");
        assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
        // A generation above the counter.
        let mut bytes = preamble();
        bytes.extend_from_slice(&framed(&records[0]));
        bytes.extend_from_slice(&framed(&Record::Dirty {
            table: TABLE.into(),
            partition: p("d9"),
            generation: 4,
        }));
        let err = verify_bytes(&with_checksum(bytes)).expect_err("generation");
        assert!(matches!(err, CheckpointError::Malformed { .. }), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// No bytes make the reader panic or allocate without bound.
        #[test]
        fn arbitrary_bytes_after_the_preamble_never_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..600),
            checksum in any::<bool>(),
        ) {
            let mut bytes = preamble();
            bytes.extend_from_slice(&tail);
            let bytes = if checksum { with_checksum(bytes) } else { bytes };
            prop_assert!(verify_bytes(&bytes).is_err());
        }

        /// A valid file with any one byte replaced is refused.
        #[test]
        fn any_replaced_byte_is_refused(at in any::<prop::sample::Index>(), value in any::<u8>()) {
            let bytes = encode(&sample_records());
            let i = at.index(bytes.len());
            prop_assume!(bytes[i] != value);
            let mut damaged = bytes;
            damaged[i] = value;
            prop_assert!(verify_bytes(&damaged).is_err());
        }
    }

    // ---- against a real stage ---------------------------------------------------------

    fn upsert(id: i64, day: &str, pos: u64) -> StageChange {
        StageChange::Upsert {
            table: TABLE.into(),
            key: key(id),
            partition: p(day),
            row: row(id, day, pos),
        }
    }

    fn txn(end: u64, changes: Vec<StageChange>) -> Transaction {
        Transaction {
            end,
            cursor: end / 10,
            changes,
            bad_records: vec![],
        }
    }

    /// A stage with rows in three partitions (one moved, one deleted), a NULL
    /// partition, a clean and several dirty partitions, and a dead letter.
    fn sample_stage(path: &Path) -> Stage {
        let stage = Stage::open(path, "feed-a").expect("open");
        stage
            .apply(&[
                txn(10, vec![upsert(1, "d1", 10), upsert(2, "d1", 10)]),
                txn(20, vec![upsert(3, "d2", 20)]),
            ])
            .expect("apply");
        let d1 = stage.read_partition(TABLE, &p("d1")).expect("read");
        assert!(
            stage
                .clear_dirty(TABLE, &p("d1"), d1.dirty.expect("dirty"))
                .expect("clear")
        );
        let mut with_bad = txn(
            40,
            vec![
                upsert(2, "d3", 40),
                StageChange::Delete {
                    table: TABLE.into(),
                    key: key(3),
                },
                StageChange::Upsert {
                    table: TABLE.into(),
                    key: key(4),
                    partition: Partition::Null,
                    row: row(4, "", 40),
                },
            ],
        );
        with_bad.bad_records.push(BadRecord {
            position: 31,
            line: Some(4),
            table: Some(TABLE.into()),
            reason: "not JSON".into(),
            raw: b"{oops".to_vec(),
        });
        stage.apply(&[with_bad]).expect("apply");
        stage
    }

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    /// Every family but `pending`, plus the meta records, as raw bytes.
    fn dump(stage: &Stage) -> Vec<(&'static str, Entries)> {
        [
            CF_ROWS,
            CF_KEYS,
            CF_GENERATIONS,
            CF_DIRTY,
            CF_POSITION,
            CF_DEAD_LETTER,
            CF_META,
        ]
        .into_iter()
        .map(|family| {
            let entries = stage
                .db
                .iterator_cf(stage.cf(family), IteratorMode::Start)
                .map(|item| {
                    let (k, v) = item.expect("read");
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            (family, entries)
        })
        .collect()
    }

    #[test]
    fn export_then_import_reproduces_every_family() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(&dir.path().join("a"));
        assert!(check(&stage).expect("check").is_healthy());
        let file = dir.path().join("a.ckpt");
        let exported = export(&stage, &file).expect("export");
        assert_eq!(
            exported.counts,
            Counts {
                rows: 3,
                generations: 4,
                dirty: 4,
                dead_letters: 1
            }
        );
        assert!(!dir.path().join("a.ckpt.tmp").exists());
        assert_eq!(
            exported.bytes,
            std::fs::metadata(&file).expect("file").len()
        );

        let b = dir.path().join("nested").join("b");
        let imported = import(&file, &b, "feed-a").expect("import");
        assert_eq!(imported.counts, exported.counts);
        assert!(!dir.path().join("nested").join("b.importing").exists());
        let copy = Stage::open(&b, "feed-a").expect("open the import");
        assert_eq!(dump(&copy), dump(&stage));
        let report = check(&copy).expect("check");
        assert!(report.is_healthy(), "{:?}", report.problems);
        assert_eq!(report.rows, 3);

        // The copy goes on where the original was: positions at or below 40 are
        // skipped, the next generation follows the original's.
        let outcome = copy
            .apply(&[
                txn(40, vec![upsert(9, "d9", 40)]),
                txn(50, vec![upsert(5, "d1", 50)]),
            ])
            .expect("apply");
        assert_eq!((outcome.transactions, outcome.skipped), (1, 1));
        stage
            .apply(&[txn(50, vec![upsert(5, "d1", 50)])])
            .expect("apply");
        assert_eq!(dump(&copy), dump(&stage));
    }

    #[cfg(unix)]
    #[test]
    fn new_stages_imports_and_exports_are_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let stage = sample_stage(&a);
        assert_eq!(mode(&a), 0o700, "a new stage folder");
        let file = dir.path().join("a.ckpt");
        export(&stage, &file).expect("export");
        assert_eq!(mode(&file), 0o600, "an export");
        let b = dir.path().join("nested").join("b");
        import(&file, &b, "feed-a").expect("import");
        assert_eq!(mode(&b), 0o700, "an imported stage");
    }

    #[test]
    fn import_into_an_empty_stage_replaces_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(&dir.path().join("a"));
        let file = dir.path().join("a.ckpt");
        export(&stage, &file).expect("export");
        let b = dir.path().join("b");
        drop(Stage::open(&b, "feed-a").expect("an empty stage, as `weir init` leaves it"));
        import(&file, &b, "feed-a").expect("import");
        assert!(!dir.path().join("b.replaced").exists());
        assert_eq!(
            dump(&Stage::open(&b, "feed-a").expect("open")),
            dump(&stage)
        );
        // An empty folder is fine too.
        let c = dir.path().join("c");
        std::fs::create_dir(&c).expect("mkdir");
        import(&file, &c, "feed-a").expect("import into an empty folder");
    }

    #[test]
    fn import_refuses_a_full_stage_another_feed_and_a_damaged_file_changing_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        let stage = sample_stage(&a);
        let file = dir.path().join("a.ckpt");
        export(&stage, &file).expect("export");
        drop(stage);

        let err = import(&file, &a, "feed-a").expect_err("a full stage");
        assert!(matches!(err, CheckpointError::NotEmpty { .. }), "{err}");
        assert!(err.to_string().contains(&a.display().to_string()), "{err}");
        assert!(err.to_string().contains("position 40"), "{err}");

        let b = dir.path().join("b");
        let err = import(&file, &b, "feed-b").expect_err("another feed");
        assert!(
            err.to_string().contains("`feed-a`") && err.to_string().contains("`feed-b`"),
            "{err}"
        );
        assert!(!b.exists());

        let mut bytes = std::fs::read(&file).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        let damaged = dir.path().join("damaged.ckpt");
        std::fs::write(&damaged, &bytes).expect("write");
        let err = import(&damaged, &b, "feed-a").expect_err("damaged");
        assert!(matches!(err, CheckpointError::Checksum { .. }), "{err}");
        assert!(!b.exists());
        assert!(!dir.path().join("b.importing").exists());

        // A leftover of an interrupted import is in the way until removed.
        std::fs::create_dir(dir.path().join("b.importing")).expect("mkdir");
        let err = import(&file, &b, "feed-a").expect_err("in the way");
        assert!(
            matches!(err, CheckpointError::ImportInProgress { .. }),
            "{err}"
        );
        assert!(!b.exists());
    }

    #[test]
    fn export_is_refused_while_a_large_transaction_is_applied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(&dir.path().join("a"));
        let marker = ApplyingMarker {
            checkpoint: Checkpoint {
                position: 90,
                cursor: 9,
            },
            generation: 4,
        };
        let db = &stage.db;
        db.put_cf(
            stage.cf(CF_PENDING),
            0u64.to_be_bytes(),
            postcard::to_allocvec(&vec![upsert(7, "d7", 90)]).expect("encode"),
        )
        .expect("chunk");
        db.put_cf(
            stage.cf(CF_META),
            META_APPLYING,
            postcard::to_allocvec(&marker).expect("encode"),
        )
        .expect("marker");
        db.put_cf(stage.cf(CF_META), META_GENERATION, 4u64.to_be_bytes())
            .expect("generation");
        let file = dir.path().join("a.ckpt");
        let err = export(&stage, &file).expect_err("applying");
        assert!(matches!(err, CheckpointError::Applying { .. }), "{err}");
        assert!(!file.exists() && !dir.path().join("a.ckpt.tmp").exists());
        let summary = summary(&stage).expect("summary");
        assert!(summary.applying);
        assert_eq!(summary.pending_chunks, 1);
        let report = check(&stage).expect("check");
        assert!(report.is_healthy(), "{:?}", report.problems);
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    }

    #[test]
    fn check_names_each_kind_of_inconsistency() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(&dir.path().join("a"));
        let db = &stage.db;
        let cf = |name| stage.cf(name);
        // A row whose keys entry is gone, a keys entry without its row, a dirty mark
        // without a generation, a generation above the counter, a row that does not
        // decode, and leftover pending chunks (a warning only).
        db.delete_cf(cf(CF_KEYS), table_key(TABLE, &key(1)))
            .expect("delete");
        db.put_cf(cf(CF_KEYS), table_key(TABLE, &key(8)), p("d1").to_bytes())
            .expect("put");
        db.put_cf(
            cf(CF_DIRTY),
            partition_key(TABLE, &p("d5")),
            1u64.to_be_bytes(),
        )
        .expect("put");
        db.put_cf(
            cf(CF_GENERATIONS),
            partition_key(TABLE, &p("d6")),
            99u64.to_be_bytes(),
        )
        .expect("put");
        db.put_cf(cf(CF_ROWS), row_key(TABLE, &p("d3"), &key(2)), b"\xff\xff")
            .expect("put");
        db.put_cf(cf(CF_PENDING), 0u64.to_be_bytes(), b"\x00")
            .expect("put");
        let report = check(&stage).expect("check");
        let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
        let has = |needle: &str| text.iter().any(|t| t.contains(needle));
        assert!(has("no keys entry"), "{text:#?}");
        assert!(has("which has no such row"), "{text:#?}");
        assert!(has("is dirty but has no generation"), "{text:#?}");
        assert!(has("above the counter"), "{text:#?}");
        assert!(has("does not decode"), "{text:#?}");
        assert_eq!(report.problems.len(), 5, "{text:#?}");
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.description.contains("leftover pending chunks")),
            "{:?}",
            report.warnings
        );

        // Rows without a position.
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(dir.path());
        stage
            .db
            .delete_cf(stage.cf(CF_POSITION), POSITION_KEY)
            .expect("delete");
        let report = check(&stage).expect("check");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.family == CF_POSITION && p.description.contains("no position")),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn many_problems_of_one_kind_are_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = Stage::open(dir.path(), "feed-a").expect("open");
        for id in 0..25 {
            stage
                .db
                .put_cf(
                    stage.cf(CF_KEYS),
                    table_key(TABLE, &key(id)),
                    p("d1").to_bytes(),
                )
                .expect("put");
        }
        let report = check(&stage).expect("check");
        assert_eq!(report.problems.len(), 11, "{:?}", report.problems);
        assert!(
            report.problems[10]
                .description
                .contains("15 more problems of this kind"),
            "{:?}",
            report.problems[10]
        );
    }

    #[test]
    fn summary_counts_what_is_staged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stage = sample_stage(&dir.path().join("a"));
        let s = summary(&stage).expect("summary");
        assert_eq!(s.format_version, FORMAT_VERSION);
        assert_eq!(s.source_id.as_deref(), Some("feed-a"));
        assert_eq!(s.checkpoint.map(|c| c.position), Some(40));
        assert_eq!(s.rows.get(TABLE), Some(&3));
        assert_eq!(
            s.dirty
                .iter()
                .map(|d| d.partition.as_str())
                .collect::<Vec<_>>(),
            ["__null__", "d1", "d2", "d3"]
        );
        assert_eq!(s.dead_letters, 1);
        assert!(!s.applying);
        assert!(s.size_bytes > 0);
    }

    #[test]
    fn a_damaged_table_file_is_a_named_problem_and_a_damaged_open_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a");
        let stage = sample_stage(&path);
        stage.flush().expect("flush");
        drop(stage);
        let largest = std::fs::read_dir(&path)
            .expect("ls")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "sst"))
            .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .expect("an sst file after a flush");
        let mut bytes = std::fs::read(&largest).expect("read");
        let len = bytes.len();
        bytes.truncate(len - 100);
        std::fs::write(&largest, &bytes).expect("write");
        let err = Stage::open_read_only(&path).expect_err("damaged");
        assert!(err.to_string().contains("the stage is damaged"), "{err}");
        let err = Stage::open(&path, "feed-a").expect_err("damaged");
        assert!(err.to_string().contains("the stage is damaged"), "{err}");
    }
}
