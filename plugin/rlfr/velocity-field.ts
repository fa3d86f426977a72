// RLFR's velocity field v(x_t, t, context, layer): a per-token MLP with adaLN conditioning (the
// SimpleMLPAdaLN head of the RLFR repository). Tokens are independent rows of [N, d].
//   h = W_in x;  y = emb_layer(l) + W_c c + emb_time(t)
//   per block: (shift, scale, gate) = adaLN(SiLU(y));  h += gate * MLP(RMSNorm(h) * (1 + scale) + shift)
//   v = W_out(RMSNorm(h) * (1 + scale_f) + shift_f)
// Weights are xavier-uniform with zero biases; every adaLN output and W_out start at zero, so
// v = 0 everywhere at initialisation.
import * as tf from '@tensorflow/tfjs-core';
import { linear, Rng, rmsNorm, silu, uniqueVariableName, type ParameterHead } from '../../core-adapters/index.js';

export interface VelocityFieldOptions {
  /** Latent size d (the policy's hidden size). */
  latentSize: number;
  /** Width W of the MLP (default: d). */
  width?: number;
  /** Residual blocks. */
  depth: number;
  /** RMSNorm epsilon (the policy's rms_norm_eps). */
  eps: number;
  seed: number;
}

/** Sinusoidal features of a scalar per row: [cos(s f_i), sin(s f_i)], f_i = 10000^(-i/128), 256 wide. */
export const EMBED_FREQUENCIES = 128;

export function sinusoidalFeatures(values: ArrayLike<number>): tf.Tensor2D {
  const out = new Float32Array(values.length * 2 * EMBED_FREQUENCIES);
  for (let n = 0; n < values.length; n++) {
    for (let i = 0; i < EMBED_FREQUENCIES; i++) {
      const angle = values[n] * Math.exp((-Math.log(10000) * i) / EMBED_FREQUENCIES);
      out[n * 2 * EMBED_FREQUENCIES + i] = Math.cos(angle);
      out[n * 2 * EMBED_FREQUENCIES + EMBED_FREQUENCIES + i] = Math.sin(angle);
    }
  }
  return tf.tensor2d(out, [values.length, 2 * EMBED_FREQUENCIES]);
}

export interface VelocityInputs {
  /** Noisy latents x_t [N, d]. */
  x: tf.Tensor2D;
  /** Flow time per row, in [0, 1]. */
  t: ArrayLike<number>;
  /** Context latents [N, d]. */
  context: tf.Tensor2D;
  /** Layer id per row as a depth fraction (e.g. 0.25). */
  layer: ArrayLike<number>;
}

export class VelocityField implements ParameterHead {
  readonly params = new Map<string, tf.Variable>();
  readonly width: number;

  constructor(readonly options: VelocityFieldOptions) {
    const d = options.latentSize;
    const W = (this.width = options.width ?? d);
    const rng = new Rng(options.seed);
    const add = (name: string, shape: number[], init: 'xavier' | 'zeros' | 'ones') => {
      const size = shape.reduce((a, b) => a * b, 1);
      const data = new Float32Array(size);
      if (init === 'ones') data.fill(1);
      if (init === 'xavier') {
        const bound = Math.sqrt(6 / (shape[0] + shape[1]));
        for (let i = 0; i < size; i++) data[i] = (2 * rng.next() - 1) * bound;
      }
      this.params.set(name, tf.tidy(() => tf.variable(tf.tensor(data, shape), true, uniqueVariableName(`flow.${name}`))));
    };
    const dense = (name: string, fanIn: number, fanOut: number, init: 'xavier' | 'zeros' = 'xavier') => {
      add(`${name}.weight`, [fanIn, fanOut], init);
      add(`${name}.bias`, [fanOut], 'zeros');
    };
    dense('input_proj', d, W);
    dense('cond_embed', d, W);
    for (const embedder of ['time_embed', 'layer_embed']) {
      dense(`${embedder}.0`, 2 * EMBED_FREQUENCIES, W);
      dense(`${embedder}.2`, W, W);
    }
    for (let b = 0; b < options.depth; b++) {
      add(`blocks.${b}.norm.weight`, [W], 'ones');
      for (const part of ['shift', 'scale', 'gate']) dense(`blocks.${b}.ada_${part}`, W, W, 'zeros');
      dense(`blocks.${b}.mlp.0`, W, W);
      dense(`blocks.${b}.mlp.2`, W, W);
    }
    add('final.norm.weight', [W], 'ones');
    dense('final.ada_shift', W, W, 'zeros');
    dense('final.ada_scale', W, W, 'zeros');
    dense('final.out', W, d, 'zeros');
  }

