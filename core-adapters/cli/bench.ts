// flowrl bench: one training step (forward, backward, AdamW) and KV-cache sampling of a tiny Llama,
// timed on the chosen backend. --compare-torch runs scripts/torch_bench.py (the same model in
// PyTorch) alternately with ours and reports the ratios; the model bench's --compare-llama-cpp runs
// llama.cpp on its sampling job (llama-cpp-bench.ts).
import * as tf from '@tensorflow/tfjs-core';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FROZEN_DTYPES, NATIVE_CHOICES, type BackendChoice, type FrozenDtype, type NativeChoice } from '../config/choices.js';
import { blasThreads, loadNativeKernels } from '../engine/native.js';
import { Decoding, generateOnPool } from '../model/generate.js';
import { backendChoiceFromEnv, defaultNativeChoice, initEngine } from '../engine/backend.js';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';
import { initWeights, modelFromWeights } from '../model/checkpoint.js';
import { parseModelConfig, readModelConfig } from '../model/config.js';
import { packSequences } from '../model/logprobs.js';
import { AdamW } from '../model/optim.js';
import { languageModelReplicaSpec } from '../model/lm-replica.js';
import { languageModelStep } from '../model/train-step.js';
import { resolveThreadCount, ThreadPool } from '../engine/thread-pool.js';
import { Rng } from '../random.js';
import { SandboxRunner, scoreCode } from '../rewards/code.js';
import { formatLimits, measureLimits, type Limits } from './limits.js';
import { engineLimits, formatGpuLimits, measureGpuLimits } from './gpu-limits.js';
import { llamaCppRefusal, runLlamaCppBench } from './llama-cpp-bench.js';
import { benchModel, formatRlStep, runRlStepBench, weightFigures, type RlStepOptions, type TorchRlStep } from './rl-step-bench.js';
import { SandboxProcess } from '../rewards/sandbox-process.js';
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
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** batch rows of `length` random tokens, packed as a 1-token prompt and the rest as the response. */
function randomSequences(rng: Rng, batch: number, length: number, vocab: number) {
  const rows = Array.from({ length: batch }, () => Array.from({ length }, () => rng.int(vocab)));
  const seq = packSequences(
    rows.map((r) => r.slice(0, 1)),
    rows.map((r) => r.slice(1)),
  );
  return { rows, seq };
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
  const T = BENCH_MODEL.max_position_embeddings;
  const { rows, seq } = randomSequences(new Rng(1), options.batch, T, BENCH_MODEL.vocab_size);

  const trainTimes: number[] = [];
  for (let i = 0; i < options.steps + 2; i++) {
    const start = performance.now();
    await languageModelStep(model, optimizer, seq, 1, pool);
    if (i >= 2) trainTimes.push(performance.now() - start);
  }
  const prompts = rows.map((r) => r.slice(0, 1));
  const newTokens = T - 1;
  const sampleTimes: number[] = [];
  for (let i = 0; i < options.steps + 1; i++) {
    const start = performance.now();
    await generateOnPool(model, prompts, { maxNewTokens: newTokens, temperature: 1, seed: i }, pool);
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

/** `flowrl bench --contend K`: the tiny bench idle and beside K busy processes, and the thread count that does best beside them. */
export interface ContendedBench {
  contend: number;
  cores: number;
  idle: BenchResult;
  /** The default configuration (--workers, else auto) beside the busy processes. */
  contended: BenchResult;
  /** Contended over idle: train step time (above 1 is slower), sampling rate (below 1 is slower). */
  train_slowdown: number;
  sample_slowdown: number;
  /** Every thread count from 1 to the cores, beside the busy processes. */
  by_workers: BenchResult[];
  /** The default's train step time and sampling rate against the best thread count's (1: the default is the best). */
  train_vs_best: number;
  sample_vs_best: number;
  /** The busy processes' ids (all ended before this returns). */
  busy_pids: number[];
}

/**
 * K processes that each keep one core busy until killed (plain JavaScript loops, not this engine);
 * each also ends when the bench does, however it ends (its parent gone).
 */
function busyProcesses(k: number): ChildProcess[] {
  const loop = 'const parent = process.ppid; for (let i = 0; ; i++) if ((i & 0xffffff) === 0 && process.ppid !== parent) process.exit(0);';
  return Array.from({ length: k }, () => spawn(process.execPath, ['-e', loop], { stdio: 'ignore' }));
}

/** Kills the busy processes and waits until each has exited. */
async function endBusy(busy: ChildProcess[]): Promise<void> {
  await Promise.all(
    busy.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGKILL');
        }),
    ),
  );
}

