/* Streaming encoder (contract in lq_tok.h): the text is encoded a part at a time, each part cut
 * after a newline where encoding the two sides apart gives the ids of encoding them together. */
#include "lq_tok_int.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_PART ((int64_t)8 << 20)
/* Cut candidates tried per search; each costs three encodes of a window. */
#define MAX_TRIES 8

struct lq_tok_stream {
    const lq_tokenizer *t;
    lq_tok_ids_fn       fn;
    void               *user;
    int                 add_bos;
    int64_t             part; /* text per encode */
    int64_t             win;  /* bytes either side of a cut that are checked */
    char               *buf;  /* text not encoded yet */
    int64_t             len, cap;
    int64_t             next_try;  /* look for a cut once len reaches this */
    int                 started;   /* something was encoded: later parts continue the text */
    lq_tok_ids          ids, a, b; /* output of a part; the check's two encodes */
    int64_t             ready;     /* ids holds the part [0, ready) (cut_ok made it) */
    lq_tok_stream_stats st;
};

lq_status lq_tok_stream_create(const lq_tokenizer *t, int add_bos, int64_t part_bytes,
                               lq_tok_ids_fn fn, void *user, lq_tok_stream **out, lq_err *err) {
    *out = NULL;
    LQ_RETURN_IF(!t || !fn || part_bytes < 0, err, LQ_ERR_INVALID_ARG,
                 "lq_tok_stream_create: bad arguments");
    lq_tok_stream *s = calloc(1, sizeof *s);
    LQ_RETURN_IF(!s, err, LQ_ERR_NOMEM, "tokenizer: out of memory");
    s->t       = t;
    s->fn      = fn;
    s->user    = user;
    s->add_bos = add_bos && t->bos >= 0;
    s->part    = part_bytes > 0 ? part_bytes : DEFAULT_PART;
    /* small parts (tests) keep small windows, so that cuts exist at all */
    s->win      = s->part / 4 < 16 ? 16 : s->part / 4 > 1024 ? 1024 : s->part / 4;
    s->next_try = s->part;
    *out        = s;
    return LQ_OK;
}

void lq_tok_stream_free(lq_tok_stream *s) {
    if (!s)
        return;
    free(s->buf);
    free(s->ids.v);
    free(s->a.v);
    free(s->b.v);
    free(s);
}

lq_tok_stream_stats lq_tok_stream_get_stats(const lq_tok_stream *s) {
    return s->st;
}

static int64_t char_start(const char *p, int64_t i, int64_t lo) {
    while (i > lo && ((unsigned char)p[i] & 0xc0) == 0x80)
        i--;
    return i;
}

static int64_t char_end(const char *p, int64_t i, int64_t hi) {
    while (i < hi && ((unsigned char)p[i] & 0xc0) == 0x80)
        i++;
    return i;
}

/* Some non-whitespace byte within 64 bytes on each side of c: a long whitespace run across the
 * cut is the one place a pre-tokenizer piece could reach past the checked window. */
static int ordinary(const char *p, int64_t c, int64_t len) {
    int l = 0, r = 0;
    for (int64_t i = c - 1; i >= 0 && i >= c - 64 && !l; i--)
        l = !lq_ascii_space(p[i]);
    for (int64_t i = c; i < len && i < c + 64 && !r; i++)
        r = !lq_ascii_space(p[i]);
    return l && r;
}

/* memcmp of two id arrays; an array that never grew is NULL, which memcmp may not be given even
 * for zero ids (UBSan nonnull, found by fuzz_tokenizer: a Split that removes every character). */
static int ids_same(const int32_t *a, const int32_t *b, int64_t n) {
    return n == 0 || !memcmp(a, b, (size_t)n * sizeof *a);
}

/* Whether cutting buf at c (just after a newline) leaves the ids unchanged: first (cheap) the
 * window of win bytes either side, encoded whole, equals its two halves encoded apart; then the
 * same from the start of the buffer, a cut already made, so that the text left of c is seen with
 * its real context. The part's ids, [BOS +] buf[0, c), are left in s->ids for emit. */
