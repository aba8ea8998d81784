//! What can go wrong with the stage, and the advice each failure carries.

use std::path::PathBuf;

use rocksdb::ErrorKind;

use super::layout::FORMAT_VERSION;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("cannot create the stage folder {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write or remove {}, a file of a first load being staged: check the stage folder's free space and permissions, then run again", path.display())]
    LoadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Injected(#[from] crate::faults::InjectedFault),
    #[error("cannot open the stage at {}: {hint}", path.display())]
    Open {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error(
        "the stage is damaged (RocksDB found corruption while trying to {what}): restore it with `weir checkpoint import` from an export into a new stage path, or rebuild it from the feed into a new stage path"
    )]
    Damaged {
        what: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("stage operation failed ({what}){}", resource_hint(.source))]
    Db {
        what: &'static str,
        #[source]
        source: rocksdb::Error,
    },
    #[error("the stage at {} has format version {found}, newer than this build's {FORMAT_VERSION}: run a newer weir", path.display())]
    NewerFormat { path: PathBuf, found: u32 },
    #[error("the stage at {} was filled from `{staged}`, but the config reads `{configured}`: a stage belongs to one feed. If the config was changed by mistake (a slot renamed, a path), put `{staged}` back; a new feed needs a new stage path (and reads its tables anew: `weir init --take-over` if the old pipeline's slot or file is retired)", path.display())]
    SourceMismatch {
        path: PathBuf,
        staged: String,
        configured: String,
    },
    #[error("the stage at {} does not exist: run `weir init` first", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read the stage at {}: run Weir as the user that owns it, or give this user access to it", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the stage at {} was written by an older weir and lacks its `{family}` records: run `weir init` once (it adds them), then retry",
        path.display()
    )]
    NeedsUpgrade { path: PathBuf, family: &'static str },
    #[error(
        "stage record is corrupt ({what}): run `weir checkpoint check`; restore the stage from an export or rebuild it from the feed"
    )]
    Corrupt { what: String },
    #[error(
        "a large transaction is being applied to the stage; its partitions become readable when it commits"
    )]
    Applying,
    #[error(
        "{table}: a change leaves column `{column}` unchanged (an unchanged TOAST value: PostgreSQL's, or Debezium's `__debezium_unavailable_value` in a JSON-lines feed) for a row that is not staged, so its value is unknown; nothing past this transaction was acknowledged or staged. A PostgreSQL source: set REPLICA IDENTITY FULL on the source table (later changes then carry whole rows); to get past the changes already in the WAL, take the table out of the config (keep another table of the publication in it if it was the only one) and run `weir init` and `weir run --once` (its changes are passed over), then put it back and run `weir init`: the next `weir run` reads it whole again. A JSON-lines feed: the row's whole image must come first (Debezium's snapshot of the table, an `r` or `c` line); fix or remove this line in the feed (for stdin, pipe the feed again without it) and run again: it stops the run whatever `on_bad_record` says, since what is missing is in the stage, not in the line"
    )]
    UnchangedWithoutRow { table: String, column: String },
    #[error(
        "{table}: an INSERT, or an UPDATE that changed a row's key, arrived for a key the stage already holds, so the configured key is not unique in the source (a REPLICA IDENTITY FULL table without a unique index on it, or whose key constraint was dropped) and its rows would be merged: nothing past this transaction was acknowledged. Make the key unique (`CREATE UNIQUE INDEX` on its columns names a duplicate if it is not), or key the table by columns that are unique, with a new stage"
    )]
    InsertOfStagedKey { table: String },
}

pub(super) fn db_err(what: &'static str) -> impl FnOnce(rocksdb::Error) -> StageError {
    move |source| {
        if source.kind() == rocksdb::ErrorKind::Corruption {
            StageError::Damaged { what, source }
        } else {
            StageError::Db { what, source }
        }
    }
}

/// A row key that does not decode is a damaged record.
impl From<weir_core::feed::BadKey> for StageError {
    fn from(_: weir_core::feed::BadKey) -> Self {
        corrupt("encoded key")
    }
}

pub(super) fn corrupt(what: impl Into<String>) -> StageError {
    StageError::Corrupt { what: what.into() }
}

/// The hint of a stage that RocksDB reports as damaged when it opens it.
pub const DAMAGED_HINT: &str = "the stage is damaged (RocksDB reports corruption in its files): restore it with `weir checkpoint import` from an export into a new stage path, or rebuild it from the feed into a new stage path";

/// The hint of [`StageError::Open`]: the damaged-stage advice when RocksDB reports
/// corruption; what the system said of the folder (full, read-only, not this user's)
/// when it said so; `otherwise` else.
pub(super) fn open_hint(error: &rocksdb::Error, otherwise: &'static str) -> &'static str {
    let text = error.to_string();
    if error.kind() == ErrorKind::Corruption {
        DAMAGED_HINT
    } else if text.contains("No space left on device") {
        "its disk is full: free space on it (nothing staged is lost), then run again"
    } else if text.contains("Read-only file system") {
        "its file system is mounted read-only: remount it read-write, or move the stage (`weir checkpoint export`/`import`)"
    } else if text.contains("Permission denied") {
        "this user may not write it: run Weir as the user that owns the stage folder, or give this user access to it"
    } else if text.contains("Too many open files") {
        TOO_MANY_FILES
    } else {
        otherwise
    }
}

const TOO_MANY_FILES: &str = "this process may not open more files (its open-files limit is too low for the stage's table files): raise it (`ulimit -n 65536`, systemd's `LimitNOFILE=`), then run again; nothing staged is lost";

/// What a stage operation that failed for want of a resource (disk space, open files)
/// needs before a run is tried again: `": …"`, or nothing.
fn resource_hint(error: &rocksdb::Error) -> String {
    let text = error.to_string();
    let hint = if text.contains("No space left on device") {
        "the stage's disk is full: free space on it, then run again (nothing staged or acknowledged is lost; a large transaction or first load passes through the stage's log and table files, so leave room for a few times what it adds)"
    } else if text.contains("Too many open files") {
        TOO_MANY_FILES
    } else {
        return String::new();
    };
    format!(": {hint}")
}

/// Whether a stage exists at `path` (its `CURRENT` file); a folder this user may not
/// read is said so, not taken for a missing stage.
pub fn stage_exists(path: &std::path::Path) -> Result<bool, StageError> {
    match std::fs::metadata(path.join("CURRENT")) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StageError::Unreadable {
            path: path.to_owned(),
            source,
        }),
    }
}
