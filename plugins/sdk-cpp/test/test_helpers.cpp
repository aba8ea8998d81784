/*
 * Native unit tests of weir_plugin.hpp (run by native_tests.py, under
 * AddressSanitizer and UBSan), on the contract of the bindings it is built with
 * (0.2, or 0.1 with WEIR_CONTRACT_0_1): the C++ layer over the C helper (whose own tests,
 * plugins/sdk-c/test/test_helpers.c, cover the decimal arithmetic and the texts in
 * depth): RAII and moves (a leak or a double free fails the run), results and
 * WEIR_TRY, the getters' and config lookups' fixed texts through the C++ API, every
 * `Row::set` overload through the driver, `open`'s forms and errors, and the
 * new-handler.
 */
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "weir_plugin.hpp"

extern "C" {
#include "native_stubs.h"
}
#include "test_rows.h"

static int failures;
static int checks;

/* Whether `weir::Row::set` takes a `T`. */
template <class T>
concept settable = requires(weir::Row &row, T v) { row.set("c", v); };

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        checks++;                                                                 \
        if (!(cond)) {                                                            \
            failures++;                                                           \
            std::fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);   \
            std::fprintf(stderr, __VA_ARGS__);                                    \
            std::fprintf(stderr, "\n");                                           \
        }                                                                         \
    } while (0)

static weir::Decimal d(std::string_view text) {
    auto parsed = weir::Decimal::parse(text);
    if (!parsed) {
        std::fprintf(stderr, "not a valid decimal: %.*s\n", (int)text.size(), text.data());
        std::abort();
    }
    return std::move(parsed).value();
}

static void check_print(const weir::Decimal &x, const char *want, const char *what) {
    std::string got = x.to_string();
    CHECK(got == want, "%s: got %s, want %s", what, got.c_str(), want);
}

/* ---- decimals ---- */

static void decimals_parse_compute_and_free_themselves() {
    check_print(d("-12.340"), "-12.340", "parse");
    check_print(d("-0.00"), "0.00", "zero has no sign");
    CHECK(weir::Decimal::parse("1e5").error() == weir::DecimalStatus::invalid, "1e5");
    CHECK(weir::Decimal::parse("NaN").error() == weir::DecimalStatus::not_finite, "NaN");
    CHECK(weir::Decimal::parse("-Infinity").error() == weir::DecimalStatus::not_finite, "-Inf");
    std::string huge(WEIR_DECIMAL_MAX_DIGITS + 1, '7');
    CHECK(weir::Decimal::parse(huge).error() == weir::DecimalStatus::too_many_digits, "huge");
    huge.pop_back();
    CHECK(weir::Decimal::parse(huge).ok(), "the maximum");

    check_print(d("100.00") * d("1.0825"), "108.250000", "mul");
    check_print(d("0.1").mul(d("3")), "0.3", "mul exact");
    check_print(d("1.50") + d("-1.5"), "0.00", "add");
    check_print(d("-10").add(d("0.01")), "-9.99", "add signs");
    check_print(d("1") - d("0.25"), "0.75", "sub");
    check_print(-d("5"), "-5", "neg");
    check_print(d("0").neg(), "0", "neg 0");
    check_print(d("0.125").round_half_even(2), "0.12", "half even down");
    check_print(d("0.135").round_half_even(2), "0.14", "half even up");
    check_print(d("-0.125").round_half_even(2), "-0.12", "symmetric");
    check_print(d("5").round_half_even(2), "5.00", "pad");
    auto r = d("1.500").rescale_exact(2);
    CHECK(r.has_value(), "1.500 at 2");
    if (r) {
        check_print(*r, "1.50", "1.500 at 2");
    }
    CHECK(!d("1.005").rescale_exact(2).has_value(), "1.005 at 2 is inexact");
    check_print(*d("7").rescale_exact(2), "7.00", "7 at 2");
    CHECK(d("9999999999.99").fits(12, 2), "fits");
    CHECK(!d("10000000000.00").fits(12, 2), "too large");
    CHECK(!d("1.005").fits(12, 2), "too many places");
    CHECK(d("-123.4").integer_digits() == 3 && d("-123.4").is_negative(), "-123.4");
    CHECK(d("0.000").is_zero() && d("0.000").scale() == 3, "zero of scale 3");
    check_print(weir::Decimal::from_int(INT64_MIN), "-9223372036854775808", "from_int");
    check_print(weir::Decimal::from_int(UINT64_MAX), "18446744073709551615", "from_int u64");
    check_print(weir::Decimal::from_int(uint64_t{7}), "7", "from_int small u64");
    /* `Row::set` of a uint64_t does not compile (it would wrap past INT64_MAX). */
    static_assert(!settable<uint64_t> && !settable<unsigned long long>, "u64 refused");
    static_assert(settable<int64_t> && settable<uint32_t> && settable<int>, "integers taken");
    CHECK(d("1.5") == d("1.50"), "by value");
    CHECK(d("-2.5") < d("-2.4") && d("10") > d("9.99") && d("0") <= d("0.00"), "order");

    /* Moves leave a zero behind; the clone is independent; nothing leaks. */
    weir::Decimal a = d("123.45");
    weir::Decimal b = a.clone();
    weir::Decimal c = std::move(a);
    check_print(c, "123.45", "moved");
    check_print(a, "0", "moved-from is zero");
    a = std::move(b);
    check_print(a, "123.45", "move-assigned");
    weir::Decimal &same = a;
    a = std::move(same);
    check_print(a, "123.45", "self move-assigned");
    weir_decimal raw = c.release();
    check_print(c, "0", "released");
    weir::Decimal back = weir::Decimal::adopt(raw);
    check_print(back, "123.45", "adopted");
}

