/* Fuzz the safetensors parser (the same code lq_st_open runs on a mapped file): any bytes must
 * give LQ_OK or a status, never a crash or a read outside the input; an accepted file must keep
 * the invariants readers rely on. */
#include "lq_st.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lq_st *st  = NULL;
    lq_err err = {0};
    if (lq_st_open_memory(data, size, "fuzz", &st, &err) != LQ_OK) {
        if (st != NULL || err.msg[0] == '\0')
            abort(); /* failure: no handle, always a message */
        return 0;
    }
    volatile uint8_t sink  = 0;
    int64_t          total = 0;
    for (int64_t i = 0; i < lq_st_count(st); i++) {
        const lq_st_tensor *t = lq_st_get(st, i);
        const uint8_t      *p = t->data;
        int64_t             n = 1;
        for (int d = 0; d < t->ndim; d++)
            n *= t->shape[d];
        if (t->ndim < 0 || t->ndim > LQ_ST_MAX_DIMS || n != t->numel ||
            t->nbytes != t->numel * lq_dtype_size(t->dtype))
            abort();
        if (p < data || p + t->nbytes > data + size)
            abort(); /* tensor bytes lie inside the input */
        if (t->nbytes > 0)
            sink ^= p[0] ^ p[t->nbytes - 1];
        if (lq_st_find(st, t->name) != t)
            abort(); /* names are unique and searchable */
        if (lq_dtype_is_float(t->dtype) && t->numel > 0 && t->numel < (1 << 16)) {
            float *f = malloc((size_t)t->numel * sizeof(float));
            if (f) {
                lq_status s = lq_st_read_f32(st, t->name, t->ndim, t->shape, f, &err);
                if (s != LQ_OK && s != LQ_ERR_WEIGHT_NONFINITE)
                    abort();
                free(f);
            }
        }
        total += t->nbytes;
    }
    if (total != lq_st_data_bytes(st) || total > (int64_t)size)
        abort();
    (void)lq_st_metadata(st, "format");
    (void)sink;
    lq_st_close(st);
    return 0;
}
