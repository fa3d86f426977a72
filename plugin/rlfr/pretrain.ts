// flowrl flow-pretrain: RLFR's offline stage (README "RLFR flow rewards": flow-pretrain). The policy is frozen;
// the velocity field learns, by rectified flow, the distribution of the policy's latents on
// reference responses (response tokens only, each drawn batch_mul times with fresh t and noise).
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import { inject, injectable } from 'inversify';
import {
  AdamW,
  fileList,
  InputError,
  readScalar,
  loadModel,
  lossAndGradients,
  packSequences,
  readSftExamples,
  responseMask,
  Rng,
  runUpdateLoop,
  scheduledLr,
  shuffledBatches,
  TextTokenizer,
  TOKENS,
  writeDirectoryAtomically,
  type CausalLM,
  type Config,
  type PluginCommand,
  type SftExample,
} from '../../core-adapters/index.js';
import { flowRewardConfig, type FlowRewardConfig } from './config.js';
import { FlowModel } from './flow-model.js';
import { responseLatents, type TokenLatents } from './latents.js';
import { flowMatchingLoss } from './velocity-field.js';

/** Reference examples held out to measure the loss before and after (at most this many). */
const HELD_OUT = 256;

/** Every read layer's rows, `repeats` times each, as one [n, d] batch with per-row layer ids. */
function stackLatents(latents: TokenLatents, layerIds: number[], repeats: number): { x1: tf.Tensor2D; context: tf.Tensor2D; layer: Float32Array } {
  const d = latents.size;
  const parts = layerIds.flatMap((_, l) => Array.from({ length: repeats }, () => l));
  return tf.tidy(() => ({
    x1: tf.concat(parts.map((l) => tf.tensor2d(latents.targets[l], [latents.rows, d]))) as tf.Tensor2D,
    context: tf.concat(parts.map((l) => tf.tensor2d(latents.contexts[l], [latents.rows, d]))) as tf.Tensor2D,
    layer: Float32Array.from({ length: parts.length * latents.rows }, (_, i) => layerIds[parts[Math.floor(i / latents.rows)]]),
  }));
}

export interface FlowPretrainResult {
  outputDir: string;
  steps: number;
  /** Mean rectified-flow loss on held-out reference responses, before and after. */
  heldOutBefore: number;
  heldOutAfter: number;
  trainLoss: number;
}

export class FlowPretrainer {
  readonly flow: FlowRewardConfig;

  constructor(
    readonly config: Config,
    readonly lm: CausalLM,
    readonly model: FlowModel,
    readonly padId: number,
  ) {
    this.flow = flowRewardConfig(config);
  }

  latents(examples: SftExample[]): Promise<TokenLatents> {
    const seq = packSequences(examples.map((e) => e.prompt), examples.map((e) => e.response), this.padId);
    return responseLatents(this.lm, seq, this.model.layers, this.model.config.context_mode, responseMask(seq), this.flow.micro_batch_size);
  }

  /** The loss on `examples` with the given noise seed (one draw per token per layer). */
  async loss(examples: SftExample[], seed: number): Promise<number> {
    let total = 0;
    let rows = 0;
    for (let start = 0; start < examples.length; start += this.flow.pretrain.batch_size) {
      const latents = await this.latents(examples.slice(start, start + this.flow.pretrain.batch_size));
      if (!latents.rows) continue;
      const { x1, context, layer } = stackLatents(latents, this.model.layerIds, 1);
      const loss = tf.tidy(() => flowMatchingLoss(this.model.field, x1, context, layer, new Float32Array(layer.length).fill(1), Rng.derive(seed, start)));
      try {
        total += (await readScalar(loss, 'the flow pretraining loss')) * latents.rows;
      } finally {
        tf.dispose([loss, x1, context]);
      }
      rows += latents.rows;
    }
    return rows ? total / rows : 0;
  }

  /** Adds the flow loss's gradients on a batch of reference examples into grads; returns the loss (NaN: no tokens). */
  async gradients(examples: SftExample[], rng: Rng, grads: Map<string, tf.Tensor>): Promise<number> {
    const latents = await this.latents(examples);
    if (!latents.rows) return NaN;
    const { x1, context, layer } = stackLatents(latents, this.model.layerIds, this.flow.pretrain.batch_mul);
    const mask = new Float32Array(layer.length).fill(1);
    const out = lossAndGradients(() => flowMatchingLoss(this.model.field, x1, context, layer, mask, rng), this.model.field.params);
    for (const [name, g] of out.grads) grads.set(name, g);
    try {
      return await readScalar(out.loss, 'the flow pretraining loss');
    } finally {
      tf.dispose([out.loss, x1, context]);
    }
  }

}

