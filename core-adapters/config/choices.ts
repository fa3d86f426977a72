// The fixed choice lists of config keys, at the bottom of the layers with the rest of config/:
// validation reads them here, and the modules that act on each choice (engine, model, algorithms)
// import them from here, so reading a config never loads tfjs.

/** engine.backend: auto, tensorflow, webgpu, wasm or cpu. */
export const BACKEND_CHOICES = ['auto', 'tensorflow', 'webgpu', 'wasm', 'cpu'] as const;
/** engine.backend: auto, tensorflow, webgpu, wasm or cpu. */
export type BackendChoice = (typeof BACKEND_CHOICES)[number];

/**
 * engine.native, the engine path on wasm: auto uses the native addon with an optimised BLAS when
 * one is found; loop uses the addon's compiled loop even where a BLAS is installed; off keeps the
 * stock wasm kernels (plus the TypeScript overrides).
 */
export const NATIVE_CHOICES = ['auto', 'loop', 'off'] as const;
/** engine.native: the engine path on wasm (auto, loop or off). */
export type NativeChoice = (typeof NATIVE_CHOICES)[number];

/** Storage of a frozen matrix: float32, or bfloat16 (the upper half of each float32). */
export const FROZEN_DTYPES = ['float32', 'bfloat16'] as const;
/** One of FROZEN_DTYPES. */
export type FrozenDtype = (typeof FROZEN_DTYPES)[number];

/** Learning-rate schedules (verl's lr_scheduler_type): constant after warm-up, or cosine. */
export const LR_SCHEDULER_TYPES = ['constant', 'cosine'] as const;

/** verl's KL estimators of sampled-token log-probs (kl = k1, abs, mse = k2, low_var_kl = k3). */
export type KlEstimator = 'kl' | 'k1' | 'abs' | 'mse' | 'k2' | 'low_var_kl' | 'k3';
/**
 * verl v0.9.0's kl_penalty names: an estimator, the same with a trailing '+' (its value, k2's
 * gradient: the straight-through variant), or 'full' (whole-vocabulary KL, which verl leaves
 * unimplemented; validation accepts the name and the host refuses it, naming the key).
 */
export type KlPenaltyType = KlEstimator | `${KlEstimator}+` | 'full' | 'full+';
/** The estimators without a suffix. */
export const KL_ESTIMATORS: readonly KlEstimator[] = ['kl', 'k1', 'abs', 'mse', 'k2', 'low_var_kl', 'k3'];
/** Every KlPenaltyType. */
export const KL_PENALTY_TYPES: readonly KlPenaltyType[] = [...KL_ESTIMATORS, ...KL_ESTIMATORS.map((e) => `${e}+` as const), 'full', 'full+'];

/** distillation.distillation_loss.loss_mode (verl's): a KL estimator at the sampled token, or the forward KL over the teacher's top-k. */
export const DISTILLATION_LOSS_MODES = [...KL_ESTIMATORS, 'forward_kl_topk'] as const;
/** distillation.teacher_models.<name>.inference.name: a server in vLLM's or SGLang's dialect (flowrl serve speaks both), or the teacher loaded in this process. */
export const TEACHER_ENGINES = ['vllm', 'sglang', 'local'] as const;

/** algorithm.kl_ctrl.type: a fixed coefficient or Ziegler et al.'s adaptive one. */
export const KL_CONTROLLER_TYPES = ['fixed', 'adaptive'] as const;

/** verl v0.9.0's loss_agg_mode: how token losses become one number. */
export type LossAggMode = 'token-mean' | 'token-sum' | 'seq-mean-token-mean' | 'seq-mean-token-sum' | 'seq-mean-token-sum-norm';
/** Every LossAggMode. */
export const LOSS_AGG_MODES: readonly LossAggMode[] = ['token-mean', 'token-sum', 'seq-mean-token-mean', 'seq-mean-token-sum', 'seq-mean-token-sum-norm'];

/** verl's bypass_mode loss types (policy_loss.rollout_correction.loss_type). */
export const BYPASS_LOSS_TYPES = ['ppo_clip', 'reinforce'] as const;
/** verl's rollout_is levels: per-token or per-sequence importance weights (null: none). */
export const ROLLOUT_IS_LEVELS = ['token', 'sequence'] as const;
