// The fixed choice lists of config keys, at the bottom of the layers with the rest of config/:
// validation reads them here, and the modules that act on each choice (engine, model, algorithms)
// import them from here, so reading a config never loads tfjs.

/** engine.backend: auto, tensorflow, wasm or cpu. */
export const BACKEND_CHOICES = ['auto', 'tensorflow', 'wasm', 'cpu'] as const;
/** engine.backend: auto, tensorflow, wasm or cpu. */
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

/** verl's KL estimators by name (kl, k1, abs, mse, k2, low_var_kl, k3). */
export type KlPenaltyType = 'kl' | 'k1' | 'abs' | 'mse' | 'k2' | 'low_var_kl' | 'k3';
/** Every KlPenaltyType. */
export const KL_PENALTY_TYPES: readonly KlPenaltyType[] = ['kl', 'k1', 'abs', 'mse', 'k2', 'low_var_kl', 'k3'];

/** algorithm.kl_ctrl.type: a fixed coefficient or Ziegler et al.'s adaptive one. */
export const KL_CONTROLLER_TYPES = ['fixed', 'adaptive'] as const;

/** verl's loss_agg_mode: how token losses become one number. */
export type LossAggMode = 'token-mean' | 'seq-mean-token-mean' | 'seq-mean-token-sum' | 'seq-mean-token-sum-norm';
/** Every LossAggMode. */
export const LOSS_AGG_MODES: readonly LossAggMode[] = ['token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum', 'seq-mean-token-sum-norm'];
