/* Quantization to a GGUF file (lq_gguf_job.h).
 *
 * Memory: the input is mapped; each tensor goes through a slab of rows at a time (float32 and
 * encoded copies of at most LQ_GGUF_SLAB bytes of float32, or one row), and its pages are
 * dropped once written, so a 70B input needs a few hundred MiB, not its size. */
#define _DEFAULT_SOURCE /* madvise(MADV_DONTNEED) */
#include "lq_gguf_job.h"

#include "lq_dtype.h"
#include "lq_gguf.h"
#include "lq_gguf_hf.h"
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

struct lq_gguf_sink {
    const lq_gguf_ftype *ft;
    lq_gguf             *g;
    lq_gguf_out         *o;
    FILE                *f;
    char                 out[PATH_MAX], tmp[PATH_MAX + 64];
    int64_t              nt, next; /* tensors; next position of order[] to write */
    int64_t             *order;    /* llama.cpp's order: tensor index at each position */
    uint32_t            *types;    /* GGML type at each position */
    int                 *layer;    /* layer of each tensor (-1: none) */
    char               **hf;       /* Hugging Face name of each tensor (methods other than rtn) */
    int                 *perm;     /* heads llama.cpp permuted its rows over (0: none) */
    uint8_t            **blocks;   /* what the method made of each tensor, or NULL */
    float              **fdata;    /* float values a method gave for a tensor (GGUF's), or NULL */
    const lq_gguf_arch  *arch;     /* the input's (methods other than rtn) */
    float               *x;        /* slab in float32 */
    uint8_t             *q;        /* slab encoded */
    int64_t              cap;      /* floats in x */
    int                  nthreads, finished;
    int64_t              requant, n_fallback, bytes_in, from_method, counts[64];
};

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

static lq_status write_rounded(lq_gguf_sink *s, const lq_gguf_tensor *t, uint32_t type,
                               lq_err *err) {
    if (type == t->ggml_type) { /* kept as stored */
        LQ_TRY(lq_gguf_out_write_data(s->o, s->f, t->data, t->nbytes, s->out, err));
        drop_pages(t->data, t->nbytes);
        return LQ_OK;
    }
    const int dt_in = lq_dtype_from_ggml(t->ggml_type);
    if (dt_in < 0 || !lq_dtype_is_float((lq_dtype)dt_in))
        LQ_FAIL(err, LQ_ERR_GGUF_TYPE, "%s: tensor %s: type %s cannot be decoded to requantize",
                lq_gguf_path(s->g), t->name, lq_ggml_type_name(t->ggml_type));
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
    if (slab * ne0 > s->cap) {
        free(s->x), free(s->q);
        s->x   = lq_malloc_n(slab * ne0, sizeof(float));
        s->q   = lq_malloc_n(slab * ne0, sizeof(float)); /* no encoding is wider than float32 */
        s->cap = s->x && s->q ? slab * ne0 : 0;
        if (!s->cap)
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory for %lld rows of %s",
                    lq_gguf_path(s->g), (long long)slab, t->name);
    }
    for (int64_t r = 0; r < rows; r += slab) {
        const int64_t  nr  = rows - r < slab ? rows - r : slab;
        const uint8_t *src = t->data + r * in_row;
        const int64_t  bad = lq_convert_to_f32((lq_dtype)dt_in, src, nr * ne0, s->x);
        if (bad != 0)
            LQ_FAIL(err, bad < 0 ? LQ_ERR_GGUF_TYPE : LQ_ERR_WEIGHT_NONFINITE,
                    "%s: tensor %s: %s", lq_gguf_path(s->g), t->name,
                    bad < 0 ? "cannot be decoded" : "holds NaN or Inf values");
        LQ_TRY(encode_rows(type, s->x, nr, ne0, out_row, s->q, s->nthreads));
        LQ_TRY(lq_gguf_out_write_data(s->o, s->f, s->q, nr * out_row, s->out, err));
        drop_pages(src, nr * in_row);
    }
    return LQ_OK;
}

/* The Hugging Face row that GGUF row p of tensor ti holds: llama.cpp interleaves q/k rows per
 * rotary head (GGUF row h*hd + 2i + j holds row h*hd + j*hd/2 + i). */
static int64_t hf_row(const lq_gguf_sink *s, int64_t ti, int64_t n, int64_t p) {
    const int64_t heads = s->perm[ti], hd = heads > 0 ? n / heads : 0;
    if (heads <= 0)
        return p;
    const int64_t h = p / hd, i = (p % hd) / 2, j = p % 2;
    return h * hd + j * (hd / 2) + i;
}

