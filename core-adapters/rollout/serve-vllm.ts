// flowrl serve's vLLM dialect: the OpenAI routes with vLLM's extensions and the dev-mode routes
// (VLLM_SERVER_DEV_MODE=1) RL rollouts use, as vLLM v0.20.2 serves them
// (vllm/entrypoints/openai/completion/protocol.py, serve/rpc/api_router.py, serve/rlhf/api_router.py,
// serve/cache/api_router.py, v1/sample/sampler.py at that tag): full weights reloaded from a
// directory through /collective_rpc reload_weights (the release has no disk weight-transfer
// backend and no weight-version route), sampling defaults taken from the model's
// generation_config.json when a request omits them, logprobs raw (T = 1, unfiltered) or processed
// (after temperature and top-k/top-p, renormalised over the kept tokens) by --logprobs-mode, and
// max_tokens 16 by default, cut to what the context leaves.
import type http from 'node:http';
import { randomBytes } from 'node:crypto';
import { parseHermesCalls, pythonJson, TOOL_CALL_OPEN } from '../tools/hermes.js';
import { bad, echoedText, EventStream, MAX_TOP_LOGPROB_ENTRIES, firstStop, HttpError, isObject, readFlag, readNumber, refuseUnsupported, send, streamOptions, TextDeltas, type DialectHost, type Json, type RequestSampling, type RouteTable } from './serve-http.js';
import type { SampleOutput, SampleSpec, StepScores } from './serving-engine.js';
import { samplesGreedily } from '../model/generate.js';

/** The vLLM release whose routes, fields and status codes this dialect mirrors. */
export const VLLM_RELEASE = 'v0.20.2';

/** Most top logprobs a request may ask for (OpenAI's limit). */
const MAX_TOP_LOGPROBS = 20;

/** Default max_tokens of /v1/completions when a request omits it. */
const COMPLETION_MAX_TOKENS = 16;

const contextError = (prompt: number, fresh: number, context: number) =>
  `This model's maximum context length is ${context} tokens. However, you requested ${fresh} output tokens and your prompt contains ${prompt} input tokens, for a total of ${prompt + fresh} tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=${prompt})`;

/** Sampling fields vLLM fills from the model's generation_config.json when a request omits them. */
const GENERATION_CONFIG_FIELDS = ['temperature', 'top_p', 'top_k', 'min_p', 'repetition_penalty'] as const;

export function vllmRoutes(server: DialectHost): RouteTable {
  const engine = server.engine;
  return {
    'POST /v1/completions': { handler: ({ body, res }) => completions(server, body, res) },
    'POST /v1/chat/completions': { handler: ({ body, res }) => chatCompletions(server, body, res) },
    'POST /v1/load_lora_adapter': {
      admin: true,
      handler: async ({ body, res }) => {
        const name = body.lora_name;
        if (typeof name !== 'string' || !name) throw bad("'lora_name' must be a non-empty string");
        echoedText(name, 'lora_name');
        const inPlace = body.load_inplace === true;
        if (engine.adapterNames().includes(name) && !inPlace) throw new HttpError(400, `The lora adapter '${name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`);
        let dir: string;
        try {
          dir = server.loadablePath(body.lora_path, 'lora_path');
        } catch (e) {
          // vLLM: a path with no adapter is a 404.
          if (e instanceof HttpError && e.status === 400) throw new HttpError(404, `Loading lora ${name} failed: No adapter found for ${String(body.lora_path)}`);
          throw e;
        }
        try {
          await engine.loadAdapter(name, dir, inPlace);
        } catch (e) {
          // vLLM: a directory that holds no adapter is a 404, one whose files fail to load (not all written yet) a 400.
          throw new HttpError(400, `Loading lora ${name} failed: ${(e as Error).message}`);
        }
        return send(res, 200, `Success: LoRA adapter '${name}' added successfully.`, 'text/plain');
      },
    },
    'POST /v1/unload_lora_adapter': {
      admin: true,
      handler: async ({ body, res }) => {
        const name = body.lora_name;
        if (typeof name !== 'string' || !(await engine.unloadAdapter(name))) throw new HttpError(404, `The lora adapter '${String(name)}' cannot be found.`);
        return send(res, 200, `Success: LoRA adapter '${name}' removed successfully.`, 'text/plain');
      },
    },
    // Dev mode.
    'POST /pause': {
      admin: true,
      handler: async ({ url }) => {
        const mode = url.searchParams.get('mode') ?? 'abort';
        if (mode !== 'abort' && mode !== 'wait' && mode !== 'keep') throw bad(`'mode' must be abort, wait or keep; got '${mode}'`);
        await engine.pause(mode);
        return { status: 'paused' };
      },
    },
    'POST /resume': {
      admin: true,
      handler: () => {
        engine.resume();
        return { status: 'resumed' };
      },
    },
    'GET /is_paused': { admin: true, handler: () => ({ is_paused: engine.paused }) },
    // No prefix cache here: nothing to reset.
    'POST /reset_prefix_cache': { admin: true, handler: ({ res }) => send(res, 200, '', 'text/plain') },
    'POST /collective_rpc': {
      admin: true,
      handler: async ({ body }) => {
        if (typeof body.method !== 'string') throw bad("'method' is required");
        if (body.method !== 'reload_weights') throw bad(`flowrl serve runs only reload_weights through /collective_rpc; got '${body.method}'`);
        const kwargs = body.kwargs ?? {};
        if (!isObject(kwargs)) throw bad("'kwargs' must be an object");
        if (kwargs.is_checkpoint_format === false) throw bad("'kwargs.is_checkpoint_format' false is not supported: send an HF checkpoint directory");
        const dir = server.loadablePath(kwargs.weights_path, 'kwargs.weights_path');
        try {
          // vLLM has no weight version; flowrl serve keeps the directory's name as one for its logs.
          await engine.loadWeights(dir, engine.weightVersion);
        } catch (e) {
          throw new HttpError(500, `reload_weights failed: ${(e as Error).message}`);
        }
        return { results: [null] };
      },
    },
  };
}

