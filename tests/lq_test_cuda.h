/* lq_test_cuda.h -- the CUDA context of a test's `-b cuda` run, or SKIP (exit 77) without a
 * device or without CUDA in the build. Static: include from one test source. */
#ifndef LQ_TEST_CUDA_H
#define LQ_TEST_CUDA_H

#include "cuda/lq_cuda.h"
#include "lq_ops.h"

#include <stdio.h>
#include <stdlib.h>

static lq_cuda_ctx *lq_test_cuda_or_skip(const char *who) {
    int n = 0;
    lq_cuda_device_count(&n);
    if (!lq_ops_cuda() || n == 0) {
        printf("SKIP: %s\n", lq_ops_cuda() ? "no CUDA device" : "built without CUDA");
        exit(77);
    }
    lq_cuda_ctx *cc  = NULL;
    lq_err       err = {0};
    if (lq_cuda_ctx_create(0, &cc, &err) != LQ_OK) {
        fprintf(stderr, "%s: %s\n", who, err.msg);
        exit(1);
    }
    return cc;
}

#endif
