// The case runner (`@weir/plugin/cases`): every case on each contract an interface
// speaks, the rows of contract 0.2 made as the Rust SDK's runner makes them.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { canonical, checkCase, contractsOf, parseJsonExact, positional, runCase, stagedRowFromJson } from '../node/cases.js';
import { ColumnType, Description, Row, exportPlugin } from '../src/index.js';

const description = () => new Description('c', '1.0.0')
  .columnNotNull('id', ColumnType.bigint)
  .column('b', ColumnType.text)
  .grainKey(['id'])
  .partitionColumn('b');

const CASE = {
  line: 1,
  case: 'two chunks',
  partition: { table: 't', name: 'p' },
  config: {},
  chunks: [
    [{ key: [{ integer: 1 }], op: 'insert', commit_position: 1, commit_time: null, columns: { a: { text: 'x' }, id: { integer: 1 } } }],
    [{ key: [{ integer: 2 }], op: 'insert', commit_position: 2, commit_time: 5, columns: { id: { integer: 2 }, b: { text: 'y' } } }],
  ],
  expect: {
    rows: [{ id: { integer: 1 }, b: null }, { id: { integer: 2 }, b: { text: 'y' } }],
    rejections: [],
  },
};

test('on 0.2 the schema is every column in order of first appearance, the key where the first row has it', () => {
  const chunks = CASE.chunks.map((chunk) => chunk.map(stagedRowFromJson));
  const { schema, chunks: rows } = positional(chunks);
  assert.deepEqual(schema, {
    columns: [{ name: 'a', typeName: '' }, { name: 'id', typeName: '' }, { name: 'b', typeName: '' }],
    key: [1],
  });
  assert.deepEqual(rows[0][0].values, [{ tag: 'text', val: 'x' }, { tag: 'integer', val: 1n }, undefined]);
  assert.deepEqual(rows[1][0].values, [undefined, { tag: 'integer', val: 2n }, { tag: 'text', val: 'y' }]);
  assert.deepEqual(rows[1][0].key, [{ tag: 'integer', val: 2n }]);
  assert.equal(rows[1][0].commitTime, 5n);
  assert.deepEqual(positional([]), { schema: { columns: [], key: [] }, chunks: [] });
});

test('an SDK plugin passes each case on both contracts; a failure names the contract', () => {
  const plugin = { describe: description, transform: (row) => new Row({ id: row.int('id'), b: row.get('b') === undefined ? null : row.text('b') }) };
  assert.deepEqual(contractsOf(exportPlugin(plugin)), ['0.1', '0.2']);
  assert.equal(checkCase(plugin, CASE), null);
  assert.equal(canonical(runCase(exportPlugin(plugin), CASE, '0.1')), canonical(CASE.expect));
  assert.equal(canonical(runCase(exportPlugin(plugin), CASE, '0.2')), canonical(CASE.expect));
  // A plugin that lists the row's own columns: on 0.1 in the row's order, on 0.2 in
  // the schema's (every column of the case in order of first appearance).
  const order = { describe: description, transform: (row) => new Row({ id: row.int('id'), b: row.columns().map(([n]) => n).join() }) };
  const orderCase = { ...CASE, chunks: [CASE.chunks[0], [{ ...CASE.chunks[1][0], columns: { b: { text: 'y' }, id: { integer: 2 } } }]] };
  const as01 = { rows: [{ id: { integer: 1 }, b: { text: 'a,id' } }, { id: { integer: 2 }, b: { text: 'b,id' } }], rejections: [] };
  const as02 = { rows: [{ id: { integer: 1 }, b: { text: 'a,id' } }, { id: { integer: 2 }, b: { text: 'id,b' } }], rejections: [] };
  assert.equal(checkCase(order, { ...orderCase, expect: as01 }, '0.1'), null);
  assert.equal(checkCase(order, { ...orderCase, expect: as02 }, '0.2'), null);
  assert.match(checkCase(order, { ...orderCase, expect: as01 }), /^line 1: case `two chunks` on contract 0\.2:\n {2}expected .*\n {2}actual /);
  assert.match(checkCase(order, { ...orderCase, expect: as02 }), /^line 1: case `two chunks` on contract 0\.1:/);
});

