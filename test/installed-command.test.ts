// The command users run (`npm start`, `npx flowrl`): bin/flowrl.js on the compiled dist/, under
// plain Node without tsx's lenient resolver. npm test builds dist/ first (npm run build).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { parentPreloads } from '../core-adapters/thread-entry.js';
import { expectFreshDist, ROOT, runNode, tempDir, writeCountdownConfig, type CliResult } from './helpers.js';

function runInstalled(args: string[]): Promise<CliResult> {
  return runNode([path.join(ROOT, 'bin', 'flowrl.js'), ...args], 120_000, { NODE_OPTIONS: '' });
}

describe('the installed command (bin/flowrl.js on dist/, plain Node)', function () {
  this.timeout(180_000);

  before(expectFreshDist);

  it('trains with two worker threads and writes its run directory', async () => {
    const dir = tempDir();
    const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 2, test_freq: 2 }, engine: { workers: 2 } });
    const run = await runInstalled(['train', config]);
    expect(run.status, run.stderr.slice(-2000)).to.equal(0);
    expect(run.stdout + run.stderr).to.include(`run directory: ${path.join(dir, 'run')}`);
    expect(fs.readFileSync(path.join(dir, 'run', 'metrics.jsonl'), 'utf8').trim().split('\n')).to.have.length(3);
    expect(fs.existsSync(path.join(dir, 'run', 'report.html'))).to.equal(true);
  });

  it("the README's TypeScript-plugin route (NODE_OPTIONS=--import=tsx) trains with two worker threads: each thread loads the .ts plugin as the parent did", async () => {
    const dir = tempDir();
    const run = await runNode(
      [path.join(ROOT, 'bin', 'flowrl.js'), 'train', path.join(ROOT, 'examples', 'custom-plugin', 'config.yaml'), 'trainer.total_training_steps=1', 'trainer.test_freq=1', 'engine.workers=2', `trainer.default_local_dir=${dir}`],
      120_000,
      { NODE_OPTIONS: '--import=tsx' },
    );
    expect(run.status, run.stderr.slice(-2000)).to.equal(0);
    expect(run.stderr).to.include('short-answers');
    expect(fs.readFileSync(path.join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n').length).to.be.at.least(2);
  });
});

describe('parentPreloads: what a worker thread imports first', () => {
  it('reads --import in both spellings from the arguments and NODE_OPTIONS, once each, paths made absolute URLs', () => {
    const found = parentPreloads(['--import', 'tsx', '--no-warnings'], '--import=./hooks/register.mjs --max-old-space-size=4096 --import=tsx');
    expect(found).to.deep.equal(['tsx', new URL(`file://${path.resolve('hooks/register.mjs')}`).href]);
    expect(parentPreloads([], '')).to.deep.equal([]);
  });
});
