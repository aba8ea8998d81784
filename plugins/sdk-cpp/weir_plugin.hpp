/*
 * weir_plugin.hpp: the C++ helper for Weir transform plugins (header only, C++20).
 *
 * An idiomatic C++ layer over the C helper `weir_plugin.h` (plugins/sdk-c/), which
 * does all the work underneath: the row-plugin driver, the getters and their fixed
 * rejection texts, the config lookups, the exact decimal and the output rows are the
 * C helper's, so a C++ plugin's output is byte-identical to a C or a Rust one's. This
 * header adds what C++ is for:
 *
 *   - ownership is automatic: `weir::Decimal`, `weir::String`, `weir::Reject` and
 *     `weir::Error` free themselves (RAII, movable), nothing is ever freed by hand;
 *   - getters return `weir::Result<T>` (a value, or the `weir::Reject` with the Rust
 *     SDK's fixed text), `std::string_view` for text, `std::optional<T>` for the
 *     `_or_null` forms; `WEIR_TRY(lhs, expr)` unwraps one or returns its rejection;
 *   - `weir::Row::set(column, value)` is overloaded for `int64_t` (any integer type a
 *     bigint holds whole: a 64-bit unsigned one is refused at compile time),
 *     `bool`, `double`, text (`std::string_view`, `std::string`, `const char *`,
 *     `weir::String`), `weir::Decimal`, `weir::Date`, `weir::Timestamp`,
 *     `weir::Json`, bytes, `std::nullopt` and `std::optional` of any of them;
 *   - a plugin is a C++ class, exported with `WEIR_EXPORT_CPP_ROW_PLUGIN(Class)`.
 *
 * No C++ exceptions anywhere (build with -fno-exceptions): every failure is a value.
 *
 * The contract is the C helper's: weir:transform@0.2.0 by default (bindings of
 * `wit-bindgen c wit/transform-0.2.0 -w transformer`), @0.1.0 with
 * `-DWEIR_CONTRACT_0_1` (`wit-bindgen c wit/transform-0.1.0 -w plugin`); this API is
 * the same on both.
 *
 * A complete plugin (upper-cases `name`; see plugins/examples/orders-cpp/ for a
 * bigger one, README.md next to this file for the build):
 *
 *   #include "weir_plugin.hpp"
 *
 *   class Upper {
 *   public:
 *       static constexpr const char *name = "upper";
 *       static constexpr const char *version = "1.0.0";
 *       static constexpr weir_column_def columns[] = {
 *           weir::column_not_null("id", weir::type::bigint),
 *           weir::column("day", weir::type::date),
 *           weir::column("name", weir::type::text),
 *       };
 *       static constexpr const char *grain_key[] = {"id"};
 *       static constexpr const char *partition_column = "day";
 *
 *       weir::Outcome transform(const weir::Input &row, weir::Row &out) const {
 *           WEIR_TRY(int64_t id, row.integer("id"));
 *           WEIR_TRY(auto day, row.date_or_null("day"));
 *           WEIR_TRY(auto name, row.text_or_null("name"));
 *           out.set("id", id).set("day", day).set("name", weir::ascii_upper(name));
 *           return weir::emit;
 *       }
 *   };
 *
 *   WEIR_EXPORT_CPP_ROW_PLUGIN(Upper)
 *
 * A plugin class has:
 *
 *   - `name`, `version`, `partition_column` (`static constexpr const char *`),
 *     `columns` (a `static constexpr weir_column_def[]`, built with `weir::column`
 *     / `weir::column_not_null` and the `weir::type::` constants), and optionally
 *     `grain_key` (a `static constexpr const char *[]`; none if absent);
 *   - optionally `static weir::Result<Class, weir::Error> open(const weir::Partition &,
 *     const weir::Config &)` (or `open(const weir::Config &)`): runs once per
 *     partition job and returns the plugin object (parse the config into it) or an
 *     error, which fails the job. Without `open` the class is default-constructed;
 *   - `weir::Outcome transform(const weir::Input &row, weir::Row &out) const`: once
 *     per row that is not a `delete`; set the output columns and return
 *     `weir::emit`, or `weir::drop` (a filter), or a `weir::Reject("reason")` (or a
 *     getter's rejection, which `WEIR_TRY` returns);
 *   - its destructor runs when the host drops the session.
 *
 * Ownership: the `weir::Input`, `weir::Config` and `weir::Partition` a callback gets,
 * and the `std::string_view`s and byte spans their getters return, are views of the
 * host's data, BORROWED for that callback only: copy what you keep (into a
 * `std::string`, or a `weir::Decimal` you parse). Everything else is owned by the C++
 * object holding it. Allocation failure traps (the host fails the job), for `new` too:
 * the driver installs a new-handler that aborts unless the plugin has its own.
 */
#ifndef WEIR_PLUGIN_HPP
#define WEIR_PLUGIN_HPP

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "weir_plugin.hpp needs C++20 (-std=c++20)"
#endif

#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "weir_plugin.h"

