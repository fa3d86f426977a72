// Measures how far a bfloat16 copy of a model's weights moves its prompt log-probs from the float32
// model's, as the vLLM weight check compares them (mean |difference| over a probe's tokens, T = 1).
// The bf16 copy is the project's own bf16 path: the frozen base of core-adapters/engine/frozen.ts
// (weights rounded to nearest even, widened to float32 in the product, float32 accumulation) when the
// native addon is built, else the same rounding applied to a heap copy. Activations stay float32 in
// both, so this is the weight-rounding part of a bf16 engine's error (a bf16 engine also rounds its
// activations, which adds to it).
//   node --import tsx scripts/bf16-logprob-error.ts [--probes N] [--length L] DIR...
// A DIR of the form random:HIDDEN:LAYERS:VOCAB builds a Qwen2-shaped model with N(0, 0.02) weights
// (HF's initializer_range) and unit norms, saved to a temporary directory first.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import 'reflect-metadata';
import { initEngine } from '../core-adapters/engine/backend.js';
import { frozenBaseAvailable, toBfloat16 } from '../core-adapters/engine/frozen.js';
import { loadModel, modelFromWeights, readWeights } from '../core-adapters/model/checkpoint.js';
import { readModelConfig } from '../core-adapters/model/config.js';
import { responseLogProbs } from '../core-adapters/model/logprobs.js';
import { writeSafetensors } from '../core-adapters/model/safetensors.js';
import type { CausalLM } from '../core-adapters/model/causal-lm.js';

const { values, positionals } = parseArgs({ allowPositionals: true, options: { probes: { type: 'string', default: '16' }, length: { type: 'string', default: '32' }, seed: { type: 'string', default: '1' } } });
const probes = Number(values.probes);
const length = Number(values.length);

/** A deterministic generator of floats in [0, 1) (mulberry32). */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A Qwen2-shaped directory with N(0, 0.02) matrices and unit norms. */
function randomModel(hidden: number, layers: number, vocab: number): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bf16-probe-'));
  const heads = Math.max(1, hidden / 64);
  const kv = Math.max(1, heads / 7) | 0 || 1;
  const inter = Math.round((hidden * 8) / 3 / 64) * 64 || 4 * hidden;
  const config = { architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', vocab_size: vocab, hidden_size: hidden, intermediate_size: inter, num_hidden_layers: layers, num_attention_heads: heads, num_key_value_heads: kv, rms_norm_eps: 1e-6, rope_theta: 1e6, max_position_embeddings: 4096, tie_word_embeddings: true, hidden_act: 'silu', torch_dtype: 'float32', bos_token_id: 1, eos_token_id: 2 };
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  const rand = random(7);
  const normal = (n: number, std: number) => {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i += 2) {
      const r = Math.sqrt(-2 * Math.log(1 - rand()));
      const phi = 2 * Math.PI * rand();
      out[i] = r * Math.cos(phi) * std;
      if (i + 1 < n) out[i + 1] = r * Math.sin(phi) * std;
    }
    return out;
  };
  const hd = hidden / heads;
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  const add = (name: string, shape: number[], std: number | 'ones' | 'zeros') => tensors.set(name, { shape, data: std === 'ones' ? new Float32Array(shape.reduce((a, b) => a * b)).fill(1) : std === 'zeros' ? new Float32Array(shape.reduce((a, b) => a * b)) : normal(shape.reduce((a, b) => a * b), std) });
  add('model.embed_tokens.weight', [vocab, hidden], 0.02);
  add('model.norm.weight', [hidden], 'ones');
  for (let l = 0; l < layers; l++) {
    const p = `model.layers.${l}.`;
    add(p + 'input_layernorm.weight', [hidden], 'ones');
    add(p + 'post_attention_layernorm.weight', [hidden], 'ones');
    add(p + 'self_attn.q_proj.weight', [heads * hd, hidden], 0.02);
    add(p + 'self_attn.k_proj.weight', [kv * hd, hidden], 0.02);
    add(p + 'self_attn.v_proj.weight', [kv * hd, hidden], 0.02);
    add(p + 'self_attn.q_proj.bias', [heads * hd], 'zeros');
    add(p + 'self_attn.k_proj.bias', [kv * hd], 'zeros');
    add(p + 'self_attn.v_proj.bias', [kv * hd], 'zeros');
    add(p + 'self_attn.o_proj.weight', [hidden, heads * hd], 0.02);
    add(p + 'mlp.gate_proj.weight', [inter, hidden], 0.02);
    add(p + 'mlp.up_proj.weight', [inter, hidden], 0.02);
    add(p + 'mlp.down_proj.weight', [hidden, inter], 0.02);
  }
  writeSafetensors(path.join(dir, 'model.safetensors'), tensors);
  return dir;
}

