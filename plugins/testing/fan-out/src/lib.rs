//! `fan-out`: a partition plugin that holds every row until `finish` and then emits
//! `copies` rows for each (config `copies`, default 3): row `id × copies + i` for `i`
//! in `0..copies`, with the row's `order_date`. For the host's tests of contract 0.2's
//! output in parts: a partition of more than 4096 / `copies` rows comes out of
//! `finish` in several parts (`more`, then `next`).

use weir_plugin::{
    ColumnType, Config, Description, Error, Input, Kind, Output, PartitionInfo, PartitionPlugin,
    Row, Value,
};

/// The rows held: (id, order date).
#[derive(Debug)]
pub struct FanOut {
    copies: i64,
    held: Vec<(i64, Option<i32>)>,
}

impl PartitionPlugin for FanOut {
    fn describe() -> Description {
        Description::new("fan-out", env!("CARGO_PKG_VERSION"), Kind::Partition)
            .column_not_null("id", ColumnType::Bigint)
            .column("order_date", ColumnType::Date)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_: &PartitionInfo, config: &Config) -> Result<Self, Error> {
        let copies = match config.get("copies") {
            None => 3,
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|c| (1..=1_000_000).contains(c))
                .ok_or_else(|| {
                    Error::InvalidConfig(
                        "config `copies` is not an integer from 1 to 1000000".into(),
                    )
                })?,
        };
        Ok(FanOut {
            copies,
            held: Vec::new(),
        })
    }

    fn push(&mut self, rows: Vec<Input>, out: &mut Output) -> Result<(), Error> {
        for row in rows {
            match (row.int("id"), row.date_or_null("order_date")) {
                (Ok(id), Ok(day)) => self.held.push((id, day)),
                (Err(reject), _) | (_, Err(reject)) => out.reject(&row, reject.reason()),
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<(), Error> {
        for &(id, day) in &self.held {
            for i in 0..self.copies {
                out.row(
                    Row::new()
                        .set("id", id.saturating_mul(self.copies).saturating_add(i))
                        .set("order_date", day.map(Value::Date)),
                );
            }
        }
        Ok(())
    }
}

weir_plugin::export_partition_plugin!(FanOut);
