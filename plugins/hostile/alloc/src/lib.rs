//! `hostile-alloc`: a row plugin that allocates 4 GiB (see `../README.md`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, PartitionInfo, Reject, Row, RowPlugin,
};

/// Bytes allocated per block.
const BLOCK: usize = 64 << 20;
/// Blocks allocated: 64 × 64 MiB = 4 GiB, the whole 32-bit address space.
const BLOCKS: usize = 64;
/// Every page of a block is written, so the memory is really used.
const PAGE: usize = 4096;

/// Allocates 4 GiB on the first row.
#[derive(Debug)]
pub struct Alloc;

impl RowPlugin for Alloc {
    fn describe() -> Description {
        Description::new("hostile-alloc", env!("CARGO_PKG_VERSION"), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .column_not_null("allocated", ColumnType::Bigint)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, _: &Config) -> Result<Self, Error> {
        Ok(Alloc)
    }

    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject> {
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        for b in 0..BLOCKS {
            // An allocation failure aborts (traps) here: that is the point.
            let mut block = vec![0u8; BLOCK];
            for (i, byte) in block.iter_mut().step_by(PAGE).enumerate() {
                *byte = (i ^ b) as u8;
            }
            blocks.push(std::hint::black_box(block));
        }
        // Only reached by a host without a memory cap below 4 GiB.
        let allocated = blocks.iter().map(Vec::len).sum::<usize>() as i64;
        Ok(Some(
            Row::new()
                .set("id", row.int("id")?)
                .set(
                    "order_date",
                    row.date_or_null("order_date")?
                        .map(weir_plugin::Value::Date),
                )
                .set("allocated", allocated),
        ))
    }
}

weir_plugin::export_row_plugin!(Alloc);
