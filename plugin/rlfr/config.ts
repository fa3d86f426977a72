// The reward.flow config section. plugin.json declares each key (default, doc, choices, range) and
// the host validates them; what is left here is what a key's spec cannot say (list elements) or
// what spans keys.
import { InputError, type Config } from '../../core-adapters/index.js';
import type { ContextMode } from './latents.js';
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

export function flowRewardConfig(config: Config): FlowRewardConfig {
  const section = (config.reward as { flow?: FlowRewardConfig } | undefined)?.flow;
  if (!section) throw new InputError("config section 'reward.flow' is missing; is the FlowRL plugin registered under plugins:?");
  const f = section;
  check(f.hook_layers_percentile.length > 0 && f.hook_layers_percentile.every((p) => p > 0 && p <= 1), 'hook_layers_percentile', 'a non-empty list of depth fractions in (0, 1]', f.hook_layers_percentile);
  check(f.rewarding_timesteps.length > 0 && f.rewarding_timesteps.every((t) => t > 0 && t < 1), 'rewarding_timesteps', 'a non-empty list of times in (0, 1)', f.rewarding_timesteps);
  check(f.online.betas.length === 2 && f.online.betas.every((b) => b >= 0 && b < 1), 'online.betas', 'two numbers in [0, 1)', f.online.betas);
  if (f.enable && f.flow_model === null && (!f.online.enable || f.coef === 0)) {
    throw new InputError(
      'reward.flow: enable is true but the field can never give a reward (no flow_model, and ' +
        (f.online.enable ? 'coef is 0' : 'online.enable is false, so it never trains') +
        '); set reward.flow.flow_model to a directory from flowrl flow-pretrain',
    );
  }
  return f;
}
