/**
 * `orders`: the example row plugin, in JavaScript, on the SDK `@weir/plugin`
 * (`../../sdk-js/`). Its output is byte-identical to the Rust version's
 * (`../orders-rust/src/lib.rs`) for the same input; `../orders-cases.jsonl` holds the
 * cases every language's version is tested with (`orders.test.js`, `node --test`).
 *
 * Input: rows of an `orders` table with columns `id` (integer), `customer` (text),
 * `order_date` (date), `amount` (decimal), `status` (text). Config: `rate`, a
 * decimal text (EUR per unit of `amount`), required, finite, not negative.
 *
 * The rules, exactly:
 *
 * - `id` is copied (required: a missing or null `id` rejects the row); `customer`
 *   and `order_date` are copied (null stays null; `order_date` is the partition
 *   column, so it is never changed).
 * - `amount` is required and finite. A negative amount rejects the row with `amount
 *   is negative`. The output `amount` is the input at exactly 2 decimal places:
 *   trailing zeros are added (`7` → `7.00`) or removed (`1.500` → `1.50`); if a
 *   non-zero digit would be dropped the row is rejected with `amount has more than 2
 *   decimal places` (no rounding of input), and if it has more than 10 integer
 *   digits with `amount does not fit numeric(12,2)`.
 * - `amount_eur` is the exact product `amount × rate`, rounded once to 2 decimal
 *   places **half to even** (a product exactly halfway goes to the even last digit:
 *   `5.125` → `5.12`, `5.175` → `5.18`; otherwise to the nearest). No float is
 *   involved at any step. More than 12 integer digits rejects the row with
 *   `amount_eur does not fit numeric(14,2)`.
 * - `status` is upper-cased by the ASCII rule only: `a`–`z` become `A`–`Z` and every
 *   other character is kept as it is (`straße` → `STRAßE`), so that every language
 *   agrees whatever its Unicode tables; null stays null.
 * - `customer` must be text or null, `order_date` a date or null.
 * - The checks run in this order, and the first failure is the reason: `id`,
 *   `customer`, `order_date`, `amount` (present, not null, a decimal, finite, not
 *   negative, 2 places, fits), `amount_eur` fits, `status` (text or null). The
 *   reasons for a missing, null, mistyped or non-finite column are the SDK getters'
 *   fixed texts (``column `amount` is null``, ``column `id` is missing``, ``column
 *   `status` is not text``, ``column `amount` is not a finite decimal``).
 * - A deleted row (op `delete`) has no output.
 *
 * Config errors (`invalid-config`) are the SDK's texts (``missing config key `rate`
 * ``, ``config `rate` is not valid decimal text``, …) and this plugin's ``config
 * `rate` is negative``.
 *
 * The SDK is imported by its path in this repository; a plugin elsewhere imports
 * `@weir/plugin`. The component is built from the bundle of this module and the SDK
 * (`weir-plugin-bundle orders.js`, then ComponentizeJS: see `../../sdk-js/README.md`):
 * on contract 0.2 as `orders-js.wasm`, and the same bundle on 0.1 as
 * `orders-js-0-1.wasm` (`scripts/build-plugins`).
 */

import {
  ColumnType,
  Description,
  PluginError,
  Reject,
  Row,
  asciiUpperCase,
  definePlugin,
  exportPlugin,
} from '../../sdk-js/src/index.js';

export const orders = definePlugin({
  describe: new Description('orders', '0.1.0')
    .columnNotNull('id', ColumnType.bigint)
    .column('customer', ColumnType.text)
    .column('order_date', ColumnType.date)
    .column('amount', ColumnType.numeric(12, 2))
    .column('amount_eur', ColumnType.numeric(14, 2))
    .column('status', ColumnType.text)
    .grainKey(['id'])
    .partitionColumn('order_date'),

  open(_partition, config) {
    const rate = config.decimal('rate');
    if (rate.isNegative()) {
      throw PluginError.invalidConfig('config `rate` is negative');
    }
    return { rate };
  },

  transform(row, { rate }) {
    const id = row.int('id');
    const customer = row.textOrNull('customer');
    const orderDate = row.dateOrNull('order_date');
    const amount = row.decimal('amount');
    if (amount.isNegative()) {
      throw new Reject('amount is negative');
    }
    if (!amount.fitsScale(2)) {
      throw new Reject('amount has more than 2 decimal places');
    }
    if (!amount.fits(12, 2)) {
      throw new Reject('amount does not fit numeric(12,2)');
    }
    const amountEur = amount.mul(rate).roundHalfEven(2);
    if (!amountEur.fits(14, 2)) {
      throw new Reject('amount_eur does not fit numeric(14,2)');
    }
    const status = row.textOrNull('status');
    // `amount` is set at its own scale: the SDK rescales it to the column's 2 places.
    return new Row({
      id,
      customer,
      order_date: orderDate,
      amount,
      amount_eur: amountEur,
      status: status === null ? null : asciiUpperCase(status),
    });
  },
});

/** The component's `weir:transform/transform` interface. */
export const transform = exportPlugin(orders);
