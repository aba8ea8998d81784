/*
 * Native unit tests of weir_plugin.h (run by native_tests.py, under
 * AddressSanitizer), on the contract of the bindings it is built with (0.2, or 0.1
 * with WEIR_CONTRACT_0_1): the decimal examples of the Rust SDK's decimal.rs, the
 * getters' and config lookups' fixed texts (input.rs), the output row checks
 * (output.rs) through the row-plugin driver, on 0.2 the schema's memory of column
 * positions and `next`, and SHA-256 against known digests.
 */
#include <stdio.h>

#include "weir_plugin.h"
#include "native_stubs.h"
#include "test_rows.h"

static int failures;
static int checks;

#define CHECK(cond, ...)                                            \
    do {                                                            \
        checks++;                                                   \
        if (!(cond)) {                                              \
            failures++;                                             \
            fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                           \
            fprintf(stderr, "\n");                                  \
        }                                                           \
    } while (0)

static bool string_is(const weir_string *s, const char *want) {
    return weir_str_eq(weir_str_of(s), want);
}

static weir_decimal d(const char *text) {
    weir_decimal out;
    if (weir_decimal_parse_cstr(text, &out) != WEIR_DECIMAL_OK) {
        fprintf(stderr, "not a valid decimal: %s\n", text);
        abort();
    }
    return out;
}

/* Checks that `x` prints as `want`, then frees it. */
static void check_print(weir_decimal x, const char *want, const char *what) {
    weir_string s = weir_decimal_to_string(&x);
    CHECK(string_is(&s, want), "%s: got %.*s, want %s", what, (int)s.len, (const char *)s.ptr, want);
    weir_string_free(&s);
    weir_decimal_free(&x);
}

static void parses_and_prints_postgres_text_keeping_the_scale(void) {
    const char *cases[][2] = {
        {"0", "0"},         {"0.00", "0.00"},     {"-0.00", "0.00"}, {"12.340", "12.340"},
        {"-12.340", "-12.340"}, {"007.5", "7.5"}, {".5", "0.5"},     {"7.", "7"},
        {"+3", "3"},        {"0.05", "0.05"},
        {"123456789012345678901234567890.123456789", "123456789012345678901234567890.123456789"},
    };
    for (size_t i = 0; i < WEIR_COUNT(cases); i++) {
        check_print(d(cases[i][0]), cases[i][1], cases[i][0]);
    }
}

static void refuses_what_is_not_finite_decimal_text(void) {
    const char *bad[] = {"", "-", ".", "1e5", "1.2.3", " 1", "1 ", "abc", "--1", "0x10",
                         "\xd9\xa1", "+-1", "-NaN", "1,5", ("\xef\xbb\xbf" "2")};
    for (size_t i = 0; i < WEIR_COUNT(bad); i++) {
        weir_decimal x;
        CHECK(weir_decimal_parse_cstr(bad[i], &x) == WEIR_DECIMAL_INVALID, "%s", bad[i]);
        weir_decimal_free(&x);
    }
    const char *special[] = {"NaN", "Infinity", "-Infinity", "+Infinity"};
    for (size_t i = 0; i < WEIR_COUNT(special); i++) {
        weir_decimal x;
        CHECK(weir_decimal_parse_cstr(special[i], &x) == WEIR_DECIMAL_NOT_FINITE, "%s", special[i]);
        weir_decimal_free(&x);
    }
    size_t n = WEIR_DECIMAL_MAX_DIGITS;
    char *long_text = malloc(n + 3);
    memset(long_text, '9', n + 1);
    long_text[n + 1] = '\0';
    weir_decimal x;
    CHECK(weir_decimal_parse_cstr(long_text, &x) == WEIR_DECIMAL_TOO_MANY_DIGITS, "too many");
    weir_decimal_free(&x);
    long_text[n] = '\0';
    CHECK(weir_decimal_parse_cstr(long_text, &x) == WEIR_DECIMAL_OK, "the maximum");
    CHECK(x.len == n, "all digits kept");
    weir_decimal_free(&x);
    /* The limit counts digits, not the point or the sign. */
    long_text[0] = '-';
    long_text[n / 2] = '.';
    long_text[n] = '9';
    long_text[n + 1] = '\0';
    CHECK(weir_decimal_parse_cstr(long_text, &x) == WEIR_DECIMAL_OK, "the maximum with - and .");
    weir_decimal_free(&x);
    free(long_text);
}

