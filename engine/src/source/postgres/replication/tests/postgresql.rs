//! Against a real PostgreSQL: authentication, commands, streaming, acknowledgement.

use super::*;

// ---- against a real PostgreSQL ---------------------------------------------------

static CLUSTER: OnceLock<LocalPg> = OnceLock::new();

/// The cluster shared by these tests: trust for `postgres`, SCRAM for `SCRAM_USER`.
async fn cluster() -> &'static LocalPg {
    tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| {
            let options = LocalPgOptions {
                password_user: Some((SCRAM_USER.into(), SCRAM_PASSWORD.into())),
                ..LocalPgOptions::default()
            };
            LocalPg::start(&options)
                .expect("start a throwaway PostgreSQL (these tests need the server binaries)")
        })
    })
    .await
    .expect("the start task panicked")
}

async fn sql_client(dsn: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect with tokio-postgres");
    tokio::spawn(connection);
    client
}

fn password_dsn(pg: &LocalPg, user: &str, password: &str, db: &str) -> String {
    format!(
        "postgres://{user}:{password}@{}:{}/{db}",
        pg.host(),
        pg.port()
    )
}

async fn connect(dsn: &str) -> ReplicationClient {
    ReplicationClient::connect(&Dsn::new(dsn))
        .await
        .unwrap_or_else(|e| panic!("connect for replication: {e}"))
}

/// Creates a pgoutput slot through the replication connection; its consistent point.
async fn create_slot(client: &mut ReplicationClient, slot: &str) -> u64 {
    let sql = format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput NOEXPORT_SNAPSHOT",
        quote_ident(slot)
    );
    let rows = client.simple_query(&sql).await.expect("create the slot");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][0].as_deref(), Some(slot));
    assert_eq!(rows[0][2], None, "NOEXPORT_SNAPSHOT");
    assert_eq!(rows[0][3].as_deref(), Some("pgoutput"));
    parse_lsn(rows[0][1].as_deref().unwrap()).unwrap()
}

/// A database with table `items` in publication `pub`: its superuser DSN.
async fn publishing_database(pg: &LocalPg, db: &str) -> String {
    let dsn = pg.create_database(db).await.expect("create the database");
    sql_client(&dsn)
        .await
        .batch_execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(10,2)); \
             CREATE PUBLICATION pub FOR TABLE items",
        )
        .await
        .expect("create the table and the publication");
    dsn
}

async fn next_event(stream: &mut ReplicationStream) -> ReplicationEvent {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("an event in time")
        .unwrap_or_else(|e| panic!("next event: {e}"))
        .expect("the stream goes on")
}

/// Reads up to a Commit and decodes everything from its Begin; keepalives that ask
/// for a reply are answered with `ack` (0 acknowledges nothing).
async fn receive_transaction(
    stream: &mut ReplicationStream,
    decoder: &mut Decoder,
    ack: u64,
) -> Vec<M> {
    let mut messages = vec![];
    loop {
        match next_event(stream).await {
            ReplicationEvent::XLogData {
                data,
                server_time_us,
                ..
            } => {
                let now = unix_now_us();
                assert!(
                    (now - 60_000_000..=now + 60_000_000).contains(&server_time_us),
                    "send time {server_time_us} is not about now ({now})"
                );
                let message = decoder.decode(&data).expect("decode a pgoutput message");
                let commit = matches!(message, M::Commit(_));
                messages.push(message);
                if commit {
                    assert!(matches!(messages[0], M::Begin(_)), "{messages:?}");
                    return messages;
                }
            }
            ReplicationEvent::Keepalive {
                reply_requested: true,
                ..
            } => stream
                .send_status(ack, ack, ack, false)
                .await
                .expect("answer a keepalive"),
            ReplicationEvent::Keepalive { .. } => {}
        }
    }
}

fn begin(messages: &[M]) -> &Begin {
    match &messages[0] {
        M::Begin(begin) => begin,
        other => panic!("expected Begin, got {other:?}"),
    }
}

