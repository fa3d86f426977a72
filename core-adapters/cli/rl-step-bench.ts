// flowrl bench --model-config FILE --rl-step: one whole RL step at a real model's shape (random
// weights), phase by phase, each stated as a fraction of this machine's limits (./limits.ts):
//   rollout    prompts x samples sampled with the KV cache: decoding reads every weight once per
//              new token and multiplies it by every row, so its rate is compared with the limit
//              that binds: the read bandwidth for a few rows, the sgemm peak for many (with the
//              prefill's FLOPs);
//   old, ref   log-probs of every sequence under the policy and the reference (adapters off):
//              forward passes, compared with the sgemm peak;
//   update     one optimizer step over every sequence in micro-batches (forward and backward).
// FLOPs count the matmuls with weights, 2 per weight per token forward; a backward adds 2 more for
// the activations' gradient and, with every weight trained, 2 for the weights' (LoRA's are small).
import * as tf from '@tensorflow/tfjs-core';
import os from 'node:os';
import path from 'node:path';
import type { BackendChoice, FrozenDtype, NativeChoice } from '../config/choices.js';
import { initEngine } from '../engine/backend.js';
import { frozenBaseAvailable } from '../engine/frozen.js';
import { describeBfloat16Products } from '../engine/kernels.js';
import { blasThreads, loadNativeKernels } from '../engine/native.js';
import { InputError } from '../errors.js';
import { initWeights, modelFromWeights } from '../model/checkpoint.js';
import type { CausalLM } from '../model/causal-lm.js';
import { heapOverflowGiB, readModelConfig, type ModelConfig } from '../model/config.js';
import { generate } from '../model/generate.js';
import { packSequences, scoreResponses } from '../model/logprobs.js';
import { createAdapters, LORA_MODULES } from '../model/lora.js';
import { AdamW } from '../model/optim.js';
import { languageModelGradients, sliceSequences } from '../model/train-step.js';
import { runUpdateLoop } from '../model/update-loop.js';
import { Rng } from '../random.js';
import type { Limits } from './limits.js';
import { engineLimits } from './gpu-limits.js';
import { readFloat32 } from '../engine/readback.js';

export interface RlStepOptions {
  configFile: string;
  loraRank: number;
  baseDtype: FrozenDtype;
  /** What the frozen base's products round activations to (model.base_compute_dtype). */
  baseCompute: FrozenDtype;
  prompts: number;
  samples: number;
  promptTokens: number;
  responseTokens: number;
  microBatch: number;
  /** The limits' measurement sizes (--limits-mb, --matrix). */
  limitsMb: number;
  matrix: number;
  backend: BackendChoice;
  native?: NativeChoice;
  quiet?: boolean;
}

export interface RlPhase {
  name: 'rollout' | 'old_log_prob' | 'ref_log_prob' | 'update';
  seconds: number;
  /** rollout: GB/s of weights read; the others: GFLOP/s. */
  rate: number;
  unit: 'GB/s' | 'GFLOP/s';
  /** rate over the matching limit (read bandwidth or sgemm peak). */
  fraction_of_limit: number;
  /** Of `seconds`, the time inside the native products (heap and frozen base) and their rate; null without the addon. */
  products_s: number | null;
  products_gflop_s: number | null;
}

export interface RlStepResult {
  model: string;
  parameters: number;
  lora_rank: number;
  base_dtype: FrozenDtype | 'heap';
  base_compute_dtype: FrozenDtype;
  sequences: number;
  prompt_tokens: number;
  response_tokens: number;
  step_seconds: number;
  phases: RlPhase[];
  limits: Limits;
  /** The product peak the fractions use: the BLAS's sgemm, the compiled loop's without one, or the bfloat16 GEMM's for bfloat16 activations on oneDNN. */
  sgemm_limit_gflop_s: number;
  /** Which peak that is. */
  product_limit: 'sgemm peak' | 'bfloat16 GEMM peak';
}

/** What a model's weights weigh for the limits: see weightFigures. */
export interface WeightFigures {
  parameters: number;
  /** Bytes a decoding step reads: every weight once (an untied embedding is only looked up). */
  readBytes: number;
  /** Weights the head multiplies per token, and those the decoder layers do. */
  headValues: number;
  bodyValues: number;
}

