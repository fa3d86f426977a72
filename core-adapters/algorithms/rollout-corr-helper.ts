// What verl v0.9.0's bypass_mode policy loss computes before its loss (verl/trainer/ppo/
// rollout_corr_helper.py: compute_rollout_correction_and_rejection_mask and the functions it calls):
// importance weights pi / pi_rollout (token or sequence level, truncated or IcePop), a rejection mask
// from divergence estimators, and the mismatch metrics. None of it is differentiated (verl runs it
// under no_grad), so it works on host arrays in float64, [B, R] flattened row by row.
import { InputError } from '../errors.js';
import { ROLLOUT_IS_LEVELS } from '../config/choices.js';

/** policy_loss.rollout_correction's settings (verl's RolloutCorrectionConfig fields that bypass_mode reads). */
export interface RolloutCorrectionSettings {
  /** ppo_clip (vanilla on pi / pi_rollout, no weights) or reinforce (-w A log pi). */
  lossType: 'ppo_clip' | 'reinforce';
  /** token | sequence importance weights, or null for none (metrics only). */
  rolloutIs: 'token' | 'sequence' | null;
  /** Upper bound (a number or "2.0"): weights truncated there; "lower_upper": IcePop, weights outside zeroed; null: no weights. */
  rolloutIsThreshold: number | string | null;
  /** Scale the weights to mean 1 over the micro-batch. */
  rolloutIsBatchNormalize: boolean;
  /** Comma-separated rejection criteria (token_k1, seq_sum_k3, ...), or null. */
  rolloutRs: string | null;
  /** One threshold per criterion or one for all ("lower_upper" for *k1), required with rolloutRs. */
  rolloutRsThreshold: number | string | null;
}

/**
 * verl's RolloutCorrectionConfig dataclass defaults, what actor.policy_loss.rollout_correction holds
 * unless verl's trainer copies algorithm.rollout_correction there (whose YAML has rollout_is null).
 */
export const DEFAULT_ROLLOUT_CORRECTION: RolloutCorrectionSettings = {
  lossType: 'ppo_clip',
  rolloutIs: 'sequence',
  rolloutIsThreshold: 2.0,
  rolloutIsBatchNormalize: false,
  rolloutRs: null,
  rolloutRsThreshold: null,
};

/** verl's SUPPORTED_ROLLOUT_RS_OPTIONS. */
export const ROLLOUT_RS_OPTIONS = ['token_k1', 'token_k2', 'token_k3', 'seq_sum_k1', 'seq_sum_k2', 'seq_sum_k3', 'seq_mean_k1', 'seq_mean_k2', 'seq_mean_k3', 'seq_max_k2', 'seq_max_k3'] as const;

/** verl caps log-ratios at +-20 before exponentiating (SAFETY_BOUND). */
const SAFETY_BOUND = 20;

/** Python's float() of a threshold text, or NaN: only plain decimal and exponent forms, no hex or words. */
function parseFloatStrict(text: string): number {
  const t = text.trim();
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t) && !/^[+-]?(inf|infinity)$/i.test(t)) return NaN;
  return /inf/i.test(t) ? (t.startsWith('-') ? -Infinity : Infinity) : Number(t);
}

/** _parse_rollout_is_threshold: the upper bound and, for "lower_upper", the lower one. */
export function parseIsThreshold(spec: number | string, key: string): { upper: number; lower: number | null } {
  let upper: number;
  let lower: number | null = null;
  if (typeof spec === 'number') upper = spec;
  else {
    const s = spec.trim();
    if (!s) throw new InputError(`${key}: must not be an empty string`);
    if (s.includes('_')) {
      const at = s.indexOf('_');
      lower = parseFloatStrict(s.slice(0, at));
      upper = parseFloatStrict(s.slice(at + 1));
      if (Number.isNaN(lower) || Number.isNaN(upper)) throw new InputError(`${key}: '${spec}' is not a number or 'lower_upper'`);
    } else {
      upper = parseFloatStrict(s);
      if (Number.isNaN(upper)) throw new InputError(`${key}: '${spec}' is not a number or 'lower_upper'`);
    }
  }
  if (!(upper > 0)) throw new InputError(`${key}: the upper bound must be positive, got ${upper}`);
  if (lower !== null) {
    if (!(lower > 0)) throw new InputError(`${key}: the lower bound must be positive, got ${lower}`);
    if (lower > upper) throw new InputError(`${key}: the lower bound must be <= the upper bound, got '${spec}'`);
  }
  return { upper, lower };
}

