import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createHost, LocalCheckpointStore, RLTrainer, TOKENS, type Trainer, type Worker } from '../core-adapters/index.js';
import { enginePaths, expectInputErrorAsync, onEnginePath, readRunMetrics, runBuiltFlowrl, spawnBuiltFlowrl, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

/** The countdown fixture (see its README) with a critic for ppo. */
function writeConfig(dir: string, extra: Record<string, unknown> = {}): string {
  return writeCountdownConfig(dir, { critic: { optim: { lr: 1e-3 }, ppo_micro_batch_size: 64 }, ...extra });
}

async function train(configFile: string, overrides: string[]): Promise<{ trainer: Trainer; worker: Worker }> {
  const host = await createHost(configFile, { overrides, quiet: true });
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  expect(trainer.constructor).to.equal(RLTrainer);
  const worker = host.container.get<Worker>(TOKENS.Worker);
  try {
    await trainer.fit();
  } finally {
    // The worker, the critic and the reward shapers, even after a failed start: their variables
    // would otherwise stay registered in this mocha worker for every later file.
    trainer.dispose();
  }
  return { trainer, worker };
}

describe('the core trainer on a tiny countdown task', function () {
  this.timeout(300000);

  for (const algorithm of ['grpo', 'reinforce_plus_plus', 'ppo']) {
    it(`${algorithm}: one trainer class raises validation accuracy`, async () => {
      const dir = tempDir();
      const file = writeConfig(dir);
      await train(file, [`algorithm.name=${algorithm}`, 'trainer.total_training_steps=30', 'trainer.test_freq=30']);
      const metrics = readRunMetrics(path.join(dir, 'run'));
      const before = metrics.find((m) => m.step === 0)!;
      const after = metrics.find((m) => m.step === 30)!;
      expect(before['val/accuracy']).to.be.a('number');
      expect(after['val/accuracy'], `${algorithm}: ${before['val/accuracy']} -> ${after['val/accuracy']}`).to.be.greaterThan(before['val/accuracy'] + 0.03);
      for (const key of ['critic/score/mean', 'response_length/mean', 'actor/pg_loss', 'actor/grad_norm', 'timing_s/step', 'perf/throughput']) {
        expect(metrics.find((m) => m.step === 1), key).to.have.property(key);
      }
      if (algorithm === 'ppo') expect(metrics.find((m) => m.step === 1)).to.have.property('critic/vf_loss');
      // The phases account for the step: local sampling (timing_s/gen) once went unclocked.
      const first = metrics.find((m) => m.step === 1)!;
      const phases = Object.keys(first).filter((k) => k.startsWith('timing_s/') && k !== 'timing_s/step');
      const clocked = phases.reduce((sum, k) => sum + first[k], 0);
      expect(first['timing_s/gen'], 'sampling 64 rows takes more than a millisecond').to.be.greaterThan(1e-3);
      expect(clocked / first['timing_s/step'], phases.join(', ')).to.be.within(0.6, 1);
      // The unbiased pass@j (4 samples per prompt): pass@1 is the accuracy, pass@4 any-correct.
      for (const m of [before, after]) {
        expect(m['val/pass@1']).to.be.closeTo(m['val/accuracy'], 1e-12);
        expect(m['val/pass@4']).to.be.closeTo(m['val/pass@k'], 1e-12);
        expect(m['val/pass@2']).to.be.within(m['val/pass@1'], m['val/pass@4']);
      }
    });
  }

  // ppo (actor, critic and their optimizers) on every engine path; grpo on the default one.
  const resumeCases = [...enginePaths().map((enginePath) => ({ algorithm: 'ppo', enginePath })), { algorithm: 'grpo', enginePath: undefined }];
  for (const { algorithm, enginePath } of resumeCases) {
    it(`${algorithm}: stopping after step 1 and resuming gives the uninterrupted run's step 2${enginePath ? ` (${enginePath})` : ''}`, async () => {
      const check = async () => {
        // A warm-up in both schedules, so a scheduler that does not resume changes step 2's lr.
        const warmup = ['actor_rollout_ref.actor.optim.lr_warmup_steps=2', 'critic.optim.lr_warmup_steps=2'];
        const common = [`algorithm.name=${algorithm}`, 'trainer.save_freq=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1', ...warmup];
        const whole = tempDir();
        await train(writeConfig(whole), [...common, 'trainer.total_training_steps=2']);
        const split = tempDir();
        const file = writeConfig(split);
        await train(file, [...common, 'trainer.total_training_steps=1']);
        await train(file, [...common, 'trainer.total_training_steps=2']);
        const a = readRunMetrics(path.join(whole, 'run'));
        const b = readRunMetrics(path.join(split, 'run'));
        expect(b.map((m) => m.step)).to.deep.equal([1, 2]);
        expect(withoutTiming(b[1])).to.deep.equal(withoutTiming(a[1]));
      };
      await (enginePath ? onEnginePath(enginePath, check) : check());
    });
  }

  it('one run per directory: a second run stops at once naming the holder; a dead run\'s lock is taken over and released at the end', async () => {
    const dir = tempDir();
    const file = writeConfig(dir);
    const runDir = path.join(dir, 'run');
    const lock = path.join(runDir, '.lock');
    const short = ['trainer.total_training_steps=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1'];
    fs.mkdirSync(runDir, { recursive: true });
    fs.writeFileSync(lock, JSON.stringify({ pid: process.pid, host: os.hostname(), started: '2026-01-01T00:00:00Z' }));
    await expectInputErrorAsync(train(file, short), runDir, `in use by another training run (pid ${process.pid}`);
    expect(fs.readdirSync(runDir), 'nothing written beside the lock').to.deep.equal(['.lock']);
    const exited = spawnSync(process.execPath, ['-e', '']).pid!;
    fs.writeFileSync(lock, JSON.stringify({ pid: exited, host: os.hostname(), started: '2026-01-01T00:00:00Z' }));
    await train(file, short);
    expect(fs.existsSync(lock), 'released').to.equal(false);
    expect(readRunMetrics(runDir).map((m) => m.step)).to.deep.equal([1]);
  });

  it('a damaged latest checkpoint (cut short, changed, missing a file) is found at resume: the run falls back, or stops with exit 2', async () => {
    const dir = tempDir();
    const file = writeConfig(dir);
    const common = ['trainer.save_freq=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1'];
    await train(file, [...common, 'trainer.total_training_steps=2']);
    const host = await createHost(file, { overrides: common, quiet: true });
    const store = host.container.get<LocalCheckpointStore>(TOKENS.CheckpointStore);
    const checkpoint = (step: number, ...parts: string[]) => path.join(store.root, `global_step_${step}`, ...parts);
    expect(JSON.parse(fs.readFileSync(checkpoint(2, 'manifest.json'), 'utf8')).files).to.have.property(path.join('actor', 'model.safetensors'));
    const weights = checkpoint(2, 'actor', 'model.safetensors');
    fs.truncateSync(weights, fs.statSync(weights).size - 7);
    expect(store.resumeTarget()?.step, 'falls back past the cut-short file').to.equal(1);
    await train(file, [...common, 'trainer.total_training_steps=3']);
    expect(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)).to.deep.equal([1, 2, 3]);
    // Every checkpoint damaged: one byte changed, one file missing, one cut short.
    const flip = (f: string) => {
      const bytes = fs.readFileSync(f);
      bytes[bytes.length - 1] ^= 1;
      fs.writeFileSync(f, bytes);
    };
    flip(checkpoint(1, 'actor', 'optimizer.safetensors'));
    fs.rmSync(checkpoint(2, 'actor', 'config.json'));
    fs.truncateSync(checkpoint(3, 'actor', 'model.safetensors'), 10);
    const error = await expectInputErrorAsync(train(file, [...common, 'trainer.total_training_steps=4']), 'every checkpoint is damaged', 'SHA-256', 'missing', 'bytes, the manifest says');
    expect(error.exitCode).to.equal(2);
  });

  it('a run killed after its checkpoint but before its metrics line gets the line back at resume: every step exactly once', async () => {
    const common = ['trainer.save_freq=1', 'trainer.val_before_train=false', 'trainer.test_freq=-1'];
    const whole = tempDir();
    await train(writeConfig(whole), [...common, 'trainer.total_training_steps=3']);
    const dir = tempDir();
    const file = writeConfig(dir);
    await train(file, [...common, 'trainer.total_training_steps=2']);
    const metricsFile = path.join(dir, 'run', 'metrics.jsonl');
    const lines = fs.readFileSync(metricsFile, 'utf8').split('\n').filter(Boolean);
    fs.writeFileSync(metricsFile, lines[0] + '\n' + lines[1].slice(0, 20)); // step 2's append cut short
    await train(file, [...common, 'trainer.total_training_steps=3']);
    const [a, b] = [readRunMetrics(path.join(whole, 'run')), readRunMetrics(path.join(dir, 'run'))];
    expect(b.map((m) => m.step)).to.deep.equal([1, 2, 3]);
    for (const i of [1, 2]) expect(withoutTiming(b[i])).to.deep.equal(withoutTiming(a[i]));
  });

  it('a checkpoint write cut off part-way leaves the previous checkpoint usable and the run resumable', async () => {
    const dir = tempDir();
    const file = writeConfig(dir);
    const common = ['trainer.save_freq=2', 'trainer.val_before_train=false', 'trainer.test_freq=-1'];
    await train(file, [...common, 'trainer.total_training_steps=2']);
    const host = await createHost(file, { overrides: common, quiet: true });
    const store = host.container.get<LocalCheckpointStore>(TOKENS.CheckpointStore);
    // A save that dies after writing part of its files, and the debris a killed process leaves.
    const cutOff = await store
      .save(4, (tmp) => {
        fs.writeFileSync(path.join(tmp, 'partial.bin'), 'x');
        throw new Error('disk full');
      })
      .then(() => undefined, (e: Error) => e);
    expect(cutOff?.message).to.equal('disk full');
    fs.mkdirSync(path.join(store.root, '.global_step_6.tmp-killed'), { recursive: true });
    fs.mkdirSync(path.join(store.root, 'global_step_8'), { recursive: true }); // no trainer_state.json: incomplete
    expect(store.latest()?.step).to.equal(2);
    expect(fs.existsSync(path.join(store.root, 'global_step_4'))).to.equal(false);
    await train(file, [...common, 'trainer.total_training_steps=3']);
    expect(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)).to.deep.equal([1, 2, 3]);
  });

  it('flowrl train exits 2 naming a missing data file', async () => {
    const dir = tempDir();
    const file = writeConfig(dir, { data: { train_files: 'nowhere/train.jsonl' } });
    const run = await runBuiltFlowrl(['train', file, 'engine.backend=wasm']);
    expect(run.status).to.equal(2);
    expect(run.stderr).to.include(path.join(dir, 'nowhere/train.jsonl'));
    expect(run.stderr).to.not.match(/\n\s+at /);
  });

  it('SIGTERM finishes the step, writes a checkpoint and exits 143; the run then resumes exactly', async () => {
    const dir = tempDir();
    const file = writeConfig(dir, { data: { val_files: null }, trainer: { total_training_steps: 200, save_freq: -1, val_before_train: false } });
    const runDir = path.join(dir, 'run');
    const child = spawnBuiltFlowrl(['train', file]);
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const metricsFile = path.join(runDir, 'metrics.jsonl');
    while (!(fs.existsSync(metricsFile) && fs.readFileSync(metricsFile, 'utf8').includes('"step":1,'))) {
      expect(child.exitCode, `the run ended before its first step:\n${stderr}`).to.equal(null);
      await new Promise((r) => setTimeout(r, 50));
    }
    child.kill('SIGTERM');
    expect(await exited, stderr).to.equal(143);
    const stopped = Number(/stopped by SIGTERM after step (\d+)/.exec(stderr)?.[1]);
    expect(stopped, stderr).to.be.within(1, 199);
    expect(readRunMetrics(runDir).map((m) => m.step)).to.deep.equal(Array.from({ length: stopped }, (_, i) => i + 1));
    expect(fs.existsSync(path.join(runDir, 'checkpoints', `global_step_${stopped}`, 'trainer_state.json'))).to.equal(true);
    expect(fs.existsSync(path.join(runDir, '.lock')), 'lock released').to.equal(false);
    await train(file, [`trainer.total_training_steps=${stopped + 1}`]);
    expect(readRunMetrics(runDir).map((m) => m.step).at(-1)).to.equal(stopped + 1);
    // Exactly: the resumed step equals the same step of a run never stopped.
    const whole = tempDir();
    await train(writeConfig(whole, { data: { val_files: null }, trainer: { total_training_steps: 200, save_freq: -1, val_before_train: false } }), [`trainer.total_training_steps=${stopped + 1}`]);
    expect(withoutTiming(readRunMetrics(runDir).at(-1)!)).to.deep.equal(withoutTiming(readRunMetrics(path.join(whole, 'run')).at(-1)!));
  });
});
