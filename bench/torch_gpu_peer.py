#!/usr/bin/env python3
"""PyTorch peer for the GPU benchmark (issue 25; scripts/gpu_check.sh): GPT-2 124M (12 layers, 12 heads,
C 768, vocabulary 50257 padded to 50304, tied head) trained as the issue measured it: bf16 autocast,
SDPA attention (flash), fused AdamW (lr 6e-4, betas 0.9/0.95, wd 0.1), gradient clipping at 1.0, random
tokens. Self-contained (the GPU machine has only this tree and PyTorch).

For each micro-batch size and each mode (eager, torch.compile) in turn, interleaved: warm-up steps,
then timed steps (CUDA events around each step, median), tokens/s, MFU against --peak-tflops (dense
bf16; 6·N·D + attention FLOPs, PaLM's appendix B) and peak memory. One RESULT {json} line per run.

usage: python3 bench/torch_gpu_peer.py [--B 16 32] [--T 1024] [--steps 20] [--warmup 5]
                                       [--modes eager compile] [--peak-tflops 989]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--B", type=int, nargs="+", default=[16, 32])
ap.add_argument("--T", type=int, default=1024)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--modes", nargs="+", default=["eager", "compile"])
ap.add_argument("--peak-tflops", type=float, default=989.0)
a = ap.parse_args()

V, Vp, L, NH, C = 50257, 50304, 12, 12, 768


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, tgt):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight[:V].t()
        return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))


def run(B, mode):
    torch.manual_seed(1337)
    dev = "cuda"
    model = GPT2(a.T).to(dev)
    nparams = sum(p.numel() for p in model.parameters()) - Vp * C + V * C  # tied head counted once
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    g = torch.Generator(device=dev).manual_seed(1)
    torch.cuda.reset_peak_memory_stats()

    def step():
        x = torch.randint(0, V, (B, a.T), device=dev, generator=g)
        y = torch.randint(0, V, (B, a.T), device=dev, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    times = []
    for _ in range(a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        loss = step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    ms = statistics.median(times)
    flops = 6 * nparams * B * a.T + 12 * L * a.T * C * B * a.T
    res = {"peer": f"pytorch-{mode}", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "B": B, "T": a.T, "median_ms": round(ms, 3), "tokens_per_s": round(B * a.T / (ms * 1e-3)),
           "mfu": round(flops / (ms * 1e-3) / (a.peak_tflops * 1e12), 4),
           "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
           "warmup_s": round(warm_s, 1), "loss": round(float(loss), 4), "params": nparams}
    print("RESULT " + json.dumps(res), flush=True)
    del model, opt, fwd
    torch.cuda.empty_cache()


if not torch.cuda.is_available():
    raise SystemExit("torch_gpu_peer: no CUDA device visible to PyTorch")
torch.backends.cuda.matmul.allow_tf32 = True
for B in a.B:
    for mode in a.modes:
        run(B, mode)
