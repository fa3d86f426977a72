// trainer.logger (verl's trackers): TensorBoard event files checked against TensorBoard's own proto
// definitions (scripts/tensorboard_oracle.py read the fixture with them in Python's protobuf once),
// and a run's event files against its metrics.jsonl.
import { expect } from 'chai';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createHost, TOKENS, type Config, type Trainer } from '../core-adapters/index.js';
import { encodeEvent, readEventFile, tfRecord } from '../core-adapters/trainer/tensorboard.js';
import { mlflowKey, mlflowParams } from '../core-adapters/trainer/mlflow.js';
import { MlflowClient } from '../core-adapters/trainer/mlflow-client.js';
import { netrcPassword, wandbAppUrl, WandbClient } from '../core-adapters/trainer/wandb-client.js';
import { parse, type OperationDefinitionNode, type FieldNode, type ObjectValueNode } from 'graphql';
import { expectInputErrorAsync, fixture, readJson, readRunMetrics, runBuiltFlowrl, tempDir, writeCountdownConfig } from './helpers.js';

interface FixtureEvent {
  wallTime: number;
  step?: number;
  fileVersion?: string;
  scalars?: Record<string, number | 'NaN'>;
  texts?: Record<string, string>;
}
interface OracleRecord {
  length_crc_ok: boolean;
  payload_crc_ok: boolean;
  wall_time: number;
  step: number;
  what: string;
  file_version?: string;
  values?: { tag: string; kind: string; simple_value?: number; plugin_name?: string; dtype?: number; rank?: number; strings?: string[] }[];
}

