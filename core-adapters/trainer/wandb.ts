// W&B through its JavaScript SDK (trainer.logger: wandb; verl v0.9.0 calls wandb.init(project=
// project_name, name=experiment_name, entity=$WANDB_ENTITY, config=config) and logs each step's
// metrics at its step). @wandb/sdk is an optional peer dependency: `npm install @wandb/sdk`.
//
// The SDK (0.5.1) runs in a thread of its own, because in the run's thread it would take the run
// down with it: it throws from a message listener when the server refuses the run (an uncaught
// exception), its SIGINT handler calls process.exit, and a failing request is waited on for up to
// 50 back-offs of 30 s. In a thread, signals never reach it, a throw ends only that thread (one
// warning), and the trainer waits for it at the end no longer than for any tracker.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { inject, injectable } from 'inversify';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { TOKENS } from '../tokens.js';
import { redactSecrets, type RunAwareSink } from './metrics.js';

/** SDK lines passed on to the console (each cut to 300 characters) before the rest are dropped. */
const MAX_FORWARDED_LINES = 20;

const WANDB_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const fail = (e) => { parentPort.postMessage({ type: 'failed', reason: String((e && e.message) || e) }); process.exit(1); };
process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);
// The SDK prints whole error objects: its lines go to the run's thread, which shortens them.
const text = (a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : String(JSON.stringify(a)));
console.log = console.info = console.warn = console.error = (...args) => parentPort.postMessage({ type: 'output', text: args.map(text).join(' ') });
let chain = import(workerData.sdk).then(async ({ default: wandb }) => {
  const run = await wandb.init(workerData.init);
  parentPort.postMessage({ type: 'started', url: run.url() });
  return run;
});
chain.catch(fail);
parentPort.on('message', (m) => {
  if (m.type === 'log') chain = chain.then((run) => { run.log(m.metrics, m.step); return run; });
  else if (m.type === 'finish') chain.then((run) => run.finish(0)).then(() => parentPort.postMessage({ type: 'finished' }), fail);
});`;

/**
 * Checks what a W&B run needs before training starts: the SDK installed, a key, a mode it can
 * serve. Returns the SDK's module URL, or undefined when WANDB_MODE=disabled (nothing is sent).
 */
export function wandbSdk(env = process.env): string | undefined {
  if (env.WANDB_MODE === 'disabled') return undefined;
  if (env.WANDB_MODE === 'offline' || env.WANDB_MODE === 'dryrun') {
    throw new InputError(`trainer.logger wandb: WANDB_MODE=${env.WANDB_MODE} is not served by W&B's JavaScript SDK (it keeps nothing offline); use tensorboard for offline runs, or WANDB_MODE=disabled`);
  }
  let url: string;
  try {
    url = import.meta.resolve('@wandb/sdk');
  } catch {
    throw new InputError('trainer.logger wandb: needs the @wandb/sdk package (npm install @wandb/sdk)');
  }
  const host = (env.WANDB_BASE_URL || 'https://api.wandb.ai').split('://').pop()!.split('/')[0];
  const netrc = path.join(env.HOME || os.homedir(), '.netrc');
  if (!env.WANDB_API_KEY && !(fs.existsSync(netrc) && fs.readFileSync(netrc, 'utf8').includes(host))) {
    throw new InputError(`trainer.logger wandb: set WANDB_API_KEY (or log in with \`wandb login\`, which writes ~/.netrc for ${host})`);
  }
  return url;
}

/** The config as W&B's backend stores it: each top-level key as {desc, value} (wandb 0.28.2 sender_config.py); the JS SDK sends what it is given. */
export function wandbConfig(config: unknown): Record<string, { desc: null; value: unknown }> {
  return Object.fromEntries(Object.entries(redactSecrets(config) as Record<string, unknown>).map(([key, value]) => [key, { desc: null, value }]));
}

@injectable()
export class WandbSink implements RunAwareSink {
  private thread?: Worker;
  private done?: Promise<void>;
  private warned = false;

  constructor(@inject(TOKENS.Config) private readonly config: Config) {}

  begin(): void {
    const sdk = wandbSdk();
    if (!sdk) return;
    const t = this.config.trainer;
    const init = { project: t.project_name, name: t.experiment_name, entity: process.env.WANDB_ENTITY, config: wandbConfig(JSON.parse(JSON.stringify(this.config))) };
    const thread = new Worker(WANDB_THREAD, { eval: true, workerData: { sdk, init } });
    this.thread = thread;
    let forwarded = 0;
    this.done = new Promise<void>((resolve) => {
      thread.on('message', (m: { type: string; url?: string; reason?: string; text?: string }) => {
        if (m.type === 'started') console.error(`[flowrl] trainer.logger wandb: run at ${m.url}`);
        else if (m.type === 'output' && forwarded++ < MAX_FORWARDED_LINES) console.error(`[flowrl] wandb: ${m.text!.slice(0, 300)}`);
        else if (m.type === 'failed') this.warn(m.reason!);
        else if (m.type === 'finished') {
          void thread.terminate();
          resolve();
        }
      });
      thread.on('error', (e) => this.warn(e.message));
      thread.on('exit', () => resolve());
    });
    // After the listeners (adding one holds the thread again): it never holds the process alone.
    thread.unref();
  }

  log(step: number, metrics: Metrics): void {
    // JSON has no NaN or infinity; W&B gets the finite values.
    const finite = Object.fromEntries(Object.entries(metrics).filter(([, v]) => Number.isFinite(v)));
    this.thread?.postMessage({ type: 'log', step, metrics: finite });
  }

  close(): void {
    this.thread?.postMessage({ type: 'finish' });
  }

  /** Waits for the SDK to send what it was given; the trainer bounds the wait, and the thread never holds the process. */
  async flush(): Promise<void> {
    // Held while the trainer waits (bounded), or the process could end before the last request.
    this.thread?.ref();
    await this.done;
  }

  abandon(): void {
    void this.thread?.terminate();
  }

  private warn(reason: string): void {
    if (this.warned) return;
    this.warned = true;
    console.warn(`[flowrl] trainer.logger wandb: ${reason}; the run goes on without W&B`);
    void this.thread?.terminate();
  }
}
