// What a plugin author does with the published package, from nothing: pack it, install the tarball
// into a fresh project, scaffold a plugin there with `flowrl new-plugin`, type-check it with the
// project's own TypeScript, run its test, and train 2 steps with it from TypeScript source on two
// worker threads. npm's cache (filled by npm ci) serves the dependencies.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { pluginFiles } from '../core-adapters/cli/new-plugin.js';
import { expectFreshDist, fixture, ROOT, runCommand, tempDir, type CliResult } from './helpers.js';

/** Runs a command in `cwd` with Node's options cleared of this test run's. */
const run = (command: string, args: string[], cwd: string, env: Record<string, string> = {}) => runCommand(command, args, cwd, 120_000, { NODE_OPTIONS: '', ...env });

const expectOk = (r: CliResult, what: string) => expect(r.status, `${what}\n${r.stdout.slice(-1500)}\n${r.stderr.slice(-1500)}`).to.equal(0);

describe('the packed package, installed into a fresh project, with a scaffolded plugin', function () {
  this.timeout(600_000);
  before(expectFreshDist);

  it('packs, installs, scaffolds a plugin that type-checks and passes its test, trains 2 steps with it from TypeScript on two threads, and refuses two plugins replacing one role and a plugin with its own flowrl', async () => {
    const dir = tempDir('flowrl-package-');
    // dist/ is fresh (npm test builds it first), so packing need not build again.
    const packed = await run('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], ROOT);
    expectOk(packed, 'npm pack');
    const tarball = path.join(dir, packed.stdout.trim().split('\n').at(-1)!);
    const project = path.join(dir, 'acme-rloo');
    fs.mkdirSync(project);
    fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'scratch', private: true, type: 'module' }));
    expectOk(await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball], project), 'npm install the tarball');
    // The scaffold, from the installed command; then its own dependencies.
    expectOk(await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['new-plugin', '.', '--name', 'acme-rloo'], project), 'flowrl new-plugin');
    // The project's package.json was completed (its name kept), the plugin's files written.
    const manifest = JSON.parse(fs.readFileSync(path.join(project, 'package.json'), 'utf8')) as { name: string; dependencies: Record<string, string>; peerDependencies: Record<string, string>; devDependencies: Record<string, string>; files: string[]; scripts: Record<string, string> };
    expect(manifest.name).to.equal('scratch');
    expect(manifest.dependencies).to.include.keys('flowrl');
    // The host's copies are peers (one engine), the build is what ships, and it builds on install.
    const host = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> };
    for (const name of ['inversify', 'reflect-metadata', '@tensorflow/tfjs']) expect(manifest.peerDependencies[name], name).to.equal(host.peerDependencies[name]);
    expect(manifest.files).to.include.members(['dist', 'plugin.json']).and.not.include('runs');
    expect(manifest.scripts).to.include({ prepack: 'tsc', train: 'tsc && flowrl train acme-rloo.yaml' });
    expect(manifest.devDependencies).to.include.keys('typescript', 'tsx');
    expect(fs.readdirSync(project)).to.include.members(Object.keys(pluginFiles('acme-rloo')).filter((f) => !f.includes('/')));
    expectOk(await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], project), 'npm install (the scaffold dependencies)');
    expectOk(await run(path.join(project, 'node_modules', '.bin', 'tsc'), ['--noEmit'], project), 'tsc --noEmit');
    expectOk(await run(process.execPath, ['--import', 'tsx', '--test', 'test/acme-rloo.test.ts'], project), 'the scaffold test');
    // The scaffold's own first run: its sample config on the countdown example the package ships.
    expectOk(await run('npm', ['run', 'train', '--', 'trainer.total_training_steps=1', 'trainer.test_freq=-1', 'trainer.val_before_train=false'], project), 'npm run train (the scaffold)');
    expect(fs.existsSync(path.join(project, 'runs', 'acme-rloo', 'metrics.jsonl'))).to.equal(true);
    const countdown = fixture('countdown');
    fs.writeFileSync(
      path.join(project, 'config.yaml'),
      [
        'plugins: [./plugin.json]',
        'algorithm: { name: acme_rloo_rloo }',
        `data: { train_files: ${path.join(countdown, 'data', 'train.jsonl')}, val_files: ${path.join(countdown, 'data', 'val.jsonl')}, train_batch_size: 4, max_prompt_length: 32, max_response_length: 16, val_max_samples: 8 }`,
        `actor_rollout_ref: { model: { path: ${path.join(countdown, 'base-model')} }, actor: { ppo_mini_batch_size: 4, ppo_micro_batch_size: 16 }, rollout: { n: 4 } }`,
        'trainer: { total_training_steps: 2, test_freq: 2, default_local_dir: ./run }',
        'engine: { workers: 2 }',
      ].join('\n'),
    );
    const trained = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['train', 'config.yaml'], project, { NODE_OPTIONS: '--import=tsx' });
    expectOk(trained, 'flowrl train with the plugin');
    expect(trained.stderr).to.include('acme-rloo').and.include('2 threads');
    expect(fs.readFileSync(path.join(project, 'run', 'metrics.jsonl'), 'utf8').trim().split('\n')).to.have.length(3);
    expect(trained.stderr).to.include('acme-rloo@0.1.0 (index.ts)');
    // A build older than the source the author edits: the tsx route loads the source; without tsx
    // the build runs and a warning says it is stale.
    expectOk(await run('npm', ['run', 'build'], project), 'npm run build (the plugin)');
    // The build, overwritten with an older stand-in.
    expect(fs.existsSync(path.join(project, 'dist', 'index.js'))).to.equal(true);
    fs.writeFileSync(path.join(project, 'dist', 'index.js'), "import { ContainerModule } from 'inversify';\nexport default new ContainerModule(() => {});\n");
    const old = new Date(Date.now() - 3_600_000);
    fs.utimesSync(path.join(project, 'dist', 'index.js'), old, old);
    fs.writeFileSync(path.join(project, 'list.yaml'), 'plugins: [./plugin.json]\n');
    const viaTsx = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['plugins', 'list.yaml'], project, { NODE_OPTIONS: '--import=tsx' });
    expectOk(viaTsx, 'flowrl plugins under tsx');
    expect(viaTsx.stdout).to.include(`entry:      ${path.join(fs.realpathSync(project), 'index.ts')}`);
    expect(viaTsx.stderr).not.to.include('is older than');
    const compiled = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['plugins', 'list.yaml'], project);
    expectOk(compiled, 'flowrl plugins, compiled');
    expect(compiled.stdout).to.include(`entry:      ${path.join(fs.realpathSync(project), 'dist', 'index.js')}`);
    expect(compiled.stderr).to.include('plugin acme-rloo: dist/index.js is older than index.ts');
    // Two plugins replacing one role, from the installed package: refused, naming both and the role.
    const clash = path.join(project, 'clash');
    fs.mkdirSync(clash);
    fs.writeFileSync(path.join(clash, 'plugin.json'), JSON.stringify({ name: 'acme-trainer', version: '1.0.0', host: '>=0.0.0', entry: './index.js', algorithms: [], overrides: ['Trainer'] }));
    fs.writeFileSync(path.join(clash, 'index.js'), "import { ContainerModule } from 'inversify';\nimport { RLTrainer, TOKENS } from 'flowrl/core';\nexport default new ContainerModule(({ rebind }) => { rebind(TOKENS.Trainer).to(RLTrainer).inSingletonScope(); });\n");
    fs.writeFileSync(path.join(project, 'clash.yaml'), 'plugins: [flowrl, ./clash/plugin.json]\nalgorithm: { name: flowrl }\n');
    const clashed = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['train', 'clash.yaml'], project);
    expect(clashed.status, clashed.stderr).to.equal(2);
    expect(clashed.stderr).to.include('both replace Trainer').and.include("'flowrl'").and.include("'acme-trainer'");
    // A plugin folder with its own copy of the host (npm install run there): stopped before it is imported, naming both copies.
    const ownCopy = path.join(clash, 'node_modules', 'flowrl');
    fs.cpSync(path.join(project, 'node_modules', 'flowrl', 'package.json'), path.join(ownCopy, 'package.json'));
    fs.writeFileSync(path.join(project, 'own.yaml'), 'plugins: [./clash/plugin.json]\n');
    const doubled = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['train', 'own.yaml'], project);
    expect(doubled.status, doubled.stderr).to.equal(2);
    expect(doubled.stderr).to.include(`resolves its own flowrl (${fs.realpathSync(ownCopy)})`).and.include('two copies cannot share one engine');
    fs.rmSync(clash, { recursive: true });
    // The shipped examples, copied out and trained with the compiled host. The countdown example
    // outside any project (its configs name the plugin by package, which the running flowrl is);
    // the plugin example into a CommonJS package (npm init's default) inside the project, loaded
    // from its TypeScript source on the default threads.
    const quick = ['trainer.total_training_steps=1', 'trainer.test_freq=-1', 'trainer.val_before_train=false', 'trainer.default_local_dir=./run'];
    const outside = path.join(dir, 'outside');
    expectOk(await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['example', 'countdown', outside], project), 'flowrl example countdown (outside the project)');
    // A quarter of its batch: that it trains from where it was copied is the point, not how much.
    const countdownRun = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['train', 'countdown/grpo.yaml', ...quick, 'data.train_batch_size=4', 'actor_rollout_ref.actor.ppo_mini_batch_size=4'], outside);
    expectOk(countdownRun, 'the copied countdown example trains outside the project');
    const examples = path.join(project, 'examples-cjs');
    fs.mkdirSync(examples);
    fs.writeFileSync(path.join(examples, 'package.json'), JSON.stringify({ name: 'examples-cjs', version: '1.0.0' }));
    expectOk(await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['example', 'custom-plugin', examples], project), 'flowrl example custom-plugin');
    const pluginRun = await run(path.join(project, 'node_modules', '.bin', 'flowrl'), ['train', 'custom-plugin/config.yaml', ...quick, 'engine.workers=2'], examples, { NODE_OPTIONS: '--import=tsx' });
    expectOk(pluginRun, 'the copied custom-plugin example trains in a CommonJS package');
    expect(pluginRun.stderr).to.include('2 threads');
    expect(pluginRun.stderr).to.include('short-answers@0.1.0 (custom-plugin/index.ts)').and.include('replaced: RewardManager by short-answers');
    // What the plugin would publish: small, no run directories or tests.
    fs.rmSync(path.join(project, 'dist', 'test'), { recursive: true, force: true });
    const pluginPack = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], project);
    expectOk(pluginPack, 'npm pack of the plugin');
    const [{ files }] = JSON.parse(pluginPack.stdout) as { files: { path: string }[] }[];
    expect(files.map((f) => f.path).sort()).to.deep.equal(['README.md', 'dist/index.js', 'index.ts', 'package.json', 'plugin.json']);
  });
});