export function weightFigures(model: CausalLM): WeightFigures {
  const config = model.config;
  const frozenBytes = [...model.frozen.values()].reduce((n, m) => n + m.bytes, 0);
  const heapValues = [...model.params.values()].reduce((n, v) => n + v.size, 0) + [...(model.adapters?.params.values() ?? [])].reduce((n, v) => n + v.size, 0);
  const parameters = heapValues + [...model.frozen.values()].reduce((n, m) => n + m.rows * m.cols, 0);
  const embedValues = config.vocabSize * config.hiddenSize;
  const embedBytes = model.frozen.get('model.embed_tokens.weight')?.bytes ?? 4 * embedValues;
  const readBytes = frozenBytes + 4 * heapValues - (config.tieWordEmbeddings ? 0 : embedBytes);
  const headValues = config.vocabSize * config.hiddenSize;
  const bodyValues = parameters - embedValues - (config.tieWordEmbeddings ? 0 : headValues);
  return { parameters, readBytes, headValues, bodyValues };
}

/**
 * The benches' model: random weights of `config`, LoRA adapters when loraRank > 0 (the base then
 * outside the heap where the addon can multiply it there). A shape whose weights, gradients and
 * AdamW's moments cannot fit the 4 GiB wasm heap is refused before anything is built (as training
 * refuses it), and --base-dtype without LoRA, which nothing would read, too.
 */
export function benchModel(configFile: string, config: ModelConfig, loraRank: number, baseDtype: FrozenDtype, baseCompute: FrozenDtype, backend: string): CausalLM {
  const lora = loraRank > 0;
  if (!lora && baseDtype !== 'float32') throw new InputError(`--base-dtype ${baseDtype} applies to a frozen LoRA base; give --lora-rank > 0 (without LoRA every weight trains in float32)`);
  if (lora && baseDtype === 'bfloat16' && !frozenBaseAvailable()) throw new InputError('--base-dtype bfloat16 needs the native addon on the wasm backend');
  if (lora && baseCompute === 'bfloat16' && frozenBaseAvailable()) process.stderr.write(`[flowrl] bfloat16 products: ${describeBfloat16Products()}\n`);
  const outside = lora && frozenBaseAvailable();
  // Without LoRA: the weights, their gradients and AdamW's two moments.
  const gib = backend === 'wasm' && !outside ? heapOverflowGiB(config, lora ? 1 : 4) : undefined;
  if (gib !== undefined) {
    throw new InputError(
      `${configFile}: ${lora ? 'the base' : 'the weights, their gradients and AdamW\'s two moments'} take ${gib.toFixed(2)} GiB of the wasm heap, which stops at 4 GiB; ` +
        `bench it with LoRA and the native addon (--lora-rank 16: the base then stays outside the heap), or on tfjs-node`,
    );
  }
  const model = modelFromWeights(config, initWeights(config, 0), outside ? { frozenBase: baseDtype, frozenCompute: baseCompute } : {});
  if (lora) model.attachAdapters(createAdapters(config, { rank: loraRank, alpha: 2 * loraRank, targetModules: [...LORA_MODULES] }, 0));
  return model;
}

