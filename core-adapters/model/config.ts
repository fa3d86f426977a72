// A Hugging Face config.json for the Llama family (llama, qwen2), read into the fields the model uses.
import { InputError } from '../errors.js';
import { OPERATOR_FILES, readJsonFile, type FileAccess } from './files.js';
import type { TextTokenizer } from './tokenizer.js';

export const MODEL_TYPES = ['llama', 'qwen2'] as const;
export type ModelType = (typeof MODEL_TYPES)[number];

export interface RopeScaling {
  type: 'llama3' | 'linear';
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositions: number;
}

/** A checked Hugging Face config.json (llama or qwen2). */
export interface ModelConfig {
  modelType: ModelType;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKVHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling?: RopeScaling;
  maxPositions: number;
  tieWordEmbeddings: boolean;
  /** q/k/v projections carry a bias (qwen2 always; llama when attention_bias). */
  qkvBias: boolean;
  /** o_proj carries a bias (llama with attention_bias). */
  outputBias: boolean;
  mlpBias: boolean;
  bosTokenId?: number;
  eosTokenIds: number[];
  padTokenId?: number;
  /** The file's own keys, written back on save. */
  raw: Record<string, unknown>;
}

type Json = Record<string, unknown>;

/**
 * Upper bounds on a config's sizes, far above any released Llama or Qwen2 model: past them a config
 * is corrupt or hostile (30 million layers froze a server for minutes before any weight was read).
 */
const SIZE_LIMITS: Record<string, number> = {
  vocab_size: 2 ** 23,
  hidden_size: 2 ** 17,
  intermediate_size: 2 ** 20,
  num_hidden_layers: 2 ** 10,
  num_attention_heads: 2 ** 10,
  num_key_value_heads: 2 ** 10,
  head_dim: 2 ** 12,
  max_position_embeddings: 2 ** 24,
};

function positiveInt(raw: Json, key: string, file: string, fallback?: number): number {
  const value = raw[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value <= 0) {
    throw new InputError(`${file}: key '${key}' must be a positive integer; got ${JSON.stringify(raw[key])}`);
  }
  const limit = SIZE_LIMITS[key];
  if (limit !== undefined && value > limit) throw new InputError(`${file}: key '${key}' is ${value}; at most ${limit} is taken for a real model`);
  return value;
}

function positiveNumber(raw: Json, key: string, file: string, fallback: number): number {
  const value = raw[key] ?? fallback;
  if (typeof value !== 'number' || !(value > 0)) {
    throw new InputError(`${file}: key '${key}' must be a positive number; got ${JSON.stringify(raw[key])}`);
  }
  return value;
}

function optionalTokenIds(value: unknown): number[] {
  if (typeof value === 'number') return [value];
  if (Array.isArray(value)) return value.filter((v): v is number => typeof v === 'number');
  return [];
}

function parseRopeScaling(value: unknown, file: string): RopeScaling | undefined {
  if (value === null || value === undefined) return undefined;
  const rs = value as Json;
  const type = (rs.rope_type ?? rs.type) as string;
  if (type === 'default') return undefined;
  if (type !== 'llama3' && type !== 'linear') {
    throw new InputError(`${file}: key 'rope_scaling.rope_type' is '${type}'; supported: default, linear, llama3`);
  }
  return {
    type,
    factor: positiveNumber(rs, 'factor', file, 1),
    lowFreqFactor: type === 'llama3' ? positiveNumber(rs, 'low_freq_factor', file, 1) : 1,
    highFreqFactor: type === 'llama3' ? positiveNumber(rs, 'high_freq_factor', file, 4) : 1,
    originalMaxPositions: type === 'llama3' ? positiveInt(rs, 'original_max_position_embeddings', file, 8192) : 0,
  };
}

/** Validates a parsed config.json; `file` names it in error messages. */
export function parseModelConfig(raw: Json, file = 'config.json'): ModelConfig {
  const modelType = raw.model_type as ModelType;
  if (!MODEL_TYPES.includes(modelType)) {
    throw new InputError(`${file}: key 'model_type' is ${JSON.stringify(raw.model_type)}; supported: ${MODEL_TYPES.join(', ')}`);
  }
  const act = raw.hidden_act ?? 'silu';
  if (act !== 'silu') throw new InputError(`${file}: key 'hidden_act' is '${String(act)}'; only silu is supported`);
  if (raw.use_sliding_window === true) {
    throw new InputError(`${file}: key 'use_sliding_window' is true; sliding-window attention is not supported`);
  }
  const hiddenSize = positiveInt(raw, 'hidden_size', file);
  const numHeads = positiveInt(raw, 'num_attention_heads', file);
  const numKVHeads = positiveInt(raw, 'num_key_value_heads', file, numHeads);
  if (numHeads % numKVHeads !== 0) {
    throw new InputError(`${file}: key 'num_key_value_heads' (${numKVHeads}) must divide num_attention_heads (${numHeads})`);
  }
  const headDim = raw.head_dim == null ? hiddenSize / numHeads : positiveInt(raw, 'head_dim', file);
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) {
    throw new InputError(`${file}: head dimension ${headDim} (key 'head_dim' or hidden_size/num_attention_heads) must be an even integer`);
  }
  const attentionBias = raw.attention_bias === true;
  return {
    modelType,
    vocabSize: positiveInt(raw, 'vocab_size', file),
    hiddenSize,
    intermediateSize: positiveInt(raw, 'intermediate_size', file),
    numLayers: positiveInt(raw, 'num_hidden_layers', file),
    numHeads,
    numKVHeads,
    headDim,
    rmsNormEps: positiveNumber(raw, 'rms_norm_eps', file, 1e-6),
    ropeTheta: positiveNumber(raw, 'rope_theta', file, 10000),
    ropeScaling: parseRopeScaling(raw.rope_scaling, file),
    maxPositions: positiveInt(raw, 'max_position_embeddings', file, 2048),
    tieWordEmbeddings: raw.tie_word_embeddings === true,
    qkvBias: modelType === 'qwen2' || attentionBias,
    outputBias: modelType === 'llama' && attentionBias,
    mlpBias: modelType === 'llama' && raw.mlp_bias === true,
    bosTokenId: typeof raw.bos_token_id === 'number' ? raw.bos_token_id : undefined,
    eosTokenIds: optionalTokenIds(raw.eos_token_id),
    padTokenId: typeof raw.pad_token_id === 'number' ? raw.pad_token_id : undefined,
    raw,
  };
}

