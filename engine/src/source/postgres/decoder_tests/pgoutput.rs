//! The pgoutput decoder (`weir_core::pg::pgoutput`, whose own tests are literal cases
//! and properties) against real PostgreSQL bytes: a workload peeked from a slot decodes
//! as expected.

use crate::pg::pgoutput::build::{col, text};
use crate::pg::pgoutput::*;

use PgOutputMessage as M;
use TupleValue::{Binary, Null, Text, UnchangedToast};

/// 2024-05-01T12:00:00Z, as PostgreSQL's timestamp (microseconds since 2000).
const MAY_DAY_PG_US: i64 = 767_880_000_000_000;

// ---- Real PostgreSQL bytes ------------------------------------------------------

const SCHEMA: &str = "
    CREATE TYPE mood AS ENUM ('happy', 'sad');
    CREATE TABLE items (
        id bigint PRIMARY KEY, name text, price numeric(10,2), at timestamptz,
        ok boolean, data bytea, feeling mood, note text
    );
    ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL;
    CREATE TABLE audit (id int, what text);
    ALTER TABLE audit REPLICA IDENTITY FULL;
    CREATE TABLE bulk (id int PRIMARY KEY, filler text);
    CREATE PUBLICATION pub FOR TABLE items, audit;
    CREATE PUBLICATION pub_bulk FOR TABLE bulk;
";

/// One statement list per transaction, in order.
const WORKLOAD: &[&str] = &[
    "INSERT INTO items VALUES (1, 'apple', 1.50, '2024-05-01 12:00:00+00', true,          '\\xdeadbeef', 'happy', repeat('n', 5000))",
    "UPDATE items SET name = 'apricot' WHERE id = 1",
    "UPDATE items SET id = 2 WHERE id = 1",
    "INSERT INTO audit VALUES (1, 'created');          UPDATE audit SET what = 'changed' WHERE id = 1;          DELETE FROM audit WHERE id = 1",
    "DELETE FROM items WHERE id = 2",
    "TRUNCATE items, audit RESTART IDENTITY CASCADE",
    "SELECT pg_logical_emit_message(true, 'weir', 'hello')",
    "SELECT pg_logical_emit_message(false, 'weir', 'now')",
    "SELECT pg_replication_origin_create('upstream')",
    "SELECT pg_replication_origin_session_setup('upstream');          BEGIN;          SELECT pg_replication_origin_xact_setup('0/ABCDEF', now());          INSERT INTO items (id, name) VALUES (3, 'cherry');          COMMIT;          SELECT pg_replication_origin_session_reset()",
];

/// Large transactions, streamed with protocol version 2: one commits, one aborts,
/// one aborts a subtransaction and commits.
const BULK: &[&str] = &[
    "INSERT INTO bulk SELECT g, repeat('x', 200) FROM generate_series(1, 3000) g",
    "BEGIN;          INSERT INTO bulk SELECT g, repeat('y', 200) FROM generate_series(10001, 13000) g;          ROLLBACK",
    "BEGIN;          INSERT INTO bulk VALUES (20000, 'before');          SAVEPOINT s;          INSERT INTO bulk SELECT g, repeat('z', 200) FROM generate_series(20001, 23000) g;          ROLLBACK TO SAVEPOINT s;          INSERT INTO bulk VALUES (30000, 'after');          COMMIT",
];

/// A short form of a message, to compare sequences.
fn shape(m: &PgOutputMessage) -> String {
    match m {
        M::Begin(_) => "B".into(),
        M::Commit(_) => "C".into(),
        M::Origin(_) => "O".into(),
        M::Relation(r) => format!("R {}", r.name),
        M::Type(t) => format!("Y {}", t.name),
        M::Insert(_) => "I".into(),
        M::Update(u) => match u.old {
            None => "U".into(),
            Some(OldTuple::Key(_)) => "U K".into(),
            Some(OldTuple::Full(_)) => "U O".into(),
        },
        M::Delete(d) => match d.old {
            OldTuple::Key(_) => "D K".into(),
            OldTuple::Full(_) => "D O".into(),
        },
        M::Truncate(_) => "T".into(),
        M::Message(m) if m.transactional => "M tx".into(),
        M::Message(_) => "M now".into(),
        M::StreamStart(_) => "S".into(),
        M::StreamStop => "E".into(),
        M::StreamCommit(_) => "c".into(),
        M::StreamAbort(_) => "A".into(),
    }
}

