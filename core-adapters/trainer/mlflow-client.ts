// MLflow over its REST API (trainer.logger: mlflow; verl v0.9.0's _MlflowLoggingAdapter does the same
// through the mlflow package): the experiment is trainer.project_name (made when missing), the run is
// named trainer.experiment_name (or MLFLOW_RUN_ID's run is continued), the resolved config goes in
// as params (flattened with '/', lists as list_len and indices, as verl), each step's metrics as a
// log-batch with verl's key sanitising ('@' -> '_at_', other characters MLflow refuses -> '_').
// Endpoints and limits: mlflow/protos/service.proto and mlflow/utils/validation.py (MLflow 2.x REST
// API at /api/2.0/mlflow). Requests go out in order from a thread of their own (tracker-sink.ts),
// so they advance while the trainer's thread computes; a step never waits for one.
// A request is tried 5 times, 0.5, 1, 2 and 4 s apart (tracker-client.ts; verl tries 3 times, 5 s
// apart); metrics the server did not take through a longer outage stay queued and go with the next
// step's (one warning). A refused batch costs a warning and the next steps go on; only a run that
// cannot be started stops the tracker.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { SECRET_KEY } from './metrics.js';
import { FINAL_ROUNDS, inFinalRounds, OutageNotice, trackerRequest, TrackerRequestError, type TrackerClient } from './tracker-client.js';

const MAX_METRICS_PER_BATCH = 1000;
const MAX_PARAMS_PER_BATCH = 100;
const MAX_PARAM_VALUE_LENGTH = 6000;
const MAX_KEY_LENGTH = 250;

/** verl's _sanitize_key: '@' becomes '_at_', runs of '/' one '/', any character but [/\w.\- :] '_'. */
export function mlflowKey(key: string): string {
  return key.replaceAll('@', '_at_').replace(/\/+/g, '/').replace(/[^/\w.\- :]/g, '_').slice(0, MAX_KEY_LENGTH);
}

/** The config as MLflow params: nested keys joined with '/', a list as list_len and its indices (verl's flattening). */
export function mlflowParams(tree: unknown, prefix = ''): [string, string][] {
  const join = (key: string) => (prefix ? `${prefix}/${key}` : key);
  if (Array.isArray(tree)) return [[join('list_len'), String(tree.length)], ...tree.flatMap((v, i) => mlflowParams(v, join(String(i))))];
  if (tree && typeof tree === 'object') return Object.entries(tree).flatMap(([k, v]) => (v && typeof v === 'object' ? mlflowParams(v, join(k)) : [[join(k), String(v)] as [string, string]]));
  return prefix ? [[prefix, String(tree)]] : [];
}

