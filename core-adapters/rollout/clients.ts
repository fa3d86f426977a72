// The two wire dialects a rollout server speaks: SGLang's native routes (as of SGLang v0.5.18) and
// vLLM's OpenAI routes plus its dev-mode routes (as of vLLM v0.20.2; VLLM_SERVER_DEV_MODE=1). Token
// ids go in and come back with per-token logprobs; nothing is re-tokenized. Every sampling field is
// sent explicitly: vLLM (and SGLang's chat route) fill omitted ones from the model's
// generation_config.json, which would make the logprobs those of a penalised distribution. Admin
// calls (pause, weights, resume) go to each server directly, never a router.
import type { SampleSpec } from './serving-engine.js';

/** One sample to draw on a server: what flowrl serve's engine takes (the model's eos always stops), and an id. */
export interface SampleRequest extends Omit<SampleSpec, 'ignoreEos'> {
  requestId: string;
}

/** A prompt position scored by a server: its token's log-prob and, when asked, the k most likely tokens there (most likely first). */
export interface PromptPositionScores {
  logProb: number;
  ids: number[];
  logProbs: number[];
}

/** A sample as the server returned it. */
export interface SampleResult {
  outputIds: number[];
  logProbs: number[];
  finish: 'stop' | 'length' | 'abort';
  /** The weight version that sampled it, when the server says (SGLang does; with LoRA, the adapter named). */
  weightVersion?: string;
}

/**
 * A failed call. `retryable`: a connect error, a dropped connection, a timeout or a 5xx (the
 * sample goes to another server); otherwise the request itself is wrong (a 4xx) and the run stops.
 * `lostWeights`: the server no longer holds the weights the request named (a restart dropped our
 * adapter); it must take the current weights again before it serves.
 */
export class ServerCallError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    readonly lostWeights = false,
  ) {
    super(message);
    this.name = 'ServerCallError';
  }
}

/** One rollout server in one dialect. */
export interface RolloutServerClient {
  readonly url: string;
  readonly dialect: 'sglang' | 'vllm';
  generate(request: SampleRequest): Promise<SampleResult>;
  /** True when the server answers its health route. */
  health(): Promise<boolean>;
  /**
   * Pauses generation, loads the weights in `dir` (an HF directory, or a PEFT adapter loaded under
   * the name `version`), resumes, and checks that the server reports them.
   */
  loadWeights(dir: string, version: string, adapter: boolean): Promise<void>;
  /** Whether the server still holds what loadWeights loaded as `version` (SGLang: the version it reports; vLLM: the adapter it lists). */
  holds(version: string): Promise<boolean>;
  /** Unloads the adapter loaded under `name`, if any (best effort). */
  unloadAdapter(name: string): Promise<void>;
}

/** How a client reaches its server. */
export interface ClientOptions {
  /** Per-call timeout of a sample. */
  timeoutMs: number;
  /** Sent as Authorization: Bearer on every call (vLLM's and SGLang's --api-key). */
  apiKey?: string;
  /**
   * SGLang's --admin-api-key: sent instead of apiKey on the admin routes (pause, weights, version,
   * adapters). SGLang (utils/auth.py) then accepts only this key there, and only apiKey elsewhere.
   */
  adminApiKey?: string;
  /** Per-call timeout of an admin call (a weight load can take minutes). */
  adminTimeoutMs?: number;
  /** vLLM: the `model` to name when no adapter is used. */
  modelName?: string;
  /** Pause between retries of a transient admin failure. */
  retryDelayMs?: number;
}

interface CallInit {
  method?: 'GET' | 'POST';
  body?: unknown;
  timeoutMs: number;
  apiKey?: string;
  /** A sample: never sent twice (a failure sends it to another server); admin calls and probes are. */
  sample?: boolean;
}

/** The codes fetch (undici, Node's sockets) gives for a connection closed under a request that had no answer yet. */
const STALE_CONNECTION = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE', 'UND_ERR_CLOSED']);
/** How many times an admin call or probe is sent again after a stale connection. */
const STALE_RESENDS = 3;

/**
 * JSON over HTTP with a timeout; every transport failure becomes a ServerCallError. A POST always
 * carries a JSON body ({} when it has none), as a server that refuses other content types needs.
 */
