//! How a PostgreSQL error is shown in Weir's errors and logs.
//!
//! **Invariant**: no row value from the server reaches a log or an error message.
//! PostgreSQL puts row values in an error's DETAIL (`Failing row contains (…)`,
//! `Key (id)=(42) already exists.`) and its WHERE/context (`COPY t, line 1: …`);
//! tokio-postgres's `Display` prints DETAIL. [`PgError`] wraps a
//! `tokio_postgres::Error` and displays only its severity, SQLSTATE, message and the
//! names of the schema, table, column, data type and constraint it concerns; a data
//! exception's message (class 22) without its quoted parts, which quote the value it
//! could not take. Checked by
//! `target_writes::a_failing_row_is_never_printed`.

use std::fmt;

/// A `tokio_postgres::Error` whose `Display` never shows DETAIL, HINT or WHERE (which
/// may hold row values) and which has no `source` (so an error chain cannot reach the
/// wrapped error's own `Display`).
#[derive(Debug)]
pub struct PgError(pub tokio_postgres::Error);

impl PgError {
    /// The SQLSTATE of a server error.
    pub fn code(&self) -> Option<&tokio_postgres::error::SqlState> {
        self.0.code()
    }

    /// The wrapped error, for the callers that inspect it (never to display it).
    pub fn inner(&self) -> &tokio_postgres::Error {
        &self.0
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError(e)
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(&self.0))
    }
}

impl std::error::Error for PgError {}

/// The one rendering of a PostgreSQL error for Weir's errors and logs: `ERROR 23514:
/// new row for relation "t" violates check constraint "c" (table public.t, constraint
/// c)`. A server error shows its severity, code, message and the names it carries,
/// never DETAIL, HINT or WHERE; another error (I/O, protocol, a closed connection)
/// shows tokio-postgres's text and its causes, which hold no row values.
pub fn render(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else {
        let mut out = error.to_string();
        // tokio-postgres's text already ends with its cause; deeper causes follow.
        let mut cause = std::error::Error::source(error).and_then(|c| c.source());
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        return out;
    };
    let code = db.code().code();
    // A data exception's message quotes the value it could not take (`invalid input
    // syntax for type integer: "…"`): the quoted parts are left out.
    let message = if code.starts_with("22") {
        without_quoted(db.message())
    } else {
        db.message().to_owned()
    };
    let mut out = format!("{} {code}: {message}", db.severity());
    let mut names = Vec::new();
    match (db.schema(), db.table()) {
        (Some(s), Some(t)) => names.push(format!("table {s}.{t}")),
        (None, Some(t)) => names.push(format!("table {t}")),
        (Some(s), None) => names.push(format!("schema {s}")),
        (None, None) => {}
    }
    if let Some(c) = db.column() {
        names.push(format!("column {c}"));
    }
    if let Some(d) = db.datatype() {
        names.push(format!("type {d}"));
    }
    if let Some(c) = db.constraint() {
        names.push(format!("constraint {c}"));
    }
    if !names.is_empty() {
        out.push_str(" (");
        out.push_str(&names.join(", "));
        out.push(')');
    }
    out
}

/// `message` with each double-quoted part replaced by `"…"`.
fn without_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut parts = message.split('"');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    let mut quoted = true;
    for part in parts {
        if quoted {
            out.push_str("\"…\"");
        } else {
            out.push_str(part);
        }
        quoted = !quoted;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::without_quoted;

    #[test]
    fn quoted_values_are_left_out() {
        assert_eq!(
            without_quoted(r#"invalid input syntax for type integer: "PII-SENTINEL""#),
            r#"invalid input syntax for type integer: "…""#
        );
        assert_eq!(
            without_quoted("value too long for type character varying(5)"),
            "value too long for type character varying(5)"
        );
        assert_eq!(without_quoted(r#"a "x" b "y" c"#), r#"a "…" b "…" c"#);
    }
}
