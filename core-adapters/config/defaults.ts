// The host's configuration defaults, with verl's section and key names where verl has them.
// Every key a user may set appears here (or in a plugin's defaults): validation rejects the rest.
import { BACKEND_CHOICES, BYPASS_LOSS_TYPES, DISTILLATION_LOSS_MODES, FROZEN_DTYPES, KL_CONTROLLER_TYPES, KL_PENALTY_TYPES, LOSS_AGG_MODES, LR_SCHEDULER_TYPES, NATIVE_CHOICES, ROLLOUT_IS_LEVELS } from './choices.js';

/** A value in a config tree. */
export type ConfigValue = null | boolean | number | string | ConfigValue[] | ConfigTree;
/** A config section: keys to values. */
export interface ConfigTree {
  [key: string]: ConfigValue;
}

/** What a core config key is: its default, its doc, and the rules validation applies to it. */
export interface KeySpec<T = ConfigValue> {
  readonly default: T;
  /** One line for docs/config.md (generated from this spec). */
  readonly doc: string;
  /** The value must be one of these. */
  readonly choices?: readonly string[];
  /** A whole number >= 1 (sizes and counts the loop divides by). */
  readonly positiveInteger?: boolean;
  /** The default is null; a set value has this type (a list of strings or of finite numbers for the -list kinds). */
  readonly nullable?: 'number' | 'string' | 'string-or-list' | 'string-list' | 'number-list';
  /** A single string or a list of them (verl allows both for data files). */
  readonly stringOrList?: boolean;
  /** A free-form subtree, not validated key by key. */
  readonly open?: boolean;
  /** 'auto' or a whole number >= 1. */
  readonly autoOrCount?: boolean;
  /** A finite number > 0, or null. */
  readonly positiveOrNull?: boolean;
  /** A number or a string (verl's thresholds that take "lower_upper" forms); with nullable, null too. */
  readonly numberOrString?: boolean;
  /** A whole number (with min and max, a range of them). */
  readonly integer?: boolean;
  /** The smallest value allowed (excluded with exclusiveMin). */
  readonly min?: number;
  readonly exclusiveMin?: boolean;
  /** The largest value allowed (excluded with exclusiveMax). */
  readonly max?: number;
  readonly exclusiveMax?: boolean;
}

/** One key's spec. */
function key<T>(value: T, doc: string, rules: Omit<KeySpec<T>, 'default' | 'doc'> = {}): KeySpec<T> {
  return { default: value, doc, ...rules };
}

/** Whether a spec tree's node is a key (not a section). */
export function isKeySpec(value: unknown): value is KeySpec {
  return typeof value === 'object' && value !== null && 'default' in value && 'doc' in value;
}

/** The defaults a spec tree describes, typed key by key. */
export type DefaultsOf<S> = { -readonly [K in keyof S]: S[K] extends KeySpec<infer V> ? V : DefaultsOf<S[K]> };

/** The optimizer section of a role (verl's optim keys): AdamW and its learning-rate schedule, `lr` by default. */
function optimSpec(lr: number, role: string) {
  return {
    lr: key(lr, `AdamW learning rate of ${role}.`),
    weight_decay: key(0.01, 'AdamW decoupled weight decay.'),
    betas: key([0.9, 0.999], 'AdamW moment decay rates [beta1, beta2].'),
    eps: key(1e-8, 'AdamW epsilon.'),
    lr_warmup_steps: key(-1, "verl's schedule: warm-up steps (training steps); negative: lr_warmup_steps_ratio of the run."),
    lr_warmup_steps_ratio: key(0.0, 'Warm-up as a share of the run when lr_warmup_steps is negative.'),
    lr_scheduler_type: key<(typeof LR_SCHEDULER_TYPES)[number]>('constant', 'constant (after a linear warm-up) | cosine (to min_lr_ratio * lr at the last step).', { choices: LR_SCHEDULER_TYPES }),
    warmup_style: key(null as string | null, "verl's deprecated name for lr_scheduler_type; wins when set.", { nullable: 'string' }),
    min_lr_ratio: key(0.0, 'Cosine schedule: the final lr as a share of lr.'),
    num_cycles: key(0.5, 'Cosine schedule: periods over the run (0.5: one half-cosine down).'),
    total_training_steps: key(-1, "Filled in by the trainer with the run's training steps, as verl does."),
  };
}

/**
 * Every core config key (verl's names where verl has them): its default, doc and rules, in one
 * place. The defaults, the validation tables below, the Config type and docs/config.md all come
 * from it; validation rejects keys that are neither here nor in a plugin's defaults.
 */
