// Prepares a countdown task: a character tokenizer, train/val rows from the host's generator (each
// training row carries one solver solution as extra_info.response for the supervised warm-up), a
// model config, the SFT'd base policy and, for the example, RLFR's velocity field pretrained on the
// same solutions (rlfr.yaml's settings). The example and the tests' tiny fixture both come from it:
//   npx tsx examples/countdown/prepare.ts                      # this example (see README.md)
//   npx tsx examples/countdown/prepare.ts --out test/fixtures/countdown --preset fixture
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  buildTokenizer,
  createHost,
  initEngine,
  readRows,
  resolveConfig,
  Rng,
  runSft,
  solveCountdown,
  writeCountdownDataset,
  writeRowsJsonl,
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
  warmup: number;
  maxResponse: number;
}

const PRESETS: Record<string, Preset> = {
  // The example: a base policy that solves part of the validation problems, with room to learn.
  example: { train: 6000, val: 64, sizes: [3], maxNumber: 10, targetRange: [1, 40], hidden: 128, layers: 3, heads: 4, kvHeads: 2, sftSteps: 2500, lr: 2e-3, warmup: 50, maxResponse: 16 },
  // The tests' fixture: tiny and deliberately under-trained, so a few dozen RL steps show learning.
  fixture: { train: 3000, val: 96, sizes: [3], maxNumber: 9, targetRange: [1, 40], hidden: 64, layers: 2, heads: 4, kvHeads: 2, sftSteps: 1000, lr: 3e-3, warmup: 0, maxResponse: 16 },
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

const files = writeCountdownDataset(dataDir, {
  train: preset.train,
  val: preset.val,
  seed,
  sizes: preset.sizes,
  maxNumber: preset.maxNumber,
  targetRange: preset.targetRange,
  promptTemplate: '{numbers} -> {target}=',
});
const rng = new Rng(seed);
const withSolution = (row: DataRow): DataRow => {
  const { numbers, target } = row.reward_model.ground_truth as { numbers: number[]; target: number };
  const solutions = solveCountdown(numbers, target);
  return { ...row, extra_info: { ...row.extra_info, response: solutions[rng.int(solutions.length)] } };
};
writeRowsJsonl(files.train, (await readRows(files.train)).map(withSolution));

const modelConfig = path.join(out, 'model-config.json');
fs.writeFileSync(
  modelConfig,
  JSON.stringify(
    {
      architectures: ['LlamaForCausalLM'],
      model_type: 'llama',
      vocab_size: tokenizer.vocabSize,
      hidden_size: preset.hidden,
      intermediate_size: Math.round((preset.hidden * 8) / 3 / 16) * 16,
      num_hidden_layers: preset.layers,
      num_attention_heads: preset.heads,
      num_key_value_heads: preset.kvHeads,
      max_position_embeddings: 64,
      rms_norm_eps: 1e-5,
      rope_theta: 10000,
      tie_word_embeddings: true,
      bos_token_id: tokenizer.tokenId(tokenizer.bosToken),
      eos_token_id: tokenizer.eosTokenId,
      pad_token_id: tokenizer.padTokenId,
    },
    null,
    2,
  ) + '\n',
);

const scratch = fs.mkdtempSync(path.join(out, '.sft-'));
const config = resolveConfig({
  userFile: path.join(out, 'prepare.ts'),
  user: {
    data: { train_files: files.train, max_prompt_length: 32, max_response_length: preset.maxResponse },
    actor_rollout_ref: { model: { tokenizer_path: tokenizerDir } },
    sft: { init_config: modelConfig, total_steps: sftSteps, batch_size: 32, lr: preset.lr, warmup_steps: preset.warmup, output_dir: path.join(out, 'base-model') },
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