/** vLLM's structured outputs and token filters (protocol.py at v0.20.2), which this server does not do. */
/**
 * Fields vLLM v0.20.2's CompletionRequest and ChatCompletionRequest act on that this server does not,
 * with their no-op values: refused otherwise (a hostile-client sweep found them all silently ignored).
 */
const VLLM_UNSUPPORTED_FIELDS = { use_beam_search: false, length_penalty: 1, prompt_embeds: undefined, truncate_prompt_tokens: undefined, spaces_between_special_tokens: true, mm_processor_kwargs: undefined };
const COMPLETION_UNSUPPORTED_FIELDS = { ...VLLM_UNSUPPORTED_FIELDS, add_special_tokens: true };
const CHAT_UNSUPPORTED_FIELDS = { ...VLLM_UNSUPPORTED_FIELDS, add_special_tokens: false, chat_template: undefined, continue_final_message: false, documents: undefined, prompt_logprobs: undefined, echo: false };
/** Booleans of the two routes, checked as booleans. */
const COMPLETION_FLAGS = ['echo', 'return_token_ids', 'include_stop_str_in_output', 'return_tokens_as_token_ids', 'use_beam_search', 'add_special_tokens', 'spaces_between_special_tokens'];
const CHAT_FLAGS = ['logprobs', 'include_stop_str_in_output', 'return_tokens_as_token_ids', 'add_generation_prompt', 'continue_final_message', 'echo', 'use_beam_search', 'add_special_tokens', 'spaces_between_special_tokens', 'parallel_tool_calls'];

const VLLM_UNSUPPORTED = ['structured_outputs', 'guided_json', 'guided_regex', 'guided_choice', 'guided_grammar', 'guided_decoding_backend', 'guided_whitespace_pattern', 'allowed_token_ids', 'bad_words', 'logits_processors', 'suffix'];

/** A request's sampling fields with the model's generation_config.json defaults under them, as vLLM reads them. */
function withGenerationDefaults(server: DialectHost, body: Json): Json {
  const defaults = server.generationDefaults();
  const filled: Json = { ...body };
  for (const key of GENERATION_CONFIG_FIELDS) if ((body[key] === undefined || body[key] === null) && defaults[key] !== undefined) filled[key] = defaults[key];
  return filled;
}

/**
 * vLLM raises a temperature in (0, 0.01) to 0.01, warning that smaller ones overflow the logits
 * (vllm/sampling_params.py, _MAX_TEMP; a denormal one crashed this server's sampler once).
 */
const VLLM_MIN_TEMPERATURE = 1e-2;

/** A request's sampling settings as vLLM takes them: seed -1 is none, tiny temperatures raised. */
function vllmSampling(server: DialectHost, p: Json, prompts: number[][], maxTokensDefault: number | 'rest'): RequestSampling {
  const s = server.samplingSpec(p, prompts, { maxTokens: 'max_tokens', seed: 'seed', where: '', maxTokensDefault, topKZeroIsOff: true, contextError, minTokens: 'min_tokens', unsupported: VLLM_UNSUPPORTED });
  if (s.seed === -1) s.seed = undefined;
  if (s.temperature > 0 && s.temperature < VLLM_MIN_TEMPERATURE) s.temperature = VLLM_MIN_TEMPERATURE;
  return s;
}

