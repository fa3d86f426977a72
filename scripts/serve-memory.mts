// Peak resident memory of `flowrl serve` under the largest requests its limits admit, for the
// formula in docs/reliability.md. Usage:
//   npx tsx scripts/serve-memory.mts [--model DIR] [--max-batch N] [--max-queue N]
// Starts the server, reads its resident memory at rest, then sends, one kind at a time: the most
// samples one request may ask for (--max-queue, each to the end of the context), with and without
// as many top logprobs as the server admits, in both dialects; four bodies of --max-body-mb at once; a weight reload. Prints the
// peak (VmHWM) after each.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { model: { type: 'string', default: 'examples/countdown/base-model' }, 'max-batch': { type: 'string', default: '64' }, 'max-queue': { type: 'string', default: '1024' } } });
const model = path.resolve(values.model!);
const maxQueue = Number(values['max-queue']);
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'serve-memory-'));
fs.cpSync(model, path.join(root, 'copy'), { recursive: true });
const cli = path.resolve('core-adapters/cli/main.ts');
const child = spawn(process.execPath, ['--import', 'tsx', '--no-experimental-require-module', cli, 'serve', '--model', model, '--port', '0', '--enable-admin', '--weights-root', root, '--max-batch', values['max-batch']!, '--max-queue', String(maxQueue)], { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise<string>((resolve) => {
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    const m = /listening on (http:\/\/\S+)/.exec(out);
    if (m) resolve(m[1]);
  });
});
const config = JSON.parse(fs.readFileSync(path.join(model, 'config.json'), 'utf8')) as { max_position_embeddings: number };
const context = config.max_position_embeddings;
const memory = (field: 'VmRSS' | 'VmHWM') => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]) / 1024;
const post = async (route: string, body: string) => {
  const res = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const text = await res.text();
  return `${res.status} ${(text.length / 2 ** 20).toFixed(1)} MB`;
};
const report = (what: string, answer: string) => console.log(`${what.padEnd(48)} ${answer.padEnd(14)} rss ${memory('VmRSS').toFixed(0)} MB, peak ${memory('VmHWM').toFixed(0)} MB`);

report('at rest', '');
const prompt = [1, 5];
const rest = context - prompt.length;
// The most top logprobs the server admits for that many samples and tokens (2^20 entries).
const top = Math.min(20, Math.floor(2 ** 20 / (maxQueue * rest)));
report(`sglang: ${maxQueue} samples x ${rest} tokens`, await post('/generate', JSON.stringify({ input_ids: prompt, sampling_params: { n: maxQueue, max_new_tokens: rest, ignore_eos: true }, return_logprob: true })));
report(`sglang: the same, top ${top}`, await post('/generate', JSON.stringify({ input_ids: prompt, sampling_params: { n: maxQueue, max_new_tokens: rest, ignore_eos: true }, return_logprob: true, top_logprobs_num: top })));
report(`vllm: ${maxQueue} samples x ${rest} tokens, logprobs ${top}`, await post('/v1/completions', JSON.stringify({ prompt, n: maxQueue, max_tokens: rest, ignore_eos: true, logprobs: top, return_token_ids: true })));
const big = JSON.stringify({ input_ids: Array.from({ length: 15 * 2 ** 19 }, () => 5) }).slice(0, 16 * 2 ** 20 - 2) + ']}';
report('four 16 MB bodies at once', (await Promise.all(Array.from({ length: 4 }, () => post('/generate', big)))).join(', '));
report('a weight reload', await post('/update_weights_from_disk', JSON.stringify({ model_path: path.join(root, 'copy') })));
child.kill('SIGTERM');
fs.rmSync(root, { recursive: true, force: true });
