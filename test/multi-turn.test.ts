// Multi-turn rollouts with tools (rollout/agent-loop.ts, multi-turn.ts; verl v0.9.0's tool_agent
// loop): a hand-built conversation's ids and masks, every tool failure mode, and local sampling and
// training (GRPO, FlowRL) on conversations with a small chat model.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { ActorRolloutRefWorker, Batch, buildTokenizer, createHost, TextTokenizer, TOKENS, type Trainer, type Worker } from '../core-adapters/index.js';
import { initModel, saveModel } from '../core-adapters/model/checkpoint.js';
import { runAgentLoop, ToolTurnRenderer, truncateToolText, type TurnSampler } from '../core-adapters/rollout/agent-loop.js';
import { MultiTurn } from '../core-adapters/rollout/multi-turn.js';
import { CALCULATOR_SCHEMA, CODE_INTERPRETER_SCHEMA } from '../core-adapters/tools/builtin-tools.js';
import { parseHermesCalls } from '../core-adapters/tools/hermes.js';
import { ToolRegistry } from '../core-adapters/tools/registry.js';
import { Sandbox } from '../core-adapters/rewards/sandbox.js';
import { codeSandboxLimits } from '../core-adapters/rewards/code.js';
import { CORE_DEFAULTS } from '../core-adapters/config/defaults.js';
import type { Tool } from '../core-adapters/tools/tool.js';
import { expectClose, expectInputError, expectInputErrorAsync, readRunMetrics, QWEN_TOKENIZER, ROOT, tempDir, writeCountdownConfig } from './helpers.js';
import { packSequences, responseLogProbs } from '../core-adapters/model/logprobs.js';
import { MIN_SAMPLING_ROWS_PER_THREAD } from '../core-adapters/model/generate.js';
import { maskedNll } from '../core-adapters/model/train-step.js';
import { readSftExamples, runSft } from '../core-adapters/trainer/sft.js';
import { startServer } from './serve-helpers.js';
import { buildReport } from '../core-adapters/report/report.js';
import { readValGenerations } from '../core-adapters/trainer/val-prompts.js';
import { promptBatch, sequencesFromSamples } from '../core-adapters/workers/sequences.js';

// A Qwen2.5-shaped template (a system block, tool answers grouped in one user turn), written for
// these tests: only its layout matters.
const TEMPLATE = [
  "{%- if tools %}{{ '<|im_start|>system\\ntools:' }}{% for tool in tools %}{{ ' ' + tool.function.name }}{% endfor %}{{ '<|im_end|>\\n' }}",
  "{%- else %}{{ '<|im_start|>system\\nbe brief<|im_end|>\\n' }}{%- endif %}",
  "{%- for message in messages %}",
  "{%- if message.role == 'tool' %}",
  "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif %}",
  "{{ '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}",
  "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}",
  "{%- else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{% endif %}",
  "{%- endfor %}",
  "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
].join('');

function chatTokenizer() {
  let printable = '\n';
  for (let c = 32; c < 127; c++) printable += String.fromCharCode(c);
  return buildTokenizer({
    characters: printable,
    words: ['<tool_call>', '</tool_call>', '<tool_response>', '</tool_response>'],
    specialTokens: { pad: '<|endoftext|>', bos: '<s>', eos: '<|im_end|>', unk: '<unk>', extra: ['<|im_start|>'] },
    chatTemplate: TEMPLATE,
  });
}

const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

const SETTINGS = { ...CORE_DEFAULTS.actor_rollout_ref.rollout.multi_turn, enable: true, tool_config_path: 'tools.yaml' };

/** A sampler that answers each row's turn t with script[row][t] (text, encoded), whatever the context. */
function scripted(tokenizer: ReturnType<typeof chatTokenizer>, script: string[][], seen: number[][][] = []): TurnSampler {
  return async (contexts, budgets, turn, rows) => {
    seen.push(contexts);
    return { tokens: rows.map((row, i) => tokenizer.encode(script[row][turn] ?? 'done<|im_end|>', false).slice(0, budgets[i])) };
  };
}

function loopWith(tools: Map<string, Tool>, overrides: Partial<typeof SETTINGS> = {}, responseLength = 400) {
  const tokenizer = chatTokenizer();
  const renderer = new ToolTurnRenderer(tokenizer, [...tools.values()].map((t) => t.schema));
  const messages = [{ role: 'user', content: '9, 3, 4 -> 24' }];
  const promptIds = tokenizer.encode(renderer.promptText(messages), false);
  return {
    tokenizer,
    renderer,
    promptIds,
    run: (script: string[][], rows = script.length) =>
      runAgentLoop(
        Array.from({ length: rows }, () => ({ promptIds, messages, toolsKwargs: {} })),
        { sample: scripted(tokenizer, script), tokenizer, renderer, tools, settings: { ...SETTINGS, ...overrides }, responseLength, instancePrefix: 't' },
      ),
  };
}

const calculator = () => new ToolRegistry().load(writeToolConfig(tempDir(), [{ class_name: 'Calculator' }]), { codeSandbox: () => { throw new Error('no sandbox here'); } });

function writeToolConfig(dir: string, tools: unknown[]): string {
  const file = path.join(dir, 'tools.yaml');
  fs.writeFileSync(file, YAML.stringify({ tools }));
  return file;
}

const CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "(9-3)*4"}}</tool_call><|im_end|>';

