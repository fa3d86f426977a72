// The engine behind `flowrl serve`: a policy that batches concurrent sampling requests, swaps its
// weights (a whole HF directory or a LoRA adapter) between batches, and pauses for weight syncs.
// A batch decodes a token at a time and yields to the event loop between tokens, so the server
// keeps answering (health, pause, abort) while the model computes. Every request is checked against
// the context length and the KV-cache budget before it is queued; a batch is sized to fit the budget.
import crypto from 'node:crypto';
import type { CausalLM } from '../model/causal-lm.js';
import path from 'node:path';
import { loadModel, modelFromWeights, readWeights } from '../model/checkpoint.js';
import { readModelConfig, type ModelConfig } from '../model/config.js';
import { CONFINED_FILES, OPERATOR_FILES, type FileAccess } from '../model/files.js';
import { samplesGreedily, type Alternatives } from '../model/generate.js';
import { Decoding } from '../model/generate.js';
import { promptTopLogProbs, responseLogProbs, type PromptPositionTop } from '../model/logprobs.js';
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
  /** Ends the sample when true of the ids so far (stop strings); it finishes 'stop' with no matchedStop. */
  stopWhen?: (ids: readonly number[]) => boolean;
  /** How many most likely tokens to report at each step (OpenAI's top logprobs); 0 or absent: none. */
  topLogProbs?: number;
  /** Called after each decode step with this sample's ids so far and their scores (a streaming answer reads them). */
  onStep?: (ids: readonly number[], scores: StepScores) => void;
  /** Ends the sample (its client went away): queued, it finishes 'abort' at once; decoding, at the next step, with the ids so far. */
  signal?: AbortSignal;
  /** Ids the sample takes in order instead of drawing (flowrl serve's test faults script answers with it). */
  forcedIds?: readonly number[];
  /** Also score the prompt (ids 1.. given those before, at T = 1; vLLM's prompt_logprobs) with the weights that sample it. */
  withPromptLogProbs?: boolean;
  /** With withPromptLogProbs: also the this many most likely tokens at each position, and the prompt token's rank. */
  promptTopLogProbs?: number;
  /** Added to the logits of these ids before sampling (OpenAI's logit_bias). */
  logitBias?: Map<number, number>;
  /** The stop tokens (eos, stopTokenIds) cannot end the sample before this many tokens (vLLM's min_tokens). */
  minNewTokens?: number;
}

/** A decoding sample's scores so far, as its SampleOutput will hold them (read them during the call only: they grow). */
export type StepScores = Pick<SampleOutput, 'logProbs' | 'keptLogMass' | 'alternatives'>;

/** Why a sample ended, in the engines' words. */
export type FinishReason = 'stop' | 'length' | 'abort';

/** A drawn sample: exactly the sampled ids (the stop token included) and their log-probs. */
export interface SampleOutput {
  outputIds: number[];
  /** log-softmax(logits / T) of each id over the whole vocabulary: before top-k/top-p, as SGLang and the trainer score. */
  logProbs: number[];
  /** Per id, the log of the softmax share top-k/top-p kept (absent without them): vLLM's processed logprobs are logProbs minus this. */
  keptLogMass?: number[];
  /** With logprobsMode raw_logprobs: each id scored at T = 1 before any filter (vLLM's default). */
  rawLogProbs?: number[];
  finish: FinishReason;
  /** The stop token that ended it, for finish 'stop'. */
  matchedStop?: number;
  /** The weight version that sampled it. */
  weightVersion: string;
  /** With topLogProbs: per id, the most likely tokens at that step (at least topLogProbs of them). */
  alternatives?: Alternatives[];
  /** With withPromptLogProbs: the prompt's ids 1.. scored at T = 1, by the weights that drew the sample. */
  promptLogProbs?: number[];
  /** With promptTopLogProbs: per prompt position 1.., the most likely tokens there and the prompt token's rank. */
  promptTop?: PromptPositionTop[];
}

/** Raised when the bounded queue is full (the server answers 503). */
export class EngineOverloaded extends Error {}

/** A request the engine can never run as asked (too long, an adapter not loaded): the server answers 400. */
export class RequestRefused extends Error {}

