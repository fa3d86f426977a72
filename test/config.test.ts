// Configuration: defaults < plugin defaults < user file < command-line overrides, validation messages
// that name the source and the key, and input paths relative to the config file.
import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import { CORE_DEFAULTS, InputError, KEY_CHOICES, readConfigFile, resolveConfig, writeConfig, type ConfigTree } from '../core-adapters/index.js';
import { parseOverride, validateConfig } from '../core-adapters/config/load.js';
import { expectInputError, tempDir } from './helpers.js';

const SCHEMA = CORE_DEFAULTS as unknown as ConfigTree;
type ConfigValueTree = ConfigTree | string;

/** A config file path in a fresh directory (resolveConfig never reads it; it names it and resolves paths against it). */
function configPath(name = 'run.yaml'): string {
  return path.join(tempDir('flowrl-config-'), 'configs', name);
}

describe('config', () => {
  it('every choice key exists, its default is one of its choices, and another value is rejected naming the choices', () => {
    for (const [key, choices] of Object.entries(KEY_CHOICES)) {
      const value = key.split('.').reduce<unknown>((node, part) => (node as ConfigTree)[part], SCHEMA);
      // A nullable key (algorithm.filter_groups.metric) may default to null; a set value must be a choice.
      if (value !== null) expect(choices, key).to.include(value);
      const bad = key.split('.').reduceRight<ConfigValueTree>((inner, part) => ({ [part]: inner }), 'not-a-choice' as unknown as ConfigValueTree);
      expectInputError(() => resolveConfig({ user: bad as ConfigTree, userFile: configPath() }), `'${key}'`, choices.join(', '));
    }
  });

  describe('resolveConfig', () => {
    it('fills every default when the file sets nothing', () => {
      const config = resolveConfig({ user: {}, userFile: configPath() });
      expect(config.algorithm.name).to.equal('grpo');
      expect(config.algorithm.adv_estimator).to.equal(null);
      expect(config.data.train_batch_size).to.equal(8);
      expect(config.actor_rollout_ref.actor.optim.lr).to.equal(1e-6);
      expect(config.actor_rollout_ref.actor.optim.betas).to.deep.equal([0.9, 0.999]);
      expect(config.actor_rollout_ref.actor.loss_agg_mode).to.equal('token-mean');
      expect(config.engine.backend).to.equal('auto');
      expect(config.plugins).to.deep.equal([]);
      expect(config.trainer.val_before_train).to.equal(true);
    });

    it('defaults trainer.default_local_dir to runs/<experiment_name>', () => {
      expect(resolveConfig({ user: {}, userFile: configPath() }).trainer.default_local_dir).to.equal(path.join('runs', 'default'));
      const named = resolveConfig({ user: { trainer: { experiment_name: 'exp7' } }, userFile: configPath() });
      expect(named.trainer.default_local_dir).to.equal(path.join('runs', 'exp7'));
      const fromCommandLine = resolveConfig({ user: {}, userFile: configPath(), overrides: ['trainer.experiment_name=cli'] });
      expect(fromCommandLine.trainer.default_local_dir).to.equal(path.join('runs', 'cli'));
      const explicit = resolveConfig({ user: { trainer: { experiment_name: 'exp7', default_local_dir: 'out/here' } }, userFile: configPath() });
      expect(explicit.trainer.default_local_dir, 'an output path is not resolved against the config file').to.equal('out/here');
    });

    it('lets the file override defaults key by key, replacing lists whole', () => {
      const config = resolveConfig({
        user: { actor_rollout_ref: { actor: { optim: { lr: 3e-4, betas: [0.5] } } }, algorithm: { name: 'ppo' } },
        userFile: configPath(),
      });
      expect(config.actor_rollout_ref.actor.optim.lr).to.equal(3e-4);
      expect(config.actor_rollout_ref.actor.optim.betas).to.deep.equal([0.5]);
      // Siblings of an overridden key keep their defaults.
      expect(config.actor_rollout_ref.actor.optim.weight_decay).to.equal(0.01);
      expect(config.actor_rollout_ref.actor.ppo_epochs).to.equal(1);
      expect(config.algorithm.name).to.equal('ppo');
      expect(config.algorithm.gamma).to.equal(1.0);
    });

    it('does not change the core defaults it merges over', () => {
      const before = structuredClone(CORE_DEFAULTS);
      const config = resolveConfig({ user: { actor_rollout_ref: { actor: { optim: { betas: [0.1, 0.2] } } } }, userFile: configPath() });
      config.data.train_batch_size = 99;
      config.actor_rollout_ref.actor.optim.betas.push(0.3);
      config.critic.optim.betas.push(0.3);
      config.plugins.push('x');
      expect(CORE_DEFAULTS).to.deep.equal(before);
    });

    it('applies dotted command-line overrides over the file, typed as YAML scalars and lists', () => {
      const config = resolveConfig({
        user: { actor_rollout_ref: { actor: { optim: { lr: 1e-3 } } }, trainer: { val_before_train: true }, data: { train_files: 'file.jsonl' } },
        userFile: configPath(),
        overrides: ['actor_rollout_ref.actor.optim.lr=1e-5', 'trainer.val_before_train=false', 'data.train_files=[a.jsonl,b.jsonl]', 'data.train_batch_size=16'],
      });
      expect(config.actor_rollout_ref.actor.optim.lr).to.be.a('number').that.equals(1e-5);
      expect(config.trainer.val_before_train).to.equal(false);
      expect(config.data.train_files).to.deep.equal(['a.jsonl', 'b.jsonl']);
      expect(config.data.train_batch_size).to.equal(16);
    });

    it('applies overrides in order (the last one wins)', () => {
      const config = resolveConfig({ user: {}, userFile: configPath(), overrides: ['data.train_batch_size=4', 'data.train_batch_size=32'] });
      expect(config.data.train_batch_size).to.equal(32);
    });

    it('names the file, the dotted key and a near miss for an unknown key in the file', () => {
      const file = configPath('near-miss.yaml');
      const error = expectInputError(
        () => resolveConfig({ user: { actor_rollout_ref: { actor: { optim: { lrr: 1e-5 } } } }, userFile: file }),
        file,
        "'actor_rollout_ref.actor.optim.lrr'",
        "did you mean 'actor_rollout_ref.actor.optim.lr'",
      );
      expect(error.exitCode).to.equal(2);
    });

    it('suggests a near-miss section name at the top level', () => {
      expectInputError(() => resolveConfig({ user: { algorithim: { name: 'ppo' } }, userFile: configPath() }), "'algorithim'", "did you mean 'algorithm'");
    });

    it('lists the keys of the section when an unknown key has no near miss', () => {
      expectInputError(
        () => resolveConfig({ user: { trainer: { completely_unrelated_setting: 1 } }, userFile: configPath() }),
        "'trainer.completely_unrelated_setting'",
        'keys here:',
        'experiment_name',
      );
    });

    it("names 'command line' for an unknown key in an override", () => {
      const error = expectInputError(
        () => resolveConfig({ user: {}, userFile: configPath(), overrides: ['actor_rollout_ref.actor.optim.lrr=1e-5'] }),
        'command line',
        "'actor_rollout_ref.actor.optim.lrr'",
        "did you mean 'actor_rollout_ref.actor.optim.lr'",
      );
      expect(error.message).to.not.include('.yaml');
    });

    it('names the key and the expected type for a wrongly typed value', () => {
      const file = configPath();
      expectInputError(
        () => resolveConfig({ user: { data: { train_batch_size: 'eight' } }, userFile: file }),
        file,
        "'data.train_batch_size'",
        'must be a number',
        'eight',
      );
      expectInputError(() => resolveConfig({ user: { trainer: { val_before_train: 'yes please' } }, userFile: file }), "'trainer.val_before_train'", 'boolean');
      expectInputError(() => resolveConfig({ user: { data: 3 }, userFile: file }), "'data'", 'a mapping');
      expectInputError(() => resolveConfig({ user: { actor_rollout_ref: { actor: { optim: { betas: 0.9 } } } }, userFile: file }), "'actor_rollout_ref.actor.optim.betas'", 'a list');
      expectInputError(
        () => resolveConfig({ user: { actor_rollout_ref: { actor: { optim: { betas: ['a', 'b'] } } } }, userFile: file }),
        "'actor_rollout_ref.actor.optim.betas'",
        'a list of numbers',
      );
    });

    it('checks nullable keys against their declared type and accepts null', () => {
      const file = configPath();
      expectInputError(() => resolveConfig({ user: { data: { val_max_samples: 'all' } }, userFile: file }), "'data.val_max_samples'", 'a number or null');
      expectInputError(() => resolveConfig({ user: { actor_rollout_ref: { model: { path: 5 } } }, userFile: file }), "'actor_rollout_ref.model.path'", 'a string or null');
      expectInputError(() => resolveConfig({ user: { data: { train_files: [1, 2] } }, userFile: file }), "'data.train_files'", 'a path or a list of paths');
      const config = resolveConfig({ user: { data: { val_max_samples: 4, seed: null } }, userFile: file });
      expect(config.data.val_max_samples).to.equal(4);
      expect(config.data.seed).to.equal(null);
    });

    it('checks the type of command-line overrides too', () => {
      expectInputError(
        () => resolveConfig({ user: {}, userFile: configPath(), overrides: ['data.train_batch_size=eight'] }),
        'command line',
        "'data.train_batch_size'",
        'must be a number',
      );
    });

    it('lists the allowed values for a choice key with a bad value', () => {
      const file = configPath();
      expectInputError(
        () => resolveConfig({ user: { actor_rollout_ref: { actor: { loss_agg_mode: 'seq-mean-token-max' } } }, userFile: file }),
        file,
        "'actor_rollout_ref.actor.loss_agg_mode'",
        'seq-mean-token-max',
        'allowed: token-mean, token-sum, seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm',
      );
      expectInputError(() => resolveConfig({ user: { engine: { backend: 'gpu' } }, userFile: file }), "'engine.backend'", "'gpu'", 'allowed: auto, tensorflow, webgpu, wasm, cpu');
      expectInputError(
        () => resolveConfig({ user: {}, userFile: file, overrides: ['algorithm.kl_ctrl.type=sometimes'] }),
        'command line',
        "'algorithm.kl_ctrl.type'",
        'allowed: fixed, adaptive',
      );
    });

    it('accepts any mapping under an open key (reward_model.reward_kwargs) but not a scalar', () => {
      const config = resolveConfig({ user: { reward_model: { reward_kwargs: { countdown: { format_score: 0.1 } } } }, userFile: configPath() });
      expect(config.reward_model.reward_kwargs).to.deep.equal({ countdown: { format_score: 0.1 } });
      expectInputError(() => resolveConfig({ user: { reward_model: { reward_kwargs: 3 } }, userFile: configPath() }), "'reward_model.reward_kwargs'", 'a mapping');
    });

    it('accepts plugins as one path or a list of paths', () => {
      expect(resolveConfig({ user: { plugins: './p' }, userFile: configPath() }).plugins).to.equal('./p');
      expect(resolveConfig({ user: { plugins: ['./p', 'q'] }, userFile: configPath() }).plugins).to.deep.equal(['./p', 'q']);
      expectInputError(() => resolveConfig({ user: { plugins: [1] }, userFile: configPath() }), "'plugins'");
    });

    it('rejects a micro-batch size below 1 (a zero size would make Batch.split loop forever)', () => {
      expectInputError(
        () => resolveConfig({ user: { actor_rollout_ref: { actor: { ppo_micro_batch_size: 0 } } }, userFile: configPath() }),
        "'actor_rollout_ref.actor.ppo_micro_batch_size'",
      );
      expectInputError(() => resolveConfig({ user: {}, userFile: configPath(), overrides: ['critic.ppo_micro_batch_size=-4'] }), "'critic.ppo_micro_batch_size'");
    });
  });

  describe('plugin defaults', () => {
    const source = '/plugins/myplugin/plugin.json';
    const pluginDefaults = [{ source, defaults: { myplugin: { beta: 15, mode: 'fast' } } as ConfigTree }];

    it('adds a section whose keys default to the plugin values and may be set', () => {
      const defaulted = resolveConfig({ user: {}, userFile: configPath(), pluginDefaults });
      expect(defaulted.myplugin).to.deep.equal({ beta: 15, mode: 'fast' });
      const set = resolveConfig({ user: { myplugin: { beta: 3 } }, userFile: configPath(), pluginDefaults, overrides: ['myplugin.mode=slow'] });
      expect(set.myplugin).to.deep.equal({ beta: 3, mode: 'slow' });
    });

    it('rejects the plugin section when the plugin is not loaded', () => {
      expectInputError(() => resolveConfig({ user: { myplugin: { beta: 3 } }, userFile: configPath() }), "unknown key 'myplugin'");
    });

    it('rejects an unknown key inside the plugin section and a wrongly typed plugin key', () => {
      const file = configPath();
      expectInputError(() => resolveConfig({ user: { myplugin: { gamma: 1 } }, userFile: file, pluginDefaults }), file, "'myplugin.gamma'");
      expectInputError(() => resolveConfig({ user: {}, userFile: file, pluginDefaults, overrides: ['myplugin.betaa=2'] }), 'command line', "'myplugin.betaa'", "did you mean 'myplugin.beta'");
      expectInputError(() => resolveConfig({ user: { myplugin: { beta: 'high' } }, userFile: file, pluginDefaults }), "'myplugin.beta'", 'must be a number');
    });

    it('may add keys to a core section and change a core default without changing its type', () => {
      const config = resolveConfig({
        user: {},
        userFile: configPath(),
        pluginDefaults: [{ source, defaults: { algorithm: { name: 'flowrl', beta: 15 }, data: { train_batch_size: 4 } } }],
      });
      expect(config.algorithm.name).to.equal('flowrl');
      expect((config.algorithm as Record<string, unknown>).beta).to.equal(15);
      expect(config.algorithm.gamma).to.equal(1.0);
      expect(config.data.train_batch_size).to.equal(4);
    });

    it('fails, naming the plugin, when a plugin default changes the type of a core key', () => {
      expectInputError(
        () => resolveConfig({ user: {}, userFile: configPath(), pluginDefaults: [{ source, defaults: { data: { train_batch_size: 'big' } } }] }),
        source,
        "'data.train_batch_size'",
        'must be a number',
      );
      expectInputError(
        () => resolveConfig({ user: {}, userFile: configPath(), pluginDefaults: [{ source, defaults: { trainer: { progress: 1 } } }] }),
        source,
        "'trainer.progress'",
        'boolean',
      );
    });

    it('merges several plugins in order', () => {
      const config = resolveConfig({
        user: {},
        userFile: configPath(),
        pluginDefaults: [
          { source: '/a/plugin.json', defaults: { shared: { x: 1, y: 1 } } },
          { source: '/b/plugin.json', defaults: { shared: { y: 2 }, other: { z: true } } },
        ],
      });
      expect(config.shared).to.deep.equal({ x: 1, y: 2 });
      expect(config.other).to.deep.equal({ z: true });
    });
  });

  describe('input paths', () => {
    it("resolves input paths in a config file against the file's directory", () => {
      const file = configPath();
      const dir = path.dirname(file);
      const config = resolveConfig({
        user: {
          data: { train_files: 'data/train.jsonl', val_files: ['../val.jsonl', '/abs/val2.jsonl'] },
          actor_rollout_ref: { model: { path: 'models/base', tokenizer_path: './tok' }, rollout: { multi_turn: { tool_config_path: 'tools.yaml' } } },
          critic: { model: { path: 'critic' } },
          custom_reward_function: { path: 'score.ts' },
          sft: { init_config: 'cfg.json' },
        },
        userFile: file,
      });
      expect(config.data.train_files).to.equal(path.join(dir, 'data', 'train.jsonl'));
      expect(config.data.val_files).to.deep.equal([path.resolve(dir, '..', 'val.jsonl'), path.resolve('/abs/val2.jsonl')]);
      expect(config.actor_rollout_ref.model.path).to.equal(path.join(dir, 'models', 'base'));
      expect(config.actor_rollout_ref.model.tokenizer_path).to.equal(path.join(dir, 'tok'));
      expect(config.critic.model.path).to.equal(path.join(dir, 'critic'));
      expect(config.custom_reward_function.path).to.equal(path.join(dir, 'score.ts'));
      expect(config.sft.init_config).to.equal(path.join(dir, 'cfg.json'));
      expect(config.actor_rollout_ref.rollout.multi_turn.tool_config_path).to.equal(path.join(dir, 'tools.yaml'));
    });

    it('leaves output paths and unset inputs alone', () => {
      const config = resolveConfig({ user: { trainer: { default_local_dir: 'runs/x' }, sft: { output_dir: 'out/sft' } }, userFile: configPath() });
      expect(config.trainer.default_local_dir).to.equal('runs/x');
      expect(config.sft.output_dir).to.equal('out/sft');
      expect(config.data.train_files).to.equal(null);
      expect(config.actor_rollout_ref.model.path).to.equal(null);
    });

    it('keeps input paths given on the command line as given (relative to the working directory)', () => {
      const config = resolveConfig({
        user: { actor_rollout_ref: { model: { path: 'in-file' } } },
        userFile: configPath(),
        overrides: ['actor_rollout_ref.model.path=models/cli', 'data.val_files=[v1.jsonl,v2.jsonl]'],
      });
      expect(config.actor_rollout_ref.model.path).to.equal('models/cli');
      expect(config.data.val_files).to.deep.equal(['v1.jsonl', 'v2.jsonl']);
    });

    it('reads a written config back with the same input files (what flowrl eval CHECKPOINT does)', () => {
      const file = configPath();
      const config = resolveConfig({
        user: { data: { train_files: 'train.jsonl' } },
        userFile: file,
        overrides: ['data.val_files=val.jsonl', 'actor_rollout_ref.model.path=models/cli'],
      });
      const written = path.join(tempDir('flowrl-config-'), 'checkpoints', 'global_step_1', 'config.yaml');
      writeConfig(written, config);
      const reread = resolveConfig({ user: readConfigFile(written), userFile: written });
      expect(reread.data.train_files).to.equal(path.resolve(path.dirname(file), 'train.jsonl'));
      expect(path.resolve(reread.data.val_files as string), 'a command-line input path, written and read back').to.equal(path.resolve('val.jsonl'));
      expect(path.resolve(reread.actor_rollout_ref.model.path!)).to.equal(path.resolve('models/cli'));
    });
  });

  describe('parseOverride', () => {
    it('reads the value as a YAML scalar or flow list', () => {
      expect(parseOverride('a.b=1e-5')).to.deep.equal({ key: 'a.b', value: 1e-5 });
      expect(parseOverride('a.b=3')).to.deep.equal({ key: 'a.b', value: 3 });
      expect(parseOverride('a.b=false')).to.deep.equal({ key: 'a.b', value: false });
      expect(parseOverride('a.b=null')).to.deep.equal({ key: 'a.b', value: null });
      expect(parseOverride('a.b=hello world')).to.deep.equal({ key: 'a.b', value: 'hello world' });
      expect(parseOverride("a.b='007'")).to.deep.equal({ key: 'a.b', value: '007' });
      expect(parseOverride('a.b=[x.jsonl, y.jsonl]')).to.deep.equal({ key: 'a.b', value: ['x.jsonl', 'y.jsonl'] });
      expect(parseOverride('a.b=[0.9,0.95]')).to.deep.equal({ key: 'a.b', value: [0.9, 0.95] });
      expect(parseOverride('a.b=')).to.deep.equal({ key: 'a.b', value: '' });
    });

    it('splits at the first = only', () => {
      expect(parseOverride('a.b=x=y')).to.deep.equal({ key: 'a.b', value: 'x=y' });
    });

    it('keeps a value YAML cannot parse as the raw string', () => {
      expect(parseOverride('a.b=[unclosed')).to.deep.equal({ key: 'a.b', value: '[unclosed' });
    });

    it('rejects an argument that is not key=value or whose key is not dotted', () => {
      expectInputError(() => parseOverride('novalue'), "'novalue'", 'section.key=value');
      expectInputError(() => parseOverride('=3'), "'=3'");
      expectInputError(() => parseOverride('a b=3'), "'a b'", 'not a dotted key');
    });
  });

  describe('validateConfig', () => {
    it('accepts a tree that matches the schema', () => {
      expect(() => validateConfig({ data: { train_batch_size: 2 }, algorithm: { kl_ctrl: { type: 'adaptive' } } }, SCHEMA, 'x.yaml')).to.not.throw();
    });

    it('names the source it is given', () => {
      expectInputError(() => validateConfig({ nope: 1 }, SCHEMA, 'somewhere special'), 'somewhere special', "'nope'");
    });

    it('throws an InputError (not a plain Error) with exit code 2', () => {
      try {
        validateConfig({ data: { train_batch_size: 'x' } }, SCHEMA, 'f.yaml');
        expect.fail('validateConfig accepted a string batch size');
      } catch (e) {
        expect(e).to.be.instanceOf(InputError);
        expect((e as InputError).exitCode).to.equal(2);
      }
    });
  });

  describe('readConfigFile', () => {
    it('reads a YAML mapping; an empty file is an empty config', () => {
      const dir = tempDir('flowrl-config-');
      const file = path.join(dir, 'ok.yaml');
      fs.writeFileSync(file, 'data:\n  train_batch_size: 4\nalgorithm: { name: ppo }\n');
      expect(readConfigFile(file)).to.deep.equal({ data: { train_batch_size: 4 }, algorithm: { name: 'ppo' } });
      const empty = path.join(dir, 'empty.yaml');
      fs.writeFileSync(empty, '# nothing set\n');
      expect(readConfigFile(empty)).to.deep.equal({});
    });

    it('names a missing file', () => {
      const file = path.join(tempDir('flowrl-config-'), 'missing.yaml');
      expectInputError(() => readConfigFile(file), file, 'not found');
    });

    it('names a file that is not valid YAML', () => {
      const file = path.join(tempDir('flowrl-config-'), 'broken.yaml');
      fs.writeFileSync(file, 'data:\n  train_files: [a.jsonl, b.jsonl\n  train_batch_size: 4\n');
      expectInputError(() => readConfigFile(file), file, 'not valid YAML');
    });

    it('names a file whose top level is not a mapping', () => {
      const dir = tempDir('flowrl-config-');
      const list = path.join(dir, 'list.yaml');
      fs.writeFileSync(list, '- data\n- trainer\n');
      expectInputError(() => readConfigFile(list), list, 'mapping');
      const scalar = path.join(dir, 'scalar.yaml');
      fs.writeFileSync(scalar, 'just a string\n');
      expectInputError(() => readConfigFile(scalar), scalar, 'mapping');
    });
  });
});
