"""Reference values from verl v0.9.0's own `verl/trainer/ppo/core_algos.py` (the oracle for FlowRL's ports).

This script holds hostile test corpora (built in code below with fixed seeds, float64) and, given a
copy of verl's source tree, runs every case through verl's functions and writes the fixtures the
TypeScript differential tests read:

    test/fixtures/verl-core-algos/advantages.json     every registered advantage estimator
    test/fixtures/verl-core-algos/policy-losses.json  every registered policy loss (+ gradient w.r.t. log_prob)
    test/fixtures/verl-core-algos/agg-loss.json       agg_loss, all modes, with and without global batch info
    test/fixtures/verl-core-algos/kl.json             kl_penalty / kl_penalty_forward (+ gradients), compute_rewards
    test/fixtures/verl-core-algos/misc.json           compute_value_loss, compute_entropy_loss, KL controllers

No verl code is kept in this repository; to rerun:

    git clone https://github.com/verl-project/verl /tmp/verl-src
    mkdir -p /tmp/verl-0.9.0
    git -C /tmp/verl-src archive v0.9.0 verl | tar -x -C /tmp/verl-0.9.0
    /usr/bin/python3 scripts/verl_core_algos_oracle.py --verl /tmp/verl-0.9.0

(run from the repository root; Debian's python3 3.11 with python3-torch 1.13, python3-numpy and
python3-omegaconf; takes a few seconds.)

verl is not installed: the files the losses need are loaded by path with importlib, under their
real module names (core_algos.py, utils/torch_functional.py, utils/groupwise.py, base_config.py,
trainer/config/algorithm.py and config.py, workers/config/actor.py and the config modules it
imports, utils/profiler/config.py, utils/qat/core.py, utils/import_utils.py,
trainer/ppo/rollout_corr_helper.py). verl's package __init__ files are NOT executed (they pull in
transformers, ray, tensordict...); the packages are empty module objects. Only imports that cannot
load here are replaced, each by a minimal stand-in that the computations never touch:
  - `tensordict.TensorDict`, `transformers.PreTrainedTokenizer` / `AutoConfig` (type annotations and
    unrelated helpers in torch_functional.py / model config), only when the real package is absent;
  - `verl.utils.device` (get_device_name() -> "cpu"; the functions used here are given explicit devices);
  - `verl.workers.config.model` (HFModelConfig/MtpConfig: field types of unrelated ActorConfig fields);
  - `verl.protocol.DataProto` (rollout_corr_helper only wraps the IS-weight tensor in it; the stand-in
    keeps the tensor and has verl's `len()` = batch size, which bypass_mode tests for truth).

Non-finite numbers are written as the strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers).
"""

import argparse
import importlib.util
import json
import math
import os
import sys
import types
import warnings
from dataclasses import dataclass

import numpy as np
import torch

# verl runs with torch's default dtype float32; it is left alone on purpose (GPG's alpha, for one,
# is an int/int true division that comes out in the default dtype). All corpus tensors are float64.
DT = torch.float64

# ---------------------------------------------------------------------------------------------
# Loading verl by path
# ---------------------------------------------------------------------------------------------


def _pkg(name):
    mod = types.ModuleType(name)
    mod.__path__ = []
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    return mod


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    spec.loader.exec_module(mod)
    return mod


def _stub_missing_third_party():
    try:
        import tensordict  # noqa: F401
    except ImportError:
        td = types.ModuleType("tensordict")

        class TensorDict(dict):
            pass

        td.TensorDict = TensorDict
        sys.modules["tensordict"] = td
    try:
        import transformers  # noqa: F401
    except ImportError:
        tf = types.ModuleType("transformers")

        class PreTrainedTokenizer:
            pass

        class AutoConfig:
            pass

        tf.PreTrainedTokenizer = PreTrainedTokenizer
        tf.AutoConfig = AutoConfig
        sys.modules["transformers"] = tf


class _DataProtoStandIn:
    """Holds what rollout_corr_helper puts in a DataProto (a dict of tensors)."""

    def __init__(self, tensors):
        self.batch = dict(tensors)

    @classmethod
    def from_dict(cls, tensors=None, **_):
        return cls(tensors or {})

    def __len__(self):  # verl's DataProto.__len__: batch size
        first = next(iter(self.batch.values()))
        return first.shape[0]


def load_verl(root):
    root = os.path.abspath(root)
    if os.path.isdir(os.path.join(root, "verl")):
        root = os.path.join(root, "verl")
    if not os.path.isfile(os.path.join(root, "trainer", "ppo", "core_algos.py")):
        sys.exit(f"--verl: no trainer/ppo/core_algos.py under {root}")
    p = lambda *parts: os.path.join(root, *parts)  # noqa: E731

    _stub_missing_third_party()
    for name in [
        "verl",
        "verl.utils",
        "verl.utils.profiler",
        "verl.utils.qat",
        "verl.trainer",
        "verl.trainer.config",
        "verl.trainer.ppo",
        "verl.workers",
        "verl.workers.config",
    ]:
        _pkg(name)

    device = types.ModuleType("verl.utils.device")
    device.get_device_name = lambda: "cpu"
    device.get_torch_device = lambda: torch.cuda
    device.is_npu_available = False
    device.is_cuda_available = False
    sys.modules["verl.utils.device"] = device
    sys.modules["verl.utils"].device = device

    protocol = types.ModuleType("verl.protocol")
    protocol.DataProto = _DataProtoStandIn
    sys.modules["verl.protocol"] = protocol

    _load("verl.base_config", p("base_config.py"))
    alg = _load("verl.trainer.config.algorithm", p("trainer", "config", "algorithm.py"))
    cfg = _load("verl.trainer.config.config", p("trainer", "config", "config.py"))
    tc = sys.modules["verl.trainer.config"]
    for mod in (alg, cfg):
        for k in getattr(mod, "__all__", []):
            setattr(tc, k, getattr(mod, k))

    prof = _load("verl.utils.profiler.config", p("utils", "profiler", "config.py"))
    sys.modules["verl.utils.profiler"].ProfilerConfig = prof.ProfilerConfig
    qat = _load("verl.utils.qat.core", p("utils", "qat", "core.py"))
    sys.modules["verl.utils.qat"].QATConfig = qat.QATConfig

    from verl.base_config import BaseConfig

    model = types.ModuleType("verl.workers.config.model")

    @dataclass
    class HFModelConfig(BaseConfig):
        pass

    @dataclass
    class MtpConfig(BaseConfig):
        pass

    model.HFModelConfig = HFModelConfig
    model.MtpConfig = MtpConfig
    sys.modules["verl.workers.config.model"] = model

    _load("verl.workers.config.optimizer", p("workers", "config", "optimizer.py"))
    _load("verl.workers.config.checkpoint", p("workers", "config", "checkpoint.py"))
    _load("verl.workers.config.engine", p("workers", "config", "engine.py"))
    actor = _load("verl.workers.config.actor", p("workers", "config", "actor.py"))
    wc = sys.modules["verl.workers.config"]
    for k in actor.__all__:
        setattr(wc, k, getattr(actor, k))

    _load("verl.utils.import_utils", p("utils", "import_utils.py"))
    tfn = _load("verl.utils.torch_functional", p("utils", "torch_functional.py"))
    gw = _load("verl.utils.groupwise", p("utils", "groupwise.py"))
    vu = sys.modules["verl.utils"]
    vu.as_torch_index = gw.as_torch_index
    vu.group_mean_std = gw.group_mean_std
    vu.torch_functional = tfn

    ca = _load("verl.trainer.ppo.core_algos", p("trainer", "ppo", "core_algos.py"))
    rch = _load("verl.trainer.ppo.rollout_corr_helper", p("trainer", "ppo", "rollout_corr_helper.py"))
    return types.SimpleNamespace(core_algos=ca, rch=rch, actor=actor, algorithm=alg, tf=tfn, groupwise=gw)


