// Importing a plugin's entry module and getting the ContainerModule it provides.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ContainerModule, type ContainerModuleLoadOptions } from 'inversify';
import type { AdvantageEstimatorRegistry } from '../algorithms/advantages.js';
import type { PolicyLossRegistry } from '../algorithms/policy-loss.js';
import type { Config } from '../config/load.js';
import type { ScorerRegistry } from '../rewards/registry.js';
import type { ToolRegistry } from '../tools/registry.js';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';
import { CONTRIBUTION_POINTS, OVERRIDABLE_BINDINGS, TOKENS, type TokenName } from '../tokens.js';
import type { PluginManifest } from './manifest.js';

/** The host's registries by name, where a plugin entry function adds its estimators, losses, scorers and tool classes. */
export interface PluginRegistries {
  advantageEstimators: AdvantageEstimatorRegistry;
  policyLosses: PolicyLossRegistry;
  scorers: ScorerRegistry;
  tools: ToolRegistry;
}

/** What a plugin entry function receives: the resolved config, its own manifest, the registries. */
export interface PluginContext {
  config: Config;
  manifest: PluginManifest;
  registries: PluginRegistries;
}

/** What an entry's default export may be: a module, or a factory given the resolved config. */
export type PluginEntry = ContainerModule | ((context: PluginContext) => ContainerModule | Promise<ContainerModule>);

// When the host itself runs from TypeScript sources (tsx), a plugin's TypeScript entry is imported so
// both share one copy of the host's modules; compiled hosts import the compiled entry, unless a
// TypeScript loader is active (NODE_OPTIONS=--import=tsx), so the author's edits are what runs.
const HOST_RUNS_FROM_SOURCE = import.meta.url.endsWith('.ts');

/** Whether this process can import .ts files: the host runs from source, or tsx is loaded. */
function typeScriptLoads(): boolean {
  if (HOST_RUNS_FROM_SOURCE) return true;
  // --import/--loader/--require naming tsx (or tsx/esm, tsx/cjs), or tsx's own loader file by path.
  const flags = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? '').split(/\s+/)].join(' ');
  return /--(?:import|loader|experimental-loader|require)[=\s]+["']?tsx(?:\/[\w-]+)?["']?(?:\s|$)/.test(flags) || /[\\/]node_modules[\\/]tsx[\\/]/.test(flags);
}

const SOURCE_FILE = /\.(?:[mc]?ts|tsx)$/;
// Not the plugin's sources: dependencies, build output, tests.
const NOT_SOURCES = new Set(['node_modules', 'dist', 'build', 'test', 'tests']);

/**
 * The newest TypeScript source under `dir` changed after `than` (ms), or undefined: the modules a
 * plugin's entry imports live beside it. Declarations, tests and build output are left out; the
 * walk stops after 5,000 entries (a plugin, not a monorepo).
 */
function newestSource(dir: string, entry: string, than: number): string | undefined {
  let newest: { file: string; mtime: number } | undefined;
  let budget = 5000;
  const entryDir = path.dirname(entry);
  const walk = (at: string) => {
    let names: fs.Dirent[];
    try {
      names = fs.readdirSync(at, { withFileTypes: true });
    } catch {
      return;
    }
    for (const d of names) {
      if (--budget < 0) return;
      const file = path.join(at, d.name);
      if (d.isDirectory()) {
        if (!d.name.startsWith('.') && !NOT_SOURCES.has(d.name) && file !== entryDir) walk(file);
      } else if (d.isFile() && SOURCE_FILE.test(d.name) && !d.name.endsWith('.d.ts') && !/\.test\.[mc]?tsx?$/.test(d.name)) {
        const mtime = fs.statSync(file).mtimeMs;
        if (mtime > than && (!newest || mtime > newest.mtime)) newest = { file, mtime };
      }
    }
  };
  walk(dir);
  return newest?.file;
}

function entryFile(manifest: PluginManifest): string {
  const dir = path.dirname(manifest.file);
  const resolve = (f: string | undefined) => (f && fs.existsSync(path.resolve(dir, f)) ? path.resolve(dir, f) : undefined);
  const entry = resolve(manifest.entry);
  const source = resolve(manifest.source);
  // A plugin inside this package (FlowRL's own) imports the host by relative path: its source would
  // load a second copy of a compiled host, so it follows the host (source with source, build with build).
  const insideHost = PACKAGE_ROOT !== '' && manifest.file.startsWith(PACKAGE_ROOT + path.sep);
  // An installed plugin (under node_modules) runs as published; only one being written loads its source.
  const installed = manifest.file.split(path.sep).includes('node_modules');
  const sourceRuns = insideHost ? HOST_RUNS_FROM_SOURCE : !installed && typeScriptLoads();
  if (source && (sourceRuns || !entry)) return source;
  if (entry) {
    // A build older than its sources (the entry's source or a module beside it that it may import)
    // runs code the author has since changed: said, not silent.
    const built = fs.statSync(entry).mtimeMs;
    const newer = !source ? undefined : fs.statSync(source).mtimeMs > built ? source : newestSource(path.dirname(source), entry, built);
    if (newer) {
      console.warn(`[flowrl] plugin ${manifest.name}: ${path.relative(process.cwd(), entry) || entry} is older than ${path.relative(process.cwd(), newer) || newer}; running the build (rebuild it, or run with NODE_OPTIONS=--import=tsx to load the source)`);
    }
    return entry;
  }
  throw new InputError(`${manifest.file}: entry '${manifest.entry}' not found${manifest.source ? ` (nor source '${manifest.source}')` : ''}`);
}

