//! A followed feed file cut or rewritten in place (`: > feed`, logrotate's
//! `copytruncate`, a writer that opens it with `O_TRUNC`): the file keeps its inode, so
//! the path check of [`super::JsonlSource`] does not see it, and reading on at the byte
//! offset reached would skip the new file's first records.
//!
//! At the end of the input the last bytes read are remembered ([`Tail::read`]); at each
//! later poll, and before any byte read after that end is handed on, they are read
//! again from the path: a file now shorter than the offset, or other bytes there, stops
//! the source. A path that names another file or none (a rotation by rename) is not a
//! cut: the file opened is read to its end, and the source stops there.

use std::io::SeekFrom;
use std::path::Path;

use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::JsonlSource;
use crate::source::SourceError;

/// How many bytes before the offset are compared.
const TAIL_BYTES: u64 = 256;

/// The bytes of a followed file just before `end`, as they were at the end of input.
#[derive(Debug)]
pub(super) struct Tail {
    end: u64,
    bytes: Vec<u8>,
}

impl Tail {
    /// The bytes of `path` before `end`; `None` if the file is shorter than `end`.
    pub(super) async fn read(path: &Path, end: u64) -> std::io::Result<Option<Tail>> {
        let from = end.saturating_sub(TAIL_BYTES);
        let mut file = tokio::fs::File::open(path).await?;
        if file.metadata().await?.len() < end {
            return Ok(None);
        }
        file.seek(SeekFrom::Start(from)).await?;
        let mut bytes = vec![0; usize::try_from(end - from).unwrap_or(0)];
        file.read_exact(&mut bytes).await?;
        Ok(Some(Tail { end, bytes }))
    }

    /// The offset these bytes end at.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// Whether `path` still holds these bytes before [`Tail::end`].
    pub(super) async fn still_in(&self, path: &Path) -> std::io::Result<bool> {
        Ok(Tail::read(path, self.end)
            .await?
            .is_some_and(|now| now.bytes == self.bytes))
    }
}

/// Whether `path` still names the file opened (`id`): `false` once it names another
/// file (rotated by a rename, replaced) or none (rotated before its new file is made,
/// removed). The file opened is then read to its end, not checked against the path.
async fn names_file(path: &Path, id: (u64, u64)) -> bool {
    match tokio::fs::metadata(path).await {
        Ok(now) => file_id(&now) == id,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

impl JsonlSource {
    /// At the end of a followed file, with all of it handed on: stops the source if
    /// its path names another file or none (whose records would never be read by
    /// following this one), once the end is reached again a poll later with nothing
    /// more appended; else remembers the bytes before the end, to check that the file
    /// is not cut in place before reading on.
    pub(super) async fn at_end_of_followed(&mut self) -> Result<(), SourceError> {
        let Some((path, id)) = self.followed.clone() else {
            return Ok(());
        };
        if !names_file(&path, id).await {
            if self.rotated_at == Some(self.offset) {
                return Err(SourceError::Rotated {
                    feed: self.feed.clone(),
                });
            }
            self.rotated_at = Some(self.offset);
            return Ok(());
        }
        match self.tail_at_end.take() {
            Some(tail) if tail.end() == self.offset => {
                self.check_tail(&tail).await?;
                self.tail_at_end = Some(tail);
            }
            _ => {
                let tail = Tail::read(&path, self.offset).await;
                self.tail_at_end = Some(self.tail_or_cut(tail)?);
            }
        }
        Ok(())
    }

    /// Stops the source if the followed file no longer holds `tail` (see [`follow`]).
    pub(super) async fn check_tail(&mut self, tail: &Tail) -> Result<(), SourceError> {
        let Some((path, id)) = &self.followed else {
            return Ok(());
        };
        if !names_file(path, *id).await {
            return Ok(());
        }
        match tail.still_in(path).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.cut()),
            Err(source) => Err(SourceError::Io {
                feed: self.feed.clone(),
                source,
            }),
        }
    }

    /// The tail read at the end of input, or the error for a file already cut.
    pub(super) fn tail_or_cut(
        &self,
        tail: std::io::Result<Option<Tail>>,
    ) -> Result<Tail, SourceError> {
        match tail {
            Ok(Some(tail)) => Ok(tail),
            Ok(None) => Err(self.cut()),
            Err(source) => Err(SourceError::Io {
                feed: self.feed.clone(),
                source,
            }),
        }
    }

    fn cut(&self) -> SourceError {
        SourceError::CutWhileFollowed {
            feed: self.feed.clone(),
            position: self.offset,
        }
    }
}

/// Refuses a feed `path` that names something other than a regular file (a named
/// pipe, a socket, a device), which cannot be resumed at a byte offset; a path that
/// does not exist (yet) is left to the open that follows.
pub fn refuse_unseekable(path: &std::path::Path) -> Result<(), SourceError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(SourceError::NotAFile {
            feed: path.display().to_string(),
        }),
        _ => Ok(()),
    }
}

pub(super) fn file_id(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}
