//! Every literal case decodes, encodes back, and fails where it must.

use super::*;

#[test]
fn every_case_decodes_to_its_message_and_encodes_back() {
    for c in CASES.iter() {
        let decoded = decode(&c.bytes, c.in_stream)
            .unwrap_or_else(|e| panic!("{}: does not decode: {e}", c.name));
        assert_eq!(decoded, c.expected, "{}", c.name);
        assert_eq!(encode(&c.expected), c.bytes, "{}: re-encoding", c.name);
    }
    let covered: Vec<MessageType> = CASES.iter().map(|c| c.expected.message_type()).collect();
    for t in MessageType::ALL {
        assert!(covered.contains(&t), "no case for {t}");
    }
}

#[test]
fn literal_bytes_pin_byte_order_and_layout() {
    // Begin: LSN 1/6B374D48, 2024-05-01T12:00:00Z, xid 734, written out by hand.
    let begin = [
        b'B', 0, 0, 0, 1, 0x6B, 0x37, 0x4D, 0x48, 0x00, 0x02, 0xba, 0x61, 0xfe, 0xa1, 0x50, 0x00,
        0x00, 0x00, 0x02, 0xde,
    ];
    assert_eq!(
        decode(&begin, false),
        Ok(M::Begin(Begin {
            final_lsn: 0x1_6B37_4D48,
            commit_time_us: MAY_DAY_UNIX_US,
            xid: 734,
        }))
    );
    // Insert into relation 16384 of ('42', NULL).
    let insert = [
        b'I', 0, 0, 0x40, 0, b'N', 0, 2, b't', 0, 0, 0, 2, b'4', b'2', b'n',
    ];
    assert_eq!(
        decode(&insert, false),
        Ok(M::Insert(Insert {
            xid: None,
            relation_oid: 16_384,
            new: vec![text("42"), Null],
        }))
    );
    assert_eq!(decode(b"E", true), Ok(M::StreamStop));
}

#[test]
fn every_strict_prefix_is_an_error() {
    for c in CASES.iter() {
        for len in 0..c.bytes.len() {
            let result = decode(&c.bytes[..len], c.in_stream);
            assert!(
                result.is_err(),
                "{}: the first {len} bytes decode: {result:?}",
                c.name
            );
        }
    }
    assert_eq!(decode(&[], false), Err(DecodeError::Empty));
}

#[test]
fn a_byte_after_the_last_field_is_trailing_bytes() {
    for c in CASES.iter() {
        for extra in [&[0u8][..], b"N", &[1, 2, 3]] {
            let mut bytes = c.bytes.clone();
            bytes.extend_from_slice(extra);
            assert_eq!(
                decode(&bytes, c.in_stream),
                Err(DecodeError::TrailingBytes {
                    message: c.expected.message_type(),
                    offset: c.bytes.len(),
                    extra: extra.len(),
                }),
                "{}",
                c.name
            );
        }
    }
}

#[test]
fn messages_out_of_their_place_in_streamed_blocks_are_errors() {
    for c in CASES.iter() {
        let t = c.expected.message_type();
        let misplaced = decode(&c.bytes, !c.in_stream);
        match t.placement() {
            Placement::Anywhere => {}
            _ => assert_eq!(
                misplaced,
                Err(DecodeError::OutOfPlace {
                    message: t,
                    in_stream: !c.in_stream
                }),
                "{}",
                c.name
            ),
        }
    }
    let err = decode(b"E", false).expect_err("Stream Stop outside a block");
    assert_eq!(
        err.to_string(),
        "unexpected Stream Stop message outside a streamed block"
    );
}

#[test]
fn the_decoder_tracks_streamed_blocks() {
    let mut d = Decoder::new();
    let insert = |xid: Option<u32>| {
        encode(&M::Insert(Insert {
            xid,
            relation_oid: 1,
            new: vec![text("a")],
        }))
    };
    assert!(d.decode(&insert(None)).is_ok());
    let start = encode(&M::StreamStart(StreamStart {
        xid: 5,
        first_segment: true,
    }));
    assert!(d.decode(&start).is_ok());
    assert!(d.in_stream());
    // A failed decode leaves the state alone.
    assert!(d.decode(&start).is_err());
    assert!(d.in_stream());
    match d.decode(&insert(Some(6))) {
        Ok(M::Insert(i)) => assert_eq!(i.xid, Some(6)),
        other => panic!("expected an insert, got {other:?}"),
    }
    assert_eq!(d.decode(b"E"), Ok(M::StreamStop));
    assert!(!d.in_stream());
    assert!(d.decode(&insert(None)).is_ok());
}

