// The model's own parameter layout versus Hugging Face's. Here linear weights are [in, out] so every
// forward matmul is untransposed, and each layer's q/k/v projections are one fused [H, (nH+2nKV)*d]
// matrix so attention starts with one matmul. Checkpoints convert at the boundary, bit for bit.
import { concatFloat32 } from '../arrays.js';
import type { ModelConfig } from './config.js';
import { expectedTensors } from './config.js';

export interface HostTensor {
  shape: number[];
  data: Float32Array;
}

const QKV = ['q_proj', 'k_proj', 'v_proj'] as const;

function transpose2d(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
  return out;
}

function fusedName(hfName: string): string | undefined {
  const m = /^(model\.layers\.\d+\.self_attn)\.[qkv]_proj\.(weight|bias)$/.exec(hfName);
  return m ? `${m[1]}.qkv_proj.${m[2]}` : undefined;
}

/** Whether a frozen base keeps an HF tensor outside the heap: the embedding, the head, every projection. */
export function isFrozenBaseTensor(hfName: string): boolean {
  return hfName === 'model.embed_tokens.weight' || hfName === 'lm_head.weight' || hfName.endsWith('_proj.weight');
}

/**
 * A frozen base's matrices from HF tensors, in HF's [out, in] layout (no transpose); q, k and v
 * stacked as qkv_proj. Each source tensor is deleted from `hf` once used, so its memory can go.
 */
export function frozenBaseMatrices<T>(config: ModelConfig, hf: Map<string, HostTensor>, make: (data: Float32Array, rows: number, cols: number) => T): Map<string, T> {
  const out = new Map<string, T>();
  const take = (name: string) => {
    const t = hf.get(name);
    if (!t) throw new Error(`weights for ${name} are missing`);
    hf.delete(name);
    return t;
  };
  for (const [name, shape] of expectedTensors(config)) {
    if (!isFrozenBaseTensor(name) || !hf.has(name)) continue;
    const fused = fusedName(name);
    if (!fused) {
      out.set(name, make(take(name).data, shape[0], shape[1]));
      continue;
    }
    const prefix = fused.slice(0, fused.indexOf('.qkv_proj'));
    const parts = QKV.map((p) => take(`${prefix}.${p}.weight`));
    out.set(fused, make(concatFloat32(parts.map((p) => p.data)), parts.reduce((n, p) => n + p.shape[0], 0), shape[1]));
  }
  return out;
}

/** HF tensors of a frozen base's matrices (frozenBaseMatrices reversed); `rows` reads a matrix's rows. */
export function frozenBaseToHf(config: ModelConfig, names: Iterable<string>, rows: (name: string, start: number, count: number) => Float32Array): Map<string, HostTensor> {
  const out = new Map<string, HostTensor>();
  const shapes = expectedTensors(config);
  for (const name of names) {
    if (!name.endsWith('.qkv_proj.weight')) {
      out.set(name, { shape: shapes.get(name)!, data: rows(name, 0, shapes.get(name)![0]) });
      continue;
    }
    const prefix = name.slice(0, name.indexOf('.qkv_proj'));
    let start = 0;
    for (const p of QKV) {
      const shape = shapes.get(`${prefix}.${p}.weight`)!;
      out.set(`${prefix}.${p}.weight`, { shape, data: rows(name, start, shape[0]) });
      start += shape[0];
    }
  }
  return out;
}

/**
 * Converts Hugging Face tensors (names and shapes of expectedTensors) to the model's layout; those
 * `skip` names (a frozen base's, held elsewhere) are left out.
 */
