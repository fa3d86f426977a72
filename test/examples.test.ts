// The examples users copy: examples/custom-plugin (a third-party plugin that rebinds the reward
// manager) and examples/local-hf-model (FlowRL on a downloaded Qwen2.5 checkpoint, run here on a
// tiny random model of the same architecture with the real Qwen tokenizer).
import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import {
  Batch,
  countdownProblemKey,
  createHost,
  NaiveRewardManager,
  PPOActor,
  readRows,
  solveCountdown,
  TOKENS,
  type CountdownProblem,
  type DataRow,
  type Dataset,
  type Host,
  type RewardManager,
  type TextTokenizer,
  type Trainer,
  type Worker,
} from '../core-adapters/index.js';
import { readHeader } from '../core-adapters/model/safetensors.js';
import { scoreGsm8k } from '../core-adapters/rewards/gsm8k.js';
import { expectInputError, expectInputErrorAsync, flowrlInProcess, readRunMetrics, ROOT, tempDir, writeTinyQwen25 } from './helpers.js';

const CUSTOM_PLUGIN = path.join(ROOT, 'examples', 'custom-plugin');
const LOCAL_HF = path.join(ROOT, 'examples', 'local-hf-model');

async function train(configFile: string, overrides: string[]): Promise<Host> {
  const host = await createHost(configFile, { overrides, quiet: true });
  await host.container.get<Trainer>(TOKENS.Trainer).fit();
  host.container.get<Worker>(TOKENS.Worker).dispose();
  return host;
}

/** Responses as the worker packs them: right-padded ids and a 0/1 mask. */
function responseBatch(tokenizer: TextTokenizer, texts: string[], width: number, columns: Record<string, unknown[]>): Batch {
  const ids = new Int32Array(texts.length * width);
  const mask = new Float32Array(texts.length * width);
  texts.forEach((text, b) => {
    const encoded = tokenizer.encode(text).slice(0, width);
    ids.set(encoded, b * width);
    mask.fill(1, b * width, b * width + encoded.length);
  });
  return new Batch({
    tensors: { responses: { shape: [texts.length, width], data: ids }, response_mask: { shape: [texts.length, width], data: mask } },
    columns,
  });
}

describe('examples/custom-plugin: a third-party plugin rebinding the reward manager', function () {
  this.timeout(300000);
  const config = path.join(CUSTOM_PLUGIN, 'config.yaml');

  it('registers next to FlowRL, binds its reward manager and brings its config defaults', async () => {
    const host = await createHost(config, { overrides: [`trainer.default_local_dir=${path.join(tempDir(), 'run')}`, 'trainer.progress=false'], skipEngine: true });
    expect(host.plugins.map((p) => `${p.name}@${p.version}`)).to.deep.equal(['flowrl@0.1.0', 'short-answers@0.1.0']);
    const manager = host.container.get<RewardManager>(TOKENS.RewardManager);
    expect(manager.constructor.name).to.equal('ShortAnswersRewardManager');
    expect(manager).to.be.instanceOf(NaiveRewardManager);
    expect((host.config.short_answers as { penalty_per_token: number }).penalty_per_token).to.equal(0.01);
    expect(host.config.algorithm.name).to.equal('grpo');
    // FlowRL is registered (its algorithm is listed) but changes no role for grpo.
    expect(host.registry.names()).to.include('flowrl');
    expect(host.container.get<object>(TOKENS.Actor).constructor).to.equal(PPOActor);
  });

  it('subtracts penalty_per_token x length from each score, on the last valid token', async () => {
    const host = await createHost(config, { overrides: ['short_answers.penalty_per_token=0.05'], skipEngine: true });
    const manager = host.container.get<RewardManager>(TOKENS.RewardManager);
    const tokenizer = host.container.get<TextTokenizer>(TOKENS.Tokenizer);
    const naive = new NaiveRewardManager(host.config, tokenizer);
    const truth = { numbers: [4, 7, 2], target: 9 };
    const texts = ['7-2+4', '4+7-2', '4*7', ''];
    const R = 12;
    const batch = responseBatch(tokenizer, texts, R, {
      data_source: texts.map(() => 'countdown'),
      ground_truth: texts.map(() => truth),
      extra_info: texts.map(() => ({})),
    });
    const plain = await naive.compute(batch);
    const penalised = await manager.compute(batch);
    const mask = Array.from(batch.tensor('response_mask').data);
    const lengths = texts.map((_, b) => mask.slice(b * R, (b + 1) * R).reduce((s, v) => s + v, 0));
    expect(lengths[0]).to.be.greaterThan(0);
    expect(lengths[3]).to.equal(0);
    expect(plain.scores[0]).to.equal(1); // a correct expression, so the penalty is visible against 1
    for (let b = 0; b < texts.length; b++) {
      expect(penalised.scores[b], texts[b]).to.be.closeTo(plain.scores[b] - 0.05 * lengths[b], 1e-9);
      // Every token keeps the stock value except the last valid one, which carries the new score.
      for (let t = 0; t < R; t++) {
        const last = t === lengths[b] - 1;
        expect(penalised.tokenLevelScores[b * R + t], `${texts[b]} @${t}`).to.be.closeTo(last ? penalised.scores[b] : plain.tokenLevelScores[b * R + t], 1e-6);
      }
    }
    expect(penalised.correct).to.deep.equal(plain.correct);
    const meanPenalty = (0.05 * lengths.reduce((s, v) => s + v, 0)) / texts.length;
    expect(penalised.metrics['reward/length_penalty/mean']).to.be.closeTo(meanPenalty, 1e-9);
  });

  it('flowrl plugins lists both plugins and the RewardManager override', async () => {
    const run = await flowrlInProcess(['plugins', 'examples/custom-plugin/config.yaml']);
    expect(run.status, run.stderr).to.equal(0);
    expect(run.stdout).to.include('flowrl 0.1.0 (host ^0.1.0)');
    expect(run.stdout).to.include('short-answers 0.1.0 (host ^0.1.0)');
    expect(run.stdout).to.include('overrides:  RewardManager');
    expect(run.stdout).to.include('selected: grpo');
  });

  it('trains two GRPO steps with the length penalty in metrics.jsonl', async () => {
    const runDir = path.join(tempDir(), 'run');
    await train(config, [`trainer.default_local_dir=${runDir}`, 'engine.workers=1', 'trainer.progress=false', 'trainer.total_training_steps=2', 'trainer.val_before_train=false']);
    const metrics = readRunMetrics(runDir);
    expect(metrics.map((m) => m.step)).to.deep.equal([1, 2]);
    for (const m of metrics) {
      expect(m, `step ${m.step}`).to.have.property('reward/length_penalty/mean');
      // Every response has at least one token, so the mean penalty is 0.01 x the mean length.
      expect(m['reward/length_penalty/mean']).to.be.closeTo(0.01 * m['response_length/mean'], 1e-9);
    }
    expect(fs.existsSync(path.join(runDir, 'checkpoints', 'global_step_2'))).to.equal(true);
  });
});

