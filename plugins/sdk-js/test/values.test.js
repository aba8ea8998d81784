// PlainDate, Timestamp, Json and the ASCII case mappings.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Json, PlainDate, Timestamp, asciiLowerCase, asciiUpperCase, json, sha256Hex } from '../src/index.js';

test('PlainDate agrees with Date on the calendar, day by day across 800 years and more', () => {
  for (let days = -150000; days <= 150000; days += 7) {
    const utc = new Date(days * 86400000);
    const date = PlainDate.fromDays(days);
    assert.deepEqual([date.year, date.month, date.day], [utc.getUTCFullYear(), utc.getUTCMonth() + 1, utc.getUTCDate()], `${days}`);
    assert.equal(PlainDate.of(date.year, date.month, date.day).days, days);
  }
  for (const days of [-100000000, -719528, -719529, 0, 2932896, 100000000]) {
    const utc = new Date(days * 86400000);
    const date = new PlainDate(days);
    assert.deepEqual([date.year, date.month, date.day], [utc.getUTCFullYear(), utc.getUTCMonth() + 1, utc.getUTCDate()], `${days}`);
    assert.ok(date.toDate().getTime() === utc.getTime());
    assert.ok(PlainDate.fromDate(utc).equals(date));
  }
});

test('PlainDate prints as PostgreSQL does, and keeps the infinities', () => {
  assert.equal(PlainDate.of(2026, 3, 1).days, 20513);
  assert.equal(String(PlainDate.fromDays(20513)), '2026-03-01');
  assert.equal(String(PlainDate.of(1, 1, 1)), '0001-01-01');
  assert.equal(String(PlainDate.of(0, 12, 31)), '0001-12-31 BC');
  assert.equal(String(PlainDate.of(-43, 3, 15)), '0044-03-15 BC');
  assert.equal(String(PlainDate.of(10000, 1, 1)), '10000-01-01');
  assert.equal(String(PlainDate.of(5874897, 12, 31)), '5874897-12-31', "PostgreSQL's last date");
  assert.equal(PlainDate.of(5874897, 12, 31).days, 2145042905);
  assert.equal(String(PlainDate.INFINITY), 'infinity');
  assert.equal(String(PlainDate.NEGATIVE_INFINITY), '-infinity');
  assert.equal(PlainDate.INFINITY.days, 2147483647);
  assert.equal(PlainDate.NEGATIVE_INFINITY.days, -2147483648);
  assert.ok(PlainDate.fromDays(2147483647).equals(PlainDate.INFINITY));
  assert.ok(!PlainDate.INFINITY.isFinite());
  assert.ok(PlainDate.fromDays(2147483646).isFinite());
  assert.throws(() => PlainDate.INFINITY.year, RangeError);
  assert.throws(() => PlainDate.INFINITY.toDate(), RangeError);
  assert.throws(() => PlainDate.fromDays(2145042905).toDate(), RangeError, 'past what Date holds');
  assert.throws(() => PlainDate.INFINITY.addDays(1), RangeError);
  assert.throws(() => PlainDate.fromDays(2147483646).addDays(1), RangeError, 'not onto the sentinel');
  assert.equal(JSON.stringify([PlainDate.fromDays(0)]), '["1970-01-01"]');
});

test('PlainDate refuses what is not a date', () => {
  assert.throws(() => PlainDate.of(2026, 2, 29), RangeError);
  assert.ok(PlainDate.of(2024, 2, 29));
  assert.throws(() => PlainDate.of(1900, 2, 29), RangeError);
  assert.ok(PlainDate.of(2000, 2, 29));
  assert.throws(() => PlainDate.of(2026, 13, 1), RangeError);
  assert.throws(() => PlainDate.of(2026, 4, 31), RangeError);
  assert.throws(() => new PlainDate(1.5), RangeError);
  assert.throws(() => new PlainDate(2 ** 31), RangeError);
  assert.throws(() => PlainDate.fromDate(new Date(Date.UTC(2026, 2, 1, 12))), RangeError);
  assert.throws(() => PlainDate.fromDate(new Date(NaN)), RangeError);
  assert.equal(PlainDate.fromDays(10).addDays(-11).days, -1);
  assert.ok(PlainDate.compare(PlainDate.fromDays(1), PlainDate.fromDays(2)) < 0);
});

