/**
 * Building output: a `Row` by column name, converted to WIT values by the declared
 * type of each output column.
 */

import { Decimal } from './decimal.js';
import { typeName } from './describe.js';
import { PluginError } from './errors.js';
import { Json, PlainDate, Timestamp } from './values.js';

// The cells of a Row, for `rowValues` (not part of the SDK's API); set by `Row`.
let rowCells;

/**
 * An output row built by column name: `new Row().set('id', id).set('name', name)`,
 * or `new Row({ id, name })`. The SDK puts the values in the order `describe`
 * declared the columns and converts each by its column's declared type:
 *
 * | column type | takes |
 * |---|---|
 * | `smallint`, `integer`, `bigint` | a BigInt, or a number that is a safe integer |
 * | `real`, `double precision` | a number |
 * | `numeric(p, s)`, `numeric` | a `Decimal` (or a BigInt / safe integer): for `numeric(p, s)` rescaled to `s` by adding or dropping zeros |
 * | `text`, `varchar`, `uuid` | a string |
 * | `boolean` | a boolean |
 * | `date` | a `PlainDate`, or a `Date` at midnight UTC |
 * | `timestamp`, `timestamptz` | a `Timestamp`, or a `Date` |
 * | `json`, `jsonb` | a `Json` (`json(text)`) |
 * | `bytea` | a Uint8Array |
 *
 * Every column takes `null` (SQL NULL), and a WIT value of the case its type takes
 * (as `Input.value` gives it: copying a value through needs no conversion).
 * Anything else fails the call with a WIT `other` error naming the column: a
 * declared column that is not set, a column that is not declared, `undefined`, a
 * value of another type (nothing is coerced: no number to decimal, no string to
 * anything), an integer out of 64 bits, and a decimal that does not fit its
 * `numeric(p, s)` (a non-zero digit past `s`, or more than `p - s` integer digits)
 * are plugin bugs, never rounded or dropped silently.
 */
export class Row {
  #cells = new Map();

  /** @param {Record<string, unknown> | Map<string, unknown>} [values] column values by name */
  constructor(values) {
    if (values instanceof Map) {
      for (const [column, value] of values) {
        this.set(column, value);
      }
    } else if (values !== undefined) {
      // The own enumerable columns, in the order `for … in` gives them.
      const columns = Object.keys(values);
      for (let i = 0; i < columns.length; i++) {
        this.#cells.set(columns[i], values[columns[i]]);
      }
    }
  }

  /** Sets a column (setting it again keeps the last value); returns the row. */
  set(column, value) {
    if (typeof column !== 'string') {
      throw new TypeError('a column name is a string');
    }
    this.#cells.set(column, value);
    return this;
  }

  /** The value set for a column, `undefined` if it is not set. */
  get(column) {
    return this.#cells.get(column);
  }

  /** Whether a column is set. */
  has(column) {
    return this.#cells.has(column);
  }

  static {
    rowCells = (row) => row.#cells;
  }
}

const S64_MIN = -(2n ** 63n);
const S64_MAX = 2n ** 63n - 1n;
const NULL = Object.freeze({ tag: 'null' });

