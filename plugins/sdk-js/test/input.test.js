// Input's typed getters and Config: values, and the Rust SDK's fixed texts.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Config, Decimal, Input, InputSchema, Json, PlainDate, PluginError, Reject, Timestamp } from '../src/index.js';

const NULL = { tag: 'null' };

function input(columns, extra = {}) {
  return new Input({
    key: [{ tag: 'integer', val: 1n }],
    op: 'insert',
    commitPosition: 7n,
    commitTime: 1000n,
    columns: Object.entries(columns).map(([name, value]) => ({ name, value })),
    ...extra,
  });
}

// The reason `call` rejects with; fails the test if it does not reject.
function reason(call) {
  try {
    call();
  } catch (e) {
    if (e instanceof Reject) return e.reason;
    throw e;
  }
  assert.fail('no rejection');
}

const row = input({
  i: { tag: 'integer', val: 5n },
  big: { tag: 'integer', val: 9007199254740993n },
  f: { tag: 'float', val: 1.5 },
  t: { tag: 'text', val: 'a' },
  empty: { tag: 'text', val: '' },
  b: { tag: 'boolean', val: false },
  y: { tag: 'bytes', val: new Uint8Array([0, 255]) },
  d: { tag: 'decimal', val: '1.50' },
  nan: { tag: 'decimal', val: 'NaN' },
  inf: { tag: 'decimal', val: '-Infinity' },
  bad: { tag: 'decimal', val: '1e5' },
  long: { tag: 'decimal', val: '1'.repeat(147456) },
  day: { tag: 'date', val: 20513 },
  forever: { tag: 'date', val: 2147483647 },
  ts: { tag: 'timestamp', val: 1772366400123456n },
  j: { tag: 'json', val: '{"a": 1}' },
  none: NULL,
  u: { tag: 'unsupported', val: { typeName: 'interval', text: '1 day' } },
});

test('getters read typed values as natural JavaScript values', () => {
  assert.equal(row.int('i'), 5n);
  assert.equal(row.int('big'), 9007199254740993n, '2^53 + 1 is exact');
  assert.equal(row.float('f'), 1.5);
  assert.equal(row.text('t'), 'a');
  assert.equal(row.text('empty'), '');
  assert.equal(row.boolean('b'), false);
  assert.deepEqual(row.bytes('y'), new Uint8Array([0, 255]));
  assert.ok(row.decimal('d') instanceof Decimal);
  assert.equal(row.decimal('d').toString(), '1.50');
  assert.equal(row.decimalText('nan'), 'NaN');
  assert.ok(row.date('day').equals(PlainDate.of(2026, 3, 1)));
  assert.ok(row.date('forever').equals(PlainDate.INFINITY));
  assert.ok(row.timestamp('ts') instanceof Timestamp);
  assert.equal(row.timestamp('ts').micros, 1772366400123456n);
  assert.ok(row.json('j') instanceof Json);
  assert.deepEqual(row.json('j').parse(), { a: 1 });
  assert.deepEqual(row.value('u'), { tag: 'unsupported', val: { typeName: 'interval', text: '1 day' } });
  assert.equal(row.get('nope'), undefined);
});

test('the OrNull forms give null for null, the others reject it', () => {
  for (const getter of ['boolean', 'int', 'float', 'text', 'bytes', 'decimalText', 'decimal', 'date', 'timestamp', 'json']) {
    assert.equal(row[`${getter}OrNull`]('none'), null, getter);
    assert.equal(reason(() => row[getter]('none')), 'column `none` is null', getter);
    assert.equal(reason(() => row[getter]('nope')), 'column `nope` is missing', getter);
    assert.equal(reason(() => row[`${getter}OrNull`]('nope')), 'column `nope` is missing', getter);
  }
  assert.equal(row.intOrNull('i'), 5n);
  assert.equal(row.textOrNull('t'), 'a');
  assert.equal(reason(() => row.value('nope')), 'column `nope` is missing');
});

