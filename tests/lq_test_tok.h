/* lq_test_tok.h -- tokenizer tests against reference ids (tests/data/tok/gen_vectors.py). */
#ifndef LQ_TEST_TOK_H
#define LQ_TEST_TOK_H

#include "lq_tok.h"
#include "lq_test.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline uint64_t fnv1a(const int32_t *ids, int64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

/* Every {"text", "ids"} line of path encodes to exactly ids (no BOS). */
static inline void test_vectors(const lq_tokenizer *t, const char *path, const char *ref_name) {
    char   *buf = NULL;
    int64_t len = 0;
    lq_err  err = {0};
    CHECK_OK(lq_read_file(path, 1 << 26, &buf, &len, &err));
    if (!buf)
        return;
    int64_t cases = 0, bad = 0;
    for (char *line = buf, *nl; line < buf + len; line = nl + 1) {
        nl = memchr(line, '\n', (size_t)(buf + len - line));
        if (!nl)
            nl = buf + len;
        *nl      = 0;
        cJSON *j = cJSON_Parse(line);
        if (!j)
            continue;
        const cJSON *tx = cJSON_GetObjectItem(j, "text"), *ids = cJSON_GetObjectItem(j, "ids");
        int32_t     *got = NULL;
        int64_t      n   = 0;
        CHECK_OK(
            lq_tok_encode(t, tx->valuestring, (int64_t)strlen(tx->valuestring), 0, &got, &n, &err));
        int same = n == cJSON_GetArraySize(ids);
        for (int64_t i = 0; same && i < n; i++)
            same = got[i] == cJSON_GetArrayItem(ids, (int)i)->valueint;
        if (!same && bad++ < 5) {
            fprintf(stderr,
                    "case %lld \"%.60s\": %lld ids, reference %d; first ids:", (long long)cases,
                    tx->valuestring, (long long)n, cJSON_GetArraySize(ids));
            for (int64_t i = 0; i < n && i < 12; i++)
                fprintf(stderr, " %d/%d", got[i],
                        i < cJSON_GetArraySize(ids) ? cJSON_GetArrayItem(ids, (int)i)->valueint
                                                    : -1);
            fputc('\n', stderr);
        }
        free(got);
        cJSON_Delete(j);
        cases++;
    }
    CHECK_MSG(bad == 0 && cases > 100, "%s: %lld of %lld cases differ from %s", path,
              (long long)bad, (long long)cases, ref_name);
    if (bad == 0)
        printf("%s: %lld strings, ids identical to %s\n", path, (long long)cases, ref_name);
    free(buf);
}

typedef struct stream_acc {
    int32_t *v;
    int64_t  n, cap;
} stream_acc;