namespace weir {

namespace detail {

inline std::string_view view(weir_str s) noexcept {
    return {s.ptr, s.len};
}

inline weir_str str(std::string_view s) noexcept {
    return {s.data(), s.size()};
}

[[noreturn]] inline void out_of_memory() noexcept {
    abort();
}

}  // namespace detail

/* ---------------------------------------------------------------------------
 * Owned text
 * ------------------------------------------------------------------------- */

/// An owned UTF-8 text in the form the host receives (a `weir_string`: malloc'd,
/// not NUL-terminated). Setting it in a row by moving hands the buffer over without a
/// copy; it views as a `std::string_view`. Freed by its destructor.
class String {
public:
    String() noexcept = default;
    /// A copy of `text`.
    explicit String(std::string_view text) : s_(weir_string_from(text.data(), text.size())) {}
    String(const String &other) : String(other.view()) {}
    String(String &&other) noexcept : s_(std::exchange(other.s_, weir_string{nullptr, 0})) {}
    String &operator=(const String &other) {
        if (this != &other) {
            *this = String(other);
        }
        return *this;
    }
    String &operator=(String &&other) noexcept {
        if (this != &other) {
            weir_string_free(&s_);
            s_ = std::exchange(other.s_, weir_string{nullptr, 0});
        }
        return *this;
    }
    ~String() {
        weir_string_free(&s_);
    }

    std::string_view view() const noexcept {
        return {reinterpret_cast<const char *>(s_.ptr), s_.len};
    }
    operator std::string_view() const noexcept {
        return view();
    }
    /// A `std::string` copy.
    std::string str() const {
        return std::string(view());
    }
    const char *data() const noexcept {
        return reinterpret_cast<const char *>(s_.ptr);
    }
    std::size_t size() const noexcept {
        return s_.len;
    }
    bool empty() const noexcept {
        return s_.len == 0;
    }
    friend bool operator==(const String &a, std::string_view b) noexcept {
        return a.view() == b;
    }

    /// Takes over a C helper's owned string.
    static String adopt(weir_string s) noexcept {
        String out;
        out.s_ = s;
        return out;
    }
    /// Gives up the buffer (now the caller's, see weir_plugin.h's OWNERSHIP).
    weir_string release() noexcept {
        return std::exchange(s_, weir_string{nullptr, 0});
    }

private:
    weir_string s_{nullptr, 0};
};

/// A new owned copy of `text` upper-cased by the ASCII rule only: `a`-`z` become
/// `A`-`Z`, every other byte is kept (`straße` -> `STRAßE`), as every Weir SDK does.
inline String ascii_upper(std::string_view text) {
    return String::adopt(weir_ascii_upper(detail::str(text)));
}

/// `std::nullopt` stays `std::nullopt` (for a `text_or_null` value).
template <std::same_as<std::optional<std::string_view>> O>
inline std::optional<String> ascii_upper(const O &text) {
    if (!text) {
        return std::nullopt;
    }
    return ascii_upper(*text);
}

/* ---------------------------------------------------------------------------
 * Values of the contract's other cases
 * ------------------------------------------------------------------------- */

/// A `date`: days since 1970-01-01.
struct Date {
    int32_t days = 0;
    constexpr Date() noexcept = default;
    constexpr explicit Date(int32_t d) noexcept : days(d) {}
    friend constexpr auto operator<=>(Date, Date) noexcept = default;
};

/// A `timestamp`: microseconds since 1970-01-01T00:00:00.
struct Timestamp {
    int64_t micros = 0;
    constexpr Timestamp() noexcept = default;
    constexpr explicit Timestamp(int64_t m) noexcept : micros(m) {}
    friend constexpr auto operator<=>(Timestamp, Timestamp) noexcept = default;
};

/// A `json` value: its JSON text (a view; setting it in a row copies it).
struct Json {
    std::string_view text;
    constexpr Json() noexcept = default;
    constexpr explicit Json(std::string_view t) noexcept : text(t) {}
};

/// `bytes`: a view.
using Bytes = std::span<const uint8_t>;

/// The SHA-256 of `data` as 64 lower-case hex digits, the same as the Rust SDK's
/// `sha256_hex` (for masking; text is hashed as its UTF-8 bytes). The C helper's
/// `weir_sha256_hex`; `weir_sha256_ctx` there hashes in pieces or gives raw bytes.
inline std::string sha256_hex(std::string_view data) {
    char hex[WEIR_SHA256_HEX_SIZE];
    weir_sha256_hex(data.data(), data.size(), hex);
    return std::string(hex, WEIR_SHA256_HEX_SIZE - 1);
}

inline std::string sha256_hex(Bytes data) {
    char hex[WEIR_SHA256_HEX_SIZE];
    weir_sha256_hex(data.data(), data.size(), hex);
    return std::string(hex, WEIR_SHA256_HEX_SIZE - 1);
}

/// The SHA-256 of `a` followed by `b` (a salt and a value), as 64 lower-case hex
/// digits, without building the concatenation.
inline std::string sha256_hex(std::string_view a, std::string_view b) {
    char hex[WEIR_SHA256_HEX_SIZE];
    weir_sha256_hex_concat(detail::str(a), detail::str(b), hex);
    return std::string(hex, WEIR_SHA256_HEX_SIZE - 1);
}

/// What happened to an input row last.
enum class Op : uint8_t {
    insert = WEIR_OP_INSERT,
    update = WEIR_OP_UPDATE,
    delete_ = WEIR_OP_DELETE,
    read = WEIR_OP_READ,
};

/* ---------------------------------------------------------------------------
 * Rejections, errors and results
 * ------------------------------------------------------------------------- */

/// Why one input row is refused: an owned reason, the row's rejection. It must
/// depend only on the row and the config, and never hold a secret.
class Reject {
public:
    /// A copy of `reason`.
    explicit Reject(std::string_view reason) : reason_(reason) {}

    std::string_view reason() const noexcept {
        return reason_.view();
    }

