// The code sandbox against programs that try to hang it, fill it or fool it (issue 31, items 5-9):
// runs that never end, writable space and shared memory beyond the limits, a program posing as
// bwrap's own failure, the report channel; as root and as nobody, one by one and 64 at once.
import { expect } from 'chai';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { CORE_DEFAULTS } from '../core-adapters/config/defaults.js';
import { codeSandboxLimits, ReusedRuns, Sandbox, SandboxRunner, seccompFilter } from '../core-adapters/rewards/index.js';
import { findRunCgroups } from '../core-adapters/rewards/run-cgroup.js';
import { expectFreshDist, expectInputError, ROOT, runCommand, tempDir, worldReadableSandboxDir } from './helpers.js';
import { PROGRAMS } from './sandbox-hostile-programs.js';

/**
 * Reaps for the runner: as the child subreaper, every process of a sandbox that outlives its bwrap
 * comes here. After the runner exits it waits 2 s for the last ones to go and prints, as JSON, the
 * orphans it reaped and those still alive (then killed).
 */
const REAPER = `import ctypes, json, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0
runner = subprocess.Popen(sys.argv[1:])
code = runner.wait()
reaped, alive = [], []
deadline = time.time() + 2
while True:
    try:
        pid, _ = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        break
    if pid:
        reaped.append(pid)
    if time.time() > deadline:
        for task in os.listdir("/proc/self/task"):
            for child in open(f"/proc/self/task/{task}/children").read().split():
                try:
                    alive.append(open(f"/proc/{child}/cmdline").read().replace("\\0", " ").strip())
                    os.kill(int(child), 9)
                except OSError:
                    pass
        deadline = float("inf")
    elif not pid:
        time.sleep(0.05)
print(json.dumps({"code": code, "reaped": reaped, "alive": alive}))
`;

const RUNNER = `import { Sandbox, seccompFilter } from './rewards/sandbox.js';
import { hostileBatch, hostileChecks } from './programs.js';
// The same sandbox with prctl(PR_SET_PDEATHSIG) allowed: only the host's kill can end its sleepers.
class Permissive extends Sandbox {
  seccompFilter() {
    return seccompFilter(process.arch, { lockParentDeath: false });
  }
}
const limits = { wallSeconds: 2, cpuSeconds: 1, memoryMb: 256, processes: 16, outputBytes: 65536, tmpMb: 16 };
const checks = await hostileChecks(new Sandbox({ limits, concurrency: 8 }), new Permissive({ limits, concurrency: 4 }));
// 64 at once: wall three times the CPU limit (reward_model.code.wall_factor's default), since 16 runs
// share two cores with the hogs and the correct programs among them may wait for a core.
const batch = await hostileBatch(new Sandbox({ limits: { ...limits, wallSeconds: 3 }, concurrency: 16 }));
console.log(JSON.stringify({ uid: process.getuid(), bounds: new Sandbox({ limits }).describeBounds(), checks, batch }));
`;

interface Outcome {
  uid: number;
  bounds: string;
  checks: { failures: string[]; figures: Record<string, unknown> };
  batch: { failures: string[]; figures: Record<string, unknown> };
  reaper: { code: number; reaped: number[]; alive: string[] };
  seconds: number;
}

/**
 * Runs the hostile programs (test/sandbox-hostile-programs.ts) with the built sandbox module from a
 * directory any user can read, as root or as nobody, under the reaper.
 */
async function runHostile(user: 'root' | 'nobody'): Promise<Outcome> {
  const source = fs.readFileSync(path.join(ROOT, 'test', 'sandbox-hostile-programs.ts'), 'utf8');
  const programs = ts.transpileModule(source, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
  const dir = worldReadableSandboxDir('flowrl-sandbox-hostile-', { 'programs.js': programs, 'run.js': RUNNER, 'reaper.py': REAPER });
  try {
    const command = ['/usr/bin/python3', path.join(dir, 'reaper.py'), process.execPath, path.join(dir, 'run.js')];
    const started = performance.now();
    const run = user === 'root' ? await runCommand(command[0], command.slice(1), dir, 60_000) : await runCommand('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', ...command], dir, 60_000, { HOME: dir });
    const seconds = (performance.now() - started) / 1000;
    expect(run.status, run.stderr).to.equal(0);
    const lines = run.stdout.trim().split('\n');
    const reaper = JSON.parse(lines.at(-1)!) as Outcome['reaper'];
    expect(reaper.code, run.stderr).to.equal(0);
    return { ...(JSON.parse(lines.at(-2)!) as Omit<Outcome, 'reaper' | 'seconds'>), reaper, seconds };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A process's name and state from /proc/PID/stat; undefined once it is gone. */
function processStat(pid: number): { name: string; state: string; ppid: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), state, ppid: Number(ppid) };
  } catch {
    return undefined;
  }
}
const processName = (pid: number) => processStat(pid)?.name;
const processState = (pid: number) => processStat(pid)?.state;

