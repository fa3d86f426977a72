// A Llama / Qwen2 decoder-only language model in tfjs, readable top to bottom.
// x = embed(ids); per layer: x += attn(rmsnorm(x)); x += mlp(rmsnorm(x)); final = rmsnorm(x).
// Linear weights are held as [in, out] (Hugging Face stores [out, in]) so every forward matmul
// is untransposed; checkpoints convert at the boundary.
import * as tf from '@tensorflow/tfjs';
import { embed, linear, matmulConstant, rmsNorm, silu } from '../engine/ops.js';
import type { ModelConfig } from './config.js';

/** Past keys and values per layer, [B, nKV, S, headDim] each. */
export type KVCache = {
  keys: tf.Tensor4D[];
  values: tf.Tensor4D[];
};

export interface ForwardInput {
  /** Token ids, row-major [batch, length]. */
  ids: Int32Array;
  batch: number;
  /** Mask over every key position, cached ones first: [batch, past + length], 1 = real token. */
  attentionMask: Int32Array;
  /** Rotary position of each new token, [batch, length]. */
  positions: Int32Array;
  cache?: KVCache;
  /** Decoder layers (0-based) whose residual-stream outputs to return. */
  outputLayers?: number[];
  /** Return the updated KV cache. */
  useCache?: boolean;
}

export interface ForwardOutput {
  /** Hidden states after the final norm, [batch * length, H]. */
  hidden: tf.Tensor2D;
  /** Outputs of the requested decoder layers, [batch * length, H] each, in request order. */
  layerOutputs: tf.Tensor2D[];
  cache?: KVCache;
}

const MASKED = -1e9;

/** Names whose tensors are stored transposed relative to Hugging Face ([in, out] here). */
export function heldTransposed(name: string): boolean {
  return name.endsWith('_proj.weight') || name === 'lm_head.weight';
}

/** Rotary inverse frequencies (float64), with llama3 or linear scaling when configured. */
export function ropeInverseFrequencies(c: ModelConfig): Float64Array {
  const half = c.headDim / 2;
  const inv = new Float64Array(half);
  for (let j = 0; j < half; j++) inv[j] = 1 / c.ropeTheta ** ((2 * j) / c.headDim);
  const s = c.ropeScaling;
  if (s?.type === 'linear') for (let j = 0; j < half; j++) inv[j] /= s.factor;
  if (s?.type === 'llama3') {
    const lowWavelength = s.originalMaxPositions / s.lowFreqFactor;
    const highWavelength = s.originalMaxPositions / s.highFreqFactor;
    for (let j = 0; j < half; j++) {
      const wavelength = (2 * Math.PI) / inv[j];
      if (wavelength > lowWavelength) inv[j] /= s.factor;
      else if (wavelength >= highWavelength) {
        const smooth = (s.originalMaxPositions / wavelength - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
        inv[j] = (1 - smooth) * (inv[j] / s.factor) + smooth * inv[j];
      }
    }
  }
  return inv;
}

/** Positions from a left-padded mask: count of real tokens before each one (HF's cumsum - 1). */
export function positionsFromMask(mask: Int32Array, batch: number): Int32Array {
  const length = mask.length / batch;
  const out = new Int32Array(mask.length);
  for (let b = 0; b < batch; b++) {
    let seen = 0;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      out[i] = mask[i] ? seen : 0;
      seen += mask[i] ? 1 : 0;
    }
  }
  return out;
}

export class CausalLM {
  readonly params: Map<string, tf.Variable>;
  private readonly invFreq: Float64Array;
  /** rotate_half(x) = x @ rotateHalf, so RoPE needs no slicing; its transpose serves the gradient. */
  private readonly rotateHalf: tf.Tensor2D;
  private readonly rotateHalfT: tf.Tensor2D;

  /** `params` are in this model's layout (see heldTransposed); the model takes ownership. */
  constructor(readonly config: ModelConfig, params: Map<string, tf.Variable>) {
    this.params = params;
    this.invFreq = ropeInverseFrequencies(config);
    const d = config.headDim;
    const half = d / 2;
    const r = new Float32Array(d * d);
    for (let j = 0; j < half; j++) {
      r[(j + half) * d + j] = -1;
      r[j * d + j + half] = 1;
    }
    this.rotateHalf = tf.tensor2d(r, [d, d]);
    this.rotateHalfT = tf.transpose(this.rotateHalf);
  }

