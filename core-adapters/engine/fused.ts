// Fused forward-only kernels for the wasm backend. Decoding is dispatch-bound (a fixed cost per op
// per token), so RMSNorm runs as one pass over the heap instead of six tfjs ops (22 us instead of
// 109 us for [32, 128]) in forwards without a gradient tape (sampling, scoring); with a tape the
// model uses the differentiable ops in ops.ts. With the native addon, engine/kernels.ts runs this
// kernel there instead (native/layer-passes.c, with SwiGLU). (SiLU*up and rotary embedding were
// tried here in JavaScript and were no faster than the wasm ops: its SIMD exp beats a JS loop.)
import * as tf from '@tensorflow/tfjs-core';

interface WasmBackend {
  dataIdMap: { get(dataId: object): { memoryOffset: number } | undefined };
  makeOutput(shape: number[], dtype: tf.DataType): tf.TensorInfo;
  wasm: { HEAPF32: Float32Array };
}

type KernelArgs = { inputs: Record<string, tf.TensorInfo>; attrs?: Record<string, unknown>; backend: unknown };

export const FUSED_RMS_NORM = 'FlowrlRmsNorm';

function at(backend: WasmBackend, t: tf.TensorInfo): number {
  return backend.dataIdMap.get(t.dataId)!.memoryOffset >>> 2;
}

/** out = x * rsqrt(mean(x^2) + eps) * weight over the last axis of x [N, H]. */
function rmsNorm({ inputs: { x, weight }, attrs, backend }: KernelArgs): tf.TensorInfo {
  const b = backend as WasmBackend;
  const [N, H] = x.shape;
  const out = b.makeOutput(x.shape, 'float32');
  const heap = b.wasm.HEAPF32;
  const [xo, wo, oo] = [at(b, x), at(b, weight), at(b, out)];
  const eps = attrs!.eps as number;
  for (let n = 0; n < N; n++) {
    const row = xo + n * H;
    let squares = 0;
    for (let h = 0; h < H; h++) squares += heap[row + h] * heap[row + h];
    const scale = 1 / Math.sqrt(squares / H + eps);
    const dst = oo + n * H;
    for (let h = 0; h < H; h++) heap[dst + h] = heap[row + h] * scale * heap[wo + h];
  }
  return out;
}

const KERNELS: [string, (args: KernelArgs) => tf.TensorInfo][] = [[FUSED_RMS_NORM, rmsNorm]];

let registered = false;

/** Registers the fused kernels on wasm (once). */
export function registerFusedKernels(): void {
  if (registered) return;
  for (const [kernelName, kernelFunc] of KERNELS) tf.registerKernel({ kernelName, backendName: 'wasm', kernelFunc: kernelFunc as unknown as tf.KernelFunc });
  registered = true;
}

/** Whether a forward here may use the fused kernels: wasm or webgpu, float32, and no gradient tape. */
export function fusedForward(...tensors: tf.Tensor[]): boolean {
  // wasm's kernel here, or webgpu's program (engine/webgpu-kernels.ts).
  const here = tf.getBackend() === 'wasm' ? registered : tf.getKernel(FUSED_RMS_NORM, tf.getBackend()) !== undefined;
  return here && !tf.engine().isTapeOn() && tensors.every((t) => t.dtype === 'float32');
}

export function runFused<T extends tf.Tensor>(name: string, inputs: Record<string, tf.Tensor>, attrs: Record<string, number> = {}): T {
  return tf.engine().runKernel(name, inputs as unknown as tf.NamedTensorMap, attrs) as T;
}
