// W&B over its HTTP API (trainer.logger: wandb; verl v0.9.0 calls wandb.init(project=project_name,
// name=experiment_name, entity=$WANDB_ENTITY, config=config) and logs each step's metrics at its
// step). What the Python SDK's core sends, at wandb v0.28.2: the GraphQL mutation upsertBucket
// (core/api/graphql/mutation_run.graphql: the run's id as `name`, the project as `modelName`, the
// entity as `entityName`, its title as `displayName`, the config as a JSON string), the Viewer query
// for the key's default entity, then the run's file stream (core/internal/filestream: POST
// files/ENTITY/PROJECT/RUN/file_stream with {files: {"wandb-history.jsonl": {offset, content: [one
// JSON row a step, with _step, _runtime, _timestamp]}, "wandb-summary.json": {offset: 0, content:
// [the latest values]}}}, and at the end {complete: true, exitcode}); the key as HTTP Basic
// "api:KEY" (core/internal/api/credentials.go).
//
// Requests are retried as tracker-client.ts does, with the statuses W&B's core gives up on at once
// (clients/retry_policy.go RetryMostFailures: 400, 401, 403, 404, 409, 410, 413, 422, 501) refused
// at once. Rows the server did not take during an outage are kept and go with the next step's, at
// their own offsets: an outage costs a warning and, once it answers again, no row.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Config } from '../config/load.js';
import type { Metrics } from '../contracts/index.js';
import { InputError } from '../errors.js';
import { redactSecrets } from './metrics.js';
import { FINAL_ROUNDS, inFinalRounds, OutageNotice, trackerRequest, TrackerRequestError, type TrackerClient } from './tracker-client.js';

/** The statuses W&B's own client does not retry (wandb v0.28.2 core/internal/clients/retry_policy.go). */
const NOT_RETRIED = new Set([400, 401, 403, 404, 409, 410, 413, 422, 501]);
/** History rows a request carries at most (W&B's core caps a request at 10 MB; a row here is a few kB). */
const MAX_ROWS_PER_REQUEST = 1000;

const VIEWER = 'query Viewer { viewer { id entity } }';
const UPSERT_BUCKET = `mutation UpsertBucket($name: String, $project: String, $entity: String, $displayName: String, $config: JSONString) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, displayName: $displayName, config: $config}) {
    bucket { id name displayName project { id name entity { id name } } }
    inserted
  }
}`;

export interface WandbSettings {
  /** The API's base URL, without a trailing slash ($WANDB_BASE_URL, else https://api.wandb.ai). */
  baseUrl: string;
  apiKey: string;
  /** $WANDB_ENTITY; else the key's default entity. */
  entity?: string;
}

/** The password of `host`'s entry in a .netrc file's text (what `wandb login` writes), if any. */
export function netrcPassword(text: string, host: string): string | undefined {
  const tokens = text.split(/\s+/).filter(Boolean);
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i] !== 'machine' || tokens[i + 1] !== host) continue;
    for (let j = i + 2; j < tokens.length && tokens[j] !== 'machine' && tokens[j] !== 'default'; j += 2) {
      if (tokens[j] === 'password') return tokens[j + 1];
    }
  }
  return undefined;
}

/**
 * What a W&B run needs, checked before training starts: a key ($WANDB_API_KEY, or the ~/.netrc entry
 * `wandb login` writes for the server's host) and a mode this host serves. Undefined when
 * WANDB_MODE=disabled (nothing is sent).
 */
