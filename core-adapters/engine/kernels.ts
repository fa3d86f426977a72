// Kernel overrides for tfjs's wasm backend (README "Engine and performance"). Stock wasm runs a
// matmul fast (XNNPACK) only when it is 2-D and untransposed; transposed and batched products
// (every backward matmul, attention) fall to a loop at 1-2 GFLOP/s. These overrides route:
//   - with the native addon: BatchMatMul, _FusedMatMul (linear activation) and Sum to native GEMM
//     and sums, zero-copy on the wasm heap;
//   - without it: transposed 2-D products through an explicit Transpose and then XNNPACK.
// Anything else (other dtypes, general broadcasting, fused activations) goes to the stock kernel.
import * as tf from '@tensorflow/tfjs-core';
import { FUSED_RMS_NORM } from './fused.js';
import type { NativeKernels } from './native.js';

interface WasmBackend {
  dataIdMap: { get(dataId: object): { id: number; memoryOffset: number } | undefined };
  refCount(dataId: object): number;
  makeOutput(shape: number[], dtype: tf.DataType): tf.TensorInfo;
  disposeData(dataId: object): boolean;
  wasm: { HEAPF32: Float32Array; tfjs: { disposeData(id: number): void; registerTensor(id: number, size: number, memoryOffset: number): void } };
}

type KernelArgs = { inputs: Record<string, tf.TensorInfo>; attrs?: tf.NamedAttrMap; backend: unknown };
type KernelFunc = (args: KernelArgs) => tf.TensorInfo | tf.TensorInfo[];

const BACKEND = 'wasm';
const originals = new Map<string, tf.KernelConfig>();

function stock(name: string): KernelFunc {
  const config = originals.get(name) ?? tf.getKernel(name, BACKEND);
  if (!config) throw new Error(`tfjs wasm kernel ${name} is not registered`);
  return config.kernelFunc as unknown as KernelFunc;
}

const product = (dims: number[]) => dims.reduce((a, b) => a * b, 1);

interface MatMulPlan {
  M: number;
  N: number;
  K: number;
  batchA: number;
  batchB: number;
  batch: number;
  outShape: number[];
}

/** Sizes of op(a) @ op(b) when the batch dims are equal or one side is a single matrix; else undefined. */
function planMatMul(a: tf.TensorInfo, b: tf.TensorInfo, transposeA: boolean, transposeB: boolean): MatMulPlan | undefined {
  if (a.dtype !== 'float32' || b.dtype !== 'float32' || a.shape.length < 2 || b.shape.length < 2) return undefined;
  const [ra, rb] = [a.shape.length, b.shape.length];
  const M = transposeA ? a.shape[ra - 1] : a.shape[ra - 2];
  const K = transposeA ? a.shape[ra - 2] : a.shape[ra - 1];
  const kB = transposeB ? b.shape[rb - 1] : b.shape[rb - 2];
  const N = transposeB ? b.shape[rb - 2] : b.shape[rb - 1];
  if (K !== kB) return undefined;
  const batchDimsA = a.shape.slice(0, -2);
  const batchDimsB = b.shape.slice(0, -2);
  const [batchA, batchB] = [product(batchDimsA), product(batchDimsB)];
  let outBatch: number[];
  try {
    outBatch = tf.backend_util.assertAndGetBroadcastShape(batchDimsA, batchDimsB);
  } catch {
    return undefined;
  }
  const batch = product(outBatch);
  if (!(batchA === batch || batchA === 1) || !(batchB === batch || batchB === 1)) return undefined;
  return { M, N, K, batchA, batchB, batch, outShape: [...outBatch, M, N] };
}

function offset(backend: WasmBackend, t: tf.TensorInfo): number {
  return backend.dataIdMap.get(t.dataId)!.memoryOffset >>> 2;
}

/**
 * Call after writing a tensor's buffer in place. The wasm backend keeps state derived from a
 * buffer's contents under its id until the tensor is disposed: XNNPACK packs the right-hand
 * operand of a plain 2-D product once and reuses that packing on every later product with the
 * same tensor. Re-registering the id runs the disposal callbacks that drop it, and keeps the
 * buffer; without this, a weight updated in place keeps multiplying as its first value.
 */
