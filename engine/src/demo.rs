//! The orders feed that `weir demo` and the benchmarks share: a seeded [`Sequence`]
//! (the demo's workload is a function of its seed) and Debezium lines of
//! `public.orders` ([`order_line`]). The benchmarks' JSON-lines config of that table is
//! the test config `weir_core::fixtures` (test-only, never in the `weir` binary).
//!
//! The demo itself is a verb of the `weir` binary (`engine/src/commands/demo/`), not
//! library code.

/// A small deterministic pseudo-random sequence (xorshift64*), so the demo's and the
/// benchmarks' feeds are the same on every run without a clock or entropy.
#[derive(Debug, Clone)]
pub struct Sequence(u64);

impl Sequence {
    pub fn new(seed: u64) -> Sequence {
        Sequence(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One Debezium envelope line for `public.orders` (the benchmarks' feed).
pub fn order_line(
    op: char,
    tx: Option<u64>,
    id: u64,
    day: &str,
    amount_cents: u64,
    status: &str,
) -> String {
    let image = format!(
        "{{\"id\":{id},\"customer\":\"c{}\",\"order_date\":\"{day}\",\"amount\":\"{}.{:02}\",\"status\":\"{status}\"}}",
        id % 97,
        amount_cents / 100,
        amount_cents % 100
    );
    let (before, after) = if op == 'd' {
        (image, "null".to_owned())
    } else {
        ("null".to_owned(), image)
    };
    let tx = tx.map(|t| format!(",\"txId\":{t}")).unwrap_or_default();
    format!(
        "{{\"op\":\"{op}\",\"before\":{before},\"after\":{after},\"source\":{{\"schema\":\"public\",\"table\":\"orders\"{tx}}},\"ts_ms\":{}}}\n",
        1_772_323_200_000u64 + id * 1000
    )
}
