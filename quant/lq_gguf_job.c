/* Quantization to a GGUF file (lq_gguf_job.h).
 *
 * Memory: the input is mapped; each tensor goes through a slab of rows at a time (float32 and
 * encoded copies of at most LQ_GGUF_SLAB bytes of float32, or one row), and its pages are
 * dropped once written, so a 70B input needs a few hundred MiB, not its size. */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED) */
#include "lq_gguf_job.h"

#include "lq_dtype.h"
#include "lq_gguf.h"
#include "lq_gguf_write.h"
#include "lq_outdir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LQ_GGUF_SLAB ((int64_t)64 << 20)
#define GGML_QNT_VERSION 2

static int progress(const lq_callbacks *cb, int64_t step, int64_t total, double t0,
                    const char *detail) {
    if (!cb || !cb->progress)
        return 0;
    const double el = lq_now() - t0;
    lq_progress  p  = {"quantize", step, total, el,
                       step > 0 ? el / (double)step * (double)(total - step) : -1, detail};
    return cb->progress(&p, cb->user);
}

static void say(const lq_callbacks *cb, const char *msg) {
    if (cb && cb->log)
        cb->log(LQ_LOG_WARN, msg, cb->user);
}

/* The output may be replaced (--force) only when it is a regular GGUF file. */
static lq_status check_out(const char *model, const char *out, int force, lq_err *err) {
    struct stat so, si;
    if (lstat(out, &so) != 0)
        return errno == ENOENT ? LQ_OK
                               : lq_fail(err, lq_status_from_errno(errno), "%s: %s", out,
                                         strerror(errno));
    if (stat(model, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: the output is the input model", out);
    if (!force)
        LQ_FAIL(err, LQ_ERR_EXISTS, "%s: exists (--force replaces a GGUF file)", out);
    if (!S_ISREG(so.st_mode) || !lq_gguf_is_gguf_file(out))
        LQ_FAIL(err, LQ_ERR_OUTPUT_FOREIGN,
                "%s: not a GGUF file; --force replaces only a GGUF file, this is left as it is",
                out);
    return LQ_OK;
}

typedef struct job {
    const lq_gguf *g;
    lq_gguf_out   *o;
    FILE          *f;
    const char    *label;
    float         *x;   /* slab in float32 */
    uint8_t       *q;   /* slab encoded */
    int64_t        cap; /* floats in x */
    int            nthreads;
    lq_err        *err;
} job;

/* The page-aligned span of a tensor's bytes, handed back to the kernel once written. */
static void drop_pages(const void *p, int64_t n) {
    const long      pg = sysconf(_SC_PAGESIZE);
    const uintptr_t a  = (uintptr_t)p, lo = (a + (uintptr_t)pg - 1) / (uintptr_t)pg * (uintptr_t)pg;
    const uintptr_t hi = (a + (uintptr_t)n) / (uintptr_t)pg * (uintptr_t)pg;
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static lq_status encode_rows(uint32_t type, const float *x, int64_t rows, int64_t ne0,
                             int64_t row_bytes, uint8_t *q, int nthreads) {
    const int      dt = lq_dtype_from_ggml(type);
    int            bb;
    const int64_t  be = lq_ggml_type_block(type, &bb);
    int            bad = 0;
#pragma omp parallel for schedule(static) num_threads(nthreads) reduction(| : bad)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ne0;
        uint8_t     *qr = q + r * row_bytes;
        if (dt == LQ_DT_F32)
            memcpy(qr, xr, (size_t)ne0 * 4);
        else if (dt == LQ_DT_F16)
            lq_f32_to_f16_array(xr, ne0, (uint16_t *)(void *)qr);
        else if (dt == LQ_DT_BF16)
            for (int64_t i = 0; i < ne0; i++) {
                const uint16_t h = lq_f32_to_bf16(xr[i]);
                memcpy(qr + 2 * i, &h, 2);
            }
        else
            bad |= !lq_ggml_encode((lq_dtype)dt, xr, ne0 / be, qr);
    }
    return bad ? LQ_ERR_INTERNAL : LQ_OK;
}

static lq_status write_tensor(job *j, const lq_gguf_tensor *t, uint32_t type) {
    if (type == t->ggml_type) { /* kept as stored */
        LQ_TRY(lq_gguf_out_write_data(j->o, j->f, t->data, t->nbytes, j->label, j->err));
        drop_pages(t->data, t->nbytes);
        return LQ_OK;
    }
    const int dt_in = lq_dtype_from_ggml(t->ggml_type);
    if (dt_in < 0 || !lq_dtype_is_float((lq_dtype)dt_in))
        LQ_FAIL(j->err, LQ_ERR_GGUF_TYPE, "%s: tensor %s: type %s cannot be decoded to requantize",
                lq_gguf_path(j->g), t->name, lq_ggml_type_name(t->ggml_type));
    const int64_t ne0 = t->ne[0], rows = t->numel / ne0;
    int           bbi, bbo;
    const int64_t bei = lq_ggml_type_block(t->ggml_type, &bbi);
    const int64_t beo = lq_ggml_type_block(type, &bbo);
    const int64_t in_row = ne0 / bei * bbi, out_row = ne0 / beo * bbo;
    int64_t       slab = LQ_GGUF_SLAB / 4 / ne0;
    if (slab < 1)
        slab = 1;
    if (slab > rows)
        slab = rows;
    if (slab * ne0 > j->cap) {
        free(j->x), free(j->q);
        j->x   = lq_malloc_n(slab * ne0, sizeof(float));
        j->q   = lq_malloc_n(slab * ne0, sizeof(float)); /* no encoding is wider than float32 */
        j->cap = j->x && j->q ? slab * ne0 : 0;
        if (!j->cap)
            LQ_FAIL(j->err, LQ_ERR_NOMEM, "%s: out of memory for %lld rows of %s",
                    lq_gguf_path(j->g), (long long)slab, t->name);
    }
    for (int64_t r = 0; r < rows; r += slab) {
        const int64_t  nr  = rows - r < slab ? rows - r : slab;
        const uint8_t *src = t->data + r * in_row;
        const int64_t  bad = lq_convert_to_f32((lq_dtype)dt_in, src, nr * ne0, j->x);
        if (bad != 0)
            LQ_FAIL(j->err, bad < 0 ? LQ_ERR_GGUF_TYPE : LQ_ERR_WEIGHT_NONFINITE,
                    "%s: tensor %s: %s", lq_gguf_path(j->g), t->name,
                    bad < 0 ? "cannot be decoded" : "holds NaN or Inf values");
        LQ_TRY(encode_rows(type, j->x, nr, ne0, out_row, j->q, j->nthreads));
        LQ_TRY(lq_gguf_out_write_data(j->o, j->f, j->q, nr * out_row, j->label, j->err));
        drop_pages(src, nr * in_row);
    }
    return LQ_OK;
}

static lq_status finish_file(FILE *f, const char *tmp, const char *out, lq_err *err) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        const int e = errno;
        LQ_FAIL(err, lq_status_from_errno(e), "%s: write failed: %s", out, strerror(e));
    }
    if (rename(tmp, out) != 0) {
        const int e = errno;
        LQ_FAIL(err, lq_status_from_errno(e), "%s: rename failed: %s", out, strerror(e));
    }
    return LQ_OK;
}