/** A sample's scores: a finished one's, or a streaming one's so far. */
type Scored = StepScores & Pick<SampleOutput, 'rawLogProbs'>;

/** The log-prob this server reports for token t of a sample, by --logprobs-mode. */
function reportedLogProb(server: DialectHost, o: Scored, t: number): number {
  if (server.options.logprobsMode === 'raw_logprobs') return (o.rawLogProbs ?? o.logProbs)[t];
  // Renormalised over the tokens top-k/top-p kept.
  return o.keptLogMass ? o.logProbs[t] - o.keptLogMass[t] : o.logProbs[t];
}

/**
 * Raw log-probs away from T = 1 are the sampled ids rescored once the sample ends, so they cannot
 * be streamed token by token: that request is refused, naming why.
 */
function checkStreamedLogprobs(server: DialectHost, s: RequestSampling): void {
  if (server.options.logprobsMode === 'raw_logprobs' && s.temperature !== 1 && !samplesGreedily(s)) {
    throw bad("'logprobs' with 'stream' true needs temperature 1 (or 0) on a server started with --logprobs-mode raw_logprobs: raw log-probs at another temperature are computed once the sample ends; ask without streaming");
  }
}

/** OpenAI completion logprobs of tokens [from, to) of a sample, their text offsets counted from `offset`. */
function completionLogprobs(server: DialectHost, body: Json, o: Scored, ids: readonly number[], s: RequestSampling, k: number, from: number, to: number, offset: number): Json {
  const tokenText = (id: number) => (body.return_tokens_as_token_ids === true ? `token_id:${id}` : server.decode([id]));
  const range = Array.from({ length: Math.max(0, to - from) }, (_, j) => from + j);
  const tokens = range.map((t) => tokenText(ids[t]));
  const lps = range.map((t) => reportedLogProb(server, o, t));
  return {
    tokens,
    token_logprobs: lps,
    // OpenAI: the `logprobs` most likely tokens and the sampled one (up to logprobs + 1 entries).
    top_logprobs: range.map((t, j) => ({
      ...Object.fromEntries((k ? topLogProbsAt(server, o, t, s, k) : []).map((a) => [tokenText(a.id), a.logprob])),
      [tokens[j]]: lps[j],
    })),
    // Where each token's text begins in the answer's text (after the prompt's, with echo).
    text_offset: textOffsets(tokens, offset),
  };
}

/** OpenAI chat logprobs of tokens [from, to) of a sample. */
function chatLogprobs(server: DialectHost, o: Scored, ids: readonly number[], s: RequestSampling, top: number, from: number, to: number): Json {
  const tokenizer = server.options.tokenizer!;
  return {
    content: Array.from({ length: Math.max(0, to - from) }, (_, j) => {
      const t = from + j;
      return {
        ...chatToken(tokenizer.decode([ids[t]]), reportedLogProb(server, o, t)),
        top_logprobs: top ? topLogProbsAt(server, o, t, s, top).map((a) => chatToken(tokenizer.decode([a.id]), a.logprob)) : [],
      };
    }),
  };
}

/** vLLM's floor for a log-prob it cannot represent (-inf: a token the filters removed). */
const VLLM_LOGPROB_FLOOR = -9999;

/**
 * The most likely tokens at step `t` of a sample with their log-probs in the --logprobs-mode the
 * sampled token's follows: raw at T = 1; processed at T, renormalised over what top-k/top-p kept,
 * the floor for tokens they removed (the kept set is a prefix of the ranking: top-k's first k, then
 * the shortest prefix holding top_p of the mass).
 */
function topLogProbsAt(server: DialectHost, o: Scored, t: number, s: RequestSampling, k: number): { id: number; logprob: number }[] {
  const alt = o.alternatives![t];
  const raw = server.options.logprobsMode === 'raw_logprobs';
  const kept = o.keptLogMass?.[t];
  const keptMass = kept === undefined ? 1 : Math.exp(kept);
  let before = 0;
  return alt.ids.slice(0, k).map((id, rank) => {
    const share = Math.exp(alt.atTemperature[rank]);
    const inside = kept === undefined || (rank === 0 || before < keptMass * (1 - 1e-9)) && (s.topK <= 0 || rank < s.topK);
    before += share;
    const logprob = raw ? alt.atOne[rank] : inside ? alt.atTemperature[rank] - (kept ?? 0) : VLLM_LOGPROB_FLOOR;
    return { id, logprob };
  });
}

