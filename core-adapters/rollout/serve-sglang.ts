// flowrl serve's SGLang dialect: the native routes RL rollouts use, as SGLang v0.5.18 serves them
// (python/sglang/srt/entrypoints/http_server.py, managers/io_struct.py, tokenizer_manager.py and
// sampling/sampling_params.py at that tag): the weight version read from /model_info (the old
// version routes answer 404), a disk update that waits for running requests unless told to abort
// them and flushes the cache itself, /update_weight_version aborting by default, LoRA loads that
// leave the version alone, /flush_cache refused with a plain-text 400 while requests are pending,
// and logprobs after temperature, before top-k/top-p (the trainer's convention).
import type http from 'node:http';
import type { SampleOutput, StepScores } from './serving-engine.js';
import { bad, echoedText, EventStream, firstStop, HttpError, isObject, readFlag, readNumber, refuseUnsupported, send, TextDeltas, type DialectHost, type Json, type RouteTable, type SamplingRules } from './serve-http.js';

/** The SGLang release whose routes, fields and status codes this dialect mirrors. */
export const SGLANG_RELEASE = 'v0.5.18';

const SAMPLING: SamplingRules = {
  maxTokens: 'max_new_tokens',
  seed: 'sampling_seed',
  where: 'sampling_params.',
  maxTokensDefault: 128,
  topKZeroIsOff: false,
  minTokens: 'min_new_tokens',
  // SGLang's constrained decoding (sampling_params.py at v0.5.18).
  unsupported: ['regex', 'json_schema', 'ebnf', 'structural_tag'],
  contextError: (prompt, fresh, context) =>
    prompt >= context
      ? `The input (${prompt} tokens) is longer than the model's context length (${context} tokens).`
      : `Requested token count exceeds the model's maximum context length of ${context} tokens. You requested a total of ${prompt + fresh} tokens: ${prompt} tokens from the input messages and ${fresh} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`,
};

/** Most top logprobs this server reports per token (SGLang sets no limit; this bounds the answer). */
const MAX_TOP_LOGPROBS_NUM = 20;

/** The routes SGLang retired in favour of /model_info: 404, as there. */
const retired = () => {
  throw new HttpError(404, "This endpoint is deprecated. Please use '/model_info' instead.");
};

export function sglangRoutes(server: DialectHost): RouteTable {
  const engine = server.engine;
  return {
    'GET /health_generate': {
      handler: async () => {
        server.checkHealth();
        // A paused engine runs nothing: the probe would wait for the resume.
        if (engine.paused) throw new HttpError(503, 'generation is paused (/pause_generation); /continue_generation resumes it');
        await engine.submit({ inputIds: [0], maxNewTokens: 1, temperature: 0, topP: 1, topK: 0, stopTokenIds: [], ignoreEos: true, seed: 0 });
        return {};
      },
    },
    'GET /get_weight_version': { handler: retired },
    'GET /weight_version': { handler: retired },
    'GET /get_model_info': { handler: () => modelInfo(server) },
    'GET /model_info': { handler: () => modelInfo(server) },
    'GET /v1/loads': { handler: () => ({ num_running_reqs: engine.busy, num_waiting_reqs: engine.waiting }) },
    'GET /get_load': { handler: () => ({ num_running_reqs: engine.busy, num_waiting_reqs: engine.waiting }) },
    'POST /generate': { handler: ({ body, res }) => generate(server, body, res) },
    'POST /update_weights_from_disk': {
      admin: true,
      handler: async ({ body }) => {
        // As SGLang: the version changes only when the request gives one.
        const version = body.weight_version === undefined || body.weight_version === null ? engine.weightVersion : echoedText(String(body.weight_version), 'weight_version');
        const dir = server.loadablePath(body.model_path, 'model_path');
        const aborted = body.abort_all_requests === true ? engine.abortAll() : 0;
        try {
          await engine.loadWeights(dir, version, body.abort_all_requests === true);
        } catch (e) {
          throw new HttpError(400, `failed to load ${String(body.model_path)}: ${(e as Error).message}`, { success: false, num_paused_requests: aborted });
        }
        return { success: true, message: `loaded ${String(body.model_path)} as weight version ${version}`, num_paused_requests: aborted };
      },
    },
    'POST /update_weight_version': {
      admin: true,
      handler: ({ body }) => {
        if (body.new_version === undefined || body.new_version === null) throw bad("'new_version' is required");
        // SGLang aborts every request here unless told not to.
        if (body.abort_all_requests !== false) engine.abortAll();
        engine.weightVersion = echoedText(String(body.new_version), 'new_version');
        return { success: true, message: `Weight version updated to ${engine.weightVersion}`, new_version: engine.weightVersion };
      },
    },
    'POST /pause_generation': {
      admin: true,
      handler: async ({ body }) => {
        const mode = body.mode ?? 'abort';
        if (mode !== 'abort' && mode !== 'retract' && mode !== 'in_place') throw bad(`'mode' must be abort, retract or in_place; got ${JSON.stringify(mode)}`);
        await engine.pause(mode === 'abort' ? 'abort' : 'keep');
        return { message: 'Generation paused successfully.', status: 'ok' };
      },
    },
    'POST /continue_generation': {
      admin: true,
      handler: () => {
        engine.resume();
        return { message: 'Generation continued successfully.', status: 'ok' };
      },
    },
    'GET /flush_cache': { admin: true, handler: ({ res }) => flushCache(server, res) },
    'POST /flush_cache': { admin: true, handler: ({ res }) => flushCache(server, res) },
    'POST /abort_request': {
      admin: true,
      handler: ({ body }) => {
        const rid = body.rid === undefined || body.rid === null ? '' : echoedText(body.rid, 'rid');
        if (body.abort_all !== undefined && typeof body.abort_all !== 'boolean') throw bad("'abort_all' must be true or false");
        server.abortRequests(rid, body.abort_all === true);
        return {};
      },
    },
    'POST /load_lora_adapter': { admin: true, handler: ({ body }) => loadAdapter(server, body) },
    'POST /unload_lora_adapter': { admin: true, handler: ({ body }) => unloadAdapter(server, body) },
  };
}

