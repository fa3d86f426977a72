// Plugins: plugin.json manifests, their algorithms, defaults and container overrides, as the host
// loads them (createHost without an engine) and as `flowrl plugins CONFIG` lists them.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  buildTokenizer,
  createHost,
  InputError,
  NaiveRewardManager,
  OVERRIDABLE_BINDINGS,
  TOKENS,
  writeConfig,
  type RewardManager,
} from '../core-adapters/index.js';
import { type HostOptions } from '../core-adapters/host.js';
import { HOST_VERSION } from '../core-adapters/package-root.js';
import { evalCommand } from '../core-adapters/cli/rl-commands.js';
import { expectInputErrorAsync, fixture, ROOT, runBuiltFlowrl, runFlowrl, tempDir, writeCountdownConfig, type CliResult } from './helpers.js';

const TOY_DIR = fixture('plugins', 'toy');
type ToyModule = typeof import('./fixtures/plugins/toy/index.js');
/**
 * The toy plugin's ToyRewardManager, imported the way the host's loader imports the entry (by file
 * URL). A static import would not do: mocha require()s spec files, so tsx compiles them to CommonJS,
 * while the loader's import() gives the ES module, a second copy of the class.
 */
let ToyRewardManager: ToyModule['ToyRewardManager'];
let toyValuesEstimator: ToyModule['toyValuesEstimator'];
const NO_MODULE_DIR = fixture('plugins', 'no-module');
const ASYNC_DIR = fixture('plugins', 'async-load');

/** A valid manifest for plugins written into temporary directories (tests change one field). */
const BASE_MANIFEST = {
  name: 'tmp-plugin',
  version: '1.0.0',
  host: '>=0.0.0',
  entry: 'dist/index.js',
  source: 'index.ts',
  algorithms: [] as unknown[],
  overrides: [] as string[],
};

const work = tempDir('flowrl-plugins-');
const tokenizerDir = path.join(work, 'tokenizer');
let counter = 0;

/** Writes a config file (YAML text) into a fresh directory and returns its path. */
function writeYaml(text: string, name = 'config.yaml'): string {
  const dir = path.join(work, `config-${++counter}`);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

/** A config using the given plugin entries (paths relative to the config's directory are made from absolute ones). */
function configWith(pluginPaths: string[], extra = ''): string {
  const dir = path.join(work, `config-${++counter}`);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'config.yaml');
  const entries = pluginPaths.map((p) => JSON.stringify(path.relative(dir, p).startsWith('.') ? path.relative(dir, p) : `./${path.relative(dir, p)}`));
  fs.writeFileSync(file, `plugins: [${entries.join(', ')}]\nactor_rollout_ref:\n  model:\n    path: ${JSON.stringify(tokenizerDir)}\n${extra}`);
  return file;
}

/** Writes a plugin.json (BASE_MANIFEST changed by `edit`) into a fresh directory; returns the manifest path. */
function writeManifest(edit: (m: Record<string, unknown>) => void, raw?: string): string {
  const dir = path.join(work, `plugin-${++counter}`);
  fs.mkdirSync(dir, { recursive: true });
  const manifest: Record<string, unknown> = structuredClone(BASE_MANIFEST);
  edit(manifest);
  const file = path.join(dir, 'plugin.json');
  fs.writeFileSync(file, raw ?? JSON.stringify(manifest, null, 2));
  return file;
}

/** A plugin whose JavaScript entry (`prelude`, then a default export) runs `body` with `registries` in scope and provides an empty ContainerModule. */
function writeEntryPlugin(body: string, prelude = ''): string {
  const file = writeManifest((m) => {
    m.entry = 'entry.mjs';
    delete m.source;
  });
  const inversify = import.meta.resolve('inversify');
  fs.writeFileSync(
    path.join(path.dirname(file), 'entry.mjs'),
    `${prelude}import { ContainerModule } from ${JSON.stringify(inversify)};\nexport default ({ registries }) => { ${body} return new ContainerModule(() => {}); };\n`,
  );
  return file;
}

/** createHost (without an engine) must fail with an InputError whose message holds every fragment. */
function expectHostError(configFile: string, options: HostOptions, ...fragments: string[]): Promise<InputError> {
  return expectInputErrorAsync(createHost(configFile, { skipEngine: true, ...options }), ...fragments);
}

