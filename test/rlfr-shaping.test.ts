import { filterFlowScores, flowTokenRewards, normalizeFlowScores } from '../plugin/rlfr/shaping.js';
import { expectClose } from './helpers.js';

// Two rows of length 5; row 1 has two padding positions whose raw values must not matter.
const scores = [2, 4, 6, 10, 3, /* row 1 */ 1, 5, 3, 99, -7];
const mask = [1, 1, 1, 1, 1, /* row 1 */ 1, 1, 1, 0, 0];

describe('RLFR reward shaping (hand-computed cases)', () => {
  it('min-max normalises each sequence over its valid tokens; padding and flat rows give 0', () => {
    // row 0: (x - 2) / 8; row 1: (x - 1) / 4 on its 3 valid tokens.
    expectClose(normalizeFlowScores(scores, mask, 2, 5, 'minmax'), [0, 0.25, 0.5, 1, 0.125, 0, 1, 0.5, 0, 0], 1e-7);
    expectClose(normalizeFlowScores([3, 3, 3], [1, 1, 1], 1, 3, 'minmax'), [0, 0, 0], 0);
    expectClose(normalizeFlowScores([5, 9, 1], [0, 0, 0], 1, 3, 'minmax'), [0, 0, 0], 0);
  });

  it('bilateral maps to [-1, 1]', () => {
    expectClose(normalizeFlowScores(scores, mask, 2, 5, 'minmax-bil'), [-1, -0.5, 0, 1, -0.75, -1, 1, 0, 0, 0], 1e-7);
  });

  it('threshold keeps scores above it; bilateral keeps both tails', () => {
    const normalized = normalizeFlowScores(scores, mask, 2, 5, 'minmax');
    expectClose(filterFlowScores(normalized, 2, 5, { norm: 'minmax', threshold: 0.4, topk: 0 }), [0, 0, 0.5, 1, 0, 0, 1, 0.5, 0, 0], 1e-7);
    const bil = normalizeFlowScores(scores, mask, 2, 5, 'minmax-bil');
    expectClose(filterFlowScores(bil, 2, 5, { norm: 'minmax-bil', threshold: 0.6, topk: 0 }), [-1, 0, 0, 1, -0.75, -1, 1, 0, 0, 0], 1e-7);
  });

  it('top-k keeps the k largest per sequence, only in rows with at least k survivors', () => {
    const normalized = normalizeFlowScores(scores, mask, 2, 5, 'minmax');
    // row 0 has 4 non-zero scores (0.25, 0.5, 1, 0.125): top-3 drops 0.125; row 1 has 2 (< k): untouched.
    expectClose(filterFlowScores(normalized, 2, 5, { norm: 'minmax', threshold: 0, topk: 3 }), [0, 0.25, 0.5, 1, 0, 0, 1, 0.5, 0, 0], 1e-7);
    expectClose(filterFlowScores(normalized, 2, 5, { norm: 'minmax', threshold: 0, topk: 2 }), [0, 0, 0.5, 1, 0, 0, 1, 0.5, 0, 0], 1e-7);
    // Bilateral top-2: one from each tail.
    const bil = normalizeFlowScores(scores, mask, 2, 5, 'minmax-bil');
    expectClose(filterFlowScores(bil, 2, 5, { norm: 'minmax-bil', threshold: 0, topk: 2 }), [-1, 0, 0, 1, 0, -1, 1, 0, 0, 0], 1e-7);
  });

  it('rewards are -coef times the kept scores: a penalty, positive only for low deviation when bilateral', () => {
    const options = { norm: 'minmax' as const, threshold: 0.6, topk: 15, coef: 0.01 };
    expectClose(flowTokenRewards(scores, mask, 2, 5, options), [0, 0, 0, -0.01, 0, 0, -0.01, 0, 0, 0], 1e-9);
    const bilateral = flowTokenRewards(scores, mask, 2, 5, { ...options, norm: 'minmax-bil' });
    expectClose(bilateral, [0.01, 0, 0, -0.01, 0.0075, 0.01, -0.01, 0, 0, 0], 1e-9);
  });
});
