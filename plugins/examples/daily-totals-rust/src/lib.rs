//! `daily-totals`: the example partition plugin, in Rust.
//!
//! Input: rows of the `orders` table (`order_date` date, `status` text, `amount`
//! decimal), partitioned by day on `order_date`. Output: one row per
//! (`order_date`, `status`) of the partition: `orders` (the number of rows, bigint)
//! and `amount` (their exact sum, numeric), like SQL's `count(*)` and `sum(amount)`:
//!
//! * `status` is grouped as it is (no case folding); a null status is a group of its
//!   own, output as null; a null `order_date` (the `__null__` partition) likewise.
//! * A null `amount` counts as an order but adds nothing; a group whose amounts are
//!   all null has a null `amount`. The sum is exact (no float, no rounding) and its
//!   scale is the largest input scale.
//! * A row whose `amount` is not a finite decimal, or whose `order_date` or `status`
//!   has another type, is rejected (with the SDK getters' reasons) and not counted.
//! * A deleted row (op `delete`) is not counted.
//! * Rows are emitted by `finish`, ordered by (`order_date`, `status`) with nulls
//!   first: the output does not depend on the order the rows were pushed in.
//!
//! Config: none. Memory: one entry per distinct status in the partition.

use std::collections::BTreeMap;

use weir_plugin::{
    ColumnType, Config, Decimal, Description, Error, Input, Kind, Op, Output, PartitionInfo,
    PartitionPlugin, Reject, Row, Value,
};

/// A group: (order date, status), null as `None`.
type Group = (Option<i32>, Option<String>);

/// The totals of one partition job, by group.
#[derive(Debug, Default)]
pub struct DailyTotals {
    groups: BTreeMap<Group, Totals>,
}

/// The totals of one group.
#[derive(Debug, Default)]
struct Totals {
    orders: i64,
    amount: Option<Decimal>,
}

/// The group and amount of one input row.
fn read(row: &Input) -> Result<(Group, Option<Decimal>), Reject> {
    let order_date = row.date_or_null("order_date")?;
    let status = row.text_or_null("status")?.map(str::to_owned);
    let amount = row.decimal_or_null("amount")?;
    Ok(((order_date, status), amount))
}

impl PartitionPlugin for DailyTotals {
    fn describe() -> Description {
        Description::new("daily-totals", env!("CARGO_PKG_VERSION"), Kind::Partition)
            .column("order_date", ColumnType::Date)
            .column("status", ColumnType::Text)
            .column_not_null("orders", ColumnType::Bigint)
            .column("amount", ColumnType::Numeric(None))
            .grain_key(&["order_date", "status"])
            .partition_column("order_date")
    }

    fn open(_partition: &PartitionInfo, _config: &Config) -> Result<Self, Error> {
        Ok(DailyTotals::default())
    }

    fn push(&mut self, rows: Vec<Input>, out: &mut Output) -> Result<(), Error> {
        for row in rows {
            if row.op() == Op::Delete {
                continue;
            }
            match read(&row) {
                Ok((group, amount)) => {
                    let totals = self.groups.entry(group).or_default();
                    totals.orders = totals
                        .orders
                        .checked_add(1)
                        .ok_or_else(|| Error::Other("order count overflow".into()))?;
                    if let Some(amount) = amount {
                        totals.amount = Some(match &totals.amount {
                            Some(sum) => sum.add(&amount),
                            None => amount,
                        });
                    }
                }
                Err(reject) => out.reject(&row, reject.0),
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<(), Error> {
        for ((order_date, status), totals) in std::mem::take(&mut self.groups) {
            out.row(
                Row::new()
                    .set("order_date", order_date.map(Value::Date))
                    .set("status", status)
                    .set("orders", totals.orders)
                    .set("amount", totals.amount),
            );
        }
        Ok(())
    }
}

weir_plugin::export_partition_plugin!(DailyTotals);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plugin::{ColumnValue, PartitionSession, PushOutput, StagedRow, run_session};

    fn row(id: i64, status: Option<&str>, amount: Value, op: Op) -> StagedRow {
        StagedRow {
            key: vec![Value::Integer(id)],
            op,
            commit_position: 1,
            commit_time: None,
            columns: vec![
                ("id", Value::Integer(id)),
                ("order_date", Value::Date(20_513)),
                (
                    "status",
                    status.map_or(Value::Null, |s| Value::Text(s.into())),
                ),
                ("amount", amount),
            ]
            .into_iter()
            .map(|(name, value)| ColumnValue {
                name: name.into(),
                value,
            })
            .collect(),
        }
    }

    fn dec(s: &str) -> Value {
        Value::Decimal(s.into())
    }

    fn run(chunks: Vec<Vec<StagedRow>>) -> PushOutput {
        let partition = PartitionInfo {
            table: "public.orders".into(),
            name: "2026-03-01".into(),
        };
        run_session::<PartitionSession<DailyTotals>>(partition, Vec::new(), chunks)
            .expect("the session succeeds")
    }

    #[test]
    fn totals_per_status_are_exact_and_ordered() {
        let out = run(vec![
            vec![
                row(1, Some("shipped"), dec("0.10"), Op::Insert),
                row(2, Some("new"), dec("19.99"), Op::Insert),
                row(3, Some("shipped"), dec("0.2"), Op::Update),
            ],
            vec![
                row(4, None, dec("5"), Op::Read),
                row(5, Some("new"), Value::Null, Op::Insert),
                row(6, Some("shipped"), dec("-0.30"), Op::Insert),
                row(7, Some("gone"), dec("1"), Op::Delete),
                row(8, Some("void"), Value::Null, Op::Insert),
            ],
        ]);
        let d = Value::Date(20_513);
        assert_eq!(
            out.rows,
            vec![
                vec![d.clone(), Value::Null, Value::Integer(1), dec("5")],
                vec![
                    d.clone(),
                    Value::Text("new".into()),
                    Value::Integer(2),
                    dec("19.99")
                ],
                vec![
                    d.clone(),
                    Value::Text("shipped".into()),
                    Value::Integer(3),
                    dec("0.00")
                ],
                vec![
                    d,
                    Value::Text("void".into()),
                    Value::Integer(1),
                    Value::Null
                ],
            ]
        );
        assert!(out.rejections.is_empty());
    }

    #[test]
    fn rows_with_a_bad_amount_are_rejected_and_not_counted() {
        let out = run(vec![vec![
            row(1, Some("new"), dec("NaN"), Op::Insert),
            row(2, Some("new"), Value::Integer(3), Op::Insert),
            row(3, Some("new"), dec("2.5"), Op::Insert),
        ]]);
        assert_eq!(
            out.rows,
            vec![vec![
                Value::Date(20_513),
                Value::Text("new".into()),
                Value::Integer(1),
                dec("2.5")
            ]]
        );
        let reasons: Vec<_> = out.rejections.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "column `amount` is not a finite decimal",
                "column `amount` is not a decimal"
            ]
        );
        assert_eq!(out.rejections[0].key, vec![Value::Integer(1)]);
    }

    #[test]
    fn an_empty_partition_has_no_rows_and_the_kind_is_partition() {
        assert!(run(Vec::new()).rows.is_empty());
        assert_eq!(
            PartitionSession::<DailyTotals>::description().kind,
            Kind::Partition
        );
    }
}