export async function callJson(url: string, route: string, init: CallInit): Promise<unknown> {
  let response: Response;
  const method = init.method ?? (init.body === undefined ? 'GET' : 'POST');
  const headers: Record<string, string> = init.apiKey ? { authorization: `Bearer ${init.apiKey}` } : {};
  if (method === 'POST') headers['content-type'] = 'application/json';
  const signal = AbortSignal.timeout(init.timeoutMs);
  const send = () => fetch(url + route, { method, headers, body: method === 'POST' ? JSON.stringify(init.body ?? {}) : undefined, signal });
  // A training step holds the event loop for minutes, past a server's keep-alive (SGLang's uvicorn
  // closes an idle connection after 5 s): the closes that arrived meanwhile are read first, or the
  // call goes out on a closed connection. Two turns of the loop: the close, then the pool letting
  // the connection go (measured: one turn left all 6 pooled connections in use, two none).
  for (let turn = 0; turn < 2; turn++) await new Promise((resolve) => setImmediate(resolve));
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        response = await send();
        break;
      } catch (e) {
        // A close that crossed the call on the wire: sent again, on another connection (a few
        // times: the pool may hold several such). A sample is not: a failure sends it elsewhere.
        if (init.sample || attempt > STALE_RESENDS || !STALE_CONNECTION.has((e as { cause?: { code?: string } }).cause?.code ?? '')) throw e;
      }
    }
  } catch (e) {
    const err = e as Error & { cause?: { code?: string } };
    const what = err.name === 'TimeoutError' ? `no answer within ${init.timeoutMs / 1000} s` : (err.cause?.code ?? err.message);
    throw new ServerCallError(`${url}${route}: ${what}`, true);
  }
  let text: string;
  try {
    text = await response.text();
  } catch (e) {
    throw new ServerCallError(`${url}${route}: the connection dropped mid-answer (${(e as Error).message})`, true);
  }
  if (!response.ok) {
    let message = text.slice(0, 300);
    try {
      const parsed = JSON.parse(text) as { message?: string; error?: { message?: string } | string };
      message = parsed.message ?? (typeof parsed.error === 'string' ? parsed.error : parsed.error?.message) ?? message;
    } catch {
      // Not JSON: the text itself.
    }
    throw new ServerCallError(`${url}${route}: HTTP ${response.status}: ${message}`, response.status >= 500 || response.status === 429 || response.status === 408, response.status);
  }
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Whether `route` answers 2xx within the timeout (at most 30 s: a probe, not a sample). */
async function answers(url: string, route: string, timeoutMs: number, apiKey?: string): Promise<boolean> {
  try {
    await callJson(url, route, { timeoutMs: Math.min(timeoutMs, 30_000), apiKey });
    return true;
  } catch {
    return false;
  }
}

/**
 * Attempts of an admin call whose failure can pass, and the pause between them: verl v0.9.0's SGLang
 * adapter retries /flush_cache (400 while requests are pending) 12 times, 2 s apart
 * (verl/workers/rollout/sglang_rollout/http_server_engine.py at v0.9.0: AsyncHttpServerAdapter.flush_cache
 * loops max_attempts * 4 with DEFAULT_MAX_ATTEMPTS 3, sleeping DEFAULT_RETRY_DELAY 2.0; the rollout uses
 * that async adapter, sglang_rollout.py). A disk load whose files are not visible yet gets the same.
 */
export const ADMIN_ATTEMPTS = 12;
const ADMIN_RETRY_DELAY_MS = 2000;

/** Runs an admin call again while `transient(error)` says the failure can pass, ADMIN_ATTEMPTS times at most. */
async function withRetries<T>(call: () => Promise<T>, transient: (e: ServerCallError) => boolean, delayMs: number): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      // A server that is down is the rollout's to eject, not this loop's to wait for.
      if (!(e instanceof ServerCallError) || attempt >= ADMIN_ATTEMPTS || !transient(e)) throw e;
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}

/**
 * Whether a failed vLLM /v1/load_lora_adapter can pass when tried again. vLLM v0.20.2
 * (OpenAIServingModels.load_lora_adapter) answers 404 only when the loader's message says "No adapter
 * found" (no adapter_config.json there yet) and 400 with the loader's own message for every other
 * failure, among them a directory whose files are not all visible yet on shared storage (a missing
 * or cut safetensors file). Those are retried; the 400s that cannot pass are not: the name taken
 * without load_inplace, and an adapter the server's LoRA settings cannot hold (rank, modules).
 */
