// The second pre-registered experiment's analysis (PROTOCOL.md here): ../table.ts's, with this
// experiment's arms, seeds and baseline (A* is grpo-replay-tuned's mean accuracy).
//   npx tsx examples/countdown/preregistered/rows/table.ts [RUNS_DIR]
import { pathToFileURL } from 'node:url';
import { InputError } from '../../../../core-adapters/index.js';
import { preregisteredTables, type Design } from '../table.js';

export const ROWS_EXPERIMENT: Design = {
  arms: ['flowrl-matching', 'grpo-kl', 'grpo-replay-tuned'],
  baseline: 'grpo-replay-tuned',
  betas: [7, 10, 15],
  seeds: [31, 32, 33, 34, 35],
};

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  try {
    console.log(preregisteredTables(process.argv[2] ?? 'runs/preregistered-rows', ROWS_EXPERIMENT));
  } catch (e) {
    if (!(e instanceof InputError)) throw e;
    console.error(e.message);
    process.exitCode = 2;
  }
}