test('a transpiled component speaks one contract: 0.2 if its sessions have next; parts are drained', () => {
  const calls = [];
  // A 0.2 interface that hands each output in two parts.
  class Session {
    #pending = [];
    constructor(partition, schema, config) {
      calls.push(['new', schema.columns.map((c) => c.name), config]);
    }
    push(rows) {
      calls.push(['push', rows.length]);
      this.#pending = rows.map((r) => [r.key[0], r.values[2] ?? { tag: 'null' }]);
      return this.next();
    }
    next() {
      calls.push(['next']);
      const row = this.#pending.shift();
      return { rows: row === undefined ? [] : [row], rejections: [], more: this.#pending.length > 0 };
    }
    finish() {
      calls.push(['finish']);
      return { rows: [], rejections: [], more: false };
    }
  }
  const transform = { describe: () => description().toWit('row'), Session };
  assert.deepEqual(contractsOf(transform), ['0.2']);
  assert.equal(checkCase(transform, CASE), null);
  assert.deepEqual(calls[0], ['new', ['a', 'id', 'b'], []]);
  class Old {
    push() { return { rows: [], rejections: [] }; }
    finish() { return { rows: [], rejections: [] }; }
  }
  assert.deepEqual(contractsOf({ describe: transform.describe, Session: Old }), ['0.1']);
  assert.throws(() => runCase(transform, CASE, '0.3'), /no contract 0\.3/);
});

test('case files are read as JSON.parse reads them, but integers beyond 2^53 exactly', () => {
  for (const text of ['{"a":[1,-2.5e3,"x\\"y\\u00e9",true,false,null,{}],"b":[],"c":0.5,"d":-0,"e":1E2}', ' [ ] ', '"\\ud83d\\ude00"', '9007199254740991']) {
    assert.deepEqual(parseJsonExact(text), JSON.parse(text), text);
  }
  assert.deepEqual(parseJsonExact('[9007199254740993, -9223372036854775808, 1e30, 9007199254740993.0]'),
    [9007199254740993n, -9223372036854775808n, 1e30, 9007199254740992]);
  const proto = parseJsonExact('{"__proto__": {"x": 1}}');
  assert.deepEqual(Object.keys(proto), ['__proto__']);
  assert.equal(Object.getPrototypeOf(proto), Object.prototype);
  for (const bad of ['{', '[1,]', '01', '{"a" 1}', '1 2', 'tru', '"abc', '']) {
    assert.throws(() => parseJsonExact(bad), SyntaxError, bad);
  }
  // A case whose integers are bare JSON numbers beyond 2^53, in and out.
  const big = {
    line: 1,
    case: 'big',
    partition: { table: 't', name: 'p' },
    config: {},
    ...parseJsonExact(`{"chunks": [[{"key": [{"integer": 9007199254740993}], "op": "insert", "commit_position": 18446744073709551615,
      "commit_time": -9223372036854775808, "columns": {"id": {"integer": 9007199254740993}, "b": {"text": "x"}}}]],
      "expect": {"rows": [{"id": {"integer": 9007199254740993}, "b": {"text": "x"}}], "rejections": []}}`),
  };
  const plugin = { describe: description, transform: (row) => new Row({ id: row.int('id'), b: row.text('b') }) };
  assert.equal(checkCase(plugin, big), null);
  const off = { ...big, expect: parseJsonExact('{"rows": [{"id": {"integer": 9007199254740992}, "b": {"text": "x"}}], "rejections": []}') };
  assert.match(checkCase(plugin, off), /expected .*9007199254740992.*\n {2}actual .*9007199254740993/);
});
