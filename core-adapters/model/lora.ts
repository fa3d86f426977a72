// LoRA adapters (Hu et al. 2021) as PEFT defines them: a frozen linear W gains scale * B A, with
// A [r, in] Kaiming-uniform and B [out, r] zero at the start, so step 0 is exactly the base, and
// scale = alpha / r (alpha / sqrt(r) with rsLoRA). Here A and B are kept transposed, A [in, r] and
// B [r, out], like every weight of the model, so the extra products are untransposed:
// y = x W + ((x A) * scale) B. Files are PEFT's: adapter_config.json and adapter_model.safetensors
// with tensors base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r].
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { Rng } from '../random.js';
import { uniqueVariableName } from './variables.js';
import type { ModelConfig } from './config.js';
import type { HostTensor } from './layout.js';
import { checkFiniteWeights, readTensors, writeSafetensors } from './safetensors.js';
import { OPERATOR_FILES, readJsonFile, type FileAccess } from './files.js';
import { readAllFloat32, readFloat32 } from '../engine/readback.js';

/** The linear modules of a decoder layer that can carry an adapter (PEFT's all-linear: every one). */
export const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
/** One of LORA_MODULES. */
export type LoraModule = (typeof LORA_MODULES)[number];

/** PEFT's file names in an adapter directory. */
export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
const PEFT_PREFIX = 'base_model.model.';

/** Rank, alpha and targets of a LoRA; scale = alpha / r (alpha / sqrt(r) with rsLoRA). */
export interface LoraSettings {
  rank: number;
  alpha: number;
  targetModules: LoraModule[];
  rsLora?: boolean;
}

/** The scale applied to B A. */
export function loraScale(s: LoraSettings): number {
  return s.rsLora ? s.alpha / Math.sqrt(s.rank) : s.alpha / s.rank;
}

/** 'all-linear', one module name, or a list of them, checked; `where` names the key or file. */
export function parseTargetModules(value: unknown, where: string): LoraModule[] {
  if (value === 'all-linear') return [...LORA_MODULES];
  const names = typeof value === 'string' ? [value] : value;
  if (!Array.isArray(names) || names.length === 0 || names.some((n) => typeof n !== 'string')) {
    throw new InputError(`${where}: target_modules must be 'all-linear' or a list among ${LORA_MODULES.join(', ')}; got ${JSON.stringify(value)}`);
  }
  for (const n of names) {
    if (!(LORA_MODULES as readonly string[]).includes(n)) {
      throw new InputError(`${where}: target module '${n}' is unknown; choose 'all-linear' or among ${LORA_MODULES.join(', ')}`);
    }
  }
  return LORA_MODULES.filter((m) => names.includes(m));
}

const MLP_MODULES: readonly LoraModule[] = ['gate_proj', 'up_proj', 'down_proj'];

/** The module's HF path, e.g. model.layers.0.self_attn.q_proj. */
function modulePath(layer: number, module: LoraModule): string {
  return `model.layers.${layer}.${MLP_MODULES.includes(module) ? 'mlp' : 'self_attn'}.${module}`;
}

/** [in, out] of a target module under a model config. */
export function moduleShape(c: ModelConfig, module: LoraModule): [number, number] {
  const H = c.hiddenSize;
  const q = c.numHeads * c.headDim;
  const kv = c.numKVHeads * c.headDim;
  const shapes: Record<LoraModule, [number, number]> = {
    q_proj: [H, q],
    k_proj: [H, kv],
    v_proj: [H, kv],
    o_proj: [q, H],
    gate_proj: [H, c.intermediateSize],
    up_proj: [H, c.intermediateSize],
    down_proj: [c.intermediateSize, H],
  };
  return shapes[module];
}

/** One adapter's factors in the model's layout: A [in, r], B [r, out]. */
export interface LoraPair {
  A: tf.Variable;
  B: tf.Variable;
}

/** The adapters of a model: trainable A and B per targeted module and layer, switchable off. */
export class LoraAdapters {
  /** Trainable variables by name, `<module path>.lora_A` / `.lora_B` (the model's layout). */
  readonly params = new Map<string, tf.Variable>();
  readonly scale: number;
  /** Off: the model computes the base alone (the reference policy). */
  enabled = true;

