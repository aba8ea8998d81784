//! The engine's parsers of external input, compiled on their own to be fuzzed.
//!
//! Each module below is the engine's own source file (`#[path]`), arranged as in the
//! engine so that its `crate::` paths resolve, without the engine crate: depending on it
//! would build RocksDB and wasmtime with fuzz instrumentation, for nothing. Where
//! an engine module also holds heavy code, the items these parsers need live in a file
//! of their own, which the engine module re-exports; only that file is compiled here.

#[path = "../../engine/src/config.rs"]
pub mod config;
#[path = "../../engine/src/partition.rs"]
pub mod partition;
#[path = "../../engine/src/value.rs"]
pub mod value;

/// `crate::pgconn` as the config parser sees it: the DSN's TLS parameters, not the TLS
/// stack.
#[path = "../../engine/src/pgconn"]
pub mod pgconn {
    mod dsn;
    pub use dsn::*;
}

/// `crate::plugin` as the config parser sees it: the sandbox limits, not the host.
#[path = "../../engine/src/plugin"]
pub mod plugin {
    mod limits;
    pub use limits::*;
}

/// `crate::stage` as a source sees it: the changes it hands the stage, not RocksDB.
#[path = "../../engine/src/stage"]
pub mod stage {
    mod change;
    pub use change::*;
}

/// `crate::source`: the decoded-change types every source shares and the JSON-lines
/// envelope decoder, not the sources' I/O.
#[path = "../../engine/src/source"]
pub mod source {
    mod change;
    pub mod envelope;
    pub use change::*;
}
