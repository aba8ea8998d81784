//! The decoders of what PostgreSQL sends (`weir_core::pg`) against a real server: their
//! own tests are literal cases and properties, and the core starts no PostgreSQL.

mod pgoutput;
mod pgtypes;
