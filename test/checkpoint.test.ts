import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import { buildTokenizer, loadModel, saveModel, CausalLM } from '../core-adapters/index.js';
import { exportWeights, initModel, initWeights, loadOptimizerState, loadWeightsInto, modelFromWeights, saveOptimizerState } from '../core-adapters/model/checkpoint.js';
import { splitVocabMatrices, toModelLayout, type HostTensor } from '../core-adapters/model/layout.js';
import { packSequences, scoreResponses } from '../core-adapters/model/logprobs.js';
import { AdamW } from '../core-adapters/model/optim.js';
import { languageModelStep } from '../core-adapters/model/train-step.js';
import { uniqueVariableName } from '../core-adapters/model/variables.js';
import { expectedTensors, parseModelConfig } from '../core-adapters/model/config.js';
import { readHeader, readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { expectInputError, expectSameBits, fixture, floatBits, readJson, tempDir } from './helpers.js';



/** A model's parameters (in its own layout) as plain arrays. */
type Snapshot = Map<string, { shape: number[]; data: Float32Array }>;

function snapshot(model: CausalLM): Snapshot {
  const out: Snapshot = new Map();
  for (const [name, v] of model.params) out.set(name, { shape: [...v.shape], data: Float32Array.from(v.dataSync() as Float32Array) });
  return out;
}

/**
 * Runs fn on a freshly made model and disposes it. Tests hold one model at a time so that the
 * variable-name clash checked in 'two models at once' does not mask what they test.
 */
function withModel<T>(make: () => CausalLM, fn: (model: CausalLM) => T): T {
  const model = make();
  try {
    return fn(model);
  } finally {
    model.dispose();
  }
}

/** withModel for an asynchronous fn (a save): the model is disposed once fn's promise settles. */
async function withModelAsync<T>(make: () => CausalLM, fn: (model: CausalLM) => Promise<T>): Promise<T> {
  const model = make();
  try {
    return await fn(model);
  } finally {
    model.dispose();
  }
}

/** Awaits `promise` and fails unless it rejects (the asynchronous form of expect(fn).to.throw()). */
async function expectRejection(promise: Promise<unknown>): Promise<void> {
  let rejected = false;
  try {
    await promise;
  } catch {
    rejected = true;
  }
  expect(rejected, 'the promise rejects').to.equal(true);
}

function snapshotOf(make: () => CausalLM): Snapshot {
  return withModel(make, snapshot);
}

/** Same parameter names, shapes and bit-identical values. */
function expectSameParams(actual: Snapshot, expected: Snapshot): void {
  expect([...actual.keys()].sort()).to.deep.equal([...expected.keys()].sort());
  for (const [name, v] of expected) {
    const got = actual.get(name)!;
    expect(got.shape, name).to.deep.equal(v.shape);
    expectSameBits(got.data, v.data, name);
  }
}


/** One scratch root per file (tempDir registers an exit hook per call); fresh subdirectories under it. */
const SCRATCH = tempDir('flowrl-checkpoint-');
function scratch(): string {
  return fs.mkdtempSync(path.join(SCRATCH, 'd-'));
}

function tmpSiblings(parent: string): string[] {
  return fs.readdirSync(parent).filter((n) => n.includes('.tmp-'));
}

type Json = Record<string, unknown>;

for (const name of ['tiny-qwen2', 'tiny-llama-bf16'] as const) {
  describe(`checkpoint: load → save → load round trip of ${name}`, () => {
    const source = fixture(name);
    let original: Snapshot;
    let saved: string;
    let reloaded: Snapshot;
    let config: CausalLM['config'];
    before(async () => {
      saved = path.join(scratch(), 'saved');
      original = await withModelAsync(
        () => loadModel(source),
        async (model) => {
          config = model.config;
          await saveModel(model, saved);
          return snapshot(model);
        },
      );
      reloaded = snapshotOf(() => loadModel(saved));
    });

    it('reloads every parameter bit for bit', () => {
      expectSameParams(reloaded, original);
    });

    it('writes exactly config.json and model.safetensors', () => {
      expect(fs.readdirSync(saved).sort()).to.deep.equal(['config.json', 'model.safetensors']);
    });

    it("keeps config.json's keys and values, with torch_dtype float32", () => {
      const before = readJson<Json>(path.join(source, 'config.json'));
      const after = readJson<Json>(path.join(saved, 'config.json'));
      expect(Object.keys(after).sort()).to.deep.equal([...new Set([...Object.keys(before), 'torch_dtype'])].sort());
      expect(after.torch_dtype).to.equal('float32');
      expect({ ...after, torch_dtype: undefined }).to.deep.equal({ ...before, torch_dtype: undefined });
    });

    it('saves every tensor as F32 with the values of the source file (BF16 upcast exactly)', () => {
      const want = readTensors(path.join(source, 'model.safetensors'), expectedTensors(config).keys());
      const got = readTensors(path.join(saved, 'model.safetensors'));
      expect([...got.keys()].sort()).to.deep.equal([...expectedTensors(config).keys()].sort());
      for (const [tensor, w] of want) {
        const g = got.get(tensor)!;
        expect(g.storedDtype, tensor).to.equal('F32');
        expect(g.shape, tensor).to.deep.equal(w.shape);
        expectSameBits(g.data, w.data, tensor);
      }
      if (name === 'tiny-llama-bf16') expect(want.get('model.norm.weight')!.storedDtype).to.equal('BF16');
    });

    it(name === 'tiny-qwen2' ? 'saves the tied model without lm_head.weight' : 'saves the untied lm_head.weight', () => {
      const header = readHeader(path.join(saved, 'model.safetensors'));
      expect(header.tensors.has('lm_head.weight')).to.equal(name === 'tiny-llama-bf16');
      expect(header.tensors.has('model.embed_tokens.weight')).to.equal(true);
      expect(header.metadata.format).to.equal('pt');
    });

    it('is bit exact over a second save → load', async () => {
      const again = path.join(scratch(), 'again');
      await withModelAsync(
        () => loadModel(saved),
        (model) => saveModel(model, again),
      );
      expectSameParams(snapshotOf(() => loadModel(again)), original);
      expect(fs.readFileSync(path.join(again, 'model.safetensors')).equals(fs.readFileSync(path.join(saved, 'model.safetensors')))).to.equal(true);
    });
  });
}

describe('checkpoint: sharded weights', () => {
  it('tiny-qwen2-sharded loads to the same parameters as tiny-qwen2', () => {
    const single = snapshotOf(() => loadModel(fixture('tiny-qwen2')));
    const sharded = snapshotOf(() => loadModel(fixture('tiny-qwen2-sharded')));
    expectSameParams(sharded, single);
  });

  it('an index naming a missing shard is an InputError naming the shard', () => {
    const dir = path.join(scratch(), 'sharded');
    fs.cpSync(fixture('tiny-qwen2-sharded'), dir, { recursive: true });
    const shard = path.join(dir, 'model-00002-of-00002.safetensors');
    fs.rmSync(shard);
    expectInputError(() => loadModel(dir), shard);
  });

  it('an index that is not JSON is an InputError naming it', () => {
    const dir = path.join(scratch(), 'sharded');
    fs.cpSync(fixture('tiny-qwen2-sharded'), dir, { recursive: true });
    const index = path.join(dir, 'model.safetensors.index.json');
    fs.writeFileSync(index, '{"weight_map": ');
    expectInputError(() => loadModel(dir), index);
  });
});

describe('checkpoint: tokenizer files', () => {
  it('saveModel with tokenizerDir copies tokenizer.json and tokenizer_config.json', async () => {
    const tokDir = path.join(scratch(), 'tok');
    buildTokenizer({ characters: 'abc 123', chatTemplate: '{{ messages[0].content }}' }).save(tokDir);
    const out = path.join(scratch(), 'with-tok');
    await withModelAsync(
      () => loadModel(fixture('tiny-qwen2')),
      (model) => saveModel(model, out, { tokenizerDir: tokDir }),
    );
    expect(fs.readdirSync(out).sort()).to.deep.equal(['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
      expect(fs.readFileSync(path.join(out, f)).equals(fs.readFileSync(path.join(tokDir, f))), f).to.equal(true);
    }
  });

  it('saving a loaded model back over its own directory keeps its tokenizer files', async () => {
    const dir = path.join(scratch(), 'self');
    fs.cpSync(fixture('tiny-qwen2'), dir, { recursive: true });
    buildTokenizer({ characters: 'xyz' }).save(dir);
    const tokenizerBytes = fs.readFileSync(path.join(dir, 'tokenizer.json'));
    await withModelAsync(
      () => loadModel(dir),
      (model) => saveModel(model, dir, { tokenizerDir: dir }),
    );
    expect(fs.readFileSync(path.join(dir, 'tokenizer.json')).equals(tokenizerBytes)).to.equal(true);
    expect(fs.existsSync(path.join(dir, 'tokenizer_config.json'))).to.equal(true);
    expect(tmpSiblings(path.dirname(dir))).to.deep.equal([]);
  });
});

describe('checkpoint: bad model directories are InputErrors naming the file and key or tensor', () => {
  /** A copy of tiny-qwen2 in a fresh directory. */
  function copyOfQwen(): string {
    const dir = path.join(scratch(), 'model');
    fs.cpSync(fixture('tiny-qwen2'), dir, { recursive: true });
    return dir;
  }

  it('missing config.json', () => {
    const dir = copyOfQwen();
    fs.rmSync(path.join(dir, 'config.json'));
    expectInputError(() => loadModel(dir), path.join(dir, 'config.json'));
  });

  it('config.json that is not JSON', () => {
    const dir = copyOfQwen();
    fs.writeFileSync(path.join(dir, 'config.json'), '{"model_type": "qwen2",');
    expectInputError(() => loadModel(dir), path.join(dir, 'config.json'), 'JSON');
  });

  it('config.json that is a JSON array', () => {
    const dir = copyOfQwen();
    fs.writeFileSync(path.join(dir, 'config.json'), '[1, 2]');
    expectInputError(() => loadModel(dir), path.join(dir, 'config.json'));
  });

  it('an unknown model_type, listing the supported ones', () => {
    const dir = copyOfQwen();
    const config = readJson<Json>(path.join(dir, 'config.json'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, model_type: 'gpt2' }));
    expectInputError(() => loadModel(dir), path.join(dir, 'config.json'), 'model_type', 'gpt2', 'llama', 'qwen2');
  });

  it('a config key of the wrong type names the key', () => {
    const dir = copyOfQwen();
    const config = readJson<Json>(path.join(dir, 'config.json'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, num_hidden_layers: '2' }));
    expectInputError(() => loadModel(dir), path.join(dir, 'config.json'), 'num_hidden_layers');
  });

  it('a hidden_size that disagrees with the weights names the tensor and the file', () => {
    const dir = copyOfQwen();
    const config = readJson<Json>(path.join(dir, 'config.json'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, hidden_size: 64 }));
    expectInputError(() => loadModel(dir), path.join(dir, 'model.safetensors'), "'model.embed_tokens.weight'", '[128,32]', '[128,64]');
  });

  it('a single tensor of the wrong shape names that tensor', () => {
    const dir = copyOfQwen();
    const file = path.join(dir, 'model.safetensors');
    const tensors = readTensors(file);
    tensors.set('model.layers.1.self_attn.k_proj.bias', { shape: [8], data: new Float32Array(8), storedDtype: 'F32' });
    writeSafetensors(file, tensors);
    expectInputError(() => loadModel(dir), file, "'model.layers.1.self_attn.k_proj.bias'");
  });

  it('a weights file missing a tensor names that tensor and the file', () => {
    const dir = copyOfQwen();
    const file = path.join(dir, 'model.safetensors');
    const tensors = readTensors(file);
    expect(tensors.delete('model.norm.weight')).to.equal(true);
    writeSafetensors(file, tensors);
    expectInputError(() => loadModel(dir), file, "'model.norm.weight'", 'missing');
  });

  it('an untied config with no lm_head.weight in the file names lm_head.weight', () => {
    const dir = copyOfQwen();
    const config = readJson<Json>(path.join(dir, 'config.json'));
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...config, tie_word_embeddings: false }));
    expectInputError(() => loadModel(dir), path.join(dir, 'model.safetensors'), "'lm_head.weight'");
  });

  it('no weights file at all', () => {
    const dir = copyOfQwen();
    fs.rmSync(path.join(dir, 'model.safetensors'));
    expectInputError(() => loadModel(dir), dir, 'model.safetensors');
  });

  it('a corrupt weights file names the file', () => {
    const dir = copyOfQwen();
    const file = path.join(dir, 'model.safetensors');
    fs.writeFileSync(file, 'this is not a safetensors file at all');
    expectInputError(() => loadModel(dir), file);
  });
});

