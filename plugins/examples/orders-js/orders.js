/**
 * `orders`: the example row plugin, in JavaScript. Its output is byte-identical to
 * the Rust version's (`../orders-rust/src/lib.rs`) for the same input;
 * `../orders-cases.jsonl` holds the cases every language's version is tested with
 * (`orders.test.js`, `node --test`).
 *
 * This ES module is the component's source: ComponentizeJS builds it for world
 * `plugin` of `weir:transform@0.1.0` (`export const transform = { describe, Session
 * }` is the exported `transform` interface, `Session` its `session` resource), and
 * Node runs it as it is for the native tests. Values are the WIT values as the JS
 * bindings give them: variants `{ tag, val }` (`{ tag: 'integer', val: 5n }`, `{ tag:
 * 'null' }`), `s64`/`u64` as BigInt, enums as strings, records as objects with
 * camelCase fields, tuples as arrays. A call that returns the WIT `error` throws a
 * `PluginError`, whose own `payload` property is the error variant.
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
 *   reasons for a missing, null, mistyped or non-finite column are the Rust SDK
 *   getters' fixed texts (``column `amount` is null``, ``column `id` is missing``,
 *   ``column `status` is not text``, ``column `amount` is not a finite decimal``).
 * - A deleted row (op `delete`) has no output.
 *
 * Config errors are the Rust SDK's texts too (`invalid-config`, naming the key, never
 * the value): ``missing config key `rate` ``, ``config `rate` is not valid decimal
 * text``, ``config `rate` is not a finite decimal``, ``config `rate` has too many
 * digits``, and this plugin's ``config `rate` is negative``. As in the Rust SDK's row
 * session, a config error is returned by every `push` and by `finish` (the
 * contract's constructor cannot fail).
 *
 * Decimal text (the Rust SDK's `weir_plugin::decimal`): PostgreSQL's `numeric` text,
 * an optional sign, ASCII digits, and optionally `.` and ASCII digits (`12.50`,
 * `-0.5`, `.5`, `7.`, `+3`; no exponent, no white space, at least one digit); `NaN`,
 * `Infinity`, `+Infinity` and `-Infinity` are not finite; at most 147,455 digits. A
 * `Decimal` is a sign, a BigInt coefficient and a scale: every operation is exact
 * integer arithmetic, the only rounding is the explicit half-to-even step, and
 * printing keeps the scale and never puts a sign on zero.
 */

/** The plugin's name, as the Rust version describes itself. */
export const NAME = 'orders';

/** The plugin's version: the same as the Rust version's (the plugins' workspace version). */
export const VERSION = '0.1.0';

/** The most digits a decimal text may have (PostgreSQL's `numeric` limit). */
export const MAX_DIGITS = 131072 + 16383;

// ---------------------------------------------------------------------------------
// Exact decimals
// ---------------------------------------------------------------------------------

/**
 * Why a text is not a finite decimal, or why a rescaling would not be exact: `kind`
 * is `invalid`, `not-finite`, `too-many-digits` or `inexact` (the Rust SDK's
 * `DecimalError`).
 */
export class DecimalError extends Error {
  constructor(kind) {
    super(`decimal error: ${kind}`);
    this.name = 'DecimalError';
    this.kind = kind;
  }
}

const NOT_FINITE_TEXTS = new Set(['NaN', 'Infinity', '+Infinity', '-Infinity']);
const ASCII_DIGITS = /^[0-9]*$/;

function pow10(n) {
  return 10n ** BigInt(n);
}

/** An exact decimal: a sign, a coefficient (BigInt, not negative) and a scale. */
export class Decimal {
  /**
   * @param {boolean} negative whether the value is below zero (ignored for zero)
   * @param {bigint} coefficient the digits as an integer, not negative
   * @param {number} scale the number of digits after the point, not negative
   */
  constructor(negative, coefficient, scale) {
    if (typeof coefficient !== 'bigint' || coefficient < 0n) {
      throw new TypeError('a decimal coefficient is a BigInt, not negative');
    }
    if (!Number.isSafeInteger(scale) || scale < 0) {
      throw new TypeError('a decimal scale is an integer, not negative');
    }
    this.negative = negative && coefficient !== 0n;
    this.coefficient = coefficient;
    this.scale = scale;
    Object.freeze(this);
  }

