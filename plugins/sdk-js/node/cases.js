/**
 * `@weir/plugin/cases`: the JSON-lines plugin test cases, run natively in Node (the
 * Rust SDK's `weir_plugin::cases`, whose module documentation describes the format;
 * `plugins/examples/orders-cases.jsonl` is an example). Node built-ins only.
 *
 *     import { runCases } from '@weir/plugin/cases';
 *     const failures = runCases(myPlugin, new URL('./cases.jsonl', import.meta.url));
 *
 * Each case's session is run as the host runs it, through the same `{ describe,
 * Session }` interface the component exports (`exportPlugin`): constructed with the
 * partition and config, one `push` per chunk, then `finish`; the rows and
 * rejections of every call concatenated in order, rows as objects by declared column
 * name. The output must equal the case's `expect` exactly (integers compared as
 * their digits, whatever their size: an integer or timestamp beyond ±2^53 is written
 * as a string of digits, in the input as in `expect`, since `JSON.parse` would round
 * a JSON number). A WIT `error` is a thrown value with an own
 * `payload` (a `PluginError`, or jco's `ComponentError` when the interface is a
 * component transpiled by jco, which these functions run just as well).
 */

import { readFileSync } from 'node:fs';

import { exportPlugin } from '../src/plugin.js';

/**
 * The `{ describe, Session }` interface of `plugin`: a plugin made by
 * `definePlugin` (or the object it takes), or such an interface already.
 */
export function interfaceOf(plugin) {
  if (plugin !== null && typeof plugin === 'object' && typeof plugin.Session === 'function'
    && typeof plugin.describe === 'function') {
    return plugin;
  }
  return exportPlugin(plugin);
}

/**
 * Runs every case of a JSON-lines file (a path or a file URL) against `plugin` (see
 * `interfaceOf`); returns one message per failed case (empty: all passed; a file
 * without cases is a failure).
 */
export function runCases(plugin, file) {
  const transform = interfaceOf(plugin);
  const cases = loadCases(file);
  const failures = cases.map((c) => checkCase(transform, c)).filter((f) => f !== null);
  return cases.length === 0 ? [`no cases in ${file}`] : failures;
}

/** A WIT value from its JSON form: `null`, or an object with exactly one case. */
export function valueFromJson(v) {
  if (v === null) {
    return { tag: 'null' };
  }
  const entries = typeof v === 'object' && !Array.isArray(v) ? Object.entries(v) : [];
  if (entries.length !== 1) {
    throw new Error(`value ${JSON.stringify(v)} does not have exactly one case`);
  }
  const [[tag, inner]] = entries;
  const bad = () => new Error(`value ${JSON.stringify(v)} is not a valid ${tag}`);
  const int = (x) => {
    if (Number.isSafeInteger(x)) return BigInt(x);
    if (typeof x === 'string' && /^-?[0-9]+$/.test(x)) return BigInt(x);
    throw bad();
  };
  const text = (x) => {
    if (typeof x !== 'string') throw bad();
    return x;
  };
  switch (tag) {
    case 'boolean':
      if (typeof inner !== 'boolean') throw bad();
      return { tag, val: inner };
    case 'integer':
    case 'timestamp': {
      const n = int(inner);
      if (n < -(2n ** 63n) || n >= 2n ** 63n) throw bad();
      return { tag, val: n };
    }
    case 'date': {
      const days = int(inner);
      if (days < -(2n ** 31n) || days >= 2n ** 31n) throw bad();
      return { tag, val: Number(days) };
    }
    case 'float': {
      // Carried as the input value it is; a plugin never has to compute with it.
      const special = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };
      if (typeof inner === 'string' && Object.hasOwn(special, inner)) {
        return { tag, val: special[inner] };
      }
      if (typeof inner !== 'number') throw bad();
      return { tag, val: inner };
    }
    case 'text':
    case 'decimal':
    case 'json':
      return { tag, val: text(inner) };
    case 'bytes': {
      const hex = text(inner);
      if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) throw bad();
      return { tag, val: Uint8Array.from(Buffer.from(hex, 'hex')) };
    }
    case 'unsupported':
      if (inner === null || typeof inner !== 'object') throw bad();
      return { tag, val: { typeName: text(inner['type-name']), text: text(inner.text) } };
    default:
      throw new Error(`value ${JSON.stringify(v)} has an unknown case`);
  }
}

/** A WIT value in its JSON form (BigInt stays BigInt: see `canonical`). */
export function valueToJson(value) {
  switch (value.tag) {
    case 'null':
      return null;
    case 'float':
      if (Number.isNaN(value.val)) return { float: 'NaN' };
      if (value.val === Infinity) return { float: 'Infinity' };
      if (value.val === -Infinity) return { float: '-Infinity' };
      return { float: value.val };
    case 'bytes':
      return { bytes: Buffer.from(value.val).toString('hex') };
    case 'unsupported':
      return { unsupported: { 'type-name': value.val.typeName, text: value.val.text } };
    default:
      return { [value.tag]: value.val };
  }
}