/** The tracking server's REST base from MLFLOW_TRACKING_URI (http or https only: this host speaks the REST API). */
export function mlflowBase(uri = process.env.MLFLOW_TRACKING_URI): string {
  if (!uri || !/^https?:\/\//.test(uri)) {
    throw new InputError(`trainer.logger mlflow: set MLFLOW_TRACKING_URI to an MLflow tracking server (http://host:5000)${uri ? `; got '${uri}', and this host speaks MLflow's REST API, not its local stores` : ''}`);
  }
  return `${uri.replace(/\/+$/, '')}/api/2.0/mlflow`;
}

/** MLflow's REST calls for one run, in order (runs on the sink's thread; `warn` prints on the trainer's). */
export class MlflowClient implements TrackerClient {
  private readonly base: string;
  private queue: Promise<unknown> = Promise.resolve();
  private runId?: string;
  private artifactUri?: string;
  private generationsOff = false;
  /** Metrics logged and not yet sent, in order. */
  private readonly unsent: { key: string; value: number; timestamp: number; step: number }[] = [];
  private failed = false;
  private sendQueued = false;
  private readonly outage: OutageNotice;

  constructor(
    private readonly config: Config,
    private readonly warn: (line: string) => void,
    say: (line: string) => void = warn,
  ) {
    this.base = mlflowBase();
    this.outage = new OutageNotice('mlflow', warn, say);
  }

  begin(): void {
    this.enqueue('starting the run', async () => {
      const t = this.config.trainer;
      this.runId = process.env.MLFLOW_RUN_ID || (await this.createRun(t.project_name, t.experiment_name));
    });
    // Params apart from the run: a resumed run (MLFLOW_RUN_ID) whose config changed is refused them
    // (MLflow keeps a param's first value), and its metrics must still go.
    this.enqueue('logging the config as params', async () => {
      // Keys that hold secrets (the servers' api_key, admin_api_key) are sent as set or not, never as values.
      const params = mlflowParams(this.config).map(([key, value]) => ({ key: mlflowKey(key), value: SECRET_KEY.test(key) && value !== 'null' ? '(set)' : value.slice(0, MAX_PARAM_VALUE_LENGTH) }));
      // A key made twice by sanitising would be refused as a duplicate: the last one is kept.
      const unique = [...new Map(params.map((p) => [p.key, p])).values()];
      for (let i = 0; i < unique.length; i += MAX_PARAMS_PER_BATCH) await this.call('POST', 'runs/log-batch', { run_id: this.runId, params: unique.slice(i, i + MAX_PARAMS_PER_BATCH) });
    }, false);
  }

  log(step: number, metrics: Metrics, timestamp = Date.now()): void {
    const entries = Object.entries(metrics).filter(([, v]) => Number.isFinite(v));
    const values = [...new Map(entries.map(([k, v]) => [mlflowKey(k), { key: mlflowKey(k), value: v, timestamp, step }])).values()];
    // Steps that wait behind a slow request go out together, up to MLflow's 1,000 metrics a batch:
    // a server slower than the steps gets fewer, larger requests instead of falling behind.
    this.unsent.push(...values);
    if (this.sendQueued) return;
    this.sendQueued = true;
    this.enqueue('logging metrics', () => {
      this.sendQueued = false;
      return this.sendUnsent();
    }, false);
  }

  /** Sends the metrics not yet sent; through an outage they stay queued, to go with the next step's. */
  private async sendUnsent(): Promise<void> {
    while (this.unsent.length) {
      const batch = this.unsent.slice(0, MAX_METRICS_PER_BATCH);
      try {
        await this.call('POST', 'runs/log-batch', { run_id: this.runId, metrics: batch });
      } catch (e) {
        if (!(e instanceof TrackerRequestError && e.refused)) return this.outage.failed(batch[0].step, e instanceof Error ? e.message : String(e));
        // A refusal will not change: those are dropped, the next ones still go.
        this.unsent.splice(0, batch.length);
        const steps = [...new Set(batch.map((m) => m.step))];
        this.warn(`[flowrl] trainer.logger mlflow: logging step${steps.length > 1 ? `s ${steps[0]}-${steps.at(-1)}` : ` ${steps[0]}`} was refused (${e.message}); the next ones are still sent`);
        continue;
      }
      this.unsent.splice(0, batch.length);
      this.outage.sent(batch.at(-1)!.step);
    }
  }

  /**
   * trainer.log_val_generations: verl's log_generations_to_mlflow, an artifact val_step<step>.json at
   * the run's artifact root holding [{input, output, score}]. Over REST that reaches the server's
   * proxied store (an artifact URI mlflow-artifacts:/..., PUT to /api/2.0/mlflow-artifacts/artifacts/...,
   * as mlflow/store/artifact/mlflow_artifacts_repo.py resolves it) or a local directory; another
   * store (s3://, gs://, ...) needs its own client, which costs one warning.
   */
  logGenerations(step: number, generations: { prompt: string; response: string; score: number }[]): void {
    const file = `val_step${step}.json`;
    const body = JSON.stringify(generations.map((g) => ({ input: g.prompt, output: g.response, score: g.score })));
    this.enqueue(`logging step ${step}'s generations`, async () => {
      if (this.generationsOff) return;
      // One warning, not one a validation: the first failure stops the rest.
      this.generationsOff = true;
      if (this.artifactUri === undefined) this.artifactUri = ((await this.call('GET', `runs/get?run_id=${encodeURIComponent(this.runId!)}`)) as { run: { info: { artifact_uri: string } } }).run.info.artifact_uri;
      const uri = this.artifactUri;
      if (uri.startsWith('mlflow-artifacts:')) {
        const parsed = new URL(uri);
        const tracking = new URL(this.base);
        const root = `${tracking.protocol}//${parsed.host || tracking.host}${tracking.pathname.replace(/\/api\/2\.0\/mlflow$/, '')}`;
        await this.request('PUT', `${root}/api/2.0/mlflow-artifacts/artifacts/${`${parsed.pathname}/${file}`.replace(/^\/+/, '').replace(/\/\/+/g, '/')}`, body);
      } else if (uri.startsWith('file:') || uri.startsWith('/')) {
        const dir = uri.startsWith('file:') ? fileURLToPath(uri) : uri;
        if (!fs.existsSync(dir) && !fs.existsSync(path.dirname(dir))) throw new Error(`the run's artifact directory ${dir} is not on this machine`);
        fs.mkdirSync(dir, { recursive: true });
        fs.writeFileSync(path.join(dir, file), body);
      } else {
        throw new Error(`the run's artifact store ${uri} is not reachable over MLflow's REST API; the generations stay in val_generations.jsonl`);
      }
      this.generationsOff = false;
    }, false);
  }

  /** Ends the run: FINISHED, or FAILED for a run that stopped on an error. */
  close(status: 'FINISHED' | 'FAILED' = 'FINISHED'): void {
    this.enqueue('finishing the run', async () => {
      for (let round = 0; round < FINAL_ROUNDS && this.unsent.length; round++) await this.sendUnsent();
      if (this.unsent.length) this.outage.unsent(this.unsent[0].step, this.unsent.at(-1)!.step);
      await inFinalRounds(() => this.call('POST', 'runs/update', { run_id: this.runId, status, end_time: Date.now() }));
    });
  }

  /** Waits for the requests already queued (the trainer waits, bounded, at the end of a run). */
  async flush(): Promise<void> {
    await this.queue;
  }

  private async createRun(experiment: string, runName: string): Promise<string> {
    let id: string | undefined;
    try {
      id = ((await this.call('GET', `experiments/get-by-name?experiment_name=${encodeURIComponent(experiment)}`)) as { experiment: { experiment_id: string } }).experiment.experiment_id;
    } catch (e) {
      if (!(e as Error).message.includes('RESOURCE_DOES_NOT_EXIST')) throw e;
    }
    if (id === undefined) {
      try {
        id = ((await this.call('POST', 'experiments/create', { name: experiment })) as { experiment_id: string }).experiment_id;
      } catch (e) {
        // Another run made it meanwhile (two first runs of a project at once): read it, as the mlflow package does.
        if (!(e as Error).message.includes('RESOURCE_ALREADY_EXISTS')) throw e;
        id = ((await this.call('GET', `experiments/get-by-name?experiment_name=${encodeURIComponent(experiment)}`)) as { experiment: { experiment_id: string } }).experiment.experiment_id;
      }
    }
    const run = (await this.call('POST', 'runs/create', { experiment_id: id, run_name: runName, start_time: Date.now(), tags: [{ key: 'mlflow.runName', value: runName }] })) as { run: { info: { run_id: string; artifact_uri?: string } } };
    this.artifactUri = run.run.info.artifact_uri;
    return run.run.info.run_id;
  }

  /** Queues `work` after what is queued; once something `fatal` fails for good, nothing more is sent. */
  private enqueue(what: string, work: () => Promise<unknown>, fatal = true): void {
    this.queue = this.queue.then(async () => {
      if (this.failed) return;
      try {
        await work();
      } catch (e) {
        if (fatal) this.failed = true;
        this.warn(`[flowrl] trainer.logger mlflow: ${what} failed (${(e as Error).message})${fatal ? '; the run goes on without MLflow' : '; the next ones are still sent'}`);
      }
    });
  }

  private call(method: 'GET' | 'POST', route: string, body?: unknown): Promise<unknown> {
    return this.request(method, `${this.base}/${route}`, body === undefined ? undefined : JSON.stringify(body));
  }

  private request(method: 'GET' | 'POST' | 'PUT', url: string, body?: string): Promise<unknown> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (process.env.MLFLOW_TRACKING_TOKEN) headers.authorization = `Bearer ${process.env.MLFLOW_TRACKING_TOKEN}`;
    else if (process.env.MLFLOW_TRACKING_USERNAME) headers.authorization = `Basic ${Buffer.from(`${process.env.MLFLOW_TRACKING_USERNAME}:${process.env.MLFLOW_TRACKING_PASSWORD ?? ''}`).toString('base64')}`;
    const label = url.startsWith(this.base) ? url.slice(this.base.length + 1) : new URL(url).pathname;
    // A refusal (4xx) will not change on a retry.
    return trackerRequest({ method, url, label, headers, body, retryable: (status) => status >= 500 });
  }
}
