//! `hostile-output`: a partition plugin whose output is larger than the host lets one
//! call return (see `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, Output, PartitionInfo, PartitionPlugin,
    Row, Value,
};

/// Bytes of text in each output row.
const ROW_BYTES: usize = 256 << 10;
/// Output rows per input row: 100 × 256 KiB = 25 MiB of text, within the default
/// memory cap, past an output cap of 16 MiB.
const ROWS_PER_INPUT: i64 = 100;

/// Emits 100 rows of 256 KiB for each row pushed, with unique grain keys in the
/// pushed row's partition: valid output, only too large.
#[derive(Debug)]
pub struct OutputBomb;

impl PartitionPlugin for OutputBomb {
    fn describe() -> Description {
        Description::new("hostile-output", env!("CARGO_PKG_VERSION"), Kind::Partition)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .column_not_null("filler", ColumnType::Text)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(OutputBomb)
    }

    fn push(&mut self, rows: Vec<Input>, out: &mut Output) -> Result<(), Error> {
        for row in rows {
            let id = row
                .int("id")
                .map_err(|r| Error::InvalidInput(r.to_string()))?;
            let order_date = row
                .date_or_null("order_date")
                .map_err(|r| Error::InvalidInput(r.to_string()))?;
            for i in 0..ROWS_PER_INPUT {
                let filler = char::from(b'a' + (i % 26) as u8)
                    .to_string()
                    .repeat(ROW_BYTES);
                out.row(
                    Row::new()
                        .set("id", id.saturating_mul(ROWS_PER_INPUT).saturating_add(i))
                        .set("order_date", order_date.map(Value::Date))
                        .set("filler", filler),
                );
            }
        }
        Ok(())
    }

    fn finish(&mut self, _: &mut Output) -> Result<(), Error> {
        Ok(())
    }
}

weir_plugin::export_partition_plugin!(OutputBomb);
