// weir-plugin-componentize: the patch of ComponentizeJS 0.23.0's generated bindings
// copies every string as the unpatched function does, and bindings it does not know
// are refused rather than built unpatched.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { COMPONENTIZE_JS_VERSION, ComponentizeError, PATCHES, patchBindings } from '../node/componentize.js';

const WRAPPER = fileURLToPath(new URL('../node/componentize.js', import.meta.url));

// The string-lowering helper of ComponentizeJS 0.23.0's bindings as it generates it:
// its head and tail around the lines the patch replaces. (That the generated bindings
// hold those lines is checked by every build: the wrapper refuses bindings without
// them.)
const GENERATED = `
const TEXT_ENCODER_UTF8 = new TextEncoder();

function _utf8AllocateAndEncode(s, realloc, memory) {
  if (typeof s !== 'string') {
    throw new TypeError('expected a string, received [' + typeof s + ']');
  }
  if (s.length === 0) { return { ptr: 1, len: 0 }; }
${PATCHES[0].from}  return res;
}
`;

// The helper of `bindings`, run on `s` against a fresh memory: what it returns and
// the bytes it wrote where it says.
function lower(bindings, s) {
  const encode = new Function(`${bindings}; return _utf8AllocateAndEncode;`)();
  const memory = { buffer: new ArrayBuffer(4096) };
  let next = 16;
  const realloc = (old, oldSize, align, size) => {
    assert.deepEqual([old, oldSize, align], [0, 0, 1]);
    const ptr = next;
    next += size;
    return ptr;
  };
  const { ptr, len } = encode(s, realloc, memory);
  return { ptr, len, bytes: [...new Uint8Array(memory.buffer, ptr, len)] };
}

test('the patched helper copies every string as the generated one does', () => {
  const patched = patchBindings(GENERATED);
  assert.ok(!patched.includes('codepoints'), 'no code point count is left');
  // Lone surrogates too: both encode each as U+FFFD.
  const strings = ['', 'a', 'orders 42', 'straße', '\uFEFFleading mark', '€ and 😀 and \u{10FFFF}', 'x'.repeat(1000), 'a\uD800b', '\uDC00', 'end \uD83D'];
  for (const s of strings) {
    assert.deepEqual(lower(patched, s), lower(GENERATED, s), JSON.stringify(s));
  }
  assert.deepEqual(lower(patched, 'é').bytes, [0xc3, 0xa9]);
  assert.throws(() => lower(patched, 7), TypeError);
});

test('bindings without the known text, or with it twice, are refused', () => {
  assert.throws(() => patchBindings('function _utf8AllocateAndEncode() {}'), (e) => {
    assert.ok(e instanceof ComponentizeError);
    assert.match(e.message, /exactly once/);
    assert.match(e.message, new RegExp(COMPONENTIZE_JS_VERSION.replace(/\./g, '\\.')));
    return true;
  });
  assert.throws(() => patchBindings(GENERATED + GENERATED), ComponentizeError);
});

const dir = mkdtempSync(join(tmpdir(), 'weir-plugin-componentize-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// Runs the wrapper with `args`: its exit status and standard error.
function run(args) {
  const result = spawnSync(process.execPath, [WRAPPER, ...args], { encoding: 'utf8' });
  return { status: result.status, stderr: result.stderr };
}

test('the wrapper refuses a call without --tools, and a ComponentizeJS of another version', () => {
  const usage = run(['plugin.js', '--wit', 'wit']);
  assert.equal(usage.status, 1);
  assert.match(usage.stderr, /^weir-plugin-componentize: usage: weir-plugin-componentize --tools DIR/);

  const missing = run(['--tools', dir, 'plugin.js']);
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /no @bytecodealliance\/componentize-js in its node_modules/);

  const other = join(dir, 'node_modules', '@bytecodealliance', 'componentize-js');
  mkdirSync(other, { recursive: true });
  writeFileSync(join(other, 'package.json'), JSON.stringify({ name: '@bytecodealliance/componentize-js', version: '0.22.0' }));
  const wrong = run(['--tools', dir, 'plugin.js']);
  assert.equal(wrong.status, 1);
  assert.match(wrong.stderr, /ComponentizeJS 0\.22\.0; this wrapper patches the bindings of 0\.23\.0, install that one/);
});