# ---------------------------------------------------------------------------------------------
# JSON helpers
# ---------------------------------------------------------------------------------------------


def _num(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def js(v):
    """Tensors, arrays and scalars to JSON-safe nested lists (non-finite numbers as strings)."""
    if isinstance(v, torch.Tensor):
        v = v.detach()
        if v.dtype == torch.bool:
            return v.tolist()
        if not v.dtype.is_floating_point:
            return v.tolist()
        return js(v.tolist())
    if isinstance(v, np.ndarray):
        return js(v.tolist())
    if isinstance(v, (list, tuple)):
        return [js(x) for x in v]
    if isinstance(v, dict):
        return {k: js(x) for k, x in v.items()}
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    return _num(v)


MASK_DTYPES = {"int64": torch.long, "bool": torch.bool, "float64": torch.float64}


def t(x):
    return torch.tensor(x, dtype=DT)


def err_text(e):
    return f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------------------------
# Corpus building blocks
# ---------------------------------------------------------------------------------------------


def prefix_mask(lengths, T):
    return t([[1.0 if j < n else 0.0 for j in range(T)] for n in lengths])


def outcome_rewards(mask, scores):
    """verl's usual layout: the scalar reward on the last valid token, zeros elsewhere."""
    r = torch.zeros_like(mask)
    for i, s in enumerate(scores):
        valid = torch.nonzero(mask[i]).flatten()
        if len(valid):
            r[i, valid[-1]] = s
    return r


def rnd(gen, shape, scale=1.0, loc=0.0, decimals=4):
    return t(np.round(gen.normal(loc, scale, size=shape), decimals))


def uni(gen, shape, lo, hi, decimals=4):
    return t(np.round(gen.uniform(lo, hi, size=shape), decimals))


def build_advantage_batches():
    """Named batches: (inputs dict, note). Indices are verl-style uid strings (object arrays)."""
    g = np.random.default_rng(20240901)
    batches = {}

    # 1. Outcome rewards on the last valid token; groups of mixed sizes (interleaved), a singleton,
    #    an all-equal group, a group holding a length-1 row and an all-masked row.
    T = 6
    lengths = [6, 3, 6, 1, 4, 6, 2, 0, 5, 6, 3, 6]
    index = ["a", "b", "a", "c", "a", "b", "d", "d", "a", "e", "e", "b"]
    scores = [1.0, 0.5, -0.25, 2.0, 0.75, 0.5, 1.5, 0.0, 0.0, 0.3, 0.3, 0.5]
    m = prefix_mask(lengths, T)
    batches["outcome_mixed"] = dict(
        note="outcome reward on the last valid token; groups a(4) b(3, all scores equal) c(singleton) "
        "d(2: length-2 row + all-masked row, score 0) e(2, equal); lengths include 1 and 0",
        response_mask=m,
        token_level_rewards=outcome_rewards(m, scores),
        index=index,
    )

    # 2. Dense random rewards everywhere (including masked positions: verl sums ALL T positions),
    #    masks with holes (multi-turn observation spans), non-contiguous groups.
    T = 7
    B = 9
    m = t(
        [
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 0, 0, 1, 1, 0],
            [1, 0, 0, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 1, 1],
            [0, 0, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 1, 0],
            [0, 1, 0, 1, 0, 1, 0],
            [1, 1, 1, 1, 1, 0, 0],
        ]
    )
    batches["dense_holes"] = dict(
        note="dense N(0,1) rewards at every position incl. masked ones; masks with holes; groups x(3) y(2) z(1) w(3)",
        response_mask=m,
        token_level_rewards=rnd(g, (B, T)),
        index=["x", "y", "x", "z", "w", "y", "w", "x", "w"],
    )

    # 3. Binary outcome rewards, groups of 4: mixed, all zero, all one, one success.
    T = 4
    lengths = [4, 2, 3, 1, 4, 4, 2, 3, 1, 4, 3, 2, 4, 1, 2, 3]
    scores = [1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0]
    m = prefix_mask(lengths, T)
    batches["binary_groups4"] = dict(
        note="0/1 outcome rewards, 4 groups of 4: mixed, all-zero, all-one, single success",
        response_mask=m,
        token_level_rewards=outcome_rewards(m, [float(s) for s in scores]),
        index=[f"p{i // 4}" for i in range(16)],
    )

    # 4. Large scores with small spread (cancellation), one group with ties at the top.
    T = 3
    m = prefix_mask([3, 3, 2, 3, 1, 3], T)
    base = [1000.0001, 1000.0002, 999.9999, 1234.5, 1234.5, 1234.25]
    batches["large_scores"] = dict(
        note="scores near 1e3 differing in the 4th decimal (cancellation); group q has a tie at the top",
        response_mask=m,
        token_level_rewards=outcome_rewards(m, base),
        index=["p", "p", "p", "q", "q", "q"],
    )
    return batches


