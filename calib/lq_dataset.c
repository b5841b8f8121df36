/* Calibration / evaluation text readers and window sampling (contract in lq_dataset.h). */
#include "lq_dataset.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>
#include <zstd.h>

/* A 128 MiB window covers every zstd level up to 19 and --long=27; bigger windows would let a
 * crafted file make us allocate gigabytes before producing a byte. */
#define WINDOW_LOG_MAX 27
#define READ_CHUNK     (128 * 1024)

typedef struct reader {
    const char *label;
    unsigned    flags;
    int64_t     max; /* cap on decoded text */

    char   *out; /* decoded text */
    int64_t len, cap;
    int     full;      /* cap reached: stop consuming input */
    int     truncated; /* something was cut off by the cap */

    /* jsonl: the line being assembled */
    char   *line;
    int64_t line_len, line_cap;
    int64_t lineno; /* number of the line being assembled (1-based) */
    int64_t ndocs;

    /* streaming (lq_text_stream_file): out is handed to sink in pieces and emptied */
    lq_text_sink_fn sink;
    void           *user;
    int64_t         piece;     /* hand out once this much is buffered */
    int64_t         flushed;   /* bytes handed out */
    int64_t         lines_out; /* newlines in them */
    int             bom_done, seen_text, stopped;
} reader;

static lq_status grow(char **buf, int64_t *cap, int64_t need, const reader *r, lq_err *err) {
    if (need <= *cap)
        return LQ_OK;
    int64_t nc = *cap ? *cap : 4096;
    while (nc < need)
        nc = nc > INT64_MAX / 2 ? need : nc * 2;
    char *p = realloc(*buf, (size_t)nc);
    if (!p)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory (%lld bytes of text)", r->label,
                       (long long)nc);
    *buf = p;
    *cap = nc;
    return LQ_OK;
}

static lq_status flush(reader *r, int final, lq_err *err);

/* Append to the decoded text, honouring the cap (+1 keeps room for the NUL). */
static lq_status out_append(reader *r, const char *s, int64_t n, lq_err *err) {
    if (r->full)
        return LQ_OK;
    if (n > r->max - r->flushed - r->len) {
        n            = r->max - r->flushed - r->len;
        r->full      = 1;
        r->truncated = 1;
    }
    LQ_TRY(grow(&r->out, &r->cap, r->len + n + 1, r, err));
    memcpy(r->out + r->len, s, (size_t)n);
    r->len += n;
    r->out[r->len] = 0;
    return r->sink && r->len >= r->piece && !r->full ? flush(r, 0, err) : LQ_OK;
}

/* First invalid byte of s[n] as UTF-8 (strict: no overlongs, surrogates or > U+10FFFF, no
 * truncated sequences), or -1 when valid. */
static int64_t utf8_invalid_at(const char *s, int64_t n) {
    const unsigned char *u = (const unsigned char *)s;
    int64_t              i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(u + i, n - i < 4 ? n - i : 4, &cp);
        if (k <= 0)
            return i;
        i += k;
    }
    return -1;
}

static int all_space(const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!lq_ascii_space(s[i]))
            return 0;
    return 1;
}

/* n, or less so as not to end inside a UTF-8 character: the start of a trailing lead byte (and
 * up to 3 continuation bytes) whose sequence needs more bytes than are there. */
