//! The replication connection: replication commands, simple queries, and
//! `START_REPLICATION`.

use std::fmt;
use std::io;
use std::time::Duration;

use postgres_protocol::message::{backend, frontend};
use tokio_postgres::config::TargetSessionAttrs;

use crate::config::{Dsn, quote_ident};
use crate::pgconn::{PgSettings, SslMode, TlsError, TlsSetup};

use super::error::{ReplicationError, protocol};
use super::startup::{Binding, DEFAULT_APPLICATION_NAME, Startup, Target, open, start_up, targets};
use super::stream::{ReplicationStream, StreamState};
use super::wire::{Backend, Connection, log_notice, server_error, unexpected};
use crate::pg::lsn::{format_lsn, parse_lsn};

/// What `IDENTIFY_SYSTEM` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemInfo {
    /// The cluster's unique system identifier.
    pub system_id: u64,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position (an LSN).
    pub xlogpos: u64,
    /// The database connected to (`None` for a physical replication connection).
    pub dbname: Option<String>,
}

/// A `replication=database` connection to PostgreSQL, before streaming.
///
/// It runs replication commands (`IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT`, ...) and
/// SQL through [`ReplicationClient::simple_query`], then becomes a
/// [`ReplicationStream`] with [`ReplicationClient::start_logical`]. Dropping it closes
/// the connection.
pub struct ReplicationClient {
    conn: Connection,
}

impl fmt::Debug for ReplicationClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicationClient")
            .field("server_version", &self.conn.server_version)
            .field("usable", &!self.conn.busy)
            .finish()
    }
}

impl ReplicationClient {
    /// Connects and authenticates.
    ///
    /// The DSN is parsed by `tokio_postgres::Config` (URL or key=value form); used are
    /// `host` (names, addresses or Unix socket directories, tried in order), `hostaddr`,
    /// `port`, `user`, `password`, `dbname`, `application_name` (default `weir`),
    /// `options` and `connect_timeout` (for each host: socket, authentication and
    /// startup), and `target_session_attrs` (`read-write` or libpq's `primary`: a
    /// read-only server, such as a standby, is skipped). The next host is tried only when
    /// a host cannot be reached or is skipped; an authentication or server error is
    /// returned at once. The startup packet asks for
    /// `replication=database` and `client_encoding=UTF8`, so text (including pgoutput's
    /// text values) arrives in UTF-8. Authentication: trust, cleartext password, md5,
    /// and SCRAM-SHA-256 (SCRAM-SHA-256-PLUS over TLS). TLS follows the DSN's `sslmode`
    /// and its files (see [`crate::pgconn`]), with the same rustls configuration as the
    /// SQL connections.
    pub async fn connect(dsn: &Dsn) -> Result<ReplicationClient, ReplicationError> {
        let settings = PgSettings::from_dsn(dsn)?;
        let tls = TlsSetup::new(&settings.ssl)?;
        let config = settings.config();
        let user = config.get_user().ok_or(ReplicationError::Config {
            what: "no user: set user in the DSN",
        })?;
        let startup = Startup {
            user,
            password: config.get_password(),
            database: config.get_dbname(),
            application_name: config
                .get_application_name()
                .unwrap_or(DEFAULT_APPLICATION_NAME),
            options: config.get_options(),
            channel_binding: settings.ssl.channel_binding,
        };
        let timeout = config.get_connect_timeout().copied();
        let targets = targets(config)?;
        let mut last_error = None;
        let mode = settings.ssl.mode;
        for (attempt, target) in targets.iter().enumerate() {
            let mut result = connect_to(target, &startup, timeout, mode, tls.as_ref(), false).await;
            // sslmode=allow: refused in clear (pg_hba.conf), try again with TLS as libpq does.
            if mode == SslMode::Allow
                && !matches!(target, Target::Unix(_))
                && matches!(&result, Err(ReplicationError::Auth { code: Some(c), .. }) if c.starts_with("28"))
            {
                tracing::debug!(
                    "the server refused a replication connection without TLS; trying TLS (sslmode=allow)"
                );
                result = connect_to(target, &startup, timeout, mode, tls.as_ref(), true).await;
            }
            match result {
                Ok((conn, tls)) => {
                    let tcp = !matches!(target, Target::Unix(_));
                    let mut client = ReplicationClient { conn };
                    if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite
                        && client.read_only().await?
                    {
                        // A standby (or a read-only primary): libpq goes on to the next
                        // host, and so does Weir; after a failover it is the new primary.
                        tracing::info!(
                            attempt,
                            "a host of the source DSN is read-only (a standby?): trying the next (target_session_attrs)"
                        );
                        client.close().await;
                        last_error = Some(ReplicationError::Connect {
                            source: std::io::Error::other(
                                "the server is read-only (a standby?) and the DSN asks for target_session_attrs=read-write or primary",
                            ),
                        });
                        continue;
                    }
                    tracing::debug!(
                        tcp,
                        tls,
                        server_version = client.conn.server_version.as_deref().unwrap_or(""),
                        "replication connection ready"
                    );
                    return Ok(client);
                }
                Err(error @ ReplicationError::Connect { .. }) => {
                    tracing::debug!(attempt, %error, "replication connection attempt failed");
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or(ReplicationError::Config {
            what: "no host to connect to",
        }))
    }

    /// Whether the server accepts only read-only transactions (`SHOW
    /// transaction_read_only`, a replication command): a standby in recovery does.
    async fn read_only(&mut self) -> Result<bool, ReplicationError> {
        let rows = self.simple_query("SHOW transaction_read_only").await?;
        Ok(rows
            .first()
            .and_then(|row| row.first())
            .and_then(Option::as_deref)
            == Some("on"))
    }

    /// The server's `server_version`, as reported at startup.
    pub fn server_version(&self) -> Option<&str> {
        self.conn.server_version.as_deref()
    }

    /// Runs SQL or a replication command with the simple query protocol and returns the
    /// rows of every statement, concatenated, as text (`None` for NULL).
    ///
    /// A server error is [`ReplicationError::Server`] (SQLSTATE and message) after the
    /// whole reply was read: the connection stays usable, as it does after
    /// [`ReplicationError::ResultTooLarge`]. COPY and `START_REPLICATION` are not
    /// supported here. Not cancel-safe (see the module documentation).
    pub async fn simple_query(
        &mut self,
        sql: &str,
    ) -> Result<Vec<Vec<Option<String>>>, ReplicationError> {
        self.conn.begin()?;
        let result = self.conn.simple_query(sql).await;
        if result
            .as_ref()
            .err()
            .is_none_or(|e| e.leaves_client_usable())
        {
            self.conn.busy = false;
        }
        result
    }

    /// `IDENTIFY_SYSTEM`: system identifier, timeline, current WAL position, database.
    pub async fn identify_system(&mut self) -> Result<SystemInfo, ReplicationError> {
        let rows = self.simple_query("IDENTIFY_SYSTEM").await?;
        let bad = |field: &str| protocol(format!("IDENTIFY_SYSTEM returned no valid {field}"));
        let [row] = rows.as_slice() else {
            return Err(bad("row"));
        };
        let [system_id, timeline, xlogpos, dbname] = row.as_slice() else {
            return Err(bad("row of four columns"));
        };
        Ok(SystemInfo {
            system_id: system_id
                .as_deref()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("systemid"))?,
            timeline: timeline
                .as_deref()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("timeline"))?,
            xlogpos: xlogpos
                .as_deref()
                .and_then(parse_lsn)
                .ok_or_else(|| bad("xlogpos"))?,
            dbname: dbname.clone(),
        })
    }

