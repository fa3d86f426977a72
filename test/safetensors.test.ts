import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { readHeader, readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { expectInputError, expectSameBits, fixture, floatBits, readJson, tempDir } from './helpers.js';

type JsonNumber = number | string;
interface DtypeCase {
  dtype: string;
  shape: number[];
  values: JsonNumber[] | JsonNumber[][];
}
type DtypeFixture = Record<'bf16' | 'f16' | 'f32' | 'matrix_f32', DtypeCase> & { inputs: JsonNumber[] };

/** The fixture spells -0, Infinity and NaN as strings; Number() reads all of them. */
function toNumber(v: JsonNumber): number {
  return typeof v === 'number' ? v : Number(v);
}


/** Element-wise Object.is (so -0 !== 0 and NaN === NaN), with the first difference in the message. */
function expectSameFloats(actual: Float32Array, expected: ArrayLike<number>, label: string): void {
  expect(actual.length, `${label} length`).to.equal(expected.length);
  for (let i = 0; i < expected.length; i++) {
    expect(Object.is(actual[i], expected[i]), `${label}[${i}]: got ${Object.is(actual[i], -0) ? '-0' : actual[i]}, want ${Object.is(expected[i], -0) ? '-0' : expected[i]}`).to.equal(true);
  }
}



/** A safetensors file from a header object and raw data bytes, with a correct length prefix. */
function rawSafetensors(file: string, header: unknown, data: Uint8Array = new Uint8Array(0), headerText?: string): void {
  const json = Buffer.from(headerText ?? JSON.stringify(header), 'utf8');
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(file, Buffer.concat([length, json, data]));
}

const SCRATCH = tempDir('flowrl-safetensors-');
function scratch(): string {
  return fs.mkdtempSync(path.join(SCRATCH, 'd-'));
}

/** A deterministic pseudo-random float32 array (LCG), mixing magnitudes. */
function randomFloats(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const u = s / 2 ** 32;
    out[i] = (u - 0.5) * 10 ** ((s % 13) - 6);
  }
  return out;
}

describe('safetensors: reading the dtypes fixture', () => {
  const expected = readJson<DtypeFixture>(fixture('dtypes.json'));
  const file = fixture('dtypes.safetensors');

  it('lists the four tensors with their stored dtypes and shapes', () => {
    const header = readHeader(file);
    expect([...header.tensors.keys()].sort()).to.deep.equal(['bf16', 'f16', 'f32', 'matrix_f32']);
    for (const name of ['bf16', 'f16', 'f32', 'matrix_f32'] as const) {
      const entry = header.tensors.get(name)!;
      expect(entry.dtype, name).to.equal(expected[name].dtype);
      expect(entry.shape, name).to.deep.equal(expected[name].shape);
    }
    expect(header.metadata).to.deep.equal({ format: 'pt' });
    expect(header.dataStart).to.equal(8 + Number(fs.readFileSync(file).readBigUInt64LE(0)));
  });

  for (const name of ['bf16', 'f16', 'f32'] as const) {
    it(`upcasts ${name} to exactly the float32 values in dtypes.json (including -0 and ±Infinity)`, () => {
      const want = (expected[name].values as JsonNumber[]).map(toNumber);
      // The fixture's numbers are exact float32 values; a rounding difference would be a fixture error.
      want.forEach((v, i) => expect(Object.is(Math.fround(v), v), `fixture ${name}[${i}] is a float32`).to.equal(true));
      const tensor = readTensors(file, [name]).get(name)!;
      expect(tensor.storedDtype).to.equal(expected[name].dtype);
      expect(tensor.shape).to.deep.equal(expected[name].shape);
      expectSameFloats(tensor.data, want, name);
    });
  }

  it('reads the fixture cases that need care: negative zero, bf16 rounding, f16 overflow and subnormals', () => {
    const all = readTensors(file);
    expect(Object.is(all.get('bf16')!.data[1], -0)).to.equal(true);
    expect(Object.is(all.get('f16')!.data[1], -0)).to.equal(true);
    expect(all.get('bf16')!.data[5]).to.equal(65536); // 65504 rounds up in bf16
    expect(all.get('f16')!.data[8]).to.equal(Infinity); // 1e30 overflows f16
    expect(all.get('f16')!.data[6]).to.equal(2 ** -24); // smallest f16 subnormal
  });

  it('reads matrix_f32 as shape [3, 5] in row-major order', () => {
    const tensor = readTensors(file, ['matrix_f32']).get('matrix_f32')!;
    expect(tensor.shape).to.deep.equal([3, 5]);
    const rows = expected.matrix_f32.values as number[][];
    expectSameFloats(tensor.data, rows.flat(), 'matrix_f32');
    expect(tensor.data[1 * 5 + 2]).to.equal(7); // row 1, column 2
  });

  it('reads only the tensors asked for, and names a missing one', () => {
    const some = readTensors(file, ['f32']);
    expect([...some.keys()]).to.deep.equal(['f32']);
    expectInputError(() => readTensors(file, ['f32', 'nope']), file, "'nope'", 'missing');
  });
});