/** The engine failed while computing; it is broken until the process restarts (the server answers 5xx and /health 503). */
export class EngineFault extends Error {}

export interface ServingEngineOptions {
  /** Rows per batch. */
  maxBatch: number;
  /** Samples waiting at most; beyond it submit throws EngineOverloaded. */
  maxQueue: number;
  /** vLLM's --logprobs-mode: processed_logprobs (after temperature and top-k/top-p) or raw_logprobs (vLLM's default: T = 1, unfiltered). */
  logprobsMode: 'processed_logprobs' | 'raw_logprobs';
  /** Prompt plus new tokens of one sample at most (default: the model's max_position_embeddings). */
  maxModelLen?: number;
  /** KV-cache slots of one batch (rows x (longest prompt + most new tokens)); default: what 1 GiB holds, at least one full-length sample. */
  maxTotalTokens?: number;
  /** Added to every returned log-prob (a test-only skew between engine and trainer). */
  logprobSkew?: number;
}

/** How long the first queued sample waits for others to share its batch. */
const BATCH_GATHER_MS = 5;

/** KV-cache bytes the default token budget may use. */
const DEFAULT_KV_BYTES = 2 ** 30;

interface Pending {
  spec: SampleSpec;
  resolve: (out: SampleOutput) => void;
  reject: (e: Error) => void;
  /** Settles with the sample (pause 'wait' waits for it). */
  settled: Promise<unknown>;
  /** Admission order: a weight update waits for the samples admitted before it. */
  seq: number;
}

/** A sample's logit_bias and min_tokens as one change to its next-token logits; undefined when it has neither. */
function logitChange(spec: SampleSpec, stops: number[]): ((logits: Float32Array, produced: number) => void) | undefined {
  const bias = spec.logitBias?.size ? [...spec.logitBias] : undefined;
  const min = spec.minNewTokens ?? 0;
  if (!bias && min <= 0) return undefined;
  return (logits, produced) => {
    for (const [id, value] of bias ?? []) logits[id] += value;
    if (produced < min) for (const id of stops) logits[id] = -Infinity;
  };
}

/** Gives a streaming reader a step's ids and scores; what it does with them (a closed socket) never stops the batch. */
function reportStep(onStep: NonNullable<SampleSpec['onStep']>, ids: readonly number[], scores: StepScores): void {
  try {
    onStep(ids, scores);
  } catch {
    // The reader's failure is its request's, not the batch's.
  }
}

/** The batch now decoding. */
interface RunningBatch {
  rows: Pending[];
  aborted: boolean;
}

/** The serving engine: a model, its loaded adapters, a queue and a weight version. */
export class ServingEngine {
  private model: CausalLM;
  private readonly adapters = new Map<string, LoraAdapters>();
  private readonly adapterDirs = new Map<string, string>();
  private queue: Pending[] = [];
  private scheduled = false;
  private looping = false;
  private running?: RunningBatch;
  /** Weight and adapter changes waiting for the running batch to end (no batch starts meanwhile). */
  private locks = 0;
  /** Called when a batch ends or the engine pauses (whoever waits on the engine's state looks again). */
  private idleWaiters: (() => void)[] = [];
  /** Samples admitted so far (the next one's seq). */
  private admitted = 0;
  /** Per weight update waiting: only samples admitted before it may start batches meanwhile. */
  private readonly barriers = new Set<number>();
  /** Resumes so far: a pause 'wait' that a resume overtook does not pause. */
  private resumes = 0;
  paused = false;
  weightVersion = '0';
  /** Batches run so far (tests check that concurrent requests share batches). */
  batchesRun = 0;
  /** Directory of the weights now served. */
  weightsPath: string;
  logprobSkew: number;
  /** Why the engine is broken, once a batch failed while computing. */
  fault?: EngineFault;
  /** Runs before every decode step (the test-only fault layer breaks the engine here). */
  beforeStep?: () => void;
  /** Called once when the engine breaks (flowrl serve exits so that a supervisor restarts it). */
  onFault?: (fault: EngineFault) => void;
  readonly maxModelLen: number;
  readonly maxTotalTokens: number;

