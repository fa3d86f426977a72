// The two wire dialects a rollout server speaks: SGLang's native routes and vLLM's OpenAI routes
// plus its dev-mode RL routes. Token ids go in and come back with per-token logprobs; nothing is
// re-tokenized. Admin calls (pause, weights, resume) go to each server directly, never a router.
import type { SampleSpec } from './serving-engine.js';

/** One sample to draw on a server: what flowrl serve's engine takes (the model's eos always stops), and an id. */
export interface SampleRequest extends Omit<SampleSpec, 'ignoreEos'> {
  requestId: string;
}

/** A sample as the server returned it. */
export interface SampleResult {
  outputIds: number[];
  logProbs: number[];
  finish: 'stop' | 'length' | 'abort';
  /** The weight version that sampled it, when the server reports one (SGLang does). */
  weightVersion?: string;
}

/**
 * A failed call. `retryable`: a connect error, a dropped connection, a timeout or a 5xx (the
 * sample goes to another server); otherwise the request itself is wrong (a 4xx) and the run stops.
 */
export class ServerCallError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
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
   * the name `version`), clears cached prefixes, resumes, and checks the version where it can.
   */
  loadWeights(dir: string, version: string, adapter: boolean): Promise<void>;
  /** Unloads the adapter loaded under `name`, if any (best effort). */
  unloadAdapter(name: string): Promise<void>;
}

