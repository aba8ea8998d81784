// weir-plugin-bundle: the bundle of a plugin runs as the plugin does, with the
// prelude first; what it cannot bundle is refused with a message.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { BundleError, bundle } from '../node/bundle.js';
import { runCases } from '../node/cases.js';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const ORDERS = here('../../examples/orders-js/orders.js');
const ALL_TYPES = here('./all-types.js');
const LOG_IMPORT = "import { log as __weirHostLog } from 'weir:transform/log@0.1.0';";

const dir = mkdtempSync(join(tmpdir(), 'weir-plugin-bundle-test-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// Imports a bundle in Node, its `weir:transform/log` import served by `hostLog`.
let imported = 0;
async function importBundle(text, hostLog) {
  assert.equal(text.split(LOG_IMPORT).length, 2, 'the bundle imports the log once');
  globalThis.__testHostLog = hostLog;
  const file = join(dir, `bundle-${imported++}.mjs`);
  writeFileSync(file, text.replace(LOG_IMPORT, 'const __weirHostLog = globalThis.__testHostLog;'));
  return import(pathToFileURL(file).href);
}

// Bundles a plugin module given as text.
async function bundleText(name, text) {
  const file = join(here('.'), name);
  writeFileSync(file, text);
  try {
    return await bundle(file);
  } finally {
    rmSync(file, { force: true });
  }
}

test('the bundle of the orders example passes the shared cases, as the module does', async () => {
  const text = await bundle(ORDERS);
  assert.equal(await bundle(ORDERS), text, 'the same bytes every time');
  const { transform } = await importBundle(text, () => {});
  assert.deepEqual(runCases(transform, here('../../examples/orders-cases.jsonl')), []);
});

test('the prelude comes first and keeps a leading byte order mark in decoded strings', async () => {
  const text = await bundle(ORDERS);
  assert.ok(text.startsWith('// The first lines of every JavaScript plugin component'));
  assert.ok(text.indexOf('TextDecoder.prototype.decode') < text.indexOf('const __weir_decimal'));
  // In a process of its own: the prelude patches TextDecoder once, as in a component.
  const file = join(dir, 'bom.mjs');
  writeFileSync(file, `${text.replace(LOG_IMPORT, 'const __weirHostLog = undefined;')}
const bytes = new Uint8Array([0xef, 0xbb, 0xbf, 0x61]);
const shared = new TextDecoder();
const streamed = new TextDecoder();
const split = streamed.decode(bytes.subarray(0, 2), { stream: true }) + streamed.decode(bytes.subarray(2));
const middle = new TextDecoder();
const inside = middle.decode(bytes.subarray(3), { stream: true }) + middle.decode(bytes);
let fatal;
try {
  new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xff]));
} catch (e) {
  fatal = e.name;
}
process.stdout.write(JSON.stringify([
  new TextDecoder().decode(bytes),
  new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes),
  new TextDecoder().decode(bytes.subarray(3)),
  shared.decode(bytes), shared.decode(bytes), shared.decode(bytes.buffer), shared.decode(new DataView(bytes.buffer)),
  split, inside,
  new TextDecoder('utf-8', { fatal: true }).decode(bytes), fatal,
  new TextDecoder().decode(new Uint8Array([0x61, 0xff])),
  new TextDecoder('utf-16le').decode(new Uint8Array([0xff, 0xfe, 0x61, 0x00])),
  new TextDecoder().decode(), new TextDecoder().encoding, new TextDecoder().ignoreBOM,
]));
`);
  const run = spawnSync(process.execPath, [file], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  assert.deepEqual(JSON.parse(run.stdout), [
    '\ufeffa', '\ufeffa', 'a',
    // One decoder, again and again, from any kind of buffer.
    '\ufeffa', '\ufeffa', '\ufeffa', '\ufeffa',
    // Streamed: a mark split across calls is kept, one inside the stream not doubled.
    '\ufeffa', 'a\ufeffa',
    // `fatal` is kept; other encodings are left alone; the decoder's own state is unchanged.
    '\ufeffa', 'TypeError', 'a\ufffd', 'a', '', 'utf-8', false,
  ]);
});

test('the bundle of the all-types plugin passes its cases, and logs through the import', async () => {
  const logged = [];
  const { transform } = await importBundle(await bundle(ALL_TYPES), (level, message) => logged.push([level, message]));
  assert.deepEqual(runCases(transform, here('./all-types-cases.jsonl')), []);
  assert.deepEqual(logged[0], ['debug', 'sdk-all-types: partition 2026-03-01']);
});

test('imports: by name, renamed, as a namespace, from the SDK modules, and the component own', async () => {
  const text = await bundleText('bundle-probe-1.js', `// A probe.
import { Decimal as D, Row } from '@weir/plugin';
import * as weir from '../src/index.js';
import { PlainDate } from '../src/values.js';
import { log } from 'weir:transform/log@0.1.0';

export const transform = weir.exportPlugin({
  describe: new weir.Description('p', '1').column('d', weir.ColumnType.numeric(5, 2)).column('day', weir.ColumnType.date),
  transform: () => new Row({ d: D.parse('1.5'), day: PlainDate.fromDays(3) }),
});
`);
  assert.ok(text.includes("import { log } from 'weir:transform/log@0.1.0';"));
  assert.ok(text.includes('const { Decimal: D, Row } = __weir_index;'));
  assert.ok(text.includes('const weir = __weir_index;'));
  assert.ok(text.includes('const { PlainDate } = __weir_values;'));
});

test('what cannot be bundled is refused with a message', async () => {
  const refused = async (source, pattern) => {
    await assert.rejects(bundleText('bundle-probe-2.js', source), (e) => {
      assert.ok(e instanceof BundleError, String(e));
      assert.match(e.message, pattern);
      return true;
    });
  };
  await refused("import { readFileSync } from 'node:fs';\n", /imports only @weir\/plugin.*not `node:fs`/);
  await refused("import { helper } from './helper.js';\n", /one module.*not `.\/helper.js`/);
  await refused("import { runCases } from '@weir/plugin/cases';\n", /runs in Node only/);
  await refused("import { runCases } from '../node/cases.js';\n", /runs in Node only/);
  await refused("import weir from '@weir/plugin';\n", /only named imports/);
  await refused("import { Nope } from '@weir/plugin';\n", /the SDK has no export `Nope`/);
  await refused("import '@weir/plugin';\n", /by name/);
  await refused("const x = 1;\nimport { Row } from '@weir/plugin';\n", /:2: imports and re-exports must come first/);
  await refused("export { Row } from '@weir/plugin';\n", /by name/);
  await refused("import { Row } from '@weir/plugin';\nexport const transform = {;\n", /does not parse/);
});
