/* Calibration text readers (.txt, .jsonl, their .zst forms, made here with libzstd) and window
 * sampling. The real-data oracle: WikiText-2's "\n\n".join string, split back into documents,
 * written as .jsonl.zst and read again must give the very same bytes. */
#include "lq_dataset.h"
#include "lq_tok.h"
#include "lq_test.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <sys/stat.h>
#include <zstd.h>

static char g_tmp[3000];

static void path_of(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_tmp, name);
}

static void write_file(const char *name, const void *data, size_t n) {
    char p[4096];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    fwrite(data, 1, n, f);
    fclose(f);
}

/* zstd frame of src; checksum on so a flipped byte anywhere is detected. */
static size_t compress_buf(const void *src, size_t n, int level, void **out) {
    size_t     cap = ZSTD_compressBound(n);
    void      *dst = malloc(cap);
    ZSTD_CCtx *c   = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    size_t z = ZSTD_compress2(c, dst, cap, src, n);
    ZSTD_freeCCtx(c);
    if (ZSTD_isError(z)) {
        fprintf(stderr, "zstd: %s\n", ZSTD_getErrorName(z));
        exit(1);
    }
    *out = dst;
    return z;
}

typedef struct sink_acc {
    char   *v;
    int64_t n, calls, stop_after;
} sink_acc;

static lq_status sink_take(void *user, const char *s, int64_t n, int *stop, lq_err *err) {
    sink_acc *a  = user;
    char     *nv = realloc(a->v, (size_t)(a->n + n + 1));
    if (!nv)
        return lq_fail(err, LQ_ERR_NOMEM, "test: out of memory");
    a->v = nv;
    memcpy(a->v + a->n, s, (size_t)n);
    a->n += n;
    *stop = ++a->calls == a->stop_after;
    return LQ_OK;
}

/* Read a file written under g_tmp; returns the status, fills t and err. Every read is also
 * streamed (lq_text_stream_file, pieces of 1 and 5 bytes): the same status and message, and
 * the pieces join to the same text. */
static lq_status rd(const char *name, int64_t max, lq_text *t, lq_err *e) {
    char p[4096];
    path_of(p, sizeof p, name);
    const lq_status st = lq_text_read_file(p, max, t, e);
    for (int piece = 1; piece <= 5; piece += 4) {
        sink_acc            a    = {0};
        lq_err              e2   = {0};
        lq_text_stream_info info = {0};
        const lq_status s2 = lq_text_stream_file(p, max ? max : LQ_TEXT_DEFAULT_MAX_BYTES, piece,
                                                 sink_take, &a, &info, &e2);
        CHECK_MSG(s2 == st, "%s: streamed (pieces of %d): status %d \"%s\", read whole %d \"%s\"",
                  name, piece, s2, e2.msg, st, e->msg);
        if (st != LQ_OK)
            CHECK_MSG(!strcmp(e->msg, e2.msg), "%s: streamed: \"%s\", whole: \"%s\"", name, e2.msg,
                      e->msg);
        if (st == LQ_OK && s2 == LQ_OK)
            CHECK_MSG(a.n == t->len && !memcmp(a.v, t->data, (size_t)a.n) && info.len == t->len &&
                          info.ndocs == t->ndocs && info.truncated == t->truncated && !info.stopped,
                      "%s: streamed (pieces of %d): %lld bytes, read whole %lld", name, piece,
                      (long long)a.n, (long long)t->len);
        free(a.v);
    }
    if (st == LQ_OK && t->len > 16) { /* the sink stops the reading after its first piece */
        sink_acc            a    = {.stop_after = 1};
        lq_err              e2   = {0};
        lq_text_stream_info info = {0};
        CHECK_OK(lq_text_stream_file(p, max, 4, sink_take, &a, &info, &e2));
        CHECK_MSG(info.stopped && a.calls == 1 && a.n >= 1 && a.n <= t->len &&
                      !memcmp(a.v, t->data, (size_t)a.n),
                  "%s: stopped stream: %lld calls, %lld bytes", name, (long long)a.calls,
                  (long long)a.n);
        free(a.v);
    }
    return st;
}

