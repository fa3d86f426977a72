// Tool classes by name (verl's tool_registry: a tool config file names a class and gives its config
// and schema), and the loading of that file (multi_turn.tool_config_path). The host registers the
// built-ins; plugins register theirs through PluginContext.registries.tools. Two registrations of one
// class name are an error naming both providers.
import fs from 'node:fs';
import YAML from 'yaml';
import { InputError } from '../errors.js';
import { CALCULATOR_SCHEMA, CalculatorTool, CODE_INTERPRETER_SCHEMA, CodeInterpreterTool, positiveSetting } from './builtin-tools.js';
import type { FunctionToolSchema, Tool, ToolContext, ToolFactory } from './tool.js';

interface ToolClass {
  factory: ToolFactory;
  provider: string;
}

/** Tool classes by the names tool config files give (class_name); built-ins Calculator and CodeInterpreter. */
export class ToolRegistry {
  private readonly classes = new Map<string, ToolClass>();
  /** Who registrations come from now: 'core', or the plugin whose entry is running (the host sets it). */
  provider = 'core';

  constructor() {
    this.register('Calculator', (_config, schema) => new CalculatorTool(schema ?? CALCULATOR_SCHEMA));
    this.register('CodeInterpreter', (config, schema, context) => {
      const where = 'tool CodeInterpreter';
      // A misspelt key would otherwise leave its default in force, silently.
      const unknown = Object.keys(config).filter((key) => key !== 'timeout_s' && key !== 'memory_limit_mb');
      if (unknown.length) throw new Error(`${where}: unknown config key${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `'${k}'`).join(', ')} (known: timeout_s, memory_limit_mb)`);
      const sandbox = context.codeSandbox({
        wallSeconds: config.timeout_s === undefined ? undefined : positiveSetting(config, 'timeout_s', 10, where),
        memoryMb: config.memory_limit_mb === undefined ? undefined : positiveSetting(config, 'memory_limit_mb', 1024, where),
      });
      return new CodeInterpreterTool(schema ?? CODE_INTERPRETER_SCHEMA, sandbox);
    });
  }

  register(className: string, factory: ToolFactory): void {
    const known = this.classes.get(className);
    if (known) throw new InputError(`tool class '${className}' is registered twice: by ${known.provider} and by ${this.provider}`);
    this.classes.set(className, { factory, provider: this.provider });
  }

  has(className: string): boolean {
    return this.classes.has(className);
  }

  /** 'Calculator (core), ...' for listings. */
  describe(): string {
    return [...this.classes].map(([name, c]) => `${name} (${c.provider})`).join(', ');
  }

  /** Builds the tools a tool config file lists, by their schemas' function names. */
  load(file: string, context: ToolContext): Map<string, Tool> {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch {
      throw new InputError(`${file}: tool config not found (actor_rollout_ref.rollout.multi_turn.tool_config_path)`);
    }
    let parsed: unknown;
    try {
      parsed = YAML.parse(text);
    } catch (e) {
      throw new InputError(`${file}: not valid YAML (${(e as Error).message.split('\n')[0]})`);
    }
    const entries = (parsed as { tools?: unknown } | null)?.tools;
    if (!Array.isArray(entries) || entries.length === 0) throw new InputError(`${file}: key 'tools' must be a non-empty list of {class_name, config, tool_schema}`);
    const tools = new Map<string, Tool>();
    entries.forEach((entry, i) => {
      const where = `${file}: tools[${i}]`;
      if (!isObject(entry)) throw new InputError(`${where} must be a mapping with class_name`);
      const className = entry.class_name;
      if (typeof className !== 'string') throw new InputError(`${where}.class_name must be a string`);
      const toolClass = this.classes.get(className);
      if (!toolClass) throw new InputError(`${where}.class_name '${className}' is not a registered tool class (registered: ${this.describe()})`);
      const config = entry.config ?? {};
      if (!isObject(config)) throw new InputError(`${where}.config must be a mapping`);
      const { type = 'native', ...settings } = config;
      // verl v0.9.0 knows only native tools (its MCP type was removed).
      if (type !== 'native') throw new InputError(`${where}.config.type is ${JSON.stringify(type)}; only 'native' is supported`);
      const schema = entry.tool_schema === undefined || entry.tool_schema === null ? undefined : checkSchema(entry.tool_schema, `${where}.tool_schema`);
      let tool: Tool;
      try {
        tool = toolClass.factory(settings, schema, context);
      } catch (e) {
        if (e instanceof InputError) throw e;
        throw new InputError(`${where} (${className}): ${(e as Error).message}`);
      }
      if (tools.has(tool.name)) throw new InputError(`${where}: a second tool named '${tool.name}'; each function name must be unique`);
      tools.set(tool.name, tool);
    });
    return tools;
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An OpenAI function schema as verl's OpenAIFunctionToolSchema reads it. */
export function checkSchema(value: unknown, where: string): FunctionToolSchema {
  if (!isObject(value) || value.type !== 'function') throw new InputError(`${where}.type must be 'function'`);
  const fn = value.function;
  if (!isObject(fn) || typeof fn.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(fn.name)) throw new InputError(`${where}.function.name must be 1-64 letters, digits, _ or -`);
  if (fn.description !== undefined && typeof fn.description !== 'string') throw new InputError(`${where}.function.description must be a string`);
  const parameters = fn.parameters ?? { type: 'object', properties: {} };
  if (!isObject(parameters) || parameters.type !== 'object' || !isObject(parameters.properties ?? {})) throw new InputError(`${where}.function.parameters must be {type: object, properties: {...}}`);
  const required = parameters.required;
  if (required !== undefined && !(Array.isArray(required) && required.every((r) => typeof r === 'string'))) throw new InputError(`${where}.function.parameters.required must be a list of names`);
  return value as unknown as FunctionToolSchema;
}
