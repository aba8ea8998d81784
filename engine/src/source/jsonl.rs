//! Debezium-envelope JSON lines, from a file or stdin.
//!
//! One envelope per line: `op` (`c`, `u`, `d`, `r`), `before`, `after`, `source` (with
//! `schema` and `table`, optional `txId`, `lsn`, `ts_ms`) and `ts_ms`. An envelope
//! wrapped as `{"schema": …, "payload": {…}}` (Debezium's JSON converter with schemas
//! on) is unwrapped. Consecutive lines sharing a `txId` form one transaction; a line
//! without `txId` is a transaction of its own; the end of the input ends a transaction.
//! Blank lines are not records and are passed over. Each line is decoded on its own by
//! [`super::envelope`]; this module reads the feed and groups lines into transactions.
//!
//! The source position is the byte offset just past a transaction's last line. On
//! restart the first `position` bytes are passed over without being parsed: a file is
//! seeked, stdin is read and discarded (pipe the same feed again to resume).
//!
//! **Architecture Invariant**: a feed is resumed only if it is the feed the stage was
//! filled from. Each transaction is staged with the feed's [`Fingerprint`] (the stage's
//! source state): a hash of the feed's first bytes and of the last bytes before the
//! transaction's end. A restart compares them with the feed's bytes at those places
//! (read from the file, or seen while stdin's first `position` bytes are passed over)
//! and stops, naming the feed, if they differ: a rotated, replaced or rewritten file, or
//! stdin piped without the part already staged, would otherwise be resumed at a byte
//! offset of another feed, and its first records skipped silently.
//!
//! Read live from stdin, a feed that pauses is staged up to the pause: after
//! [`STDIN_IDLE_MS`] without input, the transactions read are handed on.
//!
//! A line that cannot be decoded (not UTF-8, not JSON, unknown op, unknown table or
//! column, a value of the wrong type or one that does not fit its column, a bare epoch
//! number with no unit known, a missing key, a rejected NULL partition key) is
//! a bad record: with `on_bad_record = "fail"` the source stops there and nothing from
//! that line's transaction on is delivered; with `"dead-letter"` the record travels
//! with its transaction to `weir.dead_letter`. Parsing never panics.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncSeekExt, BufReader};

use super::envelope::{BadLine, TxId, decode_line};
use super::{BadRecord, ChangeSource, Position, SourceError, SourceEvent, Transaction};
use crate::config::{OnBadRecord, TableConfig};
use crate::feed::StageChange;
use crate::limits::TRANSACTION_CHUNK_BYTES;

/// Longest line accepted. Bounds the memory one record can take; a longer line is a
/// bad record, read and kept in bounded pieces only up to this size.
pub const LINE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The largest line buffer kept from one line for the next.
const LINE_BUFFER_KEPT_BYTES: usize = 1024 * 1024;

/// How long a tailed file is left alone after reaching its end before it is read again.
const FOLLOW_POLL_MS: u64 = 200;

/// How long live stdin may stay silent before what was read of it is staged.
pub const STDIN_IDLE_MS: u64 = 50;

/// How many of a feed's first bytes identify it ([`Fingerprint`]) ...
const HEAD_BYTES: usize = 4096;
/// ... and how many of the bytes just before a transaction's end.
const TAIL_BYTES: usize = 256;

/// What identifies the bytes of a feed up to a transaction's end, staged with it as
/// the stage's source state: the SHA-256 of the feed's first `head_len` bytes and of
/// the `tail_len` bytes that end at the position.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    head_len: u32,
    head: [u8; 32],
    tail_len: u32,
    tail: [u8; 32],
}

impl Fingerprint {
    const MAGIC: &'static [u8] = b"weir-jsonl-1";

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::MAGIC.len() + 72);
        out.extend_from_slice(Self::MAGIC);
        out.extend_from_slice(&self.head_len.to_le_bytes());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.tail_len.to_le_bytes());
        out.extend_from_slice(&self.tail);
        out
    }

    /// `None` for a state that is not a fingerprint (none was staged).
    fn decode(bytes: &[u8]) -> Option<Fingerprint> {
        let rest = bytes.strip_prefix(Self::MAGIC)?;
        if rest.len() != 72 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap_or_default());
        Some(Fingerprint {
            head_len: u32_at(0),
            head: rest[4..36].try_into().ok()?,
            tail_len: u32_at(36),
            tail: rest[40..72].try_into().ok()?,
        })
    }
}

/// The feed's first bytes as far as they were read, and the hash of a prefix of them.
#[derive(Debug, Default)]
struct Head {
    bytes: Vec<u8>,
    hashed: Option<(usize, [u8; 32])>,
}