  /**
   * Parses PostgreSQL `numeric` text exactly, keeping its scale (`1.50` has scale
   * 2). Throws a `DecimalError` (`not-finite`, `invalid` or `too-many-digits`) in the
   * Rust SDK's order: the special values first, then the form, then the length.
   */
  static parse(text) {
    if (NOT_FINITE_TEXTS.has(text)) {
      throw new DecimalError('not-finite');
    }
    const signed = text.startsWith('-') || text.startsWith('+');
    const rest = signed ? text.slice(1) : text;
    const dot = rest.indexOf('.');
    const intPart = dot < 0 ? rest : rest.slice(0, dot);
    const fracPart = dot < 0 ? '' : rest.slice(dot + 1);
    if (intPart === '' && fracPart === '') {
      throw new DecimalError('invalid');
    }
    if (!ASCII_DIGITS.test(intPart) || !ASCII_DIGITS.test(fracPart)) {
      throw new DecimalError('invalid');
    }
    if (intPart.length + fracPart.length > MAX_DIGITS) {
      throw new DecimalError('too-many-digits');
    }
    return new Decimal(text.startsWith('-'), BigInt(intPart + fracPart), fracPart.length);
  }

  /** Whether the value is below zero (zero never is). */
  isNegative() {
    return this.negative;
  }

  /** Whether the value is zero (of any scale). */
  isZero() {
    return this.coefficient === 0n;
  }

  /** The number of significant digits before the point (0 below 1 in magnitude). */
  integerDigits() {
    if (this.coefficient === 0n) {
      return 0;
    }
    return Math.max(0, this.coefficient.toString().length - this.scale);
  }

  /** The exact product; its scale is the sum of the scales. */
  mul(other) {
    return new Decimal(
      this.negative !== other.negative,
      this.coefficient * other.coefficient,
      this.scale + other.scale,
    );
  }

  /**
   * The value at exactly `scale` digits after the point: zeros are added or dropped;
   * throws `DecimalError('inexact')` if a non-zero digit would be dropped.
   */
  rescaleExact(scale) {
    if (this.scale <= scale) {
      return this.#padded(scale);
    }
    const divisor = pow10(this.scale - scale);
    if (this.coefficient % divisor !== 0n) {
      throw new DecimalError('inexact');
    }
    return new Decimal(this.negative, this.coefficient / divisor, scale);
  }

  /**
   * The value at `scale` digits after the point, rounded half to even: a value
   * exactly halfway goes to the even last digit (`0.125` → `0.12`, `0.135` → `0.14`,
   * `-0.125` → `-0.12`), any other to the nearest; symmetric in the sign. A smaller
   * scale is padded with zeros (exact).
   */
  roundHalfEven(scale) {
    if (this.scale <= scale) {
      return this.#padded(scale);
    }
    const divisor = pow10(this.scale - scale);
    const kept = this.coefficient / divisor;
    const twiceDropped = (this.coefficient % divisor) * 2n;
    const up = twiceDropped > divisor || (twiceDropped === divisor && kept % 2n === 1n);
    return new Decimal(this.negative, up ? kept + 1n : kept, scale);
  }

  /**
   * Whether the value fits `numeric(precision, scale)` without rounding: at most
   * `scale` non-zero fraction digits and at most `precision - scale` integer digits.
   */
  fits(precision, scale) {
    let rescaled;
    try {
      rescaled = this.rescaleExact(scale);
    } catch (e) {
      if (e instanceof DecimalError) {
        return false;
      }
      throw e;
    }
    // At most `m` integer digits at scale `s`: the coefficient is below 10^(m + s).
    return rescaled.coefficient < pow10(Math.max(0, precision - scale) + scale);
  }

  /** PostgreSQL's output form, keeping the scale: `-12.340`, `0.05`, `7`. */
  toString() {
    const sign = this.negative ? '-' : '';
    const digits = this.coefficient.toString();
    if (this.scale === 0) {
      return sign + digits;
    }
    const padded = digits.padStart(this.scale + 1, '0');
    const point = padded.length - this.scale;
    return `${sign}${padded.slice(0, point)}.${padded.slice(point)}`;
  }

  #padded(scale) {
    return new Decimal(this.negative, this.coefficient * pow10(scale - this.scale), scale);
  }
}

