// Validation's numbers from its samples alone: no model, no tensors, so they can be checked by hand.
import type { Metrics } from '../metrics.js';
import { passAtK, reportedKs } from './pass-at-k.js';
import { countsEntropy } from './val-prompts.js';

/** k samples per prompt, prompt-major: whether each is correct, its response ids and its score. */
export interface ValidationSamples {
  k: number;
  correct: boolean[];
  responses: number[][];
  scores: number[];
}

/** One prompt's share of the numbers. */
export interface PromptValidation {
  /** Correct samples of the k. */
  correct: number;
  /** Distinct correct responses. */
  distinct: number;
  /** Entropy (nats) of the empirical distribution over the distinct correct responses (0 with none or one). */
  entropy: number;
  /** The distinct correct responses, in the order first sampled. */
  correctResponses: number[][];
}

const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0);

/**
 * val/accuracy (mean correctness over all samples: Avg@k), val/pass@k (a prompt counts when any
 * sample is correct), the unbiased val/pass@j for j = 1, 2, 4, ..., k (Chen et al. 2021),
 * val/distinct_correct (per prompt), val/correct_entropy (averaged over prompts with a correct
 * sample), val/score/mean and val/response_length/mean; and each prompt's own numbers.
 */
export function validationMetrics(samples: ValidationSamples): { metrics: Metrics; prompts: PromptValidation[] } {
  const { k, correct, responses, scores } = samples;
  const count = correct.length / k;
  const ks = reportedKs(k);
  const passAt = new Array<number>(ks.length).fill(0);
  const prompts: PromptValidation[] = [];
  for (let p = 0; p < count; p++) {
    const counts = new Map<string, { ids: number[]; n: number }>();
    let right = 0;
    for (let s = 0; s < k; s++) {
      const row = p * k + s;
      if (!correct[row]) continue;
      right += 1;
      const key = responses[row].join(',');
      const seen = counts.get(key);
      if (seen) seen.n += 1;
      else counts.set(key, { ids: responses[row], n: 1 });
    }
    ks.forEach((j, i) => (passAt[i] += passAtK(k, right, j)));
    prompts.push({ correct: right, distinct: counts.size, entropy: countsEntropy([...counts.values()].map((c) => c.n)), correctResponses: [...counts.values()].map((c) => c.ids) });
  }
  const solved = prompts.filter((p) => p.distinct > 0);
  return {
    metrics: {
      'val/accuracy': mean(correct.map(Number)),
      'val/pass@k': solved.length / count,
      'val/k': k,
      ...Object.fromEntries(ks.map((j, i) => [`val/pass@${j}`, passAt[i] / count])),
      'val/distinct_correct': prompts.reduce((n, p) => n + p.distinct, 0) / count,
      'val/correct_entropy': solved.length ? solved.reduce((n, p) => n + p.entropy, 0) / solved.length : 0,
      'val/score/mean': mean(scores),
      'val/response_length/mean': mean(responses.map((r) => r.length)),
    },
    prompts,
  };
}
