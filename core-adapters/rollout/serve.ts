// `flowrl serve`: the serving engine behind the routes of SGLang and vLLM that RL rollouts use (ids
// in, ids and logprobs out, pause, disk weight updates, LoRA), plus OpenAI chat completions. Each
// dialect's routes are a table in its own file (serve-sglang.ts, serve-vllm.ts) naming the release
// it mirrors. This file is what a hostile client meets first: an API key on every route, JSON bodies
// only (a web page cannot send one without a CORS preflight, which is never granted), a size and a
// nesting cap on bodies, admin routes off unless enabled, loaded paths confined to allowed roots,
// and engine faults as 5xx (a 4xx stops a training run) with /health failing once the engine broke.
import crypto from 'node:crypto';
import { setMaxListeners } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TextTokenizer } from '../model/tokenizer.js';
import { Rng } from '../random.js';
import { bad, errorBody, firstStop, HttpError, isObject, MAX_ECHOED_CHARS, MAX_STOP_STRINGS, MAX_TOP_LOGPROB_ENTRIES, preview, readFlag, readNumber, send, type DialectHost, type Json, type RequestSampling, type Route, type RouteTable, type SamplingRules } from './serve-http.js';
import { sglangRoutes } from './serve-sglang.js';
import { vllmRoutes } from './serve-vllm.js';
import { EngineFault, EngineOverloaded, RequestRefused, ServingEngine, type SampleOutput, type SampleSpec, type ServingEngineOptions } from './serving-engine.js';

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
  /** Which engine's routes to serve (default both: their paths do not collide). */
  dialect?: 'sglang' | 'vllm' | 'both';
  /** When set, every route needs `Authorization: Bearer <apiKey>` (401 otherwise), as vLLM's and SGLang's --api-key. */
  apiKey?: string;
  /**
   * SGLang's --admin-api-key: when set, admin routes take this key and not apiKey (other routes
   * keep apiKey, or none), as SGLang's auth middleware decides.
   */
  adminApiKey?: string;
  /** Host header names accepted besides IP literals, localhost and this machine's name; '*' accepts any. */
  allowedHosts?: string[];
  /** Open connections at most (Node drops those past it). */
  maxConnections?: number;
  /** How long a connection may take to send a request's head before it is closed (default 10 s). */
  headersTimeoutMs?: number;
  /** How long receiving a whole request may take (default 60 s; 408 past it). */
  requestTimeoutMs?: number;
  /** Serve the admin routes (weights, adapters, pause, abort, versions); off, they answer 404 as on a vLLM without dev mode. */
  enableAdmin?: boolean;
  /** Directories weights and adapters may be loaded from (403 for any other path); none: loading is refused. */
  weightsRoots?: string[];
  /** Most logprobs and prompt_logprobs a completion may ask for (vLLM's --max-logprobs; default 20). */
  maxLogprobs?: number;
  /** Bytes of a streamed answer its client may leave unread before it is taken as gone (default 32 MiB). */
  streamBacklogBytes?: number;
}

/** How long a connection may take to send a request's head, by default (an idle socket is closed then). */
const IDLE_HEADERS_MS = 10_000;
/** How long receiving a whole request may take, by default. */
const REQUEST_RECEIVE_MS = 60_000;
const DEFAULT_MAX_CONNECTIONS = 512;
/** Request bodies' bytes held at once, in --max-body-mb units (a 503 past it). */
const BODIES_IN_FLIGHT = 4;

/** Characters a text prompt may hold per token of the context (real text has 1 to 5 per token). */
const TEXT_CHARS_PER_TOKEN = 8;
/** Characters encoded between turns of the event loop (about 30 ms of ordinary text). */
const ENCODE_YIELD_CHARS = 65_536;

/** Deepest nesting a request body may have (real requests nest 3 or 4 levels). */
const MAX_JSON_DEPTH = 32;

/** Seeds are 64-bit integers in vLLM's protocol; beyond this a JSON number is no longer exact. */
const MAX_EXACT_SEED = Number.MAX_SAFE_INTEGER;