/** vLLM selects a LoRA adapter by naming it as the model. */
function adapterFor(server: DialectHost, model: unknown): string | undefined {
  if (model === undefined || model === null || model === server.modelName) return undefined;
  if (typeof model !== 'string') throw bad("'model' must be a string");
  if (server.engine.adapterNames().includes(model)) return model;
  throw new HttpError(404, `The model \`${model}\` does not exist.`);
}

/** A prompt as vLLM takes it: ids, a list of id lists, a string or a list of strings (never ids and text mixed). */
async function promptsOf(server: DialectHost, prompt: unknown): Promise<number[][]> {
  if (typeof prompt === 'string' || (Array.isArray(prompt) && prompt.length && prompt.every((p) => typeof p === 'string'))) return await server.textPromptIds(prompt, 'prompt');
  return server.promptIds(prompt, 'prompt');
}

/** A sample's text and why it ended, as vLLM reports them: cut before the first stop string (kept with include_stop_str_in_output). */
function textAndStop(o: SampleOutput, s: RequestSampling, body: Json, decode: (ids: number[]) => string): { text: string; finish: string; stopReason: string | number | null } {
  const text = decode(o.outputIds);
  const hit = o.finish === 'stop' ? firstStop(text, s.stopStrings) : undefined;
  if (hit) return { text: text.slice(0, hit.at + (body.include_stop_str_in_output === true ? hit.stop.length : 0)), finish: 'stop', stopReason: hit.stop };
  // vLLM names the stop token only when it came from stop_token_ids (null for EOS).
  const byId = o.finish === 'stop' && o.matchedStop !== undefined && s.stopTokenIds.includes(o.matchedStop) ? o.matchedStop : null;
  return { text, finish: o.finish, stopReason: byId };
}