type RsOption = (typeof ROLLOUT_RS_OPTIONS)[number];

/** The rejection criteria of rollout_rs (duplicates dropped, order kept) with their thresholds (_parse_rollout_rs_thresholds). */
export function parseRsOptions(rs: string, spec: number | string | null, key: string, thresholdKey: string): { option: RsOption; lower: number | null; upper: number }[] {
  const names = rs.split(',').map((o) => o.trim()).filter(Boolean);
  if (!names.length) throw new InputError(`${key}: must name at least one criterion (${ROLLOUT_RS_OPTIONS.join(', ')})`);
  const options: RsOption[] = [];
  for (const name of names) {
    if (!(ROLLOUT_RS_OPTIONS as readonly string[]).includes(name)) throw new InputError(`${key}: unknown criterion '${name}'; available: ${ROLLOUT_RS_OPTIONS.join(', ')}`);
    if (!options.includes(name as RsOption)) options.push(name as RsOption);
  }
  if (spec === null) throw new InputError(`${thresholdKey}: must be set when ${key} is set`);
  let parts = typeof spec === 'number' ? [String(spec)] : spec.split(',').map((p) => p.trim()).filter(Boolean);
  if (!parts.length) throw new InputError(`${thresholdKey}: must hold at least one threshold`);
  if (parts.length !== 1 && parts.length !== options.length) throw new InputError(`${thresholdKey}: give one threshold for all criteria or exactly ${options.length} (one per criterion of ${key})`);
  if (parts.length === 1) parts = options.map(() => parts[0]);
  return options.map((option, i) => {
    const text = parts[i];
    if (option.endsWith('k1')) {
      // A single ratio bound u means [1/u, u].
      const at = text.indexOf('_');
      const upper = parseFloatStrict(at >= 0 ? text.slice(at + 1) : text);
      const lower = at >= 0 ? parseFloatStrict(text.slice(0, at)) : 1 / upper;
      if (Number.isNaN(lower) || Number.isNaN(upper)) throw new InputError(`${thresholdKey}: '${text}' is not a number for ${option}`);
      if (!(lower > 0 && upper > 0)) throw new InputError(`${thresholdKey}: the bounds for ${option} must be positive, got '${text}'`);
      if (lower > upper) throw new InputError(`${thresholdKey}: the bounds for ${option} must have lower <= upper, got '${text}'`);
      return { option, lower, upper };
    }
    if (text.includes('_')) throw new InputError(`${thresholdKey}: ${option} takes one upper bound without '_', got '${text}'`);
    const upper = parseFloatStrict(text);
    if (Number.isNaN(upper)) throw new InputError(`${thresholdKey}: '${text}' is not a number for ${option}`);
    if (!(upper > 0)) throw new InputError(`${thresholdKey}: the bound for ${option} must be positive, got '${text}'`);
    return { option, lower: null, upper };
  });
}

/** Refuses settings bypass_mode cannot run with, naming the key under `prefix` (…policy_loss.rollout_correction). */
export function checkRolloutCorrection(s: RolloutCorrectionSettings, prefix: string): void {
  if (s.lossType !== 'ppo_clip' && s.lossType !== 'reinforce') throw new InputError(`${prefix}.loss_type: '${s.lossType as string}'; allowed: ppo_clip, reinforce`);
  if (s.rolloutIs !== null && !(ROLLOUT_IS_LEVELS as readonly string[]).includes(s.rolloutIs)) throw new InputError(`${prefix}.rollout_is: '${s.rolloutIs as string}'; allowed: ${ROLLOUT_IS_LEVELS.join(', ')} (or null)`);
  if (s.rolloutIs !== null && s.rolloutIsThreshold !== null) parseIsThreshold(s.rolloutIsThreshold, `${prefix}.rollout_is_threshold`);
  if (s.rolloutRs !== null) parseRsOptions(s.rolloutRs, s.rolloutRsThreshold, `${prefix}.rollout_rs`, `${prefix}.rollout_rs_threshold`);
}

