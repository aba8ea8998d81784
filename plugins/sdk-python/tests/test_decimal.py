"""`weir_plugin.decimal`: the Rust SDK's decimal examples (`plugins/sdk/src/decimal.rs`)
and more."""

import decimal as std
import random
import sys
import unittest
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir_plugin import decimal as wd  # noqa: E402


def d(text):
    return wd.parse(text)


class Parse(unittest.TestCase):
    def test_parses_and_prints_postgres_text_keeping_the_scale(self):
        for text, printed in [
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
            ("0.0000001", "0.0000001"),
            ("-0.000000000100", "-0.000000000100"),
            ("123456789012345678901234567890.123456789", "123456789012345678901234567890.123456789"),
        ]:
            self.assertEqual(wd.to_text(d(text)), printed, text)
        self.assertFalse(d("-0.00").is_signed())
        self.assertEqual(wd.scale(d("1.50")), 2)
        self.assertEqual(wd.scale(d("7.")), 0)

    def test_refuses_what_is_not_finite_decimal_text(self):
        invalid = ["", "-", "+", ".", "-.", "1e5", "1E5", "1.2.3", " 1", "1 ", "abc", "--1", "+-1", "0x10",
                   "١", "²", "1_0", "inf", "nan", "1\n", "\ufeff1", "Infinity ", "infinity", "sNaN"]
        for bad in invalid:
            with self.assertRaises(wd.InvalidDecimal, msg=repr(bad)):
                d(bad)
        for special in ["NaN", "Infinity", "+Infinity", "-Infinity"]:
            with self.assertRaises(wd.NotFinite, msg=special):
                d(special)
        with self.assertRaises(wd.TooManyDigits):
            d("9" * (wd.MAX_DIGITS + 1))
        with self.assertRaises(wd.TooManyDigits):
            d("1" * 131_072 + "." + "1" * 16_384)
        self.assertEqual(len(wd.to_text(d("9" * wd.MAX_DIGITS))), wd.MAX_DIGITS)
        for not_text in [None, 1, b"1", Decimal("1")]:
            with self.assertRaises(wd.InvalidDecimal):
                wd.parse(not_text)

    def test_the_common_form_parses_as_the_general_steps_do(self):
        # `parse` reads unsigned digits with at most one `.` in one test; a `str`
        # subclass takes the general steps: both must give the same value and scale.
        class Text(str):
            pass

        rng = random.Random(5)
        texts = ["0", "00", "0.", ".0", "007.50", "7.", ".5", "1.2.3", ".", "..", "1..", "", "9" * wd.MAX_DIGITS,
                 "9" * (wd.MAX_DIGITS - 1) + ".9", "1" * (wd.MAX_DIGITS + 1), "1.5", "-1.5", "+1", "1e5", "١",
                 "1\n", "0.000"]
        texts += ["".join(rng.choice("0123456789.") for _ in range(rng.randint(0, 12))) for _ in range(500)]
        for text in texts:
            def outcome(t):
                try:
                    value = wd.parse(t)
                    return repr(value), value.as_tuple()
                except wd.DecimalError as error:
                    return type(error).__name__

            self.assertEqual(outcome(text), outcome(Text(text)), repr(text[:40]))

    def test_every_error_is_a_decimal_error_and_nothing_else_escapes(self):
        rng = random.Random(7)
        alphabet = "0123456789.+-eE _\ufeff١xNaInfty"
        for _ in range(5000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))
            try:
                value = d(text)
            except wd.DecimalError:
                continue
            # What parses is exactly the digits given.
            self.assertEqual(value, Decimal(text.replace("+", "")), text)

    def test_prints_values_with_any_exponent_without_one(self):
        self.assertEqual(wd.to_text(Decimal("1E+3")), "1000")
        self.assertEqual(wd.to_text(Decimal("0E-10")), "0.0000000000")
        self.assertEqual(wd.to_text(Decimal("-0E+2")), "0")
        self.assertEqual(wd.to_text(Decimal("-1.5E-7")), "-0.00000015")
        self.assertEqual(wd.to_text(Decimal("NaN")), "NaN")
        self.assertEqual(wd.to_text(Decimal("-Infinity")), "-Infinity")
        # Whatever the ambient context's precision.
        with std.localcontext() as ctx:
            ctx.prec = 3
            self.assertEqual(wd.to_text(d("123456.789")), "123456.789")


