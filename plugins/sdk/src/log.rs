//! The `log` import: messages to the host's log.
//!
//! The host limits the size and rate of messages and may drop some; a message must
//! never contain row values or secrets. On a native target (tests) messages go to
//! stderr instead.

pub use crate::bindings::weir::transform::log::Level;

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::bindings::weir::transform::log::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// Logs at `debug`.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}

/// Logs at `info`.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// Logs at `warn`.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// Logs at `error`.
pub fn error(message: &str) {
    log(Level::Error, message);
}
