//! `hostile-recursion`: a row plugin that recurses without bound (see
//! `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Recurses without bound on the first row.
#[derive(Debug)]
pub struct Recursion;

/// Never returns normally: each call keeps a live frame (the array is used after the
/// recursive call), so the compiler cannot turn it into a loop.
#[inline(never)]
#[allow(unconditional_recursion)]
fn deeper(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 16]);
    let below = deeper(std::hint::black_box(depth.wrapping_add(1)));
    below.wrapping_add(frame[(depth % 16) as usize])
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
        let depth = deeper(0) as i64;
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