/* A method's blocks, in llama.cpp's row order. */
static lq_status write_blocks(lq_gguf_sink *s, int64_t ti, uint32_t type, lq_err *err) {
    const lq_gguf_tensor *t = lq_gguf_tensor_get(s->g, ti);
    int                   bb;
    const int64_t         be = lq_ggml_type_block(type, &bb), row = t->ne[0] / be * bb;
    const int64_t         n  = t->numel / t->ne[0];
    for (int64_t p = 0; p < n; p++) {
        const int64_t r = hf_row(s, ti, n, p);
        LQ_TRY(lq_gguf_out_write_data(s->o, s->f, s->blocks[ti] + r * row, row, s->out, err));
    }
    free(s->blocks[ti]);
    s->blocks[ti] = NULL;
    s->from_method++;
    return LQ_OK;
}

/* A method's float values, in llama.cpp's row order, encoded in the planned type. */
static lq_status write_floats(lq_gguf_sink *s, int64_t ti, uint32_t type, lq_err *err) {
    const lq_gguf_tensor *t = lq_gguf_tensor_get(s->g, ti);
    int                   bb;
    const int64_t         be = lq_ggml_type_block(type, &bb), ne0 = t->ne[0];
    const int64_t         n = t->numel / ne0, row = ne0 / be * bb;
    float                *x = lq_malloc_n(t->numel, sizeof(float));
    uint8_t              *q = lq_malloc_n(n, (size_t)row);
    lq_status             st = LQ_OK;
    if (!x || !q) {
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->name);
        goto done;
    }
    for (int64_t p = 0; p < n; p++)
        memcpy(x + p * ne0, s->fdata[ti] + hf_row(s, ti, n, p) * ne0, (size_t)ne0 * sizeof(float));
    st = encode_rows(type, x, n, ne0, row, q, s->nthreads);
    if (st != LQ_OK)
        st = lq_fail(err, st, "%s: cannot encode as %s", t->name, lq_ggml_type_name(type));
    else
        st = lq_gguf_out_write_data(s->o, s->f, q, n * row, s->out, err);
    free(s->fdata[ti]);
    s->fdata[ti] = NULL;
    s->from_method++;
done:
    free(x), free(q);
    return st;
}

lq_status lq_gguf_sink_write_layer(lq_gguf_sink *s, int64_t layer, lq_err *err) {
    for (; s->next < s->nt && s->layer[s->order[s->next]] <= layer; s->next++) {
        const int64_t         ti = s->order[s->next];
        const uint32_t        ty = s->types[s->next];
        const lq_gguf_tensor *t  = lq_gguf_tensor_get(s->g, ti);
        LQ_TRY(s->blocks[ti]  ? write_blocks(s, ti, ty, err)
               : s->fdata[ti] ? write_floats(s, ti, ty, err)
                              : write_rounded(s, t, ty, err));
    }
    return LQ_OK;
}

/* Position (in the file's order) of the tensor of Hugging Face weight name hf, -1 if none. */
static int64_t hf_pos(const lq_gguf_sink *s, const char *hf) {
    for (int64_t p = 0; s->hf && p < s->nt; p++)
        if (s->hf[s->order[p]] && !strcmp(s->hf[s->order[p]], hf))
            return p;
    return -1;
}

lq_dtype lq_gguf_sink_type(const lq_gguf_sink *s, const char *hf) {
    const int64_t p  = hf_pos(s, hf);
    const int     dt = p < 0 ? -1 : lq_dtype_from_ggml(s->types[p]);
    return dt >= LQ_DT_Q4_0 ? (lq_dtype)dt : (lq_dtype)0;
}

bool lq_gguf_sink_has(const lq_gguf_sink *s, const char *hf) {
    return hf_pos(s, hf) >= 0;
}

lq_status lq_gguf_sink_put_f32(lq_gguf_sink *s, const char *hf, const float *x, int64_t numel,
                               lq_err *err) {
    const int64_t p = hf_pos(s, hf);
    if (p < 0 || s->blocks[s->order[p]] || s->fdata[s->order[p]])
        LQ_FAIL(err, LQ_ERR_INTERNAL, "%s: %s", hf, p < 0 ? "no GGUF tensor" : "given twice");
    const int64_t         ti = s->order[p];
    const lq_gguf_tensor *t  = lq_gguf_tensor_get(s->g, ti);
    if (numel != t->numel)
        LQ_FAIL(err, LQ_ERR_INTERNAL, "%s: %lld values for %lld", hf, (long long)numel,
                (long long)t->numel);
    float *c = lq_malloc_n(numel, sizeof(float));
    if (!c)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", hf);
    const float shift = lq_gguf_hf_shift(s->arch, hf); /* Gemma's norms: GGUF stores 1 + w */
    for (int64_t i = 0; i < numel; i++)
        c[i] = x[i] + shift;
    s->fdata[ti] = c;
    return LQ_OK;
}