async fn peek(client: &tokio_postgres::Client, slot: &str, options: &str) -> Vec<Vec<u8>> {
    let sql = format!(
        "SELECT data FROM pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, {options})"
    );
    let rows = client.query(&sql, &[]).await.expect("peek the slot");
    rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect()
}

/// Decodes every message in order, and drops transactions with nothing in them
/// (PostgreSQL before 15 sends them for the DDL and the slot-less statements).
fn decode_all(rows: &[Vec<u8>]) -> Vec<PgOutputMessage> {
    let mut decoder = Decoder::new();
    let mut out: Vec<PgOutputMessage> = vec![];
    for (i, row) in rows.iter().enumerate() {
        let message = decoder
            .decode(row)
            .unwrap_or_else(|e| panic!("message {i} of {}: {e}", rows.len()));
        if matches!(message, M::Commit(_)) && matches!(out.last(), Some(M::Begin(_))) {
            out.pop();
            continue;
        }
        out.push(message);
    }
    assert!(
        !decoder.in_stream(),
        "the changes end inside a streamed block"
    );
    out
}

fn unix_now_us() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.expect("after 1970").as_micros()).expect("before 2262")
}

/// Begin and Commit agree, and the commit time is the wall clock's (the epoch shift).
fn check_transactions(messages: &[PgOutputMessage], started_us: i64, finished_us: i64) {
    let mut begin: Option<&Begin> = None;
    let mut transactions = 0;
    for m in messages {
        match m {
            M::Begin(b) => {
                assert!(begin.is_none(), "nested Begin");
                begin = Some(b);
            }
            M::Commit(c) => {
                let b = begin.take().expect("Commit without Begin");
                assert_eq!(b.final_lsn, c.commit_lsn);
                assert_eq!(b.commit_time_us, c.commit_time_us);
                assert!(c.end_lsn > c.commit_lsn);
                // A second of slack either way for clock granularity.
                assert!(
                    (started_us - 1_000_000..=finished_us + 1_000_000).contains(&c.commit_time_us),
                    "commit time {} not within the test's run {started_us}..{finished_us}",
                    c.commit_time_us
                );
                transactions += 1;
            }
            _ => {}
        }
    }
    assert!(begin.is_none(), "Begin without Commit");
    assert!(transactions > 0);
}

