// Fuzzing the readers of what a user hands flowrl besides configs and safetensors (those have their
// own fuzz tests): data rows (jsonl and parquet), a model's config.json, tokenizer.json,
// plugin.json and PEFT adapters. Each mutated input must be read or refused with one InputError
// naming the file; none may crash, hang, pollute Object.prototype or grow memory without bound.
// FLOWRL_FUZZ_INPUTS sets the count per reader (1,000 here).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { parquetWriteFile } from 'hyparquet-writer';
import { InputError, loadModel, Rng } from '../core-adapters/index.js';
import { readRows } from '../core-adapters/data/rows.js';
import { readModelConfig } from '../core-adapters/model/config.js';
import { loadAdapters } from '../core-adapters/model/lora.js';
import { TextTokenizer } from '../core-adapters/model/tokenizer.js';
import { readManifest } from '../core-adapters/plugins/manifest.js';
import { fixture, FLAT_ROW_SCHEMA, FUZZ_MEMORY_BOUND, readJson, residentGrowth, ROOT, tempDir } from './helpers.js';

const INPUTS = Number(process.env.FLOWRL_FUZZ_INPUTS ?? 1000);
const HOST_VERSION = readJson<{ version: string }>(path.join(ROOT, 'package.json')).version;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng.next() * items.length)];

/** Values that break readers: wrong types, extremes, huge strings and lists, deep nesting, prototype keys. */
function junk(rng: Rng): Json {
  const deep = (n: number): Json => (n === 0 ? 1 : [deep(n - 1)]);
  return pick<() => Json>(rng, [
    () => null,
    () => true,
    () => -1,
    () => 0,
    () => 1.5,
    () => 2 ** 53 + 2,
    () => 1e308,
    () => -1e308,
    () => '',
    () => 'x'.repeat(100_000),
    () => '\u0000\uffff\ud800',
    () => [],
    () => ({}),
    () => Array.from({ length: 10_000 }, (_, i) => i),
    () => deep(2_000),
    () => JSON.parse('{"__proto__": {"polluted": 1}, "constructor": {"prototype": {"polluted": 1}}}') as Json,
  ])();
}

/** Every container path in a JSON value, with the container itself. */
function containers(value: Json, out: Json[] = []): Json[] {
  if (value !== null && typeof value === 'object') {
    out.push(value);
    for (const child of Array.isArray(value) ? value : Object.values(value)) containers(child, out);
  }
  return out;
}

/** One structural edit of a JSON document (a deep copy), or a textual one of its serialisation. */
function mutateJson(valid: Json, rng: Rng): Buffer {
  const doc = structuredClone(valid);
  const text = JSON.stringify(doc);
  switch (Math.floor(rng.next() * 8)) {
    case 0:
      return Buffer.from(text.slice(0, Math.floor(rng.next() * text.length)));
    case 1: {
      const bytes = Buffer.from(text);
      for (let i = 0, n = 1 + Math.floor(rng.next() * 4); i < n; i++) bytes[Math.floor(rng.next() * bytes.length)] = Math.floor(rng.next() * 256);
      return bytes;
    }
    default: {
      const all = containers(doc);
      const target = pick(rng, all);
      if (Array.isArray(target)) {
        if (target.length && rng.next() < 0.5) target.splice(Math.floor(rng.next() * target.length), 1);
        else target[Math.floor(rng.next() * (target.length + 1))] = junk(rng);
      } else if (target && typeof target === 'object') {
        const keys = Object.keys(target);
        const op = rng.next();
        if (keys.length && op < 0.3) delete target[pick(rng, keys)];
        else if (keys.length && op < 0.8) target[pick(rng, keys)] = junk(rng);
        else target[pick(rng, ['__proto__', 'constructor', 'extra', ''])] = junk(rng);
      }
      return Buffer.from(JSON.stringify(doc));
    }
  }
}

