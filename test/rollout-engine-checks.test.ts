// What the rollout checks about a real engine's settings (issue 32, items 8-10), against flowrl serve
// and tiny node servers that stand in for an engine where flowrl serve has no such setting: vLLM's
// --logprobs-mode found by a probe at the run's temperature, the weight check's tolerance by the
// engine's dtype (and its key) with an ejection message that says what was compared, vLLM LoRA loads
// whose 400 (files not all visible yet) is retried, SGLang's --admin-api-key, and the admin retry
// count verl uses.
import { expect } from 'chai';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Batch } from '../core-adapters/batch.js';
import { resolveConfig } from '../core-adapters/config/load.js';
import type { PolicyModule, RolloutPolicy, SamplingSettings } from '../core-adapters/contracts/index.js';
import { InputError } from '../core-adapters/errors.js';
import type { CausalLM } from '../core-adapters/model/causal-lm.js';
import { loadModel } from '../core-adapters/model/checkpoint.js';
import { ADMIN_ATTEMPTS, SglangClient, VllmClient } from '../core-adapters/rollout/clients.js';
import { ServerRollout, WEIGHT_CHECK_TOLERANCES } from '../core-adapters/rollout/server-rollout.js';
import { tempDir } from './helpers.js';
import { call, PROMPTS, sample, startServer, TINY, TINY_ADAPTER } from './serve-helpers.js';

type Started = Awaited<ReturnType<typeof startServer>>;