// What a value is, for messages: `a string`, `a Decimal`, `a WIT text value`.
function describeValue(value) {
  if (value === null) return 'null';
  const type = typeof value;
  if (type === 'bigint') return 'a BigInt';
  if (type === 'object') {
    if (isWitValue(value)) return `a WIT ${value.tag} value`;
    if (Array.isArray(value)) return 'an array';
    const name = Object.getPrototypeOf(value)?.constructor?.name;
    if (name && name !== 'Object') return /^[AEIO]/.test(name) ? `an ${name}` : `a ${name}`;
    return 'an object';
  }
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

// A WIT value as the bindings give one: an object with a string `tag`. (Not by its
// prototype: ComponentizeJS's bindings make their objects in a realm of their own,
// whose `Object.prototype` is not the plugin's.)
function isWitValue(value) {
  return typeof value.tag === 'string' && !Array.isArray(value);
}

// A Uint8Array of any realm (the bindings give theirs).
function isBytes(value) {
  return ArrayBuffer.isView(value) && Object.prototype.toString.call(value) === '[object Uint8Array]';
}

const isS64 = (v) => typeof v === 'bigint' && v >= S64_MIN && v <= S64_MAX;

// Whether a WIT value of case `tag` has a payload the bindings can lower.
const WIT_PAYLOAD_CHECKS = {
  boolean: (v) => typeof v === 'boolean',
  integer: isS64,
  float: (v) => typeof v === 'number',
  text: (v) => typeof v === 'string',
  bytes: isBytes,
  decimal: (v) => typeof v === 'string',
  date: (v) => Number.isInteger(v) && v >= -2147483648 && v <= 2147483647,
  timestamp: isS64,
  json: (v) => typeof v === 'string',
};

// The WIT case each column type takes.
const CASE_OF_TYPE = {
  smallint: 'integer',
  integer: 'integer',
  bigint: 'integer',
  real: 'float',
  'double-precision': 'float',
  numeric: 'decimal',
  text: 'text',
  varchar: 'text',
  uuid: 'text',
  boolean: 'boolean',
  date: 'date',
  timestamp: 'timestamp',
  timestamptz: 'timestamp',
  json: 'json',
  jsonb: 'json',
  bytea: 'bytes',
};

// What a column of each WIT case takes, for messages.
const TAKES = {
  integer: 'a BigInt or a safe integer',
  float: 'a number',
  decimal: 'a Decimal, a BigInt or a safe integer',
  text: 'a string',
  boolean: 'a boolean',
  date: 'a PlainDate or a Date at midnight UTC',
  timestamp: 'a Timestamp or a Date',
  json: 'a Json (json(text))',
  bytes: 'a Uint8Array',
};

/** Half of a UTF-16 surrogate pair, alone. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The converter of one declared column: a function from a JavaScript value to the
 * WIT value, throwing a `PluginError` (`other`) naming the column.
 */
function converter(column) {
  const { name, type } = column;
  const witCase = CASE_OF_TYPE[type.tag];
  const label = `output column \`${name}\` (${typeName(type)})`;
  const fail = (what) => new PluginError('other', `${label} ${what}`);
  const natural = naturalConverter(witCase, type, fail);
  const checkPayload = WIT_PAYLOAD_CHECKS[witCase];
  // Text the component would encode with U+FFFD in place of half a character: a
  // silent change of the value, refused instead.
  const wellFormed = (wit) => {
    if ((wit.tag === 'text' || wit.tag === 'json') && LONE_SURROGATE.test(wit.val)) {
      throw fail('takes well-formed text, not one holding half of a character (a lone UTF-16 surrogate, as slicing a string between the halves of an emoji leaves)');
    }
    return wit;
  };
  return (value) => {
    if (value === null) {
      return NULL;
    }
    const converted = natural(value);
    if (converted !== undefined) {
      return wellFormed(converted);
    }
    if (value === undefined) {
      throw fail('is undefined (null is SQL NULL)');
    }
    if (typeof value === 'object' && isWitValue(value)) {
      if (value.tag === 'null') {
        return NULL;
      }
      if (value.tag !== witCase || !checkPayload(value.val)) {
        throw fail(`takes ${TAKES[witCase]} or a WIT ${witCase} value, not ${describeValue(value)}${value.tag === witCase ? ' with an invalid payload' : ''}`);
      }
      return wellFormed(value);
    }
    throw fail(`takes ${TAKES[witCase]}, not ${describeValue(value)}`);
  };
}

// The conversion of a JavaScript value (not null) for a column of WIT case
// `witCase`: the WIT value, `undefined` for a value of another type (a WIT value
// included), or a thrown error for a value of the right type that does not fit.
function naturalConverter(witCase, type, fail) {
  switch (witCase) {
    case 'integer':
      return (v) => {
        if (typeof v === 'bigint') {
          if (!isS64(v)) throw fail('takes a 64-bit integer: the BigInt is out of range');
          return { tag: 'integer', val: v };
        }
        if (typeof v === 'number') {
          if (!Number.isSafeInteger(v)) throw fail('takes an integer: the number is not a safe integer (use a BigInt)');
          return { tag: 'integer', val: BigInt(v) };
        }
        return undefined;
      };
    case 'float':
      return (v) => (typeof v === 'number' ? { tag: 'float', val: v } : undefined);
    case 'decimal': {
      if (type.val === undefined) {
        return (v) => {
          if (v instanceof Decimal) return { tag: 'decimal', val: v.toString() };
          if (typeof v === 'bigint') return { tag: 'decimal', val: v.toString() };
          if (typeof v === 'number') {
            if (!Number.isSafeInteger(v)) throw fail('takes a number only if it is a safe integer (use a Decimal)');
            return { tag: 'decimal', val: String(v) };
          }
          return undefined;
        };
      }
      const { precision, scale } = type.val;
      // Below 10^(p - s + s) at scale s: at most p - s integer digits.
      const limit = 10n ** BigInt(Math.max(precision - scale, 0) + scale);
      return (v) => {
        let d;
        if (v instanceof Decimal) {
          d = v;
        } else if (typeof v === 'bigint' || typeof v === 'number') {
          if (typeof v === 'number' && !Number.isSafeInteger(v)) {
            throw fail('takes a number only if it is a safe integer (use a Decimal)');
          }
          d = Decimal.from(v);
        } else {
          return undefined;
        }
        const u = d.unscaled;
        if (d.scale !== scale || (u < 0n ? -u : u) >= limit) {
          if (!d.fitsScale(scale)) {
            throw fail(`takes at most ${scale} digits after the point: a non-zero digit would be dropped (round the value first)`);
          }
          if (!d.fits(precision, scale)) {
            throw fail(`takes at most ${precision - scale} digits before the point`);
          }
          d = d.rescaleExact(scale);
        }
        return { tag: 'decimal', val: d.toString() };
      };
    }
    case 'text':
      return (v) => (typeof v === 'string' ? { tag: 'text', val: v } : undefined);
    case 'boolean':
      return (v) => (typeof v === 'boolean' ? { tag: 'boolean', val: v } : undefined);
    case 'date':
      return (v) => {
        if (v instanceof PlainDate) return { tag: 'date', val: v.days };
        if (v instanceof Date) {
          let date;
          try {
            date = PlainDate.fromDate(v);
          } catch {
            throw fail('takes a Date only at midnight UTC (PlainDate.fromDate)');
          }
          return { tag: 'date', val: date.days };
        }
        return undefined;
      };
    case 'timestamp':
      return (v) => {
        if (v instanceof Timestamp) return { tag: 'timestamp', val: v.micros };
        if (v instanceof Date) {
          if (!Number.isFinite(v.getTime())) throw fail('takes a valid Date, not an Invalid Date');
          return { tag: 'timestamp', val: Timestamp.fromDate(v).micros };
        }
        return undefined;
      };
    case 'json':
      return (v) => (v instanceof Json ? { tag: 'json', val: v.text } : undefined);
    case 'bytes':
      return (v) => (isBytes(v) ? { tag: 'bytes', val: v } : undefined);
    default:
      throw new TypeError(`no conversion for ${witCase}`);
  }
}

/**
 * The output schema of a description: per declared column (`{ name, type }`), its
 * name and converter. Made once per plugin.
 */
export function outputSchema(columns) {
  return columns.map((column) => ({ name: column.name, convert: converter(column) }));
}

/**
 * A `Row`'s WIT values in the order of `schema` (from `outputSchema`); a
 * `PluginError` (`other`) for a column not declared, a declared column not set, or a
 * value its column does not take. The texts of the first two are the Rust SDK's.
 */
export function rowValues(row, schema) {
  const cells = rowCells(row);
  const n = schema.length;
  // Every declared column set, and no other: then the values, converted in order.
  let complete = cells.size === n;
  const values = new Array(n);
  for (let i = 0; complete && i < n; i++) {
    const name = schema[i].name;
    const value = cells.get(name);
    complete = value !== undefined || cells.has(name);
    values[i] = value;
  }
  if (!complete) {
    const declared = new Set(schema.map(({ name }) => name));
    for (const column of cells.keys()) {
      if (!declared.has(column)) {
        throw new PluginError('other', `output row sets column \`${column}\`, which describe does not declare`);
      }
    }
    const missing = schema.find(({ name }) => !cells.has(name));
    throw new PluginError('other', `output row does not set declared column \`${missing.name}\``);
  }
  for (let i = 0; i < n; i++) {
    values[i] = schema[i].convert(values[i]);
  }
  return values;
}
