// flowrl train | eval | sft | plugins: the host's jobs from a YAML config plus key=value overrides.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Metrics, PluginCommand, Trainer } from '../contracts/index.js';
import { readConfigFile, resolveConfig } from '../config/load.js';
import { InputError, RunStopped } from '../errors.js';
import { createHost } from '../composition.js';
import { loadPluginEntries, readPluginManifests, type Host } from '../host.js';
import { orderByExtends } from '../plugins/loader.js';
import { describeReferenceNeed } from '../plugins/algorithms.js';
import { pluginConfigLayer } from '../plugins/manifest.js';
import { initEngine } from '../engine/backend.js';
import { TOKENS } from '../tokens.js';
import { isCheckpoint } from '../trainer/checkpoints.js';
import { METRICS_FILE } from '../trainer/metrics.js';
import { passAtJs } from '../trainer/pass-at-k.js';
import { REPORT_FILE, writeReport } from '../report/report.js';
import { runSft } from '../trainer/sft.js';
import type { RankWorld } from '../engine/mpi.js';
import { configDifference, gatherValues } from '../workers/ranks.js';
import { resolveThreadCount } from '../engine/thread-pool.js';
import { launchedRank } from '../engine/mpi.js';
import { loadModel, saveModel, TOKENIZER_FILES, writeDirectoryAtomically } from '../model/checkpoint.js';
import { adapterBase, isAdapterDir, loadAdapters, writeAdapterFiles } from '../model/lora.js';
import { GGUF_DTYPES, writeGguf, type GgufDtype } from '../model/gguf.js';
import { parseFlags } from './args.js';

/** Splits `CONFIG key=value ...` (flags are not used by these commands). */
function configAndOverrides(command: string, argv: string[]): { target: string; overrides: string[] } {
  const [target, ...overrides] = argv;
  if (!target || target.startsWith('-')) throw new InputError(`usage: flowrl ${command} CONFIG [key=value ...]`);
  for (const o of overrides) if (!o.includes('=')) throw new InputError(`'${o}' is not a key=value override`);
  return { target, overrides };
}

/** Validation metrics at the first and last steps that logged them, from a run's metrics.jsonl. */
export function validationSummary(runDir: string): { before?: Metrics; after?: Metrics } {
  const file = path.join(runDir, METRICS_FILE);
  if (!fs.existsSync(file)) return {};
  const rows = fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Metrics)
    .filter((m) => 'val/accuracy' in m);
  return { before: rows[0], after: rows.length > 1 ? rows.at(-1) : undefined };
}

const SUMMARY_ROWS: [string, string][] = [
  ['val/accuracy', 'accuracy (mean over k samples)'],
  ['val/pass@k', 'pass@k'],
  ['val/distinct_correct', 'distinct correct per prompt'],
  ['val/correct_entropy', 'entropy over correct (nats)'],
  // Over every correct answer (exact where the task lists them, else over the distinct correct samples).
  ['val/matching/entropy', 'entropy over all correct'],
  ['val/matching/ref_entropy', "  the reference's"],
  ['val/matching/kl', 'KL to reference over correct'],
];

function summaryTable(summary: { before?: Metrics; after?: Metrics }): string[] {
  const { before, after } = summary;
  if (!before) return [];
  const cell = (m: Metrics | undefined, key: string) => (m && key in m ? m[key].toFixed(3) : '-').padStart(8);
  const k = before['val/k'];
  const lines = [`${'validation'.padEnd(32)}${`step ${before.step}`.padStart(8)}${after ? `step ${after.step}`.padStart(10) : ''}`];
  for (const [key, label] of SUMMARY_ROWS) {
    if (!(key in before)) continue;
    lines.push(`${(key === 'val/pass@k' && k ? `pass@${k}` : label).padEnd(32)}${cell(before, key)}${after ? '  ' + cell(after, key) : ''}`);
  }
  return lines;
}

