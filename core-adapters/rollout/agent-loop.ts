// Multi-turn rollouts with tools (verl v0.9.0's tool_agent loop, verl/experimental/agent_loop): the
// policy writes a turn; a hermes tool call in it runs; the tool's answer is appended as a tool turn
// rendered by the chat template; the policy goes on until a turn has no call, a turn limit is
// reached, or the response budget (data.max_response_length) is spent. Token in, token out: the
// trajectory is exactly the sampled ids and the tool turns' ids, and response_mask is 1 on sampled
// tokens only, so no loss, KL or entropy term reads a tool or template token.
import type { Config } from '../config/load.js';
import type { ChatMessage, TextTokenizer } from '../model/tokenizer.js';
import { InputError } from '../errors.js';
import { hermesTurnText, parseHermesCalls, type ParsedCall } from '../tools/hermes.js';
import type { FunctionToolSchema, Tool } from '../tools/tool.js';

export type MultiTurnSettings = Config['actor_rollout_ref']['rollout']['multi_turn'];

/** One row to roll out: its prompt ids and what the loop reads from the data row. */
export interface AgentRow {
  promptIds: number[];
  /** The row's prompt messages (the sanity check re-renders the whole conversation from them). */
  messages: ChatMessage[];
  /** extra_info.tools_kwargs: per tool name, {create_kwargs: {...}}. */
  toolsKwargs: Record<string, unknown>;
  /** extra_info.tool_selection: the tools this row may call (all when absent or empty, as verl). */
  toolSelection?: string[];
}

/**
 * One turn of sampling for several trajectories: each context is the whole conversation so far,
 * with its own token budget; `rows` are the trajectories' indices among the loop's rows (for
 * per-row random streams that do not depend on which rows are still running).
 */
export type TurnSampler = (contexts: number[][], maxNewTokens: number[], turn: number, rows: number[]) => Promise<SampledTurn>;

/** A turn's sampled ids per context, and the engine's log-probs of them when it reports any. */
export interface SampledTurn {
  tokens: number[][];
  logProbs?: number[][];
}

/** A finished trajectory. */
export interface Trajectory {
  /** Sampled and tool-turn ids after the prompt. */
  responseIds: number[];
  /** 1 where the policy sampled the token, 0 on tool and template tokens. */
  responseMask: number[];
  /** The engine's log-probs of the sampled tokens, 0 on tool turns (verl's placeholders); undefined when it reports none. */
  logProbs?: number[];
  assistantTurns: number;
  userTurns: number;
  /** Calls run, and of those the ones that failed (malformed, unknown tool, error, time-out). */
  toolCalls: number;
  toolFailures: number;
  /** Calls beyond max_parallel_calls in one turn, not run (as verl). */
  toolCallsDropped: number;
  /** Tool responses cut to max_tool_response_length. */
  toolResponsesTruncated: number;
  /** Per-call rewards, then each tool's calc_reward (verl passes these to the scorer as extra_info.tool_rewards). */
  toolRewards: number[];
  /** Sums of the metrics the tools returned with their answers, by name. */
  toolMetrics: Record<string, number>;
  /** The conversation after the prompt, for reports: assistant turns and tool answers as text. */
  turns: ChatMessage[];
  /** The whole conversation re-rendered by the template gives other tokens than were trained on (sanity check). */
  tokenizationMismatch: boolean;
}

/** Tool turns as the chat template renders them, cut to follow the policy's end-of-turn token. */
export class ToolTurnRenderer {
  /** What the template puts before any message on its own (e.g. Qwen's default system prompt). */
  private readonly systemPrefix: string;
  /** What follows the end-of-turn token the policy stops at (e.g. "\n"), which it never samples. */
  private readonly separator: string;

