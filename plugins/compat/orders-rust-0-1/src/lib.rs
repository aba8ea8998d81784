//! `orders-rust-0-1`: the Rust `orders` example plugin (`../../examples/orders-rust`,
//! the same source file) exported on the first contract, `weir:transform@0.1.0`, where
//! each staged row carries every column's name. The host runs plugins of both
//! contracts; this component keeps 0.1 tested end to end and is the benchmarks'
//! 0.1 side of the same plugin.

#[path = "../../../examples/orders-rust/src/orders.rs"]
mod orders;

pub use orders::Orders;

weir_plugin::export_row_plugin!(Orders, contract = "0.1");
