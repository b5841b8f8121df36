/* SentencePiece tokenizer.model (BPE model type), encoded as sentencepiece's
 * bpe_model.cc does: normalize (identity rules: optional whitespace cleanup,
 * dummy prefix, ' ' -> U+2581)
 *   -> one symbol per user-defined piece (longest match) or UTF-8 character
 *   -> merge the adjacent pair whose concatenation is the highest-scoring piece
 * (leftmost on ties) until none is left; merges only produce NORMAL /
 * USER_DEFINED / UNUSED pieces
 *   -> a symbol that is no piece becomes its bytes <0xNN> (byte_fallback) or
 * <unk>. The protobuf is read with a bounded reader of the few fields used
 * (sentencepiece_model.proto: ModelProto.pieces=1 {piece=1, score=2, type=3},
 * trainer_spec=2 {model_type=3, byte_fallback=35, unk_id=40, bos_id=41,
 * eos_id=42}, normalizer_spec=3 {name=1, precompiled_charsmap=2,
 * add_dummy_prefix=3, remove_extra_whitespaces=4, escape_whitespaces=5}). */
#include "lq_tok_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };

typedef struct pb {
    const uint8_t *p, *end;
} pb;

/* 0 ok, -1 malformed */
static int pb_varint(pb *b, uint64_t *v) {
    uint64_t r = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        r |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* Next field: number, wire type, and for length-delimited fields the payload.
 */
typedef struct pb_field {
    uint32_t       num;
    int            wt;
    uint64_t       v;    /* varint / fixed value */
    const uint8_t *data; /* wire type 2 */
    size_t         len;
} pb_field;

static int pb_next(pb *b, pb_field *f) {
    uint64_t key;
    if (pb_varint(b, &key))
        return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt  = (int)(key & 7);
    if (f->num == 0)
        return -1;
    switch (f->wt) {
    case 0:
        return pb_varint(b, &f->v);
    case 1:
        if (b->end - b->p < 8)
            return -1;
        memcpy(&f->v, b->p, 8);
        b->p += 8;
        return 0;
    case 5: {
        if (b->end - b->p < 4)
            return -1;
        uint32_t x;
        memcpy(&x, b->p, 4);
        f->v = x;
        b->p += 4;
        return 0;
    }
    case 2: {
        uint64_t l;
        if (pb_varint(b, &l) || l > (uint64_t)(b->end - b->p))
            return -1;
        f->data = b->p;
        f->len  = (size_t)l;
        b->p += l;
        return 0;
    }
    default: /* groups (3, 4) are not used by sentencepiece_model.proto */
        return -1;
    }
}

typedef struct spm_spec {
    int     model_type; /* 1 unigram (default), 2 bpe, 3 word, 4 char */
    int     byte_fallback;
    int32_t unk, bos, eos;
    int     add_dummy_prefix, remove_extra_ws, escape_ws;
    char    norm_name[64];
    size_t  charsmap_len;
} spm_spec;

static int parse_trainer(const uint8_t *d, size_t n, spm_spec *s) {
    pb       b = {d, d + n};
    pb_field f;
    while (b.p < b.end) {
        if (pb_next(&b, &f))
            return -1;
        if (f.wt != 0)
            continue;
        if (f.num == 3)
            s->model_type = (int)f.v;
        else if (f.num == 35)
            s->byte_fallback = f.v != 0;
        else if (f.num == 40)
            s->unk = (int32_t)f.v;
        else if (f.num == 41)
            s->bos = (int32_t)f.v;
        else if (f.num == 42)
            s->eos = (int32_t)f.v;
    }
    return 0;
}

static int parse_normalizer(const uint8_t *d, size_t n, spm_spec *s) {
    pb       b = {d, d + n};
    pb_field f;
    while (b.p < b.end) {
        if (pb_next(&b, &f))
            return -1;
        if (f.num == 1 && f.wt == 2)
            snprintf(s->norm_name, sizeof s->norm_name, "%.*s", (int)(f.len < 63 ? f.len : 63),
                     (const char *)f.data);
        else if (f.num == 2 && f.wt == 2)
            s->charsmap_len = f.len;
        else if (f.num == 3 && f.wt == 0)
            s->add_dummy_prefix = f.v != 0;
        else if (f.num == 4 && f.wt == 0)
            s->remove_extra_ws = f.v != 0;
        else if (f.num == 5 && f.wt == 0)
            s->escape_ws = f.v != 0;
    }
    return 0;
}

/* One SentencePiece message; piece bytes are copied. */
static int parse_piece(const uint8_t *d, size_t n, lq_tokenizer *t, int64_t i, uint8_t *type) {
    pb       b = {d, d + n};
    pb_field f;
    *type = PT_NORMAL;
    while (b.p < b.end) {
        if (pb_next(&b, &f))
            return -1;
        if (f.num == 1 && f.wt == 2) {
            if (f.len > 65536)
                return -1;
            free(t->piece[i]);
            t->piece[i] = malloc(f.len + 1);
            if (!t->piece[i])
                return -2;
            memcpy(t->piece[i], f.data, f.len);
            t->piece[i][f.len] = 0;
            t->plen[i]         = (int32_t)f.len;
        } else if (f.num == 2 && f.wt == 5) {
            uint32_t x = (uint32_t)f.v;
            memcpy(&t->score[i], &x, 4);
        } else if (f.num == 3 && f.wt == 0) {
            *type = (uint8_t)(f.v > 6 ? 0 : f.v);
        }
    }
    return t->piece[i] ? 0 : -1;
}

lq_status lq_tok_load_spm(const uint8_t *buf, size_t len, const char *label, lq_tokenizer *t,
                          lq_err *err) {
    spm_spec sp = {.model_type       = 1,
                   .unk              = 0,
                   .bos              = 1,
                   .eos              = 2,
                   .add_dummy_prefix = 1,
                   .remove_extra_ws  = 1,
                   .escape_ws        = 1};
    int64_t  n  = 0;
    pb       b  = {buf, buf + len};
    pb_field f;
    /* Pass 1: count pieces, read the specs. */
    while (b.p < b.end) {
        if (pb_next(&b, &f))
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT,
                    "%s: not a SentencePiece model (malformed protobuf at byte %lld)", label,
                    (long long)(b.p - buf));
        if (f.num == 1 && f.wt == 2)
            n++;
        else if (f.num == 2 && f.wt == 2 && parse_trainer(f.data, f.len, &sp))
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: malformed trainer_spec", label);
        else if (f.num == 3 && f.wt == 2 && parse_normalizer(f.data, f.len, &sp))
            LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: malformed normalizer_spec", label);
    }
    if (n < 1 || n > (1 << 24))
        LQ_FAIL(err, LQ_ERR_TOKENIZER_FORMAT, "%s: %lld pieces", label, (long long)n);
    if (sp.model_type != 2) {
        static const char *const names[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                "%s: SentencePiece model type %s is not supported (BPE only)", label,
                names[sp.model_type >= 1 && sp.model_type <= 4 ? sp.model_type : 0]);
    }
    /* Normalization rules beyond whitespace handling live in a compiled charsmap
     * (NFKC etc.); Llama/Mistral BPE models use "identity". */
    if (sp.charsmap_len > 0 || (sp.norm_name[0] && strcmp(sp.norm_name, "identity")))
        LQ_FAIL(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                "%s: SentencePiece normalizer \"%s\" is not supported (identity only)", label,
                sp.norm_name);
    t->n          = n;
    t->piece      = calloc((size_t)n, sizeof *t->piece);
    t->plen       = calloc((size_t)n, sizeof *t->plen);
    t->score      = calloc((size_t)n, sizeof *t->score);
    t->sorted     = calloc((size_t)n, sizeof *t->sorted);
    uint8_t *type = calloc((size_t)n, 1);
    int32_t *tmp  = calloc((size_t)n, sizeof *tmp);
    t->user       = calloc((size_t)n, sizeof *t->user);
    lq_status st  = LQ_OK;
    if (!t->piece || !t->plen || !t->score || !t->sorted || !type || !tmp || !t->user) {
        st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", label);
        goto done;
    }
    /* Pass 2: the pieces. */
    b.p       = buf;
    int64_t i = 0;
    while (b.p < b.end) {
        if (pb_next(&b, &f)) { /* validated in pass 1 */
            st = lq_fail(err, LQ_ERR_INTERNAL, "%s: protobuf changed between passes", label);
            goto done;
        }
        if (f.num != 1 || f.wt != 2)
            continue;
        int r = parse_piece(f.data, f.len, t, i, &type[i]);
        if (r == -2) {
            st = lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", label);
            goto done;
        }
        if (r) {
            st = lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: malformed piece %lld", label,
                         (long long)i);
            goto done;
        }
        i++;
    }
    for (int b2 = 0; b2 < 256; b2++)
        t->byte_id[b2] = -1;
    int64_t ns = 0;
    for (i = 0; i < n; i++) {
        uint8_t ty = type[i];
        if (ty == PT_NORMAL || ty == PT_USER || ty == PT_UNUSED)
            t->sorted[ns++] = (int32_t)i;
        if (ty == PT_USER && t->plen[i] > 0)
            t->user[t->nuser++] = (int32_t)i;
        unsigned x;
        char     tail;
        if (ty == PT_BYTE && t->plen[i] == 6 && sscanf(t->piece[i], "<0x%2X>%c", &x, &tail) == 1 &&
            x < 256)
            t->byte_id[x] = (int32_t)i;
    }
    lq_tok_sort_ids(t, t->sorted, tmp, ns);
    t->nsorted  = ns;
    t->ws_split = 1;
    for (int64_t k = 0; k < ns && t->ws_split; k++) {
        const char *p = t->piece[t->sorted[k]];
        int32_t     l = t->plen[t->sorted[k]];
        for (int32_t c = 1; c + 3 <= l; c++)
            if (!memcmp(p + c, "\xe2\x96\x81", 3) &&
                !(c >= 3 && !memcmp(p + c - 3, "\xe2\x96\x81", 3))) {
                t->ws_split = 0;
                break;
            }
    }
    st = lq_tok_index(t, err);
    if (st != LQ_OK)
        goto done;
    /* longest user-defined piece first */
    for (int64_t a = 1; a < t->nuser; a++)
        for (int64_t c = a; c > 0 && t->plen[t->user[c]] > t->plen[t->user[c - 1]]; c--) {
            int32_t x      = t->user[c];
            t->user[c]     = t->user[c - 1];
            t->user[c - 1] = x;
        }
    if (sp.byte_fallback)
        for (int b2 = 0; b2 < 256; b2++)
            if (t->byte_id[b2] < 0) {
                st = lq_fail(err, LQ_ERR_TOKENIZER_FORMAT,
                             "%s: byte_fallback without a <0x%02X> piece", label, b2);
                goto done;
            }
    if (sp.unk < 0 || sp.unk >= n) {
        st = lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: unk_id %d outside the %lld pieces", label,
                     sp.unk, (long long)n);
        goto done;
    }
    t->kind             = LQ_TOK_SPM;
    t->unk              = sp.unk;
    t->bos              = sp.bos >= 0 && sp.bos < n ? sp.bos : -1;
    t->eos              = sp.eos >= 0 && sp.eos < n ? sp.eos : -1;
    t->adds_bos         = t->bos >= 0; /* LlamaTokenizer(Fast) add_bos_token default */
    t->byte_fallback    = sp.byte_fallback;
    t->add_dummy_prefix = sp.add_dummy_prefix;
    t->remove_extra_ws  = sp.remove_extra_ws;
    t->escape_ws        = sp.escape_ws;
