//! Error rendering shared by every layer (the source, the stage, the pipeline, the
//! plugin host, the target): an error and its causes on one line, for logs and
//! `weir status`.

/// An error and its causes on one line, `a: b: c`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
