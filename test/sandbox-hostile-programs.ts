// Hostile programs against the code sandbox, for test/sandbox-hostile.test.ts. This module imports
// nothing of the project, so the test can transpile it and run it beside the built sandbox module as
// another user (nobody); the sandbox comes in as an argument. Each check returns what went wrong
// ([] when nothing did) and the figures measured.
import fs from 'node:fs';

interface Run {
  status: string;
  exitCode: number | null;
  stdout: string;
  stderr: string;
  wallMs: number;
  report?: string;
}

export interface SandboxLike {
  readonly limits: { wallSeconds: number; cpuSeconds: number; memoryMb: number; processes: number; outputBytes: number; tmpMb: number };
  readonly concurrency: number;
  run(language: string, code: string, stdin?: string, options?: { report?: boolean }): Promise<Run>;
}

/**
 * How long a run may take past its wall limit: the sandbox's grace (0.5 s) with room, plus however
 * late this process's own timers fired meanwhile (the kill is one; the batch's fork chains keep both
 * cores busy, and other test files may too).
 */
export const GRACE_S = 1;

/** Measures how late a 20 ms interval fires in this process, until stopped: the most, in ms. */
function timerLag(): { stop(): number } {
  let most = 0;
  let last = performance.now();
  const probe = setInterval(() => {
    const now = performance.now();
    most = Math.max(most, now - last - 20);
    last = now;
  }, 20);
  return {
    stop() {
      clearInterval(probe);
      return most;
    },
  };
}

const py = (...lines: string[]) => lines.join('\n') + '\n';

/** Clears the parent-death signal (prctl PR_SET_PDEATHSIG, 0) and prints what prctl returned. */
const CLEAR_PDEATHSIG = py('import ctypes, os, time', 'libc = ctypes.CDLL(None, use_errno=True)', 'print(libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno(), flush=True)');