export async function runRlStepBench(o: RlStepOptions): Promise<RlStepResult> {
  const info = await initEngine(o.backend, { quiet: o.quiet, native: o.native });
  const config = readModelConfig(o.configFile);
  const lora = o.loraRank > 0;
  const model = benchModel(o.configFile, config, o.loraRank, o.baseDtype, o.baseCompute, info.backend);
  const limits = await engineLimits(info, { arrayMb: o.limitsMb, matrix: o.matrix, rounds: 3 });
  model.gradientCheckpointing = true;
  if (info.backend === 'wasm') loadNativeKernels().kernels?.setThreads(os.availableParallelism());
  const log = (text: string) => !o.quiet && process.stderr.write(`[flowrl] bench --rl-step: ${text}\n`);

  const { parameters, readBytes, headValues, bodyValues } = weightFigures(model);

  const rng = new Rng(1);
  const prompts = Array.from({ length: o.prompts }, () => Array.from({ length: o.promptTokens }, () => rng.int(config.vocabSize)));
  const rows = prompts.flatMap((p) => Array.from({ length: o.samples }, () => p));
  // The products' share of each phase: what the rest of it (elementwise, softmax, attention's
  // small ops, the JavaScript between) costs is what keeps a phase below the product peak.
  // Only where the engine runs the addon's products (not on stock kernels, where they would read 0).
  const counters = () => {
    const c = frozenBaseAvailable() ? loadNativeKernels().kernels?.productCounters?.() : undefined;
    return c ? { seconds: c.heap.seconds + c.frozen.seconds, flops: c.heap.flops + c.frozen.flops } : undefined;
  };
  const inProducts = new Map<string, { seconds: number; flops: number }>();
  const timed = async <T>(name: string, f: () => T | Promise<T>): Promise<[T, number]> => {
    const before = counters();
    const started = performance.now();
    const out = await f();
    const seconds = (performance.now() - started) / 1000;
    const after = counters();
    if (before && after) inProducts.set(name, { seconds: after.seconds - before.seconds, flops: after.flops - before.flops });
    log(`${name} ${seconds.toFixed(1)} s`);
    return [out, seconds];
  };
  // A short warm-up, so first-call compilation is not timed.
  await generate(model, rows.slice(0, 1), { maxNewTokens: 2, temperature: 1, seed: 0, stopTokenIds: [] });
  // Sampled as a run samples: the BLAS on its run-time thread count (see bench.ts).
  const kernels = info.backend === 'wasm' ? loadNativeKernels().kernels : undefined;
  kernels?.setThreads(blasThreads());
  const [sampled, rolloutS] = await timed('rollout', async () => (await generate(model, rows, { maxNewTokens: o.responseTokens, temperature: 1, seed: 0, stopTokenIds: [] })).tokens);
  kernels?.setThreads(os.availableParallelism());
  const seq = packSequences(rows, sampled);
  const micro = Array.from({ length: Math.ceil(seq.batch / o.microBatch) }, (_, i) => sliceSequences(seq, i * o.microBatch, Math.min(seq.batch, (i + 1) * o.microBatch)));
  const logProbs = async () => {
    for (const m of micro) {
      const lp = tf.tidy(() => scoreResponses(model, m).logProbs);
      await readFloat32(lp, 'bench log-probs');
      lp.dispose();
    }
  };
  const [, oldS] = await timed('old log-probs', logProbs);
  const [, refS] = await timed('reference log-probs', () => model.withoutAdapters(logProbs));
  const optimizer = new AdamW({ lr: 1e-6, weightDecay: 0.01 });
  const [, updateS] = await timed('update', () =>
    runUpdateLoop({
      miniBatches: [seq],
      microBatches: () => micro,
      rows: (s) => s.batch,
      accumulate: async (m, _place, grads) => void (await languageModelGradients(model, m, grads)),
      optimizer,
      params: model.trainableParams(),
      maxGradNorm: 1,
      lr: () => optimizer.lr,
      prefix: 'bench',
    }),
  );
  optimizer.dispose();
  model.dispose();

  // The body multiplies every token; the head only those that predict a response token.
  const forwardFlops = 2 * bodyValues * seq.batch * (seq.promptLength + seq.responseLength) + 2 * headValues * seq.batch * seq.responseLength;
  // The base's products on oneDNN's bfloat16 kernels are held to their own peak.
  const bf16Peak = o.baseCompute === 'bfloat16' && model.frozen.size ? limits.bf16_gemm_gflop_s : null;
  const sgemmLimit = bf16Peak ?? limits.sgemm_gflop_s ?? limits.sgemm_loop_gflop_s;
  const TIMED: Record<RlPhase['name'], string> = { rollout: 'rollout', old_log_prob: 'old log-probs', ref_log_prob: 'reference log-probs', update: 'update' };
  const products = (name: RlPhase['name']) => {
    const p = inProducts.get(TIMED[name]);
    return { products_s: p ? p.seconds : null, products_gflop_s: p && p.seconds > 0 ? p.flops / p.seconds / 1e9 : null };
  };
  const compute = (name: RlPhase['name'], flops: number, seconds: number): RlPhase => {
    const rate = flops / seconds / 1e9;
    return { name, seconds, rate, unit: 'GFLOP/s', fraction_of_limit: rate / sgemmLimit, ...products(name) };
  };
  const readRate = (o.responseTokens * readBytes) / rolloutS / 1e9;
  const rolloutFlops = 2 * bodyValues * rows.length * o.promptTokens + 2 * (bodyValues + headValues) * rows.length * o.responseTokens;
  const computeBound = rolloutFlops / (sgemmLimit * 1e9) > (o.responseTokens * readBytes) / (limits.read_gb_s * 1e9);
  const phases: RlPhase[] = [
    computeBound ? compute('rollout', rolloutFlops, rolloutS) : { name: 'rollout', seconds: rolloutS, rate: readRate, unit: 'GB/s', fraction_of_limit: readRate / limits.read_gb_s, ...products('rollout') },
    compute('old_log_prob', forwardFlops, oldS),
    compute('ref_log_prob', forwardFlops, refS),
    compute('update', forwardFlops * (lora ? 2 : 3), updateS),
  ];
  return {
    model: path.basename(o.configFile),
    parameters,
    lora_rank: o.loraRank,
    base_dtype: model.frozen.size ? o.baseDtype : 'heap',
    base_compute_dtype: o.baseCompute,
    sequences: seq.batch,
    prompt_tokens: o.promptTokens,
    response_tokens: o.responseTokens,
    step_seconds: phases.reduce((s, p) => s + p.seconds, 0),
    phases,
    limits,
    sgemm_limit_gflop_s: sgemmLimit,
    product_limit: bf16Peak ? 'bfloat16 GEMM peak' : 'sgemm peak',
  };
}

