//! Startup: where to connect, TLS, the startup message and authentication (cleartext,
//! md5, SCRAM).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use postgres_protocol::authentication::md5_hash;
use postgres_protocol::authentication::sasl::{
    ChannelBinding, SCRAM_SHA_256, SCRAM_SHA_256_PLUS, ScramSha256,
};
use postgres_protocol::message::{backend, frontend};
use tokio_postgres::config::Host;
use tokio_postgres::fallible_iterator::FallibleIterator;

use crate::pgconn::ChannelBindingMode;

use super::error::{ReplicationError, protocol};
use super::wire::{
    Backend, Connection, Socket, log_notice, server_text, startup_error, unexpected,
};

const DEFAULT_PORT: u16 = 5432;
/// `application_name` when the DSN sets none: how the slot's user shows in
/// `pg_stat_replication`.
pub(super) const DEFAULT_APPLICATION_NAME: &str = "weir";

/// Where to connect: one host of the DSN. TCP targets carry the name the server's
/// certificate is checked against (the host, else the address).
#[derive(Debug)]
pub(super) enum Target {
    Tcp(String, u16),
    Addr(SocketAddr, String),
    Unix(PathBuf),
}

/// The TLS state of a connection after the SSLRequest, for authentication.
#[derive(Debug, Default)]
pub(super) struct Binding {
    /// TLS is up.
    pub(super) tls: bool,
    /// The `tls-server-end-point` data, when the server's certificate has one.
    pub(super) end_point: Option<Vec<u8>>,
}

/// What the startup packet and authentication need. Not `Debug`: it holds the password.
pub(super) struct Startup<'a> {
    pub(super) user: &'a str,
    pub(super) password: Option<&'a [u8]>,
    pub(super) database: Option<&'a str>,
    pub(super) application_name: &'a str,
    pub(super) options: Option<&'a str>,
    pub(super) channel_binding: ChannelBindingMode,
}

/// The hosts of a DSN in order, each with its port (and `hostaddr` when given).
pub(super) fn targets(config: &tokio_postgres::Config) -> Result<Vec<Target>, ReplicationError> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let count = hosts.len().max(addrs.len());
    if count == 0 {
        return Err(ReplicationError::Config {
            what: "no host: set host (a name, an address or a Unix socket directory)",
        });
    }
    if !addrs.is_empty() && !hosts.is_empty() && addrs.len() != hosts.len() {
        return Err(ReplicationError::Config {
            what: "hostaddr must list as many addresses as host lists hosts",
        });
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(ReplicationError::Config {
            what: "port must be one port, or as many ports as hosts",
        });
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let port = match ports {
            [] => DEFAULT_PORT,
            [port] => *port,
            ports => ports.get(i).copied().unwrap_or(DEFAULT_PORT),
        };
        let target = match (addrs.get(i), hosts.get(i)) {
            (Some(addr), Some(Host::Tcp(host))) => {
                Target::Addr(SocketAddr::new(*addr, port), host.clone())
            }
            (Some(addr), _) => Target::Addr(SocketAddr::new(*addr, port), addr.to_string()),
            (None, Some(Host::Tcp(host))) => match host.parse::<IpAddr>() {
                Ok(ip) => Target::Addr(SocketAddr::new(ip, port), host.clone()),
                Err(_) => Target::Tcp(host.clone(), port),
            },
            (None, Some(Host::Unix(dir))) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            (None, None) => continue,
        };
        out.push(target);
    }
    Ok(out)
}

