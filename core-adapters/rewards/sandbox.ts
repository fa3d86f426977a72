// Running untrusted programs for code rewards. Each run is a fresh bubblewrap sandbox: new user,
// pid, network, ipc, uts and cgroup namespaces (no network but its own loopback), a read-only root
// holding the system's /usr and nothing else of the host (no /home, /root, working directory or
// /etc but the library links below), a private size-limited /tmp as the only writable place
// (/dev/shm links to it), a seccomp filter against shared memory that no limit would bound, and
// CPU-time, address-space, process, file-size, open-file and message-queue limits set by prlimit
// before bwrap starts. The parent adds the wall-clock and output limits: on either it kills the
// sandbox's init (the program, pid 1 of its namespace, whose death takes every process in the
// namespace with it), then bwrap should it linger; a run is over at bwrap's exit plus a short grace
// even if something still holds its pipes. A pool bounds how many run at once.
//
// Descriptors of the sandboxed command, as spawned:
//   0, 1, 2   stdin, stdout, stderr
//   3         the program's text (--ro-bind-data; bwrap reads and closes it)
//   4         with report: true, the run's secret (32 hex digits and "\n", then EOF), for the program
//   5         with report: true, the report channel, written by the program
//   6 (or 4)  bwrap's --json-status-fd (the child's pid, then its exit code); closed in the sandbox
//   7 (or 5)  the seccomp filter (--seccomp; bwrap reads and closes it)
// Without a report bwrap's two take 4 and 5, so those are closed in the program whatever this
// process inherited there. A program sees 0-2, and 4 and 5 when asked for a report; nothing else:
// a descriptor this process inherited without close-on-exec (as any child would get it) is closed
// by a bash in front of the command, which then execs it (so the child's pid stays the command's).
import { spawn, type StdioOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { InputError } from '../errors.js';
import { findRunCgroups, type RunCgroup, type RunCgroups } from './run-cgroup.js';

export interface SandboxLimits {
  /** CPU seconds: of the whole run when it has a cgroup, and of each process (RLIMIT_CPU). */
  cpuSeconds: number;
  /** Wall-clock seconds before the sandbox is killed. */
  wallSeconds: number;
  /** MiB: the whole run's memory when it has a cgroup (its processes, /tmp's files, kernel memory), and each process's address space (RLIMIT_AS). */
  memoryMb: number;
  /** Processes and threads the program may have at once. */
  processes: number;
  /** Bytes of stdout and of stderr kept; more kills the run. */
  outputBytes: number;
  /** Size of the private /tmp in MiB, also the largest file the program may write. */
  tmpMb: number;
}

export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = { cpuSeconds: 5, wallSeconds: 15, memoryMb: 512, processes: 16, outputBytes: 1 << 20, tmpMb: 16 };

/** A report may hold this many bytes per byte of the output limit (JSON's \uXXXX for one byte). */
const REPORT_EXPANSION = 6;

/** How a run ended: exited (any code), killed for time, stopped for output, killed at the whole run's memory (cgroup), or the sandbox could not start. */
export type RunStatus = 'exited' | 'timeout' | 'output_limit' | 'memory_limit' | 'signalled' | 'sandbox_error';

export interface RunResult {
  status: RunStatus;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  wallMs: number;
  /**
   * With report: true, what the program wrote on fd 5 after the first occurrence of its secret line
   * (the secret read from fd 4, then "\n"); undefined when it never wrote that line.
   */
  report?: string;
}

export interface RunOptions {
  /** Give the program a secret on fd 4 and a report channel on fd 5 (see RunResult.report). */
  report?: boolean;
}

export interface Language {
  /** The program's file name inside the sandbox (under /sandbox, read-only). */
  file: string;
  /** The interpreter and its arguments; the program's path is appended. */
  command: string[];
  /** Host paths the interpreter needs besides /usr, bound read-only at the same place. */
  binds: string[];
  /** What to install when the interpreter is missing. */
  install: string;
}

/** The languages a sandbox runs: Debian's python3 and the node binary running this process. */
export function sandboxLanguages(): Record<string, Language> {
  const node = fs.realpathSync(process.execPath);
  return {
    python: { file: 'main.py', command: ['/usr/bin/python3', '-I', '-B'], binds: [], install: 'apt-get install python3' },
    // V8 reserves address space far beyond what it uses, so node gets no RLIMIT_AS; --max-old-space-size bounds its heap instead.
    javascript: { file: 'main.js', command: [node, '--max-old-space-size=MEMORY'], binds: node.startsWith('/usr/') ? [] : [node], install: 'Node.js' },
  };
}

/** The host tools a sandbox needs, found once. */
interface Tools {
  bwrap: string;
  prlimit: string;
  /** Present when running as root: each run then gets its own unprivileged uid. */
  setpriv?: string;
  /** Closes inherited descriptors before the command (dash's redirections stop at fd 9). */
  bash?: string;
}

const TOOL_PACKAGES: Record<string, string> = { bwrap: 'bubblewrap', prlimit: 'util-linux', setpriv: 'util-linux' };

const TOOL_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin', '/usr/local/bin'];

function which(name: string, dirs: string[]): string | undefined {
  for (const dir of dirs) {
    const file = path.join(dir, name);
    if (fs.existsSync(file)) return file;
  }
  return undefined;
}

/** The sandbox's tools, or an InputError naming the Debian package to install (never a silent fallback to running unsandboxed). */
export function findSandboxTools(dirs = TOOL_DIRS): Tools {
  const root = process.getuid?.() === 0;
  const names = root ? ['bwrap', 'prlimit', 'setpriv'] : ['bwrap', 'prlimit'];
  const found = Object.fromEntries(names.map((n) => [n, which(n, dirs)]));
  const missing = names.filter((n) => !found[n]);
  if (missing.length) {
    const packages = [...new Set(missing.map((n) => TOOL_PACKAGES[n]))].join(' ');
    throw new InputError(`code rewards run programs in a bubblewrap sandbox and ${missing.join(', ')} ${missing.length > 1 ? 'were' : 'was'} not found: install it (Debian: apt-get install ${packages}); programs are never run unsandboxed`);
  }
  return { ...(found as unknown as Tools), bash: which('bash', dirs) };
}

/**
 * As root each run gets its own unprivileged uid from this range, so no limit is shared with another
 * run. Uids rotate rather than follow pool slots: a sandbox's init can linger a moment as a zombie
 * after it exits (until the machine's init reaps it) and would count against the next run's processes.
 */
export const SANDBOX_UIDS = { first: 61_000, count: 4096 };

/** Threads the user already runs: without root, RLIMIT_NPROC counts every one of them (this process's included). */
function userThreadCount(uid: number): number {
  let count = 0;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.statSync(`/proc/${entry}`).uid === uid) count += fs.readdirSync(`/proc/${entry}/task`).length;
    } catch {
      // The process ended while we looked.
    }
  }
  return count;
}

