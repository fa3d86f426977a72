// flowrl serve against hostile and careless clients: oversized prompts and lengths, deep and
// mistyped bodies, missing keys, cross-origin text/plain posts, admin routes and paths outside the
// allowed roots, a queue that refuses a request whole, an engine that breaks, HTTP kept answering
// while a batch decodes, and SIGTERM draining every request taken. The server must answer each
// correctly and end within a memory bound.
import { expect } from 'chai';
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import net from 'node:net';
import { readTensors, writeSafetensors } from '../core-adapters/model/safetensors.js';
import { SglangClient, VllmClient } from '../core-adapters/rollout/clients.js';
import { FlowrlServer } from '../core-adapters/rollout/serve.js';
import { flowrlInProcess, spawnBuiltFlowrl, tempDir } from './helpers.js';
import { call, callError, expectError, PROMPTS, sample, serveOptions, startServer, TINY, TINY_ADAPTER, waitFor, waiting, type SglangItem, type VllmAnswer } from './serve-helpers.js';

type Started = Awaited<ReturnType<typeof startServer>>;

const gen = (over: Record<string, unknown> = {}, params: Record<string, unknown> = {}) => ({ input_ids: PROMPTS[0], sampling_params: { max_new_tokens: 4, sampling_seed: 3, ...params }, return_logprob: true, ...over });

