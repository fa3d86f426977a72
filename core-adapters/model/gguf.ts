// A Hugging Face Llama or Qwen2 directory as one GGUF file, the format llama.cpp, Ollama and LM
// Studio load. Checked against llama.cpp as node-llama-cpp 3.21.1 bundles it (llama.cpp.info.json:
// ggml-org/llama.cpp, tag v0.4.0): gguf-py/gguf/constants.py and gguf_writer.py for the layout,
// keys and names, src/models/llama.cpp and qwen2.cpp for what the loader requires,
// conversion/llama.py for the rotary permutation, src/llama-vocab.cpp for the tokenizer keys.
import fs from 'node:fs';
import path from 'node:path';
import { toBfloat16 } from '../engine/frozen.js';
import { InputError } from '../errors.js';
import { readWeights } from './checkpoint.js';
import { readModelConfig, type ModelConfig } from './config.js';
import { readJsonFile } from './files.js';

export const GGUF_DTYPES = ['float32', 'bfloat16'] as const;
export type GgufDtype = (typeof GGUF_DTYPES)[number];

const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian uint32
const GGUF_VERSION = 3;
const ALIGNMENT = 32;
// gguf-py's GGUFValueType and GGMLQuantizationType.
const enum ValueType { UINT32 = 4, INT32 = 5, FLOAT32 = 6, STRING = 8, ARRAY = 9 }
const enum TensorType { F32 = 0, BF16 = 30 }
// LlamaFileType: ALL_F32 0, MOSTLY_BF16 32 (1-D tensors stay float32, as convert_hf_to_gguf writes them).
const FILE_TYPE: Record<GgufDtype, number> = { float32: 0, bfloat16: 32 };
// gguf-py's TokenType.
const TOKEN_NORMAL = 1;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;
const TOKEN_UNUSED = 5;

type Value = { type: ValueType.UINT32 | ValueType.INT32 | ValueType.FLOAT32; value: number } | { type: ValueType.STRING; value: string } | { type: ValueType.ARRAY; items: ValueType.STRING | ValueType.INT32; values: (string | number)[] };

const u32 = (value: number): Value => ({ type: ValueType.UINT32, value });
const f32 = (value: number): Value => ({ type: ValueType.FLOAT32, value });
const str = (value: string): Value => ({ type: ValueType.STRING, value });