  private p(name: string): tf.Tensor {
    const v = this.params.get(name);
    if (!v) throw new Error(`model parameter ${name} is missing`);
    return v;
  }

  private bias(name: string): tf.Tensor1D | undefined {
    return this.params.get(name) as tf.Tensor1D | undefined;
  }

  /** The output head as [H, V]; with tied embeddings, the embedding table transposed. */
  headWeight(): tf.Tensor2D {
    if (this.config.tieWordEmbeddings) return tf.transpose(this.p('model.embed_tokens.weight')) as tf.Tensor2D;
    return this.p('lm_head.weight') as tf.Tensor2D;
  }

  /** Logits [N, V] for hidden states [N, H]. */
  logits(hidden: tf.Tensor2D): tf.Tensor2D {
    return tf.matMul(hidden, this.headWeight());
  }

  trainableVariables(): tf.Variable[] {
    return [...this.params.values()];
  }

  forward(input: ForwardInput): ForwardOutput {
    const c = this.config;
    const { batch } = input;
    const length = input.ids.length / batch;
    const past = input.cache ? input.cache.keys[0].shape[2] : 0;
    if (input.attentionMask.length !== batch * (past + length)) {
      throw new Error(`attention mask has ${input.attentionMask.length} entries; expected ${batch}x${past + length}`);
    }
    const [cos, sin] = this.rotaryTables(input.positions);
    const maskBias = this.attentionBias(input.attentionMask, batch, length, past + length);

    let x = embed(this.p('model.embed_tokens.weight') as tf.Tensor2D, input.ids);
    const layerOutputs: tf.Tensor2D[] = [];
    const keys: tf.Tensor4D[] = [];
    const values: tf.Tensor4D[] = [];
    for (let i = 0; i < c.numLayers; i++) {
      const pre = `model.layers.${i}`;
      const h = rmsNorm(x, this.p(`${pre}.input_layernorm.weight`) as tf.Tensor1D, c.rmsNormEps);
      const attn = this.attention(pre, h, batch, length, cos, sin, maskBias, input.cache, i, keys, values);
      x = tf.add(x, attn);
      const h2 = rmsNorm(x, this.p(`${pre}.post_attention_layernorm.weight`) as tf.Tensor1D, c.rmsNormEps);
      x = tf.add(x, this.mlp(pre, h2));
      if (input.outputLayers?.includes(i)) layerOutputs[input.outputLayers.indexOf(i)] = x;
    }
    const hidden = rmsNorm(x, this.p('model.norm.weight') as tf.Tensor1D, c.rmsNormEps);
    return { hidden, layerOutputs, cache: input.useCache ? { keys, values } : undefined };
  }

  private mlp(pre: string, h: tf.Tensor2D): tf.Tensor2D {
    const w = (n: string) => this.p(`${pre}.mlp.${n}.weight`) as tf.Tensor2D;
    const b = (n: string) => this.bias(`${pre}.mlp.${n}.bias`);
    const gate = silu(linear(h, w('gate_proj'), b('gate_proj')));
    const up = linear(h, w('up_proj'), b('up_proj'));
    return linear(tf.mul(gate, up) as tf.Tensor2D, w('down_proj'), b('down_proj'));
  }