#[test]
fn unknown_and_invalid_protocol_bytes_are_named() {
    for tag in 0..=u8::MAX {
        if MessageType::from_tag(tag).is_none() {
            assert_eq!(
                decode(&[tag, 0, 0, 0, 0], false),
                Err(DecodeError::UnknownMessage(tag))
            );
        }
    }
    assert_eq!(
        decode(b"P", false).map_err(|e| e.to_string()),
        Err(
            "unknown pgoutput message type 'P' (0x50) (Weir decodes protocol versions 1 and 2)"
                .to_owned()
        )
    );
    let invalid = |bytes: Vec<u8>, in_stream: bool| match decode(&bytes, in_stream) {
        Err(DecodeError::InvalidByte {
            field,
            offset,
            found,
            ..
        }) => (field, offset, found),
        other => panic!("expected an invalid byte, got {other:?}"),
    };
    let insert_k = W::new(b'I').u32(1).u8(b'K').i16(0).0;
    assert_eq!(invalid(insert_k, false), ("new tuple marker", 5, b'K'));
    let update_x = W::new(b'U').u32(1).u8(b'X').i16(0).0;
    assert_eq!(invalid(update_x, false), ("tuple marker", 5, b'X'));
    let update_kk = W::new(b'U').u32(1).u8(b'K').i16(0).u8(b'K').i16(0).0;
    assert_eq!(invalid(update_kk, false), ("new tuple marker", 8, b'K'));
    let delete_n = W::new(b'D').u32(1).u8(b'N').i16(0).0;
    assert_eq!(invalid(delete_n, false), ("old tuple marker", 5, b'N'));
    let identity = W::new(b'R').u32(1).cstr("s").cstr("t").u8(b'x').i16(0).0;
    assert_eq!(invalid(identity, false), ("replica identity", 9, b'x'));
    let column_flags = W::new(b'R')
        .u32(1)
        .cstr("s")
        .cstr("t")
        .u8(b'd')
        .i16(1)
        .u8(2)
        .cstr("c")
        .u32(23)
        .i32(-1)
        .0;
    assert_eq!(invalid(column_flags, false), ("column flags", 12, 2));
    let commit_flags = W::new(b'C').u8(1).u64(0).u64(0).i64(0).0;
    assert_eq!(invalid(commit_flags, false), ("flags", 1, 1));
    let stream_commit_flags = W::new(b'c').u32(1).u8(4).u64(0).u64(0).i64(0).0;
    assert_eq!(invalid(stream_commit_flags, false), ("flags", 5, 4));
    let truncate_options = W::new(b'T').i32(1).u8(4).u32(1).0;
    assert_eq!(invalid(truncate_options, false), ("options", 5, 4));
    let message_flags = W::new(b'M').u8(2).u64(0).cstr("").i32(0).0;
    assert_eq!(invalid(message_flags, false), ("flags", 1, 2));
    let first_segment = W::new(b'S').u32(1).u8(2).0;
    assert_eq!(invalid(first_segment, false), ("first segment flag", 5, 2));
    let kind = W::new(b'I').u32(1).u8(b'N').i16(2).u8(b'n').u8(b'x').0;
    assert_eq!(
        decode(&kind, false),
        Err(DecodeError::UnknownTupleKind {
            message: MessageType::Insert,
            kind: b'x',
            offset: 9,
        })
    );
}

