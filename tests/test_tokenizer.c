/* Tokenizers against reference ids from python sentencepiece / tokenizers, committed in
 * tests/data/tok/ by tests/data/tok/gen_oracle_vectors.py (see there for what each file is):
 * every case of cases.txt (the first 200 lines of WikiText-2 test, their join, edge strings, random
 * mixes) must encode to exactly the reference ids. Plus error codes for malformed / unsupported
 * files, BOS/EOS and the load_dir order. The Llama-2 tokenizer.model comes from LQ_SHARED and
 * is skipped (not failed) when absent. */
#include "lq_test.h"
#include "lq_test_tok.h"
#include "lq_gguf.h"
#include "lq_tok.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>

static char g_data[2048];

static char *slurp(const char *path, int64_t *n) {
    char  *b = NULL;
    lq_err e = {0};
    if (lq_read_file(path, 1ll << 30, &b, n, &e) != LQ_OK)
        return NULL;
    return b;
}

/* cases.txt: one hex-encoded UTF-8 string per line. */
typedef struct tcase {
    char   *s;
    int64_t n;
} tcase;

static int64_t load_cases_file(const char *p, tcase **out) {
    int64_t n;
    char   *b = slurp(p, &n);
    if (!b)
        return -1;
    int64_t cap = 0, nc = 0;
    tcase  *c = NULL;
    for (char *line = b; line < b + n;) {
        char   *nl = memchr(line, '\n', (size_t)(b + n - line));
        int64_t l  = nl ? nl - line : b + n - line;
        if (nc == cap) {
            cap = cap ? 2 * cap : 256;
            c   = realloc(c, (size_t)cap * sizeof *c);
        }
        c[nc].s = malloc((size_t)l / 2 + 1);
        c[nc].n = l / 2;
        for (int64_t i = 0; i < l / 2; i++) {
            unsigned v;
            sscanf(line + 2 * i, "%2x", &v);
            c[nc].s[i] = (char)v;
        }
        nc++;
        line += l + 1;
    }
    free(b);
    *out = c;
    return nc;
}

static int64_t load_cases(tcase **out) {
    char p[2200];
    snprintf(p, sizeof p, "%s/tok/cases.txt", g_data);
    return load_cases_file(p, out);
}

/* --encode TOKENIZER CASES: print the ids of every case, one line each (no BOS), for
 * tests/py/test_tok_oracle.py to compare with the python libraries live. */
