// Row plugins: definePlugin, and the session exportPlugin makes (as the Rust SDK's
// RowSession runs it).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { runCases } from '../node/cases.js';
import { ColumnType, Description, PluginError, Reject, Row, definePlugin, exportPlugin } from '../src/index.js';
import { allTypes } from './all-types.js';

const description = () => new Description('t', '1.0.0')
  .columnNotNull('id', ColumnType.bigint)
  .column('name', ColumnType.text)
  .grainKey(['id'])
  .partitionColumn('name');

const staged = (id, op = 'insert', name = 'x') => ({
  key: [{ tag: 'integer', val: BigInt(id) }],
  op,
  commitPosition: 1n,
  commitTime: undefined,
  columns: [{ name: 'id', value: { tag: 'integer', val: BigInt(id) } }, { name: 'name', value: { tag: 'text', val: name } }],
});

// The WIT error a call fails with.
function witError(call) {
  try {
    call();
  } catch (e) {
    assert.ok(e instanceof PluginError, String(e?.stack ?? e));
    assert.ok(Object.hasOwn(e, 'payload'));
    return e.payload;
  }
  assert.fail('no error');
}

test('describe: the WIT description, kind row, a new object every call', () => {
  const { describe } = exportPlugin({ describe: description, transform: () => null });
  const d = describe();
  assert.deepEqual(d, {
    name: 't',
    version: '1.0.0',
    kind: 'row',
    columns: [
      { name: 'id', type: { tag: 'bigint' }, nullable: false },
      { name: 'name', type: { tag: 'text' }, nullable: true },
    ],
    grainKey: ['id'],
    partitionColumn: 'name',
  });
  d.columns.pop();
  assert.equal(describe().columns.length, 2);
  assert.deepEqual(new Description('n', 'v').column('x', ColumnType.numeric()).toWit('row').columns[0].type, { tag: 'numeric', val: undefined });
  assert.deepEqual(ColumnType.varchar(40), { tag: 'varchar', val: 40 });
});

test('definePlugin checks its arguments and the description', () => {
  assert.throws(() => definePlugin({ describe: {}, transform() {} }), /Description/);
  assert.throws(() => definePlugin({ describe: description }), /transform/);
  assert.throws(() => definePlugin({ describe: description().column('id', ColumnType.text), transform() {} }), /`id` is declared twice/);
  assert.throws(() => definePlugin({ describe: description().grainKey(['nope']), transform() {} }), /grain key column `nope`/);
  assert.throws(() => definePlugin({ describe: description().partitionColumn('nope'), transform() {} }), /partition column `nope`/);
  assert.throws(() => new Description('t', '1').column('x', ColumnType.numeric), /ColumnType.numeric/);
  assert.throws(() => new Description('t', '1').column('x', 'text'), /not a ColumnType/);
  assert.throws(() => ColumnType.numeric(5, 6), RangeError);
  assert.throws(() => ColumnType.numeric(1001, 0), RangeError);
  const plugin = definePlugin({ describe: description, transform: () => null });
  assert.equal(plugin.description.name, 't');
  assert.equal(exportPlugin(plugin).describe().name, 't');
});

test('a session transforms every row but deletes; null drops, Reject rejects with the key as pushed', () => {
  const opened = [];
  const { Session } = exportPlugin({
    describe: description,
    open(partition, config) {
      opened.push([partition, config.entries()]);
      return { prefix: config.require('prefix') };
    },
    transform(row, { prefix }) {
      const id = row.int('id');
      if (id === 2n) return null;
      if (id === 3n) throw new Reject('three');
      return new Row({ id, name: `${prefix}${row.text('name')}` });
    },
  });
  const session = new Session({ table: 'public.t', name: 'p1' }, [['prefix', '>']]);
  assert.deepEqual(opened, [[{ table: 'public.t', name: 'p1' }, [['prefix', '>']]]]);
  const rows = [staged(1), staged(2), staged(3), staged(4, 'delete'), staged(5, 'read'), staged(6, 'update')];
  const out = session.push(rows);
  assert.deepEqual(out.rows, [
    [{ tag: 'integer', val: 1n }, { tag: 'text', val: '>x' }],
    [{ tag: 'integer', val: 5n }, { tag: 'text', val: '>x' }],
    [{ tag: 'integer', val: 6n }, { tag: 'text', val: '>x' }],
  ]);
  assert.deepEqual(out.rejections, [{ key: rows[2].key, reason: 'three' }]);
  assert.equal(out.rejections[0].key, rows[2].key, 'the very key array that was pushed');
  assert.deepEqual(session.push([]), { rows: [], rejections: [] });
  assert.deepEqual(session.finish(), { rows: [], rejections: [] });
});