    /// `START_REPLICATION SLOT "slot" LOGICAL X/Y ("name" 'value', ...)`: streams the
    /// logical slot `slot`, with the output plugin's options (for pgoutput:
    /// `proto_version`, `publication_names`, `messages`, ...). The slot name and option
    /// names are quoted as identifiers, the values as literals; a value is passed to the
    /// plugin as is (`publication_names` is itself a list of identifiers: quote them,
    /// e.g. `"\"pub\""`).
    ///
    /// The server sends the transactions that commit after the slot's confirmed flush
    /// position or after `start_lsn`, whichever is later (`0` means "from the slot's
    /// position"): start from the last position acknowledged. On error the connection
    /// is closed (the client is consumed): reconnect. A slot still held by a previous
    /// connection that the server has not noticed gone yet is a
    /// [`ReplicationError::Server`] with SQLSTATE `55006` (retry shortly).
    pub async fn start_logical(
        mut self,
        slot: &str,
        start_lsn: u64,
        options: &[(&str, &str)],
    ) -> Result<ReplicationStream, ReplicationError> {
        let command = start_logical_command(slot, start_lsn, options)?;
        self.conn.begin()?;
        self.conn.write_buf.clear();
        frontend::query(&command, &mut self.conn.write_buf).map_err(|_| {
            ReplicationError::InvalidArgument {
                what: "the START_REPLICATION command is too long",
            }
        })?;
        self.conn.send().await?;
        loop {
            match self.conn.read_message().await? {
                Backend::CopyBothResponse => break,
                Backend::Message(backend::Message::ErrorResponse(body)) => {
                    let error = server_error(&body);
                    // Read to ReadyForQuery, so the server is not cut off mid-reply.
                    let _ = self
                        .conn
                        .drain_to_ready("after a failed START_REPLICATION")
                        .await;
                    self.conn.busy = false;
                    self.conn.terminate().await;
                    return Err(error);
                }
                Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
                Backend::Message(backend::Message::ParameterStatus(_)) => {}
                other => return Err(unexpected(&other, "in reply to START_REPLICATION")),
            }
        }
        self.conn.busy = false;
        tracing::info!(
            slot,
            start_lsn = %format_lsn(start_lsn),
            "logical replication started"
        );
        Ok(ReplicationStream {
            conn: self.conn,
            state: StreamState::Streaming,
            flushed_floor: start_lsn,
        })
    }

