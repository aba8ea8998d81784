/**
 * The JavaScript types of the WIT values that JavaScript has no exact type for:
 * `PlainDate` (a `date`), `Timestamp` (a `timestamp` to the microsecond) and `Json`
 * (a `json` document as text); and ASCII-only case mapping, which gives the same
 * bytes in every language whatever its Unicode tables.
 *
 * Why not `Date`: a JavaScript `Date` holds milliseconds within ±100,000,000 days of
 * 1970, while a `date` is any `s32` count of days (PostgreSQL's go to the year
 * 5874897) with two of them meaning ±infinity, and a `timestamp` counts
 * microseconds. Both types convert to and from `Date` where that is exact.
 */

const MS_PER_DAY = 86400000;
const MICROS_PER_DAY = 86400000000n;
/** The largest `Date` time value, in milliseconds either side of 1970. */
const MAX_DATE_MS = 8.64e15;

const DATE_INFINITY = 2147483647;
const DATE_NEGATIVE_INFINITY = -2147483648;
const TIMESTAMP_INFINITY = 2n ** 63n - 1n;
const TIMESTAMP_NEGATIVE_INFINITY = -(2n ** 63n);

// Days since 1970-01-01 ↔ proleptic Gregorian year, month, day (H. Hinnant's
// algorithms), exact for every s32 day count.
function civilFromDays(days) {
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const day = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const month = mp < 10 ? mp + 3 : mp - 9;
  return [yoe + era * 400 + (month <= 2 ? 1 : 0), month, day];
}