export function wandbSettings(env = process.env): WandbSettings | undefined {
  if (env.WANDB_MODE === 'disabled') return undefined;
  if (env.WANDB_MODE === 'offline' || env.WANDB_MODE === 'dryrun') {
    throw new InputError(`trainer.logger wandb: WANDB_MODE=${env.WANDB_MODE} is not served by this host (it keeps nothing offline for \`wandb sync\`); use tensorboard for offline runs, or WANDB_MODE=disabled`);
  }
  const baseUrl = (env.WANDB_BASE_URL || 'https://api.wandb.ai').replace(/\/+$/, '');
  let host: string;
  try {
    host = new URL(baseUrl).host;
  } catch {
    throw new InputError(`trainer.logger wandb: WANDB_BASE_URL '${env.WANDB_BASE_URL}' is not a URL (https://api.wandb.ai, or your server's)`);
  }
  const netrc = path.join(env.HOME || os.homedir(), '.netrc');
  const apiKey = env.WANDB_API_KEY || (fs.existsSync(netrc) ? netrcPassword(fs.readFileSync(netrc, 'utf8'), host) : undefined);
  if (!apiKey) throw new InputError(`trainer.logger wandb: set WANDB_API_KEY (or log in with \`wandb login\`, which writes ~/.netrc for ${host})`);
  return { baseUrl, apiKey, entity: env.WANDB_ENTITY || undefined };
}

/** The config as W&B's backend stores it: each top-level key as {desc, value} (wandb 0.28.2 sender_config.py). */
export function wandbConfig(config: unknown): Record<string, { desc: null; value: unknown }> {
  return Object.fromEntries(Object.entries(redactSecrets(config) as Record<string, unknown>).map(([key, value]) => [key, { desc: null, value }]));
}

/** The web page of an API URL, as wandb v0.28.2's util.api_to_app_url makes it (api.wandb.ai -> wandb.ai; api.HOST -> app.HOST). */
export function wandbAppUrl(baseUrl: string): string {
  if (baseUrl.includes('://api.wandb.test')) return baseUrl.replace('://api.', '://app.');
  if (baseUrl.includes('://api.wandb.')) return baseUrl.replace('://api.', '://');
  if (baseUrl.includes('://api.')) return baseUrl.replace('://api.', '://app.');
  return baseUrl;
}

/** A run id as W&B makes them: 8 characters of [a-z0-9]. */
function runId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(8)].map((b) => alphabet[b % alphabet.length]).join('');
}

/** W&B's calls for one run, in order (on the sink's thread; `warn` and `say` print on the trainer's). */
export class WandbClient implements TrackerClient {
  private readonly settings: WandbSettings;
  private queue: Promise<unknown> = Promise.resolve();
  private stream?: string;
  private stopped = false;
  private readonly started = Date.now();
  /** History rows (JSON) not yet taken by the server, with their steps; `sentRows` is the offset of the first. */
  private readonly unsent: { step: number; row: string }[] = [];
  private sentRows = 0;
  private summary: Record<string, number> = {};
  private sendQueued = false;
  private readonly outage: OutageNotice;

  constructor(
    private readonly config: Config,
    private readonly warn: (line: string) => void,
    private readonly say: (line: string) => void = warn,
  ) {
    const settings = wandbSettings();
    if (!settings) throw new Error('WANDB_MODE=disabled: no W&B client');
    this.settings = settings;
    this.outage = new OutageNotice('wandb', warn, say);
  }

  begin(): void {
    this.enqueue(async () => {
      try {
        const t = this.config.trainer;
        const entity = this.settings.entity ?? ((await this.graphql(VIEWER, {})) as { viewer?: { entity?: string } }).viewer?.entity;
        if (!entity) throw new Error('the key has no default entity: set WANDB_ENTITY');
        const config = JSON.stringify(wandbConfig(JSON.parse(JSON.stringify(this.config))));
        const bucket = ((await this.graphql(UPSERT_BUCKET, { name: runId(), project: t.project_name, entity, displayName: t.experiment_name, config })) as { upsertBucket: { bucket: { name: string; project: { name: string; entity: { name: string } } } } }).upsertBucket.bucket;
        const where = `${encodeURIComponent(bucket.project.entity.name)}/${encodeURIComponent(bucket.project.name)}`;
        this.stream = `${this.settings.baseUrl}/files/${where}/${encodeURIComponent(bucket.name)}/file_stream`;
        this.say(`[flowrl] trainer.logger wandb: run at ${wandbAppUrl(this.settings.baseUrl)}/${where}/runs/${bucket.name}`);
      } catch (e) {
        this.stop(`starting the run failed (${(e as Error).message})`);
      }
    });
  }

