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
 * an AMX Xeon (GEMM far above the probe) or a peak without a GEMM figure.
 * And the share of the CPUs other work used during a measurement (machine_others_share, which
 * marks a cached hardware profile disturbed): closed forms on hand-made marks ((4 − 1) CPU-seconds
 * of others over 2 s on 2 CPUs = 0.75; clamped at 0 and 1; -1 without /proc/stat or with another
 * CPU count), and live: one spinning child per allowed CPU over 0.5 s is seen (share > 0.3), and
 * this process spinning alone over 0.5 s counts less (its own time is not "others": negative
 * control, the share with it must stay below the children's by 0.1). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/peak.h"
#include "testutil.h"
#include "train/machine_peak.h"

static const float A = 1.0f + 0x1p-12f, M = 1.0f + 0x1p-12f, C = -1.0f;

/* 1 when got is the once-rounded a*m + c. */
static int fused(float got) { return (double)got == (double)A * (double)M + (double)C; }

/* Spins for `s` seconds of wall clock. */
static void spin(double s) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile double x = 1;
    do {
        for (int i = 0; i < 100000; i++) x = x * 1.0000001 + 1e-9;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) < s);
}

static void others_share(void) {
    MachineCpuMark a = {10, 1, 100, 2}, b = {14, 2, 102, 2}, hi = {30, 1, 102, 2}, lo = {10.5, 2, 102, 2},
                   none = {-1, 2, 102, 2}, other = {14, 2, 102, 4};
    double x = machine_others_share(&a, &b), h = machine_others_share(&a, &hi), l = machine_others_share(&a, &lo);
    double n = machine_others_share(&a, &none), o = machine_others_share(&a, &other), z = machine_others_share(&a, &a);
    tu_check(fabs(x - 0.75) < 1e-12 && h == 1 && l == 0 && n == -1 && o == -1 && z == -1,
             "others' share, closed forms", "0.75: %g; clamped 1: %g, 0: %g; unknown: %g %g %g", x, h, l, n, o, z);
    MachineCpuMark m0 = machine_cpu_mark();
    if (m0.machine_s < 0) {
        tu_check(0, "others' share, live", "/proc/stat unreadable: the share cannot be measured here");
        return;
    }
    int nc = m0.cpus < 64 ? m0.cpus : 64;
    pid_t kids[64];
    for (int i = 0; i < nc; i++)
        if ((kids[i] = fork()) == 0) {
            spin(0.7);
            _exit(0);
        }
    usleep(100000);
    MachineCpuMark k0 = machine_cpu_mark();
    usleep(500000);
    MachineCpuMark k1 = machine_cpu_mark();
    for (int i = 0; i < nc; i++)
        if (kids[i] > 0) waitpid(kids[i], NULL, 0);
    MachineCpuMark s0 = machine_cpu_mark();
    spin(0.5);
    MachineCpuMark s1 = machine_cpu_mark();
    double kid = machine_others_share(&k0, &k1), self = machine_others_share(&s0, &s1);
    tu_check(kid > 0.3, "others' share, live: a spinning child per CPU is seen", "%.2f of %d CPUs over 0.5 s", kid, nc);
    tu_check(self >= 0 && self < kid - 0.1, "control: this process spinning alone is not others' work",
             "%.2f (children's %.2f)", self, kid);
}

int main(void) {
    others_share();
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