test('a getter rejection names the column; the rest of the chunk goes on', () => {
  const { Session } = exportPlugin({
    describe: description,
    transform: (row) => new Row({ id: row.int('id'), name: row.textOrNull('name') }),
  });
  const bad = staged(1);
  bad.columns[1].value = { tag: 'integer', val: 1n };
  const out = new Session({ table: 't', name: 'p' }, []).push([bad, staged(2)]);
  assert.deepEqual(out.rejections, [{ key: bad.key, reason: 'column `name` is not text' }]);
  assert.equal(out.rows.length, 1);
});

test('a config error is returned by every push and by finish, as in the Rust row session', () => {
  const { Session } = exportPlugin({
    describe: description,
    open: (_partition, config) => config.decimal('rate'),
    transform: () => null,
  });
  const session = new Session({ table: 't', name: 'p' }, [['rate', 'x']]);
  const expected = { tag: 'invalid-config', val: 'config `rate` is not valid decimal text' };
  assert.deepEqual(witError(() => session.push([staged(1)])), expected);
  assert.deepEqual(witError(() => session.push([])), expected);
  assert.deepEqual(witError(() => session.finish()), expected);
  assert.deepEqual(witError(() => session.finish()), expected);
  const missing = new Session({ table: 't', name: 'p' }, []);
  assert.deepEqual(witError(() => missing.finish()), { tag: 'invalid-config', val: 'missing config key `rate`' });
  const custom = new (exportPlugin({
    describe: description,
    open: () => { throw PluginError.invalidConfig('config `x` is odd'); },
    transform: () => null,
  }).Session)({ table: 't', name: 'p' }, []);
  assert.deepEqual(witError(() => custom.finish()), { tag: 'invalid-config', val: 'config `x` is odd' });
});

test('a plugin bug fails the call with `other`, never a trap', () => {
  const session = (transform, open) => new (exportPlugin({ describe: description, open, transform }).Session)({ table: 't', name: 'p' }, []);
  assert.deepEqual(witError(() => session(() => undefined).push([staged(1)])), {
    tag: 'other', val: 'transform returned undefined: return a Row, or null to drop the row',
  });
  assert.deepEqual(witError(() => session(() => [1, 'x']).push([staged(1)])), {
    tag: 'other', val: 'transform returned something else: return a Row, or null to drop the row',
  });
  assert.deepEqual(witError(() => session(() => { throw new TypeError('boom'); }).push([staged(1)])), {
    tag: 'other', val: 'transform threw TypeError: boom',
  });
  assert.deepEqual(witError(() => session(() => { throw 'text'; }).push([staged(1)])), { tag: 'other', val: 'transform threw text' });
  assert.deepEqual(witError(() => session(() => { throw PluginError.invalidInput('column `x` is absent'); }).push([staged(1)])), {
    tag: 'invalid-input', val: 'column `x` is absent',
  });
  assert.deepEqual(witError(() => session(() => null, () => { throw new RangeError('bad'); }).finish()), {
    tag: 'other', val: 'open threw RangeError: bad',
  });
  assert.deepEqual(witError(() => session(() => null, () => { throw new Reject('no'); }).push([])), {
    tag: 'other', val: 'open threw a Reject outside transform: no',
  });
  assert.deepEqual(witError(() => session(() => new Row({ id: 1n })).push([staged(1)])), {
    tag: 'other', val: 'output row does not set declared column `name`',
  });
  assert.throws(() => new Reject(5), TypeError);
  assert.throws(() => new PluginError('fatal', 'x'), TypeError);
});

test('the all-types plugin passes its cases (every getter and column type, natively)', () => {
  assert.deepEqual(runCases(allTypes, new URL('./all-types-cases.jsonl', import.meta.url)), []);
});

// Contract 0.2: the schema once, rows by position.
const SCHEMA = { columns: [{ name: 'name', typeName: 'text' }, { name: 'id', typeName: 'bigint' }], key: Uint32Array.of(1) };
const staged02 = (id, op = 'insert', name = { tag: 'text', val: 'x' }) => ({
  key: [{ tag: 'integer', val: BigInt(id) }],
  values: [name, { tag: 'integer', val: BigInt(id) }],
  op,
  commitPosition: 1n,
  commitTime: undefined,
});

