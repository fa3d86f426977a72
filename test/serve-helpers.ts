// What the flowrl serve tests share: servers on the tiny model, raw HTTP calls, error checks.
import { expect } from 'chai';
import os from 'node:os';
import { ServerCallError, type SampleRequest } from '../core-adapters/rollout/clients.js';
import { FlowrlServer, type ServeOptions } from '../core-adapters/rollout/serve.js';
import { installFaults } from '../core-adapters/rollout/serve-faults.js';
import { fixture } from './helpers.js';

export const TINY = fixture('tiny-qwen2');
export const TINY_ADAPTER = fixture('lora-tiny-qwen2');
// Prompts of several lengths (tiny-qwen2 has 128 tokens; any real vocabulary holds these ids).
export const PROMPTS = [[5, 17, 42, 9], [3, 8], [77, 12, 40, 51, 6, 99, 23]];

/** Admin routes on, weights loadable from the temporary directories and the fixtures. */
export function serveOptions(extra: Partial<ServeOptions> = {}): ServeOptions {
  return { modelDir: TINY, host: '127.0.0.1', port: 0, maxBatch: 64, maxQueue: 64, maxBodyBytes: 1 << 20, logprobsMode: 'processed_logprobs', enableAdmin: true, weightsRoots: [os.tmpdir(), fixture()], ...extra };
}

export async function startServer(extra: Partial<ServeOptions> = {}, faults = false): Promise<{ server: FlowrlServer; url: string }> {
  const server = new FlowrlServer(serveOptions(extra));
  if (faults) installFaults(server);
  return { server, url: await server.listen() };
}

let requestNumber = 0;
export function sample(over: Partial<SampleRequest> = {}): SampleRequest {
  return { inputIds: PROMPTS[0], maxNewTokens: 8, temperature: 1, topP: 1, topK: 0, stopTokenIds: [], seed: 11, requestId: `test-${++requestNumber}`, ...over };
}

export interface Answer {
  status: number;
  body: unknown;
}

/** One HTTP call with plain fetch (a POST as application/json); a string body is sent as is (for malformed JSON). */
export async function call(url: string, route: string, body?: unknown, method?: 'GET' | 'POST', headers: Record<string, string> = {}): Promise<Answer> {
  const verb = method ?? (body === undefined ? 'GET' : 'POST');
  const res = await fetch(url + route, {
    method: verb,
    headers: verb === 'POST' ? { 'content-type': 'application/json', ...headers } : headers,
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  try {
    return { status: res.status, body: JSON.parse(text) as unknown };
  } catch {
    return { status: res.status, body: text };
  }
}

export interface ErrorBody {
  object: string;
  message: string;
  code: number;
  error: { message: string; code: number };
}

export interface SglangItem {
  output_ids: number[];
  meta_info: { id: string; finish_reason: { type: string }; weight_version: string; output_token_logprobs: [number, number, null][] };
}

export interface VllmAnswer {
  choices: { index: number; text: string; token_ids: number[]; logprobs: { token_logprobs: number[] }; finish_reason: string }[];
}

export interface ChatAnswer {
  choices: { message: { role: string; content: string }; logprobs: { content: { logprob: number }[] }; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

/** Checks an error answer: status, the JSON error body, and fragments of its message. */
export function expectError(answer: Answer, status: number, ...fragments: string[]): ErrorBody {
  expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
  const body = answer.body as ErrorBody;
  expect(body.code).to.equal(status);
  expect(body.error.message).to.equal(body.message);
  for (const f of fragments) expect(body.message).to.include(f);
  return body;
}

/** Awaits a rejected call and returns its ServerCallError. */
export async function callError(promise: Promise<unknown>): Promise<ServerCallError> {
  try {
    await promise;
  } catch (e) {
    expect(e, String(e)).to.be.instanceOf(ServerCallError);
    return e as ServerCallError;
  }
  return expect.fail('expected a ServerCallError') as never;
}

export async function waitFor(what: string, done: () => Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > end) expect.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export async function waiting(url: string): Promise<number> {
  return ((await call(url, '/v1/loads')).body as { num_waiting_reqs: number }).num_waiting_reqs;
}

/** The largest |a - b| over two equal-length arrays. */
export function maxDiff(a: number[], b: number[]): number {
  return Math.max(...a.map((v, i) => Math.abs(v - b[i])));
}