  log(step: number, metrics: Metrics, timestamp = Date.now()): void {
    // JSON has no NaN or infinity; W&B gets the finite values.
    const row = { ...Object.fromEntries(Object.entries(metrics).filter(([, v]) => Number.isFinite(v))), _step: step, _runtime: (timestamp - this.started) / 1000, _timestamp: timestamp / 1000 };
    this.summary = { ...this.summary, ...row };
    this.unsent.push({ step, row: JSON.stringify(row) });
    // Rows logged while a request is under way go with the next one: a server slower than the steps gets fewer, larger requests.
    if (this.sendQueued) return;
    this.sendQueued = true;
    this.enqueue(() => {
      this.sendQueued = false;
      return this.sendUnsent();
    });
  }

  /** Ends the run: exit code 0 when FINISHED, 1 when FAILED (as the Python SDK reports a run that raised). */
  close(status: 'FINISHED' | 'FAILED'): void {
    this.enqueue(async () => {
      // The end gets FINAL_ROUNDS rounds of tries (the trainer waits up to 30 s for them).
      for (let round = 0; round < FINAL_ROUNDS && !this.stopped && this.unsent.length; round++) await this.sendUnsent();
      if (this.stopped) return;
      if (this.unsent.length) this.outage.unsent(this.unsent[0].step, this.unsent.at(-1)!.step);
      try {
        await inFinalRounds(() => this.post(this.stream!, { complete: true, exitcode: status === 'FINISHED' ? 0 : 1 }));
      } catch (e) {
        this.warn(`[flowrl] trainer.logger wandb: finishing the run failed (${(e as Error).message})`);
      }
    });
  }

  async flush(): Promise<void> {
    await this.queue;
  }

  /** Sends the rows the server has not taken, in requests of at most MAX_ROWS_PER_REQUEST; keeps them when it does not answer. */
  private async sendUnsent(): Promise<void> {
    while (!this.stopped && this.unsent.length) {
      const rows = this.unsent.slice(0, MAX_ROWS_PER_REQUEST);
      try {
        await this.post(this.stream!, { files: { 'wandb-history.jsonl': { offset: this.sentRows, content: rows.map((r) => r.row) }, 'wandb-summary.json': { offset: 0, content: [JSON.stringify(this.summary)] } } });
      } catch (e) {
        if (e instanceof TrackerRequestError && e.refused) return this.stop(`the server refused step ${rows[0].step}'s metrics (${e.message})`);
        return this.outage.failed(rows[0].step, (e as Error).message);
      }
      this.unsent.splice(0, rows.length);
      this.sentRows += rows.length;
      this.outage.sent(rows.at(-1)!.step);
    }
  }

  /** Stops sending, with one warning; the run goes on (its metrics stay in metrics.jsonl). */
  private stop(why: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this.warn(`[flowrl] trainer.logger wandb: ${why}; the run goes on without W&B`);
  }

  private enqueue(work: () => Promise<unknown>): void {
    this.queue = this.queue.then(() => (this.stopped ? undefined : work()));
  }

  private async graphql(query: string, variables: Record<string, unknown>): Promise<unknown> {
    const answer = (await this.post(`${this.settings.baseUrl}/graphql`, { query, variables })) as { data?: unknown; errors?: { message: string }[] };
    if (answer.errors?.length) throw new Error(`graphql: ${answer.errors.map((e) => e.message).join('; ')}`);
    return answer.data;
  }

  private post(url: string, body: unknown): Promise<unknown> {
    const headers = { 'content-type': 'application/json', authorization: `Basic ${Buffer.from(`api:${this.settings.apiKey}`).toString('base64')}` };
    const label = new URL(url).pathname;
    return trackerRequest({ method: 'POST', url, label, headers, body: JSON.stringify(body), retryable: (status) => !NOT_RETRIED.has(status) && status >= 400 });
  }
}