async function completions(server: DialectHost, body: Json, res: http.ServerResponse): Promise<unknown> {
  if (body.prompt === undefined) throw bad("'prompt' is required");
  for (const key of COMPLETION_FLAGS) readFlag(body, key, false);
  refuseUnsupported(body, COMPLETION_UNSUPPORTED_FIELDS);
  const prompts = await promptsOf(server, body.prompt);
  const adapter = adapterFor(server, body.model);
  const p = withGenerationDefaults(server, body);
  const longest = Math.max(...prompts.map((ids) => ids.length));
  // Omitted, max_tokens is 16 cut to what the context leaves; given, a request past the context is a 400.
  const s = vllmSampling(server, p, prompts, Math.max(0, Math.min(COMPLETION_MAX_TOKENS, server.engine.maxModelLen - longest)));
  // vLLM's --max-logprobs bounds both (20 by default, as here).
  const maxLogprobs = server.options.maxLogprobs ?? MAX_TOP_LOGPROBS;
  const logprobs = body.logprobs === undefined || body.logprobs === null ? undefined : readNumber(body, 'logprobs', 0, { integer: true, min: 0, max: maxLogprobs });
  s.topLogProbs = logprobs;
  const promptLogprobs = body.prompt_logprobs === undefined || body.prompt_logprobs === null ? undefined : readNumber(body, 'prompt_logprobs', 0, { integer: true, min: 0, max: maxLogprobs });
  // usage counts each prompt once, whatever n is (vLLM's num_prompt_tokens).
  const promptTotal = prompts.reduce((n, ids) => n + ids.length, 0);
  // The k most likely at every prompt position: bounded as the answer's top logprobs are.
  const promptTopEntries = promptTotal * (promptLogprobs ?? 0);
  if (promptTopEntries > MAX_TOP_LOGPROB_ENTRIES) throw bad(`the request asks for ${promptTopEntries} prompt top logprobs; at most ${MAX_TOP_LOGPROB_ENTRIES}: ask for fewer prompts or a smaller prompt_logprobs`);
  const head = answerHead(server, 'text_completion', body.model);
  const offsets: number[] = [];
  const streaming = streamingAnswer(server, body, res, head, promptTotal, ['prompt_logprobs', 'echo'], logprobs === undefined ? undefined : (i, o, ids, from, to) => {
    const json = completionLogprobs(server, body, o, ids, s, logprobs, from, to, offsets[i] ?? 0);
    offsets[i] = (offsets[i] ?? 0) + (json.tokens as string[]).join('').length;
    return json;
  });
  if (streaming.live && logprobs !== undefined) checkStreamedLogprobs(server, s);
  if (body.echo !== undefined && body.echo !== null && typeof body.echo !== 'boolean') throw bad("'echo' must be true or false");
  if (body.echo === true && logprobs !== undefined) throw bad("'echo' with 'logprobs' is not supported by flowrl serve (the prompt's tokens would need log-probs too); ask for prompt_logprobs instead");
  const choiceText = (i: number, text: string, finish: string | null = null, stopReason: string | number | null = null) => ({ index: i, text, logprobs: null, finish_reason: finish, stop_reason: stopReason });
  // The first sample of each prompt also scores it, with the weights that sample it.
  const specs = server.specs(prompts, s, adapter).map((spec, i) => (promptLogprobs !== undefined && i % s.n === 0 ? { ...spec, withPromptLogProbs: true, promptTopLogProbs: promptLogprobs } : spec));
  const outputs = await streaming.sample(specs, (i) => ({
    deltas: new TextDeltas((ids) => server.decode([...ids], s.skipSpecialTokens), s.stopStrings),
    delta: (text) => choiceText(i, text),
  }));
  if (!outputs) return undefined;
  if (streaming.live) {
    return streaming.finish(
      outputs,
      outputs.map((o, i) => {
        const ended = textAndStop(o, s, body, (ids) => server.decode(ids, s.skipSpecialTokens));
        return [choiceText(i, streaming.rest(i, ended.text), ended.finish, ended.stopReason)];
      }),
    );
  }
  // vLLM's prompt_logprobs: null for the first position, then per position the prompt's token (with its rank) and, with k, the k most likely.
  const promptEntries = (p: number): (Json | null)[] => {
    const prompt = prompts[p];
    const o = outputs[p * s.n];
    const own = o.promptLogProbs ?? [];
    const entry = (id: number, logprob: number, rank: number | null) => [String(id), { logprob, rank, decoded_token: server.decode([id]) }] as const;
    return [null, ...own.map((lp, t) => Object.fromEntries([entry(prompt[t + 1], lp, o.promptTop?.[t].rank ?? null), ...(o.promptTop?.[t].ids.map((id, r) => entry(id, o.promptTop![t].logProbs[r], r + 1)) ?? [])]))];
  };
  const scored = promptLogprobs === undefined ? undefined : prompts.map((_, p) => promptEntries(p));
  return completion(
    head,
    promptTotal,
    outputs,
    outputs.map((o, i) => {
      const prompt = prompts[Math.floor(i / s.n)];
      const ended = textAndStop(o, s, body, (ids) => server.decode(ids, s.skipSpecialTokens));
      const echoed = body.echo === true ? server.decode(prompt, s.skipSpecialTokens) : '';
      return {
        index: i,
        // echo: the prompt's text first, as vLLM writes it.
        text: echoed + ended.text,
        ...(body.return_token_ids === true ? { token_ids: o.outputIds, prompt_token_ids: prompt } : {}),
        logprobs: logprobs === undefined ? null : completionLogprobs(server, body, o, o.outputIds, s, logprobs, 0, o.outputIds.length, echoed.length),
        ...(scored ? { prompt_logprobs: scored[Math.floor(i / s.n)] } : {}),
        finish_reason: ended.finish,
        stop_reason: ended.stopReason,
      };
    }),
  );
}

/** The function tools a request offers (OpenAI's `tools`), checked; undefined when none. */
function readTools(body: Json): Json[] | undefined {
  const tools = body.tools;
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw bad("'tools' must be a list");
  tools.forEach((tool, i) => {
    if (!isObject(tool) || tool.type !== 'function' || !isObject(tool.function) || typeof tool.function.name !== 'string' || !tool.function.name) throw bad(`'tools[${i}]' must be {"type": "function", "function": {"name": ..., "parameters": {...}}}`);
  });
  return tools.length ? (tools as Json[]) : undefined;
}

/**
 * Whether the answer's text is read for hermes tool calls: with tools and tool_choice auto (the
 * default with tools). "required" and a named function, which vLLM forces with guided decoding,
 * are refused: this server has none, and an answer without the call would break the client's contract.
 */
function parsesToolCalls(body: Json, tools: Json[] | undefined): boolean {
  const choice = body.tool_choice;
  if (choice === undefined || choice === null || choice === 'auto') return tools !== undefined;
  if (choice === 'none') return false;
  if (choice === 'required' || isObject(choice)) throw bad(`'tool_choice' ${JSON.stringify(choice).slice(0, 80)} is not supported by flowrl serve (vLLM forces it with guided decoding, which this server does not have); use "auto" or "none"`);
  throw bad("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function");
}

