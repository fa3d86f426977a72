// Training with rollouts on inference servers (rollout.name sglang | vllm) against `flowrl serve`:
// learning, logprob parity, weight versions, a killed server, all servers gone and back, a skewed
// server, a server that lost its weights, and LoRA adapters per version.
import { type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { FlowrlServer } from '../core-adapters/rollout/serve.js';
import { installFaults } from '../core-adapters/rollout/serve-faults.js';
import { main } from '../core-adapters/cli/commands.js';
import { fixture, readRunMetrics, ROOT, spawnBuiltFlowrl, tempDir, writeCountdownConfig } from './helpers.js';

const BASE_MODEL = path.join(fixture('countdown'), 'base-model');
const FLOWRL = { plugins: [path.join(ROOT, 'plugin.json')], algorithm: { name: 'flowrl' } };

type Metrics = Record<string, number>;

function startServer(): FlowrlServer {
  const server = new FlowrlServer({ modelDir: BASE_MODEL, host: '127.0.0.1', port: 0, maxBatch: 64, maxQueue: 1024, maxBodyBytes: 1 << 24, logprobsMode: 'processed_logprobs', enableAdmin: true, weightsRoots: [os.tmpdir()] });
  installFaults(server);
  return server;
}

/** Runs `test` with two in-process servers (faults enabled), closing them whatever happens. */
async function withTwoServers(test: (started: { servers: FlowrlServer[]; urls: string[] }) => Promise<void>): Promise<void> {
  const servers = [startServer(), startServer()];
  try {
    await test({ servers, urls: await Promise.all(servers.map((s) => s.listen())) });
  } finally {
    await Promise.all(servers.map((s) => s.close()));
  }
}

/** A `flowrl serve` process (faults enabled) on `port` (0: a free one); resolves once it listens. */
function spawnServe(port = 0): Promise<{ url: string; child: ChildProcess }> {
  return new Promise((resolve, reject) => {
    const child = spawnBuiltFlowrl(['serve', '--model', BASE_MODEL, '--port', String(port), '--test-faults', '--enable-admin', '--weights-root', os.tmpdir()]);
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const url = /listening on (http:\/\/\S+)/.exec(out)?.[1];
      if (url) resolve({ url, child });
    });
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code) => reject(new Error(`flowrl serve exited with ${code}: ${err.slice(-300)}`)));
  });
}

async function weightVersion(url: string): Promise<string> {
  return ((await (await fetch(`${url}/model_info`)).json()) as { weight_version: string }).weight_version;
}

function serverConfig(dir: string, urls: string[], extra: Record<string, unknown> = {}, dialect = 'sglang'): string {
  const { actor_rollout_ref: aref = {}, ...rest } = extra as { actor_rollout_ref?: Record<string, unknown> };
  return writeCountdownConfig(dir, { ...rest, actor_rollout_ref: { ...aref, rollout: { name: dialect, server: { urls, timeout_s: 30 } } } });
}

/** Runs `flowrl train FILE` in-process, calling `onStep` (awaited) as each step's metrics line lands. */
async function trainWatching(file: string, runDir: string, onStep: (step: number) => Promise<void> | void = () => {}, overrides: string[] = []): Promise<{ code: number; stderr: string }> {
  const seen = new Set<number>();
  let busy = false;
  const timer = setInterval(() => {
    if (busy || !fs.existsSync(path.join(runDir, 'metrics.jsonl'))) return;
    busy = true;
    const steps = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { step: number }).step);
    void (async () => {
      for (const step of steps) if (!seen.has(step)) {
        seen.add(step);
        await onStep(step);
      }
    })().finally(() => (busy = false));
  }, 20);
  const errors: string[] = [];
  const original = { error: console.error, log: console.log };
  console.error = (...args: unknown[]) => errors.push(args.map(String).join(' '));
  // The run's summary table is not what these tests read.
  console.log = () => {};
  try {
    const code = await main(['train', file, ...overrides]);
    return { code, stderr: errors.join('\n') };
  } finally {
    Object.assign(console, original);
    clearInterval(timer);
  }
}

const stepMetrics = (runDir: string) => readRunMetrics(runDir).filter((m) => m.step > 0 && m['rollout/servers_live'] !== undefined);

