// The optional native addon (native/flowrl_blas.c, built by `npm install` when a compiler is
// there). It runs GEMM and sums in place on typed arrays, with an optimised BLAS dlopen'ed at run
// time or a compiled loop. Nothing here is required: without it the engine uses stock kernels.
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { isMainThread } from 'node:worker_threads';
import { PACKAGE_ROOT } from '../package-root.js';
import { coresForThisRank, ranksOnThisMachine } from './mpi.js';

export interface NativeKernels {
  /** The BLAS in use, e.g. 'OpenBLAS (libopenblas.so.0)'; '' for the compiled loop. */
  readonly blas: string;
  /** C_g = op(A_g) op(B_g) for g < batch; offsets and strides in floats, stride 0 broadcasts. */
  sgemm: SgemmFn;
  /** Y[o, i] = sum_r X[o, r, i]. */
  sum(X: Float32Array, xOffset: number, outer: number, reduce: number, inner: number, Y: Float32Array, yOffset: number): void;
  /** Threads of the BLAS (no-op for the loop); returns the count in effect. */
  setThreads(threads: number): number;
  /** One AdamW update in place on heap offsets (see native/flowrl_blas.c). */
  adamw(heap: Float32Array, param: number, grad: number, m: number, v: number, n: number, decayFactor: number, beta1: number, beta2: number, eps: number, stepSize: number, bc2Sqrt: number): void;
  /**
   * Products with a frozen W [N, K] outside the heap (Float32Array, or Uint16Array of bfloat16):
   * forward Y[M, N] = X W^T, backward Y[M, K] = X[M, N] W. Absent in addons built before it.
   */
  frozenMatmul?: FrozenMatmulFn;
  /**
   * Log-softmax rows fused with the target pick (forward: log-probs then entropies, [2, R]) or
   * its gradient ([R, V]); see native/flowrl_blas.c. Absent in addons built before it.
   */
  tokenLogProbs?: TokenLogProbsFn;
  /**
   * One token per row of logits [rows, V] at offset zOffset: temperature and top-p (topP >= 1: off)
   * with the row's uniform draw (NaN skips the row), as generate.ts's sampleToken; writes the token,
   * its log-probability under softmax(logits * invT) and the log of the share top-p kept. Absent in
   * addons built before it.
   */
  sampleRows?: SampleRowsFn;
  /**
   * frozenMatmul's forward on one float32 array (the heap) plus LoRA deltas: Y += ((X A) * scale) B
   * in each adapter's columns, `adapters` holding (A's offset, B's offset, rank, width, first
   * column) per adapter. Absent in old addons.
   */
  frozenLinear?: FrozenLinearFn;
  /**
   * One decode step's attention on one float32 array (the heap; arguments after it are offsets):
   * rotary on the new q and k, k and v written into the cache at `past`, softmax over the cached
   * keys plus the mask's bias, the weighted values into out. See native/attention.c. Absent in old addons.
   */
  decodeAttention?: DecodeAttentionFn;
  /**
   * Whether products with bfloat16 activations (FrozenMatrix.compute) run on oneDNN's bfloat16
   * kernels (libdnnl.so.2, or FLOWRL_ONEDNN's path; FLOWRL_ONEDNN=off: never), and what it is or
   * why not; without it they run the other products on activations rounded to bfloat16.
   * useOnednn false turns oneDNN off for later products (true: back on where it loaded).
   */
  bfloat16Products?: (useOnednn?: boolean) => { onednn: boolean; detail: string };
  /**
   * Whether other processes keep part of the machine busy (half a core over the last 200 ms; under
   * a quarter makes it idle again), and the cores they used: the addon's pool then runs twice the
   * threads, and oneDNN's and the heap's products run in parts, one thread each. "on"/"off" fix the
   * answer (as FLOWRL_OVERSUBSCRIBE does), "auto" measures. partedProducts: products run so since
   * the process started. Absent in old addons.
   */
  sharedMachine?: (mode?: 'on' | 'off' | 'auto') => { shared: boolean; othersCores: number; partedProducts: number };
  /**
   * SwiGLU on one float32 array (the heap; arguments after it are offsets): forward (backward 0)
   * out = silu(gate) up; backward (1) out = d gate and dUp = d up from dy. See native/layer-passes.c.
   * Absent in old addons.
   */
  swiglu?: SwigluFn;
  /** RMSNorm without a gradient on one float32 array (the heap), rows [rows, width]; see native/layer-passes.c. Absent in old addons. */
  rmsNorm?: RmsNormFn;
  /** Seconds inside the heap's products (sgemm) and the frozen base's, and their FLOPs, since the process started (all threads). Absent in old addons. */
  productCounters?: () => Record<'heap' | 'frozen', { seconds: number; flops: number }>;
  /** Asks for huge pages under an array's untouched memory (Linux; false where it could not). Absent in old addons. */
  adviseHugePages?: (data: Uint8Array) => boolean;
  /**
   * The instruction set of the frozen products' small-row kernels (avx512, avx2, or generic: the
   * BLAS or the compiled loop), after capping it at `cap` when given; FLOWRL_NATIVE_ISA caps it
   * at load. Absent in old addons.
   */
  isa?: (cap?: IsaLevel) => IsaLevel;
}

