//! PostgreSQL logical replication as a change source: committed transactions of
//! pgoutput messages become stage input.
//!
//! [`Assembler`] is the transport-free half: it receives decoded pgoutput messages of
//! protocol version 1 (whole committed transactions, in commit order) and turns them
//! into [`SourceEvent`]s. It keeps the relations it has seen, maps tuple values to
//! typed [`Value`]s by their column types, fills unchanged TOAST values from the row
//! image already staged for the key, and detects schema changes.
//!
//! Guarantees:
//! * a transaction's changes come out whole at its Commit, with the Commit's end LSN as
//!   the position; a transaction with more than `chunk_changes_max` changes comes out
//!   as chunks first (the stage's pending area), so no transaction is held whole;
//! * an unchanged TOAST value (`u`) is never turned into NULL: it is taken from the
//!   staged image, and a row missing there is an error naming table and column;
//! * a relation whose columns differ from the configured table's (a dropped column, a
//!   changed type) stops the source with an error naming both; an added column is
//!   staged (it reaches the target once the target has it);
//! * relations are matched to configured tables by OID (resolved at start), not by
//!   name: a renamed table (`RENAME`, `SET SCHEMA`), a table dropped and created again,
//!   or a partition of a configured table sent under its own name stops the source
//!   with an error naming it and the fix, before any of its changes is taken
//!   ([`PostgresSource`]'s `check_relation`); nothing past it is acknowledged;
//! * before streaming, [`check_estate`] refuses a publication or a key that would hide
//!   changes (operations not published, a partitioned table not published through its
//!   root, a row filter, a column list, a key that is not the replica identity);
//! * a change of any other table is passed over (the publication may hold more tables
//!   than Weir writes); a TRUNCATE of a configured table is an error
//!   (`on_truncate = "fail"`, the default) or removes all its staged rows (`"apply"`).
//!
//! # Layout
//!
//! * [`replication`]: a client of the streaming replication protocol (wire framing,
//!   startup and authentication, replication commands, the CopyBoth stream);
//! * what the server sends is decoded by the core's [`crate::pg`]: pgoutput messages,
//!   column values from their text form, LSNs;
//! * `assembler`: decoded messages into whole transactions of stage input;
//! * `streaming`: [`PostgresSource`], the stream and the assembler as a change source;
//! * `setup`: what `weir init` creates and checks (publication, slot, each table's
//!   estate);
//! * `snapshot`: the initial copy of the tables, in chunks between watermarks;
//! * `stage_port`: [`StagePort`], the calls the source makes of the stage;
//! * `error`: [`PgSourceError`].

// Mechanical enforcement of the guarantees (and of documentation) outside the tests:
// nothing here may panic on what the server sends. The tests opt out where they need to.
// (The decoders of what it sends, `weir_core::pg`, carry the same block: lint levels
// do not cross crates.)
#![deny(
    missing_docs,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod decoder_tests;
mod read;
pub mod replication;
mod resync;

// The source's own logic parses nothing the server sends byte by byte: it indexes its
// own tables and columns (by positions it found itself) and converts counts, which the
// parsers above must not. It is held to the rest of the lints.
#[allow(clippy::indexing_slicing)]
mod assembler;
// Each variant's `#[error]` message is its documentation.
#[allow(missing_docs)]
mod error;
#[allow(
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
mod load;
// Ranges of pages are indexed where they were just found.
#[allow(clippy::indexing_slicing)]
mod progress;
mod publication;
mod setup;
mod slots;
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions
)]
mod snapshot;
mod stage_port;
#[allow(clippy::indexing_slicing)]
mod streaming;
mod tuples;
mod types;

pub use crate::pg::lsn::{format_lsn, parse_lsn};
pub use assembler::{Assembler, Unstaged};
pub use error::PgSourceError;
pub use load::LoadWatch;
pub use progress::{SnapshotTable, resync_holds, snapshot_tables};
pub use publication::PublicationMark;
pub use read::{distinct_values, read_rows};
pub use resync::request_resync;
pub use resync::{database_identity, wal_position, write_server};
pub use setup::{
    Estate, SetupReport, SlotFailover, check_estate, connect, refuse_missing_tables, setup,
    source_columns, source_columns_and_unsupported, table_oid, unsupported_columns,
};
pub use slots::{HostSlot, SlotStatus, report_slot_waits, slot_on_each_host, slot_status};
pub use snapshot::{RESYNC_PREFIX, ResyncSignal};
pub use stage_port::{PortError, PreparedPart, StagePort};
pub use streaming::{PostgresSource, PostgresSourceOptions};
