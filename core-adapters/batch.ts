// verl's DataProto in TypeScript: named arrays sharing a leading (batch) dimension, non-tensor
// columns (one entry per row) and free-form meta. The arrays live in host memory: they pass between
// sampling, scoring (plain JS) and training, and become tfjs tensors only per micro-batch
// (toTensor), which keeps the loop free of tensor leaks and repeated device reads.
import * as tf from '@tensorflow/tfjs-core';

export type BatchArray = Float32Array | Int32Array;

/** A tensor in a batch: host memory, its shape, rows first. */
export interface BatchTensor {
  shape: number[];
  data: BatchArray;
}

function rowWidth(t: BatchTensor): number {
  return t.shape.slice(1).reduce((a, b) => a * b, 1);
}

function takeRows(t: BatchTensor, rows: number[]): BatchTensor {
  const width = rowWidth(t);
  const Ctor = t.data.constructor as new (n: number) => BatchArray;
  const out = new Ctor(rows.length * width);
  rows.forEach((r, i) => out.set(t.data.subarray(r * width, (r + 1) * width), i * width));
  return { shape: [rows.length, ...t.shape.slice(1)], data: out };
}

/** verl's DataProto: named tensors, per-row columns and meta, split and merged by rows. */
export class Batch {
  readonly tensors = new Map<string, BatchTensor>();
  readonly columns = new Map<string, unknown[]>();
  meta: Record<string, unknown>;
  private rows: number;

  constructor(
    init: { tensors?: Record<string, BatchTensor>; columns?: Record<string, unknown[]>; meta?: Record<string, unknown> } = {},
  ) {
    this.meta = { ...(init.meta ?? {}) };
    this.rows = -1;
    for (const [k, v] of Object.entries(init.tensors ?? {})) this.set(k, v);
    for (const [k, v] of Object.entries(init.columns ?? {})) this.setColumn(k, v);
  }

  /** Rows in the batch (0 for an empty batch). */
  get size(): number {
    return Math.max(0, this.rows);
  }

  private checkRows(key: string, n: number): void {
    if (this.rows >= 0 && n !== this.rows) throw new Error(`batch: '${key}' has ${n} rows; the batch has ${this.rows}`);
    this.rows = n;
  }

  /** Adds or replaces an array; its leading dimension must match the batch. */
  set(key: string, tensor: BatchTensor): this {
    const count = tensor.shape.reduce((a, b) => a * b, 1);
    if (count !== tensor.data.length) throw new Error(`batch: '${key}' has ${tensor.data.length} values for shape [${tensor.shape}]`);
    this.checkRows(key, tensor.shape[0]);
    this.tensors.set(key, tensor);
    return this;
  }

  setColumn(key: string, values: unknown[]): this {
    this.checkRows(key, values.length);
    this.columns.set(key, values);
    return this;
  }

  has(key: string): boolean {
    return this.tensors.has(key) || this.columns.has(key);
  }

  tensor(key: string): BatchTensor {
    const t = this.tensors.get(key);
    if (!t) throw new Error(`batch has no tensor '${key}' (has: ${[...this.tensors.keys()].join(', ')})`);
    return t;
  }

  column<T = unknown>(key: string): T[] {
    const c = this.columns.get(key);
    if (!c) throw new Error(`batch has no column '${key}' (has: ${[...this.columns.keys()].join(', ')})`);
    return c as T[];
  }

  /** A tfjs tensor of one array; the caller disposes it. */
  toTensor(key: string): tf.Tensor {
    const t = this.tensor(key);
    return tf.tensor(t.data, t.shape, t.data instanceof Int32Array ? 'int32' : 'float32');
  }

  /** A new batch holding only the named arrays and columns (all columns when `columns` is omitted). */
  select(tensorKeys: string[], columnKeys?: string[]): Batch {
    const out = new Batch({ meta: this.meta });
    for (const k of tensorKeys) out.set(k, this.tensor(k));
    for (const k of columnKeys ?? [...this.columns.keys()]) out.setColumn(k, this.column(k));
    return out;
  }

  /** Removes and returns the named arrays and columns as their own batch. */
  pop(tensorKeys: string[], columnKeys: string[] = []): Batch {
    const out = this.select(tensorKeys, columnKeys);
    tensorKeys.forEach((k) => this.tensors.delete(k));
    columnKeys.forEach((k) => this.columns.delete(k));
    return out;
  }

  /** Rows by index, in the given order (copies). */
  selectRows(indices: number[]): Batch {
    const out = new Batch({ meta: this.meta });
    for (const [k, t] of this.tensors) out.set(k, takeRows(t, indices));
    for (const [k, c] of this.columns) out.setColumn(k, indices.map((i) => c[i]));
    if (out.rows < 0) out.rows = indices.length;
    return out;
  }

