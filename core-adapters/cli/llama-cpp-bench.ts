// flowrl bench --model-config FILE.json --compare-llama-cpp: llama.cpp (through node-llama-cpp, an
// optional peer dependency) on the model bench's sampling job: the same shape with random weights
// written as GGUF in the bench's dtype, the same prompts' lengths, batch and new tokens, greedy, on
// as many threads as flowrl's sampling uses. node-llama-cpp's API as of 3.21.1.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { FrozenDtype } from '../config/choices.js';
import { coresForThisRank } from '../engine/mpi.js';
import { initWeights } from '../model/checkpoint.js';
import { readModelConfig } from '../model/config.js';
import { byteLevelTokenizerValues, ggufArchitecture, writeGgufWeights } from '../model/gguf.js';
import { PACKAGE_ROOT } from '../package-root.js';
import { Rng } from '../random.js';

/** The node-llama-cpp release the comparison was written and checked against. */
export const NODE_LLAMA_CPP_VERSION = '3.21.1';

/** The part of node-llama-cpp's API used here. */
interface NodeLlamaCpp {
  getLlama(options: { gpu: false; build: 'never'; logLevel: string; maxThreads: number }): Promise<{
    loadModel(options: { modelPath: string; gpuLayers: number }): Promise<{
      createContext(options: { contextSize: number; sequences: number; batchSize: number; threads: { ideal: number; min: number } }): Promise<{
        getSequence(): { evaluate(tokens: number[], options: { temperature: number; yieldEogToken: boolean }): AsyncGenerator<number>; clearHistory(): Promise<void>; dispose(): void };
        readonly currentThreads: number;
        dispose(): Promise<void>;
      }>;
      dispose(): Promise<void>;
    }>;
    dispose(): Promise<void>;
  }>;
}

export interface LlamaCppResult {
  node_llama_cpp: string;
  threads: number;
  dtype: FrozenDtype;
  /** The prompts' forward until every sequence has its first new token. */
  prefill_s: number;
  /** Each later token for every sequence, per step. */
  decode_step_ms: number;
  sample_tokens_per_s: number;
  gguf_mb: number;
}

/**
 * node-llama-cpp's entry: FLOWRL_NODE_LLAMA_CPP (a path to its package directory or its
 * dist/index.js), else the package as Node resolves it from here; or why it is not there.
 */
export async function importNodeLlamaCpp(): Promise<{ module?: NodeLlamaCpp; version?: string; error?: string }> {
  const named = process.env.FLOWRL_NODE_LLAMA_CPP;
  try {
    const entry = named ? (fs.existsSync(path.join(named, 'dist', 'index.js')) ? path.join(named, 'dist', 'index.js') : path.resolve(named)) : fileURLToPath(import.meta.resolve('node-llama-cpp'));
    // The entry is <package>/dist/index.js.
    const packageJson = path.join(path.dirname(path.dirname(entry)), 'package.json');
    const version = fs.existsSync(packageJson) ? (JSON.parse(fs.readFileSync(packageJson, 'utf8')) as { version?: string }).version : undefined;
    return { module: (await import(pathToFileURL(entry).href)) as NodeLlamaCpp, version };
  } catch (e) {
    const what = named ? `FLOWRL_NODE_LLAMA_CPP=${named} does not load (${(e as Error).message.split('\n')[0]})` : 'node-llama-cpp is not installed';
    return { error: `${what}; ${nodeLlamaCppInstallAdvice()}` };
  }
}

/**
 * How to install node-llama-cpp where flowrl finds it. In a project that depends on flowrl, beside it.
 * In a checkout of flowrl itself npm takes `npm install node-llama-cpp` for flowrl's own optional
 * peer and installs nothing ("up to date", npm 11.19.1), so there it goes into a directory of its own.
 */
export function nodeLlamaCppInstallAdvice(packageRoot = PACKAGE_ROOT): string {
  const spec = `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`;
  const checkout = packageRoot !== '' && !packageRoot.split(path.sep).includes('node_modules');
  if (!checkout) return `install it beside flowrl: npm install ${spec}`;
  const dir = path.join(packageRoot, '.llama-cpp');
  return `in this checkout of flowrl (where npm takes node-llama-cpp for flowrl's own optional peer and installs nothing), install it apart and name it: npm install --prefix ${dir} ${spec} && export FLOWRL_NODE_LLAMA_CPP=${path.join(dir, 'node_modules', 'node-llama-cpp')}`;
}