impl Head {
    /// Appends the bytes of a line that starts at `start`, while they extend the head.
    fn extend(&mut self, start: u64, line: &[u8]) {
        if start == self.bytes.len() as u64 && self.bytes.len() < HEAD_BYTES {
            let take = line.len().min(HEAD_BYTES - self.bytes.len());
            self.bytes.extend_from_slice(&line[..take]);
        }
    }

    /// The length and hash of the head up to `end` (as far as it is known).
    fn hash_to(&mut self, end: u64) -> (usize, [u8; 32]) {
        let len = self
            .bytes
            .len()
            .min(usize::try_from(end).unwrap_or(usize::MAX));
        match self.hashed {
            Some((hashed, hash)) if hashed == len => (len, hash),
            _ => {
                let hash = Sha256::digest(&self.bytes[..len]).into();
                self.hashed = Some((len, hash));
                (len, hash)
            }
        }
    }
}

/// A JSON-lines change feed.
pub struct JsonlSource {
    feed: String,
    reader: BufReader<Box<dyn AsyncRead + Unpin + Send>>,
    /// Keep reading a file past its end (`weir run` without `--once`).
    follow: bool,
    /// A followed file's path and the identity (device, inode) of the file opened: at
    /// its end, a path that names another file (rotated, replaced) stops the source.
    followed: Option<(PathBuf, (u64, u64))>,
    /// A followed file's last bytes read when its end was reached, checked before
    /// reading on ([`follow`]).
    tail_at_end: Option<follow::Tail>,
    /// The offset at which the end of a followed file was reached after its path came
    /// to name another file or none: the end is read again once before the source
    /// stops, for what its writer appended since.
    rotated_at: Option<u64>,
    /// The feed is stdin.
    stdin: bool,
    /// Bad records sent to the dead-letter table by this run (see
    /// [`JsonlSource::log_bad_record`]).
    bad_records: u64,
    /// Live stdin: hand on what was read when it pauses ([`STDIN_IDLE_MS`]).
    stdin_live: bool,
    /// A file read to its end once (`--once`): a last line without its line break may
    /// still be being written.
    last_line_may_grow: bool,
    /// The feed's first bytes, for the [`Fingerprint`] staged with each transaction.
    head: Head,
    /// The last bytes of the pending transaction's last line.
    pending_tail: Vec<u8>,
    tables: Vec<TableConfig>,
    on_bad_record: OnBadRecord,
    /// Byte offset of the next unread byte.
    offset: u64,
    /// Lines read so far (the next line is `line + 1`).
    line: u64,
    /// A line read up to the end of input without its newline yet.
    partial: Vec<u8>,
    pending: Option<(TxId, Transaction)>,
    /// Whether chunks of the pending transaction were handed out already.
    pending_chunked: bool,
    /// About the bytes the pending transaction's changes hold in memory.
    pending_bytes: usize,
    /// A pending transaction hands out its changes in chunks of this many.
    chunk_changes_max: usize,
    ready: VecDeque<Result<SourceEvent, SourceError>>,
    ended: bool,
}

