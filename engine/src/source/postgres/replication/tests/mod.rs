//! Tests of the replication client: pure parsing, a fake server over an in-memory pipe,
//! and a real PostgreSQL.

mod fake_server;
mod parsing;
mod postgresql;

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use postgres_protocol::message::backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::fallible_iterator::FallibleIterator;

use crate::config::{Dsn, quote_ident};
use crate::pgconn::ChannelBindingMode;

use crate::localpg::{LocalPg, LocalPgOptions, PasswordAuth};
use crate::pg::lsn::{format_lsn, parse_lsn};
use crate::pg::pgoutput::{Begin, Decoder, PgOutputMessage as M, TupleValue};
use proptest::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::io::DuplexStream;

use super::{client::*, error::*, startup::*, stream::*, wire::*};

const SCRAM_USER: &str = "weir_repl_scram";
const SCRAM_PASSWORD: &str = "Scram-Pa55word-never-shown";
const MD5_USER: &str = "weir_repl_md5";
const MD5_PASSWORD: &str = "Md5-Pa55word-never-shown";
const WRONG_PASSWORD: &str = "Wrong-Pa55word-never-shown";
/// Longest wait for anything the server should do at once.
const WAIT: Duration = Duration::from_secs(20);
const PGOUTPUT: [(&str, &str); 3] = [
    ("proto_version", "1"),
    ("publication_names", "\"pub\""),
    ("messages", "true"),
];

// ---- server messages as bytes, for every test file ------------------------------

fn xlog_data(wal_start: u64, wal_end: u64, time: i64, data: &[u8]) -> Vec<u8> {
    let mut out = vec![b'w'];
    out.extend(wal_start.to_be_bytes());
    out.extend(wal_end.to_be_bytes());
    out.extend(time.to_be_bytes());
    out.extend(data);
    out
}

fn keepalive(wal_end: u64, time: i64, reply: u8) -> Vec<u8> {
    let mut out = vec![b'k'];
    out.extend(wal_end.to_be_bytes());
    out.extend(time.to_be_bytes());
    out.push(reply);
    out
}

/// A backend frame: type byte, length, body.
fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend(u32::try_from(body.len() + 4).unwrap().to_be_bytes());
    out.extend(body);
    out
}

fn auth_request(code: u32, extra: &[u8]) -> Vec<u8> {
    frame(b'R', &[&code.to_be_bytes()[..], extra].concat())
}

fn error_frame(code: &str, message: &str) -> Vec<u8> {
    frame(
        b'E',
        format!("SERROR\0VERROR\0C{code}\0M{message}\0DKey (id)=(42)\0\0").as_bytes(),
    )
}

fn ready() -> Vec<u8> {
    frame(b'Z', b"I")
}
