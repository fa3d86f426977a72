// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW) and global-norm gradient clipping
// (torch.nn.utils.clip_grad_norm_); tfjs ships neither.
import * as tf from '@tensorflow/tfjs-core';
import { readAllFloat32, readScalar } from '../engine/readback.js';
import { fusedAdamW } from '../engine/kernels.js';
import { adamWOnGpu } from '../engine/webgpu-kernels.js';
import { InputError } from '../errors.js';
import { LR_SCHEDULER_TYPES } from '../config/choices.js';

/** AdamW's settings (PyTorch's names and defaults). */
export interface AdamWOptions {
  lr: number;
  betas?: [number, number];
  eps?: number;
  weightDecay?: number;
}

/** Optimizer state for checkpoints: step count and the two moments per variable name. */
export interface AdamWState {
  step: number;
  moments: Map<string, { m: Float32Array; v: Float32Array; shape: number[] }>;
}

/** AdamW with decoupled weight decay, step for step as torch.optim.AdamW (fused in place on the native path and on webgpu). */
export class AdamW {
  lr: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  private stepCount = 0;
  private readonly m = new Map<string, tf.Variable>();
  private readonly v = new Map<string, tf.Variable>();
  /** Per-parameter multipliers of lr (PyTorch's parameter groups with their own lr); absent: 1. */
  readonly lrScale = new Map<string, number>();

  constructor(options: AdamWOptions) {
    this.lr = options.lr;
    [this.beta1, this.beta2] = options.betas ?? [0.9, 0.999];
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0.01;
  }

  get step(): number {
    return this.stepCount;
  }

  private slot(slots: Map<string, tf.Variable>, name: string, variable: tf.Variable): tf.Variable {
    let s = slots.get(name);
    if (!s) {
      s = tf.tidy(() => tf.variable(tf.zerosLike(variable), false));
      slots.set(name, s);
    }
    return s;
  }

  /**
   * One update of every parameter that has a gradient. Parameters and gradients are keyed by
   * stable names (not tfjs variable names), which also key the saved state.
   */
  apply(params: Map<string, tf.Variable>, grads: Map<string, tf.Tensor>): void {
    this.stepCount += 1;
    const t = this.stepCount;
    const bc2Sqrt = Math.sqrt(1 - this.beta2 ** t);
    for (const [name, variable] of params) {
      const g = grads.get(name);
      if (!g) continue;
      const lr = this.lr * (this.lrScale.get(name) ?? 1);
      const stepSize = lr / (1 - this.beta1 ** t);
      const m = this.slot(this.m, name, variable);
      const v = this.slot(this.v, name, variable);
      const hyper = { decayFactor: 1 - lr * this.weightDecay, beta1: this.beta1, beta2: this.beta2, eps: this.eps, stepSize, bc2Sqrt };
      if (fusedAdamW(variable, g, m, v, hyper) || adamWOnGpu(variable, g, m, v, hyper)) continue;
      tf.tidy(() => {
        const decayed = tf.mul(variable, 1 - lr * this.weightDecay);
        const mNext = tf.add(tf.mul(m, this.beta1), tf.mul(g, 1 - this.beta1));
        const vNext = tf.add(tf.mul(v, this.beta2), tf.mul(tf.mul(g, g), 1 - this.beta2));
        const denom = tf.add(tf.div(tf.sqrt(vNext), bc2Sqrt), this.eps);
        m.assign(mNext);
        v.assign(vNext);
        variable.assign(tf.sub(decayed, tf.mul(tf.div(mNext, denom), stepSize)));
      });
    }
  }

  async getState(): Promise<AdamWState> {
    const moments = new Map<string, { m: Float32Array; v: Float32Array; shape: number[] }>();
    for (const [name, m] of this.m) {
      const [mValues, vValues] = await readAllFloat32([m, this.v.get(name)!], `optimizer state of ${name}`);
      moments.set(name, { m: Float32Array.from(mValues), v: Float32Array.from(vValues), shape: [...m.shape] });
    }
    return { step: this.stepCount, moments };
  }