done:
    free(type);
    free(tmp);
    return st;
}

/* ----------------------------------------------------------------------------------------
 */
typedef struct ssym {
    int64_t start; /* bytes of the normalized text */
    int32_t len;
    int32_t id; /* piece, or -1 when the span is no piece */
    int64_t prev, next, ver;
} ssym;

/* SentencePiece's UTF-8 decoding: a malformed sequence counts as one byte. */
static int32_t char_len(const unsigned char *s, int64_t n) {
    unsigned c = s[0];
    int32_t  l = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 1;
    if (l > n)
        return 1;
    for (int32_t i = 1; i < l; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 1;
    return l;
}

static int try_merge(const lq_tokenizer *t, const char *txt, const ssym *s, int64_t a, heap *h) {
    int64_t b = s[a].next;
    if (b < 0)
        return 0;
    int32_t id = lq_tok_lookup(t, txt + s[a].start, s[a].len + s[b].len);
    if (id < 0)
        return 0;
    cand c = {t->score[id], id, a, b, (int32_t)s[a].ver, (int32_t)s[b].ver};
    return lq_tok_heap_push(h, c);
}

lq_status lq_tok_encode_spm(const lq_tokenizer *t, const char *text, int64_t len, int add_bos,
                            int32_t **ids, int64_t *n_ids, lq_err *err) {
    /* Normalize: each byte grows to at most 3 (' ' -> U+2581), plus the dummy
     * prefix. */
    char     *nt  = malloc((size_t)(3 * len + 4));
    ssym     *s   = malloc((size_t)(len + 2) * sizeof *s);
    int32_t  *out = NULL;
    heap      h   = {0};
    lq_status st  = LQ_OK;
    if (!nt || !s) {
        st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory for %lld bytes", (long long)len);
        goto done;
    }
    int64_t a = 0, e = len;
    if (t->remove_extra_ws) {
        while (a < e && text[a] == ' ')
            a++;
        while (e > a && text[e - 1] == ' ')
            e--;
    }
    int64_t m = 0;
    if (e > a && t->add_dummy_prefix)
        nt[m++] = ' ';
    for (int64_t i = a; i < e; i++) {
        if (t->remove_extra_ws && text[i] == ' ' && i > a && text[i - 1] == ' ')
            continue;
        nt[m++] = text[i];
    }
    if (t->escape_ws) { /* expand in place from the back */
        int64_t sp = 0;
        for (int64_t i = 0; i < m; i++)
            sp += nt[i] == ' ';
        for (int64_t i = m - 1, j = m + 2 * sp - 1; i >= 0; i--) {
            if (nt[i] == ' ') {
                nt[j--] = (char)0x81;
                nt[j--] = (char)0x96;
                nt[j--] = (char)0xe2;
            } else {
                nt[j--] = nt[i];
            }
        }
        m += 2 * sp;
    }
    /* Initial symbols. */
    int64_t ns = 0;
    for (int64_t i = 0; i < m;) {
        int32_t l = 0, id = -1;
        for (int64_t u = 0; u < t->nuser; u++) {
            int32_t pid = t->user[u], pl = t->plen[pid];
            if (pl <= m - i && !memcmp(nt + i, t->piece[pid], (size_t)pl)) {
                l  = pl;
                id = pid;
                break;
            }
        }
        if (!l) {
            l  = char_len((const unsigned char *)nt + i, m - i);
            id = lq_tok_lookup(t, nt + i, l);
        }
        s[ns] = (ssym){i, l, id, ns - 1, -1, 0};
        if (ns > 0)
            s[ns - 1].next = ns;
        ns++;
        i += l;
    }
    /* Segments: with ws_split, a U+2581 after another character starts a new word
     * that no merge crosses, so each word gets its own (small, cache-resident)
     * heap. */
    for (int64_t s0 = 0, s1; s0 < ns; s0 = s1) {
        s1 = s0 + 1;
        if (t->ws_split)
            while (s1 < ns &&
                   !(s[s1].len == 3 && !memcmp(nt + s[s1].start, "\xe2\x96\x81", 3) &&
                     !(s[s1 - 1].len == 3 && !memcmp(nt + s[s1 - 1].start, "\xe2\x96\x81", 3))))
                s1++;
        else
            s1 = ns;
        for (int64_t i = s0; i + 1 < s1; i++)
            if (try_merge(t, nt, s, i, &h) < 0) {
                st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
                goto done;
            }
        while (h.n > 0) {
            cand c = lq_tok_heap_pop(&h);
            if ((int32_t)s[c.left].ver != c.lver || (int32_t)s[c.right].ver != c.rver ||
                s[c.left].next != c.right)
                continue; /* stale */
            int64_t l = c.left, r = c.right;
            s[l].id = c.id;
            s[l].len += s[r].len;
            s[l].ver++;
            s[r].ver++;
            s[r].len  = 0;
            s[l].next = s[r].next;
            if (s[r].next >= 0)
                s[s[r].next].prev = l;
            if ((s[l].prev >= 0 && try_merge(t, nt, s, s[l].prev, &h) < 0) ||
                try_merge(t, nt, s, l, &h) < 0) {
                st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
                goto done;
            }
        }
    }
    /* Worst case: every byte falls back. */
    out = malloc((size_t)(m + 1) * sizeof *out);
    if (!out) {
        st = lq_fail(err, LQ_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    int64_t n = 0;
    if (add_bos && t->bos >= 0)
        out[n++] = t->bos;
    int prev_unk = 0;
    for (int64_t i = ns > 0 ? 0 : -1; i >= 0; i = s[i].next) {
        int unk = s[i].id < 0;
        if (!unk)
            out[n++] = s[i].id;
        else if (t->byte_fallback)
            for (int32_t k = 0; k < s[i].len; k++)
                out[n++] = t->byte_id[(unsigned char)nt[s[i].start + k]];
        else if (!prev_unk) /* sentencepiece merges a run of unknown pieces into one
                             */
            out[n++] = t->unk;
        prev_unk = unk;
    }
    *ids   = out;
    *n_ids = n;
    out    = NULL;
done:
    free(out);
    free(nt);
    free(s);
    free(h.v);
    return st;
}
