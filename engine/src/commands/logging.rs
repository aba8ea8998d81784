//! Logging: `tracing` events on stderr, as text or JSON lines, levels from `RUST_LOG`,
//! with the status line of `progress` kept below them.

use crate::LogFormat;

/// Whether an event may be logged whatever `RUST_LOG` says: tokio-postgres logs a
/// statement's parameters and a simple query's text at debug, and both can hold row
/// values (a dead letter's input, a snapshot chunk's key bounds). Weir logs no row
/// values, so its client library's debug and trace lines stay off. A filter of its
/// own, not a `tokio_postgres=info` directive: a directive would also *raise*
/// tokio-postgres to info under `RUST_LOG=warn`.
fn never_row_values(metadata: &tracing::Metadata<'_>) -> bool {
    !(metadata.target().starts_with("tokio_postgres") && *metadata.level() > tracing::Level::INFO)
}

/// Installs the process's subscriber, levels from `RUST_LOG` (default `info`).
pub(crate) fn init(format: LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    log_subscriber(format, filter).init();
}

/// The process's subscriber: `filter`'s events in `format` on stderr.
fn log_subscriber(
    format: LogFormat,
    filter: tracing_subscriber::EnvFilter,
) -> Box<dyn tracing::Subscriber + Send + Sync> {
    use tracing_subscriber::prelude::*;
    // The cap says how verbose the filter can be: the `log` records of dependencies
    // (Cranelift's, a great many while a plugin compiles) are then dropped where they
    // are made, above that level, rather than each one passing through every filter.
    // (Without a hint the outer filter reports none, `log` is let through at TRACE,
    // and a large plugin compiled ten times slower.)
    let most = filter
        .max_level_hint()
        .unwrap_or(tracing_subscriber::filter::LevelFilter::TRACE);
    let cap = tracing_subscriber::filter::filter_fn(never_row_values).with_max_level_hint(most);
    // Colours only for a person at a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(|| super::progress::LogWriter);
    let registry = tracing_subscriber::registry();
    match format {
        LogFormat::Text => Box::new(registry.with(layer.with_filter(filter).with_filter(cap))),
        LogFormat::Json => {
            Box::new(registry.with(layer.json().with_filter(filter).with_filter(cap)))
        }
    }
}

/// The command's fatal error on stderr: `error: …`, or with JSON logs one JSON object
/// like the log's lines, so a collector that parses stderr reads it too.
pub(crate) fn print_fatal(error: &anyhow::Error, json: bool) {
    if json {
        let line = serde_json::json!({
            "level": "ERROR",
            "target": "weir",
            "fields": {"message": "error", "error": format!("{error:#}")},
        });
        eprintln!("{line}");
    } else {
        eprintln!("error: {error:#}");
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::filter::LevelFilter;

    use super::log_subscriber;
    use crate::LogFormat;

    /// The subscriber says how verbose it can be, in both formats: `log`'s global level
    /// is set from it when logging starts, and without it every `log` record of a
    /// dependency is made and filtered (Cranelift's make a large plugin's compile ten
    /// times slower).
    #[test]
    fn the_subscriber_reports_its_most_verbose_level() {
        for format in [LogFormat::Text, LogFormat::Json] {
            for (directives, most) in [
                ("info", LevelFilter::INFO),
                ("warn", LevelFilter::WARN),
                ("weir=debug,info", LevelFilter::DEBUG),
            ] {
                let filter = tracing_subscriber::EnvFilter::new(directives);
                assert_eq!(
                    log_subscriber(format, filter).max_level_hint(),
                    Some(most),
                    "{directives}"
                );
            }
        }
    }
}