impl std::fmt::Debug for JsonlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlSource")
            .field("feed", &self.feed)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl JsonlSource {
    /// Opens the feed (`None`: stdin) and positions it just past `checkpoint`, after
    /// checking that it is the feed whose fingerprint the stage holds (`state`).
    pub async fn open(
        path: Option<PathBuf>,
        follow: bool,
        tables: Vec<TableConfig>,
        on_bad_record: OnBadRecord,
        checkpoint: Option<Position>,
        state: Option<&[u8]>,
        chunk_changes_max: usize,
    ) -> Result<JsonlSource, SourceError> {
        let checkpoint = checkpoint.unwrap_or_default();
        let mut fingerprint = state
            .and_then(Fingerprint::decode)
            .filter(|_| checkpoint.position > 0);
        // The bytes a fingerprint covers, as the feed holds them now.
        let mut head = Vec::new();
        let mut tail = Vec::new();
        let mut followed = None;
        let head_wanted = usize::try_from(checkpoint.position)
            .unwrap_or(usize::MAX)
            .min(HEAD_BYTES);
        let (feed, reader): (String, Box<dyn AsyncRead + Unpin + Send>) = match &path {
            Some(p) => {
                let feed = p.display().to_string();
                let io = |source| SourceError::Io {
                    feed: feed.clone(),
                    source,
                };
                // Before opening: opening a named pipe blocks until a writer opens
                // it, and takes that writer's records.
                refuse_unseekable(p)?;
                let mut file = tokio::fs::File::open(p).await.map_err(io)?;
                let metadata = file.metadata().await.map_err(io)?;
                if !metadata.is_file() {
                    return Err(SourceError::NotAFile { feed });
                }
                let len = metadata.len();
                if follow {
                    followed = Some((p.clone(), file_id(&metadata)));
                }
                if len < checkpoint.position {
                    return Err(SourceError::Truncated {
                        feed,
                        len,
                        position: checkpoint.position,
                    });
                }
                head.resize(head_wanted, 0);
                file.read_exact(&mut head).await.map_err(io)?;
                if let Some(f) = &fingerprint {
                    let tail_len = u64::from(f.tail_len).min(checkpoint.position);
                    file.seek(std::io::SeekFrom::Start(checkpoint.position - tail_len))
                        .await
                        .map_err(io)?;
                    tail.resize(tail_len as usize, 0);
                    file.read_exact(&mut tail).await.map_err(io)?;
                }
                file.seek(std::io::SeekFrom::Start(checkpoint.position))
                    .await
                    .map_err(io)?;
                (feed, Box::new(file))
            }
            None => {
                let mut stdin = tokio::io::stdin();
                // Passed over, but its first and last bytes kept for the fingerprint.
                let mut skipped = 0u64;
                let mut buf = vec![0u8; 64 * 1024];
                while skipped < checkpoint.position {
                    let want = (checkpoint.position - skipped).min(buf.len() as u64) as usize;
                    let n =
                        stdin
                            .read(&mut buf[..want])
                            .await
                            .map_err(|source| SourceError::Io {
                                feed: "stdin".into(),
                                source,
                            })?;
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    if head.len() < head_wanted {
                        let take = n.min(head_wanted - head.len());
                        head.extend_from_slice(&chunk[..take]);
                    }
                    tail.extend_from_slice(chunk);
                    if tail.len() > 2 * TAIL_BYTES {
                        tail.drain(..tail.len() - TAIL_BYTES);
                    }
                    skipped += n as u64;
                }
                if skipped == 0 && checkpoint.position > 0 {
                    // Nothing piped (`< /dev/null`): nothing to read or check, and
                    // what is staged but not written yet is written.
                    tracing::info!(
                        "stdin is empty: nothing new is read; what is staged and not written yet is written"
                    );
                    fingerprint = None;
                } else if skipped < checkpoint.position {
                    return Err(SourceError::Truncated {
                        feed: "stdin".into(),
                        len: skipped,
                        position: checkpoint.position,
                    });
                }
                ("stdin".to_owned(), Box::new(stdin))
            }
        };
        if let Some(f) = &fingerprint {
            let head_len = (f.head_len as usize).min(head.len());
            let tail_len = (f.tail_len as usize).min(tail.len());
            let same_head = head_len == f.head_len as usize
                && <[u8; 32]>::from(Sha256::digest(&head[..head_len])) == f.head;
            let same_tail = tail_len == f.tail_len as usize
                && <[u8; 32]>::from(Sha256::digest(&tail[tail.len() - tail_len..])) == f.tail;
            if !same_head || !same_tail {
                return Err(SourceError::NotTheFeed {
                    feed,
                    position: checkpoint.position,
                    part: if same_head {
                        "the line that ends there differs"
                    } else {
                        "its first bytes differ"
                    },
                });
            }
        }
        if path.is_none() && checkpoint.position > 0 && fingerprint.is_some() {
            tracing::info!(
                bytes = checkpoint.position,
                lines = checkpoint.cursor,
                "stdin: the feed's first lines are staged already and were passed over; going on after them"
            );
        }
        Ok(JsonlSource {
            feed,
            reader: BufReader::with_capacity(256 * 1024, reader),
            follow: follow && path.is_some(),
            followed,
            tail_at_end: None,
            rotated_at: None,
            stdin: path.is_none(),
            bad_records: 0,
            stdin_live: follow && path.is_none(),
            // stdin is never followed: its end is its producer's (whose last line may
            // have been cut short).
            last_line_may_grow: !follow || path.is_none(),
            head: Head {
                bytes: head,
                hashed: None,
            },
            pending_tail: Vec::new(),
            tables,
            on_bad_record,
            offset: checkpoint.position,
            line: checkpoint.cursor,
            partial: Vec::new(),
            pending: None,
            pending_chunked: false,
            pending_bytes: 0,
            chunk_changes_max: chunk_changes_max.max(1),
            ready: VecDeque::new(),
            ended: false,
        })
    }

    /// Reads up to the end of one line into `self.partial`. Returns whether a whole
    /// line is there (`false`: the input ended first), and how many bytes of an
    /// over-long line were read past the kept prefix and dropped.
    async fn read_line(&mut self) -> Result<(bool, u64), SourceError> {
        let io = |source| SourceError::Io {
            feed: self.feed.clone(),
            source,
        };
        let budget = (LINE_BYTES_MAX + 1).saturating_sub(self.partial.len()) as u64;
        (&mut self.reader)
            .take(budget)
            .read_until(b'\n', &mut self.partial)
            .await
            .map_err(io)?;
        if self.partial.ends_with(b"\n") {
            return Ok((true, 0));
        }
        if self.partial.len() > LINE_BYTES_MAX {
            // Too long to keep: drop the rest of the line, in bounded pieces.
            let mut dropped = 0u64;
            let mut chunk = Vec::with_capacity(64 * 1024);
            loop {
                chunk.clear();
                let n = (&mut self.reader)
                    .take(64 * 1024)
                    .read_until(b'\n', &mut chunk)
                    .await
                    .map_err(io)?;
                dropped += n as u64;
                if n == 0 || chunk.ends_with(b"\n") {
                    return Ok((true, dropped));
                }
            }
        }
        // The input ended. A tailed file may still be growing: keep the partial line for
        // the next read. Otherwise a last line without a newline is a whole line.
        Ok((!self.follow && !self.partial.is_empty(), 0))
    }

    fn handle_line(&mut self, raw: &[u8], start: u64) {
        let line_no = self.line;
        let end = self.offset;
        self.head.extend(start, raw);
        let body = raw.strip_suffix(b"\n").unwrap_or(raw);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        // A UTF-8 byte-order mark opening the feed (Windows tools write one) is no part
        // of its first record.
        let body = match start {
            0 => body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body),
            _ => body,
        };
        if body.iter().all(u8::is_ascii_whitespace) && raw.len() <= LINE_BYTES_MAX {
            return;
        }
        let decoded = if raw.len() > LINE_BYTES_MAX {
            Err(BadLine::unknown(format!(
                "line is longer than {LINE_BYTES_MAX} bytes"
            )))
        } else {
            decode_line(&self.tables, body, end)
        };
        match decoded {
            // A record of no change (a tombstone, transaction metadata): as a blank line.
            Ok(None) => {}
            Ok(Some(line)) => {
                self.start_or_join(&line.tx_id);
                if let Some((_, txn)) = self.pending.as_mut() {
                    self.pending_bytes += line
                        .changes
                        .iter()
                        .map(StageChange::approx_bytes)
                        .sum::<usize>();
                    txn.changes.extend(line.changes);
                    txn.end = end;
                    txn.cursor = line_no;
                    set_tail(&mut self.pending_tail, raw);
                    if txn.changes.len() >= self.chunk_changes_max
                        || self.pending_bytes >= TRANSACTION_CHUNK_BYTES
                    {
                        self.pending_bytes = 0;
                        // A large transaction: hand its changes out now, to the stage's
                        // pending area, rather than hold them all.
                        let chunk = std::mem::take(&mut txn.changes);
                        self.ready.push_back(Ok(SourceEvent::Chunk(chunk)));
                        self.pending_chunked = true;
                    }
                }
                if line.tx_id.is_none() {
                    self.close_pending();
                }
            }
            Err(_)
                if self.last_line_may_grow
                    && !raw.ends_with(b"\n")
                    && raw.len() <= LINE_BYTES_MAX
                    && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() =>
            {
                // A last line without its line break that is not whole JSON (an
                // over-long line or a whole object with a bad value is a bad record):
                // a file's writer may be writing it; stdin's producer stopped in its
                // middle. It is left for the next run, with the transaction it may
                // belong to (nothing of which is staged); never a bad record, whose
                // offset would be inside the line the next run is given whole.
                self.pending = None;
                if std::mem::take(&mut self.pending_chunked) {
                    self.ready.push_back(Ok(SourceEvent::Abort));
                }
                if self.stdin {
                    self.ready
                        .push_back(Err(SourceError::StdinCutMidLine { line: line_no }));
                } else {
                    tracing::warn!(
                        feed = %self.feed,
                        line = line_no,
                        "the feed's last line has no line break and is not a whole record yet: it is left for the next run"
                    );
                }
                self.ended = true;
            }
            Err(bad) => match self.on_bad_record {
                OnBadRecord::Fail => {
                    // The pending transaction is whole if the bad line belongs to another
                    // one; if that cannot be told, it may be incomplete: drop it, so
                    // nothing from it on is staged or acknowledged.
                    let pending_is_whole = bad.tx_known
                        && (bad.tx_id.is_none()
                            || self
                                .pending
                                .as_ref()
                                .is_some_and(|(tx, _)| *tx != bad.tx_id));
                    if pending_is_whole {
                        self.close_pending();
                    } else {
                        self.pending = None;
                        if std::mem::take(&mut self.pending_chunked) {
                            self.ready.push_back(Ok(SourceEvent::Abort));
                        }
                    }
                    self.ready.push_back(Err(SourceError::BadRecord {
                        feed: self.feed.clone(),
                        line: line_no,
                        reason: bad.reason,
                    }));
                    self.ended = true;
                }
                OnBadRecord::DeadLetter => {
                    let record = BadRecord {
                        position: start,
                        line: Some(line_no),
                        table: bad.table,
                        reason: bad.reason,
                        raw: raw.to_vec(),
                    };
                    self.log_bad_record(line_no, &record.reason);
                    match (bad.tx_known, bad.tx_id) {
                        (true, tx) => self.start_or_join(&tx),
                        (false, _) if self.pending.is_none() => self.start_or_join(&None),
                        (false, _) => {}
                    }
                    let standalone = self.pending.as_ref().is_some_and(|(tx, _)| tx.is_none());
                    if let Some((_, txn)) = self.pending.as_mut() {
                        txn.bad_records.push(record);
                        txn.end = end;
                        txn.cursor = line_no;
                        set_tail(&mut self.pending_tail, raw);
                    }
                    if standalone {
                        self.close_pending();
                    }
                }
            },
        }
    }

    /// Makes the pending transaction the one of `tx_id`, closing another one.
    fn start_or_join(&mut self, tx_id: &TxId) {
        let joins =
            matches!(&self.pending, Some((pending, _)) if pending.is_some() && pending == tx_id);
        if !joins {
            self.close_pending();
            self.pending = Some((tx_id.clone(), Transaction::default()));
        }
    }

    fn close_pending(&mut self) {
        if let Some((_, mut txn)) = self.pending.take() {
            if txn.end > 0 {
                let (head_len, head) = self.head.hash_to(txn.end);
                let fingerprint = Fingerprint {
                    head_len: head_len as u32,
                    head,
                    tail_len: self.pending_tail.len() as u32,
                    tail: Sha256::digest(&self.pending_tail).into(),
                };
                txn.changes
                    .push(StageChange::SourceState(fingerprint.encode()));
            }
            self.ready.push_back(Ok(SourceEvent::Transaction(txn)));
            self.pending_chunked = false;
            self.pending_bytes = 0;
        }
    }
}

