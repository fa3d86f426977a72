import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import { generate, loadModel, packSequences, scoreResponses, type CausalLM } from '../core-adapters/index.js';
import { ropeInverseFrequencies } from '../core-adapters/model/causal-lm.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { expectClose, fixture, readJson } from './helpers.js';

interface Case {
  prompt_ids: number[];
  response_ids: number[];
  logprobs_t1: number[];
  logprobs_t07: number[];
  final_hidden_last?: number[];
  layer_outputs_last?: number[][];
  greedy?: number[];
}
type Reference = Record<string, Case[]> & { rope_inv_freq: Record<string, number[]> };

const reference = readJson<Reference>(fixture('reference.json'));

// The float64 references come from test/fixtures/make_reference.py (PyTorch, written independently).
for (const [name, dir] of [
  ['tiny-qwen2', 'tiny-qwen2'],
  ['tiny-llama-bf16', 'tiny-llama-bf16'],
  ['tiny-qwen2', 'tiny-qwen2-sharded'],
] as const) {
  describe(`causal LM against the float64 reference: ${dir}`, () => {
    let model: CausalLM;
    const cases = reference[name];
    before(() => {
      model = loadModel(fixture(dir));
    });
    after(() => model.dispose());

    it('has the reference rotary frequencies', () => {
      expectClose(ropeInverseFrequencies(model.config), reference.rope_inv_freq[name], 1e-12, 'inv_freq');
    });

    it('gives each sequence alone the reference log-probs (temperature 1 and 0.7)', async () => {
      for (const c of cases) {
        expectClose((await responseLogProbs(model, [c.prompt_ids], [c.response_ids]))[0], c.logprobs_t1, 1e-4, 't=1');
        expectClose((await responseLogProbs(model, [c.prompt_ids], [c.response_ids], 0.7))[0], c.logprobs_t07, 1e-4, 't=0.7');
      }
    });

    it('gives a left-padded batch the same log-probs as each sequence alone', async () => {
      const batched = await responseLogProbs(
        model,
        cases.map((c) => c.prompt_ids),
        cases.map((c) => c.response_ids),
      );
      cases.forEach((c, i) => expectClose(batched[i], c.logprobs_t1, 1e-4, `case ${i}`));
    });

    it('returns the final-norm hidden state and decoder-layer outputs', () => {
      const c = cases[0];
      const seq = packSequences([c.prompt_ids], [c.response_ids]);
      const layers = model.config.numLayers;
      const outputLayers = Array.from({ length: layers }, (_, i) => i);
      const [hidden, ...layerOutputs] = tf.tidy(() => {
        const out = scoreResponses(model, seq, { outputLayers });
        const last = (t: tf.Tensor2D) => t.slice([t.shape[0] - 1, 0], [1, -1]).reshape([-1]);
        return [last(out.hidden), ...out.layerOutputs.map(last)];
      });
      expectClose(hidden.dataSync(), c.final_hidden_last!, 1e-4, 'final hidden');
      layerOutputs.forEach((t, i) => expectClose(t.dataSync(), c.layer_outputs_last![i], 2e-4, `layer ${i}`));
      tf.dispose([hidden, ...layerOutputs]);
    });

    it('decodes greedily like the reference, with and without the KV cache', async () => {
      const c = cases[0];
      const cached = await generate(model, [c.prompt_ids], { maxNewTokens: 8, greedy: true });
      const uncached = await generate(model, [c.prompt_ids], { maxNewTokens: 8, greedy: true, noCache: true });
      expect(cached.tokens[0]).to.deep.equal(c.greedy);
      expect(uncached.tokens[0]).to.deep.equal(c.greedy);
    });
  });
}
