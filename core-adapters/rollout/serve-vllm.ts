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
import { bad, firstStop, HttpError, isObject, readNumber, refuseStreaming, send, type DialectHost, type Json, type RequestSampling, type RouteTable } from './serve-http.js';
import type { SampleOutput } from './serving-engine.js';

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
  const s = server.samplingSpec(p, prompts, { maxTokens: 'max_tokens', seed: 'seed', where: '', maxTokensDefault, topKZeroIsOff: true, contextError });
  if (s.seed === -1) s.seed = undefined;
  if (s.temperature > 0 && s.temperature < VLLM_MIN_TEMPERATURE) s.temperature = VLLM_MIN_TEMPERATURE;
  return s;
}

/** The logprobs this server reports for a sample, by --logprobs-mode. */
function reportedLogProbs(server: DialectHost, o: SampleOutput): number[] {
  if (server.options.logprobsMode === 'raw_logprobs') return o.rawLogProbs ?? o.logProbs;
  // Renormalised over the tokens top-k/top-p kept.
  return o.keptLogMass ? o.logProbs.map((v, t) => v - o.keptLogMass![t]) : o.logProbs;
}

/** vLLM's floor for a log-prob it cannot represent (-inf: a token the filters removed). */
const VLLM_LOGPROB_FLOOR = -9999;

/**
 * The most likely tokens at step `t` of a sample with their log-probs in the --logprobs-mode the
 * sampled token's follows: raw at T = 1; processed at T, renormalised over what top-k/top-p kept,
 * the floor for tokens they removed (the kept set is a prefix of the ranking: top-k's first k, then
 * the shortest prefix holding top_p of the mass).
 */
