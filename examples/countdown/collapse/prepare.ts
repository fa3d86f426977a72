// The collapse experiment's prompts: the RL training problems with the most solutions (at least 16
// orderings and groupings each), one row per problem, from data/train.jsonl. The experiment trains
// on them and evaluates on the same prompts, where reward maximisers are known to sharpen.
//   npx tsx examples/countdown/collapse/prepare.ts
import path from 'node:path';
import { countdownProblemKey, readRows, writeRowsJsonl, type CountdownProblem } from '../../../core-adapters/index.js';

const MIN_SOLUTIONS = 16;
const here = path.dirname(new URL(import.meta.url).pathname);
const rows = await readRows(path.join(here, '..', 'data', 'train.jsonl'));
const seen = new Set<string>();
const chosen = rows.filter((row) => {
  const key = countdownProblemKey((row.reward_model as { ground_truth: CountdownProblem }).ground_truth);
  if (seen.has(key)) return false;
  seen.add(key);
  return ((row.extra_info as { solutions: number }).solutions ?? 0) >= MIN_SOLUTIONS;
});
writeRowsJsonl(path.join(here, 'prompts.jsonl'), chosen.map((row, index) => ({ ...row, extra_info: { ...(row.extra_info as object), split: 'collapse', index } })));
console.log(`${chosen.length} problems with at least ${MIN_SOLUTIONS} solutions -> ${path.join(here, 'prompts.jsonl')}`);
