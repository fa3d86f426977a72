// A Llama / Qwen2 decoder-only language model in tfjs, readable top to bottom.
// x = embed(ids); per layer: x += attn(rmsnorm(x)); x += mlp(rmsnorm(x)); final = rmsnorm(x).
// Parameters are in the layout of layout.ts: linear weights [in, out], q/k/v fused per layer.
import * as tf from '@tensorflow/tfjs-core';
import { WASM_HEAP_LIMIT } from '../engine/backend.js';
import type { FrozenMatrix } from '../engine/frozen.js';
import { decodeAttention, decodeAttentionAvailable, inPlaceWriteCount, writeTimeSlice } from '../engine/kernels.js';
import { webgpuFused, writeTimeSliceOnGpu } from '../engine/webgpu-kernels.js';
import { addColumns, addConstant, addSameShape, attentionChunkRows, chunkedAttention, embedFromBlocks, linear, matmulConstant, rmsNorm, siluMul } from '../engine/ops.js';
import type { ModelConfig } from './config.js';
import { vocabBlockName } from './layout.js';
import { moduleShape, type LoraAdapters, type LoraModule } from './lora.js';
import { replayTape, type TapeNode } from './tape-replay.js';

/**
 * Past keys and values per layer, [B, nKV, S, headDim] each. With `capacity` the buffers are
 * preallocated to that many positions and filled in place; `length` of them are in use.
 */
export type KVCache = {
  keys: tf.Tensor4D[];
  values: tf.Tensor4D[];
  length?: number;
  capacity?: number;
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
  /** With useCache and no cache yet: preallocate it for this many positions (updated in place). */
  cacheCapacity?: number;
}

export interface ForwardOutput {
  /** Hidden states after the final norm, [batch * length, H]. */
  hidden: tf.Tensor2D;
  /** Outputs of the requested decoder layers, [batch * length, H] each, in request order. */
  layerOutputs: tf.Tensor2D[];
  cache?: KVCache;
}

const MASKED = -1e9;

/** The most activations checkpointing keeps before recomputing layers. */
const MAX_ACTIVATION_BUDGET = 2 * 2 ** 30;

/** A decoder layer's output and, when it computed them, its keys and values (the KV cache). */
interface LayerOutput {
  x: tf.Tensor2D;
  key?: tf.Tensor4D;
  value?: tf.Tensor4D;
}

interface RotaryTables {
  cos: tf.Tensor2D;
  sin: tf.Tensor2D;
}

/** One table over the fused q|k|v columns (decoding), or separate query and key tables. */
type Rotary = { fused: RotaryTables } | { query: RotaryTables; key: RotaryTables };

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

/** A Llama/Qwen2 causal LM on tfjs: forward with hidden states, KV cache, parameters by HF name. */
export class CausalLM {
  readonly params: Map<string, tf.Variable>;
  /**
   * A frozen base kept outside the heap (engine/frozen.ts): the embedding, the head and every
   * projection, in HF's [out, in] layout (q|k|v stacked as qkv_proj). Those names are then not in params.
   * Models of one directory share it (model/checkpoint.ts), so dispose leaves it alone.
   */
  readonly frozen: Map<string, FrozenMatrix>;
  /** LoRA adapters on the frozen base (model.lora_rank > 0); the model owns them. */
  get adapters(): LoraAdapters | undefined {
    return this.attached;
  }

  /** Swaps the adapters in (a server's per-request adapters) or out; merged weights made from others go. */
  set adapters(adapters: LoraAdapters | undefined) {
    if (adapters !== this.attached) this.forgetMergedWeights();
    this.attached = adapters;
  }

  private attached?: LoraAdapters;
  /**
   * Activation checkpointing: once the decoder layers' kept activations reach
   * activationBudgetBytes, the remaining layers are recomputed in the backward pass instead.
   * Unset: half of what the 4 GiB wasm heap has left at the forward's start, at most 2 GiB.
   */
  gradientCheckpointing = false;
  activationBudgetBytes?: number;
  /** Attention scores a forward of several tokens makes at once (unset: ATTENTION_SCORE_FLOATS); past it, query rows go in chunks. */
  attentionScoreFloats?: number;
  private readonly invFreq: Float64Array;
  /** rotate_half(x) = x @ rotateHalf, so RoPE needs no slicing; its transpose serves the gradient. */
  private readonly rotateHalf: tf.Tensor2D;
  private readonly rotateHalfT: tf.Tensor2D;

