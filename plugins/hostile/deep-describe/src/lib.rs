//! `hostile-deep-describe`: a row plugin whose `describe` recurses without bound
//! (see `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Never returns normally; built like `hostile-recursion`'s (live values in wasm
/// locals, a non-associative step after the call), so that the wasm stack the host
/// bounds overflows, not the guest's shadow stack.
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

/// Recurses in `describe`, which the engine calls when it loads the plugin.
#[derive(Debug)]
pub struct DeepDescribe;

impl RowPlugin for DeepDescribe {
    fn describe() -> Description {
        let depth = deeper(0, 1, 2, 3, std::hint::black_box(5));
        Description::new("hostile-deep-describe", &depth.to_string(), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(DeepDescribe)
    }

    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject> {
        Ok(Some(
            Row::new().set("id", row.int("id")?).set(
                "order_date",
                row.date_or_null("order_date")?
                    .map(weir_plugin::Value::Date),
            ),
        ))
    }
}

weir_plugin::export_row_plugin!(DeepDescribe);