/** A WIT `staged-row` from its JSON form. */
export function stagedRowFromJson(j) {
  if (!['insert', 'update', 'delete', 'read'].includes(j.op)) {
    throw new Error('op is not insert, update, delete or read');
  }
  if (!Array.isArray(j.key)) throw new Error('key is not an array');
  if (j.columns === null || typeof j.columns !== 'object') throw new Error('columns is not an object');
  if (!Number.isSafeInteger(j.commit_position) || j.commit_position < 0) {
    throw new Error('commit_position is not an unsigned integer');
  }
  if (j.commit_time !== null && !Number.isSafeInteger(j.commit_time)) {
    throw new Error('commit_time is not an integer');
  }
  return {
    key: j.key.map(valueFromJson),
    op: j.op,
    commitPosition: BigInt(j.commit_position),
    commitTime: j.commit_time === null ? undefined : BigInt(j.commit_time),
    columns: Object.entries(j.columns).map(([name, v]) => ({ name, value: valueFromJson(v) })),
  };
}

/** Whether `e` carries a WIT `error` (a plugin's own error or jco's `ComponentError`). */
function witError(e) {
  return e !== null && typeof e === 'object' && Object.hasOwn(e, 'payload');
}

/**
 * Runs one case's session as the host runs it: constructed with the partition and
 * config, one `push` per chunk, then `finish`; rows and rejections concatenated in
 * order. Returns the output in the case file's `expect` form (rows as objects by
 * declared column name). Anything thrown that is not a WIT `error` is rethrown.
 */
export function runCase(transform, c) {
  const config = Object.entries(c.config ?? {});
  for (const [key, value] of config) {
    if (typeof value !== 'string') throw new Error(`config \`${key}\` is not a string`);
  }
  const partition = { table: c.partition.table, name: c.partition.name };
  const chunks = c.chunks.map((chunk) => chunk.map(stagedRowFromJson));
  const columns = transform.describe().columns.map((col) => col.name);
  const outputs = [];
  try {
    const session = new transform.Session(partition, config);
    for (const chunk of chunks) outputs.push(session.push(chunk));
    outputs.push(session.finish());
  } catch (e) {
    if (witError(e)) return { error: { [e.payload.tag]: e.payload.val } };
    throw e;
  }
  const rows = [];
  const rejections = [];
  for (const out of outputs) {
    for (const row of out.rows) {
      rows.push(Object.fromEntries(row.map((v, i) => [columns[i] ?? `#${i}`, valueToJson(v)])));
    }
    for (const { key, reason } of out.rejections) {
      rejections.push({ key: key.map(valueToJson), reason });
    }
  }
  return { rows, rejections };
}

/**
 * JSON text with sorted keys and BigInt as its digits: equal texts for equal values
 * (`canonical({ integer: 5n }) === canonical({ integer: 5 })`).
 */
export function canonical(j) {
  if (typeof j === 'bigint') return j.toString();
  if (Array.isArray(j)) return `[${j.map(canonical).join(',')}]`;
  if (j !== null && typeof j === 'object') {
    const keys = Object.keys(j).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(j[k])}`).join(',')}}`;
  }
  if (typeof j === 'number' && !Number.isFinite(j)) throw new Error(`${j} has no JSON form`);
  return JSON.stringify(j);
}

/** The cases of a JSON-lines file (a path or a file URL), each with its `line`. */
export function loadCases(file) {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((line, i) => ({ line, n: i + 1 }))
    .filter(({ line }) => line.trim() !== '')
    .map(({ line, n }) => {
      try {
        return { ...JSON.parse(line), line: n };
      } catch (e) {
        throw new Error(`line ${n}: not JSON: ${e.message}`);
      }
    });
}

// An integer or timestamp beyond ±2^53, which JSON.parse cannot read exactly, is
// written as a string of digits in the case file; as its BigInt it compares equal to
// the output's.
function exactValue(v) {
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    for (const tag of ['integer', 'timestamp']) {
      if (typeof v[tag] === 'string' && /^-?[0-9]+$/.test(v[tag]) && Object.keys(v).length === 1) {
        return { [tag]: BigInt(v[tag]) };
      }
    }
  }
  return v;
}

// The `expect` of a case with its big integers exact (see `exactValue`).
function expectedForm(expect) {
  if (expect === null || typeof expect !== 'object' || !Array.isArray(expect.rows) || !Array.isArray(expect.rejections)) {
    return expect;
  }
  return {
    ...expect,
    rows: expect.rows.map((row) => (row !== null && typeof row === 'object'
      ? Object.fromEntries(Object.entries(row).map(([k, v]) => [k, exactValue(v)]))
      : row)),
    rejections: expect.rejections.map((r) => (Array.isArray(r?.key) ? { ...r, key: r.key.map(exactValue) } : r)),
  };
}

/**
 * Runs one case against `plugin` (see `interfaceOf`); `null` if its output is
 * exactly the expected one, else a message with both (in canonical JSON).
 */
export function checkCase(plugin, c) {
  let actual;
  try {
    actual = canonical(runCase(interfaceOf(plugin), c));
  } catch (e) {
    return `line ${c.line}: case \`${c.case}\`: threw ${e?.stack ?? e}`;
  }
  const expected = canonical(expectedForm(c.expect));
  if (actual === expected) return null;
  return `line ${c.line}: case \`${c.case}\`:\n  expected ${expected}\n  actual   ${actual}`;
}