/**
 * Chat messages as the template takes them: role and content strings; an assistant's tool_calls
 * (content null or absent then) with their arguments read from JSON, as vLLM hands them to the
 * template; a tool's answer with its tool_call_id.
 */
function templateMessages(messages: unknown): Json[] {
  if (!Array.isArray(messages) || !messages.length) throw bad("'messages' must be a non-empty list");
  return messages.map((m, i) => {
    if (!isObject(m) || typeof m.role !== 'string') throw bad(`'messages[${i}]' must be {role, content} strings`);
    const calls = m.role === 'assistant' && m.tool_calls !== undefined && m.tool_calls !== null ? m.tool_calls : undefined;
    if (typeof m.content !== 'string' && !(calls !== undefined && (m.content === null || m.content === undefined))) throw bad(`'messages[${i}]' must be {role, content} strings`);
    const message: Json = { role: m.role, content: m.content ?? '' };
    if (typeof m.tool_call_id === 'string') message.tool_call_id = m.tool_call_id;
    if (typeof m.name === 'string') message.name = m.name;
    if (calls !== undefined) {
      if (!Array.isArray(calls)) throw bad(`'messages[${i}].tool_calls' must be a list`);
      message.tool_calls = calls.map((call, j) => {
        const where = `messages[${i}].tool_calls[${j}]`;
        if (!isObject(call) || !isObject(call.function) || typeof call.function.name !== 'string') throw bad(`'${where}' must be {"type": "function", "function": {"name": ..., "arguments": "..."}}`);
        let args: unknown = call.function.arguments ?? {};
        if (typeof args === 'string') {
          try {
            args = JSON.parse(args);
          } catch {
            throw bad(`'${where}.function.arguments' is not JSON`);
          }
        }
        return { ...call, function: { name: call.function.name, arguments: args } };
      });
    }
    return message;
  });
}

/** The hermes calls in a chat answer as OpenAI's tool_calls; none (the text is all content) when any call does not parse, as vLLM's parser gives up. */
function toolCallsOf(text: string): { content: string | null; calls: Json[] } | undefined {
  if (!text.includes(TOOL_CALL_OPEN)) return undefined;
  const parsed = parseHermesCalls(text);
  if (!parsed.calls.length || parsed.calls.some((c) => 'error' in c)) return undefined;
  const calls = parsed.calls.map((c) => {
    const call = c as { name: string; arguments: Record<string, unknown> };
    return { id: `chatcmpl-tool-${randomBytes(8).toString('hex')}`, type: 'function', function: { name: call.name, arguments: pythonJson(call.arguments) } };
  });
  // vLLM's hermes parser: the content is the text before the first call, as written (null when only whitespace).
  const content = text.slice(0, text.indexOf(TOOL_CALL_OPEN));
  return { content: content.trim() ? content : null, calls };
}

/** vLLM's chat_template_kwargs: extra variables for the template (Qwen3's enable_thinking), a few short JSON values. */
function templateKwargs(value: unknown): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isObject(value) || Object.keys(value).length > 16 || JSON.stringify(value).length > 4096) throw bad("'chat_template_kwargs' must be an object of at most 16 keys (4 KB)");
  return value;
}