def add_ppo_extras(batches):
    """values, reward baselines, old log-probs, sum pi^2 and IS weights for each batch."""
    g = np.random.default_rng(7)
    for b in batches.values():
        B, T = b["response_mask"].shape
        b["values"] = rnd(g, (B, T), scale=0.8)
        b["reward_baselines"] = rnd(g, (B,), scale=0.5)
        old = uni(g, (B, T), -6.0, -0.001)
        pi = torch.exp(old)
        # sum_v pi_v^2 >= pi_t^2 and <= 1: pi^2 + u*(1-pi)^2 with u in [0, 1]
        u = uni(g, (B, T), 0.0, 1.0)
        b["old_log_probs"] = old
        b["sum_pi_squared"] = pi * pi + u * (1 - pi) * (1 - pi)
        b["rollout_is_weights"] = uni(g, (B, T), 0.3, 2.0)
    return batches


# ---------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------


def run_advantages(V):
    ca = V.core_algos
    AlgoConfig = V.algorithm.AlgoConfig
    batches = add_ppo_extras(build_advantage_batches())
    cases = []

    def idx(b):
        return np.array(b["index"], dtype=object)

    def call(name, batch_name, fn_name, kwargs_desc, make_kwargs, config=None, note="", mask_dtype="int64"):
        b = dict(batches[batch_name])
        b["response_mask"] = b["response_mask"].to(MASK_DTYPES[mask_dtype])
        case = {"name": name, "estimator": fn_name, "input": batch_name, "mask_dtype": mask_dtype, "args": kwargs_desc}
        if config is not None:
            case["config"] = config
        if note:
            case["note"] = note
        fn = ca.get_adv_estimator_fn(fn_name)
        try:
            adv, ret = fn(**make_kwargs(b))
            case["advantages"] = js(adv)
            case["returns"] = js(ret)
            case["dtype"] = str(adv.dtype).replace("torch.", "")
        except Exception as e:  # noqa: BLE001
            case["error"] = err_text(e)
        cases.append(case)

    names = list(batches)
    for bn in names:
        # gae: called by the trainer with gamma/lam keyword arguments
        for gamma, lam in [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0), (0.0, 1.0)]:
            call(
                f"gae/{bn}/gamma={gamma},lam={lam}",
                bn,
                "gae",
                {"gamma": gamma, "lam": lam},
                lambda b, gamma=gamma, lam=lam: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    values=b["values"].clone(),
                    response_mask=b["response_mask"].clone(),
                    gamma=gamma,
                    lam=lam,
                ),
            )
        for est in ["grpo", "grpo_vectorized"]:
            for norm in [True, False]:
                call(
                    f"{est}/{bn}/norm_adv_by_std_in_grpo={norm}",
                    bn,
                    est,
                    {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6},
                    lambda b, norm=norm: dict(
                        token_level_rewards=b["token_level_rewards"].clone(),
                        response_mask=b["response_mask"].clone(),
                        index=idx(b),
                        norm_adv_by_std_in_grpo=norm,
                    ),
                )
        call(
            f"grpo/{bn}/epsilon=0.01",
            bn,
            "grpo",
            {"norm_adv_by_std_in_grpo": True, "epsilon": 0.01},
            lambda b: dict(
                token_level_rewards=b["token_level_rewards"].clone(),
                response_mask=b["response_mask"].clone(),
                index=idx(b),
                epsilon=0.01,
            ),
        )
        # gdpo without per-key scores (config/non_tensor_batch/batch absent): falls back to token_level_rewards
        for norm in [True, False]:
            call(
                f"gdpo/{bn}/fallback/norm_adv_by_std_in_grpo={norm}",
                bn,
                "gdpo",
                {"norm_adv_by_std_in_grpo": norm, "epsilon": 1e-6},
                lambda b, norm=norm: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    response_mask=b["response_mask"].clone(),
                    index=idx(b),
                    norm_adv_by_std_in_grpo=norm,
                ),
                note="config/non_tensor_batch/batch not given: GRPO on token_level_rewards, then masked_whiten * mask",
            )
        for norm in [True, False]:
            call(
                f"grpo_passk/{bn}/norm_adv_by_std_in_grpo={norm}",
                bn,
                "grpo_passk",
                {"epsilon": 1e-6},
                lambda b, norm=norm: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    response_mask=b["response_mask"].clone(),
                    index=idx(b),
                    config=AlgoConfig(norm_adv_by_std_in_grpo=norm),
                ),
                config={"norm_adv_by_std_in_grpo": norm},
            )
        for est in ["reinforce_plus_plus_baseline", "rloo", "rloo_vectorized", "opo", "gpg"]:
            call(
                f"{est}/{bn}",
                bn,
                est,
                {},
                lambda b: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    response_mask=b["response_mask"].clone(),
                    index=idx(b),
                    config=AlgoConfig(),
                ),
                config={},
            )
        for gamma in [1.0, 0.9, 0.0]:
            call(
                f"reinforce_plus_plus/{bn}/gamma={gamma}",
                bn,
                "reinforce_plus_plus",
                {},
                lambda b, gamma=gamma: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    response_mask=b["response_mask"].clone(),
                    config=AlgoConfig(gamma=gamma),
                ),
                config={"gamma": gamma},
            )
        call(
            f"remax/{bn}",
            bn,
            "remax",
            {"uses": ["reward_baselines"]},
            lambda b: dict(
                token_level_rewards=b["token_level_rewards"].clone(),
                reward_baselines=b["reward_baselines"].clone(),
                response_mask=b["response_mask"].clone(),
                config=AlgoConfig(),
            ),
            config={},
        )
        for est in ["optimal_token_baseline", "tir_optimal_token_baseline"]:
            for use_is in [False, True]:
                for tail in [True, False]:
                    call(
                        f"{est}/{bn}/is={use_is}/handle_zero_tail={tail}",
                        bn,
                        est,
                        {
                            "uses": ["old_log_probs", "sum_pi_squared"] + (["rollout_is_weights"] if use_is else []),
                            "handle_zero_tail": tail,
                            "epsilon": 1e-8,
                        },
                        lambda b, use_is=use_is, tail=tail: dict(
                            token_level_rewards=b["token_level_rewards"].clone(),
                            response_mask=b["response_mask"].clone(),
                            index=idx(b),
                            old_log_probs=b["old_log_probs"].clone(),
                            sum_pi_squared=b["sum_pi_squared"].clone(),
                            rollout_is_weights=b["rollout_is_weights"].clone() if use_is else None,
                            handle_zero_tail=tail,
                            config=AlgoConfig(),
                        ),
                        config={},
                    )

    # The same estimators with a float64 mask: where verl adds 1e-8 to a mask count (masked_mean) or
    # divides counts (masked_var's Bessel factor), an integer mask makes that arithmetic float32.
    for bn in names:
        for est in ["reinforce_plus_plus_baseline", "gdpo"]:
            call(
                f"{est}/{bn}/float64-mask",
                bn,
                est,
                {},
                lambda b: dict(
                    token_level_rewards=b["token_level_rewards"].clone(),
                    response_mask=b["response_mask"].clone(),
                    index=idx(b),
                ),
                mask_dtype="float64",
            )
        call(
            f"reinforce_plus_plus/{bn}/gamma=0.9/float64-mask",
            bn,
            "reinforce_plus_plus",
            {},
            lambda b: dict(
                token_level_rewards=b["token_level_rewards"].clone(),
                response_mask=b["response_mask"].clone(),
                config=AlgoConfig(gamma=0.9),
            ),
            config={"gamma": 0.9},
            mask_dtype="float64",
        )
        call(
            f"gae/{bn}/gamma=0.99,lam=0.95/float64-mask",
            bn,
            "gae",
            {"gamma": 0.99, "lam": 0.95},
            lambda b: dict(
                token_level_rewards=b["token_level_rewards"].clone(),
                values=b["values"].clone(),
                response_mask=b["response_mask"].clone(),
                gamma=0.99,
                lam=0.95,
            ),
            mask_dtype="float64",
        )

    # gdpo with per-dimension scores (the trainer path): needs config.gdpo_reward_keys, non_tensor_batch, batch
    g = np.random.default_rng(99)
    for bn in ["outcome_mixed", "binary_groups4"]:
        b = batches[bn]
        B, T = b["response_mask"].shape
        P = 3
        prompts = torch.ones((B, P), dtype=torch.long)
        attn = torch.cat([torch.ones((B, P), dtype=torch.long), b["response_mask"].long()], dim=1)
        fmt = np.round(g.choice([0.0, 0.5, 1.0], size=B), 4)
        acc = np.round(g.choice([0.0, 1.0], size=B), 4)
        acc[0:2] = [1.0, 1.0]
        b["gdpo_batch"] = {"prompts_width": P, "attention_mask": attn}
        b["gdpo_scores"] = {"format_reward": fmt, "accuracy_reward": acc}
        for weights in [None, [0.3, 1.5]]:
            for norm in [True, False]:
                cfg = {"gdpo_reward_keys": ["format_reward", "accuracy_reward"], "gdpo_reward_weights": weights}
                call(
                    f"gdpo/{bn}/keys/weights={weights}/norm_adv_by_std_in_grpo={norm}",
                    bn,
                    "gdpo",
                    {
                        "norm_adv_by_std_in_grpo": norm,
                        "epsilon": 1e-6,
                        "uses": ["gdpo_batch", "gdpo_scores"],
                    },
                    lambda b, weights=weights, norm=norm, P=P, prompts=prompts, attn=attn, fmt=fmt, acc=acc: dict(
                        token_level_rewards=b["token_level_rewards"].clone(),
                        response_mask=b["response_mask"].clone(),
                        index=idx(b),
                        norm_adv_by_std_in_grpo=norm,
                        config=AlgoConfig(
                            gdpo_reward_keys=["format_reward", "accuracy_reward"], gdpo_reward_weights=weights
                        ),
                        non_tensor_batch={"format_reward": fmt, "accuracy_reward": acc, "uid": idx(b)},
                        batch={"prompts": prompts, "attention_mask": attn},
                    ),
                    config=cfg,
                    note="per-key float32 scores placed at column attention_mask[:, P:].sum(1) - 1 of each row",
                )

    inputs = {}
    for bn, b in batches.items():
        d = {k: js(v) for k, v in b.items() if k not in ("gdpo_batch", "gdpo_scores")}
        if "gdpo_batch" in b:
            d["gdpo_batch"] = {
                "prompts_width": b["gdpo_batch"]["prompts_width"],
                "attention_mask": js(b["gdpo_batch"]["attention_mask"]),
            }
            d["gdpo_scores"] = js(b["gdpo_scores"])
        inputs[bn] = d
    return {"inputs": inputs, "cases": cases}