describe('checkpoint: atomic saving', () => {
  const raw = readJson<Json>(fixture('tiny-qwen2', 'config.json'));

  it('saving over an existing directory leaves no .tmp- siblings and replaces the weights', async () => {
    const parent = scratch();
    const dir = path.join(parent, 'model');
    await withModelAsync(
      () => loadModel(fixture('tiny-qwen2')),
      (model) => saveModel(model, dir),
    );
    const second = await withModelAsync(
      () => initModel(raw, 5),
      async (model) => {
        await saveModel(model, dir);
        return snapshot(model);
      },
    );
    expect(tmpSiblings(parent)).to.deep.equal([]);
    expect(fs.readdirSync(parent)).to.deep.equal(['model']);
    expectSameParams(snapshotOf(() => loadModel(dir)), second);
  });

  it('a save that fails midway leaves the existing directory untouched and no .tmp- siblings', async () => {
    const parent = scratch();
    const dir = path.join(parent, 'model');
    // A tokenizer.json that is a directory makes the copy step, after the weights are written, throw.
    const badTokDir = path.join(parent, 'bad-tok');
    fs.mkdirSync(path.join(badTokDir, 'tokenizer.json'), { recursive: true });
    await withModelAsync(
      () => loadModel(fixture('tiny-qwen2')),
      (model) => saveModel(model, dir),
    );
    const before = fs.readFileSync(path.join(dir, 'model.safetensors'));
    await withModelAsync(
      () => initModel(raw, 9),
      (model) => expectRejection(saveModel(model, dir, { tokenizerDir: badTokDir })),
    );
    expect(fs.readFileSync(path.join(dir, 'model.safetensors')).equals(before)).to.equal(true);
    expect(fs.readdirSync(dir).sort()).to.deep.equal(['config.json', 'model.safetensors']);
    expect(tmpSiblings(parent)).to.deep.equal([]);
  });

  it('creates missing parent directories', async () => {
    const dir = path.join(scratch(), 'a', 'b', 'model');
    await withModelAsync(
      () => initModel(raw, 1),
      (model) => saveModel(model, dir),
    );
    expect(fs.readdirSync(dir).sort()).to.deep.equal(['config.json', 'model.safetensors']);
  });
});