  constructor(
    readonly baseDir: string,
    private readonly options: ServingEngineOptions,
    adapterDir?: string,
  ) {
    this.model = loadModel(baseDir);
    this.weightsPath = baseDir;
    this.logprobSkew = options.logprobSkew ?? 0;
    const c = this.model.config;
    this.maxModelLen = Math.min(options.maxModelLen ?? c.maxPositions, c.maxPositions);
    const kvBytesPerToken = c.numLayers * 2 * c.numKVHeads * c.headDim * 4;
    this.maxTotalTokens = options.maxTotalTokens ?? Math.min(options.maxBatch * this.maxModelLen, Math.max(this.maxModelLen, Math.floor(DEFAULT_KV_BYTES / kvBytesPerToken)));
    if (adapterDir) this.swapWeights(adapterDir, '0', OPERATOR_FILES);
  }

  get config() {
    return this.model.config;
  }

  /** Samples queued and not yet started. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Samples in the batch now running (0 when none). */
  get busy(): number {
    return this.running?.rows.length ?? 0;
  }

  adapterNames(): string[] {
    return [...this.adapters.keys()];
  }

  /** The directory the adapter `name` was loaded from. */
  adapterPath(name: string): string | undefined {
    return this.adapterDirs.get(name);
  }

  /** A seed for a request that gives none. */
  static freshSeed(): number {
    return crypto.randomInt(2 ** 31);
  }

  /** Why `spec` can never run here, or undefined. */
  private refusal(spec: SampleSpec): string | undefined {
    if (spec.adapter !== undefined && !this.adapters.has(spec.adapter)) return `LoRA adapter '${spec.adapter}' is not loaded`;
    if (!Number.isFinite(spec.temperature) || spec.temperature < 0) return `temperature must be a finite number >= 0; got ${spec.temperature}`;
    if (!(spec.topP > 0 && spec.topP <= 1)) return `top_p must be in (0, 1]; got ${spec.topP}`;
    const length = spec.inputIds.length + spec.maxNewTokens;
    if (length > this.maxModelLen) {
      return `this model's maximum context length is ${this.maxModelLen} tokens; the request asks for ${length} (${spec.inputIds.length} in the prompt, ${spec.maxNewTokens} new). Shorten the prompt or lower the new-token limit`;
    }
    if (length > this.maxTotalTokens) return `the request needs ${length} KV-cache slots; this server has ${this.maxTotalTokens} (--max-total-tokens)`;
    return undefined;
  }

  /**
   * Queues samples, all or none: one that can never run is a RequestRefused, a queue without room
   * for all of them an EngineOverloaded, a broken engine its EngineFault (nothing is queued then).
   * Each promise resolves when its batch has run (or with finish 'abort' when aborted).
   */
  submitAll(specs: SampleSpec[]): Promise<SampleOutput>[] {
    if (this.fault) throw this.fault;
    for (const spec of specs) {
      const why = this.refusal(spec);
      if (why) throw new RequestRefused(why);
    }
    if (this.queue.length + specs.length > this.options.maxQueue) {
      throw new EngineOverloaded(`the queue holds ${this.queue.length} samples (at most ${this.options.maxQueue}); ${specs.length} more do not fit; retry later`);
    }
    const promises = specs.map((spec) => {
      let pending!: Pending;
      const promise = new Promise<SampleOutput>((resolve, reject) => {
        pending = { spec, resolve, reject, settled: Promise.resolve(), seq: this.admitted++ };
      });
      pending.settled = promise.catch(() => undefined);
      this.queue.push(pending);
      spec.signal?.addEventListener('abort', () => this.dropQueued(pending), { once: true });
      return promise;
    });
    for (const p of this.queue) if (p.spec.signal?.aborted) this.dropQueued(p);
    this.schedule();
    return promises;
  }

  /** A cancelled sample still waiting leaves the queue, finished 'abort' (one decoding stops at its next step instead). */
  private dropQueued(pending: Pending): void {
    const at = this.queue.indexOf(pending);
    if (at < 0) return;
    this.queue.splice(at, 1);
    pending.resolve({ outputIds: [], logProbs: [], finish: 'abort', weightVersion: this.weightVersion });
    this.wakeWaiters();
  }

