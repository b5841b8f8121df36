/* Tokenizers behind lq_tok.h. This file holds the loader dispatch, the helpers shared with
 * lq_tok_spm.c / lq_tok_hf.c, and the llama2.c tokenizer (tokNNN.bin / tokenizer.bin):
 * SentencePiece-BPE pieces with scores, encoded exactly as llama2.c run.c encode() does, with a
 * heap instead of run.c's quadratic rescans. */
#include "lq_tok_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lq_tok_free(lq_tokenizer *t) {
    if (!t)
        return;
    for (int64_t i = 0; t->piece && i < t->n; i++)
        free(t->piece[i]);
    free(t->piece);
    free(t->plen);
    free(t->score);
    free(t->sorted);
    lq_tok_spm_free(t->spm);
    lq_tok_hf_free(t->hf);
    free(t);
}

lq_tok_kind lq_tok_get_kind(const lq_tokenizer *t) {
    return t->kind;
}
int64_t lq_tok_vocab_size(const lq_tokenizer *t) {
    return t->n;
}
int32_t lq_tok_bos_id(const lq_tokenizer *t) {
    return t->bos;
}
int32_t lq_tok_eos_id(const lq_tokenizer *t) {
    return t->eos;
}
int lq_tok_adds_bos(const lq_tokenizer *t) {
    return t->adds_bos;
}
const char *lq_tok_piece(const lq_tokenizer *t, int32_t id) {
    return (id >= 0 && id < t->n) ? t->piece[id] : NULL;
}
const char *lq_tok_source_path(const lq_tokenizer *t) {
    return t->path;
}

static int cmp_bytes(const char *a, int32_t al, const char *b, int32_t bl) {
    int c = memcmp(a, b, (size_t)(al < bl ? al : bl));
    return c ? c : (al > bl) - (al < bl);
}

/* qsort_r is not portable C; sort an index array with a simple merge sort over the table. */
static void sort_ids(const lq_tokenizer *t, int32_t *ids, int32_t *tmp, int64_t n) {
    if (n < 2)
        return;
    int64_t h = n / 2;
    sort_ids(t, ids, tmp, h);
    sort_ids(t, ids + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c    = cmp_bytes(t->piece[ids[i]], t->plen[ids[i]], t->piece[ids[j]], t->plen[ids[j]]);
        tmp[k++] = (c <= 0) ? ids[i++] : ids[j++];
    }
    while (i < h)
        tmp[k++] = ids[i++];
    while (j < n)
        tmp[k++] = ids[j++];
    memcpy(ids, tmp, (size_t)n * sizeof *ids);
}

/* Id of the piece with exactly these bytes, -1 if none (first id on duplicates, like a stable
 * sort + lower bound). */
