// Running untrusted programs for code rewards. Each run is a fresh bubblewrap sandbox: new user,
// pid, network, ipc, uts and cgroup namespaces (no network but its own loopback), the system's /usr
// read-only and nothing else of the host (no /etc, /home, /root or working directory), a private
// size-limited /tmp as the only writable place, and CPU-time, address-space, process, file-size and
// open-file limits set by prlimit before bwrap starts. The parent adds the wall-clock and output
// limits and kills the sandbox on either; when its init dies the kernel kills every process left in
// its pid namespace, so nothing outlives a run. A pool bounds how many run at once.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { InputError } from '../errors.js';

export interface SandboxLimits {
  /** CPU seconds (RLIMIT_CPU). */
  cpuSeconds: number;
  /** Wall-clock seconds before the sandbox is killed. */
  wallSeconds: number;
  /** Address space in MiB (RLIMIT_AS). */
  memoryMb: number;
  /** Processes and threads the program may have at once. */
  processes: number;
  /** Bytes of stdout and of stderr kept; more kills the run. */
  outputBytes: number;
  /** Size of the private /tmp in MiB, also the largest file the program may write. */
  tmpMb: number;
}

export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = { cpuSeconds: 5, wallSeconds: 10, memoryMb: 512, processes: 16, outputBytes: 1 << 20, tmpMb: 16 };

/** How a run ended: exited (any code), killed for time, stopped for output, or the sandbox could not start. */
export type RunStatus = 'exited' | 'timeout' | 'output_limit' | 'signalled' | 'sandbox_error';

export interface RunResult {
  status: RunStatus;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  wallMs: number;
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
  return found as unknown as Tools;
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
function capped(stream: NodeJS.ReadableStream, limit: number, over: () => void): () => string {
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on('data', (chunk: Buffer) => {
    const room = limit - size;
    chunks.push(chunk.subarray(0, Math.max(0, room)));
    size += Math.min(chunk.length, Math.max(0, room));
    if (chunk.length > room) over();
  });
  return () => Buffer.concat(chunks).toString('utf8');
}

/** A pool of sandboxes: at most `concurrency` programs run at once, the rest wait their turn. */
export class Sandbox {
  readonly limits: SandboxLimits;
  readonly concurrency: number;
  private readonly tools: Tools;
  private readonly languages = sandboxLanguages();
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** Runs started; with a per-process offset, picks each run's uid (as root). */
  private runs = process.pid * 17;

  constructor(options: { limits?: Partial<SandboxLimits>; concurrency?: number } = {}) {
    this.tools = findSandboxTools();
    this.limits = { ...DEFAULT_SANDBOX_LIMITS, ...options.limits };
    this.concurrency = Math.max(1, options.concurrency ?? os.availableParallelism());
  }

  /** Runs `code` in `language` with `stdin`; never rejects for anything the program does. */
  async run(language: string, code: string, stdin = ''): Promise<RunResult> {
    const lang = this.languages[language];
    if (!lang) throw new InputError(`sandbox: unknown language '${language}'; known: ${Object.keys(this.languages).join(', ')}`);
    if (!fs.existsSync(lang.command[0])) throw new InputError(`sandbox: ${language} programs run with ${lang.command[0]}, which is missing (${lang.install})`);
    if (this.running >= this.concurrency) await new Promise<void>((resolve) => this.waiting.push(resolve));
    else this.running++;
    try {
      return await this.runIn(lang, code, stdin);
    } finally {
      // The slot passes straight to the next waiting run, or is freed.
      const next = this.waiting.shift();
      if (next) next();
      else this.running--;
    }
  }

