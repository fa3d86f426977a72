// Elementwise ops whose value or gradient differs between torch and tfjs, written to torch's
// behaviour so that ports of verl's losses have its gradients. tfjs cannot differentiate through a
// comparison that lies on the path from an input to the loss, so comparisons here run either on
// constants or inside a custom gradient.
import * as tf from '@tensorflow/tfjs-core';

const asFloat = (t: tf.Tensor) => tf.cast(t, 'float32');

/** torch.sign of a tensor that takes no gradient: exact, where tfjs's wasm Sign gives 0 for |x| near 1e-8. */
export function signOf(x: tf.Tensor): tf.Tensor {
  return tf.sub(asFloat(tf.greater(x, 0)), asFloat(tf.less(x, 0)));
}

/** torch.abs: gradient sign(x), 0 at x = 0 (tfjs's abs has -1 there). */
export const torchAbs: (x: tf.Tensor) => tf.Tensor = tf.customGrad(((x: tf.Tensor, save: tf.GradSaveFunc) => {
  save([x]);
  return { value: tf.abs(x), gradFunc: (dy: tf.Tensor, [sx]: tf.Tensor[]) => tf.mul(dy, signOf(sx)) };
}) as unknown as Parameters<typeof tf.customGrad>[0]) as (x: tf.Tensor) => tf.Tensor;

/**
 * torch.maximum / torch.minimum of two tensors of one shape: on a tie each input gets half the
 * gradient (tfjs gives all of it to one), which matters where a clip's bound equals the value
 * exactly (a dual-clip tie). The comparisons run in the backward pass only.
 */
function tieSplit(pick: (a: tf.Tensor, b: tf.Tensor) => tf.Tensor, wins: (a: tf.Tensor, b: tf.Tensor) => tf.Tensor): (a: tf.Tensor, b: tf.Tensor) => tf.Tensor {
  const op = tf.customGrad(((a: tf.Tensor, b: tf.Tensor, save: tf.GradSaveFunc) => {
    save([a, b]);
    return {
      value: pick(a, b),
      gradFunc: (dy: tf.Tensor, [sa, sb]: tf.Tensor[]) => {
        const share = tf.add(asFloat(wins(sa, sb)), tf.mul(asFloat(tf.equal(sa, sb)), 0.5));
        return [tf.mul(dy, share), tf.mul(dy, tf.sub(1, share))];
      },
    };
  }) as unknown as Parameters<typeof tf.customGrad>[0]);
  return (a, b) => op(a, b);
}

export const torchMaximum = tieSplit(tf.maximum, tf.greater);
export const torchMinimum = tieSplit(tf.minimum, tf.less);

