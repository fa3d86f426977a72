// The hot tensor ops of the model, kept in one place so a faster backend path can replace them.
// wasm facts behind these shapes (measured; README "Engine and performance"): only 2-D untransposed matmuls reach XNNPACK,
// reductions over leading axes are slow, and gather has no gradient kernel.
import * as tf from '@tensorflow/tfjs-core';
import { FrozenMatrix } from './frozen.js';
import { FUSED_RMS_NORM, fusedForward, runFused } from './fused.js';
import { webgpuFused } from './webgpu-kernels.js';
import { runSwiGlu, runTokenLogProbs, swiGluKernelsAvailable, tokenLogProbKernelsAvailable } from './kernels.js';

type Backward = (dy: tf.Tensor, saved: tf.Tensor[]) => tf.Tensor[];

/** tf.customGrad with plain typing: `forward` gets the inputs and a save function. */
function withGradient(
  inputs: tf.Tensor[],
  forward: (inputs: tf.Tensor[], save: tf.GradSaveFunc) => { value: tf.Tensor; gradFunc: Backward },
): tf.Tensor {
  // Outside a gradient scope (sampling, old/ref log-probs) the wrapper is pure overhead.
  if (!tf.engine().isTapeOn()) return forward(inputs, () => undefined).value;
  const op = tf.customGrad(((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const save = args.pop() as tf.GradSaveFunc;
    return forward(args as tf.Tensor[], save);
  }) as Parameters<typeof tf.customGrad>[0]);
  return op(...inputs);
}

/** x[M,K] @ c[K,N] for a constant c, given cT = transpose(c): only x gets a gradient. */
export function matmulConstant(x: tf.Tensor2D, c: tf.Tensor2D, cT: tf.Tensor2D): tf.Tensor2D {
  return withGradient([x], ([xi]) => ({
    value: tf.matMul(xi as tf.Tensor2D, c),
    gradFunc: (dy) => [tf.matMul(dy as tf.Tensor2D, cT)],
  })) as tf.Tensor2D;
}

/** x in the forward pass, a constant in the backward pass (torch's detach; tfjs has none). */
export function stopGradient<T extends tf.Tensor>(x: T): T {
  return withGradient([x], ([xi]) => ({
    value: tf.clone(xi),
    gradFunc: (dy) => [tf.zerosLike(dy)],
  })) as T;
}

/**
 * f(inputs) as a constant: its ops (comparisons too, which tfjs cannot differentiate through) stay
 * off the gradient tape, and no gradient reaches the inputs through it.
 */
export function constantFrom<T extends tf.Tensor>(inputs: tf.Tensor[], f: (inputs: tf.Tensor[]) => T): T {
  return withGradient(inputs, (xs) => ({ value: f(xs), gradFunc: () => xs.map((x) => tf.zerosLike(x)) })) as T;
}

/** Column sums of x[N,H] as a [H] vector, computed as ones[1,N] @ x (a reduction over the leading axis). */
export function sumRows(x: tf.Tensor2D): tf.Tensor1D {
  return tf.matMul(tf.ones([1, x.shape[0]]), x).reshape([x.shape[1]]);
}

/** x[N,H] * w[H] broadcast over rows; w's gradient reduces over rows with a matmul. */
export function scaleColumns(x: tf.Tensor2D, w: tf.Tensor1D): tf.Tensor2D {
  return withGradient([x, w], ([xi, wi], save) => {
    save([xi, wi]);
    return {
      value: tf.mul(xi, wi),
      gradFunc: (dy, [sx, sw]) => [tf.mul(dy, sw), sumRows(tf.mul(dy, sx) as tf.Tensor2D)],
    };
  }) as tf.Tensor2D;
}

/** x[N,H] + b[H] broadcast over rows; b's gradient reduces over rows with a matmul. */
export function addColumns(x: tf.Tensor2D, b: tf.Tensor1D): tf.Tensor2D {
  return withGradient([x, b], ([xi, bi]) => ({
    value: tf.add(xi, bi),
    gradFunc: (dy) => [dy, sumRows(dy as tf.Tensor2D)],
  })) as tf.Tensor2D;
}

