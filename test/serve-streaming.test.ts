// flowrl serve as streaming clients and agents use it (issue 49): the official openai clients
// stream chat and completions, with usage and stop strings, and get hermes tool calls back as
// tool_calls; a client that goes away cancels its samples.
import { expect } from 'chai';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { TextTokenizer } from '../core-adapters/model/tokenizer.js';
import type { FlowrlServer } from '../core-adapters/rollout/serve.js';
import { ROOT, runCommand, tempDir, writeTinyQwen25 } from './helpers.js';
import { startServer } from './serve-helpers.js';
import { EventStream, TextDeltas } from '../core-adapters/rollout/serve-http.js';

const SCRIPTED_CALL = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>';
const TOOLS = [{ type: 'function' as const, function: { name: 'add', description: 'Adds two numbers.', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } } }];
const MESSAGES = [{ role: 'user' as const, content: 'What is 1 + 2?' }];

describe('flowrl serve streams, calls tools and cancels for the openai clients', function () {
  this.timeout(180_000);
  let server: FlowrlServer;
  let url: string;
  let model: string;
  let client: OpenAI;
  const faults = (body: object) => fetch(`${url}/_flowrl/faults`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  before(async () => {
    // Qwen2.5's architecture, shrunk, with the real Qwen tokenizer and its chat template (hermes tools).
    const dir = await writeTinyQwen25(path.join(tempDir(), 'Qwen2.5-tiny'));
    model = path.basename(dir);
    ({ server, url } = await startServer({ modelDir: dir, tokenizer: TextTokenizer.load(dir), weightsRoots: [os.tmpdir()], streamBacklogBytes: 2 ** 20 }, true));
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(() => server?.close());
  afterEach(() => faults({ reset: true }));

  it('chat: the streamed deltas (two choices, a stop string held back until it is known) are the whole answer, with its finish and, last, its usage', async () => {
    const free = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 16, seed: 3 });
    // A stop string from the middle of the free answer: the stream must never show its first characters.
    const content = free.choices[0].message.content!;
    const stop = content.slice(6, 9);
    const ask = { model, messages: MESSAGES, max_tokens: 16, seed: 3, n: 2, stop: [stop] };
    const whole = await client.chat.completions.create(ask);
    const texts = ['', ''];
    const finishes: (string | null)[] = [null, null];
    let roles = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    let afterUsage = 0;
    for await (const chunk of await client.chat.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } })) {
      expect(chunk.object).to.equal('chat.completion.chunk');
      if (usage) afterUsage++;
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        if (choice.delta.role) roles++;
        texts[choice.index] += choice.delta.content ?? '';
        finishes[choice.index] = choice.finish_reason ?? finishes[choice.index];
        // Nothing of the stop string is ever sent.
        expect(texts[choice.index]).to.not.include(stop);
      }
    }
    expect(texts).to.deep.equal(whole.choices.map((c) => c.message.content));
    expect(finishes).to.deep.equal(whole.choices.map((c) => c.finish_reason));
    expect(whole.choices[0].finish_reason).to.equal('stop');
    expect(roles).to.equal(2);
    expect(usage).to.deep.equal(whole.usage);
    expect(afterUsage).to.equal(0);
  });

  it('completions: the same; usage counts each prompt once whatever n is; streamed log-probs, chunk by chunk, are the whole answer\'s', async () => {
    const ask = { model, prompt: ['Hello there', 'Once upon'], max_tokens: 10, seed: 5, n: 2, logprobs: 2, stop: [' the'] };
    const whole = await client.completions.create(ask);
    const texts = ['', '', '', ''];
    const logprobs = texts.map(() => ({ tokens: [] as string[], token_logprobs: [] as number[], top_logprobs: [] as Record<string, number>[], text_offset: [] as number[] }));
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of await client.completions.create({ ...ask, stream: true, stream_options: { include_usage: true } })) {
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.text;
        const lp = choice.logprobs!;
        // Each chunk's text is its tokens' text, unless a stop string cut it or a character is split.
        for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) (logprobs[choice.index][key] as unknown[]).push(...lp[key]!);
      }
    }
    expect(texts).to.deep.equal(whole.choices.map((c) => c.text));
    expect(logprobs).to.deep.equal(whole.choices.map((c) => c.logprobs));
    expect(logprobs[0].tokens.length).to.be.greaterThan(1);
    const tokenizer = server.options.tokenizer!;
    expect(whole.usage!.prompt_tokens).to.equal(tokenizer.encode('Hello there').length + tokenizer.encode('Once upon').length);
    expect(usage).to.deep.equal(whole.usage);
  });

  it('chat: streamed log-probs with top_logprobs, chunk by chunk, are the whole answer\'s', async () => {
    const ask = { model, messages: MESSAGES, max_tokens: 12, seed: 9, n: 2, logprobs: true, top_logprobs: 3 };
    const whole = await client.chat.completions.create(ask);
    const content: OpenAI.ChatCompletionTokenLogprob[][] = [[], []];
    for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
      for (const choice of chunk.choices) content[choice.index].push(...(choice.logprobs?.content ?? []));
    }
    expect(content).to.deep.equal(whole.choices.map((c) => c.logprobs!.content));
    expect(content[0][0].top_logprobs).to.have.length(3);
  });

  it('tools: a hermes call comes back as tool_calls with finish tool_calls, whole and streamed (the client assembles the deltas); the next turn takes the call and its result', async () => {
    await faults({ script: SCRIPTED_CALL });
    const whole = await client.chat.completions.create({ model, messages: MESSAGES, tools: TOOLS, max_tokens: 64 });
    const answer = whole.choices[0];
    expect(answer.finish_reason).to.equal('tool_calls');
    expect(answer.message.content).to.equal('Let me add.\n');
    const call = answer.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.type).to.equal('function');
    expect(call.id).to.match(/^chatcmpl-tool-[0-9a-f]{16}$/);
    // As vLLM writes them: Python's json.dumps.
    expect(call.function.arguments).to.equal('{"a": 1, "b": 2}');
    expect([call.function.name, JSON.parse(call.function.arguments)]).to.deep.equal(['add', { a: 1, b: 2 }]);
    const streamed = await client.chat.completions.stream({ model, messages: MESSAGES, tools: TOOLS, max_tokens: 64 }).finalChatCompletion();
    const assembled = streamed.choices[0];
    expect(assembled.finish_reason).to.equal('tool_calls');
    expect(assembled.message.content).to.equal('Let me add.\n');
    const streamedCall = assembled.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect([streamedCall.function.name, JSON.parse(streamedCall.function.arguments)]).to.deep.equal(['add', { a: 1, b: 2 }]);
    // tool_choice none: the same text is all content.
    const none = await client.chat.completions.create({ model, messages: MESSAGES, tools: TOOLS, tool_choice: 'none', max_tokens: 64 });
    expect([none.choices[0].message.content, none.choices[0].message.tool_calls ?? [], none.choices[0].finish_reason]).to.deep.equal([SCRIPTED_CALL, [], 'stop']);
    // The agent's next turn: the assistant's call (arguments as a JSON string) and the tool's answer render into the prompt.
    await faults({ script: 'It is 3.' });
    const next = await client.chat.completions.create({ model, messages: [...MESSAGES, answer.message, { role: 'tool', tool_call_id: call.id, content: '3' }], tools: TOOLS, max_tokens: 16 });
    expect([next.choices[0].message.content, next.choices[0].finish_reason]).to.deep.equal(['It is 3.', 'stop']);
    const rendered = server.options.tokenizer!.applyChatTemplate([...MESSAGES, { role: 'assistant', content: 'Let me add.\n', tool_calls: [{ type: 'function', function: { name: 'add', arguments: { a: 1, b: 2 } } }] }, { role: 'tool', content: '3' }] as never, true, TOOLS);
    expect(rendered).to.include('<tool_response>\n3\n</tool_response>');
    expect(next.usage!.prompt_tokens).to.equal(server.options.tokenizer!.encode(rendered).length);
    // Forced calls need guided decoding, which this server does not have: refused, naming the field.
    for (const tool_choice of ['required', { type: 'function', function: { name: 'add' } }] as const) {
      let refused: unknown;
      await client.chat.completions.create({ model, messages: MESSAGES, tools: TOOLS, tool_choice, max_tokens: 8 }).catch((e: unknown) => (refused = e));
      expect(refused, JSON.stringify(tool_choice)).to.be.instanceOf(OpenAI.BadRequestError);
      expect((refused as Error).message).to.include("'tool_choice'");
    }
  });

  it('fields once accepted and ignored are applied (logit_bias, min_tokens, ignore_eos, skip_special_tokens, echo) or refused naming them', async () => {
    const eos = 151645; // <|im_end|>
    const ids = async (body: object) => {
      const answer = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'Hello', max_tokens: 6, seed: 2, return_token_ids: true, ...body }) });
      const json = (await answer.json()) as { choices?: { text: string; token_ids: number[]; finish_reason: string }[]; error?: { message: string } };
      return { status: answer.status, choice: json.choices?.[0], message: json.error?.message ?? '' };
    };
    // logit_bias: +100 on one token makes it every token; min_tokens keeps a biased eos away until then.
    expect((await ids({ logit_bias: { '9707': 100 } })).choice!.token_ids).to.deep.equal(Array(6).fill(9707));
    expect((await ids({ logit_bias: { [eos]: 100 } })).choice!.token_ids).to.deep.equal([eos]);
    const held = (await ids({ logit_bias: { [eos]: 100 }, min_tokens: 3 })).choice!;
    expect([held.token_ids.length, held.token_ids.slice(0, 3).includes(eos), held.token_ids[3], held.finish_reason]).to.deep.equal([4, false, eos, 'stop']);
    // skip_special_tokens (true by default, as both engines): eos tokens past ignore_eos leave no text.
    const eosOnly = { logit_bias: { [eos]: 100 }, ignore_eos: true, max_tokens: 3 };
    expect((await ids(eosOnly)).choice!.text).to.equal('');
    expect((await ids({ ...eosOnly, skip_special_tokens: false })).choice!.text).to.equal('<|im_end|>'.repeat(3));
    // echo: the prompt's text first.
    expect((await ids({ echo: true, logit_bias: { '9707': 100 }, max_tokens: 2 })).choice!.text).to.equal(`Hello${server.options.tokenizer!.decode([9707, 9707])}`);
    // text_offset: where each token's text begins (all zeros before).
    const offsets = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'Hello', max_tokens: 5, seed: 2, logprobs: 0 }) });
    const withOffsets = ((await offsets.json()) as { choices: { logprobs: { tokens: string[]; text_offset: number[] } }[] }).choices[0].logprobs;
    expect(withOffsets.text_offset).to.deep.equal(withOffsets.tokens.map((_, t) => withOffsets.tokens.slice(0, t).join('').length));
    // Refused, each naming its field (a string "true" was taken as false).
    const refusals: [object, string][] = [
      [{ ignore_eos: 'true' }, "'ignore_eos' must be true or false"],
      [{ skip_special_tokens: 1 }, "'skip_special_tokens' must be true or false"],
      [{ logit_bias: { '999999': 5 } }, "'logit_bias' names token"],
      [{ min_tokens: 7 }, "'min_tokens' must be an integer >= 0 <= 6"],
      [{ suffix: 'x' }, "'suffix' is not supported"],
      [{ guided_regex: 'a+' }, "'guided_regex' is not supported"],
      [{ structured_outputs: { regex: 'a+' } }, "'structured_outputs' is not supported"],
      [{ response_format: { type: 'json_object' } }, "'response_format' other than"],
      [{ best_of: 3 }, "'best_of' other than n"],
      [{ echo: true, logprobs: 1 }, "'echo' with 'logprobs'"],
    ];
    for (const [body, message] of refusals) {
      const answer = await ids(body);
      expect([answer.status, answer.message], JSON.stringify(body)).to.satisfy(([status, text]: [number, string]) => status === 400 && text.includes(message));
    }
    const sglang = await fetch(`${url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'Hello', sampling_params: { regex: 'a+', max_new_tokens: 2 } }) });
    expect([sglang.status, ((await sglang.json()) as { message: string }).message]).to.satisfy(([status, text]: [number, string]) => status === 400 && text.includes("'sampling_params.regex' is not supported"));
  });

  it('streamed text: decoded incrementally, a character split across tokens held until whole, never past a stop string, the same text as decoding it whole', () => {
    const tokenizer = server.options.tokenizer!;
    const text = 'Grüße 😀 aus Köln — 東京 ok. '.repeat(200) + 'STOP here';
    const ids = tokenizer.encode(text);
    const decode = (part: readonly number[]) => tokenizer.decode([...part], true);
    const plain = new TextDeltas(decode, []);
    let streamed = '';
    for (let t = 1; t <= ids.length; t++) {
      const delta = plain.next(ids.slice(0, t));
      expect(delta, `step ${t}`).to.not.include('\ufffd');
      streamed += delta;
    }
    expect(streamed + plain.rest(decode(ids))).to.equal(decode(ids));
    const stopping = new TextDeltas(decode, ['STOP', '東京 ok. Gr']);
    let cut = '';
    for (let t = 1; t <= ids.length; t++) cut += stopping.next(ids.slice(0, t));
    expect(cut).to.equal(text.slice(0, text.indexOf('東京 ok. Gr')));
  });

  it('a client that goes away cancels its samples, queued and running, whole or streamed', async () => {
    for (const stream of [false, true]) {
      const gone = new AbortController();
      const request = fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: MESSAGES, max_tokens: 4000, n: 8, stream, ignore_eos: true }),
        signal: gone.signal,
      }).then((r) => r.body?.cancel());
      // Once its batch decodes, the client leaves.
      for (let i = 0; i < 400 && server.engine.busy === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(server.engine.busy, 'samples decoding').to.be.above(0);
      gone.abort();
      await request.catch(() => undefined);
      // 8 x 4000 tokens would take minutes; the batch ends at its next step.
      const started = performance.now();
      while (server.engine.busy + server.engine.waiting > 0 && performance.now() - started < 30_000) await new Promise((r) => setTimeout(r, 10));
      expect(server.engine.busy + server.engine.waiting, `stream ${stream}: samples left after the client went away`).to.equal(0);
    }
    // The server answers the next client as before.
    expect((await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 4, seed: 1 })).choices[0].message.role).to.equal('assistant');
  });

  it('a streaming client that stops reading: past the backlog limit its connection closes (its samples cancel with it)', () => {
    let destroyed = false;
    const res = { writableEnded: false, destroyed: false, headersSent: false, writableLength: 0, writableNeedDrain: false, writeHead: () => undefined, destroy: () => (destroyed = true), write(text: string) { this.writableLength += text.length; this.writableNeedDrain = this.writableLength > 16_384; return !this.writableNeedDrain; } };
    const stream = new EventStream(res as never, 100_000);
    for (let i = 0; i < 200 && !destroyed; i++) stream.send({ text: 'x'.repeat(1000) });
    expect([destroyed, stream.behind, res.writableLength > 100_000, res.writableLength < 102_100]).to.deep.equal([true, true, true, true]);
  });

  it('cumulative SGLang events to a client that stops reading are skipped until it reads, the stream ending whole', async () => {
    const { hostname, port } = new URL(url);
    /** Sends a request on a socket that reads nothing until `resume` is called. */
    const unread = (route: string, body: object) => {
      const text = JSON.stringify(body);
      const socket = net.connect(Number(port), hostname);
      socket.pause();
      socket.write(`POST ${route} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n${text}`);
      const chunks: Buffer[] = [];
      // The whole stream once [DONE] arrives, or what came before the server closed it.
      const read = new Promise<string>((resolve) => {
        socket.on('close', () => resolve(Buffer.concat(chunks).toString()));
        socket.on('data', (c: Buffer) => {
          chunks.push(c);
          if (c.toString().includes('[DONE]')) socket.destroy();
        });
      });
      socket.on('error', () => undefined);
      return { resume: () => socket.resume(), read };
    };
    const settled = async (limitMs: number) => {
      const started = performance.now();
      while (server.engine.busy + server.engine.waiting > 0 && performance.now() - started < limitMs) await new Promise((r) => setTimeout(r, 20));
      return server.engine.busy + server.engine.waiting;
    };
    // SGLang's events are cumulative: unread, they are skipped (the backlog never reaches the limit), and the stream ends with the whole item.
    // Four samples of 700 tokens: sent whole, their events would hold over 30 MB, past what loopback's buffers absorb.
    const tokens = 700;
    const samples = 4;
    const cumulative = unread('/generate', { text: 'Hello', sampling_params: { max_new_tokens: tokens, ignore_eos: true, n: samples }, stream: true, return_logprob: true });
    for (let i = 0; i < 400 && server.engine.busy === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await settled(120_000)).to.equal(0);
    cumulative.resume();
    const raw = await cumulative.read;
    // Each event is one chunk of the chunked body, on its own line.
    const events = [...raw.matchAll(/^data: (\{.*\})\r?$/gm)].map((m) => m[1]);
    const items = events.map((e) => JSON.parse(e) as { index: number; output_ids: number[]; meta_info: { output_token_logprobs: unknown[]; finish_reason: unknown } });
    // Each sample's last event is its whole item.
    for (let i = 0; i < samples; i++) {
      const last = items.filter((item) => item.index === i).at(-1)!;
      expect([last.output_ids.length, last.meta_info.output_token_logprobs.length, last.meta_info.finish_reason]).to.deep.equal([tokens, tokens, { type: 'length', length: tokens }]);
    }
    // Sent whole, every token of every sample would have its event.
    expect(events.length, 'events sent to a client that read none').to.be.below((samples * tokens) / 2);
    expect(raw).to.include('data: [DONE]');
  });

  it('a hostile-client sweep\'s finds: wrong-typed booleans and fields the engines act on are refused naming them; chat_template_kwargs and add_generation_prompt are applied', async () => {
    const post = async (route: string, body: object) => {
      const answer = await fetch(`${url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      return { status: answer.status, json: (await answer.json()) as { error?: { message: string }; message?: string; usage?: { prompt_tokens: number } } };
    };
    const refused = async (route: string, body: object, ...fragments: string[]) => {
      const { status, json } = await post(route, body);
      const label = JSON.stringify(body).slice(0, 200);
      expect(status, label).to.equal(400);
      for (const f of fragments) expect(json.error?.message ?? json.message, label).to.include(f);
    };
    const chat = { model, messages: MESSAGES, max_tokens: 2 };
    const completion = { model, prompt: 'Hello', max_tokens: 2 };
    const generate = { text: 'Hello', sampling_params: { max_new_tokens: 2 } };
    await refused('/v1/chat/completions', { ...chat, logprobs: 'true' }, "'logprobs' must be true or false");
    await refused('/v1/completions', { ...completion, return_token_ids: 'true' }, "'return_token_ids'");
    await refused('/v1/completions', { ...completion, include_stop_str_in_output: 1 }, "'include_stop_str_in_output'");
    await refused('/generate', { ...generate, return_logprob: 1 }, "'return_logprob'");
    await refused('/generate', { ...generate, sampling_params: { max_new_tokens: 2, no_stop_trim: 'yes' } }, "'sampling_params.no_stop_trim'");
    for (const [field, value] of [['use_beam_search', true], ['length_penalty', 0.5], ['truncate_prompt_tokens', 1], ['prompt_embeds', 'AAAA'], ['add_special_tokens', false]] as const) {
      await refused('/v1/completions', { ...completion, [field]: value }, `'${field}' is not supported`);
    }
    for (const [field, value] of [['continue_final_message', true], ['chat_template', '{{ messages }}'], ['documents', [{ text: 'x' }]], ['prompt_logprobs', 1], ['echo', true]] as const) {
      await refused('/v1/chat/completions', { ...chat, [field]: value }, `'${field}' is not supported`);
    }
    await refused('/generate', { ...generate, return_logprob: true, logprob_start_len: 2 }, "'logprob_start_len' other than -1 or 0");
    for (const [field, value] of [['token_ids_logprob', [1]], ['return_hidden_states', true], ['image_data', 'x'], ['input_embeds', [[0]]], ['custom_logit_processor', 'x'], ['session_params', {}]] as const) {
      await refused('/generate', { ...generate, [field]: value }, `'${field}' is not supported`);
    }
    await refused('/generate', { ...generate, sampling_params: { max_new_tokens: 2, custom_params: {} } }, "'sampling_params.custom_params' is not supported");
    await refused('/generate', { ...generate, input_ids: [1, 2] }, "'input_ids' or 'text', not both");
    // The no-op values pass.
    expect((await post('/v1/completions', { ...completion, use_beam_search: false, length_penalty: 1, add_special_tokens: true })).status).to.equal(200);
    expect((await post('/generate', { ...generate, logprob_start_len: -1, return_hidden_states: false })).status).to.equal(200);
    // SGLang's input log-probs from position 0: the first token has none, the rest the prompt's own.
    const scored = (await post('/generate', { input_ids: [9707, 1879, 11], sampling_params: { max_new_tokens: 0, temperature: 1 }, return_logprob: true, logprob_start_len: 0, top_logprobs_num: 2 })).json as unknown as { meta_info: { input_token_logprobs: [number | null, number, null][]; input_top_logprobs: ([number, number, null][] | null)[] } };
    expect(scored.meta_info.input_token_logprobs.map(([lp, id]) => [lp === null, id])).to.deep.equal([[true, 9707], [false, 1879], [false, 11]]);
    expect(scored.meta_info.input_top_logprobs[0]).to.equal(null);
    expect(scored.meta_info.input_top_logprobs[1]).to.have.length(2);
    // Applied: the template's own variables, and a prompt without the assistant's opening.
    const tokenizer = server.options.tokenizer!;
    const rendered = (extra: Record<string, unknown>, generation = true) => tokenizer.encode(tokenizer.applyChatTemplate(MESSAGES, generation, undefined, extra)).length;
    expect((await post('/v1/chat/completions', { ...chat, chat_template_kwargs: { enable_thinking: false } })).json.usage!.prompt_tokens).to.equal(rendered({ enable_thinking: false }));
    expect(rendered({ enable_thinking: false })).to.not.equal(rendered({}));
    expect((await post('/v1/chat/completions', { ...chat, add_generation_prompt: false })).json.usage!.prompt_tokens).to.equal(rendered({}, false));
    // Sizes refused before any work (400,000 empty messages took 13 s to render; 2 million repeated letters 20 s to encode), within this server's 1 MB bodies.
    const started = performance.now();
    await refused('/v1/chat/completions', { ...chat, messages: Array.from({ length: 20_000 }, () => ({ role: 'a', content: '' })) }, "'messages' holds 20000 messages");
    await refused('/v1/completions', { ...completion, prompt: 'a'.repeat(300_000) }, "'prompt[0]' holds 300000 characters");
    expect(performance.now() - started, 'both refusals').to.be.below(5000);
  });

  it('/abort_request answers the aborted request at once, with its tokens so far, while the rest of its batch decodes on', async () => {
    const body = (rid: string) => JSON.stringify({ input_ids: [5, 6], rid, sampling_params: { max_new_tokens: 3000, ignore_eos: true } });
    const post = (rid: string) => fetch(`${url}/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(rid) }).then((r) => r.json() as Promise<{ output_ids: number[]; meta_info: { finish_reason: { type: string } } }>);
    let keepAnswered = false;
    const keep = post('keep-going').finally(() => (keepAnswered = true));
    const victim = post('victim');
    for (let i = 0; i < 3000 && server.engine.busy < 2; i++) await new Promise((r) => setTimeout(r, 10));
    expect(server.engine.busy).to.equal(2);
    await new Promise((r) => setTimeout(r, 100));
    expect((await fetch(`${url}/abort_request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ rid: 'victim' }) })).status).to.equal(200);
    const answered = await victim;
    expect(answered.meta_info.finish_reason.type).to.equal('abort');
    expect(answered.output_ids.length).to.be.within(1, 2999);
    // Its batch still decodes the other one.
    expect(keepAnswered, 'the other request answered too').to.equal(false);
    await fetch(`${url}/abort_request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ rid: 'keep-going' }) });
    expect((await keep).meta_info.finish_reason.type).to.equal('abort');
  });

  it('64 prompts of 600 tokens at once (a prefill of 38,400 tokens) are answered, and /health meanwhile within a second', async () => {
    const prompt = Array.from({ length: 600 }, (_, i) => 100 + (i % 5000));
    // The process's first prefill of this size grows the wasm heap and the cache once (0.4-0.8 s in
    // its first chunk, measured): a one-time cost, not a prefill in one piece, so it is paid here first.
    expect((await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt, n: 64, max_tokens: 1, seed: 2 }) })).status).to.equal(200);
    const request = fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt, n: 64, max_tokens: 1, seed: 1 }) });
    // The server runs in this process: a prefill in one piece stalls the whole event loop, so the
    // longest gap between /health answers shows it (relative to the request, so a busy machine slows both alike).
    const started = performance.now();
    const answers = [started];
    let done = false;
    void request.finally(() => (done = true));
    while (!done) {
      expect((await fetch(`${url}/health`)).status).to.equal(200);
      answers.push(performance.now());
      await new Promise((r) => setTimeout(r, 20));
    }
    expect((await request).status).to.equal(200);
    const took = performance.now() - started;
    const longestGap = Math.max(...answers.slice(1).map((t, i) => t - answers[i]), performance.now() - answers.at(-1)!);
    expect(longestGap, `longest wait between /health answers during a ${Math.round(took)} ms prefill (ms)`).to.be.below(took / 2);
  });

  it("the official Python client (openai 3.22.1) streams chat and completions and assembles tool calls (where the machine's wheel cache has it)", async function () {
    const wheels = '/opt/pypi/files';
    if (!fs.existsSync(path.join(wheels, 'openai-3.22.1-py3-none-any.whl'))) this.skip();
    // Kept across clones (as the wheels are): installing it takes longer than the test.
    const target = path.join(os.homedir(), '.cache', 'flowrl-tests', 'openai-python-3.22.1');
    if (!fs.existsSync(path.join(target, 'openai'))) {
      const install = await runCommand('python3', ['-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheels, '--target', target, 'openai==3.22.1'], ROOT, 120_000);
      if (install.status !== 0) this.skip();
    }
    await faults({ script: SCRIPTED_CALL });
    const script = [
      'import json, sys',
      'from openai import OpenAI',
      `client = OpenAI(base_url=${JSON.stringify(`${url}/v1`)}, api_key="unused", max_retries=0)`,
      `model, messages, tools = ${JSON.stringify(model)}, ${JSON.stringify(MESSAGES)}, ${JSON.stringify(TOOLS)}`,
      'content, calls, finish = "", {}, None',
      'for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=64, stream=True):',
      '    for c in chunk.choices:',
      '        content += c.delta.content or ""',
      '        for t in c.delta.tool_calls or []:',
      '            calls.setdefault(t.index, {"name": "", "arguments": ""})',
      '            calls[t.index]["name"] += t.function.name or ""',
      '            calls[t.index]["arguments"] += t.function.arguments or ""',
      '        finish = c.finish_reason or finish',
      'text = "".join(c.choices[0].text for c in client.completions.create(model=model, prompt="Hello", max_tokens=6, stream=True) if c.choices)',
      'print(json.dumps({"content": content, "calls": list(calls.values()), "finish": finish, "text": text}))',
    ].join('\n');
    // Asynchronously: the server answering it runs in this process.
    const run = await runCommand('python3', ['-c', script], ROOT, 60_000, { PYTHONPATH: target });
    expect(run.status, run.stderr).to.equal(0);
    const got = JSON.parse(run.stdout) as { content: string; calls: { name: string; arguments: string }[]; finish: string; text: string };
    expect([got.content, got.finish, got.calls.map((c) => [c.name, JSON.parse(c.arguments)])]).to.deep.equal(['Let me add.\n', 'tool_calls', [['add', { a: 1, b: 2 }]]]);
    expect(got.text).to.equal(SCRIPTED_CALL.slice(0, got.text.length));
  });
});