#[test]
fn lengths_and_counts_are_checked_before_allocating() {
    // A tuple declaring 32767 columns with 10 bytes left fails at the count.
    let many = W::new(b'I')
        .u32(1)
        .u8(b'N')
        .i16(i16::MAX)
        .raw(&[b'n'; 10])
        .0;
    assert_eq!(
        decode(&many, false),
        Err(DecodeError::TooLarge {
            message: MessageType::Insert,
            field: "tuple column count",
            offset: 6,
            len: 32_767,
            remaining: 10,
        })
    );
    // The count of 0xFFFF is -1 as PostgreSQL's Int16.
    let negative = W::new(b'R')
        .u32(1)
        .cstr("s")
        .cstr("t")
        .u8(b'd')
        .raw(&[0xff, 0xff])
        .0;
    assert_eq!(
        decode(&negative, false),
        Err(DecodeError::Negative {
            message: MessageType::Relation,
            field: "column count",
            offset: 10,
            value: -1,
        })
    );
    // 100 relation columns need at least 1000 bytes.
    let columns = W::new(b'R')
        .u32(1)
        .cstr("s")
        .cstr("t")
        .u8(b'd')
        .i16(100)
        .raw(&[0; 999])
        .0;
    assert!(matches!(
        decode(&columns, false),
        Err(DecodeError::TooLarge {
            len: 100,
            remaining: 999,
            ..
        })
    ));
    let relations = W::new(b'T').i32(i32::MAX).u8(0).u32(1).0;
    assert!(matches!(
        decode(&relations, false),
        Err(DecodeError::TooLarge {
            field: "relation count",
            offset: 1,
            remaining: 4,
            ..
        })
    ));
    let value = W::new(b'I').u32(1).u8(b'N').i16(1).u8(b't').i32(i32::MAX).0;
    assert!(matches!(
        decode(&value, false),
        Err(DecodeError::TooLarge {
            field: "text value length",
            offset: 9,
            ..
        })
    ));
    let value = W::new(b'I').u32(1).u8(b'N').i16(1).u8(b'b').i32(-1).0;
    assert!(matches!(
        decode(&value, false),
        Err(DecodeError::Negative {
            field: "binary value length",
            value: -1,
            ..
        })
    ));
    let content = W::new(b'M').u8(0).u64(0).cstr("").i32(i32::MIN).0;
    assert!(matches!(
        decode(&content, false),
        Err(DecodeError::Negative {
            field: "content length",
            ..
        })
    ));
}

#[test]
fn strings_must_be_terminated_utf8() {
    let unterminated = W::new(b'O').u64(0).raw(b"upstream").0;
    assert_eq!(
        decode(&unterminated, false),
        Err(DecodeError::Unterminated {
            message: MessageType::Origin,
            field: "origin name",
            offset: 9,
        })
    );
    let latin1 = W::new(b'Y').u32(1).cstr("s").raw(&[0xe9, 0]).0;
    assert_eq!(
        decode(&latin1, false),
        Err(DecodeError::InvalidUtf8 {
            message: MessageType::Type,
            field: "type name",
            offset: 7,
        })
    );
}

#[test]
fn timestamps_that_overflow_the_unix_epoch_are_errors() {
    let late = W::new(b'B').u64(0).i64(i64::MAX).u32(0).0;
    assert_eq!(
        decode(&late, false),
        Err(DecodeError::TimestampOutOfRange {
            message: MessageType::Begin,
            field: "commit timestamp",
            offset: 9,
        })
    );
    let earliest = W::new(b'B').u64(0).i64(i64::MIN).u32(0).0;
    assert!(decode(&earliest, false).is_ok());
}

#[test]
fn errors_and_debug_output_never_show_values() {
    const SECRET: &[u8] = b"SECRET-4111111111111111";
    let secret = std::str::from_utf8(SECRET).expect("ascii");
    let messages = [
        M::Insert(Insert {
            xid: None,
            relation_oid: 1,
            new: vec![Text(SECRET.to_vec()), Binary(SECRET.to_vec())],
        }),
        M::Message(LogicalMessage {
            xid: None,
            transactional: true,
            lsn: 1,
            prefix: "p".to_owned(),
            content: SECRET.to_vec(),
        }),
    ];
    for message in &messages {
        assert!(!format!("{message:?}").contains(secret), "{message:?}");
        let bytes = encode(message);
        let mut errors = vec![];
        for len in 0..bytes.len() {
            errors.extend(decode(&bytes[..len], false).err());
            errors.extend(decode(&bytes[..len], true).err());
        }
        for i in 0..bytes.len() {
            for b in [0u8, b'x', 0xff] {
                let mut bad = bytes.clone();
                bad[i] = b;
                errors.extend(decode(&bad, false).err());
            }
            let mut bad = bytes.clone();
            bad.insert(i, b'S');
            errors.extend(decode(&bad, false).err());
        }
        assert!(errors.len() > bytes.len());
        for e in errors {
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains("SECRET"), "{shown}");
            assert!(!shown.contains("4111"), "{shown}");
        }
    }
}