function vllmLoadMayPass(e: ServerCallError): boolean {
  if (e.status === 404) return true;
  return e.status === 400 && !/already been loaded|max_lora_rank|greater than|not supported|VLLM_ALLOW_RUNTIME_LORA_UPDATING/i.test(e.message);
}

/** A protocol violation in a 200 answer: the server is not what the config says. */
function malformed(url: string, route: string, what: string): ServerCallError {
  return new ServerCallError(`${url}${route}: unexpected answer: ${what}`, false);
}

function checkSample(url: string, route: string, ids: unknown, logProbs: unknown): { ids: number[]; logProbs: number[] } {
  if (!Array.isArray(ids) || ids.some((id) => !Number.isInteger(id))) throw malformed(url, route, 'no token ids (is return_token_ids supported?)');
  if (!Array.isArray(logProbs) || logProbs.length !== ids.length || logProbs.some((v) => typeof v !== 'number')) throw malformed(url, route, `${Array.isArray(logProbs) ? logProbs.length : 'no'} logprobs for ${ids.length} tokens`);
  return { ids: ids as number[], logProbs: logProbs as number[] };
}

function finishOf(type: unknown): SampleResult['finish'] {
  return type === 'stop' || type === 'length' || type === 'abort' ? type : 'stop';
}

/**
 * SGLang (v0.5.18): /generate with input_ids and return_logprob (the api key); admin calls with the
 * admin key when --admin-api-key is set; /update_weights_from_disk (which
 * flushes the cache itself); /load_lora_adapter plus /update_weight_version, since loading an adapter
 * leaves the version alone; the version read back from /model_info (/get_weight_version is gone).
 * SGLang ignores sampling_seed unless started with --enable-deterministic-inference, so a retried
 * sample is another draw there.
 */
export class SglangClient implements RolloutServerClient {
  readonly dialect = 'sglang';
  /** Admin calls: the admin key when there is one (SGLang v0.5.18 takes only it there), else the api key. */
  private readonly admin: CallInit;
  constructor(
    readonly url: string,
    private readonly options: ClientOptions,
  ) {
    this.admin = { timeoutMs: Math.max(options.timeoutMs, options.adminTimeoutMs ?? 600_000), apiKey: options.adminApiKey ?? options.apiKey };
  }

  async generate(r: SampleRequest): Promise<SampleResult> {
    const body = {
      input_ids: r.inputIds,
      sampling_params: {
        max_new_tokens: r.maxNewTokens,
        temperature: r.temperature,
        top_p: r.topP,
        top_k: r.topK > 0 ? r.topK : -1,
        min_p: 0,
        repetition_penalty: 1,
        frequency_penalty: 0,
        presence_penalty: 0,
        stop_token_ids: r.stopTokenIds,
        sampling_seed: r.seed,
        skip_special_tokens: false,
        no_stop_trim: true,
      },
      return_logprob: true,
      rid: r.requestId,
      ...(r.adapter ? { lora_path: r.adapter } : {}),
    };
    let out: { output_ids?: unknown; meta_info?: { finish_reason?: { type?: string }; weight_version?: unknown; output_token_logprobs?: unknown[] } };
    try {
      out = (await callJson(this.url, '/generate', { body, timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey, sample: true })) as typeof out;
    } catch (e) {
      // A 400 naming our adapter: the server lost it (a restart), not a bad request.
      if (r.adapter && e instanceof ServerCallError && e.status === 400 && /lora|adapter/i.test(e.message)) throw new ServerCallError(e.message, true, 400, true);
      throw e;
    }
    const meta = out.meta_info ?? {};
    const pairs = Array.isArray(meta.output_token_logprobs) ? meta.output_token_logprobs : undefined;
    const ids = out.output_ids ?? pairs?.map((p) => (p as unknown[])[1]);
    const { ids: outputIds, logProbs } = checkSample(this.url, '/generate', ids, pairs?.map((p) => (p as unknown[])[0]));
    // With LoRA the adapter named is the version (the server-wide version says nothing about it).
    const weightVersion = r.adapter ?? (meta.weight_version === undefined ? undefined : String(meta.weight_version));
    return { outputIds, logProbs, finish: finishOf(meta.finish_reason?.type), weightVersion };
  }

