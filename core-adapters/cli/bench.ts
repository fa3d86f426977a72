// flowrl bench: one training step (forward, backward, AdamW) and KV-cache sampling of a tiny Llama,
// timed on the chosen backend. --compare-torch runs scripts/torch_bench.py (the same model in
// PyTorch) alternately with ours and reports the ratios.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { defaultNativeChoice, initEngine, NATIVE_CHOICES, type BackendChoice, type NativeChoice } from '../engine/backend.js';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';
import { initWeights, modelFromWeights } from '../model/checkpoint.js';
import { parseModelConfig } from '../model/config.js';
import { generateOnPool } from '../model/generate.js';
import { packSequences } from '../model/logprobs.js';
import { AdamW } from '../model/optim.js';
import { languageModelReplicaSpec } from '../model/lm-replica.js';
import { languageModelStep } from '../model/train-step.js';
import { resolveThreadCount, ThreadPool } from '../engine/thread-pool.js';
import { Rng } from '../random.js';
import { BACKEND_FLAG, numberFlag, parseFlags } from './args.js';

export const BENCH_MODEL = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  vocab_size: 64,
  hidden_size: 128,
  intermediate_size: 512,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 4,
  max_position_embeddings: 64,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  tie_word_embeddings: false,
};

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

export interface BenchResult {
  backend: string;
  accelerations: string[];
  workers: number;
  train_step_ms: number;
  train_tokens_per_s: number;
  sample_tokens_per_s: number;
  peak_rss_mb: number;
}

export async function runBench(options: { backend: BackendChoice; native?: NativeChoice; steps: number; batch: number; workers?: number; quiet?: boolean }): Promise<BenchResult> {
  const info = await initEngine(options.backend, { quiet: options.quiet, native: options.native });
  const config = parseModelConfig(BENCH_MODEL, 'bench model');
  const model = modelFromWeights(config, initWeights(config, 0));
  const workers = options.workers ?? 1;
  if (workers > 1 && info.backend !== 'wasm') throw new InputError(`--workers ${workers} needs the wasm backend; this engine is ${info.backend}`);
  const pool = workers > 1 ? await ThreadPool.create({ size: workers, spec: languageModelReplicaSpec(model), params: model.params, native: options.native ?? defaultNativeChoice() }) : undefined;
  pool?.publish(model.params);
  const optimizer = new AdamW({ lr: 3e-4, weightDecay: 0.01 });
  const rng = new Rng(1);
  const T = BENCH_MODEL.max_position_embeddings;
  const rows = Array.from({ length: options.batch }, () => Array.from({ length: T }, () => rng.int(BENCH_MODEL.vocab_size)));
  const seq = packSequences(
    rows.map((r) => r.slice(0, 1)),
    rows.map((r) => r.slice(1)),
  );

  const trainTimes: number[] = [];
  for (let i = 0; i < options.steps + 2; i++) {
    const start = performance.now();
    languageModelStep(model, optimizer, seq, 1, pool);
    if (i >= 2) trainTimes.push(performance.now() - start);
  }
  const prompts = rows.map((r) => r.slice(0, 1));
  const newTokens = T - 1;
  const sampleTimes: number[] = [];
  for (let i = 0; i < options.steps + 1; i++) {
    const start = performance.now();
    generateOnPool(model, prompts, { maxNewTokens: newTokens, temperature: 1, seed: i }, pool);
    if (i >= 1) sampleTimes.push(performance.now() - start);
  }
  await pool?.close();
  model.dispose();
  optimizer.dispose();
  const stepMs = median(trainTimes);
  return {
    backend: info.backend,
    accelerations: info.accelerations,
    workers,
    train_step_ms: Math.round(stepMs * 10) / 10,
    train_tokens_per_s: Math.round((options.batch * T * 1000) / stepMs),
    sample_tokens_per_s: Math.round((options.batch * newTokens * 1000) / median(sampleTimes)),
    peak_rss_mb: Math.round(process.resourceUsage().maxRSS / 1024),
  };
}

export interface TorchResult {
  train_step_ms: number;
  sample_tokens_per_s: number;
  threads: number;
  torch: string;
}

export const TORCH_SCRIPT = path.join(PACKAGE_ROOT, 'scripts', 'torch_bench.py');

/** One run of the PyTorch script, or why it cannot run (no python3 with torch). */
export function runTorchBench(steps: number): { result?: TorchResult; error?: string } {
  const python = process.env.FLOWRL_TORCH_PYTHON ?? '/usr/bin/python3';
  if (!fs.existsSync(python)) return { error: `${python} not found (set FLOWRL_TORCH_PYTHON)` };
  const run = spawnSync(python, [TORCH_SCRIPT, '--steps', String(steps)], {
    encoding: 'utf8',
    env: { ...process.env, OPENBLAS_NUM_THREADS: '1', OMP_NUM_THREADS: '1' },
    timeout: 600_000,
  });
  if (run.status !== 0) return { error: `${python} ${path.basename(TORCH_SCRIPT)} failed: ${(run.stderr || run.error?.message || '').trim().split('\n').at(-1)}` };
  return { result: JSON.parse(run.stdout.trim().split('\n').at(-1)!) as TorchResult };
}

