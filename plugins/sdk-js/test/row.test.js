// Output rows: put in declared order and converted by each column's declared type.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import vm from 'node:vm';

import { ColumnType, Decimal, Description, Json, PlainDate, PluginError, Row, Timestamp, exportPlugin, json } from '../src/index.js';

// The WIT values `row` becomes for these declared columns (via a real session).
function values(columns, row) {
  const description = new Description('t', '1');
  for (const [name, type] of Object.entries(columns)) description.column(name, type);
  const { Session } = exportPlugin({ describe: description, transform: () => row });
  const out = new Session({ table: 't', name: 'p' }, []).push([{ key: [], op: 'insert', commitPosition: 1n, columns: [] }]);
  return out.rows[0];
}

// The `other` error converting `row` fails with.
function failure(columns, row) {
  try {
    values(columns, row);
  } catch (e) {
    assert.ok(e instanceof PluginError, String(e));
    assert.equal(e.payload.tag, 'other');
    return e.payload.val;
  }
  assert.fail('no error');
}

test('values are put in declared order, by column name', () => {
  const columns = { a: ColumnType.bigint, b: ColumnType.text, c: ColumnType.boolean };
  assert.deepEqual(values(columns, new Row().set('c', true).set('a', 1n).set('b', 'x')), [
    { tag: 'integer', val: 1n },
    { tag: 'text', val: 'x' },
    { tag: 'boolean', val: true },
  ]);
  assert.deepEqual(values(columns, new Row({ b: null, c: false, a: 2 })), [
    { tag: 'integer', val: 2n },
    { tag: 'null' },
    { tag: 'boolean', val: false },
  ]);
  assert.deepEqual(values(columns, new Row(new Map([['c', null], ['b', 'y'], ['a', 4]]))), [
    { tag: 'integer', val: 4n },
    { tag: 'text', val: 'y' },
    { tag: 'null' },
  ]);
  assert.deepEqual(values(columns, new Row({ a: 1, b: 'x', c: true }).set('a', 3n)), [
    { tag: 'integer', val: 3n },
    { tag: 'text', val: 'x' },
    { tag: 'boolean', val: true },
  ], 'the last value set counts');
});

test('a missing or undeclared column fails the call, with the Rust SDK texts', () => {
  const columns = { a: ColumnType.bigint, b: ColumnType.bigint, c: ColumnType.bigint };
  assert.equal(failure(columns, new Row({ a: 1, b: 2 })), 'output row does not set declared column `c`');
  assert.equal(failure(columns, new Row({ a: 1, z: 2 })), 'output row sets column `z`, which describe does not declare');
  assert.equal(failure(columns, new Row({ a: 1, b: 2, c: 3, z: 4 })), 'output row sets column `z`, which describe does not declare');
});

test('integers: BigInt or safe integer numbers, exact to 64 bits', () => {
  for (const type of [ColumnType.smallint, ColumnType.integer, ColumnType.bigint]) {
    assert.deepEqual(values({ n: type }, new Row({ n: 7 })), [{ tag: 'integer', val: 7n }]);
  }
  assert.deepEqual(values({ n: ColumnType.bigint }, new Row({ n: 9007199254740993n })), [{ tag: 'integer', val: 9007199254740993n }]);
  assert.deepEqual(values({ n: ColumnType.bigint }, new Row({ n: -(2n ** 63n) })), [{ tag: 'integer', val: -(2n ** 63n) }]);
  assert.equal(failure({ n: ColumnType.bigint }, new Row({ n: 2n ** 63n })), 'output column `n` (bigint) takes a 64-bit integer: the BigInt is out of range');
  assert.equal(failure({ n: ColumnType.bigint }, new Row({ n: 2 ** 53 })), 'output column `n` (bigint) takes an integer: the number is not a safe integer (use a BigInt)');
  assert.equal(failure({ n: ColumnType.bigint }, new Row({ n: 1.5 })), 'output column `n` (bigint) takes an integer: the number is not a safe integer (use a BigInt)');
  assert.equal(failure({ n: ColumnType.integer }, new Row({ n: '1' })), 'output column `n` (integer) takes a BigInt or a safe integer, not a string');
  assert.equal(failure({ n: ColumnType.integer }, new Row({ n: Decimal.from(1) })), 'output column `n` (integer) takes a BigInt or a safe integer, not a Decimal');
});