/** Row-major views of [B, R] arrays with verl's masked reductions (masked_mean's 1e-8 included). */
class Rows {
  constructor(
    readonly mask: ArrayLike<number>,
    readonly B: number,
    readonly R: number,
  ) {}

  maskedMean(v: ArrayLike<number>): number {
    let s = 0;
    let n = 0;
    for (let i = 0; i < this.mask.length; i++) {
      if (this.mask[i] !== 0) s += v[i] * this.mask[i];
      n += this.mask[i];
    }
    return s / (n + 1e-8);
  }

  rowSum(v: ArrayLike<number>, b: number): number {
    let s = 0;
    for (let t = b * this.R; t < (b + 1) * this.R; t++) if (this.mask[t] !== 0) s += v[t] * this.mask[t];
    return s;
  }

  rowTokens(b: number): number {
    let n = 0;
    for (let t = b * this.R; t < (b + 1) * this.R; t++) n += this.mask[t];
    return n;
  }

  rowMean(v: ArrayLike<number>, b: number): number {
    return this.rowSum(v, b) / (this.rowTokens(b) + 1e-8);
  }

  /** Max and min over valid tokens (-inf and inf when there are none, as masked_fill then max gives). */
  extremes(v: ArrayLike<number>): [number, number] {
    let hi = -Infinity;
    let lo = Infinity;
    for (let i = 0; i < this.mask.length; i++) {
      if (this.mask[i] === 0) continue;
      hi = Math.max(hi, v[i]);
      lo = Math.min(lo, v[i]);
    }
    return [hi, lo];
  }
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
/** torch's std (unbiased). */
const std = (xs: number[]) => {
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
};
const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, x));