static void check_mul(const char *a, const char *b, const char *want) {
    weir_decimal x = d(a), y = d(b);
    check_print(weir_decimal_mul(&x, &y), want, "mul");
    weir_decimal_free(&x);
    weir_decimal_free(&y);
}

static void multiplication_is_exact_where_floats_are_not(void) {
    check_mul("0.29", "100", "29.00");
    check_mul("0.1", "3", "0.3");
    check_mul("100.00", "1.0825", "108.250000");
    check_mul("-1.5", "2", "-3.0");
    check_mul("-1.5", "-2", "3.0");
    check_mul("-1.5", "0.00", "0.000");
    check_mul("99999999999999999999.99", "99999999999999999999.99",
              "9999999999999999999998000000000000000000.0001");
}

static void check_add(const char *a, const char *b, const char *want) {
    weir_decimal x = d(a), y = d(b);
    check_print(weir_decimal_add(&x, &y), want, "add");
    weir_decimal_free(&x);
    weir_decimal_free(&y);
}

static void addition_aligns_scales_and_handles_signs(void) {
    check_add("1.5", "2.25", "3.75");
    check_add("1.50", "-1.5", "0.00");
    check_add("-10", "0.01", "-9.99");
    check_add("0.01", "-10", "-9.99");
    check_add("999.99", "0.01", "1000.00");
    check_add("-5", "-5", "-10");
}

static void rounds_half_to_even_symmetrically(void) {
    struct {
        const char *input;
        uint32_t scale;
        const char *want;
    } cases[] = {
        {"0.125", 2, "0.12"},   {"0.135", 2, "0.14"},  {"0.1250001", 2, "0.13"},
        {"0.1249999", 2, "0.12"}, {"-0.125", 2, "-0.12"}, {"-0.135", 2, "-0.14"},
        {"2.5", 0, "2"},        {"3.5", 0, "4"},       {"0.5", 0, "0"},
        {"-0.5", 0, "0"},       {"9.995", 2, "10.00"}, {"0.004", 2, "0.00"},
        {"0.005", 2, "0.00"},   {"0.015", 2, "0.02"},  {"1.2", 3, "1.200"},
        {"5", 2, "5.00"},       {"0.0000005", 2, "0.00"}, {"0.0000006", 6, "0.000001"},
        {"99.995", 2, "100.00"}, {"-99.995", 2, "-100.00"},
    };
    for (size_t i = 0; i < WEIR_COUNT(cases); i++) {
        weir_decimal x = d(cases[i].input);
        check_print(weir_decimal_round_half_even(&x, cases[i].scale), cases[i].want, cases[i].input);
        weir_decimal_free(&x);
    }
}

static void exact_rescaling_refuses_to_drop_digits(void) {
    weir_decimal x = d("1.500"), out;
    CHECK(weir_decimal_rescale_exact(&x, 2, &out) == WEIR_DECIMAL_OK, "1.500");
    check_print(out, "1.50", "1.500 at 2");
    weir_decimal_free(&x);
    x = d("7");
    CHECK(weir_decimal_rescale_exact(&x, 2, &out) == WEIR_DECIMAL_OK, "7");
    check_print(out, "7.00", "7 at 2");
    weir_decimal_free(&x);
    x = d("1.005");
    CHECK(weir_decimal_rescale_exact(&x, 2, &out) == WEIR_DECIMAL_INEXACT, "1.005");
    weir_decimal_free(&out);
    weir_decimal_free(&x);
    x = d("0.000");
    CHECK(weir_decimal_rescale_exact(&x, 0, &out) == WEIR_DECIMAL_OK, "0.000");
    check_print(out, "0", "0.000 at 0");
    weir_decimal_free(&x);
}

