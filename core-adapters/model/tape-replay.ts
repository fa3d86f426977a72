// Replaying a piece of tfjs's gradient tape by hand: a decoder layer recorded on a tape of its own
// is differentiated alone inside the backward pass (see CausalLM.layerWithOwnTape). tfjs keeps its
// own replay in dist/tape.js, an extensionless ESM file Node cannot load, so it is done here on the
// engine's documented node shape.
import * as tf from '@tensorflow/tfjs-core';

/** A node of tfjs's gradient tape as the engine records it (tfjs-core's TapeNode). */
export interface TapeNode {
  id: number;
  kernelName: string;
  inputs: Record<string, tf.Tensor>;
  outputs: tf.Tensor[];
  /** Per input name, a thunk for that input's gradient; the engine fills a missing dy with zeros. */
  gradient?: (dys: (tf.Tensor | null)[]) => Record<string, () => tf.Tensor>;
  saved?: tf.Tensor[];
}

/** The nodes on a path from one of `xs` to `y`, each keeping only the inputs that depend on `xs`. */
function nodesFromXsToY(tape: TapeNode[], xs: tf.Tensor[], y: tf.Tensor): TapeNode[] {
  const fromXs = new Set(xs.map((x) => x.id));
  const reachedFromXs = new Set<number>();
  for (const node of tape) {
    if (Object.values(node.inputs).some((t) => fromXs.has(t.id))) {
      reachedFromXs.add(node.id);
      for (const out of node.outputs) fromXs.add(out.id);
    }
  }
  const toY = new Set([y.id]);
  const leadsToY = new Set<number>();
  for (let i = tape.length - 1; i >= 0; i--) {
    const node = tape[i];
    if (node.outputs.some((out) => toY.has(out.id))) {
      leadsToY.add(node.id);
      for (const input of Object.values(node.inputs)) toY.add(input.id);
    }
  }
  return tape
    .filter((node) => reachedFromXs.has(node.id) && leadsToY.has(node.id))
    .map((node) => ({ ...node, inputs: Object.fromEntries(Object.entries(node.inputs).filter(([, t]) => fromXs.has(t.id))) }));
}

/**
 * Gradients of `y` (with upstream gradient `dy`) for each of `xs`, by running the tape's recorded
 * gradient functions backwards; an x that `y` does not depend on gets zeros. Call inside tf.tidy:
 * intermediate gradients are released as soon as they are summed.
 */
export function replayTape(tape: TapeNode[], xs: tf.Tensor[], y: tf.Tensor, dy: tf.Tensor): tf.Tensor[] {
  const grads = new Map<number, tf.Tensor>([[y.id, dy]]);
  const nodes = nodesFromXsToY(tape, xs, y);
  for (let i = nodes.length - 1; i >= 0; i--) {
    const node = nodes[i];
    if (!node.gradient) throw new Error(`cannot differentiate the replayed tape: kernel ${node.kernelName} has no gradient`);
    const inputGrads = node.gradient(node.outputs.map((out) => grads.get(out.id) ?? null));
    for (const [name, input] of Object.entries(node.inputs)) {
      const thunk = inputGrads[name];
      if (!thunk) throw new Error(`cannot differentiate the replayed tape: kernel ${node.kernelName} gives no gradient for input '${name}'`);
      const dx = tf.tidy(thunk);
      const sum = grads.get(input.id);
      if (!sum) {
        grads.set(input.id, dx);
        continue;
      }
      grads.set(input.id, tf.add(sum, dx));
      if (sum !== dy) sum.dispose();
      dx.dispose();
    }
  }
  return xs.map((x) => grads.get(x.id) ?? tf.zerosLike(x));
}