export interface Comparison {
  ours: BenchResult;
  torch?: TorchResult;
  /** Our step time over PyTorch's (goal: <= 1). */
  train_ratio_vs_torch?: number;
  /** Our sampling rate over PyTorch's (goal: >= 1). */
  sample_ratio_vs_torch?: number;
  rounds: number;
  torch_error?: string;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Ours and PyTorch's alternately for `rounds` rounds; medians of each, and the two ratios. */
export async function compareWithTorch(options: { backend: BackendChoice; native?: NativeChoice; steps: number; rounds: number; workers?: number; quiet?: boolean }): Promise<Comparison> {
  const ours: BenchResult[] = [];
  const torch: TorchResult[] = [];
  let torchError: string | undefined;
  for (let r = 0; r < options.rounds; r++) {
    ours.push(await runBench({ backend: options.backend, native: options.native, steps: options.steps, batch: 32, workers: options.workers, quiet: options.quiet || r > 0 }));
    if (torchError) continue;
    const t = runTorchBench(options.steps);
    if (t.result) torch.push(t.result);
    else torchError = t.error;
  }
  const medianOf = <T>(items: T[], key: (item: T) => number) => median(items.map(key));
  const oursMedian: BenchResult = {
    ...ours[0],
    train_step_ms: medianOf(ours, (o) => o.train_step_ms),
    train_tokens_per_s: medianOf(ours, (o) => o.train_tokens_per_s),
    sample_tokens_per_s: medianOf(ours, (o) => o.sample_tokens_per_s),
    peak_rss_mb: Math.max(...ours.map((o) => o.peak_rss_mb)),
  };
  if (!torch.length) return { ours: oursMedian, rounds: options.rounds, torch_error: torchError };
  const torchMedian: TorchResult = { ...torch[0], train_step_ms: medianOf(torch, (t) => t.train_step_ms), sample_tokens_per_s: medianOf(torch, (t) => t.sample_tokens_per_s) };
  return {
    ours: oursMedian,
    torch: torchMedian,
    train_ratio_vs_torch: round3(oursMedian.train_step_ms / torchMedian.train_step_ms),
    sample_ratio_vs_torch: round3(oursMedian.sample_tokens_per_s / torchMedian.sample_tokens_per_s),
    rounds: options.rounds,
  };
}

export async function benchCommand(argv: string[]): Promise<void> {
  const { values } = parseFlags('bench', argv, {
    json: { type: 'boolean', default: false },
    'compare-torch': { type: 'boolean', default: false },
    steps: { type: 'string' },
    rounds: { type: 'string' },
    native: { type: 'string' },
    workers: { type: 'string' },
    ...BACKEND_FLAG,
  });
  const steps = numberFlag('bench', values, 'steps', 5, { integer: true, min: 1 });
  const rounds = numberFlag('bench', values, 'rounds', 3, { integer: true, min: 1 });
  // The engine's default (auto: one thread per core), unless --workers says otherwise.
  const workers = values.workers === undefined || values.workers === 'auto' ? resolveThreadCount('auto') : numberFlag('bench', values, 'workers', 1, { integer: true, min: 1, max: 64 });
  const native = values.native as NativeChoice | undefined;
  if (native !== undefined && !NATIVE_CHOICES.includes(native)) throw new InputError(`--native must be one of ${NATIVE_CHOICES.join(', ')}; got '${native}'`);
  const json = values.json as boolean;
  if (values['compare-torch']) {
    const c = await compareWithTorch({ backend: values.backend as BackendChoice, native, steps, rounds, workers, quiet: json });
    if (json) {
      console.log(JSON.stringify({ ...c.ours, torch: c.torch ?? null, train_ratio_vs_torch: c.train_ratio_vs_torch ?? null, sample_ratio_vs_torch: c.sample_ratio_vs_torch ?? null, rounds: c.rounds, torch_error: c.torch_error }));
      return;
    }
    printBench(c.ours);
    if (!c.torch) {
      console.log(`  PyTorch comparison skipped: ${c.torch_error}`);
      return;
    }
    console.log(`PyTorch ${c.torch.torch} (${c.torch.threads} thread, OpenBLAS), the same model; medians of ${c.rounds} alternating rounds`);
    console.log(`  train step        ${c.torch.train_step_ms.toFixed(1)} ms   ratio ours/torch ${c.train_ratio_vs_torch!.toFixed(2)} (goal <= 1)`);
    console.log(`  KV-cache sampling ${c.torch.sample_tokens_per_s.toLocaleString('en-US')} new tokens/s   ratio ours/torch ${c.sample_ratio_vs_torch!.toFixed(2)} (goal >= 1)`);
    return;
  }
  const result = await runBench({ backend: values.backend as BackendChoice, native, steps, batch: 32, workers, quiet: json });
  if (json) {
    console.log(JSON.stringify(result));
    return;
  }
  printBench(result);
}

function printBench(result: BenchResult): void {
  console.log(`tiny Llama (vocab 64, hidden 128, 4 heads, 2 layers, MLP 512), batch 32x64, backend ${result.backend}, ${result.workers} thread${result.workers > 1 ? 's' : ''}${result.accelerations.length ? ` (${result.accelerations.join('; ')})` : ''}`);
  console.log(`  train step        ${result.train_step_ms.toFixed(1)} ms  (${result.train_tokens_per_s.toLocaleString('en-US')} tokens/s)`);
  console.log(`  KV-cache sampling ${result.sample_tokens_per_s.toLocaleString('en-US')} new tokens/s (32 prompts x 63 tokens)`);
  console.log(`  peak RSS          ${result.peak_rss_mb} MB`);
}