static int cmp(const char *a, const char *b) {
    weir_decimal x = d(a), y = d(b);
    int c = weir_decimal_cmp(&x, &y);
    weir_decimal_free(&x);
    weir_decimal_free(&y);
    return c;
}

static bool fits(const char *a, uint32_t p, uint32_t s) {
    weir_decimal x = d(a);
    bool f = weir_decimal_fits(&x, p, s);
    weir_decimal_free(&x);
    return f;
}

static void compares_by_value_and_checks_numeric_bounds(void) {
    CHECK(cmp("1.5", "1.50") == 0, "1.5 == 1.50");
    CHECK(cmp("-2", "0") < 0, "-2 < 0");
    CHECK(cmp("0", "0.01") < 0, "0 < 0.01");
    CHECK(cmp("-2.5", "-2.4") < 0, "-2.5 < -2.4");
    CHECK(cmp("10", "9.99") > 0, "10 > 9.99");
    CHECK(fits("9999999999.99", 12, 2), "fits");
    CHECK(fits("9999999999.990", 12, 2), "fits");
    CHECK(!fits("10000000000.00", 12, 2), "too large");
    CHECK(!fits("1.005", 12, 2), "too many places");
    CHECK(fits("0.00000", 1, 0), "zero fits");
    CHECK(fits("-99", 2, 0), "-99 fits numeric(2,0)");
    weir_decimal x = d("0.05");
    CHECK(weir_decimal_integer_digits(&x) == 0, "0.05");
    weir_decimal_free(&x);
    x = d("-123.4");
    CHECK(weir_decimal_integer_digits(&x) == 3, "-123.4");
    CHECK(weir_decimal_is_negative(&x), "negative");
    weir_decimal_free(&x);
    check_print(weir_decimal_from_i64(-120), "-120", "from -120");
    check_print(weir_decimal_from_i64(INT64_MIN), "-9223372036854775808", "from i64 min");
    check_print(weir_decimal_from_i64(0), "0", "from 0");
    x = d("5");
    check_print(weir_decimal_neg(&x), "-5", "neg 5");
    weir_decimal_free(&x);
    x = d("0");
    check_print(weir_decimal_neg(&x), "0", "neg 0");
    check_print(weir_decimal_clone(&x), "0", "clone 0");
    weir_decimal_free(&x);
}

/* ---- getters and config ---- */

static weir_string lit(const char *s) {
    return weir_test_lit(s);
}

static weir_value text_value(uint8_t tag, const char *s) {
    weir_value v;
    memset(&v, 0, sizeof v);
    v.tag = tag;
    v.val.text = lit(s);
    return v;
}

static weir_value tag_value(uint8_t tag) {
    weir_value v;
    memset(&v, 0, sizeof v);
    v.tag = tag;
    return v;
}

static void check_reject(bool ok, weir_reject *reject, const char *want) {
    CHECK(!ok, "expected a rejection: %s", want);
    CHECK(string_is(&reject->reason, want), "got %.*s, want %s", (int)reject->reason.len,
          (const char *)reject->reason.ptr, want);
    weir_string_free(&reject->reason);
}

