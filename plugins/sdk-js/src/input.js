/**
 * Reading input: a staged row with typed column getters (`Input`), and the plugin
 * config (`Config`). Their rejection reasons and config errors are the Rust SDK's
 * fixed texts, so that plugins in every language give the same ones.
 */

import { Decimal, DecimalError } from './decimal.js';
import { PluginError, Reject } from './errors.js';
import { Json, PlainDate, Timestamp } from './values.js';

// How a getter names the case it expects: ``column `NAME` is not KIND``.
const KINDS = {
  boolean: 'a boolean',
  integer: 'an integer',
  float: 'a float',
  text: 'text',
  bytes: 'bytes',
  decimal: 'a decimal',
  date: 'a date',
  timestamp: 'a timestamp',
  json: 'json',
};

// What a decimal text is not, after ``column `NAME` `` or ``config `KEY` ``.
const DECIMAL_REASONS = {
  'not-finite': 'is not a finite decimal',
  'too-many-digits': 'has too many digits',
  invalid: 'is not valid decimal text',
  inexact: 'is not valid decimal text',
};

// Decimal text to a Decimal; a Reject (or for a config, a PluginError) naming the
// column (or the config key) and what the text is not.
function parseDecimal(text, name, isConfig) {
  try {
    return Decimal.parse(text);
  } catch (e) {
    if (!(e instanceof DecimalError)) {
      throw e;
    }
    const message = `${isConfig ? 'config' : 'column'} \`${name}\` ${DECIMAL_REASONS[e.kind]}`;
    throw isConfig ? new PluginError('invalid-config', message) : new Reject(message);
  }
}

// The value of the first column named `column` of a contract-0.1 row, `undefined` if
// it has none.
function namedValue(columns, column) {
  for (let i = 0; i < columns.length; i++) {
    if (columns[i].name === column) {
      return columns[i].value;
    }
  }
  return undefined;
}

// Why a getter of case `tag` refuses `value` (the column's WIT value, `undefined` or
// `null` if the row has none).
function mismatch(column, value, tag) {
  if (value === undefined || value === null) {
    return new Reject(`column \`${column}\` is missing`);
  }
  if (value.tag === 'null') {
    return new Reject(`column \`${column}\` is null`);
  }
  return new Reject(`column \`${column}\` is not ${KINDS[tag]}`);
}

// The name-to-position map of an InputSchema, for `Input` (not part of the API);
// set by `InputSchema`.
let schemaPositions;

/**
 * The input schema of a contract-0.2 session: the column names in the order of every
 * staged row's `values`, their declared types, and the positions of the key
 * columns. Made once per session from the WIT `input-schema` (`{ columns: [{ name,
 * typeName }], key }`); a column's position is looked up in a map, so that a getter
 * costs one lookup whatever the number of columns.
 */
export class InputSchema {
  #names;
  #typeNames;
  #key;
  #positions;

  /** @param {{ columns: Array<{ name: string, typeName?: string }>, key?: ArrayLike<number> }} schema the WIT `input-schema` */
  constructor(schema) {
    const columns = schema?.columns;
    if (columns === undefined || columns === null || typeof columns.length !== 'number') {
      throw new TypeError('an input schema is { columns: [{ name, typeName }], key: [positions] }');
    }
    const names = [];
    const typeNames = [];
    const positions = new Map();
    for (let i = 0; i < columns.length; i++) {
      const { name, typeName = '' } = columns[i];
      if (typeof name !== 'string' || typeof typeName !== 'string') {
        throw new TypeError('an input column is { name, typeName } of strings');
      }
      names.push(name);
      typeNames.push(typeName);
      // The first of two columns of one name wins (a host never sends two).
      if (!positions.has(name)) {
        positions.set(name, i);
      }
    }
    this.#names = Object.freeze(names);
    this.#typeNames = Object.freeze(typeNames);
    this.#key = Object.freeze(Array.from(schema.key ?? [], Number));
    this.#positions = positions;
    Object.freeze(this);
  }

