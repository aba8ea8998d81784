//! The DSN's TLS parameters, taken out before tokio-postgres parses the rest: what
//! the config check needs without the TLS stack (the engine's `pgconn` re-exports it
//! and makes the connections).

use std::fmt;
use std::path::PathBuf;

use crate::config::Dsn;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The name as written in a DSN.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection without TLS is refused.
    pub fn requires_tls(self) -> bool {
        self >= SslMode::Require
    }
}

/// libpq's `channel_binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelBindingMode {
    Disable,
    Prefer,
    Require,
}

/// Where the roots that verify the server's certificate come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The system's trusted roots (`sslrootcert=system`).
    System,
}

impl fmt::Display for RootCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootCert::File(path) => write!(f, "sslrootcert {}", path.display()),
            RootCert::System => f.write_str("the system's trusted roots (sslrootcert=system)"),
        }
    }
}

/// Server settings every connection of Weir's asks for at its start (the startup
/// packet's `options`), before the DSN's own `options`, which win: a time limit a DBA
/// set on the database or role (`ALTER ROLE weir SET statement_timeout = ...`) does
/// not apply to Weir's sessions, as `pg_dump` lifts them for its own. A partition's COPY
/// or a first load's read takes as long as its rows do, and a limit would fail the same
/// work at every retry, for good; a walsender holding an exported snapshot is idle in a
/// transaction by design. Weir bounds its own waits (`[target] lock_timeout_ms` for the
/// target's table locks, `wal_sender_timeout` and its own time-outs for the rest).
///
/// And `row_security=off`: a query that a row-level security policy would filter fails
/// instead (as `pg_dump` asks), so a first load, a resync or a read of the target never
/// sees a policy's subset of a table's rows as the whole of it.
///
/// And `default_transaction_isolation` read committed, which Weir's transactions are
/// written for (those that need a snapshot ask for theirs): a role or database made
/// `serializable` by default would fail its partition writes beside other writers with
/// serialization errors, for good.
pub const SESSION_SETTINGS: &str = "-c statement_timeout=0 -c lock_timeout=0 -c idle_in_transaction_session_timeout=0 -c row_security=off -c default_transaction_isolation=read\\ committed";

/// A DSN that cannot be used. Never holds the DSN, a value of it, or a parser's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsnError {
    #[error(
        "not a valid PostgreSQL connection string (URL or key=value form); it is not shown because it may hold a password"
    )]
    Syntax,
    #[error(
        "a connection parameter's name is not one PostgreSQL's libpq knows: check each key's spelling (it is not named, since a password with unquoted spaces makes one)"
    )]
    UnknownParameter,
    #[error("connection parameter {parameter}: {problem}")]
    Parameter {
        parameter: &'static str,
        problem: &'static str,
    },
}

/// The TLS settings of a DSN, before any file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SslSettings {
    pub mode: SslMode,
    /// `sslrootcert` as given (`None`: libpq's default file, when present).
    pub root_cert: Option<RootCert>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub channel_binding: ChannelBindingMode,
    /// `sslsni`: send the host name in the handshake (default on).
    pub sni: bool,
}

impl Default for SslSettings {
    fn default() -> Self {
        SslSettings {
            mode: SslMode::Prefer,
            root_cert: None,
            cert: None,
            key: None,
            channel_binding: ChannelBindingMode::Prefer,
            sni: true,
        }
    }
}

/// A parsed DSN: tokio-postgres's settings (the TLS ones taken out) and the TLS ones.
/// Not `Debug`-printable with its password: its `Debug` shows the TLS settings only.
#[derive(Clone)]
pub struct PgSettings {
    config: tokio_postgres::Config,
    pub ssl: SslSettings,
}

impl fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgSettings")
            .field("hosts", &self.hosts())
            .field("ssl", &self.ssl)
            .finish_non_exhaustive()
    }
}

/// Parameters of the DSN that are Weir's (libpq's), not tokio-postgres's.
const TAKEN: [&str; 11] = [
    "target_session_attrs",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "channel_binding",
    "sslnegotiation",
    "sslsni",
    "sslcompression",
    "gssencmode",
    "sslpassword",
];

/// libpq parameters Weir does not support: refused by name rather than ignored.
const UNSUPPORTED: [&str; 8] = [
    "passfile",
    "service",
    "sslcrl",
    "sslcrldir",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "sslcertmode",
    "requiressl",
];

