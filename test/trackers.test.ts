// trainer.logger (verl's trackers): TensorBoard event files checked against TensorBoard's own proto
// definitions (scripts/tensorboard_oracle.py read the fixture with them in Python's protobuf once),
// and a run's event files against its metrics.jsonl.
import { expect } from 'chai';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createHost, TOKENS, type Trainer } from '../core-adapters/index.js';
import { encodeEvent, readEventFile, tfRecord } from '../core-adapters/trainer/tensorboard.js';
import { mlflowKey, mlflowParams } from '../core-adapters/trainer/mlflow.js';
import { expectInputErrorAsync, fixture, readJson, readRunMetrics, tempDir, writeCountdownConfig } from './helpers.js';

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
      const warnings: string[] = [];
      const warn = console.warn;
      console.warn = (line: string) => warnings.push(line);
      try {
        const other = await createHost(writeCountdownConfig(tempDir(), { trainer: { logger: 'tensorboard', total_training_steps: 2, test_freq: -1, val_before_train: false } }), { quiet: true });
        await other.container.get<Trainer>(TOKENS.Trainer).fit();
        other.container.get<Trainer>(TOKENS.Trainer).dispose();
      } finally {
        console.warn = warn;
      }
      expect(warnings).to.have.length(1);
      expect(warnings[0]).to.contain('trainer.logger tensorboard: cannot write').and.contain('the run goes on without it');
    } finally {
      if (previous === undefined) delete process.env.TENSORBOARD_DIR;
      else process.env.TENSORBOARD_DIR = previous;
    }
  });

  it('a tracker this host does not write is refused naming it', async () => {
    await expectInputErrorAsync(createHost(writeCountdownConfig(tempDir()), { overrides: ['trainer.logger=[console,wandb]'], skipEngine: true }), "trainer.logger: 'wandb' is not a tracker this host writes", "verl's wandb backend is not built here yet");
  });
});

/**
 * A fake MLflow tracking server: the five REST routes a run uses, each request checked against
 * MLflow's rules (mlflow/utils/validation.py: key characters and length, batch limits, no duplicate
 * param keys, numeric values, non-negative millisecond timestamps); `fail` makes every request answer 500.
 */
async function fakeMlflow(options: { fail?: boolean } = {}) {
  const state = { experiments: new Map<string, string>(), runs: new Map<string, { name: string; status: string; params: Map<string, string>; metrics: { key: string; value: number; step: number; timestamp: number }[] }>(), problems: [] as string[], requests: 0 };
  const keyOk = (k: unknown) => typeof k === 'string' && /^[/\w.\- :]*$/.test(k) && k.length <= 250;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      state.requests += 1;
      const send = (status: number, value: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
      if (options.fail) return send(500, { error_code: 'INTERNAL_ERROR' });
      const url = new URL(req.url!, 'http://x');
      // The routes' JSON bodies, read field by field below.
      const json = (body ? JSON.parse(body) : {}) as { name: string; experiment_id: string; run_name: string; run_id: string; status: string; metrics?: { key: string; value: number; step: number; timestamp: number }[]; params?: { key: string; value: string }[] };
      const route = `${req.method} ${url.pathname}`;
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
        return send(200, { run: { info: { run_id: id } } });
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
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { state, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe('trainer.logger: MLflow over its REST API', function () {
  this.timeout(120_000);
  const saved = { ...process.env };
  afterEach(() => {
    for (const key of ['MLFLOW_TRACKING_URI', 'MLFLOW_RUN_ID']) if (saved[key] === undefined) delete process.env[key];
    else process.env[key] = saved[key];
  });

  async function train(dir: string, steps = 3) {
    const host = await createHost(writeCountdownConfig(dir, { trainer: { logger: ['console', 'mlflow'], project_name: 'countdown', experiment_name: 'grpo-seed3', total_training_steps: steps, test_freq: steps }, actor_rollout_ref: { rollout: { server: { api_key: 'sk-secret' } } } }), { quiet: true });
    const trainer = host.container.get<Trainer>(TOKENS.Trainer);
    await trainer.fit();
    trainer.dispose();
  }

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
    } finally {
      await mlflow.close();
    }
  });

  it('a server that is down or answers 500 costs one warning; the run finishes; a local-store URI is refused naming MLFLOW_TRACKING_URI', async () => {
    const failing = await fakeMlflow({ fail: true });
    const warnings: string[] = [];
    const warn = console.warn;
    console.warn = (line: string) => warnings.push(line);
    try {
      process.env.MLFLOW_TRACKING_URI = failing.url;
      await train(tempDir(), 2);
      expect(failing.state.requests).to.equal(3); // the first request, tried 3 times, then nothing more
      process.env.MLFLOW_TRACKING_URI = 'http://127.0.0.1:9'; // nothing listens
      await train(tempDir(), 2);
    } finally {
      console.warn = warn;
      await failing.close();
    }
    expect(warnings).to.have.length(2);
    for (const w of warnings) expect(w).to.contain('trainer.logger mlflow: starting the run failed').and.contain('the run goes on without MLflow');
    process.env.MLFLOW_TRACKING_URI = 'sqlite:////tmp/mlruns.db';
    await expectInputErrorAsync(createHost(writeCountdownConfig(tempDir(), { trainer: { logger: 'mlflow' } }), { skipEngine: true }), 'set MLFLOW_TRACKING_URI to an MLflow tracking server', "'sqlite:////tmp/mlruns.db'");
  });
});