function forgetDerivedState(backend: WasmBackend, t: tf.TensorInfo): void {
  const info = backend.dataIdMap.get(t.dataId)!;
  backend.wasm.tfjs.disposeData(info.id);
  backend.wasm.tfjs.registerTensor(info.id, tf.util.sizeFromShape(t.shape), info.memoryOffset);
}

function nativeMatMul(native: NativeKernels, backend: WasmBackend, a: tf.TensorInfo, b: tf.TensorInfo, tA: boolean, tB: boolean, plan: MatMulPlan): tf.TensorInfo {
  const out = backend.makeOutput(plan.outShape, 'float32');
  const { M, N, K } = plan;
  // Read the heap after the allocation: growing memory replaces the view.
  const heap = backend.wasm.HEAPF32;
  native.sgemm(+tA, +tB, M, N, K, heap, offset(backend, a), plan.batchA === 1 ? 0 : M * K, heap, offset(backend, b), plan.batchB === 1 ? 0 : K * N, heap, offset(backend, out), plan.batch);
  return out;
}

/** x with its last two axes swapped (the stock Transpose kernel). */
function swapLastAxes(x: tf.TensorInfo, backend: unknown): tf.TensorInfo {
  const rank = x.shape.length;
  const perm = [...Array(rank).keys()];
  [perm[rank - 2], perm[rank - 1]] = [perm[rank - 1], perm[rank - 2]];
  return stock('Transpose')({ inputs: { x }, attrs: { perm }, backend }) as tf.TensorInfo;
}

/**
 * Runs `run` on a and b made untransposed by explicit Transposes (single matrices only: the stock
 * batched path is slow either way), then frees the temporaries.
 */
function withExplicitTransposes(args: KernelArgs, run: (a: tf.TensorInfo, b: tf.TensorInfo) => tf.TensorInfo): tf.TensorInfo {
  const backend = args.backend as WasmBackend;
  const { transposeA, transposeB } = args.attrs as { transposeA: boolean; transposeB: boolean };
  const a = transposeA ? swapLastAxes(args.inputs.a, backend) : args.inputs.a;
  const b = transposeB ? swapLastAxes(args.inputs.b, backend) : args.inputs.b;
  const out = run(a, b);
  if (transposeA) backend.disposeData(a.dataId);
  if (transposeB) backend.disposeData(b.dataId);
  return out;
}

function makeBatchMatMul(native: NativeKernels | undefined): KernelFunc {
  const original = stock('BatchMatMul');
  return (args) => {
    const { transposeA, transposeB } = args.attrs as { transposeA: boolean; transposeB: boolean };
    const plan = planMatMul(args.inputs.a, args.inputs.b, transposeA, transposeB);
    if (!plan) return original(args);
    const plain = !transposeA && !transposeB && plan.batch === 1;
    // XNNPACK beats the compiled loop on its own fast path; a real BLAS beats both.
    if (native && (native.blas || !plain)) return nativeMatMul(native, args.backend as WasmBackend, args.inputs.a, args.inputs.b, transposeA, transposeB, plan);
    if (plain || plan.batch !== 1) return original(args);
    return withExplicitTransposes(args, (a, b) => original({ ...args, inputs: { a, b }, attrs: { ...args.attrs, transposeA: false, transposeB: false } }) as tf.TensorInfo);
  };
}

function makeFusedMatMul(native: NativeKernels | undefined): KernelFunc {
  const original = stock('_FusedMatMul');
  return (args) => {
    const { transposeA, transposeB, activation } = args.attrs as { transposeA: boolean; transposeB: boolean; activation?: string };
    const { a, b, bias, preluActivationWeights } = args.inputs;
    const plan = planMatMul(a, b, transposeA, transposeB);
    const linear = (activation ?? 'linear') === 'linear' && !preluActivationWeights;
    if (plan && linear && native && native.blas) {
      const backend = args.backend as WasmBackend;
      const product = nativeMatMul(native, backend, a, b, transposeA, transposeB, plan);
      if (!bias) return product;
      const out = stock('Add')({ inputs: { a: product, b: bias }, backend }) as tf.TensorInfo;
      backend.disposeData(product.dataId);
      return out;
    }
    if (!plan || plan.batch !== 1 || (!transposeA && !transposeB)) return original(args);
    return withExplicitTransposes(args, (x, w) => original({ ...args, inputs: { ...args.inputs, a: x, b: w }, attrs: { ...args.attrs, transposeA: false, transposeB: false } }) as tf.TensorInfo);
  };
}

