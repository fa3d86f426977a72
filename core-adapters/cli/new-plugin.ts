// flowrl new-plugin DIR [--name NAME]: writes a plugin project that compiles and tests as written,
// like the create-* tools: a manifest, an entry that registers an advantage estimator (RLOO) and
// an algorithm using it, a unit test, a tsconfig (tsc --init's settings plus what inversify's
// decorators need) and a package.json (an existing one is completed). No other file is overwritten.
import fs from 'node:fs';
import path from 'node:path';
import { InputError } from '../errors.js';
import { HOST_VERSION, PACKAGE_ROOT } from '../package-root.js';
import { parseFlags } from './args.js';

/** The host's ranges of what a plugin shares with it (kept equal to the host's package.json by a test). */
export const HOST_DEPENDENCIES = { inversify: '^8.2.3', 'reflect-metadata': '^0.2.2', '@tensorflow/tfjs': '4.22.0' };

/** A plugin name: lower case, digits and hyphens, starting with a letter (npm's rule, simplified). */
const NAME = /^[a-z][a-z0-9-]{0,62}$/;

/** The files of a new plugin called `name`, by path relative to its directory. */
export function pluginFiles(name: string, hostVersion = HOST_VERSION, countdown = 'node_modules/flowrl/examples/countdown'): Record<string, string> {
  const id = name.replace(/-/g, '_');
  const hostRange = `^${hostVersion}`;
  return {
    'package.json': `${JSON.stringify(
      {
        name,
        version: '0.1.0',
        private: true,
        type: 'module',
        exports: { '.': './dist/index.js', './plugin.json': './plugin.json' },
        // What `npm pack` ships: the build, the manifest, the source for tsx users (not runs/ or tests).
        files: ['dist', '!dist/test', 'index.ts', 'plugin.json', 'README.md'],
        // Built when packed (prepack), not on every install: a production install has no TypeScript.
        // train: the sample config with the build (npm run train -- key=value ... adds overrides).
        scripts: { build: 'tsc', prepack: 'tsc', test: 'node --import tsx --test test/*.test.ts', train: `tsc && flowrl train ${name}.yaml` },
        // The host's own copies: a second inversify or tfjs in the plugin's folder would be a second engine.
        peerDependencies: { flowrl: hostRange, inversify: HOST_DEPENDENCIES.inversify, 'reflect-metadata': HOST_DEPENDENCIES['reflect-metadata'], '@tensorflow/tfjs': HOST_DEPENDENCIES['@tensorflow/tfjs'] },
        // Optional, so npm installs none of them into the plugin's own folder: Node and tsc find the
        // project's copies (where flowrl runs) by walking up.
        peerDependenciesMeta: { flowrl: { optional: true }, inversify: { optional: true }, 'reflect-metadata': { optional: true }, '@tensorflow/tfjs': { optional: true } },
        devDependencies: { '@types/node': '^20.19.0', tsx: '^4.20.0', typescript: '^5.9.0 || ^6.0.0' },
      },
      null,
      2,
    )}\n`,
    'plugin.json': `${JSON.stringify(
      {
        name,
        version: '0.1.0',
        description: 'RLOO: leave-one-out baselines for outcome rewards',
        host: hostRange,
        entry: './dist/index.js',
        source: './index.ts',
        algorithms: [{ name: `${id}_rloo`, adv_estimator: `${id}_rloo`, needs_reference_policy: false, description: 'REINFORCE with a leave-one-out baseline per prompt group' }],
        overrides: [],
      },
      null,
      2,
    )}\n`,
    // A first run: this plugin's algorithm on the countdown example the flowrl package ships.
    [`${name}.yaml`]: [
      `# A first run of ${name}'s algorithm on flowrl's countdown example (its data and base model ship`,
      `# in the flowrl package): npm run train, or npx flowrl train ${name}.yaml key=value ...`,
      'plugins: [./plugin.json]',
      `algorithm: { name: ${id}_rloo }`,
      'data:',
      `  train_files: ${countdown}/data/train.jsonl`,
      `  val_files: ${countdown}/data/val.jsonl`,
      '  train_batch_size: 8',
      '  max_prompt_length: 32',
      '  max_response_length: 16',
      'actor_rollout_ref:',
      `  model: { path: ${countdown}/base-model }`,
      '  actor: { ppo_mini_batch_size: 8, optim: { lr: 5.0e-4 } }',
      '  rollout: { n: 4, val_kwargs: { n: 4, temperature: 0.6, top_p: 0.95, do_sample: true } }',
      `trainer: { total_training_steps: 20, test_freq: 10, default_local_dir: runs/${name} }`,
      '',
    ].join('\n'),
    // tsc --init's settings, plus experimentalDecorators for inversify's @injectable/@inject.
    'tsconfig.json': `${JSON.stringify(
      {
        compilerOptions: {
          module: 'nodenext',
          target: 'esnext',
          types: ['node'],
          strict: true,
          noUncheckedIndexedAccess: true,
          exactOptionalPropertyTypes: true,
          verbatimModuleSyntax: true,
          isolatedModules: true,
          moduleDetection: 'force',
          skipLibCheck: true,
          experimentalDecorators: true,
          rootDir: '.',
          outDir: 'dist',
        },
        include: ['index.ts', 'test/*.ts'],
      },
      null,
      2,
    )}\n`,
    'index.ts': `// ${name}: a flowrl plugin. Its entry registers an advantage estimator, RLOO (each response's
// outcome score minus the mean score of the other responses to its prompt), which the algorithm
// '${id}_rloo' in plugin.json selects. Subclass a base role (PPOActor, RLTrainer,
// NaiveRewardManager, ...) with @injectable() @injectFromBase() and rebind its token in the module
// below to change more; list the token under "overrides" in plugin.json.
import 'reflect-metadata';
import { ContainerModule } from 'inversify';
import type { AdvantageInput, AdvantageOutput, PluginContext } from 'flowrl/core';

/** RLOO advantages: score minus the leave-one-out mean of its group, on every valid token. */
export function rlooAdvantages(input: AdvantageInput): AdvantageOutput {
  const { batch, length, tokenRewards, responseMask } = input;
  const scores = Array.from({ length: batch }, (_, b) => {
    let score = 0;
    for (let t = 0; t < length; t++) if (responseMask[b * length + t]) score += tokenRewards[b * length + t] ?? 0;
    return score;
  });
  const groups = new Map<string | number, number[]>();
  input.groupIds.forEach((id, b) => groups.set(id, [...(groups.get(id) ?? []), b]));
  const advantages = new Float32Array(batch * length);
  for (const rows of groups.values()) {
    const total = rows.reduce((sum, b) => sum + (scores[b] ?? 0), 0);
    for (const b of rows) {
      // A group of one has no baseline: its advantage is 0.
      const advantage = rows.length > 1 ? (scores[b] ?? 0) - (total - (scores[b] ?? 0)) / (rows.length - 1) : 0;
      for (let t = 0; t < length; t++) if (responseMask[b * length + t]) advantages[b * length + t] = advantage;
    }
  }
  return { advantages, returns: Float32Array.from(advantages) };
}

/** The entry: registers the estimator (under the name plugin.json's algorithm uses) and binds nothing else. */
export default function plugin(context: PluginContext): ContainerModule {
  context.registries.advantageEstimators.register('${id}_rloo', rlooAdvantages, { outcome: true });
  return new ContainerModule(() => {});
}
`,
    [`test/${name}.test.ts`]: `// The estimator's numbers, worked by hand: run with npm test (node's test runner under tsx).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { rlooAdvantages } from '../index.js';

test('RLOO: each score minus the mean of the others in its group; a group of one gets 0', () => {
  // Three responses to prompt 'a' (scores 1, 0, 0 on their last token), one to prompt 'b'.
  const length = 2;
  const tokenRewards = Float32Array.from([0, 1, 0, 0, 0, 0, 0, 5]);
  const responseMask = Float32Array.from([1, 1, 1, 1, 1, 0, 1, 1]);
  const out = rlooAdvantages({ batch: 4, length, tokenRewards, responseMask, groupIds: ['a', 'a', 'a', 'b'], gamma: 1, lam: 1, normByStd: true, epsilon: 1e-6 });
  assert.deepEqual([...out.advantages], [1, 1, -0.5, -0.5, -0.5, 0, 0, 0]);
});
`,
    'README.md': `# ${name}

A [flowrl](https://www.npmjs.com/package/flowrl) plugin, as \`flowrl new-plugin\` wrote it: the
algorithm \`${id}_rloo\` (REINFORCE with a leave-one-out baseline).

\`\`\`sh
npm install            # installs tsx and typescript (dev); npm run build writes dist/ (npm pack does too)
npm test               # the estimator's unit test (node's test runner under tsx)
npx tsc --noEmit       # type check
\`\`\`

flowrl, inversify, reflect-metadata and @tensorflow/tfjs are peer dependencies: the project that runs
\`flowrl\` provides them, so the plugin uses the host's copies (a second copy in this folder is
refused when the plugin loads). Write a loss with \`@tensorflow/tfjs\` ops; the host's engine runs it.

Register it in a run's config and select its algorithm:

\`\`\`yaml
plugins: [./path/to/${name}]
algorithm: { name: ${id}_rloo }
\`\`\`

Train from the TypeScript source with \`NODE_OPTIONS=--import=tsx npx flowrl train config.yaml\`
(tsx is a dev dependency here), or build (\`npm run build\`) and the compiled \`dist/index.js\` is
loaded; \`flowrl train\` names the file it loaded, and warns when the build is older than the source.
`,
  };
}

