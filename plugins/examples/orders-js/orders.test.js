/**
 * Native tests of the JavaScript `orders` plugin (`orders.js`), with plain Node:
 *
 *     node --test orders.test.js
 *
 * Every case of `../orders-cases.jsonl` (the cases the Rust and Python versions pass
 * too) is one test: the session is run as the host runs it (constructed with the
 * partition and config, one `push` per chunk, then `finish`; outputs concatenated in
 * order) and its output, in the case file's JSON form, must equal the expected one
 * exactly. The case runner is `../../tools/cases.mjs` (the Rust SDK's `cases` for
 * JavaScript, which also runs the built components: `run-component-cases.mjs`).
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkCase, loadCases } from '../../tools/cases.mjs';
import {
  Decimal,
  DecimalError,
  Input,
  MAX_DIGITS,
  Orders,
  PluginError,
  Session,
  asciiUpper,
  describe,
  transform,
} from './orders.js';

const CASES_URL = new URL('../orders-cases.jsonl', import.meta.url);

// ---------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------

const cases = loadCases(CASES_URL);

test('the case file has cases', () => {
  assert.ok(cases.length > 0, `no cases in ${CASES_URL.pathname}`);
});

for (const c of cases) {
  test(`line ${c.line}: ${c.case}`, () => {
    const failure = checkCase(transform, c);
    assert.equal(failure, null, failure ?? '');
  });
}

const d = (text) => Decimal.parse(text);

test('decimal: parses and prints PostgreSQL text keeping the scale', () => {
  for (const [text, printed] of [
    ['0', '0'],
    ['0.00', '0.00'],
    ['-0.00', '0.00'],
    ['12.340', '12.340'],
    ['-12.340', '-12.340'],
    ['007.5', '7.5'],
    ['.5', '0.5'],
    ['7.', '7'],
    ['+3', '3'],
    ['0.05', '0.05'],
    ['123456789012345678901234567890.123456789', '123456789012345678901234567890.123456789'],
  ]) {
    assert.equal(d(text).toString(), printed, text);
  }
});

test('decimal: refuses what is not finite decimal text', () => {
  const kind = (text) => {
    try {
      d(text);
    } catch (e) {
      if (e instanceof DecimalError) return e.kind;
      throw e;
    }
    return 'ok';
  };
  const invalid = ['', '-', '.', '1e5', '1.2.3', ' 1', '1 ', 'abc', '--1', '0x10', '١', '1_0', 'inf', '1\n'];
  for (const bad of invalid) {
    assert.equal(kind(bad), 'invalid', JSON.stringify(bad));
  }
  for (const special of ['NaN', 'Infinity', '+Infinity', '-Infinity']) {
    assert.equal(kind(special), 'not-finite', special);
  }
  assert.equal(kind('9'.repeat(MAX_DIGITS + 1)), 'too-many-digits');
  assert.equal(d('9'.repeat(MAX_DIGITS)).toString().length, MAX_DIGITS);
});

test('decimal: multiplication is exact where floats are not', () => {
  for (const [a, b, product] of [
    ['0.29', '100', '29.00'],
    ['0.1', '3', '0.3'],
    ['100.00', '1.0825', '108.250000'],
    ['-1.5', '2', '-3.0'],
    ['-1.5', '-2', '3.0'],
    ['-1.5', '0.00', '0.000'],
    [
      '99999999999999999999.99',
      '99999999999999999999.99',
      '9999999999999999999998000000000000000000.0001',
    ],
  ]) {
    assert.equal(d(a).mul(d(b)).toString(), product, `${a} × ${b}`);
  }
});

test('decimal: rounds half to even symmetrically', () => {
  for (const [text, scale, rounded] of [
    ['0.125', 2, '0.12'],
    ['0.135', 2, '0.14'],
    ['0.1250001', 2, '0.13'],
    ['0.1249999', 2, '0.12'],
    ['-0.125', 2, '-0.12'],
    ['-0.135', 2, '-0.14'],
    ['2.5', 0, '2'],
    ['3.5', 0, '4'],
    ['0.5', 0, '0'],
    ['-0.5', 0, '0'],
    ['9.995', 2, '10.00'],
    ['0.004', 2, '0.00'],
    ['0.005', 2, '0.00'],
    ['0.015', 2, '0.02'],
    ['1.2', 3, '1.200'],
    ['5', 2, '5.00'],
    ['0.0000005', 2, '0.00'],
    ['-0.004', 2, '0.00'],
  ]) {
    assert.equal(d(text).roundHalfEven(scale).toString(), rounded, `${text} at ${scale}`);
  }
});

test('decimal: exact rescaling refuses to drop digits', () => {
  assert.equal(d('1.500').rescaleExact(2).toString(), '1.50');
  assert.equal(d('7').rescaleExact(2).toString(), '7.00');
  assert.throws(
    () => d('1.005').rescaleExact(2),
    (e) => e instanceof DecimalError && e.kind === 'inexact',
  );
});

test('decimal: checks numeric bounds and signs', () => {
  assert.ok(d('9999999999.99').fits(12, 2));
  assert.ok(d('9999999999.990').fits(12, 2));
  assert.ok(!d('10000000000.00').fits(12, 2));
  assert.ok(!d('1.005').fits(12, 2));
  assert.ok(d('0.00').fits(1, 2));
  assert.ok(!d('1.00').fits(1, 2));
  assert.equal(d('0.05').integerDigits(), 0);
  assert.equal(d('-123.4').integerDigits(), 3);
  assert.ok(!d('-0.00').isNegative());
  assert.ok(d('-0.001').isNegative());
});

test('describes a row plugin partitioned by order_date', () => {
  const desc = describe();
  const { columns, ...rest } = desc;
  assert.deepEqual(rest, {
    name: 'orders',
    version: '0.1.0',
    kind: 'row',
    grainKey: ['id'],
    partitionColumn: 'order_date',
  });
  assert.deepEqual(columns, [
    { name: 'id', type: { tag: 'bigint' }, nullable: false },
    { name: 'customer', type: { tag: 'text' }, nullable: true },
    { name: 'order_date', type: { tag: 'date' }, nullable: true },
    { name: 'amount', type: { tag: 'numeric', val: { precision: 12, scale: 2 } }, nullable: true },
    {
      name: 'amount_eur',
      type: { tag: 'numeric', val: { precision: 14, scale: 2 } },
      nullable: true,
    },
    { name: 'status', type: { tag: 'text' }, nullable: true },
  ]);
  assert.equal(transform.describe, describe);
  assert.equal(transform.Session, Session);
});

test('upper-cases ASCII only', () => {
  assert.equal(asciiUpper('straße é ǆ ﬁ a-z'), 'STRAßE é ǆ ﬁ A-Z');
});

test('a config error fails every call, with the WIT error as payload', () => {
  const session = new Session({ table: 'public.orders', name: '2026-03-01' }, [['rate', 'x']]);
  const expected = { tag: 'invalid-config', val: 'config `rate` is not valid decimal text' };
  for (const call of [() => session.push([]), () => session.finish(), () => session.finish()]) {
    assert.throws(call, (e) => {
      assert.ok(e instanceof PluginError);
      assert.ok(Object.hasOwn(e, 'payload'), 'the bindings read an own `payload`');
      assert.deepEqual(e.payload, expected);
      return true;
    });
  }
  const long = new Session({ table: 't', name: 'p' }, [['rate', '1'.repeat(MAX_DIGITS + 1)]]);
  assert.throws(() => long.finish(), (e) => e.payload?.val === 'config `rate` has too many digits');
});

test('rejection reasons for mistyped and odd columns', () => {
  const reason = (columns) => {
    const base = {
      id: { tag: 'integer', val: 1n },
      customer: { tag: 'text', val: 'c' },
      order_date: { tag: 'date', val: 1 },
      amount: { tag: 'decimal', val: '1.00' },
      status: { tag: 'text', val: 's' },
      ...columns,
    };
    const key = [{ tag: 'text', val: 'k' }];
    const out = new Session({ table: 't', name: 'p' }, [['rate', '1']]).push([
      {
        key,
        op: 'insert',
        commitPosition: 1n,
        commitTime: undefined,
        columns: Object.entries(base).map(([name, value]) => ({ name, value })),
      },
    ]);
    assert.deepEqual(out.rows, []);
    assert.equal(out.rejections.length, 1);
    assert.equal(out.rejections[0].key, key, 'the key is returned as pushed');
    return out.rejections[0].reason;
  };
  const NULL = { tag: 'null' };
  assert.equal(reason({ id: NULL }), 'column `id` is null');
  assert.equal(reason({ id: { tag: 'text', val: '1' } }), 'column `id` is not an integer');
  assert.equal(reason({ customer: { tag: 'integer', val: 1n } }), 'column `customer` is not text');
  assert.equal(reason({ order_date: { tag: 'timestamp', val: 1n } }), 'column `order_date` is not a date');
  const amount = (val) => ({ amount: { tag: 'decimal', val } });
  assert.equal(reason(amount('1e5')), 'column `amount` is not valid decimal text');
  assert.equal(reason(amount('-Infinity')), 'column `amount` is not a finite decimal');
  assert.equal(reason(amount('1'.repeat(MAX_DIGITS + 1))), 'column `amount` has too many digits');
  assert.equal(reason({ id: NULL, amount: NULL }), 'column `id` is null');
});

test('a huge rate is exact', () => {
  const rate = `0.${'0'.repeat(100000)}5`;
  const row = new Input([
    { name: 'id', value: { tag: 'integer', val: 1n } },
    { name: 'customer', value: { tag: 'null' } },
    { name: 'order_date', value: { tag: 'null' } },
    { name: 'amount', value: { tag: 'decimal', val: '9999999999.99' } },
    { name: 'status', value: { tag: 'null' } },
  ]);
  const values = Orders.open([['rate', rate]]).transform(row);
  assert.deepEqual(values[4], { tag: 'decimal', val: '0.00' });
});