describe('multi-turn rollouts: the agent loop', function () {
  this.timeout(120_000);

  it('a hand-built conversation: the exact ids of each turn, the tool turn as the template renders it, masks 1 on sampled tokens only', async () => {
    const { tokenizer, promptIds, run, renderer } = loopWith(calculator());
    const [t] = await run([['Check: ' + CALL, '9*3-4... no: (9-3)*4<|im_end|>']]);
    const first = tokenizer.encode('Check: ' + CALL, false);
    // What Qwen's template writes after the policy's <|im_end|>: the separator, the tool answer in a user turn, the next header.
    const toolTurn = tokenizer.encode('\n<|im_start|>user\n<tool_response>\n24\n</tool_response><|im_end|>\n<|im_start|>assistant\n', false);
    const last = tokenizer.encode('9*3-4... no: (9-3)*4<|im_end|>', false);
    expect(t.responseIds).to.deep.equal([...first, ...toolTurn, ...last]);
    expect(t.responseMask).to.deep.equal([...first.map(() => 1), ...toolTurn.map(() => 0), ...last.map(() => 1)]);
    expect(renderer.toolTurnIds(['24'])).to.deep.equal(toolTurn);
    expect({ assistant: t.assistantTurns, user: t.userTurns, calls: t.toolCalls, failures: t.toolFailures, mismatch: t.tokenizationMismatch }).to.deep.equal({ assistant: 2, user: 1, calls: 1, failures: 0, mismatch: false });
    expect(t.turns.map((m) => m.role)).to.deep.equal(['assistant', 'tool', 'assistant']);
    // The prompt carries the tools' schemas through the template.
    expect(tokenizer.decode(promptIds)).to.contain('tools: calculator');
  });

  it('the turn loop stops at a turn without a call, at max_assistant_turns / max_user_turns, and where a tool turn would leave no room', async () => {
    const tools = calculator();
    const calls = [CALL, CALL, CALL, CALL];
    expect((await loopWith(tools).run([['no call here<|im_end|>']]))[0].assistantTurns).to.equal(1);
    expect((await loopWith(tools, { max_assistant_turns: 2 }).run([calls]))[0]).to.include({ assistantTurns: 2, userTurns: 1 });
    expect((await loopWith(tools, { max_user_turns: 2 }).run([calls]))[0]).to.include({ assistantTurns: 3, userTurns: 2 });
    // Budget: the first turn fits, the tool turn after it would fill the rest: not appended.
    const { tokenizer } = loopWith(tools);
    const budget = tokenizer.encode(CALL, false).length + 20;
    const [cut] = await loopWith(tools, {}, budget).run([calls]);
    expect(cut).to.include({ assistantTurns: 1, userTurns: 0 });
    expect(cut.responseMask.every((m) => m === 1)).to.equal(true);
    // Every turn that runs is cut to the budget; the trajectory never exceeds it.
    const [long] = await loopWith(tools, {}, 120).run([calls]);
    expect(long.responseIds.length).to.be.at.most(120);
    expect(long.responseMask.at(-1)).to.equal(1);
  });

  it('tool failures become tool turns that say so, counted: malformed calls, unknown tools, errors, time-outs, huge answers, extra parallel calls', async () => {
    const slow: Tool = { name: 'slow', schema: { ...CALCULATOR_SCHEMA, function: { ...CALCULATOR_SCHEMA.function, name: 'slow' } }, create: async () => {}, release: async () => {}, execute: () => new Promise(() => {}) };
    const broken: Tool = { ...slow, name: 'broken', execute: async () => { throw new Error('disk on fire'); } };
    const huge: Tool = { ...slow, name: 'huge', execute: async () => ({ text: 'a'.repeat(100) + 'b'.repeat(1_000_000) + 'c'.repeat(100) }) };
    const tools = new Map<string, Tool>([...calculator(), ['slow', slow], ['broken', broken], ['huge', huge]]);
    const cases: [string, string][] = [
      ['<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call><|im_end|>', 'Invalid tool call: not JSON'],
      ['<tool_call>{"name": "calculator", "arguments": "{oops"}</tool_call><|im_end|>', "Invalid JSON in arguments for 'calculator'"],
      ['<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call><|im_end|>', 'Error: not an arithmetic expression'],
      ['<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call><|im_end|>', "Error executing tool 'calculator': calculator needs a string argument 'expression'"],
      ['<tool_call>{"name": "search", "arguments": {}}</tool_call><|im_end|>', "Unknown function 'search'. Available tools: ['calculator', 'slow', 'broken', 'huge']"],
      ['<tool_call>{"name": "broken", "arguments": {}}</tool_call><|im_end|>', "Error executing tool 'broken': disk on fire"],
      ['<tool_call>{"name": "slow", "arguments": {}}</tool_call><|im_end|>', "Error executing tool 'slow': the call timed out after 0.2 s"],
      ['<tool_call>{"name": "calculator", "arguments": {"expression": "2"}', 'Invalid tool call: <tool_call> without </tool_call>'],
    ];
    const { run, tokenizer } = loopWith(tools, { tool_timeout_s: 0.2 }, 600);
    const trajectories = await run(cases.map(([turn]) => [turn]));
    trajectories.forEach((t, i) => {
      expect(t.turns[1]?.content, cases[i][0]).to.contain(cases[i][1]);
      expect(t.toolCalls, cases[i][0]).to.equal(1);
      // A calculator error is an answer, not a failure of the tool.
      expect(t.toolFailures, cases[i][0]).to.equal(cases[i][1].startsWith('Error: not') ? 0 : 1);
      expect(tokenizer.decode(t.responseIds.filter((_, k) => !t.responseMask[k]))).to.contain('<tool_response>');
    });
    const [big, parallel] = await loopWith(tools, { max_tool_response_length: 50 }).run([
      ['<tool_call>{"name": "huge", "arguments": {}}</tool_call><|im_end|>'],
      ['<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call><tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call><|im_end|>'],
    ]);
    expect(big.turns[1].content).to.equal('a'.repeat(25) + '...(truncated)...' + 'c'.repeat(25));
    expect(big.toolResponsesTruncated).to.equal(1);
    expect(parallel).to.include({ toolCalls: 1, toolCallsDropped: 1 });
    expect(parallel.turns[1].content).to.equal('2');
    expect(truncateToolText('abcdef', 4, 'left').text).to.equal('(truncated)...cdef');
    expect(truncateToolText('abcdef', 4, 'right').text).to.equal('abcd...(truncated)');
    // Characters as Python counts them: an emoji (two UTF-16 units) is one, and never split in half.
    expect(truncateToolText('😀😀😀😀😀😀', 4, 'right').text).to.equal('😀😀😀😀...(truncated)');
    expect(truncateToolText('😀😀😀😀', 4, 'left')).to.deep.equal({ text: '😀😀😀😀', truncated: false });
    expect(truncateToolText('a😀b😀c', 2, 'middle').text).to.equal('a...(truncated)...c');
  });

  it('a stateful tool: one instance per trajectory, created with the row\'s create_kwargs, its trajectory reward asked for, released even when a call throws', async () => {
    const log: string[] = [];
    const counter: Tool = {
      name: 'counter',
      schema: { ...CALCULATOR_SCHEMA, function: { ...CALCULATOR_SCHEMA.function, name: 'counter' } },
      create: async (id, kwargs) => void log.push(`create ${id} ${JSON.stringify(kwargs)}`),
      execute: async (id, args) => {
        if (args.fail) throw new Error('asked to fail');
        log.push(`execute ${id}`);
        return { text: 'ok', reward: 0.5 };
      },
      calcReward: async () => 2,
      release: async (id) => void log.push(`release ${id}`),
    };
    const tokenizer = chatTokenizer();
    const tools = new Map([['counter', counter]]);
    const renderer = new ToolTurnRenderer(tokenizer, [counter.schema]);
    const call = (args: string) => `<tool_call>{"name": "counter", "arguments": ${args}}</tool_call><|im_end|>`;
    const [t] = await runAgentLoop([{ promptIds: [5, 6], messages: [{ role: 'user', content: 'x' }], toolsKwargs: { counter: { create_kwargs: { start: 3 } } } }], {
      sample: scripted(tokenizer, [[call('{}'), call('{"fail": true}'), call('{}')]]),
      tokenizer, renderer, tools, settings: { ...SETTINGS, tokenization_sanity_check_mode: 'disable' }, responseLength: 400, instancePrefix: 's',
    });
    expect(log).to.deep.equal(['create s-0-counter {"start":3}', 'execute s-0-counter', 'execute s-0-counter', 'release s-0-counter']);
    expect(t.toolRewards).to.deep.equal([0.5, 0.5, 2]);
    expect(t.toolFailures).to.equal(1);
  });

  it('the code interpreter runs Python in the sandbox: output, errors, a program stopped by its time limit, a huge output cut', async function () {
    const registry = new ToolRegistry();
    const file = writeToolConfig(tempDir(), [{ class_name: 'CodeInterpreter', config: { timeout_s: 1 } }]);
    const tools = registry.load(file, { codeSandbox: (o) => new Sandbox({ limits: { ...codeSandboxLimits(CORE_DEFAULTS.reward_model.code), wallSeconds: o.wallSeconds ?? 1, cpuSeconds: 1 } }) });
    const { run } = loopWith(tools, {}, 2000);
    const call = (code: string) => `<tool_call>${JSON.stringify({ name: 'code_interpreter', arguments: { code } })}</tool_call><|im_end|>`;
    const [printed, failed, looped, flood] = await run([[call('print(6 * 4)')], [call('raise ValueError("nope")')], [call('while True: pass')], [call('print("x" * 100000)')]]);
    expect(printed.turns[1].content).to.equal('24\n');
    expect(failed.turns[1].content).to.contain('ValueError: nope');
    expect(looped.turns[1].content).to.equal('(stopped: timeout)');
    expect(flood.turns[1].content).to.match(/^x{128}\.\.\.\(truncated\)\.\.\.x{127}\n$/);
    expect([printed, failed, looped, flood].map((t) => t.toolFailures)).to.deep.equal([0, 0, 0, 0]);
  });

  it('lifecycle under failure: a hanging create times out (the loop finishes), parallel calls to one tool share one instance, tools\' metrics are summed', async () => {
    const log: string[] = [];
    const base = { schema: CALCULATOR_SCHEMA, release: async (id: string) => void log.push(`release ${id}`), execute: async () => ({ text: 'ok', metrics: { uses: 1 } }) };
    const hanging: Tool = { ...base, name: 'hang', create: () => new Promise(() => {}) };
    const counting: Tool = { ...base, name: 'count', create: async (id) => void log.push(`create ${id}`) };
    const tools = new Map([['hang', hanging], ['count', counting]]);
    const call = (name: string) => `<tool_call>{"name": "${name}", "arguments": {}}</tool_call>`;
    const { run } = loopWith(tools, { tool_timeout_s: 0.2, max_parallel_calls: 2 }, 600);
    const [hung, twice] = await run([[call('hang') + '<|im_end|>'], [call('count') + call('count') + '<|im_end|>']]);
    expect(hung.turns[1].content).to.equal("Error executing tool 'hang': create timed out after 0.2 s");
    expect(hung.toolFailures).to.equal(1);
    expect(log.filter((l) => l.startsWith('create'))).to.have.length(1);
    expect(log.filter((l) => l.startsWith('release'))).to.have.length(1);
    expect(twice.turns.filter((t) => t.role === 'tool').map((t) => t.content)).to.deep.equal(['ok', 'ok']);
    expect(twice.toolMetrics).to.deep.equal({ uses: 2 });
  });

  it('templates: one that refuses or drops tool messages is refused at setup; a turn closed by another token than eos still gets its separator; tool_selection limits the prompt\'s tools', () => {
    const build = (template: string, eos = '<|im_end|>') => {
      let printable = '\n';
      for (let c = 32; c < 127; c++) printable += String.fromCharCode(c);
      return buildTokenizer({ characters: printable, specialTokens: { pad: '<|pad|>', bos: '<s>', eos, unk: '<unk>', extra: ['<|im_start|>', '<|im_end|>', '<|endoftext|>'] }, chatTemplate: template });
    };
    const refusing = "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('Only user and assistant roles') }}{% endif %}{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}";
    const dropping = "{% for m in messages %}{% if m.role != 'tool' %}{{ m.role + ': ' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}";
    expectInputError(() => new ToolTurnRenderer(build(refusing), []), "cannot render a tool message (role 'tool')", 'Only user and assistant roles');
    expectInputError(() => new ToolTurnRenderer(build(dropping), []), "renders no text for a tool message (role 'tool')");
    // A base model's tokenizer: eos <|endoftext|>, turns closed by <|im_end|>.
    const base = build(TEMPLATE, '<|endoftext|>');
    expect(base.decode(new ToolTurnRenderer(base, []).toolTurnIds(['5']), false)).to.equal('\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n');
    const renderer = new ToolTurnRenderer(chatTokenizer(), [CALCULATOR_SCHEMA, CODE_INTERPRETER_SCHEMA]);
    const messages = [{ role: 'user', content: 'x' }];
    expect(renderer.promptText(messages)).to.contain('tools: calculator code_interpreter');
    expect(renderer.promptText(messages, [])).to.contain('tools: calculator code_interpreter');
    expect(renderer.promptText(messages, ['code_interpreter'])).to.contain('tools: code_interpreter<|im_end|>');
  });

  it("a row with tool_selection is checked against its own prompt's tools: no tokenization mismatch (every such row was one)", async () => {
    const tokenizer = chatTokenizer();
    const tools = calculator();
    const renderer = new ToolTurnRenderer(tokenizer, [CALCULATOR_SCHEMA, CODE_INTERPRETER_SCHEMA]);
    const messages = [{ role: 'user', content: '9, 3, 4 -> 24' }];
    const row = { promptIds: tokenizer.encode(renderer.promptText(messages, ['calculator']), false), messages, toolsKwargs: {}, toolSelection: ['calculator'] };
    const [t] = await runAgentLoop([row], { sample: scripted(tokenizer, [['(9-3)*4<|im_end|>']]), tokenizer, renderer, tools, settings: SETTINGS, responseLength: 100, instancePrefix: 'sel' });
    expect(t.tokenizationMismatch).to.equal(false);
  });

  it('hermes parsing; tool config files: verl\'s shape, errors naming the file and entry', () => {
    expect(parseHermesCalls('a<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>b').calls).to.deep.equal([{ name: 'f', arguments: { x: 1 } }]);
    expect(parseHermesCalls('<tool_call>{"name": "f", "arguments": "{\\"x\\": 2}"}</tool_call>').calls).to.deep.equal([{ name: 'f', arguments: { x: 2 } }]);
    expect(parseHermesCalls('plain').calls).to.deep.equal([]);
    const registry = new ToolRegistry();
    const context = { codeSandbox: () => { throw new Error('unused'); } };
    const dir = tempDir();
    const custom = { type: 'function', function: { name: 'calc', description: 'd', parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] } } };
    expect([...registry.load(writeToolConfig(dir, [{ class_name: 'Calculator', config: { type: 'native' }, tool_schema: custom }]), context).keys()]).to.deep.equal(['calc']);
    const bad: [unknown[], string][] = [
      [[{ class_name: 'Nope' }], "tools[0].class_name 'Nope' is not a registered tool class (registered: Calculator (core), CodeInterpreter (core))"],
      [[{ class_name: 'Calculator', config: { type: 'mcp' } }], 'tools[0].config.type is "mcp"'],
      [[{ class_name: 'Calculator' }, { class_name: 'Calculator' }], "tools[1]: a second tool named 'calculator'"],
      [[{ class_name: 'Calculator', tool_schema: { type: 'function', function: { name: 'bad name!' } } }], 'tools[0].tool_schema.function.name'],
      [[{ class_name: 'CodeInterpreter', config: { timeout_s: -1 } }], 'tools[0] (CodeInterpreter): tool CodeInterpreter: config.timeout_s must be a number > 0'],
      [[{ class_name: 'CodeInterpreter', config: { timeout: 5 } }], "tools[0] (CodeInterpreter): tool CodeInterpreter: unknown config key 'timeout' (known: timeout_s, memory_limit_mb)"],
    ];
    for (const [tools, message] of bad) expectInputError(() => registry.load(writeToolConfig(tempDir(), tools), context), 'tools.yaml', message);
    expectInputError(() => registry.load(path.join(dir, 'missing.yaml'), context), 'missing.yaml: tool config not found');
    registry.provider = 'plugin x';
    expectInputError(() => registry.register('Calculator', () => calculator().get('calculator')!), "tool class 'Calculator' is registered twice: by core and by plugin x");
  });
});