static void getters_read_typed_values_and_reject_with_fixed_reasons(void) {
    const char *names[] = {"id", "name", "none", "amount", "nan", "bad", "gone"};
    weir_value values[7];
    values[0] = tag_value(WEIR_VALUE_INTEGER);
    values[0].val.integer = 5;
    values[1] = text_value(WEIR_VALUE_TEXT, "a");
    values[2] = tag_value(WEIR_VALUE_NULL);
    values[3] = text_value(WEIR_VALUE_DECIMAL, "1.50");
    values[4] = text_value(WEIR_VALUE_DECIMAL, "NaN");
    values[5] = text_value(WEIR_VALUE_DECIMAL, "1e5");
    /* A column the row has no value for (0.2: `none`; 0.1: not in the row). */
    values[6] = tag_value(WEIR_TEST_ABSENT);
    weir_test_row t;
    weir_test_row_init(&t, names, values, WEIR_COUNT(values));
    const weir_input *row = &t.input;

    weir_reject reject = {{NULL, 0}};
    int64_t i;
    CHECK(weir_input_int(row, "id", &i, &reject) && i == 5, "int");
    weir_str s;
    bool is_null;
    CHECK(weir_input_text(row, "name", &s, &reject) && weir_str_eq(s, "a"), "text");
    CHECK(weir_input_text_or_null(row, "none", &s, &is_null, &reject) && is_null, "null");
    weir_decimal x;
    CHECK(weir_input_decimal(row, "amount", &x, &reject), "decimal");
    check_print(x, "1.50", "amount");
    check_reject(weir_input_int(row, "none", &i, &reject), &reject, "column `none` is null");
    check_reject(weir_input_int(row, "nope", &i, &reject), &reject, "column `nope` is missing");
    check_reject(weir_input_int(row, "gone", &i, &reject), &reject, "column `gone` is missing");
    CHECK(weir_input_get(row, "gone") == NULL && weir_input_get(row, "nope") == NULL, "get absent");
    CHECK(weir_input_get(row, "id") != NULL && weir_input_get(row, "id")->val.integer == 5, "get");
    check_reject(weir_input_int(row, "name", &i, &reject), &reject,
                 "column `name` is not an integer");
    check_reject(weir_input_decimal(row, "id", &x, &reject), &reject,
                 "column `id` is not a decimal");
    check_reject(weir_input_decimal(row, "nan", &x, &reject), &reject,
                 "column `nan` is not a finite decimal");
    check_reject(weir_input_decimal(row, "bad", &x, &reject), &reject,
                 "column `bad` is not valid decimal text");
    check_reject(weir_input_text(row, "id", &s, &reject), &reject, "column `id` is not text");
    check_reject(weir_input_bool(row, "id", &is_null, &reject), &reject,
                 "column `id` is not a boolean");
    double f;
    check_reject(weir_input_float(row, "id", &f, &reject), &reject, "column `id` is not a float");
    weir_bytes b;
    check_reject(weir_input_bytes(row, "id", &b, &reject), &reject, "column `id` is not bytes");
    int32_t date;
    check_reject(weir_input_date(row, "id", &date, &reject), &reject, "column `id` is not a date");
    check_reject(weir_input_timestamp(row, "id", &i, &reject), &reject,
                 "column `id` is not a timestamp");
    check_reject(weir_input_json(row, "id", &s, &reject), &reject, "column `id` is not json");
    /* A second failure replaces the first reason (and frees it). */
    weir_input_int(row, "nope", &i, &reject);
    check_reject(weir_input_int(row, "none", &i, &reject), &reject, "column `none` is null");
    weir_test_row_free(&t);
}

static void check_error(bool ok, weir_error *error, uint8_t tag, const char *want) {
    CHECK(!ok, "expected an error: %s", want);
    CHECK(error->tag == tag, "tag %d, want %d", error->tag, tag);
    CHECK(string_is(&error->val.other, want), "got %.*s, want %s", (int)error->val.other.len,
          (const char *)error->val.other.ptr, want);
    weir_error_free(error);
}