/** The processes below `root`. */
function descendants(root: number): number[] {
  const pids = fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p)).map(Number);
  const parent = new Map(pids.map((p) => [p, processStat(p)?.ppid]));
  const below = (p: number): boolean => {
    const up = parent.get(p);
    return up === root || (up !== undefined && up > 1 && below(up));
  };
  return pids.filter(below);
}

function expectContained(outcome: Outcome, uid: number): void {
  expect(outcome.uid).to.equal(uid);
  expect(outcome.checks.failures, 'one by one').to.deep.equal([]);
  expect(outcome.batch.failures, '64 at once').to.deep.equal([]);
  // No process of any run outlived it: none came to the reaper, alive or dead.
  expect(outcome.reaper.alive, 'processes alive after the runner').to.deep.equal([]);
  expect(outcome.reaper.reaped, 'orphans reaped').to.deep.equal([]);
  if (process.env.FLOWRL_SANDBOX_VERBOSE) console.log(JSON.stringify({ user: uid, seconds: outcome.seconds, checks: outcome.checks.figures, batch: outcome.batch.figures }, null, 1));
}

describe('the code sandbox against hostile programs', function () {
  this.timeout(90_000);
  const isRoot = process.getuid?.() === 0;

  it('hangs, fills and fools nothing as root: every run ends by its limit, only /tmp takes writes, bwrap lookalikes and the report channel are told apart; 64 at once leave nothing behind', async function () {
    if (!isRoot) this.skip();
    expectContained(await runHostile('root'), 0);
  });

  (isRoot ? it : it.skip)('the same as nobody (a user without root, the runs sharing its uid, no cgroup: the per-process bounds)', async () => {
    const outcome = await runHostile('nobody');
    expectContained(outcome, 65534);
    expect(outcome.bounds).to.equal('no cgroup (not running as root): per process 256 MiB of address space and 1 CPU s, 16 processes, so a run may hold up to 4096 MiB; 2 s wall');
  });

  it('without root, as the user running the tests', async function () {
    if (isRoot) this.skip();
    expectContained(await runHostile('root'), process.getuid!());
  });

  it('a trainer killed with SIGKILL takes its runs with it: the program cannot clear its parent-death signal', async () => {
    expectFreshDist();
    const sandboxModule = path.join(ROOT, 'dist', 'core-adapters', 'rewards', 'sandbox.js');
    const script = [
      `import { Sandbox } from ${JSON.stringify(sandboxModule)};`,
      'const sandbox = new Sandbox({ limits: { wallSeconds: 60 }, concurrency: 2 });',
      `for (let i = 0; i < 2; i++) sandbox.run('python', ${JSON.stringify(PROGRAMS.sleeper)});`,
    ].join('\n');
    const trainer = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
    let tree: number[] = [];
    try {
      // Its sandboxes' processes, once both programs run (and have had time to try prctl).
      for (let i = 0; i < 100 && descendants(trainer.pid!).filter((p) => processName(p) === 'python3').length < 2; i++) await sleep(50);
      await sleep(500);
      tree = descendants(trainer.pid!);
      expect(tree.filter((p) => processName(p) === 'python3')).to.have.length(2);
    } finally {
      trainer.kill('SIGKILL');
    }
    const alive = () => tree.filter((p) => processState(p) !== undefined && processState(p) !== 'Z');
    for (let i = 0; i < 40 && alive().length; i++) await sleep(50);
    const left = alive();
    for (const p of left) process.kill(p, 'SIGKILL');
    expect(left, "processes of the killed trainer's runs").to.deep.equal([]);
  });

  it("a program posing as bwrap's failure is scored, a real setup failure stops the scorer", async () => {
    const limits = { wallSeconds: 2, cpuSeconds: 1 };
    const runner = new SandboxRunner(new Sandbox({ limits, concurrency: 1 }));
    const fake = await runner.run('import sys\nsys.stderr.write("bwrap: Creating new namespace failed\\n")\nsys.exit(1)', '');
    expect(fake).to.include({ finished: false, stdout: '', status: 'runtime_error' });
    // An address space too small for bwrap itself to load.
    const broken = new Sandbox({ limits: { ...limits, memoryMb: 1 }, concurrency: 1 });
    const result = await broken.run('python', 'print(1)');
    expect(result.status).to.equal('sandbox_error');
    expect(result.stderr).to.include('bwrap: error while loading shared libraries');
    let error: Error | undefined;
    await new SandboxRunner(broken).run('print(1)', '').catch((e: Error) => (error = e));
    expect(error?.message).to.include('the code sandbox failed to start');
    // No processes at all: bwrap cannot clone its sandbox, tried again until the wall limit.
    if (isRoot) {
      const started = performance.now();
      const none = await new Sandbox({ limits: { ...limits, processes: 0 }, concurrency: 1 }).run('python', 'print(1)');
      expect([none.status, none.stderr]).to.deep.equal(['sandbox_error', 'bwrap: Creating new namespace failed: Resource temporarily unavailable\n']);
      expect(performance.now() - started).to.be.within(1000, limits.wallSeconds * 1000 + 500);
    }
    // A size bwrap refuses.
    const size = await new Sandbox({ limits: { ...limits, tmpMb: 0 }, concurrency: 1 }).run('python', 'print(1)');
    expect([size.status, size.stderr]).to.deep.equal(['sandbox_error', 'bwrap: --size takes a non-zero number of bytes\n']);
  });

  it('the seccomp filter is classic BPF for x86_64 and aarch64, and refuses other architectures', () => {
    for (const arch of ['x64', 'arm64']) {
      const filter = seccompFilter(arch);
      expect(filter.length % 8).to.equal(0);
      // It starts by loading the audit arch, and ends allowing, then denying with EPERM.
      expect([filter.readUInt16LE(0), filter.readUInt32LE(4)]).to.deep.equal([0x20, 4]);
      expect(filter.readUInt32LE(filter.length - 12)).to.equal(0x7fff0000);
      expect(filter.readUInt32LE(filter.length - 4)).to.equal(0x00050001);
      expect(seccompFilter(arch, { lockParentDeath: false }).length).to.equal(filter.length - 24);
    }
    expect(seccompFilter('x64').readUInt32LE(12)).to.equal(0xc000003e);
    expect(seccompFilter('arm64').readUInt32LE(12)).to.equal(0xc00000b7);
    expectInputError(() => seccompFilter('riscv64'), 'x86_64 and aarch64, not riscv64', 'never run unsandboxed');
  });
});

