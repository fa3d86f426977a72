// The code sandbox in a helper process (core-adapters/rewards/sandbox-process.ts): what the reward
// path and the code tool use, so that starting a program forks a small process, not the trainer.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { InputError, ScorerUnavailable } from '../core-adapters/errors.js';
import { Sandbox } from '../core-adapters/rewards/sandbox.js';
import { SandboxProcess } from '../core-adapters/rewards/sandbox-process.js';
import { ROOT, tempDir } from './helpers.js';

/** The parent pid of a process, undefined once it is gone. */
function parentOf(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return undefined;
  }
}

/** Every process below `root`. */
function descendants(root: number): number[] {
  const pids = fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).map(Number);
  const below = (pid: number): boolean => {
    const parent = parentOf(pid);
    return parent === root || (parent !== undefined && parent > 1 && below(parent));
  };
  return pids.filter(below);
}

const processName = (pid: number) => {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return undefined;
  }
};

describe('the code sandbox in a helper process', function () {
  this.timeout(120_000);
  const limits = { wallSeconds: 5, cpuSeconds: 1 };

  it("answers as this process's Sandbox does (output, exit codes, the report channel, a timeout, an unknown language); its programs are the helper's descendants, not this process's; a helper that dies fails its runs and the next run starts another", async () => {
    const helper = new SandboxProcess({ limits });
    const local = new Sandbox({ limits });
    const programs = ['print(6 * 7)', 'import sys\nprint("out"); sys.exit(3)', 'import os\nos.write(5, os.read(4, 64) + b"reported")', 'while True: pass'];
    const [there, here] = await Promise.all([Promise.all(programs.map((p) => helper.run('python', p, '', { report: true }))), Promise.all(programs.map((p) => local.run('python', p, '', { report: true })))]);
    const shape = (r: (typeof there)[number]) => ({ status: r.status, exitCode: r.exitCode, stdout: r.stdout, report: r.report });
    expect(there.map(shape)).to.deep.equal(here.map(shape));
    expect(there.map((r) => r.status)).to.deep.equal(['exited', 'exited', 'exited', 'timeout']);
    expect(there[2].report).to.equal('reported');
    expect(helper.describeBounds()).to.equal(local.describeBounds());
    let refused: unknown;
    await helper.run('cobol', 'x').catch((e: unknown) => (refused = e));
    expect(refused).to.be.instanceOf(InputError);
    expect((refused as Error).message).to.include("unknown language 'cobol'");

    // While a run sleeps: bwrap is below the helper; none is among this process's other descendants.
    const held = helper.run('python', 'import time\ntime.sleep(60)');
    const helperPid = helper.pid!;
    for (const started = Date.now(); !descendants(helperPid).map(processName).includes('bwrap'); ) {
      expect(Date.now() - started, 'bwrap below the helper').to.be.below(30_000);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const ours = descendants(process.pid).filter((pid) => pid !== helperPid && !descendants(helperPid).includes(pid));
    expect(ours.map(processName), 'processes of this one outside the helper').to.not.include('bwrap');
    // The helper killed: the run it held fails, saying so; the next run starts another helper.
    helper.close();
    let stopped: unknown;
    await held.catch((e: unknown) => (stopped = e));
    expect(stopped).to.be.instanceOf(ScorerUnavailable);
    expect((stopped as Error).message).to.match(/the code sandbox's helper process stopped \(signal SIGKILL\)/);
    expect((await helper.run('python', 'print("again")')).stdout).to.equal('again\n');
    expect(helper.pid).to.not.equal(helperPid);
    helper.close();
  });

  it("does not keep a process alive, and a Ctrl-C for the trainer's process group leaves the runs under way alone (the trainer finishes its step)", async () => {
    const script = path.join(tempDir(), 'ctrl-c.mts');
    fs.writeFileSync(
      script,
      [
        `import { SandboxProcess } from ${JSON.stringify(path.join(ROOT, 'core-adapters', 'rewards', 'sandbox-process.ts'))};`,
        'const helper = new SandboxProcess({ limits: { wallSeconds: 10 } });',
        "process.on('SIGINT', () => console.log('SIGINT: finishing the step'));",
        "const run = helper.run('python', 'import time\\ntime.sleep(2)\\nprint(\"done\")');",
        "console.log('started');",
        'const result = await run;',
        'console.log(result.status, result.stdout.trim());',
      ].join('\n'),
    );
    // detached: the script leads a process group, as a trainer started from a terminal does.
    const child = spawn(process.execPath, ['--import', 'tsx', script], { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    while (!out.includes('started')) await new Promise((resolve) => setTimeout(resolve, 50));
    await new Promise((resolve) => setTimeout(resolve, 800));
    process.kill(-child.pid!, 'SIGINT');
    // It ends by itself once the run is done: the helper holds it only while a run is pending.
    expect(await exited, err).to.equal(0);
    expect(out.trim().split('\n')).to.deep.equal(['started', 'SIGINT: finishing the step', 'exited done']);
  });
});
