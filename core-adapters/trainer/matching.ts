// Distribution matching over a prompt's correct responses: how the policy spreads its correct mass
// compared with the reference. FlowRL's target with outcome rewards and a large beta is the
// reference restricted to the correct set S, pi_ref(y | S) = pi_ref(y) / pi_ref(S); a reward maximiser
// instead piles mass onto the answers that were already likely. Given the sequence log-probs of
// every y in S under both models, this renormalises each over S and measures the gap.

/** How one prompt's correct set is spread by the policy and by the reference. */
export interface CorrectSetMatching {
  /** Responses in the set. */
  size: number;
  /** pi(S) and pi_ref(S): each model's total probability of the set. */
  mass: number;
  refMass: number;
  /** KL(pi(.|S) || pi_ref(.|S)) in nats. */
  kl: number;
  /** Total variation between pi(.|S) and pi_ref(.|S). */
  tv: number;
  /** Entropies (nats) of pi(.|S) and pi_ref(.|S). */
  entropy: number;
  refEntropy: number;
  /** pi(y|S) and pi_ref(y|S), in the set's order. */
  shares: number[];
  refShares: number[];
}

/** log(sum(exp(x))) in float64 without overflow. */
function logSumExp(values: ArrayLike<number>): number {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) max = Math.max(max, values[i]);
  if (max === -Infinity) return -Infinity;
  let total = 0;
  for (let i = 0; i < values.length; i++) total += Math.exp(values[i] - max);
  return max + Math.log(total);
}

/** Entropy (nats) of a normalised distribution given its log-probabilities. */
function entropyOf(logShares: number[]): number {
  return -logShares.reduce((h, l) => (l === -Infinity ? h : h + Math.exp(l) * l), 0);
}

/**
 * Matching over one correct set from each response's sequence log-prob under the policy and the
 * reference (the same order; at least one response).
 */
export function correctSetMatching(policyLogProbs: ArrayLike<number>, referenceLogProbs: ArrayLike<number>): CorrectSetMatching {
  const size = policyLogProbs.length;
  if (size === 0 || referenceLogProbs.length !== size) throw new Error(`correctSetMatching: need one log-prob per response under both models (got ${size} and ${referenceLogProbs.length})`);
  const logMass = logSumExp(policyLogProbs);
  const logRefMass = logSumExp(referenceLogProbs);
  const logShares = Array.from(policyLogProbs, (l) => l - logMass);
  const logRefShares = Array.from(referenceLogProbs, (l) => l - logRefMass);
  let kl = 0;
  let tv = 0;
  for (let i = 0; i < size; i++) {
    const p = Math.exp(logShares[i]);
    if (p > 0) kl += p * (logShares[i] - logRefShares[i]);
    tv += Math.abs(p - Math.exp(logRefShares[i]));
  }
  return {
    size,
    mass: Math.exp(logMass),
    refMass: Math.exp(logRefMass),
    kl: Math.max(0, kl),
    tv: tv / 2,
    entropy: entropyOf(logShares),
    refEntropy: entropyOf(logRefShares),
    shares: logShares.map(Math.exp),
    refShares: logRefShares.map(Math.exp),
  };
}

/** The val/matching/* metrics: means over the prompts that had a set, and the share scored exactly. */
export function matchingMetrics(perPrompt: (CorrectSetMatching & { exact: boolean })[]): Record<string, number> {
  const n = perPrompt.length;
  if (n === 0) return {};
  const meanOf = (f: (m: CorrectSetMatching) => number) => perPrompt.reduce((s, m) => s + f(m), 0) / n;
  return {
    'val/matching/kl': meanOf((m) => m.kl),
    'val/matching/tv': meanOf((m) => m.tv),
    'val/matching/entropy': meanOf((m) => m.entropy),
    'val/matching/ref_entropy': meanOf((m) => m.refEntropy),
    'val/matching/mass': meanOf((m) => m.mass),
    'val/matching/ref_mass': meanOf((m) => m.refMass),
    'val/matching/size': meanOf((m) => m.size),
    'val/matching/exact': perPrompt.filter((m) => m.exact).length / n,
    'val/matching/prompts': n,
  };
}