/* ---- strings, rejections, errors ---- */

static void strings_rejections_and_errors_own_their_text() {
    weir::String s("abc");
    weir::String t = s;
    weir::String u = std::move(s);
    CHECK(t == "abc" && u == "abc" && s.empty(), "copy and move");
    t = u;
    weir::String &same = t;
    t = std::move(same);
    CHECK(t.str() == "abc" && t.size() == 3, "assign");
    CHECK(weir::String("").data() == nullptr, "empty owns nothing");

    weir::String up = weir::ascii_upper("stra\xc3\x9f" "e \xc3\xa9t\xc3\xa9 az{`@[AZ");
    CHECK(up == "STRA\xc3\x9f" "E \xc3\xa9T\xc3\xa9 AZ{`@[AZ", "ascii_upper");
    std::optional<std::string_view> none;
    CHECK(!weir::ascii_upper(none).has_value(), "ascii_upper of null");
    std::optional<std::string_view> some = "de";
    CHECK(*weir::ascii_upper(some) == "DE", "ascii_upper of text");

    weir::Reject r("amount is negative");
    weir::Reject r2 = r;
    CHECK(r.reason() == "amount is negative" && r2.reason() == r.reason(), "reject");
    weir::Error e = weir::Error::invalid_config("config `rate` is negative");
    CHECK(e.kind() == weir::Error::Kind::invalid_config, "kind");
    CHECK(e.message() == "config `rate` is negative", "message");
    weir_error raw = e.release();
    CHECK(raw.tag == WEIR_ERROR_INVALID_CONFIG, "released tag");
    weir::Error back = weir::Error::adopt(raw);
    CHECK(back.message() == "config `rate` is negative" && raw.val.other.len == 0, "adopted");
    CHECK(weir::Error::other("x").kind() == weir::Error::Kind::other, "other");
    CHECK(weir::Error::invalid_input("y").kind() == weir::Error::Kind::invalid_input, "input");
}

/* ---- input rows and WEIR_TRY ---- */

static weir_string lit(const char *s) {
    return weir_test_lit(s);
}

static weir_value text_value(uint8_t tag, const char *s) {
    weir_value v;
    std::memset(&v, 0, sizeof v);
    v.tag = tag;
    v.val.text = lit(s);
    return v;
}

static weir_value scalar(uint8_t tag) {
    weir_value v;
    std::memset(&v, 0, sizeof v);
    v.tag = tag;
    return v;
}

static const char *const NAMES[] = {"id", "name", "none", "amount", "nan", "bad",
                                    "flag", "score", "day", "at", "doc", "gone"};