export const CORE_SPEC = {
  plugins: key([] as string[], "Plugin manifests: plugin.json files, directories holding one, or installed package names (relative to the config file).", { stringOrList: true }),
  engine: {
    backend: key<(typeof BACKEND_CHOICES)[number]>('auto', "The tfjs backend: auto (tfjs-node-gpu, then tfjs-node, then webgpu on a hardware GPU, then wasm, then cpu), or one by name; FLOWRL_BACKEND overrides it.", { choices: BACKEND_CHOICES }),
    native: key<(typeof NATIVE_CHOICES)[number]>('auto', "The engine path on wasm: auto (the native addon, with an optimised BLAS when one is found), loop (the addon's compiled loop; FLOWRL_BLAS=none), off (stock kernels; FLOWRL_NATIVE=off).", { choices: NATIVE_CHOICES }),
    workers: key('auto' as string | number, "Data-parallel threads for actor updates and sampling: auto (the cores, FLOWRL_WORKERS overrides) or a whole number (1: none).", { autoOrCount: true }),
    rank_timeout_s: key(600, "Data-parallel ranks (mpirun -np N): seconds a rank waits for the others in a gather or sum before every rank stops (the slowest rank's step must fit).", { min: 0, exclusiveMin: true }),
  },
  data: {
    train_files: key(null as string | string[] | null, "Training prompts: .jsonl or .parquet files of verl rows (prompt, data_source, reward_model.ground_truth).", { stringOrList: true, nullable: 'string-or-list' }),
    val_files: key(null as string | string[] | null, "Validation prompts, in the same format.", { stringOrList: true, nullable: 'string-or-list' }),
    train_batch_size: key(8, "Prompts per training step (each sampled rollout.n times).", { positiveInteger: true }),
    gen_batch_size: key(null as number | null, "Prompts sampled per generation batch under algorithm.filter_groups (DAPO's dynamic sampling); null: train_batch_size.", { positiveInteger: true, nullable: 'number' }),
    val_max_samples: key(null as number | null, "Validation prompts used per evaluation; null uses them all.", { positiveInteger: true, nullable: 'number' }),
    max_prompt_length: key(256, "Longest prompt in tokens; longer rows are dropped (filter_overlong_prompts) or an error.", { positiveInteger: true }),
    max_response_length: key(64, "New tokens sampled per response at most.", { positiveInteger: true }),
    filter_overlong_prompts: key(true, "Drop prompts over max_prompt_length (counted in the run summary) instead of stopping."),
    shuffle: key(true, "Shuffle the training prompts each epoch (seeded)."),
    seed: key(null as number | null, "Seed of the data order; null uses trainer.seed.", { nullable: 'number' }),
  },
  actor_rollout_ref: {
    model: {
      path: key(null as string | null, "The policy: a Hugging Face model directory (Llama or Qwen2).", { nullable: 'string' }),
      tokenizer_path: key(null as string | null, "Tokenizer directory; null reads it from model.path.", { nullable: 'string' }),
      lora_rank: key(0, "LoRA rank (verl's key): 0 trains every weight; > 0 freezes the base and trains adapters, and the reference is the base with adapters off."),
      lora_alpha: key(16, "LoRA scale numerator: the adapters add (lora_alpha / lora_rank) * B A."),
      target_modules: key('all-linear' as string | string[], "Modules with adapters: 'all-linear' or a list among q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj.", { stringOrList: true }),
      lora_adapter_path: key(null as string | null, "A PEFT adapter directory to start from (needs lora_rank equal to its r).", { nullable: 'string' }),
      enable_gradient_checkpointing: key(false, "Recompute each decoder layer in the backward pass instead of keeping its activations (verl's key): far less memory, one more forward."),
      base_dtype: key<(typeof FROZEN_DTYPES)[number]>('float32', "With LoRA, the frozen base lives outside the wasm heap (native addon) in this dtype: float32 | bfloat16 (half the memory).", { choices: FROZEN_DTYPES }),
      base_compute_dtype: key<(typeof FROZEN_DTYPES)[number]>('float32', "What the frozen base's products round their activations to: float32 (exact products of the stored weights) | bfloat16 (with base_dtype bfloat16: bfloat16 times bfloat16 summed in float32, as llama.cpp computes a bfloat16 model; on AVX512_BF16 or AMX through oneDNN when libdnnl2 is installed).", { choices: FROZEN_DTYPES }),
    },
    actor: {
      optim: optimSpec(1e-6, 'the actor'),
      ppo_mini_batch_size: key(8, "Prompts per optimizer step (times rollout.n responses), as in verl.", { positiveInteger: true }),
      ppo_micro_batch_size: key(16, "Responses per forward/backward pass; gradients accumulate over a mini-batch.", { positiveInteger: true }),
      ppo_epochs: key(1, "Passes over each batch of rollouts.", { positiveInteger: true }),
      /** verl's PolicyLossConfig: which loss, and the keys of the losses that read any. */
      policy_loss: {
        loss_mode: key('vanilla', "The policy loss by name (verl v0.9.0's): vanilla, dppo_tv, dppo_kl, gspo, sapo, gpg, clip_cov, kl_cov, geo_mean, dro, cispo, bypass_mode, or one a plugin registers (docs/training-step.md)."),
        clip_cov_ratio: key(0.0002, "clip_cov: share of the valid tokens whose loss is dropped (at least one).", { min: 0, exclusiveMin: true, max: 1 }),
        clip_cov_lb: key(1.0, "clip_cov: tokens are candidates when their covariance (A - mean A)(log pi - mean log pi) is above this..."),
        clip_cov_ub: key(5.0, "clip_cov: ...and below this."),
        kl_cov_ratio: key(0.0002, "kl_cov: share of the valid tokens (those of largest covariance, at least one) that get the |log ratio| penalty.", { min: 0, exclusiveMin: true, max: 1 }),
        ppo_kl_coef: key(0.1, "kl_cov: that penalty's coefficient."),
        dro_beta: key(null as number | null, "dro: the quadratic log-ratio penalty beta; required (> 0) when loss_mode is dro.", { nullable: 'number', min: 0, exclusiveMin: true }),
        /** What bypass_mode reads, with verl's RolloutCorrectionConfig defaults (verl's trainer copies algorithm.rollout_correction here when its bypass_mode is on). */
        rollout_correction: {
          loss_type: key<(typeof BYPASS_LOSS_TYPES)[number]>('ppo_clip', "bypass_mode: ppo_clip (vanilla on pi / pi_rollout, no weights) or reinforce (-w A log pi).", { choices: BYPASS_LOSS_TYPES }),
          rollout_is: key<(typeof ROLLOUT_IS_LEVELS)[number] | null>('sequence', "bypass_mode: importance weights pi / pi_rollout per token or per sequence (reinforce applies them, ppo_clip only reports them); null: none.", { choices: ROLLOUT_IS_LEVELS, nullable: 'string' }),
          rollout_is_threshold: key(2.0 as number | string | null, "bypass_mode: an upper bound the weights are truncated at, or 'lower_upper' (IcePop: weights outside are zeroed); null: no weights.", { numberOrString: true, nullable: 'number' }),
          rollout_is_batch_normalize: key(false, "bypass_mode: scale the weights to mean 1 over each micro-batch."),
          rollout_rs: key(null as string | null, "bypass_mode: rejection criteria, comma-separated: token_k1|k2|k3, seq_sum_k1|k2|k3, seq_mean_k1|k2|k3, seq_max_k2|k3; null: none.", { nullable: 'string' }),
          rollout_rs_threshold: key(null as number | string | null, "bypass_mode: one threshold per criterion or one for all; *_k1 take 'lower_upper' ratio bounds (one number u means [1/u, u]), k2 and k3 an upper bound.", { numberOrString: true, nullable: 'number' }),
        },
      },
      clip_ratio: key(0.2, "The clip range where clip_ratio_low or clip_ratio_high is null (verl's fallback)."),
      clip_ratio_low: key(0.2 as number | null, "PPO clip: ratios below 1 - clip_ratio_low are clipped (DPPO: the divergence threshold for A <= 0); null: clip_ratio.", { nullable: 'number' }),
      clip_ratio_high: key(0.2 as number | null, "PPO clip: ratios above 1 + clip_ratio_high are clipped (DPPO: the threshold for A > 0); null: clip_ratio.", { nullable: 'number' }),
      clip_ratio_c: key(3.0, "Dual-clip bound for negative advantages (vanilla and bypass_mode's ppo_clip need > 1); DPPO truncates its ratio there."),
      tau_pos: key(1.0, "sapo: the gate's temperature for positive advantages.", { min: 0, exclusiveMin: true }),
      tau_neg: key(1.05, "sapo: the gate's temperature for the others.", { min: 0, exclusiveMin: true }),
      grad_clip: key(1.0, "Global gradient-norm clip."),
      loss_agg_mode: key<(typeof LOSS_AGG_MODES)[number]>('token-mean', "How per-token losses become one (verl v0.9.0's modes): token-mean or token-sum over all tokens, or per sequence then the mean over sequences (seq-mean-token-sum-norm divides that by loss_scale_factor). gspo, sapo and geo_mean set their own.", { choices: LOSS_AGG_MODES }),
      loss_scale_factor: key(null as number | null, "seq-mean-token-sum-norm's divisor; null: the response length of each micro-batch. A constant keeps the scale fixed across batches.", { nullable: 'number', min: 0, exclusiveMin: true }),
      use_kl_loss: key(false, "Add a KL-to-reference term to the actor loss (loads the reference policy)."),
      kl_loss_coef: key(0.001, "Weight of the KL loss."),
      kl_loss_type: key<(typeof KL_PENALTY_TYPES)[number]>('low_var_kl', "The KL estimator of the KL loss (verl's names: kl = k1, abs, mse = k2, low_var_kl = k3; NAME+ keeps NAME's value with k2's gradient; full is refused, as verl leaves it unimplemented).", { choices: KL_PENALTY_TYPES }),
      entropy_coeff: key(0, "Weight of the entropy bonus (0: off)."),
      calculate_sum_pi_squared: key(false, "Compute sum pi^2 over the vocabulary with the old log-probs (kept as sum_pi_squared); adv_estimator optimal_token_baseline and tir_optimal_token_baseline turn it on themselves."),
    },
    ref: {
      model_path: key(null as string | null, "The reference policy's HF directory; null: model.path's initial weights (flowrl eval of a checkpoint sets the run's base).", { nullable: 'string' }),
      log_prob_micro_batch_size: key(32, "Responses per reference forward pass.", { positiveInteger: true }),
    },
    rollout: {
      name: key<'local' | 'sglang' | 'vllm'>('local', "Where sampling runs: local (this process) | sglang | vllm (the inference servers at server.urls).", { choices: ['local', 'sglang', 'vllm'] as const }),
      n: key(1, "Responses sampled per prompt (a group, for GRPO and FlowRL).", { positiveInteger: true }),
      temperature: key(1.0, "Sampling temperature of training rollouts."),
      top_p: key(1.0, "Nucleus sampling (1.0: off). With rollout.name vllm it must stay 1.0."),
      top_k: key(-1, "Top-k sampling (-1: off). With rollout.name vllm it must stay -1."),
      log_prob_micro_batch_size: key(32, "Responses per old-log-prob forward pass.", { positiveInteger: true }),
      generation_batch_size: key(64, "Sequences sampled together (prompts times rollout.n are split into batches of this many).", { positiveInteger: true }),
      val_kwargs: {
        n: key(1, "Samples per validation prompt (Avg@n, pass@k).", { positiveInteger: true }),
        temperature: key(0, "Validation sampling temperature."),
        top_p: key(1.0, "Validation nucleus sampling."),
        top_k: key(-1, "Validation top-k (-1: off)."),
        do_sample: key(false, "false: greedy validation."),
      },
      /** Multi-turn rollouts with tools (verl v0.9.0's keys; rollout/agent-loop.ts). */
      multi_turn: {
        enable: key(false, "Roll out rows whose agent is tool_agent (agent_name, else agent.default_agent_loop) as conversations with tools."),
        max_assistant_turns: key(null as number | null, "Policy turns a trajectory may have; null: no limit but the response length.", { nullable: 'number', integer: true, min: 1 }),
        max_user_turns: key(null as number | null, "Tool turns a trajectory may have; null: no limit but the response length.", { nullable: 'number', integer: true, min: 1 }),
        max_parallel_calls: key(1, "Tool calls run from one policy turn; later calls in the turn are dropped (counted).", { positiveInteger: true }),
        max_tool_response_length: key(256, "Characters of a tool's answer kept (verl counts characters too).", { positiveInteger: true }),
        tool_response_truncate_side: key<'left' | 'middle' | 'right'>('middle', "Which part of a long tool answer is cut: left keeps the end, right the start, middle both ends.", { choices: ['left', 'middle', 'right'] as const }),
        tool_config_path: key(null as string | null, "YAML in verl's shape: tools: [{class_name, config: {type: native, ...}, tool_schema: {type: function, function: {...}}}]; class names: Calculator, CodeInterpreter, or a plugin's.", { nullable: 'string' }),
        format: key<'hermes'>('hermes', "The tool-call format: hermes (<tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>).", { choices: ['hermes'] as const }),
        tokenization_sanity_check_mode: key<'strict' | 'ignore_strippable' | 'disable'>('strict', "Compare each trajectory's ids with the conversation rendered at once (strict, ignore_strippable: up to whitespace, disable); mismatches are counted in agent_loop/tokenization_mismatch.", { choices: ['strict', 'ignore_strippable', 'disable'] as const }),
        function_tool_path: key(null as string | null, "verl's Python function tools; here a plugin registers a tool class instead (set: an error saying so).", { nullable: 'string' }),
        use_inference_chat_template: key(false, "Read only by verl's legacy rollout; its agent loop and this host always train on the sampled ids (true: an error saying so)."),
        num_repeat_rollouts: key(null as number | null, "Declared by verl v0.9.0 and read nowhere; use rollout.n (set: an error saying so).", { nullable: 'number' }),
        tool_timeout_s: key(30, "Seconds a tool call may take before its turn says it timed out (this host's key; verl has none).", { min: 0, exclusiveMin: true }),
      },
      agent: {
        default_agent_loop: key<'single_turn_agent' | 'tool_agent'>('single_turn_agent', "The agent of rows without agent_name: single_turn_agent (one response) or tool_agent (multi_turn.enable must be true).", { choices: ['single_turn_agent', 'tool_agent'] as const }),
      },
      /** Inference servers (rollout.name sglang or vllm). */
      server: {
        urls: key([] as string[], "Base URL of each server, e.g. [http://127.0.0.1:30000]; weight updates go to each directly.", { stringOrList: true }),
        weights_dir: key(null as string | null, "Where the policy is written for the servers (v{N} per version); every server must read this path. null: <default_local_dir>/rollout_weights.", { nullable: 'string' }),
        timeout_s: key(600, "Seconds a sample may take before it is drawn again on another server."),
        max_retries: key(3, "Times one sample is drawn again after a failure before the run stops."),
        max_staleness: key(0, "Samples from weights more than this many updates old are dropped and drawn again."),
        max_inflight: key(64, "Samples in flight per server at most."),
        api_key: key(null as string | null, "The servers' API key (sent as Authorization: Bearer); null: the FLOWRL_ROLLOUT_API_KEY environment variable, else none.", { nullable: 'string' }),
        admin_api_key: key(null as string | null, "SGLang's --admin-api-key, sent instead of api_key on the admin routes (pause, weight loads, version, adapters); null: the FLOWRL_ROLLOUT_ADMIN_API_KEY environment variable, else api_key. rollout.name sglang only.", { nullable: 'string' }),
        weight_check_tolerance: key(null as number | null, "vLLM with full weights: the mean |prompt log-prob difference| from the trainer above which a server is taken not to hold the policy (ejected). null: by the engine's dtype, 0.02 for float32 and 0.08 for 16-bit (docs/rollout-servers.md).", { nullable: 'number' }),
      },
    },
  },
  critic: {
    model: {
      path: key(null as string | null, "Value-head trunk; null starts from the actor's checkpoint.", { nullable: 'string' }),
    },
    optim: optimSpec(1e-5, 'the critic (PPO)'),
    ppo_mini_batch_size: key(8, "Prompts per critic optimizer step.", { positiveInteger: true }),
    ppo_micro_batch_size: key(16, "Responses per critic forward/backward pass.", { positiveInteger: true }),
    ppo_epochs: key(1, "Critic passes over each batch.", { positiveInteger: true }),
    cliprange_value: key(0.5, "Value clip around the old values."),
    grad_clip: key(1.0, "Critic gradient-norm clip."),
    loss_agg_mode: key<(typeof LOSS_AGG_MODES)[number]>('token-mean', "As the actor's, for the value loss.", { choices: LOSS_AGG_MODES }),
    warmup: key(0, "Steps that train only the critic before the actor starts."),
  },
  algorithm: {
    name: key('grpo', "ppo | grpo | reinforce_plus_plus | a plugin's algorithm."),
    adv_estimator: key(null as string | null, "null: the estimator the algorithm implies (ppo: gae, grpo: grpo, ...); else a registered one: verl v0.9.0's gae, grpo, grpo_vectorized, gdpo, grpo_passk, reinforce_plus_plus, reinforce_plus_plus_baseline, rloo, rloo_vectorized, opo, gpg, remax, optimal_token_baseline, tir_optimal_token_baseline, or a plugin's.", { nullable: 'string' }),
    gamma: key(1.0, "Discount factor (GAE, REINFORCE++)."),
    lam: key(1.0, "GAE lambda."),
    norm_adv_by_std_in_grpo: key(true, "grpo, grpo_vectorized, grpo_passk, gdpo: divide group-centred scores by the group's standard deviation (false: Dr.GRPO)."),
    gdpo_reward_keys: key(null as string[] | null, "gdpo: the scorer's fields (keys of the dict it returns, score included) normalised per group one by one; required with adv_estimator gdpo.", { nullable: 'string-list' }),
    gdpo_reward_weights: key(null as number[] | null, "gdpo: one weight per gdpo_reward_keys entry for their sum; null: 1 each.", { nullable: 'number-list' }),
    use_kl_in_reward: key(false, "Subtract a KL penalty from the token rewards (loads the reference policy)."),
    kl_penalty: key<(typeof KL_PENALTY_TYPES)[number]>('kl', "The KL estimator of the KL-in-reward penalty (as kl_loss_type).", { choices: KL_PENALTY_TYPES }),
    kl_ctrl: {
      type: key<(typeof KL_CONTROLLER_TYPES)[number]>('fixed', "fixed (kl_coef throughout) or adaptive (towards target_kl over horizon).", { choices: KL_CONTROLLER_TYPES }),
      kl_coef: key(0.001, "KL-in-reward coefficient (the adaptive controller's start)."),
      horizon: key(10000, "Adaptive KL controller horizon."),
      target_kl: key(0.1, "Adaptive KL controller target."),
    },
    /** DAPO's dynamic sampling: keep only prompts whose responses differ in `metric`, sampling more until the batch is full. */
    filter_groups: {
      enable: key(false, "Drop groups whose responses all have the same metric; sample data.gen_batch_size more prompts until train_batch_size groups are kept."),
      metric: key<'acc' | 'score' | 'seq_reward' | 'seq_final_reward' | null>(null, "What must vary within a kept group: acc (correct or not), score, seq_reward (the token scores' sum) or seq_final_reward (the token rewards' sum, KL penalty included), as DAPO's recipe names them.", {
        choices: ['acc', 'score', 'seq_reward', 'seq_final_reward'] as const,
        nullable: 'string',
      }),
      max_num_gen_batches: key(0, "Generation batches a step may sample before it stops the run; 0 or less: no limit.", { integer: true }),
    },
    /** Off-policy correction for rollouts sampled by another engine (batches carrying rollout_log_probs). */
    rollout_correction: {
      tis_cap: key(2 as number | null, "Truncated importance sampling: each loss term weighs min(exp(old − rollout), tis_cap), a constant; null: off (metrics still logged).", { positiveOrNull: true }),
      bypass_mode: key(false, "verl's bypass mode: the rollout engine's log-probs are the old log-probs (no recomputing pass) and the policy loss is bypass_mode, with actor.policy_loss.rollout_correction's settings. Needs rollout servers."),
    },
  },
  reward_model: {
    reward_manager: key<'naive' | 'dapo'>('naive', "How responses are scored: naive (each alone, by data_source); dapo (the same, plus overlong_buffer's length penalty).", { choices: ['naive', 'dapo'] as const }),
    /** DAPO's overlong reward shaping (reward_manager dapo): a penalty growing linearly over the last `len` tokens before data.max_response_length. */
    overlong_buffer: {
      enable: key(false, "Add DAPO's overlong penalty to each score (reward_manager must be dapo)."),
      len: key(0, "Tokens before data.max_response_length over which the penalty grows from 0 to penalty_factor.", { integer: true, min: 0 }),
      penalty_factor: key(0.0, "The penalty of a response that reaches data.max_response_length.", { min: 0 }),
      log: key(false, "Report reward/overlong_reward and reward/overlong (the share penalised)."),
    },
    reward_kwargs: key({} as Record<string, unknown>, "Extra keyword options passed to the scorer of each data_source.", { open: true }),
    /** Code rewards (data_source codecontests, apps, codeforces, taco): programs run against each row's tests. */
    code: {
      score: key<'prime_code' | 'fraction' | 'all'>('prime_code', "prime_code: verl's (1 when every test passes, else the share passed of the first 10, a call-based row's rerun as standard-input programs as verl does); fraction: the share of all tests passed; all: 1 or 0.", { choices: ['prime_code', 'fraction', 'all'] as const }),
      execution: key<'prime_code' | 'program'>('prime_code', "How a test's program runs. prime_code: as verl's prime_code runs it (its prelude of imports, exit/quit/os.fork/... disabled, a standard-input program's body called as a function with stdin patched); program: as a real program (python3 main.py; a call-based function imported and called).", { choices: ['prime_code', 'program'] as const }),
      timeout_s: key(5, "CPU seconds per test program in the local sandbox (of its whole run where it has a cgroup, else of each process); the wall-clock limit is wall_factor times this.", { min: 0, exclusiveMin: true }),
      wall_factor: key(3, "The wall-clock limit of a test program as a multiple of timeout_s: a loaded machine slows a program's clock, not its CPU time (this host's key; verl has none).", { min: 1 }),
      memory_mb: key(512, "Memory of a test program's whole run in the local sandbox, MiB: its processes, its /tmp files and kernel memory, in a cgroup where one can be made (as root); otherwise each process's address space.", { integer: true, min: 16 }),
      processes: key(16, "Processes and threads a test program may have at once in the local sandbox.", { integer: true, min: 1 }),
      output_bytes: key(1048576, "Bytes of output a test program may write before it is stopped.", { integer: true, min: 1 }),
      concurrency: key(null as number | null, "Test programs run at once; null: the machine's cores.", { positiveInteger: true, nullable: 'number' }),
      reuse_runs: key(4096, "Identical (program, test input) pairs among the last N runs are run once and share the result (a group's repeated answers cost one run); 0: run every one. Set 0 for programs whose outcome is random.", { integer: true, min: 0 }),
    },
    /** verl's SandboxFusion client: with url set, code tests run on that server instead of the local sandbox. */
    sandbox_fusion: {
      url: key(null as string | null, "A SandboxFusion server's run_code URL (e.g. http://host:8080/run_code); null: the local sandbox.", { nullable: 'string' }),
      max_concurrent: key(64, "Requests to the server at once.", { positiveInteger: true }),
      memory_limit_mb: key(1024, "memory_limit_MB sent with each request.", { positiveInteger: true }),
    },
  },
  custom_reward_function: {
    path: key(null as string | null, "A module with a verl-shaped scorer (data_source, solution, ground_truth, extra_info); null: by data_source.", { nullable: 'string' }),
    name: key('compute_score', "The scorer's exported name in that module."),
  },
  /** Supervised fine-tuning (flowrl sft) on data.train_files rows that carry a response. */
  sft: {
    response_key: key('extra_info.response', "Dotted path of the response text in each row."),
    messages_key: key(null as string | null, "Dotted path of a conversation in each row (verl's data.messages_key): [{role, content}, ...] with assistant, tool and user turns, laid out as multi-turn rollouts lay it out, the loss on the assistant's tokens only; null: prompt/response rows (response_key).", { nullable: 'string' }),
    tools_key: key('tools', "Dotted path of a conversation row's tools (verl's data.tools_key): function schemas, or names of rollout.multi_turn.tool_config_path's tools; a row without it is rendered without tools, as verl does."),
    init_config: key(null as string | null, "A config.json to initialise a new model from (random weights, seeded); null fine-tunes model.path.", { nullable: 'string' }),
    epochs: key(1, "Passes over the SFT rows.", { positiveInteger: true }),
    total_steps: key(null as number | null, "SFT optimizer steps; null: from epochs.", { positiveInteger: true, nullable: 'number' }),
    batch_size: key(32, "SFT rows per optimizer step.", { positiveInteger: true }),
    lr: key(1e-3, "SFT learning rate."),
    weight_decay: key(0.01, "SFT AdamW weight decay."),
    warmup_steps: key(0, "SFT linear warm-up steps."),
    lr_scheduler_type: key<(typeof LR_SCHEDULER_TYPES)[number]>('constant', "constant, or cosine decay to min_lr_ratio * lr over the steps after warm-up.", { choices: LR_SCHEDULER_TYPES }),
    min_lr_ratio: key(0, "SFT cosine schedule: the final lr as a share of lr."),
    grad_clip: key(1.0, "SFT gradient-norm clip."),
    output_dir: key(null as string | null, "Where the fine-tuned HF directory goes; null: <default_local_dir>/sft-model.", { nullable: 'string' }),
  },
  /** verl's on-policy distillation keys (verl main 1dda039, trainer/config/distillation/distillation.yaml): docs/distillation.md. */
  distillation: {
    enabled: key(false, "On-policy distillation: a teacher scores the student's sampled tokens, and the divergence trains the student (with the task's reward, or alone)."),
    teacher_key: key('data_source', "With several teachers, the row field whose value picks the teacher (the one whose key equals it): a batch column such as data_source, else a key of extra_info."),
    teacher_models: key({} as Record<string, unknown>, "Teachers by name: {key, model_path, inference: {name: vllm | sglang | local, urls, api_key, timeout_s, max_inflight}}. model_path's tokenizer must be the student's; vllm scores through a server's prompt_logprobs, sglang through /generate's input log-probs (flowrl serve speaks both), local loads model_path here.", { open: true }),
    distillation_loss: {
      loss_mode: key<(typeof DISTILLATION_LOSS_MODES)[number]>('k3', "The token divergence: kl/k1, abs, mse/k2, low_var_kl/k3 (estimators at the sampled token, student minus teacher), or forward_kl_topk (sum over the teacher's top-k of p_t (log p_t - log p_s)).", { choices: DISTILLATION_LOSS_MODES }),
      topk: key(32, "forward_kl_topk: how many of the teacher's most likely tokens per position (the teacher server must allow this many prompt log-probs).", { positiveInteger: true }),
      use_task_rewards: key(true, "Add the task's policy loss (rewards, advantages) to coef times the distillation loss; false trains on the distillation loss alone (coef 1)."),
      distillation_loss_coef: key(1.0, "The distillation loss's weight beside the task's.", { min: 0 }),
      loss_max_clamp: key(null as number | null, "Clamp each token's divergence to [-c, c]; null: none.", { nullable: 'number', min: 0, exclusiveMin: true }),
      log_prob_min_clamp: key(null as number | null, "forward_kl_topk: both sides' log-probs are at least this before the divergence; null: none.", { nullable: 'number' }),
      use_policy_gradient: key(false, "The divergence's negative as each token's advantage in a vanilla PPO term (on-policy distillation's reverse-KL reward; k1 needs it) instead of backpropagating the divergence itself."),
      policy_loss_mode: key('vanilla', "The policy loss of use_policy_gradient: vanilla only, as verl.", { choices: ['vanilla'] }),
      clip_ratio: key(0.2, "use_policy_gradient: the PPO clip of the distillation term."),
      clip_ratio_low: key(0.2, "use_policy_gradient: its lower clip."),
      clip_ratio_high: key(0.2, "use_policy_gradient: its upper clip."),
    },
  },
  trainer: {
    project_name: key('flowrl', "Project name (metrics and reports)."),
    experiment_name: key('default', "Run name: the default run directory is runs/<experiment_name>."),
    total_epochs: key(1, "Passes over the training prompts (when total_training_steps is null).", { positiveInteger: true }),
    total_training_steps: key(null as number | null, "Training steps; null: from total_epochs.", { positiveInteger: true, nullable: 'number' }),
    test_freq: key(-1, "Validate every N steps and after the last one; -1 never (val_before_train is separate)."),
    save_freq: key(-1, "Checkpoint every N steps (and after the last); -1 only at the end."),
    val_before_train: key(true, "Validate once before the first step."),
    logger: key(['console', 'file'] as string | string[], "verl's trackers: console (the progress bar), file (metrics.jsonl, always written), tensorboard (event files in $TENSORBOARD_DIR or tensorboard_log/<project_name>/<experiment_name>), mlflow (the REST API at $MLFLOW_TRACKING_URI), wandb (W&B's GraphQL API and file stream at $WANDB_BASE_URL, default https://api.wandb.ai; $WANDB_API_KEY or ~/.netrc).", { stringOrList: true }),
    rollout_data_dir: key(null as string | null, "Each training step's samples to <dir>/<step>.jsonl (verl's key and fields: input, output, gts, score, step and the scorers' extras; with response_ids and response_mask, the loss mask that is 0 on tool turns); data-parallel ranks: rank 0's share. null: none.", { nullable: 'string' }),
    log_val_generations: key(4, "Validation generations written to val_generations.jsonl at each validation (and shown in the report): the first sample of each of the first N prompts, multi-turn conversations turn by turn; 0: none. verl's key (its default is 0; it logs them to its trackers).", { integer: true, min: 0 }),
    val_matching: key(true, "Validation also measures distribution matching over each prompt's correct responses (val/matching/*): exactly over every correct answer where the task lists them (countdown), else over the distinct correct samples, with the policy and the reference scored at rollout.val_kwargs.temperature (1 under greedy validation). Loads the reference policy when the algorithm has none."),
    default_local_dir: key(null as string | null, "Run directory: metrics.jsonl, config.yaml, checkpoints/. null: runs/<experiment_name>.", { nullable: 'string' }),
    resume_mode: key('auto', "auto (latest checkpoint if any) | disable | a global_step_N directory."),
    max_checkpoints_to_keep: key(null as number | null, "Checkpoints kept on disk (oldest removed first); null keeps all.", { positiveInteger: true, nullable: 'number' }),
    seed: key(1, "Seed of sampling, initialisation and (unless data.seed) the data order."),
    one_step_off_policy: key(false, "Sample step t+1's rollouts on the servers while step t trains (verl's one_step_off_policy recipe): each batch comes from the weights one update behind those that train on it, corrected by algorithm.rollout_correction. Needs rollout servers (rollout.name sglang or vllm) and rollout.server.max_staleness >= 1."),
    progress: key(true, "Console progress bar and summary lines."),
    /** verl's V1 async trainer keys (verl main 1dda039, docs/advance/v1_async_trainer.md): docs/async-training.md. */
    v1: {
      trainer_mode: key<'sync' | 'separate_async'>('sync', "sync: each step samples, then trains (one_step_off_policy overlaps one step); separate_async: the rollout servers sample prompt groups continuously while the trainer updates, each step training on finished groups (needs rollout servers).", { choices: ['sync', 'separate_async'] }),
      sampler: {
        max_off_policy_threshold: key(8, "separate_async: the most weight versions a group may age between its launch and the step that trains it.", { integer: true, min: 0 }),
        max_off_policy_strategy: key<'drop' | 'wait'>('drop', "separate_async: drop (a step trains the oldest finished groups; one past the threshold is dropped and another prompt sampled) or wait (a step trains groups in launch order, waiting for each: none can pass the threshold).", { choices: ['drop', 'wait'] }),
      },
      partial_rollout: key(true, "separate_async: a sample aborted by a weight update (SGLang's pause) keeps its tokens and resumes under the new weights, each token's version recorded; false draws it again whole."),
    },
  },
};

