//! A fake server over an in-memory pipe: authentication, bounds, cancel safety.

use super::*;

// ---- a fake server over an in-memory pipe ----------------------------------------

async fn read_exactly(server: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut out = vec![0; n];
    server
        .read_exact(&mut out)
        .await
        .expect("read from the client");
    out
}

/// A frontend message: type byte and body.
async fn read_frame(server: &mut DuplexStream) -> (u8, Vec<u8>) {
    let header = read_exactly(server, 5).await;
    let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
    (header[0], read_exactly(server, len - 4).await)
}

/// The startup packet's parameters.
async fn read_startup(server: &mut DuplexStream) -> Vec<(String, String)> {
    let len = u32::from_be_bytes(read_exactly(server, 4).await.try_into().unwrap()) as usize;
    let body = read_exactly(server, len - 4).await;
    assert_eq!(body[..4], [0, 3, 0, 0], "protocol 3.0");
    let strings: Vec<String> = body[4..body.len() - 2]
        .split(|b| *b == 0)
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    strings
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}

fn fake_startup() -> Startup<'static> {
    Startup {
        user: "u",
        password: Some(b"pw"),
        database: Some("d"),
        application_name: "weir",
        options: None,
        channel_binding: ChannelBindingMode::Prefer,
    }
}

#[tokio::test]
async fn answers_a_cleartext_password_request() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let parameters = read_startup(&mut server).await;
        server.write_all(&auth_request(3, &[])).await.unwrap();
        let password = read_frame(&mut server).await;
        let reply = [
            auth_request(0, &[]),
            frame(b'S', b"server_version\x0015.4\0"),
            frame(b'K', &[0; 8]),
            ready(),
        ];
        server.write_all(&reply.concat()).await.unwrap();
        (parameters, password, server)
    });
    let conn = start_up(Box::new(client), &fake_startup(), &Binding::default())
        .await
        .unwrap();
    assert_eq!(conn.server_version.as_deref(), Some("15.4"));
    let (parameters, password, _server) = server.await.unwrap();
    let expected = [
        ("user", "u"),
        ("replication", "database"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "UTC"),
        ("extra_float_digits", "3"),
        ("application_name", "weir"),
        ("database", "d"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(parameters, expected);
    assert_eq!(password, (b'p', b"pw\0".to_vec()));
}

#[tokio::test]
async fn unsupported_or_unexpected_authentication_fails_cleanly() {
    for (request, expect_auth) in [
        (auth_request(7, &[]), true),                        // GSSAPI
        (auth_request(10, b"SCRAM-SHA-256-PLUS\0\0"), true), // needs TLS
        (auth_request(10, b"SCRAM"), false),                 // malformed list
        (auth_request(99, &[]), false),                      // unknown request
        (ready(), false),                                    // no authentication
    ] {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            read_startup(&mut server).await;
            server.write_all(&request).await.unwrap();
            server
        });
        let error = match start_up(Box::new(client), &fake_startup(), &Binding::default()).await {
            Ok(_) => panic!("authentication should fail"),
            Err(error) => error,
        };
        let _server = server.await.unwrap();
        if expect_auth {
            assert!(matches!(error, ReplicationError::Auth { .. }), "{error}");
        } else {
            assert!(
                matches!(error, ReplicationError::Protocol { .. }),
                "{error}"
            );
        }
    }
    // A password request without a password.
    let (client, mut server) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        read_startup(&mut server).await;
        server.write_all(&auth_request(5, b"salt")).await.unwrap();
        server
    });
    let startup = Startup {
        password: None,
        ..fake_startup()
    };
    let error = start_up(Box::new(client), &startup, &Binding::default())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(error, ReplicationError::Auth { code: None, .. }),
        "{error}"
    );
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_memory_follows_the_bytes_received() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::new(Box::new(client));
    server.write_all(b"d\x40\0\0\x01").await.unwrap();
    let error = conn.read_message().await.err().unwrap();
    assert!(
        matches!(&error, ReplicationError::Protocol { what } if what.contains("limit")),
        "{error}"
    );

    // 1 GiB announced, 10 kB sent, then the server goes away.
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::new(Box::new(client));
    server.write_all(b"d\x40\0\0\0").await.unwrap();
    server.write_all(&[7; 10_000]).await.unwrap();
    drop(server);
    let error = conn.read_message().await.err().unwrap();
    assert!(matches!(error, ReplicationError::Closed), "{error}");
    assert!(
        conn.read_buf.capacity() < 1 << 20,
        "{} bytes reserved for 10 kB received",
        conn.read_buf.capacity()
    );

    // A large message arrives whole; the buffer lets go of it afterwards.
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut conn = Connection::new(Box::new(client));
    let large = xlog_data(1, 2, 3, &vec![5; 6 << 20]);
    let bytes = [frame(b'd', &large), frame(b'd', &keepalive(4, 5, 0))].concat();
    let writer = tokio::spawn(async move {
        server.write_all(&bytes).await.unwrap();
        server
    });
    let Backend::Message(backend::Message::CopyData(body)) = conn.read_message().await.unwrap()
    else {
        panic!("expected CopyData");
    };
    let data = body.into_bytes();
    assert_eq!(data, large);
    assert!(
        data.is_unique(),
        "the read buffer still holds the message's memory"
    );
    assert!(
        conn.read_buf.capacity() < 1 << 20,
        "{} bytes kept after a 6 MiB message",
        conn.read_buf.capacity()
    );
    assert!(matches!(
        conn.read_message().await.unwrap(),
        Backend::Message(backend::Message::CopyData(_))
    ));
    let _server = writer.await.unwrap();
}

