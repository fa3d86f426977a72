// ProjZ: the learned log-partition head log Z(x) of FlowRL. An MLP on the mean of the policy's
// final-norm hidden states over the prompt: (Linear H->H, GELU(erf), LayerNorm, Dropout) x (layers-1),
// then Linear H->1, initialised as PyTorch initialises nn.Linear and nn.LayerNorm.
// Parameter names follow the reference's nn.Sequential indices (proj_z.net.{k}.weight); Linear
// weights are held [in, out] like every weight in this project.
import * as tf from '@tensorflow/tfjs-core';
import { addColumns, linear, Rng, scaleColumns, uniqueVariableName, type ParameterHead } from '../core-adapters/index.js';

export interface ProjZOptions {
  /** proj_layer: the number of Linear layers (>= 1). */
  layers: number;
  /** Dropout probability after each hidden block (active only while training). */
  dropout: number;
  /** Seed of the initial weights. */
  seed: number;
}

const LAYER_NORM_EPS = 1e-5;
/** Modules per hidden block in the reference nn.Sequential: Linear, GELU, LayerNorm, Dropout. */
const BLOCK = 4;

function gelu(x: tf.Tensor): tf.Tensor {
  return tf.mul(tf.mul(x, 0.5), tf.add(1, tf.erf(tf.mul(x, Math.SQRT1_2))));
}

function layerNorm(x: tf.Tensor2D, weight: tf.Tensor1D, bias: tf.Tensor1D): tf.Tensor2D {
  const mean = tf.mean(x, -1, true);
  const centred = tf.sub(x, mean);
  const variance = tf.mean(tf.mul(centred, centred), -1, true);
  const normed = tf.mul(centred, tf.rsqrt(tf.add(variance, LAYER_NORM_EPS))) as tf.Tensor2D;
  return addColumns(scaleColumns(normed, weight), bias);
}

export class ProjZ implements ParameterHead {
  readonly params = new Map<string, tf.Variable>();

  constructor(
    readonly hiddenSize: number,
    readonly options: ProjZOptions,
  ) {
    if (!Number.isInteger(options.layers) || options.layers < 1) throw new Error(`ProjZ: layers must be >= 1; got ${options.layers}`);
    const rng = new Rng(options.seed);
    const uniform = (n: number, bound: number) => Float32Array.from({ length: n }, () => (2 * rng.next() - 1) * bound);
    const add = (name: string, data: Float32Array, shape: number[]) =>
      this.params.set(name, tf.tidy(() => tf.variable(tf.tensor(data, shape), true, uniqueVariableName(name))));
    const H = hiddenSize;
    for (let block = 0; block < options.layers; block++) {
      const k = block * BLOCK;
      const out = block === options.layers - 1 ? 1 : H;
      // nn.Linear: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the bias the same bound.
      const bound = 1 / Math.sqrt(H);
      add(`proj_z.net.${k}.weight`, uniform(H * out, bound), [H, out]);
      add(`proj_z.net.${k}.bias`, uniform(out, bound), [out]);
      if (out !== 1) {
        add(`proj_z.net.${k + 2}.weight`, new Float32Array(H).fill(1), [H]);
        add(`proj_z.net.${k + 2}.bias`, new Float32Array(H), [H]);
      }
    }
  }

  private p(name: string): tf.Variable {
    return this.params.get(name)!;
  }

  /** Dropout with each row's mask from that row's stream, so a resumed run draws the same masks. */
  private dropout(x: tf.Tensor2D, rowRngs: Rng[]): tf.Tensor2D {
    const p = this.options.dropout;
    if (p <= 0) return x;
    const keep = 1 - p;
    const [rows, width] = x.shape;
    if (rowRngs.length !== rows) throw new Error(`ProjZ dropout: ${rowRngs.length} row streams for ${rows} rows`);
    const mask = new Float32Array(rows * width);
    for (let b = 0; b < rows; b++) for (let j = 0; j < width; j++) mask[b * width + j] = rowRngs[b].next() < keep ? 1 / keep : 0;
    return tf.mul(x, tf.tensor2d(mask, x.shape)) as tf.Tensor2D;
  }

  /** log Z for pooled prompt states x[B, H]: a [B] vector. Dropout runs only when training (one stream per row). */
  forward(x: tf.Tensor2D, options: { training: boolean; rowRngs?: Rng[] }): tf.Tensor1D {
    let h = x;
    for (let block = 0; block < this.options.layers; block++) {
      const k = block * BLOCK;
      h = linear(h, this.p(`proj_z.net.${k}.weight`) as tf.Variable<tf.Rank.R2>, this.p(`proj_z.net.${k}.bias`) as tf.Variable<tf.Rank.R1>);
      if (block === this.options.layers - 1) break;
      h = gelu(h) as tf.Tensor2D;
      h = layerNorm(h, this.p(`proj_z.net.${k + 2}.weight`) as tf.Variable<tf.Rank.R1>, this.p(`proj_z.net.${k + 2}.bias`) as tf.Variable<tf.Rank.R1>);
      if (options.training) {
        if (!options.rowRngs) throw new Error('ProjZ.forward: training needs a random stream per row for dropout');
        h = this.dropout(h, options.rowRngs);
      }
    }
    return h.reshape([x.shape[0]]);
  }

  dispose(): void {
    tf.dispose([...this.params.values()]);
    this.params.clear();
  }
}

/**
 * ProjZ's input: the mean of the final-norm hidden states over each row's valid prompt tokens,
 * excluding the last prompt token (the reference slices [:, :-R-1]). hidden is [B*(P+R), H].
 * A row without such tokens (a one-token prompt) pools to zeros.
 */
export function poolPromptStates(hidden: tf.Tensor2D, attentionMask: Int32Array, batch: number, promptLength: number): tf.Tensor2D {
  const H = hidden.shape[1];
  const length = hidden.shape[0] / batch;
  const span = promptLength - 1;
  if (span <= 0) return tf.zeros([batch, H]);
  const weights = new Float32Array(batch * span);
  for (let b = 0; b < batch; b++) {
    let count = 0;
    for (let t = 0; t < span; t++) count += attentionMask[b * length + t];
    for (let t = 0; t < span; t++) weights[b * span + t] = attentionMask[b * length + t] / Math.max(1, count);
  }
  const states = hidden.reshape([batch, length, H]).slice([0, 0, 0], [batch, span, H]);
  // [B, 1, span] @ [B, span, H]: the weighted (masked-mean) sum over prompt positions.
  return tf.matMul(tf.tensor3d(weights, [batch, 1, span]), states).reshape([batch, H]);
}
