#!/usr/bin/env node
/**
 * `weir-plugin-bundle`: makes the one ES module ComponentizeJS builds a component
 * from, out of a plugin module and this SDK. Node built-ins only.
 *
 *     weir-plugin-bundle PLUGIN.js [-o OUT.js]      (or: node node/bundle.js …)
 *
 * The bundle is, in order:
 *
 * 1. `src/keep-byte-order-marks.js`, the prelude every JavaScript plugin needs (it
 *    keeps a leading U+FEFF in the strings the host passes in, which ComponentizeJS
 *    0.23's bindings would drop);
 * 2. `import { log as __weirHostLog } from 'weir:transform/log@0.1.0'` (the SDK's
 *    `log` calls it);
 * 3. each SDK module of `src/` that `src/index.js` reaches, in dependency order, as
 *    `const __weir_NAME = (() => { …; return { EXPORTS }; })();`, so that every
 *    module keeps its own scope;
 * 4. the plugin module, its imports of the SDK turned into `const { … } =
 *    __weir_index;` in place. Its `export const transform = exportPlugin(…)` is the
 *    bundle's export.
 *
 * What it reads, and refuses otherwise (with a message, before ComponentizeJS sees
 * anything): static imports at the head of a module only (after comments), of
 * `@weir/plugin` (or a path to the SDK's `src/` modules) by name or as a namespace,
 * and imports of the component's own interfaces (`weir:…`, `wasi:…`), kept as they
 * are. A plugin is one module: other imports (files of its own, npm packages,
 * `node:` modules, `@weir/plugin/cases`) are refused. The SDK's own modules
 * export only declarations (`export function|class|const`) and re-export by name.
 * The result is checked before it is written: the SDK part is run in an empty
 * context and must give every export of `src/index.js`, and the whole bundle must
 * parse as a module (`node --check`). The output depends only on the inputs, byte
 * for byte.
 */

import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import vm from 'node:vm';

const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const SDK_SRC = join(SDK_DIR, 'src');
const SDK_ENTRY = join(SDK_SRC, 'index.js');
const PRELUDE = join(SDK_SRC, 'keep-byte-order-marks.js');
const PACKAGE = JSON.parse(readFileSync(join(SDK_DIR, 'package.json'), 'utf8'));
const LOG_IMPORT = "import { log as __weirHostLog } from 'weir:transform/log@0.1.0';";

/** A plugin or SDK module this bundler cannot bundle, with why. */
export class BundleError extends Error {
  constructor(message) {
    super(message);
    this.name = 'BundleError';
  }
}

