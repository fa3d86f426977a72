"""Reference values from the FlowRL authors' own later objectives (the oracle for flowrl.reference,
flowrl.level, flowrl.log_z none and the flowrl_token_level policy loss).

The authors kept changing the objective on their fork, Xuekai-Zhu/verl_FlowRL (unmerged branches).
This script runs their functions, at the commits that introduced each variant, on a hostile corpus
built below (fixed seeds, float64) and writes test/fixtures/flowrl-fork/reference.json, which
test/flowrl-fork.test.ts reads:

  commit    branch        function (file)                                             variant here
  4e335cfa  no-log-z      compute_flowrl_no_log_z (recipe/flowrl/flowrl_objectives.py) log_z none, reference ref
  4e335cfa  no-log-z      compute_flowrl_with_old_policy                              log_z none, reference old
  6e2ccf9e  no-log-z      compute_flowrl_old_policy_no_log_z                          log_z none, reference none
  7476a833  no-log-z      compute_flowrl_old_policy_no_log_z_token_level              level token, reference old
  307da4c9  no-log-z      compute_flowrl_old_policy_no_log_z_token_level (final)      level token, reference none
  972c5525  async-flowrl  compute_policy_loss_flowrl_token_level (verl/trainer/ppo/core_algos.py,
                          registered as policy loss "flowrl_token_level")             the plugin's flowrl_token_level

No fork code is kept in this repository; to rerun:

    git clone https://github.com/Xuekai-Zhu/verl_FlowRL /tmp/fork
    for c in 4e335cfa 6e2ccf9e 7476a833 307da4c9 972c5525; do
      mkdir -p /tmp/fork-$c && git -C /tmp/fork archive $c verl recipe/flowrl | tar -x -C /tmp/fork-$c
    done
    /usr/bin/python3 scripts/flowrl_fork_oracle.py --trees /tmp      (reads /tmp/fork-<commit>)

(Debian's python3 with python3-torch 1.13, python3-numpy and python3-omegaconf; a few seconds.)

Loading: the fork is not installed. Each commit's verl/utils/torch_functional.py (masked_mean,
masked_sum, masked_var) is loaded by path under its real name, with stand-ins for imports that
cannot load here and that these functions never touch (tensordict, transformers, verl.utils.device).
The objectives file is then loaded by path. For 972c5525's core_algos.py, verl.trainer.config and
verl.workers.config are stand-in modules whose AlgoConfig / ActorConfig are plain classes; the loss
reads only the actor's clip_ratio, clip_ratio_low, clip_ratio_high and global_batch_info from its
config (and asserts the class), so the stand-in carries exactly those fields. verl.utils (groupwise)
and import_utils are loaded by path. Every case is checked against the formula in the docstring of
test/flowrl-fork.test.ts only by the TypeScript side; this script records what the authors' code does.

Non-finite numbers are written as the strings "NaN", "Infinity", "-Infinity".
"""

import argparse
import json
import math
import os
import sys
import types

import torch

# The by-path loading helpers of the verl v0.9.0 oracle beside this script (its module only defines them).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verl_core_algos_oracle import _load, _pkg, _stub_missing_third_party  # noqa: E402

DT = torch.float64

COMMITS = ["4e335cfa", "6e2ccf9e", "7476a833", "307da4c9", "972c5525"]


def _fresh(prefix):
    for name in list(sys.modules):
        if name == prefix or name.startswith(prefix + "."):
            del sys.modules[name]


def load_torch_functional(root):
    """verl.utils.torch_functional of one commit's tree (its verl package left unexecuted)."""
    _fresh("verl")
    _fresh("recipe")
    _stub_missing_third_party()
    for name in ["verl", "verl.utils"]:
        _pkg(name)
    device = types.ModuleType("verl.utils.device")
    device.get_device_name = lambda: "cpu"
    device.get_torch_device = lambda: torch.cuda
    device.is_npu_available = False
    device.is_cuda_available = False
    sys.modules["verl.utils.device"] = device
    sys.modules["verl.utils"].device = device
    return _load("verl.utils.torch_functional", os.path.join(root, "verl", "utils", "torch_functional.py"))


def load_objectives(root):
    load_torch_functional(root)
    for name in ["recipe", "recipe.flowrl"]:
        _pkg(name)
    return _load("recipe.flowrl.flowrl_objectives", os.path.join(root, "recipe", "flowrl", "flowrl_objectives.py"))


