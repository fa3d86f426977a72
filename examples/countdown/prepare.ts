// Prepares a countdown task: a character tokenizer, train/val rows from the host's generator (each
// training row carries one solver solution as extra_info.response), a model config, the base policy
// SFT'd on random solver solutions of the training problems and, for the example, RLFR's velocity
// field pretrained on the rows' solutions (rlfr.yaml's settings). The example and the tests' tiny
// fixture both come from it:
//   npx tsx examples/countdown/prepare.ts                      # this example (see README.md)
//   npx tsx examples/countdown/prepare.ts --out test/fixtures/countdown --preset fixture
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  buildTokenizer,
  countdownProblemKey,
  createHost,
  generateCountdown,
  initEngine,
  readRows,
  resolveConfig,
  Rng,
  runSft,
  smallLlamaConfig,
  solveCountdown,
  writeCountdownDataset,
  writeRowsJsonl,
  type CountdownProblem,
  type DataRow,
} from '../../core-adapters/index.js';
import { flowPretrain } from '../../plugin/index.js';

interface Preset {
  train: number;
  val: number;
  sizes: number[];
  maxNumber: number;
  targetRange: [number, number];
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  sftSteps: number;
  lr: number;
  lrSchedule: 'constant' | 'cosine';
  warmup: number;
  maxResponse: number;
  /** SFT examples per drawn problem, each a solution drawn at random from all of the problem's. */
  solutionsPerRow: number;
  /** Distinct problems held out of SFT for RL's prompts; 0: RL trains on the SFT problems. */
  rlProblems: number;
}

