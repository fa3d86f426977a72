// The command users run (`npm start`, `npx flowrl`): bin/flowrl.js on the compiled dist/, under
// plain Node without tsx's lenient resolver. npm test builds dist/ first (npm run build).
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, runNode, tempDir, writeCountdownConfig, type CliResult } from './helpers.js';

function runInstalled(args: string[]): Promise<CliResult> {
  return runNode([path.join(ROOT, 'bin', 'flowrl.js'), ...args], 120_000, { NODE_OPTIONS: '' });
}

/** Sources newer than their compiled file: a stale dist/ would test old code. */
function staleOutputs(): string[] {
  const stale: string[] = [];
  for (const dir of ['core-adapters', 'plugin']) {
    for (const entry of fs.readdirSync(path.join(ROOT, dir), { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.ts') || entry.endsWith('.d.ts')) continue;
      const source = path.join(ROOT, dir, entry);
      const compiled = path.join(ROOT, 'dist', dir, entry.replace(/\.ts$/, '.js'));
      if (!fs.existsSync(compiled) || fs.statSync(compiled).mtimeMs < fs.statSync(source).mtimeMs) stale.push(path.relative(ROOT, source));
    }
  }
  return stale;
}

describe('the installed command (bin/flowrl.js on dist/, plain Node)', function () {
  this.timeout(180_000);

  before(function () {
    const stale = staleOutputs();
    if (stale.length) throw new Error(`dist/ is missing or older than ${stale.slice(0, 3).join(', ')}${stale.length > 3 ? ', ...' : ''}; run \`npm run build\` (npm test does)`);
  });

  it('trains with two worker threads and writes its run directory', async () => {
    const dir = tempDir();
    const config = writeCountdownConfig(dir, { trainer: { total_training_steps: 2, test_freq: 2 }, engine: { workers: 2 } });
    const run = await runInstalled(['train', config]);
    expect(run.status, run.stderr.slice(-2000)).to.equal(0);
    expect(run.stdout + run.stderr).to.include(`run directory: ${path.join(dir, 'run')}`);
    expect(fs.readFileSync(path.join(dir, 'run', 'metrics.jsonl'), 'utf8').trim().split('\n')).to.have.length(3);
    expect(fs.existsSync(path.join(dir, 'run', 'report.html'))).to.equal(true);
  });
});