/** Sum over a contiguous run of axes as one [outer, reduce, inner] pass on the heap. */
function makeSum(native: NativeKernels): KernelFunc {
  const original = stock('Sum');
  return (args) => {
    const x = args.inputs.x;
    const { axis, keepDims } = args.attrs as { axis: number | number[]; keepDims: boolean };
    if (x.dtype !== 'float32') return original(args);
    const axes = tf.util.parseAxisParam(axis, x.shape).sort((p, q) => p - q);
    if (!axes.length || axes.some((ax, i) => i > 0 && ax !== axes[i - 1] + 1)) return original(args);
    const [first, last] = [axes[0], axes[axes.length - 1]];
    const outer = product(x.shape.slice(0, first));
    const reduce = product(x.shape.slice(first, last + 1));
    const inner = product(x.shape.slice(last + 1));
    const outShape = keepDims ? x.shape.map((d, i) => (axes.includes(i) ? 1 : d)) : x.shape.filter((_, i) => !axes.includes(i));
    const backend = args.backend as WasmBackend;
    const out = backend.makeOutput(outShape, 'float32');
    const heap = backend.wasm.HEAPF32;
    native.sum(heap, offset(backend, x), outer, reduce, inner, heap, offset(backend, out));
    return out;
  };
}

/** The native kernels the overrides use (undefined: stock or TypeScript-only). */
let activeNative: NativeKernels | undefined;

export interface AdamWHyper {
  decayFactor: number;
  beta1: number;
  beta2: number;
  eps: number;
  stepSize: number;
  bc2Sqrt: number;
}

/** In-place writes per buffer: a cache keyed by dataIds (merged LoRA weights) must see them too. */
const writesInPlace = new WeakMap<object, number>();

/** Records that `dataId`'s buffer was written in place. */
export function countInPlaceWrite(dataId: object): void {
  writesInPlace.set(dataId, (writesInPlace.get(dataId) ?? 0) + 1);
}

/** How often `dataId`'s buffer was written in place (0 when never). */
export function inPlaceWriteCount(dataId: object): number {
  return writesInPlace.get(dataId) ?? 0;
}

/**
 * One AdamW update of a parameter and its moments in place, in native code (one call instead of
 * about 14 tfjs ops). Returns false when that is not possible here (no native kernels, another
 * backend, or buffers shared with other tensors), and the caller runs the tfjs ops.
 */
export function fusedAdamW(param: tf.Variable, grad: tf.Tensor, m: tf.Variable, v: tf.Variable, h: AdamWHyper): boolean {
  if (!activeNative || tf.getBackend() !== 'wasm') return false;
  if ([param, grad, m, v].some((t) => t.dtype !== 'float32' || t.size !== param.size)) return false;
  const backend = tf.backend() as unknown as WasmBackend;
  // Written in place: only buffers no other tensor shares.
  if ([param, m, v].some((t) => backend.refCount(t.dataId) !== 1)) return false;
  const heap = backend.wasm.HEAPF32;
  activeNative.adamw(heap, offset(backend, param), offset(backend, grad), offset(backend, m), offset(backend, v), param.size, h.decayFactor, h.beta1, h.beta2, h.eps, h.stepSize, h.bc2Sqrt);
  for (const written of [param, m, v]) {
    forgetDerivedState(backend, written);
    countInPlaceWrite(written.dataId);
  }
  return true;
}

/**
 * tf.clone without a copy: the clone shares the buffer and counts a reference, as Reshape does.
 * (The stock wasm Identity copies, and the gradient tape clones every tensor it saves.) Writers
 * in place check that a buffer has one reference before writing.
 */
function sharedIdentity({ inputs: { x }, backend }: KernelArgs): tf.TensorInfo {
  if (x.dtype === 'string') return stock('Identity')({ inputs: { x }, backend }) as tf.TensorInfo;
  (backend as { incRef(dataId: object): void }).incRef(x.dataId);
  return { dataId: x.dataId, shape: x.shape, dtype: x.dtype };
}

/** Restores the stock kernels. */
export function removeWasmKernelOverrides(): void {
  activeNative = undefined;
  for (const [name, config] of originals) {
    tf.unregisterKernel(name, BACKEND);
    tf.registerKernel(config);
  }
  originals.clear();
}

