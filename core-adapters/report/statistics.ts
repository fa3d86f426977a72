// Statistics for comparing runs: means, Student-t intervals over seeds, and a seeded bootstrap over
// a crossed (seed × prompt) design. Pure functions; no I/O.
import { Rng } from '../random.js';

export function mean(values: ArrayLike<number>): number {
  let total = 0;
  for (let i = 0; i < values.length; i++) total += values[i];
  return total / values.length;
}

/** Sample standard deviation (n − 1); 0 for a single value. */
export function sampleStd(values: number[]): number {
  if (values.length < 2) return 0;
  const m = mean(values);
  return Math.sqrt(values.reduce((s, v) => s + (v - m) ** 2, 0) / (values.length - 1));
}

/** ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9: about 15 significant digits). */
function logGamma(x: number): number {
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059, 12.507343278686905,
    -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  const z = x - 1;
  let sum = c[0];
  for (let i = 1; i < 9; i++) sum += c[i] / (z + i);
  const t = z + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(sum);
}

/** The continued fraction of the incomplete beta function (modified Lentz). */
function betaContinuedFraction(x: number, a: number, b: number): number {
  const tiny = 1e-300;
  let c = 1;
  let d = 1 - ((a + b) * x) / (a + 1);
  if (Math.abs(d) < tiny) d = tiny;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= 10_000; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((a + m2 - 1) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (a + b + m) * x) / ((a + m2) * (a + m2 + 1));
    d = 1 + aa * d;
    if (Math.abs(d) < tiny) d = tiny;
    c = 1 + aa / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const step = d * c;
    h *= step;
    if (Math.abs(step - 1) < 1e-15) break;
  }
  return h;
}

/** The regularized incomplete beta function I_x(a, b). */
function incompleteBeta(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  // The continued fraction converges fast only below (a + 1) / (a + b + 2); above, by symmetry.
  return x < (a + 1) / (a + b + 2) ? (front * betaContinuedFraction(x, a, b)) / a : 1 - (front * betaContinuedFraction(1 - x, b, a)) / b;
}

/** P(T ≤ t) for Student's t with `df` degrees of freedom. */
export function tCdf(t: number, df: number): number {
  const tail = 0.5 * incompleteBeta(df / (df + t * t), df / 2, 0.5);
  return t >= 0 ? 1 - tail : tail;
}

/** The p-quantile of Student's t with `df` (> 0) degrees of freedom, by bisection on tCdf. */
export function tQuantile(p: number, df: number): number {
  if (!(p > 0 && p < 1) || !(df > 0)) throw new Error(`tQuantile: needs 0 < p < 1 and df > 0; got p ${p}, df ${df}`);
  if (p === 0.5) return 0;
  if (p < 0.5) return -tQuantile(1 - p, df);
  let lo = 0;
  let hi = 1;
  while (tCdf(hi, df) < p) [lo, hi] = [hi, hi * 2];
  for (let i = 0; i < 200 && hi - lo > 1e-13 * hi; i++) {
    const mid = (lo + hi) / 2;
    if (tCdf(mid, df) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** A mean with its confidence interval over n values. */
export interface Interval {
  mean: number;
  /** null when the interval cannot be computed (a single value). */
  low: number | null;
  high: number | null;
  n: number;
}

/** mean ± t_{(1+level)/2, n−1} · s/√n over independent values (seeds); low/high null for n = 1. */
export function tInterval(values: number[], level = 0.95): Interval {
  const n = values.length;
  const m = mean(values);
  if (n < 2) return { mean: m, low: null, high: null, n };
  const half = (tQuantile((1 + level) / 2, n - 1) * sampleStd(values)) / Math.sqrt(n);
  return { mean: m, low: m - half, high: m + half, n };
}

/** The q-quantile of sorted values, interpolating linearly between order statistics (R's type 7). */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const h = (sorted.length - 1) * q;
  const i = Math.floor(h);
  return i + 1 < sorted.length ? sorted[i] + (h - i) * (sorted[i + 1] - sorted[i]) : sorted[i];
}

/** The percentile interval of bootstrap replicates: their (1−level)/2 and (1+level)/2 quantiles. */
export function percentileInterval(replicates: number[], level = 0.95): { low: number; high: number } {
  const sorted = Float64Array.from(replicates).sort();
  return { low: quantileSorted(sorted, (1 - level) / 2), high: quantileSorted(sorted, (1 + level) / 2) };
}

/**
 * One resample of a crossed rows × columns design (Owen's pigeonhole bootstrap): rows (seeds) with
 * replacement, and, independently, columns (prompts) with replacement, shared by every row since
 * every seed saw the same prompts. Columns come back as multiplicities.
 */
function crossedResample(rng: Rng, rows: number, columns: number): { rows: number[]; columnWeights: Float64Array } {
  const picked = Array.from({ length: rows }, () => rng.int(rows));
  const columnWeights = new Float64Array(columns);
  for (let j = 0; j < columns; j++) columnWeights[rng.int(columns)] += 1;
  return { rows: picked, columnWeights };
}

/**
 * `resamples` replicates of statistics over a crossed design, from a seeded stream (the same seed
 * gives the same replicates). `statistic` gets one resample and returns one number per statistic;
 * the result holds, per statistic, its replicates.
 */
export function crossedBootstrap(
  rows: number,
  columns: number,
  statistic: (rows: number[], columnWeights: Float64Array) => number[],
  options: { resamples?: number; seed?: number } = {},
): number[][] {
  const rng = new Rng(options.seed ?? 0);
  const out: number[][] = [];
  for (let b = 0; b < (options.resamples ?? 2000); b++) {
    const { rows: picked, columnWeights } = crossedResample(rng, rows, columns);
    statistic(picked, columnWeights).forEach((v, i) => (out[i] ??= []).push(v));
  }
  return out;
}
