/**
 * The JSON-lines plugin test cases, for JavaScript: the Rust SDK's `cases` module
 * (`plugins/sdk/src/cases.rs`, which documents the format) over a `transform`
 * interface as the JavaScript component bindings shape it: `{ describe, Session }`,
 * variants as `{ tag, val }`, `s64`/`u64` as BigInt, records with camelCase fields,
 * and a WIT `error` thrown as a value whose own `payload` property is the error
 * variant.
 *
 * That is both the shape of a JavaScript plugin's module run natively
 * (`../examples/orders-js/orders.test.js`) and the shape of any component transpiled
 * by jco (`run-component-cases.mjs`), so the same runner checks both.
 *
 * Node built-ins only.
 */

import { readFileSync } from 'node:fs';

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

/**
 * Runs one case against `transform`; `null` if its output is exactly the expected
 * one, else a message with both (in canonical JSON).
 */
export function checkCase(transform, c) {
  let actual;
  try {
    actual = canonical(runCase(transform, c));
  } catch (e) {
    return `line ${c.line}: case \`${c.case}\`: threw ${e?.stack ?? e}`;
  }
  const expected = canonical(c.expect);
  if (actual === expected) return null;
  return `line ${c.line}: case \`${c.case}\`:\n  expected ${expected}\n  actual   ${actual}`;
}
