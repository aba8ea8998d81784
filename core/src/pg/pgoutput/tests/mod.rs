//! Tests of the decoder: literal cases and properties (real PostgreSQL bytes are the
//! engine's test, `source::postgres::decoder_tests`).

mod cases;
mod property;

use super::build::{col, text};
use super::cursor::PG_EPOCH_OFFSET_US;
use super::decode::*;
use super::*;
use proptest::prelude::*;
use std::sync::LazyLock;

use PgOutputMessage as M;
use TupleValue::{Binary, Null, Text, UnchangedToast};

/// Writes message bytes field by field, as the protocol documentation lists them.
struct W(Vec<u8>);

impl W {
    fn new(tag: u8) -> Self {
        W(vec![tag])
    }
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn i16(mut self, v: i16) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn cstr(self, s: &str) -> Self {
        self.raw(s.as_bytes()).u8(0)
    }
    fn counted(self, v: &[u8]) -> Self {
        let len = i32::try_from(v.len()).expect("test values are small");
        self.i32(len).raw(v)
    }
    fn xid(self, xid: Option<u32>) -> Self {
        match xid {
            Some(x) => self.u32(x),
            None => self,
        }
    }
    /// TupleData.
    fn tuple(self, values: &[TupleValue]) -> Self {
        let n = i16::try_from(values.len()).expect("few columns");
        values.iter().fold(self.i16(n), |w, v| match v {
            Null => w.u8(b'n'),
            UnchangedToast => w.u8(b'u'),
            Text(b) => w.u8(b't').counted(b),
            Binary(b) => w.u8(b'b').counted(b),
        })
    }
}

/// PostgreSQL's timestamp (microseconds since 2000) of a Unix one.
fn pg_time(unix_us: i64) -> i64 {
    unix_us
        .checked_sub(PG_EPOCH_OFFSET_US)
        .expect("a decodable time")
}

/// The test encoder: the inverse of [`decode`]. The xid is written when present.
fn encode(message: &PgOutputMessage) -> Vec<u8> {
    let w = W::new(message.message_type().tag());
    let w = match message {
        M::Begin(b) => w.u64(b.final_lsn).i64(pg_time(b.commit_time_us)).u32(b.xid),
        M::Commit(c) => w
            .u8(0)
            .u64(c.commit_lsn)
            .u64(c.end_lsn)
            .i64(pg_time(c.commit_time_us)),
        M::Origin(o) => w.u64(o.commit_lsn).cstr(&o.name),
        M::Relation(r) => {
            let n = i16::try_from(r.columns.len()).expect("few columns");
            let w = w
                .xid(r.xid)
                .u32(r.oid)
                .cstr(&r.namespace)
                .cstr(&r.name)
                .u8(r.replica_identity.code())
                .i16(n);
            r.columns.iter().fold(w, |w, c| {
                w.u8(u8::from(c.is_key))
                    .cstr(&c.name)
                    .u32(c.type_oid)
                    .i32(c.type_modifier)
            })
        }
        M::Type(t) => w.xid(t.xid).u32(t.oid).cstr(&t.namespace).cstr(&t.name),
        M::Insert(i) => w.xid(i.xid).u32(i.relation_oid).u8(b'N').tuple(&i.new),
        M::Update(u) => {
            let w = w.xid(u.xid).u32(u.relation_oid);
            let w = match &u.old {
                None => w,
                Some(OldTuple::Key(t)) => w.u8(b'K').tuple(t),
                Some(OldTuple::Full(t)) => w.u8(b'O').tuple(t),
            };
            w.u8(b'N').tuple(&u.new)
        }
        M::Delete(d) => {
            let w = w.xid(d.xid).u32(d.relation_oid);
            match &d.old {
                OldTuple::Key(t) => w.u8(b'K').tuple(t),
                OldTuple::Full(t) => w.u8(b'O').tuple(t),
            }
        }
        M::Truncate(t) => {
            let n = i32::try_from(t.relation_oids.len()).expect("few relations");
            let options = u8::from(t.cascade) | (u8::from(t.restart_identity) << 1);
            let w = w.xid(t.xid).i32(n).u8(options);
            t.relation_oids.iter().fold(w, |w, &oid| w.u32(oid))
        }
        M::Message(m) => w
            .xid(m.xid)
            .u8(u8::from(m.transactional))
            .u64(m.lsn)
            .cstr(&m.prefix)
            .counted(&m.content),
        M::StreamStart(s) => w.u32(s.xid).u8(u8::from(s.first_segment)),
        M::StreamStop => w,
        M::StreamCommit(c) => w
            .u32(c.xid)
            .u8(0)
            .u64(c.commit_lsn)
            .u64(c.end_lsn)
            .i64(pg_time(c.commit_time_us)),
        M::StreamAbort(a) => w.u32(a.xid).u32(a.subxact_xid),
    };
    w.0
}

