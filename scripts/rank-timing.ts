// Time per training phase against data-parallel ranks (issue 36, docs/data-parallel.md): one GRPO
// config run as 1 process x 1 thread, 1 process x 2 threads and 2 MPI ranks x 1 thread, at two
// shapes: the countdown example's tiny model, and Qwen2.5-0.5B's layer shape (6 of its 24 layers,
// LoRA r 16, the countdown tokenizer's 24 tokens) with random weights.
//   npm run build && node --import tsx scripts/rank-timing.ts [--steps N (the larger shape's; 5)] [--out DIR]
// Needs Open MPI's mpirun and the MPI addon (npm run build:native -- --mpi, or npm install with mpicc).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { steps: { type: 'string', default: '5' }, out: { type: 'string', default: 'runs/rank-timing' } } });
const steps = Number(values.steps);
const out = path.resolve(values.out!);
const root = path.resolve(import.meta.dirname, '..');
const countdown = path.join(root, 'examples/countdown');
const cli = path.join(root, 'bin/flowrl.js');
const PHASES = ['gen', 'old_log_prob', 'ref', 'update_actor', 'actor_rank_sum', 'step'];
// As root, Open MPI wants both; harmless otherwise.
const mpiEnv = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' };

interface Shape { name: string; config: string; keys: string[]; steps: number }

function run(command: string, args: string[], log: string): void {
  const result = spawnSync(command, args, { env: mpiEnv, encoding: 'utf8', maxBuffer: 1 << 28 });
  fs.writeFileSync(log, `${result.stdout}\n${result.stderr}`);
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status}); see ${log}`);
}

function midShape(): Shape {
  const dir = path.join(out, 'qwen-layers-model');
  if (!fs.existsSync(path.join(dir, 'model.safetensors'))) {
    const configFile = path.join(out, 'qwen-layers-config.json');
    const tiny = JSON.parse(fs.readFileSync(path.join(countdown, 'model-config.json'), 'utf8'));
    // Qwen2.5-0.5B's hidden, MLP and attention shapes; the countdown vocabulary keeps the head small.
    fs.writeFileSync(configFile, JSON.stringify({ ...tiny, hidden_size: 896, intermediate_size: 4864, num_hidden_layers: 6, num_attention_heads: 14, num_key_value_heads: 2, max_position_embeddings: 256 }, null, 2));
    run(process.execPath, [cli, 'init-model', '--config', configFile, '--tokenizer', path.join(countdown, 'tokenizer'), '--out', dir], path.join(out, 'init-model.log'));
  }
  return {
    name: 'Qwen2.5-0.5B layers x 6, LoRA r 16 (8 prompts x 4, 64 new tokens)',
    steps,
    config: path.join(countdown, 'grpo.yaml'),
    keys: [`actor_rollout_ref.model.path=${dir}`, 'actor_rollout_ref.model.lora_rank=16', 'actor_rollout_ref.model.enable_gradient_checkpointing=true',
      'actor_rollout_ref.actor.use_kl_loss=true', 'data.train_batch_size=8', 'actor_rollout_ref.rollout.n=4', 'data.max_response_length=64',
      'actor_rollout_ref.actor.ppo_mini_batch_size=8', 'actor_rollout_ref.actor.ppo_micro_batch_size=8'],
  };
}

const tinyShape: Shape = {
  name: 'countdown example (3 layers x 128, full weights, 16 prompts x 8, 16 new tokens)',
  // Its steps take about a second: more of them for a steady median.
  steps: 16,
  config: path.join(countdown, 'grpo.yaml'),
  keys: ['actor_rollout_ref.actor.use_kl_loss=true'],
};

const LAYOUTS = [
  { name: '1 process x 1 thread', ranks: 1, workers: 1 },
  { name: '1 process x 2 threads', ranks: 1, workers: 2 },
  { name: '2 ranks x 1 thread', ranks: 2, workers: 1 },
];

function medianOf(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

fs.mkdirSync(out, { recursive: true });
for (const shape of [tinyShape, midShape()]) {
  console.log(`\n${shape.name}: median of steps 2-${shape.steps - 1}, seconds (the last step also saves)`);
  console.log(['layout'.padEnd(24), ...PHASES.map((p) => p.padStart(15))].join(''));
  const slug = shape === tinyShape ? 'tiny' : 'qwen-layers';
  for (const layout of LAYOUTS) {
    const runDir = path.join(out, `${slug}-${layout.ranks}x${layout.workers}`);
    fs.rmSync(runDir, { recursive: true, force: true });
    const train = [cli, 'train', shape.config, ...shape.keys, `engine.workers=${layout.workers}`, `trainer.total_training_steps=${shape.steps}`,
      'trainer.test_freq=-1', 'trainer.save_freq=-1', 'trainer.val_before_train=false', `trainer.default_local_dir=${runDir}`, 'trainer.logger=[console]'];
    if (layout.ranks === 1) run(process.execPath, train, `${runDir}.log`);
    else run('mpirun', ['-np', String(layout.ranks), process.execPath, ...train], `${runDir}.log`);
    const rows = fs.readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((line) => JSON.parse(line)).filter((m) => m.step >= 2 && m.step < shape.steps);
    const cells = PHASES.map((p) => medianOf(rows.map((m) => m[`timing_s/${p}`] ?? 0)).toFixed(3).padStart(15));
    console.log([layout.name.padEnd(24), ...cells].join(''));
  }
}