export function toModelLayout(config: ModelConfig, hf: Map<string, HostTensor>, skip: (hfName: string) => boolean = () => false): Map<string, HostTensor> {
  const out = new Map<string, HostTensor>();
  const get = (name: string) => {
    const t = hf.get(name);
    if (!t) throw new Error(`weights for ${name} are missing`);
    return t;
  };
  for (const [name, shape] of expectedTensors(config)) {
    if (skip(name)) continue;
    const fused = fusedName(name);
    if (fused) {
      if (out.has(fused)) continue;
      const prefix = fused.slice(0, fused.indexOf('.qkv_proj'));
      const kind = fused.endsWith('weight') ? 'weight' : 'bias';
      const parts = QKV.map((p) => get(`${prefix}.${p}.${kind}`));
      const rows = parts.reduce((n, p) => n + p.shape[0], 0);
      const stacked = concatFloat32(parts.map((p) => p.data));
      out.set(fused, kind === 'weight' ? { shape: [shape[1], rows], data: transpose2d(stacked, rows, shape[1]) } : { shape: [rows], data: stacked });
    } else if (name.endsWith('_proj.weight') || name === 'lm_head.weight') {
      out.set(name, { shape: [shape[1], shape[0]], data: transpose2d(get(name).data, shape[0], shape[1]) });
    } else {
      out.set(name, { shape, data: get(name).data });
    }
  }
  return out;
}

/** Converts the model's layout back to Hugging Face names and shapes (the tensors `params` has). */
export function toHfLayout(config: ModelConfig, params: Map<string, HostTensor>): Map<string, HostTensor> {
  const out = new Map<string, HostTensor>();
  for (const [name, shape] of expectedTensors(config)) {
    const fused = fusedName(name);
    if (!params.has(fused ?? name)) continue;
    if (fused) {
      const source = params.get(fused)!;
      const kind = fused.endsWith('weight') ? 'weight' : 'bias';
      const which = QKV.indexOf(name.split('.').at(-2) as (typeof QKV)[number]);
      const offsets = [0, config.numHeads, config.numHeads + config.numKVHeads].map((h) => h * config.headDim);
      const start = offsets[which];
      const rows = shape[0];
      if (kind === 'bias') {
        out.set(name, { shape, data: source.data.slice(start, start + rows) });
      } else {
        // The fused weight is [H, total]; HF wants this block's [rows, H].
        const [H, total] = source.shape;
        const data = new Float32Array(rows * H);
        for (let r = 0; r < rows; r++) for (let c = 0; c < H; c++) data[r * H + c] = source.data[c * total + start + r];
        out.set(name, { shape, data });
      }
    } else if (name.endsWith('_proj.weight') || name === 'lm_head.weight') {
      const source = params.get(name)!;
      out.set(name, { shape, data: transpose2d(source.data, source.shape[0], source.shape[1]) });
    } else {
      out.set(name, { shape, data: params.get(name)!.data });
    }
  }
  return out;
}

// A GPU binds a whole tensor per storage binding, and a real vocabulary's embedding is past that
// limit (151,936 x 896 float32 is 544 MB; lavapipe binds 128 MiB). So the matrices indexed by the
// vocabulary can be held as blocks along it, named `${name}#${k}`; checkpoints join them back.

/** The model-layout matrices indexed by the vocabulary, and the axis the vocabulary runs along. */
const VOCAB_AXIS: ReadonlyMap<string, 0 | 1> = new Map([
  ['model.embed_tokens.weight', 0],
  ['lm_head.weight', 1],
]);

/** The parameter name of block `k` of a vocabulary matrix held in blocks. */
export function vocabBlockName(name: string, k: number): string {
  return `${name}#${k}`;
}

function blockOf(name: string): { base: string; k: number } | undefined {
  const m = /^(.+)#(\d+)$/.exec(name);
  return m && VOCAB_AXIS.has(m[1]) ? { base: m[1], k: Number(m[2]) } : undefined;
}

/** Columns [from, to) of a row-major [rows, cols] matrix. */
function columnsOf(data: Float32Array, rows: number, cols: number, from: number, to: number): Float32Array {
  const width = to - from;
  const out = new Float32Array(rows * width);
  for (let r = 0; r < rows; r++) out.set(data.subarray(r * cols + from, r * cols + to), r * width);
  return out;
}