describe('checkpoint: random initialisation', () => {
  const raw = readJson<Json>(fixture('tiny-qwen2', 'config.json'));
  const config = parseModelConfig(raw);

  it('the same seed gives identical weights; different seeds differ', () => {
    const a = initWeights(config, 11);
    const b = initWeights(config, 11);
    const c = initWeights(config, 12);
    expect([...a.keys()]).to.deep.equal([...expectedTensors(config).keys()]);
    for (const [name, w] of a) {
      expect(w.shape, name).to.deep.equal(expectedTensors(config).get(name));
      expectSameBits(b.get(name)!.data, w.data, name);
    }
    for (const name of ['model.layers.0.self_attn.q_proj.weight', 'model.embed_tokens.weight']) {
      expect(floatBits(c.get(name)!.data), name).to.not.deep.equal(floatBits(a.get(name)!.data));
    }
  });

  it('modelFromWeights with the same seed gives identical models; initModel agrees', () => {
    const a = snapshotOf(() => modelFromWeights(config, initWeights(config, 4)));
    const b = snapshotOf(() => modelFromWeights(config, initWeights(config, 4)));
    const c = snapshotOf(() => initModel(raw, 4));
    const d = snapshotOf(() => initModel(raw, 5));
    expectSameParams(b, a);
    expectSameParams(c, a);
    const name = 'model.layers.1.mlp.up_proj.weight';
    expect(floatBits(d.get(name)!.data)).to.not.deep.equal(floatBits(a.get(name)!.data));
  });

  it('norms are 1, biases 0, other weights N(0, 0.02)', () => {
    const weights = initWeights(config, 3);
    let sawBias = false;
    for (const [name, { data }] of weights) {
      if (name.endsWith('norm.weight')) {
        expect([...new Set(data)], name).to.deep.equal([1]);
      } else if (name.endsWith('.bias')) {
        sawBias = true;
        expect([...new Set(data)], name).to.deep.equal([0]);
      }
    }
    expect(sawBias, 'qwen2 has q/k/v biases').to.equal(true);
    const embed = weights.get('model.embed_tokens.weight')!.data;
    const mean = embed.reduce((s, v) => s + v, 0) / embed.length;
    const std = Math.sqrt(embed.reduce((s, v) => s + (v - mean) ** 2, 0) / embed.length);
    expect(Math.abs(mean)).to.be.below(0.002);
    expect(std).to.be.within(0.018, 0.022);
  });

  it('honours initializer_range', () => {
    const wide = parseModelConfig({ ...raw, initializer_range: 0.5 });
    const embed = initWeights(wide, 3).get('model.embed_tokens.weight')!.data;
    const std = Math.sqrt(embed.reduce((s, v) => s + v * v, 0) / embed.length);
    expect(std).to.be.within(0.45, 0.55);
  });
});

