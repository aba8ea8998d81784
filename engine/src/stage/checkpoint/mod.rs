//! Checkpoint tools: `weir checkpoint show | export | import | check`.
//!
//! The stage is the only durable copy of a feed that cannot be rewound, so it must be
//! inspectable ([`summary`]), verifiable ([`check`]) and movable to another machine
//! ([`export`], [`import`]).
//!
//! - `show.rs`: [`summary`], what `weir checkpoint show` prints.
//! - `format.rs`: the checkpoint file (its format is described there) and its
//!   verification.
//! - `export.rs`, `import.rs`: [`export`] and [`import`].
//! - `reader.rs`: reads of one stage snapshot, with errors naming the family.
//! - [`check`] is the stage's consistency check (`super::check`), re-exported here for
//!   `weir checkpoint check`.

mod export;
mod format;
mod import;
pub(super) mod reader;
mod show;
#[cfg(test)]
mod tests;

use std::io;
use std::path::PathBuf;

use rocksdb::ErrorKind;

use super::{FORMAT_VERSION, StageError};

pub use super::check::{CheckReport, Problem, check};
pub use super::error::DAMAGED_HINT;
pub use export::{ExportReport, export};
pub use format::{
    Counts, FILE_MAGIC, FILE_VERSION, FileSummary, MAX_RECORD_BYTES, Record, verify_file,
};
pub use import::{ImportReport, import};
pub use show::{DirtySummary, StageSummary, dir_size, summary};

fn read_hint(error: &rocksdb::Error) -> &'static str {
    if error.kind() == ErrorKind::Corruption {
        "; the stage is damaged: run `weir checkpoint check`, then restore it from an export or rebuild it from the feed"
    } else {
        ""
    }
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
        "a large transaction is being applied to the stage at {}: export again when it has committed, or wait longer with `--wait SECONDS` (a running `weir run` commits it within seconds; after a crash, the next `weir run` finishes it)", path.display()
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
