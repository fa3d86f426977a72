// rollout.name sglang | vllm: sampling on inference servers. Before sampling with new weights the
// policy is written to rollout.server.weights_dir/v{N} (atomically) and loaded on every live server.
// Each prompt's group goes to the least-loaded server; a sample whose server fails (connect error,
// 5xx, timeout, dropped answer, abort) is drawn again whole on another server; a server failing
// twice in a row is ejected, probed at the next step and given the current weights before it serves
// again. Samples from weights more than max_staleness versions old are dropped and drawn again.
import fs from 'node:fs';
import path from 'node:path';
import { inject, injectable, optional } from 'inversify';
import type { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { Metrics, Rollout, RolloutPolicy, SamplingSettings } from '../contracts/index.js';
import { InputError, RolloutUnavailable } from '../errors.js';
import { writeDirectoryAtomically } from '../model/checkpoint.js';
import { sampleSeed } from '../model/generate.js';
import { responseLogProbs } from '../model/logprobs.js';
import { TOKENS } from '../tokens.js';
import { sequencesFromSamples } from '../workers/sequences.js';
import type { TurnSampler } from './agent-loop.js';
import { MultiTurn } from './multi-turn.js';
import { Rng } from '../random.js';
import { ServerCallError, SglangClient, VllmClient, type RolloutServerClient, type SampleResult } from './clients.js';

/** Weight-update aborts one sample may meet under the async trainer before one counts as a failure. */
const MAX_UPDATE_ABORTS = 64;
/** Consecutive failures after which a server is ejected until it answers a probe. */
const EJECT_AFTER_FAILURES = 2;
/** Weight versions kept on disk (a server may still be reading the previous one). */
const KEPT_VERSIONS = 2;
/**
 * Mean |prompt log-prob difference| (server against trainer, over the probe's tokens) above which a
 * vLLM server is taken not to hold the policy's weights, by the engine's dtype, unless
 * rollout.server.weight_check_tolerance sets it. float32: an engine that computes as the trainer does
 * differs by rounding alone (under 1e-5 here). 16-bit: measured with the project's own bf16 path
 * (scripts/bf16-logprob-error.ts; figures in docs/rollout-servers.md): weight rounding alone moves the
 * fixtures' log-probs by 0.008-0.018 on average, up to 0.023 on one probe, and a bf16 engine also
 * rounds its activations; the default leaves a margin of about 3.5 over the largest.
 */
export const WEIGHT_CHECK_TOLERANCES = { float32: 0.02, '16-bit': 0.08 } as const;
const TOLERANCE_KEY = 'actor_rollout_ref.rollout.server.weight_check_tolerance';
/** Tokens sampled by the probe that asks a vLLM server which log-probs it reports. */
const MODE_PROBE_TOKENS = 8;
/** Event-loop turns dispatched() gives the transport to put a round's requests on the wire. */
const DISPATCH_TURNS = 32;
/** Probe rounds, one second apart, before a step gives up when no server is live. */
const PROBE_ROUNDS = 3;

interface ServerState {
  client: RolloutServerClient;
  live: boolean;
  /** The policy version this server holds (-1: unknown, so it needs the current weights). */
  version: number;
  failures: number;
  /** Samples sent and not yet answered. */
  inFlight: number;
  /** Samples assigned to it this step (balancing counts them before they are sent). */
  assigned: number;
  /** Callers waiting for a free slot. */
  waiters: (() => void)[];
  /** vLLM: the dtype the engine reports (null: it does not say; undefined: not asked yet). */
  dtype?: string | null;
  /** vLLM: whether its log-probs were checked to be at the run's temperature (--logprobs-mode). */
  modeChecked: boolean;
  /** Why it was last ejected. */
  lastError?: string;
  /** A weight load in progress on it. */
  pushing?: Promise<void>;
}

/** One weight check: the mean |difference| the probe measured, and what it was held to. */
interface WeightCheck {
  ok: boolean;
  diff: number;
  tolerance: number;
  /** Where the tolerance came from: the key, or the engine's dtype. */
  basis: string;
  tokens: number;
}

/** A sample, the server that drew it, and the policy version that drew each of its tokens. */
interface ServedSample extends SampleResult {
  server: ServerState;
  tokenVersions: number[];
}

/** The per-row column of the version that drew each response token (a resumed partial rollout spans several). */
export const TOKEN_WEIGHT_VERSIONS = 'token_weight_versions';

/** Counters of one generateSequences call. */
interface RoundCounters {
  /** Partial rollouts resumed after a weight update aborted them. */
  resumed: number;
  /** Samples a weight update aborted that were sent again from the start (no tokens kept). */
  updateRedraws: number;
  retries: number;
  staleDropped: number;
  ejections: number;
  rejoins: number;
}

/** Rollouts on SGLang or vLLM servers (or `flowrl serve`, which speaks both). */
@injectable()
export class ServerRollout implements Rollout {
  private policy!: RolloutPolicy;
  private servers: ServerState[] = [];
  /** The policy version: bumped by every update or restore. */
  private version = 0;
  /** The version written to disk and pushed to the live servers (-1: none yet). */
  private pushedVersion = -1;
  /** Tells this process's versions from those another run left on a server. */
  private readonly runTag = Date.now().toString(36);
  private isAdapter = false;
  /** The prompt vLLM's weights are checked with, and the trainer's log-probs of it at a version. */
  private probeIds?: number[];
  /** The trainer's log-probs of the probe, by policy version (the last two). */
  private readonly expectedProbes = new Map<number, number[]>();
  /** Rounds whose requests are not all started yet. */
  private readonly dispatching = new Set<Promise<void>>();
  /** Rounds whose weights are not yet written and loaded. */
  private readonly syncing = new Set<Promise<unknown>>();

  constructor(
    @inject(TOKENS.Config) protected readonly config: Config,
    @inject(MultiTurn) @optional() protected readonly multiTurn?: MultiTurn,
  ) {}

  private get settings() {
    return this.config.actor_rollout_ref.rollout.server;
  }

  /** The async trainer's rollouts: weight updates land while samples run (their pause aborts them). */
  private get asyncMode(): boolean {
    return this.config.trainer.v1.trainer_mode === 'separate_async';
  }

  /** Whether a sample aborted by a weight update resumes from its tokens (the async trainer's partial rollouts). */
  private get resumesPartial(): boolean {
    return this.asyncMode && this.config.trainer.v1.partial_rollout;
  }

  async attach(policy: RolloutPolicy): Promise<void> {
    this.policy = policy;
    const key = (k: string) => `actor_rollout_ref.rollout.server.${k}`;
    const s = this.settings;
    const dialect = this.config.actor_rollout_ref.rollout.name;
    const urls = ([] as string[]).concat(s.urls ?? []);
    if (!urls.length) throw new InputError(`${key('urls')} is empty; rollout.name ${dialect} needs the servers' base URLs (for example [http://127.0.0.1:30000])`);
    for (const url of urls) {
      let parsed: URL | undefined;
      try {
        parsed = new URL(url);
      } catch {
        parsed = undefined;
      }
      if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) throw new InputError(`${key('urls')}: '${url}' is not an http(s) URL`);
    }
    if (new Set(urls).size !== urls.length) throw new InputError(`${key('urls')} lists a server twice`);
    if (!(s.timeout_s > 0)) throw new InputError(`${key('timeout_s')} must be a positive number of seconds; got ${s.timeout_s}`);
    if (!Number.isInteger(s.max_retries) || s.max_retries < 0) throw new InputError(`${key('max_retries')} must be a whole number >= 0; got ${s.max_retries}`);
    if (!Number.isInteger(s.max_staleness) || s.max_staleness < 0) throw new InputError(`${key('max_staleness')} must be a whole number >= 0; got ${s.max_staleness}`);
    if (!Number.isInteger(s.max_inflight) || s.max_inflight < 1) throw new InputError(`${key('max_inflight')} must be a whole number >= 1; got ${s.max_inflight}`);
    if (s.api_key !== null && (typeof s.api_key !== 'string' || !s.api_key)) throw new InputError(`${key('api_key')} must be a non-empty string or null`);
    if (s.admin_api_key !== null && (typeof s.admin_api_key !== 'string' || !s.admin_api_key)) throw new InputError(`${key('admin_api_key')} must be a non-empty string or null`);
    // vLLM v0.20.2 has no admin key (its --api-key guards the /v1 routes; the dev routes stay open).
    if (s.admin_api_key !== null && dialect !== 'sglang') throw new InputError(`${key('admin_api_key')} is SGLang's --admin-api-key; rollout.name ${dialect} has no admin key (set it to null)`);
    const tolerance = s.weight_check_tolerance;
    if (tolerance !== null && !(typeof tolerance === 'number' && Number.isFinite(tolerance) && tolerance > 0)) throw new InputError(`${key('weight_check_tolerance')} must be a positive number of nats (mean |log-prob difference|) or null (by the engine's dtype); got ${JSON.stringify(tolerance)}`);
    const options = {
      timeoutMs: s.timeout_s * 1000,
      apiKey: s.api_key ?? (process.env.FLOWRL_ROLLOUT_API_KEY || undefined),
      adminApiKey: dialect === 'sglang' ? (s.admin_api_key ?? (process.env.FLOWRL_ROLLOUT_ADMIN_API_KEY || undefined)) : undefined,
    };
    this.servers = urls.map((url) => ({
      client: dialect === 'vllm' ? new VllmClient(url.replace(/\/+$/, ''), options) : new SglangClient(url.replace(/\/+$/, ''), options),
      live: true,
      version: -1,
      failures: 0,
      inFlight: 0,
      assigned: 0,
      waiters: [],
      modeChecked: false,
    }));
  }

  get weightsDir(): string {
    return path.resolve(this.settings.weights_dir ?? path.join(this.config.trainer.default_local_dir!, 'rollout_weights'));
  }

  policyChanged(): void {
    this.version += 1;
  }

  /** The label servers know version `v` by (an adapter name with LoRA). */
  private label(v: number): string {
    return `${this.runTag}.${v}`;
  }

  /** Policy version of a label this run gave, or -1 (another run's, or the base weights). */
  private versionOf(label: string | undefined): number {
    if (label === undefined) return -1;
    const [tag, v] = label.split('.');
    return tag === this.runTag && /^\d+$/.test(v ?? '') ? Number(v) : -1;
  }

  async generateSequences(prompts: Batch, sampling: SamplingSettings): Promise<Batch> {
    const dialect = this.config.actor_rollout_ref.rollout.name;
    if (dialect === 'vllm' && !sampling.greedy && sampling.temperature !== 0 && (sampling.topP < 1 || sampling.topK > 0)) {
      // vLLM's processed logprobs are renormalised over the kept tokens; the trainer's cover the whole
      // vocabulary, so every TIS weight would carry the kept mass. SGLang's are before filtering.
      throw new InputError(
        `rollout.name vllm with top_p ${sampling.topP} and top_k ${sampling.topK}: vLLM returns log-probs after top-k/top-p renormalisation while the trainer scores over the whole vocabulary, so the TIS weights would be wrong. Sample with top_p 1.0 and top_k -1 on vLLM, or use SGLang (its log-probs are taken before filtering, as the trainer's)`,
      );
    }
    let markDispatched!: () => void;
    const dispatched = new Promise<void>((resolve) => (markDispatched = resolve));
    this.dispatching.add(dispatched);
    try {
      return await this.sampleRound(prompts, sampling, markDispatched);
    } finally {
      markDispatched();
      this.dispatching.delete(dispatched);
    }
  }

  /**
   * Resolves once every round in progress has synced its weights and started each sample's request,
   * then gives the event loop DISPATCH_TURNS turns to open connections and write them (64 requests
   * reach a local server within 20), so the caller's computing does not hold them back.
   */
  /** Resolves once every round in progress has its weights written and loaded (a failed sync is its round's to report). */
  async synced(): Promise<void> {
    await Promise.all([...this.syncing].map((p) => p.catch(() => undefined)));
  }

  async dispatched(): Promise<void> {
    await Promise.all(this.dispatching);
    for (let turn = 0; turn < DISPATCH_TURNS; turn++) await new Promise((resolve) => setImmediate(resolve));
  }

  private async sampleRound(prompts: Batch, sampling: SamplingSettings, markDispatched: () => void): Promise<Batch> {
    const counters: RoundCounters = { resumed: 0, updateRedraws: 0, retries: 0, staleDropped: 0, ejections: 0, rejoins: 0 };
    const promptIds = prompts.column<number[]>('prompt_ids');
    // vLLM's weight check scores one of the run's own prompts (ids its vocabulary surely holds).
    this.probeIds ??= promptIds[0].slice(0, 32);
    const syncStarted = performance.now();
    // The weights are read while they are written: the caller waits (synced) before changing them.
    const syncing = this.sync(counters);
    this.syncing.add(syncing);
    try {
      await syncing;
    } finally {
      this.syncing.delete(syncing);
    }
    await this.checkLogprobsMode();
    const syncSeconds = (performance.now() - syncStarted) / 1000;
    const sampledVersion = this.version;
    let waiting = promptIds.length;
    const started = () => {
      waiting -= 1;
      if (waiting === 0) markDispatched();
    };

    const uids = prompts.has('uid') ? prompts.column<string>('uid') : promptIds.map((_, i) => String(i));
    const groups = new Map<string, number[]>();
    uids.forEach((uid, row) => (groups.get(uid) ?? groups.set(uid, []).get(uid)!).push(row));
    this.servers.forEach((s) => (s.assigned = 0));
    // A prompt group shares a server (its prefix cached once).
    const homes: (ServerState | undefined)[] = new Array(promptIds.length);
    for (const rows of groups.values()) {
      const home = this.leastLoaded(new Set());
      if (home) home.assigned += rows.length;
      rows.forEach((row) => (homes[row] = home));
    }
    const out = this.multiTurn?.enabled
      ? await this.multiTurn.rollOut(prompts, this.turnSampler(sampling, homes, counters, sampledVersion, started), sampling.maxNewTokens, this.policy.padTokenId)
      : await this.singleTurn(prompts, sampling, homes, counters, sampledVersion, started);
    const metrics: Metrics = {
      ...((out.meta.metrics as Metrics | undefined) ?? {}),
      'rollout/servers_live': this.servers.filter((s) => s.live).length,
      'rollout/retries': counters.retries,
      'rollout/partial_resumed': counters.resumed,
      'rollout/update_redraws': counters.updateRedraws,
      'rollout/stale_dropped': counters.staleDropped,
      'rollout/ejections': counters.ejections,
      'rollout/rejoins': counters.rejoins,
      // The weights the round sampled with (under trainer.one_step_off_policy, one update behind).
      'rollout/weight_version': sampledVersion,
      'timing_s/weight_sync': syncSeconds,
    };
    out.meta = { ...out.meta, metrics };
    return out;
  }

  /** One sample per row, packed with the servers' log-probs as rollout_log_probs. */
  private async singleTurn(prompts: Batch, sampling: SamplingSettings, homes: (ServerState | undefined)[], counters: RoundCounters, sampledVersion: number, started: () => void): Promise<Batch> {
    const promptIds = prompts.column<number[]>('prompt_ids');
    const results = await Promise.all(promptIds.map((ids, row) => this.sample(row, ids, sampling, homes[row], counters, started)));
    await this.confirmWeights(results, promptIds, sampling, counters, sampledVersion);
    const R = sampling.maxNewTokens;
    const out = prompts.select([]);
    const packed = sequencesFromSamples(promptIds, results.map((r) => r.outputIds.slice(0, R)), R, this.policy.padTokenId);
    for (const [key, tensor] of Object.entries(packed)) out.set(key, tensor);
    const rolloutLogProbs = new Float32Array(results.length * R);
    results.forEach((r, b) => rolloutLogProbs.set(r.logProbs.slice(0, R), b * R));
    out.set('rollout_log_probs', { shape: [results.length, R], data: rolloutLogProbs });
    out.setColumn(TOKEN_WEIGHT_VERSIONS, results.map((r) => r.tokenVersions.slice(0, R)));
    return out;
  }

  /**
   * Multi-turn: each turn of each conversation is one request with the whole conversation's ids
   * (the dialects' token-in routes) and the row's seed for that turn (as local sampling derives it),
   * on the row's home server; a turn's samples are checked against the weights like a round's.
   */
  private turnSampler(sampling: SamplingSettings, homes: (ServerState | undefined)[], counters: RoundCounters, sampledVersion: number, started: () => void): TurnSampler {
    const chunk = this.config.actor_rollout_ref.rollout.generation_batch_size;
    return async (contexts, budgets, turn, rows) => {
      const draw = (i: number, home: ServerState | undefined, onStart?: () => void) => {
        const row = (sampling.firstRow ?? 0) + rows[i];
        const seed = turn ? Rng.deriveSeed(sampleSeed(sampling.seed, row, chunk), turn) : sampleSeed(sampling.seed, row, chunk);
        return this.sample(rows[i], contexts[i], { ...sampling, maxNewTokens: budgets[i] }, home, counters, onStart, seed);
      };
      const results = await Promise.all(rows.map((row, i) => draw(i, homes[row], turn === 0 ? started : undefined)));
      // A sample from a server that lost the weights is drawn again elsewhere: the same row, turn seed and budget.
      await this.confirmWeights(results, contexts, sampling, counters, sampledVersion, (i) => draw(i, undefined));
      return { tokens: results.map((r, i) => r.outputIds.slice(0, budgets[i])), logProbs: results.map((r) => r.logProbs) };
    };
  }

  /** Draws one sample, again on another server for as long as retries and servers last. */
  private async sample(row: number, inputIds: number[], sampling: SamplingSettings, home: ServerState | undefined, counters: RoundCounters, started?: () => void, turnSeed?: number): Promise<ServedSample> {
    // The seed belongs to the sample, not the server: on vLLM and flowrl serve a retry elsewhere
    // draws the same stream (and flowrl serve what local sampling would); SGLang honours it only
    // when started with --enable-deterministic-inference, so there a retry is another draw.
    const seed = turnSeed ?? sampleSeed(sampling.seed, (sampling.firstRow ?? 0) + row, this.config.actor_rollout_ref.rollout.generation_batch_size);
    const tried = new Set<ServerState>();
    let lastError = '';
    // A partial rollout's tokens so far (trainer.v1.partial_rollout): kept across a weight update's abort.
    const kept: { ids: number[]; logProbs: number[]; versions: number[] } = { ids: [], logProbs: [], versions: [] };
    let first = true;
    let aborts = 0;
    for (let attempt = 0; attempt <= this.settings.max_retries; ) {
      const server = home && home.live && !tried.size ? home : (this.leastLoaded(tried) ?? this.leastLoaded(new Set()) ?? (await this.recoverOrFail(counters, lastError)));
      await this.acquire(server);
      try {
        const request = server.client.generate({
          // Resumed: the kept tokens join the prompt (the server rebuilds their cache) and the rest is drawn.
          inputIds: kept.ids.length ? [...inputIds, ...kept.ids] : inputIds,
          maxNewTokens: sampling.maxNewTokens - kept.ids.length,
          temperature: sampling.greedy ? 0 : sampling.temperature,
          topP: sampling.topP,
          topK: sampling.topK,
          stopTokenIds: this.policy.stopTokenIds,
          seed: kept.ids.length ? Rng.deriveSeed(seed, kept.ids.length) : seed,
          adapter: this.isAdapter ? this.label(server.version) : undefined,
          // Unique among concurrent calls too (async groups each number their rows from 0): the step's seed and the row in the step.
          requestId: `flowrl-${this.runTag}-${this.version}-${sampling.seed}-${(sampling.firstRow ?? 0) + row}-${attempt}${kept.ids.length ? `-r${kept.ids.length}` : ''}`,
        });
        if (first) started?.();
        first = false;
        const result = await request;
        const sampledBy = result.weightVersion !== undefined ? this.versionOf(result.weightVersion) : server.version;
        if (result.finish === 'abort' && this.asyncMode && aborts++ < MAX_UPDATE_ABORTS) {
          // Under the async trainer an abort is a weight update's pause (SGLang's pause_generation), not a
          // failure: the sample goes on under the new weights, from its tokens with partial rollouts
          // (each with the version that drew it), else from the start. One cut before its first token
          // is simply sent again.
          if (this.resumesPartial && result.outputIds.length && sampledBy >= 0) {
            kept.ids.push(...result.outputIds);
            kept.logProbs.push(...result.logProbs);
            kept.versions.push(...result.outputIds.map(() => sampledBy));
            counters.resumed += 1;
            if (kept.ids.length >= sampling.maxNewTokens || this.policy.stopTokenIds.includes(kept.ids[kept.ids.length - 1])) {
              return { outputIds: kept.ids, logProbs: kept.logProbs, finish: kept.ids.length < sampling.maxNewTokens ? 'stop' : 'length', weightVersion: result.weightVersion, server, tokenVersions: kept.versions };
            }
          } else counters.updateRedraws += 1;
          continue;
        }
        if (result.finish === 'abort') throw new ServerCallError(`${server.client.url}: the sample was aborted`, true);
        server.failures = 0;
        if (sampledBy < 0 || this.version - sampledBy > this.settings.max_staleness) {
          // The server lost our weights (a restart): it must take them again before serving.
          counters.staleDropped += 1;
          attempt += 1;
          this.eject(server, counters);
          lastError = `${server.client.url} sampled with weight version ${result.weightVersion ?? 'unknown'}; the policy is at ${this.label(this.version)}`;
          continue;
        }
        if (!kept.ids.length) return { ...result, server, tokenVersions: result.outputIds.map(() => sampledBy) };
        return {
          ...result,
          outputIds: [...kept.ids, ...result.outputIds],
          logProbs: [...kept.logProbs, ...result.logProbs],
          server,
          tokenVersions: [...kept.versions, ...result.outputIds.map(() => sampledBy)],
        };
      } catch (e) {
        if (!(e instanceof ServerCallError) || !e.retryable) throw e instanceof ServerCallError ? new InputError(`rollout server ${e.message}`) : e;
        lastError = e.message;
        if (e.lostWeights) {
          // It answers, but without our weights: it rejoins once it has taken them again.
          attempt += 1;
          this.eject(server, counters);
          continue;
        }
        counters.retries += 1;
        attempt += 1;
        tried.add(server);
        server.failures += 1;
        if (server.failures >= EJECT_AFTER_FAILURES) this.eject(server, counters);
      } finally {
        this.release(server);
      }
    }
    throw new RolloutUnavailable(`sample ${row} failed ${this.settings.max_retries + 1} times (actor_rollout_ref.rollout.server.max_retries ${this.settings.max_retries}); last: ${lastError}`);
  }

  /**
   * vLLM tags no sample with the weights that drew it: after a round with full weights, each server
   * that answered is asked whether it still holds them (its probe fingerprint); the samples of one
   * that lost them (a restart to its launch weights) are dropped and drawn again elsewhere.
   */
  private async confirmWeights(
    results: ServedSample[],
    promptIds: number[][],
    sampling: SamplingSettings,
    counters: RoundCounters,
    sampledVersion: number,
    redraw: (i: number) => Promise<ServedSample> = (row) => this.sample(row, promptIds[row], sampling, undefined, counters),
  ): Promise<void> {
    if (!this.checksByProbe()) return;
    const answered = [...new Set(results.map((r) => r.server))];
    const lost = new Set<ServerState>();
    const reasons = new Map<ServerState, string>();
    await Promise.all(
      answered.map(async (server) => {
        // Against the weights the round sampled with (under one_step_off_policy the policy has moved on).
        try {
          const check = await this.holdsPolicy(server, sampledVersion);
          if (!check.ok) reasons.set(server, `${server.client.url}: after a round of samples, ${describeCheck(check)}`);
        } catch (e) {
          reasons.set(server, `${server.client.url}: the weight check failed: ${(e as Error).message}`);
        }
        if (reasons.has(server)) lost.add(server);
      }),
    );
    if (!lost.size) return;
    lost.forEach((server) => this.eject(server, counters, reasons.get(server)));
    const rows = results.flatMap((r, row) => (lost.has(r.server) ? [row] : []));
    counters.staleDropped += rows.length;
    await Promise.all(rows.map(async (row) => (results[row] = await redraw(row))));
  }

  /** vLLM with full weights: no version to read, so the weights are checked by their log-probs. */
  private checksByProbe(): boolean {
    return this.config.actor_rollout_ref.rollout.name === 'vllm' && !this.isAdapter;
  }

  /**
   * Whether a vLLM server serves the policy's current weights: its prompt log-probs of a probe (one
   * of the run's prompts) within the weight-check tolerance of the trainer's own, on average.
   */
  private async holdsPolicy(server: ServerState, version = this.version): Promise<WeightCheck> {
    const probe = this.probeIds;
    const tolerance = await this.tolerance(server);
    if (!probe || probe.length < 2) return { ok: true, diff: 0, ...tolerance, tokens: 0 };
    if (!this.expectedProbes.has(version)) {
      // Only the current weights can be scored; an older version unseen so far cannot be checked.
      if (version !== this.version) return { ok: true, diff: 0, ...tolerance, tokens: 0 };
      this.expectedProbes.set(version, (await responseLogProbs(this.policy.module.lm, [probe.slice(0, 1)], [probe.slice(1)], 1))[0]);
      for (const v of this.expectedProbes.keys()) if (v < version - 1) this.expectedProbes.delete(v);
    }
    const expected = this.expectedProbes.get(version)!;
    const got = await (server.client as VllmClient).promptLogProbs(probe);
    const diff = meanAbsDifference(got, expected);
    return { ok: diff <= tolerance.tolerance, diff, ...tolerance, tokens: got.length };
  }

  /**
   * The weight check's tolerance for a server: the key's when set, else the figure for the dtype the
   * engine reports (vLLM's dev-mode /server_info). A server that does not say is taken to compute in
   * float32: full weights on vLLM need dev mode, which has the route, so that is an engine such as
   * flowrl serve (float32) behind vLLM's routes.
   */
  private async tolerance(server: ServerState): Promise<{ tolerance: number; basis: string }> {
    const set = this.settings.weight_check_tolerance;
    if (set !== null) return { tolerance: set, basis: `${TOLERANCE_KEY} ${set}` };
    if (server.dtype === undefined && server.client instanceof VllmClient) {
      try {
        server.dtype = (await server.client.engineDtype()) ?? null;
      } catch {
        // Not known this time (a transient failure, or a key the route wants): asked again next check.
      }
    }
    const dtype = server.dtype ?? null;
    const sixteen = dtype !== null && /bfloat16|float16|half/i.test(dtype);
    const tolerance = WEIGHT_CHECK_TOLERANCES[sixteen ? '16-bit' : 'float32'];
    return { tolerance, basis: `the default for a ${dtype === null ? 'server that reports no dtype (taken as float32)' : `${dtype} engine`}; ${TOLERANCE_KEY} sets it` };
  }

  /**
   * vLLM's sample log-probs follow its --logprobs-mode: raw_logprobs (the default) are the model's
   * before temperature, processed_logprobs after it, as the trainer scores them. vLLM v0.20.2 reports
   * the mode only in dev mode's /server_info, so each server is asked by its answers instead, once
   * (and again after it rejoins): a short sample at the run's temperature, whose log-probs are
   * compared with the trainer's own score of the sampled ids at that temperature and at 1. Closer to
   * the score at 1, and off the one at the temperature by more than the weight-check tolerance, is raw
   * mode: every rollout log-prob, TIS weight and log-prob difference of the run would be wrong, so
   * the run stops (exit 2) with the flag to add. At temperature 1 the two modes agree (top-p and
   * top-k are refused with vLLM), so nothing is asked.
   */
  private async checkLogprobsMode(): Promise<void> {
    if (this.config.actor_rollout_ref.rollout.name !== 'vllm') return;
    const temperature = this.config.actor_rollout_ref.rollout.temperature;
    const probe = this.probeIds;
    if (!(temperature > 0) || Math.abs(temperature - 1) < 1e-6 || !probe?.length) return;
    await Promise.all(
      this.servers
        .filter((s) => s.live && !s.modeChecked && s.version === this.version)
        .map(async (server, i) => {
          let sample: SampleResult;
          try {
            sample = await server.client.generate({
              inputIds: probe,
              maxNewTokens: MODE_PROBE_TOKENS,
              temperature,
              topP: 1,
              topK: -1,
              stopTokenIds: [],
              seed: i,
              adapter: this.isAdapter ? this.label(server.version) : undefined,
              requestId: `flowrl-${this.runTag}-mode-probe-${this.version}-${i}`,
            });
          } catch (e) {
            // A failing server is the sampling's to deal with; it is asked again next round.
            if (e instanceof ServerCallError) return;
            throw e;
          }
          if (!sample.outputIds.length) return;
          const lm = this.policy.module.lm;
          const atTemperature = meanAbsDifference(sample.logProbs, (await responseLogProbs(lm, [probe], [sample.outputIds], temperature))[0]);
          const atOne = meanAbsDifference(sample.logProbs, (await responseLogProbs(lm, [probe], [sample.outputIds], 1))[0]);
          const { tolerance } = await this.tolerance(server);
          if (atTemperature <= tolerance) {
            server.modeChecked = true;
            return;
          }
          if (atOne < atTemperature) {
            throw new InputError(
              `rollout server ${server.client.url} returns log-probs before temperature (vLLM's --logprobs-mode raw_logprobs, its default), while actor_rollout_ref.rollout.temperature is ${temperature}: on a probe of ${sample.outputIds.length} sampled tokens its log-probs differ from the trainer's at T = ${temperature} by ${atTemperature.toFixed(4)} on average and from the trainer's at T = 1 by ${atOne.toFixed(4)}, so every rollout log-prob, TIS weight and log-prob difference would be wrong. Restart it with --logprobs-mode processed_logprobs`,
            );
          }
          // Neither: not a mode question (the weights differ); the weight check deals with that.
        }),
    );
  }

  /** The live server with the fewest samples assigned and in flight, not in `exclude`. */
  private leastLoaded(exclude: Set<ServerState>): ServerState | undefined {
    let best: ServerState | undefined;
    for (const s of this.servers) {
      if (!s.live || exclude.has(s)) continue;
      if (!best || s.assigned + s.inFlight < best.assigned + best.inFlight) best = s;
    }
    return best;
  }

  private async acquire(server: ServerState): Promise<void> {
    while (server.inFlight >= this.settings.max_inflight) await new Promise<void>((resolve) => server.waiters.push(resolve));
    server.inFlight += 1;
  }

  private release(server: ServerState): void {
    server.inFlight -= 1;
    server.waiters.shift()?.();
  }

  private eject(server: ServerState, counters: RoundCounters, reason?: string): void {
    if (!server.live) return;
    server.live = false;
    server.version = -1;
    // A server that comes back may have been restarted with other flags or another engine.
    server.modeChecked = false;
    server.dtype = undefined;
    server.lastError = reason;
    counters.ejections += 1;
    if (this.config.trainer.progress) process.stderr.write(`\n[flowrl] rollout server ${server.client.url} ejected (${reason ?? 'failing'}); it rejoins once it answers and takes the current weights\n`);
  }

  /** Brings back ejected servers that answer (with the current weights); throws when none is live. */
  private async recoverOrFail(counters: RoundCounters, lastError: string): Promise<ServerState> {
    for (let round = 0; round < PROBE_ROUNDS; round++) {
      await this.rejoin(counters);
      const server = this.leastLoaded(new Set());
      if (server) return server;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const reasons = this.servers.flatMap((s) => (s.lastError ? [s.lastError] : []));
    throw new RolloutUnavailable(`every rollout server is down (${this.servers.map((s) => s.client.url).join(', ')}); last error: ${lastError || 'none answered a probe'}${reasons.length ? `; ejected: ${reasons.join('; ')}` : ''}`);
  }

  /** Probes ejected servers; one that answers gets the current weights and serves again. */
  private async rejoin(counters: RoundCounters): Promise<void> {
    await Promise.all(
      this.servers
        .filter((s) => !s.live)
        .map(async (s) => {
          if (!(await s.client.health())) return;
          try {
            await this.push(s);
            s.live = true;
            s.failures = 0;
            counters.rejoins += 1;
          } catch {
            // Still not ready: probed again next time.
          }
        }),
    );
  }

  /** Writes the current weights once per version and loads them on every live server; ejected ones rejoin first. */
  private async sync(counters: RoundCounters): Promise<void> {
    await this.rejoin(counters);
    await Promise.all(
      this.servers
        .filter((s) => s.live)
        .map(async (s) => {
          try {
            if (s.version === this.version) return;
            await this.push(s);
          } catch (e) {
            if (e instanceof ServerCallError && !e.retryable) throw new InputError(`rollout server ${e.message}`);
            this.eject(s, counters, (e as Error).message);
          }
        }),
    );
    if (!this.servers.some((s) => s.live)) await this.recoverOrFail(counters, 'no server took the weights');
  }

  /** Writes the current weights to disk once per version. */
  private writeCurrent(): Promise<void> {
    if (this.pushedVersion === this.version) return Promise.resolve();
    // Servers pushed at once share one write of a version.
    if (this.writing?.version === this.version) return this.writing.done;
    const version = this.version;
    const dir = path.join(this.weightsDir, `v${version}`);
    const done = writeDirectoryAtomically(dir, async (tmp) => void (this.isAdapter = (await this.policy.writeWeights(tmp)).adapter)).then(() => {
      this.pushedVersion = version;
      this.pruneVersions();
    });
    this.writing = { version, done };
    return done;
  }

  /** The weights being written, while they are. */
  private writing?: { version: number; done: Promise<void> };

  /** Loads the current version on one server (written first if it is new) and records it. */
  private async push(server: ServerState): Promise<void> {
    // One load at a time per server: rounds launched together (the async trainer's groups) would
    // otherwise interleave their pauses and loads, and one finishing late could leave older weights
    // on a server taken to hold newer ones.
    while (server.pushing) await server.pushing;
    if (server.version === this.version) return;
    const pushing = this.load(server);
    server.pushing = pushing;
    try {
      await pushing;
    } finally {
      server.pushing = undefined;
    }
  }

  /** Loads the current version on one server; it is recorded as the version loaded, whatever moved meanwhile. */
  private async load(server: ServerState): Promise<void> {
    const version = this.version;
    // A server rejoining while a round sampled for the next step is in flight gets the newest weights.
    await this.writeCurrent();
    const dir = path.join(this.weightsDir, `v${version}`);
    const label = this.label(version);
    await server.client.loadWeights(dir, label, this.isAdapter);
    // vLLM cannot report what it loaded (reload_weights only logs weights it skipped): check.
    if (this.checksByProbe()) {
      const check = await this.holdsPolicy(server, version);
      if (!check.ok) throw new ServerCallError(`${server.client.url}: after loading ${dir}, ${describeCheck(check)}`, true);
    }
    // Adapters are loaded per version: the one before the previous is no longer named by any request.
    if (this.isAdapter) await server.client.unloadAdapter(this.label(version - KEPT_VERSIONS));
    server.version = version;
  }

  private pruneVersions(): void {
    const keep = new Set(Array.from({ length: KEPT_VERSIONS }, (_, i) => `v${this.version - i}`));
    for (const name of fs.readdirSync(this.weightsDir)) {
      if (/^v\d+$/.test(name) && !keep.has(name)) fs.rmSync(path.join(this.weightsDir, name), { recursive: true, force: true });
    }
  }

  async dispose(): Promise<void> {
    this.servers.forEach((s) => s.waiters.splice(0).forEach((w) => w()));
  }
}

/** The mean of |a_i - b_i| over a's entries. */
function meanAbsDifference(a: number[], b: number[]): number {
  return a.length ? a.reduce((sum, v, i) => sum + Math.abs(v - b[i]), 0) / a.length : 0;
}

/** A failed weight check in words: what was compared, how far apart, and the tolerance with its key. */
function describeCheck(check: WeightCheck): string {
  return `the mean |prompt log-prob difference| between the server (vLLM prompt_logprobs, T = 1) and the trainer over the probe's ${check.tokens} tokens is ${check.diff.toFixed(4)}, above the tolerance ${check.tolerance} (${check.basis}): it does not hold the policy's weights`;
}