impl PgSettings {
    /// Parses a DSN (URL or key=value form).
    pub fn parse(dsn: &str) -> Result<PgSettings, DsnError> {
        let (rest, taken) = split_dsn(dsn)?;
        let mut config: tokio_postgres::Config = rest
            .parse()
            .map_err(|e: tokio_postgres::Error| parse_problem(&e))?;
        let mut ssl = SslSettings::default();
        let bad = |parameter, problem| Err(DsnError::Parameter { parameter, problem });
        for (key, value) in &taken {
            match key.as_str() {
                "sslmode" => match SslMode::parse(value) {
                    Some(mode) => ssl.mode = mode,
                    None => {
                        return bad(
                            "sslmode",
                            "must be one of disable, allow, prefer, require, verify-ca, verify-full",
                        );
                    }
                },
                "sslrootcert" if value.is_empty() => {
                    return bad(
                        "sslrootcert",
                        "is empty: name a PEM file of CA certificates, or `system`",
                    );
                }
                "sslrootcert" if value == "system" => ssl.root_cert = Some(RootCert::System),
                "sslrootcert" => ssl.root_cert = Some(RootCert::File(PathBuf::from(value))),
                "sslcert" if value.is_empty() => {
                    return bad(
                        "sslcert",
                        "is empty: name a PEM file holding the client certificate",
                    );
                }
                "sslcert" => ssl.cert = Some(PathBuf::from(value)),
                "sslkey" if value.is_empty() => {
                    return bad(
                        "sslkey",
                        "is empty: name a PEM file holding the client certificate's key",
                    );
                }
                "sslkey" => ssl.key = Some(PathBuf::from(value)),
                "channel_binding" => {
                    ssl.channel_binding = match value.as_str() {
                        "disable" => ChannelBindingMode::Disable,
                        "prefer" => ChannelBindingMode::Prefer,
                        "require" => ChannelBindingMode::Require,
                        _ => {
                            return bad(
                                "channel_binding",
                                "must be one of disable, prefer, require",
                            );
                        }
                    }
                }
                "sslnegotiation" => match value.as_str() {
                    "postgres" => {}
                    _ => {
                        return bad(
                            "sslnegotiation",
                            "only the default, postgres, is supported (it works with every server): remove the parameter",
                        );
                    }
                },
                "sslsni" => match value.as_str() {
                    "1" => ssl.sni = true,
                    "0" => ssl.sni = false,
                    _ => return bad("sslsni", "must be 0 or 1"),
                },
                // TLS compression is never used (rustls has none); libpq ignores it too.
                "sslcompression" => match value.as_str() {
                    "0" | "1" => {}
                    _ => return bad("sslcompression", "must be 0 or 1"),
                },
                "gssencmode" => match value.as_str() {
                    "disable" | "prefer" => {}
                    _ => {
                        return bad(
                            "gssencmode",
                            "GSSAPI encryption is not supported: remove the parameter (or set it to disable) and use TLS (sslmode)",
                        );
                    }
                },
                // libpq's values; tokio-postgres knows `read-write` (for the SQL
                // connections; the replication connection checks it itself), not
                // `primary`, which is checked the same way: a server in recovery is
                // read-only. Weir writes watermarks and needs its slot on the primary.
                "target_session_attrs" => match value.as_str() {
                    "any" => {
                        config
                            .target_session_attrs(tokio_postgres::config::TargetSessionAttrs::Any);
                    }
                    "read-write" | "primary" => {
                        config.target_session_attrs(
                            tokio_postgres::config::TargetSessionAttrs::ReadWrite,
                        );
                    }
                    "read-only" | "standby" | "prefer-standby" => {
                        return bad(
                            "target_session_attrs",
                            "Weir writes to the source (watermarks) and uses its replication slot on the primary: use any, read-write or primary",
                        );
                    }
                    _ => {
                        return bad(
                            "target_session_attrs",
                            "must be one of any, read-write, primary",
                        );
                    }
                },
                "sslpassword" => {
                    return bad(
                        "sslpassword",
                        "encrypted client keys are not supported: give sslkey an unencrypted PEM key file readable only by Weir's user",
                    );
                }
                _ => {}
            }
        }
        // `postgres://u:pa@ss@host/db` splits at the first `@`: the rest of the password
        // would become the host, and every connection error would show it.
        if config
            .get_hosts()
            .iter()
            .any(|h| matches!(h, tokio_postgres::config::Host::Tcp(name) if name.contains('@')))
        {
            return bad(
                "host",
                "holds `@`: in a URL, write an `@` of the user name or password as %40 (the DSN is not shown: it may hold a password)",
            );
        }
        if ssl.root_cert == Some(RootCert::System) && ssl.mode != SslMode::VerifyFull {
            // As libpq 16: the public roots vouch for any host name they have signed, so
            // only checking the name makes them mean anything.
            return bad(
                "sslmode",
                "sslrootcert=system needs sslmode=verify-full (the system's roots vouch for a host name, so it must be checked)",
            );
        }
        config.channel_binding(match ssl.channel_binding {
            ChannelBindingMode::Disable => tokio_postgres::config::ChannelBinding::Disable,
            ChannelBindingMode::Prefer => tokio_postgres::config::ChannelBinding::Prefer,
            ChannelBindingMode::Require => tokio_postgres::config::ChannelBinding::Require,
        });
        let options = match config.get_options() {
            Some(own) if !own.trim().is_empty() => format!("{SESSION_SETTINGS} {own}"),
            _ => SESSION_SETTINGS.to_owned(),
        };
        config.options(&options);
        Ok(PgSettings { config, ssl })
    }