static weir_value VALUES[WEIR_COUNT(NAMES)];
static weir_value KEY[1];
static uint8_t BYTES[] = {0, 1, 0xff};

/* The sample row (a view over VALUES; free it with weir_test_row_free). */
static void sample_row(weir_test_row *t) {
    weir_value values[] = {
        scalar(WEIR_VALUE_INTEGER), text_value(WEIR_VALUE_TEXT, "a"),
        scalar(WEIR_VALUE_NULL), text_value(WEIR_VALUE_DECIMAL, "1.50"),
        text_value(WEIR_VALUE_DECIMAL, "NaN"), text_value(WEIR_VALUE_DECIMAL, "1e5"),
        scalar(WEIR_VALUE_BOOLEAN), scalar(WEIR_VALUE_FLOAT),
        scalar(WEIR_VALUE_DATE), scalar(WEIR_VALUE_TIMESTAMP),
        text_value(WEIR_VALUE_JSON, "{\"a\":1}"),
        /* A column the row has no value for (0.2: `none`; 0.1: not in the row). */
        scalar(WEIR_TEST_ABSENT),
    };
    values[0].val.integer = 5;
    values[6].val.boolean = true;
    values[7].val.float_ = 2.5;
    values[8].val.date = 20513;
    values[9].val.timestamp = 1772323200000000;
    static_assert(WEIR_COUNT(values) == WEIR_COUNT(VALUES));
    std::memcpy(VALUES, values, sizeof VALUES);
    weir_test_row_init(t, NAMES, VALUES, WEIR_COUNT(VALUES));
    KEY[0] = scalar(WEIR_VALUE_INTEGER);
    KEY[0].val.integer = 5;
    t->input.key.ptr = KEY;
    t->input.key.len = 1;
    t->input.op = WEIR_OP_UPDATE;
    t->input.commit_position = 42;
    t->input.commit_time.is_some = true;
    t->input.commit_time.val = 7;
}

template <class T>
static void check_reject(const weir::Result<T> &r, const char *want) {
    CHECK(!r, "expected a rejection: %s", want);
    if (!r) {
        std::string got(r.error().reason());
        CHECK(got == want, "got %s, want %s", got.c_str(), want);
    }
}

/* The first failing getter's reason is the rejection, as in orders. */
static weir::Outcome first_failure_wins(const weir::Input &row, const char *a, const char *b) {
    WEIR_TRY(int64_t x, row.integer(a));
    WEIR_TRY(auto y, row.text_or_null(b));
    (void)x;
    (void)y;
    return weir::emit;
}

