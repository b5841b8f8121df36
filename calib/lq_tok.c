/* Tokenizers behind lq_tok.h. This file holds the loader dispatch and the llama2.c tokenizer
 * (tokNNN.bin / tokenizer.bin): SentencePiece-BPE pieces with scores, encoded exactly as
 * llama2.c run.c encode() does, with a heap instead of run.c's quadratic rescans. */
#include "lq_tok.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lq_tok_impl.h"

void lq_tok_free(lq_tokenizer *t) {
    if (!t)
        return;
    for (int64_t i = 0; i < t->n; i++)
        free(t->piece[i]);
    free(t->piece);
    free(t->plen);
    free(t->score);
    free(t->sorted);
    free(t->htab);
    lq_tok_hf_free(t->hf);
    free(t->user);
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

int lq_tok_cmp_bytes(const char *a, int32_t al, const char *b, int32_t bl) {
    int c = memcmp(a, b, (size_t)(al < bl ? al : bl));
    return c ? c : (al > bl) - (al < bl);
}

/* qsort_r is not portable C; sort an index array with a simple merge sort over the table. */
void lq_tok_sort_ids(const lq_tokenizer *t, int32_t *ids, int32_t *tmp, int64_t n) {
    if (n < 2)
        return;
    int64_t h = n / 2;
    lq_tok_sort_ids(t, ids, tmp, h);
    lq_tok_sort_ids(t, ids + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c = lq_tok_cmp_bytes(t->piece[ids[i]], t->plen[ids[i]], t->piece[ids[j]], t->plen[ids[j]]);
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
static uint64_t piece_hash(const char *s, int32_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

lq_status lq_tok_index(lq_tokenizer *t, lq_err *err) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)t->nsorted)
        cap *= 2;
    free(t->htab);
    t->htab = malloc(cap * sizeof *t->htab);
    if (!t->htab)
        LQ_FAIL(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    memset(t->htab, 0xff, cap * sizeof *t->htab);
    t->hmask = cap - 1;
    /* sorted[] is stable in id order within equal bytes: the first inserted wins */
    for (int64_t k = 0; k < t->nsorted; k++) {
        int32_t  id = t->sorted[k];
        uint64_t p  = piece_hash(t->piece[id], t->plen[id]) & t->hmask;
        for (;; p = (p + 1) & t->hmask) {
            int32_t o = t->htab[p];
            if (o < 0) {
                t->htab[p] = id;
                break;
            }
            if (!lq_tok_cmp_bytes(t->piece[o], t->plen[o], t->piece[id], t->plen[id]))
                break;
        }
    }
    return LQ_OK;
}

int32_t lq_tok_lookup(const lq_tokenizer *t, const char *s, int32_t len) {
    for (uint64_t p = piece_hash(s, len) & t->hmask;; p = (p + 1) & t->hmask) {
        int32_t id = t->htab[p];
        if (id < 0)
            return -1;
        if (t->plen[id] == len && !memcmp(t->piece[id], s, (size_t)len))
            return id;
    }
}

static lq_status load_llama2c(const uint8_t *buf, size_t len, const char *label,
                              lq_tokenizer *t, lq_err *err) {
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
    t->n      = n;
    t->piece  = calloc((size_t)n, sizeof *t->piece);
    t->plen   = calloc((size_t)n, sizeof *t->plen);
    t->score  = calloc((size_t)n, sizeof *t->score);
    t->sorted = calloc((size_t)n, sizeof *t->sorted);
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
    lq_tok_sort_ids(t, t->sorted, tmp, n);
    free(tmp);
    t->nsorted  = n;
    LQ_TRY(lq_tok_index(t, err));
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




static int cand_before(const cand *a, const cand *b) {
    if (a->score != b->score)
        return a->score > b->score;
    return a->left < b->left;
}

int lq_tok_heap_push(heap *h, cand c) {
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

cand lq_tok_heap_pop(heap *h) {
    cand top = h->v[0], last = h->v[--h->n];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, b = i;
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
    int32_t id = lq_tok_lookup(t, buf, la + lb);
    if (id < 0)
        return 0;
    cand c = {t->score[id], id, a, b, (int32_t)s[a].ver, (int32_t)s[b].ver};
    return lq_tok_heap_push(h, c);
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

static lq_status encode_llama2c(const lq_tokenizer *t, const char *text, int64_t len,
                                int add_bos, int32_t **ids, int64_t *n_ids, lq_err *err) {
    /* Worst case: dummy prefix + one symbol per byte. */
    sym  *s   = malloc((size_t)(len + 2) * sizeof *s);
    char *buf = malloc((size_t)2 * 65536 + 8);
    heap  h   = {0};
    int32_t *out = NULL;
    lq_status st = LQ_OK;
    if (!s || !buf) {
        st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory for %lld bytes", (long long)len);
        goto done;
    }
    int64_t ns = 0;
    if (len > 0) { /* run.c: add_dummy_prefix when the text is non-empty */
        int32_t sp = lq_tok_lookup(t, " ", 1);
        if (sp >= 0)
            s[ns++].id = sp;
    }
    for (int64_t i = 0; i < len;) {
        /* run.c collects a lead byte and up to 3 continuation bytes */
        int64_t j = i + 1;
        while (j < len && j - i < 4 && ((unsigned char)text[j] & 0xc0) == 0x80)
            j++;
        (void)utf8_len;
        int32_t id = lq_tok_lookup(t, text + i, (int32_t)(j - i));
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
        cand c = lq_tok_heap_pop(&h);
        if ((int32_t)s[c.left].ver != c.lver || (int32_t)s[c.right].ver != c.rver || s[c.left].next != c.right ||
            s[c.left].id < 0 || s[c.right].id < 0)
            continue; /* stale */
        int64_t a = c.left, b = c.right;
        s[a].id = c.id;
        s[a].ver++;
        s[b].id   = -1;
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
    out = malloc((size_t)(ns + 1) * sizeof *out);
    if (!out) {
        st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    int64_t n = 0;
    if (add_bos && t->bos >= 0)
        out[n++] = t->bos;
    for (int64_t i = ns > 0 ? 0 : -1; i >= 0; i = s[i].next)
        out[n++] = s[i].id;
    *ids   = out;
    *n_ids = n;
    out    = NULL;
done:
    free(out);
    free(s);
    free(buf);
    free(h.v);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
lq_status lq_tok_encode(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                        int32_t **ids, int64_t *n_ids, lq_err *err) {
    *ids   = NULL;
    *n_ids = 0;
    if (t->kind == LQ_TOK_LLAMA2C)
        return encode_llama2c(t, text, len, add_bos, ids, n_ids, err);
    if (t->kind == LQ_TOK_SPM)
        return lq_tok_encode_spm(t, text, len, add_bos, ids, n_ids, err);
    if (t->kind == LQ_TOK_HF_JSON)
        return lq_tok_encode_hf(t, text, len, add_bos, ids, n_ids, err);
    LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: tokenizer kind not implemented", t->path);
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
    if (kind == LQ_TOK_LLAMA2C)
        s = load_llama2c(buf, len, t->path, t, err);
    else if (kind == LQ_TOK_SPM)
        s = lq_tok_load_spm(buf, len, t->path, t, err);
    else if (kind == LQ_TOK_HF_JSON)
        s = lq_tok_load_hf(buf, len, t->path, t, err);
    else
        s = lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED, "%s: tokenizer format not supported yet",
                    t->path);
    if (s != LQ_OK) {
        lq_tok_free(t);
        return s;
    }
    *out = t;
    return LQ_OK;
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