export const PROGRAMS = {
  /** Outlives bwrap unless the host kills the sandbox's init itself (or prctl is refused). */
  sleeper: CLEAR_PDEATHSIG + py('time.sleep(600)'),
  /** The init reaps an endless chain of children, each forking the next and exiting: every process is new, so no CPU limit binds. */
  forkChain: CLEAR_PDEATHSIG + py('if os.fork() == 0:', '    while True:', '        if os.fork():', '            os._exit(0)', 'while True:', '    try:', '        os.wait()', '    except ChildProcessError:', '        pass'),
  /** Writes 1 MiB files into /dev/shm until refused; prints the MiB written. */
  shmFiles: py('n = 0', 'try:', '    while True:', '        with open(f"/dev/shm/f{n}", "wb") as f:', '            f.write(b"x" * (1 << 20))', '        n += 1', 'except OSError as e:', '    print(n, e.errno)'),
  /** memfd_create (and memfd_secret, by number) then writing: memory no RLIMIT_AS counts. */
  memfd: py(
    'import ctypes, os, platform',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'try:',
    '    fd = os.memfd_create("x")',
    '    for _ in range(4096):',
    '        os.write(fd, b"x" * (1 << 20))',
    '    print("wrote")',
    'except OSError as e:',
    '    print("memfd", e.errno)',
    'print("memfd_secret", libc.syscall(447, 0), ctypes.get_errno())',
  ),
  /** SysV shared memory, message queues and semaphores, and a POSIX message queue. */
  sysv: py(
    'import ctypes',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'out = []',
    'for name, call in [("shmget", lambda: libc.shmget(0, 1 << 30, 0o1600)), ("msgget", lambda: libc.msgget(0, 0o1600)), ("semget", lambda: libc.semget(0, 1, 0o1600)), ("mq_open", lambda: libc.mq_open(b"/q", 0o102, 0o600, None))]:',
    '    r = call()',
    '    out.append(f"{name} {r} {ctypes.get_errno() if r == -1 else 0}")',
    'print(", ".join(out))',
  ),
  /** The kernel surfaces the filter refuses beyond shared memory, each called by number (x86_64, aarch64): "name errno" each. */
  kernelSurfaces: py(
    'import ctypes, platform',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'x64 = platform.machine() == "x86_64"',
    'calls = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": (323, 282), "perf_event_open": (298, 241), "bpf": (321, 280), "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219), "personality": (135, 92), "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265)}',
    'out = []',
    'for name, nr in calls.items():',
    '    nr = nr if isinstance(nr, int) else nr[0 if x64 else 1]',
    '    ctypes.set_errno(0)',
    '    r = libc.syscall(nr, 0xffffffff if name == "personality" else 0, 0, 0, 0, 0)',
    '    out.append(f"{name} {ctypes.get_errno() if r == -1 else \'ok\'}")',
    'print(", ".join(out))',
  ),
  /** Says what bwrap says when it fails, and exits as bwrap does. */
  fakeBwrap: py('import sys', 'sys.stderr.write("bwrap: Can\'t mount proc on /newroot/proc: Operation not permitted\\n")', 'sys.exit(1)'),
  /** Exits at once, reading neither its input nor its secret. */
  earlyExit: py('import os', 'os._exit(3)'),
  /** Reads numbers, prints their sum, and reports it when it has a report channel. */
  correct: py('import os, sys', 'total = sum(int(x) for x in sys.stdin.read().split())', 'print(total)', 'if os.path.exists("/proc/self/fd/5"):', '    secret = os.read(4, 64)', '    os.write(5, secret + f"sum={total}".encode())'),
  /** Every place it might write: each mount, each directory two levels down (but /proc), /dev/shm; then fills what it found. */
  writablePlaces: py(
    'import os, json',
    'places = {"/dev/shm"}',
    'for line in open("/proc/self/mountinfo"):',
    '    places.add(line.split()[4])',
    'for top in os.listdir("/"):',
    '    d = "/" + top',
    '    if os.path.isdir(d) and not os.path.islink(d) and d != "/proc":',
    '        places.add(d)',
    '        places.update(os.path.join(d, e) for e in os.listdir(d) if os.path.isdir(os.path.join(d, e)) and not os.path.islink(os.path.join(d, e)))',
    'places.add("/")',
    'writable = []',
    'for p in sorted(places):',
    '    if not os.path.isdir(p) or p.startswith("/proc"):',
    '        continue',
    '    try:',
    '        fd = os.open(os.path.join(p, ".probe"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)',
    '        os.close(fd)',
    '        os.unlink(os.path.join(p, ".probe"))',
    '        writable.append(os.path.realpath(p))',
    '    except OSError:',
    '        pass',
    'writable = sorted(set(writable))',
    'files = 0',
    'for p in writable:',
    '    try:',
    '        while True:',
    '            with open(os.path.join(p, f"fill{files}"), "wb") as f:',
    '                f.write(b"x" * (1 << 20))',
    '            files += 1',
    '    except OSError:',
    '        pass',
    'print(json.dumps({"probed": len(places), "writable": writable, "shm": os.path.realpath("/dev/shm"), "mib": files}))',
  ),
  numpy: py('import numpy as np', 'a = np.arange(12, dtype=np.float64).reshape(3, 4)', 'print(float((a @ a.T).trace()), np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]])).round(6))'),
  passwd: py('print(open("/etc/passwd").read())'),
  /** Lists its open descriptors 3 and up (the one listdir opens aside). */
  fds: py('import os', 'print(" ".join(sorted(f for f in os.listdir("/proc/self/fd") if int(f) > 2 and os.path.exists("/proc/self/fd/" + f) and not os.readlink("/proc/self/fd/" + f).startswith("/proc/"))))'),
  reportHello: py('import os', 'secret = b""', 'while True:', '    chunk = os.read(4, 100)', '    if not chunk:', '        break', '    secret += chunk', 'os.close(4)', 'os.write(5, b"noise before " + secret + b"hello")', 'print(repr(secret.decode()))'),
  reportWrongSecret: py('import os', 'os.write(5, b"0123456789abcdef0123456789abcdef\\nhello")'),
  reportSilent: py('print("nothing reported")'),
  reportFlood: py('import os', 'secret = os.read(4, 64)', 'os.write(5, secret)', 'while True:', '    os.write(5, b"y" * 65536)'),
};