/**
 * The tiny bench idle, then beside `k` busy processes with the default thread count and with every
 * count from 1 to the cores: what a shared machine costs, and whether the default copes with it.
 */
export async function runContendedBench(options: { backend: BackendChoice; native?: NativeChoice; steps: number; workers: number; contend: number; quiet?: boolean }): Promise<ContendedBench> {
  const bench = (workers: number) => runBench({ backend: options.backend, native: options.native, steps: options.steps, batch: 32, workers, quiet: true });
  const idle = await bench(options.workers);
  const busy = busyProcesses(options.contend);
  const stop = () => busy.forEach((child) => child.kill('SIGKILL'));
  // However the bench ends, no busy process outlives it.
  process.once('exit', stop);
  try {
    // Let the busy loops reach the scheduler before timing.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const contended = await bench(options.workers);
    const cores = os.availableParallelism();
    const byWorkers: BenchResult[] = [];
    for (let w = 1; w <= cores; w++) byWorkers.push(w === options.workers ? contended : await bench(w));
    const bestTrain = Math.min(...byWorkers.map((r) => r.train_step_ms));
    const bestSample = Math.max(...byWorkers.map((r) => r.sample_tokens_per_s));
    return {
      contend: options.contend,
      cores,
      idle,
      contended,
      train_slowdown: round3(contended.train_step_ms / idle.train_step_ms),
      sample_slowdown: round3(contended.sample_tokens_per_s / idle.sample_tokens_per_s),
      by_workers: byWorkers,
      train_vs_best: round3(contended.train_step_ms / bestTrain),
      sample_vs_best: round3(contended.sample_tokens_per_s / bestSample),
      busy_pids: busy.map((child) => child.pid!),
    };
  } finally {
    await endBusy(busy);
    process.off('exit', stop);
  }
}

function printContended(c: ContendedBench): void {
  console.log(`tiny Llama, ${c.contended.workers} thread${c.contended.workers > 1 ? 's' : ''} (the default here), idle and beside ${c.contend} busy process${c.contend > 1 ? 'es' : ''} on ${c.cores} cores`);
  console.log(`  train step        idle ${c.idle.train_step_ms.toFixed(1)} ms, contended ${c.contended.train_step_ms.toFixed(1)} ms  (x${c.train_slowdown.toFixed(2)})`);
  console.log(`  KV-cache sampling idle ${c.idle.sample_tokens_per_s.toLocaleString('en-US')}, contended ${c.contended.sample_tokens_per_s.toLocaleString('en-US')} tokens/s  (x${c.sample_slowdown.toFixed(2)})`);
  for (const r of c.by_workers) console.log(`  contended, ${r.workers} thread${r.workers > 1 ? 's' : ' '}: train ${r.train_step_ms.toFixed(1)} ms, sampling ${r.sample_tokens_per_s.toLocaleString('en-US')} tokens/s`);
  console.log(`  the default against the best thread count: train x${c.train_vs_best.toFixed(2)}, sampling x${c.sample_vs_best.toFixed(2)} (1 is the best)`);
}

/** `flowrl bench --model-config`: a real model's shape with random weights. */
export interface ModelBenchOptions {
  configFile: string;
  /** 0: every weight trains (on the heap); > 0: LoRA on all seven projections, the base frozen. */
  loraRank: number;
  baseDtype: FrozenDtype;
  /** What the frozen base's products round activations to (model.base_compute_dtype). */
  baseCompute: FrozenDtype;
  batch: number;
  seq: number;
  samplePrompts: number;
  sampleTokens: number;
  promptTokens: number;
  steps: number;
  /** The limits' measurement sizes (--limits-mb, --matrix). */
  limitsMb: number;
  matrix: number;
  backend: BackendChoice;
  native?: NativeChoice;
  quiet?: boolean;
}

