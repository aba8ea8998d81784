/**
 * `sdk-all-types`: a test plugin that reads and writes every kind of value through
 * the SDK, so that the same cases (`all-types-cases.jsonl`) check the SDK natively
 * (`plugin.test.js`, `bundle.test.js`; on both contracts) and, built as a component,
 * the bindings of ComponentizeJS (on 0.2 here; `--wit ../../../wit/transform-0.1.0
 * --world-name plugin` for 0.1):
 *
 *     node ../node/bundle.js all-types.js -o /tmp/all-types.bundle.js
 *     node ../node/componentize.js --tools ~/.cache/weir-tools/js /tmp/all-types.bundle.js \
 *         --wit ../../../wit/transform-0.2.0 --world-name transformer --disable http fetch-event -o /tmp/sdk-all-types.wasm
 *     node ../../tools/run-component-cases.mjs /tmp/sdk-all-types.wasm all-types-cases.jsonl
 *
 * Config: `places` (optional, default 4), the scale `d` may have. Every column but
 * `id` may be missing (it is null in the output). `t_raw` copies the WIT value of
 * `t` as it is: an `unsupported` value there fails the call (no output column takes
 * one).
 */

import {
  ColumnType,
  Decimal,
  Description,
  PluginError,
  Reject,
  Row,
  asciiLowerCase,
  definePlugin,
  exportPlugin,
  json,
  log,
} from '../src/index.js';

// A column by a typed getter's `OrNull` form, or null if the row has no such column.
const read = (row, getter, column) => (row.get(column) === undefined ? null : row[`${getter}OrNull`](column));

export const allTypes = definePlugin({
  describe: () => new Description('sdk-all-types', '0.1.0')
    .columnNotNull('id', ColumnType.bigint)
    .column('id_next', ColumnType.bigint)
    .column('small', ColumnType.smallint)
    .column('f', ColumnType.doublePrecision)
    .column('r', ColumnType.real)
    .column('t', ColumnType.text)
    .column('t_lower', ColumnType.varchar(20))
    .column('t_raw', ColumnType.text)
    .column('b', ColumnType.boolean)
    .column('y', ColumnType.bytea)
    .column('y_len', ColumnType.integer)
    .column('d', ColumnType.numeric())
    .column('d_fixed', ColumnType.numeric(20, 4))
    .column('d_sum', ColumnType.numeric())
    .column('dt', ColumnType.date)
    .column('dt_next', ColumnType.date)
    .column('dt_text', ColumnType.text)
    .column('ts', ColumnType.timestamp)
    .column('ts_date', ColumnType.date)
    .column('ts_text', ColumnType.text)
    .column('j', ColumnType.jsonb)
    .column('j_keys', ColumnType.json)
    .column('op', ColumnType.text)
    .column('position', ColumnType.numeric(20, 0))
    .column('committed', ColumnType.timestamptz)
    .grainKey(['id'])
    .partitionColumn('dt'),

  open(partition, config) {
    const places = config.has('places') ? config.decimal('places') : Decimal.from(4);
    if (!places.fits(1, 0)) {
      throw PluginError.invalidConfig('config `places` is not a digit');
    }
    log.debug(`sdk-all-types: partition ${partition.name}`);
    return { scale: Number(places.unscaled) };
  },

  transform(row, { scale }) {
    const id = row.int('id');
    if (id < 0n) {
      throw new Reject('id is negative');
    }
    const y = read(row, 'bytes', 'y');
    const d = read(row, 'decimal', 'd');
    if (d !== null && !d.fitsScale(scale)) {
      throw new Reject(`d has more than ${scale} decimal places`);
    }
    const dt = read(row, 'date', 'dt');
    const ts = read(row, 'timestamp', 'ts');
    const j = read(row, 'json', 'j');
    const t = row.get('t')?.tag === 'unsupported' ? null : read(row, 'text', 't');
    return new Row({
      id,
      id_next: id + 1n,
      small: read(row, 'int', 'small'),
      f: read(row, 'float', 'f'),
      r: read(row, 'float', 'r'),
      t,
      t_lower: t === null ? null : asciiLowerCase(t),
      t_raw: row.get('t') ?? null,
      b: read(row, 'boolean', 'b'),
      y,
      y_len: y === null ? null : y.length,
      d,
      d_fixed: d === null ? null : d.rescaleExact(scale),
      d_sum: d === null ? null : d.add(Decimal.parse('0.001')).sub(Decimal.parse('1')),
      dt,
      dt_next: dt === null || !dt.isFinite() ? dt : dt.addDays(1),
      dt_text: dt === null ? null : dt.toString(),
      ts,
      ts_date: ts === null || !ts.isFinite() ? null : ts.date,
      ts_text: ts === null ? null : ts.toString(),
      j,
      j_keys: j === null ? null : json(JSON.stringify(Object.keys(j.parse() ?? {}).sort())),
      op: row.op(),
      position: row.commitPosition(),
      committed: row.commitTime(),
    });
  },
});

export const transform = exportPlugin(allTypes);