/** A small chat model (random weights) with the tokenizer above, and countdown rows for tool_agent. */
async function writeChatTask(dir: string): Promise<{ model: string; tools: string; data: string }> {
  const tokenizer = chatTokenizer();
  const model = path.join(dir, 'model');
  const raw = { architectures: ['LlamaForCausalLM'], model_type: 'llama', vocab_size: tokenizer.vocabSize, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 512, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: true, bos_token_id: tokenizer.tokenId('<s>'), eos_token_id: tokenizer.eosTokenId, pad_token_id: tokenizer.padTokenId };
  await saveModel(initModel(raw, 7), model, { tokenizer });
  const tools = writeToolConfig(dir, [{ class_name: 'Calculator' }]);
  const data = path.join(dir, 'train.jsonl');
  const rows = [[9, 3, 4, 24], [2, 5, 7, 17], [8, 2, 6, 10], [6, 6, 1, 35]].map(([a, b, c, target], i) => ({
    data_source: 'countdown',
    agent_name: i % 2 ? 'tool_agent' : undefined,
    prompt: [{ role: 'user', content: `${a}, ${b}, ${c} -> ${target}` }],
    reward_model: { style: 'rule', ground_truth: { numbers: [a, b, c], target } },
    extra_info: { index: i },
  }));
  fs.writeFileSync(data, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return { model, tools, data };
}

describe('multi-turn rollouts: local sampling and training', function () {
  this.timeout(300_000);

  async function configFor(dir: string, algorithm: string, extra: Record<string, unknown> = {}) {
    const task = await writeChatTask(dir);
    return writeCountdownConfig(dir, {
      plugins: [path.join(ROOT, 'plugin.json')],
      algorithm: { name: algorithm },
      data: { train_files: task.data, val_files: task.data, train_batch_size: 4, max_prompt_length: 96, max_response_length: 160 },
      actor_rollout_ref: { model: { path: task.model }, actor: { ppo_mini_batch_size: 4 }, rollout: { n: 2, multi_turn: { enable: true, tool_config_path: task.tools }, val_kwargs: { n: 1 } } },
      ...extra,
    });
  }

  /** Makes some rows (the even ones) call the calculator on their first turn, whatever the random model samples. */
  function forceToolCalls(multiTurn: MultiTurn, tokenizer: ReturnType<typeof chatTokenizer>, forcedRow = (row: number) => row % 2 === 0) {
    const rollOut = multiTurn.rollOut.bind(multiTurn);
    multiTurn.rollOut = (prompts, sample, length, pad) =>
      rollOut(prompts, async (contexts, budgets, turn, rows) => {
        const sampled = await sample(contexts, budgets, turn, rows);
        const forced = (i: number) => turn === 0 && forcedRow(rows[i]);
        const call = tokenizer.encode(CALL, false);
        return {
          tokens: sampled.tokens.map((ids, i) => (forced(i) ? call.slice(0, budgets[i]) : ids)),
          // The forced turn has no engine log-probs: NaN, so a comparison cannot pass on them by chance.
          logProbs: sampled.logProbs?.map((lp, i) => (forced(i) ? call.map(() => NaN) : lp)),
        };
      }, length, pad);
  }

  it('local sampling: tool_agent rows become conversations (masks 0 on tool turns, attention on all), single_turn_agent rows one turn; the same seed gives the same trajectories', async () => {
    const dir = tempDir();
    const host = await createHost(await configFor(dir, 'grpo'), { quiet: true });
    const multiTurn = host.container.get(MultiTurn);
    const tokenizer = chatTokenizer();
    forceToolCalls(multiTurn, tokenizer);
    const worker = host.container.get<Worker>(TOKENS.Worker);
    await worker.init();
    const dataset = host.container.get<{ init(): Promise<void>; train: never[] }>(TOKENS.Dataset);
    await dataset.init();
    const prompts = promptBatch(dataset.train, 'x').repeat(2, true);
    const sampling = { temperature: 1, topP: 1, topK: -1, greedy: false, maxNewTokens: 160, seed: 5 };
    const a = await worker.generateSequences(prompts, sampling);
    const b = await worker.generateSequences(prompts, sampling);
    expect(Array.from(a.tensor('responses').data)).to.deep.equal(Array.from(b.tensor('responses').data));
    const agents = a.column<string>('agent_name');
    const turns = a.column<number>('num_turns');
    const R = a.tensor('responses').shape[1];
    const mask = a.tensor('response_mask').data;
    const attention = a.tensor('attention_mask');
    const L = attention.shape[1];
    for (let row = 0; row < a.size; row++) {
      const toolRow = agents[row] === 'tool_agent' && row % 2 === 0;
      if (agents[row] === 'single_turn_agent') expect(turns[row], `row ${row}`).to.equal(2);
      if (toolRow) expect(turns[row], `row ${row}`).to.be.at.least(4);
      let zeros = 0;
      for (let t = 0; t < R; t++) {
        const valid = attention.data[row * L + L - R + t];
        expect(mask[row * R + t], `row ${row} token ${t}`).to.be.at.most(valid);
        if (valid && !mask[row * R + t]) zeros += 1;
      }
      expect(zeros > 0, `row ${row}: tool tokens`).to.equal(toolRow);
    }
    expect(a.meta.metrics).to.have.property('agent_loop/tool_calls/mean').above(0);
    // Two threads: the pool samples a turn's rows in shards (from 2 x MIN_SAMPLING_ROWS_PER_THREAD rows), each row with its own seed and budget: the same conversations as one thread.
    const many = promptBatch(dataset.train, 'y').repeat(2 * MIN_SAMPLING_ROWS_PER_THREAD / dataset.train.length, true);
    const pooled = await createHost(await configFor(tempDir(), 'grpo'), { overrides: ['engine.workers=2'], quiet: true });
    forceToolCalls(pooled.container.get(MultiTurn), tokenizer);
    const pooledWorker = pooled.container.get<Worker>(TOKENS.Worker);
    await pooledWorker.init();
    const short = { ...sampling, maxNewTokens: 100 };
    const [one, two] = [await worker.generateSequences(many, short), await pooledWorker.generateSequences(many, short)];
    expect(Array.from(two.tensor('responses').data)).to.deep.equal(Array.from(one.tensor('responses').data));
    expect(Array.from(two.tensor('response_mask').data)).to.deep.equal(Array.from(one.tensor('response_mask').data));
    expect(Math.max(...two.column<number>('num_turns'))).to.be.at.least(4);
    [one, two].forEach((b) => b.dispose());
    pooledWorker.dispose();
    expect((a.column<Record<string, unknown>>('extra_info')[0])).to.have.keys('index', 'tool_rewards', 'num_turns');
    a.dispose();
    b.dispose();
    worker.dispose();
  });

  it('log-probs of a hand-built conversation: the batch gives each sampled token the log-prob of its own turn given the conversation before it', async () => {
    const dir = tempDir();
    const host = await createHost(await configFor(dir, 'grpo'), { quiet: true });
    const worker = host.container.get<ActorRolloutRefWorker>(TOKENS.Worker);
    await worker.init();
    const tokenizer = chatTokenizer();
    const renderer = new ToolTurnRenderer(tokenizer, [CALCULATOR_SCHEMA]);
    const prompt = tokenizer.encode(renderer.promptText([{ role: 'user', content: '9, 3, 4 -> 24' }]), false);
    const turns = [tokenizer.encode('Check: ' + CALL, false), renderer.toolTurnIds(['24']), tokenizer.encode('(9-3)*4<|im_end|>', false)];
    const sampled = [true, false, true];
    const response = turns.flat();
    const mask = turns.flatMap((ids, i) => ids.map(() => (sampled[i] ? 1 : 0)));
    // Two rows: the conversation, and a shorter one-turn row beside it (padding must not leak).
    const short = tokenizer.encode('24<|im_end|>', false);
    const batch = new Batch({ tensors: sequencesFromSamples([prompt, prompt.slice(3)], [response, short], 160, tokenizer.padTokenId!, [mask, short.map(() => 1)]) });
    const logProbs = (await worker.computeLogProb(batch)).logProbs;
    const R = batch.tensor('responses').shape[1];
    let offset = 0;
    for (const [i, ids] of turns.entries()) {
      if (sampled[i]) {
        const [own] = await responseLogProbs(worker.module.lm, [[...prompt, ...response.slice(0, offset)]], [ids]);
        expectClose(logProbs.subarray(offset, offset + ids.length), own, 2e-5, `turn ${i}`);
      }
      offset += ids.length;
    }
    const [alone] = await responseLogProbs(worker.module.lm, [prompt.slice(3)], [short]);
    expectClose(logProbs.subarray(R, R + short.length), alone, 2e-5, 'the short row');
    batch.dispose();
    worker.dispose();
  });

  it('multi-turn SFT (sft.messages_key): a conversation laid out as the agent loop lays it out, the loss over the assistant\'s tokens only, and it falls', async () => {
    const dir = tempDir();
    const file = await configFor(dir, 'grpo');
    const tokenizer = chatTokenizer();
    const renderer = new ToolTurnRenderer(tokenizer, [CALCULATOR_SCHEMA]);
    const messages = [{ role: 'user', content: '9, 3, 4 -> 24' }, { role: 'assistant', content: CALL.replace('<|im_end|>', '') }, { role: 'tool', content: '24' }, { role: 'assistant', content: '(9-3)*4' }];
    const laid = renderer.conversation(messages, 'row 1', [CALCULATOR_SCHEMA]);
    // A row without tools is rendered without them (verl's multi-turn SFT).
    expect(tokenizer.decode(renderer.conversation(messages, 'row 1').prompt)).not.to.contain('tools:');
    // The same conversation through the loop, its turns scripted.
    const [t] = await runAgentLoop([{ promptIds: laid.prompt, messages: messages.slice(0, 1), toolsKwargs: {} }], {
      sample: scripted(tokenizer, [[CALL, '(9-3)*4<|im_end|>']]), tokenizer, renderer, tools: calculator(), settings: SETTINGS, responseLength: 400, instancePrefix: 'sft',
    });
    expect(laid.prompt).to.deep.equal(tokenizer.encode(renderer.promptText(messages.slice(0, 1)), false));
    expect(laid.response).to.deep.equal(t.responseIds);
    expect(laid.lossMask).to.deep.equal(t.responseMask);
    expectInputError(() => renderer.conversation(messages.slice(0, 3), 'row 2'), 'row 2: a conversation must end with an assistant turn');
    // The loss reads assistant tokens only: against the log-probs turn by turn.
    const host = await createHost(file, { quiet: true });
    const worker = host.container.get<ActorRolloutRefWorker>(TOKENS.Worker);
    await worker.init();
    const lm = worker.module.lm;
    const seq = packSequences([laid.prompt], [laid.response], 0, [laid.lossMask]);
    const loss = maskedNll(lm, seq);
    const [all] = await responseLogProbs(lm, [laid.prompt], [laid.response]);
    const expected = -all.reduce((sum, lp, i) => sum + lp * laid.lossMask[i], 0) / laid.lossMask.reduce((a, b) => a + b, 0);
    expect(loss.dataSync()[0]).to.be.closeTo(expected, 1e-4);
    loss.dispose();
    worker.dispose();
    // OpenAI-style tool_calls (verl's rows) are the hermes text the policy writes, in Qwen2.5's layout
    // (this test template writes no calls; one that does, as Qwen's, is taken at its word below).
    const openai = path.join(dir, 'openai.jsonl');
    fs.writeFileSync(openai, JSON.stringify({ messages: [messages[0], { role: 'assistant', content: '', tool_calls: [{ type: 'function', function: { name: 'calculator', arguments: '{"expression": "(9-3)*4"}' } }] }, messages[2], messages[3]], tools: ['calculator'] }) + '\n');
    const [fromCalls] = await readSftExamples([openai], tokenizer, { responseKey: 'unused', keyName: 'sft.response_key', maxPromptLength: 200, maxResponseLength: 400, conversations: { key: 'messages', toolsKey: 'tools', renderer } });
    const hermes = renderer.conversation([messages[0], { role: 'assistant', content: '<tool_call>\n{"name": "calculator", "arguments": {"expression": "(9-3)*4"}}\n</tool_call>' }, messages[2], messages[3]], 'row', [CALCULATOR_SCHEMA]);
    expect(fromCalls.response).to.deep.equal(hermes.response);
    // Qwen's own template (the real Qwen3 tokenizer) is taken at its word: its calls in the same layout,
    // after the empty think block it writes for a turn that follows the last user message.
    const qwen = new ToolTurnRenderer(TextTokenizer.load(QWEN_TOKENIZER), [CALCULATOR_SCHEMA]);
    const call = { type: 'function' as const, function: { name: 'calculator', arguments: { expression: '(9-3)*4' } } };
    const written = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "(9-3)*4"}}\n</tool_call>';
    expect(qwen.assistantText({ role: 'assistant', content: '', tool_calls: [call] })).to.equal(`<think>\n\n</think>\n\n${written}`);
    expect(qwen.assistantText({ role: 'assistant', content: 'Let me check.', tool_calls: [call, call] })).to.equal(`<think>\n\n</think>\n\nLet me check.\n${written}\n${written}`);
    // SFT on conversation rows: the loss falls.
    const rows = path.join(dir, 'conversations.jsonl');
    fs.writeFileSync(rows, [messages, [{ role: 'user', content: '2, 5, 7 -> 17' }, { role: 'assistant', content: '2+5' }, { role: 'user', content: 'not 17' }, { role: 'assistant', content: '2*5+7' }]].map((m) => JSON.stringify({ data_source: 'countdown', prompt: m.slice(0, 1), reward_model: { ground_truth: { numbers: [1], target: 1 } }, messages: m, ...(m.some((x) => x.role === 'tool') ? { tools: ['calculator'] } : {}) })).join('\n') + '\n');
    const config = (await createHost(file, { overrides: [`data.train_files=${rows}`, 'data.val_files=null', 'sft.messages_key=messages', 'sft.total_steps=30', 'sft.batch_size=2', 'sft.lr=0.01', `sft.output_dir=${path.join(dir, 'sft')}`], skipEngine: true })).config;
    const lines: string[] = [];
    const result = await runSft(config, (line) => lines.push(line));
    const first = Number(/loss ([0-9.]+)/.exec(lines.find((l) => l.startsWith('sft step'))!)?.[1] ?? NaN);
    // From about ln(vocabulary) = 4.7 nats at random weights.
    expect(result.trainLoss, lines.join('\n')).to.be.below(1);
    expect(lines[0]).to.equal('sft: 2 examples, 30 steps of 2');
    expect(Number.isFinite(first)).to.equal(true);
  });

  it('the same conversations through flowrl serve, SGLang and vLLM routes (token in, per-turn seeds): the tokens local sampling gives, the server\'s log-probs the trainer\'s', async () => {
    const dir = tempDir();
    const file = await configFor(dir, 'grpo');
    const server = await startServer({ modelDir: path.join(dir, 'model') });
    const tokenizer = chatTokenizer();
    const sampling = { temperature: 1, topP: 1, topK: -1, greedy: false, maxNewTokens: 160, seed: 9 };
    const draw = async (overrides: string[]) => {
      const host = await createHost(file, { overrides, quiet: true });
      forceToolCalls(host.container.get(MultiTurn), tokenizer);
      const worker = host.container.get<Worker>(TOKENS.Worker);
      await worker.init();
      const dataset = host.container.get<{ init(): Promise<void>; train: never[] }>(TOKENS.Dataset);
      await dataset.init();
      const batch = await worker.generateSequences(promptBatch(dataset.train, 'x').repeat(2, true), sampling);
      return { worker, batch };
    };
    try {
      const local = await draw([]);
      for (const dialect of ['sglang', 'vllm']) {
      const remote = await draw([`actor_rollout_ref.rollout.name=${dialect}`, `actor_rollout_ref.rollout.server.urls=[${server.url}]`]);
      expect(Array.from(remote.batch.tensor('responses').data)).to.deep.equal(Array.from(local.batch.tensor('responses').data));
      expect(Array.from(remote.batch.tensor('response_mask').data)).to.deep.equal(Array.from(local.batch.tensor('response_mask').data));
      expect(remote.batch.column('num_turns')).to.deep.equal(local.batch.column('num_turns'));
      expect(Math.max(...remote.batch.column<number>('num_turns'))).to.be.at.least(4);
      // Every sampled token's engine log-prob against the trainer's (the forced turns are NaN and skipped; tool turns are 0 and masked).
      const served = remote.batch.tensor('rollout_log_probs').data;
      const trainer = (await remote.worker.computeLogProb(remote.batch)).logProbs;
      const mask = remote.batch.tensor('response_mask').data;
      let compared = 0;
      for (let i = 0; i < mask.length; i++) {
        if (!mask[i]) {
          expect(served[i], `position ${i}`).to.equal(0);
          continue;
        }
        if (Number.isNaN(served[i])) continue;
        expect(Math.abs(served[i] - trainer[i]), `position ${i}`).to.be.below(2e-3);
        compared += 1;
      }
      expect(compared, dialect).to.be.above(100);
      remote.batch.dispose();
      remote.worker.dispose();
      }
      local.batch.dispose();
      local.worker.dispose();
    } finally {
      await server.server.close();
    }
  });

  it('one step off on flowrl serve: conversations of step t+1 sampled while step t trains, one update stale', async () => {
    const dir = tempDir();
    const file = await configFor(dir, 'grpo', { trainer: { total_training_steps: 3, test_freq: -1, val_before_train: false } });
    const server = await startServer({ modelDir: path.join(dir, 'model') });
    try {
      const overrides = ['actor_rollout_ref.rollout.name=sglang', `actor_rollout_ref.rollout.server.urls=[${server.url}]`, 'actor_rollout_ref.rollout.server.max_staleness=1', 'trainer.one_step_off_policy=true'];
      const host = await createHost(file, { overrides, quiet: true });
      forceToolCalls(host.container.get(MultiTurn), chatTokenizer());
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      const metrics = readRunMetrics(path.join(dir, 'run'));
      expect(metrics.map((m) => m['rollout/staleness'])).to.deep.equal([0, 1, 1]);
      for (const m of metrics) expect(m['agent_loop/tool_calls/mean'], `step ${m.step}`).to.be.above(0);
    } finally {
      await server.server.close();
    }
  });

  for (const algorithm of ['grpo', 'flowrl']) {
    it(`${algorithm} trains on conversations with tool turns: the loop's metrics logged, every update finite`, async () => {
      const dir = tempDir();
      const dumps = path.join(dir, 'rollouts');
      const host = await createHost(await configFor(dir, algorithm, { trainer: { total_training_steps: 2, test_freq: 2, val_before_train: false, rollout_data_dir: dumps } }), { quiet: true });
      // Every row calls on its first turn (validation samples one per prompt, and half are tool rows).
      forceToolCalls(host.container.get(MultiTurn), chatTokenizer(), () => true);
      const trainer = host.container.get<Trainer>(TOKENS.Trainer);
      await trainer.fit();
      trainer.dispose();
      const metrics = readRunMetrics(path.join(dir, 'run'));
      expect(metrics).to.have.length(2);
      // The validation's conversations, logged and in the report with their tool answers.
      const generations = readValGenerations(path.join(dir, 'run'));
      expect(generations.map((g) => g.step)).to.deep.equal([2, 2, 2, 2]);
      const conversation = generations.find((g) => g.turns?.some((t) => t.role === 'tool'))!;
      expect(conversation.turns![0].content).to.contain('<tool_call>');
      expect(conversation.turns![1]).to.deep.equal({ role: 'tool', content: '24' });
      const html = await buildReport([path.join(dir, 'run')]);
      expect(html).to.contain('<div class="turn tool"><span>tool</span><pre>24</pre></div>');
      // trainer.rollout_data_dir: each step's samples as verl writes them, with the loss mask (0 on tool turns).
      expect(fs.readdirSync(dumps).sort()).to.deep.equal(['1.jsonl', '2.jsonl']);
      for (const step of [1, 2]) {
        const records = fs.readFileSync(path.join(dumps, `${step}.jsonl`), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { input: string; output: string; gts: unknown; score: number; step: number; response_ids: number[]; response_mask: number[] });
        expect(records.map((r) => r.step)).to.deep.equal(records.map(() => step));
        expect(mean(records.map((r) => r.score))).to.be.closeTo(metrics[step - 1]['critic/score/mean'], 1e-6);
        const tokenizer = chatTokenizer();
        for (const r of records) {
          expect(r.response_mask).to.have.length(r.response_ids.length);
          expect(r.output).to.equal(tokenizer.decode(r.response_ids, true));
          expect(r.gts).to.not.equal(null);
        }
        // A conversation with a tool turn: masked there, and the tool's answer is in its output.
        const called = records.find((r) => r.output.includes('<tool_response>'))!;
        expect(called.response_mask.some((m) => m === 0) && called.response_mask.some((m) => m === 1)).to.equal(true);
      }
      for (const m of metrics.filter((m) => m.step === 1)) {
        expect(m['num_turns/max'], `step ${m.step}`).to.be.at.least(4);
        expect(m['agent_loop/tool_calls/mean'], `step ${m.step}`).to.be.above(0);
        expect(Number.isFinite(m['actor/grad_norm']), `step ${m.step}`).to.equal(true);
      }
    });
  }

  it('config errors name the key: tool_agent without enable, enable without tools, a missing tool config, off-policy rows', async () => {
    const dir = tempDir();
    const file = await configFor(dir, 'grpo');
    const cases: [string[], string][] = [
      [['actor_rollout_ref.rollout.multi_turn.enable=false'], 'agent_name tool_agent needs actor_rollout_ref.rollout.multi_turn.enable: true'],
      [['actor_rollout_ref.rollout.multi_turn.enable=false', 'actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent'], 'default_agent_loop is tool_agent but actor_rollout_ref.rollout.multi_turn.enable is false'],
      [['actor_rollout_ref.rollout.multi_turn.tool_config_path=null'], 'multi_turn.enable needs multi_turn.tool_config_path'],
      [['actor_rollout_ref.rollout.multi_turn.tool_config_path=/nonexistent/tools.yaml'], '/nonexistent/tools.yaml: tool config not found'],
      [['actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=both'], "key 'actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side' is 'both'"],
      [['algorithm.name=flowrl', 'flowrl.replay_samples=1'], 'cannot be used with actor_rollout_ref.rollout.multi_turn.enable'],
      [['actor_rollout_ref.rollout.multi_turn.function_tool_path=tools.py'], 'function_tool_path names Python function tools'],
      [['actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true'], 'use_inference_chat_template: verl v0.9.0'],
      [['actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts=2'], 'num_repeat_rollouts is read nowhere in verl v0.9.0'],
    ];
    for (const [overrides, message] of cases) {
      await expectInputErrorAsync(
        (async () => {
          const h = await createHost(file, { overrides, skipEngine: true });
          await h.container.get<Trainer>(TOKENS.Trainer).fit();
        })(),
        message,
      );
    }
  });
});