static void getters_read_typed_values_and_reject_with_fixed_reasons() {
    weir_test_row raw;
    sample_row(&raw);
    weir::Input row(&raw.input);
    CHECK(*row.integer("id") == 5, "integer");
    CHECK(*row.text("name") == "a", "text");
    CHECK(!*row.text_or_null("none"), "text null");
    CHECK(**row.text_or_null("name") == "a", "text or null");
    CHECK(*row.boolean("flag") && **row.boolean_or_null("flag"), "boolean");
    CHECK(*row.float64("score") == 2.5, "float");
    CHECK(*row.date("day") == weir::Date(20513), "date");
    CHECK(row.timestamp("at")->micros == 1772323200000000, "timestamp");
    CHECK(row.json("doc")->text == "{\"a\":1}", "json");
    CHECK(*row.decimal_text("amount") == "1.50", "decimal text");
    check_print(*row.decimal("amount"), "1.50", "decimal");
    CHECK(!*row.decimal_or_null("none"), "decimal null");
    check_print(**row.decimal_or_null("amount"), "1.50", "decimal or null");
    CHECK(row.get("nope") == nullptr && row.get("id")->val.integer == 5, "get");
    CHECK((*row.value("id"))->tag == WEIR_VALUE_INTEGER, "value");
    CHECK(row.key().size() == 1 && row.key()[0].val.integer == 5, "key");
    CHECK(row.op() == weir::Op::update && row.commit_position() == 42, "op, position");
    CHECK(row.commit_time() == weir::Timestamp(7), "commit time");

    check_reject(row.integer("none"), "column `none` is null");
    check_reject(row.integer("nope"), "column `nope` is missing");
    check_reject(row.value("nope"), "column `nope` is missing");
    check_reject(row.integer_or_null("gone"), "column `gone` is missing");
    CHECK(row.get("gone") == nullptr, "get absent");
    check_reject(row.integer("name"), "column `name` is not an integer");
    check_reject(row.integer_or_null("name"), "column `name` is not an integer");
    check_reject(row.decimal("id"), "column `id` is not a decimal");
    check_reject(row.decimal("nan"), "column `nan` is not a finite decimal");
    check_reject(row.decimal_or_null("bad"), "column `bad` is not valid decimal text");
    check_reject(row.decimal("none"), "column `none` is null");
    check_reject(row.text("id"), "column `id` is not text");
    check_reject(row.boolean("id"), "column `id` is not a boolean");
    check_reject(row.float64("id"), "column `id` is not a float");
    check_reject(row.bytes("id"), "column `id` is not bytes");
    check_reject(row.date("id"), "column `id` is not a date");
    check_reject(row.timestamp("id"), "column `id` is not a timestamp");
    check_reject(row.json("id"), "column `id` is not json");

    weir::Outcome o = first_failure_wins(row, "nope", "id");
    CHECK(o.kind() == WEIR_REJECT && o.reason() == "column `nope` is missing", "first getter");
    weir::Outcome o2 = first_failure_wins(row, "id", "id");
    CHECK(o2.kind() == WEIR_REJECT && o2.reason() == "column `id` is not text", "second getter");
    CHECK(first_failure_wins(row, "id", "none").kind() == WEIR_EMIT, "all good");
    weir_test_row_free(&raw);
}

/* ---- config ---- */

static weir::Result<weir::Decimal, weir::Error> rate_of(const weir::Config &config, const char *key) {
    WEIR_TRY(weir::Decimal rate, config.decimal(key));
    if (rate.is_negative()) {
        return weir::Error::invalid_config("negative");
    }
    return rate;
}

static void check_error(const weir::Result<weir::Decimal, weir::Error> &r, const char *want) {
    CHECK(!r, "expected an error: %s", want);
    if (!r) {
        std::string got(r.error().message());
        CHECK(r.error().kind() == weir::Error::Kind::invalid_config, "kind of %s", want);
        CHECK(got == want, "got %s, want %s", got.c_str(), want);
    }
}

static void config_lookups_name_the_key_not_the_value() {
    std::string huge(WEIR_DECIMAL_MAX_DIGITS + 1, '1');
    weir_config_entry entries[] = {
        {lit("bad"), lit("secret")}, {lit("huge"), lit(huge.c_str())},
        {lit("inf"), lit("Infinity")}, {lit("minus"), lit("-1")}, {lit("rate"), lit("1.5")},
    };
    weir_config raw = {entries, WEIR_COUNT(entries)};
    weir::Config config(&raw);
    CHECK(config.get("rate") == std::string_view("1.5") && !config.get("missing"), "get");
    CHECK(*config.require("rate") == "1.5", "require");
    CHECK(config.require("missing").error().message() == "missing config key `missing`",
          "require missing");
    CHECK(config.size() == 5 && config[4].first == "rate" && config[4].second == "1.5", "entries");
    check_print(*rate_of(config, "rate"), "1.5", "rate");
    check_error(rate_of(config, "bad"), "config `bad` is not valid decimal text");
    check_error(rate_of(config, "inf"), "config `inf` is not a finite decimal");
    check_error(rate_of(config, "huge"), "config `huge` has too many digits");
    check_error(rate_of(config, "missing"), "missing config key `missing`");
    check_error(rate_of(config, "minus"), "negative");
}

/* ---- output rows and the plugin adapter, through the C driver ---- */

static int mode;