static void config_lookups_name_the_key_not_the_value(void) {
    weir_config_entry entries[] = {
        {lit("bad"), lit("secret")}, {lit("huge"), lit("")}, {lit("inf"), lit("Infinity")},
        {lit("rate"), lit("1.5")},
    };
    size_t n = WEIR_DECIMAL_MAX_DIGITS + 1;
    char *huge = malloc(n + 1);
    memset(huge, '1', n);
    huge[n] = '\0';
    entries[1].f1 = lit(huge);
    weir_config config = {entries, WEIR_COUNT(entries)};
    weir_error error;
    memset(&error, 0, sizeof error);
    weir_str s;
    CHECK(weir_config_get(&config, "rate", &s) && weir_str_eq(s, "1.5"), "get");
    CHECK(!weir_config_get(&config, "missing", &s), "get missing");
    weir_decimal x;
    CHECK(weir_config_decimal(&config, "rate", &x, &error), "decimal");
    check_print(x, "1.5", "rate");
    check_error(weir_config_decimal(&config, "bad", &x, &error), &error, WEIR_ERROR_INVALID_CONFIG,
                "config `bad` is not valid decimal text");
    check_error(weir_config_decimal(&config, "inf", &x, &error), &error, WEIR_ERROR_INVALID_CONFIG,
                "config `inf` is not a finite decimal");
    check_error(weir_config_decimal(&config, "huge", &x, &error), &error, WEIR_ERROR_INVALID_CONFIG,
                "config `huge` has too many digits");
    check_error(weir_config_require(&config, "missing", &s, &error), &error,
                WEIR_ERROR_INVALID_CONFIG, "missing config key `missing`");
    check_error(weir_config_decimal(&config, "missing", &x, &error), &error,
                WEIR_ERROR_INVALID_CONFIG, "missing config key `missing`");
    check_error(weir_error_other(&error, "x"), &error, WEIR_ERROR_OTHER, "x");
    free(huge);
}

/* ---- output rows, through the driver ---- */

static const weir_column_def ABC[] = {
    WEIR_COLUMN("a", WEIR_TYPE_BIGINT),
    WEIR_COLUMN("b", WEIR_TYPE_TEXT),
    WEIR_COLUMN("c", WEIR_TYPE_BOOLEAN),
};

static int mode;

static weir_outcome abc_transform(const void *state, const weir_input *row, weir_row *out,
                                  weir_reject *reject) {
    (void)state, (void)row, (void)reject;
    switch (mode) {
    case 0: /* any order */
        weir_row_set_bool(out, "c", true);
        weir_row_set_int(out, "a", 1);
        weir_row_set_text_cstr(out, "b", "x");
        weir_row_set_text_cstr(out, "b", "y"); /* the last value is kept */
        return WEIR_EMIT;
    case 1: /* a declared column left unset */
        weir_row_set_int(out, "a", 1);
        weir_row_set_text_cstr(out, "b", "x");
        return WEIR_EMIT;
    case 2: /* an undeclared column (taken over and freed) */
        weir_row_set_int(out, "a", 1);
        weir_row_set_text_owned(out, "z", weir_string_from_cstr("lost"));
        weir_row_set_text_cstr(out, "b", "x");
        weir_row_set_null(out, "c");
        return WEIR_EMIT;
    default: /* a half-built row that is rejected after all */
        weir_row_set_text_cstr(out, "b", "x");
        return weir_reject_set(reject, "no"), WEIR_REJECT;
    }
}

static const weir_row_plugin ABC_PLUGIN = {
    .name = "abc",
    .version = "1",
    .columns = ABC,
    .column_count = WEIR_COUNT(ABC),
    .grain_key = NULL,
    .grain_key_count = 0,
    .partition_column = "a",
    .open = NULL,
    .transform = abc_transform,
    .close = NULL,
};

/* The exports too, so that the generated bindings link (not called here). */
WEIR_EXPORT_ROW_PLUGIN(ABC_PLUGIN)