/** The instruction sets of the small-row kernels, best first. */
export const ISA_LEVELS = ['avx512', 'avx2', 'generic'] as const;
export type IsaLevel = (typeof ISA_LEVELS)[number];

/** See NativeKernels.swiglu. */
export type SwigluFn = (backward: number, n: number, heap: Float32Array, gate: number, up: number, dy: number, out: number, dUp: number) => void;

/** See NativeKernels.rmsNorm. */
export type RmsNormFn = (rows: number, width: number, heap: Float32Array, x: number, weight: number, out: number, eps: number) => void;

/** See NativeKernels.decodeAttention. */
export type DecodeAttentionFn = (heap: Float32Array, batch: number, heads: number, kvHeads: number, headDim: number, capacity: number, past: number, qkv: number, cos: number, sin: number, bias: number, keys: number, values: number, out: number) => void;

/** See NativeKernels.frozenLinear. */
export type FrozenLinearFn = (M: number, N: number, K: number, heap: Float32Array, xOffset: number, W: Float32Array | Uint16Array, wOffset: number, yOffset: number, scale: number, adapters: Float64Array, bf16Activations: boolean) => void;

/** See NativeKernels.sampleRows. */
export type SampleRowsFn = (Z: Float32Array, zOffset: number, rows: number, vocab: number, invT: number, topP: number, uniforms: Float64Array, tokens: Int32Array, logProbs: Float64Array, keptLogMass: Float64Array) => void;

/** See NativeKernels.tokenLogProbs. */
export type TokenLogProbsFn = (Z: Float32Array, zOffset: number, rows: number, vocab: number, targets: Int32Array, invT: number, out: Float32Array, outOffset: number, withEntropy: number, backward: number, G: Float32Array, gOffset: number) => void;

/** See NativeKernels.frozenMatmul. */
export type FrozenMatmulFn = (backward: number, M: number, N: number, K: number, X: Float32Array, xOffset: number, W: Float32Array | Uint16Array, wOffset: number, Y: Float32Array, yOffset: number, bf16Activations: boolean) => void;

/**
 * The addon's frozenMatmul (and frozenLinear, the same function): FrozenMatmulFn's arguments up to
 * yOffset, then flags (FROZEN_BLAS | FROZEN_BF16_ACTIVATIONS), the threads a product may use, and a
 * forward's adapters (see NativeKernels.frozenLinear).
 */
type AddonFrozenMatmul = (
  backward: number, M: number, N: number, K: number, X: Float32Array, xOffset: number, W: Float32Array | Uint16Array, wOffset: number, Y: Float32Array, yOffset: number,
  flags: number, threads: number, scale?: number, adapters?: Float64Array,
) => void;
const FROZEN_BLAS = 1;
const FROZEN_BF16_ACTIVATIONS = 2;

type SgemmFn = (transA: number, transB: number, M: number, N: number, K: number, A: Float32Array, aOffset: number, aStride: number, B: Float32Array, bOffset: number, bStride: number, C: Float32Array, cOffset: number, batch: number) => void;