class Every {
public:
    static constexpr const char *name = "every";
    static constexpr const char *version = "1";
    static constexpr weir_column_def columns[] = {
        weir::column_not_null("i", weir::type::bigint),
        weir::column("u8", weir::type::smallint),
        weir::column("b", weir::type::boolean),
        weir::column("f", weir::type::double_precision),
        weir::column("sv", weir::type::text),
        weir::column("ss", weir::type::varchar(10)),
        weir::column("cs", weir::type::text),
        weir::column("ws", weir::type::text),
        weir::column("wm", weir::type::text),
        weir::column("dec", weir::type::numeric(5, 2)),
        weir::column("day", weir::type::date),
        weir::column("at", weir::type::timestamptz),
        weir::column("doc", weir::type::jsonb),
        weir::column("raw", weir::type::bytea),
        weir::column("n", weir::type::text),
        weir::column("on", weir::type::text),
        weir::column("os", weir::type::date),
        weir::column("pass", weir::type::numeric_any),
    };
    static constexpr const char *partition_column = "day";
    /* No grain_key: none. */

    static weir::Result<Every, weir::Error> open(const weir::Partition &partition,
                                                 const weir::Config &config) {
        if (partition.table() != "public.t" || partition.name() != "2026-03-01") {
            return weir::Error::other("wrong partition");
        }
        if (config.get("fail")) {
            return weir::Error::invalid_config("config `fail` is set");
        }
        return Every();
    }

    weir::Outcome transform(const weir::Input &row, weir::Row &out) const {
        if (mode == 1) {
            return weir::drop;
        }
        if (mode == 2) {
            out.set("i", 1); /* half built, then rejected: freed */
            return weir::Reject("no");
        }
        std::string s = "std::string";
        weir::String owned("moved");
        const weir::String copied("copied");
        std::vector<uint8_t> bytes = {0, 1, 0xff};
        out.set("i", int64_t{-7})
            .set("u8", uint8_t{200})
            .set("b", true)
            .set("f", 0.5f)
            .set("sv", std::string_view("view"))
            .set("ss", s)
            .set("cs", "literal")
            .set("ws", copied)
            .set("wm", std::move(owned))
            .set("dec", d("-1.50"))
            .set("day", weir::Date(20513))
            .set("at", weir::Timestamp(-1))
            .set("doc", weir::Json("[1]"))
            .set("raw", weir::Bytes(bytes))
            .set("n", std::nullopt)
            .set("on", std::optional<std::string>())
            .set("os", std::optional<weir::Date>(weir::Date(1)))
            .set("pass", *row.get("amount"));
        if (mode == 3) {
            out.set("undeclared", 1);
        }
        return weir::emit;
    }
};

WEIR_EXPORT_CPP_ROW_PLUGIN(Every)

/* A plugin without open (default-constructed) and with open(config) only. */
struct NoOpen {
    static constexpr const char *name = "no-open";
    static constexpr const char *version = "1";
    static constexpr weir_column_def columns[] = {weir::column("x", weir::type::text)};
    static constexpr const char *grain_key[] = {"x"};
    static constexpr const char *partition_column = "x";
    weir::Outcome transform(const weir::Input &, weir::Row &out) const {
        out.set("x", static_cast<const char *>(nullptr));
        return weir::emit;
    }
};

struct ConfigOnly {
    static constexpr const char *name = "config-only";
    static constexpr const char *version = "1";
    static constexpr std::array<weir_column_def, 1> columns = {weir::column("x", weir::type::text)};
    static constexpr std::array<const char *, 0> grain_key{};
    static constexpr const char *partition_column = "x";
    std::string x;
    static weir::Result<ConfigOnly, weir::Error> open(const weir::Config &config) {
        WEIR_TRY(auto x, config.require("x"));
        ConfigOnly out;
        out.x = std::string(x);
        return out;
    }
    weir::Outcome transform(const weir::Input &, weir::Row &out) const {
        out.set("x", x);
        return weir::emit;
    }
};

static_assert(weir::RowPlugin<NoOpen> && weir::RowPlugin<ConfigOnly> && weir::RowPlugin<Every>);
static_assert(!weir::RowPlugin<int>);