    /// Takes over a C getter's reason (leaving `reject` empty).
    static Reject adopt(weir_reject &reject) noexcept {
        return Reject(Adopt{}, std::exchange(reject.reason, weir_string{nullptr, 0}));
    }
    weir_string release() noexcept {
        return reason_.release();
    }

private:
    struct Adopt {};
    Reject(Adopt, weir_string reason) noexcept : reason_(String::adopt(reason)) {}
    String reason_;
};

/// An error that fails the call (and the partition job): `invalid-config`,
/// `invalid-input` or `other`, with an owned message (name a config key, never its
/// value).
class Error {
public:
    enum class Kind : uint8_t {
        invalid_config = WEIR_ERROR_INVALID_CONFIG,
        invalid_input = WEIR_ERROR_INVALID_INPUT,
        other = WEIR_ERROR_OTHER,
    };

    static Error invalid_config(std::string_view message) {
        return Error(Kind::invalid_config, String(message));
    }
    static Error invalid_input(std::string_view message) {
        return Error(Kind::invalid_input, String(message));
    }
    static Error other(std::string_view message) {
        return Error(Kind::other, String(message));
    }

    Kind kind() const noexcept {
        return kind_;
    }
    std::string_view message() const noexcept {
        return message_.view();
    }

    /// Takes over a C helper's error (leaving it empty).
    static Error adopt(weir_error &error) noexcept {
        /* All three cases hold one string at the same place. */
        weir_string text = std::exchange(error.val.other, weir_string{nullptr, 0});
        return Error(static_cast<Kind>(error.tag), String::adopt(text));
    }
    weir_error release() noexcept {
        weir_error out;
        out.tag = static_cast<uint8_t>(kind_);
        out.val.other = message_.release();
        return out;
    }

private:
    Error(Kind kind, String message) noexcept : kind_(kind), message_(std::move(message)) {}
    Kind kind_;
    String message_;
};

/// A value of type `T`, or why there is none (`E`: a `Reject` for the getters, an
/// `Error` for config lookups and `open`). Test it (`if (!r)`), then use `*r` /
/// `r->`; `r.error()` is the reason. `WEIR_TRY` does both. Reading the value of a
/// failed result (or the error of a good one) traps.
template <class T, class E = Reject>
class [[nodiscard]] Result {
public:
    Result(T value) noexcept(std::is_nothrow_move_constructible_v<T>) : ok_(true) {
        ::new (static_cast<void *>(&value_)) T(std::move(value));
    }
    Result(E error) noexcept(std::is_nothrow_move_constructible_v<E>) : ok_(false) {
        ::new (static_cast<void *>(&error_)) E(std::move(error));
    }
    Result(Result &&other) noexcept(std::is_nothrow_move_constructible_v<T>
                                    && std::is_nothrow_move_constructible_v<E>)
        : ok_(other.ok_) {
        if (ok_) {
            ::new (static_cast<void *>(&value_)) T(std::move(other.value_));
        } else {
            ::new (static_cast<void *>(&error_)) E(std::move(other.error_));
        }
    }
    Result &operator=(Result &&other) {
        if (this != &other) {
            destroy();
            ok_ = other.ok_;
            if (ok_) {
                ::new (static_cast<void *>(&value_)) T(std::move(other.value_));
            } else {
                ::new (static_cast<void *>(&error_)) E(std::move(other.error_));
            }
        }
        return *this;
    }
    Result(const Result &) = delete;
    Result &operator=(const Result &) = delete;
    ~Result() {
        destroy();
    }

    bool ok() const noexcept {
        return ok_;
    }
    explicit operator bool() const noexcept {
        return ok_;
    }

    T &value() & {
        check(ok_);
        return value_;
    }
    const T &value() const & {
        check(ok_);
        return value_;
    }
    T &&value() && {
        check(ok_);
        return std::move(value_);
    }
    T &operator*() & {
        return value();
    }
    const T &operator*() const & {
        return value();
    }
    T &&operator*() && {
        return std::move(*this).value();
    }
    T *operator->() {
        return &value();
    }
    const T *operator->() const {
        return &value();
    }

    E &error() & {
        check(!ok_);
        return error_;
    }
    const E &error() const & {
        check(!ok_);
        return error_;
    }
    E &&error() && {
        check(!ok_);
        return std::move(error_);
    }

private:
    static void check(bool holds) noexcept {
        if (!holds) {
            abort();
        }
    }
    void destroy() noexcept {
        if (ok_) {
            value_.~T();
        } else {
            error_.~E();
        }
    }

    bool ok_;
    union {
        T value_;
        E error_;
    };
};

#define WEIR__CAT2(a, b) a##b
#define WEIR__CAT(a, b) WEIR__CAT2(a, b)
#define WEIR__TRY(tmp, lhs, expr)           \
    auto tmp = (expr);                      \
    if (!tmp) {                             \
        return std::move(tmp).error();      \
    }                                       \
    lhs = std::move(tmp).value()

/// `WEIR_TRY(lhs, expr)`: evaluates `expr` (a `weir::Result`); if it failed, returns
/// its error from the enclosing function (a `Reject` becomes the row's rejection in
/// `transform`, an `Error` fails `open`), else declares or assigns `lhs` from its
/// value: `WEIR_TRY(int64_t id, row.integer("id"));`,
/// `WEIR_TRY(auto name, row.text_or_null("name"));`. A statement, not an expression.
#define WEIR_TRY(lhs, expr) WEIR__TRY(WEIR__CAT(weir_try_, __COUNTER__), lhs, expr)

/// What `transform` did with a row: `weir::emit` (output the row built in `out`),
/// `weir::drop` (no output: a filter), or a `weir::Reject` (the row's rejection).
struct Emit {};
struct Drop {};
inline constexpr Emit emit{};
inline constexpr Drop drop{};

class [[nodiscard]] Outcome {
public:
    Outcome(Emit) noexcept : kind_(WEIR_EMIT) {}
    Outcome(Drop) noexcept : kind_(WEIR_DROP) {}
    Outcome(Reject reject) noexcept : kind_(WEIR_REJECT), reason_(String::adopt(reject.release())) {}