test('Timestamp keeps microseconds, prints as PostgreSQL does, and converts to Date', () => {
  const t = Timestamp.fromMicros(1772366400123456n);
  assert.equal(t.micros, 1772366400123456n);
  assert.equal(String(t), '2026-03-01 12:00:00.123456');
  assert.equal(String(Timestamp.fromMicros(1772366400500000n)), '2026-03-01 12:00:00.5');
  assert.equal(String(Timestamp.fromMicros(0n)), '1970-01-01 00:00:00');
  assert.equal(String(Timestamp.fromMicros(-1n)), '1969-12-31 23:59:59.999999');
  assert.equal(String(Timestamp.fromMicros(-62135596800000000n - 1n)), '0001-12-31 23:59:59.999999 BC');
  assert.equal(t.toDate().toISOString(), '2026-03-01T12:00:00.123Z');
  assert.equal(Timestamp.fromMicros(-1n).toDate().getTime(), -1, 'truncated towards the past');
  assert.equal(Timestamp.fromDate(new Date('2026-03-01T12:00:00.123Z')).micros, 1772366400123000n);
  assert.ok(t.date.equals(PlainDate.of(2026, 3, 1)));
  assert.ok(Timestamp.fromMicros(-1n).date.equals(PlainDate.of(1969, 12, 31)));
  assert.equal(String(Timestamp.INFINITY), 'infinity');
  assert.equal(Timestamp.INFINITY.micros, 9223372036854775807n);
  assert.equal(Timestamp.NEGATIVE_INFINITY.micros, -9223372036854775808n);
  assert.ok(!Timestamp.NEGATIVE_INFINITY.isFinite());
  assert.throws(() => Timestamp.INFINITY.toDate(), RangeError);
  assert.throws(() => Timestamp.INFINITY.date, RangeError);
  assert.throws(() => Timestamp.fromMicros(9223372036854775807n - 1n).toDate(), RangeError);
  assert.throws(() => Timestamp.fromMicros(2n ** 63n), RangeError);
  assert.throws(() => Timestamp.fromMicros(5), RangeError);
  assert.ok(Timestamp.fromMicros(5n).equals(Timestamp.fromMicros(5n)));
  assert.ok(Timestamp.compare(Timestamp.fromMicros(5n), Timestamp.fromMicros(6n)) < 0);
});

test('Json keeps its text', () => {
  const j = json('{"b": 1, "a": [1, 2]}');
  assert.equal(j.text, '{"b": 1, "a": [1, 2]}');
  assert.deepEqual(j.parse(), { b: 1, a: [1, 2] });
  assert.ok(j instanceof Json);
  assert.equal(Json.stringify({ a: 1 }).text, '{"a":1}');
  assert.throws(() => Json.stringify(undefined), TypeError);
  assert.throws(() => json({ a: 1 }), TypeError);
});

test('ASCII case mapping leaves every other character as it is', () => {
  assert.equal(asciiUpperCase('straße é ǆ ﬁ a-z'), 'STRAßE é ǆ ﬁ A-Z');
  assert.equal(asciiLowerCase('STRASSE É ǅ A-Z'), 'strasse É ǅ a-z');
  // ASCII text (the built-in's path) and text with one character beyond it.
  const ascii = Array.from({ length: 128 }, (_, i) => String.fromCharCode(i)).join('');
  const upper = ascii.replace(/[a-z]/g, (c) => String.fromCharCode(c.charCodeAt(0) - 32));
  const lower = ascii.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
  assert.equal(asciiUpperCase(ascii), upper);
  assert.equal(asciiLowerCase(ascii), lower);
  assert.equal(asciiUpperCase(`${ascii}\u0080`), `${upper}\u0080`);
  assert.equal(asciiLowerCase(`\u{1F600}${ascii}`), `\u{1F600}${lower}`);
  assert.equal(asciiUpperCase(''), '');
});

test('sha256Hex: the FIPS 180-4 vectors, every padding boundary, strings as UTF-8', async () => {
  const { createHash } = await import('node:crypto');
  assert.equal(sha256Hex(''), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  assert.equal(sha256Hex('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  assert.equal(sha256Hex('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'),
    '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1');
  assert.equal(sha256Hex('a'.repeat(1000000)), 'cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0');
  const node = (bytes) => createHash('sha256').update(bytes).digest('hex');
  for (let n = 0; n <= 200; n++) {
    const bytes = Uint8Array.from({ length: n }, (_, i) => (i * 37 + n) & 0xff);
    assert.equal(sha256Hex(bytes), node(bytes), `${n} bytes`);
  }
  for (const text of ['\ufeffs1ann@example.com', 'sält \u00a0ann@example.com', '\u{1F600}', 'a\ud800b']) {
    assert.equal(sha256Hex(text), node(Buffer.from(new TextEncoder().encode(text))), JSON.stringify(text));
  }
  assert.throws(() => sha256Hex(5), TypeError);
  assert.throws(() => sha256Hex([1, 2]), TypeError);
});
