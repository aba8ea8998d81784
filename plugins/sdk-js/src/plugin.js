/**
 * Row plugins: `definePlugin` (the Rust SDK's `RowPlugin`) and `exportPlugin` (its
 * `export_row_plugin!`), which makes the `transform` interface the component
 * exports: `{ describe, Session }`, shaped as ComponentizeJS's bindings call it.
 */

import { Description } from './describe.js';
import { PluginError, Reject } from './errors.js';
import { Config, Input } from './input.js';
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
 */
export function exportPlugin(plugin) {
  const { description, open, transform } = plugin instanceof RowPlugin ? plugin : definePlugin(plugin);
  const witDescription = description.toWit('row');
  const schema = outputSchema(witDescription.columns);

  function describe() {
    return description.toWit('row');
  }

  class Session {
    #state;
    #error = null;

    constructor(partition, config) {
      try {
        this.#state = open({ table: partition.table, name: partition.name }, new Config(config));
      } catch (e) {
        this.#error = asPluginError(e, 'open');
      }
    }

    #check() {
      if (this.#error !== null) {
        throw new PluginError(this.#error.payload.tag, this.#error.payload.val);
      }
    }

    push(rows) {
      this.#check();
      const state = this.#state;
      const out = [];
      const rejections = [];
      for (const staged of rows) {
        if (staged.op === 'delete') {
          continue;
        }
        let row;
        try {
          row = transform(new Input(staged), state);
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
      return { rows: out, rejections };
    }

    finish() {
      this.#check();
      return { rows: [], rejections: [] };
    }
  }

  return Object.freeze({ describe, Session });
}
