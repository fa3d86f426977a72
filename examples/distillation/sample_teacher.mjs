// Arm (b)'s data: sample the served teacher on the countdown training prompts (n per prompt,
// temperature 1, the teacher's own distribution, as OPD scores it), for `flowrl reward` to score.
//
// usage: node sample_teacher.mjs URL N OUT_ROWS OUT_RESPONSES
// Writes one row per sample (the training row repeated) and one {"response": ...} per line, in order.
import fs from 'node:fs';

const [url, nArg, outRows, outResponses] = process.argv.slice(2);
if (!outResponses) {
  console.error('usage: node sample_teacher.mjs URL N OUT_ROWS OUT_RESPONSES');
  process.exit(2);
}
const n = Number.parseInt(nArg, 10);
const train = new URL('../countdown/data/train.jsonl', import.meta.url);
const rows = fs.readFileSync(train, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));

async function sample(row, index) {
  const prompt = row.prompt.map((m) => m.content).join('\n'); // how the trainer renders it (no chat template)
  const answer = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n, max_tokens: 16, temperature: 1.0, seed: index }),
    signal: AbortSignal.timeout(600_000),
  });
  if (!answer.ok) throw new Error(`${url}/v1/completions: HTTP ${answer.status}: ${await answer.text()}`);
  return (await answer.json()).choices.map((choice) => choice.text);
}

// 8 requests in flight, results kept in prompt order
const texts = new Array(rows.length);
let next = 0;
await Promise.all(Array.from({ length: 8 }, async () => {
  while (next < rows.length) {
    const i = next++;
    texts[i] = await sample(rows[i], i);
  }
}));
const r = [], s = [];
rows.forEach((row, i) => {
  for (const text of texts[i]) {
    r.push(JSON.stringify(row) + '\n');
    s.push(JSON.stringify({ response: text }) + '\n');
  }
});
fs.writeFileSync(outRows, r.join(''));
fs.writeFileSync(outResponses, s.join(''));
console.error(`${s.length} samples from ${rows.length} prompts`);
