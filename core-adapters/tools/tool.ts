// Tools a policy calls during multi-turn rollouts, in verl v0.9.0's terms (verl/tools/base_tool.py):
// a tool has an OpenAI function schema and a lifecycle per trajectory (create, execute per call,
// calc_reward, release). The agent loop (rollout/agent-loop.ts) creates an instance the first time a
// trajectory calls the tool and releases it when the trajectory ends. (verl v0.9.0 creates and
// releases one per call and never calls calc_reward; per trajectory is what its base class's
// instance ids are for, and what a stateful tool needs.)
import type { ProgramSandbox } from '../rewards/sandbox.js';

/** An OpenAI function-tool schema (verl's OpenAIFunctionToolSchema); it goes into the chat template's `tools`. */
export interface FunctionToolSchema {
  type: 'function';
  function: {
    name: string;
    description?: string;
    parameters: { type: 'object'; properties: Record<string, unknown>; required?: string[] };
  };
}

/** What one call returns: the text shown to the policy, and optionally a reward and metrics. */
export interface ToolResult {
  text: string;
  /** A per-call reward (verl's tool_reward_score); the rewards of a trajectory reach its scorer as extra_info.tool_rewards. */
  reward?: number;
  metrics?: Record<string, number>;
}

/** One tool (verl's BaseTool). Instances are keyed by an id the agent loop makes per trajectory. */
export interface Tool {
  readonly name: string;
  readonly schema: FunctionToolSchema;
  /**
   * true when a call ends on its own within the tool's own limit (the code interpreter's sandbox
   * wall time): multi_turn.tool_timeout_s, which would also count time spent queued, then does not
   * apply to execute.
   */
  readonly timeLimited?: boolean;
  /** Starts an instance for one trajectory, with the row's extra_info.tools_kwargs[name].create_kwargs. */
  create(instanceId: string, createKwargs: Record<string, unknown>): Promise<void>;
  /** Runs one call. A thrown error becomes a tool turn saying so; it never stops the rollout. */
  execute(instanceId: string, args: Record<string, unknown>): Promise<ToolResult>;
  /** A reward for the whole trajectory, asked for before release (added to extra_info.tool_rewards). */
  calcReward?(instanceId: string): Promise<number>;
  release(instanceId: string): Promise<void>;
}

/** What a tool class may use from the run. */
export interface ToolContext {
  /** A sandbox for programs: reward_model.code's limits, with a tool's own wall time and memory where it sets them. */
  codeSandbox(overrides: { wallSeconds?: number; memoryMb?: number }): ProgramSandbox;
}

/** Builds a tool from its entry in a tool config file: `config` (less `type`) and the schema, if the entry gives one. */
export type ToolFactory = (config: Record<string, unknown>, schema: FunctionToolSchema | undefined, context: ToolContext) => Tool;

/** A tool with no per-trajectory state: create and release do nothing. */
export abstract class StatelessTool implements Tool {
  constructor(readonly schema: FunctionToolSchema) {}

  get name(): string {
    return this.schema.function.name;
  }

  async create(): Promise<void> {}

  abstract execute(instanceId: string, args: Record<string, unknown>): Promise<ToolResult>;

  async release(): Promise<void> {}
}
