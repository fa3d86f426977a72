import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { AdamW, createHost, generate, loadModel, packSequences, resolveConfig, Rng, runSft, TOKENS, type Trainer } from '../core-adapters/index.js';
import { ThreadPool } from '../core-adapters/engine/thread-pool.js';
import { initWeights, modelFromWeights } from '../core-adapters/model/checkpoint.js';
import { parseModelConfig } from '../core-adapters/model/config.js';
import { generateOnPool } from '../core-adapters/model/generate.js';
import { languageModelReplicaSpec } from '../core-adapters/model/lm-replica.js';
import { languageModelStep } from '../core-adapters/model/train-step.js';
import { enginePaths, expectClose, fixture, onEnginePath, readRunMetrics, ROOT, tempDir, writeCountdownConfig } from './helpers.js';

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

  for (const enginePath of enginePaths()) {
    it(`two threads train a language model like one thread (same batch, float tolerance), without leaking tensors (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const config = parseModelConfig(TINY, 'tiny');
        const rng = new Rng(4);
        const rows = Array.from({ length: 7 }, () => Array.from({ length: 3 + rng.int(8) }, () => 1 + rng.int(31)));
        const seq = packSequences(rows.map((r) => r.slice(0, 2)), rows.map((r) => r.slice(2)));
        const train = async (threads: number) => {
          const model = modelFromWeights(config, initWeights(config, 9));
          const optimizer = new AdamW({ lr: 1e-2 });
          const pool = threads > 1 ? await ThreadPool.create({ size: threads, spec: languageModelReplicaSpec(model), params: model.params, native: 'auto' }) : undefined;
          pool?.publish(model.params);
          const losses = [await languageModelStep(model, optimizer, seq, 1, pool)];
          const tensors = tf.memory().numTensors;
          for (let i = 0; i < 3; i++) losses.push(await languageModelStep(model, optimizer, seq, 1, pool));
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
      }));

    it(`sampling split across threads gives each row the tokens a single thread samples (${enginePath})`, () =>
      onEnginePath(enginePath, async () => {
        const model = loadModel(fixture('countdown', 'base-model'));
        const prompts = Array.from({ length: 6 }, (_, i) => [5 + (i % 4), 6, 4 + (i % 3)]);
        const pool = await ThreadPool.create({ size: 2, spec: languageModelReplicaSpec(model), params: model.params, native: 'auto' });
        pool.publish(model.params);
        for (const options of [{ maxNewTokens: 8, greedy: true }, { maxNewTokens: 8, temperature: 1, seed: 7 }]) {
          expect((await generateOnPool(model, prompts, options, pool, 1)).tokens).to.deep.equal((await generate(model, prompts, options)).tokens);
        }
        await pool.close();
        model.dispose();
      }));
  }
});

describe('data-parallel workers in the RL trainer', function () {
  this.timeout(300000);

  before(function () {
    if (tf.getBackend() !== 'wasm') this.skip();
  });

  for (const [algorithm, loraRank] of [['grpo', 0], ['flowrl', 0], ['flowrl', 4]] as const) {
    it(`${algorithm}${loraRank ? ' with LoRA (the frozen base shared with the threads)' : ''}: three threads (micro-batches and rollouts split unevenly) match one thread to float tolerance, the loss metrics too`, async () => {
      const run = async (workers: number) => {
        const dir = tempDir();
        const file = writeCountdownConfig(dir, {
          plugins: [path.join(ROOT, 'plugin.json')],
          engine: { workers },
          data: { train_batch_size: 4, val_files: null },
          actor_rollout_ref: { model: { lora_rank: loraRank }, actor: { ppo_mini_batch_size: 2, ppo_micro_batch_size: 16 } },
          algorithm: { name: algorithm },
          trainer: { total_training_steps: 3, val_before_train: false, test_freq: -1, save_freq: -1, seed: 2 },
        });
        const host = await createHost(file, { quiet: true });
        const trainer = host.container.get<Trainer>(TOKENS.Trainer);
        await trainer.fit();
        trainer.dispose();
        return readRunMetrics(path.join(dir, 'run'));
      };
      const single = await run(1);
      // 16 rows a mini-batch over 3 threads: pieces of 6, 5 and 5 rows.
      const parallel = await run(3);
      expect(parallel.length).to.equal(single.length);
      // Token means within a piece (clip fractions, ...) are averaged over pieces by their rows, so
      // compare what the summed gradients and the rollouts determine: gradient norms, rewards,
      // lengths, entropies, and the losses (each piece's metric weighs its share of the rows).
      const losses = ['actor/pg_loss', 'actor/final_loss'];
      const determined = (key: string) => key === 'actor/grad_norm' || key === 'actor/entropy' || losses.includes(key) || key.startsWith('critic/') || key.startsWith('response_length/');
      expect(Object.keys(single[0]).some((key) => losses.includes(key)), 'a loss metric is compared').to.equal(true);
      single.forEach((m, i) => {
        for (const [key, value] of Object.entries(m)) {
          if (!determined(key)) continue;
          expect(parallel[i][key], `step ${m.step} ${key}`).to.be.closeTo(value, 1e-4 * Math.max(1, Math.abs(value)));
        }
      });
    });
  }
});

describe('flowrl sft with data-parallel workers', function () {
  this.timeout(300000);

  it('supervised fine-tuning from scratch lowers the loss, and two threads match one', async () => {
    const run = async (workers: number) => {
      const dir = tempDir();
      const config = resolveConfig({
        userFile: path.join(dir, 'config.yaml'),
        user: {
          engine: { workers },
          data: { train_files: fixture('countdown', 'data', 'train.jsonl'), max_prompt_length: 32, max_response_length: 16 },
          actor_rollout_ref: { model: { tokenizer_path: fixture('countdown', 'tokenizer') } },
          sft: { init_config: fixture('countdown', 'model-config.json'), total_steps: 12, batch_size: 16, lr: 3e-3, output_dir: path.join(dir, 'model') },
          trainer: { seed: 4, default_local_dir: dir },
        },
      });
      const lines: string[] = [];
      const result = await runSft(config, (l) => lines.push(l));
      expect(fs.existsSync(path.join(dir, 'model', 'model.safetensors'))).to.equal(true);
      return result;
    };
    const single = await run(1);
    const parallel = await run(2);
    // A fresh model starts near ln(vocabulary) = ln(24) = 3.18.
    expect(single.trainLoss).to.be.lessThan(2.9);
    expect(parallel.trainLoss).to.be.closeTo(single.trainLoss, 1e-3);
    expect(parallel.valLoss ?? 0).to.be.closeTo(single.valLoss ?? 0, 1e-3);
  });
});