static int32_t lookup(const lq_tokenizer *t, const char *s, int32_t len) {
    int64_t lo = 0, hi = t->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        int32_t id  = t->sorted[mid];
        if (cmp_bytes(t->piece[id], t->plen[id], s, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->n) {
        int32_t id = t->sorted[lo];
        if (cmp_bytes(t->piece[id], t->plen[id], s, len) == 0)
            return id;
    }
    return -1;
}

static lq_status load_llama2c(const uint8_t *buf, size_t len, const char *label, lq_tokenizer *t,
                              lq_err *err) {
    if (len < 4)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: too short for a llama2.c tokenizer", label);
    int32_t maxlen;
    memcpy(&maxlen, buf, 4);
    if (maxlen <= 0 || maxlen > 1 << 16)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: bad max_token_length %d", label, maxlen);
    /* Count entries first: the vocab size is not stored in the file. */
    size_t  pos = 4;
    int64_t n   = 0;
    while (pos < len) {
        int32_t l;
        if (len - pos < 8)
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: truncated entry %lld", label, (long long)n);
        memcpy(&l, buf + pos + 4, 4);
        if (l < 0 || l > maxlen || (size_t)l > len - pos - 8)
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: entry %lld has bad length %d", label,
                    (long long)n, l);
        pos += 8 + (size_t)l;
        n++;
    }
    if (n < 3)
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: only %lld pieces", label, (long long)n);
    t->n         = n;
    t->piece     = calloc((size_t)n, sizeof *t->piece);
    t->plen      = calloc((size_t)n, sizeof *t->plen);
    t->score     = calloc((size_t)n, sizeof *t->score);
    t->sorted    = calloc((size_t)n, sizeof *t->sorted);
    int32_t *tmp = calloc((size_t)n, sizeof *tmp);
    if (!t->piece || !t->plen || !t->score || !t->sorted || !tmp) {
        free(tmp);
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
    }
    pos = 4;
    for (int64_t i = 0; i < n; i++) {
        memcpy(&t->score[i], buf + pos, 4);
        memcpy(&t->plen[i], buf + pos + 4, 4);
        t->piece[i] = malloc((size_t)t->plen[i] + 1);
        if (!t->piece[i]) {
            free(tmp);
            LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", label);
        }
        memcpy(t->piece[i], buf + pos + 8, (size_t)t->plen[i]);
        t->piece[i][t->plen[i]] = 0;
        t->sorted[i]            = (int32_t)i;
        pos += 8 + (size_t)t->plen[i];
    }
    sort_ids(t, t->sorted, tmp, n);
    free(tmp);
    t->kind     = LQ_TOK_LLAMA2C;
    t->bos      = 1; /* llama2.c / SentencePiece convention: <unk>=0, <s>=1, </s>=2 */
    t->eos      = 2;
    t->adds_bos = 1;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* BPE merging by piece score on a linked list with a max-heap of candidate pairs. */
typedef struct sym {
    int32_t id;
    int64_t prev, next; /* -1 = none */
    int64_t ver;        /* bumped when the symbol changes */
} sym;

typedef struct cand {
    float   score;
    int64_t left, right; /* symbol indices */
    int64_t lver, rver;
    int32_t id; /* merged piece */
} cand;

/* Heap order: higher score first; on ties the leftmost pair (run.c scans left to right and
 * keeps the first strictly better one). Original indices increase left to right. */
static int cand_before(const cand *a, const cand *b) {
    if (a->score != b->score)
        return a->score > b->score;
    return a->left < b->left;
}

typedef struct heap {
    cand   *v;
    int64_t n, cap;
} heap;

static int heap_push(heap *h, cand c) {
    if (h->n == h->cap) {
        int64_t nc = h->cap ? h->cap * 2 : 256;
        cand   *nv = realloc(h->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -1;
        h->v   = nv;
        h->cap = nc;
    }
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!cand_before(&c, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i       = p;
    }
    h->v[i] = c;
    return 0;
}

static cand heap_pop(heap *h) {
    cand    top = h->v[0], last = h->v[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t     l = 2 * i + 1, r = l + 1, b = i;
        const cand *bv = &last;
        if (l < h->n && cand_before(&h->v[l], bv))
            b = l, bv = &h->v[l];
        if (r < h->n && cand_before(&h->v[r], bv))
            b = r;
        if (b == i)
            break;
        h->v[i] = h->v[b];
        i       = b;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

static int try_pair(const lq_tokenizer *t, const sym *s, int64_t a, heap *h, char *buf) {
    int64_t b = s[a].next;
    if (b < 0)
        return 0;
    int32_t la = t->plen[s[a].id], lb = t->plen[s[b].id];
    memcpy(buf, t->piece[s[a].id], (size_t)la);
    memcpy(buf + la, t->piece[s[b].id], (size_t)lb);
    int32_t id = lookup(t, buf, la + lb);
    if (id < 0)
        return 0;
    cand c = {t->score[id], a, b, s[a].ver, s[b].ver, id};
    return heap_push(h, c);
}

static int utf8_len(unsigned char c) {
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0)
        return 2;
    if ((c & 0xf0) == 0xe0)
        return 3;
    if ((c & 0xf8) == 0xf0)
        return 4;
    return 1;
}

/* Merge text[len] (with run.c's dummy prefix " " when dummy) and append the ids to out[*n]
 * (capacity *cap, grown as needed). The working set is ~80 bytes per byte of text[len]. */
static lq_status encode_span(const lq_tokenizer *t, const char *text, int64_t len, int dummy,
                             lq_tok_ids *out, lq_err *err) {
    /* Worst case: dummy prefix + one symbol per byte. */
    sym      *s   = malloc((size_t)(len + 2) * sizeof *s);
    char     *buf = malloc((size_t)2 * 65536 + 8);
    heap      h   = {0};
    lq_status st  = LQ_OK;
    if (!s || !buf) {
        st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory for %lld bytes", (long long)len);
        goto done;
    }
    int64_t ns = 0;
    if (dummy && len > 0) { /* run.c: add_dummy_prefix when the text is non-empty */
        int32_t sp = lookup(t, " ", 1);
        if (sp >= 0)
            s[ns++].id = sp;
    }
    for (int64_t i = 0; i < len;) {
        /* run.c collects a lead byte and up to 3 continuation bytes */
        int64_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xc0) == 0x80)
            j++;
        (void)utf8_len;
        int32_t id = lookup(t, text + i, (int32_t)(j - i));
        if (id >= 0) {
            s[ns++].id = id;
        } else {
            for (int64_t b = i; b < j; b++) /* byte fallback: <0x00>.. start at id 3 */
                s[ns++].id = (int32_t)(unsigned char)text[b] + 3;
        }
        i = j;
    }
    for (int64_t i = 0; i < ns; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < ns ? i + 1 : -1;
        s[i].ver  = 0;
        if (s[i].id >= t->n) {
            st = lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: byte fallback id %d outside vocab",
                         t->path, s[i].id);
            goto done;
        }
    }
    for (int64_t i = 0; i + 1 < ns; i++)
        if (try_pair(t, s, i, &h, buf) < 0) {
            st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    while (h.n > 0) {
        cand c = heap_pop(&h);
        if (s[c.left].ver != c.lver || s[c.right].ver != c.rver || s[c.left].next != c.right ||
            s[c.left].id < 0 || s[c.right].id < 0)
            continue; /* stale */
        int64_t a = c.left, b = c.right;
        s[a].id = c.id;
        s[a].ver++;
        s[b].id = -1;
        s[b].ver++;
        s[a].next = s[b].next;
        if (s[b].next >= 0)
            s[s[b].next].prev = a;
        if ((s[a].prev >= 0 && try_pair(t, s, s[a].prev, &h, buf) < 0) ||
            try_pair(t, s, a, &h, buf) < 0) {
            st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
    }
    for (int64_t i = ns > 0 ? 0 : -1; i >= 0; i = s[i].next)
        if (lq_tok_ids_push(out, s[i].id) < 0) {
            st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
done:
    free(s);
    free(buf);
    free(h.v);
    return st;
}

/* True when a newline becomes a byte-fallback symbol that no merge can take part in: "\n" is
 * no piece, and no piece but the byte token itself contains its piece text ("<0x0A>"). Then
 * merging each line on its own gives the ids of merging the whole text, and the working set is
 * one line instead of ~80 bytes per byte of the text (4 GB for 64 MB). */
static int newline_isolated(const lq_tokenizer *t) {
    if (lookup(t, "\n", 1) >= 0 || t->n <= '\n' + 3)
        return 0;
    const int32_t nl = '\n' + 3, pl = t->plen[nl];
    for (int32_t i = 0; i < t->n; i++) {
        if (i == nl || t->plen[i] < pl || pl == 0)
            continue;
        for (int32_t k = 0; k + pl <= t->plen[i]; k++)
            if (!memcmp(t->piece[i] + k, t->piece[nl], (size_t)pl))
                return 0;
    }
    return 1;
}

/* Append the ids of text[len] to out; cont: the text continues an earlier part (no dummy
 * prefix: it belongs to the start of the whole text only). */
static lq_status encode_llama2c(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                                lq_tok_ids *out, lq_err *err) {
    if (len < (1 << 16) || !newline_isolated(t))
        return encode_span(t, text, len, !cont, out, err);
    for (int64_t i = 0; i < len;) {
        const char   *nl  = memchr(text + i, '\n', (size_t)(len - i));
        const int64_t e   = nl ? nl - text : len;
        const int     at0 = i == 0 && !cont;
        LQ_TRY(encode_span(t, text + i, e - i, at0, out, err));
        if (nl) {
            /* a text that starts with a newline: the dummy prefix stands alone before it */
            const int32_t sp = at0 && e == 0 ? lookup(t, " ", 1) : -1;
            if ((sp >= 0 && lq_tok_ids_push(out, sp) < 0) || lq_tok_ids_push(out, '\n' + 3) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        }
        i = e + 1;
    }
    return LQ_OK;
}

lq_status lq_tok_encode_part(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                             lq_tok_ids *out, lq_err *err) {
    if (t->kind == LQ_TOK_LLAMA2C)
        return encode_llama2c(t, text, len, cont, out, err);
    if (t->kind == LQ_TOK_SPM)
        return lq_tok_spm_encode(t, text, len, cont, out, err);
    return lq_tok_hf_encode(t, text, len, cont, out, err);
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_tok_encode(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                        int32_t **ids, int64_t *n_ids, lq_err *err) {
    *ids   = NULL;
    *n_ids = 0;
    if (len < 0 || (len > 0 && !text))
        LQ_FAIL(err, LQ_ERR_INVALID_ARG, "%s: encode: bad text (len %lld)", t->path,
                (long long)len);
    lq_tok_ids out = {0};
    lq_status  st  = LQ_OK;
    if (add_bos && t->bos >= 0 && lq_tok_ids_push(&out, t->bos) < 0)
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    else
        st = lq_tok_encode_part(t, text, len, 0, &out, err);
    if (st != LQ_OK) {
        free(out.v);
        return st;
    }
    if (!out.v && lq_tok_ids_push(&out, 0) == 0) /* a valid pointer even for zero ids */
        out.n = 0;
    if (!out.v)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    *ids   = out.v;
    *n_ids = out.n;
    return LQ_OK;
}

lq_status lq_tok_load_memory(const void *buf, size_t len, lq_tok_kind kind, const char *label,
                             lq_tokenizer **out, lq_err *err) {
    *out            = NULL;
    lq_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        LQ_FAIL(err, LQ_ERR_NOMEM, "out of memory");
    snprintf(t->path, sizeof t->path, "%s", label ? label : "<memory>");
    t->bos      = -1;
    t->eos      = -1;
    lq_status s = LQ_OK;
    if (!buf && len > 0)
        s = lq_fail(err, LQ_ERR_INVALID_ARG, "%s: NULL buffer", t->path);
    else if (kind == LQ_TOK_LLAMA2C)
        s = load_llama2c(buf, len, t->path, t, err);
    else if (kind == LQ_TOK_SPM)
        s = lq_tok_spm_load(buf, len, t, err);
    else if (kind == LQ_TOK_HF_JSON)
        s = lq_tok_hf_load(buf, len, t, err);
    else
        s = lq_fail(err, LQ_ERR_INVALID_ARG, "%s: unknown tokenizer kind %d", t->path, (int)kind);
    if (s != LQ_OK) {
        lq_tok_free(t);
        return s;
    }
    *out = t;
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Helpers shared with lq_tok_spm.c and lq_tok_hf.c. */

lq_status lq_tok_alloc_pieces(lq_tokenizer *t, int64_t n, lq_err *err) {
    t->n     = n;
    t->piece = calloc((size_t)(n > 0 ? n : 1), sizeof *t->piece);
    t->plen  = calloc((size_t)(n > 0 ? n : 1), sizeof *t->plen);
    t->score = calloc((size_t)(n > 0 ? n : 1), sizeof *t->score);
    if (!t->piece || !t->plen || !t->score)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory for %lld pieces", t->path, (long long)n);
    return LQ_OK;
}

/* FNV-1a, then a multiplicative finalizer so the low bits used for slots are well mixed. */
uint64_t lq_tok_hash(const char *s, int64_t len) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

int lq_tok_map_init(lq_tok_map *m, int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected + 2)
        cap *= 2;
    m->e = malloc((size_t)cap * sizeof *m->e);
    if (!m->e)
        return -1;
    for (int64_t i = 0; i < cap; i++)
        m->e[i].val = -1;
    m->cap = cap;
    m->n   = 0;
    return 0;
}

void lq_tok_map_free(lq_tok_map *m) {
    free(m->e);
    m->e   = NULL;
    m->cap = m->n = 0;
}

static int64_t map_slot(const lq_tok_map *m, const char *s, int64_t len, uint64_t h) {
    int64_t i = (int64_t)(h & (uint64_t)(m->cap - 1));
    for (;;) {
        const lq_tok_ment *e = &m->e[i];
        if (e->val < 0 || (e->h == h && e->len == len && !memcmp(e->s, s, (size_t)len)))
            return i;
        i = (i + 1) & (m->cap - 1);
    }
}

int lq_tok_map_put(lq_tok_map *m, const char *s, int32_t len, int32_t val) {
    if (!m->e && lq_tok_map_init(m, 8) < 0)
        return -1;
    if (2 * (m->n + 1) > m->cap) {
        lq_tok_map nm;
        if (lq_tok_map_init(&nm, m->cap) < 0)
            return -1;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->e[i].val >= 0)
                nm.e[map_slot(&nm, m->e[i].s, m->e[i].len, m->e[i].h)] = m->e[i];
        nm.n = m->n;
        free(m->e);
        *m = nm;
    }
    uint64_t h = lq_tok_hash(s, len);
    int64_t  i = map_slot(m, s, len, h);
    if (m->e[i].val >= 0)
        return 0;
    m->e[i] = (lq_tok_ment){s, h, len, val};
    m->n++;
    return 1;
}

int32_t lq_tok_map_get(const lq_tok_map *m, const char *s, int64_t len) {
    if (!m->e || len > INT32_MAX)
        return -1;
    return m->e[map_slot(m, s, len, lq_tok_hash(s, len))].val;
}

static int hcand_before(const lq_tok_cand *a, const lq_tok_cand *b) {
    if (a->key != b->key)
        return a->key < b->key;
    return a->pos < b->pos;
}

int lq_tok_heap_push(lq_tok_heap *h, lq_tok_cand c) {
    if (h->n == h->cap) {
        int64_t      nc = h->cap ? h->cap * 2 : 256;
        lq_tok_cand *nv = realloc(h->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -1;
        h->v   = nv;
        h->cap = nc;
    }
    int64_t i = h->n++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!hcand_before(&c, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i       = p;
    }
    h->v[i] = c;
    return 0;
}

lq_tok_cand lq_tok_heap_pop(lq_tok_heap *h) {
    lq_tok_cand top = h->v[0], last = h->v[--h->n];
    int64_t     i = 0;
    for (;;) {
        int64_t            l = 2 * i + 1, r = l + 1, b = i;
        const lq_tok_cand *bv = &last;
        if (l < h->n && hcand_before(&h->v[l], bv))
            b = l, bv = &h->v[l];
        if (r < h->n && hcand_before(&h->v[r], bv))
            b = r;
        if (b == i)
            break;
        h->v[i] = h->v[b];
        i       = b;
    }
    if (h->n > 0)
        h->v[i] = last;
    return top;
}

int lq_tok_ids_push(lq_tok_ids *a, int32_t id) {
    if (a->n == a->cap) {
        int64_t  nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return -1;
        a->v   = nv;
        a->cap = nc;
    }
    a->v[a->n++] = id;
    return 0;
}

int lq_tok_utf8_dec(const unsigned char *s, int64_t n, uint32_t *cp) {
    if (n <= 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int      k;
    uint32_t v, lo;
    if ((c & 0xe0) == 0xc0)
        k = 2, v = c & 0x1f, lo = 0x80;
    else if ((c & 0xf0) == 0xe0)
        k = 3, v = c & 0x0f, lo = 0x800;
    else if ((c & 0xf8) == 0xf0)
        k = 4, v = c & 0x07, lo = 0x10000;
    else
        return 0;
    if (n < k)
        return 0;
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < lo || v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
        return 0;
    *cp = v;
    return k;
}

int lq_tok_utf8_enc(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static lq_tok_kind kind_of(const char *path) {
    size_t l = strlen(path);
    if (l >= 5 && !strcmp(path + l - 5, ".json"))
        return LQ_TOK_HF_JSON;
    if (l >= 6 && !strcmp(path + l - 6, ".model"))
        return LQ_TOK_SPM;
    return LQ_TOK_LLAMA2C;
}

lq_status lq_tok_load_file(const char *path, lq_tokenizer **out, lq_err *err) {
    *out      = NULL;
    char   *b = NULL;
    int64_t n = 0;
    LQ_TRY(lq_read_file(path, 1ll << 31, &b, &n, err));
    lq_status s = lq_tok_load_memory(b, (size_t)n, kind_of(path), path, out, err);
    free(b);
    return s;
}

lq_status lq_tok_load_source(const lq_source *src, lq_tokenizer **out, lq_err *err) {
    *out = NULL;
    if (!lq_source_is_gguf(src))
        return lq_tok_load_dir(lq_source_path(src), out, err);
    static const char *const names[] = {"tokenizer.json", "tokenizer.model"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char     *b = NULL, label[4200];
        int64_t   n = 0;
        lq_status s = lq_source_read(src, names[i], &b, &n, err);
        if (s == LQ_ERR_NOT_FOUND)
            continue;
        if (s == LQ_OK) {
            lq_source_file_label(src, names[i], label, sizeof label);
            s = lq_tok_load_memory(b, (size_t)n, kind_of(names[i]), label, out, err);
        }
        free(b);
        return s;
    }
    LQ_FAIL(err, LQ_ERR_TOKENIZER_MISSING,
            "%s: no tokenizer in the GGUF file; pass --tokenizer "
            "FILE",
            lq_source_path(src));
}

lq_status lq_tok_load_dir(const char *dir, lq_tokenizer **out, lq_err *err) {
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};
    char                     p[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (lq_path_join(p, sizeof p, dir, names[i]) && lq_file_exists(p))
            return lq_tok_load_file(p, out, err);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l > 7 && !strncmp(de->d_name, "tok", 3) && !strcmp(de->d_name + l - 4, ".bin")) {
                lq_path_join(p, sizeof p, dir, de->d_name);
                closedir(d);
                return lq_tok_load_file(p, out, err);
            }
        }
        closedir(d);
    }
    LQ_FAIL(err, LQ_ERR_TOKENIZER_MISSING,
            "%s: no tokenizer (tokenizer.json, tokenizer.model or tokenizer.bin); pass "
            "--tokenizer FILE",
            dir);
}
