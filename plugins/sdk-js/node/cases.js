/**
 * `@weir/plugin/cases`: the JSON-lines plugin test cases, run natively in Node (the
 * Rust SDK's `weir_plugin::cases`, whose module documentation describes the format;
 * `plugins/examples/orders-cases.jsonl` is an example). Node built-ins only.
 *
 *     import { runCases } from '@weir/plugin/cases';
 *     const failures = runCases(myPlugin, new URL('./cases.jsonl', import.meta.url));
 *
 * Each case's session is run as the host runs it, through the same `{ describe,
 * Session }` interface the component exports (`exportPlugin`), on every contract
 * the interface speaks (`contractsOf`: both for the SDK's own, which must give the
 * expected output on each; one for a component transpiled by jco): constructed with
 * the partition and config (on 0.2 also the input schema: every column name of the
 * case's rows in order of first appearance, as the Rust SDK's runner makes it), one
 * `push` per chunk (on 0.2 each row's values by position, a column the row does not
 * have `undefined`, and every result's parts drained with `next`), then `finish`;
 * the rows and rejections of every call concatenated in order, rows as objects by
 * declared column name. The output must equal the case's `expect` exactly (integers
 * compared as their digits, whatever their size: an integer beyond ±2^53 is read
 * exactly, as a JSON number or as a string of digits, in the input as in `expect`).
 * A WIT `error` is a thrown value with an
 * own `payload` (a `PluginError`, or jco's `ComponentError` when the interface is a
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
 * The contracts a `{ describe, Session }` interface speaks, oldest first: its
 * `Session.contracts` if it lists them (the SDK's sessions speak `0.1` and `0.2`),
 * else `['0.2']` if its sessions have a `next` method (a component of
 * `weir:transform@0.2.0` transpiled by jco), else `['0.1']`.
 */