# ---------------------------------------------------------------------------------------------
# Policy losses
# ---------------------------------------------------------------------------------------------

AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
GLOBAL_INFO = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 12, "loss_scale_factor": 10}


def build_loss_batches():
    g = np.random.default_rng(31337)
    batches = {}

    # 1. token-level advantages, ratios spanning clip edges, the +-20 clamp, dual clip; an all-masked row
    B, T = 8, 6
    lengths = [6, 4, 1, 0, 6, 3, 5, 2]
    mask = prefix_mask(lengths, T)
    old = uni(g, (B, T), -5.0, -0.05)
    deltas = np.array([0.0, 0.05, -0.05, 0.15, -0.15, np.log(1.2), np.log(0.8), 0.3, -0.3, 0.7, -0.7, 1.2, 2.0, -2.0])
    d = t(np.round(g.choice(deltas, size=(B, T)), 6))
    d[0, 0] = float(np.log(1.2))  # ratio at the upper clip edge (up to rounding of exp/log)
    d[0, 2] = float(np.log(0.8))
    new = old + d
    new = torch.where(new > 0, old - d.abs(), new)
    # clamp edges (|log ratio| > 20 and exactly 20)
    old[0, 1], new[0, 1] = -30.0, -4.0
    old[4, 2], new[4, 2] = -1.0, -26.0
    old[4, 5], new[4, 5] = -21.0, -1.0
    old[1, 5], new[1, 5] = -40.0, -0.5  # a huge ratio at a masked position
    adv = rnd(g, (B, T), scale=1.5)
    adv[2, 0] = 0.0
    adv[0, 3] = 0.0
    adv[4, 0], adv[4, 1] = -3.0, 2.5
    old[4, 0], new[4, 0] = -2.0, -0.5  # ratio e^1.5 = 4.48 > clip_ratio_c with A = -3: dual clip
    batches["token_adv"] = dict(
        note="token-level advantages (some exactly 0); log ratios 0, +-0.05, +-0.15, log 1.2, log 0.8, +-0.3, +-0.7, "
        "1.2, +-2, 26, -25, exactly 20, 39.5 at a masked position; dual-clip token; row 3 all-masked, row 2 length 1",
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=mask,
        rollout_is_weights=uni(g, (B, T), 0.2, 2.5),
    )

    # 2. sequence-level advantages (GRPO-like: one value per row), moderate ratios
    B, T = 6, 5
    lengths = [5, 5, 2, 1, 5, 3]
    mask = prefix_mask(lengths, T)
    old = uni(g, (B, T), -4.0, -0.02)
    new = old + rnd(g, (B, T), scale=0.25)
    new = torch.clamp(new, max=-1e-4)
    row_adv = [1.2, -0.8, 0.0, 2.0, -1.5, 0.4]
    adv = t([[a] * T for a in row_adv]) * mask
    batches["seq_adv"] = dict(
        note="sequence-level advantages (GRPO-like, zero outside the mask), one row with advantage 0",
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=mask,
        rollout_is_weights=uni(g, (B, T), 0.5, 1.5),
    )

    # 3. probabilities near 1 (DPPO's p - p_old and binary KL matter here)
    B, T = 5, 4
    mask = prefix_mask([4, 4, 3, 2, 4], T)
    p_old = uni(g, (B, T), 0.3, 0.999)
    p_new = torch.clamp(p_old + rnd(g, (B, T), scale=0.25), 0.01, 0.9999)
    adv = rnd(g, (B, T), scale=1.0)
    adv[1, 1] = 0.0
    batches["high_prob"] = dict(
        note="token probabilities 0.3..0.9999 moved by N(0, 0.25) (clamped to [0.01, 0.9999]): DPPO's TV and binary-KL masks",
        old_log_prob=torch.log(p_old),
        log_prob=torch.log(p_new),
        advantages=adv,
        response_mask=mask,
        rollout_is_weights=uni(g, (B, T), 0.5, 1.5),
    )
    return batches


