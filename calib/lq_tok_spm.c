/* SentencePiece tokenizer.model (BPE model type): a bounded protobuf reader for ModelProto and
 * an encoder following sentencepiece's normalizer.cc (identity rules: no precompiled charsmap),
 * bpe_model.cc (merge the adjacent pair whose merged piece has the best score, leftmost on
 * ties; user-defined pieces frozen; UNUSED pieces re-split) and sentencepiece_processor.cc
 * (unknown pieces decomposed into <0xNN> byte pieces when byte_fallback is on). */
#include "lq_tok_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PT_NORMAL = 1, PT_UNKNOWN = 2, PT_CONTROL = 3, PT_USER = 4, PT_UNUSED = 5, PT_BYTE = 6 };

struct lq_tok_spm {
    uint8_t   *type;   /* [n] piece type */
    lq_tok_map pieces; /* NORMAL, USER_DEFINED, UNUSED: what merges may produce */
    lq_tok_map resv;   /* CONTROL, UNKNOWN, BYTE */
    lq_tok_map user;   /* USER_DEFINED only, for the longest-prefix matcher */
    int32_t    user_max;
    uint8_t    user_first[32]; /* bitset of first bytes of user-defined pieces */
    int32_t    byte_id[256];
    int32_t    unk;
    int        byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws, has_unused;
    int        ws_cut; /* merges never cross a U+2581 that follows another character */
};

void lq_tok_spm_free(lq_tok_spm *s) {
    if (!s)
        return;
    free(s->type);
    lq_tok_map_free(&s->pieces);
    lq_tok_map_free(&s->resv);
    lq_tok_map_free(&s->user);
    free(s);
}

/* ---------------------------------------------------------------------------------------- */
/* Protobuf wire format, every read bounds-checked against the enclosing message. */
typedef struct pb {
    const uint8_t *p, *end;
} pb;