static lq_status cut_ok(lq_tok_stream *s, int64_t c, int *ok, lq_err *err) {
    *ok                 = 0;
    const int64_t w0    = char_start(s->buf, c - s->win > 0 ? c - s->win : 0, 0);
    const int64_t w1    = char_end(s->buf, c + s->win < s->len ? c + s->win : s->len, s->len);
    const int     cont0 = w0 > 0 || s->started;
    s->a.n = s->b.n = 0;
    LQ_TRY(lq_tok_encode_part(s->t, s->buf + w0, w1 - w0, cont0, &s->a, err));
    LQ_TRY(lq_tok_encode_part(s->t, s->buf + w0, c - w0, cont0, &s->b, err));
    LQ_TRY(lq_tok_encode_part(s->t, s->buf + c, w1 - c, 1, &s->b, err));
    if (s->a.n != s->b.n || !ids_same(s->a.v, s->b.v, s->a.n))
        return LQ_OK;
    const int64_t bos = !s->started && s->add_bos;
    s->a.n = s->b.n = s->ids.n = s->ready = 0;
    if (bos && lq_tok_ids_push(&s->ids, s->t->bos) < 0)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", s->t->path);
    LQ_TRY(lq_tok_encode_part(s->t, s->buf, w1, s->started, &s->a, err));
    LQ_TRY(lq_tok_encode_part(s->t, s->buf, c, s->started, &s->ids, err));
    LQ_TRY(lq_tok_encode_part(s->t, s->buf + c, w1 - c, 1, &s->b, err));
    const int64_t np = s->ids.n - bos;
    /* (np == 0, b.n == 0: no offsets on arrays that may be NULL) */
    int same = s->a.n == np + s->b.n;
    same     = same && (np == 0 || ids_same(s->a.v, s->ids.v + bos, np));
    same     = same && (s->b.n == 0 || ids_same(s->a.v + np, s->b.v, s->b.n));
    *ok      = same;
    s->ready = *ok ? c : 0;
    return LQ_OK;
}

static lq_status try_cut(lq_tok_stream *s, int64_t i, int *tries, int *ok, lq_err *err) {
    *ok = 0;
    if (s->buf[i - 1] != '\n' || !ordinary(s->buf, i, s->len))
        return LQ_OK;
    ++*tries;
    s->st.checks++;
    LQ_TRY(cut_ok(s, i, ok, err));
    s->st.rejected += !*ok;
    return LQ_OK;
}

/* A checked cut: the last one in [part/2, part], else the first one after part (a line longer
 * than half a part), leaving win bytes after it; 0 if none. */
static lq_status find_cut(lq_tok_stream *s, int64_t *cut, lq_err *err) {
    *cut                = 0;
    const int64_t lo    = s->part / 2 > 1 ? s->part / 2 : 1;
    const int64_t hi    = s->len - s->win;
    const int64_t mid   = hi < s->part ? hi : s->part;
    int           tries = 0, ok = 0;
    for (int64_t i = mid; i >= lo && tries < MAX_TRIES && !ok; i--)
        LQ_TRY(try_cut(s, *cut = i, &tries, &ok, err));
    tries = 0;
    for (int64_t i = mid + 1; i <= hi && tries < MAX_TRIES && !ok; i++)
        LQ_TRY(try_cut(s, *cut = i, &tries, &ok, err));
    if (!ok)
        *cut = 0;
    return LQ_OK;
}

static lq_status emit(lq_tok_stream *s, int64_t n, lq_err *err) {
    if (s->ready != n || n == 0) {
        s->ids.n = 0;
        if (!s->started && s->add_bos && lq_tok_ids_push(&s->ids, s->t->bos) < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", s->t->path);
        /* finish with nothing pushed: buf was never allocated */
        LQ_TRY(lq_tok_encode_part(s->t, s->buf ? s->buf : "", n, s->started, &s->ids, err));
    }
    s->ready   = 0;
    s->started = 1;
    s->st.parts++;
    s->st.text_bytes += n;
    s->st.ids += s->ids.n;
    if (s->len > n)
        memmove(s->buf, s->buf + n, (size_t)(s->len - n));
    s->len -= n;
    return s->ids.n ? s->fn(s->user, s->ids.v, s->ids.n, err) : LQ_OK;
}

lq_status lq_tok_stream_push(lq_tok_stream *s, const char *text, int64_t len, lq_err *err) {
    LQ_RETURN_IF(len < 0 || (len > 0 && !text), err, LQ_ERR_INVALID_ARG,
                 "%s: stream: bad text (len %lld)", s->t->path, (long long)len);
    int64_t need;
    LQ_RETURN_IF(!lq_add_i64(s->len, len, &need) || need > INT64_MAX / 2, err, LQ_ERR_NOMEM,
                 "%s: stream: text too long", s->t->path);
    if (need > s->cap) {
        int64_t nc = s->cap ? s->cap : 1 << 16;
        while (nc < need)
            nc *= 2;
        char *nb = realloc(s->buf, (size_t)nc);
        LQ_RETURN_IF(!nb, err, LQ_ERR_NOMEM, "%s: out of memory for %lld bytes of text", s->t->path,
                     (long long)nc);
        s->buf = nb;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, text, (size_t)len);
    s->len              = need;
    s->st.peak_buffered = s->len > s->st.peak_buffered ? s->len : s->st.peak_buffered;
    while (s->len >= s->next_try) {
        int64_t c;
        LQ_TRY(find_cut(s, &c, err));
        if (!c) { /* no cut here: look again a part later */
            s->next_try = s->len + s->part;
            break;
        }
        LQ_TRY(emit(s, c, err));
        s->next_try = s->part;
    }
    return LQ_OK;
}

lq_status lq_tok_stream_finish(lq_tok_stream *s, lq_err *err) {
    return emit(s, s->len, err);
}
