/* SentencePiece tokenizer.model (Llama-2) against sentencepiece's own ids
 * (tests/data/tok/gen_vectors.py): 336 strings id for id (WikiText-2 lines and edge cases:
 * whitespace runs, byte fallback, CJK, emoji, control-piece look-alikes), the whole WikiText-2
 * test join by count + FNV-1a of the ids, malformed and unsupported models rejected with their
 * codes. Prints the encode throughput. */
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

static void test_vectors(const lq_tokenizer *t, const char *path) {
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
    CHECK_MSG(bad == 0 && cases > 300, "%lld of %lld cases differ from sentencepiece",
              (long long)bad, (long long)cases);
    printf("%lld strings: ids identical to sentencepiece\n", (long long)cases);
    free(buf);
}

static void test_wikitext(const lq_tokenizer *t, const char *shared, const char *ref_path) {
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
                  "WikiText-2 test join: %lld ids (hash %s), sentencepiece %lld (hash %s)",
                  (long long)n, h, (long long)want_n,
                  cJSON_GetObjectItem(r, "fnv1a64")->valuestring);
        printf("WikiText-2 test join: %lld bytes -> %lld ids in %.3f s (%.2f M tokens/s), "
               "identical to sentencepiece\n",
               (long long)tl, (long long)n, dt, (double)n / dt / 1e6);
        free(ids);
    }
    cJSON_Delete(r);
    free(ref);
    free(txt);
}

static void test_rejects(const char *model_path) {
    char         *buf = NULL;
    int64_t       len = 0;
    lq_err        err = {0};
    lq_tokenizer *t   = NULL;
    CHECK_OK(lq_read_file(model_path, 1 << 26, &buf, &len, &err));
    if (!buf)
        return;
    /* truncated inside a piece */
    CHECK_EQ_INT(lq_tok_load_memory(buf, (size_t)len / 2 + 3, LQ_TOK_SPM, "half.model", &t, &err),
                 LQ_ERR_TOKENIZER_FORMAT);
    CHECK(t == NULL && strstr(err.msg, "half.model"));
    /* not a protobuf */
    CHECK_EQ_INT(lq_tok_load_memory("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11, LQ_TOK_SPM,
                                    "junk.model", &t, &err),
                 LQ_ERR_TOKENIZER_FORMAT);
    /* a unigram model: one piece {piece "a", score 0, type 1}, trainer_spec {model_type 1} */
    static const unsigned char uni[] = {0x0a, 0x08, 0x0a, 0x01, 'a',  0x15, 0,
                                        0,    0,    0,    0x12, 0x02, 0x18, 0x01};
    CHECK_EQ_INT(lq_tok_load_memory(uni, sizeof uni, LQ_TOK_SPM, "uni.model", &t, &err),
                 LQ_ERR_TOKENIZER_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "UNIGRAM") != NULL, "%s", err.msg);
    /* A 4-piece BPE model without byte fallback: a run of unknown characters is one <unk>,
     * as sentencepiece emits it. Pieces: <unk> (UNKNOWN), "a", U+2581, U+2581 "a" (score 1). */
    static const unsigned char bpe[] = {
        0x0a, 0x0e, 0x0a, 0x05, '<',  'u',  'n',  'k',  '>',  0x15, 0,   0,    0,
        0,    0x18, 0x02, 0x0a, 0x0a, 0x0a, 0x01, 'a',  0x15, 0,    0,   0,    0,
        0x18, 0x01, 0x0a, 0x0c, 0x0a, 0x03, 0xe2, 0x96, 0x81, 0x15, 0,   0,    0,
        0,    0x18, 0x01, 0x0a, 0x0d, 0x0a, 0x04, 0xe2, 0x96, 0x81, 'a', 0x15, 0,
        0,    0x80, 0x3f, 0x18, 0x01, 0x12, 0x02, 0x18, 0x02};
    CHECK_OK(lq_tok_load_memory(bpe, sizeof bpe, LQ_TOK_SPM, "tiny.model", &t, &err));
    if (t) {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        CHECK_OK(lq_tok_encode(t, "a  a", 4, 0, &ids, &n, &err)); /* extra spaces removed */
        CHECK(n == 2 && ids[0] == 3 && ids[1] == 3);
        free(ids);
        CHECK_OK(lq_tok_encode(t, "xyz a", 5, 0, &ids, &n, &err));
        CHECK_MSG(n == 3 && ids[0] == 2 && ids[1] == 0 && ids[2] == 3, "n %lld", (long long)n);
        free(ids);
        lq_tok_free(t);
    }
    free(buf);
}

int main(void) {
    const char *shared = lq_test_env_or_skip("LQ_SHARED");
    const char *data   = lq_test_env_or_skip("LQ_TEST_DATA");
    char        model[4096], vec[4096], ref[4096];
    snprintf(model, sizeof model, "%s/tokenizers/llama2/tokenizer.model", shared);
    snprintf(vec, sizeof vec, "%s/tok/llama2_spm.jsonl", data);
    snprintf(ref, sizeof ref, "%s/tok/llama2_spm_wikitext2.json", data);
    lq_tokenizer *t   = NULL;
    lq_err        err = {0};
    CHECK_OK(lq_tok_load_file(model, &t, &err));
    if (!t) {
        fprintf(stderr, "%s\n", err.msg);
        return lq_test_end("tok_spm");
    }
    CHECK_EQ_INT(lq_tok_get_kind(t), LQ_TOK_SPM);
    CHECK_EQ_INT(lq_tok_vocab_size(t), 32000);
    CHECK_EQ_INT(lq_tok_bos_id(t), 1);
    CHECK_EQ_INT(lq_tok_eos_id(t), 2);
    CHECK(lq_tok_adds_bos(t));
    CHECK(!strcmp(lq_tok_piece(t, 29871), "\xe2\x96\x81"));
    int32_t *ids = NULL;
    int64_t  n   = 0;
    CHECK_OK(lq_tok_encode(t, "Hello", 5, 1, &ids, &n, &err));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 15043);
    free(ids);
    test_vectors(t, vec);
    test_wikitext(t, shared, ref);
    lq_tok_free(t);
    test_rejects(model);
    return lq_test_end("tok_spm");
}