fn fake_stream(client: DuplexStream) -> ReplicationStream {
    ReplicationStream {
        conn: Connection::new(Box::new(client)),
        state: StreamState::Streaming,
        flushed_floor: 0x100,
    }
}

#[tokio::test]
async fn next_is_cancel_safe_while_bytes_trickle_in() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    let payload = xlog_data(5, 6, 7, &[9; 300]);
    let bytes = [frame(b'd', &payload), frame(b'd', &keepalive(8, 9, 1))].concat();
    let writer = tokio::spawn(async move {
        for chunk in bytes.chunks(7) {
            server.write_all(chunk).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        server
    });
    let mut events = vec![];
    let mut timeouts = 0;
    while events.len() < 2 {
        match tokio::time::timeout(Duration::from_micros(300), stream.next()).await {
            Ok(event) => events.push(event.unwrap().unwrap()),
            Err(_) => timeouts += 1,
        }
    }
    assert!(timeouts > 0, "the reads were never cancelled");
    assert_eq!(events[0], parse_copy_data(Bytes::from(payload)).unwrap());
    assert!(matches!(
        events[1],
        ReplicationEvent::Keepalive {
            wal_end: 8,
            reply_requested: true,
            ..
        }
    ));
    let _server = writer.await.unwrap();
}

#[tokio::test]
async fn status_updates_never_move_the_flush_position_back() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    stream
        .send_status(0x300, 0x200, 0x200, false)
        .await
        .unwrap();
    stream.send_status(0x300, 0x150, 0x150, true).await.unwrap();
    stream.send_status(0x50, 0x50, 0x50, false).await.unwrap();
    let mut flushed = vec![];
    for _ in 0..3 {
        let (tag, payload) = read_frame(&mut server).await;
        assert_eq!(
            (tag, payload.len(), payload[0]),
            (b'd', STATUS_UPDATE_BYTES, b'r')
        );
        flushed.push(u64::from_be_bytes(payload[9..17].try_into().unwrap()));
    }
    assert_eq!(flushed, [0x200, 0x200, 0x200]);

    // Below the start position at first.
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    stream.send_status(0, 0, 0, false).await.unwrap();
    let (_, payload) = read_frame(&mut server).await;
    assert_eq!(
        u64::from_be_bytes(payload[9..17].try_into().unwrap()),
        0x100
    );
}

#[tokio::test]
async fn the_server_ending_the_copy_ends_the_stream() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    let server = tokio::spawn(async move {
        server.write_all(&frame(b'c', b"")).await.unwrap();
        let copy_done = read_frame(&mut server).await;
        let reply = [frame(b'C', b"START_REPLICATION\0"), ready()].concat();
        server.write_all(&reply).await.unwrap();
        (copy_done, server)
    });
    assert!(stream.next().await.unwrap().is_none());
    assert!(stream.next().await.unwrap().is_none());
    let (copy_done, _server) = server.await.unwrap();
    assert_eq!(copy_done, (b'c', vec![]));
    assert!(matches!(
        stream.send_status(1, 1, 1, false).await,
        Err(ReplicationError::Closed)
    ));
}

#[tokio::test]
async fn an_error_ends_the_stream_for_good() {
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    let bytes = error_frame(
        "57P01",
        "terminating connection due to administrator command",
    );
    server.write_all(&bytes).await.unwrap();
    let error = stream.next().await.unwrap_err();
    assert_eq!(error.code(), Some("57P01"));
    assert!(matches!(
        stream.next().await,
        Err(ReplicationError::Unusable)
    ));
    assert!(matches!(
        stream.send_status(1, 1, 1, false).await,
        Err(ReplicationError::Unusable)
    ));
    stream.stop().await.unwrap();

    // Garbage in the stream.
    let (client, mut server) = tokio::io::duplex(1 << 16);
    let mut stream = fake_stream(client);
    server.write_all(&frame(b'd', b"zzz")).await.unwrap();
    assert!(matches!(
        stream.next().await,
        Err(ReplicationError::Protocol { .. })
    ));
    assert!(matches!(
        stream.next().await,
        Err(ReplicationError::Unusable)
    ));
}
