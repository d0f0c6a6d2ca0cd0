/* sanitize.c — AddressSanitizer's defaults for the sanitizer build (ST_SANITIZE; the second half of
 * `make test`). Empty in every other build.
 *
 * The runtime calls __asan_default_options() before it reads ASAN_OPTIONS, so a variable set by a
 * user or a test (detect_leaks=0 under mpirun) still overrides these, option by option. The link
 * pulls this object out of libst_core.a by its anchor (-Wl,-u,st_sanitize_anchor, CMakeLists.txt):
 * a -u of the hook itself is met by libasan.so's weak default, so the archive would not be searched.
 *
 * quarantine_size_mb=32 (ASan's default is 256): freed blocks wait in the quarantine before reuse
 * so that a late access to them is caught. oneDNN's GEMM takes a fresh buffer from posix_memalign
 * on every call whose operands are strided (the attention's per-head blocks, ld = 3C: 460 a step
 * of test_pp's model), so under the default each process touched about 256 MB of new pages before
 * any block came back: 1.25 M page faults for test_pp's equivalence runs, 714 K at 16 MB, and 31 s
 * against 23 s (Zen 5 VM, 2026-11-27). Our own buffers are allocated once per run and freed at its
 * end; 32 MB still holds thousands of oneDNN calls' buffers behind any block we free.
 *
 * handle_sigbus=0: a bus error reading a shard's mapping is data/shard.c's to report (one line
 * naming the file), as in a plain build; ASan's handler would take it and print a report, and be
 * the disposition shard.c passes any other SIGBUS on to (test_shard_sigbus's controls). */
#if defined(__SANITIZE_ADDRESS__)
int st_sanitize_anchor;
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=32:handle_sigbus=0"; }
#endif