/** Byte-level damage: flipped bytes, a cut, or garbage appended. */
function mutateBytes(valid: Buffer, rng: Rng): Buffer {
  const op = rng.next();
  if (op < 0.4) {
    const out = Buffer.from(valid);
    for (let i = 0, n = 1 + Math.floor(rng.next() * 8); i < n; i++) out[Math.floor(rng.next() * out.length)] = Math.floor(rng.next() * 256);
    return out;
  }
  if (op < 0.6) {
    // The end of a parquet file is its footer (metadata, then its length and the magic).
    const out = Buffer.from(valid);
    for (let i = 0, n = 1 + Math.floor(rng.next() * 4); i < n; i++) out[out.length - 1 - Math.floor(rng.next() * Math.min(out.length, 200))] = Math.floor(rng.next() * 256);
    return out;
  }
  if (op < 0.85) return valid.subarray(0, Math.floor(rng.next() * valid.length));
  return Buffer.concat([valid, Buffer.from(Array.from({ length: 1 + Math.floor(rng.next() * 64) }, () => Math.floor(rng.next() * 256)))]);
}

interface Target {
  name: string;
  /** Writes the i-th input where the reader will look; returns the path a message must name. */
  write(dir: string, rng: Rng): string;
  read(dir: string): unknown;
}

async function fuzz(target: Target, inputs = INPUTS): Promise<{ read: number; refused: number }> {
  const dir = tempDir(`flowrl-fuzz-${target.name}-`);
  const rng = new Rng(11);
  const outcomes = { read: 0, refused: 0 };
  const memory = residentGrowth();
  for (let i = 0; i < inputs; i++) {
    const file = target.write(dir, rng);
    try {
      await target.read(dir);
      outcomes.read += 1;
    } catch (e) {
      if (!(e instanceof InputError)) expect.fail(`${target.name} input ${i} ended in ${(e as Error).stack}`);
      expect(e.message, `${target.name} input ${i}`).to.include(file);
      outcomes.refused += 1;
    }
    expect(({} as Record<string, unknown>).polluted, `${target.name} input ${i} polluted Object.prototype`).to.equal(undefined);
    if (i % 50 === 0) memory.sample();
  }
  expect(memory.growth(), `${target.name}: resident memory grew by ${(memory.growth() / 2 ** 20).toFixed(0)} MB`).to.be.below(FUZZ_MEMORY_BOUND);
  if (process.env.FLOWRL_FUZZ_VERBOSE) console.log(target.name, outcomes);
  return outcomes;
}

function validParquet(): Buffer {
  const file = path.join(tempDir(), 'valid.parquet');
  const records = Array.from({ length: 4 }, (_, i) => ({ data_source: 'countdown', prompt: `reach ${i + 10} with 1 2 3`, reward_model: { style: 'rule', ground_truth: String(i + 10) } }));
  parquetWriteFile({ filename: file, schema: [...FLAT_ROW_SCHEMA], columnData: Object.keys(records[0]).map((name) => ({ name, data: records.map((r) => r[name as keyof (typeof records)[0]]) })) });
  return fs.readFileSync(file);
}