/**
 * Installs the overrides on the wasm backend (replacing earlier ones); returns what is active,
 * for the engine's banner. Without the native addon only the explicit-transpose matmuls apply.
 */
export function installWasmKernelOverrides(native?: NativeKernels): string[] {
  removeWasmKernelOverrides();
  activeNative = native;
  const replacements: [string, KernelFunc][] = [
    ['BatchMatMul', makeBatchMatMul(native)],
    ['_FusedMatMul', makeFusedMatMul(native)],
    ['Identity', sharedIdentity],
  ];
  if (native) replacements.push(['Sum', makeSum(native)]);
  if (native?.rmsNorm) replacements.push([FUSED_RMS_NORM, nativeRmsNorm]);
  if (native?.frozenMatmul && !tf.getKernel(FROZEN_MATMUL, BACKEND)) tf.registerKernel({ kernelName: FROZEN_MATMUL, backendName: BACKEND, kernelFunc: frozenMatMul as unknown as tf.KernelFunc });
  if (native?.decodeAttention && !tf.getKernel(DECODE_ATTENTION, BACKEND)) tf.registerKernel({ kernelName: DECODE_ATTENTION, backendName: BACKEND, kernelFunc: decodeAttentionKernel as unknown as tf.KernelFunc });
  if (native?.frozenLinear && !tf.getKernel(FROZEN_LINEAR, BACKEND)) tf.registerKernel({ kernelName: FROZEN_LINEAR, backendName: BACKEND, kernelFunc: frozenLinear as unknown as tf.KernelFunc });
  for (const [kernelName, kernelFunc] of [
    [TOKEN_LOG_PROBS, tokenLogProbsKernel],
    [TOKEN_LOG_PROBS_GRAD, tokenLogProbsGradKernel],
  ] as const) {
    if (native?.tokenLogProbs && !tf.getKernel(kernelName, BACKEND)) tf.registerKernel({ kernelName, backendName: BACKEND, kernelFunc: kernelFunc as unknown as tf.KernelFunc });
  }
  for (const [kernelName, kernelFunc] of [
    [SWIGLU, swiGluKernel],
    [SWIGLU_GRAD, swiGluGradKernel],
  ] as const) {
    if (native?.swiglu && !tf.getKernel(kernelName, BACKEND)) tf.registerKernel({ kernelName, backendName: BACKEND, kernelFunc: kernelFunc as unknown as tf.KernelFunc });
  }
  for (const [name, kernelFunc] of replacements) {
    const config = tf.getKernel(name, BACKEND);
    if (!config) continue;
    originals.set(name, config);
    tf.unregisterKernel(name, BACKEND);
    tf.registerKernel({ ...config, kernelFunc: kernelFunc as unknown as tf.KernelFunc });
  }
  return native ? [`native ${native.blas || 'compiled loop'}: ${replacements.map(([n]) => n).filter((n) => n !== 'Identity' && n !== FUSED_RMS_NORM).join(', ')}, AdamW`] : ['explicit-transpose matmuls'];
}

/** A frozen weight W [rows, cols] outside the heap (engine/frozen.ts), as the kernel reads it. */
export interface FrozenWeights {
  readonly rows: number;
  readonly cols: number;
  /** Row-major, float32 or bfloat16 bits. */
  readonly data: Float32Array | Uint16Array;
  /** bfloat16: products round the other operand to bfloat16 first (see FrozenMatrix.compute). */
  readonly compute?: 'float32' | 'bfloat16';
}

export const FROZEN_MATMUL = 'FlowrlFrozenMatMul';

/**
 * Shared memory for a frozen matrix, backed by huge pages where the addon can ask for them:
 * decoding reads every page once per token, and with 4 KiB pages the products ran at 29 or 36 GB/s
 * from one process to the next; with huge pages at 36 every time.
 */
export function frozenMemory(bytes: number): SharedArrayBuffer {
  const buffer = new SharedArrayBuffer(bytes);
  activeNative?.adviseHugePages?.(new Uint8Array(buffer));
  return buffer;
}

/** Whether products with frozen weights outside the heap can run here (wasm and an addon that has them). */
export function frozenProductsAvailable(): boolean {
  return tf.getBackend() === 'wasm' && activeNative?.frozenMatmul !== undefined && tf.getKernel(FROZEN_MATMUL, BACKEND) !== undefined;
}