LOSS_CONFIGS = {
    "vanilla": [
        {},
        {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28},
        {"clip_ratio": 0.1, "clip_ratio_low": None, "clip_ratio_high": None},
        {"clip_ratio_c": 10.0},
    ],
    "dppo_tv": [{}, {"clip_ratio": 0.15, "clip_ratio_low": 0.05, "clip_ratio_high": 0.15, "clip_ratio_c": 20.0}],
    "dppo_kl": [{}, {"clip_ratio": 0.05, "clip_ratio_low": 0.02, "clip_ratio_high": 0.05, "clip_ratio_c": 20.0}],
    "gspo": [{}, {"clip_ratio_low": 0.0003, "clip_ratio_high": 0.0004}],
    "sapo": [{}, {"tau_pos": 2.0, "tau_neg": 4.0}],
    "gpg": [{}],
    "clip_cov": [
        {},
        {"policy_loss": {"clip_cov_ratio": 0.2, "clip_cov_lb": -10.0, "clip_cov_ub": 10.0}},
        {"policy_loss": {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.0, "clip_cov_ub": 5.0}},
    ],
    "kl_cov": [
        {},
        {"policy_loss": {"kl_cov_ratio": 0.1, "ppo_kl_coef": 1.0}},
        {"policy_loss": {"kl_cov_ratio": 0.5, "ppo_kl_coef": 0.1}},
    ],
    "geo_mean": [{}, {"clip_ratio_low": 0.4, "clip_ratio_high": 0.4}],
    "dro": [{"policy_loss": {"dro_beta": 0.1}}, {"policy_loss": {"dro_beta": 1.0}}, {"policy_loss": {"dro_beta": None}}],
    "cispo": [{}, {"clip_ratio_low": 10.0, "clip_ratio_high": 0.28}],
    "bypass_mode": [
        {"policy_loss": {"rollout_correction": {"rollout_is": None, "rollout_rs": None, "loss_type": "ppo_clip"}}},
        {
            "policy_loss": {
                "rollout_correction": {
                    "rollout_is": None,
                    "rollout_rs": "seq_mean_k3",
                    "rollout_rs_threshold": 0.01,
                    "loss_type": "ppo_clip",
                }
            }
        },
        {"policy_loss": {"rollout_correction": {}}},
        {
            "policy_loss": {
                "rollout_correction": {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "loss_type": "reinforce"}
            }
        },
        {
            "policy_loss": {
                "rollout_correction": {"rollout_is": "token", "rollout_is_threshold": "0.5_5.0", "loss_type": "reinforce"}
            }
        },
        {
            "policy_loss": {
                "rollout_correction": {
                    "rollout_is": "token",
                    "rollout_is_threshold": 2.0,
                    "rollout_is_batch_normalize": True,
                    "rollout_rs": "token_k1",
                    "rollout_rs_threshold": "0.5_2.0",
                    "loss_type": "reinforce",
                }
            }
        },
        {
            "policy_loss": {
                "rollout_correction": {
                    "rollout_is": "sequence",
                    "rollout_is_threshold": 5.0,
                    "rollout_is_batch_normalize": True,
                    "rollout_rs": "seq_sum_k1,seq_max_k2",
                    "rollout_rs_threshold": "0.2_5.0,2.0",
                    "loss_type": "reinforce",
                }
            }
        },
    ],
}