  /** Queues one sample (submitAll of one, as a promise). */
  submit(spec: SampleSpec): Promise<SampleOutput> {
    try {
      return this.submitAll([spec])[0];
    } catch (e) {
      return Promise.reject(e as Error);
    }
  }

  private schedule(): void {
    if (this.scheduled || this.looping || !this.canStart()) return;
    this.scheduled = true;
    // A few milliseconds later: requests sent together (a trainer's burst) reach one batch, not the
    // first alone and the rest after it (8 concurrent requests took 2 batches at 1 ms).
    setTimeout(() => {
      this.scheduled = false;
      void this.loop();
    }, BATCH_GATHER_MS);
  }

  private canStart(): boolean {
    return !this.paused && !this.locks && !this.fault && this.queue.length > 0 && this.queue[0].seq < this.admissionLimit();
  }

  /** Samples admitted at or after this wait for the weight updates pending (the queue keeps admission order). */
  private admissionLimit(): number {
    return this.barriers.size ? Math.min(...this.barriers) : Infinity;
  }

  private wakeWaiters(): void {
    this.idleWaiters.splice(0).forEach((w) => w());
  }

  private async loop(): Promise<void> {
    if (this.looping) return;
    this.looping = true;
    try {
      while (this.canStart()) await this.runBatch();
    } finally {
      this.looping = false;
    }
  }

  /** The first queued sample with every queued sample that can share its batch within the budgets. */
  private takeBatch(): Pending[] {
    const key = batchKey(this.queue[0].spec);
    const limit = this.admissionLimit();
    const batch: Pending[] = [];
    const rest: Pending[] = [];
    let longestPrompt = 0;
    let mostNew = 0;
    for (const p of this.queue) {
      const prompt = Math.max(longestPrompt, p.spec.inputIds.length);
      const fresh = Math.max(mostNew, p.spec.maxNewTokens);
      if (p.seq < limit && batch.length < this.options.maxBatch && batchKey(p.spec) === key && (batch.length + 1) * (prompt + fresh) <= this.maxTotalTokens) {
        batch.push(p);
        longestPrompt = prompt;
        mostNew = fresh;
      } else rest.push(p);
    }
    this.queue = rest;
    return batch;
  }