const PRESETS: Record<string, Preset> = {
  // The example: a base policy that solves part of the validation problems, with room to learn.
  // 512 validation problems keep the evaluation's own noise small next to the seed-to-seed spread
  // (the space has 2,250 problems up to order; 8,000 draws reach nearly all).
  example: { train: 8000, val: 512, sizes: [3], maxNumber: 10, targetRange: [1, 40], hidden: 128, layers: 3, heads: 4, kvHeads: 2, sftSteps: 8000, lr: 2e-3, lrSchedule: 'cosine', warmup: 50, maxResponse: 16, solutionsPerRow: 2, rlProblems: 512 },
  // The tests' fixture: tiny and deliberately under-trained, so a few dozen RL steps show learning.
  fixture: { train: 3000, val: 96, sizes: [3], maxNumber: 9, targetRange: [1, 40], hidden: 64, layers: 2, heads: 4, kvHeads: 2, sftSteps: 1000, lr: 3e-3, lrSchedule: 'constant', warmup: 0, maxResponse: 16, solutionsPerRow: 1, rlProblems: 0 },
};

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: path.dirname(new URL(import.meta.url).pathname) },
    preset: { type: 'string', default: 'example' },
    seed: { type: 'string', default: '7' },
    'sft-steps': { type: 'string' },
  },
});
const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(', ')}`);
const out = path.resolve(values.out!);
const seed = Number(values.seed);
const sftSteps = values['sft-steps'] ? Number(values['sft-steps']) : preset.sftSteps;
const dataDir = path.join(out, 'data');
await initEngine('auto');

const tokenizer = buildTokenizer({ characters: '0123456789+-*/()=, >' });
const tokenizerDir = path.join(out, 'tokenizer');
tokenizer.save(tokenizerDir);

const problemOptions = { seed, sizes: preset.sizes, maxNumber: preset.maxNumber, targetRange: preset.targetRange, promptTemplate: '{numbers} -> {target}=' };
const rng = new Rng(seed);
const withSolution = (row: DataRow): DataRow => {
  const { numbers, target } = row.reward_model.ground_truth as { numbers: number[]; target: number };
  const solutions = solveCountdown(numbers, target);
  return { ...row, extra_info: { ...row.extra_info, response: solutions[rng.int(solutions.length)] } };
};
let files: { train: string; val: string };
let sftRows: DataRow[];
if (preset.rlProblems === 0) {
  // RL trains on the SFT problems; validation holds the problems the draws never reached.
  files = writeCountdownDataset(dataDir, { train: preset.train, val: preset.val, ...problemOptions });
  sftRows = (await readRows(files.train)).flatMap((row) => Array.from({ length: preset.solutionsPerRow }, () => withSolution(row)));
  writeRowsJsonl(files.train, sftRows.filter((_, i) => i % preset.solutionsPerRow === 0));
} else {
  // Three disjoint sets of problems (the same numbers in any order and target are one problem), as
  // in real post-training: SFT's, RL's prompts (new to the base policy, like validation's) and
  // validation's, each drawn at random from the problems the generator's draws reached.
  const draws = generateCountdown({ count: preset.train, split: 'train', ...problemOptions });
  const keyOf = (row: DataRow) => countdownProblemKey(row.reward_model.ground_truth as CountdownProblem);
  const keys = rng.shuffle([...new Set(draws.map(keyOf))]);
  if (keys.length < preset.val + preset.rlProblems + 1) throw new Error(`${keys.length} distinct problems: too few for ${preset.val} validation and ${preset.rlProblems} RL problems`);
  const valKeys = new Set(keys.slice(0, preset.val));
  const rlKeys = new Set(keys.slice(preset.val, preset.val + preset.rlProblems));
  const relabel = (rows: DataRow[], split: string) => rows.map((row, index) => ({ ...row, extra_info: { ...row.extra_info, split, index } }));
  const firstDraws = new Map<string, DataRow>();
  for (const row of draws) if (valKeys.has(keyOf(row)) && !firstDraws.has(keyOf(row))) firstDraws.set(keyOf(row), row);
  files = { train: path.join(dataDir, 'train.jsonl'), val: path.join(dataDir, 'val.jsonl') };
  fs.mkdirSync(dataDir, { recursive: true });
  writeRowsJsonl(files.val, relabel([...firstDraws.values()], 'val'));
  writeRowsJsonl(files.train, relabel(draws.filter((row) => rlKeys.has(keyOf(row))), 'train').map(withSolution));
  const sftDraws = relabel(draws.filter((row) => !valKeys.has(keyOf(row)) && !rlKeys.has(keyOf(row))), 'sft');
  sftRows = sftDraws.flatMap((row) => Array.from({ length: preset.solutionsPerRow }, () => withSolution(row)));
}

const modelConfig = path.join(out, 'model-config.json');
fs.writeFileSync(modelConfig, JSON.stringify(smallLlamaConfig(tokenizer, { hidden: preset.hidden, layers: preset.layers, heads: preset.heads, kvHeads: preset.kvHeads, maxPositions: 64 }), null, 2) + '\n');

const scratch = fs.mkdtempSync(path.join(out, '.sft-'));
const sftFile = path.join(scratch, 'sft.jsonl');
writeRowsJsonl(sftFile, sftRows);
const config = resolveConfig({
  userFile: path.join(out, 'prepare.ts'),
  user: {
    data: { train_files: sftFile, max_prompt_length: 32, max_response_length: preset.maxResponse },
    actor_rollout_ref: { model: { tokenizer_path: tokenizerDir } },
    sft: { init_config: modelConfig, total_steps: sftSteps, batch_size: 32, lr: preset.lr, lr_scheduler_type: preset.lrSchedule, warmup_steps: preset.warmup, output_dir: path.join(out, 'base-model') },
    trainer: { seed, default_local_dir: scratch },
  },
});
await runSft(config);
fs.rmSync(scratch, { recursive: true, force: true });

if (values.preset === 'example') {
  // rlfr.yaml's pretraining settings, on this output's data and base policy.
  const host = await createHost(path.join(path.dirname(new URL(import.meta.url).pathname), 'rlfr.yaml'), {
    quiet: true,
    overrides: [
      `data.train_files=${files.train}`,
      `actor_rollout_ref.model.path=${path.join(out, 'base-model')}`,
      `reward.flow.pretrain.output_dir=${path.join(out, 'flow-model')}`,
    ],
  });
  await flowPretrain(host.config);
}