interface Addon {
  load(paths: string[]): string;
  setThreads(threads: number): number;
  sgemm: SgemmFn;
  sgemmLoop: SgemmFn;
  sum: NativeKernels['sum'];
  adamw: NativeKernels['adamw'];
  /** With a 13th argument (addons that have swiglu): the threads it may use (at least the BLAS's). */
  tokenLogProbs?: (...args: [...Parameters<TokenLogProbsFn>, number?]) => void;
  /** See AddonFrozenMatmul. */
  frozenMatmul?: AddonFrozenMatmul;
  /** As NativeKernels.sampleRows, plus the threads it may use. */
  sampleRows?: (...args: [...Parameters<SampleRowsFn>, number]) => void;
  isa?: NativeKernels['isa'];
  adviseHugePages?: NativeKernels['adviseHugePages'];
  /** As NativeKernels.decodeAttention, plus the threads it may use. */
  decodeAttention?: (...args: [...Parameters<DecodeAttentionFn>, number]) => void;
  /** frozenMatmul taking adapters (see NativeKernels.frozenLinear). */
  frozenLinear?: AddonFrozenMatmul;
  bfloat16Products?: NativeKernels['bfloat16Products'];
  sharedMachine?: NativeKernels['sharedMachine'];
  productCounters?: NativeKernels['productCounters'];
  /** As NativeKernels.swiglu, plus the threads it may use (at least the BLAS's). */
  swiglu?: (...args: [...Parameters<SwigluFn>, number]) => void;
  /** As NativeKernels.rmsNorm, plus the threads it may use (at least the BLAS's). */
  rmsNorm?: (...args: [...Parameters<RmsNormFn>, number]) => void;
}

/**
 * Where to look for an optimised BLAS, unless FLOWRL_BLAS names the one library to load (a path or
 * soname) or is 'none' (the compiled loop even where a BLAS is installed). libblas.so.3 counts only
 * when it is OpenBLAS.
 */
export const BLAS_CANDIDATES = [
  'libopenblas.so.0',
  'libopenblas.so',
  'libopenblasp.so.0',
  'libmkl_rt.so.2',
  'libmkl_rt.so',
  'libblis.so.4',
  'libblis.so',
  'libblas.so.3',
  'libopenblas.dylib',
  '/opt/homebrew/opt/openblas/lib/libopenblas.dylib',
  '/usr/local/opt/openblas/lib/libopenblas.dylib',
];

/** The built addon; FLOWRL_NATIVE_ADDON points elsewhere (a prebuilt one). */
export function addonPath(): string {
  return process.env.FLOWRL_NATIVE_ADDON ?? path.join(PACKAGE_ROOT, 'native', 'build', 'Release', 'flowrl_blas.node');
}

let cached: { kernels?: NativeKernels; loopOnly?: NativeKernels; error?: string } | undefined;

/** Whether FLOWRL_BLAS=none asks for the compiled loop. */
export function blasDisabledByEnv(): boolean {
  return process.env.FLOWRL_BLAS === 'none';
}

/** Threads frozen products and sampling may split over now (see splitFrozenProducts). */
let productSplitThreads = 1;

/**
 * Runs `f` with the frozen base's products and the choice of tokens split over the cores (the
 * addon's thread pool; a BLAS product only when the BLAS runs on one thread; under mpirun, this
 * rank's share of the cores): sampling on the main
 * thread, which is bound by reading the base. Elsewhere (training, where the cores are the
 * data-parallel workers', and in a pool thread) work keeps to its thread.
 */
export function splitFrozenProducts<T>(f: () => T): T {
  if (!isMainThread) return f();
  const previous = productSplitThreads;
  productSplitThreads = coresForThisRank();
  try {
    return f();
  } finally {
    productSplitThreads = previous;
  }
}

/**
 * BLAS threads: FLOWRL_BLAS_THREADS, else 1. The products here are small (hundreds of rows), where
 * a second BLAS thread costs more in hand-offs than it gains (8192x32x32: 0.2 ms on one thread,
 * 2.7 ms on two beside another busy core); the second core goes to a data-parallel worker instead.
 */