static int pb_varint(pb *r, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return -1;
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Next field key; 1 = got one, 0 = end of message, -1 = malformed. */
static int pb_key(pb *r, uint32_t *field, uint32_t *wt) {
    if (r->p >= r->end)
        return 0;
    uint64_t k;
    if (pb_varint(r, &k) < 0 || (k >> 3) == 0 || (k >> 3) > 0x1fffffff)
        return -1;
    *field = (uint32_t)(k >> 3);
    *wt    = (uint32_t)(k & 7);
    return 1;
}

static int pb_bytes(pb *r, pb *sub) {
    uint64_t n;
    if (pb_varint(r, &n) < 0 || n > (uint64_t)(r->end - r->p))
        return -1;
    sub->p   = r->p;
    sub->end = r->p + n;
    r->p += n;
    return 0;
}

static int pb_fixed32(pb *r, uint32_t *v) {
    if (r->end - r->p < 4)
        return -1;
    *v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
         (uint32_t)r->p[3] << 24;
    r->p += 4;
    return 0;
}

/* Skip a field of wire type wt (groups, types 3/4, are not used by ModelProto: malformed). */
static int pb_skip(pb *r, uint32_t wt) {
    uint64_t v;
    pb       sub;
    switch (wt) {
    case 0:
        return pb_varint(r, &v);
    case 1:
        if (r->end - r->p < 8)
            return -1;
        r->p += 8;
        return 0;
    case 2:
        return pb_bytes(r, &sub);
    case 5: {
        uint32_t x;
        return pb_fixed32(r, &x);
    }
    default:
        return -1;
    }
}

/* int32 fields travel as 64-bit two's complement varints. */
static int pb_int32(pb *r, uint32_t wt, int32_t *out) {
    uint64_t v;
    if (wt != 0 || pb_varint(r, &v) < 0)
        return -1;
    *out = (int32_t)(uint32_t)(v & 0xffffffffu);
    return 0;
}

#define PB_BAD(what)                                                                               \
    return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: malformed tokenizer.model (%s)", t->path,    \
                   what)

typedef struct spm_spec {
    int32_t model_type, unk_id, bos_id, eos_id;
    int     byte_fallback, ws_suffix, add_dummy_prefix, remove_extra_ws, escape_ws;
    int64_t charsmap_len;
    char    norm_name[64];
} spm_spec;

static lq_status parse_trainer(pb r, spm_spec *sp, lq_tokenizer *t, lq_err *err) {
    uint32_t f, wt;
    int      k;
    while ((k = pb_key(&r, &f, &wt)) == 1) {
        int32_t v  = 0;
        int     rc = 0;
        switch (f) {
        case 3:
            rc = pb_int32(&r, wt, &sp->model_type);
            break;
        case 24:
            rc = pb_int32(&r, wt, &v), sp->ws_suffix = v != 0;
            break;
        case 35:
            rc = pb_int32(&r, wt, &v), sp->byte_fallback = v != 0;
            break;
        case 40:
            rc = pb_int32(&r, wt, &sp->unk_id);
            break;
        case 41:
            rc = pb_int32(&r, wt, &sp->bos_id);
            break;
        case 42:
            rc = pb_int32(&r, wt, &sp->eos_id);
            break;
        default:
            rc = pb_skip(&r, wt);
        }
        if (rc < 0)
            PB_BAD("trainer_spec field");
    }
    if (k < 0)
        PB_BAD("trainer_spec key");
    return LQ_OK;
}

static lq_status parse_normalizer(pb r, spm_spec *sp, lq_tokenizer *t, lq_err *err) {
    uint32_t f, wt;
    int      k;
    while ((k = pb_key(&r, &f, &wt)) == 1) {
        int32_t v  = 0;
        int     rc = 0;
        pb      sub;
        switch (f) {
        case 1:
            if (wt != 2 || pb_bytes(&r, &sub) < 0) {
                rc = -1;
                break;
            }
            snprintf(sp->norm_name, sizeof sp->norm_name, "%.*s",
                     (int)(sub.end - sub.p < 60 ? sub.end - sub.p : 60), (const char *)sub.p);
            break;
        case 2:
            if (wt != 2 || pb_bytes(&r, &sub) < 0)
                rc = -1;
            else
                sp->charsmap_len = sub.end - sub.p;
            break;
        case 3:
            rc = pb_int32(&r, wt, &v), sp->add_dummy_prefix = v != 0;
            break;
        case 4:
            rc = pb_int32(&r, wt, &v), sp->remove_extra_ws = v != 0;
            break;
        case 5:
            rc = pb_int32(&r, wt, &v), sp->escape_ws = v != 0;
            break;
        default:
            rc = pb_skip(&r, wt);
        }
        if (rc < 0)
            PB_BAD("normalizer_spec field");
    }
    if (k < 0)
        PB_BAD("normalizer_spec key");
    return LQ_OK;
}

/* One SentencePiece message: piece (1), score (2, float), type (3, default NORMAL). */
static lq_status parse_piece(pb r, lq_tokenizer *t, int64_t id, lq_err *err) {
    uint32_t f, wt;
    int      k, have = 0;
    int32_t  type = PT_NORMAL;
    while ((k = pb_key(&r, &f, &wt)) == 1) {
        pb       sub;
        uint32_t bits;
        if (f == 1) {
            if (wt != 2 || pb_bytes(&r, &sub) < 0)
                PB_BAD("piece string");
            int64_t n = sub.end - sub.p;
            if (n > LQ_TOK_MAX_PIECE)
                return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: piece %lld is %lld bytes long",
                               t->path, (long long)id, (long long)n);
            free(t->piece[id]);
            t->piece[id] = malloc((size_t)n + 1);
            if (!t->piece[id])
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            memcpy(t->piece[id], sub.p, (size_t)n);
            t->piece[id][n] = 0;
            t->plen[id]     = (int32_t)n;
            have            = 1;
        } else if (f == 2) {
            if (wt != 5 || pb_fixed32(&r, &bits) < 0)
                PB_BAD("piece score");
            memcpy(&t->score[id], &bits, 4);
        } else if (f == 3) {
            if (pb_int32(&r, wt, &type) < 0)
                PB_BAD("piece type");
        } else if (pb_skip(&r, wt) < 0) {
            PB_BAD("piece field");
        }
    }
    if (k < 0)
        PB_BAD("piece key");
    if (!have || t->plen[id] == 0)
        return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: piece %lld is empty", t->path,
                       (long long)id);
    if (type < PT_NORMAL || type > PT_BYTE)
        return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: piece %lld has unknown type %d", t->path,
                       (long long)id, type);
    t->spm->type[id] = (uint8_t)type;
    return LQ_OK;
}

