//! Property tests: arbitrary messages round-trip, mutated bytes never panic.

use super::*;

// ---- Property tests -------------------------------------------------------------

fn arb_name() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,8}"
}

fn arb_value() -> impl Strategy<Value = TupleValue> {
    prop_oneof![
        Just(Null),
        Just(UnchangedToast),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Text),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Binary),
    ]
}

fn arb_tuple() -> impl Strategy<Value = Vec<TupleValue>> {
    prop::collection::vec(arb_value(), 0..6)
}

fn arb_old() -> impl Strategy<Value = OldTuple> {
    prop_oneof![
        arb_tuple().prop_map(OldTuple::Key),
        arb_tuple().prop_map(OldTuple::Full)
    ]
}

/// Every commit time that has a PostgreSQL timestamp.
fn arb_time() -> impl Strategy<Value = i64> {
    (i64::MIN + PG_EPOCH_OFFSET_US)..=i64::MAX
}

fn arb_identity() -> impl Strategy<Value = ReplicaIdentity> {
    prop::sample::select(vec![
        ReplicaIdentity::Default,
        ReplicaIdentity::Nothing,
        ReplicaIdentity::Full,
        ReplicaIdentity::Index,
    ])
}

/// Messages that carry an xid inside a streamed block; `in_stream` = xid present.
fn arb_stream_xid_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
    let xid = any::<Option<u32>>;
    let column = (any::<bool>(), arb_name(), any::<u32>(), any::<i32>()).prop_map(
        |(is_key, name, type_oid, type_modifier)| RelationColumn {
            is_key,
            name,
            type_oid,
            type_modifier,
        },
    );
    prop_oneof![
        (
            xid(),
            any::<u32>(),
            arb_name(),
            arb_name(),
            arb_identity(),
            prop::collection::vec(column, 0..5)
        )
            .prop_map(|(xid, oid, namespace, name, replica_identity, columns)| {
                M::Relation(Relation {
                    xid,
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }),
        (xid(), any::<u32>(), arb_name(), arb_name()).prop_map(|(xid, oid, namespace, name)| {
            M::Type(PgType {
                xid,
                oid,
                namespace,
                name,
            })
        }),
        (xid(), any::<u32>(), arb_tuple()).prop_map(|(xid, relation_oid, new)| {
            M::Insert(Insert {
                xid,
                relation_oid,
                new,
            })
        }),
        (
            xid(),
            any::<u32>(),
            prop::option::of(arb_old()),
            arb_tuple()
        )
            .prop_map(|(xid, relation_oid, old, new)| M::Update(Update {
                xid,
                relation_oid,
                old,
                new
            })),
        (xid(), any::<u32>(), arb_old()).prop_map(|(xid, relation_oid, old)| {
            M::Delete(Delete {
                xid,
                relation_oid,
                old,
            })
        }),
        (
            xid(),
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(any::<u32>(), 0..5)
        )
            .prop_map(|(xid, cascade, restart_identity, relation_oids)| {
                M::Truncate(Truncate {
                    xid,
                    cascade,
                    restart_identity,
                    relation_oids,
                })
            }),
        (
            xid(),
            any::<bool>(),
            any::<u64>(),
            arb_name(),
            prop::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(xid, transactional, lsn, prefix, content)| {
                M::Message(LogicalMessage {
                    xid,
                    transactional,
                    lsn,
                    prefix,
                    content,
                })
            }),
    ]
    .prop_map(|m| {
        let in_stream = match &m {
            M::Relation(r) => r.xid.is_some(),
            M::Type(t) => t.xid.is_some(),
            M::Insert(i) => i.xid.is_some(),
            M::Update(u) => u.xid.is_some(),
            M::Delete(d) => d.xid.is_some(),
            M::Truncate(t) => t.xid.is_some(),
            M::Message(m) => m.xid.is_some(),
            _ => false,
        };
        (m, in_stream)
    })
}

fn arb_control_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
    prop_oneof![
        (any::<u64>(), arb_time(), any::<u32>()).prop_map(|(final_lsn, commit_time_us, xid)| (
            M::Begin(Begin {
                final_lsn,
                commit_time_us,
                xid
            }),
            false
        )),
        (any::<u64>(), any::<u64>(), arb_time()).prop_map(
            |(commit_lsn, end_lsn, commit_time_us)| (
                M::Commit(Commit {
                    commit_lsn,
                    end_lsn,
                    commit_time_us
                }),
                false
            )
        ),
        (any::<u64>(), arb_name(), any::<bool>()).prop_map(|(commit_lsn, name, in_stream)| (
            M::Origin(Origin { commit_lsn, name }),
            in_stream
        )),
        (any::<u32>(), any::<bool>()).prop_map(|(xid, first_segment)| (
            M::StreamStart(StreamStart { xid, first_segment }),
            false
        )),
        Just((M::StreamStop, true)),
        (any::<u32>(), any::<u64>(), any::<u64>(), arb_time()).prop_map(
            |(xid, commit_lsn, end_lsn, commit_time_us)| (
                M::StreamCommit(StreamCommit {
                    xid,
                    commit_lsn,
                    end_lsn,
                    commit_time_us
                }),
                false
            )
        ),
        (any::<u32>(), any::<u32>()).prop_map(|(xid, subxact_xid)| (
            M::StreamAbort(StreamAbort { xid, subxact_xid }),
            false
        )),
    ]
}