  private dense(name: string, x: tf.Tensor2D): tf.Tensor2D {
    return linear(x, this.params.get(`${name}.weight`) as tf.Variable<tf.Rank.R2>, this.params.get(`${name}.bias`) as tf.Variable<tf.Rank.R1>);
  }

  private embed(name: string, values: ArrayLike<number>): tf.Tensor2D {
    return this.dense(`${name}.2`, silu(this.dense(`${name}.0`, sinusoidalFeatures(values))) as tf.Tensor2D);
  }

  /** RMSNorm(h) * (1 + scale) + shift. */
  private modulate(h: tf.Tensor2D, normName: string, shift: tf.Tensor2D, scale: tf.Tensor2D): tf.Tensor2D {
    const normed = rmsNorm(h, this.params.get(normName) as tf.Variable<tf.Rank.R1>, this.options.eps);
    return tf.add(tf.mul(normed, tf.add(scale, 1)), shift) as tf.Tensor2D;
  }

  /** Predicted velocity [N, d]. */
  forward(inputs: VelocityInputs): tf.Tensor2D {
    let h = this.dense('input_proj', inputs.x);
    const y = tf.add(tf.add(this.embed('layer_embed', inputs.layer), this.dense('cond_embed', inputs.context)), this.embed('time_embed', inputs.t)) as tf.Tensor2D;
    const conditioning = silu(y) as tf.Tensor2D;
    for (let b = 0; b < this.options.depth; b++) {
      const p = `blocks.${b}`;
      const z = this.modulate(h, `${p}.norm.weight`, this.dense(`${p}.ada_shift`, conditioning), this.dense(`${p}.ada_scale`, conditioning));
      const mlp = this.dense(`${p}.mlp.2`, silu(this.dense(`${p}.mlp.0`, z)) as tf.Tensor2D);
      h = tf.add(h, tf.mul(this.dense(`${p}.ada_gate`, conditioning), mlp)) as tf.Tensor2D;
    }
    const final = this.modulate(h, 'final.norm.weight', this.dense('final.ada_shift', conditioning), this.dense('final.ada_scale', conditioning));
    return this.dense('final.out', final);
  }

  dispose(): void {
    tf.dispose([...this.params.values()]);
    this.params.clear();
  }
}

/** t ~ sigmoid(N(0, 1)) per row (the logit-normal schedule of the pre-training). */
export function sampleFlowTimes(rows: number, rng: Rng): Float32Array {
  return Float32Array.from({ length: rows }, () => 1 / (1 + Math.exp(-rng.normal())));
}

/**
 * Rectified flow on target latents x1 [N, d] (rows weighted by `rowMask`, 1 = a response token):
 * x_t = t x1 + (1 - t) eps, target u = x1 - eps, loss = sum over rows of weight * mean_d (v - u)^2,
 * divided by `denominator` (default: the weights' sum, a masked mean). Noise and times come from
 * `rng` unless given.
 */
export function flowMatchingLoss(
  field: VelocityField,
  x1: tf.Tensor2D,
  context: tf.Tensor2D,
  layer: ArrayLike<number>,
  rowMask: ArrayLike<number>,
  rng: Rng,
  times?: ArrayLike<number>,
  denominator?: number,
): tf.Scalar {
  const [N, d] = x1.shape;
  const t = times ?? sampleFlowTimes(N, rng);
  const noise = tf.tensor2d(Float32Array.from({ length: N * d }, () => rng.normal()), [N, d]);
  const tColumn = tf.tensor2d(Float32Array.from(t), [N, 1]);
  const xt = tf.add(tf.mul(tColumn, x1), tf.mul(tf.sub(1, tColumn), noise)) as tf.Tensor2D;
  const target = tf.sub(x1, noise);
  const perRow = tf.mean(tf.square(tf.sub(field.forward({ x: xt, t, context, layer }), target)), 1);
  const mask = tf.tensor1d(Float32Array.from(rowMask));
  return tf.div(tf.sum(tf.mul(perRow, mask)), denominator ?? tf.maximum(tf.sum(mask), 1)) as tf.Scalar;
}
