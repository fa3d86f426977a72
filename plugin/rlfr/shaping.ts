// RLFR's turning of per-token velocity deviations into per-token rewards (README "RLFR flow rewards": rewards):
// per-sequence min-max normalisation over the valid response tokens, a threshold, a per-sequence
// top-k, then reward = -coef * score. Bilateral mode maps scores to [-1, 1] first, so tokens that
// follow the flow well get positive rewards and the filters keep both tails.
// Host-side arrays: [batch, length] row-major, mask 1 on valid response tokens.

export type FlowNorm = 'minmax' | 'minmax-bil';

export interface FlowShapingOptions {
  norm: FlowNorm;
  /** Keep scores above this (|score| when bilateral); <= 0 disables. */
  threshold: number;
  /** Keep this many per sequence (k/2 from each tail when bilateral); <= 0 disables. */
  topk: number;
  /** Reward per unit of score (the reward is -coef * score). */
  coef: number;
}

/**
 * Min-max per sequence over its valid tokens: [0, 1] (minmax) or [-1, 1] (minmax-bil). Padding
 * and sequences whose valid scores are all equal get 0. (The reference takes the row minimum as
 * the second-smallest distinct value to skip padding zeros; the true minimum over valid tokens is
 * what that intends.)
 */
export function normalizeFlowScores(scores: ArrayLike<number>, mask: ArrayLike<number>, batch: number, length: number, norm: FlowNorm): Float32Array {
  const out = new Float32Array(batch * length);
  for (let b = 0; b < batch; b++) {
    let min = Infinity;
    let max = -Infinity;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      if (!mask[i]) continue;
      min = Math.min(min, scores[i]);
      max = Math.max(max, scores[i]);
    }
    if (!(max > min)) continue;
    for (let t = 0; t < length; t++) {
      const i = b * length + t;
      if (!mask[i]) continue;
      const unit = (scores[i] - min) / (max - min);
      out[i] = norm === 'minmax-bil' ? 2 * (unit - 0.5) : unit;
    }
  }
  return out;
}

/** Threshold, then top-k per sequence (only rows with at least k survivors are cut), on normalised scores. */
export function filterFlowScores(normalized: ArrayLike<number>, batch: number, length: number, options: Pick<FlowShapingOptions, 'norm' | 'threshold' | 'topk'>): Float32Array {
  const bilateral = options.norm === 'minmax-bil';
  const out = Float32Array.from(normalized);
  if (options.threshold > 0) {
    for (let i = 0; i < out.length; i++) if (!((bilateral ? Math.abs(out[i]) : out[i]) > options.threshold)) out[i] = 0;
  }
  if (options.topk > 0) {
    for (let b = 0; b < batch; b++) {
      const row = Array.from({ length }, (_, t) => b * length + t).filter((i) => out[i] !== 0);
      if (row.length < options.topk) continue;
      const keep = new Set<number>();
      if (bilateral) {
        const half = Math.floor(options.topk / 2);
        const positive = row.filter((i) => out[i] > 0).sort((x, y) => out[y] - out[x] || x - y);
        const negative = row.filter((i) => out[i] < 0).sort((x, y) => out[x] - out[y] || x - y);
        positive.slice(0, half).forEach((i) => keep.add(i));
        negative.slice(0, half).forEach((i) => keep.add(i));
      } else {
        row.sort((x, y) => out[y] - out[x] || x - y).slice(0, options.topk).forEach((i) => keep.add(i));
      }
      for (const i of row) if (!keep.has(i)) out[i] = 0;
    }
  }
  return out;
}

/** Per-token flow rewards from raw deviations: -coef * filtered normalised score (0 on padding). */
export function flowTokenRewards(deviations: ArrayLike<number>, mask: ArrayLike<number>, batch: number, length: number, options: FlowShapingOptions): Float32Array {
  const filtered = filterFlowScores(normalizeFlowScores(deviations, mask, batch, length, options.norm), batch, length, options);
  return filtered.map((s) => (s === 0 ? 0 : -options.coef * s));
}