function isContainerModule(value: unknown): value is ContainerModule {
  return typeof value === 'object' && value !== null && typeof (value as { load?: unknown }).load === 'function';
}

// inversify 8 keeps a class's injection metadata under these reflect-metadata keys.
const CLASS_METADATA = '@inversifyjs/core/classMetadataReflectKey';
const INJECTABLE_FLAG = '@inversifyjs/core/classIsInjectableFlagReflectKey';

/** The nearest base class (not `cls`) whose constructor takes injected arguments. */
function injectedBase(cls: object): { name: string } | undefined {
  for (let base = Object.getPrototypeOf(cls) as object | null; base && base !== Function.prototype; base = Object.getPrototypeOf(base) as object | null) {
    const metadata = Reflect.getOwnMetadata(CLASS_METADATA, base) as { constructorArguments?: unknown[] } | undefined;
    if (metadata?.constructorArguments?.length) return base as { name: string };
  }
  return undefined;
}

/**
 * An exported @injectable() subclass of a base with injected constructor arguments that has no
 * metadata of its own forgot @injectFromBase(): inversify would construct it with no arguments and
 * the run would fail at its first step with a TypeError. Found here, when the plugin loads.
 */
function checkSubclasses(manifest: PluginManifest, file: string, exported: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(exported)) {
    if (typeof value !== 'function' || !Reflect.getOwnMetadata(INJECTABLE_FLAG, value)) continue;
    if (Reflect.getOwnMetadata(CLASS_METADATA, value)) continue;
    const base = injectedBase(value);
    if (base) throw new InputError(`${manifest.file}: class ${name} in ${file} extends ${base.name} but has no @injectFromBase(); add it under @injectable() so ${base.name}'s constructor gets its dependencies`);
  }
}

/** The package directory `name` resolves to from `file` (undefined when it does not resolve). */
function packageDir(name: string, file: string): string | undefined {
  const require = createRequire(file);
  let resolved: string | undefined;
  // Its package.json where the exports map lists it (flowrl's does), else its main module.
  for (const request of [`${name}/package.json`, name]) {
    try {
      resolved = require.resolve(request);
      break;
    } catch {
      // not resolvable this way
    }
  }
  if (!resolved) return undefined;
  for (let dir = path.dirname(resolved); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, 'utf8')) as { name?: string }).name === name) return fs.realpathSync(dir);
  }
  return undefined;
}

/**
 * A plugin that resolves its own copy of flowrl or of tfjs (its folder's node_modules) would run a
 * second engine beside the host's: kernels registered twice, replica threads failing. Found before
 * its entry is imported, with what to do.
 */
function checkSingleHost(manifest: PluginManifest, file: string): void {
  const hostFile = fileURLToPath(import.meta.url);
  for (const name of ['flowrl', '@tensorflow/tfjs-core']) {
    const mine = packageDir(name, hostFile) ?? (name === 'flowrl' && PACKAGE_ROOT ? fs.realpathSync(PACKAGE_ROOT) : undefined);
    const theirs = packageDir(name, file);
    if (mine && theirs && mine !== theirs) {
      // An npm link keeps the plugin's development copies beside it; a packed install leaves them behind.
      const real = path.dirname(fs.realpathSync(manifest.file));
      const remedy =
        real !== path.dirname(path.resolve(manifest.file))
          ? `The plugin is linked from ${real} (npm link), whose node_modules holds its development copy: install it as a copy instead (npm install --install-links ${real}), or remove ${name} from ${path.join(real, 'node_modules')}`
          : `Remove it from the plugin's node_modules (npm uninstall ${name} there, and list it under peerDependencies), or install the plugin into the project that runs flowrl`;
      throw new InputError(`${manifest.file}: the plugin resolves its own ${name} (${theirs}) besides the host's (${mine}); two copies cannot share one engine. ${remedy}`);
    }
  }
}

