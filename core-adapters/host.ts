// Building the host: configuration (core defaults < plugin defaults < user file < overrides), the
// tfjs engine, and one inversify container with the core module loaded first and each plugin's
// module after it, so plugins override core bindings with rebind.
import path from 'node:path';
import { Container, ContainerModule } from 'inversify';
import { AdvantageEstimatorRegistry } from './algorithms/advantages.js';
import { policyLossOptions, PolicyLossRegistry, type PolicyLoss } from './algorithms/policy-loss.js';
import { klEstimatorOf } from './algorithms/kl.js';
import { ScorerRegistry } from './rewards/registry.js';
import { ToolRegistry } from './tools/registry.js';
import { MultiTurn } from './rollout/multi-turn.js';
import { PPOActor } from './actor/ppo-actor.js';
import { readConfigFile, resolveConfig, type Config } from './config/load.js';
import type { ConfigTree } from './config/defaults.js';
import { PromptDataset } from './data/dataset.js';
import { initEngine, type EngineInfo } from './engine/backend.js';
import { InputError } from './errors.js';
import { TextTokenizer } from './model/tokenizer.js';
import { AlgorithmRegistry, runRequirements, type RunRequirements } from './plugins/algorithms.js';
import { guardedModule, importPluginModule, orderByExtends, type PluginRegistries, type RoleReplacements } from './plugins/loader.js';
import { locateManifest, pluginConfigLayer, readManifest, type PluginManifest } from './plugins/manifest.js';
import { DapoRewardManager, NaiveRewardManager } from './rewards/manager.js';
import { LocalRollout } from './rollout/local.js';
import { ServerRollout } from './rollout/server-rollout.js';
import { HOST_VERSION } from './package-root.js';
import { OVERRIDABLE_BINDINGS, TOKENS } from './tokens.js';
import { LocalCheckpointStore } from './trainer/checkpoints.js';
import { ConsoleMetricsSink, JsonlMetricsSink } from './trainer/metrics.js';
import { TensorBoardSink } from './trainer/tensorboard.js';
import { mlflowBase, MlflowSink } from './trainer/mlflow.js';
import { wandbSettings, WandbSink } from './trainer/wandb.js';
import { rankWorld, SINGLE_RANK } from './engine/mpi.js';
import { isMainThread } from 'node:worker_threads';
import { RLTrainer } from './trainer/trainer.js';
import { ActorRolloutRefWorker } from './workers/actor-rollout-ref.js';
import { ValueCritic } from './workers/critic.js';

export { HOST_VERSION } from './package-root.js';

/** A built host: its container (bindings made, plugins loaded), the resolved config, the plugins and the engine. */
export interface Host {
  container: Container;
  config: Config;
  plugins: PluginManifest[];
  registry: AlgorithmRegistry;
  /** The advantage estimators and policy losses this host knows (core, then plugins'). */
  registries: PluginRegistries;
  requirements: RunRequirements;
  engine?: EngineInfo;
  /** The host roles plugins replaced, and by which. */
  replacements: RoleReplacements;
}

/** How createHost builds a host: command-line overrides, whether to start tfjs, quiet, where replica threads build their replica. */
export interface HostOptions {
  /** Dotted key=value overrides from the command line. */
  overrides?: string[];
  /** Skip initialising tfjs (listing plugins needs no engine). */
  skipEngine?: boolean;
  quiet?: boolean;
  /**
   * URL of the module whose createActorReplica builds a replica thread (composition.ts passes its
   * own); without it the worker runs on one thread.
   */
  replicaEntry?: string;
}