pub(super) async fn open(target: &Target) -> io::Result<Box<dyn Socket>> {
    Ok(match target {
        Target::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
        Target::Addr(addr, _) => {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
        Target::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
    })
}

/// Startup packet, authentication, and the parameters up to ReadyForQuery.
pub(super) async fn start_up(
    socket: Box<dyn Socket>,
    startup: &Startup<'_>,
    binding: &Binding,
) -> Result<Connection, ReplicationError> {
    let mut conn = Connection::new(socket);
    // Output plugins print values with the walsender's settings: pin the ones the
    // value decoder relies on (UTF-8, ISO dates, UTC, floats that round-trip).
    let mut parameters = vec![
        ("user", startup.user),
        ("replication", "database"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "UTC"),
        ("extra_float_digits", "3"),
        ("application_name", startup.application_name),
    ];
    if let Some(database) = startup.database {
        parameters.push(("database", database));
    }
    if let Some(options) = startup.options {
        parameters.push(("options", options));
    }
    frontend::startup_message(parameters, &mut conn.write_buf).map_err(|_| {
        ReplicationError::Config {
            what: "a connection setting holds a NUL byte",
        }
    })?;
    conn.send().await?;
    authenticate(&mut conn, startup, binding).await?;
    loop {
        match conn.read_message().await? {
            Backend::Message(backend::Message::ReadyForQuery(_)) => break,
            Backend::Message(backend::Message::ParameterStatus(body)) => {
                if body.name().is_ok_and(|name| name == "server_version") {
                    conn.server_version = body.value().ok().map(|v| server_text(v.as_bytes()));
                }
            }
            Backend::Message(backend::Message::BackendKeyData(_)) => {}
            Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
            Backend::Message(backend::Message::ErrorResponse(body)) => {
                return Err(startup_error(&body));
            }
            other => return Err(unexpected(&other, "during startup")),
        }
    }
    Ok(conn)
}

/// Answers the server's authentication request: trust, cleartext, md5 or SCRAM-SHA-256.
/// One request is answered; after it only AuthenticationOk (or an error) is accepted, and
/// a SCRAM exchange must end with a server signature that verifies.
async fn authenticate(
    conn: &mut Connection,
    startup: &Startup<'_>,
    binding: &Binding,
) -> Result<(), ReplicationError> {
    let auth = |message: &str| ReplicationError::Auth {
        code: None,
        message: message.to_owned(),
    };
    let binding_required = startup.channel_binding == ChannelBindingMode::Require;
    let without_binding = || {
        auth(
            "channel_binding=require, but the server did not authenticate with SCRAM-SHA-256-PLUS (trust, a password, md5 or a certificate): use SCRAM with TLS, or remove channel_binding=require",
        )
    };
    let password = || {
        startup.password.ok_or_else(|| {
            auth("the server asks for a password and the connection settings hold none")
        })
    };
    let bad_password = || ReplicationError::Config {
        what: "the password holds a NUL byte or is too long",
    };
    let method = match next_auth_message(conn).await? {
        backend::Message::AuthenticationOk if binding_required => return Err(without_binding()),
        backend::Message::AuthenticationOk => return Ok(()),
        backend::Message::AuthenticationCleartextPassword
        | backend::Message::AuthenticationMd5Password(_)
            if binding_required =>
        {
            return Err(without_binding());
        }
        backend::Message::AuthenticationCleartextPassword => {
            frontend::password_message(password()?, &mut conn.write_buf)
                .map_err(|_| bad_password())?;
            conn.send().await?;
            "cleartext"
        }
        backend::Message::AuthenticationMd5Password(body) => {
            let hash = md5_hash(startup.user.as_bytes(), password()?, body.salt());
            frontend::password_message(hash.as_bytes(), &mut conn.write_buf)
                .map_err(|_| bad_password())?;
            conn.send().await?;
            "md5"
        }
        backend::Message::AuthenticationSasl(body) => {
            let mut mechanisms = body.mechanisms();
            let (mut scram_offered, mut plus_offered) = (false, false);
            while let Some(mechanism) = mechanisms
                .next()
                .map_err(|_| protocol("a malformed AuthenticationSASL message"))?
            {
                scram_offered |= mechanism == SCRAM_SHA_256;
                plus_offered |= mechanism == SCRAM_SHA_256_PLUS;
            }
            let end_point = binding
                .end_point
                .as_ref()
                .filter(|_| startup.channel_binding != ChannelBindingMode::Disable);
            let (mechanism, channel_binding) = match end_point {
                Some(data) if plus_offered => (
                    SCRAM_SHA_256_PLUS,
                    ChannelBinding::tls_server_end_point(data.clone()),
                ),
                _ if binding_required && !binding.tls => {
                    return Err(auth(
                        "channel_binding=require needs TLS, and this connection has none: set sslmode=require or stronger (a Unix socket never has TLS)",
                    ));
                }
                _ if binding_required => {
                    return Err(auth(
                        "channel_binding=require, but the server does not offer SCRAM-SHA-256-PLUS over this TLS connection (or its certificate's signature algorithm has no channel binding)",
                    ));
                }
                // TLS with binding data, the server not offering PLUS: say so ("y").
                Some(_) => (SCRAM_SHA_256, ChannelBinding::unrequested()),
                None => (SCRAM_SHA_256, ChannelBinding::unsupported()),
            };
            if mechanism == SCRAM_SHA_256 && !scram_offered {
                return Err(auth(
                    "the server offers no SASL mechanism but SCRAM-SHA-256-PLUS, which needs TLS: set sslmode=require or stronger",
                ));
            }
            scram(conn, password()?, mechanism, channel_binding).await?;
            if mechanism == SCRAM_SHA_256_PLUS {
                "scram-sha-256-plus"
            } else {
                "scram-sha-256"
            }
        }
        backend::Message::AuthenticationKerberosV5
        | backend::Message::AuthenticationGss
        | backend::Message::AuthenticationSspi
        | backend::Message::AuthenticationScmCredential => {
            return Err(auth(
                "the server asks for GSSAPI, SSPI, Kerberos or SCM authentication, which this client does not support",
            ));
        }
        other => {
            return Err(unexpected(
                &Backend::Message(other),
                "during authentication",
            ));
        }
    };
    match next_auth_message(conn).await? {
        backend::Message::AuthenticationOk => {
            tracing::debug!(method, "authenticated on the replication connection");
            Ok(())
        }
        other => Err(unexpected(
            &Backend::Message(other),
            "after the password was sent",
        )),
    }
}

/// The next message of authentication: an ErrorResponse becomes the error, notices are logged.
async fn next_auth_message(conn: &mut Connection) -> Result<backend::Message, ReplicationError> {
    loop {
        match conn.read_message().await? {
            Backend::Message(backend::Message::ErrorResponse(body)) => {
                return Err(startup_error(&body));
            }
            Backend::Message(backend::Message::NoticeResponse(body)) => log_notice(&body),
            Backend::Message(message) => return Ok(message),
            other @ Backend::CopyBothResponse => {
                return Err(unexpected(&other, "during authentication"));
            }
        }
    }
}

/// SCRAM-SHA-256 (with `tls-server-end-point` channel binding for
/// SCRAM-SHA-256-PLUS): client-first, server-first, client-final, server-final, whose
/// signature proves the server knows the password (and, with PLUS, that the TLS
/// connection ends at the server that holds the certificate).
async fn scram(
    conn: &mut Connection,
    password: &[u8],
    mechanism: &str,
    channel_binding: ChannelBinding,
) -> Result<(), ReplicationError> {
    let auth = |message: &str| ReplicationError::Auth {
        code: None,
        message: message.to_owned(),
    };
    let mut scram = ScramSha256::new(password, channel_binding);
    frontend::sasl_initial_response(mechanism, scram.message(), &mut conn.write_buf)
        .map_err(|_| protocol("cannot encode the SCRAM client-first message"))?;
    conn.send().await?;
    let backend::Message::AuthenticationSaslContinue(body) = next_auth_message(conn).await? else {
        return Err(protocol("expected the SCRAM server-first message"));
    };
    scram
        .update(body.data())
        .map_err(|_| auth("the server's SCRAM-SHA-256 challenge is malformed"))?;
    frontend::sasl_response(scram.message(), &mut conn.write_buf)
        .map_err(|_| protocol("cannot encode the SCRAM client-final message"))?;
    conn.send().await?;
    let backend::Message::AuthenticationSaslFinal(body) = next_auth_message(conn).await? else {
        return Err(protocol("expected the SCRAM server-final message"));
    };
    scram.finish(body.data()).map_err(|_| {
        auth("the server's SCRAM-SHA-256 signature does not verify: it does not know the password")
    })
}