lq_status lq_gguf_sink_put(lq_gguf_sink *s, const char *hf, uint8_t *blocks, lq_err *err) {
    const int64_t p = hf_pos(s, hf);
    if (p < 0 || s->blocks[s->order[p]] || s->fdata[s->order[p]]) {
        free(blocks);
        LQ_FAIL(err, LQ_ERR_INTERNAL, "%s: %s", hf, p < 0 ? "no GGUF tensor" : "given twice");
    }
    s->blocks[s->order[p]] = blocks;
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

/* Options that mean nothing (or something else) when the GGUF type decides the grid. */
lq_status lq_gguf_check(const char *method, const lq_opts *o, lq_err *err) {
    const struct {
        int         set;
        const char *name, *why;
    } moot[] = {
        {o->set.bits, "--bits", "the GGUF type sets each tensor's code width"},
        {o->set.group_size, "--group-size", "the GGUF type sets the block size"},
        {o->set.sym, "--sym", "the GGUF type sets the grid"},
        {o->set.mse, "--mse", "ggml's search sets each block's scales"},
        {o->set.mse_weighted, "--mse-weighted", "ggml's search sets each block's scales"},
        {o->desc_act, "--desc-act", "a GGUF file has no g_idx"},
        {o->static_groups, "--static-groups", "each block's scales come when GPTQ reaches it"},
        {o->awq_scales, "--awq-scales", "not with GGUF output yet"},
        {o->set.target_bpw, "--target-bpw", "the GGUF mix sets each tensor's type"},
        {o->set.awq_clip, "--awq-clip", "ggml's search sets each block's range"},
        {o->set.out_dtype, "--out-dtype", "scales are the type's own (fp16)"},
        {o->set.max_shard_size, "--max-shard-size", "the output is one file"},
        {o->set.check_ppl, "--check-ppl", "not with GGUF output yet: run llmquant ppl on it"},
        {o->set.max_ppl_increase, "--max-ppl-increase", "not with GGUF output yet"},
    };
    if (strcmp(method, "rtn") && strcmp(method, "gptq") && strcmp(method, "awq"))
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "--format gguf: method %s does not write GGUF (rtn, gptq and awq do)", method);
    for (size_t i = 0; i < sizeof moot / sizeof moot[0]; i++)
        if (moot[i].set)
            LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s with --format gguf: %s", moot[i].name,
                    moot[i].why);
    return LQ_OK;
}

void lq_gguf_sink_free(lq_gguf_sink *s) {
    if (!s)
        return;
    if (s->f)
        fclose(s->f);
    if (!s->finished && s->tmp[0])
        unlink(s->tmp);
    for (int64_t i = 0; i < s->nt; i++) {
        if (s->hf)
            free(s->hf[i]);
        if (s->blocks)
            free(s->blocks[i]);
        if (s->fdata)
            free(s->fdata[i]);
    }
    free(s->hf), free(s->blocks), free(s->fdata), free(s->perm), free(s->layer);
    free(s->x), free(s->q), free(s->order), free(s->types);
    lq_gguf_out_free(s->o);
    lq_gguf_close(s->g);
    free(s);
}

