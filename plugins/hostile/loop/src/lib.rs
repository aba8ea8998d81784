//! `hostile-loop`: a row plugin whose `transform` never returns (see `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Loops forever on the first row.
#[derive(Debug)]
pub struct Loop;

impl RowPlugin for Loop {
    fn describe() -> Description {
        Description::new("hostile-loop", env!("CARGO_PKG_VERSION"), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(Loop)
    }

    fn transform(&self, _row: &Input) -> Result<Option<Row>, Reject> {
        // A loop the optimiser cannot remove: each step depends on an opaque value.
        let mut i: u64 = 0;
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }
}

weir_plugin::export_row_plugin!(Loop);