static int64_t whole_chars(const char *s, int64_t n) {
    if (n <= 0)
        return n;
    int64_t i = n - 1;
    while (i > 0 && n - i < 4 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    const unsigned char lead = (unsigned char)s[i];
    const int need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return i + need > n ? i : n;
}

static int64_t count_nl(const char *s, int64_t n) {
    int64_t k = 0;
    if (n <= 0)
        return 0;
    for (const char *p = s, *e = s + n; (p = memchr(p, '\n', (size_t)(e - p))) != NULL; p++)
        k++;
    return k;
}

/* Streaming: hand the buffered text to the sink up to its last whole character (all of it when
 * final), checked as finish() checks a whole text: BOM dropped, UTF-8 validated with the line
 * and byte of the first bad one. */
static lq_status flush(reader *r, int final, lq_err *err) {
    const int plain = !(r->flags & LQ_TEXT_JSONL);
    if (plain && !r->bom_done) {
        if (r->len < 3 && !final)
            return LQ_OK;
        if (r->len >= 3 && !memcmp(r->out, "\xEF\xBB\xBF", 3)) {
            memmove(r->out, r->out + 3, (size_t)(r->len - 3));
            r->len -= 3;
        }
        r->bom_done = 1;
    }
    int64_t k = r->len;
    if (!final) /* leave a character the buffer ends inside of for later */
        k = whole_chars(r->out, k);
    if (plain) {
        const int64_t bad = utf8_invalid_at(r->out, k);
        if (bad >= 0)
            return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: invalid UTF-8 at byte %lld",
                           r->label, (long long)(r->lines_out + count_nl(r->out, bad) + 1),
                           (long long)(r->flushed + bad));
    }
    r->seen_text = r->seen_text || !all_space(r->out, k);
    r->lines_out += count_nl(r->out, k);
    int stop = 0;
    if (k > 0)
        LQ_TRY(r->sink(r->user, r->out, k, &stop, err));
    r->flushed += k;
    if (k > 0)
        memmove(r->out, r->out + k, (size_t)(r->len - k));
    r->len -= k;
    if (stop)
        r->full = r->stopped = 1;
    return LQ_OK;
}

static lq_status jsonl_line(reader *r, lq_err *err) {
    char   *s = r->line;
    int64_t n = r->line_len;
    if (r->lineno == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
        s += 3;
        n -= 3;
    }
    if (all_space(s, n))
        return LQ_OK;
    int64_t bad = utf8_invalid_at(s, n);
    if (bad >= 0)
        return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: invalid UTF-8 at byte %lld of the line",
                       r->label, (long long)r->lineno, (long long)bad + 1);
    s[n] = 0;
    /* Length n+1 with require_null_terminated: trailing garbage after the object is an error. */
    cJSON *obj = cJSON_ParseWithLengthOpts(s, (size_t)n + 1, NULL, 1);
    if (!obj)
        return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: not valid JSON", r->label,
                       (long long)r->lineno);
    lq_status st = LQ_OK;
    if (!cJSON_IsObject(obj)) {
        st = lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: not a JSON object", r->label,
                     (long long)r->lineno);
        goto done;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "text");
    if (!cJSON_IsString(t) || !t->valuestring) {
        st = lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: no \"text\" string field", r->label,
                     (long long)r->lineno);
        goto done;
    }
    if (strlen(t->valuestring) > (size_t)LQ_TEXT_MAX_DOC_BYTES) {
        st = lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: a document of more than %lld MiB",
                     r->label, (long long)r->lineno, LQ_TEXT_MAX_DOC_BYTES >> 20);
        goto done;
    }
    if (r->ndocs > 0)
        LQ_TRY_GOTO(out_append(r, "\n\n", 2, err));
    LQ_TRY_GOTO(out_append(r, t->valuestring, (int64_t)strlen(t->valuestring), err));
    r->ndocs++;
done:
    cJSON_Delete(obj);
    return st;
}

/* Consume decoded bytes (plain text, or jsonl split into lines). */
static lq_status feed(reader *r, const char *s, int64_t n, lq_err *err) {
    if (!(r->flags & LQ_TEXT_JSONL)) {
        /* plain text: a line (what the tokenizers work on at a time) over the document cap is
         * not text -- an error, before it is buffered whole */
        for (int64_t i = 0; i < n && !r->full;) {
            const char *nl   = memchr(s + i, '\n', (size_t)(n - i));
            int64_t     take = nl ? nl - (s + i) : n - i;
            if (r->line_len + take > LQ_TEXT_MAX_DOC_BYTES)
                return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: a line of more than %lld MiB",
                               r->label, (long long)r->lineno, LQ_TEXT_MAX_DOC_BYTES >> 20);
            r->line_len = nl ? 0 : r->line_len + take;
            r->lineno += nl != NULL;
            i += take + (nl != NULL);
        }
        return out_append(r, s, n, err);
    }
    /* A JSON line can be up to 6x its text (\uXXXX escapes); anything longer cannot fit the
     * cap and is refused rather than buffered without bound. */
    int64_t line_max = r->max > (INT64_MAX - 65536) / 6 ? INT64_MAX / 2 : r->max * 6 + 65536;
    if (line_max > 6 * LQ_TEXT_MAX_DOC_BYTES + 65536)
        line_max = 6 * LQ_TEXT_MAX_DOC_BYTES + 65536;
    while (n > 0 && !r->full) {
        const char *nl   = memchr(s, '\n', (size_t)n);
        int64_t     take = nl ? (int64_t)(nl - s) : n;
        if (take > line_max - r->line_len)
            return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: line longer than %lld bytes",
                           r->label, (long long)r->lineno, (long long)line_max);
        LQ_TRY(grow(&r->line, &r->line_cap, r->line_len + take + 1, r, err));
        memcpy(r->line + r->line_len, s, (size_t)take);
        r->line_len += take;
        if (!nl)
            break;
        LQ_TRY(jsonl_line(r, err));
        r->line_len = 0;
        r->lineno++;
        s += take + 1;
        n -= take + 1;
    }
    return LQ_OK;
}