static void expect_text(const char *name, const char *content, const char *want, int64_t ndocs) {
    write_file(name, content, strlen(content));
    lq_text   t = {0};
    lq_err    e = {0};
    lq_status s = rd(name, 0, &t, &e);
    CHECK_MSG(s == LQ_OK, "%s: status %d: %s", name, s, e.msg);
    if (s == LQ_OK) {
        CHECK_MSG(t.len == (int64_t)strlen(want) && !memcmp(t.data, want, strlen(want)),
                  "%s: got \"%s\", want \"%s\"", name, t.data, want);
        CHECK_EQ_INT(t.data[t.len], 0);
        CHECK_EQ_INT(t.ndocs, ndocs);
        CHECK_EQ_INT(t.truncated, 0);
    }
    lq_text_free(&t);
}

/* Expect status `code` with every needle in the message (e.g. "bad.jsonl:3:"). */
static void expect_fail(const char *name, const void *content, size_t n, lq_status code,
                        const char *needle) {
    write_file(name, content, n);
    lq_text   t = {0};
    lq_err    e = {0};
    lq_status s = rd(name, 0, &t, &e);
    CHECK_MSG(s == code, "%s: status %d (%s), want %d", name, s, e.msg, code);
    CHECK_MSG(e.code == code, "%s: err.code %d", name, e.code);
    CHECK_MSG(strstr(e.msg, name) != NULL, "%s: message does not name the file: %s", name, e.msg);
    if (needle)
        CHECK_MSG(strstr(e.msg, needle) != NULL, "%s: \"%s\" not in \"%s\"", name, needle, e.msg);
    CHECK(t.data == NULL && t.len == 0);
    lq_text_free(&t);
}