function modelInfo(server: DialectHost): Json {
  return {
    model_path: server.engine.weightsPath,
    tokenizer_path: server.options.tokenizer ? server.options.modelDir : null,
    served_model_name: server.modelName,
    is_generation: true,
    weight_version: server.engine.weightVersion,
  };
}

/** No prefix cache to clear; refused while requests run or wait, in plain text, as SGLang does. */
function flushCache(server: DialectHost, res: http.ServerResponse): undefined {
  if (server.engine.busy || server.engine.waiting) return send(res, 400, 'Flush cache failed.\n', 'text/plain');
  return send(res, 200, 'Cache flushed.\n', 'text/plain');
}

/** SGLang's LoRA answers: {success, error_message, loaded_adapters}, 400 on failure. Loading leaves the weight version alone. */
function adapterAnswer(server: DialectHost, error?: string): Json {
  const answer = { success: !error, error_message: error ?? null, loaded_adapters: Object.fromEntries(server.engine.adapterNames().map((n) => [n, server.engine.adapterPath(n)])) };
  if (error) throw new HttpError(400, error, answer);
  return answer;
}

async function loadAdapter(server: DialectHost, body: Json): Promise<Json> {
  const { lora_name: name } = body;
  if (typeof name !== 'string' || !name) throw bad("'lora_name' must be a non-empty string");
  echoedText(name, 'lora_name');
  const dir = server.loadablePath(body.lora_path, 'lora_path');
  try {
    await server.engine.loadAdapter(name, dir, false);
  } catch (e) {
    return adapterAnswer(server, (e as Error).message);
  }
  return adapterAnswer(server);
}

async function unloadAdapter(server: DialectHost, body: Json): Promise<Json> {
  const name = body.lora_name;
  if (typeof name !== 'string' || !(await server.engine.unloadAdapter(name))) return adapterAnswer(server, `LoRA adapter ${JSON.stringify(name)} is not loaded`);
  return adapterAnswer(server);
}

/** Fields of SGLang v0.5.18's GenerateReqInput it acts on and this server does not, with their no-op values. */
const GENERATE_UNSUPPORTED_FIELDS = {
  token_ids_logprob: undefined,
  return_hidden_states: false,
  image_data: undefined,
  audio_data: undefined,
  video_data: undefined,
  input_embeds: undefined,
  custom_logit_processor: undefined,
  session_params: undefined,
  bootstrap_host: undefined,
};
const SAMPLING_UNSUPPORTED_FIELDS = { spaces_between_special_tokens: true, custom_params: undefined };