    weir_outcome kind() const noexcept {
        return kind_;
    }
    /// The rejection's reason (empty unless a rejection).
    std::string_view reason() const noexcept {
        return reason_.view();
    }

    /// For the driver: the outcome, with a rejection's reason moved into `reject`.
    weir_outcome into(weir_reject *reject) && noexcept {
        if (kind_ == WEIR_REJECT) {
            weir_string_free(&reject->reason);
            reject->reason = reason_.release();
        }
        return kind_;
    }

private:
    weir_outcome kind_;
    String reason_;
};

/* ---------------------------------------------------------------------------
 * Exact decimals
 * ------------------------------------------------------------------------- */

/// Why a text is not a finite decimal, or an operation would not be exact.
enum class DecimalStatus : uint8_t {
    ok = WEIR_DECIMAL_OK,
    invalid = WEIR_DECIMAL_INVALID,
    not_finite = WEIR_DECIMAL_NOT_FINITE,
    too_many_digits = WEIR_DECIMAL_TOO_MANY_DIGITS,
    inexact = WEIR_DECIMAL_INEXACT,
};

/// An exact decimal, the C helper's `weir_decimal` (the Rust SDK's `Decimal`: parse
/// rules, digit limit, exact arithmetic, half-even rounding, PostgreSQL's printing),
/// owned: movable, not copyable (`clone()` copies), freed by its destructor.
class Decimal {
public:
    /// Zero, scale 0.
    Decimal() noexcept = default;
    Decimal(Decimal &&other) noexcept : d_(std::exchange(other.d_, weir_decimal WEIR_DECIMAL_ZERO)) {}
    Decimal &operator=(Decimal &&other) noexcept {
        if (this != &other) {
            weir_decimal_free(&d_);
            d_ = std::exchange(other.d_, weir_decimal WEIR_DECIMAL_ZERO);
        }
        return *this;
    }
    Decimal(const Decimal &) = delete;
    Decimal &operator=(const Decimal &) = delete;
    ~Decimal() {
        weir_decimal_free(&d_);
    }

    /// Parses PostgreSQL's `numeric` text (`12.50`, `-0.5`, `.5`, `7.`, `+3`; no
    /// exponent, no white space); the error is `invalid`, `not_finite` (NaN,
    /// Infinity) or `too_many_digits`.
    static Result<Decimal, DecimalStatus> parse(std::string_view text) {
        weir_decimal d;
        auto status = static_cast<DecimalStatus>(weir_decimal_parse(text.data(), text.size(), &d));
        Decimal out = adopt(d);
        if (status != DecimalStatus::ok) {
            return status;
        }
        return std::move(out);
    }
    /// An integer, scale 0.
    static Decimal from_int(int64_t v) {
        return adopt(weir_decimal_from_i64(v));
    }
    /// An unsigned 64-bit integer, scale 0, exactly (past `INT64_MAX` too: a bigint
    /// column cannot hold those, a numeric one can).
    template <std::unsigned_integral U>
        requires(!std::same_as<U, bool> && sizeof(U) >= sizeof(int64_t))
    static Decimal from_int(U v) {
        if (v <= static_cast<U>(INT64_MAX)) {
            return adopt(weir_decimal_from_i64(static_cast<int64_t>(v)));
        }
        return std::move(parse(std::to_string(v)).value());
    }
    /// A copy.
    Decimal clone() const {
        return adopt(weir_decimal_clone(&d_));
    }

    bool is_negative() const noexcept {
        return weir_decimal_is_negative(&d_);
    }
    bool is_zero() const noexcept {
        return weir_decimal_is_zero(&d_);
    }
    /// Digits after the decimal point.
    uint32_t scale() const noexcept {
        return weir_decimal_scale(&d_);
    }
    /// Significant digits before the point (0 below 1 in magnitude).
    std::size_t integer_digits() const noexcept {
        return weir_decimal_integer_digits(&d_);
    }
    /// Whether it fits `numeric(precision, scale)` without rounding.
    bool fits(uint32_t precision, uint32_t scale) const noexcept {
        return weir_decimal_fits(&d_, precision, scale);
    }

    /// The exact product; its scale is the sum of the scales.
    Decimal mul(const Decimal &other) const {
        return adopt(weir_decimal_mul(&d_, &other.d_));
    }
    /// The exact sum; its scale is the larger one.
    Decimal add(const Decimal &other) const {
        return adopt(weir_decimal_add(&d_, &other.d_));
    }
    Decimal neg() const {
        return adopt(weir_decimal_neg(&d_));
    }
    /// At `scale` digits after the point, rounded half to even (`0.125` -> `0.12`,
    /// `0.135` -> `0.14`), symmetric in the sign; a larger scale pads with zeros.
    Decimal round_half_even(uint32_t scale) const {
        return adopt(weir_decimal_round_half_even(&d_, scale));
    }
    /// At exactly `scale` digits after the point, or `std::nullopt` if that would
    /// drop a non-zero digit (`1.500` -> `1.50`, `7` -> `7.00`, `1.005` -> none).
    std::optional<Decimal> rescale_exact(uint32_t scale) const {
        weir_decimal out;
        bool exact = weir_decimal_rescale_exact(&d_, scale, &out) == WEIR_DECIMAL_OK;
        Decimal d = adopt(out);
        if (!exact) {
            return std::nullopt;
        }
        return std::move(d);
    }
    /// PostgreSQL's output form: the scale kept, zero never signed (`-12.340`).
    std::string to_string() const {
        String s = String::adopt(weir_decimal_to_string(&d_));
        return s.str();
    }