export async function newPluginCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('new-plugin', argv, { name: { type: 'string' } });
  if (positionals.length !== 1) throw new InputError('usage: flowrl new-plugin DIR [--name NAME]');
  const dir = path.resolve(positionals[0]);
  const name = (values.name as string | undefined) ?? path.basename(dir);
  if (!NAME.test(name)) throw new InputError(`plugin name '${name}' must be lower case letters, digits and hyphens, starting with a letter (give one with --name)`);
  // The sample config reads the countdown example from this installation, wherever the plugin sits.
  const countdown = PACKAGE_ROOT ? path.relative(dir, path.join(PACKAGE_ROOT, 'examples', 'countdown')).split(path.sep).join('/') : undefined;
  const files = pluginFiles(name, HOST_VERSION, countdown);
  // An existing package.json (the project flowrl was installed into) is completed, not replaced.
  const packageFile = path.join(dir, 'package.json');
  if (fs.existsSync(packageFile)) files['package.json'] = mergePackage(packageFile, files['package.json']!);
  const taken = Object.keys(files).filter((file) => file !== 'package.json' && fs.existsSync(path.join(dir, file)));
  if (taken.length) throw new InputError(`${dir}: ${taken.join(', ')} already exist; nothing was written`);
  for (const [file, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), text);
  }
  console.log(`wrote the plugin '${name}' in ${dir}: ${Object.keys(files).join(', ')}\nnext: cd ${positionals[0]} && npm install && npm test && npm run train`);
}

