//! The plugin itself, without its export: `orders-rust-0-1` (`plugins/compat/`)
//! exports the same source on contract 0.1.

use weir_plugin::{
    ColumnType, Config, Decimal, Description, Error, Input, Kind, PartitionInfo, Reject, Row,
    RowPlugin, Value,
};

/// The orders plugin: holds the parsed `rate`.
#[derive(Debug)]
pub struct Orders {
    rate: Decimal,
}

impl RowPlugin for Orders {
    fn describe() -> Description {
        Description::new("orders", env!("CARGO_PKG_VERSION"), Kind::Row)
            .column_not_null("id", ColumnType::Bigint)
            .column("customer", ColumnType::Text)
            .column("order_date", ColumnType::Date)
            .column("amount", ColumnType::numeric(12, 2))
            .column("amount_eur", ColumnType::numeric(14, 2))
            .column("status", ColumnType::Text)
            .grain_key(&["id"])
            .partition_column("order_date")
    }

    fn open(_partition: &PartitionInfo, config: &Config) -> Result<Self, Error> {
        let rate = config.decimal("rate")?;
        if rate.is_negative() {
            return Err(Error::InvalidConfig("config `rate` is negative".into()));
        }
        Ok(Orders { rate })
    }

    fn transform(&self, row: &Input) -> Result<Option<Row>, Reject> {
        let id = row.int("id")?;
        let customer = row.text_or_null("customer")?;
        let order_date = row.date_or_null("order_date")?.map(Value::Date);
        let amount = row.decimal("amount")?;
        if amount.is_negative() {
            return Err(Reject::new("amount is negative"));
        }
        let amount = amount
            .rescale_exact(2)
            .map_err(|_| Reject::new("amount has more than 2 decimal places"))?;
        if !amount.fits(12, 2) {
            return Err(Reject::new("amount does not fit numeric(12,2)"));
        }
        let amount_eur = amount.mul(&self.rate).round_half_even(2);
        if !amount_eur.fits(14, 2) {
            return Err(Reject::new("amount_eur does not fit numeric(14,2)"));
        }
        let status = row.text_or_null("status")?.map(str::to_ascii_uppercase);
        Ok(Some(
            Row::new()
                .set("id", id)
                .set("customer", customer)
                .set("order_date", order_date)
                .set("amount", amount)
                .set("amount_eur", amount_eur)
                .set("status", status),
        ))
    }
}