/**
 * x[N,in] @ w[in,out] (+ bias[out]). Weights are kept as [in, out] so the forward is untransposed;
 * the gradients are transposed products, which engine/kernels.ts routes to fast paths on wasm.
 */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D, bias?: tf.Tensor1D): tf.Tensor2D {
  // On webgpu the bias is added in the product's program (one GPU program instead of two).
  if (bias && webgpuFused() && !tf.engine().isTapeOn()) return tf.fused.matMul({ a: x, b: w, bias }) as tf.Tensor2D;
  const y = tf.matMul(x, w) as tf.Tensor2D;
  return bias ? addColumns(y, bias) : y;
}

/** RMSNorm over the last axis of x[N,H], in float32 as Hugging Face computes it. */
export function rmsNorm(x: tf.Tensor2D, weight: tf.Tensor1D, eps: number): tf.Tensor2D {
  if (fusedForward(x, weight)) return runFused(FUSED_RMS_NORM, { x, weight }, { eps });
  const meanSquare = tf.mean(tf.mul(x, x), -1, true);
  return scaleColumns(tf.mul(x, tf.rsqrt(tf.add(meanSquare, eps))) as tf.Tensor2D, weight);
}

/** x * sigmoid(x), with its gradient. */
export function silu(x: tf.Tensor): tf.Tensor {
  return tf.mul(x, tf.sigmoid(x));
}

/**
 * silu(gate) * up, the SwiGLU product. Its gradient keeps only gate and up (tfjs's ops would keep
 * sigmoid(gate) and silu(gate) as well): d gate = dy up s (1 + gate (1 - s)), d up = dy gate s.
 */