describe('reused runs are bounded in bytes (reward_model.code.reuse_runs)', () => {
  it('keeps runs within its byte budget, evicting the least recently used; counts stdout, report and key', async () => {
    const calls: string[] = [];
    const kib = 1024;
    const runner = {
      channel: { kind: 'descriptors' } as const,
      async run(code: string) {
        calls.push(code);
        // 30 KiB of output each (60 KiB as UTF-16), 10 KiB more as a report for "r" programs.
        return { finished: true, stdout: 'x'.repeat(30 * kib), status: 'finished', ...(code.startsWith('r') ? { report: 'y'.repeat(10 * kib) } : {}) };
      },
    };
    // Room for a few entries by bytes, far more by count.
    const reused = new ReusedRuns(runner, 4096, 200 * kib);
    for (const code of ['a', 'b', 'c']) await reused.run(code, '');
    await reused.run('a', ''); // a is now the most recent; b the least
    await reused.run('d', ''); // 4 x 60 KiB > 200 KiB: b goes
    expect(calls).to.deep.equal(['a', 'b', 'c', 'd']);
    await reused.run('a', '');
    await reused.run('b', '');
    expect(calls).to.deep.equal(['a', 'b', 'c', 'd', 'b']);
    // Reports count too: two of 80 KiB fill the budget, leaving out the older plain ones.
    await reused.run('r1', '');
    await reused.run('r2', '');
    const before = calls.length;
    for (const code of ['r1', 'r2']) await reused.run(code, '');
    expect(calls.length).to.equal(before);
    await reused.run('a', '');
    expect(calls.length).to.equal(before + 1);
  });
});

