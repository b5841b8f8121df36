/* --device for every job (conversion, perplexity): one policy, one message. */
#include "lq_gpu.h"

#include <stdio.h>
#include <string.h>

int lq_gpu_device_count(void) {
    int n = 0; /* the device layer's probe: no driver, no device, driver too old -> 0 (CPU) */
    return lq_cuda_device_count(&n) == LQ_OK ? n : 0;
}

lq_status lq_device_pick(const char *device, int useful, const lq_callbacks *cb, lq_gpu **out,
                         lq_err *err) {
    *out = NULL;
    if (!device || !*device || !strcmp(device, "cpu"))
        return LQ_OK;
    if (strcmp(device, "auto") && strcmp(device, "cuda"))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--device %s: expected auto, cpu or cuda", device);
    /* Probing starts the CUDA runtime (~190 MB resident): only when there is work for it. */
    if (!useful && !strcmp(device, "auto"))
        return LQ_OK;
    if (lq_gpu_device_count() == 0) {
        const int   built = lq_cuda_built();
        const char *why   = built ? "no usable CUDA device (driver or GPU missing)"
                                  : "this llmquant was built without CUDA";
        if (!strcmp(device, "cuda"))
            LQ_FAIL(err, LQ_ERR_NO_DEVICE, "--device cuda: %s", why);
        if (built && cb && cb->log) {
            /* A CUDA build on a machine without a GPU says so once, then works on the CPU. */
            char msg[160];
            snprintf(msg, sizeof msg, "%s; computing on the CPU", why);
            cb->log(LQ_LOG_WARN, msg, cb->user);
        }
        return LQ_OK;
    }
    if (!useful)
        return LQ_OK;
    return lq_gpu_open(0, out, err);
}