function topLogProbsAt(server: DialectHost, o: SampleOutput, t: number, s: RequestSampling, k: number): { id: number; logprob: number }[] {
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
function promptsOf(server: DialectHost, prompt: unknown): number[][] {
  if (typeof prompt === 'string' || (Array.isArray(prompt) && prompt.length && prompt.every((p) => typeof p === 'string'))) return server.textPromptIds(prompt, 'prompt');
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
  refuseStreaming(body);
  if (body.prompt === undefined) throw bad("'prompt' is required");
  const prompts = promptsOf(server, body.prompt);
  const adapter = adapterFor(server, body.model);
  const p = withGenerationDefaults(server, body);
  const longest = Math.max(...prompts.map((ids) => ids.length));
  // Omitted, max_tokens is 16 cut to what the context leaves; given, a request past the context is a 400.
  const s = vllmSampling(server, p, prompts, Math.max(0, Math.min(COMPLETION_MAX_TOKENS, server.engine.maxModelLen - longest)));
  const logprobs = body.logprobs === undefined || body.logprobs === null ? undefined : readNumber(body, 'logprobs', 0, { integer: true, min: 0, max: MAX_TOP_LOGPROBS });
  s.topLogProbs = logprobs;
  const promptLogprobs = body.prompt_logprobs === undefined || body.prompt_logprobs === null ? undefined : readNumber(body, 'prompt_logprobs', 0, { integer: true, min: 0, max: 20 });
  const outputs = await server.sample(res, server.specs(prompts, s, adapter));
  if (!outputs) return undefined;
  const scored = promptLogprobs === undefined ? undefined : await Promise.all(prompts.map((ids) => server.engine.scorePrompt(ids, adapter)));
  const tokens = (ids: number[]) => ids.map((id) => (body.return_tokens_as_token_ids === true ? `token_id:${id}` : server.decode([id])));
  const promptTotal = prompts.reduce((n, ids) => n + ids.length * s.n, 0);
  return completion(
    server,
    'text_completion',
    body.model,
    promptTotal,
    outputs,
    outputs.map((o, i) => {
      const prompt = prompts[Math.floor(i / s.n)];
      const lps = reportedLogProbs(server, o);
      const ended = textAndStop(o, s, body, (ids) => server.decode(ids));
      return {
        index: i,
        text: ended.text,
        ...(body.return_token_ids === true ? { token_ids: o.outputIds, prompt_token_ids: prompt } : {}),
        logprobs:
          logprobs === undefined
            ? null
            : {
                tokens: tokens(o.outputIds),
                token_logprobs: lps,
                // OpenAI: the `logprobs` most likely tokens and the sampled one (up to logprobs + 1 entries).
                top_logprobs: o.outputIds.map((id, t) => ({
                  ...Object.fromEntries((logprobs ? topLogProbsAt(server, o, t, s, logprobs) : []).map((a) => [tokens([a.id])[0], a.logprob])),
                  [tokens([id])[0]]: lps[t],
                })),
                text_offset: o.outputIds.map(() => 0),
              },
        ...(scored ? { prompt_logprobs: [null, ...scored[Math.floor(i / s.n)].map((lp, t) => ({ [String(prompt[t + 1])]: { logprob: lp, rank: null, decoded_token: server.decode([prompt[t + 1]]) } }))] } : {}),
        finish_reason: ended.finish,
        stop_reason: ended.stopReason,
      };
    }),
  );
}

async function chatCompletions(server: DialectHost, body: Json, res: http.ServerResponse): Promise<unknown> {
  refuseStreaming(body);
  const tokenizer = server.options.tokenizer;
  if (!tokenizer) throw bad('this server has no tokenizer, so it cannot take chat messages');
  if (!tokenizer.hasChatTemplate) throw bad(`${server.options.modelDir}: the tokenizer has no chat template`);
  const messages = body.messages;
  if (!Array.isArray(messages) || !messages.length) throw bad("'messages' must be a non-empty list");
  messages.forEach((m, i) => {
    if (!isObject(m) || typeof m.role !== 'string' || typeof m.content !== 'string') throw bad(`'messages[${i}]' must be {role, content} strings`);
  });
  // Before the template runs: a million short messages would take it seconds to render into a prompt the context refuses anyway.
  const chars = messages.reduce((n: number, m: { role: string; content: string }) => n + m.role.length + m.content.length, 0);
  if (chars > server.engine.maxModelLen * 64) throw bad(`'messages' hold ${chars} characters, more than any prompt this model's context (${server.engine.maxModelLen} tokens) holds`);
  const text = tokenizer.applyChatTemplate(messages as { role: string; content: string }[]);
  const prompt = server.textPromptIds(text, 'messages');
  const p = withGenerationDefaults(server, { ...body, max_tokens: body.max_completion_tokens ?? body.max_tokens });
  const s = vllmSampling(server, p, prompt, 'rest');
  const top = body.top_logprobs === undefined || body.top_logprobs === null ? 0 : readNumber(body, 'top_logprobs', 0, { integer: true, min: 0, max: MAX_TOP_LOGPROBS });
  if (top && body.logprobs !== true) throw bad("'top_logprobs' needs 'logprobs' true");
  s.topLogProbs = top;
  const outputs = await server.sample(res, server.specs(prompt, s, adapterFor(server, body.model)));
  if (!outputs) return undefined;
  const stops = new Set([...server.engine.config.eosTokenIds, ...s.stopTokenIds]);
  return completion(
    server,
    'chat.completion',
    body.model,
    prompt[0].length,
    outputs,
    outputs.map((o, i) => {
      const lps = reportedLogProbs(server, o);
      const ended = textAndStop(o, s, body, (ids) => tokenizer.decode(ids.filter((id) => !stops.has(id)), true));
      return {
        index: i,
        message: { role: 'assistant', content: ended.text },
        logprobs:
          body.logprobs === true
            ? {
                content: o.outputIds.map((id, t) => ({
                  ...chatToken(tokenizer.decode([id]), lps[t]),
                  top_logprobs: top ? topLogProbsAt(server, o, t, s, top).map((a) => chatToken(tokenizer.decode([a.id]), a.logprob)) : [],
                })),
              }
            : null,
        finish_reason: ended.finish,
        stop_reason: ended.stopReason,
      };
    }),
  );
}

/** A token in OpenAI's chat logprobs: its text, log-prob and UTF-8 bytes. */
function chatToken(token: string, logprob: number): Json {
  return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
}

/** What OpenAI's completion objects hold around their choices: ids, model and token usage. */
function completion(server: DialectHost, object: 'text_completion' | 'chat.completion', model: unknown, promptTokens: number, outputs: SampleOutput[], choices: Json[]): Json {
  const completionTokens = outputs.reduce((n, o) => n + o.outputIds.length, 0);
  return {
    id: `${object === 'chat.completion' ? 'chatcmpl' : 'cmpl'}-flowrl-${server.nextId()}`,
    object,
    created: Math.floor(Date.now() / 1000),
    model: typeof model === 'string' ? model : server.modelName,
    choices,
    usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
  };
}