/** Fills Unix socket pairs (send buffers raised as far as the kernel lets) until they block, never read; prints the MiB held. */
const unixBuffers = [
  'import socket',
  'held, total = [], 0',
  'for i in range(28):',
  '    a, b = socket.socketpair(); a.setblocking(False)',
  '    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30)',
  '    held.append((a, b))',
  '    try:',
  '        while True: total += a.send(b"x" * 65536)',
  '    except OSError:',
  '        pass',
  'print(total >> 20)',
].join('\n');

/** Forks `children` processes that each touch `mib` MiB and wait; prints their wait statuses (9: SIGKILL). */
const forkedMemory = (children: number, mib: number) =>
  ['import os, time', 'pids = []', `for i in range(${children}):`, '    p = os.fork()', '    if p == 0:', `        x = bytearray(${mib} << 20)`, '        for j in range(0, len(x), 4096): x[j] = 1', '        time.sleep(1)', '        os._exit(0)', '    pids.append(p)', 'print([os.waitpid(p, 0)[1] for p in pids])'].join('\n');
/** Four processes spinning. */
const forkedSpin = ['import os', 'for i in range(3):', '    if os.fork() == 0: break', 'while True: pass'].join('\n');
/** Fills TCP buffers on loopback: 28 connections written until they block, never read; prints the MiB held. */
const tcpBuffers = [
  'import socket',
  'srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)',
  'held, total = [], 0',
  'for i in range(28):',
  '    c = socket.create_connection(srv.getsockname()); s, _ = srv.accept()',
  '    c.setblocking(False); held.append((c, s))',
  '    try:',
  '        while True: total += c.send(b"x" * 65536)',
  '    except OSError:',
  '        pass',
  'print(total >> 20)',
].join('\n');

/** A sandbox without run groups (FLOWRL_SANDBOX_CGROUP=off): the per-process bounds alone. */
function perProcessOnly(options: ConstructorParameters<typeof Sandbox>[0]): Sandbox {
  process.env.FLOWRL_SANDBOX_CGROUP = 'off';
  try {
    return new Sandbox(options);
  } finally {
    delete process.env.FLOWRL_SANDBOX_CGROUP;
  }
}

