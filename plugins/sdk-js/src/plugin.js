/**
 * Row plugins: `definePlugin` (the Rust SDK's `RowPlugin`) and `exportPlugin` (its
 * `export_row_plugin!`), which makes the `transform` interface the component
 * exports: `{ describe, Session }`, shaped as ComponentizeJS's bindings call it, for
 * either contract (`weir:transform@0.2.0` or `@0.1.0`: the world the component is
 * built for decides which the bindings call).
 */

import { Description } from './describe.js';
import { PluginError, Reject } from './errors.js';
import { Config, Input, InputSchema } from './input.js';
import { Row, outputSchema, rowValues } from './row.js';

/** A row plugin made by `definePlugin`. */
class RowPlugin {
  #description;
  #open;
  #transform;

  constructor(description, open, transform) {
    this.#description = description;
    this.#open = open;
    this.#transform = transform;
    Object.freeze(this);
  }

  /** The plugin's `Description`. */
  get description() {
    return this.#description;
  }

  /** The plugin's `open(partition, config)`. */
  get open() {
    return this.#open;
  }

  /** The plugin's `transform(row, state)`. */
  get transform() {
    return this.#transform;
  }
}

/**
 * Defines a row plugin: the output of a row depends only on that row (and the
 * config).
 *
 * - `describe`: a `Description`, or a function returning one (called once, when the
 *   module loads: a component's description is a constant of its bytes).
 * - `open(partition, config)` (optional): starts a partition job, once per session:
 *   `partition` is `{ table, name }`, `config` a `Config`. Parse the config here and
 *   return what `transform` needs (any value: the session's state). Throw a
 *   `PluginError` (`PluginError.invalidConfig(…)`; `Config`'s getters throw theirs)
 *   to fail the job: as in the Rust SDK, the error is returned by every `push` and
 *   by `finish` (the contract's constructor cannot fail).
 * - `transform(row, state)`: one input row (an `Input`) and what `open` returned.
 *   Return a `Row` to output it, or `null` to drop the row; throw a `Reject` to
 *   refuse it with a reason (the typed getters of `Input` do so), or a `PluginError`
 *   to fail the call. Rows whose op is `delete` are skipped (a deleted row has no
 *   output).
 *
 * Anything else thrown by `open` or `transform` (a `TypeError`, a `DecimalError`, …)
 * is a plugin bug: it fails the call with a WIT `other` error that names it, rather
 * than trapping.
 */
export function definePlugin({ describe, open = () => undefined, transform } = {}) {
  const description = typeof describe === 'function' ? describe() : describe;
  if (!(description instanceof Description)) {
    throw new TypeError('definePlugin: `describe` is a Description or a function returning one');
  }
  if (typeof open !== 'function' || typeof transform !== 'function') {
    throw new TypeError('definePlugin: `open` (optional) and `transform` are functions');
  }
  description.check();
  return new RowPlugin(description, open, transform);
}

// A thrown value as the WIT error of a call to `what`: a PluginError as it is,
// anything else as `other` (a plugin bug).
function asPluginError(e, what) {
  if (e instanceof PluginError) {
    return e;
  }
  if (e instanceof Reject) {
    return new PluginError('other', `${what} threw a Reject outside transform: ${e.reason}`);
  }
  const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  return new PluginError('other', `${what} threw ${text}`);
}

/** The contracts a session made by `exportPlugin` speaks. */
export const CONTRACTS = Object.freeze(['0.1', '0.2']);

