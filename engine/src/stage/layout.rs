//! The stage's layout on disk: its column families, its `meta` records, and how rows,
//! keys and partitions make RocksDB keys (a row's own key is encoded by
//! `weir_core::feed::encode_key`, and read back by `decode_key` beside it).
//!
//! A `rows` key is `table | len(partition) | partition | key`; a `keys` key is
//! `table | key`; the `generations`, `dirty`, `backlog` and `changed` keys begin with
//! `table | len(partition) | partition`. `table` is a big-endian `u16` length and the
//! name; `len(partition)` a big-endian `u32`.

use super::error::{StageError, corrupt};
use crate::partition::Partition;

/// The stage format this build writes. Bump it, with an upgrade step in
/// [`super::Stage::open`], whenever a key or value layout changes, or a record is
/// added that an older build would pass over to the stage's harm: the older build then
/// refuses the stage (`NewerFormat`) instead.
///
/// * 1: the first.
/// * 2: records builds of version 1 read wrongly without a word: a table's
///   `out_of_config` mark in its contract (they resume the table, the changes passed
///   over lost), a first load's part marker (replayed over a stage that moved on), a
///   resync's hold on a table's partitions, and the feed's fingerprint past the
///   position. Same layout: a version 1 stage is marked 2 when opened for writing.
pub const FORMAT_VERSION: u32 = 2;

pub(super) const CF_ROWS: &str = "rows";
pub(super) const CF_KEYS: &str = "keys";
pub(super) const CF_GENERATIONS: &str = "generations";
pub(super) const CF_DIRTY: &str = "dirty";
pub(super) const CF_POSITION: &str = "position";
pub(super) const CF_DEAD_LETTER: &str = "dead_letter";
pub(super) const CF_META: &str = "meta";
pub(super) const CF_PENDING: &str = "pending";
/// Transactions streamed while in progress (PostgreSQL), each in its own area until it
/// commits: `xid | seq`, both big-endian, each value a chunk of changes with the xid
/// of each one's (sub)transaction. Never read before the commit; emptied at open (the
/// server sends a transaction that did not commit again, whole).
pub(super) const CF_STREAMS: &str = "streams";
/// The keys changed in each partition since it was last written: what `merge` deletes
/// and rewrites. An empty key stands for every key (a TRUNCATE): such a partition is
/// replaced. Cleared with the dirty mark, for every write mode, so switching a table
/// to `merge` never finds a partial record.
pub(super) const CF_CHANGED: &str = "changed";
/// Bytes of changes staged into each dirty partition since its last write: the
/// backlog that `[stage] max_unwritten_mb` bounds. Cleared with the dirty mark.
pub(super) const CF_BACKLOG: &str = "backlog";
pub(super) const COLUMN_FAMILIES: [&str; 11] = [
    CF_CHANGED,
    CF_BACKLOG,
    CF_PENDING,
    CF_STREAMS,
    CF_ROWS,
    CF_KEYS,
    CF_GENERATIONS,
    CF_DIRTY,
    CF_POSITION,
    CF_DEAD_LETTER,
    CF_META,
];

pub(super) const META_FORMAT_VERSION: &[u8] = b"format_version";
pub(super) const META_SOURCE_ID: &[u8] = b"source_id";
pub(super) const META_GENERATION: &[u8] = b"generation";
pub(super) const META_APPLYING: &[u8] = b"applying";
/// A first-load part being ingested: its table files and its batch (see `bulk.rs`).
pub(super) const META_LOADING: &[u8] = b"loading";
pub(super) const META_SOURCE_STATE: &[u8] = b"source_state";
/// This stage's identity, made when it was created (or first opened by a build that
/// records one): lineage names the stage that wrote a partition.
pub(super) const META_STAGE_ID: &[u8] = b"stage_id";
/// The PostgreSQL publication's row versions when last read (`PublicationMark`).
pub(super) const META_PUBLICATION_MARK: &[u8] = b"publication_mark";
/// Set once the stage claimed its target tables (`target::claims`); not exported, so a
/// stage imported from a checkpoint has not.
pub(super) const META_CLAIMED: &[u8] = b"claimed";
/// Present when the position is at or past everything this stage ever let its source
/// acknowledge (a stage made by a build that advances the position before a caught-up
/// source confirms the server's position: [`super::Stage::advance_position`]). Without it (a
/// stage of an older build) a source acknowledged ahead of the position may be legal.
pub(super) const META_POSITION_COVERS_ACKS: &[u8] = b"position_covers_acks";
/// Prefix of the records of partitions whose last write failed for good (until they
/// change): `failed\0` + the partition key.
pub(super) const META_FAILED_PREFIX: &[u8] = b"failed\0";
/// Prefix of the generation each partition was last written at, to any target:
/// `written\0` + the partition key, a big-endian u64. A merge is made only on a
/// target whose lineage holds it (or later): one written elsewhere since lacks what
/// that write covered.
pub(super) const META_WRITTEN_PREFIX: &[u8] = b"written\0";
pub(super) const POSITION_KEY: &[u8] = b"checkpoint";
/// Prefix of each table's contract: `contract\0` + the table's stage name (its
/// configured source name). JSON, so that fields can be added.
pub(crate) const META_CONTRACT_PREFIX: &[u8] = b"contract\0";

