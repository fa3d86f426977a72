// `flowrl serve`: the serving engine behind the subsets of SGLang's and vLLM's HTTP routes that RL
// rollouts use (ids in, ids and logprobs out, pause, disk weight updates, LoRA), plus OpenAI chat
// completions for text. Localhost by default; request bodies are capped; bad requests get a 400
// with a JSON error; a full queue answers 503. With testFaults, POST /_flowrl/faults injects
// failures for the tests of the rollout clients.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { TextTokenizer } from '../model/tokenizer.js';
import { Rng } from '../random.js';
import { EngineOverloaded, ServingEngine, type SampleOutput, type SampleSpec, type ServingEngineOptions } from './serving-engine.js';

export interface ServeOptions extends ServingEngineOptions {
  modelDir: string;
  adapterDir?: string;
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** Largest request body in bytes (413 beyond). */
  maxBodyBytes: number;
  /** For text routes (chat completions, SGLang's text); ids-only without one. */
  tokenizer?: TextTokenizer;
  /** Enables POST /_flowrl/faults (tests only). */
  testFaults?: boolean;
}

/** Injected failures (tests only): each *_next counts down over generation requests. */
interface Faults {
  /** Answer the next N generation requests with `status`. */
  fail_next: number;
  status: number;
  /** Sample, then drop the connection without an answer, for the next N. */
  drop_next: number;
  /** Never answer the next N (the client's timeout ends them). */
  hang_next: number;
  /** /health and /health_generate answer 503. */
  health_fail: boolean;
  /** Milliseconds added before each generation answer. */
  delay_ms: number;
  /** Go back to the base weights (version '0') just before the next N generation requests: a restart the client did not see. */
  restart_next: number;
}

const NO_FAULTS: Faults = { fail_next: 0, status: 500, drop_next: 0, hang_next: 0, health_fail: false, delay_ms: 0, restart_next: 0 };

/** A request the server refuses: its HTTP status and message. */
class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const bad = (message: string) => new HttpError(400, message);

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function readNumber(body: Json, key: string, fallback: number, check: { integer?: boolean; min?: number; max?: number } = {}, where = ''): number {
  const v = body[key];
  if (v === undefined || v === null) return fallback;
  const ok = typeof v === 'number' && Number.isFinite(v) && (!check.integer || Number.isInteger(v)) && (check.min === undefined || v >= check.min) && (check.max === undefined || v <= check.max);
  if (!ok) throw bad(`'${where}${key}' must be ${check.integer ? 'an integer' : 'a number'}${check.min !== undefined ? ` >= ${check.min}` : ''}${check.max !== undefined ? ` <= ${check.max}` : ''}; got ${JSON.stringify(v)}`);
  return v;
}

/** The served model, the HTTP server and what it was told to break. */
export class FlowrlServer {
  readonly engine: ServingEngine;
  private server?: http.Server;
  private faults: Faults = { ...NO_FAULTS };
  /** Hung requests, answered on close so the process can exit. */
  private readonly hung = new Set<http.ServerResponse>();
  private weightUpdateOpen = false;
  private requestCount = 0;
  readonly modelName: string;

  constructor(private readonly options: ServeOptions) {
    this.engine = new ServingEngine(options.modelDir, options, options.adapterDir);
    this.modelName = path.basename(path.resolve(options.modelDir));
  }

