// The HTTP vocabulary flowrl serve and its dialect route tables share: errors with a status, JSON
// helpers, route tables, sampling rules, and the DialectHost a dialect's routes call back into.
import type http from 'node:http';
import type { TextTokenizer } from '../model/tokenizer.js';
import type { SampleOutput, SampleSpec, ServingEngine } from './serving-engine.js';

/** A request the server refuses: its HTTP status, message, and fields a dialect adds to its error body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly extra: Json = {},
  ) {
    super(message);
  }
}

export const bad = (message: string) => new HttpError(400, message);

export type Json = Record<string, unknown>;

export function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function readNumber(body: Json, key: string, fallback: number, check: { integer?: boolean; min?: number; max?: number } = {}, where = ''): number {
  const v = body[key];
  if (v === undefined || v === null) return fallback;
  const ok = typeof v === 'number' && Number.isFinite(v) && (!check.integer || Number.isInteger(v)) && (check.min === undefined || v >= check.min) && (check.max === undefined || v <= check.max);
  if (!ok) throw bad(`'${where}${key}' must be ${check.integer ? 'an integer' : 'a number'}${check.min !== undefined ? ` >= ${check.min}` : ''}${check.max !== undefined ? ` <= ${check.max}` : ''}; got ${preview(v)}`);
  return v;
}

/** Longest client string a server copies into its answers (a request id). */
export const MAX_ECHOED_CHARS = 256;

/** A client string the answer repeats, checked and bounded (a 10 MB id copied into every sample ran the heap out). */
export function echoedText(value: unknown, key: string): string {
  if (typeof value !== 'string') throw bad(`'${key}' must be a string`);
  if (value.length > MAX_ECHOED_CHARS) throw bad(`'${key}' is ${value.length} characters long; at most ${MAX_ECHOED_CHARS}`);
  return value;
}

/** A short rendering of a client's value for an error message (never the whole of a huge one). */
export function preview(v: unknown): string {
  if (Array.isArray(v)) return `a list of ${v.length}`;
  if (isObject(v)) return 'an object';
  const text = JSON.stringify(v) ?? String(v);
  return text.length > 60 ? `${text.slice(0, 60)}...` : text;
}

/** What a route handler gets. */
export interface RouteCall {
  body: Json;
  url: URL;
  res: http.ServerResponse;
}

/** A route: its handler; admin routes are served only with enableAdmin. */
export interface Route {
  handler: (call: RouteCall) => unknown;
  admin?: boolean;
}

/** Routes by 'METHOD /path'. */
export type RouteTable = Record<string, Route>;

/** Sampling settings as a request gives them (in either dialect's field names): a sample's spec without its prompt, n samples, seed optional. */
export interface RequestSampling extends Omit<SampleSpec, 'inputIds' | 'seed' | 'adapter'> {
  n: number;
  seed?: number;
  /** OpenAI's `stop` strings (the engine ends a sample at the first; the answer's text is cut before it). */
  stopStrings: string[];
  /** Whether answer text leaves out special tokens (`</s>`, `<|im_end|>`): both engines' skip_special_tokens, true by default. */
  skipSpecialTokens: boolean;
}

