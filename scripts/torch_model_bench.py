"""PyTorch side of `flowrl bench --model-config FILE --compare-torch`: the same model and jobs, eager.

A Llama / Qwen2 decoder from a Hugging Face config.json (RMSNorm, rotary positions, grouped-query
attention, SwiGLU MLP, q/k/v biases for qwen2, tied or untied head) with random weights. With
--lora-rank R > 0 the base is frozen (requires_grad False) and every one of the seven projections
gets a LoRA adapter (A [r, in] Kaiming-uniform, B [out, r] zero, scale 2r/r = 2, as flowrl bench).
Jobs, as flowrl's: one training step on batch x seq tokens (1 prompt token, seq - 1 response
tokens, mean next-token NLL, clip 1.0, AdamW over the trainable parameters), then KV-cache sampling
of N new tokens after 64-token prompts at temperature 1. Prints one JSON line.
With --rl-step, one RL step as `flowrl bench --rl-step` runs it: prompts x samples sampled with the
KV cache, the policy's and the reference's (adapters off) response log-probs in micro-batches
without gradients, and one update (response NLL, forward and backward per micro-batch, clip 1.0,
AdamW); the seconds of each phase.

    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 scripts/torch_model_bench.py --config qwen2.5-0.5b-config.json --lora-rank 16
    OPENBLAS_NUM_THREADS=2 /usr/bin/python3 scripts/torch_model_bench.py --config qwen2.5-0.5b-config.json --lora-rank 16 --rl-step
"""
import argparse
import json
import math
import resource

import torch
import torch.nn.functional as F


# --device and the clock that waits for it: one definition, in torch_bench.py beside this file.
from torch_bench import clock, use_device


class Lora(torch.nn.Module):
    """A frozen linear (weight [out, in]) plus scale * B A."""

    def __init__(self, inputs, outputs, bias, rank):
        super().__init__()
        self.base = torch.nn.Linear(inputs, outputs, bias=bias)
        torch.nn.init.normal_(self.base.weight, std=0.02)
        if bias:
            torch.nn.init.zeros_(self.base.bias)
        self.rank = rank
        if rank:
            for p in self.base.parameters():
                p.requires_grad_(False)
            self.A = torch.nn.Parameter(torch.empty(rank, inputs))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.B = torch.nn.Parameter(torch.zeros(outputs, rank))
            self.scale = 2.0
        # True while the reference (the base alone) is scored.
        self.off = False

    def forward(self, x):
        y = self.base(x)
        if self.rank and not self.off:
            y = y + (x @ self.A.t() * self.scale) @ self.B.t()
        return y


class RMSNorm(torch.nn.Module):
    def __init__(self, size, eps, trainable):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size), requires_grad=trainable)
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, c, rank):
        super().__init__()
        H, nH, nKV, hd, I = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["intermediate_size"]
        qkv_bias = c["model_type"] == "qwen2"
        self.nH, self.nKV, self.hd = nH, nKV, hd
        self.norm1 = RMSNorm(H, c["rms_norm_eps"], rank == 0)
        self.norm2 = RMSNorm(H, c["rms_norm_eps"], rank == 0)
        self.q = Lora(H, nH * hd, qkv_bias, rank)
        self.k = Lora(H, nKV * hd, qkv_bias, rank)
        self.v = Lora(H, nKV * hd, qkv_bias, rank)
        self.o = Lora(nH * hd, H, False, rank)
        self.gate = Lora(H, I, False, rank)
        self.up = Lora(H, I, False, rank)
        self.down = Lora(I, H, False, rank)

    def forward(self, x, cos, sin, mask, cache=None):
        b, t, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.nH, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.nKV, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.nKV, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            if cache[0] is not None:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        groups = self.nH // self.nKV
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        if mask is not None:
            scores = scores + mask
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.nH * self.hd)
        x = x + self.o(attn)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, c, rank):
        super().__init__()
        c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
        self.c = c
        self.embed = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        self.layers = torch.nn.ModuleList([Layer(c, rank) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], rank == 0)
        self.head = None if c.get("tie_word_embeddings") else torch.nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if rank:
            self.embed.weight.requires_grad_(False)
            if self.head is not None:
                self.head.weight.requires_grad_(False)
        hd = c["head_dim"]
        self.inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))

    def forward(self, ids, start=0, caches=None, head_from=0):
        t = ids.shape[1]
        angles = torch.arange(start, start + t, dtype=torch.float32)[:, None] * self.inv
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        mask = None
        if t > 1:
            mask = torch.full((t, start + t), float("-inf")).triu(start + 1)
        x = self.embed(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, None if caches is None else caches[i])
        x = self.norm(x)[:, head_from:]
        return x @ self.embed.weight.t() if self.head is None else self.head(x)