class Arithmetic(unittest.TestCase):
    def test_multiplication_is_exact_where_floats_are_not(self):
        for a, b, product in [
            ("0.29", "100", "29.00"),
            ("0.1", "3", "0.3"),
            ("100.00", "1.0825", "108.250000"),
            ("-1.5", "2", "-3.0"),
            ("-1.5", "-2", "3.0"),
            ("-1.5", "0.00", "0.000"),
            ("99999999999999999999.99", "99999999999999999999.99",
             "9999999999999999999998000000000000000000.0001"),
        ]:
            self.assertEqual(wd.to_text(wd.mul(d(a), d(b))), product)
        # Whatever the ambient context.
        with std.localcontext() as ctx:
            ctx.prec = 5
            big = d("9" * 1000 + ".9")
            self.assertEqual(wd.to_text(wd.mul(big, big)), wd.to_text(wd.mul(big, big)))
            self.assertEqual(len(wd.to_text(wd.mul(big, big))), 2003)

    def test_addition_aligns_scales_and_handles_signs(self):
        for a, b, total in [
            ("1.5", "2.25", "3.75"),
            ("1.50", "-1.5", "0.00"),
            ("-10", "0.01", "-9.99"),
            ("0.01", "-10", "-9.99"),
            ("999.99", "0.01", "1000.00"),
            ("-5", "-5", "-10"),
        ]:
            self.assertEqual(wd.to_text(wd.add(d(a), d(b))), total)
        self.assertEqual(wd.to_text(wd.sub(d("1.5"), d("1.50"))), "0.00")
        self.assertEqual(wd.to_text(wd.sub(d("-1.5"), d("-1.5"))), "0.0")

    def test_rounds_half_to_even_symmetrically(self):
        for text, places, rounded in [
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
            ("0.004", 2, "0.00"),
            ("0.005", 2, "0.00"),
            ("0.015", 2, "0.02"),
            ("1.2", 3, "1.200"),
            ("5", 2, "5.00"),
            ("0.0000005", 2, "0.00"),
            ("-0.004", 2, "0.00"),
            ("5.125", 2, "5.12"),
            ("5.175", 2, "5.18"),
        ]:
            self.assertEqual(wd.to_text(wd.round_half_even(d(text), places)), rounded, f"{text} at {places}")
        long = d("0." + "4" * 5000 + "5")
        self.assertEqual(wd.to_text(wd.round_half_even(long, 2)), "0.44")
        with self.assertRaises(wd.NotFinite):
            wd.round_half_even(Decimal("NaN"), 2)

    def test_exact_rescaling_refuses_to_drop_digits(self):
        self.assertEqual(wd.to_text(wd.rescale_exact(d("1.500"), 2)), "1.50")
        self.assertEqual(wd.to_text(wd.rescale_exact(d("7"), 2)), "7.00")
        self.assertEqual(wd.to_text(wd.rescale_exact(d("-0.000"), 1)), "0.0")
        with self.assertRaises(wd.Inexact):
            wd.rescale_exact(d("1.005"), 2)
        with self.assertRaises(wd.NotFinite):
            wd.rescale_exact(Decimal("Infinity"), 2)
        with self.assertRaises(wd.TooManyDigits):
            wd.rescale_exact(Decimal("1E+999999"), 2)

    def test_checks_numeric_bounds_and_signs(self):
        self.assertTrue(wd.fits(d("9999999999.99"), 12, 2))
        self.assertTrue(wd.fits(d("9999999999.990"), 12, 2))
        self.assertTrue(wd.fits(d("-9999999999.99"), 12, 2))
        self.assertTrue(wd.fits(d("0.00"), 12, 2))
        self.assertTrue(wd.fits(d("0.05"), 2, 2))
        self.assertFalse(wd.fits(d("1.00"), 2, 2))
        self.assertFalse(wd.fits(d("10000000000.00"), 12, 2))
        self.assertFalse(wd.fits(d("1.005"), 12, 2))
        self.assertFalse(wd.fits(Decimal("NaN"), 12, 2))
        self.assertFalse(wd.fits(Decimal("1E+999999"), 1000, 2))
        self.assertEqual(wd.integer_digits(d("0.05")), 0)
        self.assertEqual(wd.integer_digits(d("-123.4")), 3)
        self.assertEqual(wd.integer_digits(d("0.00")), 0)
        self.assertFalse(wd.is_negative(d("-0.00")))
        self.assertFalse(wd.is_negative(Decimal("-0")))
        self.assertTrue(wd.is_negative(d("-0.001")))
        self.assertFalse(wd.is_negative(Decimal("NaN")))
        self.assertTrue(wd.is_negative(Decimal("-Infinity")))

    def test_the_exact_context_raises_rather_than_rounds(self):
        with std.localcontext(wd.EXACT):
            self.assertEqual(wd.to_text(d("1.0825") * d("100.00")), "108.250000")
            with self.assertRaises(std.Inexact):
                Decimal(1) / Decimal(3)
            with self.assertRaises(std.Inexact):
                d("0.125").quantize(Decimal("0.01"))


if __name__ == "__main__":
    unittest.main()