static int encode_mode(const char *tok, const char *cases) {
    lq_tokenizer *t  = NULL;
    lq_err        e  = {0};
    tcase        *c  = NULL;
    int64_t       nc = load_cases_file(cases, &c);
    if (nc < 0 || lq_tok_load_file(tok, &t, &e) != LQ_OK) {
        fprintf(stderr, "%s\n", nc < 0 ? "cannot read cases" : e.msg);
        return 1;
    }
    for (int64_t k = 0; k < nc; k++) {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        if (lq_tok_encode(t, c[k].s, c[k].n, 0, &ids, &n, &e) != LQ_OK) {
            fprintf(stderr, "case %lld: %s\n", (long long)k, e.msg);
            return 1;
        }
        for (int64_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
        free(c[k].s);
    }
    free(c);
    lq_tok_free(t);
    return 0;
}

/* The ids of a whole text file with a checkpoint's tokenizer (directory or .gguf) or a tokenizer
 * file, BOS as the tokenizer adds it, one per line: what the oracle scripts compare with
 * llama.cpp / tokenizers / sentencepiece. The ids printed are the streamed ones (lq_tok_stream
 * in parts of 4 KiB, what `llmquant ppl` does), and they must equal the whole-text encode's. */
static int ids_mode(const char *model, const char *text) {
    lq_source    *src = NULL;
    lq_tokenizer *t   = NULL;
    lq_err        e   = {0};
    char         *b   = NULL;
    int64_t       n = 0, nid = 0;
    int32_t      *ids  = NULL;
    const int     file = !lq_dir_exists(model) && !lq_gguf_is_gguf_file(model);
    if ((file ? lq_tok_load_file(model, &t, &e) != LQ_OK
              : lq_source_open(model, &src, &e) != LQ_OK ||
                    lq_tok_load_source(src, &t, &e) != LQ_OK) ||
        lq_read_file(text, 1ll << 32, &b, &n, &e) != LQ_OK ||
        lq_tok_encode(t, b, n, lq_tok_adds_bos(t), &ids, &nid, &e) != LQ_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    stream_acc     acc = {0};
    lq_tok_stream *st  = NULL;
    if (lq_tok_stream_create(t, lq_tok_adds_bos(t), 4096, stream_take, &acc, &st, &e) != LQ_OK ||
        lq_tok_stream_push(st, b, n, &e) != LQ_OK || lq_tok_stream_finish(st, &e) != LQ_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    int64_t at = 0;
    while (at < nid && at < acc.n && acc.v[at] == ids[at])
        at++;
    if (acc.n != nid || at != nid) {
        fprintf(stderr, "%s: streamed %lld ids, whole text %lld, first difference at %lld\n", text,
                (long long)acc.n, (long long)nid, (long long)at);
        return 1;
    }
    const lq_tok_stream_stats ss = lq_tok_stream_get_stats(st);
    fprintf(stderr, "%s: streamed in %lld parts (%lld of %lld cuts refused), ids identical\n", text,
            (long long)ss.parts, (long long)ss.rejected, (long long)ss.checks);
    for (int64_t i = 0; i < acc.n; i++)
        printf("%d\n", acc.v[i]);
    lq_tok_stream_free(st);
    free(acc.v);
    free(ids);
    free(b);
    lq_tok_free(t);
    lq_source_close(src);
    return 0;
}

/* Compare every case with <name>.ids. */
static void check_vectors(const lq_tokenizer *t, const char *name, const tcase *c, int64_t nc) {
    char    p[2200];
    int64_t n;
    snprintf(p, sizeof p, "%s/tok/%s.ids", g_data, name);
    char *b = slurp(p, &n);
    CHECK_MSG(b != NULL, "missing %s", p);
    if (!b)
        return;
    char   *line = b;
    int64_t bad = 0, total = 0;
    for (int64_t k = 0; k < nc; k++) {
        int32_t  *ids = NULL;
        int64_t   ni  = 0;
        lq_err    e   = {0};
        lq_status s   = lq_tok_encode(t, c[k].s, c[k].n, 0, &ids, &ni, &e);
        CHECK_MSG(s == LQ_OK, "%s case %lld: %s", name, (long long)k, e.msg);
        char   *nl = strchr(line, '\n');
        int64_t j  = 0;
        int     ok = s == LQ_OK;
        for (char *q = line; ok && q < nl;) {
            char *end;
            long  v = strtol(q, &end, 10);
            if (end == q)
                break;
            ok = j < ni && ids[j] == v;
            j++;
            q = end;
        }
        ok = ok && j == ni;
        total += ni;
        if (!ok && bad++ < 5) {
            fprintf(stderr, "%s case %lld (%lld bytes \"%.60s\"): got", name, (long long)k,
                    (long long)c[k].n, c[k].s);
            for (int64_t i = 0; i < ni && i < 40; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n   want %.300s\n", line);
        }
        CHECK(ok || bad > 5);
        free(ids);
        line = nl + 1;
    }
    CHECK_MSG(bad == 0, "%s: %lld of %lld cases differ", name, (long long)bad, (long long)nc);
    printf("%s: %lld cases, %lld ids, %lld mismatches\n", name, (long long)nc, (long long)total,
           (long long)bad);
    free(b);
}

static lq_tokenizer *load(const char *file, lq_tok_kind kind, const char *json_override) {
    char    p[2200];
    int64_t n;
    snprintf(p, sizeof p, "%s/tok/%s", g_data, file);
    char *b = slurp(p, &n);
    CHECK_MSG(b != NULL, "missing %s", p);
    if (!b)
        return NULL;
    lq_tokenizer *t   = NULL;
    lq_err        e   = {0};
    const char   *src = json_override ? json_override : b;
    size_t        len = json_override ? strlen(json_override) : (size_t)n;
    lq_status     s   = lq_tok_load_memory(src, len, kind, file, &t, &e);
    CHECK_MSG(s == LQ_OK, "load %s: %s", file, e.msg);
    free(b);
    return t;
}

/* llama2_hf.json with the non-legacy layout: no normalizer, Metaspace(prepend first). */
static char *metaspace_json(void) {
    char    p[2200];
    int64_t n;
    snprintf(p, sizeof p, "%s/tok/llama2_hf.json", g_data);
    char *b = slurp(p, &n);
    if (!b)
        return NULL;
    cJSON *j = cJSON_ParseWithLength(b, (size_t)n);
    free(b);
    if (!j)
        return NULL;
    cJSON_ReplaceItemInObject(j, "normalizer", cJSON_CreateNull());
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "Metaspace");
    cJSON_AddStringToObject(m, "replacement", "\xe2\x96\x81");
    cJSON_AddStringToObject(m, "prepend_scheme", "first");
    cJSON_AddFalseToObject(m, "split");
    cJSON_ReplaceItemInObject(j, "pre_tokenizer", m);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static void expect_fail(const void *buf, size_t n, lq_tok_kind kind, lq_status want,
                        const char *what) {
    lq_tokenizer *t = NULL;
    lq_err        e = {0};
    lq_status     s = lq_tok_load_memory(buf, n, kind, "bad-file", &t, &e);
    CHECK_MSG(s == want, "%s: status %d (%s), want %d", what, s, e.msg, want);
    CHECK_MSG(t == NULL, "%s: tokenizer returned on failure", what);
    CHECK_MSG(strstr(e.msg, "bad-file") != NULL, "%s: message does not name the file: %s", what,
              e.msg);
    lq_tok_free(t);
}

static void test_errors(void) {
    /* protobuf: truncated varint, length past the end, group wire type */
    const uint8_t trunc[] = {0x0a, 0x80};
    const uint8_t past[]  = {0x0a, 0x7f, 0x0a, 0x01, 'a'};
    const uint8_t group[] = {0x0b};
    expect_fail(trunc, sizeof trunc, LQ_TOK_SPM, LQ_ERR_TOKENIZER_FORMAT, "truncated varint");
    expect_fail(past, sizeof past, LQ_TOK_SPM, LQ_ERR_TOKENIZER_FORMAT, "length past end");
    expect_fail(group, sizeof group, LQ_TOK_SPM, LQ_ERR_TOKENIZER_FORMAT, "group");
    /* model_type absent = UNIGRAM (the proto default) -> unsupported, named */
    const uint8_t unigram[] = {0x0a, 0x07, 0x0a, 0x05, '<', 'u', 'n', 'k', '>'};
    lq_tokenizer *t         = NULL;
    lq_err        e         = {0};
    CHECK_EQ_INT(lq_tok_load_memory(unigram, sizeof unigram, LQ_TOK_SPM, "u.model", &t, &e),
                 LQ_ERR_TOKENIZER_UNSUPPORTED);
    CHECK_MSG(strstr(e.msg, "UNIGRAM") != NULL, "%s", e.msg);
    /* BPE model without pieces / without <unk> */
    const uint8_t bpe_empty[] = {0x12, 0x02, 0x18, 0x02};
    expect_fail(bpe_empty, sizeof bpe_empty, LQ_TOK_SPM, LQ_ERR_TOKENIZER_FORMAT, "no pieces");
    const uint8_t no_unk[] = {0x0a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x02, 0x18, 0x02};
    expect_fail(no_unk, sizeof no_unk, LQ_TOK_SPM, LQ_ERR_TOKENIZER_FORMAT, "no unk");
    /* tokenizer.json */
    const char *bad_json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}";
    expect_fail(bad_json, strlen(bad_json), LQ_TOK_HF_JSON, LQ_ERR_JSON, "bad json");
    const char *wp = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}";
    expect_fail(wp, strlen(wp), LQ_TOK_HF_JSON, LQ_ERR_TOKENIZER_UNSUPPORTED, "wordpiece");
    const char *merge_oov =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    expect_fail(merge_oov, strlen(merge_oov), LQ_TOK_HF_JSON, LQ_ERR_TOKENIZER_FORMAT,
                "merge out of vocab");
    const char *bad_re = "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
                         "\"(\"}, \"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", "
                         "\"vocab\": {\"a\": 0}, \"merges\": []}}";
    expect_fail(bad_re, strlen(bad_re), LQ_TOK_HF_JSON, LQ_ERR_TOKENIZER_UNSUPPORTED, "bad re");
    const char *bad_id = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}}";
    expect_fail(bad_id, strlen(bad_id), LQ_TOK_HF_JSON, LQ_ERR_TOKENIZER_FORMAT, "bad id");
    const char *prec = "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": "
                       "\"\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}";
    expect_fail(prec, strlen(prec), LQ_TOK_HF_JSON, LQ_ERR_TOKENIZER_UNSUPPORTED, "precompiled");
    lq_tok_free(t);
}