test('numeric(p, s): a Decimal is rescaled to s by adding or dropping zeros, never rounded', () => {
  const columns = { x: ColumnType.numeric(12, 2) };
  const d = (text) => Decimal.parse(text);
  const decimal = (val) => [{ tag: 'decimal', val }];
  assert.deepEqual(values(columns, new Row({ x: d('7') })), decimal('7.00'));
  assert.deepEqual(values(columns, new Row({ x: d('1.500') })), decimal('1.50'));
  assert.deepEqual(values(columns, new Row({ x: d('-0.10') })), decimal('-0.10'));
  assert.deepEqual(values(columns, new Row({ x: d('-0.000') })), decimal('0.00'));
  assert.deepEqual(values(columns, new Row({ x: d('9999999999.99') })), decimal('9999999999.99'));
  assert.deepEqual(values(columns, new Row({ x: 12n })), decimal('12.00'));
  assert.deepEqual(values(columns, new Row({ x: -3 })), decimal('-3.00'));
  assert.equal(failure(columns, new Row({ x: d('1.005') })),
    'output column `x` (numeric(12,2)) takes at most 2 digits after the point: a non-zero digit would be dropped (round the value first)');
  assert.equal(failure(columns, new Row({ x: d('10000000000') })), 'output column `x` (numeric(12,2)) takes at most 10 digits before the point');
  assert.equal(failure(columns, new Row({ x: d('-10000000000.00') })), 'output column `x` (numeric(12,2)) takes at most 10 digits before the point');
  assert.equal(failure(columns, new Row({ x: 1.5 })), 'output column `x` (numeric(12,2)) takes a number only if it is a safe integer (use a Decimal)');
  assert.equal(failure(columns, new Row({ x: '1.50' })), 'output column `x` (numeric(12,2)) takes a Decimal, a BigInt or a safe integer, not a string');
  assert.deepEqual(values({ x: ColumnType.numeric(3, 3) }, new Row({ x: d('0.5') })), decimal('0.500'));
  assert.equal(failure({ x: ColumnType.numeric(3, 3) }, new Row({ x: d('1') })), 'output column `x` (numeric(3,3)) takes at most 0 digits before the point');
});

test('numeric without a typmod takes a Decimal as it is', () => {
  const columns = { x: ColumnType.numeric() };
  assert.deepEqual(values(columns, new Row({ x: Decimal.parse('1.2300') })), [{ tag: 'decimal', val: '1.2300' }]);
  assert.deepEqual(values(columns, new Row({ x: 2n ** 64n })), [{ tag: 'decimal', val: '18446744073709551616' }]);
  assert.deepEqual(values(columns, new Row({ x: -5 })), [{ tag: 'decimal', val: '-5' }]);
});

test('text, boolean, floats, bytes and json, by type', () => {
  const columns = {
    t: ColumnType.text, v: ColumnType.varchar(3), u: ColumnType.uuid, b: ColumnType.boolean,
    r: ColumnType.real, f: ColumnType.doublePrecision, y: ColumnType.bytea, j: ColumnType.json, jb: ColumnType.jsonb,
  };
  const bytes = new Uint8Array([1, 2, 3]);
  assert.deepEqual(values(columns, new Row({
    t: '\ufeffx', v: 'abc', u: '00000000-0000-0000-0000-000000000000', b: true, r: 0.5, f: NaN, y: bytes, j: json('[1]'), jb: Json.stringify({ a: 1 }),
  })), [
    { tag: 'text', val: '\ufeffx' },
    { tag: 'text', val: 'abc' },
    { tag: 'text', val: '00000000-0000-0000-0000-000000000000' },
    { tag: 'boolean', val: true },
    { tag: 'float', val: 0.5 },
    { tag: 'float', val: NaN },
    { tag: 'bytes', val: bytes },
    { tag: 'json', val: '[1]' },
    { tag: 'json', val: '{"a":1}' },
  ]);
  assert.equal(failure({ f: ColumnType.doublePrecision }, new Row({ f: 1n })), 'output column `f` (double precision) takes a number, not a BigInt');
  assert.equal(failure({ j: ColumnType.jsonb }, new Row({ j: '{}' })), 'output column `j` (jsonb) takes a Json (json(text)), not a string');
  assert.equal(failure({ y: ColumnType.bytea }, new Row({ y: [1, 2] })), 'output column `y` (bytea) takes a Uint8Array, not an array');
  assert.equal(failure({ t: ColumnType.text }, new Row({ t: 5 })), 'output column `t` (text) takes a string, not a number');
  assert.equal(failure({ b: ColumnType.boolean }, new Row({ b: 'true' })), 'output column `b` (boolean) takes a boolean, not a string');
  assert.equal(failure({ t: ColumnType.text }, new Row({ t: undefined })), 'output column `t` (text) is undefined (null is SQL NULL)');
  assert.equal(failure({ t: ColumnType.text }, new Row({ t: {} })), 'output column `t` (text) takes a string, not an object');
  assert.equal(failure({ t: ColumnType.text }, new Row({ t: new Uint8Array(1) })), 'output column `t` (text) takes a string, not a Uint8Array');
});

