/* backend_put.h — test helper shared by the backend tests (test_backend_kernels, test_cuda_optim):
 * host bytes copied into a fresh buffer of a backend's memory; an allocation failure ends the test
 * with the backend's own error, since nothing after it could run. */
#ifndef ST_TESTS_BACKEND_PUT_H
#define ST_TESTS_BACKEND_PUT_H

#include <stdio.h>
#include <stdlib.h>

#include "model/backend.h"

static inline void *backend_put(const Backend *be, const char *test, const void *h, size_t bytes) {
    void *d = be->alloc(NULL, MEM_WORKSPACE, bytes);
    if (!d) {
        Err e = {0};
        be->take_error(&e);
        fprintf(stderr, "%s: %s alloc of %zu bytes failed: %s\n", test, be->name, bytes, e.msg);
        exit(1);
    }
    be->from_host(d, h, bytes);
    return d;
}

#endif
