/**
 * `@weir/plugin`: the JavaScript guest SDK for Weir transform plugins (components
 * of `weir:transform@0.2.0`, or of `@0.1.0` from the same code, built with
 * ComponentizeJS). See README.md.
 *
 * Everything here runs both in Node (natively, for tests) and in the component;
 * the case runner for Node is `@weir/plugin/cases`, the bundler that makes the
 * component's single module `weir-plugin-bundle`.
 */

export { Decimal, DecimalError, MAX_DIGITS } from './decimal.js';
export { ColumnType, Description } from './describe.js';
export { PluginError, Reject } from './errors.js';
export { Config, Input, InputSchema } from './input.js';
export { log } from './log.js';
export { definePlugin, exportPlugin } from './plugin.js';
export { Row } from './row.js';
export { Json, PlainDate, Timestamp, asciiLowerCase, asciiUpperCase, json, sha256Hex } from './values.js';
