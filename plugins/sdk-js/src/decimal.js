/**
 * Exact decimal numbers for `numeric` values: parse, print, add, subtract, multiply
 * and round, never through a float. The Rust SDK's `weir_plugin::decimal`, with the
 * same rules and limits:
 *
 * - Text is PostgreSQL's `numeric` output form: an optional sign, ASCII digits, and
 *   optionally `.` and ASCII digits (`12.50`, `-0.5`, `.5`, `7.`, `+3` are accepted;
 *   no exponent, no white space, at least one digit). `NaN`, `Infinity`, `+Infinity`
 *   and `-Infinity` are refused as not finite: a plugin decides what they mean.
 * - At most `MAX_DIGITS` digits in a parsed text (PostgreSQL's own limit: 131072
 *   before the point and 16383 after). Results of arithmetic may be longer; they are
 *   exact.
 * - Printing keeps the scale (`1.50 × 2` prints `3.00`) and never puts a sign on zero.
 *
 * A `Decimal` is immutable: an unscaled BigInt (signed) and a scale (the number of
 * digits after the point): `unscaled × 10^-scale`. Comparison is by value (`1.5`
 * equals `1.50`); the scale is still observable through `scale` and the text.
 */

/** The most digits a parsed decimal text may have (PostgreSQL's `numeric` limit). */
export const MAX_DIGITS = 131072 + 16383;

/**
 * Why a text is not a finite decimal, or why a rescaling would not be exact. `kind`
 * is the Rust SDK's `DecimalError`: `invalid`, `not-finite`, `too-many-digits` or
 * `inexact`.
 */
export class DecimalError extends Error {
  constructor(kind) {
    super(DECIMAL_ERROR_TEXTS[kind] ?? `decimal error ${kind}`);
    this.name = 'DecimalError';
    this.kind = kind;
  }
}

const DECIMAL_ERROR_TEXTS = {
  invalid: 'not valid decimal text',
  'not-finite': 'not a finite decimal',
  'too-many-digits': 'a decimal with too many digits',
  inexact: 'a decimal that cannot be rescaled exactly',
};

const NOT_FINITE_TEXTS = new Set(['NaN', 'Infinity', '+Infinity', '-Infinity']);
const ASCII_DIGITS = /^[0-9]*$/;

const POWERS = [];
/** 10^n as a BigInt (the small ones cached). */
function pow10(n) {
  if (n < 64) {
    return (POWERS[n] ??= 10n ** BigInt(n));
  }
  return 10n ** BigInt(n);
}

function abs(n) {
  return n < 0n ? -n : n;
}

function checkScale(scale) {
  if (!Number.isSafeInteger(scale) || scale < 0) {
    throw new TypeError(`a decimal scale is a whole number, not negative (got ${scale})`);
  }
}

/** An exact decimal number: `unscaled × 10^-scale`. */
export class Decimal {
  #unscaled;
  #scale;

  /**
   * @param {bigint} unscaled the digits as a signed integer
   * @param {number} scale the number of digits after the point, a whole number
   */
  constructor(unscaled, scale = 0) {
    if (typeof unscaled !== 'bigint') {
      throw new TypeError('the unscaled value of a Decimal is a BigInt');
    }
    checkScale(scale);
    this.#unscaled = unscaled;
    this.#scale = scale;
  }

  /**
   * Parses PostgreSQL `numeric` text exactly, keeping its scale (`1.50` has scale 2).
   * Throws a `DecimalError` of kind `not-finite`, `invalid` or `too-many-digits`, in
   * the Rust SDK's order: the special values first, then the form, then the length.
   */
  static parse(text) {
    if (typeof text !== 'string') {
      throw new TypeError('Decimal.parse takes a string');
    }
    if (NOT_FINITE_TEXTS.has(text)) {
      throw new DecimalError('not-finite');
    }
    const first = text.charCodeAt(0);
    const start = first === 0x2d || first === 0x2b ? 1 : 0; // `-` or `+`
    const dot = text.indexOf('.', start);
    const intPart = dot < 0 ? text.slice(start) : text.slice(start, dot);
    const fracPart = dot < 0 ? '' : text.slice(dot + 1);
    if (intPart === '' && fracPart === '') {
      throw new DecimalError('invalid');
    }
    if (!ASCII_DIGITS.test(intPart) || !ASCII_DIGITS.test(fracPart)) {
      throw new DecimalError('invalid');
    }
    if (intPart.length + fracPart.length > MAX_DIGITS) {
      throw new DecimalError('too-many-digits');
    }
    const magnitude = BigInt(intPart + fracPart);
    return new Decimal(first === 0x2d ? -magnitude : magnitude, fracPart.length);
  }

  /** An integer (a BigInt, or a number that is a safe integer) at scale 0. */
  static from(integer) {
    if (typeof integer === 'bigint') {
      return new Decimal(integer, 0);
    }
    if (Number.isSafeInteger(integer)) {
      return new Decimal(BigInt(integer), 0);
    }
    throw new TypeError('Decimal.from takes a BigInt or a safe integer (parse text with Decimal.parse)');
  }

  /** The value by the order of values: negative, zero or positive (a sorter). */
  static compare(a, b) {
    return a.compare(b);
  }

  /** The signed unscaled integer: the value is `unscaled × 10^-scale`. */
  get unscaled() {
    return this.#unscaled;
  }

  /** The number of digits after the decimal point. */
  get scale() {
    return this.#scale;
  }

  /** Whether the value is below zero (zero never is). */
  isNegative() {
    return this.#unscaled < 0n;
  }

