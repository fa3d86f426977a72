// Fuzzing the safetensors reader: mutated files (flipped bytes, cut files, lying header lengths,
// edited headers: dtypes that lie about sizes, overlapping or out-of-range offsets, bad shapes,
// odd metadata, non-UTF-8 names) must each be read or refused with one InputError, never crash.
// FLOWRL_FUZZ_INPUTS sets the count (1,000 here).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { InputError, Rng } from '../core-adapters/index.js';
import { readHeader, readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { tempDir, FUZZ_MEMORY_BOUND, residentGrowth } from './helpers.js';

const INPUTS = Number(process.env.FLOWRL_FUZZ_INPUTS ?? 1000);

function validFile(dir: string): Buffer {
  const file = path.join(dir, 'valid.safetensors');
  const rng = new Rng(1);
  const tensor = (shape: number[]) => ({ shape, data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.normal()) });
  writeSafetensors(file, new Map([['a.weight', tensor([3, 4])], ['b.bias', tensor([5])], ['c', tensor([2, 2, 2])]]), { format: 'pt', step: '3' });
  return fs.readFileSync(file);
}

/** One mutation of a valid file, chosen and parametrised by rng. */
function mutate(valid: Buffer, rng: Rng): Buffer {
  const headerLength = Number(valid.readBigUInt64LE(0));
  const header = JSON.parse(valid.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, Record<string, unknown>>;
  const data = valid.subarray(8 + headerLength);
  const pick = <T>(items: T[]): T => items[Math.floor(rng.next() * items.length)];
  const withHeader = (json: Buffer, lengthField = json.length) => {
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(lengthField));
    return Buffer.concat([prefix, json, data]);
  };
  const tensorName = () => pick(Object.keys(header).filter((k) => k !== '__metadata__'));
  switch (Math.floor(rng.next() * 9)) {
    case 0: {
      const out = Buffer.from(valid);
      for (let i = 0, n = 1 + Math.floor(rng.next() * 8); i < n; i++) out[Math.floor(rng.next() * (8 + headerLength))] = Math.floor(rng.next() * 256);
      return out;
    }
    case 1:
      return valid.subarray(0, Math.floor(rng.next() * valid.length));
    case 2: {
      const out = Buffer.from(valid);
      out.writeBigUInt64LE(pick([0n, 1n, 7n, BigInt(headerLength - 1), BigInt(headerLength + 1), 2n ** 40n, 2n ** 63n, 2n ** 64n - 1n]));
      return out;
    }
    case 3:
      header[tensorName()].dtype = pick(['F64', 'F16', 'BF16', 'I8', 'U8', 'F32 ', '', 7, null]);
      break;
    case 4: {
      const entry = header[tensorName()];
      const offsets = entry.data_offsets as number[];
      entry.data_offsets = pick([[offsets[1], offsets[0]], [0, offsets[1] - offsets[0]], [offsets[0] - 4, offsets[1] - 4], [-4, offsets[1]], [offsets[0], 1e18], [0.5, 4], [offsets[0]], 'x']);
      break;
    }
    case 5:
      header[tensorName()].shape = pick([[-1, 4], [1e9, 1e9], [3.5], ['3'], null, [], [2 ** 53, 2 ** 53], [0]]);
      break;
    case 6:
      header.__metadata__ = pick([null, 7, 'x', [1], { step: 3 }, { nested: { a: 1 } }]) as Record<string, unknown>;
      break;
    case 7: {
      const json = Buffer.from(JSON.stringify(header));
      const at = 2 + Math.floor(rng.next() * (json.length - 4));
      return withHeader(Buffer.concat([json.subarray(0, at), Buffer.from([0xff, 0xfe, 0xc3]), json.subarray(at)]));
    }
    default:
      // Lengths that disagree with the header actually written.
      return withHeader(Buffer.from(JSON.stringify(header)), Buffer.from(JSON.stringify(header)).length + pick([-3, 5, 1000]));
  }
  return withHeader(Buffer.from(JSON.stringify(header)));
}

describe('fuzzing the safetensors reader', function () {
  this.timeout(120_000);

  it(`reads or refuses with one InputError each of ${INPUTS} mutated files (fixed seed)`, () => {
    const dir = tempDir();
    const valid = validFile(dir);
    const rng = new Rng(7);
    const file = path.join(dir, 'fuzzed.safetensors');
    const outcomes = { read: 0, refused: 0 };
    const memory = residentGrowth();
    for (let i = 0; i < INPUTS; i++) {
      if (i % 50 === 0) memory.sample();
      const input = mutate(valid, rng);
      fs.writeFileSync(file, input);
      try {
        const header = readHeader(file);
        for (const [name, value] of Object.entries(header.metadata)) expect(typeof value, `input ${i}: metadata '${name}'`).to.equal('string');
        const tensors = readTensors(file);
        for (const [name, t] of tensors) expect(t.data.length, `input ${i}: ${name}`).to.equal(t.shape.reduce((a, b) => a * b, 1));
        outcomes.read += 1;
      } catch (e) {
        if (!(e instanceof InputError)) expect.fail(`input ${i} (${input.length} bytes) ended in ${(e as Error).stack}`);
        expect(e.message, `input ${i}`).to.include(file);
        outcomes.refused += 1;
      }
    }
    expect(outcomes.refused, JSON.stringify(outcomes)).to.be.greaterThan(INPUTS / 2);
    expect(memory.growth(), `resident memory grew by ${(memory.growth() / 2 ** 20).toFixed(0)} MB`).to.be.below(FUZZ_MEMORY_BOUND);
    if (process.env.FLOWRL_FUZZ_VERBOSE) console.log(outcomes);
  });
});
