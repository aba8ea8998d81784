/**
 * Runs `cases.jsonl` against the plugin natively, with plain Node (no component):
 * `node --test plugin.test.js`.
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkCase, loadCases } from './sdk/node/cases.js';
import { transform } from './plugin.js';

const cases = loadCases(new URL('./cases.jsonl', import.meta.url));

test('the case file has cases', () => {
  assert.ok(cases.length > 0);
});

for (const c of cases) {
  test(`line ${c.line}: ${c.case}`, () => {
    const failure = checkCase(transform, c);
    assert.equal(failure, null, failure ?? '');
  });
}
