// The run's multi-turn setup (actor_rollout_ref.rollout.multi_turn and .agent): which rows are
// conversations with tools, the tools of multi_turn.tool_config_path, and the rollout of a prompt
// batch through the agent loop with any sampler that continues token ids (local sampling here).
import { randomUUID } from 'node:crypto';
import { inject, injectable, optional } from 'inversify';
import { Batch } from '../batch.js';
import type { Config } from '../config/load.js';
import type { AgentRouting, Metrics } from '../contracts/index.js';
import { InputError } from '../errors.js';
import type { ChatMessage, TextTokenizer } from '../model/tokenizer.js';
import { codeSandboxLimits } from '../rewards/code.js';
import { SandboxProcess } from '../rewards/sandbox-process.js';
import { TOKENS } from '../tokens.js';
import { ToolRegistry } from '../tools/registry.js';
import type { Tool } from '../tools/tool.js';
import { sequencesFromSamples } from '../workers/sequences.js';
import { runAgentLoop, ToolTurnRenderer, type AgentRow, type Trajectory, type TurnSampler } from './agent-loop.js';

export const AGENT_LOOPS = ['single_turn_agent', 'tool_agent'] as const;
export type AgentName = (typeof AGENT_LOOPS)[number];

/** The multi-turn setup of a run: agent routing for the dataset, tools, and rollouts through the agent loop. */
@injectable()
export class MultiTurn implements AgentRouting {
  private loaded?: { tools: Map<string, Tool>; renderer: ToolTurnRenderer };
  private rollouts = 0;
  private readonly runId = randomUUID().slice(0, 8);

  constructor(
    @inject(TOKENS.Config) private readonly config: Config,
    @inject(TOKENS.Tokenizer) private readonly tokenizer: TextTokenizer,
    @inject(TOKENS.ToolRegistry) @optional() private readonly registry: ToolRegistry = new ToolRegistry(),
  ) {
    const { multi_turn: mt, agent } = config.actor_rollout_ref.rollout;
    if (agent.default_agent_loop === 'tool_agent' && !mt.enable) throw new InputError("actor_rollout_ref.rollout.agent.default_agent_loop is tool_agent but actor_rollout_ref.rollout.multi_turn.enable is false; set it true");
    if (mt.enable && !mt.tool_config_path) throw new InputError('actor_rollout_ref.rollout.multi_turn.enable needs multi_turn.tool_config_path (the tools the policy may call)');
    // verl's keys that do nothing in its agent loop, or that name Python code: refused rather than ignored.
    const key = (k: string) => `actor_rollout_ref.rollout.multi_turn.${k}`;
    if (mt.function_tool_path !== null) throw new InputError(`${key('function_tool_path')} names Python function tools (verl's); register a tool class from a plugin (docs/multi-turn.md, "Writing a tool") and list it in tool_config_path`);
    if (mt.use_inference_chat_template) throw new InputError(`${key('use_inference_chat_template')}: verl v0.9.0's agent loop never reads it and trains on the sampled ids, as this host does; remove it`);
    if (mt.num_repeat_rollouts !== null) throw new InputError(`${key('num_repeat_rollouts')} is read nowhere in verl v0.9.0; set actor_rollout_ref.rollout.n for samples per prompt`);
  }

  get enabled(): boolean {
    return this.config.actor_rollout_ref.rollout.multi_turn.enable;
  }

  /** The agent of a data row: its agent_name, else agent.default_agent_loop; `where` names the row in errors. */
  agentOf(agentName: string | undefined, where: string): AgentName {
    const name = agentName ?? this.config.actor_rollout_ref.rollout.agent.default_agent_loop;
    if (!(AGENT_LOOPS as readonly string[]).includes(name)) throw new InputError(`${where}: agent_name '${name}' is not an agent loop (${AGENT_LOOPS.join(', ')})`);
    if (name === 'tool_agent' && !this.enabled) throw new InputError(`${where}: agent_name tool_agent needs actor_rollout_ref.rollout.multi_turn.enable: true`);
    return name as AgentName;
  }

  /** The tools and tool-turn renderer, loaded on first use (a bad tool config is found when the data loads). */
  private setup(): { tools: Map<string, Tool>; renderer: ToolTurnRenderer } {
    if (this.loaded) return this.loaded;
    const code = this.config.reward_model.code;
    const tools = this.registry.load(this.config.actor_rollout_ref.rollout.multi_turn.tool_config_path!, {
      codeSandbox: (o) => new SandboxProcess({ limits: { ...codeSandboxLimits(code), ...(o.wallSeconds ? { wallSeconds: o.wallSeconds, cpuSeconds: Math.ceil(o.wallSeconds) } : {}), ...(o.memoryMb ? { memoryMb: o.memoryMb } : {}) }, concurrency: code.concurrency ?? undefined }),
    });
    this.loaded = { tools, renderer: new ToolTurnRenderer(this.tokenizer, [...tools.values()].map((t) => t.schema)) };
    return this.loaded;
  }

  /** A tool_agent row's prompt text: the chat template with the schemas of the tools it may call. */
  promptText(messages: ChatMessage[], toolSelection?: string[]): string {
    return this.setup().renderer.promptText(messages, toolSelection);
  }