  slice(start: number, end = this.size): Batch {
    return this.selectRows(Array.from({ length: Math.max(0, Math.min(end, this.size) - start) }, (_, i) => start + i));
  }

  /**
   * Splits into `chunks` consecutive parts whose sizes differ by at most one, the first parts taking
   * the extra rows (verl's chunk requires divisibility; this does not).
   */
  chunk(chunks: number): Batch[] {
    if (!Number.isInteger(chunks) || chunks < 1) throw new Error(`batch.chunk: chunks must be a positive integer; got ${chunks}`);
    const base = Math.floor(this.size / chunks);
    const extra = this.size % chunks;
    const out: Batch[] = [];
    let start = 0;
    for (let i = 0; i < chunks; i++) {
      const size = base + (i < extra ? 1 : 0);
      out.push(this.slice(start, start + size));
      start += size;
    }
    return out;
  }

  /** Consecutive parts of at most `size` rows. */
  split(size: number): Batch[] {
    if (!Number.isInteger(size) || size < 1) throw new Error(`batch.split: size must be a positive integer; got ${size}`);
    const out: Batch[] = [];
    for (let start = 0; start < this.size; start += size) out.push(this.slice(start, start + size));
    return out;
  }

  /** Each row repeated `times` times: interleaved (a a b b) or tiled (a b a b). */
  repeat(times: number, interleave = true): Batch {
    const indices: number[] = [];
    if (interleave) for (let i = 0; i < this.size; i++) for (let r = 0; r < times; r++) indices.push(i);
    else for (let r = 0; r < times; r++) for (let i = 0; i < this.size; i++) indices.push(i);
    return this.selectRows(indices);
  }

  /** Adds another batch's arrays and columns (same rows); a key present in both must hold the same object. */
  union(other: Batch): this {
    if (other.size !== this.size && this.rows >= 0 && other.rows >= 0) throw new Error(`batch.union: ${other.size} rows vs ${this.size}`);
    for (const [k, t] of other.tensors) {
      if (this.tensors.has(k) && this.tensors.get(k) !== t) throw new Error(`batch.union: both batches hold a different '${k}'`);
      this.set(k, t);
    }
    for (const [k, c] of other.columns) {
      if (this.columns.has(k) && this.columns.get(k) !== c) throw new Error(`batch.union: both batches hold a different column '${k}'`);
      this.setColumn(k, c);
    }
    this.meta = { ...other.meta, ...this.meta };
    return this;
  }

  /** Rows of several batches with the same keys, in order. */
  static concat(batches: Batch[]): Batch {
    if (batches.length === 0) return new Batch();
    const first = batches[0];
    const out = new Batch({ meta: first.meta });
    for (const [k, t] of first.tensors) {
      const parts = batches.map((b) => b.tensor(k));
      const tail = t.shape.slice(1);
      parts.forEach((p) => {
        if (p.shape.slice(1).join() !== tail.join()) throw new Error(`batch.concat: '${k}' has shape [${p.shape}] vs [${t.shape}]`);
      });
      const Ctor = t.data.constructor as new (n: number) => BatchArray;
      const data = new Ctor(parts.reduce((n, p) => n + p.data.length, 0));
      let offset = 0;
      for (const p of parts) {
        data.set(p.data, offset);
        offset += p.data.length;
      }
      out.set(k, { shape: [parts.reduce((n, p) => n + p.shape[0], 0), ...tail], data });
    }
    for (const k of first.columns.keys()) out.setColumn(k, batches.flatMap((b) => b.column(k)));
    return out;
  }

  /** The batch as plain data that structured clone copies (to a worker thread). */
  toPlain(): { tensors: Record<string, BatchTensor>; columns: Record<string, unknown[]>; meta: Record<string, unknown> } {
    return { tensors: Object.fromEntries(this.tensors), columns: Object.fromEntries(this.columns), meta: this.meta };
  }

  static fromPlain(plain: ReturnType<Batch['toPlain']>): Batch {
    return new Batch(plain);
  }

  /** Drops every array and column (host memory is then collected). */
  dispose(): void {
    this.tensors.clear();
    this.columns.clear();
    this.rows = -1;
  }
}

/**
 * Which response positions hold a token (1) or padding (0), [B * R]: the response part of
 * attention_mask. It equals response_mask except in multi-turn rollouts, whose tool turns are
 * tokens of the response (decoded, scored, attended to) that no loss reads.
 */
export function responseTokens(batch: Batch): Float32Array {
  const R = batch.tensor('responses').shape[1];
  if (!batch.has('attention_mask')) return Float32Array.from(batch.tensor('response_mask').data);
  const attention = batch.tensor('attention_mask');
  const L = attention.shape[1];
  const out = new Float32Array(batch.size * R);
  for (let b = 0; b < batch.size; b++) for (let t = 0; t < R; t++) out[b * R + t] = attention.data[b * L + L - R + t];
  return out;
}
