// The engine behind `flowrl serve`: a policy that batches concurrent sampling requests, swaps its
// weights (a whole HF directory or a LoRA adapter) between batches, and pauses for weight syncs.
// Sampling is synchronous, so a batch runs to the end before any other request is looked at.
import crypto from 'node:crypto';
import type { CausalLM } from '../model/causal-lm.js';
import { loadModel } from '../model/checkpoint.js';
import { generate } from '../model/generate.js';
import { responseLogProbs } from '../model/logprobs.js';
import { isAdapterDir, loadAdapters, type LoraAdapters } from '../model/lora.js';

/** One sample to draw: its prompt ids and how to sample (the trainer's side sends the same fields). */
export interface SampleSpec {
  inputIds: number[];
  maxNewTokens: number;
  /** 0: greedy. */
  temperature: number;
  topP: number;
  /** 0 or less: off. */
  topK: number;
  /** Tokens that end a sample (the engine adds the model's eos ids unless ignoreEos). */
  stopTokenIds: number[];
  ignoreEos: boolean;
  /** Seed of this sample's random stream: identical specs give identical ids. */
  seed: number;
  /** Name of a loaded LoRA adapter (a weight version, with LoRA), or undefined for the current weights. */
  adapter?: string;
}

/** Why a sample ended, in the engines' words. */
export type FinishReason = 'stop' | 'length' | 'abort';

/** A drawn sample: exactly the sampled ids (the stop token included) and their log-probs. */
export interface SampleOutput {
  outputIds: number[];
  /** log-softmax(logits / T) of each id (processed logprobs), or at T = 1 with raw logprobs. */
  logProbs: number[];
  finish: FinishReason;
  /** The stop token that ended it, for finish 'stop'. */
  matchedStop?: number;
  /** The weight version that sampled it. */
  weightVersion: string;
}

/** Raised when the bounded queue is full (the server answers 503). */
export class EngineOverloaded extends Error {}

export interface ServingEngineOptions {
  /** Rows per batch. */
  maxBatch: number;
  /** Samples waiting at most; beyond it submit throws EngineOverloaded. */
  maxQueue: number;
  /** processed_logprobs (after temperature, the default) or raw_logprobs (vLLM's default: T = 1). */
  logprobsMode: 'processed_logprobs' | 'raw_logprobs';
  /** Added to every returned log-prob (a test-only skew between engine and trainer). */
  logprobSkew?: number;
}

interface Pending {
  spec: SampleSpec;
  resolve: (out: SampleOutput) => void;
  reject: (e: Error) => void;
}

/** The serving engine: a model, its loaded adapters, a queue and a weight version. */
export class ServingEngine {
  private model: CausalLM;
  private readonly adapters = new Map<string, LoraAdapters>();
  private queue: Pending[] = [];
  private scheduled = false;
  private running = 0;
  paused = false;
  weightVersion = '0';
  /** Batches run so far (tests check that concurrent requests share batches). */
  batchesRun = 0;
  /** Directory of the weights now served. */
  weightsPath: string;
  logprobSkew: number;

  constructor(
    readonly baseDir: string,
    private readonly options: ServingEngineOptions,
    adapterDir?: string,
  ) {
    this.model = loadModel(baseDir);
    this.weightsPath = baseDir;
    this.logprobSkew = options.logprobSkew ?? 0;
    if (adapterDir) this.loadWeights(adapterDir, '0');
  }

  get config() {
    return this.model.config;
  }

  /** Samples queued and not yet started. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Samples in the batch now running (0 or the batch size). */
  get busy(): number {
    return this.running;
  }

  adapterNames(): string[] {
    return [...this.adapters.keys()];
  }

  /** A seed for a request that gives none. */
  static freshSeed(): number {
    return crypto.randomInt(2 ** 31);
  }