/** Every spec in a tree, by dotted key. */
export function keySpecs(tree: object = CORE_SPEC, prefix = ''): Map<string, KeySpec> {
  const out = new Map<string, KeySpec>();
  for (const [name, value] of Object.entries(tree)) {
    const dotted = prefix ? `${prefix}.${name}` : name;
    if (isKeySpec(value)) out.set(dotted, value);
    else for (const [k, v] of keySpecs(value as object, dotted)) out.set(k, v);
  }
  return out;
}

/** The defaults a spec tree gives (a plugin's manifest config as well as CORE_SPEC). */
export function defaultsOf<S extends object>(tree: S): DefaultsOf<S> {
  return Object.fromEntries(Object.entries(tree).map(([name, value]) => [name, isKeySpec(value) ? structuredClone(value.default) : defaultsOf(value as object)])) as DefaultsOf<S>;
}

/** Every core config key with its default (from CORE_SPEC). */
export const CORE_DEFAULTS: DefaultsOf<typeof CORE_SPEC> = defaultsOf(CORE_SPEC);

export type CoreConfig = typeof CORE_DEFAULTS;

const SPECS = keySpecs();
const keysWhere = (rule: (s: KeySpec) => unknown) => new Set([...SPECS].filter(([, s]) => rule(s)).map(([k]) => k));

