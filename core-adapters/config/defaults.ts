// The host's configuration defaults, with verl's section and key names where verl has them.
// Every key a user may set appears here (or in a plugin's defaults): validation rejects the rest.
import { BACKEND_CHOICES, FROZEN_DTYPES, KL_CONTROLLER_TYPES, KL_PENALTY_TYPES, LOSS_AGG_MODES, LR_SCHEDULER_TYPES, NATIVE_CHOICES } from './choices.js';

/** A value in a config tree. */
export type ConfigValue = null | boolean | number | string | ConfigValue[] | ConfigTree;
/** A config section: keys to values. */
export interface ConfigTree {
  [key: string]: ConfigValue;
}

/**
 * Keys whose value is one of a fixed list (plugin algorithm names are checked separately). The
 * defaults below take their types from this table, so a choice key is typed as its union.
 */
export const KEY_CHOICES = {
  'engine.backend': BACKEND_CHOICES,
  'engine.native': NATIVE_CHOICES,
  'actor_rollout_ref.model.base_dtype': FROZEN_DTYPES,
  'actor_rollout_ref.actor.optim.lr_scheduler_type': LR_SCHEDULER_TYPES,
  'critic.optim.lr_scheduler_type': LR_SCHEDULER_TYPES,
  'sft.lr_scheduler_type': LR_SCHEDULER_TYPES,
  'actor_rollout_ref.actor.loss_agg_mode': LOSS_AGG_MODES,
  'critic.loss_agg_mode': LOSS_AGG_MODES,
  'actor_rollout_ref.actor.kl_loss_type': KL_PENALTY_TYPES,
  'algorithm.kl_penalty': KL_PENALTY_TYPES,
  'algorithm.kl_ctrl.type': KL_CONTROLLER_TYPES,
  'reward_model.reward_manager': ['naive'],
  'actor_rollout_ref.rollout.name': ['local', 'sglang', 'vllm'],
} as const satisfies Record<string, readonly string[]>;

/** A config key whose value is one of a fixed list. */
export type ChoiceKey = keyof typeof KEY_CHOICES;
/** The union of a choice key's allowed values. */
export type Choice<K extends ChoiceKey> = (typeof KEY_CHOICES)[K][number];

/** A choice key's default, checked against its list. */
const choice = <K extends ChoiceKey>(_key: K, value: Choice<K>): Choice<K> => value;