class ActorConfigStandIn:
    """The fields compute_policy_loss_flowrl_token_level reads (and the class it asserts)."""

    def __init__(self, clip_ratio, clip_ratio_low, clip_ratio_high, global_batch_info):
        self.clip_ratio = clip_ratio
        self.clip_ratio_low = clip_ratio_low
        self.clip_ratio_high = clip_ratio_high
        self.global_batch_info = global_batch_info


def load_core_algos(root):
    load_torch_functional(root)
    p = lambda *parts: os.path.join(root, "verl", *parts)  # noqa: E731
    groupwise = _load("verl.utils.groupwise", p("utils", "groupwise.py"))
    sys.modules["verl.utils"].as_torch_index = groupwise.as_torch_index
    sys.modules["verl.utils"].group_mean_std = groupwise.group_mean_std
    _load("verl.utils.import_utils", p("utils", "import_utils.py"))
    for name in ["verl.trainer", "verl.trainer.config", "verl.trainer.ppo", "verl.workers", "verl.workers.config"]:
        _pkg(name)
    sys.modules["verl.trainer.config"].AlgoConfig = type("AlgoConfig", (), {})
    sys.modules["verl.workers.config"].ActorConfig = ActorConfigStandIn
    return _load("verl.trainer.ppo.core_algos", p("trainer", "ppo", "core_algos.py"))


# ---------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------


def f32(x):
    """Round to float32 and back, so the float32 TypeScript side sees exactly these inputs."""
    return x.to(torch.float32).to(DT)


def prefix_mask(lengths, T):
    return torch.tensor([[1.0 if t < n else 0.0 for t in range(T)] for n in lengths], dtype=DT)