static void test_txt_jsonl(void) {
    expect_text("a.txt", "hello world\nsecond line\n", "hello world\nsecond line\n", 1);
    expect_text("bom.txt", "\xEF\xBB\xBFh\xC3\xA9llo", "h\xC3\xA9llo", 1);
    expect_text("other.raw", " = Valkyria = \n", " = Valkyria = \n", 1);
    /* empty documents are kept: "\n\n".join(["a", "", "bé"]) */
    expect_text("a.jsonl", "{\"text\":\"a\"}\n{\"text\":\"\"}\n{\"text\":\"b\\u00e9\"}\n",
                "a\n\n\n\nb\xC3\xA9", 3);
    /* CRLF, blank lines, BOM, extra fields, last line without newline, escapes */
    expect_text("b.jsonl",
                "\xEF\xBB\xBF{\"id\":1,\"text\":\"x\\ny\"}\r\n\r\n   \n{\"meta\":{\"a\":[1]},"
                "\"text\":\"\\\"q\\\" \\ud83d\\ude00\"}",
                "x\ny\n\n\"q\" \xF0\x9F\x98\x80", 2);

    const char *bad3 = "{\"text\":\"ok\"}\n{\"text\":\"ok\"}\n{\"text\": oops}\n";
    expect_fail("bad3.jsonl", bad3, strlen(bad3), LQ_ERR_CALIB_FORMAT, "bad3.jsonl:3:");
    const char *notext = "{\"text\":\"ok\"}\n{\"body\":\"no text\"}\n";
    expect_fail("notext.jsonl", notext, strlen(notext), LQ_ERR_CALIB_FORMAT, "notext.jsonl:2:");
    const char *num = "{\"text\":5}\n";
    expect_fail("num.jsonl", num, strlen(num), LQ_ERR_CALIB_FORMAT, "num.jsonl:1: no \"text\"");
    const char *arr = "{\"text\":\"a\"}\n[\"text\"]\n";
    expect_fail("arr.jsonl", arr, strlen(arr), LQ_ERR_CALIB_FORMAT,
                "arr.jsonl:2: not a JSON "
                "object");
    const char *trail = "{\"text\":\"a\"} {\"text\":\"b\"}\n";
    expect_fail("trail.jsonl", trail, strlen(trail), LQ_ERR_CALIB_FORMAT, "trail.jsonl:1:");
    const char *u8j = "{\"text\":\"a\"}\n\n{\"text\":\"b\"}\n{\"text\":\"\xC3\x28\"}\n";
    expect_fail("utf8.jsonl", u8j, strlen(u8j), LQ_ERR_CALIB_FORMAT,
                "utf8.jsonl:4: invalid "
                "UTF-8");
    const char *sur = "{\"text\":\"\\ud800\"}\n";
    expect_fail("surrogate.jsonl", sur, strlen(sur), LQ_ERR_CALIB_FORMAT, "surrogate.jsonl:1:");
    const char *u8t = "fine line\n\xE2\x82 broken euro\n";
    expect_fail("utf8.txt", u8t, strlen(u8t), LQ_ERR_CALIB_FORMAT, "utf8.txt:2: invalid UTF-8");
    const char *overlong = "ab\xC0\x80";
    expect_fail("overlong.txt", overlong, 4, LQ_ERR_CALIB_FORMAT, "invalid UTF-8 at byte 2");
    expect_fail("empty.txt", "", 0, LQ_ERR_CALIB_EMPTY, NULL);
    expect_fail("space.txt", " \n\t\r\n ", 6, LQ_ERR_CALIB_EMPTY, NULL);
    expect_fail("blank.jsonl", "{\"text\":\"\"}\n{\"text\":\"  \"}\n", 26, LQ_ERR_CALIB_EMPTY,
                "blank");
    expect_fail("nodocs.jsonl", "\n\n", 2, LQ_ERR_CALIB_EMPTY, NULL);

    lq_text t = {0};
    lq_err  e = {0};
    CHECK_EQ_INT(rd("does-not-exist.txt", 0, &t, &e), LQ_ERR_NOT_FOUND);
    CHECK(strstr(e.msg, "does-not-exist.txt") != NULL);
    mkdir(g_tmp, 0777);
    CHECK_EQ_INT(lq_text_read_file(g_tmp, 0, &t, &e), LQ_ERR_IO);
    CHECK(strstr(e.msg, "is a directory") != NULL);

    CHECK_EQ_INT(lq_text_flags_from_path("x.jsonl.zst"), LQ_TEXT_JSONL | LQ_TEXT_ZSTD);
    CHECK_EQ_INT(lq_text_flags_from_path("x.txt.zst"), LQ_TEXT_ZSTD);
    CHECK_EQ_INT(lq_text_flags_from_path("x.jsonl"), LQ_TEXT_JSONL);
    CHECK_EQ_INT(lq_text_flags_from_path("wiki.test.raw"), 0);
    CHECK_EQ_INT(lq_text_flags_from_path("zst"), 0);
}

static void test_cap(void) {
    /* "aé" is 3 bytes: a cap of 2 cuts the é in half, so only "a" remains */
    lq_text t = {0};
    lq_err  e = {0};
    CHECK_EQ_INT(lq_text_read_memory("a\xC3\xA9z", 4, 0, "cap", 2, &t, &e), LQ_OK);
    CHECK_EQ_INT(t.len, 1);
    CHECK_EQ_INT(t.truncated, 1);
    lq_text_free(&t);
    CHECK_EQ_INT(lq_text_read_memory("a\xC3\xA9z", 4, 0, "cap", 3, &t, &e), LQ_OK);
    CHECK_EQ_INT(t.len, 3);
    CHECK_EQ_INT(t.truncated, 1);
    lq_text_free(&t);
    CHECK_EQ_INT(lq_text_read_memory("a\xC3\xA9z", 4, 0, "cap", 4, &t, &e), LQ_OK);
    CHECK_EQ_INT(t.len, 4);
    CHECK_EQ_INT(t.truncated, 0);
    lq_text_free(&t);
    /* jsonl: reading stops inside document 2; a broken line 3 is never reached */
    const char *j = "{\"text\":\"0123456789\"}\n{\"text\":\"abcdefghij\"}\n{bad\n";
    CHECK_EQ_INT(lq_text_read_memory(j, strlen(j), LQ_TEXT_JSONL, "cap.jsonl", 15, &t, &e), LQ_OK);
    CHECK_EQ_INT(t.len, 15);
    CHECK(!memcmp(t.data, "0123456789\n\nabc", 15));
    CHECK_EQ_INT(t.truncated, 1);
    lq_text_free(&t);
    /* the unread tail would fail without the cap */
    CHECK_EQ_INT(lq_text_read_memory(j, strlen(j), LQ_TEXT_JSONL, "cap.jsonl", 0, &t, &e),
                 LQ_ERR_CALIB_FORMAT);
    CHECK(strstr(e.msg, "cap.jsonl:3:") != NULL);
}