export function blasThreads(): number {
  const n = Number(process.env.FLOWRL_BLAS_THREADS ?? 1);
  return Number.isInteger(n) && n >= 1 ? Math.min(n, os.availableParallelism()) : 1;
}

/**
 * The addon with its BLAS loaded (kernels), the same addon on its compiled loop alone (loopOnly),
 * or why it is unavailable (error). Loaded once per thread.
 */
export function loadNativeKernels(): { kernels?: NativeKernels; loopOnly?: NativeKernels; error?: string } {
  if (cached) return cached;
  try {
    const addon = createRequire(import.meta.url)(addonPath()) as Addon;
    const wanted = blasDisabledByEnv() ? [] : process.env.FLOWRL_BLAS ? [process.env.FLOWRL_BLAS] : BLAS_CANDIDATES;
    const blas = addon.load(wanted);
    const sample = addon.sampleRows;
    const attend = addon.decodeAttention;
    const swiglu = addon.swiglu;
    const logProbs = addon.tokenLogProbs;
    const norm = addon.rmsNorm;
    const shared = {
      sum: addon.sum,
      setThreads: addon.setThreads,
      adamw: addon.adamw,
      // Addons built before swiglu take no thread count here.
      tokenLogProbs: logProbs && (swiglu ? (...a: Parameters<TokenLogProbsFn>) => logProbs(...a, productSplitThreads) : logProbs),
      sampleRows: sample && ((...a: Parameters<SampleRowsFn>) => sample(...a, productSplitThreads)),
      isa: addon.isa,
      adviseHugePages: addon.adviseHugePages,
      decodeAttention: attend && ((...a: Parameters<DecodeAttentionFn>) => attend(...a, productSplitThreads)),
      bfloat16Products: addon.bfloat16Products,
      sharedMachine: addon.sharedMachine,
      productCounters: addon.productCounters,
      swiglu: swiglu && ((...a: Parameters<SwigluFn>) => swiglu(...a, productSplitThreads)),
      rmsNorm: norm && ((...a: Parameters<RmsNormFn>) => norm(...a, productSplitThreads)),
    };
    // An addon without bfloat16Products would compute bfloat16 activations' products in float32.
    const frozen = addon.bfloat16Products && addon.frozenMatmul;
    const linear = addon.bfloat16Products && addon.frozenLinear;
    const flags = (blasFlag: number, bf16Activations: boolean) => blasFlag | (bf16Activations ? FROZEN_BF16_ACTIVATIONS : 0);
    const frozenMatmul = (blasFlag: number): FrozenMatmulFn | undefined =>
      frozen && ((backward, M, N, K, X, xOffset, W, wOffset, Y, yOffset, bf16Activations) => frozen(backward, M, N, K, X, xOffset, W, wOffset, Y, yOffset, flags(blasFlag, bf16Activations), productSplitThreads));
    const frozenLinear = (blasFlag: number): FrozenLinearFn | undefined =>
      linear &&
      ((M, N, K, heap, xOffset, W, wOffset, yOffset, scale, adapters, bf16Activations) => linear(0, M, N, K, heap, xOffset, W, wOffset, heap, yOffset, flags(blasFlag, bf16Activations), productSplitThreads, scale, adapters));
    const kernels: NativeKernels = {
      blas,
      sgemm: addon.sgemm,
      ...shared,
      frozenMatmul: frozenMatmul(FROZEN_BLAS),
      frozenLinear: frozenLinear(FROZEN_BLAS),
    };
    kernels.setThreads(blasThreads());
    // Ranks on one machine would take each other for other processes and outnumber each other's threads.
    if (ranksOnThisMachine() > 1 && process.env.FLOWRL_OVERSUBSCRIBE !== 'on') addon.sharedMachine?.('off');
    const loopOnly: NativeKernels = {
      blas: '',
      sgemm: addon.sgemmLoop,
      ...shared,
      frozenMatmul: frozenMatmul(0),
      frozenLinear: frozenLinear(0),
    };
    cached = { kernels, loopOnly };
  } catch (e) {
    cached = { error: (e as Error).message.split('\n')[0] };
  }
  return cached;
}
