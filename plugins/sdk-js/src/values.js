/**
 * The JavaScript types of the WIT values that JavaScript has no exact type for:
 * `PlainDate` (a `date`), `Timestamp` (a `timestamp` to the microsecond) and `Json`
 * (a `json` document as text); ASCII-only case mapping, which gives the same bytes
 * in every language whatever its Unicode tables; and `sha256Hex`, the SHA-256 every
 * SDK has (for masking).
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

// A character beyond ASCII: where `toUpperCase` and `toLowerCase` may change more
// than the ASCII letters.
const NON_ASCII = /[^\u0000-\u007f]/;

/** ASCII upper case: `a`–`z` become `A`–`Z`, every other character is kept (`straße` → `STRAßE`). */
export function asciiUpperCase(text) {
  // On ASCII text the built-in changes exactly `a`–`z` (and costs one call).
  return NON_ASCII.test(text) ? text.replace(/[a-z]+/g, (run) => run.toUpperCase()) : text.toUpperCase();
}

/** ASCII lower case: `A`–`Z` become `a`–`z`, every other character is kept. */
export function asciiLowerCase(text) {
  return NON_ASCII.test(text) ? text.replace(/[A-Z]+/g, (run) => run.toLowerCase()) : text.toLowerCase();
}

// SHA-256 (FIPS 180-4): the first 32 bits of the fractional parts of the cube roots
// of the first 64 primes, and of the square roots of the first 8.
const SHA256_K = Int32Array.from([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
].map((k) => k | 0));
const SHA256_H = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

// The UTF-8 encoder, made on first use (the module also loads where there is none).
let utf8Encoder;

/**
 * The SHA-256 of `data` as 64 lower-case hex digits: a string is hashed as its UTF-8
 * bytes (a leading U+FEFF included; a lone surrogate as U+FFFD, as `TextEncoder`
 * writes it), a Uint8Array as it is. The Rust SDK's `sha256_hex`, with the same
 * output (`sha256Hex(salt + email)` is its `sha256_hex(format!("{salt}{email}"))`).
 */
export function sha256Hex(data) {
  let bytes;
  if (typeof data === 'string') {
    utf8Encoder ??= new TextEncoder();
    bytes = utf8Encoder.encode(data);
  } else if (ArrayBuffer.isView(data) && Object.prototype.toString.call(data) === '[object Uint8Array]') {
    bytes = data;
  } else {
    throw new TypeError('sha256Hex takes a string (hashed as UTF-8) or a Uint8Array');
  }
  const n = bytes.length;
  // The message, a 1 bit, zeros, and its length in bits (64 bits, big-endian), in
  // blocks of 64 bytes.
  const padded = new Uint8Array((Math.floor((n + 8) / 64) + 1) * 64);
  padded.set(bytes);
  padded[n] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(n / 0x20000000));
  view.setUint32(padded.length - 4, (n % 0x20000000) * 8);
  const h = SHA256_H.map((x) => x | 0);
  const w = new Int32Array(64);
  for (let block = 0; block < padded.length; block += 64) {
    for (let i = 0; i < 16; i++) {
      w[i] = view.getInt32(block + i * 4);
    }
    for (let i = 16; i < 64; i++) {
      const a = w[i - 15];
      const b = w[i - 2];
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + s1 + ch + SHA256_K[i] + w[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (s0 + maj) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] = (h[0] + a) | 0;
    h[1] = (h[1] + b) | 0;
    h[2] = (h[2] + c) | 0;
    h[3] = (h[3] + d) | 0;
    h[4] = (h[4] + e) | 0;
    h[5] = (h[5] + f) | 0;
    h[6] = (h[6] + g) | 0;
    h[7] = (h[7] + hh) | 0;
  }
  return h.map((x) => (x >>> 0).toString(16).padStart(8, '0')).join('');
}
