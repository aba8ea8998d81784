//! Decoder of PostgreSQL's `pgoutput` logical replication messages, protocol versions 1
//! and 2.
//!
//! [`decode`] takes the bytes of one pgoutput message: the payload of a replication
//! `XLogData` (`'w'`) message after its 24-byte header, or one `data` value returned by
//! `pg_logical_slot_peek_binary_changes`. The formats are those of PostgreSQL's
//! "Logical Replication Message Formats" (protocol-logicalrep-message-formats).
//!
//! Guarantees:
//! * **Never panics**, on any byte sequence. Every read goes through a cursor with
//!   checked reads; there is no slicing that can panic, no unchecked arithmetic on
//!   lengths, no `unwrap` (enforced by the lints on
//!   [`crate::pg`]). A declared
//!   count or length is checked against the bytes that remain *before* anything is
//!   allocated, so memory use is bounded by the input's length (a few tens of bytes
//!   per input byte at most), however large the declared counts.
//! * **Errors locate the problem**: a [`DecodeError`] names the message type, the field
//!   and the byte offset (from the message's first byte, the type tag, at offset 0).
//! * **Errors hold no payload bytes**: neither row values nor message contents, which
//!   may be personal data. At most they show one protocol byte (a message tag, a tuple
//!   column kind, a marker) and declared lengths. The `Debug` forms of [`TupleValue`]
//!   and [`LogicalMessage`] show lengths, not contents, for the same reason.
//! * **Strict**: a message decodes whole or not at all. Bytes after the last field are
//!   an error ([`DecodeError::TrailingBytes`]), and so is a flag bit the protocol does
//!   not define: both mean the stream is not what we think it is (another protocol
//!   version, or a framing bug), and guessing would silently lose meaning. Hence
//!   decoding is injective: re-encoding a decoded message gives back the input bytes.
//!
//! Protocol version 2 streams large in-progress transactions in blocks between Stream
//! Start and Stream Stop; inside such a block Relation, Type, Insert, Update, Delete,
//! Truncate and Message carry an xid first. Which layout applies depends on the
//! position in the stream, so [`decode`] is told `in_stream`, and [`Decoder`] tracks it
//! from the messages it decodes. A message that cannot appear where it is (a Begin
//! inside a block, a Stream Stop outside one) is [`DecodeError::OutOfPlace`].
//!
//! Out of scope: the two-phase messages of version 3 (`b`, `P`, `K`, `r`, `p`) are
//! unknown messages, and version 4's Stream Abort (with abort LSN and timestamp) has
//! trailing bytes. Weir asks for `proto_version` 1 or 2 and never receives them.

mod cursor;
mod decode;
mod message;

pub use decode::{DecodeError, Decoder, decode};
pub use message::*;

/// Test-only: short constructors for messages built by hand, shared by the decoder's
/// own tests and the engine's tests against real PostgreSQL bytes.
#[cfg(any(test, feature = "test-support"))]
pub mod build {
    use super::{RelationColumn, TupleValue};

    /// A column value in text format.
    pub fn text(s: &str) -> TupleValue {
        TupleValue::Text(s.as_bytes().to_vec())
    }

    /// A relation's column.
    pub fn col(is_key: bool, name: &str, type_oid: u32, type_modifier: i32) -> RelationColumn {
        RelationColumn {
            is_key,
            name: name.to_owned(),
            type_oid,
            type_modifier,
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests;