  /** Restores step count and moments for the given parameters (matched by name). */
  setState(state: AdamWState, params: Map<string, tf.Variable>): void {
    this.stepCount = state.step;
    for (const [name, variable] of params) {
      const saved = state.moments.get(name);
      if (!saved) continue;
      const m = this.slot(this.m, name, variable);
      const v = this.slot(this.v, name, variable);
      tf.tidy(() => {
        m.assign(tf.tensor(saved.m, saved.shape));
        v.assign(tf.tensor(saved.v, saved.shape));
      });
    }
  }

  dispose(): void {
    tf.dispose([...this.m.values(), ...this.v.values()]);
    this.m.clear();
    this.v.clear();
  }
}

/** A learning-rate schedule: linear warm-up, then constant or cosine. */
export interface LrSchedule {
  lr: number;
  /** Linear warm-up from 0 over this many scheduler steps (0: none). */
  warmupSteps?: number;
  /** Cosine decay to minLrRatio * lr at this step; unset: constant after warm-up. */
  totalSteps?: number;
  minLrRatio?: number;
  /** Cosine periods over the decay (0.5: half a period, from lr down to the floor). */
  numCycles?: number;
}

/**
 * The learning rate at 0-based scheduler step k, as verl's and Hugging Face's schedules compute it
 * (verl/utils/torch_functional.py, transformers' cosine_with_min_lr): k / warmupSteps during the
 * warm-up (so step 0 runs at lr 0), then constant, or a cosine from lr to minLrRatio * lr.
 */
export function scheduledLr(schedule: LrSchedule, k: number): number {
  const { lr, warmupSteps = 0, totalSteps, minLrRatio = 0, numCycles = 0.5 } = schedule;
  if (k < warmupSteps) return (lr * k) / Math.max(1, warmupSteps);
  if (totalSteps === undefined) return lr;
  const progress = (k - warmupSteps) / Math.max(1, totalSteps - warmupSteps);
  return lr * (minLrRatio + (1 - minLrRatio) * 0.5 * (1 + Math.cos(2 * Math.PI * numCycles * Math.min(1, progress))));
}

/** verl's optimizer schedule keys (actor_rollout_ref.actor.optim, critic.optim). */
export interface VerlOptimSchedule {
  lr: number;
  /** Warm-up steps; negative: floor(lr_warmup_steps_ratio * total_training_steps). */
  lr_warmup_steps: number;
  lr_warmup_steps_ratio: number;
  lr_scheduler_type: string;
  /** verl's deprecated name for lr_scheduler_type; wins when set. */
  warmup_style: string | null;
  min_lr_ratio: number;
  num_cycles: number;
  /** The run's training steps (the trainer fills it in, as verl's does). */
  total_training_steps: number;
}


/** A cosine schedule's floor, as a fraction of lr; `key` names it in the error. */
export function checkMinLrRatio(ratio: number, key: string): void {
  if (!(ratio >= 0 && ratio <= 1)) throw new InputError(`key '${key}' must be in [0, 1]; got ${ratio}`);
}

