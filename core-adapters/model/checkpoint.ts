// Hugging Face model directories: config.json + model.safetensors (or a sharded index) + tokenizer files.
import * as tf from '@tensorflow/tfjs-core';
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { Rng } from '../random.js';
import { CausalLM } from './causal-lm.js';
import type { FrozenDtype } from '../config/choices.js';
import { FrozenMatrix, type SharedFrozenMatrix } from '../engine/frozen.js';
import { frozenBaseMatrices, frozenBaseToHf, isFrozenBaseTensor, joinVocabBlocks, splitVocabLike, splitVocabMatrices, toHfLayout, toModelLayout, type HostTensor } from './layout.js';
import { expectedTensors, parseModelConfig, readModelConfig, type ModelConfig } from './config.js';
import { checkFiniteWeights, readHeader, readTensors, writeSafetensors, type F32Tensor } from './safetensors.js';
import { fileInDirectory, OPERATOR_FILES, readJsonFile, type FileAccess } from './files.js';
import type { TextTokenizer } from './tokenizer.js';
import type { AdamW, LrScheduler } from './optim.js';
import { uniqueVariableName } from './variables.js';
import { readFloat32 } from '../engine/readback.js';
import { gpuBindingLimit } from '../engine/webgpu.js';

export const WEIGHTS_FILE = 'model.safetensors';
export const WEIGHTS_INDEX_FILE = 'model.safetensors.index.json';
/** Files copied along with the weights so a saved directory stays a usable HF checkpoint. */
export const TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'chat_template.jinja',
  'generation_config.json',
  'vocab.json',
  'merges.txt',
];

/** Which file holds each tensor: the single model.safetensors or the shards named by the index. */
function weightFiles(dir: string, access: FileAccess = OPERATOR_FILES): Map<string, string[]> {
  const single = path.join(dir, WEIGHTS_FILE);
  const index = path.join(dir, WEIGHTS_INDEX_FILE);
  const byFile = new Map<string, string[]>();
  // lstat: a link (dangling or not) is still the file a confined read must refuse.
  if (fs.lstatSync(single, { throwIfNoEntry: false })) {
    byFile.set(single, [...readHeader(single, access).tensors.keys()]);
    return byFile;
  }
  if (!fs.lstatSync(index, { throwIfNoEntry: false })) {
    throw new InputError(`${dir}: no ${WEIGHTS_FILE} or ${WEIGHTS_INDEX_FILE}; is this a Hugging Face model directory?`);
  }
  const parsed = readJsonFile(index, access) as { weight_map?: unknown } | null;
  const weightMap = parsed?.weight_map;
  if (typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) throw new InputError(`${index}: key 'weight_map' is missing`);
  for (const [name, shard] of Object.entries(weightMap)) {
    const file = fileInDirectory(dir, shard, `${index}: key 'weight_map.${name}'`);
    if (!byFile.has(file)) byFile.set(file, []);
    byFile.get(file)!.push(name);
  }
  return byFile;
}

/**
 * Reads the weights a config needs (those `skip` leaves), checking names and shapes; the error
 * names the file and tensor.
 */
export function readWeights(dir: string, config: ModelConfig, skip: (hfName: string) => boolean = () => false, access: FileAccess = OPERATOR_FILES): Map<string, F32Tensor> {
  const expected = new Map([...expectedTensors(config)].filter(([name]) => !skip(name)));
  const located = new Map<string, string>();
  for (const [file, names] of weightFiles(dir, access)) for (const name of names) located.set(name, file);
  const source = located.size && new Set(located.values()).size > 1 ? path.join(dir, WEIGHTS_INDEX_FILE) : path.join(dir, WEIGHTS_FILE);
  const perFile = new Map<string, string[]>();
  for (const name of expected.keys()) {
    const file = located.get(name);
    if (!file) throw new InputError(`${source}: tensor '${name}' is missing (config.json implies it)`);
    if (!perFile.has(file)) perFile.set(file, []);
    perFile.get(file)!.push(name);
  }
  const weights = new Map<string, F32Tensor>();
  for (const [file, names] of perFile) {
    const tensors = readTensors(file, names, access);
    checkFiniteWeights(file, tensors);
    for (const [name, tensor] of tensors) {
      const want = expected.get(name)!;
      if (tensor.shape.length !== want.length || tensor.shape.some((d, i) => d !== want[i])) {
        throw new InputError(`${file}: tensor '${name}' has shape [${tensor.shape}] but config.json implies [${want}]`);
      }
      weights.set(name, tensor);
    }
  }
  return weights;
}