/** What the model bench adds to BenchResult. */
export interface ModelBenchResult extends BenchResult {
  model: string;
  parameters: number;
  trainable_parameters: number;
  lora_rank: number;
  base_dtype: FrozenDtype | 'heap';
  base_compute_dtype: FrozenDtype;
  /** Bytes of frozen weights outside the wasm heap, and the heap's size at the end, in MB. */
  base_outside_heap_mb: number;
  wasm_heap_mb: number;
  load_s: number;
  /** Sampling's prefill (the prompts' forward) and its GFLOP/s, also as a fraction of the sgemm peak. */
  prefill_s: number;
  prefill_gflop_s: number;
  prefill_fraction_of_sgemm: number;
  /** With base_compute_dtype bfloat16: of the bfloat16 GEMM peak (limits.bf16_gemm_gflop_s), where measured. */
  prefill_fraction_of_bf16_gemm: number | null;
  /** One decode step (a token for every prompt, sampling included), the weights it reads per second, and that over the read bandwidth. */
  decode_step_ms: number;
  decode_gb_s: number;
  decode_fraction_of_bandwidth: number;
  /** The decode step's multiplies per second, and that over the sgemm peak (the bound at larger batches). */
  decode_gflop_s: number;
  decode_fraction_of_sgemm: number;
  weights_read_mb: number;
  limits: Limits;
}

/**
 * One training step (forward, next-token loss, backward, AdamW) on batch x seq tokens and KV-cache
 * sampling of sampleTokens new tokens after promptTokens-token prompts, for a model of the given
 * config.json with random weights (nothing is written). All cores go to the BLAS.
 */