  /** The column names, in row order (a frozen array). */
  get names() {
    return this.#names;
  }

  /** The declared PostgreSQL type of each column, in row order (`''` where the host does not know it). */
  get typeNames() {
    return this.#typeNames;
  }

  /** The positions of the table's key columns, in key order (a frozen array). */
  get keyPositions() {
    return this.#key;
  }

  /** The position of a column in a row's `values`, `undefined` if the schema has none. */
  position(column) {
    return this.#positions.get(column);
  }

  static {
    schemaPositions = (schema) => schema.#positions;
  }
}

/**
 * One staged row as the host pushed it: key, metadata and columns by name.
 *
 * On contract 0.2 a row carries its values by position in the session's
 * `InputSchema`; on 0.1 each value carries its column's name. The getters read both
 * alike (on 0.2 a column is found by one map lookup; a value the row does not have,
 * `none`, is a missing column, as a column a 0.1 row does not carry).
 *
 * Typed getters come in two forms: `int('id')` refuses `null`, `intOrNull('id')`
 * returns `null` for it. Both refuse a missing column and a value of another case
 * (no coercion, not even integer to decimal), by throwing a `Reject` with one of
 * the Rust SDK's fixed reasons:
 *
 * - ``column `NAME` is missing``
 * - ``column `NAME` is null``
 * - ``column `NAME` is not KIND`` (KIND is the expected case: `a boolean`, `an
 *   integer`, `a float`, `text`, `bytes`, `a decimal`, `a date`, `a timestamp`,
 *   `json`)
 * - ``column `NAME` is not a finite decimal`` (`NaN`, `Infinity`, `-Infinity`)
 * - ``column `NAME` is not valid decimal text`` / ``… has too many digits``
 *
 * Values come as: `int` a BigInt (an `s64`: every value exact), `float` a number,
 * `text` a string, `boolean` a boolean, `bytes` a Uint8Array, `decimal` a `Decimal`
 * (`decimalText` its text), `date` a `PlainDate`, `timestamp` a `Timestamp`, `json`
 * a `Json`. `value` and `get` give the WIT value itself (`{ tag, val }`), which an
 * output `Row` takes back unchanged.
 */
export class Input {
  #row;
  // Contract 0.2: the session schema's name-to-position map; 0.1: null.
  #positions;
  #schema;

  /**
   * @param {object} stagedRow the WIT `staged-row`: on contract 0.1 `{ key, op,
   *   commitPosition, commitTime, columns: [{ name, value }] }`, on 0.2 `{ key,
   *   values: [value or undefined], op, commitPosition, commitTime }`
   * @param {InputSchema} [schema] the session's input schema: given, the row is a
   *   0.2 row whose `values` are in its order
   */
  constructor(stagedRow, schema) {
    this.#row = stagedRow;
    if (schema === undefined || schema === null) {
      this.#positions = null;
      this.#schema = null;
    } else {
      const s = schema instanceof InputSchema ? schema : new InputSchema(schema);
      this.#positions = schemaPositions(s);
      this.#schema = s;
    }
  }

  /** The WIT `staged-row` itself. */
  get staged() {
    return this.#row;
  }

  /** The values of the table's key columns, in key order (WIT values). */
  key() {
    return this.#row.key;
  }

  /** What happened to the row last: `insert`, `update`, `delete` or `read`. */
  op() {
    return this.#row.op;
  }

  /** The source position of the transaction that wrote this image (a BigInt, `u64`). */
  commitPosition() {
    return this.#row.commitPosition;
  }

  /** The commit time of that transaction as a `Timestamp` (UTC), or `null` if the source gave none. */
  commitTime() {
    const micros = this.#row.commitTime;
    return micros === undefined || micros === null ? null : new Timestamp(micros);
  }