test('a value of another case is refused, with the Rust SDK texts (no coercion)', () => {
  const cases = [
    ['boolean', 'a boolean'],
    ['int', 'an integer'],
    ['float', 'a float'],
    ['text', 'text'],
    ['bytes', 'bytes'],
    ['decimal', 'a decimal'],
    ['decimalText', 'a decimal'],
    ['date', 'a date'],
    ['timestamp', 'a timestamp'],
    ['json', 'json'],
  ];
  for (const [getter, kind] of cases) {
    const column = getter === 'text' ? 'i' : 't';
    assert.equal(reason(() => row[getter](column)), `column \`${column}\` is not ${kind}`, getter);
    assert.equal(reason(() => row[`${getter}OrNull`](column)), `column \`${column}\` is not ${kind}`, getter);
    assert.equal(reason(() => row[getter]('u')), `column \`u\` is not ${kind}`, getter);
  }
  assert.equal(reason(() => row.decimal('i')), 'column `i` is not a decimal', 'an integer is not a decimal');
  assert.equal(reason(() => row.int('d')), 'column `d` is not an integer');
  assert.equal(reason(() => row.timestamp('day')), 'column `day` is not a timestamp');
});

test('decimal text that does not parse is refused with the Rust SDK texts', () => {
  assert.equal(reason(() => row.decimal('nan')), 'column `nan` is not a finite decimal');
  assert.equal(reason(() => row.decimalOrNull('inf')), 'column `inf` is not a finite decimal');
  assert.equal(reason(() => row.decimal('bad')), 'column `bad` is not valid decimal text');
  assert.equal(reason(() => row.decimal('long')), 'column `long` has too many digits');
});

test('key, op, commit position and commit time', () => {
  assert.deepEqual(row.key(), [{ tag: 'integer', val: 1n }]);
  assert.equal(row.op(), 'insert');
  assert.equal(row.commitPosition(), 7n);
  assert.equal(row.commitTime().micros, 1000n);
  assert.equal(input({}, { commitTime: undefined }).commitTime(), null);
  assert.equal(input({}, { commitPosition: 18446744073709551615n }).commitPosition(), 18446744073709551615n);
  assert.equal(row.staged.columns.length, 18);
});

test('config lookups name the key, never the value, with the Rust SDK texts', () => {
  const config = new Config([['rate', '1.5'], ['bad', 'secret'], ['nan', 'NaN'], ['long', '9'.repeat(147456)]]);
  assert.equal(config.get('rate'), '1.5');
  assert.equal(config.get('missing'), undefined);
  assert.ok(config.has('bad'));
  assert.equal(config.require('rate'), '1.5');
  assert.equal(config.decimal('rate').toString(), '1.5');
  const error = (call) => {
    try {
      call();
    } catch (e) {
      assert.ok(e instanceof PluginError);
      assert.ok(Object.hasOwn(e, 'payload'), 'the bindings read an own `payload`');
      assert.equal(e.tag, 'invalid-config');
      return e.payload.val;
    }
    assert.fail('no error');
  };
  assert.equal(error(() => config.decimal('bad')), 'config `bad` is not valid decimal text');
  assert.equal(error(() => config.decimal('nan')), 'config `nan` is not a finite decimal');
  assert.equal(error(() => config.decimal('long')), 'config `long` has too many digits');
  assert.equal(error(() => config.require('missing')), 'missing config key `missing`');
  assert.equal(error(() => config.decimal('missing')), 'missing config key `missing`');
});

test('config entries are sorted by key in code point order, as Rust sorts them', () => {
  const config = new Config({ b: '2', a: '1', '\u{1F600}': 'emoji', '\uFFFD': 'replacement' });
  assert.deepEqual(config.entries().map(([k]) => k), ['a', 'b', '\uFFFD', '\u{1F600}']);
  assert.deepEqual(new Config(new Map([['x', '1']])).entries(), [['x', '1']]);
  assert.deepEqual(new Config().entries(), []);
  assert.throws(() => new Config([['x', 1]]), TypeError);
});

// The same row on contract 0.2: values by position in an input schema.
function positionalInput(columns, { schemaColumns = Object.keys(columns), extra = {} } = {}) {
  const schema = new InputSchema({
    columns: schemaColumns.map((name) => ({ name, typeName: name === 'd' ? 'numeric(12,2)' : '' })),
    key: Uint32Array.of(0),
  });
  return new Input({
    key: [{ tag: 'integer', val: 1n }],
    values: schemaColumns.map((name) => columns[name]),
    op: 'insert',
    commitPosition: 7n,
    commitTime: 1000n,
    ...extra,
  }, schema);
}