lq_status lq_tok_spm_load(const uint8_t *buf, size_t len, lq_tokenizer *t, lq_err *err) {
    spm_spec sp = {.model_type       = 1, /* proto default: UNIGRAM */
                   .unk_id           = 0,
                   .bos_id           = 1,
                   .eos_id           = 2,
                   .add_dummy_prefix = 1,
                   .remove_extra_ws  = 1,
                   .escape_ws        = 1};
    pb       r  = {buf, buf + len};
    uint32_t f, wt;
    int      k;
    int64_t  n       = 0;
    pb       trainer = {buf, buf}, norm = {buf, buf};
    /* Pass 1: count pieces and find the specs (the last occurrence wins, as in protobuf). */
    while ((k = pb_key(&r, &f, &wt)) == 1) {
        pb sub;
        if (f >= 1 && f <= 3) {
            if (wt != 2 || pb_bytes(&r, &sub) < 0)
                PB_BAD("top-level field");
            if (f == 1)
                n++;
            else if (f == 2)
                trainer = sub;
            else
                norm = sub;
        } else if (pb_skip(&r, wt) < 0) {
            PB_BAD("top-level field");
        }
    }
    if (k < 0)
        PB_BAD("top-level key");
    LQ_TRY(parse_trainer(trainer, &sp, t, err));
    LQ_TRY(parse_normalizer(norm, &sp, t, err));
    if (sp.model_type != 2) {
        static const char *const names[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
        return lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                       "%s: SentencePiece model type %s (%d) is not supported (BPE only)", t->path,
                       sp.model_type >= 1 && sp.model_type <= 4 ? names[sp.model_type] : "unknown",
                       sp.model_type);
    }
    if (sp.charsmap_len > 0)
        return lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                       "%s: normalizer \"%s\" with a precompiled charsmap is not supported "
                       "(identity normalization only)",
                       t->path, sp.norm_name);
    if (sp.ws_suffix)
        return lq_fail(err, LQ_ERR_TOKENIZER_UNSUPPORTED,
                       "%s: treat_whitespace_as_suffix is not supported", t->path);
    if (n < 1 || n > LQ_TOK_MAX_VOCAB)
        return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: %lld pieces", t->path, (long long)n);
    t->spm = calloc(1, sizeof *t->spm);
    if (!t->spm)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    lq_tok_spm *s = t->spm;
    LQ_TRY(lq_tok_alloc_pieces(t, n, err));
    s->type = calloc((size_t)n, 1);
    if (!s->type || lq_tok_map_init(&s->pieces, n) < 0 || lq_tok_map_init(&s->resv, 512) < 0 ||
        lq_tok_map_init(&s->user, 16) < 0)
        return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    /* Pass 2: the pieces. */
    r         = (pb){buf, buf + len};
    int64_t i = 0;
    while (pb_key(&r, &f, &wt) == 1) {
        pb sub;
        if (f == 1) {
            pb_bytes(&r, &sub); /* validated in pass 1 */
            LQ_TRY(parse_piece(sub, t, i, err));
            i++;
        } else {
            pb_skip(&r, wt);
        }
    }
    s->unk = -1;
    for (i = 0; i < n; i++) {
        int         ty  = s->type[i];
        int         nrm = ty == PT_NORMAL || ty == PT_USER || ty == PT_UNUSED;
        lq_tok_map *m   = nrm ? &s->pieces : &s->resv;
        int         rc  = lq_tok_map_put(m, t->piece[i], t->plen[i], (int32_t)i);
        if (rc < 0)
            return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        if (rc == 0) /* sentencepiece refuses these too ("is already defined") */
            return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT,
                           "%s: piece %lld \"%.40s\" is defined twice", t->path, (long long)i,
                           t->piece[i]);
        if (ty == PT_USER) {
            if (lq_tok_map_put(&s->user, t->piece[i], t->plen[i], (int32_t)i) < 0)
                return lq_fail(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            if (t->plen[i] > s->user_max)
                s->user_max = t->plen[i];
            unsigned char c0 = (unsigned char)t->piece[i][0];
            s->user_first[c0 >> 3] |= (uint8_t)(1u << (c0 & 7));
        }
        if (ty == PT_UNKNOWN) {
            if (s->unk >= 0)
                return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: more than one unknown piece",
                               t->path);
            s->unk = (int32_t)i;
        }
        if (ty == PT_UNUSED)
            s->has_unused = 1;
        if (ty == PT_BYTE && !sp.byte_fallback)
            return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT,
                           "%s: byte piece %lld but byte_fallback is off", t->path, (long long)i);
    }
    if (s->unk < 0)
        return lq_fail(err, LQ_ERR_TOKENIZER_FORMAT, "%s: no unknown piece (<unk>)", t->path);
    for (int b = 0; b < 256; b++) {
        char nm[8];
        snprintf(nm, sizeof nm, "<0x%02X>", b);
        int32_t id = lq_tok_map_get(&s->resv, nm, 6);
        if (id < 0)
            id = lq_tok_map_get(&s->pieces, nm, 6);
        s->byte_id[b] = id >= 0 ? id : s->unk;
    }
    /* With no mergeable piece holding U+2581 after another character, the normalized text can
     * be cut before every such U+2581 and the words merged independently (and cached): the
     * result is the same as merging the whole text at once. UNUSED pieces are re-split from
     * halves recorded anywhere in the text, so they keep the whole-text path. */
    s->ws_cut = sp.escape_ws && !s->has_unused;
    for (i = 0; s->ws_cut && i < n; i++) {
        int ty = s->type[i];
        if (ty != PT_NORMAL && ty != PT_USER && ty != PT_UNUSED)
            continue;
        for (int32_t q = 1; q + 3 <= t->plen[i]; q++)
            if (!memcmp(t->piece[i] + q, "\xe2\x96\x81", 3) &&
                (q < 3 || memcmp(t->piece[i] + q - 3, "\xe2\x96\x81", 3))) {
                s->ws_cut = 0;
                break;
            }
    }
    s->byte_fallback    = sp.byte_fallback;
    s->add_dummy_prefix = sp.add_dummy_prefix;
    s->remove_extra_ws  = sp.remove_extra_ws;
    s->escape_ws        = sp.escape_ws;
    t->kind             = LQ_TOK_SPM;
    t->bos = (sp.bos_id >= 0 && sp.bos_id < n && s->type[sp.bos_id] == PT_CONTROL) ? sp.bos_id : -1;
    t->eos = (sp.eos_id >= 0 && sp.eos_id < n && s->type[sp.eos_id] == PT_CONTROL) ? sp.eos_id : -1;
    t->adds_bos = t->bos >= 0; /* Llama-style SentencePiece models are used with BOS */
    return LQ_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Encoding. */

