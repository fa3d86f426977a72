// The two tools the host ships: a calculator (exact rational arithmetic, the countdown scorer's own
// evaluator) and a code interpreter (Python in the project's sandbox, as verl v0.7.1's
// SandboxFusionTool was before v0.8.0 removed its built-in tools).
import { evaluateExpression } from '../rewards/countdown.js';
import type { ProgramSandbox } from '../rewards/sandbox.js';
import { StatelessTool, type FunctionToolSchema, type ToolResult } from './tool.js';

export const CALCULATOR_SCHEMA: FunctionToolSchema = {
  type: 'function',
  function: {
    name: 'calculator',
    description: 'Evaluates an arithmetic expression exactly: whole numbers, + - * /, parentheses. Answers with the value (a fraction when it is not whole).',
    parameters: { type: 'object', properties: { expression: { type: 'string', description: 'e.g. (9-3)*4/6' } }, required: ['expression'] },
  },
};

export const CODE_INTERPRETER_SCHEMA: FunctionToolSchema = {
  type: 'function',
  function: {
    name: 'code_interpreter',
    description: 'Runs a Python program and answers with what it printed (stdout, then stderr).',
    parameters: { type: 'object', properties: { code: { type: 'string', description: 'the program' } }, required: ['code'] },
  },
};

/** A required string argument, or an error the policy sees. */
function stringArgument(args: Record<string, unknown>, name: string, tool: string): string {
  const value = args[name];
  if (typeof value !== 'string') throw new Error(`${tool} needs a string argument '${name}'${value === undefined ? '' : `, got ${typeof value}`}`);
  return value;
}

export class CalculatorTool extends StatelessTool {
  async execute(_instance: string, args: Record<string, unknown>): Promise<ToolResult> {
    const expression = stringArgument(args, 'expression', this.name);
    const result = evaluateExpression(expression);
    if (!result) return { text: 'Error: not an arithmetic expression over whole numbers with + - * / and parentheses, or a division by zero', metrics: { calculator_errors: 1 } };
    const { numerator, denominator } = result.fraction;
    return { text: denominator === 1n ? `${numerator}` : `${numerator}/${denominator}` };
  }
}

export class CodeInterpreterTool extends StatelessTool {
  /** The sandbox stops every program at its wall limit; waiting for a free slot is not a hang. */
  readonly timeLimited = true;

  constructor(
    schema: FunctionToolSchema,
    private readonly sandbox: ProgramSandbox,
  ) {
    super(schema);
  }

  async execute(_instance: string, args: Record<string, unknown>): Promise<ToolResult> {
    const code = stringArgument(args, 'code', this.name);
    const run = await this.sandbox.run('python', code);
    if (run.status === 'sandbox_error') throw new Error(`the sandbox failed to start: ${run.stderr.trim().slice(0, 200)}`);
    const output = run.stdout + run.stderr;
    if (run.status === 'exited') return { text: output || `(no output; exit code ${run.exitCode})`, metrics: { code_exit_nonzero: run.exitCode === 0 ? 0 : 1 } };
    // timeout, output_limit, signalled: say which, after what it printed.
    return { text: `${output}${output && !output.endsWith('\n') ? '\n' : ''}(stopped: ${run.status})`, metrics: { code_stopped: 1 } };
  }
}

/** Reads a positive number from a tool's config, or its default. */
export function positiveSetting(config: Record<string, unknown>, key: string, fallback: number, where: string): number {
  const value = config[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw new Error(`${where}: config.${key} must be a number > 0, got ${JSON.stringify(value)}`);
  return value;
}