test('dates and timestamps: PlainDate, Timestamp, or an exact Date', () => {
  const columns = { d: ColumnType.date, ts: ColumnType.timestamp, tz: ColumnType.timestamptz };
  assert.deepEqual(values(columns, new Row({
    d: PlainDate.of(2026, 3, 1), ts: Timestamp.fromMicros(1772366400123456n), tz: new Date('2026-03-01T12:00:00.123Z'),
  })), [
    { tag: 'date', val: 20513 },
    { tag: 'timestamp', val: 1772366400123456n },
    { tag: 'timestamp', val: 1772366400123000n },
  ]);
  assert.deepEqual(values(columns, new Row({ d: new Date(Date.UTC(2026, 2, 1)), ts: Timestamp.INFINITY, tz: Timestamp.NEGATIVE_INFINITY })), [
    { tag: 'date', val: 20513 },
    { tag: 'timestamp', val: 9223372036854775807n },
    { tag: 'timestamp', val: -9223372036854775808n },
  ]);
  assert.deepEqual(values({ d: ColumnType.date }, new Row({ d: PlainDate.NEGATIVE_INFINITY })), [{ tag: 'date', val: -2147483648 }]);
  assert.equal(failure({ d: ColumnType.date }, new Row({ d: new Date('2026-03-01T12:00:00Z') })), 'output column `d` (date) takes a Date only at midnight UTC (PlainDate.fromDate)');
  assert.equal(failure({ d: ColumnType.date }, new Row({ d: 20513 })), 'output column `d` (date) takes a PlainDate or a Date at midnight UTC, not a number');
  assert.equal(failure({ d: ColumnType.date }, new Row({ d: Timestamp.fromMicros(0n) })), 'output column `d` (date) takes a PlainDate or a Date at midnight UTC, not a Timestamp');
  assert.equal(failure({ ts: ColumnType.timestamp }, new Row({ ts: new Date(NaN) })), 'output column `ts` (timestamp) takes a valid Date, not an Invalid Date');
  assert.equal(failure({ ts: ColumnType.timestamp }, new Row({ ts: 5n })), 'output column `ts` (timestamp) takes a Timestamp or a Date, not a BigInt');
});

test('a WIT value of the case the type takes is copied as it is', () => {
  const columns = { d: ColumnType.date, n: ColumnType.numeric(12, 2), i: ColumnType.bigint, t: ColumnType.text };
  const raw = [{ tag: 'date', val: 20513 }, { tag: 'decimal', val: '1.5' }, { tag: 'integer', val: 1n }, { tag: 'null' }];
  assert.deepEqual(values(columns, new Row({ d: raw[0], n: raw[1], i: raw[2], t: raw[3] })), raw);
  assert.equal(failure({ d: ColumnType.date }, new Row({ d: { tag: 'text', val: 'x' } })),
    'output column `d` (date) takes a PlainDate or a Date at midnight UTC or a WIT date value, not a WIT text value');
  assert.equal(failure({ i: ColumnType.bigint }, new Row({ i: { tag: 'integer', val: 1 } })),
    'output column `i` (bigint) takes a BigInt or a safe integer or a WIT integer value, not a WIT integer value with an invalid payload');
});

test('values made in another realm (as ComponentizeJS bindings make them) convert the same', () => {
  const foreign = vm.runInNewContext('[{ tag: "text", val: "x" }, new Uint8Array([1, 2]), { tag: "bytes", val: new Uint8Array([3]) }]');
  const [t, y, z] = values({ t: ColumnType.text, y: ColumnType.bytea, z: ColumnType.bytea }, new Row({ t: foreign[0], y: foreign[1], z: foreign[2] }));
  assert.equal(t, foreign[0], 'a WIT value is copied as it is');
  assert.equal(y.tag, 'bytes');
  assert.equal(y.val, foreign[1]);
  assert.equal(z, foreign[2]);
});

test('text holding half of a character is refused, not encoded with U+FFFD', () => {
  const columns = { t: ColumnType.text };
  const sliced = 'ab😀cd'.slice(0, 3);
  assert.match(failure(columns, new Row({ t: sliced })), /output column `t` \(text\) takes well-formed text/);
  assert.match(failure(columns, new Row({ t: '\udc00x' })), /lone UTF-16 surrogate/);
  assert.match(failure(columns, new Row({ t: { tag: 'text', val: '\ud800' } })), /well-formed/);
  assert.deepEqual(values(columns, new Row({ t: 'ab😀' })), [{ tag: 'text', val: 'ab😀' }]);
});
