//! Pure parsing: CopyData, frames, error responses, commands and status updates.

use super::*;

#[test]
fn copy_data_is_parsed_and_times_are_moved_to_the_unix_epoch() {
    let payload = Bytes::from(xlog_data(0x10, 0x20, 0, b"hello"));
    let event = parse_copy_data(payload).unwrap();
    assert_eq!(
        event,
        ReplicationEvent::XLogData {
            wal_start: 0x10,
            wal_end: 0x20,
            server_time_us: 946_684_800_000_000,
            data: Bytes::from_static(b"hello"),
        }
    );
    // Debug shows the length of the data, not the data.
    let debug = format!("{event:?}");
    assert!(
        debug.contains("data_len: 5") && !debug.contains("hello"),
        "{debug}"
    );

    let event = parse_copy_data(Bytes::from(keepalive(0x30, -1, 1))).unwrap();
    assert_eq!(
        event,
        ReplicationEvent::Keepalive {
            wal_end: 0x30,
            server_time_us: 946_684_799_999_999,
            reply_requested: true,
        }
    );
    let empty = parse_copy_data(Bytes::from(xlog_data(1, 2, 3, b""))).unwrap();
    assert!(matches!(empty, ReplicationEvent::XLogData { data, .. } if data.is_empty()));
}

#[test]
fn malformed_copy_data_is_a_protocol_error() {
    let full_keepalive = keepalive(1, 2, 0);
    let full_xlog = xlog_data(1, 2, 3, b"");
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![b'w'],
        full_xlog[..24].to_vec(),
        vec![b'k'],
        full_keepalive[..17].to_vec(),
        [&full_keepalive[..], b"x"].concat(),
        keepalive(1, 2, 2),
        xlog_data(1, 2, i64::MAX, b""),
        keepalive(1, i64::MAX - 1, 0),
        b"r0000".to_vec(),
        vec![0],
    ];
    for case in cases {
        let error = parse_copy_data(Bytes::from(case.clone())).unwrap_err();
        assert!(
            matches!(error, ReplicationError::Protocol { .. }),
            "{case:?}: {error}"
        );
    }
}

#[test]
fn frame_lengths_are_bounded() {
    assert_eq!(frame_len(b"").unwrap(), None);
    assert_eq!(frame_len(b"d\0\0\0").unwrap(), None);
    assert_eq!(frame_len(b"d\0\0\0\x04").unwrap(), Some(5));
    assert_eq!(
        frame_len(b"d\x40\0\0\0").unwrap(),
        Some(MAX_MESSAGE_BYTES + 1)
    );
    for bad in [
        &b"d\0\0\0\x03"[..],
        b"d\0\0\0\0",
        b"d\x40\0\0\x01",
        b"d\xff\xff\xff\xff",
    ] {
        let error = frame_len(bad).unwrap_err();
        assert!(
            matches!(error, ReplicationError::Protocol { .. }),
            "{error}"
        );
    }
    // A partial frame stays in the buffer, whole.
    let mut buf = BytesMut::from(&frame(b'Z', b"I")[..5]);
    assert!(take_message(&mut buf).unwrap().is_none());
    assert_eq!(buf.len(), 5);
    buf.extend_from_slice(b"I");
    assert!(matches!(
        take_message(&mut buf).unwrap(),
        Some(Backend::Message(backend::Message::ReadyForQuery(_)))
    ));
    assert!(buf.is_empty());
}

#[test]
fn copy_both_responses_are_checked() {
    assert!(parse_copy_both_response(&[0, 0, 0]).is_ok());
    assert!(parse_copy_both_response(&[0, 0, 2, 0, 0, 0, 1]).is_ok());
    for bad in [
        &[][..],
        &[0],
        &[0, 0],
        &[2, 0, 0],
        &[0, 0, 1],
        &[0, 0, 1, 0, 2],
        &[0, 0, 0, 0],
        &[0, 0xff, 0xff],
    ] {
        assert!(parse_copy_both_response(bad).is_err(), "{bad:?}");
    }
    let mut buf = BytesMut::from(&frame(b'W', &[0, 0, 0])[..]);
    assert!(matches!(
        take_message(&mut buf).unwrap(),
        Some(Backend::CopyBothResponse)
    ));
}

