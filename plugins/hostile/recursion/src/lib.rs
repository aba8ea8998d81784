//! `hostile-recursion`: a row plugin that recurses without bound (see
//! `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Recurses without bound on the first row.
#[derive(Debug)]
pub struct Recursion;

/// Never returns normally. The frame lives in wasm locals (the engine's stack), not in
/// linear memory: five values stay live across the call, and the result is combined
/// with them by a non-associative step, so the compiler can neither turn the
/// recursion into a loop nor move the frame to the guest's shadow stack. What
/// overflows is the wasm stack the host bounds, not the guest's own stack in linear
/// memory (which would trap as an out-of-bounds access instead).
#[inline(never)]
#[allow(unconditional_recursion)]
fn deeper(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    let below = deeper(
        a.wrapping_add(1),
        b ^ a.rotate_left(7),
        c.wrapping_mul(31).wrapping_add(d),
        d.rotate_right(3) ^ e,
        e.wrapping_add(b),
    );
    below.rotate_left((a % 63) as u32) ^ b.wrapping_mul(c) ^ d.wrapping_sub(e)
}

impl RowPlugin for Recursion {
    fn describe() -> Description {
        Description::new("hostile-recursion", env!("CARGO_PKG_VERSION"), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .column_not_null("depth", ColumnType::Bigint)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(Recursion)
    }

    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject> {
        let seed = row.int("id")? as u64;
        let depth = deeper(0, seed, seed ^ 0x9e37, seed.rotate_left(9), 5) as i64;
        Ok(Some(
            Row::new()
                .set("id", row.int("id")?)
                .set(
                    "order_date",
                    row.date_or_null("order_date")?
                        .map(weir_plugin::Value::Date),
                )
                .set("depth", depth),
        ))
    }
}

weir_plugin::export_row_plugin!(Recursion);