    /// Parses a [`Dsn`].
    pub fn from_dsn(dsn: &Dsn) -> Result<PgSettings, DsnError> {
        PgSettings::parse(dsn.expose())
    }

    /// tokio-postgres's settings (every TLS parameter taken out; `sslmode` is set per
    /// attempt by [`connect`]).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// One settings per host of a DSN that lists several (`host=a,b port=5432,5433`),
    /// each with that host alone and its port (or the single port), and the same user,
    /// password, database, application name, options, timeouts, keepalives, channel
    /// binding and TLS settings; named as [`PgSettings::hosts`] names them. A DSN of
    /// one host (or of `hostaddr`s only) gives itself.
    pub fn each_host(&self) -> Vec<(String, PgSettings)> {
        use tokio_postgres::config::Host;
        let c = &self.config;
        let hosts = c.get_hosts();
        if hosts.len() <= 1 {
            return vec![(self.hosts(), self.clone())];
        }
        let ports = c.get_ports();
        let addrs = c.get_hostaddrs();
        hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let mut one = tokio_postgres::Config::new();
                let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                let name = match host {
                    Host::Tcp(name) => {
                        one.host(name.as_str());
                        format!("{name}:{port}")
                    }
                    Host::Unix(dir) => {
                        one.host_path(dir);
                        format!("{} (Unix socket, port {port})", dir.display())
                    }
                };
                if let Some(addr) = addrs.get(i) {
                    one.hostaddr(*addr);
                }
                one.port(port);
                if let Some(user) = c.get_user() {
                    one.user(user);
                }
                if let Some(password) = c.get_password() {
                    one.password(password);
                }
                if let Some(dbname) = c.get_dbname() {
                    one.dbname(dbname);
                }
                if let Some(options) = c.get_options() {
                    one.options(options);
                }
                if let Some(name) = c.get_application_name() {
                    one.application_name(name);
                }
                if let Some(timeout) = c.get_connect_timeout() {
                    one.connect_timeout(*timeout);
                }
                one.keepalives(c.get_keepalives());
                one.keepalives_idle(c.get_keepalives_idle());
                one.channel_binding(c.get_channel_binding());
                (
                    name,
                    PgSettings {
                        config: one,
                        ssl: self.ssl.clone(),
                    },
                )
            })
            .collect()
    }

    /// The hosts with their ports, for errors: `db.example.com:5432`, `a:5432, b:5433`,
    /// `/run/postgresql (Unix socket, port 5432)`.
    pub fn hosts(&self) -> String {
        let ports = self.config.get_ports();
        let port = |i: usize| ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let mut names: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| match h {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{}", port(i)),
                tokio_postgres::config::Host::Unix(dir) => {
                    format!("{} (Unix socket, port {})", dir.display(), port(i))
                }
            })
            .collect();
        if names.is_empty() {
            names = self
                .config
                .get_hostaddrs()
                .iter()
                .map(ToString::to_string)
                .collect();
        }
        if names.is_empty() {
            "(no host)".to_owned()
        } else {
            names.join(", ")
        }
    }
}