describe('examples/local-hf-model: FlowRL on a downloaded Hugging Face checkpoint', function () {
  this.timeout(300000);
  const config = path.join(LOCAL_HF, 'config.yaml');

  it('asks for Qwen2.5-0.5B-Instruct under the example directory with the documented settings', async () => {
    const host = await createHost(config, { skipEngine: true });
    const c = host.config;
    expect(c.actor_rollout_ref.model.path).to.equal(path.join(LOCAL_HF, 'models', 'Qwen2.5-0.5B-Instruct'));
    expect(host.plugins.map((p) => p.name)).to.deep.equal(['flowrl']);
    expect(c.algorithm.name).to.equal('flowrl');
    expect(host.requirements).to.include({ advEstimator: 'grpo', useReference: true, useCritic: false });
    expect(c.flowrl).to.deep.include({ beta: 15 });
    expect(c.data).to.deep.include({ max_prompt_length: 256, max_response_length: 256, train_batch_size: 8 });
    expect(c.actor_rollout_ref.actor.optim.lr).to.equal(1e-5);
    expect(c.actor_rollout_ref.model).to.deep.include({ lora_rank: 16, lora_alpha: 32, target_modules: 'all-linear', enable_gradient_checkpointing: true });
    expect(c.actor_rollout_ref.actor).to.deep.include({ ppo_mini_batch_size: 8, ppo_micro_batch_size: 4 });
    expect(c.actor_rollout_ref.rollout).to.deep.include({ n: 4, temperature: 1.0 });
    expect(c.actor_rollout_ref.rollout.val_kwargs).to.deep.include({ n: 4, temperature: 0.6, top_p: 0.95, do_sample: true });
    expect(c.trainer).to.deep.include({ test_freq: 10, save_freq: 20, total_training_steps: 50 });
  });

  it('ships gsm8k rows whose reference solutions score 1 with the gsm8k scorer', async () => {
    for (const [split, count] of [['train', 24], ['val', 8]] as const) {
      const rows = await readRows(path.join(LOCAL_HF, 'data', `${split}.jsonl`));
      expect(rows, split).to.have.length(count);
      for (const row of rows) {
        expect(row.data_source).to.equal('openai/gsm8k');
        expect(row.prompt).to.have.length(1);
        expect(row.prompt[0].role).to.equal('user');
        expect(row.prompt[0].content).to.match(/ Let's think step by step and output the final answer after "####"\.$/);
        const truth = row.reward_model.ground_truth as string;
        expect(truth).to.match(/^\d+$/);
        expect(scoreGsm8k(String(row.extra_info?.answer), truth).score, String(row.extra_info?.question)).to.equal(1);
      }
    }
  });

  it('trains two FlowRL LoRA steps on a tiny Qwen2.5-shaped model with the real Qwen tokenizer and chat template', async () => {
    const dir = tempDir();
    const modelDir = await writeTinyQwen25(path.join(dir, 'Qwen2.5-tiny'));

    const runDir = path.join(dir, 'run');
    const host = await train(config, [
      'engine.workers=1',
      `actor_rollout_ref.model.path=${modelDir}`,
      `trainer.default_local_dir=${runDir}`,
      'trainer.progress=false',
      'trainer.total_training_steps=2',
      'trainer.test_freq=-1',
      'trainer.val_before_train=false',
      'data.max_response_length=24',
      'data.train_batch_size=2',
      'actor_rollout_ref.rollout.n=2',
      'actor_rollout_ref.actor.ppo_mini_batch_size=2',
      // The trainer still validates after the last step; keep that pass small.
      'data.val_max_samples=2',
      'actor_rollout_ref.rollout.val_kwargs.n=1',
    ]);

    // Prompts went through the tokenizer's chat template.
    const tokenizer = host.container.get<TextTokenizer>(TOKENS.Tokenizer);
    expect(tokenizer.hasChatTemplate).to.equal(true);
    const dataset = host.container.get<Dataset>(TOKENS.Dataset);
    expect(dataset.train).to.have.length(24);
    const rendered = tokenizer.decode(dataset.train[0].ids);
    expect(rendered).to.include('<|im_start|>user\n');
    expect(rendered).to.include('Let\'s think step by step');
    expect(rendered.endsWith('<|im_start|>assistant\n')).to.equal(true);

    const metrics = readRunMetrics(runDir);
    for (const step of [1, 2]) {
      const m = metrics.find((r) => r.step === step);
      expect(m, `step ${step}`).to.not.equal(undefined);
      for (const key of ['actor/log_z', 'actor/final_loss']) expect(Number.isFinite(m![key]), `${key} at step ${step}`).to.equal(true);
    }
    const actor = path.join(runDir, 'checkpoints', 'global_step_2', 'actor');
    expect([...readHeader(path.join(actor, 'proj_z.safetensors')).tensors.keys()]).to.include('proj_z.net.0.weight');
    // A LoRA checkpoint: the PEFT adapter (r 16 on all seven projections), naming its base.
    const adapter = JSON.parse(fs.readFileSync(path.join(actor, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(adapter).to.include({ peft_type: 'LORA', r: 16, lora_alpha: 32, base_model_name_or_path: modelDir });
    expect(adapter.target_modules).to.have.length(7);
    expect(fs.existsSync(path.join(actor, 'model.safetensors'))).to.equal(false);
  });
});

describe('examples/countdown: the main job', function () {
  this.timeout(120_000);
  const COUNTDOWN = path.join(ROOT, 'examples', 'countdown');

  it('keeps RL prompts and validation problems disjoint (the same numbers in any order are one problem)', async () => {
    const key = (row: DataRow) => countdownProblemKey(row.reward_model.ground_truth as CountdownProblem);
    const train = new Set((await readRows(path.join(COUNTDOWN, 'data', 'train.jsonl'))).map(key));
    const val = (await readRows(path.join(COUNTDOWN, 'data', 'val.jsonl'))).map(key);
    expect(new Set(val).size).to.equal(512);
    expect(train.size).to.equal(512);
    expect(val.filter((k) => train.has(k))).to.deep.equal([]);
  });

  it("has a base policy in the 15-50 % band (validation Avg@8 at the paper's temperature 0.6, top-p 0.95), and the README prints npm start's block: its rows, and the base's column as the base scores", async () => {
    const run = await flowrlInProcess(['eval', path.join(COUNTDOWN, 'flowrl-matching.yaml'), `trainer.default_local_dir=${tempDir()}`, 'trainer.progress=false']);
    expect(run.status, run.stderr).to.equal(0);
    const metrics = JSON.parse(run.stdout);
    expect(metrics['val/k']).to.equal(8);
    expect(metrics['val/accuracy']).to.be.within(0.15, 0.5);
    // The README's block after "What `npm start` prints": the summary npm start ends with. Its step-0
    // column is the base's validation, which this eval repeats (the same seed and settings); the
    // last column needs the 120 steps, so only its presence is checked here.
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const block = /What `npm start` prints[\s\S]*?```\n([\s\S]*?)```/.exec(readme)?.[1].trim().split('\n');
    expect(block, 'the README block').to.not.equal(undefined);
    expect(block![0]).to.match(/^validation\s+step 0\s+step 120$/);
    const rows: [string, string][] = [
      ['accuracy (mean over k samples)', 'val/accuracy'],
      ['pass@8', 'val/pass@k'],
      ['distinct correct per prompt', 'val/distinct_correct'],
      ['entropy over correct (nats)', 'val/correct_entropy'],
      ['entropy over all correct', 'val/matching/entropy'],
      ["  the reference's", 'val/matching/ref_entropy'],
      ['KL to reference over correct', 'val/matching/kl'],
    ];
    expect(block!.slice(1, 1 + rows.length).map((line) => line.slice(0, 32).trimEnd())).to.deep.equal(rows.map(([label]) => label));
    rows.forEach(([label, key], i) => {
      const cells = block![1 + i].slice(32).trim().split(/\s+/);
      expect(cells, label).to.have.length(2);
      expect(cells[0], `${label}, step 0`).to.equal(metrics[key].toFixed(3));
    });
    expect(block!.slice(1 + rows.length)).to.deep.equal(['run directory: runs/countdown-flowrl-matching', 'report: runs/countdown-flowrl-matching/report.html']);
  });
});

describe('examples/countdown: every algorithm of the comparison (compare-algorithms.sh)', function () {
  const COUNTDOWN = path.join(ROOT, 'examples', 'countdown');
  // What an algorithm may change: its own keys, the run name, and DAPO's generation batch.
  // The training rollouts' temperature is a tuned baseline's exploration, as flowrl.explore_temperature is flowrl-matching's.
  const algorithmPaths = [/^actor_rollout_ref\.actor\.(policy_loss\..*|clip_ratio.*|loss_agg_mode)$/, /^algorithm\./, /^reward_model\./, /^data\.gen_batch_size$/, /^flowrl\.(replay_samples|explore_temperature|reference_samples)$/, /^trainer\.experiment_name$/, /^actor_rollout_ref\.rollout\.temperature$/];
  const leaves = (tree: unknown, prefix = ''): Map<string, unknown> =>
    new Map(
      typeof tree === 'object' && tree !== null && !Array.isArray(tree)
        ? Object.entries(tree).flatMap(([k, v]) => [...leaves(v, prefix ? `${prefix}.${k}` : k)])
        : [[prefix, JSON.stringify(tree)]],
    );

  it('each config differs from grpo.yaml only in its algorithm keys, and is a valid config', async () => {
    const script = fs.readFileSync(path.join(COUNTDOWN, 'compare-algorithms.sh'), 'utf8');
    const names = [...script.matchAll(/\$here\/([\w-]+)\.yaml/g)].map((m) => m[1]);
    expect(names).to.include.members(['grpo', 'dapo', 'gspo', 'cispo', 'gmpo', 'grpo-kl-reward', 'grpo-replay', 'grpo-kl-reward-tuned', 'grpo-replay-tuned']);
    const grpo = leaves(YAML.parse(fs.readFileSync(path.join(COUNTDOWN, 'grpo.yaml'), 'utf8')));
    for (const name of ['dapo', 'gspo', 'cispo', 'gmpo', 'grpo-kl-reward', 'grpo-replay', 'grpo-kl-reward-tuned', 'grpo-replay-tuned']) {
      const file = path.join(COUNTDOWN, `${name}.yaml`);
      const other = leaves(YAML.parse(fs.readFileSync(file, 'utf8')));
      const changed = [...new Set([...grpo.keys(), ...other.keys()])].filter((k) => grpo.get(k) !== other.get(k));
      expect(changed.filter((k) => !algorithmPaths.some((p) => p.test(k))), name).to.deep.equal([]);
      // Validated as a run would be, its loss's keys included.
      const host = await createHost(file, { quiet: true });
      host.container.unbindAll();
    }
  });
});

describe('examples/countdown: FlowRL that matches, and the collapse experiment', function () {
  this.timeout(120_000);
  const COUNTDOWN = path.join(ROOT, 'examples', 'countdown');
  const PROMPTS = path.join(COUNTDOWN, 'collapse', 'prompts.jsonl');

  it('the collapse prompts are 24 distinct RL training problems with 16-18 correct answers each', async () => {
    const key = (row: DataRow) => countdownProblemKey(row.reward_model.ground_truth as CountdownProblem);
    const train = new Set((await readRows(path.join(COUNTDOWN, 'data', 'train.jsonl'))).map(key));
    const rows = await readRows(PROMPTS);
    expect(new Set(rows.map(key)).size).to.equal(24);
    for (const row of rows) {
      const { numbers, target } = row.reward_model.ground_truth as CountdownProblem;
      expect(train.has(key(row)), key(row)).to.equal(true);
      expect(solveCountdown(numbers, target).length, key(row)).to.be.within(16, 18);
    }
  });

  it('flowrl-matching.yaml trains with its flowrl keys: replayed rows, raw-score residuals, the replay in the checkpoint', async () => {
    const dir = tempDir();
    const run = await flowrlInProcess([
      'train',
      path.join(COUNTDOWN, 'flowrl-matching.yaml'),
      `trainer.default_local_dir=${dir}`,
      `data.train_files=${PROMPTS}`,
      'trainer.total_training_steps=4',
      'trainer.test_freq=-1',
      'trainer.val_before_train=false',
      'trainer.progress=false',
    ]);
    expect(run.status, run.stderr).to.equal(0);
    const saved = YAML.parse(fs.readFileSync(path.join(dir, 'config.yaml'), 'utf8')) as { flowrl: Record<string, unknown> };
    expect(saved.flowrl).to.include({ reward_source: 'score', length_normalize: false, log_z_lr_scale: 30, replay_samples: 2 });
    const metrics = readRunMetrics(dir);
    // 24 prompts at 16 per step: step 2 meets prompts of step 1 again, with their correct answers.
    expect(metrics.find((m) => m.step === 1)!['flowrl/replay_fraction']).to.equal(0);
    expect(Math.max(...metrics.map((m) => m['flowrl/replay_fraction']))).to.be.above(0);
    for (const m of metrics) expect(Number.isFinite(m['actor/log_z']), `step ${m.step}`).to.equal(true);
    expect(fs.existsSync(path.join(dir, 'checkpoints', 'global_step_4', 'flowrl_replay.json'))).to.equal(true);
  });
});

describe('examples/countdown/pass-at-k-table.ts', function () {
  this.timeout(60_000);

  it('prints each config’s mean and 95 % t interval over its seeds’ eval results', async () => {
    const dir = tempDir();
    const write = (name: string, accuracy: number, pass2: number) =>
      fs.writeFileSync(path.join(dir, `${name}.json`), JSON.stringify({ 'val/accuracy': accuracy, 'val/k': 2, 'val/pass@1': accuracy, 'val/pass@2': pass2, 'val/distinct_correct': 1, 'val/correct_entropy': 0 }) + '\n');
    write('grpo-seed1', 0.2, 0.3);
    write('grpo-seed2', 0.4, 0.5);
    write('base-seed1', 0.1, 0.2);
    const child = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'examples', 'countdown', 'pass-at-k-table.ts'), dir], { cwd: ROOT, encoding: 'utf8' });
    expect(child.status, child.stderr).to.equal(0);
    const lines = child.stdout.trim().split('\n');
    expect(lines[0]).to.match(/^metric\s+base \(1 seeds\)\s+grpo \(2 seeds\)$/);
    // grpo's pass@2: mean 0.4, half-width t(0.975, 1) · s/√2 with s = 0.1414: 12.706 · 0.1 = 1.271.
    expect(lines.find((l) => l.startsWith('pass@2 '))).to.match(/^pass@2\s+0\.200 \(CI n\/a\)\s+0\.400 \[-0\.871, 1\.671\]$/);
    expect(lines.map((l) => l.split(/\s{2,}/)[0])).to.deep.equal(['metric', 'Avg@2', 'pass@1', 'pass@2', 'distinct correct', 'correct entropy']);
    // --markdown: a row per config, the base first, Avg@k and pass@k (pass@8 and @32 only where logged).
    const md = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'examples', 'countdown', 'pass-at-k-table.ts'), dir, '--markdown'], { cwd: ROOT, encoding: 'utf8' });
    expect(md.status, md.stderr).to.equal(0);
    expect(md.stdout.trim().split('\n')).to.deep.equal([
      '| | seeds | Avg@2 | pass@2 | distinct correct |',
      '|---|---|---|---|---|',
      '| base policy | 1 | 0.100 | 0.200 | 1.000 |',
      '| grpo | 2 | 0.300 [-0.971, 1.571] | 0.400 [-0.871, 1.671] | 1.000 [1.000, 1.000] |',
    ]);
  });
});