/** Reads and validates DIR/config.json. */
export function readModelConfig(file: string, access: FileAccess = OPERATOR_FILES): ModelConfig {
  let raw: unknown;
  try {
    raw = readJsonFile(file, access);
  } catch (e) {
    if ((e as Error).message.endsWith('file not found')) throw new InputError(`${file}: file not found; a Hugging Face model directory needs config.json`);
    throw e;
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new InputError(`${file}: must hold a JSON object`);
  return parseModelConfig(raw as Json, file);
}

/** The HF names and shapes (HF layout, [out, in] for linear weights) a config implies. */
export function expectedTensors(c: ModelConfig): Map<string, number[]> {
  const shapes = new Map<string, number[]>();
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKVHeads * c.headDim;
  shapes.set('model.embed_tokens.weight', [c.vocabSize, H]);
  for (let i = 0; i < c.numLayers; i++) {
    const p = `model.layers.${i}`;
    shapes.set(`${p}.input_layernorm.weight`, [H]);
    shapes.set(`${p}.self_attn.q_proj.weight`, [q, H]);
    shapes.set(`${p}.self_attn.k_proj.weight`, [kv, H]);
    shapes.set(`${p}.self_attn.v_proj.weight`, [kv, H]);
    shapes.set(`${p}.self_attn.o_proj.weight`, [H, q]);
    if (c.qkvBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [q]);
      shapes.set(`${p}.self_attn.k_proj.bias`, [kv]);
      shapes.set(`${p}.self_attn.v_proj.bias`, [kv]);
    }
    if (c.outputBias) shapes.set(`${p}.self_attn.o_proj.bias`, [H]);
    shapes.set(`${p}.post_attention_layernorm.weight`, [H]);
    shapes.set(`${p}.mlp.gate_proj.weight`, [c.intermediateSize, H]);
    shapes.set(`${p}.mlp.up_proj.weight`, [c.intermediateSize, H]);
    shapes.set(`${p}.mlp.down_proj.weight`, [H, c.intermediateSize]);
    if (c.mlpBias) {
      shapes.set(`${p}.mlp.gate_proj.bias`, [c.intermediateSize]);
      shapes.set(`${p}.mlp.up_proj.bias`, [c.intermediateSize]);
      shapes.set(`${p}.mlp.down_proj.bias`, [H]);
    }
  }
  shapes.set('model.norm.weight', [H]);
  if (!c.tieWordEmbeddings) shapes.set('lm_head.weight', [c.vocabSize, H]);
  return shapes;
}

/** The sizes of a small Llama for a task's own tokenizer (the examples' base policies). */
export interface SmallLlamaSizes {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  maxPositions: number;
}

/**
 * An HF config.json object for a small Llama over `tokenizer`: tied embeddings, an MLP of about
 * 8/3 of the hidden size (a multiple of 16), and the tokenizer's bos, eos and pad ids.
 */
export function smallLlamaConfig(tokenizer: TextTokenizer, sizes: SmallLlamaSizes): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    vocab_size: tokenizer.vocabSize,
    hidden_size: sizes.hidden,
    intermediate_size: Math.round((sizes.hidden * 8) / 3 / 16) * 16,
    num_hidden_layers: sizes.layers,
    num_attention_heads: sizes.heads,
    num_key_value_heads: sizes.kvHeads,
    max_position_embeddings: sizes.maxPositions,
    rms_norm_eps: 1e-5,
    rope_theta: 10000,
    tie_word_embeddings: true,
    bos_token_id: tokenizer.tokenId(tokenizer.bosToken),
    eos_token_id: tokenizer.eosTokenId,
    pad_token_id: tokenizer.padTokenId,
  };
}

/** Of the 4 GiB wasm heap, what weights may take: the rest is activations, gradients and AdamW's moments. */
export const WASM_HEAP_BUDGET = 3 * 2 ** 30;

/**
 * Whether `copies` float32 copies of a model of this config fit the wasm heap's budget for weights:
 * undefined when they do, else the GiB they would take (for a message that says what fits instead).
 */
export function heapOverflowGiB(c: ModelConfig, copies: number): number | undefined {
  const bytes = [...expectedTensors(c).values()].reduce((n, shape) => n + 4 * shape.reduce((a, b) => a * b, 1), 0);
  return bytes * copies > WASM_HEAP_BUDGET ? (bytes * copies) / 2 ** 30 : undefined;
}