/** Little-endian bytes, grown as they are written. */
class Bytes {
  private chunks: Buffer[] = [];
  length = 0;
  private push(b: Buffer): void {
    this.chunks.push(b);
    this.length += b.length;
  }
  private fixed(size: number, write: (b: Buffer) => unknown): void {
    const b = Buffer.alloc(size);
    write(b);
    this.push(b);
  }
  u32(v: number): void {
    this.fixed(4, (b) => b.writeUInt32LE(v));
  }
  i32(v: number): void {
    this.fixed(4, (b) => b.writeInt32LE(v));
  }
  u64(v: number): void {
    this.fixed(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  }
  f32(v: number): void {
    this.fixed(4, (b) => b.writeFloatLE(v));
  }
  string(s: string): void {
    const b = Buffer.from(s, 'utf8');
    this.u64(b.length);
    this.push(b);
  }
  zeros(n: number): void {
    this.push(Buffer.alloc(n));
  }
  value(v: Value): void {
    this.u32(v.type);
    if ('items' in v) {
      this.u32(v.items);
      this.u64(v.values.length);
      for (const item of v.values) if (v.items === ValueType.STRING) this.string(item as string);
      else this.i32(item as number);
    } else if (v.type === ValueType.STRING) this.string(v.value);
    else if (v.type === ValueType.FLOAT32) this.f32(v.value);
    else if (v.type === ValueType.INT32) this.i32(v.value);
    else this.u32(v.value);
  }
  buffer(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

const padTo = (n: number, align: number) => (align - (n % align)) % align;

/** GGUF's architecture name for a config, with what llama.cpp's loader of it needs. */
export function ggufArchitecture(config: ModelConfig, configFile: string): 'llama' | 'qwen2' {
  const arch = config.modelType === 'qwen2' ? 'qwen2' : 'llama';
  // llama.cpp reads llama3's scaling from a rope_freqs tensor its llama graph loads and its qwen2 graph does not.
  if (arch === 'qwen2' && config.ropeScaling?.type === 'llama3') throw new InputError(`${configFile}: rope_scaling llama3 on a Qwen2 model cannot be written to GGUF (llama.cpp's qwen2 graph reads no rope_freqs tensor); export the Hugging Face directory instead`);
  return arch;
}

/**
 * Llama 3's rotary scaling as llama.cpp takes it (conversion/llama.py): one divisor per frequency,
 * 1 for short wavelengths, `factor` for long ones, interpolated between; HF scales the inverse
 * frequencies by the same amounts.
 */
function llama3RopeFactors(config: ModelConfig): Float32Array {
  const rs = config.ropeScaling!;
  const half = config.headDim / 2;
  const lowWavelen = rs.originalMaxPositions / rs.lowFreqFactor;
  const highWavelen = rs.originalMaxPositions / rs.highFreqFactor;
  return Float32Array.from({ length: half }, (_, i) => {
    const wavelen = (2 * Math.PI) / (1 / config.ropeTheta ** ((2 * i) / config.headDim));
    if (wavelen < highWavelen) return 1;
    if (wavelen > lowWavelen) return rs.factor;
    const smooth = (rs.originalMaxPositions / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
    return 1 / ((1 - smooth) / rs.factor + smooth);
  });
}

/**
 * HF's rotary layout (the two halves of each head rotated together) to llama.cpp's LLAMA layout
 * (adjacent pairs): within each head, row r of the first half goes to 2r, of the second to 2r + 1.
 * Qwen2 runs llama.cpp's NEOX rotary, which is HF's layout, and is not permuted.
 */
function interleaveRotaryRows(values: Float32Array, heads: number, headDim: number, cols: number): Float32Array {
  const out = new Float32Array(values.length);
  const half = headDim / 2;
  for (let h = 0; h < heads; h++) {
    for (let r = 0; r < half; r++) {
      for (const [from, to] of [[r, 2 * r], [half + r, 2 * r + 1]]) {
        const src = (h * headDim + from) * cols;
        out.set(values.subarray(src, src + cols), (h * headDim + to) * cols);
      }
    }
  }
  return out;
}

/** The tokenizer keys for a byte-level BPE tokenizer.json (tokens padded to the embedding's rows, as convert_hf_to_gguf pads them). */
function tokenizerValues(dir: string, config: ModelConfig, arch: 'llama' | 'qwen2', label: string): [string, Value][] {
  const file = path.join(dir, 'tokenizer.json');
  // Messages name the file the user has (`dir` may be a staging copy).
  const shown = path.join(label, 'tokenizer.json');
  if (!fs.existsSync(file)) throw new InputError(`${label}: no tokenizer.json (GGUF carries the tokenizer; only Hugging Face fast tokenizers are read)`);
  let json: {
    model?: { type?: string; vocab?: Record<string, unknown>; merges?: unknown[]; byte_fallback?: boolean };
    added_tokens?: { id?: unknown; content?: unknown; special?: boolean }[];
    pre_tokenizer?: unknown;
    normalizer?: unknown;
    decoder?: unknown;
  };
  try {
    json = readJsonFile(file) as typeof json;
  } catch (e) {
    throw e instanceof InputError ? new InputError(e.message.replace(file, shown)) : e;
  }
  if (json?.model?.type !== 'BPE' || typeof json.model.vocab !== 'object' || json.model.vocab === null) throw new InputError(`${shown}: model.type is ${JSON.stringify(json?.model?.type)}; GGUF export writes BPE tokenizers (llama.cpp's "gpt2" type) only`);
  // Llama 2's kind (byte fallback, "▁" for spaces) is llama.cpp's "llama" type, which needs SentencePiece's scores.
  if (json.model.byte_fallback === true || /"Metaspace"/.test(JSON.stringify([json.pre_tokenizer ?? null, json.normalizer ?? null, json.decoder ?? null]))) {
    throw new InputError(`${shown}: a SentencePiece-style tokenizer (byte_fallback or Metaspace), llama.cpp's "llama" type, which GGUF export does not write yet (only byte-level BPE); export the Hugging Face directory and convert it with llama.cpp's convert_hf_to_gguf.py`);
  }
  const isId = (id: unknown): id is number => Number.isInteger(id) && (id as number) >= 0;
  const tokens = new Array<string | undefined>(config.vocabSize);
  const types = new Array<number>(config.vocabSize).fill(TOKEN_NORMAL);
  for (const [token, id] of Object.entries(json.model.vocab)) {
    if (!isId(id)) throw new InputError(`${shown}: model.vocab[${JSON.stringify(token)}] is ${JSON.stringify(id)}; ids are whole numbers >= 0`);
    if (id < config.vocabSize) tokens[id] = token;
  }
  for (const added of json.added_tokens ?? []) {
    if (!isId(added?.id) || typeof added.content !== 'string') throw new InputError(`${shown}: an added_tokens entry needs a whole-number id and a string content`);
    if (added.id >= config.vocabSize) throw new InputError(`${shown}: added token ${JSON.stringify(added.content)} has id ${added.id}, past the model's vocab_size ${config.vocabSize}`);
    tokens[added.id] = added.content;
    types[added.id] = added.special ? TOKEN_CONTROL : TOKEN_USER_DEFINED;
  }
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i] === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = TOKEN_UNUSED;
    }
  }
  const merges = (Array.isArray(json.model.merges) ? json.model.merges : []).map((m, i) => {
    if (typeof m === 'string') return m;
    if (Array.isArray(m) && m.length === 2 && m.every((part) => typeof part === 'string')) return m.join(' ');
    throw new InputError(`${shown}: model.merges[${i}] is neither "a b" nor ["a", "b"]`);
  });
  // The pre-tokenizer's name: Qwen2's own; a Llama with a split pattern is Llama 3's; else the default.
  const pre = arch === 'qwen2' ? 'qwen2' : json.pre_tokenizer ? 'llama-bpe' : 'default';
  const values: [string, Value][] = [
    ['tokenizer.ggml.model', str('gpt2')],
    ['tokenizer.ggml.pre', str(pre)],
    ['tokenizer.ggml.tokens', { type: ValueType.ARRAY, items: ValueType.STRING, values: tokens as string[] }],
    ['tokenizer.ggml.token_type', { type: ValueType.ARRAY, items: ValueType.INT32, values: types }],
    ['tokenizer.ggml.merges', { type: ValueType.ARRAY, items: ValueType.STRING, values: merges }],
  ];
  if (config.bosTokenId !== undefined) values.push(['tokenizer.ggml.bos_token_id', u32(config.bosTokenId)]);
  if (config.eosTokenIds.length) values.push(['tokenizer.ggml.eos_token_id', u32(config.eosTokenIds[0])]);
  if (config.padTokenId !== undefined) values.push(['tokenizer.ggml.padding_token_id', u32(config.padTokenId)]);
  return values;
}

/** GGUF's tensor name for an HF one (gguf-py's TENSOR_NAMES for LLAMA and QWEN2). */
function ggufTensorName(hfName: string): string {
  const fixed: Record<string, string> = { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight', 'lm_head.weight': 'output.weight', 'rope_freqs.weight': 'rope_freqs.weight' };
  if (fixed[hfName]) return fixed[hfName];
  const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hfName);
  const parts: Record<string, string> = {
    input_layernorm: 'attn_norm',
    'self_attn.q_proj': 'attn_q',
    'self_attn.k_proj': 'attn_k',
    'self_attn.v_proj': 'attn_v',
    'self_attn.o_proj': 'attn_output',
    post_attention_layernorm: 'ffn_norm',
    'mlp.gate_proj': 'ffn_gate',
    'mlp.up_proj': 'ffn_up',
    'mlp.down_proj': 'ffn_down',
  };
  if (!m || !parts[m[2]]) throw new Error(`no GGUF name for tensor '${hfName}'`);
  return `blk.${m[1]}.${parts[m[2]]}.${m[3]}`;
}

/**
 * The 256 byte-level tokens of GPT-2's BPE (each byte as the printable character its tokenizer
 * maps it to), the rest padding: a tokenizer for models with random weights (benchmarks), where
 * only token ids matter.
 */
export function byteLevelTokenizerValues(config: ModelConfig, arch: 'llama' | 'qwen2'): [string, Value][] {
  const printable = (b: number) => (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  const tokens: string[] = [];
  const types: number[] = [];
  let shifted = 0;
  for (let b = 0; b < 256 && b < config.vocabSize; b++) {
    tokens.push(String.fromCodePoint(printable(b) ? b : 256 + shifted++));
    types.push(TOKEN_NORMAL);
  }
  for (let i = tokens.length; i < config.vocabSize; i++) {
    tokens.push(`[PAD${i}]`);
    types.push(TOKEN_UNUSED);
  }
  return [
    ['tokenizer.ggml.model', str('gpt2')],
    ['tokenizer.ggml.pre', str(arch === 'qwen2' ? 'qwen2' : 'default')],
    ['tokenizer.ggml.tokens', { type: ValueType.ARRAY, items: ValueType.STRING, values: tokens }],
    ['tokenizer.ggml.token_type', { type: ValueType.ARRAY, items: ValueType.INT32, values: types }],
    ['tokenizer.ggml.merges', { type: ValueType.ARRAY, items: ValueType.STRING, values: [] }],
  ];
}

/**
 * Writes `dir` (config.json, the safetensors weights, tokenizer.json) as one GGUF file at `outFile`,
 * 2-D weights in `dtype`, norms and biases in float32. The file appears whole or not at all.
 * Messages name `label` (the directory the user gave, when `dir` is a staging copy).
 */
export function writeGguf(dir: string, outFile: string, dtype: GgufDtype, label = dir): { tensors: number; bytes: number; arch: string } {
  const config = readModelConfig(path.join(dir, 'config.json'));
  const arch = ggufArchitecture(config, path.join(label, 'config.json'));
  return writeGgufWeights(outFile, { config, weights: readWeights(dir, config), tokenizer: tokenizerValues(dir, config, arch, label), name: path.basename(path.resolve(label)), dtype });
}

/** One GGUF file from a config and HF-named weights in memory, with the tokenizer keys given. */
export function writeGgufWeights(
  outFile: string,
  { config, weights, tokenizer, name, dtype }: { config: ModelConfig; weights: Map<string, { shape: number[]; data: Float32Array }>; tokenizer: [string, Value][]; name: string; dtype: GgufDtype },
): { tensors: number; bytes: number; arch: string } {
  const arch = ggufArchitecture(config, name);
  const metadata: [string, Value][] = [
    ['general.architecture', str(arch)],
    ['general.name', str(name)],
    ['general.file_type', u32(FILE_TYPE[dtype])],
    ['general.alignment', u32(ALIGNMENT)],
    [`${arch}.vocab_size`, u32(config.vocabSize)],
    [`${arch}.context_length`, u32(config.maxPositions)],
    [`${arch}.embedding_length`, u32(config.hiddenSize)],
    [`${arch}.block_count`, u32(config.numLayers)],
    [`${arch}.feed_forward_length`, u32(config.intermediateSize)],
    [`${arch}.attention.head_count`, u32(config.numHeads)],
    [`${arch}.attention.head_count_kv`, u32(config.numKVHeads)],
    [`${arch}.attention.layer_norm_rms_epsilon`, f32(config.rmsNormEps)],
    [`${arch}.rope.freq_base`, f32(config.ropeTheta)],
    [`${arch}.rope.dimension_count`, u32(config.headDim)],
    ...(config.headDim * config.numHeads !== config.hiddenSize
      ? ([[`${arch}.attention.key_length`, u32(config.headDim)], [`${arch}.attention.value_length`, u32(config.headDim)]] as [string, Value][])
      : []),
    ...(config.ropeScaling?.type === 'linear' ? ([[`${arch}.rope.scaling.type`, str('linear')], [`${arch}.rope.scaling.factor`, f32(config.ropeScaling.factor)]] as [string, Value][]) : []),
    ...tokenizer,
  ];

  // Each tensor as it goes into the file: GGUF's name, dims fastest first (HF's shape reversed), and
  // its bytes, made one tensor at a time while writing (a model's converted copy never whole in memory).
  const named = [...weights];
  if (config.ropeScaling?.type === 'llama3') {
    const factors = llama3RopeFactors(config);
    named.push(['rope_freqs.weight', { shape: [factors.length], data: factors }]);
  }
  const tensors = named.map(([hfName, t]) => {
    const half = dtype === 'bfloat16' && t.shape.length === 2;
    return { hfName, t, half, name: ggufTensorName(hfName), dims: [...t.shape].reverse(), type: half ? TensorType.BF16 : TensorType.F32, size: t.data.length * (half ? 2 : 4) };
  });
  const bytesOf = ({ hfName, t, half }: (typeof tensors)[number]): Buffer => {
    let values = t.data;
    if (arch === 'llama' && /\.self_attn\.q_proj\.weight$/.test(hfName)) values = interleaveRotaryRows(values, config.numHeads, config.headDim, t.shape[1]);
    if (arch === 'llama' && /\.self_attn\.k_proj\.weight$/.test(hfName)) values = interleaveRotaryRows(values, config.numKVHeads, config.headDim, t.shape[1]);
    if (!half) return Buffer.from(values.buffer, values.byteOffset, values.byteLength);
    const bits = new Uint16Array(values.length);
    toBfloat16(values, bits);
    return Buffer.from(bits.buffer, bits.byteOffset, bits.byteLength);
  };

  const head = new Bytes();
  head.u32(GGUF_MAGIC);
  head.u32(GGUF_VERSION);
  head.u64(tensors.length);
  head.u64(metadata.length);
  for (const [key, value] of metadata) {
    head.string(key);
    head.value(value);
  }
  let offset = 0;
  for (const t of tensors) {
    head.string(t.name);
    head.u32(t.dims.length);
    for (const d of t.dims) head.u64(d);
    head.u32(t.type);
    head.u64(offset);
    offset += t.size + padTo(t.size, ALIGNMENT);
  }
  head.zeros(padTo(head.length, ALIGNMENT));

  const tmp = `${outFile}.tmp-${process.pid}`;
  fs.mkdirSync(path.dirname(path.resolve(outFile)), { recursive: true });
  try {
    const fd = fs.openSync(tmp, 'w');
    try {
      fs.writeSync(fd, head.buffer());
      for (const t of tensors) {
        fs.writeSync(fd, bytesOf(t));
        const pad = padTo(t.size, ALIGNMENT);
        if (pad) fs.writeSync(fd, Buffer.alloc(pad));
      }
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, outFile);
  } catch (error) {
    fs.rmSync(tmp, { force: true });
    throw error;
  }
  return { tensors: tensors.length, bytes: head.length + offset, arch };
}
