/* test_peak.c — the fp32 peak probe runs fused multiply-adds.
 *
 * MFU divides by the probe's rate (train/machine_peak.c takes the larger of it and a GEMM), and the
 * probe counts 2 FLOPs per lane and step: that is the FMA peak only if each step is one FMA. In
 * this ISO C build GCC does not contract `a * b + c` (-std=c11 sets -ffp-contract=off), and until
 * 2026-11-29 the probe's loop ran a multiply and an add, half the FMA rate on Intel cores (182
 * GFLOP/s against 340 on a 2-core Xeon). Oracle: rounding. With a = m = 1 + 2^-12 and c = -1,
 * a*m + c = 2^-11 + 2^-24 exactly, which a fused step returns (one rounding, the value is a float)
 * and a multiply then an add cannot (the product rounds to 1 + 2^-11 first, a tie to even). The
 * double-precision value of a*m + c is exact, so it is the fused result.
 * Negative control: the same check on a multiply and an add in separate statements (volatile
 * product) must fail, so the inputs tell one rounding from two. A build without an FMA instruction
 * (neither AVX-512 nor AVX2+FMA) expects the two-rounding value instead, and says so.
 * Also the rule of the trainer's note that bf16 may be slower than fp32 here
 * (machine_peak_bf16_slow), on the figures of the CPUs measured: it fires on the 2-core Xeon without
 * AMX (bf16 GEMM 153 GFLOP/s, FMA probe 356), not on the Zen 5 (dot-product probe 907, GEMM 880),
 * an AMX Xeon (GEMM far above the probe) or a peak without a GEMM figure. */
#include <math.h>
#include <stdio.h>

#include "core/peak.h"
#include "testutil.h"
#include "train/machine_peak.h"

static const float A = 1.0f + 0x1p-12f, M = 1.0f + 0x1p-12f, C = -1.0f;

/* 1 when got is the once-rounded a*m + c. */
static int fused(float got) { return (double)got == (double)A * (double)M + (double)C; }

int main(void) {
    float got = peak_fma_block(1, A, M, C);
    volatile float p = A * M;
    float two = p + C;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    tu_check(fused(got), "probe step is one fused multiply-add", "got %a, fused %a, multiply-then-add %a", got,
             (float)((double)A * M + C), two);
#else
    tu_check(got == two && !fused(got), "probe step without an FMA instruction (this target has none)",
             "got %a, multiply-then-add %a", got, two);
#endif
    tu_check(!fused(two), "control: a multiply then an add fails the check", "multiply-then-add %a", two);
    /* The loop keeps stepping the same accumulators: 3 steps of acc*1 + 0.5 from 0 give 1.5, on every lane. */
    float three = peak_fma_block(3, 0.0f, 1.0f, 0.5f);
    tu_check(three == 1.5f, "probe accumulators step in place", "3 steps of acc + 0.5 from 0: %g (expected 1.5)", three);
    /* The probe itself runs and reports a rate. */
    double f = peak_measure_fp32(1, 20.0);
    tu_check(f > 0 && isfinite(f), "probe measures a rate", "%.1f GFLOP/s on 1 thread", f * 1e-9);
    const struct { double probe, gemm; int slow; const char *what; } cpus[] = {
        {356e9, 153e9, 1, "2-core Xeon, no AMX"}, {907e9, 880e9, 0, "2-core Zen 5"},
        {1.4e12, 9.0e12, 0, "16-core Xeon with AMX"}, {356e9, 0, 0, "no GEMM figure (--peak-gflops)"},
    };
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
        MachinePeak p = {.probe = cpus[i].probe, .gemm = cpus[i].gemm};
        int got = machine_peak_bf16_slow(&p);
        tu_check(got == cpus[i].slow, "bf16-slower note", "%s: probe %.0f, GEMM %.0f GFLOP/s -> %d (expected %d)",
                 cpus[i].what, cpus[i].probe / 1e9, cpus[i].gemm / 1e9, got, cpus[i].slow);
    }
    return tu_exit();
}
