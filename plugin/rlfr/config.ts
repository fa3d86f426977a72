// The reward.flow config section (defaults in plugin.json), read and checked in one place.
import { InputError, type Config } from '../../core-adapters/index.js';
import { CONTEXT_MODES, type ContextMode } from './latents.js';
import type { FlowNorm } from './shaping.js';

export const FLOW_NORMS: readonly FlowNorm[] = ['minmax', 'minmax-bil'];
/** Times of the online flow loss: the rewarding timesteps (the reference) or logit-normal (as pre-training). */
export const ONLINE_TIMES = ['rewarding', 'logit_normal'] as const;
/**
 * When the field trains online. actor_step (the reference): one step per actor optimizer step, on
 * that mini-batch's correct rollouts under the weights its forward used, the loss normalised over
 * all its sequences (incorrect ones add zero). training_step: one step per training step, on the
 * rollout latents the rewards were scored with, normalised over the correct sequences.
 */
export const ONLINE_CADENCES = ['actor_step', 'training_step'] as const;

export interface FlowRewardConfig {
  enable: boolean;
  /** Directory written by flowrl flow-pretrain (flow_model.safetensors + flow_config.json); null: a fresh field. */
  flow_model: string | null;
  /** For a fresh field: residual blocks, and width (null: the policy's hidden size). */
  depth: number;
  width: number | null;
  hook_layers_percentile: number[];
  context_mode: ContextMode;
  rewarding_timesteps: number[];
  threshold: number;
  topk: number;
  norm: FlowNorm;
  coef: number;
  /** Sequences per policy forward when reading latents. */
  micro_batch_size: number;
  online: {
    enable: boolean;
    lr: number;
    betas: number[];
    weight_decay: number;
    warmup_ratio: number;
    min_lr_ratio: number;
    grad_clip: number;
    /** Rollouts whose score is at least this train the field. */
    reward_threshold: number;
    time_sampling: (typeof ONLINE_TIMES)[number];
    cadence: (typeof ONLINE_CADENCES)[number];
  };
  pretrain: {
    /** Rows with reference responses; null: data.train_files. */
    train_files: string | string[] | null;
    /** Dotted path of the response in each row; null: sft.response_key. */
    response_key: string | null;
    epochs: number;
    total_steps: number | null;
    batch_size: number;
    /** Independent (t, noise) draws per token. */
    batch_mul: number;
    lr: number;
    weight_decay: number;
    warmup_ratio: number;
    min_lr_ratio: number;
    grad_clip: number;
    /** null: <trainer.default_local_dir>/flow-model. */
    output_dir: string | null;
  };
}

function check(ok: boolean, key: string, want: string, value: unknown): void {
  if (!ok) throw new InputError(`reward.flow.${key} must be ${want}; got ${JSON.stringify(value)}`);
}

const positiveInteger = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 1;