def sample(model, prompts, new_tokens):
    """KV-cache sampling at temperature 1; returns the new tokens [rows, new_tokens]."""
    start = prompts.shape[1]
    caches = [[None, None] for _ in model.layers]
    logits = model(prompts, 0, caches)[:, -1]
    out = []
    for step in range(new_tokens):
        token = torch.multinomial(logits.softmax(-1), 1)
        out.append(token)
        if step + 1 < new_tokens:
            logits = model(token, start + step, caches)[:, -1]
    return torch.cat(out, dim=1)


def response_log_probs(model, seq, prompt_tokens):
    """Log-probs of the response tokens: the states from the last prompt position on predict them."""
    logits = model(seq[:, :-1], head_from=prompt_tokens - 1)
    return logits.log_softmax(-1).gather(-1, seq[:, prompt_tokens:, None])[..., 0]


def rl_step(args, model, params, opt, V):
    prompts = torch.randint(0, V, (args.prompts, args.prompt_tokens)).repeat_interleave(args.samples, dim=0)
    seconds = {}
    with torch.no_grad():
        sample(model, prompts[:1], 2)
        t0 = clock()
        seq = torch.cat([prompts, sample(model, prompts, args.response_tokens)], dim=1)
        seconds["rollout"] = clock() - t0
        micro = seq.split(args.micro_batch)
        for name, off in (("old_log_prob", False), ("ref_log_prob", True)):
            for m in model.modules():
                if isinstance(m, Lora):
                    m.off = off
            t0 = clock()
            for m in micro:
                response_log_probs(model, m, args.prompt_tokens)
            seconds[name] = clock() - t0
        for m in model.modules():
            if isinstance(m, Lora):
                m.off = False
    t0 = clock()
    opt.zero_grad()
    for m in micro:
        loss = -response_log_probs(model, m, args.prompt_tokens).mean() * (m.shape[0] / seq.shape[0])
        loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    seconds["update"] = clock() - t0
    return seconds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--sample-prompts", type=int, default=8)
    ap.add_argument("--sample-tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rl-step", action="store_true")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--response-tokens", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    use_device(args.device)
    torch.manual_seed(0)
    config = json.load(open(args.config))
    model = Model(config, args.lora_rank)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    V = config["vocab_size"]
    if args.rl_step:
        seconds = rl_step(args, model, params, opt, V)
        print(json.dumps({
            "phases": seconds,
            "step_seconds": sum(seconds.values()),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "device": args.device,
        }))
        return
    ids = torch.randint(0, V, (args.batch, args.seq))
    times = []
    for i in range(args.steps + 1):
        t0 = clock()
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if i:
            times.append(clock() - t0)
    prompts = torch.randint(0, V, (args.sample_prompts, args.prompt_tokens))
    with torch.no_grad():
        t0 = clock()
        caches = [[None, None] for _ in model.layers]
        logits = model(prompts, 0, caches)[:, -1]
        for step in range(args.sample_tokens):
            token = torch.multinomial(logits.softmax(-1), 1)
            if step + 1 < args.sample_tokens:
                logits = model(token, args.prompt_tokens + step, caches)[:, -1]
        sample_s = clock() - t0
    times.sort()
    mid = len(times) // 2
    median = times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2
    print(json.dumps({
        "train_step_ms": round(median * 1000),
        "sample_tokens_per_s": round(args.sample_prompts * args.sample_tokens / sample_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": args.device,
        "trainable_parameters": sum(p.numel() for p in params),
    }))


if __name__ == "__main__":
    main()