/** Every core config key with its default (verl's names); validation rejects keys not here or in a plugin's defaults. */
export const CORE_DEFAULTS = {
  /** Plugin manifests: plugin.json files, directories holding one, or installed package names (relative to the config file). */
  plugins: [] as string[],
  engine: {
    /** The tfjs backend: auto (tfjs-node-gpu, then tfjs-node, then wasm, then cpu), or one by name. */
    backend: choice('engine.backend', 'auto'),
    /** The engine path on wasm: auto (the native addon, with an optimised BLAS when one is found), loop (the addon's compiled loop; FLOWRL_BLAS=none), off (stock kernels; FLOWRL_NATIVE=off). */
    native: choice('engine.native', 'auto'),
    /** Data-parallel threads for actor updates and sampling: auto (the cores, FLOWRL_WORKERS overrides) or a whole number (1: none). */
    workers: 'auto' as string | number,
  },
  data: {
    /** Training prompts: .jsonl or .parquet files of verl rows (prompt, data_source, reward_model.ground_truth). */
    train_files: null as string | string[] | null,
    /** Validation prompts, in the same format. */
    val_files: null as string | string[] | null,
    /** Prompts per training step (each sampled rollout.n times). */
    train_batch_size: 8,
    /** Validation prompts used per evaluation; null uses them all. */
    val_max_samples: null as number | null,
    /** Longest prompt in tokens; longer rows are dropped (filter_overlong_prompts) or an error. */
    max_prompt_length: 256,
    /** New tokens sampled per response at most. */
    max_response_length: 64,
    /** Drop prompts over max_prompt_length (counted in the run summary) instead of stopping. */
    filter_overlong_prompts: true,
    /** Shuffle the training prompts each epoch (seeded). */
    shuffle: true,
    /** Seed of the data order; null uses trainer.seed. */
    seed: null as number | null,
  },
  actor_rollout_ref: {
    model: {
      /** The policy: a Hugging Face model directory (Llama or Qwen2). */
      path: null as string | null,
      /** Tokenizer directory; null reads it from model.path. */
      tokenizer_path: null as string | null,
      /** LoRA rank (verl's key): 0 trains every weight; > 0 freezes the base and trains adapters, and the reference is the base with adapters off. */
      lora_rank: 0,
      /** LoRA scale numerator: the adapters add (lora_alpha / lora_rank) * B A. */
      lora_alpha: 16,
      /** Modules with adapters: 'all-linear' or a list among q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj. */
      target_modules: 'all-linear' as string | string[],
      /** A PEFT adapter directory to start from (needs lora_rank equal to its r). */
      lora_adapter_path: null as string | null,
      /** Recompute each decoder layer in the backward pass instead of keeping its activations (verl's key): far less memory, one more forward. */
      enable_gradient_checkpointing: false,
      /** With LoRA, the frozen base lives outside the wasm heap (native addon) in this dtype: float32 | bfloat16 (half the memory). */
      base_dtype: choice('actor_rollout_ref.model.base_dtype', 'float32'),
    },
    actor: {
      optim: {
        /** AdamW learning rate. */
        lr: 1e-6,
        /** AdamW decoupled weight decay. */
        weight_decay: 0.01,
        /** AdamW moment decay rates [beta1, beta2]. */
        betas: [0.9, 0.999],
        /** AdamW epsilon. */
        eps: 1e-8,
        /** verl's schedule: warm-up steps (training steps); negative: lr_warmup_steps_ratio of the run. */
        lr_warmup_steps: -1,
        /** Warm-up as a share of the run when lr_warmup_steps is negative. */
        lr_warmup_steps_ratio: 0.0,
        /** constant (after a linear warm-up) | cosine (to min_lr_ratio * lr at the last step). */
        lr_scheduler_type: choice('actor_rollout_ref.actor.optim.lr_scheduler_type', 'constant'),
        /** verl's deprecated name for lr_scheduler_type; wins when set. */
        warmup_style: null as string | null,
        /** Cosine schedule: the final lr as a share of lr. */
        min_lr_ratio: 0.0,
        /** Cosine schedule: periods over the run (0.5: one half-cosine down). */
        num_cycles: 0.5,
        /** Filled in by the trainer with the run's training steps, as verl does. */
        total_training_steps: -1,
      },
      /** Prompts per optimizer step (times rollout.n responses), as in verl. */
      ppo_mini_batch_size: 8,
      /** Responses per forward/backward pass; gradients accumulate over a mini-batch. */
      ppo_micro_batch_size: 16,
      /** Passes over each batch of rollouts. */
      ppo_epochs: 1,
      /** Policy loss by name: vanilla (PPO clip) or one a plugin registers. */
      policy_loss: 'vanilla',
      /** PPO clip: ratios below 1 - clip_ratio_low are clipped. */
      clip_ratio_low: 0.2,
      /** PPO clip: ratios above 1 + clip_ratio_high are clipped. */
      clip_ratio_high: 0.2,
      /** Dual-clip bound for negative advantages. */
      clip_ratio_c: 3.0,
      /** Global gradient-norm clip. */
      grad_clip: 1.0,
      /** How per-token losses become one (verl's modes): token-mean over all tokens, or per-sequence then over sequences. */
      loss_agg_mode: choice('actor_rollout_ref.actor.loss_agg_mode', 'token-mean'),
      /** Add a KL-to-reference term to the actor loss (loads the reference policy). */
      use_kl_loss: false,
      /** Weight of the KL loss. */
      kl_loss_coef: 0.001,
      /** The KL estimator of the KL loss (verl's names: kl = k1, abs, mse = k2, low_var_kl = k3). */
      kl_loss_type: choice('actor_rollout_ref.actor.kl_loss_type', 'low_var_kl'),
      /** Weight of the entropy bonus (0: off). */
      entropy_coeff: 0,
    },
    ref: {
      /** The reference policy's HF directory; null: model.path's initial weights (flowrl eval of a checkpoint sets the run's base). */
      model_path: null as string | null,
      /** Responses per reference forward pass. */
      log_prob_micro_batch_size: 32,
    },
    rollout: {
      /** Where sampling runs: local (this process) | sglang | vllm (the inference servers at server.urls). */
      name: choice('actor_rollout_ref.rollout.name', 'local'),
      /** Responses sampled per prompt (a group, for GRPO and FlowRL). */
      n: 1,
      /** Sampling temperature of training rollouts. */
      temperature: 1.0,
      /** Nucleus sampling (1.0: off). With rollout.name vllm it must stay 1.0. */
      top_p: 1.0,
      /** Top-k sampling (-1: off). With rollout.name vllm it must stay -1. */
      top_k: -1,
      /** Responses per old-log-prob forward pass. */
      log_prob_micro_batch_size: 32,
      /** Sequences sampled together (prompts times rollout.n are split into batches of this many). */
      generation_batch_size: 64,
      val_kwargs: {
        /** Samples per validation prompt (Avg@n, pass@k). */
        n: 1,
        /** Validation sampling temperature. */
        temperature: 0,
        /** Validation nucleus sampling. */
        top_p: 1.0,
        /** Validation top-k (-1: off). */
        top_k: -1,
        /** false: greedy validation. */
        do_sample: false,
      },
      /** Inference servers (rollout.name sglang or vllm). */
      server: {
        /** Base URL of each server, e.g. [http://127.0.0.1:30000]; weight updates go to each directly. */
        urls: [] as string[],
        /** Where the policy is written for the servers (v{N} per version); every server must read this path. null: <default_local_dir>/rollout_weights. */
        weights_dir: null as string | null,
        /** Seconds a sample may take before it is drawn again on another server. */
        timeout_s: 600,
        /** Times one sample is drawn again after a failure before the run stops. */
        max_retries: 3,
        /** Samples from weights more than this many updates old are dropped and drawn again. */
        max_staleness: 0,
        /** Samples in flight per server at most. */
        max_inflight: 64,
        /** The servers' API key (sent as Authorization: Bearer); null: the FLOWRL_ROLLOUT_API_KEY environment variable, else none. */
        api_key: null as string | null,
      },
    },
  },
  critic: {
    model: {
      /** Value-head trunk; null starts from the actor's checkpoint. */
      path: null as string | null,
    },
    optim: {
      /** Critic AdamW learning rate (PPO). */
      lr: 1e-5,
      /** Critic AdamW weight decay. */
      weight_decay: 0.01,
      /** Critic AdamW moment decay rates. */
      betas: [0.9, 0.999],
      /** Critic AdamW epsilon. */
      eps: 1e-8,
      /** verl's schedule: warm-up steps (training steps); negative: lr_warmup_steps_ratio of the run. */
      lr_warmup_steps: -1,
      /** As the actor's. */
      lr_warmup_steps_ratio: 0.0,
      /** constant (after a linear warm-up) | cosine (to min_lr_ratio * lr at the last step). */
      lr_scheduler_type: choice('critic.optim.lr_scheduler_type', 'constant'),
      /** verl's deprecated name for lr_scheduler_type; wins when set. */
      warmup_style: null as string | null,
      /** As the actor's. */
      min_lr_ratio: 0.0,
      /** As the actor's. */
      num_cycles: 0.5,
      /** Filled in by the trainer with the run's training steps, as verl does. */
      total_training_steps: -1,
    },
    /** Prompts per critic optimizer step. */
    ppo_mini_batch_size: 8,
    /** Responses per critic forward/backward pass. */
    ppo_micro_batch_size: 16,
    /** Critic passes over each batch. */
    ppo_epochs: 1,
    /** Value clip around the old values. */
    cliprange_value: 0.5,
    /** Critic gradient-norm clip. */
    grad_clip: 1.0,
    /** As the actor's, for the value loss. */
    loss_agg_mode: choice('critic.loss_agg_mode', 'token-mean'),
    /** Steps that train only the critic before the actor starts. */
    warmup: 0,
  },
  algorithm: {
    /** ppo | grpo | reinforce_plus_plus | a plugin's algorithm. */
    name: 'grpo',
    /** null: the estimator the algorithm implies (ppo: gae, grpo: grpo, ...). */
    adv_estimator: null as string | null,
    /** Discount factor (GAE, REINFORCE++). */
    gamma: 1.0,
    /** GAE lambda. */
    lam: 1.0,
    /** GRPO: divide group-centred scores by the group's standard deviation. */
    norm_adv_by_std_in_grpo: true,
    /** Subtract a KL penalty from the token rewards (loads the reference policy). */
    use_kl_in_reward: false,
    /** The KL estimator of the KL-in-reward penalty (as kl_loss_type). */
    kl_penalty: choice('algorithm.kl_penalty', 'kl'),
    kl_ctrl: {
      /** fixed (kl_coef throughout) or adaptive (towards target_kl over horizon). */
      type: choice('algorithm.kl_ctrl.type', 'fixed'),
      /** KL-in-reward coefficient (the adaptive controller's start). */
      kl_coef: 0.001,
      /** Adaptive KL controller horizon. */
      horizon: 10000,
      /** Adaptive KL controller target. */
      target_kl: 0.1,
    },
    /** Off-policy correction for rollouts sampled by another engine (batches carrying rollout_log_probs). */
    rollout_correction: {
      /** Truncated importance sampling: each loss term weighs min(exp(old − rollout), tis_cap), a constant; null: off (metrics still logged). */
      tis_cap: 2 as number | null,
    },
  },
  reward_model: {
    /** How responses are scored: naive (each alone, by data_source). */
    reward_manager: choice('reward_model.reward_manager', 'naive'),
    /** Extra keyword options passed to the scorer of each data_source. */
    reward_kwargs: {} as Record<string, unknown>,
  },
  custom_reward_function: {
    /** A module with a verl-shaped scorer (data_source, solution, ground_truth, extra_info); null: by data_source. */
    path: null as string | null,
    /** The scorer's exported name in that module. */
    name: 'compute_score',
  },
  /** Supervised fine-tuning (flowrl sft) on data.train_files rows that carry a response. */
  sft: {
    /** Dotted path of the response text in each row. */
    response_key: 'extra_info.response',
    /** A config.json to initialise a new model from (random weights, seeded); null fine-tunes model.path. */
    init_config: null as string | null,
    /** Passes over the SFT rows. */
    epochs: 1,
    /** SFT optimizer steps; null: from epochs. */
    total_steps: null as number | null,
    /** SFT rows per optimizer step. */
    batch_size: 32,
    /** SFT learning rate. */
    lr: 1e-3,
    /** SFT AdamW weight decay. */
    weight_decay: 0.01,
    /** SFT linear warm-up steps. */
    warmup_steps: 0,
    /** constant, or cosine decay to min_lr_ratio * lr over the steps after warm-up. */
    lr_scheduler_type: choice('sft.lr_scheduler_type', 'constant'),
    /** SFT cosine schedule: the final lr as a share of lr. */
    min_lr_ratio: 0,
    /** SFT gradient-norm clip. */
    grad_clip: 1.0,
    /** Where the fine-tuned HF directory goes; null: <default_local_dir>/sft-model. */
    output_dir: null as string | null,
  },
  trainer: {
    /** Project name (metrics and reports). */
    project_name: 'flowrl',
    /** Run name: the default run directory is runs/<experiment_name>. */
    experiment_name: 'default',
    /** Passes over the training prompts (when total_training_steps is null). */
    total_epochs: 1,
    /** Training steps; null: from total_epochs. */
    total_training_steps: null as number | null,
    /** Validate every N steps and after the last one; -1 never (val_before_train is separate). */
    test_freq: -1,
    /** Checkpoint every N steps (and after the last); -1 only at the end. */
    save_freq: -1,
    /** Validate once before the first step. */
    val_before_train: true,
    /**
     * Validation also measures distribution matching over each prompt's correct responses
     * (val/matching/*): exactly over every correct answer where the task lists them (countdown),
     * else over the distinct correct samples. Loads the reference policy when the algorithm has none.
     */
    val_matching: true,
    /** Run directory: metrics.jsonl, config.yaml, checkpoints/. null: runs/<experiment_name>. */
    default_local_dir: null as string | null,
    /** auto (latest checkpoint if any) | disable | a global_step_N directory. */
    resume_mode: 'auto',
    /** Checkpoints kept on disk (oldest removed first); null keeps all. */
    max_checkpoints_to_keep: null as number | null,
    /** Seed of sampling, initialisation and (unless data.seed) the data order. */
    seed: 1,
    /** Console progress bar and summary lines. */
    progress: true,
  },
};