fn commit_end(messages: &[M]) -> u64 {
    match messages.last() {
        Some(M::Commit(commit)) => commit.end_lsn,
        other => panic!("expected Commit, got {other:?}"),
    }
}

/// The first column of every Insert, as text.
fn inserted_ids(messages: &[M]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            M::Insert(insert) => Some(text(&insert.new[0])),
            _ => None,
        })
        .collect()
}

fn text(value: &TupleValue) -> String {
    match value {
        TupleValue::Text(bytes) => String::from_utf8(bytes.clone()).unwrap(),
        other => panic!("expected a text value, got {other:?}"),
    }
}

fn unix_now_us() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_micros()).unwrap()
}

async fn confirmed_flush(sql: &tokio_postgres::Client, slot: &str) -> u64 {
    let row = sql
        .query_one(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("read the slot");
    parse_lsn(row.get::<_, &str>(0)).unwrap()
}

async fn wait_for_confirmed_flush(sql: &tokio_postgres::Client, slot: &str, expected: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let confirmed = confirmed_flush(sql, slot).await;
        if confirmed == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "confirmed_flush_lsn is {}, expected {}",
            format_lsn(confirmed),
            format_lsn(expected)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn current_wal_lsn(sql: &tokio_postgres::Client) -> u64 {
    let row = sql
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await
        .unwrap();
    parse_lsn(row.get::<_, &str>(0)).unwrap()
}

/// Starts streaming `slot`, retrying while the server still holds it for a
/// connection that was just dropped (SQLSTATE 55006).
async fn start_with_retry(dsn: &str, slot: &str, start_lsn: u64) -> ReplicationStream {
    let deadline = Instant::now() + WAIT;
    loop {
        let client = connect(dsn).await;
        match client.start_logical(slot, start_lsn, &PGOUTPUT).await {
            Ok(stream) => return stream,
            Err(e) if e.code() == Some("55006") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("start replication: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connects_with_trust_over_tcp_and_a_unix_socket() {
    let pg = cluster().await;
    let dsn = pg.create_database("repl_trust").await.unwrap();
    let mut client = connect(&dsn).await;
    assert!(
        client
            .server_version()
            .is_some_and(|v| v.starts_with(char::is_numeric))
    );
    let rows = client
        .simple_query("SELECT current_user, current_setting('application_name'), NULL")
        .await
        .unwrap();
    assert_eq!(
        rows,
        [[Some("postgres".to_owned()), Some("weir".to_owned()), None]]
    );
    client.close().await;

    let unix = format!(
        "host={} port={} user=postgres dbname=repl_trust application_name=weir_unix",
        pg.socket_dir().display(),
        pg.port()
    );
    let mut client = connect(&unix).await;
    let info = client.identify_system().await.unwrap();
    assert_eq!(info.dbname.as_deref(), Some("repl_trust"));
    let rows = client
        .simple_query(
            "SELECT current_setting('application_name'); SELECT 1, 2 UNION ALL SELECT 3, 4",
        )
        .await
        .unwrap();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        rows,
        [
            vec![some("weir_unix")],
            vec![some("1"), some("2")],
            vec![some("3"), some("4")]
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn connects_with_scram_sha_256() {
    let pg = cluster().await;
    let dsn = pg.create_database("repl_scram").await.unwrap();
    let stored = sql_client(&dsn)
        .await
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
            &[&SCRAM_USER],
        )
        .await
        .unwrap()
        .get::<_, String>(0);
    assert!(
        stored.starts_with("SCRAM-SHA-256$"),
        "the default stays SCRAM"
    );
    let mut client = connect(&password_dsn(pg, SCRAM_USER, SCRAM_PASSWORD, "repl_scram")).await;
    let rows = client.simple_query("SELECT current_user").await.unwrap();
    assert_eq!(rows, [[Some(SCRAM_USER.to_owned())]]);
    // The password is really needed.
    let without = format!(
        "postgres://{SCRAM_USER}@{}:{}/repl_scram",
        pg.host(),
        pg.port()
    );
    let error = ReplicationClient::connect(&Dsn::new(without))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ReplicationError::Auth { code: None, .. }),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn connects_with_md5_and_refuses_a_wrong_md5_password() {
    let pg = tokio::task::spawn_blocking(|| {
        LocalPg::start(&LocalPgOptions {
            password_user: Some((MD5_USER.into(), MD5_PASSWORD.into())),
            password_auth: PasswordAuth::Md5,
            ..LocalPgOptions::default()
        })
    })
    .await
    .unwrap()
    .expect("start a throwaway PostgreSQL (this test needs the server binaries)");
    let dsn = pg.create_database("repl_md5").await.unwrap();
    let stored = sql_client(&dsn)
        .await
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
            &[&MD5_USER],
        )
        .await
        .unwrap()
        .get::<_, String>(0);
    assert!(stored.starts_with("md5"), "the password is stored as md5");
    let mut client = connect(&password_dsn(&pg, MD5_USER, MD5_PASSWORD, "repl_md5")).await;
    let rows = client.simple_query("SELECT current_user").await.unwrap();
    assert_eq!(rows, [[Some(MD5_USER.to_owned())]]);

    let wrong = password_dsn(&pg, MD5_USER, WRONG_PASSWORD, "repl_md5");
    let error = ReplicationClient::connect(&Dsn::new(wrong.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ReplicationError::Auth { code: Some(c), .. } if c == "28P01"),
        "{error}"
    );
    assert_shows_no_secret(&error, &[MD5_PASSWORD, WRONG_PASSWORD, &wrong]);
}

/// Display, Debug and every source of `error` hold none of `secrets`.
fn assert_shows_no_secret(error: &ReplicationError, secrets: &[&str]) {
    let mut shown = format!("{error}\n{error:?}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        shown.push_str(&format!("\n{cause}\n{cause:?}"));
        source = cause.source();
    }
    for secret in secrets {
        assert!(!shown.contains(secret), "a secret is shown: {shown}");
    }
}

/// Collects log output.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_dsn_or_password_in_errors_or_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let pg = cluster().await;
    pg.create_database("repl_secrets").await.unwrap();
    let right = password_dsn(pg, SCRAM_USER, SCRAM_PASSWORD, "repl_secrets");
    let wrong = password_dsn(pg, SCRAM_USER, WRONG_PASSWORD, "repl_secrets");
    let secrets = [
        SCRAM_PASSWORD,
        WRONG_PASSWORD,
        right.as_str(),
        wrong.as_str(),
    ];

    let mut client = connect(&right).await;
    let error = client
        .simple_query("SELECT * FROM nowhere")
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("42P01"));
    assert_shows_no_secret(&error, &secrets);
    let rows = client.simple_query("SELECT 1").await.unwrap();
    assert_eq!(
        rows,
        [[Some("1".to_owned())]],
        "usable after a server error"
    );
    let mut stream = client.start_logical("no_such_slot", 0, &PGOUTPUT).await;
    let error = stream.as_mut().err().unwrap();
    assert_eq!(error.code(), Some("42704"));
    assert_shows_no_secret(error, &secrets);

    let error = ReplicationClient::connect(&Dsn::new(wrong.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ReplicationError::Auth { code: Some(c), .. } if c == "28P01"),
        "{error}"
    );
    assert_shows_no_secret(&error, &secrets);

    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let bad_dsns = [
        format!("postgres://{SCRAM_USER}:{SCRAM_PASSWORD}@127.0.0.1:notaport/db"),
        format!("host=127.0.0.1 password={SCRAM_PASSWORD} user=x sslmode=require"),
        format!("host=127.0.0.1 password={SCRAM_PASSWORD} user=x channel_binding=require"),
        format!("password={SCRAM_PASSWORD} user=x"),
        format!("host=127.0.0.1 password={SCRAM_PASSWORD} nonsense={SCRAM_PASSWORD}"),
        format!("postgres://{SCRAM_USER}:{SCRAM_PASSWORD}@127.0.0.1:{closed_port}/db"),
    ];
    for dsn in &bad_dsns {
        let error = ReplicationClient::connect(&Dsn::new(dsn.clone()))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                ReplicationError::Config { .. }
                    | ReplicationError::Connect { .. }
                    | ReplicationError::Settings(_)
                    | ReplicationError::Tls(_)
                    | ReplicationError::Auth { .. }
            ),
            "{error}"
        );
        assert_shows_no_secret(&error, &[&secrets[..], &[dsn.as_str()]].concat());
    }

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    // Some lines were captured (which ones depends on tracing's per-callsite
    // interest cache, shared with the tests running beside this one).
    assert!(!logs.is_empty(), "no log line was captured");
    for secret in secrets.iter().chain(
        bad_dsns
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .iter(),
    ) {
        assert!(!logs.contains(secret), "a secret is logged: {logs}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn identify_system_and_slot_commands() {
    let pg = cluster().await;
    let dsn = pg.create_database("repl_identify").await.unwrap();
    let sql = sql_client(&dsn).await;
    let mut client = connect(&dsn).await;
    let info = client.identify_system().await.unwrap();
    assert!(info.system_id > 0);
    assert_eq!(info.timeline, 1);
    assert_eq!(info.dbname.as_deref(), Some("repl_identify"));
    let current = current_wal_lsn(&sql).await;
    assert!(
        0 < info.xlogpos && info.xlogpos <= current,
        "xlogpos {} against the current {}",
        format_lsn(info.xlogpos),
        format_lsn(current)
    );

    let consistent = create_slot(&mut client, "identify_slot").await;
    assert!(consistent >= info.xlogpos);
    let row = sql
        .query_one(
            "SELECT plugin, database, confirmed_flush_lsn::text, active \
             FROM pg_replication_slots WHERE slot_name = 'identify_slot'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "pgoutput");
    assert_eq!(row.get::<_, &str>(1), "repl_identify");
    assert_eq!(parse_lsn(row.get::<_, &str>(2)), Some(consistent));
    assert!(!row.get::<_, bool>(3));

    // Errors leave the connection usable.
    let again = client
        .simple_query("CREATE_REPLICATION_SLOT \"identify_slot\" LOGICAL pgoutput")
        .await
        .unwrap_err();
    assert_eq!(again.code(), Some("42710"), "{again}");
    let syntax = client.simple_query("SELEC 1").await.unwrap_err();
    assert_eq!(syntax.code(), Some("42601"), "{syntax}");
    let nul = client.simple_query("SELECT '\0'").await.unwrap_err();
    assert!(matches!(nul, ReplicationError::InvalidArgument { .. }));
    let empty = client.simple_query("").await.unwrap();
    assert!(empty.is_empty());
    let big = client
        .simple_query("SELECT repeat('x', 1000000) FROM generate_series(1, 20)")
        .await
        .unwrap_err();
    assert!(
        matches!(big, ReplicationError::ResultTooLarge { .. }),
        "{big}"
    );
    assert_eq!(client.identify_system().await.unwrap().dbname, info.dbname);
    client
        .simple_query("DROP_REPLICATION_SLOT \"identify_slot\"")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_a_transaction_and_answers_keepalives() {
    let pg = cluster().await;
    let dsn = publishing_database(pg, "repl_stream").await;
    let mut sql = sql_client(&dsn).await;
    // A 2 s wal_sender_timeout for this connection: keepalives asking for a reply
    // come every second, and no reply within 2 s ends the connection.
    let app = "weir_stream_test";
    let repl_dsn = format!("{dsn}?application_name={app}&options=-c%20wal_sender_timeout%3D2s");
    let mut client = connect(&repl_dsn).await;
    create_slot(&mut client, "stream_slot").await;
    let mut stream = client
        .start_logical("stream_slot", 0, &PGOUTPUT)
        .await
        .unwrap();

    let tx = sql.transaction().await.unwrap();
    tx.batch_execute("INSERT INTO items VALUES (1, 'one', 1.5), (2, 'it''s two', NULL)")
        .await
        .unwrap();
    let txid: i64 = tx
        .query_one("SELECT txid_current()", &[])
        .await
        .unwrap()
        .get(0);
    tx.batch_execute(
        "SELECT pg_logical_emit_message(true, 'weir', 'hello'); \
         INSERT INTO items VALUES (3, 'three', 3)",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let messages = receive_transaction(&mut stream, &mut Decoder::new(), 0).await;
    let shapes: Vec<&str> = messages
        .iter()
        .map(|m| match m {
            M::Begin(_) => "Begin",
            M::Relation(_) => "Relation",
            M::Insert(_) => "Insert",
            M::Message(_) => "Message",
            M::Commit(_) => "Commit",
            _ => "other",
        })
        .collect();
    assert_eq!(
        shapes,
        [
            "Begin", "Relation", "Insert", "Insert", "Message", "Insert", "Commit"
        ]
    );
    let begin = begin(&messages);
    assert_eq!(i64::from(begin.xid), txid & 0xFFFF_FFFF);
    let M::Relation(relation) = &messages[1] else {
        panic!("expected a Relation")
    };
    assert_eq!(
        (relation.namespace.as_str(), relation.name.as_str()),
        ("public", "items")
    );
    let names: Vec<&str> = relation.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["id", "name", "price"]);
    let rows: Vec<Vec<Option<String>>> = messages
        .iter()
        .filter_map(|m| match m {
            M::Insert(insert) => Some(
                insert
                    .new
                    .iter()
                    .map(|v| match v {
                        TupleValue::Null => None,
                        v => Some(text(v)),
                    })
                    .collect(),
            ),
            _ => None,
        })
        .collect();
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        rows,
        [
            vec![some("1"), some("one"), some("1.50")],
            vec![some("2"), some("it's two"), None],
            vec![some("3"), some("three"), some("3.00")],
        ]
    );
    let M::Message(message) = &messages[4] else {
        panic!("expected a Message")
    };
    assert!(message.transactional);
    assert_eq!(
        (message.prefix.as_str(), message.content.as_slice()),
        ("weir", &b"hello"[..])
    );
    let M::Commit(commit) = messages.last().unwrap() else {
        panic!("expected a Commit")
    };
    assert_eq!(commit.commit_lsn, begin.final_lsn);
    assert!(commit.end_lsn > commit.commit_lsn);
    assert!(commit.end_lsn <= current_wal_lsn(&sql).await);
    let end = commit.end_lsn;

    // Keepalives asking for a reply come; answered, the connection outlives several
    // wal_sender_timeouts.
    let started = Instant::now();
    let mut answered = 0;
    while started.elapsed() < Duration::from_secs(5) {
        match next_event(&mut stream).await {
            ReplicationEvent::Keepalive {
                reply_requested: true,
                wal_end,
                ..
            } => {
                assert!(wal_end >= end);
                stream.send_status(end, end, end, false).await.unwrap();
                answered += 1;
            }
            ReplicationEvent::Keepalive { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        answered >= 2,
        "{answered} keepalives asked for a reply in 5 s"
    );
    let row = sql
        .query_one(
            "SELECT flush_lsn::text, reply_time IS NOT NULL FROM pg_stat_replication \
             WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap();
    assert_eq!(parse_lsn(row.get::<_, &str>(0)), Some(end));
    assert!(row.get::<_, bool>(1));
    wait_for_confirmed_flush(&sql, "stream_slot", end).await;

    // Asking for a reply gets a keepalive back.
    stream.send_status(end, end, end, true).await.unwrap();
    let reply = next_event(&mut stream).await;
    assert!(
        matches!(reply, ReplicationEvent::Keepalive { .. }),
        "{reply:?}"
    );

    stream.stop().await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let active: bool = sql
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = 'stream_slot'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if !active {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot stays active after stop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_slot_confirms_exactly_the_flush_position_sent() {
    let pg = cluster().await;
    let dsn = publishing_database(pg, "repl_flush").await;
    let sql = sql_client(&dsn).await;
    let mut client = connect(&dsn).await;
    let consistent = create_slot(&mut client, "flush_slot").await;
    let mut stream = client
        .start_logical("flush_slot", 0, &PGOUTPUT)
        .await
        .unwrap();
    sql.batch_execute("INSERT INTO items VALUES (1, 'one', 1)")
        .await
        .unwrap();
    sql.batch_execute("INSERT INTO items VALUES (2, 'two', 2)")
        .await
        .unwrap();
    let mut decoder = Decoder::new();
    let first = receive_transaction(&mut stream, &mut decoder, 0).await;
    let second = receive_transaction(&mut stream, &mut decoder, 0).await;
    assert_eq!(
        (inserted_ids(&first), inserted_ids(&second)),
        (vec!["1".to_owned()], vec!["2".to_owned()])
    );
    let (end1, end2) = (commit_end(&first), commit_end(&second));
    assert!(consistent < end1 && end1 < end2);
    assert_eq!(
        confirmed_flush(&sql, "flush_slot").await,
        consistent,
        "nothing is acknowledged before send_status"
    );

    // Written up to the second transaction, flushed up to the first only.
    stream.send_status(end2, end1, end1, false).await.unwrap();
    wait_for_confirmed_flush(&sql, "flush_slot", end1).await;
    assert!(end1 < current_wal_lsn(&sql).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        confirmed_flush(&sql, "flush_slot").await,
        end1,
        "never beyond"
    );

    stream.send_status(end2, end2, end2, false).await.unwrap();
    wait_for_confirmed_flush(&sql, "flush_slot", end2).await;
    // A smaller flush position does not move the slot back.
    stream.send_status(end1, end1, end1, true).await.unwrap();
    let _ = next_event(&mut stream).await; // the reply: the update was processed
    assert_eq!(
        confirmed_flush(&sql, "flush_slot").await,
        end2,
        "never back"
    );
    stream.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn unacknowledged_transactions_are_delivered_again() {
    let pg = cluster().await;
    let dsn = publishing_database(pg, "repl_redeliver").await;
    let sql = sql_client(&dsn).await;
    let mut client = connect(&dsn).await;
    create_slot(&mut client, "redeliver_slot").await;
    let mut stream = client
        .start_logical("redeliver_slot", 0, &PGOUTPUT)
        .await
        .unwrap();
    sql.batch_execute("INSERT INTO items VALUES (10, 'ten', 10)")
        .await
        .unwrap();
    sql.batch_execute("INSERT INTO items VALUES (20, 'twenty', 20)")
        .await
        .unwrap();
    let mut decoder = Decoder::new();
    let first = receive_transaction(&mut stream, &mut decoder, 0).await;
    let second = receive_transaction(&mut stream, &mut decoder, 0).await;
    let (end1, end2) = (commit_end(&first), commit_end(&second));
    stream.send_status(end1, end1, end1, false).await.unwrap();
    wait_for_confirmed_flush(&sql, "redeliver_slot", end1).await;
    drop(stream); // the connection closes; the second transaction was not acknowledged

    let mut stream = start_with_retry(&dsn, "redeliver_slot", end1).await;
    let mut decoder = Decoder::new();
    let again = receive_transaction(&mut stream, &mut decoder, end1).await;
    assert_eq!(
        inserted_ids(&again),
        ["20"],
        "the first transaction is not sent again"
    );
    assert_eq!(begin(&again), begin(&second));
    assert_eq!(commit_end(&again), end2);
    stream.send_status(end2, end2, end2, false).await.unwrap();
    wait_for_confirmed_flush(&sql, "redeliver_slot", end2).await;
    stream.stop().await.unwrap();

    // Acknowledged transactions are not sent again, from the slot's own position
    // (start 0/0) either.
    sql.batch_execute("INSERT INTO items VALUES (30, 'thirty', 30)")
        .await
        .unwrap();
    let mut stream = start_with_retry(&dsn, "redeliver_slot", 0).await;
    let third = receive_transaction(&mut stream, &mut Decoder::new(), end2).await;
    assert_eq!(inserted_ids(&third), ["30"]);
    stream.stop().await.unwrap();
}