    friend Decimal operator*(const Decimal &a, const Decimal &b) {
        return a.mul(b);
    }
    friend Decimal operator+(const Decimal &a, const Decimal &b) {
        return a.add(b);
    }
    friend Decimal operator-(const Decimal &a, const Decimal &b) {
        return a.add(b.neg());
    }
    Decimal operator-() const {
        return neg();
    }
    /// By value: `1.5 == 1.50` (equivalent, though they print differently).
    friend bool operator==(const Decimal &a, const Decimal &b) noexcept {
        return weir_decimal_cmp(&a.d_, &b.d_) == 0;
    }
    friend std::weak_ordering operator<=>(const Decimal &a, const Decimal &b) noexcept {
        int c = weir_decimal_cmp(&a.d_, &b.d_);
        return c < 0 ? std::weak_ordering::less
                     : c > 0 ? std::weak_ordering::greater : std::weak_ordering::equivalent;
    }

    /// The C helper's decimal (borrowed), for its functions.
    const weir_decimal &c() const noexcept {
        return d_;
    }
    /// Takes over a C helper's decimal.
    static Decimal adopt(weir_decimal d) noexcept {
        Decimal out;
        out.d_ = d;
        return out;
    }
    /// Gives it up (the caller frees it with `weir_decimal_free`).
    weir_decimal release() noexcept {
        return std::exchange(d_, weir_decimal WEIR_DECIMAL_ZERO);
    }

private:
    weir_decimal d_ = WEIR_DECIMAL_ZERO;
};

/* ---------------------------------------------------------------------------
 * The partition, the config and input rows (borrowed views)
 * ------------------------------------------------------------------------- */

/// The partition a session writes. A view, valid during `open`.
class Partition {
public:
    explicit Partition(const weir_partition *p) noexcept : p_(p) {}
    /// The source table, e.g. `public.orders`.
    std::string_view table() const noexcept {
        return detail::view(weir__str(&p_->table));
    }
    /// The partition's name, e.g. `2026-03-01`.
    std::string_view name() const noexcept {
        return detail::view(weir__str(&p_->name));
    }
    const weir_partition &c() const noexcept {
        return *p_;
    }

private:
    const weir_partition *p_;
};

/// The plugin config: key/value text, sorted by key. A view, valid during `open`.
/// Errors are `invalid-config` with the Rust SDK's texts, naming the key, never the
/// value: ``missing config key `KEY` ``, ``config `KEY` is not valid decimal text``
/// / ``is not a finite decimal`` / ``has too many digits``.
class Config {
public:
    explicit Config(const weir_config *c) noexcept : c_(c) {}
    /// The value of `key`, if set.
    std::optional<std::string_view> get(const char *key) const noexcept {
        weir_str out;
        if (!weir_config_get(c_, key, &out)) {
            return std::nullopt;
        }
        return detail::view(out);
    }
    /// The value of `key`; a missing key is an error.
    Result<std::string_view, Error> require(const char *key) const {
        weir_str out;
        weir_error error{};
        if (!weir_config_require(c_, key, &out, &error)) {
            return Error::adopt(error);
        }
        return detail::view(out);
    }
    /// The value of `key` as an exact, finite decimal.
    Result<Decimal, Error> decimal(const char *key) const {
        weir_decimal d;
        weir_error error{};
        bool ok = weir_config_decimal(c_, key, &d, &error);
        Decimal out = Decimal::adopt(d);
        if (!ok) {
            return Error::adopt(error);
        }
        return std::move(out);
    }
    /// The number of entries, and each (key, value).
    std::size_t size() const noexcept {
        return c_->len;
    }
    std::pair<std::string_view, std::string_view> operator[](std::size_t i) const noexcept {
        return {detail::view(weir__str(&c_->ptr[i].f0)), detail::view(weir__str(&c_->ptr[i].f1))};
    }
    const weir_config &c() const noexcept {
        return *c_;
    }

private:
    const weir_config *c_;
};

#define WEIR__CPP_GETTERS(NAME, CNAME, T, CT, CONV)                                     \
    Result<std::optional<T>> NAME##_or_null(const char *column) const {                 \
        CT v;                                                                           \
        bool is_null;                                                                   \
        weir_reject reject{};                                                           \
        if (!weir_input_##CNAME##_or_null(row_, column, &v, &is_null, &reject)) {       \
            return Reject::adopt(reject);                                               \
        }                                                                               \
        if (is_null) {                                                                  \
            return std::optional<T>();                                                  \
        }                                                                               \
        return std::optional<T>(CONV(v));                                               \
    }                                                                                   \
    Result<T> NAME(const char *column) const {                                          \
        CT v;                                                                           \
        weir_reject reject{};                                                           \
        if (!weir_input_##CNAME(row_, column, &v, &reject)) {                           \
            return Reject::adopt(reject);                                               \
        }                                                                               \
        return T(CONV(v));                                                              \
    }