  health(): Promise<boolean> {
    return answers(this.url, '/health_generate', this.options.timeoutMs, this.options.apiKey);
  }

  /**
   * Each of ids 1.. scored given the ones before, at T = 1, with the k most likely tokens there:
   * /generate with no new tokens, return_logprob and logprob_start_len 0 (input_token_logprobs,
   * input_top_logprobs; SGLang v0.5.18).
   */
  async promptScores(ids: number[], k: number): Promise<PromptPositionScores[]> {
    const body = { input_ids: ids, sampling_params: { max_new_tokens: 0, temperature: 1 }, return_logprob: true, logprob_start_len: 0, top_logprobs_num: k };
    const out = (await callJson(this.url, '/generate', { body, timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey })) as { meta_info?: { input_token_logprobs?: unknown; input_top_logprobs?: unknown } };
    const own = out.meta_info?.input_token_logprobs;
    const tops = out.meta_info?.input_top_logprobs;
    if (!Array.isArray(own) || own.length !== ids.length) throw malformed(this.url, '/generate', 'no input_token_logprobs for every prompt token');
    if (k && (!Array.isArray(tops) || tops.length !== ids.length)) throw malformed(this.url, '/generate', 'no input_top_logprobs for every prompt token');
    return ids.slice(1).map((id, i) => {
      const [logProb, tokenId] = (own[i + 1] ?? []) as unknown[];
      if (typeof logProb !== 'number' || tokenId !== id) throw malformed(this.url, '/generate', `input_token_logprobs[${i + 1}] is not token ${id}'s log-prob`);
      if (!k) return { logProb, ids: [], logProbs: [] };
      const entries = (tops as unknown[][])[i + 1];
      if (!Array.isArray(entries) || entries.length < k) throw malformed(this.url, '/generate', `input_top_logprobs[${i + 1}] lists fewer than ${k} tokens`);
      const top = (entries as unknown[][]).slice(0, k);
      if (top.some((e) => typeof e?.[0] !== 'number' || !Number.isInteger(e?.[1]))) throw malformed(this.url, '/generate', `input_top_logprobs[${i + 1}] is not [logprob, id] pairs`);
      return { logProb, ids: top.map((e) => e[1] as number), logProbs: top.map((e) => e[0] as number) };
    });
  }

  async loadWeights(dir: string, version: string, adapter: boolean): Promise<void> {
    const admin = this.admin;
    const delay = this.options.retryDelayMs ?? ADMIN_RETRY_DELAY_MS;
    if (adapter) {
      // An adapter per version: requests name it, so no pause is needed and nothing stale can run.
      await withRetries(
        () => callJson(this.url, '/load_lora_adapter', { ...admin, body: { lora_name: version, lora_path: dir } }),
        (e) => e.status === 400 && !/already loaded/i.test(e.message),
        delay,
      ).catch((e: unknown) => {
        // Loaded by an earlier attempt whose answer was lost.
        if (!(e instanceof ServerCallError && /already loaded/i.test(e.message))) throw e;
      });
      await callJson(this.url, '/update_weight_version', { ...admin, body: { new_version: version, abort_all_requests: false } });
    } else {
      await callJson(this.url, '/pause_generation', { ...admin, body: { mode: 'abort' } });
      try {
        // A 400 here is most often files not visible yet on a shared file system: retried, as verl does.
        await withRetries(
          () => callJson(this.url, '/update_weights_from_disk', { ...admin, body: { model_path: dir, weight_version: version, flush_cache: true, abort_all_requests: true } }),
          (e) => e.status === 400,
          delay,
        );
      } finally {
        await callJson(this.url, '/continue_generation', { ...admin, body: {} });
      }
    }
    const reported = await this.reportedVersion();
    if (reported !== version) throw new ServerCallError(`${this.url}: reports weight version ${reported} after loading ${version}`, true);
  }

  /**
   * The weight version /model_info reports. It is read with the api key, as a route that is not an
   * admin one takes; a 401 with an admin key configured is asked once more with that key, in case
   * the release marks the route admin.
   */
  private async reportedVersion(): Promise<string> {
    const read = (apiKey?: string) => callJson(this.url, '/model_info', { ...this.admin, apiKey });
    let info: unknown;
    try {
      info = await read(this.options.apiKey);
    } catch (e) {
      if (!(e instanceof ServerCallError && e.status === 401 && this.options.adminApiKey)) throw e;
      info = await read(this.options.adminApiKey);
    }
    return String((info as { weight_version?: unknown }).weight_version);
  }

