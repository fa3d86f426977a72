// Measures flowrl serve under the hostile clients of the serve tests, on a model of your choice,
// for the README's reliability figures: /health latency while a batch decodes, how fast oversized
// requests are refused, the server's peak memory across hostile traffic, and a SIGTERM drain.
//   node --import tsx scripts/serve-probe.ts [--model DIR] [--tokens N] [--rows N]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { model: { type: 'string', default: 'test/fixtures/tiny-qwen2' }, tokens: { type: 'string', default: '64' }, rows: { type: 'string', default: '8' } } });
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const model = path.resolve(values.model!);
const vocab = (JSON.parse(fs.readFileSync(path.join(model, 'config.json'), 'utf8')) as { vocab_size: number }).vocab_size;
const tokens = Number(values.tokens);
const rows = Number(values.rows);

const child = spawn(process.execPath, ['--import', 'tsx', '--no-experimental-require-module', path.join(ROOT, 'core-adapters/cli/main.ts'), 'serve', '--model', model, '--port', '0', '--enable-admin', '--weights-root', os.tmpdir()], { cwd: ROOT });
let out = '';
const url = await new Promise<string>((resolve, reject) => {
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    const m = /listening on (http:\/\/\S+)/.exec(out);
    if (m) resolve(m[1]);
  });
  child.on('exit', (code) => reject(new Error(`flowrl serve exited ${code}`)));
});
const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));

const post = (route: string, body: unknown) => fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
const peakRssMb = () => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024;
const rssMb = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024;
const timed = async (fn: () => Promise<unknown>) => {
  const t = performance.now();
  await fn();
  return performance.now() - t;
};
const ids = (n: number, seed: number) => Array.from({ length: n }, (_, i) => 3 + ((i * 7 + seed) % (vocab - 3)));
const batchBody = (seed: number) => ({ input_ids: ids(16, seed), sampling_params: { max_new_tokens: tokens, sampling_seed: seed, ignore_eos: true }, return_logprob: true });

// Warm up, then time one batch alone.
await post('/generate', batchBody(0));
const batchMs = await timed(() => Promise.all(Array.from({ length: rows }, (_, i) => post('/generate', batchBody(i)).then((r) => r.text()))));

// /health while the same batch decodes.
const healthMs: number[] = [];
let decoding = true;
const batch = Promise.all(Array.from({ length: rows }, (_, i) => post('/generate', batchBody(100 + i)).then((r) => r.text()))).then(() => (decoding = false));
await new Promise((r) => setTimeout(r, 20));
while (decoding) {
  healthMs.push(await timed(() => fetch(`${url}/health`).then((r) => r.text())));
  await new Promise((r) => setTimeout(r, 20));
}
await batch;

const rssBefore = rssMb();
const hugeIds = JSON.stringify({ input_ids: ids(400_000, 1), sampling_params: { max_new_tokens: 4 } });
const refuseHugeMs = await timed(() => post('/generate', hugeIds).then((r) => r.text()));
const refuseLongMs = await timed(() => post('/generate', { input_ids: ids(4, 1), sampling_params: { max_new_tokens: 1e9 } }).then((r) => r.text()));
const deepMs = await timed(() => post('/generate', '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000)).then((r) => r.text()));
for (let i = 0; i < 20; i++) await Promise.all([post('/generate', hugeIds), post('/v1/completions', { prompt: ids(4, i), max_tokens: 2 ** 40 }), post('/generate', '['.repeat(100_000))].map((p) => p.then((r) => r.text())));
const statusAfter = (await post('/generate', batchBody(7))).status;
const rssAfter = rssMb();

// Drain: twenty requests in flight, then SIGTERM.
const drained = Array.from({ length: 20 }, (_, i) => post('/generate', batchBody(200 + i)).then((r) => r.status).catch(() => -1));
await new Promise((r) => setTimeout(r, 100));
const peak = peakRssMb();
child.kill('SIGTERM');
const statuses = await Promise.all(drained);

console.log(
  JSON.stringify(
    {
      model: path.basename(model),
      batch: `${rows} rows x ${tokens} new tokens`,
      batch_ms: Math.round(batchMs),
      health_during_batch_ms: { probes: healthMs.length, median: Math.round(healthMs.sort((a, b) => a - b)[Math.floor(healthMs.length / 2)] ?? 0), max: Math.round(Math.max(...healthMs)) },
      refuse_400k_ids_ms: Math.round(refuseHugeMs),
      refuse_1e9_max_new_tokens_ms: Math.round(refuseLongMs),
      refuse_10000_deep_json_ms: Math.round(deepMs),
      rss_mb_before_after_60_hostile: [Math.round(rssBefore), Math.round(rssAfter)],
      status_after_hostile: statusAfter,
      peak_rss_mb: Math.round(peak),
      sigterm_drain: { answered_200: statuses.filter((s) => s === 200).length, answered_503: statuses.filter((s) => s === 503).length, reset: statuses.filter((s) => s === -1).length, exit: await exited },
    },
    null,
    1,
  ),
);
