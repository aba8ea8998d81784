//! `orders`: the example row plugin, in Rust. The Python and JavaScript versions must
//! give byte-identical output for the same input; `../orders-cases.jsonl` holds the
//! cases all three are tested with.
//!
//! Input: rows of an `orders` table with columns `id` (integer), `customer` (text),
//! `order_date` (date), `amount` (decimal), `status` (text). Config: `rate`, a
//! decimal text (EUR per unit of `amount`), required, finite, not negative.
//!
//! The rules, exactly:
//!
//! * `id` is copied (required: a missing or null `id` rejects the row); `customer`
//!   and `order_date` are copied (null stays null; `order_date` is the partition
//!   column, so it is never changed).
//! * `amount` is required and finite. A negative amount rejects the row with
//!   `amount is negative`. The output `amount` is the input at exactly 2 decimal
//!   places: trailing zeros are added (`7` → `7.00`) or removed (`1.500` → `1.50`);
//!   if a non-zero digit would be dropped the row is rejected with `amount has more
//!   than 2 decimal places` (no rounding of input), and if it has more than 10
//!   integer digits with `amount does not fit numeric(12,2)`.
//! * `amount_eur` is the exact product `amount × rate`, rounded once to 2 decimal
//!   places **half to even** (a product exactly halfway goes to the even last digit:
//!   `5.125` → `5.12`, `5.175` → `5.18`; otherwise to the nearest). No float is
//!   involved at any step. More than 12 integer digits rejects the row with
//!   `amount_eur does not fit numeric(14,2)`.
//! * `status` is upper-cased by the ASCII rule only: `a`–`z` become `A`–`Z` and every
//!   other character is kept as it is (`straße` → `STRAßE`), so that every language
//!   agrees whatever its Unicode tables; null stays null.
//! * `customer` must be text or null, `order_date` a date or null.
//! * The checks run in this order, and the first failure is the reason: `id`,
//!   `customer`, `order_date`, `amount` (present, not null, a decimal, finite, not
//!   negative, 2 places, fits), `amount_eur` fits, `status` (text or null). The
//!   reasons for a missing, null, mistyped or non-finite column are the SDK getters'
//!   fixed texts (``column `amount` is null``, ``column `id` is missing``, ``column
//!   `status` is not text``, ``column `amount` is not a finite decimal``).
//! * A deleted row (op `delete`) has no output.

mod orders;

pub use orders::Orders;

weir_plugin::export_row_plugin!(Orders);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plugin::{Kind, RowSession, cases};

    #[test]
    fn the_shared_cases_pass() {
        let jsonl = include_str!("../../orders-cases.jsonl");
        let failures =
            cases::run_cases::<RowSession<Orders>>(jsonl, &RowSession::<Orders>::description());
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn describes_a_row_plugin_partitioned_by_order_date() {
        let d = RowSession::<Orders>::description();
        assert_eq!(d.kind, Kind::Row);
        assert_eq!(d.name, "orders");
        assert_eq!(d.grain_key, vec!["id".to_owned()]);
        assert_eq!(d.partition_column, "order_date");
        let columns: Vec<_> = d.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            columns,
            [
                "id",
                "customer",
                "order_date",
                "amount",
                "amount_eur",
                "status"
            ]
        );
    }
}