/** scripts/torch_model_bench.py --rl-step's answer: seconds per phase. */
export interface TorchRlStep {
  phases: Record<RlPhase['name'], number>;
  step_seconds: number;
  threads: number;
  torch: string;
}

export function formatRlStep(r: RlStepResult, torch?: { result?: TorchRlStep; error?: string }): string {
  const lines = [
    `${r.model}: ${r.parameters.toLocaleString('en-US')} parameters, ${r.lora_rank ? `LoRA r ${r.lora_rank}, base ${r.base_dtype}${r.base_compute_dtype === 'bfloat16' ? ' on bfloat16 activations' : ''}` : 'full fine-tuning'}, random weights`,
    `one RL step: ${r.sequences} sequences (${r.prompt_tokens}-token prompts, ${r.response_tokens} new tokens), ${r.step_seconds.toFixed(1)} s`,
    `limits: read ${r.limits.read_gb_s.toFixed(1)} GB/s, ${r.product_limit} ${r.sgemm_limit_gflop_s.toFixed(0)} GFLOP/s (${r.limits.threads} threads)`,
    `phase            seconds  share  rate             of the limit${torch?.result ? `              PyTorch ${torch.result.torch} (${torch.result.threads} threads)  ours/torch` : ''}`,
  ];
  const peer = (seconds: number | undefined, ours: number) => (seconds === undefined ? '' : `  ${seconds.toFixed(1).padStart(7)} s  ${(ours / seconds).toFixed(2).padStart(5)}`);
  for (const p of r.phases) {
    const limit = `${(100 * p.fraction_of_limit).toFixed(0).padStart(4)} % of ${p.unit === 'GB/s' ? 'read bandwidth' : r.product_limit}`;
    lines.push(`${p.name.padEnd(16)} ${p.seconds.toFixed(1).padStart(7)}  ${((100 * p.seconds) / r.step_seconds).toFixed(0).padStart(4)} %  ${p.rate.toFixed(1).padStart(7)} ${p.unit.padEnd(7)}  ${limit.padEnd(26)}${peer(torch?.result?.phases[p.name], p.seconds)}`);
  }
  if (torch?.result) lines.push(`${'step'.padEnd(16)} ${r.step_seconds.toFixed(1).padStart(7)}  ${''.padEnd(51)}${peer(torch.result.step_seconds, r.step_seconds)}`);
  if (torch?.error) lines.push(`PyTorch comparison skipped: ${torch.error}`);
  const split = r.phases.filter((p) => p.products_s !== null);
  if (split.length) {
    lines.push('inside the native products (heap and frozen base) and the rest of each phase:');
    for (const p of split) lines.push(`  ${p.name.padEnd(14)} products ${p.products_s!.toFixed(1).padStart(6)} s at ${(p.products_gflop_s ?? 0).toFixed(0).padStart(4)} GFLOP/s, the rest ${(p.seconds - p.products_s!).toFixed(1).padStart(6)} s`);
  }
  return lines.join('\n');
}