// ---------------------------------------------------------------------------------
// Errors, rejections and the typed column getters (the Rust SDK's `Input`/`Config`)
// ---------------------------------------------------------------------------------

/**
 * An error that fails the whole call. Its own `payload` property is the WIT `error`
 * variant (`{ tag: 'invalid-config' | 'invalid-input' | 'other', val: message }`):
 * the bindings make a thrown value with a `payload` the call's `result::err`.
 */
export class PluginError extends Error {
  constructor(tag, message) {
    super(message);
    this.name = 'PluginError';
    this.payload = { tag, val: message };
  }
}

/** One input row is refused, with a reason (a WIT `rejection`). */
export class Reject extends Error {
  constructor(reason) {
    super(reason);
    this.name = 'Reject';
    this.reason = reason;
  }
}

/**
 * The config value of `key` as an exact, finite decimal; a `PluginError`
 * (`invalid-config`) naming the key, never the value, otherwise.
 */
export function configDecimal(config, key) {
  const entry = [...config].sort(compareEntries).find(([k]) => k === key);
  if (entry === undefined) {
    throw new PluginError('invalid-config', `missing config key \`${key}\``);
  }
  try {
    return Decimal.parse(entry[1]);
  } catch (e) {
    if (!(e instanceof DecimalError)) {
      throw e;
    }
    throw new PluginError('invalid-config', `config \`${key}\` ${DECIMAL_REASONS[e.kind]}`);
  }
}

// What a decimal text is not, after ``column `NAME` `` or ``config `KEY` ``.
const DECIMAL_REASONS = {
  'not-finite': 'is not a finite decimal',
  'too-many-digits': 'has too many digits',
  invalid: 'is not valid decimal text',
  inexact: 'is not valid decimal text',
};

// Sorts config entries by key, then value, by UTF-16 code units.
function compareEntries([ka, va], [kb, vb]) {
  if (ka !== kb) {
    return ka < kb ? -1 : 1;
  }
  if (va !== vb) {
    return va < vb ? -1 : 1;
  }
  return 0;
}

/**
 * Typed getters over one staged row's columns (`{ name, value }` objects), with the
 * Rust SDK's fixed rejection reasons: ``column `NAME` is missing``, ``column `NAME`
 * is null``, ``column `NAME` is not KIND``, ``column `NAME` is not a finite
 * decimal``, …. Every getter refuses a missing column and a value of another case
 * (no coercion); the `OrNull` forms return `null` for null, the others refuse it.
 */
export class Input {
  constructor(columns) {
    this.columns = columns;
  }

  /** The value of a column (the first of that name); missing is a rejection. */
  value(column) {
    const found = this.columns.find((c) => c.name === column);
    if (found === undefined) {
      throw new Reject(`column \`${column}\` is missing`);
    }
    return found.value;
  }

  #orNull(column, tag, kind) {
    const value = this.value(column);
    if (value.tag === 'null') {
      return null;
    }
    if (value.tag !== tag) {
      throw new Reject(`column \`${column}\` is not ${kind}`);
    }
    return value.val;
  }

  static #required(column, payload) {
    if (payload === null) {
      throw new Reject(`column \`${column}\` is null`);
    }
    return payload;
  }

  /** An `integer` column (BigInt). */
  int(column) {
    return Input.#required(column, this.#orNull(column, 'integer', 'an integer'));
  }

  /** A `text` column; `null` for null. */
  textOrNull(column) {
    return this.#orNull(column, 'text', 'text');
  }

  /** A `date` column (days since 1970-01-01); `null` for null. */
  dateOrNull(column) {
    return this.#orNull(column, 'date', 'a date');
  }

  /** A `decimal` column parsed exactly; `null` for null. */
  decimalOrNull(column) {
    const text = this.#orNull(column, 'decimal', 'a decimal');
    if (text === null) {
      return null;
    }
    try {
      return Decimal.parse(text);
    } catch (e) {
      if (!(e instanceof DecimalError)) {
        throw e;
      }
      throw new Reject(`column \`${column}\` ${DECIMAL_REASONS[e.kind]}`);
    }
  }

  /** A `decimal` column parsed exactly; null is a rejection. */
  decimal(column) {
    return Input.#required(column, this.decimalOrNull(column));
  }
}

// ---------------------------------------------------------------------------------
// The plugin
// ---------------------------------------------------------------------------------

