// The flowrl command's subcommands, one per job, and its dispatcher. Bad input exits 2 with one
// message, no stack. (cli/main.ts runs it; tests call main in-process.)
import os from 'node:os';
import { launchedRank, launchedRanks } from '../engine/mpi.js';
import 'reflect-metadata';
import { GpuDeviceError, InputError, ReportedByRankZero, RolloutUnavailable, RunStopped } from '../errors.js';

interface Command {
  usage: string;
  run: (argv: string[]) => Promise<void>;
}

// Each command's module is loaded when it runs: `flowrl --help`, `example` and `new-plugin` need
// neither tfjs nor the trainer (1.4 s of module loading when everything was imported up front).
const rl = () => import('./rl-commands.js');
const models = () => import('./model-commands.js');
const lazy =
  <M>(load: () => Promise<M>, pick: (module: M) => Command['run']): Command['run'] =>
  (argv) =>
    load().then((module) => pick(module)(argv));

const COMMANDS: Record<string, Command> = {
  train: { usage: 'train CONFIG [key=value ...]   (RL training: ppo, grpo, reinforce_plus_plus or a plugin algorithm)', run: lazy(rl, (m) => m.trainCommand) },
  eval: { usage: 'eval CONFIG|CHECKPOINT [key=value ...]   (one validation pass: Avg@k, pass@j, JSON metrics)', run: lazy(rl, (m) => m.evalCommand) },
  compare: { usage: 'compare CONFIG... [--seeds N] [--first-seed S] [--baseline NAME] [--out DIR] [--resume] [key=value ...]   (same seeds and budget; 95 % intervals and paired comparisons; one report; --resume goes on after an interruption)', run: lazy(() => import('./compare.js'), (m) => m.compareCommand) },
  sft: { usage: 'sft CONFIG [key=value ...]   (supervised fine-tuning on prompt/response rows)', run: lazy(rl, (m) => m.sftCommand) },
  export: { usage: 'export CHECKPOINT_DIR OUT_DIR [--adapter] [--format hf|gguf] [--dtype float32|bfloat16]   (the policy as a plain HF directory, LoRA merged, without plugin heads; --adapter: the PEFT adapter; --format gguf: one GGUF file for llama.cpp, Ollama or LM Studio)', run: lazy(rl, (m) => m.exportCommand) },
  example: { usage: 'example NAME [DIR]   (copies a shipped example (countdown, custom-plugin) into DIR, rewritten to use the installed package)', run: lazy(() => import('./example-command.js'), (m) => m.exampleCommand) },
  'new-plugin': { usage: 'new-plugin DIR [--name NAME]   (a plugin project that compiles and tests as written: manifest, entry, unit test, tsconfig, package.json)', run: lazy(() => import('./new-plugin.js'), (m) => m.newPluginCommand) },
  plugins: { usage: 'plugins CONFIG   (registered plugins; algorithms, advantage estimators, policy losses, scorers and commands with their providers; overridden bindings)', run: lazy(rl, (m) => m.pluginsCommand) },
  generate: {
    usage: 'generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K] [--greedy] [--chat] [--seed S] [--adapter DIR] [--json]',
    run: lazy(models, (m) => m.generateCommand),
  },
  score: { usage: 'score --model DIR --prompt TEXT --response TEXT [--adapter DIR] [--json]', run: lazy(models, (m) => m.scoreCommand) },
  serve: {
    usage:
      'serve --model DIR [--adapter DIR] [--host 127.0.0.1] [--port 30000] [--dialect both|sglang|vllm] [--api-key KEY] [--admin-api-key KEY] [--allowed-host NAME ...] [--enable-admin --weights-root DIR ...] [--max-batch 64] [--max-queue 1024] [--max-model-len N] [--max-total-tokens N] [--max-body-mb 16] [--max-connections 512] [--logprobs-mode processed_logprobs|raw_logprobs] [--max-logprobs 20]   (SGLang v0.5.18 and vLLM v0.20.2 rollout routes, OpenAI chat completions; admin routes (weights, adapters, pause) only with --enable-admin; SIGTERM drains)',
    run: lazy(() => import('./serve-command.js'), (m) => m.serveCommand),
  },
  'init-model': { usage: 'init-model --config CONFIG.json --tokenizer DIR --out DIR [--seed S]', run: lazy(models, (m) => m.initModelCommand) },
  demo: { usage: 'demo [--steps N] [--out DIR]   (a tiny model learns addition; the foundation end to end)', run: lazy(() => import('./demo.js'), (m) => m.demoCommand) },
  bench: {
    usage:
      'bench [--json] [--steps N] [--compare-torch [--rounds N]] [--workers auto|N] [--native auto|loop|off] [--backend auto|tensorflow|webgpu|wasm|cpu]\n' +
      '  flowrl bench --model-config FILE.json [--lora-rank R] [--base-dtype float32|bfloat16] [--base-compute-dtype float32|bfloat16] [--batch B] [--seq T] [--sample-prompts P] [--sample-tokens N] [--steps N] [--json] [--compare-torch] [--compare-llama-cpp]   (a real shape, random weights; --compare-llama-cpp: llama.cpp on the same sampling job, node-llama-cpp installed beside)\n' +
      '  flowrl bench --sandbox [--programs N] [--json]   (code rewards: programs scored per second in the sandbox)\n' +
      '  flowrl bench --model-config FILE.json --rl-step [--prompts 8] [--samples 4] [--prompt-tokens 64] [--response-tokens 128] [--lora-rank 16] [--micro-batch 4] [--json]   (one RL step, phase by phase, as fractions of this machine\'s limits)\n' +
      '  flowrl bench --limits [--limits-mb N] [--matrix N] [--rounds N] [--json] [--backend webgpu]   (this machine: read bandwidth and sgemm peak, threads as the engine uses them; with --backend webgpu the GPU matmul GFLOP/s at 1024-4096 (or --matrix) and copy bandwidth)',
    run: lazy(() => import('./bench.js'), (m) => m.benchCommand),
  },
  report: { usage: 'report RUN_DIR... [--out FILE] [--title TEXT]   (one self-contained HTML file: plots and summary tables)', run: lazy(() => import('./report-command.js'), (m) => m.reportCommand) },
  reward: { usage: 'reward ROWS.jsonl --responses FILE.jsonl [--config CONFIG] [--json] [key=value ...]   (score responses against rows with the scorer a run would use; code runs in the sandbox)', run: lazy(() => import('./reward-command.js'), (m) => m.rewardCommand) },
};