/// One input row. A view, valid during `transform`: copy what you keep.
///
/// Every getter takes the column name and returns the value, or a `Reject` with the
/// Rust SDK's fixed text: ``column `NAME` is missing``, ``… is null`` (the forms
/// without `_or_null`), ``… is not KIND`` (a boolean, an integer, a float, text,
/// bytes, a decimal, a date, a timestamp, json: no coercion), ``… is not a finite
/// decimal``, ``… is not valid decimal text``, ``… has too many digits``. The
/// `_or_null` forms give `std::nullopt` for `null`.
class Input {
public:
    explicit Input(const weir_input *row) noexcept : row_(row) {}

    /// `boolean`.
    WEIR__CPP_GETTERS(boolean, bool, bool, bool, )
    /// `integer` (the Rust SDK's `int`).
    WEIR__CPP_GETTERS(integer, int, int64_t, int64_t, )
    /// `float` (the Rust SDK's `float`).
    WEIR__CPP_GETTERS(float64, float, double, double, )
    /// `text`, a view.
    WEIR__CPP_GETTERS(text, text, std::string_view, weir_str, detail::view)
    /// `bytes`, a view.
    WEIR__CPP_GETTERS(bytes, bytes, Bytes, weir_bytes, Input::byte_span)
    /// `decimal` as its exact text, a view (may be `NaN`, `Infinity`, `-Infinity`).
    WEIR__CPP_GETTERS(decimal_text, decimal_text, std::string_view, weir_str, detail::view)
    /// `date`.
    WEIR__CPP_GETTERS(date, date, Date, int32_t, Date)
    /// `timestamp`.
    WEIR__CPP_GETTERS(timestamp, timestamp, Timestamp, int64_t, Timestamp)
    /// `json`, its text as a view.
    WEIR__CPP_GETTERS(json, json, Json, weir_str, Input::json_view)

    /// `decimal`, parsed into an exact (owned) `Decimal`.
    Result<Decimal> decimal(const char *column) const {
        weir_decimal d;
        weir_reject reject{};
        bool ok = weir_input_decimal(row_, column, &d, &reject);
        Decimal out = Decimal::adopt(d);
        if (!ok) {
            return Reject::adopt(reject);
        }
        return std::move(out);
    }
    Result<std::optional<Decimal>> decimal_or_null(const char *column) const {
        weir_decimal d;
        bool is_null;
        weir_reject reject{};
        bool ok = weir_input_decimal_or_null(row_, column, &d, &is_null, &reject);
        Decimal out = Decimal::adopt(d);
        if (!ok) {
            return Reject::adopt(reject);
        }
        if (is_null) {
            return std::optional<Decimal>();
        }
        return std::optional<Decimal>(std::move(out));
    }

    /// The raw value of a column (any case, e.g. to pass through with `Row::set`),
    /// `nullptr` if the row has no such column.
    const weir_value *get(const char *column) const noexcept {
        return weir_input_get(row_, column);
    }
    /// The raw value of a column; a missing column rejects.
    Result<const weir_value *> value(const char *column) const {
        const weir_value *v;
        weir_reject reject{};
        if (!weir_input_value(row_, column, &v, &reject)) {
            return Reject::adopt(reject);
        }
        return v;
    }

    /// The values of the table's key columns, in key order.
    std::span<const weir_value> key() const noexcept {
        return {row_->key.ptr, row_->key.len};
    }
    /// What happened to the row last (never `delete` in `transform`).
    Op op() const noexcept {
        return static_cast<Op>(row_->op);
    }
    /// The source position of the transaction that wrote this image.
    uint64_t commit_position() const noexcept {
        return row_->commit_position;
    }
    /// Its commit time (UTC), if the source gave one.
    std::optional<Timestamp> commit_time() const noexcept {
        if (!row_->commit_time.is_some) {
            return std::nullopt;
        }
        return Timestamp(row_->commit_time.val);
    }
    const weir_input &c() const noexcept {
        return *row_;
    }

private:
    static Bytes byte_span(weir_bytes b) noexcept {
        return {b.ptr, b.len};
    }
    static Json json_view(weir_str s) noexcept {
        return Json(detail::view(s));
    }

    const weir_input *row_;
};

#undef WEIR__CPP_GETTERS

/* ---------------------------------------------------------------------------
 * Output rows
 * ------------------------------------------------------------------------- */

/// The output row `transform` builds, by column name in any order (the driver puts
/// the values in the declared order); setting a column twice keeps the last value.
/// Every `set` copies its value, except a moved `weir::String`, which is handed over.
/// A column that is not declared, or a declared column left unset, fails the call
/// (a plugin bug) with the Rust SDK's texts: ``output row sets column `NAME`, which
/// describe does not declare`` / ``output row does not set declared column `NAME` ``.
class Row {
public:
    explicit Row(weir_row *row) noexcept : row_(row) {}
    Row(const Row &) = delete;
    Row &operator=(const Row &) = delete;

