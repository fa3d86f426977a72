import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs';
import {
  AdamW,
  generate,
  generateOnPool,
  initWeights,
  languageModelReplicaSpec,
  languageModelStep,
  loadModel,
  modelFromWeights,
  packSequences,
  parseModelConfig,
  Rng,
  WorkerPool,
} from '../core-adapters/index.js';
import { expectClose, fixture } from './helpers.js';

const TINY = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 32,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 32,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: false,
};

describe('data-parallel workers (engine.workers)', function () {
  this.timeout(120000);

  before(function () {
    if (tf.getBackend() !== 'wasm') this.skip();
  });

  it('two threads train a language model like one thread (same batch, float tolerance), without leaking tensors', async () => {
    const config = parseModelConfig(TINY, 'tiny');
    const rng = new Rng(4);
    const rows = Array.from({ length: 7 }, () => Array.from({ length: 3 + rng.int(8) }, () => 1 + rng.int(31)));
    const seq = packSequences(rows.map((r) => r.slice(0, 2)), rows.map((r) => r.slice(2)));
    const train = async (threads: number) => {
      const model = modelFromWeights(config, initWeights(config, 9));
      const optimizer = new AdamW({ lr: 1e-2 });
      const pool = threads > 1 ? await WorkerPool.create({ size: threads, spec: languageModelReplicaSpec(model), params: model.params, native: 'auto' }) : undefined;
      pool?.publish(model.params);
      const losses = [languageModelStep(model, optimizer, seq, 1, pool)];
      const tensors = tf.memory().numTensors;
      for (let i = 0; i < 3; i++) losses.push(languageModelStep(model, optimizer, seq, 1, pool));
      expect(tf.memory().numTensors, `${threads} threads`).to.equal(tensors);
      const params = new Map([...model.params].map(([name, v]) => [name, Float32Array.from(v.dataSync())]));
      await pool?.close();
      optimizer.dispose();
      model.dispose();
      return { losses, params };
    };
    const single = await train(1);
    const parallel = await train(2);
    expectClose(parallel.losses, single.losses, 1e-5, 'losses');
    expect(single.losses.at(-1)!).to.be.lessThan(single.losses[0]);
    // Adam divides by sqrt(v), so rounding in near-zero gradients shows up at about 1e-5 after 4 steps.
    for (const [name, values] of single.params) expectClose(parallel.params.get(name)!, values, 1e-4, name);
  });

  it('sampling split across threads gives each row the tokens a single thread samples', async () => {
    const model = loadModel(fixture('countdown', 'base-model'));
    const prompts = Array.from({ length: 6 }, (_, i) => [5 + (i % 4), 6, 4 + (i % 3)]);
    const pool = await WorkerPool.create({ size: 2, spec: languageModelReplicaSpec(model), params: model.params, native: 'auto' });
    pool.publish(model.params);
    for (const options of [{ maxNewTokens: 8, greedy: true }, { maxNewTokens: 8, temperature: 1, seed: 7 }]) {
      expect(generateOnPool(model, prompts, options, pool).tokens).to.deep.equal(generate(model, prompts, options).tokens);
    }
    await pool.close();
    model.dispose();
  });
});