  constructor(
    private readonly tokenizer: TextTokenizer,
    private readonly tools: FunctionToolSchema[],
  ) {
    if (!tokenizer.hasChatTemplate) throw new InputError('actor_rollout_ref.rollout.multi_turn needs a tokenizer with a chat template (tool turns are rendered by it)');
    // verl's initialize_system_prompt: one user message rendered, less what a second one adds.
    const one = tokenizer.applyChatTemplate([{ role: 'user', content: '' }], false);
    const two = tokenizer.applyChatTemplate([{ role: 'user', content: '' }, { role: 'user', content: '' }], false);
    this.systemPrefix = one.slice(0, one.length - (two.length - one.length));
    // verl's initialize_turn_separator: what the template writes after an assistant turn's end token.
    const marker = 'TURN_END_MARKER';
    const rendered = tokenizer.applyChatTemplate([{ role: 'user', content: '' }, { role: 'assistant', content: marker }], false);
    const after = rendered.slice(rendered.lastIndexOf(marker) + marker.length);
    const eos = tokenizer.eosToken ?? '';
    // Closed by another token than eos (a base model's tokenizer): what follows the first token.
    this.separator = eos && after.includes(eos) ? after.slice(after.indexOf(eos) + eos.length) : tokenizer.decode(tokenizer.encode(after, false).slice(1), false);
    // Found now, not at the first tool call hours into a run: a template that refuses or drops tool
    // messages. Checked on the text: the probe need not be in the vocabulary.
    const probe = 'TOOL_ANSWER_PROBE';
    let text: string;
    try {
      text = this.turnText([{ role: 'tool', content: probe }]);
    } catch (e) {
      throw new InputError(`the chat template cannot render a tool message (role 'tool'): ${(e as Error).message}; multi-turn rollouts need a template with tool turns`);
    }
    if (!text.includes(probe)) throw new InputError("the chat template renders no text for a tool message (role 'tool'): the policy would never see the tools' answers; use a template with tool turns");
  }

  /** The ids appended after an assistant turn for its tool answers, ending with the next assistant turn's header. */
  toolTurnIds(answers: string[]): number[] {
    return this.turnIds(answers.map((content) => ({ role: 'tool', content })));
  }

  /** The ids of messages that follow an assistant turn (tool answers, a user's reply), ending with the next assistant turn's header. */
  turnIds(messages: ChatMessage[]): number[] {
    return this.tokenizer.encode(this.turnText(messages), false);
  }

  /** The text turnIds encodes. */
  private turnText(messages: ChatMessage[]): string {
    let text = this.tokenizer.applyChatTemplate(messages, true);
    if (this.systemPrefix && text.startsWith(this.systemPrefix)) text = text.slice(this.systemPrefix.length);
    return this.separator + text;
  }

  /**
   * A whole conversation as rollouts lay it out (multi-turn SFT): the messages before the first
   * assistant turn as the prompt (with `tools`, the row's schemas; none when absent, as verl's
   * multi-turn SFT); then each assistant turn as its text's ids and eos (loss 1), and the messages
   * between them as turnIds gives them (loss 0). `where` names the row in errors.
   */
  conversation(messages: ChatMessage[], where: string, tools?: FunctionToolSchema[]): { prompt: number[]; response: number[]; lossMask: number[] } {
    const first = messages.findIndex((m) => m.role === 'assistant');
    if (first <= 0) throw new InputError(`${where}: a conversation needs messages before its first assistant turn, and one`);
    if (messages.at(-1)!.role !== 'assistant') throw new InputError(`${where}: a conversation must end with an assistant turn (got '${messages.at(-1)!.role}')`);
    const eos = this.tokenizer.eosTokenId;
    if (eos === undefined) throw new InputError(`${where}: the tokenizer has no eos token to end the assistant's turns with`);
    const response: number[] = [];
    const lossMask: number[] = [];
    let between: ChatMessage[] = [];
    for (const message of messages.slice(first)) {
      if (message.role !== 'assistant') {
        between.push(message);
        continue;
      }
      if (between.length) {
        const ids = this.turnIds(between);
        response.push(...ids);
        lossMask.push(...ids.map(() => 0));
        between = [];
      }
      const ids = [...this.tokenizer.encode(this.assistantText(message), false), eos];
      response.push(...ids);
      lossMask.push(...ids.map(() => 1));
    }
    return { prompt: this.tokenizer.encode(this.tokenizer.applyChatTemplate(messages.slice(0, first), true, tools), false), response, lossMask };
  }