#[test]
fn error_responses_keep_sqlstate_and_message_but_not_detail() {
    let mut buf = BytesMut::from(&error_frame("42704", "slot \"x\" does not exist")[..]);
    let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
        take_message(&mut buf).unwrap()
    else {
        panic!("expected an ErrorResponse");
    };
    let error = server_error(&body);
    assert_eq!(error.code(), Some("42704"));
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("slot \"x\" does not exist"), "{shown}");
    assert!(!shown.contains("42)"), "DETAIL must be left out: {shown}");
    // In startup, class 28 is an authentication error.
    let mut buf = BytesMut::from(&error_frame("28P01", "password authentication failed")[..]);
    let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
        take_message(&mut buf).unwrap()
    else {
        panic!("expected an ErrorResponse");
    };
    assert!(matches!(
        startup_error(&body),
        ReplicationError::Auth { code: Some(c), .. } if c == "28P01"
    ));
    // Missing fields, and a long message is cut.
    let mut buf = BytesMut::from(&frame(b'E', b"SERROR\0Mno code\0\0")[..]);
    let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
        take_message(&mut buf).unwrap()
    else {
        panic!("expected an ErrorResponse");
    };
    assert!(matches!(
        server_error(&body),
        ReplicationError::Protocol { .. }
    ));
    let long = "x".repeat(10_000);
    let mut buf = BytesMut::from(&error_frame("XX000", &long)[..]);
    let Some(Backend::Message(backend::Message::ErrorResponse(body))) =
        take_message(&mut buf).unwrap()
    else {
        panic!("expected an ErrorResponse");
    };
    let ReplicationError::Server { message, .. } = server_error(&body) else {
        panic!("expected a server error");
    };
    assert_eq!(message.chars().count(), MAX_SERVER_TEXT_CHARS);
}

#[test]
fn start_replication_quotes_names_and_values() {
    let command = start_logical_command(
        "my\"slot",
        0x16_B374_D848,
        &[
            ("proto_version", "1"),
            ("publication_names", "\"pub\",\"it's\""),
            ("odd\"name", "it's"),
        ],
    )
    .unwrap();
    assert_eq!(
        command,
        "START_REPLICATION SLOT \"my\"\"slot\" LOGICAL 16/B374D848 (\"proto_version\" '1', \
         \"publication_names\" '\"pub\",\"it''s\"', \"odd\"\"name\" 'it''s')"
    );
    assert_eq!(
        start_logical_command("s", 0, &[]).unwrap(),
        "START_REPLICATION SLOT \"s\" LOGICAL 0/0"
    );
    for (slot, options) in [
        ("", &[][..]),
        ("a\0b", &[]),
        ("s", &[("", "1")]),
        ("s", &[("a", "\0")]),
    ] {
        assert!(matches!(
            start_logical_command(slot, 0, options),
            Err(ReplicationError::InvalidArgument { .. })
        ));
    }
}

#[test]
fn status_updates_have_the_documented_layout() {
    let payload = encode_status_update(1, 2, 3, -4, true);
    let mut expected = vec![b'r'];
    for v in [1u64, 2, 3] {
        expected.extend(v.to_be_bytes());
    }
    expected.extend((-4i64).to_be_bytes());
    expected.push(1);
    assert_eq!(payload.to_vec(), expected);
    assert_eq!(*encode_status_update(0, 0, 0, 0, false).last().unwrap(), 0);
    let now = now_pg_us();
    assert!(now > 700_000_000_000_000, "now is after 2022: {now}");
}

