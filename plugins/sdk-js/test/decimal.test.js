// The exact decimal: the Rust SDK's `decimal.rs` examples, and the JavaScript API.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Decimal, DecimalError, MAX_DIGITS } from '../src/index.js';

const d = (text) => Decimal.parse(text);

function kind(text) {
  try {
    d(text);
  } catch (e) {
    if (e instanceof DecimalError) return e.kind;
    throw e;
  }
  return 'ok';
}

test('parses and prints PostgreSQL text keeping the scale', () => {
  for (const [text, printed] of [
    ['0', '0'],
    ['0.00', '0.00'],
    ['-0.00', '0.00'],
    ['12.340', '12.340'],
    ['-12.340', '-12.340'],
    ['007.5', '7.5'],
    ['.5', '0.5'],
    ['-.5', '-0.5'],
    ['7.', '7'],
    ['+3', '3'],
    ['0.05', '0.05'],
    ['123456789012345678901234567890.123456789', '123456789012345678901234567890.123456789'],
  ]) {
    assert.equal(d(text).toString(), printed, text);
  }
  assert.equal(d('1.50').scale, 2);
  assert.equal(d('-1.50').unscaled, -150n);
  assert.equal(`${d('2.50')}`, '2.50');
  assert.equal(JSON.stringify({ a: d('2.50') }), '{"a":"2.50"}');
});

test('refuses what is not finite decimal text, with the Rust kinds', () => {
  const invalid = ['', '-', '+', '.', '-.', '1e5', '1.2.3', ' 1', '1 ', 'abc', '--1', '0x10', '١', '1_0', 'inf', '1\n', '\ufeff1', '１'];
  for (const bad of invalid) {
    assert.equal(kind(bad), 'invalid', JSON.stringify(bad));
  }
  for (const special of ['NaN', 'Infinity', '+Infinity', '-Infinity']) {
    assert.equal(kind(special), 'not-finite', special);
  }
  assert.equal(kind('nan'), 'invalid');
  assert.equal(kind('9'.repeat(MAX_DIGITS + 1)), 'too-many-digits');
  assert.equal(kind(`0.${'1'.repeat(MAX_DIGITS)}`), 'too-many-digits');
  assert.equal(kind(`x${'9'.repeat(MAX_DIGITS + 1)}`), 'invalid', 'the form is checked before the length');
  assert.equal(d('9'.repeat(MAX_DIGITS)).toString().length, MAX_DIGITS);
  assert.equal(new DecimalError('invalid').message, 'not valid decimal text');
  assert.throws(() => Decimal.parse(1.5), TypeError);
});

test('multiplication is exact where floats are not', () => {
  for (const [a, b, product] of [
    ['0.29', '100', '29.00'],
    ['0.1', '3', '0.3'],
    ['100.00', '1.0825', '108.250000'],
    ['-1.5', '2', '-3.0'],
    ['-1.5', '-2', '3.0'],
    ['-1.5', '0.00', '0.000'],
    ['99999999999999999999.99', '99999999999999999999.99', '9999999999999999999998000000000000000000.0001'],
  ]) {
    assert.equal(d(a).mul(d(b)).toString(), product, `${a} × ${b}`);
  }
});

test('addition and subtraction align scales and handle signs', () => {
  for (const [a, b, sum] of [
    ['1.5', '2.25', '3.75'],
    ['1.50', '-1.5', '0.00'],
    ['-10', '0.01', '-9.99'],
    ['0.01', '-10', '-9.99'],
    ['999.99', '0.01', '1000.00'],
    ['-5', '-5', '-10'],
  ]) {
    assert.equal(d(a).add(d(b)).toString(), sum, `${a} + ${b}`);
  }
  assert.equal(d('1.5').sub(d('2.25')).toString(), '-0.75');
  assert.equal(d('0.10').sub(d('0.1')).toString(), '0.00');
  assert.equal(d('5').neg().toString(), '-5');
  assert.equal(d('0').neg().toString(), '0');
  assert.equal(d('-2.5').abs().toString(), '2.5');
});