describe('flowrl serve under hostile clients', () => {
  let s: Started;
  before(async () => {
    s = await startServer({ maxQueue: 8 }, true);
  });
  after(() => s?.server.close());

  describe('lengths: refused with a 400 before any work', () => {
    it('a prompt plus new tokens past the context (128), in each engine\'s words', async () => {
      const long = Array.from({ length: 100 }, (_, i) => i % 100);
      expectError(await call(s.url, '/generate', gen({ input_ids: long }, { max_new_tokens: 40 })), 400, "maximum context length of 128 tokens", 'total of 140 tokens');
      expectError(await call(s.url, '/generate', gen({ input_ids: Array.from({ length: 128 }, () => 5) })), 400, 'longer than the model', '128');
      expectError(await call(s.url, '/v1/completions', { prompt: long, max_tokens: 40 }), 400, "maximum context length is 128 tokens", 'requested 40 output tokens', 'contains 100 input tokens');
      // vLLM: max_tokens omitted is 16, cut to what the context leaves.
      const rest = (await call(s.url, '/v1/completions', { prompt: Array.from({ length: 120 }, () => 5), seed: 1, return_token_ids: true, ignore_eos: true })).body as VllmAnswer;
      expect(rest.choices[0].token_ids).to.have.length(8);
      expect(s.server.engine.batchesRun).to.be.above(0);
    });

    it('a 2 MB id array and a 10^9 max_new_tokens are refused at once, with nothing queued or allocated', async () => {
      const tensors = tf.memory().numTensors;
      const batches = s.server.engine.batchesRun;
      const huge = JSON.stringify(gen({ input_ids: Array.from({ length: 400_000 }, () => 5) }));
      expectError(await call(s.url, '/generate', huge), 400, 'holds 400000 tokens', 'context length is 128');
      expectError(await call(s.url, '/generate', gen({}, { max_new_tokens: 1e9 })), 400, 'maximum context length');
      expectError(await call(s.url, '/v1/completions', { prompt: PROMPTS[0], max_tokens: 2 ** 40 }), 400, 'maximum context length');
      expect(s.server.engine.batchesRun).to.equal(batches);
      expect(tf.memory().numTensors).to.equal(tensors);
    });

    it('a batch is sized by the KV budget: requests over it are a 400 naming --max-total-tokens, the rest run in batches that fit', async () => {
      const small = await startServer({ maxTotalTokens: 40 });
      try {
        expectError(await call(small.url, '/generate', gen({}, { max_new_tokens: 40 })), 400, '44 KV-cache slots', '--max-total-tokens');
        const before = small.server.engine.batchesRun;
        // Each needs 4 + 16 = 20 slots: two fit a batch of 40, so four take two batches.
        const answers = await Promise.all(Array.from({ length: 4 }, (_, i) => call(small.url, '/generate', gen({}, { max_new_tokens: 16, sampling_seed: i, ignore_eos: true }))));
        answers.forEach((a) => expect((a.body as SglangItem).output_ids).to.have.length(16));
        expect(small.server.engine.batchesRun - before).to.equal(2);
      } finally {
        await small.server.close();
      }
    });
  });

  describe('bodies', () => {
    it('10,000-deep JSON is a 400, not a 500', async () => {
      expectError(await call(s.url, '/generate', '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000)), 400, 'nests deeper than 32');
      expectError(await call(s.url, '/generate', '['.repeat(10_000) + ']'.repeat(10_000)), 400, 'nests deeper');
      // Brackets inside strings do not count.
      expect((await call(s.url, '/generate', gen({ rid: '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[' }))).status).to.equal(200);
    });

    it('input_ids must be ids: a string there is a 400, not a text prompt', async () => {
      expectError(await call(s.url, '/generate', gen({ input_ids: 'hello' })), 400, "'input_ids' must be a non-empty list of token ids");
      expectError(await call(s.url, '/generate', gen({ input_ids: ['hello'] })), 400, "'input_ids' holds \"hello\"");
    });

    it('mistyped, out-of-range and unsupported sampling fields are a 400 naming the field', async () => {
      expectError(await call(s.url, '/generate', gen({}, { top_k: 0 })), 400, "'sampling_params.top_k' must be -1 (off) or at least 1");
      expectError(await call(s.url, '/generate', gen({}, { repetition_penalty: 1.2 })), 400, "'sampling_params.repetition_penalty' must be 1", 'does not apply');
      expectError(await call(s.url, '/v1/completions', { prompt: PROMPTS[0], min_p: 0.1 }), 400, "'min_p' must be 0");
      expectError(await call(s.url, '/v1/completions', { prompt: PROMPTS[0], seed: 'x' }), 400, "'seed' must be an integer");
      expectError(await call(s.url, '/v1/completions', { prompt: PROMPTS[0], seed: 2 ** 60 }), 400, "'seed'");
      // vLLM takes top_k 0 as off.
      expect((await call(s.url, '/v1/completions', { prompt: PROMPTS[0], top_k: 0, max_tokens: 2 })).status).to.equal(200);
    });

    it('seeds past 32 bits draw their own streams (vLLM seeds are 64-bit), and vLLM seed -1 is no seed', async () => {
      const ids = async (seed: number) => ((await call(s.url, '/v1/completions', { prompt: PROMPTS[0], max_tokens: 12, seed, return_token_ids: true, ignore_eos: true })).body as VllmAnswer).choices[0].token_ids;
      const [a, b, c] = await Promise.all([2 ** 40 + 7, 2 ** 40 + 2 ** 33 + 7, 7].map(ids));
      expect(a).to.deep.equal(await ids(2 ** 40 + 7));
      expect(a).not.to.deep.equal(b);
      expect(a).not.to.deep.equal(c);
      const unseeded = await Promise.all([ids(-1), ids(-1), ids(-1)]);
      expect(new Set(unseeded.map((x) => x.join(' '))).size).to.be.above(1);
    });

    it('a request the queue cannot hold whole is refused whole: 503, and none of its samples stay queued', async () => {
      await call(s.url, '/pause_generation', { mode: 'in_place' });
      try {
        const queued = call(s.url, '/generate', gen({}, { n: 5 }));
        await waitFor('five samples to queue', async () => (await waiting(s.url)) === 5);
        expectError(await call(s.url, '/generate', gen({}, { n: 4 })), 503, 'retry later');
        expect(await waiting(s.url)).to.equal(5);
        await call(s.url, '/continue_generation', {});
        expect((await queued).body).to.have.length(5);
      } finally {
        await call(s.url, '/continue_generation', {});
      }
    });
  });

  describe('who may call', () => {
    it('with --api-key every route needs "Authorization: Bearer <key>" (401 otherwise); the clients send it', async () => {
      const keyed = await startServer({ apiKey: 'sekret' });
      try {
        for (const [route, body] of [['/health', undefined], ['/v1/models', undefined], ['/generate', gen()], ['/pause_generation', {}], ['/collective_rpc', { method: 'reload_weights' }]] as const) {
          expectError(await call(keyed.url, route, body), 401, 'Unauthorized');
          expectError(await call(keyed.url, route, body, undefined, { authorization: 'Bearer wrong' }), 401);
        }
        expect((await call(keyed.url, '/health', undefined, undefined, { authorization: 'Bearer sekret' })).status).to.equal(200);
        expect(await new SglangClient(keyed.url, { timeoutMs: 10_000 }).health()).to.equal(false);
        for (const client of [new SglangClient(keyed.url, { timeoutMs: 10_000, apiKey: 'sekret' }), new VllmClient(keyed.url, { timeoutMs: 10_000, apiKey: 'sekret' })]) {
          expect(await client.health()).to.equal(true);
          expect((await client.generate(sample())).outputIds).to.have.length(8);
        }
      } finally {
        await keyed.server.close();
      }
    });

    it('a cross-origin text/plain or form post (which a web page can send without asking) is a 415, and changes nothing', async () => {
      const version = s.server.engine.weightVersion;
      for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
        const res = await fetch(`${s.url}/update_weight_version`, { method: 'POST', headers: { 'content-type': type, origin: 'https://evil.example' }, body: JSON.stringify({ new_version: 'pwned' }) });
        expect(res.status, type).to.equal(415);
        expect(res.headers.get('access-control-allow-origin')).to.equal(null);
      }
      // An empty POST without a type (fetch's no-cors) cannot pause the server either.
      expect((await fetch(`${s.url}/pause_generation`, { method: 'POST' })).status).to.equal(415);
      expect(s.server.engine.paused).to.equal(false);
      // A preflight is never granted.
      const preflight = await fetch(`${s.url}/update_weight_version`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
      expect(preflight.headers.get('access-control-allow-origin')).to.equal(null);
      expect(s.server.engine.weightVersion).to.equal(version);
    });

    it('admin routes answer 404 unless enabled; loading needs a path under a --weights-root (403 otherwise, symbolic links resolved)', async () => {
      const plain = await startServer({ enableAdmin: false });
      const rooted = await startServer({ weightsRoots: [path.dirname(TINY_ADAPTER)] });
      try {
        for (const route of ['/update_weights_from_disk', '/load_lora_adapter', '/v1/load_lora_adapter', '/pause_generation', '/pause', '/collective_rpc', '/update_weight_version', '/abort_request']) {
          expectError(await call(plain.url, route, { model_path: TINY }), 404, '--enable-admin');
        }
        expect((await call(plain.url, '/generate', gen())).status).to.equal(200);
        const outside = tempDir();
        fs.cpSync(TINY_ADAPTER, path.join(outside, 'adapter'), { recursive: true });
        expectError(await call(rooted.url, '/load_lora_adapter', { lora_name: 'x', lora_path: path.join(outside, 'adapter') }), 403, 'outside the allowed roots');
        expectError(await call(rooted.url, '/update_weights_from_disk', { model_path: '/etc' }), 403, 'outside the allowed roots');
        // A link inside a root that points outside it is outside.
        const link = path.join(path.dirname(TINY_ADAPTER), `escape-${process.pid}`);
        fs.symlinkSync(outside, link);
        try {
          expectError(await call(rooted.url, '/load_lora_adapter', { lora_name: 'x', lora_path: path.join(link, 'adapter') }), 403, 'outside');
        } finally {
          fs.unlinkSync(link);
        }
        expect((await call(rooted.url, '/load_lora_adapter', { lora_name: 'x', lora_path: TINY_ADAPTER })).status).to.equal(200);
        const none = await startServer({ weightsRoots: [] });
        try {
          expectError(await call(none.url, '/update_weights_from_disk', { model_path: TINY }), 403, '--weights-root');
        } finally {
          await none.server.close();
        }
      } finally {
        await plain.server.close();
        await rooted.server.close();
      }
    });
  });

  describe('keys, connections and uploads', () => {
    it("SGLang's --admin-api-key: admin routes take only the admin key, the others only the API key; an empty key is refused at start", async () => {
      const keyed = await startServer({ apiKey: 'user-key', adminApiKey: 'admin-key' });
      const adminOnly = await startServer({ adminApiKey: 'admin-key' });
      const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
      try {
        expect((await call(keyed.url, '/generate', gen(), undefined, bearer('user-key'))).status).to.equal(200);
        expectError(await call(keyed.url, '/generate', gen(), undefined, bearer('admin-key')), 401, 'API key');
        expectError(await call(keyed.url, '/update_weight_version', { new_version: 'x' }, undefined, bearer('user-key')), 401, '--admin-api-key');
        expect((await call(keyed.url, '/update_weight_version', { new_version: 'x', abort_all_requests: false }, undefined, bearer('admin-key'))).status).to.equal(200);
        // The rollout client with both keys syncs weights and samples through them.
        const client = new SglangClient(keyed.url, { timeoutMs: 10_000, apiKey: 'user-key', adminApiKey: 'admin-key' });
        await client.loadWeights(TINY, 'v1', false);
        expect((await client.generate(sample())).outputIds).to.have.length(8);
        expect(keyed.server.engine.weightVersion).to.equal('v1');
        // Only an admin key: the other routes are open, as in SGLang.
        expect((await call(adminOnly.url, '/generate', gen())).status).to.equal(200);
        expectError(await call(adminOnly.url, '/pause_generation', {}), 401, '--admin-api-key');
      } finally {
        await keyed.server.close();
        await adminOnly.server.close();
      }
      expect(() => new FlowrlServer(serveOptions({ apiKey: '' }))).to.throw('--api-key is empty');
      expect(() => new FlowrlServer(serveOptions({ adminApiKey: '  ' }))).to.throw('--admin-api-key is empty');
      const cli = await flowrlInProcess(['serve', '--model', TINY, '--api-key', '']);
      expect(cli.status).to.equal(2);
      expect(cli.stderr).to.include('--api-key is empty');
      // Beyond loopback without a key: a warning first (this one then stops at the empty admin key).
      const open = await flowrlInProcess(['serve', '--model', TINY, '--host', '0.0.0.0', '--admin-api-key', '']);
      expect(open.status).to.equal(2);
      expect(open.stderr).to.include('warning: listening on 0.0.0.0 without --api-key').and.include('--admin-api-key is empty');
    });

    it('a socket that sends no request, or a body that never ends, is closed; uploads past 4 bodies at once are a 503; everyone else is served meanwhile', async () => {
      const small = await startServer({ headersTimeoutMs: 300, requestTimeoutMs: 600, maxBodyBytes: 2 ** 20 });
      // Uploads go to a server whose request timeout cannot fire first on a slow machine (a 408
      // before the fifth body arrives would free the bytes the 503 is about).
      const uploads = await startServer({ headersTimeoutMs: 30_000, requestTimeoutMs: 30_000, maxBodyBytes: 2 ** 20 });
      const open = (first?: string, url = small.url) =>
        new Promise<{ socket: net.Socket; closed: Promise<string> }>((resolve) => {
          const socket = net.connect(Number(new URL(url).port), '127.0.0.1', () => {
            if (first) socket.write(first);
            resolve({ socket, closed });
          });
          let got = '';
          socket.on('data', (d) => (got += String(d)));
          socket.on('error', () => undefined);
          const closed = new Promise<string>((done) => socket.on('close', () => done(got.split('\r\n')[0])));
        });
      try {
        const idle = await Promise.all(Array.from({ length: 30 }, () => open()));
        const slowBody = await open(`POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"a":`);
        expect((await call(small.url, '/generate', gen())).status, 'served beside 31 stalled sockets').to.equal(200);
        await Promise.all(idle.map((c) => c.closed));
        expect(await slowBody.closed).to.equal('HTTP/1.1 408 Request Timeout');
        // Four bodies of 0.9 MiB held open, then a fifth: past 4 MiB in flight it is refused.
        const head = (n: number) => `POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${n}\r\n\r\n`;
        const held = await Promise.all(Array.from({ length: 5 }, () => open(head(2 ** 20 - 10) + ' '.repeat(0.9 * 2 ** 20), uploads.url)));
        const refused = await Promise.race(held.map((c) => c.closed));
        expect(refused).to.equal('HTTP/1.1 503 Service Unavailable');
        expect((await call(uploads.url, '/generate', gen())).status).to.equal(200);
        held.forEach((c) => c.socket.destroy());
        // The server sees the closes on its side a moment later: within 5 s every byte is released.
        const releasedBy = Date.now() + 5000;
        while ((uploads.server['bodyBytes' as keyof FlowrlServer] as unknown as number) > 0 && Date.now() < releasedBy) await new Promise((r) => setTimeout(r, 20));
        expect(uploads.server['bodyBytes' as keyof FlowrlServer], 'bytes in flight released').to.equal(0);
      } finally {
        await small.server.close();
        await uploads.server.close();
      }
    });
  });

  describe('the engine', () => {
    it('weights that overflow to NaN logits poison the engine, which says so through /health (never a crash)', async () => {
      const dir = path.join(tempDir(), 'overflowing');
      fs.cpSync(TINY, dir, { recursive: true });
      const file = path.join(dir, 'model.safetensors');
      const tensors = readTensors(file);
      tensors.get('model.norm.weight')!.data.fill(3e38);
      writeSafetensors(file, tensors);
      const poisoned = await startServer();
      try {
        expect((await call(poisoned.url, '/update_weights_from_disk', { model_path: dir })).status, 'finite weights load').to.equal(200);
        expectError(await call(poisoned.url, '/generate', gen()), 500, 'NaN or infinite logits');
        expectError(await call(poisoned.url, '/health'), 503, 'NaN or infinite logits');
      } finally {
        await poisoned.server.close();
      }
    });

    it("a pause 'wait' that a resume overtook does not pause (it used to pause after the resume)", async () => {
      const running = call(s.url, '/generate', gen({}, { max_new_tokens: 60, ignore_eos: true, n: 4 }));
      await waitFor('the batch to start', async () => s.server.engine.busy > 0);
      const paused = call(s.url, '/pause?mode=wait', {});
      expect((await call(s.url, '/resume', {})).status).to.equal(200);
      await Promise.all([running, paused]);
      expect(((await call(s.url, '/is_paused')).body as { is_paused: boolean }).is_paused).to.equal(false);
      expect((await call(s.url, '/generate', gen())).status).to.equal(200);
    });

    it('keeps answering /health and pause while a batch decodes; pause abort ends it with the ids sampled so far', async () => {
      const order: string[] = [];
      const long = call(s.url, '/generate', gen({}, { max_new_tokens: 100, ignore_eos: true, n: 8 })).then((a) => (order.push('generate'), a));
      await waitFor('the batch to start', async () => s.server.engine.busy > 0);
      await call(s.url, '/health').then(() => order.push('health'));
      expect(order).to.deep.equal(['health']);
      await call(s.url, '/pause_generation', { mode: 'abort' });
      const items = (await long).body as SglangItem[];
      await call(s.url, '/continue_generation', {});
      for (const item of items) {
        expect(item.meta_info.finish_reason.type).to.equal('abort');
        expect(item.output_ids.length).to.be.within(1, 99);
      }
    });

    it('an engine that breaks answers 500 (never 4xx), fails /health with 503 and refuses later samples with 5xx', async () => {
      const broken = await startServer({}, true);
      try {
        await call(broken.url, '/_flowrl/faults', { break_next: 1 });
        expectError(await call(broken.url, '/generate', gen()), 500, 'must be restarted', 'memory access out of bounds');
        expectError(await call(broken.url, '/health'), 503, 'must be restarted');
        expect(await new SglangClient(broken.url, { timeoutMs: 10_000 }).health()).to.equal(false);
        const e = await callError(new VllmClient(broken.url, { timeoutMs: 10_000 }).generate(sample()));
        expect([e.status, e.retryable]).to.deep.equal([500, true]);
      } finally {
        await broken.server.close();
      }
    });

    it('hostile traffic leaves no tensors behind, memory within 200 MB of where it was, and the server answering correctly', async () => {
      const tensors = tf.memory().numTensors;
      const rss = process.memoryUsage().rss;
      const before = ((await call(s.url, '/generate', gen())).body as SglangItem).output_ids;
      await Promise.all([
        call(s.url, '/generate', '{"a":'.repeat(5000)),
        call(s.url, '/generate', gen({ input_ids: Array.from({ length: 5000 }, () => 3) })),
        call(s.url, '/v1/completions', { prompt: PROMPTS[1], max_tokens: 1e12 }),
        call(s.url, '/generate', gen({}, { max_new_tokens: 20, n: 3 })),
        call(s.url, '/pause_generation', { mode: 'abort' }).then(() => call(s.url, '/continue_generation', {})),
      ]);
      await call(s.url, '/continue_generation', {});
      expect(((await call(s.url, '/generate', gen())).body as SglangItem).output_ids).to.deep.equal(before);
      expect(tf.memory().numTensors).to.equal(tensors);
      expect((process.memoryUsage().rss - rss) / 2 ** 20).to.be.below(200);
    });
  });
});

describe('flowrl serve (the process) under signals and faults', () => {
  /** Starts `flowrl serve` with `args`; resolves with its URL, its exit and its stderr. */
  function serve(args: string[]) {
    const child = spawnBuiltFlowrl(['serve', '--model', TINY, '--port', '0', ...args]);
    let stdout = '';
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const url = new Promise<string>((resolve, reject) => {
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
        const m = /listening on (http:\/\/\S+)/.exec(stdout);
        if (m) resolve(m[1]);
      });
      void exited.then((code) => reject(new Error(`exited ${code} before listening: ${stderr.slice(0, 300)}`)));
    });
    return { child, url, exited, stderr: () => stderr };
  }

  it('SIGTERM drains: all 20 requests waiting are answered, a later one gets 503 or a refused connection, and it exits 0', async () => {
    const p = serve([]);
    try {
      const url = await p.url;
      const answers = Array.from({ length: 20 }, (_, i) => call(url, '/generate', gen({}, { max_new_tokens: 60, sampling_seed: i, ignore_eos: true })).catch((e: Error) => ({ status: -1, body: e.message })));
      const load = async () => (await call(url, '/v1/loads')).body as { num_running_reqs: number; num_waiting_reqs: number };
      await waitFor('all 20 to be taken', async () => ((l) => l.num_running_reqs + l.num_waiting_reqs === 20)(await load()), 20_000);
      p.child.kill('SIGTERM');
      // The signal is handled between decode steps: once /health stops answering 200 it has been.
      await waitFor('the drain to start', async () => (await call(url, '/health').catch(() => ({ status: -1 }))).status !== 200, 20_000);
      const late = await call(url, '/generate', gen()).catch((e: Error) => ({ status: -1, body: e.message }));
      expect(late.status, JSON.stringify(late.body)).to.be.oneOf([503, -1]);
      const done = await Promise.all(answers);
      expect(done.map((a) => a.status)).to.deep.equal(Array(20).fill(200));
      done.forEach((a) => expect((a.body as SglangItem).output_ids).to.have.length(60));
      expect(await p.exited, p.stderr()).to.equal(0);
    } finally {
      p.child.kill('SIGKILL');
    }
  });

  it('an engine fault stops the process with exit 1 and the reason, so a supervisor restarts it', async () => {
    const p = serve(['--test-faults']);
    try {
      const url = await p.url;
      await call(url, '/_flowrl/faults', { break_next: 1 });
      expect((await call(url, '/generate', gen())).status).to.equal(500);
      expect(await p.exited).to.equal(1);
      expect(p.stderr()).to.include('the engine failed while sampling');
    } finally {
      p.child.kill('SIGKILL');
    }
  });

  it('--help prints the usage and exits 0; a --weights-root that does not exist exits 2 naming it', async () => {
    const help = await flowrlInProcess(['serve', '--help']);
    expect(help.status).to.equal(0);
    expect(help.stdout).to.include('--api-key').and.include('--enable-admin');
    const missing = path.join(tempDir(), 'nope');
    const bad = await flowrlInProcess(['serve', '--model', TINY, '--enable-admin', '--weights-root', missing]);
    expect(bad.status).to.equal(2);
    expect(bad.stderr).to.include(missing);
  });
});
