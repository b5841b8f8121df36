/* lq_test_tok.h -- tokenizer tests against reference ids (tests/data/tok/gen_vectors.py). */
#ifndef LQ_TEST_TOK_H
#define LQ_TEST_TOK_H

#include "lq_tok.h"
#include "lq_test.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t fnv1a(const int32_t *ids, int64_t n) {
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
static void test_vectors(const lq_tokenizer *t, const char *path, const char *ref_name) {
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

/* The whole text named by ref_path encodes to its id count and hash; prints the throughput. */
static void test_wikitext(const lq_tokenizer *t, const char *shared, const char *ref_path,
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
                  "WikiText-2 test join: %lld ids (hash %s), %s %lld (hash %s)",
                  (long long)n, h, ref_name, (long long)want_n,
                  cJSON_GetObjectItem(r, "fnv1a64")->valuestring);
        printf("WikiText-2 test join: %lld bytes -> %lld ids in %.3f s (%.2f M tokens/s) "
               "[%s]\n",
               (long long)tl, (long long)n, dt, (double)n / dt / 1e6, ref_path);
        free(ids);
    }
    cJSON_Delete(r);
    free(ref);
    free(txt);
}

#endif