describe('trainer.logger: TensorBoard event files', function () {
  this.timeout(120_000);
  const dir = fixture('tensorboard');
  const inputs = readJson<FixtureEvent[]>(path.join(dir, 'inputs.json')).map((e) => ({ ...e, scalars: e.scalars && Object.fromEntries(Object.entries(e.scalars).map(([k, v]) => [k, v === 'NaN' ? NaN : v])) }));

  it("the writer's bytes are the fixture's, which TensorBoard's protos (Python protobuf) read back: CRCs, version, steps, float32 scalars, non-finite values left out", () => {
    const bytes = Buffer.concat(inputs.map((e) => tfRecord(encodeEvent(e))));
    expect(bytes.equals(fs.readFileSync(path.join(dir, 'events.tfevents')))).to.equal(true);
    const { records } = readJson<{ records: OracleRecord[] }>(path.join(dir, 'oracle.json'));
    expect(records).to.have.length(inputs.length);
    records.forEach((r, i) => {
      const input = inputs[i];
      expect([r.length_crc_ok, r.payload_crc_ok], `record ${i}`).to.deep.equal([true, true]);
      expect(r.wall_time).to.equal(input.wallTime);
      expect(r.step).to.equal(input.step ?? 0);
      if (input.fileVersion) expect(r).to.include({ what: 'file_version', file_version: 'brain.Event:2' });
      else {
        const finite = Object.entries(input.scalars ?? {}).filter(([, v]) => Number.isFinite(v));
        // A text: the text plugin's scalar string tensor (DT_STRING 7), as TensorBoard reads it.
        const texts = Object.entries(input.texts ?? {}).map(([tag, text]) => ({ tag, kind: 'tensor', plugin_name: 'text', dtype: 7, rank: 0, strings: [text] }));
        expect(r.values ?? [], `record ${i}`).to.deep.equal([...finite.map(([tag, v]) => ({ tag, kind: 'simple_value', simple_value: Math.fround(v) })), ...texts]);
      }
    });
    // This host's reader agrees.
    expect(readEventFile(bytes).map((e) => e.step)).to.deep.equal([0, 1, 2, 2 ** 40, 3]);
    expect(readEventFile(bytes)[4].texts.val_generations).to.contain('ünïcode ✓');
  });

  it('a run with trainer.logger [console, file, tensorboard]: one event file whose scalars are metrics.jsonl\'s; a directory that cannot be written costs a warning, not the run', async () => {
    const run = tempDir();
    const board = path.join(run, 'board');
    const previous = process.env.TENSORBOARD_DIR;
    process.env.TENSORBOARD_DIR = board;
    try {
      const host = await createHost(writeCountdownConfig(run, { trainer: { logger: ['console', 'file', 'tensorboard'], total_training_steps: 3, test_freq: 3 } }), { quiet: true });
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      const files = fs.readdirSync(board).filter((f) => f.startsWith('events.out.tfevents.'));
      expect(files).to.have.length(1);
      const events = readEventFile(fs.readFileSync(path.join(board, files[0])));
      expect(events[0].fileVersion).to.equal('brain.Event:2');
      const logged = readRunMetrics(path.join(run, 'run'));
      // The validations' generations (trainer.log_val_generations) as text summaries, verl's layout.
      const texts = events.filter((e) => Object.keys(e.texts).length);
      expect(texts.map((e) => e.step)).to.deep.equal([0, 3]);
      expect(texts[1].texts.val_generations).to.match(/^\*\*Generation Results - Step 3\*\*\n\n### Sample 1\n\*\*Input:\*\* /);
      const scalarEvents = events.slice(1).filter((e) => !Object.keys(e.texts).length);
      expect(scalarEvents.map((e) => e.step)).to.deep.equal(logged.map((m) => m.step));
      logged.forEach((metrics, i) => {
        const scalars = scalarEvents[i].scalars;
        const expected = Object.fromEntries(Object.entries(metrics).filter(([k, v]) => k !== 'step' && Number.isFinite(v)).map(([k, v]) => [k, Math.fround(v)]));
        expect(scalars, `step ${metrics.step}`).to.deep.equal(expected);
      });
      // The directory is a file: the run finishes, with one warning.
      process.env.TENSORBOARD_DIR = path.join(run, 'config.yaml');
      const { warnings, restore } = captureConsole();
      try {
        const other = await createHost(writeCountdownConfig(tempDir(), { trainer: { logger: 'tensorboard', total_training_steps: 2, test_freq: -1, val_before_train: false } }), { quiet: true });
        await other.container.get<Trainer>(TOKENS.Trainer).fit();
        other.container.get<Trainer>(TOKENS.Trainer).dispose();
      } finally {
        restore();
      }
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.contain('trainer.logger tensorboard: cannot write').and.contain('the run goes on without it');
    } finally {
      if (previous === undefined) delete process.env.TENSORBOARD_DIR;
      else process.env.TENSORBOARD_DIR = previous;
    }
  });

  it('a tracker this host does not write is refused naming it', async () => {
    await expectInputErrorAsync(createHost(writeCountdownConfig(tempDir()), { overrides: ['trainer.logger=[console,swanlab]'], skipEngine: true }), "trainer.logger: 'swanlab' is not a tracker this host writes", "verl's swanlab backend is not built here yet");
  });
});

/** `server` listening on a free loopback port: its URL, and how to close it. */
async function listening(server: http.Server): Promise<{ url: string; close: () => Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** Collects what console.warn (warnings) and console.error (notes) print, until restore(). */
function captureConsole(): { warnings: string[]; notes: string[]; restore: () => void } {
  const warnings: string[] = [];
  const notes: string[] = [];
  const saved = [console.warn, console.error];
  console.warn = (line: unknown) => warnings.push(String(line));
  console.error = (line: unknown) => notes.push(String(line));
  return { warnings, notes, restore: () => ([console.warn, console.error] = saved) };
}

/** Restores the environment variables `keys` after each test of the suite that calls it. */
function restoreEnvAfterEach(keys: string[]): void {
  const saved = { ...process.env };
  afterEach(() => {
    for (const key of keys) if (saved[key] === undefined) delete process.env[key];
    else process.env[key] = saved[key];
  });
}

/** A short countdown run logging to `logger` (with a secret in its config that no tracker may send). */
async function trainLoggingTo(logger: string, dir: string, steps: number) {
  const host = await createHost(writeCountdownConfig(dir, { trainer: { logger: ['console', logger], project_name: 'countdown', experiment_name: 'grpo-seed3', total_training_steps: steps, test_freq: steps, log_val_generations: 2 }, actor_rollout_ref: { rollout: { server: { api_key: 'sk-secret' } } } }), { quiet: true });
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  await trainer.fit();
  trainer.dispose();
}

/**
 * A fake MLflow tracking server: the five REST routes a run uses, each request checked against
 * MLflow's rules (mlflow/utils/validation.py: key characters and length, batch limits, no duplicate
 * param keys, numeric values, non-negative millisecond timestamps); `fail` makes every request answer 500.
 */
async function fakeMlflow(options: { fail?: boolean; outage?: { after: number; requests: number }; metricsOutage?: number; delayMs?: number } = {}) {
  const state = { experiments: new Map<string, string>(), runs: new Map<string, { name: string; status: string; params: Map<string, string>; metrics: { key: string; value: number; step: number; timestamp: number }[] }>(), artifacts: new Map<string, string>(), problems: [] as string[], requests: 0, metricBatches: 0 as number | undefined };
  const keyOk = (k: unknown) => typeof k === 'string' && /^[/\w.\- :]*$/.test(k) && k.length <= 250;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      state.requests += 1;
      const answer = (status: number, value: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      // A slow server answers each request after delayMs.
      const send = (status: number, value: unknown) => (options.delayMs ? void setTimeout(() => answer(status, value), options.delayMs) : answer(status, value));
      if (req.url?.includes('runs/log-batch') && body.includes('"metrics"')) state.metricBatches = (state.metricBatches ?? 0) + 1;
      if (options.fail) return send(500, { error_code: 'INTERNAL_ERROR' });
      // An outage: after `after` requests, the next `requests` answer 503 (a restart behind a proxy).
      if (options.outage && state.requests > options.outage.after && state.requests <= options.outage.after + options.outage.requests) return send(503, { error_code: 'TEMPORARILY_UNAVAILABLE' });
      // A longer one for the metrics alone: the first `metricsOutage` batches of metrics answer 502.
      if (options.metricsOutage && state.metricBatches! <= options.metricsOutage && body.includes('"metrics"')) return send(502, { error_code: 'BAD_GATEWAY' });
      const url = new URL(req.url!, 'http://x');
      // The routes' JSON bodies, read field by field below.
      const json = (body ? JSON.parse(body) : {}) as { name: string; experiment_id: string; run_name: string; run_id: string; status: string; metrics?: { key: string; value: number; step: number; timestamp: number }[]; params?: { key: string; value: string }[] };
      const route = `${req.method} ${url.pathname}`;
      // The proxied artifact store (mlflow server --serve-artifacts): a run's files under its artifact URI's path.
      if (req.method === 'PUT' && url.pathname.startsWith('/api/2.0/mlflow-artifacts/artifacts/')) {
        state.artifacts.set(url.pathname.slice('/api/2.0/mlflow-artifacts/artifacts/'.length), body);
        return send(200, {});
      }
      if (route === 'GET /api/2.0/mlflow/experiments/get-by-name') {
        const id = state.experiments.get(url.searchParams.get('experiment_name')!);
        return id ? send(200, { experiment: { experiment_id: id } }) : send(404, { error_code: 'RESOURCE_DOES_NOT_EXIST' });
      }
      if (route === 'POST /api/2.0/mlflow/experiments/create') {
        const id = String(state.experiments.size + 1);
        state.experiments.set(json.name, id);
        return send(200, { experiment_id: id });
      }
      if (route === 'POST /api/2.0/mlflow/runs/create') {
        if (!state.experiments.has([...state.experiments].find(([, id]) => id === json.experiment_id)?.[0] ?? '')) state.problems.push('runs/create: unknown experiment_id');
        const id = `run${state.runs.size + 1}`;
        state.runs.set(id, { name: json.run_name, status: 'RUNNING', params: new Map(), metrics: [] });
        return send(200, { run: { info: { run_id: id, artifact_uri: `mlflow-artifacts:/${json.experiment_id}/${id}/artifacts` } } });
      }
      const run = state.runs.get(json.run_id);
      if (!run) return send(404, { error_code: 'RESOURCE_DOES_NOT_EXIST' });
      if (route === 'POST /api/2.0/mlflow/runs/log-batch') {
        const metrics = json.metrics ?? [];
        const params = json.params ?? [];
        if (metrics.length > 1000 || params.length > 100 || metrics.length + params.length > 1000) state.problems.push('log-batch over its limits');
        for (const p of params) {
          if (!keyOk(p.key) || typeof p.value !== 'string' || p.value.length > 6000) state.problems.push(`param ${p.key}`);
          if (run.params.has(p.key)) state.problems.push(`param ${p.key} logged twice`);
          run.params.set(p.key, p.value);
        }
        for (const m of metrics) {
          if (!keyOk(m.key) || typeof m.value !== 'number' || !Number.isInteger(m.timestamp) || m.timestamp < 0 || !Number.isInteger(m.step)) state.problems.push(`metric ${JSON.stringify(m)}`);
          run.metrics.push(m);
        }
        return send(200, {});
      }
      if (route === 'POST /api/2.0/mlflow/runs/update') {
        run.status = json.status;
        return send(200, { run_info: { run_id: json.run_id, status: json.status } });
      }
      send(404, { error_code: 'ENDPOINT_NOT_FOUND' });
    });
  });
  return { state, ...(await listening(server)) };
}

