// The host's RL algorithms: advantage estimators, policy and value losses, KL penalties and
// controllers (verl's verl/trainer/ppo/core_algos.py), each estimator and policy loss in a registry by name.
export * from './advantages.js';
export * from './policy-loss.js';
export * from './kl.js';
export * from './value-loss.js';
export * from './compose.js';
export * from './rollout-correction.js';