#[tokio::test]
async fn decodes_what_postgresql_sends() {
    let pg = tokio::task::spawn_blocking(|| {
        crate::localpg::LocalPg::start(&crate::localpg::LocalPgOptions::default())
    })
    .await
    .expect("the start task panicked")
    .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
    let db = "weir_pgoutput";
    let dsn = pg.create_database(db).await.expect("create the database");
    pg.execute(db, SCHEMA).await.expect("create the schema");
    pg.execute(
        db,
        "SELECT pg_create_logical_replication_slot('slot', 'pgoutput')",
    )
    .await
    .expect("create the slot");
    let started_us = unix_now_us();
    for sql in WORKLOAD {
        pg.execute(db, sql).await.expect(sql);
    }
    pg.execute(
        db,
        "SELECT pg_create_logical_replication_slot('stream_slot', 'pgoutput')",
    )
    .await
    .expect("create the second slot");
    for sql in BULK {
        pg.execute(db, sql).await.expect(sql);
    }
    let finished_us = unix_now_us();

    let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let connection = tokio::spawn(connection);
    // Text output of timestamptz follows the decoding session's time zone; a small
    // work memory makes PostgreSQL stream the bulk transactions.
    client
        .batch_execute("SET TimeZone = 'UTC'; SET logical_decoding_work_mem = '64kB'")
        .await
        .expect("set up the session");
    let v1 = "'proto_version', '1', 'publication_names', 'pub', 'messages', 'true'";

    // ---- Protocol version 1, text values.
    let text_rows = peek(&client, "slot", v1).await;
    let messages = decode_all(&text_rows);
    let shapes: Vec<String> = messages.iter().map(shape).collect();
    assert_eq!(
        shapes,
        [
            "B", "Y mood", "R items", "I", "C", // insert
            "B", "U", "C", // update of a non-key column
            "B", "U K", "C", // update of the key
            "B", "R audit", "I", "U O", "D O", "C", // replica identity full
            "B", "D K", "C", // delete
            // A truncate invalidates the relations: they are described again.
            "B", "Y mood", "R items", "R audit", "T", "C", "B", "M tx",
            "C",     // transactional message
            "M now", // non-transactional message
            "B", "O", "Y mood", "R items", "I", "C", // replicated from an origin
        ]
    );
    check_transactions(&messages, started_us, finished_us);

    let M::Type(mood) = &messages[1] else {
        panic!("expected the type")
    };
    assert_eq!(
        (mood.namespace.as_str(), mood.name.as_str()),
        ("public", "mood")
    );
    let M::Relation(items) = &messages[2] else {
        panic!("expected the relation")
    };
    assert_eq!(items.xid, None);
    assert_eq!(items.namespace, "public");
    assert_eq!(items.replica_identity, ReplicaIdentity::Default);
    assert_eq!(
        items.columns,
        [
            col(true, "id", 20, -1),
            col(false, "name", 25, -1),
            col(false, "price", 1700, (10 << 16 | 2) + 4),
            col(false, "at", 1184, -1),
            col(false, "ok", 16, -1),
            col(false, "data", 17, -1),
            col(false, "feeling", mood.oid, -1),
            col(false, "note", 25, -1),
        ]
    );
    let note = || Text(vec![b'n'; 5000]);
    let row = |id: &str, name: &str, note: TupleValue| {
        vec![
            text(id),
            text(name),
            text("1.50"),
            text("2024-05-01 12:00:00+00"),
            text("t"),
            text("\\xdeadbeef"),
            text("happy"),
            note,
        ]
    };
    let key = |id: &str| {
        let mut k = vec![Null; 8];
        k[0] = text(id);
        k
    };
    assert_eq!(
        messages[3],
        M::Insert(Insert {
            xid: None,
            relation_oid: items.oid,
            new: row("1", "apple", note()),
        })
    );
    // The TOASTed note is not sent again when unchanged.
    assert_eq!(
        messages[6],
        M::Update(Update {
            xid: None,
            relation_oid: items.oid,
            old: None,
            new: row("1", "apricot", UnchangedToast),
        })
    );
    assert_eq!(
        messages[9],
        M::Update(Update {
            xid: None,
            relation_oid: items.oid,
            old: Some(OldTuple::Key(key("1"))),
            new: row("2", "apricot", UnchangedToast),
        })
    );
    let M::Relation(audit) = &messages[12] else {
        panic!("expected the relation")
    };
    assert_eq!(audit.replica_identity, ReplicaIdentity::Full);
    // Under REPLICA IDENTITY FULL every column is flagged as part of the key.
    assert_eq!(
        audit.columns,
        [col(true, "id", 23, -1), col(true, "what", 25, -1)]
    );
    let audit_row = |what: &str| vec![text("1"), text(what)];
    assert_eq!(
        &messages[13..16],
        [
            M::Insert(Insert {
                xid: None,
                relation_oid: audit.oid,
                new: audit_row("created"),
            }),
            M::Update(Update {
                xid: None,
                relation_oid: audit.oid,
                old: Some(OldTuple::Full(audit_row("created"))),
                new: audit_row("changed"),
            }),
            M::Delete(Delete {
                xid: None,
                relation_oid: audit.oid,
                old: OldTuple::Full(audit_row("changed")),
            }),
        ]
    );
    assert_eq!(
        messages[18],
        M::Delete(Delete {
            xid: None,
            relation_oid: items.oid,
            old: OldTuple::Key(key("2")),
        })
    );
    for (i, described) in [(21, &messages[1]), (22, &messages[2]), (23, &messages[12])] {
        assert_eq!(&messages[i], described, "described again at {i}");
    }
    assert_eq!(&messages[32], &messages[1]);
    assert_eq!(&messages[33], &messages[2]);
    let M::Truncate(truncate) = &messages[24] else {
        panic!("expected the truncate")
    };
    assert!(truncate.cascade && truncate.restart_identity);
    let mut truncated = truncate.relation_oids.clone();
    truncated.sort_unstable();
    let mut both = vec![items.oid, audit.oid];
    both.sort_unstable();
    assert_eq!(truncated, both);
    for (i, transactional, content) in [(27, true, "hello"), (29, false, "now")] {
        let M::Message(m) = &messages[i] else {
            panic!("expected a message at {i}")
        };
        assert_eq!(
            (
                m.xid,
                m.transactional,
                m.prefix.as_str(),
                m.content.as_slice()
            ),
            (None, transactional, "weir", content.as_bytes())
        );
        assert!(m.lsn > 0);
    }
    assert_eq!(
        messages[31],
        M::Origin(Origin {
            commit_lsn: 0xAB_CDEF,
            name: "upstream".to_owned(),
        })
    );
    let M::Insert(cherry) = &messages[34] else {
        panic!("expected the insert")
    };
    assert_eq!(&cherry.new[..2], [text("3"), text("cherry")]);
    assert_eq!(&cherry.new[2..], [Null, Null, Null, Null, Null, Null]);

    // ---- Protocol version 1, binary values: the same messages.
    let binary = peek(&client, "slot", &format!("{v1}, 'binary', 'true'")).await;
    let binary = decode_all(&binary);
    assert_eq!(binary.iter().map(shape).collect::<Vec<_>>(), shapes);
    let M::Insert(insert) = &binary[3] else {
        panic!("expected the insert")
    };
    let numeric_1_50 = vec![0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88];
    assert_eq!(
        insert.new,
        [
            Binary(1i64.to_be_bytes().to_vec()),
            Binary(b"apple".to_vec()),
            Binary(numeric_1_50),
            Binary(MAY_DAY_PG_US.to_be_bytes().to_vec()),
            Binary(vec![1]),
            Binary(vec![0xde, 0xad, 0xbe, 0xef]),
            Binary(b"happy".to_vec()),
            Binary(vec![b'n'; 5000]),
        ]
    );
    let M::Update(update) = &binary[6] else {
        panic!("expected the update")
    };
    assert_eq!(update.new[7], UnchangedToast);

    // ---- Protocol version 2, streamed transactions.
    let streamed = peek(
        &client,
        "stream_slot",
        "'proto_version', '2', 'publication_names', 'pub_bulk', 'streaming', 'on'",
    )
    .await;
    let streamed = decode_all(&streamed);
    check_stream(&streamed);

    drop(client);
    connection
        .await
        .expect("the connection task panicked")
        .expect("the connection");
}