static void test_zstd(void) {
    const char *txt = "Once upon a time there was a little robot.\nIt liked r\xC3\xA9sum\xC3\xA9s.";
    void       *z;
    size_t      zn = compress_buf(txt, strlen(txt), 3, &z);
    write_file("s.txt.zst", z, zn);
    write_file("sniffed.txt", z, zn); /* zstd magic wins over the name */
    lq_text t = {0};
    lq_err  e = {0};
    CHECK_EQ_INT(rd("s.txt.zst", 0, &t, &e), LQ_OK);
    CHECK(t.len == (int64_t)strlen(txt) && !memcmp(t.data, txt, strlen(txt)));
    lq_text_free(&t);
    CHECK_EQ_INT(rd("sniffed.txt", 0, &t, &e), LQ_OK);
    CHECK(t.len == (int64_t)strlen(txt));
    lq_text_free(&t);

    /* two frames back to back decode to the concatenation */
    char *two = malloc(2 * zn);
    memcpy(two, z, zn);
    memcpy(two + zn, z, zn);
    CHECK_EQ_INT(lq_text_read_memory(two, 2 * zn, LQ_TEXT_ZSTD, "two", 0, &t, &e), LQ_OK);
    CHECK(t.len == 2 * (int64_t)strlen(txt) && !memcmp(t.data + strlen(txt), txt, strlen(txt)));
    lq_text_free(&t);

    /* truncated: every cut of the frame fails with LQ_ERR_ZSTD naming the file */
    for (size_t cut = 0; cut < zn; cut += (cut < 8 ? 1 : 5)) {
        write_file("cut.txt.zst", z, cut);
        CHECK_MSG(rd("cut.txt.zst", 0, &t, &e) == LQ_ERR_ZSTD, "cut at %zu: %s", cut, e.msg);
        CHECK(strstr(e.msg, "cut.txt.zst") != NULL);
    }
    write_file("cut.txt.zst", z, zn - 3);
    CHECK_EQ_INT(rd("cut.txt.zst", 0, &t, &e), LQ_ERR_ZSTD);
    CHECK(strstr(e.msg, "truncated") != NULL);
    /* corrupt: flip one byte anywhere after the magic (the checksum catches payload flips) */
    for (size_t i = 4; i < zn; i++) {
        memcpy(two, z, zn);
        two[i] ^= 0x5A;
        lq_status s = lq_text_read_memory(two, zn, LQ_TEXT_ZSTD, "flip.txt.zst", 0, &t, &e);
        /* a flip may still decode to a valid but different text if it only hits the header's
         * optional fields; any success must then differ from the original */
        if (s == LQ_OK) {
            CHECK_MSG(t.len != (int64_t)strlen(txt) || memcmp(t.data, txt, strlen(txt)),
                      "flip at %zu undetected", i);
            lq_text_free(&t);
        } else {
            CHECK_MSG(s == LQ_ERR_ZSTD || s == LQ_ERR_CALIB_FORMAT || s == LQ_ERR_CALIB_EMPTY,
                      "flip at %zu: status %d", i, s);
        }
    }
    free(two);
    expect_fail("garbage.txt.zst", "not zstd at all", 15, LQ_ERR_ZSTD, "corrupt");
    expect_fail("empty.txt.zst", "", 0, LQ_ERR_ZSTD, NULL);
    free(z);

    const char *jl = "{\"text\":\"first\"}\n{\"text\":\"second \\u2603\"}\n";
    zn             = compress_buf(jl, strlen(jl), 19, &z);
    write_file("d.jsonl.zst", z, zn);
    CHECK_EQ_INT(rd("d.jsonl.zst", 0, &t, &e), LQ_OK);
    CHECK(t.data && !strcmp(t.data, "first\n\nsecond \xE2\x98\x83"));
    CHECK_EQ_INT(t.ndocs, 2);
    lq_text_free(&t);
    free(z);
    const char *jbad = "{\"text\":\"first\"}\n{\"text\":\"second\"}\nnot json\n";
    zn               = compress_buf(jbad, strlen(jbad), 1, &z);
    expect_fail("bad.jsonl.zst", z, zn, LQ_ERR_CALIB_FORMAT, "bad.jsonl.zst:3:");
    free(z);
}