/** A node server answering `handler`, closed by the returned function. */
async function tinyServer(handler: (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void | Promise<void>): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => void handler(req, body, res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

const json = (res: http.ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

describe('rollout checks of the engine behind the routes (vLLM v0.20.2, SGLang v0.5.18)', function () {
  this.timeout(60_000);
  let processed: Started;
  let raw: Started;
  let base: CausalLM;
  const faults = (body: Record<string, unknown>) => call(processed.url, '/_flowrl/faults', body);
  before(async () => {
    [processed, raw] = await Promise.all([startServer({}, true), startServer({ logprobsMode: 'raw_logprobs' })]);
    base = loadModel(TINY);
  });
  afterEach(() => faults({ reset: true }));
  after(async () => {
    await Promise.all([processed?.server.close(), raw?.server.close()]);
    base?.dispose();
  });

  /** A ServerRollout on `urls` with the tiny model as the policy, writing `weights` (default: the model's own) for the servers. */
  async function rollout(urls: string[], server: Record<string, unknown> = {}, rolloutKeys: Record<string, unknown> = {}, weights = TINY) {
    const dir = tempDir();
    const config = resolveConfig({
      user: { trainer: { default_local_dir: dir, progress: true }, actor_rollout_ref: { rollout: { name: 'vllm', temperature: 0.7, ...rolloutKeys, server: { urls, timeout_s: 10, ...server } } } },
      userFile: path.join(dir, 'config.yaml'),
    });
    const policy: RolloutPolicy = {
      module: { lm: base } as unknown as PolicyModule,
      stopTokenIds: [],
      padTokenId: 0,
      writeWeights: async (to) => {
        fs.cpSync(weights, to, { recursive: true });
        return { adapter: false };
      },
    };
    const r = new ServerRollout(config);
    await r.attach(policy);
    return r;
  }
  const prompts = () => new Batch({ columns: { prompt_ids: [PROMPTS[0], PROMPTS[0]], uid: ['a', 'a'] } });
  const sampling = (temperature: number): SamplingSettings => ({ temperature, topP: 1, topK: -1, greedy: false, maxNewTokens: 4, seed: 3 });
  /** Runs `run` with process.stderr.write captured; returns what it wrote. */
  async function stderrOf(run: () => Promise<unknown>): Promise<string> {
    const original = process.stderr.write.bind(process.stderr);
    let text = '';
    process.stderr.write = ((chunk: string | Uint8Array) => ((text += String(chunk)), true)) as typeof process.stderr.write;
    try {
      await run();
    } finally {
      process.stderr.write = original;
    }
    return text;
  }

  describe('item 8: vLLM --logprobs-mode', () => {
    it('a server in raw_logprobs mode (vLLM\'s default) at rollout.temperature 0.7 stops the run before sampling (exit 2) with both distances and the flag to add', async () => {
      const r = await rollout([raw.url]);
      const e = await r.generateSequences(prompts(), sampling(0.7)).then(
        () => expect.fail('expected the mode to be refused'),
        (err: Error) => err,
      );
      expect(e).to.be.instanceOf(InputError);
      expect(e.message).to.include(raw.url).and.include('raw_logprobs').and.include('--logprobs-mode processed_logprobs').and.include('T = 0.7').and.include('T = 1');
    });

    it('processed_logprobs passes and is probed once per server; at temperature 1 nothing is probed (the modes agree)', async () => {
      const completions = async (r: ServerRollout, temperature: number) => {
        await faults({ reset: true });
        await r.generateSequences(prompts(), sampling(temperature));
        return ((await faults({})).body as { calls: Record<string, number> }).calls['POST /v1/completions'];
      };
      const hot = await rollout([processed.url]);
      // First round: the load's weight check, the mode probe, 2 samples, the round's weight check; then no load and no probe.
      expect([await completions(hot, 0.7), await completions(hot, 0.7)]).to.deep.equal([5, 3]);
      const plain = await rollout([processed.url], {}, { temperature: 1 });
      expect([await completions(plain, 1), await completions(plain, 1)]).to.deep.equal([4, 3]);
      // A raw server agrees with the trainer at T = 1, so it samples there.
      const rawAtOne = await rollout([raw.url], {}, { temperature: 1 });
      expect((await rawAtOne.generateSequences(prompts(), sampling(1))).size).to.equal(2);
    });
  });

  describe('item 9: the weight check\'s tolerance', () => {
    /**
     * vLLM's routes from flowrl serve with every prompt log-prob moved by `skew` (an engine whose
     * numbers are off the trainer's by that much) and, when `dtype` is given, dev mode's /server_info
     * as vLLM v0.20.2 dumps its config.
     */
    async function fakeVllm(skew: number, dtype?: string) {
      return tinyServer(async (req, body, res) => {
        if (req.url?.startsWith('/server_info')) return dtype ? json(res, 200, { vllm_config: { model_config: { dtype: `torch.${dtype}` } } }) : json(res, 404, { detail: 'Not Found' });
        const answer = await fetch(processed.url + req.url, { method: req.method, headers: { 'content-type': 'application/json' }, body: req.method === 'POST' ? body : undefined });
        let text = await answer.text();
        if (req.url === '/v1/completions' && answer.ok) {
          const out = JSON.parse(text) as { choices: { prompt_logprobs?: (Record<string, { logprob: number }> | null)[] }[] };
          for (const entry of out.choices.flatMap((c) => c.prompt_logprobs ?? [])) for (const v of Object.values(entry ?? {})) v.logprob += skew;
          text = JSON.stringify(out);
        }
        res.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'application/json' });
        res.end(text);
      });
    }

    it('a server that reports no dtype is held to the float32 figure: ejected, the message naming the compared quantity, the difference, the tolerance and its key', async () => {
      const fake = await fakeVllm(0.05);
      try {
        // The other server (a plain one) takes the round.
        const r = await rollout([fake.url, raw.url], {}, { temperature: 1 });
        let out!: Batch;
        const text = await stderrOf(async () => (out = await r.generateSequences(prompts(), sampling(1))));
        expect(out.meta.metrics).to.include({ 'rollout/ejections': 1, 'rollout/servers_live': 1 });
        expect(text).to.include(fake.url).and.include("mean |prompt log-prob difference| between the server (vLLM prompt_logprobs, T = 1) and the trainer over the probe's 3 tokens is 0.0500").and.include(`tolerance ${WEIGHT_CHECK_TOLERANCES.float32}`).and.include('actor_rollout_ref.rollout.server.weight_check_tolerance').and.include('reports no dtype');
      } finally {
        await fake.close();
      }
    });

    it("a bfloat16 engine (its dtype read from vLLM's dev-mode /server_info) is held to the 16-bit figure, and the key overrides it", async () => {
      const fake = await fakeVllm(0.05, 'bfloat16');
      try {
        expect(await new VllmClient(fake.url, { timeoutMs: 5000 }).engineDtype()).to.equal('bfloat16');
        expect(await new VllmClient(processed.url, { timeoutMs: 5000 }).engineDtype()).to.equal(undefined);
        const bf16 = await rollout([fake.url], {}, { temperature: 1 });
        expect((await bf16.generateSequences(prompts(), sampling(1))).meta.metrics).to.include({ 'rollout/ejections': 0 });
        const keyed = await rollout([fake.url, raw.url], { weight_check_tolerance: 0.03 }, { temperature: 1 });
        let out!: Batch;
        const text = await stderrOf(async () => (out = await keyed.generateSequences(prompts(), sampling(1))));
        expect(out.meta.metrics).to.include({ 'rollout/ejections': 1 });
        expect(text).to.include('is 0.0500, above the tolerance 0.03 (actor_rollout_ref.rollout.server.weight_check_tolerance 0.03)');
      } finally {
        await fake.close();
      }
    });
  });

  describe('item 10: vLLM LoRA loads, SGLang admin key, admin retries', () => {
    it('a vLLM adapter load answered 400 (a directory whose files are not all there yet) is retried; a name already taken is not', async () => {
      const client = new VllmClient(processed.url, { timeoutMs: 10_000, retryDelayMs: 5 });
      await faults({ route_fail: 'POST /v1/load_lora_adapter', route_fail_next: 2, status: 400, route_fail_message: 'Loading lora run.1 failed: incomplete metadata, file not fully covered' });
      await client.loadWeights(TINY_ADAPTER, 'run.1', true);
      expect(await client.holds('run.1')).to.equal(true);
      expect(((await faults({})).body as { calls: Record<string, number> }).calls['POST /v1/load_lora_adapter']).to.equal(3);
      await faults({ reset: true, route_fail: 'POST /v1/load_lora_adapter', route_fail_next: 5, status: 400, route_fail_message: "The lora adapter 'run.2' has already been loaded." });
      const e = await client.loadWeights(TINY_ADAPTER, 'run.2', true).then(
        () => expect.fail('expected a failure'),
        (err: Error & { status?: number; retryable?: boolean }) => err,
      );
      expect([e.status, e.retryable]).to.deep.equal([400, false]);
      expect(((await faults({})).body as { calls: Record<string, number> }).calls['POST /v1/load_lora_adapter']).to.equal(1);
      await client.unloadAdapter('run.1');
    });

    it(`a lasting 400 from /update_weights_from_disk is tried ${ADMIN_ATTEMPTS} times (verl v0.9.0's flush_cache count) before the run stops`, async () => {
      await faults({ route_fail: 'POST /update_weights_from_disk', route_fail_next: 100, status: 400 });
      const client = new SglangClient(processed.url, { timeoutMs: 10_000, retryDelayMs: 1 });
      await client.loadWeights(TINY, 'v.x', false).catch(() => undefined);
      expect(((await faults({})).body as { calls: Record<string, number> }).calls['POST /update_weights_from_disk']).to.equal(12);
    });

    it("SGLang's --admin-api-key: admin routes get the admin key, the others the api key, as SGLang v0.5.18 takes them", async () => {
      // SGLang's rules (utils/auth.py): admin routes take only the admin key once one is set (else the
      // api key); other routes take only the api key when one is set; /health* is open.
      const ADMIN = new Set(['/pause_generation', '/continue_generation', '/update_weights_from_disk', '/update_weight_version', '/load_lora_adapter', '/unload_lora_adapter']);
      const seen: string[] = [];
      let version = '0';
      const keys = { api: 'user-key', admin: 'admin-key' };
      const fake = await tinyServer((req, body, res) => {
        const route = (req.url ?? '').split('?')[0];
        const token = /^bearer (.*)$/i.exec(req.headers.authorization ?? '')?.[1];
        const wanted = route.startsWith('/health') ? undefined : ADMIN.has(route) ? keys.admin : keys.api;
        seen.push(`${route} ${token === keys.api ? 'api' : token === keys.admin ? 'admin' : 'none'}`);
        if (wanted !== undefined && token !== wanted) return json(res, 401, { error: 'Unauthorized' });
        const parsed = (body ? JSON.parse(body) : {}) as { weight_version?: string; new_version?: string };
        if (route === '/update_weights_from_disk') version = parsed.weight_version ?? version;
        if (route === '/update_weight_version') version = parsed.new_version ?? version;
        if (route === '/model_info') return json(res, 200, { weight_version: version });
        if (route === '/generate') return json(res, 200, { output_ids: [7], meta_info: { finish_reason: { type: 'stop' }, weight_version: version, output_token_logprobs: [[-0.5, 7, null]] } });
        return json(res, 200, { success: true, message: 'ok' });
      });
      try {
        const client = new SglangClient(fake.url, { timeoutMs: 5000, apiKey: keys.api, adminApiKey: keys.admin, retryDelayMs: 1 });
        await client.loadWeights('/w/v1', 'run.1', false);
        await client.loadWeights('/w/v2', 'run.2', true);
        await client.unloadAdapter('run.0');
        expect((await client.generate(sample())).outputIds).to.deep.equal([7]);
        expect(await client.health()).to.equal(true);
        expect(seen).to.deep.equal([
          '/pause_generation admin',
          '/update_weights_from_disk admin',
          '/continue_generation admin',
          '/model_info api',
          '/load_lora_adapter admin',
          '/update_weight_version admin',
          '/model_info api',
          '/unload_lora_adapter admin',
          '/generate api',
          '/health_generate api',
        ]);
        // Without an admin key the admin routes carry the api key (SGLang: "only api_key set").
        seen.length = 0;
        keys.admin = keys.api;
        await new SglangClient(fake.url, { timeoutMs: 5000, apiKey: keys.api }).loadWeights('/w/v3', 'run.3', false);
        expect(seen.every((s) => s.endsWith(' api'))).to.equal(true);
      } finally {
        await fake.close();
      }
    });

    it('bad values of the new keys exit 2 naming the key', async () => {
      for (const [server, dialect, fragment] of [
        [{ admin_api_key: 'k' }, 'vllm', 'admin_api_key is SGLang'],
        [{ admin_api_key: '' }, 'sglang', 'admin_api_key must be a non-empty string'],
        [{ weight_check_tolerance: -1 }, 'vllm', 'weight_check_tolerance must be a positive number'],
        [{ weight_check_tolerance: 0 }, 'vllm', 'weight_check_tolerance must be a positive number'],
      ] as const) {
        const e = await rollout([processed.url], server, { name: dialect }).then(
          () => expect.fail(`expected ${JSON.stringify(server)} to be refused`),
          (err: Error) => err,
        );
        expect(e, e.message).to.be.instanceOf(InputError);
        expect(e.message).to.include(`actor_rollout_ref.rollout.server.${fragment}`);
      }
    });
  });
});