lq_status lq_gguf_sink_open(const char *method, const char *model, const char *out_path,
                            const char *type, const lq_opts *opt, const char *dir,
                            const lq_callbacks *cb, lq_gguf_sink **out, lq_err *err) {
    *out                     = NULL;
    const lq_gguf_ftype *ft  = lq_gguf_ftype_find(type);
    lq_status            st  = LQ_OK;
    if (!ft)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "--format gguf:%s: unknown type (types: %s)", type,
                lq_gguf_ftype_list());
    LQ_TRY(lq_gguf_check(method, opt, err));
    if (!lq_gguf_is_gguf_file(model))
        LQ_FAIL(err, LQ_ERR_UNSUPPORTED,
                "%s: --format gguf reads a GGUF file (a Hugging Face checkpoint's tokenizer and "
                "metadata cannot be written as GGUF yet: convert it with llama.cpp's "
                "convert_hf_to_gguf.py first)", model);
    if (!strcmp(opt->device, "cuda") && !strcmp(method, "rtn"))
        say(cb, "rtn rounds the weights alone, tensor by tensor as they are read: it runs on the "
                "CPU (--device cuda has nothing to compute for it)");
    LQ_TRY(check_out(model, out_path, opt->force, err));
    lq_gguf_sink *s = calloc(1, sizeof *s);
    if (!s)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    s->ft       = ft;
    s->nthreads = opt->threads > 0 ? (int)opt->threads : omp_get_max_threads();
    snprintf(s->out, sizeof s->out, "%s", out_path);
    LQ_TRY_GOTO(lq_gguf_open(model, &s->g, err));
    s->nt     = lq_gguf_tensor_count(s->g);
    const int64_t nt1 = s->nt > 0 ? s->nt : 1;
    s->order  = lq_malloc_n(nt1, sizeof *s->order);
    s->types  = lq_malloc_n(nt1, sizeof *s->types);
    s->layer  = lq_malloc_n(nt1, sizeof *s->layer);
    s->perm   = lq_calloc_n(nt1, sizeof *s->perm);
    s->blocks = lq_calloc_n(nt1, sizeof *s->blocks);
    s->fdata  = lq_calloc_n(nt1, sizeof *s->fdata);
    if (!s->order || !s->types || !s->layer || !s->perm || !s->blocks || !s->fdata)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model);
    /* calibrated: the types llama-quantize gives a file made with an importance matrix */
    LQ_TRY_GOTO(lq_gguf_plan_types(s->g, ft, strcmp(method, "rtn") != 0, s->order, s->types,
                                   &s->n_fallback, err));
    for (int64_t i = 0; i < s->nt; i++)
        s->layer[i] = lq_gguf_layer_of(lq_gguf_tensor_get(s->g, i)->name);
    if (strcmp(method, "rtn")) { /* the linears a method hands over, by Hugging Face name */
        const lq_gguf_arch *a;
        LQ_TRY_GOTO(lq_gguf_hf_arch(s->g, &a, err));
        s->arch    = a;
        int64_t ne = 0;
        if (a->moe || (lq_gguf_get_i64(s->g, "llama.expert_count", &ne) && ne > 0))
            LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED,
                         "%s: GGUF output of %s from a mixture-of-experts model: not yet (rtn "
                         "writes it)", model, method);
        if (!(s->hf = lq_calloc_n(nt1, sizeof *s->hf)))
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model);
        for (int64_t i = 0; i < s->nt; i++) {
            char hf[256];
            int  ph = 0;
            if (lq_gguf_hf_tensor_name(s->g, a, lq_gguf_tensor_get(s->g, i)->name, hf, sizeof hf,
                                       &ph)) {
                if (!(s->hf[i] = strdup(hf)))
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", model);
                s->perm[i] = ph;
            }
        }
    }

    /* llama-quantize's header: the input's key/values less the split ones, then the
     * quantization version and the file type (moved to the end, as gguf_set_val does) */
    int64_t align = 32;
    if (lq_gguf_get_i64(s->g, "general.alignment", &align) && (align < 1 || align > (1 << 20)))
        align = 32;
    LQ_TRY_GOTO(lq_gguf_out_create((uint32_t)align, &s->o, err));
    for (int64_t i = 0; i < lq_gguf_kv_count(s->g); i++)
        LQ_TRY_GOTO(lq_gguf_out_copy_kv(s->o, s->g, lq_gguf_kv_get(s->g, i), err));
    LQ_TRY_GOTO(lq_gguf_out_set_u32(s->o, "general.quantization_version", GGML_QNT_VERSION, err));
    LQ_TRY_GOTO(lq_gguf_out_set_u32(s->o, "general.file_type", (uint32_t)ft->ftype, err));
    lq_gguf_out_remove(s->o, "split.no");
    lq_gguf_out_remove(s->o, "split.count");
    lq_gguf_out_remove(s->o, "split.tensors.count");
    for (int64_t p = 0; p < s->nt; p++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(s->g, s->order[p]);
        LQ_TRY_GOTO(lq_gguf_out_add_tensor(s->o, t->name, s->types[p], t->ndim, t->ne, err));
        const int dt = lq_dtype_from_ggml(t->ggml_type);
        s->requant += s->types[p] != t->ggml_type && dt >= LQ_DT_Q4_0;
        s->bytes_in += t->nbytes;
        if (s->types[p] < 64)
            s->counts[s->types[p]]++;
    }
    if (s->requant) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "%s: %lld tensors are already quantized and are rounded again (start from an "
                 "F16/BF16/F32 GGUF for the best result)", model, (long long)s->requant);
        say(cb, msg);
    }
    if (s->n_fallback) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "%lld tensors have rows that are not a whole number of the blocks of their %s "
                 "type and use llama-quantize's fallback type", (long long)s->n_fallback, type);
        say(cb, msg);
    }

    /* a temporary file beside the output (or in dir), renamed onto it when complete */
    {
        char d[PATH_MAX], base[PATH_MAX];
        snprintf(d, sizeof d, "%s", out_path);
        snprintf(base, sizeof base, "%s", out_path);
        snprintf(s->tmp, sizeof s->tmp, "%s/.%s.lqtmp.%ld", dir ? dir : dirname(d), basename(base),
                 (long)getpid());
        const int fd = open(s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            const int e = errno;
            s->tmp[0]   = 0;
            LQ_FAIL_GOTO(err, e == ENOENT ? LQ_ERR_NOT_FOUND : lq_status_from_errno(e),
                         "%s: cannot create the output: %s", out_path, strerror(e));
        }
        if (!(s->f = fdopen(fd, "wb"))) {
            close(fd);
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", out_path);
        }
        setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    }
    LQ_TRY_GOTO(lq_gguf_out_write_header(s->o, s->f, out_path, err));
    LQ_TRY_GOTO(lq_gguf_sink_write_layer(s, -1, err));
    *out = s;
    return LQ_OK;