describe('checkpoint: several models in one process', () => {
  /** Disposes variables registered since `before`, so a failure here cannot break later tests. */
  function disposeNewVariables(before: Set<string>): void {
    for (const [name, v] of Object.entries(tf.engine().registeredVariables)) if (!before.has(name)) v.dispose();
  }

  // An RL trainer holds a policy and a reference model (or two checkpoints) at the same time.
  it('two models can be alive at once', () => {
    const registered = new Set(Object.keys(tf.engine().registeredVariables));
    const models: CausalLM[] = [];
    try {
      models.push(loadModel(fixture('tiny-qwen2')));
      models.push(loadModel(fixture('tiny-qwen2-sharded')));
      expectSameParams(snapshot(models[1]), snapshot(models[0]));
      models.push(initModel(readJson<Json>(fixture('tiny-qwen2', 'config.json')), 2));
    } finally {
      models.forEach((m) => m.dispose());
      disposeNewVariables(registered);
    }
  });

  it('a failed modelFromWeights does not break later loads', () => {
    const registered = new Set(Object.keys(tf.engine().registeredVariables));
    const config = parseModelConfig(readJson<Json>(fixture('tiny-qwen2', 'config.json')));
    const weights = initWeights(config, 1);
    weights.delete('model.norm.weight');
    try {
      expect(() => modelFromWeights(config, weights)).to.throw(/model\.norm\.weight/);
      expect(Object.keys(tf.engine().registeredVariables).filter((n) => !registered.has(n)), 'variables left registered').to.deep.equal([]);
      loadModel(fixture('tiny-qwen2')).dispose();
    } finally {
      disposeNewVariables(registered);
    }
  });
});

