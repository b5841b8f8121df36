/* Fuzz the GGUF reader and everything built on its metadata (lq_gguf_open_memory runs the same
 * parser as a mapped file): any bytes give LQ_OK or a status with a message, never a crash or a
 * read outside the input; accepted files keep the invariants readers rely on, decode their
 * (small) tensors, and go through the Hugging Face view (architecture, config.json, the rebuilt
 * tokenizer files), whose errors must be statuses too. */
#include "lq_dtype.h"
#include "lq_gguf.h"
#include "lq_gguf_hf.h"
#include "lq_gguf_write.h"

#include <stdio.h>
#include <stdlib.h>

/* --format gguf: llama-quantize's type plan over any accepted file, and the header written from
 * it (every key copied, every tensor added) must be a status, never a crash; the plan is a
 * permutation of the tensors with types the writer knows. */
static void plan_and_write(const lq_gguf *g, const char *type, int has_imatrix) {
    const int64_t nt    = lq_gguf_tensor_count(g);
    int64_t      *order = malloc((size_t)(nt ? nt : 1) * sizeof *order);
    uint32_t     *types = malloc((size_t)(nt ? nt : 1) * sizeof *types);
    char         *seen  = calloc((size_t)(nt ? nt : 1), 1);
    lq_err        err   = {0};
    int64_t       nf;
    lq_gguf_out  *o = NULL;
    if (order && types && seen &&
        lq_gguf_plan_types(g, lq_gguf_ftype_find(type), has_imatrix, order, types, &nf, &err) ==
            LQ_OK) {
        for (int64_t i = 0; i < nt; i++) {
            int bb;
            if (order[i] < 0 || order[i] >= nt || seen[order[i]]++ ||
                lq_ggml_type_block(types[i], &bb) <= 0)
                abort();
        }
        FILE *f = fopen("/dev/null", "wb");
        if (f && lq_gguf_out_create(32, &o, &err) == LQ_OK) {
            lq_status st = LQ_OK;
            for (int64_t i = 0; st == LQ_OK && i < lq_gguf_kv_count(g); i++)
                st = lq_gguf_out_copy_kv(o, g, lq_gguf_kv_get(g, i), &err);
            for (int64_t i = 0; st == LQ_OK && i < nt; i++) {
                const lq_gguf_tensor *t = lq_gguf_tensor_get(g, order[i]);
                st = lq_gguf_out_add_tensor(o, t->name, types[i], t->ndim, t->ne, &err);
            }
            if (st == LQ_OK)
                st = lq_gguf_out_write_header(o, f, "fuzz-out.gguf", &err);
            if (st != LQ_OK && err.msg[0] == '\0')
                abort();
        }
        if (f)
            fclose(f);
    } else if (order && types && seen && err.msg[0] == '\0') {
        abort();
    }
    lq_gguf_out_free(o);
    free(order), free(types), free(seen);
}

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
            int      bb;
            const int be = lq_dtype_block((lq_dtype)dt, &bb);
            uint8_t *q   = be > 1 ? malloc((size_t)t->nbytes) : NULL;
            int      fin = 1;
            for (int64_t k = 0; f && k < t->numel; k++)
                fin &= f[k] - f[k] == 0; /* finite */
            if (q && fin && !lq_ggml_encode((lq_dtype)dt, f, t->numel / be, q))
                abort(); /* a block type encodes */
            free(q);
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
    plan_and_write(g, size % 2 ? "Q4_K_M" : size % 4 ? "Q2_K" : "Q4_0", (int)(size % 3 == 0));
    lq_gguf_close(g);
    return 0;
}