describe('trainer.logger: MLflow over its REST API', function () {
  this.timeout(120_000);
  restoreEnvAfterEach(['MLFLOW_TRACKING_URI', 'MLFLOW_RUN_ID']);
  const train = (dir: string, steps = 3) => trainLoggingTo('mlflow', dir, steps);
  // Retries 0.1, 0.2, 0.4 and 0.8 s apart here (0.5 to 4 s by default), to keep the suite short.
  before(() => (process.env.FLOWRL_TRACKER_RETRY_MS = '100'));
  after(() => delete process.env.FLOWRL_TRACKER_RETRY_MS);

  it("keys and params as verl sends them: '@' -> '_at_', refused characters -> '_', the config flattened with '/' and lists by index", () => {
    expect(mlflowKey('val/pass@8')).to.equal('val/pass_at_8');
    expect(mlflowKey('a//b|c')).to.equal('a/b_c');
    expect(mlflowParams({ a: { b: 1, c: ['x', { d: null }] }, e: true })).to.deep.equal([['a/b', '1'], ['a/c/list_len', '2'], ['a/c/0', 'x'], ['a/c/1/d', 'null'], ['e', 'true']]);
  });

  it('a run: the experiment made, a run named after the experiment, the config as params, every step of metrics.jsonl as metrics, the run finished; every request valid', async () => {
    const mlflow = await fakeMlflow();
    process.env.MLFLOW_TRACKING_URI = mlflow.url;
    try {
      const dir = tempDir();
      await train(dir);
      expect(mlflow.state.problems).to.deep.equal([]);
      expect([...mlflow.state.experiments.keys()]).to.deep.equal(['countdown']);
      const [run] = [...mlflow.state.runs.values()];
      expect(run).to.include({ name: 'grpo-seed3', status: 'FINISHED' });
      expect(run.params.get('algorithm/name')).to.equal('grpo');
      expect(run.params.get('trainer/logger/list_len')).to.equal('2');
      expect(run.params.get('actor_rollout_ref/rollout/server/api_key')).to.equal('(set)');
      expect([...run.params.values()].some((v) => v.includes('sk-secret'))).to.equal(false);
      const logged = readRunMetrics(path.join(dir, 'run'));
      for (const metrics of logged) {
        const sent = Object.fromEntries(run.metrics.filter((m) => m.step === metrics.step).map((m) => [m.key, m.value]));
        const expected = Object.fromEntries(Object.entries(metrics).filter(([k, v]) => k !== 'step' && Number.isFinite(v)).map(([k, v]) => [mlflowKey(k), v]));
        expect(sent, `step ${metrics.step}`).to.deep.equal(expected);
      }
      expect(run.metrics.some((m) => m.key === 'val/pass_at_1')).to.equal(true);
      // verl's generations artifact: val_step<step>.json at the run's artifact root, the logged samples as {input, output, score}.
      const generations = fs.readFileSync(path.join(dir, 'run', 'val_generations.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number; prompt: string; response: string; score: number });
      expect([...mlflow.state.artifacts.keys()]).to.deep.equal(['1/run1/artifacts/val_step0.json', '1/run1/artifacts/val_step3.json']);
      for (const step of [0, 3]) {
        const logged = generations.filter((g) => g.step === step).map((g) => ({ input: g.prompt, output: g.response, score: g.score }));
        expect(logged).to.have.length(2);
        expect(JSON.parse(mlflow.state.artifacts.get(`1/run1/artifacts/val_step${step}.json`)!)).to.deep.equal(logged);
      }
    } finally {
      await mlflow.close();
    }
  });

  it('an outage of a few requests mid-run loses nothing: each is retried with growing waits; the run ends FINISHED with every step and param', async () => {
    // Requests 4-7 answer 503: the params' first batch, then a step's metrics, wait it out.
    const mlflow = await fakeMlflow({ outage: { after: 3, requests: 4 } });
    const { warnings, restore } = captureConsole();
    try {
      process.env.MLFLOW_TRACKING_URI = mlflow.url;
      const dir = tempDir();
      await train(dir, 3);
      const [run] = [...mlflow.state.runs.values()];
      expect(run.status).to.equal('FINISHED');
      // Every step metrics.jsonl has (the validation before training is step 0).
      expect(new Set(run.metrics.map((m) => m.step))).to.deep.equal(new Set(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)));
      expect(run.params.size).to.be.greaterThan(100);
      expect(mlflow.state.problems).to.deep.equal([]);
    } finally {
      restore();
      await mlflow.close();
    }
    expect(warnings).to.deep.equal([]);
  });

  it('a longer outage (a batch fails all its tries) loses no step either: one warning with the cause, the steps kept and sent with the next, a note when the server is back', async () => {
    // The first 7 metric batches answer 502: the first steps' five tries fail while the run goes on; the next request's third try succeeds.
    const mlflow = await fakeMlflow({ metricsOutage: 7 });
    const { warnings, notes, restore } = captureConsole();
    try {
      process.env.MLFLOW_TRACKING_URI = mlflow.url;
      const dir = tempDir();
      await train(dir, 4);
      const [run] = [...mlflow.state.runs.values()];
      expect(run.status).to.equal('FINISHED');
      expect(new Set(run.metrics.map((m) => m.step))).to.deep.equal(new Set(readRunMetrics(path.join(dir, 'run')).map((m) => m.step)));
      expect(mlflow.state.problems).to.deep.equal([]);
    } finally {
      restore();
      await mlflow.close();
    }
    expect(warnings).to.have.length(1);
    expect(warnings[0]).to.match(/trainer\.logger mlflow: the server does not answer \(POST runs\/log-batch: HTTP 502 .*\); the steps from \d+ are kept and sent when it does/);
    expect(notes.filter((l) => l.includes('trainer.logger mlflow: the server answers again'))).to.have.length(1);
  });

  it('a server slower than the steps gets every step and the run ends FINISHED; steps that wait behind a request go together', async () => {
    const mlflow = await fakeMlflow({ delayMs: 600 });
    try {
      process.env.MLFLOW_TRACKING_URI = mlflow.url;
      const dir = tempDir();
      await train(dir, 6);
      const [run] = [...mlflow.state.runs.values()];
      const steps = readRunMetrics(path.join(dir, 'run')).map((m) => m.step);
      expect(run.status).to.equal('FINISHED');
      expect(new Set(run.metrics.map((m) => m.step))).to.deep.equal(new Set(steps));
      expect(mlflow.state.problems).to.deep.equal([]);
    } finally {
      await mlflow.close();
    }
    // Steps logged while a request is under way go out together (the client itself, so the count
    // does not depend on how fast this machine trains): six steps behind a slow run creation, one batch.
    const slow = await fakeMlflow({ delayMs: 300 });
    try {
      process.env.MLFLOW_TRACKING_URI = slow.url;
      const client = new MlflowClient({ trainer: { project_name: 'p', experiment_name: 'e' } } as unknown as Config, (line) => expect.fail(line));
      client.begin();
      for (let step = 1; step <= 6; step++) client.log(step, { 'train/score': step });
      client.close();
      await client.flush();
      expect(slow.state.metricBatches).to.equal(1);
      expect([...slow.state.runs.values()][0].metrics.map((m) => m.step)).to.deep.equal([1, 2, 3, 4, 5, 6]);
    } finally {
      await slow.close();
    }
  });

  it('a command that trains nothing (flowrl eval) with the MLflow logger set ends: the sink\'s thread holds no process up', async () => {
    const mlflow = await fakeMlflow();
    try {
      const config = writeCountdownConfig(tempDir(), { data: { val_max_samples: 4 }, trainer: { logger: ['console', 'mlflow'] } });
      const run = await runBuiltFlowrl(['eval', config], 60_000, { MLFLOW_TRACKING_URI: mlflow.url });
      expect(run.status, run.stderr).to.equal(0);
    } finally {
      await mlflow.close();
    }
  });

  it('a run that fails ends its MLflow run FAILED, with the steps it finished', async () => {
    const mlflow = await fakeMlflow();
    try {
      process.env.MLFLOW_TRACKING_URI = mlflow.url;
      const dir = tempDir();
      const host = await createHost(writeCountdownConfig(dir, { trainer: { logger: ['console', 'mlflow'], total_training_steps: 3, test_freq: -1, val_before_train: false } }), { quiet: true });
      const trainer = host.container.get<Trainer>(TOKENS.Trainer) as Trainer & { trainStep(): Promise<Record<string, number>> };
      const step = trainer.trainStep.bind(trainer);
      let steps = 0;
      trainer.trainStep = () => (++steps === 2 ? Promise.reject(new Error('a step that fails')) : step());
      let error: unknown;
      await trainer.fit().catch((e: unknown) => (error = e));
      trainer.dispose();
      expect((error as Error).message).to.equal('a step that fails');
      const [run] = [...mlflow.state.runs.values()];
      expect(run.status).to.equal('FAILED');
      expect([...new Set(run.metrics.map((m) => m.step))]).to.deep.equal([1]);
    } finally {
      await mlflow.close();
    }
  });

  it('a server that is down or answers 500 costs one warning; the run finishes; a local-store URI is refused naming MLFLOW_TRACKING_URI', async () => {
    const failing = await fakeMlflow({ fail: true });
    const { warnings, restore } = captureConsole();
    try {
      process.env.MLFLOW_TRACKING_URI = failing.url;
      await train(tempDir(), 2);
      expect(failing.state.requests).to.equal(5); // the first request, tried 5 times, then nothing more
      // Nothing listens: a port just freed (port 9 would be refused by fetch itself as unsafe).
      const free = http.createServer();
      await new Promise<void>((resolve) => free.listen(0, '127.0.0.1', resolve));
      const { port } = free.address() as { port: number };
      await new Promise((resolve) => free.close(resolve));
      process.env.MLFLOW_TRACKING_URI = `http://127.0.0.1:${port}`;
      await train(tempDir(), 2);
    } finally {
      restore();
      await failing.close();
    }
    expect(warnings).to.have.length(2);
    for (const w of warnings) expect(w).to.contain('trainer.logger mlflow: starting the run failed').and.contain('the run goes on without MLflow');
    // Why, not just "fetch failed".
    expect(warnings[1]).to.contain('ECONNREFUSED');
    process.env.MLFLOW_TRACKING_URI = 'sqlite:////tmp/mlruns.db';
    await expectInputErrorAsync(createHost(writeCountdownConfig(tempDir(), { trainer: { logger: 'mlflow' } }), { skipEngine: true }), 'set MLFLOW_TRACKING_URI to an MLflow tracking server', "'sqlite:////tmp/mlruns.db'");
  });
});

/** The upsertBucket input fields W&B's own clients send (wandb v0.28.2, core/api/graphql/mutation_run.graphql). */
const UPSERT_BUCKET_INPUT = ['id', 'name', 'groupName', 'modelName', 'entityName', 'description', 'displayName', 'notes', 'config', 'commit', 'host', 'debug', 'jobProgram', 'jobRepo', 'jobType', 'state', 'sweep', 'tags', 'summaryMetrics'];
const WANDB_KEY = 'k'.repeat(40);

/**
 * A fake W&B server: the GraphQL queries a run makes (Viewer, UpsertBucket), each parsed by the
 * graphql package and its input fields checked against what W&B's clients send, and the file
 * stream (wandb v0.28.2 core/internal/filestream/filestreamrequest.go: {files: {name: {offset,
 * content}}}, then {complete, exitcode}), a history chunk's lines stored at its offset (a chunk sent
 * again replaces its lines; one past the end is a gap, a problem); every request must carry the key
 * as Basic api:KEY. `refuse` answers the run's upsert with that status; `outage` answers file-stream
 * requests after the first `after` with 503, `requests` of them; `refuseStream` answers them 404;
 * `streamDelayMs` answers each of them that late (a stalled server).
 */
async function fakeWandb(options: { refuse?: number; outage?: { after: number; requests: number }; refuseStream?: boolean; streamDelayMs?: number } = {}) {
  type WandbRun = { project: string; entity: string; displayName: string; config: Record<string, { value: unknown }>; history: Record<string, number>[]; summary?: Record<string, number>; exitcode?: number };
  const state = { runs: new Map<string, WandbRun>(), problems: [] as string[], requests: 0, streamRequests: 0 };
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => void (async () => {
      state.requests += 1;
      const send = (status: number, value: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      if (req.headers.authorization !== `Basic ${Buffer.from(`api:${WANDB_KEY}`).toString('base64')}`) state.problems.push(`${req.url}: authorization ${req.headers.authorization}`);
      const json = JSON.parse(body || '{}') as { query?: string; variables?: Record<string, string>; files?: Record<string, { offset: number; content: string[] }>; complete?: boolean; exitcode?: number };
      if (req.method === 'POST' && req.url === '/graphql') {
        let operation: OperationDefinitionNode;
        try {
          operation = parse(json.query!).definitions[0] as OperationDefinitionNode;
        } catch (e) {
          state.problems.push(`graphql: ${(e as Error).message}`);
          return send(400, { errors: [{ message: 'syntax' }] });
        }
        if (operation.name?.value === 'Viewer') return send(200, { data: { viewer: { id: 'u1', entity: 'fake-entity', flags: '{}', teams: { edges: [] } } } });
        if (operation.name?.value === 'UpsertBucket') {
          const field = operation.selectionSet.selections[0] as FieldNode;
          const input = field.arguments?.find((a) => a.name.value === 'input')?.value as ObjectValueNode;
          const unknown = input.fields.map((f) => f.name.value).filter((f) => !UPSERT_BUCKET_INPUT.includes(f));
          if (field.name.value !== 'upsertBucket' || unknown.length) state.problems.push(`upsertBucket input: ${unknown}`);
          if (options.refuse) return send(options.refuse, { errors: [{ message: 'permission denied' }] });
          const v = json.variables!;
          const config = JSON.parse(v.config) as Record<string, { value: unknown }>;
          if (!v.name || Object.values(config).some((entry) => !entry || typeof entry !== 'object' || !('value' in entry))) state.problems.push(`upsert: run name ${v.name}, config not in W&B's {desc, value} form`);
          state.runs.set(v.name, { project: v.project, entity: v.entity, displayName: v.displayName, config, history: [] });
          return send(200, { data: { upsertBucket: { bucket: { id: 'b1', name: v.name, displayName: v.displayName, description: null, config: v.config, sweepName: null, project: { id: 'p1', name: v.project, entity: { id: 'e1', name: v.entity } } }, inserted: true } } });
        }
        state.problems.push(`graphql operation ${operation.name?.value}`);
        return send(400, { errors: [{ message: 'unknown operation' }] });
      }
      const stream = /^\/files\/([^/]+)\/([^/]+)\/([^/]+)\/file_stream$/.exec(req.url ?? '');
      const run = stream && state.runs.get(stream[3]);
      if (req.method !== 'POST' || !run || run.entity !== stream[1] || run.project !== stream[2]) {
        state.problems.push(`unexpected ${req.method} ${req.url}`);
        return send(404, {});
      }
      state.streamRequests += 1;
      if (options.streamDelayMs) await new Promise((resolve) => setTimeout(resolve, options.streamDelayMs));
      if (options.refuseStream) return send(404, { error: 'run not found' });
      if (options.outage && state.streamRequests > options.outage.after && state.streamRequests <= options.outage.after + options.outage.requests) return send(503, { error: 'unavailable' });
      if (json.complete) run.exitcode = json.exitcode;
      for (const [name, chunk] of Object.entries(json.files ?? {})) {
        if (name === 'wandb-history.jsonl') {
          if (chunk.offset > run.history.length) state.problems.push(`history offset ${chunk.offset} after ${run.history.length} lines`);
          run.history.splice(chunk.offset, chunk.content.length, ...chunk.content.map((line) => JSON.parse(line) as Record<string, number>));
        } else if (name === 'wandb-summary.json' && chunk.offset === 0 && chunk.content.length === 1) run.summary = JSON.parse(chunk.content[0]) as Record<string, number>;
        else state.problems.push(`file ${name} at ${chunk.offset}`);
      }
      send(200, {});
    })());
  });
  return { state, ...(await listening(server)) };
}