  /**
   * An assistant turn's text as the policy writes it after the turn's header: its content, and its
   * tool calls as the chat template renders them (Qwen2.5's layout when the template does not).
   */
  assistantText(message: ChatMessage): string {
    const calls = message.tool_calls ?? [];
    if (!calls.length) return message.content;
    const user = [{ role: 'user', content: '' }];
    const header = this.tokenizer.applyChatTemplate(user, true);
    const whole = this.tokenizer.applyChatTemplate([...user, message], false);
    const eos = this.tokenizer.eosToken;
    if (eos && whole.startsWith(header)) {
      const turn = whole.slice(header.length);
      const text = turn.includes(eos) ? turn.slice(0, turn.lastIndexOf(eos)) : turn;
      // A template that writes the calls: its text, exactly.
      if (calls.every((c) => text.includes(c.function.name))) return text;
    }
    return hermesTurnText(message.content, calls.map((c) => c.function));
  }

  /** The run's tools' schemas, for rows that name tools (multi-turn SFT). */
  get schemas(): FunctionToolSchema[] {
    return this.tools;
  }

  /** The schemas a row offers: those of `selection`, all when it is absent or empty. */
  private offered(selection?: string[]): FunctionToolSchema[] {
    return selection?.length ? this.tools.filter((t) => selection.includes(t.function.name)) : this.tools;
  }

  /** A prompt rendered with the tool schemas the row offers (the template's `tools`), ready for the first assistant turn. */
  promptText(messages: ChatMessage[], selection?: string[]): string {
    return this.tokenizer.applyChatTemplate(messages, true, this.offered(selection));
  }

  /** A whole conversation rendered at once, every turn closed, with the tools its prompt offered. */
  conversationText(messages: ChatMessage[], selection?: string[]): string {
    return this.tokenizer.applyChatTemplate(messages, false, this.offered(selection));
  }
}

/** verl's truncation of a tool answer to `limit` characters (code points, as Python counts them; never half a surrogate pair), with its markers. */
export function truncateToolText(text: string, limit: number, side: 'left' | 'middle' | 'right'): { text: string; truncated: boolean } {
  // UTF-16 units are at least the code points: a text that short needs no split into characters.
  if (text.length <= limit) return { text, truncated: false };
  const chars = Array.from(text);
  if (chars.length <= limit) return { text, truncated: false };
  const take = (from: number, to?: number) => chars.slice(from, to).join('');
  if (side === 'left') return { text: '(truncated)...' + take(chars.length - limit), truncated: true };
  if (side === 'right') return { text: take(0, limit) + '...(truncated)', truncated: true };
  const half = Math.floor(limit / 2);
  return { text: take(0, half) + '...(truncated)...' + take(chars.length - half), truncated: true };
}

interface Running {
  row: AgentRow;
  index: number;
  trajectory: Trajectory;
  /** Per tool, its instance for this trajectory once create has been asked for (one create even for parallel calls). */
  instances: Map<string, Promise<string>>;
  done: boolean;
}

/**
 * Rolls out every row to the end of its conversation, batching the rows still running into one
 * sampler call per turn. Tool calls of all rows in a turn run concurrently.
 */
