// flowrl example NAME [DIR]: copies an example that ships in the package (and the examples it
// uses) into DIR, rewritten for a project that installed flowrl: plugins by package name
// (flowrl), imports from flowrl/core and flowrl/plugin instead of the repository's paths.
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { PACKAGE_ROOT } from '../package-root.js';

/** The examples the package ships, and the examples each one's config reads from. */
export const EXAMPLES: Record<string, { uses: string[]; next: string }> = {
  countdown: { uses: [], next: 'npx flowrl train countdown/flowrl-matching.yaml   # or any config there; see countdown/README.md' },
  'custom-plugin': { uses: ['countdown'], next: 'npm install tsx && NODE_OPTIONS=--import=tsx npx flowrl train custom-plugin/config.yaml' },
  'local-hf-model': { uses: [], next: 'read local-hf-model/README.md: download the checkpoint it names, then npx flowrl train local-hf-model/config.yaml' },
};

const USAGE = `usage: flowrl example NAME [DIR]   (NAME: ${Object.keys(EXAMPLES).join(', ')}; DIR: where NAME/ is written, default .)`;

/** A file of an example as it reads outside the repository. */
export function rewriteExampleFile(file: string, text: string): string {
  if (/\.ya?ml$/.test(file)) {
    return text
      .replace(/(plugins:\s*\[\s*)(?:\.\.\/)+plugin\.json/g, '$1flowrl')
      .replace(/^(\s*-\s*)(?:\.\.\/)+plugin\.json\s*$/gm, '$1flowrl')
      .replace(/(?:\.\.\/)+test\/fixtures\/countdown\//g, '../countdown/');
  }
  if (/\.(ts|mts|js)$/.test(file)) {
    return text.replace(/(['"])(?:\.\.\/)+core-adapters\/index\.js\1/g, '$1flowrl/core$1').replace(/(['"])(?:\.\.\/)+plugin\/index\.js\1/g, '$1flowrl/plugin$1');
  }
  return text;
}

function copyTree(from: string, to: string): void {
  fs.mkdirSync(to, { recursive: true });
  for (const entry of fs.readdirSync(from, { withFileTypes: true })) {
    const source = path.join(from, entry.name);
    const target = path.join(to, entry.name);
    if (entry.isDirectory()) copyTree(source, target);
    else if (/\.(ya?ml|ts|mts|js)$/.test(entry.name)) fs.writeFileSync(target, rewriteExampleFile(entry.name, fs.readFileSync(source, 'utf8')));
    else fs.copyFileSync(source, target);
  }
}

function hasTypeScript(dir: string): boolean {
  return fs.readdirSync(dir, { withFileTypes: true }).some((e) => (e.isDirectory() ? hasTypeScript(path.join(dir, e.name)) : /\.m?ts$/.test(e.name) && !e.name.endsWith('.d.ts')));
}

export async function exampleCommand(argv: string[]): Promise<void> {
  const [name, dir = '.', ...rest] = argv;
  const known = name !== undefined && Object.hasOwn(EXAMPLES, name);
  if (!known || rest.length) throw new InputError(name && !known ? `flowrl example: no example '${name}'; ${USAGE}` : USAGE);
  if (!PACKAGE_ROOT) throw new InputError('flowrl example: this flowrl is not an installed package, so it has no examples to copy');
  const out = path.resolve(dir);
  // What the example uses first, so a failure never leaves the example without it.
  const wanted = [...EXAMPLES[name].uses, name];
  fs.mkdirSync(out, { recursive: true });
  // The example asked for must not exist; one it uses that exists already is left as it is.
  if (fs.existsSync(path.join(out, name))) throw new InputError(`${path.join(out, name)} exists; nothing was written (give another DIR)`);
  const written: string[] = [];
  for (const example of wanted) {
    const target = path.join(out, example);
    if (example !== name && fs.existsSync(target)) continue;
    const source = path.join(PACKAGE_ROOT, 'examples', example);
    if (!fs.existsSync(source)) throw new InputError(`${source}: missing from this installation of flowrl`);
    // Written beside the target and renamed: never half an example.
    const staging = fs.mkdtempSync(path.join(out, `.${example}-`));
    try {
      copyTree(source, staging);
      // TypeScript sources are ES modules; in a project without "type": "module" (npm init's default)
      // Node would load them as CommonJS and the worker threads' require of them fails.
      if (hasTypeScript(staging) && !fs.existsSync(path.join(staging, 'package.json'))) fs.writeFileSync(path.join(staging, 'package.json'), '{ "type": "module" }\n');
      fs.renameSync(staging, target);
    } catch (e) {
      fs.rmSync(staging, { recursive: true, force: true });
      throw e;
    }
    written.push(target);
  }
  console.log(`wrote ${written.join(', ')}\nnext (in ${out}): ${EXAMPLES[name].next}`);
}