async function generate(server: DialectHost, body: Json, res: http.ServerResponse): Promise<unknown> {
  for (const key of ['return_logprob', 'return_text_in_logprobs', 'return_hidden_states']) readFlag(body, key, false);
  refuseUnsupported(body, GENERATE_UNSUPPORTED_FIELDS);
  // input_ids are ids only (a string there is a mistake, not a prompt); text is the text route.
  const byIds = body.input_ids !== undefined && body.input_ids !== null;
  if (byIds && body.text !== undefined && body.text !== null) throw bad("give 'input_ids' or 'text', not both");
  if (!byIds && (body.text === undefined || body.text === null)) throw bad("'input_ids' (or 'text') is required");
  const prompts = byIds ? server.promptIds(body.input_ids, 'input_ids') : await server.textPromptIds(body.text, 'text');
  const params = body.sampling_params ?? {};
  if (!isObject(params)) throw bad("'sampling_params' must be an object");
  readFlag(params, 'no_stop_trim', false, 'sampling_params.');
  refuseUnsupported(params, SAMPLING_UNSUPPORTED_FIELDS, 'sampling_params.');
  const s = server.samplingSpec(params, prompts, SAMPLING);
  const top = body.top_logprobs_num === undefined || body.top_logprobs_num === null ? 0 : readNumber(body, 'top_logprobs_num', 0, { integer: true, min: 0, max: MAX_TOP_LOGPROBS_NUM });
  s.topLogProbs = body.return_logprob === true ? top : 0;
  // Checked before sampling: the id is copied into every answer.
  const rid = body.rid === undefined || body.rid === null ? `flowrl-${server.nextId()}` : echoedText(body.rid, 'rid');
  const adapter = body.lora_path === undefined || body.lora_path === null ? undefined : String(body.lora_path);
  // SGLang answers one object for one prompt and one sample, else a list (streamed items then carry their index).
  const source = byIds ? body.input_ids : body.text;
  const single = prompts.length === 1 && s.n === 1 && !(Array.isArray(source) && (Array.isArray(source[0]) || typeof source[0] === 'string'));
  const idOf = (i: number) => (prompts.length * s.n > 1 ? `${rid}-${i}` : rid);
  // logprob_start_len 0 with return_logprob: the prompt's tokens scored too (input_token_logprobs), by the weights that sample.
  const startLen = body.logprob_start_len === undefined || body.logprob_start_len === null ? -1 : readNumber(body, 'logprob_start_len', -1, { integer: true, min: -1 });
  if (startLen > 0) throw bad("'logprob_start_len' other than -1 or 0 is not supported by flowrl serve");
  const inputLogprobs = startLen === 0 && body.return_logprob === true;
  if (inputLogprobs && s.temperature !== 1) throw bad("'logprob_start_len' 0 is supported by flowrl serve at temperature 1 only (the prompt is scored at T = 1)");
  let specs = server.specs(prompts, s, adapter).map((spec, i) => (inputLogprobs && i % s.n === 0 ? { ...spec, withPromptLogProbs: true, promptTopLogProbs: top } : spec));
  const stream = streamedGenerate(server, body, res, specs.length, single, s.stopStrings, s.skipSpecialTokens);
  if (stream) {
    specs = specs.map((spec, i) => ({
      ...spec,
      onStep: (ids: readonly number[], scores: StepScores) =>
        stream.progress(i, ids, () => ({
          id: idOf(i),
          finish_reason: null,
          prompt_tokens: spec.inputIds.length,
          completion_tokens: ids.length,
          cached_tokens: 0,
          weight_version: server.engine.weightVersion,
          ...(body.return_logprob === true ? logprobMeta(ids, scores, top) : {}),
        })),
    }));
  }
  let outputs: SampleOutput[] | undefined;
  try {
    outputs = await server.sample(res, specs, rid);
  } catch (e) {
    if (!stream?.started) throw e;
    return stream.fail(e as Error);
  }
  if (!outputs) return undefined;
  const items = outputs.map((o, i) => {
    const text = server.decode(o.outputIds, s.skipSpecialTokens);
    // SGLang cuts the text before the stop string unless no_stop_trim, and names the string matched.
    const hit = o.finish === 'stop' ? firstStop(text, s.stopStrings) : undefined;
    return {
    text: hit && params.no_stop_trim !== true ? text.slice(0, hit.at) : text,
    output_ids: o.outputIds,
    meta_info: {
      id: idOf(i),
      finish_reason: o.finish === 'stop' ? { type: 'stop', matched: hit ? hit.stop : o.matchedStop } : o.finish === 'length' ? { type: 'length', length: o.outputIds.length } : { type: 'abort', message: 'Abort before prefill' },
      prompt_tokens: prompts[Math.floor(i / s.n)].length,
      completion_tokens: o.outputIds.length,
      cached_tokens: 0,
      weight_version: o.weightVersion,
      ...(body.return_logprob === true ? logprobMeta(o.outputIds, o, top) : {}),
      ...(inputLogprobs ? inputLogprobMeta(prompts[Math.floor(i / s.n)], outputs![Math.floor(i / s.n) * s.n], top) : {}),
    },
    };
  });
  if (stream) return stream.finish(items);
  return single ? items[0] : items;
}

