//! `hostile-duplicate-grain`: a row plugin whose declared grain key is not unique in its
//! output (see `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Copies `id` and `order_date`, and declares `order_date` its grain key: a partition
/// of a day with two orders has a duplicate grain key.
#[derive(Debug)]
pub struct DuplicateGrain;

impl RowPlugin for DuplicateGrain {
    fn describe() -> Description {
        Description::new(
            "hostile-duplicate-grain",
            env!("CARGO_PKG_VERSION"),
            Kind::Row,
        )
        .column_not_null("id", ColumnType::Bigint)
        .column("order_date", ColumnType::Date)
        .grain_key(&["order_date"])
        .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(DuplicateGrain)
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

weir_plugin::export_row_plugin!(DuplicateGrain);