/** flowrl eval's readable table: Avg@k, the unbiased pass@j for every logged j, then diversity. */
function evalTable(metrics: Metrics): string[] {
  const k = metrics['val/k'];
  const js = passAtJs(Object.keys(metrics));
  const rows: [string, number | undefined][] = [
    [`Avg@${k ?? 'k'} (mean accuracy over k samples)`, metrics['val/accuracy']],
    ...js.map((j): [string, number] => [`pass@${j}`, metrics[`val/pass@${j}`]]),
    ...SUMMARY_ROWS.filter(([key]) => key !== 'val/accuracy' && key !== 'val/pass@k').map(([key, label]): [string, number | undefined] => [label, metrics[key]]),
  ];
  const lines = [`validation, k = ${k ?? '?'} samples per prompt`];
  for (const [label, value] of rows) if (value !== undefined) lines.push(`${label.padEnd(40)}${value.toFixed(3).padStart(8)}`);
  if (metrics['val/matching/exact'] !== undefined && metrics['val/matching/exact'] < 1) {
    lines.push(`(matching over the distinct correct samples for ${((1 - metrics['val/matching/exact']) * 100).toFixed(0)} % of prompts: an estimate, biased low with few samples)`);
  }
  return lines;
}

/**
 * SIGINT and SIGTERM: the first asks the trainer to finish its step and save a checkpoint; a second
 * stops at once. Under mpirun, SIGUSR1 too: Open MPI 4.1's mpirun answers SIGINT and SIGTERM by
 * ending the job (SIGTERM to every rank, SIGKILL soon after) but forwards SIGUSR1 to every rank.
 * Exit codes follow the convention 128 + the signal's number.
 */
function stopOnSignals(trainer: Trainer, underMpirun = false): { received?: string; remove(): void } {
  const state: { received?: string; remove(): void } = { remove: () => undefined };
  const handler = (signal: NodeJS.Signals) => {
    const code = 128 + os.constants.signals[signal];
    if (state.received || !trainer.requestStop) process.exit(code);
    state.received = signal;
    // Under mpirun, SIGINT and SIGTERM reach the ranks from mpirun ending the job: it kills them about
    // a second later, so the step cannot finish; said once, with the stop that keeps a checkpoint.
    if (underMpirun && signal !== 'SIGUSR1') {
      if (launchedRank() === 0) console.error(`[flowrl] ${signal} under mpirun: mpirun is ending the job now, without a checkpoint of this step (the last one is trainer.save_freq's); to stop after the step with a checkpoint, send mpirun SIGUSR1 (kill -USR1 <mpirun's pid>)`);
    } else console.error(`[flowrl] ${signal}: finishing this step and saving a checkpoint (${signal} again stops at once)`);
    trainer.requestStop();
  };
  const signals = underMpirun ? (['SIGINT', 'SIGTERM', 'SIGUSR1'] as const) : (['SIGINT', 'SIGTERM'] as const);
  for (const signal of signals) process.on(signal, handler);
  state.remove = () => signals.forEach((signal) => process.off(signal, handler));
  return state;
}

