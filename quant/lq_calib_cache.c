/* On-disk calibration cache shared by the jobs of a batch (option cache_dir).
 *
 * One directory per (model, calibration file, tokenizer, nsamples, seqlen, seed) holds
 *   windows.lqc      the tokenized calibration windows
 *   acts-NNNNN.lqc   the FP activations entering layer NNNNN (only for methods that propagate
 *                    unquantized outputs -- AWQ, int8 -- whose layer inputs do not depend on the
 *                    bit width or group size; GPTQ's do)
 * Files are float/int32 data byte-shuffled (the 4 bytes of each value grouped into planes, so
 * exponent bytes compress) and zstd-compressed, per chunk. Every file is written to a temporary
 * name and renamed, so concurrent shards of a batch never read a partial file; a reader checks
 * magic, version and dimensions and ignores anything that does not match. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "lq_calib_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define CC_MAGIC   0x4c514343u /* "LQCC" */
#define CC_VERSION 1u

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t hash_file_identity(uint64_t h, const char *path) {
    struct stat sb;
    char        rp[4096];
    if (!path || !*path)
        return fnv1a(h, "-", 1);
    if (realpath(path, rp))
        h = fnv1a(h, rp, strlen(rp));
    else
        h = fnv1a(h, path, strlen(path));
    if (stat(path, &sb) == 0) {
        int64_t v[2] = {(int64_t)sb.st_size, (int64_t)sb.st_mtime};
        h            = fnv1a(h, v, sizeof v);
    }
    return h;
}

lq_status lq_ccache_open(lq_ccache *c, const char *root, const char *model_dir, const char *calib,
                         const char *tokenizer, int64_t nsamples, int64_t seqlen, uint64_t seed,
                         lq_err *err) {
    memset(c, 0, sizeof *c);
    if (!root || !*root)
        return LQ_OK;
    char cfg[4200]; /* a directory is known by its config.json, a GGUF file by itself */
    if (!lq_dir_exists(model_dir) || !lq_path_join(cfg, sizeof cfg, model_dir, "config.json"))
        snprintf(cfg, sizeof cfg, "%s", model_dir);
    uint64_t h = 0xcbf29ce484222325ULL;
    h          = hash_file_identity(h, cfg);
    h          = hash_file_identity(h, calib);
    h          = hash_file_identity(h, tokenizer);
    int64_t v[3] = {nsamples, seqlen, (int64_t)seed};
    h            = fnv1a(h, v, sizeof v);
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: cannot create cache directory: %s", root,
                strerror(errno));
    snprintf(c->dir, sizeof c->dir, "%s/%016llx", root, (unsigned long long)h);
    if (mkdir(c->dir, 0755) != 0 && errno != EEXIST)
        LQ_FAIL(err, lq_status_from_errno(errno), "%s: %s", c->dir, strerror(errno));
    c->enabled = 1;
    return LQ_OK;
}

static void cache_path(const lq_ccache *c, const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", c->dir, name);
}

/* Shuffled + compressed chunk writer/reader. */
static int write_chunk(FILE *f, const void *data, int64_t nvals) {
    size_t         bytes = (size_t)nvals * 4;
    unsigned char *sh    = malloc(bytes ? bytes : 1);
    size_t         cap   = ZSTD_compressBound(bytes);
    void          *z     = malloc(cap);
    int            ok    = sh && z;
    if (ok) {
        const unsigned char *s = data;
        for (int64_t i = 0; i < nvals; i++)
            for (int b = 0; b < 4; b++)
                sh[(size_t)b * (size_t)nvals + (size_t)i] = s[(size_t)i * 4 + (size_t)b];
        size_t zn = ZSTD_compress(z, cap, sh, bytes, 1);
        uint64_t hdr[2] = {(uint64_t)nvals, (uint64_t)zn};
        ok = !ZSTD_isError(zn) && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(z, 1, zn, f) == zn;
    }
    free(sh);
    free(z);
    return ok;
}

static int read_chunk(FILE *f, void *data, int64_t nvals) {
    uint64_t hdr[2];
    if (fread(hdr, sizeof hdr, 1, f) != 1 || hdr[0] != (uint64_t)nvals || hdr[1] > (1ull << 40))
        return 0;
    size_t         bytes = (size_t)nvals * 4;
    void          *z     = malloc(hdr[1] ? hdr[1] : 1);
    unsigned char *sh    = malloc(bytes ? bytes : 1);
    int            ok    = z && sh && fread(z, 1, hdr[1], f) == hdr[1];
    if (ok) {
        size_t n = ZSTD_decompress(sh, bytes, z, hdr[1]);
        ok       = !ZSTD_isError(n) && n == bytes;
    }
    if (ok) {
        unsigned char *d = data;
        for (int64_t i = 0; i < nvals; i++)
            for (int b = 0; b < 4; b++)
                d[(size_t)i * 4 + (size_t)b] = sh[(size_t)b * (size_t)nvals + (size_t)i];
    }
    free(z);
    free(sh);
    return ok;
}

typedef struct cc_header {
    uint32_t magic, version;
    int64_t  dims[4];
} cc_header;

static FILE *open_tmp(const char *path, char *tmp, size_t cap) {
    snprintf(tmp, cap, "%s.tmp-%ld", path, (long)getpid());
    return fopen(tmp, "wb");
}