    /// Closes the connection politely (Terminate). Dropping the client also closes it.
    pub async fn close(self) {
        self.conn.terminate().await;
    }
}

/// Opens one target, negotiates TLS per `mode` (for `allow`, `allow_tls` says whether
/// this is the attempt with TLS) and starts up: the connection, and whether TLS is up.
async fn connect_to(
    target: &Target,
    startup: &Startup<'_>,
    timeout: Option<Duration>,
    mode: SslMode,
    tls: Option<&TlsSetup>,
    allow_tls: bool,
) -> Result<(Connection, bool), ReplicationError> {
    let attempt = async {
        let mut socket = open(target)
            .await
            .map_err(|source| ReplicationError::Connect { source })?;
        let host = match target {
            Target::Tcp(host, _) | Target::Addr(_, host) => host.as_str(),
            // libpq: TLS is never used over a Unix socket, whatever the sslmode.
            Target::Unix(_) => "",
        };
        let wants_tls = match mode {
            _ if host.is_empty() => false,
            SslMode::Disable => false,
            SslMode::Allow => allow_tls,
            SslMode::Prefer | SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => true,
        };
        let mut binding = Binding::default();
        if let (true, Some(tls)) = (wants_tls, tls) {
            let offered = crate::pgconn::negotiate(&mut socket)
                .await
                .map_err(|source| ReplicationError::Connect { source })?;
            if offered {
                let (stream, end_point) = tls.handshake(host, socket).await?;
                socket = Box::new(stream);
                binding = Binding {
                    tls: true,
                    end_point,
                };
            } else if mode.requires_tls() || mode == SslMode::Allow {
                return Err(ReplicationError::from(TlsError::not_offered(host, mode)));
            }
        }
        let tls_up = binding.tls;
        match start_up(socket, startup, &binding).await {
            Ok(conn) => Ok((conn, tls_up)),
            // Refused in clear by pg_hba.conf: say which setting lets it in.
            Err(ReplicationError::Auth {
                code: Some(code),
                message,
            }) if code == "28000"
                && !tls_up
                && !host.is_empty()
                && (message.contains("no encryption") || mode == SslMode::Disable) =>
            {
                Err(ReplicationError::Auth {
                    message: format!(
                        "{message}: the server refuses connections without TLS for this user and database: set sslmode=require, or verify-full with sslrootcert, in the DSN"
                    ),
                    code: Some(code),
                })
            }
            Err(error) => Err(error),
        }
    };
    match timeout {
        None => attempt.await,
        Some(timeout) => tokio::time::timeout(timeout, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(ReplicationError::Connect {
                    source: io::Error::new(io::ErrorKind::TimedOut, "connect_timeout passed"),
                })
            }),
    }
}

/// The START_REPLICATION command for a logical slot, every name and value quoted.
pub(super) fn start_logical_command(
    slot: &str,
    start_lsn: u64,
    options: &[(&str, &str)],
) -> Result<String, ReplicationError> {
    let names_ok = !slot.is_empty()
        && options.iter().all(|(name, _)| !name.is_empty())
        && !slot.contains('\0')
        && options
            .iter()
            .all(|(name, value)| !name.contains('\0') && !value.contains('\0'));
    if !names_ok {
        return Err(ReplicationError::InvalidArgument {
            what: "the slot name or an option name is empty, or a name or value holds a NUL byte",
        });
    }
    let mut command = format!(
        "START_REPLICATION SLOT {} LOGICAL {}",
        quote_ident(slot),
        format_lsn(start_lsn)
    );
    let options: Vec<String> = options
        .iter()
        .map(|(name, value)| format!("{} {}", quote_ident(name), quote_literal(value)))
        .collect();
    if !options.is_empty() {
        command.push_str(" (");
        command.push_str(&options.join(", "));
        command.push(')');
    }
    Ok(command)
}

/// Quotes a string literal of a replication command (no backslash escapes there).
fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}
