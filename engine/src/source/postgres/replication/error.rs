//! The replication client's errors: none holds a secret or row data.

use std::io;

use crate::pgconn::{DsnError, TlsError, TlsSetupError};

/// Errors of the replication client. None holds the DSN or a password.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    /// The DSN or one of its settings cannot be used (a constant reason: never DSN text).
    #[error("invalid replication connection settings: {what}")]
    Config {
        /// What is wrong.
        what: &'static str,
    },
    /// The DSN cannot be used: a syntax error (nothing of it shown) or a TLS parameter
    /// (named, its value not shown).
    #[error("invalid replication connection settings: {0}")]
    Settings(#[from] DsnError),
    /// A TLS file of the DSN cannot be used (`sslrootcert`, `sslcert`, `sslkey`).
    #[error(transparent)]
    TlsSetup(#[from] TlsSetupError),
    /// TLS failed: the host and the reason (certificate not trusted, name mismatch,
    /// expired, the server without TLS).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// An argument of a call cannot be sent (an empty name, a NUL byte).
    #[error("invalid replication request: {what}")]
    InvalidArgument {
        /// What is wrong.
        what: &'static str,
    },
    /// No connection could be opened (the error of the last host tried), or the
    /// `connect_timeout` of the DSN passed.
    #[error("cannot connect to the PostgreSQL server for replication")]
    Connect {
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// Reading or writing an open connection failed.
    #[error("the replication connection failed")]
    Io {
        /// The socket error.
        #[source]
        source: io::Error,
    },
    /// Authentication failed or is not possible: the server's message, or why the
    /// client cannot answer (a method not supported, no password, a bad server proof).
    #[error("PostgreSQL authentication failed: {message}{}", code_suffix(code.as_deref()))]
    Auth {
        /// The SQLSTATE, when the server reported the failure.
        code: Option<String>,
        /// The server's message (it may name the user, never the password), or ours.
        message: String,
    },
    /// The server reported an error (an `ErrorResponse`): its SQLSTATE and primary
    /// message, which may hold identifiers (slot, user, database names) or literals of
    /// the statement, never the password. DETAIL is left out: it can hold row values.
    #[error("PostgreSQL error {code}: {message}{}", server_hint(.code, .message))]
    Server {
        /// The SQLSTATE, e.g. `42704`.
        code: String,
        /// The primary message, at most 2,000 characters.
        message: String,
    },
    /// The result of a `simple_query` is above [`MAX_RESULT_BYTES`]. The connection
    /// stays usable: the rest of the result was read and dropped.
    #[error(
        "the query result is larger than {limit} bytes: simple_query is meant for replication commands and small queries"
    )]
    ResultTooLarge {
        /// The limit, in bytes of values.
        limit: usize,
    },
    /// The server sent something this client does not expect or cannot parse. Names the
    /// message type and the problem, never the contents.
    #[error("replication protocol error: {what}")]
    Protocol {
        /// What was wrong.
        what: String,
    },
    /// The server closed the connection, or ended the replication stream before
    /// [`ReplicationStream::send_status`] was called.
    #[error("the PostgreSQL server closed the replication connection")]
    Closed,
    /// An earlier call failed or was cancelled part way through an exchange with the
    /// server, so what comes next cannot be read reliably.
    #[error(
        "the replication connection is unusable after an earlier failed or cancelled call: reconnect"
    )]
    Unusable,
}

impl ReplicationError {
    /// The SQLSTATE of a server or authentication error.
    pub fn code(&self) -> Option<&str> {
        match self {
            ReplicationError::Server { code, .. } => Some(code),
            ReplicationError::Auth { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Whether the connection is still usable after this error of a
    /// [`ReplicationClient`] call: the exchange was completed or never started.
    pub(super) fn leaves_client_usable(&self) -> bool {
        matches!(
            self,
            ReplicationError::Server { .. }
                | ReplicationError::InvalidArgument { .. }
                | ReplicationError::ResultTooLarge { .. }
        )
    }
}

fn code_suffix(code: Option<&str>) -> String {
    code.map(|c| format!(" (SQLSTATE {c})")).unwrap_or_default()
}

pub(super) fn protocol(what: impl Into<String>) -> ReplicationError {
    ReplicationError::Protocol { what: what.into() }
}

/// What to do about a server error whose cause is known from its SQLSTATE alone.
fn server_hint(code: &str, message: &str) -> &'static str {
    match code {
        "55006" => {
            "; another connection holds the replication slot (another `weir run` with this config, or another consumer of the slot): stop it, or give each pipeline its own slot"
        }
        "42704" if message.starts_with("publication") => {
            "; the slot decodes each change with the catalog as of that change, so a publication dropped (even if made again since) is missing for the changes written while it was, for good: this slot cannot be read past them. Make a new slot and stage (new `slot` and `[stage] path`, then `weir init --take-over`: a fresh snapshot), then drop the old slot, which holds the server's WAL for as long as it exists (`SELECT pg_drop_replication_slot('…')`)"
        }
        "42501" if message.contains("replication role") => {
            "; the source DSN's role needs the REPLICATION attribute: `ALTER ROLE … REPLICATION;`"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::ReplicationError;

    #[test]
    fn server_errors_a_user_can_act_on_say_how() {
        let text = |code: &str, message: &str| {
            ReplicationError::Server {
                code: code.into(),
                message: message.into(),
            }
            .to_string()
        };
        assert!(
            text("42704", "publication \"p\" does not exist").contains("Make a new slot and stage")
        );
        assert!(
            !text("42704", "replication slot \"s\" does not exist").contains("Make a new slot")
        );
        assert!(
            text(
                "42501",
                "must be superuser or replication role to start walsender"
            )
            .contains("REPLICATION;")
        );
    }
}