/** A boolean field: absent or null is `fallback`; anything but a boolean is a 400 naming it (a string "true" was once taken as false). */
export function readFlag(body: Json, key: string, fallback: boolean, where = ''): boolean {
  const v = body[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') throw bad(`'${where}${key}' must be true or false; got ${JSON.stringify(v)?.slice(0, 40)}`);
  return v;
}

/**
 * Fields the real engines act on and this server does not: each is refused with a 400 naming it,
 * unless absent, null or at its no-op value (`noop`, or absent only when undefined). A client that
 * sent one would otherwise get an answer that silently is not what it asked for.
 */
export function refuseUnsupported(body: Json, fields: Record<string, unknown>, where = ''): void {
  for (const [key, noop] of Object.entries(fields)) {
    const v = body[key];
    if (v === undefined || v === null || (noop !== undefined && JSON.stringify(v) === JSON.stringify(noop))) continue;
    throw bad(`'${where}${key}' is not supported by flowrl serve${noop !== undefined ? ` (only ${JSON.stringify(noop)})` : ''}; leave it out`);
  }
}

/** Bytes of a streamed answer its client may leave unread, by default. */
export const DEFAULT_STREAM_BACKLOG_BYTES = 32 * 2 ** 20;

/** Most top-logprob entries one answer may hold (about 400 bytes each while it is built). */
export const MAX_TOP_LOGPROB_ENTRIES = 2 ** 20;

/** Most stop strings a request may give. */
export const MAX_STOP_STRINGS = 16;

/** Where the first of `stops` begins in `text`, and which it is; undefined when none occurs. */
export function firstStop(text: string, stops: string[]): { at: number; stop: string } | undefined {
  let found: { at: number; stop: string } | undefined;
  for (const stop of stops) {
    const at = text.indexOf(stop);
    if (at >= 0 && (!found || at < found.at)) found = { at, stop };
  }
  return found;
}

/**
 * A streamed answer (server-sent events, as vLLM and SGLang stream): `data: JSON` events, then
 * `data: [DONE]`. The head is written with the first event, so a request refused before any
 * token (a full queue, a bad field) still gets its status and error body.
 */
export class EventStream {
  constructor(
    private readonly res: http.ServerResponse,
    /** Unread bytes past which the client is taken as gone: the connection closes, which cancels its samples. */
    private readonly backlogLimit = DEFAULT_STREAM_BACKLOG_BYTES,
  ) {}

  get started(): boolean {
    return this.res.headersSent;
  }

  /** Whether the client has not yet read what was sent (an event that the next one makes whole may be skipped). */
  get behind(): boolean {
    return this.res.writableNeedDrain;
  }

  send(data: unknown): void {
    if (this.res.writableEnded || this.res.destroyed) return;
    if (!this.res.headersSent) this.res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
    this.res.write(`data: ${JSON.stringify(data)}\n\n`);
    // A client that stopped reading would otherwise grow the server's memory by the whole answer.
    if (this.res.writableLength > this.backlogLimit) this.res.destroy();
  }

  /** Ends the stream: a failure after the head is an error event (the status is spent), then [DONE]. */
  end(error?: { status: number; message: string }): undefined {
    if (error) this.send(errorBody(error.status, error.message));
    if (!this.res.writableEnded && !this.res.destroyed) this.res.end('data: [DONE]\n\n');
    return undefined;
  }
}

/** How many characters at the end of `text` could begin one of `marks` (held back until the next token says). */
function heldTail(text: string, marks: string[]): number {
  let held = 0;
  for (const mark of marks) {
    for (let k = Math.min(mark.length - 1, text.length); k > held; k--) {
      if (text.endsWith(mark.slice(0, k))) {
        held = k;
        break;
      }
    }
  }
  return held;
}

/**
 * A sample's text as it grows, in deltas: never past the first of `marks` (stop strings, a tool
 * call's opening tag), holding back a tail that could begin one, and a character still missing
 * bytes (decoded as U+FFFD). Decoded incrementally, as vLLM detokenizes (the new ids with the few
 * before them for context, less what those few decode to alone), and searched from where the last
 * search ended: a step costs the same at token 30,000 as at token 30 (decoding every id each step
 * grew with the square of the length).
 */
export class TextDeltas {
  private sent = '';
  private text = '';
  private prefixOffset = 0;
  private readOffset = 0;
  /** Where the next search for a mark starts (less a mark's length, for one that straddles). */
  private searched = 0;
  private ended = false;

  constructor(
    private readonly decode: (ids: readonly number[]) => string,
    private readonly marks: string[],
  ) {}

  /** What is new in the text of `ids` (the same sample's ids, one step longer each call). */
  next(ids: readonly number[]): string {
    if (this.ended) return '';
    const before = this.decode(ids.slice(this.prefixOffset, this.readOffset));
    const after = this.decode(ids.slice(this.prefixOffset));
    if (after.length > before.length && !after.endsWith('\ufffd')) {
      this.text += after.slice(before.length);
      this.prefixOffset = this.readOffset;
      this.readOffset = ids.length;
    }
    let text = this.text;
    const longest = Math.max(0, ...this.marks.map((m) => m.length));
    const hit = firstStop(text.slice(Math.max(0, this.searched - longest + 1)), this.marks);
    if (hit) {
      text = text.slice(0, Math.max(0, this.searched - longest + 1) + hit.at);
      this.ended = true;
    } else {
      this.searched = text.length;
      text = text.slice(0, text.length - heldTail(text, this.marks));
    }
    // The text only grows here, so what was sent is its beginning: no comparison of the whole.
    return this.take(text);
  }

  /** What the final text adds to what was sent (nothing when it no longer begins with it). */
  rest(final: string): string {
    return final.startsWith(this.sent) ? this.take(final) : '';
  }

  private take(text: string): string {
    if (text.length <= this.sent.length) return '';
    const delta = text.slice(this.sent.length);
    this.sent = text;
    return delta;
  }
}

/** `stream_options` as vLLM reads it: include_usage adds a last event with the usage (continuous_usage_stats is refused here). */
export function streamOptions(body: Json): { includeUsage: boolean } {
  const options = body.stream_options;
  if (options === undefined || options === null) return { includeUsage: false };
  if (body.stream !== true) throw bad("'stream_options' needs 'stream' true");
  if (!isObject(options)) throw bad("'stream_options' must be an object");
  for (const key of Object.keys(options)) {
    if (key === 'continuous_usage_stats' && options[key] !== true) continue;
    if (key !== 'include_usage') throw bad(`'stream_options.${key}' is not supported by flowrl serve`);
  }
  if (options.include_usage !== undefined && options.include_usage !== null && typeof options.include_usage !== 'boolean') throw bad("'stream_options.include_usage' must be a boolean");
  return { includeUsage: options.include_usage === true };
}

/** How a dialect names and bounds its sampling fields. */
export interface SamplingRules {
  maxTokens: string;
  seed: string;
  /** Prefix of the fields in error messages ('sampling_params.' for SGLang). */
  where: string;
  maxTokensDefault: number | 'rest';
  /** vLLM takes top_k 0 as off; SGLang refuses it (-1 is off there). */
  topKZeroIsOff: boolean;
  /** The engine's message for a request longer than the context. */
  contextError: (promptTokens: number, newTokens: number, context: number) => string;
  /** The dialect's name for the fewest new tokens before a stop token may end a sample. */
  minTokens: string;
  /** Fields of this dialect that ask for what this server does not do (guided decoding): a 400 names them. */
  unsupported: string[];
}

/** What a dialect's routes use of the server (FlowrlServer implements it). */
export interface DialectHost {
  readonly engine: ServingEngine;
  readonly options: { modelDir: string; tokenizer?: TextTokenizer; logprobsMode: 'processed_logprobs' | 'raw_logprobs'; streamBacklogBytes?: number; maxLogprobs?: number };
  readonly modelName: string;
  checkHealth(): Json;
  loadablePath(value: unknown, key: string): string;
  promptIds(value: unknown, key: string): number[][];
  textPromptIds(value: unknown, key: string): Promise<number[][]>;
  samplingSpec(p: Json, prompts: number[][], rules: SamplingRules): RequestSampling;
  specs(prompts: number[][], s: RequestSampling, adapter?: string): SampleSpec[];
  sample(res: http.ServerResponse, specs: SampleSpec[], rid?: string): Promise<SampleOutput[] | undefined>;
  abortRequests(rid: string, all: boolean): number;
  generationDefaults(): Json;
  decode(ids: number[], skipSpecialTokens?: boolean): string;
  nextId(): number;
}

const ERROR_TYPES: Record<number, string> = { 400: 'BadRequestError', 401: 'AuthenticationError', 403: 'PermissionDeniedError', 404: 'NotFoundError', 413: 'RequestTooLarge', 415: 'UnsupportedMediaType', 503: 'ServiceUnavailable' };

/** Both engines' error shapes at once: vLLM's {error: {message, type, code}} and SGLang's {object, message, code}. */
export function errorBody(status: number, message: string): Json {
  const type = ERROR_TYPES[status] ?? 'InternalServerError';
  return { object: 'error', message, type, code: status, error: { message, type, code: status } };
}

export function send(res: http.ServerResponse, status: number, body: unknown, type = 'application/json'): undefined {
  const text = type === 'application/json' ? JSON.stringify(body) : String(body);
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) });
  res.end(text);
  return undefined;
}
