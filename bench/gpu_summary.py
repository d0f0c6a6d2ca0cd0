#!/usr/bin/env python3
"""The benchmark rows of scripts/gpu_check.sh: reads RESULT {json} lines (bench/gpu_kernels, bench/torch_gpu_peer.py)
from stdin and prints one line per run: micro-batch, who, ms/step, tokens/s, MFU (dense bf16 989 TFLOP/s), peak GiB."""
import json
import sys

print(f"  {'B':<4} {'run':<24} {'ms/step':>8} {'tokens/s':>9} {'MFU':>6} {'GiB':>6}")
for line in sys.stdin:
    if not line.startswith("RESULT "):
        continue
    r = json.loads(line[7:])
    if "peer" in r:
        print(f"  {r['B']:<4} {r['peer']:<24} {r['median_ms']:8.1f} {r['tokens_per_s']:>9} {r['mfu'] * 100:5.1f}% {r['peak_mem_gib']:6.1f}")
    elif r.get("ours") == "model-step":
        print(f"  {r['B']:<4} {'ours (model step)':<24} {r['median_ms']:8.1f} {r['tokens_per_s']:>9.0f} {r['mfu'] * 100:5.1f}% {r['peak_mem_gib']:6.1f}"
              f"   fwd {r['fwd_ms']:.1f} bwd {r['bwd_ms']:.1f} norm {r['norm_ms']:.1f} adamw {r['opt_ms']:.1f} ms")
    else:
        est = r["step_ms_est"]
        print(f"  {r['B']:<4} {'ours (kernel sum, est.)':<24} {est:8.1f} {r['B'] * r['T'] / (est * 1e-3):>9.0f} {'':>6} {'':>6}"
              f"   attn fwd/bwd {r['attn_fwd_ms']:.2f}/{r['attn_bwd_ms']:.2f} ms"
              f" (scalar {r.get('attn_fwd_scalar_ms', 0):.2f}/{r.get('attn_bwd_scalar_ms', 0):.2f}), bf16 GEMM {r['gemm_tflops']} TFLOP/s")