describe('safetensors: writing', () => {
  function specials(): Float32Array {
    const out = new Float32Array(12);
    const u = floatBits(out);
    u[0] = 0x7fc00000; // NaN
    u[1] = 0xffc00001; // negative NaN with a payload
    u[2] = 0x7f800001; // signalling NaN
    u[3] = 0x80000000; // -0
    u[4] = 0x00000001; // smallest subnormal
    u[5] = 0x807fffff; // largest negative subnormal
    u[6] = 0x7f800000; // Infinity
    u[7] = 0xff800000; // -Infinity
    u[8] = 0x7f7fffff; // largest finite
    u[9] = 0x00800000; // smallest normal
    out[10] = 1 / 3;
    out[11] = -1e-30;
    return out;
  }

  it('round-trips bit-exactly: NaN payloads, -0, subnormals, infinities and random values', () => {
    const dir = scratch();
    const file = path.join(dir, 'rt.safetensors');
    const tensors = new Map<string, { shape: number[]; data: Float32Array }>([
      ['specials', { shape: [3, 4], data: specials() }],
      ['random.weight', { shape: [7, 11, 3], data: randomFloats(231, 42) }],
      ['scalar', { shape: [], data: Float32Array.of(-2.5) }],
      ['empty', { shape: [0, 4], data: new Float32Array(0) }],
      ['a.bias', { shape: [5], data: randomFloats(5, 7) }],
    ]);
    writeSafetensors(file, tensors, { format: 'pt', note: 'round trip' });
    const header = readHeader(file);
    expect(header.metadata).to.deep.equal({ format: 'pt', note: 'round trip' });
    const back = readTensors(file);
    expect([...back.keys()].sort()).to.deep.equal([...tensors.keys()].sort());
    for (const [name, { shape, data }] of tensors) {
      const got = back.get(name)!;
      expect(got.shape, name).to.deep.equal(shape);
      expect(got.storedDtype, name).to.equal('F32');
      expectSameBits(got.data, data, name);
    }
  });

  it('writes a subarray view (non-zero byteOffset) as its own values only', () => {
    const dir = scratch();
    const file = path.join(dir, 'view.safetensors');
    const backing = randomFloats(20, 3);
    const view = backing.subarray(5, 11);
    writeSafetensors(file, new Map([['v', { shape: [2, 3], data: view }]]));
    expectSameBits(readTensors(file).get('v')!.data, Float32Array.from(view), 'v');
    expect(fs.statSync(file).size).to.equal(readHeader(file).dataStart + 6 * 4);
  });

  it('pads the header so 8 + header length is a multiple of 8, for every name length', () => {
    const dir = scratch();
    for (let n = 1; n <= 9; n++) {
      const file = path.join(dir, `pad${n}.safetensors`);
      const name = 'x'.repeat(n);
      writeSafetensors(file, new Map([[name, { shape: [2], data: Float32Array.of(1, 2) }]]));
      const bytes = fs.readFileSync(file);
      const headerLength = Number(bytes.readBigUInt64LE(0));
      expect((8 + headerLength) % 8, `name length ${n}`).to.equal(0);
      expect(bytes.length).to.equal(8 + headerLength + 8);
      // The padded header is still the JSON it claims to be.
      const json = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
      expect(json[name]).to.deep.equal({ dtype: 'F32', shape: [2], data_offsets: [0, 8] });
      expect(readHeader(file).dataStart).to.equal(8 + headerLength);
    }
  });

  it('lays tensors out contiguously in name order, covering the whole data section', () => {
    const dir = scratch();
    const file = path.join(dir, 'order.safetensors');
    writeSafetensors(
      file,
      new Map([
        ['b', { shape: [3], data: Float32Array.of(1, 2, 3) }],
        ['a', { shape: [2, 2], data: Float32Array.of(4, 5, 6, 7) }],
        ['c', { shape: [1], data: Float32Array.of(8) }],
      ]),
    );
    const header = readHeader(file);
    const entries = [...header.tensors.entries()].sort((x, y) => x[1].data_offsets[0] - y[1].data_offsets[0]);
    expect(entries.map(([n]) => n)).to.deep.equal(['a', 'b', 'c']);
    expect(entries.map(([, e]) => e.data_offsets)).to.deep.equal([
      [0, 16],
      [16, 28],
      [28, 32],
    ]);
    expect(fs.statSync(file).size - header.dataStart).to.equal(32);
  });

  it('refuses data whose length does not match the shape', () => {
    const dir = scratch();
    expect(() => writeSafetensors(path.join(dir, 'bad.safetensors'), new Map([['w', { shape: [2, 3], data: new Float32Array(5) }]]))).to.throw(/w has 5 values for shape \[2,3\]/);
  });
});