function sliceAlong(t: HostTensor, axis: 0 | 1, from: number, to: number): HostTensor {
  const [rows, cols] = t.shape;
  return axis === 0
    ? { shape: [to - from, cols], data: t.data.slice(from * cols, to * cols) }
    : { shape: [rows, to - from], data: columnsOf(t.data, rows, cols, from, to) };
}

/** `params` with each vocabulary matrix cut at `bounds` (block k is [bounds[k], bounds[k+1])), in place of the whole. */
function cutVocab(params: Map<string, HostTensor>, bounds: (name: string, t: HostTensor) => number[] | undefined): Map<string, HostTensor> {
  const out = new Map<string, HostTensor>();
  for (const [name, t] of params) {
    const axis = VOCAB_AXIS.get(name);
    const at = axis === undefined ? undefined : bounds(name, t);
    if (axis === undefined || !at) {
      out.set(name, t);
      continue;
    }
    for (let k = 0; k + 1 < at.length; k++) out.set(vocabBlockName(name, k), sliceAlong(t, axis, at[k], at[k + 1]));
  }
  return out;
}

/**
 * Splits the vocabulary matrices of model-layout `params` into the fewest equal blocks of at most
 * maxBytes of float32 each; those within it stay whole.
 */
export function splitVocabMatrices(params: Map<string, HostTensor>, maxBytes: number): Map<string, HostTensor> {
  return cutVocab(params, (name, t) => {
    const vocab = t.shape[VOCAB_AXIS.get(name)!];
    const bytesPerEntry = (4 * t.data.length) / vocab;
    if (vocab * bytesPerEntry <= maxBytes) return undefined;
    const perBlock = Math.floor(maxBytes / bytesPerEntry);
    if (perBlock < 1) throw new Error(`${name}: one vocabulary entry takes ${bytesPerEntry} bytes, more than ${maxBytes}`);
    const blocks = Math.ceil(vocab / perBlock);
    return Array.from({ length: blocks + 1 }, (_, k) => Math.round((k * vocab) / blocks));
  });
}

/** Splits the vocabulary matrices of `params` as `held` (a model's parameter shapes by name) holds them. */
export function splitVocabLike(params: Map<string, HostTensor>, held: Map<string, readonly number[]>): Map<string, HostTensor> {
  return cutVocab(params, (name) => {
    if (held.has(name) || !held.has(vocabBlockName(name, 0))) return undefined;
    const axis = VOCAB_AXIS.get(name)!;
    const bounds = [0];
    for (let k = 0; held.has(vocabBlockName(name, k)); k++) bounds.push(bounds[k] + held.get(vocabBlockName(name, k))![axis]);
    return bounds;
  });
}

/** Joins vocabulary blocks back into whole matrices (splitVocabMatrices reversed); the rest passes through. */
export function joinVocabBlocks(params: Map<string, HostTensor>): Map<string, HostTensor> {
  const out = new Map<string, HostTensor>();
  for (const [name, t] of params) {
    const block = blockOf(name);
    if (!block) {
      out.set(name, t);
      continue;
    }
    if (block.k > 0) continue;
    const parts: HostTensor[] = [];
    for (let k = 0; params.has(vocabBlockName(block.base, k)); k++) parts.push(params.get(vocabBlockName(block.base, k))!);
    const axis = VOCAB_AXIS.get(block.base)!;
    if (axis === 0) {
      out.set(block.base, { shape: [parts.reduce((n, p) => n + p.shape[0], 0), t.shape[1]], data: concatFloat32(parts.map((p) => p.data)) });
      continue;
    }
    const rows = t.shape[0];
    const cols = parts.reduce((n, p) => n + p.shape[1], 0);
    const data = new Float32Array(rows * cols);
    let from = 0;
    for (const p of parts) {
      const width = p.shape[1];
      for (let r = 0; r < rows; r++) data.set(p.data.subarray(r * width, (r + 1) * width), r * cols + from);
      from += width;
    }
    out.set(block.base, { shape: [rows, cols], data });
  }
  return out;
}