  /** Decodes one batch, yielding between tokens; a failure while computing breaks the engine. */
  private async runBatch(): Promise<void> {
    const rows = this.takeBatch();
    const first = rows[0].spec;
    const adapters = first.adapter === undefined ? this.model.adapters : this.adapters.get(first.adapter);
    if (first.adapter !== undefined && !adapters) {
      rows.forEach((p) => p.reject(new RequestRefused(`LoRA adapter '${first.adapter}' was unloaded`)));
      return;
    }
    const model = this.model;
    const current = model.adapters;
    const batch: RunningBatch = { rows, aborted: false };
    this.running = batch;
    this.batchesRun += 1;
    let decoding: Decoding | undefined;
    try {
      const greedy = samplesGreedily(first);
      model.adapters = adapters;
      // Scored inside the batch: a weight change between the samples and a later scoring cannot split them.
      const promptLogProbs: (number[] | undefined)[] = [];
      const promptTop: (PromptPositionTop[] | undefined)[] = [];
      for (const p of rows) {
        const k = p.spec.promptTopLogProbs ?? 0;
        const top = p.spec.withPromptLogProbs && k > 0 ? await promptTopLogProbs(model, p.spec.inputIds, k) : undefined;
        promptTop.push(top);
        promptLogProbs.push(top ? top.map((t) => t.logProb) : p.spec.withPromptLogProbs ? await this.promptScores(p.spec.inputIds) : undefined);
        // /health and the admin routes are answered between prompts (1,024 of them held /health 11 s).
        if (p.spec.withPromptLogProbs) await new Promise((resolve) => setImmediate(resolve));
      }
      const stops = first.ignoreEos ? first.stopTokenIds : [...new Set([...first.stopTokenIds, ...model.config.eosTokenIds])];
      decoding = new Decoding(
        model,
        rows.map((p) => p.spec.inputIds),
        {
          maxNewTokens: Math.max(...rows.map((p) => p.spec.maxNewTokens)),
          rowMaxNewTokens: rows.map((p) => p.spec.maxNewTokens),
          rowSeeds: rows.map((p) => p.spec.seed),
          temperature: first.temperature,
          topP: first.topP,
          topK: first.topK,
          greedy,
          stopTokenIds: stops,
          withLogProbs: true,
          withKeptMass: !greedy && (first.topP < 1 || first.topK > 0),
          rowStopWhen: rows.map((p) => p.spec.stopWhen),
          rowForced: rows.map((p) => p.spec.forcedIds),
          rowLogits: rows.map((p) => logitChange(p.spec, stops)),
          topLogProbs: Math.max(0, ...rows.map((p) => p.spec.topLogProbs ?? 0)),
        },
      );
      const cancelled = rows.map(() => false);
      const settled = rows.map(() => false);
      const skew = (values: number[]) => values.map((v) => v + this.logprobSkew);
      /** Answers row b with what it has sampled (an aborted row at once, not when its batch ends). */
      const settle = async (b: number) => {
        const p = rows[b];
        settled[b] = true;
        const { tokens, stopped, logProbs, keptLogMass, alternatives } = decoding!.result();
        // Raw scores differ from the processed ones only away from T = 1 (greedy scores at T = 1).
        const rescore = !batch.aborted && this.options.logprobsMode === 'raw_logprobs' && first.temperature !== 1 && !decoding!.greedy;
        const raw = this.options.logprobsMode === 'raw_logprobs' ? skew(rescore ? await this.rawLogProbs(p.spec, tokens[b]) : logProbs![b]) : undefined;
        const finish: FinishReason = batch.aborted || cancelled[b] ? 'abort' : stopped[b] ? 'stop' : 'length';
        p.resolve({
          outputIds: [...tokens[b]],
          logProbs: skew(logProbs![b]),
          ...(keptLogMass ? { keptLogMass: [...keptLogMass[b]] } : {}),
          ...(alternatives && p.spec.topLogProbs ? { alternatives: [...alternatives[b]] } : {}),
          ...(raw ? { rawLogProbs: raw } : {}),
          ...(promptLogProbs[b] ? { promptLogProbs: promptLogProbs[b] } : {}),
          ...(promptTop[b] ? { promptTop: promptTop[b] } : {}),
          finish,
          matchedStop: finish === 'stop' && !p.spec.stopWhen?.(tokens[b]) ? tokens[b][tokens[b].length - 1] : undefined,
          weightVersion: this.weightVersion,
        });
      };
      for (;;) {
        this.beforeStep?.();
        if (batch.aborted) break;
        for (const [b, p] of rows.entries()) {
          if (p.spec.signal?.aborted && !cancelled[b]) {
            cancelled[b] = decoding.endRow(b);
            // Its client (or /abort_request) is answered now, not when the rest of the batch ends.
            if (cancelled[b]) await settle(b);
          }
        }
        const going = await decoding.step();
        for (const [b, p] of rows.entries()) {
          if (!p.spec.onStep || cancelled[b]) continue;
          const logProbs = decoding.logProbs![b];
          reportStep(p.spec.onStep, decoding.tokens[b], {
            logProbs: this.logprobSkew ? logProbs.map((v) => v + this.logprobSkew) : logProbs,
            ...(decoding.keptLogMass ? { keptLogMass: decoding.keptLogMass[b] } : {}),
            ...(decoding.alternatives && p.spec.topLogProbs ? { alternatives: decoding.alternatives[b] } : {}),
          });
        }
        if (!going) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      for (let b = 0; b < rows.length; b++) if (!settled[b]) await settle(b);
    } catch (e) {
      this.breakDown(e as Error, rows);
    } finally {
      decoding?.dispose();
      model.adapters = current;
      this.running = undefined;
      this.wakeWaiters();
    }
  }

  /** Marks the engine broken: the batch and everything queued fail with the fault. */
  private breakDown(error: Error, rows: Pending[]): void {
    const fault = new EngineFault(`the engine failed while sampling and must be restarted: ${error.message}`);
    this.fault = fault;
    for (const p of [...rows, ...this.queue.splice(0)]) p.reject(fault);
    this.onFault?.(fault);
  }

  /** vLLM's default logprobs: the sampled ids scored at T = 1 (before temperature). */
  private async rawLogProbs(spec: SampleSpec, ids: number[]): Promise<number[]> {
    return ids.length ? (await responseLogProbs(this.model, [spec.inputIds], [ids], 1))[0] : [];
  }

  /** Log-probs of prompt ids 1.. given the ones before, at T = 1, with the weights and adapter in place now. */
  private async promptScores(ids: readonly number[]): Promise<number[]> {
    return ids.length < 2 ? [] : (await responseLogProbs(this.model, [ids.slice(0, 1)], [ids.slice(1)], 1))[0];
  }

  /** Resolves once no batch is running. */
  private async idle(): Promise<void> {
    while (this.running) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Runs `change` between batches (the running one aborted first when `abortRunning`). With
   * `afterAdmitted` (a weight change) it first lets every sample admitted before the call finish,
   * so no request is answered from two weight versions: samples admitted later wait meanwhile. A
   * paused engine's queued samples are not waited for: the client paused them across the update.
   */
  private async exclusive<T>(change: () => T | Promise<T>, abortRunning = false, afterAdmitted = false): Promise<T> {
    const limit = this.admitted;
    if (afterAdmitted) this.barriers.add(limit);
    try {
      if (abortRunning && this.running) this.running.aborted = true;
      while (afterAdmitted && (this.running || (!this.paused && !this.fault && this.queue.some((p) => p.seq < limit)))) {
        this.schedule();
        await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      }
      this.locks += 1;
      try {
        await this.idle();
        return await change();
      } finally {
        this.locks -= 1;
      }
    } finally {
      if (afterAdmitted) this.barriers.delete(limit);
      this.schedule();
    }
  }

  /**
   * Stops starting batches. 'abort' also ends the running batch and every queued sample with finish
   * 'abort' (with the ids sampled so far); 'wait' first lets every sample already submitted finish
   * on the current weights; 'keep' leaves queued samples waiting (a running batch completes).
   * Resolves with how many samples were waiting.
   */
  async pause(mode: 'abort' | 'wait' | 'keep'): Promise<number> {
    if (mode === 'wait') {
      const resumes = this.resumes;
      // vLLM's 'wait': without the drain the submitted samples would sample from the next weights.
      const submitted = [...(this.running?.rows ?? []), ...this.queue].map((p) => p.settled);
      await Promise.all(submitted);
      await this.idle();
      // A resume sent while this waited is the client's later word.
      if (this.resumes !== resumes) return this.queue.length;
    }
    this.paused = true;
    this.wakeWaiters();
    if (mode === 'abort') return this.abortAll();
    await this.idle();
    return this.queue.length;
  }

  /** Ends the running batch and every queued sample with finish 'abort'; returns how many were queued. */
  abortAll(): number {
    if (this.running) this.running.aborted = true;
    const waiting = this.queue.length;
    for (const p of this.queue) p.resolve({ outputIds: [], logProbs: [], finish: 'abort', weightVersion: this.weightVersion });
    this.queue = [];
    this.wakeWaiters();
    return waiting;
  }

  resume(): void {
    this.resumes += 1;
    this.paused = false;
    this.schedule();
  }

  /** Resolves once nothing is queued or running (queued samples of a paused engine are aborted). */
  async drain(): Promise<void> {
    while (this.queue.length || this.running) {
      if (this.paused || this.fault) this.abortAll();
      await Promise.all([...(this.running?.rows ?? []), ...this.queue].map((p) => p.settled));
      await this.idle();
    }
  }

  /**
   * Loads `dir` (an HF model directory of the served architecture, or a PEFT adapter for this base)
   * as the weights served, under `version`, once every sample admitted before the call has been
   * answered (aborted first when `abortRunning`). Files are read as a client's (no links). A bad
   * directory throws and leaves the served weights as they were.
   */
  loadWeights(dir: string, version: string, abortRunning = false): Promise<void> {
    return this.exclusive(() => this.swapWeights(dir, version, CONFINED_FILES), abortRunning, true);
  }

  private swapWeights(dir: string, version: string, access: FileAccess): void {
    if (isAdapterDir(dir)) {
      const adapters = loadAdapters(this.model.config, dir, access);
      this.model.attachAdapters(adapters);
    } else {
      const config = readModelConfig(path.join(dir, 'config.json'), access);
      // An update replaces the weights of the model served, as the engines' disk updates do; the
      // sizes are checked before any weight is read.
      const changed = ARCHITECTURE_KEYS.filter((key) => config[key] !== this.model.config[key]);
      if (changed.length) {
        throw new Error(`${dir}/config.json: ${changed.map((key) => `${key} ${String(config[key])} (served: ${String(this.model.config[key])})`).join(', ')}; an update must keep the served model's architecture`);
      }
      const next = modelFromWeights(config, readWeights(dir, config, undefined, access));
      this.model.dispose();
      this.model = next;
      // Adapters belong to a base; a new base drops them.
      this.adapters.forEach((a) => a.dispose());
      this.adapters.clear();
      this.adapterDirs.clear();
    }
    this.weightsPath = dir;
    this.weightVersion = version;
  }

  /**
   * Loads a PEFT adapter under `name` between batches; a name in use is replaced only when
   * `inPlace`, and then once every sample admitted before the call has been answered, so no request
   * is answered from two versions of one adapter.
   */
  loadAdapter(name: string, dir: string, inPlace: boolean): Promise<void> {
    return this.exclusive(
      () => {
        if (this.adapters.has(name) && !inPlace) throw new Error(`LoRA adapter '${name}' is already loaded; unload it first or pass load_inplace`);
        const adapters = loadAdapters(this.model.config, dir, CONFINED_FILES);
        this.adapters.get(name)?.dispose();
        this.adapters.set(name, adapters);
        this.adapterDirs.set(name, dir);
      },
      false,
      this.adapters.has(name),
    );
  }

  /** Unloads an adapter once the samples admitted before the call (which may name it) are answered; false when none has that name. */
  unloadAdapter(name: string): Promise<boolean> {
    return this.exclusive(
      () => {
        const adapters = this.adapters.get(name);
        if (!adapters) return false;
        adapters.dispose();
        this.adapters.delete(name);
        this.adapterDirs.delete(name);
        return true;
      },
      false,
      this.adapters.has(name),
    );
  }

  /** Back to the base weights as started, version '0' (a test's simulated restart). */
  restartToBase(): Promise<void> {
    return this.exclusive(() => {
      this.swapWeights(this.baseDir, '0', OPERATOR_FILES);
      this.model.adapters?.dispose();
      this.model.adapters = undefined;
    });
  }

  /** Aborts everything and frees the model (call after the running batch has ended: drain()). */
  dispose(): void {
    this.paused = true;
    this.abortAll();
    this.model.dispose();
    this.adapters.forEach((a) => a.dispose());
  }
}

/** What a weight update may not change. */
const ARCHITECTURE_KEYS = [
  'modelType',
  'vocabSize',
  'hiddenSize',
  'intermediateSize',
  'numLayers',
  'numHeads',
  'numKVHeads',
  'headDim',
  'maxPositions',
  'tieWordEmbeddings',
  'qkvBias',
  'outputBias',
  'mlpBias',
] as const satisfies readonly (keyof ModelConfig)[];

/**
 * Samples that may share a batch: same sampling settings and adapter (lengths and seeds are per
 * row). Rows whose logits are changed (logit_bias, min_tokens) or whose tokens are scripted draw in
 * JavaScript, which takes the whole batch off the native sampler: they batch apart, so no other
 * request's draws depend on theirs sharing its batch.
 */
function batchKey(s: SampleSpec): string {
  const drawsInJs = Boolean(s.logitBias?.size || (s.minNewTokens ?? 0) > 0 || s.forcedIds);
  return JSON.stringify([s.temperature, s.topP, s.topK, s.ignoreEos, [...s.stopTokenIds].sort((a, b) => a - b), s.adapter ?? null, drawsInJs]);
}