  /** Queues one sample; resolves when its batch has run (or with finish 'abort' on pause abort). */
  submit(spec: SampleSpec): Promise<SampleOutput> {
    if (spec.adapter !== undefined && !this.adapters.has(spec.adapter)) return Promise.reject(new Error(`LoRA adapter '${spec.adapter}' is not loaded`));
    if (this.queue.length >= this.options.maxQueue) return Promise.reject(new EngineOverloaded(`the queue holds ${this.queue.length} samples (at most ${this.options.maxQueue}); retry later`));
    return new Promise((resolve, reject) => {
      this.queue.push({ spec, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.paused || !this.queue.length) return;
    this.scheduled = true;
    // One macrotask later: requests that arrived together are batched together.
    setTimeout(() => {
      this.scheduled = false;
      this.runBatch();
      this.schedule();
    }, 1);
  }

  /** Runs the first queued sample with every queued sample that can share its batch. */
  private runBatch(): void {
    if (this.paused || !this.queue.length) return;
    const key = batchKey(this.queue[0].spec);
    const batch: Pending[] = [];
    const rest: Pending[] = [];
    for (const p of this.queue) (batch.length < this.options.maxBatch && batchKey(p.spec) === key ? batch : rest).push(p);
    this.queue = rest;
    const first = batch[0].spec;
    const adapters = first.adapter === undefined ? this.model.adapters : this.adapters.get(first.adapter);
    if (first.adapter !== undefined && !adapters) {
      batch.forEach((p) => p.reject(new Error(`LoRA adapter '${first.adapter}' was unloaded`)));
      return;
    }
    const current = this.model.adapters;
    this.running = batch.length;
    this.batchesRun += 1;
    try {
      this.model.adapters = adapters;
      const stops = first.ignoreEos ? first.stopTokenIds : [...new Set([...first.stopTokenIds, ...this.model.config.eosTokenIds])];
      const { tokens, stopped, logProbs } = generate(
        this.model,
        batch.map((p) => p.spec.inputIds),
        {
          maxNewTokens: Math.max(...batch.map((p) => p.spec.maxNewTokens)),
          rowMaxNewTokens: batch.map((p) => p.spec.maxNewTokens),
          rowSeeds: batch.map((p) => p.spec.seed),
          temperature: first.temperature,
          topP: first.topP,
          topK: first.topK,
          greedy: first.temperature === 0,
          stopTokenIds: stops,
          withLogProbs: true,
        },
      );
      const raw = this.options.logprobsMode === 'raw_logprobs' && first.temperature !== 1 && first.temperature !== 0;
      batch.forEach((p, b) => {
        const lps = raw ? this.rawLogProbs(p.spec, tokens[b]) : logProbs![b];
        p.resolve({
          outputIds: tokens[b],
          logProbs: lps.map((v) => v + this.logprobSkew),
          finish: stopped[b] ? 'stop' : 'length',
          matchedStop: stopped[b] ? tokens[b][tokens[b].length - 1] : undefined,
          weightVersion: this.weightVersion,
        });
      });
    } catch (e) {
      batch.forEach((p) => p.reject(e as Error));
    } finally {
      this.model.adapters = current;
      this.running = 0;
    }
  }

  /** vLLM's default logprobs: the sampled ids scored at T = 1 (before temperature). */
  private rawLogProbs(spec: SampleSpec, ids: number[]): number[] {
    return ids.length ? responseLogProbs(this.model, [spec.inputIds], [ids], 1)[0] : [];
  }

  /** Stops starting batches; 'abort' also ends every queued sample with finish 'abort', 'wait' first runs them. Returns how many were waiting. */
  pause(mode: 'abort' | 'wait' | 'keep'): number {
    // vLLM's 'wait' lets the requests already submitted finish (on the current weights) before
    // pausing; without the drain they would wait and then sample from the next weights.
    if (mode === 'wait') while (!this.paused && this.queue.length) this.runBatch();
    this.paused = true;
    return mode === 'abort' ? this.abortQueued() : this.queue.length;
  }

  /** Ends every queued sample with finish 'abort' (no ids); returns how many there were. */
  abortQueued(): number {
    const waiting = this.queue.length;
    for (const p of this.queue) p.resolve({ outputIds: [], logProbs: [], finish: 'abort', weightVersion: this.weightVersion });
    this.queue = [];
    return waiting;
  }

  resume(): void {
    this.paused = false;
    this.schedule();
  }

  /**
   * Loads `dir` (an HF model directory, or a PEFT adapter for this base) as the weights served,
   * under `version`. A bad directory throws and leaves the served weights as they were.
   */
  loadWeights(dir: string, version: string): void {
    if (isAdapterDir(dir)) {
      const adapters = loadAdapters(this.model.config, dir);
      this.model.attachAdapters(adapters);
    } else {
      const next = loadModel(dir);
      if (next.config.vocabSize !== this.model.config.vocabSize) {
        next.dispose();
        throw new Error(`${dir}: vocabulary of ${next.config.vocabSize} tokens; the served model has ${this.model.config.vocabSize}`);
      }
      this.model.dispose();
      this.model = next;
      // Adapters belong to a base; a new base drops them.
      this.adapters.forEach((a) => a.dispose());
      this.adapters.clear();
    }
    this.weightsPath = dir;
    this.weightVersion = version;
  }

  /** Loads a PEFT adapter under `name`; a name in use is replaced only when `inPlace`. */
  loadAdapter(name: string, dir: string, inPlace: boolean): void {
    if (this.adapters.has(name) && !inPlace) throw new Error(`LoRA adapter '${name}' is already loaded; unload it first or pass load_inplace`);
    const adapters = loadAdapters(this.model.config, dir);
    this.adapters.get(name)?.dispose();
    this.adapters.set(name, adapters);
  }

  unloadAdapter(name: string): boolean {
    const adapters = this.adapters.get(name);
    if (!adapters) return false;
    adapters.dispose();
    this.adapters.delete(name);
    return true;
  }

  /** Back to the base weights as started, version '0' (a test's simulated restart). */
  restartToBase(): void {
    this.loadWeights(this.baseDir, '0');
    this.model.adapters?.dispose();
    this.model.adapters = undefined;
  }

  dispose(): void {
    this.pause('abort');
    this.model.dispose();
    this.adapters.forEach((a) => a.dispose());
  }
}

/** Samples that may share a batch: same sampling settings and adapter (lengths and seeds are per row). */
function batchKey(s: SampleSpec): string {
  return JSON.stringify([s.temperature, s.topP, s.topK, s.ignoreEos, [...s.stopTokenIds].sort((a, b) => a - b), s.adapter ?? null]);
}