  private attention(
    pre: string,
    h: tf.Tensor2D,
    batch: number,
    length: number,
    cos: tf.Tensor3D,
    sin: tf.Tensor3D,
    maskBias: tf.Tensor4D,
    cache: KVCache | undefined,
    layer: number,
    keysOut: tf.Tensor4D[],
    valuesOut: tf.Tensor4D[],
  ): tf.Tensor2D {
    const c = this.config;
    const d = c.headDim;
    const groups = c.numHeads / c.numKVHeads;
    const w = (n: string) => this.p(`${pre}.self_attn.${n}.weight`) as tf.Tensor2D;
    const b = (n: string) => this.bias(`${pre}.self_attn.${n}.bias`);

    // [N, heads*d] -> [B, heads, T, d]
    const heads = (t: tf.Tensor2D, n: number) => tf.transpose(t.reshape([batch, length, n, d]), [0, 2, 1, 3]) as tf.Tensor4D;
    const q = heads(this.rope(linear(h, w('q_proj'), b('q_proj')), c.numHeads, cos, sin), c.numHeads);
    let k = heads(this.rope(linear(h, w('k_proj'), b('k_proj')), c.numKVHeads, cos, sin), c.numKVHeads);
    let v = heads(linear(h, w('v_proj'), b('v_proj')), c.numKVHeads);
    if (cache) {
      k = tf.concat([cache.keys[layer], k], 2);
      v = tf.concat([cache.values[layer], v], 2);
    }
    keysOut.push(k);
    valuesOut.push(v);

    // Grouped-query attention without repeating k/v: the query heads sharing a kv head are
    // stacked along the time axis, [B, nKV, groups*T, d].
    const grouped = tf.mul(q.reshape([batch, c.numKVHeads, groups * length, d]), 1 / Math.sqrt(d));
    const scores = tf.add(tf.matMul(grouped, k, false, true), maskBias);
    const context = tf.matMul(tf.softmax(scores), v) as tf.Tensor4D;
    const merged = tf.transpose(context.reshape([batch, c.numHeads, length, d]), [0, 2, 1, 3]);
    return linear(merged.reshape([batch * length, c.numHeads * d]), w('o_proj'), b('o_proj'));
  }

  /** Rotary embedding on x[N, n*d] with cos/sin [N, 1, d]: x*cos + rotate_half(x)*sin. */
  private rope(x: tf.Tensor2D, n: number, cos: tf.Tensor3D, sin: tf.Tensor3D): tf.Tensor2D {
    const d = this.config.headDim;
    const rows = x.shape[0];
    const perHead = x.reshape([rows * n, d]) as tf.Tensor2D;
    const rotated = matmulConstant(perHead, this.rotateHalf, this.rotateHalfT).reshape([rows, n, d]);
    const out = tf.add(tf.mul(perHead.reshape([rows, n, d]), cos), tf.mul(rotated, sin));
    return out.reshape([rows, n * d]);
  }

  private rotaryTables(positions: Int32Array): [tf.Tensor3D, tf.Tensor3D] {
    const d = this.config.headDim;
    const half = d / 2;
    const cos = new Float32Array(positions.length * d);
    const sin = new Float32Array(positions.length * d);
    for (let i = 0; i < positions.length; i++) {
      for (let j = 0; j < half; j++) {
        const angle = positions[i] * this.invFreq[j];
        const cj = Math.cos(angle);
        const sj = Math.sin(angle);
        cos[i * d + j] = cos[i * d + j + half] = cj;
        sin[i * d + j] = sin[i * d + j + half] = sj;
      }
    }
    return [tf.tensor3d(cos, [positions.length, 1, d]), tf.tensor3d(sin, [positions.length, 1, d])];
  }

  /**
   * Additive mask [B, 1, groups*T, S]: query t (at key index S - T + t) sees keys up to itself that
   * are real tokens. The T-block is repeated for each grouped query head.
   */
  private attentionBias(mask: Int32Array, batch: number, length: number, keyLength: number): tf.Tensor4D {
    const groups = this.config.numHeads / this.config.numKVHeads;
    const rows = groups * length;
    const out = new Float32Array(batch * rows * keyLength);
    const offset = keyLength - length;
    for (let b = 0; b < batch; b++) {
      for (let t = 0; t < length; t++) {
        for (let s = 0; s < keyLength; s++) {
          const visible = s <= offset + t && mask[b * keyLength + s] !== 0;
          if (visible) continue;
          for (let g = 0; g < groups; g++) out[(b * rows + g * length + t) * keyLength + s] = MASKED;
        }
      }
    }
    return tf.tensor4d(out, [batch, 1, rows, keyLength]);
  }

  dispose(): void {
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
    this.rotateHalf.dispose();
    this.rotateHalfT.dispose();
  }
}