export async function runModelBench(options: ModelBenchOptions): Promise<ModelBenchResult> {
  const info = await initEngine(options.backend, { quiet: options.quiet, native: options.native });
  const config = readModelConfig(options.configFile);
  const started = performance.now();
  const model = benchModel(options.configFile, config, options.loraRank, options.baseDtype, options.baseCompute, info.backend);
  model.gradientCheckpointing = true;
  const loadSeconds = (performance.now() - started) / 1000;
  if (info.backend === 'wasm') loadNativeKernels().kernels?.setThreads(os.availableParallelism());
  const optimizer = new AdamW({ lr: 1e-4, weightDecay: 0.01 });
  const rng = new Rng(1);
  const { seq } = randomSequences(rng, options.batch, options.seq, config.vocabSize);
  const trainTimes: number[] = [];
  for (let i = 0; i < options.steps + 1; i++) {
    const start = performance.now();
    await languageModelStep(model, optimizer, seq, 1);
    if (i >= 1) trainTimes.push(performance.now() - start);
    if (!options.quiet) process.stderr.write(`[flowrl] bench: train step ${i + 1}/${options.steps + 1} ${((performance.now() - start) / 1000).toFixed(1)} s${i === 0 ? ' (warm-up)' : ''}\n`);
  }
  const prompts = Array.from({ length: options.samplePrompts }, () => Array.from({ length: options.promptTokens }, () => rng.int(config.vocabSize)));
  // Sampled as a run samples: the BLAS on its run-time thread count (one by default), which lets
  // decoding split the base's products over the cores.
  const kernels = info.backend === 'wasm' ? loadNativeKernels().kernels : undefined;
  kernels?.setThreads(blasThreads());
  // A short decode first, untimed, as the train step has its warm-up: a GPU compiles its programs
  // on first use (a decode step's are not the train step's).
  const warmUp = new Decoding(model, prompts, { maxNewTokens: 2, temperature: 1, seed: 0, stopTokenIds: [] });
  while (await warmUp.step());
  const start = performance.now();
  const decoding = new Decoding(model, prompts, { maxNewTokens: options.sampleTokens, temperature: 1, seed: 0, stopTokenIds: [] });
  await decoding.prefill();
  const prefillMs = performance.now() - start;
  let decodeSteps = 0;
  while (await decoding.step()) decodeSteps++;
  const sampleMs = performance.now() - start;
  kernels?.setThreads(os.availableParallelism());
  // Decoding and the prefill against this machine's limits: a decode step reads every weight
  // once; the prefill multiplies the body by every prompt token, the head by the last.
  const limits = await engineLimits(info, { arrayMb: options.limitsMb, matrix: options.matrix, rounds: 3 });
  const weights = weightFigures(model);
  const prefillGflop = (2 * weights.bodyValues * options.samplePrompts * options.promptTokens + 2 * weights.headValues * options.samplePrompts) / 1e9;
  const decodeMs = decodeSteps ? (sampleMs - prefillMs) / decodeSteps : 0;
  const decodeGbS = decodeSteps ? weights.readBytes / decodeMs / 1e6 : 0;
  // At larger batches decoding is bound by multiplying instead: every weight times every row.
  const decodeGflopS = decodeSteps ? (2 * (weights.bodyValues + weights.headValues) * options.samplePrompts) / decodeMs / 1e6 : 0;
  const sgemmLimit = limits.sgemm_gflop_s ?? limits.sgemm_loop_gflop_s;
  // Three significant digits: a tiny model's rates are far below 1.
  const significant = (x: number) => Number(x.toPrecision(3));
  const count = (tensors: Iterable<{ size: number }>) => [...tensors].reduce((n, t) => n + t.size, 0);
  const frozenValues = [...model.frozen.values()].reduce((n, m) => n + m.rows * m.cols, 0);
  const result: ModelBenchResult = {
    backend: info.backend,
    accelerations: info.accelerations,
    workers: 1,
    train_step_ms: Math.round(median(trainTimes)),
    train_tokens_per_s: Math.round((options.batch * options.seq * 1000) / median(trainTimes)),
    sample_tokens_per_s: Math.round(((options.samplePrompts * options.sampleTokens * 1000) / sampleMs) * 10) / 10,
    peak_rss_mb: Math.round(process.resourceUsage().maxRSS / 1024),
    model: path.basename(options.configFile),
    parameters: count(model.params.values()) + frozenValues,
    trainable_parameters: count(model.trainableParams().values()),
    lora_rank: options.loraRank,
    base_dtype: model.frozen.size ? options.baseDtype : 'heap',
    base_compute_dtype: options.baseCompute,
    base_outside_heap_mb: Math.round([...model.frozen.values()].reduce((n, m) => n + m.bytes, 0) / 2 ** 20),
    wasm_heap_mb: info.backend === 'wasm' ? Math.round(wasmHeapBytes() / 2 ** 20) : 0,
    load_s: Math.round(loadSeconds * 10) / 10,
    prefill_s: round3(prefillMs / 1000),
    prefill_gflop_s: significant(prefillGflop / (prefillMs / 1000)),
    prefill_fraction_of_sgemm: significant(prefillGflop / (prefillMs / 1000) / sgemmLimit),
    prefill_fraction_of_bf16_gemm: options.baseCompute === 'bfloat16' && limits.bf16_gemm_gflop_s ? significant(prefillGflop / (prefillMs / 1000) / limits.bf16_gemm_gflop_s) : null,
    decode_step_ms: Math.round(decodeMs * 10) / 10,
    decode_gb_s: significant(decodeGbS),
    decode_fraction_of_bandwidth: significant(decodeGbS / limits.read_gb_s),
    decode_gflop_s: significant(decodeGflopS),
    decode_fraction_of_sgemm: significant(decodeGflopS / sgemmLimit),
    weights_read_mb: Math.round(weights.readBytes / 1e6),
    limits,
  };
  model.dispose();
  optimizer.dispose();
  return result;
}