/** compute_rollout_correction_weights: truncated (or IcePop) weights, their metrics, then the optional batch normalisation. */
function isWeights(logRatio: Float64Array, rows: Rows, level: 'token' | 'sequence', spec: number | string, normalize: boolean, key: string): { weights: Float64Array; metrics: Record<string, number> } {
  const { upper, lower } = parseIsThreshold(spec, key);
  const { mask, B, R } = rows;
  const raw = new Float64Array(B * R);
  const seqLogRatio: number[] = [];
  for (let b = 0; b < B; b++) {
    const sum = rows.rowSum(logRatio, b);
    seqLogRatio.push(sum);
    for (let t = b * R; t < (b + 1) * R; t++) {
      const lr = level === 'token' ? logRatio[t] : sum;
      raw[t] = Math.exp(clamp(lr, -SAFETY_BOUND, SAFETY_BOUND)) * mask[t];
    }
  }
  const weights = raw.map((w) => (lower === null ? Math.min(w, upper) : w >= lower && w <= upper ? w : 0));
  const metrics: Record<string, number> = {};
  const lowerBound = lower ?? 1 / upper;
  if (level === 'sequence') {
    const hi = Math.max(...seqLogRatio);
    const lo = Math.min(...seqLogRatio);
    metrics.rollout_is_max = Math.exp(Math.min(hi, SAFETY_BOUND));
    metrics.rollout_is_min = Math.exp(lo);
    metrics.rollout_is_mean = rows.maskedMean(weights);
    metrics.rollout_is_ratio_fraction_high = mean(seqLogRatio.map((x) => Number(x > Math.log(upper))));
    metrics.rollout_is_ratio_fraction_low = mean(seqLogRatio.map((x) => Number(x < Math.log(lowerBound))));
  } else {
    metrics.rollout_is_mean = rows.maskedMean(weights);
    metrics.rollout_is_ratio_fraction_high = rows.maskedMean(raw.map((w) => Number(w > upper)));
    metrics.rollout_is_ratio_fraction_low = rows.maskedMean(raw.map((w) => Number(w < lowerBound)));
    [metrics.rollout_is_max, metrics.rollout_is_min] = rows.extremes(weights);
  }
  const capped = weights.map((w) => clamp(w, 0, upper));
  let tokens = 0;
  for (let i = 0; i < mask.length; i++) tokens += mask[i];
  if (tokens > 1) {
    const m = rows.maskedMean(capped);
    metrics.rollout_is_std = Math.sqrt(Math.max(0, rows.maskedMean(capped.map((w) => w * w)) - m * m));
  } else metrics.rollout_is_std = 0;
  const m = rows.maskedMean(capped);
  metrics.rollout_is_eff_sample_size = 1 / rows.maskedMean(capped.map((w) => (w / (m + 1e-8)) ** 2));
  const seqMeans = Array.from({ length: B }, (_, b) => rows.rowMean(weights, b));
  const rawSeqMeans = Array.from({ length: B }, (_, b) => rows.rowMean(raw, b));
  metrics.rollout_is_seq_mean = mean(seqMeans);
  metrics.rollout_is_seq_std = B > 1 ? std(seqMeans) : 0;
  metrics.rollout_is_seq_max = Math.max(...seqMeans);
  metrics.rollout_is_seq_min = Math.min(...seqMeans);
  metrics.rollout_is_seq_max_deviation = Math.max(...seqMeans.map((x) => Math.abs(x - 1)));
  metrics.rollout_is_seq_fraction_high = mean(rawSeqMeans.map((x) => Number(x > upper)));
  metrics.rollout_is_seq_fraction_low = mean(rawSeqMeans.map((x) => Number(x < lowerBound)));
  if (lower !== null) metrics.rollout_is_oob_ratio = rows.maskedMean(raw.map((w) => Number(w < lower || w > upper)));
  if (normalize) {
    let factor: number;
    if (level === 'token') factor = rows.maskedMean(weights);
    else {
      let total = 0;
      let valid = 0;
      for (let b = 0; b < B; b++) {
        const v = rows.rowTokens(b) > 0 ? 1 : 0;
        total += seqMeans[b] * v;
        valid += v;
      }
      factor = total / Math.max(valid, 1e-8);
    }
    if (factor > 1e-8) {
      for (let i = 0; i < weights.length; i++) weights[i] /= factor;
      metrics.rollout_is_batch_norm_factor = factor;
    } else metrics.rollout_is_batch_norm_factor = 1;
  }
  return { weights, metrics };
}

