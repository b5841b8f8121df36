/* Fuzz the calibration text reader from memory: .txt / .jsonl, plain or zstd (the first input
 * byte picks the mode and a size cap, the rest is the file). Accepted text must be NUL-terminated
 * UTF-8 with a non-space character and within the cap; a rejection must carry a calibration or
 * zstd status and a one-line message naming the input. The streaming reader must agree with it
 * (status, message, text).
 * Seeds in corpus/calib/: byte 0 = mode (bit0 jsonl, bit1 zstd, bit2 cap at 64 bytes), then
 * text, jsonl (escapes, blank lines, BOM, errors) and `zstd -19` / truncated frames of them. */
#include "lq_dataset.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct acc {
    char   *v;
    int64_t n;
} acc;

static lq_status take(void *user, const char *s, int64_t n, int *stop, lq_err *err) {
    acc  *a  = user;
    char *nv = realloc(a->v, (size_t)(a->n + n));
    (void)stop;
    if (!nv)
        return lq_fail(err, LQ_ERR_NOMEM, "fuzz: out of memory");
    memcpy(nv + a->n, s, (size_t)n);
    a->v = nv;
    a->n += n;
    return LQ_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    unsigned  mode  = data[0];
    unsigned  flags = (mode & 1 ? LQ_TEXT_JSONL : 0) | (mode & 2 ? LQ_TEXT_ZSTD : 0);
    int64_t   cap   = mode & 4 ? 64 : 1 << 24;
    lq_text   t     = {0};
    lq_err    e     = {0};
    lq_status s     = lq_text_read_memory(data + 1, size - 1, flags, "fuzz", cap, &t, &e);
    /* the streaming reader (ppl) is the same parser: same status and message, same text; only
     * a zstd frame found corrupt or truncated at its end may be preceded by a format error in
     * the text decoded before it (a stream checks the text as it goes) */
    acc                 a  = {0};
    lq_err              e2 = {0};
    lq_text_stream_info si;
    lq_status           s2 =
        lq_text_stream_memory(data + 1, size - 1, flags, "fuzz", cap, 3, take, &a, &si, &e2);
    const int zstd_late = s == LQ_ERR_ZSTD && s2 == LQ_ERR_CALIB_FORMAT;
    if ((s2 != s && !zstd_late) || (s != LQ_OK && !zstd_late && strcmp(e.msg, e2.msg)) ||
        (s == LQ_OK && (a.n != t.len || memcmp(a.v, t.data, (size_t)a.n))))
        abort();
    free(a.v);
    if (s == LQ_OK) {
        if (!t.data || t.len < 1 || t.len > cap || t.data[t.len] != 0)
            abort();
        int nonspace = 0;
        for (int64_t i = 0; i < t.len;) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k =
                utf8proc_iterate((const utf8proc_uint8_t *)t.data + i, t.len - i, &cp);
            if (k <= 0)
                abort();
            nonspace |= !(cp == ' ' || (cp >= '\t' && cp <= '\r'));
            i += k;
        }
        if (!nonspace)
            abort();
    } else {
        if (s != LQ_ERR_CALIB_FORMAT && s != LQ_ERR_CALIB_EMPTY && s != LQ_ERR_ZSTD &&
            s != LQ_ERR_NOMEM)
            abort();
        if (e.code != s || strncmp(e.msg, "fuzz", 4) != 0 || strchr(e.msg, '\n'))
            abort();
        if (t.data)
            abort();
    }
    lq_text_free(&t);
    return 0;
}