/**
 * Without root the runs share one uid, and so one process count: a fork chain may have a fork
 * refused (EAGAIN) before its wall limit, which ends it early. As root each run has its own.
 */
const forkRefused = (r: Run) => process.getuid?.() !== 0 && r.status === 'exited' && r.stderr.includes('BlockingIOError');

function seconds(ms: number): number {
  return Math.round(ms) / 1000;
}

/**
 * Issue 31 items 5-8 against one sandbox: `permissive` is the same sandbox whose seccomp filter lets
 * prctl(PR_SET_PDEATHSIG) through, so only the host's own kill can end a sleeper there.
 */
export async function hostileChecks(sandbox: SandboxLike, permissive: SandboxLike): Promise<{ failures: string[]; figures: Record<string, unknown> }> {
  const failures: string[] = [];
  const expect = (ok: boolean, what: string, got: unknown) => void (ok || failures.push(`${what}: got ${JSON.stringify(got)}`));
  const lag = timerLag();
  const P = PROGRAMS;
  const started = performance.now();
  const [sleeper, sleeperLocked, chain, fake, earlyExit, writable, passwd, memfd, sysv, surfaces, fds, fdsReport, hello, wrong, silent, flood, js] = await Promise.all([
    permissive.run('python', P.sleeper),
    sandbox.run('python', P.sleeper),
    permissive.run('python', P.forkChain),
    sandbox.run('python', P.fakeBwrap),
    sandbox.run('python', P.earlyExit, 'x'.repeat(1 << 20), { report: true }),
    sandbox.run('python', P.writablePlaces),
    sandbox.run('python', P.passwd),
    sandbox.run('python', P.memfd),
    sandbox.run('python', P.sysv),
    sandbox.run('python', P.kernelSurfaces),
    sandbox.run('python', P.fds),
    sandbox.run('python', P.fds, '', { report: true }),
    sandbox.run('python', P.reportHello, '', { report: true }),
    sandbox.run('python', P.reportWrongSecret, '', { report: true }),
    sandbox.run('python', P.reportSilent, '', { report: true }),
    sandbox.run('python', P.reportFlood, '', { report: true }),
    sandbox.run('javascript', 'require("fs").writeSync(5, require("fs").readFileSync(4, "utf8") + "from js")', '', { report: true }),
  ]);
  // numpy works in the sandbox: a check of the sandbox, not of its limits, so it runs once the
  // hostile runs are done (beside them on a loaded 2-core machine its import could pass 2 s of wall).
  const numpy = await sandbox.run('python', P.numpy);
  const lagMs = lag.stop();
  const bound = (s: SandboxLike) => (s.limits.wallSeconds + GRACE_S) * 1000 + lagMs;
  // 5: ended at the wall limit whatever the program did to its parent-death signal.
  expect(sleeper.status === 'timeout' && sleeper.stdout === '0 0\n' && sleeper.wallMs < bound(permissive), 'a sleeper that cleared its parent-death signal', [sleeper.status, sleeper.stdout, sleeper.wallMs]);
  expect(sleeperLocked.status === 'timeout' && sleeperLocked.stdout === '-1 1\n' && sleeperLocked.wallMs < bound(sandbox), 'prctl(PR_SET_PDEATHSIG) refused with EPERM', [sleeperLocked.status, sleeperLocked.stdout, sleeperLocked.wallMs]);
  expect((chain.status === 'timeout' || forkRefused(chain)) && chain.wallMs < bound(permissive), 'an endless fork chain under an init without parent-death signal', [chain.status, chain.wallMs, chain.stderr.slice(-200)]);
  // 6: only /tmp is writable, /dev/shm is inside it, both capped together; no shared memory outside it.
  const places = JSON.parse(writable.stdout || '{}') as { writable?: string[]; shm?: string; mib?: number; probed?: number };
  expect(writable.status === 'exited' && JSON.stringify(places.writable) === '["/tmp"]' && places.shm === '/tmp' && places.mib! <= sandbox.limits.tmpMb, 'the only writable place is /tmp, /dev/shm inside it', [writable.status, places, writable.stderr.slice(-300)]);
  expect(numpy.status === 'exited' && numpy.stdout === '506.0 5.0\n', 'numpy imports and computes', [numpy.status, numpy.stdout, numpy.stderr.slice(-300)]);
  expect(passwd.exitCode === 1 && passwd.stdout === '' && passwd.stderr.includes('FileNotFoundError'), '/etc/passwd unreachable', [passwd.exitCode, passwd.stdout]);
  expect(memfd.stdout === 'memfd 1\nmemfd_secret -1 1\n', 'memfd_create and memfd_secret refused', [memfd.status, memfd.stdout, memfd.stderr.slice(-300)]);
  expect(sysv.stdout === 'shmget -1 1, msgget -1 1, semget -1 1, mq_open -1 24\n', 'SysV shm, msg and sem refused, POSIX mqueue over RLIMIT_MSGQUEUE', [sysv.status, sysv.stdout, sysv.stderr.slice(-300)]);
  const surfaceNames = ['io_uring_setup', 'io_uring_enter', 'io_uring_register', 'userfaultfd', 'perf_event_open', 'bpf', 'add_key', 'request_key', 'keyctl', 'personality', 'name_to_handle_at', 'open_by_handle_at'];
  expect(surfaces.stdout === `${surfaceNames.map((n) => `${n} 1`).join(', ')}\n`, 'io_uring, userfaultfd, perf_event_open, bpf, keyrings, personality and file handles refused with EPERM', [surfaces.status, surfaces.stdout, surfaces.stderr.slice(-300)]);
  // 7: a program pretending to be bwrap is the program's failure, not the sandbox's.
  expect(fake.status === 'exited' && fake.exitCode === 1, "a program that prints bwrap's failure", [fake.status, fake.exitCode]);
  expect(earlyExit.status === 'exited' && earlyExit.exitCode === 3 && earlyExit.report === undefined, 'an early exit, with a report channel and 1 MiB of unread input', [earlyExit.status, earlyExit.exitCode, earlyExit.report]);
  // 8: descriptors 4 and 5 only with a report, the secret's form, the report after the secret line only.
  expect(fds.stdout.split(' ').every((fd) => fd !== '4\n' && fd !== '5\n' && fd !== '4' && fd !== '5'), 'no descriptors 4 and 5 without a report', fds.stdout);
  expect(/(^| )4 5(\n| )/.test(fdsReport.stdout), 'descriptors 4 and 5 with a report', fdsReport.stdout);
  expect(hello.status === 'exited' && hello.report === 'hello' && /^'[0-9a-f]{32}\\n'\n$/.test(hello.stdout), 'a report after the secret line', [hello.status, hello.report, hello.stdout, hello.stderr.slice(-300)]);
  expect(wrong.status === 'exited' && wrong.report === undefined, 'a report after a wrong secret', [wrong.status, wrong.report]);
  expect(silent.status === 'exited' && silent.report === undefined, 'no report written', [silent.status, silent.report]);
  expect(flood.status === 'output_limit' && flood.wallMs < bound(sandbox), 'a report over the output limit', [flood.status, flood.wallMs]);
  expect(js.status === 'exited' && js.report === 'from js', 'a JavaScript report', [js.status, js.report, js.stderr.slice(-300)]);
  return {
    failures,
    figures: {
      seconds: seconds(performance.now() - started),
      maxTimerLagMs: Math.round(lagMs),
      sleeper: [sleeper.status, seconds(sleeper.wallMs)],
      forkChain: [chain.status, seconds(chain.wallMs)],
      probed: places.probed,
      writable: places.writable,
      filledMib: places.mib,
    },
  };
}