export async function importPluginModule(manifest: PluginManifest, context: PluginContext): Promise<ContainerModule> {
  const file = entryFile(manifest);
  checkSingleHost(manifest, file);
  manifest.loadedFrom = file;
  let imported: { default?: unknown };
  try {
    imported = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (e) {
    const hint = file.endsWith('.ts') && !typeScriptLoads() ? ' (a TypeScript entry needs NODE_OPTIONS=--import=tsx, or build the plugin and point entry at the .js)' : '';
    throw new InputError(`${manifest.file}: importing entry ${file} failed: ${(e as Error).message}${hint}`);
  }
  checkSubclasses(manifest, file, imported as Record<string, unknown>);
  const entry = imported.default as PluginEntry | undefined;
  // What the entry registers is recorded as this plugin's (a clash then names both providers).
  const registries = Object.values(context.registries);
  registries.forEach((r) => (r.provider = `plugin ${manifest.name} (${manifest.file})`));
  let module: unknown;
  try {
    module = typeof entry === 'function' ? await entry(context) : entry;
  } catch (e) {
    if (e instanceof InputError) throw new InputError(`${manifest.file}: ${e.message}`);
    throw e;
  } finally {
    registries.forEach((r) => (r.provider = 'core'));
  }
  if (!isContainerModule(module)) {
    throw new InputError(`${manifest.file}: entry ${file} provides no ContainerModule (its default export must be one, or a function returning one)`);
  }
  return module;
}

/**
 * Plugins in load order: each after the plugins it extends (otherwise as listed). An unknown name
 * in `extends`, or plugins extending each other, is an error naming them.
 */
export function orderByExtends(plugins: PluginManifest[]): PluginManifest[] {
  const byName = new Map(plugins.map((p) => [p.name, p]));
  for (const p of plugins) {
    for (const base of p.extends) if (!byName.has(base)) throw new InputError(`${p.file}: extends '${base}', which is not registered (plugins: ${plugins.map((q) => q.name).join(', ')})`);
  }
  const ordered: PluginManifest[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (p: PluginManifest, path: string[]) => {
    if (state.get(p.name) === 'done') return;
    if (state.get(p.name) === 'visiting') throw new InputError(`plugins extend each other in a cycle: ${[...path, p.name].join(' -> ')}`);
    state.set(p.name, 'visiting');
    for (const base of p.extends) visit(byName.get(base)!, [...path, p.name]);
    state.set(p.name, 'done');
    ordered.push(p);
  };
  plugins.forEach((p) => visit(p, []));
  return ordered;
}

/** Whether `plugin` extends `base`, directly or through plugins it extends. */
function extendsPlugin(plugin: PluginManifest, base: string, plugins: PluginManifest[], seen = new Set<string>()): boolean {
  if (plugin.extends.includes(base)) return true;
  seen.add(plugin.name);
  return plugin.extends.some((name) => {
    const next = plugins.find((p) => p.name === name);
    return next !== undefined && !seen.has(name) && extendsPlugin(next, base, plugins, seen);
  });
}

/** Which plugin replaced each host role, as plugins load (Theia's rule: a clash is an error, not an order). */
export type RoleReplacements = Map<TokenName, PluginManifest>;

const ROLE_OF = new Map<unknown, TokenName>(Object.entries(TOKENS).map(([name, token]) => [token, name as TokenName]));

/**
 * A plugin's module with its replacements of host roles checked: rebinding or unbinding a role its
 * manifest's `overrides` does not list is refused, and replacing a role another plugin replaced is
 * an error naming both, unless this plugin declares that it extends that one.
 */
export function guardedModule(module: ContainerModule, manifest: PluginManifest, replaced: RoleReplacements, plugins: PluginManifest[] = [manifest]): ContainerModule {
  const check = (id: unknown, how: string) => {
    const role = ROLE_OF.get(id);
    // Roles a manifest may declare; the others (Config, Tokenizer, ...) are not guarded.
    if (!role || !OVERRIDABLE_BINDINGS.includes(role)) return;
    if (!manifest.overrides.includes(role)) throw new InputError(`${manifest.file}: its entry ${how}s ${role}, which 'overrides' does not list (overrides: [${manifest.overrides.join(', ')}]); add it there`);
    const earlier = replaced.get(role);
    if (earlier && earlier !== manifest && !extendsPlugin(manifest, earlier.name, plugins)) {
      throw new InputError(
        `plugins '${earlier.name}' (${earlier.file}) and '${manifest.name}' (${manifest.file}) both replace ${role}; only one can. If one builds on the other, declare it in that one's plugin.json (e.g. "extends": ["${earlier.name}"] in '${manifest.name}'s); it then loads after the other and its ${role} is used`,
      );
    }
    replaced.set(role, manifest);
  };
  // A second binding of a one-binding role makes every lookup of it ambiguous: refused before it is made.
  const checkBind = (id: unknown) => {
    const role = ROLE_OF.get(id);
    if (!role || !OVERRIDABLE_BINDINGS.includes(role) || CONTRIBUTION_POINTS.includes(role)) return;
    throw new InputError(
      `${manifest.file}: its entry binds ${role}, which the host binds already (a second binding is ambiguous); replace it with rebind(TOKENS.${role}) and list ${role} in 'overrides'${manifest.overrides.includes(role) ? '' : ` (overrides: [${manifest.overrides.join(', ')}])`}`,
    );
  };
  return new ContainerModule(async (options: ContainerModuleLoadOptions) => {
    await module.load({
      ...options,
      bind: (id) => (checkBind(id), options.bind(id)),
      rebind: (id) => (check(id, 'rebind'), options.rebind(id)),
      rebindAsync: (id) => (check(id, 'rebind'), options.rebindAsync(id)),
      unbind: (id) => (check(id, 'unbind'), options.unbind(id)),
      unbindAsync: (id) => (check(id, 'unbind'), options.unbindAsync(id)),
    });
  });
}
