/**
 * Native tests of the JavaScript `orders` plugin (`orders.js`), with plain Node:
 *
 *     node --test orders.test.js
 *
 * Every case of `../orders-cases.jsonl` (the cases the Rust and Python versions pass
 * too) is one test, run by the SDK's case runner (`@weir/plugin/cases`) through the
 * `transform` interface the component exports, on both contracts (0.2: the input
 * schema once and rows by position; 0.1: columns by name): constructed with the
 * partition and config, one `push` per chunk, then `finish`; the output, in the case
 * file's JSON form, must equal the expected one exactly on each. The SDK's own behaviour (decimals,
 * getters, conversions) is tested in `../../sdk-js/test/`.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkCase, loadCases } from '../../sdk-js/node/cases.js';
import { Config, Input, PlainDate } from '../../sdk-js/src/index.js';
import { orders, transform } from './orders.js';

const cases = loadCases(new URL('../orders-cases.jsonl', import.meta.url));

test('the case file has cases', () => {
  assert.ok(cases.length > 0);
});

for (const c of cases) {
  test(`line ${c.line}: ${c.case}`, () => {
    const failure = checkCase(transform, c);
    assert.equal(failure, null, failure ?? '');
  });
}

test('describes a row plugin partitioned by order_date', () => {
  const { columns, ...rest } = transform.describe();
  assert.deepEqual(rest, {
    name: 'orders',
    version: '0.1.0',
    kind: 'row',
    grainKey: ['id'],
    partitionColumn: 'order_date',
  });
  assert.deepEqual(
    columns.map((c) => [c.name, c.type, c.nullable]),
    [
      ['id', { tag: 'bigint' }, false],
      ['customer', { tag: 'text' }, true],
      ['order_date', { tag: 'date' }, true],
      ['amount', { tag: 'numeric', val: { precision: 12, scale: 2 } }, true],
      ['amount_eur', { tag: 'numeric', val: { precision: 14, scale: 2 } }, true],
      ['status', { tag: 'text' }, true],
    ],
  );
});

test('a huge rate is exact', () => {
  const state = orders.open({ table: 't', name: 'p' }, new Config({ rate: `0.${'0'.repeat(100000)}5` }));
  const row = orders.transform(new Input({
    key: [{ tag: 'integer', val: 1n }],
    op: 'insert',
    commitPosition: 1n,
    commitTime: undefined,
    columns: [
      { name: 'id', value: { tag: 'integer', val: 1n } },
      { name: 'customer', value: { tag: 'null' } },
      { name: 'order_date', value: { tag: 'date', val: 20513 } },
      { name: 'amount', value: { tag: 'decimal', val: '9999999999.99' } },
      { name: 'status', value: { tag: 'null' } },
    ],
  }), state);
  assert.equal(row.get('amount_eur').toString(), '0.00');
  assert.ok(row.get('order_date').equals(PlainDate.of(2026, 3, 1)));
});