export function contractsOf(transform) {
  const { Session } = transform;
  if (Array.isArray(Session.contracts) && Session.contracts.length > 0) {
    return [...Session.contracts];
  }
  return typeof Session.prototype?.next === 'function' ? ['0.2'] : ['0.1'];
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
    throw new Error(`value ${canonical(v)} does not have exactly one case`);
  }
  const [[tag, inner]] = entries;
  const bad = () => new Error(`value ${canonical(v)} is not a valid ${tag}`);
  const int = (x) => {
    if (typeof x === 'bigint') return x;
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
      if (typeof inner === 'bigint') {
        return { tag, val: Number(inner) };
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
  const integer = (x) => Number.isSafeInteger(x) || typeof x === 'bigint';
  if (!integer(j.commit_position) || j.commit_position < 0 || BigInt(j.commit_position) >= 2n ** 64n) {
    throw new Error('commit_position is not an unsigned integer');
  }
  if (j.commit_time !== null && !(integer(j.commit_time) && BigInt.asIntN(64, BigInt(j.commit_time)) === BigInt(j.commit_time))) {
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

// Canonical JSON of a WIT value, to compare two values.
const valueKey = (v) => canonical(valueToJson(v));

/**
 * A case's rows on contract 0.2 (as the Rust SDK's runner makes them): the input
 * schema (every column name of the rows in order of first appearance, type names
 * empty; key positions where the first row's key values sit among its columns) and
 * each row's values by position, `undefined` for a column the row does not have.
 * `chunks` are 0.1 staged rows (`stagedRowFromJson`).
 */
export function positional(chunks) {
  const names = [];
  const seen = new Set();
  for (const chunk of chunks) {
    for (const row of chunk) {
      for (const { name } of row.columns) {
        if (!seen.has(name)) {
          seen.add(name);
          names.push(name);
        }
      }
    }
  }
  const first = chunks.find((chunk) => chunk.length > 0)?.[0];
  const key = [];
  if (first !== undefined) {
    for (const k of first.key) {
      const column = first.columns.find((c) => valueKey(c.value) === valueKey(k));
      if (column !== undefined) key.push(names.indexOf(column.name));
    }
  }
  const rows = chunks.map((chunk) => chunk.map((row) => {
    const byName = new Map();
    for (const c of row.columns) {
      if (!byName.has(c.name)) byName.set(c.name, c.value);
    }
    return {
      key: row.key,
      values: names.map((n) => byName.get(n)),
      op: row.op,
      commitPosition: row.commitPosition,
      commitTime: row.commitTime,
    };
  }));
  return { schema: { columns: names.map((name) => ({ name, typeName: '' })), key }, chunks: rows };
}

// Parts a contract-0.2 call may hand before the runner calls it a runaway.
const MAX_PARTS = 1_000_000;

/**
 * Runs one case's session as the host runs it, on `contract` (`'0.1'` or `'0.2'`;
 * by default the newest the interface speaks): constructed with the partition and
 * config (and on 0.2 the input schema), one `push` per chunk, then `finish`, on 0.2
 * each call's parts drained with `next`; rows and rejections concatenated in order.
 * Returns the output in the case file's `expect` form (rows as objects by declared
 * column name). Anything thrown that is not a WIT `error` is rethrown.
 */
export function runCase(transform, c, contract = contractsOf(transform).at(-1)) {
  if (contract !== '0.1' && contract !== '0.2') {
    throw new Error(`no contract ${contract}: 0.1 or 0.2`);
  }
  const config = Object.entries(c.config ?? {});
  for (const [key, value] of config) {
    if (typeof value !== 'string') throw new Error(`config \`${key}\` is not a string`);
  }
  const partition = { table: c.partition.table, name: c.partition.name };
  const chunks = c.chunks.map((chunk) => chunk.map(stagedRowFromJson));
  const columns = transform.describe().columns.map((col) => col.name);
  const outputs = [];
  try {
    if (contract === '0.1') {
      const session = new transform.Session(partition, config);
      for (const chunk of chunks) outputs.push(session.push(chunk));
      outputs.push(session.finish());
    } else {
      const { schema, chunks: rows } = positional(chunks);
      const session = new transform.Session(partition, schema, config);
      const drain = (out) => {
        outputs.push(out);
        for (let parts = 1; out.more; parts++) {
          if (parts > MAX_PARTS) throw new Error(`a call handed more than ${MAX_PARTS} parts`);
          out = session.next();
          outputs.push(out);
        }
      };
      for (const chunk of rows) drain(session.push(chunk));
      drain(session.finish());
    }
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

/**
 * JSON text as `JSON.parse` reads it, but for an integer beyond ±2^53 (no fraction,
 * no exponent), which is a BigInt rather than a rounded number.
 */
export function parseJsonExact(text) {
  let i = 0;
  const fail = (what) => {
    throw new SyntaxError(`${what} at position ${i}`);
  };
  const space = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
  const string = () => {
    const start = i;
    for (i++; i < text.length && text[i] !== '"'; i++) {
      if (text[i] === '\\') i++;
    }
    if (i >= text.length) fail('unterminated string');
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = () => {
    space();
    const c = text[i];
    if (c === '"') return string();
    if (c === '{') {
      i++;
      const object = {};
      space();
      if (text[i] === '}') {
        i++;
        return object;
      }
      for (;;) {
        space();
        if (text[i] !== '"') fail('expected a key');
        const key = string();
        space();
        if (text[i] !== ':') fail('expected `:`');
        i++;
        // As JSON.parse: an own property, `__proto__` included.
        Object.defineProperty(object, key, { value: value(), writable: true, enumerable: true, configurable: true });
        space();
        if (text[i] === ',') {
          i++;
        } else if (text[i] === '}') {
          i++;
          return object;
        } else {
          fail('expected `,` or `}`');
        }
      }
    }
    if (c === '[') {
      i++;
      const array = [];
      space();
      if (text[i] === ']') {
        i++;
        return array;
      }
      for (;;) {
        array.push(value());
        space();
        if (text[i] === ',') {
          i++;
        } else if (text[i] === ']') {
          i++;
          return array;
        } else {
          fail('expected `,` or `]`');
        }
      }
    }
    for (const [word, literal] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return literal;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) fail('unexpected character');
    i = NUMBER.lastIndex;
    const n = Number(m[0]);
    return m[1] === undefined && m[2] === undefined && !Number.isSafeInteger(n) ? BigInt(m[0]) : n;
  };
  const result = value();
  space();
  if (i !== text.length) fail('unexpected text after the value');
  return result;
}

/**
 * The cases of a JSON-lines file (a path or a file URL), each with its `line`;
 * integers beyond ±2^53 are read exactly (`parseJsonExact`).
 */
export function loadCases(file) {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((line, i) => ({ line, n: i + 1 }))
    .filter(({ line }) => line.trim() !== '')
    .map(({ line, n }) => {
      try {
        return { ...parseJsonExact(line), line: n };
      } catch (e) {
        throw new Error(`line ${n}: not JSON: ${e.message}`);
      }
    });
}

// An integer or timestamp beyond ±2^53 may also be written as a string of digits in
// the case file; as its BigInt it compares equal to the output's. A float written as
// a big integer is the number JSON.parse would read.
function exactValue(v) {
  if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 1) {
    for (const tag of ['integer', 'timestamp']) {
      if (typeof v[tag] === 'string' && /^-?[0-9]+$/.test(v[tag])) {
        return { [tag]: BigInt(v[tag]) };
      }
    }
    if (typeof v.float === 'bigint') {
      return { float: Number(v.float) };
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
 * Runs one case against `plugin` (see `interfaceOf`) on every contract it speaks
 * (`contractsOf`), or only on `contract` if given; `null` if each output is exactly
 * the expected one, else a message with both (in canonical JSON) for the first
 * contract that differs.
 */
export function checkCase(plugin, c, contract) {
  let transform;
  let contracts;
  try {
    transform = interfaceOf(plugin);
    contracts = contract === undefined ? contractsOf(transform) : [contract];
  } catch (e) {
    return `line ${c.line}: case \`${c.case}\`: threw ${e?.stack ?? e}`;
  }
  const expected = canonical(expectedForm(c.expect));
  for (const k of contracts) {
    let actual;
    try {
      actual = canonical(runCase(transform, c, k));
    } catch (e) {
      return `line ${c.line}: case \`${c.case}\` on contract ${k}: threw ${e?.stack ?? e}`;
    }
    if (actual !== expected) {
      return `line ${c.line}: case \`${c.case}\` on contract ${k}:\n  expected ${expected}\n  actual   ${actual}`;
    }
  }
  return null;
}