done:
    lq_gguf_sink_free(s);
    return st;
}

lq_status lq_gguf_sink_finish(lq_gguf_sink *s, void *rep_cjson, lq_err *err) {
    LQ_TRY(lq_gguf_sink_write_layer(s, INT64_MAX, err));
    LQ_TRY(finish_file(s->f, s->tmp, s->out, err));
    s->finished = 1;
    cJSON *r = rep_cjson, *ty = cJSON_AddObjectToObject(r, "tensor_types");
    cJSON_AddStringToObject(r, "output", s->out);
    cJSON_AddStringToObject(r, "format", "gguf");
    cJSON_AddStringToObject(r, "gguf_type", s->ft->name);
    cJSON_AddNumberToObject(r, "gguf_file_type", s->ft->ftype);
    for (int k = 0; k < 64; k++)
        if (s->counts[k])
            cJSON_AddNumberToObject(ty, lq_ggml_type_name((uint32_t)k), (double)s->counts[k]);
    cJSON_AddNumberToObject(r, "tensors", (double)s->nt);
    cJSON_AddNumberToObject(r, "tensors_from_method", (double)s->from_method);
    cJSON_AddNumberToObject(r, "fallback_tensors", (double)s->n_fallback);
    cJSON_AddNumberToObject(r, "requantized_tensors", (double)s->requant);
    cJSON_AddNumberToObject(r, "input_tensor_bytes", (double)s->bytes_in);
    cJSON_AddNumberToObject(r, "output_bytes", (double)lq_gguf_out_file_bytes(s->o));
    return LQ_OK;
}

lq_status lq_quantize_gguf(const char *method, const char *model, const char *out_path,
                           const char *type, const lq_opts *opt, const lq_callbacks *cb,
                           char **report_json, lq_err *err) {
    const double  t0 = lq_now();
    lq_gguf_sink *s  = NULL;
    cJSON        *r  = NULL;
    lq_status     st = LQ_OK;
    LQ_TRY(lq_gguf_sink_open(method, model, out_path, type, opt, NULL, cb, &s, err));
    for (int64_t p = 0; p < s->nt; p++) {
        const lq_gguf_tensor *t = lq_gguf_tensor_get(s->g, s->order[p]);
        if (progress(cb, p, s->nt, t0, t->name))
            LQ_FAIL_GOTO(err, LQ_ERR_INTERRUPTED, "interrupted at tensor %s", t->name);
        LQ_TRY_GOTO(lq_gguf_sink_write_layer(s, s->layer[s->order[p]], err));
    }
    progress(cb, s->nt, s->nt, t0, "done");
    if (!(r = cJSON_CreateObject()))
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(r, "command", "quantize");
    cJSON_AddStringToObject(r, "method", method);
    cJSON_AddStringToObject(r, "model", model);
    LQ_TRY_GOTO(lq_gguf_sink_finish(s, r, err));
    cJSON_AddNumberToObject(r, "seconds", lq_now() - t0);
    cJSON_AddNumberToObject(r, "peak_rss_bytes", (double)lq_peak_rss_bytes());
    if (report_json && !(*report_json = cJSON_PrintUnformatted(r)))
        st = lq_fail(err, LQ_ERR_NOMEM, "out of memory");
done:
    cJSON_Delete(r);
    lq_gguf_sink_free(s);
    return st;
}