  constructor(
    readonly config: ModelConfig,
    readonly settings: LoraSettings,
    init: (name: string, shape: [number, number]) => Float32Array,
  ) {
    this.scale = loraScale(settings);
    for (let layer = 0; layer < config.numLayers; layer++) {
      for (const module of settings.targetModules) {
        const [inputs, outputs] = moduleShape(config, module);
        const base = modulePath(layer, module);
        for (const [suffix, shape] of [
          ['lora_A', [inputs, settings.rank]],
          ['lora_B', [settings.rank, outputs]],
        ] as const) {
          const name = `${base}.${suffix}`;
          const value = tf.tensor2d(init(name, [...shape]), [...shape]);
          this.params.set(name, tf.variable(value, true, uniqueVariableName(name)));
          value.dispose();
        }
      }
    }
  }

  /** The factors on `module` of `layer` while adapters are on; undefined otherwise. */
  pair(layer: number, module: LoraModule): LoraPair | undefined {
    if (!this.enabled) return undefined;
    const base = modulePath(layer, module);
    const A = this.params.get(`${base}.lora_A`);
    return A ? { A, B: this.params.get(`${base}.lora_B`)! } : undefined;
  }

  /** x[N, in] -> ((x A) * scale) B, [N, out], for `module` of `layer`; undefined when it has no adapter. */
  delta(layer: number, module: LoraModule, x: tf.Tensor2D): tf.Tensor2D | undefined {
    const p = this.pair(layer, module);
    if (!p) return undefined;
    return tf.matMul(tf.mul(tf.matMul(x, p.A), this.scale), p.B) as tf.Tensor2D;
  }

  /** Runs fn with the adapters off (the base model), restoring their state after (after it settles, when fn is async). */
  withoutAdapters<T>(fn: () => T): T {
    const was = this.enabled;
    this.enabled = false;
    let result: T;
    try {
      result = fn();
    } catch (e) {
      this.enabled = was;
      throw e;
    }
    if (result instanceof Promise) return result.finally(() => (this.enabled = was)) as T;
    this.enabled = was;
    return result;
  }

  /** PEFT tensors: names under base_model.model., A [r, in], B [out, r]. */
  async toPeft(): Promise<Map<string, HostTensor>> {
    const out = new Map<string, HostTensor>();
    for (const [name, v] of this.params) {
      const [rows, cols] = v.shape as [number, number];
      const data = await readFloat32(v, `the LoRA factor ${name}`);
      const t = new Float32Array(data.length);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) t[c * rows + r] = data[r * cols + c];
      out.set(`${PEFT_PREFIX}${name}.weight`, { shape: [cols, rows], data: t });
    }
    return out;
  }

  /** Overwrites the factors from PEFT tensors (as toPeft writes them); `file` names errors. */
  assignPeft(tensors: Map<string, HostTensor>, file: string): void {
    for (const [name, variable] of this.params) {
      const peftName = `${PEFT_PREFIX}${name}.weight`;
      const t = tensors.get(peftName);
      if (!t) throw new InputError(`${file}: tensor '${peftName}' is missing`);
      const [rows, cols] = variable.shape as [number, number];
      if (t.shape.length !== 2 || t.shape[0] !== cols || t.shape[1] !== rows) {
        throw new InputError(`${file}: tensor '${peftName}' has shape [${t.shape}]; this model needs [${cols},${rows}]`);
      }
      const data = new Float32Array(t.data.length);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) data[r * cols + c] = t.data[c * rows + r];
      tf.tidy(() => variable.assign(tf.tensor2d(data, [rows, cols])));
    }
  }

  /**
   * scale * B A per adapted HF weight, in HF's [out, in] layout (to add to the base for a merged
   * model), as float64 sums rounded once.
   */
  async mergedDeltas(): Promise<Map<string, HostTensor>> {
    const out = new Map<string, HostTensor>();
    for (let layer = 0; layer < this.config.numLayers; layer++) {
      for (const module of this.settings.targetModules) {
        const base = modulePath(layer, module);
        const [A, B] = await readAllFloat32([this.params.get(`${base}.lora_A`)!, this.params.get(`${base}.lora_B`)!], `the LoRA factors of ${base}`);
        const [inputs, outputs] = moduleShape(this.config, module);
        const r = this.settings.rank;
        const delta = new Float32Array(outputs * inputs);
        for (let o = 0; o < outputs; o++) {
          for (let i = 0; i < inputs; i++) {
            let sum = 0;
            for (let k = 0; k < r; k++) sum += A[i * r + k] * B[k * outputs + o];
            delta[o * inputs + i] = this.scale * sum;
          }
        }
        out.set(`${base}.weight`, { shape: [outputs, inputs], data: delta });
      }
    }
    return out;
  }

  dispose(): void {
    tf.dispose([...this.params.values()]);
    this.params.clear();
  }
}