/* WikiText-2 test: the GPTQ evaluation string, as .txt and rebuilt as .jsonl.zst. */
static void test_wikitext(const char *shared) {
    char p[4096];
    snprintf(p, sizeof p, "%s/data/wikitext2/wikitext2_test_hf_join.txt", shared);
    struct stat sb;
    if (stat(p, &sb) != 0) {
        printf("note: %s missing, real-data check skipped\n", p);
        return;
    }
    lq_text t = {0};
    lq_err  e = {0};
    CHECK_EQ_INT(lq_text_read_file(p, 0, &t, &e), LQ_OK);
    CHECK_EQ_INT(t.len, sb.st_size);
    /* split on "\n\n" exactly like Python str.split, write one JSON line per document */
    cJSON  *arr  = cJSON_CreateArray();
    int64_t ndoc = 0;
    size_t  jcap = (size_t)t.len * 2 + 1024, jlen = 0;
    char   *jl = malloc(jcap);
    for (const char *s = t.data;;) {
        const char *sep = strstr(s, "\n\n");
        size_t      n   = sep ? (size_t)(sep - s) : strlen(s);
        char       *doc = malloc(n + 1);
        memcpy(doc, s, n);
        doc[n]   = 0;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "text", doc);
        char  *line = cJSON_PrintUnformatted(o);
        size_t ll   = strlen(line);
        if (jlen + ll + 2 > jcap) {
            jcap = (jlen + ll + 2) * 2;
            jl   = realloc(jl, jcap);
        }
        memcpy(jl + jlen, line, ll);
        jlen += ll;
        jl[jlen++] = '\n';
        free(line);
        cJSON_Delete(o);
        free(doc);
        ndoc++;
        if (!sep)
            break;
        s = sep + 2;
    }
    cJSON_Delete(arr);
    CHECK(ndoc > 4000);
    void  *z;
    size_t zn = compress_buf(jl, jlen, 1, &z);
    write_file("wikitext2_test.jsonl.zst", z, zn);
    lq_text t2 = {0};
    CHECK_EQ_INT(rd("wikitext2_test.jsonl.zst", 0, &t2, &e), LQ_OK);
    CHECK_EQ_INT(t2.ndocs, ndoc);
    CHECK_MSG(t2.len == t.len && !memcmp(t2.data, t.data, (size_t)t.len),
              "jsonl.zst round trip differs (%lld vs %lld bytes)", (long long)t2.len,
              (long long)t.len);
    lq_text_free(&t2);
    free(z);
    free(jl);
    lq_text_free(&t);
}

