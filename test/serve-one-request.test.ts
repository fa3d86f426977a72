// One request cannot crash, hang or split `flowrl serve` (the countdown model, served as a process
// the way a user starts it): sampling settings that overflowed the sampler, small bodies that ask
// for huge work, weight directories whose files lead outside the allowed root, a Host header from a
// rebinding page, a weight update in the middle of a request, and OpenAI fields that were ignored.
// After every request the process is alive and answers a fixed-seed canary identically; its peak
// resident memory stays under the bound docs/reliability.md states.
import { expect } from 'chai';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { ROOT, spawnBuiltFlowrl, tempDir } from './helpers.js';
import { call, expectError, waitFor, type SglangItem, type VllmAnswer } from './serve-helpers.js';

const MODEL = path.join(ROOT, 'examples', 'countdown', 'base-model');
/** The bound on peak resident memory docs/reliability.md gives for this model at --max-batch 8. */
const PEAK_RSS_BOUND_MB = 1536;

interface TopItem extends SglangItem {
  text: string;
  meta_info: SglangItem['meta_info'] & { finish_reason: { type: string; matched?: unknown }; output_top_logprobs?: [number, number, null][][] };
}

describe('flowrl serve: no one request crashes, hangs or splits it (the countdown model, as a process)', function () {
  this.timeout(120_000);
  const root = tempDir('flowrl-serve-root-');
  let child: ReturnType<typeof spawn>;
  let url: string;
  let exited: Promise<number | null>;
  let stderr = '';
  const canaryBody = { input_ids: [1, 5, 9, 6], sampling_params: { max_new_tokens: 12, sampling_seed: 7, temperature: 0.9, top_p: 0.95, ignore_eos: true } };
  let canary: number[];

  /** A directory under the root holding the base model's files, with `change` applied. */
  function modelCopy(name: string, change: (dir: string) => void = () => {}): string {
    const dir = path.join(root, name);
    fs.mkdirSync(dir);
    for (const file of ['config.json', 'model.safetensors']) fs.copyFileSync(path.join(MODEL, file), path.join(dir, file));
    change(dir);
    return dir;
  }
  const load = (dir: string, version = 'v-bad') => call(url, '/update_weights_from_disk', { model_path: dir, weight_version: version });

  before(async () => {
    child = spawnBuiltFlowrl(['serve', '--model', MODEL, '--port', '0', '--enable-admin', '--weights-root', root, '--max-batch', '4', '--max-queue', '256']);
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    exited = new Promise((resolve) => child.on('close', (code) => resolve(code)));
    url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        out += d;
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]);
      });
      void exited.then((code) => reject(new Error(`flowrl serve exited ${code}: ${stderr.slice(0, 400)}`)));
    });
    canary = ((await call(url, '/generate', canaryBody)).body as SglangItem).output_ids;
    expect(canary).to.have.length(12);
  });

  afterEach(async function () {
    if (this.currentTest?.state === 'failed') return;
    expect(child.exitCode, stderr).to.equal(null);
    expect(((await call(url, '/generate', canaryBody)).body as SglangItem).output_ids, 'the canary').to.deep.equal(canary);
  });

  after(async () => {
    if (!child) return;
    const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
    child.kill('SIGTERM');
    expect(await exited, stderr).to.equal(0);
    const peakMb = Number(/VmHWM:\s+(\d+) kB/.exec(status)![1]) / 1024;
    expect(peakMb, 'peak resident MB').to.be.below(PEAK_RSS_BOUND_MB);
  });

  it('a denormal temperature (1e-308, 5e-324) with top_p 0.9 samples greedily in SGLang (vLLM raises it to 0.01); it used to end the process with SIGSEGV', async () => {
    const greedy = ((await call(url, '/generate', { ...canaryBody, sampling_params: { ...canaryBody.sampling_params, temperature: 0 } })).body as SglangItem).output_ids;
    for (const temperature of [1e-308, 5e-324]) {
      const answer = await call(url, '/generate', { ...canaryBody, return_logprob: true, sampling_params: { ...canaryBody.sampling_params, temperature } });
      expect(answer.status, JSON.stringify(answer.body)).to.equal(200);
      expect((answer.body as SglangItem).output_ids).to.deep.equal(greedy);
      for (const [lp] of (answer.body as SglangItem).meta_info.output_token_logprobs) expect(Number.isFinite(lp)).to.equal(true);
      const vllm = await call(url, '/v1/completions', { prompt: [1, 5, 9, 6], max_tokens: 8, temperature, top_p: 0.9, seed: 1, logprobs: 0 });
      expect(vllm.status, JSON.stringify(vllm.body)).to.equal(200);
    }
    // Not JSON numbers, so not a temperature: the body is refused.
    expectError(await call(url, '/generate', JSON.stringify(canaryBody).replace('"temperature":0.9', '"temperature":NaN')), 400, 'not JSON');
  });

  it('small bodies asking for huge work (50,000 prompts x n 1024; a 10 MB rid copied into each answer) are a 400 naming the limit, before anything is expanded', async () => {
    const many = await call(url, '/generate', { input_ids: Array.from({ length: 50_000 }, () => [5]), sampling_params: { n: 1024, max_new_tokens: 1 } });
    expectError(many, 400, 'holds 50000 prompts', 'at most 256', '--max-queue');
    expectError(await call(url, '/generate', { input_ids: [[5], [6]], sampling_params: { n: 200 } }), 400, '400 samples (2 prompts x n 200)', '--max-queue');
    expectError(await call(url, '/v1/completions', { prompt: [[5], [6], [7]], n: 100 }), 400, '300 samples');
    expectError(await call(url, '/generate', { ...canaryBody, rid: 'r'.repeat(10 * 2 ** 20) }), 400, "'rid' is 10485760 characters long; at most 256");
    expectError(await call(url, '/generate', { ...canaryBody, sampling_params: { ...canaryBody.sampling_params, stop: Array.from({ length: 17 }, () => 'x') } }), 400, 'at most 16');
  });

  it('weights load only from regular files inside the root: ../ shards, links (to files, /dev/zero), FIFOs, huge JSON, 3e7 layers, another architecture and NaN weights are each a 400 at once, and nothing is read', async () => {
    const cases: [string, string, string[]][] = [
      [modelCopy('dotdot', (d) => {
        fs.rmSync(path.join(d, 'model.safetensors'));
        fs.writeFileSync(path.join(d, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { 'model.embed_tokens.weight': '../../outside.safetensors' } }));
      }), 'dotdot', ['is not a file name in']],
      [modelCopy('linked-weights', (d) => {
        fs.rmSync(path.join(d, 'model.safetensors'));
        fs.symlinkSync(path.join(MODEL, 'model.safetensors'), path.join(d, 'model.safetensors'));
      }), 'linked weights', ['model.safetensors: a symbolic link']],
      [modelCopy('linked-config', (d) => {
        fs.rmSync(path.join(d, 'config.json'));
        fs.symlinkSync('/etc/passwd', path.join(d, 'config.json'));
      }), 'a config linked outside', ['config.json: a symbolic link']],
      [modelCopy('zero', (d) => {
        fs.rmSync(path.join(d, 'config.json'));
        fs.symlinkSync('/dev/zero', path.join(d, 'config.json'));
      }), 'a config linked to /dev/zero', ['symbolic link']],
      [modelCopy('fifo', (d) => {
        fs.rmSync(path.join(d, 'config.json'));
        execFileSync('mkfifo', [path.join(d, 'config.json')]);
      }), 'a FIFO config', ['config.json: not a regular file']],
      [modelCopy('huge-config', (d) => fs.writeFileSync(path.join(d, 'config.json'), ' '.repeat(17 * 2 ** 20))), 'a 17 MB config', ['may hold at most 16777216']],
      [modelCopy('layers', (d) => {
        const config = JSON.parse(fs.readFileSync(path.join(d, 'config.json'), 'utf8')) as Record<string, unknown>;
        fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...config, num_hidden_layers: 3e7 }));
      }), '3e7 layers', ["key 'num_hidden_layers' is 30000000; at most 1024"]],
      [modelCopy('wider', (d) => {
        const config = JSON.parse(fs.readFileSync(path.join(d, 'config.json'), 'utf8')) as Record<string, unknown>;
        fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...config, num_hidden_layers: 4 }));
      }), 'another architecture', ['numLayers 4 (served: 3)', "keep the served model's architecture"]],
      [modelCopy('nan', (d) => {
        const file = path.join(d, 'model.safetensors');
        const tensors = readTensors(file);
        const [, first] = [...tensors].sort(([a], [b]) => a.localeCompare(b))[0];
        first.data[3] = NaN;
        writeSafetensors(file, tensors);
      }), 'NaN weights', ['holds NaN at flat index 3', 'weights must be finite']],
    ];
    for (const [dir, label, fragments] of cases) {
      const started = Date.now();
      const answer = await load(dir);
      expect(Date.now() - started, label).to.be.below(5000);
      expectError(answer, 400, ...fragments);
      expect(JSON.stringify(answer.body), label).not.to.include('root:x:0');
    }
    expect(((await call(url, '/model_info')).body as { weight_version: string }).weight_version, 'a refused load changes nothing').to.equal('0');
    // An adapter whose weights are a link, too.
    const adapter = path.join(root, 'adapter');
    fs.mkdirSync(adapter);
    fs.writeFileSync(path.join(adapter, 'adapter_config.json'), JSON.stringify({ peft_type: 'LORA', r: 2, lora_alpha: 4, target_modules: ['q_proj'] }));
    fs.symlinkSync(path.join(MODEL, 'model.safetensors'), path.join(adapter, 'adapter_model.safetensors'));
    expectError(await call(url, '/load_lora_adapter', { lora_name: 'a', lora_path: adapter }), 400, 'adapter_model.safetensors: a symbolic link');
    // Outside the root: the same 403 whether or not the path exists.
    const missing = expectError(await load('/no/such/dir'), 403, 'outside the allowed roots');
    const present = expectError(await load('/etc'), 403, 'outside the allowed roots');
    expect(missing.message.replace('/no/such/dir', 'P')).to.equal(present.message.replace('/etc', 'P'));
  });

  it("a Host header naming another site (a DNS-rebinding page) is a 400; IP addresses and localhost are served", async () => {
    const { port } = new URL(url);
    const get = (host: string) =>
      new Promise<number>((resolve, reject) => {
        http
          .get({ host: '127.0.0.1', port, path: '/health', headers: { host } }, (res) => {
            res.resume();
            resolve(res.statusCode!);
          })
          .on('error', reject);
      });
    expect(await get(`attacker.example:${port}`)).to.equal(400);
    expect(await get('attacker.example')).to.equal(400);
    expect(await get(`127.0.0.1:${port}`)).to.equal(200);
    expect(await get(`localhost:${port}`)).to.equal(200);
    expect(await get(`[::1]:${port}`)).to.equal(200);
  });

  it('a weight update sent while a request with n above --max-batch runs waits for all of it: every sample has one weight version', async () => {
    const copy = modelCopy('same-weights');
    const request = call(url, '/generate', { input_ids: [1, 5, 9], sampling_params: { n: 12, max_new_tokens: 40, sampling_seed: 3, ignore_eos: true } });
    await waitFor('the request to start', async () => ((await call(url, '/v1/loads')).body as { num_running_reqs: number }).num_running_reqs > 0, 20_000);
    const update = load(copy, 'v2');
    const items = (await request).body as SglangItem[];
    expect((await update).status).to.equal(200);
    expect(items.map((item) => item.meta_info.weight_version)).to.deep.equal(Array(12).fill('0'));
    expect(((await call(url, '/model_info')).body as { weight_version: string }).weight_version).to.equal('v2');
  });

  it('stop strings end a sample and cut its text; top logprobs are the most likely tokens; stream answers in events (each was ignored silently)', async () => {
    const full = (await call(url, '/generate', canaryBody)).body as TopItem;
    const stop = full.text.slice(3, 4);
    const cut = (await call(url, '/generate', { ...canaryBody, sampling_params: { ...canaryBody.sampling_params, stop } })).body as TopItem;
    expect(cut.text).to.equal(full.text.slice(0, full.text.indexOf(stop)));
    expect(cut.meta_info.finish_reason).to.deep.equal({ type: 'stop', matched: stop });
    expect(full.output_ids.slice(0, cut.output_ids.length)).to.deep.equal(cut.output_ids);
    const vllm = (await call(url, '/v1/completions', { prompt: [1, 5, 9, 6], max_tokens: 12, temperature: 0.9, top_p: 0.95, seed: 7, ignore_eos: true, stop: [stop], include_stop_str_in_output: true })).body as {
      choices: { text: string; finish_reason: string; stop_reason: unknown }[];
    };
    expect(vllm.choices[0].text.endsWith(stop)).to.equal(true);
    expect([vllm.choices[0].finish_reason, vllm.choices[0].stop_reason]).to.deep.equal(['stop', stop]);

    const top = (await call(url, '/generate', { ...canaryBody, return_logprob: true, top_logprobs_num: 3 })).body as TopItem;
    expect(top.meta_info.output_top_logprobs).to.have.length(top.output_ids.length);
    top.meta_info.output_top_logprobs!.forEach((alternatives, t) => {
      expect(alternatives).to.have.length(3);
      const lps = alternatives.map(([lp]) => lp);
      expect(lps).to.deep.equal([...lps].sort((a, b) => b - a));
      // The sampled token's log-prob is among them when it is one of the three most likely.
      const [sampledLp, id] = top.meta_info.output_token_logprobs[t];
      const listed = alternatives.find(([, alt]) => alt === id);
      if (listed) expect(listed[0]).to.be.closeTo(sampledLp, 1e-9);
      else expect(sampledLp).to.be.at.most(lps[2]);
    });
    const greedy = (await call(url, '/v1/completions', { prompt: [1, 5, 9, 6], max_tokens: 5, temperature: 0, logprobs: 2, return_tokens_as_token_ids: true })).body as {
      choices: { logprobs: { tokens: string[]; token_logprobs: number[]; top_logprobs: Record<string, number>[] } }[];
    };
    const lp = greedy.choices[0].logprobs;
    lp.top_logprobs.forEach((entries, t) => {
      expect(Object.keys(entries)).to.have.length(2);
      expect(Math.max(...Object.values(entries))).to.be.closeTo(lp.token_logprobs[t], 1e-9);
      expect(entries[lp.tokens[t]]).to.be.closeTo(lp.token_logprobs[t], 1e-9);
    });
    // /generate streams as SGLang does: cumulative text and ids, the whole item last, then [DONE].
    const generated = String((await call(url, '/generate', { ...canaryBody, rid: 'r1', stream: true })).body).split('\n\n').filter(Boolean);
    expect(generated.at(-1)).to.equal('data: [DONE]');
    const items = generated.slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)) as SglangItem);
    expect(items.map((item) => item.output_ids)).to.deep.equal(canary.map((_, t) => canary.slice(0, t + 1)).concat([canary]));
    expect(items.slice(0, -1).every((item) => item.meta_info.finish_reason === null)).to.equal(true);
    expect(items.at(-1)).to.deep.equal((await call(url, '/generate', { ...canaryBody, rid: 'r1' })).body);
    // With return_logprob each event holds the log-probs so far (cumulative, as SGLang's default), the last the whole item's.
    const scored = { ...canaryBody, rid: 'r2', return_logprob: true, top_logprobs_num: 2 };
    const scoredEvents = String((await call(url, '/generate', { ...scored, stream: true })).body).split('\n\n').filter(Boolean).slice(0, -1).map((e) => JSON.parse(e.slice('data: '.length)) as TopItem);
    const scoredWhole = (await call(url, '/generate', scored)).body as TopItem;
    expect(scoredEvents.at(-1)).to.deep.equal(scoredWhole);
    scoredEvents.forEach((item) => {
      const n = item.output_ids.length;
      expect(item.meta_info.output_token_logprobs).to.deep.equal(scoredWhole.meta_info.output_token_logprobs.slice(0, n));
      expect(item.meta_info.output_top_logprobs).to.deep.equal(scoredWhole.meta_info.output_top_logprobs!.slice(0, n));
    });
    // /v1/completions streams (test/serve-streaming.test.ts): the events' text is the whole answer's.
    const streamed = await call(url, '/v1/completions', { prompt: [1, 5], max_tokens: 6, seed: 4, stream: true });
    const events = String(streamed.body).split('\n\n').filter(Boolean);
    expect(events.at(-1)).to.equal('data: [DONE]');
    const text = events.slice(0, -1).map((e) => (JSON.parse(e.slice('data: '.length)) as VllmAnswer).choices[0].text).join('');
    expect(text).to.equal((((await call(url, '/v1/completions', { prompt: [1, 5], max_tokens: 6, seed: 4 })).body) as VllmAnswer).choices[0].text);
  });
});