/** Reads a stream up to `limit` bytes; calls `over` when more than that arrives. */
function capped(stream: NodeJS.ReadableStream, limit: number, over: () => void): () => Buffer {
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    const room = limit - size;
    chunks.push(chunk.subarray(0, Math.max(0, room)));
    size += Math.min(chunk.length, Math.max(0, room));
    if (chunk.length > room) over();
  });
  return () => Buffer.concat(chunks);
}

/**
 * Seccomp's view of the architectures the filter knows: the audit arch a native syscall carries and
 * the numbers it denies (x86_64 from asm/unistd_64.h, aarch64 from asm-generic/unistd.h).
 */
const SECCOMP_ARCHES: Record<string, { audit: number; x32: boolean; prctl: number; denied: Record<string, number> }> = {
  x64: {
    audit: 0xc000003e,
    x32: true,
    prctl: 157,
    denied: {
      memfd_create: 319, memfd_secret: 447, shmget: 29, msgget: 68, semget: 64,
      io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427, userfaultfd: 323, perf_event_open: 298, bpf: 321,
      add_key: 248, request_key: 249, keyctl: 250, personality: 135, name_to_handle_at: 303, open_by_handle_at: 304,
    },
  },
  arm64: {
    audit: 0xc00000b7,
    x32: false,
    prctl: 167,
    denied: {
      memfd_create: 279, memfd_secret: 447, shmget: 194, msgget: 186, semget: 190,
      io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427, userfaultfd: 282, perf_event_open: 241, bpf: 280,
      add_key: 217, request_key: 218, keyctl: 219, personality: 92, name_to_handle_at: 264, open_by_handle_at: 265,
    },
  },
};