/**
 * SGLang's input log-probs from position 0 (v0.5.18, logprob_result_processor.py): [logprob, id,
 * null] per prompt token, the first with logprob null (nothing before it), and with
 * top_logprobs_num the most likely tokens at each position (null at the first).
 */
function inputLogprobMeta(prompt: number[], scored: SampleOutput, top: number): Json {
  const own = scored.promptLogProbs ?? [];
  return {
    input_token_logprobs: prompt.map((id, t) => [t === 0 ? null : own[t - 1], id, null]),
    ...(top ? { input_top_logprobs: [null, ...(scored.promptTop ?? []).map((p) => p.ids.map((id, r) => [p.logProbs[r], id, null]))] } : {}),
  };
}

/** SGLang's output log-probs of a sample's ids (so far, when streaming): [logprob, id, null] per token, and the top ones with top_logprobs_num. */
function logprobMeta(ids: readonly number[], scores: StepScores, top: number): Json {
  return {
    output_token_logprobs: ids.map((id, t) => [scores.logProbs[t], id, null]),
    // After temperature, before top-k/top-p, as the sampled ids' log-probs.
    ...(top ? { output_top_logprobs: (scores.alternatives ?? []).slice(0, ids.length).map((alt) => alt.ids.slice(0, top).map((id, r) => [alt.atTemperature[r], id, null])) } : {}),
  };
}

/** Past this many tokens a cumulative event is sent at most every LONG_STREAM_EVENT_MS (the n-th costs n). */
const LONG_STREAM_TOKENS = 1024;
const LONG_STREAM_EVENT_MS = 50;

/**
 * /generate with `stream: true`, as SGLang v0.5.18 streams it by default (http_server.py
 * generate_request; tokenizer_manager.py): after each token an event with the text and output_ids
 * so far (cumulative, the text held back while its tail could begin a stop string) and meta_info
 * with finish_reason null; each sample's last event is its whole item; then [DONE]. Batches and
 * n > 1 carry each item's `index`. With return_logprob each event's meta_info holds the log-probs
 * so far, cumulative as the text is (tokenizer_manager.add_logprob_to_meta_info). Since each event
 * holds all before it, some are skipped when the client lags or the sample is long (see progress).
 */
function streamedGenerate(server: DialectHost, body: Json, res: http.ServerResponse, samples: number, single: boolean, stops: string[], skipSpecialTokens: boolean) {
  if (body.stream === undefined || body.stream === null || body.stream === false) return undefined;
  if (body.stream !== true) throw bad("'stream' must be a boolean");
  const events = new EventStream(res, server.options.streamBacklogBytes);
  const texts = Array.from({ length: samples }, () => ({ deltas: new TextDeltas((ids) => server.decode([...ids], skipSpecialTokens), stops), shown: '', sentAt: 0 }));
  const indexed = (i: number, item: Json) => (single ? item : { ...item, index: i });
  return {
    get started() {
      return events.started;
    },
    progress(i: number, ids: readonly number[], meta: () => Json): void {
      const sample = texts[i];
      sample.shown += sample.deltas.next(ids);
      // Each event holds everything before it, so one may be skipped: while the client has not read
      // the last, and past LONG_STREAM_TOKENS at most every LONG_STREAM_EVENT_MS (each costs the length so far).
      const now = performance.now();
      if (events.behind || (ids.length > LONG_STREAM_TOKENS && now - sample.sentAt < LONG_STREAM_EVENT_MS)) return;
      sample.sentAt = now;
      events.send(indexed(i, { text: sample.shown, output_ids: [...ids], meta_info: meta() }));
    },
    fail(e: Error): undefined {
      return events.end({ status: e instanceof HttpError ? e.status : 500, message: e.message });
    },
    finish(items: Json[]): undefined {
      items.forEach((item, i) => events.send(indexed(i, item)));
      return events.end();
    },
  };
}