/**
 * The `transform` interface of a row plugin, for the component to export:
 *
 *     export const transform = exportPlugin(myPlugin);
 *
 * `myPlugin` is what `definePlugin` returns (or the object `definePlugin` takes).
 * The result is `{ describe, Session }`: `describe()` returns the WIT description
 * (kind `row`), and `Session` is the `session` resource, run as the Rust SDK's row
 * session: constructed with the partition and the config, one `push` per chunk of
 * staged rows, then `finish`. Each output row is converted to WIT values by the
 * declared column types (see `Row`); each rejection carries the input row's key
 * exactly as pushed.
 *
 * The one interface serves both contracts, and the world the component is built
 * for picks one (ComponentizeJS binds the module's `transform` export to
 * `weir:transform/transform@0.2.0` or `@0.1.0` alike):
 *
 * - 0.2 (world `transformer`): `new Session(partition, schema, config)`, staged rows
 *   with `values` by position in `schema` (names resolved once per session, in an
 *   `InputSchema`), every result with `more: false` (a row plugin's output comes in
 *   one part), and `next()`, which has nothing to give (an `other` error, as in the
 *   Rust SDK);
 * - 0.1 (world `plugin`): `new Session(partition, config)`, staged rows with
 *   `columns` by name, results `{ rows, rejections }`.
 *
 * `Session.contracts` lists both (`['0.1', '0.2']`), for the case runner.
 */
export function exportPlugin(plugin) {
  const { description, open, transform } = plugin instanceof RowPlugin ? plugin : definePlugin(plugin);
  const witDescription = description.toWit('row');
  const schema = outputSchema(witDescription.columns);

  function describe() {
    return description.toWit('row');
  }

  // Transforms a chunk of staged rows into `out` and `rejections`, skipping deletes.
  // `input(staged)` makes each row's Input.
  function transformRows(rows, state, input, out, rejections) {
    for (let i = 0; i < rows.length; i++) {
      const staged = rows[i];
      if (staged.op === 'delete') {
        continue;
      }
      let row;
      try {
        row = transform(input(staged), state);
      } catch (e) {
        if (e instanceof Reject) {
          rejections.push({ key: staged.key, reason: e.reason });
          continue;
        }
        throw asPluginError(e, 'transform');
      }
      if (row === null) {
        continue;
      }
      if (!(row instanceof Row)) {
        throw new PluginError('other', `transform returned ${row === undefined ? 'undefined' : 'something else'}: return a Row, or null to drop the row`);
      }
      out.push(rowValues(row, schema));
    }
  }

  const named = (staged) => new Input(staged);

  class Session {
    static contracts = CONTRACTS;

    #state;
    #error = null;
    // Contract 0.2: the input schema, and a function making a row's Input; 0.1: null.
    #schema = null;
    #input = named;

    /**
     * `new Session(partition, schema, config)` on contract 0.2, `new
     * Session(partition, config)` on 0.1.
     */
    constructor(partition, schemaOrConfig, config) {
      let entries = config;
      if (config === undefined) {
        entries = schemaOrConfig;
      } else {
        let inputSchema;
        try {
          inputSchema = new InputSchema(schemaOrConfig);
        } catch (e) {
          inputSchema = new InputSchema({ columns: [], key: [] });
          this.#error = new PluginError('invalid-input', `the input schema is not valid: ${e.message}`);
        }
        this.#schema = inputSchema;
        this.#input = (staged) => new Input(staged, inputSchema);
      }
      if (this.#error !== null) {
        return;
      }
      try {
        this.#state = open({ table: partition.table, name: partition.name }, new Config(entries));
      } catch (e) {
        this.#error = asPluginError(e, 'open');
      }
    }

    #check() {
      if (this.#error !== null) {
        throw new PluginError(this.#error.payload.tag, this.#error.payload.val);
      }
    }

    // A call's result, in the shape of the session's contract.
    #result(rows, rejections) {
      return this.#schema === null ? { rows, rejections } : { rows, rejections, more: false };
    }

    push(rows) {
      this.#check();
      const out = [];
      const rejections = [];
      transformRows(rows, this.#state, this.#input, out, rejections);
      return this.#result(out, rejections);
    }

    /** Contract 0.2: a row plugin's output is never in parts, so there is nothing to give. */
    next() {
      throw new PluginError('other', '`next` called with no output pending');
    }

    finish() {
      this.#check();
      return this.#result([], []);
    }
  }

  return Object.freeze({ describe, Session });
}
