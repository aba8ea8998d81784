#!/usr/bin/env node
/**
 * `weir-plugin-componentize`: runs ComponentizeJS's command line on a bundle
 * (`weir-plugin-bundle`'s output), with the bindings it generates for the component's
 * exports patched where they cost a plugin most of its time. Node built-ins only.
 *
 *     weir-plugin-componentize --tools DIR BUNDLE.js --wit WIT --world-name WORLD … -o OUT.wasm
 *
 * `DIR` holds `node_modules/@bytecodealliance/componentize-js` (version
 * `COMPONENTIZE_JS_VERSION`); every argument after `--tools DIR` is ComponentizeJS's
 * own.
 *
 * The patch: ComponentizeJS 0.23.0's bindings copy each string a plugin returns into
 * the component's memory with `_utf8AllocateAndEncode`, which first walks the string
 * in JavaScript, one character at a time, to size the copy (and count code points no
 * caller reads). In the component JavaScript is interpreted, so that walk cost the
 * orders plugin about a quarter of its time per row. The patched function has
 * `TextEncoder` (native code) encode the string, then allocates exactly that many
 * bytes and copies them, as before: the same bytes, the same single allocation. The
 * patch is checked: ComponentizeJS of another version, or bindings that do not hold
 * the expected text exactly once, make this fail with a message rather than build a
 * component silently without it.
 *
 * (0.23.0 rather than 0.22.0: with 0.22.0's bindings a job's memory grew with its
 * rows, the orders plugin's fuel per row in a job of 81,920 rows was 2.5 times that
 * in one of 65,536, and a job of 98,304 rows trapped.)
 */

import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

/** The ComponentizeJS version whose bindings `patchBindings` knows. */
export const COMPONENTIZE_JS_VERSION = '0.23.0';

/**
 * Each patch: what it is for, the text of the generated bindings (whole lines, as
 * ComponentizeJS writes them), its replacement.
 */
export const PATCHES = Object.freeze([
  {
    what: 'the copy of each output string',
    from: `  // Compute the exact allocation size up front. Some older preview1
  // adapters only support an initial allocation, not a subsequent shrink.
  let len = 0;
  let codepoints = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    codepoints++;
    if (ch < 0x80) { len += 1; }
    else if (ch < 0x800) { len += 2; }
    else if (ch >= 0xd800 && ch <= 0xdbff &&
    i + 1 < s.length &&
    (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      len += 4;
      i++;
    } else { len += 3; }
  }
  const ptr = realloc(0, 0, 1, len);
  const { read, written } = TEXT_ENCODER_UTF8.encodeInto(
  s,
  new Uint8Array(memory.buffer, ptr, len),
  );
  if (read !== s.length || written !== len) {
    throw new Error('failed to encode whole string');
  }
  const res = { ptr, len, codepoints };
`,
    to: `  // The exact allocation size from a native encoding (weir-plugin-componentize):
  // one allocation, as some older preview1 adapters need.
  const bytes = TEXT_ENCODER_UTF8.encode(s);
  const len = bytes.length;
  const ptr = realloc(0, 0, 1, len);
  new Uint8Array(memory.buffer, ptr, len).set(bytes);
  const res = { ptr, len };
`,
  },
]);

/** A ComponentizeJS installation or bindings this wrapper cannot patch, with why. */
export class ComponentizeError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ComponentizeError';
  }
}

/** ComponentizeJS's generated bindings with every patch applied; each must match once. */
export function patchBindings(bindings) {
  let patched = bindings;
  for (const { what, from, to } of PATCHES) {
    const at = patched.indexOf(from);
    if (at < 0 || patched.indexOf(from, at + from.length) >= 0) {
      throw new ComponentizeError(
        `the bindings ComponentizeJS generated do not hold the text this wrapper patches (${what}) exactly once: ` +
          `it patches those of ComponentizeJS ${COMPONENTIZE_JS_VERSION}`,
      );
    }
    patched = patched.slice(0, at) + to + patched.slice(at + from.length);
  }
  return patched;
}

/** The arguments: `{ tools, rest }`, or a thrown `ComponentizeError`. */
function parseArgs(argv) {
  if (argv[0] !== '--tools' || argv[1] === undefined) {
    throw new ComponentizeError(
      'usage: weir-plugin-componentize --tools DIR BUNDLE.js --wit WIT --world-name WORLD [ComponentizeJS options] -o OUT.wasm ' +
        '(DIR holds node_modules/@bytecodealliance/componentize-js)',
    );
  }
  return { tools: resolve(argv[1]), rest: argv.slice(2) };
}

/** The ComponentizeJS package folder under `tools`, checked to be the known version. */
function componentizeJs(tools) {
  const dir = join(tools, 'node_modules', '@bytecodealliance', 'componentize-js');
  const manifest = join(dir, 'package.json');
  if (!existsSync(manifest)) {
    throw new ComponentizeError(`${tools}: no @bytecodealliance/componentize-js in its node_modules (install ${COMPONENTIZE_JS_VERSION} there)`);
  }
  const { version } = JSON.parse(readFileSync(manifest, 'utf8'));
  if (version !== COMPONENTIZE_JS_VERSION) {
    throw new ComponentizeError(`${dir}: ComponentizeJS ${version}; this wrapper patches the bindings of ${COMPONENTIZE_JS_VERSION}, install that one`);
  }
  return dir;
}

async function main() {
  const { tools, rest } = parseArgs(process.argv.slice(2));
  const dir = componentizeJs(tools);
  // ComponentizeJS's own modules import the splicer by this path, so they share this
  // instance of it and call the patched `spliceBindings`.
  const { splicer } = await import(pathToFileURL(join(dir, 'lib', 'spidermonkey-embedding-splicer.js')).href);
  const splice = splicer.spliceBindings;
  splicer.spliceBindings = (...args) => {
    const spliced = splice(...args);
    return { ...spliced, jsBindings: patchBindings(spliced.jsBindings) };
  };
  // Its command line reads the arguments after the script's name.
  process.argv = [process.argv[0], join(dir, 'src', 'cli.js'), ...rest];
  await import(pathToFileURL(join(dir, 'src', 'cli.js')).href);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((e) => {
    console.error(`weir-plugin-componentize: ${e instanceof ComponentizeError ? e.message : e.stack ?? e}`);
    process.exit(1);
  });
}