export async function trainCommand(argv: string[]): Promise<void> {
  const { target, overrides } = configAndOverrides('train', argv);
  const host = await createHost(target, { overrides });
  const { config, requirements, plugins, replacements } = host;
  const ranks = host.container.get<RankWorld>(TOKENS.Ranks);
  if (ranks.size > 1) {
    // The same command, and the same arithmetic: ranks whose kernels or threads differ sum their
    // gradients in other orders and their weights drift apart from the first step.
    const enginePath = { backend: host.engine?.backend, simd: host.engine?.simd, kernels: host.engine?.accelerations, blasMissing: host.engine?.blasMissing ?? false, threads: resolveThreadCount(config.engine.workers) };
    const difference = configDifference(ranks, config)?.concat('; every rank must run the same command') ?? configDifference(ranks, enginePath, 'engine path')?.concat('; every rank must compute the same way (the native addon, its BLAS, the threads: FLOWRL_NATIVE, FLOWRL_BLAS, FLOWRL_WORKERS), or their weights drift apart');
    if (difference) {
      // One message, from rank 0; the others leave quietly (mpirun then ends the job).
      if (ranks.rank === 0) throw new InputError(difference);
      process.exit(2);
    }
  }
  if (ranks.rank === 0) console.error(
    `[flowrl] algorithm ${config.algorithm.name} (advantages: ${requirements.advEstimator}, critic: ${requirements.useCritic ? 'yes' : 'no'}, reference: ${requirements.useReference ? 'yes' : 'no'})` +
      (plugins.length ? `; plugins: ${plugins.map((p) => `${p.name}@${p.version} (${p.loadedFrom ? path.relative(process.cwd(), p.loadedFrom) || p.loadedFrom : 'not loaded'})`).join(', ')}` : '') +
      (replacements.size ? `; replaced: ${[...replacements].map(([role, p]) => `${role} by ${p.name}`).join(', ')}` : ''),
  );
  if (ranks.size > 1 && ranks.rank === 0) console.error(`[flowrl] data-parallel ranks: ${ranks.size} (mpirun); rank 0 writes the run's files`);
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  const signals = stopOnSignals(trainer, ranks.size > 1);
  try {
    await trainer.fit();
  } finally {
    signals.remove();
    trainer.dispose();
  }
  const runDir = config.trainer.default_local_dir!;
  let stopSignal = signals.received;
  if (ranks.size > 1) {
    // mpirun's forwarded signal may reach the ranks at different times; they stopped after the same
    // step, and every rank names the signal one of them received.
    stopSignal = gatherValues(ranks, signals.received ?? '').find(Boolean) || undefined;
    // Rank 0 has written its last checkpoint before the others leave.
    ranks.barrier();
    ranks.finalize();
    if (ranks.rank > 0) return;
  }
  if (trainer.stoppedAt !== undefined) {
    const code = stopSignal ? 128 + os.constants.signals[stopSignal as NodeJS.Signals] : 1;
    throw new RunStopped(`stopped by ${stopSignal ?? 'a stop request'} after step ${trainer.stoppedAt}, with a checkpoint in ${path.join(runDir, 'checkpoints')}; run the same command to resume`, code);
  }
  const report = await writeReport([runDir], path.join(runDir, REPORT_FILE), { title: `${config.trainer.experiment_name} (${config.algorithm.name})` });
  console.log(summaryTable(validationSummary(runDir)).join('\n'));
  console.log(`run directory: ${runDir}\nreport: ${report}`);
}

/** flowrl eval CONFIG|CHECKPOINT: one validation pass (a checkpoint brings its own config and weights). */
export async function evalCommand(argv: string[]): Promise<void> {
  const { target, overrides } = configAndOverrides('eval', argv);
  let configFile = target;
  const extra: string[] = [];
  if (fs.existsSync(target) && fs.statSync(target).isDirectory()) {
    if (!isCheckpoint(target)) throw new InputError(`${target}: not a checkpoint directory (no trainer_state.json) and not a config file`);
    configFile = path.join(target, 'config.yaml');
    const actorDir = path.join(target, 'actor');
    // A LoRA checkpoint holds the adapter; its base is the run's model.path. Full weights replace
    // model.path, so the reference stays the run's initial policy (the saved model.path is absolute).
    const runModel = (readConfigFile(configFile).actor_rollout_ref as { model?: { path?: string } } | undefined)?.model?.path;
    if (isAdapterDir(actorDir)) extra.push(`actor_rollout_ref.model.lora_adapter_path=${actorDir}`);
    else extra.push(`actor_rollout_ref.model.path=${actorDir}`, ...(runModel ? [`actor_rollout_ref.ref.model_path=${runModel}`] : []));
  }
  const host: Host = await createHost(configFile, { overrides: [...extra, ...overrides, 'trainer.resume_mode=disable'] });
  const trainer = host.container.get<Trainer>(TOKENS.Trainer);
  const metrics = await trainer.evaluate();
  // The table for people on stderr; stdout is the JSON line alone, for scripts.
  console.error(evalTable(metrics).join('\n'));
  console.log(JSON.stringify(metrics));
  trainer.dispose();
}

export async function sftCommand(argv: string[]): Promise<void> {
  const { target, overrides } = configAndOverrides('sft', argv);
  const user = readConfigFile(target);
  const plugins = readPluginManifests(([] as string[]).concat((user.plugins as string[] | undefined) ?? []), target);
  const config = resolveConfig({ user, userFile: target, overrides, pluginDefaults: plugins.map(pluginConfigLayer) });
  // Plugins' entries run for their tool classes (a conversation's prompt shows the tools' schemas).
  const { registries } = await loadPluginEntries(orderByExtends(plugins), config);
  await initEngine(config.engine.backend, { native: config.engine.native });
  const result = await runSft(config, undefined, registries.tools);
  console.log(`wrote ${result.outputDir} after ${result.steps} steps (train loss ${result.trainLoss.toFixed(4)}${result.valLoss !== undefined ? `, validation loss ${result.valLoss.toFixed(4)}` : ''})`);
}