static void test_windows(void) {
    enum { NTOK = 5000 };
    static int32_t tok[NTOK];
    for (int i = 0; i < NTOK; i++)
        tok[i] = i; /* a window's content tells its offset */
    lq_windows a = {0}, b = {0}, c = {0};
    lq_err     e = {0};
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 64, 100, 0, 1, "t", &a, &e), LQ_OK);
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 64, 100, 0, 1, "t", &b, &e), LQ_OK);
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 64, 100, 0, 2, "t", &c, &e), LQ_OK);
    CHECK_EQ_INT(a.nsamples, 64);
    CHECK_EQ_INT(a.seqlen, 100);
    CHECK(!memcmp(a.offsets, b.offsets, 64 * sizeof(int64_t)));
    CHECK(!memcmp(a.ids, b.ids, 64 * 100 * sizeof(int32_t)));
    int differ = 0;
    for (int i = 0; i < 64; i++) {
        differ += a.offsets[i] != c.offsets[i];
        CHECK(a.offsets[i] >= 0 && a.offsets[i] <= NTOK - 100 - 1);
        for (int j = 0; j < 100; j++)
            CHECK_EQ_INT(a.ids[i * 100 + j], a.offsets[i] + j);
    }
    CHECK(differ > 50);
    /* the documented recipe, step by step */
    lq_rng r;
    lq_rng_seed(&r, 1);
    for (int i = 0; i < 64; i++)
        CHECK_EQ_INT(a.offsets[i], (int64_t)lq_rng_below(&r, NTOK - 100));
    lq_windows_free(&a);
    lq_windows_free(&b);
    lq_windows_free(&c);
    lq_windows_free(&c); /* idempotent */

    /* shortened to the model context */
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 3, 2048, 512, 0, "t", &a, &e), LQ_OK);
    CHECK_EQ_INT(a.seqlen, 512);
    lq_windows_free(&a);
    /* too few tokens: counts in the message */
    CHECK_EQ_INT(lq_windows_sample(tok, 100, 1, 100, 0, 0, "short.txt", &a, &e),
                 LQ_ERR_CALIB_EMPTY);
    CHECK(strstr(e.msg, "short.txt") && strstr(e.msg, "100 tokens") && strstr(e.msg, "101"));
    CHECK(a.ids == NULL && a.offsets == NULL);
    CHECK_EQ_INT(lq_windows_sample(tok, 101, 5, 100, 0, 0, "t", &a, &e), LQ_OK);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(a.offsets[i], 0); /* exactly one possible window */
    lq_windows_free(&a);
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 0, 100, 0, 0, "t", &a, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_windows_sample(tok, NTOK, 1, 0, 0, 0, "t", &a, &e), LQ_ERR_INVALID_ARG);
    CHECK_EQ_INT(lq_windows_sample(NULL, NTOK, 1, 10, 0, 0, "t", &a, &e), LQ_ERR_INVALID_ARG);

    /* uniform over the 10 possible offsets: 20000 draws, each count within 6 sigma of 2000 */
    CHECK_EQ_INT(lq_windows_sample(tok, 110, 20000, 100, 0, 7, "t", &a, &e), LQ_OK);
    int64_t cnt[10] = {0};
    for (int i = 0; i < 20000; i++)
        cnt[a.offsets[i]]++;
    for (int k = 0; k < 10; k++)
        CHECK_MSG(cnt[k] > 2000 - 255 && cnt[k] < 2000 + 255, "offset %d drawn %lld times", k,
                  (long long)cnt[k]);
    lq_windows_free(&a);
}

/* Byte-level stand-in tokenizer: id = byte value, so windows can be checked against the file. */
static lq_status enc_bytes(void *user, const char *text, int64_t len, int32_t **ids, int64_t *n,
                           lq_err *err) {
    int *calls = user;
    (*calls)++;
    *ids = malloc((size_t)len * sizeof(int32_t));
    if (!*ids)
        return lq_fail(err, LQ_ERR_NOMEM, "oom");
    for (int64_t i = 0; i < len; i++)
        (*ids)[i] = (unsigned char)text[i];
    *n = len;
    return LQ_OK;
}

static lq_status enc_fail(void *user, const char *text, int64_t len, int32_t **ids, int64_t *n,
                          lq_err *err) {
    (void)user, (void)text, (void)len, (void)ids, (void)n;
    return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "tokenizer broke");
}