/* Longest user-defined piece at s[0..n), 0 if none. */
static int64_t user_match(const lq_tok_spm *s, const char *p, int64_t n) {
    unsigned char c0 = (unsigned char)p[0];
    if (!s->user.n || !(s->user_first[c0 >> 3] & (1u << (c0 & 7))))
        return 0;
    for (int64_t l = n < s->user_max ? n : s->user_max; l > 0; l--)
        if (lq_tok_map_get(&s->user, p, l) >= 0)
            return l;
    return 0;
}

/* normalizer.cc Normalize() without a charsmap: ill-formed UTF-8 bytes become U+FFFD one byte
 * at a time, extra spaces dropped if asked, the dummy prefix added, spaces escaped as U+2581.
 * out needs 3 * len + 3 bytes. */
static int64_t normalize(const lq_tok_spm *s, const char *in, int64_t len, int dummy, char *out) {
    static const char ws[] = "\xe2\x96\x81";
    int64_t           i = 0, o = 0;
    if (s->remove_extra_ws)
        while (i < len && in[i] == ' ')
            i++;
    if (i == len)
        return 0;
    if (s->add_dummy_prefix && dummy) {
        if (s->escape_ws)
            memcpy(out + o, ws, 3), o += 3;
        else
            out[o++] = ' ';
    }
    int prev_space = s->remove_extra_ws;
    while (i < len) {
        const char *u  = in + i;
        int64_t     ul = user_match(s, u, len - i), used;
        if (ul > 0) {
            used = ul;
        } else {
            uint32_t cp;
            ul = lq_tok_utf8_dec((const unsigned char *)u, len - i, &cp);
            if (ul == 0) {
                u    = "\xef\xbf\xbd";
                ul   = 3;
                used = 1;
            } else {
                used = ul;
            }
        }
        int64_t a = 0;
        if (prev_space)
            while (a < ul && u[a] == ' ')
                a++;
        if (a < ul) {
            for (int64_t k = a; k < ul; k++) {
                if (s->escape_ws && u[k] == ' ')
                    memcpy(out + o, ws, 3), o += 3;
                else
                    out[o++] = u[k];
            }
            prev_space = u[ul - 1] == ' ';
        }
        i += used;
        if (!s->remove_extra_ws)
            prev_space = 0;
    }
    if (s->remove_extra_ws) {
        if (s->escape_ws)
            while (o >= 3 && !memcmp(out + o - 3, ws, 3))
                o -= 3;
        else
            while (o >= 1 && out[o - 1] == ' ')
                o--;
    }
    return o;
}