/* After the last input byte: last line without '\n', UTF-8 cut-back, validation. */
static lq_status finish(reader *r, lq_text *out, lq_err *err) {
    if ((r->flags & LQ_TEXT_JSONL) && !r->full && r->line_len > 0)
        LQ_TRY(jsonl_line(r, err));
    if (r->sink && r->stopped)
        return LQ_OK;
    if (r->truncated) /* drop a character the cap cut in half */
        r->len = whole_chars(r->out, r->len);
    if (r->sink) {
        LQ_TRY(flush(r, 1, err));
        if (!r->seen_text)
            return lq_fail(err, LQ_ERR_CALIB_EMPTY, "%s: no text (%s)", r->label,
                           (r->flags & LQ_TEXT_JSONL)
                               ? (r->ndocs ? "all documents are blank" : "no documents")
                               : "empty or whitespace only");
        return LQ_OK;
    }
    if (r->out)
        r->out[r->len] = 0;
    if (!(r->flags & LQ_TEXT_JSONL)) {
        if (r->len >= 3 && !memcmp(r->out, "\xEF\xBB\xBF", 3)) {
            memmove(r->out, r->out + 3, (size_t)(r->len - 3 + 1));
            r->len -= 3;
        }
        int64_t bad = utf8_invalid_at(r->out, r->len);
        if (bad >= 0) {
            int64_t line = 1;
            for (int64_t i = 0; i < bad; i++)
                line += r->out[i] == '\n';
            return lq_fail(err, LQ_ERR_CALIB_FORMAT, "%s:%lld: invalid UTF-8 at byte %lld",
                           r->label, (long long)line, (long long)bad);
        }
        r->ndocs = 1;
    }
    if (r->len == 0 || all_space(r->out, r->len))
        return lq_fail(err, LQ_ERR_CALIB_EMPTY, "%s: no text (%s)", r->label,
                       (r->flags & LQ_TEXT_JSONL)
                           ? (r->ndocs ? "all documents are blank" : "no documents")
                           : "empty or whitespace only");
    out->data      = r->out;
    out->len       = r->len;
    out->ndocs     = r->ndocs;
    out->truncated = r->truncated;
    r->out         = NULL;
    return LQ_OK;
}

static void reader_free(reader *r) {
    free(r->out);
    free(r->line);
}

/* Pulls input bytes: from memory or a FILE. */
typedef struct source {
    FILE                *f;
    const unsigned char *mem;
    size_t               mem_len, mem_pos;
    char                *buf; /* READ_CHUNK for FILE */
} source;

static lq_status src_next(source *s, const char *label, const char **p, size_t *n, lq_err *err) {
    if (!s->f) {
        *p         = (const char *)s->mem + s->mem_pos;
        *n         = s->mem_len - s->mem_pos;
        s->mem_pos = s->mem_len;
        return LQ_OK;
    }
    *n = fread(s->buf, 1, READ_CHUNK, s->f);
    *p = s->buf;
    if (*n == 0 && ferror(s->f))
        return lq_fail(err, LQ_ERR_IO, "%s: read error", label);
    return LQ_OK;
}

static int zstd_magic(const unsigned char *p, size_t n) {
    return n >= 4 && p[0] == 0x28 && p[1] == 0xB5 && p[2] == 0x2F && p[3] == 0xFD;
}