/**
 * forward: x[M, cols] W[start, start + count)^T -> [M, count]; backward: x[M, count] W[rows] -> [M, cols].
 * The weight stays where it is; only x and the result live on the heap.
 */
function frozenMatMul({ inputs: { x }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const { weights, backward, start, count } = attrs as unknown as { weights: FrozenWeights; backward: boolean; start: number; count: number };
  const M = x.shape[0];
  const out = b.makeOutput([M, backward ? weights.cols : count], 'float32');
  const heap = b.wasm.HEAPF32;
  activeNative!.frozenMatmul!(+backward, M, count, weights.cols, heap, offset(b, x), weights.data, start * weights.cols, heap, offset(b, out), weights.compute === 'bfloat16');
  return out;
}

export const FROZEN_LINEAR = 'FlowrlFrozenLinear';

/** A LoRA adapter's factors, A [in, r] and B [r, out], and the first output column its delta goes to. */
export interface ColumnAdapter {
  A: tf.Tensor2D;
  B: tf.Tensor2D;
  column: number;
}

/** x W[start, start + count)^T plus each adapter's ((x A) * scale) B in its columns, in one kernel (no gradient). */
function frozenLinear({ inputs, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const { weights, start, count, scale, columns } = attrs as unknown as { weights: FrozenWeights; start: number; count: number; scale: number; columns: number[] };
  const x = inputs.x;
  const M = x.shape[0];
  const out = b.makeOutput([M, count], 'float32');
  const heap = b.wasm.HEAPF32;
  const adapters = new Float64Array(columns.flatMap((column, i) => [offset(b, inputs[`A${i}`]), offset(b, inputs[`B${i}`]), ...inputs[`B${i}`].shape, column]));
  activeNative!.frozenLinear!(M, count, weights.cols, heap, offset(b, x), weights.data, start * weights.cols, offset(b, out), scale, adapters, weights.compute === 'bfloat16');
  return out;
}

/** How products with bfloat16 activations run here, in words (the first call loads oneDNN). */
export function describeBfloat16Products(): string {
  const info = activeNative?.bfloat16Products?.();
  if (!info) return 'not here (they need the native addon)';
  return info.onednn ? `on bfloat16 instructions, ${info.detail}` : `on activations rounded to bfloat16, then as float32 products (oneDNN not used: ${info.detail})`;
}

/** Whether frozenLinearWithAdapters can run here (wasm and an addon that has it). */
export function fusedAdaptersAvailable(): boolean {
  return frozenProductsAvailable() && activeNative?.frozenLinear !== undefined && tf.getKernel(FROZEN_LINEAR, BACKEND) !== undefined;
}

/**
 * x[M, cols] W[start, start + count)^T plus adapter deltas: inference only (decoding pays a fixed
 * cost per tensor op, and each adapter took four of them).
 */
export function frozenLinearWithAdapters(x: tf.Tensor2D, weights: FrozenWeights, start: number, count: number, adapters: ColumnAdapter[], scale: number): tf.Tensor2D {
  if (x.dtype !== 'float32') throw new Error('frozen product: x must be float32');
  for (const { A, B, column } of adapters) {
    if (A.shape[0] !== weights.cols || A.shape[1] !== B.shape[0] || column < 0 || column + B.shape[1] > count) throw new Error('frozen product: an adapter does not fit the product');
  }
  const inputs: Record<string, tf.Tensor> = { x };
  adapters.forEach(({ A, B }, i) => Object.assign(inputs, { [`A${i}`]: A, [`B${i}`]: B }));
  const attrs = { weights, start, count, scale, columns: adapters.map((a) => a.column) } as unknown as tf.NamedAttrMap;
  return tf.engine().runKernel(FROZEN_LINEAR, inputs as tf.NamedTensorMap, attrs) as tf.Tensor2D;
}

/** Runs the frozen-weight product kernel (see frozenMatMul); no gradient of its own. */
export function runFrozenMatMul(x: tf.Tensor2D, weights: FrozenWeights, backward: boolean, start: number, count: number): tf.Tensor2D {
  if (x.dtype !== 'float32') throw new Error('frozen product: x must be float32');
  const attrs = { weights, backward, start, count } as unknown as tf.NamedAttrMap;
  return tf.engine().runKernel(FROZEN_MATMUL, { x } as unknown as tf.NamedTensorMap, attrs) as tf.Tensor2D;
}

/** Per row: the token drawn, its log-probability under softmax(logits / T), the log of the share top-p kept. */
export interface RowSamples {
  tokens: Int32Array;
  logProbs: Float64Array;
  keptLogMass: Float64Array;
}

/**
 * Draws one token per row of logits [rows, V] in the addon, reading the logits where they lie on
 * the heap: temperature and top-p, with uniform(row) as the row's draw (NaN skips it; called only
 * when the addon runs). Undefined where it cannot (another backend, stock kernels, an old addon).
 */
export function sampleRowsNatively(logits: tf.Tensor2D, temperature: number, topP: number, uniform: (row: number) => number): RowSamples | undefined {
  const sample = activeNative?.sampleRows;
  if (!sample || tf.getBackend() !== 'wasm' || logits.dtype !== 'float32') return undefined;
  const b = tf.backend() as unknown as WasmBackend;
  const [rows, V] = logits.shape;
  const uniforms = Float64Array.from({ length: rows }, (_, row) => uniform(row));
  const out: RowSamples = { tokens: new Int32Array(rows), logProbs: new Float64Array(rows), keptLogMass: new Float64Array(rows) };
  sample(b.wasm.HEAPF32, offset(b, logits), rows, V, 1 / temperature, topP, uniforms, out.tokens, out.logProbs, out.keptLogMass);
  return out;
}

export const DECODE_ATTENTION = 'FlowrlDecodeAttention';

/** The shapes of a decode step's attention (see decodeAttention). */
export interface DecodeAttentionShape {
  heads: number;
  kvHeads: number;
  /** The cache's slot for the new token. */
  past: number;
}

function decodeAttentionKernel({ inputs: { qkv, cos, sin, bias, keys, values }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const { heads, kvHeads, past } = attrs as unknown as DecodeAttentionShape;
  const [batch, , capacity, headDim] = keys.shape;
  const out = b.makeOutput([batch, heads * headDim], 'float32');
  const at = (t: tf.TensorInfo) => offset(b, t);
  activeNative!.decodeAttention!(b.wasm.HEAPF32, batch, heads, kvHeads, headDim, capacity, past, at(qkv), at(cos), at(sin), at(bias), at(keys), at(values), at(out));
  // The cache was written in place.
  forgetDerivedState(b, keys);
  forgetDerivedState(b, values);
  return out;
}

/** Largest head size webgpu's decode attention takes (each thread holds d / 64 running sums; d even). */
export const GPU_ATTENTION_MAX_HEAD_DIM = 256;

/** Whether decodeAttention runs here for heads of headDim (wasm and an addon that has it, or webgpu's program). */
export function decodeAttentionAvailable(headDim: number): boolean {
  if (tf.getBackend() === 'webgpu') return tf.getKernel(DECODE_ATTENTION, 'webgpu') !== undefined && headDim <= GPU_ATTENTION_MAX_HEAD_DIM && headDim % 2 === 0;
  return tf.getBackend() === 'wasm' && activeNative?.decodeAttention !== undefined && tf.getKernel(DECODE_ATTENTION, BACKEND) !== undefined;
}

/**
 * One decode step's attention in one kernel (no gradient): qkv [B, (heads + 2 kvHeads) d] of the new
 * token with its rotary tables (cos, sin, the same shape), the mask's bias [B, 1, heads / kvHeads,
 * S], and the preallocated cache keys, values [B, kvHeads, S, d], which get the new key (rotated)
 * and value at slot `past`. Returns the heads' outputs, [B, heads d].
 */
export function decodeAttention(qkv: tf.Tensor2D, cos: tf.Tensor2D, sin: tf.Tensor2D, bias: tf.Tensor4D, keys: tf.Tensor4D, values: tf.Tensor4D, shape: DecodeAttentionShape): tf.Tensor2D {
  const [batch, kvHeads, capacity, headDim] = keys.shape;
  const width = (shape.heads + 2 * shape.kvHeads) * headDim;
  const fits = kvHeads === shape.kvHeads && shape.heads % kvHeads === 0 && shape.past < capacity && [qkv, cos, sin].every((t) => t.shape[0] === batch && t.shape[1] === width) && values.shape.every((n, i) => n === keys.shape[i]) && bias.size === batch * (shape.heads / kvHeads) * capacity;
  if (!fits) throw new Error(`decodeAttention: shapes do not fit (qkv [${qkv.shape}], cache [${keys.shape}], bias [${bias.shape}])`);
  const attrs = { ...shape } as unknown as tf.NamedAttrMap;
  return tf.engine().runKernel(DECODE_ATTENTION, { qkv, cos, sin, bias, keys, values } as unknown as tf.NamedTensorMap, attrs) as tf.Tensor2D;
}

export const TOKEN_LOG_PROBS = 'FlowrlTokenLogProbs';
export const TOKEN_LOG_PROBS_GRAD = 'FlowrlTokenLogProbsGrad';

/** Whether the fused log-softmax + target kernels run here (wasm and an addon that has them). */
export function tokenLogProbKernelsAvailable(): boolean {
  return tf.getBackend() === 'wasm' && activeNative?.tokenLogProbs !== undefined && tf.getKernel(TOKEN_LOG_PROBS, BACKEND) !== undefined;
}

type TokenAttrs = { targets: Int32Array; invT: number; withEntropy: boolean };

/** logits [R, V] -> [2, R]: log softmax(logits * invT) at each row's target, then each row's entropy. */
function tokenLogProbsKernel({ inputs: { logits }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const { targets, invT, withEntropy } = attrs as unknown as TokenAttrs;
  const [R, V] = logits.shape;
  const out = b.makeOutput([2, R], 'float32');
  const heap = b.wasm.HEAPF32;
  activeNative!.tokenLogProbs!(heap, offset(b, logits), R, V, targets, invT, heap, offset(b, out), +withEntropy, 0, heap, 0);
  return out;
}

/** logits [R, V] and the gradient [2, R] of tokenLogProbsKernel's output -> the gradient of the logits. */
function tokenLogProbsGradKernel({ inputs: { logits, dy }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const { targets, invT, withEntropy } = attrs as unknown as TokenAttrs;
  const [R, V] = logits.shape;
  const out = b.makeOutput([R, V], 'float32');
  const heap = b.wasm.HEAPF32;
  activeNative!.tokenLogProbs!(heap, offset(b, logits), R, V, targets, invT, heap, offset(b, out), +withEntropy, 1, heap, offset(b, dy));
  return out;
}

/** Runs the fused head kernels (no gradient of their own): forward [2, R], or with dy the logits' gradient. */
export function runTokenLogProbs(logits: tf.Tensor2D, targets: Int32Array, invT: number, withEntropy: boolean, dy?: tf.Tensor2D): tf.Tensor2D {
  const attrs = { targets, invT, withEntropy } as unknown as tf.NamedAttrMap;
  if (!dy) return tf.engine().runKernel(TOKEN_LOG_PROBS, { logits } as unknown as tf.NamedTensorMap, attrs) as tf.Tensor2D;
  return tf.engine().runKernel(TOKEN_LOG_PROBS_GRAD, { logits, dy } as unknown as tf.NamedTensorMap, attrs) as tf.Tensor2D;
}

/** engine/fused.ts's RMSNorm (no gradient) on the addon's threads. */
function nativeRmsNorm({ inputs: { x, weight }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const [rows, width] = x.shape;
  const out = b.makeOutput(x.shape, 'float32');
  activeNative!.rmsNorm!(rows, width, b.wasm.HEAPF32, offset(b, x), offset(b, weight), offset(b, out), (attrs as { eps: number }).eps);
  return out;
}

export const SWIGLU = 'FlowrlSwiGlu';
export const SWIGLU_GRAD = 'FlowrlSwiGluGrad';

/** Whether the fused SwiGLU kernels run here (wasm and an addon that has them, or webgpu's programs). */
export function swiGluKernelsAvailable(): boolean {
  if (tf.getBackend() === 'webgpu') return tf.getKernel(SWIGLU, 'webgpu') !== undefined;
  return tf.getBackend() === 'wasm' && activeNative?.swiglu !== undefined && tf.getKernel(SWIGLU, BACKEND) !== undefined;
}

/** gate, up [N, F] -> silu(gate) up. */
function swiGluKernel({ inputs: { gate, up }, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const out = b.makeOutput(gate.shape, 'float32');
  activeNative!.swiglu!(0, tf.util.sizeFromShape(gate.shape), b.wasm.HEAPF32, offset(b, gate), offset(b, up), 0, offset(b, out), 0);
  return out;
}

/** gate, up and dy [N, F] -> [d gate, d up]. */
function swiGluGradKernel({ inputs: { gate, up, dy }, backend }: KernelArgs): tf.TensorInfo[] {
  const b = backend as WasmBackend;
  const dGate = b.makeOutput(gate.shape, 'float32');
  const dUp = b.makeOutput(gate.shape, 'float32');
  // Read the heap after the allocations: growing memory replaces the view.
  activeNative!.swiglu!(1, tf.util.sizeFromShape(gate.shape), b.wasm.HEAPF32, offset(b, gate), offset(b, up), offset(b, dy), offset(b, dGate), offset(b, dUp));
  return [dGate, dUp];
}

/** silu(gate) up on the fused kernel, or with dy its gradient [d gate, d up] (no gradient of its own). */
export function runSwiGlu(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D;
export function runSwiGlu(gate: tf.Tensor2D, up: tf.Tensor2D, dy: tf.Tensor2D): [tf.Tensor2D, tf.Tensor2D];
export function runSwiGlu(gate: tf.Tensor2D, up: tf.Tensor2D, dy?: tf.Tensor2D): tf.Tensor2D | [tf.Tensor2D, tf.Tensor2D] {
  if (!dy) return tf.engine().runKernel(SWIGLU, { gate, up } as unknown as tf.NamedTensorMap) as tf.Tensor2D;
  return tf.engine().runKernel(SWIGLU_GRAD, { gate, up, dy } as unknown as tf.NamedTensorMap) as unknown as [tf.Tensor2D, tf.Tensor2D];
}

/** Whether a KV cache can be written in place here: writeTimeSlice (wasm and cpu) or webgpu-kernels.ts's writeTimeSliceOnGpu. */
export function canWriteInPlace(): boolean {
  if (tf.getBackend() === 'webgpu') return tf.getKernel(DECODE_ATTENTION, 'webgpu') !== undefined;
  return tf.getBackend() === 'wasm' || tf.getBackend() === 'cpu';
}

/**
 * Copies source [B, H, T, d] into target [B, H, S, d] at time index `at`, in place (a KV cache
 * that grows without reallocation). Only for buffers this code owns: no other tensor may share
 * target's data. Returns false where the backend's memory is not reachable (then concatenate).
 */
export function writeTimeSlice(target: tf.Tensor4D, source: tf.Tensor4D, at: number): boolean {
  const [B, H, S, d] = target.shape;
  const T = source.shape[2];
  if (source.shape[0] !== B || source.shape[1] !== H || source.shape[3] !== d || at < 0 || at + T > S) {
    throw new Error(`writeTimeSlice: cannot write [${source.shape}] into [${target.shape}] at ${at}`);
  }
  if (target.dtype !== 'float32' || source.dtype !== 'float32') return false;
  const backend = tf.backend() as unknown as Partial<WasmBackend> & { data?: { get(id: object): { values?: unknown } | undefined } };
  let dst: Float32Array;
  let src: Float32Array;
  let dstBase = 0;
  let srcBase = 0;
  if (tf.getBackend() === 'wasm' && backend.dataIdMap && backend.wasm) {
    dst = src = backend.wasm.HEAPF32;
    dstBase = offset(backend as WasmBackend, target);
    srcBase = offset(backend as WasmBackend, source);
  } else if (tf.getBackend() === 'cpu' && backend.data) {
    const [t, s] = [backend.data.get(target.dataId)?.values, backend.data.get(source.dataId)?.values];
    if (!(t instanceof Float32Array) || !(s instanceof Float32Array)) return false;
    [dst, src] = [t, s];
  } else {
    return false;
  }
  const block = T * d;
  for (let row = 0; row < B * H; row++) {
    const from = srcBase + row * block;
    const to = dstBase + (row * S + at) * d;
    if (dst === src) dst.copyWithin(to, from, from + block);
    else dst.set(src.subarray(from, from + block), to);
  }
  if (tf.getBackend() === 'wasm') forgetDerivedState(backend as WasmBackend, target);
  return true;
}