describe('the code sandbox bounds a whole run: memory and CPU time of all its processes (a cgroup per run)', function () {
  this.timeout(90_000);
  const groups = new Sandbox().cgroups;
  const runGroupsLeft = () => {
    const found: string[] = [];
    const walk = (dir: string, depth: number) => {
      let entries: fs.Dirent[];
      try {
        entries = fs.readdirSync(dir, { withFileTypes: true });
      } catch (e) {
        // Another process's run group (a second test run on the machine) ended while walked.
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw e;
      }
      for (const entry of entries) {
        if (!entry.isDirectory()) continue;
        if (new RegExp(`^run-${process.pid}-`).test(entry.name)) found.push(path.join(dir, entry.name));
        else if (!entry.name.startsWith('run-') && depth < 6) walk(path.join(dir, entry.name), depth + 1);
      }
    };
    walk('/sys/fs/cgroup', 0);
    return found;
  };

  beforeEach(function () {
    if (!groups.version) this.skip();
  });

  it('memory: forked processes share one limit (at 128 MiB, six children of 60 MiB cannot all live); the init killed for it is memory_limit; TCP and Unix socket buffers count too (at 64 MiB)', async () => {
    const limits = { memoryMb: 128, cpuSeconds: 5, wallSeconds: 20 };
    const sandbox = new Sandbox({ limits, concurrency: 3 });
    const small = new Sandbox({ limits: { ...limits, memoryMb: 64 }, concurrency: 1 });
    expect(sandbox.describeBounds()).to.equal(`each run in its own cgroup (${groups.version}): 128 MiB of memory, 16 processes and 5 CPU s for the whole run, 20 s wall`);
    const [forked, init, tcp] = await Promise.all([
      sandbox.run('python', forkedMemory(6, 60)),
      // 90 MiB in the init itself, below its own address-space limit, beside a child holding 60.
      sandbox.run('python', ['import os, time', 'if os.fork() == 0:', '    x = bytearray(60 << 20)', '    for j in range(0, len(x), 4096): x[j] = 1', '    time.sleep(5)', 'else:', '    time.sleep(0.5)', '    y = bytearray(90 << 20)', '    for j in range(0, len(y), 4096): y[j] = 1', '    print("lived")'].join('\n')),
      small.run('python', tcpBuffers),
    ]);
    const statuses = JSON.parse(forked.stdout) as number[];
    expect(forked.status, forked.stderr).to.equal('exited');
    // Each child alone fits its own address space (128 MiB): only a limit on the run together kills any.
    expect(statuses.filter((s) => s === 9).length, forked.stdout).to.be.at.least(2);
    expect([init.status, init.stdout]).to.deep.equal(['memory_limit', '']);
    expect(tcp.status, tcp.stderr).to.equal('exited');
    expect(Number(tcp.stdout)).to.be.at.most(64);
    // The same programs with the per-process bounds alone: every child lives, and the buffers are not counted.
    const unbounded = perProcessOnly({ limits, concurrency: 2 });
    expect(unbounded.describeBounds()).to.match(/^no cgroup \(FLOWRL_SANDBOX_CGROUP=off\): per process 128 MiB of address space/);
    const unboundedSmall = perProcessOnly({ limits: { ...limits, memoryMb: 64 }, concurrency: 1 });
    const [free, freeTcp, freeUnix] = await Promise.all([unbounded.run('python', forkedMemory(6, 60)), unboundedSmall.run('python', tcpBuffers), unboundedSmall.run('python', unixBuffers)]);
    expect(free.stdout).to.equal('[0, 0, 0, 0, 0, 0]\n');
    expect(Number(freeTcp.stdout), freeTcp.stderr).to.be.above(64);
    expect(Number(freeUnix.stdout), freeUnix.stderr).to.be.above(64);
    // Unix socket buffers are the run's memory too: at 64 MiB the run is killed for it.
    const unix = await small.run('python', unixBuffers);
    expect(unix.status === 'memory_limit' || Number(unix.stdout) <= 64, JSON.stringify([unix.status, unix.stdout])).to.equal(true);
    await sleep(200);
    expect(runGroupsLeft(), 'run groups left behind').to.deep.equal([]);
  });

  it('CPU time: four spinning processes stop at the whole run\'s CPU seconds, long before the wall limit; a program that waits longer than its CPU limit passes (wall_factor)', async () => {
    const sandbox = new Sandbox({ limits: { cpuSeconds: 2, wallSeconds: 30 }, concurrency: 2 });
    const spin = await sandbox.run('python', forkedSpin);
    expect(spin.status).to.equal('timeout');
    // Four processes on any number of cores reach 2 CPU s within 2 s of wall time on an idle machine;
    // ended well before the 30 s wall limit, the CPU limit stopped them (generous for a busy machine).
    expect(spin.wallMs).to.be.below(20_000);
    // The code settings: 1 CPU s, the wall three times that; a program asleep for 1.2 s uses almost no CPU
    // (and leaves its start 1.8 s on a busy machine).
    const settings = { ...CORE_DEFAULTS.reward_model.code, timeout_s: 1 };
    const code = new Sandbox({ limits: codeSandboxLimits(settings), concurrency: 1 });
    expect(code.limits).to.include({ cpuSeconds: 1, wallSeconds: 3 });
    const waits = await code.run('python', 'import time\ntime.sleep(1.2)\nprint("done")');
    expect([waits.status, waits.stdout]).to.deep.equal(['exited', 'done\n']);
    await sleep(200);
    expect(runGroupsLeft(), 'run groups left behind').to.deep.equal([]);
  });
});