pub(super) fn push_table(out: &mut Vec<u8>, table: &str) {
    let len = u16::try_from(table.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&table.as_bytes()[..usize::from(len)]);
}

pub(super) fn split_table(key: &[u8]) -> Option<(String, &[u8])> {
    let len = usize::from(u16::from_be_bytes(key.get(..2)?.try_into().ok()?));
    let name = std::str::from_utf8(key.get(2..2 + len)?).ok()?;
    Some((name.to_owned(), &key[2 + len..]))
}

/// Splits `len(partition) | partition | rest`.
pub(super) fn split_partition(bytes: &[u8]) -> Option<(Partition, &[u8])> {
    let len = usize::try_from(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?)).ok()?;
    let partition = Partition::from_bytes(bytes.get(4..4 + len)?)?;
    Some((partition, &bytes[4 + len..]))
}

/// The first key after every key that starts with `prefix`.
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![u8::MAX; prefix.len() + 1]
}

pub(super) fn table_key(table: &str, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + table.len() + key.len());
    push_table(&mut out, table);
    out.extend_from_slice(key);
    out
}

/// `table | len(partition) | partition`: the dirty key, and the prefix of its rows.
pub(super) fn partition_key(table: &str, partition: &Partition) -> Vec<u8> {
    let mut out = Vec::new();
    push_row_key(&mut out, table, partition, &[]);
    out
}

pub(super) fn row_key(table: &str, partition: &Partition, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_row_key(&mut out, table, partition, key);
    out
}

/// Writes `row_key(table, partition, key)` into `out`, cleared first: staging builds
/// every key of a change in one reused buffer rather than allocating each.
pub(super) fn push_row_key(out: &mut Vec<u8>, table: &str, partition: &Partition, key: &[u8]) {
    out.clear();
    push_table(out, table);
    let len = u32::try_from(partition.bytes_len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    partition.push_bytes(out);
    out.extend_from_slice(key);
}

/// A big-endian `u64` record (a generation, or a backlog's bytes).
pub(super) fn decode_generation(bytes: &[u8]) -> Result<u64, StageError> {
    bytes
        .try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| corrupt("generation record"))
}

pub(super) fn be_u32(b: &[u8]) -> Option<u32> {
    b.try_into().ok().map(u32::from_be_bytes)
}

pub(super) fn be_u64(b: &[u8]) -> Option<u64> {
    b.try_into().ok().map(u64::from_be_bytes)
}

/// Splits a `generations` or `dirty` key: `table | len(partition) | partition`.
pub(super) fn split_partition_key(key: &[u8]) -> Option<(String, Partition)> {
    let (table, rest) = split_table(key)?;
    let (partition, tail) = split_partition(rest)?;
    tail.is_empty().then_some((table, partition))
}

/// Splits a `rows` key: `table | len(partition) | partition | key`.
pub(super) fn split_row_key(key: &[u8]) -> Option<(String, Partition, &[u8])> {
    let (table, rest) = split_table(key)?;
    let (partition, key) = split_partition(rest)?;
    Some((table, partition, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stage keys are stored: building them in place must give the bytes the stage has
    /// always written (the partition's tagged bytes, their length first, then the key).
    #[test]
    fn keys_built_in_place_are_the_stored_layout() {
        for partition in [
            Partition::Null,
            Partition::Key(String::new()),
            Partition::Key("2026-03-01".into()),
            Partition::Key("__null__".into()),
        ] {
            // The stored partition bytes, written out: a tag (0 NULL, 1 a name), the name.
            let p = match &partition {
                Partition::Null => vec![0],
                Partition::Key(k) => [&[1u8][..], k.as_bytes()].concat(),
            };
            assert_eq!(partition.to_bytes(), p, "{partition:?}");
            let mut want = Vec::new();
            push_table(&mut want, "public.orders");
            want.extend_from_slice(&(p.len() as u32).to_be_bytes());
            want.extend_from_slice(&p);
            assert_eq!(partition_key("public.orders", &partition), want);
            want.extend_from_slice(b"\x01key");
            assert_eq!(row_key("public.orders", &partition, b"\x01key"), want);
            let mut reused = b"stale bytes".to_vec();
            push_row_key(&mut reused, "public.orders", &partition, b"\x01key");
            assert_eq!(reused, want);
        }
    }
}
