/* test_cuda_open.c — the CUDA backend's open (backend_cuda.cu) failing part-way gives back what it
 * had got: the workspace and scratch (64 MiB of the GPU), the cuBLASLt handle and library. Built
 * against the emulated GPU only (test_cuda_open_cuemu; tests/cuemu), whose runtime counts what is
 * held (cuemu_held) and refuses pinned memory under CUEMU_FAIL=malloc_host: the last step of the
 * open, after everything else was got.
 *
 * The backend opens once per process, so each case runs in a child (fork before any open):
 *   fault    CUEMU_FAIL=malloc_host: the first alloc fails, take_error names cudaMallocHost, and
 *            nothing is held (no device bytes, no cuBLASLt handle, the library closed);
 *   control  the same child without the fault opens: the first alloc succeeds and, that block
 *            freed, the counters read the open's own 64 MiB, one handle and one load. So the
 *            counters see what an open holds, and the fault's zeros are the release's doing (before
 *            2026-11-29 the fault case held the same as the control, until exit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/backend.h"
#include "testutil.h"

void cuemu_held(size_t *device_bytes, int *lt_handles, int *lt_loads);

typedef struct {
    int alloc_ok, status;
    size_t bytes;
    int handles, loads;
    char msg[1024];
} Outcome;

/* In a child: the cuda backend's first allocation, its error, then what is held. */
static Outcome run_child(int fault) {
    Outcome o = {0};
    int fd[2];
    if (pipe(fd) != 0) return o.status = -1, o;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (fault) setenv("CUEMU_FAIL", "malloc_host", 1);
        else unsetenv("CUEMU_FAIL");
        const Backend *be = backend_cuda();
        Outcome c = {0};
        void *p = be->alloc(NULL, MEM_PARAMS, 4096);
        Err e = {0};
        c.alloc_ok = p != NULL;
        c.status = (int)be->take_error(&e);
        snprintf(c.msg, sizeof c.msg, "%s", e.msg);
        if (p) be->free(NULL, MEM_PARAMS, p, 4096);
        cuemu_held(&c.bytes, &c.handles, &c.loads);
        ssize_t w = write(fd[1], &c, sizeof c);
        _exit(w == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fd[1]);
    ssize_t r = pid > 0 ? read(fd[0], &o, sizeof o) : -1;
    close(fd[0]);
    int ws = 0;
    if (pid > 0) waitpid(pid, &ws, 0);
    if (r != (ssize_t)sizeof o || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        memset(&o, 0, sizeof o);
        o.status = -1;
        snprintf(o.msg, sizeof o.msg, "the child failed (read %zd, wait status %d)", r, ws);
    }
    return o;
}

int main(void) {
    Outcome f = run_child(1), c = run_child(0);
    tu_check(!f.alloc_ok && f.status == ST_ERR_RUNTIME && strstr(f.msg, "cudaMallocHost") && f.bytes == 0 &&
                 f.handles == 0 && f.loads == 0,
             "an open failing at its last step gives back what it got",
             "alloc %s, status %d \"%s\"; held after: %zu device bytes, %d cuBLASLt handles, %d library loads",
             f.alloc_ok ? "succeeded" : "refused", f.status, f.msg, f.bytes, f.handles, f.loads);
    tu_check(c.alloc_ok && c.status == ST_OK && c.bytes == BACKEND_CUDA_PRIVATE_BYTES && c.handles == 1 && c.loads == 1,
             "control: an open that succeeds holds its 64 MiB, one handle and one load (the counters see them)",
             "alloc %s, status %d; held: %zu device bytes (want %zu), %d handles, %d loads", c.alloc_ok ? "ok" : "refused",
             c.status, c.bytes, (size_t)BACKEND_CUDA_PRIVATE_BYTES, c.handles, c.loads);
    return tu_exit();
}
