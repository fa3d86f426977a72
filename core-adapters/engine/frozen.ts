// Frozen weights outside the wasm heap. wasm memory stops at 4 GiB, and a LoRA base never needs a
// gradient of its own, so its matrices live in shared memory the native addon multiplies directly
// (float32, or bfloat16 at half the bytes); the heap keeps activations, adapters and optimizer
// state. Products go through the FlowrlFrozenMatMul kernel (engine/kernels.ts).
import * as tf from '@tensorflow/tfjs-core';
import { frozenLinearWithAdapters, frozenMemory, frozenProductsAvailable, fusedAdaptersAvailable, runFrozenMatMul, type ColumnAdapter, type FrozenWeights } from './kernels.js';
import type { FrozenDtype } from '../config/choices.js';


/** float32 -> bfloat16 bits, rounding to nearest even (as torch's .to(torch.bfloat16)). */
export function toBfloat16(values: Float32Array, out: Uint16Array): void {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = 0; i < bits.length; i++) {
    const u = bits[i];
    if ((u & 0x7f800000) === 0x7f800000 && (u & 0x7fffff) !== 0) out[i] = (u >>> 16) | 0x40;
    else out[i] = (u + 0x7fff + ((u >>> 16) & 1)) >>> 16;
  }
}

/** A frozen matrix as it crosses to another thread: the same memory, not a copy. */
export interface SharedFrozenMatrix {
  rows: number;
  cols: number;
  dtype: FrozenDtype;
  compute: FrozenDtype;
  data: Float32Array | Uint16Array;
}

/** A row-major matrix [rows, cols] in shared memory outside the heap; products with it need no copy. */
export class FrozenMatrix implements FrozenWeights {
  readonly data: Float32Array | Uint16Array;

  /**
   * What its products round the other operand to: float32 (none) or bfloat16 (with a bfloat16
   * matrix: products of two bfloat16 operands summed in float32, on bfloat16 instructions where
   * oneDNN runs them; see native/onednn.c).
   */
  readonly compute: FrozenDtype;

  private constructor(
    readonly rows: number,
    readonly cols: number,
    readonly dtype: FrozenDtype,
    data: Float32Array | Uint16Array,
    compute: FrozenDtype,
  ) {
    if (compute === 'bfloat16' && dtype !== 'bfloat16') throw new Error('FrozenMatrix: bfloat16 compute needs a bfloat16 matrix');
    this.data = data;
    this.compute = compute;
  }

  /** A copy of `values` ([rows, cols], row-major) in shared memory, as `dtype`; its products computed in `compute`. */
  static fromFloat32(values: Float32Array, rows: number, cols: number, dtype: FrozenDtype, compute: FrozenDtype = 'float32'): FrozenMatrix {
    if (values.length !== rows * cols) throw new Error(`FrozenMatrix: ${values.length} values for [${rows}, ${cols}]`);
    if (dtype === 'float32') {
      const data = new Float32Array(frozenMemory(values.length * 4));
      data.set(values);
      return new FrozenMatrix(rows, cols, dtype, data, compute);
    }
    const data = new Uint16Array(frozenMemory(values.length * 2));
    toBfloat16(values, data);
    return new FrozenMatrix(rows, cols, dtype, data, compute);
  }

  /** A matrix over memory another thread shares (as posted to it: the typed array over a SharedArrayBuffer). */
  static fromShared(shared: SharedFrozenMatrix): FrozenMatrix {
    const { rows, cols, dtype, compute, data } = shared;
    const ok = data.buffer instanceof SharedArrayBuffer && data.length === rows * cols && (dtype === 'float32' ? data instanceof Float32Array : data instanceof Uint16Array);
    if (!ok) throw new Error(`FrozenMatrix.fromShared: not a shared ${dtype} [${rows}, ${cols}] matrix`);
    return new FrozenMatrix(rows, cols, dtype, data, compute);
  }

  /** What another thread needs to use this matrix without a copy. */
  toShared(): SharedFrozenMatrix {
    return { rows: this.rows, cols: this.cols, dtype: this.dtype, compute: this.compute, data: this.data };
  }

  /** Bytes held outside the heap. */
  get bytes(): number {
    return this.data.byteLength;
  }