/** How deep `text`'s brackets nest (outside strings), stopping early past `limit`. */
function jsonDepth(text: string, limit: number): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i += 1; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) {
      deepest = Math.max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c === 125 || c === 93) depth -= 1;
  }
  return deepest;
}

/** Sampling fields this engine does not implement, with the values that leave sampling unchanged. */
const NEUTRAL_PENALTIES: Record<string, number> = { min_p: 0, repetition_penalty: 1, frequency_penalty: 0, presence_penalty: 0 };

/** What a generation answer may be replaced with (the test-only fault layer decides). */
export type GenerationFate = 'answer' | 'drop' | 'hang';

/** Test-only hooks (serve-faults.ts installs them). */
export interface ServerHooks {
  /** Called before each generation request runs; may throw an HttpError or ask to drop or hang it. */
  beforeGeneration?: (res: http.ServerResponse) => Promise<GenerationFate>;
  /** Called with 'METHOD /path' before every routed request; may throw an HttpError. */
  beforeRoute?: (route: string) => void;
  /** Makes /health and /health_generate fail. */
  unhealthy?: () => boolean;
  /** Ids every sample takes instead of drawing (a scripted answer); undefined: drawn. */
  scriptedIds?: () => number[] | undefined;
}

/** How long an idle connection is kept (announced in a Keep-Alive header), as SGLang's uvicorn keeps one. */
export const KEEP_ALIVE_MS = 5000;

/** The served model, the HTTP server and its routes. */
export class FlowrlServer implements DialectHost {
  readonly engine: ServingEngine;
  private server?: http.Server;
  private routes: RouteTable;
  readonly hooks: ServerHooks = {};
  /** Requests held open by a hook (answered on close so the process can exit). */
  readonly held = new Set<http.ServerResponse>();
  private requestCount = 0;
  private draining = false;
  private readonly apiKeyDigest?: Buffer;
  private readonly adminKeyDigest?: Buffer;
  private readonly hostNames: Set<string>;
  /** Bytes of request bodies being received now (bounded: slow uploads held a gigabyte once). */
  private bodyBytes = 0;
  /** Allowed roots as given (absolute) and as resolved. */
  private readonly roots: { given: string; real: string }[];
  readonly modelName: string;
  /** When the server started, in seconds (the models list's `created`). */
  private readonly created = Math.floor(Date.now() / 1000);

  constructor(readonly options: ServeOptions) {
    this.engine = new ServingEngine(options.modelDir, options, options.adapterDir);
    this.modelName = path.basename(path.resolve(options.modelDir));
    for (const [flag, key] of [['--api-key', options.apiKey], ['--admin-api-key', options.adminApiKey]] as const) {
      if (key !== undefined && !key.trim()) throw new RequestRefused(`${flag} is empty: give a key, or leave the flag out to serve without one`);
    }
    this.apiKeyDigest = options.apiKey ? digest(options.apiKey) : undefined;
    this.adminKeyDigest = options.adminApiKey ? digest(options.adminApiKey) : undefined;
    this.hostNames = new Set(['localhost', os.hostname().toLowerCase(), ...(options.allowedHosts ?? []).map((h) => h.toLowerCase())]);
    this.roots = (options.weightsRoots ?? []).map((root) => ({ given: path.resolve(root), real: realDirectory(root) }));
    const dialect = options.dialect ?? 'both';
    this.routes = {
      ...this.commonRoutes(),
      ...(dialect !== 'vllm' ? sglangRoutes(this) : {}),
      ...(dialect !== 'sglang' ? vllmRoutes(this) : {}),
    };
  }

  /** The HTTP server once listening (the test-only fault layer changes how it keeps connections). */
  get httpServer(): http.Server | undefined {
    return this.server;
  }

  /** Adds routes (the test-only fault layer's). */
  addRoutes(routes: RouteTable): void {
    this.routes = { ...this.routes, ...routes };
  }