static int finish_tmp(FILE *f, const char *tmp, const char *path, int ok) {
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) == 0)
        return 1;
    unlink(tmp);
    return 0;
}

static FILE *open_checked(const char *path, const int64_t *dims) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    cc_header h;
    if (fread(&h, sizeof h, 1, f) != 1 || h.magic != CC_MAGIC || h.version != CC_VERSION ||
        memcmp(h.dims, dims, sizeof h.dims) != 0) {
        fclose(f);
        return NULL;
    }
    return f;
}

int lq_ccache_load_windows(const lq_ccache *c, lq_windows *w) {
    if (!c->enabled)
        return 0;
    char path[4200];
    cache_path(c, "windows.lqc", path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    cc_header h;
    int       ok = fread(&h, sizeof h, 1, f) == 1 && h.magic == CC_MAGIC &&
             h.version == CC_VERSION && h.dims[0] > 0 && h.dims[1] > 0 &&
             h.dims[0] < (1 << 24) && h.dims[1] < (1 << 24);
    if (ok) {
        memset(w, 0, sizeof *w);
        w->nsamples = h.dims[0];
        w->seqlen   = h.dims[1];
        w->ids      = malloc((size_t)(w->nsamples * w->seqlen) * sizeof(int32_t));
        w->offsets  = malloc((size_t)w->nsamples * sizeof(int64_t));
        ok          = w->ids && w->offsets && read_chunk(f, w->ids, w->nsamples * w->seqlen) &&
             fread(w->offsets, sizeof(int64_t), (size_t)w->nsamples, f) == (size_t)w->nsamples;
        if (!ok)
            lq_windows_free(w);
    }
    fclose(f);
    return ok;
}

void lq_ccache_store_windows(const lq_ccache *c, const lq_windows *w) {
    if (!c->enabled)
        return;
    char path[4200], tmp[4300];
    cache_path(c, "windows.lqc", path, sizeof path);
    FILE *f = open_tmp(path, tmp, sizeof tmp);
    if (!f)
        return;
    cc_header h = {CC_MAGIC, CC_VERSION, {w->nsamples, w->seqlen, 0, 0}};
    int       ok = fwrite(&h, sizeof h, 1, f) == 1 &&
             write_chunk(f, w->ids, w->nsamples * w->seqlen) &&
             fwrite(w->offsets, sizeof(int64_t), (size_t)w->nsamples, f) == (size_t)w->nsamples;
    finish_tmp(f, tmp, path, ok);
}

int lq_ccache_has_acts(const lq_ccache *c, int64_t layer, int64_t nchunks, int64_t numel_total,
                       int64_t d) {
    if (!c->enabled)
        return 0;
    char name[64], path[4200];
    snprintf(name, sizeof name, "acts-%05lld.lqc", (long long)layer);
    cache_path(c, name, path, sizeof path);
    int64_t dims[4] = {layer, nchunks, numel_total, d};
    FILE   *f       = open_checked(path, dims);
    if (f)
        fclose(f);
    return f != NULL;
}

lq_status lq_ccache_load_acts(const lq_ccache *c, int64_t layer, lq_spill *dst, float *buf,
                              int64_t nchunks, const int64_t *chunk_numel, int64_t d,
                              lq_err *err) {
    char name[64], path[4200];
    snprintf(name, sizeof name, "acts-%05lld.lqc", (long long)layer);
    cache_path(c, name, path, sizeof path);
    int64_t tot = 0;
    for (int64_t i = 0; i < nchunks; i++)
        tot += chunk_numel[i];
    int64_t dims[4] = {layer, nchunks, tot, d};
    FILE   *f       = open_checked(path, dims);
    if (!f)
        LQ_FAIL(err, LQ_ERR_IO, "%s: cache entry vanished or changed", path);
    lq_status st = LQ_OK;
    for (int64_t i = 0; i < nchunks && st == LQ_OK; i++) {
        if (!read_chunk(f, buf, chunk_numel[i]))
            st = lq_fail(err, LQ_ERR_ZSTD, "%s: corrupt cache chunk %lld", path, (long long)i);
        else
            st = lq_spill_append(dst, buf, chunk_numel[i], err);
    }
    fclose(f);
    return st;
}

void lq_ccache_store_acts(const lq_ccache *c, int64_t layer, lq_spill *src, float *buf, int64_t d) {
    if (!c->enabled)
        return;
    char name[64], path[4200], tmp[4300];
    snprintf(name, sizeof name, "acts-%05lld.lqc", (long long)layer);
    cache_path(c, name, path, sizeof path);
    if (access(path, F_OK) == 0)
        return; /* another job already stored it */
    int64_t n = lq_spill_count(src), tot = 0;
    for (int64_t i = 0; i < n; i++)
        tot += lq_spill_chunk_numel(src, i);
    FILE *f = open_tmp(path, tmp, sizeof tmp);
    if (!f)
        return;
    cc_header h  = {CC_MAGIC, CC_VERSION, {layer, n, tot, d}};
    int       ok = fwrite(&h, sizeof h, 1, f) == 1;
    lq_err    e;
    for (int64_t i = 0; i < n && ok; i++)
        ok = lq_spill_read(src, i, buf, &e) == LQ_OK &&
             write_chunk(f, buf, lq_spill_chunk_numel(src, i));
    finish_tmp(f, tmp, path, ok);
}
