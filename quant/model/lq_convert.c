/* lq_convert: a checkpoint (GGUF file or Hugging Face directory) -> a Hugging Face directory
 * in F16/BF16/F32: config.json, safetensors, tokenizer and generation files.
 *
 * Tensor by tensor: decode (GGML blocks, llama.cpp's q/k row order undone), check for NaN/Inf,
 * store in the output dtype, drop the source pages. Memory: one tensor in float32 plus its
 * converted copy. The output appears under its final name only when complete (lq_outdir). */
#include "lq_config.h"
#include "lq_json.h"
#include "lq_outdir.h"
#include "lq_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lq_dtype out_dtype(const char *name) {
    return !strcmp(name, "bfloat16") ? LQ_DT_BF16 : !strcmp(name, "float32") ? LQ_DT_F32 : LQ_DT_F16;
}

static lq_status write_config(const lq_outdir *od, const lq_source *src, const char *dtype,
                              lq_err *err) {
    int64_t     len;
    const char *text = lq_source_config(src, &len);
    cJSON      *root = NULL;
    char        dst[4200];
    LQ_TRY(lq_json_parse(text, (size_t)len, lq_source_config_label(src), &root, err));
    cJSON_DeleteItemFromObject(root, "torch_dtype");
    cJSON_AddStringToObject(root, "torch_dtype", dtype);
    lq_status st = lq_outdir_path(od, "config.json", dst, sizeof dst, err);
    if (st == LQ_OK)
        st = lq_json_write_file(root, dst, err);
    cJSON_Delete(root);
    return st;
}

static int report_progress(const lq_callbacks *cb, int64_t step, int64_t total, double t0,
                           const char *detail) {
    if (!cb || !cb->progress)
        return 0;
    const double el = lq_now() - t0;
    lq_progress  p  = {"convert", step, total, el,
                       step > 0 ? el / (double)step * (double)(total - step) : -1, detail};
    return cb->progress(&p, cb->user);
}

lq_status lq_convert(const char *model, const char *out_dir, const lq_params *p,
                     const lq_callbacks *cb, char **report_json, lq_err *err) {
    if (report_json)
        *report_json = NULL;
    if (!model || !out_dir || !*model || !*out_dir)
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "lq_convert: model and out_dir are required");
    const double    t0  = lq_now();
    lq_opts         o;
    lq_opts_read(p, &o);
    lq_source      *src = NULL;
    lq_st_writer   *wr  = NULL;
    lq_outdir       od = {.lock_fd = -1};
    float          *buf = NULL;
    int64_t         buf_n = 0, bytes_in = 0;
    lq_model_config cfg;
    lq_status       st    = LQ_OK;
    const char     *dname = o.out_dtype;
    const lq_dtype  dt    = out_dtype(dname);

    if (lq_paths_overlap(model, out_dir))
        LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG, "%s: output overlaps the model %s", out_dir, model);
    LQ_TRY_GOTO(lq_outdir_check(out_dir, o.force, err));
    LQ_TRY_GOTO(lq_source_open(model, &src, err));
    cfg = *lq_source_model_config(src);
    if (cfg.quantized)
        LQ_FAIL_GOTO(err, LQ_ERR_UNSUPPORTED,
                     "%s: already quantized; convert reads float and GGUF checkpoints", model);
    lq_st        *st_in = lq_source_st(src);
    const int64_t n     = lq_st_count(st_in);
    for (int64_t i = 0; i < n; i++) { /* every tensor decodes, before anything is written */
        const lq_st_tensor *t = lq_st_get(st_in, i);
        if (!lq_dtype_is_float(t->dtype))
            LQ_FAIL_GOTO(err, LQ_ERR_WEIGHT_DTYPE,
                         "%s: tensor \"%s\" has dtype %s; convert handles float and GGML tensors",
                         lq_st_file_of(st_in, t), t->name, lq_dtype_name(t->dtype));
    }
    LQ_TRY_GOTO(lq_outdir_begin(&od, out_dir, o.force, err));
    LQ_TRY_GOTO(lq_st_writer_create(od.tmp_path, o.max_shard_size, &wr, err));
    LQ_TRY_GOTO(lq_st_writer_set_metadata(wr, "format", "pt", err));
    for (int64_t i = 0; i < n; i++) {
        const lq_st_tensor *t = lq_st_get(st_in, i);
        if (report_progress(cb, i, n, t0, t->name))
            LQ_FAIL_GOTO(err, LQ_ERR_INTERRUPTED, "interrupted at tensor %s", t->name);
        if (t->numel > buf_n) {
            free(buf);
            buf   = lq_malloc_n(t->numel, sizeof(float));
            buf_n = buf ? t->numel : 0;
            if (!buf)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory for tensor \"%s\" (%lld values)",
                             model, t->name, (long long)t->numel);
        }
        LQ_TRY_GOTO(lq_st_read_f32(st_in, t->name, t->ndim, t->shape, buf, err));
        LQ_TRY_GOTO(lq_st_writer_add_f32(wr, t->name, dt, t->ndim, t->shape, buf, err));
        lq_st_release(st_in, t);
        bytes_in += t->nbytes;
    }
    report_progress(cb, n, n, t0, "done");
    LQ_TRY_GOTO(lq_st_writer_finish(wr, err));
    LQ_TRY_GOTO(write_config(&od, src, dname, err));
    LQ_TRY_GOTO(lq_outdir_write_side_files(&od, src, err));
    {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "command", "convert");
        cJSON_AddStringToObject(j, "model", model);
        cJSON_AddStringToObject(j, "source_format", lq_source_is_gguf(src) ? "gguf" : "hf");
        cJSON_AddStringToObject(j, "out_dir", out_dir);
        cJSON_AddStringToObject(j, "model_type", cfg.model_type);
        cJSON_AddStringToObject(j, "out_dtype", dname);
        cJSON_AddNumberToObject(j, "tensors", (double)n);
        cJSON_AddNumberToObject(j, "input_tensor_bytes", (double)bytes_in);
        cJSON_AddNumberToObject(j, "seconds", lq_now() - t0);
        cJSON_AddNumberToObject(j, "peak_rss_bytes", (double)lq_peak_rss_bytes());
        char *rep = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!rep)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "out of memory");
        char rp[4200];
        st = lq_outdir_path(&od, "llmquant_report.json", rp, sizeof rp, err);
        if (st == LQ_OK)
            st = lq_write_file(rp, rep, (int64_t)strlen(rep), err);
        if (st == LQ_OK)
            st = lq_outdir_commit(&od, err);
        if (st == LQ_OK && report_json)
            *report_json = rep;
        else
            free(rep);
    }
done:
    lq_st_writer_free(wr);
    lq_outdir_abort(&od);
    free(buf);
    lq_source_close(src);
    return st;
}