/* A tiny byte-level tokenizer.json: merges form "ab", invalid UTF-8 becomes U+FFFD bytes. */
static void test_tiny_json(void) {
    const char *js =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
        "\"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
        "\"ab\": 2, \"\xc4\xa0\": 3, \"\xc3\xaf\": 4, \"\xc2\xbf\": 5, \"\xc2\xbd\": 6}, "
        "\"merges\": [[\"a\", \"b\"]]}}";
    lq_tokenizer *t = NULL;
    lq_err        e = {0};
    CHECK_OK(lq_tok_load_memory(js, strlen(js), LQ_TOK_HF_JSON, "tiny", &t, &e));
    if (!t)
        return;
    int32_t *ids = NULL;
    int64_t  n   = 0;
    CHECK_OK(lq_tok_encode(t, "ab a\xff", 5, 1, &ids, &n, &e));
    int32_t want[] = {2, 3, 0, 4, 5, 6}; /* no BOS: GPT-2 style has none */
    CHECK_EQ_INT(n, 6);
    for (int64_t i = 0; i < n && i < 6; i++)
        CHECK_EQ_INT(ids[i], want[i]);
    CHECK_EQ_INT(lq_tok_adds_bos(t), 0);
    CHECK_EQ_INT(lq_tok_bos_id(t), -1);
    free(ids);
    CHECK_OK(lq_tok_encode(t, "", 0, 0, &ids, &n, &e));
    CHECK_EQ_INT(n, 0);
    free(ids);
    lq_tok_free(t);
}

