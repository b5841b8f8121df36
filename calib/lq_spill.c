/* Activation spill store (contract in lq_spill.h). */
#include "lq_spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

typedef struct chunk {
    int64_t numel;
    float  *mem;     /* in memory, or NULL when on disk */
    int64_t off;     /* file offset of the compressed bytes */
    int64_t zbytes;  /* compressed size */
} chunk;

struct lq_spill {
    int64_t budget; /* < 0: unlimited */
    char    dir[4096];
    int     fd; /* -1 until the first spill */
    int64_t file_end;

    chunk  *chunks;
    int64_t n, cap;

    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t   *zbuf;   /* compressed bytes (append and read) */
    size_t     zcap;
    uint8_t   *shuf;   /* shuffled floats */
    size_t     shufcap;

    int64_t mem_bytes, mem_peak, disk_raw, disk_bytes, on_disk;
};

lq_status lq_spill_create(int64_t mem_budget, const char *tmp_dir, lq_spill **out, lq_err *err) {
    *out        = NULL;
    lq_spill *s = calloc(1, sizeof *s);
    if (!s)
        return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory");
    s->budget = mem_budget;
    s->fd     = -1;
    if (!tmp_dir || !*tmp_dir)
        tmp_dir = getenv("TMPDIR");
    if (!tmp_dir || !*tmp_dir)
        tmp_dir = "/tmp";
    if (strlen(tmp_dir) + 32 > sizeof s->dir) {
        free(s);
        return lq_fail(err, LQ_ERR_INVALID_ARG, "spill store: temporary directory path too long");
    }
    strcpy(s->dir, tmp_dir);
    *out = s;
    return LQ_OK;
}

void lq_spill_free(lq_spill *s) {
    if (!s)
        return;
    for (int64_t i = 0; i < s->n; i++)
        free(s->chunks[i].mem);
    free(s->chunks);
    if (s->fd >= 0)
        close(s->fd);
    ZSTD_freeCCtx(s->cctx);
    ZSTD_freeDCtx(s->dctx);
    free(s->zbuf);
    free(s->shuf);
    free(s);
}

static lq_status ensure(uint8_t **buf, size_t *cap, size_t need, lq_err *err) {
    if (need <= *cap)
        return LQ_OK;
    uint8_t *p = realloc(*buf, need);
    if (!p)
        return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory (%zu-byte buffer)", need);
    *buf = p;
    *cap = need;
    return LQ_OK;
}

/* Floats per shuffle block: keeps the scratch buffers small and constant whatever the chunk
 * size, since compression and decompression stream block by block. */
#define BLOCK_FLOATS ((int64_t)1 << 16)

/* Byte planes: byte b of float j goes to dst[b * n + j]. */
static void shuffle(const float *x, int64_t n, uint8_t *dst) {
    const uint8_t *src = (const uint8_t *)x;
    for (int64_t j = 0; j < n; j++)
        for (int b = 0; b < 4; b++)
            dst[b * n + j] = src[4 * j + b];
}

static void unshuffle(const uint8_t *src, int64_t n, float *x) {
    uint8_t *dst = (uint8_t *)x;
    for (int64_t j = 0; j < n; j++)
        for (int b = 0; b < 4; b++)
            dst[4 * j + b] = src[b * n + j];
}

static lq_status ensure_scratch(lq_spill *s, lq_err *err) {
    size_t zneed = ZSTD_CStreamOutSize();
    if (ZSTD_DStreamInSize() > zneed)
        zneed = ZSTD_DStreamInSize();
    LQ_TRY(ensure(&s->zbuf, &s->zcap, zneed, err));
    return ensure(&s->shuf, &s->shufcap, (size_t)BLOCK_FLOATS * sizeof(float), err);
}