async function chatCompletions(server: DialectHost, body: Json, res: http.ServerResponse): Promise<unknown> {
  const tokenizer = server.options.tokenizer;
  if (!tokenizer) throw bad('this server has no tokenizer, so it cannot take chat messages');
  if (!tokenizer.hasChatTemplate) throw bad(`${server.options.modelDir}: the tokenizer has no chat template`);
  for (const key of CHAT_FLAGS) readFlag(body, key, false);
  refuseUnsupported(body, CHAT_UNSUPPORTED_FIELDS);
  // Before the messages are read or the template runs: 400,000 empty messages took 13 s to render into a prompt the context refuses anyway.
  const context = server.engine.maxModelLen;
  if (Array.isArray(body.messages) && body.messages.length > context / 2) throw bad(`'messages' holds ${body.messages.length} messages, more than this model's context (${context} tokens) can hold (each takes at least 2)`);
  const chars = JSON.stringify(body.messages ?? null).length + JSON.stringify(body.tools ?? null).length;
  if (chars > context * 64) throw bad(`'messages' and 'tools' hold ${chars} characters, more than any prompt this model's context (${context} tokens) holds`);
  const messages = templateMessages(body.messages);
  const tools = readTools(body);
  const withTools = parsesToolCalls(body, tools);
  let text: string;
  try {
    text = tokenizer.applyChatTemplate(messages as unknown as { role: string; content: string }[], readFlag(body, 'add_generation_prompt', true), tools, templateKwargs(body.chat_template_kwargs));
  } catch (e) {
    // The template refusing the conversation (its raise_exception: roles out of order, a system message where none may be) is the request's fault.
    throw bad(`the chat template refused the messages: ${(e as Error).message}`);
  }
  const prompt = await server.textPromptIds(text, 'messages');
  const p = withGenerationDefaults(server, { ...body, max_tokens: body.max_completion_tokens ?? body.max_tokens });
  const s = vllmSampling(server, p, prompt, 'rest');
  const top = body.top_logprobs === undefined || body.top_logprobs === null ? 0 : readNumber(body, 'top_logprobs', 0, { integer: true, min: 0, max: MAX_TOP_LOGPROBS });
  if (top && body.logprobs !== true) throw bad("'top_logprobs' needs 'logprobs' true");
  s.topLogProbs = top;
  const head = answerHead(server, 'chat.completion', body.model);
  const streaming = streamingAnswer(server, body, res, head, prompt[0].length, [], body.logprobs === true ? (_, o, ids, from, to) => chatLogprobs(server, o, ids, s, top, from, to) : undefined);
  if (streaming.live && body.logprobs === true) checkStreamedLogprobs(server, s);
  const stops = new Set([...server.engine.config.eosTokenIds, ...s.stopTokenIds]);
  const decodeText = (ids: readonly number[]) => tokenizer.decode(ids.filter((id) => !stops.has(id)), s.skipSpecialTokens);
  // A tool call's opening tag ends the streamed content: the calls follow whole in the last chunks.
  const marks = withTools ? [...s.stopStrings, TOOL_CALL_OPEN] : s.stopStrings;
  const outputs = await streaming.sample(server.specs(prompt, s, adapterFor(server, body.model)), (i) => ({
    deltas: new TextDeltas(decodeText, marks),
    opening: { index: i, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
    delta: (content) => ({ index: i, delta: { content }, logprobs: null, finish_reason: null }),
  }));
  if (!outputs) return undefined;
  const answers = outputs.map((o) => {
    const ended = textAndStop(o, s, body, (ids) => decodeText(ids));
    const called = withTools ? toolCallsOf(ended.text) : undefined;
    // vLLM: a turn that called tools and stopped finishes "tool_calls".
    return { ended, called, finish: called && ended.finish === 'stop' ? 'tool_calls' : ended.finish };
  });
  if (streaming.live) {
    return streaming.finish(
      outputs,
      answers.map(({ ended, called, finish }, i) => [
        ...(called ? called.calls.map((call, k) => ({ index: i, delta: { tool_calls: [{ index: k, ...call }] }, logprobs: null, finish_reason: null })) : []),
        { index: i, delta: called ? {} : { content: streaming.rest(i, ended.text) }, logprobs: null, finish_reason: finish, stop_reason: ended.stopReason },
      ]),
    );
  }
  return completion(
    head,
    prompt[0].length,
    outputs,
    outputs.map((o, i) => {
      const { ended, called, finish } = answers[i];
      return {
        index: i,
        message: { role: 'assistant', content: called ? called.content : ended.text, tool_calls: called?.calls ?? [] },
        logprobs: body.logprobs === true ? chatLogprobs(server, o, o.outputIds, s, top, 0, o.outputIds.length) : null,
        finish_reason: finish,
        stop_reason: ended.stopReason,
      };
    }),
  );
}

/** The offset of each token's text in the whole, from `start`: the lengths of the ones before it. */
function textOffsets(tokens: string[], start: number): number[] {
  let at = start;
  return tokens.map((token) => {
    const offset = at;
    at += token.length;
    return offset;
  });
}

/** A token in OpenAI's chat logprobs: its text, log-prob and UTF-8 bytes. */
function chatToken(token: string, logprob: number): Json {
  return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
}

/** What an answer's objects (the whole one, or each streamed chunk) hold around their choices. */
interface AnswerHead {
  id: string;
  object: 'text_completion' | 'chat.completion';
  created: number;
  model: string;
}

function answerHead(server: DialectHost, object: AnswerHead['object'], model: unknown): AnswerHead {
  return { id: `${object === 'chat.completion' ? 'chatcmpl' : 'cmpl'}-flowrl-${server.nextId()}`, object, created: Math.floor(Date.now() / 1000), model: typeof model === 'string' ? model : server.modelName };
}

function usage(promptTokens: number, outputs: SampleOutput[]): Json {
  const completionTokens = outputs.reduce((n, o) => n + o.outputIds.length, 0);
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

/** OpenAI's completion object: the head, its choices and token usage. */
function completion(head: AnswerHead, promptTokens: number, outputs: SampleOutput[], choices: Json[]): Json {
  return { ...head, choices, usage: usage(promptTokens, outputs) };
}

/** The log-probs a streamed chunk of choice i carries: those of its tokens [from, to). */
type StreamedLogprobs = (i: number, o: Scored, ids: readonly number[], from: number, to: number) => Json;

/** One choice of a streamed answer: its text in deltas, the chunk choice a delta makes, and one sent before its first (chat's role). */
interface StreamedChoice {
  deltas: TextDeltas;
  delta: (text: string) => Json;
  opening?: Json;
}

/**
 * An answer streamed as vLLM streams it when the request says `stream: true` (each choice's text in
 * chunks as it is sampled, its finish in a last chunk, the usage after them with
 * stream_options.include_usage, then [DONE]), or whole otherwise. `unstreamed`: fields refused
 * with stream true. With `logprobsOf`, each chunk carries the log-probs of the tokens sampled since
 * the last chunk (vLLM drops those of a step whose text is held back; here they ride on the next
 * chunk, so the chunks' log-probs together are the whole answer's).
 */
function streamingAnswer(server: DialectHost, body: Json, res: http.ServerResponse, head: AnswerHead, promptTokens: number, unstreamed: string[], logprobsOf?: StreamedLogprobs) {
  const { includeUsage } = streamOptions(body);
  const live = body.stream === true;
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') throw bad("'stream' must be a boolean");
  for (const key of live ? unstreamed : []) {
    if (body[key] !== undefined && body[key] !== null && body[key] !== false) throw bad(`'${key}' with 'stream' true is not supported by flowrl serve; ask without streaming`);
  }
  const stream = new EventStream(res, server.options.streamBacklogBytes);
  const chunkHead = { ...head, object: head.object === 'chat.completion' ? 'chat.completion.chunk' : 'text_completion' };
  const choices: StreamedChoice[] = [];
  /** Per choice, how many of its tokens' log-probs were sent. */
  const reported: number[] = [];
  const withLogprobs = (i: number, choice: Json, o: Scored, ids: readonly number[]): Json => {
    if (!logprobsOf) return choice;
    const from = reported[i] ?? 0;
    reported[i] = ids.length;
    return { ...choice, logprobs: logprobsOf(i, o, ids, from, ids.length) };
  };
  const opened = new Set<number>();
  const open = (i: number) => {
    if (opened.has(i)) return;
    opened.add(i);
    if (choices[i].opening) stream.send({ ...chunkHead, choices: [choices[i].opening] });
  };
  return {
    live,
    async sample(specs: SampleSpec[], choiceFor: (i: number) => StreamedChoice): Promise<SampleOutput[] | undefined> {
      if (!live) return server.sample(res, specs);
      const wired = specs.map((spec, i) => {
        choices[i] = choiceFor(i);
        return {
          ...spec,
          onStep: (ids: readonly number[], scores: StepScores) => {
            const text = choices[i].deltas.next(ids);
            if (!text) return;
            open(i);
            stream.send({ ...chunkHead, choices: [withLogprobs(i, choices[i].delta(text), scores, ids)] });
          },
        };
      });
      try {
        return await server.sample(res, wired);
      } catch (e) {
        // Once the head is out the status is spent: the failure goes in the stream.
        if (!stream.started) throw e;
        stream.end({ status: e instanceof HttpError ? e.status : 500, message: (e as Error).message });
        return undefined;
      }
    },
    /** What choice i's final text adds to what it streamed. */
    rest: (i: number, text: string) => choices[i].deltas.rest(text),
    /** Sends each choice's last chunks (after its opening, if never sent), the usage when asked, and [DONE]. */
    finish(outputs: SampleOutput[], last: Json[][]): undefined {
      last.forEach((chunks, i) => {
        open(i);
        // The finishing chunk carries the log-probs not yet sent.
        chunks.forEach((choice, k) => stream.send({ ...chunkHead, choices: [k === chunks.length - 1 ? withLogprobs(i, choice, outputs[i], outputs[i].outputIds) : choice] }));
      });
      if (includeUsage) stream.send({ ...chunkHead, choices: [], usage: usage(promptTokens, outputs) });
      return stream.end();
    },
  };
}