  /** `params` are in this model's layout (layout.ts); the model takes ownership. */
  constructor(readonly config: ModelConfig, params: Map<string, tf.Variable>, frozen = new Map<string, FrozenMatrix>()) {
    this.params = params;
    this.frozen = frozen;
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

  /**
   * A vocabulary matrix (the embedding, the head) as its blocks along the vocabulary: one, or
   * `name#k` for each block when the weights were split for a GPU's binding limit (layout.ts).
   */
  private vocabBlocks(name: string): tf.Tensor2D[] {
    if (this.params.has(name)) return [this.p(name) as tf.Tensor2D];
    const blocks: tf.Tensor2D[] = [];
    for (let k = 0; this.params.has(vocabBlockName(name, k)); k++) blocks.push(this.p(vocabBlockName(name, k)) as tf.Tensor2D);
    if (!blocks.length) throw new Error(`model parameter ${name} is missing`);
    return blocks;
  }

  /**
   * The output head as [H, V] column blocks (one unless split; with tied embeddings, the embedding
   * table transposed), or a frozen base's [V, H] matrix outside the heap.
   */
  headWeight(): tf.Tensor2D[] | FrozenMatrix {
    const name = this.config.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
    const frozen = this.frozen.get(name);
    if (frozen) return frozen;
    const blocks = this.vocabBlocks(name);
    return this.config.tieWordEmbeddings ? blocks.map((b) => tf.transpose(b)) : blocks;
  }

  /** Logits [N, V] for hidden states [N, H]. */
  logits(hidden: tf.Tensor2D): tf.Tensor2D {
    if (this.config.tieWordEmbeddings && webgpuFused() && !this.frozen.size) {
      // The embedding's blocks multiplied transposed: no copy of [V, H] per decode step.
      const blocks = this.vocabBlocks('model.embed_tokens.weight');
      const parts = blocks.map((block) => tf.matMul(hidden, block, false, true) as tf.Tensor2D);
      return parts.length === 1 ? parts[0] : (tf.concat(parts, 1) as tf.Tensor2D);
    }
    const head = this.headWeight();
    if (!Array.isArray(head)) return head.product(hidden);
    return head.length === 1 ? tf.matMul(hidden, head[0]) : (tf.concat(head.map((w) => tf.matMul(hidden, w)), 1) as tf.Tensor2D);
  }

  /**
   * x @ W (+ bias) for the linear weight `name`, or its columns [from, from + count) (rows of a
   * frozen [out, in] weight).
   */
  private project(name: string, x: tf.Tensor2D, bias?: tf.Tensor1D, columns?: [number, number]): tf.Tensor2D {
    const frozen = this.frozen.get(name);
    if (!frozen) {
      const w = this.p(name) as tf.Tensor2D;
      return linear(x, columns ? w.slice([0, columns[0]], [-1, columns[1]]) : w, bias);
    }
    const y = columns ? frozen.product(x, columns[0], columns[1]) : frozen.product(x);
    return bias ? addColumns(y, bias) : y;
  }

  /** What training updates: the adapters when there are any (the base is frozen), else every parameter. */
  trainableParams(): Map<string, tf.Variable> {
    return this.adapters ? this.adapters.params : this.params;
  }

  trainableVariables(): tf.Variable[] {
    return [...this.trainableParams().values()];
  }

  /** Attaches LoRA adapters (replacing and disposing earlier ones). */
  attachAdapters(adapters: LoraAdapters): void {
    this.adapters?.dispose();
    this.adapters = adapters;
  }

  /** W + scale A B per adapted weight, for webgpu's forwards without a tape, with the values it was made from. */
  private readonly merged = new Map<string, { from: (object | number)[]; weight: tf.Tensor2D }>();

  /**
   * On webgpu, a forward without a tape (sampling, log-probs) multiplies by W + scale A B, made
   * once per adapter update, instead of adding (x A scale) B to x W: four GPU programs fewer per
   * adapted module in a dispatch-bound decode step. Remade when W, A or B changes: assigned (a new
   * dataId) or written in place (AdamW on the GPU; counted per buffer).
   */
  private mergedWeight(name: string, modules: LoraModule[], adapters: { A: tf.Tensor2D; B: tf.Tensor2D; column: number }[]): tf.Tensor2D | undefined {
    // Not under a gradient, even where the tape is paused (a checkpointed layer's forward): the
    // merged copy would be remade every step and never used for the gradient.
    if (!webgpuFused() || (tf.engine() as unknown as { state: { gradientDepth: number } }).state.gradientDepth > 0 || this.frozen.has(name)) return undefined;
    const from = [this.p(name), ...adapters.flatMap(({ A, B }) => [A, B])].flatMap((t) => [t.dataId, inPlaceWriteCount(t.dataId)]);
    const known = this.merged.get(name);
    if (known && known.from.length === from.length && known.from.every((id, i) => id === from[i])) return known.weight;
    known?.weight.dispose();
    const scale = this.adapters!.scale;
    const weight = tf.tidy(() => {
      const base = this.p(name) as tf.Tensor2D;
      const widths = modules.map((module) => moduleShape(this.config, module)[1]);
      const deltas = widths.map((width, i) => {
        const column = widths.slice(0, i).reduce((a, b) => a + b, 0);
        const pair = adapters.find((a) => a.column === column);
        return pair ? tf.mul(tf.matMul(pair.A, pair.B), scale) : tf.zeros([base.shape[0], width]);
      });
      return tf.add(base, deltas.length === 1 ? deltas[0] : tf.concat(deltas, 1)) as tf.Tensor2D;
    });
    // Outlives the forward's tidy.
    tf.keep(weight);
    this.merged.set(name, { from, weight });
    return weight;
  }

  private forgetMergedWeights(): void {
    for (const { weight } of this.merged.values()) weight.dispose();
    this.merged.clear();
  }

  /** Runs fn on the base model alone (adapters off): the reference policy of a LoRA run. */
  withoutAdapters<T>(fn: () => T): T {
    return this.adapters ? this.adapters.withoutAdapters(fn) : fn();
  }

  /** y plus the adapter's scale * (x A) B on `module` of `layer`, when it has one. */
  private adapted(layer: number, module: LoraModule, x: tf.Tensor2D, y: tf.Tensor2D): tf.Tensor2D {
    const delta = this.adapters?.delta(layer, module, x);
    return delta ? addSameShape(y, delta) : y;
  }

  /** The adapters on `modules` of `layer` (while on), each with its first column in the fused weight. */
  private adapterPairs(layer: number, modules: LoraModule[]): { A: tf.Tensor2D; B: tf.Tensor2D; column: number }[] {
    const widths = modules.map((module) => moduleShape(this.config, module)[1]);
    return modules.flatMap((module, i) => {
      const pair = this.adapters?.pair(layer, module);
      return pair ? [{ A: pair.A as tf.Tensor2D, B: pair.B as tf.Tensor2D, column: widths.slice(0, i).reduce((a, b) => a + b, 0) }] : [];
    });
  }

  /**
   * residual + the projection of x by `module` of `layer` (o_proj, down_proj). On webgpu without a
   * tape the residual is added in the product's program: one GPU program instead of two.
   */
  private residualProjection(layer: number, name: string, module: LoraModule, x: tf.Tensor2D, residual: tf.Tensor2D, bias?: tf.Tensor1D): tf.Tensor2D {
    if (!bias && webgpuFused() && !tf.engine().isTapeOn() && !this.frozen.has(name)) {
      const adapters = this.adapterPairs(layer, [module]);
      const weight = adapters.length ? this.mergedWeight(name, [module], adapters)! : (this.p(name) as tf.Tensor2D);
      return tf.fused.matMul({ a: x, b: weight, bias: residual }) as tf.Tensor2D;
    }
    return addSameShape(residual, this.adaptedProjection(layer, name, [module], x, bias));
  }

  /**
   * x @ W (+ bias) for the linear weight `name` of `layer` plus the adapters of `modules`, whose
   * outputs lie side by side in W's columns (q|k|v fused) or are W's (one module). A frozen base
   * without a tape takes it all in one kernel.
   */
  private adaptedProjection(layer: number, name: string, modules: LoraModule[], x: tf.Tensor2D, bias?: tf.Tensor1D): tf.Tensor2D {
    const frozen = this.frozen.get(name);
    const widths = modules.map((module) => moduleShape(this.config, module)[1]);
    const adapters = this.adapterPairs(layer, modules);
    const fused = adapters.length && frozen ? frozen.productWithAdapters(x, adapters, this.adapters!.scale) : undefined;
    if (fused) return bias ? addColumns(fused, bias) : fused;
    const merged = adapters.length ? this.mergedWeight(name, modules, adapters) : undefined;
    if (merged) return linear(x, merged, bias);
    const y = this.project(name, x, bias);
    if (!adapters.length) return y;
    if (modules.length === 1) return this.adapted(layer, modules[0], x, y);
    // Each adapter's delta in its column block (zeros where none).
    const deltas = modules.map((module, i) => this.adapters!.delta(layer, module, x) ?? tf.zeros([x.shape[0], widths[i]]));
    return addSameShape(y, tf.concat(deltas, 1) as tf.Tensor2D);
  }

  forward(input: ForwardInput): ForwardOutput {
    const c = this.config;
    const { batch } = input;
    const length = input.ids.length / batch;
    const past = input.cache ? (input.cache.length ?? input.cache.keys[0].shape[2]) : 0;
    if (input.attentionMask.length !== batch * (past + length)) {
      throw new Error(`attention mask has ${input.attentionMask.length} entries; expected ${batch}x${past + length}`);
    }
    const capacity = input.cache ? input.cache.capacity : input.useCache ? input.cacheCapacity : undefined;
    if (capacity !== undefined && past + length > capacity) throw new Error(`KV cache holds ${capacity} positions; ${past + length} needed`);
    const rotary: Rotary = length === 1 ? { fused: this.rotaryTables(input.positions) } : this.splitRotaryTables(input.positions);
    // Several tokens (a prefill chunk) attend over the filled slots only: the unfilled rest of a
    // preallocated cache (max_new_tokens of it) would multiply the scores' size and work for nothing.
    // A decode step's kernels take the whole buffer with its mask.
    const keyWidth = length > 1 ? past + length : (capacity ?? past + length);
    const groups = c.numHeads / c.numKVHeads;
    // Long sequences attend a chunk of query rows at a time, with one group's rows of mask.
    const queryRows = length > 1 ? attentionChunkRows(batch, c.numKVHeads, groups, length, keyWidth, this.attentionScoreFloats) : undefined;
    const slots = { past, capacity, inPlace: capacity !== undefined, queryRows };
    const maskBias = this.attentionBias(input.attentionMask, batch, length, past + length, keyWidth, queryRows ? 1 : groups);

    const table = this.frozen.get('model.embed_tokens.weight');
    let x = table ? table.gatherRows(input.ids) : embedFromBlocks(this.vocabBlocks('model.embed_tokens.weight'), input.ids);
    const layerOutputs: tf.Tensor2D[] = [];
    const keys: tf.Tensor4D[] = [];
    const values: tf.Tensor4D[] = [];
    const taped = tf.engine().isTapeOn();
    // Under checkpointing, layers still keep their activations while those fit the budget.
    const budget = this.activationBudgetBytes ?? Math.max(0, Math.min(MAX_ACTIVATION_BUDGET, (WASM_HEAP_LIMIT - tf.memory().numBytes) / 2));
    let held = 0;
    let perLayer = 0;
    for (let i = 0; i < c.numLayers; i++) {
      const run = (from: tf.Tensor2D, bias = maskBias, tables = rotary) => this.decoderLayer(i, from, batch, length, tables, bias, input.cache, slots);
      const recompute = this.gradientCheckpointing && held + perLayer > budget;
      let out: LayerOutput;
      if (taped && recompute && !input.useCache) out = { x: this.checkpointed(i, x, maskBias, rotary, (from, bias, tables) => run(from, bias, tables).x) };
      else if (taped && !input.useCache) {
        const { y, bytes } = this.layerWithOwnTape(i, x, (from) => run(from).x);
        out = { x: y };
        held += bytes;
        perLayer = Math.max(perLayer, bytes);
      }
      // Without a tape each layer's intermediates go as soon as it is done.
      else out = tf.tidy(() => run(x) as unknown as tf.TensorContainer) as unknown as LayerOutput;
      x = out.x;
      if (out.key) keys.push(out.key);
      if (out.value) values.push(out.value);
      if (input.outputLayers?.includes(i)) layerOutputs[input.outputLayers.indexOf(i)] = x;
    }
    const hidden = rmsNorm(x, this.p('model.norm.weight') as tf.Tensor1D, c.rmsNormEps);
    const cache: KVCache | undefined = input.useCache ? { keys, values } : undefined;
    if (cache && slots.inPlace) Object.assign(cache, { length: past + length, capacity });
    return { hidden, layerOutputs, cache };
  }

  /** One decoder layer: x + attn(rmsnorm(x)), then + mlp(rmsnorm(.)); with this layer's new keys and values. */
  private decoderLayer(
    i: number,
    x: tf.Tensor2D,
    batch: number,
    length: number,
    rotary: Rotary,
    maskBias: tf.Tensor4D,
    cache: KVCache | undefined,
    slots: { past: number; capacity?: number; inPlace: boolean; queryRows?: number },
  ): LayerOutput {
    const c = this.config;
    const pre = `model.layers.${i}`;
    const h = rmsNorm(x, this.p(`${pre}.input_layernorm.weight`) as tf.Tensor1D, c.rmsNormEps);
    const mid = this.attention(i, h, batch, length, rotary, maskBias, cache, slots, x);
    const h2 = rmsNorm(mid, this.p(`${pre}.post_attention_layernorm.weight`) as tf.Tensor1D, c.rmsNormEps);
    return { x: this.mlp(i, h2, mid), key: mid.key, value: mid.value };
  }

  /**
   * Activation checkpointing (verl's enable_gradient_checkpointing): the layer runs without keeping
   * its intermediates, and the backward pass runs it again under a tape of its own. Only the
   * layer's input is kept, so training memory grows with tokens x layers x hidden size, not with
   * every intermediate of every layer.
   */
  private checkpointed(
    layer: number,
    x: tf.Tensor2D,
    maskBias: tf.Tensor4D,
    rotary: Rotary,
    run: (x: tf.Tensor2D, maskBias: tf.Tensor4D, rotary: Rotary) => tf.Tensor2D,
  ): tf.Tensor2D {
    const trained = this.layerTrainables(layer);
    // The forward's constants are freed after it; the backward gets saved copies.
    const tables = 'fused' in rotary ? [rotary.fused] : [rotary.query, rotary.key];
    const constants = [maskBias, ...tables.flatMap((t) => [t.cos, t.sin])];
    const rebuild = ([bias, ...t]: tf.Tensor[]): [tf.Tensor4D, Rotary] => {
      const pair = (k: number): RotaryTables => ({ cos: t[2 * k] as tf.Tensor2D, sin: t[2 * k + 1] as tf.Tensor2D });
      return [bias as tf.Tensor4D, 'fused' in rotary ? { fused: pair(0) } : { query: pair(0), key: pair(1) }];
    };
    const op = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      const [input] = args as tf.Tensor2D[];
      save([input, ...constants]);
      return {
        value: run(input, maskBias, rotary),
        gradFunc: (dy: tf.Tensor2D, [saved, ...kept]: tf.Tensor[]) => {
          // A gradient inside the outer backward pass: tfjs starts a fresh tape and clears it at
          // the end, so the outer tape is put back for the rest of the backward pass.
          const state = tf.engine().state as unknown as { activeTape: unknown };
          const outerTape = state.activeTape;
          try {
            return tf.engine().gradients(() => run(saved as tf.Tensor2D, ...rebuild(kept)), [saved, ...trained], dy).grads;
          } finally {
            state.activeTape = outerTape;
          }
        },
      };
    }) as Parameters<typeof tf.customGrad>[0]);
    return op(x, ...trained) as tf.Tensor2D;
  }

  /**
   * A decoder layer recorded on a tape of its own, which the backward pass replays for this layer
   * alone. tfjs keeps every gradient of a backward pass until the pass ends; replaying layer by
   * layer frees each layer's gradients and saved activations as soon as it is done, so a step
   * holds one layer's gradients at a time, without computing anything twice.
   */
  private layerWithOwnTape(layer: number, x: tf.Tensor2D, run: (x: tf.Tensor2D) => tf.Tensor2D): { y: tf.Tensor2D; bytes: number } {
    const state = tf.engine().state as unknown as { activeTape: TapeNode[] };
    const outerTape = state.activeTape;
    const tape: TapeNode[] = [];
    state.activeTape = tape;
    let y: tf.Tensor2D;
    try {
      y = tf.tidy(() => run(x));
    } finally {
      state.activeTape = outerTape;
    }
    const trained = this.layerTrainables(layer);
    // What the layer's tape saved moves to this op's saved list (outer cleanup frees it even if
    // the backward pass never comes); the layer's nodes read it from there when replayed.
    const held = tape.flatMap((node) => node.saved ?? []);
    const op = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      save(held);
      return {
        value: tf.clone(y),
        gradFunc: (dy: tf.Tensor2D, saved: tf.Tensor[]) => {
          let next = 0;
          // In place: a node's gradient function holds this same array (and kernels' functions
          // would read disposed tensor objects, whose data the copies keep, without complaint).
          for (const node of tape) if (node.saved) node.saved.splice(0, node.saved.length, ...saved.slice(next, (next += node.saved.length)));
          const grads = tf.tidy(() => replayTape(tape, [x, ...trained], y, dy));
          tf.dispose(saved);
          return grads;
        },
      };
    }) as Parameters<typeof tf.customGrad>[0]);
    const out = op(x, ...trained) as tf.Tensor2D;
    const buffers = new Map(held.map((t) => [t.dataId, t.size * 4]));
    tf.dispose(held);
    return { y: out, bytes: [...buffers.values()].reduce((a, b) => a + b, 0) };
  }

  /** The trainable tensors a decoder layer reads: its adapters with LoRA, else its own parameters. */
  private layerTrainables(layer: number): tf.Variable[] {
    const prefix = `model.layers.${layer}.`;
    return [...this.trainableParams()].filter(([name]) => name.startsWith(prefix)).map(([, v]) => v);
  }

  /** residual + the MLP of h. */
  private mlp(layer: number, h: tf.Tensor2D, residual: tf.Tensor2D): tf.Tensor2D {
    const name = (n: string) => `model.layers.${layer}.mlp.${n}`;
    const project = (n: 'gate_proj' | 'up_proj', x: tf.Tensor2D) => this.adaptedProjection(layer, name(`${n}.weight`), [n], x, this.bias(name(`${n}.bias`)));
    const act = siluMul(project('gate_proj', h), project('up_proj', h));
    return this.residualProjection(layer, name('down_proj.weight'), 'down_proj', act, residual, this.bias(name('down_proj.bias')));
  }

  /**
   * Self-attention with q, k and v from one fused projection and one rotary pass (tfjs pays a
   * fixed cost per op, which dominates decoding). The rotary tables leave v unrotated and carry
   * the 1/sqrt(d) query scale.
   */
  private attention(
    layer: number,
    h: tf.Tensor2D,
    batch: number,
    length: number,
    rotary: Rotary,
    maskBias: tf.Tensor4D,
    cache: KVCache | undefined,
    slots: { past: number; capacity?: number; inPlace: boolean; queryRows?: number },
    residual: tf.Tensor2D,
  ): tf.Tensor2D & { key: tf.Tensor4D; value: tf.Tensor4D } {
    const c = this.config;
    const d = c.headDim;
    const groups = c.numHeads / c.numKVHeads;
    const w = (n: string) => `model.layers.${layer}.self_attn.${n}.weight`;
    const b = (n: string) => this.bias(`model.layers.${layer}.self_attn.${n}.bias`);
    let q: tf.Tensor4D;
    let kNew: tf.Tensor4D;
    let vNew: tf.Tensor4D;
    if ('fused' in rotary) {
      // Decoding (dispatch-bound): one fused projection and one rope; [N, C*d] is already
      // [B, C, 1, d] with C = heads + 2 kv heads, split along the head axis.
      const projected = this.adaptedProjection(layer, w('qkv_proj'), ['q_proj', 'k_proj', 'v_proj'], h, b('qkv_proj'));
      if (slots.inPlace && !tf.engine().isTapeOn() && decodeAttentionAvailable(d)) {
        // The rest of the attention in one kernel, the cache written in place.
        const shape: [number, number, number, number] = [batch, c.numKVHeads, slots.capacity!, d];
        const [keys, values] = cache ? [cache.keys[layer], cache.values[layer]] : [tf.zeros(shape) as tf.Tensor4D, tf.zeros(shape) as tf.Tensor4D];
        const heads = decodeAttention(projected, rotary.fused.cos, rotary.fused.sin, maskBias, keys, values, { heads: c.numHeads, kvHeads: c.numKVHeads, past: slots.past });
        return Object.assign(this.residualProjection(layer, w('o_proj'), 'o_proj', heads, residual, b('o_proj')), { key: keys, value: values });
      }
      const qkv = this.rope(projected, rotary.fused);
      [q, kNew, vNew] = tf.split(qkv.reshape([batch, c.numHeads + 2 * c.numKVHeads, 1, d]), [c.numHeads, c.numKVHeads, c.numKVHeads], 1) as tf.Tensor4D[];
    } else {
      // Several tokens per row: project q, k and v from column slices of the fused weight (small),
      // which avoids splitting the activations (a slow strided copy on wasm) and its gradient.
      const bias = b('qkv_proj');
      const project = (module: 'q_proj' | 'k_proj' | 'v_proj', from: number, heads: number, tables?: RotaryTables): tf.Tensor4D => {
        const cols = heads * d;
        let x = this.adapted(layer, module, h, this.project(w('qkv_proj'), h, bias?.slice([from * d], [cols]), [from * d, cols]));
        if (tables) x = this.rope(x, tables);
        return tf.transpose(x.reshape([batch, length, heads, d]), [0, 2, 1, 3]);
      };
      q = project('q_proj', 0, c.numHeads, rotary.query);
      kNew = project('k_proj', c.numHeads, c.numKVHeads, rotary.key);
      vNew = project('v_proj', c.numHeads + c.numKVHeads, c.numKVHeads);
    }
    let k = kNew;
    let v = vNew;
    // What the new positions attend over: the filled slots of a preallocated cache.
    let attended = { k, v };
    if (slots.inPlace) {
      // Preallocated buffers: write the new positions in place; unused slots are masked out.
      const shape: [number, number, number, number] = [batch, c.numKVHeads, slots.capacity!, d];
      k = cache ? cache.keys[layer] : tf.zeros(shape);
      v = cache ? cache.values[layer] : tf.zeros(shape);
      const write = (target: tf.Tensor4D, source: tf.Tensor4D) => writeTimeSlice(target, source, slots.past) || writeTimeSliceOnGpu(target, source, slots.past);
      if (!write(k, kNew) || !write(v, vNew)) throw new Error('in-place KV cache: this backend cannot write tensors in place');
      const filled = slots.past + length;
      const slice = (x: tf.Tensor4D) => x.slice([0, 0, 0, 0], [batch, c.numKVHeads, filled, d]);
      attended = length > 1 && filled < slots.capacity! ? { k: slice(k), v: slice(v) } : { k, v };
    } else if (cache) {
      k = tf.concat([cache.keys[layer], k], 2);
      v = tf.concat([cache.values[layer], v], 2);
      attended = { k, v };
    }

    // Grouped-query attention without repeating k/v: the query heads sharing a kv head are
    // stacked along the time axis, [B, nKV, groups*T, d].
    const grouped = q.reshape([batch, c.numKVHeads, groups * length, d]);
    const context =
      slots.queryRows
        ? chunkedAttention(grouped as tf.Tensor4D, attended.k, attended.v, maskBias, groups, slots.queryRows)
        : (tf.matMul(tf.softmax(addConstant(tf.matMul(grouped, attended.k, false, true) as tf.Tensor4D, maskBias)), attended.v) as tf.Tensor4D);
    const merged = length === 1 ? context : tf.transpose(context.reshape([batch, c.numHeads, length, d]), [0, 2, 1, 3]);
    const heads = merged.reshape([batch * length, c.numHeads * d]) as tf.Tensor2D;
    return Object.assign(this.residualProjection(layer, w('o_proj'), 'o_proj', heads, residual, b('o_proj')), { key: k, value: v });
  }

  /** Rotary embedding on every head of x[N, C*d]: x*cos + rotate_half(x)*sin. */
  private rope(x: tf.Tensor2D, rotary: RotaryTables): tf.Tensor2D {
    const d = this.config.headDim;
    const [rows, width] = x.shape;
    const rotated = matmulConstant(x.reshape([(rows * width) / d, d]), this.rotateHalf, this.rotateHalfT).reshape([rows, width]);
    return addSameShape(tf.mul(x, rotary.cos) as tf.Tensor2D, tf.mul(rotated, rotary.sin) as tf.Tensor2D);
  }

  /** Query-column and key-column tables, for forwards that project q, k and v separately. */
  private splitRotaryTables(positions: Int32Array): { query: RotaryTables; key: RotaryTables } {
    const c = this.config;
    const queryEnd = c.numHeads * c.headDim;
    return {
      query: this.rotaryTables(positions, [0, queryEnd]),
      key: this.rotaryTables(positions, [queryEnd, queryEnd + c.numKVHeads * c.headDim]),
    };
  }

  /**
   * cos/sin per token and fused q|k|v column, [N, C*d]: query columns scaled by 1/sqrt(d), key
   * columns plain, value columns cos 1 and sin 0.
   */
  private rotaryTables(positions: Int32Array, columns?: [number, number]): RotaryTables {
    const c = this.config;
    const d = c.headDim;
    const half = d / 2;
    const [first, end] = columns ?? [0, (c.numHeads + 2 * c.numKVHeads) * d];
    const width = end - first;
    const queryWidth = c.numHeads * d;
    const keyEnd = queryWidth + c.numKVHeads * d;
    const scale = 1 / Math.sqrt(d);
    const cos = new Float32Array(positions.length * width);
    const sin = new Float32Array(positions.length * width);
    const cosRow = new Float64Array(d);
    const sinRow = new Float64Array(d);
    for (let i = 0; i < positions.length; i++) {
      for (let j = 0; j < half; j++) {
        const angle = positions[i] * this.invFreq[j];
        cosRow[j] = cosRow[j + half] = Math.cos(angle);
        sinRow[j] = sinRow[j + half] = Math.sin(angle);
      }
      const row = i * width - first;
      for (let col = first; col < end; col++) {
        const j = col % d;
        if (col < queryWidth) {
          cos[row + col] = cosRow[j] * scale;
          sin[row + col] = sinRow[j] * scale;
        } else if (col < keyEnd) {
          cos[row + col] = cosRow[j];
          sin[row + col] = sinRow[j];
        } else {
          cos[row + col] = 1;
        }
      }
    }
    return { cos: tf.tensor2d(cos, [positions.length, width]), sin: tf.tensor2d(sin, [positions.length, width]) };
  }

  /**
   * Additive mask [B, 1, groups*T, slots]: query t (at key index keyLength - T + t) sees keys up to
   * itself that are real tokens; slots past keyLength (an unfilled preallocated cache) are masked.
   * The T-block is repeated for each of `groups` grouped query heads.
   */
  private attentionBias(mask: Int32Array, batch: number, length: number, keyLength: number, slots: number, groups: number): tf.Tensor4D {
    const rows = groups * length;
    const out = new Float32Array(batch * rows * slots);
    const offset = keyLength - length;
    for (let b = 0; b < batch; b++) {
      for (let t = 0; t < length; t++) {
        for (let s = 0; s < slots; s++) {
          const visible = s <= offset + t && s < keyLength && mask[b * keyLength + s] !== 0;
          if (visible) continue;
          for (let g = 0; g < groups; g++) out[(b * rows + g * length + t) * slots + s] = MASKED;
        }
      }
    }
    return tf.tensor4d(out, [batch, 1, rows, slots]);
  }

  dispose(): void {
    this.adapters?.dispose();
    this.adapters = undefined;
    this.forgetMergedWeights();
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
    this.rotateHalf.dispose();
    this.rotateHalfT.dispose();
  }
}
