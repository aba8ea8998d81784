/*
 * `orders`: the example row plugin, in C, on the helper `weir_plugin.h`
 * (`../../sdk-c/`). Its output is byte-identical to the Rust version's
 * (`../orders-rust/src/lib.rs`) for the same input; `../orders-cases.jsonl` holds the
 * cases every language's version is tested with.
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
 * Built by scripts/build-plugins into OUT_DIR/orders-c.wasm (contract
 * weir:transform@0.2.0) and, from this same source with -DWEIR_CONTRACT_0_1, into
 * OUT_DIR/orders-c-0-1.wasm (@0.1.0); see ../../sdk-c/README.md for the
 * commands.
 */

#include "weir_plugin.h"

static const weir_column_def ORDERS_COLUMNS[] = {
    WEIR_COLUMN_NOT_NULL("id", WEIR_TYPE_BIGINT),
    WEIR_COLUMN("customer", WEIR_TYPE_TEXT),
    WEIR_COLUMN("order_date", WEIR_TYPE_DATE),
    WEIR_COLUMN("amount", WEIR_TYPE_NUMERIC(12, 2)),
    WEIR_COLUMN("amount_eur", WEIR_TYPE_NUMERIC(14, 2)),
    WEIR_COLUMN("status", WEIR_TYPE_TEXT),
};

static const char *const ORDERS_GRAIN_KEY[] = {"id"};

/* The session's state: the parsed `rate`. */
typedef struct orders_state {
    weir_decimal rate;
} orders_state;

static bool orders_open(const weir_partition *partition, const weir_config *config, void **state,
                        weir_error *error) {
    (void)partition;
    orders_state *s = malloc(sizeof *s);
    if (s == NULL) {
        abort();
    }
    *state = s;
    if (!weir_config_decimal(config, "rate", &s->rate, error)) {
        return false;
    }
    if (weir_decimal_is_negative(&s->rate)) {
        return weir_error_invalid_config(error, "config `rate` is negative");
    }
    return true;
}

static void orders_close(void *state) {
    orders_state *s = state;
    if (s != NULL) {
        weir_decimal_free(&s->rate);
        free(s);
    }
}

static weir_outcome orders_transform(const void *state, const weir_input *row, weir_row *out,
                                     weir_reject *reject) {
    const orders_state *s = state;
    int64_t id;
    weir_str customer, status;
    int32_t order_date;
    bool customer_null, order_date_null, status_null;
    weir_decimal input_amount, product, amount = WEIR_DECIMAL_ZERO, amount_eur = WEIR_DECIMAL_ZERO;
    weir_outcome outcome = WEIR_REJECT;

    if (!weir_input_int(row, "id", &id, reject)
        || !weir_input_text_or_null(row, "customer", &customer, &customer_null, reject)
        || !weir_input_date_or_null(row, "order_date", &order_date, &order_date_null, reject)
        || !weir_input_decimal(row, "amount", &input_amount, reject)) {
        return WEIR_REJECT;
    }
    if (weir_decimal_is_negative(&input_amount)) {
        weir_reject_set(reject, "amount is negative");
        goto done;
    }
    if (weir_decimal_rescale_exact(&input_amount, 2, &amount) != WEIR_DECIMAL_OK) {
        weir_reject_set(reject, "amount has more than 2 decimal places");
        goto done;
    }
    if (!weir_decimal_fits(&amount, 12, 2)) {
        weir_reject_set(reject, "amount does not fit numeric(12,2)");
        goto done;
    }
    product = weir_decimal_mul(&amount, &s->rate);
    amount_eur = weir_decimal_round_half_even(&product, 2);
    weir_decimal_free(&product);
    if (!weir_decimal_fits(&amount_eur, 14, 2)) {
        weir_reject_set(reject, "amount_eur does not fit numeric(14,2)");
        goto done;
    }
    if (!weir_input_text_or_null(row, "status", &status, &status_null, reject)) {
        goto done;
    }

    weir_row_set_int(out, "id", id);
    if (customer_null) {
        weir_row_set_null(out, "customer");
    } else {
        weir_row_set_text(out, "customer", customer);
    }
    if (order_date_null) {
        weir_row_set_null(out, "order_date");
    } else {
        weir_row_set_date(out, "order_date", order_date);
    }
    weir_row_set_decimal(out, "amount", &amount);
    weir_row_set_decimal(out, "amount_eur", &amount_eur);
    if (status_null) {
        weir_row_set_null(out, "status");
    } else {
        weir_row_set_text_owned(out, "status", weir_ascii_upper(status));
    }
    outcome = WEIR_EMIT;

done:
    weir_decimal_free(&input_amount);
    weir_decimal_free(&amount);
    weir_decimal_free(&amount_eur);
    return outcome;
}

static const weir_row_plugin ORDERS = {
    .name = "orders",
    .version = "0.1.0",
    .columns = ORDERS_COLUMNS,
    .column_count = WEIR_COUNT(ORDERS_COLUMNS),
    .grain_key = ORDERS_GRAIN_KEY,
    .grain_key_count = WEIR_COUNT(ORDERS_GRAIN_KEY),
    .partition_column = "order_date",
    .open = orders_open,
    .transform = orders_transform,
    .close = orders_close,
};

WEIR_EXPORT_ROW_PLUGIN(ORDERS)