describe('checkpoint: the vocabulary held in blocks (as a GPU with a small binding limit holds it)', () => {
  // Untied, so both the embedding (split by rows) and the head (split by columns) are blocks.
  const config = parseModelConfig(
    { model_type: 'qwen2', vocab_size: 301, hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 32, tie_word_embeddings: false },
    'blocks test',
  );
  const blocked = (weights: Map<string, HostTensor>) =>
    new CausalLM(config, new Map([...splitVocabMatrices(toModelLayout(config, weights), 301 * 16 * 4 * 0.4)].map(([name, t]) => [name, tf.variable(tf.tensor(t.data, t.shape), true, uniqueVariableName(name))])));

  it('scores, trains and saves as the whole matrices do; the optimizer state is saved joined and restored into blocks', async () => {
    const prompts = [[1, 2, 3], [299, 300]];
    const responses = [[150, 7, 300, 0], [120, 121]];
    const seq = packSequences(prompts, responses);
    const run = async (model: CausalLM, stateFile: string) => {
      const scored = tf.tidy(() => {
        const out = scoreResponses(model, seq, { temperature: 0.7, withEntropy: true });
        return [out.logProbs, out.entropy!];
      });
      const [logProbs, entropy] = scored.map((t) => Array.from(t.dataSync()));
      tf.dispose(scored);
      const optimizer = new AdamW({ lr: 1e-2, weightDecay: 0.01 });
      const losses = [await languageModelStep(model, optimizer, seq), await languageModelStep(model, optimizer, seq)];
      await saveOptimizerState(stateFile, optimizer);
      optimizer.dispose();
      return { names: [...model.params.keys()], logProbs, entropy, losses, weights: await exportWeights(model) };
    };
    const dir = tempDir();
    const whole = await withModelAsync(() => modelFromWeights(config, initWeights(config, 3)), (m) => run(m, path.join(dir, 'whole.safetensors')));
    const model = blocked(initWeights(config, 3));
    try {
      const split = await run(model, path.join(dir, 'split.safetensors'));
      expect(split.names).to.include.members(['model.embed_tokens.weight#0', 'model.embed_tokens.weight#2', 'lm_head.weight#2']).and.not.include.members(['model.embed_tokens.weight', 'lm_head.weight']);
      expect(model.params.get('lm_head.weight#0')!.shape).to.deep.equal([16, 100]);
      split.logProbs.forEach((v, i) => expect(v).to.be.closeTo(whole.logProbs[i], 1e-6));
      split.entropy.forEach((v, i) => expect(v).to.be.closeTo(whole.entropy[i], 1e-6));
      split.losses.forEach((v, i) => expect(v).to.be.closeTo(whole.losses[i], 1e-6 * Math.abs(whole.losses[i])));
      expect([...split.weights.keys()]).to.deep.equal([...whole.weights.keys()]);
      for (const [name, t] of whole.weights) {
        expect(split.weights.get(name)!.shape, name).to.deep.equal(t.shape);
        const worst = t.data.reduce((m, v, i) => Math.max(m, Math.abs(v - split.weights.get(name)!.data[i])), 0);
        expect(worst, name).to.be.at.most(1e-5);
      }
      const [a, b] = [readTensors(path.join(dir, 'whole.safetensors')), readTensors(path.join(dir, 'split.safetensors'))];
      expect([...b.keys()].sort()).to.deep.equal([...a.keys()].sort());
      // The whole model's state loads into the blocks, moment for moment.
      const optimizer = new AdamW({ lr: 1e-2 });
      loadOptimizerState(path.join(dir, 'whole.safetensors'), optimizer, model.params);
      const state = await optimizer.getState();
      optimizer.dispose();
      const moments = state.moments.get('lm_head.weight#1')!;
      expect(moments.shape).to.deep.equal([16, 101]);
      const head = a.get('m/lm_head.weight')!;
      // Column block 1 of the [H, V] head: columns 100..200 of each row.
      expect(Array.from(moments.m.subarray(0, 101))).to.deep.equal(Array.from(head.data.subarray(100, 201)));
      expect(Array.from(moments.m.subarray(101, 202))).to.deep.equal(Array.from(head.data.subarray(301 + 100, 301 + 201)));
      // And weights loaded from a directory land in the blocks.
      await withModelAsync(() => modelFromWeights(config, initWeights(config, 9)), (m) => saveModel(m, path.join(dir, 'other')));
      loadWeightsInto(model, path.join(dir, 'other'));
      const reloaded = await exportWeights(model);
      const other = initWeights(config, 9);
      for (const name of ['lm_head.weight', 'model.embed_tokens.weight']) expect(Array.from(reloaded.get(name)!.data), name).to.deep.equal(Array.from(other.get(name)!.data));
    } finally {
      model.dispose();
    }
  });
});
