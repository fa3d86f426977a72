// plugin.json: what a plugin is, which host versions it supports, its entry module, the algorithms
// it contributes, the bindings it overrides and its config defaults.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import semver from 'semver';
import { defaultsOf, isKeySpec, type ConfigTree, type KeySpec } from '../config/defaults.js';
import { isTree } from '../config/load.js';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';

/** The host's package name: a plugins: entry naming it is this host's own plugin.json. */
const HOST_PACKAGE = 'flowrl';
import type { AlgorithmSpec } from './algorithms.js';

/** needs_reference_policy: a boolean, or {when: {dotted key: [values]}} with at least one key. */
function isReferenceNeed(v: unknown): boolean {
  if (typeof v === 'boolean') return true;
  if (!isTree(v) || Object.keys(v).length !== 1 || !isTree(v.when)) return false;
  const when = v.when;
  return Object.keys(when).length > 0 && Object.values(when).every((values) => Array.isArray(values) && values.length > 0);
}

/** A checked plugin.json: name, version, host range, entry, algorithms, overrides, defaults, commands. */
export interface PluginManifest {
  name: string;
  version: string;
  /** Supported host versions, a semver range such as ^0.1.0. */
  host: string;
  /** The compiled entry module (used when the host runs compiled). */
  entry: string;
  /** The TypeScript entry (used when the host runs from source, e.g. under tsx). */
  source?: string;
  algorithms: AlgorithmSpec[];
  /** Names of the host bindings the plugin may rebind (TOKENS keys). */
  overrides: string[];
  /** Plugins this one builds on: it loads after them and may replace what they bound. */
  extends: string[];
  defaults: ConfigTree;
  /** The rules of the plugin's keys, when its manifest declares them under `config` (as CORE_SPEC does the core's). */
  specs: Map<string, KeySpec>;
  /** Dotted config keys holding input paths (resolved relative to the config file that sets them). */
  inputPaths: string[];
  /** CLI subcommands the plugin contributes (run as `flowrl NAME CONFIG`), with their usage lines. */
  commands: { name: string; usage: string }[];
  description?: string;
  /** Absolute path of the plugin.json this came from. */
  file: string;
  /** The entry module the host imported (the build or the TypeScript source), once loaded. */
  loadedFrom?: string;
}

/** Finds plugin.json for a `plugins:` entry: a path (relative to the config file) or a package name. */
export function locateManifest(entry: string, baseDir: string): string {
  const candidates = [path.resolve(baseDir, entry), path.resolve(baseDir, entry, 'plugin.json')];
  for (const file of candidates) if (fs.existsSync(file) && fs.statSync(file).isFile()) return file;
  if (!entry.startsWith('.') && !path.isAbsolute(entry)) {
    const require = createRequire(path.join(baseDir, 'noop.js'));
    try {
      return require.resolve(`${entry}/plugin.json`);
    } catch (e) {
      // An installed package whose "exports" hides plugin.json: say so, not "not installed".
      if ((e as { code?: string }).code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') {
        let packageFile = '';
        try {
          packageFile = require.resolve(`${entry}/package.json`);
        } catch {
          packageFile = `${entry}'s package.json`;
        }
        throw new InputError(`plugins: package '${entry}' is installed but its exports map does not export './plugin.json'; add "./plugin.json": "./plugin.json" to "exports" in ${packageFile}`);
      }
    }
    // This host's own package (the FlowRL plugin ships in it), from a config outside the project
    // that installed it (flowrl example countdown /tmp/x): the running copy is the one to use.
    const own = PACKAGE_ROOT && path.join(PACKAGE_ROOT, 'plugin.json');
    if (entry === HOST_PACKAGE && own && fs.existsSync(own)) return own;
  }
  throw new InputError(`plugins: '${entry}' is neither a plugin.json file, a directory holding one, nor an installed package with one`);
}

function field<T>(raw: Record<string, unknown>, key: string, file: string, check: (v: unknown) => boolean, want: string): T {
  const value = raw[key];
  if (value === undefined) throw new InputError(`${file}: field '${key}' is missing (${want})`);
  if (!check(value)) throw new InputError(`${file}: field '${key}' must be ${want}; got ${JSON.stringify(value)}`);
  return value as T;
}

const isString = (v: unknown) => typeof v === 'string' && v.length > 0;