typedef struct ssym {
    int64_t start, prev, next;
    int32_t len;
    int32_t freeze;
} ssym;

/* Where an UNUSED piece was last seen formed from two halves (bpe_model.cc rev_merge). */
typedef struct rev_ent {
    int64_t start;
    int32_t llen, rlen;
} rev_ent;

static int32_t piece_to_id(const lq_tok_spm *s, const char *p, int64_t n) {
    int32_t id = lq_tok_map_get(&s->resv, p, n);
    if (id < 0)
        id = lq_tok_map_get(&s->pieces, p, n);
    return id >= 0 ? id : s->unk;
}

static int add_pair(const lq_tokenizer *t, const char *norm, ssym *sy, int64_t l, int64_t r,
                    lq_tok_heap *h, rev_ent *rev) {
    if (l < 0 || r < 0 || sy[l].freeze || sy[r].freeze)
        return 0;
    int64_t n  = (int64_t)sy[l].len + sy[r].len;
    int32_t id = lq_tok_map_get(&t->spm->pieces, norm + sy[l].start, n);
    if (id < 0)
        return 0;
    if (rev && t->spm->type[id] == PT_UNUSED)
        rev[id] = (rev_ent){sy[l].start, sy[l].len, sy[r].len};
    lq_tok_cand c = {-(double)t->score[id], l, n, id};
    return lq_tok_heap_push(h, c);
}

/* Emit one final piece: re-split UNUSED pieces into their halves (explicit stack, halves are
 * strictly shorter), then byte-fallback unknowns. */
static int emit(const lq_tokenizer *t, const char *norm, int64_t start, int64_t len,
                const rev_ent *rev, int64_t *stk, lq_tok_ids *out) {
    const lq_tok_spm *s  = t->spm;
    int64_t           sp = 0;
    stk[sp++]            = start;
    stk[sp++]            = len;
    while (sp > 0) {
        int64_t l = stk[--sp], b = stk[--sp];
        int32_t id = piece_to_id(s, norm + b, l);
        if (rev && id >= 0 && s->type[id] == PT_UNUSED && rev[id].llen > 0 &&
            rev[id].llen + rev[id].rlen == l) {
            const rev_ent *e = &rev[id];
            /* right half pushed first so the left half comes out first */
            stk[sp++] = e->start + e->llen;
            stk[sp++] = e->rlen;
            stk[sp++] = e->start;
            stk[sp++] = e->llen;
            continue;
        }
        if (id == s->unk && s->byte_fallback) {
            for (int64_t k = 0; k < l; k++)
                if (lq_tok_ids_push(out, s->byte_id[(unsigned char)norm[b + k]]) < 0)
                    return -1;
        } else if (lq_tok_ids_push(out, id) < 0) {
            return -1;
        }
    }
    return 0;
}