static inline lq_status stream_take(void *user, const int32_t *ids, int64_t n, lq_err *err) {
    stream_acc *a = user;
    if (a->n + n > a->cap) {
        int64_t  nc = (a->n + n) * 2;
        int32_t *nv = realloc(a->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return lq_fail(err, LQ_ERR_NOMEM, "test: out of memory");
        a->v   = nv;
        a->cap = nc;
    }
    memcpy(a->v + a->n, ids, (size_t)n * sizeof *ids);
    a->n += n;
    return LQ_OK;
}

/* lq_tok_stream over txt[len], pushed in pieces of about `piece` bytes cut at character
 * boundaries, with parts of part_bytes: the ids must be want[nw] (the whole-text encode).
 * Returns how many cuts the stream refused. */
static inline int64_t test_stream_same(const lq_tokenizer *t, const char *txt, int64_t len,
                                       int add_bos, int64_t part_bytes, int64_t piece,
                                       const int32_t *want, int64_t nw, const char *label) {
    lq_err         err = {0};
    stream_acc     acc = {0};
    lq_tok_stream *s   = NULL;
    CHECK_OK(lq_tok_stream_create(t, add_bos, part_bytes, stream_take, &acc, &s, &err));
    if (!s)
        return 0;
    for (int64_t i = 0; i < len;) {
        int64_t e = i + piece < len ? i + piece : len;
        while (e < len && ((unsigned char)txt[e] & 0xc0) == 0x80)
            e++;
        CHECK_OK(lq_tok_stream_push(s, txt + i, e - i, &err));
        i = e;
    }
    CHECK_OK(lq_tok_stream_finish(s, &err));
    const lq_tok_stream_stats st = lq_tok_stream_get_stats(s);
    int64_t                   at = 0;
    while (at < nw && at < acc.n && acc.v[at] == want[at])
        at++;
    CHECK_MSG(acc.n == nw && at == nw,
              "%s: streamed in parts of %lld bytes: %lld ids, whole text %lld; first difference "
              "at id %lld",
              label, (long long)part_bytes, (long long)acc.n, (long long)nw, (long long)at);
    /* the stream must really have cut the text: parts of at most a few part sizes */
    const int64_t part = part_bytes > 0 ? part_bytes : (int64_t)8 << 20;
    CHECK_MSG(st.parts >= len / part / 4 && st.peak_buffered <= 4 * part + 2 * piece,
              "%s: parts of %lld bytes: %lld parts for %lld bytes, %lld bytes buffered at most "
              "(%lld of %lld cuts refused)",
              label, (long long)part_bytes, (long long)st.parts, (long long)len,
              (long long)st.peak_buffered, (long long)st.rejected, (long long)st.checks);
    printf("%s: streamed in parts of %lld bytes: %lld parts, %lld of %lld checked cuts refused, "
           "%lld bytes buffered at most; ids identical\n",
           label, (long long)part_bytes, (long long)st.parts, (long long)st.rejected,
           (long long)st.checks, (long long)st.peak_buffered);
    lq_tok_stream_free(s);
    free(acc.v);
    return st.rejected;
}

/* The whole text named by ref_path encodes to its id count and hash; prints the throughput. */
static inline void test_wikitext(const lq_tokenizer *t, const char *shared, const char *ref_path,
                                 const char *ref_name) {
    char   *ref = NULL, *txt = NULL, path[4096];
    int64_t rl = 0, tl = 0;
    lq_err  err = {0};
    CHECK_OK(lq_read_file(ref_path, 1 << 20, &ref, &rl, &err));
    cJSON *r = ref ? cJSON_Parse(ref) : NULL;
    snprintf(path, sizeof path, "%s/%s", shared,
             r ? cJSON_GetObjectItem(r, "file")->valuestring : "?");
    if (lq_read_file(path, 1 << 28, &txt, &tl, &err) != LQ_OK) {
        printf("WikiText-2 comparison skipped: %s\n", err.msg);
    } else {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        double   t0  = now_s();
        CHECK_OK(lq_tok_encode(t, txt, tl, 0, &ids, &n, &err));
        double dt = now_s() - t0;
        char   h[32];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)fnv1a(ids, n));
        int64_t want_n = (int64_t)cJSON_GetObjectItem(r, "n")->valuedouble;
        CHECK_MSG(n == want_n && !strcmp(h, cJSON_GetObjectItem(r, "fnv1a64")->valuestring),
                  "WikiText-2 test join: %lld ids (hash %s), %s %lld (hash %s)", (long long)n, h,
                  ref_name, (long long)want_n, cJSON_GetObjectItem(r, "fnv1a64")->valuestring);
        printf("WikiText-2 test join: %lld bytes -> %lld ids in %.3f s (%.2f M tokens/s) "
               "[%s]\n",
               (long long)tl, (long long)n, dt, (double)n / dt / 1e6, ref_path);
        /* streamed (what `llmquant ppl` does): the same ids, also with BOS, for the default
         * part and for parts small enough to put thousands of cuts in the text */
        int32_t *ib = NULL;
        int64_t  nb = 0;
        CHECK_OK(lq_tok_encode(t, txt, tl, 1, &ib, &nb, &err));
        test_stream_same(t, txt, tl, 1, 0, 131072, ib, nb, ref_path);
        test_stream_same(t, txt, tl, 0, 4096, 1000, ids, n, ref_path);
        test_stream_same(t, txt, tl, 0, 700, 333, ids, n, ref_path);
        free(ib);
        free(ids);
    }
    cJSON_Delete(r);
    free(ref);
    free(txt);
}

#endif
