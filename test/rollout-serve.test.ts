// `flowrl serve` and the rollout wire clients. The contract suite runs SglangClient and VllmClient
// against flowrl serve (in-process) and, when FLOWRL_SGLANG_URL or FLOWRL_VLLM_URL names a real
// server, against it as well. For a real server, FLOWRL_SERVER_MODEL (a local copy of the served HF
// directory) enables the logprob parity checks, FLOWRL_SERVER_WEIGHTS_DIR (an HF directory of the
// same architecture that the server can read, at the same path here) the weight-loading checks,
// FLOWRL_SERVER_ADAPTER_DIR (a PEFT adapter of the served model) the adapter checks, and
// FLOWRL_VLLM_MODEL_NAME the `model` sent to vLLM. The server must start on FLOWRL_SERVER_MODEL's
// weights; the weight-loading checks leave it on FLOWRL_SERVER_WEIGHTS_DIR's (restart it to rerun).
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import type { CausalLM } from '../core-adapters/model/causal-lm.js';
import { loadModel, saveModel } from '../core-adapters/model/checkpoint.js';
import { readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { loadAdapters } from '../core-adapters/model/lora.js';
import { TextTokenizer } from '../core-adapters/model/tokenizer.js';
import { SglangClient, VllmClient, type RolloutServerClient, type SampleResult } from '../core-adapters/rollout/clients.js';
import type { FlowrlServer } from '../core-adapters/rollout/serve.js';
import type { SampleSpec } from '../core-adapters/rollout/serving-engine.js';
import { expectClose, fixture, flowrlInProcess, spawnBuiltFlowrl, tempDir } from './helpers.js';
import { call, callError, expectError, maxDiff, PROMPTS, sample, startServer, TINY, TINY_ADAPTER, waitFor, waiting, type ChatAnswer, type SglangItem, type VllmAnswer } from './serve-helpers.js';

/** An HF directory with tiny-qwen2's architecture and perturbed weights (another policy version). */
async function writePerturbedModel(dir: string): Promise<void> {
  const model = loadModel(TINY);
  for (const v of model.params.values()) v.assign(tf.tidy(() => tf.add(v, tf.randomNormal(v.shape, 0, 0.05, 'float32', 7))));
  await saveModel(model, dir);
  model.dispose();
}

let perturbed: string | undefined;
/** The perturbed model's directory, written on first use (not in a root hook: other files' runs skip it). */
async function perturbedDir(): Promise<string> {
  if (!perturbed) {
    perturbed = path.join(tempDir(), 'v7');
    await writePerturbedModel(perturbed);
  }
  return perturbed;
}

/** A server the contract suite runs against, and what it can check there. */
interface Target {
  client: RolloutServerClient;
  /** flowrl serve: exact determinism and server internals can be checked. */
  server?: FlowrlServer;
  /** The served HF directory, readable here (parity checks need it). */
  modelDir?: string;
  /** An HF directory the server can load (weight-loading checks need it). */
  weightsDir?: string;
  /** A PEFT adapter of the served model. */
  adapterDir?: string;
  /** The weight version the server reports, where it can tell. */
  version(): Promise<string | undefined>;
}

interface TargetInfo {
  flowrl: boolean;
  model: boolean;
  weights: boolean;
  adapter: boolean;
}

function contractSuite(title: string, info: TargetInfo, open: () => Promise<Target>): void {
  describe(title, () => {
    let t: Target;
    const models = new Map<string, CausalLM>();
    /** The trainer's copy of a directory's weights (with an adapter on top), loaded once. */
    const model = (dir: string, adapterDir?: string): CausalLM => {
      const key = `${dir}|${adapterDir ?? ''}`;
      if (!models.has(key)) {
        const m = loadModel(dir);
        if (adapterDir) m.attachAdapters(loadAdapters(m.config, adapterDir));
        models.set(key, m);
      }
      return models.get(key)!;
    };
    const stops = () => (t.modelDir ? model(t.modelDir).config.eosTokenIds : undefined);
    /** finish 'length' means exactly max ids; 'stop' (no stop ids asked for) means the last id is an eos. */
    const expectFinish = (r: SampleResult, max: number) => {
      expect(r.outputIds.length).to.be.within(1, max);
      expect(r.logProbs.length).to.equal(r.outputIds.length);
      expect(r.finish).to.be.oneOf(['stop', 'length']);
      if (r.finish === 'length') expect(r.outputIds.length).to.equal(max);
      const eos = stops();
      if (r.finish === 'stop' && eos) expect(eos).to.include(r.outputIds.at(-1));
    };
    /** Engine logprobs equal the trainer's log-probs of the same ids at `temperature`. */
    const expectParity = async (r: SampleResult, prompt: number[], m: CausalLM, temperature: number, label: string) => {
      expectClose(r.logProbs, (await responseLogProbs(m, [prompt], [r.outputIds], temperature))[0], 1e-4, label);
    };

    before(async () => {
      t = await open();
    });
    after(async () => {
      models.forEach((m) => m.dispose());
      await t?.server?.close();
    });

    it('health() is true', async () => {
      expect(await t.client.health()).to.equal(true);
    });

    it('a seeded generate returns one logprob per id, at most max_new_tokens ids, and (flowrl serve) the same sample twice', async () => {
      for (const max of [1, 5, 12]) {
        const a = await t.client.generate(sample({ maxNewTokens: max, seed: 21 }));
        expectFinish(a, max);
        a.logProbs.forEach((v) => expect(v).to.be.at.most(0));
        if (!info.flowrl) continue;
        const b = await t.client.generate(sample({ maxNewTokens: max, seed: 21 }));
        expect(b).to.deep.equal(a);
      }
      if (info.flowrl) {
        // Another seed, another sample.
        const [x, y] = await Promise.all([21, 22].map((seed) => t.client.generate(sample({ maxNewTokens: 12, seed }))));
        expect(x.outputIds).not.to.deep.equal(y.outputIds);
      }
    });

    it("finish is 'length' at max_new_tokens, and a stop token id ends the sample with that id kept last", async () => {
      // flowrl serve: a seeded sample (seed 11 draws no eos in 10 tokens); real servers: greedy.
      const base = sample({ maxNewTokens: 10, temperature: info.flowrl ? 1 : 0 });
      const full = await t.client.generate(base);
      expectFinish(full, 10);
      if (info.flowrl) expect(full.finish).to.equal('length');
      const ids = full.outputIds;
      // The first occurrence of an id, past position 2 where there is one (greedy can repeat one id).
      const firsts = ids.map((_, i) => i).filter((i) => !ids.slice(0, i).includes(ids[i]));
      const k = firsts.find((i) => i >= 2) ?? firsts.at(-1)!;
      if (info.flowrl) expect(k).to.be.at.least(2);
      const stopped = await t.client.generate({ ...base, stopTokenIds: [ids[k]], requestId: sample().requestId });
      expect(stopped.finish).to.equal('stop');
      expect(stopped.outputIds.at(-1)).to.equal(ids[k]);
      expect(stopped.outputIds).to.deep.equal(ids.slice(0, k + 1));
      if (info.flowrl) expect(stopped.logProbs).to.deep.equal(full.logProbs.slice(0, k + 1));
    });

    (info.model ? it : it.skip)("parity: at T = 1 the returned logprobs are the trainer's log-probs of the same ids (1e-4)", async () => {
      const m = model(t.modelDir!);
      for (const [i, prompt] of PROMPTS.entries()) {
        const r = await t.client.generate(sample({ inputIds: prompt, maxNewTokens: 12, seed: 30 + i }));
        await expectParity(r, prompt, m, 1, `prompt ${i}`);
      }
    });

    (info.flowrl ? it : it.skip)('parity at T = 0.7: the processed logprobs are the trainer log-probs at T = 0.7, not at T = 1', async () => {
      const m = model(t.modelDir!);
      const r = await t.client.generate(sample({ inputIds: PROMPTS[2], maxNewTokens: 12, temperature: 0.7, seed: 5 }));
      await expectParity(r, PROMPTS[2], m, 0.7, 'T 0.7');
      expect(maxDiff(r.logProbs, (await responseLogProbs(m, [PROMPTS[2]], [r.outputIds], 1))[0])).to.be.above(1e-2);
    });

    (info.adapter ? it : it.skip)("loadWeights(adapter, 'v1', true): requests naming v1 sample from base + adapter, others from the base; an unknown adapter is lost weights (retried after a resync)", async () => {
      await t.client.loadWeights(t.adapterDir!, 'v1', true);
      const adapted = await t.client.generate(sample({ maxNewTokens: 12, adapter: 'v1' }));
      expectFinish(adapted, 12);
      const plain = await t.client.generate(sample({ maxNewTokens: 12 }));
      if (info.model) {
        await expectParity(adapted, PROMPTS[0], model(t.modelDir!, t.adapterDir), 1, 'with the adapter');
        await expectParity(plain, PROMPTS[0], model(t.modelDir!), 1, 'without the adapter');
        // The adapter changes the scores, so the parity above tells the two apart.
        expect(maxDiff(adapted.logProbs, (await responseLogProbs(model(t.modelDir!), [PROMPTS[0]], [adapted.outputIds]))[0])).to.be.above(1e-3);
      }
      // An adapter the server does not have: it lost our weights (a restart), so the rollout resyncs it.
      const e = await callError(t.client.generate(sample({ adapter: 'no-such-adapter' })));
      expect([e.retryable, e.lostWeights], e.message).to.deep.equal([true, true]);
      expect(e.status).to.be.within(400, 499);
      expect(await t.client.holds('v1')).to.equal(true);
      await t.client.unloadAdapter('v1');
      // vLLM lists its adapters; SGLang tells a lost adapter by its weight version (a restart resets it).
      if (t.client.dialect === 'vllm') expect(await t.client.holds('v1')).to.equal(false);
      expect((await callError(t.client.generate(sample({ adapter: 'v1' })))).lostWeights).to.equal(true);
    });

    (info.weights ? it : it.skip)('loadWeights of a bad directory is a non-retryable 400, and the old weights keep serving', async () => {
      const before = await t.version();
      const e = await callError(t.client.loadWeights(path.join(tempDir(), 'no-such-model'), 'bad', false));
      expect(e.retryable, e.message).to.equal(false);
      expect(e.status).to.equal(400);
      expect(e.message).to.include('no-such-model');
      expect(await t.version()).to.equal(before);
      // Not left paused: generation goes on, from the old weights.
      const r = await t.client.generate(sample({ maxNewTokens: 8 }));
      expectFinish(r, 8);
      if (info.model) await expectParity(r, PROMPTS[0], model(t.modelDir!), 1, 'old weights');
    });

    (info.weights ? it : it.skip)('loadWeights of another HF directory serves its weights under the new version', async () => {
      await t.client.loadWeights(t.weightsDir!, 'v7', false);
      const r = await t.client.generate(sample({ inputIds: PROMPTS[1], maxNewTokens: 12, seed: 4 }));
      expectFinish(r, 12);
      await expectParity(r, PROMPTS[1], model(t.weightsDir!), 1, 'new weights');
      if (info.model) expect(maxDiff(r.logProbs, (await responseLogProbs(model(t.modelDir!), [PROMPTS[1]], [r.outputIds]))[0])).to.be.above(1e-3);
      const version = await t.version();
      if (version !== undefined) expect(version).to.equal('v7');
      // SGLang tags each sample with the version that drew it.
      if (t.client.dialect === 'sglang') expect(r.weightVersion).to.equal('v7');
    });
  });
}

// flowrl serve, once per dialect (each its own server: the suite swaps weights).
for (const dialect of ['sglang', 'vllm'] as const) {
  contractSuite(`rollout contract: ${dialect === 'sglang' ? 'SglangClient' : 'VllmClient'} against flowrl serve`, { flowrl: true, model: true, weights: true, adapter: true }, async () => {
    const { server, url } = await startServer();
    const client = dialect === 'sglang' ? new SglangClient(url, { timeoutMs: 10_000, retryDelayMs: 5 }) : new VllmClient(url, { timeoutMs: 10_000, retryDelayMs: 5 });
    // SGLang reports it at /model_info; vLLM reports none.
    const version = async () => (dialect === 'sglang' ? ((await call(url, '/model_info')).body as { weight_version: string }).weight_version : undefined);
    return { client, server, modelDir: TINY, weightsDir: await perturbedDir(), adapterDir: TINY_ADAPTER, version };
  });
}

// Real servers, when the environment names them.
for (const [dialect, variable] of [['sglang', 'FLOWRL_SGLANG_URL'], ['vllm', 'FLOWRL_VLLM_URL']] as const) {
  const url = process.env[variable]?.replace(/\/+$/, '');
  if (!url) continue;
  const env = { modelDir: process.env.FLOWRL_SERVER_MODEL, weightsDir: process.env.FLOWRL_SERVER_WEIGHTS_DIR, adapterDir: process.env.FLOWRL_SERVER_ADAPTER_DIR };
  contractSuite(`rollout contract: ${dialect} server at ${url}`, { flowrl: false, model: !!env.modelDir, weights: !!env.weightsDir, adapter: !!env.adapterDir }, async () => {
    const options = { timeoutMs: 120_000, apiKey: process.env.FLOWRL_ROLLOUT_API_KEY, modelName: process.env.FLOWRL_VLLM_MODEL_NAME };
    const client = dialect === 'sglang' ? new SglangClient(url, options) : new VllmClient(url, options);
    const version = async () => (dialect === 'sglang' ? String(((await call(url, '/model_info')).body as { weight_version: unknown }).weight_version) : undefined);
    return { client, ...env, version };
  });
}

describe('flowrl serve: the HTTP server', () => {
  let main: { server: FlowrlServer; url: string };
  // maxQueue 1, a 4 KiB body limit, no fault route.
  let small: { server: FlowrlServer; url: string };
  let base: CausalLM;

  before(async () => {
    main = await startServer({}, true);
    small = await startServer({ maxQueue: 1, maxBodyBytes: 4096 });
    base = loadModel(TINY);
  });
  after(async () => {
    await main?.server.close();
    await small?.server.close();
    base?.dispose();
  });

  /** A seeded SGLang /generate with logprobs. */
  const generateBody = (over: Record<string, unknown> = {}, params: Record<string, unknown> = {}) => ({
    input_ids: PROMPTS[0],
    sampling_params: { max_new_tokens: 6, temperature: 1, sampling_seed: 3, ...params },
    return_logprob: true,
    ...over,
  });

  describe('bad requests', () => {
    it('a body that is not JSON, or not an object, is a 400 whose JSON error says so', async () => {
      expectError(await call(main.url, '/generate', '{"input_ids": [1,'), 400, 'not JSON');
      expectError(await call(main.url, '/v1/completions', '[1, 2]'), 400, 'must be a JSON object');
    });

    it('a field of the wrong type or range is a 400 naming the field', async () => {
      expectError(await call(main.url, '/generate', generateBody({}, { temperature: 'hot' })), 400, "'sampling_params.temperature' must be a number", '"hot"');
      expectError(await call(main.url, '/generate', generateBody({ input_ids: [5, 128] })), 400, "'input_ids' holds 128", '[0, 128)');
      expectError(await call(main.url, '/generate', generateBody({ input_ids: [[5], 'x'] })), 400, "'input_ids[1]'");
      expectError(await call(main.url, '/generate', generateBody({ sampling_params: 3 })), 400, "'sampling_params' must be an object");
      expectError(await call(main.url, '/v1/completions', { prompt: [5, 6], max_tokens: -1 }), 400, "'max_tokens' must be an integer >= 0");
      expectError(await call(main.url, '/v1/completions', { prompt: [5, 6], stop_token_ids: 'x' }), 400, "'stop_token_ids' must be a list of token ids");
      expectError(await call(main.url, '/v1/completions', { prompt: [5, 6], top_p: 0 }), 400, "'top_p'");
    });

    it('an unknown route (or method) is a 404', async () => {
      expectError(await call(main.url, '/no/such/route'), 404, '/no/such/route');
      expectError(await call(main.url, '/generate'), 404, 'GET /generate');
    });

    it('a body over maxBodyBytes is a 413', async () => {
      const body = JSON.stringify(generateBody({ input_ids: Array.from({ length: 3000 }, (_, i) => i % 100) }));
      expect(Buffer.byteLength(body)).to.be.above(4096);
      expectError(await call(small.url, '/generate', body), 413, '4096 bytes');
      // It does not read the rest of a body it refused: the connection closes with the answer.
      const refused = await fetch(`${small.url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect([refused.status, refused.headers.get('connection')]).to.deep.equal([413, 'close']);
      await refused.text();
      // The server still answers on the next request.
      expect((await call(small.url, '/health')).status).to.equal(200);
    });
  });

  it('a full queue answers 503 with an error body; on continue the queued request completes', async () => {
    expect((await call(small.url, '/pause_generation', { mode: 'in_place' })).status).to.equal(200);
    const first = call(small.url, '/generate', generateBody());
    await waitFor('the first request to queue', async () => (await waiting(small.url)) === 1);
    expectError(await call(small.url, '/generate', generateBody()), 503, 'queue', 'retry later');
    expect((await call(small.url, '/continue_generation', {})).status).to.equal(200);
    const answer = await first;
    expect(answer.status).to.equal(200);
    expect((answer.body as SglangItem).output_ids).to.have.length(6);
  });

  it('pause_generation abort ends waiting requests with finish abort; flush_cache is a 400 while one waits and a 200 when idle', async () => {
    await call(main.url, '/pause_generation', { mode: 'in_place' });
    const pending = [call(main.url, '/generate', generateBody()), call(main.url, '/generate', generateBody({ input_ids: PROMPTS[1] }))];
    await waitFor('two requests to queue', async () => (await waiting(main.url)) === 2);
    expect(await call(main.url, '/flush_cache', {})).to.deep.equal({ status: 400, body: 'Flush cache failed.\n' });
    expect((await call(main.url, '/pause_generation', { mode: 'abort' })).status).to.equal(200);
    for (const answer of await Promise.all(pending)) {
      expect(answer.status).to.equal(200);
      const item = answer.body as SglangItem;
      expect(item.meta_info.finish_reason.type).to.equal('abort');
      expect(item.output_ids).to.deep.equal([]);
    }
    const flushed = await call(main.url, '/flush_cache', {});
    expect(flushed.status).to.equal(200);
    await call(main.url, '/continue_generation', {});
    expect(((await call(main.url, '/generate', generateBody())).body as SglangItem).meta_info.finish_reason.type).to.equal('length');
  });

  it("pause 'wait' (vLLM's, before a weight update) first runs the samples already submitted, on the current weights", async () => {
    const weights = await perturbedDir();
    const engine = main.server.engine;
    const version = engine.weightVersion;
    const spec = (seed: number): SampleSpec => ({ inputIds: PROMPTS[0], maxNewTokens: 6, temperature: 1, topP: 1, topK: 0, stopTokenIds: [], ignoreEos: true, seed });
    // Submitted, not yet started (batches start a macrotask later), then the update runs.
    const pending = [engine.submit(spec(1)), engine.submit(spec(2))];
    await engine.pause('wait');
    await engine.loadWeights(weights, 'after-wait');
    engine.resume();
    try {
      for (const out of await Promise.all(pending)) {
        expect([out.finish, out.weightVersion]).to.deep.equal(['length', version]);
        expectClose(out.logProbs, (await responseLogProbs(base, [PROMPTS[0]], [out.outputIds]))[0], 1e-4, 'old weights');
      }
    } finally {
      await engine.restartToBase();
    }
  });

  it('close() ends requests waiting on a paused engine with finish abort instead of waiting for them forever', async function () {
    this.timeout(10_000);
    const { server, url } = await startServer();
    await call(url, '/pause_generation', { mode: 'in_place' });
    const pending = call(url, '/generate', generateBody());
    await waitFor('the request to queue', async () => (await waiting(url)) === 1);
    const started = Date.now();
    await server.close();
    // Not left to the keep-alive timeouts (5 s) either.
    expect(Date.now() - started).to.be.below(2000);
    const answer = await pending;
    expect(answer.status).to.equal(200);
    expect((answer.body as SglangItem).meta_info.finish_reason.type).to.equal('abort');
  });

  it('concurrent requests share batches and sample exactly what they sample alone', async () => {
    // Eight prompts of different lengths, seeds and lengths: batched rows are left-padded.
    const bodies = Array.from({ length: 8 }, (_, i) => generateBody({ input_ids: Array.from({ length: 2 + i }, (_, j) => (7 * i + 3 * j + 1) % 128) }, { sampling_seed: 100 + i, max_new_tokens: 5 + (i % 3) }));
    const batches = main.server.engine.batchesRun;
    const together = (await Promise.all(bodies.map((b) => call(main.url, '/generate', b)))).map((a) => a.body as SglangItem);
    const ran = main.server.engine.batchesRun - batches;
    expect(ran).to.be.within(1, bodies.length - 1);
    for (const [i, body] of bodies.entries()) {
      const alone = (await call(main.url, '/generate', body)).body as SglangItem;
      expect(together[i].output_ids, `request ${i}`).to.deep.equal(alone.output_ids);
      expectClose(together[i].meta_info.output_token_logprobs.map((p) => p[0]), alone.meta_info.output_token_logprobs.map((p) => p[0]), 1e-5, `request ${i}`);
    }
  });

  it('SGLang batch input and n > 1 answer a list (prompt-major); vLLM n > 1 answers n choices', async () => {
    const single = (await call(main.url, '/generate', generateBody({}, { n: 3 }))).body as SglangItem[];
    expect(single).to.be.an('array').with.length(3);
    expect(new Set(single.map((s) => s.output_ids.join(' '))).size).to.equal(3);
    const batch = (await call(main.url, '/generate', generateBody({ input_ids: [PROMPTS[0], PROMPTS[1]] }, { n: 2 }))).body as SglangItem[];
    expect(batch).to.be.an('array').with.length(4);
    for (const [i, item] of batch.entries()) expectClose(item.meta_info.output_token_logprobs.map((p) => p[0]), (await responseLogProbs(base, [PROMPTS[Math.floor(i / 2)]], [item.output_ids]))[0], 1e-4, `item ${i}`);
    // A one-prompt list is still a list.
    expect((await call(main.url, '/generate', generateBody({ input_ids: [PROMPTS[0]] }))).body).to.be.an('array').with.length(1);
    const vllm = (await call(main.url, '/v1/completions', { prompt: PROMPTS[0], n: 3, max_tokens: 4, seed: 3, logprobs: 0, return_token_ids: true })).body as VllmAnswer;
    expect(vllm.choices.map((c) => c.index)).to.deep.equal([0, 1, 2]);
    vllm.choices.forEach((c) => expect(c.logprobs.token_logprobs).to.have.length(c.token_ids.length));
    // The same seed and sample index draw the same ids in both dialects.
    expect(vllm.choices.map((c) => c.token_ids)).to.deep.equal((((await call(main.url, '/generate', generateBody({}, { n: 3, max_new_tokens: 4 }))).body as SglangItem[]).map((s) => s.output_ids)));
  });

  it("vLLM's --logprobs-mode raw_logprobs: at T = 2 the logprobs are the T = 1 scores, not the processed ones (SGLang's stay at T)", async () => {
    const raw = await startServer({ logprobsMode: 'raw_logprobs' });
    try {
      const body = { prompt: PROMPTS[0], max_tokens: 10, temperature: 2, seed: 3, logprobs: 0, return_token_ids: true };
      const choice = ((await call(raw.url, '/v1/completions', body)).body as VllmAnswer).choices[0];
      const got = choice.logprobs.token_logprobs;
      expectClose(got, (await responseLogProbs(base, [PROMPTS[0]], [choice.token_ids], 1))[0], 1e-4, 'raw');
      expect(maxDiff(got, (await responseLogProbs(base, [PROMPTS[0]], [choice.token_ids], 2))[0])).to.be.above(1e-2);
      // The ids are still drawn at T = 2: the processed server draws the same ones.
      expect(((await call(main.url, '/v1/completions', body)).body as VllmAnswer).choices[0].token_ids).to.deep.equal(choice.token_ids);
      // The SGLang dialect of the same server reports after temperature.
      const item = (await call(raw.url, '/generate', generateBody({}, { temperature: 2, max_new_tokens: 10 }))).body as SglangItem;
      expectClose(item.meta_info.output_token_logprobs.map((p) => p[0]), (await responseLogProbs(base, [PROMPTS[0]], [item.output_ids], 2))[0], 1e-4, 'SGLang at T');
      // Streamed, raw log-probs away from T = 1 would need the sample's end: refused, naming why; at T = 1 they stream.
      expectError(await call(raw.url, '/v1/completions', { ...body, stream: true }), 400, "'logprobs' with 'stream' true needs temperature 1");
      expect((await call(raw.url, '/v1/completions', { ...body, temperature: 1, stream: true })).status).to.equal(200);
    } finally {
      await raw.server.close();
    }
  });

  describe('fault injection (/_flowrl/faults)', () => {
    const faults = (body: Record<string, unknown>) => call(main.url, '/_flowrl/faults', body);
    afterEach(() => faults({ reset: true }));

    it('is a 404 without testFaults', async () => {
      expectError(await call(small.url, '/_flowrl/faults', { fail_next: 1 }), 404);
    });

    it('fail_next answers the next generations with its status: 5xx retryable, 4xx not', async () => {
      const client = new SglangClient(main.url, { timeoutMs: 10_000 });
      expect((await faults({ fail_next: 1, status: 500 })).status).to.equal(200);
      const e = await callError(client.generate(sample()));
      expect([e.retryable, e.status]).to.deep.equal([true, 500]);
      expect((await client.generate(sample())).outputIds).to.have.length(8);
      await faults({ fail_next: 1, status: 400 });
      expect((await callError(new VllmClient(main.url, { timeoutMs: 10_000 }).generate(sample()))).retryable).to.equal(false);
    });

    it('drop_next and hang_next (past the client timeout) are retryable errors', async () => {
      for (const client of [new SglangClient(main.url, { timeoutMs: 300 }), new VllmClient(main.url, { timeoutMs: 300 })]) {
        await faults({ drop_next: 1 });
        const dropped = await callError(client.generate(sample()));
        expect([dropped.retryable, dropped.status], dropped.message).to.deep.equal([true, undefined]);
        await faults({ hang_next: 1 });
        const started = Date.now();
        const hung = await callError(client.generate(sample()));
        expect(hung.retryable).to.equal(true);
        expect(hung.message).to.include('no answer within 0.3 s');
        expect(Date.now() - started).to.be.within(250, 3000);
        expect((await client.generate(sample())).outputIds).to.have.length(8);
      }
    });

    it('delay_ms delays generation answers', async () => {
      await faults({ delay_ms: 200 });
      const started = Date.now();
      expect((await call(main.url, '/generate', generateBody())).status).to.equal(200);
      expect(Date.now() - started).to.be.at.least(190);
    });

    it('health_fail makes health() false in both dialects', async () => {
      const clients = [new SglangClient(main.url, { timeoutMs: 10_000 }), new VllmClient(main.url, { timeoutMs: 10_000 })];
      await faults({ health_fail: true });
      expect(await Promise.all(clients.map((c) => c.health()))).to.deep.equal([false, false]);
      expectError(await call(main.url, '/health'), 503);
      await faults({ health_fail: false });
      expect(await Promise.all(clients.map((c) => c.health()))).to.deep.equal([true, true]);
    });

    it('restart serves the base weights again under version "0"', async () => {
      const loaded = await call(main.url, '/update_weights_from_disk', { model_path: await perturbedDir(), weight_version: '9' });
      expect(loaded.body).to.include({ success: true });
      expect((await call(main.url, '/model_info')).body).to.include({ weight_version: '9' });
      expect(((await faults({ restart: true })).body as { weight_version: string }).weight_version).to.equal('0');
      expect((await call(main.url, '/model_info')).body).to.include({ weight_version: '0' });
      const r = await new SglangClient(main.url, { timeoutMs: 10_000 }).generate(sample({ maxNewTokens: 10 }));
      expect(r.weightVersion).to.equal('0');
      expectClose(r.logProbs, (await responseLogProbs(base, [PROMPTS[0]], [r.outputIds]))[0], 1e-4, 'base weights');
    });

    it('logprob_skew shifts every returned logprob by exactly that amount, until reset', async () => {
      const client = new VllmClient(main.url, { timeoutMs: 10_000 });
      const plain = await client.generate(sample({ maxNewTokens: 10 }));
      await faults({ logprob_skew: 0.25 });
      const skewed = await client.generate(sample({ maxNewTokens: 10 }));
      expect(skewed.outputIds).to.deep.equal(plain.outputIds);
      skewed.logProbs.forEach((v, i) => expect(v - plain.logProbs[i]).to.be.closeTo(0.25, 1e-12));
      await faults({ reset: true });
      expect((await client.generate(sample({ maxNewTokens: 10 }))).logProbs).to.deep.equal(plain.logProbs);
    });
  });

  describe('OpenAI routes', () => {
    it('/v1/chat/completions answers an assistant message with a chat template, and a 400 without one', async () => {
      // The countdown base model has a tokenizer but no chat template: give a copy one.
      const source = fixture('countdown', 'base-model');
      const dir = path.join(tempDir(), 'chat-model');
      fs.cpSync(source, dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'chat_template.jinja'), '{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}={% endif %}');
      const tokenizer = TextTokenizer.load(dir);
      const chat = await startServer({ modelDir: dir, tokenizer });
      const plain = await startServer({ modelDir: source, tokenizer: TextTokenizer.load(source) });
      try {
        const messages = [{ role: 'user', content: '3 5 7' }];
        const answer = await call(chat.url, '/v1/chat/completions', { messages, max_tokens: 6, seed: 2, logprobs: true });
        expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
        const body = answer.body as ChatAnswer;
        const choice = body.choices[0];
        expect(choice.message.role).to.equal('assistant');
        expect(body.usage.prompt_tokens).to.equal(tokenizer.encode('3 5 7=').length);
        expect(choice.logprobs.content).to.have.length(body.usage.completion_tokens);
        // The same prompt and seed as ids through /v1/completions: the message is those ids' text.
        const ids = ((await call(chat.url, '/v1/completions', { prompt: tokenizer.encode('3 5 7='), max_tokens: 6, seed: 2, return_token_ids: true })).body as VllmAnswer).choices[0].token_ids;
        expect(ids).to.have.length(body.usage.completion_tokens);
        expect(choice.message.content).to.equal(tokenizer.decode(ids.filter((id) => id !== 2), true));
        expectError(await call(plain.url, '/v1/chat/completions', { messages }), 400, 'no chat template');
        // A template that refuses the conversation (transformers' raise_exception) is the request's fault: a 400, not a 500.
        fs.writeFileSync(path.join(dir, 'chat_template.jinja'), "{% if messages[0].role != 'user' %}{{ raise_exception('the first message must be the user') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}");
        const strict = await startServer({ modelDir: dir, tokenizer: TextTokenizer.load(dir) });
        try {
          expectError(await call(strict.url, '/v1/chat/completions', { messages: [{ role: 'assistant', content: 'x' }] }), 400, 'the chat template refused the messages');
          expect((await call(strict.url, '/v1/chat/completions', { messages, max_tokens: 2 })).status).to.equal(200);
        } finally {
          await strict.server.close();
        }
        // 30,000 short messages (beyond half of this 64-token context) are refused before the template renders them, and so are
        // 20 long ones (beyond 64 x 64 characters as JSON).
        const many = Array.from({ length: 30_000 }, () => ({ role: 'user', content: '1' }));
        expectError(await call(chat.url, '/v1/chat/completions', { messages: many }), 400, "'messages' holds 30000 messages");
        const long = Array.from({ length: 20 }, () => ({ role: 'user', content: 'x'.repeat(500) }));
        expectError(await call(chat.url, '/v1/chat/completions', { messages: long }), 400, "'messages' and 'tools' hold");
        // Top logprobs in chat: each token lists them with its bytes.
        const top = (await call(chat.url, '/v1/chat/completions', { messages, max_tokens: 3, seed: 2, logprobs: true, top_logprobs: 2 })).body as {
          choices: { logprobs: { content: { token: string; logprob: number; bytes: number[]; top_logprobs: { logprob: number }[] }[] } }[];
        };
        for (const entry of top.choices[0].logprobs.content) {
          expect(entry.top_logprobs).to.have.length(2);
          expect(entry.bytes).to.deep.equal([...Buffer.from(entry.token, 'utf8')]);
          expect(entry.top_logprobs[0].logprob).to.be.at.least(entry.top_logprobs[1].logprob);
        }
        expectError(await call(chat.url, '/v1/chat/completions', { messages, top_logprobs: 2 }), 400, "'top_logprobs' needs 'logprobs' true");
        expectError(await call(main.url, '/v1/chat/completions', { messages }), 400, 'no tokenizer');
      } finally {
        await chat.server.close();
        await plain.server.close();
      }
    });

    it("/abort_request ends the requests its rid names (as SGLang: by prefix, when one has exactly that id; abort_all for all), not every one; an aborted queued request with top logprobs answers 200; admin strings are bounded", async () => {
      const long = (rid: string) => call(main.url, '/generate', { rid, input_ids: PROMPTS[0], return_logprob: true, top_logprobs_num: 2, sampling_params: { max_new_tokens: 100, ignore_eos: true, temperature: 1 } });
      const [keep, drop] = [long('keep-1'), long('drop-1')];
      await waitFor('both to run', async () => main.server.engine.busy + main.server.engine.waiting >= 2, 20_000);
      // An empty rid, or one no request has, aborts nothing.
      expect((await call(main.url, '/abort_request', {})).status).to.equal(200);
      expect((await call(main.url, '/abort_request', { rid: 'drop' })).status).to.equal(200);
      expect((await call(main.url, '/abort_request', { rid: 'drop-1' })).status).to.equal(200);
      const [kept, dropped] = (await Promise.all([keep, drop])).map((a) => a as { status: number; body: SglangItem });
      expect([kept.status, dropped.status]).to.deep.equal([200, 200]);
      expect(kept.body.meta_info.finish_reason.type).to.equal('length');
      expect(dropped.body.meta_info.finish_reason.type).to.equal('abort');
      // Queued (generation paused in place): aborted before any token, top logprobs and all (a 500 before).
      expect((await call(main.url, '/pause_generation', { mode: 'in_place' })).status).to.equal(200);
      try {
        // A paused server's /health_generate says so instead of waiting for the resume.
        expectError(await call(main.url, '/health_generate'), 503, 'paused');
        const queued = long('queued-1');
        await waitFor('it to queue', async () => main.server.engine.waiting >= 1, 20_000);
        expect((await call(main.url, '/abort_request', { rid: 'queued-1' })).status).to.equal(200);
        const answer = (await queued) as { status: number; body: SglangItem };
        expect([answer.status, answer.body.meta_info.finish_reason.type, answer.body.output_ids]).to.deep.equal([200, 'abort', []]);
      } finally {
        await call(main.url, '/continue_generation', {});
      }
      // A 2 MB version or adapter name would be copied into every answer.
      expectError(await call(main.url, '/update_weight_version', { new_version: 'v'.repeat(300) }), 400, "'new_version' is 300 characters long");
      expectError(await call(main.url, '/v1/load_lora_adapter', { lora_name: 'a'.repeat(300), lora_path: TINY_ADAPTER }), 400, "'lora_name' is 300 characters long");
    });

    it('prompt_logprobs k: at each prompt position the prompt token with its rank, and the k most likely, against the model scored token by token', async () => {
      const prompt = PROMPTS[2];
      const answer = (await call(main.url, '/v1/completions', { prompt, max_tokens: 1, prompt_logprobs: 3 })).body as { choices: { prompt_logprobs: (Record<string, { logprob: number; rank: number }> | null)[] }[] };
      const entries = answer.choices[0].prompt_logprobs;
      expect(entries).to.have.length(prompt.length);
      expect(entries[0]).to.equal(null);
      const vocab = base.config.vocabSize;
      for (let t = 1; t < prompt.length; t++) {
        // Every token's log-prob at this position, each scored as a one-token response (another code path).
        const all = (await responseLogProbs(base, Array.from({ length: vocab }, () => prompt.slice(0, t)), Array.from({ length: vocab }, (_, id) => [id]))).map((r) => r[0]);
        const order = all.map((lp, id) => [lp, id] as const).sort((x, y) => y[0] - x[0] || x[1] - y[1]);
        const entry = entries[t]!;
        const own = entry[String(prompt[t])];
        expect(own.logprob).to.be.closeTo(all[prompt[t]], 1e-4);
        expect(own.rank).to.equal(order.findIndex(([, id]) => id === prompt[t]) + 1);
        // The prompt's token first, then the three most likely, ranked 1 to 3.
        for (const [id, value] of Object.entries(entry).filter(([, v]) => v.rank <= 3)) {
          expect(order[value.rank - 1][1], `position ${t} rank ${value.rank}`).to.equal(Number(id));
          expect(value.logprob).to.be.closeTo(all[Number(id)], 1e-4);
        }
        expect(Object.keys(entry)).to.have.length(own.rank <= 3 ? 3 : 4);
      }
    });

    it('/v1/models lists the model and the loaded adapters, by name (no server path)', async () => {
      const ids = async () => ((await call(main.url, '/v1/models')).body as { data: { id: string; parent?: string; created?: number }[] }).data;
      const listed = await ids();
      // created: when the server started, in seconds (OpenAI's field; it was missing).
      expect(listed[0].created).to.be.a('number').and.to.be.within(Date.now() / 1000 - 3600, Date.now() / 1000 + 1);
      expect(listed.map(({ created: _, ...m }) => m)).to.deep.include.members([{ id: 'tiny-qwen2', object: 'model', owned_by: 'flowrl', root: 'tiny-qwen2', max_model_len: 128 }]);
      expect(JSON.stringify(await ids())).not.to.include(path.dirname(TINY));
      expectError(await call(main.url, '/v1/load_lora_adapter', { lora_name: 'a1', lora_path: path.join(tempDir(), 'nothing') }), 404, 'No adapter found');
      expect((await call(main.url, '/v1/load_lora_adapter', { lora_name: 'a1', lora_path: TINY_ADAPTER })).status).to.equal(200);
      expect((await ids()).map((m) => [m.id, m.parent])).to.deep.equal([
        ['tiny-qwen2', undefined],
        ['a1', 'tiny-qwen2'],
      ]);
      // vLLM refuses a same-name load without load_inplace.
      expectError(await call(main.url, '/v1/load_lora_adapter', { lora_name: 'a1', lora_path: TINY_ADAPTER }), 400, 'has already been loaded', 'load_inplace');
      expect((await call(main.url, '/v1/unload_lora_adapter', { lora_name: 'a1' })).status).to.equal(200);
      expect((await ids()).map((m) => m.id)).to.deep.equal(['tiny-qwen2']);
      expectError(await call(main.url, '/v1/unload_lora_adapter', { lora_name: 'a1' }), 404, 'a1');
    });
  });
});

describe('flowrl serve: one large request leaves the server answering', function () {
  this.timeout(120_000);

  it('1,024 prompts with prompt_logprobs: /health is answered again and again while they are scored (it waited 11 s for all of them)', async () => {
    const { server, url } = await startServer({ maxQueue: 2048, maxBodyBytes: 1 << 24 });
    try {
      const prompts = Array.from({ length: 1024 }, (_, i) => [5, 17, 42, 9, i % 100, 3, 8, 77, 12, 40, 51, 6]);
      let answered = 0;
      let done = false;
      const poll = (async () => {
        while (!done) {
          expect((await call(url, '/health')).status).to.equal(200);
          if (!done) answered++;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const answer = await call(url, '/v1/completions', { prompt: prompts, max_tokens: 1, prompt_logprobs: 0 });
      done = true;
      await poll;
      expect(answer.status).to.equal(200);
      expect((answer.body as { choices: unknown[] }).choices).to.have.length(1024);
      expect(answered, '/health answers while the request ran').to.be.at.least(5);
    } finally {
      await server.close();
    }
  });
});

describe('flowrl serve: a weight change waits for the samples admitted before it', function () {
  this.timeout(120_000);

  it('an in-place adapter reload or an unload sent while a request of n 12 runs in batches of 4: every sample from the adapter it was admitted under, prompt_logprobs from the weights that sampled', async () => {
    // A second version of the adapter: its weights tripled.
    const other = path.join(tempDir(), 'lora-v2');
    fs.mkdirSync(other);
    fs.copyFileSync(path.join(TINY_ADAPTER, 'adapter_config.json'), path.join(other, 'adapter_config.json'));
    const tensors = readTensors(path.join(TINY_ADAPTER, 'adapter_model.safetensors'));
    writeSafetensors(path.join(other, 'adapter_model.safetensors'), new Map([...tensors].map(([name, t]) => [name, { shape: t.shape, data: t.data.map((v) => 3 * v) }])));
    const { server, url } = await startServer({ maxBatch: 4 });
    try {
      expect((await call(url, '/v1/load_lora_adapter', { lora_name: 'a', lora_path: TINY_ADAPTER })).status).to.equal(200);
      const ask = { model: 'a', prompt: PROMPTS[2], max_tokens: 40, n: 12, seed: 5, ignore_eos: true, return_token_ids: true, prompt_logprobs: 0 };
      type Answer = { choices: { token_ids: number[]; prompt_logprobs: unknown[] }[] };
      const answerOf = async (request: Promise<{ status: number; body: unknown }>) => {
        const answer = await request;
        expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).to.equal(200);
        return (answer.body as Answer).choices;
      };
      const running = () => waitFor('the request to decode', async () => server.engine.busy > 0, 20_000);
      const reference = await answerOf(call(url, '/v1/completions', ask));
      expect(reference).to.have.length(12);
      const request = call(url, '/v1/completions', ask);
      await running();
      const reload = call(url, '/v1/load_lora_adapter', { lora_name: 'a', lora_path: other, load_inplace: true });
      const during = await answerOf(request);
      expect(during.map((c) => c.token_ids), 'all 12 samples from the adapter as admitted').to.deep.equal(reference.map((c) => c.token_ids));
      expect(during[0].prompt_logprobs, 'prompt_logprobs from the weights that sampled').to.deep.equal(reference[0].prompt_logprobs);
      expect((await reload).status).to.equal(200);
      // The reload took effect afterwards.
      const after = await answerOf(call(url, '/v1/completions', ask));
      expect(after[0].prompt_logprobs).to.not.deep.equal(reference[0].prompt_logprobs);
      // An unload waits too: the running request is answered whole, not a 400.
      const second = call(url, '/v1/completions', ask);
      await running();
      const unload = call(url, '/v1/unload_lora_adapter', { lora_name: 'a' });
      expect((await answerOf(second)).map((c) => c.token_ids)).to.deep.equal(after.map((c) => c.token_ids));
      expect((await unload).status).to.equal(200);
      expectError(await call(url, '/v1/completions', ask), 404, 'does not exist');
    } finally {
      await server.close();
    }
  });
});

describe('flowrl serve (the command)', () => {
  it('runs as a process: prints its URL, answers /generate, exits 0 on SIGTERM', async () => {
    const child = spawnBuiltFlowrl(['serve', '--model', TINY, '--port', '0']);
    const closed = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    let stdout = '';
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.setEncoding('utf8').on('data', (d: string) => {
          stdout += d;
          const m = /listening on (http:\/\/\S+)/.exec(stdout);
          if (m) resolve(m[1]);
        });
        void closed.then((code) => reject(new Error(`exited ${code} before listening: ${stderr.slice(0, 300)}`)));
      });
      expect(url).to.match(/^http:\/\/127\.0\.0\.1:\d+$/);
      const answer = await call(url, '/generate', { input_ids: [5, 6, 7], sampling_params: { max_new_tokens: 3, sampling_seed: 1 }, return_logprob: true });
      expect(answer.status).to.equal(200);
      const item = answer.body as SglangItem;
      expect(item.meta_info.output_token_logprobs.map((p) => p[1])).to.deep.equal(item.output_ids);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await closed, stderr.slice(0, 300)).to.equal(0);
  });

  it('exits 2 without --model, and with a directory that has no config.json, naming it', async () => {
    const none = await flowrlInProcess(['serve']);
    expect(none.status).to.equal(2);
    expect(none.stderr).to.include('--model');
    const dir = tempDir();
    const empty = await flowrlInProcess(['serve', '--model', dir]);
    expect(empty.status).to.equal(2);
    expect(empty.stderr).to.include(dir).and.include('config.json');
  });
});