/** The schedule verl's FSDP workers build from these keys; `section` names them in errors. */
export function verlLrSchedule(optim: VerlOptimSchedule, section: string): LrSchedule {
  const type = optim.warmup_style ?? optim.lr_scheduler_type;
  const key = optim.warmup_style !== null ? 'warmup_style' : 'lr_scheduler_type';
  if (!(LR_SCHEDULER_TYPES as readonly string[]).includes(type)) throw new InputError(`key '${section}.${key}' is '${type}'; allowed: ${LR_SCHEDULER_TYPES.join(', ')}`);
  checkMinLrRatio(optim.min_lr_ratio, `${section}.min_lr_ratio`);
  if (!(optim.lr_warmup_steps_ratio >= 0 && optim.lr_warmup_steps_ratio <= 1)) throw new InputError(`key '${section}.lr_warmup_steps_ratio' must be in [0, 1]; got ${optim.lr_warmup_steps_ratio}`);
  const total = Math.max(0, optim.total_training_steps);
  const warmupSteps = optim.lr_warmup_steps >= 0 ? Math.floor(optim.lr_warmup_steps) : Math.floor(optim.lr_warmup_steps_ratio * total);
  return { lr: optim.lr, warmupSteps, totalSteps: type === 'cosine' ? total : undefined, minLrRatio: optim.min_lr_ratio, numCycles: optim.num_cycles };
}

/**
 * A role's learning-rate scheduler as verl steps it: once per training step, after the role's
 * update, so every optimizer step of a training step shares one lr. Its step count is saved with
 * the optimizer state.
 */
export class LrScheduler {
  steps = 0;

  constructor(readonly schedule: LrSchedule) {}

  get lr(): number {
    return scheduledLr(this.schedule, this.steps);
  }

  step(): void {
    this.steps += 1;
  }
}

/**
 * One optimizer step as every trainer here takes it: clip the global gradient norm to maxNorm (0:
 * no clipping), then apply at `lr` unless the norm is not finite (a skipped step; the caller counts
 * it). Returns the norm before clipping. The caller disposes the gradients.
 */
export async function clippedStep(optimizer: AdamW, params: Map<string, tf.Variable>, grads: Map<string, tf.Tensor>, maxNorm: number, lr: number): Promise<{ norm: number; applied: boolean }> {
  // Nothing to learn from (no tokens reached a parameter): a skipped step, not an error.
  if (grads.size === 0) return { norm: 0, applied: false };
  const norm = maxNorm > 0 ? await clipGradNorm(grads, maxNorm) : await globalNorm([...grads.values()]);
  if (!Number.isFinite(norm)) return { norm, applied: false };
  optimizer.lr = lr;
  optimizer.apply(params, grads);
  return { norm, applied: true };
}

/**
 * The loss and its gradients with respect to named parameters (keyed by the map's names).
 * Parameters the loss does not touch get no entry.
 */
export function lossAndGradients(loss: () => tf.Scalar, params: Map<string, tf.Variable>): { loss: tf.Scalar; grads: Map<string, tf.Tensor> } {
  const byVariable = new Map([...params].map(([name, v]) => [v.name, name]));
  const { value, grads } = tf.variableGrads(loss, [...params.values()]);
  const named = new Map<string, tf.Tensor>();
  for (const [variableName, g] of Object.entries(grads)) named.set(byVariable.get(variableName)!, g);
  return { loss: value, grads: named };
}

/** The global L2 norm of a set of gradients. */
export async function globalNorm(grads: tf.Tensor[]): Promise<number> {
  const total = tf.tidy(() => tf.sqrt(tf.addN(grads.map((g) => tf.sum(tf.mul(g, g))))));
  try {
    return await readScalar(total, 'the gradient norm');
  } finally {
    total.dispose();
  }
}

/**
 * Scales gradients so their global norm is at most maxNorm (PyTorch's clip_grad_norm_, with its
 * 1e-6), replacing the map's tensors in place and disposing the originals. Returns the norm
 * before clipping; a non-finite norm leaves the gradients alone for the caller to skip the update.
 */
export async function clipGradNorm(grads: Map<string, tf.Tensor>, maxNorm: number): Promise<number> {
  const norm = await globalNorm([...grads.values()]);
  if (!Number.isFinite(norm) || !(maxNorm > 0)) return norm;
  const coef = maxNorm / (norm + 1e-6);
  if (coef >= 1) return norm;
  for (const [name, g] of grads) {
    grads.set(name, tf.mul(g, coef));
    g.dispose();
  }
  return norm;
}