/** Reads and validates a plugin.json; every message names the file and the field. */
export function readManifest(file: string, hostVersion: string, knownBindings: string[]): PluginManifest {
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new InputError(`${file}: not a readable JSON plugin manifest (${(e as Error).message})`);
  }
  if (!isTree(raw)) throw new InputError(`${file}: a plugin manifest must be a JSON object`);
  const name = field<string>(raw, 'name', file, isString, 'a non-empty string');
  const version = field<string>(raw, 'version', file, (v) => typeof v === 'string' && semver.valid(v) !== null, 'a semver version');
  const host = field<string>(raw, 'host', file, (v) => typeof v === 'string' && semver.validRange(v) !== null, 'a semver range of supported host versions');
  if (!semver.satisfies(hostVersion, host)) {
    throw new InputError(`${file}: plugin '${name}' supports host ${host}; this host is ${hostVersion}`);
  }
  const entry = field<string>(raw, 'entry', file, isString, 'the path of the entry module');
  const source = raw.source === undefined ? undefined : field<string>(raw, 'source', file, isString, 'the path of the TypeScript entry');
  const algorithmsRaw = field<unknown[]>(raw, 'algorithms', file, Array.isArray, 'a list of algorithms');
  const algorithms = algorithmsRaw.map((a, i): AlgorithmSpec => {
    const where = `${file}: algorithms[${i}]`;
    if (!isTree(a)) throw new InputError(`${where} must be an object`);
    const spec = a as Record<string, unknown>;
    const get = <T>(key: string, check: (v: unknown) => boolean, want: string) => field<T>(spec, key, where, check, want);
    return {
      name: get<string>('name', isString, 'a non-empty string'),
      advEstimator: get<string>('adv_estimator', isString, 'an advantage estimator name'),
      needsReference: get<AlgorithmSpec['needsReference']>('needs_reference_policy', isReferenceNeed, 'true, false or {"when": {"<config key>": [values]}}'),
      ...(spec.policy_loss === undefined ? {} : { policyLoss: get<string>('policy_loss', isString, 'a policy loss name (actor.policy_loss.loss_mode)') }),
      description: typeof spec.description === 'string' ? spec.description : '',
      source: name,
    };
  });
  const overrides = field<string[]>(raw, 'overrides', file, (v) => Array.isArray(v) && v.every(isString), 'a list of binding names');
  for (const binding of overrides) {
    if (!knownBindings.includes(binding)) throw new InputError(`${file}: overrides names unknown binding '${binding}'; bindings: ${knownBindings.join(', ')}`);
  }
  const extendsList = raw.extends === undefined ? [] : field<string[]>(raw, 'extends', file, (v) => Array.isArray(v) && v.every(isString), 'a list of plugin names');
  if (raw.config !== undefined && raw.defaults !== undefined) throw new InputError(`${file}: give 'config' (each key's default, doc and rules) or 'defaults', not both`);
  const declared = raw.config === undefined ? undefined : field<ConfigTree>(raw, 'config', file, isTree, 'an object of config keys ({"default", "doc", ...} each) and sections');
  const specs = declared ? manifestSpecs(declared, file) : new Map<string, KeySpec>();
  const defaults = declared ? (defaultsOf(declared as object) as ConfigTree) : raw.defaults === undefined ? {} : field<ConfigTree>(raw, 'defaults', file, isTree, 'an object of config defaults');
  const inputPaths = raw.input_paths === undefined ? [] : field<string[]>(raw, 'input_paths', file, (v) => Array.isArray(v) && v.every(isString), 'a list of dotted config keys');
  const commandsRaw = raw.commands === undefined ? [] : field<unknown[]>(raw, 'commands', file, Array.isArray, 'a list of {name, usage}');
  const commands = commandsRaw.map((c, i) => {
    const where = `${file}: commands[${i}]`;
    if (!isTree(c)) throw new InputError(`${where} must be an object`);
    return { name: field<string>(c, 'name', where, isString, 'a command name'), usage: field<string>(c, 'usage', where, isString, 'a usage line') };
  });
  return {
    name,
    version,
    host,
    entry,
    source,
    algorithms,
    overrides,
    extends: extendsList,
    defaults,
    specs,
    inputPaths,
    commands,
    description: typeof raw.description === 'string' ? raw.description : undefined,
    file,
  };
}

/** A manifest's contribution to the config layers (see resolveConfig). */
export function pluginConfigLayer(manifest: PluginManifest): { source: string; defaults: ConfigTree; inputPaths: string[]; specs: Map<string, KeySpec> } {
  return { source: manifest.file, defaults: manifest.defaults, inputPaths: manifest.inputPaths, specs: manifest.specs };
}

/** The rule fields a key in a manifest's `config` may carry, with what each must be. */
const RULE_FIELDS: Record<string, (v: unknown) => boolean> = {
  doc: (v) => typeof v === 'string' && v.trim() !== '',
  choices: (v) => Array.isArray(v) && v.length > 0 && v.every((c) => typeof c === 'string'),
  nullable: (v) => v === 'number' || v === 'string' || v === 'string-or-list',
  min: (v) => typeof v === 'number' && Number.isFinite(v),
  max: (v) => typeof v === 'number' && Number.isFinite(v),
  integer: (v) => typeof v === 'boolean',
  exclusiveMin: (v) => typeof v === 'boolean',
  exclusiveMax: (v) => typeof v === 'boolean',
  positiveInteger: (v) => typeof v === 'boolean',
  stringOrList: (v) => typeof v === 'boolean',
  open: (v) => typeof v === 'boolean',
};

/** A manifest's `config` tree read as key specs (each leaf holds "default" and "doc"); a bad field is an InputError naming the key. */
function manifestSpecs(tree: ConfigTree, file: string, prefix = ''): Map<string, KeySpec> {
  const out = new Map<string, KeySpec>();
  for (const [name, node] of Object.entries(tree)) {
    const dotted = `${prefix}${name}`;
    if (!isTree(node)) throw new InputError(`${file}: config.${dotted} must be a key ({"default": ..., "doc": "..."}) or a section of keys`);
    if (!isKeySpec(node)) {
      for (const [k, v] of manifestSpecs(node, file, `${dotted}.`)) out.set(k, v);
      continue;
    }
    for (const [field, value] of Object.entries(node)) {
      if (field === 'default') continue;
      const check = RULE_FIELDS[field];
      if (!check) throw new InputError(`${file}: config.${dotted}: unknown field '${field}'; allowed: default, ${Object.keys(RULE_FIELDS).join(', ')}`);
      if (!check(value)) throw new InputError(`${file}: config.${dotted}.${field} is ${JSON.stringify(value)}, which is not allowed there`);
    }
    const spec = node as unknown as KeySpec;
    if (spec.choices && !spec.choices.includes(spec.default as string)) throw new InputError(`${file}: config.${dotted}: the default ${JSON.stringify(spec.default)} is not among its choices`);
    out.set(dotted, spec);
  }
  return out;
}