/** How a model is held in memory. */
export interface ModelMemory {
  /**
   * Keep the embedding, the head and every projection frozen outside the wasm heap in this dtype
   * (a LoRA base; needs frozenBaseAvailable()). Unset: every weight is a heap variable.
   */
  frozenBase?: FrozenDtype;
  /** What the frozen base's products round their activations to (FrozenMatrix.compute); float32 unless set. */
  frozenCompute?: FrozenDtype;
}

/**
 * Builds a model from HF-layout weights. With memory.frozenBase the frozen matrices are taken out
 * of `weights` as they are built (so their float32 copies can be freed).
 */
export function modelFromWeights(config: ModelConfig, weights: Map<string, HostTensor>, memory: ModelMemory = {}, sharedBase?: Map<string, FrozenMatrix>): CausalLM {
  const params = new Map<string, tf.Variable>();
  const dtype = memory.frozenBase;
  const compute = memory.frozenCompute ?? 'float32';
  const frozen = sharedBase ?? (dtype ? frozenBaseMatrices(config, weights, (data, rows, cols) => FrozenMatrix.fromFloat32(data, rows, cols, dtype, compute)) : new Map<string, FrozenMatrix>());
  const bindingLimit = gpuBindingLimit();
  try {
    const layout = toModelLayout(config, weights, dtype ? isFrozenBaseTensor : undefined);
    for (const [name, { shape, data }] of bindingLimit === undefined ? layout : splitVocabMatrices(layout, bindingLimit)) {
      // Every GPU program binds a whole tensor: one past the limit could only fail at its first use.
      // The vocabulary matrices are split above; a projection that large is refused.
      if (bindingLimit !== undefined && data.length * 4 > bindingLimit) {
        const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(bytes < 10 * 2 ** 20 ? 2 : 0)} MiB`;
        throw new InputError(
          `${name}: [${shape}] float32 takes ${mb(data.length * 4)}, more than this GPU binds at once (${mb(bindingLimit)}); webgpu splits only the vocabulary matrices: use engine.backend=wasm for this model, or a GPU with a larger storage-binding limit`,
        );
      }
      const initial = tf.tensor(data, shape, 'float32');
      params.set(name, tf.variable(initial, true, uniqueVariableName(name)));
      initial.dispose();
    }
  } catch (e) {
    tf.dispose([...params.values()]);
    throw e;
  }
  return new CausalLM(config, params, frozen);
}

/**
 * Frozen bases built in this thread or handed to it, by model directory and dtype: every model of
 * that directory here (and in the worker threads they are shared with) uses the one copy.
 */
const frozenBases = new Map<string, Map<string, FrozenMatrix>>();
function frozenBaseKey(dir: string, dtype: FrozenDtype, compute: FrozenDtype): string {
  // The files' sizes and times too: a directory rewritten in place is a different base.
  const stamps = [...weightFiles(dir).keys()].map((file) => {
    const stat = fs.statSync(file);
    return `${stat.size}:${stat.mtimeMs}`;
  });
  return [path.resolve(dir), dtype, compute, ...stamps].join('\u0000');
}

/** The frozen bases of this thread, to post to worker threads (the memory is shared, not copied). */
export function shareFrozenBases(): Record<string, Record<string, SharedFrozenMatrix>> {
  const out: Record<string, Record<string, SharedFrozenMatrix>> = {};
  for (const [key, matrices] of frozenBases) out[key] = Object.fromEntries([...matrices].map(([name, m]) => [name, m.toShared()]));
  return out;
}

/** Takes frozen bases another thread shared (shareFrozenBases), so loadModel here reuses them. */
export function adoptFrozenBases(shared: Record<string, Record<string, SharedFrozenMatrix>>): void {
  for (const [key, matrices] of Object.entries(shared)) {
    frozenBases.set(key, new Map(Object.entries(matrices).map(([name, m]) => [name, FrozenMatrix.fromShared(m)])));
  }
}

/**
 * Loads DIR/config.json and its weights (single file or sharded; F32, BF16, F16 upcast to f32). A
 * frozen base already in this thread for DIR is reused, and only the other tensors are read.
 */
export function loadModel(dir: string, memory: ModelMemory = {}): CausalLM {
  const config = readModelConfig(path.join(dir, 'config.json'));
  if (!memory.frozenBase) return modelFromWeights(config, readWeights(dir, config), memory);
  const key = frozenBaseKey(dir, memory.frozenBase, memory.frozenCompute ?? 'float32');
  const shared = frozenBases.get(key);
  const model = modelFromWeights(config, readWeights(dir, config, shared ? isFrozenBaseTensor : undefined), memory, shared);
  frozenBases.set(key, model.frozen);
  return model;
}

/** HF-layout copies of the model's weights, with LoRA adapters merged in (W + scale * B A). */
export async function exportWeights(model: CausalLM): Promise<Map<string, HostTensor>> {
  const held = joinVocabBlocks(await readParameters(model.params));
  const weights = toHfLayout(model.config, held);
  const frozen = frozenBaseToHf(model.config, model.frozen.keys(), (name, start, count) => model.frozen.get(name)!.rowsFloat32(start, count));
  for (const [name, t] of frozen) weights.set(name, t);
  for (const [name, delta] of (await model.adapters?.mergedDeltas()) ?? []) {
    const w = weights.get(name)!.data;
    for (let i = 0; i < w.length; i++) w[i] += delta.data[i];
  }
  return weights;
}

/**
 * Writes `files` (name -> writer) into `dir` atomically: everything goes to a sibling temporary
 * directory that replaces `dir` only once complete.
 */
export async function writeDirectoryAtomically(dir: string, write: (tmp: string) => void | Promise<void>): Promise<void> {
  const parent = path.dirname(path.resolve(dir));
  fs.mkdirSync(parent, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(parent, `.${path.basename(dir)}.tmp-`));
  const old = `${tmp}.old`;
  try {
    await write(tmp);
    if (fs.existsSync(dir)) fs.renameSync(dir, old);
    fs.renameSync(tmp, dir);
  } catch (e) {
    // Put the previous directory back if it was moved aside and the new one never landed.
    if (fs.existsSync(old) && !fs.existsSync(dir)) fs.renameSync(old, dir);
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  fs.rmSync(old, { recursive: true, force: true });
}

export interface SaveOptions {
  /** Directory whose tokenizer and generation files are copied alongside. */
  tokenizerDir?: string;
  /** A tokenizer to write alongside (tokenizer.json, tokenizer_config.json). */
  tokenizer?: TextTokenizer;
}

/** Saves a valid HF directory: config.json (torch_dtype float32), model.safetensors, tokenizer files. */
export async function saveModel(model: CausalLM, dir: string, options: SaveOptions = {}): Promise<void> {
  const weights = await exportWeights(model);
  await writeDirectoryAtomically(dir, (tmp) => {
    const config = { ...model.config.raw, torch_dtype: 'float32' };
    fs.writeFileSync(path.join(tmp, 'config.json'), JSON.stringify(config, null, 2) + '\n');
    writeSafetensors(path.join(tmp, WEIGHTS_FILE), weights);
    if (options.tokenizerDir) {
      for (const name of TOKENIZER_FILES) {
        const src = path.join(options.tokenizerDir, name);
        if (fs.existsSync(src)) fs.copyFileSync(src, path.join(tmp, name));
      }
    }
    options.tokenizer?.save(tmp);
  });
}

/** Random initialisation as Hugging Face does it: N(0, initializer_range) weights, unit norms, zero biases. */
export function initWeights(config: ModelConfig, seed: number): Map<string, HostTensor> {
  const rng = new Rng(seed);
  const std = typeof config.raw.initializer_range === 'number' ? config.raw.initializer_range : 0.02;
  const out = new Map<string, HostTensor>();
  for (const [name, shape] of expectedTensors(config)) {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    if (name.endsWith('norm.weight')) data.fill(1);
    else if (!name.endsWith('.bias')) for (let i = 0; i < data.length; i++) data[i] = std * rng.normal();
    out.set(name, { shape, data });
  }
  return out;
}

export function initModel(rawConfig: Record<string, unknown>, seed: number, file = 'config.json', memory: ModelMemory = {}): CausalLM {
  const config = parseModelConfig(rawConfig, file);
  return modelFromWeights(config, initWeights(config, seed), memory);
}

/** Overwrites a model's parameters with the weights in an HF directory of the same architecture. */
export function loadWeightsInto(model: CausalLM, dir: string): void {
  const held = splitVocabLike(toModelLayout(model.config, readWeights(dir, model.config)), shapesOf(model.params));
  for (const [name, variable] of model.params) {
    const t = held.get(name)!;
    tf.tidy(() => variable.assign(tf.tensor(t.data, t.shape, 'float32')));
  }
}

function shapesOf(params: Map<string, tf.Variable>): Map<string, readonly number[]> {
  return new Map([...params].map(([name, v]) => [name, v.shape]));
}

/** Writes named parameters (a plugin head, a value head) to one safetensors file. */
export async function saveParameters(file: string, params: Map<string, tf.Variable>): Promise<void> {
  writeSafetensors(file, await readParameters(params));
}

/** Host copies of named parameters, read one at a time (a GPU holds them; the host needs one copy). */
export async function readParameters(params: Map<string, tf.Variable>): Promise<Map<string, HostTensor>> {
  const held = new Map<string, HostTensor>();
  for (const [name, v] of params) held.set(name, { shape: [...v.shape], data: Float32Array.from(await readFloat32(v, `the parameter ${name}`)) });
  return held;
}

/** Loads a file written by saveParameters into existing variables; names and shapes must match. */
export function loadParameters(file: string, params: Map<string, tf.Variable>): void {
  const saved = readTensors(file, params.keys());
  for (const [name, variable] of params) {
    const t = saved.get(name)!;
    if (t.shape.join() !== variable.shape.join()) throw new InputError(`${file}: tensor '${name}' has shape [${t.shape}]; expected [${variable.shape}]`);
    tf.tidy(() => variable.assign(tf.tensor(t.data, t.shape, 'float32')));
  }
}

/** The optimizer state's file name in a role's checkpoint directory. */
export const OPTIMIZER_FILE = 'optimizer.safetensors';

/**
 * AdamW moments and step count as one safetensors file (m/<name>, v/<name>; the step in metadata),
 * with the lr scheduler's step when there is one.
 */
export async function saveOptimizerState(file: string, optimizer: AdamW, scheduler?: LrScheduler): Promise<void> {
  const state = await optimizer.getState();
  // Vocabulary blocks are saved joined, so a state resumes on any backend.
  const [ms, vs] = (['m', 'v'] as const).map((which) => joinVocabBlocks(new Map([...state.moments].map(([name, moments]) => [name, { shape: moments.shape, data: moments[which] }]))));
  const tensors = new Map<string, HostTensor>();
  for (const [name, m] of ms) {
    tensors.set(`m/${name}`, m);
    tensors.set(`v/${name}`, vs.get(name)!);
  }
  const metadata: Record<string, string> = { format: 'flowrl-adamw', step: String(state.step) };
  if (scheduler) metadata.lr_scheduler_step = String(scheduler.steps);
  writeSafetensors(file, tensors, metadata);
}

/** Restores AdamW moments and step (and the lr scheduler's step) from saveOptimizerState's file. */
export function loadOptimizerState(file: string, optimizer: AdamW, params: Map<string, tf.Variable>, scheduler?: LrScheduler): void {
  const header = readHeader(file);
  const step = Number(header.metadata.step);
  if (!Number.isInteger(step) || step < 0) throw new InputError(`${file}: metadata 'step' is missing; not an optimizer state file`);
  if (scheduler) {
    const schedulerStep = Number(header.metadata.lr_scheduler_step ?? 0);
    if (!Number.isInteger(schedulerStep) || schedulerStep < 0) throw new InputError(`${file}: metadata 'lr_scheduler_step' must be a whole number >= 0`);
    scheduler.steps = schedulerStep;
  }
  const tensors = readTensors(file);
  const [ms, vs] = ['m/', 'v/'].map((prefix) =>
    splitVocabLike(new Map([...tensors].flatMap(([name, t]) => (name.startsWith(prefix) ? [[name.slice(prefix.length), t]] : []))), shapesOf(params)),
  );
  const moments = new Map<string, { m: Float32Array; v: Float32Array; shape: number[] }>();
  for (const name of params.keys()) {
    const m = ms.get(name);
    const v = vs.get(name);
    if (m && v) moments.set(name, { m: m.data, v: v.data, shape: m.shape });
  }
  optimizer.setState({ step, moments }, params);
}
