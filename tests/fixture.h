/* fixture.h — reader for the float64 reference fixtures written by tests/fixtures/gen_gpt2_ref.py.
 *
 * File format "STFX0001" (all little-endian, C order, no padding or alignment):
 *   8 bytes   magic "STFX0001"
 *   uint32    entry count
 *   per entry:
 *     uint32  name length n (1..127), then n name bytes (no NUL)
 *     uint32  dtype: 0 = float64, 1 = int32       (FIXTURE_F64, FIXTURE_I32)
 *     uint32  ndim (1..4)
 *     ndim x uint64 dims
 *     data:   prod(dims) elements of dtype
 *   nothing after the last entry (trailing bytes are refused).
 *
 * The entries of gpt2_small.bin / gpt2_medium.bin are documented at the top of gen_gpt2_ref.py:
 * "config" int32 [L, NH, C, V, maxT, B, T], "inputs"/"targets" int32 (B,T) (target -1 = masked),
 * every parameter (wte, wpe, h.{l}.ln1w ... h.{l}.fcprojb, lnfw, lnfb) as float64 initial values
 * (exactly representable in float32), "logits" (B,T,V), "loss" (1), "lm_probs_row0" (V),
 * "grad.<param>", "adamw_hparams" [lr, beta1, beta2, eps, wd], "adamw_losses" (10),
 * "adamw_final.<param>".
 *
 * The reader assumes a little-endian host (x86-64, aarch64). */
#ifndef ST_FIXTURE_H
#define ST_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

enum { FIXTURE_F64 = 0, FIXTURE_I32 = 1 };

typedef struct {
    char name[128];  /* NUL-terminated */
    int dtype;       /* FIXTURE_F64 or FIXTURE_I32 */
    int ndim;        /* 1..4 */
    uint64_t dims[4];
    size_t numel;    /* product of dims */
    void *data;      /* numel doubles or int32_t, malloc'd and suitably aligned */
} FixtureEntry;

typedef struct {
    FixtureEntry *entries;
    int n;
} Fixture;

/* Reads a whole fixture file. Returns 0 on success; otherwise non-zero, *f is left empty
 * ({NULL, 0}) and err (if not NULL) holds a message naming the file and the problem
 * (bad magic, truncation, bad dtype/ndim, oversize name, duplicate name, trailing bytes). */
int fixture_load(Fixture *f, const char *path, char *err, size_t errlen);

/* The entry called name, or NULL if absent. */
const FixtureEntry *fixture_get(const Fixture *f, const char *name);

/* Frees everything fixture_load allocated; *f becomes {NULL, 0}. Safe on an empty fixture. */
void fixture_free(Fixture *f);

#endif