describe('examples/countdown/collapse/ablation-table.ts', function () {
  this.timeout(60_000);

  it('prints each row over its finished seeds, and --versus the paired differences by seed', async () => {
    const { ablationTable } = await import('../examples/countdown/collapse/ablation-table.js');
    const dir = tempDir();
    const run = (name: string, accuracy: number, kl: number, steps = 150) => {
      fs.mkdirSync(path.join(dir, name));
      const lines = [{ step: 50, 'val/accuracy': 0 }, { step: steps, 'train/score': 1 }, { step: steps, 'val/accuracy': accuracy, 'val/matching/entropy': 0.5, 'val/matching/kl': kl, 'val/matching/tv': 0.1 }];
      fs.writeFileSync(path.join(dir, name, 'metrics.jsonl'), lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
    };
    run('a01-grpo-seed1', 0.5, 1.0);
    run('a01-grpo-seed2', 0.7, 1.2);
    run('a01-grpo-seed3', 0.6, 1.1);
    run('a02-other-seed1', 0.6, 0.4);
    run('a02-other-seed3', 0.8, 0.6);
    run('a02-other-seed2', 0.1, 0.1, 100); // still training: left out
    // a01's accuracy: mean 0.6, s = 0.1, half-width t(0.975, 2) · 0.1/√3 = 4.303 · 0.0577 = 0.248.
    expect(ablationTable(dir).split('\n')).to.deep.equal([
      '| row | seeds | accuracy | entropy over all correct | KL to the reference over correct | TV |',
      '|---|---|---|---|---|---|',
      '| a01-grpo | 1, 2, 3 | 0.600 [0.352, 0.848] | 0.500 [0.500, 0.500] | 1.100 [0.852, 1.348] | 0.100 [0.100, 0.100] |',
      '| a02-other | 1, 3 | 0.700 [-0.571, 1.971] | 0.500 [0.500, 0.500] | 0.500 [-0.771, 1.771] | 0.100 [0.100, 0.100] |',
    ]);
    // Paired over seeds 1 and 3: accuracy +0.1 and +0.2, KL -0.6 and -0.5 (half-widths 12.706 · 0.05 = 0.635).
    expect(ablationTable(dir, [['a01-grpo', 'a02-other']]).split('\n')[2]).to.equal('| a02-other − a01-grpo | 1, 3 | +0.150 [-0.485, +0.785] | +0.000 [+0.000, +0.000] | -0.550 [-1.185, +0.085] | +0.000 [+0.000, +0.000] |');
    expectInputError(() => ablationTable(tempDir()), 'no finished run');
    run('a03-late-seed4', 0.5, 0.5);
    expectInputError(() => ablationTable(dir, [['a01-grpo', 'a03-late']]), '--versus a01-grpo:a03-late: no seed has finished both');
    // From the command line: a pair naming no row exits 2, naming the pair and the rows there are.
    const unknown = spawnSync(process.execPath, ['--import', 'tsx', path.join(ROOT, 'examples', 'countdown', 'collapse', 'ablation-table.ts'), dir, '--versus', 'a01-grpo:a03'], { cwd: ROOT, encoding: 'utf8' });
    expect(unknown.status).to.equal(2);
    expect(unknown.stderr).to.include('--versus a01-grpo:a03').and.include('a01-grpo, a02-other');
  });
});

describe('examples/countdown/preregistered: the analysis PROTOCOL.md fixes', function () {
  this.timeout(60_000);

  it('interpolates along each beta curve, pairs by seed, applies Holm and the margin, on synthetic runs', async () => {
    const { atAccuracy, holm, pairedPValue, preregisteredTables, verdict, ARMS, BETAS, SEEDS } = await import('../examples/countdown/preregistered/table.js');
    // Interpolation: between the bracketing points, clamped (and flagged) outside.
    const curve = [{ accuracy: 0.9, value: 4 }, { accuracy: 0.5, value: 12 }, { accuracy: 0.7, value: 8 }];
    expect(atAccuracy(curve, 0.6)).to.deep.equal({ value: 10, clamped: false });
    expect(atAccuracy(curve, 0.95)).to.deep.equal({ value: 4, clamped: true });
    expect(atAccuracy(curve, 0.5)).to.deep.equal({ value: 12, clamped: false });
    // A paired t test: differences 1..5 give t = 4.243 on 4 df, p = 0.013236 (numerical integration of the t density).
    expect(pairedPValue([1, 2, 3, 4, 5])).to.be.closeTo(0.013236, 1e-5);
    // Holm: 0.01 <= 0.05/3 rejects; 0.03 > 0.05/2 stops, so 0.04 is not rejected either.
    expect(holm([0.04, 0.01, 0.03])).to.deep.equal([false, true, false]);
    expect(holm([0.001, 0.02, 0.04])).to.deep.equal([true, true, true]);
    expect(verdict({ low: 0.2, high: 2 }, true)).to.equal('more distinct answers');
    expect(verdict({ low: -0.5, high: 0.9 }, false)).to.equal('equivalent (within ±1)');
    expect(verdict({ low: -0.5, high: 1.5 }, false)).to.equal('not shown either way');

    // Synthetic runs: accuracy falls with beta the same way in every arm; flowrl-matching keeps 3
    // more distinct answers (plus seed noise), flowrl-recipe the same as grpo-kl.
    const dir = tempDir();
    for (const arm of ARMS) for (const [b, beta] of BETAS.entries()) for (const [s, seed] of SEEDS.entries()) {
      const accuracy = 0.9 - 0.1 * b + 0.01 * s;
      const distinct = 6 + 2 * b + (arm === 'flowrl-matching' ? 3 + 0.1 * s : arm === 'flowrl-no-log-z' ? 0.5 * (s % 2 ? 1 : -1) : 0);
      const name = `${arm}-beta${beta}-seed${seed}`;
      fs.mkdirSync(path.join(dir, name));
      const line = { step: 150, 'val/accuracy': accuracy, 'val/distinct_correct': distinct, 'val/matching/entropy': 1, 'val/matching/kl': 0.5 };
      fs.writeFileSync(path.join(dir, name, 'metrics.jsonl'), JSON.stringify(line) + '\n');
    }
    const text = preregisteredTables(dir);
    expect(text).to.include('(60 of 60 runs finished)').and.include('A* = 0.8200');
    const primary = text.split('\n').filter((l) => l.startsWith('| flowrl-'));
    expect(primary[0]).to.match(/^\| flowrl-recipe \| 5 \| .* \| \+0\.000 \[\+0\.000, \+0\.000\] \| 1\.0000 \| no \| 0 \| equivalent/);
    expect(primary[1]).to.match(/^\| flowrl-matching \| 5 \| .* \| \+3\.200 \[.*\] \| 0\.0000 \| rejects \| 0 \| more distinct answers \|$/);
    expect(primary[2]).to.match(/\| no \| 0 \| (not shown either way|equivalent \(within ±1\)) \|$/);
    expectInputError(() => preregisteredTables(tempDir()), 'no finished run');

    // The second experiment's design: A* and every comparison from its own baseline.
    const { ROWS_EXPERIMENT } = await import('../examples/countdown/preregistered/rows/table.js');
    const rowsDir = tempDir();
    for (const arm of ROWS_EXPERIMENT.arms) for (const [b, beta] of ROWS_EXPERIMENT.betas.entries()) for (const [s, seed] of ROWS_EXPERIMENT.seeds.entries()) {
      const accuracy = arm === 'grpo-replay-tuned' ? 0.6 + 0.1 * b : 0.9 - 0.1 * b + 0.01 * s;
      const line = { step: 150, 'val/accuracy': accuracy, 'val/distinct_correct': arm === 'flowrl-matching' ? 5 : 4 + 0.1 * s, 'val/matching/entropy': 1, 'val/matching/kl': 0.5 };
      fs.mkdirSync(path.join(rowsDir, `${arm}-beta${beta}-seed${seed}`));
      fs.writeFileSync(path.join(rowsDir, `${arm}-beta${beta}-seed${seed}`, 'metrics.jsonl'), JSON.stringify(line) + '\n');
    }
    const rowsText = preregisteredTables(rowsDir, ROWS_EXPERIMENT);
    expect(rowsText).to.include('(45 of 45 runs finished)').and.include('A* = 0.7000 (mean accuracy of 15 grpo-replay-tuned runs)');
    expect(rowsText).to.include('| arm | seeds | distinct correct at A* | minus grpo-replay-tuned (95 % t) |');
    expect(rowsText.split('\n').filter((l) => l.startsWith('| flowrl-matching'))[0]).to.match(/\| \+0\.800 \[\+0\.604, \+0\.996\] \|/);
  });

  it("RESULTS.md is what table.ts prints from the committed runs (all 60), and each run's line is its step-150 validation", async () => {
    const { preregisteredTables } = await import('../examples/countdown/preregistered/table.js');
    const here = path.join(ROOT, 'examples', 'countdown', 'preregistered');
    const runs = fs.readdirSync(path.join(here, 'results'));
    expect(runs).to.have.length(60);
    for (const run of runs) {
      const lines = fs.readFileSync(path.join(here, 'results', run, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, number>);
      expect(lines.map((l) => [l.step, 'val/accuracy' in l, 'val/distinct_correct' in l]), run).to.deep.equal([[150, true, true]]);
    }
    expect(fs.readFileSync(path.join(here, 'RESULTS.md'), 'utf8')).to.equal(preregisteredTables(path.join(here, 'results')) + '\n');
  });

  it("the second experiment's RESULTS.md is what rows/table.ts prints from its committed runs (all 45), each its step-150 validation", async () => {
    const { preregisteredTables } = await import('../examples/countdown/preregistered/table.js');
    const { ROWS_EXPERIMENT } = await import('../examples/countdown/preregistered/rows/table.js');
    const here = path.join(ROOT, 'examples', 'countdown', 'preregistered', 'rows');
    const runs = fs.readdirSync(path.join(here, 'results'));
    expect(runs).to.have.length(45);
    for (const run of runs) {
      const lines = fs.readFileSync(path.join(here, 'results', run, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, number>);
      expect(lines.map((l) => [l.step, 'val/accuracy' in l, 'val/distinct_correct' in l]), run).to.deep.equal([[150, true, true]]);
    }
    expect(fs.readFileSync(path.join(here, 'RESULTS.md'), 'utf8')).to.equal(preregisteredTables(path.join(here, 'results'), ROWS_EXPERIMENT) + '\n');
  });
});

describe('examples/code: programming by example scored in the sandbox', function () {
  this.timeout(120_000);
  const CODE = path.join(ROOT, 'examples', 'code');

  it('grpo.yaml and flowrl.yaml differ only in algorithm.name and run name; no validation prompt is a training prompt', async () => {
    const [grpo, flowrl] = ['grpo.yaml', 'flowrl.yaml'].map((f) => YAML.parse(fs.readFileSync(path.join(CODE, f), 'utf8')) as Record<string, Record<string, unknown>>);
    expect({ ...flowrl, algorithm: grpo.algorithm, trainer: { ...flowrl.trainer, experiment_name: grpo.trainer.experiment_name } }).to.deep.equal(grpo);
    expect(flowrl.algorithm).to.deep.equal({ name: 'flowrl' });
    const prompt = (row: DataRow) => row.prompt[0].content;
    const train = new Set((await readRows(path.join(CODE, 'data', 'train.jsonl'))).map(prompt));
    const val = (await readRows(path.join(CODE, 'data', 'val.jsonl'))).map(prompt);
    expect(val).to.have.length(512);
    expect(val.filter((p) => train.has(p))).to.deep.equal([]);
  });

  it('flowrl.yaml trains two steps with every response run in the sandbox', async () => {
    const dir = tempDir();
    // Half the example's batch (64 programs a step): each still run in the sandbox and scored.
    const half = ['data.train_batch_size=8', 'actor_rollout_ref.actor.ppo_mini_batch_size=8'];
    const run = await flowrlInProcess(['train', path.join(CODE, 'flowrl.yaml'), `trainer.default_local_dir=${dir}`, 'trainer.total_training_steps=2', 'trainer.test_freq=-1', 'trainer.val_before_train=false', 'trainer.progress=false', ...half]);
    expect(run.status, run.stderr).to.equal(0);
    const metrics = readRunMetrics(dir);
    expect(metrics).to.have.length(2);
    for (const m of metrics) {
      // A policy that writes programs: some pass, and each response was scored (0 or 1 under one assert).
      expect(m['reward/acc/mean'], `step ${m.step}`).to.be.within(0.02, 0.9);
      expect(m['critic/score/mean']).to.equal(m['reward/acc/mean']);
    }
  });
});

describe('examples/countdown/one-step-off', function () {
  it('sync.yaml and one-step-off.yaml differ only in trainer.one_step_off_policy and the run name, on two servers', () => {
    const dir = path.join(ROOT, 'examples', 'countdown', 'one-step-off');
    const [sync, off] = ['sync.yaml', 'one-step-off.yaml'].map((f) => YAML.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as { trainer: Record<string, unknown>; actor_rollout_ref: { rollout: { name: string; server: { urls: string[]; max_staleness: number } } } });
    expect(off.trainer.one_step_off_policy).to.equal(true);
    expect({ ...off, trainer: { ...off.trainer, one_step_off_policy: undefined, experiment_name: sync.trainer.experiment_name } }).to.deep.equal({ ...sync, trainer: { ...sync.trainer, one_step_off_policy: undefined } });
    expect(sync.actor_rollout_ref.rollout.server.urls).to.have.length(2);
    expect(sync.actor_rollout_ref.rollout.server.max_staleness).to.equal(1);
  });
});

describe('flowrl example: the shipped examples copied out for an installed flowrl', function () {
  this.timeout(60_000);

  it('copies what the example uses first, into a directory it makes, rewritten (plugins by package name, imports from flowrl/core); an unknown name or a taken target writes nothing', async () => {
    const { exampleCommand } = await import('../core-adapters/cli/example-command.js');
    const out = path.join(tempDir(), 'new', 'dir');
    const log = console.log;
    console.log = () => {};
    try {
      await exampleCommand(['custom-plugin', out]);
    } finally {
      console.log = log;
    }
    expect(fs.readdirSync(out).sort()).to.deep.equal(['countdown', 'custom-plugin']);
    expect(fs.readFileSync(path.join(out, 'countdown', 'grpo.yaml'), 'utf8')).to.contain('plugins: [flowrl]');
    expect(fs.readFileSync(path.join(out, 'custom-plugin', 'config.yaml'), 'utf8')).to.contain('- flowrl').and.contain('../countdown/base-model').and.not.contain('test/fixtures');
    expect(fs.readFileSync(path.join(out, 'custom-plugin', 'index.ts'), 'utf8')).to.contain("from 'flowrl/core'");
    // TypeScript sources are ES modules whatever the project's type: each example with them says so.
    expect(JSON.parse(fs.readFileSync(path.join(out, 'custom-plugin', 'package.json'), 'utf8'))).to.deep.equal({ type: 'module' });
    // Every example the README links from the package is one this command copies, or the README says it is not shipped.
    const { EXAMPLES } = await import('../core-adapters/cli/example-command.js');
    const shipped = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).files as string[];
    const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    for (const [, name] of readme.matchAll(/\]\(examples\/([\w-]+)\/README\.md\)/g)) {
      if (Object.hasOwn(EXAMPLES, name)) expect(shipped, `examples/${name} ships`).to.include(`examples/${name}`);
      else expect(readme, `the README says examples/${name} is not shipped`).to.match(new RegExp(`${name}[^.]*are in this repository only`));
    }
    for (const bad of [['toString'], ['nope'], ['custom-plugin', out]]) await expectInputErrorAsync(exampleCommand(bad), bad[0] === 'custom-plugin' ? 'exists; nothing was written' : 'flowrl example');
  });
});