  /**
   * Rolls out a prompt batch (columns prompt_ids, messages, agent_name, extra_info): tool_agent rows
   * as conversations, single_turn_agent rows as one turn, all sampled together turn by turn. The
   * batch has each row's response_mask (0 on tool turns), num_turns and extra_info with
   * tool_rewards and num_turns (as verl hands the scorer), and the loop's metrics in meta.
   */
  async rollOut(prompts: Batch, sample: TurnSampler, responseLength: number, padId: number): Promise<Batch> {
    const { tools, renderer } = this.setup();
    const promptIds = prompts.column<number[]>('prompt_ids');
    const messages = prompts.column<ChatMessage[]>('messages');
    const agents = prompts.column<AgentName>('agent_name');
    const infos = prompts.column<Record<string, unknown>>('extra_info');
    const rows: AgentRow[] = promptIds.map((ids, b) => ({
      promptIds: ids,
      messages: messages[b],
      toolsKwargs: (infos[b]?.tools_kwargs as Record<string, unknown> | undefined) ?? {},
      toolSelection: Array.isArray(infos[b]?.tool_selection) ? (infos[b].tool_selection as string[]) : undefined,
    }));
    const settings = this.config.actor_rollout_ref.rollout.multi_turn;
    const toolRows = rows.flatMap((_, b) => (agents[b] === 'tool_agent' ? [b] : []));
    const singleRows = rows.flatMap((_, b) => (agents[b] === 'tool_agent' ? [] : [b]));
    const trajectories: Trajectory[] = new Array(rows.length);
    // Unique across runs and processes, as verl's uuid instance ids are.
    const instancePrefix = `${this.runId}-r${this.rollouts++}`;
    const loop = (which: number[], limits: typeof settings) =>
      runAgentLoop(
        which.map((b) => rows[b]),
        { sample: (contexts, max, turn, active) => sample(contexts, max, turn, active.map((i) => which[i])), tokenizer: this.tokenizer, renderer, tools, settings: limits, responseLength, instancePrefix },
      ).then((out) => out.forEach((t, i) => (trajectories[which[i]] = t)));
    // One policy turn for single_turn_agent rows (the template's own format, no tool parsing).
    await Promise.all([toolRows.length ? loop(toolRows, settings) : undefined, singleRows.length ? loop(singleRows, { ...settings, max_assistant_turns: 1, tokenization_sanity_check_mode: 'disable' }) : undefined]);
    const out = prompts.select([]);
    const packed = sequencesFromSamples(promptIds, trajectories.map((t) => t.responseIds), responseLength, padId, trajectories.map((t) => t.responseMask));
    for (const [name, tensor] of Object.entries(packed)) out.set(name, tensor);
    const numTurns = trajectories.map((t) => t.assistantTurns + t.userTurns + 1);
    out.setColumn('num_turns', numTurns);
    out.setColumn('turns', trajectories.map((t) => t.turns));
    out.setColumn('extra_info', infos.map((info, b) => ({ ...info, tool_rewards: trajectories[b].toolRewards, num_turns: numTurns[b] })));
    if (trajectories.every((t) => t.logProbs)) {
      const logProbs = new Float32Array(rows.length * responseLength);
      trajectories.forEach((t, b) => logProbs.set(t.logProbs!.slice(0, responseLength), b * responseLength));
      out.set('rollout_log_probs', { shape: [rows.length, responseLength], data: logProbs });
    }
    out.meta = { metrics: agentLoopMetrics(trajectories, toolRows, settings.tokenization_sanity_check_mode !== 'disable') };
    return out;
  }
}

/** verl's num_turns/{min,max,mean}, and per-trajectory means of the tool counts and the tools' own metrics (over tool_agent rows). */
function agentLoopMetrics(trajectories: Trajectory[], toolRows: number[], sanityChecked: boolean): Metrics {
  const turns = trajectories.map((t) => t.assistantTurns + t.userTurns + 1);
  const metrics: Metrics = { 'num_turns/min': Math.min(...turns), 'num_turns/max': Math.max(...turns), 'num_turns/mean': turns.reduce((a, b) => a + b, 0) / turns.length };
  if (!toolRows.length) return metrics;
  const mean = (f: (t: Trajectory) => number) => toolRows.reduce((s, b) => s + f(trajectories[b]), 0) / toolRows.length;
  return {
    ...metrics,
    'agent_loop/tool_calls/mean': mean((t) => t.toolCalls),
    'agent_loop/tool_failures/mean': mean((t) => t.toolFailures),
    'agent_loop/tool_calls_dropped/mean': mean((t) => t.toolCallsDropped),
    'agent_loop/tool_responses_truncated/mean': mean((t) => t.toolResponsesTruncated),
    ...(sanityChecked ? { 'agent_loop/tokenization_mismatch': mean((t) => Number(t.tokenizationMismatch)) } : {}),
    ...Object.fromEntries([...new Set(toolRows.flatMap((b) => Object.keys(trajectories[b].toolMetrics)))].map((key) => [`agent_loop/tool/${key}/mean`, mean((t) => t.toolMetrics[key] ?? 0)])),
  };
}