  /** Rows [start, start + count) as float32 values. */
  rowsFloat32(start = 0, count = this.rows): Float32Array {
    const from = start * this.cols;
    const n = count * this.cols;
    if (this.data instanceof Float32Array) return this.data.slice(from, from + n);
    const out = new Float32Array(n);
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) bits[i] = this.data[from + i] << 16;
    return out;
  }

  /** The rows picked by ids, [ids.length, cols] (an embedding lookup; no gradient: the table is frozen). */
  gatherRows(ids: Int32Array): tf.Tensor2D {
    const out = new Float32Array(ids.length * this.cols);
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!(id >= 0 && id < this.rows)) throw new Error(`token id ${id} is outside the vocabulary (${this.rows})`);
      const from = id * this.cols;
      if (this.data instanceof Float32Array) out.set(this.data.subarray(from, from + this.cols), i * this.cols);
      else for (let j = 0; j < this.cols; j++) bits[i * this.cols + j] = this.data[from + j] << 16;
    }
    return tf.tensor2d(out, [ids.length, this.cols]);
  }

  /**
   * x[M, cols] times rows [start, start + count) transposed: x W^T, [M, count], as a linear layer
   * with an [out, in] weight. Differentiable in x (dx = dy W).
   */
  product(x: tf.Tensor2D, start = 0, count = this.rows): tf.Tensor2D {
    if (x.shape[1] !== this.cols) throw new Error(`frozen product: x has ${x.shape[1]} columns; W has ${this.cols}`);
    if (!tf.engine().isTapeOn()) return runFrozenMatMul(x, this, false, start, count);
    const op = tf.customGrad(((xi: tf.Tensor2D) => ({
      value: runFrozenMatMul(xi, this, false, start, count),
      gradFunc: (dy: tf.Tensor2D) => this.productTransposed(dy, start),
    })) as unknown as Parameters<typeof tf.customGrad>[0]);
    return op(x) as tf.Tensor2D;
  }

  /**
   * product(x, start, count) plus each adapter's ((x A) * scale) B in its columns, in one kernel;
   * undefined where the addon lacks it. Under a tape, differentiable in x and each A and B: the
   * deltas [M, width] are never built and added as tensors (two passes over the output each).
   */
  productWithAdapters(x: tf.Tensor2D, adapters: ColumnAdapter[], scale: number, start = 0, count = this.rows): tf.Tensor2D | undefined {
    if (!fusedAdaptersAvailable()) return undefined;
    if (!tf.engine().isTapeOn()) return frozenLinearWithAdapters(x, this, start, count, adapters, scale);
    const factors = adapters.flatMap(({ A, B }) => [A, B]);
    const op = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      const [xi, ...ab] = args as tf.Tensor2D[];
      save([xi, ...ab]);
      const withInputs = adapters.map((a, i) => ({ ...a, A: ab[2 * i], B: ab[2 * i + 1] }));
      return {
        value: frozenLinearWithAdapters(xi, this, start, count, withInputs, scale),
        gradFunc: (dy: tf.Tensor2D, [sx, ...sab]: tf.Tensor[]) => {
          // d x = dy W + sum (dy_a B^T) scale A^T; d A = x^T (dy_a B^T) scale; d B = (x A scale)^T dy_a,
          // dy_a being dy's columns of adapter a.
          let dx = this.productTransposed(dy, start);
          const grads: tf.Tensor[] = [];
          withInputs.forEach(({ B, column }, i) => {
            const [A, Bs] = [sab[2 * i] as tf.Tensor2D, sab[2 * i + 1] as tf.Tensor2D];
            const width = B.shape[1];
            const dyA = width === dy.shape[1] ? dy : dy.slice([0, column], [-1, width]);
            const dRank = tf.mul(tf.matMul(dyA, Bs, false, true), scale) as tf.Tensor2D;
            dx = tf.add(dx, tf.matMul(dRank, A, false, true)) as tf.Tensor2D;
            grads.push(tf.matMul(sx as tf.Tensor2D, dRank, true, false), tf.matMul(tf.mul(tf.matMul(sx as tf.Tensor2D, A), scale) as tf.Tensor2D, dyA, true, false));
          });
          return [dx, ...grads];
        },
      };
    }) as Parameters<typeof tf.customGrad>[0]);
    return op(x, ...factors) as tf.Tensor2D;
  }

  /** dy[M, count] times rows [start, start + count): dy W, [M, cols] (the input gradient of product). */
  productTransposed(dy: tf.Tensor2D, start = 0): tf.Tensor2D {
    return runFrozenMatMul(dy, this, true, start, dy.shape[1]);
  }
}

/** Whether frozen weights can live outside the heap here (wasm with the native addon). */
export function frozenBaseAvailable(): boolean {
  return frozenProductsAvailable();
}