  async holds(version: string): Promise<boolean> {
    return (await this.reportedVersion()) === version;
  }

  /** Unloads an older adapter version (best effort: a server may have restarted without it). */
  async unloadAdapter(name: string): Promise<void> {
    await callJson(this.url, '/unload_lora_adapter', { body: { lora_name: name }, timeoutMs: this.options.timeoutMs, apiKey: this.admin.apiKey }).catch(() => undefined);
  }
}

/**
 * vLLM (v0.20.2): /v1/completions with an id prompt, logprobs 0 and return_token_ids; full weights
 * through the dev-mode /collective_rpc reload_weights (with /pause and /resume around it), adapters
 * through /v1/load_lora_adapter (a 400 or 404 from a directory not all there yet is retried). vLLM
 * reports no weight version: with full weights the rollout compares promptLogProbs of a probe with
 * its own (ServerRollout), to a tolerance that follows the dtype /server_info reports. Its --api-key
 * covers the /v1 routes only; the dev routes stay open. It has no admin key.
 */
export class VllmClient implements RolloutServerClient {
  readonly dialect = 'vllm';
  private readonly admin: CallInit;
  constructor(
    readonly url: string,
    private readonly options: ClientOptions,
  ) {
    this.admin = { timeoutMs: Math.max(options.timeoutMs, options.adminTimeoutMs ?? 600_000), apiKey: options.apiKey };
  }

  async generate(r: SampleRequest): Promise<SampleResult> {
    const body = {
      ...(r.adapter ? { model: r.adapter } : this.options.modelName ? { model: this.options.modelName } : {}),
      prompt: r.inputIds,
      max_tokens: r.maxNewTokens,
      temperature: r.temperature,
      top_p: r.topP,
      top_k: r.topK > 0 ? r.topK : 0,
      min_p: 0,
      repetition_penalty: 1,
      frequency_penalty: 0,
      presence_penalty: 0,
      stop_token_ids: r.stopTokenIds,
      // vLLM reads -1 as no seed; the stream only depends on the low 32 bits, so this is the same seed.
      seed: r.seed >>> 0,
      logprobs: 0,
      return_token_ids: true,
      skip_special_tokens: false,
      request_id: r.requestId,
    };
    let out: { choices?: { token_ids?: unknown; logprobs?: { token_logprobs?: unknown } | null; finish_reason?: string }[] };
    try {
      out = (await callJson(this.url, '/v1/completions', { body, timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey, sample: true })) as typeof out;
    } catch (e) {
      // Our adapter is unknown: the server lost it (a restart), not a bad request.
      if (r.adapter && e instanceof ServerCallError && e.status === 404) throw new ServerCallError(e.message, true, 404, true);
      throw e;
    }
    const choice = out.choices?.[0];
    if (!choice) throw malformed(this.url, '/v1/completions', 'no choices');
    const { ids, logProbs } = checkSample(this.url, '/v1/completions', choice.token_ids, choice.logprobs?.token_logprobs);
    return { outputIds: ids, logProbs, finish: finishOf(choice.finish_reason), weightVersion: r.adapter };
  }

  health(): Promise<boolean> {
    return answers(this.url, '/health', this.options.timeoutMs, this.options.apiKey);
  }

  async loadWeights(dir: string, version: string, adapter: boolean): Promise<void> {
    const admin = this.admin;
    if (adapter) {
      await withRetries(() => callJson(this.url, '/v1/load_lora_adapter', { ...admin, body: { lora_name: version, lora_path: dir, load_inplace: true } }), vllmLoadMayPass, this.options.retryDelayMs ?? ADMIN_RETRY_DELAY_MS);
      if (!(await this.holds(version))) throw new ServerCallError(`${this.url}: does not list adapter ${version} after loading it`, true);
      return;
    }
    // 'wait': samples already running finish on the weights they started with.
    await callJson(this.url, '/pause?mode=wait', { ...admin, method: 'POST' });
    try {
      await callJson(this.url, '/collective_rpc', { ...admin, body: { method: 'reload_weights', kwargs: { weights_path: dir, is_checkpoint_format: true } } });
      await callJson(this.url, '/reset_prefix_cache', { ...admin, method: 'POST' });
    } finally {
      await callJson(this.url, '/resume', { ...admin, method: 'POST' }).catch(() => undefined);
    }
  }