/** Keys whose value is one of a fixed list (plugin algorithm names are checked separately). */
export const KEY_CHOICES: Record<string, readonly string[]> = Object.fromEntries([...SPECS].filter(([, s]) => s.choices).map(([k, s]) => [k, s.choices!]));
/** Types of keys whose default is null (the default's own type says nothing there). */
export const NULLABLE_TYPES: Record<string, NonNullable<KeySpec['nullable']>> = Object.fromEntries([...SPECS].filter(([, s]) => s.nullable).map(([k, s]) => [k, s.nullable!]));
/** Keys that accept either a single value or a list (verl allows both for data files). */
export const STRING_OR_LIST_KEYS = keysWhere((s) => s.stringOrList);
/** Keys whose subtree is free-form (not validated key by key). */
export const OPEN_KEYS = keysWhere((s) => s.open);
/** Keys that take 'auto' or a whole number >= 1. */
export const AUTO_OR_COUNT_KEYS = keysWhere((s) => s.autoOrCount);
/** Keys that take a finite number > 0 or null. */
export const POSITIVE_OR_NULL_KEYS = keysWhere((s) => s.positiveOrNull);
/** Keys that must be whole numbers >= 1 (sizes and counts the loop divides by). */
export const POSITIVE_INTEGER_KEYS = keysWhere((s) => s.positiveInteger);