static lq_status read_zstd(reader *r, source *src, const char *first, size_t first_n, lq_err *err) {
    ZSTD_DStream *d    = ZSTD_createDStream();
    size_t        obn  = ZSTD_DStreamOutSize();
    char         *ob   = malloc(obn);
    lq_status     st   = LQ_OK;
    size_t        last = 1; /* "frame incomplete" until a frame ends: empty input is an error */
    const char   *p    = first;
    size_t        n    = first_n;
    if (!d || !ob)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory for zstd", r->label);
    size_t z = ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
    if (ZSTD_isError(z))
        LQ_FAIL_GOTO(err, LQ_ERR_INTERNAL, "%s: zstd: %s", r->label, ZSTD_getErrorName(z));
    while (n > 0 && !r->full) {
        ZSTD_inBuffer in = {p, n, 0};
        while (in.pos < in.size && !r->full) {
            ZSTD_outBuffer o   = {ob, obn, 0};
            size_t         ret = ZSTD_decompressStream(d, &o, &in);
            if (ZSTD_isError(ret))
                LQ_FAIL_GOTO(err, LQ_ERR_ZSTD, "%s: corrupt zstd data: %s", r->label,
                             ZSTD_getErrorName(ret));
            LQ_TRY_GOTO(feed(r, ob, (int64_t)o.pos, err));
            last = ret;
        }
        LQ_TRY_GOTO(src_next(src, r->label, &p, &n, err));
    }
    /* Input is exhausted; the decoder may still hold output of the last block. */
    while (last != 0 && !r->full) {
        ZSTD_inBuffer  in  = {NULL, 0, 0};
        ZSTD_outBuffer o   = {ob, obn, 0};
        size_t         ret = ZSTD_decompressStream(d, &o, &in);
        if (ZSTD_isError(ret))
            LQ_FAIL_GOTO(err, LQ_ERR_ZSTD, "%s: corrupt zstd data: %s", r->label,
                         ZSTD_getErrorName(ret));
        LQ_TRY_GOTO(feed(r, ob, (int64_t)o.pos, err));
        last = ret;
        if (o.pos == 0)
            break;
    }
    if (last != 0 && !r->full)
        LQ_FAIL_GOTO(err, LQ_ERR_ZSTD, "%s: zstd stream is truncated", r->label);
done:
    ZSTD_freeDStream(d);
    free(ob);
    return st;
}

/* Reads src through r (set up by the caller) to the end, or until the cap or the sink stops it. */
static lq_status run_reader(source *src, reader *r, lq_text *out, lq_err *err) {
    const char *p;
    size_t      n;
    LQ_TRY(src_next(src, r->label, &p, &n, err));
    if ((r->flags & LQ_TEXT_ZSTD) || zstd_magic((const unsigned char *)p, n)) {
        r->flags |= LQ_TEXT_ZSTD;
        LQ_TRY(read_zstd(r, src, p, n, err));
    } else {
        while (n > 0 && !r->full) {
            LQ_TRY(feed(r, p, (int64_t)n, err));
            LQ_TRY(src_next(src, r->label, &p, &n, err));
        }
    }
    return finish(r, out, err);
}

static lq_status read_source(source *src, unsigned flags, const char *label, int64_t max_bytes,
                             lq_text *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    reader r     = {0};
    r.label      = label;
    r.flags      = flags;
    r.max        = max_bytes > 0 ? max_bytes : LQ_TEXT_DEFAULT_MAX_BYTES;
    r.lineno     = 1;
    lq_status st = run_reader(src, &r, out, err);
    reader_free(&r);
    return st;
}