describe('trainer.logger: W&B over its GraphQL API and file stream', function () {
  this.timeout(120_000);
  restoreEnvAfterEach(['WANDB_API_KEY', 'WANDB_BASE_URL', 'WANDB_MODE', 'WANDB_ENTITY', 'HOME']);
  before(() => (process.env.FLOWRL_TRACKER_RETRY_MS = '100'));
  after(() => delete process.env.FLOWRL_TRACKER_RETRY_MS);
  const train = (dir: string, steps = 3) => trainLoggingTo('wandb', dir, steps);

  it('a run: named after the experiment in the project, the config in W&B\'s form with secrets left out, every step of metrics.jsonl in the history at its step, the run complete; every request valid', async () => {
    const wandb = await fakeWandb();
    Object.assign(process.env, { WANDB_API_KEY: WANDB_KEY, WANDB_BASE_URL: wandb.url });
    try {
      const dir = tempDir();
      await train(dir);
      expect(wandb.state.problems).to.deep.equal([]);
      const [run] = [...wandb.state.runs.values()];
      expect(run).to.include({ project: 'countdown', entity: 'fake-entity', displayName: 'grpo-seed3', exitcode: 0 });
      expect((run.config.algorithm.value as { name: string }).name).to.equal('grpo');
      expect(JSON.stringify(run.config)).to.contain('"api_key":"(set)"').and.not.contain('sk-secret');
      const logged = readRunMetrics(path.join(dir, 'run'));
      expect(run.history.map((h) => h._step)).to.deep.equal(logged.map((m) => m.step));
      for (const [i, metrics] of logged.entries()) {
        const { _step, _runtime, _timestamp, ...sent } = run.history[i];
        expect(_runtime).to.be.a('number');
        expect(_timestamp).to.be.a('number');
        expect(sent, `step ${_step}`).to.deep.equal(Object.fromEntries(Object.entries(metrics).filter(([k, v]) => k !== 'step' && Number.isFinite(v))));
      }
      expect(run.history.some((h) => 'val/pass@1' in h)).to.equal(true);
      expect(run.summary?._step).to.equal(logged[logged.length - 1].step);
    } finally {
      await wandb.close();
    }
  });

  it('an outage mid-run loses no step: one warning with the cause, the steps kept and sent once the server answers, at their offsets; the run complete', async () => {
    // The first 7 file-stream requests answer 503: the first rows' five tries (0.1-0.8 s apart) all
    // fail while the run goes on, the next rows' third try succeeds with every row kept.
    const wandb = await fakeWandb({ outage: { after: 0, requests: 7 } });
    Object.assign(process.env, { WANDB_API_KEY: WANDB_KEY, WANDB_BASE_URL: wandb.url });
    const { warnings, notes, restore } = captureConsole();
    try {
      const dir = tempDir();
      await train(dir, 6);
      expect(wandb.state.problems).to.deep.equal([]);
      const [run] = [...wandb.state.runs.values()];
      expect(run.history.map((h) => h._step)).to.deep.equal(readRunMetrics(path.join(dir, 'run')).map((m) => m.step));
      expect(run.exitcode, JSON.stringify([warnings, notes])).to.equal(0);
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.match(/trainer\.logger wandb: the server does not answer \(POST \/files\/fake-entity\/countdown\/\w+\/file_stream: HTTP 503 .*\); the steps from \d+ are kept and sent when it does/);
      expect(notes.filter((l) => l.includes('the server answers again'))).to.have.length(1);
    } finally {
      restore();
      await wandb.close();
    }
  });

  it('the client alone: a stalled server gets every step, those that waited going together; a failed run ends with exit code 1; a refused file stream costs one warning and stops; .netrc keys and app URLs as W&B reads them', async () => {
    Object.assign(process.env, { WANDB_API_KEY: WANDB_KEY, WANDB_ENTITY: 'team' });
    const config = { trainer: { project_name: 'p', experiment_name: 'e' } } as unknown as Config;
    for (const refuseStream of [false, true]) {
      // A stalled server too: each file-stream answer takes 300 ms while a step comes every 50 ms.
      const wandb = await fakeWandb({ refuseStream, streamDelayMs: refuseStream ? 0 : 300 });
      process.env.WANDB_BASE_URL = wandb.url;
      const warnings: string[] = [];
      const client = new WandbClient(config, (line) => warnings.push(line), () => {});
      client.begin();
      for (const step of [1, 2, 3, 4, 5, 6]) {
        client.log(step, { 'reward/mean': step / 10, 'bad/nan': NaN }, Date.now());
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      client.close('FAILED');
      await client.flush();
      await wandb.close();
      const [run] = [...wandb.state.runs.values()];
      expect(run.entity).to.equal('team');
      if (refuseStream) {
        expect(warnings).to.have.length(1);
        expect(warnings[0]).to.contain("the server refused step 1's metrics (POST /files/team/p/").and.contain('HTTP 404').and.contain('the run goes on without W&B');
        expect(wandb.state.streamRequests, 'a refusal is not retried').to.equal(1);
      } else {
        expect(warnings).to.deep.equal([]);
        expect(run.history.map((h) => [h._step, h['reward/mean'], 'bad/nan' in h])).to.deep.equal([1, 2, 3, 4, 5, 6].map((step) => [step, step / 10, false]));
        expect(run.exitcode).to.equal(1);
        // Steps that waited behind the slow answers went together: fewer requests than steps (and the end).
        expect(wandb.state.streamRequests).to.be.lessThan(6);
      }
    }
    const netrc = 'machine api.wandb.ai\n  login user\n  password k1\nmachine wandb.example.com login user password k2\n';
    expect([netrcPassword(netrc, 'api.wandb.ai'), netrcPassword(netrc, 'wandb.example.com'), netrcPassword(netrc, 'other')]).to.deep.equal(['k1', 'k2', undefined]);
    expect(['https://api.wandb.ai', 'https://api.example.com', 'http://localhost:8080'].map(wandbAppUrl)).to.deep.equal(['https://wandb.ai', 'https://app.example.com', 'http://localhost:8080']);
  });

  it('a server that refuses the run or is down costs one warning and the run finishes; a missing key, a missing mode and offline mode are refused before training', async () => {
    const refusing = await fakeWandb({ refuse: 403 });
    const { warnings, restore } = captureConsole();
    try {
      Object.assign(process.env, { WANDB_API_KEY: WANDB_KEY, WANDB_BASE_URL: refusing.url });
      await train(tempDir(), 2);
      const closed = await listening(http.createServer());
      await closed.close();
      process.env.WANDB_BASE_URL = closed.url; // nothing listens there now
      await train(tempDir(), 2);
    } finally {
      restore();
      await refusing.close();
    }
    expect(warnings).to.have.length(2);
    expect(warnings[0]).to.contain('trainer.logger wandb: starting the run failed (POST /graphql: HTTP 403').and.contain('; the run goes on without W&B');
    expect(warnings[1], warnings[1]).to.contain('trainer.logger wandb: starting the run failed (POST /graphql: fetch failed (').and.contain('ECONNREFUSED').and.contain('; the run goes on without W&B');
    delete process.env.WANDB_API_KEY;
    process.env.HOME = tempDir(); // no ~/.netrc
    const config = writeCountdownConfig(tempDir(), { trainer: { logger: 'wandb' } });
    await expectInputErrorAsync(createHost(config, { skipEngine: true }), 'trainer.logger wandb: set WANDB_API_KEY', new URL(process.env.WANDB_BASE_URL).host);
    process.env.WANDB_MODE = 'offline';
    await expectInputErrorAsync(createHost(config, { skipEngine: true }), 'WANDB_MODE=offline is not served by', 'WANDB_MODE=disabled');
    process.env.WANDB_MODE = 'disabled';
    await createHost(config, { skipEngine: true });
  });
});
