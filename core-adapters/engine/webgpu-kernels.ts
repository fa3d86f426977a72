// Fused GPU programs for tfjs's WebGPU backend, registered under the kernel names the wasm path
// already uses (RMSNorm, SwiGLU and its gradient, a decode step's attention), plus the in-place
// write of a KV cache. A decode step is bound by dispatches: tfjs runs each op as its own GPU
// program, each with a bind group, a uniform buffer and JavaScript around it; these replace
// RMSNorm's 6 programs, SwiGLU's 3 (8 for its gradient) and the attention's 13 (rope, split,
// two cache concatenations, scores, mask, softmax, weighted values) with one or a few each.
import * as tf from '@tensorflow/tfjs-core';
import { FUSED_RMS_NORM } from './fused.js';
import { countInPlaceWrite, DECODE_ATTENTION, GPU_ATTENTION_MAX_HEAD_DIM, SWIGLU, SWIGLU_GRAD, type AdamWHyper, type DecodeAttentionShape } from './kernels.js';

/** What tfjs-backend-webgpu 4.22 reads from a program (webgpu_program.ts's WebGPUProgram). */
interface GpuProgram {
  variableNames: string[];
  outputShape: number[];
  shaderKey: string;
  dispatchLayout: { x: number[] };
  dispatch: [number, number, number];
  workgroupSize: [number, number, number];
  uniforms?: string;
  getUserCode(): string;
}

type Uniform = { type: 'int32' | 'float32'; data: number[] };

interface WebgpuBackend {
  runWebGPUProgram(program: GpuProgram, inputs: tf.TensorInfo[], outputDtype: tf.DataType, uniforms?: Uniform[], output?: tf.TensorInfo): tf.TensorInfo;
  tensorMap: { get(dataId: object): { values: unknown } | undefined };
  refCount(dataId: object): number;
}

/** Runs `p` writing into `target` in place, then drops any host copy of target's old values (a read keeps one). */
function writeInPlace(b: WebgpuBackend, p: GpuProgram, inputs: tf.TensorInfo[], uniforms: Uniform[], target: tf.TensorInfo): void {
  b.runWebGPUProgram(p, inputs, 'float32', uniforms, target);
  const data = b.tensorMap.get(target.dataId);
  if (data) data.values = null;
  countInPlaceWrite(target.dataId);
}

type KernelArgs = { inputs: Record<string, tf.TensorInfo>; attrs?: Record<string, unknown>; backend: unknown };

/** Threads per workgroup of the row programs (a reduction per row) and the elementwise ones. */
const ROW_THREADS = 64;
const FLAT_THREADS = 128;

/** tfjs dispatches a flat program over dispatch[0] workgroups and calls main(global index). */
function program(name: string, key: string, variableNames: string[], outputShape: number[], workgroups: number, threads: number, uniforms: string, body: string): GpuProgram {
  return {
    variableNames,
    outputShape,
    shaderKey: `flowrl_${name}_${key}`,
    dispatchLayout: { x: outputShape.map((_, i) => i) },
    dispatch: [workgroups, 1, 1],
    workgroupSize: [threads, 1, 1],
    uniforms,
    getUserCode: () => body,
    // The constructor's name is what error messages and the dispatch trace show.
    constructor: { name },
  } as unknown as GpuProgram;
}

/**
 * The workgroup's number. Past 65,535 workgroups tfjs spreads a dispatch over y (and z), rounding
 * up, and the workgroups past the last row must write nothing (a store out of range is not promised
 * to be dropped; lavapipe drops it). They cannot return early: tfjs passes the builtins
 * through private variables, which WGSL's uniformity analysis does not trust before a barrier, so
 * they compute the last row again and skip the writes.
 */
const WORKGROUP = 'i32(workgroupId.x + numWorkgroups.x * (workgroupId.y + numWorkgroups.y * workgroupId.z))';

/** Sums `partial` over the workgroup into partial[0] (a power-of-two workgroup). */
const WORKGROUP_SUM = `
  for (var width = ${ROW_THREADS / 2}; width > 0; width = width / 2) {
    if (tid < width) { partial[tid] = partial[tid] + partial[tid + width]; }
    workgroupBarrier();
  }`;