/* One push of one row (allocated as the host would) in `mode`. */
static bool push_one(weir_push_output *ret, weir_error *err) {
    const char *names[] = {"k"};
    weir_value values[1] = {tag_value(WEIR_VALUE_INTEGER)};
    weir_row_session *s = weir_test_open(&ABC_PLUGIN, "", "", NULL, 0, names, 1);
    weir_test_row t;
    weir_test_row_init(&t, names, values, 1);
    weir_staged_rows list = weir_test_staged(&t, 0, WEIR_OP_INSERT);
    bool ok = weir_row_plugin_push(&ABC_PLUGIN, s, &list, ret, err);
    weir_test_row_free(&t);
    weir_row_plugin_close(&ABC_PLUGIN, s);
    return ok;
}

static void rows_are_put_in_declared_order_and_checked_against_it(void) {
    weir_push_output ret;
    weir_error err;
    mode = 0;
    CHECK(push_one(&ret, &err), "in any order");
    CHECK(ret.rows.len == 1 && ret.rows.ptr[0].len == 3, "one row of 3");
    weir_value *v = ret.rows.ptr[0].ptr;
    CHECK(v[0].tag == WEIR_VALUE_INTEGER && v[0].val.integer == 1, "a");
    CHECK(v[1].tag == WEIR_VALUE_TEXT && string_is(&v[1].val.text, "y"), "b");
    CHECK(v[2].tag == WEIR_VALUE_BOOLEAN && v[2].val.boolean, "c");
    CHECK(ret.rejections.len == 0 && ret.rejections.ptr == NULL, "no rejections, no allocation");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);

    mode = 1;
    check_error(push_one(&ret, &err), &err, WEIR_ERROR_OTHER,
                "output row does not set declared column `c`");
    mode = 2;
    check_error(push_one(&ret, &err), &err, WEIR_ERROR_OTHER,
                "output row sets column `z`, which describe does not declare");
    mode = 3;
    CHECK(push_one(&ret, &err), "rejected");
    CHECK(ret.rows.len == 0 && ret.rows.ptr == NULL, "no rows, no allocation");
    CHECK(ret.rejections.len == 1 && string_is(&ret.rejections.ptr[0].reason, "no"), "reason");
    CHECK(ret.rejections.ptr[0].key.len == 1, "the key moved into the rejection");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
}

static void deletes_are_skipped_and_finish_returns_nothing(void) {
    const char *names[] = {"k"};
    weir_value values[1] = {tag_value(WEIR_VALUE_INTEGER)};
    weir_row_session *s = weir_test_open(&ABC_PLUGIN, "public.t", "2026-03-01", NULL, 0, names, 1);
    weir_test_row t;
    weir_test_row_init(&t, names, values, 1);
    weir_staged_rows list = weir_test_staged(&t, 9, WEIR_OP_DELETE);
    weir_push_output ret;
    weir_error err;
    mode = 0;
    CHECK(weir_row_plugin_push(&ABC_PLUGIN, s, &list, &ret, &err), "push of a delete");
    CHECK(ret.rows.len == 0 && ret.rejections.len == 0, "a delete has no output");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
    CHECK(weir_row_plugin_finish(&ABC_PLUGIN, s, &ret, &err), "finish");
    CHECK(ret.rows.len == 0 && ret.rejections.len == 0, "finish returns nothing");
#ifdef WEIR_CONTRACT_0_2
    CHECK(!ret.more, "in one part");
    CHECK(!weir_row_plugin_next(&ABC_PLUGIN, s, &ret, &err), "next with nothing pending");
    check_error(false, &err, WEIR_ERROR_OTHER, "`next` called with no output pending");
#endif
    weir_test_row_free(&t);
    weir_row_plugin_close(&ABC_PLUGIN, s);
}