/** The wasm backend's memory size now (it only grows, so this is its peak). */
function wasmHeapBytes(): number {
  const backend = tf.backend() as unknown as { wasm?: { HEAPF32?: Float32Array } };
  return backend.wasm?.HEAPF32?.byteLength ?? 0;
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
    'compare-llama-cpp': { type: 'boolean', default: false },
    steps: { type: 'string' },
    rounds: { type: 'string' },
    native: { type: 'string' },
    workers: { type: 'string' },
    'model-config': { type: 'string' },
    'lora-rank': { type: 'string' },
    'base-dtype': { type: 'string' },
    'base-compute-dtype': { type: 'string' },
    batch: { type: 'string' },
    seq: { type: 'string' },
    'sample-prompts': { type: 'string' },
    'sample-tokens': { type: 'string' },
    sandbox: { type: 'boolean', default: false },
    programs: { type: 'string' },
    limits: { type: 'boolean', default: false },
    'rl-step': { type: 'boolean', default: false },
    prompts: { type: 'string' },
    samples: { type: 'string' },
    'prompt-tokens': { type: 'string' },
    'response-tokens': { type: 'string' },
    'micro-batch': { type: 'string' },
    'limits-mb': { type: 'string' },
    matrix: { type: 'string' },
    contend: { type: 'string' },
    ...BACKEND_FLAG,
  });
  if (values.contend !== undefined && (values['model-config'] !== undefined || values.limits || values.sandbox || values['compare-torch'])) {
    throw new InputError('--contend applies to the tiny bench alone (not with --model-config, --limits, --sandbox or --compare-torch)');
  }
  if (values['compare-llama-cpp'] && (values['model-config'] === undefined || values['rl-step'])) {
    throw new InputError('--compare-llama-cpp applies to the model bench (--model-config FILE.json, without --rl-step): it compares sampling');
  }
  if (values['compare-llama-cpp']) {
    const refusal = llamaCppRefusal(values['model-config'] as string);
    if (refusal) throw new InputError(`--compare-llama-cpp: ${refusal}`);
  }
  if (values['model-config'] !== undefined) return modelBenchCommand(values);
  if (values.limits && backendChoiceFromEnv(values.backend as BackendChoice) === 'webgpu') {
    const engine = await initEngine('webgpu', { quiet: values.json as boolean });
    const limits = await measureGpuLimits(engine.gpu!, {
      sizes: values.matrix === undefined ? [1024, 2048, 4096] : [numberFlag('bench', values, 'matrix', 2048, { integer: true, min: 16 })],
      copyMb: numberFlag('bench', values, 'limits-mb', 512, { integer: true, min: 1 }),
      rounds: numberFlag('bench', values, 'rounds', 5, { integer: true, min: 1 }),
    });
    console.log(values.json ? JSON.stringify(limits) : formatGpuLimits(limits));
    return;
  }
  if (values.limits) {
    const limits = await measureLimits({
      arrayMb: numberFlag('bench', values, 'limits-mb', 512, { integer: true, min: 1 }),
      matrix: numberFlag('bench', values, 'matrix', 2048, { integer: true, min: 16 }),
      rounds: numberFlag('bench', values, 'rounds', 5, { integer: true, min: 1 }),
    });
    console.log(values.json ? JSON.stringify(limits) : formatLimits(limits));
    return;
  }
  if (values.sandbox) return sandboxBench(numberFlag('bench', values, 'programs', 200, { integer: true, min: 1 }), values.json as boolean);
  const steps = numberFlag('bench', values, 'steps', 5, { integer: true, min: 1 });
  const rounds = numberFlag('bench', values, 'rounds', 3, { integer: true, min: 1 });
  const native = values.native as NativeChoice | undefined;
  if (native !== undefined && !NATIVE_CHOICES.includes(native)) throw new InputError(`--native must be one of ${NATIVE_CHOICES.join(', ')}; got '${native}'`);
  const json = values.json as boolean;
  // The engine's default (auto: one thread per core on wasm, whose threads they are), unless --workers says otherwise.
  const explicitWorkers = values.workers !== undefined && values.workers !== 'auto';
  const engine = await initEngine(values.backend as BackendChoice, { quiet: json, native });
  const workers = explicitWorkers ? numberFlag('bench', values, 'workers', 1, { integer: true, min: 1, max: 64 }) : engine.backend === 'wasm' ? resolveThreadCount('auto') : 1;
  if (values.contend !== undefined) {
    const c = await runContendedBench({ backend: values.backend as BackendChoice, native, steps, workers, contend: numberFlag('bench', values, 'contend', 1, { integer: true, min: 1, max: 64 }), quiet: json });
    if (json) console.log(JSON.stringify(c));
    else printContended(c);
    return;
  }
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

const PROMPT_TOKENS = 64;

