/**
 * `{{name}}`: a Weir row plugin that masks personal data, in JavaScript (generated
 * by `weir plugin new`; edit freely).
 *
 * Input: rows of a table with columns `id` (bigint), `day` (date), `email` (text),
 * `country` (text) and `amount` (numeric). Config: `salt` (required) and
 * `drop_country` (optional). Output, per row, checked in this order:
 *
 * - `id` and `day` copied;
 * - a row whose `email` has no `@` rejected with `email has no @` (it goes to the
 *   dead-letter table, or fails the job, per the table's `on_reject`); else
 *   `email_hash`, the SHA-256 of the salt followed by the email (UTF-8), as 64
 *   lower-case hex digits (null for a null email);
 * - `country` upper-cased (ASCII letters only, so every language agrees); a row whose
 *   country is `drop_country` (compared upper-cased) dropped (filtered out);
 * - `amount` copied exactly, whatever its scale.
 *
 * `cases.jsonl` holds this plugin's test cases: `weir plugin test {{name}}.wasm
 * --cases cases.jsonl` runs them in Weir's own host, and `node --test plugin.test.js`
 * runs them natively. The SDK is `sdk/` (`@weir/plugin`: typed getters with fixed
 * rejection texts, integers as BigInt, exact decimals, rows built by column name). A
 * plugin is one module: `build.sh` bundles it with the SDK for ComponentizeJS.
 */

import {
  ColumnType,
  Description,
  Reject,
  Row,
  asciiUpperCase,
  definePlugin,
  exportPlugin,
  sha256Hex,
} from './sdk/src/index.js';

export const plugin = definePlugin({
  describe: new Description('{{name}}', '0.1.0')
    .columnNotNull('id', ColumnType.bigint)
    .column('day', ColumnType.date)
    .column('email_hash', ColumnType.text)
    .column('country', ColumnType.text)
    .column('amount', ColumnType.numeric())
    .grainKey(['id'])
    .partitionColumn('day'),

  // Once per partition job: the config.
  open(_partition, config) {
    const drop = config.get('drop_country');
    return {
      salt: config.require('salt'),
      dropCountry: drop === undefined ? null : asciiUpperCase(drop),
    };
  },

  // Once per row: a Row, null to drop the row, or throw a Reject.
  transform(row, { salt, dropCountry }) {
    const id = row.int('id');
    const day = row.dateOrNull('day');
    const email = row.textOrNull('email');
    if (email !== null && !email.includes('@')) {
      throw new Reject('email has no @');
    }
    const emailHash = email === null ? null : sha256Hex(salt + email);
    const raw = row.textOrNull('country');
    const country = raw === null ? null : asciiUpperCase(raw);
    if (country !== null && country === dropCountry) {
      return null;
    }
    const amount = row.decimalOrNull('amount');
    return new Row({ id, day, email_hash: emailHash, country, amount });
  },
});

/** The component's `weir:transform/transform` interface (contract 0.2 as build.sh builds it, or 0.1). */
export const transform = exportPlugin(plugin);
