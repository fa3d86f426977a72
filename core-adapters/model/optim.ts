// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW) and global-norm gradient clipping
// (torch.nn.utils.clip_grad_norm_); tfjs ships neither.
import * as tf from '@tensorflow/tfjs';

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

export class AdamW {
  lr: number;
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
  readonly weightDecay: number;
  private stepCount = 0;
  private readonly m = new Map<string, tf.Variable>();
  private readonly v = new Map<string, tf.Variable>();

  constructor(options: AdamWOptions) {
    this.lr = options.lr;
    [this.beta1, this.beta2] = options.betas ?? [0.9, 0.999];
    this.eps = options.eps ?? 1e-8;
    this.weightDecay = options.weightDecay ?? 0.01;
  }

  get step(): number {
    return this.stepCount;
  }

  private slot(slots: Map<string, tf.Variable>, variable: tf.Variable): tf.Variable {
    let s = slots.get(variable.name);
    if (!s) {
      s = tf.variable(tf.zerosLike(variable), false);
      slots.set(variable.name, s);
    }
    return s;
  }

  /** One update of every variable that has a gradient; gradients are not disposed. */
  apply(variables: tf.Variable[], grads: Map<string, tf.Tensor> | tf.NamedTensorMap): void {
    const lookup = (name: string) => (grads instanceof Map ? grads.get(name) : grads[name]);
    this.stepCount += 1;
    const t = this.stepCount;
    const stepSize = this.lr / (1 - this.beta1 ** t);
    const bc2Sqrt = Math.sqrt(1 - this.beta2 ** t);
    for (const variable of variables) {
      const g = lookup(variable.name);
      if (!g) continue;
      const m = this.slot(this.m, variable);
      const v = this.slot(this.v, variable);
      tf.tidy(() => {
        const decayed = tf.mul(variable, 1 - this.lr * this.weightDecay);
        const mNext = tf.add(tf.mul(m, this.beta1), tf.mul(g, 1 - this.beta1));
        const vNext = tf.add(tf.mul(v, this.beta2), tf.mul(tf.mul(g, g), 1 - this.beta2));
        const denom = tf.add(tf.div(tf.sqrt(vNext), bc2Sqrt), this.eps);
        m.assign(mNext);
        v.assign(vNext);
        variable.assign(tf.sub(decayed, tf.mul(tf.div(mNext, denom), stepSize)));
      });
    }
  }

  getState(): AdamWState {
    const moments = new Map<string, { m: Float32Array; v: Float32Array; shape: number[] }>();
    for (const [name, m] of this.m) {
      moments.set(name, { m: Float32Array.from(m.dataSync()), v: Float32Array.from(this.v.get(name)!.dataSync()), shape: [...m.shape] });
    }
    return { step: this.stepCount, moments };
  }

  /** Restores moments for the given variables (matched by name). */
  setState(state: AdamWState, variables: tf.Variable[]): void {
    this.stepCount = state.step;
    for (const variable of variables) {
      const saved = state.moments.get(variable.name);
      if (!saved) continue;
      const m = this.slot(this.m, variable);
      const v = this.slot(this.v, variable);
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

/** The global L2 norm of a set of gradients. */
export function globalNorm(grads: tf.Tensor[]): number {
  const total = tf.tidy(() => tf.sqrt(tf.addN(grads.map((g) => tf.sum(tf.mul(g, g))))));
  const value = total.dataSync()[0];
  total.dispose();
  return value;
}

/**
 * Scales gradients so their global norm is at most maxNorm (PyTorch's clip_grad_norm_, with its
 * 1e-6), replacing the map's tensors in place and disposing the originals. Returns the norm
 * before clipping; a non-finite norm leaves the gradients alone for the caller to skip the update.
 */
export function clipGradNorm(grads: Map<string, tf.Tensor>, maxNorm: number): number {
  const norm = globalNorm([...grads.values()]);
  if (!Number.isFinite(norm) || !(maxNorm > 0)) return norm;
  const coef = maxNorm / (norm + 1e-6);
  if (coef >= 1) return norm;
  for (const [name, g] of grads) {
    grads.set(name, tf.mul(g, coef));
    g.dispose();
  }
  return norm;
}
