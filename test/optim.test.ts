import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import path from 'node:path';
import { AdamW, createHost, LrScheduler, resolveConfig, runSft, TOKENS, type Trainer } from '../core-adapters/index.js';
import { clipGradNorm, globalNorm, verlLrSchedule, type VerlOptimSchedule } from '../core-adapters/model/optim.js';
import { expectClose, expectInputError, expectInputErrorAsync, fixture, readJson, readRunMetrics, tempDir, writeCountdownConfig } from './helpers.js';

interface AdamWReference {
  lr: number;
  betas: [number, number];
  eps: number;
  weight_decay: number;
  max_norm: number;
  params_init: [number[][], number[]];
  grads: [number[][], number[]][];
  grad_norms: number[];
  params_after: [number[][], number[]][];
}

describe('AdamW and gradient clipping against torch.optim.AdamW + clip_grad_norm_', () => {
  const ref = readJson<{ adamw: AdamWReference }>(fixture('reference.json')).adamw;

  it('follows the PyTorch trajectory, clipping on some steps and not others', async () => {
    const p1 = tf.variable(tf.tensor2d(ref.params_init[0]), true, 'p1');
    const p2 = tf.variable(tf.tensor1d(ref.params_init[1]), true, 'p2');
    const optimizer = new AdamW({ lr: ref.lr, betas: ref.betas, eps: ref.eps, weightDecay: ref.weight_decay });
    for (const [step, [g1, g2]] of ref.grads.entries()) {
      const grads = new Map<string, tf.Tensor>([
        ['p1', tf.tensor2d(g1)],
        ['p2', tf.tensor1d(g2)],
      ]);
      const norm = await clipGradNorm(grads, ref.max_norm);
      expect(norm).to.be.closeTo(ref.grad_norms[step], 1e-5);
      optimizer.apply(new Map<string, tf.Variable>([['p1', p1], ['p2', p2]]), grads);
      tf.dispose([...grads.values()]);
      expectClose(p1.dataSync(), ref.params_after[step][0].flat(), 2e-6, `p1 step ${step}`);
      expectClose(p2.dataSync(), ref.params_after[step][1], 2e-6, `p2 step ${step}`);
    }
    expect(optimizer.step).to.equal(ref.grads.length);
    optimizer.dispose();
    tf.dispose([p1, p2]);
  });

  it('state saved mid-run and restored into a fresh optimizer continues identically', async () => {
    const run = async (restartAt?: number) => {
      const p = tf.variable(tf.tensor1d(ref.params_init[1]), true, 'p');
      let optimizer = new AdamW({ lr: ref.lr, weightDecay: ref.weight_decay });
      for (const [step, [, g]] of ref.grads.entries()) {
        if (step === restartAt) {
          const state = await optimizer.getState();
          optimizer.dispose();
          optimizer = new AdamW({ lr: ref.lr, weightDecay: ref.weight_decay });
          optimizer.setState(state, new Map([['p', p]]));
        }
        const grad = tf.tensor1d(g);
        optimizer.apply(new Map([['p', p]]), new Map([['p', grad]]));
        grad.dispose();
      }
      const out = Float32Array.from(p.dataSync());
      optimizer.dispose();
      p.dispose();
      return out;
    };
    expect(Array.from(await run(3))).to.deep.equal(Array.from(await run()));
  });

  it('reports a non-finite norm and leaves the gradients untouched', async () => {
    const grads = new Map<string, tf.Tensor>([['a', tf.tensor1d([1, NaN])]]);
    const original = grads.get('a');
    expect(Number.isNaN(await clipGradNorm(grads, 1))).to.equal(true);
    expect(grads.get('a')).to.equal(original);
    const parts = [tf.tensor1d([3]), tf.tensor1d([4])];
    expect(await globalNorm(parts)).to.be.closeTo(5, 1e-6);
    tf.dispose([...grads.values(), ...parts]);
  });
});