  /** Starts listening; resolves with the base URL. */
  async listen(): Promise<string> {
    // Only receiving a request is timed (a generation may take minutes): a request whose head takes
    // over 10 s, or whose whole body over 60 s, is answered 408 and closed. Node checks these every
    // connectionsCheckingInterval (30 s by default: a 4 s limit was enforced after 30).
    this.server = http.createServer(
      { headersTimeout: this.options.headersTimeoutMs ?? IDLE_HEADERS_MS, requestTimeout: this.options.requestTimeoutMs ?? REQUEST_RECEIVE_MS, connectionsCheckingInterval: 1000, keepAliveTimeout: KEEP_ALIVE_MS },
      (req, res) => void this.handle(req, res),
    );
    this.server.maxConnections = this.options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    // Node times nothing on a connection that never sends a byte (1,100 idle sockets starved every
    // client once): one that has not sent a whole request head in time is closed.
    const firstRequest = new WeakMap<object, NodeJS.Timeout>();
    this.server.on('connection', (socket: net.Socket) => {
      const timer = setTimeout(() => socket.destroy(), this.options.headersTimeoutMs ?? IDLE_HEADERS_MS).unref();
      firstRequest.set(socket, timer);
      socket.once('close', () => clearTimeout(timer));
    });
    this.server.on('request', (req: http.IncomingMessage) => clearTimeout(firstRequest.get(req.socket)));
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(this.options.port, this.options.host, () => resolve());
    });
    const { port } = this.server.address() as AddressInfo;
    const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    return `http://${host}:${port}`;
  }

  /**
   * Stops taking requests and finishes the ones taken: queued and running samples are answered
   * (aborted when the engine is paused or broken), and requests arriving meanwhile get 503. The
   * listener closes only then: closed earlier, connections still waiting to be accepted would be
   * reset instead of answered.
   */
  async drain(): Promise<void> {
    this.draining = true;
    await this.engine.drain();
    const closed = new Promise<void>((resolve) => (this.server?.listening ? this.server.close(() => resolve()) : resolve()));
    for (const res of this.held) res.destroy();
    this.held.clear();
    // The last answers are written by now; keep-alive connections need not wait for their timeout.
    await new Promise((resolve) => setImmediate(resolve));
    this.server?.closeIdleConnections?.();
    await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 2000))]);
    this.server?.closeAllConnections?.();
    this.engine.dispose();
  }

  /** Ends every request at once (queued and running samples finish 'abort'), then drains. */
  async close(): Promise<void> {
    this.engine.paused = true;
    this.engine.abortAll();
    await this.drain();
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    try {
      if (this.draining) {
        res.setHeader('connection', 'close');
        throw new HttpError(503, 'the server is shutting down');
      }
      this.checkHost(req);
      const key = `${req.method ?? 'GET'} ${url.pathname.replace(/\/+$/, '') || '/'}`;
      const route = Object.hasOwn(this.routes, key) ? this.routes[key] : undefined;
      this.authorize(req, route?.admin === true);
      const body = req.method === 'POST' ? await this.readBody(req) : {};
      const out = await this.route(key, route, url, body, res);
      if (out !== undefined) send(res, 200, out);
    } catch (e) {
      if (res.headersSent || res.destroyed) return;
      // A body too large is not read to its end: the connection closes after the answer.
      if (e instanceof HttpError && e.status === 413) res.setHeader('connection', 'close');
      send(res, ...errorAnswer(e));
    }
  }

  /**
   * Refuses a Host header a DNS-rebinding page would send (its own domain, resolved to this
   * server): only IP literals, localhost, this machine's name and --allowed-host names pass.
   */
  private checkHost(req: http.IncomingMessage): void {
    const header = req.headers.host;
    if (header === undefined || this.hostNames.has('*')) return;
    const name = hostOf(header);
    if (net.isIP(name) || this.hostNames.has(name) || name.endsWith('.localhost')) return;
    throw bad(`Host '${header.length > 60 ? `${header.slice(0, 60)}...` : header}' is not an address of this server; call it by IP address, localhost or ${os.hostname()}, or start flowrl serve with --allowed-host NAME`);
  }

  /**
   * Checks the key a route needs in constant time (401 without it, as both engines answer): admin
   * routes the admin key when one is set, else the API key; other routes the API key (SGLang's rules).
   */
  private authorize(req: http.IncomingMessage, admin: boolean): void {
    const wanted = admin && this.adminKeyDigest ? this.adminKeyDigest : this.apiKeyDigest;
    if (!wanted) return;
    const header = req.headers.authorization ?? '';
    const given = /^bearer /i.test(header) ? header.slice(7) : '';
    if (!crypto.timingSafeEqual(digest(given), wanted)) {
      throw new HttpError(401, `Unauthorized: send the ${wanted === this.adminKeyDigest ? 'admin API key (--admin-api-key)' : 'API key'} as "Authorization: Bearer <key>"`);
    }
  }

  private readBody(req: http.IncomingMessage): Promise<Json> {
    const limit = this.options.maxBodyBytes;
    const budget = limit * BODIES_IN_FLIGHT;
    // Only JSON: a web page can send text/plain or a form cross-origin without asking first.
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
    const declared = Number(req.headers['content-length']);
    if (declared > limit) return Promise.reject(new HttpError(413, `request body of ${declared} bytes is over ${limit} bytes (--max-body-mb)`));
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let failed = false;
      const release = () => {
        this.bodyBytes -= size;
        size = 0;
      };
      const fail = (e: Error) => {
        if (failed) return;
        failed = true;
        release();
        chunks.length = 0;
        req.removeAllListeners('data');
        req.resume();
        reject(e);
      };
      req.on('data', (chunk: Buffer) => {
        if (failed) return;
        size += chunk.length;
        this.bodyBytes += chunk.length;
        if (size > limit) return fail(new HttpError(413, `request body over ${limit} bytes (--max-body-mb)`));
        if (this.bodyBytes > budget) return fail(new HttpError(503, `the server is receiving ${BODIES_IN_FLIGHT} bodies' worth of bytes (${budget}) already; retry later`));
        chunks.push(chunk);
      });
      req.on('error', fail);
      req.on('close', () => {
        if (!failed && !req.complete) fail(new Error('the client closed the connection while sending'));
      });
      req.on('end', () => {
        if (failed) return;
        release();
        const text = Buffer.concat(chunks).toString('utf8').trim();
        // Empty bodies too: a page can POST an empty text/plain or typeless request to /pause or /resume.
        if (type !== 'application/json') return reject(new HttpError(415, `a POST must be sent as application/json; got ${type ? `'${type}'` : 'no content-type'}`));
        if (!text) return resolve({});
        if (jsonDepth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH) return reject(bad(`the request body nests deeper than ${MAX_JSON_DEPTH} levels`));
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

  private async route(key: string, route: Route | undefined, url: URL, body: Json, res: http.ServerResponse): Promise<unknown> {
    this.requestCount += 1;
    if (route && (!route.admin || this.options.enableAdmin)) {
      this.hooks.beforeRoute?.(key);
      return route.handler({ body, url, res });
    }
    throw new HttpError(404, `no route ${key.split(' ')[0]} ${url.pathname}${route ? ' (an admin route: start flowrl serve with --enable-admin)' : ''}`);
  }

  private commonRoutes(): RouteTable {
    return {
      'GET /health': { handler: () => this.checkHealth() },
      'GET /v1/models': {
        handler: () => ({
          object: 'list',
          data: [
            // The model's name, not its directory: a client has no use for the server's paths.
            { id: this.modelName, object: 'model', created: this.created, owned_by: 'flowrl', root: this.modelName, max_model_len: this.engine.maxModelLen },
            ...this.engine.adapterNames().map((name) => ({ id: name, object: 'model', created: this.created, owned_by: 'flowrl', root: name, parent: this.modelName })),
          ],
        }),
      },
    };
  }

  /** Healthy unless the engine broke (or a test says otherwise). */
  checkHealth(): Json {
    if (this.engine.fault) throw new HttpError(503, this.engine.fault.message);
    if (this.hooks.unhealthy?.()) throw new HttpError(503, 'unhealthy (injected)');
    return {};
  }

  private defaults?: Json;
  /** The sampling defaults in the model's generation_config.json (read once; none without the file). */
  generationDefaults(): Json {
    if (!this.defaults) {
      const file = path.join(this.options.modelDir, 'generation_config.json');
      let parsed: unknown = {};
      try {
        parsed = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
      } catch (e) {
        throw new HttpError(500, `${file}: ${(e as Error).message}`);
      }
      this.defaults = isObject(parsed) ? parsed : {};
    }
    return this.defaults;
  }

  /** Sequential id for answers without a client id. */
  nextId(): number {
    return this.requestCount;
  }

  /**
   * The real path of a directory a client asks to load, if it lies under an allowed root: 403
   * otherwise (links resolved), 400 when it does not exist. A path outside the roots is refused
   * before the file system is asked, so the answer never tells whether it exists.
   */
  loadablePath(value: unknown, key: string): string {
    if (typeof value !== 'string' || !value) throw bad(`'${key}' must be a directory path`);
    if (!this.roots.length) throw new HttpError(403, `loading weights is off: start flowrl serve with --weights-root DIR naming where the trainer writes them`);
    const outside = () => new HttpError(403, `'${key}' ${value} is outside the allowed roots (--weights-root ${this.roots.map((r) => r.given).join(', ')})`);
    const asked = path.resolve(value);
    if (!this.roots.some((r) => isWithin(asked, r.given) || isWithin(asked, r.real))) throw outside();
    let real: string;
    try {
      real = fs.realpathSync(asked);
    } catch {
      throw bad(`failed to load ${value}: no such directory`);
    }
    if (!this.roots.some((r) => isWithin(real, r.real))) throw outside();
    if (!fs.statSync(real).isDirectory()) throw bad(`failed to load ${value}: not a directory`);
    return real;
  }

  /** Most prompts one request may hold: every sample of a request must fit the queue at once. */
  private get maxPrompts(): number {
    return this.options.maxQueue;
  }

  /** Prompt ids from token ids (one list or a list of lists), checked against the vocabulary. */
  promptIds(value: unknown, key: string): number[][] {
    const vocab = this.engine.config.vocabSize;
    const checkIds = (ids: unknown, where: string): number[] => {
      if (!Array.isArray(ids) || !ids.length) throw bad(`'${where}' must be a non-empty list of token ids`);
      if (ids.length > this.engine.maxModelLen) throw bad(`'${where}' holds ${ids.length} tokens; this model's maximum context length is ${this.engine.maxModelLen}`);
      for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= vocab) throw bad(`'${where}' holds ${preview(id)}, not a token id in [0, ${vocab})`);
      return ids as number[];
    };
    if (Array.isArray(value) && value.length && Array.isArray(value[0])) {
      if (value.length > this.maxPrompts) throw tooManySamples(key, value.length, this.maxPrompts);
      return value.map((ids, i) => checkIds(ids, `${key}[${i}]`));
    }
    return [checkIds(value, key)];
  }

  /** Prompt ids from text (one string or a list), through the tokenizer. */
  /**
   * Text prompts encoded. A text may have at most TEXT_CHARS_PER_TOKEN characters per context token
   * (real text has 1 to 5 per token; 2 million repeated letters took the tokenizer 20 s for 250,000
   * tokens the context refused anyway), and the event loop turns every ENCODE_YIELD_CHARS characters.
   */
  async textPromptIds(value: unknown, key: string): Promise<number[][]> {
    const tokenizer = this.options.tokenizer;
    if (!tokenizer) throw bad(`'${key}' is text but this server has no tokenizer; send token ids`);
    const texts = typeof value === 'string' ? [value] : Array.isArray(value) && value.length ? value : undefined;
    if (!texts) throw bad(`'${key}' must be a string or a non-empty list of strings`);
    if (texts.length > this.maxPrompts) throw tooManySamples(key, texts.length, this.maxPrompts);
    const limit = this.engine.maxModelLen * TEXT_CHARS_PER_TOKEN;
    texts.forEach((t, i) => {
      if (typeof t !== 'string') throw bad(`'${key}[${i}]' must be a string`);
      if (t.length > limit) throw bad(`'${key}[${i}]' holds ${t.length} characters; at most ${limit} (${TEXT_CHARS_PER_TOKEN} per token of this model's ${this.engine.maxModelLen}-token context)`);
    });
    const out: number[][] = [];
    let since = 0;
    for (const [i, t] of (texts as string[]).entries()) {
      out.push(this.promptIds(tokenizer.encode(t), `${key}[${i}] (encoded)`)[0]);
      since += t.length;
      if (since >= ENCODE_YIELD_CHARS) {
        since = 0;
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    return out;
  }

  /** OpenAI's `stop`: a string or a list of strings, bounded in count and length. */
  private stopStrings(value: unknown, key: string): string[] {
    if (value === undefined || value === null) return [];
    const stops = typeof value === 'string' ? [value] : value;
    if (!Array.isArray(stops) || stops.length > MAX_STOP_STRINGS || stops.some((s) => typeof s !== 'string' || !s || s.length > MAX_ECHOED_CHARS)) {
      throw bad(`'${key}' must be a string or a list of at most ${MAX_STOP_STRINGS} non-empty strings of at most ${MAX_ECHOED_CHARS} characters`);
    }
    if (stops.length && !this.options.tokenizer) throw bad(`'${key}' needs text, and this server has no tokenizer; use stop_token_ids`);
    return stops as string[];
  }

  /**
   * Whether a sample's ids end in text holding one of `stops`. Only the tail is decoded (a stop
   * string of L characters spans at most L tokens; twice that covers bytes split across tokens),
   * so each step costs the same however long the sample is.
   */
  private stopTest(stops: string[]): (ids: readonly number[]) => boolean {
    const tail = 2 * Math.max(...stops.map((s) => s.length)) + 4;
    return (ids) => firstStop(this.decode(ids.slice(-tail)), stops) !== undefined;
  }

  private stopIds(value: unknown, key: string): number[] {
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value) || value.length > 1024 || value.some((id) => !Number.isInteger(id) || id < 0)) throw bad(`'${key}' must be a list of token ids`);
    return value as number[];
  }

  /**
   * Sampling settings in a dialect's field names and rules. Max new tokens defaults to
   * `rules.maxTokensDefault`, or with 'rest' to what the context leaves after the longest prompt.
   * Penalties and min_p are accepted at their neutral values only: this engine does not apply them.
   */
  samplingSpec(p: Json, prompts: number[][], rules: SamplingRules): RequestSampling {
    const where = rules.where;
    const n = readNumber(p, 'n', 1, { integer: true, min: 1, max: 1024 }, where);
    // Before anything is expanded: a 250 KB body of 50,000 prompts with n 1024 is 51 million samples.
    if (prompts.length * n > this.maxPrompts) {
      throw new HttpError(400, `the request asks for ${prompts.length * n} samples (${prompts.length} prompts x n ${n}); this server holds at most ${this.maxPrompts} (--max-queue)`);
    }
    const temperature = readNumber(p, 'temperature', 1, { min: 0 }, where);
    const topK = readNumber(p, 'top_k', -1, { integer: true, min: -1 }, where);
    if (topK === 0 && !rules.topKZeroIsOff) throw bad(`'${where}top_k' must be -1 (off) or at least 1; got 0`);
    for (const [key, neutral] of Object.entries(NEUTRAL_PENALTIES)) {
      if (readNumber(p, key, neutral, {}, where) !== neutral) throw bad(`'${where}${key}' must be ${neutral}: flowrl serve does not apply ${key}`);
    }
    const longest = Math.max(...prompts.map((ids) => ids.length));
    const context = this.engine.maxModelLen;
    const maxNewTokens = readNumber(p, rules.maxTokens, rules.maxTokensDefault === 'rest' ? context - longest : rules.maxTokensDefault, { integer: true, min: 0 }, where);
    // Both engines refuse a request the context cannot hold, before any work.
    if (longest + maxNewTokens > context) throw bad(rules.contextError(longest, maxNewTokens, context));
    const seed = p[rules.seed] === undefined || p[rules.seed] === null ? undefined : readNumber(p, rules.seed, 0, { integer: true, min: -MAX_EXACT_SEED, max: MAX_EXACT_SEED }, where);
    const stopStrings = this.stopStrings(p.stop, `${where}stop`);
    for (const key of rules.unsupported) {
      if (p[key] !== undefined && p[key] !== null) throw bad(`'${where}${key}' is not supported by flowrl serve (it has no constrained decoding); leave it out`);
    }
    const format = p.response_format;
    if (format !== undefined && format !== null && !(isObject(format) && format.type === 'text')) throw bad(`'response_format' other than {"type": "text"} is not supported by flowrl serve (it has no constrained decoding)`);
    if (p.best_of !== undefined && p.best_of !== null && p.best_of !== n) throw bad(`'${where}best_of' other than n is not supported by flowrl serve; ask for n samples and choose among them`);
    const minNewTokens = readNumber(p, rules.minTokens, 0, { integer: true, min: 0, max: maxNewTokens }, where);
    return {
      stopStrings,
      stopWhen: stopStrings.length ? this.stopTest(stopStrings) : undefined,
      maxNewTokens,
      temperature,
      topP: readNumber(p, 'top_p', 1, { min: Number.MIN_VALUE, max: 1 }, where),
      topK: topK <= 0 ? 0 : topK,
      stopTokenIds: this.stopIds(p.stop_token_ids, `${where}stop_token_ids`),
      ignoreEos: readFlag(p, 'ignore_eos', false, where),
      skipSpecialTokens: readFlag(p, 'skip_special_tokens', true, where),
      logitBias: this.logitBias(p.logit_bias, `${where}logit_bias`),
      minNewTokens,
      n,
      seed,
    };
  }


  /** OpenAI's logit_bias: token ids (as keys) to biases, each clamped to [-100, 100] as vLLM clamps them. */
  private logitBias(value: unknown, key: string): Map<number, number> | undefined {
    if (value === undefined || value === null) return undefined;
    if (!isObject(value)) throw bad(`'${key}' must be an object of token ids to numbers`);
    const entries = Object.entries(value);
    if (entries.length > 1024) throw bad(`'${key}' holds ${entries.length} entries; at most 1024`);
    const vocab = this.engine.config.vocabSize;
    const bias = new Map<number, number>();
    for (const [id, b] of entries) {
      const token = Number(id);
      if (!/^\d+$/.test(id) || token >= vocab) throw bad(`'${key}' names token ${preview(id)}, not an id of this model's vocabulary (0 to ${vocab - 1})`);
      if (typeof b !== 'number' || !Number.isFinite(b)) throw bad(`'${key}.${id}' must be a number; got ${preview(b)}`);
      bias.set(token, Math.min(100, Math.max(-100, b)));
    }
    return bias;
  }

  /** One SampleSpec per prompt and sample: the first draws from the request's seed itself, sample i > 0 from stream (seed, i). */
  specs(prompts: number[][], s: RequestSampling, adapter?: string): SampleSpec[] {
    // Top logprobs multiply an answer by up to 21: 1024 samples x 62 tokens x 20 held 530 MB.
    const entries = prompts.length * s.n * s.maxNewTokens * (s.topLogProbs ?? 0);
    if (entries > MAX_TOP_LOGPROB_ENTRIES) {
      throw bad(`the request asks for ${entries} top logprobs (${prompts.length * s.n} samples x ${s.maxNewTokens} tokens x ${s.topLogProbs}); at most ${MAX_TOP_LOGPROB_ENTRIES}: ask for fewer samples, tokens or top logprobs`);
    }
    const seed = s.seed === undefined ? ServingEngine.freshSeed() : Rng.foldSeed(s.seed);
    return prompts.flatMap((inputIds, p) =>
      Array.from({ length: s.n }, (_, i) => ({
        inputIds,
        maxNewTokens: s.maxNewTokens,
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        stopTokenIds: s.stopTokenIds,
        ignoreEos: s.ignoreEos,
        seed: p * s.n + i === 0 ? seed : Rng.deriveSeed(seed, p * s.n + i),
        adapter,
        stopWhen: s.stopWhen,
        topLogProbs: s.topLogProbs,
        logitBias: s.logitBias,
        minNewTokens: s.minNewTokens,
      })),
    );
  }

  /** Requests that can be aborted by id (SGLang's /abort_request), each with its aborter. */
  private readonly byRid = new Map<string, Set<AbortController>>();

  /**
   * SGLang's /abort_request (tokenizer_manager.abort_request and scheduler.abort_request at v0.5.18):
   * every request when `all`; else, when a request has exactly `rid`, every request whose id begins
   * with it; an empty rid alone aborts nothing. Their samples finish 'abort'. Returns how many.
   */
  abortRequests(rid: string, all: boolean): number {
    if (all) return this.engine.abortAll();
    if (!rid || !this.byRid.has(rid)) return 0;
    let count = 0;
    for (const [id, aborters] of this.byRid) {
      if (!id.startsWith(rid)) continue;
      for (const aborter of aborters) aborter.abort();
      count += aborters.size;
    }
    return count;
  }

  /**
   * Runs samples through the engine (all queued or none); undefined when a test hook dropped or held
   * the request, or its client went away. `rid`: the id /abort_request can end it by.
   */
  async sample(res: http.ServerResponse, specs: SampleSpec[], rid?: string): Promise<SampleOutput[] | undefined> {
    const fate = (await this.hooks.beforeGeneration?.(res)) ?? 'answer';
    if (fate === 'hang') {
      this.held.add(res);
      return undefined;
    }
    // A client that goes away cancels its samples: queued ones leave the queue, running ones stop (1,024 abandoned samples ran 12 s while new clients timed out).
    const gone = new AbortController();
    const aborter = new AbortController();
    const signal = AbortSignal.any([gone.signal, aborter.signal]);
    // One listener per sample of the request (n may be hundreds); the signal lives as long as the request.
    setMaxListeners(specs.length + 1, signal);
    if (rid !== undefined) this.byRid.set(rid, (this.byRid.get(rid) ?? new Set()).add(aborter));
    const cancel = () => void (res.writableFinished || gone.abort());
    res.on('close', cancel);
    let outputs: SampleOutput[];
    try {
      const forcedIds = this.hooks.scriptedIds?.();
      outputs = await Promise.all(this.engine.submitAll(specs.map((spec) => ({ ...spec, signal, ...(forcedIds ? { forcedIds } : {}) }))));
    } finally {
      res.off('close', cancel);
      const aborters = rid === undefined ? undefined : this.byRid.get(rid);
      aborters?.delete(aborter);
      if (rid !== undefined && !aborters?.size) this.byRid.delete(rid);
    }
    if (gone.signal.aborted) return undefined;
    if (fate === 'drop') {
      res.socket?.destroy();
      return undefined;
    }
    return outputs;
  }

  decode(ids: number[], skipSpecialTokens = false): string {
    return this.options.tokenizer ? this.options.tokenizer.decode(ids, skipSpecialTokens) : '';
  }
}

/** Whether `file` is `dir` or lies under it (both absolute and normalised). */
function isWithin(file: string, dir: string): boolean {
  return file === dir || file.startsWith(dir.endsWith(path.sep) ? dir : dir + path.sep);
}

/** The host name of a Host header, lower-cased, without port or IPv6 brackets. */
function hostOf(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(1, h.indexOf(']') > 0 ? h.indexOf(']') : undefined);
  const colon = h.lastIndexOf(':');
  return colon >= 0 ? h.slice(0, colon) : h;
}

function digest(text: string): Buffer {
  return crypto.createHash('sha256').update(text).digest();
}

/** The 400 for a request with more prompts than the queue holds. */
function tooManySamples(key: string, count: number, limit: number): HttpError {
  return bad(`'${key}' holds ${count} prompts; this server holds at most ${limit} samples (--max-queue)`);
}

/** The real path of an allowed root (it must exist: a typo would otherwise refuse every load). */
function realDirectory(root: string): string {
  try {
    return fs.realpathSync(path.resolve(root));
  } catch {
    throw new RequestRefused(`--weights-root ${root}: no such directory`);
  }
}

/** The status and JSON body for a failure. */
function errorAnswer(e: unknown): [number, Json] {
  const status =
    e instanceof HttpError ? e.status : e instanceof RequestRefused ? 400 : e instanceof EngineOverloaded ? 503 : e instanceof EngineFault ? 500 : e instanceof RangeError ? 400 : 500;
  return [status, { ...errorBody(status, (e as Error).message ?? String(e)), ...(e instanceof HttpError ? e.extra : {}) }];
}