/**
 * PEFT's initialisation: A Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)),
 * B zero. The stream is seeded, so every data-parallel replica starts from the same A.
 */
export function peftInitializer(seed: number): (name: string, shape: [number, number]) => Float32Array {
  const rng = new Rng(seed);
  return (name, [rows, cols]) => {
    const data = new Float32Array(rows * cols);
    if (name.endsWith('lora_B')) return data;
    const bound = 1 / Math.sqrt(rows);
    for (let i = 0; i < data.length; i++) data[i] = (2 * rng.next() - 1) * bound;
    return data;
  };
}

/** adapter_config.json read and checked against what this engine supports. */
export interface AdapterFiles {
  settings: LoraSettings;
  /** base_model_name_or_path, when the file names one. */
  baseModel?: string;
  tensors: Map<string, HostTensor>;
  weightsFile: string;
}

/** Reads a PEFT LoRA directory; every problem names the file (and tensor). */
export function readAdapter(dir: string, access: FileAccess = OPERATOR_FILES): AdapterFiles {
  const weightsFile = path.join(dir, ADAPTER_WEIGHTS_FILE);
  const { settings, baseModel } = readAdapterConfig(dir, access);
  if (!fs.lstatSync(weightsFile, { throwIfNoEntry: false })) throw new InputError(`${dir}: no ${ADAPTER_WEIGHTS_FILE}`);
  const tensors = readTensors(weightsFile, undefined, access);
  checkFiniteWeights(weightsFile, tensors);
  return { settings, baseModel, tensors, weightsFile };
}

/** adapter_config.json, checked: LoRA settings and the base it names. */
function readAdapterConfig(dir: string, access: FileAccess = OPERATOR_FILES): { settings: LoraSettings; baseModel?: string } {
  const configFile = path.join(dir, ADAPTER_CONFIG_FILE);
  if (!fs.lstatSync(configFile, { throwIfNoEntry: false })) throw new InputError(`${dir}: no ${ADAPTER_CONFIG_FILE}; is this a PEFT LoRA adapter directory?`);
  const raw = readJsonFile(configFile, access) as Record<string, unknown>;
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new InputError(`${configFile}: must hold a JSON object`);
  if (raw.peft_type !== undefined && raw.peft_type !== 'LORA') throw new InputError(`${configFile}: key 'peft_type' is ${JSON.stringify(raw.peft_type)}; only LORA is supported`);
  const rank = raw.r;
  if (typeof rank !== 'number' || !Number.isInteger(rank) || rank <= 0) throw new InputError(`${configFile}: key 'r' must be a positive integer; got ${JSON.stringify(rank)}`);
  const alpha = raw.lora_alpha ?? 8;
  if (typeof alpha !== 'number' || !(alpha > 0)) throw new InputError(`${configFile}: key 'lora_alpha' must be a positive number; got ${JSON.stringify(alpha)}`);
  for (const [key, ok] of [
    ['use_dora', (v: unknown) => v == null || v === false],
    ['bias', (v: unknown) => v == null || v === 'none'],
    ['modules_to_save', (v: unknown) => v == null || (Array.isArray(v) && v.length === 0)],
    ['fan_in_fan_out', (v: unknown) => v == null || v === false],
    ['rank_pattern', (v: unknown) => v == null || (typeof v === 'object' && Object.keys(v as object).length === 0)],
    ['alpha_pattern', (v: unknown) => v == null || (typeof v === 'object' && Object.keys(v as object).length === 0)],
    ['layers_to_transform', (v: unknown) => v == null],
  ] as const) {
    if (!ok(raw[key])) throw new InputError(`${configFile}: key '${key}' is ${JSON.stringify(raw[key])}; this engine supports plain LoRA only`);
  }
  const settings: LoraSettings = { rank, alpha, targetModules: parseTargetModules(raw.target_modules, `${configFile}: key 'target_modules'`), rsLora: raw.use_rslora === true };
  const baseModel = typeof raw.base_model_name_or_path === 'string' && raw.base_model_name_or_path ? raw.base_model_name_or_path : undefined;
  return { settings, baseModel };
}

/**
 * Checks that an adapter's tensors are exactly those of `settings` on `config`: every name known,
 * every shape right. The message names the file and tensor.
 */