/// A file's identity: its device and inode.
/// Keeps the last [`TAIL_BYTES`] of `line` in `tail`.
fn set_tail(tail: &mut Vec<u8>, line: &[u8]) {
    tail.clear();
    tail.extend_from_slice(&line[line.len().saturating_sub(TAIL_BYTES)..]);
}

impl ChangeSource for JsonlSource {
    async fn next(&mut self) -> Result<SourceEvent, SourceError> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return item;
            }
            if self.ended {
                return Ok(SourceEvent::End);
            }
            if self.stdin_live && self.reader.buffer().is_empty() {
                // Nothing buffered: wait a little for more, else stage what was read.
                let wait = Duration::from_millis(STDIN_IDLE_MS);
                if tokio::time::timeout(wait, self.reader.fill_buf())
                    .await
                    .is_err()
                {
                    self.close_pending();
                    if self.ready.is_empty() {
                        return Ok(SourceEvent::Idle);
                    }
                    continue;
                }
            }
            let start = self.offset - self.partial.len() as u64;
            let before = self.partial.len();
            let (complete, dropped) = self.read_line().await?;
            self.offset += (self.partial.len() - before) as u64 + dropped;
            // Read on past the end reached earlier: the bytes before it must be the
            // ones read, or these are another file's.
            if self
                .tail_at_end
                .as_ref()
                .is_some_and(|t| self.offset > t.end())
                && let Some(tail) = self.tail_at_end.take()
            {
                self.check_tail(&tail).await?;
            }
            if complete {
                self.line += 1;
                // The line's buffer is kept for the next line (unless a long line grew
                // it): growing a fresh one for every line was a dozen reallocations.
                let mut raw = std::mem::take(&mut self.partial);
                self.handle_line(&raw, start);
                raw.clear();
                if raw.capacity() <= LINE_BUFFER_KEPT_BYTES {
                    self.partial = raw;
                }
                continue;
            }
            // End of the input for now: it ends the pending transaction.
            self.close_pending();
            if !self.ready.is_empty() {
                continue;
            }
            if self.follow {
                // At the end of the file opened, with all of it handed on: if its path
                // now names another file, that file's records would never be read.
                self.at_end_of_followed().await?;
                tokio::time::sleep(Duration::from_millis(FOLLOW_POLL_MS)).await;
                return Ok(SourceEvent::Idle);
            }
            self.ended = true;
        }
    }

    async fn acknowledge(&mut self, _checkpoint: Position) -> Result<(), SourceError> {
        // A file or pipe holds nothing for us: the stage's position is the record of
        // how far the feed is consumed.
        Ok(())
    }
}