/** The core bindings: every role the trainer needs, as singletons. */
export function coreModule(config: Config, requirements: RunRequirements, registry: AlgorithmRegistry, registries: PluginRegistries, engine?: EngineInfo, replicaEntry?: string): ContainerModule {
  return new ContainerModule(({ bind }) => {
    bind(TOKENS.ReplicaEntry).toConstantValue(replicaEntry ?? '');
    bind(TOKENS.Config).toConstantValue(config);
    bind(TOKENS.Engine).toConstantValue(engine ?? { backend: 'none' });
    // Only the main thread of a process launched by mpirun is a rank; replica threads are one.
    bind(TOKENS.Ranks).toConstantValue((isMainThread && rankWorld(config.engine.rank_timeout_s)) || SINGLE_RANK);
    bind(TOKENS.RunRequirements).toConstantValue(requirements);
    bind(TOKENS.AlgorithmRegistry).toConstantValue(registry);
    bind(TOKENS.ScorerRegistry).toConstantValue(registries.scorers);
    bind(TOKENS.ToolRegistry).toConstantValue(registries.tools);
    bind(MultiTurn).toSelf().inSingletonScope();
    bind(TOKENS.AgentRouting).toService(MultiTurn);
    bind(TOKENS.Tokenizer)
      .toDynamicValue(() => {
        const dir = config.actor_rollout_ref.model.tokenizer_path ?? config.actor_rollout_ref.model.path;
        if (!dir) throw new InputError('actor_rollout_ref.model.path is not set; point it at a Hugging Face model directory');
        return TextTokenizer.load(dir);
      })
      .inSingletonScope();
    bind(TOKENS.AdvantageEstimator).toConstantValue(registries.advantageEstimators.get(requirements.advEstimator));
    bind(TOKENS.PolicyLoss).toConstantValue(policyLossOf(config, registries.policyLosses));
    bind(TOKENS.Actor).to(PPOActor).inSingletonScope();
    if (config.actor_rollout_ref.rollout.name === 'local') bind(TOKENS.Rollout).to(LocalRollout).inSingletonScope();
    else bind(TOKENS.Rollout).to(ServerRollout).inSingletonScope();
    bind(TOKENS.Worker).to(ActorRolloutRefWorker).inSingletonScope();
    bind(TOKENS.Critic).to(ValueCritic).inSingletonScope();
    bind(TOKENS.Trainer).to(RLTrainer).inSingletonScope();
    bind(TOKENS.RewardManager).to(config.reward_model.reward_manager === 'dapo' ? DapoRewardManager : NaiveRewardManager).inSingletonScope();
    bind(TOKENS.Dataset).to(PromptDataset).inSingletonScope();
    bind(TOKENS.CheckpointStore).to(LocalCheckpointStore).inSingletonScope();
    bind(TOKENS.MetricsSink).to(JsonlMetricsSink).inSingletonScope();
    const loggers = trackers(config);
    if (loggers.includes('console')) bind(TOKENS.MetricsSink).to(ConsoleMetricsSink).inSingletonScope();
    if (loggers.includes('tensorboard')) bind(TOKENS.MetricsSink).to(TensorBoardSink).inSingletonScope();
    if (loggers.includes('mlflow')) {
      mlflowBase(); // a missing or local-store MLFLOW_TRACKING_URI is found now
      bind(TOKENS.MetricsSink).to(MlflowSink).inSingletonScope();
    }
    // The SDK, a key and a mode it can serve are found now; WANDB_MODE=disabled sends nothing.
    if (loggers.includes('wandb') && wandbSettings()) bind(TOKENS.MetricsSink).to(WandbSink).inSingletonScope();
  });
}

/**
 * The policy loss actor.policy_loss.loss_mode names, after its own check of the options the config
 * gives it, and the KL estimators' names checked (verl's 'full' is refused): a run that could not
 * take its first update stops here, exit 2, naming the key.
 */
function policyLossOf(config: Config, losses: PolicyLossRegistry): PolicyLoss {
  const actor = config.actor_rollout_ref.actor;
  // verl's apply_bypass_mode (rollout_corr_helper.py, v0.9.0) sets loss_mode to bypass_mode whatever it was.
  const mode = config.algorithm.rollout_correction.bypass_mode ? 'bypass_mode' : actor.policy_loss.loss_mode;
  const fn = losses.get(mode);
  losses.check(mode, policyLossOptions(actor));
  if (actor.use_kl_loss) klEstimatorOf(actor.kl_loss_type, 'actor_rollout_ref.actor.kl_loss_type');
  if (config.algorithm.use_kl_in_reward) klEstimatorOf(config.algorithm.kl_penalty, 'algorithm.kl_penalty');
  return fn;
}

/** Reads the plugin manifests a config names (paths are relative to the config file). */
export function readPluginManifests(entries: string[], configFile: string): PluginManifest[] {
  const baseDir = path.dirname(path.resolve(configFile));
  const manifests = entries.map((entry) => readManifest(locateManifest(entry, baseDir), HOST_VERSION, OVERRIDABLE_BINDINGS));
  const seen = new Set<string>();
  for (const m of manifests) {
    if (seen.has(m.name)) throw new InputError(`${m.file}: plugin '${m.name}' is registered twice`);
    seen.add(m.name);
  }
  return manifests;
}

/** verl's trainer.logger backends this host writes; metrics.jsonl ('file') is written whatever the list. */
const TRACKERS = ['console', 'file', 'tensorboard', 'mlflow', 'wandb'];

