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

/// Makes a closed standard output end the process quietly, as it ends `cat` or `grep`
/// (`weir status | head -1`), rather than fail the next write with `EPIPE`, which
/// `println!` turns into a panic. Rust sets `SIGPIPE` to be ignored before `main`; this
/// puts back the default. For commands whose output is their job; a live run keeps
/// it ignored (its sockets report a closed peer as an error, never by this signal).
pub fn end_quietly_on_closed_stdout() {
    #[cfg(unix)]
    {
        // SAFETY: resetting one signal's disposition to its default installs no handler
        // and touches no memory; it is done once, before any thread writes.
        #[allow(unsafe_code)]
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}