/** compute_rollout_rejection_mask: the mask with rejected tokens (or whole sequences) zeroed, and per-criterion metrics. */
function rejectionMask(logRatio: Float64Array, rows: Rows, rs: string, spec: number | string | null, key: string, thresholdKey: string): { keep: Float64Array; metrics: Record<string, number> } {
  const { mask, B, R } = rows;
  const options = parseRsOptions(rs, spec, key, thresholdKey);
  const safe = logRatio.map((x) => clamp(x, -SAFETY_BOUND, SAFETY_BOUND));
  const stats = { k1: safe.map((x) => -x), k2: safe.map((x) => 0.5 * x * x), k3: safe.map((x) => Math.exp(x) - 1 - x) };
  const combined = new Float64Array(B * R).fill(1);
  const metrics: Record<string, number> = {};
  const validRows = Array.from({ length: B }, (_, b) => rows.rowTokens(b) > 0);
  for (const { option, lower, upper } of options) {
    const estimator = option.slice(-2) as 'k1' | 'k2' | 'k3';
    const isK1 = estimator === 'k1';
    const upperCut = isK1 ? Math.log(upper) : upper;
    const lowerCut = isK1 ? Math.log(lower!) : 0;
    const token = stats[estimator];
    const inRange = (x: number) => (isK1 ? x >= lowerCut && x <= upperCut : x <= upperCut);
    let perToken: Float64Array;
    let perSequence: number[] | null = null;
    if (option.startsWith('token_')) perToken = token;
    else {
      perSequence = Array.from({ length: B }, (_, b) => {
        if (option.startsWith('seq_sum_')) return rows.rowSum(token, b);
        if (option.startsWith('seq_mean_')) return rows.rowMean(token, b);
        let hi = -Infinity;
        for (let t = b * R; t < (b + 1) * R; t++) if (mask[t] !== 0) hi = Math.max(hi, token[t]);
        return hi === -Infinity ? 0 : hi;
      });
      perToken = Float64Array.from({ length: B * R }, (_, i) => perSequence![Math.floor(i / R)]);
    }
    const keep = perToken.map((x) => Number(inRange(x)));
    for (let i = 0; i < keep.length; i++) combined[i] *= keep[i];
    // compute_rs_metrics
    const prefix = `rollout_rs_${option}`;
    const seqValues = (perSequence ?? Array.from({ length: B }, (_, b) => rows.rowMean(perToken, b))).filter((_, b) => validRows[b]);
    const sequenceLevel = perSequence !== null && seqValues.length > 0;
    metrics[`${prefix}_mean`] = rows.maskedMean(perToken);
    [metrics[`${prefix}_max`], metrics[`${prefix}_min`]] = sequenceLevel ? [Math.max(...seqValues), Math.min(...seqValues)] : rows.extremes(perToken);
    if (sequenceLevel) {
      metrics[`${prefix}_fraction_high`] = mean(seqValues.map((x) => Number(x > upperCut)));
      metrics[`${prefix}_fraction_low`] = isK1 ? mean(seqValues.map((x) => Number(x < lowerCut))) : 0;
    } else {
      metrics[`${prefix}_fraction_high`] = rows.maskedMean(perToken.map((x) => Number(x > upperCut)));
      metrics[`${prefix}_fraction_low`] = isK1 ? rows.maskedMean(perToken.map((x) => Number(x < lowerCut))) : 0;
    }
    let tokens = 0;
    for (let i = 0; i < mask.length; i++) tokens += mask[i];
    if (tokens > 1) {
      const c = perToken.map((x) => clamp(x, isK1 ? lowerCut : 0, upperCut));
      const m = rows.maskedMean(c);
      metrics[`${prefix}_std`] = Math.sqrt(Math.max(0, rows.maskedMean(c.map((x) => x * x)) - m * m));
    } else metrics[`${prefix}_std`] = 0;
    if (seqValues.length) {
      metrics[`${prefix}_seq_mean`] = mean(seqValues);
      metrics[`${prefix}_seq_std`] = seqValues.length > 1 ? std(seqValues) : 0;
      metrics[`${prefix}_seq_max`] = Math.max(...seqValues);
      metrics[`${prefix}_seq_min`] = Math.min(...seqValues);
      metrics[`${prefix}_seq_max_deviation`] = Math.max(...seqValues.map(Math.abs));
      metrics[`${prefix}_seq_fraction_high`] = mean(seqValues.map((x) => Number(x > upperCut)));
      if (isK1) metrics[`${prefix}_seq_fraction_low`] = mean(seqValues.map((x) => Number(x < lowerCut)));
    } else {
      for (const s of ['seq_mean', 'seq_std', 'seq_max', 'seq_min', 'seq_max_deviation', 'seq_fraction_high', 'seq_fraction_low']) metrics[`${prefix}_${s}`] = 0;
    }
    metrics[`${prefix}_masked_fraction`] = rows.maskedMean(keep.map((k) => 1 - k));
    let dropped = 0;
    let valid = 0;
    for (let b = 0; b < B; b++) {
      if (!validRows[b]) continue;
      valid += 1;
      let kept = true;
      for (let t = b * R; t < (b + 1) * R; t++) if (mask[t] !== 0 && !keep[t]) kept = false;
      if (!kept) dropped += 1;
    }
    metrics[`${prefix}_seq_masked_fraction`] = valid > 0 ? dropped / valid : 0;
  }
  metrics.rollout_rs_masked_fraction = rows.maskedMean(combined.map((k) => 1 - k));
  let rowsHit = 0;
  for (let b = 0; b < B; b++) {
    let hit = false;
    for (let t = b * R; t < (b + 1) * R; t++) if (mask[t] !== 0 && !(combined[t] > 0.5)) hit = true;
    if (hit) rowsHit += 1;
  }
  metrics.rollout_rs_seq_masked_fraction = B ? rowsHit / B : 0;
  return { keep: combined, metrics };
}