/** out = x * rsqrt(mean(x^2) + eps) * weight over the last axis of x [N, H]: one workgroup a row. */
function rmsNormKernel({ inputs: { x, weight }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const [rows] = x.shape;
  const body = `
    var<workgroup> partial : array<f32, ${ROW_THREADS}>;
    fn main(index : i32) {
      let valid = ${WORKGROUP} < uniforms.xShape[0];
      let row = min(${WORKGROUP}, uniforms.xShape[0] - 1);
      let tid = i32(localId.x);
      let width = uniforms.xShape[1];
      let base = row * width;
      var squares = 0.0;
      for (var h = tid; h < width; h = h + ${ROW_THREADS}) { let v = x[base + h]; squares = squares + v * v; }
      partial[tid] = squares;
      workgroupBarrier();
      ${WORKGROUP_SUM}
      let scale = inverseSqrt(partial[0] / f32(width) + uniforms.eps);
      for (var h = tid; h < width && valid; h = h + ${ROW_THREADS}) { result[base + h] = x[base + h] * scale * weight[h]; }
    }`;
  const p = program('RmsNormProgram', '', ['x', 'weight'], x.shape, rows, ROW_THREADS, 'eps : f32,', body);
  return (backend as WebgpuBackend).runWebGPUProgram(p, [x, weight], 'float32', [{ type: 'float32', data: [attrs!.eps as number] }]);
}

// tfjs's own sigmoid on webgpu, so the fused SwiGLU gives what Sigmoid, Mul, Mul give.
const SIGMOID = 'fn flowrlSigmoid(v : f32) -> f32 { return 1.0 / (1.0 + exp(-1.0 * v)); }';

/** An elementwise program over n values: `expression` of g (gate), u (up), s (sigmoid(g)) and dy. */
function swiGluProgram(name: string, inputs: string[], shape: number[], expression: string): GpuProgram {
  const n = tf.util.sizeFromShape(shape);
  const loads = inputs.map((v) => `let ${v === 'gate' ? 'g' : v === 'up' ? 'u' : 'dy'} = ${v}[index];`).join(' ');
  const body = `
    ${SIGMOID}
    fn main(index : i32) {
      if (index < uniforms.count) {
        ${loads}
        let s = flowrlSigmoid(g);
        result[index] = ${expression};
      }
    }`;
  return program(name, '', inputs, shape, Math.ceil(n / FLAT_THREADS), FLAT_THREADS, 'count : i32,', body);
}

function swiGluKernel({ inputs: { gate, up }, backend }: KernelArgs): tf.TensorInfo {
  const count = [{ type: 'int32', data: [tf.util.sizeFromShape(gate.shape)] }] as Uniform[];
  return (backend as WebgpuBackend).runWebGPUProgram(swiGluProgram('SwiGluProgram', ['gate', 'up'], gate.shape, 'g * s * u'), [gate, up], 'float32', count);
}

/** d gate = dy u s (1 + g (1 - s)), d up = dy g s: two programs. */
function swiGluGradKernel({ inputs: { gate, up, dy }, backend }: KernelArgs): tf.TensorInfo[] {
  const b = backend as WebgpuBackend;
  const count = [{ type: 'int32', data: [tf.util.sizeFromShape(gate.shape)] }] as Uniform[];
  const inputs = [gate, up, dy];
  const names = ['gate', 'up', 'dy'];
  return [
    b.runWebGPUProgram(swiGluProgram('SwiGluGateGradProgram', names, gate.shape, 'dy * u * s * (1.0 + g * (1.0 - s))'), inputs, 'float32', count),
    b.runWebGPUProgram(swiGluProgram('SwiGluUpGradProgram', names, gate.shape, 'dy * g * s'), inputs, 'float32', count),
  ];
}

/** An elementwise program over `shape` that rewrites its output in place from `result[index]` and its inputs. */
function inPlaceProgram(name: string, inputs: string[], shape: number[], uniforms: string, expression: string): GpuProgram {
  const body = `
    fn main(index : i32) {
      if (index < uniforms.count) { result[index] = ${expression}; }
    }`;
  return program(name, '', inputs, shape, Math.ceil(tf.util.sizeFromShape(shape) / FLAT_THREADS), FLAT_THREADS, `count : i32, ${uniforms}`, body);
}

/**
 * One AdamW update in place on the GPU: the two moments, then the parameter from them (three
 * programs where tfjs's ops take 14); the arithmetic of fusedAdamW's native loop. False where
 * the caller must run the tfjs ops: another backend, FLOWRL_WEBGPU_FUSED=off, other dtypes or
 * shapes, or a buffer another tensor shares.
 */
export function adamWOnGpu(param: tf.Variable, grad: tf.Tensor, m: tf.Variable, v: tf.Variable, h: AdamWHyper): boolean {
  if (!webgpuFused()) return false;
  if ([grad, m, v].some((t) => t.dtype !== 'float32' || !tf.util.arraysEqual(t.shape, param.shape)) || param.dtype !== 'float32') return false;
  const b = tf.backend() as unknown as WebgpuBackend;
  if ([param, m, v].some((t) => b.refCount(t.dataId) !== 1)) return false;
  const count: Uniform = { type: 'int32', data: [param.size] };
  const f = (value: number): Uniform => ({ type: 'float32', data: [value] });
  // 1 - beta in double, as the tfjs ops' scalars are.
  const moment = (name: string, g: string) => inPlaceProgram(name, ['grad'], param.shape, 'beta : f32, rest : f32,', `result[index] * uniforms.beta + ${g} * uniforms.rest`);
  writeInPlace(b, moment('AdamWFirstMomentProgram', 'grad[index]'), [grad], [count, f(h.beta1), f(1 - h.beta1)], m);
  writeInPlace(b, moment('AdamWSecondMomentProgram', 'grad[index] * grad[index]'), [grad], [count, f(h.beta2), f(1 - h.beta2)], v);
  const update = inPlaceProgram(
    'AdamWParameterProgram',
    ['m', 'v'],
    param.shape,
    'decay : f32, stepSize : f32, bc2Sqrt : f32, eps : f32,',
    'result[index] * uniforms.decay - (m[index] / (sqrt(v[index]) / uniforms.bc2Sqrt + uniforms.eps)) * uniforms.stepSize',
  );
  writeInPlace(b, update, [m, v], [count, f(h.decayFactor), f(h.stepSize), f(h.bc2Sqrt), f(h.eps)], param);
  return true;
}

/** x * cos + rotate_half(x) * sin at column j of the head starting at `head` (rotate_half(x) = [-x[d/2:], x[:d/2]]). */
const ROTATE = `
  fn rotated(head : i32, j : i32, d : i32) -> f32 {
    let half = d / 2;
    var other = 0.0;
    if (j < half) { other = -qkv[head + j + half]; } else { other = qkv[head + j - half]; }
    return qkv[head + j] * cosines[head + j] + other * sines[head + j];
  }`;

/**
 * The new token's key (rotated) or value (its tables are cos 1, sin 0) into the cache [B, KV, S, d]
 * at slot `past`, in place: heads `column`.. of qkv [B, (H + 2 KV) d].
 */
function writeNewSlot(b: WebgpuBackend, qkv: tf.TensorInfo, cos: tf.TensorInfo, sin: tf.TensorInfo, cache: tf.TensorInfo, column: number, past: number): void {
  const [batch, kvHeads, , d] = cache.shape;
  const n = batch * kvHeads * d;
  const body = `
    ${ROTATE}
    fn main(index : i32) {
      if (index < uniforms.count) {
        let d = uniforms.outShape[3];
        let kv = uniforms.outShape[1];
        let j = index % d;
        let g = (index / d) % kv;
        let row = index / (d * kv);
        let head = row * uniforms.qkvShape[1] + (uniforms.column + g) * d;
        result[((row * kv + g) * uniforms.outShape[2] + uniforms.past) * d + j] = rotated(head, j, d);
      }
    }`;
  const p = program('KvSlotWriteProgram', '', ['qkv', 'cosines', 'sines'], cache.shape, Math.ceil(n / FLAT_THREADS), FLAT_THREADS, 'count : i32, column : i32, past : i32,', body);
  const uniforms: Uniform[] = [{ type: 'int32', data: [n] }, { type: 'int32', data: [column] }, { type: 'int32', data: [past] }];
  writeInPlace(b, p, [qkv, cos, sin], uniforms, cache);
}

/**
 * One decode step's attention (see kernels.ts's decodeAttention): the new key and value into the
 * cache, then a workgroup per (row, query head) over the cached keys, 64 at a time, with a running
 * max and sum (online softmax), so the scores never leave the workgroup.
 */
function decodeAttentionKernel({ inputs: { qkv, cos, sin, bias, keys, values }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WebgpuBackend;
  const { heads, kvHeads, past } = attrs as unknown as DecodeAttentionShape;
  const [batch, , , d] = keys.shape;
  if (d > GPU_ATTENTION_MAX_HEAD_DIM || d % 2) throw new Error(`decodeAttention on webgpu: head size ${d} (at most ${GPU_ATTENTION_MAX_HEAD_DIM}, even)`);
  writeNewSlot(b, qkv, cos, sin, keys, heads, past);
  writeNewSlot(b, qkv, cos, sin, values, heads + kvHeads, past);
  const slots = Math.ceil(d / ROW_THREADS);
  const body = `
    ${ROTATE}
    var<workgroup> query : array<f32, ${d}>;
    var<workgroup> tile : array<f32, ${ROW_THREADS}>;
    const LOWEST = -3.402823e+38;
    // exp(x) for x <= 0, exactly 0 far below (no reliance on exp(-inf) after LOWEST - a score).
    fn decay(x : f32) -> f32 { return select(exp(x), 0.0, x < -100.0); }
    fn main(index : i32) {
      let d = ${d};
      let tid = i32(localId.x);
      let valid = ${WORKGROUP} < uniforms.outShape[0] * uniforms.heads;
      let unit = min(${WORKGROUP}, uniforms.outShape[0] * uniforms.heads - 1);
      let heads = uniforms.heads;
      let h = unit % heads;
      let row = unit / heads;
      let kv = uniforms.keysShape[1];
      let capacity = uniforms.keysShape[2];
      let groups = heads / kv;
      let g = h / groups;
      let head = row * uniforms.qkvShape[1] + h * d;
      for (var j = tid; j < d; j = j + ${ROW_THREADS}) { query[j] = rotated(head, j, d); }
      workgroupBarrier();
      let cached = (row * kv + g) * capacity * d;
      // The mask's bias is the same for every query head of a row.
      let masks = row * groups * capacity;
      let count = uniforms.past + 1;
      var best = LOWEST;
      var total = 0.0;
      var sums : array<f32, ${slots}>;
      for (var start = 0; start < count; start = start + ${ROW_THREADS}) {
        let t = start + tid;
        var score = LOWEST;
        if (t < count) {
          var dot = 0.0;
          for (var j = 0; j < d; j = j + 1) { dot = dot + query[j] * keys[cached + t * d + j]; }
          score = max(dot + bias[masks + t], LOWEST);
        }
        tile[tid] = score;
        workgroupBarrier();
        var next = best;
        for (var i = 0; i < ${ROW_THREADS}; i = i + 1) { next = max(next, tile[i]); }
        workgroupBarrier();
        var weight = 0.0;
        if (t < count) { weight = decay(score - next); }
        tile[tid] = weight;
        workgroupBarrier();
        let rescale = decay(best - next);
        let used = min(${ROW_THREADS}, count - start);
        var tileTotal = 0.0;
        for (var i = 0; i < used; i = i + 1) { tileTotal = tileTotal + tile[i]; }
        total = total * rescale + tileTotal;
        for (var k = 0; k < ${slots}; k = k + 1) {
          let j = tid + k * ${ROW_THREADS};
          if (j < d) {
            var acc = sums[k] * rescale;
            for (var i = 0; i < used; i = i + 1) { acc = acc + tile[i] * values[cached + (start + i) * d + j]; }
            sums[k] = acc;
          }
        }
        best = next;
        workgroupBarrier();
      }
      for (var k = 0; k < ${slots}; k = k + 1) {
        let j = tid + k * ${ROW_THREADS};
        if (j < d && valid) { result[unit * d + j] = sums[k] / total; }
      }
    }`;
  const p = program('DecodeAttentionProgram', `d${d}`, ['qkv', 'cosines', 'sines', 'bias', 'keys', 'values'], [batch, heads * d], batch * heads, ROW_THREADS, 'heads : i32, past : i32,', body);
  return b.runWebGPUProgram(p, [qkv, cos, sin, bias, keys, values], 'float32', [
    { type: 'int32', data: [heads] },
    { type: 'int32', data: [past] },
  ]);
}

/**
 * Copies source [B, H, T, d] into target [B, H, S, d] at time `at` on the GPU, in place (what
 * kernels.ts's writeTimeSlice does on wasm and cpu). False when the active backend is not webgpu.
 */
export function writeTimeSliceOnGpu(target: tf.Tensor4D, source: tf.Tensor4D, at: number): boolean {
  if (tf.getBackend() !== 'webgpu' || !tf.getKernel(DECODE_ATTENTION, 'webgpu')) return false;
  const n = source.size;
  const body = `
    fn main(index : i32) {
      if (index < uniforms.count) {
        let d = uniforms.outShape[3];
        let steps = uniforms.sourceShape[2];
        let j = index % d;
        let t = (index / d) % steps;
        let row = index / (d * steps);
        result[(row * uniforms.outShape[2] + uniforms.at + t) * d + j] = source[index];
      }
    }`;
  const p = program('TimeSliceWriteProgram', '', ['source'], target.shape, Math.ceil(n / FLAT_THREADS), FLAT_THREADS, 'count : i32, at : i32,', body);
  writeInPlace(tf.backend() as unknown as WebgpuBackend, p, [source], [{ type: 'int32', data: [n] }, { type: 'int32', data: [at] }], target);
  return true;
}

/** Threads of the sampling program: each sums a contiguous chunk of its row's vocabulary. */
const SAMPLE_THREADS = 256;

/**
 * One token per row of logits [R, V] drawn on the GPU, so a decode step reads back 2 floats a row
 * instead of V: out [R, 2] = (token, its log-probability at the temperature). draws [R] holds each
 * row's uniform (NaN: the row has ended; token -1). Greedy takes the first largest logit. The draw
 * is sampleToken's (top-p 1, no top-k): the first token whose running sum of exp(l/T - max) reaches
 * u * total, in float32 and chunk by chunk where the host sums in float64 (so a token can differ
 * only where u * total falls within rounding of a boundary). As there, a NaN or +Infinity logit
 * (when greedy, any non-finite one) refuses the row: token -2.
 */
function sampleRowsKernel({ inputs: { logits, draws }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const [rows] = logits.shape;
  const body = `
    var<workgroup> best : array<f32, ${SAMPLE_THREADS}>;
    var<workgroup> bestAt : array<i32, ${SAMPLE_THREADS}>;
    var<workgroup> sums : array<f32, ${SAMPLE_THREADS}>;
    var<workgroup> flags : array<u32, ${SAMPLE_THREADS}>;
    var<workgroup> rowMax : f32;
    const NAN_OR_PLUS_INF = 1u;
    const MINUS_INF = 2u;
    fn flagsOf(v : f32) -> u32 {
      let bits = bitcast<u32>(v);
      if (bits == 0xff800000u) { return MINUS_INF; }
      return select(0u, NAN_OR_PLUS_INF, (bits & 0x7fffffffu) >= 0x7f800000u);
    }
    // exp(v / T - max), 0 for a -Infinity logit.
    fn weightOf(v : f32, invT : f32) -> f32 { return select(exp(v * invT - rowMax), 0.0, flagsOf(v) == MINUS_INF); }
    fn main(index : i32) {
      let valid = ${WORKGROUP} < uniforms.logitsShape[0];
      let row = min(${WORKGROUP}, uniforms.logitsShape[0] - 1);
      let tid = i32(localId.x);
      let V = uniforms.logitsShape[1];
      let base = row * V;
      let invT = uniforms.invT;
      let chunk = (V + ${SAMPLE_THREADS - 1}) / ${SAMPLE_THREADS};
      let first = min(V, tid * chunk);
      let end = min(V, first + chunk);
      var top = -3.402823e+38;
      var topAt = V;
      var seen = 0u;
      for (var i = first; i < end; i = i + 1) {
        let v = logits[base + i];
        seen = seen | flagsOf(v);
        if (topAt == V || v * invT > top) { top = v * invT; topAt = i; }
      }
      best[tid] = top;
      bestAt[tid] = topAt;
      flags[tid] = seen;
      workgroupBarrier();
      if (tid == 0) {
        var m = best[0];
        for (var k = 1; k < ${SAMPLE_THREADS}; k = k + 1) {
          if (bestAt[k] < V && best[k] > m) { m = best[k]; bestAt[0] = bestAt[k]; }
          flags[0] = flags[0] | flags[k];
        }
        rowMax = m;
      }
      workgroupBarrier();
      var sum = 0.0;
      for (var i = first; i < end; i = i + 1) { sum = sum + weightOf(logits[base + i], invT); }
      sums[tid] = sum;
      workgroupBarrier();
      if (tid == 0 && valid) {
        var total = 0.0;
        for (var k = 0; k < ${SAMPLE_THREADS}; k = k + 1) { total = total + sums[k]; }
        let u = draws[row];
        var token = bestAt[0];
        // NaN marks an ended row (tested by its bits: a shader compiler may assume u == u).
        if ((bitcast<u32>(u) & 0x7fffffffu) > 0x7f800000u) {
          token = -1;
        } else if ((flags[0] & NAN_OR_PLUS_INF) != 0u || (uniforms.greedy == 1 && flags[0] != 0u) || flagsOf(rowMax) != 0u || flagsOf(total) != 0u) {
          token = -2;
        } else if (uniforms.greedy == 0) {
          var left = u * total;
          var k = 0;
          while (k < ${SAMPLE_THREADS - 1} && left - sums[k] > 0.0) { left = left - sums[k]; k = k + 1; }
          token = V - 1;
          for (var i = min(V, k * chunk); i < V; i = i + 1) {
            left = left - weightOf(logits[base + i], invT);
            if (left <= 0.0) { token = i; break; }
          }
        }
        result[row * 2] = f32(token);
        var logProb = 0.0;
        if (token >= 0) { logProb = logits[base + token] * invT - rowMax - log(total); }
        result[row * 2 + 1] = logProb;
      }
    }`;
  const p = program('SampleRowsProgram', '', ['logits', 'draws'], [rows, 2], rows, SAMPLE_THREADS, 'invT : f32, greedy : i32,', body);
  return (backend as WebgpuBackend).runWebGPUProgram(p, [logits, draws], 'float32', [
    { type: 'float32', data: [attrs!.invT as number] },
    { type: 'int32', data: [attrs!.greedy ? 1 : 0] },
  ]);
}

export const SAMPLE_ROWS = 'FlowrlSampleRows';

/** Whether sampleRowsOnGpu runs here. */
export function gpuSamplingAvailable(): boolean {
  return tf.getBackend() === 'webgpu' && tf.getKernel(SAMPLE_ROWS, 'webgpu') !== undefined;
}

/**
 * Rows' tokens drawn on the GPU (see sampleRowsKernel): greedy, or at `temperature` with top-p 1
 * and no top-k; draws[row] is the row's uniform (NaN: the row has ended). Returns [R, 2] of (token,
 * log-probability) for the caller to read: token -1 for an ended row, -2 for a row refused for a
 * non-finite logit. Undefined when the backend is not webgpu or the program is off.
 */
export function drawRowsOnGpu(logits: tf.Tensor2D, temperature: number, greedy: boolean, draws: Float32Array): tf.Tensor2D | undefined {
  if (!gpuSamplingAvailable() || logits.dtype !== 'float32') return undefined;
  const attrs = { invT: 1 / temperature, greedy } as unknown as tf.NamedAttrMap;
  return tf.tidy(() => tf.engine().runKernel(SAMPLE_ROWS, { logits, draws: tf.tensor1d(draws) } as unknown as tf.NamedTensorMap, attrs) as tf.Tensor2D);
}

/**
 * Whether the active backend is webgpu with these programs installed: the model then also merges
 * LoRA weights, multiplies the tied head transposed and adds biases inside products in forwards
 * without a tape. FLOWRL_WEBGPU_FUSED=off turns all of it off (tfjs's ops, as before them).
 */
export function webgpuFused(): boolean {
  return tf.getBackend() === 'webgpu' && tf.getKernel(FUSED_RMS_NORM, 'webgpu') !== undefined;
}

/** Registers the fused programs on the webgpu backend (once; FLOWRL_WEBGPU_FUSED=off leaves tfjs's ops). */
export function installWebgpuKernels(): void {
  if (process.env.FLOWRL_WEBGPU_FUSED === 'off') return;
  // Built here, not at load: the names come from kernels.ts, which may still be loading.
  const kernels: [string, (args: KernelArgs) => tf.TensorInfo | tf.TensorInfo[]][] = [
    [FUSED_RMS_NORM, rmsNormKernel],
    [SWIGLU, swiGluKernel],
    [SWIGLU_GRAD, swiGluGradKernel],
    [DECODE_ATTENTION, decodeAttentionKernel],
    [SAMPLE_ROWS, sampleRowsKernel],
  ];
  for (const [kernelName, kernelFunc] of kernels) {
    if (!tf.getKernel(kernelName, 'webgpu')) tf.registerKernel({ kernelName, backendName: 'webgpu', kernelFunc: kernelFunc as unknown as tf.KernelFunc });
  }
}
