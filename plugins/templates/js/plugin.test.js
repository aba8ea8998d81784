/**
 * Runs `cases.jsonl` against the plugin natively, with plain Node (no component), on
 * both contracts the SDK speaks (0.2, which build.sh builds, and 0.1):
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