/**
 * The seccomp filter every sandbox runs under, as classic BPF for bwrap's --seccomp: EPERM for
 * memfd_create and memfd_secret (memory that RLIMIT_AS does not count), SysV shmget, msgget and
 * semget (the same, per IPC namespace), and prctl(PR_SET_PDEATHSIG) (so the program cannot outlive
 * bwrap); kernel surfaces a scoring program has no use for (io_uring, userfaultfd, perf_event_open,
 * bpf, the keyring calls, personality, file handles: Docker's default profile, moby/profiles
 * seccomp/v0.2.3, refuses them all, or allows them only with a capability or, for personality,
 * certain arguments; name_to_handle_at it allows, refused here with its pair open_by_handle_at);
 * EPERM too for any other ABI (x32, i386, arm32), whose numbers differ. Everything else is allowed. `lockParentDeath: false` leaves prctl alone (tests use it to check the host's own kill).
 */
export function seccompFilter(arch: string = process.arch, options: { lockParentDeath?: boolean } = {}): Buffer {
  const known = SECCOMP_ARCHES[arch];
  if (!known) throw new InputError(`the code sandbox's seccomp filter knows x86_64 and aarch64, not ${arch}; programs are never run unsandboxed`);
  // Classic BPF opcodes (linux/bpf_common.h) and seccomp's return values (linux/seccomp.h).
  const LD_W_ABS = 0x20;
  const JEQ = 0x15;
  const JGE = 0x35;
  const RET = 0x06;
  const ALLOW = 0x7fff0000;
  const DENY = 0x00050000 | 1; // SECCOMP_RET_ERRNO | EPERM
  // struct seccomp_data: nr at 0, arch at 4, args[0] at 16 (its low 32 bits first, little-endian).
  type Insn = [code: number, jt: number | 'deny' | 'allow', jf: number | 'deny' | 'allow', k: number];
  const prog: Insn[] = [
    [LD_W_ABS, 0, 0, 4],
    [JEQ, 0, 'deny', known.audit],
    [LD_W_ABS, 0, 0, 0],
  ];
  // x32 syscalls share x86_64's audit arch and set bit 30 of the number.
  if (known.x32) prog.push([JGE, 'deny', 0, 0x40000000]);
  for (const nr of Object.values(known.denied)) prog.push([JEQ, 'deny', 0, nr]);
  if (options.lockParentDeath ?? true) {
    // prctl's option is an int: only the low half of the argument counts. PR_SET_PDEATHSIG is 1.
    prog.push([JEQ, 0, 'allow', known.prctl], [LD_W_ABS, 0, 0, 16], [JEQ, 'deny', 'allow', 1]);
  }
  const allowAt = prog.length;
  prog.push([RET, 0, 0, ALLOW], [RET, 0, 0, DENY]);
  const out = Buffer.alloc(prog.length * 8);
  prog.forEach(([code, jt, jf, k], i) => {
    // Jumps count from the next instruction.
    const to = (j: number | 'deny' | 'allow') => (j === 'allow' ? allowAt - i - 1 : j === 'deny' ? allowAt - i : j);
    out.writeUInt16LE(code, i * 8);
    out.writeUInt8(to(jt), i * 8 + 2);
    out.writeUInt8(to(jf), i * 8 + 3);
    out.writeUInt32LE(k >>> 0, i * 8 + 4);
  });
  return out;
}

/** Host files bound read-only when present: Debian resolves shared libraries (numpy's BLAS) through them. */
const LIBRARY_LINKS = ['/etc/alternatives', '/etc/ld.so.cache'];

/** The device nodes a program gets (bound from the host, as bwrap's --dev does); /dev itself is read-only. */
const DEVICES = ['/dev/null', '/dev/zero', '/dev/full', '/dev/random', '/dev/urandom', '/dev/tty'];

/** How often the host reads a run's CPU time from its cgroup. */
const CPU_POLL_MS = 100;

/** How long a run may take past its end (bwrap's exit or the kill) for its pipes to drain. */
const GRACE_MS = 500;

/** How long bwrap is left to reap its killed init before it is killed too, and how often the host looks. */
const BWRAP_WAIT_MS = 10_000;
const INIT_POLL_MS = 50;