/* One push of the sample row (allocated as the host would) to plugin `p`. */
static bool push_one(const weir_row_plugin *p, const char *config_key, weir_push_output *ret,
                     weir_error *err) {
    const char *config[] = {config_key, "z"};
    weir_row_session *s = weir_test_open(p, "public.t", "2026-03-01", config,
                                         config_key != nullptr ? 1 : 0, NAMES, WEIR_COUNT(NAMES));
    weir_test_row sample;
    sample_row(&sample);
    weir_staged_rows list = weir_test_staged(&sample, 5, WEIR_OP_INSERT);
    bool ok = weir_row_plugin_push(p, s, &list, ret, err);
    weir_test_row_free(&sample);
    weir_row_plugin_close(p, s);
    return ok;
}

static bool text_is(const weir_value &v, uint8_t tag, std::string_view want) {
    return v.tag == tag
           && std::string_view(reinterpret_cast<const char *>(v.val.text.ptr), v.val.text.len)
                  == want;
}

static void check_push_error(const weir_row_plugin *p, const char *config_key, uint8_t tag,
                             const char *want) {
    weir_push_output ret;
    weir_error err{};
    CHECK(!push_one(p, config_key, &ret, &err), "expected an error: %s", want);
    std::string got(reinterpret_cast<const char *>(err.val.other.ptr), err.val.other.len);
    CHECK(err.tag == tag && got == want, "got %d %s, want %d %s", err.tag, got.c_str(), tag, want);
    weir_error_free(&err);
}

static void rows_take_every_kind_of_value_and_plugins_every_form() {
    const weir_row_plugin *every = &weir::detail::row_plugin<Every>;
    CHECK(every->column_count == 18 && every->grain_key_count == 0 && every->grain_key == nullptr,
          "description");
    CHECK(every->columns[9].type.tag == WEIR_COLUMN_TYPE_NUMERIC
              && every->columns[9].type.val.numeric.is_some
              && every->columns[9].type.val.numeric.val.precision == 5
              && every->columns[9].type.val.numeric.val.scale == 2,
          "numeric(5, 2)");
    CHECK(every->columns[5].type.val.varchar.is_some && every->columns[5].type.val.varchar.val == 10,
          "varchar(10)");
    CHECK(!every->columns[0].nullable && every->columns[1].nullable, "nullable");

    weir_push_output ret;
    weir_error err{};
    mode = 0;
    CHECK(push_one(every, nullptr, &ret, &err), "every kind");
    CHECK(ret.rows.len == 1 && ret.rows.ptr[0].len == 18, "one row of 18");
    if (ret.rows.len == 1) {
        const weir_value *v = ret.rows.ptr[0].ptr;
        CHECK(v[0].tag == WEIR_VALUE_INTEGER && v[0].val.integer == -7, "int64_t");
        CHECK(v[1].tag == WEIR_VALUE_INTEGER && v[1].val.integer == 200, "uint8_t");
        CHECK(v[2].tag == WEIR_VALUE_BOOLEAN && v[2].val.boolean, "bool");
        CHECK(v[3].tag == WEIR_VALUE_FLOAT && v[3].val.float_ == 0.5, "float");
        CHECK(text_is(v[4], WEIR_VALUE_TEXT, "view"), "string_view");
        CHECK(text_is(v[5], WEIR_VALUE_TEXT, "std::string"), "std::string");
        CHECK(text_is(v[6], WEIR_VALUE_TEXT, "literal"), "const char *");
        CHECK(text_is(v[7], WEIR_VALUE_TEXT, "copied"), "const weir::String &");
        CHECK(text_is(v[8], WEIR_VALUE_TEXT, "moved"), "weir::String &&");
        CHECK(text_is(v[9], WEIR_VALUE_DECIMAL, "-1.50"), "Decimal");
        CHECK(v[10].tag == WEIR_VALUE_DATE && v[10].val.date == 20513, "Date");
        CHECK(v[11].tag == WEIR_VALUE_TIMESTAMP && v[11].val.timestamp == -1, "Timestamp");
        CHECK(text_is(v[12], WEIR_VALUE_JSON, "[1]"), "Json");
        CHECK(v[13].tag == WEIR_VALUE_BYTES && v[13].val.bytes.len == 3
                  && std::memcmp(v[13].val.bytes.ptr, BYTES, 3) == 0,
              "Bytes");
        CHECK(v[14].tag == WEIR_VALUE_NULL && v[15].tag == WEIR_VALUE_NULL, "nullopt");
        CHECK(v[16].tag == WEIR_VALUE_DATE && v[16].val.date == 1, "optional");
        CHECK(text_is(v[17], WEIR_VALUE_DECIMAL, "1.50"), "raw value");
    }
    WEIR_GEN_EXPORTS(push_output_free)(&ret);

    mode = 1;
    CHECK(push_one(every, nullptr, &ret, &err) && ret.rows.len == 0 && ret.rejections.len == 0,
          "dropped");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
    mode = 2;
    CHECK(push_one(every, nullptr, &ret, &err) && ret.rows.len == 0 && ret.rejections.len == 1,
          "rejected");
    if (ret.rejections.len == 1) {
        CHECK(weir_str_eq(weir__str(&ret.rejections.ptr[0].reason), "no"), "reason");
    }
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
    mode = 3;
    check_push_error(every, nullptr, WEIR_ERROR_OTHER,
                     "output row sets column `undeclared`, which describe does not declare");
    mode = 0;
    check_push_error(every, "fail", WEIR_ERROR_INVALID_CONFIG, "config `fail` is set");

    const weir_row_plugin *no_open = &weir::detail::row_plugin<NoOpen>;
    CHECK(no_open->grain_key_count == 1, "grain key");
    CHECK(push_one(no_open, nullptr, &ret, &err) && ret.rows.len == 1, "no open");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
    const weir_row_plugin *config_only = &weir::detail::row_plugin<ConfigOnly>;
    CHECK(config_only->grain_key_count == 0, "empty grain key");
    CHECK(push_one(config_only, "x", &ret, &err) && ret.rows.len == 1
              && text_is(ret.rows.ptr[0].ptr[0], WEIR_VALUE_TEXT, "z"),
          "open(config)");
    WEIR_GEN_EXPORTS(push_output_free)(&ret);
    check_push_error(config_only, nullptr, WEIR_ERROR_INVALID_CONFIG, "missing config key `x`");

    CHECK(std::get_new_handler() != nullptr, "open installs a new-handler");
}