test('InputSchema: names, type names and key positions, looked up by name', () => {
  const schema = new InputSchema({ columns: [{ name: 'id', typeName: 'bigint' }, { name: 'a', typeName: '' }, { name: 'id', typeName: 'text' }], key: Uint32Array.of(0) });
  assert.deepEqual(schema.names, ['id', 'a', 'id']);
  assert.deepEqual(schema.typeNames, ['bigint', '', 'text']);
  assert.deepEqual(schema.keyPositions, [0]);
  assert.equal(schema.position('a'), 1);
  assert.equal(schema.position('id'), 0, 'the first of two columns of one name');
  assert.equal(schema.position('nope'), undefined);
  assert.ok(Object.isFrozen(schema.names));
  assert.deepEqual(new InputSchema({ columns: [{ name: 'x' }] }).typeNames, ['']);
  assert.throws(() => new InputSchema({}), TypeError);
  assert.throws(() => new InputSchema({ columns: [{ name: 5 }] }), TypeError);
});

test('a row by position (contract 0.2) reads exactly as the same row by name (0.1)', () => {
  const columns = {
    i: { tag: 'integer', val: 5n },
    t: { tag: 'text', val: '\ufeffa' },
    d: { tag: 'decimal', val: '1.50' },
    nan: { tag: 'decimal', val: 'NaN' },
    day: { tag: 'date', val: 20513 },
    none: NULL,
    u: { tag: 'unsupported', val: { typeName: 'interval', text: '1 day' } },
  };
  const named = input(columns);
  // `gone` is in the schema but not in the row (`none`), `nope` in neither.
  const byPosition = positionalInput({ ...columns, gone: undefined }, { schemaColumns: [...Object.keys(columns), 'gone'] });
  const getters = ['boolean', 'int', 'float', 'text', 'bytes', 'decimalText', 'decimal', 'date', 'timestamp', 'json'];
  const outcome = (call) => {
    try {
      const v = call();
      return ['value', v instanceof Decimal || v instanceof PlainDate ? v.toString() : v];
    } catch (e) {
      if (e instanceof Reject) return ['reject', e.reason];
      throw e;
    }
  };
  for (const column of [...Object.keys(columns), 'gone', 'nope']) {
    for (const getter of getters) {
      for (const name of [getter, `${getter}OrNull`]) {
        assert.deepEqual(outcome(() => byPosition[name](column)), outcome(() => named[name](column)), `${name}('${column}')`);
      }
    }
    assert.deepEqual(byPosition.get(column), named.get(column), column);
    assert.deepEqual(outcome(() => byPosition.value(column)), outcome(() => named.value(column)), column);
  }
  assert.equal(byPosition.get('gone'), undefined);
  assert.equal(reason(() => byPosition.int('gone')), 'column `gone` is missing');
  assert.equal(reason(() => byPosition.textOrNull('nope')), 'column `nope` is missing');
  assert.equal(byPosition.text('t'), '\ufeffa');
  assert.deepEqual(byPosition.columns(), named.columns());
  assert.deepEqual(byPosition.columns().map(([name]) => name), Object.keys(columns));
  assert.deepEqual(byPosition.key(), [{ tag: 'integer', val: 1n }]);
  assert.equal(byPosition.op(), 'insert');
  assert.equal(byPosition.commitPosition(), 7n);
  assert.equal(byPosition.commitTime().micros, 1000n);
  assert.equal(byPosition.staged.values.length, 8);
  // A plain WIT input-schema is taken too, and `null` reads as `none`.
  const plain = new Input({ key: [], values: [null, { tag: 'integer', val: 2n }], op: 'read', commitPosition: 1n, commitTime: undefined },
    { columns: [{ name: 'a', typeName: '' }, { name: 'b', typeName: '' }], key: [] });
  assert.equal(plain.get('a'), undefined);
  assert.equal(reason(() => plain.intOrNull('a')), 'column `a` is missing');
  assert.equal(plain.int('b'), 2n);
  assert.deepEqual(plain.columns(), [['b', { tag: 'integer', val: 2n }]]);
});
