/**
 * The JSON-lines plugin test cases, for JavaScript: the JavaScript SDK's case runner
 * (`../sdk-js/node/cases.js`; the format is documented in `plugins/sdk/src/cases.rs`),
 * which runs a case through a `transform` interface as the component bindings shape
 * it: `{ describe, Session }`, variants as `{ tag, val }`, `s64`/`u64` as BigInt.
 * That is the shape of any component transpiled by jco, so `run-component-cases.mjs`
 * checks components of every language with it.
 */

export * from '../sdk-js/node/cases.js';