static void test_dir_order(void) {
    const char *tmp = getenv("LQ_TMP");
    if (!tmp)
        return;
    char d[2200], p[2300], src[2300];
    snprintf(d, sizeof d, "%s/tokdir", tmp);
    mkdir(tmp, 0755);
    mkdir(d, 0755);
    /* tokenizer.model only -> SPM; then adding tokenizer.json -> HF JSON wins */
    snprintf(src, sizeof src, "%s/tok/small_spm.model", g_data);
    int64_t n;
    char   *b = slurp(src, &n);
    snprintf(p, sizeof p, "%s/tokenizer.model", d);
    FILE *f = fopen(p, "wb");
    if (!b || !f) {
        free(b);
        if (f)
            fclose(f);
        CHECK_MSG(0, "cannot prepare %s", d);
        return;
    }
    fwrite(b, 1, (size_t)n, f);
    fclose(f);
    free(b);
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    remove(p);
    lq_tokenizer *t = NULL;
    lq_err        e = {0};
    CHECK_OK(lq_tok_load_dir(d, &t, &e));
    CHECK(t && lq_tok_get_kind(t) == LQ_TOK_SPM);
    lq_tok_free(t);
    snprintf(src, sizeof src, "%s/tok/gpt2style.json", g_data);
    b = slurp(src, &n);
    f = fopen(p, "wb");
    if (b && f)
        fwrite(b, 1, (size_t)n, f);
    if (f)
        fclose(f);
    free(b);
    CHECK_OK(lq_tok_load_dir(d, &t, &e));
    CHECK(t && lq_tok_get_kind(t) == LQ_TOK_HF_JSON);
    lq_tok_free(t);
}

/* The demo model's tokenizer.model was rebuilt from llama2.c's tok512.bin
 * (scripts/make_demo_model.py): both must give the same ids, token for token, on the demo text
 * (shipped) and on WikiText-2 (shared data, when present). The two go through different
 * encoders: SentencePiece BPE over the model proto, and llama2.c's merge loop. */
/* The streamed ids (llmquant ppl) equal the whole-text ids on WikiText-2 for tokenizer t (its
 * layout: Metaspace, Prepend, ByteLevel with and without BOS ...). */