export function flowRewardConfig(config: Config): FlowRewardConfig {
  const section = (config.reward as { flow?: FlowRewardConfig } | undefined)?.flow;
  if (!section) throw new InputError("config section 'reward.flow' is missing; is the FlowRL plugin registered under plugins:?");
  const f = section;
  check(CONTEXT_MODES.includes(f.context_mode), 'context_mode', `one of ${CONTEXT_MODES.join(', ')}`, f.context_mode);
  check(FLOW_NORMS.includes(f.norm), 'norm', `one of ${FLOW_NORMS.join(', ')}`, f.norm);
  check(f.hook_layers_percentile.length > 0 && f.hook_layers_percentile.every((p) => p > 0 && p <= 1), 'hook_layers_percentile', 'a non-empty list of depth fractions in (0, 1]', f.hook_layers_percentile);
  check(f.rewarding_timesteps.length > 0 && f.rewarding_timesteps.every((t) => t > 0 && t < 1), 'rewarding_timesteps', 'a non-empty list of times in (0, 1)', f.rewarding_timesteps);
  check(positiveInteger(f.depth), 'depth', 'a whole number >= 1', f.depth);
  check(f.width === null || positiveInteger(f.width), 'width', 'null or a whole number >= 1', f.width);
  check(Number.isInteger(f.topk), 'topk', 'a whole number (<= 0 disables)', f.topk);
  check(f.coef >= 0, 'coef', 'a number >= 0', f.coef);
  check(positiveInteger(f.micro_batch_size), 'micro_batch_size', 'a whole number >= 1', f.micro_batch_size);
  check(ONLINE_TIMES.includes(f.online.time_sampling), 'online.time_sampling', `one of ${ONLINE_TIMES.join(', ')}`, f.online.time_sampling);
  check(f.online.lr > 0, 'online.lr', 'a number > 0', f.online.lr);
  check(f.online.betas.length === 2 && f.online.betas.every((b) => b >= 0 && b < 1), 'online.betas', 'two numbers in [0, 1)', f.online.betas);
  check(f.online.warmup_ratio >= 0 && f.online.warmup_ratio < 1, 'online.warmup_ratio', 'in [0, 1)', f.online.warmup_ratio);
  check(f.online.min_lr_ratio >= 0 && f.online.min_lr_ratio <= 1, 'online.min_lr_ratio', 'in [0, 1]', f.online.min_lr_ratio);
  const nonNegative = (v: unknown) => typeof v === 'number' && v >= 0;
  check(nonNegative(f.online.grad_clip), 'online.grad_clip', 'a number >= 0 (0: no clipping)', f.online.grad_clip);
  check(nonNegative(f.online.weight_decay), 'online.weight_decay', 'a number >= 0', f.online.weight_decay);
  check(typeof f.online.reward_threshold === 'number', 'online.reward_threshold', 'a number', f.online.reward_threshold);
  check(ONLINE_CADENCES.includes(f.online.cadence), 'online.cadence', `one of ${ONLINE_CADENCES.join(', ')}`, f.online.cadence);
  check(f.flow_model === null || (typeof f.flow_model === 'string' && f.flow_model !== ''), 'flow_model', 'null or a directory path', f.flow_model);
  if (f.enable && f.flow_model === null && (!f.online.enable || f.coef === 0)) {
    throw new InputError(
      'reward.flow: enable is true but the field can never give a reward (no flow_model, and ' +
        (f.online.enable ? 'coef is 0' : 'online.enable is false, so it never trains') +
        '); set reward.flow.flow_model to a directory from flowrl flow-pretrain',
    );
  }
  const p = f.pretrain;
  const pathOrNull = (v: unknown) => v === null || (typeof v === 'string' && v !== '');
  check(pathOrNull(p.output_dir), 'pretrain.output_dir', 'null or a directory path', p.output_dir);
  check(pathOrNull(p.response_key), 'pretrain.response_key', 'null or a dotted key', p.response_key);
  check(pathOrNull(p.train_files) || (Array.isArray(p.train_files) && p.train_files.every((x) => typeof x === 'string')), 'pretrain.train_files', 'null, a path or a list of paths', p.train_files);
  check(nonNegative(p.grad_clip), 'pretrain.grad_clip', 'a number >= 0 (0: no clipping)', p.grad_clip);
  check(nonNegative(p.weight_decay), 'pretrain.weight_decay', 'a number >= 0', p.weight_decay);
  check(p.min_lr_ratio >= 0 && p.min_lr_ratio <= 1, 'pretrain.min_lr_ratio', 'in [0, 1]', p.min_lr_ratio);
  check(positiveInteger(p.epochs), 'pretrain.epochs', 'a whole number >= 1', p.epochs);
  check(p.total_steps === null || positiveInteger(p.total_steps), 'pretrain.total_steps', 'null or a whole number >= 1', p.total_steps);
  check(positiveInteger(p.batch_size), 'pretrain.batch_size', 'a whole number >= 1', p.batch_size);
  check(positiveInteger(p.batch_mul), 'pretrain.batch_mul', 'a whole number >= 1', p.batch_mul);
  check(p.lr > 0, 'pretrain.lr', 'a number > 0', p.lr);
  check(p.warmup_ratio >= 0 && p.warmup_ratio < 1, 'pretrain.warmup_ratio', 'in [0, 1)', p.warmup_ratio);
  return f;
}