    /// `null`.
    Row &set(const char *column, std::nullopt_t) {
        weir_row_set_null(row_, column);
        return *this;
    }
    /// `boolean`.
    template <std::same_as<bool> B>
    Row &set(const char *column, B v) {
        weir_row_set_bool(row_, column, v);
        return *this;
    }
    /// `integer` (for smallint, integer and bigint columns), from any integer type
    /// whose every value a bigint holds.
    template <std::integral I>
        requires(!std::same_as<I, bool> && (std::is_signed_v<I> || sizeof(I) < sizeof(int64_t)))
    Row &set(const char *column, I v) {
        weir_row_set_int(row_, column, static_cast<int64_t>(v));
        return *this;
    }
    /// An unsigned 64-bit integer is refused at compile time (a deleted overload):
    /// past `INT64_MAX` it would wrap to a negative bigint, silently. Convert it
    /// yourself: checked (`v <= INT64_MAX`, then `static_cast<int64_t>`), or exactly
    /// into a `numeric` column (`weir::Decimal::from_int(v)`).
    template <std::unsigned_integral U>
        requires(!std::same_as<U, bool> && sizeof(U) >= sizeof(int64_t))
    Row &set(const char *column, U v) = delete;
    /// `float`.
    template <std::floating_point F>
    Row &set(const char *column, F v) {
        weir_row_set_float(row_, column, static_cast<double>(v));
        return *this;
    }
    /// `text` (also from a `std::string`).
    Row &set(const char *column, std::string_view v) {
        weir_row_set_text(row_, column, detail::str(v));
        return *this;
    }
    /// `text` from a NUL-terminated string (`nullptr` sets `null`).
    Row &set(const char *column, const char *v) {
        if (v == nullptr) {
            return set(column, std::nullopt);
        }
        weir_row_set_text_cstr(row_, column, v);
        return *this;
    }
    /// `text`, copied.
    Row &set(const char *column, const String &v) {
        return set(column, v.view());
    }
    /// `text`, handed over without a copy.
    Row &set(const char *column, String &&v) {
        weir_row_set_text_owned(row_, column, v.release());
        return *this;
    }
    /// `decimal`, printed in PostgreSQL's form at its own scale.
    Row &set(const char *column, const Decimal &v) {
        weir_row_set_decimal(row_, column, &v.c());
        return *this;
    }
    Row &set(const char *column, Date v) {
        weir_row_set_date(row_, column, v.days);
        return *this;
    }
    Row &set(const char *column, Timestamp v) {
        weir_row_set_timestamp(row_, column, v.micros);
        return *this;
    }
    /// `json`, copied.
    Row &set(const char *column, Json v) {
        weir_row_set_json(row_, column, detail::str(v.text));
        return *this;
    }
    /// `bytes`, copied.
    Row &set(const char *column, Bytes v) {
        weir_row_set_bytes(row_, column, weir_bytes{v.data(), v.size()});
        return *this;
    }
    /// Any raw value (e.g. an input value passed through), deep-copied.
    Row &set(const char *column, const weir_value &v) {
        weir_row_set_value(row_, column, &v);
        return *this;
    }
    /// `null` for `std::nullopt`, else the value.
    template <class T>
    Row &set(const char *column, const std::optional<T> &v) {
        if (!v) {
            return set(column, std::nullopt);
        }
        return set(column, *v);
    }
    template <class T>
    Row &set(const char *column, std::optional<T> &&v) {
        if (!v) {
            return set(column, std::nullopt);
        }
        return set(column, std::move(*v));
    }

    weir_row &c() noexcept {
        return *row_;
    }

private:
    weir_row *row_;
};

/* ---------------------------------------------------------------------------
 * Logging (the `log` import): never row values or secrets
 * ------------------------------------------------------------------------- */

namespace log {

inline void log(weir_log_level level, std::string_view message) {
    weir_log_n(level, message.data(), message.size());
}
inline void debug(std::string_view message) {
    log(WEIR_LOG_DEBUG, message);
}
inline void info(std::string_view message) {
    log(WEIR_LOG_INFO, message);
}
inline void warn(std::string_view message) {
    log(WEIR_LOG_WARN, message);
}
inline void error(std::string_view message) {
    log(WEIR_LOG_ERROR, message);
}

}  // namespace log

/* ---------------------------------------------------------------------------
 * Describing the output
 * ------------------------------------------------------------------------- */

/// The declared types of output columns.
namespace type {

namespace detail {
constexpr weir_column_type of(uint8_t tag) {
    weir_column_type t{};
    t.tag = tag;
    return t;
}
}  // namespace detail

inline constexpr weir_column_type smallint = detail::of(WEIR_COLUMN_TYPE_SMALLINT);
inline constexpr weir_column_type integer = detail::of(WEIR_COLUMN_TYPE_INTEGER);
inline constexpr weir_column_type bigint = detail::of(WEIR_COLUMN_TYPE_BIGINT);
inline constexpr weir_column_type real = detail::of(WEIR_COLUMN_TYPE_REAL);
inline constexpr weir_column_type double_precision =
    detail::of(WEIR_COLUMN_TYPE_DOUBLE_PRECISION);
/// `numeric` without a typmod.
inline constexpr weir_column_type numeric_any = detail::of(WEIR_COLUMN_TYPE_NUMERIC);
inline constexpr weir_column_type text = detail::of(WEIR_COLUMN_TYPE_TEXT);
/// `varchar` without a limit.
inline constexpr weir_column_type varchar_any = detail::of(WEIR_COLUMN_TYPE_VARCHAR);
inline constexpr weir_column_type boolean = detail::of(WEIR_COLUMN_TYPE_BOOLEAN);
inline constexpr weir_column_type date = detail::of(WEIR_COLUMN_TYPE_DATE);
inline constexpr weir_column_type timestamp = detail::of(WEIR_COLUMN_TYPE_TIMESTAMP);
inline constexpr weir_column_type timestamptz =
    detail::of(WEIR_COLUMN_TYPE_TIMESTAMPTZ);
inline constexpr weir_column_type uuid = detail::of(WEIR_COLUMN_TYPE_UUID);
inline constexpr weir_column_type json = detail::of(WEIR_COLUMN_TYPE_JSON);
inline constexpr weir_column_type jsonb = detail::of(WEIR_COLUMN_TYPE_JSONB);
inline constexpr weir_column_type bytea = detail::of(WEIR_COLUMN_TYPE_BYTEA);

/// `numeric(precision, scale)`.
constexpr weir_column_type numeric(uint32_t precision, uint32_t scale) {
    weir_column_type t = detail::of(WEIR_COLUMN_TYPE_NUMERIC);
    t.val.numeric.is_some = true;
    t.val.numeric.val.precision = precision;
    t.val.numeric.val.scale = scale;
    return t;
}

/// `varchar(n)`.
constexpr weir_column_type varchar(uint32_t n) {
    weir_column_type t = detail::of(WEIR_COLUMN_TYPE_VARCHAR);
    t.val.varchar = {true, n};
    return t;
}

}  // namespace type