const NULL = Object.freeze({ tag: 'null' });

/** `a`–`z` to `A`–`Z`; every other character kept (`straße` → `STRAßE`). */
export function asciiUpper(text) {
  return text.replace(/[a-z]+/g, (run) => run.toUpperCase());
}

/** The plugin's description (the WIT `description`); a new object every call. */
export function describe() {
  const column = (name, type, nullable = true) => ({ name, type, nullable });
  return {
    name: NAME,
    version: VERSION,
    kind: 'row',
    columns: [
      column('id', { tag: 'bigint' }, false),
      column('customer', { tag: 'text' }),
      column('order_date', { tag: 'date' }),
      column('amount', { tag: 'numeric', val: { precision: 12, scale: 2 } }),
      column('amount_eur', { tag: 'numeric', val: { precision: 14, scale: 2 } }),
      column('status', { tag: 'text' }),
    ],
    grainKey: ['id'],
    partitionColumn: 'order_date',
  };
}

/** The orders plugin for one partition job: holds the parsed `rate`. */
export class Orders {
  constructor(rate) {
    this.rate = rate;
  }

  /** Parses the config; a `PluginError` (`invalid-config`) if it is invalid. */
  static open(config) {
    const rate = configDecimal(config, 'rate');
    if (rate.isNegative()) {
      throw new PluginError('invalid-config', 'config `rate` is negative');
    }
    return new Orders(rate);
  }

  /**
   * One output row, its values in the declared column order; a `Reject` with the
   * first failed check's reason (see the module documentation for the order).
   */
  transform(row) {
    const id = row.int('id');
    const customer = row.textOrNull('customer');
    const orderDate = row.dateOrNull('order_date');
    let amount = row.decimal('amount');
    if (amount.isNegative()) {
      throw new Reject('amount is negative');
    }
    try {
      amount = amount.rescaleExact(2);
    } catch (e) {
      if (!(e instanceof DecimalError)) {
        throw e;
      }
      throw new Reject('amount has more than 2 decimal places');
    }
    if (!amount.fits(12, 2)) {
      throw new Reject('amount does not fit numeric(12,2)');
    }
    const amountEur = amount.mul(this.rate).roundHalfEven(2);
    if (!amountEur.fits(14, 2)) {
      throw new Reject('amount_eur does not fit numeric(14,2)');
    }
    const status = row.textOrNull('status');
    return [
      { tag: 'integer', val: id },
      customer === null ? NULL : { tag: 'text', val: customer },
      orderDate === null ? NULL : { tag: 'date', val: orderDate },
      { tag: 'decimal', val: amount.toString() },
      { tag: 'decimal', val: amountEur.toString() },
      status === null ? NULL : { tag: 'text', val: asciiUpper(status) },
    ];
  }
}

/**
 * The `session` resource: one partition job, as the Rust SDK's row session runs it.
 * The config is parsed once, at construction; a config error is thrown by every
 * `push` and by `finish`. Rows whose op is `delete` have no output; every other row
 * yields one output row or one rejection (with the row's key exactly as pushed).
 * `finish` returns nothing (a row plugin holds nothing back).
 */
export class Session {
  #plugin = null;
  #error = null;

  constructor(_partition, config) {
    try {
      this.#plugin = Orders.open(config);
    } catch (e) {
      if (!(e instanceof PluginError)) {
        throw e;
      }
      this.#error = e;
    }
  }

  #opened() {
    if (this.#error !== null) {
      throw new PluginError(this.#error.payload.tag, this.#error.payload.val);
    }
    return this.#plugin;
  }

  /** Transforms one chunk of staged rows into `{ rows, rejections }`. */
  push(rows) {
    const plugin = this.#opened();
    const out = { rows: [], rejections: [] };
    for (const staged of rows) {
      if (staged.op === 'delete') {
        continue;
      }
      try {
        out.rows.push(plugin.transform(new Input(staged.columns)));
      } catch (e) {
        if (!(e instanceof Reject)) {
          throw e;
        }
        out.rejections.push({ key: staged.key, reason: e.reason });
      }
    }
    return out;
  }

  /** Ends the job: nothing is held back. */
  finish() {
    this.#opened();
    return { rows: [], rejections: [] };
  }
}

/** The exported `transform` interface of `weir:transform@0.1.0`. */
export const transform = { describe, Session };
