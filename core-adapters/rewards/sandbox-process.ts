// The code sandbox in a helper process of its own. Starting a program forks the process that starts
// it, and a fork copies its page tables: from a trainer holding gigabytes (a 0.5B model) that took
// 85-130 ms a run here, all of it on the trainer's event loop, which capped a step at 8-12 runs a
// second whatever the cores. The helper holds only the sandbox (about 50 MB), so its forks are
// cheap and never on the trainer's event loop. It is in a process group of its own, so a Ctrl-C
// meant for the trainer (which finishes its step) does not end the step's runs; it ends with the
// trainer (its IPC channel closes), and bwrap's --die-with-parent ends the runs with it.
import { spawn, type ChildProcess } from 'node:child_process';
import { InputError, ScorerUnavailable } from '../errors.js';
import { threadEntrySource } from '../thread-entry.js';
import type { SandboxHostReply } from './sandbox-host.js';
import { Sandbox, type ProgramSandbox, type RunOptions, type RunResult, type SandboxLimits, type SandboxOptions } from './sandbox.js';

/** A Sandbox whose runs start in a helper process (started on first use; it does not keep this process alive). */
export class SandboxProcess implements ProgramSandbox {
  readonly limits: SandboxLimits;
  readonly concurrency: number;
  /** The same sandbox in this process, never run: its limits and bounds are the helper's. */
  private readonly described: Sandbox;
  private child?: ChildProcess;
  private next = 0;
  private readonly pending = new Map<number, { resolve: (result: RunResult) => void; reject: (e: Error) => void }>();

  constructor(private readonly options: SandboxOptions = {}) {
    // Checked here, as the Sandbox would (tools, seccomp architecture), before any run is sent.
    this.described = new Sandbox(options);
    this.limits = this.described.limits;
    this.concurrency = this.described.concurrency;
  }

  describeBounds(): string {
    return this.described.describeBounds();
  }

  /** The helper's pid while it runs (tests look at its children). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  run(language: string, code: string, stdin = '', options: RunOptions = {}): Promise<RunResult> {
    const child = this.start();
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) this.hold(child, true);
      child.send({ type: 'run', id, language, code, stdin, options });
    });
  }

  /** Ends the helper (and any run under way). */
  close(): void {
    this.child?.kill('SIGKILL');
  }

  private start(): ChildProcess {
    if (this.child) return this.child;
    const child = spawn(process.execPath, ['-e', threadEntrySource(new URL('./sandbox-host.js', import.meta.url))], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      detached: true,
      serialization: 'advanced',
    });
    child.send({ type: 'init', options: this.options });
    child.on('message', (reply: SandboxHostReply) => {
      const waiting = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      if (this.pending.size === 0) this.hold(child, false);
      if (!waiting) return;
      if ('result' in reply) waiting.resolve(reply.result);
      else waiting.reject(reply.error.input ? new InputError(reply.error.message) : new Error(reply.error.message));
    });
    // A helper that dies (killed, out of memory) fails what it held as a scorer that cannot run
    // (the run stops with that message, as when bwrap cannot start); the next run starts another.
    const fail = (why: string) => {
      if (this.child === child) this.child = undefined;
      for (const waiting of this.pending.values()) waiting.reject(new ScorerUnavailable(`the code sandbox's helper process stopped (${why})`));
      this.pending.clear();
    };
    child.on('error', (e) => fail(e.message));
    child.on('exit', (code, signal) => fail(signal ? `signal ${signal}` : `exit code ${code}`));
    this.hold(child, false);
    this.child = child;
    return child;
  }

  /** While runs are pending the helper keeps this process alive; otherwise it does not. */
  private hold(child: ChildProcess, held: boolean): void {
    const channel = child.channel as { ref(): void; unref(): void } | null | undefined;
    if (held) {
      child.ref();
      channel?.ref();
    } else {
      child.unref();
      channel?.unref();
    }
  }
}