describe('plugins', () => {
  before(async () => {
    buildTokenizer({ characters: 'abc 0123456789' }).save(tokenizerDir);
    ({ ToyRewardManager, toyValuesEstimator } = (await import(pathToFileURL(path.join(TOY_DIR, 'index.ts')).href)) as ToyModule);
  });

  describe('a plugin that contributes an algorithm and overrides a binding', () => {
    it('binds its reward manager when its algorithm is selected', async () => {
      const host = await createHost(configWith([TOY_DIR], 'algorithm:\n  name: toy\n'), { skipEngine: true });
      const manager = host.container.get<RewardManager>(TOKENS.RewardManager);
      expect(manager).to.be.instanceOf(ToyRewardManager);
      expect(host.container.get(TOKENS.RewardManager), 'a singleton').to.equal(manager);
      expect(host.requirements.algorithm.name).to.equal('toy');
      expect(host.requirements.algorithm.source).to.equal('toy');
      expect(host.requirements.advEstimator).to.equal('grpo');
      expect(host.requirements.useCritic).to.equal(false);
      expect(host.requirements.useReference).to.equal(false);
      expect(host.plugins.map((p) => [p.name, p.version, p.file])).to.deep.equal([['toy', '0.2.0', path.join(TOY_DIR, 'plugin.json')]]);
      expect(host.plugins[0].overrides).to.deep.equal(['RewardManager']);
    });

    it('changes nothing when another algorithm is selected', async () => {
      const host = await createHost(configWith([TOY_DIR], 'algorithm:\n  name: grpo\n'), { skipEngine: true });
      const manager = host.container.get<RewardManager>(TOKENS.RewardManager);
      expect(manager).to.be.instanceOf(NaiveRewardManager);
      expect(manager).to.not.be.instanceOf(ToyRewardManager);
      expect(host.requirements.algorithm.source).to.equal('core');
    });

    it('is selected by a command-line override of algorithm.name too', async () => {
      const host = await createHost(configWith([TOY_DIR]), { skipEngine: true, overrides: ['algorithm.name=toy'] });
      expect(host.container.get(TOKENS.RewardManager)).to.be.instanceOf(ToyRewardManager);
    });

    it('registers its algorithm after the core ones', async () => {
      const host = await createHost(configWith([TOY_DIR]), { skipEngine: true });
      expect(host.registry.names()).to.deep.equal(['ppo', 'grpo', 'reinforce_plus_plus', 'toy', 'toy_valued']);
      expect(host.container.get(TOKENS.AlgorithmRegistry)).to.equal(host.registry);
      expect(host.registry.get('toy')).to.include({ advEstimator: 'grpo', needsReference: false, source: 'toy' });
    });

    it('registers its own estimator through its context; selecting it binds it, and its trait brings a critic', async () => {
      const host = await createHost(configWith([TOY_DIR], 'algorithm:\n  name: toy_valued\n'), { skipEngine: true });
      expect(host.registries.advantageEstimators.names()).to.include('toy_values');
      expect(host.container.get(TOKENS.AdvantageEstimator)).to.equal(toyValuesEstimator);
      expect(host.requirements).to.include({ advEstimator: 'toy_values', useCritic: true });
      // Registries belong to a host: one without the plugin does not know the estimator.
      await expectHostError(configWith([], 'algorithm:\n  adv_estimator: toy_values\n'), {}, 'algorithm.adv_estimator', "'toy_values'", 'gae, grpo, grpo_vectorized');
    });

    it('adds its config section with its defaults, settable from the file and the command line', async () => {
      const defaulted = await createHost(configWith([TOY_DIR]), { skipEngine: true });
      expect(defaulted.config.toy).to.deep.equal({ bonus: 1 });
      const fromFile = await createHost(configWith([TOY_DIR], 'toy:\n  bonus: 5\n'), { skipEngine: true });
      expect(fromFile.config.toy).to.deep.equal({ bonus: 5 });
      const fromCli = await createHost(configWith([TOY_DIR]), { skipEngine: true, overrides: ['toy.bonus=7'] });
      expect(fromCli.config.toy).to.deep.equal({ bonus: 7 });
      expect(fromCli.container.get(TOKENS.Config)).to.equal(fromCli.config);
    });

    it('rejects an unknown key in its section, and the section without the plugin', async () => {
      const withPlugin = configWith([TOY_DIR], 'toy:\n  bonsu: 5\n');
      await expectHostError(withPlugin, {}, withPlugin, "'toy.bonsu'", "did you mean 'toy.bonus'");
      const withoutPlugin = writeYaml('toy:\n  bonus: 5\n');
      await expectHostError(withoutPlugin, {}, withoutPlugin, "unknown key 'toy'");
    });

    it('is found from a path to its plugin.json as well as its directory', async () => {
      const host = await createHost(configWith([path.join(TOY_DIR, 'plugin.json')], 'algorithm:\n  name: toy\n'), { skipEngine: true });
      expect(host.container.get(TOKENS.RewardManager)).to.be.instanceOf(ToyRewardManager);
    });

    it('fails for an unknown algorithm.name, listing the available ones (the plugin’s included)', async () => {
      const file = configWith([TOY_DIR], 'algorithm:\n  name: toyy\n');
      await expectHostError(file, {}, 'algorithm.name', "'toyy'", 'ppo', 'grpo', 'reinforce_plus_plus', 'toy');
      await expectHostError(configWith([]), { overrides: ['algorithm.name=toy'] }, "unknown algorithm 'toy'", 'available: ppo, grpo, reinforce_plus_plus');
    });

    it('may be registered from the command line (plugins=[...]) relative to the working directory', async () => {
      const file = writeYaml('algorithm:\n  name: toy\n');
      const relative = `./${path.relative(process.cwd(), TOY_DIR)}`;
      const host = await createHost(file, { skipEngine: true, overrides: [`plugins=[${relative}]`] });
      expect(host.plugins.map((p) => p.name)).to.deep.equal(['toy']);
    });

    it('is still found from the run’s written config.yaml (flowrl eval CHECKPOINT reads it)', async () => {
      const host = await createHost(configWith([TOY_DIR], 'algorithm:\n  name: toy\n'), { skipEngine: true });
      const written = path.join(work, `run-${++counter}`, 'checkpoints', 'global_step_1', 'config.yaml');
      writeConfig(written, host.config);
      const again = await createHost(written, { skipEngine: true });
      expect(again.plugins.map((p) => p.name)).to.deep.equal(['toy']);
      expect(again.container.get(TOKENS.RewardManager)).to.be.instanceOf(ToyRewardManager);
    });
  });

  describe('a plugin whose default export is a ContainerModule with an asynchronous load', () => {
    it('is loaded, and its rebinding takes effect', async () => {
      const { AsyncRewardManager } = (await import(pathToFileURL(path.join(ASYNC_DIR, 'index.ts')).href)) as typeof import('./fixtures/plugins/async-load/index.js');
      const host = await createHost(configWith([ASYNC_DIR]), { skipEngine: true });
      expect(host.plugins.map((p) => p.name)).to.deep.equal(['async-load']);
      expect(host.container.get(TOKENS.RewardManager)).to.be.instanceOf(AsyncRewardManager);
    });
  });

  describe('a plugin trainer written against the Trainer contract (no RLTrainer)', () => {
    it('is what `flowrl eval` evaluates', async () => {
      const file = writeCountdownConfig(tempDir(), { plugins: [fixture('plugins', 'own-trainer')] });
      const printed: string[] = [];
      const log = console.log;
      console.log = (line: string) => printed.push(line);
      try {
        await evalCommand([file]);
      } finally {
        console.log = log;
      }
      expect(printed.map((line) => JSON.parse(line))).to.deep.equal([{ 'val/prompts': 96 }]);
    });
  });

  describe('plugins that replace the same role', () => {
    const FLOWRL = path.join(ROOT, 'plugin.json');
    const flowrlConfig = 'algorithm:\n  name: flowrl\n';

    it('two plugins replacing the Trainer are an error naming both and the role, in either order', async () => {
      const ownTrainer = fixture('plugins', 'own-trainer', 'plugin.json');
      for (const order of [[FLOWRL, ownTrainer], [ownTrainer, FLOWRL]]) {
        await expectHostError(configWith(order, flowrlConfig), {}, "plugins '", 'both replace Trainer', "'flowrl'", "'own-trainer'", 'declare it in that one\'s plugin.json');
      }
      // Without algorithm flowrl the FlowRL plugin replaces nothing: no clash.
      const host = await createHost(configWith([FLOWRL, ownTrainer]), { skipEngine: true });
      expect([...host.replacements].map(([role, p]) => `${role} ${p.name}`)).to.deep.equal(['Trainer own-trainer']);
    });

    it('a plugin that extends the other loads after it, wherever it is listed, and its role wins', async () => {
      const extender = fixture('plugins', 'own-trainer-extends', 'plugin.json');
      const host = await createHost(configWith([extender, FLOWRL], flowrlConfig), { skipEngine: true });
      expect(host.plugins.map((p) => p.name)).to.deep.equal(['flowrl', 'own-trainer-extends']);
      const { CountingTrainer } = (await import(pathToFileURL(fixture('plugins', 'own-trainer', 'index.ts')).href)) as { CountingTrainer: new (...args: never[]) => unknown };
      expect(host.container.get(TOKENS.Trainer)).to.be.instanceOf(CountingTrainer);
      expect(Object.fromEntries([...host.replacements].map(([role, p]) => [role, p.name]))).to.deep.equal({ Actor: 'flowrl', Worker: 'flowrl', Trainer: 'own-trainer-extends' });
      await expectHostError(configWith([extender]), {}, "extends 'flowrl', which is not registered");
    });

    it('a rebind the manifest does not declare in overrides is refused', async () => {
      await expectHostError(configWith([fixture('plugins', 'undeclared', 'plugin.json')]), {}, 'undeclared', 'rebinds Actor', "which 'overrides' does not list");
    });

    it('bind of a host role (instead of rebind) is refused, naming it and the fix, declared or not; bind of a contribution point is not', async () => {
      const inversify = JSON.stringify(import.meta.resolve('inversify'));
      const core = JSON.stringify(pathToFileURL(path.join(ROOT, 'core-adapters', 'index.ts')).href);
      const binding = (overrides: string[], body: string) => {
        const file = writeManifest((m) => {
          m.entry = 'entry.mjs';
          m.overrides = overrides;
          delete m.source;
        });
        fs.writeFileSync(path.join(path.dirname(file), 'entry.mjs'), `import { ContainerModule } from ${inversify};\nimport { RLTrainer, TOKENS } from ${core};\nexport default new ContainerModule(({ bind }) => { ${body} });\n`);
        return file;
      };
      for (const overrides of [[], ['Trainer']]) {
        await expectHostError(configWith([binding(overrides, 'bind(TOKENS.Trainer).to(RLTrainer).inSingletonScope();')]), {}, 'binds Trainer, which the host binds already', 'rebind(TOKENS.Trainer)', "list Trainer in 'overrides'");
      }
      const sink = binding([], 'bind(TOKENS.MetricsSink).toConstantValue({ log() {} });');
      const host = await createHost(configWith([sink]), { skipEngine: true });
      expect(host.container.getAll(TOKENS.MetricsSink).length).to.be.at.least(2);
    });
  });

  describe('an algorithm that names its policy loss', () => {
    it('trains with it while actor.policy_loss.loss_mode is left at vanilla; another loss_mode set wins', async () => {
      const plugin = fixture('plugins', 'gspo-algorithm', 'plugin.json');
      const host = await createHost(configWith([plugin], 'algorithm:\n  name: my_gspo\n'), { skipEngine: true });
      expect(host.config.actor_rollout_ref.actor.policy_loss.loss_mode).to.equal('gspo');
      expect(host.container.get(TOKENS.PolicyLoss)).to.equal(host.registries.policyLosses.get('gspo'));
      const other = await createHost(configWith([plugin], 'algorithm:\n  name: my_gspo\n'), { overrides: ['actor_rollout_ref.actor.policy_loss.loss_mode=cispo'], skipEngine: true });
      expect(other.config.actor_rollout_ref.actor.policy_loss.loss_mode).to.equal('cispo');
      const grpo = await createHost(configWith([plugin]), { skipEngine: true });
      expect(grpo.config.actor_rollout_ref.actor.policy_loss.loss_mode).to.equal('vanilla');
    });
  });

  describe('a build older than its sources', () => {
    it('the built command warns naming the newest source the build predates: the entry\'s, or a module beside it; tests and dependencies do not count', async function () {
      this.timeout(120_000);
      const dir = tempDir('flowrl-stale-');
      fs.mkdirSync(path.join(dir, 'dist'));
      fs.mkdirSync(path.join(dir, 'test'));
      fs.mkdirSync(path.join(dir, 'node_modules', 'dep'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'plugin.json'), JSON.stringify({ name: 'stale', version: '1.0.0', host: '>=0.0.0', entry: 'dist/index.js', source: 'index.ts', algorithms: [], overrides: [] }));
      fs.writeFileSync(path.join(dir, 'dist', 'index.js'), `import { ContainerModule } from ${JSON.stringify(import.meta.resolve('inversify'))};\nexport default new ContainerModule(() => {});\n`);
      fs.writeFileSync(path.join(dir, 'index.ts'), "export { default } from './helper.js';\n");
      fs.writeFileSync(path.join(dir, 'helper.ts'), 'export default 1;\n');
      fs.writeFileSync(path.join(dir, 'test', 'stale.test.ts'), '');
      fs.writeFileSync(path.join(dir, 'node_modules', 'dep', 'index.ts'), '');
      fs.writeFileSync(path.join(dir, 'list.yaml'), 'plugins: [./plugin.json]\n');
      const at = (file: string, hoursAgo: number) => fs.utimesSync(path.join(dir, file), new Date(Date.now() - hoursAgo * 3_600_000), new Date(Date.now() - hoursAgo * 3_600_000));
      const list = () => runBuiltFlowrl(['plugins', path.join(dir, 'list.yaml')]);
      // The build after every source: silent, though a test and a dependency are newer.
      at('index.ts', 3);
      at('helper.ts', 3);
      at('dist/index.js', 2);
      const fresh = await list();
      expect(fresh.status, fresh.stderr).to.equal(0);
      expect(fresh.stderr).to.not.include('is older than');
      // A module the entry imports changed after the build: named.
      at('helper.ts', 1);
      const stale = await list();
      expect(stale.stderr).to.include('plugin stale: ').and.include('dist/index.js is older than').and.include('helper.ts');
      // The entry's own source newer: it is the one named.
      at('index.ts', 0.5);
      expect((await list()).stderr).to.match(/is older than \S*index\.ts;/);
    });
  });

  describe('a plugin with its own copy of the host', () => {
    it('stops before importing the plugin, naming both copies and what to do', async () => {
      const dir = path.join(work, `own-copy-${++counter}`);
      fs.mkdirSync(path.join(dir, 'node_modules', '@tensorflow', 'tfjs-core'), { recursive: true });
      // A second tfjs-core where the plugin resolves it (its folder's node_modules).
      fs.writeFileSync(path.join(dir, 'node_modules', '@tensorflow', 'tfjs-core', 'package.json'), JSON.stringify({ name: '@tensorflow/tfjs-core', version: '4.22.0', main: 'index.js' }));
      fs.writeFileSync(path.join(dir, 'node_modules', '@tensorflow', 'tfjs-core', 'index.js'), 'throw new Error("the second copy was imported");\n');
      fs.writeFileSync(path.join(dir, 'index.js'), "import { ContainerModule } from 'inversify';\nexport default new ContainerModule(() => {});\n");
      const manifest = writeManifest((m) => Object.assign(m, { entry: 'index.js', source: undefined }));
      fs.copyFileSync(manifest, path.join(dir, 'plugin.json'));
      await expectHostError(configWith([path.join(dir, 'plugin.json')]), {}, 'resolves its own @tensorflow/tfjs-core', path.join(fs.realpathSync(dir), 'node_modules', '@tensorflow', 'tfjs-core'), 'npm uninstall @tensorflow/tfjs-core there');
      // Reached through a link (npm link puts one in the project's node_modules): the message says to install a copy.
      const link = path.join(work, `linked-${counter}`);
      fs.symlinkSync(dir, link);
      await expectHostError(configWith([path.join(link, 'plugin.json')]), {}, 'resolves its own @tensorflow/tfjs-core', `linked from ${fs.realpathSync(dir)} (npm link)`, `npm install --install-links ${fs.realpathSync(dir)}`);
    });
  });

  describe('manifest validation', () => {
    /** A config registering one plugin.json; createHost must fail naming that file and the fragments. */
    async function expectManifestError(manifestFile: string, ...fragments: string[]): Promise<void> {
      await expectHostError(configWith([manifestFile]), {}, manifestFile, ...fragments);
    }

    it("names the file and 'name' when the name is missing", async () => {
      await expectManifestError(
        writeManifest((m) => delete m.name),
        "field 'name'",
        'missing',
      );
    });

    it("names the file and 'entry' when the entry is missing", async () => {
      await expectManifestError(
        writeManifest((m) => delete m.entry),
        "field 'entry'",
      );
    });

    it("names the file and 'version' when the version is not semver", async () => {
      await expectManifestError(
        writeManifest((m) => (m.version = 'one')),
        "field 'version'",
        'semver',
      );
    });

    it('names the file and the host range when it excludes this host', async () => {
      await expectManifestError(
        writeManifest((m) => (m.host = `<${HOST_VERSION}`)),
        `<${HOST_VERSION}`,
        `this host is ${HOST_VERSION}`,
      );
      await expectManifestError(
        writeManifest((m) => (m.host = 'not a range!')),
        "field 'host'",
      );
    });

    it('accepts a host range that includes this host', async () => {
      const file = writeManifest((m) => {
        m.host = `^${HOST_VERSION}`;
        m.source = path.join(TOY_DIR, 'index.ts');
      });
      const host = await createHost(configWith([file]), { skipEngine: true });
      expect(host.plugins[0].host).to.equal(`^${HOST_VERSION}`);
    });

    it('names the file and the binding when overrides names an unknown binding', async () => {
      await expectManifestError(
        writeManifest((m) => (m.overrides = ['RewardManager', 'Frobnicator'])),
        'overrides',
        "'Frobnicator'",
        OVERRIDABLE_BINDINGS[0],
      );
    });

    it('names the file and the field of a bad algorithm entry', async () => {
      await expectManifestError(
        writeManifest((m) => (m.algorithms = [{ name: 'x', adv_estimator: 'grpo' }])),
        'algorithms[0]',
        "'needs_reference_policy'",
      );
      await expectManifestError(
        writeManifest((m) => delete m.algorithms),
        "field 'algorithms'",
      );
    });

    it('names a plugin.json that is not JSON', async () => {
      await expectManifestError(
        writeManifest(() => undefined, '{ "name": "oops", '),
        'not a readable JSON plugin manifest',
      );
    });

    it('rejects an algorithm name that is already taken, naming both sources', async () => {
      const taken = writeManifest((m) => (m.algorithms = [{ name: 'grpo', adv_estimator: 'grpo', needs_reference_policy: false }]));
      await expectHostError(configWith([taken]), {}, "algorithm 'grpo'", 'tmp-plugin', 'core');
      const clash = writeManifest((m) => (m.algorithms = [{ name: 'toy', adv_estimator: 'gae', needs_reference_policy: true }]));
      await expectHostError(configWith([TOY_DIR, clash]), {}, "algorithm 'toy'", 'tmp-plugin', 'already provided by toy');
    });

    it('an estimator, loss or scorer registered under a taken name is one InputError naming the manifest and both providers', async () => {
      for (const [registry, call, fragment] of [
        ['advantageEstimators', "register('grpo', () => ({}))", "advantage estimator 'grpo'"],
        ['policyLosses', "register('vanilla', () => ({}))", "policy loss 'vanilla'"],
        ['scorers', "register('gsm8k', () => 0)", "scorer for data_source 'gsm8k'"],
      ] as const) {
        const file = writeEntryPlugin(`registries.${registry}.${call};`);
        await expectHostError(configWith([file]), {}, file, fragment, 'from plugin tmp-plugin', 'already registered by core');
      }
    });

    it('a scorer a plugin registers by data_source scores that data_source: the dataset accepts its rows, the reward manager uses it, flowrl plugins names its provider', async () => {
      const file = writeEntryPlugin("registries.scorers.register('acme/yes-no', (solution) => (solution.includes('yes') ? 1 : 0));");
      const host = await createHost(configWith([file]), { skipEngine: true });
      expect(host.registries.scorers.providers().get('acme/yes-no')).to.include('plugin tmp-plugin');
      const scorer = host.container.get<import('../core-adapters/index.js').ScorerRegistry>(TOKENS.ScorerRegistry).scorer('acme/yes-no')!;
      expect([scorer('yes', null), scorer('no', null)]).to.deep.equal([1, 0]);
      const listed = await runFlowrl(['plugins', configWith([file])], 60_000);
      expect(listed.stdout).to.include('acme/yes-no [plugin tmp-plugin]')
        // Every verl v0.9.0 estimator, in verl's registration order.
        .and.include('advantage estimators: gae, grpo, grpo_vectorized, gdpo, grpo_passk, reinforce_plus_plus_baseline, rloo, opo, reinforce_plus_plus, remax, gpg, rloo_vectorized, optimal_token_baseline, tir_optimal_token_baseline\n');
    });

    it('an exported subclass of an injected base without @injectFromBase() is refused when the plugin loads, naming the class and the fix', async () => {
      const core = pathToFileURL(path.resolve('core-adapters/index.ts')).href;
      const entry = (decorate: string) =>
        `import { injectable, injectFromBase } from ${JSON.stringify(import.meta.resolve('inversify'))};\nimport { NaiveRewardManager } from ${JSON.stringify(core)};\nexport class LoudRewards extends NaiveRewardManager {}\n${decorate}\n`;
      const forgot = writeEntryPlugin('', entry('injectable()(LoudRewards);'));
      await expectHostError(configWith([forgot]), {}, forgot, 'class LoudRewards', 'extends NaiveRewardManager', '@injectFromBase()');
      const fine = writeEntryPlugin('', entry('injectFromBase()(LoudRewards);\ninjectable()(LoudRewards);'));
      await createHost(configWith([fine]), { skipEngine: true });
    });

    it("an installed plugin package whose exports map omits './plugin.json' is named with the fix; with it, the package loads", async () => {
      // A project with the package installed (Node caches each package.json it reads, so one project per case).
      const project = (exports: Record<string, string>): string => {
        const dir = path.join(work, `package-${++counter}`);
        const pkg = path.join(dir, 'node_modules', 'acme-plugin');
        fs.mkdirSync(pkg, { recursive: true });
        fs.cpSync(path.dirname(writeEntryPlugin('')), pkg, { recursive: true });
        fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'acme-plugin', version: '1.0.0', type: 'module', exports }));
        const config = path.join(dir, 'config.yaml');
        fs.writeFileSync(config, `plugins: [acme-plugin]\nactor_rollout_ref:\n  model:\n    path: ${JSON.stringify(tokenizerDir)}\n`);
        return config;
      };
      await expectHostError(project({ '.': './entry.mjs' }), {}, "package 'acme-plugin'", "does not export './plugin.json'", '"./plugin.json": "./plugin.json"');
      const host = await createHost(project({ '.': './entry.mjs', './plugin.json': './plugin.json' }), { skipEngine: true });
      expect(host.plugins.map((p) => p.name)).to.deep.equal(['tmp-plugin']);
    });

    it('a manifest declares its keys under config (default, doc, rules); the host refuses bad values naming the key, and bad declarations naming the field', async () => {
      const declared = writeManifest((m) => {
        m.entry = 'entry.mjs';
        delete m.source;
        m.config = { acme: { level: { default: 2, doc: 'How hard.', integer: true, min: 1, max: 5 }, mode: { default: 'fast', doc: 'Speed.', choices: ['fast', 'slow'] }, dir: { default: null, doc: 'Where.', nullable: 'string' } } };
      });
      fs.writeFileSync(path.join(path.dirname(declared), 'entry.mjs'), `import { ContainerModule } from ${JSON.stringify(import.meta.resolve('inversify'))};\nexport default () => new ContainerModule(() => {});\n`);
      const host = await createHost(configWith([declared]), { skipEngine: true });
      expect(host.config.acme).to.deep.equal({ level: 2, mode: 'fast', dir: null });
      await expectHostError(configWith([declared], 'acme:\n  level: 6\n'), {}, "key 'acme.level' must be a whole number in [1, 5]");
      await expectHostError(configWith([declared], 'acme:\n  level: 2.5\n'), {}, "'acme.level'");
      await expectHostError(configWith([declared], 'acme:\n  mode: medium\n'), {}, "key 'acme.mode' is 'medium'; allowed: fast, slow");
      await expectHostError(configWith([declared], 'acme:\n  dir: 3\n'), {}, "key 'acme.dir' must be a string or null");
      await expectHostError(configWith([declared]), { overrides: ['acme.level=0'] }, 'command line', "'acme.level'");
      for (const [config, fragment] of [
        [{ acme: { level: { default: 2 } } }, 'config.acme.level'],
        [{ acme: { level: { default: 2, doc: 'x', minimum: 1 } } }, "unknown field 'minimum'"],
        [{ acme: { level: { default: 2, doc: 'x', min: 'one' } } }, 'config.acme.level.min'],
        [{ acme: { mode: { default: 'other', doc: 'x', choices: ['fast'] } } }, 'not among its choices'],
      ] as const) {
        const bad = writeManifest((m) => (m.config = config));
        await expectManifestError(bad, fragment);
      }
      await expectManifestError(writeManifest((m) => ((m.config = { a: { b: { default: 1, doc: 'x' } } }), (m.defaults = { a: { b: 1 } }))), "'config'", "'defaults', not both");
    });

    it('rejects the same plugin registered twice', async () => {
      await expectHostError(configWith([TOY_DIR, path.join(TOY_DIR, 'plugin.json')]), {}, "plugin 'toy'", 'registered twice');
    });

    it('names the file when neither the entry nor the source exists', async () => {
      const file = writeManifest(() => undefined);
      await expectManifestError(file, "entry 'dist/index.js' not found", "source 'index.ts'");
    });

    it('names the file when the entry module provides no ContainerModule', async () => {
      await expectManifestError(path.join(NO_MODULE_DIR, 'plugin.json'), 'provides no ContainerModule');
    });

    it('names a plugins: entry that does not exist', async () => {
      const file = writeYaml('plugins: [./nowhere]\n');
      await expectHostError(file, {}, 'plugins', "'./nowhere'");
      const single = writeYaml('plugins: ./also-nowhere\n');
      await expectHostError(single, {}, "'./also-nowhere'");
    });
  });

  describe('flowrl plugins CONFIG', function () {
    this.timeout(60_000);
    const runs: Record<string, Promise<CliResult>> = {};
    let badManifest = '';

    const flowrl = (args: string[]) => runFlowrl(args, 60_000);

    const describeRun = (r: CliResult) => `exit ${r.status}\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`;

    before(async () => {
      badManifest = writeManifest((m) => (m.version = 'one'));
      runs.good = flowrl(['plugins', configWith([TOY_DIR], 'algorithm:\n  name: toy\n')]);
      runs.bad = flowrl(['plugins', configWith([TOY_DIR, badManifest])]);
      await Promise.allSettled(Object.values(runs));
    });

    it('lists the plugin, its algorithm and its overrides, and exits 0', async () => {
      const r = await runs.good;
      expect(r.status, describeRun(r)).to.equal(0);
      const lines = r.stdout.split('\n');
      expect(lines[0]).to.equal('algorithms: ppo, grpo, reinforce_plus_plus, toy, toy_valued (selected: toy)');
      expect(r.stdout).to.include(`toy 0.2.0 (host >=0.0.0) from ${path.join(TOY_DIR, 'plugin.json')}`);
      expect(lines.find((l) => l.trim().startsWith('algorithms: toy')), describeRun(r)).to.include('toy [advantages grpo]');
      expect(lines.find((l) => l.trim().startsWith('overrides:')), describeRun(r)).to.match(/overrides:\s+RewardManager$/);
    });

    it('exits 2 with one line naming the broken plugin.json and no stack trace', async () => {
      const r = await runs.bad;
      expect(r.status, describeRun(r)).to.equal(2);
      expect(r.stdout, describeRun(r)).to.equal('');
      expect(r.stderr).to.not.match(/^\s+at /m);
      const lines = r.stderr.split('\n').filter((l) => l.trim() !== '');
      expect(lines, describeRun(r)).to.have.length(1);
      expect(lines[0]).to.include('flowrl plugins:').and.include(badManifest).and.include("field 'version'");
    });
  });
});