/** The bf16 copy: the frozen bf16 base when the addon is there, else the same rounding on the heap. */
function bf16Copy(dir: string): { model: CausalLM; how: string } {
  if (frozenBaseAvailable()) return { model: loadModel(dir, { frozenBase: 'bfloat16' }), how: 'frozen bf16 base (native kernels)' };
  const config = readModelConfig(path.join(dir, 'config.json'));
  const weights = readWeights(dir, config);
  for (const [name, t] of weights) {
    if (name.endsWith('norm.weight') || name.endsWith('.bias')) continue;
    const bits = new Uint16Array(t.data.length);
    toBfloat16(t.data, bits);
    const widened = new Uint32Array(t.data.buffer, t.data.byteOffset, t.data.length);
    for (let i = 0; i < bits.length; i++) widened[i] = bits[i] << 16;
  }
  return { model: modelFromWeights(config, weights), how: 'bf16-rounded heap copy (no native addon)' };
}

await initEngine('auto', { quiet: true });
for (const spec of positionals) {
  const m = /^random:(\d+):(\d+):(\d+)$/.exec(spec);
  const dir = m ? randomModel(Number(m[1]), Number(m[2]), Number(m[3])) : path.resolve(spec);
  const f32 = loadModel(dir);
  const { model: bf16, how } = bf16Copy(dir);
  const V = f32.config.vocabSize;
  const rand = random(Number(values.seed));
  // Probes: sequences the float32 model itself finds likely would need sampling; uniform ids are
  // what a weight check of arbitrary prompts sees. Both are reported.
  const diffs: number[] = [];
  let maxDiff = 0;
  let meanLogProb = 0;
  for (let p = 0; p < probes; p++) {
    const ids = Array.from({ length }, () => Math.floor(rand() * V));
    const a = (await responseLogProbs(f32, [ids.slice(0, 1)], [ids.slice(1)], 1))[0];
    const b = (await responseLogProbs(bf16, [ids.slice(0, 1)], [ids.slice(1)], 1))[0];
    const d = a.reduce((s, v, i) => s + Math.abs(v - b[i]), 0) / a.length;
    diffs.push(d);
    maxDiff = Math.max(maxDiff, ...a.map((v, i) => Math.abs(v - b[i])));
    meanLogProb += a.reduce((s, v) => s + v, 0) / a.length / probes;
  }
  diffs.sort((x, y) => x - y);
  const mean = diffs.reduce((s, v) => s + v, 0) / diffs.length;
  const c = f32.config;
  console.log(
    JSON.stringify({
      model: m ? spec : path.relative(process.cwd(), dir),
      shape: `hidden ${c.hiddenSize}, ${c.numLayers} layers, vocab ${V}`,
      bf16: how,
      probes,
      tokens_per_probe: length - 1,
      mean_logprob_f32: +meanLogProb.toFixed(4),
      mean_abs_diff: +mean.toPrecision(3),
      p95_probe_mean: +diffs[Math.floor(0.95 * (diffs.length - 1))].toPrecision(3),
      max_probe_mean: +diffs.at(-1)!.toPrecision(3),
      max_token_diff: +maxDiff.toPrecision(3),
    }),
  );
  f32.dispose();
  bf16.dispose();
  if (m) fs.rmSync(dir, { recursive: true, force: true });
}
