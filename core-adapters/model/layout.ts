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
