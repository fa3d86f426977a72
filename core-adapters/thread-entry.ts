// The source a worker thread starts from (Worker with eval: true): a bootstrap that brings in what
// the parent preloaded, then a module of this package. Shared by the engine's pool threads and the
// code rewards' judging thread.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

/**
 * Modules the parent preloaded with --import, on its command line or in NODE_OPTIONS (tsx, for a
 * plugin written in TypeScript), as URLs: bare names as given, paths resolved against the working
 * directory as Node resolves them. A worker thread does not inherit the loader hooks they register.
 */
export function parentPreloads(execArgv = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): string[] {
  const args = [...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)];
  const found: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const spec = args[i] === '--import' ? args[++i] : args[i].startsWith('--import=') ? args[i].slice('--import='.length) : undefined;
    if (!spec) continue;
    const resolved = /^\.{0,2}\//.test(spec) ? pathToFileURL(path.resolve(spec)).href : spec;
    if (!found.includes(resolved)) found.push(resolved);
  }
  return found;
}

/** tsx's registration API as the working directory resolves it (where `--import tsx` found tsx), else as this package does. */
function tsxApi(): string {
  try {
    // require.resolve gives the CommonJS build; its ES module sibling is the one to import.
    const cjs = createRequire(path.join(process.cwd(), 'index.js')).resolve('tsx/esm/api');
    const esm = cjs.replace(/\.cjs$/, '.mjs');
    return pathToFileURL(fs.existsSync(esm) ? esm : cjs).href;
  } catch {
    return import.meta.resolve('tsx/esm/api');
  }
}

/**
 * A thread's entry for the module `entry` (its built .js URL): first the parent's preloads, so a
 * TypeScript plugin loads in the thread as it did in the parent (tsx, whose `--import` entry
 * registers its hooks on the main thread only, through its registration API), then the module;
 * from source (this file is .ts), tsx is registered in any case and the .ts module imported.
 */
export function threadEntrySource(entry: URL): string {
  const fromSource = import.meta.url.endsWith('.ts');
  const target = JSON.stringify(fromSource ? entry.href.replace(/\.js$/, '.ts') : entry.href);
  const preloads = parentPreloads();
  const isTsx = (p: string) => p === 'tsx' || p === 'tsx/esm';
  const others = preloads.filter((p) => !isTsx(p)).map((p) => `await import(${JSON.stringify(p)});`);
  const tsx = fromSource || preloads.some(isTsx) ? [`const tsx = await import(${JSON.stringify(tsxApi())}); (tsx.register ?? tsx.default.register)();`] : [];
  return `(async () => { ${[...tsx, ...others].join(' ')} await import(${target}); })();`;
}