describe("learning-rate schedules against verl's formulas (torch LambdaLR, stepped once per training step)", () => {
  const reference = readJson<{ cases: { name: string; optim: Omit<VerlOptimSchedule, 'warmup_style'>; lrs: number[] }[] }>(fixture('lr_schedule_reference.json'));

  for (const c of reference.cases) {
    it(c.name, () => {
      const scheduler = new LrScheduler(verlLrSchedule({ ...c.optim, warmup_style: null }, 'optim'));
      const lrs = c.lrs.map(() => {
        const lr = scheduler.lr;
        scheduler.step();
        return lr;
      });
      expectClose(lrs, c.lrs, 1e-15, c.name);
    });
  }

  it('takes the deprecated warmup_style over lr_scheduler_type, and names a bad value', () => {
    const optim: VerlOptimSchedule = { ...reference.cases[0].optim, lr_scheduler_type: 'constant', warmup_style: 'cosine', lr_warmup_steps: 0 };
    expect(verlLrSchedule(optim, 'critic.optim').totalSteps).to.equal(optim.total_training_steps);
    expectInputError(() => verlLrSchedule({ ...optim, warmup_style: 'linear' }, 'critic.optim'), "'critic.optim.warmup_style'", 'constant, cosine');
    expectInputError(() => verlLrSchedule({ ...optim, warmup_style: null, lr_scheduler_type: 'wsd' }, 'actor_rollout_ref.actor.optim'), "'actor_rollout_ref.actor.optim.lr_scheduler_type'");
  });

  it('the trainer steps the actor schedule once per training step: every mini-batch of a step shares its lr, and the first step runs at 0', async () => {
    const dir = tempDir();
    const file = writeCountdownConfig(dir, {
      data: { val_files: null },
      actor_rollout_ref: { actor: { ppo_mini_batch_size: 4, optim: { lr: 1e-3, lr_warmup_steps: 2 } } },
      trainer: { total_training_steps: 3, val_before_train: false, test_freq: -1, save_freq: -1 },
    });
    const host = await createHost(file, { quiet: true });
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    await trainer.fit();
    trainer.dispose();
    expect(readRunMetrics(path.join(dir, 'run')).map((m) => m['actor/lr'])).to.deep.equal([0, 5e-4, 1e-3]);
  });

  it('flowrl sft: a cosine schedule per optimizer step to min_lr_ratio, and a bad scheduler key named', async () => {
    const dir = tempDir();
    const user = (sft: Record<string, unknown>) => ({
      engine: { workers: 1 },
      data: { train_files: fixture('countdown', 'data', 'train.jsonl'), max_prompt_length: 32, max_response_length: 16 },
      actor_rollout_ref: { model: { tokenizer_path: fixture('countdown', 'tokenizer') } },
      sft: { init_config: fixture('countdown', 'model-config.json'), total_steps: 12, batch_size: 4, lr: 3e-3, warmup_steps: 2, output_dir: path.join(dir, 'model'), ...sft },
      trainer: { seed: 4, default_local_dir: dir },
    });
    const lines: string[] = [];
    await runSft(resolveConfig({ userFile: path.join(dir, 'c.yaml'), user: user({ lr_scheduler_type: 'cosine', min_lr_ratio: 0.1 }) }), (l) => lines.push(l));
    // The last step (k = 11) is 9/10 of the way through the 10 steps after warm-up.
    const last = 3e-3 * (0.1 + 0.9 * 0.5 * (1 + Math.cos(Math.PI * 0.9)));
    expect(lines.at(-1)).to.match(/^sft step 12\/12 loss \d\.\d{4} lr /);
    expect(Number(lines.at(-1)!.split(' lr ')[1].split(' ')[0])).to.be.closeTo(last, 1e-6);
    expectInputError(() => resolveConfig({ userFile: path.join(dir, 'c.yaml'), user: user({ lr_scheduler_type: 'linear' }) }), 'sft.lr_scheduler_type');
    await expectInputErrorAsync(runSft(resolveConfig({ userFile: path.join(dir, 'c.yaml'), user: user({ min_lr_ratio: 2 }) })), "'sft.min_lr_ratio'");
  });
});
