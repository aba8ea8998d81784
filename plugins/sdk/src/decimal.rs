//! Exact decimal numbers for `numeric` values: parse, print, add, multiply and round,
//! never through a float.
//!
//! A [`Decimal`] is a sign, a coefficient of decimal digits of any length (up to
//! [`MAX_DIGITS`]) and a scale (the number of digits after the point). Every
//! operation is exact; the only operations that drop digits are the explicit
//! roundings ([`Decimal::round_half_even`]) and they say which rule they use.
//!
//! Limits (documented so that plugins in other languages can match them):
//!
//! * Text is PostgreSQL's `numeric` output form: an optional sign, digits, and
//!   optionally `.` and digits (`12.50`, `-0.5`, `.5`, `7.`, `+3` are accepted; no
//!   exponent, no white space). `NaN`, `Infinity` and `-Infinity` are refused with
//!   [`DecimalError::NotFinite`]: a plugin decides what a non-finite value means.
//! * At most [`MAX_DIGITS`] digits in a parsed text, PostgreSQL's own limit (131072
//!   before the point and 16383 after). Products may be longer; they are exact.
//! * Printing keeps the scale: `1.50 × 2` prints `3.00`, and zero is never negative.
//!
//! Equality and ordering are by value (`1.5 == 1.50`), as in PostgreSQL; the scale is
//! still observable through [`Decimal::scale`] and the printed text.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The most digits a parsed decimal text may have (PostgreSQL's `numeric` limit:
/// 131072 digits before the point plus 16383 after it).
pub const MAX_DIGITS: usize = 131_072 + 16_383;

/// An exact decimal number.
#[derive(Debug, Clone)]
pub struct Decimal {
    /// True only for a non-zero value below zero.
    negative: bool,
    /// Coefficient digits (0–9), least significant first, without most significant
    /// zeros (zero is empty).
    digits: Vec<u8>,
    /// Digits after the decimal point.
    scale: u32,
}

/// Why a text is not a finite decimal, or why an operation would not be exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecimalError {
    /// The text is not decimal text (see the module documentation for the form).
    Invalid,
    /// `NaN`, `Infinity` or `-Infinity`.
    NotFinite,
    /// More than [`MAX_DIGITS`] digits.
    TooManyDigits,
    /// Rescaling would drop non-zero digits ([`Decimal::rescale_exact`]).
    Inexact,
}

impl fmt::Display for DecimalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DecimalError::Invalid => "not valid decimal text",
            DecimalError::NotFinite => "not a finite decimal",
            DecimalError::TooManyDigits => "a decimal with too many digits",
            DecimalError::Inexact => "a decimal that cannot be rescaled exactly",
        })
    }
}

impl std::error::Error for DecimalError {}

impl Decimal {
    /// Zero with scale 0.
    pub const ZERO: Decimal = Decimal {
        negative: false,
        digits: Vec::new(),
        scale: 0,
    };

    /// The number of digits after the decimal point.
    pub fn scale(&self) -> u32 {
        self.scale
    }

    /// Whether the value is below zero (zero never is).
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Whether the value is zero (of any scale).
    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// The number of significant digits before the decimal point (0 for a value whose
    /// magnitude is below 1). A value fits `numeric(p, s)` when its scale is at most
    /// `s` and this is at most `p - s`.
    pub fn integer_digits(&self) -> usize {
        self.digits.len().saturating_sub(self.scale as usize)
    }

    /// Whether the value fits `numeric(precision, scale)` without rounding.
    pub fn fits(&self, precision: u32, scale: u32) -> bool {
        let max_integer_digits = precision.saturating_sub(scale) as usize;
        // Rescaling changes no integer digit: the value fits when no non-zero digit
        // would be dropped and its integer digits do (computed without a copy).
        self.drops_no_digit(scale) && self.integer_digits() <= max_integer_digits
    }

    /// Whether rescaling to `scale` keeps every non-zero digit.
    fn drops_no_digit(&self, scale: u32) -> bool {
        let drop = self.scale.saturating_sub(scale) as usize;
        self.digits.iter().take(drop).all(|&d| d == 0)
    }

    /// The value negated.
    pub fn neg(&self) -> Decimal {
        let mut out = self.clone();
        out.negative = !out.negative && !out.is_zero();
        out
    }