/** compute_offpolicy_metrics: perplexities, KL estimates and chi-squared of the current policy against the rollout's. */
function offPolicyMetrics(current: ArrayLike<number>, rollout: ArrayLike<number>, logRatio: Float64Array, rows: Rows): Record<string, number> {
  const { B } = rows;
  const training = Array.from({ length: B }, (_, b) => rows.rowMean(current, b));
  const sampled = Array.from({ length: B }, (_, b) => rows.rowMean(rollout, b));
  const diff = sampled.map((s, b) => s - training[b]);
  const seqChi = Array.from({ length: B }, (_, b) => Math.exp(2 * clamp(rows.rowSum(logRatio, b), -SAFETY_BOUND, SAFETY_BOUND)));
  return {
    training_ppl: mean(training.map((x) => Math.exp(-x))),
    training_log_ppl: mean(training.map((x) => -x)),
    kl: rows.maskedMean(logRatio.map((x) => -x)),
    k3_kl: rows.maskedMean(logRatio.map((x) => Math.exp(x) - x - 1)),
    rollout_ppl: mean(sampled.map((x) => Math.exp(-x))),
    rollout_log_ppl: mean(sampled.map((x) => -x)),
    log_ppl_diff: mean(diff),
    log_ppl_abs_diff: mean(diff.map(Math.abs)),
    log_ppl_diff_max: Math.max(...diff),
    log_ppl_diff_min: Math.min(...diff),
    ppl_ratio: mean(diff.map(Math.exp)),
    chi2_token: rows.maskedMean(logRatio.map((x) => Math.exp(2 * clamp(x, -SAFETY_BOUND, SAFETY_BOUND)))) - 1,
    chi2_seq: mean(seqChi) - 1,
  };
}

/**
 * compute_rollout_correction_and_rejection_mask for bypass_mode: `current` are the policy's
 * log-probs now (detached), `rollout` those the samples were drawn with (bypass_mode's old_log_prob).
 * Returns the importance weights (null unless rollout_is and its threshold are set), the response
 * mask with rejected tokens zeroed, and the metrics prefixed rollout_corr/. A micro-batch without a
 * valid token (verl raises there) gets no weights, its mask and no metrics.
 */
export function rolloutCorrectionAndRejection(
  current: ArrayLike<number>,
  rollout: ArrayLike<number>,
  mask: ArrayLike<number>,
  B: number,
  R: number,
  s: RolloutCorrectionSettings,
  prefix = 'actor_rollout_ref.actor.policy_loss.rollout_correction',
): { weights: Float32Array | null; mask: Float32Array; metrics: Record<string, number> } {
  const rows = new Rows(mask, B, R);
  let any = false;
  for (let i = 0; i < mask.length; i++) any ||= mask[i] !== 0;
  if (!any) return { weights: null, mask: Float32Array.from(mask), metrics: {} };
  const logRatio = Float64Array.from({ length: B * R }, (_, i) => current[i] - rollout[i]);
  const metrics: Record<string, number> = {};
  let weights: Float32Array | null = null;
  if (s.rolloutIs !== null && s.rolloutIsThreshold !== null) {
    const is = isWeights(logRatio, rows, s.rolloutIs, s.rolloutIsThreshold, s.rolloutIsBatchNormalize, `${prefix}.rollout_is_threshold`);
    weights = Float32Array.from(is.weights);
    Object.assign(metrics, is.metrics);
  }
  let out = Float32Array.from(mask);
  if (s.rolloutRs !== null) {
    const rs = rejectionMask(logRatio, rows, s.rolloutRs, s.rolloutRsThreshold, `${prefix}.rollout_rs`, `${prefix}.rollout_rs_threshold`);
    out = out.map((m, i) => m * rs.keep[i]);
    Object.assign(metrics, rs.metrics);
  }
  Object.assign(metrics, offPolicyMetrics(current, rollout, logRatio, rows));
  return { weights, mask: out, metrics: Object.fromEntries(Object.entries(metrics).map(([k, v]) => [`rollout_corr/${k}`, v])) };
}
