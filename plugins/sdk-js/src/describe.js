/**
 * Describing a plugin's output: the column types, and the `Description` builder
 * (the Rust SDK's `Description::new(…).column(…)…`).
 */

const simple = (tag) => Object.freeze({ tag });

/**
 * The declared type of an output column: the WIT `column-type`. Most are values
 * (`ColumnType.bigint`); `numeric` and `varchar` are functions (`ColumnType.numeric(12,
 * 2)`, `ColumnType.numeric()` for an unconstrained `numeric`, `ColumnType.varchar(40)`,
 * `ColumnType.varchar()`). An output value is converted to the WIT value by its
 * column's type (see `Row`).
 */
export const ColumnType = Object.freeze({
  smallint: simple('smallint'),
  integer: simple('integer'),
  bigint: simple('bigint'),
  real: simple('real'),
  doublePrecision: simple('double-precision'),
  text: simple('text'),
  boolean: simple('boolean'),
  date: simple('date'),
  timestamp: simple('timestamp'),
  timestamptz: simple('timestamptz'),
  uuid: simple('uuid'),
  json: simple('json'),
  jsonb: simple('jsonb'),
  bytea: simple('bytea'),

  /** `numeric(precision, scale)` (precision 1–1000, scale 0–precision), or `numeric` with no arguments. */
  numeric(precision, scale) {
    if (precision === undefined && scale === undefined) {
      return Object.freeze({ tag: 'numeric', val: undefined });
    }
    if (!Number.isInteger(precision) || !Number.isInteger(scale)
      || precision < 1 || precision > 1000 || scale < 0 || scale > precision) {
      throw new RangeError(`numeric(${precision}, ${scale}): precision is 1 to 1000, scale 0 to precision`);
    }
    return Object.freeze({ tag: 'numeric', val: Object.freeze({ precision, scale }) });
  },

  /** `varchar(length)` (length at least 1), or `varchar` with no argument. */
  varchar(length) {
    if (length === undefined) {
      return Object.freeze({ tag: 'varchar', val: undefined });
    }
    if (!Number.isInteger(length) || length < 1 || length > 0xffffffff) {
      throw new RangeError(`varchar(${length}): the length is a whole number from 1`);
    }
    return Object.freeze({ tag: 'varchar', val: length });
  },
});

const SIMPLE_TAGS = new Set([
  'smallint', 'integer', 'bigint', 'real', 'double-precision', 'text', 'boolean', 'date',
  'timestamp', 'timestamptz', 'uuid', 'json', 'jsonb', 'bytea',
]);

// Checks that `type` is a WIT column type; a TypeError naming the column otherwise.
function checkColumnType(name, type) {
  if (type === ColumnType.numeric || type === ColumnType.varchar) {
    throw new TypeError(`column \`${name}\`: call ColumnType.${type.name}(…) (or with no arguments)`);
  }
  const ok = type !== null && typeof type === 'object' && (
    SIMPLE_TAGS.has(type.tag)
    || (type.tag === 'numeric' && (type.val === undefined
      || (Number.isInteger(type.val?.precision) && Number.isInteger(type.val?.scale))))
    || (type.tag === 'varchar' && (type.val === undefined || Number.isInteger(type.val))));
  if (!ok) {
    throw new TypeError(`column \`${name}\`: the type is not a ColumnType`);
  }
}

/** PostgreSQL's name of a column type, for messages: `numeric(12,2)`, `double precision`. */
export function typeName(type) {
  switch (type.tag) {
    case 'numeric':
      return type.val === undefined ? 'numeric' : `numeric(${type.val.precision},${type.val.scale})`;
    case 'varchar':
      return type.val === undefined ? 'varchar' : `varchar(${type.val})`;
    case 'double-precision':
      return 'double precision';
    default:
      return type.tag;
  }
}

/**
 * A plugin's description of itself and its output, built by column name:
 *
 *     new Description('orders', '1.0.0')
 *       .columnNotNull('id', ColumnType.bigint)
 *       .column('amount', ColumnType.numeric(12, 2))
 *       .grainKey(['id'])
 *       .partitionColumn('order_date')
 *
 * The plugin kind (`row`) is set by `definePlugin`.
 */
export class Description {
  #name;
  #version;
  #columns = [];
  #grainKey = [];
  #partitionColumn = '';

  /**
   * @param {string} name the plugin's name, shown in logs and lineage
   * @param {string} version its version (semver text)
   */
  constructor(name, version) {
    if (typeof name !== 'string' || typeof version !== 'string') {
      throw new TypeError('a Description takes a name and a version, both strings');
    }
    this.#name = name;
    this.#version = version;
  }

  /** Adds a nullable output column. */
  column(name, type) {
    return this.#add(name, type, true);
  }

  /** Adds an output column that never holds `null`. */
  columnNotNull(name, type) {
    return this.#add(name, type, false);
  }

  /** Sets the grain key (output column names). */
  grainKey(columns) {
    if (!Array.isArray(columns) || !columns.every((c) => typeof c === 'string')) {
      throw new TypeError('the grain key is an array of column names');
    }
    this.#grainKey = [...columns];
    return this;
  }

  /** Sets the partition column (an output column name). */
  partitionColumn(column) {
    if (typeof column !== 'string') {
      throw new TypeError('the partition column is a column name');
    }
    this.#partitionColumn = column;
    return this;
  }

  /** The plugin's name. */
  get name() {
    return this.#name;
  }

  /** The plugin's version. */
  get version() {
    return this.#version;
  }

  /** The output columns so far: `{ name, type, nullable }`, in order (a copy). */
  get columns() {
    return this.#columns.map((c) => ({ ...c }));
  }

  /**
   * Checks what the host would refuse at once: duplicate column names, and a grain
   * key or partition column that names no column. A TypeError otherwise.
   */
  check() {
    const names = new Set();
    for (const { name } of this.#columns) {
      if (names.has(name)) {
        throw new TypeError(`description: column \`${name}\` is declared twice`);
      }
      names.add(name);
    }
    for (const name of this.#grainKey) {
      if (!names.has(name)) {
        throw new TypeError(`description: grain key column \`${name}\` is not declared`);
      }
    }
    if (this.#partitionColumn !== '' && !names.has(this.#partitionColumn)) {
      throw new TypeError(`description: partition column \`${this.#partitionColumn}\` is not declared`);
    }
    return this;
  }

  /** The WIT `description` of a plugin of this `kind` (a new object every call). */
  toWit(kind) {
    return {
      name: this.#name,
      version: this.#version,
      kind,
      columns: this.#columns.map(({ name, type, nullable }) => ({ name, type, nullable })),
      grainKey: [...this.#grainKey],
      partitionColumn: this.#partitionColumn,
    };
  }

  #add(name, type, nullable) {
    if (typeof name !== 'string') {
      throw new TypeError('a column name is a string');
    }
    checkColumnType(name, type);
    this.#columns.push({ name, type, nullable });
    return this;
  }
}