/* ---- SHA-256 (the C helper's, tested in depth there) ---- */

static void sha256_hex_wraps_the_c_helper() {
    const std::string empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const std::string abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    CHECK(weir::sha256_hex("") == empty, "empty");
    CHECK(weir::sha256_hex(std::string_view()) == empty, "empty view");
    CHECK(weir::sha256_hex("abc") == abc, "abc");
    CHECK(weir::sha256_hex(std::string("abc")) == abc, "std::string");
    CHECK(weir::sha256_hex(weir::String("abc")) == abc, "weir::String");
    const uint8_t bytes[] = {'a', 'b', 'c'};
    CHECK(weir::sha256_hex(weir::Bytes(bytes)) == abc, "bytes");
    CHECK(weir::sha256_hex("ab", "c") == abc && weir::sha256_hex("", "abc") == abc
              && weir::sha256_hex("abc", "") == abc && weir::sha256_hex("", "") == empty,
          "concatenated");
    std::string million(1000000, 'a');
    CHECK(weir::sha256_hex(million)
              == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
          "a million a");
    std::optional<std::string_view> email = "ann@example.com";
    CHECK(weir::sha256_hex("s1", *email)
              == "265c8a70e452e22bae8c73c46b2744a4df9ad748ff85a1d6641bcd98a410da09",
          "salted");
    CHECK(weir::sha256_hex("x").size() == 64, "64 digits");
}

int main() {
    decimals_parse_compute_and_free_themselves();
    strings_rejections_and_errors_own_their_text();
    sha256_hex_wraps_the_c_helper();
    getters_read_typed_values_and_reject_with_fixed_reasons();
    config_lookups_name_the_key_not_the_value();
    rows_take_every_kind_of_value_and_plugins_every_form();
    std::printf("weir_plugin.hpp (contract %s): %d checks, %d failed\n", WEIR_CONTRACT, checks,
                failures);
    return failures == 0 ? 0 : 1;
}