static lq_status open_file(lq_spill *s, lq_err *err) {
    char path[sizeof s->dir + 32];
    snprintf(path, sizeof path, "%s/llmquant-spill-XXXXXX", s->dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return lq_fail(err, lq_status_from_errno(errno), "%s: cannot create spill file: %s",
                       s->dir, strerror(errno));
    /* Unlinked right away: the data lives as long as the descriptor, and a crash or kill
     * leaves nothing in the temporary directory. */
    unlink(path);
    s->fd = fd;
    return LQ_OK;
}

static lq_status write_all(lq_spill *s, const uint8_t *p, size_t n, int64_t off, lq_err *err) {
    while (n > 0) {
        ssize_t w = pwrite(s->fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return lq_fail(err, lq_status_from_errno(errno), "%s: writing spill file: %s", s->dir,
                           strerror(errno));
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return LQ_OK;
}

static lq_status read_all(lq_spill *s, uint8_t *p, size_t n, int64_t off, lq_err *err) {
    while (n > 0) {
        ssize_t r = pread(s->fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return lq_fail(err, LQ_ERR_IO, "%s: reading spill file: %s", s->dir,
                           r < 0 ? strerror(errno) : "unexpected end of file");
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return LQ_OK;
}

static lq_status spill_chunk(lq_spill *s, chunk *c, const float *x, lq_err *err) {
    if (s->fd < 0)
        LQ_TRY(open_file(s, err));
    if (!s->cctx && !(s->cctx = ZSTD_createCCtx()))
        return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory for zstd");
    LQ_TRY(ensure_scratch(s, err));
    size_t z = ZSTD_CCtx_reset(s->cctx, ZSTD_reset_session_only);
    if (!ZSTD_isError(z))
        z = ZSTD_CCtx_setParameter(s->cctx, ZSTD_c_compressionLevel, 1);
    if (!ZSTD_isError(z))
        z = ZSTD_CCtx_setPledgedSrcSize(s->cctx, (unsigned long long)c->numel * sizeof(float));
    if (ZSTD_isError(z))
        return lq_fail(err, LQ_ERR_INTERNAL, "spill store: zstd: %s", ZSTD_getErrorName(z));
    int64_t off = s->file_end;
    for (int64_t j0 = 0; j0 < c->numel; j0 += BLOCK_FLOATS) {
        int64_t nb   = c->numel - j0 < BLOCK_FLOATS ? c->numel - j0 : BLOCK_FLOATS;
        int     last = j0 + nb == c->numel;
        shuffle(x + j0, nb, s->shuf);
        ZSTD_inBuffer in = {s->shuf, (size_t)nb * sizeof(float), 0};
        for (;;) {
            ZSTD_outBuffer o   = {s->zbuf, s->zcap, 0};
            size_t         rem = ZSTD_compressStream2(s->cctx, &o, &in,
                                                      last ? ZSTD_e_end : ZSTD_e_continue);
            if (ZSTD_isError(rem))
                return lq_fail(err, LQ_ERR_INTERNAL, "spill store: zstd: %s",
                               ZSTD_getErrorName(rem));
            LQ_TRY(write_all(s, s->zbuf, o.pos, off, err));
            off += (int64_t)o.pos;
            if (last ? rem == 0 : in.pos == in.size)
                break;
        }
    }
    c->off    = s->file_end;
    c->zbytes = off - s->file_end;
    s->file_end = off;
    s->disk_bytes += c->zbytes;
    s->disk_raw += c->numel * (int64_t)sizeof(float);
    s->on_disk++;
    return LQ_OK;
}

lq_status lq_spill_append(lq_spill *s, const float *x, int64_t n, lq_err *err) {
    if (!s || !x || n < 1)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_spill_append: bad argument");
    int64_t bytes;
    if (!lq_mul_i64(n, (int64_t)sizeof(float), &bytes))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_spill_append: %lld floats overflow",
                       (long long)n);
    if (s->n == s->cap) {
        int64_t nc = s->cap ? s->cap * 2 : 64;
        chunk  *p  = realloc(s->chunks, (size_t)nc * sizeof *p);
        if (!p)
            return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory");
        s->chunks = p;
        s->cap    = nc;
    }
    chunk c = {n, NULL, 0, 0};
    if (s->budget < 0 || bytes <= s->budget - s->mem_bytes) {
        c.mem = malloc((size_t)bytes);
        if (!c.mem)
            return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory (%lld bytes)",
                           (long long)bytes);
        memcpy(c.mem, x, (size_t)bytes);
        s->mem_bytes += bytes;
        if (s->mem_bytes > s->mem_peak)
            s->mem_peak = s->mem_bytes;
    } else {
        LQ_TRY(spill_chunk(s, &c, x, err));
    }
    s->chunks[s->n++] = c;
    return LQ_OK;
}

int64_t lq_spill_count(const lq_spill *s) {
    return s ? s->n : 0;
}

int64_t lq_spill_chunk_numel(const lq_spill *s, int64_t i) {
    return (s && i >= 0 && i < s->n) ? s->chunks[i].numel : -1;
}

int lq_spill_chunk_on_disk(const lq_spill *s, int64_t i) {
    return s && i >= 0 && i < s->n && s->chunks[i].mem == NULL;
}

lq_status lq_spill_read(lq_spill *s, int64_t i, float *dst, lq_err *err) {
    if (!s || !dst || i < 0 || i >= s->n)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_spill_read: chunk %lld out of range",
                       (long long)i);
    const chunk *c   = &s->chunks[i];
    size_t       raw = (size_t)c->numel * sizeof(float);
    if (c->mem) {
        memcpy(dst, c->mem, raw);
        return LQ_OK;
    }
    if (!s->dctx && !(s->dctx = ZSTD_createDCtx()))
        return lq_fail(err, LQ_ERR_NOMEM, "spill store: out of memory for zstd");
    LQ_TRY(ensure_scratch(s, err));
    size_t z = ZSTD_DCtx_reset(s->dctx, ZSTD_reset_session_only);
    if (ZSTD_isError(z))
        return lq_fail(err, LQ_ERR_INTERNAL, "spill store: zstd: %s", ZSTD_getErrorName(z));
    int64_t       pos = c->off, end = c->off + c->zbytes;
    ZSTD_inBuffer in  = {s->zbuf, 0, 0};
    for (int64_t j0 = 0; j0 < c->numel; j0 += BLOCK_FLOATS) {
        int64_t        nb = c->numel - j0 < BLOCK_FLOATS ? c->numel - j0 : BLOCK_FLOATS;
        ZSTD_outBuffer o  = {s->shuf, (size_t)nb * sizeof(float), 0};
        while (o.pos < o.size) {
            if (in.pos == in.size) {
                size_t want = end - pos < (int64_t)s->zcap ? (size_t)(end - pos) : s->zcap;
                if (want == 0)
                    return lq_fail(err, LQ_ERR_ZSTD, "%s: spill chunk %lld is truncated",
                                   s->dir, (long long)i);
                LQ_TRY(read_all(s, s->zbuf, want, pos, err));
                pos += (int64_t)want;
                in.size = want;
                in.pos  = 0;
            }
            size_t ret = ZSTD_decompressStream(s->dctx, &o, &in);
            if (ZSTD_isError(ret))
                return lq_fail(err, LQ_ERR_ZSTD, "%s: spill chunk %lld is corrupt: %s", s->dir,
                               (long long)i, ZSTD_getErrorName(ret));
            if (ret == 0 && o.pos < o.size)
                return lq_fail(err, LQ_ERR_ZSTD, "%s: spill chunk %lld is short", s->dir,
                               (long long)i);
        }
        unshuffle(s->shuf, nb, dst + j0);
    }
    return LQ_OK;
}

lq_status lq_spill_clear(lq_spill *s, lq_err *err) {
    if (!s)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_spill_clear: NULL store");
    for (int64_t i = 0; i < s->n; i++)
        free(s->chunks[i].mem);
    s->n         = 0;
    s->mem_bytes = 0;
    s->disk_raw = s->disk_bytes = s->on_disk = 0;
    s->file_end                              = 0;
    if (s->fd >= 0 && ftruncate(s->fd, 0) != 0)
        return lq_fail(err, lq_status_from_errno(errno), "%s: truncating spill file: %s", s->dir,
                       strerror(errno));
    return LQ_OK;
}

void lq_spill_get_stats(const lq_spill *s, lq_spill_stats *st) {
    memset(st, 0, sizeof *st);
    if (!s)
        return;
    st->chunks         = s->n;
    st->chunks_on_disk = s->on_disk;
    st->mem_bytes      = s->mem_bytes;
    st->mem_peak       = s->mem_peak;
    st->scratch_bytes  = (int64_t)(s->zcap + s->shufcap);
    st->disk_raw_bytes = s->disk_raw;
    st->disk_bytes     = s->disk_bytes;
}