/// A nullable output column.
constexpr weir_column_def column(const char *name, weir_column_type type) {
    return {name, type, true};
}
/// An output column that never holds `null`.
constexpr weir_column_def column_not_null(const char *name, weir_column_type type) {
    return {name, type, false};
}

/* ---------------------------------------------------------------------------
 * A row plugin from a C++ class
 * ------------------------------------------------------------------------- */

/// What `WEIR_EXPORT_CPP_ROW_PLUGIN(T)` needs of `T` (see the top of this file).
template <class T>
concept RowPlugin =
    std::move_constructible<T> && std::destructible<T>
    && requires(const T &plugin, const Input &row, Row &out) {
           { T::name } -> std::convertible_to<const char *>;
           { T::version } -> std::convertible_to<const char *>;
           { T::partition_column } -> std::convertible_to<const char *>;
           { std::data(T::columns) } -> std::convertible_to<const weir_column_def *>;
           { std::size(T::columns) } -> std::convertible_to<std::size_t>;
           { plugin.transform(row, out) } -> std::same_as<Outcome>;
       }
    && (requires(const Partition &p, const Config &c) {
           { T::open(p, c) } -> std::same_as<Result<T, Error>>;
       } || requires(const Config &c) {
           { T::open(c) } -> std::same_as<Result<T, Error>>;
       } || std::default_initializable<T>);

namespace detail {

template <class T>
struct RowAdapter {
    static void *place(T &&plugin) {
        void *at = weir__alloc(sizeof(T));
        return ::new (at) T(std::move(plugin));
    }

    static bool open(const weir_partition *partition, const weir_config *config, void **state,
                     weir_error *error) {
        /* wasm32's libc++abi returns nullptr from a failed `new`: make it trap. */
        if (std::get_new_handler() == nullptr) {
            std::set_new_handler(out_of_memory);
        }
        *state = nullptr;
        if constexpr (requires(const Partition &p, const Config &c) { T::open(p, c); }
                      || requires(const Config &c) { T::open(c); }) {
            Result<T, Error> opened = [&] {
                if constexpr (requires(const Partition &p, const Config &c) { T::open(p, c); }) {
                    return T::open(Partition(partition), Config(config));
                } else {
                    (void)partition;
                    return T::open(Config(config));
                }
            }();
            if (!opened) {
                weir_error_free(error);
                *error = std::move(opened).error().release();
                return false;
            }
            *state = place(std::move(opened).value());
        } else {
            (void)partition;
            (void)config;
            (void)error;
            *state = place(T());
        }
        return true;
    }

    static weir_outcome transform(const void *state, const weir_input *row, weir_row *out,
                                  weir_reject *reject) {
        Row built(out);
        return static_cast<const T *>(state)->transform(Input(row), built).into(reject);
    }

    static void close(void *state) {
        if (state != nullptr) {
            static_cast<T *>(state)->~T();
            free(state);
        }
    }
};

template <class T>
constexpr const char *const *grain_key_data() {
    if constexpr (requires { T::grain_key; }) {
        return std::data(T::grain_key);
    } else {
        return nullptr;
    }
}

template <class T>
constexpr std::size_t grain_key_count() {
    if constexpr (requires { T::grain_key; }) {
        return std::size(T::grain_key);
    } else {
        return 0;
    }
}

/// The C driver's description of the C++ row plugin `T`.
template <RowPlugin T>
inline constexpr weir_row_plugin row_plugin = {
    .name = T::name,
    .version = T::version,
    .columns = std::data(T::columns),
    .column_count = std::size(T::columns),
    .grain_key = grain_key_data<T>(),
    .grain_key_count = grain_key_count<T>(),
    .partition_column = T::partition_column,
    .open = &RowAdapter<T>::open,
    .transform = &RowAdapter<T>::transform,
    .close = &RowAdapter<T>::close,
};

}  // namespace detail

}  // namespace weir

/// Exports the C++ row plugin class `Class` as the component's `transform`
/// interface (through the C helper's driver, `WEIR_EXPORT_ROW_PLUGIN`). Use it once
/// per component, at namespace scope, in one C++ file.
#define WEIR_EXPORT_CPP_ROW_PLUGIN(Class)                                                   \
    static_assert(::weir::RowPlugin<Class>,                                                 \
                  "a Weir C++ row plugin needs static name, version, columns and "          \
                  "partition_column, a const transform(const weir::Input &, weir::Row &) "  \
                  "returning weir::Outcome, and a static open(...) returning "              \
                  "weir::Result<" #Class ", weir::Error> or a default constructor");       \
    WEIR_EXPORT_ROW_PLUGIN(::weir::detail::row_plugin<Class>)

#endif /* WEIR_PLUGIN_HPP */
