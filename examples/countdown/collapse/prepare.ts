// The collapse experiment's prompts: the problems with the most solutions (at least 16 orderings and
// groupings each), one row per problem. By default from data/train.jsonl into prompts.jsonl (the
// collapse experiment trains on them and evaluates on the same prompts, where reward maximisers are
// known to sharpen); the pre-registered experiment takes its test set from data/val.jsonl.
//   npx tsx examples/countdown/collapse/prepare.ts [SOURCE OUT SPLIT]
//   npx tsx examples/countdown/collapse/prepare.ts examples/countdown/data/val.jsonl examples/countdown/preregistered/prompts.jsonl test
import path from 'node:path';
import { countdownProblemKey, readRows, writeRowsJsonl, type CountdownProblem } from '../../../core-adapters/index.js';

const MIN_SOLUTIONS = 16;
const here = path.dirname(new URL(import.meta.url).pathname);
const [source = path.join(here, '..', 'data', 'train.jsonl'), out = path.join(here, 'prompts.jsonl'), split = 'collapse'] = process.argv.slice(2);
const rows = await readRows(source);
const seen = new Set<string>();
const chosen = rows.filter((row) => {
  const key = countdownProblemKey((row.reward_model as { ground_truth: CountdownProblem }).ground_truth);
  if (seen.has(key)) return false;
  seen.add(key);
  return ((row.extra_info as { solutions: number }).solutions ?? 0) >= MIN_SOLUTIONS;
});
writeRowsJsonl(out, chosen.map((row, index) => ({ ...row, extra_info: { ...(row.extra_info as object), split, index } })));
console.log(`${chosen.length} problems with at least ${MIN_SOLUTIONS} solutions -> ${out}`);