    /// The exact product; its scale is the sum of the scales.
    pub fn mul(&self, other: &Decimal) -> Decimal {
        let scale = self.scale.saturating_add(other.scale);
        if self.is_zero() || other.is_zero() {
            return Decimal {
                negative: false,
                digits: Vec::new(),
                scale,
            };
        }
        // Coefficients of 19 digits together at most: their product is below 10^19, so
        // one u64 multiplication is exact.
        if self.digits.len() + other.digits.len() <= 19 {
            let mut product = self.small() * other.small();
            let mut digits = Vec::with_capacity(20);
            while product > 0 {
                digits.push((product % 10) as u8);
                product /= 10;
            }
            return Decimal::normalized(self.negative != other.negative, digits, scale);
        }
        // Column sums of the digit products, on the stack for the products of the
        // values a row holds (a heap buffer beyond).
        const ON_STACK: usize = 64;
        let len = self.digits.len() + other.digits.len();
        let mut stack = [0u64; ON_STACK];
        let mut heap = Vec::new();
        let acc: &mut [u64] = if len <= ON_STACK {
            &mut stack[..len]
        } else {
            heap.resize(len, 0);
            &mut heap
        };
        for (i, &a) in self.digits.iter().enumerate() {
            if a == 0 {
                continue;
            }
            for (j, &b) in other.digits.iter().enumerate() {
                acc[i + j] += u64::from(a) * u64::from(b);
            }
        }
        let mut digits = Vec::with_capacity(acc.len() + 1);
        let mut carry = 0u64;
        for &mut v in acc {
            let v = v + carry;
            digits.push((v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            digits.push((carry % 10) as u8);
            carry /= 10;
        }
        Decimal::normalized(self.negative != other.negative, digits, scale)
    }

    /// The coefficient as a number; only for at most 19 digits (below 10^19).
    fn small(&self) -> u64 {
        debug_assert!(self.digits.len() <= 19);
        self.digits
            .iter()
            .rev()
            .fold(0u64, |n, &d| n * 10 + u64::from(d))
    }

    /// The exact sum; its scale is the larger of the scales.
    pub fn add(&self, other: &Decimal) -> Decimal {
        let scale = self.scale.max(other.scale);
        let a = self.coefficient_at(scale);
        let b = other.coefficient_at(scale);
        if self.negative == other.negative {
            return Decimal::normalized(self.negative, add_magnitudes(&a, &b), scale);
        }
        match cmp_magnitudes(&a, &b) {
            Ordering::Equal => Decimal::normalized(false, Vec::new(), scale),
            Ordering::Greater => Decimal::normalized(self.negative, sub_magnitudes(&a, &b), scale),
            Ordering::Less => Decimal::normalized(other.negative, sub_magnitudes(&b, &a), scale),
        }
    }

    /// The value at `scale` digits after the point, rounded half to even ("banker's
    /// rounding"): a value exactly halfway between the two nearest values of that scale
    /// goes to the one whose last digit is even (`0.125 → 0.12`, `0.135 → 0.14`,
    /// `-0.125 → -0.12`); any other value goes to the nearest. The rule is symmetric
    /// in the sign. A smaller scale than `scale` is padded with zeros (exact).
    pub fn round_half_even(&self, scale: u32) -> Decimal {
        if self.scale <= scale {
            return self.padded(scale);
        }
        let drop = (self.scale - scale) as usize;
        let digit = |i: usize| self.digits.get(i).copied().unwrap_or(0);
        let first_dropped = digit(drop - 1);
        let rest_nonzero = self.digits.iter().take(drop - 1).any(|&d| d != 0);
        let mut kept = Vec::with_capacity(self.digits.len().saturating_sub(drop) + 1);
        kept.extend(self.digits.iter().skip(drop).copied());
        let round_up = match first_dropped.cmp(&5) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => rest_nonzero || kept.first().is_some_and(|d| d % 2 == 1),
        };
        if round_up {
            // Adds one to the kept digits in place: nines carry, a last carry adds a
            // digit.
            match kept.iter().position(|&d| d != 9) {
                Some(i) => {
                    kept[..i].fill(0);
                    kept[i] += 1;
                }
                None => {
                    kept.fill(0);
                    kept.push(1);
                }
            }
        }
        Decimal::normalized(self.negative, kept, scale)
    }

    /// The value at exactly `scale` digits after the point, or
    /// [`DecimalError::Inexact`] if that would drop a non-zero digit.
    pub fn rescale_exact(&self, scale: u32) -> Result<Decimal, DecimalError> {
        if self.scale <= scale {
            return Ok(self.padded(scale));
        }
        if !self.drops_no_digit(scale) {
            return Err(DecimalError::Inexact);
        }
        let drop = (self.scale - scale) as usize;
        let kept = self.digits.iter().skip(drop).copied().collect();
        Ok(Decimal::normalized(self.negative, kept, scale))
    }

    /// The same value with `scale >= self.scale` digits after the point.
    fn padded(&self, scale: u32) -> Decimal {
        Decimal::normalized(self.negative, self.coefficient_at(scale), scale)
    }

    /// The coefficient for `scale >= self.scale`: digits shifted up by the difference.
    fn coefficient_at(&self, scale: u32) -> Vec<u8> {
        if self.is_zero() {
            return Vec::new();
        }
        let shift = scale.saturating_sub(self.scale) as usize;
        let mut out = Vec::with_capacity(shift + self.digits.len());
        out.resize(shift, 0);
        out.extend_from_slice(&self.digits);
        out
    }

    fn normalized(negative: bool, mut digits: Vec<u8>, scale: u32) -> Decimal {
        while digits.last() == Some(&0) {
            digits.pop();
        }
        Decimal {
            negative: negative && !digits.is_empty(),
            digits,
            scale,
        }
    }
}

fn add_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0u8;
    for i in 0..a.len().max(b.len()) {
        let v = a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0) + carry;
        out.push(v % 10);
        carry = v / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a - b` for `a >= b` (magnitudes, least significant digit first).
fn sub_magnitudes(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0u8;
    for (i, &x) in a.iter().enumerate() {
        let y = b.get(i).copied().unwrap_or(0) + borrow;
        if x >= y {
            out.push(x - y);
            borrow = 0;
        } else {
            out.push(x + 10 - y);
            borrow = 1;
        }
    }
    out
}

fn trimmed(a: &[u8]) -> &[u8] {
    let len = a.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
    &a[..len]
}

fn cmp_magnitudes(a: &[u8], b: &[u8]) -> Ordering {
    let (a, b) = (trimmed(a), trimmed(b));
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

impl FromStr for Decimal {
    type Err = DecimalError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "NaN" | "Infinity" | "+Infinity" | "-Infinity" => {
                return Err(DecimalError::NotFinite);
            }
            _ => {}
        }
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let (int_part, frac_part) = match rest.find('.') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(DecimalError::Invalid);
        }
        if !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
        {
            return Err(DecimalError::Invalid);
        }
        if int_part.len() + frac_part.len() > MAX_DIGITS {
            return Err(DecimalError::TooManyDigits);
        }
        let digits = int_part
            .bytes()
            .chain(frac_part.bytes())
            .rev()
            .map(|b| b - b'0')
            .collect();
        let scale = u32::try_from(frac_part.len()).map_err(|_| DecimalError::TooManyDigits)?;
        Ok(Decimal::normalized(negative, digits, scale))
    }
}

/// PostgreSQL's output form: `-12.340`, `0.05`, `7`; the scale is kept and zero has no
/// sign.
impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

impl Decimal {
    /// The value in PostgreSQL's output form (as [`Display`](fmt::Display) writes it),
    /// built in one allocation of its exact length.
    pub fn to_text(&self) -> String {
        let scale = self.scale as usize;
        let len = usize::from(self.negative)
            + self.digits.len().saturating_sub(scale).max(1)
            + if scale > 0 { 1 + scale } else { 0 };
        let mut out = String::with_capacity(len);
        if self.negative {
            out.push('-');
        }
        if self.digits.len() > scale {
            out.extend(
                self.digits[scale..]
                    .iter()
                    .rev()
                    .map(|&d| char::from(b'0' + d)),
            );
        } else {
            out.push('0');
        }
        if scale > 0 {
            out.push('.');
            for i in (0..scale).rev() {
                out.push(char::from(b'0' + self.digits.get(i).copied().unwrap_or(0)));
            }
        }
        out
    }
}

impl From<i64> for Decimal {
    fn from(v: i64) -> Self {
        let mut digits = Vec::new();
        let mut m = v.unsigned_abs();
        while m > 0 {
            digits.push((m % 10) as u8);
            m /= 10;
        }
        Decimal::normalized(v < 0, digits, 0)
    }
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Decimal {}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// By value: `1.5 == 1.50`, `-2 < 0 < 0.01`.
impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => return Ordering::Greater,
            (true, false) => return Ordering::Less,
            _ => {}
        }
        let scale = self.scale.max(other.scale);
        let m = cmp_magnitudes(&self.coefficient_at(scale), &other.coefficient_at(scale));
        if self.negative { m.reverse() } else { m }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().expect("valid decimal")
    }

    #[test]
    fn parses_and_prints_postgres_text_keeping_the_scale() {
        for (input, printed) in [
            ("0", "0"),
            ("0.00", "0.00"),
            ("-0.00", "0.00"),
            ("12.340", "12.340"),
            ("-12.340", "-12.340"),
            ("007.5", "7.5"),
            (".5", "0.5"),
            ("7.", "7"),
            ("+3", "3"),
            ("0.05", "0.05"),
            (
                "123456789012345678901234567890.123456789",
                "123456789012345678901234567890.123456789",
            ),
        ] {
            assert_eq!(d(input).to_string(), printed, "{input}");
        }
    }

    #[test]
    fn refuses_what_is_not_finite_decimal_text() {
        for bad in [
            "", "-", ".", "1e5", "1.2.3", " 1", "1 ", "abc", "--1", "0x10", "١",
        ] {
            assert_eq!(
                bad.parse::<Decimal>(),
                Err(DecimalError::Invalid),
                "{bad:?}"
            );
        }
        for special in ["NaN", "Infinity", "-Infinity"] {
            assert_eq!(special.parse::<Decimal>(), Err(DecimalError::NotFinite));
        }
        let long = "9".repeat(MAX_DIGITS + 1);
        assert_eq!(long.parse::<Decimal>(), Err(DecimalError::TooManyDigits));
        assert!("9".repeat(MAX_DIGITS).parse::<Decimal>().is_ok());
    }

    #[test]
    fn multiplication_is_exact_where_floats_are_not() {
        assert_eq!(d("0.29").mul(&d("100")).to_string(), "29.00");
        assert_eq!(d("0.1").mul(&d("3")).to_string(), "0.3");
        assert_eq!(d("100.00").mul(&d("1.0825")).to_string(), "108.250000");
        assert_eq!(d("-1.5").mul(&d("2")).to_string(), "-3.0");
        assert_eq!(d("-1.5").mul(&d("-2")).to_string(), "3.0");
        assert_eq!(d("-1.5").mul(&d("0.00")).to_string(), "0.000");
        assert_eq!(
            d("99999999999999999999.99")
                .mul(&d("99999999999999999999.99"))
                .to_string(),
            "9999999999999999999998000000000000000000.0001"
        );
    }

    #[test]
    fn addition_aligns_scales_and_handles_signs() {
        assert_eq!(d("1.5").add(&d("2.25")).to_string(), "3.75");
        assert_eq!(d("1.50").add(&d("-1.5")).to_string(), "0.00");
        assert_eq!(d("-10").add(&d("0.01")).to_string(), "-9.99");
        assert_eq!(d("0.01").add(&d("-10")).to_string(), "-9.99");
        assert_eq!(d("999.99").add(&d("0.01")).to_string(), "1000.00");
        assert_eq!(d("-5").add(&d("-5")).to_string(), "-10");
    }

    #[test]
    fn rounds_half_to_even_symmetrically() {
        for (input, scale, rounded) in [
            ("0.125", 2, "0.12"),
            ("0.135", 2, "0.14"),
            ("0.1250001", 2, "0.13"),
            ("0.1249999", 2, "0.12"),
            ("-0.125", 2, "-0.12"),
            ("-0.135", 2, "-0.14"),
            ("2.5", 0, "2"),
            ("3.5", 0, "4"),
            ("0.5", 0, "0"),
            ("-0.5", 0, "0"),
            ("9.995", 2, "10.00"),
            ("0.995", 2, "1.00"),
            ("-99.999", 2, "-100.00"),
            ("1.096", 2, "1.10"),
            ("19.5", 0, "20"),
            ("0.004", 2, "0.00"),
            ("0.005", 2, "0.00"),
            ("0.015", 2, "0.02"),
            ("1.2", 3, "1.200"),
            ("5", 2, "5.00"),
            ("0.0000005", 2, "0.00"),
        ] {
            assert_eq!(
                d(input).round_half_even(scale).to_string(),
                rounded,
                "{input} at {scale}"
            );
        }
    }

    #[test]
    fn exact_rescaling_refuses_to_drop_digits() {
        assert_eq!(
            d("1.500").rescale_exact(2).map(|x| x.to_string()),
            Ok("1.50".into())
        );
        assert_eq!(
            d("7").rescale_exact(2).map(|x| x.to_string()),
            Ok("7.00".into())
        );
        assert_eq!(d("1.005").rescale_exact(2), Err(DecimalError::Inexact));
    }

    #[test]
    fn products_longer_than_the_stack_buffer_are_exact() {
        let big = format!("1{}", "0".repeat(40));
        let nines = "9".repeat(40);
        assert_eq!(
            d(&big).mul(&d(&big)).to_string(),
            format!("1{}", "0".repeat(80))
        );
        // (10^40 - 1)^2 = 10^80 - 2·10^40 + 1.
        assert_eq!(
            d(&nines).mul(&d(&nines)).to_string(),
            format!("{}8{}1", "9".repeat(39), "0".repeat(39))
        );
        assert_eq!(d("-1.5").mul(&d("0.25")).to_string(), "-0.375");
        // Either side of the one-multiplication bound (19 digits together).
        let ten = "9".repeat(10);
        let nine = "9".repeat(9);
        assert_eq!(d(&ten).mul(&d(&nine)).to_string(), "9999999989000000001");
        assert_eq!(d(&ten).mul(&d(&ten)).to_string(), "99999999980000000001");
        assert_eq!(d("0.0").mul(&d("-3")).to_string(), "0.0");
        assert_eq!(d("-2").mul(&d("-3.00")).to_string(), "6.00");
    }

    #[test]
    fn products_agree_with_integer_arithmetic_on_both_paths() {
        // Coefficients of 1 to 19 digits each (so the products reach 38 digits: both
        // the one-multiplication path and the digit-by-digit one), against u128.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |digits: u32| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 1) % 10u64.pow(digits)
        };
        for i in 0..2000u32 {
            let (a, b) = (next(1 + i % 19), next(1 + (i / 19) % 19));
            let want = u128::from(a) * u128::from(b);
            let sign = if i % 3 == 0 && want != 0 { "-" } else { "" };
            let a_text = if i % 3 == 0 {
                format!("-{a}")
            } else {
                a.to_string()
            };
            assert_eq!(
                d(&a_text).mul(&d(&b.to_string())).to_string(),
                format!("{sign}{want}"),
                "{a_text} × {b}"
            );
        }
    }

    #[test]
    fn text_is_built_at_its_exact_length() {
        for text in ["0", "-0.05", "7", "12345.67", "-120", "0.000", "100.5"] {
            let t = d(text).to_text();
            assert_eq!(t, text);
            assert_eq!(t.capacity(), t.len(), "{text}");
        }
    }

    #[test]
    fn compares_by_value_and_checks_numeric_bounds() {
        assert_eq!(d("1.5"), d("1.50"));
        assert!(d("-2") < d("0"));
        assert!(d("0") < d("0.01"));
        assert!(d("-2.5") < d("-2.4"));
        assert!(d("10") > d("9.99"));
        assert!(d("9999999999.99").fits(12, 2));
        assert!(d("9999999999.990").fits(12, 2));
        assert!(!d("10000000000.00").fits(12, 2));
        assert!(!d("1.005").fits(12, 2));
        assert_eq!(d("0.05").integer_digits(), 0);
        assert_eq!(d("-123.4").integer_digits(), 3);
        assert_eq!(Decimal::from(-120).to_string(), "-120");
        assert_eq!(Decimal::from(i64::MIN).to_string(), "-9223372036854775808");
        assert_eq!(d("5").neg().to_string(), "-5");
        assert_eq!(d("0").neg().to_string(), "0");
    }
}