/** flowrl bench --model-config FILE.json [...]: the model bench, and PyTorch's same job with --compare-torch. */
async function modelBenchCommand(values: Record<string, unknown>): Promise<void> {
  const configFile = values['model-config'] as string;
  const baseDtype = (values['base-dtype'] ?? 'float32') as FrozenDtype;
  if (!FROZEN_DTYPES.includes(baseDtype)) throw new InputError(`--base-dtype must be one of ${FROZEN_DTYPES.join(', ')}; got '${baseDtype}'`);
  const baseCompute = (values['base-compute-dtype'] ?? 'float32') as FrozenDtype;
  if (!FROZEN_DTYPES.includes(baseCompute)) throw new InputError(`--base-compute-dtype must be one of ${FROZEN_DTYPES.join(', ')}; got '${baseCompute}'`);
  if (baseCompute === 'bfloat16' && baseDtype !== 'bfloat16') throw new InputError('--base-compute-dtype bfloat16 needs a bfloat16 base: add --base-dtype bfloat16');
  const native = values.native as NativeChoice | undefined;
  if (native !== undefined && !NATIVE_CHOICES.includes(native)) throw new InputError(`--native must be one of ${NATIVE_CHOICES.join(', ')}; got '${native}'`);
  if (values['rl-step']) {
    const rl: RlStepOptions = {
      configFile,
      loraRank: numberFlag('bench', values, 'lora-rank', 16, { integer: true, min: 0 }),
      baseDtype,
      baseCompute,
      prompts: numberFlag('bench', values, 'prompts', 8, { integer: true, min: 1 }),
      samples: numberFlag('bench', values, 'samples', 4, { integer: true, min: 1 }),
      promptTokens: numberFlag('bench', values, 'prompt-tokens', 64, { integer: true, min: 1 }),
      responseTokens: numberFlag('bench', values, 'response-tokens', 128, { integer: true, min: 1 }),
      microBatch: numberFlag('bench', values, 'micro-batch', 4, { integer: true, min: 1 }),
      limitsMb: numberFlag('bench', values, 'limits-mb', 256, { integer: true, min: 1 }),
      matrix: numberFlag('bench', values, 'matrix', 2048, { integer: true, min: 16 }),
      backend: values.backend as BackendChoice,
      native,
      quiet: values.json as boolean,
    };
    const result = await runRlStepBench(rl);
    // The PyTorch peer on the same job: the same model, LoRA, sizes and micro-batches, eager.
    const torch = values['compare-torch']
      ? runTorchModelScript<TorchRlStep>(['--config', configFile, '--lora-rank', String(rl.loraRank), '--rl-step', '--prompts', String(rl.prompts), '--samples', String(rl.samples), '--prompt-tokens', String(rl.promptTokens), '--response-tokens', String(rl.responseTokens), '--micro-batch', String(rl.microBatch)])
      : undefined;
    console.log(values.json ? JSON.stringify({ ...result, torch: torch?.result ?? null, torch_error: torch?.error }) : formatRlStep(result, torch));
    return;
  }
  const options: ModelBenchOptions = {
    configFile,
    loraRank: numberFlag('bench', values, 'lora-rank', 0, { integer: true, min: 0 }),
    baseDtype,
    baseCompute,
    batch: numberFlag('bench', values, 'batch', 2, { integer: true, min: 1 }),
    seq: numberFlag('bench', values, 'seq', 256, { integer: true, min: 2 }),
    samplePrompts: numberFlag('bench', values, 'sample-prompts', 8, { integer: true, min: 1 }),
    sampleTokens: numberFlag('bench', values, 'sample-tokens', 32, { integer: true, min: 1 }),
    promptTokens: PROMPT_TOKENS,
    steps: numberFlag('bench', values, 'steps', 3, { integer: true, min: 1 }),
    limitsMb: numberFlag('bench', values, 'limits-mb', 256, { integer: true, min: 1 }),
    matrix: numberFlag('bench', values, 'matrix', 2048, { integer: true, min: 16 }),
    backend: values.backend as BackendChoice,
    native,
    quiet: values.json as boolean,
  };
  const ours = await runModelBench(options);
  const torch = values['compare-torch'] ? runTorchModelBench(options) : undefined;
  // llama.cpp has no LoRA on the way: its file holds the base in the bench's dtype.
  const llama = values['compare-llama-cpp']
    ? await runLlamaCppBench({ configFile, dtype: ours.base_dtype === 'heap' ? 'float32' : ours.base_dtype, samplePrompts: options.samplePrompts, sampleTokens: options.sampleTokens, promptTokens: options.promptTokens })
    : undefined;
  if (values.json) {
    console.log(
      JSON.stringify({
        ...ours,
        torch: torch?.result ?? null,
        torch_error: torch?.error,
        train_ratio_vs_torch: torch?.result ? round3(ours.train_step_ms / torch.result.train_step_ms) : null,
        sample_ratio_vs_torch: torch?.result ? round3(ours.sample_tokens_per_s / torch.result.sample_tokens_per_s) : null,
        ...(llama && {
          llama_cpp: llama.result ?? null,
          llama_cpp_error: llama.error,
          prefill_ratio_vs_llama_cpp: llama.result ? round3(ours.prefill_s / llama.result.prefill_s) : null,
          decode_ratio_vs_llama_cpp: llama.result?.decode_step_ms ? round3(ours.decode_step_ms / llama.result.decode_step_ms) : null,
        }),
      }),
    );
    return;
  }
  const what = ours.lora_rank ? `LoRA r ${ours.lora_rank} on all seven projections, base ${ours.base_dtype === 'heap' ? 'on the wasm heap' : `${ours.base_dtype} outside the wasm heap${ours.base_compute_dtype === 'bfloat16' ? ', its products on bfloat16 activations' : ''}`}` : 'full fine-tuning';
  console.log(`${ours.model}: ${ours.parameters.toLocaleString('en-US')} parameters (${ours.trainable_parameters.toLocaleString('en-US')} trained; ${what}), random weights, backend ${ours.backend}`);
  console.log(`  train step        ${(ours.train_step_ms / 1000).toFixed(2)} s on ${options.batch}x${options.seq} tokens (${ours.train_tokens_per_s} tokens/s)`);
  console.log(`  KV-cache sampling ${ours.sample_tokens_per_s} new tokens/s (${options.samplePrompts} prompts of ${PROMPT_TOKENS} tokens, ${options.sampleTokens} new tokens each)`);
  const sgemm = ours.limits.sgemm_gflop_s ?? ours.limits.sgemm_loop_gflop_s;
  const prefillLimit =
    ours.prefill_fraction_of_bf16_gemm !== null
      ? `${(100 * ours.prefill_fraction_of_bf16_gemm).toFixed(0)} % of the bfloat16 GEMM peak (${ours.limits.bf16_gemm_gflop_s!.toFixed(0)} GFLOP/s)`
      : `${(100 * ours.prefill_fraction_of_sgemm).toFixed(0)} % of the sgemm peak (${sgemm.toFixed(0)} GFLOP/s)`;
  console.log(`    prefill         ${ours.prefill_s.toFixed(2)} s, ${ours.prefill_gflop_s} GFLOP/s: ${prefillLimit}`);
  console.log(`    decode step     ${ours.decode_step_ms.toFixed(1)} ms at batch ${options.samplePrompts}, reading ${ours.weights_read_mb} MB: ${ours.decode_gb_s.toFixed(1)} GB/s, ${(100 * ours.decode_fraction_of_bandwidth).toFixed(0)} % of the read bandwidth (${ours.limits.read_gb_s.toFixed(1)} GB/s); ${ours.decode_gflop_s} GFLOP/s, ${(100 * ours.decode_fraction_of_sgemm).toFixed(0)} % of the sgemm peak`);
  console.log(`  memory            peak RSS ${ours.peak_rss_mb} MB; wasm heap ${ours.wasm_heap_mb} MB; frozen base outside it ${ours.base_outside_heap_mb} MB; built in ${ours.load_s} s`);
  if (torch && !torch.result) console.log(`  PyTorch comparison skipped: ${torch.error}`);
  if (torch?.result) {
    const t = torch.result;
    console.log(`PyTorch ${t.torch} (${t.threads} threads), the same model and LoRA, eager`);
    console.log(`  train step        ${(t.train_step_ms / 1000).toFixed(2)} s   ratio ours/torch ${(ours.train_step_ms / t.train_step_ms).toFixed(2)} (goal <= 1)`);
    console.log(`  KV-cache sampling ${t.sample_tokens_per_s} new tokens/s   ratio ours/torch ${(ours.sample_tokens_per_s / t.sample_tokens_per_s).toFixed(2)} (goal >= 1)`);
    console.log(`  memory            peak RSS ${t.peak_rss_mb} MB`);
  }
  if (llama && !llama.result) console.log(`  llama.cpp comparison skipped: ${llama.error}`);
  if (llama?.result) {
    const l = llama.result;
    console.log(`llama.cpp (node-llama-cpp ${l.node_llama_cpp}, CPU, ${l.threads} thread${l.threads > 1 ? 's' : ''}), the same shape in ${l.dtype} (${l.gguf_mb} MB of GGUF), greedy, no LoRA`);
    console.log(`  KV-cache sampling ${l.sample_tokens_per_s} new tokens/s   ratio ours/llama.cpp ${(ours.sample_tokens_per_s / l.sample_tokens_per_s).toFixed(2)} (goal >= 1)`);
    console.log(`    prefill         ${l.prefill_s.toFixed(2)} s   ratio ours/llama.cpp ${(ours.prefill_s / l.prefill_s).toFixed(2)} (goal <= 1)`);
    if (l.decode_step_ms) console.log(`    decode step     ${l.decode_step_ms.toFixed(1)} ms   ratio ours/llama.cpp ${(ours.decode_step_ms / l.decode_step_ms).toFixed(2)} (goal <= 1)`);
  }
}

