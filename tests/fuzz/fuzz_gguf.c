/* Fuzz the GGUF reader and everything built on its metadata (lq_gguf_open_memory runs the same
 * parser as a mapped file): any bytes give LQ_OK or a status with a message, never a crash or a
 * read outside the input; accepted files keep the invariants readers rely on, decode their
 * (small) tensors, and go through the Hugging Face view (architecture, config.json, the rebuilt
 * tokenizer files), whose errors must be statuses too. */
#include "lq_dtype.h"
#include "lq_gguf.h"
#include "lq_gguf_hf.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lq_gguf *g   = NULL;
    lq_err   err = {0};
    if (lq_gguf_open_memory(data, size, "fuzz.gguf", &g, &err) != LQ_OK) {
        if (g != NULL || err.msg[0] == '\0')
            abort();
        return 0;
    }
    for (int64_t i = 0; i < lq_gguf_kv_count(g); i++) {
        const lq_gguf_kv *kv = lq_gguf_kv_get(g, i);
        if (lq_gguf_find(g, kv->key) != kv)
            abort(); /* keys are unique */
        for (int64_t j = 0; kv->type == LQ_GGUF_ARRAY && j < kv->n && j < 64; j++) {
            const char *s;
            int64_t     n, v;
            double      d;
            if (lq_gguf_arr_str(g, kv, j, &s, &n) &&
                ((const uint8_t *)s < data || (const uint8_t *)s + n > data + size))
                abort();
            (void)lq_gguf_arr_i64(kv, j, &v);
            (void)lq_gguf_arr_f64(kv, j, &d);
        }
    }
    for (int64_t i = 0; i < lq_gguf_tensor_count(g); i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, i);
        if (t->data < data || t->nbytes > (int64_t)size || t->data + t->nbytes > data + size)
            abort(); /* tensor bytes lie inside the input */
        if (lq_gguf_tensor_find(g, t->name) != t)
            abort();
        int dt = lq_dtype_from_ggml(t->ggml_type);
        if (dt >= 0 && t->numel <= (1 << 16)) {
            float *f = malloc((size_t)t->numel * sizeof(float));
            if (f && lq_convert_to_f32((lq_dtype)dt, t->data, t->numel, f) < 0)
                abort(); /* a parsed tensor is a whole number of blocks */
            free(f);
        }
    }
    const lq_gguf_arch *a = NULL;
    char               *s = NULL;
    int64_t             n = 0;
    if (lq_gguf_hf_arch(g, &a, &err) == LQ_OK) {
        if (lq_gguf_hf_config(g, a, "float16", &s, &n, &err) == LQ_OK && (!s || n <= 0))
            abort();
        free(s);
        for (int64_t i = 0; i < lq_gguf_tensor_count(g) && i < 64; i++) {
            char hf[256];
            int  ph;
            (void)lq_gguf_hf_tensor_name(g, a, lq_gguf_tensor_get(g, i)->name, hf, sizeof hf, &ph);
        }
    }
    for (int i = 0; lq_gguf_hf_file_names[i]; i++) {
        s             = NULL;
        lq_status st_ = lq_gguf_hf_file(g, lq_gguf_hf_file_names[i], &s, &n, &err);
        if (st_ == LQ_OK && !s)
            abort();
        if (st_ != LQ_OK && (s || err.msg[0] == '\0'))
            abort();
        free(s);
    }
    lq_gguf_close(g);
    return 0;
}
