/* Public quantized-checkpoint loader (llmquant.h lq_checkpoint_*): config.json's
 * quantization_config + the safetensors shards of a directory, with one lq_qlinear per
 * quantized Linear read on first request (views into the mapping, copies where alignment or
 * dtype require) and kept until close. */
#include "lq_qformat.h"
#include "lq_json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct lq_checkpoint {
    lq_qconfig      cfg;
    lq_st          *st;
    char          **names; /* sorted module names; one block */
    int64_t         count;
    lq_qbuf        *bufs;   /* [count] */
    unsigned char  *loaded; /* [count] */
    pthread_mutex_t mu;     /* guards lazy loading: the handle is shared between readers */
};

LQ_API void lq_checkpoint_close(lq_checkpoint *ck) {
    if (!ck)
        return;
    for (int64_t i = 0; ck->bufs && i < ck->count; i++)
        lq_qbuf_free(&ck->bufs[i]);
    free(ck->bufs);
    free(ck->loaded);
    free(ck->names);
    lq_st_close(ck->st);
    lq_qconfig_free(&ck->cfg);
    pthread_mutex_destroy(&ck->mu);
    free(ck);
}

LQ_API lq_status lq_checkpoint_open(const char *dir, lq_checkpoint **out, lq_err *err) {
    LQ_RETURN_IF(!dir || !out, err, LQ_ERR_INVALID_ARG, "lq_checkpoint_open: NULL argument");
    *out              = NULL;
    lq_checkpoint *ck = calloc(1, sizeof *ck);
    LQ_RETURN_IF(!ck, err, LQ_ERR_NOMEM, "%s: out of memory", dir);
    pthread_mutex_init(&ck->mu, NULL);
    lq_status st;
    cJSON    *root = NULL;
    char      path[4096];
    if (!lq_path_join(path, sizeof path, dir, "config.json"))
        LQ_FAIL_GOTO(err, LQ_ERR_INVALID_ARG, "%s: path too long", dir);
    LQ_TRY_GOTO(lq_json_load_file(path, 64ll << 20, &root, err));
    LQ_TRY_GOTO(lq_qconfig_parse(root, path, &ck->cfg, err));
    LQ_TRY_GOTO(lq_st_open_dir(dir, &ck->st, err));
    LQ_TRY_GOTO(lq_qlinear_list(ck->st, &ck->cfg, &ck->names, &ck->count, err));
    ck->bufs   = calloc((size_t)(ck->count ? ck->count : 1), sizeof *ck->bufs);
    ck->loaded = calloc((size_t)(ck->count ? ck->count : 1), 1);
    if (!ck->bufs || !ck->loaded)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", dir);
    *out = ck;
    ck   = NULL;
    st   = LQ_OK;
done:
    cJSON_Delete(root);
    lq_checkpoint_close(ck);
    return st;
}

LQ_API lq_format lq_checkpoint_format(const lq_checkpoint *ck) {
    return ck ? ck->cfg.format : LQ_FMT_DENSE;
}

LQ_API int64_t lq_checkpoint_num_linears(const lq_checkpoint *ck) {
    return ck ? ck->count : 0;
}

LQ_API const char *lq_checkpoint_linear_name(const lq_checkpoint *ck, int64_t i) {
    return ck && i >= 0 && i < ck->count ? ck->names[i] : NULL;
}

static int cmp_name(const void *key, const void *elem) {
    return strcmp(key, *(const char *const *)elem);
}

LQ_API lq_status lq_checkpoint_get_linear(const lq_checkpoint *ck_c, const char *name,
                                          lq_qlinear *out, lq_err *err) {
    LQ_RETURN_IF(!ck_c || !name || !out, err, LQ_ERR_INVALID_ARG,
                 "lq_checkpoint_get_linear: NULL argument");
    /* Loading on first use mutates the cache behind a const handle; the mutex makes that safe
     * for concurrent readers, and descriptors never move once loaded. */
    lq_checkpoint *ck  = (lq_checkpoint *)(uintptr_t)ck_c;
    char *const   *hit = bsearch(name, ck->names, (size_t)ck->count, sizeof *ck->names, cmp_name);
    LQ_RETURN_IF(!hit, err, LQ_ERR_NOT_FOUND, "%s: no quantized linear of that name", name);
    const int64_t i  = hit - ck->names;
    lq_status     st = LQ_OK;
    pthread_mutex_lock(&ck->mu);
    if (!ck->loaded[i]) {
        st            = lq_qlinear_read(ck->st, ck->names[i], &ck->cfg, 0, 0, &ck->bufs[i], err);
        ck->loaded[i] = st == LQ_OK;
    }
    if (st == LQ_OK)
        *out = ck->bufs[i].q;
    pthread_mutex_unlock(&ck->mu);
    return st;
}
