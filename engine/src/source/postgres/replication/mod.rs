//! A client of PostgreSQL's streaming replication protocol, for logical replication.
//!
//! tokio-postgres has no CopyBoth mode, so this is a small client of its own: the
//! message codec of `postgres-protocol` over a tokio TCP or Unix socket, framed in a
//! `BytesMut`. A [`ReplicationClient`] is a `replication=database` connection: it runs
//! replication commands and SQL with [`ReplicationClient::simple_query`], and
//! [`ReplicationClient::start_logical`] turns it into a [`ReplicationStream`] of
//! [`ReplicationEvent`]s (the formats are those of PostgreSQL's "Streaming Replication
//! Protocol", protocol-replication). The payload of an `XLogData` event is one message
//! of the output plugin, for `pgoutput` decoded by [`crate::pg::pgoutput`].
//!
//! Guarantees:
//! * **No secrets in errors or logs.** The DSN and the password never appear in a
//!   [`ReplicationError`], a `Debug` output or a log line. A DSN that does not parse is
//!   reported without the parser's message (which may quote it); settings problems are
//!   constant texts. A server message may name the user, the database or other
//!   identifiers, never the password, which only ever leaves this module inside an
//!   authentication message to the server (cleartext, md5 hash or SCRAM proof).
//! * **Never panics on what the server sends.** Every frame is length-checked before
//!   it is parsed: a message announcing more than [`MAX_MESSAGE_BYTES`] (1 GiB, the
//!   largest PostgreSQL itself allocates) is refused. CopyData payloads are parsed by
//!   the pure, checked [`parse_copy_data`]; the rest by `postgres-protocol`'s parser
//!   on whole frames only. Anything unexpected is a [`ReplicationError::Protocol`]
//!   naming the message type, never its contents (no row data).
//! * **Bounded memory.** The read buffer grows with the bytes actually received, at
//!   most doubling, never with an announced length alone, and is released after a
//!   large message; a result of `simple_query` is limited to [`MAX_RESULT_BYTES`].
//! * **Acknowledgement only when asked, never backwards.** The slot's confirmed flush
//!   position moves only through [`ReplicationStream::send_status`], to the `flushed`
//!   value given, and never back (a smaller value is sent as the highest one sent
//!   before). Nothing is acknowledged on its own: not on a keepalive, not at
//!   [`ReplicationStream::stop`], not when a stream is dropped. So every transaction not
//!   acknowledged is delivered again by the next `start_logical` (at-least-once).
//! * **Cancellation.** [`ReplicationStream::next`] is cancel-safe (bytes read stay
//!   buffered), so it can be raced in `tokio::select!` against a status timer. Every
//!   other async method is not: dropped part way, it leaves the connection mid-exchange,
//!   and later calls return [`ReplicationError::Unusable`] instead of misreading replies.
//! * **After an error a stream is done.** Once `next` or `send_status` fails, later
//!   calls return [`ReplicationError::Unusable`]: drop the stream and reconnect from the
//!   last acknowledged position.
//!
//! * **TLS as libpq does it.** The DSN is read by [`crate::pgconn`]: `sslmode` (TLS
//!   after an SSLRequest over TCP, never over a Unix socket), `sslrootcert`,
//!   `sslcert`/`sslkey`, with the same rustls configuration as the SQL connections.
//!   SCRAM uses SCRAM-SHA-256-PLUS (`tls-server-end-point` channel binding) when TLS is
//!   up and the server offers it, unless `channel_binding=disable`;
//!   `channel_binding=require` refuses any other authentication.
//!
//! Out of scope: `sslnegotiation=direct`, GSSAPI, SSPI and Kerberos
//! authentication, physical replication, and TCP keepalive settings (ignored).
//! `target_session_attrs=read-write` (or libpq's `primary`) skips a read-only host. A host is required (no default Unix socket directory), and so
//! is a user.

mod client;
mod error;
mod startup;
mod stream;
mod wire;

pub use client::{ReplicationClient, SystemInfo};
pub use error::ReplicationError;
pub use stream::{ReplicationEvent, ReplicationStream, parse_copy_data};
pub use wire::{MAX_MESSAGE_BYTES, MAX_RESULT_BYTES};

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
