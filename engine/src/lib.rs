//! Weir: a change-feed ingestion engine.
//!
//! A [`source`] yields committed transactions of a feed that cannot be rewound; the
//! [`stage`] makes each durable (with the source position) before the source is
//! acknowledged; the [`pipeline`] writes each dirty [`partition`] to the [`target`]
//! with an atomic partition replace and records lineage. See ARCHITECTURE.md.

#![forbid(unsafe_code)]

pub mod config;
pub mod demo;
pub mod localpg;
pub mod partition;
pub mod pipeline;
pub mod source;
pub mod stage;
pub mod target;
pub mod value;