/** Host memory in bytes from /proc/meminfo. */
function meminfo(): { available: number; shmem: number } {
  const text = fs.readFileSync('/proc/meminfo', 'utf8');
  const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)![1]) * 1024;
  return { available: kb('MemAvailable'), shmem: kb('Shmem') };
}

/** Resident bytes of `root`'s descendants (the sandboxes, while their bwrap lives), and how many there are; walks only that tree. */
function descendantsRss(root: number): { bytes: number; count: number } {
  let bytes = 0;
  let count = 0;
  const stack = [root];
  while (stack.length) {
    const pid = stack.pop()!;
    try {
      for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
        for (const child of fs.readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean)) {
          stack.push(Number(child));
          count++;
          const statm = fs.readFileSync(`/proc/${child}/statm`, 'utf8');
          bytes += Number(statm.split(' ')[1]) * 4096;
        }
      }
    } catch {
      // Ended while we looked.
    }
  }
  return { bytes, count };
}

/** The host's POSIX and SysV shared memory: /dev/shm's names (Chromium's own transient ones aside) and /proc/sysvipc/shm. */
function hostSharedMemory(): string {
  const names = fs.readdirSync('/dev/shm').filter((n) => !n.startsWith('.org.chromium.'));
  return JSON.stringify([names.sort(), fs.readFileSync('/proc/sysvipc/shm', 'utf8')]);
}

