// Configuration: YAML files over defaults (core, then plugins), dotted command-line overrides on
// top, and validation whose messages name the file, the key and the allowed values.
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { InputError } from '../errors.js';
import { CORE_DEFAULTS, keySpecs, type ConfigTree, type ConfigValue, type CoreConfig, type KeySpec } from './defaults.js';

/** The resolved configuration: the core sections typed, plugin sections open. */
export type Config = CoreConfig & { [section: string]: unknown };


export function isTree(value: unknown): value is ConfigTree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Deep merge: objects merge key by key, everything else (lists included) is replaced. */
/** Keys that would reach Object.prototype through a plain object: never config keys. */
const FORBIDDEN_KEYS = new Set(['__proto__', 'prototype', 'constructor']);

function checkKey(key: string, where: string): void {
  if (FORBIDDEN_KEYS.has(key)) throw new InputError(`${where}: '${key}' cannot be a config key`);
}

export function mergeConfig(base: ConfigTree, over: ConfigTree): ConfigTree {
  const out: ConfigTree = { ...base };
  for (const [key, value] of Object.entries(over)) {
    checkKey(key, 'config');
    out[key] = isTree(value) && isTree(base[key]) ? mergeConfig(base[key] as ConfigTree, value) : structuredClone(value);
  }
  return out;
}

/** Reads a YAML (or JSON) config file into a tree; errors name the file. */
export function readConfigFile(file: string): ConfigTree {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    throw new InputError(`${file}: config file not found`);
  }
  let value: unknown;
  try {
    // Unknown tags (!!js/function, ...) stay plain strings; validation names any that land on a key.
    value = YAML.parse(text, { logLevel: 'error' });
  } catch (e) {
    throw new InputError(`${file}: not valid YAML (${(e as Error).message.split('\n')[0]})`);
  }
  if (value === null || value === undefined) return {};
  if (!isTree(value)) throw new InputError(`${file}: the top level must be a mapping of sections`);
  return value;
}

/** Parses `a.b.c=value` (value read as a YAML scalar or flow list). */
export function parseOverride(arg: string): { key: string; value: ConfigValue } {
  const eq = arg.indexOf('=');
  if (eq <= 0) throw new InputError(`override '${arg}' must look like section.key=value`);
  const key = arg.slice(0, eq).trim();
  // '/' for data_source names under reward_model.reward_kwargs (openai/gsm8k).
  if (!/^[A-Za-z0-9_./-]+$/.test(key)) throw new InputError(`override '${arg}': '${key}' is not a dotted key`);
  for (const part of key.split('.')) checkKey(part, `override '${arg}'`);
  const raw = arg.slice(eq + 1);
  let value: ConfigValue;
  try {
    value = raw === '' ? '' : (YAML.parse(raw, { logLevel: 'error' }) as ConfigValue);
  } catch {
    value = raw;
  }
  return { key, value };
}

export function setPath(tree: ConfigTree, key: string, value: ConfigValue): void {
  const parts = key.split('.');
  for (const part of parts) checkKey(part, `key '${key}'`);
  let node = tree;
  for (const part of parts.slice(0, -1)) {
    if (!isTree(node[part])) node[part] = {};
    node = node[part] as ConfigTree;
  }
  node[parts[parts.length - 1]] = value;
}

export function getPath(tree: unknown, key: string): unknown {
  let node = tree;
  for (const part of key.split('.')) {
    if (!isTree(node)) return undefined;
    node = node[part];
  }
  return node;
}

function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const next = Math.min(row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = row[j];
      row[j] = next;
    }
  }
  return row[b.length];
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (isTree(value)) return 'a mapping';
  return `${typeof value} ${JSON.stringify(value)}`;
}

/**
 * Checks `tree` against `schema` (the merged defaults) and `specs` (each key's rules, the core's
 * and the plugins'): every key must exist in the schema with the same type, and hold what its spec
 * allows (choices, ranges, nullable types). `where` names the source in messages.
 */