  /** Whether the value is zero (of any scale). */
  isZero() {
    return this.#unscaled === 0n;
  }

  /**
   * The number of significant digits before the decimal point (0 for a value whose
   * magnitude is below 1).
   */
  integerDigits() {
    if (this.#unscaled === 0n) {
      return 0;
    }
    return Math.max(0, abs(this.#unscaled).toString().length - this.#scale);
  }

  /** The value negated. */
  neg() {
    return new Decimal(-this.#unscaled, this.#scale);
  }

  /** The absolute value. */
  abs() {
    return this.#unscaled < 0n ? this.neg() : this;
  }

  /** The exact sum; its scale is the larger of the scales. */
  add(other) {
    const scale = Math.max(this.#scale, other.#scale);
    return new Decimal(this.#at(scale) + other.#at(scale), scale);
  }

  /** The exact difference; its scale is the larger of the scales. */
  sub(other) {
    const scale = Math.max(this.#scale, other.#scale);
    return new Decimal(this.#at(scale) - other.#at(scale), scale);
  }

  /** The exact product; its scale is the sum of the scales. */
  mul(other) {
    return new Decimal(this.#unscaled * other.#unscaled, this.#scale + other.#scale);
  }

  /** Negative, zero or positive as this value is below, equal to or above `other`. */
  compare(other) {
    const scale = Math.max(this.#scale, other.#scale);
    const a = this.#at(scale);
    const b = other.#at(scale);
    return a < b ? -1 : a > b ? 1 : 0;
  }

  /** Whether the values are equal (`1.5` equals `1.50`). */
  equals(other) {
    return other instanceof Decimal && this.compare(other) === 0;
  }

  /**
   * Whether the value has no non-zero digit beyond `scale` digits after the point,
   * that is whether `rescaleExact(scale)` succeeds.
   */
  fitsScale(scale) {
    checkScale(scale);
    return this.#scale <= scale || this.#unscaled % pow10(this.#scale - scale) === 0n;
  }

  /**
   * Whether the value fits `numeric(precision, scale)` without rounding: no
   * non-zero digit beyond `scale` digits after the point, and at most
   * `precision - scale` integer digits.
   */
  fits(precision, scale) {
    checkScale(precision);
    checkScale(scale);
    const unscaled = this.#exactAt(scale);
    // At most `m` integer digits at scale `s`: below 10^(m + s) in magnitude.
    return unscaled !== null && abs(unscaled) < pow10(Math.max(0, precision - scale) + scale);
  }

  /**
   * The value at exactly `scale` digits after the point: zeros are added or
   * dropped; throws `DecimalError` of kind `inexact` if a non-zero digit would be
   * dropped.
   */
  rescaleExact(scale) {
    checkScale(scale);
    if (this.#scale === scale) {
      return this;
    }
    const unscaled = this.#exactAt(scale);
    if (unscaled === null) {
      throw new DecimalError('inexact');
    }
    return new Decimal(unscaled, scale);
  }

  /**
   * The value at `scale` digits after the point, rounded half to even ("banker's
   * rounding"): a value exactly halfway between the two nearest values of that scale
   * goes to the one whose last digit is even (`0.125` → `0.12`, `0.135` → `0.14`,
   * `-0.125` → `-0.12`); any other value goes to the nearest. Symmetric in the sign.
   * A smaller scale is padded with zeros (exact).
   */
  roundHalfEven(scale) {
    checkScale(scale);
    if (this.#scale <= scale) {
      return this.#padded(scale);
    }
    const divisor = pow10(this.#scale - scale);
    const magnitude = abs(this.#unscaled);
    const kept = magnitude / divisor;
    const twiceDropped = (magnitude % divisor) * 2n;
    const up = twiceDropped > divisor || (twiceDropped === divisor && kept % 2n === 1n);
    const rounded = up ? kept + 1n : kept;
    return new Decimal(this.#unscaled < 0n ? -rounded : rounded, scale);
  }

  /** PostgreSQL's output form, keeping the scale: `-12.340`, `0.05`, `7`. */
  toString() {
    const negative = this.#unscaled < 0n;
    const digits = abs(this.#unscaled).toString();
    const sign = negative ? '-' : '';
    if (this.#scale === 0) {
      return sign + digits;
    }
    const padded = digits.padStart(this.#scale + 1, '0');
    const point = padded.length - this.#scale;
    return `${sign}${padded.slice(0, point)}.${padded.slice(point)}`;
  }

  /** The text (`JSON.stringify` gives the exact value as a JSON string). */
  toJSON() {
    return this.toString();
  }

  /** Refuses to become a number: `<`, `+` and friends on decimals are bugs. */
  valueOf() {
    throw new TypeError('a Decimal is not a number: use compare, add, mul, … or toString');
  }

  // The unscaled value at `scale`, `null` if a non-zero digit would be dropped.
  #exactAt(scale) {
    if (this.#scale <= scale) {
      return this.#at(scale);
    }
    const divisor = pow10(this.#scale - scale);
    return this.#unscaled % divisor === 0n ? this.#unscaled / divisor : null;
  }

  // The unscaled value at `scale >= this.scale`.
  #at(scale) {
    return this.#scale === scale ? this.#unscaled : this.#unscaled * pow10(scale - this.#scale);
  }

  #padded(scale) {
    return this.#scale === scale ? this : new Decimal(this.#at(scale), scale);
  }
}

/** Zero at scale 0. */
Decimal.ZERO = new Decimal(0n, 0);