/**
 * A plugin's command `flowrl NAME CONFIG [key=value ...]`, if a plugin the config registers
 * declares NAME in its manifest; it runs the PluginCommand the plugin binds under that name.
 */
export function pluginCommand(name: string, argv: string[]): (() => Promise<void>) | undefined {
  const [target] = argv;
  if (!target || !fs.existsSync(target) || !fs.statSync(target).isFile()) return undefined;
  const user = readConfigFile(target);
  const manifests = readPluginManifests(([] as string[]).concat((user.plugins as string[] | string | undefined) ?? []), target);
  const owner = manifests.find((m) => m.commands.some((c) => c.name === name));
  if (!owner) return undefined;
  return async () => {
    const { overrides } = configAndOverrides(name, argv);
    const host = await createHost(target, { overrides });
    const command = host.container.getAll<PluginCommand>(TOKENS.Command).find((c) => c.name === name);
    if (!command) throw new Error(`${owner.file}: the manifest lists command '${name}' but the plugin binds no PluginCommand of that name`);
    await command.run();
  };
}

/** flowrl plugins CONFIG: the plugins a config registers, their algorithms and overridden bindings. */
export async function pluginsCommand(argv: string[]): Promise<void> {
  const { target, overrides } = configAndOverrides('plugins', argv);
  const host = await createHost(target, { overrides, skipEngine: true });
  console.log(`algorithms: ${host.registry.names().join(', ')} (selected: ${host.config.algorithm.name})`);
  // Each registry by name, with who provided each entry.
  const listing = (providers: Map<string, string>) => [...providers].map(([name, by]) => (by === 'core' ? name : `${name} [${by.replace(/ \(.*\)$/, '')}]`)).join(', ');
  console.log(`advantage estimators: ${listing(host.registries.advantageEstimators.providers())}`);
  console.log(`policy losses: ${listing(host.registries.policyLosses.providers())}`);
  console.log(`scorers (data_source): ${listing(host.registries.scorers.providers())}`);
  const commands = host.plugins.flatMap((p) => p.commands.map((c) => `${c.name} [plugin ${p.name}]`));
  console.log(`plugin commands: ${commands.join(', ') || 'none'}`);
  if (!host.plugins.length) console.log('no plugins registered');
  for (const p of host.plugins) {
    console.log(`${p.name} ${p.version} (host ${p.host}) from ${p.file}`);
    console.log(`  entry:      ${p.loadedFrom ?? 'not loaded'}`);
    if (p.description) console.log(`  ${p.description}`);
    console.log(`  algorithms: ${p.algorithms.map((a) => `${a.name} [advantages ${a.advEstimator}${a.needsReference === true ? ', reference policy' : a.needsReference ? `, reference policy when ${describeReferenceNeed(a.needsReference)}` : ''}]`).join(', ') || 'none'}`);
    console.log(`  overrides:  ${p.overrides.join(', ') || 'none'}${p.extends.length ? ` (extends ${p.extends.join(', ')}: loaded after ${p.extends.length > 1 ? 'them' : 'it'})` : ''}`);
    const replaced = [...host.replacements].filter(([, by]) => by === p).map(([role]) => role);
    console.log(`  replaced:   ${replaced.join(', ') || 'none'} (with this config)`);
    for (const c of p.commands) console.log(`  command:    flowrl ${c.usage}`);
  }
}

/**
 * flowrl export CHECKPOINT_DIR OUT_DIR [--adapter]: the checkpoint's policy as a plain HF directory.
 * Only the tensors the architecture defines are written, so plugin heads (proj_z.*) and optimizer
 * state stay behind. A LoRA checkpoint is merged into its base (adapter_config.json names it), or
 * with --adapter written as a PEFT directory that peft and vLLM load.
 */