static void stream_wiki(const lq_tokenizer *t, const char *shared, const char *label) {
    char p[2200];
    snprintf(p, sizeof p, "%s/data/wikitext2/wikitext2_test_hf_join.txt", shared ? shared : ".");
    if (!shared || !lq_file_exists(p)) {
        printf("SKIP part: %s not found (streamed %s)\n", p, label);
        return;
    }
    char    *buf = NULL;
    int64_t  len = 0, n = 0;
    int32_t *ids = NULL;
    lq_err   e   = {0};
    CHECK_OK(lq_read_file(p, 1 << 26, &buf, &len, &e));
    CHECK_OK(lq_tok_encode(t, buf, len, 1, &ids, &n, &e));
    test_stream_same(t, buf, len, 1, 4096, 1000, ids, n, label);
    test_stream_same(t, buf, len, 1, 700, 333, ids, n, label);
    free(ids);
    free(buf);
}

static void test_demo_tokenizer(const char *shared) {
    const char *src = getenv("LQ_SRC");
    char        dir[2200], bin[2300], text[2300];
    if (!src) {
        printf("SKIP part: LQ_SRC not set (demo tokenizer)\n");
        return;
    }
    snprintf(dir, sizeof dir, "%s/examples/stories260K", src);
    snprintf(bin, sizeof bin, "%s/llama2c/tok512.bin", dir);
    lq_tokenizer *a = NULL, *b = NULL;
    lq_err        e = {0};
    CHECK_OK(lq_tok_load_dir(dir, &a, &e));
    CHECK_OK(lq_tok_load_file(bin, &b, &e));
    if (!a || !b) {
        lq_tok_free(a);
        lq_tok_free(b);
        return;
    }
    CHECK_EQ_INT(lq_tok_get_kind(a), LQ_TOK_SPM);
    CHECK_EQ_INT(lq_tok_get_kind(b), LQ_TOK_LLAMA2C);
    CHECK_EQ_INT(lq_tok_vocab_size(a), 512);
    CHECK_EQ_INT(lq_tok_adds_bos(a), 1);
    CHECK_EQ_INT(lq_tok_bos_id(a), 1);
    /* llama2.c's encoder merges a long text line by line and SentencePiece's a part at a time
     * (a newline is a symbol no merge touches); the last case is over 8 MiB with newlines at the
     * edges, where that is delicate */
    const char *files[4] = {
        "examples/data/tinystories_sample.txt", "data/wikitext2/wikitext2_test_hf_join.txt",
        "data/wikitext2/wiki.valid.tokens", "examples/data/tinystories_sample.txt"};
    for (int f = 0; f < 4; f++) {
        snprintf(text, sizeof text, "%s/%s",
                 f == 0 || f == 3 ? src
                 : shared         ? shared
                                  : "",
                 files[f]);
        char   *buf = NULL;
        int64_t len = 0;
        if (f > 0 && f < 3 && (!shared || !lq_file_exists(text))) {
            printf("SKIP part: %s not found (demo tokenizer on WikiText-2)\n", text);
            continue;
        }
        CHECK_OK(lq_read_file(text, 1 << 26, &buf, &len, &e));
        if (f == 3 && buf) { /* "\n\n" + 2400 x text + "\n\n\n": > 8 MiB, so SentencePiece
                              * also works in parts (LQ_SPM_PART) */
            const int reps = 2400;
            char     *w    = malloc((size_t)len * reps + 6);
            if (w) {
                memcpy(w, "\n\n", 2);
                for (int r = 0; r < reps; r++)
                    memcpy(w + 2 + r * len, buf, (size_t)len);
                memcpy(w + 2 + reps * len, "\n\n\n", 4);
                free(buf);
                buf = w;
                len = reps * len + 5;
            }
        }
        if (f > 0)
            CHECK(len > (1 << 16)); /* long enough for the line-by-line path */
        int32_t *ia = NULL, *ib = NULL;
        int64_t  na = 0, nb = 0;
        CHECK_OK(lq_tok_encode(a, buf, len, 1, &ia, &na, &e));
        CHECK_OK(lq_tok_encode(b, buf, len, 1, &ib, &nb, &e));
        int64_t first = -1;
        for (int64_t i = 0; i < na && i < nb && first < 0; i++)
            if (ia[i] != ib[i])
                first = i;
        CHECK_MSG(na == nb && first < 0 && na > 1000,
                  "%s: tokenizer.model %lld ids, tok512.bin %lld ids, first difference at %lld",
                  text, (long long)na, (long long)nb, (long long)first);
        if (f == 1 || f == 2) { /* streamed (llmquant ppl): the same ids */
            test_stream_same(a, buf, len, 1, 4096, 1000, ia, na, "tokenizer.model");
            test_stream_same(b, buf, len, 1, 4096, 1000, ia, na, "tok512.bin");
        }
        free(ia);
        free(ib);
        free(buf);
    }
    lq_tok_free(a);
    lq_tok_free(b);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--encode"))
        return encode_mode(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "--ids"))
        return ids_mode(argv[2], argv[3]);
    const char *data = lq_test_env_or_skip("LQ_TEST_DATA");
    snprintf(g_data, sizeof g_data, "%s", data);
    tcase  *c  = NULL;
    int64_t nc = load_cases(&c);
    CHECK_MSG(nc > 500, "cases.txt: %lld cases", (long long)nc);

    const char *shared = getenv("LQ_SHARED");
    char        p[2200];
    snprintf(p, sizeof p, "%s/tokenizers/llama2/tokenizer.model", shared ? shared : ".");
    if (shared && lq_file_exists(p)) {
        lq_tokenizer *t = NULL;
        lq_err        e = {0};
        CHECK_OK(lq_tok_load_file(p, &t, &e));
        if (t) {
            CHECK_EQ_INT(lq_tok_get_kind(t), LQ_TOK_SPM);
            CHECK_EQ_INT(lq_tok_vocab_size(t), 32000);
            CHECK_EQ_INT(lq_tok_bos_id(t), 1);
            CHECK_EQ_INT(lq_tok_eos_id(t), 2);
            CHECK_EQ_INT(lq_tok_adds_bos(t), 1);
            CHECK(!strcmp(lq_tok_piece(t, 13), "<0x0A>"));
            check_vectors(t, "llama2_spm", c, nc);
            int32_t *ids = NULL;
            int64_t  n   = 0;
            CHECK_OK(lq_tok_encode(t, "Hi", 2, 1, &ids, &n, &e));
            CHECK(n >= 2 && ids[0] == 1);
            free(ids);
        }
        lq_tok_free(t);
    } else {
        printf("SKIP part: %s not found\n", p);
    }
    lq_tokenizer *t = load("small_spm.model", LQ_TOK_SPM, NULL);
    if (t) {
        check_vectors(t, "small_spm", c, nc);
        stream_wiki(t, shared, "small_spm.model");
    }
    lq_tok_free(t);

    t = load("llama2_hf.json", LQ_TOK_HF_JSON, NULL);
    if (t) {
        CHECK_EQ_INT(lq_tok_vocab_size(t), 32000);
        CHECK_EQ_INT(lq_tok_adds_bos(t), 1);
        CHECK_EQ_INT(lq_tok_bos_id(t), 1);
        CHECK_EQ_INT(lq_tok_eos_id(t), 2);
        check_vectors(t, "llama2_hf", c, nc);
        stream_wiki(t, shared, "llama2_hf.json");
    }
    lq_tok_free(t);
    char *meta = metaspace_json();
    CHECK(meta != NULL);
    t = meta ? load("llama2_hf.json", LQ_TOK_HF_JSON, meta) : NULL;
    if (t) {
        check_vectors(t, "llama2_meta", c, nc);
        stream_wiki(t, shared, "llama2_hf.json with Metaspace");
    }
    lq_tok_free(t);
    free(meta);

    t = load("gpt2style.json", LQ_TOK_HF_JSON, NULL);
    if (t) {
        CHECK_EQ_INT(lq_tok_adds_bos(t), 0);
        CHECK(lq_tok_eos_id(t) >= 0);
        check_vectors(t, "gpt2style", c, nc);
        stream_wiki(t, shared, "gpt2style.json");
    }
    lq_tok_free(t);
    t = load("qwenstyle.json", LQ_TOK_HF_JSON, NULL);
    if (t) {
        CHECK_EQ_INT(lq_tok_adds_bos(t), 1);
        CHECK_EQ_INT(lq_tok_bos_id(t), 0);
        check_vectors(t, "qwenstyle", c, nc);
        stream_wiki(t, shared, "qwenstyle.json");
    }
    lq_tok_free(t);

    test_errors();
    test_tiny_json();
    test_dir_order();
    test_demo_tokenizer(shared);
    for (int64_t i = 0; i < nc; i++)
        free(c[i].s);
    free(c);
    return lq_test_end("tokenizer");
}