describe('run cgroups: the files each hierarchy is driven by (on a fake tree, for the version this machine lacks)', () => {
  const isRoot = process.getuid?.() === 0;
  const tree = (files: Record<string, string>) => {
    const root = tempDir();
    for (const [file, text] of Object.entries(files)) {
      fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
      fs.writeFileSync(path.join(root, file), text);
    }
    return root;
  };

  it('v2: controllers passed down, memory.max, memory.swap.max 0, pids.max; cpu.stat usage_usec and memory.events oom_kill read; refused without root or when asked', function () {
    if (!isRoot) this.skip();
    const root = tree({ 'cgroup.controllers': 'cpu memory pids\n', 'cgroup.subtree_control': '', 'cgroup.procs': '' });
    const groups = findRunCgroups(root, {});
    expect(groups.version).to.equal('v2');
    if (!groups.version) return;
    expect(fs.readFileSync(path.join(root, 'cgroup.subtree_control'), 'utf8')).to.equal('+memory +pids +cpu');
    expect(fs.readFileSync(path.join(root, 'flowrl-sandbox', 'cgroup.subtree_control'), 'utf8')).to.equal('+memory +pids +cpu');
    const run = groups.create({ memoryBytes: 64 << 20, processes: 18 });
    const dir = path.dirname(run.procsFiles[0]);
    expect(path.dirname(dir)).to.equal(path.join(root, 'flowrl-sandbox'));
    expect(path.basename(dir)).to.match(new RegExp(`^run-${process.pid}-\\d+$`));
    expect([fs.readFileSync(path.join(dir, 'memory.max'), 'utf8'), fs.readFileSync(path.join(dir, 'pids.max'), 'utf8')]).to.deep.equal([String(64 << 20), '18']);
    expect([run.cpuSeconds(), run.oomKilled()]).to.deep.equal([0, false]);
    fs.writeFileSync(path.join(dir, 'cpu.stat'), 'usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n');
    fs.writeFileSync(path.join(dir, 'memory.events'), 'low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n');
    expect([run.cpuSeconds(), run.oomKilled()]).to.deep.equal([2.5, true]);
    expect(findRunCgroups(root, { FLOWRL_SANDBOX_CGROUP: 'off' })).to.deep.equal({ version: undefined, why: 'FLOWRL_SANDBOX_CGROUP=off' });
    // A hierarchy that refuses the controllers (a container's root with processes in it) gives none, saying why.
    const refusing = tree({ 'cgroup.controllers': '' });
    fs.mkdirSync(path.join(refusing, 'cgroup.subtree_control'));
    const none = findRunCgroups(refusing, {});
    expect(none.version).to.equal(undefined);
    expect((none as { why: string }).why).to.include('cgroup.subtree_control');
  });

  it('v1: a group in each of memory, pids and cpuacct (and cpu, mounted apart) under this process\'s own, limited; cpuacct.usage and memory.oom_control read', function () {
    if (!isRoot) this.skip();
    const own = new Map(fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n').flatMap((l) => { const [, c, p] = l.split(':'); return (c ?? '').split(',').filter(Boolean).map((name) => [name, p] as [string, string]); }));
    const files: Record<string, string> = {};
    for (const c of ['memory', 'pids', 'cpuacct']) files[path.join(c, 'cgroup.procs')] = '';
    const root = tree(files);
    const groups = findRunCgroups(root, {});
    expect(groups.version).to.equal('v1');
    if (!groups.version) return;
    const run = groups.create({ memoryBytes: 32 << 20, processes: 5 });
    const dirs = run.procsFiles.map((f) => path.dirname(f));
    expect(dirs.map((d) => path.relative(root, path.dirname(d)))).to.deep.equal(['memory', 'pids', 'cpuacct'].map((c) => path.join(c, own.get(c) ?? '/', 'flowrl-sandbox').replace(/^\/+/, '')));
    expect(fs.readFileSync(path.join(dirs[0], 'memory.limit_in_bytes'), 'utf8')).to.equal(String(32 << 20));
    expect(fs.readFileSync(path.join(dirs[1], 'pids.max'), 'utf8')).to.equal('5');
    fs.writeFileSync(path.join(dirs[2], 'cpuacct.usage'), '1250000000\n');
    fs.writeFileSync(path.join(dirs[0], 'memory.oom_control'), 'oom_kill_disable 0\nunder_oom 0\noom_kill 2\n');
    expect([run.cpuSeconds(), run.oomKilled()]).to.deep.equal([1.25, true]);
    // A cpu hierarchy mounted apart from cpuacct: the run joins a group there too, so each run weighs
    // the same for the scheduler whatever its process count.
    const withCpu = tree({ ...files, [path.join('cpu', 'cgroup.procs')]: '' });
    const fair = findRunCgroups(withCpu, {});
    if (!fair.version) throw new Error('no groups');
    const dirsWithCpu = fair.create({ memoryBytes: 32 << 20, processes: 5 }).procsFiles.map((f) => path.relative(withCpu, path.dirname(path.dirname(f))));
    expect(dirsWithCpu).to.deep.equal(['memory', 'pids', 'cpuacct', 'cpu'].map((c) => path.join(c, own.get(c) ?? '/', 'flowrl-sandbox').replace(/^\/+/, '')));
  });
});