function daysFromCivil(year, month, day) {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

function daysInMonth(year, month) {
  if (month === 2) {
    const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
    return leap ? 29 : 28;
  }
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

const pad = (n, width) => String(n).padStart(width, '0');

// PostgreSQL's date text: `2026-03-01`, `10000-01-01`, `0044-03-15 BC` (year 0 is
// 1 BC).
function dateText(year, month, day) {
  const bc = year <= 0;
  const shown = pad(bc ? 1 - year : year, 4);
  return `${shown}-${pad(month, 2)}-${pad(day, 2)}${bc ? ' BC' : ''}`;
}

/**
 * A calendar date without a time or zone: the WIT `date`, a whole number of days
 * since 1970-01-01 (negative before it), proleptic Gregorian. `PlainDate.INFINITY`
 * and `PlainDate.NEGATIVE_INFINITY` are PostgreSQL's `infinity` and `-infinity`
 * (days 2147483647 and -2147483648): they are kept as they are, have no year, month
 * or day, and print as `infinity` / `-infinity`. Immutable.
 */
export class PlainDate {
  #days;

  /** @param {number} days days since 1970-01-01, an `s32` */
  constructor(days) {
    if (!Number.isInteger(days) || days < DATE_NEGATIVE_INFINITY || days > DATE_INFINITY) {
      throw new RangeError('a date is a whole number of days within 32 bits');
    }
    this.#days = days;
  }

  /** The date `days` after 1970-01-01 (an `s32`; the extremes are the infinities). */
  static fromDays(days) {
    return new PlainDate(days);
  }

  /** The date of a year, month (1–12) and day of the month; a `RangeError` if invalid. */
  static of(year, month, day) {
    if (!Number.isInteger(year) || !Number.isInteger(month) || !Number.isInteger(day)
      || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) {
      throw new RangeError(`${year}-${month}-${day} is not a date`);
    }
    const days = daysFromCivil(year, month, day);
    if (days <= DATE_NEGATIVE_INFINITY || days >= DATE_INFINITY) {
      throw new RangeError(`${year}-${month}-${day} is out of the range of a date`);
    }
    return new PlainDate(days);
  }

  /**
   * The date of a `Date` that is exactly midnight UTC (as `toDate` gives); a
   * `RangeError` for any other time of day (take `Timestamp.fromDate(d).date` to
   * truncate).
   */
  static fromDate(date) {
    const ms = date instanceof Date ? date.getTime() : NaN;
    if (!Number.isFinite(ms) || ms % MS_PER_DAY !== 0) {
      throw new RangeError('PlainDate.fromDate takes a valid Date at midnight UTC');
    }
    return new PlainDate(ms / MS_PER_DAY);
  }

  /** Negative, zero or positive as `a` is before, the same as or after `b`. */
  static compare(a, b) {
    return a.#days - b.#days;
  }

  /** Days since 1970-01-01 (the WIT value). */
  get days() {
    return this.#days;
  }

  /** Whether this is a calendar date (neither `infinity` nor `-infinity`). */
  isFinite() {
    return this.#days !== DATE_INFINITY && this.#days !== DATE_NEGATIVE_INFINITY;
  }

  /** The year (astronomical: 0 is 1 BC); a `RangeError` for an infinity. */
  get year() {
    return this.#civil()[0];
  }

  /** The month, 1–12; a `RangeError` for an infinity. */
  get month() {
    return this.#civil()[1];
  }

  /** The day of the month, 1–31; a `RangeError` for an infinity. */
  get day() {
    return this.#civil()[2];
  }

  /** The date `n` days later (earlier for negative `n`); a `RangeError` past the range. */
  addDays(n) {
    if (!this.isFinite()) {
      throw new RangeError('an infinite date has no neighbours');
    }
    const days = this.#days + n;
    if (!Number.isInteger(days) || days <= DATE_NEGATIVE_INFINITY || days >= DATE_INFINITY) {
      throw new RangeError('the date is out of the range of a date');
    }
    return new PlainDate(days);
  }

  /** Midnight UTC of this date as a `Date`; a `RangeError` if `Date` cannot hold it. */
  toDate() {
    const ms = this.#days * MS_PER_DAY;
    if (!this.isFinite() || Math.abs(ms) > MAX_DATE_MS) {
      throw new RangeError(`${this} cannot be a Date`);
    }
    return new Date(ms);
  }

  /** Whether both are the same date. */
  equals(other) {
    return other instanceof PlainDate && other.#days === this.#days;
  }

  /** PostgreSQL's text: `2026-03-01`, `0044-03-15 BC`, `infinity`, `-infinity`. */
  toString() {
    if (this.#days === DATE_INFINITY) return 'infinity';
    if (this.#days === DATE_NEGATIVE_INFINITY) return '-infinity';
    return dateText(...civilFromDays(this.#days));
  }

  /** The text (see `toString`). */
  toJSON() {
    return this.toString();
  }

  #civil() {
    if (!this.isFinite()) {
      throw new RangeError(`${this} has no year, month or day`);
    }
    return civilFromDays(this.#days);
  }
}

PlainDate.INFINITY = new PlainDate(DATE_INFINITY);
PlainDate.NEGATIVE_INFINITY = new PlainDate(DATE_NEGATIVE_INFINITY);

/** `a / b` rounded towards negative infinity, for BigInts. */
function floorDiv(a, b) {
  const q = a / b;
  return a % b !== 0n && (a < 0n) !== (b < 0n) ? q - 1n : q;
}

/**
 * An instant to the microsecond: the WIT `timestamp`, a BigInt count of
 * microseconds since 1970-01-01T00:00:00 (`s64`). For a `timestamptz` column the
 * instant is UTC; for `timestamp` it is a wall-clock reading as if it were UTC.
 * `Timestamp.INFINITY` and `Timestamp.NEGATIVE_INFINITY` are PostgreSQL's
 * `infinity` and `-infinity` (2^63 - 1 and -2^63 microseconds). Immutable.
 */
export class Timestamp {
  #micros;

  /** @param {bigint} micros microseconds since 1970-01-01T00:00:00, an `s64` */
  constructor(micros) {
    if (typeof micros !== 'bigint' || micros < TIMESTAMP_NEGATIVE_INFINITY || micros > TIMESTAMP_INFINITY) {
      throw new RangeError('a timestamp is a BigInt of microseconds within 64 bits');
    }
    this.#micros = micros;
  }

  /** The instant `micros` microseconds after 1970-01-01T00:00:00 (an `s64` BigInt). */
  static fromMicros(micros) {
    return new Timestamp(micros);
  }

  /** The instant of a `Date` (exact: a `Date` holds whole milliseconds). */
  static fromDate(date) {
    const ms = date instanceof Date ? date.getTime() : NaN;
    if (!Number.isFinite(ms)) {
      throw new RangeError('Timestamp.fromDate takes a valid Date');
    }
    return new Timestamp(BigInt(ms) * 1000n);
  }

  /** Negative, zero or positive as `a` is before, the same as or after `b`. */
  static compare(a, b) {
    return a.#micros < b.#micros ? -1 : a.#micros > b.#micros ? 1 : 0;
  }

  /** Microseconds since 1970-01-01T00:00:00 (the WIT value), a BigInt. */
  get micros() {
    return this.#micros;
  }

  /** Whether this is an instant (neither `infinity` nor `-infinity`). */
  isFinite() {
    return this.#micros !== TIMESTAMP_INFINITY && this.#micros !== TIMESTAMP_NEGATIVE_INFINITY;
  }

  /** The calendar date of the instant (in UTC); a `RangeError` for an infinity. */
  get date() {
    if (!this.isFinite()) {
      throw new RangeError(`${this} has no date`);
    }
    return new PlainDate(Number(floorDiv(this.#micros, MICROS_PER_DAY)));
  }

  /**
   * The instant as a `Date`, whose precision is the millisecond: the microseconds
   * are truncated towards the past. A `RangeError` if `Date` cannot hold it.
   */
  toDate() {
    const ms = Number(floorDiv(this.#micros, 1000n));
    if (!this.isFinite() || Math.abs(ms) > MAX_DATE_MS) {
      throw new RangeError(`${this} cannot be a Date`);
    }
    return new Date(ms);
  }

  /** Whether both are the same instant. */
  equals(other) {
    return other instanceof Timestamp && other.#micros === this.#micros;
  }

  /**
   * PostgreSQL's `timestamp` text, without a zone: `2026-03-01 12:30:00`,
   * `2026-03-01 12:30:00.25` (fraction without trailing zeros), `infinity`.
   */
  toString() {
    if (this.#micros === TIMESTAMP_INFINITY) return 'infinity';
    if (this.#micros === TIMESTAMP_NEGATIVE_INFINITY) return '-infinity';
    const days = floorDiv(this.#micros, MICROS_PER_DAY);
    const inDay = Number(this.#micros - days * MICROS_PER_DAY);
    const [year, month, day] = civilFromDays(Number(days));
    const seconds = Math.floor(inDay / 1e6);
    const fraction = inDay % 1e6;
    const time = `${pad(Math.floor(seconds / 3600), 2)}:${pad(Math.floor(seconds / 60) % 60, 2)}:${pad(seconds % 60, 2)}`;
    const frac = fraction === 0 ? '' : `.${pad(fraction, 6).replace(/0+$/, '')}`;
    const text = dateText(year, month, day);
    return text.endsWith(' BC')
      ? `${text.slice(0, -3)} ${time}${frac} BC`
      : `${text} ${time}${frac}`;
  }

  /** The text (see `toString`). */
  toJSON() {
    return this.toString();
  }
}

Timestamp.INFINITY = new Timestamp(TIMESTAMP_INFINITY);
Timestamp.NEGATIVE_INFINITY = new Timestamp(TIMESTAMP_NEGATIVE_INFINITY);

/**
 * A JSON document as its text: the WIT `json` value (for `json` and `jsonb`
 * columns). The text is kept exactly as given; `parse()` reads it (numbers become
 * JavaScript numbers, so integers beyond 2^53 are not exact: read the text).
 */
export class Json {
  #text;

  /** @param {string} text the JSON document */
  constructor(text) {
    if (typeof text !== 'string') {
      throw new TypeError('a Json holds the document as text (Json.stringify makes one from a value)');
    }
    this.#text = text;
  }

  /** The document of a JavaScript value, by `JSON.stringify`. */
  static stringify(value) {
    const text = JSON.stringify(value);
    if (text === undefined) {
      throw new TypeError('the value has no JSON form');
    }
    return new Json(text);
  }

  /** The document's text. */
  get text() {
    return this.#text;
  }

  /** The document as a JavaScript value (`JSON.parse`). */
  parse(reviver) {
    return JSON.parse(this.#text, reviver);
  }

  /** The document's text. */
  toString() {
    return this.#text;
  }
}

/** A `json` value for an output row: `json('{"a": 1}')`. */
export function json(text) {
  return new Json(text);
}

/** ASCII upper case: `a`–`z` become `A`–`Z`, every other character is kept (`straße` → `STRAßE`). */
export function asciiUpperCase(text) {
  return text.replace(/[a-z]+/g, (run) => run.toUpperCase());
}

/** ASCII lower case: `A`–`Z` become `a`–`z`, every other character is kept. */
export function asciiLowerCase(text) {
  return text.replace(/[A-Z]+/g, (run) => run.toLowerCase());
}