describe('safetensors: corrupt files are InputErrors naming the file', () => {
  let dir: string;
  let valid: Buffer;
  before(() => {
    dir = scratch();
    const file = path.join(dir, 'valid.safetensors');
    writeSafetensors(file, new Map([['w', { shape: [4, 4], data: randomFloats(16, 1) }]]));
    valid = fs.readFileSync(file);
  });

  it('empty file', () => {
    const file = path.join(dir, 'empty.safetensors');
    fs.writeFileSync(file, '');
    expectInputError(() => readHeader(file), file);
    expectInputError(() => readTensors(file), file);
  });

  it('a file shorter than the 8-byte length prefix', () => {
    const file = path.join(dir, 'short.safetensors');
    fs.writeFileSync(file, Buffer.from([1, 2, 3]));
    expectInputError(() => readTensors(file), file);
  });

  it('truncated data (the last bytes cut off)', () => {
    const file = path.join(dir, 'truncated.safetensors');
    fs.writeFileSync(file, valid.subarray(0, valid.length - 3));
    expectInputError(() => readTensors(file), file, "'w'");
  });

  it('a header length larger than the file', () => {
    const file = path.join(dir, 'long-header.safetensors');
    const bytes = Buffer.from(valid);
    bytes.writeBigUInt64LE(BigInt(valid.length * 10), 0);
    fs.writeFileSync(file, bytes);
    expectInputError(() => readTensors(file), file, 'header length');
  });

  it('a header length of zero or beyond any sane size', () => {
    const zero = path.join(dir, 'zero-header.safetensors');
    rawSafetensors(zero, undefined, new Uint8Array(16), '');
    expectInputError(() => readHeader(zero), zero);
    const huge = path.join(dir, 'huge-header.safetensors');
    const bytes = Buffer.from(valid);
    bytes.writeBigUInt64LE(2n ** 63n, 0);
    fs.writeFileSync(huge, bytes);
    expectInputError(() => readHeader(huge), huge);
  });

  it('a header that is not JSON', () => {
    const file = path.join(dir, 'not-json.safetensors');
    rawSafetensors(file, undefined, new Uint8Array(8), '{"w": {dtype: F32}} ');
    expectInputError(() => readTensors(file), file, 'JSON');
  });

  it('a header that is JSON but not an object', () => {
    const file = path.join(dir, 'array-header.safetensors');
    rawSafetensors(file, [1, 2, 3]);
    expectInputError(() => readHeader(file), file);
  });

  it('a tensor entry without dtype, shape or data_offsets', () => {
    const file = path.join(dir, 'no-shape.safetensors');
    rawSafetensors(file, { w: { dtype: 'F32', data_offsets: [0, 16] } }, new Uint8Array(16));
    expectInputError(() => readHeader(file), file, "'w'");
  });

  it("a tensor whose data_offsets don't match its shape", () => {
    const file = path.join(dir, 'offsets.safetensors');
    rawSafetensors(file, { w: { dtype: 'F32', shape: [2, 2], data_offsets: [0, 12] } }, new Uint8Array(16));
    expectInputError(() => readTensors(file), file, "'w'", 'data_offsets');
  });

  it('data_offsets that run past the end of the file', () => {
    const file = path.join(dir, 'past-end.safetensors');
    rawSafetensors(file, { w: { dtype: 'F32', shape: [4], data_offsets: [8, 24] } }, new Uint8Array(16));
    expectInputError(() => readTensors(file), file, "'w'");
  });

  it('negative or fractional shape dimensions', () => {
    const file = path.join(dir, 'neg-shape.safetensors');
    rawSafetensors(file, { w: { dtype: 'F32', shape: [-2, -2], data_offsets: [0, 16] } }, new Uint8Array(16));
    expectInputError(() => readHeader(file), file, "'w'");
  });

  it('an unsupported dtype (I64), naming the dtype and the tensor', () => {
    const file = path.join(dir, 'i64.safetensors');
    rawSafetensors(file, { ids: { dtype: 'I64', shape: [2], data_offsets: [0, 16] } }, new Uint8Array(16));
    expectInputError(() => readTensors(file), file, "'ids'", 'I64');
  });

  it('a missing file', () => {
    const file = path.join(dir, 'does-not-exist.safetensors');
    expectInputError(() => readTensors(file), file, 'not found');
    expectInputError(() => readHeader(file), file);
  });
});