export function checkAdapterTensors(files: AdapterFiles, config: ModelConfig): void {
  const { settings, tensors, weightsFile } = files;
  const expected = new Map<string, number[]>();
  for (let layer = 0; layer < config.numLayers; layer++) {
    for (const module of settings.targetModules) {
      const [inputs, outputs] = moduleShape(config, module);
      expected.set(`${PEFT_PREFIX}${modulePath(layer, module)}.lora_A.weight`, [settings.rank, inputs]);
      expected.set(`${PEFT_PREFIX}${modulePath(layer, module)}.lora_B.weight`, [outputs, settings.rank]);
    }
  }
  for (const [name, t] of tensors) {
    const want = expected.get(name);
    if (!want) throw new InputError(`${weightsFile}: tensor '${name}' does not belong to a ${settings.targetModules.join('/')} adapter of this ${config.numLayers}-layer model`);
    if (t.shape.length !== 2 || t.shape[0] !== want[0] || t.shape[1] !== want[1]) {
      throw new InputError(`${weightsFile}: tensor '${name}' has shape [${t.shape}]; the base model needs [${want}]`);
    }
  }
  for (const name of expected.keys()) if (!tensors.has(name)) throw new InputError(`${weightsFile}: tensor '${name}' is missing`);
}

/** Writes a PEFT directory (atomically by the caller's choice of directory) for these adapters. */
export async function writeAdapterFiles(dir: string, adapters: LoraAdapters, baseModel?: string): Promise<void> {
  const tensors = await adapters.toPeft();
  const s = adapters.settings;
  const config = {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: baseModel ?? null,
    r: s.rank,
    lora_alpha: s.alpha,
    target_modules: [...s.targetModules],
    lora_dropout: 0,
    bias: 'none',
    fan_in_fan_out: false,
    use_rslora: s.rsLora === true,
    use_dora: false,
    modules_to_save: null,
    init_lora_weights: true,
    inference_mode: true,
  };
  fs.writeFileSync(path.join(dir, ADAPTER_CONFIG_FILE), JSON.stringify(config, null, 2) + '\n');
  writeSafetensors(path.join(dir, ADAPTER_WEIGHTS_FILE), tensors, { format: 'pt' });
}

/** Whether a directory holds a PEFT adapter. */
export function isAdapterDir(dir: string): boolean {
  return fs.lstatSync(path.join(dir, ADAPTER_CONFIG_FILE), { throwIfNoEntry: false }) !== undefined;
}

/** Fresh adapters with PEFT's initialisation, seeded. */
export function createAdapters(config: ModelConfig, settings: LoraSettings, seed: number): LoraAdapters {
  return new LoraAdapters(config, settings, peftInitializer(seed));
}

/**
 * Adapters read from a PEFT directory for a model of `config`, after checking every tensor
 * against it; the message names the file and tensor.
 */
export function loadAdapters(config: ModelConfig, dir: string, access: FileAccess = OPERATOR_FILES): LoraAdapters {
  const files = readAdapter(dir, access);
  checkAdapterTensors(files, config);
  const adapters = createAdapters(config, files.settings, 0);
  adapters.assignPeft(files.tensors, files.weightsFile);
  return adapters;
}

/**
 * Restores adapters from a checkpoint's PEFT files; the saved rank and targets must be these
 * adapters' (the message names the file).
 */
export function loadAdapterCheckpoint(adapters: LoraAdapters, dir: string): void {
  const files = readAdapter(dir);
  const saved = files.settings;
  const want = adapters.settings;
  if (saved.rank !== want.rank || saved.targetModules.join() !== want.targetModules.join()) {
    throw new InputError(`${path.join(dir, ADAPTER_CONFIG_FILE)}: adapter r ${saved.rank} on ${saved.targetModules.join(', ')}; this run has r ${want.rank} on ${want.targetModules.join(', ')}`);
  }
  checkAdapterTensors(files, adapters.config);
  adapters.assignPeft(files.tensors, files.weightsFile);
}

/**
 * The base model directory an adapter names (base_model_name_or_path, relative to the adapter
 * directory when relative); the message says what is wrong.
 */
export function adapterBase(dir: string): string {
  const configFile = path.join(dir, ADAPTER_CONFIG_FILE);
  const { baseModel } = readAdapterConfig(dir);
  if (!baseModel) throw new InputError(`${configFile}: key 'base_model_name_or_path' is not set; the base model is needed to merge`);
  const base = path.resolve(dir, baseModel);
  if (!fs.existsSync(path.join(base, 'config.json'))) throw new InputError(`${configFile}: key 'base_model_name_or_path' is '${baseModel}', which is not a model directory here`);
  return base;
}