function usage(): string {
  return [
    'usage: flowrl <command> [options]',
    '',
    ...Object.values(COMMANDS).map((c) => `  flowrl ${c.usage}`),
    '',
    'Plugins add commands run as `flowrl NAME CONFIG [key=value ...]`; `flowrl plugins CONFIG` lists them.',
  ].join('\n');
}

/** Runs `flowrl ...argv`; returns the exit code (0, 1 for an internal error, 2 for bad input). */
export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (command && (rest.includes('--help') || rest.includes('-h'))) {
    console.log(`usage: flowrl ${command.usage}`);
    return 0;
  }
  try {
    // Only training splits its work over ranks; any other command under mpirun would run N times over the same files.
    if (name !== 'train' && launchedRanks() > 1) throw new InputError(`launched as one of ${launchedRanks()} ranks (mpirun), but only flowrl train runs as data-parallel ranks; run ${name} as one process`);
    const run = command ? () => command.run(rest) : (await rl()).pluginCommand(name, rest);
    if (!run) {
      console.error(`flowrl: unknown command '${name}'; available: ${Object.keys(COMMANDS).join(', ')} (plugins add theirs: flowrl NAME CONFIG)`);
      return 2;
    }
    await run();
    return 0;
  } catch (e) {
    if (e instanceof ReportedByRankZero) return e.exitCode;
    // Under mpirun, which rank on which machine: a file one machine lacks is found by its rank alone.
    const where = launchedRanks() > 1 ? `rank ${launchedRank()} on ${os.hostname()}: ` : '';
    // The GPU failing under a run is not a bug here either: its message names the operation.
    if (e instanceof InputError || e instanceof RunStopped || e instanceof RolloutUnavailable || e instanceof GpuDeviceError) {
      console.error(`flowrl ${name}: ${where}${e.message}`);
      return e.exitCode;
    }
    // The wasm heap at its 4 GiB: the sizes to lower, not a stack.
    const memory = (await import('../engine/backend.js')).wasmHeapExhausted(e);
    if (memory) {
      console.error(`flowrl ${name}: ${where}${memory}`);
      return 1;
    }
    // Printed here: rethrown, the wasm runtime's exception hook would dump its own source.
    console.error(`flowrl ${name}: internal error:`, e);
    return 1;
  }
}