#ifdef WEIR_CONTRACT_0_2
static void the_schema_resolves_each_name_once_per_session(void) {
    const char *names[] = {"a", "b", "a", "", "c"};
    weir_value values[5];
    for (size_t i = 0; i < WEIR_COUNT(values); i++) {
        values[i] = tag_value(WEIR_VALUE_INTEGER);
        values[i].val.integer = (int64_t)i;
    }
    values[4] = tag_value(WEIR_TEST_ABSENT);
    weir_test_row t;
    weir_test_row_init(&t, names, values, WEIR_COUNT(values));
    const weir_input *row = &t.input;
    weir_reject reject = {{NULL, 0}};
    int64_t i = -1;
    /* Many rows' worth of lookups, in one order and then another. */
    for (int round = 0; round < 3; round++) {
        CHECK(weir_input_int(row, "a", &i, &reject) && i == 0, "the first `a` wins");
        CHECK(weir_input_int(row, "b", &i, &reject) && i == 1, "b");
        CHECK(weir_input_int(row, "", &i, &reject) && i == 3, "an empty name");
        check_reject(weir_input_int(row, "c", &i, &reject), &reject, "column `c` is missing");
        check_reject(weir_input_int(row, "z", &i, &reject), &reject, "column `z` is missing");
    }
    CHECK(weir_input_int(row, "b", &i, &reject) && i == 1, "b again");
    CHECK(weir_input_int(row, "a", &i, &reject) && i == 0, "a again");
    CHECK(t.schema.memo_len == 5, "each name searched for once: %zu", t.schema.memo_len);
    CHECK(weir_schema_position(&t.schema, "c") == 4, "c is at 4 (no value in this row)");
    CHECK(weir_schema_position(&t.schema, "z") == WEIR_NO_POSITION, "z is not in the schema");

    /* A reused buffer: the name is compared, not the pointer. */
    char buf[8];
    strcpy(buf, "a");
    CHECK(weir_input_int(row, buf, &i, &reject) && i == 0, "buffer a");
    strcpy(buf, "b");
    CHECK(weir_input_int(row, buf, &i, &reject) && i == 1, "buffer b");
    strcpy(buf, "zz");
    check_reject(weir_input_int(row, buf, &i, &reject), &reject, "column `zz` is missing");

    /* Past the memory's size names are searched for at every call, still right. */
    for (int k = 0; k < 2 * WEIR__MEMO_MAX; k++) {
        char name[16];
        snprintf(name, sizeof name, "x%d", k);
        CHECK(weir_input_get(row, name) == NULL, "%s", name);
    }
    CHECK(t.schema.memo_len == WEIR__MEMO_MAX, "the memory is bounded");
    CHECK(weir_input_int(row, "b", &i, &reject) && i == 1, "b still");
    weir_test_row_free(&t);
}
#endif

static void ascii_upper_case_keeps_everything_else(void) {
    weir_string s = weir_ascii_upper(weir_str_from_cstr("stra\xc3\x9f" "e \xc3\xa9t\xc3\xa9 az{`@[AZ"));
    CHECK(string_is(&s, "STRA\xc3\x9f" "E \xc3\xa9T\xc3\xa9 AZ{`@[AZ"), "upper");
    weir_string_free(&s);
    s = weir_ascii_upper(weir_str_from_cstr(""));
    CHECK(s.ptr == NULL && s.len == 0, "empty owns nothing");
}

/* The SHA-256 of the FIPS 180-4 examples, of the block boundaries (the padding in
 * the last block or in one more), of 1,000,000 bytes, and the same digests fed in
 * pieces of every split (the buffering in `_update`). The boundary digests are
 * Python's hashlib's, of bytes (7 * i + 3) mod 256. */
static void pattern(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)((i * 7 + 3) % 256);
    }
}