test('rounds half to even symmetrically', () => {
  for (const [text, scale, rounded] of [
    ['0.125', 2, '0.12'],
    ['0.135', 2, '0.14'],
    ['0.1250001', 2, '0.13'],
    ['0.1249999', 2, '0.12'],
    ['-0.125', 2, '-0.12'],
    ['-0.135', 2, '-0.14'],
    ['2.5', 0, '2'],
    ['3.5', 0, '4'],
    ['0.5', 0, '0'],
    ['-0.5', 0, '0'],
    ['9.995', 2, '10.00'],
    ['0.004', 2, '0.00'],
    ['0.005', 2, '0.00'],
    ['0.015', 2, '0.02'],
    ['1.2', 3, '1.200'],
    ['5', 2, '5.00'],
    ['0.0000005', 2, '0.00'],
    ['-0.004', 2, '0.00'],
    ['-9.995', 2, '-10.00'],
  ]) {
    assert.equal(d(text).roundHalfEven(scale).toString(), rounded, `${text} at ${scale}`);
  }
});

test('exact rescaling refuses to drop digits', () => {
  assert.equal(d('1.500').rescaleExact(2).toString(), '1.50');
  assert.equal(d('7').rescaleExact(2).toString(), '7.00');
  assert.equal(d('-0.10').rescaleExact(1).toString(), '-0.1');
  assert.throws(() => d('1.005').rescaleExact(2), (e) => e instanceof DecimalError && e.kind === 'inexact');
  assert.ok(d('1.500').fitsScale(2));
  assert.ok(!d('1.005').fitsScale(2));
  assert.ok(d('7').fitsScale(0));
  assert.throws(() => d('1').rescaleExact(-1), TypeError);
  assert.throws(() => d('1').roundHalfEven(1.5), TypeError);
});

test('compares by value and checks numeric bounds', () => {
  assert.ok(d('1.5').equals(d('1.50')));
  assert.ok(!d('1.5').equals('1.5'));
  assert.ok(d('-2').compare(d('0')) < 0);
  assert.ok(d('0').compare(d('0.01')) < 0);
  assert.ok(d('-2.5').compare(d('-2.4')) < 0);
  assert.ok(d('10').compare(d('9.99')) > 0);
  assert.deepEqual(['10', '-1', '9.99', '0'].map(d).sort(Decimal.compare).map(String), ['-1', '0', '9.99', '10']);
  assert.ok(d('9999999999.99').fits(12, 2));
  assert.ok(d('9999999999.990').fits(12, 2));
  assert.ok(d('-9999999999.99').fits(12, 2));
  assert.ok(!d('10000000000.00').fits(12, 2));
  assert.ok(!d('-10000000000').fits(12, 2));
  assert.ok(!d('1.005').fits(12, 2));
  assert.ok(d('0.00').fits(1, 2), 'precision below scale: no integer digits');
  assert.ok(!d('1.00').fits(1, 2));
  assert.equal(d('0.05').integerDigits(), 0);
  assert.equal(d('-123.4').integerDigits(), 3);
  assert.equal(d('000.00').integerDigits(), 0);
  assert.ok(!d('-0.00').isNegative());
  assert.ok(d('-0.001').isNegative());
  assert.ok(d('0.000').isZero());
});

test('integers come in exactly, 2^53 + 1 and i64::MIN included', () => {
  assert.equal(Decimal.from(-120).toString(), '-120');
  assert.equal(Decimal.from(9007199254740993n).toString(), '9007199254740993');
  assert.equal(Decimal.from(-(2n ** 63n)).toString(), '-9223372036854775808');
  assert.throws(() => Decimal.from(2 ** 53), TypeError, 'a number past 2^53 may already be inexact');
  assert.throws(() => Decimal.from(1.5), TypeError);
  assert.equal(Decimal.ZERO.toString(), '0');
  assert.equal(new Decimal(-5n, 3).toString(), '-0.005');
  assert.throws(() => new Decimal(5, 0), TypeError);
});

test('a decimal refuses to become a number', () => {
  assert.throws(() => d('1') + 1, TypeError);
  assert.throws(() => d('1') < d('2'), TypeError);
  assert.throws(() => Number(d('1')), TypeError);
  assert.equal(String(d('1.0')), '1.0');
});