/** A process's start time (clock ticks since boot, /proc/PID/stat's 22nd field), which tells it from a later one with its pid; undefined once reaped. */
function startTime(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/**
 * Kills the sandbox's init from the host, when `pid` is still that process (its pid namespace
 * checked, as pids are reused). Returns the init's start time, to tell when it has been reaped.
 */
function killInit(pid: number, pidNamespace: number): string | undefined {
  try {
    if (fs.readlinkSync(`/proc/${pid}/ns/pid`) !== `pid:[${pidNamespace}]`) return undefined;
    const started = startTime(pid);
    process.kill(pid, 'SIGKILL');
    return started;
  } catch {
    return undefined;
  }
}

export interface SandboxOptions {
  limits?: Partial<SandboxLimits>;
  /** Programs run at once (default: one per core). */
  concurrency?: number;
}

/** What runs a program in a sandbox: this process's Sandbox, or one in a helper process (sandbox-process.ts). */
export interface ProgramSandbox {
  readonly limits: SandboxLimits;
  /** Programs run at once; the rest wait their turn. */
  readonly concurrency: number;
  /** Runs `code` in `language` with `stdin`; never rejects for anything the program does. */
  run(language: string, code: string, stdin?: string, options?: RunOptions): Promise<RunResult>;
}

/** A pool of sandboxes: at most `concurrency` programs run at once, the rest wait their turn. */
export class Sandbox implements ProgramSandbox {
  readonly limits: SandboxLimits;
  readonly concurrency: number;
  private readonly tools: Tools;
  private readonly languages = sandboxLanguages();
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** Runs started; with a per-process offset, picks each run's uid (as root). */
  private runs = process.pid * 17;
  private readonly filter: Buffer;
  /** Each run's control group, or why runs have none (see run-cgroup.ts). */
  readonly cgroups: RunCgroups;

  constructor(options: SandboxOptions = {}) {
    this.tools = findSandboxTools();
    // Built here so an architecture the filter does not know is refused before any run.
    this.filter = seccompFilter();
    this.limits = { ...DEFAULT_SANDBOX_LIMITS, ...options.limits };
    this.concurrency = Math.max(1, options.concurrency ?? os.availableParallelism());
    // The bash in front of the command joins the group: without it no run could.
    this.cgroups = this.tools.bash ? findRunCgroups() : { version: undefined, why: 'bash is missing' };
  }

  /** What bounds a run's memory, processes and CPU time, in a sentence for the run's log. */
  describeBounds(): string {
    const l = this.limits;
    if (this.cgroups.version) return `each run in its own cgroup (${this.cgroups.version}): ${l.memoryMb} MiB of memory, ${l.processes} processes and ${l.cpuSeconds} CPU s for the whole run, ${l.wallSeconds} s wall`;
    return `no cgroup (${this.cgroups.why}): per process ${l.memoryMb} MiB of address space and ${l.cpuSeconds} CPU s, ${l.processes} processes, so a run may hold up to ${l.memoryMb * l.processes} MiB; ${l.wallSeconds} s wall`;
  }

  /** Runs `code` in `language` with `stdin`; never rejects for anything the program does. */
  async run(language: string, code: string, stdin = '', options: RunOptions = {}): Promise<RunResult> {
    const lang = this.languages[language];
    if (!lang) throw new InputError(`sandbox: unknown language '${language}'; known: ${Object.keys(this.languages).join(', ')}`);
    if (!fs.existsSync(lang.command[0])) throw new InputError(`sandbox: ${language} programs run with ${lang.command[0]}, which is missing (${lang.install})`);
    if (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      // Without root the runs share one process count, so other runs' forks can leave bwrap none to
      // start with (EAGAIN): that is not the sandbox failing, so it tries again while the wall limit allows.
      const started = performance.now();
      for (let delay = 50; ; delay *= 2) {
        const result = await this.runIn(lang, code, stdin, options.report ?? false);
        const busy = result.status === 'sandbox_error' && result.stderr.includes('Resource temporarily unavailable');
        if (!busy || performance.now() - started + delay > this.limits.wallSeconds * 1000) return result;
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    } finally {
      // The slot passes straight to the next waiting run, or is freed.
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  /** The seccomp filter (BPF) each run loads; see seccompFilter. */
  protected seccompFilter(): Buffer {
    return this.filter;
  }

  /** The command line: setpriv (as root) > prlimit > bwrap > interpreter; `fds` are bwrap's json status and seccomp descriptors. */
  private commandLine(lang: Language, fds: { status: number; seccomp: number }): string[] {
    const l = this.limits;
    const mib = 1024 * 1024;
    const javascript = lang.file.endsWith('.js');
    const uid = this.tools.setpriv ? SANDBOX_UIDS.first + (this.runs++ % SANDBOX_UIDS.count) : process.getuid!();
    // Without root the program shares the user's thread count, so it gets that many more.
    const nproc = this.tools.setpriv ? l.processes : userThreadCount(uid) + l.processes;
    // No POSIX message queues: their memory is not the address space's.
    const limits = [`--cpu=${l.cpuSeconds}`, `--nproc=${nproc}`, `--fsize=${l.tmpMb * mib}`, '--nofile=64', '--core=0', '--msgqueue=0'];
    if (!javascript) limits.push(`--as=${l.memoryMb * mib}`);
    const command = lang.command.map((a) => a.replace('MEMORY', String(l.memoryMb)));
    const binds = [...lang.binds, ...LIBRARY_LINKS.filter((f) => fs.existsSync(f))].flatMap((b) => ['--ro-bind', b, b]);
    const devices = DEVICES.filter((d) => fs.existsSync(d)).flatMap((d) => ['--dev-bind', d, d]);
    const bwrap = [
      this.tools.bwrap,
      '--unshare-all',
      '--unshare-user',
      '--disable-userns',
      '--die-with-parent',
      '--new-session',
      '--as-pid-1',
      '--json-status-fd', String(fds.status),
      '--seccomp', String(fds.seccomp),
      '--hostname', 'sandbox',
      '--ro-bind', '/usr', '/usr',
      '--symlink', 'usr/lib', '/lib',
      '--symlink', 'usr/lib64', '/lib64',
      '--symlink', 'usr/bin', '/bin',
      ...binds,
      '--proc', '/proc',
      // bwrap's --dev would make /dev a writable tmpfs with its own /dev/shm; these are the same nodes on the read-only root.
      ...devices,
      '--symlink', '/proc/self/fd', '/dev/fd',
      '--symlink', '/proc/self/fd/0', '/dev/stdin',
      '--symlink', '/proc/self/fd/1', '/dev/stdout',
      '--symlink', '/proc/self/fd/2', '/dev/stderr',
      '--size', String(l.tmpMb * mib), '--tmpfs', '/tmp',
      // POSIX shared memory and semaphores live in /dev/shm: inside /tmp's cap.
      '--symlink', '/tmp', '/dev/shm',
      '--dir', '/sandbox',
      '--ro-bind-data', '3', `/sandbox/${lang.file}`,
      // Last, so every mount point above exists: the root tmpfs (/, /dev, /sandbox, /etc) becomes read-only.
      '--remount-ro', '/',
      '--chdir', '/tmp',
      // One BLAS thread: the pool already fills the cores, and each thread's buffers count against RLIMIT_AS.
      '--clearenv', '--setenv', 'PATH', '/usr/bin', '--setenv', 'HOME', '/tmp', '--setenv', 'LANG', 'C.UTF-8', '--setenv', 'OPENBLAS_NUM_THREADS', '1', '--setenv', 'OMP_NUM_THREADS', '1',
      '--',
      ...command,
      `/sandbox/${lang.file}`,
    ];
    const prlimit = [this.tools.prlimit, ...limits, '--', ...bwrap];
    return this.tools.setpriv ? [this.tools.setpriv, `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--inh-caps=-all', ...prlimit] : prlimit;
  }

  /** The run's group, when runs have them; its processes get two more for the bwrap that starts them. */
  private runCgroup(): RunCgroup | undefined {
    if (!this.cgroups.version) return undefined;
    return this.cgroups.create({ memoryBytes: this.limits.memoryMb * 1024 * 1024, processes: this.limits.processes + 2 });
  }

  private runIn(lang: Language, code: string, stdin: string, report: boolean): Promise<RunResult> {
    // See the descriptor table at the top of this file.
    const fds = report ? { status: 6, seccomp: 7 } : { status: 4, seccomp: 5 };
    const command = this.commandLine(lang, fds);
    let cgroup: RunCgroup | undefined;
    try {
      cgroup = this.runCgroup();
    } catch (e) {
      return Promise.resolve({ status: 'sandbox_error', exitCode: null, signal: null, stdout: '', stderr: `could not make the run's cgroup: ${(e as Error).message}`, wallMs: 0 });
    }
    // The shell joins the run's group before anything starts (a run that cannot join does not start: exit 125, no status).
    const join = (cgroup?.procsFiles ?? []).map((f) => `echo $$ > '${f.replaceAll("'", "'\\''")}' || exit 125; `).join('');
    // Every descriptor above ours closed first: this process may have inherited some.
    const closeInherited = `${join}for p in /proc/self/fd/*; do fd=\${p##*/}; if [ "$fd" -gt ${fds.seccomp} ]; then eval "exec $fd<&-"; fi; done; exec "$@"`;
    // --norc: stdin is a socket, which makes Debian's bash read ~/.bashrc (as for rshd) without it.
    const [file, ...args] = this.tools.bash ? [this.tools.bash, '--norc', '--noprofile', '-c', closeInherited, 'flowrl-sandbox', ...command] : command;
    const started = performance.now();
    const secret = report ? randomBytes(16).toString('hex') : undefined;
    const filter = this.seccompFilter();
    const stdio: StdioOptions = Array.from({ length: fds.seccomp + 1 }, () => 'pipe' as const);
    return new Promise((resolve) => {
      const child = spawn(file, args, { stdio, env: {} });
      const pipe = (fd: number) => child.stdio[fd] as (NodeJS.ReadableStream & NodeJS.WritableStream & { destroy(): void }) | null;
      let status: RunStatus | undefined;
      // From bwrap's json status: the sandbox's init as the host sees it, and whether the program started.
      let init: { pid: number; pidNamespace: number } | undefined;
      let programExited = false;
      let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
      let done = false;
      let deadline: NodeJS.Timeout | undefined;
      const finish = () => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearInterval(cpuWatch);
        clearTimeout(deadline);
        // bwrapKill stays: a bwrap still waiting on its dying init is killed once that is reaped.
        // Whatever still holds the pipes, the run is over: stop reading and writing them.
        for (let fd = 0; fd < stdio.length; fd++) pipe(fd)?.destroy();
        const err = stderr().toString('utf8');
        const exitCode = exit?.code ?? null;
        const signal = exit?.signal ?? null;
        // bwrap reports the program's exit status only once setup is done and the program was executed: without it, bwrap failed.
        // Only a status stream read to its end can say the program never ran; otherwise it is the program's.
        const sandboxFailed = statusEnded && !programExited && exit !== undefined && signal === null;
        // The program is the sandbox's pid 1; bwrap exits 128 + n when it dies of signal n (RLIMIT_CPU sends SIGKILL).
        const died = exitCode !== null && exitCode > 128 ? exitCode - 128 : undefined;
        const cpu = died === os.constants.signals.SIGKILL || died === os.constants.signals.SIGXCPU;
        // The kernel's OOM killer sends SIGKILL as RLIMIT_CPU does: the group says which it was.
        const outOfMemory = (died !== undefined || signal !== null) && cgroup?.oomKilled() === true;
        const finalStatus: RunStatus = status ?? (sandboxFailed ? 'sandbox_error' : outOfMemory ? 'memory_limit' : cpu ? 'timeout' : died || signal ? 'signalled' : 'exited');
        void cgroup?.remove();
        const result: RunResult = { status: finalStatus, exitCode, signal, stdout: stdout().toString('utf8'), stderr: err, wallMs: performance.now() - started };
        if (secret !== undefined) {
          const text = reportText();
          const at = text.indexOf(`${secret}\n`);
          result.report = at < 0 ? undefined : text.subarray(at + secret.length + 1).toString('utf8');
        }
        resolve(result);
      };
      let bwrapKill: NodeJS.Timeout | undefined;
      // bwrap reaps its killed init and exits. Killed while the init is still dying (a large
      // process's exit takes a while on a loaded machine), it would orphan the init to the host's
      // reaper: bwrap is killed only once its init is reaped, or after a generous wait.
      const killBwrapOnceInitReaped = (initStarted: string | undefined, since: number) => {
        if (init && initStarted !== undefined && startTime(init.pid) === initStarted && performance.now() - since < BWRAP_WAIT_MS) {
          bwrapKill = setTimeout(() => killBwrapOnceInitReaped(initStarted, since), INIT_POLL_MS);
        } else child.kill('SIGKILL');
      };
      const kill = () => {
        if (!init) return void child.kill('SIGKILL');
        const initStarted = killInit(init.pid, init.pidNamespace);
        const since = performance.now();
        bwrapKill ??= setTimeout(() => killBwrapOnceInitReaped(initStarted, since), GRACE_MS / 2);
      };
      const stop = (why: RunStatus) => {
        status ??= why;
        kill();
        // Ends the run even if bwrap's exit never comes.
        deadline ??= setTimeout(finishAfterReads, GRACE_MS);
      };
      const stdout = capped(child.stdout!, this.limits.outputBytes, () => stop('output_limit'));
      const stderr = capped(child.stderr!, this.limits.outputBytes, () => stop('output_limit'));
      // The report escapes what it carries (up to 6 bytes a byte, \u0001): its cap leaves room for
      // that, and a harness that captures output counts the program's own bytes against the limit.
      const reportText = report ? capped(pipe(5)!, REPORT_EXPANSION * this.limits.outputBytes + 65536, () => stop('output_limit')) : () => Buffer.alloc(0);
      let statusText = '';
      // A busy event loop can run an expired timer before the reads already waiting: finishing from a
      // timer waits for the next poll phase, so output, report and status that arrived are read first.
      const finishAfterReads = () => setImmediate(finish);
      let statusEnded = false;
      pipe(fds.status)!.on('end', () => (statusEnded = true));
      pipe(fds.status)!.on('data', (chunk: Buffer) => {
        // bwrap writes one JSON object per line: the child's pid and namespaces, then (if the program ran) its exit code.
        statusText = (statusText + chunk.toString('utf8')).slice(-65536);
        let nl: number;
        while ((nl = statusText.indexOf('\n')) >= 0) {
          const line = statusText.slice(0, nl);
          statusText = statusText.slice(nl + 1);
          let record: Record<string, unknown>;
          try {
            record = JSON.parse(line) as Record<string, unknown>;
          } catch {
            continue;
          }
          if (typeof record['child-pid'] === 'number' && typeof record['pid-namespace'] === 'number') {
            init ??= { pid: record['child-pid'], pidNamespace: record['pid-namespace'] };
            // Stopped before bwrap told its child's pid (bwrap killed already): kill that too.
            if (status !== undefined) killInit(init.pid, init.pidNamespace);
          }
          if (typeof record['exit-code'] === 'number') programExited = true;
        }
      });
      const timer = setTimeout(() => stop('timeout'), this.limits.wallSeconds * 1000);
      // The whole run's CPU time, every process's together (RLIMIT_CPU counts one process's).
      const cpuWatch = cgroup ? setInterval(() => cgroup.cpuSeconds() > this.limits.cpuSeconds && stop('timeout'), CPU_POLL_MS) : undefined;
      // A program that exits without reading its input (or its code, when bwrap failed) closes these pipes early; none may throw.
      for (let fd = 0; fd < stdio.length; fd++) pipe(fd)?.on('error', () => {});
      pipe(fds.seccomp)!.end(filter);
      pipe(3)!.end(code);
      if (secret !== undefined) pipe(4)!.end(`${secret}\n`);
      child.stdin!.end(stdin);
      child.on('error', (e) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        clearInterval(cpuWatch);
        void cgroup?.remove();
        clearTimeout(deadline);
        resolve({ status: 'sandbox_error', exitCode: null, signal: null, stdout: '', stderr: e.message, wallMs: performance.now() - started });
      });
      child.on('exit', (code, signal) => {
        exit = { code, signal };
        clearTimeout(timer);
        clearTimeout(bwrapKill);
        // bwrap is gone; should its init be alive (bwrap killed, or it died), nothing else will end it.
        if (init) killInit(init.pid, init.pidNamespace);
        // Its pipes normally close at once; a process still holding one does not hold up the run.
        deadline ??= setTimeout(finishAfterReads, GRACE_MS);
      });
      child.on('close', finish);
    });
  }

  /** Starts one trivial program, so a host whose kernel refuses namespaces is told before a run begins. */
  async check(language = 'python'): Promise<void> {
    const result = await this.run(language, language === 'python' ? 'print(6 * 7)' : 'console.log(6 * 7)');
    if (result.status !== 'exited' || result.stdout.trim() !== '42') {
      throw new InputError(`the code sandbox (bubblewrap) does not start here: ${result.stderr.trim() || result.status}; it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1, or AppArmor allowing bwrap)`);
    }
  }
}