  /**
   * The row's columns and their values, in the source's order: `[name, value]`
   * pairs (a column the row has no value for is left out).
   */
  columns() {
    if (this.#schema !== null) {
      const { names } = this.#schema;
      const values = this.#row.values;
      const pairs = [];
      for (let i = 0; i < names.length; i++) {
        if (values[i] !== undefined && values[i] !== null) pairs.push([names[i], values[i]]);
      }
      return pairs;
    }
    return this.#row.columns.map(({ name, value }) => [name, value]);
  }

  /** The WIT value of a column (`{ tag, val }`), `undefined` if the row has no such column. */
  get(column) {
    const positions = this.#positions;
    let value;
    if (positions !== null) {
      const i = positions.get(column);
      value = i === undefined ? undefined : this.#row.values[i];
    } else {
      value = namedValue(this.#row.columns, column);
    }
    // `none` (the row has no such column) is `undefined` from the bindings.
    return value ?? undefined;
  }

  /** The WIT value of a column; a missing column is a rejection. */
  value(column) {
    const value = this.get(column);
    if (value === undefined) {
      throw mismatch(column, value, 'null');
    }
    return value;
  }

  // The payload of a column of case `tag`; a rejection otherwise (null included).
  // The lookup is `get`'s, inlined: this runs for every column a plugin reads.
  #required(column, tag) {
    const positions = this.#positions;
    let value;
    if (positions !== null) {
      const i = positions.get(column);
      value = i === undefined ? undefined : this.#row.values[i];
    } else {
      value = namedValue(this.#row.columns, column);
    }
    if (value?.tag === tag) {
      return value.val;
    }
    throw mismatch(column, value, tag);
  }

  // The payload of a column of case `tag`, `null` for null; a rejection otherwise.
  #orNull(column, tag) {
    const positions = this.#positions;
    let value;
    if (positions !== null) {
      const i = positions.get(column);
      value = i === undefined ? undefined : this.#row.values[i];
    } else {
      value = namedValue(this.#row.columns, column);
    }
    const found = value?.tag;
    if (found === tag) {
      return value.val;
    }
    if (found === 'null') {
      return null;
    }
    throw mismatch(column, value, tag);
  }

  /** A `boolean` column. */
  boolean(column) {
    return this.#required(column, 'boolean');
  }

  /** A `boolean` column; `null` for null. */
  booleanOrNull(column) {
    return this.#orNull(column, 'boolean');
  }

  /** An `integer` column, as a BigInt (exact for every `s64`). */
  int(column) {
    return this.#required(column, 'integer');
  }

  /** An `integer` column, as a BigInt; `null` for null. */
  intOrNull(column) {
    return this.#orNull(column, 'integer');
  }

  /** A `float` column, as a number. */
  float(column) {
    return this.#required(column, 'float');
  }

  /** A `float` column, as a number; `null` for null. */
  floatOrNull(column) {
    return this.#orNull(column, 'float');
  }

  /** A `text` column. */
  text(column) {
    return this.#required(column, 'text');
  }

  /** A `text` column; `null` for null. */
  textOrNull(column) {
    return this.#orNull(column, 'text');
  }

  /** A `bytes` column, as a Uint8Array. */
  bytes(column) {
    return this.#required(column, 'bytes');
  }

  /** A `bytes` column, as a Uint8Array; `null` for null. */
  bytesOrNull(column) {
    return this.#orNull(column, 'bytes');
  }

  /** A `decimal` column as its exact text (`NaN` and the infinities included). */
  decimalText(column) {
    return this.#required(column, 'decimal');
  }

  /** A `decimal` column as its exact text; `null` for null. */
  decimalTextOrNull(column) {
    return this.#orNull(column, 'decimal');
  }

  /** A `decimal` column parsed into an exact, finite `Decimal`. */
  decimal(column) {
    return parseDecimal(this.#required(column, 'decimal'), column, false);
  }

  /** A `decimal` column parsed into an exact, finite `Decimal`; `null` for null. */
  decimalOrNull(column) {
    const text = this.#orNull(column, 'decimal');
    return text === null ? null : parseDecimal(text, column, false);
  }

  /** A `date` column, as a `PlainDate` (`PlainDate.INFINITY` and `NEGATIVE_INFINITY` included). */
  date(column) {
    return new PlainDate(this.#required(column, 'date'));
  }

  /** A `date` column, as a `PlainDate`; `null` for null. */
  dateOrNull(column) {
    const days = this.#orNull(column, 'date');
    return days === null ? null : new PlainDate(days);
  }

  /** A `timestamp` column, as a `Timestamp` (microseconds; the infinities included). */
  timestamp(column) {
    return new Timestamp(this.#required(column, 'timestamp'));
  }

  /** A `timestamp` column, as a `Timestamp`; `null` for null. */
  timestampOrNull(column) {
    const micros = this.#orNull(column, 'timestamp');
    return micros === null ? null : new Timestamp(micros);
  }

  /** A `json` column, as a `Json` (its text; `.parse()` reads it). */
  json(column) {
    return new Json(this.#required(column, 'json'));
  }

  /** A `json` column, as a `Json`; `null` for null. */
  jsonOrNull(column) {
    const text = this.#orNull(column, 'json');
    return text === null ? null : new Json(text);
  }
}

// Orders strings by Unicode code point (as Rust orders UTF-8 strings), not by UTF-16
// code unit: a surrogate (a character past U+FFFF) sorts after U+E000–U+FFFF.
function compareCodePoints(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800) x = x < 0xe000 ? x + 0x2000 : x - 0x800;
      if (y >= 0xd800) y = y < 0xe000 ? y + 0x2000 : y - 0x800;
      return x - y;
    }
  }
  return a.length - b.length;
}

/**
 * The plugin config: the table's plugin settings as key/value text, sorted by key
 * (as the host gives them).
 *
 * Lookup errors are `PluginError`s of tag `invalid-config` with the Rust SDK's fixed
 * texts, naming the key, never the value (a value may be a secret):
 *
 * - ``missing config key `KEY` ``
 * - ``config `KEY` is not valid decimal text`` / ``… is not a finite decimal`` /
 *   ``… has too many digits``
 */
export class Config {
  #entries;

  /**
   * @param {Iterable<[string, string]> | Record<string, string>} entries key/value
   *   pairs (the host's `list<tuple<string, string>>`), or an object of them; sorted
   *   here, so that tests may give any order
   */
  constructor(entries = []) {
    const pairs = Symbol.iterator in Object(entries) ? [...entries] : Object.entries(entries);
    for (const pair of pairs) {
      if (!Array.isArray(pair) || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') {
        throw new TypeError('config entries are [key, value] pairs of strings');
      }
    }
    this.#entries = pairs
      .map(([k, v]) => [k, v])
      .sort(([ka, va], [kb, vb]) => compareCodePoints(ka, kb) || compareCodePoints(va, vb));
  }

  /** All entries, sorted by key: a new array of `[key, value]` pairs. */
  entries() {
    return this.#entries.map(([k, v]) => [k, v]);
  }

  /** Whether `key` is set. */
  has(key) {
    return this.get(key) !== undefined;
  }

  /** The value of `key`, `undefined` if it is not set. */
  get(key) {
    const entry = this.#entries.find(([k]) => k === key);
    return entry === undefined ? undefined : entry[1];
  }

  /** The value of `key`; a missing key is an `invalid-config` error. */
  require(key) {
    const value = this.get(key);
    if (value === undefined) {
      throw new PluginError('invalid-config', `missing config key \`${key}\``);
    }
    return value;
  }

  /** The value of `key` as an exact, finite `Decimal`; an `invalid-config` error otherwise. */
  decimal(key) {
    return parseDecimal(this.require(key), key, true);
  }
}