/// Applies the streamed messages as a subscriber would: changes are kept per
/// (sub)transaction xid, a Stream Abort drops the (sub)transaction, a Stream Commit
/// applies the rest. What is applied must be exactly what committed.
fn check_stream(messages: &[PgOutputMessage]) {
    let count = |shape_of: &str| messages.iter().filter(|m| shape(m) == shape_of).count();
    assert!(count("S") >= 3, "three transactions streamed at least once");
    assert_eq!(count("S"), count("E"));
    assert_eq!(count("c"), 2, "two streamed transactions commit");
    assert_eq!(
        count("A"),
        2,
        "one transaction and one subtransaction abort"
    );
    let mut pending: Vec<(u32, u32, i64)> = vec![]; // (top xid, xid, id)
    let mut applied: Vec<i64> = vec![];
    let mut top: Option<u32> = None;
    let mut seen_tops: Vec<u32> = vec![];
    let mut subtransaction_aborted = false;
    for m in messages {
        match m {
            M::StreamStart(s) => {
                assert_eq!(s.first_segment, !seen_tops.contains(&s.xid));
                seen_tops.push(s.xid);
                top = Some(s.xid);
            }
            M::StreamStop => top = None,
            M::Relation(r) => {
                assert!(r.xid.is_some() && top.is_some(), "{m:?}");
                assert_eq!(r.name, "bulk");
            }
            M::Insert(i) => {
                let top = top.expect("inserts of streamed transactions are in blocks");
                let xid = i.xid.expect("a change in a block has its xid");
                let Some(Text(id)) = i.new.first() else {
                    panic!("expected the id as text")
                };
                let id = std::str::from_utf8(id)
                    .expect("utf-8")
                    .parse()
                    .expect("int");
                pending.push((top, xid, id));
            }
            M::StreamAbort(a) => {
                subtransaction_aborted |= a.xid != a.subxact_xid;
                pending.retain(|&(t, x, _)| {
                    t != a.xid || (a.xid != a.subxact_xid && x != a.subxact_xid)
                });
            }
            M::StreamCommit(c) => {
                applied.extend(pending.iter().filter(|p| p.0 == c.xid).map(|p| p.2));
                pending.retain(|p| p.0 != c.xid);
            }
            other => panic!("unexpected {other:?} in the streamed changes"),
        }
    }
    assert!(
        subtransaction_aborted,
        "a Stream Abort names a subtransaction"
    );
    assert!(pending.is_empty(), "every streamed transaction ended");
    let mut expected: Vec<i64> = (1..=3000).collect();
    expected.extend([20_000, 30_000]);
    assert_eq!(applied, expected);
}