/** The project's package.json with what the plugin needs added: its own fields and dependencies win. */
function mergePackage(file: string, scaffold: string): string {
  let existing: Record<string, unknown>;
  try {
    existing = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new InputError(`${file}: not JSON (${(e as Error).message}); nothing was written`);
  }
  // The plugin is ES modules; turning a CommonJS project into one would change how its own .js files load.
  if (existing.type !== 'module') {
    throw new InputError(`${file}: this project is CommonJS (${existing.type === undefined ? 'no "type"' : `"type": ${JSON.stringify(existing.type)}`}) and the plugin is written as ES modules; write the plugin in a directory of its own (flowrl new-plugin plugins/NAME), or set "type": "module" first if the project is ES modules; nothing was written`);
  }
  const wanted = JSON.parse(scaffold) as Record<string, unknown>;
  const merged: Record<string, unknown> = { ...existing };
  for (const [key, value] of Object.entries(wanted)) {
    // The project's own name and version stay; a project without a version gets one (npm pack needs it).
    if (key === 'name' || (key === 'version' && existing.version !== undefined)) continue;
    const current = existing[key];
    merged[key] = typeof value === 'object' && value !== null && typeof current === 'object' && current !== null ? { ...value, ...current } : (current ?? value);
  }
  return `${JSON.stringify(merged, null, 2)}\n`;
}