export function validateConfig(tree: ConfigTree, schema: ConfigTree, where: string, prefix = '', specs: Map<string, KeySpec> = CORE_KEY_SPECS): void {
  for (const [key, value] of Object.entries(tree)) {
    const dotted = prefix + key;
    if (!(key in schema)) {
      const near = Object.keys(schema).filter((k) => editDistance(k, key) <= 2);
      const hint = near.length ? `; did you mean '${prefix}${near[0]}'?` : prefix ? `; keys here: ${Object.keys(schema).join(', ')}` : '';
      throw new InputError(`${where}: unknown key '${dotted}'${hint}`);
    }
    const spec = specs.get(dotted);
    if (spec?.open) {
      if (!isTree(value)) throw new InputError(`${where}: key '${dotted}' must be a mapping; got ${typeName(value)}`);
      continue;
    }
    const expected = schema[key];
    const bad = (want: string) => new InputError(`${where}: key '${dotted}' must be ${want}; got ${typeName(value)}`);
    if (isTree(expected)) {
      if (!isTree(value)) throw bad('a mapping');
      validateConfig(value, expected, where, `${dotted}.`, specs);
      continue;
    }
    if (spec?.autoOrCount) {
      if (value !== 'auto' && !(typeof value === 'number' && Number.isInteger(value) && value >= 1)) throw bad("'auto' or a whole number >= 1");
      continue;
    }
    if (spec?.positiveOrNull) {
      if (value !== null && !(typeof value === 'number' && Number.isFinite(value) && value > 0)) throw bad('a number > 0 or null');
      continue;
    }
    if (spec?.stringOrList || spec?.nullable === 'string-or-list') {
      const ok = value === null || typeof value === 'string' || (Array.isArray(value) && value.every((v) => typeof v === 'string'));
      if (!ok) throw bad('a path or a list of paths');
      continue;
    }
    if (spec?.nullable === 'string-list' || spec?.nullable === 'number-list') {
      const element = spec.nullable === 'string-list' ? 'string' : 'number';
      const ok = value === null || (Array.isArray(value) && value.every((v) => typeof v === element && (element === 'string' || Number.isFinite(v))));
      if (!ok) throw bad(`a list of ${element}s or null`);
      continue;
    }
    if (spec?.numberOrString) {
      const ok = typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value)) || (value === null && spec.nullable);
      if (!ok) throw bad(spec.nullable ? 'a number, a string or null' : 'a number or a string');
      continue;
    }
    if (spec?.positiveInteger && value !== null && !(typeof value === 'number' && Number.isInteger(value) && value >= 1)) {
      throw bad(expected === null ? 'a number or null (a whole number >= 1)' : 'a number (a whole number >= 1)');
    }
    // A nullable key with a non-null default (clip_ratio_low: 0.2, or null for clip_ratio).
    if (value === null && spec?.nullable) continue;
    if (expected === null) {
      const want = spec?.nullable;
      if (value !== null && want && typeof value !== want) throw bad(`a ${want} or null`);
      if (typeof value === 'number' && spec) checkRange(spec, value, bad);
      if (typeof value === 'string' && spec?.choices && !spec.choices.includes(value)) {
        throw new InputError(`${where}: key '${dotted}' is '${value}'; allowed: ${spec.choices.join(', ')} (or null)`);
      }
      continue;
    }
    if (Array.isArray(expected)) {
      if (!Array.isArray(value)) throw bad('a list');
      const elementType = expected.length ? typeof expected[0] : undefined;
      if (elementType && value.some((v) => typeof v !== elementType)) throw bad(`a list of ${elementType}s`);
      continue;
    }
    if (typeof value !== typeof expected) throw bad(`a ${typeof expected}`);
    if (typeof value === 'number' && spec) checkRange(spec, value, bad);
    const choices = spec?.choices;
    if (choices && !choices.includes(value as string)) {
      throw new InputError(`${where}: key '${dotted}' is '${String(value)}'; allowed: ${choices.join(', ')}`);
    }
  }
}

/** A number against its spec's integer, min and max rules. */
function checkRange(spec: KeySpec, value: number, bad: (want: string) => InputError): void {
  const ok =
    Number.isFinite(value) &&
    (!spec.integer || Number.isInteger(value)) &&
    (spec.min === undefined || (spec.exclusiveMin ? value > spec.min : value >= spec.min)) &&
    (spec.max === undefined || (spec.exclusiveMax ? value < spec.max : value <= spec.max));
  if (ok) return;
  const kind = spec.integer ? 'a whole number' : 'a number';
  if (spec.min !== undefined && spec.max !== undefined) throw bad(`${kind} in ${spec.exclusiveMin ? '(' : '['}${spec.min}, ${spec.max}${spec.exclusiveMax ? ')' : ']'}`);
  const bound = spec.min !== undefined ? `${spec.exclusiveMin ? '>' : '>='} ${spec.min}` : spec.max !== undefined ? `${spec.exclusiveMax ? '<' : '<='} ${spec.max}` : '';
  throw bad(bound ? `${kind} ${bound}` : kind);
}

/**
 * Input paths, which a config file gives relative to its own directory (so an example runs from any
 * working directory). Outputs (trainer.default_local_dir, sft.output_dir) and command-line
 * overrides stay relative to the working directory.
 */
export const INPUT_PATH_KEYS = [
  'data.train_files',
  'data.val_files',
  'actor_rollout_ref.model.path',
  'actor_rollout_ref.model.tokenizer_path',
  'actor_rollout_ref.model.lora_adapter_path',
  'actor_rollout_ref.ref.model_path',
  'critic.model.path',
  'custom_reward_function.path',
  'sft.init_config',
  'actor_rollout_ref.rollout.multi_turn.tool_config_path',
];

