#!/usr/bin/env python3
"""The table of bench/server.sh: reads WORKDIR/results.tsv (STAGE, TAG, RESULT json per line) and the
trainer's JSON Lines logs WORKDIR/place-*.jsonl, prints Markdown tables (docs/performance.md, "On a
16-core server", says how to read them).

usage: python3 bench/server_summary.py WORKDIR
"""
import json
import os
import statistics
import sys

work = sys.argv[1]
rows = []
for line in open(os.path.join(work, "results.tsv")):
    parts = line.rstrip("\n").split("\t", 2)
    if len(parts) == 3:
        try:
            rows.append((parts[0], parts[1], json.loads(parts[2])))
        except ValueError:
            rows.append((parts[0], parts[1], {"failed": "unparsable"}))

env = next((r for s, t, r in rows if s == "env" and t == "info"), {})
N = env.get("N", 0)
print(f"=== bench/server.sh: {env.get('cpu', '?')}, {env.get('ncpu', '?')} cpus, {env.get('numa', '?')} NUMA node(s), "
      f"load {env.get('load', '?')} at start, {env.get('date', '?')}")
print(f"    PyTorch {env.get('torch', '?')} ({env.get('python', '?')}); ours: {env.get('build') or 'build-portable (not packed)'}")
for s, t, r in rows:
    if s == "env" and t == "error":
        print(f"    NOT RUN: {r['error']}")
    if t == "-" and "skipped" in r:
        print(f"    stage {s}: skipped ({r['skipped']})")


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, f="{:.0f}"):
    return "-" if v is None else f.format(v)


def records(log, event):
    """The records of one event ("step", "start") of a trainer's JSON Lines log (none if it is missing)."""
    out = []
    if os.path.exists(log):
        for line in open(log):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == event:
                out.append(e)
    return out


def step_records(log):
    return records(log, "step")


def start_plan(log):
    """The start record's plan (its step_ms and the hardware that priced it) of a trainer's log."""
    starts = records(log, "start")
    return (starts[0].get("plan") or {}) if starts else {}


def runs(stage, tag):
    return [r for s, t, r in rows if s == stage and t == tag and "tokens_per_s" in r]


def failed(stage, tag, cut=False):
    """Runs that failed (cut=True: those the stage's time limit stopped, exit 124)."""
    return sum(1 for s, t, r in rows if s == stage and t == tag and "failed" in r and (r["failed"] == 124) == cut)