fn arb_message() -> impl Strategy<Value = (PgOutputMessage, bool)> {
    prop_oneof![arb_stream_xid_message(), arb_control_message()]
}

/// Decodes; a success must re-encode to the very same bytes (decoding is strict).
fn decode_never_panics(bytes: &[u8], in_stream: bool) -> Result<(), TestCaseError> {
    if let Ok(message) = decode(bytes, in_stream) {
        prop_assert_eq!(encode(&message), bytes);
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Xor(usize, u8),
    Set(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Cut(usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=u8::MAX).prop_map(|(i, x)| Mutation::Xor(i, x)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Cut),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *m {
        Mutation::Xor(i, x) if !bytes.is_empty() => {
            let i = at(i, bytes.len());
            bytes[i] ^= x;
        }
        Mutation::Set(i, b) if !bytes.is_empty() => {
            let i = at(i, bytes.len());
            bytes[i] = b;
        }
        Mutation::Insert(i, b) => bytes.insert(at(i, bytes.len() + 1), b),
        Mutation::Remove(i) if !bytes.is_empty() => {
            bytes.remove(at(i, bytes.len()));
        }
        Mutation::Cut(i) => bytes.truncate(at(i, bytes.len() + 1)),
        _ => {}
    }
}

const TAGS: &[u8] = b"BCORYIUDTMSEcA";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        in_stream in any::<bool>(),
    ) {
        decode_never_panics(&bytes, in_stream)?;
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_tag_never_panic(
        tag in prop::sample::select(TAGS),
        rest in prop::collection::vec(any::<u8>(), 0..128),
        in_stream in any::<bool>(),
    ) {
        let mut bytes = vec![tag];
        bytes.extend(rest);
        decode_never_panics(&bytes, in_stream)?;
    }

    #[test]
    fn mutated_valid_messages_never_panic(
        case in 0..CASES.len(),
        mutations in prop::collection::vec(arb_mutation(), 1..5),
        flip_stream in any::<bool>(),
    ) {
        let c = &CASES[case];
        let mut bytes = c.bytes.clone();
        for m in &mutations {
            mutate(&mut bytes, m);
        }
        decode_never_panics(&bytes, c.in_stream != flip_stream)?;
    }

    #[test]
    fn generated_messages_round_trip((message, in_stream) in arb_message()) {
        let bytes = encode(&message);
        prop_assert_eq!(decode(&bytes, in_stream), Ok(message));
        for len in 0..bytes.len() {
            prop_assert!(decode(&bytes[..len], in_stream).is_err());
        }
    }
}
