//! What a PostgreSQL server sends, decoded without a connection: the messages of the
//! `pgoutput` logical decoding plugin ([`pgoutput`]), column values in their text form
//! ([`pgtypes`]), and WAL positions ([`lsn`]). The engine's replication client
//! (`weir::source::postgres`) feeds them the bytes it receives; the fuzz crate feeds
//! them any bytes at all.

// Mechanical enforcement of the guarantees (and of documentation) outside the tests:
// nothing here may panic on what a server sends. The tests opt out where they need to.
// (The engine's replication client, which reads the same server, carries the same
// block on `source::postgres`: lint levels do not cross crates.)
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

pub mod lsn;
pub mod pgoutput;
pub mod pgtypes;