export const TORCH_MODEL_SCRIPT = path.join(PACKAGE_ROOT, 'scripts', 'torch_model_bench.py');

/** scripts/torch_model_bench.py with `args` on all cores: its JSON line, or why it cannot run. */
function runTorchModelScript<T>(args: string[]): { result?: T; error?: string } {
  const python = process.env.FLOWRL_TORCH_PYTHON ?? '/usr/bin/python3';
  if (!fs.existsSync(python)) return { error: `${python} not found (set FLOWRL_TORCH_PYTHON)` };
  const threads = String(os.availableParallelism());
  const run = spawnSync(python, [TORCH_MODEL_SCRIPT, ...args], { encoding: 'utf8', env: { ...process.env, OPENBLAS_NUM_THREADS: threads, OMP_NUM_THREADS: threads }, timeout: 3_600_000 });
  if (run.status !== 0) return { error: `${python} ${path.basename(TORCH_MODEL_SCRIPT)} failed: ${(run.stderr || run.error?.message || '').trim().split('\n').at(-1)}` };
  return { result: JSON.parse(run.stdout.trim().split('\n').at(-1)!) as T };
}

/** scripts/torch_model_bench.py on the same job, all cores, or why it cannot run. */
function runTorchModelBench(o: ModelBenchOptions): { result?: TorchResult & { peak_rss_mb: number }; error?: string } {
  return runTorchModelScript(['--config', o.configFile, '--lora-rank', String(o.loraRank), '--batch', String(o.batch), '--seq', String(o.seq), '--sample-prompts', String(o.samplePrompts), '--sample-tokens', String(o.sampleTokens), '--prompt-tokens', String(o.promptTokens), '--steps', String(o.steps)]);
}

/**
 * flowrl bench --sandbox [--programs N]: code-reward throughput, N standard-input tests of a small
 * Python program scored through the local sandbox with the default pool (one per core).
 */
async function sandboxBench(programs: number, json: boolean): Promise<void> {
  const runner = new SandboxRunner(new SandboxProcess());
  const program = 'n = int(input())\nprint(sum(i * i for i in range(n)))';
  const truth = { inputs: ['1000'], outputs: [String((999 * 1000 * 1999) / 6)] };
  await scoreCode(runner, program, truth, 'fraction');
  const started = performance.now();
  const scores = await Promise.all(Array.from({ length: programs }, () => scoreCode(runner, program, truth, 'fraction')));
  const seconds = (performance.now() - started) / 1000;
  const passed = scores.filter((s) => typeof s === 'object' && s.acc === true).length;
  const result = { programs, seconds, programs_per_s: programs / seconds, passed, concurrency: runner.sandbox.concurrency };
  if (json) console.log(JSON.stringify(result));
  else console.log(`sandbox: ${programs} programs (${passed} passed) in ${seconds.toFixed(2)} s, ${result.programs_per_s.toFixed(1)} programs/s with ${result.concurrency} at once`);
}