/// A valid message: its bytes (built field by field from the documentation, not by
/// [`encode`]), whether it is inside a streamed block, and what it decodes to.
struct Case {
    name: &'static str,
    in_stream: bool,
    bytes: Vec<u8>,
    expected: PgOutputMessage,
}

fn case(name: &'static str, in_stream: bool, w: W, expected: PgOutputMessage) -> Case {
    Case {
        name,
        in_stream,
        bytes: w.0,
        expected,
    }
}

/// 2024-05-01T12:00:00Z.
const MAY_DAY_UNIX_US: i64 = 1_714_564_800_000_000;
const MAY_DAY_PG_US: i64 = 767_880_000_000_000;

static CASES: LazyLock<Vec<Case>> = LazyLock::new(cases);

fn cases() -> Vec<Case> {
    let items_columns = || {
        vec![
            col(true, "id", 20, -1),
            col(false, "name", 25, -1),
            col(false, "price", 1700, (10 << 16 | 2) + 4),
        ]
    };
    let items_w = |w: W| {
        w.u32(16_384)
            .cstr("public")
            .cstr("items")
            .u8(b'd')
            .i16(3)
            .u8(1)
            .cstr("id")
            .u32(20)
            .i32(-1)
            .u8(0)
            .cstr("name")
            .u32(25)
            .i32(-1)
            .u8(0)
            .cstr("price")
            .u32(1700)
            .i32(655_366)
    };
    let row = || {
        vec![
            text("1"),
            Null,
            UnchangedToast,
            Binary(vec![0, 0, 0, 1]),
            text(""),
            Text(vec![0xff, 0xfe]),
        ]
    };
    let row_w = |w: W| {
        w.i16(6)
            .u8(b't')
            .i32(1)
            .raw(b"1")
            .u8(b'n')
            .u8(b'u')
            .u8(b'b')
            .i32(4)
            .raw(&[0, 0, 0, 1])
            .u8(b't')
            .i32(0)
            .u8(b't')
            .i32(2)
            .raw(&[0xff, 0xfe])
    };
    let key_w = |w: W| w.i16(2).u8(b't').i32(1).raw(b"7").u8(b'n');
    let key = || vec![text("7"), Null];
    vec![
        case(
            "begin",
            false,
            W::new(b'B')
                .u64(0x0000_0001_6B37_4D48)
                .i64(MAY_DAY_PG_US)
                .u32(734),
            M::Begin(Begin {
                final_lsn: 0x0000_0001_6B37_4D48,
                commit_time_us: MAY_DAY_UNIX_US,
                xid: 734,
            }),
        ),
        case(
            "begin at PostgreSQL's epoch",
            false,
            W::new(b'B').u64(1).i64(0).u32(u32::MAX),
            M::Begin(Begin {
                final_lsn: 1,
                commit_time_us: 946_684_800_000_000,
                xid: u32::MAX,
            }),
        ),
        case(
            "begin at the Unix epoch (before 2000)",
            false,
            W::new(b'B').u64(u64::MAX).i64(-946_684_800_000_000).u32(0),
            M::Begin(Begin {
                final_lsn: u64::MAX,
                commit_time_us: 0,
                xid: 0,
            }),
        ),
        case(
            "commit",
            false,
            W::new(b'C')
                .u8(0)
                .u64(0x16B3_74D48)
                .u64(0x16B3_74D78)
                .i64(MAY_DAY_PG_US + 1),
            M::Commit(Commit {
                commit_lsn: 0x16B3_74D48,
                end_lsn: 0x16B3_74D78,
                commit_time_us: MAY_DAY_UNIX_US + 1,
            }),
        ),
        case(
            "origin",
            false,
            W::new(b'O').u64(0xABCDEF).cstr("upstream"),
            M::Origin(Origin {
                commit_lsn: 0xABCDEF,
                name: "upstream".to_owned(),
            }),
        ),
        case(
            "origin inside a streamed block (no xid)",
            true,
            W::new(b'O').u64(0).cstr("ünïcode"),
            M::Origin(Origin {
                commit_lsn: 0,
                name: "ünïcode".to_owned(),
            }),
        ),
        case(
            "relation",
            false,
            items_w(W::new(b'R')),
            M::Relation(Relation {
                xid: None,
                oid: 16_384,
                namespace: "public".to_owned(),
                name: "items".to_owned(),
                replica_identity: ReplicaIdentity::Default,
                columns: items_columns(),
            }),
        ),
        case(
            "relation in a stream",
            true,
            items_w(W::new(b'R').u32(900)),
            M::Relation(Relation {
                xid: Some(900),
                oid: 16_384,
                namespace: "public".to_owned(),
                name: "items".to_owned(),
                replica_identity: ReplicaIdentity::Default,
                columns: items_columns(),
            }),
        ),
        case(
            "relation of pg_catalog, identity full, no columns",
            false,
            W::new(b'R').u32(1).cstr("").cstr("t").u8(b'f').i16(0),
            M::Relation(Relation {
                xid: None,
                oid: 1,
                namespace: String::new(),
                name: "t".to_owned(),
                replica_identity: ReplicaIdentity::Full,
                columns: vec![],
            }),
        ),
        case(
            "relation, identity nothing",
            false,
            W::new(b'R')
                .u32(2)
                .cstr("s")
                .cstr("t")
                .u8(b'n')
                .i16(1)
                .u8(0)
                .cstr("")
                .u32(u32::MAX)
                .i32(i32::MIN),
            M::Relation(Relation {
                xid: None,
                oid: 2,
                namespace: "s".to_owned(),
                name: "t".to_owned(),
                replica_identity: ReplicaIdentity::Nothing,
                columns: vec![col(false, "", u32::MAX, i32::MIN)],
            }),
        ),
        case(
            "relation, identity index",
            false,
            W::new(b'R')
                .u32(3)
                .cstr("s")
                .cstr("t")
                .u8(b'i')
                .i16(1)
                .u8(1)
                .cstr("k")
                .u32(23)
                .i32(-1),
            M::Relation(Relation {
                xid: None,
                oid: 3,
                namespace: "s".to_owned(),
                name: "t".to_owned(),
                replica_identity: ReplicaIdentity::Index,
                columns: vec![col(true, "k", 23, -1)],
            }),
        ),
        case(
            "type",
            false,
            W::new(b'Y').u32(16_390).cstr("public").cstr("mood"),
            M::Type(PgType {
                xid: None,
                oid: 16_390,
                namespace: "public".to_owned(),
                name: "mood".to_owned(),
            }),
        ),
        case(
            "type in a stream",
            true,
            W::new(b'Y').u32(901).u32(16_390).cstr("").cstr("mood"),
            M::Type(PgType {
                xid: Some(901),
                oid: 16_390,
                namespace: String::new(),
                name: "mood".to_owned(),
            }),
        ),
        case(
            "insert with every column kind",
            false,
            row_w(W::new(b'I').u32(16_384).u8(b'N')),
            M::Insert(Insert {
                xid: None,
                relation_oid: 16_384,
                new: row(),
            }),
        ),
        case(
            "insert of no columns",
            false,
            W::new(b'I').u32(5).u8(b'N').i16(0),
            M::Insert(Insert {
                xid: None,
                relation_oid: 5,
                new: vec![],
            }),
        ),
        case(
            "insert in a stream",
            true,
            row_w(W::new(b'I').u32(902).u32(16_384).u8(b'N')),
            M::Insert(Insert {
                xid: Some(902),
                relation_oid: 16_384,
                new: row(),
            }),
        ),
        case(
            "update without an old tuple",
            false,
            row_w(W::new(b'U').u32(16_384).u8(b'N')),
            M::Update(Update {
                xid: None,
                relation_oid: 16_384,
                old: None,
                new: row(),
            }),
        ),
        case(
            "update with an old key",
            false,
            row_w(key_w(W::new(b'U').u32(16_384).u8(b'K')).u8(b'N')),
            M::Update(Update {
                xid: None,
                relation_oid: 16_384,
                old: Some(OldTuple::Key(key())),
                new: row(),
            }),
        ),
        case(
            "update with an old row",
            false,
            row_w(row_w(W::new(b'U').u32(16_384).u8(b'O')).u8(b'N')),
            M::Update(Update {
                xid: None,
                relation_oid: 16_384,
                old: Some(OldTuple::Full(row())),
                new: row(),
            }),
        ),
        case(
            "update in a stream, with an old row",
            true,
            row_w(row_w(W::new(b'U').u32(903).u32(16_384).u8(b'O')).u8(b'N')),
            M::Update(Update {
                xid: Some(903),
                relation_oid: 16_384,
                old: Some(OldTuple::Full(row())),
                new: row(),
            }),
        ),
        case(
            "delete by key",
            false,
            key_w(W::new(b'D').u32(16_384).u8(b'K')),
            M::Delete(Delete {
                xid: None,
                relation_oid: 16_384,
                old: OldTuple::Key(key()),
            }),
        ),
        case(
            "delete with the old row",
            false,
            row_w(W::new(b'D').u32(16_384).u8(b'O')),
            M::Delete(Delete {
                xid: None,
                relation_oid: 16_384,
                old: OldTuple::Full(row()),
            }),
        ),
        case(
            "delete in a stream",
            true,
            key_w(W::new(b'D').u32(904).u32(16_384).u8(b'K')),
            M::Delete(Delete {
                xid: Some(904),
                relation_oid: 16_384,
                old: OldTuple::Key(key()),
            }),
        ),
        case(
            "truncate of three relations",
            false,
            W::new(b'T').i32(3).u8(0).u32(10).u32(11).u32(12),
            M::Truncate(Truncate {
                xid: None,
                cascade: false,
                restart_identity: false,
                relation_oids: vec![10, 11, 12],
            }),
        ),
        case(
            "truncate cascade",
            false,
            W::new(b'T').i32(1).u8(1).u32(10),
            M::Truncate(Truncate {
                xid: None,
                cascade: true,
                restart_identity: false,
                relation_oids: vec![10],
            }),
        ),
        case(
            "truncate restart identity",
            false,
            W::new(b'T').i32(2).u8(2).u32(10).u32(11),
            M::Truncate(Truncate {
                xid: None,
                cascade: false,
                restart_identity: true,
                relation_oids: vec![10, 11],
            }),
        ),
        case(
            "truncate in a stream, cascade and restart identity",
            true,
            W::new(b'T').u32(905).i32(2).u8(3).u32(10).u32(11),
            M::Truncate(Truncate {
                xid: Some(905),
                cascade: true,
                restart_identity: true,
                relation_oids: vec![10, 11],
            }),
        ),
        case(
            "transactional message",
            false,
            W::new(b'M')
                .u8(1)
                .u64(0x16B3_74D50)
                .cstr("weir")
                .i32(5)
                .raw(b"hello"),
            M::Message(LogicalMessage {
                xid: None,
                transactional: true,
                lsn: 0x16B3_74D50,
                prefix: "weir".to_owned(),
                content: b"hello".to_vec(),
            }),
        ),
        case(
            "non-transactional message, empty prefix and content",
            false,
            W::new(b'M').u8(0).u64(7).cstr("").i32(0),
            M::Message(LogicalMessage {
                xid: None,
                transactional: false,
                lsn: 7,
                prefix: String::new(),
                content: vec![],
            }),
        ),
        case(
            "message in a stream, binary content",
            true,
            W::new(b'M')
                .u32(906)
                .u8(1)
                .u64(8)
                .cstr("p")
                .i32(3)
                .raw(&[0, 0xff, b'M']),
            M::Message(LogicalMessage {
                xid: Some(906),
                transactional: true,
                lsn: 8,
                prefix: "p".to_owned(),
                content: vec![0, 0xff, b'M'],
            }),
        ),
        case(
            "stream start, first segment",
            false,
            W::new(b'S').u32(907).u8(1),
            M::StreamStart(StreamStart {
                xid: 907,
                first_segment: true,
            }),
        ),
        case(
            "stream start, later segment",
            false,
            W::new(b'S').u32(907).u8(0),
            M::StreamStart(StreamStart {
                xid: 907,
                first_segment: false,
            }),
        ),
        case("stream stop", true, W::new(b'E'), M::StreamStop),
        case(
            "stream commit",
            false,
            W::new(b'c')
                .u32(907)
                .u8(0)
                .u64(0x200)
                .u64(0x230)
                .i64(MAY_DAY_PG_US),
            M::StreamCommit(StreamCommit {
                xid: 907,
                commit_lsn: 0x200,
                end_lsn: 0x230,
                commit_time_us: MAY_DAY_UNIX_US,
            }),
        ),
        case(
            "stream abort of a subtransaction",
            false,
            W::new(b'A').u32(907).u32(908),
            M::StreamAbort(StreamAbort {
                xid: 907,
                subxact_xid: 908,
            }),
        ),
        case(
            "stream abort of a whole transaction",
            false,
            W::new(b'A').u32(907).u32(907),
            M::StreamAbort(StreamAbort {
                xid: 907,
                subxact_xid: 907,
            }),
        ),
    ]
}