static void sha256_matches_known_digests(void) {
    char hex[WEIR_SHA256_HEX_SIZE];
    const char *texts[][2] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    for (size_t i = 0; i < WEIR_COUNT(texts); i++) {
        weir_sha256_hex(texts[i][0], strlen(texts[i][0]), hex);
        CHECK(strcmp(hex, texts[i][1]) == 0, "sha256(\"%s\") = %s", texts[i][0], hex);
    }
    weir_sha256_hex(NULL, 0, hex);
    CHECK(strcmp(hex, texts[0][1]) == 0, "sha256 of NULL, 0");

    static const struct {
        size_t len;
        const char *hex;
    } sized[] = {
        {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
        {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
        {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
        {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
        {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
        {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
        {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
        {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
        {127, "a8d23e75d936f303d248888d9b165ee543f4cbafcad3c9dd2a79bd84faa11d07"},
        {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
        {129, "307f8fc2c1622b92762e818d39a185d4d667ad49a4b07ceae1f4afa008a93ec4"},
    };
    for (size_t i = 0; i < WEIR_COUNT(sized); i++) {
        size_t n = sized[i].len;
        /* Exactly `n` bytes of the heap: ASan sees any read past them. */
        uint8_t *p = malloc(n);
        pattern(p, n);
        weir_sha256_hex(p, n, hex);
        CHECK(strcmp(hex, sized[i].hex) == 0, "sha256 of %zu bytes = %s", n, hex);
        for (size_t cut = 0; cut <= n; cut++) {
            weir_str a = {(const char *)p, cut}, b = {(const char *)p + cut, n - cut};
            weir_sha256_hex_concat(a, b, hex);
            CHECK(strcmp(hex, sized[i].hex) == 0, "%zu bytes cut at %zu", n, cut);
        }
        weir_sha256_ctx c;
        weir_sha256_init(&c);
        for (size_t at = 0; at < n; at += 3) {
            weir_sha256_update(&c, p + at, n - at < 3 ? n - at : 3);
        }
        weir_sha256_final_hex(&c, hex);
        CHECK(strcmp(hex, sized[i].hex) == 0, "%zu bytes by threes", n);
        free(p);
    }

    size_t million = 1000000;
    char *a = malloc(million);
    memset(a, 'a', million);
    weir_sha256_hex(a, million, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
          "sha256 of a million a: %s", hex);
    uint8_t raw[32];
    weir_sha256(a, million, raw);
    CHECK(raw[0] == 0xcd && raw[1] == 0xc7 && raw[31] == 0xd0, "raw digest");
    free(a);

    /* The plugin template's first case: salt `s1`, email `ann@example.com`. */
    weir_sha256_hex_concat(weir_str_from_cstr("s1"), weir_str_from_cstr("ann@example.com"), hex);
    CHECK(strcmp(hex, "265c8a70e452e22bae8c73c46b2744a4df9ad748ff85a1d6641bcd98a410da09") == 0,
          "salted: %s", hex);
    weir_str none = {NULL, 0};
    weir_sha256_hex_concat(none, none, hex);
    CHECK(strcmp(hex, texts[0][1]) == 0, "concat of two empty texts");
}

int main(void) {
    parses_and_prints_postgres_text_keeping_the_scale();
    refuses_what_is_not_finite_decimal_text();
    multiplication_is_exact_where_floats_are_not();
    addition_aligns_scales_and_handles_signs();
    rounds_half_to_even_symmetrically();
    exact_rescaling_refuses_to_drop_digits();
    compares_by_value_and_checks_numeric_bounds();
    getters_read_typed_values_and_reject_with_fixed_reasons();
    config_lookups_name_the_key_not_the_value();
    rows_are_put_in_declared_order_and_checked_against_it();
    deletes_are_skipped_and_finish_returns_nothing();
#ifdef WEIR_CONTRACT_0_2
    the_schema_resolves_each_name_once_per_session();
#endif
    ascii_upper_case_keeps_everything_else();
    sha256_matches_known_digests();
    /* The log import links and is called (the stub writes it to stderr). */
    weir_log_debug("test_helpers: the log import");
    printf("weir_plugin.h (contract %s): %d checks, %d failed\n", WEIR_CONTRACT, checks, failures);
    return failures == 0 ? 0 : 1;
}