static void test_calib_windows(const char *shared) {
    char p[4096];
    snprintf(p, sizeof p, "%s/data/tinystories/tinystories_sample.txt", shared);
    lq_text t = {0};
    lq_err  e = {0};
    if (lq_text_read_file(p, 0, &t, &e) != LQ_OK) {
        printf("note: %s: %s, real-data windows skipped\n", p, e.msg);
        return;
    }
    int        calls = 0;
    lq_windows w     = {0};
    CHECK_EQ_INT(lq_calib_windows(p, enc_bytes, &calls, 16, 256, 512, 0, 0, &w, &e), LQ_OK);
    CHECK_EQ_INT(calls, 1); /* the whole text is tokenized once */
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 256; j++)
            CHECK((unsigned char)t.data[w.offsets[i] + j] == (unsigned)w.ids[i * 256 + j]);
    lq_windows_free(&w);
    CHECK_EQ_INT(lq_calib_windows(p, enc_bytes, &calls, 1, 1 << 20, 0, 0, 0, &w, &e),
                 LQ_ERR_CALIB_EMPTY);
    CHECK(strstr(e.msg, "tinystories_sample.txt") != NULL);
    CHECK_EQ_INT(lq_calib_windows(p, enc_fail, NULL, 1, 16, 0, 0, 0, &w, &e),
                 LQ_ERR_TOKENIZER_FORMAT);
    CHECK(strstr(e.msg, "tinystories_sample.txt: tokenizer broke") != NULL);
    lq_text_free(&t);
}

static lq_status enc_tok(void *user, const char *text, int64_t len, int32_t **ids, int64_t *n,
                         lq_err *err) {
    return lq_tok_encode(user, text, len, 1, ids, n, err);
}

/* The built-in corpus: decodes, is large and mixed as calib/data/SOURCES.md says, and gives the
 * default calibration set (128 x 2048) with a 32k-vocabulary tokenizer (Llama-2's, from the
 * shared data) and windows with the demo's 512-piece one. */
static void test_builtin(const char *shared) {
    lq_text t = {0};
    lq_err  e = {0};
    CHECK_OK(lq_text_read_builtin(0, &t, &e));
    CHECK_MSG(t.len > 1000000, "built-in corpus: %lld bytes", (long long)t.len);
    CHECK(t.data && strstr(t.data, " = Robert Boulter = ") == NULL); /* the test split's first */
    CHECK(t.data && strstr(t.data, "def ") && strstr(t.data, "#include")); /* Python and C */
    CHECK(t.data && strstr(t.data, "grep") && strstr(t.data, "\xd0"));     /* manuals, Cyrillic */
    CHECK(lq_calib_is_builtin(NULL) && lq_calib_is_builtin("") && lq_calib_is_builtin("builtin") &&
          lq_calib_is_builtin(LQ_CALIB_BUILTIN) && !lq_calib_is_builtin("./builtin"));
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizers/llama2/tokenizer.model", shared ? shared : "");
    lq_tokenizer *tok = NULL;
    if (shared && lq_file_exists(p) && lq_tok_load_file(p, &tok, &e) == LQ_OK) {
        int32_t *ids = NULL;
        int64_t  n   = 0;
        CHECK_OK(lq_tok_encode(tok, t.data, t.len, 1, &ids, &n, &e));
        CHECK_MSG(n >= 128 * 2048 + 1, "built-in corpus: %lld Llama-2 tokens", (long long)n);
        free(ids);
        lq_windows w = {0};
        CHECK_OK(lq_calib_windows(NULL, enc_tok, tok, 128, 2048, 4096, 0, 0, &w, &e));
        CHECK(w.nsamples == 128 && w.seqlen == 2048);
        lq_windows_free(&w);
    } else {
        printf("SKIP part: %s not found (built-in corpus with a 32k vocabulary)\n", p);
    }
    lq_tok_free(tok);
    lq_text_free(&t);
}

int main(void) {
    const char *tmp = lq_test_env_or_skip("LQ_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%s/dataset", tmp);
    mkdir(tmp, 0777);
    if (mkdir(g_tmp, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s\n", g_tmp);
        return 1;
    }
    const char *shared = getenv("LQ_SHARED");
    test_txt_jsonl();
    test_cap();
    test_zstd();
    test_windows();
    test_builtin(shared);
    if (shared) {
        test_wikitext(shared);
        test_calib_windows(shared);
    }
    return lq_test_end("dataset");
}