static int ends_with(const char *s, size_t n, const char *suf) {
    size_t k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

unsigned lq_text_flags_from_path(const char *path) {
    unsigned f = 0;
    size_t   n = strlen(path);
    if (ends_with(path, n, ".zst")) {
        f |= LQ_TEXT_ZSTD;
        n -= 4;
    }
    if (ends_with(path, n, ".jsonl") || ends_with(path, n, ".JSONL"))
        f |= LQ_TEXT_JSONL;
    return f;
}

static lq_status open_text(const char *path, source *src, lq_err *err) {
    memset(src, 0, sizeof *src);
    FILE *f = fopen(path, "rb");
    if (!f)
        return lq_fail(err, lq_status_from_errno(errno), "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return lq_fail(err, LQ_ERR_IO, "%s: is a directory, not a text file", path);
    }
    src->f   = f;
    src->buf = malloc(READ_CHUNK);
    if (!src->buf) {
        fclose(f);
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", path);
    }
    return LQ_OK;
}

static void close_text(source *src) {
    free(src->buf);
    if (src->f)
        fclose(src->f);
}

lq_status lq_text_read_file(const char *path, int64_t max_bytes, lq_text *out, lq_err *err) {
    memset(out, 0, sizeof *out);
    source src;
    LQ_TRY(open_text(path, &src, err));
    lq_status st = read_source(&src, lq_text_flags_from_path(path), path, max_bytes, out, err);
    close_text(&src);
    return st;
}

static lq_status stream_source(source *src, unsigned flags, const char *label, int64_t max_bytes,
                               int64_t piece_bytes, lq_text_sink_fn sink, void *user,
                               lq_text_stream_info *info, lq_err *err) {
    reader r        = {0};
    r.label         = label;
    r.flags         = flags;
    r.max           = max_bytes > 0 ? max_bytes : INT64_MAX;
    r.lineno        = 1;
    r.sink          = sink;
    r.user          = user;
    r.piece         = piece_bytes > 0 ? piece_bytes : (int64_t)1 << 20;
    lq_status st    = run_reader(src, &r, NULL, err);
    info->len       = r.flushed;
    info->ndocs     = (r.flags & LQ_TEXT_JSONL) ? r.ndocs : 1;
    info->truncated = r.truncated;
    info->stopped   = r.stopped;
    reader_free(&r);
    return st;
}

lq_status lq_text_stream_file(const char *path, int64_t max_bytes, int64_t piece_bytes,
                              lq_text_sink_fn sink, void *user, lq_text_stream_info *info,
                              lq_err *err) {
    memset(info, 0, sizeof *info);
    LQ_RETURN_IF(!sink, err, LQ_ERR_INVALID_ARG, "lq_text_stream_file: no sink");
    source src;
    LQ_TRY(open_text(path, &src, err));
    lq_status st = stream_source(&src, lq_text_flags_from_path(path), path, max_bytes, piece_bytes,
                                 sink, user, info, err);
    close_text(&src);
    return st;
}

lq_status lq_text_stream_memory(const void *buf, size_t len, unsigned flags, const char *label,
                                int64_t max_bytes, int64_t piece_bytes, lq_text_sink_fn sink,
                                void *user, lq_text_stream_info *info, lq_err *err) {
    memset(info, 0, sizeof *info);
    LQ_RETURN_IF(!sink || (!buf && len), err, LQ_ERR_INVALID_ARG,
                 "lq_text_stream_memory: bad arguments");
    source src  = {0};
    src.mem     = buf;
    src.mem_len = len;
    return stream_source(&src, flags, label ? label : "<memory>", max_bytes, piece_bytes, sink,
                         user, info, err);
}

lq_status lq_text_read_memory(const void *buf, size_t len, unsigned flags, const char *label,
                              int64_t max_bytes, lq_text *out, lq_err *err) {
    if (!out)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_text_read_memory: NULL output");
    memset(out, 0, sizeof *out);
    if (!buf && len)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_text_read_memory: NULL buffer");
    source src  = {0};
    src.mem     = buf;
    src.mem_len = len;
    return read_source(&src, flags, label ? label : "<memory>", max_bytes, out, err);
}

void lq_text_free(lq_text *t) {
    if (!t)
        return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_windows_sample(const int32_t *tokens, int64_t ntok, int64_t nsamples, int64_t seqlen,
                            int64_t max_pos, uint64_t seed, const char *label, lq_windows *out,
                            lq_err *err) {
    if (!out)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_windows_sample: NULL output");
    memset(out, 0, sizeof *out);
    if (!label)
        label = "calibration text";
    if (nsamples < 1 || seqlen < 1 || ntok < 0 || (ntok > 0 && !tokens))
        return lq_fail(err, LQ_ERR_INVALID_ARG,
                       "%s: bad window request (nsamples %lld, seqlen %lld, %lld tokens)", label,
                       (long long)nsamples, (long long)seqlen, (long long)ntok);
    if (max_pos > 0 && seqlen > max_pos)
        seqlen = max_pos;
    /* GPTQ draws randint(0, ntok - seqlen - 1): the last token is never a window's first
     * input, so one window needs seqlen + 1 tokens. */
    if (ntok < seqlen + 1)
        return lq_fail(err, LQ_ERR_CALIB_EMPTY,
                       "%s: %lld tokens, need at least %lld for one window of %lld tokens", label,
                       (long long)ntok, (long long)seqlen + 1, (long long)seqlen);
    int64_t total;
    if (!lq_mul_i64(nsamples, seqlen, &total))
        return lq_fail(err, LQ_ERR_INVALID_ARG, "%s: %lld windows x %lld tokens overflows", label,
                       (long long)nsamples, (long long)seqlen);
    out->ids     = lq_malloc_n(total, sizeof(int32_t));
    out->offsets = lq_malloc_n(nsamples, sizeof(int64_t));
    if (!out->ids || !out->offsets) {
        lq_windows_free(out);
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory for %lld x %lld token windows", label,
                       (long long)nsamples, (long long)seqlen);
    }
    lq_rng r;
    lq_rng_seed(&r, seed);
    for (int64_t i = 0; i < nsamples; i++) {
        int64_t off     = (int64_t)lq_rng_below(&r, (uint64_t)(ntok - seqlen));
        out->offsets[i] = off;
        memcpy(out->ids + i * seqlen, tokens + off, (size_t)seqlen * sizeof(int32_t));
    }
    out->nsamples = nsamples;
    out->seqlen   = seqlen;
    return LQ_OK;
}

void lq_windows_free(lq_windows *w) {
    if (!w)
        return;
    free(w->ids);
    free(w->offsets);
    memset(w, 0, sizeof *w);
}

/* scripts/embed_file.cmake generates the definitions (lq_builtin_calib_data.c in the build). */
extern const unsigned char lq_builtin_calib_zst[];
extern const size_t        lq_builtin_calib_zst_size;

bool lq_calib_is_builtin(const char *path) {
    return !path || !*path || !strcmp(path, "builtin") || !strcmp(path, LQ_CALIB_BUILTIN);
}

lq_status lq_text_read_builtin(int64_t max_bytes, lq_text *out, lq_err *err) {
    return lq_text_read_memory(lq_builtin_calib_zst, lq_builtin_calib_zst_size, LQ_TEXT_ZSTD,
                               LQ_CALIB_BUILTIN, max_bytes, out, err);
}

int64_t lq_calib_text_budget(int64_t nsamples, int64_t seqlen, int64_t max_memory) {
    int64_t tok, b, lo;
    if (!lq_mul_i64(nsamples, seqlen + 1, &tok) || !lq_mul_i64(tok, LQ_CALIB_BYTES_PER_TOKEN, &b))
        return LQ_TEXT_DEFAULT_MAX_BYTES;
    if (b < LQ_CALIB_MIN_TEXT)
        b = LQ_CALIB_MIN_TEXT;
    if (max_memory > 0 && b > max_memory / 64) {
        b = max_memory / 64;
        if (!lq_mul_i64(tok, 8, &lo) || b < lo)
            b = lo;
    }
    return b < LQ_TEXT_DEFAULT_MAX_BYTES ? b : LQ_TEXT_DEFAULT_MAX_BYTES;
}

lq_status lq_calib_windows(const char *path, lq_encode_fn enc, void *enc_user, int64_t nsamples,
                           int64_t seqlen, int64_t max_pos, uint64_t seed, int64_t max_bytes,
                           lq_windows *out, lq_err *err) {
    if (!out || !enc)
        return lq_fail(err, LQ_ERR_INVALID_ARG, "lq_calib_windows: NULL argument");
    memset(out, 0, sizeof *out);
    lq_text   text = {0};
    int32_t  *ids  = NULL;
    int64_t   n    = 0;
    lq_status st;
    const int builtin = lq_calib_is_builtin(path);
    if (builtin)
        path = LQ_CALIB_BUILTIN;
    LQ_TRY_GOTO(builtin ? lq_text_read_builtin(max_bytes, &text, err)
                        : lq_text_read_file(path, max_bytes, &text, err));
    st = enc(enc_user, text.data, text.len, &ids, &n, err);
    if (st != LQ_OK) {
        lq_err_prefix(err, "%s", path);
        goto done;
    }
    LQ_TRY_GOTO(lq_windows_sample(ids, n, nsamples, seqlen, max_pos, seed, path, out, err));
    out->text_bytes     = text.len;
    out->text_truncated = text.truncated;
done:
    free(ids);
    lq_text_free(&text);
    return st;
}
