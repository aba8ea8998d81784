/*
 * `orders`: the example row plugin, in C++, on the helper `weir_plugin.hpp`
 * (`../../sdk-cpp/`, over the C helper `../../sdk-c/weir_plugin.h`). Its output is
 * byte-identical to the Rust version's (`../orders-rust/src/lib.rs`) for the same
 * input; `../orders-cases.jsonl` holds the cases every language's version is tested
 * with.
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
 *   trailing zeros are added (`7` -> `7.00`) or removed (`1.500` -> `1.50`); if a
 *   non-zero digit would be dropped the row is rejected with `amount has more than 2
 *   decimal places` (no rounding of input), and if it has more than 10 integer
 *   digits with `amount does not fit numeric(12,2)`.
 * - `amount_eur` is the exact product `amount x rate`, rounded once to 2 decimal
 *   places **half to even** (a product exactly halfway goes to the even last digit:
 *   `5.125` -> `5.12`, `5.175` -> `5.18`; otherwise to the nearest). No float is
 *   involved at any step. More than 12 integer digits rejects the row with
 *   `amount_eur does not fit numeric(14,2)`.
 * - `status` is upper-cased by the ASCII rule only: `a`-`z` become `A`-`Z` and every
 *   other character is kept as it is (`straße` -> `STRAßE`); null stays null.
 * - `customer` must be text or null, `order_date` a date or null.
 * - The checks run in this order, and the first failure is the reason: `id`,
 *   `customer`, `order_date`, `amount` (present, not null, a decimal, finite, not
 *   negative, 2 places, fits), `amount_eur` fits, `status` (text or null). The
 *   reasons for a missing, null, mistyped or non-finite column are the getters'
 *   fixed texts (``column `amount` is null``, ``column `id` is missing``, ``column
 *   `status` is not text``, ``column `amount` is not a finite decimal``).
 * - A deleted row (op `delete`) has no output (the driver skips it).
 *
 * Config errors (`invalid-config`) are the helper's texts (``missing config key
 * `rate` ``, ``config `rate` is not valid decimal text``, ...) and this plugin's
 * ``config `rate` is negative``.
 *
 * Built by scripts/build-plugins into OUT_DIR/orders-cpp.wasm (contract
 * weir:transform@0.2.0) and, from this same source with -DWEIR_CONTRACT_0_1, into
 * OUT_DIR/orders-cpp-0-1.wasm (@0.1.0); see ../../sdk-cpp/README.md for the
 * commands.
 */

#include "weir_plugin.hpp"

class Orders {
public:
    static constexpr const char *name = "orders";
    static constexpr const char *version = "0.1.0";
    static constexpr weir_column_def columns[] = {
        weir::column_not_null("id", weir::type::bigint),
        weir::column("customer", weir::type::text),
        weir::column("order_date", weir::type::date),
        weir::column("amount", weir::type::numeric(12, 2)),
        weir::column("amount_eur", weir::type::numeric(14, 2)),
        weir::column("status", weir::type::text),
    };
    static constexpr const char *grain_key[] = {"id"};
    static constexpr const char *partition_column = "order_date";

    static weir::Result<Orders, weir::Error> open(const weir::Config &config) {
        WEIR_TRY(weir::Decimal rate, config.decimal("rate"));
        if (rate.is_negative()) {
            return weir::Error::invalid_config("config `rate` is negative");
        }
        return Orders(std::move(rate));
    }

    weir::Outcome transform(const weir::Input &row, weir::Row &out) const {
        WEIR_TRY(int64_t id, row.integer("id"));
        WEIR_TRY(auto customer, row.text_or_null("customer"));
        WEIR_TRY(auto order_date, row.date_or_null("order_date"));
        WEIR_TRY(weir::Decimal input_amount, row.decimal("amount"));
        if (input_amount.is_negative()) {
            return weir::Reject("amount is negative");
        }
        std::optional<weir::Decimal> amount = input_amount.rescale_exact(2);
        if (!amount) {
            return weir::Reject("amount has more than 2 decimal places");
        }
        if (!amount->fits(12, 2)) {
            return weir::Reject("amount does not fit numeric(12,2)");
        }
        weir::Decimal amount_eur = (*amount * rate_).round_half_even(2);
        if (!amount_eur.fits(14, 2)) {
            return weir::Reject("amount_eur does not fit numeric(14,2)");
        }
        WEIR_TRY(auto status, row.text_or_null("status"));
        out.set("id", id)
            .set("customer", customer)
            .set("order_date", order_date)
            .set("amount", *amount)
            .set("amount_eur", amount_eur)
            .set("status", weir::ascii_upper(status));
        return weir::emit;
    }

private:
    explicit Orders(weir::Decimal rate) : rate_(std::move(rate)) {}

    weir::Decimal rate_;
};

WEIR_EXPORT_CPP_ROW_PLUGIN(Orders)