export async function runAgentLoop(
  rows: AgentRow[],
  options: {
    sample: TurnSampler;
    tokenizer: TextTokenizer;
    renderer: ToolTurnRenderer;
    tools: Map<string, Tool>;
    settings: MultiTurnSettings;
    responseLength: number;
    /** Names the rows' tool instances (unique per call of runAgentLoop within a run). */
    instancePrefix: string;
  },
): Promise<Trajectory[]> {
  const { settings, responseLength: R } = options;
  const running: Running[] = rows.map((row, index) => ({
    row,
    index,
    instances: new Map(),
    done: false,
    trajectory: { responseIds: [], responseMask: [], assistantTurns: 0, userTurns: 0, toolCalls: 0, toolFailures: 0, toolCallsDropped: 0, toolResponsesTruncated: 0, toolRewards: [], toolMetrics: {}, turns: [], tokenizationMismatch: false },
  }));
  try {
    for (let turn = 0; ; turn++) {
      const active = running.filter((r) => !r.done);
      if (!active.length) break;
      const budgets = active.map((r) => R - r.trajectory.responseIds.length);
      const sampled = await options.sample(
        active.map((r) => [...r.row.promptIds, ...r.trajectory.responseIds]),
        budgets,
        turn,
        active.map((r) => r.index),
      );
      const calls: { run: Running; call: ParsedCall }[][] = [];
      active.forEach((run, i) => {
        const t = run.trajectory;
        const ids = sampled.tokens[i].slice(0, budgets[i]);
        if (sampled.logProbs) {
          // A short list would shift every later log-prob onto the wrong token.
          if (sampled.logProbs[i].length < ids.length) throw new Error(`the rollout engine returned ${sampled.logProbs[i].length} log-probs for ${ids.length} tokens`);
          (t.logProbs ??= new Array(t.responseIds.length).fill(0)).push(...sampled.logProbs[i].slice(0, ids.length));
        }
        t.responseIds.push(...ids);
        t.responseMask.push(...ids.map(() => 1));
        t.assistantTurns += 1;
        const text = options.tokenizer.decode(ids, false);
        t.turns.push({ role: 'assistant', content: options.tokenizer.decode(ids, true) });
        if (t.responseIds.length >= R || (settings.max_assistant_turns && t.assistantTurns >= settings.max_assistant_turns) || (settings.max_user_turns && t.userTurns >= settings.max_user_turns)) {
          run.done = true;
          return;
        }
        const parsed = parseHermesCalls(text).calls;
        if (!parsed.length) {
          run.done = true;
          return;
        }
        t.toolCallsDropped += Math.max(0, parsed.length - settings.max_parallel_calls);
        calls.push(parsed.slice(0, settings.max_parallel_calls).map((call) => ({ run, call })));
      });
      const answers = await Promise.all(calls.map((group) => Promise.all(group.map(({ run, call }) => callTool(run, call, options)))));
      calls.forEach((group, g) => {
        const run = group[0].run;
        const t = run.trajectory;
        const texts = answers[g].map((answer) => {
          const cut = truncateToolText(answer, settings.max_tool_response_length, settings.tool_response_truncate_side);
          if (cut.truncated) t.toolResponsesTruncated += 1;
          return cut.text;
        });
        const ids = options.renderer.toolTurnIds(texts);
        // A tool turn is kept only with room after it for the policy to answer (as verl).
        if (t.responseIds.length + ids.length >= R) {
          run.done = true;
          return;
        }
        t.responseIds.push(...ids);
        t.responseMask.push(...ids.map(() => 0));
        t.logProbs?.push(...ids.map(() => 0));
        t.userTurns += 1;
        texts.forEach((content) => t.turns.push({ role: 'tool', content }));
      });
    }
  } finally {
    await Promise.all(running.map((run) => releaseInstances(run, options.tools, settings.tool_timeout_s)));
  }
  if (settings.tokenization_sanity_check_mode !== 'disable') {
    for (const run of running) run.trajectory.tokenizationMismatch = !sameTokenization(run, options, settings.tokenization_sanity_check_mode);
  }
  return running.map((r) => r.trajectory);
}

