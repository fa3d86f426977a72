// The contracts of the real engines that flowrl serve's dialects mirror (SGLang v0.5.18, vLLM
// v0.20.2) and what the rollout clients do about them: the weight version read where SGLang keeps
// it, LoRA loads that leave it alone, the admin calls a weight load makes (and the ones it no longer
// makes), transient 400s retried, sampling defaults from generation_config.json that only explicit
// fields override, and log-prob semantics under top-k/top-p in each engine.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import type { CausalLM } from '../core-adapters/model/causal-lm.js';
import { loadModel } from '../core-adapters/model/checkpoint.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { SglangClient, VllmClient } from '../core-adapters/rollout/clients.js';
import { expectClose, flowrlInProcess, tempDir, writeCountdownConfig } from './helpers.js';
import { call, expectError, PROMPTS, sample, startServer, TINY, TINY_ADAPTER, type SglangItem, type VllmAnswer } from './serve-helpers.js';

type Started = Awaited<ReturnType<typeof startServer>>;

describe('engine contracts: SGLang v0.5.18 and vLLM v0.20.2 as flowrl serve mirrors them', () => {
  let s: Started;
  let base: CausalLM;
  const faults = (body: Record<string, unknown>) => call(s.url, '/_flowrl/faults', body);
  /** The calls per route a client makes while `run` runs. */
  const callsDuring = async (run: () => Promise<unknown>) => {
    await faults({ reset: true });
    await run();
    return ((await faults({})).body as { calls: Record<string, number> }).calls;
  };
  before(async () => {
    s = await startServer({}, true);
    base = loadModel(TINY);
  });
  afterEach(() => faults({ reset: true }));
  after(async () => {
    await s?.server.close();
    base?.dispose();
  });

  describe('SGLang', () => {
    it('the weight version is read from /model_info; /get_weight_version and /weight_version are gone (404 naming /model_info)', async () => {
      for (const route of ['/get_weight_version', '/weight_version']) expectError(await call(s.url, route), 404, "'/model_info'");
      expect((await call(s.url, '/model_info')).body).to.include({ weight_version: '0', is_generation: true });
    });

    it('/load_lora_adapter leaves the weight version alone; the client then sets it with /update_weight_version (which aborts nothing when told so)', async () => {
      await call(s.url, '/load_lora_adapter', { lora_name: 'raw', lora_path: TINY_ADAPTER });
      expect((await call(s.url, '/model_info')).body).to.include({ weight_version: '0' });
      await call(s.url, '/unload_lora_adapter', { lora_name: 'raw' });
      const client = new SglangClient(s.url, { timeoutMs: 10_000 });
      const calls = await callsDuring(() => client.loadWeights(TINY_ADAPTER, 'run.1', true));
      expect(calls['POST /update_weight_version']).to.equal(1);
      expect(await client.holds('run.1')).to.equal(true);
      // A sample naming the adapter is of that version, whatever the server-wide one says.
      expect((await client.generate(sample({ adapter: 'run.1' }))).weightVersion).to.equal('run.1');
      await client.unloadAdapter('run.1');
    });

    it('a full-weight load pauses, loads (which flushes the cache itself: no /flush_cache), continues, and reads the version back', async () => {
      const client = new SglangClient(s.url, { timeoutMs: 10_000 });
      expect(await callsDuring(() => client.loadWeights(TINY, 'full.1', false))).to.deep.equal({ 'POST /pause_generation': 1, 'POST /update_weights_from_disk': 1, 'POST /continue_generation': 1, 'GET /model_info': 1 });
    });

    it('a transient 400 from /update_weights_from_disk (files not visible yet) is retried; a lasting one stops the run', async () => {
      const client = new SglangClient(s.url, { timeoutMs: 10_000, retryDelayMs: 5 });
      await faults({ route_fail: 'POST /update_weights_from_disk', route_fail_next: 2, status: 400 });
      await client.loadWeights(TINY, 'full.2', false);
      expect(await client.holds('full.2')).to.equal(true);
      await faults({ route_fail: 'POST /update_weights_from_disk', route_fail_next: 100, status: 400 });
      const e = await client.loadWeights(TINY, 'full.3', false).then(
        () => expect.fail('expected a failure'),
        (err: Error & { retryable?: boolean; status?: number }) => err,
      );
      expect([e.status, e.retryable]).to.deep.equal([400, false]);
      // Not left paused.
      expect(s.server.engine.paused).to.equal(false);
    });

    it('/flush_cache answers in plain text, 400 while requests wait; /update_weight_version aborts waiting requests by default', async () => {
      await call(s.url, '/pause_generation', { mode: 'in_place' });
      const pending = call(s.url, '/generate', { input_ids: PROMPTS[0], sampling_params: { max_new_tokens: 3 } });
      await new Promise((r) => setTimeout(r, 20));
      expect(await call(s.url, '/flush_cache', {})).to.deep.equal({ status: 400, body: 'Flush cache failed.\n' });
      expect((await call(s.url, '/update_weight_version', { new_version: 'v9' })).body).to.deep.equal({ success: true, message: 'Weight version updated to v9', new_version: 'v9' });
      expect(((await pending).body as SglangItem).meta_info.finish_reason.type).to.equal('abort');
      await call(s.url, '/continue_generation', {});
      expect(await call(s.url, '/flush_cache', {})).to.deep.equal({ status: 200, body: 'Cache flushed.\n' });
    });
  });

  describe('vLLM', () => {
    it('full weights go through /pause, /collective_rpc reload_weights, /reset_prefix_cache and /resume; the draft disk-transfer routes do not exist', async () => {
      const client = new VllmClient(s.url, { timeoutMs: 10_000 });
      expect(await callsDuring(() => client.loadWeights(TINY, 'ignored', false))).to.deep.equal({ 'POST /pause': 1, 'POST /collective_rpc': 1, 'POST /reset_prefix_cache': 1, 'POST /resume': 1 });
      for (const route of ['/init_weight_transfer_engine', '/start_weight_update', '/update_weights', '/finish_weight_update']) expectError(await call(s.url, route, {}), 404);
      expectError(await call(s.url, '/collective_rpc', { method: 'sleep' }), 400, 'only reload_weights');
    });

    it("prompt_logprobs are the trainer's log-probs at T = 1 (what the rollout checks a server's weights with)", async () => {
      const got = await new VllmClient(s.url, { timeoutMs: 10_000 }).promptLogProbs(PROMPTS[2]);
      expectClose(got, (await responseLogProbs(base, [PROMPTS[2].slice(0, 1)], [PROMPTS[2].slice(1)], 1))[0], 1e-5, 'prompt logprobs');
    });

    it("sampling fields a request omits come from the model's generation_config.json; the client sends every one, so its samples are the trainer's distribution", async () => {
      const dir = path.join(tempDir(), 'with-defaults');
      fs.cpSync(TINY, dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ temperature: 0.5, top_k: 3 }));
      const tuned = await startServer({ modelDir: dir });
      try {
        const body = { prompt: PROMPTS[0], max_tokens: 10, seed: 4, logprobs: 0, return_token_ids: true, ignore_eos: true };
        const omitted = ((await call(tuned.url, '/v1/completions', body)).body as VllmAnswer).choices[0];
        const explicit = ((await call(tuned.url, '/v1/completions', { ...body, temperature: 0.5, top_k: 3 })).body as VllmAnswer).choices[0];
        expect(omitted.token_ids).to.deep.equal(explicit.token_ids);
        // The client's sample equals the plain server's: T = 1, no top-k.
        const plain = await new VllmClient(s.url, { timeoutMs: 10_000 }).generate(sample({ maxNewTokens: 10, seed: 4 }));
        const viaClient = await new VllmClient(tuned.url, { timeoutMs: 10_000 }).generate(sample({ maxNewTokens: 10, seed: 4 }));
        expect(viaClient).to.deep.equal(plain);
        expectClose(viaClient.logProbs, (await responseLogProbs(base, [PROMPTS[0]], [viaClient.outputIds], 1))[0], 1e-4, 'full distribution');
        // SGLang's /generate does not read generation_config.json.
        const sglang = (await call(tuned.url, '/generate', { input_ids: PROMPTS[0], sampling_params: { max_new_tokens: 10, sampling_seed: 4, ignore_eos: true } })).body as SglangItem;
        expect(sglang.output_ids).to.deep.equal(plain.outputIds);
        // A default this engine cannot apply is refused, not ignored.
        fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify({ repetition_penalty: 1.1 }));
        const strict = await startServer({ modelDir: dir });
        try {
          expectError(await call(strict.url, '/v1/completions', body), 400, 'repetition_penalty');
          expect((await call(strict.url, '/v1/completions', { ...body, repetition_penalty: 1 })).status).to.equal(200);
        } finally {
          await strict.server.close();
        }
      } finally {
        await tuned.server.close();
      }
    });
  });

  describe('log-probs under top-k and top-p', () => {
    it('SGLang reports them before filtering (the trainer\'s); vLLM processed_logprobs after, renormalised over the kept tokens', async () => {
      for (const filter of [{ top_k: 1 }, { top_k: 3 }, { top_p: 0.6 }]) {
        const sglang = (await call(s.url, '/generate', { input_ids: PROMPTS[1], sampling_params: { max_new_tokens: 8, sampling_seed: 2, temperature: 0.8, ignore_eos: true, ...filter }, return_logprob: true })).body as SglangItem;
        const vllm = ((await call(s.url, '/v1/completions', { prompt: PROMPTS[1], max_tokens: 8, seed: 2, temperature: 0.8, ignore_eos: true, logprobs: 0, return_token_ids: true, ...filter })).body as VllmAnswer).choices[0];
        expect(vllm.token_ids, JSON.stringify(filter)).to.deep.equal(sglang.output_ids);
        const full = (await responseLogProbs(base, [PROMPTS[1]], [sglang.output_ids], 0.8))[0];
        const before = sglang.meta_info.output_token_logprobs.map((p) => p[0]);
        expectClose(before, full, 1e-4, `SGLang ${JSON.stringify(filter)}`);
        // Independently: each position's whole distribution at T, its kept set, renormalised.
        const expected: number[] = [];
        for (const [t, id] of sglang.output_ids.entries()) {
          const prefix = sglang.output_ids.slice(0, t);
          const V = base.config.vocabSize;
          const probs = (await responseLogProbs(base, Array.from({ length: V }, () => PROMPTS[1]), Array.from({ length: V }, (_, c) => [...prefix, c]), 0.8)).map((lps) => Math.exp(lps[t]));
          const order = probs.map((_, c) => c).sort((a, b) => probs[b] - probs[a]);
          let kept = order;
          if (filter.top_k) kept = order.slice(0, filter.top_k);
          if (filter.top_p) {
            let mass = 0;
            kept = order.filter((c) => (mass += probs[c]) - probs[c] < filter.top_p * probs.reduce((a, b) => a + b, 0));
          }
          expect(kept, `position ${t}`).to.include(id);
          expected.push(Math.log(probs[id]) - Math.log(kept.reduce((sum, c) => sum + probs[c], 0)));
        }
        expectClose(vllm.logprobs.token_logprobs, expected, 1e-4, `vLLM ${JSON.stringify(filter)}`);
        if (filter.top_k === 1) vllm.logprobs.token_logprobs.forEach((v) => expect(v).to.be.closeTo(0, 1e-6));
      }
    });

    it('a run with rollout.name vllm and top_p < 1 stops before sampling (exit 2) saying why; SGLang is allowed', async () => {
      const dir = tempDir();
      const file = writeCountdownConfig(dir, { actor_rollout_ref: { rollout: { name: 'vllm', top_p: 0.9, server: { urls: ['http://127.0.0.1:9'] } } } });
      const result = await flowrlInProcess(['train', file, 'trainer.total_training_steps=1', 'trainer.val_before_train=false']);
      expect(result.status, result.stderr).to.equal(2);
      expect(result.stderr).to.include('top_p 0.9').and.include('renormalisation').and.include('SGLang');
    });
  });
});