/// Every message of `buf`, each exercised the way the client uses it.
fn exercise(buf: &mut BytesMut, columns: usize) {
    loop {
        match take_message(buf) {
            Ok(Some(Backend::Message(message))) => match message {
                backend::Message::ErrorResponse(body) => {
                    let _ = server_error(&body);
                    let _ = startup_error(&body);
                }
                backend::Message::NoticeResponse(body) => log_notice(&body),
                backend::Message::DataRow(body) => {
                    let _ = data_row(&body, columns);
                }
                backend::Message::RowDescription(body) => {
                    let _ = row_columns(&body);
                }
                backend::Message::AuthenticationSasl(body) => {
                    let mut mechanisms = body.mechanisms();
                    while let Ok(Some(_)) = mechanisms.next() {}
                }
                backend::Message::ParameterStatus(body) => {
                    let _ = (body.name(), body.value());
                }
                backend::Message::CopyData(body) => {
                    let _ = parse_copy_data(body.into_bytes());
                }
                backend::Message::CommandComplete(body) => {
                    let _ = body.tag();
                }
                _ => {}
            },
            Ok(Some(Backend::CopyBothResponse)) => {}
            Ok(None) | Err(_) => return,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn copy_data_parsing_never_panics(
        tag in prop::sample::select(vec![b'w', b'k', b'r', b'x', 0]),
        rest in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut payload = vec![tag];
        payload.extend(&rest);
        let _ = parse_copy_data(Bytes::from(payload));
        let _ = parse_copy_data(Bytes::from(rest));
    }

    #[test]
    fn xlog_data_round_trips(
        wal_start: u64,
        wal_end: u64,
        time: i64,
        data in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let parsed = parse_copy_data(Bytes::from(xlog_data(wal_start, wal_end, time, &data)));
        match time.checked_add(PG_EPOCH_OFFSET_US) {
            Some(server_time_us) => prop_assert_eq!(
                parsed.unwrap(),
                ReplicationEvent::XLogData { wal_start, wal_end, server_time_us, data: Bytes::from(data) }
            ),
            None => prop_assert!(parsed.is_err()),
        }
    }

    #[test]
    fn keepalives_round_trip(wal_end: u64, time: i64, reply: bool) {
        let parsed = parse_copy_data(Bytes::from(keepalive(wal_end, time, u8::from(reply))));
        match time.checked_add(PG_EPOCH_OFFSET_US) {
            Some(server_time_us) => prop_assert_eq!(
                parsed.unwrap(),
                ReplicationEvent::Keepalive { wal_end, server_time_us, reply_requested: reply }
            ),
            None => prop_assert!(parsed.is_err()),
        }
    }

    /// Well-framed messages of every type with random bodies, then garbage.
    #[test]
    fn framed_garbage_never_panics(
        frames in prop::collection::vec(
            (
                prop::sample::select(b"RSKZTDCIEdcNWAHGnst123v\0".to_vec()),
                prop::collection::vec(any::<u8>(), 0..40),
            ),
            0..8,
        ),
        tail in prop::collection::vec(any::<u8>(), 0..24),
        columns in 0usize..4,
    ) {
        let mut buf = BytesMut::new();
        for (tag, body) in &frames {
            buf.extend_from_slice(&frame(*tag, body));
        }
        buf.extend_from_slice(&tail);
        exercise(&mut buf, columns);
    }

    #[test]
    fn raw_garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..96), columns in 0usize..4) {
        exercise(&mut BytesMut::from(&bytes[..]), columns);
    }

    #[test]
    fn lsns_round_trip(lsn: u64) {
        prop_assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
        prop_assert_eq!(parse_lsn(&format_lsn(lsn).to_lowercase()), Some(lsn));
    }

    #[test]
    fn lsn_parsing_never_panics(text in "[0-9a-fA-F/+ xG-]{0,20}") {
        if let Some(lsn) = parse_lsn(&text) {
            prop_assert_eq!(parse_lsn(&format_lsn(lsn)), Some(lsn));
        }
    }
}