/** `work`, or an error after `seconds` (the work itself cannot be stopped; its result is then ignored). */
async function within<T>(work: Promise<T>, seconds: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} timed out after ${seconds} s`)), seconds * 1000)));
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** One call's answer text; failures are answers too (verl's messages where verl has one). */
async function callTool(run: Running, call: ParsedCall, options: { tools: Map<string, Tool>; settings: MultiTurnSettings; instancePrefix: string }): Promise<string> {
  const t = run.trajectory;
  t.toolCalls += 1;
  const fail = (text: string) => {
    t.toolFailures += 1;
    return text;
  };
  if ('error' in call) return fail(call.error);
  const allowed = run.row.toolSelection?.length ? run.row.toolSelection : undefined;
  const tool = options.tools.get(call.name);
  if (!tool || (allowed && !allowed.includes(call.name))) {
    const available = [...options.tools.keys()].filter((name) => !allowed || allowed.includes(name));
    return fail(`Unknown function '${call.name}'. Available tools: [${available.map((n) => `'${n}'`).join(', ')}]`);
  }
  const seconds = options.settings.tool_timeout_s;
  try {
    let instance = run.instances.get(tool.name);
    if (!instance) {
      const id = `${options.instancePrefix}-${run.index}-${tool.name}`;
      const kwargs = (run.row.toolsKwargs[tool.name] as { create_kwargs?: Record<string, unknown> } | undefined)?.create_kwargs ?? {};
      instance = within(tool.create(id, kwargs), seconds, 'create').then(() => id);
      run.instances.set(tool.name, instance);
    }
    const id = await instance;
    const execution = tool.execute(id, call.arguments);
    const result = tool.timeLimited ? await execution : await within(execution, seconds, 'the call');
    if (typeof result?.text !== 'string') return fail(`Error executing tool '${tool.name}': it returned no text`);
    if (typeof result.reward === 'number' && Number.isFinite(result.reward)) t.toolRewards.push(result.reward);
    for (const [key, value] of Object.entries(result.metrics ?? {})) if (Number.isFinite(value)) t.toolMetrics[key] = (t.toolMetrics[key] ?? 0) + value;
    return result.text;
  } catch (e) {
    return fail(`Error executing tool '${tool.name}': ${(e as Error)?.message ?? String(e)}`);
  }
}

/** Each tool instance's trajectory reward (when the tool has one), then its release; failures and time-outs are counted, not thrown. */
async function releaseInstances(run: Running, tools: Map<string, Tool>, seconds: number): Promise<void> {
  for (const [name, instance] of run.instances) {
    const tool = tools.get(name)!;
    let id: string;
    try {
      id = await instance;
    } catch {
      continue; // create failed or timed out: nothing to release
    }
    try {
      if (tool.calcReward) {
        const reward = await within(tool.calcReward(id), seconds, 'calc_reward');
        if (Number.isFinite(reward)) run.trajectory.toolRewards.push(reward);
      }
    } catch {
      run.trajectory.toolFailures += 1;
    }
    try {
      await within(tool.release(id), seconds, 'release');
    } catch {
      run.trajectory.toolFailures += 1;
    }
  }
  run.instances.clear();
}

/**
 * verl's tokenization sanity check (its legacy multi-turn path; v0.9.0's agent loop has none): the
 * whole conversation rendered at once by the template must begin with the text of the ids trained
 * on (the template closes the last turn, which the ids may not). strict: exactly;
 * ignore_strippable: up to whitespace.
 */
function sameTokenization(run: Running, options: { tokenizer: TextTokenizer; renderer: ToolTurnRenderer }, mode: 'strict' | 'ignore_strippable'): boolean {
  // With the row's tool selection, as its prompt was rendered (all tools counted every such row a mismatch).
  const expected = options.renderer.conversationText([...run.row.messages, ...run.trajectory.turns], run.row.toolSelection);
  const actual = options.tokenizer.decode([...run.row.promptIds, ...run.trajectory.responseIds], false);
  const normal = (text: string) => (mode === 'ignore_strippable' ? text.replace(/\s+/g, '') : text);
  return normal(expected).startsWith(normal(actual));
}
