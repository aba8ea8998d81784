#!/usr/bin/env node
/**
 * Runs a case file against a built plugin component, end to end, in Node: the
 * component is transpiled by jco (its WASI imports served by jco's preview2 shim, its
 * `weir:transform/log` import by a stub that writes to stderr), then every case is
 * run through its exported `transform` interface with `cases.mjs`, exactly as the
 * plugins' native tests run their logic.
 *
 *   node plugins/tools/run-component-cases.mjs COMPONENT.wasm CASES.jsonl
 *
 * For example `node plugins/tools/run-component-cases.mjs
 * ~/.cache/weir-plugins/orders-python.wasm plugins/examples/orders-cases.jsonl`.
 * Prints one message per failed case and ends with `NAME: N passed, M failed`; exits
 * non-zero if a case failed. This is a check of the built bytes against the shared
 * cases, not Weir's host: the host's sandbox (its virtual WASI, limits) is tested by
 * the engine's own tests.
 *
 * Needs the tools of `scripts/install-plugin-tools` (jco and the shim) in
 * $WEIR_TOOLS_DIR (default ~/.cache/weir-tools): the transpiled module is written
 * under $WEIR_TOOLS_DIR/js/transpiled/ so that it resolves the shim there.
 */

import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';

import { checkCase, loadCases } from './cases.mjs';

const LOG_STUB = `// The \`weir:transform/log\` import, for run-component-cases.mjs: to stderr.
export function log(level, message) {
  process.stderr.write(\`[plugin \${level}] \${message}\\n\`);
}
`;

// A module whose only global is initialised with `i32.add`: valid only with the
// extended-const proposal, which componentize-py's CPython uses and which V8 ships
// from Node 22 on (Node 20 has it behind a flag).
const EXTENDED_CONST_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
  0x06, 0x09, 0x01, 0x7f, 0x00, 0x41, 0x01, 0x41, 0x02, 0x6a, 0x0b, // (global i32 (i32.add 1 2))
]);

function enableExtendedConst() {
  if (!WebAssembly.validate(EXTENDED_CONST_PROBE)) {
    setFlagsFromString('--experimental-wasm-extended-const');
  }
  if (!WebAssembly.validate(EXTENDED_CONST_PROBE)) {
    throw new Error('this Node cannot compile WebAssembly extended constant expressions');
  }
}

// Bumped when the patch of the transpiled glue changes (it is part of its cache key).
const GLUE_RECIPE = 'keep-byte-order-marks-1';

/**
 * jco's glue decodes the strings a component returns with `new TextDecoder()`, whose
 * default drops a leading U+FEFF: every component's output would lose it here although
 * Weir's host keeps it. Decode with `ignoreBOM: true`, as the host does; fail loudly if
 * the glue no longer has the decoder this expects (a jco upgrade).
 */
function keepByteOrderMarks(entry) {
  const glue = readFileSync(entry, 'utf8');
  const patched = glue
    .replaceAll("new TextDecoder('utf-16')", "new TextDecoder('utf-16', { ignoreBOM: true })")
    .replaceAll('new TextDecoder()', "new TextDecoder('utf-8', { ignoreBOM: true })");
  if (/new TextDecoder\((?!'utf-(8|16)', \{ ignoreBOM: true \}\))/.test(patched)
      || !patched.includes("new TextDecoder('utf-8', { ignoreBOM: true })")) {
    throw new Error(`${entry}: jco's glue does not decode strings as expected; update keepByteOrderMarks`);
  }
  writeFileSync(entry, patched);
}

async function main(argv) {
  if (argv.length !== 2) {
    process.stderr.write('usage: run-component-cases.mjs COMPONENT.wasm CASES.jsonl\n');
    return 2;
  }
  const [componentPath, casesPath] = argv.map((p) => resolve(p));
  const name = basename(componentPath).replace(/\.wasm$/, '');
  const toolsDir = process.env.WEIR_TOOLS_DIR || join(homedir(), '.cache', 'weir-tools');
  const jco = join(toolsDir, 'js', 'node_modules', '.bin', 'jco');
  if (!existsSync(jco)) {
    process.stderr.write(`run-component-cases: ${jco} not found: run scripts/install-plugin-tools\n`);
    return 2;
  }

  for (const file of [componentPath, casesPath]) {
    if (!existsSync(file)) {
      process.stderr.write(`run-component-cases: ${file} not found\n`);
      return 2;
    }
  }
  const bytes = readFileSync(componentPath);
  // The transpiled glue depends on the bytes and on how it is patched below.
  const digest = createHash('sha256').update(bytes).update(GLUE_RECIPE).digest('hex').slice(0, 16);
  const outDir = join(toolsDir, 'js', 'transpiled', `${name}-${digest}`);
  const entry = join(outDir, 'component.js');
  if (!existsSync(entry)) {
    // One transpiled version per component name: drop those of older bytes.
    const parent = join(toolsDir, 'js', 'transpiled');
    if (existsSync(parent)) {
      for (const dir of readdirSync(parent)) {
        if (dir.startsWith(`${name}-`) && /^[0-9a-f]{16}$/.test(dir.slice(name.length + 1))) {
          rmSync(join(parent, dir), { recursive: true, force: true });
        }
      }
    }
    mkdirSync(outDir, { recursive: true });
    writeFileSync(join(outDir, 'log.js'), LOG_STUB);
    execFileSync(
      jco,
      ['transpile', componentPath, '--out-dir', outDir, '--name', 'component', '--quiet',
        '--map', 'weir:transform/log@0.1.0=./log.js'],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    );
    keepByteOrderMarks(entry);
  }
  enableExtendedConst();
  const { transform } = await import(pathToFileURL(entry).href);
  if (transform === undefined) {
    process.stderr.write(`run-component-cases: ${componentPath} does not export weir:transform/transform\n`);
    return 1;
  }

  const cases = loadCases(casesPath);
  const failures = cases.map((c) => checkCase(transform, c)).filter((f) => f !== null);
  for (const failure of failures) {
    process.stdout.write(`${failure}\n`);
  }
  if (cases.length === 0) {
    process.stdout.write(`no cases in ${casesPath}\n`);
  }
  process.stdout.write(`${name}: ${cases.length - failures.length} passed, ${failures.length} failed\n`);
  return failures.length === 0 && cases.length > 0 ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2));