export async function flowPretrain(config: Config, log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<FlowPretrainResult> {
  const flow = flowRewardConfig(config);
  const p = flow.pretrain;
  const modelPath = config.actor_rollout_ref.model.path;
  if (!modelPath) throw new InputError('actor_rollout_ref.model.path is not set; flow-pretrain reads the latents of that policy');
  const files = p.train_files === null ? fileList(config.data.train_files) : fileList(p.train_files);
  if (!files.length) throw new InputError('reward.flow.pretrain.train_files (or data.train_files) is not set; flow-pretrain needs rows with reference responses');
  const tokenizer = TextTokenizer.load(config.actor_rollout_ref.model.tokenizer_path ?? modelPath);
  const examples = await readSftExamples(files, tokenizer, {
    responseKey: p.response_key ?? config.sft.response_key,
    keyName: p.response_key === null ? 'sft.response_key' : 'reward.flow.pretrain.response_key',
    maxPromptLength: config.data.max_prompt_length,
    maxResponseLength: config.data.max_response_length,
  });
  if (examples.length < 2) throw new InputError(`${files.join(', ')}: fewer than 2 usable rows within data.max_prompt_length / max_response_length`);
  const rng = new Rng(config.trainer.seed);
  const shuffled = rng.shuffle([...examples]);
  const heldOut = shuffled.splice(0, Math.min(HELD_OUT, Math.floor(shuffled.length / 20) || 1));
  const lm = loadModel(modelPath);
  const model = FlowModel.create(lm, flow, config.trainer.seed);
  const trainer = new FlowPretrainer(config, lm, model, tokenizer.padTokenId ?? 0);
  const stepsPerEpoch = Math.ceil(shuffled.length / p.batch_size);
  const total = p.total_steps ?? p.epochs * stepsPerEpoch;
  const optimizer = new AdamW({ lr: p.lr, weightDecay: p.weight_decay });
  const schedule = { lr: p.lr, warmupSteps: Math.floor(p.warmup_ratio * total), totalSteps: total, minLrRatio: p.min_lr_ratio };
  const evalSeed = config.trainer.seed + 7919;
  const heldOutBefore = await trainer.loss(heldOut, evalSeed);
  log(`flow-pretrain: ${shuffled.length} reference responses (${heldOut.length} held out), layers ${model.layers.join(', ')}, ${total} steps of ${p.batch_size} x ${p.batch_mul}; held-out loss ${heldOutBefore.toFixed(4)}`);
  let recent = 0;
  let count = 0;
  let trainLoss = NaN;
  let loss = NaN;
  const started = Date.now();
  await runUpdateLoop<SftExample[]>({
    miniBatches: shuffledBatches(shuffled, p.batch_size, total, rng),
    rows: (examples) => examples.length,
    accumulate: async (examples, { index }, grads) => {
      loss = await trainer.gradients(examples, Rng.derive(config.trainer.seed, index), grads);
    },
    afterStep: (_examples, applied, step) => {
      // A non-finite gradient would poison the field for good: the loop skips that step. A step at
      // lr 0 (the first of a warm-up) changes nothing, so it does not count as training.
      if (applied && optimizer.lr > 0) model.config.trained_steps += 1;
      if (Number.isFinite(loss)) {
        recent += loss;
        count += 1;
      }
      if ((step + 1) % 50 === 0 || step + 1 === total) {
        trainLoss = count ? recent / count : NaN;
        log(`flow-pretrain step ${step + 1}/${total} loss ${trainLoss.toFixed(4)} (${((Date.now() - started) / 1000).toFixed(0)} s)`);
        recent = 0;
        count = 0;
      }
    },
    optimizer,
    params: model.field.params,
    maxGradNorm: p.grad_clip,
    lr: (step) => scheduledLr(schedule, step),
    prefix: 'flow',
  });
  const heldOutAfter = await trainer.loss(heldOut, evalSeed);
  const outputDir = p.output_dir ?? path.join(config.trainer.default_local_dir!, 'flow-model');
  await writeDirectoryAtomically(outputDir, (tmp) => model.save(tmp));
  log(`flow-pretrain: held-out loss ${heldOutBefore.toFixed(4)} -> ${heldOutAfter.toFixed(4)}`);
  optimizer.dispose();
  model.dispose();
  lm.dispose();
  return { outputDir, steps: total, heldOutBefore, heldOutAfter, trainLoss };
}

/** `flowrl flow-pretrain CONFIG [key=value ...]`. */
@injectable()
export class FlowPretrainCommand implements PluginCommand {
  readonly name = 'flow-pretrain';

  constructor(@inject(TOKENS.Config) private readonly config: Config) {}

  async run(): Promise<void> {
    const result = await flowPretrain(this.config);
    console.log(`wrote ${result.outputDir} after ${result.steps} steps (held-out flow loss ${result.heldOutBefore.toFixed(4)} -> ${result.heldOutAfter.toFixed(4)}); set reward.flow.flow_model to it`);
  }
}