export type CoreConfig = typeof CORE_DEFAULTS;


/** Keys that accept either a single value or a list (verl allows both for data files). */
export const STRING_OR_LIST_KEYS = new Set(['data.train_files', 'data.val_files', 'plugins', 'actor_rollout_ref.model.target_modules', 'actor_rollout_ref.rollout.server.urls']);

/** Keys whose subtree is free-form (not validated key by key). */
export const OPEN_KEYS = new Set(['reward_model.reward_kwargs']);

/** Keys that take 'auto' or a whole number >= 1. */
export const AUTO_OR_COUNT_KEYS = new Set(['engine.workers']);

/** Keys that take a finite number > 0 or null. */
export const POSITIVE_OR_NULL_KEYS = new Set(['algorithm.rollout_correction.tis_cap']);

/** Keys that must be whole numbers >= 1 (sizes and counts the loop divides by). */
export const POSITIVE_INTEGER_KEYS = new Set([
  'data.train_batch_size',
  'data.val_max_samples',
  'data.max_prompt_length',
  'data.max_response_length',
  'actor_rollout_ref.actor.ppo_mini_batch_size',
  'actor_rollout_ref.actor.ppo_micro_batch_size',
  'actor_rollout_ref.actor.ppo_epochs',
  'actor_rollout_ref.ref.log_prob_micro_batch_size',
  'actor_rollout_ref.rollout.n',
  'actor_rollout_ref.rollout.log_prob_micro_batch_size',
  'actor_rollout_ref.rollout.generation_batch_size',
  'actor_rollout_ref.rollout.val_kwargs.n',
  'critic.ppo_mini_batch_size',
  'critic.ppo_micro_batch_size',
  'critic.ppo_epochs',
  'trainer.total_epochs',
  'trainer.total_training_steps',
  'trainer.max_checkpoints_to_keep',
  'sft.epochs',
  'sft.total_steps',
  'sft.batch_size',
]);