/** Rewrites the input paths of a tree relative to `baseDir` (a config file's directory, or the working directory). */
export function resolveInputPaths(tree: ConfigTree, baseDir: string, keys: readonly string[] = INPUT_PATH_KEYS): ConfigTree {
  const out = structuredClone(tree);
  const resolve = (p: ConfigValue) => (typeof p === 'string' && p !== '' ? path.resolve(baseDir, p) : p);
  for (const key of keys) {
    const value = getPath(out, key) as ConfigValue | undefined;
    if (value === undefined || value === null) continue;
    setPath(out, key, Array.isArray(value) ? value.map(resolve) : resolve(value));
  }
  return out;
}

/** The core keys' rules (CORE_SPEC), by dotted key. */
const CORE_KEY_SPECS = keySpecs();

export interface ConfigLayers {
  /** Defaults contributed by plugins, in load order (merged over the core defaults), with the rules their manifests declare. */
  pluginDefaults?: { source: string; defaults: ConfigTree; inputPaths?: string[]; specs?: Map<string, KeySpec> }[];
  /** The user's file, already read. */
  user: ConfigTree;
  userFile: string;
  /** Dotted overrides from the command line. */
  overrides?: string[];
}

/**
 * The name this project once gave the policy loss, `actor_rollout_ref.actor.policy_loss: NAME`, read
 * as verl's spelling `actor_rollout_ref.actor.policy_loss.loss_mode: NAME` (a copy; `tree` is kept).
 */
function policyLossSpelling(tree: ConfigTree): ConfigTree {
  const actor = getPath(tree, 'actor_rollout_ref.actor');
  if (!isTree(actor) || typeof actor.policy_loss !== 'string') return tree;
  const out = structuredClone(tree);
  setPath(out, 'actor_rollout_ref.actor.policy_loss', { loss_mode: actor.policy_loss });
  return out;
}

/** Merges defaults < plugin defaults < user file < overrides, validating each layer. */
export function resolveConfig(layers: ConfigLayers): Config {
  let schema = structuredClone(CORE_DEFAULTS) as unknown as ConfigTree;
  const specs = new Map(CORE_KEY_SPECS);
  for (const { source, defaults, specs: declared } of layers.pluginDefaults ?? []) {
    validateNewSections(defaults, schema, source);
    schema = mergeConfig(schema, defaults);
    for (const [key, spec] of declared ?? []) specs.set(key, spec);
  }
  const user = policyLossSpelling(layers.user);
  validateConfig(user, schema, layers.userFile, '', specs);
  const pluginPaths = (layers.pluginDefaults ?? []).flatMap((p) => p.inputPaths ?? []);
  let tree = mergeConfig(schema, resolveInputPaths(user, path.dirname(path.resolve(layers.userFile)), [...INPUT_PATH_KEYS, ...pluginPaths]));
  let overrideTree: ConfigTree = {};
  for (const arg of layers.overrides ?? []) {
    const { key, value } = parseOverride(arg);
    setPath(overrideTree, key, value);
  }
  overrideTree = policyLossSpelling(overrideTree);
  validateConfig(overrideTree, schema, 'command line', '', specs);
  // A plugin's input paths are made absolute here, since writeConfig knows only the core's.
  tree = mergeConfig(tree, resolveInputPaths(overrideTree, process.cwd(), pluginPaths));
  const config = tree as unknown as Config;
  config.trainer.default_local_dir ??= path.join('runs', config.trainer.experiment_name);
  return config;
}

/** A plugin may add sections and keys but not change the type of a core key. */
function validateNewSections(defaults: ConfigTree, schema: ConfigTree, source: string): void {
  const walk = (node: ConfigTree, base: ConfigValue | undefined, prefix: string) => {
    for (const [key, value] of Object.entries(node)) {
      const existing = isTree(base) ? base[key] : undefined;
      if (existing === undefined) continue;
      if (isTree(value)) walk(value, existing, `${prefix}${key}.`);
      else if (existing !== null && value !== null && typeof existing !== typeof value) {
        throw new InputError(`${source}: default for '${prefix}${key}' must be a ${typeof existing}; got ${typeName(value)}`);
      }
    }
  };
  walk(defaults, schema, '');
}

/**
 * Writes the resolved config as YAML (the run directory's record of what ran), with input paths
 * absolute so that reading it back from anywhere means the same files.
 */
export function writeConfig(file: string, config: Config): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tree = structuredClone(config) as unknown as ConfigTree;
  const absolute = (p: ConfigValue) => (typeof p === 'string' && p !== '' ? path.resolve(p) : p);
  for (const key of INPUT_PATH_KEYS) {
    const value = getPath(tree, key) as ConfigValue | undefined;
    if (value !== undefined && value !== null) setPath(tree, key, Array.isArray(value) ? value.map(absolute) : absolute(value));
  }
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, YAML.stringify(tree));
  fs.renameSync(tmp, file);
}