export interface LlamaCppBenchOptions {
  configFile: string;
  dtype: FrozenDtype;
  samplePrompts: number;
  sampleTokens: number;
  promptTokens: number;
  /** Defaults to the cores flowrl's sampling splits its products over. */
  threads?: number;
}

/** Where --compare-llama-cpp cannot write the config's shape as GGUF: checked before either bench runs. */
export function llamaCppRefusal(configFile: string): string | undefined {
  try {
    ggufArchitecture(readModelConfig(configFile), configFile);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}

type Llama = Awaited<ReturnType<NodeLlamaCpp['getLlama']>>;
type LlamaModel = Awaited<ReturnType<Llama['loadModel']>>;
type LlamaContext = Awaited<ReturnType<LlamaModel['createContext']>>;

/** llama.cpp on the model bench's sampling job, or why it cannot run. */
export async function runLlamaCppBench(options: LlamaCppBenchOptions): Promise<{ result?: LlamaCppResult; error?: string }> {
  const loaded = await importNodeLlamaCpp();
  if (!loaded.module) return { error: loaded.error };
  const config = readModelConfig(options.configFile);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowrl-llama-cpp-bench-'));
  const file = path.join(dir, 'bench.gguf');
  const threads = options.threads ?? coresForThisRank();
  let llama: Llama | undefined;
  let model: LlamaModel | undefined;
  let context: LlamaContext | undefined;
  try {
    const arch = ggufArchitecture(config, options.configFile);
    const written = writeGgufWeights(file, { config, weights: initWeights(config, 0), tokenizer: byteLevelTokenizerValues(config, arch), name: path.basename(options.configFile), dtype: options.dtype });
    // maxThreads: node-llama-cpp otherwise caps a CPU context at its count of physical cores.
    llama = await loaded.module.getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: threads });
    model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const { samplePrompts: P, promptTokens, sampleTokens } = options;
    // The prompts go in one batch, as flowrl's prefill takes them.
    context = await model.createContext({ contextSize: promptTokens + sampleTokens + 1, sequences: P, batchSize: P * promptTokens, threads: { ideal: threads, min: threads } });
    const rng = new Rng(1);
    const prompts = Array.from({ length: P }, () => Array.from({ length: promptTokens }, () => rng.int(config.vocabSize)));
    const sequences = Array.from({ length: P }, () => context!.getSequence());
    // Each sequence's first token and its last, timed; every sequence generates alongside the others,
    // node-llama-cpp gathering their tokens into one batch per step.
    const round = async (tokens: number) => {
      const started = performance.now();
      const firsts: number[] = [];
      await Promise.all(
        sequences.map(async (sequence, i) => {
          let made = 0;
          // Greedy; an end-of-generation token does not stop the run (random weights pick anything).
          for await (const _ of sequence.evaluate(prompts[i], { temperature: 0, yieldEogToken: true })) {
            if (++made === 1) firsts.push(performance.now());
            if (made === tokens) break;
          }
        }),
      );
      const ended = performance.now();
      if (firsts.length < P) throw new Error(`${P - firsts.length} of ${P} prompts got no token`);
      for (const sequence of sequences) await sequence.clearHistory();
      return { prefillMs: Math.max(...firsts) - started, decodeMs: ended - Math.max(...firsts) };
    };
    await round(2); // warm-up: llama.cpp sizes its compute buffers on the first batches
    const { prefillMs, decodeMs } = await round(sampleTokens);
    const usedThreads = context.currentThreads;
    for (const sequence of sequences) sequence.dispose();
    return {
      result: {
        node_llama_cpp: loaded.version ?? 'unknown',
        threads: usedThreads,
        dtype: options.dtype,
        prefill_s: Math.round(prefillMs) / 1000,
        // With one new token there is no decode step to time.
        decode_step_ms: sampleTokens > 1 ? Math.round((decodeMs / (sampleTokens - 1)) * 10) / 10 : 0,
        sample_tokens_per_s: Math.round(((P * sampleTokens * 1000) / (prefillMs + decodeMs)) * 10) / 10,
        gguf_mb: Math.round(written.bytes / 2 ** 20),
      },
    };
  } catch (e) {
    return { error: `llama.cpp failed: ${(e as Error).message.split('\n')[0]}` };
  } finally {
    // Released before the file goes: llama.cpp maps it.
    await context?.dispose().catch(() => undefined);
    await model?.dispose().catch(() => undefined);
    await llama?.dispose().catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
