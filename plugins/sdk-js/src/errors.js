/**
 * What a plugin throws: a `Reject` refuses one input row, a `PluginError` fails the
 * whole call (and so the partition job).
 */

/**
 * Why one input row is refused: it becomes a WIT `rejection` (the row goes to the
 * dead-letter table with this reason, or fails the job, per the table's
 * `on_reject`). The reason is part of the plugin's deterministic output: it must
 * depend only on the row and the config, and must not contain secrets.
 */
export class Reject extends Error {
  /** @param {string} reason */
  constructor(reason) {
    if (typeof reason !== 'string') {
      throw new TypeError('a rejection reason is a string');
    }
    super(reason);
    this.name = 'Reject';
    this.reason = reason;
  }
}

const ERROR_TAGS = new Set(['invalid-config', 'invalid-input', 'other']);

/**
 * An error that fails the whole call: the WIT `error`. Its own `payload` property
 * is the error variant (`{ tag: 'invalid-config' | 'invalid-input' | 'other', val:
 * message }`), which is how the component bindings return a thrown value as the
 * call's `err`.
 */
export class PluginError extends Error {
  /**
   * @param {'invalid-config' | 'invalid-input' | 'other'} tag
   * @param {string} message
   */
  constructor(tag, message) {
    if (!ERROR_TAGS.has(tag)) {
      throw new TypeError(`a PluginError is invalid-config, invalid-input or other, not ${tag}`);
    }
    super(String(message));
    this.name = 'PluginError';
    this.payload = { tag, val: String(message) };
  }

  /** The config is missing a key, or a value does not parse (name the key, never the value). */
  static invalidConfig(message) {
    return new PluginError('invalid-config', message);
  }

  /** The input cannot be handled at all (name the column). */
  static invalidInput(message) {
    return new PluginError('invalid-input', message);
  }

  /** Anything else (a plugin bug, for instance). */
  static other(message) {
    return new PluginError('other', message);
  }

  /** The WIT error tag. */
  get tag() {
    return this.payload.tag;
  }
}