export async function exportCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags('export', argv, { adapter: { type: 'boolean', default: false }, format: { type: 'string', default: 'hf' }, dtype: { type: 'string' } });
  const [checkpoint, out] = positionals;
  if (!checkpoint || !out || positionals.length !== 2) throw new InputError('usage: flowrl export CHECKPOINT_DIR OUT_DIR [--adapter] | flowrl export CHECKPOINT_DIR OUT.gguf --format gguf [--dtype float32|bfloat16]');
  const format = values.format as string;
  if (format !== 'hf' && format !== 'gguf') throw new InputError(`--format must be hf or gguf; got '${format}'`);
  if (values.dtype !== undefined && format !== 'gguf') throw new InputError('--dtype applies to --format gguf only (a Hugging Face export keeps float32)');
  const dtype = (values.dtype ?? 'float32') as GgufDtype;
  if (!GGUF_DTYPES.includes(dtype)) throw new InputError(`--dtype must be one of ${GGUF_DTYPES.join(', ')}; got '${dtype}'`);
  if (format === 'gguf' && values.adapter) throw new InputError('--adapter writes a PEFT adapter; GGUF export writes the merged model (leave out --adapter)');
  const source = [path.join(checkpoint, 'actor'), checkpoint].find((d) => fs.existsSync(path.join(d, 'config.json')) || isAdapterDir(d));
  if (!source) throw new InputError(`${checkpoint}: neither a checkpoint (actor/) nor a Hugging Face model or PEFT adapter directory`);
  await initEngine('auto', { quiet: true });
  if (format === 'gguf') {
    if (fs.existsSync(out) && fs.statSync(out).isDirectory()) throw new InputError(`${out}: a directory; --format gguf writes one file (e.g. ${path.join(out, 'model.gguf')})`);
    // The merged Hugging Face directory first (the export this command already makes), then one file.
    fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
    const staging = fs.mkdtempSync(path.join(path.dirname(path.resolve(out)), '.flowrl-gguf-'));
    try {
      await exportHuggingFace(source, path.join(staging, 'hf'), false);
      const written = writeGguf(path.join(staging, 'hf'), out, dtype, source);
      console.log(`wrote ${out}: GGUF v3, ${written.arch}, ${written.tensors} tensors, ${dtype} (${(written.bytes / 1e6).toFixed(1)} MB)`);
    } finally {
      fs.rmSync(staging, { recursive: true, force: true });
    }
    return;
  }
  console.log(await exportHuggingFace(source, out, values.adapter as boolean));
}

/** The policy in `source` (full weights, or LoRA merged into its base) as a Hugging Face directory, or its PEFT adapter; returns what was written. */
async function exportHuggingFace(source: string, out: string, adapterOnly: boolean): Promise<string> {
  if (!isAdapterDir(source)) {
    if (adapterOnly) throw new InputError(`${source}: --adapter needs a LoRA checkpoint; this one holds full weights (actor_rollout_ref.model.lora_rank was 0)`);
    const model = loadModel(source);
    await saveModel(model, out, { tokenizerDir: source });
    const params = model.trainableVariables().reduce((n, v) => n + v.size, 0);
    model.dispose();
    return `exported ${source} to ${out} (${params.toLocaleString('en-US')} parameters, no plugin heads)`;
  }
  const base = adapterBase(source);
  const model = loadModel(base);
  try {
    const adapters = loadAdapters(model.config, source);
    model.attachAdapters(adapters);
    if (adapterOnly) {
      await writeDirectoryAtomically(out, async (tmp) => {
        await writeAdapterFiles(tmp, adapters, base);
        for (const name of TOKENIZER_FILES) if (fs.existsSync(path.join(source, name))) fs.copyFileSync(path.join(source, name), path.join(tmp, name));
      });
      const params = [...adapters.params.values()].reduce((n, v) => n + v.size, 0);
      return `exported the adapter of ${source} to ${out} (PEFT LoRA r ${adapters.settings.rank}, ${params.toLocaleString('en-US')} parameters, base ${base})`;
    }
    await saveModel(model, out, { tokenizerDir: fs.existsSync(path.join(source, 'tokenizer.json')) ? source : base });
    return `exported ${source} merged into ${base} to ${out} (W + ${adapters.scale} B A)`;
  } finally {
    model.dispose();
  }
}