test('one Session serves both contracts; on 0.2 rows come by position and every result says more: false', () => {
  const opened = [];
  const { Session } = exportPlugin({
    describe: description,
    open(partition, config) {
      opened.push([partition, config.entries()]);
      return { prefix: config.require('prefix') };
    },
    transform(row, { prefix }) {
      const id = row.int('id');
      if (id === 2n) return null;
      if (id === 3n) throw new Reject('three');
      return new Row({ id, name: `${prefix}${row.textOrNull('name')}` });
    },
  });
  assert.deepEqual(Session.contracts, ['0.1', '0.2']);
  assert.equal(typeof Session.prototype.next, 'function');
  const session = new Session({ table: 'public.t', name: 'p1' }, SCHEMA, [['prefix', '>']]);
  assert.deepEqual(opened, [[{ table: 'public.t', name: 'p1' }, [['prefix', '>']]]]);
  const rows = [staged02(1), staged02(2), staged02(3), staged02(4, 'delete'), staged02(5, 'read', { tag: 'null' }), staged02(6, 'update')];
  const out = session.push(rows);
  assert.deepEqual(out, {
    rows: [
      [{ tag: 'integer', val: 1n }, { tag: 'text', val: '>x' }],
      [{ tag: 'integer', val: 5n }, { tag: 'text', val: '>null' }],
      [{ tag: 'integer', val: 6n }, { tag: 'text', val: '>x' }],
    ],
    rejections: [{ key: rows[2].key, reason: 'three' }],
    more: false,
  });
  assert.equal(out.rejections[0].key, rows[2].key, 'the very key array that was pushed');
  assert.deepEqual(witError(() => session.next()), { tag: 'other', val: '`next` called with no output pending' });
  assert.deepEqual(session.push([]), { rows: [], rejections: [], more: false });
  assert.deepEqual(session.finish(), { rows: [], rejections: [], more: false });
  assert.deepEqual(witError(() => session.next()), { tag: 'other', val: '`next` called with no output pending' });
  // The same plugin on 0.1: results without `more`.
  const old = new Session({ table: 'public.t', name: 'p1' }, [['prefix', '>']]);
  assert.deepEqual(old.push([staged(1)]), { rows: [[{ tag: 'integer', val: 1n }, { tag: 'text', val: '>x' }]], rejections: [] });
  assert.deepEqual(old.finish(), { rows: [], rejections: [] });
});

test('on 0.2 a column the row does not have (none) or the schema does not name is missing', () => {
  const { Session } = exportPlugin({
    describe: description,
    transform: (row) => new Row({ id: row.int('id'), name: row.textOrNull('name') }),
  });
  const gone = staged02(1);
  gone.values[0] = undefined;
  const out = new Session({ table: 't', name: 'p' }, SCHEMA, []).push([gone, staged02(2)]);
  assert.deepEqual(out.rejections, [{ key: gone.key, reason: 'column `name` is missing' }]);
  assert.equal(out.rows.length, 1);
  const narrow = { columns: [{ name: 'id', typeName: '' }], key: [0] };
  const row = { key: [{ tag: 'integer', val: 3n }], values: [{ tag: 'integer', val: 3n }], op: 'insert', commitPosition: 1n, commitTime: 5n };
  assert.deepEqual(new Session({ table: 't', name: 'p' }, narrow, []).push([row]).rejections, [{ key: row.key, reason: 'column `name` is missing' }]);
});

test('on 0.2 a config error is returned by every push and by finish; an unusable schema is invalid-input', () => {
  const { Session } = exportPlugin({
    describe: description,
    open: (_partition, config) => config.decimal('rate'),
    transform: () => null,
  });
  const session = new Session({ table: 't', name: 'p' }, SCHEMA, [['rate', 'x']]);
  const expected = { tag: 'invalid-config', val: 'config `rate` is not valid decimal text' };
  assert.deepEqual(witError(() => session.push([staged02(1)])), expected);
  assert.deepEqual(witError(() => session.finish()), expected);
  const broken = new Session({ table: 't', name: 'p' }, { columns: [{ name: 1 }], key: [] }, [['rate', '1']]);
  assert.deepEqual(witError(() => broken.push([])), {
    tag: 'invalid-input', val: 'the input schema is not valid: an input column is { name, typeName } of strings',
  });
  assert.deepEqual(witError(() => broken.finish()).tag, 'invalid-input');
});