describe('fuzzing the readers of data rows, model configs, tokenizers, plugin manifests and PEFT adapters', function () {
  this.timeout(300_000);

  it(`jsonl rows: ${INPUTS} mutated files`, async () => {
    const rows = fs.readFileSync(fixture('countdown', 'data', 'val.jsonl'), 'utf8').split('\n').filter(Boolean).slice(0, 3);
    const valid = rows.map((r) => JSON.parse(r) as Json);
    const outcomes = await fuzz({
      name: 'jsonl',
      write: (dir, rng) => {
        const file = path.join(dir, 'rows.jsonl');
        const at = Math.floor(rng.next() * valid.length);
        const lines = valid.map((row, i) => (i === at ? mutateJson(row, rng) : Buffer.from(JSON.stringify(row))));
        fs.writeFileSync(file, Buffer.concat(lines.flatMap((l) => [l, Buffer.from('\n')])));
        return file;
      },
      read: (dir) => readRows(path.join(dir, 'rows.jsonl')),
    });
    expect(outcomes.refused).to.be.greaterThan(INPUTS / 4);
  });

  it(`parquet rows: ${INPUTS} damaged files`, async () => {
    const valid = validParquet();
    expect(await readRows(path.join(tempDir(), 'x.parquet')).catch((e: Error) => e.message)).to.include('file not found');
    const outcomes = await fuzz({
      name: 'parquet',
      write: (dir, rng) => {
        const file = path.join(dir, 'rows.parquet');
        fs.writeFileSync(file, mutateBytes(valid, rng));
        return file;
      },
      read: (dir) => readRows(path.join(dir, 'rows.parquet')),
    });
    expect(outcomes.refused).to.be.greaterThan(INPUTS / 4);
  });

  it(`config.json: ${INPUTS} mutated model configs`, async () => {
    const valid = readJson<Json>(fixture('tiny-qwen2', 'config.json'));
    await fuzz({
      name: 'config.json',
      write: (dir, rng) => {
        fs.writeFileSync(path.join(dir, 'config.json'), mutateJson(valid, rng));
        return path.join(dir, 'config.json');
      },
      read: (dir) => readModelConfig(path.join(dir, 'config.json')),
    });
  });

  it(`a model directory: ${INPUTS / 10} mutated config.json files beside real weights are loaded or refused`, async () => {
    // Loading goes further than parsing: the shapes the config implies meet the weights on disk.
    const valid = readJson<Json>(fixture('tiny-qwen2', 'config.json'));
    await fuzz(
      {
        name: 'model-dir',
        write: (dir, rng) => {
          if (!fs.existsSync(path.join(dir, 'model.safetensors'))) fs.copyFileSync(fixture('tiny-qwen2', 'model.safetensors'), path.join(dir, 'model.safetensors'));
          fs.writeFileSync(path.join(dir, 'config.json'), mutateJson(valid, rng));
          return dir;
        },
        read: (dir) => loadModel(dir).dispose(),
      },
      INPUTS / 10,
    );
  });

  it(`tokenizer.json: ${INPUTS} mutated tokenizers`, async () => {
    const valid = readJson<Json>(fixture('countdown', 'base-model', 'tokenizer.json'));
    await fuzz({
      name: 'tokenizer.json',
      write: (dir, rng) => {
        fs.writeFileSync(path.join(dir, 'tokenizer.json'), mutateJson(valid, rng));
        return path.join(dir, 'tokenizer.json');
      },
      read: (dir) => {
        const tokenizer = TextTokenizer.load(dir);
        tokenizer.decode(tokenizer.encode('12 + 3'));
      },
    });
  });

  it(`plugin.json: ${INPUTS} mutated manifests`, async () => {
    const valid = readJson<Json>(path.join(ROOT, 'plugin.json'));
    await fuzz({
      name: 'plugin.json',
      write: (dir, rng) => {
        fs.writeFileSync(path.join(dir, 'plugin.json'), mutateJson(valid, rng));
        return path.join(dir, 'plugin.json');
      },
      read: (dir) => readManifest(path.join(dir, 'plugin.json'), HOST_VERSION, ['Actor', 'Worker', 'Trainer']),
    });
  });

  it(`PEFT adapters: ${INPUTS} mutated adapter_config.json files and damaged adapter_model.safetensors`, async () => {
    const model = loadModel(fixture('tiny-qwen2'));
    const config = readJson<Json>(fixture('lora-tiny-qwen2', 'adapter_config.json'));
    const weights = fs.readFileSync(fixture('lora-tiny-qwen2', 'adapter_model.safetensors'));
    await fuzz({
      name: 'peft',
      write: (dir, rng) => {
        const damageWeights = rng.next() < 0.5;
        fs.writeFileSync(path.join(dir, 'adapter_config.json'), damageWeights ? JSON.stringify(config) : mutateJson(config, rng));
        fs.writeFileSync(path.join(dir, 'adapter_model.safetensors'), damageWeights ? mutateBytes(weights, rng) : weights);
        return dir;
      },
      read: (dir) => loadAdapters(model.config, dir).dispose(),
    });
    model.dispose();
  });
});
