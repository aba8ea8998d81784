//! Weir: a change-feed ingestion engine.
//!
//! A [`source`] yields committed transactions of a feed that cannot be rewound; the
//! [`stage`] makes each durable (with the source position) before the source is
//! acknowledged; the [`pipeline`] writes each dirty [`partition`] to the [`target`]
//! through a sandboxed WebAssembly [`plugin`] (or the identity) with an atomic
//! partition replace and records lineage. See ARCHITECTURE.md.

// `deny`, not `forbid`: one function opts out (loading a compiled plugin from Weir's
// own cache, `plugin::cache::Entry::load`), with its SAFETY argument.
#![deny(unsafe_code)]

// The pure core (values, partitions, config, the change vocabulary), at the paths the
// engine's modules use.
pub use weir_core::{config, feed, limits, partition, pg, value};

pub mod backfill;
pub mod demo;
pub mod errors;
pub mod faults;
pub mod job_threads;
pub mod localpg;
pub mod metrics;
pub mod pgconn;
pub mod pgerror;
pub mod pipeline;
pub mod plugin;
pub mod private;
pub mod procmem;
pub mod source;
pub mod stage;
pub mod target;
