#!/usr/bin/python3
"""PyTorch peer for the bf16 benchmark: the shared peer's GPT-2 (../shared/peers/torch_gpt2_bench.py,
imported, not copied) trained under torch.autocast("cpu", dtype=torch.bfloat16), which runs the
matmuls in bf16 with fp32 weights and optimizer, like scaletrain's --precision bf16. Random tokens,
AdamW, timed from fetching the batch to the end of the optimizer step; prints RESULT {json}.

usage: /usr/bin/python3 bench/torch_bf16_peer.py --peer PATH --V 256 --L 6 --NH 6 --C 384 --B 8 --T 256
"""
import argparse
import importlib.util
import json
import statistics
import time

import numpy as np
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--peer", default="../shared/peers/torch_gpt2_bench.py")
for k, d in (("V", 50257), ("L", 12), ("NH", 12), ("C", 768), ("B", 4), ("T", 64), ("steps", 10), ("threads", 2)):
    ap.add_argument(f"--{k}", type=int, default=d)
a = ap.parse_args()
spec = importlib.util.spec_from_file_location("peer", a.peer)
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)
torch.set_num_threads(a.threads)
torch.manual_seed(1337)
Vp = (a.V + 127) // 128 * 128
model = peer.GPT2(a.V, Vp, a.L, a.NH, a.C, max(a.T, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
rng = np.random.default_rng(1337)
toks = rng.integers(0, a.V, size=(a.steps + 1) * a.B * a.T + 1)
times = []
for s in range(a.steps):
    t0 = time.perf_counter()
    buf = torch.from_numpy(toks[s * a.B * a.T:(s + 1) * a.B * a.T + 1].astype(np.int64))
    x, y = buf[:-1].view(a.B, a.T), buf[1:].view(a.B, a.T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
med = statistics.median(times[2:])
print("RESULT " + json.dumps({"peer": "pytorch-bf16-autocast", "median_ms": med * 1e3,
                              "tokens_per_s": a.B * a.T / med, "loss": float(loss)}))