/** trainer.logger as a list, each name checked (verl's other backends are named as not built). */
function trackers(config: Config): string[] {
  // A name given twice is one tracker, not two.
  const given = ([] as string[]).concat(config.trainer.logger);
  // verl's deprecated name for wandb, taken as verl takes it.
  if (given.includes('tracking')) console.warn("[flowrl] trainer.logger: 'tracking' is deprecated (as in verl); use wandb");
  const names = [...new Set(given.map((name) => (name === 'tracking' ? 'wandb' : name)))];
  for (const name of names) {
    if (!TRACKERS.includes(name)) throw new InputError(`trainer.logger: '${name}' is not a tracker this host writes (${TRACKERS.join(', ')})${['swanlab', 'clearml', 'trackio', 'vemlp_wandb', 'rl_insight'].includes(name) ? `; verl's ${name} backend is not built here yet` : ''}`);
  }
  return names;
}

/** A host's registries with what the plugins' entries register in them (in load order), and the plugins' modules. */
export async function loadPluginEntries(plugins: PluginManifest[], config: Config): Promise<{ registries: PluginRegistries; modules: ContainerModule[] }> {
  const registries: PluginRegistries = { advantageEstimators: new AdvantageEstimatorRegistry(), policyLosses: new PolicyLossRegistry(), scorers: new ScorerRegistry(config.reward_model), tools: new ToolRegistry() };
  const modules: ContainerModule[] = [];
  for (const manifest of plugins) modules.push(await importPluginModule(manifest, { config, manifest, registries }));
  return { registries, modules };
}

/** Reads a config file, loads its plugins and builds the container. */
export async function createHost(configFile: string, options: HostOptions = {}): Promise<Host> {
  return createHostFromTree(readConfigFile(configFile), configFile, options);
}

/**
 * createHost for a config already in memory (a resolved config is a valid one: worker replicas
 * rebuild the host from it). `configFile` anchors relative paths and names the source in errors.
 */
export async function createHostFromTree(user: ConfigTree, configFile: string, options: HostOptions = {}): Promise<Host> {
  const overrides = options.overrides ?? [];
  // Plugin entries in the file are relative to it; on the command line, to the working directory.
  const pluginOverride = overrides.find((o) => o.startsWith('plugins='));
  const pluginEntries = pluginOverride
    ? resolvePluginOverride(pluginOverride).map((e) => (e.startsWith('.') ? path.resolve(e) : e))
    : ([] as string[]).concat((user.plugins as string[] | string | undefined) ?? []);
  const plugins = orderByExtends(readPluginManifests(pluginEntries, configFile));
  const config = resolveConfig({
    user,
    userFile: configFile,
    overrides,
    pluginDefaults: plugins.map(pluginConfigLayer),
  });
  // Recorded as absolute manifest paths so a saved config finds the same plugins from anywhere.
  config.plugins = plugins.map((p) => p.file);
  const registry = new AlgorithmRegistry();
  plugins.forEach((p) => p.algorithms.forEach((a) => registry.register(a)));
  // Plugin entries run first: they may register the estimators and losses the config names.
  // A plugin algorithm's own policy loss, while loss_mode is left at the default (what it records in config.yaml too).
  const declaredLoss = registry.get(config.algorithm.name).policyLoss;
  if (declaredLoss && config.actor_rollout_ref.actor.policy_loss.loss_mode === 'vanilla') config.actor_rollout_ref.actor.policy_loss.loss_mode = declaredLoss;
  const { registries, modules: pluginModules } = await loadPluginEntries(plugins, config);
  const requirements = runRequirements(config, registry, registries.advantageEstimators);
  const engine = options.skipEngine ? undefined : await initEngine(config.engine.backend, { quiet: options.quiet, native: config.engine.native });
  const container = new Container({ defaultScope: 'Singleton' });
  await container.loadAsync(coreModule(config, requirements, registry, registries, engine, options.replicaEntry));
  const replacements: RoleReplacements = new Map();
  for (const [i, module] of pluginModules.entries()) await container.loadAsync(guardedModule(module, plugins[i], replacements, plugins));
  return { container, config, plugins, registry, registries, requirements, engine, replacements };
}

function resolvePluginOverride(arg: string): string[] {
  const value = arg.slice('plugins='.length).trim();
  if (value.startsWith('[')) return value.slice(1, -1).split(',').map((s) => s.trim()).filter(Boolean);
  return value ? [value] : [];
}