/** The batch: eight of each kind, mixed, half of each with a report channel. */
const KINDS = ['sleeper', 'forkChain', 'shmFiles', 'memfd', 'sysv', 'fakeBwrap', 'earlyExit', 'correct'] as const;

/**
 * 64 hostile and correct programs scored at once through the sandbox's pool: all must end within
 * ceil(64 / concurrency) rounds of wall limit plus grace, hold no more memory than their limits
 * allow, leave the host's shared memory as it was, and the correct ones must still pass.
 */
export async function hostileBatch(sandbox: SandboxLike): Promise<{ failures: string[]; figures: Record<string, unknown> }> {
  const failures: string[] = [];
  const mib = 1024 * 1024;
  const jobs = Array.from({ length: 64 }, (_, i) => {
    const kind = KINDS[(i * 3) % KINDS.length];
    const numbers = Array.from({ length: 5 }, (_, j) => i * 10 + j);
    return { kind, stdin: numbers.join(' '), sum: numbers.reduce((a, b) => a + b, 0), report: Math.floor(i / 8) % 2 === 1 };
  });
  const shared = hostSharedMemory();
  const before = meminfo();
  let peak = { rss: 0, shmem: 0, availableDrop: 0, processes: 0 };
  const sample = () => {
    const now = meminfo();
    const own = descendantsRss(process.pid);
    peak = {
      rss: Math.max(peak.rss, own.bytes),
      shmem: Math.max(peak.shmem, now.shmem - before.shmem),
      availableDrop: Math.max(peak.availableDrop, before.available - now.available),
      processes: Math.max(peak.processes, own.count),
    };
  };
  const lag = timerLag();
  const sampler = setInterval(sample, 100);
  const started = performance.now();
  const results = await Promise.all(jobs.map((job) => sandbox.run('python', PROGRAMS[job.kind], job.stdin, { report: job.report })));
  const seconds = (performance.now() - started) / 1000;
  clearInterval(sampler);
  const lagMs = lag.stop();
  sample();
  const l = sandbox.limits;
  const bound = Math.ceil(jobs.length / sandbox.concurrency) * (l.wallSeconds + GRACE_S + lagMs / 1000) + 2;
  if (seconds > bound) failures.push(`the batch took ${seconds.toFixed(1)} s, over its bound of ${bound} s`);
  // What each kind got: status, exit code, output and report, as "status/code: stdout" with a count.
  const got: Record<string, Record<string, number>> = {};
  let filledToEnospc = 0;
  jobs.forEach((job, i) => {
    const r = results[i];
    const key = `${r.status}/${r.exitCode}: ${r.stdout.trim().slice(0, 60)}${job.report ? ` report=${JSON.stringify(r.report)}` : ''}`;
    const normalized = job.kind === 'correct' ? key.replace(String(job.sum), 'SUM').replace(String(job.sum), 'SUM') : key;
    (got[job.kind] ??= {})[normalized] = (got[job.kind][normalized] ?? 0) + 1;
    const fail = (what: string) => failures.push(`${job.kind} #${i}: ${what}; got ${key} stderr ${JSON.stringify(r.stderr.slice(-200))}`);
    if (r.status === 'sandbox_error') return fail('a sandbox error');
    if (r.wallMs > (l.wallSeconds + GRACE_S) * 1000 + lagMs) fail(`ran ${Math.round(r.wallMs)} ms`);
    switch (job.kind) {
      case 'sleeper':
        if (r.status !== 'timeout' || r.stdout !== '-1 1\n') fail('not stopped at the wall limit with prctl refused');
        break;
      case 'forkChain':
        if (r.status !== 'timeout' && !forkRefused(r)) fail('not stopped at the wall limit');
        break;
      case 'shmFiles': {
        // Sixteen runs on two cores beside hogs: one may reach its wall limit before the 16 MiB are
        // written (CI saw two); that is contained too (host memory is bounded below). One that ends
        // on its own must have been stopped by ENOSPC within the limit, and some must have.
        if (r.status === 'timeout') break;
        const [n, errno] = r.stdout.trim().split(' ').map(Number);
        if (r.status !== 'exited' || !(n <= l.tmpMb) || errno !== 28) fail(`more than /tmp's ${l.tmpMb} MiB in /dev/shm, or not stopped by ENOSPC`);
        else filledToEnospc++;
        break;
      }
      case 'memfd':
        if (r.stdout !== 'memfd 1\nmemfd_secret -1 1\n') fail('memfd not refused');
        break;
      case 'sysv':
        if (r.stdout !== 'shmget -1 1, msgget -1 1, semget -1 1, mq_open -1 24\n') fail('IPC not refused');
        break;
      case 'fakeBwrap':
        if (r.status !== 'exited' || r.exitCode !== 1) fail("taken for bwrap's failure");
        break;
      case 'earlyExit':
        if (r.status !== 'exited' || r.exitCode !== 3 || r.report !== undefined) fail('not its own exit');
        break;
      case 'correct':
        if (r.status !== 'exited' || r.exitCode !== 0 || r.stdout !== `${job.sum}\n` || r.report !== (job.report ? `sum=${job.sum}` : undefined)) fail('a correct program failed');
        break;
    }
  });
  if (!filledToEnospc) failures.push('no shmFiles run reached ENOSPC: all ended at the wall limit');
  // The sandboxes' own memory: anonymous (their resident sets) and shared (tmpfs, SysV, memfd: host Shmem).
  const memoryBound = sandbox.concurrency * l.tmpMb * mib + 256 * mib;
  if (peak.shmem > memoryBound) failures.push(`host shared memory grew by ${(peak.shmem / mib).toFixed(0)} MiB, over ${memoryBound / mib} MiB`);
  if (peak.rss > sandbox.concurrency * l.memoryMb * mib) failures.push(`the sandboxes held ${(peak.rss / mib).toFixed(0)} MiB resident`);
  if (peak.availableDrop > 2048 * mib) failures.push(`host MemAvailable fell by ${(peak.availableDrop / mib).toFixed(0)} MiB`);
  if (hostSharedMemory() !== shared) failures.push(`the host's /dev/shm or SysV shm changed: ${shared} -> ${hostSharedMemory()}`);
  const left = descendantsRss(process.pid);
  if (left.count) failures.push(`${left.count} processes left under the runner`);
  return {
    failures,
    figures: {
      seconds: Math.round(seconds * 100) / 100,
      bound: Math.round(bound * 10) / 10,
      concurrency: sandbox.concurrency,
      peakSandboxRssMib: Math.round(peak.rss / mib),
      peakShmemGrowthMib: Math.round(peak.shmem / mib),
      peakMemAvailableDropMib: Math.round(peak.availableDrop / mib),
      peakProcesses: peak.processes,
      maxTimerLagMs: Math.round(lagMs),
      slowestRunMs: Math.round(Math.max(...results.map((r) => r.wallMs))),
      got,
    },
  };
}