ACTOR_KEYS = ["clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "tau_pos", "tau_neg", "loss_agg_mode"]
POLICY_LOSS_KEYS = ["loss_mode", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta"]
RC_KEYS = [
    "rollout_is",
    "rollout_is_threshold",
    "rollout_is_batch_normalize",
    "rollout_rs",
    "rollout_rs_threshold",
    "bypass_mode",
    "loss_type",
]


def make_actor_config(V, loss_mode, spec, loss_agg_mode, global_batch_info):
    spec = dict(spec)
    pl = dict(spec.pop("policy_loss", {}))
    rc = pl.pop("rollout_correction", None)
    RolloutCorrectionConfig = V.algorithm.RolloutCorrectionConfig
    pl_kwargs = dict(pl, loss_mode=loss_mode)
    if rc is not None:
        pl_kwargs["rollout_correction"] = RolloutCorrectionConfig(**rc)
    cfg = V.actor.ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=loss_agg_mode,
        global_batch_info=dict(global_batch_info),
        policy_loss=V.actor.PolicyLossConfig(**pl_kwargs),
        **spec,
    )
    rec = {k: getattr(cfg, k) for k in ACTOR_KEYS}
    rec["global_batch_info"] = dict(global_batch_info)
    rec["policy_loss"] = {k: getattr(cfg.policy_loss, k) for k in POLICY_LOSS_KEYS}
    rcfg = cfg.policy_loss.rollout_correction
    rec["policy_loss"]["rollout_correction"] = {k: getattr(rcfg, k) for k in RC_KEYS}
    return cfg, rec


class RandpermRecorder:
    """Wraps torch.randperm to record what clip_cov drew (its only source of randomness)."""

    def __init__(self):
        self.calls = []
        self._orig = None

    def __enter__(self):
        self._orig = torch.randperm

        def wrapped(n, *a, **k):
            out = self._orig(n, *a, **k)
            self.calls.append((int(n), out.tolist()))
            return out

        torch.randperm = wrapped
        return self

    def __exit__(self, *exc):
        torch.randperm = self._orig


def clip_cov_candidates(b, cfg, mask_f):
    """The token set clip_cov draws from, per the notes (an independent restatement, used only to
    name the tokens behind verl's recorded randperm draw; checked against verl's count)."""
    old, lp, A = b["old_log_prob"], b["log_prob"], b["advantages"]
    low = cfg.clip_ratio_low if cfg.clip_ratio_low is not None else cfg.clip_ratio
    high = cfg.clip_ratio_high if cfg.clip_ratio_high is not None else cfg.clip_ratio
    lb = cfg.policy_loss.clip_cov_lb if cfg.policy_loss.clip_cov_lb is not None else 1.0
    ub = cfg.policy_loss.clip_cov_ub if cfg.policy_loss.clip_cov_ub is not None else 5.0
    r = torch.exp(lp - old)
    l1 = -A * r
    l2 = -A * torch.clamp(r, 1 - low, 1 + high)
    valid = mask_f > 0
    n = mask_f.sum()
    ma = (A * mask_f).sum() / (n + 1e-8)
    ml = (lp * mask_f).sum() / (n + 1e-8)
    cov = (A - ma) * (lp - ml)
    out = []
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            if valid[i, j] and not (l2[i, j] > l1[i, j]) and lb < cov[i, j] < ub:
                out.append([i, j])
    return out


def run_policy_losses(V):
    ca = V.core_algos
    batches = build_loss_batches()
    cases = []
    seed_counter = [1000]

    def one(name, loss_mode, bn, spec, mode, gbi, use_is, mask_dtype="bool", note=""):
        b = batches[bn]
        case = {
            "name": name,
            "loss_mode": loss_mode,
            "input": bn,
            "loss_agg_mode": mode,
            "mask_dtype": mask_dtype,
            "rollout_is_weights": bool(use_is),
        }
        if note:
            case["note"] = note
        try:
            cfg, rec = make_actor_config(V, loss_mode, spec, mode, gbi)
        except Exception as e:  # noqa: BLE001
            case["config_error"] = err_text(e)
            cases.append(case)
            return
        case["config"] = rec
        lp = b["log_prob"].clone().requires_grad_(True)
        mask = b["response_mask"].to(MASK_DTYPES[mask_dtype])
        fn = ca.get_policy_loss_fn(loss_mode)
        seed = seed_counter[0]
        seed_counter[0] += 1
        try:
            with RandpermRecorder() as rp:
                torch.manual_seed(seed)
                loss, metrics = fn(
                    old_log_prob=b["old_log_prob"].clone(),
                    log_prob=lp,
                    advantages=b["advantages"].clone(),
                    response_mask=mask,
                    loss_agg_mode=mode,
                    config=cfg,
                    rollout_is_weights=b["rollout_is_weights"].clone() if use_is else None,
                )
            loss.backward()
            case["loss"] = js(loss)
            case["grad_log_prob"] = js(lp.grad if lp.grad is not None else torch.zeros_like(lp))
            case["metrics"] = js(metrics)
            if loss_mode == "clip_cov":
                case["torch_seed"] = seed
                cand = clip_cov_candidates(b, cfg, b["response_mask"])
                n_valid = int(b["response_mask"].sum().item())
                ratio = cfg.policy_loss.clip_cov_ratio if cfg.policy_loss.clip_cov_ratio is not None else 0.0002
                clip_num = max(int(ratio * n_valid), 1)
                if rp.calls:
                    (n, perm), = rp.calls
                    assert n == len(cand), (name, n, len(cand))
                    sel = [cand[k] for k in perm[: min(clip_num, n)]]
                    case["randperm"] = perm
                else:
                    assert not cand, name
                    sel = []
                case["clip_cov_candidates"] = cand
                case["clip_cov_selected"] = sorted(sel)
                case["clip_num"] = clip_num
                frac = len(sel) / (n_valid + 1e-8)
                assert abs(frac - metrics["actor/pg_clipfrac"]) < 1e-6, (name, frac, metrics)
        except Exception as e:  # noqa: BLE001
            case["error"] = err_text(e)
        cases.append(case)

    for loss_mode, specs in LOSS_CONFIGS.items():
        for bn in batches:
            for mode in AGG_MODES:
                one(f"{loss_mode}/{bn}/cfg0/{mode}", loss_mode, bn, specs[0], mode, {}, False)
        for ci, spec in enumerate(specs):
            for bn in batches:
                for use_is in ([False, True] if loss_mode != "bypass_mode" else [False]):
                    if ci == 0 and not use_is:
                        continue
                    one(f"{loss_mode}/{bn}/cfg{ci}/token-mean/is={use_is}", loss_mode, bn, spec, "token-mean", {}, use_is)
            if ci > 0:
                one(f"{loss_mode}/token_adv/cfg{ci}/seq-mean-token-sum-norm", loss_mode, "token_adv", spec,
                    "seq-mean-token-sum-norm", {}, False)
        for mode in AGG_MODES:
            one(f"{loss_mode}/token_adv/cfg0/{mode}/global_batch_info", loss_mode, "token_adv", specs[0], mode,
                GLOBAL_INFO, False)
        for mode in ["token-mean", "seq-mean-token-mean"]:
            one(f"{loss_mode}/token_adv/cfg0/{mode}/float64-mask", loss_mode, "token_adv", specs[0], mode, {}, False,
                mask_dtype="float64")

    # clip_cov is random: the same configuration under several seeds
    for ci, spec in enumerate(LOSS_CONFIGS["clip_cov"][:2]):
        for rep in range(3):
            one(f"clip_cov/token_adv/cfg{ci}/token-mean/seed-rep{rep}", "clip_cov", "token_adv", spec, "token-mean", {},
                False, note="same inputs, another torch seed: a different random selection")

    # compute_policy_loss_reinforce (not registered; bypass_mode's REINFORCE branch) and the deprecated
    # compute_policy_loss (vanilla without a config object)
    extra = []
    for bn, b in batches.items():
        for use_is in [False, True]:
            for mode in ["token-mean", "seq-mean-token-sum"]:
                cfg, rec = make_actor_config(V, "vanilla", {}, mode, {})
                lp = b["log_prob"].clone().requires_grad_(True)
                c = {"name": f"compute_policy_loss_reinforce/{bn}/{mode}/is={use_is}", "function": "compute_policy_loss_reinforce",
                     "input": bn, "loss_agg_mode": mode, "mask_dtype": "bool", "rollout_is_weights": use_is,
                     "config": rec}
                loss, metrics = ca.compute_policy_loss_reinforce(
                    rollout_log_prob=b["old_log_prob"].clone(), log_prob=lp, advantages=b["advantages"].clone(),
                    response_mask=b["response_mask"].bool(), loss_agg_mode=mode, config=cfg,
                    rollout_is_weights=b["rollout_is_weights"].clone() if use_is else None)
                loss.backward()
                c.update(loss=js(loss), grad_log_prob=js(lp.grad), metrics=js(metrics))
                extra.append(c)
        for (cr, crl, crh, crc) in [(0.2, None, None, 3.0), (0.2, 0.1, 0.3, 5.0)]:
            lp = b["log_prob"].clone().requires_grad_(True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = ca.compute_policy_loss(b["old_log_prob"].clone(), lp, b["advantages"].clone(),
                                             b["response_mask"].bool(), cliprange=cr, cliprange_low=crl,
                                             cliprange_high=crh, clip_ratio_c=crc, loss_agg_mode="token-mean")
            out[0].backward()
            extra.append({"name": f"compute_policy_loss/{bn}/cliprange={cr},{crl},{crh},c={crc}",
                          "function": "compute_policy_loss", "input": bn, "loss_agg_mode": "token-mean",
                          "mask_dtype": "bool", "args": {"cliprange": cr, "cliprange_low": crl,
                                                          "cliprange_high": crh, "clip_ratio_c": crc},
                          "loss": js(out[0]), "grad_log_prob": js(lp.grad),
                          "metrics": {"pg_clipfrac": js(out[1]), "ppo_kl": js(out[2]), "pg_clipfrac_lower": js(out[3])}})

    inputs = {bn: {k: js(v) for k, v in b.items()} for bn, b in batches.items()}
    return {"inputs": inputs, "cases": cases, "other_functions": extra}


# ---------------------------------------------------------------------------------------------
# agg_loss
# ---------------------------------------------------------------------------------------------


def run_agg_loss(V):
    ca = V.core_algos
    g = np.random.default_rng(4242)
    inputs = {}
    B, T = 7, 5
    mask = prefix_mask([5, 3, 1, 0, 5, 2, 4], T)
    inputs["ragged"] = dict(note="lengths 5,3,1,0,5,2,4 (row 3 all-masked)", loss_mat=rnd(g, (B, T), 2.0), loss_mask=mask)
    lm = rnd(g, (B, T), 2.0)
    lm[1, 4] = float("nan")
    lm[5, 3] = float("inf")
    inputs["nonfinite_masked"] = dict(
        note="NaN and +inf at MASKED positions: masked_sum zeroes them, the seq-mean modes multiply by the mask (NaN)",
        loss_mat=lm,
        loss_mask=mask,
    )
    inputs["all_masked"] = dict(note="no valid token at all", loss_mat=rnd(g, (3, 4)), loss_mask=torch.zeros((3, 4), dtype=DT))
    m2 = t([[1, 0, 1, 1, 0, 1], [0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 1, 1]])
    inputs["holes"] = dict(note="masks with holes", loss_mat=rnd(g, (3, 6), 1.0, 3.0), loss_mask=m2)

    infos = [
        ("none", {}),
        ("dp1_explicit", {"dp_size": 1, "batch_num_tokens": 23, "global_batch_size": 9}),
        ("dp2", {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 12}),
        ("dp2_scale", {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 12, "loss_scale_factor": 10}),
        ("dp2_missing", {"dp_size": 2}),
        ("scale_only", {"loss_scale_factor": 3}),
    ]
    cases = []
    for name, inp in inputs.items():
        for info_name, info in infos:
            for mode in AGG_MODES + ["seq-mean-token-max"]:
                if mode == "seq-mean-token-max" and info_name != "none":
                    continue
                for mdt in ["bool", "int64", "float64"]:
                    if mdt != "bool" and info_name not in ("none",):
                        continue
                    c = {"name": f"{name}/{info_name}/{mode}/{mdt}", "input": name, "loss_agg_mode": mode,
                         "mask_dtype": mdt, "kwargs": info}
                    lmat = inp["loss_mat"].clone().requires_grad_(True)
                    try:
                        out = ca.agg_loss(lmat, inp["loss_mask"].to(MASK_DTYPES[mdt]), mode, **info)
                        c["loss"] = js(out)
                        out.backward()
                        c["grad_loss_mat"] = js(lmat.grad)
                    except Exception as e:  # noqa: BLE001
                        c["error"] = err_text(e)
                    cases.append(c)
    return {"inputs": {k: {kk: js(vv) for kk, vv in v.items()} for k, v in inputs.items()}, "cases": cases}


# ---------------------------------------------------------------------------------------------
# KL
# ---------------------------------------------------------------------------------------------

KL_NAMES = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"]


def run_kl(V):
    ca = V.core_algos
    g = np.random.default_rng(2718)
    # hand-picked pairs (logprob, ref): differences 0, +-1e-3, moderate, around the k3 +10 value clamp
    # (ref - lp ~ 2.53..2.62), the +-20 input clamp (exactly 20 and beyond), huge negative
    pairs = [
        (-1.0, -1.0), (-0.5, -0.501), (-0.501, -0.5), (-2.0, -1.0), (-1.0, -2.0), (-3.0, -0.47), (-3.0, -0.38),
        (-2.62, 0.0), (-0.1, -12.5), (-21.0, -1.0), (-1.0, -21.0), (-25.0, -0.5), (-0.5, -25.0), (-30.0, -9.0),
        (-1e-8, -2e-8), (-7.25, -7.25), (-0.2, -0.9), (-4.0, -1.0),
    ]
    lp = t([[a for a, _ in pairs[:9]], [a for a, _ in pairs[9:]]])
    ref = t([[b for _, b in pairs[:9]], [b for _, b in pairs[9:]]])
    inputs = {
        "edges": dict(note="hand-picked: ties, +-1e-3, the k3 value clamp at 10, the +-20 input clamp, tiny values",
                      logprob=lp, ref_logprob=ref),
        "random": dict(note="uniform log-probs in [-8, 0]", logprob=uni(g, (4, 6), -8.0, 0.0),
                       ref_logprob=uni(g, (4, 6), -8.0, 0.0)),
    }
    cases = []
    for iname, inp in inputs.items():
        for base in KL_NAMES + ["nonsense"]:
            for name in [base, base + "+"]:
                for fname in ["kl_penalty", "kl_penalty_forward"]:
                    if fname == "kl_penalty_forward" and name.endswith("+"):
                        continue
                    c = {"name": f"{fname}/{iname}/{name}", "function": fname, "input": iname, "kl_penalty": name}
                    x = inp["logprob"].clone().requires_grad_(True)
                    try:
                        out = getattr(ca, fname)(x, inp["ref_logprob"].clone(), name)
                        c["value"] = js(out)
                        out.sum().backward()
                        c["grad_logprob"] = js(x.grad)
                    except Exception as e:  # noqa: BLE001
                        c["error"] = err_text(e)
                    cases.append(c)
    # compute_rewards(token_level_scores, old_log_prob, ref_log_prob, kl_ratio) = scores - (old - ref) * kl_ratio
    scores = rnd(g, (4, 6))
    rew = []
    for ratio in [0.0, 0.001, 0.2]:
        out = ca.compute_rewards(scores, inputs["random"]["logprob"], inputs["random"]["ref_logprob"], ratio)
        rew.append({"name": f"compute_rewards/random/kl_ratio={ratio}", "function": "compute_rewards",
                    "input": "random", "token_level_scores": js(scores), "kl_ratio": ratio, "value": js(out)})
    return {"inputs": {k: {kk: js(vv) for kk, vv in v.items()} for k, v in inputs.items()}, "cases": cases + rew}


# ---------------------------------------------------------------------------------------------
# value loss, entropy loss, KL controllers
# ---------------------------------------------------------------------------------------------


def run_misc(V):
    ca = V.core_algos
    KLControlConfig = V.algorithm.KLControlConfig
    g = np.random.default_rng(1618)
    B, T = 6, 5
    mask = prefix_mask([5, 2, 1, 0, 5, 3], T)
    values = rnd(g, (B, T))
    vin = dict(
        note="vpreds = values + N(0, 0.6): some inside, some outside the clip range",
        vpreds=values + rnd(g, (B, T), 0.6),
        returns=values + rnd(g, (B, T), 1.0),
        values=values,
        response_mask=mask,
    )
    value_cases = []
    for clip in [0.5, 0.2]:
        for mode in AGG_MODES:
            for info_name, info in [("none", {}), ("dp2", {"dp_size": 2, "batch_num_tokens": 30, "global_batch_size": 8,
                                                            "loss_scale_factor": 7})]:
                vp = vin["vpreds"].clone().requires_grad_(True)
                c = {"name": f"compute_value_loss/cliprange_value={clip}/{mode}/{info_name}", "cliprange_value": clip,
                     "loss_agg_mode": mode, "kwargs": info, "mask_dtype": "bool"}
                loss, clipfrac = ca.compute_value_loss(vp, vin["returns"], vin["values"], mask.bool(), clip,
                                                       loss_agg_mode=mode, **info)
                loss.backward()
                c.update(vf_loss=js(loss), vf_clipfrac=js(clipfrac), grad_vpreds=js(vp.grad))
                value_cases.append(c)

    logits = rnd(g, (B, T, 5), 3.0)
    logits[0, 0] = t([30.0, -30.0, 0.0, 0.0, 1e-3])
    logits[1, 0] = t([0.0, 0.0, 0.0, 0.0, 0.0])
    logits_inf = logits.clone()
    logits_inf[0, 1, 2] = float("-inf")
    ent_inputs = {"logits": logits, "logits_with_-inf": logits_inf}
    ent_cases = []
    for lname, lg in ent_inputs.items():
        for mode in AGG_MODES:
            x = lg.clone().requires_grad_(True)
            c = {"name": f"compute_entropy_loss/{lname}/{mode}", "logits": lname, "loss_agg_mode": mode,
                 "mask_dtype": "bool"}
            out = ca.compute_entropy_loss(x, mask.bool(), loss_agg_mode=mode)
            out.backward()
            c.update(entropy_loss=js(out), grad_logits=js(x.grad))
            ent_cases.append(c)

    kl_cases = []
    seqs = [(0.05, 256), (0.3, 256), (0.1, 64), (0.0, 1000), (0.11, 10000), (1.5, 32), (0.095, 128)]
    for spec in [
        {"type": "fixed", "kl_coef": 0.001},
        {"type": "adaptive", "kl_coef": 0.001, "horizon": 10000, "target_kl": 0.1},
        {"type": "adaptive", "kl_coef": 0.2, "horizon": 500, "target_kl": 0.05},
        {"type": "adaptive", "kl_coef": 0.1, "horizon": 0, "target_kl": 0.1},
        {"type": "pid", "kl_coef": 0.1},
    ]:
        c = {"name": f"kl_ctrl/{spec['type']}/{spec.get('kl_coef')}/{spec.get('horizon')}", "kl_ctrl": spec,
             "updates": [list(u) for u in seqs]}
        try:
            ctrl = ca.get_kl_controller(KLControlConfig(**spec))
            vals = [ctrl.value]
            for kl, n in seqs:
                ctrl.update(current_kl=kl, n_steps=n)
                vals.append(float(ctrl.value))
            c["values"] = js(vals)
        except Exception as e:  # noqa: BLE001
            c["error"] = err_text(e) if str(e) else type(e).__name__
        kl_cases.append(c)
    return {
        "inputs": {"value": {k: js(v) for k, v in vin.items()}, "entropy": {k: js(v) for k, v in ent_inputs.items()},
                   "entropy_mask": js(mask)},
        "value_loss": value_cases,
        "entropy_loss": ent_cases,
        "kl_controllers": kl_cases,
    }


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verl", required=True, help="directory holding verl's source (the one containing verl/)")
    ap.add_argument("--out", default=os.path.join("test", "fixtures", "verl-core-algos"))
    args = ap.parse_args()
    V = load_verl(args.verl)
    meta = {
        "verl": "v0.9.0 (verl/trainer/ppo/core_algos.py, loaded by path)",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "generator": "scripts/verl_core_algos_oracle.py",
    }
    os.makedirs(args.out, exist_ok=True)
    families = {
        "advantages.json": run_advantages,
        "policy-losses.json": run_policy_losses,
        "agg-loss.json": run_agg_loss,
        "kl.json": run_kl,
        "misc.json": run_misc,
    }
    for fname, fn in families.items():
        data = {"meta": meta, **fn(V)}
        path = os.path.join(args.out, fname)
        with open(path, "w") as f:
            json.dump(data, f, separators=(",", ":"), allow_nan=False)
            f.write("\n")
        n = sum(len(v) for k, v in data.items() if isinstance(v, list))
        print(f"{path}: {n} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