def build_cases():
    cases = []

    def add(name, lengths, T, seed, lp_scale=1.0, drift=0.05, adv="group", ref_shift=0.0, padding=1000.0, extra=None):
        g = torch.Generator().manual_seed(seed)
        B = len(lengths)
        mask = prefix_mask(lengths, T)
        old = f32(-torch.rand(B, T, generator=g, dtype=DT) * 3.0 * lp_scale - 0.01)
        log_prob = f32(old + torch.randn(B, T, generator=g, dtype=DT) * drift)
        ref = f32(old + torch.randn(B, T, generator=g, dtype=DT) * 0.3 + ref_shift)
        if adv == "group":  # GRPO: one value per row, spread over its tokens
            a = torch.randn(B, 1, generator=g, dtype=DT).expand(B, T).clone()
        else:  # hostile: a different value on every token
            a = torch.randn(B, T, generator=g, dtype=DT) * 2.0
        a = f32(a)
        rollout_is = f32(torch.rand(B, T, generator=g, dtype=DT) * 1.5 + 0.25)
        if extra:
            extra(locals())
        # Garbage where the mask is 0: any use of a padded position shows.
        pad = mask == 0
        for tensor in (old, log_prob, ref, a):
            tensor[pad] = padding
        cases.append(dict(name=name, mask=mask, old=old, log_prob=log_prob, ref=ref, adv=a, rollout_is=rollout_is))

    add("small on-policy-ish", [5, 3, 6, 1], 6, 1, drift=0.02)
    add("drifted, ratios past the clamps", [8, 8, 4, 7, 2, 8], 8, 2, drift=0.4)
    add("per-token advantages", [7, 5, 6], 7, 3, adv="token", drift=0.2)
    add("sequence weights past 10", [12, 12, 12], 12, 4, drift=0.5, extra=lambda v: v["log_prob"].add_(0.3))

    def far(v):
        # log-ratios past +-20 on some tokens: the token ratio's clamp before exp
        v["log_prob"][0, 1] = v["old"][0, 1] + 25.0
        v["log_prob"][1, 2] = v["old"][1, 2] - 30.0

    add("log-ratios past +-20", [4, 5], 5, 5, drift=0.1, extra=far)
    add("very unlikely tokens", [6, 6, 3], 6, 6, lp_scale=15.0, drift=0.3, ref_shift=-2.0)

    def empty_row(v):
        v["mask"][1, :] = 0.0

    add("a row with no valid token", [4, 4, 3], 4, 7, extra=empty_row)
    add("one token each", [1, 1, 1, 1], 3, 8, drift=0.3)
    return cases


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def num(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def js(t):
    if isinstance(t, torch.Tensor):
        if t.dim() == 0:
            return num(t.item())
        return [js(v) for v in t]
    return num(t)


def run(fn, case, kwargs):
    lp = case["log_prob"].clone().requires_grad_(True)
    try:
        loss, metrics = fn(log_prob=lp, **kwargs(case))
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"}
    loss.backward()
    grad = lp.grad.clone()
    # Where the mask is 0 the gradient is 0 (the garbage never enters).
    return {"loss": js(loss.detach()), "grad": js(grad), "metrics": {k: num(v) for k, v in metrics.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", required=True, help="directory holding fork-<commit>/ trees (see the docstring)")
    ap.add_argument("--out", default="test/fixtures/flowrl-fork/reference.json")
    args = ap.parse_args()
    torch.set_default_dtype(torch.float32)  # as the fork runs; inputs are float64
    tree = lambda c: os.path.join(args.trees, f"fork-{c}")  # noqa: E731
    for c in COMMITS:
        if not os.path.isdir(tree(c)):
            sys.exit(f"--trees: no fork-{c} under {args.trees}")

    cases = build_cases()
    beta = 15.0
    variants = []

    def seq(c, fn_name, variant, with_ref, with_old=True):
        mod = load_objectives(tree(c))
        fn = getattr(mod, fn_name)

        def kwargs(case):
            k = dict(reward=case["adv"], response_mask=case["mask"], beta_coef=beta)
            if with_old:
                k["old_log_prob"] = case["old"]
            if with_ref:
                k["ref_log_prob"] = case["ref"]
            return k

        variants.append({"commit": c, "function": fn_name, "variant": variant, "results": [run(fn, case, kwargs) for case in cases]})

    seq("4e335cfa", "compute_flowrl_no_log_z", {"log_z": "none", "reference": "ref", "level": "sequence"}, True)
    seq("4e335cfa", "compute_flowrl_with_old_policy", {"log_z": "none", "reference": "old", "level": "sequence"}, False)
    seq("6e2ccf9e", "compute_flowrl_old_policy_no_log_z", {"log_z": "none", "reference": "none", "level": "sequence"}, False)
    seq("7476a833", "compute_flowrl_old_policy_no_log_z_token_level", {"log_z": "none", "reference": "old", "level": "token", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "loss_agg_mode": "token-mean"}, False)
    seq("307da4c9", "compute_flowrl_old_policy_no_log_z_token_level", {"log_z": "none", "reference": "none", "level": "token", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "loss_agg_mode": "token-mean"}, False)

    core = load_core_algos(tree("972c5525"))
    fn = core.get_policy_loss_fn("flowrl_token_level")
    settings = [
        {"loss_agg_mode": "token-mean", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": False, "global": {}},
        {"loss_agg_mode": "token-mean", "clip_ratio_low": 0.1, "clip_ratio_high": 0.5, "rollout_is": True, "global": {}},
        {"loss_agg_mode": "seq-mean-token-mean", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": True, "global": {}},
        {"loss_agg_mode": "seq-mean-token-sum", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": False, "global": {}},
        {"loss_agg_mode": "seq-mean-token-sum-norm", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": False, "global": {}},
        # A micro-batch of a larger mini-batch: the denominators are the mini-batch's.
        {"loss_agg_mode": "token-mean", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": False, "global": {"dp_size": 1, "batch_num_tokens": 50}},
        {"loss_agg_mode": "seq-mean-token-mean", "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "rollout_is": False, "global": {"dp_size": 1, "global_batch_size": 9}},
    ]
    for s in settings:
        config = ActorConfigStandIn(0.2, s["clip_ratio_low"], s["clip_ratio_high"], s["global"])

        def kwargs(case, s=s, config=config):
            return dict(
                old_log_prob=case["old"],
                advantages=case["adv"],
                response_mask=case["mask"],
                loss_agg_mode=s["loss_agg_mode"],
                config=config,
                rollout_is_weights=case["rollout_is"] if s["rollout_is"] else None,
            )

        variants.append(
            {
                "commit": "972c5525",
                "function": "compute_policy_loss_flowrl_token_level",
                "variant": {"policy_loss": "flowrl_token_level", "reference": "old", "level": "token", "beta": 15.0, **{k: v for k, v in s.items() if k != "global"}, "global_batch_info": s["global"]},
                "results": [run(fn, case, kwargs) for case in cases],
            }
        )

    out = {
        "source": "Xuekai-Zhu/verl_FlowRL; see scripts/flowrl_fork_oracle.py",
        "beta": beta,
        "cases": [{"name": c["name"], **{k: js(c[k]) for k in ("mask", "old", "log_prob", "ref", "adv", "rollout_is")}} for c in cases],
        "variants": variants,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: {len(cases)} cases x {len(variants)} variants")


if __name__ == "__main__":
    main()