  /** Log-probs of ids 1.. given the ones before, at T = 1 (vLLM's prompt_logprobs: raw, whatever --logprobs-mode says). */
  async promptLogProbs(ids: number[]): Promise<number[]> {
    return (await this.promptScores(ids, 0)).map((p) => p.logProb);
  }

  /**
   * Each of ids 1.. scored given the ones before, at T = 1, with the k most likely tokens there (by
   * rank; vLLM's prompt_logprobs k lists them and the prompt's own token). `model`: an adapter's
   * name, else the server's model.
   */
  async promptScores(ids: number[], k: number, model?: string): Promise<PromptPositionScores[]> {
    const name = model ?? this.options.modelName;
    const body = { ...(name ? { model: name } : {}), prompt: ids, max_tokens: 1, temperature: 0, prompt_logprobs: k, return_token_ids: true };
    const out = (await callJson(this.url, '/v1/completions', { body, timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey })) as { choices?: { prompt_logprobs?: unknown }[] };
    const entries = out.choices?.[0]?.prompt_logprobs;
    if (!Array.isArray(entries) || entries.length !== ids.length) throw malformed(this.url, '/v1/completions', 'no prompt_logprobs');
    return ids.slice(1).map((id, i) => {
      const position = entries[i + 1] as Record<string, { logprob?: unknown; rank?: unknown }> | null;
      const own = position?.[String(id)];
      if (typeof own?.logprob !== 'number') throw malformed(this.url, '/v1/completions', `prompt_logprobs[${i + 1}] has no entry for token ${id}`);
      if (!k) return { logProb: own.logprob, ids: [], logProbs: [] };
      const top = Object.entries(position!)
        .filter(([, e]) => typeof e?.rank === 'number' && e.rank >= 1 && e.rank <= k && typeof e.logprob === 'number')
        .sort(([, a], [, b]) => (a.rank as number) - (b.rank as number));
      if (top.length !== k) throw malformed(this.url, '/v1/completions', `prompt_logprobs[${i + 1}] lists ${top.length} of the ${k} most likely tokens (is the server's max logprobs below ${k}?)`);
      return { logProb: own.logprob, ids: top.map(([key]) => Number(key)), logProbs: top.map(([, e]) => e.logprob as number) };
    });
  }

  /**
   * The dtype the engine computes in, from the dev-mode GET /server_info?config_format=json (vLLM
   * v0.20.2, entrypoints/serve/instrumentator/server_info.py: the VllmConfig dumped as JSON, whose
   * model_config.dtype is the resolved torch dtype, e.g. "torch.bfloat16"). Undefined when the server
   * has no such route (404: dev mode off, or another engine behind the vLLM routes) or does not say.
   */
  async engineDtype(): Promise<string | undefined> {
    let info: unknown;
    try {
      info = await callJson(this.url, '/server_info?config_format=json', { timeoutMs: Math.min(this.options.timeoutMs, 30_000), apiKey: this.options.apiKey });
    } catch (e) {
      if (e instanceof ServerCallError && (e.status === 404 || e.status === 405)) return undefined;
      throw e;
    }
    const dtype = (info as { vllm_config?: { model_config?: { dtype?: unknown } } })?.vllm_config?.model_config?.dtype;
    return typeof dtype === 'string' ? dtype.replace(/^torch\./, '') : undefined;
  }

  /** Whether the server lists the adapter `version` (full weights: ServerRollout compares promptLogProbs). */
  async holds(version: string): Promise<boolean> {
    const models = (await callJson(this.url, '/v1/models', { timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey })) as { data?: { id?: unknown }[] };
    return (models.data ?? []).some((m) => m.id === version);
  }

  async unloadAdapter(name: string): Promise<void> {
    await callJson(this.url, '/v1/unload_lora_adapter', { body: { lora_name: name }, timeoutMs: this.options.timeoutMs, apiKey: this.options.apiKey }).catch(() => undefined);
  }
}