describe('rollouts on inference servers (flowrl serve)', function () {
  this.timeout(240_000);

  describe('two flowrl serve processes', () => {
    const procs: ChildProcess[] = [];
    let urls: string[] = [];
    before(async () => {
      const started = await Promise.all([spawnServe(), spawnServe()]);
      procs.push(...started.map((p) => p.child));
      urls = started.map((p) => p.url);
    });
    after(() => procs.forEach((p) => p.kill('SIGKILL')));

    /** Trains on the two servers (exit 0 asserted); returns the run directory and the config file. */
    async function trainOnServers(extra: Record<string, unknown>, overrides: string[], dialect = 'sglang'): Promise<{ runDir: string; file: string }> {
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const file = serverConfig(dir, urls, extra, dialect);
      const { code, stderr } = await trainWatching(file, runDir, () => {}, overrides);
      expect(code, stderr).to.equal(0);
      return { runDir, file };
    }

    /** Validation accuracy rose by more than 0.03 from step 0 to step 30. */
    function expectLearned(runDir: string): void {
      const metrics = readRunMetrics(runDir);
      const [before, after] = [0, 30].map((step) => metrics.find((m) => m.step === step)!['val/accuracy']);
      expect(after, `${before} -> ${after}`).to.be.greaterThan(before + 0.03);
    }

    // FlowRL only: GRPO's on-policy rounds on these servers are the local run's, step for step (the
    // test below), and GRPO learns on them one step off policy (further down); the server path does
    // not depend on the objective.
    it('flowrl with rollout.name sglang learns, with engine and trainer log-probs equal and every server on the current weights', async () => {
      const { runDir } = await trainOnServers(FLOWRL, ['trainer.total_training_steps=30', 'trainer.test_freq=30']);
      expectLearned(runDir);
      const steps = stepMetrics(runDir);
      expect(steps).to.have.length(30);
      for (const m of steps) {
        expect(m['rollout/logprob_diff_mean'], `step ${m.step}`).to.be.below(1e-4);
        expect(m['rollout/logprob_diff_max'], `step ${m.step}`).to.be.below(1e-3);
        expect(m['rollout/tis_clipfrac']).to.equal(0);
        expect(m['rollout/weight_version']).to.equal(m.step - 1);
        expect(m['rollout/servers_live']).to.equal(2);
        expect(m['rollout/stale_dropped'] + m['rollout/retries']).to.equal(0);
      }
      // The last validation ran after the 30th update: both servers report version 30.
      for (const url of urls) expect(await weightVersion(url)).to.match(/\.30$/);
      expect(fs.readdirSync(path.join(runDir, 'rollout_weights')).sort()).to.deep.equal(['v29', 'v30']);
    });
    it('trainer.one_step_off_policy with vLLM full weights: each round is checked against the weights it sampled with, not the newer ones', async () => {
      const { runDir } = await trainOnServers({ trainer: { one_step_off_policy: true } }, ['trainer.total_training_steps=4', 'trainer.test_freq=-1', 'trainer.val_before_train=false', 'actor_rollout_ref.rollout.server.max_staleness=1'], 'vllm');
      const steps = stepMetrics(runDir);
      expect(steps.map((m) => [m['rollout/weight_version'], m['rollout/staleness'], m['rollout/stale_dropped'], m['rollout/ejections']])).to.deep.equal([
        [0, 0, 0, 0],
        [0, 1, 0, 0],
        [1, 1, 0, 0],
        [2, 1, 0, 0],
      ]);
    });

    it('trainer.one_step_off_policy: each batch is sampled with the weights one update behind those that train on it, corrected by TIS; grpo still learns, and a resumed run samples its first step afresh', async () => {
      const { runDir, file } = await trainOnServers({ trainer: { one_step_off_policy: true } }, ['trainer.total_training_steps=30', 'trainer.test_freq=30', 'actor_rollout_ref.rollout.server.max_staleness=1']);
      expectLearned(runDir);
      const steps = stepMetrics(runDir);
      expect(steps).to.have.length(30);
      for (const m of steps) {
        // Step 1's batch was sampled before any update; every later one with the weights of the step before.
        expect(m['rollout/weight_version'], `step ${m.step}`).to.equal(Math.max(0, m.step - 2));
        expect(m['rollout/staleness'], `step ${m.step}`).to.equal(m.step === 1 ? 0 : 1);
        expect(m['rollout/stale_dropped'] + m['rollout/retries']).to.equal(0);
        if (m.step > 1) {
          // The samples are the previous weights': the trainer's log-probs differ, and TIS weighs the difference.
          expect(m['rollout/logprob_diff_mean'], `step ${m.step}`).to.be.above(1e-4);
        } else expect(m['rollout/logprob_diff_mean']).to.be.below(1e-4);
      }
      // Every step but the last launches the next one's sampling.
      expect(steps.map((m) => m['timing_s/launch_next'] !== undefined)).to.deep.equal(steps.map((m) => m.step < 30));
      // A resumed run samples its first step with the restored weights, then goes one step off again.
      const resumed = await trainWatching(file, runDir, () => {}, ['trainer.total_training_steps=32', 'trainer.test_freq=-1', 'actor_rollout_ref.rollout.server.max_staleness=1']);
      expect(resumed.code, resumed.stderr).to.equal(0);
      const after30 = stepMetrics(runDir).filter((m) => m.step > 30);
      expect(after30.map((m) => [m.step, m['rollout/staleness']])).to.deep.equal([
        [31, 0],
        [32, 1],
      ]);
    });
  });

  it('flowrl serve draws exactly the samples local sampling draws: the same run, step for step (3 steps)', async () => {
    await withTwoServers(async ({ urls }) => {
      const runs: Metrics[][] = [];
      for (const name of ['local', 'sglang']) {
        const dir = tempDir();
        const file = writeCountdownConfig(dir, { actor_rollout_ref: { rollout: { name, server: { urls } } } });
        const { code, stderr } = await trainWatching(file, path.join(dir, 'run'), () => {}, ['trainer.total_training_steps=3', 'trainer.test_freq=3']);
        expect(code, stderr).to.equal(0);
        runs.push(readRunMetrics(path.join(dir, 'run')));
      }
      expect(runs[1]).to.have.length(runs[0].length);
      runs[0].forEach((local, i) => {
        const server = runs[1][i];
        // Same token ids sampled: rewards and lengths are equal exactly; losses up to float rounding.
        for (const key of ['critic/accuracy', 'critic/score/mean', 'response_length/mean', 'val/accuracy', 'val/distinct_correct']) expect(server[key], `step ${local.step} ${key}`).to.equal(local[key]);
        if (local['actor/pg_loss'] !== undefined) expect(server['actor/pg_loss']).to.be.closeTo(local['actor/pg_loss'], 1e-5);
      });
    });
  });

  for (const dialect of ['vllm', 'sglang'] as const) {
    it(`the ${dialect} dialect trains with LoRA (an adapter per version), with log-probs equal to the trainer and no sample taken for stale`, async () => {
      await withTwoServers(async ({ servers, urls }) => {
        const dir = tempDir();
        const runDir = path.join(dir, 'run');
        const file = serverConfig(dir, urls, { actor_rollout_ref: { model: { lora_rank: 8, lora_alpha: 32 } } }, dialect);
        const { code, stderr } = await trainWatching(file, runDir, () => {}, ['trainer.total_training_steps=4', 'trainer.val_before_train=false']);
        expect(code, stderr).to.equal(0);
        const steps = stepMetrics(runDir);
        expect(steps).to.have.length(4);
        for (const m of steps) {
          expect(m['rollout/logprob_diff_mean'], `step ${m.step}`).to.be.below(1e-4);
          // SGLang leaves its weight version alone when an adapter loads: the adapter named is the version.
          expect(m['rollout/stale_dropped'] + m['rollout/ejections'], `step ${m.step}`).to.equal(0);
        }
        // Step 4 sampled with version 3: the adapters of versions 2 and 3 stay loaded, older ones were unloaded.
        for (const s of servers) expect(s.engine.adapterNames().map((n) => n.split('.')[1]).sort()).to.deep.equal(['2', '3']);
        // SGLang was told the version with /update_weight_version.
        if (dialect === 'sglang') for (const url of urls) expect(await weightVersion(url)).to.match(/\.3$/);
        expect(fs.readdirSync(path.join(runDir, 'rollout_weights')).sort()).to.deep.equal(['v2', 'v3']);
        expect(fs.existsSync(path.join(runDir, 'rollout_weights', 'v3', 'adapter_config.json'))).to.equal(true);
      });
    });
  }

  it('vllm full weights (reload_weights through /collective_rpc): a server restarted to its launch weights is caught by its log-probs on a probe and given the current weights; no step trains on its samples', async () => {
    await withTwoServers(async ({ urls }) => {
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const { code, stderr } = await trainWatching(serverConfig(dir, urls, {}, 'vllm'), runDir, async (step) => {
        // Just as step 3's samples arrive, after its weight load: vLLM tags no sample with a version.
        if (step === 2) await fetch(`${urls[0]}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ restart_next: 1 }) });
      }, ['trainer.total_training_steps=5', 'trainer.val_before_train=false']);
      expect(code, stderr).to.equal(0);
      const steps = stepMetrics(runDir);
      // Caught after its load (by the check of what it loaded) or after its samples (they are drawn again).
      expect(steps.reduce((n, m) => n + m['rollout/stale_dropped'] + m['rollout/ejections'], 0)).to.be.greaterThan(0);
      // No step trained on the base weights' samples.
      for (const m of steps) expect(m['rollout/logprob_diff_mean'], `step ${m.step}`).to.be.below(1e-4);
    });
  });

  it('a server that lost its weights (restart to base) has its samples dropped as stale, drawn again elsewhere, and rejoins with the current weights', async () => {
    await withTwoServers(async ({ servers, urls }) => {
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const { code, stderr } = await trainWatching(serverConfig(dir, urls), runDir, async (step) => {
        // Restarts just as step 2's samples arrive, after the weight sync: those samples come back at version 0.
        if (step === 1) await fetch(`${urls[0]}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ restart_next: 1 }) });
      }, ['trainer.total_training_steps=4', 'trainer.val_before_train=false']);
      expect(code, stderr).to.equal(0);
      const steps = stepMetrics(runDir);
      expect(steps).to.have.length(4);
      const total = (key: string) => steps.reduce((n, m) => n + m[key], 0);
      expect(total('rollout/stale_dropped')).to.be.greaterThan(0);
      expect(total('rollout/rejoins')).to.be.greaterThan(0);
      expect(steps.at(-1)!['rollout/servers_live']).to.equal(2);
      for (const m of steps) expect(m['rollout/logprob_diff_mean'], `step ${m.step}`).to.be.below(1e-4);
      expect(servers[0].engine.weightVersion).to.equal(servers[1].engine.weightVersion);
    });
  });

  it('a server whose log-probs are skewed shows in the TIS metrics', async () => {
    await withTwoServers(async ({ urls }) => {
      // One server reports log-probs 1 nat low: old - rollout = 1 on its tokens, exp(1) > tis_cap 2.
      await fetch(`${urls[0]}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ logprob_skew: -1 }) });
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const { code, stderr } = await trainWatching(serverConfig(dir, urls), runDir, () => {}, ['trainer.total_training_steps=2', 'trainer.val_before_train=false']);
      expect(code, stderr).to.equal(0);
      for (const m of stepMetrics(runDir)) {
        expect(m['rollout/logprob_diff_max']).to.be.closeTo(1, 1e-3);
        // Groups are spread over both servers, so some but not all tokens come from the skewed one.
        expect(m['rollout/tis_clipfrac']).to.be.greaterThan(0.1).and.below(0.9);
        expect(m['rollout/logprob_diff_mean']).to.be.closeTo(m['rollout/tis_clipfrac'], 1e-3);
      }
    });
  });

  it('when every server is killed the run stops with the reason and a checkpoint (exit 3), and resumes once they are back', async () => {
    const procs: ChildProcess[] = [];
    try {
      const started = await Promise.all([spawnServe(), spawnServe()]);
      procs.push(...started.map((p) => p.child));
      const urls = started.map((p) => p.url);
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const file = serverConfig(dir, urls);
      const first = await trainWatching(file, runDir, (step) => {
        if (step === 2) procs.forEach((p) => p.kill('SIGKILL'));
      }, ['trainer.total_training_steps=5', 'trainer.val_before_train=false']);
      expect(first.code).to.equal(3);
      expect(first.stderr).to.include('every rollout server is down').and.include('stopped after step').and.include('run the same command to resume');
      const finished = Math.max(...readRunMetrics(runDir).map((m) => m.step));
      expect(fs.readdirSync(path.join(runDir, 'checkpoints'))).to.include(`global_step_${finished}`);

      const restarted = await Promise.all(urls.map((u) => spawnServe(Number(new URL(u).port))));
      procs.push(...restarted.map((p) => p.child));
      const second = await trainWatching(file, runDir, () => {}, ['trainer.total_training_steps=5', 'trainer.val_before_train=false']);
      expect(second.code, second.stderr).to.equal(0);
      // Every step exactly once across the two invocations.
      expect(readRunMetrics(runDir).map((m) => m.step)).to.deep.equal([1, 2, 3, 4, 5]);
      // The restarted servers were given the resumed policy's weights before they sampled.
      for (const url of urls) expect(await weightVersion(url)).to.not.equal('0');
    } finally {
      procs.forEach((p) => p.kill('SIGKILL'));
    }
  });

  it('a server killed with SIGKILL mid-run: every step completes on the other one', async () => {
    const procs: ChildProcess[] = [];
    try {
      const started = await Promise.all([spawnServe(), spawnServe()]);
      procs.push(...started.map((p) => p.child));
      const urls = started.map((p) => p.url);
      // Slow answers, so the kill lands while the step's samples are in flight.
      for (const url of urls) await fetch(`${url}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ delay_ms: 150 }) });
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const { code, stderr } = await trainWatching(serverConfig(dir, urls), runDir, async (step) => {
        if (step === 2) setTimeout(() => procs[0].kill('SIGKILL'), 250);
      }, ['trainer.total_training_steps=5', 'trainer.val_before_train=false']);
      expect(code, stderr).to.equal(0);
      const steps = stepMetrics(runDir);
      expect(steps.map((m) => m.step)).to.deep.equal([1, 2, 3, 4, 5]);
      expect(steps.reduce((n, m) => n + m['rollout/ejections'], 0)).to.equal(1);
      expect(steps.at(-1)!['rollout/servers_live']).to.equal(1);
      for (const m of steps) expect(m['critic/accuracy']).to.be.a('number');
    } finally {
      for (const p of procs) p.kill('SIGKILL');
    }
  });

  it("a training step longer than the servers' keep-alive ejects no server: each call that meets a connection the server closed goes once more on a new one", async () => {
    const procs: ChildProcess[] = [];
    try {
      const started = await Promise.all([spawnServe(), spawnServe()]);
      procs.push(...started.map((p) => p.child));
      const urls = started.map((p) => p.url);
      // As uvicorn keeps connections (no Keep-Alive header), but 50 ms instead of 5 s: every step's
      // update holds the trainer's event loop longer, so each admin call after it finds its pooled
      // connection closed by the server, a close the trainer reads only after the call went out.
      for (const url of urls) await fetch(`${url}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ idle_close_ms: 50 }) });
      const dir = tempDir();
      const runDir = path.join(dir, 'run');
      const { code, stderr } = await trainWatching(serverConfig(dir, urls), runDir, undefined, ['trainer.total_training_steps=2', 'trainer.val_before_train=false']);
      expect(code, stderr).to.equal(0);
      const steps = stepMetrics(runDir);
      expect(steps.map((m) => [m.step, m['rollout/ejections'], m['rollout/servers_live']])).to.deep.equal([1, 2].map((step) => [step, 0, 2]));
      expect(stderr).to.not.include('ejected');
    } finally {
      for (const p of procs) p.kill('SIGKILL');
    }
  });

  it('bad server settings exit 2 naming the key', async () => {
    const dir = tempDir();
    for (const [urls, fragment, overrides] of [
      [[], 'actor_rollout_ref.rollout.server.urls is empty', []],
      [['ftp://127.0.0.1:1'], "'ftp://127.0.0.1:1' is not an http(s) URL", []],
      [['http://127.0.0.1:1'], 'set actor_rollout_ref.rollout.server.max_staleness to 1 or more', ['trainer.one_step_off_policy=true']],
      [['http://127.0.0.1:1'], 'trainer.one_step_off_policy needs rollout servers', ['trainer.one_step_off_policy=true', 'actor_rollout_ref.rollout.name=local']],
    ] as const) {
      const errors: string[] = [];
      const original = console.error;
      console.error = (...args: unknown[]) => errors.push(args.map(String).join(' '));
      try {
        expect(await main(['train', serverConfig(dir, [...urls]), 'trainer.total_training_steps=1', ...overrides])).to.equal(2);
      } finally {
        console.error = original;
      }
      expect(errors.join('\n')).to.include(fragment);
    }
  });
});