mod bad_records;
mod follow;

use follow::file_id;
pub use follow::refuse_unseekable;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::feed::StageChange;
    use std::io::Write;

    const CONFIG: &str = r#"
[source]
kind = "jsonl"
path = "feed.jsonl"
[stage]
path = "stage"
[target]
kind = "postgres"
dsn_env = "X"
[[table]]
source = "public.orders"
target = "public.t"
key = ["id"]
partition_by = "day"
grain = "day"
columns = { id = "bigint", day = "date", amount = "numeric(12,2)" }
"#;

    /// The test feed at `path`, opened at `at` (a checkpoint and the fingerprint staged
    /// with it) or at its start, not followed.
    async fn open_feed(
        path: &std::path::Path,
        mode: OnBadRecord,
        at: Option<(Position, &[u8])>,
    ) -> Result<JsonlSource, SourceError> {
        let config = Config::parse(CONFIG, std::path::Path::new("weir.toml")).expect("config");
        let (position, state) = at.map_or((None, None), |(p, s)| (Some(p), Some(s)));
        JsonlSource::open(
            Some(path.to_owned()),
            false,
            config.tables,
            mode,
            position,
            state,
            10_000,
        )
        .await
    }

    async fn run(lines: &str, mode: OnBadRecord) -> Vec<Result<Transaction, String>> {
        let mut file = tempfile::NamedTempFile::new().expect("tempfile");
        file.write_all(lines.as_bytes()).expect("write");
        let mut source = open_feed(file.path(), mode, None).await.expect("open");
        let mut out = Vec::new();
        loop {
            match source.next().await {
                Ok(SourceEvent::Transaction(t)) => out.push(Ok(t)),
                Ok(
                    SourceEvent::Chunk(_)
                    | SourceEvent::Abort
                    | SourceEvent::StreamChunk { .. }
                    | SourceEvent::StreamDiscard { .. }
                    | SourceEvent::StreamCommit(_),
                ) => panic!("no chunks at this size"),
                Ok(SourceEvent::End) => break,
                Ok(SourceEvent::Idle) => panic!("idle without follow"),
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        out
    }

    fn line(op: &str, tx: Option<u64>, id: i64, day: &str) -> String {
        let tx = tx.map(|t| format!(",\"txId\":{t}")).unwrap_or_default();
        let image = format!("{{\"id\":{id},\"day\":\"{day}\",\"amount\":\"1.50\"}}");
        let (before, after) = if op == "d" {
            (image, "null".to_owned())
        } else {
            ("null".to_owned(), image)
        };
        format!(
            "{{\"op\":\"{op}\",\"before\":{before},\"after\":{after},\"source\":{{\"schema\":\"public\",\"table\":\"orders\"{tx}}},\"ts_ms\":1}}\n"
        )
    }

    #[tokio::test]
    async fn lines_sharing_a_tx_id_form_one_transaction() {
        let feed = [
            line("c", Some(1), 1, "2026-03-01"),
            line("c", Some(1), 2, "2026-03-01"),
            line("u", None, 1, "2026-03-02"),
            line("d", Some(2), 2, "2026-03-01"),
        ]
        .concat();
        let txns: Vec<Transaction> = run(&feed, OnBadRecord::Fail)
            .await
            .into_iter()
            .map(|t| t.expect("good"))
            .collect();
        assert_eq!(txns.iter().map(row_changes).collect::<Vec<_>>(), [2, 1, 1]);
        assert_eq!(txns.last().map(|t| t.end), Some(feed.len() as u64));
        assert_eq!(txns.iter().map(|t| t.cursor).collect::<Vec<_>>(), [2, 3, 4]);
        assert!(matches!(txns[2].changes[0], StageChange::Delete { .. }));
    }

    #[tokio::test]
    async fn bad_lines_stop_the_feed_or_go_to_the_dead_letter_table() {
        let cases = [
            ("{not json\n", "malformed JSON"),
            (
                "{\"op\":\"x\",\"source\":{\"schema\":\"public\",\"table\":\"orders\"}}\n",
                "unknown op `x`",
            ),
            (
                "{\"op\":\"c\",\"after\":{\"day\":\"2026-03-01\"},\"source\":{\"schema\":\"public\",\"table\":\"orders\"}}\n",
                "missing key column `id`",
            ),
            (
                "{\"op\":\"c\",\"after\":{\"id\":1,\"day\":\"2026-03-01\"},\"source\":{\"schema\":\"public\",\"table\":\"nope\"}}\n",
                "table `public.nope` is not configured",
            ),
            (
                "{\"op\":\"c\",\"after\":{\"id\":\"x\",\"day\":\"2026-03-01\"},\"source\":{\"schema\":\"public\",\"table\":\"orders\"}}\n",
                "column `id` (bigint) in `after`: expected an integer",
            ),
            ("\u{0}\u{1}[]\n", "malformed JSON"),
            // Values that do not fit their column: never rounded by the target.
            (
                "{\"op\":\"c\",\"after\":{\"id\":3,\"day\":\"2026-03-01\",\"amount\":\"19.999\"},\"source\":{\"schema\":\"public\",\"table\":\"orders\"}}\n",
                "column `amount` (numeric(12,2)) in `after`: the value has 3 digits after the decimal point; numeric(12,2) keeps 2",
            ),
            (
                "{\"op\":\"c\",\"after\":{\"id\":3,\"day\":20513},\"source\":{\"schema\":\"public\",\"table\":\"orders\"}}\n",
                "column `day` (date) in `after`: a number for a date column without a unit",
            ),
        ];
        for (bad, want) in cases {
            let feed = format!(
                "{}{bad}{}",
                line("c", Some(1), 1, "2026-03-01"),
                line("c", None, 2, "2026-03-02")
            );
            let out = run(&feed, OnBadRecord::Fail).await;
            // The transaction before the bad line (txId 1) is delivered whole only if the
            // bad line could be told to belong to another transaction.
            let tx_readable = !want.starts_with("malformed");
            assert_eq!(out.len(), if tx_readable { 2 } else { 1 }, "{want}");
            let err = out.last().expect("an error").as_ref().expect_err("stops");
            assert!(
                err.contains(":2: ") && err.contains(want),
                "want `{want}` in {err}"
            );
            let out = run(&feed, OnBadRecord::DeadLetter).await;
            let txns: Vec<_> = out.into_iter().map(|t| t.expect("dead-lettered")).collect();
            let records: Vec<_> = txns.iter().flat_map(|t| t.bad_records.clone()).collect();
            assert_eq!(records.len(), 1, "{want}");
            assert_eq!(records[0].raw, bad.as_bytes());
            assert!(records[0].reason.contains(want), "{}", records[0].reason);
            assert_eq!(txns.iter().map(row_changes).sum::<usize>(), 2);
        }
    }

    #[tokio::test]
    async fn invalid_utf8_is_a_bad_record_not_a_panic() {
        let mut file = tempfile::NamedTempFile::new().expect("tempfile");
        file.write_all(b"{\"op\":\"c\",\xff}\n").expect("write");
        let mut source = open_feed(file.path(), OnBadRecord::Fail, None)
            .await
            .expect("open");
        let err = source.next().await.expect_err("bad utf-8");
        assert!(
            err.to_string().contains(":1: line is not valid UTF-8"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_resumed_feed_starts_after_the_checkpoint() {
        let feed = [
            line("c", None, 1, "2026-03-01"),
            line("c", None, 2, "2026-03-01"),
        ]
        .concat();
        let mut file = tempfile::NamedTempFile::new().expect("tempfile");
        file.write_all(feed.as_bytes()).expect("write");
        let first_end = line("c", None, 1, "2026-03-01").len() as u64;
        let checkpoint = Position {
            position: first_end,
            cursor: 1,
        };
        // No fingerprint staged (a stage from before them): not checked.
        let mut source = open_feed(file.path(), OnBadRecord::Fail, Some((checkpoint, &[][..])))
            .await
            .expect("open");
        let Ok(SourceEvent::Transaction(t)) = source.next().await else {
            panic!("one transaction")
        };
        assert_eq!((t.end, t.cursor), (feed.len() as u64, 2));
        assert!(matches!(source.next().await, Ok(SourceEvent::End)));
        let beyond = Position {
            position: feed.len() as u64 + 1,
            cursor: 9,
        };
        let err = open_feed(file.path(), OnBadRecord::Fail, Some((beyond, &[][..])))
            .await
            .expect_err("truncated");
        assert!(err.to_string().contains("truncated or replaced"), "{err}");
    }

    /// A transaction's changes of rows (not the feed's fingerprint).
    fn row_changes(txn: &Transaction) -> usize {
        txn.changes
            .iter()
            .filter(|c| !matches!(c, StageChange::SourceState(_)))
            .count()
    }

    /// The feed's fingerprint staged with a transaction.
    fn state_of(txn: &Transaction) -> Vec<u8> {
        txn.changes
            .iter()
            .find_map(|c| match c {
                StageChange::SourceState(s) => Some(s.clone()),
                _ => None,
            })
            .expect("a fingerprint")
    }

    async fn open_at(path: &std::path::Path, txn: &Transaction) -> Result<JsonlSource, String> {
        let at = Position {
            position: txn.end,
            cursor: txn.cursor,
        };
        open_feed(path, OnBadRecord::Fail, Some((at, &state_of(txn))))
            .await
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_rotated_or_rewritten_feed_is_refused_and_a_grown_one_resumed() {
        let first: String = (1..=3).map(|i| line("c", None, i, "2026-03-01")).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("feed.jsonl");
        std::fs::write(&path, &first).expect("write");
        let txns = run_path(&path).await;
        let last = txns.last().expect("transactions");
        assert_eq!(last.end, first.len() as u64);
        // The same feed, grown: resumed at its position.
        let more = line("c", None, 4, "2026-03-02");
        std::fs::write(&path, format!("{first}{more}")).expect("write");
        let mut source = open_at(&path, last).await.expect("the same feed");
        let Ok(SourceEvent::Transaction(t)) = source.next().await else {
            panic!("the new line")
        };
        assert_eq!(t.end, (first.len() + more.len()) as u64);
        // A rotated file (other first lines), longer than the position: refused.
        let rotated: String = (4..=9).map(|i| line("c", None, i, "2026-03-02")).collect();
        std::fs::write(&path, &rotated).expect("write");
        let err = open_at(&path, last).await.expect_err("another feed");
        assert!(
            err.contains("not the feed the stage was filled from: its first bytes"),
            "{err}"
        );
        // The same first bytes, but rewritten before the position: refused too.
        let long: String = (10..=60)
            .map(|i| line("c", None, i, "2026-03-01"))
            .collect();
        assert!(long.len() > HEAD_BYTES);
        std::fs::write(&path, &long).expect("write");
        let txns = run_path(&path).await;
        let last = txns.last().expect("transactions");
        let rewritten = long.replace(
            &line("c", None, 60, "2026-03-01"),
            &line("c", None, 66, "2026-03-01"),
        );
        assert_eq!(rewritten.len(), long.len());
        std::fs::write(&path, &rewritten).expect("write");
        let err = open_at(&path, last).await.expect_err("rewritten");
        assert!(err.contains("the line that ends there"), "{err}");
    }

    async fn run_path(path: &std::path::Path) -> Vec<Transaction> {
        let mut source = open_feed(path, OnBadRecord::Fail, None)
            .await
            .expect("open");
        let mut out = Vec::new();
        loop {
            match source.next().await.expect("good") {
                SourceEvent::Transaction(t) => out.push(t),
                SourceEvent::End => return out,
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_last_line_still_being_written_is_left_for_the_next_run() {
        let whole = line("c", Some(5), 1, "2026-03-01");
        let partial = &line("c", Some(5), 2, "2026-03-01")[..40];
        let out = run(&format!("{whole}{partial}"), OnBadRecord::DeadLetter).await;
        // Its transaction may go on in the line: nothing of it is delivered.
        assert!(out.is_empty(), "{out:?}");
        // A whole record with a bad value, or a line over the limit, is not one being
        // written: a bad record, after the transaction before it.
        let bad_value = line("c", Some(6), 2, "2026-13-45");
        let too_long = format!(
            "{{\"op\":\"c\",\"pad\":\"{}\"}}",
            "x".repeat(LINE_BYTES_MAX)
        );
        for last in [bad_value.trim_end(), too_long.as_str()] {
            let out = run(&format!("{whole}{last}"), OnBadRecord::Fail).await;
            let failed = out.last().and_then(|r| r.as_ref().err());
            assert!(failed.is_some_and(|e| e.contains(":2: ")), "{failed:?}");
        }
        // Tombstones and transaction metadata pass like blank lines.
        let feed = format!(
            "null\n{whole}{{\"status\":\"END\",\"id\":\"5\",\"event_count\":1}}\n{}",
            line("c", Some(5), 2, "2026-03-01")
        );
        let txns: Vec<_> = run(&feed, OnBadRecord::Fail)
            .await
            .into_iter()
            .map(|t| t.expect("good"))
            .collect();
        assert_eq!(txns.len(), 1);
        assert_eq!(
            txns[0]
                .changes
                .iter()
                .filter(|c| matches!(c, StageChange::Upsert { .. }))
                .count(),
            2
        );
    }
}
