// Rejection sampling: keep the teacher samples `flowrl reward --json` scored 1, as SFT rows
// (the training row with extra_info.response set to the teacher's text).
//
// usage: node keep_correct.mjs ROWS RESPONSES SCORES.jsonl OUT.jsonl
import fs from 'node:fs';
import assert from 'node:assert/strict';

const [rowsFile, responsesFile, scoresFile, out] = process.argv.slice(2);
if (!out) {
  console.error('usage: node keep_correct.mjs ROWS RESPONSES SCORES.jsonl OUT.jsonl');
  process.exit(2);
}
const lines = (file) => fs.readFileSync(file, 'utf8').split('\n');
const jsonl = (file) => lines(file).filter((l) => l.trim()).map((l) => JSON.parse(l));
const rows = jsonl(rowsFile);
const responses = jsonl(responsesFile).map((x) => x.response);
const scores = lines(scoresFile).filter((l) => l.trim().startsWith('{')).map((l) => JSON.parse(l))
  .filter((s) => 'score' in s && 'row' in s);
assert.equal(scores.length, rows.length, `${scores.length} scores for ${rows.length} rows`);
assert.equal(responses.length, rows.length, `${responses.length} responses for ${rows.length} rows`);
const kept = [];
rows.forEach((row, i) => {
  const score = scores[i];
  assert.equal(score.row, i + 1, JSON.stringify(score)); // flowrl reward numbers rows from 1
  if (score.score >= 1) kept.push(JSON.stringify({ ...row, extra_info: { ...row.extra_info, response: responses[i] } }) + '\n');
});
fs.writeFileSync(out, kept.join(''));
console.error(`kept ${kept.length} of ${rows.length} teacher samples (${(kept.length / rows.length).toFixed(3)})`);
