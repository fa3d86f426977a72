// Crash anywhere, resume exactly: a short `flowrl train` is killed with SIGKILL at a seeded random
// moment (starting up, mid-step, writing a checkpoint, appending metrics), then resumed; the run
// must end with the uninterrupted run's metrics and every step in metrics.jsonl exactly once.
// FLOWRL_CRASH_TRIALS sets the number of trials (4 in npm test; the long run in docs/reliability.md is 200),
// FLOWRL_CRASH_VERBOSE=1 prints where each kill landed.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createHost, Rng, TOKENS, type Trainer } from '../core-adapters/index.js';
import { BUILT_CLI, expectFreshDist, readRunMetrics, ROOT, tempDir, withoutTiming, writeCountdownConfig } from './helpers.js';

const TRIALS = Number(process.env.FLOWRL_CRASH_TRIALS ?? 4);
const STEPS = 4;
const SETTINGS = { data: { val_files: null }, trainer: { total_training_steps: STEPS, save_freq: 1, val_before_train: false, test_freq: -1 } };

async function trainInProcess(file: string): Promise<void> {
  const host = await createHost(file, { quiet: true });
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  await trainer.fit();
  trainer.dispose();
}

/**
 * Starts `flowrl train FILE` and kills it with SIGKILL `extraMs` after its metrics file holds
 * `lines` lines (0: after it has written its config), or leaves it be once it has ended.
 */
async function killedRun(file: string, runDir: string, lines: number, extraMs: number): Promise<void> {
  const child = spawn(process.execPath, [BUILT_CLI, 'train', file], { cwd: ROOT, stdio: 'ignore' });
  const closed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  const written = () => {
    const metrics = path.join(runDir, 'metrics.jsonl');
    if (lines === 0) return fs.existsSync(path.join(runDir, 'config.yaml'));
    return fs.existsSync(metrics) && fs.readFileSync(metrics, 'utf8').split('\n').filter(Boolean).length >= lines;
  };
  while (child.exitCode === null && !written()) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, extraMs));
  child.kill('SIGKILL');
  await closed;
}

describe('crash anywhere, resume exactly', function () {
  this.timeout(60_000 + TRIALS * 30_000);
  before(expectFreshDist);

  it(`${TRIALS} runs killed at random moments resume to the uninterrupted run's metrics, each step exactly once`, async () => {
    const reference = tempDir();
    await trainInProcess(writeCountdownConfig(reference, SETTINGS));
    const expected = readRunMetrics(path.join(reference, 'run')).map(withoutTiming);
    const rng = new Rng(2026);
    for (let trial = 0; trial < TRIALS; trial++) {
      // Killed a random time (within about one step here) after a random number of finished steps.
      const lines = Math.floor(rng.next() * STEPS);
      const extra = Math.round(rng.next() * 400);
      const dir = tempDir();
      const file = writeCountdownConfig(dir, SETTINGS);
      await killedRun(file, path.join(dir, 'run'), lines, extra);
      if (process.env.FLOWRL_CRASH_VERBOSE) {
        const checkpoints = path.join(dir, 'run', 'checkpoints');
        console.log(`trial ${trial + 1}: killed ${extra} ms after ${lines} lines; on disk: ${fs.existsSync(checkpoints) ? fs.readdirSync(checkpoints).join(' ') || 'no checkpoint' : 'no checkpoint'}`);
      }
      await trainInProcess(file);
      const metrics = readRunMetrics(path.join(dir, 'run'));
      const label = `trial ${trial + 1}, killed ${extra} ms after ${lines} metrics lines`;
      expect(metrics.map((m) => m.step), label).to.deep.equal([1, 2, 3, 4]);
      expect(metrics.map(withoutTiming).at(-1), label).to.deep.equal(expected.at(-1));
    }
  });
});