const IDENT = '[A-Za-z_$][\\w$]*';
const IMPORT_FROM = new RegExp(`import(?=[\\s{*])\\s*([^;'"]*?)\\s*from\\s*(['"])([^'"\\n]+)\\2[ \\t]*;?`, 'y');
const IMPORT_BARE = /import\s*(['"])([^'"\n]+)\1[ \t]*;?/y;
const EXPORT_FROM = /export\s*(\*[^;'"]*?|\{[^}]*\})\s*from\s*(['"])([^'"\n]+)\2[ \t]*;?/y;
// A static import or re-export that is not at the head of the module.
const LATE_STATEMENT = /^[ \t]*(?:import\s*(?:[{*'"]|[A-Za-z_$][\w$]*\s*(?:,|\s+from\b))|export\s*(?:\*|\{[^}]*\}\s*from\b))/m;

function lineOf(source, index) {
  return source.slice(0, index).split('\n').length;
}

/**
 * The static imports and re-exports at the head of a module: `{ start, end, kind,
 * clause, specifier }` each, and where the head ends. Comments and white space are
 * skipped; the head ends at the first other statement.
 */
function scanHead(source, file) {
  const statements = [];
  let i = source.startsWith('#!') ? source.indexOf('\n') + 1 || source.length : 0;
  for (;;) {
    const ws = /\s*/y;
    ws.lastIndex = i;
    ws.exec(source);
    i = ws.lastIndex;
    if (source.startsWith('//', i)) {
      const end = source.indexOf('\n', i);
      i = end < 0 ? source.length : end + 1;
      continue;
    }
    if (source.startsWith('/*', i)) {
      const end = source.indexOf('*/', i + 2);
      if (end < 0) throw new BundleError(`${file}: unterminated comment`);
      i = end + 2;
      continue;
    }
    let m;
    for (const [re, kind] of [[IMPORT_FROM, 'import'], [IMPORT_BARE, 'bare'], [EXPORT_FROM, 'export-from']]) {
      re.lastIndex = i;
      m = re.exec(source);
      if (m) {
        const specifier = kind === 'bare' ? m[2] : m[3];
        statements.push({ start: i, end: re.lastIndex, kind, clause: kind === 'bare' ? '' : m[1].trim(), specifier });
        i = re.lastIndex;
        break;
      }
    }
    if (!m) break;
  }
  const late = LATE_STATEMENT.exec(source.slice(i));
  if (late) {
    throw new BundleError(`${file}:${lineOf(source, i + late.index)}: imports and re-exports must come first, before any other statement`);
  }
  return { statements, bodyStart: i };
}

/** The local bindings of an import clause: `[[imported, local], …]` or `{ namespace }`. */
function parseClause(clause, where) {
  const namespace = new RegExp(`^\\*\\s*as\\s+(${IDENT})$`).exec(clause);
  if (namespace) return { namespace: namespace[1] };
  if (!clause.startsWith('{') || !clause.endsWith('}')) {
    throw new BundleError(`${where}: only named imports (\`import { a, b as c }\`) and namespace imports (\`import * as x\`) are bundled`);
  }
  const names = clause.slice(1, -1).split(',').map((s) => s.trim()).filter((s) => s !== '');
  return {
    names: names.map((spec) => {
      const m = new RegExp(`^(${IDENT})(?:\\s+as\\s+(${IDENT}))?$`).exec(spec);
      if (!m) throw new BundleError(`${where}: cannot read \`${spec}\``);
      return [m[1], m[2] ?? m[1]];
    }),
  };
}

/** The `const` that binds an import clause to a bundled module object. */
function binding(parsed, moduleVar, exportNames, where) {
  if (parsed.namespace) return `const ${parsed.namespace} = ${moduleVar};`;
  for (const [imported] of parsed.names) {
    if (!exportNames.includes(imported)) {
      throw new BundleError(`${where}: the SDK has no export \`${imported}\``);
    }
  }
  const list = parsed.names.map(([imported, local]) => (imported === local ? local : `${imported}: ${local}`));
  return `const { ${list.join(', ')} } = ${moduleVar};`;
}

/** The SDK module a specifier names (a path in `src/`), `undefined` if it names none. */
function sdkModule(specifier, fromFile) {
  if (specifier === PACKAGE.name) return SDK_ENTRY;
  if (specifier.startsWith(`${PACKAGE.name}/`)) {
    throw new BundleError(`${fromFile}: \`${specifier}\` runs in Node only; a component imports \`${PACKAGE.name}\``);
  }
  if (!specifier.startsWith('.') && !isAbsolute(specifier)) return undefined;
  const path = resolve(dirname(fromFile), specifier);
  if (path.startsWith(join(SDK_DIR, 'node') + sep)) {
    throw new BundleError(`${fromFile}: \`${specifier}\` runs in Node only; a component imports the SDK's src/index.js`);
  }
  return path.startsWith(SDK_SRC + sep) ? path : undefined;
}

function moduleVar(path) {
  return `__weir_${basename(path, '.js').replace(/[^\w$]/g, '_')}`;
}

/** The SDK modules `src/index.js` reaches, dependencies first, each with its head read. */
function sdkModules() {
  const order = [];
  const state = new Map();
  const visit = (path, from) => {
    if (state.get(path) === 'done') return;
    if (state.get(path) === 'visiting') throw new BundleError(`SDK: an import cycle through ${relative(SDK_DIR, path)}`);
    if (!existsSync(path)) throw new BundleError(`${from}: ${relative(SDK_DIR, path)} does not exist`);
    state.set(path, 'visiting');
    const source = readFileSync(path, 'utf8');
    const head = scanHead(source, relative(SDK_DIR, path));
    for (const s of head.statements) {
      const dep = sdkModule(s.specifier, path);
      if (dep === undefined) {
        throw new BundleError(`${relative(SDK_DIR, path)}: the SDK imports only its own modules, not \`${s.specifier}\``);
      }
      visit(dep, relative(SDK_DIR, path));
    }
    state.set(path, 'done');
    order.push({ path, source, head });
  };
  visit(SDK_ENTRY, 'bundle');
  return order;
}

/** One SDK module as `const __weir_NAME = (() => { …; return { … }; })();`. */
function wrapSdkModule({ path, source, head }, exportsOf) {
  const where = relative(SDK_DIR, path);
  const lines = [];
  for (const s of head.statements) {
    const dep = sdkModule(s.specifier, path);
    if (s.kind === 'bare') continue;
    if (s.kind === 'export-from' && s.clause.startsWith('*')) {
      throw new BundleError(`${where}: re-export by name, not \`export *\``);
    }
    lines.push(binding(parseClause(s.clause, where), moduleVar(dep), exportsOf.get(dep), where));
  }
  const body = source.slice(head.bodyStart)
    .replace(/^export (?=(?:async\s+)?function\b|class\b|const\b|let\b)/gm, '');
  const leftover = /^export\b/m.exec(body);
  if (leftover) {
    throw new BundleError(`${where}:${lineOf(source, head.bodyStart + leftover.index)}: the SDK's modules export declarations only (export function|class|const)`);
  }
  const names = exportsOf.get(path);
  return [
    `// ---- ${PACKAGE.name}: ${relative(SDK_DIR, path).split(sep).join('/')}`,
    `const ${moduleVar(path)} = (() => {`,
    ...lines,
    body.trimEnd(),
    `return Object.freeze({ ${names.join(', ')} });`,
    '})();',
  ].join('\n');
}

/**
 * The bundle of the plugin module at `pluginPath` (see the module documentation);
 * a `BundleError` for what it cannot bundle.
 */
export async function bundle(pluginPath) {
  const pluginFile = resolve(pluginPath);
  const modules = sdkModules();
  const exportsOf = new Map();
  for (const { path } of modules) {
    exportsOf.set(path, Object.keys(await import(pathToFileURL(path).href)).sort());
  }
  const sdk = modules.map((m) => wrapSdkModule(m, exportsOf)).join('\n\n');
  checkSdk(sdk, exportsOf.get(SDK_ENTRY));

  const source = readFileSync(pluginFile, 'utf8');
  const name = basename(pluginFile);
  const head = scanHead(source, name);
  let plugin = '';
  let at = 0;
  for (const s of head.statements) {
    const where = `${name}:${lineOf(source, s.start)}`;
    let replacement;
    if (/^(weir|wasi):/.test(s.specifier)) {
      replacement = source.slice(s.start, s.end);
    } else {
      const dep = sdkModule(s.specifier, pluginFile);
      if (dep === undefined) {
        throw new BundleError(`${where}: a plugin component is one module: it imports only ${PACKAGE.name} and the component's own interfaces (weir:…, wasi:…), not \`${s.specifier}\``);
      }
      if (s.kind !== 'import') {
        throw new BundleError(`${where}: import what the plugin uses from ${PACKAGE.name} by name`);
      }
      if (!exportsOf.has(dep)) {
        throw new BundleError(`${where}: \`${s.specifier}\` is not a module of the SDK that src/index.js reaches`);
      }
      replacement = binding(parseClause(s.clause, where), moduleVar(dep), exportsOf.get(dep), where);
    }
    plugin += source.slice(at, s.start) + replacement;
    at = s.end;
  }
  plugin += source.slice(at);

  const prelude = readFileSync(PRELUDE, 'utf8').trimEnd();
  const text = [
    prelude,
    '',
    `// Bundled by weir-plugin-bundle (${PACKAGE.name} ${PACKAGE.version}): the prelude above, the SDK, then ${name}.`,
    LOG_IMPORT,
    '',
    sdk,
    '',
    `// ---- ${name}`,
    plugin.trimEnd(),
    '',
  ].join('\n');
  checkModuleSyntax(text, name);
  return text;
}

// Runs the SDK part in an empty context: it must load, and give every export.
function checkSdk(sdk, expected) {
  let api;
  try {
    api = vm.runInNewContext(`'use strict';\n(() => {\n${sdk}\nreturn ${moduleVar(SDK_ENTRY)};\n})()`);
  } catch (e) {
    throw new BundleError(`the bundled SDK does not load: ${e?.stack ?? e}`);
  }
  const got = Object.keys(api).sort();
  if (got.join() !== expected.join()) {
    throw new BundleError(`the bundled SDK exports ${got.join(', ')}, not ${expected.join(', ')}`);
  }
}

// Parses the bundle as an ES module (without running or resolving anything).
function checkModuleSyntax(text, name) {
  const result = spawnSync(process.execPath, ['--input-type=module', '--check'], { input: text, encoding: 'utf8' });
  if (result.status !== 0) {
    throw new BundleError(`the bundle of ${name} does not parse:\n${result.stderr.trim()}`);
  }
}

async function main(argv) {
  const args = [...argv];
  let out;
  const o = args.indexOf('-o');
  if (o >= 0) {
    out = args[o + 1];
    args.splice(o, 2);
  }
  if (args.length !== 1 || (o >= 0 && !out) || args[0].startsWith('-')) {
    process.stderr.write('usage: weir-plugin-bundle PLUGIN.js [-o OUT.js]\n');
    return 2;
  }
  let text;
  try {
    text = await bundle(args[0]);
  } catch (e) {
    if (e instanceof BundleError || e?.code === 'ENOENT') {
      process.stderr.write(`weir-plugin-bundle: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  if (out === undefined) {
    process.stdout.write(text);
  } else {
    writeFileSync(out, text);
  }
  return 0;
}

// Run as a program (also through npm's `.bin` link), not imported.
if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  process.exitCode = await main(process.argv.slice(2));
}