export function siluMul(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D {
  // One pass each way on the addon's kernel (native/layer-passes.c) instead of three ops and eight.
  if (swiGluKernelsAvailable() && gate.dtype === 'float32' && up.dtype === 'float32' && tf.util.arraysEqual(gate.shape, up.shape)) {
    return withGradient([gate, up], ([g, u], save) => {
      save([g, u]);
      return { value: runSwiGlu(g as tf.Tensor2D, u as tf.Tensor2D), gradFunc: (dy, [sg, su]) => runSwiGlu(sg as tf.Tensor2D, su as tf.Tensor2D, dy as tf.Tensor2D) };
    }) as tf.Tensor2D;
  }
  return withGradient([gate, up], ([g, u], save) => {
    save([g, u]);
    return {
      value: tf.mul(silu(g), u),
      gradFunc: (dy, [sg, su]) => {
        const s = tf.sigmoid(sg);
        const dyS = tf.mul(dy, s);
        return [tf.mul(tf.mul(dyS, su), tf.add(1, tf.mul(sg, tf.sub(1, s)))), tf.mul(dyS, sg)];
      },
    };
  }) as tf.Tensor2D;
}

/** a + b of one shape. tfjs's add keeps both inputs for its gradient (to undo broadcasting); this keeps none. */
export function addSameShape<T extends tf.Tensor>(a: T, b: T): T {
  return withGradient([a, b], ([x, y]) => ({ value: tf.add(x, y), gradFunc: (dy) => [dy, dy] })) as T;
}

/** x + c for a constant c (broadcast into x's shape, no gradient of its own), keeping nothing. */
export function addConstant<T extends tf.Tensor>(x: T, c: tf.Tensor): T {
  return withGradient([x], ([xi]) => ({ value: tf.add(xi, c), gradFunc: (dy) => [dy] })) as T;
}

/**
 * Attention-score floats ([B, kv heads, rows, keys]) one attention of several query rows computes at
 * once (64 MB). More go query rows at a time: a 2,048-token sequence of Qwen2.5-0.5B's shape has
 * 59M scores a layer, whose softmax, its saved copy and their gradients overran the wasm heap.
 */
export const ATTENTION_SCORE_FLOATS = 2 ** 24;

/**
 * Query rows per chunk of a grouped-query attention over `keys` keys (one group's rows a chunk, at
 * most all T of them), or undefined when every group's scores fit ATTENTION_SCORE_FLOATS at once
 * (then the mask bias holds every group's rows, [B, 1, groups*T, S]; chunked, one group's, [B, 1, T, S]).
 */
export function attentionChunkRows(batch: number, kvHeads: number, groups: number, length: number, keys: number, budget = ATTENTION_SCORE_FLOATS): number | undefined {
  if (batch * kvHeads * groups * length * keys <= budget) return undefined;
  return Math.max(1, Math.min(length, Math.floor(budget / (batch * kvHeads * keys))));
}

/**
 * softmax(q k^T + bias) v for q [B, KV, groups*T, d] (the query heads sharing a kv head stacked along
 * the rows, group by group) against k, v [B, KV, S, d], `rows` query rows of one group at a time:
 * each chunk's scores are made, used and dropped, and the backward pass makes them again from q, k,
 * v (flash attention's trade: one more q k^T product for memory linear in the sequence). `bias` is
 * [B, 1, T, S], the same for every group.
 */
export function chunkedAttention(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, bias: tf.Tensor4D, groups: number, rows: number): tf.Tensor4D {
  const [B, KV, R, d] = q.shape;
  const T = R / groups;
  const chunks: { from: number; t: number; n: number }[] = [];
  for (let g = 0; g < groups; g++) for (let t = 0; t < T; t += rows) chunks.push({ from: g * T + t, t, n: Math.min(rows, T - t) });
  // A chunk's rows of the mask, cut once and shared by the groups (a slice copies them).
  const biasRows = (b: tf.Tensor4D) => new Map(chunks.filter(({ from }) => from < T).map(({ t, n }) => [t, tf.slice(b, [0, 0, t, 0], [B, 1, n, -1])]));
  const probabilities = (qc: tf.Tensor4D, kk: tf.Tensor4D, b: tf.Tensor) => tf.softmax(tf.add(tf.matMul(qc, kk, false, true), b)) as tf.Tensor4D;
  return withGradient([q, k, v], ([qi, ki, vi], save) => {
    save([qi, ki, vi, bias]);
    const masks = biasRows(bias);
    const parts = chunks.map(({ from, t, n }) => tf.tidy(() => tf.matMul(probabilities(tf.slice(qi, [0, 0, from, 0], [B, KV, n, d]) as tf.Tensor4D, ki as tf.Tensor4D, masks.get(t)!), vi)));
    tf.dispose([...masks.values()]);
    const value = parts.length === 1 ? parts[0] : tf.concat(parts, 2);
    if (parts.length > 1) tf.dispose(parts);
    return {
      value,
      gradFunc: (dy, [sq, sk, sv, sb]) => {
        let dk = tf.zerosLike(sk);
        let dv = tf.zerosLike(sv);
        const dq: tf.Tensor[] = [];
        const masks = biasRows(sb as tf.Tensor4D);
        for (const { from, t, n } of chunks) {
          const [dqc, nextDk, nextDv] = tf.tidy(() => {
            const qc = tf.slice(sq, [0, 0, from, 0], [B, KV, n, d]) as tf.Tensor4D;
            const p = probabilities(qc, sk as tf.Tensor4D, masks.get(t)!);
            const dOut = tf.slice(dy, [0, 0, from, 0], [B, KV, n, d]);
            // softmax's backward: dS = p (dP - sum(dP p)) with dP = dOut v^T.
            const dP = tf.matMul(dOut, sv, false, true);
            const dS = tf.mul(p, tf.sub(dP, tf.sum(tf.mul(dP, p), -1, true)));
            return [tf.matMul(dS, sk), tf.add(dk, tf.matMul(dS, qc, true, false)), tf.add(dv, tf.matMul(p, dOut, true, false))];
          });
          tf.dispose([dk, dv]);
          [dk, dv] = [nextDk, nextDv];
          dq.push(dqc);
        }
        tf.dispose([...masks.values()]);
        const dQuery = dq.length === 1 ? dq[0] : tf.concat(dq, 2);
        if (dq.length > 1) tf.dispose(dq);
        return [dQuery, dk, dv];
      },
    };
  }) as tf.Tensor4D;
}

function hasKernel(name: string): boolean {
  return tf.getKernel(name, tf.getBackend()) !== undefined;
}

/**
 * Rows of table[V,H] picked by ids. Forward is a gather; the gradient is a scatter-add, through
 * UnsortedSegmentSum where the backend has it and in JS where it does not (wasm).
 */
export function embed(table: tf.Tensor2D, ids: Int32Array): tf.Tensor2D {
  const [vocab, width] = table.shape;
  // wasm's gather is slow for a handful of rows; a one-hot matmul is cheaper while the vocabulary is small.
  // (tfjs-wasm 4.22 returns zeros from oneHot with dtype float32, hence the int32 one-hot and a cast.)
  if (vocab <= 4096) {
    const oneHot = tf.cast(tf.oneHot(tf.tensor1d(ids, 'int32'), vocab), 'float32') as tf.Tensor2D;
    return withGradient([table], ([t], save) => {
      save([oneHot]);
      return { value: tf.matMul(oneHot, t as tf.Tensor2D), gradFunc: (dy, [saved]) => [tf.matMul(saved as tf.Tensor2D, dy as tf.Tensor2D, true, false)] };
    }) as tf.Tensor2D;
  }
  return withGradient([table], ([t]) => ({
    value: tf.gather(t, tf.tensor1d(ids, 'int32')),
    gradFunc: (dy) => {
      const g = dy as tf.Tensor2D;
      if (hasKernel('UnsortedSegmentSum')) return [tf.unsortedSegmentSum(g, tf.tensor1d(ids, 'int32'), vocab)];
      const rows = g.dataSync();
      const out = new Float32Array(vocab * width);
      for (let i = 0; i < ids.length; i++) {
        const src = i * width;
        const dst = ids[i] * width;
        for (let j = 0; j < width; j++) out[dst + j] += rows[src + j];
      }
      return [tf.tensor2d(out, [vocab, width])];
    },
  })) as tf.Tensor2D;
}

export interface TokenLogProbs {
  /** log p(target) per row, [N]. */
  logProbs: tf.Tensor1D;
  /** Entropy of each row's distribution, [N], when asked for. */
  entropy?: tf.Tensor1D;
  /** sum_v pi_v^2 of each row's distribution, [N], when asked for (no gradient). */
  sumPiSquared?: tf.Tensor1D;
}

/**
 * Embedding rows of `ids` from a table held as row blocks [V_k, H] (a GPU's binding limit split
 * it): each block gathers its own ids, and one gather puts the rows back in order.
 */
export function embedFromBlocks(blocks: readonly tf.Tensor2D[], ids: Int32Array): tf.Tensor2D {
  if (blocks.length === 1) return embed(blocks[0], ids);
  const order: number[] = [];
  const parts: tf.Tensor2D[] = [];
  let from = 0;
  for (const block of blocks) {
    const rows = block.shape[0];
    const local: number[] = [];
    ids.forEach((id, i) => {
      if (id >= from && id < from + rows) {
        local.push(id - from);
        order.push(i);
      }
    });
    if (local.length) parts.push(embed(block, Int32Array.from(local)));
    from += rows;
  }
  if (order.length !== ids.length) throw new Error(`embedding: a token id is outside the vocabulary of ${from}`);
  // order[j] is the position of stacked row j; gathering by its inverse restores the input order,
  // and the gradient is the gather by order (a permutation: no segment sum).
  const inverse = new Int32Array(ids.length);
  order.forEach((position, j) => (inverse[position] = j));
  const stacked = parts.length === 1 ? parts[0] : tf.concat(parts);
  return withGradient([stacked], ([rows]) => ({
    value: tf.gather(rows, tf.tensor1d(inverse, 'int32')),
    gradFunc: (dy) => [tf.gather(dy, tf.tensor1d(order, 'int32'))],
  })) as tf.Tensor2D;
}

/** Each row's sum of squared probabilities of the tempered logits, as a [1, N] row: exp(lse(2z) - 2 lse(z)) (verl's calculate_sum_pi_squared_from_logits). */
function sumPiSquaredRow(logits: tf.Tensor2D, invT: number): tf.Tensor2D {
  const z = tf.mul(logits, invT);
  return tf.exp(tf.sub(tf.logSumExp(tf.mul(z, 2), 1), tf.mul(tf.logSumExp(z, 1), 2))).expandDims(0) as tf.Tensor2D;
}

/** At most this many logits (512 MB) are kept from the forward pass for the backward pass. */
const KEEP_LOGITS_FLOATS = 1 << 27;

/** Rows per chunk so that one chunk's logits stay near `floats` values, whatever the vocabulary. */
function chunkRows(rows: number, vocab: number, floats: number): number {
  return Math.max(1, Math.min(rows, Math.floor(floats / vocab)));
}

/**
 * The language-model head fused with log-softmax and target selection: logits = hidden @ head / T,
 * computed a chunk of rows at a time and recomputed in the backward pass, so a 150k vocabulary
 * never holds [N, V] logits for the whole batch. The head is [H, V] on the heap (or its column
 * blocks [H, V_k] side by side, as a GPU holds a large vocabulary), or a frozen [V, H] matrix
 * outside it (then only hidden gets a gradient). With the native addon the log-softmax, the pick
 * and the entropy run as one kernel per chunk (engine/kernels.ts).
 */
export function headLogProbs(
  hidden: tf.Tensor2D,
  head: tf.Tensor2D | readonly tf.Tensor2D[] | FrozenMatrix,
  targets: Int32Array,
  temperature = 1,
  withEntropy = false,
  withSumPiSquared = false,
): TokenLogProbs {
  const [rows] = hidden.shape;
  // A third output row with no backward pass: only old-log-prob passes (no tape) ask for it.
  if (withSumPiSquared && tf.engine().isTapeOn()) throw new Error('headLogProbs: sum pi^2 is computed only without gradients');
  const frozen = head instanceof FrozenMatrix ? head : undefined;
  const blocks = frozen ? [] : head instanceof tf.Tensor ? [head] : [...(head as readonly tf.Tensor2D[])];
  const widths = blocks.map((w) => w.shape[1]);
  const vocab = frozen ? frozen.rows : widths.reduce((a, b) => a + b, 0);
  if (targets.length !== rows) throw new Error(`headLogProbs: ${targets.length} targets for ${rows} rows`);
  const fused = tokenLogProbKernelsAvailable();
  // The fused kernel makes no [N, V] temporaries besides the logits, so its chunks can be larger
  // (fewer, fuller products).
  const step = chunkRows(rows, vocab, fused ? 1 << 24 : 1 << 22);
  const invT = 1 / temperature;
  const chunks: [number, number][] = [];
  for (let start = 0; start < rows; start += step) chunks.push([start, Math.min(rows, start + step)]);

  // Raw logits (before the temperature) of rows [start, end).
  const logitsOf = (h: tf.Tensor2D, ws: tf.Tensor2D[], start: number, end: number): tf.Tensor2D => {
    const rowsOfH = h.slice([start, 0], [end - start, -1]);
    if (frozen) return frozen.product(rowsOfH);
    return ws.length === 1 ? tf.matMul(rowsOfH, ws[0]) : tf.concat(ws.map((w) => tf.matMul(rowsOfH, w)), 1);
  };
  // The tfjs-ops path: log-softmax of the tempered logits and the targets as one-hot rows.
  const softmaxOf = (logits: tf.Tensor2D, start: number, end: number) => {
    const logp = tf.logSoftmax(tf.mul(logits, invT)) as tf.Tensor2D;
    const oneHot = tf.oneHot(tf.tensor1d(targets.subarray(start, end), 'int32'), vocab) as tf.Tensor2D;
    return { logp, oneHot };
  };

  // With the fused kernel, logits small enough to keep are kept for the backward pass instead of
  // being computed again there (one head product fewer per step).
  const keepLogits = fused && tf.engine().isTapeOn() && rows * vocab <= KEEP_LOGITS_FLOATS;
  const both = withGradient([hidden, ...blocks], ([h, ...ws], save) => {
    const kept: tf.Tensor2D[] = [];
    const parts = chunks.map(([start, end]) =>
      tf.tidy(() => {
        const logits = logitsOf(h as tf.Tensor2D, ws as tf.Tensor2D[], start, end);
        if (keepLogits) kept.push(tf.keep(logits));
        let pair: tf.Tensor2D;
        if (fused) pair = runTokenLogProbs(logits, targets.subarray(start, end), invT, withEntropy);
        else {
          const { logp, oneHot } = softmaxOf(logits, start, end);
          const selected = tf.sum(tf.mul(logp, oneHot), 1);
          const entropy = withEntropy ? tf.neg(tf.sum(tf.mul(tf.exp(logp), logp), 1)) : tf.zeros([end - start]);
          pair = tf.stack([selected, entropy]) as tf.Tensor2D;
        }
        return withSumPiSquared ? tf.concat([pair, sumPiSquaredRow(logits, invT)]) : pair;
      }),
    );
    save([h, ...ws, ...kept]);
    tf.dispose(kept);
    // customGrad takes one output tensor: row 0 holds the log-probs, row 1 the entropies.
    const value = parts.length === 1 ? parts[0] : tf.concat(parts, 1);
    if (parts.length > 1) tf.dispose(parts);
    return {
      value,
      gradFunc: (dy, saved) => {
        const [sh, ...rest] = saved as tf.Tensor2D[];
        const sws = rest.slice(0, blocks.length);
        const keptLogits = rest.slice(blocks.length);
        let dWs = sws.map((w) => tf.zeros(w.shape) as tf.Tensor2D);
        const dHidden: tf.Tensor[] = [];
        chunks.forEach(([start, end], c) => {
          const [dh, ...nextDWs] = tf.tidy(() => {
            const logits = keptLogits[c] ?? logitsOf(sh, sws, start, end);
            const g = dy.slice([0, start], [2, end - start]) as tf.Tensor2D;
            let dLogits: tf.Tensor2D;
            if (fused) {
              dLogits = runTokenLogProbs(logits, targets.subarray(start, end), invT, withEntropy, g);
            } else {
              const { logp, oneHot } = softmaxOf(logits, start, end);
              const p = tf.exp(logp);
              const [gLp, gEnt] = tf.unstack(g).map((t) => t.expandDims(1));
              // d logp_target / dz = onehot - p
              let dz = tf.mul(gLp, tf.sub(oneHot, p));
              // dH/dz_j = -p_j (log p_j + H)
              if (withEntropy) dz = tf.sub(dz, tf.mul(gEnt, tf.mul(p, tf.add(logp, tf.neg(tf.sum(tf.mul(p, logp), 1, true))))));
              dLogits = tf.mul(dz, invT) as tf.Tensor2D;
            }
            if (frozen) return [frozen.productTransposed(dLogits)];
            const hChunk = sh.slice([start, 0], [end - start, -1]);
            if (sws.length === 1) return [tf.matMul(dLogits, sws[0], false, true), tf.add(dWs[0], tf.matMul(hChunk, dLogits, true, false))];
            let from = 0;
            const dLogitsOf = widths.map((width) => dLogits.slice([0, (from += width) - width], [-1, width]));
            const dh = tf.addN(dLogitsOf.map((d, k) => tf.matMul(d, sws[k], false, true)));
            return [dh, ...dLogitsOf.map((d, k) => tf.add(dWs[k], tf.matMul(hChunk, d, true, false)))];
          });
          tf.dispose(dWs);
          dWs = nextDWs as tf.Tensor2D[];
          dHidden.push(dh);
        });
        const dH = dHidden.length === 1 ? dHidden[0] : tf.concat(dHidden);
        return [dH, ...dWs];
      },
    };
  });
  // Intermediates stay alive for the gradient tape; the caller's tidy releases them.
  const [logProbs, entropy, sumPiSquared] = tf.unstack(both) as tf.Tensor1D[];
  return { logProbs, ...(withEntropy ? { entropy } : {}), ...(withSumPiSquared ? { sumPiSquared } : {}) };
}

/** Adds b into the accumulator map (a += b), disposing what it replaces and b itself. */
export function accumulateGradients(into: Map<string, tf.Tensor>, add: Map<string, tf.Tensor>): void {
  for (const [name, g] of add) {
    const previous = into.get(name);
    if (previous) {
      into.set(name, tf.add(previous, g));
      previous.dispose();
      g.dispose();
    } else {
      into.set(name, g);
    }
  }
}