# 1. ours against PyTorch, interleaved, medians over rounds
if any(s == "peer" and t != "-" for s, t, _ in rows):
    slow = " (PyTorch on the REFERENCE BLAS: its figures mean nothing)" if env.get("slow_blas") else ""
    print(f"\n--- ours vs PyTorch {env.get('torch', '?')}, {N} threads, tokens/s, median of rounds{slow}")
    print("| config | PyTorch fp32 | ours fp32 | ratio | PyTorch bf16 autocast | ours bf16 | ratio | ours MFU fp32 / bf16 | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    notes = []
    for cfg in dict.fromkeys(t.split()[0] for s, t, _ in rows if s == "peer" and t != "-"):
        v = {k: runs("peer", f"{cfg} {k}") for k in ("torch fp32", "ours fp32", "torch bf16", "ours bf16")}
        nat = {k: med([r["tokens_per_s"] for r in runs("peer", f"{cfg} native {k}")]) for k in ("fp32", "bf16")}
        if not any(v.values()) and not any(failed("peer", f"{cfg} {k}") + failed("peer", f"{cfg} {k}", True) for k in v):
            continue
        m = {k: med([r["tokens_per_s"] for r in x]) for k, x in v.items()}
        mfu = {k: med([r.get("mfu") for r in v[k]]) for k in ("ours fp32", "ours bf16")}
        ratio = lambda a, b: f"**{m[a] / m[b]:.2f}×**" if m[a] and m[b] else "-"
        nf = sum(failed("peer", f"{cfg} {k}") for k in v)
        nc = sum(failed("peer", f"{cfg} {k}", cut=True) for k in v)
        print(f"| {cfg} | {fmt(m['torch fp32'])} | {fmt(m['ours fp32'])} | {ratio('ours fp32', 'torch fp32')} | "
              f"{fmt(m['torch bf16'])} | {fmt(m['ours bf16'])} | {ratio('ours bf16', 'torch bf16')} | "
              f"{fmt(mfu['ours fp32'], '{:.2f}')} / {fmt(mfu['ours bf16'], '{:.2f}')} | "
              f"{min(len(x) for x in v.values())}{f' ({nf} failed)' if nf else ''}{f' ({nc} cut by the budget)' if nc else ''} |")
        if any(nat.values()):
            notes.append(f"{cfg}: the server's own -march=native step_bench (build-gpu): fp32 {fmt(nat['fp32'])}, bf16 {fmt(nat['bf16'])} "
                         f"tokens/s; portable / native = {fmt(m['ours fp32'] / nat['fp32'] if m['ours fp32'] and nat['fp32'] else None, '{:.2f}')}"
                         f" / {fmt(m['ours bf16'] / nat['bf16'] if m['ours bf16'] and nat['bf16'] else None, '{:.2f}')}")

    for n in notes:
        print("  " + n)

# 2. thread scaling of our step, per phase
sc = {}
for s, t, r in rows:
    if s == "scale" and t != "-":
        th, prec = t.split()
        if "tokens_per_s" in r:
            sc[(int(th), prec)] = r
        else:
            sc.setdefault((int(th), prec), r)
if sc:
    r0 = next(iter(sc.values()))
    print(f"\n--- thread scaling of our step, L {r0.get('L', '?')} C {r0.get('C', '?')} V {r0.get('V', '?')}, {r0.get('B', '?')}×{r0.get('T', '?')}: tokens/s, speedup (efficiency) "
          "against the fewest threads, phase medians in ms; optimizer GB/s = bytes moved / its time "
          "(norm read + AdamW's 4 reads and 3 writes: 32 B/param, bf16 +2)")
    print("| threads | precision | tokens/s | speedup (eff.) | forward ms | backward ms | optimizer ms | optimizer GB/s | MFU |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for prec in ("fp32", "bf16"):
        ths = sorted(t for t, p in sc if p == prec)
        base = next((sc[(t, prec)] for t in ths if "tokens_per_s" in sc[(t, prec)]), None)
        t0 = next((t for t in ths if "tokens_per_s" in sc[(t, prec)]), None)
        for t in ths:
            r = sc[(t, prec)]
            if "tokens_per_s" not in r:
                why = "cut by the budget" if r.get("failed") == 124 else f"failed ({r})"
                print(f"| {t} | {prec} | {why} | | | | | | |")
                continue
            sp = r["tokens_per_s"] / base["tokens_per_s"]
            gbs = r.get("params", 0) * (34 if prec == "bf16" else 32) / (r["optimizer_ms"] * 1e-3) / 1e9 if r.get("params") else None
            print(f"| {t} | {prec} | {r['tokens_per_s']:.0f} | {sp:.2f}× ({sp / (t / t0):.0%}) | {r['forward_ms']:.1f} | "
                  f"{r['backward_ms']:.1f} | {r['optimizer_ms']:.1f} | {fmt(gbs, '{:.1f}')} | {r['mfu']:.2f} |")
        good = [t for t in ths if "tokens_per_s" in sc[(t, prec)]]
        if len(good) >= 2:
            a, b = sc[(good[0], prec)], sc[(good[-1], prec)]
            ph = {k: a[k] / b[k] for k in ("forward_ms", "backward_ms", "optimizer_ms") if b[k] > 0}
            share = {k: b[k] / b["median_ms"] for k in ph}
            # Karp-Flatt: the serial fraction e that Amdahl's law needs to give the measured speedup S
            # on p times the threads, e = (1/S - 1/p) / (1 - 1/p); a rising e means overhead grows with threads.
            p, S = good[-1] / good[0], b["tokens_per_s"] / a["tokens_per_s"]
            kf = (1 / S - 1 / p) / (1 - 1 / p) if p > 1 else float("nan")
            print(f"  {prec} {good[0]} -> {good[-1]} threads (×{p:g}, speedup {S:.2f}, Karp-Flatt serial fraction {kf:.2f}): "
                  f"forward ×{ph.get('forward_ms', 0):.1f}, "
                  f"backward ×{ph.get('backward_ms', 0):.1f}, optimizer ×{ph.get('optimizer_ms', 0):.1f}; at {good[-1]} threads the "
                  f"optimizer is {share.get('optimizer_ms', 0):.0%} of the step (at {good[0]}: "
                  f"{a['optimizer_ms'] / a['median_ms']:.0%})")

# 3. the trainer: placements
pl = [(t, r) for s, t, r in rows if s == "place" and t != "-" and not t.startswith("profile ")]
if pl:
    model = env.get("model", "d6")
    print(f"\n--- the trainer, {model}{' (config B' + chr(39) + 's shape)' if model == 'd6' else ''}, global batch {env.get('gb', '?')} × 256, fp32: placements "
          "(medians over the steps after the first; MFU against the logged peak, must be <= 1)")
    print("| run | tokens/s | step ms | planned ms (step / plan, GEMM check start/end) | forward | backward | comm (waited) | optimizer | MFU median (max) | loss at the end |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for tag, r in pl:
        steps = step_records(os.path.join(work, "place-" + tag.replace(" ", "_") + ".jsonl"))
        if "failed" in r or not steps:
            why = "cut by the budget" if r.get("failed") == 124 else f"failed (exit {r.get('failed', '?')})"
            print(f"| {tag} | {why}, {len(steps)} steps logged | | | | | | | | |")
            continue
        st = steps[1:] or steps
        tm = lambda k: med([e.get("time_ms", {}).get(k) for e in st])
        mfus = [e.get("mfu") for e in st if e.get("mfu") is not None]
        flag = " **> 1!**" if mfus and max(mfus) > 1 else ""
        plan = start_plan(os.path.join(work, "place-" + tag.replace(" ", "_") + ".jsonl"))
        pms = plan.get("step_ms")
        ptxt = f"{pms:.0f} ({tm('total') / pms:.2f})" if pms else "?"
        if "alone" in plan.get("hardware", ""):
            ptxt += " one rank's profile"
        # the trainer's GEMM check at start and end over the cached figure (docs/plan.md, "The machine's speed now")
        ends = records(os.path.join(work, "place-" + tag.replace(" ", "_") + ".jsonl"), "end")
        chk = ends[-1].get("gemm_check") if ends else None
        if chk:
            ptxt += f", check {chk.get('start', 0):.2f}/{chk.get('end', 0):.2f}"
        print(f"| {tag} | {med([e['tokens_per_s'] for e in st]):.0f} | {tm('total'):.0f} | {ptxt} | {tm('forward'):.0f} | "
              f"{tm('backward'):.0f} | {tm('comm'):.0f} | {tm('optimizer'):.0f} | "
              f"{fmt(med(mfus), '{:.2f}')} ({fmt(max(mfus) if mfus else None, '{:.2f}')}){flag} | {steps[-1]['loss']:.6f} |")

# 4. tensor parallelism: overlapped against blocking (the tp stage)
tpr_ = [(t, r) for s, t, r in rows if s == "tp" and t != "-"]
if tpr_:
    def alpha_beta(sp):
        try:
            return json.load(open(os.path.join(work, f"tp-plan{'-sp' if sp else ''}.json")))["communication"]["tp_s"] * 1e3
        except (OSError, ValueError, KeyError, TypeError):
            return None
    print(f"\n--- tensor parallelism, tp 2, the trainer's {env.get('model', 'd6')} at 8 × 256 (medians over the steps after the first; "
          f"plan's alpha-beta tp time {fmt(alpha_beta(False), '{:.1f}')} ms/step, {fmt(alpha_beta(True), '{:.1f}')} with --sp)")
    print("| run | step ms | exposed tp ms/step | exposed / alpha-beta | overlapped collectives done before their wait |")
    print("|---|---:|---:|---:|---:|")
    for tag, r in tpr_:
        mode = tag.split()[-1]
        ab = alpha_beta(mode.endswith("-sp"))
        steps = step_records(os.path.join(work, f"tp-{mode}.jsonl"))
        if "failed" in r or not steps:
            why = "cut by the budget" if r.get("failed") == 124 else f"failed (exit {r.get('failed', '?')})"
            print(f"| {tag} | {why}, {len(steps)} steps logged | | | |")
            continue
        st = steps[1:] or steps
        ct = med([e.get("time_ms", {}).get("comm_tp") for e in st])
        done = med([e.get("tp_overlapped_done") for e in st])
        tot = med([e.get("tp_overlapped") for e in st])
        ratio = ct / ab if ct is not None and ab else None
        print(f"| {tag} | {med([e.get('time_ms', {}).get('total') for e in st]):.0f} | {fmt(ct, '{:.1f}')} | "
              f"{fmt(ratio, '{:.1f}')} | {fmt(done)} of {fmt(tot)} |")
