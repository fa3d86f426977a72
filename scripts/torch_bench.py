"""PyTorch side of `flowrl bench --compare-torch`: the same tiny Llama and the same two jobs.

The model matches core-adapters/cli/bench.ts (vocab 64, hidden 128, 4 heads, 2 layers, SwiGLU
MLP 512, RMSNorm, rotary positions, untied head). Jobs: one training step (batch 32 x 64: 1 prompt
token, 63 response tokens, mean NLL over the response, clip 1.0, AdamW) and KV-cache sampling (32
one-token prompts, 63 new tokens each, temperature 1). Run with Debian's python3-torch and
OpenBLAS, one thread (PyTorch's fastest setting on this 2-core machine). Prints one JSON line.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 scripts/torch_bench.py --steps 5
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


# --device: cpu (the default) or cuda (torch >= 2.0: every tensor and parameter is made there).
DEVICE = "cpu"


def use_device(name):
    global DEVICE
    DEVICE = name
    if name != "cpu":
        torch.set_default_device(name)


def clock():
    """perf_counter once the device has finished its queued work (CUDA runs asynchronously)."""
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()

V, H, HEADS, LAYERS, MLP, T, B = 64, 128, 4, 2, 512, 64, 32
HD = H // HEADS


def rope_tables(positions):
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    angles = positions[..., None].float() * inv
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class RMSNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(H))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(), RMSNorm()
        self.qkv = torch.nn.Linear(H, 3 * H, bias=False)
        self.o = torch.nn.Linear(H, H, bias=False)
        self.gate_up = torch.nn.Linear(H, 2 * MLP, bias=False)
        self.down = torch.nn.Linear(MLP, H, bias=False)

    def forward(self, x, cos, sin, cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if cache is not None:
            if cache[0] is not None:
                k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        scores = q @ k.transpose(-1, -2) / math.sqrt(HD)
        if t > 1:
            scores = scores.masked_fill(torch.ones(t, k.shape[2], dtype=torch.bool).triu(k.shape[2] - t + 1), float("-inf"))
        att = scores.softmax(-1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(b, t, H))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class TinyLlama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.norm = RMSNorm()
        self.head = torch.nn.Linear(H, V, bias=False)

    def forward(self, ids, start=0, caches=None):
        x = self.embed(ids)
        cos, sin = rope_tables(torch.arange(start, start + ids.shape[1]))
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i])
        return self.head(self.norm(x))


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    use_device(args.device)
    torch.manual_seed(0)
    model = TinyLlama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    ids = torch.randint(0, V, (B, T))

    def train_step():
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def sample():
        caches = [[None, None] for _ in range(LAYERS)]
        tokens = ids[:, :1]
        logits = model(tokens, 0, caches)
        for step in range(T - 1):
            nxt = torch.multinomial(F.softmax(logits[:, -1], dim=-1), 1)
            if step < T - 2:
                logits = model(nxt, step + 1, caches)

    times = []
    for i in range(args.steps + 2):
        start = clock()
        train_step()
        if i >= 2:
            times.append(clock() - start)
    sample_times = []
    for i in range(args.steps + 1):
        start = clock()
        sample()
        if i >= 1:
            sample_times.append(clock() - start)
    step = median(times)
    print(json.dumps({
        "train_step_ms": round(step * 1000, 1),
        "sample_tokens_per_s": round(B * (T - 1) / median(sample_times)),
        "threads": args.threads,
        "torch": torch.__version__,
        "device": DEVICE,
    }))


if __name__ == "__main__":
    main()