  /** The command line: setpriv (as root) > prlimit > bwrap > interpreter. */
  private commandLine(lang: Language): string[] {
    const l = this.limits;
    const mib = 1024 * 1024;
    const javascript = lang.file.endsWith('.js');
    const uid = this.tools.setpriv ? SANDBOX_UIDS.first + (this.runs++ % SANDBOX_UIDS.count) : process.getuid!();
    // Without root the program shares the user's thread count, so it gets that many more.
    const nproc = this.tools.setpriv ? l.processes : userThreadCount(uid) + l.processes;
    const limits = [`--cpu=${l.cpuSeconds}`, `--nproc=${nproc}`, `--fsize=${l.tmpMb * mib}`, '--nofile=64', '--core=0'];
    if (!javascript) limits.push(`--as=${l.memoryMb * mib}`);
    const command = lang.command.map((a) => a.replace('MEMORY', String(l.memoryMb)));
    const binds = lang.binds.flatMap((b) => ['--ro-bind', b, b]);
    const bwrap = [
      this.tools.bwrap,
      '--unshare-all',
      '--unshare-user',
      '--disable-userns',
      '--die-with-parent',
      '--new-session',
      '--as-pid-1',
      '--hostname', 'sandbox',
      '--ro-bind', '/usr', '/usr',
      '--symlink', 'usr/lib', '/lib',
      '--symlink', 'usr/lib64', '/lib64',
      '--symlink', 'usr/bin', '/bin',
      ...binds,
      '--proc', '/proc',
      '--dev', '/dev',
      '--size', String(l.tmpMb * mib), '--tmpfs', '/tmp',
      '--dir', '/sandbox',
      '--ro-bind-data', '3', `/sandbox/${lang.file}`,
      '--chdir', '/tmp',
      '--clearenv', '--setenv', 'PATH', '/usr/bin', '--setenv', 'HOME', '/tmp', '--setenv', 'LANG', 'C.UTF-8',
      '--',
      ...command,
      `/sandbox/${lang.file}`,
    ];
    const prlimit = [this.tools.prlimit, ...limits, '--', ...bwrap];
    return this.tools.setpriv ? [this.tools.setpriv, `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', '--inh-caps=-all', ...prlimit] : prlimit;
  }

  private runIn(lang: Language, code: string, stdin: string): Promise<RunResult> {
    const [file, ...args] = this.commandLine(lang);
    const started = performance.now();
    return new Promise((resolve) => {
      const child = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe', 'pipe'], env: {} });
      let status: RunStatus | undefined;
      const stop = (why: RunStatus) => {
        status ??= why;
        child.kill('SIGKILL');
      };
      const stdout = capped(child.stdout!, this.limits.outputBytes, () => stop('output_limit'));
      const stderr = capped(child.stderr!, this.limits.outputBytes, () => stop('output_limit'));
      const timer = setTimeout(() => stop('timeout'), this.limits.wallSeconds * 1000);
      // A program that exits without reading its input (or its code, when bwrap failed) closes these pipes early.
      for (const pipe of [child.stdin!, child.stdio[3] as NodeJS.WritableStream]) pipe.on('error', () => {});
      (child.stdio[3] as NodeJS.WritableStream).end(code);
      child.stdin!.end(stdin);
      child.on('error', (e) => {
        clearTimeout(timer);
        resolve({ status: 'sandbox_error', exitCode: null, signal: null, stdout: '', stderr: e.message, wallMs: performance.now() - started });
      });
      child.on('close', (exitCode, signal) => {
        clearTimeout(timer);
        const err = stderr();
        // bwrap reports its own failures with its name and exit code 1 before the program starts.
        const sandboxFailed = exitCode === 1 && /^bwrap: /m.test(err) && status === undefined;
        // The program is the sandbox's pid 1; bwrap exits 128 + n when it dies of signal n (RLIMIT_CPU sends SIGKILL).
        const died = exitCode !== null && exitCode > 128 ? exitCode - 128 : undefined;
        const cpu = died === os.constants.signals.SIGKILL || died === os.constants.signals.SIGXCPU;
        const finalStatus: RunStatus = status ?? (sandboxFailed ? 'sandbox_error' : cpu ? 'timeout' : died || signal ? 'signalled' : 'exited');
        resolve({ status: finalStatus, exitCode, signal, stdout: stdout(), stderr: err, wallMs: performance.now() - started });
      });
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
