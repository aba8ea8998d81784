//! Weir's pure core: what the engine computes without storage, a runtime or a sandbox.
//!
//! The values of a change feed and their exact text ([`value`]), partitions and grains
//! ([`partition`]), the configuration file and its checks ([`config`], with the DSN's
//! TLS parameters in [`dsn`] and a plugin's sandbox limits in [`limits`]), the change
//! vocabulary shared by the source, the stage, the pipeline and the plugin host
//! ([`feed`]), the Debezium-envelope decoder ([`envelope`]), and what a PostgreSQL
//! server sends, decoded ([`pg`]: pgoutput messages, column values, LSNs).
//! Test-only, behind `cfg(test)` or the `test-support` feature: `fixtures`, the orders
//! test config shared by the tests, the benchmarks and the fuzz targets.
//!
//! No RocksDB, wasmtime or async runtime: the engine (`weir`) builds on this crate, and
//! the fuzz crate fuzzes its parsers without building either. (tokio-postgres is here
//! for its connection-string parser only, without its runtime features.)

#![forbid(unsafe_code)]

pub mod config;
pub mod dsn;
pub mod envelope;
pub mod feed;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod limits;
pub mod partition;
pub mod pg;
pub mod value;