/// Splits a DSN into the text tokio-postgres parses and the parameters Weir takes out
/// (in order; a later one wins).
fn split_dsn(dsn: &str) -> Result<(String, Vec<(String, String)>), DsnError> {
    let prefix = ["postgres://", "postgresql://"]
        .into_iter()
        .find(|p| dsn.starts_with(p));
    let mut taken = Vec::new();
    let rest = match prefix {
        Some(prefix) => split_url(dsn, prefix.len(), &mut taken)?,
        None => split_key_value(dsn, &mut taken)?,
    };
    for (key, _) in &taken {
        if let Some(name) = UNSUPPORTED.iter().find(|n| **n == key.as_str()) {
            return Err(DsnError::Parameter {
                parameter: name,
                problem: "is not supported by Weir: remove it",
            });
        }
    }
    taken.retain(|(key, _)| TAKEN.contains(&key.as_str()));
    Ok((rest, taken))
}

/// tokio-postgres's parameters whose value it checks: a parse error names one of them.
const CHECKED: [&str; 13] = [
    "port",
    "connect_timeout",
    "host",
    "hostaddr",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "tcp_user_timeout",
    "load_balance_hosts",
    "replication",
    "application_name",
    "options",
];

/// What tokio-postgres's parse error says, without any part of the DSN but a
/// parameter name of its own: an invalid value names the parameter; an unknown name
/// is said to be one (the name itself may be part of a mis-quoted password).
fn parse_problem(e: &tokio_postgres::Error) -> DsnError {
    let text = match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    };
    if text.contains("unknown option `") {
        return DsnError::UnknownParameter;
    }
    let named = text
        .split_once("invalid value for option `")
        .and_then(|(_, rest)| rest.split('`').next())
        .and_then(|name| CHECKED.iter().find(|c| **c == name));
    match named {
        Some(parameter) => DsnError::Parameter {
            parameter,
            problem: "has a value PostgreSQL does not take (a number for ports and time-outs; the value is not shown)",
        },
        None => DsnError::Syntax,
    }
}

fn is_taken(key: &str) -> bool {
    TAKEN.iter().chain(&UNSUPPORTED).any(|t| *t == key)
}

/// URL form: the query parameters after the credentials and host (as tokio-postgres
/// reads them: the credentials end at the first `@`).
fn split_url(
    dsn: &str,
    prefix: usize,
    taken: &mut Vec<(String, String)>,
) -> Result<String, DsnError> {
    let after_prefix = dsn.get(prefix..).ok_or(DsnError::Syntax)?;
    let host_start = after_prefix.find('@').map_or(0, |at| at + 1);
    let Some(query) = after_prefix
        .get(host_start..)
        .and_then(|s| s.find('?'))
        .map(|q| prefix + host_start + q)
    else {
        return Ok(dsn.to_owned());
    };
    let (base, params) = (
        dsn.get(..query).ok_or(DsnError::Syntax)?,
        dsn.get(query + 1..).ok_or(DsnError::Syntax)?,
    );
    let mut kept = Vec::new();
    for param in params.split('&') {
        let Some((key, value)) = param.split_once('=') else {
            kept.push(param);
            continue;
        };
        let key_decoded = percent_decode(key)?;
        if is_taken(&key_decoded) {
            taken.push((key_decoded, percent_decode(value)?));
        } else {
            kept.push(param);
        }
    }
    Ok(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

fn percent_decode(text: &str) -> Result<String, DsnError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(DsnError::Syntax)?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| DsnError::Syntax)
}

/// key=value form, tokenised as tokio-postgres (and libpq) do: `key = value`, a value
/// quoted with `'` or not, `\` escaping the next character.
fn split_key_value(dsn: &str, taken: &mut Vec<(String, String)>) -> Result<String, DsnError> {
    let mut kept = String::with_capacity(dsn.len());
    let mut chars = dsn.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(DsnError::Syntax);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(DsnError::Syntax),
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => {
                        if let Some((_, c)) = chars.next() {
                            value.push(c);
                        }
                    }
                    Some((_, c)) => value.push(c),
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    if let Some((_, c)) = chars.next() {
                        value.push(c);
                    }
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return Err(DsnError::Syntax);
            }
        }
        let end = chars.peek().map_or(dsn.len(), |(i, _)| *i);
        if is_taken(&key) {
            taken.push((key, value));
        } else {
            kept.push_str(dsn.get(start..end).ok_or(DsnError::Syntax)?);
            kept.push(' ');
        }
    }
    Ok(kept)
}