/** JSON over HTTP with a timeout; every transport failure becomes a ServerCallError. */
export async function callJson(url: string, route: string, init: { method?: 'GET' | 'POST'; body?: unknown; timeoutMs: number }): Promise<unknown> {
  let response: Response;
  try {
    response = await fetch(url + route, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: init.body === undefined ? undefined : { 'content-type': 'application/json' },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(init.timeoutMs),
    });
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
async function answers(url: string, route: string, timeoutMs: number): Promise<boolean> {
  try {
    await callJson(url, route, { timeoutMs: Math.min(timeoutMs, 30_000) });
    return true;
  } catch {
    return false;
  }
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

/** SGLang: /generate with input_ids and return_logprob; /update_weights_from_disk; /load_lora_adapter. */
export class SglangClient implements RolloutServerClient {
  readonly dialect = 'sglang';
  constructor(
    readonly url: string,
    private readonly timeoutMs: number,
    private readonly adminTimeoutMs = Math.max(timeoutMs, 600_000),
  ) {}

  async generate(r: SampleRequest): Promise<SampleResult> {
    const body = {
      input_ids: r.inputIds,
      sampling_params: { max_new_tokens: r.maxNewTokens, temperature: r.temperature, top_p: r.topP, top_k: r.topK > 0 ? r.topK : -1, stop_token_ids: r.stopTokenIds, sampling_seed: r.seed, skip_special_tokens: false, no_stop_trim: true },
      return_logprob: true,
      rid: r.requestId,
      ...(r.adapter ? { lora_path: r.adapter } : {}),
    };
    const out = (await callJson(this.url, '/generate', { body, timeoutMs: this.timeoutMs })) as { output_ids?: unknown; meta_info?: { finish_reason?: { type?: string }; weight_version?: unknown; output_token_logprobs?: unknown[] } };
    const meta = out.meta_info ?? {};
    const pairs = Array.isArray(meta.output_token_logprobs) ? meta.output_token_logprobs : undefined;
    const ids = out.output_ids ?? pairs?.map((p) => (p as unknown[])[1]);
    const { ids: outputIds, logProbs } = checkSample(this.url, '/generate', ids, pairs?.map((p) => (p as unknown[])[0]));
    return { outputIds, logProbs, finish: finishOf(meta.finish_reason?.type), weightVersion: meta.weight_version === undefined ? undefined : String(meta.weight_version) };
  }

  health(): Promise<boolean> {
    return answers(this.url, '/health_generate', this.timeoutMs);
  }

  async loadWeights(dir: string, version: string, adapter: boolean): Promise<void> {
    const admin = { timeoutMs: this.adminTimeoutMs };
    if (adapter) {
      // An adapter per version: requests name it, so no pause is needed and nothing stale can run.
      await callJson(this.url, '/load_lora_adapter', { ...admin, body: { lora_name: version, lora_path: dir } });
      return;
    }
    await callJson(this.url, '/pause_generation', { ...admin, body: { mode: 'abort' } });
    try {
      await callJson(this.url, '/update_weights_from_disk', { ...admin, body: { model_path: dir, weight_version: version, flush_cache: true, abort_all_requests: true } });
      await callJson(this.url, '/flush_cache', { ...admin, method: 'POST' });
    } finally {
      await callJson(this.url, '/continue_generation', { ...admin, body: {} });
    }
    const reported = ((await callJson(this.url, '/get_weight_version', admin)) as { weight_version?: unknown }).weight_version;
    if (String(reported) !== version) throw new ServerCallError(`${this.url}: reports weight version ${String(reported)} after loading ${version}`, true);
  }

  /** Unloads an older adapter version (best effort: a server may have restarted without it). */
  async unloadAdapter(name: string): Promise<void> {
    await callJson(this.url, '/unload_lora_adapter', { body: { lora_name: name }, timeoutMs: this.timeoutMs }).catch(() => undefined);
  }
}

/**
 * vLLM: /v1/completions with an id prompt, logprobs 0 and return_token_ids; weights through the
 * disk weight-transfer backend (dev mode) or /v1/load_lora_adapter for adapters.
 */
export class VllmClient implements RolloutServerClient {
  readonly dialect = 'vllm';
  private transferReady = false;
  constructor(
    readonly url: string,
    private readonly timeoutMs: number,
    private readonly modelName?: string,
    private readonly adminTimeoutMs = Math.max(timeoutMs, 600_000),
  ) {}

  async generate(r: SampleRequest): Promise<SampleResult> {
    const body = {
      ...(r.adapter ? { model: r.adapter } : this.modelName ? { model: this.modelName } : {}),
      prompt: r.inputIds,
      max_tokens: r.maxNewTokens,
      temperature: r.temperature,
      top_p: r.topP,
      top_k: r.topK > 0 ? r.topK : -1,
      stop_token_ids: r.stopTokenIds,
      seed: r.seed,
      logprobs: 0,
      return_token_ids: true,
      skip_special_tokens: false,
      request_id: r.requestId,
    };
    const out = (await callJson(this.url, '/v1/completions', { body, timeoutMs: this.timeoutMs })) as { choices?: { token_ids?: unknown; logprobs?: { token_logprobs?: unknown } | null; finish_reason?: string }[] };
    const choice = out.choices?.[0];
    if (!choice) throw malformed(this.url, '/v1/completions', 'no choices');
    const { ids, logProbs } = checkSample(this.url, '/v1/completions', choice.token_ids, choice.logprobs?.token_logprobs);
    return { outputIds: ids, logProbs, finish: finishOf(choice.finish_reason) };
  }

  health(): Promise<boolean> {
    return answers(this.url, '/health', this.timeoutMs);
  }

  async loadWeights(dir: string, version: string, adapter: boolean): Promise<void> {
    const admin = { timeoutMs: this.adminTimeoutMs };
    if (adapter) {
      await callJson(this.url, '/v1/load_lora_adapter', { ...admin, body: { lora_name: version, lora_path: dir, load_inplace: true } });
      return;
    }
    if (!this.transferReady) {
      await callJson(this.url, '/init_weight_transfer_engine', { ...admin, body: { init_info: {} } });
      this.transferReady = true;
    }
    await callJson(this.url, '/pause?mode=wait', { ...admin, method: 'POST' });
    try {
      await callJson(this.url, '/start_weight_update', { ...admin, body: {} });
      await callJson(this.url, '/update_weights', { ...admin, body: { update_info: { path: dir } } });
      await callJson(this.url, '/finish_weight_update', { ...admin, body: { weight_version: version } });
      await callJson(this.url, '/reset_prefix_cache', { ...admin, method: 'POST' });
    } catch (e) {
      // A restarted server needs its transfer engine set up again.
      this.transferReady = false;
      throw e;
    } finally {
      await callJson(this.url, '/resume', { ...admin, method: 'POST' }).catch(() => undefined);
    }
  }

  async unloadAdapter(name: string): Promise<void> {
    await callJson(this.url, '/v1/unload_lora_adapter', { body: { lora_name: name }, timeoutMs: this.timeoutMs }).catch(() => undefined);
  }
}