/* BPE over norm[b, e) (one word, or the whole text), appending the ids. */
typedef struct spm_ws {
    ssym       *sy;
    rev_ent    *rev;
    int64_t    *stk;
    lq_tok_heap h;
} spm_ws;

static int bpe_range(const lq_tokenizer *t, const char *norm, int64_t b, int64_t e, spm_ws *w,
                     lq_tok_ids *out) {
    const lq_tok_spm *s  = t->spm;
    ssym             *sy = w->sy;
    int64_t           ns = 0;
    for (int64_t i = b; i < e;) {
        int64_t l      = user_match(s, norm + i, e - i);
        int     freeze = l > 0;
        if (!freeze) {
            static const uint8_t k_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
            l                              = k_len[(unsigned char)norm[i] >> 4];
            if (l > e - i)
                l = e - i;
        }
        sy[ns] = (ssym){i, ns - 1, -1, (int32_t)l, freeze};
        if (ns > 0)
            sy[ns - 1].next = ns;
        ns++;
        i += l;
    }
    w->h.n = 0;
    for (int64_t i = 0; i + 1 < ns; i++)
        if (add_pair(t, norm, sy, i, i + 1, &w->h, w->rev) < 0)
            return -1;
    while (w->h.n > 0) {
        lq_tok_cand c = lq_tok_heap_pop(&w->h);
        int64_t     l = c.pos, r = sy[l].next;
        /* stale when either side was consumed or grew since the candidate was pushed */
        if (sy[l].len == 0 || r < 0 || sy[r].len == 0 || (int64_t)sy[l].len + sy[r].len != c.aux)
            continue;
        sy[l].len  = (int32_t)c.aux;
        sy[l].next = sy[r].next;
        if (sy[r].next >= 0)
            sy[sy[r].next].prev = l;
        sy[r].len = 0;
        if (add_pair(t, norm, sy, sy[l].prev, l, &w->h, w->rev) < 0 ||
            add_pair(t, norm, sy, l, sy[l].next, &w->h, w->rev) < 0)
            return -1;
    }
    for (int64_t i = ns > 0 ? 0 : -1; i >= 0; i = sy[i].next)
        if (emit(t, norm, sy[i].start, sy[i].len, w->rev, w->stk, out) < 0)
            return -1;
    return 0;
}

static int is_cut(const char *norm, int64_t nn, int64_t p) {
    static const char ws[] = "\xe2\x96\x81";
    return p >= 3 && p + 3 <= nn && !memcmp(norm + p, ws, 3) && memcmp(norm + p - 3, ws, 3);
}