  /** Starts listening; resolves with the base URL. */
  async listen(): Promise<string> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 5000;
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(this.options.port, this.options.host, () => resolve());
    });
    const { port } = this.server.address() as AddressInfo;
    const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    return `http://${host}:${port}`;
  }

  async close(): Promise<void> {
    for (const res of this.hung) res.destroy();
    this.hung.clear();
    // Waiting samples end with finish 'abort' first: on a paused engine they would keep their
    // connections open, and server.close() would wait for them forever.
    this.engine.abortQueued();
    const closed = new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    // Their answers are written by then; their keep-alive connections need not wait for a timeout.
    await new Promise((resolve) => setImmediate(resolve));
    this.server?.closeIdleConnections?.();
    await closed;
    this.server?.closeAllConnections?.();
    this.engine.dispose();
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    try {
      const body = req.method === 'POST' ? await this.readBody(req) : {};
      const out = await this.route(req.method ?? 'GET', url, body, res);
      if (out !== undefined) send(res, 200, out);
    } catch (e) {
      if (res.headersSent || res.destroyed) return;
      if (e instanceof HttpError) send(res, e.status, errorBody(e.status, e.message));
      else if (e instanceof EngineOverloaded) send(res, 503, errorBody(503, e.message));
      else send(res, 500, errorBody(500, (e as Error).message ?? String(e)));
    }
  }

  private readBody(req: http.IncomingMessage): Promise<Json> {
    const limit = this.options.maxBodyBytes;
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) {
          reject(new HttpError(413, `request body over ${limit} bytes`));
          req.removeAllListeners('data');
          req.resume();
          return;
        }
        chunks.push(chunk);
      });
      req.on('error', reject);
      req.on('end', () => {
        if (size > limit) return;
        const text = Buffer.concat(chunks).toString('utf8').trim();
        if (!text) return resolve({});
        try {
          const parsed: unknown = JSON.parse(text);
          if (!isObject(parsed)) return reject(bad('the request body must be a JSON object'));
          resolve(parsed);
        } catch (e) {
          reject(bad(`the request body is not JSON: ${(e as Error).message}`));
        }
      });
    });
  }

  /** Applies injected faults to a generation request; returns false when it must not be answered. */
  private async generationFault(res: http.ServerResponse): Promise<'answer' | 'drop' | 'hang'> {
    const f = this.faults;
    if (f.fail_next > 0) {
      f.fail_next -= 1;
      throw new HttpError(f.status, `injected failure (status ${f.status})`);
    }
    if (f.hang_next > 0) {
      f.hang_next -= 1;
      this.hung.add(res);
      return 'hang';
    }
    if (f.restart_next > 0) {
      f.restart_next -= 1;
      this.engine.restartToBase();
    }
    if (f.delay_ms > 0) await new Promise((r) => setTimeout(r, f.delay_ms));
    if (f.drop_next > 0) {
      f.drop_next -= 1;
      return 'drop';
    }
    return 'answer';
  }

  /** Runs samples through the engine under the injected faults; undefined when the request is dropped or hung. */
  private async sampleWithFaults(res: http.ServerResponse, specs: SampleSpec[]): Promise<SampleOutput[] | undefined> {
    const fault = await this.generationFault(res);
    if (fault === 'hang') return undefined;
    const outputs = await Promise.all(specs.map((s) => this.engine.submit(s).catch((e: Error) => Promise.reject(e instanceof EngineOverloaded ? e : bad(e.message)))));
    if (fault === 'drop') {
      res.socket?.destroy();
      return undefined;
    }
    return outputs;
  }

  private async route(method: string, url: URL, body: Json, res: http.ServerResponse): Promise<unknown> {
    const route = `${method} ${url.pathname.replace(/\/+$/, '') || '/'}`;
    this.requestCount += 1;
    switch (route) {
      // Both dialects.
      case 'GET /health':
        if (this.faults.health_fail) throw new HttpError(503, 'unhealthy (injected)');
        return {};
      case 'GET /v1/models':
        return {
          object: 'list',
          data: [
            { id: this.modelName, object: 'model', owned_by: 'flowrl', root: this.options.modelDir, max_model_len: this.engine.config.maxPositions },
            ...this.engine.adapterNames().map((name) => ({ id: name, object: 'model', owned_by: 'flowrl', parent: this.modelName })),
          ],
        };
      // SGLang.
      case 'GET /health_generate': {
        if (this.faults.health_fail) throw new HttpError(503, 'unhealthy (injected)');
        await this.engine.submit({ inputIds: [0], maxNewTokens: 1, temperature: 0, topP: 1, topK: 0, stopTokenIds: [], ignoreEos: true, seed: 0 });
        return {};
      }
      case 'GET /get_weight_version':
        return { weight_version: this.engine.weightVersion };
      case 'GET /get_model_info':
        return { model_path: this.engine.weightsPath, tokenizer_path: this.options.tokenizer ? this.options.modelDir : null, is_generation: true, weight_version: this.engine.weightVersion };
      case 'GET /v1/loads':
      case 'GET /get_load':
        return { num_running_reqs: this.engine.busy, num_waiting_reqs: this.engine.waiting };
      case 'POST /generate':
        return this.sglangGenerate(body, res);
      case 'POST /update_weights_from_disk': {
        const dir = body.model_path;
        if (typeof dir !== 'string' || !dir) throw bad("'model_path' must be a directory path");
        // As SGLang: the version changes only when the request gives one.
        const version = body.weight_version === undefined || body.weight_version === null ? this.engine.weightVersion : String(body.weight_version);
        const aborted = body.abort_all_requests === true ? this.engine.abortQueued() : 0;
        try {
          this.engine.loadWeights(path.resolve(dir), version);
        } catch (e) {
          return send(res, 400, { success: false, message: `failed to load ${dir}: ${(e as Error).message}`, num_paused_requests: aborted });
        }
        return { success: true, message: `loaded ${dir} as weight version ${version}`, num_paused_requests: aborted };
      }
      case 'POST /update_weight_version':
        if (body.new_version === undefined) throw bad("'new_version' is required");
        this.engine.weightVersion = String(body.new_version);
        return { success: true, message: `weight version ${this.engine.weightVersion}` };
      case 'POST /pause_generation': {
        const mode = body.mode ?? 'abort';
        if (mode !== 'abort' && mode !== 'retract' && mode !== 'in_place') throw bad(`'mode' must be abort, retract or in_place; got ${JSON.stringify(mode)}`);
        this.engine.pause(mode === 'abort' ? 'abort' : 'keep');
        return { message: 'Generation paused successfully.' };
      }
      case 'POST /continue_generation':
        this.engine.resume();
        return { message: 'Generation continued successfully.' };
      case 'GET /flush_cache':
      case 'POST /flush_cache':
        // No prefix cache to clear; refused while requests run or wait, as SGLang does.
        if (this.engine.busy || this.engine.waiting) throw bad('cannot flush the cache while requests are running or waiting');
        return send(res, 200, 'Cache flushed.\n', 'text/plain');
      case 'POST /load_lora_adapter':
        return this.loadAdapter(body, true);
      case 'POST /unload_lora_adapter':
        return this.unloadAdapter(body);
      // vLLM.
      case 'POST /v1/completions':
        return this.vllmCompletions(body, res);
      case 'POST /v1/chat/completions':
        return this.chatCompletions(body, res);
      case 'POST /v1/load_lora_adapter':
        return this.loadAdapter(body, body.load_inplace === true);
      case 'POST /v1/unload_lora_adapter':
        return this.unloadAdapter(body);
      case 'POST /pause': {
        const mode = url.searchParams.get('mode') ?? 'abort';
        if (mode !== 'abort' && mode !== 'wait' && mode !== 'keep') throw bad(`'mode' must be abort, wait or keep; got '${mode}'`);
        this.engine.pause(mode);
        return { status: 'paused' };
      }
      case 'POST /resume':
        this.engine.resume();
        return { status: 'resumed' };
      case 'GET /is_paused':
        return { is_paused: this.engine.paused };
      case 'POST /abort_request':
      case 'POST /abort_requests':
        // Queued samples end with finish 'abort'; a running batch always finishes (sampling is synchronous).
        return { num_aborted: this.engine.abortQueued() };
      case 'POST /reset_prefix_cache':
        return {};
      case 'POST /init_weight_transfer_engine':
        return {};
      case 'POST /start_weight_update':
        this.weightUpdateOpen = true;
        return {};
      case 'POST /update_weights': {
        if (!this.weightUpdateOpen) throw bad('call /start_weight_update first');
        const info = body.update_info;
        const dir = isObject(info) ? info.path : undefined;
        if (typeof dir !== 'string' || !dir) throw bad("'update_info.path' must be a directory path");
        try {
          this.engine.loadWeights(path.resolve(dir), this.engine.weightVersion);
        } catch (e) {
          throw bad(`failed to load ${dir}: ${(e as Error).message}`);
        }
        return {};
      }
      case 'POST /finish_weight_update':
        if (!this.weightUpdateOpen) throw bad('call /start_weight_update first');
        this.weightUpdateOpen = false;
        if (body.weight_version !== undefined && body.weight_version !== null) this.engine.weightVersion = String(body.weight_version);
        return { weight_version: this.engine.weightVersion };
      case 'POST /_flowrl/faults':
        if (!this.options.testFaults) break;
        return this.setFaults(body);
    }
    throw new HttpError(404, `no route ${method} ${url.pathname}`);
  }

  private setFaults(body: Json): Json {
    if (body.reset === true) {
      this.faults = { ...NO_FAULTS };
      // The skew is an injected fault too; reset clears it back to the configured one.
      this.engine.logprobSkew = this.options.logprobSkew ?? 0;
    }
    for (const key of ['fail_next', 'status', 'drop_next', 'hang_next', 'delay_ms', 'restart_next'] as const) this.faults[key] = readNumber(body, key, this.faults[key], { integer: true, min: 0 });
    if (body.health_fail !== undefined) this.faults.health_fail = body.health_fail === true;
    if (body.logprob_skew !== undefined) this.engine.logprobSkew = readNumber(body, 'logprob_skew', 0);
    if (body.restart === true) this.engine.restartToBase();
    return { faults: this.faults, logprob_skew: this.engine.logprobSkew, weight_version: this.engine.weightVersion };
  }

  private loadAdapter(body: Json, inPlace: boolean): unknown {
    const { lora_name: name, lora_path: dir } = body;
    if (typeof name !== 'string' || !name) throw bad("'lora_name' must be a non-empty string");
    if (typeof dir !== 'string' || !dir) throw bad("'lora_path' must be a directory path");
    try {
      this.engine.loadAdapter(name, path.resolve(dir), inPlace);
    } catch (e) {
      throw bad((e as Error).message);
    }
    return { success: true, message: `Success: LoRA adapter '${name}' added successfully.` };
  }

  private unloadAdapter(body: Json): unknown {
    const name = body.lora_name;
    if (typeof name !== 'string' || !this.engine.unloadAdapter(name)) throw new HttpError(404, `LoRA adapter ${JSON.stringify(name)} is not loaded`);
    return { success: true, message: `Success: LoRA adapter '${name}' removed successfully.` };
  }

  /** Prompt ids from `value` (ids, or text with a tokenizer), checked against the vocabulary. */
  private promptIds(value: unknown, key: string): number[][] {
    const vocab = this.engine.config.vocabSize;
    const checkIds = (ids: unknown, where: string): number[] => {
      if (!Array.isArray(ids) || !ids.length) throw bad(`'${where}' must be a non-empty list of token ids`);
      for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= vocab) throw bad(`'${where}' holds ${JSON.stringify(id)}, not a token id in [0, ${vocab})`);
      return ids as number[];
    };
    if (typeof value === 'string' || (Array.isArray(value) && value.length && typeof value[0] === 'string')) {
      if (!this.options.tokenizer) throw bad(`'${key}' is text but this server has no tokenizer; send token ids`);
      const texts = typeof value === 'string' ? [value] : (value as unknown[]);
      return texts.map((t, i) => {
        if (typeof t !== 'string') throw bad(`'${key}[${i}]' must be a string`);
        return checkIds(this.options.tokenizer!.encode(t), `${key}[${i}] (encoded)`);
      });
    }
    if (Array.isArray(value) && value.length && Array.isArray(value[0])) return value.map((ids, i) => checkIds(ids, `${key}[${i}]`));
    return [checkIds(value, key)];
  }

  private stopIds(value: unknown, key: string): number[] {
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value) || value.some((id) => !Number.isInteger(id) || id < 0)) throw bad(`'${key}' must be a list of token ids`);
    return value as number[];
  }

  /** Sampling settings in SGLang's or vLLM's field names. */
  private samplingSpec(p: Json, names: { maxTokens: string; seed: string }, where: string, maxTokensDefault: number) {
    const temperature = readNumber(p, 'temperature', 1, { min: 0 }, where);
    const topK = readNumber(p, 'top_k', -1, { integer: true, min: -1 }, where);
    return {
      maxNewTokens: readNumber(p, names.maxTokens, maxTokensDefault, { integer: true, min: 0, max: 1 << 20 }, where),
      temperature,
      topP: readNumber(p, 'top_p', 1, { min: Number.MIN_VALUE, max: 1 }, where),
      topK: topK <= 0 ? 0 : topK,
      stopTokenIds: this.stopIds(p.stop_token_ids, `${where}stop_token_ids`),
      ignoreEos: p.ignore_eos === true,
      n: readNumber(p, 'n', 1, { integer: true, min: 1, max: 1024 }, where),
      seed: p[names.seed] === undefined || p[names.seed] === null ? undefined : readNumber(p, names.seed, 0, { integer: true }, where),
    };
  }

  /** One SampleSpec per prompt and sample: the first draws from the request's seed itself, sample i > 0 from stream (seed, i). */
  private specs(prompts: number[][], s: ReturnType<FlowrlServer['samplingSpec']>, adapter?: string): SampleSpec[] {
    const seed = s.seed ?? ServingEngine.freshSeed();
    return prompts.flatMap((inputIds, p) =>
      Array.from({ length: s.n }, (_, i) => ({ inputIds, maxNewTokens: s.maxNewTokens, temperature: s.temperature, topP: s.topP, topK: s.topK, stopTokenIds: s.stopTokenIds, ignoreEos: s.ignoreEos, seed: p * s.n + i === 0 ? seed : Rng.deriveSeed(seed, p * s.n + i), adapter })),
    );
  }

  private async sglangGenerate(body: Json, res: http.ServerResponse): Promise<unknown> {
    const source = body.input_ids ?? body.text;
    if (source === undefined) throw bad("'input_ids' (or 'text') is required");
    const prompts = this.promptIds(source, body.input_ids !== undefined ? 'input_ids' : 'text');
    const params = body.sampling_params ?? {};
    if (!isObject(params)) throw bad("'sampling_params' must be an object");
    const s = this.samplingSpec(params, { maxTokens: 'max_new_tokens', seed: 'sampling_seed' }, 'sampling_params.', 128);
    const adapter = body.lora_path === undefined || body.lora_path === null ? undefined : String(body.lora_path);
    const outputs = await this.sampleWithFaults(res, this.specs(prompts, s, adapter));
    if (!outputs) return undefined;
    const rid = typeof body.rid === 'string' ? body.rid : `flowrl-${this.requestCount}`;
    const items = outputs.map((o, i) => ({
      text: this.decode(o.outputIds),
      output_ids: o.outputIds,
      meta_info: {
        id: outputs.length > 1 ? `${rid}-${i}` : rid,
        finish_reason: o.finish === 'stop' ? { type: 'stop', matched: o.matchedStop } : o.finish === 'length' ? { type: 'length', length: o.outputIds.length } : { type: 'abort', message: 'paused' },
        prompt_tokens: prompts[Math.floor(i / s.n)].length,
        completion_tokens: o.outputIds.length,
        cached_tokens: 0,
        weight_version: o.weightVersion,
        ...(body.return_logprob === true ? { output_token_logprobs: o.outputIds.map((id, t) => [o.logProbs[t], id, null]) } : {}),
      },
    }));
    // SGLang answers one object for one prompt and one sample, else a list.
    const single = prompts.length === 1 && !(Array.isArray(source) && (Array.isArray(source[0]) || typeof source[0] === 'string'));
    return single && s.n === 1 ? items[0] : items;
  }

  private async vllmCompletions(body: Json, res: http.ServerResponse): Promise<unknown> {
    if (body.prompt === undefined) throw bad("'prompt' is required");
    const prompts = this.promptIds(body.prompt, 'prompt');
    const s = this.samplingSpec(body, { maxTokens: 'max_tokens', seed: 'seed' }, '', 16);
    const adapter = this.adapterFor(body.model);
    const logprobs = body.logprobs === undefined || body.logprobs === null ? undefined : readNumber(body, 'logprobs', 0, { integer: true, min: 0, max: 20 });
    const outputs = await this.sampleWithFaults(res, this.specs(prompts, s, adapter));
    if (!outputs) return undefined;
    const tokens = (ids: number[]) => ids.map((id) => (body.return_tokens_as_token_ids === true ? `token_id:${id}` : this.decode([id])));
    const promptTotal = prompts.reduce((n, p) => n + p.length * s.n, 0);
    return this.completion(
      'text_completion',
      body.model,
      promptTotal,
      outputs,
      outputs.map((o, i) => ({
        index: i,
        text: this.decode(o.outputIds),
        ...(body.return_token_ids === true ? { token_ids: o.outputIds, prompt_token_ids: prompts[Math.floor(i / s.n)] } : {}),
        logprobs:
          logprobs === undefined
            ? null
            : { tokens: tokens(o.outputIds), token_logprobs: o.logProbs, top_logprobs: logprobs > 0 ? o.outputIds.map((id, t) => ({ [tokens([id])[0]]: o.logProbs[t] })) : null, text_offset: o.outputIds.map(() => 0) },
        finish_reason: o.finish,
        // vLLM names the stop token only when it came from stop_token_ids (null for EOS).
        stop_reason: o.finish === 'stop' && o.matchedStop !== undefined && s.stopTokenIds.includes(o.matchedStop) ? o.matchedStop : null,
      })),
    );
  }

  private async chatCompletions(body: Json, res: http.ServerResponse): Promise<unknown> {
    const tokenizer = this.options.tokenizer;
    if (!tokenizer) throw bad('this server has no tokenizer, so it cannot take chat messages');
    if (!tokenizer.hasChatTemplate) throw bad(`${this.options.modelDir}: the tokenizer has no chat template`);
    const messages = body.messages;
    if (!Array.isArray(messages) || !messages.length) throw bad("'messages' must be a non-empty list");
    messages.forEach((m, i) => {
      if (!isObject(m) || typeof m.role !== 'string' || typeof m.content !== 'string') throw bad(`'messages[${i}]' must be {role, content} strings`);
    });
    const text = tokenizer.applyChatTemplate(messages as { role: string; content: string }[]);
    const s = this.samplingSpec({ ...body, max_tokens: body.max_completion_tokens ?? body.max_tokens }, { maxTokens: 'max_tokens', seed: 'seed' }, '', 256);
    const prompt = this.promptIds(text, 'messages');
    const outputs = await this.sampleWithFaults(res, this.specs(prompt, s, this.adapterFor(body.model)));
    if (!outputs) return undefined;
    const stops = new Set([...this.engine.config.eosTokenIds, ...s.stopTokenIds]);
    return this.completion(
      'chat.completion',
      body.model,
      prompt[0].length,
      outputs,
      outputs.map((o, i) => ({
        index: i,
        message: { role: 'assistant', content: tokenizer.decode(o.outputIds.filter((id) => !stops.has(id)), true) },
        logprobs: body.logprobs === true ? { content: o.outputIds.map((id, t) => ({ token: tokenizer.decode([id]), logprob: o.logProbs[t] })) } : null,
        finish_reason: o.finish,
      })),
    );
  }

  /** What OpenAI's completion objects hold around their choices: ids, model and token usage. */
  private completion(object: 'text_completion' | 'chat.completion', model: unknown, promptTokens: number, outputs: SampleOutput[], choices: Json[]): Json {
    const completionTokens = outputs.reduce((n, o) => n + o.outputIds.length, 0);
    return {
      id: `${object === 'chat.completion' ? 'chatcmpl' : 'cmpl'}-flowrl-${this.requestCount}`,
      object,
      created: Math.floor(Date.now() / 1000),
      model: typeof model === 'string' ? model : this.modelName,
      choices,
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    };
  }

  /** vLLM selects a LoRA adapter by naming it as the model. */
  private adapterFor(model: unknown): string | undefined {
    if (model === undefined || model === null || model === this.modelName) return undefined;
    if (typeof model !== 'string') throw bad("'model' must be a string");
    if (this.engine.adapterNames().includes(model)) return model;
    throw new HttpError(404, `The model \`${model}\` does not exist.`);
  }

  private decode(ids: number[]): string {
    return this.options.tokenizer ? this.options.tokenizer.decode(ids) : '';
  }
}

function errorBody(status: number, message: string): Json {
  const type = status === 400 ? 'BadRequestError' : status === 404 ? 'NotFoundError' : status === 413 ? 'RequestTooLarge' : status === 503 ? 'ServiceUnavailable' : 'InternalServerError';
  return { object: 'error', message, type, code: status, error: { message, type, code: status } };
}

function send(res: http.ServerResponse, status: number, body: unknown, type = 'application/json'): undefined {
  const text = type === 'application/json' ? JSON.stringify(body) : String(body);
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) });
  res.end(text);
  return undefined;
}