lq_status lq_quantize_gguf(const char *method, const char *model, const char *out_path,
                           const char *type, const lq_opts *opt, const lq_callbacks *cb,
                           char **report_json, lq_err *err) {
    const double         t0 = lq_now();
    const lq_gguf_ftype *ft = lq_gguf_ftype_find(type);
    lq_gguf             *g  = NULL;
    lq_gguf_out         *o  = NULL;
    job                  j  = {.err = err, .label = out_path};
    int64_t             *order = NULL;
    uint32_t            *types = NULL;
    FILE                *f     = NULL;
    char                 tmp[PATH_MAX + 64] = "";
    lq_status            st    = LQ_OK;
    if (!ft)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--format gguf:%s: unknown type (types: %s)", type,
                lq_gguf_ftype_list());
    if (strcmp(method, "rtn"))
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "--format gguf: method %s does not write GGUF yet (rtn does: llama-quantize's "
                "rounding and mixes)", method);
    if (!lq_gguf_is_gguf_file(model))
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: --format gguf reads a GGUF file (a Hugging Face checkpoint's tokenizer and "
                "metadata cannot be written as GGUF yet: convert it with llama.cpp's "
                "convert_hf_to_gguf.py first)", model);
    const struct {
        int         set;
        const char *name, *why;
    } moot[] = {
        {opt->set.bits, "--bits", "the GGUF type sets each tensor's code width"},
        {opt->set.group_size, "--group-size", "the GGUF type sets the block size"},
        {opt->set.sym, "--sym", "the GGUF type sets the grid"},
        {opt->set.mse, "--mse", "ggml's rounding searches each type's own grid"},
        {opt->set.out_dtype, "--out-dtype", "scales are the type's own (fp16)"},
        {opt->set.max_shard_size, "--max-shard-size", "the output is one file"},
        {opt->set.check_ppl, "--check-ppl", "not with GGUF output yet: run llmquant ppl on it"},
        {opt->set.max_ppl_increase, "--max-ppl-increase", "not with GGUF output yet"},
    };
    for (size_t i = 0; i < sizeof moot / sizeof moot[0]; i++)
        if (moot[i].set)
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s with --format gguf: %s", moot[i].name,
                    moot[i].why);
    if (!strcmp(opt->device, "cuda"))
        say(cb, "rtn rounds the weights alone, tensor by tensor as they are read: it runs on the "
                "CPU (--device cuda has nothing to compute for it)");
    LQ_TRY(check_out(model, out_path, opt->force, err));
    LQ_TRY_GOTO(lq_gguf_open(model, &g, err));
    const int64_t nt = lq_gguf_tensor_count(g);
    order = lq_malloc_n(nt > 0 ? nt : 1, sizeof *order);
    types = lq_malloc_n(nt > 0 ? nt : 1, sizeof *types);
    if (!order || !types)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model);
    int64_t n_fallback = 0;
    LQ_TRY_GOTO(lq_gguf_plan_types(g, ft, order, types, &n_fallback, err));

    /* llama-quantize's header: the input's key/values less the split ones, then the
     * quantization version and the file type (moved to the end, as gguf_set_val does) */
    int64_t align = 32;
    if (lq_gguf_get_i64(g, "general.alignment", &align) && (align < 1 || align > (1 << 20)))
        align = 32;
    LQ_TRY_GOTO(lq_gguf_out_create((uint32_t)align, &o, err));
    for (int64_t i = 0; i < lq_gguf_kv_count(g); i++)
        LQ_TRY_GOTO(lq_gguf_out_copy_kv(o, g, lq_gguf_kv_get(g, i), err));
    LQ_TRY_GOTO(lq_gguf_out_set_u32(o, "general.quantization_version", GGML_QNT_VERSION, err));
    LQ_TRY_GOTO(lq_gguf_out_set_u32(o, "general.file_type", (uint32_t)ft->ftype, err));
    lq_gguf_out_remove(o, "split.no");
    lq_gguf_out_remove(o, "split.count");
    lq_gguf_out_remove(o, "split.tensors.count");
    int64_t requant = 0, bytes_in = 0, counts[64] = {0};
    for (int64_t i = 0; i < nt; i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, order[i]);
        LQ_TRY_GOTO(lq_gguf_out_add_tensor(o, t->name, types[i], t->ndim, t->ne, err));
        const int dt = lq_dtype_from_ggml(t->ggml_type);
        requant += types[i] != t->ggml_type && dt >= LQ_DT_Q4_0;
        bytes_in += t->nbytes;
        if (types[i] < 64)
            counts[types[i]]++;
    }
    if (requant) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "%s: %lld tensors are already quantized and are rounded again (start from an "
                 "F16/BF16/F32 GGUF for the best result)", model, (long long)requant);
        say(cb, msg);
    }
    if (n_fallback) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "%lld tensors have rows that are not a whole number of the blocks of their %s type and use "
                 "llama-quantize's fallback type", (long long)n_fallback, type);
        say(cb, msg);
    }

    /* a temporary file beside the output, renamed onto it when complete */
    {
        char dir[PATH_MAX], base[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", out_path);
        snprintf(base, sizeof base, "%s", out_path);
        snprintf(tmp, sizeof tmp, "%s/.%s.lqtmp.%ld", dirname(dir), basename(base), (long)getpid());
        const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            const int e = errno;
            tmp[0] = 0;
            LQ_FAIL_GOTO(err, e == ENOENT ? LQ_ERR_NOT_FOUND : lq_status_from_errno(e),
                         "%s: cannot create the output: %s", out_path, strerror(e));
        }
        f = fdopen(fd, "wb");
        if (!f) {
            close(fd);
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", out_path);
        }
        setvbuf(f, NULL, _IOFBF, 1 << 20);
    }
    j.g        = g;
    j.o        = o;
    j.f        = f;
    j.nthreads = opt->threads > 0 ? (int)opt->threads : omp_get_max_threads();
    LQ_TRY_GOTO(lq_gguf_out_write_header(o, f, out_path, err));
    for (int64_t i = 0; i < nt; i++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(g, order[i]);
        if (progress(cb, i, nt, t0, t->name))
            LQ_FAIL_GOTO(err, LQ_ERR_INTERRUPTED, "interrupted at tensor %s", t->name);
        LQ_TRY_GOTO(write_tensor(&j, t, types[i]));
    }
    progress(cb, nt, nt, t0, "done");
    LQ_TRY_GOTO(finish_file(f, tmp, out_path, err));
    tmp[0] = 0; /* renamed: nothing to remove */
    {
        cJSON *r = cJSON_CreateObject(), *ty = cJSON_AddObjectToObject(r, "tensor_types");
        cJSON_AddStringToObject(r, "command", "quantize");
        cJSON_AddStringToObject(r, "method", method);
        cJSON_AddStringToObject(r, "model", model);
        cJSON_AddStringToObject(r, "output", out_path);
        cJSON_AddStringToObject(r, "format", "gguf");
        cJSON_AddStringToObject(r, "gguf_type", ft->name);
        cJSON_AddNumberToObject(r, "gguf_file_type", ft->ftype);
        for (int k = 0; k < 64; k++)
            if (counts[k])
                cJSON_AddNumberToObject(ty, lq_ggml_type_name((uint32_t)k), (double)counts[k]);
        cJSON_AddNumberToObject(r, "tensors", (double)nt);
        cJSON_AddNumberToObject(r, "fallback_tensors", (double)n_fallback);
        cJSON_AddNumberToObject(r, "requantized_tensors", (double)requant);
        cJSON_AddNumberToObject(r, "input_tensor_bytes", (double)bytes_in);
        cJSON_AddNumberToObject(r, "output_bytes", (double)lq_gguf_out_file_bytes(o));
        cJSON_AddNumberToObject(r, "seconds", lq_now() - t0);
        cJSON_AddNumberToObject(r, "peak_rss_bytes", (double)lq_peak_rss_bytes());
        char *rep = cJSON_PrintUnformatted(r);
        cJSON_Delete(r);
        if (report_json)
            *report_json = rep;
        else
            free(rep);
    }
done:
    if (f)
        fclose(f);
    if (tmp[0])
        unlink(tmp);
    free(j.x), free(j.q), free(order), free(types);
    lq_gguf_out_free(o);
    lq_gguf_close(g);
    return st;
}