/* Encode text[len] and append to out; dummy: the text starts the input (dummy prefix). */
static lq_status encode_part(const lq_tokenizer *t, const char *text, int64_t len, int dummy,
                             lq_tok_ids *out, lq_err *err) {
    const lq_tok_spm *s     = t->spm;
    lq_status         st    = LQ_OK;
    char             *norm  = malloc((size_t)(3 * len + 4));
    spm_ws            w     = {0};
    lq_tok_map        cache = {0};
    lq_tok_ids        pool  = {0};
    int64_t          *runs = NULL, nruns = 0, capruns = 0;
    if (!norm)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    int64_t nn = normalize(s, text, len, dummy, norm);
    if (nn == 0)
        goto done;
    w.sy = malloc((size_t)nn * sizeof *w.sy);
    if (s->has_unused)
        w.rev = calloc((size_t)t->n, sizeof *w.rev);
    w.stk = malloc(sizeof *w.stk * (size_t)(s->has_unused ? 2 * (LQ_TOK_MAX_PIECE + 2) : 4));
    if (!w.sy || !w.stk || (s->has_unused && !w.rev) || lq_tok_map_init(&cache, 1024) < 0)
        LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
    for (int64_t b = 0; b < nn;) {
        int64_t e = nn;
        if (s->ws_cut)
            for (e = b + 1; e < nn && !is_cut(norm, nn, e); e++)
                ;
        int32_t r = e - b <= 256 ? lq_tok_map_get(&cache, norm + b, e - b) : -1;
        if (r >= 0) {
            for (int64_t k = runs[2 * r]; k < runs[2 * r] + runs[2 * r + 1]; k++)
                if (lq_tok_ids_push(out, pool.v[k]) < 0)
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            b = e;
            continue;
        }
        int64_t from = out->n;
        if (bpe_range(t, norm, b, e, &w, out) < 0)
            LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
        if (e - b <= 256 && nruns < INT32_MAX) {
            if (nruns == capruns) {
                int64_t  nc = capruns ? 2 * capruns : 256;
                int64_t *nv = realloc(runs, (size_t)(2 * nc) * sizeof *nv);
                if (!nv)
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
                runs    = nv;
                capruns = nc;
            }
            runs[2 * nruns]     = pool.n;
            runs[2 * nruns + 1] = out->n - from;
            for (int64_t k = from; k < out->n; k++)
                if (lq_tok_ids_push(&pool, out->v[k]) < 0)
                    LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            if (lq_tok_map_put(&cache, norm + b, (int32_t)(e - b), (int32_t)nruns) < 0)
                LQ_FAIL_GOTO(err, LQ_ERR_NOMEM, "%s: out of memory", t->path);
            nruns++;
        }
        b = e;
    }
done:
    free(norm);
    free(w.sy);
    free(w.rev);
    free(w.stk);
    free(w.h.v);
    lq_tok_map_free(&cache);
    free(pool.v);
    free(runs);
    return st;
}

/* A newline no piece contains is a symbol no merge takes part in, so the text can be encoded a
 * part at a time, cut after newlines, with the same ids (with extra whitespace removal the
 * normalizer looks across lines, so not then). Parts of LQ_SPM_PART bytes bound the working set
 * (normalized text, symbols, merge heap) by the part instead of the input. */
#define LQ_SPM_PART (8 << 20)
static int newline_isolated(const lq_tokenizer *t) {
    if (t->spm->remove_extra_ws)
        return 0;
    for (int64_t i = 0; i < t->n; i++)
        if (t->piece[i] && memchr(t->piece[i], '\n', (size_t)t->plen[i]))
            return 0;
    return 1;
}

lq_status lq_tok_spm_encode(const lq_tokenizer *t, const char *text, int64_t len, int cont,
                            lq_tok_ids *out, lq_err *err) {
    const lq_tok_spm *s    = t->spm;
    const int64_t     out0 = out->n;
    if (len <= LQ_SPM_PART || !newline_isolated(t)) {
        LQ_TRY(encode_part(t, text, len, !cont, out, err));
    } else {
        for (int64_t a = 0; a < len;) {
            int64_t     b  = a + LQ_SPM_PART < len ? a + LQ_SPM_PART : len;
            const char *nl = b < len ? memchr(text + b, '\n', (size_t)(len - b)) : NULL;
            b              = nl ? nl - text + 1 : len;
            LQ_TRY(encode_part(t, text + a, b - a, a == 0 && !cont, out, err));
            a = b;
        }
    }
    /* sentencepiece_processor.cc merges a run of unknown pieces into one <unk> (without byte
     * fallback; with it, unknowns became bytes above): over the whole output, parts joined */
    if (!s->byte_fallback) {
        int64_t k = out0;
        for (int64_t i = out0; i < out->n; i++)
            if (!(out->v[i] == s->unk && k > out0 && out->v[k - 1] == s->unk))
                out->v[k++] = out->v[i];
        out->n = k;
    }
    return LQ_OK;
}
